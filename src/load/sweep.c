/* sweep.c — kiln_load_run: checks the configuration, prepares the target once, runs one step or
 * each step of a sweep (a fresh engine and connection pool per step, each with its own warm-up),
 * applies the stop rule between steps, and derives the capacity plan (the highest load one server
 * sustains within the SLO, and how many servers a target rate needs). */
#include "load/load_internal.h"

#include "core/status.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

const double kiln_load_pcts[KILN_LOAD_NPCT] = {50, 90, 95, 99, 99.9};
const char *const kiln_load_pct_names[KILN_LOAD_NPCT] = {"p50", "p90", "p95", "p99", "p99.9"};

void kiln_load_step_rates(const kiln_load_step *s, kiln_load_rates *o) {
    double w = s->window_s, el = s->elapsed_s > w ? s->elapsed_s : w; /* never over less than the window */
    o->scheduled = w > 0 ? (double)s->scheduled / w : 0;
    o->sent = w > 0 ? (double)s->sent / w : 0;
    o->completed = el > 0 ? (double)s->ok / el : 0;
    o->good = el > 0 ? (double)s->good / el : 0;
    o->out_tokens = el > 0 ? (double)s->out_tokens / el : 0;
    o->window_completed = w > 0 ? (double)s->window_ok / w : 0;
    o->window_out_tokens = w > 0 ? (double)s->window_out_tokens / w : 0;
}

int64_t kiln_load_pct_us(const kiln_hist *h, double p) {
    int64_t v = kiln_hist_value_at_percentile(h, p), max = kiln_hist_max(h);
    return v < max ? v : max;
}

bool kiln_load_has_slo(const kiln_load_config *c) {
    return c->slo_ttft_us || c->slo_tpot_us || c->slo_e2e_us || c->slo_itl_us;
}

double kiln_load_step_goodput(const kiln_load_step *s) {
    return s->scheduled > 0 ? (double)s->good / (double)s->scheduled : 0;
}

bool kiln_load_step_meets_slo(const kiln_load_config *c, const kiln_load_step *s) {
    return s->scheduled > 0 && kiln_load_step_goodput(s) >= c->goodput_share;
}

/* Rejects configurations the engine cannot honour. */
static kiln_status check_config(const kiln_load_config *c) {
    if (!c->url || !c->url[0]) return kiln_error(KILN_ERR_INVALID_ARGUMENT, "no URL given");
    if (!(c->rate >= 0) || !isfinite(c->rate)) return kiln_error(KILN_ERR_INVALID_ARGUMENT, "--rate must be a positive number of requests/s");
    if (c->rate == 0 && c->sweep != KILN_SWEEP_RATE && c->concurrency < 1)
        return kiln_error(KILN_ERR_INVALID_ARGUMENT, "--concurrency must be at least 1");
    if (c->connections < 1) return kiln_error(KILN_ERR_INVALID_ARGUMENT, "--connections must be at least 1");
    if (c->threads < 1 || c->threads > KILN_LOAD_MAX_THREADS)
        return kiln_error(KILN_ERR_INVALID_ARGUMENT, "--threads must be in 1..%d", KILN_LOAD_MAX_THREADS);
    if (c->duration_s <= 0 && c->requests <= 0) return kiln_error(KILN_ERR_INVALID_ARGUMENT, "give --duration and/or --requests (the run must be bounded)");
    if (!(c->warmup_s >= 0) || !(c->timeout_s > 0)) return kiln_error(KILN_ERR_INVALID_ARGUMENT, "--warmup must be >= 0 and --timeout > 0");
    if (!(c->goodput_share > 0 && c->goodput_share <= 1)) return kiln_error(KILN_ERR_INVALID_ARGUMENT, "--goodput must be in (0, 100] %%");
    if (c->target_rate > 0 && !kiln_load_has_slo(c)) return kiln_error(KILN_ERR_INVALID_ARGUMENT, "--target-rate needs an --slo to plan against");
    if (c->api != KILN_LOAD_API_KSERVE && (c->ninputs || c->nshapes || c->kserve_binary))
        return kiln_error(KILN_ERR_INVALID_ARGUMENT, "--input, --shape and --binary are for --api kserve");
    if (c->api != KILN_LOAD_API_HTTP && (c->body || c->method))
        return kiln_error(KILN_ERR_INVALID_ARGUMENT, "--data, --body and --method are for --api http");
    if (c->stream && (c->api == KILN_LOAD_API_HTTP || c->api == KILN_LOAD_API_KSERVE))
        return kiln_error(KILN_ERR_INVALID_ARGUMENT, "--stream is for the OpenAI APIs");
    return KILN_OK;
}

