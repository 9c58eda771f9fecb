/* bench_run.c — kiln bench's measurement loop, after trtexec's: every stream (a thread with its own
 * context on the shared engine and its own copy of the inputs and outputs in page-locked host memory,
 * kiln_host_alloc, as trtexec's buffers are) warms up for cfg->warmup_ms, all wait
 * at a barrier, then each runs queries back to back until cfg->duration_s has passed and, together,
 * at least cfg->iterations queries were measured. Where runs are asynchronous (cuda) and transfers
 * are on, each stream keeps two contexts and two queries in flight (pump), as trtexec overlaps one
 * query's transfers with another's computation. Each query records its host latency (from its
 * kiln_context_enqueue to the end of its kiln_context_wait) and, where the backend measures them
 * (timing hooks, backend.h), its enqueue, upload, compute and download times. Throughput is queries / (last end - first start). */
#include "bench/bench_internal.h"

#include "core/status.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

double kiln_bench_now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

typedef struct shared {
    kiln_engine *e;
    const kiln_bench_config *cfg;
    pthread_mutex_t mu;         /* with cond and go: the gate the streams wait at until all started */
    pthread_cond_t cond;
    bool go;
    pthread_barrier_t barrier;  /* between warm-up and measurement, for the streams that started */
    double t0;                  /* measurement start (set by stream 0 after the barrier) */
    int depth;                  /* contexts per stream, queries in flight per stream (1 or 2) */
    atomic_llong measured;      /* queries measured by all streams */
} shared;

typedef struct stream {
    shared *sh;
    int index;
    kiln_context *c[2];         /* c[0]; c[1] too when queries overlap (depth 2) */
    kiln_tensor *inputs;
    void **host_bufs;           /* [depth x (num inputs + num outputs)]: the page-locked copies bound to c */
    kiln_bench_query *q;
    size_t nq, cap;
    int64_t warmup;
    kiln_status status;
    char error[512];
} stream;

/* Binds to context c page-locked copies of the inputs, and page-locked buffers for the outputs (sized
 * by one run), into bufs[0 .. num inputs + num outputs). */
static kiln_status bind_host_buffers(stream *s, kiln_context *c, void **bufs) {
    kiln_engine *e = s->sh->e;
    int nin = kiln_engine_num_inputs(e), nout = kiln_engine_num_outputs(e);
    for (int i = 0; i < nin; i++) {
        kiln_tensor_desc d;
        kiln_engine_input(e, i, &d);
        const kiln_tensor *t = &s->inputs[i];
        KILN_TRY(kiln_host_alloc(t->nbytes ? t->nbytes : 1, &bufs[i]));
        if (t->nbytes) memcpy(bufs[i], t->data, t->nbytes);
        KILN_TRY(kiln_context_set_input(c, d.name, t->dtype, t->ndim, t->dims, bufs[i]));
    }
    KILN_TRY(kiln_context_run(c));
    for (int i = 0; i < nout; i++) {
        kiln_tensor_desc d;
        const void *data;
        KILN_TRY(kiln_context_output(c, i, &d, &data));
        size_t bytes = (size_t)kiln_numel(d.ndim, d.dims) * kiln_dtype_size(d.dtype);
        if (!bytes) continue;
        KILN_TRY(kiln_host_alloc(bytes, &bufs[nin + i]));
        KILN_TRY(kiln_context_set_output_buffer(c, d.name, bufs[nin + i], bytes));
    }
    return KILN_OK;
}

/* Creates the stream's contexts, binds their inputs and outputs and applies the switches (transfers,
 * graphs, stage timing). */
static kiln_status setup(stream *s) {
    kiln_engine *e = s->sh->e;
    const kiln_bench_config *cfg = s->sh->cfg;
    int nio = kiln_engine_num_inputs(e) + kiln_engine_num_outputs(e);
    s->host_bufs = calloc((size_t)(s->sh->depth * nio) + 1, sizeof *s->host_bufs);
    if (!s->host_bufs) return kiln_error(KILN_ERR_OUT_OF_MEMORY, "out of memory");
    for (int k = 0; k < s->sh->depth; k++) {
        KILN_TRY(kiln_context_create(e, &s->c[k]));
        KILN_TRY(bind_host_buffers(s, s->c[k], s->host_bufs + k * nio));
        kiln_backend_context *bc = kiln_context_backend(s->c[k]);
        if (cfg->graphs >= 0 && e->backend->context_set_graphs) e->backend->context_set_graphs(bc, cfg->graphs == 1);
        if (e->backend->context_set_timing) KILN_TRY(e->backend->context_set_timing(bc, KILN_TIMING_STAGES));
        if (cfg->no_transfers) { /* one run with transfers puts the inputs on the device */
            KILN_TRY(kiln_context_run(s->c[k]));
            KILN_TRY(kiln_context_set_transfers(s->c[k], false));
        }
    }
    return KILN_OK;
}

