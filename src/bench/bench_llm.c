/* bench_llm.c — kiln bench --llm's measurement (bench_llm.h): per batch size, a scheduler over a KV
 * cache that holds every request whole (no preemption), a step budget that prefills the whole batch
 * at once, warm-up iterations, then measured ones; every request must end by length with exactly
 * output_len tokens. */
#include "bench/bench_internal.h"
#include "bench/bench_llm.h"
#include "llm/llm_runner.h"

#include "core/status.h"
#include "llm/sampler.h"
#include "llm/scheduler.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BLOCK_SIZE 16

/* The samples of one batch size's measured iterations. */
typedef struct samples {
    double *ttft, *tpot, *e2e; /* [iterations * batch] */
    double *prefill, *out_tps, *total_tps; /* [iterations] */
    size_t nreq, niter;
} samples;

/* Per request of one iteration. */
typedef struct req {
    int n;                     /* tokens generated */
    double first_ms, end_ms;   /* from the submission */
    kiln_finish_reason finish;
} req;

/* Submits `batch` random prompts (prompt stream position *pos) and steps until all are done. */
static kiln_status run_iteration(kiln_scheduler *s, const kiln_bench_llm_config *bc, int vocab, int batch,
                                 uint64_t *pos, int32_t *prompt, req *reqs, double *prefill_ms, double *wall_ms) {
    memset(reqs, 0, (size_t)batch * sizeof *reqs);
    *prefill_ms = 0;
    double t0 = kiln_bench_now_ms();
    for (int i = 0; i < batch; i++) {
        for (int k = 0; k < bc->input_len; k++) {
            int32_t t = (int32_t)(kiln_sample_uniform(bc->seed, (*pos)++) * vocab);
            prompt[k] = t < vocab ? t : vocab - 1;
        }
        kiln_request_params rp = {.prompt = prompt, .n_prompt = bc->input_len, .max_tokens = bc->output_len,
                                  .sampling = kiln_sampling_defaults(), .user = (void *)(intptr_t)i};
        uint64_t id;
        KILN_TRY(kiln_scheduler_add(s, &rp, &id));
    }
    while (kiln_scheduler_has_work(s)) {
        const kiln_sched_event *ev;
        int n;
        double ts = kiln_bench_now_ms();
        kiln_status st = kiln_scheduler_step(s, &ev, &n);
        double te = kiln_bench_now_ms();
        bool first = false;
        for (int i = 0; i < n; i++) {
            if (ev[i].finish == KILN_FINISH_ERROR)
                return kiln_error(st != KILN_OK ? st : KILN_ERR_INVALID_ARGUMENT, "%s", ev[i].message);
            req *r = &reqs[(intptr_t)ev[i].user];
            if (ev[i].sample.token >= 0 && ++r->n == 1) {
                r->first_ms = te - t0;
                first = true;
            }
            if (ev[i].finish != KILN_FINISH_NONE) {
                r->end_ms = te - t0;
                r->finish = ev[i].finish;
            }
        }
        KILN_TRY(st);
        if (first) *prefill_ms += te - ts;
    }
    *wall_ms = 0;
    for (int i = 0; i < batch; i++) {
        if (reqs[i].n != bc->output_len || reqs[i].finish != KILN_FINISH_LENGTH)
            return kiln_error(KILN_ERR_INTERNAL, "request %d ended after %d of %d tokens (%s)", i, reqs[i].n,
                              bc->output_len, kiln_finish_reason_name(reqs[i].finish));
        if (reqs[i].end_ms > *wall_ms) *wall_ms = reqs[i].end_ms;
    }
    return KILN_OK;
}

static kiln_status alloc_samples(samples *sm, size_t nreq, size_t niter) {
    double **req_arrays[] = {&sm->ttft, &sm->tpot, &sm->e2e}, **iter_arrays[] = {&sm->prefill, &sm->out_tps, &sm->total_tps};
    for (int i = 0; i < 3; i++) {
        *req_arrays[i] = calloc(nreq, sizeof(double));
        *iter_arrays[i] = calloc(niter, sizeof(double));
        if (!*req_arrays[i] || !*iter_arrays[i]) return kiln_error(KILN_ERR_OUT_OF_MEMORY, "out of memory");
    }
    return KILN_OK;
}

