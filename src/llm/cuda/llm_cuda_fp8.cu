/* llm_cuda_fp8.cu — the FP8 (E4M3) products of the LLM forward on CUDA (an engine from `kiln build
 * --weights fp8`, or random FP8 weights): weights E4M3 codes [N, K] with one fp32 scale per output row,
 * kept so on the device; each product first rounds its activations to E4M3 once (one block per token
 * row: the row's max |x| / 448 as its scale, or the matrix's static calibrated scale; x / s rounded to
 * nearest even and saturated by __nv_cvt_float_to_fp8, the CPU reference's kiln_f32_to_e4m3), then
 *  - decode rows (up to gemv_max_tokens): a GEMV, one warp per output row, each lane loading 16 weight
 *    codes and 16 activation codes per token row at a time (16-byte loads), converting pairs to half2
 *    in registers (cvt.rn.f16x2.e4m3x2, sm_89+) and summing their products in fp32 (exact: a product
 *    of two E4M3 values fits a float), the sum scaled once by scale[o] * s_t, then the bias;
 *  - more rows: cuBLASLt's FP8 GEMM (E4M3 x E4M3, fp32 accumulate) written straight into the output
 *    in its type, the per-row and per-token scales as cuBLASLt's outer-vector scaling and the bias as
 *    its epilogue; where cuBLASLt has no such algorithm, the same GEMM with D in fp32 over tiles of
 *    weight rows into a workspace, then an epilogue kernel applying the scales and the bias (one more
 *    pass over D); a shape cuBLASLt refuses both ways (K not a multiple of 16, no algorithm) runs the
 *    GEMV over groups of rows.
 * Also the embedding lookup of an E4M3 token embedding and random FP8 weights for benchmarks. */
#include "llm/cuda/llm_cuda_util.cuh"
#include "llm/llm_internal.h"

#include <cuda_fp8.h>
#include <stdlib.h>
#include <string.h>

#define F8_WARPS 4            /* output rows (one warp each) of a GEMV block */
#define F8_THREADS 256        /* threads of the quantize, epilogue, embedding and fill kernels */
#define F8_MAX 448.0f         /* the largest E4M3 value */
#define F8_PLANS 256          /* cuBLASLt FP8 plans kept, by shape (replaced round-robin) */
#define F8_WS_BYTES ((size_t)64 << 20) /* fp32 GEMM tiles */

/* A cuBLASLt FP8 product of one shape: D[rows, np] (column-major, leading dimension ldd) = W[rows, K]
 * Xq[np, K]^T; D fp32 (ws) or, direct, the output's type with the outer-vector scales and the bias. */
typedef struct f8_plan {
    int rows, np, K, ldd;
    bool direct, bias;
    cudaDataType_t dt; /* D's type */
    bool ok;           /* cuBLASLt has an algorithm (else another way runs) */
    cublasLtMatmulDesc_t op;
    cublasLtMatrixLayout_t la, lb, ld;
    cublasLtMatmulAlgo_t algo;
} f8_plan;

struct llmc_fp8 {
    uint8_t *codes; /* [rows_cap, k_max] the rounded activations of the current product */
    float *xs;      /* [rows_cap] their scales */
    float *ws;      /* F8_WS_BYTES: GEMM tiles */
    int rows_cap, k_max;
    float *act;     /* [n_act] static activation scales (kiln_llm_model.act_amax's slots), 0: dynamic */
    int n_act;
    f8_plan plans[F8_PLANS];
    int n_plans, next_plan;
};

/* ---------------------------------------------------------------- activations */

/* Block t: xs[t] = act_scale, or (act_scale 0) max |x[t, :]| / 448 (1 for a row of zeros); codes[t, k] =
 * e4m3(x[t, k] / xs[t]), k < K. */
