/* llm_cuda_w8a8.cu — the W8A8 products of the LLM forward on CUDA (llm_cuda_w8a8.h). The input rows are
 * quantized by a kernel of their own (x / act_scale, round to nearest even, saturate: the CPU's
 * kiln_llm_quantize_act on the 16-bit activations) into g->deq; the norm kernel before is not changed.
 * Decode rows (up to gemv_max_tokens) go through a GEMV of one warp per output row: each lane loads 16
 * int8 weights (one 16-byte load) and, for each of up to 8 token rows, the 16 int8 activations beside
 * them, four dp4a a row into an int32 sum; sums reduced across the warp, then (float)sum * (act_scale *
 * scale[o]) + bias, the CPU's expression. More rows go through cuBLASLt's integer tensor-core GEMM
 * (IMMA: int8 A and B, CUBLAS_COMPUTE_32I, int32 D), formed column-major as D[N, R] = W[K, N]^T X[K, R]
 * (the "TN" layout IMMA needs; K and N multiples of 4), D in g->deq beside the quantized rows, in chunks
 * of token rows that fit it, then a dequantizing epilogue kernel writes y (a shape cuBLASLt has no IMMA
 * algorithm for, or N not a multiple of 4, goes through the GEMV, 8 rows at a time). The cuBLASLt
 * descriptors and the heuristic's algorithm are kept per (rows, K, N) in g->imma. The sums are exact on both paths, so
 * they equal the CPU's for the same int8 inputs. */
#include "llm/cuda/llm_cuda_util.cuh"
#include "llm/cuda/llm_cuda_w8a8.h"

#include <stdlib.h>
#include <string.h>

#define WG_WARPS 4 /* output rows (one warp each) of a GEMV block */
#define WQ_THREADS 256

/* ---------------------------------------------------------------- activation quantizer */

static __device__ __forceinline__ int8_t quantize1(float x, float act_scale) {
    const float v = rintf(x / act_scale); /* IEEE division and round to nearest even, as the CPU */
    return (int8_t)(v >= 127.0f ? 127 : v <= -127.0f ? -127 : v == v ? (int)v : 0);
}

template <typename T>
__global__ void quantize_act_kernel(const T *__restrict__ x, int ldx, int n, int K, float act_scale,
                                    int8_t *__restrict__ xq) {
    const int64_t total = (int64_t)n * K;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += (int64_t)gridDim.x * blockDim.x) {
        const int64_t r = i / K, k = i % K;
        xq[i] = quantize1(ku_f32(x[r * ldx + k]), act_scale);
    }
}

template <typename T>
static kiln_status launch_quantize(cudaStream_t st, const void *x, int ldx, int n, int K, float act_scale, int8_t *xq) {
    int64_t blocks = ((int64_t)n * K + WQ_THREADS - 1) / WQ_THREADS;
    if (blocks > 65535) blocks = 65535;
    quantize_act_kernel<T><<<(unsigned)(blocks ? blocks : 1), WQ_THREADS, 0, st>>>((const T *)x, ldx, n, K, act_scale, xq);
    KILN_CUDA_LAUNCH_CHECK("quantize_act_kernel");
    return KILN_OK;
}

extern "C" kiln_status llmc_quantize_act_launch(kiln_dtype dtype, cudaStream_t stream, const void *x, int ldx, int n,
                                                int K, float act_scale, int8_t *xq) {
    if ((dtype != KILN_F16 && dtype != KILN_BF16) || n < 1 || K < 1 || ldx < K || !(act_scale > 0))
        return kiln_error(KILN_ERR_INVALID_ARGUMENT, "w8a8 quantize: %s rows (float16 or bfloat16), n %d, K %d, ldx %d, "
                          "scale %g (positive)", kiln_dtype_name(dtype), n, K, ldx, (double)act_scale);
    return LC_DISPATCH(dtype, launch_quantize, stream, x, ldx, n, K, act_scale, xq);
}

/* ---------------------------------------------------------------- dp4a GEMV */

