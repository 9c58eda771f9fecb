/* bench_llm_requests.c — kiln bench --llm's rounds of requests (bench_llm_requests.h): random prompts
 * (after a shared prefix of bc->prefix_len tokens) submitted to the kiln_llm (eos ignored, greedy or
 * at the config's temperature, exactly output_len tokens), the events' timestamps recorded on the engine
 * loop's thread, a new request submitted from the callback as one ends when
 * the round bounds the requests in flight. */
#include "bench/bench_llm_requests.h"

#include "bench/bench_internal.h"
#include "core/status.h"
#include "llm/sampler.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void on_event(const kiln_llm_event *ev);

/* Submits request i of the round (r->mu held). */
static kiln_status submit(bench_llm_run *r, int i) {
    const kiln_bench_llm_config *bc = r->bc;
    for (int k = 0; k < bc->input_len; k++) { /* the shared prefix: its own stream, the same each time */
        int32_t t = (int32_t)(k < bc->prefix_len ? kiln_sample_uniform(~bc->seed, (uint64_t)k) * r->vocab
                                                 : kiln_sample_uniform(bc->seed, r->pos++) * r->vocab);
        r->prompt[k] = t < r->vocab ? t : r->vocab - 1;
    }
    kiln_llm_request q = kiln_llm_request_defaults();
    q.prompt_ids = r->prompt;
    q.n_prompt_ids = bc->input_len;
    q.max_tokens = bc->output_len;
    q.ignore_eos = true;
    q.sampling.temperature = bc->temperature;
    q.sampling.seed = bc->seed + (uint64_t)r->submitted;
    q.user = &r->reqs[i];
    q.on_event = on_event;
    r->reqs[i].submit_ms = kiln_bench_now_ms() - r->t0;
    uint64_t id;
    KILN_TRY(kiln_llm_submit(r->llm, &q, &id));
    r->submitted++;
    return KILN_OK;
}

/* Closes the step whose events were being delivered: its sequences are those still running after it
 * plus those that ended in it. */
static void close_step(bench_llm_run *r) {
    if (r->step_running + r->step_ended > r->peak_running) r->peak_running = r->step_running + r->step_ended;
    r->step_ended = 0;
}

/* The first event of a step: the statistics as of its end (published before its events). */
static void open_step(bench_llm_run *r, double time_ms) {
    close_step(r);
    r->step = time_ms;
    kiln_llm_stats s;
    if (kiln_llm_get_stats(r->llm, &s) != KILN_OK) return;
    r->step_running = s.running;
    if (s.kv_blocks_used > r->peak_kv_blocks) r->peak_kv_blocks = s.kv_blocks_used;
}

static void on_event(const kiln_llm_event *ev) {
    bench_llm_req *q = ev->user;
    bench_llm_run *r = q->run;
    pthread_mutex_lock(&r->mu);
    if (r->peaks && ev->time_ms != r->step) open_step(r, ev->time_ms);
    if (ev->token >= 0 && ++q->n == 1) {
        q->first_ms = ev->time_ms - r->t0;
        if (ev->time_ms != r->prefill_step) r->prefill_ms += ev->step_ms;
        r->prefill_step = ev->time_ms;
    }
    if (ev->finish != KILN_LLM_FINISH_NONE) {
        q->end_ms = ev->time_ms - r->t0;
        q->finish = ev->finish;
        if (ev->finish == KILN_LLM_FINISH_ERROR && r->error == KILN_OK) {
            r->error = KILN_ERR_INVALID_ARGUMENT;
            snprintf(r->message, sizeof r->message, "%s", ev->message ? ev->message : "a request failed");
        }
        r->done++;
        r->step_ended++;
        if (r->submitted < r->n && r->error == KILN_OK && submit(r, r->submitted) != KILN_OK) {
            r->error = KILN_ERR_INVALID_ARGUMENT;
            snprintf(r->message, sizeof r->message, "%s", kiln_last_error());
        }
        pthread_cond_signal(&r->cv);
    }
    pthread_mutex_unlock(&r->mu);
}

kiln_status bench_llm_run_init(bench_llm_run *r, kiln_llm *llm, const kiln_bench_llm_config *bc, int vocab, int cap) {
    memset(r, 0, sizeof *r);
    r->llm = llm;
    r->bc = bc;
    r->vocab = vocab;
    pthread_mutex_init(&r->mu, NULL);
    pthread_cond_init(&r->cv, NULL);
    r->prompt = malloc((size_t)bc->input_len * sizeof *r->prompt);
    r->reqs = calloc((size_t)(cap > 0 ? cap : 1), sizeof *r->reqs);
    return r->prompt && r->reqs ? KILN_OK : kiln_error(KILN_ERR_OUT_OF_MEMORY, "out of memory for %d requests", cap);
}

void bench_llm_run_free(bench_llm_run *r) {
    free(r->prompt);
    free(r->reqs);
    pthread_mutex_destroy(&r->mu);
    pthread_cond_destroy(&r->cv);
}

kiln_status bench_llm_round(bench_llm_run *r, int n, int limit, double *wall_ms) {
    pthread_mutex_lock(&r->mu);
    memset(r->reqs, 0, (size_t)n * sizeof *r->reqs);
    for (int i = 0; i < n; i++) r->reqs[i].run = r;
    r->n = n;
    r->submitted = r->done = 0;
    r->prefill_ms = 0;
    r->prefill_step = r->step = -1;
    r->step_running = r->step_ended = 0;
    r->error = KILN_OK;
    r->t0 = kiln_bench_now_ms();
    kiln_status st = KILN_OK;
    while (st == KILN_OK && r->submitted < n && r->submitted < limit) st = submit(r, r->submitted);
    if (st != KILN_OK) {
        r->error = st;
        snprintf(r->message, sizeof r->message, "%s", kiln_last_error());
    }
    while (r->done < r->submitted) pthread_cond_wait(&r->cv, &r->mu); /* also after a failure: they use reqs */
    if (r->peaks) close_step(r);
    pthread_mutex_unlock(&r->mu);
    if (r->error != KILN_OK) return kiln_error(r->error, "%s", r->message);
    *wall_ms = 0;
    for (int i = 0; i < n; i++) {
        const bench_llm_req *q = &r->reqs[i];
        if (q->n != r->bc->output_len || q->finish != KILN_LLM_FINISH_LENGTH)
            return kiln_error(KILN_ERR_INTERNAL, "request %d ended after %d of %d tokens (%s)", i, q->n,
                              r->bc->output_len, kiln_llm_finish_name(q->finish));
        if (q->end_ms > *wall_ms) *wall_ms = q->end_ms;
    }
    return KILN_OK;
}
