/* llm_cuda_gemv_q.cu — the weight-only INT8 products of the LLM forward on CUDA (weights int8 [N, K]
 * with one fp32 scale per output row, kept so on the device), and the GEMV family they share with the
 * INT4 ones (llm_cuda_gemv_q4.cu):
 *
 *  - few token rows (decode): gemv_q_kernel, one template over the weight format (INT8 with row
 *    scales; INT4 in groups of 128 with scales and zero points) and its launch geometry as the 16-bit
 *    GEMV's (threads per row group, groups per block, rows per group, 16-byte weight loads in flight
 *    per row, activations staged in shared memory or read through L1), in LLMC_GEMV_Q8_CONFIGS
 *    configurations timed per shape by llm_cuda_gemm.cu's choice (the fastest kept;
 *    KILN_LLM_GEMV_Q8=0..9 forces one). Up to LLMC_GEMV_MAX token rows are summed in fp32 against
 *    the same loaded weights; INT8's row scale is applied once to each sum, INT4's group scales once
 *    per 32 weights.
 *  - up to LLMC_GEMM_Q_MAX token rows, when g->gemm_q: the tensor-core product of llm_cuda_gemm_q.cu;
 *  - more (prefill): tiles of weight rows dequantized to the activation dtype in a device workspace,
 *    each multiplied by llmc_linear's cuBLASLt product.
 *
 * Also the embedding lookup of an int8 token embedding. Activations are the model's compute dtype
 * (fp16 or bf16). */
#include "llm/cuda/llm_cuda_util.cuh"

#define QD_THREADS 256
#define GQ_STAGE_MAX (48 * 1024) /* activation bytes (n * K * 2) a staging configuration keeps in shared
                                  * memory; past it the configuration reads them through L1 */

/* ---------------------------------------------------------------- the quantized GEMV family */

/* The 16 nibbles of the words lo, hi (k order: nibble b of lo is value b, of hi value 8 + b) as the
 * floats 1 + q / 16, exactly: the nibble shifted into mantissa bits 19-22 of 1.0 (a shift and one
 * logic op, no conversion and no subtraction). The caller takes sum x (1 + q / 16) - sum x = sum x q / 16. */
static __device__ __forceinline__ void q4_unpack16(uint32_t lo, uint32_t hi, float (&f)[16]) {
#pragma unroll
    for (int b = 0; b < 8; b++) {
        const int sh = 19 - 4 * b;
        const uint32_t l = sh >= 0 ? lo << sh : lo >> -sh, h = sh >= 0 ? hi << sh : hi >> -sh;
        f[b] = __uint_as_float((l & 0x00780000u) | 0x3F800000u);
        f[8 + b] = __uint_as_float((h & 0x00780000u) | 0x3F800000u);
    }
}

/* Row o's output from its sum v: times the INT8 row scale (INT4 sums are scaled per group already),
 * plus the bias. */
template <typename T, typename O, int WB>
static __device__ __forceinline__ void gq_store(O *y, int ldy, int t, int o, float v, const float *scale,
                                                const T *bias) {
    if (WB == 8) v *= scale[o];
    y[(size_t)t * ldy + o] = ku_from_f32<O>(v + (bias ? ku_f32(bias[o]) : 0.0f));
}

/* The end of a split-K launch (S > 1, gemv_q_kernel): the group's sums of its block's share of K go to
 * shared memory (over the warp, then over the group's warps), lc_cluster_sum adds the cluster's S
 * shares in rank order, and rank 0's threads store (gq_store). */
template <typename T, typename O, int WB, int NT, int TPR, int GROUPS, int R, int S>
static __device__ __forceinline__ void gq_split_store(const float (&acc)[R][NT], int grp, int gi, int lane, int rows,
                                                      int n, int row0, const float *scale, const T *bias, O *y,
                                                      int ldy) {
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
        const int r = gi / NT, t = gi - r * NT, o = row0 + r;
        if (r < rows && t < n) gq_store<T, O, WB>(y, ldy, t, o, v, scale, bias);
    }
}

