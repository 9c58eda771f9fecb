/* batcher.c — a tensor model's instance threads and dynamic batcher (contract in batcher.h).
 *
 * One mutex guards the queue, the instances' rotation state and the counters; instance threads
 * hold it only to pick a batch and to hand results back, never while a context runs. A request's
 * thread sleeps on its own condition variable until an instance marks it done.
 *
 * Each instance keeps RUNS_IN_FLIGHT runs going: a run slot is a context of the engine with its own
 * page-locked input staging (rows of a batch are joined there, so uploads go by DMA) and output
 * buffers. The thread enqueues the next batch on a free slot before it waits for the oldest run, so
 * on a GPU one batch's upload and computation overlap another's computation and download. Runs
 * complete in the order they were enqueued.
 *
 * Joining a large batch (PARALLEL_JOIN_BYTES or more) is a memory copy one thread would spend
 * milliseconds on; the requests' own threads, idle while they wait, copy their rows into the
 * staging instead, all at once, and the instance enqueues the run when the last one is done. A batch
 * whose requests' inputs already lie back to back (in the landing ring) is bound where it lies.
 *
 * The landing ring: one page-locked buffer; reservations are taken at `head`, after the newest live
 * one, wrapping to the start when the end is reached and the oldest live one has moved on; a
 * released reservation frees its bytes once every older one is released too. */
#include "serve/batcher.h"

#include "core/log.h"
#include "core/status.h"

#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define RUNS_IN_FLIGHT 2
#define PARALLEL_JOIN_BYTES (1u << 20)

/* One run of an instance: its context, buffers, and the batch it holds while in flight. */
typedef struct run_slot {
    kiln_context *ctx;
    void **staging;       /* [n_in] joined inputs of a batch (kiln_host_alloc) */
    size_t *staging_cap;
    void **outputs;       /* [n_out] bound output buffers (kiln_host_alloc), NULL where unbound */
    serve_infer **batch;  /* [max_batch or 1] */
    char **copy_to;       /* [max_batch][n_in]: where request k's input i goes in the staging */
    int n;
    int64_t rows;
    double t0;            /* taken off the queue */
    double t_joined;      /* inputs joined and bound: the run is enqueued */
    double t_ran;         /* the run waited for (its outputs not yet split) */
    kiln_status st;       /* of the run so far */
    char error[512];      /* its message when st != KILN_OK */
} run_slot;

typedef struct instance {
    serve_pool *pool;
    int index;
    kiln_engine *engine;  /* of its device */
    int device;
    uint64_t runs;
    run_slot slots[RUNS_IN_FLIGHT];
    int oldest, in_flight; /* runs in flight: slots[oldest], slots[oldest + 1], ... (mod RUNS_IN_FLIGHT) */
    pthread_t thread;
    bool started;
    int consecutive_failures;
    double out_until_us;  /* > now: out of rotation (circuit open) */
    int copies_left;      /* requests still copying their rows into the batch being joined */
    pthread_cond_t copied_cv; /* signalled when copies_left reaches 0 */
} instance;

#define LANDING_MAX_LIVE 4096 /* reservations alive at once at most */

typedef struct landing_ring {
    char *base;           /* kiln_host_alloc; NULL: no landing memory */
    size_t cap, head;     /* the next reservation starts at head (or at 0 after a wrap) */
    struct { size_t at, bytes; bool released; } live[LANDING_MAX_LIVE]; /* oldest first, a ring of its own */
    int first, n;
} landing_ring;

struct serve_pool {
    serve_batch_config cfg;
    int n_in, n_out;
    kiln_tensor_desc *in_desc, *out_desc;
    bool batched;
    pthread_mutex_t mu;
    pthread_cond_t work_cv;
    serve_infer *head, *tail;
    int depth;
    bool stopping;
    instance *inst;
    int n_inst_total;     /* cfg.instances per device times the devices */
    int n_inst;           /* of them created so far */
    uint64_t runs, rows, failures, overlapped_runs, abandoned, direct_runs, landing_misses;
    landing_ring landing; /* guarded by mu */
    atomic_int failures_to_inject; /* KILN_SERVE_FAIL_RUNS: the pool's next runs fail (tests of the breaker) */
};

static double now_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

static void wait_until(pthread_cond_t *cv, pthread_mutex_t *mu, double until_us) {
    struct timespec ts = {.tv_sec = (time_t)(until_us / 1e6)};
    ts.tv_nsec = (long)((until_us - (double)ts.tv_sec * 1e6) * 1e3);
    if (ts.tv_nsec >= 1000000000L) ts.tv_sec++, ts.tv_nsec -= 1000000000L;
    if (ts.tv_nsec < 0) ts.tv_nsec = 0;
    pthread_cond_timedwait(cv, mu, &ts);
}

void serve_tensor_clear(serve_tensor *t) {
    if (!t->borrowed) free(t->data);
    t->data = NULL;
    t->bytes = 0;
    t->borrowed = false;
}

