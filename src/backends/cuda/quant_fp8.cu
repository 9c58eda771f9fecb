/* quant_fp8.cu — kiln.F8MatMul (ir/quant_ops.h) on the GPU: A rounded to E4M3 (A / x_scale, round to
 * nearest even, saturated to +-448: the CPU reference's kiln_f32_to_e4m3) into the workspace, then
 * cuBLASLt's FP8 GEMM (CUDA_R_8F_E4M3 A and B, FP32 compute, the per-tensor scales through
 * CUBLASLT_MATMUL_DESC_A_SCALE_POINTER / B_SCALE_POINTER, the bias as below, D in the engine's
 * float type) on GPUs with FP8 tensor cores (compute capability 8.9+).
 *
 * A layer with an input_activation (a Gelu folded in by fuse_qdq_output) applies it to A in the
 * rounding kernel (and, on the float16 path, in a kernel before the GEMM); a residual input R (a
 * skip connection folded in) is the GEMM's C with beta 1 when D is Y itself, else added by a kernel.
 *
 * FP8's layout contract (cuBLASLt on Ada / Hopper): only "TN", so the product is formed column-major
 * as D[Np, Rp] = Wt[Kp, Np]^T X[Kp, Rp]: Wt the weights' codes as rows [n, k] prepared once per
 * context (K padded with zero codes to Kp, a multiple of 16; N to Np likewise), X the rounded
 * activations as rows [r, k] padded alike (and with zero rows to Rp, a multiple of 16), D written into
 * Y itself when N = Np and R = Rp, else into the workspace and copied.
 * The bias: cuBLASLt's BIAS epilogue in D's type for float16 / bfloat16 D (cuBLASLt's FP8 table; for
 * float32 D it takes only a bfloat16 bias, which would round it, so there a kernel adds the float32
 * bias after the GEMM, as it does when cuBLASLt refuses the epilogue).
 * The GEMM accumulates in fast mode (CUBLASLT_MATMUL_DESC_FAST_ACCUM) and runs the fastest of
 * cuBLASLt's heuristic candidates, timed once per node, shape and context (lt_pick.cuh), with D's real
 * alignment told to the heuristic.
 * A call cuBLASLt refuses altogether (no FP8 tensor cores, an unsupported shape or library) runs a
 * tiled CUDA-core kernel on the same rounded operands instead (one "fp8:" warning per node naming the
 * reason; far slower than the tensor cores, so the build's tuning then keeps float16); a call that
 * fails during a graph capture fails that run instead (it is repeated eagerly). The
 * products of two E4M3 values are exact in float32 on either path; only the summation order differs
 * from the CPU's.
 *
 * FP8 against FP16 (the build's tuning, cuda_tuning*.c, in float16 engines): like an integer layer, a
 * F8MatMul lists two candidates of kind KILN_TACTIC_PATH — algo 0 the FP8 GEMM, algo 1 a float16 one
 * (A as it is, the weights decoded and scaled to float16 [K, N] once, cuBLASLt's float16 GEMM through
 * matmul.cuh, then the bias) — both always timed, and runs the one its recorded tactic names. */
#include "backends/cuda/activation.cuh"
#include "backends/cuda/lt_pick.cuh"
#include "backends/cuda/matmul.cuh"
#include "backends/cuda/quant_gemm.cuh"

#include <cuda_fp8.h>
#include <stdlib.h>

extern "C" {
#include "core/log.h"
#include "quant/fp8.h"
}

#define F8_ALIGN 256                       /* workspace sub-buffers start on this boundary */
#define F8_LT_WORKSPACE ((size_t)32 << 20) /* at most this much workspace for cuBLASLt */
#define F8_X_SCALE 4 /* index of x_scale in the scales (w_scale at 0): cuBLASLt's heuristic accepts any
                      * scale pointer, but its FP8 GEMM then refuses to run (NOT_SUPPORTED) unless each
                      * one is 16-byte aligned (seen on the H200 with cuBLASLt 13.1) */
/* cached GEMM calls per node: full chunks and the last one, each with the residual as C (or refused so) */
#define F8_CALLS 4

static size_t f8_align(size_t b) { return (b + F8_ALIGN - 1) / F8_ALIGN * F8_ALIGN; }
static int64_t f8_round16(int64_t v) { return (v + 15) / 16 * 16; }

/* ---------------------------------------------------------------- device kernels */

/* x8[r * Kp + k] = e4m3(act(x[r * K + k]) / x_scale) for r < R and k < K, else code 0, for r < Rp
 * (act: the layer's input_activation, a parameterless kind of activation.cuh). */
template <typename T>
__global__ void f8_quantize_rows_kernel(const T *__restrict__ x, int64_t R, int64_t Rp, int64_t K, int64_t Kp,
                                        float x_scale, int act, __nv_fp8_storage_t *__restrict__ x8) {
    int64_t total = Rp * Kp;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += (int64_t)gridDim.x * blockDim.x) {
        int64_t r = i / Kp, k = i % Kp;
        x8[i] = r < R && k < K ? __nv_cvt_float_to_fp8(__fdiv_rn(kiln_cuda_act(ku_f32(x[r * K + k]), act, 0.0f, 0.0f),
                                                                 x_scale), __NV_SATFINITE, __NV_E4M3)
                               : (__nv_fp8_storage_t)0;
    }
}

/* y[i] = act(x[i]) in float16 for i < count: the float16 path's A for a layer with an input_activation. */
__global__ void f8_act_f16_kernel(const __half *__restrict__ x, int64_t count, int act, __half *__restrict__ y) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < count; i += (int64_t)gridDim.x * blockDim.x)
        y[i] = __float2half_rn(kiln_cuda_act(__half2float(x[i]), act, 0.0f, 0.0f));
}

