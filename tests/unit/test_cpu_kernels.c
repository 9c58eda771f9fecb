/* test_cpu_kernels.c — the CPU backend's fast kernels against naive double-precision loops written
 * here: the thread pool's parallel-for (every index once, nesting runs serially), kiln_cpu_sgemm
 * over odd shapes, both transposes and alpha/beta (its matrix-vector and split-OpenBLAS paths), the
 * packed products (kiln_pg_gemm, _runs, kiln_pg_gemm_packed_b, _ab) with every micro-kernel the processor
 * runs over tails of rows, columns and depth, and the Conv kernels (depthwise, pointwise, general) with odd shapes, strides,
 * pads, dilations and groups, each with and without the fused epilogue, on plain weights and on
 * packed weights with every micro-kernel; 2-D MaxPool over strides, dilations, pads and ceil mode,
 * GlobalAveragePool; Concat over parts that span the pool's copy blocks;
 * and the epilogue activations (16-lane where the
 * processor has AVX-512) over tails, extremes and NaN. */
#include "check.h"

#include "backends/cpu/conv2d.h"
#include "backends/cpu/cpu_gemm.h"
#include "backends/cpu/fused_kernels.h"
#include "backends/cpu/nn_kernels.h"
#include "backends/cpu/packed_gemm.h"
#include "core/threadpool.h"

#include <stdatomic.h>
#include <stdint.h>
#include <string.h>

static uint32_t g_rng = 12345;
static float frand(void) {
    g_rng = g_rng * 1664525u + 1013904223u;
    return (float)((g_rng >> 8) & 0xffff) / 32768.0f - 1.0f;
}
static void fill(float *p, int64_t n) {
    for (int64_t i = 0; i < n; i++) p[i] = frand();
}

/* ------------------------------------------------------------------ thread pool */
typedef struct count_ctx {
    atomic_int *hits;
    atomic_int calls;
} count_ctx;

static void count_range(void *ctx, int64_t b, int64_t e) {
    count_ctx *c = ctx;
    atomic_fetch_add(&c->calls, 1);
    for (int64_t i = b; i < e; i++) atomic_fetch_add(&c->hits[i], 1);
}

static void nested_range(void *ctx, int64_t b, int64_t e) {
    count_ctx *c = ctx;
    for (int64_t i = b; i < e; i++) kiln_parallel_for(1, 1, count_range, &c[1 + i]);
}

static void test_threadpool(void) {
    CHECK(kiln_threadpool_size() >= 1);
    static atomic_int hits[1000];
    const int64_t sizes[] = {1, 2, 3, 7, 64, 999, 1000};
    for (int rep = 0; rep < 50; rep++)
        for (size_t s = 0; s < sizeof sizes / sizeof *sizes; s++) {
            int64_t n = sizes[s];
            count_ctx c = {hits, 0};
            for (int64_t i = 0; i < n; i++) atomic_store(&hits[i], 0);
            kiln_parallel_for(n, 1, count_range, &c);
            int bad = 0;
            for (int64_t i = 0; i < n; i++) bad += atomic_load(&hits[i]) != 1;
            CHECKF(bad == 0, "n %lld: %d indices not visited exactly once", (long long)n, bad);
            CHECK(atomic_load(&c.calls) <= 4 * kiln_threadpool_size()); /* at most four chunks per thread */
        }
    count_ctx big = {hits, 0};
    for (int64_t i = 0; i < 10; i++) atomic_store(&hits[i], 0);
    kiln_parallel_for(10, 100, count_range, &big); /* min_chunk above n: one call */
    CHECK(atomic_load(&big.calls) == 1);
    static atomic_int inner_hits[4][1];
    count_ctx nest[5] = {{NULL, 0}};
    for (int i = 0; i < 4; i++) {
        atomic_store(&inner_hits[i][0], 0);
        nest[1 + i] = (count_ctx){inner_hits[i], 0};
    }
    kiln_parallel_for(4, 1, nested_range, nest);
    for (int i = 0; i < 4; i++) CHECK(atomic_load(&inner_hits[i][0]) == 1);
}

