/* matmul.cuh — matmul.cu's cuBLASLt product, for the CUDA op families that reduce to one
 * (einsum.cu). Same contract as an exec function: enqueues on ctx->stream, uses ctx->workspace. */
#ifndef KILN_CUDA_MATMUL_CUH
#define KILN_CUDA_MATMUL_CUH

#include "backends/cuda/cuda_kernels.h"

/* d[i] = op(a[i]) op(b[i]) for i < batch, every matrix dense row-major and the batch entries packed
 * one after another: a[i] is [M, K] ([K, M] when ta), b[i] [K, N] ([N, K] when tb), d[i] [M, N];
 * dtype t is float32, float16 or bfloat16, accumulated in FP32 (no TF32). n names errors. Each of
 * M, N, K and batch must be at most INT32_MAX. */
kiln_status kiln_cuda_matmul_batched(const kiln_node *n, kiln_cuda_ctx *ctx, kiln_dtype t, int64_t batch, int64_t M,
                                     int64_t N, int64_t K, const void *a, bool ta, const void *b, bool tb, void *d);

#endif
