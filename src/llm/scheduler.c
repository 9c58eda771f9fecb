/* scheduler.c — the scheduler's requests: creation and validation of the config, adding requests
 * (refusing bad ones, ending the ones the cache can never hold), ending them by id, and their
 * lifetime from the waiting queue to the step after their final event. Batches are built and run in
 * scheduler_step.c. */
#include "llm/scheduler_internal.h"

#include "core/status.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *kiln_finish_reason_name(kiln_finish_reason r) {
    switch (r) {
    case KILN_FINISH_NONE: return "none";
    case KILN_FINISH_LENGTH: return "length";
    case KILN_FINISH_STOP_TOKEN: return "stop_token";
    case KILN_FINISH_STOP_STRING: return "stop_string";
    case KILN_FINISH_ABORTED: return "aborted";
    case KILN_FINISH_ERROR: return "error";
    }
    return "?";
}

static int blocks_for(int tokens, int block_size) { return tokens / block_size + (tokens % block_size != 0); }

static kiln_status check_config(const kiln_scheduler_config *c) {
    if (!c->forward || !c->kv) return kiln_error(KILN_ERR_INVALID_ARGUMENT, "scheduler: forward and kv are required");
    if (c->vocab <= 0) return kiln_error(KILN_ERR_INVALID_ARGUMENT, "scheduler: vocab must be > 0, got %d", c->vocab);
    if (c->max_model_len < 2)
        return kiln_error(KILN_ERR_INVALID_ARGUMENT, "scheduler: max_model_len must be >= 2, got %d", c->max_model_len);
    if (c->max_num_seqs < 1 || c->max_num_batched_tokens < c->max_num_seqs)
        return kiln_error(KILN_ERR_INVALID_ARGUMENT,
                          "scheduler: need max_num_seqs >= 1 and max_num_batched_tokens >= max_num_seqs (every "
                          "running sequence decodes in each step), got %d and %d",
                          c->max_num_seqs, c->max_num_batched_tokens);
    if (c->draft_tokens < 0 || c->ngram_min < 1 || c->ngram_max < c->ngram_min)
        return kiln_error(KILN_ERR_INVALID_ARGUMENT,
                          "scheduler: need draft_tokens >= 0 and 1 <= ngram_min <= ngram_max, got %d, %d, %d",
                          c->draft_tokens, c->ngram_min, c->ngram_max);
    const kiln_kv_cache_config *kc = kiln_kv_cache_get_config(c->kv);
    if (kc->block_size < 1 || kc->n_blocks < 1)
        return kiln_error(KILN_ERR_INVALID_ARGUMENT, "scheduler: the KV cache has %d blocks of %d tokens",
                          kc->n_blocks, kc->block_size);
    return sched_draft_check(c);
}

