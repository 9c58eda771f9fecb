/* llm_runner.c — the forward step that kiln generate and kiln bench --llm drive the scheduler with: the
 * CPU one (kiln_llm_forward over a host KV cache) or llm_cuda.h's (a device KV cache). The scheduler hands out
 * blocks of a host kiln_kv_cache; on the GPU that cache is bookkeeping only (one float per token
 * slot) and its block ids index the device cache directly: the runner takes every device block once,
 * when the cache is made, so the host cache's allocator (with its prefix cache) is the only one and
 * a step's block tables go to the device as they are. On CUDA the scheduler
 * also samples on the GPU (llm_runner_sample over llm_cuda.h's sampler) unless the options ask for the
 * host sampler (or the environment has KILN_LLM_HOST_SAMPLER=1): then every step's logits come to the
 * host as on the CPU. */
#include "llm/llm_runner.h"

#include "core/status.h"
#include "llm/llm_cuda.h"
#include "llm/llm_internal.h"
#include "llm/llm_kv_fp8.h"
#include "llm/llm_random.h"

#include <stdlib.h>
#include <string.h>

struct llm_runner {
    const kiln_llm_model *m; /* target cpu */
    kiln_llm_model *owned;   /* the random host model (llm_runner_create_random on the CPU) */
    kiln_llm_config cfg;
    kiln_llm_cuda *g;       /* target cuda */
    kiln_llm_cuda_kv *gkv;  /* every block taken by the runner: the host cache's ids index it */
    kiln_dtype dtype;
    kiln_llm_cuda_sampler *sampler; /* target cuda, unless sampling on the host */
    kiln_llm_cuda_sample_row *srows; /* [max_rows] one sampler call's rows */
    int32_t *stokens;                /* [max_rows] its tokens */
    int max_rows;
    kiln_sampling_params idle_params; /* greedy: the parameters of a step's rows that need no token */
    bool kv_fp8;                      /* the CPU cache holds FP8 (E4M3) keys and values */
    float *kv_scales;                 /* kv_fp8: their scales, [n_layer][2][n_kv_head]; NULL: 1.0 */
};

/* The FP8 KV-cache choice of ro into r: its scales copied, desc told. */
static kiln_status take_kv_choice(llm_runner *r, const llm_runner_options *ro, char *desc, size_t cap) {
    if (!ro->kv_fp8) return KILN_OK;
    r->kv_fp8 = true;
    if (ro->kv_scales) {
        const size_t n = KILN_LLM_KV_SCALES(&r->cfg);
        r->kv_scales = malloc(n * sizeof *r->kv_scales);
        if (!r->kv_scales) return kiln_error(KILN_ERR_OUT_OF_MEMORY, "out of memory");
        memcpy(r->kv_scales, ro->kv_scales, n * sizeof *r->kv_scales);
    }
    const size_t len = strlen(desc);
    snprintf(desc + len, cap - len, "; FP8 (E4M3) KV cache, %s scales", ro->kv_scales ? "calibrated" : "unit");
    return KILN_OK;
}

#define MAX_HISTORY (1 << 22) /* most distinct history tokens of one GPU sampler call (32 MiB) */

/* The GPU sampler for o's limits and a row per token a speculating sequence verifies (draft_tokens + 1),
 * unless host_sampler or the environment has KILN_LLM_HOST_SAMPLER=1. desc gets which. */
static kiln_status make_sampler(llm_runner *r, const kiln_llm_cuda_options *o, int draft_tokens, bool host_sampler,
                                char *desc, size_t cap) {
    const char *env = getenv("KILN_LLM_HOST_SAMPLER");
    size_t len = strlen(desc);
    if (host_sampler || (env && !strcmp(env, "1"))) {
        snprintf(desc + len, cap - len, "; sampling on the host%s", host_sampler ? "" : " (KILN_LLM_HOST_SAMPLER=1)");
        return KILN_OK;
    }
    int per_row = o->max_context < r->cfg.vocab ? o->max_context : r->cfg.vocab;
    const int64_t rows = (int64_t)o->max_seqs * (1 + draft_tokens);
    r->max_rows = rows < o->max_tokens || !draft_tokens ? (int)rows : o->max_tokens;
    int64_t hist = (int64_t)r->max_rows * (per_row > 0 ? per_row : 1);
    r->idle_params = kiln_sampling_defaults();
    r->srows = malloc((size_t)r->max_rows * sizeof *r->srows);
    r->stokens = malloc((size_t)r->max_rows * sizeof *r->stokens);
    if (!r->srows || !r->stokens) return kiln_error(KILN_ERR_OUT_OF_MEMORY, "out of memory");
    KILN_TRY(kiln_llm_cuda_sampler_create(o->device, r->cfg.vocab, r->max_rows,
                                          (int)(hist < MAX_HISTORY ? hist : MAX_HISTORY), &r->sampler));
    snprintf(desc + len, cap - len, "; sampling on the GPU");
    return KILN_OK;
}

