/* fuzz_engine_util.h — what the two engine-file targets (fuzz_engine, fuzz_llm_engine) share: each
 * input is read as it is, then again with this kiln's version stamped in and its checksums recomputed
 * (kiln_engine_reseal), so that mutations get past the header checks into the sections' decoding and
 * seeds stay useful across releases. Header-only: each target is one translation unit; include it
 * after the reader's own header (which brings kiln.h and the engine meta). */
#ifndef KILN_FUZZ_ENGINE_UTIL_H
#define KILN_FUZZ_ENGINE_UTIL_H

#include "engine/engine_layout.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* read_once(data, size), then read_once over the resealed copy (inputs shorter than a header once). */
static inline void fuzz_read_engine_twice(const uint8_t *data, size_t size,
                                          void (*read_once)(const uint8_t *image, size_t size)) {
    read_once(data, size);
    if (size < KILN_ENGINE_HEADER_SIZE) return;
    uint8_t *copy = malloc(size);
    if (!copy) return;
    memcpy(copy, data, size);
    memset(copy + KILN_EH_KILN_VERSION, 0, KILN_EH_TARGET - KILN_EH_KILN_VERSION);
    memcpy(copy + KILN_EH_KILN_VERSION, KILN_VERSION_STRING, strlen(KILN_VERSION_STRING));
    kiln_engine_reseal(copy, size);
    read_once(copy, size);
    free(copy);
}

#endif
