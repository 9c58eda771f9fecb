/* llm_cuda_gemv_fused.cu — the decode GEMV with its neighbours folded in (llmc_gemv_fused_launch), so a
 * decoder layer of a few-token step is six kernels instead of nine:
 *
 *  - prologue LLMC_PRO_NORM: each block reads the step's FP32 residual rows (gathered through rows when
 *    given), computes their LayerNorm / RMSNorm statistics itself and keeps the normalized rows, rounded
 *    to the model dtype, in shared memory, so the normed activation is never written to memory;
 *    LLMC_PRO_INPUT: the 16-bit input rows as llmc_gemv_launch reads them.
 *  - epilogue: the bias in FP32, then the plain store (16-bit or FP32), GELU(tanh), SwiGLU / GeGLU over
 *    the concatenated [gate | up] weights (one group computes gate row j and up row d_ff + j and stores
 *    act(gate) * up), or the residual add into the FP32 stream (x += the product rounded to the dtype).
 *    Every value is rounded where the unfused kernels round it (llm_cuda_ops.cu), so the fused step
 *    computes what the unfused one does up to the order of the norm statistics' sums.
 *  - programmatic dependent launch (sm_90, a.pdl): launched with programmatic stream serialization, the
 *    kernel prefetches its first weights into L2, waits for the previous kernel (griddepcontrol.wait)
 *    before touching any activation, then lets the next kernel launch; inside a CUDA graph too.
 *
 * The loop over the weights is llm_cuda_gemm.cu's family (same geometries, llmc_gemv_config_name), over
 * row groups with a grid of at most the resident blocks, so a block computes its norm once. The FP32
 * residual stream is read and written through L2 only (ld/st.cg): blocks of the kernel before may have
 * updated other parts of the same cache lines while this kernel's blocks were already resident. */
#include "llm/cuda/llm_cuda_util.cuh"

#include <stdlib.h>
#include <string.h>

#define FUSED_SMEM_MAX (96 * 1024) /* normalized rows in shared memory: n * K * 2 bytes at most (8 rows
                                    * at d_model 6144; opted in past 48 KB per kernel) */

/* The kernel's parameters (one struct by value). */
typedef struct fused_args {
    int n, K, N, prologue, epilogue, out_f32;
    const void *x;
    int ldx;
    float *res;
    int ldres;
    const int32_t *rows;
    const float *norm_w, *norm_b;
    float w_offset, eps;
    const void *w, *bias;
    void *y;
    int ldy;
} fused_args;

static __device__ __forceinline__ void prefetch_l2(const void *p) {
    asm volatile("prefetch.global.L2 [%0];" ::"l"(p));
}

static __device__ __forceinline__ float gelu_tanh(float v) {
    const float k = 0.7978845608028654f; /* sqrt(2 / pi) */
    return 0.5f * v * (1.0f + tanhf(k * (v + 0.044715f * v * v * v)));
}

/* The n residual rows normalized into xs [n][K] (as add_norm_kernel computes them, without the add). */
template <typename T> static __device__ void norm_rows(const fused_args &a, T *xs) {
    __shared__ float red[32];
    for (int t = 0; t < a.n; t++) {
        const float *xr = a.res + (size_t)(a.rows ? a.rows[t] : t) * a.ldres;
        float mean = 0.0f;
        if (a.norm_b) { /* uniform: every thread reduces or none */
            float sum = 0.0f;
            for (int i = threadIdx.x; i < a.K; i += blockDim.x) sum += __ldcg(xr + i);
            mean = ku_block_sum(sum, red) / (float)a.K;
        }
        float sq = 0.0f;
        for (int i = threadIdx.x; i < a.K; i += blockDim.x) {
            const float v = __ldcg(xr + i) - mean;
            sq += v * v;
        }
        const float rs = rsqrtf(ku_block_sum(sq, red) / (float)a.K + a.eps);
        for (int i = threadIdx.x; i < a.K; i += blockDim.x) {
            const float shift = a.norm_b ? a.norm_b[i] : 0.0f;
            xs[(size_t)t * a.K + i] = ku_from_f32<T>((__ldcg(xr + i) - mean) * rs * (a.norm_w[i] + a.w_offset) + shift);
        }
    }
    __syncthreads();
}

