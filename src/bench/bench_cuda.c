/* bench_cuda.c — kiln bench's GPU parts through the CUDA runtime (built with the cuda backend only;
 * without it both functions say so): the GPU's identity and library versions, and its ceilings — a
 * device-to-device copy (bandwidth counts the bytes read and written) and cuBLASLt GEMMs in fp16
 * (fp32 accumulation) and fp32 (no TF32), each the best of 10 timed runs after 2 untimed ones. */
#include "bench/bench.h"

#include "core/status.h"

#ifdef KILN_HAVE_CUDA
#include "backends/cuda/cuda_kernels.h"

#include <string.h>

kiln_status kiln_bench_cuda_info(int device, kiln_bench_env *env) {
    struct cudaDeviceProp p;
    KILN_CUDA_TRY(cudaGetDeviceProperties(&p, device));
    snprintf(env->gpu_name, sizeof env->gpu_name, "%.127s", p.name);
    snprintf(env->gpu_arch, sizeof env->gpu_arch, "sm_%d%d, %d SMs", p.major, p.minor, p.multiProcessorCount);
    if (cudaDeviceGetPCIBusId(env->gpu_pci, (int)sizeof env->gpu_pci, device) != cudaSuccess) env->gpu_pci[0] = '\0';
    int drv = 0, rt = 0;
    if (cudaDriverGetVersion(&drv) == cudaSuccess) snprintf(env->cuda_driver, sizeof env->cuda_driver, "%d.%d", drv / 1000, drv % 1000 / 10);
    if (cudaRuntimeGetVersion(&rt) == cudaSuccess) snprintf(env->cuda_runtime, sizeof env->cuda_runtime, "%d.%d", rt / 1000, rt % 1000 / 10);
    size_t lt = cublasLtGetVersion(), dnn = cudnnGetVersion();
    snprintf(env->cublas, sizeof env->cublas, "%zu.%zu.%zu", lt / 10000, lt % 10000 / 100, lt % 100);
    snprintf(env->cudnn, sizeof env->cudnn, "%zu.%zu.%zu", dnn / 10000, dnn % 10000 / 100, dnn % 100);
    return KILN_OK;
}

/* Best milliseconds of 10 copies of `bytes` within one device buffer pair. */
static kiln_status copy_ms(void *a, void *b, size_t bytes, cudaEvent_t e0, cudaEvent_t e1, double *best) {
    *best = 1e30;
    for (int i = 0; i < 12; i++) {
        KILN_CUDA_TRY(cudaEventRecord(e0, 0));
        KILN_CUDA_TRY(cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice, 0));
        KILN_CUDA_TRY(cudaEventRecord(e1, 0));
        KILN_CUDA_TRY(cudaEventSynchronize(e1));
        float ms;
        KILN_CUDA_TRY(cudaEventElapsedTime(&ms, e0, e1));
        if (i >= 2 && ms < *best) *best = ms;
    }
    return KILN_OK;
}

