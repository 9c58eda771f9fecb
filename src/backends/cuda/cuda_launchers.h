/* cuda_launchers.h — launchers the CUDA runtime calls directly (outside any node), implemented by the
 * op families. C and CUDA C both include this header. Like exec functions, a launcher only enqueues
 * work on the given stream: no allocation, no synchronization, no host<->device copies, so that it can
 * be captured in a CUDA graph. */
#ifndef KILN_CUDA_LAUNCHERS_H
#define KILN_CUDA_LAUNCHERS_H

#include "core/status.h"

#include <cuda_runtime.h>
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

#ifdef __cplusplus
}
#endif
#endif
