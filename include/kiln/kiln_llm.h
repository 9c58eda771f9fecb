/* kiln_llm.h — the public C API of kiln's LLM runtime: open a decoder-only language model (an LLM
 * engine from `kiln build --hf`, a Hugging Face checkpoint directory, or random weights of a named
 * shape), submit generation requests from any thread, receive their tokens and text as they are
 * generated (through a callback or by polling), cancel them, read statistics, and turn chat messages
 * into a prompt with the model's chat template.
 *
 * Threads: every kiln_llm owns one engine-loop thread that runs the continuous-batching scheduler
 * and the forward steps. Callers talk to it through a thread-safe inbox: kiln_llm_submit, _cancel,
 * _release, _stats and _next may be called from any number of threads at once and never wait for a
 * forward step (kiln_llm_next waits only for the request's own next event, up to its timeout).
 *
 * Errors follow kiln.h: a kiln_status and a message for the calling thread in kiln_last_error().
 * Admission control answers KILN_ERR_BUSY (retry later: the waiting queue is full, or the instance is
 * draining) and KILN_ERR_INVALID_ARGUMENT for a request that can never run (it names the limit). */
#ifndef KILN_LLM_PUBLIC_H
#define KILN_LLM_PUBLIC_H

#include "kiln/kiln.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---------------------------------------------------------------- open */

typedef struct kiln_llm kiln_llm;

typedef struct kiln_llm_options {
    const char *target;  /* "cpu" (NULL) or "cuda" */
    int device;          /* the CUDA device ordinal */
    /* The KV cache: kv_cache_bytes when > 0, else kv_cache_blocks when > 0, else the default: on the
     * CPU, room for max_seqs sequences of max_context tokens (at most 1 GiB); on CUDA, the same room
     * but at most 90% of the device's free memory after the weights. A budget given here is all the
     * cache takes (bytes count as the target stores the cache: fp32 on the CPU, 16-bit on CUDA), so
     * that several models can share one GPU; KILN_ERR_OUT_OF_MEMORY when the device does not have it.
     * A budget that holds no block is KILN_ERR_INVALID_ARGUMENT. */
    uint64_t kv_cache_bytes;
    int kv_cache_blocks;
    int block_size;          /* tokens per KV-cache block (0: 16) */
    int max_seqs;            /* sequences running at once (0: 256 on CUDA, 16 on the CPU) */
    int max_batched_tokens;  /* tokens in one forward step (0: 2048; raised to max_seqs) */
    int max_context;         /* longest prompt + generated text (0, or more than the model's: the model's) */
    /* Admission control: submissions beyond these are refused with KILN_ERR_BUSY (0: unbounded). */
    int max_waiting;               /* requests waiting for their first step */
    int64_t max_waiting_tokens;    /* prompt tokens of the waiting requests (a prompt beyond it alone is
                                    * still taken when nothing waits) */
    /* A request still waiting for its first step after this long ends with KILN_LLM_FINISH_TIMEOUT
     * (0: never). */
    double queue_timeout_ms;
    /* The chat template's Jinja source, overriding the model's (NULL: tokenizer_config.json's
     * chat_template, else the built-in ChatML template). */
    const char *chat_template;
    /* CUDA: sample on the host instead of the GPU (for A/B comparisons; slower). */
    bool host_sampler;
    /* CUDA: a timing cache file (`kiln build --timing-cache`'s): the tactics the runtime times per product
     * shape on first use (cuBLASLt algorithm, GEMV configuration) are taken from it when recorded for this
     * GPU and library versions, and the ones timed are added to it (NULL: timed anew at every open). */
    const char *timing_cache;
    /* Automatic prefix caching is on unless this is set: full KV-cache blocks are kept, keyed by a hash
     * of their tokens and prefix, after their request ends, and a request whose prompt starts with
     * cached blocks (a shared system prompt) computes only the rest; cached blocks are evicted, least
     * recently used first, only when the cache has no other free block. Tokens are the same either way. */
    bool no_prefix_cache;
    /* Speculative decoding: NULL or "off" (none), or "ngram" (prompt lookup: each decoding request
     * proposes up to draft_tokens tokens (0: 4) copied from what followed the latest earlier occurrence
     * of its last 3, 2 or 1 tokens in its prompt and output, and one forward step verifies them). The
     * tokens are those of plain decoding: greedy ones identical, sampled ones from the same
     * distribution (rejection sampling). "draft": a draft model (below) proposes the draft_tokens
     * tokens. Anything else is KILN_ERR_INVALID_ARGUMENT. */
    const char *spec;
    int draft_tokens;
    /* The KV cache's element type: NULL or "auto" (fp32 on the CPU, the weights' 16-bit type on CUDA),
     * or "fp8": E4M3 keys and values with a scale per layer and KV head (quantized on write,
     * dequantized on read, on the CPU and on CUDA), so that the same kv_cache_bytes hold 4x the
     * tokens of the CPU's fp32 cache (2x CUDA's 16-bit one). On CUDA the calibration runs the model
     * on the CPU (opened once more for it). Its scales come from kv_calib_text (a text
     * file the model runs over first: each head's largest |k| and |v| / 448), else they are all 1.0
     * and a warning is logged. Anything else is KILN_ERR_INVALID_ARGUMENT. */
    const char *kv_cache_dtype;
    const char *kv_calib_text;
    /* Speculative decoding with a draft model (spec NULL or "draft"): a smaller model with the target's
     * tokenizer (else KILN_ERR_INVALID_ARGUMENT), a checkpoint directory or engine file opened on the
     * same target and device (with kiln_llm_open_random: a shape name, random weights of the same seed,
     * so that the target's own shape drafts for itself and every draft is accepted),
     * runs draft_tokens greedy (or, at temperature > 0, sampled) steps per speculating request with its
     * own KV cache of the target's block count, and the target verifies them in one step. The tokens
     * are those of plain decoding, as for "ngram". "layers:N" (1 <= N < the target's layers) drafts with
     * the target itself, exiting after its first N layers into its final norm and lm_head (early-exit
     * self-speculation: no second model, and those layers' keys and values are the target's own). */
    const char *draft;
} kiln_llm_options;

