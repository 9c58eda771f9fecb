/* scheduler_draft.c — speculative decoding with a draft model inside the scheduler. The draft model's
 * KV cache mirrors the target's: the same block size and count, addressed by the same block tables,
 * so that taking, sharing, publishing and giving back blocks, preemption and rollback serve both. Each
 * step, before the target's forward, the draft runs every batch sequence's new tokens (and the one
 * token it may have missed when all the drafts of the last step were accepted), which gives the first
 * draft of each speculating sequence; then one draft forward step per further draft token, over the
 * sequences that still draft. Drafts are greedy at temperature 0 (chosen where the draft ran when the
 * config has draft_sample: only tokens cross); otherwise they are draws whose distributions are kept
 * for the rejection step (scheduler_spec.c). The scheduler holds every block of
 * the draft cache for its whole life, so that the draft forward accepts any block of the target's
 * tables: the target's cache alone keeps the accounts. An early-exit draft (the target's first layers)
 * shares the target's cache (draft_kv == kv): what the target computed is the draft's too, so its first
 * step runs only each speculating sequence's last token, and rejected drafts' keys and values lie past
 * the computed length like the target's. */
#include "llm/scheduler_internal.h"

#include "core/status.h"

#include <stdlib.h>

struct sched_draft {
    bool shared;                    /* the draft's cache is the target's */
    int32_t *tokens, *positions;    /* [max_num_batched_tokens + max_num_seqs] one draft forward's tokens */
    int32_t *seq_start, *ctx_len;   /* [max_num_seqs + 1], [max_num_seqs] */
    int32_t *block_table;           /* [max_num_seqs * max_blocks_per_seq] */
    int32_t *member;                /* [max_num_seqs] the batch index of each sequence of the draft forward */
    int32_t *row0;                  /* [max_num_seqs] the first target logits row of each batch sequence */
    float *logits;                  /* [max_num_seqs * vocab] */
    kiln_sched_sample_row *rows;    /* [max_num_seqs] one draft_sample call's rows */
    int32_t *sampled;               /* [max_num_seqs] its tokens, in call order (-1: drawn on the host) */
    float *q;                       /* [max_rows * vocab] the distribution of each sampled draft, by logits row */
    int32_t *held;                  /* [n_held] the draft cache's blocks, all of them once created */
    int n_held;
};

kiln_status sched_draft_check(const kiln_scheduler_config *c) {
    if (!c->draft_forward && !c->draft_kv) return KILN_OK;
    if (!c->draft_forward || !c->draft_kv)
        return kiln_error(KILN_ERR_INVALID_ARGUMENT, "scheduler: a draft model needs both draft_forward and draft_kv");
    if (c->draft_kv == c->kv) return KILN_OK;
    const kiln_kv_cache_config *kc = kiln_kv_cache_get_config(c->kv), *dc = kiln_kv_cache_get_config(c->draft_kv);
    if (dc->block_size != kc->block_size || dc->n_blocks != kc->n_blocks)
        return kiln_error(KILN_ERR_INVALID_ARGUMENT,
                          "scheduler: the draft model's KV cache has %d blocks of %d tokens; it must match the "
                          "target's %d blocks of %d tokens",
                          dc->n_blocks, dc->block_size, kc->n_blocks, kc->block_size);
    return KILN_OK;
}