/* Output (row, token t) from its sums (v; gated: vu, the up row's), bias not yet added. */
template <typename T, bool GATED>
static __device__ __forceinline__ void fused_store(const fused_args &a, int row, int t, float v, float vu) {
    const T *bias = (const T *)a.bias;
    if (bias) v += ku_f32(bias[row]);
    if (GATED) {
        if (bias) vu += ku_f32(bias[a.N + row]);
        const float gv = ku_f32(ku_from_f32<T>(v)), uv = ku_f32(ku_from_f32<T>(vu));
        const float act = a.epilogue == LLMC_EPI_GEGLU ? gelu_tanh(gv) : gv / (1.0f + expf(-gv));
        ((T *)a.y)[(size_t)t * a.ldy + row] = ku_from_f32<T>(act * uv);
    } else if (a.epilogue == LLMC_EPI_RESIDUAL) {
        float *p = a.res + (size_t)t * a.ldres + row;
        __stcg(p, __ldcg(p) + ku_f32(ku_from_f32<T>(v)));
    } else if (a.epilogue == LLMC_EPI_GELU) {
        ((T *)a.y)[(size_t)t * a.ldy + row] = ku_from_f32<T>(gelu_tanh(ku_f32(ku_from_f32<T>(v))));
    } else if (a.out_f32) {
        ((float *)a.y)[(size_t)t * a.ldy + row] = v;
    } else {
        ((T *)a.y)[(size_t)t * a.ldy + row] = ku_from_f32<T>(v);
    }
}

/* gemv_tpl_kernel's loop (lc_gemv_rows, llm_cuda_util.cuh) over row groups blockIdx.x, + gridDim.x, ...; a group's
 * weight rows are its R output rows, and with GATED also the R up rows N + row (RW = 2 R). */
template <typename T, int NT, int TPR, int GROUPS, int R, int U, bool GATED>
__global__ void __launch_bounds__(TPR *GROUPS) gemv_fused_kernel(const fused_args a) {
    constexpr int WPR = TPR / 32, RW = GATED ? 2 * R : R;
    static_assert(TPR % 32 == 0 && WPR >= 1, "TPR: a multiple of 32");
    static_assert(WPR == 1 || R * NT <= TPR, "the cross-warp sum takes one thread per (row, token row)");
    static_assert(WPR > 1 || R * NT <= 32, "one lane stores each (row, token row)");
    extern __shared__ uint4 fused_smem[];
    const int tid = threadIdx.x, grp = tid / TPR, gi = tid - grp * TPR, lane = tid & 31, K8 = a.K >> 3;
    const int n_blocks = (a.N + GROUPS * R - 1) / (GROUPS * R);
    const T *w = (const T *)a.w;
    /* the first row group's first chunks are not the previous kernel's output: fetch them meanwhile */
    if ((int)blockIdx.x < n_blocks) {
        const int row0 = (blockIdx.x * GROUPS + grp) * R;
#pragma unroll
        for (int r = 0; r < RW; r++) {
            const int rr = r < R ? r : r - R, row = min(row0 + rr, a.N - 1) + (r < R ? 0 : a.N);
#pragma unroll
            for (int u = 0; u < U; u++)
                if (gi + u * TPR < K8) prefetch_l2(w + (size_t)row * a.K + (size_t)(gi + u * TPR) * 8);
        }
    }
    lc_pdl_wait();
    lc_pdl_launch_dependents();
    const T *xbase = (const T *)a.x;
    int ldx = a.ldx;
    if (a.prologue == LLMC_PRO_NORM) {
        T *xs = reinterpret_cast<T *>(fused_smem);
        norm_rows<T>(a, xs);
        xbase = xs;
        ldx = a.K;
    }
    const T *xr[NT];
#pragma unroll
    for (int t = 0; t < NT; t++) xr[t] = xbase + (size_t)(NT <= 4 ? t : min(t, a.n - 1)) * ldx;
    for (int blk = blockIdx.x; blk < n_blocks; blk += gridDim.x) {
        const int row0 = (blk * GROUPS + grp) * R, rows = min(R, a.N - row0); /* rows <= 0: idle */
        const uint4 *wr[RW];
#pragma unroll
        for (int r = 0; r < RW; r++) {
            const int rr = r < R ? r : r - R, row = min(row0 + rr, a.N - 1) + (r < R ? 0 : a.N);
            wr[r] = reinterpret_cast<const uint4 *>(w + (size_t)row * a.K);
        }
        float acc[RW][NT];
#pragma unroll
        for (int r = 0; r < RW; r++)
#pragma unroll
            for (int t = 0; t < NT; t++) acc[r][t] = 0.0f;
        if (rows > 0) lc_gemv_rows<T, NT, TPR, R, RW, U, false>(wr, rows, xr, gi, K8, acc);
        if constexpr (WPR == 1) {
#pragma unroll
            for (int r = 0; r < R; r++)
#pragma unroll
                for (int t = 0; t < NT; t++) {
                    const float v = ku_warp_sum(acc[r][t]);
                    const float vu = GATED ? ku_warp_sum(acc[GATED ? r + R : r][t]) : 0.0f;
                    if (lane == r * NT + t && r < rows && t < a.n) fused_store<T, GATED>(a, row0 + r, t, v, vu);
                }
        } else {
            __shared__ float red[GROUPS][WPR][RW * NT];
            const int wg = gi >> 5;
#pragma unroll
            for (int r = 0; r < RW; r++)
#pragma unroll
                for (int t = 0; t < NT; t++) {
                    const float v = ku_warp_sum(acc[r][t]);
                    if (lane == 0) red[grp][wg][r * NT + t] = v;
                }
            __syncthreads();
            if (gi < R * NT) {
                const int r = gi / NT, t = gi - r * NT;
                if (r < rows && t < a.n) {
                    float v = 0.0f, vu = 0.0f;
#pragma unroll
                    for (int wi = 0; wi < WPR; wi++) {
                        v += red[grp][wi][gi];
                        if (GATED) vu += red[grp][wi][R * NT + gi];
                    }
                    fused_store<T, GATED>(a, row0 + r, t, v, vu);
                }
            }
            __syncthreads(); /* red is refilled by the next row group */
        }
    }
}