static kiln_status record(stream *s, kiln_context *c, double start, double end) {
    if (s->nq == s->cap) {
        size_t cap = s->cap ? 2 * s->cap : 1024;
        kiln_bench_query *q = realloc(s->q, cap * sizeof *q);
        if (!q) return kiln_error(KILN_ERR_OUT_OF_MEMORY, "out of memory recording queries");
        s->q = q;
        s->cap = cap;
    }
    kiln_bench_query *q = &s->q[s->nq++];
    *q = (kiln_bench_query){start - s->sh->t0, end - s->sh->t0, end - start, -1, -1, -1, -1, s->index};
    kiln_engine *e = s->sh->e;
    if (e->backend->context_last_timing) {
        kiln_backend_timing t;
        e->backend->context_last_timing(kiln_context_backend(c), &t);
        q->enqueue_ms = t.enqueue_ms;
        q->h2d_ms = t.h2d_ms;
        q->compute_ms = t.compute_ms;
        q->d2h_ms = t.d2h_ms;
    }
    return KILN_OK;
}

/* Runs queries back to back, query n on context n % depth: query n is enqueued before query n - 1 is
 * waited for, so with depth 2 one query's transfers overlap the other's computation. Stops enqueueing
 * once `until` has passed and (measuring) the streams' measured and in-flight queries reach
 * cfg->iterations, or (warming up) one query was issued, or after a failure; returns with nothing in
 * flight. Measured queries are recorded from enqueue to the end of their wait. */
static kiln_status pump(stream *s, double until, bool measuring) {
    const kiln_bench_config *cfg = s->sh->cfg;
    int depth = s->sh->depth;
    double start[2] = {0, 0};
    int64_t issued = 0, finished = 0;
    kiln_status st = KILN_OK;
    for (;;) {
        double now = kiln_bench_now_ms();
        bool done = now >= until && (measuring ? atomic_load(&s->sh->measured) + (issued - finished) >= cfg->iterations : issued > 0);
        bool more = st == KILN_OK && !done;
        if (more) {
            int k = (int)(issued % depth);
            start[k] = now;
            st = kiln_context_enqueue(s->c[k]);
            if (st == KILN_OK) issued++;
            more = st == KILN_OK;
        }
        if (finished == issued) return st;
        if (more && issued - finished < depth) continue;
        int k = (int)(finished % depth);
        kiln_status w = kiln_context_wait(s->c[k]);
        double end = kiln_bench_now_ms();
        finished++;
        if (measuring) {
            if (w == KILN_OK) w = record(s, s->c[k], start[k], end);
            atomic_fetch_add(&s->sh->measured, 1);
        } else {
            s->warmup++;
        }
        if (st == KILN_OK) st = w;
    }
}

static kiln_status measure(stream *s) {
    const kiln_bench_config *cfg = s->sh->cfg;
    kiln_status st = setup(s);
    if (st == KILN_OK) st = pump(s, kiln_bench_now_ms() + cfg->warmup_ms, false);
    /* every stream reaches the barrier, also after a failure (then it measures nothing) */
    pthread_barrier_wait(&s->sh->barrier);
    if (s->index == 0) s->sh->t0 = kiln_bench_now_ms();
    pthread_barrier_wait(&s->sh->barrier);
    if (st == KILN_OK) st = pump(s, s->sh->t0 + cfg->duration_s * 1e3, true);
    return st;
}

static void *stream_main(void *arg) {
    stream *s = arg;
    pthread_mutex_lock(&s->sh->mu);
    while (!s->sh->go) pthread_cond_wait(&s->sh->cond, &s->sh->mu);
    pthread_mutex_unlock(&s->sh->mu);
    s->status = measure(s);
    if (s->status != KILN_OK) snprintf(s->error, sizeof s->error, "stream %d: %s", s->index, kiln_last_error());
    return NULL;
}

