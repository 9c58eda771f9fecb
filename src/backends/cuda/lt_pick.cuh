/* lt_pick.cuh — the fastest of cuBLASLt's heuristic algorithms for one matmul, timed on the stream
 * (lt_pick.cu): used by the quantized GEMMs (quant_gemm.cu's IMMA, quant_fp8.cu's FP8), whose
 * descriptors are made once per node and context, on an eager first run. */
#ifndef KILN_CUDA_LT_PICK_CUH
#define KILN_CUDA_LT_PICK_CUH

#include <cublasLt.h>
#include <cuda_runtime.h>

#define KILN_LT_PICK_MAX 8  /* heuristic candidates asked for and timed */
#define KILN_LT_PICK_REPS 3 /* timed runs of each candidate, after one warm-up run */

/* One matmul's descriptors and operands, as cublasLtMatmul takes them (C has D's layout). */
typedef struct kiln_lt_problem {
    cublasLtHandle_t lt;
    cublasLtMatmulDesc_t op;
    cublasLtMatrixLayout_t la, lb, ld;
    cublasLtMatmulPreference_t pref; /* workspace limit and operand alignments */
    const void *alpha, *a, *b, *beta;
    void *d;
    void *ws;
    size_t ws_bytes;
    cudaStream_t stream;
    const void *c; /* C, read when beta is not 0; NULL: D */
} kiln_lt_problem;

/* *out = the algorithm of p to run: cuBLASLt's heuristic asked for up to KILN_LT_PICK_MAX
 * candidates; with more than one usable (state success, workspace within p->ws_bytes) and the stream
 * not capturing, each runs once, then KILN_LT_PICK_REPS times between two events, and the fastest
 * wins (its runs write D, which the caller's own call then overwrites); else the heuristic's first.
 * *found: how many were usable (0: cuBLASLt offers none, *out untouched), *timed whether timing
 * decided. Returns the heuristic query's status; a failure while timing only drops that candidate
 * (cudaGetLastError is cleared of a failed launch). Blocks the host until the timed runs are done. */
cublasStatus_t kiln_lt_pick(const kiln_lt_problem *p, cublasLtMatmulHeuristicResult_t *out, int *found, bool *timed);

#endif