/* y[r, o] = (sum_k xq[r, k] w[o, k]) * (act_scale * scale[o]) + bias[o], r < NR; K % 16 == 0. */
template <typename T, typename O, int NR>
__global__ void __launch_bounds__(WG_WARPS * 32)
    gemv_w8a8_kernel(const int8_t *__restrict__ xq, int K, const int8_t *__restrict__ w, const float *__restrict__ scale,
                     float act_scale, const T *__restrict__ bias, int N, O *__restrict__ y, int ldy) {
    const int lane = threadIdx.x & 31, o = blockIdx.x * WG_WARPS + (threadIdx.x >> 5);
    if (o >= N) return;
    const int8_t *wr = w + (size_t)o * K;
    int acc[NR];
#pragma unroll
    for (int r = 0; r < NR; r++) acc[r] = 0;
#pragma unroll 4
    for (int k = lane * 16; k < K; k += 32 * 16) {
        const int4 wv = __ldg(reinterpret_cast<const int4 *>(wr + k));
#pragma unroll
        for (int r = 0; r < NR; r++) {
            const int4 xv = __ldg(reinterpret_cast<const int4 *>(xq + (size_t)r * K + k));
            int s = acc[r];
            s = __dp4a(wv.x, xv.x, s);
            s = __dp4a(wv.y, xv.y, s);
            s = __dp4a(wv.z, xv.z, s);
            s = __dp4a(wv.w, xv.w, s);
            acc[r] = s;
        }
    }
#pragma unroll
    for (int r = 0; r < NR; r++) {
#pragma unroll
        for (int m = 16; m; m >>= 1) acc[r] += __shfl_xor_sync(0xffffffffu, acc[r], m);
    }
    if (lane) return;
    const float s = act_scale * scale[o];
#pragma unroll
    for (int r = 0; r < NR; r++) {
        float v = (float)acc[r] * s;
        if (bias) v += ku_f32(bias[o]);
        y[(size_t)r * ldy + o] = ku_from_f32<O>(v);
    }
}

template <typename T, typename O, int NR>
static void gemv_rows(cudaStream_t st, const int8_t *xq, int K, const int8_t *w, const float *scale, float act_scale,
                      const void *bias, int N, void *y, int ldy) {
    gemv_w8a8_kernel<T, O, NR><<<(N + WG_WARPS - 1) / WG_WARPS, WG_WARPS * 32, 0, st>>>(
        xq, K, w, scale, act_scale, (const T *)bias, N, (O *)y, ldy);
}

template <typename T, typename O>
static void gemv_n(cudaStream_t st, const int8_t *xq, int n, int K, const int8_t *w, const float *scale,
                   float act_scale, const void *bias, int N, void *y, int ldy) {
    switch (n) {
    case 1: gemv_rows<T, O, 1>(st, xq, K, w, scale, act_scale, bias, N, y, ldy); break;
    case 2: gemv_rows<T, O, 2>(st, xq, K, w, scale, act_scale, bias, N, y, ldy); break;
    case 3: gemv_rows<T, O, 3>(st, xq, K, w, scale, act_scale, bias, N, y, ldy); break;
    case 4: gemv_rows<T, O, 4>(st, xq, K, w, scale, act_scale, bias, N, y, ldy); break;
    case 5: gemv_rows<T, O, 5>(st, xq, K, w, scale, act_scale, bias, N, y, ldy); break;
    case 6: gemv_rows<T, O, 6>(st, xq, K, w, scale, act_scale, bias, N, y, ldy); break;
    case 7: gemv_rows<T, O, 7>(st, xq, K, w, scale, act_scale, bias, N, y, ldy); break;
    default: gemv_rows<T, O, 8>(st, xq, K, w, scale, act_scale, bias, N, y, ldy); break;
    }
}

template <typename T>
static kiln_status launch_gemv(cudaStream_t st, const int8_t *xq, int n, int K, const int8_t *w, const float *scale,
                               float act_scale, const void *bias, int N, void *y, int ldy, bool out_f32) {
    if (out_f32) gemv_n<T, float>(st, xq, n, K, w, scale, act_scale, bias, N, y, ldy);
    else gemv_n<T, T>(st, xq, n, K, w, scale, act_scale, bias, N, y, ldy);
    KILN_CUDA_LAUNCH_CHECK("gemv_w8a8_kernel");
    return KILN_OK;
}

static bool aligned(const void *p, uintptr_t a) { return ((uintptr_t)p & (a - 1)) == 0; }

