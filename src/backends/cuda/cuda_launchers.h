/* cuda_launchers.h — launchers the CUDA runtime calls directly (outside any node), implemented by the
 * op families. C and CUDA C both include this header. Like exec functions, a launcher only enqueues
 * work on the given stream: no allocation, no synchronization, no host<->device copies, so that it can
 * be captured in a CUDA graph. */
#ifndef KILN_CUDA_LAUNCHERS_H
#define KILN_CUDA_LAUNCHERS_H

#include "core/status.h"

#include <cuda_runtime.h>
#include <stdbool.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Converts n elements of src (device memory, dtype src_type) into dst (device memory, dtype dst_type),
 * with ONNX Cast semantics (floats round to nearest even; float -> int truncates toward zero; -> bool
 * is "!= 0"). Used at the graph boundary (host-declared dtype <-> device dtype) and for device copies
 * of host values. src and dst do not overlap; n == 0 enqueues nothing. Supports at least F32, F16,
 * BF16, F64, I64, I32, I8, U8, BOOL in both directions; KILN_ERR_UNSUPPORTED for other pairs. */
kiln_status kiln_cuda_cast(const void *src, kiln_dtype src_type, void *dst, kiln_dtype dst_type, int64_t n,
                           cudaStream_t stream);

/* Longest row of the residual form of kiln_cuda_norm_rows (the row stays in shared memory). */
#define KILN_CUDA_NORM_RESIDUAL_MAX_LEN 12288

/* One row normalization on plain parameters, the one both runtimes call (norm.cu): the tensor
 * engine's LayerNormalization / RMSNormalization nodes and the LLM forward's residual add + norm. For
 * output row r < rows, with t = gather ? gather[r] : r: v = x[t] (+ delta[t]), written back to x[t]
 * when store; y[r] = (v - mean) / sqrt(var + eps) * (scale + scale_offset) + bias, statistics in FP32
 * (rms: no centering, var = mean of v^2). Rows of len values, contiguous. Two forms:
 *  - plain (residual false): x, scale, bias and y in dtype (F32, F16 or BF16), scale and bias per
 *    element or NULL (none); no delta, gather, store or offset. Rows in registers (len <= 8192,
 *    16-byte aligned, vectorizable) or one block per row from shared memory (any other length).
 *  - residual (the LLM's): x an FP32 residual stream, delta NULL or in dtype, scale (required) and bias
 *    FP32, y in dtype (F16 or BF16), len <= KILN_CUDA_NORM_RESIDUAL_MAX_LEN: one block per output row,
 *    the row in shared memory (tuned for the few rows of a decode step).
 * Only enqueues work on stream (graph-capturable); shapes or types outside the form are
 * KILN_ERR_INVALID_ARGUMENT. */
typedef struct kiln_cuda_norm {
    kiln_dtype dtype;
    bool residual; /* the residual form: x, scale and bias FP32 */
    bool rms;
    int64_t rows, len;
    void *x;              /* [*, len]; written only with store */
    const void *delta;    /* residual form: [*, len] added to x first, or NULL */
    const int32_t *gather; /* residual form: output row r reads x row gather[r]; NULL: row r */
    bool store;            /* residual form: x[t] = x[t] + delta[t] */
    const void *scale, *bias;
    float scale_offset; /* residual form: 0, or 1 (Gemma's 1 + w) */
    float eps;
    void *y; /* [rows, len] */
    int sm_count; /* the device's SMs (sizes the grid of the shared-memory kernel; 0 counts as 1) */
    bool pdl;     /* residual form: a programmatic dependent launch (sm_90: the kernel is resident while the
                   * one before it ends, and waits for it (griddepcontrol.wait) before reading x or delta) */
} kiln_cuda_norm;
kiln_status kiln_cuda_norm_rows(const kiln_cuda_norm *a, cudaStream_t stream);

#ifdef __cplusplus
}
#endif
#endif