static __device__ __forceinline__ float f8_value(__nv_fp8_storage_t c) {
    return __half2float(__half(__nv_cvt_fp8_to_halfraw(c, __NV_E4M3)));
}

#define F8_FB_TILE 64  /* the CUDA-core product's output tile: F8_FB_TILE rows x F8_FB_TILE columns */
#define F8_FB_TK 32    /* its k step: codes decoded once into shared memory per step */
#define F8_FB_THREADS 256

/* y[r * N + j] = scale * sum_k x8[r, k] w8[j, k] + bias[j] for r < R, j < N: the CUDA-core product
 * for a call cuBLASLt refuses. Blocks of F8_FB_THREADS threads, grid (ceil(R / 64), ceil(N / 64)):
 * each stages a 64 x 32 slice of both operands as floats in shared memory and each thread keeps a
 * 4 x 4 block of outputs, the k terms summed in order. */
template <typename T>
__global__ void __launch_bounds__(F8_FB_THREADS)
f8_gemm_fallback_kernel(const __nv_fp8_storage_t *__restrict__ x8, const __nv_fp8_storage_t *__restrict__ w8,
                        int64_t R, int64_t N, int64_t Kp, float scale, const float *__restrict__ bias,
                        T *__restrict__ y) {
    __shared__ float xs[F8_FB_TK][F8_FB_TILE + 1], ws[F8_FB_TK][F8_FB_TILE + 1];
    const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
    const int64_t r0 = (int64_t)blockIdx.x * F8_FB_TILE, j0 = (int64_t)blockIdx.y * F8_FB_TILE;
    float acc[4][4] = {};
    for (int64_t k0 = 0; k0 < Kp; k0 += F8_FB_TK) {
        for (int i = threadIdx.x; i < F8_FB_TILE * F8_FB_TK; i += F8_FB_THREADS) {
            int row = i / F8_FB_TK, k = i % F8_FB_TK; /* consecutive threads read consecutive k */
            int64_t r = r0 + row, j = j0 + row, kk = k0 + k;
            xs[k][row] = r < R && kk < Kp ? f8_value(x8[r * Kp + kk]) : 0.0f;
            ws[k][row] = j < N && kk < Kp ? f8_value(w8[j * Kp + kk]) : 0.0f;
        }
        __syncthreads();
        for (int k = 0; k < F8_FB_TK; k++) {
            float a[4], b[4];
            for (int i = 0; i < 4; i++) {
                a[i] = xs[k][ty + 16 * i];
                b[i] = ws[k][tx + 16 * i];
            }
            for (int i = 0; i < 4; i++)
                for (int j = 0; j < 4; j++) acc[i][j] += a[i] * b[j];
        }
        __syncthreads();
    }
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < 4; j++) {
            int64_t r = r0 + ty + 16 * i, c = j0 + tx + 16 * j;
            if (r < R && c < N) y[r * N + c] = ku_from_f32<T>(acc[i][j] * scale + (bias ? bias[c] : 0.0f));
        }
}

/* y[r * N + j] += bias[j] for r < R, j < N, the sum rounded once to T: the bias of a cuBLASLt call
 * made without its BIAS epilogue. */
template <typename T>
__global__ void f8_add_bias_kernel(T *__restrict__ y, int64_t R, int64_t N, const float *__restrict__ bias) {
    int64_t total = R * N;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += (int64_t)gridDim.x * blockDim.x)
        y[i] = ku_from_f32<T>(ku_f32(y[i]) + bias[i % N]);
}

/* y[i] += res[i] for i < count, the sum rounded once to T: a residual not read by the GEMM as its C. */
template <typename T>
__global__ void f8_add_residual_kernel(T *__restrict__ y, int64_t count, const T *__restrict__ res) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < count; i += (int64_t)gridDim.x * blockDim.x)
        y[i] = ku_from_f32<T>(ku_f32(y[i]) + ku_f32(res[i]));
}

/* y[0, count) += res through f8_add_residual_kernel. */
template <typename T>
static kiln_status f8_add_residual(T *y, int64_t count, const T *res, kiln_cuda_ctx *ctx) {
    if (count == 0) return KILN_OK;
    f8_add_residual_kernel<T><<<ku_blocks(count, KU_THREADS, ctx, 4), KU_THREADS, 0, ctx->stream>>>(y, count, res);
    KILN_CUDA_LAUNCH_CHECK("f8_add_residual_kernel");
    return KILN_OK;
}

/* y[r * N + j] = d[r * Np + j] for r < R, j < N (D computed with padded rows). */
template <typename T>
__global__ void f8_unpad_kernel(const T *__restrict__ d, int64_t R, int64_t N, int64_t Np, T *__restrict__ y) {
    int64_t total = R * N;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += (int64_t)gridDim.x * blockDim.x)
        y[i] = d[(i / N) * Np + i % N];
}

/* ---------------------------------------------------------------- node state */

/* One cached cuBLASLt call for R rows into a D aligned to align_d bytes, accumulating onto a C (the
 * residual, aligned to align_c) when accumulate; fallback when cuBLASLt cannot make it, refused when
 * it cannot make an accumulating call (the caller then adds the residual by a kernel), bias_kernel
 * when it was made without the BIAS epilogue (refused) and a kernel adds the bias after it. */