extern "C" kiln_status llmc_gemv_w8a8_launch(kiln_dtype dtype, cudaStream_t stream, const int8_t *xq, int n, int K,
                                             const int8_t *w, const float *scale, float act_scale, const void *bias,
                                             int N, void *y, int ldy, bool out_f32) {
    if (dtype != KILN_F16 && dtype != KILN_BF16)
        return kiln_error(KILN_ERR_INVALID_ARGUMENT, "w8a8 gemv: %s output (float16 or bfloat16)", kiln_dtype_name(dtype));
    if (n < 1 || n > LLMC_GEMV_MAX || K < 16 || K % 16 || N < 1 || ldy < N || !aligned(xq, 16) || !aligned(w, 16) ||
        !(act_scale > 0))
        return kiln_error(KILN_ERR_INVALID_ARGUMENT, "w8a8 gemv: n %d (1..%d), K %d (a multiple of 16), N %d, ldy %d, "
                          "xq and w 16-byte aligned, act_scale %g (positive)", n, LLMC_GEMV_MAX, K, N, ldy,
                          (double)act_scale);
    return LC_DISPATCH(dtype, launch_gemv, stream, xq, n, K, w, scale, act_scale, bias, N, y, ldy, out_f32);
}

/* ---------------------------------------------------------------- IMMA GEMM */

/* y[r, o] = D[r, o] * (act_scale * scale[o]) + bias[o]: the dequantizing epilogue. */
template <typename T, typename O>
__global__ void dequant_i32_kernel(const int32_t *__restrict__ D, int n, int N, const float *__restrict__ scale,
                                   float act_scale, const T *__restrict__ bias, O *__restrict__ y, int ldy) {
    const int64_t total = (int64_t)n * N;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += (int64_t)gridDim.x * blockDim.x) {
        const int64_t r = i / N, o = i % N;
        float v = (float)D[i] * (act_scale * scale[o]);
        if (bias) v += ku_f32(bias[o]);
        y[r * ldy + o] = ku_from_f32<O>(v);
    }
}

template <typename T>
static kiln_status launch_dequant_i32(cudaStream_t st, const int32_t *D, int n, int N, const float *scale,
                                      float act_scale, const void *bias, void *y, int ldy, bool out_f32) {
    int64_t blocks = ((int64_t)n * N + WQ_THREADS - 1) / WQ_THREADS;
    if (blocks > 65535) blocks = 65535;
    if (out_f32)
        dequant_i32_kernel<T, float><<<(unsigned)blocks, WQ_THREADS, 0, st>>>(D, n, N, scale, act_scale, (const T *)bias,
                                                                             (float *)y, ldy);
    else
        dequant_i32_kernel<T, T><<<(unsigned)blocks, WQ_THREADS, 0, st>>>(D, n, N, scale, act_scale, (const T *)bias,
                                                                         (T *)y, ldy);
    KILN_CUDA_LAUNCH_CHECK("dequant_i32_kernel");
    return KILN_OK;
}

/* One IMMA product's cuBLASLt descriptors and algorithm, for R token rows of K inputs and N outputs. */
struct llmc_imma_plan {
    int R, K, N;
    cublasLtMatmulDesc_t op;
    cublasLtMatrixLayout_t la, lb, ld;
    cublasLtMatmulAlgo_t algo;
    size_t ws_need;
};

static void plan_clear(llmc_imma_plan *p) {
    if (p->ld) cublasLtMatrixLayoutDestroy(p->ld);
    if (p->lb) cublasLtMatrixLayoutDestroy(p->lb);
    if (p->la) cublasLtMatrixLayoutDestroy(p->la);
    if (p->op) cublasLtMatmulDescDestroy(p->op);
    memset(p, 0, sizeof *p);
}

