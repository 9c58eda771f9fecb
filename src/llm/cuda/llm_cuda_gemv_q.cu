/* llm_cuda_gemv_q.cu — the weight-only INT8 products of the LLM forward on CUDA (weights int8 [N, K]
 * with one fp32 scale per output row, kept so on the device):
 *
 *  - few token rows (decode): gemv_q8_kernel, one template over its launch geometry as the 16-bit
 *    GEMV's (threads per row group, groups per block, rows per group, 16-byte loads of 16 weights in
 *    flight per row, activations staged in shared memory or read through L1), in
 *    LLMC_GEMV_Q8_CONFIGS configurations timed per shape by llm_cuda_gemm.cu's choice (the fastest
 *    kept; KILN_LLM_GEMV_Q8=0..9 forces one). Up to LLMC_GEMV_MAX token rows are summed in fp32
 *    against the same loaded weights, the row's scale applied once to each sum.
 *  - many token rows (prefill): tiles of weight rows dequantized to the activation dtype in a device
 *    workspace, each multiplied by llmc_linear's cuBLASLt product.
 *
 * Also the embedding lookup of an int8 token embedding. Activations are the model's compute dtype
 * (fp16 or bf16). */
#include "llm/cuda/llm_cuda_util.cuh"

#define QD_THREADS 256
#define Q8_STAGE_MAX (48 * 1024) /* activation bytes (n * K * 2) a staging configuration keeps in shared
                                  * memory; past it the configuration reads them through L1 */

/* ---------------------------------------------------------------- the INT8 GEMV family */

/* The 16 int8 values of u as fp32, exactly: each byte, offset by 128, becomes the low mantissa byte of
 * 2^23 (one byte permute), and 2^23 + 128 is subtracted (one add); cheaper than 16 integer-to-float
 * conversions, whose throughput would bound the kernel below the memory's. */
static __device__ __forceinline__ void q8_unpack16(const uint4 &u, float (&f)[16]) {
    const uint32_t w[4] = {u.x ^ 0x80808080u, u.y ^ 0x80808080u, u.z ^ 0x80808080u, u.w ^ 0x80808080u};
#pragma unroll
    for (int j = 0; j < 4; j++) {
#pragma unroll
        for (int b = 0; b < 4; b++)
            f[4 * j + b] = __int_as_float((int)__byte_perm(w[j], 0x4B000000u, 0x7540u | b)) - 8388736.0f;
    }
}

/* The end of a split-K launch (S > 1, gemv_q8_kernel): the group's sums of its block's share of K go to
 * shared memory (over the warp, then over the group's warps), lc_cluster_sum adds the cluster's S
 * shares in rank order, and rank 0's threads apply the row scale, add the bias and store. */
template <typename T, typename O, int NT, int TPR, int GROUPS, int R, int S>
static __device__ __forceinline__ void q8_split_store(const float (&acc)[R][NT], int grp, int gi, int lane, int rows,
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
        if (r < rows && t < n) y[(size_t)t * ldy + o] = ku_from_f32<O>(v * scale[o] + (bias ? ku_f32(bias[o]) : 0.0f));
    }
}

/* y[t, o] = scale[o] * sum_k x[t, k] q[o, k] + bias[o]. A block is GROUPS groups of TPR threads (TPR a
 * multiple of 32: one warp, or several splitting K); a group owns R consecutive output rows and its
 * threads take the 16-byte chunks (16 weights) g, g + TPR, ... of each (g: the thread's index in the
 * group), U chunks of every row in flight per round (R * U loads per thread, __ldcs: read once per
 * product). The 16 inputs of each token row under a chunk are loaded once and used for all R rows:
 * from shared memory when STAGE (the block copies the n token rows there first), else through L1.
 * FP32 sums over the warp by shuffles, then (TPR > 32) over the group's warps through shared memory.
 * NT: token rows compiled for; NT <= 4 runs with n == NT, NT = 8 with any n <= 8 (rows past n repeat
 * row n - 1 and are not stored). S > 1: split-K over clusters of S blocks (sm_90): block rank q takes the
 * chunks q * TPR + g, + S * TPR, ..., and q8_split_store sums the S shares. */
