/* bench_llm.c — kiln bench --llm's measurement (bench_llm.h) through the public LLM API: the model
 * opened once with kiln_llm_open (or _open_random) for the workload (sequences and step budget for the
 * largest batch or the concurrency, contexts of input + output tokens, a KV cache that holds every
 * request whole where memory allows), then per batch size warm-up iterations and measured ones, or
 * the saturated run; every request must end by length with exactly output_len tokens. Times come
 * from the events' timestamps (bench_llm_requests.h). */
#include "bench/bench_internal.h"
#include "bench/bench_llm.h"
#include "bench/bench_llm_requests.h"

#include "core/status.h"
#include "llm/llm_api_internal.h"

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
static void record(samples *sm, const kiln_bench_llm_config *bc, int batch, const bench_llm_req *reqs,
                   double prefill_ms, double wall_ms) {
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

/* One batch size: warm-up, then measured iterations, each submitting the whole batch at once. */
static kiln_bench_llm_spec spec_delta(const kiln_llm_stats *s0, const kiln_llm_stats *s1) {
    return (kiln_bench_llm_spec){.steps = s1->spec_steps - s0->spec_steps,
                                 .drafted = s1->spec_drafted - s0->spec_drafted,
                                 .accepted = s1->spec_accepted - s0->spec_accepted,
                                 .emitted = s1->spec_emitted - s0->spec_emitted};
}

static kiln_status run_batch(bench_llm_run *run, int batch, kiln_bench_llm_row *row) {
    const kiln_bench_llm_config *bc = run->bc;
    samples sm = {0};
    kiln_status st = alloc_samples(&sm, (size_t)bc->iterations * (size_t)batch, (size_t)bc->iterations);
    kiln_llm_stats s0 = {0}, s1;
    for (int it = 0; st == KILN_OK && it < bc->warmup + bc->iterations; it++) {
        if (it == bc->warmup) st = kiln_llm_get_stats(run->llm, &s0);
        double wall_ms = 0;
        if (st == KILN_OK) st = bench_llm_round(run, batch, batch, &wall_ms);
        if (st == KILN_OK && it >= bc->warmup) {
            record(&sm, bc, batch, run->reqs, run->prefill_ms, wall_ms);
            row->wall_s += wall_ms / 1e3;
        }
    }
    if (st == KILN_OK) st = kiln_llm_get_stats(run->llm, &s1);
    if (st == KILN_OK) {
        row->steps = s1.steps - s0.steps;
        row->preemptions = s1.preemptions - s0.preemptions;
        row->prefix_queries = s1.prefix_cache_queries - s0.prefix_cache_queries;
        row->prefix_hits = s1.prefix_cache_hits - s0.prefix_cache_hits;
        row->spec = spec_delta(&s0, &s1);
        row->requests = (int64_t)bc->iterations * batch;
        row->input_tokens = row->requests * bc->input_len;
        row->output_tokens = row->requests * bc->output_len;
        st = summarize(&sm, row);
    }
    free_samples(&sm);
    return st;
}

/* The saturated run: warm-up requests, then the measured ones with at most `concurrency` in flight. */
static kiln_status run_saturated(bench_llm_run *run, kiln_bench_llm_sat *out) {
    const kiln_bench_llm_config *bc = run->bc;
    double *ttft = calloc((size_t)bc->requests, sizeof(double)), *tpot = calloc((size_t)bc->requests, sizeof(double)),
           *e2e = calloc((size_t)bc->requests, sizeof(double));
    kiln_status st = ttft && tpot && e2e ? KILN_OK : kiln_error(KILN_ERR_OUT_OF_MEMORY, "out of memory");
    memset(out, 0, sizeof *out);
    out->concurrency = bc->concurrency;
    out->max_num_tokens = bc->max_num_tokens > bc->concurrency ? bc->max_num_tokens : bc->concurrency;
    double wall_ms = 0;
    if (st == KILN_OK && bc->warmup > 0) st = bench_llm_round(run, bc->warmup, bc->concurrency, &wall_ms);
    kiln_llm_stats s0 = {0}, s1;
    if (st == KILN_OK) st = kiln_llm_get_stats(run->llm, &s0);
    if (st == KILN_OK) {
        run->peaks = true;
        st = bench_llm_round(run, bc->requests, bc->concurrency, &wall_ms);
        run->peaks = false;
    }
    if (st == KILN_OK) st = kiln_llm_get_stats(run->llm, &s1);
    if (st == KILN_OK) {
        out->kv_blocks = s1.kv_blocks_total;
        out->kv_block_size = BLOCK_SIZE;
        out->peak_running = run->peak_running;
        out->peak_kv_blocks = run->peak_kv_blocks;
        out->steps = s1.steps - s0.steps;
        out->preemptions = s1.preemptions - s0.preemptions;
        out->prefix_queries = s1.prefix_cache_queries - s0.prefix_cache_queries;
        out->prefix_hits = s1.prefix_cache_hits - s0.prefix_cache_hits;
        out->spec = spec_delta(&s0, &s1);
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
            const bench_llm_req *q = &run->reqs[i];
            ttft[i] = q->first_ms - q->submit_ms;
            e2e[i] = q->end_ms - q->submit_ms;
            tpot[i] = bc->output_len > 1 ? (q->end_ms - q->first_ms) / (bc->output_len - 1) : 0;
        }
        st = kiln_bench_stats_of(ttft, (size_t)bc->requests, &out->ttft);
        if (st == KILN_OK) st = kiln_bench_stats_of(tpot, (size_t)bc->requests, &out->tpot);
        if (st == KILN_OK) st = kiln_bench_stats_of(e2e, (size_t)bc->requests, &out->e2e);
    }
    free(ttft);
    free(tpot);
    free(e2e);
    return st;
}