typedef struct f8_call {
    bool valid, fallback, refused, bias_kernel, accumulate;
    int64_t R;
    uint32_t align_d, align_c;
    cublasLtMatmulDesc_t op;
    cublasLtMatrixLayout_t la, lb, ld;
    cublasLtMatmulAlgo_t algo;
} f8_call;

/* A kiln.F8MatMul node's state in one context: its prepared parameters on the device. */
typedef struct f8_state {
    kiln_cuda_node_state base;
    void *dev;                    /* one allocation: w8, the scales, the bias (float32 and D's type) */
    const __nv_fp8_storage_t *w8; /* [Np][Kp] weight codes, zero-padded */
    const float *scales;          /* [0] w_scale, [F8_X_SCALE] x_scale */
    const float *bias32;          /* [Np] float32 (NULL without a bias): the fallback's */
    const void *bias_d;           /* [Np] in D's type for 16-bit D (else NULL; NULL without a bias): the epilogue's */
    kiln_dtype d_dtype;           /* the output type the state was prepared for */
    int64_t K, Kp, N, Np;
    float scale;                  /* x_scale * w_scale, the fallback's */
    __half *w16;                  /* the float16 path's weights e4m3(W) * w_scale as [K, N], made on its first use */
    f8_call calls[F8_CALLS];
    int next_call;
    bool fallback_logged;
} f8_state;

static const char f8_state_owner[] = "quant_fp8.cu";

static void f8_call_clear(f8_call *c) {
    if (c->ld) cublasLtMatrixLayoutDestroy(c->ld);
    if (c->lb) cublasLtMatrixLayoutDestroy(c->lb);
    if (c->la) cublasLtMatrixLayoutDestroy(c->la);
    if (c->op) cublasLtMatmulDescDestroy(c->op);
    memset(c, 0, sizeof *c);
}

static void f8_state_destroy(kiln_cuda_node_state *base) {
    f8_state *st = (f8_state *)base;
    for (int i = 0; i < F8_CALLS; i++) f8_call_clear(&st->calls[i]);
    if (st->dev) cudaFree(st->dev);
    if (st->w16) cudaFree(st->w16);
    free(st);
}

/* Element i of float tensor t's host copy as float32. */
static float f8_host_float(const kiln_cuda_tensor *t, int64_t i) {
    if (t->host_dtype == KILN_F16) return kiln_f16_to_f32(((const uint16_t *)t->host)[i]);
    if (t->host_dtype == KILN_BF16) return kiln_bf16_to_f32(((const uint16_t *)t->host)[i]);
    return ((const float *)t->host)[i];
}

/* Prepares st from the host copies: weight codes [K, N] as rows [Np][Kp], the scales, the bias in
 * float32 and, for a 16-bit output type d, in d. */
static kiln_status f8_state_prepare(const kiln_node *n, const kiln_fp8_layer *q, const kiln_cuda_tensor *w,
                                    const kiln_cuda_tensor *bias, kiln_dtype d, f8_state *st) {
    size_t w_bytes = f8_align((size_t)(st->Np * st->Kp)), s_bytes = f8_align((F8_X_SCALE + 1) * sizeof(float));
    size_t b32_bytes = f8_align((size_t)st->Np * 4), bd_bytes = f8_align((size_t)st->Np * kiln_dtype_size(d));
    size_t bytes = w_bytes + s_bytes + b32_bytes + bd_bytes;
    unsigned char *host = (unsigned char *)calloc(1, bytes);
    if (!host) return kiln_error(KILN_ERR_OUT_OF_MEMORY, "%s '%s': out of memory preparing the weights", n->op_type, n->name);
    const uint8_t *codes = (const uint8_t *)w->host;
    for (int64_t j = 0; j < st->N; j++)
        for (int64_t k = 0; k < st->K; k++) host[j * st->Kp + k] = codes[k * st->N + j];
    float *scales = (float *)(host + w_bytes), *b32 = (float *)(host + w_bytes + s_bytes);
    unsigned char *bd = host + w_bytes + s_bytes + b32_bytes;
    scales[0] = q->w_scale;
    scales[F8_X_SCALE] = q->x_scale;
    for (int64_t j = 0; bias && j < st->N; j++) {
        b32[j] = f8_host_float(bias, j);
        if (d == KILN_F16) ((uint16_t *)bd)[j] = kiln_f32_to_f16(b32[j]);
        else if (d == KILN_BF16) ((uint16_t *)bd)[j] = kiln_f32_to_bf16(b32[j]);
    }
    cudaError_t e = cudaMalloc(&st->dev, bytes);
    if (e == cudaSuccess) e = cudaMemcpy(st->dev, host, bytes, cudaMemcpyHostToDevice);
    free(host);
    if (e != cudaSuccess) return kiln_cuda_error(e, "cudaMalloc/cudaMemcpy of the FP8 weights", __FILE__, __LINE__);
    unsigned char *dev = (unsigned char *)st->dev;
    st->w8 = (const __nv_fp8_storage_t *)dev;
    st->scales = (const float *)(dev + w_bytes);
    st->bias32 = bias ? (const float *)(dev + w_bytes + s_bytes) : NULL;
    st->bias_d = bias && d != KILN_F32 ? (const void *)(dev + w_bytes + s_bytes + b32_bytes) : NULL;
    st->d_dtype = d;
    st->scale = q->x_scale * q->w_scale;
    return KILN_OK;
}