template <typename T>
__global__ void __launch_bounds__(F8_THREADS)
    f8_quant_kernel(const T *__restrict__ x, int ldx, int K, float act_scale, uint8_t *__restrict__ codes,
                    float *__restrict__ xs) {
    __shared__ float red[F8_THREADS / 32];
    __shared__ float s_row;
    const int t = blockIdx.x;
    const T *xr = x + (size_t)t * ldx;
    if (act_scale > 0) {
        if (threadIdx.x == 0) s_row = act_scale;
    } else {
        float m = 0.0f;
        for (int k = threadIdx.x; k < K; k += blockDim.x) m = fmaxf(m, fabsf(ku_f32(xr[k])));
#pragma unroll
        for (int d = 16; d; d >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, d));
        if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = m;
        __syncthreads();
        if (threadIdx.x == 0) {
            for (int w = 1; w < (int)(blockDim.x >> 5); w++) m = fmaxf(m, red[w]);
            s_row = m > 0.0f ? m / F8_MAX : 1.0f;
        }
    }
    __syncthreads();
    const float s = s_row;
    if (threadIdx.x == 0) xs[t] = s;
    uint8_t *cr = codes + (size_t)t * K;
    for (int k = threadIdx.x; k < K; k += blockDim.x)
        cr[k] = (uint8_t)__nv_cvt_float_to_fp8(ku_f32(xr[k]) / s, __NV_SATFINITE, __NV_E4M3);
}

template <typename T>
static kiln_status launch_quant(cudaStream_t st, const void *x, int ldx, int n, int K, float act_scale,
                                uint8_t *codes, float *xs) {
    f8_quant_kernel<T><<<n, F8_THREADS, 0, st>>>((const T *)x, ldx, K, act_scale, codes, xs);
    KILN_CUDA_LAUNCH_CHECK("f8_quant_kernel");
    return KILN_OK;
}

extern "C" kiln_status llmc_fp8_quantize_launch(kiln_dtype dtype, cudaStream_t stream, const void *x, int ldx, int n,
                                                int K, float act_scale, uint8_t *codes, float *xs) {
    if (dtype != KILN_F16 && dtype != KILN_BF16)
        return kiln_error(KILN_ERR_INVALID_ARGUMENT, "fp8 quantize: activations %s (float16 or bfloat16)",
                          kiln_dtype_name(dtype));
    if (n < 1 || K < 1 || ldx < K || !(act_scale >= 0))
        return kiln_error(KILN_ERR_INVALID_ARGUMENT, "fp8 quantize: n %d, K %d, ldx %d (>= K), act_scale %g (>= 0)", n,
                          K, ldx, act_scale);
    return LC_DISPATCH(dtype, launch_quant, stream, x, ldx, n, K, act_scale, codes, xs);
}

/* ---------------------------------------------------------------- GEMV */

/* The 16 E4M3 codes of u as fp32, two at a time through half2. */
static __device__ __forceinline__ void f8_unpack16(const uint4 &u, float (&f)[16]) {
    const uint32_t w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
    for (int j = 0; j < 4; j++) {
#pragma unroll
        for (int h = 0; h < 2; h++) {
            __half2_raw r = __nv_cvt_fp8x2_to_halfraw2((__nv_fp8x2_storage_t)(w[j] >> (16 * h)), __NV_E4M3);
            const float2 v = __half22float2(*reinterpret_cast<const __half2 *>(&r));
            f[4 * j + 2 * h] = v.x;
            f[4 * j + 2 * h + 1] = v.y;
        }
    }
}

static __device__ __forceinline__ float f8_value(uint8_t c) {
    __half_raw r = __nv_cvt_fp8_to_halfraw((__nv_fp8_storage_t)c, __NV_E4M3);
    return __half2float(*reinterpret_cast<const __half *>(&r));
}

/* y[r, o] = (sum_k e4m3(w[o, k]) e4m3(xc[r, k])) * (scale[o] * xs[r]) + bias[o], r < NR; xc rows of K
 * codes. 16-byte loads when K % 16 == 0 (rows then 16-byte aligned), else one code at a time. */
