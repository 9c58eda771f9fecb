/* bench_llm.h — kiln bench --llm, the library side (tools/cmd_bench_llm.c is the command line): for each
 * batch size, as trtllm-bench does, `batch` requests of random prompts (seeded) of input_len tokens
 * submitted at once through the public LLM API (kiln/kiln_llm.h), each generating exactly output_len
 * tokens (eos ignored), greedy; after warm-up iterations, `iterations` measured ones. Per request:
 * TTFT (submission to first token), TPOT (mean time per output token after the first), end-to-end
 * latency, from the events' timestamps; per iteration: prefill time (the forward steps that produced
 * first tokens), output and total tokens/s, and the prefix cache's hits (a shared prompt prefix is
 * cached by the warm-up, so that TTFT shows the cached prefill). The forward is the CPU one or, with target "cuda", the
 * GPU's. */
#ifndef KILN_BENCH_LLM_H
#define KILN_BENCH_LLM_H

#include "bench/bench.h"
#include "llm/llm.h"

#include <stdio.h>

#define KILN_BENCH_LLM_MAX_BATCHES 16

typedef struct kiln_bench_llm_config {
    int batches[KILN_BENCH_LLM_MAX_BATCHES];
    int nbatches;
    int input_len, output_len;  /* tokens per request, >= 1 each; their sum <= the model's max_pos */
    int iterations, warmup;     /* measured iterations (>= 1) and unmeasured ones (>= 0) per batch size */
    uint64_t seed;              /* the random prompts */
    const char *target;         /* "cpu" or "cuda" */
    int device;                 /* CUDA device ordinal */
    /* Saturated mode (concurrency > 0; batches, iterations unused), as trtllm-bench's throughput run:
     * `requests` requests, at most `concurrency` in flight (a new one submitted as one ends), through
     * a scheduler of max_num_seqs = concurrency and a step budget of max_num_tokens tokens (at least
     * concurrency), after `warmup` unmeasured warm-up requests. */
    int requests, concurrency, max_num_tokens;
    /* Prefix caching: the first prefix_len (< input_len) tokens of every prompt are one shared random
     * "system prompt" (0: every prompt random throughout), and no_prefix_cache turns the cache off. */
    int prefix_len;
    bool no_prefix_cache;
    const char *timing_cache; /* cuda: kiln_llm_options.timing_cache (NULL: none) */
    const char *spec;         /* kiln_llm_options.spec: NULL (off), "ngram" or "draft" */
    int draft_tokens;         /* kiln_llm_options.draft_tokens */
    const char *kv_cache_dtype, *calib_text; /* kiln_llm_options.kv_cache_dtype, .kv_calib_text */
    const char *draft;        /* kiln_llm_options.draft: the draft model (with --random, a shape), or NULL */
    float temperature;        /* 0: greedy; else every request samples at it (top-k, top-p, min-p off),
                               * request k with seed + k: the sampler's cost in the step */
} kiln_bench_llm_config;

/* Speculative decoding in a run (kiln_llm_stats' spec_ counters, differences over the run). */
typedef struct kiln_bench_llm_spec {
    uint64_t steps, drafted, accepted, emitted;
} kiln_bench_llm_spec;

/* The measurements of a saturated run; times in ms, throughputs in tokens/s. */
typedef struct kiln_bench_llm_sat {
    int64_t requests, input_tokens, output_tokens; /* measured requests only; output exact */
    int concurrency, max_num_tokens;
    uint64_t steps, preemptions;
    uint64_t prefix_queries, prefix_hits; /* prefix cache: prompt tokens looked up, found */
    kiln_bench_llm_spec spec;
    int peak_running;              /* most sequences in one step */
    int peak_kv_blocks, kv_blocks; /* most KV blocks in use at once; blocks in the cache */
    int kv_block_size;
    double wall_s;                 /* first submission to last token */
    double output_tps, total_tps, requests_per_s;
    kiln_bench_stats ttft, tpot, e2e; /* per request, from its submission */
} kiln_bench_llm_sat;

/* The measurements of one batch size; times in ms, throughputs in tokens/s. */
typedef struct kiln_bench_llm_row {
    int batch;
    char error[320];            /* "" = ran */
    int64_t requests, input_tokens, output_tokens; /* measured iterations only; output exact */
    uint64_t steps, preemptions;
    uint64_t prefix_queries, prefix_hits; /* prefix cache: prompt tokens looked up, found */
    kiln_bench_llm_spec spec;
    double wall_s;              /* sum of the measured iterations' durations */
    kiln_bench_stats prefill;   /* per iteration */
    kiln_bench_stats ttft, tpot, e2e; /* per request */
    kiln_bench_stats output_tps, total_tps; /* per iteration */
} kiln_bench_llm_row;

/* Everything a report shows; pointers borrowed. */
typedef struct kiln_bench_llm_doc {
    const char *model_path;     /* what kiln_bench_llm_run opens (a report label when shape is set) */
    bool from_engine;
    kiln_precision weights;     /* the engine's weights precision (a directory: fp32 as loaded) */
    char compute[32];           /* "fp32 (CPU)", "fp32, int8 weights (CPU)", "fp16 (CUDA)" */
    char device[256];           /* what runs the forward (kiln_llm_info.target) */
    int64_t n_params;
    double load_s;              /* kiln_llm_open(_random) */
    kiln_llm_config cfg;
    const kiln_bench_llm_config *bc;
    const kiln_bench_env *env;
    const kiln_bench_ceilings *ceil;
    const char *shape;          /* --random SHAPE: random weights of that shape, no checkpoint; else NULL */
    kiln_bench_llm_row rows[KILN_BENCH_LLM_MAX_BATCHES];
    int nrows;
    bool saturated;             /* bc->concurrency > 0: sat holds the results, not rows */
    kiln_bench_llm_sat sat;
    char started_at[32];
} kiln_bench_llm_doc;

/* Opens d->model_path (or, with d->shape set, random weights of that shape in d->weights' precision,
 * seeded with bc->seed) through kiln_llm_open sized for the workload, fills the model's fields of d
 * (device, n_params, cfg, load_s; from_engine and weights for a path), then runs every batch size of
 * d->bc, filling d->rows (a batch size that fails records its error and the others go on; the call
 * fails only when none ran), or with bc->concurrency > 0 the saturated run into d->sat (errors fail
 * the call). Errors before any run: the open's, lengths beyond the model (KILN_ERR_INVALID_ARGUMENT
 * naming max_pos). */
kiln_status kiln_bench_llm_run(kiln_bench_llm_doc *d);

/* The console report (bench_llm_report.c) and the JSON file (schema in docs/llm.md). */
void kiln_bench_llm_print(const kiln_bench_llm_doc *d, FILE *f);
kiln_status kiln_bench_llm_write_json(const kiln_bench_llm_doc *d, const char *path);

#endif
