/* quant.c — CPU QuantizeLinear, DequantizeLinear and DynamicQuantizeLinear (ONNX opsets 10-25 for
 * the integer types), and the quantization family's kernel table.
 *   QuantizeLinear    y = saturate(round_half_even(x / y_scale) + y_zero_point), the division in
 *                     float32; y's type is the zero point's, else output_dtype, else uint8.
 *   DequantizeLinear  y = (x - x_zero_point) * x_scale in float32.
 * Scales and zero points are per-tensor (one element), per-axis (1-D along `axis`) or blocked
 * (opset 21 block_size: the input's rank, axis dimension ceil(D / block_size)). */
#include "backends/cpu/quant_kernels.h"

#include "backends/cpu/cpu_simd.h"
#include "core/status.h"
#include "ir/quant_ops.h"

#include <math.h>
#include <string.h>

void quant_range(kiln_dtype t, int32_t *lo, int32_t *hi) {
    switch (t) {
    case KILN_I8: *lo = INT8_MIN; *hi = INT8_MAX; break;
    case KILN_U8: *lo = 0; *hi = UINT8_MAX; break;
    case KILN_I16: *lo = INT16_MIN; *hi = INT16_MAX; break;
    case KILN_U16: *lo = 0; *hi = UINT16_MAX; break;
    default: *lo = INT32_MIN; *hi = INT32_MAX; break;
    }
}

void quant_store(void *y, kiln_dtype t, int64_t i, int32_t v) {
    switch (t) {
    case KILN_I8: ((int8_t *)y)[i] = (int8_t)v; break;
    case KILN_U8: ((uint8_t *)y)[i] = (uint8_t)v; break;
    case KILN_I16: ((int16_t *)y)[i] = (int16_t)v; break;
    case KILN_U16: ((uint16_t *)y)[i] = (uint16_t)v; break;
    default: ((int32_t *)y)[i] = v; break;
    }
}

int32_t quant_load(const void *x, kiln_dtype t, int64_t i) {
    switch (t) {
    case KILN_I8: return ((const int8_t *)x)[i];
    case KILN_U8: return ((const uint8_t *)x)[i];
    case KILN_I16: return ((const int16_t *)x)[i];
    case KILN_U16: return ((const uint16_t *)x)[i];
    default: return ((const int32_t *)x)[i];
    }
}

/* How x's elements map to scale elements: x is [outer, dim, inner] around the quantization axis;
 * element (o, a, k) reads scale[base(o, a) + k * step] with base = (o * sdim + a / block) * inner
 * and step 1 (blocked), base = a and step 0 (per-axis), or base = step = 0 (per-tensor, then
 * outer = dim = 1 and inner = numel). */
typedef struct q_layout {
    int64_t outer, dim, inner, block, sdim;
    bool blocked;
} q_layout;

static int64_t q_base(const q_layout *L, int64_t o, int64_t a) {
    if (L->blocked) return (o * L->sdim + a / L->block) * L->inner;
    return L->dim == 1 && L->outer == 1 ? 0 : a;
}

/* Checks scale s and zero point zp (may be NULL) against x for n's axis and block_size; fills L. */
static kiln_status q_layout_make(const kiln_node *n, const kiln_tensor *x, const kiln_tensor *s, const kiln_tensor *zp,
                                 q_layout *L) {
    if (s->dtype != KILN_F32)
        return kiln_error(KILN_ERR_UNSUPPORTED, "%s: the scale is %s; kiln takes float32 scales", n->op_type,
                          kiln_dtype_name(s->dtype));
    if (zp && kiln_tensor_numel(zp) != kiln_tensor_numel(s))
        return kiln_error(KILN_ERR_SHAPE, "%s: the zero point has %lld elements, the scale %lld", n->op_type,
                          (long long)kiln_tensor_numel(zp), (long long)kiln_tensor_numel(s));
    int64_t block = kiln_attr_int(n, "block_size", 0), numel = kiln_tensor_numel(x);
    memset(L, 0, sizeof *L);
    if (block < 0) return kiln_error(KILN_ERR_INVALID_ARGUMENT, "%s: block_size %lld is negative", n->op_type, (long long)block);
    if (block == 0 && s->ndim <= 1 && kiln_tensor_numel(s) == 1) {
        *L = (q_layout){1, 1, numel, 1, 1, false};
        return KILN_OK;
    }
    int axis;
    KILN_TRY(kiln_axis_normalize(kiln_attr_int(n, "axis", 1), x->ndim, &axis));
    L->dim = x->dims[axis];
    L->outer = kiln_numel(axis, x->dims);
    L->inner = kiln_numel(x->ndim - axis - 1, x->dims + axis + 1);
    if (block == 0) {
        if (s->ndim != 1 || s->dims[0] != L->dim)
            return kiln_error(KILN_ERR_SHAPE, "%s: a per-axis scale must be 1-D with %lld elements (axis %d)", n->op_type,
                              (long long)L->dim, axis);
        L->block = 1;
        L->sdim = L->dim;
        return KILN_OK;
    }
    if (s->ndim != x->ndim)
        return kiln_error(KILN_ERR_SHAPE, "%s: a blocked scale must have the input's rank %d", n->op_type, x->ndim);
    for (int d = 0; d < x->ndim; d++) {
        int64_t want = d == axis ? (x->dims[d] + block - 1) / block : x->dims[d];
        if (s->dims[d] != want)
            return kiln_error(KILN_ERR_SHAPE, "%s: blocked scale dimension %d is %lld, expected %lld", n->op_type, d,
                              (long long)s->dims[d], (long long)want);
    }
    L->blocked = true;
    L->block = block;
    L->sdim = s->dims[axis];
    return KILN_OK;
}