/* The device check and the options of ro; 0 when ro->target is not cuda. */
static kiln_status cuda_options(const llm_runner_options *ro, kiln_llm_cuda_options *o, char *dev, size_t cap) {
    if (kiln_llm_cuda_device_check(ro->device, dev, cap) != KILN_OK)
        return kiln_error(KILN_ERR_UNSUPPORTED, "--target cuda is not available: %s", dev);
    kiln_llm_cuda_options_default(o);
    o->device = ro->device;
    o->max_seqs = ro->max_seqs;
    o->max_tokens = ro->max_tokens;
    o->max_context = ro->max_context;
    o->timing_cache = ro->timing_cache;
    return KILN_OK;
}

/* How m's quantized matrices are stored, for the runner's description ("" when it has none); cpu: the
 * CPU forward's words for W8A8 ones. */
static const char *quantized_desc(const kiln_llm_model *m, bool cpu) {
    const kiln_llm_q8 *q = m->q8 && m->cfg.n_layer > 0 ? &m->q8[0].qkv : &m->q8_tok_emb;
    if (!q->q) return m->q8 ? ", weight-only INT8 matrices" : "";
    if (q->fp8) return ", FP8 E4M3 matrices and activations";
    if (q->zero) return ", weight-only INT4 matrices";
    if (q->act_scale > 0) return cpu ? ", W8A8 layer matrices: int8 x int8 products" : ", W8A8 layer matrices";
    return ", weight-only INT8 matrices";
}

kiln_status llm_runner_create(const kiln_llm_model *m, const llm_runner_options *ro, char *desc, size_t cap,
                              llm_runner **out) {
    llm_runner *r = calloc(1, sizeof *r);
    if (!r) return kiln_error(KILN_ERR_OUT_OF_MEMORY, "out of memory");
    r->m = m;
    r->cfg = *kiln_llm_model_config(m);
    *out = r;
    if (strcmp(ro->target, "cuda")) {
        if (*quantized_desc(m, true)) snprintf(desc, cap, "CPU forward (fp32%s)", quantized_desc(m, true));
        else snprintf(desc, cap, "CPU forward (fp32, OpenBLAS)");
        return take_kv_choice(r, ro, desc, cap);
    }
    KILN_TRY(take_kv_choice(r, ro, desc, cap));
    char dev[192];
    kiln_llm_cuda_options o;
    KILN_TRY(cuda_options(ro, &o, dev, sizeof dev));
    r->dtype = ro->bf16 ? KILN_BF16 : KILN_F16;
    KILN_TRY(kiln_llm_cuda_create(m, r->dtype, &o, &r->g));
    snprintf(desc, cap, "CUDA forward (%s%s): %s; %s", r->dtype == KILN_BF16 ? "bf16" : "fp16",
             quantized_desc(m, false), dev, kiln_llm_cuda_decode_path(r->g));
    return make_sampler(r, &o, ro->draft_tokens, ro->host_sampler, desc, cap);
}

