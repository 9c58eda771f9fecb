/* test_cuda_plan.c — the host side of the cuda backend, which needs no GPU: node placement (device or
 * host-evaluated shape arithmetic), shape resolution per input-shape set, and the activation memory
 * plan. For the sample models at several batch sizes it checks that
 *   - every device value has a place in the arena, inside the planned size;
 *   - no two device buffers that are live at the same step overlap in memory;
 *   - the resolved shapes of the graph outputs equal what the cpu engine produces for the same inputs;
 *   - the planned peak is at most the naive sum;
 * and that first-fit placement is right on hand-made lifetimes.
 * usage: test_cuda_plan [REPO_DIR] (default: $KILN_SOURCE_DIR, else .) */
#include "backends/cuda/cuda_internal.h"
#include "runtime/engine_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int g_failures;

#define EXPECT(cond, ...)                                                                          \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);                                   \
            fprintf(stderr, __VA_ARGS__);                                                          \
            fprintf(stderr, " [%s]\n", kiln_last_error());                                         \
            g_failures++;                                                                          \
        }                                                                                          \
    } while (0)

/* Hand-made lifetimes: overlapping ones are disjoint, disjoint ones share the arena. */
static void check_first_fit(void) {
    kiln_cuda_interval iv[] = {
        {1000, 0, 2, 0}, /* a: steps 0..2 */
        {1000, 1, 3, 0}, /* b: overlaps a */
        {1000, 3, 5, 0}, /* c: after a: may take a's place */
        {3000, 6, 7, 0}, /* d: after everything: reuses from 0 */
        {256, 2, 2, 0},  /* e: overlaps a and b */
    };
    size_t peak, naive;
    EXPECT(kiln_cuda_place(iv, 5, &peak, &naive) == KILN_OK, "place");
    EXPECT(naive == 3072 + 3 * 1024 + 256, "naive sum %zu", naive);
    EXPECT(iv[3].offset == 0, "d at %zu, expected 0", iv[3].offset);
    EXPECT(iv[0].offset != iv[1].offset, "a and b overlap");
    EXPECT(iv[2].offset == iv[0].offset, "c at %zu should reuse a's place %zu", iv[2].offset, iv[0].offset);
    EXPECT(iv[4].offset >= 2048, "e at %zu overlaps a or b", iv[4].offset);
    EXPECT(peak == 3072, "peak %zu, expected 3072", peak);
}

/* Runs the cpu engine on zero inputs of the given shapes and returns its output shapes in out[]. */
static kiln_status cpu_output_shapes(kiln_engine *e, const kiln_tensor *in, kiln_tensor *out) {
    kiln_context *c;
    KILN_TRY(kiln_context_create(e, &c));
    void *bufs[16] = {0};
    kiln_status s = KILN_OK;
    for (int k = 0; k < e->g->ninputs && s == KILN_OK; k++) {
        bufs[k] = calloc(1, (size_t)kiln_numel(in[k].ndim, in[k].dims) * kiln_dtype_size(in[k].dtype) + 1);
        s = kiln_context_set_input(c, e->g->values[e->g->inputs[k]].name, in[k].dtype, in[k].ndim, in[k].dims, bufs[k]);
    }
    if (s == KILN_OK) s = kiln_context_run(c);
    for (int k = 0; s == KILN_OK && k < e->g->noutputs; k++) {
        kiln_tensor_desc d;
        const void *data;
        s = kiln_context_output(c, k, &d, &data);
        out[k].dtype = d.dtype;
        out[k].ndim = d.ndim;
        memcpy(out[k].dims, d.dims, sizeof out[k].dims);
    }
    for (int k = 0; k < 16; k++) free(bufs[k]);
    kiln_context_free(c);
    return s;
}