template <typename T, typename O, int NR>
__global__ void __launch_bounds__(F8_WARPS * 32)
    f8_gemv_kernel(const uint8_t *__restrict__ xc, const float *__restrict__ xs, int K, const uint8_t *__restrict__ w,
                   const float *__restrict__ scale, const T *__restrict__ bias, int N, O *__restrict__ y, int ldy) {
    const int lane = threadIdx.x & 31, o = blockIdx.x * F8_WARPS + (threadIdx.x >> 5);
    if (o >= N) return;
    const uint8_t *wr = w + (size_t)o * K;
    float acc[NR];
#pragma unroll
    for (int r = 0; r < NR; r++) acc[r] = 0.0f;
    if ((K & 15) == 0) {
#pragma unroll 2
        for (int k = lane * 16; k < K; k += 32 * 16) {
            float wf[16];
            f8_unpack16(__ldg(reinterpret_cast<const uint4 *>(wr + k)), wf);
#pragma unroll
            for (int r = 0; r < NR; r++) {
                float xf[16];
                f8_unpack16(__ldg(reinterpret_cast<const uint4 *>(xc + (size_t)r * K + k)), xf);
                float s = acc[r];
#pragma unroll
                for (int j = 0; j < 16; j++) s = fmaf(wf[j], xf[j], s);
                acc[r] = s;
            }
        }
    } else {
        for (int k = lane; k < K; k += 32) {
            const float wv = f8_value(wr[k]);
#pragma unroll
            for (int r = 0; r < NR; r++) acc[r] = fmaf(wv, f8_value(xc[(size_t)r * K + k]), acc[r]);
        }
    }
#pragma unroll
    for (int r = 0; r < NR; r++) {
#pragma unroll
        for (int m = 16; m; m >>= 1) acc[r] += __shfl_xor_sync(0xffffffffu, acc[r], m);
    }
    if (lane) return;
    const float sc = scale[o], bo = bias ? ku_f32(bias[o]) : 0.0f;
#pragma unroll
    for (int r = 0; r < NR; r++) y[(size_t)r * ldy + o] = ku_from_f32<O>(acc[r] * (sc * xs[r]) + bo);
}

template <typename T, typename O>
static void gemv_n(cudaStream_t st, const uint8_t *xc, const float *xs, int n, int K, const uint8_t *w,
                   const float *scale, const void *bias, int N, void *y, int ldy) {
    const unsigned blocks = (unsigned)((N + F8_WARPS - 1) / F8_WARPS);
#define F8_GEMV(NR)                                                                                            \
    f8_gemv_kernel<T, O, NR><<<blocks, F8_WARPS * 32, 0, st>>>(xc, xs, K, w, scale, (const T *)bias, N, (O *)y, ldy)
    switch (n) {
    case 1: F8_GEMV(1); break;
    case 2: F8_GEMV(2); break;
    case 3: F8_GEMV(3); break;
    case 4: F8_GEMV(4); break;
    case 5: F8_GEMV(5); break;
    case 6: F8_GEMV(6); break;
    case 7: F8_GEMV(7); break;
    default: F8_GEMV(8); break;
    }
#undef F8_GEMV
}

template <typename T>
static kiln_status launch_gemv(cudaStream_t st, const uint8_t *xc, const float *xs, int n, int K, const uint8_t *w,
                               const float *scale, const void *bias, int N, void *y, int ldy, bool out_f32) {
    if (out_f32) gemv_n<T, float>(st, xc, xs, n, K, w, scale, bias, N, y, ldy);
    else gemv_n<T, T>(st, xc, xs, n, K, w, scale, bias, N, y, ldy);
    KILN_CUDA_LAUNCH_CHECK("f8_gemv_kernel");
    return KILN_OK;
}