void serve_infer_clear(serve_infer *r) {
    for (int i = 0; i < r->n_outputs; i++) serve_tensor_clear(&r->outputs[i]);
    free(r->outputs);
    r->outputs = NULL;
    r->n_outputs = 0;
}

static int64_t elements(int ndim, const int64_t *dims) {
    int64_t n = 1;
    for (int d = 0; d < ndim; d++) n *= dims[d];
    return n;
}

/* Marks r done with status and message; the caller holds the mutex. */
static void finish(serve_infer *r, int status, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void finish(serve_infer *r, int status, const char *fmt, ...) {
    if (status != 200) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(r->message, sizeof r->message, fmt, ap);
        va_end(ap);
    }
    r->http_status = status;
    r->done = true;
    pthread_cond_signal(&r->done_cv);
}

static int instances_up(const serve_pool *p, double now) {
    int up = 0;
    for (int i = 0; i < p->n_inst; i++) up += p->inst[i].out_until_us <= now;
    return up;
}

static void fail_queue(serve_pool *p, int status, const char *why) {
    while (p->head) {
        serve_infer *r = p->head;
        p->head = r->next;
        finish(r, status, "%s", why);
    }
    p->tail = NULL;
    p->depth = 0;
}

/* Takes r, which waits in the queue, out of it; the caller holds the mutex. */
static void leave_queue(serve_pool *p, serve_infer *r) {
    serve_infer **link = &p->head, *prev = NULL;
    while (*link && *link != r) prev = *link, link = &(*link)->next;
    if (!*link) return;
    *link = r->next;
    if (p->tail == r) p->tail = prev;
    p->depth--;
}

/* Answers 503 to queued requests whose deadline has passed. */
static void expire(serve_pool *p, double now) {
    serve_infer **link = &p->head, *prev = NULL;
    while (*link) {
        serve_infer *r = *link;
        if (r->deadline_us > 0 && now >= r->deadline_us) {
            *link = r->next;
            p->depth--;
            finish(r, 503, "the request waited %.0f ms in the queue, past its timeout of %.0f ms",
                   (now - r->arrival_us) / 1e3, (r->deadline_us - r->arrival_us) / 1e3);
        } else {
            prev = r;
            link = &r->next;
        }
    }
    p->tail = prev;
}

/* Requests a and b can share a run: every input agrees in every dimension but the batch axis. */
static bool compatible(const serve_infer *a, const serve_infer *b) {
    for (int i = 0; i < a->n_inputs; i++)
        if (memcmp(a->inputs[i].dims + 1, b->inputs[i].dims + 1, sizeof(int64_t) * (a->inputs[i].ndim - 1)))
            return false;
    return true;
}

static bool is_preferred(const serve_batch_config *c, int64_t rows) {
    for (int i = 0; i < c->n_preferred; i++)
        if (c->preferred[i] == rows) return true;
    return false;
}

/* Chooses the next batch from the queue head: true with its size in *n and rows in *rows when it
 * should run now; false with the time to look again in *wake_us. */
static bool form_batch(const serve_pool *p, double now, int *n, int64_t *rows, double *wake_us) {
    *n = 1;
    *rows = p->head->rows;
    if (!p->batched) return true;
    const serve_infer *r = p->head->next;
    bool blocked = false;
    for (; r; r = r->next) {
        if (!compatible(p->head, r) || *rows + r->rows > p->cfg.max_batch) {
            blocked = true;
            break;
        }
        *rows += r->rows;
        (*n)++;
    }
    if (blocked || *rows >= p->cfg.max_batch || is_preferred(&p->cfg, *rows)) return true;
    *wake_us = p->head->arrival_us + (double)p->cfg.max_queue_delay_us;
    if (now >= *wake_us) return true;
    for (r = p->head; r; r = r->next) /* wake for the first deadline too, to answer it on time */
        if (r->deadline_us > 0 && r->deadline_us < *wake_us) *wake_us = r->deadline_us;
    return false;
}

/* Makes sure staging buffer i of slot rs holds bytes (page-locked memory, reused across runs). */
static kiln_status reserve_staging(run_slot *rs, int i, size_t bytes) {
    if (bytes <= rs->staging_cap[i]) return KILN_OK;
    kiln_host_free(rs->staging[i]);
    rs->staging[i] = NULL;
    rs->staging_cap[i] = 0;
    KILN_TRY(kiln_host_alloc(bytes ? bytes : 1, &rs->staging[i]));
    rs->staging_cap[i] = bytes;
    return KILN_OK;
}

/* Copies request r's inputs to where its rows go in a batch (copy_to[i] for input i). */
static void copy_rows(const serve_infer *r, char *const *copy_to) {
    for (int i = 0; i < r->n_inputs; i++) memcpy(copy_to[i], r->inputs[i].data, r->inputs[i].bytes);
}

/* Whether the batch's requests' input i lies back to back in memory, in batch order. */
static bool lies_joined(const run_slot *rs, int i) {
    for (int k = 1; k < rs->n; k++) {
        const serve_tensor *a = &rs->batch[k - 1]->inputs[i];
        if ((const char *)a->data + a->bytes != (const char *)rs->batch[k]->inputs[i].data) return false;
    }
    return true;
}

