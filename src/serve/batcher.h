/* batcher.h — a tensor model's instances and its dynamic batcher: N instance threads per device
 * (one engine per device, e.g. per GPU), each owning two kiln_contexts of its device's engine (so that two runs are in flight: page-locked staging, uploads,
 * computation and downloads of consecutive batches overlap), take requests from one queue (so
 * that an idle instance, on whichever device, takes the next batch: requests balance by queue depth
 * across devices), join compatible ones along the batch
 * axis (dimension 0 of every input and output) up to max_batch, run them, and split the outputs
 * back. Requests wait at most max_queue_delay_us for companions (less when a preferred batch size is
 * reached); the queue is bounded (queue full: 429) and every request has a deadline (503 when it
 * expires in the queue). An instance whose runs fail breaker_failures times in a row leaves the
 * rotation for breaker_cooldown_ms, its batch answered 503, and then is probed with the next batch.
 * For tests of the breaker, the environment variable KILN_SERVE_FAIL_RUNS=N makes the first N runs
 * of every pool fail with KILN_ERR_BACKEND. */
#ifndef KILN_SERVE_BATCHER_H
#define KILN_SERVE_BATCHER_H

#include "kiln/kiln.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

typedef struct serve_batch_config {
    int max_batch;             /* rows per run at most; 0: no batching (each request runs alone) */
    int preferred[8];          /* batch sizes dispatched without waiting for the delay */
    int n_preferred;
    int64_t max_queue_delay_us;
    int max_queue;             /* requests waiting at most (0: unbounded) */
    int64_t timeout_us;        /* a request's deadline from its arrival (0: none) */
    int instances;             /* per device, >= 1 */
    int priority_levels;       /* requests of level 1 are served before level 2, ... (>= 1) */
    int breaker_failures;      /* consecutive failed runs that take an instance out (>= 1) */
    int64_t breaker_cooldown_ms;
    int landing_batches;       /* landing memory of this many max_batch batches (0: none; serve_pool_landing_reserve) */
} serve_batch_config;

/* One tensor of a request or response; data owned by whoever filled it (serve_tensor_clear), or
 * borrowed (a binary input read where it lies in the request body). */
typedef struct serve_tensor {
    char name[128];
    kiln_dtype dtype;
    int ndim;
    int64_t dims[KILN_MAX_DIMS];
    void *data;
    size_t bytes;
    bool borrowed;             /* data belongs to someone else: serve_tensor_clear only forgets it */
} serve_tensor;
/* Frees t's data (unless borrowed) and empties t. */
void serve_tensor_clear(serve_tensor *t);

/* One inference: the inputs in the engine's input order, validated by serve_pool_check. */
typedef struct serve_infer {
    serve_tensor *inputs;
    int n_inputs;
    int64_t rows;              /* dims[0] of the inputs when the model batches, else 1 */
    int64_t timeout_us;        /* the request's own deadline from arrival (0: the model's timeout_us) */
    int priority;              /* 1 = first served; 0: the model's default (its lowest level) */
    /* Looked at every SERVE_GONE_POLL_MS while the request waits in the queue (NULL: never): when it
     * returns true, the request leaves the queue unrun with status 499. A request already in a run
     * finishes (its answer is the caller's to drop). */
    bool (*client_gone)(void *arg);
    void *client_arg;
    /* results, valid after serve_pool_infer returns */
    int http_status;           /* 200, or 400 / 429 / 500 / 503 with message */
    char message[512];
    serve_tensor *outputs;     /* [n_outputs] in the engine's output order (owned: serve_infer_clear) */
    int n_outputs;
    double queue_us, compute_us;
    /* the run's timeline (the clock of serve_now_us, microseconds): taken off the queue, its inputs
     * joined in the staging (the copy), its run waited for (uploads, computation, downloads) */
    double run_start_us, inputs_joined_us, run_done_us;
    int batch_rows;            /* rows of the run that held it */
    bool first_of_run;         /* the first request of its run (so that runs are counted once) */
    /* the batcher's */
    double arrival_us, deadline_us;
    bool done;
    bool taken;                /* in a run (no longer in the queue) */
    pthread_cond_t done_cv;
    struct serve_infer *next;
    char **copy_to;            /* set while the request's own thread is to copy its inputs into a batch: [n_inputs] */
    struct instance *joining;  /* the instance waiting for that copy */

} serve_infer;
/* Frees the outputs (not the inputs, which the caller owns). */
void serve_infer_clear(serve_infer *r);

typedef struct serve_pool serve_pool;

#define SERVE_GONE_POLL_MS 20

/* Creates cfg->instances instances on each of the n_devices devices: instance k runs engines[k %
 * n_devices] (the engine loaded for devices[k % n_devices]; the engines must outlive the pool and
 * have the same inputs and outputs), each with two contexts and their page-locked buffers, warms
 * each context up at every batch size 1..max_batch (when every input's other dimensions are
 * static), and starts their threads. Errors from context creation or warm-up name the instance,
 * its device and the batch size. */
kiln_status serve_pool_create(kiln_engine *const *engines, const int *devices, int n_devices, const serve_batch_config *cfg,
                              serve_pool **out);
/* Fails every waiting request with 503, stops the threads after their current run, frees the
 * contexts. Accepts NULL. */
void serve_pool_free(serve_pool *p);

/* 400 with a message when r's inputs do not fit the engine (names, dtypes, ranks, static
 * dimensions, equal batch rows, rows <= max_batch) or its priority is not a level of the model;
 * otherwise 0 and r->rows set. */
int serve_pool_check(const serve_pool *p, serve_infer *r);
/* Queues a checked request and waits for its result (r->http_status and r->outputs). */
void serve_pool_infer(serve_pool *p, serve_infer *r);

#define SERVE_POOL_MAX_INSTANCES 1024

/* One instance as the stats see it. */
typedef struct serve_instance_stats {
    int device;
    bool up;                   /* in rotation */
    uint64_t runs;
} serve_instance_stats;

typedef struct serve_pool_stats {
    int queue_depth;
    int instances, instances_up;
    serve_instance_stats instance[SERVE_POOL_MAX_INSTANCES]; /* [instances] */
    uint64_t runs, rows, failures;
    uint64_t overlapped_runs;  /* runs enqueued while their instance had another in flight */
    uint64_t abandoned;        /* requests whose client left while they waited in the queue (not run) */
    uint64_t direct_runs;      /* runs whose inputs lay back to back in landing memory: bound without a copy */
    uint64_t landing_misses;   /* landing reservations refused (memory in use, or no landing): the body was buffered */
} serve_pool_stats;
void serve_pool_get_stats(serve_pool *p, serve_pool_stats *out);
const serve_batch_config *serve_pool_config(const serve_pool *p);

/* Landing memory: for a batched model of one input with static rows, landing_batches x max_batch
 * rows of page-locked memory where the binary input of a request is received straight from the
 * socket. Reservations are handed out back to back in the order they are made (a ring), so that a
 * batch of requests that arrived one after another lies there as one tensor, which the run binds
 * where it lies: one copy of the bytes in all (socket -> landing), none when the batch joins. A
 * batch that does not lie so is joined into the staging as other requests are. Returns where
 * `bytes` may be written, or NULL when the pool has no landing memory or not that much free now
 * (the caller buffers the body as before). Each reservation is released once its request is
 * answered. */
void *serve_pool_landing_reserve(serve_pool *p, size_t bytes);
void serve_pool_landing_release(serve_pool *p, void *at);

#endif