/* ------------------------------------------------------------------ sgemm */
static void test_sgemm_case(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, float beta) {
    int64_t lda = (ta ? M : K) + 3, ldb = (tb ? K : N) + 1, ldc = N + 2;
    float *A = malloc(sizeof(float) * (size_t)((ta ? K : M) * lda));
    float *B = malloc(sizeof(float) * (size_t)((tb ? N : K) * ldb));
    float *C = malloc(sizeof(float) * (size_t)(M * ldc)), *C0 = malloc(sizeof(float) * (size_t)(M * ldc));
    fill(A, (ta ? K : M) * lda);
    fill(B, (tb ? N : K) * ldb);
    fill(C, M * ldc);
    memcpy(C0, C, sizeof(float) * (size_t)(M * ldc));
    kiln_cpu_sgemm(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    double worst = 0;
    for (int64_t i = 0; i < M; i++)
        for (int64_t j = 0; j < N; j++) {
            double s = 0;
            for (int64_t k = 0; k < K; k++)
                s += (double)A[ta ? k * lda + i : i * lda + k] * B[tb ? j * ldb + k : k * ldb + j];
            double want = alpha * s + (beta == 0.0f ? 0.0 : beta * (double)C0[i * ldc + j]);
            double err = fabs(C[i * ldc + j] - want) / (1.0 + fabs(want));
            if (err > worst) worst = err;
        }
    for (int64_t i = 0; i < M; i++) /* the padding between rows is never written */
        for (int64_t j = N; j < ldc; j++) CHECK(C[i * ldc + j] == C0[i * ldc + j]);
    CHECKF(worst < 1e-5, "sgemm ta %d tb %d M %lld N %lld K %lld alpha %g beta %g: relative error %g", ta, tb,
           (long long)M, (long long)N, (long long)K, alpha, beta, worst);
    free(A);
    free(B);
    free(C);
    free(C0);
}

static void test_sgemm(void) {
    const int64_t Ms[] = {1, 2, 3, 4, 5, 17, 64}, Ns[] = {1, 7, 33, 130, 1000}, Ks[] = {1, 9, 100, 385};
    for (int t = 0; t < 4; t++)
        for (size_t a = 0; a < sizeof Ms / sizeof *Ms; a++)
            for (size_t b = 0; b < sizeof Ns / sizeof *Ns; b++)
                for (size_t c = 0; c < sizeof Ks / sizeof *Ks; c++) {
                    float beta = (a + b + c) % 3 == 0 ? 0.0f : (a + c) % 2 ? 1.0f : 0.5f;
                    test_sgemm_case(t & 1, t & 2, Ms[a], Ns[b], Ks[c], c % 2 ? 1.0f : 0.75f, beta);
                }
}

/* ------------------------------------------------------------------ conv2d */
/* Naive act(conv + bias + z) in double, ReLU or none. */
static void conv_reference(const kiln_conv2d *g, const float *x, const float *w, const float *b, const float *z,
                           bool relu, double *y) {
    int64_t Cg = g->C / g->group, Mg = g->M / g->group;
    for (int64_t n = 0; n < g->N; n++)
        for (int64_t m = 0; m < g->M; m++)
            for (int64_t oh = 0; oh < g->OH; oh++)
                for (int64_t ow = 0; ow < g->OW; ow++) {
                    double s = b ? b[m] : 0.0;
                    for (int64_t c = 0; c < Cg; c++)
                        for (int64_t kh = 0; kh < g->KH; kh++)
                            for (int64_t kw = 0; kw < g->KW; kw++) {
                                int64_t ih = oh * g->sh - g->ph + kh * g->dh, iw = ow * g->sw - g->pw + kw * g->dw;
                                if (ih < 0 || ih >= g->H || iw < 0 || iw >= g->W) continue;
                                int64_t ci = (m / Mg) * Cg + c;
                                s += (double)x[((n * g->C + ci) * g->H + ih) * g->W + iw] *
                                     w[((m * Cg + c) * g->KH + kh) * g->KW + kw];
                            }
                    int64_t o = ((n * g->M + m) * g->OH + oh) * g->OW + ow;
                    if (z) s += z[o];
                    y[o] = relu && s < 0 ? 0.0 : s;
                }
}

/* How much further F(4x4, 3x3) may stray than a direct sum: its transforms scale parts of each
 * product by up to 8 x 8 on the way out and cancel them again (measured: 1.3-1.6 times the direct
 * tolerance on these cases, 6e-5 for 432-term sums of values in [-1, 1]). */
#define WINOGRAD_ERROR_FACTOR 4.0

/* One case: sizes, then kernel, stride, dilation, pad (square), then groups and the epilogue. */
static void test_conv_case(int64_t N, int64_t C, int64_t H, int64_t W, int64_t M, int64_t KH, int64_t KW, int64_t s,
                           int64_t d, int64_t ph, int64_t pw, int64_t group, bool bias, bool residual, bool relu) {
    kiln_conv2d g = {N, C, H, W, M, 0, 0, KH, KW, group, s, s, d, d, ph, pw};
    g.OH = (H + 2 * ph - d * (KH - 1) - 1) / s + 1;
    g.OW = (W + 2 * pw - d * (KW - 1) - 1) / s + 1;
    int64_t nx = N * C * H * W, nw = M * (C / group) * KH * KW, ny = N * M * g.OH * g.OW;
    float *x = malloc(sizeof(float) * (size_t)nx), *w = malloc(sizeof(float) * (size_t)nw);
    float *b = malloc(sizeof(float) * (size_t)M), *z = malloc(sizeof(float) * (size_t)ny);
    float *y = malloc(sizeof(float) * (size_t)ny);
    double *want = malloc(sizeof(double) * (size_t)ny);
    fill(x, nx);
    fill(w, nw);
    fill(b, M);
    fill(z, ny);
    kiln_act act = {relu ? KILN_ACT_RELU : KILN_ACT_NONE, 0, 0};
    conv_reference(&g, x, w, bias ? b : NULL, residual ? z : NULL, relu, want);
    kiln_conv2d_weights *packed = NULL, *by_columns = NULL, *winograd = NULL;
    CHECK_OK(kiln_conv2d_weights_pack(w, M, C / group, KH, KW, group, 0, false, &packed));
    CHECK(packed == NULL || (kiln_conv2d_weights_fit(packed, &g) && !packed->by_columns && !packed->winograd));
    /* Winograd by tiles (for few positions) on every other case */
    int64_t hint = (C + M) % 2 && g.OH * g.OW > KILN_CONV2D_SMALL_OUTPUT ? g.OH * g.OW : 0;
    CHECK_OK(kiln_conv2d_weights_pack(w, M, C / group, KH, KW, group, hint, s == 1 && d == 1, &winograd));
    bool want_winograd = KH == 3 && KW == 3 && s == 1 && d == 1 && group == 1 && C >= KILN_CONV2D_WINOGRAD_CHANNELS &&
                         M >= KILN_CONV2D_WINOGRAD_CHANNELS;
    CHECK(want_winograd == (winograd && winograd->winograd));
    if (winograd && !winograd->winograd) {
        kiln_conv2d_weights_free(winograd);
        winograd = NULL;
    }
    CHECK(winograd == NULL || kiln_conv2d_weights_fit(winograd, &g));
    CHECK(winograd == NULL || winograd->winograd_by_tiles == (hint > 0 && hint < KILN_CONV2D_WINOGRAD_POSITIONS));
    if (g.OH * g.OW <= KILN_CONV2D_SMALL_OUTPUT) { /* also the transposed product of small outputs */
        CHECK_OK(kiln_conv2d_weights_pack(w, M, C / group, KH, KW, group, g.OH * g.OW, s == 1 && d == 1, &by_columns));
        CHECK(by_columns == NULL || (kiln_conv2d_weights_fit(by_columns, &g) && by_columns->by_columns));
    }
    /* each instruction set the processor runs: plain weights (the depthwise kernel or OpenBLAS), then
     * packed weights (none for depthwise), then packed by columns (small outputs), then Winograd
     * transforms (3x3, stride 1) */
    const kiln_conv2d_weights *weights[4] = {NULL, packed, by_columns, winograd};
    for (int variant = 0; variant < 4 * (KILN_PG_AVX512 + 1); variant++) {
        if ((variant % 4 && !weights[variant % 4]) || !kiln_pg_isa_set((kiln_pg_isa)(variant / 4))) continue;
        memset(y, 0xff, sizeof(float) * (size_t)ny); /* NaN: every output must be written */
        CHECK_OK(kiln_conv2d_run(&g, x, w, weights[variant % 4], bias ? b : NULL, residual ? z : NULL, &act, y));
        double worst = 0;
        for (int64_t i = 0; i < ny; i++) {
            double err = fabs(y[i] - want[i]) / (1.0 + fabs(want[i]));
            if (isnan(err) || err > worst) worst = isnan(err) ? INFINITY : err; /* NaN: an output left unwritten */
        }
        double tol = 2e-6 * sqrt((double)(C / group * KH * KW)); /* float32 sums of that many products */
        if (variant % 4 == 3) tol *= WINOGRAD_ERROR_FACTOR;
        CHECKF(worst < tol,
               "conv N%lld C%lld %lldx%lld M%lld k%lldx%lld s%lld d%lld p%lld,%lld g%lld bias %d res %d relu %d "
               "variant %d: error %g",
               (long long)N, (long long)C, (long long)H, (long long)W, (long long)M, (long long)KH, (long long)KW,
               (long long)s, (long long)d, (long long)ph, (long long)pw, (long long)group, bias, residual, relu,
               variant, worst);
    }
    kiln_pg_isa_set(kiln_pg_isa_best());
    kiln_conv2d_weights_free(packed);
    kiln_conv2d_weights_free(by_columns);
    kiln_conv2d_weights_free(winograd);
    free(x);
    free(w);
    free(b);
    free(z);
    free(y);
    free(want);
}

/* Winograd with an activation its output transform does not fuse (Clip, then the rows in
 * cache), and residual: against the same convolution on OpenBLAS. */
static void test_winograd_other_activation(void) {
    kiln_conv2d g = {2, 16, 10, 11, 24, 10, 11, 3, 3, 1, 1, 1, 1, 1, 1, 1};
    int64_t nx = 2 * 16 * 10 * 11, nw = 24 * 16 * 9, ny = 2 * 24 * 10 * 11;
    float *x = malloc(sizeof(float) * (size_t)nx), *w = malloc(sizeof(float) * (size_t)nw);
    float *b = malloc(sizeof(float) * 24), *z = malloc(sizeof(float) * (size_t)ny);
    float *want = malloc(sizeof(float) * (size_t)ny), *got = malloc(sizeof(float) * (size_t)ny);
    fill(x, nx);
    fill(w, nw);
    fill(b, 24);
    fill(z, ny);
    kiln_act act = {KILN_ACT_CLIP, -0.5f, 1.5f};
    kiln_conv2d_weights *wino = NULL;
    CHECK_OK(kiln_conv2d_weights_pack(w, 24, 16, 3, 3, 1, 0, true, &wino));
    CHECK(wino && wino->winograd);
    CHECK_OK(kiln_conv2d_run(&g, x, w, NULL, b, z, &act, want));
    CHECK_OK(kiln_conv2d_run(&g, x, w, wino, b, z, &act, got));
    double worst = 0;
    for (int64_t i = 0; i < ny; i++) {
        double err = fabs((double)got[i] - want[i]);
        if (isnan(err) || err > worst) worst = isnan(err) ? INFINITY : err;
    }
    CHECKF(worst < 1e-4, "Winograd with Clip: error %g", worst);
    kiln_conv2d_weights_free(wino);
    free(x);
    free(w);
    free(b);
    free(z);
    free(want);
    free(got);
}

static void test_conv2d(void) {
    /* depthwise: odd planes, strides 1-3, dilations, pads, 3x3 / 5x5 / 1x7, channel multiplier 2 */
    test_conv_case(1, 5, 7, 9, 5, 3, 3, 1, 1, 1, 1, 5, true, false, true);
    test_conv_case(2, 6, 13, 11, 6, 3, 3, 2, 1, 1, 1, 6, true, true, false);
    test_conv_case(1, 3, 17, 10, 3, 5, 5, 2, 1, 2, 2, 3, false, false, true);
    test_conv_case(1, 4, 9, 21, 4, 3, 3, 1, 2, 2, 2, 4, true, true, true);
    test_conv_case(1, 3, 8, 8, 6, 3, 3, 3, 1, 0, 1, 3, true, false, false);
    test_conv_case(1, 2, 5, 30, 2, 1, 7, 1, 1, 0, 3, 2, true, false, true);
    test_conv_case(3, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 1, true, true, true);
    /* a depthwise kernel larger than the direct path takes (im2col) */
    test_conv_case(1, 2, 12, 12, 2, 9, 9, 1, 1, 4, 4, 2, true, false, false);
    /* pointwise: batch, groups, a residual */
    test_conv_case(2, 16, 7, 7, 24, 1, 1, 1, 1, 0, 0, 1, true, true, true);
    test_conv_case(1, 12, 5, 9, 8, 1, 1, 1, 1, 0, 0, 4, true, false, true);
    test_conv_case(1, 64, 14, 14, 33, 1, 1, 1, 1, 0, 0, 1, false, false, false);
    test_conv_case(2, 40, 1, 1, 10, 1, 1, 1, 1, 0, 0, 1, true, false, true); /* squeeze-excitation: 1x1 planes */
    test_conv_case(3, 12, 1, 1, 6, 1, 1, 1, 1, 0, 0, 3, true, true, false);
    /* general: strided 1x1, 3x3 / 7x7, pads on one side only, dilation, groups */
    test_conv_case(1, 8, 9, 9, 16, 1, 1, 2, 1, 0, 0, 1, true, false, false);
    test_conv_case(2, 3, 23, 19, 8, 7, 7, 2, 1, 3, 3, 1, true, false, true);
    test_conv_case(1, 16, 10, 12, 20, 3, 3, 1, 1, 1, 0, 1, true, true, true);
    test_conv_case(1, 8, 11, 11, 12, 3, 3, 2, 2, 2, 2, 2, true, false, false);
    test_conv_case(1, 256, 30, 30, 8, 3, 3, 1, 1, 1, 1, 1, true, false, true); /* several column chunks */
    test_conv_case(1, 32, 9, 9, 48, 3, 3, 1, 1, 1, 1, 1, true, true, true); /* narrow: output-channel blocks */
    test_conv_case(1, 40, 3, 5, 70, 3, 3, 1, 1, 1, 1, 1, true, true, true);   /* channel blocks, row tail */
    test_conv_case(1, 7, 21, 21, 13, 3, 3, 1, 2, 2, 2, 1, false, true, false); /* dilated: row and column tails */
    test_conv_case(2, 300, 4, 4, 25, 1, 1, 1, 1, 0, 0, 1, true, false, true); /* depth over one packed block */
    /* ReLU in the micro-kernel's store: depth over a packed block (the ReLU on the last only), row
     * and column tails, B read in place (at most 32 rows), strided on phase planes */
    test_conv_case(1, 530, 5, 7, 37, 1, 1, 1, 1, 0, 0, 1, true, false, true);
    test_conv_case(2, 16, 13, 11, 20, 1, 1, 1, 1, 0, 0, 1, true, false, true);
    test_conv_case(1, 70, 9, 9, 12, 3, 3, 2, 1, 1, 1, 1, false, false, true);
    test_conv_case(2, 12, 9, 7, 18, 3, 3, 1, 1, 1, 1, 3, true, true, true);  /* stride 1: batch, groups */
    test_conv_case(1, 5, 40, 3, 30, 5, 3, 1, 1, 2, 0, 1, true, false, true);  /* tall, narrow, one-sided pad */
    test_conv_case(2, 40, 7, 7, 100, 3, 3, 1, 1, 1, 1, 2, true, true, true); /* small output: batch, groups */
    test_conv_case(1, 24, 9, 9, 50, 3, 3, 2, 1, 1, 1, 1, true, false, true); /* small output, stride 2 */
    test_conv_case(1, 600, 3, 3, 20, 1, 1, 1, 1, 0, 0, 1, true, true, false); /* small pointwise, deep */
    test_conv_case(2, 24, 8, 8, 40, 3, 3, 1, 1, 1, 1, 1, true, true, true);  /* small output, whole-row panels */
    test_conv_case(1, 16, 6, 18, 24, 3, 3, 1, 1, 0, 0, 1, true, false, true);  /* ... without padding */
    /* strided, on shifted phase planes: depth over a packed block, windows no wider than the stride,
     * three phases, output rows longer than a panel, 1x1 stride 4 in groups */
    test_conv_case(1, 64, 11, 13, 16, 3, 3, 2, 1, 1, 1, 1, true, true, true);
    test_conv_case(2, 5, 13, 14, 9, 2, 2, 3, 1, 0, 1, 1, true, true, false);
    test_conv_case(1, 4, 20, 23, 10, 5, 5, 3, 1, 2, 1, 1, false, true, true);
    test_conv_case(1, 3, 9, 101, 8, 3, 3, 2, 1, 1, 1, 1, true, false, true);
    test_conv_case(2, 8, 10, 10, 16, 1, 1, 4, 1, 0, 0, 2, true, true, true);
    /* Winograd F(4x4, 3x3): partial tiles, tiles of several images in one block, several blocks */
    test_conv_case(2, 16, 13, 15, 24, 3, 3, 1, 1, 1, 1, 1, true, true, true);
    test_conv_case(1, 20, 30, 29, 17, 3, 3, 1, 1, 1, 1, 1, true, false, true);
    test_conv_case(3, 24, 11, 6, 40, 3, 3, 1, 1, 0, 0, 1, false, true, false);
    test_conv_case(1, 16, 7, 9, 16, 3, 3, 1, 1, 2, 2, 1, true, false, false);
    test_conv_case(2, 48, 28, 28, 32, 3, 3, 1, 1, 1, 1, 1, true, true, true);
    /* ... and by tiles (C + M odd): channel blocks of 48 and a partial one, batches */
    test_conv_case(2, 24, 14, 14, 57, 3, 3, 1, 1, 1, 1, 1, true, true, true);
    test_conv_case(1, 33, 12, 10, 50, 3, 3, 1, 1, 1, 1, 1, false, false, true);
    test_conv_case(3, 17, 9, 11, 96, 3, 3, 1, 1, 1, 1, 1, true, true, false);
}

/* ------------------------------------------------------------------ packed product */
/* A kiln_pg_epilogue: c = 2 c + 1 over the block. */
static void twice_plus_one(void *ctx, float *c, int64_t ldc, int64_t r0, int64_t rows, int64_t c0, int64_t cols) {
    (void)ctx;
    (void)r0;
    (void)c0;
    for (int64_t r = 0; r < rows; r++)
        for (int64_t j = 0; j < cols; j++) c[r * ldc + j] = 2 * c[r * ldc + j] + 1;
}

/* kiln_pg_gemm against a double product for M x K x N, each micro-kernel, without and with the
 * ReLU taken in the store; with a bias also an epilogue function (after the ReLU). */
static void test_packed_case(int64_t M, int64_t K, int64_t N, bool bias) {
    int64_t ldb = N + 3, ldc = N + 5;
    float *A = malloc(sizeof(float) * (size_t)(M * K + 1)), *B = malloc(sizeof(float) * (size_t)(K * ldb + 1));
    float *bv = malloc(sizeof(float) * (size_t)M), *C = malloc(sizeof(float) * (size_t)(M * ldc));
    float *pa = malloc(sizeof(float) * (size_t)(kiln_pg_packed_a_floats(M, K) + 1));
    float *scratch = malloc(sizeof(float) * (size_t)(kiln_pg_scratch_floats()));
    fill(A, M * K);
    fill(B, K * ldb);
    fill(bv, M);
    kiln_pg_pack_a(A, K, M, K, pa);
    for (int isa = KILN_PG_PORTABLE; isa <= KILN_PG_AVX512; isa++) {
        if (!kiln_pg_isa_set((kiln_pg_isa)isa)) continue;
        for (int relu = 0; relu < 2; relu++) {
            for (int64_t i = 0; i < M * ldc; i++) C[i] = 7.0f; /* the gaps between rows stay untouched */
            kiln_pg_epilogue ep = {bias ? twice_plus_one : NULL, NULL, relu}; /* with a bias: each element once */
            kiln_pg_gemm(pa, M, K, B, ldb, NULL, N, bias ? bv : NULL, C, ldc, bias || relu ? &ep : NULL, scratch);
            double worst = 0;
            bool gaps = true;
            for (int64_t m = 0; m < M; m++) {
                for (int64_t j = 0; j < N; j++) {
                    double s = bias ? bv[m] : 0.0;
                    for (int64_t k = 0; k < K; k++) s += (double)A[m * K + k] * B[k * ldb + j];
                    if (relu && s < 0) s = 0;
                    if (bias) s = 2 * s + 1;
                    double err = fabs(C[m * ldc + j] - s) / (1.0 + fabs(s));
                    if (isnan(err) || err > worst) worst = isnan(err) ? INFINITY : err;
                }
                for (int64_t j = N; j < ldc; j++) gaps = gaps && C[m * ldc + j] == 7.0f;
            }
            CHECKF(worst < 2e-6 * sqrt((double)K + 1) && gaps,
                   "packed %lldx%lldx%lld bias %d relu %d isa %d: error %g, gaps %d", (long long)M, (long long)K,
                   (long long)N, bias, relu, isa, worst, gaps);
        }
    }
    kiln_pg_isa_set(kiln_pg_isa_best());
    free(A);
    free(B);
    free(bv);
    free(C);
    free(pa);
    free(scratch);
}

/* kiln_pg_gemm_packed_b against a double product for M x K x N, B given as [K, N] or as the
 * transpose of [N, K], each micro-kernel; both: kiln_pg_gemm_packed_ab on A packed too. */
static void test_packed_b_case(int64_t M, int64_t K, int64_t N, bool transposed, bool both) {
    int64_t lda = K + 2, ldc = N + 3;
    float *A = malloc(sizeof(float) * (size_t)((M - 1) * lda + K)), *B = malloc(sizeof(float) * (size_t)(K * N + 1));
    float *C = malloc(sizeof(float) * (size_t)(M * ldc + 1));
    float *pb = malloc(sizeof(float) * (size_t)(kiln_pg_packed_b_floats(K, N) + 1));
    float *scratch = malloc(sizeof(float) * (size_t)kiln_pg_scratch_b_floats());
    fill(A, (M - 1) * lda + K);
    fill(B, K * N);
    float *pa = malloc(sizeof(float) * (size_t)(kiln_pg_packed_a_floats(M, K) + 1));
    kiln_pg_pack_b(B, transposed ? 1 : N, transposed ? K : 1, K, N, pb);
    kiln_pg_pack_a(A, lda, M, K, pa);
    for (int isa = KILN_PG_PORTABLE; isa <= KILN_PG_AVX512; isa++) {
        if (!kiln_pg_isa_set((kiln_pg_isa)isa)) continue;
        for (int64_t i = 0; i < M * ldc; i++) C[i] = 7.0f;
        if (both) kiln_pg_gemm_packed_ab(pa, M, K, pb, N, C, ldc);
        else kiln_pg_gemm_packed_b(A, lda, M, K, pb, N, C, ldc, scratch);
        double worst = 0;
        bool gaps = true;
        for (int64_t m = 0; m < M; m++) {
            for (int64_t j = 0; j < N; j++) {
                double s = 0;
                for (int64_t k = 0; k < K; k++) s += (double)A[m * lda + k] * (transposed ? B[j * K + k] : B[k * N + j]);
                double err = fabs(C[m * ldc + j] - s) / (1.0 + fabs(s));
                if (isnan(err) || err > worst) worst = isnan(err) ? INFINITY : err;
            }
            for (int64_t j = N; j < ldc; j++) gaps = gaps && C[m * ldc + j] == 7.0f;
        }
        CHECKF(worst < 2e-6 * sqrt((double)K + 1) && gaps,
               "packed B %lldx%lldx%lld transposed %d both %d isa %d: error %g, gaps %d", (long long)M, (long long)K,
               (long long)N, transposed, both, isa, worst, gaps);
    }
    kiln_pg_isa_set(kiln_pg_isa_best());
    free(pa);
    free(A);
    free(B);
    free(C);
    free(pb);
    free(scratch);
}

/* kiln_pg_gemm_runs against a double product for M x K x N whose right side's columns lie in runs
 * of `run`, `step` apart, rows at scattered offsets (in reverse order), each micro-kernel. */
static void test_packed_runs_case(int64_t M, int64_t K, int64_t N, int64_t run, int64_t step) {
    int64_t row_floats = (N + run - 1) / run * step, ldc = N + 2;
    float *A = malloc(sizeof(float) * (size_t)(M * K + 1)), *B = malloc(sizeof(float) * (size_t)(K * row_floats + 1));
    float *C = malloc(sizeof(float) * (size_t)(M * ldc)), *pa = malloc(sizeof(float) * (size_t)kiln_pg_packed_a_floats(M, K));
    float *scratch = malloc(sizeof(float) * (size_t)kiln_pg_scratch_floats());
    int64_t *row_off = malloc(sizeof(int64_t) * (size_t)(K + 1));
    fill(A, M * K);
    fill(B, K * row_floats);
    for (int64_t k = 0; k < K; k++) row_off[k] = (K - 1 - k) * row_floats;
    kiln_pg_pack_a(A, K, M, K, pa);
    for (int isa = KILN_PG_PORTABLE; isa <= KILN_PG_AVX512; isa++) {
        if (!kiln_pg_isa_set((kiln_pg_isa)isa)) continue;
        for (int64_t i = 0; i < M * ldc; i++) C[i] = 7.0f;
        kiln_pg_gemm_runs(pa, M, K, B, row_off, N, run, step, NULL, C, ldc, NULL, scratch);
        double worst = 0;
        for (int64_t m = 0; m < M; m++)
            for (int64_t j = 0; j < N; j++) {
                double s = 0;
                for (int64_t k = 0; k < K; k++) s += (double)A[m * K + k] * B[row_off[k] + j / run * step + j % run];
                double err = fabs(C[m * ldc + j] - s) / (1.0 + fabs(s));
                if (isnan(err) || err > worst) worst = isnan(err) ? INFINITY : err;
            }
        CHECKF(worst < 2e-6 * sqrt((double)K + 1), "packed runs %lldx%lldx%lld run %lld step %lld isa %d: error %g",
               (long long)M, (long long)K, (long long)N, (long long)run, (long long)step, isa, worst);
    }
    kiln_pg_isa_set(kiln_pg_isa_best());
    free(A);
    free(B);
    free(C);
    free(pa);
    free(scratch);
    free(row_off);
}

static void test_packed_gemm(void) {
    /* columns in runs: shorter than a panel, across panels, one run, runs back to back (both
     * contiguous), depth over a block */
    test_packed_runs_case(9, 20, 70, 7, 9);
    test_packed_runs_case(9, 20, 70, 7, 7);
    test_packed_runs_case(16, 27, 300, 111, 112);
    test_packed_runs_case(8, 5, 96, 96, 100);
    test_packed_runs_case(3, 600, 50, 14, 15);
    for (int both = 0; both < 2; both++) {
        test_packed_b_case(8, 8, 48, false, both);     /* one full tile */
        test_packed_b_case(5, 3, 7, true, both);       /* below a tile each way */
        test_packed_b_case(130, 300, 70, false, both); /* rows over a block (120) */
        test_packed_b_case(37, 1030, 65, true, both);  /* depth over two blocks (512), a partial panel */
        test_packed_b_case(1, 1031, 100, true, both);  /* one row (a classifier): whole depth, odd, partial panel */
        test_packed_b_case(1, 1, 7, false, both);      /* one row, one term, under a vector */
    }
    /* A read in place: whole panels with a packed rest, through each edge kernel's width */
    const int64_t in_place_cols[] = {16, 20, 32, 40, 47, 64, 96};
    for (size_t c = 0; c < sizeof in_place_cols / sizeof *in_place_cols; c++) {
        test_packed_b_case(8, 33, in_place_cols[c], c % 2, false);
        test_packed_b_case(13, 64, in_place_cols[c], c % 2 == 0, false);
    }
    test_packed_b_case(64, 256, 1024, true, false); /* a transformer's feed-forward, sequence 64 */
    test_packed_case(8, 8, 48, true);       /* one full tile */
    test_packed_case(1, 1, 1, true);        /* one element */
    test_packed_case(9, 17, 49, false);     /* one past a tile each way */
    test_packed_case(25, 600, 70, true);    /* depth over one block (512) */
    test_packed_case(37, 1030, 300, false); /* columns over one block (288), depth over two */
    test_packed_case(5, 0, 9, true);        /* no depth: the bias alone */
    test_packed_case(30, 520, 340, true);   /* B read in place (at most 32 rows): over a block each way */
    /* every AVX-512 edge kernel: 1 to 7 rows by one, two or three vectors, full and masked */
    const int64_t edge_rows[] = {1, 2, 3, 4, 6, 7}, edge_cols[] = {16, 20, 32, 40, 47};
    for (size_t r = 0; r < sizeof edge_rows / sizeof *edge_rows; r++)
        for (size_t c = 0; c < sizeof edge_cols / sizeof *edge_cols; c++)
            test_packed_case(edge_rows[r], 33, edge_cols[c], (r + c) % 2);
}

/* ------------------------------------------------------------------ MaxPool */
/* One 2-D float32 MaxPool (kiln_cpu_max_pool) on [2, 3, H, W] against the window maximum computed
 * here (NaN never taken, as the kernel does): square kernel k, stride s, dilation d, pads p on both
 * sides, ceil_mode. */
static void test_maxpool_case(int64_t H, int64_t W, int64_t k, int64_t s, int64_t d, int64_t p, int64_t ceil) {
    int64_t ks[2] = {k, k}, st[2] = {s, s}, dl[2] = {d, d}, pads[4] = {p, p, p, p};
    kiln_attr attrs[5] = {{.name = "kernel_shape", .type = KILN_ATTR_INTS, .n = 2, .ints = ks},
                          {.name = "strides", .type = KILN_ATTR_INTS, .n = 2, .ints = st},
                          {.name = "dilations", .type = KILN_ATTR_INTS, .n = 2, .ints = dl},
                          {.name = "pads", .type = KILN_ATTR_INTS, .n = 4, .ints = pads},
                          {.name = "ceil_mode", .type = KILN_ATTR_INT, .i = ceil}};
    kiln_node node = {.name = "pool", .op_type = "MaxPool", .domain = "", .opset = 12, .nattrs = 5, .attrs = attrs};
    kiln_tensor x = {0}, y = {0};
    kiln_tensor *in[1] = {&x}, *out[1] = {&y};
    CHECK_OK(kiln_tensor_alloc(&x, KILN_F32, 4, (int64_t[]){2, 3, H, W}));
    float *xd = x.data;
    fill(xd, 6 * H * W);
    xd[H * W + 1] = NAN;
    CHECK_OK(kiln_cpu_max_pool(&node, in, 1, out, 1));
    int64_t OH = y.dims[2], OW = y.dims[3];
    const float *yd = y.data;
    int64_t bad = 0;
    for (int64_t pl = 0; pl < 6; pl++)
        for (int64_t oh = 0; oh < OH; oh++)
            for (int64_t ow = 0; ow < OW; ow++) {
                float m = -INFINITY;
                for (int64_t kh = 0; kh < k; kh++)
                    for (int64_t kw = 0; kw < k; kw++) {
                        int64_t ih = oh * s - p + kh * d, iw = ow * s - p + kw * d;
                        if (ih < 0 || ih >= H || iw < 0 || iw >= W) continue;
                        float v = xd[(pl * H + ih) * W + iw];
                        if (v > m) m = v;
                    }
                bad += yd[(pl * OH + oh) * OW + ow] != m;
            }
    CHECKF(bad == 0 && y.ndim == 4, "maxpool %lldx%lld k%lld s%lld d%lld p%lld ceil %lld: %lld outputs differ",
           (long long)H, (long long)W, (long long)k, (long long)s, (long long)d, (long long)p, (long long)ceil,
           (long long)bad);
    kiln_tensor_release(&x);
    kiln_tensor_release(&y);
}

/* ------------------------------------------------------------------ Concat */
/* Concat (the kernel table's) of three int8 tensors [rows, n_k, inner] along axis 1 against the
 * byte-by-byte concatenation: parts of any size (none, under and over the pool's 64 KiB blocks),
 * so that blocks start and end inside parts and rows. */
static void test_concat_case(int64_t rows, const int64_t n[3], int64_t inner) {
    const kiln_cpu_kernel *kern = kiln_cpu_kernel_find("", "Concat");
    REQUIRE_OK(kern ? KILN_OK : kiln_error(KILN_ERR_UNSUPPORTED, "no Concat kernel"));
    kiln_attr axis = {.name = "axis", .type = KILN_ATTR_INT, .i = 1};
    kiln_node node = {.name = "cat", .op_type = "Concat", .domain = "", .opset = 13, .nattrs = 1, .attrs = &axis};
    kiln_tensor x[3] = {{0}}, y = {0};
    kiln_tensor *in[3] = {&x[0], &x[1], &x[2]}, *out[1] = {&y};
    for (int k = 0; k < 3; k++) {
        CHECK_OK(kiln_tensor_alloc(&x[k], KILN_I8, 3, (int64_t[]){rows, n[k], inner}));
        int8_t *d = x[k].data;
        for (int64_t i = 0; i < rows * n[k] * inner; i++) d[i] = (int8_t)(i * 31 + k * 7);
    }
    CHECK_OK(kern->exec(&node, in, 3, out, 1));
    int64_t bad = 0, total = n[0] + n[1] + n[2];
    const int8_t *yd = y.data;
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c = 0, k = 0, base = 0; c < total; c++) {
            while (c - base >= n[k]) base += n[k++];
            const int8_t *xd = x[k].data;
            for (int64_t i = 0; i < inner; i++)
                bad += yd[(r * total + c) * inner + i] != xd[(r * n[k] + c - base) * inner + i];
        }
    CHECKF(bad == 0 && y.dims[1] == total, "concat rows %lld parts %lld,%lld,%lld inner %lld: %lld bytes differ",
           (long long)rows, (long long)n[0], (long long)n[1], (long long)n[2], (long long)inner, (long long)bad);
    for (int k = 0; k < 3; k++) kiln_tensor_release(&x[k]);
    kiln_tensor_release(&y);
}