template <typename T, typename O, int NT, int TPR, int GROUPS, int R, int U, bool STAGE, int S>
__global__ void __launch_bounds__(TPR *GROUPS)
    gemv_q8_kernel(const T *__restrict__ x, int ldx, int n, int K, const int8_t *__restrict__ w,
                   const float *__restrict__ scale, const T *__restrict__ bias, int N, O *__restrict__ y, int ldy) {
    constexpr int WPR = TPR / 32;
    static_assert(TPR % 32 == 0 && WPR >= 1, "TPR: a multiple of 32");
    static_assert(WPR == 1 || R * NT <= TPR, "the cross-warp sum takes one thread per (row, token row)");
    static_assert(WPR > 1 || R * NT <= 32, "one lane stores each (row, token row)");
    extern __shared__ uint4 q8_xs[];
    const int tid = threadIdx.x, grp = tid / TPR, gi = tid - grp * TPR, lane = tid & 31, K16 = K >> 4;
    const int split = S > 1 ? (int)(blockIdx.x % S) : 0, rb = (int)(blockIdx.x / S);
    const int row0 = (rb * GROUPS + grp) * R, rows = min(R, N - row0); /* rows <= 0: idle */
    const T *xbase = x;
    int xld = ldx;
    if (STAGE) { /* the n token rows, K values each, contiguous in shared memory */
        const int K8 = K >> 3;
        for (int i = tid; i < n * K8; i += TPR * GROUPS) {
            const int t = i / K8, c = i - t * K8;
            q8_xs[i] = __ldg(reinterpret_cast<const uint4 *>(x + (size_t)t * ldx) + c);
        }
        __syncthreads();
        xbase = reinterpret_cast<const T *>(q8_xs);
        xld = K;
    }
    const uint4 *wr[R];
#pragma unroll
    for (int r = 0; r < R; r++) wr[r] = reinterpret_cast<const uint4 *>(w + (size_t)min(row0 + r, N - 1) * K);
    const T *xr[NT];
#pragma unroll
    for (int t = 0; t < NT; t++) xr[t] = xbase + (size_t)(NT <= 4 ? t : min(t, n - 1)) * xld;
    float acc[R][NT];
#pragma unroll
    for (int r = 0; r < R; r++)
#pragma unroll
        for (int t = 0; t < NT; t++) acc[r][t] = 0.0f;
    if (rows > 0) {
        for (int c0 = split * TPR + gi; c0 < K16; c0 += TPR * S * U) {
            uint4 wv[U][R];
#pragma unroll
            for (int u = 0; u < U; u++) {
                const int c = c0 + u * TPR * S;
#pragma unroll
                for (int r = 0; r < R; r++)
                    wv[u][r] = c < K16 && r < rows ? __ldcs(wr[r] + c) : make_uint4(0, 0, 0, 0);
            }
#pragma unroll
            for (int u = 0; u < U; u++) {
                const int c = c0 + u * TPR * S;
                if (c >= K16) break;
                float wf[R][16];
#pragma unroll
                for (int r = 0; r < R; r++) q8_unpack16(wv[u][r], wf[r]);
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
            }
        }
    }
    if constexpr (S > 1) {
        q8_split_store<T, O, NT, TPR, GROUPS, R, S>(acc, grp, gi, lane, rows, n, row0, scale, bias, y, ldy);
    } else if constexpr (WPR == 1) {
#pragma unroll
        for (int r = 0; r < R; r++)
#pragma unroll
            for (int t = 0; t < NT; t++) {
                const float v = ku_warp_sum(acc[r][t]); /* every lane has it: lane r * NT + t stores */
                if (lane == r * NT + t && r < rows && t < n) {
                    const int o = row0 + r;
                    y[(size_t)t * ldy + o] = ku_from_f32<O>(v * scale[o] + (bias ? ku_f32(bias[o]) : 0.0f));
                }
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
            const int r = gi / NT, t = gi - r * NT, o = row0 + r;
            if (r < rows && t < n) {
                float v = 0.0f;
#pragma unroll
                for (int wi = 0; wi < WPR; wi++) v += red[grp][wi][gi];
                y[(size_t)t * ldy + o] = ku_from_f32<O>(v * scale[o] + (bias ? ku_f32(bias[o]) : 0.0f));
            }
        }
    }
}

/* The candidates: threads per row group, groups per block, rows per group, chunks per row in flight,
 * activations staged in shared memory, blocks splitting K (a cluster). A warp per row with 4 or 8
 * loads in flight (0, 1: 0 is the geometry of the kernel the family replaced), warps on 2 or 4 rows
 * sharing the activations (2-4; 3 and 4 staged once per block of 16 rows: 4 warps of 4 rows, 8 of 2),
 * 2-8 warps splitting the long rows of narrow products so that a product of few rows still spreads
 * over every SM (5-7), clusters of 4 or 2 blocks splitting K (8, 9; unsplit before sm_90). Each
 * checked against the CPU by the llm.GemvQ8 op cases (tests/gpu/llm_op_quant.c). */
#define GEMV_Q8_CONFIG_LIST(X)                                                                     \
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