/* A batch's prompts are prefilled in one step: batch x input length must fit an int. */
static kiln_status check_step_tokens(const kiln_bench_llm_config *bc) {
    for (int i = 0; bc->concurrency <= 0 && i < bc->nbatches; i++)
        if ((int64_t)bc->batches[i] * bc->input_len > INT32_MAX)
            return kiln_error(KILN_ERR_INVALID_ARGUMENT, "--batch %d x --input-len %d is %lld prompt tokens in one step, more "
                              "than 2^31 - 1", bc->batches[i], bc->input_len, (long long)bc->batches[i] * bc->input_len);
    return KILN_OK;
}

/* The instance's limits for the workload: the largest batch (prefilled in one step) or, saturated, the
 * concurrency and the step budget; contexts of input + output tokens. The CPU cache holds them all
 * exactly; on CUDA the default (the same, at most 90% of the free memory: the scheduler then preempts). */
static kiln_llm_options options_for(const kiln_bench_llm_doc *d) {
    const kiln_bench_llm_config *bc = d->bc;
    int seqs = 1, tokens;
    if (bc->concurrency > 0) {
        seqs = bc->concurrency;
        tokens = bc->max_num_tokens > seqs ? bc->max_num_tokens : seqs;
    } else {
        for (int i = 0; i < bc->nbatches; i++) seqs = bc->batches[i] > seqs ? bc->batches[i] : seqs;
        tokens = seqs * bc->input_len;
    }
    kiln_llm_options o = {.target = bc->target, .device = bc->device, .block_size = BLOCK_SIZE, .max_seqs = seqs,
                          .max_batched_tokens = tokens, .max_context = bc->input_len + bc->output_len,
                          .no_prefix_cache = bc->no_prefix_cache, .timing_cache = bc->timing_cache,
                          .spec = bc->spec, .draft_tokens = bc->draft_tokens, .draft = bc->draft,
                          .kv_cache_dtype = bc->kv_cache_dtype, .kv_calib_text = bc->calib_text};
    if (strcmp(bc->target, "cuda")) o.kv_cache_blocks = seqs * ((bc->input_len + bc->output_len + BLOCK_SIZE - 1) / BLOCK_SIZE);
    return o;
}

