/* threadpool.c — the process-wide worker pool behind kiln_parallel_for (threadpool.h). A job is cut
 * into chunks (a few per thread) that the caller and the workers claim one at a time from a single
 * atomic word holding the job's generation, its chunk count and the next chunk, so a worker that
 * wakes late (the machine is busy, or the job was short) finds nothing left and the caller never
 * waits for it: the caller only waits for chunks that were claimed and are still running. The
 * job's fields cannot change while one of its chunks runs, since the next job is published only
 * after every chunk finished. Workers spin briefly between jobs, then sleep on a condition
 * variable; with more threads than processors the process may run on, a spinning thread would
 * hold the core another one needs, so they poll only a few times before they sleep (or yield).
 * One job at a time: a second caller runs serially. */
#include "core/threadpool.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <unistd.h>

#define POOL_MAX_THREADS 64
#define CHUNKS_PER_THREAD 4
/* Polls of the job word before a worker sleeps (some 50 us), and of the done count before a waiter
 * yields; OVERSUBSCRIBED_SPIN for both when the threads outnumber the usable processors. */
#define POOL_SPIN 2000
#define WAIT_SPIN 2000
#define OVERSUBSCRIBED_SPIN 20

/* The job word: generation (bits 40-63), chunk count (20-39), next chunk to claim (0-19). */
#define GEN_SHIFT 40
#define COUNT_SHIFT 20
#define FIELD_MASK ((UINT64_C(1) << 20) - 1)
#define GEN_OF(w) ((w) >> GEN_SHIFT)
#define COUNT_OF(w) (((w) >> COUNT_SHIFT) & FIELD_MASK)
#define NEXT_OF(w) ((w) & FIELD_MASK)

typedef struct pool {
    int nthreads; /* callers included; workers are nthreads - 1 */
    int worker_spin, wait_spin; /* POOL_SPIN and WAIT_SPIN, or OVERSUBSCRIBED_SPIN */
    pthread_mutex_t lock; /* guards sleeping, with wake */
    pthread_cond_t wake;
    pthread_mutex_t submit; /* held by the thread whose job runs */
    _Atomic uint64_t job;   /* the job word */
    atomic_int done;        /* chunks of the current job finished */
    kiln_parallel_fn fn;
    void *ctx;
    int64_t n;
} pool;

static pool g_pool = {.lock = PTHREAD_MUTEX_INITIALIZER,
                      .wake = PTHREAD_COND_INITIALIZER,
                      .submit = PTHREAD_MUTEX_INITIALIZER};
static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static _Thread_local bool t_inside; /* this thread is running a chunk of a parallel-for */

static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

/* The processors this process may run on (its affinity mask), else the online ones. */
static int usable_processors(void) {
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0) return CPU_COUNT(&set);
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    return cpus < 1 ? 1 : (int)cpus;
}

/* The configured thread count: KILN_NUM_THREADS, OMP_NUM_THREADS, else the usable processors. */
static int configured_threads(void) {
    const char *names[] = {"KILN_NUM_THREADS", "OMP_NUM_THREADS"};
    for (int i = 0; i < 2; i++) {
        const char *v = getenv(names[i]);
        char *end;
        long t = v ? strtol(v, &end, 10) : 0;
        if (v && *v && !*end && t >= 1) return t > POOL_MAX_THREADS ? POOL_MAX_THREADS : (int)t;
    }
    int cpus = usable_processors();
    return cpus > POOL_MAX_THREADS ? POOL_MAX_THREADS : cpus;
}

/* Claims and runs chunks of generation gen until none is left (or another job replaced it). */
static void run_chunks(pool *p, uint64_t gen) {
    uint64_t w = atomic_load_explicit(&p->job, memory_order_acquire);
    while (GEN_OF(w) == gen && NEXT_OF(w) < COUNT_OF(w)) {
        if (!atomic_compare_exchange_weak_explicit(&p->job, &w, w + 1, memory_order_acq_rel, memory_order_acquire))
            continue;
        int64_t count = (int64_t)COUNT_OF(w), c = (int64_t)NEXT_OF(w);
        int64_t b = p->n * c / count, e = p->n * (c + 1) / count;
        t_inside = true;
        if (b < e) p->fn(p->ctx, b, e);
        t_inside = false;
        atomic_fetch_add_explicit(&p->done, 1, memory_order_acq_rel);
        w = atomic_load_explicit(&p->job, memory_order_acquire);
    }
}

static void *worker_main(void *arg) {
    pool *p = &g_pool;
    (void)arg;
    uint64_t seen = 0; /* the workers start before the first job is published */
    for (;;) {
        uint64_t gen;
        int spins = 0;
        while ((gen = GEN_OF(atomic_load_explicit(&p->job, memory_order_acquire))) == seen && spins < p->worker_spin) {
            cpu_relax();
            spins++;
        }
        if (gen == seen) {
            pthread_mutex_lock(&p->lock);
            while ((gen = GEN_OF(atomic_load_explicit(&p->job, memory_order_acquire))) == seen)
                pthread_cond_wait(&p->wake, &p->lock);
            pthread_mutex_unlock(&p->lock);
        }
        seen = gen;
        run_chunks(p, gen);
    }
    return NULL;
}

/* Starts the workers once; on a failed start the pool has fewer threads (at least the caller). */
static void pool_start(void) {
    pool *p = &g_pool;
    int want = configured_threads();
    bool oversubscribed = want > usable_processors();
    p->worker_spin = oversubscribed ? OVERSUBSCRIBED_SPIN : POOL_SPIN;
    p->wait_spin = oversubscribed ? OVERSUBSCRIBED_SPIN : WAIT_SPIN;
    p->nthreads = 1;
    for (int i = 1; i < want; i++) {
        pthread_t t;
        pthread_attr_t attr;
        pthread_attr_init(&attr);
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        int rc = pthread_create(&t, &attr, worker_main, NULL);
        pthread_attr_destroy(&attr);
        if (rc != 0) break;
        p->nthreads = i + 1;
    }
}

int kiln_threadpool_size(void) {
    pthread_once(&g_once, pool_start);
    return g_pool.nthreads;
}

void kiln_parallel_for(int64_t n, int64_t min_chunk, kiln_parallel_fn fn, void *ctx) {
    if (n <= 0) return;
    if (min_chunk < 1) min_chunk = 1;
    int threads = kiln_threadpool_size();
    int64_t chunks = n / min_chunk, most = (int64_t)threads * CHUNKS_PER_THREAD;
    if (chunks > most) chunks = most;
    pool *p = &g_pool;
    if (threads <= 1 || chunks <= 1 || t_inside || pthread_mutex_trylock(&p->submit) != 0) {
        fn(ctx, 0, n);
        return;
    }
    p->fn = fn;
    p->ctx = ctx;
    p->n = n;
    atomic_store_explicit(&p->done, 0, memory_order_relaxed);
    uint64_t gen = (GEN_OF(atomic_load_explicit(&p->job, memory_order_relaxed)) + 1) & ((UINT64_C(1) << 24) - 1);
    if (gen == 0) gen = 1; /* 0 is what the workers saw at start */
    pthread_mutex_lock(&p->lock);
    atomic_store_explicit(&p->job, gen << GEN_SHIFT | (uint64_t)chunks << COUNT_SHIFT, memory_order_release);
    pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->lock);
    run_chunks(p, gen);
    for (int spins = 0; atomic_load_explicit(&p->done, memory_order_acquire) < chunks; spins++) {
        if (spins < p->wait_spin) cpu_relax();
        else sched_yield();
    }
    pthread_mutex_unlock(&p->submit);
}
