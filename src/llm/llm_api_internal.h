/* llm_api_internal.h — what the files behind kiln/kiln_llm.h share: the kiln_llm instance (the model,
 * its forward, KV cache and scheduler, owned by the engine-loop thread; the inbox, request table and
 * statistics, guarded by one mutex) and the per-request state.
 *
 * Threads: the engine loop (llm_loop.c) alone touches the scheduler and the fields marked "loop";
 * fields marked "mu" are read and written under kiln_llm.mu; the rest is fixed once set. */
#ifndef KILN_LLM_API_INTERNAL_H
#define KILN_LLM_API_INTERNAL_H

#include "kiln/kiln_llm.h"

#include "core/strbuf.h"
#include "llm/llm_engine.h"
#include "llm/llm_runner.h"
#include "llm/scheduler.h"
#include "llm/tokenizer.h"

#include <pthread.h>
#include <time.h>
#include <stdbool.h>
#include <stdint.h>

#define LLM_MAX_EOS (KILN_LLM_MAX_EOS + 2) /* the tokenizer's, config.json's and generation_config.json's */
#define LLM_HASH_BUCKETS 1024

/* One queued event of a polled request: the event and the memory its pointers borrow. */
typedef struct llm_event_rec {
    struct llm_event_rec *next;
    kiln_llm_event ev;
    kiln_strbuf text;
    kiln_token_logprob top[KILN_MAX_TOP_LOGPROBS];
    char message[256];
} llm_event_rec;

/* A polled request's event of the step being delivered (its text in the request's delta). */
typedef struct llm_step_event {
    struct llm_req *r;
    kiln_llm_event ev;
} llm_step_event;

typedef struct llm_req {
    kiln_llm *llm;
    uint64_t id;
    struct llm_req *hnext;          /* mu: the request table's chain */
    struct llm_req *qnext;          /* mu: the inbox */
    struct llm_req *prev, *next;    /* loop: the live list, in submission order */

    /* the request, copied at submission */
    void *user;
    kiln_llm_event_fn on_event;
    int32_t *prompt;
    int n_prompt, max_tokens;
    kiln_sampling_params sampling;
    bool speculate;           /* draft tokens when the model speculates (not no_speculation) */
    char **stop;
    int n_stop;
    int32_t *stop_ids;              /* the eos ids (unless ignore_eos) and the request's stop_ids */
    int n_stop_ids;
    bool keep_special;
    double t_submit;                /* ms, CLOCK_MONOTONIC */

    /* loop */
    uint64_t sched_id;
    bool in_sched;                  /* the scheduler holds it (its final event not yet seen) */
    bool admitted;                  /* it has been in a forward step */
    bool final_sent;                /* its final event went out */
    kiln_llm_finish ending;         /* why the loop is ending it this turn (cancel, timeout), else NONE */
    kiln_tokenizer_stream stream;
    kiln_strbuf held;               /* decoded text not sent yet (it could start a stop string) */
    kiln_strbuf delta;              /* the text of the event being made */
    kiln_llm_usage usage;
    bool pending;                   /* its event of this step waits in the step's batch (polled) */

    /* mu */
    bool cancel_requested, released, ended, loop_done, queued; /* queued: counted in the waiting totals */
    llm_event_rec *head, *tail;     /* unread events (polled) */
    llm_event_rec *current;         /* the last event read: its pointers stay valid until the next read */
    pthread_cond_t cv;              /* signalled when an event is queued (polled) */
} llm_req;

struct kiln_llm {
    /* the model, fixed once open */
    kiln_llm_bundle bundle;         /* model and tokenizer (none for random weights); on cuda the model is
                                       released once on the device (bundle.model NULL) */
    llm_runner *runner;
    kiln_kv_cache *kv;
    kiln_scheduler *sched;          /* loop */
    kiln_llm_bundle draft_bundle;   /* the draft model (kiln_llm_options.draft; llm_draft.c), if any */
    llm_runner *draft_runner;
    kiln_kv_cache *draft_kv;
    llm_runner_exit exit_draft;     /* draft "layers:N": the target's first N layers (n_layers 0: none) */
    kiln_llm_config cfg;
    kiln_llm_info info;
    char family[16], target[320];
    int32_t eos[LLM_MAX_EOS];
    int n_eos;
    int max_waiting;
    int64_t max_waiting_tokens;
    double queue_timeout_ms;
    kiln_chat_template *chat;       /* NULL when the model's template does not parse: chat_error says why */
    char chat_error[512];

    /* the engine loop */
    pthread_t thread;
    bool thread_started;
    llm_req *live_head, *live_tail; /* loop */
    uint64_t generated;             /* loop: tokens generated since open */
    double busy;                    /* loop: ms in forward steps since open */
    llm_step_event *batch;          /* loop: the step's polled events, queued under one lock */
    int n_batch, batch_cap;