/* Binds input i of the slot's batch from `data` (all its rows). */
static kiln_status bind_input(serve_pool *p, run_slot *rs, int i, const void *data) {
    const serve_tensor *t0 = &rs->batch[0]->inputs[i];
    int64_t dims[KILN_MAX_DIMS];
    memcpy(dims, t0->dims, sizeof dims);
    if (p->batched) dims[0] = rs->rows;
    return kiln_context_set_input(rs->ctx, p->in_desc[i].name, t0->dtype, t0->ndim, dims, data);
}

/* Joins the batch's rows of every input in the slot's staging (by the requests' threads when the
 * batch is large) and binds them; a one-input batch that lies back to back in the landing ring is
 * bound where it lies. */
static kiln_status bind_inputs(instance *in, run_slot *rs) {
    serve_pool *p = in->pool;
    const landing_ring *l = &p->landing;
    const char *first = p->n_in == 1 ? rs->batch[0]->inputs[0].data : NULL;
    size_t total = 0;
    for (int k = 0; first && k < rs->n; k++) total += rs->batch[k]->inputs[0].bytes;
    if (l->base && first >= l->base && first + total <= l->base + l->cap && lies_joined(rs, 0)) {
        pthread_mutex_lock(&p->mu);
        p->direct_runs++;
        pthread_mutex_unlock(&p->mu);
        return bind_input(p, rs, 0, rs->batch[0]->inputs[0].data);
    }
    size_t all = 0;
    for (int i = 0; i < p->n_in; i++) {
        size_t total = 0;
        for (int k = 0; k < rs->n; k++) total += rs->batch[k]->inputs[i].bytes;
        KILN_TRY(reserve_staging(rs, i, total));
        char *at = rs->staging[i];
        for (int k = 0; k < rs->n; k++) {
            rs->copy_to[k * p->n_in + i] = at;
            at += rs->batch[k]->inputs[i].bytes;
        }
        all += total;
    }
    if (rs->n > 1 && all >= PARALLEL_JOIN_BYTES) {
        pthread_mutex_lock(&p->mu);
        in->copies_left = rs->n;
        for (int k = 0; k < rs->n; k++) {
            rs->batch[k]->copy_to = &rs->copy_to[k * p->n_in];
            rs->batch[k]->joining = in;
            pthread_cond_signal(&rs->batch[k]->done_cv);
        }
        while (in->copies_left) pthread_cond_wait(&in->copied_cv, &p->mu);
        pthread_mutex_unlock(&p->mu);
    } else {
        for (int k = 0; k < rs->n; k++) copy_rows(rs->batch[k], &rs->copy_to[k * p->n_in]);
    }
    for (int i = 0; i < p->n_in; i++) KILN_TRY(bind_input(p, rs, i, rs->staging[i]));
    return KILN_OK;
}

/* Copies output j's rows of every request out of the context. */
static kiln_status split_outputs(serve_pool *p, run_slot *rs) {
    serve_infer **batch = rs->batch;
    int n = rs->n;
    int64_t rows = rs->rows;
    for (int k = 0; k < n; k++) {
        batch[k]->outputs = calloc((size_t)p->n_out, sizeof(serve_tensor));
        if (!batch[k]->outputs) return kiln_error(KILN_ERR_OUT_OF_MEMORY, "output tensors");
        batch[k]->n_outputs = p->n_out;
    }
    for (int j = 0; j < p->n_out; j++) {
        kiln_tensor_desc d;
        const void *data;
        kiln_status st = kiln_context_output(rs->ctx, j, &d, &data);
        if (st) return st;
        size_t bytes = (size_t)elements(d.ndim, d.dims) * kiln_dtype_size(d.dtype);
        if (p->batched && (d.ndim < 1 || d.dims[0] != rows))
            return kiln_error(KILN_ERR_SHAPE, "output '%s' has %lld rows for a batch of %lld: it is not batched along "
                              "dimension 0 (set max_batch 0 in the model's config.json)",
                              d.name, d.ndim ? (long long)d.dims[0] : 0LL, (long long)rows);
        size_t at = 0;
        for (int k = 0; k < n; k++) {
            serve_tensor *t = &batch[k]->outputs[j];
            snprintf(t->name, sizeof t->name, "%s", d.name);
            t->dtype = d.dtype;
            t->ndim = d.ndim;
            memcpy(t->dims, d.dims, sizeof t->dims);
            t->bytes = bytes;
            if (p->batched) {
                t->dims[0] = batch[k]->rows;
                t->bytes = bytes / (size_t)rows * (size_t)batch[k]->rows;
            }
            t->data = malloc(t->bytes ? t->bytes : 1);
            if (!t->data) return kiln_error(KILN_ERR_OUT_OF_MEMORY, "output '%s'", d.name);
            memcpy(t->data, (const char *)data + at, t->bytes);
            at += t->bytes;
        }
    }
    return KILN_OK;
}

/* Keeps a failed run's status and message in its slot (the thread's last error is overwritten by
 * the runs that complete before this one is handed back). */