/* Adds chunk c (16 bytes of each of the R weight rows in wv) times the NT token rows at xr to acc.
 * WB 8: 16 int8 weights a chunk, the row scale applied at the store. WB 4: 32 packed nibbles, inside
 * group c / 4 of 128 values; with P = sum x (1 + q / 16) and X = sum x over the chunk, sum x (q - z) s
 * = 16 s P - s (16 + z) X is added (scale[row * G + g], zero at the same place of the zero points). */
template <typename T, int WB, int NT, int R, bool STAGE>
static __device__ __forceinline__ void gq_chunk(const uint4 (&wv)[R], int c, const T *const (&xr)[NT], const int (&row)[R],
                                                int G, const float *__restrict__ scale, const float *__restrict__ zero,
                                                float (&acc)[R][NT]) {
    if constexpr (WB == 8) {
        float wf[R][16];
#pragma unroll
        for (int r = 0; r < R; r++) lc_unpack_i8x16(wv[r], wf[r]);
#pragma unroll
        for (int t = 0; t < NT; t++) {
            float a[8], b[8];
            if (STAGE) {
                lc_load8_any<T>(xr[t] + (size_t)c * 16, a);
                lc_load8_any<T>(xr[t] + (size_t)c * 16 + 8, b);
            } else {
                lc_load8<T>(xr[t] + (size_t)c * 16, a);
                lc_load8<T>(xr[t] + (size_t)c * 16 + 8, b);
            }
#pragma unroll
            for (int r = 0; r < R; r++) {
                float s = acc[r][t];
#pragma unroll
                for (int e = 0; e < 8; e++) s = fmaf(a[e], wf[r][e], s);
#pragma unroll
                for (int e = 0; e < 8; e++) s = fmaf(b[e], wf[r][8 + e], s);
                acc[r][t] = s;
            }
        }
    } else {
        float p[R][NT], sx[NT];
#pragma unroll
        for (int t = 0; t < NT; t++) {
            sx[t] = 0.0f;
#pragma unroll
            for (int r = 0; r < R; r++) p[r][t] = 0.0f;
        }
#pragma unroll
        for (int h = 0; h < 2; h++) { /* weights 16 h .. 16 h + 15 of the chunk */
            float wf[R][16];
#pragma unroll
            for (int r = 0; r < R; r++) q4_unpack16(h ? wv[r].z : wv[r].x, h ? wv[r].w : wv[r].y, wf[r]);
#pragma unroll
            for (int t = 0; t < NT; t++) {
                float a[8], b[8];
                const T *xp = xr[t] + (size_t)c * 32 + 16 * h;
                if (STAGE) {
                    lc_load8_any<T>(xp, a);
                    lc_load8_any<T>(xp + 8, b);
                } else {
                    lc_load8<T>(xp, a);
                    lc_load8<T>(xp + 8, b);
                }
                float s = sx[t];
#pragma unroll
                for (int e = 0; e < 8; e++) s += a[e] + b[e];
                sx[t] = s;
#pragma unroll
                for (int r = 0; r < R; r++) {
                    float q = p[r][t];
#pragma unroll
                    for (int e = 0; e < 8; e++) q = fmaf(a[e], wf[r][e], q);
#pragma unroll
                    for (int e = 0; e < 8; e++) q = fmaf(b[e], wf[r][8 + e], q);
                    p[r][t] = q;
                }
            }
        }
#pragma unroll
        for (int r = 0; r < R; r++) {
            const size_t gi = (size_t)row[r] * G + (c >> 2);
            const float s = __ldg(scale + gi), z = __ldg(zero + gi), s16 = 16.0f * s, sz = s * (16.0f + z);
#pragma unroll
            for (int t = 0; t < NT; t++) acc[r][t] = fmaf(s16, p[r][t], fmaf(-sz, sx[t], acc[r][t]));
        }
    }
}