kiln_status sched_draft_create(kiln_scheduler *s) {
    if (!s->cfg.draft_forward) return KILN_OK;
    struct sched_draft *d = calloc(1, sizeof *d);
    if (!d) return kiln_error(KILN_ERR_OUT_OF_MEMORY, "scheduler: out of memory for the draft model");
    s->draft = d;
    const size_t seqs = (size_t)s->cfg.max_num_seqs, vocab = (size_t)s->cfg.vocab;
    const size_t toks = (size_t)s->cfg.max_num_batched_tokens + seqs;
    d->tokens = malloc(toks * sizeof *d->tokens);
    d->positions = malloc(toks * sizeof *d->positions);
    d->seq_start = malloc((seqs + 1) * sizeof *d->seq_start);
    d->ctx_len = malloc(seqs * sizeof *d->ctx_len);
    d->block_table = malloc(seqs * (size_t)s->max_blocks_per_seq * sizeof *d->block_table);
    d->member = malloc(seqs * sizeof *d->member);
    d->row0 = malloc(seqs * sizeof *d->row0);
    d->logits = malloc(seqs * vocab * sizeof *d->logits);
    d->rows = malloc(seqs * sizeof *d->rows);
    d->sampled = malloc(seqs * sizeof *d->sampled);
    d->q = malloc((size_t)s->max_rows * vocab * sizeof *d->q);
    const int n_blocks = kiln_kv_cache_get_config(s->cfg.draft_kv)->n_blocks;
    d->shared = s->cfg.draft_kv == s->cfg.kv;
    d->held = malloc((size_t)(d->shared ? 1 : n_blocks) * sizeof *d->held);
    if (!d->tokens || !d->positions || !d->seq_start || !d->ctx_len || !d->block_table || !d->member || !d->row0 ||
        !d->logits || !d->rows || !d->sampled || !d->q || !d->held)
        return kiln_error(KILN_ERR_OUT_OF_MEMORY, "scheduler: cannot allocate the draft model's buffers of %d "
                          "sequences x %d tokens", s->cfg.max_num_seqs, s->cfg.vocab);
    while (!d->shared && d->n_held < n_blocks) {
        int b = kiln_kv_cache_alloc_block(s->cfg.draft_kv);
        if (b < 0)
            return kiln_error(KILN_ERR_INVALID_ARGUMENT, "scheduler: the draft model's KV cache has blocks in use; "
                              "it must be the scheduler's alone");
        d->held[d->n_held++] = b;
    }
    return KILN_OK;
}

void sched_draft_free(kiln_scheduler *s) {
    struct sched_draft *d = s->draft;
    if (!d) return;
    while (d->n_held) kiln_kv_cache_release_block(s->cfg.draft_kv, d->held[--d->n_held]);
    free(d->held);
    free(d->tokens);
    free(d->positions);
    free(d->seq_start);
    free(d->ctx_len);
    free(d->block_table);
    free(d->member);
    free(d->row0);
    free(d->logits);
    free(d->rows);
    free(d->sampled);
    free(d->q);
    free(d);
    s->draft = NULL;
}

const float *sched_draft_q(const kiln_scheduler *s, int row) {
    return s->draft ? s->draft->q + (size_t)row * s->cfg.vocab : NULL;
}

/* Packs draft step j's forward batch: j == 0, every batch sequence's tokens from what the draft has
 * computed to the end of its chunk short of the drafts (sharing the target's cache: each speculating
 * sequence's last token); j > 0, the draft j - 1 of each sequence that drafts more than j tokens.
 * Returns it with its sequence count in b->n_seqs (0: nothing to run). */
static kiln_llm_batch pack_draft_step(kiln_scheduler *s, int j) {
    struct sched_draft *d = s->draft;
    int n = 0, n_tokens = 0, width = 0;
    d->seq_start[0] = 0;
    for (int k = 0; k < s->n_batch; k++) {
        sched_req *r = s->batch[k];
        if ((j > 0 || d->shared) && r->n_draft <= j) continue;
        const int from = j ? r->n_tokens + j - 1 : d->shared ? r->n_tokens - 1 : r->draft_computed;
        const int to = j ? r->n_tokens + j : r->n_computed + r->chunk - r->n_draft;
        for (int t = from; t < to; t++, n_tokens++) {
            d->tokens[n_tokens] = r->tokens[t];
            d->positions[n_tokens] = t;
        }
        d->seq_start[n + 1] = n_tokens;
        d->ctx_len[n] = to;
        d->member[n++] = k;
        r->draft_computed = to;
        if (r->n_blocks > width) width = r->n_blocks;
    }
    for (int i = 0; i < n; i++) {
        const sched_req *r = s->batch[d->member[i]];
        int32_t *row = d->block_table + (size_t)i * width;
        for (int b = 0; b < width; b++) row[b] = b < r->n_blocks ? r->blocks[b] : -1;
    }
    return (kiln_llm_batch){.n_tokens = n_tokens, .tokens = d->tokens, .positions = d->positions, .n_seqs = n,
                            .seq_start = d->seq_start, .ctx_len = d->ctx_len, .block_table = d->block_table,
                            .max_blocks_per_seq = width};
}