extern "C" kiln_status llmc_gemv_fp8_launch(kiln_dtype dtype, cudaStream_t stream, const uint8_t *codes,
                                            const float *xs, int n, int K, const uint8_t *w, const float *scale,
                                            const void *bias, int N, void *y, int ldy, bool out_f32) {
    if (dtype != KILN_F16 && dtype != KILN_BF16)
        return kiln_error(KILN_ERR_INVALID_ARGUMENT, "fp8 gemv: bias and output %s (float16 or bfloat16)",
                          kiln_dtype_name(dtype));
    if (n < 1 || n > LLMC_GEMV_MAX || K < 1 || N < 1 || ldy < N ||
        (K % 16 == 0 && (!ku_aligned16(codes) || !ku_aligned16(w))))
        return kiln_error(KILN_ERR_INVALID_ARGUMENT, "fp8 gemv: n %d (1..%d), K %d, N %d, ldy %d, codes and w "
                          "16-byte aligned when K is a multiple of 16", n, LLMC_GEMV_MAX, K, N, ldy);
    return LC_DISPATCH(dtype, launch_gemv, stream, codes, xs, n, K, w, scale, bias, N, y, ldy, out_f32);
}

/* ---------------------------------------------------------------- cuBLASLt GEMM */

static void plan_destroy(f8_plan *p) {
    if (p->ld) cublasLtMatrixLayoutDestroy(p->ld);
    if (p->lb) cublasLtMatrixLayoutDestroy(p->lb);
    if (p->la) cublasLtMatrixLayoutDestroy(p->la);
    if (p->op) cublasLtMatmulDescDestroy(p->op);
    memset(p, 0, sizeof *p);
}

/* The plan of this shape and kind, made on first use (ok false when cuBLASLt has no algorithm for it):
 * direct, D of type dt with leading dimension ldd, A and B scaled per row and per column
 * (CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F) and, with bias, the bias epilogue in g's dtype; else D
 * fp32 [rows, np] with ldd rows. */
static f8_plan *plan_for(kiln_llm_cuda *g, int rows, int np, int K, bool direct, int ldd, cudaDataType_t dt, bool bias) {
    llmc_fp8 *f = g->f8;
    for (int i = 0; i < f->n_plans; i++) {
        const f8_plan *q = &f->plans[i];
        if (q->rows == rows && q->np == np && q->K == K && q->direct == direct && q->ldd == ldd && q->dt == dt &&
            q->bias == bias)
            return &f->plans[i];
    }
    f8_plan *p;
    if (f->n_plans < F8_PLANS) {
        p = &f->plans[f->n_plans++];
    } else {
        p = &f->plans[f->next_plan];
        f->next_plan = (f->next_plan + 1) % F8_PLANS;
        plan_destroy(p);
    }
    memset(p, 0, sizeof *p);
    p->rows = rows;
    p->np = np;
    p->K = K;
    p->ldd = ldd;
    p->direct = direct;
    p->dt = dt;
    p->bias = bias;
    const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
    bool ok = cublasLtMatmulDescCreate(&p->op, CUBLAS_COMPUTE_32F, CUDA_R_32F) == CUBLAS_STATUS_SUCCESS &&
              cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta) == CUBLAS_STATUS_SUCCESS &&
              cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb) == CUBLAS_STATUS_SUCCESS &&
              cublasLtMatrixLayoutCreate(&p->la, CUDA_R_8F_E4M3, (uint64_t)K, (uint64_t)rows, K) == CUBLAS_STATUS_SUCCESS &&
              cublasLtMatrixLayoutCreate(&p->lb, CUDA_R_8F_E4M3, (uint64_t)K, (uint64_t)np, K) == CUBLAS_STATUS_SUCCESS &&
              cublasLtMatrixLayoutCreate(&p->ld, dt, (uint64_t)rows, (uint64_t)np, ldd) == CUBLAS_STATUS_SUCCESS;
    if (ok && direct) { /* the pointers are set per call (gemm_direct); these stand in for the search */
        const int32_t mode = CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F;
        const cublasLtEpilogue_t epi = CUBLASLT_EPILOGUE_BIAS;
        const cudaDataType_t bt = g->dtype == KILN_BF16 ? CUDA_R_16BF : CUDA_R_16F;
        const void *any = f->xs;
        ok = cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &mode, sizeof mode) ==
                 CUBLAS_STATUS_SUCCESS &&
             cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, &mode, sizeof mode) ==
                 CUBLAS_STATUS_SUCCESS &&
             cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &any, sizeof any) ==
                 CUBLAS_STATUS_SUCCESS &&
             cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &any, sizeof any) ==
                 CUBLAS_STATUS_SUCCESS &&
             (!bias ||
              (cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi) ==
                   CUBLAS_STATUS_SUCCESS &&
               cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bt, sizeof bt) ==
                   CUBLAS_STATUS_SUCCESS &&
               cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &any, sizeof any) ==
                   CUBLAS_STATUS_SUCCESS));
    }
    cublasLtMatmulPreference_t pref = NULL;
    if (ok) ok = cublasLtMatmulPreferenceCreate(&pref) == CUBLAS_STATUS_SUCCESS;
    if (ok) {
        const size_t ws = g->kc.workspace_bytes;
        cublasLtMatmulHeuristicResult_t res;
        int found = 0;
        ok = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws) ==
                 CUBLAS_STATUS_SUCCESS &&
             cublasLtMatmulAlgoGetHeuristic(g->kc.lt, p->op, p->la, p->lb, p->ld, p->ld, pref, 1, &res, &found) ==
                 CUBLAS_STATUS_SUCCESS &&
             found > 0;
        if (ok) p->algo = res.algo;
    }
    if (pref) cublasLtMatmulPreferenceDestroy(pref);
    p->ok = ok;
    return p;
}