/* y[t, o] = sum_k x[t, k] wq[o, k] + bias[o], wq the dequantized weights: WB 8, int8 q [N, K] times the
 * row's scale[o]; WB 4, nibbles packed in groups of 128 (G a row, 64 bytes each; rows of G * 64
 * bytes), (q - zero[o, g]) * scale[o, g]. A block is GROUPS groups of TPR threads (TPR a multiple of
 * 32: one warp, or several splitting K); a group owns R consecutive output rows and its threads take
 * the 16-byte chunks (16 or 32 weights) g, g + TPR, ... of each (g: the thread's index in the group),
 * U chunks of every row in flight per round (R * U loads per thread, __ldcs: read once per product).
 * The inputs of each token row under a chunk are loaded once and used for all R rows: from shared
 * memory when STAGE (the block copies the n token rows there first), else through L1. FP32 sums over
 * the warp by shuffles, then (TPR > 32) over the group's warps through shared memory. NT: token rows
 * compiled for; NT <= 4 runs with n == NT, NT = 8 with any n <= 8 (rows past n repeat row n - 1 and are
 * not stored). S > 1: split-K over clusters of S blocks (sm_90): block rank q takes the chunks
 * q * TPR + g, + S * TPR, ..., and gq_split_store sums the S shares. The first round of weight loads is
 * issued before lc_pdl_wait: launched as a programmatic dependent launch, the kernel fetches them while
 * the kernel before it finishes. */
template <typename T, typename O, int WB, int NT, int TPR, int GROUPS, int R, int U, bool STAGE, int S>
__global__ void __launch_bounds__(TPR *GROUPS)
    gemv_q_kernel(const T *__restrict__ x, int ldx, int n, int K, const uint8_t *__restrict__ w,
                  const float *__restrict__ scale, const float *__restrict__ zero, const T *__restrict__ bias, int N,
                  O *__restrict__ y, int ldy) {
    constexpr int WPR = TPR / 32;
    static_assert(TPR % 32 == 0 && WPR >= 1, "TPR: a multiple of 32");
    static_assert(WPR == 1 || R * NT <= TPR, "the cross-warp sum takes one thread per (row, token row)");
    static_assert(WPR > 1 || R * NT <= 32, "one lane stores each (row, token row)");
    extern __shared__ uint4 gq_xs[];
    const int tid = threadIdx.x, grp = tid / TPR, gi = tid - grp * TPR, lane = tid & 31;
    const int KC = WB == 8 ? K >> 4 : K >> 5, G = (K + 127) >> 7; /* chunks of a row; INT4 groups of a row */
    const size_t row_bytes = WB == 8 ? (size_t)K : (size_t)G * 64;
    const int split = S > 1 ? (int)(blockIdx.x % S) : 0, rb = (int)(blockIdx.x / S);
    const int row0 = (rb * GROUPS + grp) * R, rows = min(R, N - row0); /* rows <= 0: idle */
    const uint4 *wr[R];
    int row[R];
#pragma unroll
    for (int r = 0; r < R; r++) {
        row[r] = min(row0 + r, N - 1);
        wr[r] = reinterpret_cast<const uint4 *>(w + (size_t)row[r] * row_bytes);
    }
    /* the first round of weights is not the kernel before's output: in flight before the wait */
    const int c_first = split * TPR + gi, c_step = TPR * S * U;
    uint4 wv[U][R];
#pragma unroll
    for (int u = 0; u < U; u++) {
        const int c = c_first + u * TPR * S;
#pragma unroll
        for (int r = 0; r < R; r++) wv[u][r] = c < KC && r < rows ? __ldcs(wr[r] + c) : make_uint4(0, 0, 0, 0);
    }
    lc_pdl_wait();
    lc_pdl_launch_dependents();
    const T *xbase = x;
    int xld = ldx;
    if (STAGE) { /* the n token rows, K values each, contiguous in shared memory */
        const int K8 = K >> 3;
        for (int i = tid; i < n * K8; i += TPR * GROUPS) {
            const int t = i / K8, c = i - t * K8;
            gq_xs[i] = __ldg(reinterpret_cast<const uint4 *>(x + (size_t)t * ldx) + c);
        }
        __syncthreads();
        xbase = reinterpret_cast<const T *>(gq_xs);
        xld = K;
    }
    const T *xr[NT];
#pragma unroll
    for (int t = 0; t < NT; t++) xr[t] = xbase + (size_t)(NT <= 4 ? t : min(t, n - 1)) * xld;
    float acc[R][NT];
#pragma unroll
    for (int r = 0; r < R; r++)
#pragma unroll
        for (int t = 0; t < NT; t++) acc[r][t] = 0.0f;
    if (rows > 0) {
        for (int c0 = c_first; c0 < KC; c0 += c_step) {
            if (c0 != c_first) { /* this round's loads (the first round's are in flight already) */
#pragma unroll
                for (int u = 0; u < U; u++) {
                    const int c = c0 + u * TPR * S;
#pragma unroll
                    for (int r = 0; r < R; r++)
                        wv[u][r] = c < KC && r < rows ? __ldcs(wr[r] + c) : make_uint4(0, 0, 0, 0);
                }
            }
#pragma unroll
            for (int u = 0; u < U; u++) {
                const int c = c0 + u * TPR * S;
                if (c >= KC) break;
                gq_chunk<T, WB, NT, R, STAGE>(wv[u], c, xr, row, G, scale, zero, acc);
            }
        }
    }
    if constexpr (S > 1) {
        gq_split_store<T, O, WB, NT, TPR, GROUPS, R, S>(acc, grp, gi, lane, rows, n, row0, scale, bias, y, ldy);
    } else if constexpr (WPR == 1) {
#pragma unroll
        for (int r = 0; r < R; r++)
#pragma unroll
            for (int t = 0; t < NT; t++) {
                const float v = ku_warp_sum(acc[r][t]); /* every lane has it: lane r * NT + t stores */
                if (lane == r * NT + t && r < rows && t < n) gq_store<T, O, WB>(y, ldy, t, row0 + r, v, scale, bias);
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
                gq_store<T, O, WB>(y, ldy, t, row0 + r, v, scale, bias);
            }
        }
    }
}