kiln_status kiln_bench_stats_of(const double *samples, size_t n, kiln_bench_stats *out) {
    memset(out, 0, sizeof *out);
    if (n == 0) return KILN_OK;
    static const double ps[4] = {90, 95, 99, 99.9};
    double v[4];
    KILN_TRY(kiln_summary_compute(samples, n, &out->s));
    KILN_TRY(kiln_summary_percentiles(samples, n, ps, 4, v));
    out->p90 = v[0];
    out->p95 = v[1];
    out->p99 = v[2];
    out->p999 = v[3];
    out->present = true;
    return KILN_OK;
}

/* The statistics of every metric and the throughput over r->queries. */
static kiln_status summarize(kiln_bench_result *r) {
    size_t n = r->nqueries;
    double *x = malloc((n + 1) * sizeof *x);
    if (!x) return kiln_error(KILN_ERR_OUT_OF_MEMORY, "out of memory");
    double first = n ? r->queries[0].start_ms : 0, last = 0;
    kiln_status s = KILN_OK;
    for (int m = 0; m < 5 && s == KILN_OK; m++) {
        size_t k = 0;
        for (size_t i = 0; i < n; i++) {
            const kiln_bench_query *q = &r->queries[i];
            double v = m == 0 ? q->latency_ms : m == 1 ? q->enqueue_ms : m == 2 ? q->h2d_ms : m == 3 ? q->compute_ms : q->d2h_ms;
            if (v >= 0) x[k++] = v;
            if (m == 0) {
                first = q->start_ms < first ? q->start_ms : first;
                last = q->end_ms > last ? q->end_ms : last;
            }
            if (m == 3 && v >= 0) r->gpu_time_s += v / 1e3;
        }
        kiln_bench_stats *st[5] = {&r->latency, &r->enqueue, &r->h2d, &r->compute, &r->d2h};
        s = kiln_bench_stats_of(x, k == n ? n : 0, st[m]); /* a metric some queries lack is absent */
    }
    free(x);
    r->walltime_s = (last - first) / 1e3;
    r->qps = r->walltime_s > 0 ? (double)n / r->walltime_s : 0;
    r->items_per_s = r->qps * (double)r->batch;
    return s;
}

/* Sorts the queries by start time (they come per stream). */
static int by_start(const void *a, const void *b) {
    double x = ((const kiln_bench_query *)a)->start_ms, y = ((const kiln_bench_query *)b)->start_ms;
    return (x > y) - (x < y);
}

/* Copies the outputs of stream 0's context (its last run: the seeded inputs) into r->outputs. */
static kiln_status keep_outputs(kiln_engine *e, kiln_context *c, kiln_bench_result *r) {
    int n = kiln_engine_num_outputs(e);
    r->outputs = calloc((size_t)n + 1, sizeof *r->outputs);
    if (!r->outputs) return kiln_error(KILN_ERR_OUT_OF_MEMORY, "out of memory");
    r->noutputs = n;
    KILN_TRY(kiln_context_set_transfers(c, true));
    KILN_TRY(kiln_context_run(c));
    for (int i = 0; i < n; i++) {
        kiln_tensor_desc d;
        const void *data;
        KILN_TRY(kiln_context_output(c, i, &d, &data));
        kiln_tensor view;
        kiln_tensor_view(&view, d.dtype, d.ndim, d.dims, (void *)data);
        KILN_TRY(kiln_tensor_copy(&r->outputs[i], &view));
    }
    return KILN_OK;
}

/* Merges the streams' queries into r and summarizes; then the layer pass and the outputs. */
static kiln_status collect(kiln_engine *e, const kiln_bench_config *cfg, stream *ss, kiln_bench_result *r) {
    size_t total = 0;
    for (int i = 0; i < cfg->streams; i++) {
        total += ss[i].nq;
        r->warmup_queries += ss[i].warmup;
    }
    r->queries = malloc((total + 1) * sizeof *r->queries);
    if (!r->queries) return kiln_error(KILN_ERR_OUT_OF_MEMORY, "out of memory");
    for (int i = 0; i < cfg->streams; i++) {
        if (ss[i].nq) memcpy(r->queries + r->nqueries, ss[i].q, ss[i].nq * sizeof *ss[i].q);
        r->nqueries += ss[i].nq;
    }
    qsort(r->queries, r->nqueries, sizeof *r->queries, by_start);
    KILN_TRY(summarize(r));
    if (e->backend->context_set_timing) KILN_TRY(kiln_bench_layers(e, ss[0].c[0], cfg, r));
    return keep_outputs(e, ss[0].c[0], r);
}

