/* test_cuda_device.c — the per-device layer both CUDA runtimes share (src/backends/cuda/cuda_device.h):
 * kiln_cuda_ctx_open makes what it is asked for (stream always; cuBLASLt handle and workspace; cuDNN
 * handle) with the device's SM count and compute capability, and kiln_cuda_ctx_close clears it;
 * kiln_cuda_capture turns enqueued work into a graph that computes what the eager work does, holds the
 * setup lock while capturing (another thread's kiln_cuda_setup_lock waits until the capture ends),
 * and reports a failing enqueue or a call that breaks the capture (a stream synchronization) as "no
 * graph" with the reason, leaving no error behind (the stream then runs the work eagerly);
 * kiln_cuda_env_key names the GPU. Exits 77 (skipped) without a GPU. */
#include "check.h"

#include "backends/cuda/cuda_device.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#define N 4096

/* What the captured work writes: bytes of value `value` into buf. */
typedef struct fill_arg {
    cudaStream_t stream;
    unsigned char *buf;
    int value;
    bool fail;           /* return an error after the memset */
    bool sync_inside;    /* synchronize the stream (forbidden while capturing) */
    bool *other_started; /* set: the other thread has asked for the setup lock */
    double done_ms;      /* out: when the enqueue ended */
} fill_arg;

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static kiln_status fill(void *p) {
    fill_arg *a = p;
    KILN_CUDA_TRY(cudaMemsetAsync(a->buf, a->value, N, a->stream));
    if (a->other_started) { /* hold the capture open until the other thread waits for the lock */
        const double t0 = now_ms();
        while (!__atomic_load_n(a->other_started, __ATOMIC_ACQUIRE) && now_ms() - t0 < 2000) {
        }
        const double t1 = now_ms();
        while (now_ms() - t1 < 50) {
        }
    }
    if (a->sync_inside) KILN_CUDA_TRY(cudaStreamSynchronize(a->stream));
    a->done_ms = now_ms();
    if (a->fail) return kiln_error(KILN_ERR_INTERNAL, "the enqueue failed on purpose");
    return KILN_OK;
}

/* The other thread: asks for the setup lock while the capture runs; records when it got it. */
typedef struct waiter {
    bool started;
    double got_ms;
} waiter;

static void *wait_for_lock(void *p) {
    waiter *w = p;
    __atomic_store_n(&w->started, true, __ATOMIC_RELEASE);
    kiln_cuda_setup_lock();
    w->got_ms = now_ms();
    kiln_cuda_setup_unlock();
    return NULL;
}

static bool all_bytes(const unsigned char *h, int value) {
    for (int i = 0; i < N; i++)
        if (h[i] != (unsigned char)value) return false;
    return true;
}

static void test_open_close(void) {
    kiln_cuda_ctx kc;
    memset(&kc, 0, sizeof kc);
    kiln_cuda_setup_lock();
    const kiln_status s = kiln_cuda_ctx_open(0, 1 << 20, KILN_CUDA_OPEN_BLAS | KILN_CUDA_OPEN_DNN, &kc);
    kiln_cuda_setup_unlock();
    CHECK_OK(s);
    CHECK(kc.stream && kc.lt && kc.dnn && kc.workspace && kc.workspace_bytes == (1 << 20));
    CHECK(kc.sm_count > 0 && kc.cc_major >= 5);
    kiln_cuda_setup_lock();
    kiln_cuda_ctx_close(&kc);
    kiln_cuda_setup_unlock();
    CHECK(!kc.stream && !kc.lt && !kc.dnn && !kc.workspace && kc.workspace_bytes == 0);

    memset(&kc, 0, sizeof kc); /* the stream alone */
    kiln_cuda_setup_lock();
    CHECK_OK(kiln_cuda_ctx_open(0, 0, 0, &kc));
    CHECK(kc.stream && !kc.lt && !kc.dnn && !kc.workspace);
    kiln_cuda_ctx_close(&kc);
    kiln_cuda_setup_unlock();
}

