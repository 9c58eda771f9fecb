/* fuzz_engine.c — libFuzzer target for the engine file reader (kiln_engine_buffer_read). Each input is
 * read twice: as it is (which mostly exercises the header checks and the checksums), and after
 * kiln_engine_reseal has recomputed its checksums, so that mutations reach the decoding of the graph
 * section (counts, string and tensor indices, dims, attribute payloads, weight ranges); that copy
 * also gets this kiln's version, so seeds stay useful across releases. A graph that loads has the
 * packed-weights tag of each node checked as the cpu backend checks it at load (packed_weights.h).
 * The seeds in fuzz/corpus/fuzz_engine/ are written by `test_engine_format --write-seeds DIR` and
 * (packed.seed) `test_packed_weights --write-seed DIR`; any engine file (`kiln build MODEL.onnx -o
 * seed.kiln`) is a good seed too. */
#include "backends/cpu/packed_weights.h"
#include "engine/engine_format.h"
#include "fuzz_engine_util.h"

#include <stdint.h>
#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Checks every node's packed-weights tag against its weight constant, as either layout family. */
static void check_packed_tags(const kiln_graph *g) {
    for (int i = 0; i < g->nnodes; i++)
        for (int want = KILN_PACKED_MATMUL; want <= KILN_PACKED_CONV_ROWS; want++) {
            kiln_packed_tag tag;
            const float *panels;
            float *owned;
            if (kiln_cpu_stored_panels(g, &g->nodes[i], want, &tag, &panels, &owned) == KILN_OK) free(owned);
        }
}

/* Reads image[0..size) and frees the graph when it loads. */
static void read_once(const uint8_t *image, size_t size) {
    kiln_graph *g = NULL;
    kiln_engine_meta meta;
    if (kiln_engine_buffer_read(image, size, "cpu", &g, &meta) != KILN_OK) return;
    check_packed_tags(g);
    kiln_graph_free(g);
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
