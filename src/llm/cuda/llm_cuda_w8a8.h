/* llm_cuda_w8a8.h — the W8A8 products of the LLM forward on CUDA (SmoothQuant engines, llm_cuda_w8a8.cu):
 * the input rows quantized to int8 with the matrix's static activation scale, multiplied with its int8
 * weights in int32 (dp4a GEMV for decode, cuBLASLt's integer tensor-core GEMM for more rows), each sum
 * dequantized once by act_scale * scale[o]. Included by C and CUDA C. */
#ifndef KILN_LLM_CUDA_W8A8_H
#define KILN_LLM_CUDA_W8A8_H

#include "llm/cuda/llm_cuda_internal.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Cached cuBLASLt IMMA products per model (g->imma, round-robin). */
#define LLMC_IMMA_PLANS 32
/* Frees g's IMMA plans (kiln_llm_cuda_free). */
void llmc_imma_plans_free(kiln_llm_cuda *g);

/* The activation scale of random W8A8 matrices (kiln_llm_cuda_options.random_w8a8): inputs in [-8, 8]. */
#define LLMC_RANDOM_ACT_SCALE (8.0f / 127.0f)

/* llmc_linear_w, and for a W8A8 matrix (act_scale > 0: w int8 [N, K] with row scales scale) x quantized
 * to int8 into g->deq and multiplied in int32: the dp4a GEMV for n <= gemv_max_tokens, else cuBLASLt's
 * IMMA GEMM into int32 tiles in g->deq (in chunks of token rows) and the dequantizing epilogue (the GEMV
 * 8 rows at a time where cuBLASLt has no IMMA algorithm or N is not a multiple of 4); y =
 * sum * (act_scale * scale[o]) (+ bias) in g->dtype, or FP32 when out_f32. Needs K % 16 == 0. */
kiln_status llmc_linear_wa(kiln_llm_cuda *g, const void *x, int ldx, int n, int K, const void *w, const float *scale,
                           float act_scale, const void *bias, int N, void *y, int ldy, bool out_f32);

/* xq[r, k] = x[r, k] / act_scale rounded to nearest, ties to even, saturated to [-127, 127] (NaN: 0), as
 * kiln_llm_quantize_act; x [n, K] in dtype (KILN_F16 or KILN_BF16), row stride ldx; xq [n, K]. */
kiln_status llmc_quantize_act_launch(kiln_dtype dtype, cudaStream_t stream, const void *x, int ldx, int n, int K,
                                     float act_scale, int8_t *xq);
/* The dp4a GEMV: y[r, o] = (sum_k xq[r, k] w[o, k]) * (act_scale * scale[o]) (+ bias[o] in dtype), in dtype
 * or FP32 with out_f32, 1 <= n <= LLMC_GEMV_MAX; xq [n, K] and w 16-byte aligned, K % 16 == 0 (refused
 * otherwise). For tests too. */
kiln_status llmc_gemv_w8a8_launch(kiln_dtype dtype, cudaStream_t stream, const int8_t *xq, int n, int K,
                                  const int8_t *w, const float *scale, float act_scale, const void *bias, int N,
                                  void *y, int ldy, bool out_f32);
/* The IMMA product: D[r, o] = sum_k xq[r, k] w[o, k] in int32 ([n, N] row-major) through cuBLASLt (lt,
 * workspace ws of ws_bytes), then y as llmc_gemv_w8a8_launch's for any n >= 1; K and N multiples of 4,
 * xq, w 4-byte aligned. KILN_ERR_UNSUPPORTED when cuBLASLt offers no IMMA algorithm. For tests too. */
kiln_status llmc_imma_w8a8_launch(kiln_dtype dtype, cublasLtHandle_t lt, cudaStream_t stream, void *ws, size_t ws_bytes,
                                  const int8_t *xq, int n, int K, const int8_t *w, const float *scale, float act_scale,
                                  const void *bias, int N, int32_t *D, void *y, int ldy, bool out_f32);

#ifdef __cplusplus
}
#endif

#endif