static void free_samples(samples *sm) {
    free(sm->ttft);
    free(sm->tpot);
    free(sm->e2e);
    free(sm->prefill);
    free(sm->out_tps);
    free(sm->total_tps);
}

/* Records one measured iteration's requests and throughput. */
static void record(samples *sm, const kiln_bench_llm_config *bc, int batch, const req *reqs, double prefill_ms,
                   double wall_ms) {
    for (int i = 0; i < batch; i++) {
        sm->ttft[sm->nreq] = reqs[i].first_ms;
        sm->e2e[sm->nreq] = reqs[i].end_ms;
        sm->tpot[sm->nreq++] = bc->output_len > 1 ? (reqs[i].end_ms - reqs[i].first_ms) / (bc->output_len - 1) : 0;
    }
    sm->prefill[sm->niter] = prefill_ms;
    sm->out_tps[sm->niter] = wall_ms > 0 ? (double)batch * bc->output_len * 1e3 / wall_ms : 0;
    sm->total_tps[sm->niter++] = wall_ms > 0 ? (double)batch * (bc->input_len + bc->output_len) * 1e3 / wall_ms : 0;
}

static kiln_status summarize(const samples *sm, kiln_bench_llm_row *row) {
    KILN_TRY(kiln_bench_stats_of(sm->prefill, sm->niter, &row->prefill));
    KILN_TRY(kiln_bench_stats_of(sm->ttft, sm->nreq, &row->ttft));
    KILN_TRY(kiln_bench_stats_of(sm->tpot, sm->nreq, &row->tpot));
    KILN_TRY(kiln_bench_stats_of(sm->e2e, sm->nreq, &row->e2e));
    KILN_TRY(kiln_bench_stats_of(sm->out_tps, sm->niter, &row->output_tps));
    return kiln_bench_stats_of(sm->total_tps, sm->niter, &row->total_tps);
}

/* One batch size: its cache and scheduler, warm-up, measurement. */
static kiln_status run_batch(llm_runner *rn, const kiln_llm_config *c, const kiln_bench_llm_config *bc, int batch,
                             kiln_bench_llm_row *row) {
    const int per_seq = (bc->input_len + bc->output_len + BLOCK_SIZE - 1) / BLOCK_SIZE;
    kiln_kv_cache *kv = NULL;
    kiln_scheduler *s = NULL;
    int32_t *prompt = malloc((size_t)bc->input_len * sizeof *prompt);
    req *reqs = calloc((size_t)batch, sizeof *reqs);
    samples sm = {0};
    kiln_status st = prompt && reqs ? KILN_OK : kiln_error(KILN_ERR_OUT_OF_MEMORY, "out of memory");
    if (st == KILN_OK) st = alloc_samples(&sm, (size_t)bc->iterations * (size_t)batch, (size_t)bc->iterations);
    if (st == KILN_OK) st = llm_runner_make_cache(rn, batch * per_seq, BLOCK_SIZE, &kv);
    if (st == KILN_OK) {
        kiln_scheduler_config sc = {.forward = llm_runner_forward, .sample = llm_runner_sample_fn(rn),
                                    .model = rn, .kv = kv, .vocab = c->vocab,
                                    .max_model_len = c->max_pos, .max_num_batched_tokens = batch * bc->input_len,
                                    .max_num_seqs = batch};
        st = kiln_scheduler_create(&sc, &s);
    }
    uint64_t pos = 0, steps0 = 0, pre0 = 0;
    for (int it = 0; st == KILN_OK && it < bc->warmup + bc->iterations; it++) {
        if (it == bc->warmup) {
            kiln_scheduler_stats ss = kiln_scheduler_get_stats(s);
            steps0 = ss.steps;
            pre0 = ss.preemptions;
        }
        double prefill_ms = 0, wall_ms = 0;
        st = run_iteration(s, bc, c->vocab, batch, &pos, prompt, reqs, &prefill_ms, &wall_ms);
        if (st == KILN_OK && it >= bc->warmup) {
            record(&sm, bc, batch, reqs, prefill_ms, wall_ms);
            row->wall_s += wall_ms / 1e3;
        }
    }
    if (st == KILN_OK) {
        kiln_scheduler_stats ss = kiln_scheduler_get_stats(s);
        row->steps = ss.steps - steps0;
        row->preemptions = ss.preemptions - pre0;
        row->requests = (int64_t)bc->iterations * batch;
        row->input_tokens = row->requests * bc->input_len;
        row->output_tokens = row->requests * bc->output_len;
        st = summarize(&sm, row);
    }
    kiln_scheduler_free(s);
    kiln_kv_cache_free(kv);
    free(prompt);
    free(reqs);
    free_samples(&sm);
    return st;
}

