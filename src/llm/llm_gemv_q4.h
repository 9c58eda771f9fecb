/* llm_gemv_q4.h — the weight-only INT4 matrix product of the CPU LLM forward and its quantizer:
 * W [out, in] in groups of KILN_Q4_GROUP along in, asymmetric, W[o, k] ~ (q[o, k] - zero[o, g]) *
 * scale[o, g] with q unsigned 4-bit, two to a byte (the low nibble the even k), each row padded to a
 * whole number of groups (KILN_Q4_GROUP / 2 bytes each; a short last group's padding nibbles are 0).
 * The product unpacks the nibbles in registers and sums in fp32 (AVX-512, AVX2, or scalar code,
 * chosen once); from 16 token rows on it dequantizes tiles and uses the fp32 GEMM, as INT8 does. */
#ifndef KILN_LLM_LLM_GEMV_Q4_H
#define KILN_LLM_LLM_GEMV_Q4_H

#include "llm/llm_gemv.h"
#include "llm/llm_gemv_q8.h"

#include <stdbool.h>
#include <stdint.h>

#define KILN_Q4_GROUP 128

/* Groups per row of `in` columns (the last one short when in is not a multiple of KILN_Q4_GROUP). */
static inline int64_t kiln_q4_groups(int64_t in) { return (in + KILN_Q4_GROUP - 1) / KILN_Q4_GROUP; }
/* Bytes of one packed row of `in` columns. */
static inline int64_t kiln_q4_row_bytes(int64_t in) { return kiln_q4_groups(in) * (KILN_Q4_GROUP / 2); }

/* Computes a's product (format KILN_LLM_W_INT4: w packed [out, kiln_q4_row_bytes(in)], scale and zero
 * [out, kiln_q4_groups(in)]; n >= 1; y must not overlap x) with the best instruction set the processor
 * has; from 16 token rows on through tiles of weight rows dequantized to fp32 and OpenBLAS's GEMM. */
void kiln_llm_gemm_q4(const kiln_llm_gemv_args *a);

/* kiln_llm_gemm_q4 with isa's kernel for any n (no GEMM tiles); false (nothing computed) when it is not
 * supported here. */
bool kiln_llm_gemm_q4_isa(const kiln_llm_gemv_args *a, kiln_llm_q8_isa isa);

/* Quantizes w [rows, cols] group by group to nearest: over each group's [lo, hi] = clip * [min, max]
 * (clip in (0, 1]; 1 keeps the whole range), scale = (hi - lo) / 15, zero = -lo / scale (not rounded:
 * lo and hi themselves are representable), q = round(w / scale + zero) clamped to [0, 15]. A group of
 * one value c != 0 gets scale |c| / 15; an all-zero group scale 0, zero 0. q: [rows,
 * kiln_q4_row_bytes(cols)]; scale, zero: [rows, kiln_q4_groups(cols)]. */
void kiln_llm_quantize_q4(const float *w, int64_t rows, int64_t cols, float clip, uint8_t *q, float *scale, float *zero);

/* Row r of a packed matrix of `cols` columns dequantized: out[k] = (q[r, k] - zero[r, g]) * scale[r, g]. */
void kiln_llm_q4_row(const uint8_t *q, const float *scale, const float *zero, int64_t r, int cols, float *out);

#endif
