/* test_layer_precision.c — per-layer precision (src/layer_precision.c) without a GPU: glob matching,
 * rules over names and op types, the Casts inserted where precisions meet (every node then reads its
 * own precision), a rule that matches nothing, the rewritten graph computing the same outputs on the
 * CPU, and (with the cuda backend) the device dtypes the cuda engine's host side gives each value.
 * Usage: test_layer_precision REPO_ROOT */
#include "check.h"
#include "frontends/onnx/onnx_import.h"
#include "layer_precision.h"
#include "runtime/engine_internal.h"
#ifdef KILN_HAVE_CUDA
#include "backends/cuda/cuda_internal.h"
#endif

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char model[4096];

/* The sample CNN imported, ordered and shape-inferred (not optimized: every op keeps its name). */
static kiln_graph *load(void) {
    kiln_graph *g;
    REQUIRE_OK(kiln_onnx_import(model, &g));
    REQUIRE_OK(kiln_graph_resolve_ops(g, NULL));
    REQUIRE_OK(kiln_graph_toposort(g));
    REQUIRE_OK(kiln_graph_infer_shapes(g));
    return g;
}

static bool is_float(kiln_dtype t) { return t == KILN_F32 || t == KILN_F16 || t == KILN_BF16; }

static void test_glob(void) {
    CHECK(kiln_glob_match("*", ""));
    CHECK(kiln_glob_match("block1*", "block1_conv"));
    CHECK(!kiln_glob_match("block1*", "xblock1_conv"));
    CHECK(kiln_glob_match("*conv", "block2_conv"));
    CHECK(kiln_glob_match("b?ock*_c*v", "block3_conv"));
    CHECK(!kiln_glob_match("b?ock", "block3"));
    CHECK(kiln_glob_match("/encoder/*/Softmax", "/encoder/layer.0/attention/Softmax"));
    CHECK(!kiln_glob_match("Softmax", "Softmax_1"));
}

/* Every node reads float values in its own precision, except the inserted Casts (whose job that is). */
static void check_boundaries(const kiln_graph *g, const uint8_t *prec, kiln_precision engine) {
    for (int i = 0; i < g->nnodes; i++) {
        const kiln_node *n = &g->nodes[i];
        bool cast = !strcmp(n->op_type, "Cast") && strchr(n->name, ':');
        for (int k = 0; k < n->ninputs && !cast; k++) {
            int v = n->inputs[k];
            if (v < 0 || !is_float(g->values[v].dtype) || g->values[v].constant) continue;
            int p = g->values[v].producer;
            kiln_precision stored = p >= 0 ? (kiln_precision)prec[p] : engine;
            if (stored != (kiln_precision)prec[i])
                fprintf(stderr, "node '%s' (%s) computes in %d but reads '%s' in %d\n", n->name, n->op_type, prec[i],
                        g->values[v].name, stored);
            CHECK(stored == (kiln_precision)prec[i]);
        }
    }
    for (int v = 0; v < g->nvalues; v++) { /* a constant's readers agree */
        if (!g->values[v].constant || !is_float(g->values[v].dtype)) continue;
        int first = -1;
        for (int i = 0; i < g->nnodes; i++)
            for (int k = 0; k < g->nodes[i].ninputs; k++)
                if (g->nodes[i].inputs[k] == v) {
                    if (first < 0) first = prec[i];
                    CHECK(first == prec[i]);
                }
    }
}

static int count_op(const kiln_graph *g, const char *op) {
    int n = 0;
    for (int i = 0; i < g->nnodes; i++) n += !strcmp(g->nodes[i].op_type, op);
    return n;
}

/* Runs g's engine on the CPU on a fixed input; returns the first output's 20 values in out. */
static void run_cpu(kiln_graph *g, float *out) {
    kiln_engine_meta meta;
    memset(&meta, 0, sizeof meta);
    snprintf(meta.target, sizeof meta.target, "cpu");
    kiln_engine *e;
    REQUIRE_OK(kiln_engine_from_graph(g, &meta, NULL, &e));
    kiln_context *c;
    REQUIRE_OK(kiln_context_create(e, &c));
    static float x[2 * 3 * 32 * 32];
    for (size_t i = 0; i < sizeof x / sizeof *x; i++) x[i] = sinf((float)i * 0.37f);
    REQUIRE_OK(kiln_context_set_input(c, "image", KILN_F32, 4, (int64_t[]){2, 3, 32, 32}, x));
    REQUIRE_OK(kiln_context_run(c));
    kiln_tensor_desc d;
    const void *data;
    REQUIRE_OK(kiln_context_output(c, 0, &d, &data));
    memcpy(out, data, 20 * sizeof *out);
    kiln_context_free(c);
    kiln_engine_free(e);
}