static void test_concat(void) {
    test_concat_case(2, (const int64_t[]){64, 64, 0}, 55 * 55 * 4);    /* SqueezeNet's fire outputs (as bytes) */
    test_concat_case(3, (const int64_t[]){5, 0, 70001}, 1);            /* parts across blocks, an empty one */
    test_concat_case(40000, (const int64_t[]){1, 3, 2}, 1);            /* many short rows */
    test_concat_case(1, (const int64_t[]){2, 1, 1}, 3);                /* one block */
}

/* GlobalAveragePool (kiln_cpu_global_average_pool) on [2, 3, H, W] against a mean in double. */
static void test_global_average_case(int64_t H, int64_t W) {
    kiln_node node = {.name = "gap", .op_type = "GlobalAveragePool", .domain = "", .opset = 12};
    kiln_tensor x = {0}, y = {0};
    kiln_tensor *in[1] = {&x}, *out[1] = {&y};
    CHECK_OK(kiln_tensor_alloc(&x, KILN_F32, 4, (int64_t[]){2, 3, H, W}));
    float *xd = x.data;
    fill(xd, 6 * H * W);
    CHECK_OK(kiln_cpu_global_average_pool(&node, in, 1, out, 1));
    double worst = 0;
    for (int64_t pl = 0; pl < 6; pl++) {
        double sum = 0;
        for (int64_t i = 0; i < H * W; i++) sum += xd[pl * H * W + i];
        double err = fabs(((const float *)y.data)[pl] - sum / (double)(H * W));
        if (isnan(err) || err > worst) worst = isnan(err) ? INFINITY : err;
    }
    CHECKF(worst < 1e-6 && kiln_tensor_numel(&y) == 6, "global average %lldx%lld: error %g", (long long)H, (long long)W,
           worst);
    kiln_tensor_release(&x);
    kiln_tensor_release(&y);
}

