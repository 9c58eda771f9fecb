/* activation_wide.h — the epilogue activations, and the softmax of a row, on 16-lane AVX-512
 * vectors where the processor has them: every activation of fused_ops.h (ReLU, LeakyRelu, Clip,
 * HardSigmoid, HardSwish, Sigmoid, SiLU, Tanh, GELU in both forms), with the formulas and
 * polynomials of the 4-lane versions in fused.c and elementwise_vmath.h, four times as many lanes
 * per instruction. */
#ifndef KILN_CPU_ACTIVATION_WIDE_H
#define KILN_CPU_ACTIVATION_WIDE_H

#include "ir/fused_ops.h"

#include <stdbool.h>
#include <stdint.h>

/* y[i] = act(y[i]) for i in [0, n) in place and true, or false (y untouched) when the processor
 * lacks AVX-512 or a's kind is KILN_ACT_NONE. */
bool kiln_cpu_activation_wide(float *y, int64_t n, const kiln_act *a);

/* s[0, n) = softmax(s[0, n)) in place (e^(s - max) / sum, the sum in double) and true, or false (s
 * untouched) when the processor lacks AVX-512 or n < 1. A row of -inf only, or with +inf or NaN,
 * comes out NaN, as the 4-lane softmax of the attention kernel gives. */
bool kiln_cpu_softmax_wide(float *s, int64_t n);

#endif