static void test_rewrite(void) {
    kiln_graph *g = load();
    int nodes = g->nnodes;
    kiln_layer_precision rules[] = {{"op:Softmax", KILN_PRECISION_FP32}, {"block2*", KILN_PRECISION_FP32},
                                    {"block2_bn", KILN_PRECISION_FP16}};
    uint8_t *prec;
    REQUIRE_OK(kiln_layer_precision_apply(g, KILN_PRECISION_FP16, rules, 3, &prec));
    CHECK(g->nnodes > nodes);
    CHECK(count_op(g, "Cast") == g->nnodes - nodes);
    for (int i = 0; i < g->nnodes; i++) {
        const char *name = g->nodes[i].name;
        if (!strcmp(name, "softmax") || !strcmp(name, "block2_conv") || !strcmp(name, "block2_relu"))
            CHECK(prec[i] == KILN_PRECISION_FP32);
        if (!strcmp(name, "block2_bn") || !strcmp(name, "block1_conv") || !strcmp(name, "fc"))
            CHECK(prec[i] == KILN_PRECISION_FP16); /* the later rule wins; unmatched nodes keep the engine's */
    }
    check_boundaries(g, prec, KILN_PRECISION_FP16);
    REQUIRE_OK(kiln_graph_verify(g));

#ifdef KILN_HAVE_CUDA
    /* the cuda engine's host side stores each value in its producer's precision */
    kiln_backend_engine *be;
    REQUIRE_OK(kiln_cuda_engine_prepare(g, KILN_PRECISION_FP16, prec, false, true, &be));
    for (int i = 0; i < g->nnodes; i++) {
        int v = g->nodes[i].outputs[0];
        if (!is_float(g->values[v].dtype) || be->kind[v] != KILN_CUDA_DEVICE) continue;
        CHECK(be->dev_dtype[v] == (prec[i] == KILN_PRECISION_FP32 ? KILN_F32 : KILN_F16));
    }
    for (int i = 0; i < g->nnodes; i++) /* a constant read by an fp32 node is uploaded in fp32 */
        if (!strcmp(g->nodes[i].name, "block2_conv")) CHECK(be->dev_dtype[g->nodes[i].inputs[1]] == KILN_F32);
    kiln_cuda_engine_free(be);
    printf("  cuda host side: device dtypes follow the node precisions\n");
#endif

    /* the Casts are float32 -> float32 in the model's types: the CPU computes the same outputs */
    float want[20], got[20];
    int casts = count_op(g, "Cast");
    run_cpu(load(), want);
    run_cpu(g, got); /* takes g */
    for (int i = 0; i < 20; i++) CHECK(want[i] == got[i]);
    printf("  rewrite: %d Casts inserted, boundaries consistent, same CPU outputs\n", casts);
}

static void test_uniform_and_errors(void) {
    kiln_graph *g = load();
    int nodes = g->nnodes;
    uint8_t *prec;
    kiln_layer_precision fp32[] = {{"op:Softmax", KILN_PRECISION_FP32}};
    REQUIRE_OK(kiln_layer_precision_apply(g, KILN_PRECISION_FP32, fp32, 1, &prec));
    CHECK(g->nnodes == nodes); /* nothing differs: no casts */
    for (int i = 0; i < g->nnodes; i++) CHECK(prec[i] == KILN_PRECISION_FP32);
    kiln_layer_precision none[] = {{"op:Attention", KILN_PRECISION_FP32}};
    kiln_status s = kiln_layer_precision_apply(g, KILN_PRECISION_FP16, none, 1, &prec);
    CHECK(s == KILN_ERR_INVALID_ARGUMENT && strstr(kiln_last_error(), "'op:Attention' matches no layer"));
    kiln_graph_free(g);
}

int main(int argc, char **argv) {
    kiln_log_set_level(KILN_LOG_ERROR);
    if (argc != 2) {
        fprintf(stderr, "usage: test_layer_precision REPO_ROOT\n");
        return 2;
    }
    snprintf(model, sizeof model, "%s/models/sample_cnn.onnx", argv[1]);
    test_glob();
    test_rewrite();
    test_uniform_and_errors();
    return checks_report("test_layer_precision");
}