/* y[t, o] = ws[t, o] * (scale[o] * xs[t]) + bias[o] for t < n, o < rows (ws column-major [rows, *]). */
template <typename T, typename O>
__global__ void f8_epilogue_kernel(const float *__restrict__ ws, int rows, const float *__restrict__ scale,
                                   const float *__restrict__ xs, const T *__restrict__ bias, int n,
                                   O *__restrict__ y, int ldy) {
    const int64_t total = (int64_t)n * rows;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += (int64_t)gridDim.x * blockDim.x) {
        const int t = (int)(i / rows), o = (int)(i % rows);
        const float b = bias ? ku_f32(bias[o]) : 0.0f;
        y[(size_t)t * ldy + o] = ku_from_f32<O>(ws[i] * (scale[o] * xs[t]) + b);
    }
}

template <typename T>
static kiln_status launch_epilogue(kiln_llm_cuda *g, int rows, const float *scale, const void *bias, int n, void *y,
                                   int ldy, bool out_f32) {
    const int64_t total = (int64_t)n * rows;
    int64_t blocks = (total + F8_THREADS - 1) / F8_THREADS;
    const int64_t cap = (int64_t)(g->kc.sm_count > 0 ? g->kc.sm_count : 1) * 16;
    if (blocks > cap) blocks = cap;
    if (out_f32)
        f8_epilogue_kernel<T, float><<<(unsigned)blocks, F8_THREADS, 0, g->kc.stream>>>(
            g->f8->ws, rows, scale, g->f8->xs, (const T *)bias, n, (float *)y, ldy);
    else
        f8_epilogue_kernel<T, T><<<(unsigned)blocks, F8_THREADS, 0, g->kc.stream>>>(g->f8->ws, rows, scale, g->f8->xs,
                                                                                   (const T *)bias, n, (T *)y, ldy);
    KILN_CUDA_LAUNCH_CHECK("f8_epilogue_kernel");
    return KILN_OK;
}

