/* fused_epilogue.cu — kiln.FusedGemm, kiln.FusedMatMul and kiln.FusedConv (ir/fused_ops.h) on the GPU.
 * FusedGemm / FusedMatMul: with no activation or ReLU, and a product that is one cuBLASLt call, the
 * whole node is that call (bias and ReLU in cuBLASLt's epilogue, the residual as its C with beta 1:
 * matmul.cu's kiln_cuda_product_fused). Otherwise the product runs through the plain op's kernel
 * (matmul.cu's cuBLASLt path with its bias epilogue and tactics), then one elementwise kernel
 * applies the rest in place:
 * y = act((y + bias[col]) + z), in float32 whatever the storage type, with the formulas of the CPU
 * kernels (src/backends/cpu/fused.c). When there is nothing left to apply (no activation, no residual,
 * no extra bias) no kernel runs. FusedConv belongs to conv.cu (kiln_cuda_fused_conv: one
 * cudnnConvolutionBiasActivationForward call for activation none or Relu, NCHW or channels-last),
 * which uses the same epilogue (kiln_cuda_fused_epilogue) per batch chunk for the other activations
 * and when cuDNN refuses the fused call. */
#include "backends/cuda/activation.cuh"
#include "backends/cuda/kernel_util.cuh"
#include "backends/cuda/matmul.cuh"
#include "ir/fused_ops.h"

/* Gelu (erf) for 16-bit storage, x Phi(x): with Abramowitz & Stegun 7.1.26 for erf (absolute error
 * under 1.5e-7, plus the fast exp2 and reciprocal's few ulp: a thousand times below float16's and
 * bfloat16's rounding of the result), h = 0.5 erfc(|x| / sqrt 2) = t P(t) exp(-x^2 / 2) with
 * t = 1 / (1 + p |x| / sqrt 2) and P's coefficients halved, and Phi(x) = 1 - h for x >= 0, h below.
 * A fifth of erff's instructions: the epilogue was compute-bound. Float32 storage keeps erff (the
 * CPU kernels' formula). */
static __device__ __forceinline__ float fe_gelu_16bit(float x) {
    const float t = ku_rcp_approx(fmaf(0.3275911f * 0.70710678118654752f, fabsf(x), 1.0f));
    float poly = fmaf(0.5f * 1.061405429f, t, 0.5f * -1.453152027f);
    poly = fmaf(poly, t, 0.5f * 1.421413741f);
    poly = fmaf(poly, t, 0.5f * -0.284496736f);
    poly = fmaf(poly, t, 0.5f * 0.254829592f);
    const float h = poly * t * ku_exp2_approx(x * (x * (-0.5f * KU_LOG2E)));
    return x * (x >= 0.0f ? 1.0f - h : h);
}

/* y[i] = act((y[i] + bias[i % ncol]) + z[i]) over total elements; bias and z may be NULL. */
template <typename T>
__global__ void fe_epilogue_kernel(T *__restrict__ y, const T *__restrict__ bias, int64_t ncol, const T *__restrict__ z,
                                   int kind, float p0, float p1, int64_t total) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += (int64_t)gridDim.x * blockDim.x) {
        float v = ku_f32(y[i]);
        if (bias) v += ku_f32(bias[i % ncol]);
        if (z) v += ku_f32(z[i]);
        y[i] = ku_from_f32<T>(kiln_cuda_act(v, kind, p0, p1));
    }
}

/* Fast path of fe_epilogue_kernel: y is rows x ncol, ncol a multiple of V (a vector never crosses a
 * row, and bias + col stays aligned), ncol / V vectors per row and rows both under 2^31; y, bias and
 * z 16-byte aligned. One 16-byte vector of V elements per thread: x (block and thread) is the vector
 * within a row, y the row (striding by the grid), so that the bias column needs no division; a block
 * of narrow rows takes several of them. Same arithmetic per element. KIND >= 0 is the activation
 * fixed at compile time (the common ones: the per-element switch folds away), -1 takes `kind`; Gelu
 * on 16-bit storage takes fe_gelu_16bit (BERT's FFN). */