/* Launches one instantiation: a grid of at most the resident blocks, with the PDL attribute when asked. */
template <typename T, int NT, int TPR, int GROUPS, int R, int U, bool GATED>
static kiln_status fused_nt(const llmc_gemv_fused *p, const fused_args &a, cudaStream_t stream) {
    auto kernel = gemv_fused_kernel<T, NT, TPR, GROUPS, R, U, GATED>;
    const size_t smem = a.prologue == LLMC_PRO_NORM ? (size_t)a.n * a.K * sizeof(T) : 0;
    const int n_blocks = (a.N + GROUPS * R - 1) / (GROUPS * R);
    static unsigned long long opted; /* this instantiation's opt-in, per device (ku_smem_opt_in) */
    if (smem > 0) KILN_TRY(ku_smem_opt_in(kernel, FUSED_SMEM_MAX, false, &opted, stream));
    /* resident blocks per SM, remembered for the last (device, shared memory) asked: a model's products
     * of one instantiation all have the same */
    static unsigned long long occupancy; /* (device * 2^17 + smem) << 32 | blocks per SM; 0: none */
    int dev = 0, per_sm = 0;
    KILN_CUDA_TRY(cudaGetDevice(&dev));
    const unsigned long long key = ((unsigned long long)dev << 17 | smem) << 32;
    const unsigned long long seen = __atomic_load_n(&occupancy, __ATOMIC_RELAXED);
    if (seen && (seen & ~0xffffffffull) == key) {
        per_sm = (int)(seen & 0xffffffffull);
    } else {
        KILN_CUDA_TRY(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, TPR * GROUPS, smem));
        __atomic_store_n(&occupancy, key | (unsigned)per_sm, __ATOMIC_RELAXED);
    }
    const int resident = (per_sm > 0 ? per_sm : 1) * (p->sm_count > 0 ? p->sm_count : 1);
    return lc_launch_grid(kernel, dim3((unsigned)(n_blocks < resident ? n_blocks : resident)), dim3(TPR * GROUPS), smem,
                          stream, p->pdl, a);
}

