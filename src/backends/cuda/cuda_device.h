/* cuda_device.h — the per-device layer that the tensor engine (src/backends/cuda/) and the LLM runtime
 * (src/llm/cuda/) share: opening and closing a stream of work (a non-blocking stream, a cuBLASLt handle
 * and its workspace, optionally a cuDNN handle: a kiln_cuda_ctx), the process-wide setup lock, CUDA
 * graph capture under that lock, and the device part of the timing cache's keys. docs/cuda.md ("One
 * CUDA stack") says which struct owns what and who locks what. Included by C and CUDA C. */
#ifndef KILN_CUDA_DEVICE_H
#define KILN_CUDA_DEVICE_H

#include "backends/cuda/cuda_kernels.h"

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The process-wide setup lock. A CUDA graph capture must not overlap a call from another thread that
 * may synchronize the device or change its memory map (cudaMalloc, cudaFree, cudaMallocHost,
 * cudaFreeHost, library handles made or destroyed, library kernels loaded lazily by a first run):
 * under the relaxed capture mode such a call breaks the capture. Both runtimes hold it around their
 * captures and every such call: the tensor engine's plans' first runs, context creation and
 * destruction, arena growth and host-value uploads; the LLM runtime's model, KV cache and sampler
 * creation and destruction and its eager steps (which may make cuBLASLt plans and time GEMV
 * configurations). Replays (and the tensor engine's eager runs of a known plan) do not take it. Not
 * recursive. */
void kiln_cuda_setup_lock(void);
void kiln_cuda_setup_unlock(void);

/* What kiln_cuda_ctx_open makes besides the stream. */
enum {
    KILN_CUDA_OPEN_BLAS = 1, /* a cuBLASLt handle and a workspace of workspace_bytes */
    KILN_CUDA_OPEN_DNN = 2,  /* a cuDNN handle bound to the stream */
};

/* Makes the device's execution resources in kc (zeroed by the caller): the current device set to
 * `device`, a non-blocking stream, what `what` asks for (KILN_CUDA_OPEN_*), and the device's SM count
 * and compute capability. The caller holds the setup lock. On failure what was made stays in kc for
 * kiln_cuda_ctx_close. */
kiln_status kiln_cuda_ctx_open(int device, size_t workspace_bytes, unsigned what, kiln_cuda_ctx *kc);
/* Waits for kc's stream, then frees what kiln_cuda_ctx_open made (the handles, the workspace, the
 * stream: any of them may be absent) and clears those fields; kc->zero and the per-call fields are the
 * owner's. The caller holds the setup lock. */
void kiln_cuda_ctx_close(kiln_cuda_ctx *kc);

/* The environment part of a timing-cache key (engine/timing_cache.h), the same for both runtimes: the
 * GPU's name and compute capability, the driver, CUDA runtime, cuBLASLt and cuDNN versions ("NVIDIA
 * H200 sm_90, driver 12080, runtime 13000, cublasLt 130000, cudnn 91900"). */
kiln_status kiln_cuda_env_key(int device, char *buf, size_t cap);

/* Captures the work that enqueue(arg) puts on stream into an instantiated CUDA graph, holding the
 * setup lock from BeginCapture to EndCapture. enqueue must not take the setup lock, allocate or
 * synchronize (cuda_kernels.h's capture rules). KILN_ERR_BACKEND when the capture cannot begin (the
 * stream is unchanged). Else KILN_OK, with *exec the graph (the work has not run: launch it), or NULL
 * when enqueue failed or the capture or instantiation did (why says which; the error is cleared, so
 * the caller may run the work eagerly). */
kiln_status kiln_cuda_capture(cudaStream_t stream, enum cudaStreamCaptureMode mode, kiln_status (*enqueue)(void *arg),
                              void *arg, cudaGraphExec_t *exec, char *why, size_t why_cap);

#ifdef __cplusplus
}
#endif

#endif
