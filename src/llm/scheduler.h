/* scheduler.h — continuous batching over a paged KV cache, as vLLM does it. Requests join a waiting
 * queue; every step builds one ragged batch (llm.h): first one token for each running sequence that
 * is decoding, then prefill chunks of partly prefilled and waiting sequences, within a token budget
 * and a sequence limit. Waiting requests are admitted first come, first served while the KV cache has
 * blocks for their chunk; blocks are taken as sequences grow. When a running sequence needs a block and
 * none is free, the most recently admitted sequence is preempted by recomputation: its blocks are
 * freed and it returns to the front of the waiting queue with the tokens it generated, so its next
 * prefill covers prompt + generated. With prefix caching (kv_cache.h), an admitted request shares the
 * cached blocks of its longest cached prefix and computes from there. After the forward step every sequence whose context is complete
 * is sampled (sampler.h; on the host, or where the forward ran through kiln_sample_fn) and the step
 * reports events: a token, and the end of a request with its
 * reason. With speculative decoding a request may produce several tokens (events) in one step.
 * No request is ever lost: each one ends with exactly one final event.
 *
 * Not thread-safe: one thread calls step, add and finish. */
#ifndef KILN_LLM_SCHEDULER_H
#define KILN_LLM_SCHEDULER_H

#include "kiln/kiln.h"
#include "llm/kv_cache.h"
#include "llm/llm.h"
#include "llm/sampler.h"

#include <stdbool.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* One forward step, with kiln_llm_forward's contract (logits of each sequence's last new token,
 * [n_seqs, vocab]); a function pointer so that tests can run the scheduler on a fake model. */
typedef kiln_status (*kiln_forward_fn)(void *model, kiln_kv_cache *kv, const kiln_llm_batch *b, float *logits);

/* A logits row of the last forward step that needs a token: the next token of a sequence whose
 * context is complete, or, for a sequence that verifies draft tokens, the token after its last token
 * and after each of its drafts (generated then ends with the drafts before the row); its index and
 * kiln_sample_next's arguments (valid during the kiln_sample_fn call). */
typedef struct kiln_sched_sample_row {
    int row;                             /* the step's logits row (kiln_llm_batch_logit_rows' order) */
    const kiln_sampling_params *params;  /* the request's; the draw's stream position is n_generated */
    const int32_t *prompt, *generated;   /* the history for the penalties */
    int n_prompt, n_generated;
    bool logits_only;                    /* no token: the row's logits on the host (a sampled draft's check) */
} kiln_sched_sample_row;

/* Sampling where the forward ran (a GPU), so that only tokens cross to the host. With a sample
 * function set, the scheduler calls forward with logits == NULL (the step's logits stay where the
 * forward made them, and the forward may return before they are computed), then sample once per step
 * with the n_rows >= 1 rows of the batch that need a token, in batch order (rows[i].row increasing).
 * For each row i the function either sets tokens[i] to the token kiln_sample_next gives for that row,
 * bit for bit, or sets tokens[i] = -1 and copies the row's vocab logits to host_logits +
 * rows[i].row * vocab, and the scheduler samples that row on the host as without a sample function.
 * It must hand back every row whose params ask for logprobs (only tokens come back) or that is
 * logits_only, and should hand back the rows it cannot sample (a NaN logit: the host sampler then ends
 * that request alone); the rows of one sequence (one params) are handed back all or none. A greedy
 * sequence's draft tokens are verified against the tokens (speculative decoding on the device: only
 * tokens cross), a sampled one's on the host from its logits_only rows.
 * A failure return means the step is lost: every request of the batch ends with its message. */
typedef kiln_status (*kiln_sample_fn)(void *model, int n_rows, const kiln_sched_sample_row *rows, float *host_logits,
                                      int32_t *tokens);