kiln_status kiln_scheduler_create(const kiln_scheduler_config *cfg, kiln_scheduler **out) {
    *out = NULL;
    kiln_scheduler_config c = *cfg;
    if (!c.max_num_seqs) c.max_num_seqs = 256;
    if (!c.max_num_batched_tokens) c.max_num_batched_tokens = c.max_num_seqs > 2048 ? c.max_num_seqs : 2048;
    if (!c.ngram_max) c.ngram_max = 3;
    if (!c.ngram_min) c.ngram_min = 1;
    KILN_TRY(check_config(&c));
    kiln_scheduler *s = calloc(1, sizeof *s);
    if (!s) return kiln_error(KILN_ERR_OUT_OF_MEMORY, "scheduler: out of memory");
    s->cfg = c;
    const kiln_kv_cache_config *kc = kiln_kv_cache_get_config(c.kv);
    s->block_size = kc->block_size;
    int longest = blocks_for(c.max_model_len - 1, s->block_size); /* the last token is never computed */
    s->max_blocks_per_seq = longest < kc->n_blocks ? longest : kc->n_blocks;
    s->next_id = 1;
    size_t seqs = (size_t)c.max_num_seqs, toks = (size_t)c.max_num_batched_tokens;
    int64_t rows = (int64_t)c.max_num_seqs * (1 + c.draft_tokens); /* a row per scheduled token at most */
    s->max_rows = (int)(rows < c.max_num_batched_tokens || c.draft_tokens == 0 ? rows : c.max_num_batched_tokens);
    s->running = calloc(seqs, sizeof *s->running);
    s->batch = calloc(seqs, sizeof *s->batch);
    s->tokens = malloc(toks * sizeof *s->tokens);
    s->positions = malloc(toks * sizeof *s->positions);
    s->seq_start = malloc((seqs + 1) * sizeof *s->seq_start);
    s->ctx_len = malloc(seqs * sizeof *s->ctx_len);
    s->block_table = malloc(seqs * (size_t)s->max_blocks_per_seq * sizeof *s->block_table);
    s->n_logits = malloc(seqs * sizeof *s->n_logits);
    s->logits = malloc((size_t)s->max_rows * (size_t)c.vocab * sizeof *s->logits);
    s->events = malloc((size_t)s->max_rows * sizeof *s->events);
    s->rows = malloc((size_t)s->max_rows * sizeof *s->rows);
    s->sampled = malloc((size_t)s->max_rows * sizeof *s->sampled);
    if (!s->running || !s->batch || !s->tokens || !s->positions || !s->seq_start || !s->ctx_len || !s->block_table ||
        !s->n_logits || !s->logits || !s->events || !s->rows || !s->sampled) {
        kiln_scheduler_free(s);
        return kiln_error(KILN_ERR_OUT_OF_MEMORY, "scheduler: cannot allocate the buffers of %d sequences x %d tokens",
                          c.max_num_seqs, c.vocab);
    }
    kiln_status st = kiln_sampler_create(c.vocab, &s->sampler);
    if (st == KILN_OK) st = sched_draft_create(s);
    if (st != KILN_OK) {
        kiln_scheduler_free(s);
        return st;
    }
    *out = s;
    return KILN_OK;
}

void sched_req_free(sched_req *r) {
    if (!r) return;
    free(r->tokens);
    free(r->stop_ids);
    free(r->blocks);
    free(r->hashes);
    free(r);
}

void kiln_scheduler_free(kiln_scheduler *s) {
    if (!s) return;
    for (int i = 0; i < s->n_running; i++) {
        sched_release_blocks(s, s->running[i]);
        sched_req_free(s->running[i]);
    }
    for (int i = 0; i < s->n_waiting; i++) sched_req_free(s->waiting[i]);
    for (int i = 0; i < s->n_done; i++) sched_req_free(s->done[i]);
    kiln_sampler_free(s->sampler);
    sched_draft_free(s);
    free(s->running);
    free(s->waiting);
    free(s->done);
    free(s->pending);
    free(s->events);
    free(s->batch);
    free(s->tokens);
    free(s->positions);
    free(s->seq_start);
    free(s->ctx_len);
    free(s->block_table);
    free(s->n_logits);
    free(s->logits);
    free(s->rows);
    free(s->sampled);
    free(s);
}

void sched_release_blocks(kiln_scheduler *s, sched_req *r) {
    /* last block first: a cached prefix's tail is then evicted before its head */
    for (int i = r->n_blocks - 1; i >= 0; i--) kiln_kv_cache_release_block(s->cfg.kv, r->blocks[i]);
    r->n_blocks = 0;
    r->n_computed = 0;
    r->draft_computed = 0;
    r->n_published = 0;
}

void sched_end(kiln_scheduler *s, sched_req *r, const char *message) {
    sched_release_blocks(s, r);
    if (message) snprintf(r->message, sizeof r->message, "%s", message);
    r->ended = true;
    s->done[s->n_done++] = r;
}

