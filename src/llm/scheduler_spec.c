/* scheduler_spec.c — speculative decoding by prompt lookup inside the scheduler: a decoding request
 * proposes draft tokens copied from what followed an earlier occurrence of its last n tokens, the
 * step runs its last token and the drafts as one chunk (logits for each), and verification keeps the
 * drafts that plain decoding agrees with (greedy: the same argmax; sampled: rejection sampling against
 * a point-mass draft), then one more token from the first rejected position (or after the last draft).
 * The keys and values of rejected drafts stay in the cache past the computed length, unread, and are
 * overwritten later; whole blocks they took are given back. Drafts of a draft model
 * (scheduler_draft.c) are verified the same way, against their distribution when sampled. Greedy
 * drafts may be verified against tokens chosen where the forward ran (the sample function's). */
#include "llm/scheduler_internal.h"

#include "core/status.h"

/* The start of the latest earlier occurrence of tokens[n_tokens - n, n_tokens) (one that ends before
 * the last token, so that it has a successor), or -1. */
static int latest_match(const int32_t *tokens, int n_tokens, int n) {
    const int32_t *tail = tokens + n_tokens - n;
    for (int at = n_tokens - n - 1; at >= 0; at--) {
        int j = 0;
        while (j < n && tokens[at + j] == tail[j]) j++;
        if (j == n) return at;
    }
    return -1;
}

int sched_spec_propose(const kiln_scheduler *s, sched_req *r, int max) {
    const int hi = s->cfg.ngram_max, lo = s->cfg.ngram_min;
    if (max < 1) return 0;
    for (int n = hi < r->n_tokens ? hi : r->n_tokens - 1; n >= lo; n--) {
        int at = latest_match(r->tokens, r->n_tokens, n);
        if (at < 0) continue;
        /* the match's successors; past the end of the history they are the drafts just written, so
         * that a repeating pattern continues */
        for (int k = 0; k < max; k++) r->tokens[r->n_tokens + k] = r->tokens[at + n + k];
        return max;
    }
    return 0;
}

/* Gives back r's blocks past those that hold its n_tokens tokens (the next step computes the last). */
static void drop_spare_blocks(kiln_scheduler *s, sched_req *r) {
    int keep = (r->n_tokens + s->block_size - 1) / s->block_size;
    while (r->n_blocks > keep) kiln_kv_cache_release_block(s->cfg.kv, r->blocks[--r->n_blocks]);
}

/* The token the sample function chose for a row, checked against the vocabulary. */
static kiln_status device_token(const kiln_scheduler *s, int32_t token, kiln_sample *smp) {
    if (token >= s->cfg.vocab)
        return kiln_error(KILN_ERR_INTERNAL, "scheduler: the sample function gave token %d, outside the vocabulary "
                          "of %d", token, s->cfg.vocab);
    *smp = (kiln_sample){.token = token};
    return KILN_OK;
}

void sched_spec_verify(kiln_scheduler *s, sched_req *r, const float *rows, const float *q, const int32_t *tokens) {
    const int drafted = r->n_draft, base = r->n_tokens;
    r->n_draft = 0;
    s->spec_steps++;
    s->spec_drafted += (uint64_t)drafted;
    for (int j = 0; j <= drafted; j++) {
        /* the chunk put tokens[base - 1 .. base - 1 + j] in the cache: the last token and j accepted drafts */
        r->n_computed = base + j;
        const float *row = rows + (size_t)j * s->cfg.vocab;
        kiln_sample smp;
        bool accepted = false;
        kiln_status st;
        const int32_t *gen = r->tokens + r->n_prompt;
        const int n_gen = r->n_tokens - r->n_prompt;
        if (tokens) {
            st = device_token(s, tokens[j], &smp);
            accepted = j < drafted && smp.token == r->tokens[base + j];
        } else if (j < drafted && q)
            st = kiln_sample_verify_draft_dist(s->sampler, &r->sampling, row, r->tokens, r->n_prompt, gen, n_gen,
                                               r->tokens[base + j], q + (size_t)j * s->cfg.vocab, &smp, &accepted);
        else if (j < drafted)
            st = kiln_sample_verify_draft(s->sampler, &r->sampling, row, r->tokens, r->n_prompt, gen, n_gen,
                                          r->tokens[base + j], &smp, &accepted);
        else
            st = kiln_sample_next(s->sampler, &r->sampling, row, r->tokens, r->n_prompt, gen, n_gen, &smp);
        if (st != KILN_OK) {
            sched_end(s, r, kiln_last_error());
            s->events[s->n_events++] = sched_event(r, NULL, KILN_FINISH_ERROR);
            return;
        }
        s->spec_emitted++;
        s->spec_accepted += accepted;
        sched_accept_token(s, r, &smp);
        if (r->ended || !accepted) break;
    }
    if (r->ended) return;
    if (r->draft_computed > r->n_computed) r->draft_computed = r->n_computed; /* the draft's rejected ones */
    sched_prefix_publish(s, r);
    drop_spare_blocks(s, r);
}