/* The GEMM over tiles of weight rows; false (nothing computed) when cuBLASLt has no plan for a tile. */
static kiln_status gemm_tiles(kiln_llm_cuda *g, int n, int K, const uint8_t *w, const float *scale, const void *bias,
                              int N, void *y, int ldy, bool out_f32, bool *done) {
    const int np = (n + 15) / 16 * 16;
    int tile = (int)(F8_WS_BYTES / 4 / (size_t)np) / 16 * 16;
    if (tile > N) tile = N;
    *done = false;
    if (tile < 16 || np > g->f8->rows_cap) return KILN_OK;
    for (int r0 = 0; r0 < N; r0 += tile) { /* every plan first, so that a refusal leaves nothing half done */
        if (!plan_for(g, N - r0 < tile ? N - r0 : tile, np, K, false, N - r0 < tile ? N - r0 : tile, CUDA_R_32F, false)->ok)
            return KILN_OK;
    }
    const float alpha = 1.0f, beta = 0.0f;
    const size_t ys = out_f32 ? 4 : 2;
    for (int r0 = 0; r0 < N; r0 += tile) {
        const int rows = N - r0 < tile ? N - r0 : tile;
        const f8_plan *p = plan_for(g, rows, np, K, false, rows, CUDA_R_32F, false);
        cublasStatus_t e = cublasLtMatmul(g->kc.lt, p->op, &alpha, w + (size_t)r0 * K, p->la, g->f8->codes, p->lb, &beta,
                                          g->f8->ws, p->ld, g->f8->ws, p->ld, &p->algo, g->kc.workspace,
                                          g->kc.workspace_bytes, g->kc.stream);
        if (e != CUBLAS_STATUS_SUCCESS)
            return kiln_error(KILN_ERR_BACKEND, "llm cuda: the FP8 GEMM (%d x %d x %d) failed: %s", rows, np, K,
                              cublasLtGetStatusString(e));
        KILN_TRY(LC_DISPATCH(g->dtype, launch_epilogue, g, rows, scale + r0,
                             bias ? (const char *)bias + (size_t)r0 * 2 : NULL, n, (char *)y + (size_t)r0 * ys, ldy,
                             out_f32));
    }
    *done = true;
    return KILN_OK;
}

/* The GEMM straight into y (plan_for's direct kind) when cuBLASLt has an algorithm for it; *done false
 * (nothing computed) when it has none or refuses the call. */
static kiln_status gemm_direct(kiln_llm_cuda *g, int n, int K, const uint8_t *w, const float *scale, const void *bias,
                               int N, void *y, int ldy, bool out_f32, bool *done) {
    const cudaDataType_t dt = out_f32 ? CUDA_R_32F : g->dtype == KILN_BF16 ? CUDA_R_16BF : CUDA_R_16F;
    f8_plan *p = plan_for(g, N, n, K, true, ldy, dt, bias != NULL);
    *done = false;
    if (!p->ok) return KILN_OK;
    const void *xs = g->f8->xs;
    if (cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &scale, sizeof scale) !=
            CUBLAS_STATUS_SUCCESS ||
        cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &xs, sizeof xs) !=
            CUBLAS_STATUS_SUCCESS ||
        (bias && cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias) !=
                     CUBLAS_STATUS_SUCCESS))
        return kiln_error(KILN_ERR_BACKEND, "llm cuda: the FP8 GEMM (%d x %d x %d) took no scale pointers", N, n, K);
    const float alpha = 1.0f, beta = 0.0f;
    cublasStatus_t e = cublasLtMatmul(g->kc.lt, p->op, &alpha, w, p->la, g->f8->codes, p->lb, &beta, y, p->ld, y, p->ld,
                                      &p->algo, g->kc.workspace, g->kc.workspace_bytes, g->kc.stream);
    if (e == CUBLAS_STATUS_NOT_SUPPORTED) { /* refused before anything was enqueued: the tiles from now on */
        p->ok = false;
        return KILN_OK;
    }
    if (e != CUBLAS_STATUS_SUCCESS)
        return kiln_error(KILN_ERR_BACKEND, "llm cuda: the FP8 GEMM (%d x %d x %d) failed: %s", N, n, K,
                          cublasLtGetStatusString(e));
    *done = true;
    return KILN_OK;
}

/* ---------------------------------------------------------------- the product */