static void slot_failed(run_slot *rs, kiln_status st) {
    rs->st = st;
    snprintf(rs->error, sizeof rs->error, "%s", kiln_last_error());
}

/* Joins and binds the slot's batch and enqueues its run; a failure is kept in the slot. */
static void start_run(instance *in, run_slot *rs) {
    serve_pool *p = in->pool;
    rs->t0 = now_us();
    rs->t_joined = rs->t0;
    rs->st = KILN_OK;
    if (atomic_load(&p->failures_to_inject) > 0 && atomic_fetch_sub(&p->failures_to_inject, 1) > 0) {
        slot_failed(rs, kiln_error(KILN_ERR_BACKEND, "injected failure (KILN_SERVE_FAIL_RUNS)"));
        return;
    }
    kiln_status st = bind_inputs(in, rs);
    rs->t_joined = now_us();
    if (!st) st = kiln_context_enqueue(rs->ctx);
    if (st) slot_failed(rs, st);
}

/* Waits for the slot's run and splits its outputs to the requests (cleared again on failure). */
static void finish_run(instance *in, run_slot *rs) {
    rs->t_ran = rs->t_joined;
    if (!rs->st) {
        kiln_status st = kiln_context_wait(rs->ctx);
        rs->t_ran = now_us();
        if (!st) st = split_outputs(in->pool, rs);
        if (st) slot_failed(rs, st);
    }
    if (rs->st)
        for (int k = 0; k < rs->n; k++) serve_infer_clear(rs->batch[k]);
}

/* Hands a finished run back and keeps the instance's breaker; the caller holds the mutex. */
static void complete(instance *in, run_slot *rs, double t1) {
    serve_pool *p = in->pool;
    kiln_status st = rs->st;
    p->runs++;
    in->runs++;
    p->rows += (uint64_t)rs->rows;
    bool request_fault = st == KILN_ERR_SHAPE || st == KILN_ERR_INVALID_ARGUMENT;
    if (st && !request_fault) {
        p->failures++;
        in->consecutive_failures++;
        if (in->consecutive_failures >= p->cfg.breaker_failures) {
            in->out_until_us = t1 + (double)p->cfg.breaker_cooldown_ms * 1e3;
            in->consecutive_failures = p->cfg.breaker_failures - 1; /* one more failure after the probe trips it */
            KILN_LOG(KILN_LOG_WARN, "instance %d (device %d) failed %d runs in a row (%s): out of rotation for %lld ms",
                     in->index, in->device, p->cfg.breaker_failures, rs->error, (long long)p->cfg.breaker_cooldown_ms);
        }
    } else if (!st) {
        in->consecutive_failures = 0;
    }
    for (int k = 0; k < rs->n; k++) {
        serve_infer *r = rs->batch[k];
        r->queue_us = rs->t0 - r->arrival_us;
        r->compute_us = t1 - rs->t0;
        r->run_start_us = rs->t0;
        r->inputs_joined_us = rs->t_joined;
        r->run_done_us = rs->t_ran;
        r->batch_rows = (int)rs->rows;
        r->first_of_run = k == 0;
        if (!st) finish(r, 200, "ok");
        else if (request_fault) finish(r, 400, "%s", rs->error);
        else finish(r, 503, "instance %d failed: %s (device %d)", in->index, rs->error, in->device);
    }
    if (instances_up(p, t1) == 0) fail_queue(p, 503, "every instance of the model is out of rotation after failures");
}

/* Takes the next batch off the queue into a free run slot and enqueues it, when one is due now
 * (true); the caller holds the mutex, which is released while the run is started. false with the
 * time to look again in *wake_us (0: when work arrives). */
static bool start_next(instance *in, double now, double *wake_us) {
    serve_pool *p = in->pool;
    *wake_us = 0;
    if (in->out_until_us > now) {
        *wake_us = in->out_until_us;
        return false;
    }
    expire(p, now);
    if (!p->head) return false;
    run_slot *rs = &in->slots[(in->oldest + in->in_flight) % RUNS_IN_FLIGHT];
    if (!form_batch(p, now, &rs->n, &rs->rows, wake_us)) return false;
    for (int k = 0; k < rs->n; k++) {
        rs->batch[k] = p->head;
        p->head->taken = true;
        p->head = p->head->next;
    }
    if (!p->head) p->tail = NULL;
    p->depth -= rs->n;
    if (in->in_flight) p->overlapped_runs++;
    in->in_flight++;
    pthread_mutex_unlock(&p->mu);
    start_run(in, rs);
    pthread_mutex_lock(&p->mu);
    return true;
}

/* Waits for the oldest run in flight and hands it back; the caller holds the mutex, which is
 * released meanwhile. */
static void complete_oldest(instance *in) {
    serve_pool *p = in->pool;
    run_slot *rs = &in->slots[in->oldest];
    pthread_mutex_unlock(&p->mu);
    finish_run(in, rs);
    double t1 = now_us();
    pthread_mutex_lock(&p->mu);
    complete(in, rs, t1);
    in->oldest = (in->oldest + 1) % RUNS_IN_FLIGHT;
    in->in_flight--;
}