/* The candidates: threads per row group, groups per block, rows per group, chunks per row in flight,
 * activations staged in shared memory, blocks splitting K (a cluster). A warp per row with 4 or 8
 * loads in flight (0, 1: 0 is the geometry of the INT8 kernel the family replaced), warps on 2 or 4
 * rows sharing the activations (2-4; 3 and 4 staged once per block of 16 rows: 4 warps of 4 rows, 8 of
 * 2), 2-8 warps splitting the long rows of narrow products so that a product of few rows still spreads
 * over every SM (5-7), clusters of 4 or 2 blocks splitting K (8, 9; unsplit before sm_90). The same
 * list serves INT8 and INT4 (whose chunks hold twice the weights, so its rows have half the chunks).
 * Each checked against the CPU by the llm.GemvQ8 and llm.GemvQ4 op cases (tests/gpu/llm_op_quant*.c). */
#define GEMV_Q_CONFIG_LIST(X)                                                                      \
    X(0, 32, 4, 1, 4, false, 1)                                                                    \
    X(1, 32, 4, 1, 8, false, 1)                                                                    \
    X(2, 32, 4, 2, 4, false, 1)                                                                    \
    X(3, 32, 4, 4, 2, true, 1)                                                                     \
    X(4, 32, 8, 2, 4, true, 1)                                                                     \
    X(5, 64, 2, 2, 4, false, 1)                                                                    \
    X(6, 128, 1, 1, 4, false, 1)                                                                   \
    X(7, 256, 1, 2, 2, false, 1)                                                                   \
    X(8, 32, 4, 1, 2, false, 4)                                                                    \
    X(9, 32, 4, 2, 2, false, 2)

#define GQ_STAGED_true ", x in shared memory"
#define GQ_STAGED_false ""
static const char *const GEMV_Q_NAME[LLMC_GEMV_Q8_CONFIGS] = {
#define X(i, tpr, gr, r, u, st, sk)                                                                \
    "#" #i ": " #tpr " thr/row x " #r " rows, " #gr " groups, " #u " loads/row, split " #sk GQ_STAGED_##st,
    GEMV_Q_CONFIG_LIST(X)
#undef X
};

