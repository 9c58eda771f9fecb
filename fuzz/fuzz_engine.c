/* fuzz_engine.c — libFuzzer target for the engine file reader (kiln_engine_buffer_read). Each input is
 * read twice: as it is (which mostly exercises the header checks and the checksums), and after
 * kiln_engine_reseal has recomputed its checksums, so that mutations reach the decoding of the graph
 * section (counts, string and tensor indices, dims, attribute payloads, weight ranges); that copy
 * also gets this kiln's version, so seeds stay useful across releases. The seeds in
 * fuzz/corpus/fuzz_engine/ are written by `test_engine_format --write-seeds DIR`; any engine file
 * (`kiln build MODEL.onnx -o seed.kiln`) is a good seed too. */
#include "engine/engine_format.h"
#include "fuzz_engine_util.h"

#include <stdint.h>

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
    fuzz_read_engine_twice(data, size, read_once);
    return 0;
}