extern "C" kiln_status llmc_linear_q(kiln_llm_cuda *g, int slot, const void *x, int ldx, int n, int K, const void *w,
                                     const float *scale, const void *bias, int N, void *y, int ldy, bool out_f32) {
    if (!scale || !g->f8) return llmc_linear_w(g, x, ldx, n, K, w, scale, bias, N, y, ldy, out_f32);
    llmc_fp8 *f = g->f8;
    if (n > f->rows_cap || K > f->k_max)
        return kiln_error(KILN_ERR_INVALID_ARGUMENT, "llm cuda: an FP8 product of %d rows x %d inputs (the workspace "
                          "holds %d x %d)", n, K, f->rows_cap, f->k_max);
    const float act = slot >= 0 && slot < f->n_act ? f->act[slot] : 0.0f;
    KILN_TRY(llmc_fp8_quantize_launch(g->dtype, g->kc.stream, x, ldx, n, K, act, f->codes, f->xs));
    const uint8_t *q = (const uint8_t *)w;
    if (n > g->opt.gemv_max_tokens && K % 16 == 0) {
        bool done;
        KILN_TRY(gemm_direct(g, n, K, q, scale, bias, N, y, ldy, out_f32, &done));
        if (!done) KILN_TRY(gemm_tiles(g, n, K, q, scale, bias, N, y, ldy, out_f32, &done));
        if (done) return KILN_OK;
    }
    const size_t ys = out_f32 ? 4 : 2;
    for (int r0 = 0; r0 < n; r0 += LLMC_GEMV_MAX) { /* decode rows, or what cuBLASLt cannot take */
        const int rows = n - r0 < LLMC_GEMV_MAX ? n - r0 : LLMC_GEMV_MAX;
        KILN_TRY(llmc_gemv_fp8_launch(g->dtype, g->kc.stream, f->codes + (size_t)r0 * K, f->xs + r0, rows, K, q, scale,
                                      bias, N, (char *)y + (size_t)r0 * ldy * ys, ldy, out_f32));
    }
    return KILN_OK;
}

/* ---------------------------------------------------------------- create / free */

extern "C" kiln_status llmc_fp8_create(kiln_llm_cuda *g, const kiln_llm_model *m) {
    llmc_fp8 *f = (llmc_fp8 *)calloc(1, sizeof *f);
    if (!f) return kiln_error(KILN_ERR_OUT_OF_MEMORY, "out of memory");
    g->f8 = f;
    const kiln_llm_config *c = &g->cfg;
    int k = c->d_model;
    if (c->n_head * c->head_dim > k) k = c->n_head * c->head_dim;
    if (c->d_ff > k) k = c->d_ff;
    f->k_max = k;
    f->rows_cap = (g->opt.max_tokens + 15) / 16 * 16;
    f->n_act = (int)KILN_LLM_ACT_SLOTS(c);
    if (!(f->act = (float *)calloc((size_t)f->n_act, sizeof *f->act)))
        return kiln_error(KILN_ERR_OUT_OF_MEMORY, "out of memory");
    for (int l = 0; m && m->q8 && l < c->n_layer; l++) {
        f->act[KILN_LLM_ACT_QKV(l)] = m->q8[l].qkv.act_scale;
        f->act[KILN_LLM_ACT_O(l)] = m->q8[l].o.act_scale;
        f->act[KILN_LLM_ACT_UP(l)] = m->q8[l].up.act_scale;
        f->act[KILN_LLM_ACT_DOWN(l)] = m->q8[l].down.act_scale;
    }
    if (m) f->act[KILN_LLM_ACT_LM_HEAD(c)] = m->q8_lm_head.act_scale;
    KILN_CUDA_TRY(cudaMalloc(&f->codes, (size_t)f->rows_cap * (size_t)f->k_max));
    KILN_CUDA_TRY(cudaMemset(f->codes, 0, (size_t)f->rows_cap * (size_t)f->k_max)); /* the GEMM's padding rows */
    KILN_CUDA_TRY(cudaMalloc(&f->xs, (size_t)f->rows_cap * sizeof(float)));
    KILN_CUDA_TRY(cudaMalloc(&f->ws, F8_WS_BYTES));
    return KILN_OK;
}