/* The operands of one quantized GEMV launch. */
typedef struct gq_args {
    const void *x;
    int ldx, n, K;
    const uint8_t *w;
    const float *scale, *zero;
    const void *bias;
    int N;
    void *y;
    int ldy;
    bool pdl; /* a programmatic dependent launch (lc_launch) */
} gq_args;

template <typename T, typename O, int WB, int NT, int TPR, int GROUPS, int R, int U, bool STAGE, int S>
static kiln_status gemv_q_nt(cudaStream_t st, const gq_args &a) {
    const unsigned blocks = (unsigned)((a.N + GROUPS * R - 1) / (GROUPS * R));
    const size_t smem = (size_t)a.n * a.K * sizeof(T);
    static_assert(S == 1 || !STAGE, "a split configuration reads the activations through L1");
    const T *x = (const T *)a.x, *bias = (const T *)a.bias;
    if (S > 1 && lc_clusters_ok())
        KILN_TRY(lc_launch(gemv_q_kernel<T, O, WB, NT, TPR, GROUPS, R, U, false, S>, blocks, S, TPR * GROUPS, 0, st,
                           a.pdl, x, a.ldx, a.n, a.K, a.w, a.scale, a.zero, bias, a.N, (O *)a.y, a.ldy));
    else if (STAGE && S == 1 && smem <= GQ_STAGE_MAX)
        KILN_TRY(lc_launch(gemv_q_kernel<T, O, WB, NT, TPR, GROUPS, R, U, STAGE, 1>, blocks, 1, TPR * GROUPS, smem, st,
                           a.pdl, x, a.ldx, a.n, a.K, a.w, a.scale, a.zero, bias, a.N, (O *)a.y, a.ldy));
    else /* the unstaged, unsplit kernel of this geometry */
        KILN_TRY(lc_launch(gemv_q_kernel<T, O, WB, NT, TPR, GROUPS, R, U, false, 1>, blocks, 1, TPR * GROUPS, 0, st,
                           a.pdl, x, a.ldx, a.n, a.K, a.w, a.scale, a.zero, bias, a.N, (O *)a.y, a.ldy));
    KILN_CUDA_LAUNCH_CHECK("gemv_q_kernel");
    return KILN_OK;
}

template <typename T, typename O, int WB, int TPR, int GROUPS, int R, int U, bool STAGE, int S>
static kiln_status gemv_q_n(cudaStream_t st, const gq_args &a) {
    switch (a.n) {
    case 1: return gemv_q_nt<T, O, WB, 1, TPR, GROUPS, R, U, STAGE, S>(st, a);
    case 2: return gemv_q_nt<T, O, WB, 2, TPR, GROUPS, R, U, STAGE, S>(st, a);
    case 3: return gemv_q_nt<T, O, WB, 3, TPR, GROUPS, R, U, STAGE, S>(st, a);
    case 4: return gemv_q_nt<T, O, WB, 4, TPR, GROUPS, R, U, STAGE, S>(st, a);
    default: return gemv_q_nt<T, O, WB, 8, TPR, GROUPS, R, U, STAGE, S>(st, a);
    }
}

template <typename T, typename O, int WB> static kiln_status gemv_q_cfg(cudaStream_t st, int cfg, const gq_args &a) {
    switch (cfg) {
#define X(i, tpr, gr, r, u, stage, sk)                                                             \
    case i: return gemv_q_n<T, O, WB, tpr, gr, r, u, stage, sk>(st, a);
        GEMV_Q_CONFIG_LIST(X)
#undef X
    default: return kiln_error(KILN_ERR_INTERNAL, "quantized gemv: no configuration %d", cfg);
    }
}

template <typename T>
static kiln_status launch_gemv_q(cudaStream_t st, int cfg, int wbits, const gq_args &a, bool out_f32) {
    if (wbits == 4) return out_f32 ? gemv_q_cfg<T, float, 4>(st, cfg, a) : gemv_q_cfg<T, T, 4>(st, cfg, a);
    return out_f32 ? gemv_q_cfg<T, float, 8>(st, cfg, a) : gemv_q_cfg<T, T, 8>(st, cfg, a);
}

