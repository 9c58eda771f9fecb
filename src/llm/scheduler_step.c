/* scheduler_step.c — one scheduler step: build the batch (decodes, then prefill chunks of running
 * sequences, then admissions from the waiting queue), take KV blocks as sequences grow and preempt by
 * recomputation when none are left (admissions start after their cached prefix), run the forward step, sample every sequence whose context is
 * complete (on the host, or through the config's sample function where the forward ran), and end the
 * ones that reached a stop token or their length (stop tokens are checked here, on the host). */
#include "llm/scheduler_internal.h"

#include "core/status.h"

#include <stdio.h>
#include <string.h>

static int min_int(int a, int b) { return a < b ? a : b; }

/* Takes free blocks so that r can hold up to `want` more tokens; returns how many it can hold (<= want),
 * 0 when it has no room left in its last block and no block is free. */
static int take_blocks(kiln_scheduler *s, sched_req *r, int want) {
    int room = r->n_blocks * s->block_size - r->n_computed;
    while (room < want && r->n_blocks < r->max_blocks) {
        int b = kiln_kv_cache_alloc_block(s->cfg.kv);
        if (b < 0) break;
        r->blocks[r->n_blocks++] = b;
        room += s->block_size;
    }
    return min_int(room, want);
}

/* Preempts running[j] by recomputation: frees its blocks and puts it at the front of the waiting
 * queue with its generated tokens (its next prefill covers prompt + generated). */
static void preempt(kiln_scheduler *s, int j) {
    sched_req *r = s->running[j];
    sched_release_blocks(s, r);
    memmove(s->running + j, s->running + j + 1, (size_t)(s->n_running - j - 1) * sizeof *s->running);
    s->n_running--;
    memmove(s->waiting + 1, s->waiting, (size_t)s->n_waiting * sizeof *s->waiting);
    s->waiting[0] = r;
    s->n_waiting++;
    s->preemptions++;
    r->preemptions++;
    s->preempted = true;
}

/* Gives running[i] blocks for up to `want` tokens, preempting the most recently admitted sequences not
 * yet in this step's batch (running[i] itself last) while it can hold none. Returns the tokens it can
 * hold; 0 when running[i] itself was preempted. Sequences before i are older than running[i], so the
 * victims are at i or after. */
static int reserve(kiln_scheduler *s, int i, int want) {
    sched_req *r = s->running[i];
    for (;;) {
        int got = take_blocks(s, r, want);
        if (got > 0) return got;
        int j = s->n_running - 1;
        while (j > i && s->running[j]->chunk) j--;
        preempt(s, j);
        if (j == i) return 0;
    }
}

static void schedule(kiln_scheduler *s, sched_req *r, int chunk) {
    r->chunk = chunk;
    s->batch[s->n_batch++] = r;
}

/* Draft tokens r may propose now: the config's, within the budget that the decodes not yet scheduled
 * leave, and short of r's last token (the verified step adds one token after the accepted drafts). */
static int draft_room(const kiln_scheduler *s, const sched_req *r, int spare) {
    if (!r->speculate || s->cfg.draft_tokens < 1) return 0;
    return min_int(min_int(s->cfg.draft_tokens, spare), r->max_total - r->n_tokens - 1);
}

/* Schedules running sequences: decodes (one token, plus any draft tokens) when `decodes`, else
 * prefill chunks. */
static void schedule_running(kiln_scheduler *s, bool decodes, int *budget) {
    int decoding = 0; /* decodes left to schedule: draft tokens never take their budget */
    for (int i = 0; decodes && i < s->n_running; i++)
        decoding += s->running[i]->n_tokens - s->running[i]->n_computed == 1;
    for (int i = 0; i < s->n_running && *budget > 0;) {
        sched_req *r = s->running[i];
        int need = r->n_tokens - r->n_computed;
        if (r->chunk || (need == 1) != decodes) {
            i++;
            continue;
        }
        int room = decodes ? draft_room(s, r, *budget - decoding) : 0;
        int drafts = s->draft ? room : sched_spec_propose(s, r, room); /* a draft model writes them later */
        int got = reserve(s, i, min_int(need + drafts, *budget));
        if (!got) { /* running[i] was preempted: the next sequence moved into slot i */
            decoding -= decodes;
            continue;
        }
        schedule(s, r, got);
        r->n_draft = decodes ? got - 1 : 0;
        decoding -= decodes;
        *budget -= got;
        i++;
    }
}

/* Admits waiting requests first come, first served while there is budget, a sequence slot, and free
 * blocks for the whole chunk (after the cached prefix, whose idle blocks count against the free ones). */