template <typename T, int KIND>
__global__ void __launch_bounds__(KU_THREADS) fe_epilogue_vec(T *__restrict__ y, const T *__restrict__ bias, int ncol,
                                                              const T *__restrict__ z, int kind, float p0, float p1,
                                                              int rows) {
    const int V = ku_vec<T>::n;
    if (KIND >= 0) kind = KIND;
    const int c = (int)(blockIdx.x * blockDim.x + threadIdx.x) * V;
    if (c >= ncol) return;
    T b[V];
    if (bias) ku_load(b, bias + c);
    for (int r = (int)(blockIdx.y * blockDim.y + threadIdx.y); r < rows; r += (int)(gridDim.y * blockDim.y)) {
        const size_t e = (size_t)r * (unsigned)ncol + (unsigned)c;
        T v[V], zz[V];
        ku_load(v, y + e); /* all loads issued before any use */
        if (z) ku_load(zz, z + e);
#pragma unroll
        for (int q = 0; q < V; q++) {
            float f = ku_f32(v[q]);
            if (bias) f += ku_f32(b[q]);
            if (z) f += ku_f32(zz[q]);
            v[q] = ku_from_f32<T>(KIND == KILN_ACT_GELU && sizeof(T) == 2 ? fe_gelu_16bit(f) : kiln_cuda_act(f, kind, p0, p1));
        }
        ku_store(y + e, v);
    }
}

/* Launches the epilogue over y (T): the vector kernel when the layout allows it, else the
 * grid-stride one. */
template <typename T>
static kiln_status fe_launch(void *yp, const void *bp, int64_t ncol, const void *zp, int kind, float p0, float p1,
                             int64_t total, kiln_cuda_ctx *ctx) {
    const int V = ku_vec<T>::n;
    int64_t rows = ncol > 0 ? total / ncol : 0, vrow = ncol / V;
    if (ncol % V == 0 && vrow > 0 && vrow <= 0x7fffffff / V && rows <= 0x7fffffff && ku_aligned16(yp) &&
        (!bp || ku_aligned16(bp)) && (!zp || ku_aligned16(zp))) {
        /* x: a whole row when it fits a block, else the widest of 256, 128, 64, 32 dividing it (BERT's
         * 3072 columns: 128); y: the rows that fill the block */
        int tx = (int)vrow;
        if (vrow > KU_THREADS)
            for (tx = KU_THREADS; tx > 32 && vrow % tx != 0;) tx /= 2;
        dim3 threads((unsigned)tx, (unsigned)(KU_THREADS / tx));
        int64_t yblocks = (rows + threads.y - 1) / threads.y;
        dim3 grid((unsigned)((vrow + tx - 1) / tx), (unsigned)(yblocks < 65535 ? yblocks : 65535));
        T *y = (T *)yp;
        const T *b = (const T *)bp, *z = (const T *)zp;
        cudaStream_t st = ctx->stream;
        const int nc = (int)ncol, nr = (int)rows;
        switch (kind) {
        case KILN_ACT_NONE: fe_epilogue_vec<T, KILN_ACT_NONE><<<grid, threads, 0, st>>>(y, b, nc, z, kind, p0, p1, nr); break;
        case KILN_ACT_GELU: fe_epilogue_vec<T, KILN_ACT_GELU><<<grid, threads, 0, st>>>(y, b, nc, z, kind, p0, p1, nr); break;
        case KILN_ACT_GELU_TANH:
            fe_epilogue_vec<T, KILN_ACT_GELU_TANH><<<grid, threads, 0, st>>>(y, b, nc, z, kind, p0, p1, nr);
            break;
        case KILN_ACT_SILU: fe_epilogue_vec<T, KILN_ACT_SILU><<<grid, threads, 0, st>>>(y, b, nc, z, kind, p0, p1, nr); break;
        default: fe_epilogue_vec<T, -1><<<grid, threads, 0, st>>>(y, b, nc, z, kind, p0, p1, nr); break;
        }
        KILN_CUDA_LAUNCH_CHECK("fe_epilogue_vec");
        return KILN_OK;
    }
    unsigned blocks = ku_blocks(total, KU_THREADS, ctx);
    fe_epilogue_kernel<T><<<blocks, KU_THREADS, 0, ctx->stream>>>((T *)yp, (const T *)bp, ncol, (const T *)zp, kind, p0,
                                                                  p1, total);
    KILN_CUDA_LAUNCH_CHECK("fe_epilogue_kernel");
    return KILN_OK;
}

