/* llm_runner.h — the forward step that the scheduler (scheduler.h) is driven with, on the CPU or on
 * CUDA, behind one kiln_forward_fn (and, on CUDA, the GPU sampler behind one kiln_sample_fn):
 * kiln_llm_open (kiln/kiln_llm.h) chooses it with kiln_llm_options.target. */
#ifndef KILN_LLM_RUNNER_H
#define KILN_LLM_RUNNER_H

#include "llm/kv_cache.h"
#include "llm/llm.h"
#include "llm/scheduler.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct llm_runner llm_runner;

typedef struct llm_runner_options {
    const char *target; /* "cpu" or "cuda" */
    int device;         /* cuda device ordinal */
    int max_seqs;       /* cuda: most sequences in one step */
    int max_tokens;     /* cuda: most tokens in one step */
    int max_context;    /* cuda: longest context (prompt + generated) */
    bool bf16;          /* cuda: weights and KV cache in bf16 (else fp16) */
    bool host_sampler;  /* cuda: sample on the host (also when the environment has KILN_LLM_HOST_SAMPLER=1) */
    const char *timing_cache; /* cuda: kiln_llm_cuda_options.timing_cache (NULL: none) */
    bool kv_fp8;              /* an FP8 (E4M3) KV cache, quantized on write with kv_scales */
    const float *kv_scales;   /* kv_fp8: [n_layer][2][n_kv_head] (llm_kv_fp8.h), copied; NULL: all 1.0 */
    bool random_int8;   /* cuda, random weights: weight-only INT8 matrices (kiln_llm_cuda_options.random_int8) */
    int draft_tokens;   /* cuda: drafts a speculating sequence verifies per step; the GPU sampler takes a row
                           per verified token, max_seqs * (1 + draft_tokens) rows (at most max_tokens) */
    bool random_w8a8;   /* cuda, random weights: W8A8 layer matrices (kiln_llm_cuda_options.random_w8a8) */
    bool random_int4;   /* cuda, random weights: weight-only INT4 matrices (kiln_llm_cuda_options.random_int4) */
    bool random_fp8;    /* cuda, random weights: FP8 matrices (kiln_llm_cuda_options.random_fp8) */
} llm_runner_options;

/* The forward for ro->target: the CPU always; cuda through llm_cuda.h (the model uploaded in bf16 or
 * fp16), sized by ro's limits. Errors: "--target cuda is not available: <why>"
 * (KILN_ERR_UNSUPPORTED), or the upload's. desc gets what runs. The caller frees *out (also on
 * failure). */
kiln_status llm_runner_create(const kiln_llm_model *m, const llm_runner_options *ro, char *desc, size_t cap,
                              llm_runner **out);
/* The forward of a model of config c with random weights from seed (llm_random.h's scales), made for
 * ro->target without a checkpoint: cuda creates the weights on the GPU (kiln_llm_cuda_create_random,
 * in bf16 or fp16; no host copy, so shapes as large as the GPU holds), cpu builds host fp32 weights
 * (kiln_llm_model_random, 4 bytes per parameter: the caller refuses shapes too large for the host).
 * The runner owns what it made. Errors as llm_runner_create, or the config's. The caller frees *out
 * (also on failure). */
kiln_status llm_runner_create_random(const kiln_llm_config *c, uint64_t seed, const llm_runner_options *ro,
                                     char *desc, size_t cap, llm_runner **out);
void llm_runner_free(llm_runner *r); /* accepts NULL */
/* The model's config (borrowed; valid while r lives). */
const kiln_llm_config *llm_runner_config(const llm_runner *r);
/* The bytes one KV-cache block of block_size tokens takes where the runner keeps it (fp32 on the host,
 * 16-bit on the GPU, one byte with kv_fp8). */
uint64_t llm_runner_block_bytes(const llm_runner *r, int block_size);
/* A KV cache of n_blocks blocks for the scheduler. On the GPU it is bookkeeping over a device cache
 * that replaces the previous one: with `exact`, of exactly n_blocks blocks (KILN_ERR_OUT_OF_MEMORY
 * naming the sizes when the device's free memory does not hold them); else of n_blocks blocks when
 * 90% of the device's free memory holds them, else of as many as it holds (the scheduler then
 * preempts). The caller frees *kv before the runner. */
kiln_status llm_runner_make_cache(llm_runner *r, int n_blocks, int block_size, bool exact, kiln_kv_cache **kv);
/* kiln_forward_fn over the runner (ctx). On CUDA, logits == NULL only enqueues the step (its logits
 * stay on the device for llm_runner_sample). */
kiln_status llm_runner_forward(void *ctx, kiln_kv_cache *kv, const kiln_llm_batch *b, float *logits);
/* The scheduler's kiln_scheduler_config.sample for r: llm_runner_sample on CUDA, NULL (the logits come
 * to the host and the scheduler samples there) on the CPU or with llm_runner_options.host_sampler (or
 * the environment's KILN_LLM_HOST_SAMPLER=1, read when r was created: a test override). */
kiln_sample_fn llm_runner_sample_fn(const llm_runner *r);
/* The early-exit draft of self-speculation: the runner's first n_layers layers, then its final norm
 * and lm_head, writing those layers' keys and values in the runner's own cache. */
typedef struct llm_runner_exit {
    llm_runner *runner;
    int n_layers;
} llm_runner_exit;
/* kiln_forward_fn of an early-exit draft (ctx: an llm_runner_exit): llm_runner_forward of b with
 * exit_layers = n_layers. */
kiln_status llm_runner_forward_exit(void *ctx, kiln_kv_cache *kv, const kiln_llm_batch *b, float *logits);
/* kiln_sample_fn of an early-exit draft (ctx: an llm_runner_exit): llm_runner_sample of its runner. */
kiln_status llm_runner_sample_exit(void *ctx, int n_rows, const kiln_sched_sample_row *rows, float *host_logits,
                                   int32_t *tokens);
/* kiln_sample_fn over the runner (ctx) after llm_runner_forward(logits NULL): llm_cuda.h's GPU sampler
 * on the step's device logits, one kernel launch for rows 0 .. the last one asked (rows not asked are
 * sampled greedily and ignored), and only the tokens come back. Rows asking for logprobs or
 * logits_only are handed back (their logits copied to host_logits). When the GPU sampler refuses the call (a NaN or +inf logit, more
 * history than it holds) every row is handed back, so that the host sampler's per-request errors and
 * tokens are the outcome. Fails only when the step's logits cannot be read (a CUDA error). */
kiln_status llm_runner_sample(void *ctx, int n_rows, const kiln_sched_sample_row *rows, float *host_logits,
                              int32_t *tokens);

#endif
