/* llm_gemm_w8a8.h — the W8A8 matrix product of the CPU LLM forward (SmoothQuant engines): the input
 * rows quantized to int8 with one static per-tensor scale, multiplied with the int8 weight rows in
 * int32 (exact), each sum dequantized once by act_scale * scale[o]; then bias, residual add and GELU
 * as the fp32 product does. Split over the thread pool in chunks of output rows; AVX-512 VNNI
 * (vpdpwssd), AVX2 (vpmaddwd) or scalar code, chosen once from the processor; all three give the
 * same int32 sums. */
#ifndef KILN_LLM_LLM_GEMM_W8A8_H
#define KILN_LLM_LLM_GEMM_W8A8_H

#include "llm/llm_gemv.h"

#include <stdbool.h>
#include <stdint.h>

/* q[i] = x[i] / act_scale rounded to nearest, ties to even, saturated to [-127, 127] (NaN: 0), i < n;
 * act_scale > 0. */
void kiln_llm_quantize_act(const float *x, int64_t n, float act_scale, int8_t *q);

/* Computes a's product (format KILN_LLM_W_W8A8: w int8 [out, in], scale [out], act_scale > 0; n >= 1;
 * in < 133,000, so that no int32 sum can overflow; y must not overlap x): y[t, o] = (sum_k xq[t, k] w[o, k]) * (act_scale * scale[o]) (+ bias[o], + y
 * when accumulate, then GELU when gelu), xq = kiln_llm_quantize_act(x), in the caller's scratch xq
 * (KILN_LLM_W8A8_SCRATCH(n, in) elements, int8 values in int16 lanes). */
#define KILN_LLM_W8A8_SCRATCH(n, in) ((size_t)(n) * (size_t)(in))
void kiln_llm_gemm_w8a8(const kiln_llm_gemv_args *a, int16_t *xq);

/* The instruction sets of the product (tests compare them against an integer reference). */
typedef enum kiln_llm_w8a8_isa { KILN_W8A8_AUTO, KILN_W8A8_VNNI512, KILN_W8A8_AVX2, KILN_W8A8_SCALAR } kiln_llm_w8a8_isa;
/* Whether this processor (and build) runs isa. */
bool kiln_llm_w8a8_isa_supported(kiln_llm_w8a8_isa isa);
/* kiln_llm_gemm_w8a8 with isa's kernel; false (nothing computed) when it is not supported here. */
bool kiln_llm_gemm_w8a8_isa(const kiln_llm_gemv_args *a, int16_t *xq, kiln_llm_w8a8_isa isa);

#endif
