/* llm_api.c — the lifetime of a kiln_llm (kiln/kiln_llm.h): open a checkpoint, an engine or random
 * weights, size the KV cache and the scheduler from the options, gather the end-of-sequence ids,
 * start the engine loop; drain, close; information and statistics. */
#include "llm/llm_api_internal.h"
#include "llm/llm_internal.h"

#include "core/status.h"
#include "llm/llm_kv_fp8.h"
#include "llm/llm_random.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define DEFAULT_BLOCK_SIZE 16
#define DEFAULT_DRAFT_TOKENS 4
#define DEFAULT_MAX_BATCHED_TOKENS 2048
#define CPU_DEFAULT_KV_BYTES (1ull << 30)

const char *kiln_llm_finish_name(kiln_llm_finish f) {
    switch (f) {
    case KILN_LLM_FINISH_NONE: return "none";
    case KILN_LLM_FINISH_LENGTH: return "length";
    case KILN_LLM_FINISH_STOP_TOKEN: return "stop_token";
    case KILN_LLM_FINISH_STOP_STRING: return "stop_string";
    case KILN_LLM_FINISH_CANCELLED: return "cancelled";
    case KILN_LLM_FINISH_TIMEOUT: return "timeout";
    case KILN_LLM_FINISH_ERROR: return "error";
    }
    return "?";
}

static kiln_status new_llm(const kiln_llm_options *o, kiln_llm **out) {
    *out = NULL;
    if (o && o->target && strcmp(o->target, "cpu") && strcmp(o->target, "cuda"))
        return kiln_error(KILN_ERR_INVALID_ARGUMENT, "target must be \"cpu\" or \"cuda\", got \"%s\"", o->target);
    if (o && (o->kv_cache_blocks < 0 || o->block_size < 0 || o->max_seqs < 0 || o->max_batched_tokens < 0 ||
              o->max_context < 0 || o->max_waiting < 0 || o->max_waiting_tokens < 0 || !(o->queue_timeout_ms >= 0)))
        return kiln_error(KILN_ERR_INVALID_ARGUMENT, "kiln_llm_options: negative kv_cache_blocks, block_size, max_seqs, "
                          "max_batched_tokens, max_context, max_waiting, max_waiting_tokens or queue_timeout_ms");
    if (o && o->spec && strcmp(o->spec, "off") && strcmp(o->spec, "ngram") && strcmp(o->spec, "draft"))
        return kiln_error(KILN_ERR_INVALID_ARGUMENT, "spec must be \"off\", \"ngram\" or \"draft\", got \"%s\"",
                          o->spec);
    if (o && o->draft && o->spec && strcmp(o->spec, "draft"))
        return kiln_error(KILN_ERR_INVALID_ARGUMENT, "a draft model goes with spec \"draft\", not \"%s\"", o->spec);
    if (o && !o->draft && o->spec && !strcmp(o->spec, "draft"))
        return kiln_error(KILN_ERR_INVALID_ARGUMENT, "spec \"draft\" needs a draft model (draft)");
    if (o && o->kv_cache_dtype && strcmp(o->kv_cache_dtype, "auto") && strcmp(o->kv_cache_dtype, "fp8"))
        return kiln_error(KILN_ERR_INVALID_ARGUMENT, "kv_cache_dtype must be \"auto\" or \"fp8\", got \"%s\"",
                          o->kv_cache_dtype);
    if (o && (o->draft_tokens < 0 || o->draft_tokens > KILN_LLM_MAX_DRAFT_TOKENS))
        return kiln_error(KILN_ERR_INVALID_ARGUMENT, "draft_tokens must be in [0, %d], got %d",
                          KILN_LLM_MAX_DRAFT_TOKENS, o->draft_tokens);
    kiln_llm *llm = calloc(1, sizeof *llm);
    if (!llm) return kiln_error(KILN_ERR_OUT_OF_MEMORY, "out of memory");
    pthread_mutex_init(&llm->mu, NULL);
    llm_cond_init(&llm->wake);
    llm_cond_init(&llm->idle);
    llm->next_id = 1;
    *out = llm;
    return KILN_OK;
}