/* draft_sample over draft step j's sequences that draft more than j tokens (sampled ones logits_only):
 * their tokens in d->sampled, in the order of those sequences. */
static kiln_status sample_drafts(kiln_scheduler *s, int j, int n_seqs) {
    struct sched_draft *d = s->draft;
    int n = 0;
    for (int i = 0; i < n_seqs; i++) {
        const sched_req *r = s->batch[d->member[i]];
        if (r->n_draft <= j) continue;
        d->rows[n++] = (kiln_sched_sample_row){.row = i, .params = &r->sampling, .prompt = r->tokens,
                                               .n_prompt = r->n_prompt, .generated = r->tokens + r->n_prompt,
                                               .n_generated = r->n_tokens + j - r->n_prompt,
                                               .logits_only = r->sampling.temperature > 0};
    }
    return n ? s->cfg.draft_sample(s->cfg.draft_model, n, d->rows, d->logits, d->sampled) : KILN_OK;
}

/* Draws draft j of every sequence of draft step j that drafts more than j tokens, from its logits row,
 * or takes draft_sample's token (sampled: d->sampled holds them; one out of the vocabulary is refused). */
static kiln_status draw_drafts(kiln_scheduler *s, int j, int n_seqs, bool sampled) {
    struct sched_draft *d = s->draft;
    for (int i = 0, c = 0; i < n_seqs; i++) {
        const int k = d->member[i];
        sched_req *r = s->batch[k];
        if (r->n_draft <= j) continue;
        const int at = r->n_tokens + j;
        const int32_t token = sampled ? d->sampled[c++] : -1;
        if (token >= s->cfg.vocab)
            return kiln_error(KILN_ERR_INTERNAL, "draft model: the sample function gave token %d, outside the "
                              "vocabulary of %d", token, s->cfg.vocab);
        if (token >= 0) {
            r->tokens[at] = token;
            continue;
        }
        kiln_sample smp;
        kiln_status st = kiln_sample_draft(s->sampler, &r->sampling, d->logits + (size_t)i * s->cfg.vocab, r->tokens,
                                           r->n_prompt, r->tokens + r->n_prompt, at - r->n_prompt,
                                           d->q + (size_t)(d->row0[k] + j) * s->cfg.vocab, &smp);
        if (st != KILN_OK) return kiln_error_prefix(st, "draft model");
        r->tokens[at] = smp.token;
    }
    return KILN_OK;
}

kiln_status sched_draft_run(kiln_scheduler *s) {
    struct sched_draft *d = s->draft;
    if (!d) return KILN_OK;
    int steps = 1;
    for (int k = 0, row = 0; k < s->n_batch; k++) {
        d->row0[k] = row;
        row += 1 + s->batch[k]->n_draft;
        if (s->batch[k]->n_draft > steps) steps = s->batch[k]->n_draft;
    }
    for (int j = 0; j < steps; j++) {
        kiln_llm_batch b = pack_draft_step(s, j);
        if (!b.n_seqs) break;
        const bool on_device = s->cfg.draft_sample != NULL;
        kiln_status st = s->cfg.draft_forward(s->cfg.draft_model, s->cfg.draft_kv, &b, on_device ? NULL : d->logits);
        if (st == KILN_OK && on_device) st = sample_drafts(s, j, b.n_seqs);
        if (st != KILN_OK) return kiln_error_prefix(st, "draft model");
        KILN_TRY(draw_drafts(s, j, b.n_seqs, on_device));
    }
    return KILN_OK;
}
