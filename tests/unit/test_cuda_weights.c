/* test_cuda_weights.c — the cuda backend's store_weights hook (src/backends/cuda/cuda_weights.c),
 * which needs no GPU: on the BERT export, an fp16 (and a bf16) build's float constants of at least
 * 1024 elements become 16-bit tensors holding the rounded values (core/half.h's rounding, as the
 * upload makes it) while their values stay float32,
 * smaller constants and non-float ones stay as they were, and an fp32 build changes nothing; many
 * conversions made in one threaded pass each land as converted one by one.
 * usage: test_cuda_weights [REPO_DIR] (default: $KILN_SOURCE_DIR, else .) */
#include "backends/cuda/cuda_internal.h"
#include "check.h"
#include "core/half.h"
#include "frontends/onnx/onnx_import.h"
#include "layer_precision.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Stores the weights of path's graph for precision p and checks every constant against its original. */
static void check_precision(const char *path, kiln_precision p) {
    kiln_graph *g;
    REQUIRE_OK(kiln_onnx_import(path, &g));
    kiln_tensor *orig = calloc((size_t)g->nvalues + 1, sizeof *orig);
    if (!orig) exit(1);
    for (int v = 0; v < g->nvalues; v++) { /* copies: the hook frees constants the graph owns */
        const kiln_tensor *t = g->values[v].constant;
        if (!t) continue;
        orig[v] = *t;
        orig[v].data = malloc(t->nbytes + 1);
        if (!orig[v].data) exit(1);
        if (t->nbytes) memcpy(orig[v].data, t->data, t->nbytes);
    }
    kiln_engine_meta meta;
    memset(&meta, 0, sizeof meta);
    meta.precision = p;
    const kiln_build_options opts = {0};
    REQUIRE_OK(kiln_cuda_store_weights(g, &meta, &opts));
    kiln_dtype half = p == KILN_PRECISION_BF16 ? KILN_BF16 : KILN_F16;
    int converted = 0;
    for (int v = 0; v < g->nvalues; v++) {
        const kiln_tensor *t = g->values[v].constant, *o = &orig[v];
        if (!t) continue;
        bool big_float = o->dtype == KILN_F32 && kiln_tensor_numel(o) >= 1024;
        if (p == KILN_PRECISION_FP32 || !big_float) {
            CHECKF(t->dtype == o->dtype && t->nbytes == o->nbytes && (!t->nbytes || !memcmp(t->data, o->data, t->nbytes)),
                   "'%s' changed", g->values[v].name);
            continue;
        }
        if (t->dtype != half) continue; /* read on the host, or not by the device: kept */
        converted++;
        CHECKF(g->values[v].dtype == KILN_F32 && t->ndim == o->ndim && t->nbytes * 2 == o->nbytes,
               "'%s': value %s, %zu of %zu bytes", g->values[v].name, kiln_dtype_name(g->values[v].dtype), t->nbytes,
               o->nbytes);
        CHECK((uintptr_t)t->data % KILN_CUDA_ALIGN == 0);
        const uint16_t *h = t->data;
        const float *f = o->data;
        int64_t bad = 0, n = kiln_tensor_numel(o);
        for (int64_t i = 0; i < n; i++)
            bad += h[i] != (p == KILN_PRECISION_BF16 ? kiln_f32_to_bf16(f[i]) : kiln_f32_to_f16(f[i]));
        CHECKF(bad == 0, "'%s': %lld of %lld elements not the rounded float32", g->values[v].name, (long long)bad,
               (long long)n);
    }
    if (p != KILN_PRECISION_FP32) CHECKF(converted > 0, "%s: no constant stored in 16 bits", kiln_precision_name(p));
    printf("%s: %d constants stored in 16 bits\n", kiln_precision_name(p), converted);
    for (int v = 0; v < g->nvalues; v++) free(orig[v].data);
    free(orig);
    kiln_graph_free(g);
}

/* Many conversions in one pass (kiln_cuda_host_convert_all): more elements than one thread takes, so
 * the threads' shares start and end inside conversions; each lands as kiln_cuda_host_convert's rounding. */
static void check_convert_all(void) {
    enum { N = 7 };
    const int64_t sizes[N] = {3, 1500001, 0, 2097153, 999, 1048577, 2000003};
    const kiln_dtype to[N] = {KILN_F16, KILN_BF16, KILN_F16, KILN_F16, KILN_F32, KILN_BF16, KILN_F16};
    kiln_cuda_conversion c[N];
    float *src[N];
    for (int i = 0; i < N; i++) {
        src[i] = malloc((size_t)sizes[i] * sizeof(float) + 1);
        void *dst = malloc((size_t)sizes[i] * kiln_dtype_size(to[i]) + 1);
        if (!src[i] || !dst) exit(1);
        for (int64_t k = 0; k < sizes[i]; k++) src[i][k] = (float)(k % 1000 - 500) * 0.001f + (float)i;
        c[i] = (kiln_cuda_conversion){src[i], KILN_F32, dst, to[i], sizes[i]};
    }
    kiln_cuda_host_convert_all(c, N);
    for (int i = 0; i < N; i++) {
        int64_t bad = 0;
        for (int64_t k = 0; k < sizes[i]; k++) {
            float f = src[i][k];
            if (to[i] == KILN_F32) bad += ((const float *)c[i].dst)[k] != f;
            else bad += ((const uint16_t *)c[i].dst)[k] != (to[i] == KILN_BF16 ? kiln_f32_to_bf16(f) : kiln_f32_to_f16(f));
        }
        CHECKF(bad == 0, "conversion %d: %lld of %lld elements wrong", i, (long long)bad, (long long)sizes[i]);
        free(src[i]);
        free(c[i].dst);
    }
}

int main(int argc, char **argv) {
    const char *root = argc > 1 ? argv[1] : getenv("KILN_SOURCE_DIR") ? getenv("KILN_SOURCE_DIR") : ".";
    char path[4096];
    snprintf(path, sizeof path, "%s/tests/data/torch/bert_torchscript.onnx", root);
    kiln_log_set_level(KILN_LOG_ERROR);
    check_precision(path, KILN_PRECISION_FP16);
    check_precision(path, KILN_PRECISION_BF16);
    check_precision(path, KILN_PRECISION_FP32);
    check_convert_all();
    return checks_report("test_cuda_weights");
}