#define IMMA_TRY(call)                                                                             \
    do {                                                                                           \
        cublasStatus_t e_ = (call);                                                                \
        if (e_ != CUBLAS_STATUS_SUCCESS) {                                                         \
            plan_clear(p);                                                                         \
            return kiln_error(KILN_ERR_BACKEND, "w8a8 IMMA: %s failed: %s", #call, cublasLtGetStatusString(e_)); \
        }                                                                                          \
    } while (0)

/* Makes p for (R, K, N): int8 W [K, N] (op T) times int8 X [K, R] into int32 D [N, R], all column-major
 * and packed, with the heuristic's best algorithm within ws_bytes of workspace. */
static kiln_status plan_make(cublasLtHandle_t lt, int R, int K, int N, size_t ws_bytes, llmc_imma_plan *p) {
    memset(p, 0, sizeof *p);
    IMMA_TRY(cublasLtMatmulDescCreate(&p->op, CUBLAS_COMPUTE_32I, CUDA_R_32I));
    const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
    IMMA_TRY(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
    IMMA_TRY(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
    IMMA_TRY(cublasLtMatrixLayoutCreate(&p->la, CUDA_R_8I, (uint64_t)K, (uint64_t)N, K));
    IMMA_TRY(cublasLtMatrixLayoutCreate(&p->lb, CUDA_R_8I, (uint64_t)K, (uint64_t)R, K));
    IMMA_TRY(cublasLtMatrixLayoutCreate(&p->ld, CUDA_R_32I, (uint64_t)N, (uint64_t)R, N));
    cublasLtMatmulPreference_t pref;
    IMMA_TRY(cublasLtMatmulPreferenceCreate(&pref));
    cublasStatus_t e = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws_bytes,
                                                            sizeof ws_bytes);
    cublasLtMatmulHeuristicResult_t res;
    int found = 0;
    if (e == CUBLAS_STATUS_SUCCESS)
        e = cublasLtMatmulAlgoGetHeuristic(lt, p->op, p->la, p->lb, p->ld, p->ld, pref, 1, &res, &found);
    cublasLtMatmulPreferenceDestroy(pref);
    IMMA_TRY(e);
    if (found < 1) {
        plan_clear(p);
        return kiln_error(KILN_ERR_UNSUPPORTED, "w8a8: cuBLASLt offers no int8 (IMMA) algorithm for %d x %d x %d within "
                          "%zu bytes of workspace", N, R, K, ws_bytes);
    }
    p->algo = res.algo;
    p->ws_need = res.workspaceSize;
    p->R = R;
    p->K = K;
    p->N = N;
    return KILN_OK;
}

/* D [R, N] row-major = xq [R, K] w^T through plan p, then the epilogue into y. */
static kiln_status imma_run(kiln_dtype dtype, cublasLtHandle_t lt, cudaStream_t stream, void *ws, size_t ws_bytes,
                            const llmc_imma_plan *p, const int8_t *xq, const int8_t *w, const float *scale,
                            float act_scale, const void *bias, int32_t *D, void *y, int ldy, bool out_f32) {
    const int32_t one = 1, zero = 0;
    const cublasStatus_t e = cublasLtMatmul(lt, p->op, &one, w, p->la, xq, p->lb, &zero, D, p->ld, D, p->ld, &p->algo,
                                            ws, ws_bytes, stream);
    if (e != CUBLAS_STATUS_SUCCESS)
        return kiln_error(KILN_ERR_BACKEND, "w8a8 IMMA: cublasLtMatmul (%d x %d x %d) failed: %s", p->N, p->R, p->K,
                          cublasLtGetStatusString(e));
    return LC_DISPATCH(dtype, launch_dequant_i32, stream, D, p->R, p->N, scale, act_scale, bias, y, ldy, out_f32);
}

static kiln_status imma_shape_ok(int n, int K, int N, const void *xq, const void *w, const void *D) {
    if (n < 1 || K < 4 || K % 4 || N < 4 || N % 4 || !aligned(xq, 4) || !aligned(w, 4) || !aligned(D, 16))
        return kiln_error(KILN_ERR_INVALID_ARGUMENT, "w8a8 IMMA: n %d, K %d and N %d (multiples of 4), xq and w 4-byte and "
                          "D 16-byte aligned", n, K, N);
    return KILN_OK;
}

extern "C" kiln_status llmc_imma_w8a8_launch(kiln_dtype dtype, cublasLtHandle_t lt, cudaStream_t stream, void *ws,
                                             size_t ws_bytes, const int8_t *xq, int n, int K, const int8_t *w,
                                             const float *scale, float act_scale, const void *bias, int N, int32_t *D,
                                             void *y, int ldy, bool out_f32) {
    if (dtype != KILN_F16 && dtype != KILN_BF16)
        return kiln_error(KILN_ERR_INVALID_ARGUMENT, "w8a8 IMMA: %s output (float16 or bfloat16)", kiln_dtype_name(dtype));
    KILN_TRY(imma_shape_ok(n, K, N, xq, w, D));
    llmc_imma_plan p;
    KILN_TRY(plan_make(lt, n, K, N, ws_bytes, &p));
    const kiln_status s = imma_run(dtype, lt, stream, ws, ws_bytes, &p, xq, w, scale, act_scale, bias, D, y, ldy, out_f32);
    if (s == KILN_OK) KILN_CUDA_TRY(cudaStreamSynchronize(stream)); /* the plan's descriptors go now */
    plan_clear(&p);
    return s;
}

/* ---------------------------------------------------------------- the product */

extern "C" void llmc_imma_plans_free(kiln_llm_cuda *g) {
    for (int i = 0; g->imma && i < LLMC_IMMA_PLANS; i++) plan_clear(&g->imma[i]);
    free(g->imma);
    g->imma = NULL;
}

/* g's plan for (R, K, N), made now in the next slot (round-robin) when there is none. */
static kiln_status plan_get(kiln_llm_cuda *g, int R, int K, int N, llmc_imma_plan **out) {
    if (!g->imma && !(g->imma = (llmc_imma_plan *)calloc(LLMC_IMMA_PLANS, sizeof *g->imma)))
        return kiln_error(KILN_ERR_OUT_OF_MEMORY, "out of memory");
    for (int i = 0; i < LLMC_IMMA_PLANS; i++)
        if (g->imma[i].op && g->imma[i].R == R && g->imma[i].K == K && g->imma[i].N == N) {
            *out = &g->imma[i];
            return KILN_OK;
        }
    llmc_imma_plan *p = &g->imma[g->next_imma];
    g->next_imma = (g->next_imma + 1) % LLMC_IMMA_PLANS;
    plan_clear(p);
    KILN_TRY(plan_make(g->kc.lt, R, K, N, g->kc.workspace_bytes, p));
    *out = p;
    return KILN_OK;
}

extern "C" kiln_status llmc_linear_wa(kiln_llm_cuda *g, const void *x, int ldx, int n, int K, const void *w,
                                      const float *scale, float act_scale, const void *bias, int N, void *y, int ldy,
                                      bool out_f32) {
    if (!(act_scale > 0)) return llmc_linear_w(g, x, ldx, n, K, w, scale, bias, N, y, ldy, out_f32);
    if (!scale || !g->deq || K % 16)
        return kiln_error(KILN_ERR_UNSUPPORTED, "llm cuda: a W8A8 matrix needs int8 weights and K a multiple of 16 "
                          "(K %d)", K);
    const int8_t *q = (const int8_t *)w;
    int8_t *xq = (int8_t *)g->deq;
    if (n <= g->opt.gemv_max_tokens) {
        KILN_TRY(llmc_quantize_act_launch(g->dtype, g->kc.stream, x, ldx, n, K, act_scale, xq));
        return llmc_gemv_w8a8_launch(g->dtype, g->kc.stream, xq, n, K, q, scale, act_scale, bias, N, y, ldy, out_f32);
    }
    /* chunks of token rows whose int8 rows and int32 sums fit the workspace */
    const size_t per_row = (size_t)K + 4 * (size_t)N + 2 * LLMC_ALIGN / 8;
    int64_t rows = (int64_t)(LLMC_DEQUANT_BYTES / per_row) / 8 * 8;
    if (rows < 8) return kiln_error(KILN_ERR_UNSUPPORTED, "llm cuda: W8A8 matrix [%d, %d] too large for the workspace", N, K);
    const size_t ys = out_f32 ? 4 : 2;
    for (int r0 = 0; r0 < n; r0 += (int)rows) {
        const int R = n - r0 < rows ? n - r0 : (int)rows;
        char *yr = (char *)y + (size_t)r0 * ldy * ys;
        int32_t *D = (int32_t *)(void *)((char *)g->deq + ((size_t)R * K + LLMC_ALIGN - 1) / LLMC_ALIGN * LLMC_ALIGN);
        KILN_TRY(llmc_quantize_act_launch(g->dtype, g->kc.stream, (const char *)x + (size_t)r0 * ldx * 2, ldx, R, K,
                                          act_scale, xq));
        llmc_imma_plan *p = NULL;
        const kiln_status st = N % 4 ? KILN_ERR_UNSUPPORTED : plan_get(g, R, K, N, &p);
        if (st == KILN_OK) {
            KILN_TRY(imma_run(g->dtype, g->kc.lt, g->kc.stream, g->kc.workspace, g->kc.workspace_bytes, p, xq, q, scale,
                              act_scale, bias, D, yr, ldy, out_f32));
            continue;
        }
        if (st != KILN_ERR_UNSUPPORTED) return st;
        kiln_error_clear(); /* no IMMA for this shape: the GEMV, LLMC_GEMV_MAX rows at a time */
        for (int t = 0; t < R; t += LLMC_GEMV_MAX) {
            const int rows8 = R - t < LLMC_GEMV_MAX ? R - t : LLMC_GEMV_MAX;
            KILN_TRY(llmc_gemv_w8a8_launch(g->dtype, g->kc.stream, xq + (size_t)t * K, rows8, K, q, scale, act_scale, bias,
                                           N, yr + (size_t)t * ldy * ys, ldy, out_f32));
        }
    }
    return KILN_OK;
}