/* Applies the node's activation, bias (N values along y's last dim, or NULL) and residual z (absent:
 * ndim -1) to y in place; enqueues nothing when there is nothing to apply. */
static kiln_status fe_epilogue(const kiln_node *n, const kiln_cuda_tensor *y, const kiln_cuda_tensor *bias,
                               const kiln_cuda_tensor *z, kiln_cuda_ctx *ctx) {
    kiln_act act;
    KILN_TRY(kiln_fused_activation(n, &act));
    int64_t total = ku_numel(y);
    const void *bp = bias && !ku_absent(bias) ? bias->data : NULL, *zp = z && !ku_absent(z) ? z->data : NULL;
    if (total == 0 || (act.kind == KILN_ACT_NONE && !bp && !zp)) return KILN_OK;
    int64_t ncol = y->ndim > 0 ? y->dims[y->ndim - 1] : 1;
    if (bp && (bias->dtype != y->dtype || ku_numel(bias) != ncol))
        return kiln_error(KILN_ERR_SHAPE, "%s: the bias has %lld %s elements, Y's last dim is %lld %s", n->op_type,
                          (long long)ku_numel(bias), kiln_dtype_name(bias->dtype), (long long)ncol, kiln_dtype_name(y->dtype));
    if (zp && (z->dtype != y->dtype || ku_numel(z) != total))
        return kiln_error(KILN_ERR_SHAPE, "%s: the residual has %lld %s elements, Y has %lld %s", n->op_type,
                          (long long)ku_numel(z), kiln_dtype_name(z->dtype), (long long)total, kiln_dtype_name(y->dtype));
    int kind = (int)act.kind;
    switch (y->dtype) {
    case KILN_F32: return fe_launch<float>(y->data, bp, ncol, zp, kind, act.p0, act.p1, total, ctx);
    case KILN_F16: return fe_launch<__half>(y->data, bp, ncol, zp, kind, act.p0, act.p1, total, ctx);
    case KILN_BF16: return fe_launch<bf16>(y->data, bp, ncol, zp, kind, act.p0, act.p1, total, ctx);
    default: return ku_refuse_dtype(n, 0, y->dtype);
    }
}

/* Runs the plain op `plain` (its kernel from the dispatch table) on the node's first nplain inputs. */
static kiln_status fe_plain(const char *plain, const kiln_node *n, const kiln_cuda_tensor *in, int nin, int nplain,
                            const kiln_cuda_tensor *out, int nout, kiln_cuda_ctx *ctx) {
    const kiln_cuda_kernel *k = kiln_cuda_kernel_find("", plain);
    if (!k) return kiln_error(KILN_ERR_UNSUPPORTED, "%s: the CUDA backend has no %s kernel", n->op_type, plain);
    return k->exec(n, in, nin < nplain ? nin : nplain, out, nout, ctx);
}

static const kiln_cuda_tensor *fe_input(const kiln_cuda_tensor *in, int nin, int i) {
    return i < nin && !ku_absent(&in[i]) ? &in[i] : NULL;
}

/* The whole node inside cuBLASLt's epilogue when its activation is none or ReLU and the product is
 * one call (kiln_cuda_product_fused); *done says whether it ran. */
static kiln_status fe_in_cublaslt(const kiln_node *n, bool gemm, const kiln_cuda_tensor *in, int nin,
                                  const kiln_cuda_tensor *y, kiln_cuda_ctx *ctx, bool *done) {
    *done = false;
    kiln_act act;
    KILN_TRY(kiln_fused_activation(n, &act));
    if (act.kind != KILN_ACT_NONE && act.kind != KILN_ACT_RELU) return KILN_OK;
    const kiln_cuda_tensor *bias = gemm ? NULL : fe_input(in, nin, 2), *z = fe_input(in, nin, 3);
    if (bias && (bias->dtype != y->dtype || ku_numel(bias) != (y->ndim > 0 ? y->dims[y->ndim - 1] : 1))) return KILN_OK;
    if (z && (z->dtype != y->dtype || ku_numel(z) != ku_numel(y))) return KILN_OK;
    return kiln_cuda_product_fused(n, gemm, in, nin < 3 ? nin : 3, y, bias ? bias->data : NULL, z ? z->data : NULL,
                                   act.kind == KILN_ACT_RELU, ctx, done);
}