kiln_status llm_runner_create_random(const kiln_llm_config *c, uint64_t seed, const llm_runner_options *ro,
                                     char *desc, size_t cap, llm_runner **out) {
    llm_runner *r = calloc(1, sizeof *r);
    if (!r) return kiln_error(KILN_ERR_OUT_OF_MEMORY, "out of memory");
    r->cfg = *c;
    *out = r;
    if (strcmp(ro->target, "cuda")) {
        if (ro->random_int8 || ro->random_w8a8 || ro->random_int4 || ro->random_fp8)
            return kiln_error(KILN_ERR_UNSUPPORTED, "random %s weights are made on cuda only: on the CPU, build an "
                              "engine with --weights %s from a checkpoint",
                              ro->random_w8a8  ? "W8A8"
                              : ro->random_int4 ? "weight-only INT4"
                              : ro->random_fp8  ? "FP8"
                                                : "weight-only INT8",
                              ro->random_w8a8 ? "w8a8" : ro->random_int4 ? "int4" : ro->random_fp8 ? "fp8" : "int8");
        KILN_TRY(kiln_llm_model_random(c, seed, &r->owned));
        r->m = r->owned;
        snprintf(desc, cap, "CPU forward (fp32, OpenBLAS), random weights");
        return take_kv_choice(r, ro, desc, cap);
    }
    KILN_TRY(take_kv_choice(r, ro, desc, cap));
    char dev[192];
    kiln_llm_cuda_options o;
    KILN_TRY(cuda_options(ro, &o, dev, sizeof dev));
    r->dtype = ro->bf16 ? KILN_BF16 : KILN_F16;
    o.random_int8 = ro->random_int8;
    o.random_w8a8 = ro->random_w8a8;
    o.random_int4 = ro->random_int4;
    o.random_fp8 = ro->random_fp8;
    KILN_TRY(kiln_llm_cuda_create_random(c, r->dtype, &o, seed, &r->g));
    snprintf(desc, cap, "CUDA forward (%s), random %sweights made on the device: %s; %s",
             r->dtype == KILN_BF16 ? "bf16" : "fp16",
             ro->random_w8a8   ? "W8A8 "
             : ro->random_int8 ? "weight-only INT8 "
             : ro->random_int4 ? "weight-only INT4 "
             : ro->random_fp8  ? "FP8 E4M3 (dynamic activation scales) "
                               : "",
             dev, kiln_llm_cuda_decode_path(r->g));
    return make_sampler(r, &o, ro->draft_tokens, ro->host_sampler, desc, cap);
}

const kiln_llm_config *llm_runner_config(const llm_runner *r) { return &r->cfg; }

void llm_runner_free(llm_runner *r) {
    if (!r) return;
    kiln_llm_cuda_sampler_free(r->sampler);
    kiln_llm_cuda_kv_free(r->gkv);
    kiln_llm_cuda_free(r->g);
    kiln_llm_model_free(r->owned);
    free(r->kv_scales);
    free(r->srows);
    free(r->stokens);
    free(r);
}

uint64_t llm_runner_block_bytes(const llm_runner *r, int block_size) {
    const kiln_llm_config *c = &r->cfg;
    const uint64_t elem = r->kv_fp8 ? 1 : r->g ? 2 : sizeof(float);
    return 2ull * (uint64_t)c->n_layer * (uint64_t)c->n_kv_head * (uint64_t)block_size * (uint64_t)c->head_dim * elem;
}

kiln_status llm_runner_make_cache(llm_runner *r, int n_blocks, int block_size, bool exact, kiln_kv_cache **kv) {
    const kiln_llm_config *c = &r->cfg;
    kiln_kv_cache_config kc = {.n_layer = c->n_layer, .n_kv_head = c->n_kv_head, .head_dim = c->head_dim,
                               .block_size = block_size, .n_blocks = n_blocks,
                               .dtype = r->kv_fp8 ? KILN_F8E4M3FN : KILN_F32, .scales = r->kv_scales};
    if (!r->g) return kiln_kv_cache_create(&kc, kv);
    kiln_llm_cuda_kv_free(r->gkv);
    r->gkv = NULL;
    const uint64_t block_bytes = llm_runner_block_bytes(r, block_size);
    kiln_llm_cuda_kv_options ko = {.block_size = block_size, .mem_fraction = exact ? 1.0 : 0.9,
                                   .max_bytes = block_bytes * (uint64_t)(exact ? n_blocks : n_blocks + 1),
                                   .fp8 = r->kv_fp8, .fp8_scales = r->kv_scales};
    KILN_TRY(kiln_llm_cuda_kv_create(r->g, &ko, &r->gkv));
    if (exact && kiln_llm_cuda_kv_blocks(r->gkv) < n_blocks)
        return kiln_error(KILN_ERR_OUT_OF_MEMORY, "the KV-cache budget of %d blocks (%llu bytes) does not fit in the "
                          "device's free memory (%d blocks do)", n_blocks,
                          (unsigned long long)(block_bytes * (uint64_t)n_blocks), kiln_llm_cuda_kv_blocks(r->gkv));
    /* the host cache's ids (at most the device's blocks) index the device cache: every block is ours */
    kc = (kiln_kv_cache_config){.n_layer = 1, .n_kv_head = 1, .head_dim = 1, .block_size = block_size,
                                .n_blocks = exact ? n_blocks : kiln_llm_cuda_kv_blocks(r->gkv), .dtype = KILN_F32};
    while (kiln_llm_cuda_kv_alloc_block(r->gkv) >= 0) {
    }
    return kiln_kv_cache_create(&kc, kv);
}

