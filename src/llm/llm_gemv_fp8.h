/* llm_gemv_fp8.h — the FP8 (E4M3) matrix product of the CPU LLM forward, the reference of the CUDA
 * one (llm_cuda_fp8.cu): weights E4M3 codes [out, in] with one fp32 scale per output row, activations
 * rounded to E4M3 as well, with a static per-tensor scale (calibrated at build time) or a dynamic one
 * per token row (max |x| / 448); every code decoded by table, products summed in fp32, each sum scaled
 * once by the row's and the token's scales. Also the quantizer `kiln build --weights fp8` uses. */
#ifndef KILN_LLM_LLM_GEMV_FP8_H
#define KILN_LLM_LLM_GEMV_FP8_H

#include "llm/llm_gemv.h"
#include "llm/llm_internal.h"

#include <stdint.h>

/* Computes a's product (format KILN_LLM_W_FP8: w E4M3 codes [out, in], scale [out], act_scale >= 0;
 * n >= 1; y must not overlap x): y[t, o] = sum_k e4m3(w[o, k]) e4m3(xq[t, k]) * scale[o] * s_t + bias,
 * xq[t, k] the code of x[t, k] / s_t (kiln_llm_fp8_quantize_acts), then accumulate and GELU as
 * kiln_llm_gemv. Over the thread pool; from 16 token rows on (prefill), tiles of weight rows decoded
 * to fp32 go through OpenBLAS's GEMM. */
void kiln_llm_gemm_fp8(const kiln_llm_gemv_args *a);

/* The activation scale of one token row x[0 .. k): act_scale when it is > 0, else max |x| / 448, or
 * 1 for a row of zeros (every code is then 0 whatever the scale). */
float kiln_llm_fp8_act_scale(const float *x, int k, float act_scale);

/* Rounds token row x[0 .. k) to E4M3 with scale s (> 0): codes[i] = kiln_f32_to_e4m3(x[i] / s), the
 * division in fp32 (what the CUDA kernel computes); a static scale saturates values past 448 s. */
void kiln_llm_fp8_quantize_acts(const float *x, int k, float s, uint8_t *codes);

/* Quantizes w [rows, cols] row by row: scale[r] = max |w[r, :]| / 448 (0 for a zero row: its codes
 * are 0), codes[r, k] = kiln_f32_to_e4m3(w[r, k] / scale[r]). */
void kiln_llm_quantize_rows_fp8(const float *w, int64_t rows, int64_t cols, uint8_t *codes, float *scale);

/* Row r of an FP8 matrix decoded: out[k] = e4m3(q[r, k]) * scale[r], k < cols. */
void kiln_llm_fp8_row(const kiln_llm_q8 *w, int64_t r, int cols, float *out);

#endif