static void test_maxpool(void) {
    test_maxpool_case(9, 11, 3, 2, 1, 1, 1);   /* the classifiers' 3x3 stride 2, ceil mode */
    test_maxpool_case(7, 40, 3, 1, 1, 1, 0);   /* stride 1, rows over 8-lane vectors */
    test_maxpool_case(10, 13, 2, 2, 1, 0, 0);  /* 2x2 stride 2, odd width */
    /* the 2x2 and 3x3 stride-2 kernel: widths below, at and across its 16-output blocks (SqueezeNet's
     * 111 and 55, ShuffleNetV2's 112 with pad 1), pads 0 and 1, ceil mode on and off */
    const int64_t s2_widths[] = {1, 2, 5, 31, 32, 33, 55, 111, 112};
    for (size_t i = 0; i < sizeof s2_widths / sizeof *s2_widths; i++)
        for (int64_t k = 2; k <= 3; k++)
            for (int64_t pad = 0; pad < k - 1 + (k == 3); pad++)
                for (int64_t ceil = 0; ceil <= 1; ceil++)
                    if (s2_widths[i] + 2 * pad >= k)
                        test_maxpool_case(7 + (int64_t)i % 3, s2_widths[i], k, 2, 1, pad, ceil);
    test_maxpool_case(12, 9, 3, 3, 2, 2, 1);   /* stride 3 (scalar columns), dilation 2 */
    test_maxpool_case(5, 37, 3, 2, 1, 0, 1);   /* ceil mode without pads: a window past the end */
    test_global_average_case(7, 9);             /* 63: vectors of 8 and a tail */
    test_global_average_case(1, 1);
    test_global_average_case(56, 56);
}