/* y[i] = saturate(round_half_even(x[i] / s) + zp) into [lo, hi] for 8-bit T (NaN gives lo): the
 * per-tensor float32 case, vectorized. */
#define DEFINE_QUANTIZE_RUN(T)                                                                     \
    KILN_SIMD_CLONES QUANT_VECTORIZE static void quantize_run_##T(const float *x, int64_t n, float s,  \
                                                                  float zp, float lo, float hi, T *y) { \
        for (int64_t i = 0; i < n; i++) {                                                          \
            float v = __builtin_rintf(x[i] / s) + zp;                                              \
            v = v >= lo ? v : lo;                                                                  \
            v = v <= hi ? v : hi;                                                                  \
            y[i] = (T)v;                                                                           \
        }                                                                                          \
    }
DEFINE_QUANTIZE_RUN(int8_t)
DEFINE_QUANTIZE_RUN(uint8_t)

/* QuantizeLinear: x (float32 or int32), y_scale, y_zero_point (optional). */
NN_EXEC(kiln_cpu_quantize_linear) {
    (void)nout;
    KILN_TRY(nn_require_inputs(n, in, nin, 2));
    const kiln_tensor *x = in[0], *s = in[1], *zp = nin > 2 ? in[2] : NULL;
    if (x->dtype != KILN_F32 && x->dtype != KILN_I32)
        return kiln_error(KILN_ERR_UNSUPPORTED, "QuantizeLinear of %s is not supported (float32, int32 are)",
                          kiln_dtype_name(x->dtype));
    int64_t od = kiln_attr_int(n, "output_dtype", 0);
    kiln_dtype yt = zp ? zp->dtype : od ? (kiln_dtype)od : KILN_U8;
    if (!kiln_quant_dtype_ok(yt))
        return kiln_error(KILN_ERR_UNSUPPORTED, "QuantizeLinear to %s is not supported", kiln_dtype_name(yt));
    if (zp && od && od != zp->dtype)
        return kiln_error(KILN_ERR_INVALID_ARGUMENT, "QuantizeLinear output_dtype %s differs from the zero point's %s",
                          kiln_dtype_name((kiln_dtype)od), kiln_dtype_name(zp->dtype));
    q_layout L;
    KILN_TRY(q_layout_make(n, x, s, zp, &L));
    KILN_TRY(kiln_tensor_alloc_uninit(out[0], yt, x->ndim, x->dims));
    int32_t lo, hi;
    quant_range(yt, &lo, &hi);
    const float *sc = s->data, *xf = x->data;
    const int32_t *xi = x->data;
    void *y = out[0]->data;
    float z0 = zp ? (float)quant_load(zp->data, yt, 0) : 0.0f;
    if (L.outer == 1 && L.dim == 1 && x->dtype == KILN_F32 && (yt == KILN_I8 || yt == KILN_U8)) {
        if (yt == KILN_I8) quantize_run_int8_t(xf, L.inner, sc[0], z0, (float)lo, (float)hi, y);
        else quantize_run_uint8_t(xf, L.inner, sc[0], z0, (float)lo, (float)hi, y);
        return KILN_OK;
    }
    int64_t step = L.blocked ? 1 : 0, i = 0;
    for (int64_t o = 0; o < L.outer; o++)
        for (int64_t a = 0; a < L.dim; a++) {
            int64_t base = q_base(&L, o, a);
            for (int64_t k = 0; k < L.inner; k++, i++) {
                int64_t si = base + k * step;
                float v = x->dtype == KILN_F32 ? xf[i] : (float)xi[i];
                float q = __builtin_rintf(v / sc[si]) + (float)(zp ? quant_load(zp->data, yt, si) : 0);
                quant_store(y, yt, i, quant_round_sat(q, lo, hi));
            }
        }
    return KILN_OK;
}

