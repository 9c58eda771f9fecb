/* threadpool.c — the process-wide worker pool behind kiln_parallel_for (threadpool.h). A job is
 * published by bumping an atomic generation; workers that are spinning see it at once, sleeping ones
 * are woken through the condition variable. The caller runs range 0 and then waits, spinning, for
 * the count of unfinished ranges to reach zero. One job at a time: a second caller runs serially. */
#include "core/threadpool.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <unistd.h>

#define POOL_MAX_THREADS 64
/* Polls of the generation before a worker sleeps (some 50 us), and before a waiter yields. */
#define POOL_SPIN 2000
#define WAIT_SPIN 2000

typedef struct pool {
    int nthreads; /* callers included; workers are nthreads - 1 */
    bool started;
    pthread_t workers[POOL_MAX_THREADS];
    pthread_mutex_t lock;    /* guards sleeping, with wake */
    pthread_cond_t wake;
    pthread_mutex_t submit;  /* held by the thread whose job runs */
    atomic_uint generation;  /* bumped per job */
    atomic_int pending;      /* ranges of the current job not yet finished */
    kiln_parallel_fn fn;
    void *ctx;
    int64_t n;
    int parts;
} pool;

static pool g_pool = {.lock = PTHREAD_MUTEX_INITIALIZER,
                      .wake = PTHREAD_COND_INITIALIZER,
                      .submit = PTHREAD_MUTEX_INITIALIZER};
static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static _Thread_local bool t_inside; /* this thread is running a range of a parallel-for */

static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

/* The configured thread count: KILN_NUM_THREADS, OMP_NUM_THREADS, else online processors. */
static int configured_threads(void) {
    const char *names[] = {"KILN_NUM_THREADS", "OMP_NUM_THREADS"};
    for (int i = 0; i < 2; i++) {
        const char *v = getenv(names[i]);
        char *end;
        long t = v ? strtol(v, &end, 10) : 0;
        if (v && *v && !*end && t >= 1) return t > POOL_MAX_THREADS ? POOL_MAX_THREADS : (int)t;
    }
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    return cpus < 1 ? 1 : cpus > POOL_MAX_THREADS ? POOL_MAX_THREADS : (int)cpus;
}

static void run_part(pool *p, int part) {
    int64_t b = p->n * part / p->parts, e = p->n * (part + 1) / p->parts;
    t_inside = true;
    if (b < e) p->fn(p->ctx, b, e);
    t_inside = false;
}

static void *worker_main(void *arg) {
    pool *p = &g_pool;
    int index = (int)(intptr_t)arg; /* 1 .. nthreads - 1 */
    unsigned seen = 0; /* the workers start before the first job is published */
    for (;;) {
        unsigned gen;
        int spins = 0;
        while ((gen = atomic_load_explicit(&p->generation, memory_order_acquire)) == seen && spins < POOL_SPIN) {
            cpu_relax();
            spins++;
        }
        if (gen == seen) {
            pthread_mutex_lock(&p->lock);
            while ((gen = atomic_load_explicit(&p->generation, memory_order_acquire)) == seen)
                pthread_cond_wait(&p->wake, &p->lock);
            pthread_mutex_unlock(&p->lock);
        }
        seen = gen;
        if (index < p->parts) run_part(p, index);
        atomic_fetch_sub_explicit(&p->pending, 1, memory_order_acq_rel);
    }
    return NULL;
}

/* Starts the workers once; on a failed start the pool stays serial (nthreads 1). */
static void pool_start(void) {
    pool *p = &g_pool;
    int want = configured_threads();
    p->nthreads = 1;
    for (int i = 1; i < want; i++) {
        pthread_attr_t attr;
        pthread_attr_init(&attr);
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        int rc = pthread_create(&p->workers[i], &attr, worker_main, (void *)(intptr_t)i);
        pthread_attr_destroy(&attr);
        if (rc != 0) break;
        p->nthreads = i + 1;
    }
    p->started = true;
}

int kiln_threadpool_size(void) {
    pthread_once(&g_once, pool_start);
    return g_pool.nthreads;
}

void kiln_parallel_for(int64_t n, int64_t min_chunk, kiln_parallel_fn fn, void *ctx) {
    if (n <= 0) return;
    if (min_chunk < 1) min_chunk = 1;
    int64_t parts = n / min_chunk;
    int threads = kiln_threadpool_size();
    if (parts > threads) parts = threads;
    pool *p = &g_pool;
    if (parts <= 1 || t_inside || pthread_mutex_trylock(&p->submit) != 0) {
        fn(ctx, 0, n);
        return;
    }
    p->fn = fn;
    p->ctx = ctx;
    p->n = n;
    p->parts = (int)parts;
    /* every worker takes part in the generation (those beyond parts only acknowledge it) */
    atomic_store_explicit(&p->pending, threads - 1, memory_order_relaxed);
    pthread_mutex_lock(&p->lock);
    atomic_fetch_add_explicit(&p->generation, 1, memory_order_release);
    pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->lock);
    run_part(p, 0);
    for (int spins = 0; atomic_load_explicit(&p->pending, memory_order_acquire) > 0; spins++) {
        if (spins < WAIT_SPIN) cpu_relax();
        else sched_yield();
    }
    pthread_mutex_unlock(&p->submit);
}