/* Per request of a saturated run. */
typedef struct sreq {
    int n;
    double submit_ms, first_ms, end_ms; /* from the run's start */
    kiln_finish_reason finish;
} sreq;

/* Submits request i (a random prompt from the stream position *pos). */
static kiln_status submit(kiln_scheduler *s, const kiln_bench_llm_config *bc, int vocab, int i, uint64_t *pos,
                          int32_t *prompt) {
    for (int k = 0; k < bc->input_len; k++) {
        int32_t t = (int32_t)(kiln_sample_uniform(bc->seed, (*pos)++) * vocab);
        prompt[k] = t < vocab ? t : vocab - 1;
    }
    kiln_request_params rp = {.prompt = prompt, .n_prompt = bc->input_len, .max_tokens = bc->output_len,
                              .sampling = kiln_sampling_defaults(), .user = (void *)(intptr_t)i};
    uint64_t id;
    return kiln_scheduler_add(s, &rp, &id);
}

/* n requests with at most bc->concurrency in flight, a new one submitted as soon as one ends; peaks into
 * out when measured. */
static kiln_status run_stream(kiln_scheduler *s, const kiln_bench_llm_config *bc, int vocab, int n, uint64_t *pos,
                              int32_t *prompt, sreq *reqs, double *wall_ms, kiln_bench_llm_sat *out) {
    memset(reqs, 0, (size_t)n * sizeof *reqs);
    int next = 0, inflight = 0;
    const double t0 = kiln_bench_now_ms();
    while (next < n || kiln_scheduler_has_work(s)) {
        for (; next < n && inflight < bc->concurrency; next++, inflight++) {
            reqs[next].submit_ms = kiln_bench_now_ms() - t0;
            KILN_TRY(submit(s, bc, vocab, next, pos, prompt));
        }
        kiln_scheduler_stats before = kiln_scheduler_get_stats(s);
        const kiln_sched_event *ev;
        int nev, ended = 0;
        kiln_status st = kiln_scheduler_step(s, &ev, &nev);
        const double te = kiln_bench_now_ms() - t0;
        for (int i = 0; i < nev; i++) {
            if (ev[i].finish == KILN_FINISH_ERROR)
                return kiln_error(st != KILN_OK ? st : KILN_ERR_INVALID_ARGUMENT, "%s", ev[i].message);
            sreq *r = &reqs[(intptr_t)ev[i].user];
            if (ev[i].sample.token >= 0 && ++r->n == 1) r->first_ms = te;
            if (ev[i].finish != KILN_FINISH_NONE) {
                r->end_ms = te;
                r->finish = ev[i].finish;
                ended++;
                inflight--;
            }
        }
        KILN_TRY(st);
        if (out) {
            kiln_scheduler_stats after = kiln_scheduler_get_stats(s);
            int running = after.running + ended, used = before.kv_blocks_used > after.kv_blocks_used
                                                            ? before.kv_blocks_used : after.kv_blocks_used;
            if (running > out->peak_running) out->peak_running = running;
            if (used > out->peak_kv_blocks) out->peak_kv_blocks = used;
        }
    }
    *wall_ms = 0;
    for (int i = 0; i < n; i++) {
        if (reqs[i].n != bc->output_len || reqs[i].finish != KILN_FINISH_LENGTH)
            return kiln_error(KILN_ERR_INTERNAL, "request %d ended after %d of %d tokens (%s)", i, reqs[i].n,
                              bc->output_len, kiln_finish_reason_name(reqs[i].finish));
        if (reqs[i].end_ms > *wall_ms) *wall_ms = reqs[i].end_ms;
    }
    return KILN_OK;
}