kiln_status llm_runner_forward(void *ctx, kiln_kv_cache *kv, const kiln_llm_batch *b, float *logits) {
    llm_runner *r = ctx;
    if (!r->g && !logits) return kiln_error(KILN_ERR_INTERNAL, "llm_runner_forward: the CPU forward needs a logits buffer");
    if (!r->g) return kiln_llm_forward(r->m, kv, b, logits);
    return kiln_llm_cuda_forward(r->g, r->gkv, b, logits, NULL); /* the host cache's ids are the device's */
}

kiln_status llm_runner_forward_exit(void *ctx, kiln_kv_cache *kv, const kiln_llm_batch *b, float *logits) {
    const llm_runner_exit *e = ctx;
    kiln_llm_batch head = *b;
    head.exit_layers = e->n_layers;
    return llm_runner_forward(e->runner, kv, &head, logits);
}

kiln_status llm_runner_sample_exit(void *ctx, int n_rows, const kiln_sched_sample_row *rows, float *host_logits,
                                   int32_t *tokens) {
    return llm_runner_sample(((const llm_runner_exit *)ctx)->runner, n_rows, rows, host_logits, tokens);
}

kiln_sample_fn llm_runner_sample_fn(const llm_runner *r) { return r->sampler ? llm_runner_sample : NULL; }

kiln_status llm_runner_sample(void *ctx, int n_rows, const kiln_sched_sample_row *rows, float *host_logits,
                              int32_t *tokens) {
    llm_runner *r = ctx;
    if (!r->sampler) return kiln_error(KILN_ERR_INTERNAL, "llm_runner_sample: the runner has no GPU sampler");
    const int n = rows[n_rows - 1].row + 1; /* the step's logits rows 0 .. the last one asked */
    int on_device = 0;
    kiln_status st = n <= r->max_rows ? KILN_OK : KILN_ERR_INVALID_ARGUMENT;
    for (int k = 0; st == KILN_OK && k < n; k++) r->srows[k] = (kiln_llm_cuda_sample_row){.params = &r->idle_params};
    for (int i = 0; st == KILN_OK && i < n_rows; i++) {
        const kiln_sched_sample_row *q = &rows[i];
        if (q->params->logprobs || q->logits_only) continue; /* the GPU sampler gives no log-probabilities */
        r->srows[q->row] = (kiln_llm_cuda_sample_row){.params = q->params, .prompt = q->prompt, .generated = q->generated,
                                                      .n_prompt = q->n_prompt, .n_generated = q->n_generated};
        on_device++;
    }
    if (st == KILN_OK && on_device) st = kiln_llm_cuda_sample(r->sampler, r->g, NULL, n, r->srows, r->stokens);
    int back = 0; /* rows handed back: the scheduler samples them on the host */
    for (int i = 0; i < n_rows; i++) {
        const bool dev = st == KILN_OK && !rows[i].params->logprobs && !rows[i].logits_only;
        tokens[i] = dev ? r->stokens[rows[i].row] : -1;
        back += !dev;
    }
    const size_t vocab = (size_t)r->cfg.vocab;
    if (back == n_rows) /* one copy of the rows from the first asked on */
        return kiln_llm_cuda_copy_logits(r->g, rows[0].row, n - rows[0].row, host_logits + (size_t)rows[0].row * vocab);
    for (int i = 0; back && i < n_rows; i++)
        if (tokens[i] < 0) KILN_TRY(kiln_llm_cuda_copy_logits(r->g, rows[i].row, 1, host_logits + (size_t)rows[i].row * vocab));
    return KILN_OK;
}