/* ------------------------------------------------------------------ activations */
static double act_reference(const kiln_act *a, double x) {
    double sig = 1.0 / (1.0 + exp(-x)), c;
    switch (a->kind) {
    case KILN_ACT_RELU: return x < 0 ? 0 : x;
    case KILN_ACT_LEAKY_RELU: return x < 0 ? a->p0 * x : x;
    case KILN_ACT_CLIP: return x < a->p0 ? a->p0 : x > a->p1 ? a->p1 : x;
    case KILN_ACT_HARD_SIGMOID: c = a->p0 * x + a->p1; return c < 0 ? 0 : c > 1 ? 1 : c;
    case KILN_ACT_HARD_SWISH: c = x / 6 + 0.5; return x * (c < 0 ? 0 : c > 1 ? 1 : c);
    case KILN_ACT_SIGMOID: return sig;
    case KILN_ACT_SILU: return x * sig;
    case KILN_ACT_TANH: return tanh(x);
    case KILN_ACT_GELU: return 0.5 * x * erfc(-x / sqrt(2.0));
    case KILN_ACT_GELU_TANH: /* 0.5 x (1 + tanh(u)) as x sigmoid(2u): no cancellation in double either */
        return x / (1 + exp(-1.5957691216057308 * (x + 0.044715 * x * x * x)));
    default: return NAN;
    }
}

