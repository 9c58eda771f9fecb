/* llm_gemv_q8.h — the weight-only INT8 matrix product of the CPU LLM forward: y = x (W ~ q scale)^T
 * + bias for any number of token rows, each int8 weight row widened to fp32 inside the kernel (never
 * stored dequantized), its dot products with up to four token rows at a time summed in fp32 and then
 * scaled once by the row's scale; split over the thread pool in chunks of output rows, with AVX-512
 * (AVX2, or scalar code, where the processor lacks it). Also the quantizer `kiln build --weights int8`
 * uses. */
#ifndef KILN_LLM_LLM_GEMV_Q8_H
#define KILN_LLM_LLM_GEMV_Q8_H

#include "llm/llm_gemv.h"
#include "llm/llm_internal.h"

#include <stdbool.h>
#include <stdint.h>

/* Computes a's product (format KILN_LLM_W_INT8: w int8 [out, in], scale [out]; n >= 1; y must not
 * overlap x) with the best instruction set the processor has; from 16 token rows on (prefill), through
 * tiles of weight rows widened to fp32 and OpenBLAS's GEMM. */
void kiln_llm_gemm_q8(const kiln_llm_gemv_args *a);

/* The instruction sets of the product (tests compare them). */
typedef enum kiln_llm_q8_isa { KILN_Q8_AUTO, KILN_Q8_AVX512, KILN_Q8_AVX2, KILN_Q8_SCALAR } kiln_llm_q8_isa;
/* Whether this processor (and build) runs isa. */
bool kiln_llm_q8_isa_supported(kiln_llm_q8_isa isa);
/* kiln_llm_gemm_q8 with isa's kernel for any n (no GEMM tiles); false (nothing computed) when it is not
 * supported here. */
bool kiln_llm_gemm_q8_isa(const kiln_llm_gemv_args *a, kiln_llm_q8_isa isa);

/* Quantizes w [rows, cols] row by row, symmetric: scale[r] = max |w[r, :]| / 127 (0 for a zero row),
 * q[r, k] = w[r, k] / scale[r] rounded to nearest (ties away from zero), in [-127, 127]. */
void kiln_llm_quantize_rows(const float *w, int64_t rows, int64_t cols, int8_t *q, float *scale);

/* Row r of a quantized matrix widened to fp32: out[k] = q[r, k] * scale[r], k < cols. */
void kiln_llm_q8_row(const kiln_llm_q8 *w, int64_t r, int cols, float *out);

#endif
