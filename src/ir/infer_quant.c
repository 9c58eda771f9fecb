/* infer_quant.c — shape and type inference for the quantization op family: QuantizeLinear,
 * DequantizeLinear, DynamicQuantizeLinear, MatMulInteger, QLinearMatMul, ConvInteger and QLinearConv
 * (ONNX), and kiln.QConv / kiln.QMatMul (the integer layers the Q/DQ folding pass makes, semantics in
 * ir/quant_ops.h). Integer products take MatMul's shape rule and the convolutions the window geometry
 * of nn_window.c, so build-time and run-time shapes agree with the float ops. */
#include "ir/op_schema.h"
#include "ir/quant_ops.h"

#include "core/status.h"
#include "ir/nn_window.h"

#include <string.h>

static bool is_8bit(kiln_dtype t) { return t == KILN_U8 || t == KILN_I8; }

/* Fails unless input i, when typed, is int8 or uint8. */
static kiln_status require_8bit(const kiln_graph *g, const kiln_node *n, int i, const char *what) {
    kiln_value *v = kiln_node_input(g, n, i);
    if (!v || v->dtype == KILN_UNDEFINED || is_8bit(v->dtype)) return KILN_OK;
    return kiln_error(KILN_ERR_UNSUPPORTED, "%s: %s is %s; kiln computes it for int8 and uint8", n->op_type, what,
                      kiln_dtype_name(v->dtype));
}

/* Fails unless scale input i, when typed, is float32. */
static kiln_status require_f32_scale(const kiln_graph *g, const kiln_node *n, int i) {
    kiln_value *v = kiln_node_input(g, n, i);
    if (!v || v->dtype == KILN_UNDEFINED || v->dtype == KILN_F32) return KILN_OK;
    return kiln_error(KILN_ERR_UNSUPPORTED, "%s: scale input %d is %s; kiln takes float32 scales", n->op_type, i,
                      kiln_dtype_name(v->dtype));
}

/* The quantized type QuantizeLinear produces: its zero point's type, else output_dtype, else uint8. */
static kiln_dtype quantize_out_dtype(const kiln_graph *g, const kiln_node *n) {
    kiln_value *zp = kiln_node_input(g, n, 2);
    if (zp && zp->dtype != KILN_UNDEFINED) return zp->dtype;
    int64_t od = kiln_attr_int(n, "output_dtype", 0);
    return od ? (kiln_dtype)od : KILN_U8;
}

/* Checks the scale (input si) against x (input 0) for axis / block_size, where shapes are known. */
static kiln_status check_scale_shape(const kiln_graph *g, const kiln_node *n, int si) {
    kiln_value *x = kiln_node_input(g, n, 0), *s = kiln_node_input(g, n, si);
    if (!x || !s || x->ndim < 0 || s->ndim < 0) return KILN_OK;
    int64_t block = kiln_attr_int(n, "block_size", 0);
    if (block < 0) return kiln_error(KILN_ERR_INVALID_ARGUMENT, "%s: block_size %lld is negative", n->op_type, (long long)block);
    bool scalar = s->ndim == 0 || (s->ndim == 1 && s->dims[0].sym == 0 && s->dims[0].value == 1 && block == 0);
    if (scalar) return KILN_OK;
    int axis;
    KILN_TRY(kiln_axis_normalize(kiln_attr_int(n, "axis", 1), x->ndim, &axis));
    kiln_dim xd = x->dims[axis];
    if (block == 0) {
        if (s->ndim != 1)
            return kiln_error(KILN_ERR_SHAPE, "%s: a per-axis scale must be 1-D, has rank %d", n->op_type, s->ndim);
        if (s->dims[0].sym == 0 && xd.sym == 0 && s->dims[0].value != xd.value)
            return kiln_error(KILN_ERR_SHAPE, "%s: the scale has %lld elements, axis %d of the input %lld", n->op_type,
                              (long long)s->dims[0].value, axis, (long long)xd.value);
        return KILN_OK;
    }
    if (s->ndim != x->ndim)
        return kiln_error(KILN_ERR_SHAPE, "%s: a blocked scale must have the input's rank %d, has rank %d", n->op_type,
                          x->ndim, s->ndim);
    for (int d = 0; d < x->ndim; d++) {
        kiln_dim sd = s->dims[d], want = x->dims[d];
        if (d == axis && want.sym == 0) want = kiln_dim_static((want.value + block - 1) / block);
        if (sd.sym == 0 && want.sym == 0 && sd.value != want.value)
            return kiln_error(KILN_ERR_SHAPE, "%s: blocked scale dimension %d is %lld, expected %lld", n->op_type, d,
                              (long long)sd.value, (long long)want.value);
    }
    return KILN_OK;
}