/* Draft tokens per speculating step (0: no speculation). */
static int spec_draft_tokens(const kiln_llm_options *o) {
    if (!o->draft && (!o->spec || !strcmp(o->spec, "off"))) return 0;
    return o->draft_tokens ? o->draft_tokens : DEFAULT_DRAFT_TOKENS;
}

/* The runner's limits from the options (defaults filled in) for a model of config c. */
static llm_runner_options runner_options(const kiln_llm_options *o, const kiln_llm_config *c, bool bf16) {
    const bool cuda = o->target && !strcmp(o->target, "cuda");
    llm_runner_options ro = {.target = cuda ? "cuda" : "cpu", .device = o->device, .bf16 = bf16,
                             .host_sampler = o->host_sampler, .timing_cache = o->timing_cache};
    ro.max_seqs = o->max_seqs ? o->max_seqs : cuda ? 256 : 16;
    ro.max_tokens = o->max_batched_tokens ? o->max_batched_tokens : DEFAULT_MAX_BATCHED_TOKENS;
    if (ro.max_tokens < ro.max_seqs) ro.max_tokens = ro.max_seqs;
    ro.max_context = o->max_context > 0 && o->max_context < c->max_pos ? o->max_context : c->max_pos;
    ro.kv_fp8 = o->kv_cache_dtype && !strcmp(o->kv_cache_dtype, "fp8");
    ro.draft_tokens = spec_draft_tokens(o);
    return ro;
}

/* The end-of-sequence ids: the tokenizer's, config.json's and generation_config.json's (a number or a
 * list; instruction-tuned models name their end-of-turn token there), each once. */
static void add_eos(kiln_llm *llm, int64_t id) {
    if (id < 0 || id >= llm->cfg.vocab || llm->n_eos == LLM_MAX_EOS) return;
    for (int i = 0; i < llm->n_eos; i++)
        if (llm->eos[i] == id) return;
    llm->eos[llm->n_eos++] = (int32_t)id;
}

static void collect_eos(kiln_llm *llm) {
    if (llm->bundle.tok) add_eos(llm, kiln_tokenizer_eos_id(llm->bundle.tok));
    for (int i = 0; i < llm->cfg.n_eos; i++) add_eos(llm, llm->cfg.eos_ids[i]);
    add_eos(llm, llm->cfg.eos_id);
    for (int i = 0; i < llm->bundle.n_gen_eos; i++) add_eos(llm, llm->bundle.gen_eos[i]);
}

/* The KV cache's blocks: the options' budget (exact), else max_seqs whole contexts (at most 1 GiB on the
 * CPU; on CUDA at most what 90% of the free memory holds). */
static kiln_status make_cache(kiln_llm *llm, const kiln_llm_options *o, const llm_runner_options *ro, int bs) {
    const uint64_t block_bytes = llm_runner_block_bytes(llm->runner, bs);
    int64_t blocks;
    bool exact = true;
    if (o->kv_cache_bytes) {
        blocks = (int64_t)(o->kv_cache_bytes / block_bytes);
        if (!blocks)
            return kiln_error(KILN_ERR_INVALID_ARGUMENT, "kv_cache_bytes %llu holds no KV-cache block (%llu bytes for %d "
                              "tokens of this model)", (unsigned long long)o->kv_cache_bytes,
                              (unsigned long long)block_bytes, bs);
    } else if (o->kv_cache_blocks) {
        blocks = o->kv_cache_blocks;
    } else {
        exact = false;
        blocks = (int64_t)ro->max_seqs * (((int64_t)ro->max_context - 1 + bs - 1) / bs);
        if (strcmp(ro->target, "cuda") && (uint64_t)blocks * block_bytes > CPU_DEFAULT_KV_BYTES)
            blocks = (int64_t)(CPU_DEFAULT_KV_BYTES / block_bytes);
        if (blocks < 1) blocks = 1;
    }
    if (blocks > INT_MAX / 2) blocks = INT_MAX / 2;
    return llm_runner_make_cache(llm->runner, (int)blocks, bs, exact, &llm->kv);
}

