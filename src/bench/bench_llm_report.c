/* bench_llm_report.c — kiln bench --llm's console report (per batch size: the workload, prefill,
 * TTFT, TPOT and end-to-end statistics in kiln bench's trtexec-style lines, the throughputs; then a
 * summary table, the decode roofline against the measured memory bandwidth, and the environment) and
 * its JSON file (docs/llm.md). */
#include "bench/bench_internal.h"
#include "bench/bench_llm.h"

#include "core/status.h"
#include "layer_precision.h"

#include <string.h>

/* The bytes one decode step streams at least: every weight once, in the precision the forward reads
 * (an INT8, W8A8 or FP8 engine's matrices, nearly all its weights, at one byte; an INT4 engine's at half
 * a byte plus 8 bytes of scale and zero point per group of 128). */
static double step_bytes(const kiln_bench_llm_doc *d) {
    const bool one_byte = strstr(d->compute, "int8") || strstr(d->compute, "w8a8") || strstr(d->compute, "fp8");
    double per = one_byte ? 1 : strstr(d->compute, "int4") ? 0.5 + 8.0 / 128 : strstr(d->compute, "CPU") ? 4 : 2;
    return (double)d->n_params * per;
}

/* "prefix cache: H of Q prompt tokens cached (P%)", or that it is off. */
static void print_prefix(const kiln_bench_llm_doc *d, uint64_t queries, uint64_t hits, FILE *f) {
    if (d->bc->no_prefix_cache) {
        fprintf(f, "prefix cache: off\n");
        return;
    }
    fprintf(f, "prefix cache: %llu of %llu prompt tokens cached (%.1f%%; shared prefix %d tokens)\n",
            (unsigned long long)hits, (unsigned long long)queries, queries ? 100.0 * (double)hits / (double)queries : 0,
            d->bc->prefix_len);
}

/* "speculation: ngram, K draft tokens: acceptance A (a of d drafts), T tokens per speculating step"
 * ("draft MODEL" for a draft model), nothing when it is off. */
static void print_spec(const kiln_bench_llm_doc *d, const kiln_bench_llm_spec *s, FILE *f) {
    if (!d->bc->spec || !strcmp(d->bc->spec, "off")) return;
    fprintf(f, "speculation: %s%s%s, %d draft tokens: acceptance %.3f (%llu of %llu drafts), %.2f tokens per "
               "speculating step (%llu steps)\n", d->bc->spec, d->bc->draft ? " " : "", d->bc->draft ? d->bc->draft : "",
            d->bc->draft_tokens ? d->bc->draft_tokens : 4,
            s->drafted ? (double)s->accepted / (double)s->drafted : 0.0, (unsigned long long)s->accepted,
            (unsigned long long)s->drafted, s->steps ? (double)s->emitted / (double)s->steps : 0.0,
            (unsigned long long)s->steps);
}

static void spec_json(kiln_json *j, const kiln_bench_llm_spec *s) {
    kiln_json_kv_int(j, "spec_steps", (int64_t)s->steps);
    kiln_json_kv_int(j, "spec_draft_tokens", (int64_t)s->drafted);
    kiln_json_kv_int(j, "spec_accepted_tokens", (int64_t)s->accepted);
    kiln_json_kv_int(j, "spec_emitted_tokens", (int64_t)s->emitted);
}

static void print_row(const kiln_bench_llm_doc *d, const kiln_bench_llm_row *r, FILE *f) {
    fprintf(f, "=== Batch %d ===\n", r->batch);
    if (r->error[0]) {
        fprintf(f, "%s\n", r->error);
        return;
    }
    fprintf(f, "requests: %lld (%d iterations x %d), input tokens %lld, output tokens %lld (exactly %d each), "
               "steps %llu, preemptions %llu, %.3f s\n", (long long)r->requests, d->bc->iterations, r->batch,
            (long long)r->input_tokens, (long long)r->output_tokens, d->bc->output_len, (unsigned long long)r->steps,
            (unsigned long long)r->preemptions, r->wall_s);
    print_prefix(d, r->prefix_queries, r->prefix_hits, f);
    print_spec(d, &r->spec, f);
    kiln_bench_print_stats(f, "Prefill Time (per iteration)", &r->prefill);
    kiln_bench_print_stats(f, "TTFT", &r->ttft);
    kiln_bench_print_stats(f, "TPOT", &r->tpot);
    kiln_bench_print_stats(f, "E2E Latency", &r->e2e);
    fprintf(f, "Output Throughput: mean = %.1f tokens/s (p50 %.1f, min %.1f, max %.1f)\n", r->output_tps.s.mean,
            r->output_tps.s.median, r->output_tps.s.min, r->output_tps.s.max);
    fprintf(f, "Total Throughput: mean = %.1f tokens/s (input + output; p50 %.1f)\n", r->total_tps.s.mean,
            r->total_tps.s.median);
}

