/* test_cpu_threads.c — the threads a CPU engine's process holds, run with OPENBLAS_NUM_THREADS=2
 * and KILN_NUM_THREADS=4 (tests/CMakeLists.txt): OpenBLAS starts a worker as it loads, and
 * kiln_cpu_gemm_init must stop it, leaving only the pool's threads, which stay the only ones after
 * products large enough to be split over the pool and after a fork; the products and a
 * parallel-for over more threads than this machine may have processors (short spins) still give
 * exact results. */
#include "check.h"

#include "backends/cpu/cpu_gemm.h"
#include "core/threadpool.h"

#include <cblas.h>
#include <dirent.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

/* Threads of this process: the entries of /proc/self/task. */
static int thread_count(void) {
    DIR *d = opendir("/proc/self/task");
    if (!d) return -1;
    int n = 0;
    for (struct dirent *e; (e = readdir(d));)
        if (e->d_name[0] != '.') n++;
    closedir(d);
    return n;
}

static void add_range(void *ctx, int64_t b, int64_t e) {
    _Atomic int64_t *sum = ctx;
    int64_t s = 0;
    for (int64_t i = b; i < e; i++) s += i;
    atomic_fetch_add(sum, s);
}

/* C = A B for small-integer A, B (exact in float32) against a plain loop. */
static void check_product(int M, int N, int K) {
    float *A = malloc(sizeof(float) * M * K), *B = malloc(sizeof(float) * K * N), *C = malloc(sizeof(float) * M * N);
    for (int i = 0; i < M * K; i++) A[i] = (float)(i % 7 - 3);
    for (int i = 0; i < K * N; i++) B[i] = (float)(i % 5 - 2);
    kiln_cpu_sgemm(false, false, M, N, K, 1.0f, A, K, B, N, 0.0f, C, N);
    int wrong = 0;
    for (int m = 0; m < M; m++)
        for (int n = 0; n < N; n++) {
            float ref = 0;
            for (int k = 0; k < K; k++) ref += A[m * K + k] * B[k * N + n];
            wrong += C[m * N + n] != ref;
        }
    CHECKF(wrong == 0, "%dx%dx%d product: %d wrong elements", M, N, K, wrong);
    free(A);
    free(B);
    free(C);
}

int main(void) {
    int blas = openblas_get_num_threads();
    if (openblas_get_parallel() == 1) /* the pthreads build: its workers run from load on */
        CHECKF(thread_count() == blas, "before init: %d threads, expected main + OpenBLAS's %d - 1", thread_count(), blas);
    kiln_cpu_gemm_init();
    CHECKF(thread_count() == 1, "after init: %d threads, expected main alone", thread_count());
    CHECK(openblas_get_num_threads() == 1);

    int pool = kiln_threadpool_size(); /* 4 under ctest */
    CHECKF(thread_count() == pool, "pool started: %d threads, expected %d", thread_count(), pool);
    for (int64_t n = 1; n <= 100000; n *= 7) {
        _Atomic int64_t sum = 0;
        kiln_parallel_for(n, 1, add_range, &sum);
        CHECKF(atomic_load(&sum) == n * (n - 1) / 2, "parallel-for over %lld", (long long)n);
    }
    check_product(96, 200, 130);
    check_product(3, 64, 50);
    CHECKF(thread_count() == pool, "after the products: %d threads, expected the pool's %d", thread_count(), pool);
    pid_t child = fork(); /* OpenBLAS's fork handlers must not start its workers again */
    if (child == 0) _exit(0);
    int status = 0;
    CHECK(child > 0 && waitpid(child, &status, 0) == child && WIFEXITED(status));
    check_product(96, 200, 130);
    CHECKF(thread_count() == pool, "after a fork: %d threads, expected the pool's %d", thread_count(), pool);
    return checks_report("test_cpu_threads");
}