/* Best milliseconds of an n x n x n GEMM D = A B in type t (compute 32F) on buffers of the right size. */
static kiln_status gemm_ms(cublasLtHandle_t lt, cudaDataType_t t, int64_t n, void *a, void *b, void *d, void *ws, size_t ws_bytes,
                           cudaEvent_t e0, cudaEvent_t e1, double *best) {
    cublasLtMatmulDesc_t op = NULL;
    cublasLtMatrixLayout_t l = NULL;
    cublasLtMatmulPreference_t pref = NULL;
    kiln_status s = KILN_OK;
    float alpha = 1, beta = 0;
    cublasLtMatmulHeuristicResult_t res;
    int got = 0;
    *best = 1e30;
#define STEP(call)                                                                                 \
    do {                                                                                           \
        cublasStatus_t st_ = (call);                                                               \
        if (s == KILN_OK && st_ != CUBLAS_STATUS_SUCCESS) s = kiln_cublas_error(st_, #call, __FILE__, __LINE__); \
    } while (0)
    STEP(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    if (s == KILN_OK) STEP(cublasLtMatrixLayoutCreate(&l, t, (uint64_t)n, (uint64_t)n, n));
    if (s == KILN_OK) STEP(cublasLtMatmulPreferenceCreate(&pref));
    if (s == KILN_OK)
        STEP(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws_bytes, sizeof ws_bytes));
    if (s == KILN_OK) STEP(cublasLtMatmulAlgoGetHeuristic(lt, op, l, l, l, l, pref, 1, &res, &got));
    if (s == KILN_OK && got == 0) s = kiln_error(KILN_ERR_BACKEND, "cuBLASLt has no algorithm for a %lld^3 GEMM", (long long)n);
    for (int i = 0; s == KILN_OK && i < 12; i++) {
        cudaError_t e = cudaEventRecord(e0, 0);
        STEP(cublasLtMatmul(lt, op, &alpha, a, l, b, l, &beta, d, l, d, l, &res.algo, ws, ws_bytes, 0));
        if (e == cudaSuccess) e = cudaEventRecord(e1, 0);
        if (e == cudaSuccess) e = cudaEventSynchronize(e1);
        float ms = 0;
        if (e == cudaSuccess) e = cudaEventElapsedTime(&ms, e0, e1);
        if (s == KILN_OK && e != cudaSuccess) s = kiln_cuda_error(e, "timing a GEMM", __FILE__, __LINE__);
        if (i >= 2 && ms < *best) *best = ms;
    }
#undef STEP
    if (pref) cublasLtMatmulPreferenceDestroy(pref);
    if (l) cublasLtMatrixLayoutDestroy(l);
    if (op) cublasLtMatmulDescDestroy(op);
    return s;
}

/* The measurements, on buffers allocated by the caller (freed there also on failure). */
static kiln_status measure(void **buf, size_t copy_bytes, cublasLtHandle_t lt, cudaEvent_t e0, cudaEvent_t e1, kiln_bench_ceilings *out) {
    const size_t ws_bytes = (size_t)32 << 20;
    double ms;
    KILN_TRY(copy_ms(buf[0], buf[1], copy_bytes, e0, e1, &ms));
    out->mem_gbps = 2.0 * (double)copy_bytes / (ms * 1e-3) / 1e9;
    const int64_t n16 = 8192, n32 = 4096;
    KILN_CUDA_TRY(cudaMemset(buf[0], 0, copy_bytes));
    KILN_CUDA_TRY(cudaMemset(buf[1], 0, copy_bytes));
    char *a = buf[0], *b = a + n16 * n16 * 2, *d = buf[1];
    KILN_TRY(gemm_ms(lt, CUDA_R_16F, n16, a, b, d, buf[2], ws_bytes, e0, e1, &ms));
    out->tflops_fp16 = 2.0 * (double)n16 * n16 * n16 / (ms * 1e-3) / 1e12;
    b = a + n32 * n32 * 4;
    KILN_TRY(gemm_ms(lt, CUDA_R_32F, n32, a, b, d, buf[2], ws_bytes, e0, e1, &ms));
    out->tflops_fp32 = 2.0 * (double)n32 * n32 * n32 / (ms * 1e-3) / 1e12;
    return KILN_OK;
}

kiln_status kiln_bench_ceilings_measure_gpu(int device, kiln_bench_ceilings *out) {
    memset(out, 0, sizeof *out);
    struct cudaDeviceProp p;
    KILN_CUDA_TRY(cudaSetDevice(device));
    KILN_CUDA_TRY(cudaGetDeviceProperties(&p, device));
    snprintf(out->device, sizeof out->device, "%.127s", p.name);
    const size_t copy_bytes = (size_t)512 << 20; /* >= two 8192^2 fp16 matrices */
    void *buf[3] = {NULL, NULL, NULL};
    cublasLtHandle_t lt = NULL;
    cudaEvent_t e0 = NULL, e1 = NULL;
    kiln_status s = KILN_OK;
    cudaError_t e = cudaMalloc(&buf[0], copy_bytes);
    if (e == cudaSuccess) e = cudaMalloc(&buf[1], copy_bytes);
    if (e == cudaSuccess) e = cudaMalloc(&buf[2], (size_t)32 << 20);
    if (e == cudaSuccess) e = cudaEventCreate(&e0);
    if (e == cudaSuccess) e = cudaEventCreate(&e1);
    if (e != cudaSuccess) s = kiln_cuda_error(e, "allocating the ceiling buffers", __FILE__, __LINE__);
    if (s == KILN_OK && cublasLtCreate(&lt) != CUBLAS_STATUS_SUCCESS) s = kiln_error(KILN_ERR_BACKEND, "cublasLtCreate failed");
    if (s == KILN_OK) s = measure(buf, copy_bytes, lt, e0, e1, out);
    if (lt) cublasLtDestroy(lt);
    if (e0) cudaEventDestroy(e0);
    if (e1) cudaEventDestroy(e1);
    for (int i = 0; i < 3; i++)
        if (buf[i]) cudaFree(buf[i]);
    if (s != KILN_OK) return s;
    snprintf(out->method, sizeof out->method,
             "cudaMemcpyAsync device-to-device of 512 MiB (read + write bytes); cuBLASLt GEMM 8192^3 fp16 and 4096^3 fp32 "
             "(no TF32), fp32 accumulation; best of 10 after 2 warm-up runs");
    out->known = true;
    return KILN_OK;
}

#else

kiln_status kiln_bench_cuda_info(int device, kiln_bench_env *env) {
    (void)device;
    (void)env;
    return kiln_error(KILN_ERR_UNSUPPORTED, "this kiln was built without the cuda backend");
}

kiln_status kiln_bench_ceilings_measure_gpu(int device, kiln_bench_ceilings *out) {
    (void)device;
    (void)out;
    return kiln_error(KILN_ERR_UNSUPPORTED, "this kiln was built without the cuda backend: no GPU ceilings");
}

#endif