/* The saturated run: a KV cache for `concurrency` whole sequences, warm-up requests, measured ones. */
static kiln_status run_saturated(llm_runner *rn, const kiln_llm_config *c, const kiln_bench_llm_config *bc,
                                 kiln_bench_llm_sat *out) {
    const int per_seq = (bc->input_len + bc->output_len + BLOCK_SIZE - 1) / BLOCK_SIZE;
    const int nmax = bc->requests > bc->warmup ? bc->requests : bc->warmup;
    kiln_kv_cache *kv = NULL;
    kiln_scheduler *s = NULL;
    int32_t *prompt = malloc((size_t)bc->input_len * sizeof *prompt);
    sreq *reqs = calloc((size_t)nmax, sizeof *reqs);
    double *ttft = calloc((size_t)bc->requests, sizeof(double)), *tpot = calloc((size_t)bc->requests, sizeof(double)),
           *e2e = calloc((size_t)bc->requests, sizeof(double));
    kiln_status st = prompt && reqs && ttft && tpot && e2e ? KILN_OK : kiln_error(KILN_ERR_OUT_OF_MEMORY, "out of memory");
    memset(out, 0, sizeof *out);
    out->concurrency = bc->concurrency;
    out->max_num_tokens = bc->max_num_tokens > bc->concurrency ? bc->max_num_tokens : bc->concurrency;
    out->kv_block_size = BLOCK_SIZE;
    if (st == KILN_OK) st = llm_runner_make_cache(rn, bc->concurrency * per_seq, BLOCK_SIZE, &kv);
    if (st == KILN_OK) {
        kiln_scheduler_config sc = {.forward = llm_runner_forward, .sample = llm_runner_sample_fn(rn),
                                    .model = rn, .kv = kv, .vocab = c->vocab,
                                    .max_model_len = c->max_pos, .max_num_batched_tokens = out->max_num_tokens,
                                    .max_num_seqs = bc->concurrency};
        st = kiln_scheduler_create(&sc, &s);
    }
    uint64_t pos = 0;
    double wall_ms = 0;
    if (st == KILN_OK && bc->warmup > 0) st = run_stream(s, bc, c->vocab, bc->warmup, &pos, prompt, reqs, &wall_ms, NULL);
    kiln_scheduler_stats s0 = {0};
    if (st == KILN_OK) {
        s0 = kiln_scheduler_get_stats(s);
        out->kv_blocks = s0.kv_blocks_total;
        st = run_stream(s, bc, c->vocab, bc->requests, &pos, prompt, reqs, &wall_ms, out);
    }
    if (st == KILN_OK) {
        kiln_scheduler_stats s1 = kiln_scheduler_get_stats(s);
        out->steps = s1.steps - s0.steps;
        out->preemptions = s1.preemptions - s0.preemptions;
        out->requests = bc->requests;
        out->input_tokens = out->requests * bc->input_len;
        out->output_tokens = out->requests * bc->output_len;
        out->wall_s = wall_ms / 1e3;
        if (wall_ms > 0) {
            out->output_tps = (double)out->output_tokens * 1e3 / wall_ms;
            out->total_tps = (double)(out->input_tokens + out->output_tokens) * 1e3 / wall_ms;
            out->requests_per_s = (double)out->requests * 1e3 / wall_ms;
        }
        for (int i = 0; i < bc->requests; i++) {
            ttft[i] = reqs[i].first_ms - reqs[i].submit_ms;
            e2e[i] = reqs[i].end_ms - reqs[i].submit_ms;
            tpot[i] = bc->output_len > 1 ? (reqs[i].end_ms - reqs[i].first_ms) / (bc->output_len - 1) : 0;
        }
        st = kiln_bench_stats_of(ttft, (size_t)bc->requests, &out->ttft);
        if (st == KILN_OK) st = kiln_bench_stats_of(tpot, (size_t)bc->requests, &out->tpot);
        if (st == KILN_OK) st = kiln_bench_stats_of(e2e, (size_t)bc->requests, &out->e2e);
    }
    kiln_scheduler_free(s);
    kiln_kv_cache_free(kv);
    free(prompt);
    free(reqs);
    free(ttft);
    free(tpot);
    free(e2e);
    return st;
}