#define Q8_STAGED_true ", x in shared memory"
#define Q8_STAGED_false ""
static const char *const GEMV_Q8_NAME[LLMC_GEMV_Q8_CONFIGS] = {
#define X(i, tpr, gr, r, u, st, sk)                                                                \
    "#" #i ": " #tpr " thr/row x " #r " rows, " #gr " groups, " #u " loads/row, split " #sk Q8_STAGED_##st,
    GEMV_Q8_CONFIG_LIST(X)
#undef X
};

template <typename T, typename O, int NT, int TPR, int GROUPS, int R, int U, bool STAGE, int S>
static kiln_status gemv_q8_nt(cudaStream_t st, const void *x, int ldx, int n, int K, const int8_t *w,
                              const float *scale, const void *bias, int N, void *y, int ldy) {
    const unsigned blocks = (unsigned)((N + GROUPS * R - 1) / (GROUPS * R));
    const size_t smem = (size_t)n * K * sizeof(T);
    static_assert(S == 1 || !STAGE, "a split configuration reads the activations through L1");
    bool done = false;
    if constexpr (S > 1) {
        if (lc_clusters_ok()) {
            KILN_TRY(lc_cluster_launch(gemv_q8_kernel<T, O, NT, TPR, GROUPS, R, U, false, S>, blocks, S, TPR * GROUPS, 0,
                                       st, (const T *)x, ldx, n, K, w, scale, (const T *)bias, N, (O *)y, ldy));
            done = true;
        }
    } else if constexpr (STAGE) {
        if (smem <= Q8_STAGE_MAX) {
            gemv_q8_kernel<T, O, NT, TPR, GROUPS, R, U, true, 1><<<blocks, TPR * GROUPS, smem, st>>>(
                (const T *)x, ldx, n, K, w, scale, (const T *)bias, N, (O *)y, ldy);
            done = true;
        }
    }
    if (!done) /* the unstaged, unsplit kernel of this geometry */
        gemv_q8_kernel<T, O, NT, TPR, GROUPS, R, U, false, 1><<<blocks, TPR * GROUPS, 0, st>>>(
            (const T *)x, ldx, n, K, w, scale, (const T *)bias, N, (O *)y, ldy);
    KILN_CUDA_LAUNCH_CHECK("gemv_q8_kernel");
    return KILN_OK;
}

template <typename T, typename O, int TPR, int GROUPS, int R, int U, bool STAGE, int S>
static kiln_status gemv_q8_n(cudaStream_t st, const void *x, int ldx, int n, int K, const int8_t *w,
                             const float *scale, const void *bias, int N, void *y, int ldy) {
    switch (n) {
    case 1: return gemv_q8_nt<T, O, 1, TPR, GROUPS, R, U, STAGE, S>(st, x, ldx, n, K, w, scale, bias, N, y, ldy);
    case 2: return gemv_q8_nt<T, O, 2, TPR, GROUPS, R, U, STAGE, S>(st, x, ldx, n, K, w, scale, bias, N, y, ldy);
    case 3: return gemv_q8_nt<T, O, 3, TPR, GROUPS, R, U, STAGE, S>(st, x, ldx, n, K, w, scale, bias, N, y, ldy);
    case 4: return gemv_q8_nt<T, O, 4, TPR, GROUPS, R, U, STAGE, S>(st, x, ldx, n, K, w, scale, bias, N, y, ldy);
    default: return gemv_q8_nt<T, O, 8, TPR, GROUPS, R, U, STAGE, S>(st, x, ldx, n, K, w, scale, bias, N, y, ldy);
    }
}

template <typename T, typename O>
static kiln_status gemv_q8_cfg(cudaStream_t st, int cfg, const void *x, int ldx, int n, int K, const int8_t *w,
                               const float *scale, const void *bias, int N, void *y, int ldy) {
    switch (cfg) {
#define X(i, tpr, gr, r, u, stage, sk)                                                             \
    case i: return gemv_q8_n<T, O, tpr, gr, r, u, stage, sk>(st, x, ldx, n, K, w, scale, bias, N, y, ldy);
        GEMV_Q8_CONFIG_LIST(X)
#undef X
    default: return kiln_error(KILN_ERR_INTERNAL, "int8 gemv: no configuration %d", cfg);
    }
}

template <typename T>
static kiln_status launch_gemv_q8(cudaStream_t st, int cfg, const void *x, int ldx, int n, int K, const int8_t *w,
                                  const float *scale, const void *bias, int N, void *y, int ldy, bool out_f32) {
    return out_f32 ? gemv_q8_cfg<T, float>(st, cfg, x, ldx, n, K, w, scale, bias, N, y, ldy)
                   : gemv_q8_cfg<T, T>(st, cfg, x, ldx, n, K, w, scale, bias, N, y, ldy);
}