typedef struct kiln_scheduler_config {
    kiln_forward_fn forward;    /* required */
    kiln_sample_fn sample;      /* NULL: forward returns logits to the host and the host samples */
    void *model;                /* passed to forward and sample */
    kiln_kv_cache *kv;          /* borrowed, and used by this scheduler alone; its block_size is the page size */
    int vocab;                  /* logits per sequence */
    int max_model_len;          /* a sequence's context limit (prompt + generated), e.g. the model's max_pos */
    int max_num_batched_tokens; /* tokens in one step (0: 2048); at least max_num_seqs */
    int max_num_seqs;           /* running sequences (0: 256) */
    /* Optional: called during step, with the request's user pointer, when a request is first admitted
     * into a batch (not again after a preemption), before the forward step runs. */
    void (*on_admit)(void *user);
    /* Prefix caching (kv_cache.h) is on unless this is set: a request admitted from the waiting queue
     * starts after the longest run of its full blocks that the cache holds (published by earlier
     * requests, or by itself before a preemption), and its blocks are published as they fill. */
    bool no_prefix_cache;
    /* Speculative decoding by prompt lookup (scheduler_spec.c): a decoding request that asks for it
     * proposes up to draft_tokens tokens (0: nobody speculates) copied from what followed the latest
     * earlier occurrence of its last n tokens (n from ngram_max down to ngram_min; 0: 3 and 1) in its
     * prompt + output, and the step verifies them in one forward. The tokens are those of plain
     * decoding: greedy ones identical, sampled ones from the same distribution (rejection sampling). */
    int draft_tokens;
    int ngram_max, ngram_min;
    /* Speculative decoding with a draft model (scheduler_draft.c) instead of prompt lookup, when
     * draft_forward is set: a smaller model with the same vocabulary proposes each speculating
     * request's draft_tokens tokens, one draft forward step each (greedy, or sampled keeping its
     * distribution for the rejection step). Its cache draft_kv (borrowed) has kv's block_size and
     * n_blocks and is addressed by the same block tables, so that blocks, preemption and prefix caching
     * serve both models (the scheduler holds all of draft_kv's blocks: it must be unused); the draft runs
     * every sequence's chunk with the target. draft_kv may be kv itself: a draft that is the target's
     * first layers (kiln_llm_batch.exit_layers), whose keys and values are the target's; it then runs
     * only the speculating sequences' last tokens and drafts. */
    kiln_forward_fn draft_forward;
    void *draft_model;
    kiln_kv_cache *draft_kv;
    /* Optional, with draft_forward: sample's counterpart for the draft (called with draft_model after
     * draft_forward ran without logits), a row per drafting sequence: greedy drafts are its tokens, a
     * sampled draft's row comes back logits_only for the host draw that keeps its distribution. */
    kiln_sample_fn draft_sample;
} kiln_scheduler_config;

typedef struct kiln_request_params {
    const int32_t *prompt; /* copied; at least one token, each in [0, vocab), fewer than max_model_len */
    int n_prompt;
    int max_tokens;        /* tokens to generate at most, >= 1 */
    kiln_sampling_params sampling;
    const int32_t *stop_ids; /* copied; generation ends after producing one of them (e.g. eos) */
    int n_stop_ids;
    void *user;              /* returned in every event of the request */
    bool speculate;          /* draft tokens (kiln_scheduler_config.draft_tokens) by prompt lookup or draft model */
} kiln_request_params;

typedef enum kiln_finish_reason {
    KILN_FINISH_NONE = 0,    /* the request goes on */
    KILN_FINISH_LENGTH,      /* max_tokens generated, or the context reached max_model_len */
    KILN_FINISH_STOP_TOKEN,  /* the last token is one of stop_ids */
    KILN_FINISH_STOP_STRING, /* the caller saw a stop string (kiln_scheduler_finish) */
    KILN_FINISH_ABORTED,     /* the caller aborted it (kiln_scheduler_finish) */
    KILN_FINISH_ERROR,       /* it cannot run (too large for the cache) or its forward step failed */
} kiln_finish_reason;

