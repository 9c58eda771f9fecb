/* matmul.cuh — matmul.cu's cuBLASLt product, for the CUDA op families that reduce to one
 * (einsum.cu; same contract as an exec function: enqueues on ctx->stream, uses ctx->workspace), and
 * what the LLM runtime (llm_cuda_gemm.cu) shares of it: the descriptors of a product on plain
 * parameters and the tactic check. */
#ifndef KILN_CUDA_MATMUL_CUH
#define KILN_CUDA_MATMUL_CUH

#include "backends/cuda/cuda_kernels.h"

/* d[i] = op(a[i]) op(b[i]) for i < batch, every matrix dense row-major and the batch entries packed
 * one after another: a[i] is [M, K] ([K, M] when ta), b[i] [K, N] ([N, K] when tb), d[i] [M, N];
 * dtype t is float32, float16 or bfloat16, accumulated in FP32 (no TF32). n names errors. Each of
 * M, N, K and batch must be at most INT32_MAX. */
kiln_status kiln_cuda_matmul_batched(const kiln_node *n, kiln_cuda_ctx *ctx, kiln_dtype t, int64_t batch, int64_t M,
                                     int64_t N, int64_t K, const void *a, bool ta, const void *b, bool tb, void *d);

/* kiln.FusedMatMul (gemm false: in[0] A, in[1] B) or kiln.FusedGemm (gemm true: in[0..2] A, B, C
 * and n's Gemm attributes) with its epilogue inside cuBLASLt: y = act(product + bias + z), bias N
 * values per row (or NULL), z dense in y's shape (or NULL), act ReLU when relu, else none. Runs only a
 * product that is one cuBLASLt call (MatMul: a 2-D B; Gemm: C absent or a row vector with beta 1,
 * and then no bias) that cuBLASLt takes with that epilogue; *done says whether it ran (when false,
 * nothing was enqueued). With ctx->candidates, records the tuning candidates of that call instead. */
kiln_status kiln_cuda_product_fused(const kiln_node *n, bool gemm, const kiln_cuda_tensor *in, int nin,
                                    const kiln_cuda_tensor *y, const void *bias, const void *z, bool relu,
                                    kiln_cuda_ctx *ctx, bool *done);

/* One row-major product D = act(op(A) op(B) (+ bias)) for cuBLASLt, on plain parameters: op(A) is
 * M x K (A stored [M, K], or [K, M] when ta), op(B) K x N (B stored [K, N], or [N, K] when tb), D
 * [M, N]; row strides lda, ldb, ldd in elements (0: dense), batch entries stride_* elements apart. A and
 * B are ab_type, C and D d_type (F32, F16 or BF16; FP32 out of 16-bit operands allowed), accumulated
 * in FP32. bias (N values of d_type, or NULL) selects the bias epilogue, relu the ReLU one. align:
 * the bytes every pointer of cuBLASLt's A (our B), B (our A), C and D is aligned to (kiln_cuda_lt_align). */
typedef struct kiln_cuda_lt_shape {
    kiln_dtype ab_type, d_type;
    bool ta, tb, relu;
    int64_t M, N, K, batch;
    int64_t lda, ldb, ldd;
    int64_t stride_a, stride_b, stride_d;
    const void *bias;
    uint32_t align[4];
} kiln_cuda_lt_shape;

/* cuBLASLt's descriptors of a product and the preference its heuristic is asked with. */
typedef struct kiln_cuda_lt_descs {
    cublasLtMatmulDesc_t op;
    cublasLtMatrixLayout_t la, lb, ld; /* cuBLASLt's A (our B), B (our A), C and D */
    cublasLtMatmulPreference_t pref;
} kiln_cuda_lt_descs;

/* Makes d (zeroed by the caller) for product s within workspace_bytes of workspace: the one cuBLASLt
 * set-up of both runtimes (the tensor engine's MatMul / Gemm family, the LLM's products). On failure
 * d holds what was made: kiln_cuda_lt_descs_free it either way. Host work only. */
kiln_status kiln_cuda_lt_descs_make(const kiln_cuda_lt_shape *s, size_t workspace_bytes, kiln_cuda_lt_descs *d);
/* Destroys what d holds and zeroes it (a zeroed d is fine). A caller that keeps some descriptors moves
 * them out (and zeroes those fields) first. */
void kiln_cuda_lt_descs_free(kiln_cuda_lt_descs *d);
/* The largest power of two, at most 256, dividing both the address p and stride_bytes. */
uint32_t kiln_cuda_lt_align(const void *p, int64_t stride_bytes);

/* Whether a recorded cuBLASLt algorithm (a tactic) may run the product of descriptors op, la (A), lb
 * (B), ld (C and D) on ctx: cublasLtMatmulAlgoCheck accepts it within ctx's workspace, and the
 * operands have the alignment it needs (al: bytes for A, B, C, D). Otherwise why gets the reason.
 * Host work only. Used by the tensor engine's nodes and the LLM runtime's products alike. */
bool kiln_cuda_lt_algo_fits(const kiln_cuda_ctx *ctx, cublasLtMatmulDesc_t op, cublasLtMatrixLayout_t la,
                            cublasLtMatrixLayout_t lb, cublasLtMatrixLayout_t ld, const cublasLtMatmulAlgo_t *algo,
                            const uint32_t *al, char *why, size_t cap);

#endif
