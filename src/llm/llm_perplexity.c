/* llm_perplexity.c — kiln_llm_perplexity (llm_perplexity.h): one KV cache of a window's blocks, each
 * window computed from position 0 in chunks with every position's logits, the targets' negative
 * log-likelihoods (log-sum-exp in double) summed per window, then weighted as the guide does. */
#include "llm/llm_perplexity.h"

#include "core/status.h"
#include "llm/llm_engine.h"
#include "llm/llm_kv_fp8.h"
#include "llm/tokenizer.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define BLOCK_SIZE 16
#define CHUNK_TOKENS 128 /* window positions per forward step (the logits of a chunk: CHUNK_TOKENS x vocab) */

/* -log softmax(row)[target] over vocab logits, in double. */
static double token_nll(const float *row, int vocab, int32_t target) {
    float mx = row[0];
    for (int i = 1; i < vocab; i++) mx = row[i] > mx ? row[i] : mx;
    double z = 0;
    for (int i = 0; i < vocab; i++) z += exp((double)row[i] - mx);
    return log(z) + mx - row[target];
}

/* What one window's forward needs: its blocks and the step's arrays. */
typedef struct window_mem {
    kiln_kv_cache *kv;
    int32_t *blocks, *positions;
    float *logits;
    int n_blocks;
} window_mem;

/* Sum of the NLLs of window positions j (ids w[0..n)) whose token is a target: j >= first, j >= 1. */
static kiln_status window_nll(llm_runner *r, window_mem *wm, const int32_t *w, int n, int first, double *sum) {
    const int vocab = llm_runner_config(r)->vocab, n_blocks = (n + BLOCK_SIZE - 1) / BLOCK_SIZE;
    kiln_status st = KILN_OK;
    int taken = 0;
    for (; taken < n_blocks; taken++) {
        wm->blocks[taken] = kiln_kv_cache_alloc_block(wm->kv);
        if (wm->blocks[taken] < 0) {
            st = kiln_error(KILN_ERR_INTERNAL, "perplexity: the window's KV cache has no free block");
            break;
        }
    }
    *sum = 0;
    for (int p0 = 0; st == KILN_OK && p0 < n; p0 += CHUNK_TOKENS) {
        const int m = n - p0 < CHUNK_TOKENS ? n - p0 : CHUNK_TOKENS;
        for (int t = 0; t < m; t++) wm->positions[t] = p0 + t;
        const int32_t seq_start[2] = {0, m}, ctx_len = p0 + m;
        kiln_llm_batch b = {.n_tokens = m, .tokens = w + p0, .positions = wm->positions, .n_seqs = 1,
                            .seq_start = seq_start, .ctx_len = &ctx_len, .block_table = wm->blocks,
                            .max_blocks_per_seq = n_blocks, .all_logits = true};
        st = llm_runner_forward(r, wm->kv, &b, wm->logits);
        /* the logits at position p predict the token at p + 1 */
        for (int t = 0; st == KILN_OK && t < m; t++) {
            const int j = p0 + t + 1;
            if (j < n && j >= first) *sum += token_nll(wm->logits + (size_t)t * vocab, vocab, w[j]);
        }
    }
    for (int i = 0; i < taken; i++) kiln_kv_cache_release_block(wm->kv, wm->blocks[i]);
    return st;
}

static kiln_status check_limits(const kiln_llm_config *c, int64_t n, int ctx, int stride) {
    if (n < 2) return kiln_error(KILN_ERR_INVALID_ARGUMENT, "perplexity: the text has %lld token%s, at least 2 are needed",
                                 (long long)n, n == 1 ? "" : "s");
    if (ctx < 2 || ctx > c->max_pos)
        return kiln_error(KILN_ERR_INVALID_ARGUMENT, "perplexity: ctx %d is outside [2, %d] (the model's context)", ctx,
                          c->max_pos);
    if (stride < 1 || stride > ctx)
        return kiln_error(KILN_ERR_INVALID_ARGUMENT, "perplexity: stride %d is outside [1, ctx = %d]", stride, ctx);
    return KILN_OK;
}