/* Every batch size, or the saturated run, on llm. */
static kiln_status run_all(kiln_llm *llm, kiln_bench_llm_doc *d) {
    const kiln_bench_llm_config *bc = d->bc;
    if ((int64_t)bc->input_len + bc->output_len > d->cfg.max_pos)
        return kiln_error(KILN_ERR_INVALID_ARGUMENT, "--input-len %d + --output-len %d exceeds the model's %d positions "
                          "(max_position_embeddings / n_positions)", bc->input_len, bc->output_len, d->cfg.max_pos);
    snprintf(d->compute, sizeof d->compute, "%s",
             strcmp(bc->target, "cuda") ? (d->weights == KILN_PRECISION_INT8   ? "fp32, int8 weights (CPU)"
                                           : d->weights == KILN_PRECISION_W8A8 ? "fp32, w8a8 products (CPU)"
                                           : d->weights == KILN_PRECISION_INT4 ? "fp32, int4 weights (CPU)"
                                           : d->weights == KILN_PRECISION_FP8  ? "fp32, fp8 matrices (CPU)"
                                                                               : "fp32 (CPU)")
             : d->weights == KILN_PRECISION_BF16 ? "bf16 (CUDA)"
             : d->weights == KILN_PRECISION_INT8 ? "fp16/bf16, int8 weights (CUDA)"
             : d->weights == KILN_PRECISION_W8A8 ? "fp16/bf16, w8a8 (CUDA)"
             : d->weights == KILN_PRECISION_INT4 ? "fp16/bf16, int4 weights (CUDA)"
             : d->weights == KILN_PRECISION_FP8  ? "fp16/bf16, fp8 (CUDA)" : "fp16 (CUDA)");
    d->nrows = 0;
    d->saturated = bc->concurrency > 0;
    int cap = bc->requests > bc->warmup ? bc->requests : bc->warmup;
    for (int i = 0; !d->saturated && i < bc->nbatches; i++) cap = bc->batches[i] > cap ? bc->batches[i] : cap;
    bench_llm_run run;
    kiln_status st = bench_llm_run_init(&run, llm, bc, d->cfg.vocab, cap);
    if (st == KILN_OK && d->saturated) st = run_saturated(&run, &d->sat);
    int ran = 0;
    for (int i = 0; st == KILN_OK && !d->saturated && i < bc->nbatches; i++) {
        kiln_bench_llm_row *row = &d->rows[d->nrows++];
        memset(row, 0, sizeof *row);
        row->batch = bc->batches[i];
        if (run_batch(&run, row->batch, row) == KILN_OK) ran++;
        else snprintf(row->error, sizeof row->error, "failed: %s", kiln_last_error());
    }
    bench_llm_run_free(&run);
    if (st == KILN_OK && !d->saturated && !ran)
        return kiln_error(KILN_ERR_INVALID_ARGUMENT, "no batch size ran: %s", d->rows[0].error);
    return st;
}

kiln_status kiln_bench_llm_run(kiln_bench_llm_doc *d) {
    KILN_TRY(check_step_tokens(d->bc));
    const kiln_llm_options o = options_for(d);
    kiln_llm *llm = NULL;
    const double t0 = kiln_bench_now_ms();
    KILN_TRY(d->shape ? kiln_llm_open_random(d->shape, d->weights, d->bc->seed, &o, &llm)
                      : kiln_llm_open(d->model_path, &o, &llm));
    d->load_s = (kiln_bench_now_ms() - t0) / 1e3;
    kiln_llm_info info;
    kiln_llm_get_info(llm, &info);
    snprintf(d->device, sizeof d->device, "%s", info.target);
    d->n_params = info.n_params;
    d->cfg = *llm_model_config(llm);
    if (!d->shape) {
        d->from_engine = llm_model_bundle(llm)->from_engine;
        d->weights = llm_model_bundle(llm)->weights;
    }
    kiln_status st = run_all(llm, d);
    kiln_llm_close(llm);
    return st;
}
