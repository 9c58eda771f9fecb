/* fuzz_onnx.c — libFuzzer target for the ONNX frontend: imports the input as a ModelProto
 * (kiln_onnx_import_buffer; no base directory, so external data is refused rather than read from
 * disk) and, when that succeeds, runs what the build runs next — op resolution, topological sort
 * and shape inference, each only when the previous step succeeded (their preconditions) — then
 * frees everything. Errors are expected; crashes, leaks and sanitizer reports are the findings.
 * Seeds: fuzz/corpus/fuzz_onnx/ (the test models of tests/data and a few ONNX node-test
 * models); any .onnx file is a good seed. */
#include "frontends/onnx/onnx_import.h"
#include "ir/graph.h"

#include <stdint.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void discard_log(kiln_log_level level, const char *msg, void *user) {
    (void)level, (void)msg, (void)user;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static int quiet;
    if (!quiet) {
        kiln_log_set_callback(discard_log, NULL);
        quiet = 1;
    }
    kiln_graph *g = NULL;
    if (kiln_onnx_import_buffer(data, size, NULL, &g) != KILN_OK) return 0;
    if (kiln_graph_resolve_ops(g, NULL) == KILN_OK && kiln_graph_toposort(g) == KILN_OK)
        (void)kiln_graph_infer_shapes(g);
    kiln_graph_free(g);
    return 0;
}
