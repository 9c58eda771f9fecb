/* lt_pick.cu — kiln_lt_pick (lt_pick.cuh): cuBLASLt's heuristic candidates for one matmul timed with
 * CUDA events, the fastest kept. The heuristic's first choice is a guess from a performance model;
 * for the quantized GEMMs (FP8, IMMA with an alpha vector) on small-N shapes it is often not the
 * fastest, and a node's descriptors are made once, so timing a few candidates costs milliseconds
 * once per node and context. */
#include "backends/cuda/lt_pick.cuh"

/* Mean ms of KILN_LT_PICK_REPS runs of algo (after a warm-up run), or -1 when it fails. */
static float lt_time(const kiln_lt_problem *p, const cublasLtMatmulAlgo_t *algo, cudaEvent_t ev0, cudaEvent_t ev1) {
    const void *c = p->c ? p->c : p->d;
    cublasStatus_t e = cublasLtMatmul(p->lt, p->op, p->alpha, p->a, p->la, p->b, p->lb, p->beta, c, p->ld, p->d, p->ld, algo,
                                      p->ws, p->ws_bytes, p->stream);
    if (e == CUBLAS_STATUS_SUCCESS && cudaEventRecord(ev0, p->stream) != cudaSuccess) e = CUBLAS_STATUS_EXECUTION_FAILED;
    for (int r = 0; r < KILN_LT_PICK_REPS && e == CUBLAS_STATUS_SUCCESS; r++)
        e = cublasLtMatmul(p->lt, p->op, p->alpha, p->a, p->la, p->b, p->lb, p->beta, c, p->ld, p->d, p->ld, algo, p->ws,
                           p->ws_bytes, p->stream);
    float ms = -1;
    if (e == CUBLAS_STATUS_SUCCESS && cudaEventRecord(ev1, p->stream) == cudaSuccess &&
        cudaEventSynchronize(ev1) == cudaSuccess && cudaEventElapsedTime(&ms, ev0, ev1) == cudaSuccess)
        return ms / KILN_LT_PICK_REPS;
    (void)cudaStreamSynchronize(p->stream);
    (void)cudaGetLastError(); /* a failed launch is not sticky: it must not surface in a later check */
    return -1;
}

cublasStatus_t kiln_lt_pick(const kiln_lt_problem *p, cublasLtMatmulHeuristicResult_t *out, int *found, bool *timed) {
    cublasLtMatmulHeuristicResult_t res[KILN_LT_PICK_MAX];
    int got = 0, usable = 0;
    *found = 0;
    *timed = false;
    cublasStatus_t e = cublasLtMatmulAlgoGetHeuristic(p->lt, p->op, p->la, p->lb, p->ld, p->ld, p->pref, KILN_LT_PICK_MAX,
                                                      res, &got);
    if (e != CUBLAS_STATUS_SUCCESS) return e;
    for (int i = 0; i < got && i < KILN_LT_PICK_MAX; i++) /* keep the usable ones, in the heuristic's order */
        if (res[i].state == CUBLAS_STATUS_SUCCESS && res[i].workspaceSize <= p->ws_bytes) res[usable++] = res[i];
    *found = usable;
    if (usable == 0) return CUBLAS_STATUS_SUCCESS;
    *out = res[0];
    cudaStreamCaptureStatus cap = cudaStreamCaptureStatusNone;
    if (usable == 1 || cudaStreamIsCapturing(p->stream, &cap) != cudaSuccess || cap != cudaStreamCaptureStatusNone)
        return CUBLAS_STATUS_SUCCESS;
    cudaEvent_t ev0 = NULL, ev1 = NULL;
    if (cudaEventCreate(&ev0) != cudaSuccess || cudaEventCreate(&ev1) != cudaSuccess) {
        if (ev0) cudaEventDestroy(ev0);
        (void)cudaGetLastError();
        return CUBLAS_STATUS_SUCCESS;
    }
    float best = -1;
    for (int i = 0; i < usable; i++) {
        float ms = lt_time(p, &res[i].algo, ev0, ev1);
        if (ms >= 0 && (best < 0 || ms < best)) {
            best = ms;
            *out = res[i];
        }
    }
    cudaEventDestroy(ev0);
    cudaEventDestroy(ev1);
    *timed = best >= 0;
    return CUBLAS_STATUS_SUCCESS;
}