/* The node's state (*ctx->state), prepared on its first run; *temp when the context keeps none. */
static kiln_status f8_state_get(const kiln_node *n, const kiln_fp8_layer *q, const kiln_cuda_tensor *w,
                                const kiln_cuda_tensor *bias, kiln_dtype d, kiln_cuda_ctx *ctx, f8_state **out, bool *temp) {
    *temp = !ctx->state;
    if (ctx->state && *ctx->state) {
        if ((*ctx->state)->owner != f8_state_owner)
            return kiln_error(KILN_ERR_INTERNAL, "%s '%s': its node state belongs to another kernel", n->op_type, n->name);
        *out = (f8_state *)*ctx->state;
        return KILN_OK;
    }
    f8_state *st = (f8_state *)calloc(1, sizeof *st);
    if (!st) return kiln_error(KILN_ERR_OUT_OF_MEMORY, "out of memory for the state of %s '%s'", n->op_type, n->name);
    st->base.owner = f8_state_owner;
    st->base.destroy = f8_state_destroy;
    st->K = w->dims[0];
    st->N = w->dims[1];
    st->Kp = f8_round16(st->K);
    st->Np = f8_round16(st->N);
    kiln_status s = f8_state_prepare(n, q, w, bias, d, st);
    if (s != KILN_OK) {
        f8_state_destroy(&st->base);
        return s;
    }
    if (ctx->state) *ctx->state = &st->base;
    *out = st;
    return KILN_OK;
}

/* ---------------------------------------------------------------- the GEMM */