/* Where r's input lies in the landing ring, counted from the oldest live reservation (so that
 * earlier reservations come first, across a wrap); SIZE_MAX when it lies elsewhere. The caller holds
 * the mutex. */
static size_t landing_order(const serve_pool *p, const serve_infer *r) {
    const landing_ring *l = &p->landing;
    const char *at = p->n_in == 1 ? r->inputs[0].data : NULL;
    if (!l->base || !at || at < l->base || at >= l->base + l->cap || !l->n) return SIZE_MAX;
    size_t off = (size_t)(at - l->base), oldest = l->live[l->first].at;
    return off >= oldest ? off - oldest : off + (l->cap - oldest);
}

static void *instance_main(void *arg) {
    instance *in = arg;
    serve_pool *p = in->pool;
    pthread_mutex_lock(&p->mu);
    while (!p->stopping) {
        double wake;
        if (in->in_flight < RUNS_IN_FLIGHT && start_next(in, now_us(), &wake)) continue;
        if (in->in_flight) { /* nothing to start now: finish the oldest run, then look again */
            complete_oldest(in);
            continue;
        }
        if (wake > 0) wait_until(&p->work_cv, &p->mu, wake);
        else pthread_cond_wait(&p->work_cv, &p->mu);
    }
    while (in->in_flight) complete_oldest(in); /* their requests are waiting for an answer */
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

/* Whether every input's dimensions but the batch axis are known before any request comes. */
static bool static_inputs(const serve_pool *p) {
    for (int i = 0; i < p->n_in; i++)
        for (int d = p->batched ? 1 : 0; d < p->in_desc[i].ndim; d++)
            if (p->in_desc[i].dims[d] < 0 || kiln_dtype_size(p->in_desc[i].dtype) == 0) return false;
    return true;
}

/* The bytes of tensor d with `rows` along a dynamic batch axis; 0 when another dimension is dynamic. */
static size_t bytes_at(const kiln_tensor_desc *d, bool batched, int64_t rows) {
    int64_t dims[KILN_MAX_DIMS];
    memcpy(dims, d->dims, sizeof dims);
    if (batched && d->ndim > 0) dims[0] = rows;
    for (int k = 0; k < d->ndim; k++)
        if (dims[k] < 0) return 0;
    return (size_t)elements(d->ndim, dims) * kiln_dtype_size(d->dtype);
}

/* Creates the slot's context and buffers: page-locked staging for max_batch rows of every input
 * (when their shapes are static; else it grows with the requests), and bound page-locked buffers
 * for every output whose size max_batch rows fix. */
static kiln_status slot_create(serve_pool *p, const instance *in, run_slot *rs) {
    int rows = p->batched ? p->cfg.max_batch : 1;
    rs->staging = calloc((size_t)p->n_in + 1, sizeof(void *));
    rs->staging_cap = calloc((size_t)p->n_in + 1, sizeof(size_t));
    rs->outputs = calloc((size_t)p->n_out + 1, sizeof(void *));
    rs->batch = calloc((size_t)rows, sizeof(serve_infer *));
    rs->copy_to = calloc((size_t)rows * (size_t)p->n_in + 1, sizeof(char *));
    if (!rs->staging || !rs->staging_cap || !rs->outputs || !rs->batch || !rs->copy_to)
        return kiln_error(KILN_ERR_OUT_OF_MEMORY, "run slots");
    KILN_TRY(kiln_context_create(in->engine, &rs->ctx));
    if (static_inputs(p))
        for (int i = 0; i < p->n_in; i++) KILN_TRY(reserve_staging(rs, i, bytes_at(&p->in_desc[i], p->batched, rows)));
    for (int j = 0; j < p->n_out; j++) {
        size_t bytes = bytes_at(&p->out_desc[j], p->batched, rows);
        if (!bytes) continue;
        KILN_TRY(kiln_host_alloc(bytes, &rs->outputs[j]));
        KILN_TRY(kiln_context_set_output_buffer(rs->ctx, p->out_desc[j].name, rs->outputs[j], bytes));
    }
    return KILN_OK;
}

static void slot_free(serve_pool *p, run_slot *rs) {
    kiln_context_free(rs->ctx);
    for (int i = 0; rs->staging && i < p->n_in; i++) kiln_host_free(rs->staging[i]);
    for (int j = 0; rs->outputs && j < p->n_out; j++) kiln_host_free(rs->outputs[j]);
    free(rs->staging);
    free(rs->staging_cap);
    free(rs->outputs);
    free(rs->batch);
    free(rs->copy_to);
}

/* Runs every batch size once on each of the instance's contexts with zero inputs (from its staging),
 * so that no request pays for a plan. */
static kiln_status warm_up(serve_pool *p, instance *in) {
    if (!static_inputs(p)) return KILN_OK;
    int sizes = p->batched ? p->cfg.max_batch : 1;
    for (int s = 0; s < RUNS_IN_FLIGHT; s++) {
        run_slot *rs = &in->slots[s];
        for (int i = 0; i < p->n_in; i++) memset(rs->staging[i], 0, rs->staging_cap[i]);
        for (int b = 1; b <= sizes; b++) {
            kiln_status st = KILN_OK;
            for (int i = 0; i < p->n_in && !st; i++) {
                int64_t dims[KILN_MAX_DIMS];
                memcpy(dims, p->in_desc[i].dims, sizeof dims);
                if (p->batched) dims[0] = b;
                st = kiln_context_set_input(rs->ctx, p->in_desc[i].name, p->in_desc[i].dtype, p->in_desc[i].ndim, dims,
                                            rs->staging[i]);
            }
            if (!st) st = kiln_context_run(rs->ctx);
            if (st)
                return kiln_error_prefix(st, "warming up instance %d (device %d, context %d) at batch size %d", in->index,
                                         in->device, s, b);
        }
    }
    return KILN_OK;
}

static bool engine_is_batched(const kiln_engine *e) {
    int n_in = kiln_engine_num_inputs(e), n_out = kiln_engine_num_outputs(e);
    for (int i = 0; i < n_in + n_out; i++) {
        kiln_tensor_desc d;
        if ((i < n_in ? kiln_engine_input(e, i, &d) : kiln_engine_output(e, i - n_in, &d)) || d.ndim < 1 || d.dims[0] >= 0)
            return false;
    }
    return n_in > 0;
}

kiln_status serve_pool_create(kiln_engine *const *engines, const int *devices, int n_devices, const serve_batch_config *cfg,
                              serve_pool **out) {
    *out = NULL;
    int per_device = cfg->instances < 1 ? 1 : cfg->instances;
    if (n_devices < 1 || (int64_t)per_device * n_devices > SERVE_POOL_MAX_INSTANCES)
        return kiln_error(KILN_ERR_INVALID_ARGUMENT, "%d instances on each of %d devices: between 1 and %d instances in all",
                          per_device, n_devices, SERVE_POOL_MAX_INSTANCES);
    kiln_engine *e = engines[0];
    serve_pool *p = calloc(1, sizeof *p);
    if (!p) return kiln_error(KILN_ERR_OUT_OF_MEMORY, "model instances");
    p->cfg = *cfg;
    p->cfg.instances = per_device;
    p->n_inst_total = per_device * n_devices;
    if (p->cfg.breaker_failures < 1) p->cfg.breaker_failures = 1;
    if (p->cfg.priority_levels < 1) p->cfg.priority_levels = 1;
    p->batched = p->cfg.max_batch > 0 && engine_is_batched(e);
    if (!p->batched) p->cfg.max_batch = 0;
    p->n_in = kiln_engine_num_inputs(e);
    p->n_out = kiln_engine_num_outputs(e);
    p->in_desc = calloc((size_t)p->n_in + 1, sizeof(kiln_tensor_desc));
    p->out_desc = calloc((size_t)p->n_out + 1, sizeof(kiln_tensor_desc));
    p->inst = calloc((size_t)p->n_inst_total, sizeof(instance));
    for (int k = 0; p->inst && k < p->n_inst_total; k++) pthread_cond_init(&p->inst[k].copied_cv, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->work_cv, &ca);
    pthread_condattr_destroy(&ca);
    if (!p->in_desc || !p->out_desc || !p->inst) {
        serve_pool_free(p);
        return kiln_error(KILN_ERR_OUT_OF_MEMORY, "model instances");
    }
    for (int i = 0; i < p->n_in; i++) kiln_engine_input(e, i, &p->in_desc[i]);
    for (int i = 0; i < p->n_out; i++) kiln_engine_output(e, i, &p->out_desc[i]);
    kiln_status st = KILN_OK;
    for (int k = 0; k < p->n_inst_total && !st; k++) {
        instance *in = &p->inst[k];
        in->pool = p;
        in->index = k;
        in->engine = engines[k % n_devices];
        in->device = devices[k % n_devices];
        p->n_inst = k + 1;
        for (int s = 0; s < RUNS_IN_FLIGHT && !st; s++) st = slot_create(p, in, &in->slots[s]);
        if (st) st = kiln_error_prefix(st, "instance %d (device %d)", k, in->device);
        if (!st) st = warm_up(p, in);
    }
    if (!st && p->batched && p->n_in == 1 && p->cfg.landing_batches > 0 && static_inputs(p)) {
        size_t bytes = bytes_at(&p->in_desc[0], true, p->cfg.max_batch) * (size_t)p->cfg.landing_batches;
        void *base = NULL;
        st = kiln_host_alloc(bytes, &base);
        if (st) st = kiln_error_prefix(st, "landing memory for %d batches (%zu bytes; config.json landing_batches)",
                                       p->cfg.landing_batches, bytes);
        p->landing.base = base;
        p->landing.cap = bytes;
    }
    const char *inject = getenv("KILN_SERVE_FAIL_RUNS");
    atomic_init(&p->failures_to_inject, inject ? atoi(inject) : 0);
    for (int k = 0; k < p->n_inst && !st; k++) {
        if (pthread_create(&p->inst[k].thread, NULL, instance_main, &p->inst[k]))
            st = kiln_error(KILN_ERR_INTERNAL, "starting the thread of instance %d", k);
        else p->inst[k].started = true;
    }
    if (st) {
        serve_pool_free(p);
        return st;
    }
    *out = p;
    return KILN_OK;
}

void serve_pool_free(serve_pool *p) {
    if (!p) return;
    pthread_mutex_lock(&p->mu);
    p->stopping = true;
    fail_queue(p, 503, "the model is being unloaded");
    pthread_cond_broadcast(&p->work_cv);
    pthread_mutex_unlock(&p->mu);
    for (int k = 0; k < p->n_inst; k++) {
        instance *in = &p->inst[k];
        if (in->started) pthread_join(in->thread, NULL);
        for (int s = 0; s < RUNS_IN_FLIGHT; s++) slot_free(p, &in->slots[s]);
    }
    for (int k = 0; p->inst && k < p->n_inst_total; k++) pthread_cond_destroy(&p->inst[k].copied_cv);
    kiln_host_free(p->landing.base);
    pthread_cond_destroy(&p->work_cv);
    pthread_mutex_destroy(&p->mu);
    free(p->inst);
    free(p->in_desc);
    free(p->out_desc);
    free(p);
}

static int reject(serve_infer *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int reject(serve_infer *r, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->message, sizeof r->message, fmt, ap);
    va_end(ap);
    r->http_status = 400;
    return 400;
}

int serve_pool_check(const serve_pool *p, serve_infer *r) {
    if (r->n_inputs != p->n_in) return reject(r, "the model takes %d input(s), the request gives %d", p->n_in, r->n_inputs);
    /* put the inputs in the engine's order */
    for (int i = 0; i < p->n_in; i++) {
        int at = -1;
        for (int k = i; k < r->n_inputs; k++)
            if (!strcmp(r->inputs[k].name, p->in_desc[i].name)) at = k;
        if (at < 0) return reject(r, "input '%s' of the model is missing from the request", p->in_desc[i].name);
        serve_tensor t = r->inputs[i];
        r->inputs[i] = r->inputs[at];
        r->inputs[at] = t;
    }
    r->rows = 1;
    for (int i = 0; i < p->n_in; i++) {
        const kiln_tensor_desc *d = &p->in_desc[i];
        const serve_tensor *t = &r->inputs[i];
        if (t->dtype != d->dtype)
            return reject(r, "input '%s' is %s in the model, the request gives %s", d->name, kiln_dtype_name(d->dtype),
                          kiln_dtype_name(t->dtype));
        if (t->ndim != d->ndim) return reject(r, "input '%s' has %d dimensions in the model, the request gives %d", d->name, d->ndim, t->ndim);
        for (int k = 0; k < d->ndim; k++)
            if ((d->dims[k] >= 0 && t->dims[k] != d->dims[k]) || t->dims[k] < 0)
                return reject(r, "input '%s' dimension %d is %lld in the model, the request gives %lld", d->name, k,
                              (long long)d->dims[k], (long long)t->dims[k]);
        if (p->batched) {
            if (i == 0) r->rows = t->dims[0];
            if (t->dims[0] != r->rows)
                return reject(r, "input '%s' has %lld rows, input '%s' %lld: inputs must agree along the batch axis",
                              d->name, (long long)t->dims[0], p->in_desc[0].name, (long long)r->rows);
        }
    }
    if (r->priority < 0 || r->priority > p->cfg.priority_levels)
        return reject(r, "priority %d is not a level of the model (1..%d)", r->priority, p->cfg.priority_levels);
    if (p->batched && (r->rows < 1 || r->rows > p->cfg.max_batch))
        return reject(r, "a batch of %lld rows is outside the model's 1..%d (max_batch)", (long long)r->rows, p->cfg.max_batch);
    return 0;
}

void serve_pool_infer(serve_pool *p, serve_infer *r) {
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&r->done_cv, &ca);
    pthread_condattr_destroy(&ca);
    r->done = false;
    r->taken = false;
    r->next = NULL;
    r->copy_to = NULL;
    r->joining = NULL;
    r->arrival_us = now_us();
    int64_t timeout = p->cfg.timeout_us;
    if (r->timeout_us > 0 && (timeout == 0 || r->timeout_us < timeout)) timeout = r->timeout_us;
    r->deadline_us = timeout > 0 ? r->arrival_us + (double)timeout : 0;
    pthread_mutex_lock(&p->mu);
    if (p->stopping) {
        finish(r, 503, "the model is being unloaded");
    } else if (instances_up(p, r->arrival_us) == 0) {
        finish(r, 503, "every instance of the model is out of rotation after failures; retry later");
    } else if (p->cfg.max_queue > 0 && p->depth >= p->cfg.max_queue) {
        finish(r, 429, "the model's queue is full (%d requests waiting, max_queue %d); retry later", p->depth, p->cfg.max_queue);
    } else {
        /* after every request of its level or a higher one: FIFO within a level, except that a
         * request in the landing ring goes before the ones of its level there that reserved after
         * it (so that a batch lies back to back more often; none is passed by more than those
         * that reserved before it) */
        if (!r->priority) r->priority = p->cfg.priority_levels;
        serve_infer **link = &p->head;
        while (*link && (*link)->priority < r->priority) link = &(*link)->next;
        serve_infer **at = link;
        size_t mine = landing_order(p, r);
        for (; *link && (*link)->priority == r->priority; link = &(*link)->next) {
            size_t theirs = landing_order(p, *link);
            if (mine == SIZE_MAX || theirs == SIZE_MAX || theirs < mine) at = &(*link)->next;
        }
        r->next = *at;
        *at = r;
        if (!r->next) p->tail = r;
        p->depth++;
        pthread_cond_broadcast(&p->work_cv);
    }
    double next_look_us = r->arrival_us;
    while (!r->done) {
        if (!r->copy_to && r->client_gone && !r->taken) {
            if (now_us() >= next_look_us) {
                next_look_us = now_us() + SERVE_GONE_POLL_MS * 1e3;
                pthread_mutex_unlock(&p->mu);
                bool gone = r->client_gone(r->client_arg);
                pthread_mutex_lock(&p->mu);
                if (gone && !r->done && !r->taken) {
                    leave_queue(p, r);
                    p->abandoned++;
                    finish(r, 499, "the client closed the connection while the request waited in the queue");
                    break;
                }
            }
            if (!r->done && !r->copy_to) wait_until(&r->done_cv, &p->mu, next_look_us);
            continue;
        }
        if (!r->copy_to) {
            pthread_cond_wait(&r->done_cv, &p->mu);
            continue;
        }
        char **to = r->copy_to;
        instance *in = r->joining;
        r->copy_to = NULL;
        pthread_mutex_unlock(&p->mu);
        copy_rows(r, to);
        pthread_mutex_lock(&p->mu);
        if (--in->copies_left == 0) pthread_cond_signal(&in->copied_cv);
    }
    pthread_mutex_unlock(&p->mu);
    pthread_cond_destroy(&r->done_cv);
}