/* Opens path: an LLM engine file (`kiln build --hf`) or a Hugging Face checkpoint directory
 * (config.json, *.safetensors, tokenizer.json, optional tokenizer_config.json and
 * generation_config.json), places it on opts->target and starts its engine loop. opts may be NULL
 * (all defaults). Errors name the file and what is wrong: KILN_ERR_IO, KILN_ERR_PARSE,
 * KILN_ERR_UNSUPPORTED (an unknown model family, naming it and those kiln runs),
 * KILN_ERR_ENGINE_MISMATCH, KILN_ERR_OUT_OF_MEMORY, KILN_ERR_BACKEND. The caller owns *out
 * (kiln_llm_close). A model without a tokenizer accepts token-id prompts only. */
kiln_status kiln_llm_open(const char *path, const kiln_llm_options *opts, kiln_llm **out);

/* Opens a model of a named shape with random weights drawn from seed, without a checkpoint or
 * tokenizer (benchmarks): "gpt2", "gpt2-medium", "gpt2-large", "gpt2-xl", "llama3-8b", "tiny-gpt2",
 * "tiny-llama". precision: the weights' type on CUDA (KILN_PRECISION_FP16 or _BF16; FP32 = the shape's
 * usual one; INT8 = weight-only INT8 matrices, computed in the shape's usual one, CUDA only; W8A8 = the
 * same with the layers' products int8 x int8, activation scale 8 / 127, CUDA only; INT4 = weight-only
 * INT4 matrices, as INT8; FP8 = E4M3 matrices with activations rounded to E4M3 per token row, as INT8);
 * the CPU holds fp32. An unknown shape is KILN_ERR_INVALID_ARGUMENT listing the known. */
kiln_status kiln_llm_open_random(const char *shape, kiln_precision precision, uint64_t seed,
                                 const kiln_llm_options *opts, kiln_llm **out);

/* Stops accepting requests (kiln_llm_submit answers KILN_ERR_BUSY "draining") and waits up to
 * timeout_ms for the running and waiting requests to end; those still going then are cancelled (and
 * their final events delivered before it returns). Returns KILN_OK when every request ended by
 * itself, else KILN_ERR_BUSY naming how many were cancelled. The model stays open (kiln_llm_close
 * frees it) and keeps refusing requests. */
kiln_status kiln_llm_drain(kiln_llm *llm, double timeout_ms);

/* Cancels every request (each gets its final event), stops the engine loop, and frees the model,
 * its KV cache and every request's state. No callback runs after it returns. Accepts NULL. */
void kiln_llm_close(kiln_llm *llm);