/* QuantizeLinear: y = saturate(round(x / y_scale) + y_zero_point), x's shape. */
static kiln_status infer_quantize(kiln_graph *g, kiln_node *n) {
    if (n->ninputs < 2) return kiln_error(KILN_ERR_INVALID_ARGUMENT, "QuantizeLinear needs x and y_scale");
    kiln_dtype out = quantize_out_dtype(g, n);
    if (!kiln_quant_dtype_ok(out))
        return kiln_error(KILN_ERR_UNSUPPORTED, "QuantizeLinear to %s is not supported (int8, uint8, int16, uint16 are)",
                          kiln_dtype_name(out));
    int64_t precision = kiln_attr_int(n, "precision", 0);
    if (precision != 0 && precision != KILN_F32)
        return kiln_error(KILN_ERR_UNSUPPORTED, "QuantizeLinear precision %s is not supported (float32 is)",
                          kiln_dtype_name((kiln_dtype)precision));
    KILN_TRY(require_f32_scale(g, n, 1));
    KILN_TRY(check_scale_shape(g, n, 1));
    kiln_value *x = kiln_node_input(g, n, 0);
    kiln_infer_set(g, n, 0, out, x ? x->ndim : -1, x ? x->dims : NULL);
    return KILN_OK;
}

/* DequantizeLinear: y = (x - x_zero_point) * x_scale in the scale's type (float32), x's shape. */
static kiln_status infer_dequantize(kiln_graph *g, kiln_node *n) {
    if (n->ninputs < 2) return kiln_error(KILN_ERR_INVALID_ARGUMENT, "DequantizeLinear needs x and x_scale");
    kiln_value *x = kiln_node_input(g, n, 0);
    if (x && x->dtype != KILN_UNDEFINED && !kiln_quant_dtype_ok(x->dtype) && x->dtype != KILN_I32)
        return kiln_error(KILN_ERR_UNSUPPORTED, "DequantizeLinear of %s is not supported (int8, uint8, int16, uint16, "
                          "int32 are)", kiln_dtype_name(x->dtype));
    int64_t od = kiln_attr_int(n, "output_dtype", 0);
    if (od != 0 && od != KILN_F32)
        return kiln_error(KILN_ERR_UNSUPPORTED, "DequantizeLinear output_dtype %s is not supported (float32 is)",
                          kiln_dtype_name((kiln_dtype)od));
    KILN_TRY(require_f32_scale(g, n, 1));
    KILN_TRY(check_scale_shape(g, n, 1));
    kiln_infer_set(g, n, 0, KILN_F32, x ? x->ndim : -1, x ? x->dims : NULL);
    return KILN_OK;
}

/* DynamicQuantizeLinear: y uint8 of x's shape, y_scale float32 and y_zero_point uint8 scalars. */
static kiln_status infer_dynamic_quantize(kiln_graph *g, kiln_node *n) {
    kiln_value *x = kiln_node_input(g, n, 0);
    if (!x) return kiln_error(KILN_ERR_INVALID_ARGUMENT, "DynamicQuantizeLinear needs x");
    if (x->dtype != KILN_UNDEFINED && x->dtype != KILN_F32)
        return kiln_error(KILN_ERR_UNSUPPORTED, "DynamicQuantizeLinear of %s is not supported (float32 is)",
                          kiln_dtype_name(x->dtype));
    kiln_infer_set(g, n, 0, KILN_U8, x->ndim, x->dims);
    kiln_infer_set(g, n, 1, KILN_F32, 0, NULL);
    kiln_infer_set(g, n, 2, KILN_U8, 0, NULL);
    return KILN_OK;
}

