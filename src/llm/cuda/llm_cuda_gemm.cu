/* llm_cuda_gemm.cu — the products with the weights, y[n, N] = x[n, K] W^T (+ bias), W [N, K] row-major
 * (nn.Linear's layout), FP16/BF16 in, FP32 accumulation:
 *
 *  - few token rows (decode): gemv_tpl_kernel, one template over its launch geometry (threads per
 *    row group, groups per block, rows per group, 16-byte loads in flight), in LLMC_GEMV_CONFIGS
 *    configurations; the first product of each shape outside a capture times them all and the
 *    fastest is kept per shape (g->gemv_picks); KILN_LLM_GEMV=0..9 forces one configuration for
 *    every shape. FP32 sums, the bias added in FP32. Bandwidth-bound, as batch-1 decode is. With
 *    g->pdl (sm_90) a programmatic dependent launch: the first round of weight loads is issued before
 *    the kernel waits for the one before it (lc_gemv_rows' WAIT).
 *  - otherwise cuBLASLt. Its interface is column-major, and a row-major [r, c] array is the
 *    column-major [c, r] one with the same memory, so:
 *        W  [N, K] row-major = Wc [K, N] column-major (ld K)
 *        x  [n, K] row-major = Xc [K, n] column-major (ld ldx)
 *        y  [n, N] row-major = Yc [N, n] column-major (ld ldy)
 *    and y = x W^T  <=>  Yc = Wc^T Xc: cuBLASLt's A = W with TRANSA = T, B = x with TRANSB = N, D = y,
 *    m = N, n = n, k = K. The bias epilogue adds a vector of m = N values along D's rows, i.e. one per
 *    output feature. CUBLAS_COMPUTE_32F with FP32 scale; D is the model dtype or FP32 (logits).
 *    Descriptors and the algorithm (the heuristic's first, or for at most LT_TUNE_MAX_N token rows the
 *    fastest of its first LT_CANDIDATES, timed once) are cached per shape (g->plans, LLMC_PLANS entries,
 *    replaced round-robin), so a step does no heuristic queries once its shapes were seen.
 *
 * The quantized GEMV family (llm_cuda_gemv_q.cu; llmc_gemv_q8_config for INT8 weights,
 * llmc_gemv_q4_config for INT4) is chosen per shape by the same timing, as its own family
 * (KILN_LLM_GEMV_Q8=0..9 forces one of its configurations for both).
 *
 * Both timed choices go to the timing cache of options.timing_cache (llm_cuda_tactics.c), and a
 * shape recorded there is not timed again: a cuBLASLt algorithm is taken when it still fits the call
 * (kiln_cuda_lt_algo_fits, matmul.cu's check of the tensor engine's tactics). */
#include "backends/cuda/matmul.cuh"
#include "llm/cuda/llm_cuda_util.cuh"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define LLMC_PLANS 64
#define LT_CANDIDATES 16 /* algorithms timed per small product (options.gemm_autotune): the heuristic's
                          * order is poor for the skinny products of 64-row decode steps */
#define LT_TUNE_MAX_N 256 /* products of at most this many token rows are timed */
#define LT_TUNE_REPS 3

/* ---------------------------------------------------------------- GEMV */

template <typename T> static __device__ __forceinline__ void gemv_store(T *p, float v) { *p = ku_from_f32<T>(v); }

/* ---------------------------------------------------------------- the GEMV family */

/* One kernel template over its launch geometry: a block is GROUPS groups of TPR threads (TPR a
 * multiple of 32: one warp or several split K); a group owns R consecutive output rows and its
 * threads take the 16-byte chunks g, g + TPR, ... of each of them (g: the thread's index in the
 * group), U chunks of every row in flight per round (R * U loads per thread), streamed with __ldcs
 * (each weight is read once per product): lc_gemv_rows (llm_cuda_util.cuh), the fused GEMV's loop
 * too. The 8 values of each token row under a chunk are loaded once (through L1: x is small and
 * shared by every block) and used for all R rows, which is what keeps x's traffic below the
 * weights' at NT = 8. FP32 sums reduce over the warp by shuffles, then
 * (TPR > 32 only) over the group's warps through shared memory; bias added in FP32.
 * NT: token rows compiled for; NT <= 4 runs with n == NT, NT = 8 with any n <= 8 (rows past n
 * repeat row n - 1 and are not stored). Rows past N are neither loaded nor stored. */
/* The end of a split-K launch (S > 1, gemv_tpl_kernel): the group's sums of its block's share of K go
 * to shared memory (over the warp by shuffles, then over the group's warps), lc_cluster_sum adds the
 * cluster's S shares in rank order, and rank 0's threads add the bias and store. */
template <typename T, typename OutT, int NT, int TPR, int GROUPS, int R, int S>
static __device__ __forceinline__ void gemv_split_store(const float (&acc)[R][NT], int grp, int gi, int lane, int rows,
                                                        int n, int row0, const T *bias, OutT *y, int ldy) {
    constexpr int WPR = TPR / 32;
    __shared__ float part[GROUPS][R * NT];
    if constexpr (WPR == 1) {
#pragma unroll
        for (int r = 0; r < R; r++)
#pragma unroll
            for (int t = 0; t < NT; t++) {
                const float v = ku_warp_sum(acc[r][t]);
                if (lane == r * NT + t) part[grp][r * NT + t] = v;
            }
    } else {
        __shared__ float red[GROUPS][WPR][R * NT];
        const int wg = gi >> 5;
#pragma unroll
        for (int r = 0; r < R; r++)
#pragma unroll
            for (int t = 0; t < NT; t++) {
                const float v = ku_warp_sum(acc[r][t]);
                if (lane == 0) red[grp][wg][r * NT + t] = v;
            }
        __syncthreads();
        if (gi < R * NT) {
            float v = 0.0f;
#pragma unroll
            for (int wi = 0; wi < WPR; wi++) v += red[grp][wi][gi];
            part[grp][gi] = v;
        }
    }
    float v = 0.0f;
    if (lc_cluster_sum<S>(part[grp], gi, R * NT, v)) {
        const int r = gi / NT, t = gi - r * NT;
        if (r < rows && t < n) gemv_store<OutT>(y + (size_t)t * ldy + row0 + r, v + (bias ? ku_f32(bias[row0 + r]) : 0.0f));
    }
}

