/* fuzz_safetensors.c — libFuzzer target for the safetensors reader (hf/safetensors.c), the first
 * thing `kiln build --hf DIR` and `kiln generate DIR` read from a downloaded checkpoint. Each input is
 * parsed as a whole file image (kiln_safetensors_parse, the path kiln_safetensors_open takes after
 * mapping), and once more with its 8-byte header length set to end the header at the last '}' before
 * the first NUL byte, so that mutations that grow or shrink the JSON header still reach the per-tensor
 * checks. Every tensor that loads is looked up by name and its bytes read; F32/F16/BF16 ones are
 * converted as the checkpoint loader converts weights. Seeds: fuzz/corpus/fuzz_safetensors/ (files
 * the safetensors package wrote: every dtype, empty tensors, metadata, a slice of models/kjv-gpt2). */
#include "fuzz_util.h"
#include "hf/checkpoint.h"
#include "hf/safetensors.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void parse_once(const uint8_t *image, size_t size) {
    kiln_safetensors st;
    if (kiln_safetensors_parse(image, size, "fuzz", &st) != KILN_OK) return;
    for (int i = 0; i < st.n_tensors; i++) {
        const kiln_st_tensor *t = &st.tensors[i];
        if (kiln_safetensors_find(&st, t->name) != t) abort(); /* names are unique */
        if (t->nbytes && fuzz_hash(FUZZ_HASH_SEED, t->data, t->nbytes) == 0) abort(); /* touch every byte */
        if (t->dtype != KILN_F32 && t->dtype != KILN_F16 && t->dtype != KILN_BF16) continue;
        float *f = malloc(t->nbytes / kiln_dtype_size(t->dtype) * sizeof *f + 1);
        if (f && kiln_hf_tensor_to_f32(t, f) != KILN_OK) abort();
        free(f);
    }
    kiln_safetensors_close(&st);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fuzz_silence_log();
    parse_once(data, size);
    if (size < 10) return 0;
    const uint8_t *nul = memchr(data + 8, 0, size - 8);
    size_t end = nul ? (size_t)(nul - data) : size;
    while (end > 8 && data[end - 1] != '}') end--;
    if (end <= 9) return 0;
    uint8_t *copy = malloc(size);
    if (!copy) return 0;
    memcpy(copy, data, size);
    for (int i = 0; i < 8; i++) copy[i] = (uint8_t)((end - 8) >> (8 * i));
    parse_once(copy, size);
    free(copy);
    return 0;
}
