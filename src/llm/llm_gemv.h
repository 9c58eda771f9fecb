/* llm_gemv.h — the decode-step matrix product of the CPU LLM forward: y = x W^T + bias for at most
 * KILN_LLM_GEMV_ROWS token rows, W [out, in] row-major streamed once from memory, split over the
 * thread pool in chunks of output rows, with AVX-512 (AVX2 or SSE where the processor lacks it) and
 * prefetching ahead of the stream; the epilogue (bias, residual add, GELU) runs on each chunk while
 * it is still in cache, in the same pool dispatch.
 * The sums are formed in a fixed order, the one the forward's products had before they moved here
 * (kiln_cpu_sgemm's matrix-vector path followed by separate bias, residual and GELU steps), so the
 * CPU forward's results did not change by a bit; tests/unit/test_llm_cpu_ops.c models that order. */
#ifndef KILN_LLM_LLM_GEMV_H
#define KILN_LLM_LLM_GEMV_H

#include <stdbool.h>

#define KILN_LLM_GEMV_ROWS 8

/* How a product's weight matrix is stored. */
typedef enum kiln_llm_wformat {
    KILN_LLM_W_F32,  /* float [out, in] */
    KILN_LLM_W_INT8, /* int8_t [out, in] and one fp32 scale per output row: W[o, k] ~ w[o, k] * scale[o] */
    KILN_LLM_W_W8A8, /* KILN_LLM_W_INT8's weights, x quantized to int8 with act_scale too (llm_gemm_w8a8.h) */
    KILN_LLM_W_INT4, /* packed unsigned 4-bit [out, in] in groups of 128 along in, scale and zero per (row,
                        group): W[o, k] ~ (w[o, k] - zero[o, g]) * scale[o, g] (llm_gemv_q4.h) */
    KILN_LLM_W_FP8,  /* E4M3 codes [out, in] and one fp32 scale per output row, the activations rounded to E4M3
                        too (llm_gemv_fp8.h): W[o, k] ~ e4m3(w[o, k]) * scale[o] */
} kiln_llm_wformat;

/* The arguments of every CPU LLM matrix product, whatever its weights' format (this product's and
 * the weight-only quantized one's, llm_gemv_q8.h). */
typedef struct kiln_llm_gemv_args {
    const float *x; /* [n, in], row stride ldx */
    int ldx, n, in;
    const void *w;     /* [out, in], rows contiguous, in format */
    const float *bias; /* [out] or NULL */
    int out;
    float *y; /* [n, out], row stride ldy */
    int ldy;
    bool accumulate; /* y += x W^T + bias instead of y = x W^T + bias */
    bool gelu;       /* then y = GELU(tanh)(y), as kiln_llm_gelu_tanh; only without accumulate */
    kiln_llm_wformat format; /* KILN_LLM_W_F32 when left zero */
    const float *scale;      /* KILN_LLM_W_INT8, KILN_LLM_W_W8A8, KILN_LLM_W_FP8: [out] row scales;
                                KILN_LLM_W_INT4: [out, groups]; else unused */
    float act_scale;         /* the activations' static per-tensor scale. KILN_LLM_W_W8A8 (> 0):
                                x ~ int8(x / act_scale) * act_scale; KILN_LLM_W_FP8: x ~ e4m3(x / act_scale) *
                                act_scale, or 0: one dynamic scale per token row; else unused */
    const float *zero;       /* KILN_LLM_W_INT4: [out, groups] zero points; else unused */
} kiln_llm_gemv_args;

/* Computes a's product (format KILN_LLM_W_F32, 1 <= n <= KILN_LLM_GEMV_ROWS; y must not overlap x or w). */
void kiln_llm_gemv(const kiln_llm_gemv_args *a);

/* Output rows [o0, o1) of a's product, epilogue included, on the calling thread alone (for callers
 * that split a step's work over the pool themselves); the same results as kiln_llm_gemv's. */
void kiln_llm_gemv_rows(const kiln_llm_gemv_args *a, int o0, int o1);

#endif