template <typename T, typename OutT, int NT, int TPR, int GROUPS, int R, int U, int S>
__global__ void __launch_bounds__(TPR *GROUPS)
    gemv_tpl_kernel(const T *__restrict__ x, int ldx, int n, const T *__restrict__ w, const T *__restrict__ bias,
                    OutT *__restrict__ y, int ldy, int N, int K) {
    constexpr int WPR = TPR / 32; /* warps per group */
    static_assert(TPR % 32 == 0 && WPR >= 1, "TPR: a multiple of 32");
    static_assert(WPR == 1 || R * NT <= TPR, "the cross-warp sum takes one thread per (row, token row)");
    static_assert(WPR > 1 || R * NT <= 32, "one lane stores each (row, token row)");
    const int tid = threadIdx.x, grp = tid / TPR, gi = tid - grp * TPR, lane = tid & 31;
    const int split = S > 1 ? (int)(blockIdx.x % S) : 0, rb = (int)(blockIdx.x / S);
    const int row0 = (rb * GROUPS + grp) * R, rows = min(R, N - row0), K8 = K >> 3; /* rows <= 0: idle */
    const uint4 *wr[R];
#pragma unroll
    for (int r = 0; r < R; r++) wr[r] = reinterpret_cast<const uint4 *>(w + (size_t)min(row0 + r, N - 1) * K);
    const T *xr[NT];
#pragma unroll
    for (int t = 0; t < NT; t++) xr[t] = x + (size_t)(NT <= 4 ? t : min(t, n - 1)) * ldx;
    float acc[R][NT];
#pragma unroll
    for (int r = 0; r < R; r++)
#pragma unroll
        for (int t = 0; t < NT; t++) acc[r][t] = 0.0f;
    if (rows > 0) lc_gemv_rows<T, NT, TPR * S, R, R, U, true, true>(wr, rows, xr, split * TPR + gi, K8, acc);
    lc_pdl_wait(); /* (returns at once where the loop waited) before y is written */
    lc_pdl_launch_dependents();
    if constexpr (S > 1) {
        gemv_split_store<T, OutT, NT, TPR, GROUPS, R, S>(acc, grp, gi, lane, rows, n, row0, bias, y, ldy);
    } else if constexpr (WPR == 1) {
#pragma unroll
        for (int r = 0; r < R; r++)
#pragma unroll
            for (int t = 0; t < NT; t++) {
                const float v = ku_warp_sum(acc[r][t]); /* every lane has it: lane r * NT + t stores */
                if (lane == r * NT + t && r < rows && t < n)
                    gemv_store<OutT>(y + (size_t)t * ldy + row0 + r, v + (bias ? ku_f32(bias[row0 + r]) : 0.0f));
            }
    } else {
        __shared__ float red[GROUPS][WPR][R * NT];
        const int wg = gi >> 5;
#pragma unroll
        for (int r = 0; r < R; r++)
#pragma unroll
            for (int t = 0; t < NT; t++) {
                const float v = ku_warp_sum(acc[r][t]);
                if (lane == 0) red[grp][wg][r * NT + t] = v;
            }
        __syncthreads();
        if (gi < R * NT) {
            const int r = gi / NT, t = gi - r * NT;
            if (r < rows && t < n) {
                float v = 0.0f;
#pragma unroll
                for (int wi = 0; wi < WPR; wi++) v += red[grp][wi][gi];
                if (bias) v += ku_f32(bias[row0 + r]);
                gemv_store<OutT>(y + (size_t)t * ldy + row0 + r, v);
            }
        }
    }
}

/* The candidates: threads per row group, groups per block, rows per group, chunks per row in flight,
 * blocks splitting K (a cluster). Chosen to span the shapes of decode: a warp per row with every
 * chunk of a K <= 2048 row in flight at once (0), warps on 2 or 4 rows sharing x (1, 2), 2-8 warps
 * splitting long rows (3-7; 6 is the geometry of the split-K kernel the family replaced), clusters of
 * 4 or 2 blocks splitting K for narrow products (8, 9; their unsplit geometry before sm_90). Every one
 * is checked against the CPU in tests/gpu/test_llm_cuda.c and the llm.Gemv op cases. */
#define GEMV_CONFIG_LIST(X)                                                                        \
    X(0, 32, 4, 1, 8, 1)                                                                           \
    X(1, 32, 4, 2, 4, 1)                                                                           \
    X(2, 32, 8, 4, 2, 1)                                                                           \
    X(3, 64, 2, 2, 4, 1)                                                                           \
    X(4, 128, 1, 1, 8, 1)                                                                          \
    X(5, 128, 2, 2, 4, 1)                                                                          \
    X(6, 256, 1, 4, 2, 1)                                                                          \
    X(7, 256, 1, 2, 4, 1)                                                                          \
    X(8, 32, 4, 1, 2, 4)                                                                           \
    X(9, 64, 2, 2, 2, 2)

static const char *const GEMV_NAME[LLMC_GEMV_CONFIGS] = {
#define X(i, tpr, gr, r, u, sk) "#" #i ": " #tpr " thr/row x " #r " rows, " #gr " groups, " #u " loads/row, split " #sk,
    GEMV_CONFIG_LIST(X)
#undef X
};

