/* cpu_gemm.c — kiln_cpu_sgemm (cpu_gemm.h). OpenBLAS is switched to one thread (its own workers
 * stopped) on first use and the product is split over the pool by output columns (or rows when
 * there are few columns), so that only one set of threads ever spins on the cores. Products with
 * at most GEMV_ROWS rows and a non-transposed A are matrix-vector products: with B^T ([N, K]
 * weights, the LLM and Gemm transB=1 layout) each output is a dot product of two contiguous rows;
 * with B ([K, N]) each output row is a sum of B's rows scaled by A's. */
#include "backends/cpu/cpu_gemm.h"

#include "backends/cpu/cpu_simd.h"
#include "core/threadpool.h"

#include <cblas.h>
#include <pthread.h>

#define GEMV_ROWS 4
/* Below this many multiply-adds a product runs on one thread. */
#define PARALLEL_MACS (INT64_C(1) << 15)

typedef struct gemm_job {
    bool ta, tb;
    int64_t M, N, K, lda, ldb, ldc;
    float alpha, beta;
    const float *A, *B;
    float *C;
} gemm_job;

/* The pthreads build of OpenBLAS starts OPENBLAS_NUM_THREADS - 1 workers (all cores when unset) as
 * the library loads, and an idle worker polls with sched_yield for some 0.1 s before it sleeps:
 * time taken from the pool's threads on a machine with few cores. blas_thread_shutdown_ (exported
 * by the threaded builds; the call OpenBLAS's own fork handler makes) joins them; with one thread
 * OpenBLAS never starts them again. Weak, so a build of OpenBLAS without threads links too. */
extern int blas_thread_shutdown_(void) __attribute__((weak));

static pthread_once_t g_blas_once = PTHREAD_ONCE_INIT;
static void blas_single_thread(void) {
    openblas_set_num_threads(1);
    if (blas_thread_shutdown_) blas_thread_shutdown_();
}

void kiln_cpu_gemm_init(void) { pthread_once(&g_blas_once, blas_single_thread); }

/* a . w over K elements, two vector accumulators in flight. */
KILN_SIMD_CLONES
static float dot(const float *a, const float *w, int64_t K) {
    kiln_v8f s0 = {0}, s1 = {0};
    int64_t k = 0;
    for (; k + 16 <= K; k += 16) {
        s0 += kiln_v8_load(w + k) * kiln_v8_load(a + k);
        s1 += kiln_v8_load(w + k + 8) * kiln_v8_load(a + k + 8);
    }
    float s = kiln_v8_sum(s0 + s1);
    for (; k < K; k++) s += a[k] * w[k];
    return s;
}

/* y_t = alpha * (a_t . w_o) + beta * y_t for output columns o in [o0, o1), rows t < M. */
KILN_SIMD_CLONES
static void gemv_t_range(const gemm_job *j, int64_t o0, int64_t o1) {
    const int64_t K = j->K, M = j->M, K8 = K & ~(int64_t)7;
    for (int64_t o = o0; o < o1; o++) {
        if (M == 1) {
            float v = j->alpha * dot(j->A, j->B + o * j->ldb, K);
            j->C[o] = j->beta == 0.0f ? v : v + j->beta * j->C[o];
            continue;
        }
        const float *w = j->B + o * j->ldb;
        kiln_v8f acc[GEMV_ROWS] = {{0}};
        float tail[GEMV_ROWS] = {0};
        for (int64_t k = 0; k < K8; k += 8) {
            kiln_v8f wv = kiln_v8_load(w + k);
            for (int64_t t = 0; t < M; t++) acc[t] += wv * kiln_v8_load(j->A + t * j->lda + k);
        }
        for (int64_t k = K8; k < K; k++)
            for (int64_t t = 0; t < M; t++) tail[t] += w[k] * j->A[t * j->lda + k];
        for (int64_t t = 0; t < M; t++) {
            float v = j->alpha * (kiln_v8_sum(acc[t]) + tail[t]), *y = j->C + t * j->ldc + o;
            *y = j->beta == 0.0f ? v : v + j->beta * *y;
        }
    }
}

/* y_t[c0, c1) = alpha * sum_k a_t[k] b_k[c0, c1) + beta * y_t[c0, c1), rows t < M. */
KILN_SIMD_CLONES
static void gemv_n_range(const gemm_job *j, int64_t c0, int64_t c1) {
    enum { W = 64 }; /* columns per block: 8 vector accumulators per row */
    for (int64_t b0 = c0; b0 < c1; b0 += W) {
        int64_t bw = c1 - b0 < W ? c1 - b0 : W;
        for (int64_t t = 0; t < j->M; t++) {
            float acc[W] = {0};
            const float *a = j->A + t * j->lda;
            for (int64_t k = 0; k < j->K; k++) {
                const float *b = j->B + k * j->ldb + b0;
                float av = a[k];
                if (bw == W)
                    for (int i = 0; i < W; i += 8)
                        kiln_v8_store(acc + i, kiln_v8_load(acc + i) + kiln_v8_splat(av) * kiln_v8_load(b + i));
                else
                    for (int64_t i = 0; i < bw; i++) acc[i] += av * b[i];
            }
            float *y = j->C + t * j->ldc + b0;
            for (int64_t i = 0; i < bw; i++) y[i] = j->alpha * acc[i] + (j->beta == 0.0f ? 0.0f : j->beta * y[i]);
        }
    }
}

static void gemv_t_part(void *ctx, int64_t b, int64_t e) { gemv_t_range(ctx, b, e); }
static void gemv_n_part(void *ctx, int64_t b, int64_t e) { gemv_n_range(ctx, b, e); }

/* OpenBLAS on output columns [b, e) (the full product's rows). */
static void columns_part(void *ctx, int64_t b, int64_t e) {
    const gemm_job *j = ctx;
    const float *B = j->B + (j->tb ? b * j->ldb : b);
    cblas_sgemm(CblasRowMajor, j->ta ? CblasTrans : CblasNoTrans, j->tb ? CblasTrans : CblasNoTrans, (int)j->M,
                (int)(e - b), (int)j->K, j->alpha, j->A, (int)j->lda, B, (int)j->ldb, j->beta, j->C + b, (int)j->ldc);
}

/* OpenBLAS on output rows [b, e). */
static void rows_part(void *ctx, int64_t b, int64_t e) {
    const gemm_job *j = ctx;
    const float *A = j->A + (j->ta ? b : b * j->lda);
    cblas_sgemm(CblasRowMajor, j->ta ? CblasTrans : CblasNoTrans, j->tb ? CblasTrans : CblasNoTrans, (int)(e - b),
                (int)j->N, (int)j->K, j->alpha, A, (int)j->lda, j->B, (int)j->ldb, j->beta, j->C + b * j->ldc,
                (int)j->ldc);
}

void kiln_cpu_sgemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float *A,
                    int64_t lda, const float *B, int64_t ldb, float beta, float *C, int64_t ldc) {
    if (M <= 0 || N <= 0) return;
    kiln_cpu_gemm_init();
    gemm_job j = {trans_a, trans_b, M, N, K, lda, ldb, ldc, alpha, beta, A, B, C};
    bool serial = M * N * K < PARALLEL_MACS;
    if (M <= GEMV_ROWS && !trans_a)
        kiln_parallel_for(N, serial ? N : trans_b ? 16 : 64, trans_b ? gemv_t_part : gemv_n_part, &j);
    else if (serial) columns_part(&j, 0, N);
    else if (N >= 16 * kiln_threadpool_size() || N >= M) kiln_parallel_for(N, 16, columns_part, &j);
    else kiln_parallel_for(M, 4, rows_part, &j);
}