extern "C" void llmc_fp8_free(kiln_llm_cuda *g) {
    llmc_fp8 *f = g->f8;
    if (!f) return;
    for (int i = 0; i < f->n_plans; i++) plan_destroy(&f->plans[i]);
    if (f->codes) cudaFree(f->codes);
    if (f->xs) cudaFree(f->xs);
    if (f->ws) cudaFree(f->ws);
    free(f->act);
    free(f);
    g->f8 = NULL;
}

/* ---------------------------------------------------------------- embedding */

/* x[t] = (e4m3(q[tokens[t]]) * scale[tokens[t]] + pos[positions[t]]) * emb_scale. */
template <typename T>
__global__ void f8_embed_kernel(float *__restrict__ x, const uint8_t *__restrict__ tok, const float *__restrict__ tok_s,
                                const T *__restrict__ pos, const int32_t *__restrict__ tokens,
                                const int32_t *__restrict__ positions, int d, float emb_scale) {
    const int t = blockIdx.x;
    const int64_t id = tokens[t];
    const uint8_t *e = tok + id * d;
    const float s = tok_s[id];
    const T *p = pos ? pos + (size_t)positions[t] * d : NULL;
    float *xr = x + (size_t)t * d;
    for (int i = threadIdx.x; i < d; i += blockDim.x) xr[i] = (f8_value(e[i]) * s + (p ? ku_f32(p[i]) : 0.0f)) * emb_scale;
}

template <typename T> static kiln_status launch_embed(kiln_llm_cuda *g, const llmc_step *s) {
    const float scale = g->cfg.scale_emb ? sqrtf((float)g->cfg.d_model) : 1.0f;
    f8_embed_kernel<T><<<s->n_tokens, F8_THREADS, 0, g->kc.stream>>>(g->x, (const uint8_t *)g->tok_emb, g->tok_emb_s,
                                                                    (const T *)g->pos_emb, s->tokens, s->positions,
                                                                    g->cfg.d_model, scale);
    KILN_CUDA_LAUNCH_CHECK("f8_embed_kernel");
    return KILN_OK;
}

extern "C" kiln_status llmc_embed_q(kiln_llm_cuda *g, const llmc_step *s) {
    if (!g->f8 || !g->tok_emb_s) return llmc_embed_any(g, s);
    return LC_DISPATCH(g->dtype, launch_embed, g, s);
}

/* ---------------------------------------------------------------- random FP8 weights (benchmarks) */

/* q[i] = the E4M3 code of 448 u, u uniform in [-1, 1) from splitmix64 of (seed, i); scale[r] = amp / 448. */
__global__ void f8_fill_kernel(uint8_t *__restrict__ q, float *__restrict__ scale, int64_t rows, int64_t cols,
                               uint64_t seed, float amp) {
    const int64_t stride = (int64_t)gridDim.x * blockDim.x, first = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    for (int64_t i = first; i < rows * cols; i += stride) {
        uint64_t z = seed + 0x9E3779B97F4A7C15ULL * (uint64_t)(i + 1);
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
        z ^= z >> 31;
        const float u = (float)(z >> 40) * (2.0f / 16777216.0f) - 1.0f;
        q[i] = (uint8_t)__nv_cvt_float_to_fp8(u * F8_MAX, __NV_SATFINITE, __NV_E4M3);
    }
    for (int64_t r = first; r < rows; r += stride) scale[r] = amp / F8_MAX;
}

extern "C" kiln_status llmc_fill_random_fp8(kiln_llm_cuda *g, uint8_t *q, float *scale, size_t rows, size_t cols,
                                            uint64_t seed, float amp) {
    const unsigned blocks = (unsigned)((g->kc.sm_count > 0 ? g->kc.sm_count : 1) * 8);
    f8_fill_kernel<<<blocks, F8_THREADS, 0, g->kc.stream>>>(q, scale, (int64_t)rows, (int64_t)cols, seed, amp);
    KILN_CUDA_LAUNCH_CHECK("f8_fill_kernel");
    return KILN_OK;
}