template <typename T, typename OutT, int NT, int TPR, int GROUPS, int R, int U, int S>
static kiln_status gemv_tpl_nt(cudaStream_t stream, bool pdl, const void *x, int ldx, int n, const void *w,
                               const void *bias, int N, void *y, int ldy, int K) {
    const unsigned blocks = (unsigned)((N + GROUPS * R - 1) / (GROUPS * R));
    if (S > 1 && lc_clusters_ok())
        KILN_TRY(lc_launch(gemv_tpl_kernel<T, OutT, NT, TPR, GROUPS, R, U, S>, blocks, S, TPR * GROUPS, 0, stream, pdl,
                           (const T *)x, ldx, n, (const T *)w, (const T *)bias, (OutT *)y, ldy, N, K));
    else /* unsplit: S == 1, or no clusters on this device */
        KILN_TRY(lc_launch(gemv_tpl_kernel<T, OutT, NT, TPR, GROUPS, R, U, 1>, blocks, 1, TPR * GROUPS, 0, stream, pdl,
                           (const T *)x, ldx, n, (const T *)w, (const T *)bias, (OutT *)y, ldy, N, K));
    KILN_CUDA_LAUNCH_CHECK("gemv_tpl_kernel");
    return KILN_OK;
}

template <typename T, typename OutT, int TPR, int GROUPS, int R, int U, int S>
static kiln_status gemv_tpl_n(cudaStream_t stream, bool pdl, const void *x, int ldx, int n, const void *w,
                              const void *bias, int N, void *y, int ldy, int K) {
    switch (n) {
    case 1: return gemv_tpl_nt<T, OutT, 1, TPR, GROUPS, R, U, S>(stream, pdl, x, ldx, n, w, bias, N, y, ldy, K);
    case 2: return gemv_tpl_nt<T, OutT, 2, TPR, GROUPS, R, U, S>(stream, pdl, x, ldx, n, w, bias, N, y, ldy, K);
    case 3: return gemv_tpl_nt<T, OutT, 3, TPR, GROUPS, R, U, S>(stream, pdl, x, ldx, n, w, bias, N, y, ldy, K);
    case 4: return gemv_tpl_nt<T, OutT, 4, TPR, GROUPS, R, U, S>(stream, pdl, x, ldx, n, w, bias, N, y, ldy, K);
    default: return gemv_tpl_nt<T, OutT, 8, TPR, GROUPS, R, U, S>(stream, pdl, x, ldx, n, w, bias, N, y, ldy, K);
    }
}

template <typename T, typename OutT>
static kiln_status gemv_tpl_cfg(cudaStream_t stream, bool pdl, int cfg, const void *x, int ldx, int n, const void *w,
                                const void *bias, int N, void *y, int ldy, int K) {
    switch (cfg) {
#define X(i, tpr, gr, r, u, sk)                                                                    \
    case i: return gemv_tpl_n<T, OutT, tpr, gr, r, u, sk>(stream, pdl, x, ldx, n, w, bias, N, y, ldy, K);
        GEMV_CONFIG_LIST(X)
#undef X
    default: return kiln_error(KILN_ERR_INTERNAL, "llm cuda: no GEMV configuration %d", cfg);
    }
}

/* ---------------------------------------------------------------- cuBLASLt */

#define PLAN_KEY 9

struct llmc_plan {
    int64_t key[PLAN_KEY]; /* N, n, K, ldx, ldy, out_f32, bias, alignment of x, alignment of y */
    bool used;
    cublasLtMatmulDesc_t op;
    cublasLtMatrixLayout_t la, lb, ld;
    cublasLtMatmulAlgo_t algo;
};

static void plan_clear(llmc_plan *p) {
    if (p->ld) cublasLtMatrixLayoutDestroy(p->ld);
    if (p->lb) cublasLtMatrixLayoutDestroy(p->lb);
    if (p->la) cublasLtMatrixLayoutDestroy(p->la);
    if (p->op) cublasLtMatmulDescDestroy(p->op);
    memset(p, 0, sizeof *p);
}

extern "C" void llmc_plans_free(kiln_llm_cuda *g) {
    for (int i = 0; g->plans && i < g->n_plans; i++) plan_clear(&g->plans[i]);
    free(g->plans);
    g->plans = NULL;
    g->n_plans = 0;
}

/* Descriptors and algorithm for p->key's product (p zeroed by the caller; cleared on failure by it);
 * bias is this call's bias vector (the heuristic sees a real pointer; later calls set their own). */
/* Times each candidate algorithm of p on this call's operands (LT_TUNE_REPS runs after one warm-up,
 * between events; y is overwritten, the caller's own product follows) and returns the fastest, or -1
 * when none could be timed; *best_ms_out gets its time per product, *first_ms the heuristic's first
 * choice's (left as it was when that one was not timed). Only outside stream capture. */
static int plan_tune(kiln_llm_cuda *g, llmc_plan *p, const cublasLtMatmulHeuristicResult_t *res, int got, const void *w,
                     const void *x, void *y, float *best_ms_out, float *first_ms) {
    cudaEvent_t e0 = NULL, e1 = NULL;
    if (cudaEventCreate(&e0) != cudaSuccess || cudaEventCreate(&e1) != cudaSuccess) {
        if (e0) cudaEventDestroy(e0);
        (void)cudaGetLastError();
        return -1;
    }
    const float alpha = 1.0f, beta = 0.0f;
    int best = -1;
    float best_ms = 0.0f;
    for (int i = 0; i < got; i++) {
        if (res[i].state != CUBLAS_STATUS_SUCCESS || res[i].workspaceSize > g->kc.workspace_bytes) continue;
        bool ok = cublasLtMatmul(g->kc.lt, p->op, &alpha, w, p->la, x, p->lb, &beta, y, p->ld, y, p->ld, &res[i].algo,
                                 g->kc.workspace, g->kc.workspace_bytes, g->kc.stream) == CUBLAS_STATUS_SUCCESS;
        ok = ok && cudaEventRecord(e0, g->kc.stream) == cudaSuccess;
        for (int r = 0; ok && r < LT_TUNE_REPS; r++)
            ok = cublasLtMatmul(g->kc.lt, p->op, &alpha, w, p->la, x, p->lb, &beta, y, p->ld, y, p->ld, &res[i].algo,
                                g->kc.workspace, g->kc.workspace_bytes, g->kc.stream) == CUBLAS_STATUS_SUCCESS;
        ok = ok && cudaEventRecord(e1, g->kc.stream) == cudaSuccess && cudaEventSynchronize(e1) == cudaSuccess;
        float ms = 0.0f;
        ok = ok && cudaEventElapsedTime(&ms, e0, e1) == cudaSuccess;
        if (!ok) {
            (void)cudaGetLastError();
            continue;
        }
        if (i == 0) *first_ms = ms / LT_TUNE_REPS;
        if (best < 0 || ms < best_ms) {
            best = i;
            best_ms = ms;
        }
    }
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    *best_ms_out = best_ms / LT_TUNE_REPS;
    return best;
}

