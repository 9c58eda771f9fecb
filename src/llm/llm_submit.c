/* llm_submit.c — kiln_llm_submit and kiln_llm_cancel: a request is checked and copied on the caller's
 * thread (the prompt encoded, the stop tokens gathered, the KV blocks it needs counted against the
 * cache), then admission control and the hand-over to the engine loop's inbox happen under the
 * instance's mutex, which the loop never holds during a forward step. */
#include "llm/llm_api_internal.h"

#include "core/status.h"

#include <stdlib.h>
#include <string.h>

kiln_llm_request kiln_llm_request_defaults(void) {
    return (kiln_llm_request){.add_special = true, .sampling = kiln_sampling_defaults()};
}

static bool has_id(const int32_t *ids, int n, int32_t id) {
    for (int i = 0; i < n; i++)
        if (ids[i] == id) return true;
    return false;
}

/* The prompt's token ids into r (encoded from text, or copied). */
static kiln_status take_prompt(const kiln_llm *llm, const kiln_llm_request *q, llm_req *r) {
    if (q->prompt) {
        if (!llm->bundle.tok)
            return kiln_error(KILN_ERR_INVALID_ARGUMENT, "request: a text prompt needs a tokenizer and this model has "
                              "none: give prompt_ids");
        size_t n = 0;
        KILN_TRY(kiln_tokenizer_encode(llm->bundle.tok, q->prompt, strlen(q->prompt), q->add_special, &r->prompt, &n));
        if (n > INT32_MAX) return kiln_error(KILN_ERR_INVALID_ARGUMENT, "request: the prompt is too long");
        r->n_prompt = (int)n;
    } else if (q->n_prompt_ids > 0 && q->prompt_ids) {
        if (!(r->prompt = malloc((size_t)q->n_prompt_ids * sizeof *r->prompt)))
            return kiln_error(KILN_ERR_OUT_OF_MEMORY, "request: out of memory for %d prompt tokens", q->n_prompt_ids);
        memcpy(r->prompt, q->prompt_ids, (size_t)q->n_prompt_ids * sizeof *r->prompt);
        r->n_prompt = q->n_prompt_ids;
    }
    if (r->n_prompt < 1) return kiln_error(KILN_ERR_INVALID_ARGUMENT, "request: the prompt is empty");
    for (int i = 0; i < r->n_prompt; i++)
        if (r->prompt[i] < 0 || r->prompt[i] >= llm->cfg.vocab)
            return kiln_error(KILN_ERR_INVALID_ARGUMENT, "request: prompt token %d is %d, outside the vocabulary of %d",
                              i, r->prompt[i], llm->cfg.vocab);
    return KILN_OK;
}

/* The stop strings and stop tokens (eos unless ignore_eos, then the request's) into r. */
static kiln_status take_stops(const kiln_llm *llm, const kiln_llm_request *q, llm_req *r) {
    if (q->n_stop < 0 || (q->n_stop && !q->stop) || q->n_stop_ids < 0 || (q->n_stop_ids && !q->stop_ids))
        return kiln_error(KILN_ERR_INVALID_ARGUMENT, "request: n_stop %d / n_stop_ids %d without their arrays",
                          q->n_stop, q->n_stop_ids);
    if (q->n_stop && !(r->stop = calloc((size_t)q->n_stop, sizeof *r->stop)))
        return kiln_error(KILN_ERR_OUT_OF_MEMORY, "request: out of memory");
    for (; r->n_stop < q->n_stop; r->n_stop++) {
        if (!q->stop[r->n_stop] || !q->stop[r->n_stop][0])
            return kiln_error(KILN_ERR_INVALID_ARGUMENT, "request: stop string %d is empty", r->n_stop);
        if (!(r->stop[r->n_stop] = strdup(q->stop[r->n_stop])))
            return kiln_error(KILN_ERR_OUT_OF_MEMORY, "request: out of memory");
    }
    if (!(r->stop_ids = malloc((size_t)(LLM_MAX_EOS + q->n_stop_ids) * sizeof *r->stop_ids)))
        return kiln_error(KILN_ERR_OUT_OF_MEMORY, "request: out of memory");
    for (int i = 0; !q->ignore_eos && i < llm->n_eos; i++) r->stop_ids[r->n_stop_ids++] = llm->eos[i];
    for (int i = 0; i < q->n_stop_ids; i++) {
        if (q->stop_ids[i] < 0 || q->stop_ids[i] >= llm->cfg.vocab)
            return kiln_error(KILN_ERR_INVALID_ARGUMENT, "request: stop_ids[%d] is %d, outside the vocabulary of %d", i,
                              q->stop_ids[i], llm->cfg.vocab);
        if (!has_id(r->stop_ids, r->n_stop_ids, q->stop_ids[i])) r->stop_ids[r->n_stop_ids++] = q->stop_ids[i];
    }
    return KILN_OK;
}

/* The tokens to generate: q->max_tokens within the context, or (0) what the context and the whole cache
 * leave; KILN_ERR_INVALID_ARGUMENT naming the limit when the request can never run. */
