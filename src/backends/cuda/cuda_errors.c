/* cuda_errors.c — turns a failed CUDA runtime, cuBLASLt or cuDNN call into a kiln_status whose message
 * names the call, the library's own description and name of the error, and where it happened:
 *     "cudaMalloc(...) failed: out of memory (cudaErrorMemoryAllocation) at cuda_runtime.c:120"
 * Allocation failures are KILN_ERR_OUT_OF_MEMORY, everything else KILN_ERR_BACKEND. */
#include "backends/cuda/cuda_kernels.h"

#include <string.h>

/* "cudaMalloc(...)" from the call's source text "cudaMalloc(&p, n)" (arguments elided; text without
 * parentheses, like "launch gemm_kernel", is kept as it is). */
static void call_name(const char *call, char *buf, size_t cap) {
    const char *paren = strchr(call, '(');
    if (!paren) {
        snprintf(buf, cap, "%s", call);
        return;
    }
    snprintf(buf, cap, "%.*s(...)", (int)(paren - call), call);
}

static const char *base_name(const char *file) {
    const char *slash = strrchr(file, '/');
    return slash ? slash + 1 : file;
}

kiln_status kiln_cuda_error(cudaError_t e, const char *call, const char *file, int line) {
    char name[128];
    call_name(call, name, sizeof name);
    kiln_status s = e == cudaErrorMemoryAllocation ? KILN_ERR_OUT_OF_MEMORY : KILN_ERR_BACKEND;
    return kiln_error(s, "%s failed: %s (%s) at %s:%d", name, cudaGetErrorString(e), cudaGetErrorName(e),
                      base_name(file), line);
}

kiln_status kiln_cublas_error(cublasStatus_t e, const char *call, const char *file, int line) {
    char name[128];
    call_name(call, name, sizeof name);
    kiln_status s = e == CUBLAS_STATUS_ALLOC_FAILED ? KILN_ERR_OUT_OF_MEMORY : KILN_ERR_BACKEND;
    return kiln_error(s, "%s failed: %s (%s) at %s:%d", name, cublasLtGetStatusString(e), cublasLtGetStatusName(e),
                      base_name(file), line);
}

kiln_status kiln_cudnn_error(cudnnStatus_t e, const char *call, const char *file, int line) {
    char name[128], detail[256] = "";
    call_name(call, name, sizeof name);
    cudnnGetLastErrorString(detail, sizeof detail);
    bool oom = e == CUDNN_STATUS_INTERNAL_ERROR_HOST_ALLOCATION_FAILED ||
               e == CUDNN_STATUS_INTERNAL_ERROR_DEVICE_ALLOCATION_FAILED;
    return kiln_error(oom ? KILN_ERR_OUT_OF_MEMORY : KILN_ERR_BACKEND, "%s failed: %s (status %d)%s%s at %s:%d", name,
                      cudnnGetErrorString(e), (int)e, detail[0] ? ": " : "", detail, base_name(file), line);
}