/* The shape of p's product as its timing-cache key says it (llm_cuda_tactics.c). */
static void plan_shape(const kiln_llm_cuda *g, const llmc_plan *p, char *buf, size_t cap) {
    snprintf(buf, cap, "%s N %lld n %lld K %lld ldx %lld ldy %lld out %s bias %lld align x %lld y %lld",
             kiln_dtype_name(g->dtype), (long long)p->key[0], (long long)p->key[1], (long long)p->key[2],
             (long long)p->key[3], (long long)p->key[4], p->key[5] ? "fp32" : kiln_dtype_name(g->dtype),
             (long long)p->key[6], (long long)p->key[7], (long long)p->key[8]);
}

/* p's algorithm from the timing cache when one is recorded for its shape and fits this call
 * (kiln_cuda_lt_algo_fits); al: the alignments of W, X, Y, Y. */
static bool plan_from_cache(kiln_llm_cuda *g, llmc_plan *p, const char *shape, const uint32_t *al) {
    const kiln_tactic *t = llmc_tactic_find(g, "llm.gemm", shape);
    if (!t || t->kind != KILN_TACTIC_CUBLASLT) return false;
    cublasLtMatmulAlgo_t algo;
    static_assert(sizeof algo == sizeof t->blob, "a tactic holds one cublasLtMatmulAlgo_t");
    memcpy(&algo, t->blob, sizeof algo);
    char why[160];
    if (!kiln_cuda_lt_algo_fits(&g->kc, p->op, p->la, p->lb, p->ld, &algo, al, why, sizeof why)) return false;
    p->algo = algo;
    return true;
}

/* Records the timed choice res[pick] of p's shape in the timing cache. */
static void plan_record(kiln_llm_cuda *g, const char *shape, const cublasLtMatmulHeuristicResult_t *res, int pick,
                        float ms, float first_ms) {
    kiln_tactic t;
    memset(&t, 0, sizeof t);
    t.kind = KILN_TACTIC_CUBLASLT;
    t.heuristic_index = pick;
    t.time_ms = ms;
    t.heuristic_ms = first_ms;
    memcpy(t.blob, &res[pick].algo, sizeof res[pick].algo);
    int32_t id = -1;
    size_t written = 0;
    if (cublasLtMatmulAlgoConfigGetAttribute(&res[pick].algo, CUBLASLT_ALGO_CONFIG_ID, &id, sizeof id, &written) !=
        CUBLAS_STATUS_SUCCESS)
        id = -1;
    t.algo = id;
    llmc_tactic_put(g, "llm.gemm", shape, &t);
}

static kiln_status plan_make(kiln_llm_cuda *g, llmc_plan *p, const void *bias_ptr, const void *w, const void *x,
                             void *y) {
    const int64_t N = p->key[0], n = p->key[1], K = p->key[2], ldx = p->key[3], ldy = p->key[4];
    const bool out_f32 = p->key[5] != 0, bias = p->key[6] != 0;
    /* y [n, N] = x [n, K] W^T: W [N, K] is the product's B, transposed */
    kiln_cuda_lt_shape sh;
    memset(&sh, 0, sizeof sh);
    sh.ab_type = g->dtype;
    sh.d_type = out_f32 ? KILN_F32 : g->dtype;
    sh.tb = true;
    sh.M = n;
    sh.N = N;
    sh.K = K;
    sh.batch = 1;
    sh.lda = ldx;
    sh.ldb = K;
    sh.ldd = ldy;
    sh.bias = bias ? bias_ptr : NULL;
    const uint32_t al_w = kiln_cuda_lt_align(NULL, K * 2), al_x = (uint32_t)p->key[7], al_y = (uint32_t)p->key[8];
    sh.align[0] = al_w;
    sh.align[1] = al_x;
    sh.align[2] = sh.align[3] = al_y;
    kiln_cuda_lt_descs d;
    memset(&d, 0, sizeof d);
    kiln_status made = kiln_cuda_lt_descs_make(&sh, g->kc.workspace_bytes, &d);
    p->op = d.op; /* the plan keeps the descriptors (plan_clear frees them, on failure too) */
    p->la = d.la;
    p->lb = d.lb;
    p->ld = d.ld;
    const cublasLtMatmulPreference_t pref = d.pref;
    d.op = NULL;
    d.la = d.lb = d.ld = NULL;
    if (made != KILN_OK) {
        kiln_cuda_lt_descs_free(&d);
        return made;
    }
    cublasStatus_t st = CUBLAS_STATUS_SUCCESS;
    /* Small products (decode batches) time the heuristic's first LT_CANDIDATES algorithms and keep the
     * fastest (options.gemm_autotune; not while the stream is being captured); others take its first. */
    cudaStreamCaptureStatus cap = cudaStreamCaptureStatusNone;
    const bool tune = g->opt.gemm_autotune && n <= LT_TUNE_MAX_N &&
                      cudaStreamIsCapturing(g->kc.stream, &cap) == cudaSuccess && cap == cudaStreamCaptureStatusNone;
    cublasLtMatmulHeuristicResult_t res[LT_CANDIDATES];
    memset(res, 0, sizeof res);
    int got = 0;
    if (st == CUBLAS_STATUS_SUCCESS)
        st = cublasLtMatmulAlgoGetHeuristic(g->kc.lt, p->op, p->la, p->lb, p->ld, p->ld, pref, tune ? LT_CANDIDATES : 1, res,
                                            &got);
    kiln_cuda_lt_descs_free(&d); /* the preference alone */
    KILN_CUBLAS_TRY(st);
    if (got < 1 || res[0].state != CUBLAS_STATUS_SUCCESS)
        return kiln_error(KILN_ERR_UNSUPPORTED, "cuBLASLt has no %s algorithm for a [%lld, %lld] x [%lld, %lld]^T product%s",
                          kiln_dtype_name(g->dtype), (long long)n, (long long)K, (long long)N, (long long)K,
                          bias ? " with a bias epilogue" : "");
    kiln_llm_cuda_probe *pr = g->opt.probe;
    int pick = 0;
    if (tune && got > 1) {
        char shape[256];
        plan_shape(g, p, shape, sizeof shape);
        const uint32_t al[4] = {al_w, al_x, al_y, al_y};
        if (plan_from_cache(g, p, shape, al)) {
            if (pr) pr->tactics_cached++;
            p->used = true;
            return KILN_OK;
        }
        float ms = 0.0f, first_ms = 0.0f;
        const int t = plan_tune(g, p, res, got, w, x, y, &ms, &first_ms);
        if (t >= 0) {
            pick = t;
            plan_record(g, shape, res, pick, ms, first_ms);
            if (pr) pr->tactics_timed++;
        }
    }
    p->algo = res[pick].algo;
    p->used = true;
    return KILN_OK;
}