static void test_activations(void) {
    const kiln_act acts[] = {{KILN_ACT_RELU, 0, 0},         {KILN_ACT_LEAKY_RELU, 0.1f, 0}, {KILN_ACT_CLIP, -1, 2},
                             {KILN_ACT_HARD_SIGMOID, 0.2f, 0.5f}, {KILN_ACT_HARD_SWISH, 0, 0}, {KILN_ACT_SIGMOID, 0, 0},
                             {KILN_ACT_SILU, 0, 0},         {KILN_ACT_TANH, 0, 0},     {KILN_ACT_GELU, 0, 0},
                             {KILN_ACT_GELU_TANH, 0, 0}};
    enum { N = 203 }; /* not a multiple of 16 or 4: both tails */
    float x[N], y[N];
    for (int i = 0; i < N; i++) x[i] = -25.0f + 50.0f * (float)i / (N - 5);
    x[N - 6] = -INFINITY;
    x[N - 5] = INFINITY;
    x[N - 4] = NAN;
    x[N - 3] = -100.0f;
    x[N - 2] = 100.0f;
    x[N - 1] = -0.0f;
    for (size_t k = 0; k < sizeof acts / sizeof *acts; k++) {
        memcpy(y, x, sizeof y);
        kiln_cpu_activation_apply(y, N, &acts[k]);
        double worst = 0;
        for (int i = 0; i < N; i++) {
            double want = act_reference(&acts[k], x[i]); /* NaN for NaN, and for -inf * 0 (SiLU, HardSwish) */
            if (isnan(want) || isinf(want)) {
                CHECKF(isnan(want) ? isnan(y[i]) : y[i] == want, "activation %d at %g: %g, not %g", acts[k].kind,
                       x[i], y[i], want);
                continue;
            }
            double err = fabs(y[i] - want) / (fabs(want) + 1e-30); /* values far below FLT_MIN may be 0 */
            if (isnan(err) || err > worst) worst = isnan(err) ? INFINITY : err;
        }
        /* a few float ulp; the GELUs carry more (erfc polynomial, rounded x^3: elementwise_vmath.h) */
        double tol = acts[k].kind == KILN_ACT_GELU || acts[k].kind == KILN_ACT_GELU_TANH ? 1e-5 : 2e-6;
        CHECKF(worst < tol, "activation %d: relative error %g", acts[k].kind, worst);
    }
}