/* Checks one plan of be: placement invariants and output shapes against the cpu engine. */
static void check_plan(const char *name, kiln_engine *cpu, kiln_backend_engine *be, int64_t batch, int64_t seq) {
    const kiln_graph *g = be->g;
    kiln_tensor in[16] = {0}, want[16] = {0};
    if (g->ninputs > 16 || g->noutputs > 16) return;
    for (int k = 0; k < g->ninputs; k++) {
        const kiln_value *v = &g->values[g->inputs[k]];
        in[k].dtype = v->dtype;
        in[k].ndim = v->ndim;
        for (int d = 0; d < v->ndim; d++) in[k].dims[d] = v->dims[d].sym == 0 ? v->dims[d].value : d == 0 ? batch : seq;
    }
    kiln_cuda_plan *p;
    kiln_status s = kiln_cuda_plan_create(be, in, &p);
    EXPECT(s == KILN_OK, "%s batch %lld: plan", name, (long long)batch);
    if (s != KILN_OK) return;
    EXPECT(p->arena_bytes <= p->naive_bytes, "%s: peak %zu > naive %zu", name, p->arena_bytes, p->naive_bytes);
    /* every device value placed inside the arena; no two live at once overlap */
    int nplaced = 0;
    for (int v = 0; v < g->nvalues; v++) {
        size_t bytes = kiln_cuda_value_bytes(be, p, v);
        bool device = be->kind[v] == KILN_CUDA_DEVICE && bytes && (g->values[v].producer >= 0 || g->values[v].is_input);
        if (!device) continue;
        nplaced++;
        EXPECT(p->off[v] >= 0 && (size_t)p->off[v] + bytes <= p->arena_bytes, "%s: value '%s' at %lld+%zu outside %zu",
               name, g->values[v].name, (long long)p->off[v], bytes, p->arena_bytes);
        int sv = g->values[v].is_input ? 0 : g->values[v].producer + 1;
        for (int w = v + 1; w < g->nvalues; w++) {
            size_t wb = kiln_cuda_value_bytes(be, p, w);
            if (be->kind[w] != KILN_CUDA_DEVICE || !wb || (g->values[w].producer < 0 && !g->values[w].is_input)) continue;
            int sw = g->values[w].is_input ? 0 : g->values[w].producer + 1;
            bool live = sv <= be->last_step[w] && sw <= be->last_step[v];
            bool overlap = p->off[v] < p->off[w] + (int64_t)wb && p->off[w] < p->off[v] + (int64_t)bytes;
            EXPECT(!(live && overlap), "%s: '%s' and '%s' are live together and overlap", name, g->values[v].name,
                   g->values[w].name);
        }
    }
    /* output shapes equal the cpu engine's */
    s = cpu_output_shapes(cpu, in, want);
    EXPECT(s == KILN_OK, "%s batch %lld: cpu run", name, (long long)batch);
    for (int k = 0; s == KILN_OK && k < g->noutputs; k++) {
        const kiln_value *v = &p->vals[g->outputs[k]];
        bool same = v->ndim == want[k].ndim;
        for (int d = 0; same && d < v->ndim; d++) same = v->dims[d].value == want[k].dims[d];
        char a[128], b[128];
        int64_t got[KILN_MAX_DIMS];
        for (int d = 0; d < v->ndim && d < KILN_MAX_DIMS; d++) got[d] = v->dims[d].value;
        EXPECT(same, "%s batch %lld: output %d resolved to %s, the cpu engine gives %s", name, (long long)batch, k,
               kiln_shape_str(a, sizeof a, v->ndim, got), kiln_shape_str(b, sizeof b, want[k].ndim, want[k].dims));
    }
    printf("  %-34s batch %lld: %4d device buffers, activations %8.3f MB planned vs %8.3f MB naive, host values %zu B\n",
           name, (long long)batch, nplaced, (double)p->arena_bytes / 1e6, (double)p->naive_bytes / 1e6, p->host_dev_bytes);
    kiln_cuda_plan_free(be, p);
}

int main(int argc, char **argv) {
    const char *root = argc > 1 ? argv[1] : getenv("KILN_SOURCE_DIR") ? getenv("KILN_SOURCE_DIR") : ".";
    static const char *const models[] = {
        "models/sample_cnn.onnx",
        "tests/data/torch/mobilenet_v2_torchscript.onnx",
        "tests/data/torch/mobilenet_v2_dynamo.onnx",
        "tests/data/torch/mobilenet_v3_torchscript.onnx",
        "tests/data/torch/mobilenet_v3_dynamo.onnx",
        "tests/data/torch/bert_torchscript.onnx",
        "tests/data/torch/bert_dynamo.onnx",
        "tests/data/torch/gpt2_dynamo.onnx",
        "tests/data/torch/llama_dynamo.onnx",
    };
    check_first_fit();
    for (size_t i = 0; i < sizeof models / sizeof *models; i++) {
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", root, models[i]);
        kiln_engine *cpu;
        if (kiln_build_onnx(path, NULL, &cpu) != KILN_OK) {
            EXPECT(0, "%s: build", models[i]);
            continue;
        }
        const char *name = strrchr(models[i], '/') + 1;
        for (int prec = KILN_PRECISION_FP32; prec <= KILN_PRECISION_FP16; prec++) {
            kiln_backend_engine *be;
            kiln_status s = kiln_cuda_engine_prepare(cpu->g, (kiln_precision)prec, NULL, false, &be);
            EXPECT(s == KILN_OK, "%s: prepare", models[i]);
            if (s != KILN_OK) continue;
            if (prec == KILN_PRECISION_FP32)
                printf("%s: %d device nodes, %d host-evaluated nodes\n", name, be->n_device_nodes, be->n_host_nodes);
            for (int64_t batch = 1; batch <= 3; batch += 2) check_plan(name, cpu, be, batch, 7);
            kiln_cuda_engine_free(be);
        }
        kiln_engine_free(cpu);
    }
    if (g_failures) {
        fprintf(stderr, "test_cuda_plan: %d check(s) failed\n", g_failures);
        return 1;
    }
    printf("cuda plans: all checks passed\n");
    return 0;
}