/* The cached plan for key, made on first use (with bias_ptr as plan_make says). */
static kiln_status plan_get(kiln_llm_cuda *g, const int64_t *key, const void *bias_ptr, const void *w, const void *x,
                            void *y, llmc_plan **out) {
    for (int i = 0; i < g->n_plans; i++)
        if (g->plans[i].used && !memcmp(g->plans[i].key, key, sizeof g->plans[i].key)) {
            *out = &g->plans[i];
            return KILN_OK;
        }
    if (!g->plans) {
        g->plans = (llmc_plan *)calloc(LLMC_PLANS, sizeof *g->plans);
        if (!g->plans) return kiln_error(KILN_ERR_OUT_OF_MEMORY, "out of memory");
    }
    llmc_plan *p = NULL;
    if (g->n_plans < LLMC_PLANS) {
        p = &g->plans[g->n_plans++];
    } else {
        p = &g->plans[g->next_plan];
        g->next_plan = (g->next_plan + 1) % LLMC_PLANS;
        plan_clear(p);
    }
    memcpy(p->key, key, sizeof p->key);
    kiln_status s = plan_make(g, p, bias_ptr, w, x, y);
    if (s != KILN_OK) {
        plan_clear(p); /* an unused slot: plan_get skips it, plans_free clears it again harmlessly */
        return s;
    }
    *out = p;
    return KILN_OK;
}

static kiln_status lt_linear(kiln_llm_cuda *g, const void *x, int ldx, int n, int K, const void *w, const void *bias,
                             int N, void *y, int ldy, bool out_f32) {
    if (bias && out_f32) return kiln_error(KILN_ERR_INTERNAL, "llmc_linear: a bias with FP32 output");
    const int64_t es_y = out_f32 ? 4 : 2;
    const int64_t key[PLAN_KEY] = {N, n, K, ldx, ldy, out_f32, bias != NULL, kiln_cuda_lt_align(x, (int64_t)ldx * 2),
                                   kiln_cuda_lt_align(y, (int64_t)ldy * es_y)};
    llmc_plan *p = NULL;
    KILN_TRY(plan_get(g, key, bias, w, x, y, &p));
    if (bias)
        KILN_CUBLAS_TRY(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias));
    const float alpha = 1.0f, beta = 0.0f;
    KILN_CUBLAS_TRY(cublasLtMatmul(g->kc.lt, p->op, &alpha, w, p->la, x, p->lb, &beta, y, p->ld, y, p->ld, &p->algo,
                                   g->kc.workspace, g->kc.workspace_bytes, g->kc.stream));
    return KILN_OK;
}

/* ---------------------------------------------------------------- GEMV choice */

#define GEMV_TUNE_BYTES (128.0 * (1 << 20)) /* weight bytes a candidate streams while timed: past L2 */
#define GEMV_TUNE_MIN_REPS 3
#define GEMV_TUNE_MAX_REPS 24 /* (10 kernels x reps launches queue behind the gate) */
#define GEMV_GATE_MS 200.0

template <typename T>
static kiln_status gemv_any(cudaStream_t stream, bool pdl, int cfg, const void *x, int ldx, int n, int K, const void *w,
                            const void *bias, int N, void *y, int ldy, bool out_f32) {
    return out_f32 ? gemv_tpl_cfg<T, float>(stream, pdl, cfg, x, ldx, n, w, bias, N, y, ldy, K)
                   : gemv_tpl_cfg<T, T>(stream, pdl, cfg, x, ldx, n, w, bias, N, y, ldy, K);
}