/* Evaluates the stop rule on a finished step; true (and the reason in the step) when it fires. */
static bool should_stop(const kiln_load_config *c, kiln_load_step *s) {
    for (int i = 0; i < c->nstops; i++) {
        const kiln_load_stop *k = &c->stops[i];
        if (k->error_rate) {
            double rate = s->scheduled ? (double)s->failed / (double)s->scheduled : 0;
            if (rate > k->threshold) {
                snprintf(s->stop_reason, sizeof s->stop_reason, "error rate %.2f%% > %.2f%%", rate * 100, k->threshold * 100);
                return true;
            }
            continue;
        }
        const kiln_hist *h = s->hist[k->metric];
        if (kiln_hist_count(h) == 0) continue;
        double v = k->percentile < 0 ? kiln_hist_mean(h) : (double)kiln_load_pct_us(h, k->percentile);
        if (v > k->threshold) {
            char stat[16];
            if (k->percentile < 0) snprintf(stat, sizeof stat, "mean");
            else if (k->percentile >= 100) snprintf(stat, sizeof stat, "max");
            else snprintf(stat, sizeof stat, "p%g", k->percentile);
            snprintf(s->stop_reason, sizeof s->stop_reason, "%s %s %.3f ms > %.3f ms", kiln_load_metric_name(k->metric), stat, v / 1e3,
                     k->threshold / 1e3);
            return true;
        }
    }
    if (s->sent == 0 && s->scheduled > 0) {
        snprintf(s->stop_reason, sizeof s->stop_reason, "no request could be sent");
        return true;
    }
    return false;
}

/* The capacity plan: best step within the SLO (highest offered rate in open loop, highest completed
 * rate in closed loop) and the servers a target rate needs. */
static void plan_capacity(const kiln_load_config *c, kiln_load_result *r) {
    r->capacity_step = -1;
    if (!kiln_load_has_slo(c)) return;
    r->have_capacity = true;
    for (int i = 0; i < r->nsteps; i++) {
        const kiln_load_step *s = &r->steps[i];
        if (!kiln_load_step_meets_slo(c, s)) continue;
        kiln_load_rates rt;
        kiln_load_step_rates(s, &rt);
        double rate = s->open_loop ? rt.scheduled : rt.completed;
        if (rate > r->capacity_rate) {
            r->capacity_rate = rate;
            r->capacity_step = i;
        }
    }
    if (c->target_rate > 0 && r->capacity_rate > 0) r->servers_needed = (int)ceil(c->target_rate / r->capacity_rate - 1e-9);
}

/* One event loop's part of a step, run on its own thread. */
typedef struct loop_job {
    load_engine e;
    bool ready;               /* e initialised */
    kiln_load_step step;
    double rate;
    int64_t t0_ns;
    kiln_status st;
    char error[512];          /* the thread's kiln_last_error when st != KILN_OK */
} loop_job;

static void *loop_main(void *arg) {
    loop_job *j = arg;
    j->st = load_engine_run_step(&j->e, j->rate, j->t0_ns, &j->step);
    if (j->st) snprintf(j->error, sizeof j->error, "%s", kiln_last_error());
    return NULL;
}

/* Runs step k (rate > 0: open loop; else closed loop with `conc`) on min(--threads, connections)
 * event loops, each with its share of the connections, and merges their results into *step. */