extern "C" bool llmc_gemv_q8_fits(int n, int K, int ldx, const void *x, const void *q) {
    return n >= 1 && n <= LLMC_GEMV_MAX && K >= 16 && K % 16 == 0 && ldx % 8 == 0 && ldx >= K && ku_aligned16(x) &&
           ku_aligned16(q);
}

extern "C" bool llmc_gemv_q4_fits(int n, int K, int ldx, const void *x, const void *q) {
    return K % 32 == 0 && llmc_gemv_q8_fits(n, K, ldx, x, q);
}

/* Checks the common operands and launches configuration cfg of the WB-bit family. */
static kiln_status gemv_q_launch(const char *what, int wbits, kiln_dtype dtype, cudaStream_t stream, int cfg,
                                 const gq_args &a, bool out_f32) {
    if (dtype != KILN_F16 && dtype != KILN_BF16)
        return kiln_error(KILN_ERR_INVALID_ARGUMENT, "%s gemv: activations %s (float16 or bfloat16)", what,
                          kiln_dtype_name(dtype));
    const int kmul = wbits == 4 ? 32 : 16;
    const bool fits = wbits == 4 ? llmc_gemv_q4_fits(a.n, a.K, a.ldx, a.x, a.w) : llmc_gemv_q8_fits(a.n, a.K, a.ldx, a.x, a.w);
    if (!fits || a.N < 1 || a.ldy < a.N || !a.scale || (wbits == 4 && !a.zero))
        return kiln_error(KILN_ERR_INVALID_ARGUMENT, "%s gemv: n %d (1..%d), K %d (a multiple of %d), ldx %d "
                          "(a multiple of 8, >= K), N %d, ldy %d, x and w 16-byte aligned, scales%s given", what, a.n,
                          LLMC_GEMV_MAX, a.K, kmul, a.ldx, a.N, a.ldy, wbits == 4 ? " and zero points" : "");
    if (cfg < 0 || cfg >= LLMC_GEMV_Q8_CONFIGS)
        return kiln_error(KILN_ERR_INVALID_ARGUMENT, "%s gemv: no configuration %d (0..%d)", what, cfg,
                          LLMC_GEMV_Q8_CONFIGS - 1);
    return LC_DISPATCH(dtype, launch_gemv_q, stream, cfg, wbits, a, out_f32);
}

extern "C" kiln_status llmc_gemv_q8_launch(kiln_dtype dtype, cudaStream_t stream, int cfg, const void *x, int ldx,
                                           int n, int K, const int8_t *w, const float *scale, const void *bias, int N,
                                           void *y, int ldy, bool out_f32, bool pdl) {
    const gq_args a = {x, ldx, n, K, (const uint8_t *)w, scale, NULL, bias, N, y, ldy, pdl};
    return gemv_q_launch("int8", 8, dtype, stream, cfg, a, out_f32);
}

extern "C" kiln_status llmc_gemv_q4_launch(kiln_dtype dtype, cudaStream_t stream, int cfg, const void *x, int ldx,
                                           int n, int K, const uint8_t *q, const float *scale, const float *zero,
                                           const void *bias, int N, void *y, int ldy, bool out_f32, bool pdl) {
    const gq_args a = {x, ldx, n, K, q, scale, zero, bias, N, y, ldy, pdl};
    return gemv_q_launch("int4", 4, dtype, stream, cfg, a, out_f32);
}

extern "C" const char *llmc_gemv_q8_config_name(int cfg) {
    return cfg >= 0 && cfg < LLMC_GEMV_Q8_CONFIGS ? GEMV_Q_NAME[cfg] : "?";
}

/* ---------------------------------------------------------------- dequantized tiles */

/* dst[r, k] = q[r, k] * scale[r] in T, r < rows, k < K. K % 16 == 0: a 16-byte load of 16 values and two
 * 16-byte stores per thread and round; else one value at a time. */