/* What a model is. Strings are borrowed from llm. */
typedef struct kiln_llm_info {
    const char *family;       /* "gpt2", "llama", ... */
    const char *target;       /* what runs it, e.g. "cpu (fp32, 2 threads)", "cuda:0 NVIDIA H200 (bf16)" */
    int64_t n_params;
    int vocab;                /* logits per token */
    int max_context;          /* the effective limit (kiln_llm_options.max_context or the model's) */
    int bos_id, eos_id;       /* -1 when none */
    bool has_tokenizer;
    bool has_chat_template;   /* the model brings one (else the built-in ChatML is used) */
    int kv_blocks_total, block_size;
    int max_seqs, max_batched_tokens;
} kiln_llm_info;
kiln_status kiln_llm_get_info(const kiln_llm *llm, kiln_llm_info *out);

/* ---------------------------------------------------------------- requests */

#define KILN_MAX_TOP_LOGPROBS 20 /* OpenAI's limit on top_logprobs */
#define KILN_LLM_MAX_DRAFT_TOKENS 16 /* kiln_llm_options.draft_tokens at most */

/* Sampling, in vLLM's order: penalties -> temperature -> top-k -> top-p -> min-p -> draw. The draw
 * for the n-th generated token depends only on (seed, n) and the logits, never on the batch: the same
 * request gives the same tokens however it is scheduled. */
typedef struct kiln_sampling_params {
    float temperature;        /* 0 = greedy (argmax, lowest id on ties); otherwise logits / T */
    int top_k;                /* keep the k most likely tokens (ties: lowest id first); 0 = off */
    float top_p;              /* keep the smallest set of most likely tokens with mass >= p; 1 = off */
    float min_p;              /* drop tokens below min_p * (probability of the most likely); 0 = off */
    float repetition_penalty; /* HF: over prompt + generated tokens, positive logits / r, negative * r; 1 = off */
    float frequency_penalty;  /* OpenAI: over generated tokens, logit -= count * f; 0 = off */
    float presence_penalty;   /* OpenAI: over generated tokens, logit -= p once per token present; 0 = off */
    uint64_t seed;            /* the request's random stream */
    bool logprobs;            /* report the chosen token's log-probability */
    int top_logprobs;         /* and that many most likely alternatives (0..KILN_MAX_TOP_LOGPROBS) */
} kiln_sampling_params;

/* Greedy, no penalties, no truncation, seed 0, no logprobs. */
kiln_sampling_params kiln_sampling_defaults(void);
/* KILN_ERR_INVALID_ARGUMENT naming the first parameter out of range: temperature < 0 or not finite,
 * top_k < 0, top_p outside (0, 1], min_p outside [0, 1], repetition_penalty <= 0, frequency or
 * presence penalty outside [-2, 2], top_logprobs outside [0, KILN_MAX_TOP_LOGPROBS]. */
kiln_status kiln_sampling_validate(const kiln_sampling_params *p);

typedef struct kiln_token_logprob {
    int32_t token;
    float logprob;
} kiln_token_logprob;

typedef enum kiln_llm_finish {
    KILN_LLM_FINISH_NONE = 0,    /* the request goes on */
    KILN_LLM_FINISH_LENGTH,      /* max_tokens generated, or the context limit reached */
    KILN_LLM_FINISH_STOP_TOKEN,  /* an end-of-sequence token (unless ignore_eos) or one of stop_ids */
    KILN_LLM_FINISH_STOP_STRING, /* one of the stop strings was generated (it is not in the text) */
    KILN_LLM_FINISH_CANCELLED,   /* kiln_llm_cancel, kiln_llm_release, kiln_llm_drain or _close */
    KILN_LLM_FINISH_TIMEOUT,     /* it waited longer than queue_timeout_ms for its first step */
    KILN_LLM_FINISH_ERROR,       /* it could not run; the event's message says why */
} kiln_llm_finish;

/* "length", "stop_token", "stop_string", "cancelled", "timeout", "error" ("none" for NONE). */
const char *kiln_llm_finish_name(kiln_llm_finish f);

typedef struct kiln_llm_usage {
    int prompt_tokens;
    int completion_tokens;    /* tokens generated so far (the stop token included) */
    double queue_ms;          /* from submission to the first forward step that held the request */
    double ttft_ms;           /* from submission to the first generated token (0 before it) */
    int preemptions;          /* times the request was preempted and recomputed */
} kiln_llm_usage;

/* One step of one request. Pointers are borrowed: valid during the callback, or until the next
 * kiln_llm_next / kiln_llm_release for the request when polled. */