/* kiln.FusedGemm: in cuBLASLt's epilogue when it can, else Gemm(A, B, C) (matmul.cu), then act(y + Z). */
static kiln_status exec_fused_gemm(const kiln_node *n, const kiln_cuda_tensor *in, int nin, const kiln_cuda_tensor *out,
                                   int nout, kiln_cuda_ctx *ctx) {
    bool done;
    KILN_TRY(fe_in_cublaslt(n, true, in, nin, &out[0], ctx, &done));
    if (done) return KILN_OK;
    KILN_TRY(fe_plain("Gemm", n, in, nin, 3, out, nout, ctx));
    if (ctx->candidates) return KILN_OK;
    return fe_epilogue(n, &out[0], NULL, fe_input(in, nin, 3), ctx);
}

/* kiln.FusedMatMul: in cuBLASLt's epilogue when it can, else MatMul(A, B) (matmul.cu), then
 * act(y + bias + Z). */
static kiln_status exec_fused_matmul(const kiln_node *n, const kiln_cuda_tensor *in, int nin, const kiln_cuda_tensor *out,
                                     int nout, kiln_cuda_ctx *ctx) {
    bool done;
    KILN_TRY(fe_in_cublaslt(n, false, in, nin, &out[0], ctx, &done));
    if (done) return KILN_OK;
    KILN_TRY(fe_plain("MatMul", n, in, nin, 2, out, nout, ctx));
    if (ctx->candidates) return KILN_OK;
    return fe_epilogue(n, &out[0], fe_input(in, nin, 2), fe_input(in, nin, 3), ctx);
}

/* kiln.FusedConv: conv.cu runs it whole (the fused cuDNN call, or the convolution then this file's
 * epilogue through kiln_cuda_fused_epilogue). */
static kiln_status exec_fused_conv(const kiln_node *n, const kiln_cuda_tensor *in, int nin, const kiln_cuda_tensor *out,
                                   int nout, kiln_cuda_ctx *ctx) {
    return kiln_cuda_fused_conv(n, in, nin, &out[0], ctx);
}

extern "C" kiln_status kiln_cuda_fused_epilogue(const kiln_node *n, const kiln_cuda_tensor *y, const kiln_cuda_tensor *bias,
                                                const kiln_cuda_tensor *z, kiln_cuda_ctx *ctx) {
    return fe_epilogue(n, y, bias, z, ctx);
}

/* The plain op's supports check, then: a known activation, and float inputs of Y's dtype. */
static kiln_status fe_supports(const char *plain, const kiln_graph *g, const kiln_node *n) {
    const kiln_cuda_kernel *k = kiln_cuda_kernel_find("", plain);
    if (!k) return kiln_error(KILN_ERR_UNSUPPORTED, "%s: the CUDA backend has no %s kernel", n->op_type, plain);
    if (k->supports) KILN_TRY(k->supports(g, n));
    kiln_act act;
    KILN_TRY(kiln_fused_activation(n, &act));
    const kiln_value *y = ku_out(g, n, 0);
    for (int i = 0; i < n->ninputs; i++) {
        const kiln_value *v = ku_in(g, n, i);
        if (v && (!ku_is_float(v->dtype) || (y && v->dtype != y->dtype)))
            return kiln_error(KILN_ERR_UNSUPPORTED, "%s: input %d is %s, the output %s", n->op_type, i,
                              kiln_dtype_name(v->dtype), y ? kiln_dtype_name(y->dtype) : "?");
    }
    return KILN_OK;
}

static kiln_status sup_fused_gemm(const kiln_graph *g, const kiln_node *n) { return fe_supports("Gemm", g, n); }
static kiln_status sup_fused_matmul(const kiln_graph *g, const kiln_node *n) { return fe_supports("MatMul", g, n); }
static kiln_status sup_fused_conv(const kiln_graph *g, const kiln_node *n) { return fe_supports("Conv", g, n); }

extern "C" const kiln_cuda_kernel kiln_cuda_kernels_fused_epilogue[] = {
    {"FusedGemm", KILN_FUSED_DOMAIN, exec_fused_gemm, sup_fused_gemm},
    {"FusedMatMul", KILN_FUSED_DOMAIN, exec_fused_matmul, sup_fused_matmul},
    {"FusedConv", KILN_FUSED_DOMAIN, exec_fused_conv, sup_fused_conv},
    {NULL, NULL, NULL, NULL},
};