static void print_summary(const kiln_bench_llm_doc *d, FILE *f) {
    fprintf(f, "=== Summary (ms; tokens/s) ===\n");
    fprintf(f, "%6s %10s %10s %10s %10s %10s %10s %12s %12s %10s\n", "batch", "prefill", "TTFT p50", "TTFT p99",
            "TPOT p50", "TPOT p99", "E2E p50", "output tok/s", "total tok/s", "GB/s");
    for (int i = 0; i < d->nrows; i++) {
        const kiln_bench_llm_row *r = &d->rows[i];
        if (r->error[0]) {
            fprintf(f, "%6d %s\n", r->batch, r->error);
            continue;
        }
        double gbps = r->tpot.s.median > 0 ? step_bytes(d) / (r->tpot.s.median * 1e-3) / 1e9 : 0;
        fprintf(f, "%6d %10.3f %10.3f %10.3f %10.3f %10.3f %10.3f %12.1f %12.1f %10.2f\n", r->batch, r->prefill.s.median,
                r->ttft.s.median, r->ttft.p99, r->tpot.s.median, r->tpot.p99, r->e2e.s.median, r->output_tps.s.mean,
                r->total_tps.s.mean, gbps);
    }
    char b[32];
    fprintf(f, "=== Roofline ===\n");
    fprintf(f, "a decode step reads every weight once: %s (%s); GB/s above = that / TPOT p50\n",
            kiln_bench_bytes_text(step_bytes(d), b, sizeof b), d->compute);
    if (d->ceil && d->ceil->known)
        fprintf(f, "ceiling of %s (measured %s): %.1f GB/s copy bandwidth\n", d->ceil->device, d->ceil->measured_at,
                d->ceil->mem_gbps);
    else fprintf(f, "ceilings: absent (run `kiln bench --ceilings%s` once)\n", d->env->gpu ? " --target cuda" : "");
}

static void print_saturated(const kiln_bench_llm_doc *d, FILE *f) {
    const kiln_bench_llm_sat *r = &d->sat;
    fprintf(f, "=== Saturated: %lld requests, concurrency %d ===\n", (long long)r->requests, r->concurrency);
    fprintf(f, "requests: %lld, input tokens %lld, output tokens %lld (exactly %d each), steps %llu, preemptions %llu, "
               "%.3f s\n", (long long)r->requests, (long long)r->input_tokens, (long long)r->output_tokens,
            d->bc->output_len, (unsigned long long)r->steps, (unsigned long long)r->preemptions, r->wall_s);
    fprintf(f, "scheduler: max_num_seqs %d, max_num_batched_tokens %d; peak running sequences %d; KV blocks: peak %d "
               "of %d in use (%d tokens each)\n", r->concurrency, r->max_num_tokens, r->peak_running, r->peak_kv_blocks,
            r->kv_blocks, r->kv_block_size);
    print_prefix(d, r->prefix_queries, r->prefix_hits, f);
    print_spec(d, &r->spec, f);
    kiln_bench_print_stats(f, "TTFT", &r->ttft);
    kiln_bench_print_stats(f, "TPOT", &r->tpot);
    kiln_bench_print_stats(f, "E2E Latency", &r->e2e);
    fprintf(f, "Request Throughput: %.3f requests/s\n", r->requests_per_s);
    fprintf(f, "Output Throughput: %.1f tokens/s\n", r->output_tps);
    fprintf(f, "Total Throughput: %.1f tokens/s (input + output)\n", r->total_tps);
}

