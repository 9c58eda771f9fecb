/* threadpool.h — one process-wide pool of persistent worker threads for the CPU kernels: a
 * parallel-for that splits [0, n) into a few contiguous chunks per thread, which the calling thread
 * and the workers claim one by one (a busy machine that delays a worker only moves its chunks to
 * the others). Workers spin briefly between jobs (kernels come back to back) and then sleep on a
 * condition variable, so an idle process costs nothing. The pool's size is KILN_NUM_THREADS, else
 * OMP_NUM_THREADS, else the number of processors the process may run on (its affinity mask; at
 * most 64). */
#ifndef KILN_CORE_THREADPOOL_H
#define KILN_CORE_THREADPOOL_H

#include <stdint.h>

/* Work on indices [begin, end) of a parallel-for; ctx is the caller's. */
typedef void (*kiln_parallel_fn)(void *ctx, int64_t begin, int64_t end);

/* The number of threads a parallel-for uses (the caller included), at least 1. */
int kiln_threadpool_size(void);

/* Calls fn over [0, n) split in contiguous chunks of at least min_chunk indices each (at most four
 * per thread), and returns when all are done. Runs fn(ctx, 0, n) on the calling thread
 * alone when n is small, when called from inside a parallel-for (nesting), when another thread's
 * parallel-for holds the pool, or when the workers could not be started. fn must not fail. */
void kiln_parallel_for(int64_t n, int64_t min_chunk, kiln_parallel_fn fn, void *ctx);

#endif