/* DequantizeLinear: x (8/16-bit integer or int32), x_scale, x_zero_point (optional). */
NN_EXEC(kiln_cpu_dequantize_linear) {
    (void)nout;
    KILN_TRY(nn_require_inputs(n, in, nin, 2));
    const kiln_tensor *x = in[0], *s = in[1], *zp = nin > 2 ? in[2] : NULL;
    if (!kiln_quant_dtype_ok(x->dtype) && x->dtype != KILN_I32)
        return kiln_error(KILN_ERR_UNSUPPORTED, "DequantizeLinear of %s is not supported", kiln_dtype_name(x->dtype));
    if (zp && zp->dtype != x->dtype)
        return kiln_error(KILN_ERR_INVALID_ARGUMENT, "DequantizeLinear: the zero point is %s, x is %s",
                          kiln_dtype_name(zp->dtype), kiln_dtype_name(x->dtype));
    q_layout L;
    KILN_TRY(q_layout_make(n, x, s, zp, &L));
    KILN_TRY(kiln_tensor_alloc_uninit(out[0], KILN_F32, x->ndim, x->dims));
    const float *sc = s->data;
    float *y = out[0]->data;
    int64_t step = L.blocked ? 1 : 0, i = 0;
    for (int64_t o = 0; o < L.outer; o++)
        for (int64_t a = 0; a < L.dim; a++) {
            int64_t base = q_base(&L, o, a);
            for (int64_t k = 0; k < L.inner; k++, i++) {
                int64_t si = base + k * step;
                int64_t d = (int64_t)quant_load(x->data, x->dtype, i) - (zp ? quant_load(zp->data, x->dtype, si) : 0);
                y[i] = (float)d * sc[si];
            }
        }
    return KILN_OK;
}

/* DynamicQuantizeLinear: uint8 with the range [min(x, 0), max(x, 0)] mapped onto [0, 255]:
 * y_scale = (max - min) / 255 (1 when the range is empty, as onnxruntime does), y_zero_point =
 * saturate(round(-min / y_scale)), y = saturate(round(x / y_scale) + y_zero_point). */
NN_EXEC(kiln_cpu_dynamic_quantize_linear) {
    KILN_TRY(nn_require_inputs(n, in, nin, 1));
    const kiln_tensor *x = in[0];
    if (x->dtype != KILN_F32)
        return kiln_error(KILN_ERR_UNSUPPORTED, "DynamicQuantizeLinear of %s is not supported (float32 is)",
                          kiln_dtype_name(x->dtype));
    const float *xv = x->data;
    int64_t numel = kiln_tensor_numel(x);
    float mn = 0.0f, mx = 0.0f;
    for (int64_t i = 0; i < numel; i++) {
        if (xv[i] < mn) mn = xv[i];
        if (xv[i] > mx) mx = xv[i];
    }
    float scale = mx > mn ? (mx - mn) / 255.0f : 1.0f;
    int32_t zp = quant_round_sat(0.0f - mn / scale, 0, 255);
    KILN_TRY(kiln_tensor_alloc_uninit(out[0], KILN_U8, x->ndim, x->dims));
    uint8_t *y = out[0]->data;
    for (int64_t i = 0; i < numel; i++) y[i] = (uint8_t)quant_round_sat(__builtin_rintf(xv[i] / scale) + (float)zp, 0, 255);
    if (nout > 1 && out[1]) {
        KILN_TRY(kiln_tensor_alloc_uninit(out[1], KILN_F32, 0, NULL));
        *(float *)out[1]->data = scale;
    }
    if (nout > 2 && out[2]) {
        KILN_TRY(kiln_tensor_alloc_uninit(out[2], KILN_U8, 0, NULL));
        *(uint8_t *)out[2]->data = (uint8_t)zp;
    }
    return KILN_OK;
}


const kiln_cpu_kernel kiln_cpu_kernels_quant[] = {
    {"QuantizeLinear", "", kiln_cpu_quantize_linear},
    {"DequantizeLinear", "", kiln_cpu_dequantize_linear},
    {"DynamicQuantizeLinear", "", kiln_cpu_dynamic_quantize_linear},
    {"MatMulInteger", "", kiln_cpu_matmul_integer},
    {"QLinearMatMul", "", kiln_cpu_qlinear_matmul},
    {"ConvInteger", "", kiln_cpu_conv_integer},
    {"QLinearConv", "", kiln_cpu_qlinear_conv},
    {"QConv", KILN_FUSED_DOMAIN, kiln_cpu_kiln_qconv},
    {"QMatMul", KILN_FUSED_DOMAIN, kiln_cpu_kiln_qmatmul},
    {"F8MatMul", KILN_FUSED_DOMAIN, kiln_cpu_kiln_f8matmul},
    {0},
};