template <typename T, int TPR, int GROUPS, int R, int U, bool GATED>
static kiln_status fused_n(const llmc_gemv_fused *p, const fused_args &a, cudaStream_t stream) {
    switch (a.n) {
    case 1: return fused_nt<T, 1, TPR, GROUPS, R, U, GATED>(p, a, stream);
    case 2: return fused_nt<T, 2, TPR, GROUPS, R, U, GATED>(p, a, stream);
    case 3: return fused_nt<T, 3, TPR, GROUPS, R, U, GATED>(p, a, stream);
    case 4: return fused_nt<T, 4, TPR, GROUPS, R, U, GATED>(p, a, stream);
    default: return fused_nt<T, 8, TPR, GROUPS, R, U, GATED>(p, a, stream);
    }
}

/* The geometries of llm_cuda_gemm.cu's GEMV_CONFIG_LIST, in its order (config i here is config i there);
 * its split-K configurations (8, 9) run unsplit here (a block's epilogue needs whole sums). */
#define FUSED_CONFIG_LIST(X)                                                                       \
    X(0, 32, 4, 1, 8)                                                                              \
    X(1, 32, 4, 2, 4)                                                                              \
    X(2, 32, 8, 4, 2)                                                                              \
    X(3, 64, 2, 2, 4)                                                                              \
    X(4, 128, 1, 1, 8)                                                                             \
    X(5, 128, 2, 2, 4)                                                                             \
    X(6, 256, 1, 4, 2)                                                                             \
    X(7, 256, 1, 2, 4)                                                                             \
    X(8, 32, 4, 1, 2)                                                                              \
    X(9, 64, 2, 2, 2)

template <typename T>
static kiln_status fused_any(const llmc_gemv_fused *p, const fused_args &a, cudaStream_t stream) {
    const bool gated = p->epilogue == LLMC_EPI_SWIGLU || p->epilogue == LLMC_EPI_GEGLU;
    switch (p->cfg) {
#define X(i, tpr, gr, r, u)                                                                        \
    case i:                                                                                        \
        return gated ? fused_n<T, tpr, gr, r, u, true>(p, a, stream) : fused_n<T, tpr, gr, r, u, false>(p, a, stream);
        FUSED_CONFIG_LIST(X)
#undef X
    default: return kiln_error(KILN_ERR_INVALID_ARGUMENT, "llm cuda fused GEMV: no configuration %d", p->cfg);
    }
}

extern "C" bool llmc_gemv_fused_fits(int n, int K, bool norm) {
    return n >= 1 && n <= LLMC_GEMV_MAX && K >= 8 && K % 8 == 0 && (!norm || (size_t)n * K * 2 <= FUSED_SMEM_MAX);
}

extern "C" kiln_status llmc_fuse_mode_from_env(int cc_major, int *mode) {
    const char *v = getenv("KILN_LLM_FUSE");
    *mode = LLMC_FUSE_OFF; /* the default: on the H200 the fused path was slower at batch 1 (bench/RESULTS.md) */
    if (!v || !*v) return KILN_OK;
    if (!strcmp(v, "off") || !strcmp(v, "0")) *mode = LLMC_FUSE_OFF;
    else if (!strcmp(v, "on") || !strcmp(v, "1")) *mode = LLMC_FUSE_ON;
    else if (!strcmp(v, "pdl") || !strcmp(v, "2")) *mode = cc_major >= 9 ? LLMC_FUSE_PDL : LLMC_FUSE_ON;
    else return kiln_error(KILN_ERR_INVALID_ARGUMENT, "KILN_LLM_FUSE=%s (off, on or pdl)", v);
    return KILN_OK;
}

extern "C" kiln_status llmc_pdl_from_env(int cc_major, bool *pdl) {
    const char *v = getenv("KILN_LLM_PDL");
    *pdl = cc_major >= 9;
    if (!v || !*v || !strcmp(v, "on") || !strcmp(v, "1")) return KILN_OK;
    if (!strcmp(v, "off") || !strcmp(v, "0")) *pdl = false;
    else return kiln_error(KILN_ERR_INVALID_ARGUMENT, "KILN_LLM_PDL=%s (on or off)", v);
    return KILN_OK;
}