template <typename T>
__global__ void dequant_q8_kernel(const int8_t *__restrict__ q, const float *__restrict__ scale, int64_t rows, int K,
                                  T *__restrict__ dst) {
    const int64_t n = rows * K, first = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    if (K % 16 == 0) {
        for (int64_t c = first; c < n / 16; c += stride) {
            float f[16];
            lc_unpack_i8x16(__ldcs(reinterpret_cast<const uint4 *>(q) + c), f);
            const float s = scale[c * 16 / K];
            T out[16];
#pragma unroll
            for (int j = 0; j < 16; j++) out[j] = ku_from_f32<T>(f[j] * s);
            reinterpret_cast<uint4 *>(dst)[2 * c] = *reinterpret_cast<const uint4 *>(out);
            reinterpret_cast<uint4 *>(dst)[2 * c + 1] = *reinterpret_cast<const uint4 *>(out + 8);
        }
        return;
    }
    for (int64_t e = first; e < n; e += stride) dst[e] = ku_from_f32<T>((float)q[e] * scale[e / K]);
}

template <typename T>
static kiln_status launch_dequant(cudaStream_t st, const int8_t *q, const float *scale, int rows, int K, void *dst) {
    const int64_t n = (int64_t)rows * K, per = K % 16 == 0 ? 16 : 1;
    int64_t blocks = (n / per + QD_THREADS - 1) / QD_THREADS;
    if (blocks > 65535) blocks = 65535;
    if (blocks < 1) blocks = 1;
    dequant_q8_kernel<T><<<(unsigned)blocks, QD_THREADS, 0, st>>>(q, scale, rows, K, (T *)dst);
    KILN_CUDA_LAUNCH_CHECK("dequant_q8_kernel");
    return KILN_OK;
}

extern "C" kiln_status llmc_dequant_q8_launch(kiln_dtype dtype, cudaStream_t stream, const int8_t *q,
                                              const float *scale, int rows, int K, void *dst) {
    if (dtype != KILN_F16 && dtype != KILN_BF16)
        return kiln_error(KILN_ERR_INVALID_ARGUMENT, "int8 dequantize: into %s (float16 or bfloat16)",
                          kiln_dtype_name(dtype));
    return LC_DISPATCH(dtype, launch_dequant, stream, q, scale, rows, K, dst);
}

/* ---------------------------------------------------------------- the product */

extern "C" kiln_status llmc_dequant_tile_rows(const char *what, int K, int64_t *rows) {
    const int64_t fit = (int64_t)(LLMC_DEQUANT_BYTES / 2 / (size_t)K) / 64 * 64;
    if (fit < 64)
        return kiln_error(KILN_ERR_UNSUPPORTED, "llm cuda: %s matrix of %d inputs (the dequantizing workspace takes "
                          "at most %zu)", what, K, LLMC_DEQUANT_BYTES / 2 / 64);
    const int64_t l2 = (int64_t)(LLMC_DEQUANT_TILE_BYTES / 2 / (size_t)K) / 64 * 64;
    *rows = l2 < 64 ? 64 : l2 < fit ? l2 : fit;
    return KILN_OK;
}

extern "C" kiln_status llmc_linear_w(kiln_llm_cuda *g, const void *x, int ldx, int n, int K, const void *w,
                                     const float *scale, const void *bias, int N, void *y, int ldy, bool out_f32) {
    if (!scale) return llmc_linear(g, x, ldx, n, K, w, bias, N, y, ldy, out_f32);
    if (g->int4) return llmc_linear_q4(g, x, ldx, n, K, w, scale, bias, N, y, ldy, out_f32);
    const int8_t *q = (const int8_t *)w;
    if (n <= g->opt.gemv_max_tokens && llmc_gemv_q8_fits(n, K, ldx, x, q)) {
        int cfg = 0;
        KILN_TRY(llmc_gemv_q8_config(g, x, ldx, n, K, q, scale, bias, N, y, ldy, out_f32, &cfg));
        return llmc_gemv_q8_launch(g->dtype, g->kc.stream, cfg, x, ldx, n, K, q, scale, bias, N, y, ldy, out_f32, g->pdl);
    }
    if (g->gemm_q && llmc_gemm_q_fits(8, n, K, ldx, x, q))
        return llmc_linear_gemm_q(g, 8, x, ldx, n, K, q, scale, NULL, bias, N, y, ldy, out_f32);
    int64_t tile = 0;
    KILN_TRY(llmc_dequant_tile_rows("int8", K, &tile));
    const size_t ys = out_f32 ? 4 : 2;
    for (int r0 = 0; r0 < N; r0 += (int)tile) {
        const int rows = N - r0 < tile ? N - r0 : (int)tile;
        KILN_TRY(llmc_dequant_q8_launch(g->dtype, g->kc.stream, q + (size_t)r0 * K, scale + r0, rows, K, g->deq));
        KILN_TRY(llmc_linear(g, x, ldx, n, K, g->deq, bias ? (const char *)bias + (size_t)r0 * 2 : NULL, rows,
                             (char *)y + (size_t)r0 * ys, ldy, out_f32));
    }
    return KILN_OK;
}