kiln_status kiln_bench_run(kiln_engine *e, const kiln_bench_config *cfg, kiln_bench_result *r) {
    memset(r, 0, sizeof *r);
    if (cfg->streams < 1 || cfg->streams > 256) return kiln_error(KILN_ERR_INVALID_ARGUMENT, "streams must be 1..256, got %d", cfg->streams);
    int nin = kiln_engine_num_inputs(e);
    kiln_tensor *inputs = calloc((size_t)cfg->streams * (size_t)(nin + 1), sizeof *inputs);
    stream *ss = calloc((size_t)cfg->streams, sizeof *ss);
    pthread_t *th = calloc((size_t)cfg->streams, sizeof *th);
    /* trtexec overlaps the transfers of one query with the computation of the next; so do two contexts
     * per stream where runs are asynchronous (cuda) and there are transfers */
    int depth = !cfg->no_transfers && e->backend->context_enqueue ? 2 : 1;
    r->contexts_per_stream = depth;
    shared sh = {.e = e, .cfg = cfg, .mu = PTHREAD_MUTEX_INITIALIZER, .cond = PTHREAD_COND_INITIALIZER, .depth = depth};
    kiln_status s = inputs && ss && th ? KILN_OK : kiln_error(KILN_ERR_OUT_OF_MEMORY, "out of memory");
    if (s == KILN_OK) s = kiln_bench_make_inputs(e, cfg, inputs, r->inputs, sizeof r->inputs, r->notes, sizeof r->notes, &r->batch);
    for (int i = 1; s == KILN_OK && i < cfg->streams; i++)
        for (int k = 0; s == KILN_OK && k < nin; k++) s = kiln_tensor_copy(&inputs[i * (nin + 1) + k], &inputs[k]);
    r->graphs_available = e->backend->context_set_graphs != NULL;
    if (s == KILN_OK) {
        atomic_init(&sh.measured, 0);
        int started = 0;
        for (int i = 0; i < cfg->streams; i++) {
            ss[i] = (stream){.sh = &sh, .index = i, .inputs = &inputs[i * (nin + 1)]};
            if (pthread_create(&th[i], NULL, stream_main, &ss[i]) != 0) break;
            started++;
        }
        if (started) pthread_barrier_init(&sh.barrier, NULL, (unsigned)started);
        pthread_mutex_lock(&sh.mu);
        sh.go = true;
        pthread_cond_broadcast(&sh.cond);
        pthread_mutex_unlock(&sh.mu);
        for (int i = 0; i < started; i++) pthread_join(th[i], NULL);
        if (started) pthread_barrier_destroy(&sh.barrier);
        if (started < cfg->streams) s = kiln_error(KILN_ERR_OUT_OF_MEMORY, "could not start stream %d of %d (pthread_create)", started + 1, cfg->streams);
        for (int i = 0; i < cfg->streams && s == KILN_OK; i++)
            if (ss[i].status != KILN_OK) s = kiln_error(ss[i].status, "%s", ss[i].error);
        if (s == KILN_OK) s = collect(e, cfg, ss, r);
    }
    int nout = kiln_engine_num_outputs(e);
    for (int i = 0; ss && i < cfg->streams; i++) {
        kiln_context_free(ss[i].c[0]);
        kiln_context_free(ss[i].c[1]);
        for (int k = 0; ss[i].host_bufs && k < depth * (nin + nout); k++) kiln_host_free(ss[i].host_bufs[k]);
        free(ss[i].host_bufs);
        free(ss[i].q);
    }
    for (int i = 0; inputs && i < cfg->streams * (nin + 1); i++) kiln_tensor_release(&inputs[i]);
    free(inputs);
    free(ss);
    free(th);
    if (s != KILN_OK) kiln_bench_result_free(r);
    return s;
}

void kiln_bench_result_free(kiln_bench_result *r) {
    if (!r) return;
    free(r->queries);
    free(r->layers);
    for (int i = 0; r->outputs && i < r->noutputs; i++) kiln_tensor_release(&r->outputs[i]);
    free(r->outputs);
    memset(r, 0, sizeof *r);
}