/* Runs MatMul's inference on inputs a and b of n and gives output 0 dtype out. */
static kiln_status infer_product(kiln_graph *g, kiln_node *n, int a, int b, kiln_dtype out) {
    int ins[2] = {a < n->ninputs ? n->inputs[a] : -1, b < n->ninputs ? n->inputs[b] : -1};
    if (ins[0] < 0 || ins[1] < 0) return kiln_error(KILN_ERR_INVALID_ARGUMENT, "%s needs both matrix operands", n->op_type);
    kiln_node t = *n;
    t.op_type = "MatMul";
    t.inputs = ins;
    t.ninputs = 2;
    t.nattrs = 0;
    const kiln_op_schema *s = kiln_op_schema_find("", "MatMul");
    KILN_ASSERT(s && s->infer);
    KILN_TRY(kiln_error_prefix(s->infer(g, &t), "%s", n->op_type));
    kiln_value *y = kiln_node_output(g, n, 0);
    if (y) y->dtype = out;
    return KILN_OK;
}

/* The output shape of a convolution of x (input xi) by w (input wi) with n's window attributes:
 * Conv's rule (group, pads, strides, dilations, auto_pad), dtype out. */
static kiln_status infer_conv_shape(kiln_graph *g, kiln_node *n, int xi, int wi, kiln_dtype out) {
    kiln_value *x = kiln_node_input(g, n, xi), *w = kiln_node_input(g, n, wi);
    if (!x || !w) return kiln_error(KILN_ERR_INVALID_ARGUMENT, "%s needs inputs x and w", n->op_type);
    int rank;
    kiln_dim od[KILN_MAX_DIMS];
    KILN_TRY(kiln_window_conv_shape(n, x, w, &rank, od));
    kiln_infer_set(g, n, 0, out, rank, od);
    return KILN_OK;
}

/* The dtype of n's input i, or dflt when it is absent or untyped. */
static kiln_dtype input_dtype(const kiln_graph *g, const kiln_node *n, int i, kiln_dtype dflt) {
    kiln_value *v = kiln_node_input(g, n, i);
    return v && v->dtype != KILN_UNDEFINED ? v->dtype : dflt;
}

/* MatMulInteger: A, B, a_zero_point, b_zero_point -> int32 [MatMul shape]. */
static kiln_status infer_matmul_integer(kiln_graph *g, kiln_node *n) {
    KILN_TRY(require_8bit(g, n, 0, "A"));
    KILN_TRY(require_8bit(g, n, 1, "B"));
    return infer_product(g, n, 0, 1, KILN_I32);
}

/* QLinearMatMul: a, a_scale, a_zp, b, b_scale, b_zp, y_scale, y_zp -> y_zp's type [MatMul shape]. */
static kiln_status infer_qlinear_matmul(kiln_graph *g, kiln_node *n) {
    if (n->ninputs < 8) return kiln_error(KILN_ERR_INVALID_ARGUMENT, "QLinearMatMul needs 8 inputs, has %d", n->ninputs);
    KILN_TRY(require_8bit(g, n, 0, "a"));
    KILN_TRY(require_8bit(g, n, 3, "b"));
    KILN_TRY(require_8bit(g, n, 7, "y_zero_point"));
    KILN_TRY(require_f32_scale(g, n, 1));
    KILN_TRY(require_f32_scale(g, n, 4));
    KILN_TRY(require_f32_scale(g, n, 6));
    return infer_product(g, n, 0, 3, input_dtype(g, n, 7, KILN_U8));
}

/* ConvInteger: x, w, x_zero_point, w_zero_point -> int32 [Conv shape]. */
static kiln_status infer_conv_integer(kiln_graph *g, kiln_node *n) {
    KILN_TRY(require_8bit(g, n, 0, "x"));
    KILN_TRY(require_8bit(g, n, 1, "w"));
    return infer_conv_shape(g, n, 0, 1, KILN_I32);
}

