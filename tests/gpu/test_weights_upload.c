/* test_weights_upload.c — a model whose weights take several pieces of the cuda backend's staged
 * upload (cuda_engine.c: two page-locked buffers of 32 MB, a piece converting while the other copies):
 * y = x · W + b with W 4096 x 6000 (98 MB in fp32, 49 MB in fp16), built for cuda in fp32 and fp16,
 * run straight from the build and again from the saved, reloaded engine; every output element must
 * match the float64 reference within the precision's tolerance (a piece landing in the wrong place,
 * or not at all, is off by about the output's own size). Prints each build's stage times.
 * usage: test_weights_upload [DIR for the engine file] (default /tmp) */
#include "backends/backend.h"
#include "builder.h"
#include "check.h"
#include "graph_build.h"
#include "kiln/kiln.h"
#include "layer_precision.h"

#include <cuda_runtime.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

enum { K = 4096, N = 6000 };

/* Runs e on x and checks its [1, N] output against ref. */
static void check_engine(kiln_engine *e, const float *x, const double *ref, double tol, const char *what) {
    kiln_context *c = NULL;
    int64_t dims[2] = {1, K};
    const void *out = NULL;
    kiln_tensor_desc d;
    kiln_status s = kiln_context_create(e, &c);
    if (s == KILN_OK) s = kiln_context_set_input(c, "x", KILN_F32, 2, dims, x);
    if (s == KILN_OK) s = kiln_context_run(c);
    if (s == KILN_OK) s = kiln_context_output(c, 0, &d, &out);
    CHECKF(s == KILN_OK, "%s: %s", what, kiln_last_error());
    if (s == KILN_OK) {
        CHECKF(d.dtype == KILN_F32 && d.ndim == 2 && d.dims[1] == N, "%s: output %s rank %d", what,
               kiln_dtype_name(d.dtype), d.ndim);
        int bad = 0, first = -1;
        double worst = 0;
        for (int j = 0; j < N; j++) {
            double err = fabs(((const float *)out)[j] - ref[j]) / (1.0 + fabs(ref[j]));
            if (err > worst) worst = err;
            if (err > tol && bad++ == 0) first = j;
        }
        CHECKF(bad == 0, "%s: %d of %d outputs off by more than %g (first: %d), worst %g", what, bad, N, tol, first, worst);
        printf("%s: worst relative error %.2e\n", what, worst);
    }
    kiln_context_free(c);
}

static void check_precision(kiln_precision p, const char *dir, const float *x) {
    begin(17);
    int64_t xd[2] = {1, K}, wd[2] = {K, N}, bd[1] = {N};
    int in = input("x", KILN_F32, 2, xd);
    int w = constant(KILN_F32, 2, wd, NULL, -1.0 / 64, 1.0 / 64);
    int b = constant(KILN_F32, 1, bd, NULL, -1, 1);
    output(op2("Add", op2("MatMul", in, w), b));
    kiln_graph *g = finish();
    const float *wf = g->values[w].constant->data, *bf = g->values[b].constant->data;
    double *ref = calloc(N, sizeof *ref);
    if (!ref) exit(1);
    for (int k = 0; k < K; k++)
        for (int j = 0; j < N; j++) ref[j] += (double)x[k] * wf[(size_t)k * N + j];
    for (int j = 0; j < N; j++) ref[j] += bf[j];
    kiln_build_options o = {.target = "cuda", .precision = p, .verbose = true};
    kiln_engine *e = NULL;
    REQUIRE_OK(kiln_build_graph(g, "weights_upload", &o, &e));
    double tol = p == KILN_PRECISION_FP32 ? 5e-3 : 3e-2;
    char what[64], path[4096];
    snprintf(what, sizeof what, "%s built", kiln_precision_name(p));
    check_engine(e, x, ref, tol, what);
    snprintf(path, sizeof path, "%s/test_weights_upload_%s.kiln", dir, kiln_precision_name(p));
    CHECK_OK(kiln_engine_save(e, path));
    kiln_engine_free(e);
    e = NULL;
    CHECK_OK(kiln_engine_load(path, &e));
    snprintf(what, sizeof what, "%s loaded", kiln_precision_name(p));
    if (e) check_engine(e, x, ref, tol, what);
    kiln_engine_free(e);
    remove(path);
    free(ref);
}

int main(int argc, char **argv) {
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess || count < 1 || !kiln_backend_find("cuda")) {
        printf("skipped: no GPU\n");
        return 77;
    }
    const char *dir = argc > 1 ? argv[1] : "/tmp";
    float *x = malloc(K * sizeof *x);
    if (!x) return 1;
    for (int k = 0; k < K; k++) x[k] = (float)((k * 37 % 201) - 100) / 100.0f;
    check_precision(KILN_PRECISION_FP32, dir, x);
    check_precision(KILN_PRECISION_FP16, dir, x);
    free(x);
    return checks_report("test_weights_upload");
}