typedef struct kiln_llm_event {
    uint64_t id;
    void *user;                 /* the request's */
    int32_t token;              /* the new token; -1 for a final event that brings none */
    /* The text this token completes, ready to send: whole UTF-8 characters, special tokens skipped
     * (unless the request keeps them), text that could still become a stop string held back, and a
     * stop string cut (its text and everything after it never appear). text_len may be 0. The
     * concatenation of every event's text is the completion. NUL-terminated. */
    const char *text;
    size_t text_len;
    /* With sampling.logprobs: the token's log-probability and the top alternatives (sampler's
     * processed distribution), most likely first. */
    float logprob;
    int n_top;
    const kiln_token_logprob *top;
    kiln_llm_finish finish;     /* not NONE: the request's last event */
    const char *message;        /* KILN_LLM_FINISH_ERROR: why; otherwise NULL */
    kiln_llm_usage usage;       /* always filled, as of this event */
    /* When the engine loop made the event: the end of the forward step that produced it (or of the
     * loop turn that ended the request), in ms of CLOCK_MONOTONIC; and that forward step's duration
     * (0 for an event no step produced: a cancel, a timeout). With polling, the newest event's. */
    double time_ms;
    double step_ms;
} kiln_llm_event;

/* Called on the engine-loop thread for every event of a request submitted with it: it must return
 * quickly and must not call kiln_llm_drain or kiln_llm_close (the other calls are allowed). After the
 * final event the request is gone. */
typedef void (*kiln_llm_event_fn)(const kiln_llm_event *ev);

typedef struct kiln_llm_request {
    /* The prompt: text (encoded with the model's tokenizer; add_special adds bos etc. as the
     * tokenizer specifies), or prompt_ids[0..n_prompt_ids) when prompt is NULL. Both copied. */
    const char *prompt;
    bool add_special;
    const int32_t *prompt_ids;
    int n_prompt_ids;
    /* Tokens to generate at most; 0: until the context limit, or as many as the whole KV cache holds
     * after the prompt when that is less. */
    int max_tokens;
    kiln_sampling_params sampling;
    const char *const *stop;        /* stop strings (copied), n_stop of them; none may be empty */
    int n_stop;
    const int32_t *stop_ids;        /* further stop tokens (copied) */
    int n_stop_ids;
    bool ignore_eos;                /* keep generating past end-of-sequence tokens */
    bool keep_special;              /* special tokens' text appears in event text */
    bool no_speculation;            /* decode plainly although the model speculates (kiln_llm_options.spec) */
    void *user;                     /* returned in every event */
    kiln_llm_event_fn on_event;     /* NULL: the caller polls with kiln_llm_next */
} kiln_llm_request;

/* The defaults: add_special true, sampling = kiln_sampling_defaults(), everything else zero. */
kiln_llm_request kiln_llm_request_defaults(void);

/* Queues a request and gives its id (> 0) in *id. Checked now, so that nothing invalid is queued:
 * the sampling parameters, an empty prompt, token ids outside the vocabulary, text without a
 * tokenizer, a prompt of max_context tokens or more, a request whose prompt + max_tokens needs more
 * KV blocks than the whole cache (KILN_ERR_INVALID_ARGUMENT naming the limit); a full waiting queue
 * or a draining model (KILN_ERR_BUSY). Every accepted request gets exactly one final event. */
kiln_status kiln_llm_submit(kiln_llm *llm, const kiln_llm_request *req, uint64_t *id);

/* Ends request id (waiting or running) now, freeing its KV blocks; its final event says
 * KILN_LLM_FINISH_CANCELLED. An id that is unknown or already ended is a no-op (KILN_OK): cancels
 * race with the end of generation. */
kiln_status kiln_llm_cancel(kiln_llm *llm, uint64_t id);

/* Polled requests (on_event NULL): waits up to timeout_ms (< 0: no limit, 0: do not wait) for the
 * request's next event and copies it to *ev. Events are coalesced while unread: a read brings every
 * token's text generated since the previous read (ev->token the newest, logprobs of the newest only
 * unless the request asked for logprobs, in which case events are never coalesced). Returns KILN_OK
 * with an event, KILN_ERR_BUSY when none arrived in time, KILN_ERR_INVALID_ARGUMENT for an unknown or
 * released id, a callback request, or one whose final event was already read. After the final event
 * the caller must still call kiln_llm_release. */
kiln_status kiln_llm_next(kiln_llm *llm, uint64_t id, int timeout_ms, kiln_llm_event *ev);

/* The caller is done with polled request id: cancels it if it still runs, and frees its state once
 * it has ended. Every polled request is released exactly once. Unknown ids are a no-op. */
void kiln_llm_release(kiln_llm *llm, uint64_t id);