static kiln_status fit(const kiln_llm *llm, const kiln_llm_request *q, llm_req *r) {
    const int ctx = llm->info.max_context, bs = llm->info.block_size, blocks = llm->info.kv_blocks_total;
    if (q->max_tokens < 0) return kiln_error(KILN_ERR_INVALID_ARGUMENT, "request: max_tokens is %d", q->max_tokens);
    if (r->n_prompt >= ctx)
        return kiln_error(KILN_ERR_INVALID_ARGUMENT, "request: the prompt has %d tokens; the context limit of %d "
                          "(max_context) leaves no room to generate", r->n_prompt, ctx);
    int64_t total = (int64_t)r->n_prompt + (q->max_tokens ? q->max_tokens : ctx);
    if (total > ctx) total = ctx;
    const int64_t cache_tokens = (int64_t)blocks * bs + 1; /* the last token is never cached */
    if (!q->max_tokens && total > cache_tokens) total = cache_tokens;
    if (total <= r->n_prompt)
        return kiln_error(KILN_ERR_INVALID_ARGUMENT, "request: the prompt of %d tokens leaves no room in the whole "
                          "KV cache of %d blocks of %d tokens (kv_cache_bytes / kv_cache_blocks)", r->n_prompt, blocks, bs);
    const int64_t need = (total - 1 + bs - 1) / bs;
    if (need > blocks)
        return kiln_error(KILN_ERR_INVALID_ARGUMENT, "request: %d prompt + %lld new tokens need %lld KV-cache blocks "
                          "of %d tokens, more than the whole cache's %d (kv_cache_bytes / kv_cache_blocks)", r->n_prompt,
                          (long long)(total - r->n_prompt), (long long)need, bs, blocks);
    r->max_tokens = (int)(total - r->n_prompt);
    return KILN_OK;
}

/* A copy of q, checked. */
static kiln_status make_request(kiln_llm *llm, const kiln_llm_request *q, llm_req **out) {
    *out = NULL;
    kiln_status st = kiln_sampling_validate(&q->sampling);
    if (st != KILN_OK) return kiln_error_prefix(st, "request");
    llm_req *r = calloc(1, sizeof *r);
    if (!r) return kiln_error(KILN_ERR_OUT_OF_MEMORY, "request: out of memory");
    llm_cond_init(&r->cv);
    r->llm = llm;
    r->user = q->user;
    r->on_event = q->on_event;
    r->sampling = q->sampling;
    r->speculate = !q->no_speculation;
    r->keep_special = q->keep_special;
    st = take_prompt(llm, q, r);
    if (st == KILN_OK) st = take_stops(llm, q, r);
    if (st == KILN_OK) st = fit(llm, q, r);
    if (st != KILN_OK) {
        llm_req_free(r);
        return st;
    }
    r->usage.prompt_tokens = r->n_prompt;
    *out = r;
    return KILN_OK;
}

/* KILN_ERR_BUSY when the instance cannot take r now (mu held). */
static kiln_status admit(const kiln_llm *llm, const llm_req *r) {
    if (llm->closing || llm->draining)
        return kiln_error(KILN_ERR_BUSY, "the model is %s: no new requests", llm->closing ? "closing" : "draining");
    if (llm->max_waiting && llm->queued >= llm->max_waiting)
        return kiln_error(KILN_ERR_BUSY, "the waiting queue is full: %d requests wait (max_waiting %d)", llm->queued,
                          llm->max_waiting);
    if (llm->max_waiting_tokens && llm->queued && llm->queued_tokens + r->n_prompt > llm->max_waiting_tokens)
        return kiln_error(KILN_ERR_BUSY, "the waiting queue is full: %lld prompt tokens wait, %d more would pass "
                          "max_waiting_tokens %lld", (long long)llm->queued_tokens, r->n_prompt,
                          (long long)llm->max_waiting_tokens);
    return KILN_OK;
}

kiln_status kiln_llm_submit(kiln_llm *llm, const kiln_llm_request *q, uint64_t *id) {
    if (id) *id = 0;
    if (!llm || !q || !id) return kiln_error(KILN_ERR_INVALID_ARGUMENT, "kiln_llm_submit: llm, req and id are required");
    llm_req *r;
    KILN_TRY(make_request(llm, q, &r));
    pthread_mutex_lock(&llm->mu);
    kiln_status st = admit(llm, r);
    if (st == KILN_OK) {
        r->id = *id = llm->next_id++;
        r->t_submit = llm_now_ms();
        r->hnext = llm->table[r->id % LLM_HASH_BUCKETS];
        llm->table[r->id % LLM_HASH_BUCKETS] = r;
        if (llm->inbox_tail) llm->inbox_tail->qnext = r;
        else llm->inbox_head = r;
        llm->inbox_tail = r;
        llm->n_inbox++;
        r->queued = true;
        llm->queued++;
        llm->queued_tokens += r->n_prompt;
        llm->live++;
        llm->submitted++;
        llm->prompt_tokens += (uint64_t)r->n_prompt;
        pthread_cond_signal(&llm->wake);
    }
    pthread_mutex_unlock(&llm->mu);
    if (st != KILN_OK) llm_req_free(r);
    return st;
}

kiln_status kiln_llm_cancel(kiln_llm *llm, uint64_t id) {
    if (!llm) return kiln_error(KILN_ERR_INVALID_ARGUMENT, "kiln_llm_cancel: llm is NULL");
    pthread_mutex_lock(&llm->mu);
    llm_req *r = llm_table_find(llm, id);
    if (r && !r->ended && !r->cancel_requested) {
        r->cancel_requested = true;
        llm->n_cancels++;
        pthread_cond_signal(&llm->wake);
    }
    pthread_mutex_unlock(&llm->mu);
    return KILN_OK;
}