static kiln_status check_lengths(const kiln_llm_config *c, const kiln_bench_llm_config *bc) {
    if ((int64_t)bc->input_len + bc->output_len > c->max_pos)
        return kiln_error(KILN_ERR_INVALID_ARGUMENT, "--input-len %d + --output-len %d exceeds the model's %d positions "
                          "(max_position_embeddings / n_positions)", bc->input_len, bc->output_len, c->max_pos);
    for (int i = 0; bc->concurrency <= 0 && i < bc->nbatches; i++) /* a batch's prompts are prefilled in one step */
        if ((int64_t)bc->batches[i] * bc->input_len > INT32_MAX)
            return kiln_error(KILN_ERR_INVALID_ARGUMENT, "--batch %d x --input-len %d is %lld prompt tokens in one step, more "
                              "than 2^31 - 1", bc->batches[i], bc->input_len, (long long)bc->batches[i] * bc->input_len);
    return KILN_OK;
}

/* The runner's limits for the workload: the largest batch (prefilled in one step) or, saturated, the
 * concurrency and the step budget. */
static llm_runner_options runner_options(const kiln_bench_llm_doc *d) {
    const kiln_bench_llm_config *bc = d->bc;
    int seqs = 1, tokens;
    if (bc->concurrency > 0) {
        seqs = bc->concurrency;
        tokens = bc->max_num_tokens > seqs ? bc->max_num_tokens : seqs;
    } else {
        for (int i = 0; i < bc->nbatches; i++) seqs = bc->batches[i] > seqs ? bc->batches[i] : seqs;
        tokens = seqs * bc->input_len;
    }
    return (llm_runner_options){.target = bc->target, .device = bc->device, .max_seqs = seqs, .max_tokens = tokens,
                                .max_context = bc->input_len + bc->output_len,
                                .bf16 = d->weights == KILN_PRECISION_BF16};
}

/* Every batch size, or the saturated run, on rn. */
static kiln_status run_all(llm_runner *rn, kiln_bench_llm_doc *d) {
    const kiln_llm_config *c = llm_runner_config(rn);
    const kiln_bench_llm_config *bc = d->bc;
    snprintf(d->compute, sizeof d->compute, "%s", strcmp(bc->target, "cuda") ? "fp32 (CPU)"
                                                  : d->weights == KILN_PRECISION_BF16 ? "bf16 (CUDA)" : "fp16 (CUDA)");
    d->nrows = 0;
    d->saturated = bc->concurrency > 0;
    if (d->saturated) return run_saturated(rn, c, bc, &d->sat);
    int ran = 0;
    for (int i = 0; i < bc->nbatches; i++) {
        kiln_bench_llm_row *row = &d->rows[d->nrows++];
        memset(row, 0, sizeof *row);
        row->batch = bc->batches[i];
        if (run_batch(rn, c, bc, row->batch, row) == KILN_OK) ran++;
        else snprintf(row->error, sizeof row->error, "failed: %s", kiln_last_error());
    }
    if (!ran) return kiln_error(KILN_ERR_INVALID_ARGUMENT, "no batch size ran: %s", d->rows[0].error);
    return KILN_OK;
}

kiln_status kiln_bench_llm_run(const kiln_llm_model *m, kiln_bench_llm_doc *d) {
    KILN_TRY(check_lengths(kiln_llm_model_config(m), d->bc));
    llm_runner_options ro = runner_options(d);
    llm_runner *rn = NULL;
    kiln_status st = llm_runner_create(m, &ro, d->device, sizeof d->device, &rn);
    if (st == KILN_OK) st = run_all(rn, d);
    llm_runner_free(rn);
    return st;
}

kiln_status kiln_bench_llm_run_random(const kiln_llm_config *c, uint64_t seed, kiln_bench_llm_doc *d) {
    KILN_TRY(check_lengths(c, d->bc));
    llm_runner_options ro = runner_options(d);
    llm_runner *rn = NULL;
    const double t0 = kiln_bench_now_ms();
    kiln_status st = llm_runner_create_random(c, seed, &ro, d->device, sizeof d->device, &rn);
    d->load_s = (kiln_bench_now_ms() - t0) / 1e3;
    if (st == KILN_OK) st = run_all(rn, d);
    llm_runner_free(rn);
    return st;
}