/* Everything after the runner: cache, scheduler, eos ids, information, chat template, the loop. */
static kiln_status finish_open(kiln_llm *llm, const kiln_llm_options *o, const llm_runner_options *ro, int64_t n_params) {
    const int bs = o->block_size ? o->block_size : DEFAULT_BLOCK_SIZE;
    KILN_TRY(make_cache(llm, o, ro, bs));
    KILN_TRY(llm_draft_make_cache(llm));
    kiln_scheduler_config sc = {.forward = llm_runner_forward, .sample = llm_runner_sample_fn(llm->runner),
                                .model = llm->runner, .kv = llm->kv, .vocab = llm->cfg.vocab,
                                .max_model_len = ro->max_context, .max_num_batched_tokens = ro->max_tokens,
                                .max_num_seqs = ro->max_seqs, .on_admit = llm_loop_on_admit,
                                .no_prefix_cache = o->no_prefix_cache, .draft_tokens = spec_draft_tokens(o)};
    llm_draft_schedule(llm, &sc);
    KILN_TRY(kiln_scheduler_create(&sc, &llm->sched));
    collect_eos(llm);
    llm->max_waiting = o->max_waiting;
    llm->max_waiting_tokens = o->max_waiting_tokens;
    llm->queue_timeout_ms = o->queue_timeout_ms;
    snprintf(llm->family, sizeof llm->family, "%s", kiln_llm_family_name(llm->cfg.family));
    const kiln_tokenizer *tok = llm->bundle.tok;
    llm->info = (kiln_llm_info){
        .family = llm->family, .target = llm->target, .n_params = n_params, .vocab = llm->cfg.vocab,
        .max_context = ro->max_context, .bos_id = tok && kiln_tokenizer_bos_id(tok) >= 0 ? kiln_tokenizer_bos_id(tok)
                                                                                          : llm->cfg.bos_id,
        .eos_id = llm->n_eos ? llm->eos[0] : -1, .has_tokenizer = tok != NULL,
        .kv_blocks_total = kiln_kv_cache_get_config(llm->kv)->n_blocks, .block_size = bs, .max_seqs = ro->max_seqs,
        .max_batched_tokens = ro->max_tokens};
    KILN_TRY(llm_chat_load(llm, o->chat_template));
    llm->snap = kiln_scheduler_get_stats(llm->sched);
    return llm_loop_start(llm);
}

kiln_status kiln_llm_open(const char *path, const kiln_llm_options *opts, kiln_llm **out) {
    if (!out) return kiln_error(KILN_ERR_INVALID_ARGUMENT, "kiln_llm_open: out is NULL");
    *out = NULL;
    if (!path) return kiln_error(KILN_ERR_INVALID_ARGUMENT, "kiln_llm_open: path is NULL");
    const kiln_llm_options none = {0}, *o = opts ? opts : &none;
    kiln_llm *llm;
    KILN_TRY(new_llm(o, &llm));
    const bool cuda = o->target && !strcmp(o->target, "cuda");
    kiln_status st = kiln_llm_bundle_open(path, true, cuda, &llm->bundle);
    llm_runner_options ro = {0};
    if (st == KILN_OK) {
        llm->cfg = *kiln_llm_model_config(llm->bundle.model);
        ro = runner_options(o, &llm->cfg, llm->bundle.weights == KILN_PRECISION_BF16);
        if (!cuda) kiln_llm_model_weights_to_hugepages(llm->bundle.model); /* the CPU forward streams them */
    }
    float *kv_scales = NULL; /* on cuda the calibration runs the path's model on the CPU */
    if (st == KILN_OK && ro.kv_fp8)
        st = cuda ? kiln_llm_kv_fp8_scales_at(path, o->kv_calib_text, &kv_scales)
                  : kiln_llm_kv_fp8_scales(llm->bundle.model, llm->bundle.tok, o->kv_calib_text, &kv_scales);
    if (st == KILN_OK) {
        ro.kv_scales = kv_scales;
        st = llm_runner_create(llm->bundle.model, &ro, llm->target, sizeof llm->target, &llm->runner);
        ro.kv_scales = NULL;
    }
    free(kv_scales);
    if (st == KILN_OK && cuda) { /* the weights are on the device: release the host copy or mapping */
        kiln_llm_model_free(llm->bundle.model);
        llm->bundle.model = NULL;
    }
    if (st == KILN_OK && o->draft) st = llm_draft_open(llm, o->draft, &ro, false, 0);
    if (st == KILN_OK) st = finish_open(llm, o, &ro, llm->bundle.n_params);
    if (st != KILN_OK) {
        kiln_llm_close(llm);
        return st;
    }
    *out = llm;
    return KILN_OK;
}