void kiln_bench_llm_print(const kiln_bench_llm_doc *d, FILE *f) {
    const kiln_llm_config *c = &d->cfg;
    fprintf(f, "=== LLM benchmark ===\n");
    fprintf(f, "model: %s (%s, %s, %d layers, d_model %d, vocab %d; %.2f M parameters, %s weights) loaded in %.3f s\n",
            d->model_path, d->shape ? "random weights" : d->from_engine ? "engine" : "checkpoint", kiln_llm_family_name(c->family),
            c->n_layer, c->d_model, c->vocab, (double)d->n_params / 1e6, kiln_precision_name(d->weights), d->load_s);
    fprintf(f, "forward: %s; compute %s\n", d->device, d->compute);
    char sampling[64] = "greedy";
    if (d->bc->temperature > 0) snprintf(sampling, sizeof sampling, "sampled at temperature %g", d->bc->temperature);
    if (d->saturated)
        fprintf(f, "workload: %d input + %d output tokens per request (eos ignored), random prompts (seed %llu), %s; "
                   "%d requests with at most %d in flight (a new one submitted as one ends), after %d warm-up requests\n",
                d->bc->input_len, d->bc->output_len, (unsigned long long)d->bc->seed, sampling, d->bc->requests,
                d->bc->concurrency, d->bc->warmup);
    else
        fprintf(f, "workload: %d input + %d output tokens per request (eos ignored), random prompts (seed %llu), %s; "
                   "per batch size %d warm-up and %d measured iterations, each submitting the whole batch at once\n",
                d->bc->input_len, d->bc->output_len, (unsigned long long)d->bc->seed, sampling, d->bc->warmup,
                d->bc->iterations);
    fprintf(f, "methods: TTFT = submission to first token; TPOT = (E2E - TTFT) / (output tokens - 1); prefill = the "
               "steps that produced first tokens; percentiles %s; stddev %s\n", KILN_SUMMARY_PERCENTILE_METHOD,
            KILN_SUMMARY_STDDEV_METHOD);
    if (d->saturated) print_saturated(d, f);
    else {
        for (int i = 0; i < d->nrows; i++) print_row(d, &d->rows[i], f);
        print_summary(d, f);
    }
    kiln_bench_print_env(d->env, d->bc->target, f);
}

static void row_json(kiln_json *j, const kiln_bench_llm_row *r) {
    kiln_json_object_begin(j);
    kiln_json_kv_int(j, "batch", r->batch);
    kiln_json_kv_string(j, "error", r->error[0] ? r->error : NULL);
    if (!r->error[0]) {
        kiln_json_kv_int(j, "requests", r->requests);
        kiln_json_kv_int(j, "input_tokens", r->input_tokens);
        kiln_json_kv_int(j, "output_tokens", r->output_tokens);
        kiln_json_kv_int(j, "steps", (int64_t)r->steps);
        kiln_json_kv_int(j, "preemptions", (int64_t)r->preemptions);
        kiln_json_kv_int(j, "prefix_cache_queries", (int64_t)r->prefix_queries);
        kiln_json_kv_int(j, "prefix_cache_hits", (int64_t)r->prefix_hits);
        spec_json(j, &r->spec);
        kiln_json_kv_number(j, "walltime_s", r->wall_s);
        kiln_bench_json_stats(j, "prefill_ms", &r->prefill);
        kiln_bench_json_stats(j, "ttft_ms", &r->ttft);
        kiln_bench_json_stats(j, "tpot_ms", &r->tpot);
        kiln_bench_json_stats(j, "e2e_ms", &r->e2e);
        kiln_bench_json_stats(j, "output_tokens_per_s", &r->output_tps);
        kiln_bench_json_stats(j, "total_tokens_per_s", &r->total_tps);
    }
    kiln_json_object_end(j);
}

static void saturated_json(kiln_json *j, const kiln_bench_llm_sat *r) {
    kiln_json_object_begin(j);
    kiln_json_kv_int(j, "requests", r->requests);
    kiln_json_kv_int(j, "concurrency", r->concurrency);
    kiln_json_kv_int(j, "max_num_batched_tokens", r->max_num_tokens);
    kiln_json_kv_int(j, "input_tokens", r->input_tokens);
    kiln_json_kv_int(j, "output_tokens", r->output_tokens);
    kiln_json_kv_int(j, "steps", (int64_t)r->steps);
    kiln_json_kv_int(j, "preemptions", (int64_t)r->preemptions);
    kiln_json_kv_int(j, "prefix_cache_queries", (int64_t)r->prefix_queries);
    kiln_json_kv_int(j, "prefix_cache_hits", (int64_t)r->prefix_hits);
    spec_json(j, &r->spec);
    kiln_json_kv_int(j, "peak_running", r->peak_running);
    kiln_json_kv_int(j, "kv_blocks_peak", r->peak_kv_blocks);
    kiln_json_kv_int(j, "kv_blocks_total", r->kv_blocks);
    kiln_json_kv_int(j, "kv_block_size", r->kv_block_size);
    kiln_json_kv_number(j, "walltime_s", r->wall_s);
    kiln_json_kv_number(j, "output_tokens_per_s", r->output_tps);
    kiln_json_kv_number(j, "total_tokens_per_s", r->total_tps);
    kiln_json_kv_number(j, "requests_per_s", r->requests_per_s);
    kiln_bench_json_stats(j, "ttft_ms", &r->ttft);
    kiln_bench_json_stats(j, "tpot_ms", &r->tpot);
    kiln_bench_json_stats(j, "e2e_ms", &r->e2e);
    kiln_json_object_end(j);
}

