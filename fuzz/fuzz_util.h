/* fuzz_util.h — what several libFuzzer targets share: silencing kiln's log, and cutting an input into
 * pieces of varying sizes, so that the incremental parsers of kiln load see their bytes split at
 * every place a network read could split them. Header-only: each target is one translation unit. */
#ifndef KILN_FUZZ_UTIL_H
#define KILN_FUZZ_UTIL_H

#include "kiln/kiln.h"

#include <stddef.h>
#include <stdint.h>

static void fuzz_discard_log(kiln_log_level level, const char *msg, void *user) {
    (void)level, (void)msg, (void)user;
}

/* Routes kiln's log to nowhere (once per process): errors are expected and only slow the fuzzer. */
static inline void fuzz_silence_log(void) {
    static int quiet;
    if (!quiet) {
        kiln_log_set_callback(fuzz_discard_log, NULL);
        quiet = 1;
    }
}

/* The size of piece number i of a split described by `pattern` (any byte): sizes 1 to 16 that vary
 * from piece to piece, so a parser meets its delimiters split at every offset. */
static inline size_t fuzz_piece_size(uint8_t pattern, size_t i) {
    return 1 + ((pattern * 7u + (unsigned)i * (pattern | 1u)) & 15u);
}

/* FNV-1a over n bytes, continuing from h (start with FUZZ_HASH_SEED): a fingerprint of what a parser
 * produced, to compare two runs over the same input. */
#define FUZZ_HASH_SEED 14695981039346656037ull
static inline uint64_t fuzz_hash(uint64_t h, const void *data, size_t n) {
    const uint8_t *p = data;
    for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * 1099511628211ull;
    return h;
}

#endif