static void admit_waiting(kiln_scheduler *s, int *budget) {
    while (s->n_waiting && s->n_running < s->cfg.max_num_seqs && *budget > 0) {
        sched_req *r = s->waiting[0];
        int idle, hit = sched_prefix_match(s, r, &idle);
        int chunk = min_int(r->n_tokens - hit * s->block_size, *budget);
        if ((chunk + s->block_size - 1) / s->block_size + idle > kiln_kv_cache_free_blocks(s->cfg.kv)) break;
        sched_prefix_take(s, r, hit);
        take_blocks(s, r, chunk);
        memmove(s->waiting, s->waiting + 1, (size_t)(s->n_waiting - 1) * sizeof *s->waiting);
        s->n_waiting--;
        s->running[s->n_running++] = r;
        schedule(s, r, chunk);
        if (!r->admitted && s->cfg.on_admit) s->cfg.on_admit(r->user);
        r->admitted = true;
        *budget -= chunk;
    }
}

static void build_batch(kiln_scheduler *s) {
    int budget = s->cfg.max_num_batched_tokens;
    s->n_batch = 0;
    s->preempted = false;
    schedule_running(s, true, &budget);
    schedule_running(s, false, &budget);
    if (!s->preempted) admit_waiting(s, &budget);
}

/* Packs the batch into the forward step's arrays (with one logits row per token of a sequence that
 * carries draft tokens). */
static kiln_llm_batch pack_batch(kiln_scheduler *s) {
    int n_tokens = 0, width = 0;
    bool drafts = false;
    for (int k = 0; k < s->n_batch; k++) width = s->batch[k]->n_blocks > width ? s->batch[k]->n_blocks : width;
    s->seq_start[0] = 0;
    for (int k = 0; k < s->n_batch; k++) {
        const sched_req *r = s->batch[k];
        for (int j = 0; j < r->chunk; j++, n_tokens++) {
            s->tokens[n_tokens] = r->tokens[r->n_computed + j];
            s->positions[n_tokens] = r->n_computed + j;
        }
        s->seq_start[k + 1] = n_tokens;
        s->ctx_len[k] = r->n_computed + r->chunk;
        s->n_logits[k] = 1 + r->n_draft;
        drafts = drafts || r->n_draft;
        int32_t *row = s->block_table + (size_t)k * width;
        memcpy(row, r->blocks, (size_t)r->n_blocks * sizeof *row);
        for (int j = r->n_blocks; j < width; j++) row[j] = -1;
    }
    return (kiln_llm_batch){.n_tokens = n_tokens, .tokens = s->tokens, .positions = s->positions,
                            .n_seqs = s->n_batch, .seq_start = s->seq_start, .ctx_len = s->ctx_len,
                            .block_table = s->block_table, .max_blocks_per_seq = width,
                            .n_logits = drafts ? s->n_logits : NULL};
}

static kiln_finish_reason stop_reason(const sched_req *r, int32_t token) {
    for (int i = 0; i < r->n_stop_ids; i++)
        if (r->stop_ids[i] == token) return KILN_FINISH_STOP_TOKEN;
    return r->n_tokens == r->max_total ? KILN_FINISH_LENGTH : KILN_FINISH_NONE;
}

void sched_accept_token(kiln_scheduler *s, sched_req *r, const kiln_sample *smp) {
    r->tokens[r->n_tokens++] = smp->token;
    kiln_finish_reason why = stop_reason(r, smp->token);
    if (why != KILN_FINISH_NONE) sched_end(s, r, NULL);
    s->events[s->n_events++] = sched_event(r, smp, why);
}

/* Samples r's next token from its logits row on the host, appends it and reports it. */
static void sample_one(kiln_scheduler *s, sched_req *r, const float *logits) {
    kiln_sample smp;
    const int32_t *gen = r->tokens + r->n_prompt;
    kiln_status st = kiln_sample_next(s->sampler, &r->sampling, logits, r->tokens, r->n_prompt, gen,
                                      r->n_tokens - r->n_prompt, &smp);
    if (st != KILN_OK) {
        sched_end(s, r, kiln_last_error());
        s->events[s->n_events++] = sched_event(r, NULL, KILN_FINISH_ERROR);
        return;
    }
    sched_accept_token(s, r, &smp);
}

/* r's token from the sample function (tokens < 0 were handed back: sampled on the host from row). */
static void take_token(kiln_scheduler *s, sched_req *r, int32_t token, const float *row) {
    if (token < 0 || r->sampling.logprobs) {
        sample_one(s, r, row);
    } else if (token >= s->cfg.vocab) {
        char msg[128];
        snprintf(msg, sizeof msg, "scheduler: the sample function gave token %d, outside the vocabulary of %d", token,
                 s->cfg.vocab);
        sched_end(s, r, msg);
        s->events[s->n_events++] = sched_event(r, NULL, KILN_FINISH_ERROR);
    } else {
        kiln_sample smp = {.token = token};
        sched_accept_token(s, r, &smp);
    }
}