    pthread_mutex_t mu;
    pthread_cond_t wake;            /* the loop waits on it */
    pthread_cond_t idle;            /* signalled when a request ends (drain waits on it) */
    /* mu: */
    llm_req *inbox_head, *inbox_tail;
    int n_inbox;
    int n_cancels;                  /* cancel_requested flags the loop has not handled */
    llm_req *table[LLM_HASH_BUCKETS];
    uint64_t next_id;
    int live;                       /* accepted requests whose final event has not gone out */
    int queued;                     /* requests not yet in a forward step, and their prompt tokens */
    int64_t queued_tokens;
    bool closing, draining;
    kiln_scheduler_stats snap;      /* as of the loop's last turn */
    uint64_t submitted, finished, prompt_tokens, generated_snap;
    double busy_snap;
    double heartbeat_ms;
};

/* Milliseconds on CLOCK_MONOTONIC. */
double llm_now_ms(void);
/* A condition variable whose timed waits run on CLOCK_MONOTONIC, and the deadline ms from now. */
void llm_cond_init(pthread_cond_t *c);
struct timespec llm_deadline(double ms);

/* The model behind llm (kiln bench --llm's report): its config, and what was opened (engine or
 * directory, stored precision; the weights themselves only on the CPU). */
const kiln_llm_config *llm_model_config(const kiln_llm *llm);
const kiln_llm_bundle *llm_model_bundle(const kiln_llm *llm);

/* llm_loop.c: starts the engine loop (KILN_ERR_INTERNAL naming the error when the thread cannot start);
 * llm_loop_stop sets closing, wakes the loop and joins it (every request then has its final event). */
kiln_status llm_loop_start(kiln_llm *llm);
void llm_loop_stop(kiln_llm *llm);
/* The draft model (llm_draft.c): opens `draft` (a checkpoint directory or engine file; random_shape: a
 * shape name, with random weights from seed) with the target's runner options after checking that it
 * shares the target's vocabulary and covers its context (KILN_ERR_INVALID_ARGUMENT naming what
 * differs). "layers:N" (1 <= N < the target's layers, else KILN_ERR_INVALID_ARGUMENT) opens nothing:
 * the draft is the target's first N layers (after llm->runner is made). llm_draft_close frees what it
 * made, also after a failure. */
kiln_status llm_draft_open(kiln_llm *llm, const char *draft, const llm_runner_options *ro, bool random_shape,
                           uint64_t seed);
/* The draft model's KV cache: the target's block count and size (after the target's llm->kv); an
 * early-exit draft needs none. */
kiln_status llm_draft_make_cache(kiln_llm *llm);
/* The scheduler config's draft_forward, draft_model, draft_kv and draft_sample (on the GPU) for llm's
 * draft (none: left NULL). */
void llm_draft_schedule(kiln_llm *llm, kiln_scheduler_config *sc);
void llm_draft_close(kiln_llm *llm); /* accepts a kiln_llm without a draft model */

/* The scheduler's on_admit (user: the llm_req): the request's queue time, and it leaves the waiting totals. */
void llm_loop_on_admit(void *user);

/* llm_chat_load.c: parses the chat template (override, else tokenizer_config.json's chat_template: a
 * string, or the "default" entry of a list of {name, template}; with its bos_token / eos_token, strings
 * or {"content": ...}; else ChatML) into llm->chat and sets info.has_chat_template. An override that
 * does not parse is its error; a model's that does not is kept for kiln_llm_apply_chat_template. */
kiln_status llm_chat_load(kiln_llm *llm, const char *override);

/* llm_request.c */
/* The request with this id (mu held), or NULL. */
llm_req *llm_table_find(kiln_llm *llm, uint64_t id);
/* Removes r from the table and frees it (mu held). */
void llm_req_destroy(kiln_llm *llm, llm_req *r);
/* Frees r's memory alone (no table): for a request refused before it was queued, and at close. */
void llm_req_free(llm_req *r);
/* Takes r out of the waiting totals once (mu held). */
void llm_req_unqueue(kiln_llm *llm, llm_req *r);
/* Appends token's text to r (loop): into r->delta the text that can be sent now (all of it when
 * final), without any stop string or what follows it; *stop_hit tells that one was found (r->delta
 * then ends before it). token < 0, a stop token (no_text) or an id the tokenizer does not name (a
 * model whose vocabulary is larger than its tokenizer's) adds no text, as transformers' decode. */
kiln_status llm_req_text(kiln_llm *llm, llm_req *r, int32_t token, bool no_text, bool final, bool *stop_hit);
/* Sends r's event (loop): to its callback, or into its poll queue (coalesced unless r asks for
 * logprobs). A final event marks r ended and wakes drain. */
void llm_req_emit(kiln_llm *llm, llm_req *r, const kiln_llm_event *ev);
/* Sends the polled events of llm->batch (loop; final_sent already set for the final ones) as
 * llm_req_emit would, under one lock for all, each poller woken after the lock is let go; empties the
 * batch (n_batch 0, its entries left readable until the next event is added). */
void llm_req_emit_batch(kiln_llm *llm);

#endif