kiln_sched_event sched_event(const sched_req *r, const kiln_sample *sample, kiln_finish_reason why) {
    kiln_sched_event ev = {.id = r->id, .user = r->user, .n_generated = r->n_tokens - r->n_prompt,
                           .preemptions = r->preemptions, .finish = why};
    if (sample) ev.sample = *sample;
    else ev.sample.token = -1;
    if (why == KILN_FINISH_ERROR) ev.message = r->message;
    return ev;
}

/* Room for `live` requests in the lists, pending and events (so that step and finish never allocate). */
static kiln_status reserve_lists(kiln_scheduler *s, int live) {
    if (live <= s->cap) return KILN_OK;
    int cap = live * 2 > 16 ? live * 2 : 16;
    size_t n = (size_t)cap;
    sched_req **w = realloc(s->waiting, n * sizeof *w);
    if (w) s->waiting = w;
    sched_req **d = realloc(s->done, n * sizeof *d);
    if (d) s->done = d;
    kiln_sched_event *p = realloc(s->pending, n * sizeof *p);
    if (p) s->pending = p;
    kiln_sched_event *e = realloc(s->events, (n + (size_t)s->max_rows) * sizeof *e);
    if (e) s->events = e;
    if (!w || !d || !p || !e) return kiln_error(KILN_ERR_OUT_OF_MEMORY, "scheduler: cannot track %d requests", live);
    s->cap = cap;
    return KILN_OK;
}

static kiln_status check_request(const kiln_scheduler *s, const kiln_request_params *r) {
    if (!r->prompt || r->n_prompt < 1) return kiln_error(KILN_ERR_INVALID_ARGUMENT, "request: the prompt is empty");
    if (r->n_prompt >= s->cfg.max_model_len)
        return kiln_error(KILN_ERR_INVALID_ARGUMENT,
                          "request: the prompt has %d tokens; the model's context of %d leaves no room to generate",
                          r->n_prompt, s->cfg.max_model_len);
    for (int i = 0; i < r->n_prompt; i++)
        if (r->prompt[i] < 0 || r->prompt[i] >= s->cfg.vocab)
            return kiln_error(KILN_ERR_INVALID_ARGUMENT, "request: prompt token %d is %d, outside the vocabulary of %d",
                              i, r->prompt[i], s->cfg.vocab);
    if (r->max_tokens < 1)
        return kiln_error(KILN_ERR_INVALID_ARGUMENT, "request: max_tokens must be >= 1, got %d", r->max_tokens);
    if (r->n_stop_ids < 0 || (r->n_stop_ids > 0 && !r->stop_ids))
        return kiln_error(KILN_ERR_INVALID_ARGUMENT, "request: bad stop_ids (%d of them)", r->n_stop_ids);
    kiln_status st = kiln_sampling_validate(&r->sampling);
    return st == KILN_OK ? KILN_OK : kiln_error_prefix(st, "request");
}

