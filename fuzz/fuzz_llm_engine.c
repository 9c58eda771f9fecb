/* fuzz_llm_engine.c — libFuzzer target for the LLM engine reader (llm/llm_engine_read.c and
 * llm_engine_config.c, through kiln_llm_engine_buffer_read: the header and section checks, the llm
 * config section, the tokenizer section and the tokenizer it holds, the tensor table against the
 * config). fuzz_engine covers the ONNX kind. As there, each input is read twice: as it is, and after
 * stamping this kiln's version and recomputing the checksums (kiln_engine_reseal), so that mutations
 * reach the sections' decoding. Seeds: fuzz/corpus/fuzz_llm_engine/ (tiny GPT-2 and Llama engines,
 * fp32 / fp16 / bf16 / weight-only int8 and int4, with and without a tokenizer, from fuzz/make_seeds.py --kiln). */
#include "llm/llm_engine.h"
#include "fuzz_engine_util.h" /* after llm_engine.h, which gives it kiln.h and the engine meta */
#include "fuzz_util.h"

#include <stdint.h>
#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Reads image[0..size) with its tokenizer, and checks what a successful read promises. */
static void read_once(const uint8_t *image, size_t size) {
    kiln_llm_engine_info info;
    kiln_tokenizer *tok = NULL;
    kiln_status s = kiln_llm_engine_buffer_read(image, size, "fuzz", &info, &tok);
    if (s == KILN_ERR_INVALID_ARGUMENT) s = kiln_llm_engine_buffer_read(image, size, "fuzz", &info, NULL); /* no tokenizer */
    if (s != KILN_OK) return;
    if (info.n_tensors < 1 || info.weight_bytes > size) abort();
    kiln_tokenizer_free(tok);
    kiln_llm_engine_info_free(&info);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fuzz_silence_log();
    fuzz_read_engine_twice(data, size, read_once);
    return 0;
}
