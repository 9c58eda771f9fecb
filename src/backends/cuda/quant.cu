/* quant.cu — QuantizeLinear and DequantizeLinear on the GPU, per tensor (one scale and zero point,
 * constants read from their host copies): the activations' Q/DQ pairs that an INT8 engine keeps
 * around its integer layers (kiln.QConv / kiln.QMatMul: quant_gemm.cu) and in front of the layers
 * that stay float. The formulas of the CPU kernels (src/backends/cpu/quant.c):
 *   QuantizeLinear    y = saturate(round_half_even(x / y_scale) + y_zero_point), x in the engine's
 *                     float type taken as float32, the division in float32, NaN to the lowest value;
 *                     y int8, uint8, int16 or uint16;
 *   DequantizeLinear  y = (x - x_zero_point) * x_scale in float32, written in the engine's float type;
 *                     x int8, uint8, int16, uint16 or int32.
 * Per-axis and blocked scales are refused at build time (the build folds the weights' per-channel
 * DequantizeLinear into the integer layers or into float constants, so none reaches the device). */
#include "backends/cuda/kernel_util.cuh"

extern "C" {
#include "ir/quant_ops.h"
}

/* The range of an integer output type (int8, uint8, int16, uint16). */
static void qz_range(kiln_dtype t, float *lo, float *hi) {
    switch (t) {
    case KILN_I8: *lo = -128.0f, *hi = 127.0f; break;
    case KILN_U8: *lo = 0.0f, *hi = 255.0f; break;
    case KILN_I16: *lo = -32768.0f, *hi = 32767.0f; break;
    default: *lo = 0.0f, *hi = 65535.0f; break;
    }
}

template <typename X, typename Y>
__global__ void qz_quantize_kernel(const X *__restrict__ x, int64_t n, float scale, float zp, float lo, float hi,
                                   Y *__restrict__ y) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        float v = __fadd_rn(rintf(__fdiv_rn(ku_f32(x[i]), scale)), zp);
        v = v >= lo ? v : lo; /* NaN gives lo, as the CPU */
        v = v <= hi ? v : hi;
        y[i] = (Y)v;
    }
}

template <typename X, typename Y>
__global__ void qz_dequantize_kernel(const X *__restrict__ x, int64_t n, int32_t zp, float scale, Y *__restrict__ y) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        y[i] = ku_from_f32<Y>(__fmul_rn((float)((int64_t)x[i] - zp), scale));
}

/* The per-tensor scale and zero point of a Q/DQ node from their host copies (zero point absent: 0). */
static kiln_status qz_params(const kiln_node *n, const kiln_cuda_tensor *in, int nin, float *scale, int32_t *zp) {
    const kiln_cuda_tensor *s = &in[1], *z = nin > 2 && !ku_absent(&in[2]) ? &in[2] : NULL;
    if (!s->host || s->host_dtype != KILN_F32 || ku_numel(s) != 1 || (z && (!z->host || ku_numel(z) != 1)))
        return kiln_error(KILN_ERR_UNSUPPORTED, "%s '%s' (cuda): needs a constant float32 scale and zero point of one "
                          "element each", n->op_type, n->name);
    *scale = *(const float *)s->host;
    *zp = 0;
    if (z) {
        switch (z->host_dtype) {
        case KILN_I8: *zp = *(const int8_t *)z->host; break;
        case KILN_U8: *zp = *(const uint8_t *)z->host; break;
        case KILN_I16: *zp = *(const int16_t *)z->host; break;
        case KILN_U16: *zp = *(const uint16_t *)z->host; break;
        case KILN_I32: *zp = *(const int32_t *)z->host; break;
        default: return ku_refuse_dtype(n, 2, z->host_dtype);
        }
    }
    return KILN_OK;
}

template <typename X>
static kiln_status qz_quantize_to(const kiln_node *n, const X *x, int64_t total, float scale, int32_t zp,
                                  const kiln_cuda_tensor *y, kiln_cuda_ctx *ctx) {
    float lo, hi;
    qz_range(y->dtype, &lo, &hi);
    unsigned blocks = ku_blocks(total, KU_THREADS, ctx, 4);
    cudaStream_t st = ctx->stream;
    switch (y->dtype) {
    case KILN_I8: qz_quantize_kernel<<<blocks, KU_THREADS, 0, st>>>(x, total, scale, (float)zp, lo, hi, (int8_t *)y->data); break;
    case KILN_U8: qz_quantize_kernel<<<blocks, KU_THREADS, 0, st>>>(x, total, scale, (float)zp, lo, hi, (uint8_t *)y->data); break;
    case KILN_I16: qz_quantize_kernel<<<blocks, KU_THREADS, 0, st>>>(x, total, scale, (float)zp, lo, hi, (int16_t *)y->data); break;
    case KILN_U16: qz_quantize_kernel<<<blocks, KU_THREADS, 0, st>>>(x, total, scale, (float)zp, lo, hi, (uint16_t *)y->data); break;
    default: return ku_refuse_dtype(n, 0, y->dtype);
    }
    KILN_CUDA_LAUNCH_CHECK("qz_quantize_kernel");
    return KILN_OK;
}

static kiln_status exec_quantize(const kiln_node *n, const kiln_cuda_tensor *in, int nin, const kiln_cuda_tensor *out,
                                 int nout, kiln_cuda_ctx *ctx) {
    (void)nout;
    float scale = 1.0f;
    int32_t zp = 0;
    KILN_TRY(qz_params(n, in, nin, &scale, &zp));
    int64_t total = ku_numel(&in[0]);
    if (total == 0) return KILN_OK;
    switch (in[0].dtype) {
    case KILN_F32: return qz_quantize_to(n, (const float *)in[0].data, total, scale, zp, &out[0], ctx);
    case KILN_F16: return qz_quantize_to(n, (const __half *)in[0].data, total, scale, zp, &out[0], ctx);
    case KILN_BF16: return qz_quantize_to(n, (const bf16 *)in[0].data, total, scale, zp, &out[0], ctx);
    default: return ku_refuse_dtype(n, 0, in[0].dtype);
    }
}

