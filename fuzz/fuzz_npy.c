/* fuzz_npy.c — libFuzzer target for the .npy reader (core/npy.c: `kiln run --input x.npy`, `kiln
 * compare`, reference outputs). Each input is parsed as it is, and once more with its header length
 * set to end at the first newline after the magic and version (where numpy ends a header), so that
 * mutations that grow or shrink the header dictionary still reach the dictionary parser and the
 * data-size checks. A tensor that loads has all its bytes read. Seeds: fuzz/corpus/fuzz_npy/
 * (arrays numpy wrote: every dtype kiln reads, format versions 1 and 2, 0-d and empty arrays). */
#include "core/npy.h"
#include "fuzz_util.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void parse_once(const uint8_t *image, size_t size) {
    kiln_tensor t;
    if (kiln_npy_parse(image, size, "fuzz", &t) != KILN_OK) return;
    if (t.nbytes && fuzz_hash(FUZZ_HASH_SEED, t.data, t.nbytes) == 0) abort(); /* touch every byte */
    kiln_tensor_release(&t);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fuzz_silence_log();
    parse_once(data, size);
    if (size < 12) return 0;
    size_t hoff = data[6] == 1 ? 10 : 12;
    const uint8_t *nl = memchr(data + hoff, '\n', size - hoff);
    if (!nl) return 0;
    size_t hlen = (size_t)(nl - data) + 1 - hoff;
    uint8_t *copy = malloc(size);
    if (!copy) return 0;
    memcpy(copy, data, size);
    for (size_t i = 0; i < hoff - 8; i++) copy[8 + i] = (uint8_t)(hlen >> (8 * i));
    parse_once(copy, size);
    free(copy);
    return 0;
}