void serve_pool_get_stats(serve_pool *p, serve_pool_stats *out) {
    pthread_mutex_lock(&p->mu);
    out->queue_depth = p->depth;
    out->instances = p->n_inst;
    double now = now_us();
    out->instances_up = instances_up(p, now);
    for (int k = 0; k < p->n_inst; k++)
        out->instance[k] = (serve_instance_stats){.device = p->inst[k].device, .up = p->inst[k].out_until_us <= now,
                                                  .runs = p->inst[k].runs};
    out->runs = p->runs;
    out->rows = p->rows;
    out->failures = p->failures;
    out->overlapped_runs = p->overlapped_runs;
    out->abandoned = p->abandoned;
    out->direct_runs = p->direct_runs;
    out->landing_misses = p->landing_misses;
    pthread_mutex_unlock(&p->mu);
}

const serve_batch_config *serve_pool_config(const serve_pool *p) { return &p->cfg; }

/* Where a reservation of `bytes` can start in ring l now, or SIZE_MAX. */
static size_t landing_fit(const landing_ring *l, size_t bytes) {
    if (!l->n) return bytes <= l->cap ? 0 : SIZE_MAX;
    size_t oldest = l->live[l->first].at;
    if (l->head > oldest) { /* free: [head, cap) and then [0, oldest) */
        if (l->cap - l->head >= bytes) return l->head;
        return oldest >= bytes ? 0 : SIZE_MAX;
    }
    return oldest - l->head >= bytes ? l->head : SIZE_MAX; /* wrapped: free is [head, oldest) */
}

