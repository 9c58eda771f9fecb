/* cpu_gemm.h — the float32 matrix product every CPU kernel calls (Gemm, MatMul, Conv, the LLM
 * linears): row-major, the work split over the process's thread pool (core/threadpool.h) with
 * OpenBLAS single-threaded inside each part, and products of 1-4 rows (a decode step, a batch-1
 * classifier) computed as matrix-vector products streaming the weights once. */
#ifndef KILN_CPU_GEMM_H
#define KILN_CPU_GEMM_H

#include <stdbool.h>
#include <stdint.h>

/* Switches OpenBLAS to one thread and stops the worker threads it started when it loaded, once per
 * process, so that none polls for work beside the pool's threads: kernels that call cblas inside pool tasks call
 * this first (kiln_cpu_sgemm does). */
void kiln_cpu_gemm_init(void);

/* C [M, N] = alpha * op(A) op(B) + beta * C, row-major, op(X) = X or X^T, leading dimensions lda,
 * ldb, ldc as in cblas_sgemm. beta 0 ignores C's contents. All sizes must be below 2^31. */
void kiln_cpu_sgemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float *A,
                    int64_t lda, const float *B, int64_t ldb, float beta, float *C, int64_t ldc);

#endif