kiln_status kiln_llm_open_random(const char *shape, kiln_precision precision, uint64_t seed,
                                 const kiln_llm_options *opts, kiln_llm **out) {
    if (!out) return kiln_error(KILN_ERR_INVALID_ARGUMENT, "kiln_llm_open_random: out is NULL");
    *out = NULL;
    kiln_llm_shape sh;
    KILN_TRY(kiln_llm_shape_find(shape ? shape : "(null)", &sh));
    if (precision != KILN_PRECISION_FP32 && precision != KILN_PRECISION_FP16 && precision != KILN_PRECISION_BF16 &&
        precision != KILN_PRECISION_INT8 && precision != KILN_PRECISION_W8A8 && precision != KILN_PRECISION_INT4 &&
        precision != KILN_PRECISION_FP8)
        return kiln_error(KILN_ERR_INVALID_ARGUMENT, "kiln_llm_open_random: precision must be fp32, fp16, bf16, int8, "
                          "w8a8, int4 or fp8");
    const kiln_llm_options none = {0}, *o = opts ? opts : &none;
    kiln_llm *llm;
    KILN_TRY(new_llm(o, &llm));
    llm->cfg = sh.cfg;
    const bool usual = precision == KILN_PRECISION_FP32 || precision == KILN_PRECISION_INT8 ||
                       precision == KILN_PRECISION_W8A8 || precision == KILN_PRECISION_INT4 ||
                       precision == KILN_PRECISION_FP8;
    const bool bf16 = precision == KILN_PRECISION_BF16 || (usual && sh.dtype == KILN_BF16);
    llm_runner_options ro = runner_options(o, &llm->cfg, bf16);
    ro.random_int8 = precision == KILN_PRECISION_INT8;
    ro.random_w8a8 = precision == KILN_PRECISION_W8A8;
    ro.random_int4 = precision == KILN_PRECISION_INT4;
    ro.random_fp8 = precision == KILN_PRECISION_FP8;
    float *kv_scales = NULL; /* random weights have no tokenizer: a calibration text is refused */
    kiln_status st = ro.kv_fp8 ? kiln_llm_kv_fp8_scales(NULL, NULL, o->kv_calib_text, &kv_scales) : KILN_OK;
    if (st == KILN_OK) st = llm_runner_create_random(&sh.cfg, seed, &ro, llm->target, sizeof llm->target, &llm->runner);
    if (st == KILN_OK && o->draft) st = llm_draft_open(llm, o->draft, &ro, true, seed);
    if (st == KILN_OK) st = finish_open(llm, o, &ro, kiln_llm_config_params(&sh.cfg));
    if (st != KILN_OK) {
        kiln_llm_close(llm);
        return st;
    }
    *out = llm;
    return KILN_OK;
}