typedef struct kiln_llm_stats {
    int running, waiting;
    int64_t waiting_tokens;          /* prompt tokens of the waiting requests */
    int kv_blocks_used, kv_blocks_total;
    uint64_t preemptions, steps;
    uint64_t requests_submitted, requests_finished;
    uint64_t prompt_tokens, generated_tokens;  /* totals since open */
    /* prefix caching since open: prompt (and, after a preemption, generated) tokens of the requests
     * that started a prefill, and how many of them were found cached (hit ratio = hits / queries) */
    uint64_t prefix_cache_queries, prefix_cache_hits;
    /* speculative decoding since open: sequence-steps that verified draft tokens, the drafts proposed
     * and accepted, and the tokens those steps produced (acceptance rate = accepted / drafted,
     * tokens per speculating step = emitted / steps) */
    uint64_t spec_steps, spec_drafted, spec_accepted, spec_emitted;
    double busy_ms;                  /* time spent in forward steps since open (sampling included) */
    double ms_since_heartbeat;       /* since the engine loop last went round (readiness; an idle loop
                                      * goes round once a second) */
    bool draining;
} kiln_llm_stats;
kiln_status kiln_llm_get_stats(const kiln_llm *llm, kiln_llm_stats *out);

/* ---------------------------------------------------------------- text */

/* Encodes text[0..len) with the model's tokenizer into *ids (malloc'ed, the caller frees it with
 * free(); NULL when *n is 0). KILN_ERR_INVALID_ARGUMENT when the model has no tokenizer. */
kiln_status kiln_llm_tokenize(const kiln_llm *llm, const char *text, size_t len, bool add_special, int32_t **ids,
                              size_t *n);
/* Decodes ids into *text (malloc'ed, NUL-terminated, free()), skipping special tokens unless
 * keep_special. */
kiln_status kiln_llm_detokenize(const kiln_llm *llm, const int32_t *ids, size_t n, bool keep_special, char **text,
                                size_t *len);
/* The bytes of one token (possibly part of a UTF-8 character), *len of them; NULL for an unknown id
 * or a model without tokenizer. Borrowed from llm. */
const char *kiln_llm_token_text(const kiln_llm *llm, int32_t id, size_t *len);

/* ---------------------------------------------------------------- chat templates */

/* One chat message. content is plain text (callers flatten OpenAI's content parts). */
typedef struct kiln_chat_message {
    const char *role;    /* "system", "user", "assistant", "tool", ... */
    const char *content;
} kiln_chat_message;

/* A parsed chat template: the subset of Jinja2 that Hugging Face chat templates use (statements if,
 * for with loop.* and else, break/continue, set and namespace(), macro/call, with; literals,
 * operators, string/list/dict methods, Jinja's filters and tests, raise_exception, strftime_now;
 * whitespace control and trim_blocks/lstrip_blocks as transformers sets them: docs/llm.md lists it
 * all and the few differences), rendered byte for byte as transformers' apply_chat_template.
 * Immutable once created: any number of threads may render with it. */
typedef struct kiln_chat_template kiln_chat_template;

/* Parses source (a template's text). bos_token / eos_token are the values the template sees (NULL:
 * ""). A syntax error or an unsupported construct is KILN_ERR_PARSE / KILN_ERR_UNSUPPORTED naming
 * the line and column. The caller owns *out. */
kiln_status kiln_chat_template_create(const char *source, const char *bos_token, const char *eos_token,
                                      kiln_chat_template **out);
/* The built-in ChatML template (<|im_start|>role\ncontent<|im_end|>\n ...). */
kiln_status kiln_chat_template_chatml(kiln_chat_template **out);
void kiln_chat_template_free(kiln_chat_template *t); /* accepts NULL */
/* Renders messages[0..n) into *text (malloc'ed, NUL-terminated, free()), with add_generation_prompt
 * as transformers passes it. A template's raise_exception(msg) and runtime errors (an undefined
 * method, a type mismatch) are KILN_ERR_INVALID_ARGUMENT with the message. */
kiln_status kiln_chat_template_apply(const kiln_chat_template *t, const kiln_chat_message *messages, int n,
                                     bool add_generation_prompt, char **text, size_t *len);

/* The model's template (kiln_llm_options.chat_template, else the checkpoint's, else ChatML) applied
 * to messages. */
kiln_status kiln_llm_apply_chat_template(const kiln_llm *llm, const kiln_chat_message *messages, int n,
                                         bool add_generation_prompt, char **text, size_t *len);

#ifdef __cplusplus
}
#endif
#endif