void *serve_pool_landing_reserve(serve_pool *p, size_t bytes) {
    if (!p->landing.base || !bytes) return NULL;
    pthread_mutex_lock(&p->mu);
    landing_ring *l = &p->landing;
    size_t at = l->n < LANDING_MAX_LIVE ? landing_fit(l, bytes) : SIZE_MAX;
    void *out = NULL;
    if (at != SIZE_MAX) {
        int slot = (l->first + l->n++) % LANDING_MAX_LIVE;
        l->live[slot].at = at;
        l->live[slot].bytes = bytes;
        l->live[slot].released = false;
        l->head = at + bytes;
        out = l->base + at;
    } else {
        p->landing_misses++;
    }
    pthread_mutex_unlock(&p->mu);
    return out;
}

void serve_pool_landing_release(serve_pool *p, void *at) {
    if (!at) return;
    pthread_mutex_lock(&p->mu);
    landing_ring *l = &p->landing;
    for (int k = 0; k < l->n; k++) {
        int slot = (l->first + k) % LANDING_MAX_LIVE;
        if (l->base + l->live[slot].at == at && !l->live[slot].released) {
            l->live[slot].released = true;
            break;
        }
    }
    while (l->n && l->live[l->first].released) l->first = (l->first + 1) % LANDING_MAX_LIVE, l->n--;
    pthread_mutex_unlock(&p->mu);
}
