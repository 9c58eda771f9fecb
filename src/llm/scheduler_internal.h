/* scheduler_internal.h — what scheduler.c (requests: add, finish, lifetime) and scheduler_step.c
 * (building and running one batch) share: the request record and the scheduler's lists. */
#ifndef KILN_LLM_SCHEDULER_INTERNAL_H
#define KILN_LLM_SCHEDULER_INTERNAL_H

#include "llm/scheduler.h"

typedef struct sched_req {
    uint64_t id;
    void *user;
    kiln_sampling_params sampling;
    int32_t *tokens;    /* [max_total]: the prompt, then the generated tokens */
    int n_prompt, n_tokens;
    int max_total;      /* n_prompt + max_tokens, at most max_model_len: the request ends there */
    int32_t *stop_ids;  /* [n_stop_ids] */
    int n_stop_ids;
    int n_computed;     /* tokens whose keys and values are in the cache */
    int32_t *blocks;    /* [max_blocks] cache blocks of tokens [0, n_blocks * block_size) */
    int n_blocks, max_blocks;
    uint64_t *hashes;   /* [max_blocks] prefix-cache hashes of its first n_hashed full blocks */
    int n_hashed;
    int n_published;    /* its first blocks that are published (or were shared from the cache) */
    int chunk;          /* tokens scheduled in the step being built; 0 = not scheduled */
    bool speculate;     /* proposes draft tokens when decoding */
    int n_draft;        /* draft tokens in this step's chunk, at tokens[n_tokens ..) */
    int draft_computed; /* tokens whose keys and values are in the draft model's cache (<= n_computed) */
    bool ended;         /* moved to the done list during this step */
    bool delivered;     /* its final event was returned by a step: freed at the next one */
    bool admitted;      /* it has been in a batch (on_admit was called) */
    int preemptions;    /* times it was preempted */
    char message[256];  /* KILN_FINISH_ERROR's message */
} sched_req;

struct kiln_scheduler {
    kiln_scheduler_config cfg; /* with defaults filled in */
    int block_size;
    kiln_sampler *sampler;
    uint64_t next_id, preemptions, steps;
    uint64_t prefix_queries, prefix_hits; /* tokens of admitted requests / of those found cached */
    uint64_t spec_steps, spec_drafted, spec_accepted, spec_emitted; /* kiln_scheduler_stats' */
    int max_rows; /* logits rows of one step: max_num_seqs, or more with draft tokens */

    /* Every live request is in exactly one list. `cap` bounds the live requests that the lists,
     * pending and events can hold, so that step and finish never allocate. */
    sched_req **running; /* [max_num_seqs], in admission order */
    sched_req **waiting; /* [cap], the front first */
    sched_req **done;    /* [cap], ended; freed once their final event was returned */
    int n_running, n_waiting, n_done, cap;
    kiln_sched_event *pending; /* [cap] final events of requests ended between steps */
    kiln_sched_event *events;  /* [cap + max_num_seqs] the last step's events */
    int n_pending, n_events;

    /* the step being built: batch[i] owns the i-th sequence of the forward batch */
    sched_req **batch; /* [max_num_seqs] */
    int n_batch;
    bool preempted; /* a sequence was preempted in this step: admit nobody */
    int max_blocks_per_seq;
    int32_t *tokens, *positions;  /* [max_num_batched_tokens] */
    int32_t *seq_start, *ctx_len; /* [max_num_seqs + 1], [max_num_seqs] */
    int32_t *n_logits;            /* [max_num_seqs] logits rows per sequence of a step with drafts */
    int32_t *block_table;         /* [max_num_seqs * max_blocks_per_seq] */
    float *logits;                /* [max_rows * vocab]: every row, or those a sample function hands back */
    kiln_sched_sample_row *rows;  /* [max_rows] the rows given to the sample function */
    int32_t *sampled;             /* [max_rows] its tokens (-1: sample on the host) */
    struct sched_draft *draft;    /* the draft model's step buffers (scheduler_draft.c); NULL without one */
};

/* Frees r's memory (not its blocks); accepts NULL. */
void sched_req_free(sched_req *r);
/* Gives back every block r holds; it no longer has anything cached. */
void sched_release_blocks(kiln_scheduler *s, sched_req *r);
/* Ends r (already out of the running and waiting lists, or about to leave running): frees its blocks,
 * keeps `message` (KILN_FINISH_ERROR's; NULL otherwise) and moves it to the done list. */
void sched_end(kiln_scheduler *s, sched_req *r, const char *message);
/* Prefix caching (scheduler_prefix.c). The blocks of r (waiting, nothing computed) cached for its
 * first tokens, at most all but its last token: their count, stored in r->blocks but not yet taken;
 * *idle gets how many of them are cached with no reference (taking them uses up free blocks). 0 when
 * prefix caching is off. */
int sched_prefix_match(kiln_scheduler *s, sched_req *r, int *idle);
/* Takes the first `hit` blocks that sched_prefix_match found: r starts with them computed. */
void sched_prefix_take(kiln_scheduler *s, sched_req *r, int hit);
/* Publishes r's full blocks computed since the last call (no-op when prefix caching is off). */
void sched_prefix_publish(kiln_scheduler *s, sched_req *r);
/* r's event: the sampled token (sample NULL: none, token -1) and why it ended (KILN_FINISH_NONE: it
 * goes on). The message points into r, which lives until the step after the event is returned. */
kiln_sched_event sched_event(const sched_req *r, const kiln_sample *sample, kiln_finish_reason why);
/* Appends r's new token and reports it, ending r at a stop token or its length (scheduler_step.c). */
void sched_accept_token(kiln_scheduler *s, sched_req *r, const kiln_sample *smp);
/* Speculative decoding (scheduler_spec.c). Writes `max` draft tokens for r (decoding) at
 * r->tokens[r->n_tokens ..) by prompt lookup and returns their count: max, or 0 when no n-gram
 * matched or max < 1. */
int sched_spec_propose(const kiln_scheduler *s, sched_req *r, int max);
/* After the forward step of r's chunk (its last token and r->n_draft drafts, whose logits rows start
 * at `rows`): accepts the drafts that plain decoding agrees with and one token after them, as events,
 * sets what is computed and gives back the blocks of rejected drafts. q: the drafts' distributions
 * (sched_draft_q), or NULL for point masses (prompt lookup, greedy drafts). tokens: NULL, or (a greedy
 * r, sampled where the forward ran) the token of each of r's rows, compared instead of the rows. */
void sched_spec_verify(kiln_scheduler *s, sched_req *r, const float *rows, const float *q, const int32_t *tokens);
/* Draft model (scheduler_draft.c). Checks the config's draft fields (none set is fine). */
kiln_status sched_draft_check(const kiln_scheduler_config *c);
/* Allocates s->draft when the config has a draft model. */
kiln_status sched_draft_create(kiln_scheduler *s);
void sched_draft_free(kiln_scheduler *s); /* accepts s->draft == NULL */
/* Before the target's forward step: runs the draft model over every batch sequence's new tokens (and
 * any it missed), then one more step per draft token, writing each speculating sequence's drafts at
 * tokens[n_tokens ..) (and, sampled, their distributions for sched_draft_q). No-op without a draft
 * model; a failure (forward step or sampling) is returned and loses the step. */
kiln_status sched_draft_run(kiln_scheduler *s);
/* The draft distributions of the batch sequence whose logits rows start at `row` (NULL without a draft
 * model): q of draft j at + j * vocab. */
const float *sched_draft_q(const kiln_scheduler *s, int row);

#endif