static void test_capture(void) {
    kiln_cuda_ctx kc;
    memset(&kc, 0, sizeof kc);
    unsigned char *d = NULL, h[N];
    kiln_cuda_setup_lock();
    kiln_status s = kiln_cuda_ctx_open(0, 0, 0, &kc);
    if (s == KILN_OK && cudaMalloc((void **)&d, N) != cudaSuccess) s = KILN_ERR_BACKEND;
    kiln_cuda_setup_unlock();
    CHECK_OK(s);
    if (s != KILN_OK) goto done;
    char why[256];
    cudaGraphExec_t exec = NULL;

    /* a graph that writes what the eager work writes; the other thread waits for the capture's end */
    waiter w = {false, 0};
    fill_arg a = {kc.stream, d, 7, false, false, &w.started, 0};
    pthread_t th;
    CHECK(pthread_create(&th, NULL, wait_for_lock, &w) == 0);
    CHECK_OK(kiln_cuda_capture(kc.stream, cudaStreamCaptureModeRelaxed, fill, &a, &exec, why, sizeof why));
    pthread_join(th, NULL);
    CHECKF(exec != NULL && why[0] == 0, "no graph: %s", why);
    CHECKF(w.got_ms >= a.done_ms, "the other thread took the setup lock during the capture");
    CHECK(cudaMemset(d, 0, N) == cudaSuccess);
    if (exec) {
        CHECK(cudaGraphLaunch(exec, kc.stream) == cudaSuccess);
        CHECK(cudaStreamSynchronize(kc.stream) == cudaSuccess);
        CHECK(cudaMemcpy(h, d, N, cudaMemcpyDeviceToHost) == cudaSuccess && all_bytes(h, 7));
        cudaGraphExecDestroy(exec);
    }

    /* a failing enqueue: no graph, the reason, no error left, the stream usable */
    a = (fill_arg){kc.stream, d, 9, true, false, NULL, 0};
    CHECK_OK(kiln_cuda_capture(kc.stream, cudaStreamCaptureModeThreadLocal, fill, &a, &exec, why, sizeof why));
    CHECKF(!exec && strstr(why, "during capture") && strstr(why, "on purpose"), "why: %s", why);
    CHECK(cudaGetLastError() == cudaSuccess);

    /* a call that breaks the capture */
    a = (fill_arg){kc.stream, d, 11, false, true, NULL, 0};
    CHECK_OK(kiln_cuda_capture(kc.stream, cudaStreamCaptureModeThreadLocal, fill, &a, &exec, why, sizeof why));
    CHECKF(!exec && why[0], "a capture with a stream synchronization inside gave a graph");
    CHECK(cudaGetLastError() == cudaSuccess);
    a = (fill_arg){kc.stream, d, 13, false, false, NULL, 0};
    CHECK_OK(fill(&a));
    CHECK(cudaStreamSynchronize(kc.stream) == cudaSuccess);
    CHECK(cudaMemcpy(h, d, N, cudaMemcpyDeviceToHost) == cudaSuccess && all_bytes(h, 13));
done:
    kiln_cuda_setup_lock();
    if (d) cudaFree(d);
    kiln_cuda_ctx_close(&kc);
    kiln_cuda_setup_unlock();
}

int main(void) {
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess || count < 1) {
        printf("skipped: no GPU (%s)\n", count < 1 ? "no CUDA device" : cudaGetErrorString(cudaGetLastError()));
        return 77;
    }
    char env[512];
    CHECK_OK(kiln_cuda_env_key(0, env, sizeof env));
    CHECKF(strstr(env, " sm_") && strstr(env, "cublasLt"), "env key: %s", env);
    printf("test_cuda_device on %s\n", env);
    test_open_close();
    test_capture();
    return checks_report("test_cuda_device");
}