extern "C" bool llmc_gemv_q8_fits(int n, int K, int ldx, const void *x, const void *q) {
    return n >= 1 && n <= LLMC_GEMV_MAX && K >= 16 && K % 16 == 0 && ldx % 8 == 0 && ldx >= K && ku_aligned16(x) &&
           ku_aligned16(q);
}

extern "C" kiln_status llmc_gemv_q8_launch(kiln_dtype dtype, cudaStream_t stream, int cfg, const void *x, int ldx,
                                           int n, int K, const int8_t *w, const float *scale, const void *bias, int N,
                                           void *y, int ldy, bool out_f32) {
    if (dtype != KILN_F16 && dtype != KILN_BF16)
        return kiln_error(KILN_ERR_INVALID_ARGUMENT, "int8 gemv: activations %s (float16 or bfloat16)",
                          kiln_dtype_name(dtype));
    if (!llmc_gemv_q8_fits(n, K, ldx, x, w) || N < 1 || ldy < N)
        return kiln_error(KILN_ERR_INVALID_ARGUMENT, "int8 gemv: n %d (1..%d), K %d (a multiple of 16), ldx %d "
                          "(a multiple of 8, >= K), N %d, ldy %d, x and w 16-byte aligned", n, LLMC_GEMV_MAX, K, ldx,
                          N, ldy);
    if (cfg < 0 || cfg >= LLMC_GEMV_Q8_CONFIGS)
        return kiln_error(KILN_ERR_INVALID_ARGUMENT, "int8 gemv: no configuration %d (0..%d)", cfg,
                          LLMC_GEMV_Q8_CONFIGS - 1);
    return LC_DISPATCH(dtype, launch_gemv_q8, stream, cfg, x, ldx, n, K, w, scale, bias, N, y, ldy, out_f32);
}

extern "C" const char *llmc_gemv_q8_config_name(int cfg) {
    return cfg >= 0 && cfg < LLMC_GEMV_Q8_CONFIGS ? GEMV_Q8_NAME[cfg] : "?";
}

/* ---------------------------------------------------------------- dequantized tiles */

/* dst[r, k] = q[r, k] * scale[r] in T, r < rows, k < K; four values per thread. */
template <typename T>
__global__ void dequant_q8_kernel(const int8_t *__restrict__ q, const float *__restrict__ scale, int64_t rows, int K,
                                  T *__restrict__ dst) {
    const int64_t n = rows * K;
    for (int64_t i = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) * 4; i < n; i += (int64_t)gridDim.x * blockDim.x * 4) {
#pragma unroll
        for (int j = 0; j < 4; j++) {
            const int64_t e = i + j;
            if (e < n) dst[e] = ku_from_f32<T>((float)q[e] * scale[e / K]);
        }
    }
}

template <typename T>
static kiln_status launch_dequant(cudaStream_t st, const int8_t *q, const float *scale, int rows, int K, void *dst) {
    const int64_t n = (int64_t)rows * K;
    int64_t blocks = (n / 4 + QD_THREADS - 1) / QD_THREADS;
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

extern "C" kiln_status llmc_linear_w(kiln_llm_cuda *g, const void *x, int ldx, int n, int K, const void *w,
                                     const float *scale, const void *bias, int N, void *y, int ldy, bool out_f32) {
    if (!scale) return llmc_linear(g, x, ldx, n, K, w, bias, N, y, ldy, out_f32);
    if (g->int4) return llmc_linear_q4(g, x, ldx, n, K, w, scale, bias, N, y, ldy, out_f32);
    const int8_t *q = (const int8_t *)w;
    if (n <= g->opt.gemv_max_tokens && llmc_gemv_q8_fits(n, K, ldx, x, q)) {
        int cfg = 0;
        KILN_TRY(llmc_gemv_q8_config(g, x, ldx, n, K, q, scale, bias, N, y, ldy, out_f32, &cfg));
        return llmc_gemv_q8_launch(g->dtype, g->kc.stream, cfg, x, ldx, n, K, q, scale, bias, N, y, ldy, out_f32);
    }
    /* tiles of weight rows (a multiple of 64, so that bias and output offsets stay aligned) */
    int64_t tile = (int64_t)(LLMC_DEQUANT_BYTES / 2 / (size_t)K) / 64 * 64;
    if (tile < 64)
        return kiln_error(KILN_ERR_UNSUPPORTED, "llm cuda: int8 matrix of %d inputs (the dequantizing workspace takes "
                          "at most %zu)", K, LLMC_DEQUANT_BYTES / 2 / 64);
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
