/* fp8.h — FP8 E4M3 (the OCP "E4M3FN" format of Hopper's FP8 tensor cores and ONNX's FLOAT8E4M3FN):
 * 1 sign, 4 exponent (bias 7) and 3 mantissa bits, no infinities, 0x7f / 0xff NaN, largest finite
 * 448 (0x7e), smallest subnormal 2^-9. Conversions from float32 round to nearest even and saturate
 * (|x| >= 448 and +-inf become +-448, the __NV_SATFINITE behaviour, ONNX's saturate=1); a NaN stays
 * NaN. The per-tensor scale of an FP8 tensor is its calibrated threshold over 448, so that the
 * threshold maps to the largest finite code; the calibrators of calib_hist.h choose the threshold.
 * fp8_layer.c turns a calibrated MatMul / Gemm into kiln.F8MatMul (ir/quant_ops.h). */
#ifndef KILN_QUANT_FP8_H
#define KILN_QUANT_FP8_H

#include "ir/graph.h"
#include "quant/calib_hist.h"

#include <stdbool.h>
#include <stdint.h>

#define KILN_E4M3_MAX 448.0f
#define KILN_E4M3_NAN 0x7f /* with the sign bit: 0xff */

/* The float32 value of E4M3 code c (exact: every E4M3 value is a float32; 0x7f / 0xff give NaN). */
float kiln_e4m3_to_f32(uint8_t c);

/* The E4M3 code nearest to x, ties to the even code; |x| >= 448 and infinities saturate to +-448,
 * NaN gives 0x7f or 0xff (its sign kept), a value that rounds to zero keeps its sign (0x80 for -0). */
uint8_t kiln_f32_to_e4m3(float x);

/* out[i] = kiln_f32_to_e4m3(x[i] / scale) for i < n (scale > 0; the division in float32, as ONNX's
 * QuantizeLinear to FLOAT8E4M3FN). */
void kiln_e4m3_quantize(const float *x, int64_t n, float scale, uint8_t *out);

/* The per-tensor scale for a tensor whose calibrated threshold is T (> 0): T / 448. */
double kiln_fp8_scale(double threshold);

/* The per-tensor FP8 scale that method m picks from histogram h (kiln_calib_threshold over 448).
 * minmax suits FP8 best: its levels are logarithmic, so clipping gains less than for int8. */
double kiln_fp8_scale_calibrated(const kiln_calib_hist *h, const kiln_calib_method *m);

/* Whether a GPU of compute capability major.minor has FP8 tensor cores: 8.9 (Ada) and newer. */
bool kiln_fp8_capable(int major, int minor);

/* The compute capability in a device description holding "sm_XY" (as the cuda backend describes a
 * GPU: "NVIDIA H200 (sm_90, ...)"): *major = X, *minor = Y; false when there is none. */
bool kiln_fp8_parse_sm(const char *desc, int *major, int *minor);

/* Whether node n of g can become a kiln.F8MatMul (ir/quant_ops.h): a MatMul, or a Gemm with transA 0
 * and alpha = beta = 1, reading a float32 activation and 2-D constant float32 weights (a Gemm's C, if
 * any, a float32 constant of one value per output column). */
bool kiln_fp8_layer_ok(const kiln_graph *g, const kiln_node *n);

/* Rewrites layer (kiln_fp8_layer_ok) into kiln.F8MatMul in place: its weights as E4M3 codes [K, N]
 * (a transB Gemm's transposed) with w_scale max|W| / 448, x_scale threshold / 448 for its input, a
 * Gemm's C as the bias. The graph must be resolved and inferred again afterwards. */
kiln_status kiln_fp8_rewrite_layer(kiln_graph *g, int layer, double threshold);

#endif