static kiln_status run_one(const kiln_load_config *c, load_target *t, double rate, int conc, kiln_load_step *step) {
    int slots = rate > 0 ? c->connections : conc;
    int threads = c->threads < slots ? c->threads : slots;
    if (c->requests > 0 && c->requests < threads) threads = (int)c->requests; /* every loop has requests to send */
    if (threads < 1) threads = 1;
    loop_job *jobs = calloc((size_t)threads, sizeof *jobs);
    pthread_t *tids = calloc((size_t)threads, sizeof *tids);
    if (!jobs || !tids) {
        free(jobs);
        free(tids);
        return kiln_error(KILN_ERR_OUT_OF_MEMORY, "out of memory for %d event loops", threads);
    }
    kiln_status st = KILN_OK;
    for (int i = 0; i < threads && st == KILN_OK; i++) {
        st = load_step_init(&jobs[i].step);
        if (st == KILN_OK) st = load_engine_init(&jobs[i].e, c, t, slots / threads + (i < slots % threads), i, threads);
        jobs[i].ready = st == KILN_OK;
        jobs[i].rate = rate;
    }
    int started = 0;
    int64_t t0 = load_now_ns();
    for (int i = 0; i < threads && st == KILN_OK; i++) {
        jobs[i].t0_ns = t0;
        if (threads == 1) loop_main(&jobs[i]); /* no thread for a single loop */
        else if (pthread_create(&tids[i], NULL, loop_main, &jobs[i]))
            st = kiln_error(KILN_ERR_INTERNAL, "cannot start event loop thread %d of %d", i + 1, threads);
        if (st == KILN_OK) started++;
    }
    for (int i = 0; i < started && threads > 1; i++) pthread_join(tids[i], NULL);
    for (int i = 0; i < started && st == KILN_OK; i++)
        if (jobs[i].st) st = kiln_error(jobs[i].st, "%s", jobs[i].error);
    *step = jobs[0].step; /* loop 0's result, with the others' merged into it */
    jobs[0].step = (kiln_load_step){0};
    for (int i = 1; i < threads && st == KILN_OK; i++) st = load_step_merge(step, &jobs[i].step);
    step->rate = rate; /* the sum of the loops' shares, without their rounding */
    for (int i = 0; i < threads; i++) {
        if (jobs[i].ready) load_engine_free(&jobs[i].e);
        load_step_free(&jobs[i].step);
    }
    free(jobs);
    free(tids);
    return st;
}

kiln_status kiln_load_run(const kiln_load_config *c, kiln_load_result **out) {
    *out = NULL;
    KILN_TRY(check_config(c));
    static bool curl_ready;
    if (!curl_ready) {
        if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) return kiln_error(KILN_ERR_BACKEND, "libcurl initialisation failed");
        curl_ready = true;
    }
    load_target t;
    KILN_TRY(load_target_prepare(c, &t));
    int n = c->sweep != KILN_SWEEP_NONE ? c->nsweep : 1;
    kiln_load_result *r = calloc(1, sizeof *r);
    kiln_load_step *steps = calloc((size_t)n, sizeof *steps);
    if (!r || !steps) {
        free(r);
        free(steps);
        load_target_free(&t);
        return kiln_error(KILN_ERR_OUT_OF_MEMORY, "out of memory");
    }
    r->steps = steps;
    snprintf(r->endpoint, sizeof r->endpoint, "%s", t.url);
    snprintf(r->model, sizeof r->model, "%s", t.model);
    r->transport = t.native ? "native" : "curl";
    time_t now = time(NULL);
    strftime(r->started_at, sizeof r->started_at, "%Y-%m-%dT%H:%M:%SZ", gmtime(&now));
    kiln_status st = KILN_OK;
    for (int k = 0; k < n && st == KILN_OK; k++) {
        double rate = c->sweep == KILN_SWEEP_RATE ? c->sweep_values[k] : c->sweep == KILN_SWEEP_CONCURRENCY ? 0 : c->rate;
        int conc = c->sweep == KILN_SWEEP_CONCURRENCY ? (int)c->sweep_values[k] : c->concurrency;
        if (c->progress && n > 1)
            fprintf(stderr, "kiln load: step %d/%d: %s %g\n", k + 1, n, rate > 0 ? "rate" : "concurrency", rate > 0 ? rate : (double)conc);
        st = run_one(c, &t, rate, conc, &r->steps[k]);
        r->nsteps = k + 1;
        if (st == KILN_OK && k + 1 < n && should_stop(c, &r->steps[k])) r->steps[k].stopped = true;
        if (r->steps[k].stopped) break;
    }
    load_target_free(&t);
    if (st != KILN_OK) {
        kiln_load_result_free(r);
        return st;
    }
    int64_t usage = 0, est = 0;
    for (int i = 0; i < r->nsteps; i++) {
        usage += r->steps[i].tokens_from_usage;
        est += r->steps[i].tokens_estimated;
    }
    r->token_source = usage && est ? "usage and estimated" : usage ? "usage" : est ? "estimated" : "none";
    plan_capacity(c, r);
    *out = r;
    return KILN_OK;
}

void kiln_load_result_free(kiln_load_result *r) {
    if (!r) return;
    for (int i = 0; i < r->nsteps; i++) load_step_free(&r->steps[i]);
    free(r->steps);
    free(r);
}