kiln_status kiln_llm_perplexity_ids(llm_runner *r, const int32_t *ids, int64_t n, int ctx, int stride,
                                    kiln_llm_perplexity_result *out) {
    const kiln_llm_config *c = llm_runner_config(r);
    KILN_TRY(check_limits(c, n, ctx, stride));
    window_mem wm = {.n_blocks = (ctx + BLOCK_SIZE - 1) / BLOCK_SIZE};
    wm.blocks = malloc((size_t)wm.n_blocks * sizeof *wm.blocks);
    wm.positions = malloc(CHUNK_TOKENS * sizeof *wm.positions);
    wm.logits = malloc((size_t)CHUNK_TOKENS * (size_t)c->vocab * sizeof *wm.logits);
    kiln_status st = wm.blocks && wm.positions && wm.logits
                         ? llm_runner_make_cache(r, wm.n_blocks, BLOCK_SIZE, true, &wm.kv)
                         : kiln_error(KILN_ERR_OUT_OF_MEMORY, "perplexity: out of memory for a window of %d tokens", ctx);
    double nll_sum = 0;
    int64_t weights = 0, prev_end = 0;
    int windows = 0;
    for (int64_t begin = 0; st == KILN_OK; begin += stride) {
        const int64_t end = begin + ctx < n ? begin + ctx : n;
        const int len = (int)(end - begin), targets = (int)(end - prev_end);
        const int first = len - targets > 1 ? len - targets : 1; /* window positions that are scored */
        double sum;
        st = window_nll(r, &wm, ids + begin, len, first, &sum);
        if (st != KILN_OK) break;
        /* the guide: the window's mean loss times (targets - 1); a last window of one token scores none */
        if (len > first) nll_sum += sum / (len - first) * (targets - 1);
        weights += targets - 1;
        windows++;
        prev_end = end;
        if (end == n) break;
    }
    kiln_kv_cache_free(wm.kv);
    free(wm.blocks);
    free(wm.positions);
    free(wm.logits);
    KILN_TRY(st);
    if (weights < 1)
        return kiln_error(KILN_ERR_INVALID_ARGUMENT, "perplexity: no token is scored (%lld tokens, ctx %d, stride %d)",
                          (long long)n, ctx, stride);
    out->nll = nll_sum / (double)weights;
    out->perplexity = exp(out->nll);
    out->n_tokens = n;
    out->n_scored = weights;
    out->n_windows = windows;
    out->ctx = ctx;
    out->stride = stride;
    return KILN_OK;
}

kiln_status kiln_llm_perplexity(const char *path, const char *text, size_t len, const kiln_llm_perplexity_options *o,
                                kiln_llm_perplexity_result *out) {
    const bool cuda = o->target && !strcmp(o->target, "cuda");
    if (o->target && !cuda && strcmp(o->target, "cpu"))
        return kiln_error(KILN_ERR_INVALID_ARGUMENT, "perplexity: target must be cpu or cuda, got \"%s\"", o->target);
    kiln_llm_bundle b = {0};
    KILN_TRY(kiln_llm_bundle_open(path, true, cuda, &b));
    const kiln_llm_config cfg = *kiln_llm_model_config(b.model);
    const int ctx = o->ctx ? o->ctx : cfg.max_pos, stride = o->stride ? o->stride : ctx;
    int32_t *ids = NULL;
    size_t n = 0;
    llm_runner *r = NULL;
    kiln_status st = b.tok ? kiln_tokenizer_encode(b.tok, text, len, true, &ids, &n)
                           : kiln_error(KILN_ERR_INVALID_ARGUMENT, "perplexity: %s has no tokenizer", path);
    if (st == KILN_OK) st = check_limits(&cfg, (int64_t)n, ctx, stride);
    const bool fp8 = o->kv_cache_dtype && !strcmp(o->kv_cache_dtype, "fp8");
    if (st == KILN_OK && o->kv_cache_dtype && !fp8 && strcmp(o->kv_cache_dtype, "auto"))
        st = kiln_error(KILN_ERR_INVALID_ARGUMENT, "perplexity: kv_cache_dtype must be auto or fp8, got \"%s\"",
                        o->kv_cache_dtype);
    float *kv_scales = NULL;
    if (st == KILN_OK && fp8) /* on cuda the calibration runs the path's model on the CPU */
        st = cuda ? kiln_llm_kv_fp8_scales_at(path, o->calib_text, &kv_scales)
                  : kiln_llm_kv_fp8_scales(b.model, b.tok, o->calib_text, &kv_scales);
    if (st == KILN_OK) {
        llm_runner_options ro = {.target = cuda ? "cuda" : "cpu", .device = o->device, .max_seqs = 1,
                                 .max_tokens = CHUNK_TOKENS, .max_context = ctx,
                                 .bf16 = b.weights == KILN_PRECISION_BF16, .kv_fp8 = fp8, .kv_scales = kv_scales};
        st = llm_runner_create(b.model, &ro, out->target, sizeof out->target, &r);
    }
    free(kv_scales);
    if (st == KILN_OK) st = kiln_llm_perplexity_ids(r, ids, (int64_t)n, ctx, stride, out);
    llm_runner_free(r);
    free(ids);
    kiln_llm_bundle_free(&b);
    return st;
}