/* The logistic activations (Sigmoid, SiLU, tanh-GELU share one e^-x) over a dense sweep of
 * [-90, 90], where the reduction's k spans every exponent the float range gives and the cut to 0
 * at -87 is crossed: within the same relative tolerance as above everywhere. */
static void test_logistic_sweep(void) {
    const kiln_act acts[] = {{KILN_ACT_SIGMOID, 0, 0}, {KILN_ACT_SILU, 0, 0}, {KILN_ACT_GELU_TANH, 0, 0}};
    enum { N = 36001 };
    static float x[N], y[N];
    for (int i = 0; i < N; i++) x[i] = -90.0f + 180.0f * (float)i / (N - 1);
    for (size_t k = 0; k < sizeof acts / sizeof *acts; k++) {
        memcpy(y, x, sizeof y);
        kiln_cpu_activation_apply(y, N, &acts[k]);
        double worst = 0, at = 0;
        for (int i = 0; i < N; i++) {
            double want = act_reference(&acts[k], x[i]), err = fabs(y[i] - want) / (fabs(want) + 1e-30);
            if (!(err <= worst)) worst = err, at = x[i];
        }
        double tol = acts[k].kind == KILN_ACT_GELU_TANH ? 1e-5 : 2e-6;
        CHECKF(worst < tol, "activation %d: relative error %g at %g", acts[k].kind, worst, at);
    }
}

int main(void) {
    test_threadpool();
    test_sgemm();
    test_maxpool();
    test_concat();
    test_activations();
    test_logistic_sweep();
    test_packed_gemm();
    test_conv2d();
    test_winograd_other_activation();
    return checks_report("test_cpu_kernels");
}
