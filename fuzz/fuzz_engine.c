/* fuzz_engine.c — libFuzzer target for the engine file reader (kiln_engine_buffer_read). Each input is
 * read twice: as it is (which mostly exercises the header checks and the checksums), and after
 * kiln_engine_reseal has recomputed its checksums, so that mutations reach the decoding of the graph
 * section (counts, string and tensor indices, dims, attribute payloads, weight ranges); that copy
 * also gets this kiln's version, so seeds stay useful across releases. The seeds in
 * fuzz/corpus/fuzz_engine/ are written by `test_engine_format --write-seeds DIR`; any engine file
 * (`kiln build MODEL.onnx -o seed.kiln`) is a good seed too. */
#include "engine/engine_format.h"
#include "engine/engine_layout.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Reads image[0..size) and frees the graph when it loads. */
static void read_once(const uint8_t *image, size_t size) {
    kiln_graph *g = NULL;
    kiln_engine_meta meta;
    if (kiln_engine_buffer_read(image, size, "cpu", &g, &meta) == KILN_OK) kiln_graph_free(g);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static int quiet;
    if (!quiet) {
        kiln_log_set_level(KILN_LOG_ERROR);
        quiet = 1;
    }
    read_once(data, size);
    if (size < KILN_ENGINE_HEADER_SIZE) return 0;
    uint8_t *copy = malloc(size);
    if (!copy) return 0;
    memcpy(copy, data, size);
    memset(copy + KILN_EH_KILN_VERSION, 0, KILN_EH_TARGET - KILN_EH_KILN_VERSION);
    memcpy(copy + KILN_EH_KILN_VERSION, KILN_VERSION_STRING, strlen(KILN_VERSION_STRING));
    kiln_engine_reseal(copy, size);
    read_once(copy, size);
    free(copy);
    return 0;
}