extern "C" kiln_status llmc_gemm_q_from_env(bool *on) {
    const char *v = getenv("KILN_LLM_GEMM_Q");
    *on = LLMC_GEMM_Q_DEFAULT;
    if (!v || !*v) return KILN_OK;
    if (!strcmp(v, "on") || !strcmp(v, "1")) *on = true;
    else if (!strcmp(v, "off") || !strcmp(v, "0")) *on = false;
    else return kiln_error(KILN_ERR_INVALID_ARGUMENT, "KILN_LLM_GEMM_Q=%s (on or off)", v);
    return KILN_OK;
}

extern "C" const char *llmc_fuse_mode_name(int mode) {
    return mode == LLMC_FUSE_PDL  ? "decode: fused GEMVs + PDL"
           : mode == LLMC_FUSE_ON ? "decode: fused GEMVs"
                                  : "decode: unfused";
}

extern "C" kiln_status llmc_gemv_fused_launch(const llmc_gemv_fused *p, cudaStream_t stream) {
    const bool norm = p->prologue == LLMC_PRO_NORM, resid = p->epilogue == LLMC_EPI_RESIDUAL;
    if (p->dtype != KILN_F16 && p->dtype != KILN_BF16)
        return kiln_error(KILN_ERR_INVALID_ARGUMENT, "llm cuda fused GEMV: dtype %s", kiln_dtype_name(p->dtype));
    if (!llmc_gemv_fused_fits(p->n, p->K, norm) || p->N < 1 || !ku_aligned16(p->w) ||
        (p->prologue != LLMC_PRO_INPUT && !norm) || p->epilogue < LLMC_EPI_STORE || p->epilogue > LLMC_EPI_RESIDUAL)
        return kiln_error(KILN_ERR_INVALID_ARGUMENT, "llm cuda fused GEMV: n %d, K %d, N %d, prologue %d, epilogue %d "
                          "(n 1..%d, K a multiple of 8 with n * K * 2 <= %d bytes, w 16-byte aligned)", p->n, p->K,
                          p->N, p->prologue, p->epilogue, LLMC_GEMV_MAX, FUSED_SMEM_MAX);
    if (norm ? !p->res || !p->norm_w || p->ldres < p->K : !p->x || p->ldx < p->K || p->ldx % 8 || !ku_aligned16(p->x))
        return kiln_error(KILN_ERR_INVALID_ARGUMENT, "llm cuda fused GEMV: the %s input is missing or misaligned",
                          norm ? "residual (norm prologue)" : "16-bit");
    if (resid ? !p->res || p->ldres < p->N || p->out_f32 || norm : !p->y || p->ldy < p->N)
        return kiln_error(KILN_ERR_INVALID_ARGUMENT, "llm cuda fused GEMV: the %s output is missing or too narrow "
                          "(the residual epilogue takes a 16-bit input and no FP32 output)", resid ? "residual" : "");
    if (p->out_f32 && p->epilogue != LLMC_EPI_STORE)
        return kiln_error(KILN_ERR_INVALID_ARGUMENT, "llm cuda fused GEMV: FP32 output only with the plain store");
    fused_args a;
    memset(&a, 0, sizeof a);
    a.n = p->n;
    a.K = p->K;
    a.N = p->N;
    a.prologue = p->prologue;
    a.epilogue = p->epilogue;
    a.out_f32 = p->out_f32 ? 1 : 0;
    a.x = p->x;
    a.ldx = p->ldx;
    a.res = p->res;
    a.ldres = p->ldres;
    a.rows = p->rows;
    a.norm_w = p->norm_w;
    a.norm_b = p->norm_b;
    a.w_offset = p->norm_w_offset;
    a.eps = p->eps;
    a.w = p->w;
    a.bias = p->bias;
    a.y = p->y;
    a.ldy = p->ldy;
    return LC_DISPATCH(p->dtype, fused_any, p, a, stream);
}