extern "C" kiln_status llmc_gemv_launch(kiln_dtype dtype, cudaStream_t stream, int cfg, const void *x, int ldx, int n,
                                        int K, const void *w, const void *bias, int N, void *y, int ldy,
                                        bool out_f32, bool pdl) {
    if (dtype != KILN_F16 && dtype != KILN_BF16)
        return kiln_error(KILN_ERR_INVALID_ARGUMENT, "llm cuda GEMV: dtype %s", kiln_dtype_name(dtype));
    if (n < 1 || n > LLMC_GEMV_MAX || N < 1 || K < 8 || K % 8 || ldx % 8 || ldx < K || ldy < N || !ku_aligned16(x) ||
        !ku_aligned16(w))
        return kiln_error(KILN_ERR_INVALID_ARGUMENT, "llm cuda GEMV: n %d (1..%d), N %d, K %d, ldx %d, ldy %d (K and "
                          "ldx multiples of 8, x and w 16-byte aligned)", n, LLMC_GEMV_MAX, N, K, ldx, ldy);
    if (cfg < 0 || cfg >= LLMC_GEMV_CONFIGS)
        return kiln_error(KILN_ERR_INVALID_ARGUMENT, "llm cuda GEMV: no configuration %d", cfg);
    return LC_DISPATCH(dtype, gemv_any, stream, pdl, cfg, x, ldx, n, K, w, bias, N, y, ldy, out_f32);
}

extern "C" const char *llmc_gemv_config_name(int cfg) {
    return cfg >= 0 && cfg < LLMC_GEMV_CONFIGS ? GEMV_NAME[cfg] : "?";
}

/* A configuration number from env var name (0 .. count - 1), or LLMC_GEMV_AUTO when unset, "" or "auto". */
static kiln_status gemv_mode_env(const char *name, int count, int *mode) {
    const char *v = getenv(name);
    *mode = LLMC_GEMV_AUTO;
    if (!v || !*v || !strcmp(v, "auto")) return KILN_OK;
    if (v[0] >= '0' && v[0] < '0' + count && !v[1]) {
        *mode = v[0] - '0';
        return KILN_OK;
    }
    return kiln_error(KILN_ERR_INVALID_ARGUMENT, "%s=%s (auto or 0..%d)", name, v, count - 1);
}

extern "C" kiln_status llmc_gemv_mode_from_env(int *mode) {
    return gemv_mode_env("KILN_LLM_GEMV", LLMC_GEMV_CONFIGS, mode);
}

extern "C" kiln_status llmc_gemv_q8_mode_from_env(int *mode) {
    return gemv_mode_env("KILN_LLM_GEMV_Q8", LLMC_GEMV_Q8_CONFIGS, mode);
}

/* One GEMV product whose configuration is chosen: 16-bit weights w (scale NULL), INT8 ones with row
 * scales or INT4 ones with group scales and zero points (zero not NULL; the quantized family,
 * llm_cuda_gemv_q.cu). */
typedef struct gemv_job {
    const void *x;
    int ldx, n, K;
    const void *w;
    const float *scale, *zero;
    const void *bias;
    int N;
    void *y;
    int ldy;
    bool out_f32;
} gemv_job;

#define GEMV_MAX_CONFIGS (LLMC_GEMV_CONFIGS > LLMC_GEMV_Q8_CONFIGS ? LLMC_GEMV_CONFIGS : LLMC_GEMV_Q8_CONFIGS)

static int job_configs(const gemv_job *j) { return j->scale ? LLMC_GEMV_Q8_CONFIGS : LLMC_GEMV_CONFIGS; }

static int job_wbits(const gemv_job *j) { return j->zero ? 4 : j->scale ? 8 : 16; }

/* The bytes of a matrix of N rows of K weights (INT4: packed groups of 128 and their fp32 scales and zero
 * points). */
static double weight_bytes(int wbits, int N, int K) {
    if (wbits == 4) return (double)N * ((K + 127) / 128) * (64 + 8);
    return (double)N * K * (wbits / 8);
}

static double job_weight_bytes(const gemv_job *j) { return weight_bytes(job_wbits(j), j->N, j->K); }

/* Enqueues j's product in configuration cfg on g's stream, reading the weights at w. */
static kiln_status job_launch(kiln_llm_cuda *g, const gemv_job *j, int cfg, const void *w) {
    if (j->zero)
        return llmc_gemv_q4_launch(g->dtype, g->kc.stream, cfg, j->x, j->ldx, j->n, j->K, (const uint8_t *)w, j->scale,
                                   j->zero, j->bias, j->N, j->y, j->ldy, j->out_f32, g->pdl);
    if (j->scale)
        return llmc_gemv_q8_launch(g->dtype, g->kc.stream, cfg, j->x, j->ldx, j->n, j->K, (const int8_t *)w, j->scale,
                                   j->bias, j->N, j->y, j->ldy, j->out_f32, g->pdl);
    return LC_DISPATCH(g->dtype, gemv_any, g->kc.stream, g->pdl, cfg, j->x, j->ldx, j->n, j->K, w, j->bias, j->N, j->y,
                       j->ldy, j->out_f32);
}

/* The configuration of a shape that is not timed (autotune off, or first seen inside a capture).
 * 16-bit: a warp per row for rows of at most 256 chunks, else 2 or 8 warps per row; rows share x
 * from 3 token rows on. Quantized: a warp per row (the geometry of the INT8 kernel the family replaced). */
static int gemv_rule(const gemv_job *j) {
    if (j->scale) return 0;
    const int k8 = j->K / 8, n = j->n;
    if (k8 <= 256) return n <= 2 ? 0 : 1;
    if (k8 <= 1024) return n <= 2 ? 3 : 5;
    return n <= 2 ? 7 : 6;
}

static double gemv_now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

/* Holds the stream until *flag is set (or GEMV_GATE_MS passed: a full launch queue cannot
 * deadlock), so that the timed kernels run back to back instead of at the host's launch rate. */
static void CUDART_CB gemv_gate_fn(void *p) {
    volatile int *flag = (volatile int *)p;
    const double t0 = gemv_now_ms();
    while (!__atomic_load_n(flag, __ATOMIC_ACQUIRE) && gemv_now_ms() - t0 < GEMV_GATE_MS) {
    }
}