/* QLinearConv: x, x_scale, x_zp, w, w_scale, w_zp, y_scale, y_zp, B -> y_zp's type [Conv shape]. */
static kiln_status infer_qlinear_conv(kiln_graph *g, kiln_node *n) {
    if (n->ninputs < 8) return kiln_error(KILN_ERR_INVALID_ARGUMENT, "QLinearConv needs 8 or 9 inputs, has %d", n->ninputs);
    KILN_TRY(require_8bit(g, n, 0, "x"));
    KILN_TRY(require_8bit(g, n, 3, "w"));
    KILN_TRY(require_8bit(g, n, 7, "y_zero_point"));
    KILN_TRY(require_f32_scale(g, n, 1));
    KILN_TRY(require_f32_scale(g, n, 4));
    KILN_TRY(require_f32_scale(g, n, 6));
    kiln_value *b = kiln_node_input(g, n, 8);
    if (b && b->dtype != KILN_UNDEFINED && b->dtype != KILN_I32)
        return kiln_error(KILN_ERR_INVALID_ARGUMENT, "QLinearConv bias must be int32, is %s", kiln_dtype_name(b->dtype));
    return infer_conv_shape(g, n, 0, 3, input_dtype(g, n, 7, KILN_U8));
}

/* Fails unless kiln.QConv n's residual R (input 3, present), when typed and shaped, has the output's
 * shape y and is 8-bit with r_scale given and r_zero_point in its range, or float32 without r_scale. */
static kiln_status check_residual(const kiln_graph *g, const kiln_node *n, const kiln_quant_layer *q,
                                  const kiln_value *y) {
    const kiln_value *r = kiln_node_input(g, n, 3);
    bool is_float = r->dtype == KILN_F32;
    if (!is_float) KILN_TRY(require_8bit(g, n, 3, "the residual R"));
    if (!is_float && r->dtype != KILN_UNDEFINED && q->r_scale <= 0.0f)
        return kiln_error(KILN_ERR_INVALID_ARGUMENT, "%s '%s': an 8-bit residual R needs r_scale", n->op_type, n->name);
    if (is_float && q->r_scale > 0.0f)
        return kiln_error(KILN_ERR_INVALID_ARGUMENT, "%s '%s': a float residual R takes no r_scale", n->op_type, n->name);
    if (r->dtype == KILN_U8 ? q->r_zero_point < 0 : r->dtype == KILN_I8 && q->r_zero_point > 127)
        return kiln_error(KILN_ERR_INVALID_ARGUMENT, "%s '%s': r_zero_point %d is outside %s's range", n->op_type,
                          n->name, (int)q->r_zero_point, kiln_dtype_name(r->dtype));
    if (r->ndim < 0 || !y || y->ndim < 0) return KILN_OK;
    bool same = r->ndim == y->ndim;
    for (int i = 0; same && i < r->ndim; i++)
        same = !kiln_dim_is_static(r->dims[i]) || !kiln_dim_is_static(y->dims[i]) || r->dims[i].value == y->dims[i].value;
    if (!same) return kiln_error(KILN_ERR_SHAPE, "%s '%s': the residual R's shape is not the output's", n->op_type, n->name);
    return KILN_OK;
}

/* dims[1..rank) rotated: to_first moves the last dim to position 1 (NHWC -> NCHW order), else
 * position 1 to the end. */
static void rotate_channels(kiln_dim *dims, int rank, bool to_first) {
    if (rank < 3) return;
    kiln_dim t[KILN_MAX_DIMS];
    memcpy(t, dims, sizeof *t * (size_t)rank);
    for (int d = 1; d < rank; d++) dims[d] = to_first ? t[d == 1 ? rank - 1 : d - 1] : t[d == rank - 1 ? 1 : d + 1];
}

/* kiln.QConv with channels_last = 1: Conv's shape on NCHW views of X [N, H, W, C] and W [M, kH, kW, C]
 * (rotated in place for the call and restored), Y's rotated to [N, H', W', M]. */
static kiln_status infer_qconv_channels_last(kiln_graph *g, kiln_node *n, kiln_dtype out) {
    kiln_value *x = kiln_node_input(g, n, 0), *w = kiln_node_input(g, n, 1);
    if (!x || !w || x == w) return kiln_error(KILN_ERR_INVALID_ARGUMENT, "%s needs distinct inputs x and w", n->op_type);
    if ((x->ndim >= 0 && x->ndim != 4) || (w->ndim >= 0 && w->ndim != 4))
        return kiln_error(KILN_ERR_SHAPE, "%s: channels_last needs 4-D X and W (2-D convolution), has ranks %d and %d",
                          n->op_type, x->ndim, w->ndim);
    rotate_channels(x->dims, x->ndim, true);
    rotate_channels(w->dims, w->ndim, true);
    kiln_status st = infer_conv_shape(g, n, 0, 1, out);
    rotate_channels(x->dims, x->ndim, false);
    rotate_channels(w->dims, w->ndim, false);
    kiln_value *y = kiln_node_output(g, n, 0);
    if (st == KILN_OK && y) rotate_channels(y->dims, y->ndim, false);
    return st;
}