kiln_status kiln_llm_drain(kiln_llm *llm, double timeout_ms) {
    if (!llm) return kiln_error(KILN_ERR_INVALID_ARGUMENT, "kiln_llm_drain: llm is NULL");
    pthread_mutex_lock(&llm->mu);
    llm->draining = true;
    struct timespec deadline = llm_deadline(timeout_ms > 0 ? timeout_ms : 0);
    while (llm->live > 0 && pthread_cond_timedwait(&llm->idle, &llm->mu, &deadline) == 0) {
    }
    const int left = llm->live;
    for (int b = 0; left && b < LLM_HASH_BUCKETS; b++)
        for (llm_req *r = llm->table[b]; r; r = r->hnext)
            if (!r->ended && !r->cancel_requested) {
                r->cancel_requested = true;
                llm->n_cancels++;
            }
    if (left) pthread_cond_signal(&llm->wake);
    while (llm->live > 0) pthread_cond_wait(&llm->idle, &llm->mu);
    pthread_mutex_unlock(&llm->mu);
    if (left)
        return kiln_error(KILN_ERR_BUSY, "drain: %d request%s still going after %g ms, cancelled", left,
                          left == 1 ? " was" : "s were", timeout_ms);
    return KILN_OK;
}

void kiln_llm_close(kiln_llm *llm) {
    if (!llm) return;
    llm_loop_stop(llm);
    for (int b = 0; b < LLM_HASH_BUCKETS; b++)
        while (llm->table[b]) llm_req_destroy(llm, llm->table[b]);
    for (llm_req *r = llm->inbox_head, *next; r; r = next) { /* only when the loop never started */
        next = r->qnext;
        llm_req_free(r);
    }
    kiln_scheduler_free(llm->sched);
    llm_draft_close(llm);
    kiln_kv_cache_free(llm->kv);
    llm_runner_free(llm->runner);
    kiln_llm_bundle_free(&llm->bundle);
    kiln_chat_template_free(llm->chat);
    free(llm->batch);
    pthread_cond_destroy(&llm->wake);
    pthread_cond_destroy(&llm->idle);
    pthread_mutex_destroy(&llm->mu);
    free(llm);
}

const kiln_llm_config *llm_model_config(const kiln_llm *llm) { return &llm->cfg; }
const kiln_llm_bundle *llm_model_bundle(const kiln_llm *llm) { return &llm->bundle; }

kiln_status kiln_llm_get_info(const kiln_llm *llm, kiln_llm_info *out) {
    if (!llm || !out) return kiln_error(KILN_ERR_INVALID_ARGUMENT, "kiln_llm_get_info: llm and out are required");
    *out = llm->info;
    return KILN_OK;
}

kiln_status kiln_llm_get_stats(const kiln_llm *cllm, kiln_llm_stats *out) {
    if (!cllm || !out) return kiln_error(KILN_ERR_INVALID_ARGUMENT, "kiln_llm_get_stats: llm and out are required");
    kiln_llm *llm = (kiln_llm *)cllm; /* the mutex only */
    pthread_mutex_lock(&llm->mu);
    const kiln_scheduler_stats *s = &llm->snap;
    *out = (kiln_llm_stats){.running = s->running, .waiting = s->waiting + llm->n_inbox,
                            .waiting_tokens = llm->queued_tokens, .kv_blocks_used = s->kv_blocks_used,
                            .kv_blocks_total = s->kv_blocks_total, .preemptions = s->preemptions, .steps = s->steps,
                            .prefix_cache_queries = s->prefix_cache_queries, .prefix_cache_hits = s->prefix_cache_hits,
                            .spec_steps = s->spec_steps, .spec_drafted = s->spec_drafted,
                            .spec_accepted = s->spec_accepted, .spec_emitted = s->spec_emitted,
                            .requests_submitted = llm->submitted, .requests_finished = llm->finished,
                            .prompt_tokens = llm->prompt_tokens, .generated_tokens = llm->generated_snap, .busy_ms = llm->busy_snap,
                            .ms_since_heartbeat = llm_now_ms() - llm->heartbeat_ms, .draining = llm->draining};
    pthread_mutex_unlock(&llm->mu);
    return KILN_OK;
}
