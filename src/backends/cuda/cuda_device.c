/* cuda_device.c — the per-device layer of both CUDA runtimes (cuda_device.h): the process-wide setup
 * lock, opening and closing a stream of work with its library handles and workspace, CUDA graph
 * capture under the setup lock, and the environment part of timing-cache keys. */
#include "backends/cuda/cuda_device.h"

#include "core/status.h"

#include <pthread.h>
#include <stdio.h>

static pthread_mutex_t setup_lock = PTHREAD_MUTEX_INITIALIZER;

void kiln_cuda_setup_lock(void) { pthread_mutex_lock(&setup_lock); }
void kiln_cuda_setup_unlock(void) { pthread_mutex_unlock(&setup_lock); }

kiln_status kiln_cuda_ctx_open(int device, size_t workspace_bytes, unsigned what, kiln_cuda_ctx *kc) {
    KILN_CUDA_TRY(cudaSetDevice(device));
    KILN_CUDA_TRY(cudaDeviceGetAttribute(&kc->sm_count, cudaDevAttrMultiProcessorCount, device));
    KILN_CUDA_TRY(cudaDeviceGetAttribute(&kc->cc_major, cudaDevAttrComputeCapabilityMajor, device));
    KILN_CUDA_TRY(cudaDeviceGetAttribute(&kc->cc_minor, cudaDevAttrComputeCapabilityMinor, device));
    KILN_CUDA_TRY(cudaStreamCreateWithFlags(&kc->stream, cudaStreamNonBlocking));
    if (what & KILN_CUDA_OPEN_BLAS) {
        KILN_CUBLAS_TRY(cublasLtCreate(&kc->lt));
        KILN_CUDA_TRY(cudaMalloc(&kc->workspace, workspace_bytes));
        kc->workspace_bytes = workspace_bytes;
    }
    if (what & KILN_CUDA_OPEN_DNN) {
        KILN_CUDNN_TRY(cudnnCreate(&kc->dnn));
        KILN_CUDNN_TRY(cudnnSetStream(kc->dnn, kc->stream));
    }
    return KILN_OK;
}

void kiln_cuda_ctx_close(kiln_cuda_ctx *kc) {
    /* teardown: nothing to report, so the statuses are not kept */
    if (kc->stream) (void)cudaStreamSynchronize(kc->stream);
    if (kc->dnn) (void)cudnnDestroy(kc->dnn);
    if (kc->workspace) (void)cudaFree(kc->workspace);
    if (kc->lt) (void)cublasLtDestroy(kc->lt);
    if (kc->stream) (void)cudaStreamDestroy(kc->stream);
    kc->dnn = NULL;
    kc->workspace = NULL;
    kc->workspace_bytes = 0;
    kc->lt = NULL;
    kc->stream = NULL;
}

kiln_status kiln_cuda_env_key(int device, char *buf, size_t cap) {
    struct cudaDeviceProp prop;
    KILN_CUDA_TRY(cudaGetDeviceProperties(&prop, device));
    int driver = 0, runtime = 0;
    KILN_CUDA_TRY(cudaDriverGetVersion(&driver));
    KILN_CUDA_TRY(cudaRuntimeGetVersion(&runtime));
    snprintf(buf, cap, "%s sm_%d%d, driver %d, runtime %d, cublasLt %zu, cudnn %zu", prop.name, prop.major, prop.minor,
             driver, runtime, cublasLtGetVersion(), cudnnGetVersion());
    return KILN_OK;
}

kiln_status kiln_cuda_capture(cudaStream_t stream, enum cudaStreamCaptureMode mode, kiln_status (*enqueue)(void *arg),
                              void *arg, cudaGraphExec_t *exec, char *why, size_t why_cap) {
    *exec = NULL;
    why[0] = '\0';
    kiln_cuda_setup_lock();
    cudaError_t e = cudaStreamBeginCapture(stream, mode);
    if (e != cudaSuccess) {
        kiln_cuda_setup_unlock();
        (void)cudaGetLastError();
        return kiln_error(KILN_ERR_BACKEND, "cudaStreamBeginCapture: %s", cudaGetErrorString(e));
    }
    const kiln_status s = enqueue(arg);
    if (s != KILN_OK) snprintf(why, why_cap, "during capture: %s", kiln_last_error());
    cudaGraph_t graph = NULL;
    e = cudaStreamEndCapture(stream, &graph);
    kiln_cuda_setup_unlock();
    if (s == KILN_OK && e != cudaSuccess) snprintf(why, why_cap, "cudaStreamEndCapture: %s", cudaGetErrorString(e));
    if (s == KILN_OK && e == cudaSuccess) {
        e = cudaGraphInstantiate(exec, graph, 0);
        if (e != cudaSuccess) {
            *exec = NULL;
            snprintf(why, why_cap, "cudaGraphInstantiate: %s", cudaGetErrorString(e));
        }
    }
    if (graph) (void)cudaGraphDestroy(graph);
    if (why[0]) (void)cudaGetLastError(); /* capture errors are not sticky: cleared for an eager run */
    return KILN_OK;
}