kiln_status kiln_scheduler_add(kiln_scheduler *s, const kiln_request_params *p, uint64_t *id) {
    *id = 0;
    KILN_TRY(check_request(s, p));
    KILN_TRY(reserve_lists(s, s->n_running + s->n_waiting + s->n_done + 1));
    int64_t total = (int64_t)p->n_prompt + p->max_tokens;
    if (total > s->cfg.max_model_len) total = s->cfg.max_model_len;
    sched_req *r = calloc(1, sizeof *r);
    if (r) {
        r->max_total = (int)total;
        r->max_blocks = blocks_for(r->max_total - 1, s->block_size);
        r->tokens = malloc((size_t)r->max_total * sizeof *r->tokens);
        r->stop_ids = malloc((size_t)(p->n_stop_ids ? p->n_stop_ids : 1) * sizeof *r->stop_ids);
        r->blocks = malloc((size_t)r->max_blocks * sizeof *r->blocks);
        r->hashes = malloc((size_t)(r->max_blocks ? r->max_blocks : 1) * sizeof *r->hashes);
    }
    if (!r || !r->tokens || !r->stop_ids || !r->blocks || !r->hashes) {
        sched_req_free(r);
        return kiln_error(KILN_ERR_OUT_OF_MEMORY, "request: out of memory for %lld tokens", (long long)total);
    }
    r->id = s->next_id++;
    r->user = p->user;
    r->sampling = p->sampling;
    r->speculate = p->speculate;
    memcpy(r->tokens, p->prompt, (size_t)p->n_prompt * sizeof *r->tokens);
    r->n_prompt = r->n_tokens = p->n_prompt;
    if (p->n_stop_ids) memcpy(r->stop_ids, p->stop_ids, (size_t)p->n_stop_ids * sizeof *r->stop_ids);
    r->n_stop_ids = p->n_stop_ids;
    *id = r->id;
    const kiln_kv_cache_config *kc = kiln_kv_cache_get_config(s->cfg.kv);
    if (r->max_blocks > kc->n_blocks) {
        char msg[200];
        snprintf(msg, sizeof msg,
                 "request needs %d KV-cache blocks (%d prompt + %d new tokens) but the whole cache has %d blocks of %d "
                 "tokens",
                 r->max_blocks, r->n_prompt, r->max_total - r->n_prompt, kc->n_blocks, kc->block_size);
        sched_end(s, r, msg);
        s->pending[s->n_pending++] = sched_event(r, NULL, KILN_FINISH_ERROR);
        return KILN_OK;
    }
    s->waiting[s->n_waiting++] = r;
    return KILN_OK;
}

/* Removes and returns the request with this id from list[0, *n), or NULL. */
static sched_req *take(sched_req **list, int *n, uint64_t id) {
    for (int i = 0; i < *n; i++) {
        if (list[i]->id != id) continue;
        sched_req *r = list[i];
        memmove(list + i, list + i + 1, (size_t)(*n - i - 1) * sizeof *list);
        (*n)--;
        return r;
    }
    return NULL;
}

kiln_status kiln_scheduler_finish(kiln_scheduler *s, uint64_t id, kiln_finish_reason why) {
    if (why != KILN_FINISH_ABORTED && why != KILN_FINISH_STOP_STRING)
        return kiln_error(KILN_ERR_INVALID_ARGUMENT, "scheduler: a request can be ended as aborted or stop_string, not %s",
                          kiln_finish_reason_name(why));
    sched_req *r = take(s->running, &s->n_running, id);
    if (!r) r = take(s->waiting, &s->n_waiting, id);
    if (!r)
        return kiln_error(KILN_ERR_INVALID_ARGUMENT, "scheduler: no waiting or running request has id %llu",
                          (unsigned long long)id);
    sched_end(s, r, NULL);
    s->pending[s->n_pending++] = sched_event(r, NULL, why);
    return KILN_OK;
}

bool kiln_scheduler_has_work(const kiln_scheduler *s) { return s->n_running || s->n_waiting || s->n_pending; }

kiln_scheduler_stats kiln_scheduler_get_stats(const kiln_scheduler *s) {
    const kiln_kv_cache_config *kc = kiln_kv_cache_get_config(s->cfg.kv);
    return (kiln_scheduler_stats){
        .running = s->n_running,
        .waiting = s->n_waiting,
        .kv_blocks_used = kc->n_blocks - kiln_kv_cache_free_blocks(s->cfg.kv),
        .kv_blocks_total = kc->n_blocks,
        .preemptions = s->preemptions,
        .steps = s->steps,
        .prefix_cache_queries = s->prefix_queries,
        .prefix_cache_hits = s->prefix_hits,
        .kv_blocks_cached = kiln_kv_cache_published_blocks(s->cfg.kv),
        .spec_steps = s->spec_steps,
        .spec_drafted = s->spec_drafted,
        .spec_accepted = s->spec_accepted,
        .spec_emitted = s->spec_emitted,
    };
}
