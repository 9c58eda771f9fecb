/* sampler.h — turns one sequence's logits into its next token, per request: repetition, frequency and
 * presence penalties, temperature, top-k, top-p and min-p truncation, then a draw from a counter-based
 * random stream (or the argmax), with optional log-probabilities. Processing follows vLLM's order:
 * penalties → temperature → top-k → top-p → min-p → sample.
 *
 * The draw for the n-th generated token depends only on (seed, n) and the logits, never on which
 * other sequences shared the batch or whether the request was preempted and recomputed: the same
 * request gives the same tokens however it is scheduled. */
#ifndef KILN_LLM_SAMPLER_H
#define KILN_LLM_SAMPLER_H

#include "kiln/kiln.h"

#include <stdbool.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define KILN_MAX_TOP_LOGPROBS 20 /* OpenAI's limit on top_logprobs */

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

/* The n-th number in [0, 1) of the stream named by seed (splitmix64: a hash of seed + n * gamma). */
double kiln_sample_uniform(uint64_t seed, uint64_t n);

typedef struct kiln_token_logprob {
    int32_t token;
    float logprob;
} kiln_token_logprob;

typedef struct kiln_sample {
    int32_t token;
    /* With params.logprobs: log-softmax of the processed distribution (after penalties, temperature and
     * truncation; greedy: after penalties alone), for the chosen token and the n_top most likely tokens,
     * most likely first (ties: lowest id). Tokens removed by truncation are never listed. */
    float logprob;
    int n_top;
    kiln_token_logprob top[KILN_MAX_TOP_LOGPROBS];
} kiln_sample;

/* Scratch memory for one vocabulary size; one sampler serves any number of requests, one at a time. */
typedef struct kiln_sampler kiln_sampler;

kiln_status kiln_sampler_create(int vocab, kiln_sampler **out);
void kiln_sampler_free(kiln_sampler *s); /* accepts NULL */

/* Samples the token that follows `prompt` and `generated` (the request's tokens so far; the draw uses
 * the stream position n_generated) from logits[vocab], which are not modified. p must be valid
 * (kiln_sampling_validate). A NaN or +inf logit is KILN_ERR_INVALID_ARGUMENT naming the token. */
kiln_status kiln_sample_next(kiln_sampler *s, const kiln_sampling_params *p, const float *logits,
                             const int32_t *prompt, int n_prompt, const int32_t *generated, int n_generated,
                             kiln_sample *out);

#ifdef __cplusplus
}
#endif
#endif