template <typename Y>
static kiln_status qz_dequantize_to(const kiln_node *n, const kiln_cuda_tensor *x, float scale, int32_t zp, Y *y,
                                    kiln_cuda_ctx *ctx) {
    int64_t total = ku_numel(x);
    unsigned blocks = ku_blocks(total, KU_THREADS, ctx, 4);
    cudaStream_t st = ctx->stream;
    switch (x->dtype) {
    case KILN_I8: qz_dequantize_kernel<<<blocks, KU_THREADS, 0, st>>>((const int8_t *)x->data, total, zp, scale, y); break;
    case KILN_U8: qz_dequantize_kernel<<<blocks, KU_THREADS, 0, st>>>((const uint8_t *)x->data, total, zp, scale, y); break;
    case KILN_I16: qz_dequantize_kernel<<<blocks, KU_THREADS, 0, st>>>((const int16_t *)x->data, total, zp, scale, y); break;
    case KILN_U16: qz_dequantize_kernel<<<blocks, KU_THREADS, 0, st>>>((const uint16_t *)x->data, total, zp, scale, y); break;
    case KILN_I32: qz_dequantize_kernel<<<blocks, KU_THREADS, 0, st>>>((const int32_t *)x->data, total, zp, scale, y); break;
    default: return ku_refuse_dtype(n, 0, x->dtype);
    }
    KILN_CUDA_LAUNCH_CHECK("qz_dequantize_kernel");
    return KILN_OK;
}

static kiln_status exec_dequantize(const kiln_node *n, const kiln_cuda_tensor *in, int nin, const kiln_cuda_tensor *out,
                                   int nout, kiln_cuda_ctx *ctx) {
    (void)nout;
    float scale = 1.0f;
    int32_t zp = 0;
    KILN_TRY(qz_params(n, in, nin, &scale, &zp));
    if (ku_numel(&in[0]) == 0) return KILN_OK;
    switch (out[0].dtype) {
    case KILN_F32: return qz_dequantize_to(n, &in[0], scale, zp, (float *)out[0].data, ctx);
    case KILN_F16: return qz_dequantize_to(n, &in[0], scale, zp, (__half *)out[0].data, ctx);
    case KILN_BF16: return qz_dequantize_to(n, &in[0], scale, zp, (bf16 *)out[0].data, ctx);
    default: return ku_refuse_dtype(n, 0, out[0].dtype);
    }
}

/* Whether value vid is a one-element constant the host can read (a per-tensor parameter). */
static bool qz_scalar_on_host(const kiln_graph *g, int vid) {
    if (vid < 0 || !kiln_cuda_value_on_host(g, vid)) return false;
    const kiln_value *v = &g->values[vid];
    if (v->ndim < 0) return false;
    for (int d = 0; d < v->ndim; d++)
        if (v->dims[d].sym != 0 || v->dims[d].value != 1) return false;
    return true;
}

/* Both ops: per-tensor parameters known on the host, no block_size. */
static kiln_status sup_qdq_params(const kiln_graph *g, const kiln_node *n) {
    if (kiln_attr_int(n, "block_size", 0) != 0)
        return kiln_error(KILN_ERR_UNSUPPORTED, "%s '%s' (cuda): blocked scales are not supported", n->op_type, n->name);
    bool zp_ok = n->ninputs < 3 || n->inputs[2] < 0 || qz_scalar_on_host(g, n->inputs[2]);
    if (n->ninputs < 2 || !qz_scalar_on_host(g, n->inputs[1]) || !zp_ok)
        return kiln_error(KILN_ERR_UNSUPPORTED, "%s '%s' (cuda): per-tensor constant scale and zero point only (per-axis "
                          "ones run on the CPU backend)", n->op_type, n->name);
    return KILN_OK;
}

static kiln_status sup_quantize(const kiln_graph *g, const kiln_node *n) {
    KILN_TRY(sup_qdq_params(g, n));
    const kiln_value *x = ku_in(g, n, 0), *y = ku_out(g, n, 0);
    if (!x || !ku_is_float(x->dtype)) return ku_refuse_dtype(n, 0, x ? x->dtype : KILN_UNDEFINED);
    if (!y || !kiln_quant_dtype_ok(y->dtype)) return ku_refuse_dtype(n, 0, y ? y->dtype : KILN_UNDEFINED);
    return KILN_OK;
}

static kiln_status sup_dequantize(const kiln_graph *g, const kiln_node *n) {
    KILN_TRY(sup_qdq_params(g, n));
    const kiln_value *x = ku_in(g, n, 0), *y = ku_out(g, n, 0);
    if (!x || !(kiln_quant_dtype_ok(x->dtype) || x->dtype == KILN_I32))
        return ku_refuse_dtype(n, 0, x ? x->dtype : KILN_UNDEFINED);
    if (!y || !ku_is_float(y->dtype)) return ku_refuse_dtype(n, 0, y ? y->dtype : KILN_UNDEFINED);
    return KILN_OK;
}

extern "C" const kiln_cuda_kernel kiln_cuda_kernels_quantize[] = {
    {"QuantizeLinear", "", exec_quantize, sup_quantize},
    {"DequantizeLinear", "", exec_dequantize, sup_dequantize},
    {NULL, NULL, NULL, NULL},
};