/* kiln.QConv / kiln.QMatMul: the parameters are checked, the shape is Conv's / MatMul's. */
static kiln_status infer_kiln_qconv(kiln_graph *g, kiln_node *n) {
    kiln_quant_layer q;
    KILN_TRY(kiln_quant_layer_read(n, &q));
    KILN_TRY(require_8bit(g, n, 0, "x"));
    KILN_TRY(require_8bit(g, n, 1, "w"));
    int64_t cl = kiln_attr_int(n, "channels_last", 0);
    if (cl != 0 && cl != 1)
        return kiln_error(KILN_ERR_INVALID_ARGUMENT, "%s: channels_last must be 0 or 1, is %lld", n->op_type, (long long)cl);
    KILN_TRY(cl ? infer_qconv_channels_last(g, n, q.y_dtype) : infer_conv_shape(g, n, 0, 1, q.y_dtype));
    return kiln_node_input(g, n, 3) ? check_residual(g, n, &q, kiln_node_output(g, n, 0)) : KILN_OK;
}

static kiln_status infer_kiln_qmatmul(kiln_graph *g, kiln_node *n) {
    kiln_quant_layer q;
    KILN_TRY(kiln_quant_layer_read(n, &q));
    KILN_TRY(require_8bit(g, n, 0, "a"));
    KILN_TRY(require_8bit(g, n, 1, "b"));
    return infer_product(g, n, 0, 1, q.y_dtype);
}

/* kiln.F8MatMul: float A, uint8 (E4M3) 2-D B; the shape is MatMul's, the type A's. */
static kiln_status infer_kiln_f8matmul(kiln_graph *g, kiln_node *n) {
    kiln_fp8_layer q;
    KILN_TRY(kiln_fp8_layer_read(n, &q));
    const kiln_value *a = kiln_node_input(g, n, 0), *b = kiln_node_input(g, n, 1);
    if (!a || !b) return kiln_error(KILN_ERR_INVALID_ARGUMENT, "F8MatMul needs A and B");
    if (a->dtype != KILN_UNDEFINED && a->dtype != KILN_F32 && a->dtype != KILN_F16 && a->dtype != KILN_BF16)
        return kiln_error(KILN_ERR_INVALID_ARGUMENT, "F8MatMul: A must be a float tensor, is %s", kiln_dtype_name(a->dtype));
    if ((b->dtype != KILN_UNDEFINED && b->dtype != KILN_U8) || (b->ndim >= 0 && b->ndim != 2))
        return kiln_error(KILN_ERR_INVALID_ARGUMENT, "F8MatMul: B must be 2-D uint8 E4M3 codes");
    return infer_product(g, n, 0, 1, a->dtype == KILN_UNDEFINED ? KILN_F32 : a->dtype);
}

const kiln_op_schema kiln_schemas_quant[] = {
    {"QuantizeLinear", "", 10, 0, infer_quantize},
    {"DequantizeLinear", "", 10, 0, infer_dequantize},
    {"DynamicQuantizeLinear", "", 11, 0, infer_dynamic_quantize},
    {"MatMulInteger", "", 10, 0, infer_matmul_integer},
    {"QLinearMatMul", "", 10, 0, infer_qlinear_matmul},
    {"ConvInteger", "", 10, 0, infer_conv_integer},
    {"QLinearConv", "", 10, 0, infer_qlinear_conv},
    {"QConv", KILN_FUSED_DOMAIN, KILN_FUSED_OPSET, KILN_FUSED_OPSET, infer_kiln_qconv},
    {"QMatMul", KILN_FUSED_DOMAIN, KILN_FUSED_OPSET, KILN_FUSED_OPSET, infer_kiln_qmatmul},
    {"F8MatMul", KILN_FUSED_DOMAIN, KILN_FUSED_OPSET, KILN_FUSED_OPSET, infer_kiln_f8matmul},
    {0},
};
