/* batcher.c — a tensor model's instance threads and dynamic batcher (contract in batcher.h).
 *
 * One mutex guards the queue, the instances' rotation state and the counters; instance threads
 * hold it only to pick a batch and to hand results back, never while a context runs. A request's
 * thread sleeps on its own condition variable until an instance marks it done. */
#include "serve/batcher.h"

#include "core/log.h"
#include "core/status.h"

#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct instance {
    serve_pool *pool;
    int index;
    kiln_context *ctx;
    pthread_t thread;
    bool started;
    int consecutive_failures;
    double out_until_us;  /* > now: out of rotation (circuit open) */
    void **staging;       /* [n_in] joined inputs of a batch */
    size_t *staging_cap;
} instance;

struct serve_pool {
    kiln_engine *engine;
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
    int n_inst;
    uint64_t runs, rows, failures;
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
    free(t->data);
    t->data = NULL;
    t->bytes = 0;
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

static kiln_status bind_inputs(instance *in, serve_infer **batch, int n, int64_t rows) {
    serve_pool *p = in->pool;
    for (int i = 0; i < p->n_in; i++) {
        const serve_tensor *t0 = &batch[0]->inputs[i];
        int64_t dims[KILN_MAX_DIMS];
        memcpy(dims, t0->dims, sizeof dims);
        const void *data = t0->data;
        if (n > 1) {
            size_t total = 0;
            for (int k = 0; k < n; k++) total += batch[k]->inputs[i].bytes;
            if (total > in->staging_cap[i]) {
                void *grown = realloc(in->staging[i], total);
                if (!grown) return kiln_error(KILN_ERR_OUT_OF_MEMORY, "joining a batch of %lld rows", (long long)rows);
                in->staging[i] = grown;
                in->staging_cap[i] = total;
            }
            size_t at = 0;
            for (int k = 0; k < n; k++) {
                memcpy((char *)in->staging[i] + at, batch[k]->inputs[i].data, batch[k]->inputs[i].bytes);
                at += batch[k]->inputs[i].bytes;
            }
            data = in->staging[i];
            dims[0] = rows;
        }
        kiln_status st = kiln_context_set_input(in->ctx, p->in_desc[i].name, t0->dtype, t0->ndim, dims, data);
        if (st) return st;
    }
    return KILN_OK;
}

/* Copies output j's rows of every request out of the context. */
static kiln_status split_outputs(instance *in, serve_infer **batch, int n, int64_t rows) {
    serve_pool *p = in->pool;
    for (int k = 0; k < n; k++) {
        batch[k]->outputs = calloc((size_t)p->n_out, sizeof(serve_tensor));
        if (!batch[k]->outputs) return kiln_error(KILN_ERR_OUT_OF_MEMORY, "output tensors");
        batch[k]->n_outputs = p->n_out;
    }
    for (int j = 0; j < p->n_out; j++) {
        kiln_tensor_desc d;
        const void *data;
        kiln_status st = kiln_context_output(in->ctx, j, &d, &data);
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

/* Runs a batch on the instance; returns the status (the outputs are filled on KILN_OK). */
static kiln_status run_batch(instance *in, serve_infer **batch, int n, int64_t rows) {
    if (atomic_load(&in->pool->failures_to_inject) > 0 && atomic_fetch_sub(&in->pool->failures_to_inject, 1) > 0)
        return kiln_error(KILN_ERR_BACKEND, "injected failure (KILN_SERVE_FAIL_RUNS)");
    kiln_status st = bind_inputs(in, batch, n, rows);
    if (!st) st = kiln_context_run(in->ctx);
    if (!st) st = split_outputs(in, batch, n, rows);
    if (st)
        for (int k = 0; k < n; k++) serve_infer_clear(batch[k]);
    return st;
}

/* Hands a finished batch back and keeps the instance's breaker; the caller holds the mutex. */
static void complete(instance *in, serve_infer **batch, int n, int64_t rows, kiln_status st, double t0, double t1) {
    serve_pool *p = in->pool;
    p->runs++;
    p->rows += (uint64_t)rows;
    bool request_fault = st == KILN_ERR_SHAPE || st == KILN_ERR_INVALID_ARGUMENT;
    if (st && !request_fault) {
        p->failures++;
        in->consecutive_failures++;
        if (in->consecutive_failures >= p->cfg.breaker_failures) {
            in->out_until_us = t1 + (double)p->cfg.breaker_cooldown_ms * 1e3;
            in->consecutive_failures = p->cfg.breaker_failures - 1; /* one more failure after the probe trips it */
            KILN_LOG(KILN_LOG_WARN, "instance %d failed %d runs in a row (%s): out of rotation for %lld ms",
                     in->index, p->cfg.breaker_failures, kiln_last_error(), (long long)p->cfg.breaker_cooldown_ms);
        }
    } else if (!st) {
        in->consecutive_failures = 0;
    }
    for (int k = 0; k < n; k++) {
        serve_infer *r = batch[k];
        r->queue_us = t0 - r->arrival_us;
        r->compute_us = t1 - t0;
        r->batch_rows = (int)rows;
        r->first_of_run = k == 0;
        if (!st) finish(r, 200, "ok");
        else if (request_fault) finish(r, 400, "%s", kiln_last_error());
        else finish(r, 503, "instance %d failed: %s", in->index, kiln_last_error());
    }
    if (instances_up(p, t1) == 0) fail_queue(p, 503, "every instance of the model is out of rotation after failures");
}

static void *instance_main(void *arg) {
    instance *in = arg;
    serve_pool *p = in->pool;
    serve_infer **batch = malloc(sizeof(serve_infer *) * (size_t)(p->cfg.max_batch > 0 ? p->cfg.max_batch : 1));
    pthread_mutex_lock(&p->mu);
    while (!p->stopping && batch) {
        double now = now_us();
        if (in->out_until_us > now) {
            wait_until(&p->work_cv, &p->mu, in->out_until_us);
            continue;
        }
        expire(p, now);
        if (!p->head) {
            pthread_cond_wait(&p->work_cv, &p->mu);
            continue;
        }
        int n;
        int64_t rows;
        double wake = now;
        if (!form_batch(p, now, &n, &rows, &wake)) {
            wait_until(&p->work_cv, &p->mu, wake);
            continue;
        }
        for (int k = 0; k < n; k++) {
            batch[k] = p->head;
            p->head = p->head->next;
        }
        if (!p->head) p->tail = NULL;
        p->depth -= n;
        pthread_mutex_unlock(&p->mu);
        double t0 = now_us();
        kiln_status st = run_batch(in, batch, n, rows);
        double t1 = now_us();
        pthread_mutex_lock(&p->mu);
        complete(in, batch, n, rows, st, t0, t1);
    }
    pthread_mutex_unlock(&p->mu);
    free(batch);
    return NULL;
}

/* Runs every batch size once on the instance with zero inputs, so that no request pays for a plan. */
static kiln_status warm_up(serve_pool *p, instance *in) {
    for (int i = 0; i < p->n_in; i++)
        for (int d = p->batched ? 1 : 0; d < p->in_desc[i].ndim; d++)
            if (p->in_desc[i].dims[d] < 0 || kiln_dtype_size(p->in_desc[i].dtype) == 0) return KILN_OK;
    int sizes = p->batched ? p->cfg.max_batch : 1;
    for (int b = 1; b <= sizes; b++) {
        void **bufs = calloc((size_t)p->n_in, sizeof(void *));
        kiln_status st = bufs ? KILN_OK : kiln_error(KILN_ERR_OUT_OF_MEMORY, "warm-up inputs");
        for (int i = 0; i < p->n_in && !st; i++) {
            int64_t dims[KILN_MAX_DIMS];
            memcpy(dims, p->in_desc[i].dims, sizeof dims);
            if (p->batched) dims[0] = b;
            bufs[i] = calloc((size_t)elements(p->in_desc[i].ndim, dims) + 1, kiln_dtype_size(p->in_desc[i].dtype));
            if (!bufs[i]) st = kiln_error(KILN_ERR_OUT_OF_MEMORY, "warm-up input '%s'", p->in_desc[i].name);
            else st = kiln_context_set_input(in->ctx, p->in_desc[i].name, p->in_desc[i].dtype, p->in_desc[i].ndim, dims, bufs[i]);
        }
        if (!st) st = kiln_context_run(in->ctx);
        for (int i = 0; bufs && i < p->n_in; i++) free(bufs[i]);
        free(bufs);
        if (st) return kiln_error_prefix(st, "warming up instance %d at batch size %d", in->index, b);
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

kiln_status serve_pool_create(kiln_engine *e, const serve_batch_config *cfg, serve_pool **out) {
    *out = NULL;
    serve_pool *p = calloc(1, sizeof *p);
    if (!p) return kiln_error(KILN_ERR_OUT_OF_MEMORY, "model instances");
    p->engine = e;
    p->cfg = *cfg;
    if (p->cfg.instances < 1) p->cfg.instances = 1;
    if (p->cfg.breaker_failures < 1) p->cfg.breaker_failures = 1;
    if (p->cfg.priority_levels < 1) p->cfg.priority_levels = 1;
    p->batched = p->cfg.max_batch > 0 && engine_is_batched(e);
    if (!p->batched) p->cfg.max_batch = 0;
    p->n_in = kiln_engine_num_inputs(e);
    p->n_out = kiln_engine_num_outputs(e);
    p->in_desc = calloc((size_t)p->n_in + 1, sizeof(kiln_tensor_desc));
    p->out_desc = calloc((size_t)p->n_out + 1, sizeof(kiln_tensor_desc));
    p->inst = calloc((size_t)p->cfg.instances, sizeof(instance));
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
    for (int k = 0; k < p->cfg.instances && !st; k++) {
        instance *in = &p->inst[k];
        in->pool = p;
        in->index = k;
        p->n_inst = k + 1;
        in->staging = calloc((size_t)p->n_in + 1, sizeof(void *));
        in->staging_cap = calloc((size_t)p->n_in + 1, sizeof(size_t));
        if (!in->staging || !in->staging_cap) st = kiln_error(KILN_ERR_OUT_OF_MEMORY, "instance %d", k);
        if (!st) st = kiln_context_create(e, &in->ctx);
        if (!st) st = warm_up(p, in);
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
        kiln_context_free(in->ctx);
        for (int i = 0; in->staging && i < p->n_in; i++) free(in->staging[i]);
        free(in->staging);
        free(in->staging_cap);
    }
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
    r->next = NULL;
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
        /* after every request of its level or a higher one: FIFO within a level */
        if (!r->priority) r->priority = p->cfg.priority_levels;
        serve_infer **link = &p->head;
        while (*link && (*link)->priority <= r->priority) link = &(*link)->next;
        r->next = *link;
        *link = r;
        if (!r->next) p->tail = r;
        p->depth++;
        pthread_cond_broadcast(&p->work_cv);
    }
    while (!r->done) pthread_cond_wait(&r->done_cv, &p->mu);
    pthread_mutex_unlock(&p->mu);
    pthread_cond_destroy(&r->done_cv);
}

void serve_pool_get_stats(serve_pool *p, serve_pool_stats *out) {
    pthread_mutex_lock(&p->mu);
    out->queue_depth = p->depth;
    out->instances = p->n_inst;
    out->instances_up = instances_up(p, now_us());
    out->runs = p->runs;
    out->rows = p->rows;
    out->failures = p->failures;
    pthread_mutex_unlock(&p->mu);
}

const serve_batch_config *serve_pool_config(const serve_pool *p) { return &p->cfg; }