/* Enqueues the timed launches of every configuration c of j between ev[2c] and ev[2c + 1], reps each.
 * Each launch reads its own window of j's weight bytes in the model's weight allocation (consecutive
 * windows, on past the previous candidate's), so the weights come from HBM as in a step, not from L2;
 * when the allocation holds one window only, j's weights themselves. y gets garbage (the caller's own
 * product follows). */
static kiln_status gemv_tune_enqueue(kiln_llm_cuda *g, cudaEvent_t *ev, int reps, const gemv_job *j) {
    const size_t mat = (size_t)job_weight_bytes(j), stride = (mat + LLMC_ALIGN - 1) / LLMC_ALIGN * LLMC_ALIGN;
    const size_t slots = g->weights && g->weight_bytes >= mat ? (g->weight_bytes - mat) / stride + 1 : 1;
    size_t next = 0;
    for (int c = 0; c < job_configs(j); c++) {
        KILN_CUDA_TRY(cudaEventRecord(ev[2 * c], g->kc.stream));
        for (int r = 0; r < reps; r++, next++) {
            const void *wr = slots > 1 ? (const void *)((const char *)g->weights + next % slots * stride) : j->w;
            KILN_TRY(job_launch(g, j, c, wr));
        }
        KILN_CUDA_TRY(cudaEventRecord(ev[2 * c + 1], g->kc.stream));
    }
    return KILN_OK;
}

/* Times every configuration on j (one untimed launch each first: module loading, warm-up) and sets
 * p->cfg to the fastest, p->us to its time per product; p->timed stays false (p->cfg the rule's) when
 * the events could not be made or timed. Only outside capture. */
static kiln_status gemv_tune(kiln_llm_cuda *g, llmc_gemv_pick *p, const gemv_job *j) {
    const int nc = job_configs(j), NE = 2 * nc;
    for (int c = 0; c < nc; c++) KILN_TRY(job_launch(g, j, c, j->w));
    int reps = (int)(GEMV_TUNE_BYTES / job_weight_bytes(j));
    reps = reps < GEMV_TUNE_MIN_REPS ? GEMV_TUNE_MIN_REPS : reps > GEMV_TUNE_MAX_REPS ? GEMV_TUNE_MAX_REPS : reps;
    cudaEvent_t ev[2 * GEMV_MAX_CONFIGS];
    memset(ev, 0, sizeof ev);
    bool ok = true;
    for (int i = 0; i < NE && ok; i++) ok = cudaEventCreate(&ev[i]) == cudaSuccess;
    kiln_status st = KILN_OK;
    if (ok) {
        __atomic_store_n(&g->gemv_gate, 0, __ATOMIC_RELEASE);
        const bool gated = cudaLaunchHostFunc(g->kc.stream, gemv_gate_fn, &g->gemv_gate) == cudaSuccess;
        if (!gated) (void)cudaGetLastError(); /* runs ungated, and untimed */
        st = gemv_tune_enqueue(g, ev, reps, j);
        __atomic_store_n(&g->gemv_gate, 1, __ATOMIC_RELEASE);
        /* whatever was enqueued has finished before the gate flag or the events go away */
        ok = gated && st == KILN_OK && cudaStreamSynchronize(g->kc.stream) == cudaSuccess;
        if (st != KILN_OK) (void)cudaStreamSynchronize(g->kc.stream);
    }
    float best = 0.0f;
    int pick = -1;
    for (int c = 0; ok && c < nc; c++) {
        float ms = 0.0f;
        ok = cudaEventElapsedTime(&ms, ev[2 * c], ev[2 * c + 1]) == cudaSuccess;
        if (ok && (pick < 0 || ms < best)) {
            pick = c;
            best = ms;
        }
    }
    for (int i = 0; i < NE; i++)
        if (ev[i]) cudaEventDestroy(ev[i]);
    KILN_TRY(st);
    if (!ok || pick < 0) {
        (void)cudaGetLastError(); /* untimed: the rule's choice stands */
        return KILN_OK;
    }
    p->cfg = pick;
    p->timed = true;
    p->us = best * 1e3f / reps;
    return KILN_OK;
}

/* gemv_tune's choice for p's shape, taken from the timing cache when it holds one, else timed now
 * (and recorded there). */
static kiln_status gemv_pick(kiln_llm_cuda *g, llmc_gemv_pick *p, const gemv_job *j) {
    kiln_llm_cuda_probe *pr = g->opt.probe;
    const char *dt = kiln_dtype_name(g->dtype);
    char shape[128];
    snprintf(shape, sizeof shape, "%s N %d K %d n %d out %s", dt, p->N, p->K, p->n, p->out_f32 ? "fp32" : dt);
    const char *what = p->wbits == 4 ? "llm.gemv.int4" : p->wbits == 8 ? "llm.gemv.int8" : "llm.gemv";
    const kiln_tactic *t = llmc_tactic_find(g, what, shape);
    if (t && t->kind == KILN_TACTIC_LLM_GEMV && t->algo >= 0 && t->algo < job_configs(j)) {
        p->cfg = t->algo;
        p->timed = true;
        p->us = t->time_ms * 1e3f;
        if (pr) pr->tactics_cached++;
        return KILN_OK;
    }
    KILN_TRY(gemv_tune(g, p, j));
    if (!p->timed) return KILN_OK;
    kiln_tactic rec;
    memset(&rec, 0, sizeof rec);
    rec.kind = KILN_TACTIC_LLM_GEMV;
    rec.algo = p->cfg;
    rec.time_ms = p->us * 1e-3f;
    llmc_tactic_put(g, what, shape, &rec);
    if (pr) pr->tactics_timed++;
    return KILN_OK;
}

/* The configuration for j: the remembered one of its shape; else, outside capture, one chosen now
 * (timed when options.gemm_autotune) and remembered; inside a capture the rule's (not remembered: a
 * graph is captured only after an eager step of its shapes, so this is rare). */
