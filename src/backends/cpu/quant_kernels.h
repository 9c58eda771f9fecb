/* quant_kernels.h — the CPU quantization family: QuantizeLinear, DequantizeLinear and
 * DynamicQuantizeLinear (quant.c), the integer products MatMulInteger, QLinearMatMul and kiln.QMatMul
 * (quant_matmul.c), ConvInteger, QLinearConv and kiln.QConv (quant_conv.c), the FP8 reference
 * kiln.F8MatMul (fp8_matmul.c), and what they share
 * (quant_igemm.c): the exact int32-accumulating product and the requantizing epilogue. These are the
 * reference kernels other backends' integer kernels are checked against: integer sums are exact,
 * rounding is half to even (rintf in the default rounding mode), results saturate to the type. */
#ifndef KILN_CPU_QUANT_KERNELS_H
#define KILN_CPU_QUANT_KERNELS_H

#include "backends/cpu/nn_kernels.h"
#include "ir/fused_ops.h"

#include <stdbool.h>
#include <stdint.h>

/* For the hot loops of this family: GCC vectorizes at -O3 only (the widening multiply-add of the
 * integer product becomes vpmaddwd there); Clang vectorizes at -O2 already. */
#if defined(__GNUC__) && !defined(__clang__)
#define QUANT_VECTORIZE __attribute__((optimize("tree-vectorize")))
#else
#define QUANT_VECTORIZE
#endif

/* The value range of an integer dtype of at most 16 bits (int8, uint8, int16, uint16). */
void quant_range(kiln_dtype t, int32_t *lo, int32_t *hi);
/* saturate(round_half_even(v)) to [lo, hi]; NaN gives lo. */
static inline int32_t quant_round_sat(float v, int32_t lo, int32_t hi);
/* Writes integer v to element i of an int8/uint8/int16/uint16/int32 buffer of dtype t. */
void quant_store(void *y, kiln_dtype t, int64_t i, int32_t v);
/* Reads element i of an int8/uint8/int16/uint16/int32 buffer of dtype t. */
int32_t quant_load(const void *x, kiln_dtype t, int64_t i);

/* C[i * ldc + j] = sum_k A[i * K + k] * B[j * K + k] for i < M, j < N, exact in int32 (int16 operands,
 * so |sum| < 2^31 holds for K up to 2^15 of 8-bit differences; callers keep to that). The columns
 * are split over the thread pool. */
void quant_igemm(int64_t M, int64_t N, int64_t K, const int16_t *A, const int16_t *B, int32_t *C, int64_t ldc);

/* What turns an int32 sum into the output element (the requantizing epilogue):
 *   qlinear (QLinearConv / QLinearMatMul): v = (acc + ibias[c]) * (x_scale * w_scale[c] / y_scale),
 *       y = saturate(round(v) + y_zero_point);
 *   otherwise (kiln.QConv / kiln.QMatMul): v = act(acc * x_scale * w_scale[c] + bias[c]), then
 *       y = v for a float32 output, else saturate(round(v / y_scale) + y_zero_point).
 * c is the output channel (Conv) or column (MatMul); w_scale has 1 (for every channel) or C entries,
 * the biases C. */
typedef struct quant_epilogue {
    bool qlinear;
    float x_scale;
    const float *w_scale;
    int64_t nw;
    const int32_t *ibias;   /* qlinear: int32 bias per channel or NULL */
    const float *bias;      /* otherwise: float bias per channel or NULL */
    kiln_act act;
    kiln_dtype y_dtype;     /* float32, or an 8-bit type */
    float y_scale;
    int32_t y_zero_point;
    const void *residual;   /* kiln.QConv's R (y's layout) or NULL: 8-bit + r_scale * (R - r_zero_point), float32 + R */
    kiln_dtype r_dtype;
    float r_scale;
    int32_t r_zero_point;
} quant_epilogue;

/* Applies ep to acc[0..count) of channel c into y (dtype ep->y_dtype) at elements at + i * stride.
 * scratch holds count floats. */
void quant_epilogue_run(const quant_epilogue *ep, int64_t c, const int32_t *acc, int64_t count, int64_t stride,
                        void *y, int64_t at, float *scratch);

/* Fails unless t (NULL passes) has dtype want (a float32 scale or a zero point of its operand's
 * type) and one element, or, when count > 1, is 1-D with count elements (one per channel). */
kiln_status quant_param_check(const kiln_node *n, const kiln_tensor *t, const char *what, kiln_dtype want,
                              int64_t count);

/* Fails unless the layer parameters' zero points lie in their operands' ranges (x_zero_point in
 * xt's, every w_zero_point in wt's), which bounds every difference by 255 and so every int32 sum. */
kiln_status quant_layer_zero_points_check(const kiln_node *n, int32_t x_zero_point, kiln_dtype xt,
                                          const int64_t *w_zero_point, int count, kiln_dtype wt);

/* Zero points as int32: n = 0 (all zero), 1 (one for all) or one per channel / row / column. */
typedef struct quant_zp {
    int64_t n;
    int32_t *v;
} quant_zp;
/* From a zero-point tensor (NULL: all zero) / an INTS attribute; the caller frees with quant_zp_free. */
kiln_status quant_zp_from_tensor(const kiln_tensor *t, quant_zp *z);
kiln_status quant_zp_from_ints(const int64_t *v, int64_t count, quant_zp *z);
void quant_zp_free(quant_zp *z);
static inline int32_t quant_zp_at(const quant_zp *z, int64_t i) { return z->n == 0 ? 0 : z->v[z->n == 1 ? 0 : i]; }

/* quant.c */
NN_EXEC(kiln_cpu_quantize_linear);
NN_EXEC(kiln_cpu_dequantize_linear);
NN_EXEC(kiln_cpu_dynamic_quantize_linear);
/* quant_matmul.c */
NN_EXEC(kiln_cpu_matmul_integer);
NN_EXEC(kiln_cpu_qlinear_matmul);
NN_EXEC(kiln_cpu_kiln_qmatmul);
/* fp8_matmul.c */
NN_EXEC(kiln_cpu_kiln_f8matmul);
/* quant_conv.c */
NN_EXEC(kiln_cpu_conv_integer);
NN_EXEC(kiln_cpu_qlinear_conv);
NN_EXEC(kiln_cpu_kiln_qconv);

static inline int32_t quant_round_sat(float v, int32_t lo, int32_t hi) {
    float r = __builtin_rintf(v);
    if (!(r >= (float)lo)) return lo;
    if (r > (float)hi) return hi;
    return (int32_t)r;
}

#endif
