/* quant_ops.h — kiln's integer layers: the contract between the Q/DQ folding pass
 * (passes/fuse_qdq.c), shape inference (ir/infer_quant.c) and every backend's kernels. They live in
 * the "kiln" domain (opset 1) next to the float fused ops (ir/fused_ops.h), and every parameter is an
 * ordinary attribute (FLOAT, INT, FLOATS, INTS, STRING), so an engine stores them as they are and a
 * GPU backend reads them at plan time; the tensors are the quantized ones.
 *
 * kiln.QConv    Y = out(act(x_scale * w_scale[m] * sum (X - x_zero_point)(W - w_zero_point[m]) + B[m]))
 *     inputs  X (int8 / uint8, [N, C, D1..Dk]), W (int8 / uint8, [M, C/group, k1..kk]), B (optional,
 *             float32 [M], added in float after the scaling)
 *             R (optional, Y's shape): a residual, added after the bias and before the activation:
 *             int8 / uint8 as r_scale * (R - r_zero_point) (a DequantizeLinear of R and an Add, in
 *             float32), or float (float32; a 16-bit engine's float type on the GPU) as it is
 *     attrs   Conv's window attributes (auto_pad, dilations, group, kernel_shape, pads, strides);
 *             r_scale (float > 0) and r_zero_point (int, default 0, within R's type) with an 8-bit R,
 *             neither with a float one;
 *             channels_last (int, default 0): 1 for a 2-D convolution laid out channels-last (the
 *             layout_channels_last pass): X [N, H, W, C], W [M, kH, kW, C], R and Y [N, H', W', M]
 * kiln.QMatMul  Y = out(act(x_scale * w_scale[j] * sum_k (A[.., k] - x_zero_point)(B[k, j] - w_zero_point[j]) + bias[j]))
 *     inputs  A (int8 / uint8, [..., M, K]), B (int8 / uint8, 2-D [K, N]), bias (optional, float32 [N])
 *     attrs   none of its own
 * Common attributes:
 *     x_scale (float > 0), x_zero_point (int, default 0, within X's type): the input's quantization;
 *     w_scale (floats, 1 or M / N values > 0), w_zero_point (ints, absent or 1 or as many as w_scale,
 *             within W's type): per-tensor or per-output-channel weight quantization;
 *     activation, activation_params: as in fused_ops.h (applied in float32 to the scaled sum);
 *     y_dtype (int, an ONNX dtype: 1 float32, 2 uint8, 3 int8; default 1): with float32 the result is
 *             that float; otherwise out(v) = saturate(round_half_even(v / y_scale) + y_zero_point) of
 *             y_dtype, with y_scale (float > 0) and y_zero_point (int, default 0).
 * The sum is exact (int32 accumulation); scaling, bias and activation are float32.
 *
 * kiln.F8MatMul  Y[.., j] = x_scale * w_scale * sum_k e4m3(A[.., k] / x_scale) * e4m3(B[k, j]) + bias[j]
 *     inputs  A (float32 / float16 / bfloat16, [..., M, K]), B (uint8 E4M3 codes, quant/fp8.h, 2-D
 *             constant [K, N]), bias (optional float constant [N]), R (optional residual of Y's
 *             type and element count, added last: Y += R, a transformer's skip connection)
 *     attrs   x_scale (float > 0, the activations' per-tensor scale), w_scale (float > 0, the
 *             weights'); input_activation (optional string, a parameterless activation of
 *             fused_ops.h such as "Gelu": A[.., k] is replaced by act(A[.., k]) in float32 before it
 *             is rounded — the Gelu between two Linears folded into the second); Y has A's type.
 *             e4m3(v) rounds v to the nearest E4M3 value (ties to even,
 *             saturated to +-448: kiln_f32_to_e4m3); each product of two E4M3 values is exact in
 *             float32, the sum accumulates in float32 (its order is the backend's), the scaling and
 *             the bias are float32. The CPU kernel is the reference; a GPU runs it on FP8 tensor cores. */
#ifndef KILN_IR_QUANT_OPS_H
#define KILN_IR_QUANT_OPS_H

#include "ir/fused_ops.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The parameters of one kiln.QConv / kiln.QMatMul node (arrays borrowed from its attributes). */
typedef struct kiln_quant_layer {
    float x_scale;
    int32_t x_zero_point;
    int nw;                       /* entries of w_scale (1: per-tensor) */
    const float *w_scale;
    int nwzp;                     /* entries of w_zero_point: 0 (all zero), 1 or nw */
    const int64_t *w_zero_point;
    kiln_act act;
    kiln_dtype y_dtype;           /* KILN_F32, KILN_U8 or KILN_I8 */
    float y_scale;                /* when y_dtype is an integer type */
    int32_t y_zero_point;
    float r_scale;                /* kiln.QConv's residual R: its scale (0 when the attribute is absent) */
    int32_t r_zero_point;         /* ... and zero point */
} kiln_quant_layer;

/* Reads and checks node n's quantization attributes (above). Fails with KILN_ERR_INVALID_ARGUMENT
 * naming the attribute when one is missing, out of range or of the wrong length. */
kiln_status kiln_quant_layer_read(const kiln_node *n, kiln_quant_layer *q);

/* The parameters of one kiln.F8MatMul node. */
typedef struct kiln_fp8_layer {
    float x_scale, w_scale;
    kiln_activation in_act; /* input_activation (KILN_ACT_NONE without one) */
} kiln_fp8_layer;

/* Reads and checks node n's FP8 attributes (above); fails with KILN_ERR_INVALID_ARGUMENT naming the
 * attribute that is missing or not a positive finite float, or an input_activation that is unknown
 * or takes parameters. */
kiln_status kiln_fp8_layer_read(const kiln_node *n, kiln_fp8_layer *q);

/* How many integer layers (kiln.QConv, kiln.QMatMul) graph g holds. */
int kiln_graph_int8_layers(const kiln_graph *g);

/* How many FP8 layers (kiln.F8MatMul) graph g holds. */
int kiln_graph_fp8_layers(const kiln_graph *g);

/* Whether QuantizeLinear / DequantizeLinear compute in type t (int8, uint8, int16, uint16). */
bool kiln_quant_dtype_ok(kiln_dtype t);

#ifdef __cplusplus
}
#endif
#endif