static kiln_status gemv_choose(kiln_llm_cuda *g, const gemv_job *j, int *cfg) {
    const int wbits = job_wbits(j);
    for (int i = 0; i < g->n_gemv_picks; i++) {
        const llmc_gemv_pick *p = &g->gemv_picks[i];
        if (p->N == j->N && p->K == j->K && p->n == j->n && p->out_f32 == j->out_f32 && p->wbits == wbits) {
            *cfg = p->cfg;
            return KILN_OK;
        }
    }
    *cfg = gemv_rule(j);
    cudaStreamCaptureStatus cap = cudaStreamCaptureStatusNone;
    if (cudaStreamIsCapturing(g->kc.stream, &cap) != cudaSuccess || cap != cudaStreamCaptureStatusNone) {
        (void)cudaGetLastError();
        return KILN_OK;
    }
    llmc_gemv_pick p;
    memset(&p, 0, sizeof p);
    p.N = j->N;
    p.K = j->K;
    p.n = j->n;
    p.out_f32 = j->out_f32;
    p.wbits = wbits;
    p.cfg = *cfg;
    if (g->opt.gemm_autotune) KILN_TRY(gemv_pick(g, &p, j));
    llmc_gemv_pick *slot;
    if (g->n_gemv_picks < LLMC_GEMV_PICKS) {
        slot = &g->gemv_picks[g->n_gemv_picks++];
    } else {
        slot = &g->gemv_picks[g->next_gemv_pick];
        g->next_gemv_pick = (g->next_gemv_pick + 1) % LLMC_GEMV_PICKS;
    }
    *slot = p;
    *cfg = p.cfg;
    return KILN_OK;
}

extern "C" int kiln_llm_cuda_gemv_picks(const kiln_llm_cuda *g, int i, char *line, size_t cap) {
    if (i >= 0 && i < g->n_gemv_picks && cap > 0) {
        const llmc_gemv_pick *p = &g->gemv_picks[i];
        const double gb = weight_bytes(p->wbits, p->N, p->K) * 1e-3; /* bytes / us * 1e-3 = GB/s */
        const char *dt = g->dtype == KILN_F16 ? "fp16" : "bf16";
        const char *wt = p->wbits == 4 ? "int4" : p->wbits == 8 ? "int8" : dt;
        const char *name = p->wbits < 16 ? llmc_gemv_q8_config_name(p->cfg) : llmc_gemv_config_name(p->cfg);
        if (p->timed)
            snprintf(line, cap, "N %5d K %5d n %d %s x %s->%s: %s; %.2f us, %.0f GB/s", p->N, p->K, p->n, wt, dt,
                     p->out_f32 ? "fp32" : dt, name, p->us, gb / p->us);
        else
            snprintf(line, cap, "N %5d K %5d n %d %s x %s->%s: %s (shape rule, not timed)", p->N, p->K, p->n, wt, dt,
                     p->out_f32 ? "fp32" : dt, name);
    }
    return g->n_gemv_picks;
}

/* ---------------------------------------------------------------- dispatch */

extern "C" kiln_status llmc_gemv_config(kiln_llm_cuda *g, const void *x, int ldx, int n, int K, const void *w,
                                        const void *bias, int N, void *y, int ldy, bool out_f32, int *cfg) {
    *cfg = g->gemv_force;
    if (*cfg != LLMC_GEMV_AUTO) return KILN_OK;
    const gemv_job j = {x, ldx, n, K, w, NULL, NULL, bias, N, y, ldy, out_f32};
    return gemv_choose(g, &j, cfg);
}

extern "C" kiln_status llmc_gemv_q8_config(kiln_llm_cuda *g, const void *x, int ldx, int n, int K, const int8_t *q,
                                           const float *scale, const void *bias, int N, void *y, int ldy, bool out_f32,
                                           int *cfg) {
    *cfg = g->gemv_q8_force;
    if (*cfg != LLMC_GEMV_AUTO) return KILN_OK;
    if (!scale) return kiln_error(KILN_ERR_INVALID_ARGUMENT, "int8 gemv: no row scales");
    const gemv_job j = {x, ldx, n, K, q, scale, NULL, bias, N, y, ldy, out_f32};
    return gemv_choose(g, &j, cfg);
}

extern "C" kiln_status llmc_gemv_q4_config(kiln_llm_cuda *g, const void *x, int ldx, int n, int K, const uint8_t *q,
                                           const float *scale, const float *zero, const void *bias, int N, void *y,
                                           int ldy, bool out_f32, int *cfg) {
    *cfg = g->gemv_q8_force;
    if (*cfg != LLMC_GEMV_AUTO) return KILN_OK;
    if (!scale || !zero) return kiln_error(KILN_ERR_INVALID_ARGUMENT, "int4 gemv: no group scales and zero points");
    const gemv_job j = {x, ldx, n, K, q, scale, zero, bias, N, y, ldy, out_f32};
    return gemv_choose(g, &j, cfg);
}

extern "C" kiln_status llmc_linear(kiln_llm_cuda *g, const void *x, int ldx, int n, int K, const void *w, const void *bias,
                                   int N, void *y, int ldy, bool out_f32) {
    const bool gemv_ok = n >= 1 && n <= g->opt.gemv_max_tokens && n <= LLMC_GEMV_MAX && K >= 8 && K % 8 == 0 &&
                         ldx % 8 == 0 && ku_aligned16(x) && ku_aligned16(w);
    if (!gemv_ok) return lt_linear(g, x, ldx, n, K, w, bias, N, y, ldy, out_f32);
    int cfg = 0;
    KILN_TRY(llmc_gemv_config(g, x, ldx, n, K, w, bias, N, y, ldy, out_f32, &cfg));
    return LC_DISPATCH(g->dtype, gemv_any, g->kc.stream, g->pdl, cfg, x, ldx, n, K, w, bias, N, y, ldy, out_f32);
}