/* "length", "stop_token", "stop_string", "aborted", "error" ("none" for KILN_FINISH_NONE). */
const char *kiln_finish_reason_name(kiln_finish_reason r);

typedef struct kiln_sched_event {
    uint64_t id;
    void *user;
    kiln_sample sample;        /* the new token and its log-probabilities; sample.token == -1 when none */
    int n_generated;           /* tokens generated so far, including this one */
    int preemptions;           /* times the request was preempted so far */
    kiln_finish_reason finish; /* not NONE: the request's last event; it is gone after this step */
    const char *message;       /* KILN_FINISH_ERROR: why; otherwise NULL */
} kiln_sched_event;

typedef struct kiln_scheduler_stats {
    int running, waiting;
    int kv_blocks_used, kv_blocks_total;
    uint64_t preemptions; /* sequences preempted since creation */
    uint64_t steps;       /* forward steps run */
    /* prefix caching: tokens of the requests admitted from the waiting queue (again after a
     * preemption), and how many of those were found in the cache */
    uint64_t prefix_cache_queries, prefix_cache_hits;
    int kv_blocks_cached; /* published blocks (in use or idle; the idle ones count as free) */
    /* speculative decoding: sequence-steps that verified drafts, draft tokens proposed and accepted in
     * them, and the tokens those steps produced (accepted drafts + one sampled token each, unless the
     * request ended first): acceptance rate = accepted / drafted, tokens per step = emitted / steps */
    uint64_t spec_steps, spec_drafted, spec_accepted, spec_emitted;
} kiln_scheduler_stats;

typedef struct kiln_scheduler kiln_scheduler;

/* KILN_ERR_INVALID_ARGUMENT names a missing or out-of-range config field. Caller owns *out. */
kiln_status kiln_scheduler_create(const kiln_scheduler_config *cfg, kiln_scheduler **out);
/* Frees the scheduler and gives back every block it holds; accepts NULL. */
void kiln_scheduler_free(kiln_scheduler *s);

/* Queues a request and returns its id (> 0). Invalid parameters (empty prompt, a token outside the
 * vocabulary, a prompt of max_model_len tokens or more, max_tokens < 1, sampling parameters) are
 * KILN_ERR_INVALID_ARGUMENT and queue nothing. A request whose prompt + max_tokens needs more KV
 * blocks than the whole cache holds is accepted and ends at the next step with a KILN_FINISH_ERROR
 * event saying so. */
kiln_status kiln_scheduler_add(kiln_scheduler *s, const kiln_request_params *r, uint64_t *id);

/* Ends a waiting or running request now, freeing its blocks; why is KILN_FINISH_ABORTED or
 * KILN_FINISH_STOP_STRING. Its final event (no token) comes with the next step. An id that is unknown
 * or already finished is KILN_ERR_INVALID_ARGUMENT. Safe while reading the last step's events. */
kiln_status kiln_scheduler_finish(kiln_scheduler *s, uint64_t id, kiln_finish_reason why);

/* Runs one step (or none, when nothing can run) and returns its events in *events[0, *n_events),
 * valid until the next step: the final events of requests ended since the last step, then one event
 * per sampled sequence. A failed forward step (or sample function) ends every request of its batch
 * with a KILN_FINISH_ERROR event carrying the message, and returns that status (the events are
 * still returned); other requests go on at the next step. A sampling error (a NaN logit) ends that
 * request alone the same way. */
kiln_status kiln_scheduler_step(kiln_scheduler *s, const kiln_sched_event **events, int *n_events);

/* True while some request is waiting, running, or has a final event not yet returned by step. */
bool kiln_scheduler_has_work(const kiln_scheduler *s);
kiln_scheduler_stats kiln_scheduler_get_stats(const kiln_scheduler *s);

#ifdef __cplusplus
}
#endif
#endif