kiln_status kiln_bench_llm_write_json(const kiln_bench_llm_doc *d, const char *path) {
    kiln_strbuf b = {0};
    kiln_json j;
    kiln_json_init(&j, &b, 2);
    kiln_json_object_begin(&j);
    kiln_json_kv_string(&j, "kind", "llm");
    kiln_json_kv_string(&j, "kiln_version", KILN_VERSION_STRING);
    kiln_json_kv_string(&j, "started_at", d->started_at);
    kiln_json_kv_string(&j, "model", d->model_path);
    kiln_json_kv_bool(&j, "engine", d->from_engine);
    kiln_json_kv_string(&j, "random_shape", d->shape);
    kiln_json_kv_string(&j, "mode", d->saturated ? "saturated" : "batch");
    kiln_json_kv_string(&j, "arch", d->cfg.arch == KILN_LLM_GPT2 ? "gpt2" : "llama");
    kiln_json_kv_string(&j, "family", kiln_llm_family_name(d->cfg.family));
    kiln_json_kv_int(&j, "parameters", d->n_params);
    kiln_json_kv_string(&j, "weights_precision", kiln_precision_name(d->weights));
    kiln_json_kv_string(&j, "target", d->bc->target);
    kiln_json_kv_string(&j, "forward", d->device);
    kiln_json_kv_string(&j, "compute", d->compute);
    kiln_json_kv_number(&j, "load_s", d->load_s);
    kiln_json_key(&j, "workload");
    kiln_json_object_begin(&j);
    kiln_json_kv_int(&j, "input_len", d->bc->input_len);
    kiln_json_kv_int(&j, "output_len", d->bc->output_len);
    kiln_json_kv_int(&j, "iterations", d->bc->iterations);
    kiln_json_kv_int(&j, "warmup", d->bc->warmup);
    kiln_json_kv_int(&j, "seed", (int64_t)d->bc->seed);
    kiln_json_kv_int(&j, "prefix_len", d->bc->prefix_len);
    kiln_json_kv_bool(&j, "prefix_cache", !d->bc->no_prefix_cache);
    kiln_json_kv_string(&j, "spec", d->bc->spec && strcmp(d->bc->spec, "off") ? d->bc->spec : NULL);
    kiln_json_kv_int(&j, "draft_tokens", d->bc->draft_tokens);
    kiln_json_kv_string(&j, "kv_cache", d->bc->kv_cache_dtype ? d->bc->kv_cache_dtype : "auto");
    kiln_json_kv_string(&j, "draft", d->bc->draft);
    if (d->saturated) {
        kiln_json_kv_int(&j, "requests", d->bc->requests);
        kiln_json_kv_int(&j, "concurrency", d->bc->concurrency);
    }
    kiln_json_kv_bool(&j, "ignore_eos", true);
    kiln_json_kv_string(&j, "sampling", d->bc->temperature > 0 ? "temperature" : "greedy");
    kiln_json_kv_number(&j, "temperature", d->bc->temperature);
    kiln_json_object_end(&j);
    kiln_json_key(&j, "methods");
    kiln_json_object_begin(&j);
    kiln_json_kv_string(&j, "percentile", KILN_SUMMARY_PERCENTILE_METHOD);
    kiln_json_kv_string(&j, "stddev", KILN_SUMMARY_STDDEV_METHOD);
    kiln_json_kv_string(&j, "tpot", "(e2e - ttft) / (output_len - 1)");
    kiln_json_object_end(&j);
    kiln_json_key(&j, "results");
    kiln_json_array_begin(&j);
    for (int i = 0; i < d->nrows; i++) row_json(&j, &d->rows[i]);
    kiln_json_array_end(&j);
    if (d->saturated) {
        kiln_json_key(&j, "saturated");
        saturated_json(&j, &d->sat);
    }
    kiln_bench_json_environment(&j, d->env);
    kiln_json_object_end(&j);
    kiln_status s = kiln_json_finish(&j);
    if (s == KILN_OK) s = kiln_strbuf_write_file(&b, path);
    kiln_strbuf_free(&b);
    return s;
}