/* ---------------------------------------------------------------- embedding */

/* x[t] = (q[tokens[t]] * scale[tokens[t]] + pos[positions[t]]) * emb_scale. */
template <typename T>
__global__ void embed_q8_kernel(float *__restrict__ x, const int8_t *__restrict__ tok, const float *__restrict__ tok_s,
                                const T *__restrict__ pos, const int32_t *__restrict__ tokens,
                                const int32_t *__restrict__ positions, int d, float emb_scale) {
    const int t = blockIdx.x;
    const int64_t id = tokens[t];
    const int8_t *e = tok + id * d;
    const float s = tok_s[id];
    const T *p = pos ? pos + (size_t)positions[t] * d : NULL;
    float *xr = x + (size_t)t * d;
    for (int i = threadIdx.x; i < d; i += blockDim.x) xr[i] = ((float)e[i] * s + (p ? ku_f32(p[i]) : 0.0f)) * emb_scale;
}

template <typename T> static kiln_status launch_embed_q8(kiln_llm_cuda *g, const llmc_step *s) {
    const float scale = g->cfg.scale_emb ? sqrtf((float)g->cfg.d_model) : 1.0f;
    embed_q8_kernel<T><<<s->n_tokens, QD_THREADS, 0, g->kc.stream>>>(g->x, (const int8_t *)g->tok_emb, g->tok_emb_s,
                                                                    (const T *)g->pos_emb, s->tokens, s->positions,
                                                                    g->cfg.d_model, scale);
    KILN_CUDA_LAUNCH_CHECK("embed_q8_kernel");
    return KILN_OK;
}

extern "C" kiln_status llmc_embed_any(kiln_llm_cuda *g, const llmc_step *s) {
    if (!g->tok_emb_s) return llmc_embed(g, s);
    if (g->int4) return llmc_embed_q4(g, s);
    return LC_DISPATCH(g->dtype, launch_embed_q8, g, s);
}

/* ---------------------------------------------------------------- random INT8 weights (benchmarks) */

/* q[i] = a uniform integer in [-127, 127] from splitmix64 of (seed, i); scale[r] = amp / 127. */
__global__ void fill_q8_kernel(int8_t *__restrict__ q, float *__restrict__ scale, int64_t rows, int64_t cols,
                               uint64_t seed, float amp) {
    const int64_t stride = (int64_t)gridDim.x * blockDim.x, first = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    for (int64_t i = first; i < rows * cols; i += stride) {
        uint64_t z = seed + 0x9E3779B97F4A7C15ULL * (uint64_t)(i + 1);
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
        z ^= z >> 31;
        q[i] = (int8_t)((int)(z % 255u) - 127);
    }
    for (int64_t r = first; r < rows; r += stride) scale[r] = amp / 127.0f;
}

extern "C" kiln_status llmc_fill_random_q8(kiln_llm_cuda *g, int8_t *q, float *scale, size_t rows, size_t cols,
                                           uint64_t seed, float amp) {
    const unsigned blocks = (unsigned)((g->kc.sm_count > 0 ? g->kc.sm_count : 1) * 8);
    fill_q8_kernel<<<blocks, QD_THREADS, 0, g->kc.stream>>>(q, scale, (int64_t)rows, (int64_t)cols, seed, amp);
    KILN_CUDA_LAUNCH_CHECK("fill_q8_kernel");
    return KILN_OK;
}