/* The sample function's rows: of the batch's sequences whose context is complete after the step, the
 * last row, or every row of one that verifies drafts (logits_only when it samples). */
static int rows_to_sample(kiln_scheduler *s) {
    int n = 0;
    for (int k = 0, row0 = 0; k < s->n_batch; row0 += 1 + s->batch[k++]->n_draft) {
        const sched_req *r = s->batch[k];
        if (r->n_computed + r->chunk - r->n_draft != r->n_tokens) continue;
        for (int j = 0; j <= r->n_draft; j++)
            s->rows[n++] = (kiln_sched_sample_row){.row = row0 + j, .params = &r->sampling, .prompt = r->tokens,
                                                   .n_prompt = r->n_prompt, .generated = r->tokens + r->n_prompt,
                                                   .n_generated = r->n_tokens - r->n_prompt + j,
                                                   .logits_only = r->n_draft && r->sampling.temperature > 0};
    }
    return n;
}

/* Whether the sample function handed back r's rows from `first` on (r verifies drafts): they are then
 * verified on the host. */
static bool handed_back(const kiln_scheduler *s, const sched_req *r, int first) {
    for (int j = 0; j <= r->n_draft; j++)
        if (s->sampled[first + j] < 0) return true;
    return false;
}

/* Drops the sequences that ended in this step from the running list. */
static void remove_ended(kiln_scheduler *s) {
    int m = 0;
    for (int i = 0; i < s->n_running; i++)
        if (!s->running[i]->ended) s->running[m++] = s->running[i];
    s->n_running = m;
}

/* The forward step, then sampling and the verification of drafts: on the host from s->logits, or by the
 * sample function (the rows it hands back on the host). */
static kiln_status run_batch(kiln_scheduler *s) {
    kiln_status st = sched_draft_run(s);
    kiln_llm_batch b = pack_batch(s);
    const bool on_device = s->cfg.sample != NULL;
    if (st == KILN_OK) st = s->cfg.forward(s->cfg.model, s->cfg.kv, &b, on_device ? NULL : s->logits);
    s->steps++;
    if (st == KILN_OK && on_device) {
        int n_rows = rows_to_sample(s);
        if (n_rows) st = s->cfg.sample(s->cfg.model, n_rows, s->rows, s->logits, s->sampled);
    }
    for (int k = 0, i = 0, row0 = 0; k < s->n_batch; k++) {
        sched_req *r = s->batch[k];
        int chunk = r->chunk;
        r->chunk = 0;
        const float *row = s->logits + (size_t)row0 * s->cfg.vocab;
        const float *q = sched_draft_q(s, row0);
        row0 += b.n_logits ? b.n_logits[k] : 1;
        if (st != KILN_OK) {
            r->n_draft = 0;
            sched_end(s, r, kiln_last_error());
            s->events[s->n_events++] = sched_event(r, NULL, KILN_FINISH_ERROR);
            continue;
        }
        if (r->n_draft) {
            const bool tokens = on_device && !handed_back(s, r, i);
            const int first = i;
            i += on_device ? 1 + r->n_draft : 0;
            sched_spec_verify(s, r, row, r->sampling.temperature > 0 ? q : NULL, tokens ? s->sampled + first : NULL);
            continue;
        }
        r->n_computed += chunk;
        sched_prefix_publish(s, r);
        if (r->n_computed != r->n_tokens) continue;
        if (on_device) take_token(s, r, s->sampled[i++], row);
        else sample_one(s, r, row);
    }
    remove_ended(s);
    return st;
}

kiln_status kiln_scheduler_step(kiln_scheduler *s, const kiln_sched_event **events, int *n_events) {
    int m = 0; /* free the requests whose final event the last step returned */
    for (int i = 0; i < s->n_done; i++) {
        sched_req *r = s->done[i];
        if (r->delivered) sched_req_free(r);
        else s->done[m++] = r;
    }
    s->n_done = m;
    if (s->n_pending) memcpy(s->events, s->pending, (size_t)s->n_pending * sizeof *s->events);
    s->n_events = s->n_pending;
    s->n_pending = 0;
    build_batch(s);
    kiln_status st = s->n_batch ? run_batch(s) : KILN_OK;
    for (int i = 0; i < s->n_done; i++) s->done[i]->delivered = true;
    *events = s->events;
    *n_events = s->n_events;
    return st;
}