static kiln_status f8_lt_fail(const kiln_node *n, cublasStatus_t e, const char *call) {
    return kiln_error(KILN_ERR_BACKEND, "%s '%s': %s failed: %s", n->op_type, n->name, call, cublasLtGetStatusString(e));
}
#define F8_LT(call)                                                                                \
    do {                                                                                           \
        cublasStatus_t f8_e_ = (call);                                                             \
        if (f8_e_ != CUBLAS_STATUS_SUCCESS) return f8_lt_fail(n, f8_e_, #call);                    \
    } while (0)

static cudaDataType_t f8_lt_dtype(kiln_dtype t) {
    return t == KILN_F16 ? CUDA_R_16F : t == KILN_BF16 ? CUDA_R_16BF : CUDA_R_32F;
}

/* The operands of one FP8 GEMM: the rounded rows x8 (R of them) into out, with lt_bytes of
 * cuBLASLt workspace at lt_ws; c the residual it accumulates onto (beta 1), or NULL. */
typedef struct f8_operands {
    const __nv_fp8_storage_t *x8;
    int64_t R;
    void *out;
    void *lt_ws;
    size_t lt_bytes;
    const void *c;
} f8_operands;

/* The largest power of two up to 256 that divides p's address: the alignment cuBLASLt is told. */
static uint32_t f8_alignment(const void *p) {
    uint32_t a = 256;
    while (a > 1 && (uintptr_t)p % a) a /= 2;
    return a;
}

/* Makes call c for o's R rows: D[Np, R] (D's type) = Wt^T X with the scales, fast accumulation
 * (CUBLASLT_MATMUL_DESC_FAST_ACCUM: no periodic promotion of the partial sums, as TensorRT's and
 * Transformer Engine's inference GEMMs; the products stay exact, the sum is rounded a little more
 * often, far below E4M3's own rounding) and, when epilogue_bias, the BIAS epilogue; the algorithm the
 * fastest of the heuristic's candidates within o's workspace and D's alignment (lt_pick.cuh, timed
 * on o's operands when the stream is not capturing); an error naming the configuration when cuBLASLt
 * refuses it. */
static kiln_status f8_call_make(const kiln_node *n, const f8_state *st, const f8_operands *o, bool epilogue_bias,
                                kiln_cuda_ctx *ctx, f8_call *c) {
    const int64_t R = o->R;
    const size_t lt_ws = o->lt_bytes;
    F8_LT(cublasLtMatmulDescCreate(&c->op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    const int8_t fast = 1;
    F8_LT(cublasLtMatmulDescSetAttribute(c->op, CUBLASLT_MATMUL_DESC_FAST_ACCUM, &fast, sizeof fast));
    cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
    F8_LT(cublasLtMatmulDescSetAttribute(c->op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
    F8_LT(cublasLtMatmulDescSetAttribute(c->op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
    const float *sa = st->scales, *sb = st->scales + F8_X_SCALE;
    F8_LT(cublasLtMatmulDescSetAttribute(c->op, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &sa, sizeof sa));
    F8_LT(cublasLtMatmulDescSetAttribute(c->op, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &sb, sizeof sb));
    cudaDataType_t dt = f8_lt_dtype(st->d_dtype);
    if (st->bias_d && epilogue_bias) {
        cublasLtEpilogue_t epi = CUBLASLT_EPILOGUE_BIAS;
        F8_LT(cublasLtMatmulDescSetAttribute(c->op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi));
        F8_LT(cublasLtMatmulDescSetAttribute(c->op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &dt, sizeof dt));
        F8_LT(cublasLtMatmulDescSetAttribute(c->op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &st->bias_d, sizeof st->bias_d));
    }
    F8_LT(cublasLtMatrixLayoutCreate(&c->la, CUDA_R_8F_E4M3, (uint64_t)st->Kp, (uint64_t)st->Np, st->Kp));
    F8_LT(cublasLtMatrixLayoutCreate(&c->lb, CUDA_R_8F_E4M3, (uint64_t)st->Kp, (uint64_t)R, st->Kp));
    F8_LT(cublasLtMatrixLayoutCreate(&c->ld, dt, (uint64_t)st->Np, (uint64_t)R, st->Np));
    cublasLtMatmulPreference_t pref;
    F8_LT(cublasLtMatmulPreferenceCreate(&pref));
    const uint32_t align_d = f8_alignment(o->out), align_c = o->c ? f8_alignment(o->c) : align_d;
    cublasStatus_t e = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &lt_ws,
                                                            sizeof lt_ws);
    if (e == CUBLAS_STATUS_SUCCESS)
        e = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &align_c, sizeof align_c);
    if (e == CUBLAS_STATUS_SUCCESS)
        e = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &align_d, sizeof align_d);
    cublasLtMatmulHeuristicResult_t res;
    int found = 0;
    bool timed = false;
    const float alpha = 1.0f, beta = o->c ? 1.0f : 0.0f;
    kiln_lt_problem p = {ctx->lt, c->op, c->la, c->lb, c->ld, pref, &alpha, st->w8, o->x8, &beta, o->out, o->lt_ws,
                         lt_ws, ctx->stream, o->c};
    if (e == CUBLAS_STATUS_SUCCESS) e = kiln_lt_pick(&p, &res, &found, &timed);
    cublasLtMatmulPreferenceDestroy(pref);
    if (e != CUBLAS_STATUS_SUCCESS || found < 1)
        return kiln_error(KILN_ERR_UNSUPPORTED, "%s '%s': cuBLASLt's heuristic offers no FP8 GEMM (%s) for E4M3 A^T [%lld, "
                          "%lld] x E4M3 B [%lld, %lld] into %s%s, compute 32F, within %zu bytes of workspace",
                          n->op_type, n->name, e != CUBLAS_STATUS_SUCCESS ? cublasLtGetStatusString(e) : "no algorithm",
                          (long long)st->Np, (long long)st->Kp, (long long)st->Kp, (long long)R,
                          kiln_dtype_name(st->d_dtype), st->bias_d && epilogue_bias ? " with its BIAS epilogue" : "",
                          lt_ws);
    c->algo = res.algo;
    c->R = R;
    c->align_d = align_d;
    c->align_c = align_c;
    c->accumulate = o->c != NULL;
    c->valid = true;
    KILN_LOG(KILN_LOG_VERBOSE, "cuda: %s '%s': cuBLASLt FP8 GEMM %lld x %lld x %lld%s%s: %s of %d candidates", n->op_type,
             n->name, (long long)st->Np, (long long)R, (long long)st->Kp, st->bias_d && epilogue_bias ? " with its BIAS epilogue" : "",
             o->c ? " onto the residual" : "", timed ? "the fastest" : "the heuristic's first", found);
    return KILN_OK;
}

/* Switches call c to the CUDA-core product, warning once per node with the reason (the last error). */
static void f8_call_fall_back(const kiln_node *n, f8_state *st, f8_call *c) {
    if (!st->fallback_logged)
        KILN_LOG(KILN_LOG_WARN, "fp8: %s '%s': cuBLASLt's FP8 GEMM is unavailable (%s); a CUDA-core kernel computes it "
                 "(far slower: the build then keeps float16)", n->op_type, n->name, kiln_last_error());
    kiln_error_clear();
    st->fallback_logged = true;
    c->fallback = true;
}

/* The cached call for o's rows, D's alignment and C, or one made now in the next slot; when cuBLASLt
 * cannot make it, a fallback one, or for an accumulating call (o->c) NULL, remembered as refused. */
static f8_call *f8_call_get(const kiln_node *n, f8_state *st, const f8_operands *o, kiln_cuda_ctx *ctx) {
    const int64_t R = o->R;
    const uint32_t align_d = f8_alignment(o->out), align_c = o->c ? f8_alignment(o->c) : align_d;
    for (int i = 0; i < F8_CALLS; i++) {
        const f8_call *k = &st->calls[i];
        if (k->valid && k->R == R && k->align_d == align_d && k->accumulate == (o->c != NULL) && k->align_c == align_c)
            return k->refused ? NULL : &st->calls[i];
    }
    f8_call *c = &st->calls[st->next_call];
    st->next_call = (st->next_call + 1) % F8_CALLS;
    f8_call_clear(c);
    if (st->bias_d) { /* 16-bit D: the BIAS epilogue, or, refused, the plain GEMM and the bias kernel */
        if (f8_call_make(n, st, o, true, ctx, c) == KILN_OK) return c;
        f8_call_clear(c);
        KILN_LOG(KILN_LOG_VERBOSE, "cuda: %s; trying it without the epilogue", kiln_last_error());
        kiln_error_clear();
    }
    if (f8_call_make(n, st, o, false, ctx, c) == KILN_OK) {
        c->bias_kernel = st->bias32 != NULL;
        return c;
    }
    f8_call_clear(c);
    if (o->c) {
        KILN_LOG(KILN_LOG_VERBOSE, "cuda: %s; the residual is added by a kernel instead", kiln_last_error());
        kiln_error_clear();
        c->refused = true;
    } else {
        f8_call_fall_back(n, st, c);
    }
    c->R = R;
    c->align_d = align_d;
    c->align_c = align_c;
    c->accumulate = o->c != NULL;
    c->valid = true;
    return c->refused ? NULL : c;
}

/* Whether ctx's stream is being captured into a CUDA graph. */
static bool f8_capturing(const kiln_cuda_ctx *ctx) {
    cudaStreamCaptureStatus cap = cudaStreamCaptureStatusNone;
    return cudaStreamIsCapturing(ctx->stream, &cap) == cudaSuccess && cap != cudaStreamCaptureStatusNone;
}

/* y[R, N] (dtype T) from the rounded rows x8 (R of them, padded with zero rows to Rp, a multiple of
 * 16): cuBLASLt's FP8 GEMM over all Rp (into d [Rp, Np], then copied, when N < Np or R < Rp), or the
 * CUDA-core kernel over the R rows; then + res [R, N] when res is not NULL (as the GEMM's C, beta 1,
 * when it writes y itself; else by a kernel). A cuBLASLt call that fails while the stream is being captured
 * fails the run (the capture is dropped and the run repeated eagerly: cuda_graph.c, and the build's
 * tuner), so that a capture never switches the node to the CUDA-core kernel for good. */
template <typename T>
static kiln_status f8_gemm(const kiln_node *n, f8_state *st, const __nv_fp8_storage_t *x8, int64_t R, int64_t Rp, T *d,
                           T *y, const T *res, void *lt_ws, size_t lt_bytes, kiln_cuda_ctx *ctx) {
    T *out = st->Np == st->N && Rp == R ? y : d;
    bool accumulate = res && out == y;
    f8_operands o = {x8, Rp, out, lt_ws, lt_bytes, accumulate ? res : NULL};
    f8_call *c = f8_call_get(n, st, &o, ctx);
    if (!c) { /* cuBLASLt takes no residual as C here: the plain call, then the residual kernel */
        accumulate = false;
        o.c = NULL;
        c = f8_call_get(n, st, &o, ctx);
    }
    if (!c->fallback) {
        const float alpha = 1.0f, beta = accumulate ? 1.0f : 0.0f;
        const T *cin = accumulate ? res : out;
        cublasStatus_t e = cublasLtMatmul(ctx->lt, c->op, &alpha, st->w8, c->la, x8, c->lb, &beta, cin, c->ld, out, c->ld,
                                          &c->algo, lt_ws, lt_bytes, ctx->stream);
        if (e == CUBLAS_STATUS_SUCCESS) {
            if (out != y) {
                f8_unpad_kernel<T><<<ku_blocks(R * st->N, KU_THREADS, ctx, 4), KU_THREADS, 0, ctx->stream>>>(d, R, st->N,
                                                                                                         st->Np, y);
                KILN_CUDA_LAUNCH_CHECK("f8_unpad_kernel");
            }
            if (c->bias_kernel) {
                f8_add_bias_kernel<T><<<ku_blocks(R * st->N, KU_THREADS, ctx, 4), KU_THREADS, 0, ctx->stream>>>(
                    y, R, st->N, st->bias32);
                KILN_CUDA_LAUNCH_CHECK("f8_add_bias_kernel");
            }
            return res && !accumulate ? f8_add_residual<T>(y, R * st->N, res, ctx) : KILN_OK;
        }
        if (f8_capturing(ctx)) return f8_lt_fail(n, e, "cublasLtMatmul (while capturing a CUDA graph)");
        (void)f8_lt_fail(n, e, "cublasLtMatmul");
        f8_call_fall_back(n, st, c);
    }
    dim3 grid((unsigned)((R + F8_FB_TILE - 1) / F8_FB_TILE), (unsigned)((st->N + F8_FB_TILE - 1) / F8_FB_TILE));
    f8_gemm_fallback_kernel<T><<<grid, F8_FB_THREADS, 0, ctx->stream>>>(x8, st->w8, R, st->N, st->Kp, st->scale,
                                                                        st->bias32, y);
    KILN_CUDA_LAUNCH_CHECK("f8_gemm_fallback_kernel");
    return res ? f8_add_residual<T>(y, R * st->N, res, ctx) : KILN_OK;
}

/* The rows of A (dtype T) in chunks that fit the workspace: rounded to E4M3, then the GEMM (onto the
 * residual res, [rows, N], when not NULL). */
template <typename T>
static kiln_status f8_run(const kiln_node *n, f8_state *st, const kiln_fp8_layer *q, const T *a, int64_t rows,
                          const T *res, T *y, kiln_cuda_ctx *ctx) {
    size_t q4 = ctx->workspace_bytes / 4 / F8_ALIGN * F8_ALIGN, lt_bytes = q4 < F8_LT_WORKSPACE ? q4 : F8_LT_WORKSPACE;
    size_t per_row = (size_t)st->Kp + (size_t)st->Np * sizeof(T); /* x8 and, when padded, d */
    size_t avail = ctx->workspace_bytes > lt_bytes + 2 * F8_ALIGN ? ctx->workspace_bytes - lt_bytes - 2 * F8_ALIGN : 0;
    int64_t chunk = (int64_t)(avail / per_row) / 16 * 16; /* whole groups of 16 rows: padding only at the end */
    if (rows > 0 && chunk < 16)
        return kiln_error(KILN_ERR_UNSUPPORTED, "%s '%s': %zu bytes of workspace do not hold one row", n->op_type, n->name,
                          ctx->workspace_bytes);
    for (int64_t r0 = 0; r0 < rows; r0 += chunk) {
        int64_t R = rows - r0 < chunk ? rows - r0 : chunk, Rp = f8_round16(R);
        unsigned char *ws = (unsigned char *)ctx->workspace;
        __nv_fp8_storage_t *x8 = (__nv_fp8_storage_t *)ws;
        size_t used = f8_align((size_t)(Rp * st->Kp));
        T *d = (T *)(ws + used);
        if (st->Np != st->N || Rp != R) used += f8_align((size_t)(Rp * st->Np) * sizeof(T));
        f8_quantize_rows_kernel<T><<<ku_blocks(Rp * st->Kp, KU_THREADS, ctx, 4), KU_THREADS, 0, ctx->stream>>>(
            a + r0 * st->K, R, Rp, st->K, st->Kp, q->x_scale, (int)q->in_act, x8);
        KILN_CUDA_LAUNCH_CHECK("f8_quantize_rows_kernel");
        size_t lt_avail = ctx->workspace_bytes - used;
        KILN_TRY(f8_gemm<T>(n, st, x8, R, Rp, d, y + r0 * st->N, res ? res + r0 * st->N : NULL, ws + used,
                            lt_avail < lt_bytes ? lt_avail : lt_bytes,
                            ctx));
    }
    return KILN_OK;
}

/* ---------------------------------------------------------------- the float16 path */

/* y[r, j] += bias[j] for r < R, j < N (float16, the sum rounded once). */
__global__ void f8_bias_f16_kernel(__half *__restrict__ y, int64_t R, int64_t N, const float *__restrict__ bias) {
    int64_t total = R * N;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += (int64_t)gridDim.x * blockDim.x)
        y[i] = __float2half_rn(__half2float(y[i]) + bias[i % N]);
}

/* st->w16 from the weights' host codes, once. */
static kiln_status f8_prepare_f16(const kiln_node *n, const kiln_fp8_layer *q, const kiln_cuda_tensor *w, f8_state *st) {
    if (st->w16) return KILN_OK;
    size_t count = (size_t)(st->K * st->N);
    uint16_t *host = (uint16_t *)malloc(count * sizeof *host + 1);
    if (!host) return kiln_error(KILN_ERR_OUT_OF_MEMORY, "%s '%s': out of memory for its float16 weights", n->op_type, n->name);
    float lut[256];
    for (int c = 0; c < 256; c++) lut[c] = kiln_e4m3_to_f32((uint8_t)c) * q->w_scale;
    const uint8_t *codes = (const uint8_t *)w->host;
    for (size_t i = 0; i < count; i++) host[i] = kiln_f32_to_f16(lut[codes[i]]);
    cudaError_t e = cudaMalloc(&st->w16, count * sizeof *host);
    if (e == cudaSuccess) e = cudaMemcpy(st->w16, host, count * sizeof *host, cudaMemcpyHostToDevice);
    free(host);
    if (e != cudaSuccess) return kiln_cuda_error(e, "cudaMalloc/cudaMemcpy of the float16 weights", __FILE__, __LINE__);
    return KILN_OK;
}

/* The float16 path over rows of A (float16) into y (float16): one cuBLASLt GEMM by the decoded
 * weights, then the bias, then the residual res (NULL: none). With an input_activation, A goes through it first, in chunks of rows whose
 * activated copy fills at most half the workspace (the GEMM gets the other half). */
static kiln_status f8_run_f16(const kiln_node *n, const f8_state *st, const kiln_fp8_layer *q, const __half *a,
                              int64_t rows, const __half *res, __half *y, kiln_cuda_ctx *ctx) {
    if (rows == 0) return KILN_OK;
    kiln_cuda_ctx sub = *ctx; /* no tactic, candidates or state of its own */
    sub.tactic = NULL;
    sub.tactic_strict = false;
    sub.candidates = NULL;
    sub.state = NULL;
    if (q->in_act == KILN_ACT_NONE) {
        KILN_TRY(kiln_cuda_matmul_batched(n, &sub, KILN_F16, 1, rows, st->N, st->K, a, false, st->w16, false, y));
    } else {
        size_t half = ctx->workspace_bytes / 2 / F8_ALIGN * F8_ALIGN, row_bytes = (size_t)st->K * sizeof(__half);
        int64_t chunk = row_bytes ? (int64_t)(half / row_bytes) : rows;
        if (chunk < 1)
            return kiln_error(KILN_ERR_UNSUPPORTED, "%s '%s': %zu bytes of workspace do not hold one activated row",
                              n->op_type, n->name, ctx->workspace_bytes);
        __half *act = (__half *)ctx->workspace;
        sub.workspace = (unsigned char *)ctx->workspace + half;
        sub.workspace_bytes = ctx->workspace_bytes - half;
        for (int64_t r0 = 0; r0 < rows; r0 += chunk) {
            int64_t R = rows - r0 < chunk ? rows - r0 : chunk;
            f8_act_f16_kernel<<<ku_blocks(R * st->K, KU_THREADS, ctx, 4), KU_THREADS, 0, ctx->stream>>>(
                a + r0 * st->K, R * st->K, (int)q->in_act, act);
            KILN_CUDA_LAUNCH_CHECK("f8_act_f16_kernel");
            KILN_TRY(kiln_cuda_matmul_batched(n, &sub, KILN_F16, 1, R, st->N, st->K, act, false, st->w16, false,
                                              y + r0 * st->N));
        }
    }
    if (st->bias32) {
        f8_bias_f16_kernel<<<ku_blocks(rows * st->N, KU_THREADS, ctx, 4), KU_THREADS, 0, ctx->stream>>>(y, rows, st->N,
                                                                                                      st->bias32);
        KILN_CUDA_LAUNCH_CHECK("f8_bias_f16_kernel");
    }
    return res ? f8_add_residual<__half>(y, rows * st->N, res, ctx) : KILN_OK;
}

/* ---------------------------------------------------------------- kiln.F8MatMul */

static bool f8_float(kiln_dtype t) { return t == KILN_F32 || t == KILN_F16 || t == KILN_BF16; }

static kiln_status exec_f8matmul(const kiln_node *n, const kiln_cuda_tensor *in, int nin, const kiln_cuda_tensor *out,
                                 int nout, kiln_cuda_ctx *ctx) {
    (void)nout;
    const kiln_cuda_tensor *a = &in[0], *w = &in[1], *y = &out[0];
    const kiln_cuda_tensor *bias = nin > 2 && !ku_absent(&in[2]) ? &in[2] : NULL;
    const kiln_cuda_tensor *res = nin > 3 && !ku_absent(&in[3]) ? &in[3] : NULL;
    if (ctx->candidates) return a->dtype == KILN_F16 ? kiln_qg_list_paths(ctx) : KILN_OK; /* fp8 or fp16 */
    bool f16;
    KILN_TRY(kiln_qg_wants_f16(n, ctx, &f16));
    if (f16 && a->dtype != KILN_F16)
        return kiln_error(KILN_ERR_UNSUPPORTED, "%s '%s': the float16 path takes a float16 A, not %s", n->op_type, n->name,
                          kiln_dtype_name(a->dtype));
    kiln_fp8_layer q;
    KILN_TRY(kiln_fp8_layer_read(n, &q));
    if (!f8_float(a->dtype) || y->dtype != a->dtype || w->dtype != KILN_U8 || w->ndim != 2 || !w->host || a->ndim < 1)
        return kiln_error(KILN_ERR_UNSUPPORTED, "%s '%s': needs a float A (Y of its type) and constant 2-D uint8 E4M3 B",
                          n->op_type, n->name);
    int64_t K = w->dims[0], N = w->dims[1];
    if (a->dims[a->ndim - 1] != K)
        return kiln_error(KILN_ERR_SHAPE, "%s '%s': A's last dim %lld, B [%lld, %lld]", n->op_type, n->name,
                          (long long)a->dims[a->ndim - 1], (long long)K, (long long)N);
    if (bias && (!bias->host || !f8_float(bias->host_dtype) || ku_numel(bias) != N))
        return kiln_error(KILN_ERR_UNSUPPORTED, "%s '%s': the bias must be a float constant of %lld values", n->op_type,
                          n->name, (long long)N);
    int64_t rows = K > 0 ? ku_numel(a) / K : 0;
    if (res && (res->dtype != y->dtype || ku_numel(res) != rows * N))
        return kiln_error(KILN_ERR_UNSUPPORTED, "%s '%s': the residual must be %s with %lld values, not %s with %lld",
                          n->op_type, n->name, kiln_dtype_name(y->dtype), (long long)(rows * N),
                          kiln_dtype_name(res->dtype), (long long)ku_numel(res));
    f8_state *st = NULL;
    bool temp = false;
    KILN_TRY(f8_state_get(n, &q, w, bias, y->dtype, ctx, &st, &temp));
    kiln_status s;
    if (st->d_dtype != y->dtype)
        s = kiln_error(KILN_ERR_INTERNAL, "%s '%s': prepared for %s output, asked for %s", n->op_type, n->name,
                       kiln_dtype_name(st->d_dtype), kiln_dtype_name(y->dtype));
    else if (f16) {
        s = f8_prepare_f16(n, &q, w, st);
        if (s == KILN_OK)
            s = f8_run_f16(n, st, &q, (const __half *)a->data, rows, res ? (const __half *)res->data : NULL,
                           (__half *)y->data, ctx);
    } else if (y->dtype == KILN_F16)
        s = f8_run<__half>(n, st, &q, (const __half *)a->data, rows, res ? (const __half *)res->data : NULL,
                           (__half *)y->data, ctx);
    else if (y->dtype == KILN_BF16)
        s = f8_run<bf16>(n, st, &q, (const bf16 *)a->data, rows, res ? (const bf16 *)res->data : NULL, (bf16 *)y->data,
                         ctx);
    else
        s = f8_run<float>(n, st, &q, (const float *)a->data, rows, res ? (const float *)res->data : NULL,
                          (float *)y->data, ctx);
    if (temp) {
        cudaError_t e = cudaStreamSynchronize(ctx->stream);
        if (s == KILN_OK && e != cudaSuccess) s = kiln_cuda_error(e, "cudaStreamSynchronize", __FILE__, __LINE__);
        f8_state_destroy(&st->base);
    }
    return s;
}

/* Float A, constant 2-D uint8 B, a constant bias when present, valid scales. */
static kiln_status sup_f8matmul(const kiln_graph *g, const kiln_node *n) {
    kiln_fp8_layer q;
    KILN_TRY(kiln_fp8_layer_read(n, &q));
    const kiln_value *a = ku_in(g, n, 0), *w = ku_in(g, n, 1), *b = ku_in(g, n, 2);
    if (!a || !w) return kiln_error(KILN_ERR_INVALID_ARGUMENT, "%s '%s' needs A and B", n->op_type, n->name);
    if (!f8_float(a->dtype)) return ku_refuse_dtype(n, 0, a->dtype);
    if (w->dtype != KILN_U8 || !kiln_cuda_value_on_host(g, n->inputs[1]))
        return kiln_error(KILN_ERR_UNSUPPORTED, "%s '%s': the cuda backend needs constant uint8 E4M3 weights", n->op_type,
                          n->name);
    if (b && !kiln_cuda_value_on_host(g, n->inputs[2]))
        return kiln_error(KILN_ERR_UNSUPPORTED, "%s '%s': the cuda backend needs a constant bias", n->op_type, n->name);
    return KILN_OK;
}

extern "C" const kiln_cuda_kernel kiln_cuda_kernels_fp8[] = {
    {"F8MatMul", KILN_FUSED_DOMAIN, exec_f8matmul, sup_f8matmul},
    {NULL, NULL, NULL, NULL},
};
