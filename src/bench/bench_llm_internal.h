/* bench_llm_internal.h — what the files of kiln bench --llm share: the forward step it drives the
 * scheduler with (bench_llm_forward.c). */
#ifndef KILN_BENCH_LLM_INTERNAL_H
#define KILN_BENCH_LLM_INTERNAL_H

#include "bench/bench_llm.h"
#include "llm/kv_cache.h"

#include <stddef.h>

typedef struct llm_runner llm_runner;

/* The forward for bc->target: the CPU always; cuda through llm_cuda.h (the model uploaded in bf16 when
 * the weights are bf16, else fp16), sized for bc's largest batch and lengths. Errors: "--target cuda is
 * not available: <why>" (KILN_ERR_UNSUPPORTED), or the upload's. desc gets what runs. The caller
 * frees *out (also on failure). */
kiln_status llm_runner_create(const kiln_llm_model *m, const kiln_bench_llm_config *bc, kiln_precision weights,
                              char *desc, size_t cap, llm_runner **out);
void llm_runner_free(llm_runner *r); /* accepts NULL */
/* A KV cache of n_blocks blocks for the scheduler (on the GPU: bookkeeping over a device cache of as
 * many blocks, which replaces the previous one). The caller frees *kv before the runner. */
kiln_status llm_runner_make_cache(llm_runner *r, int n_blocks, int block_size, kiln_kv_cache **kv);
/* kiln_forward_fn over the runner (ctx). */
kiln_status llm_runner_forward(void *ctx, kiln_kv_cache *kv, const kiln_llm_batch *b, float *logits);

#endif
