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
#include "kiln/kiln_llm.h"

#include <stdbool.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* kiln_sampling_params, KILN_MAX_TOP_LOGPROBS, kiln_token_logprob, kiln_sampling_defaults and
 * kiln_sampling_validate are public: kiln/kiln_llm.h. */

/* The n-th number in [0, 1) of the stream named by seed (splitmix64: a hash of seed + n * gamma). */
double kiln_sample_uniform(uint64_t seed, uint64_t n);

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

/* Speculative decoding's check of a draft token proposed with certainty (a point mass: prompt-lookup
 * drafting) for the position after `generated`, with kiln_sample_next's arguments and errors. Greedy:
 * out is kiln_sample_next's token and *accepted says whether it is the draft. Temperature > 0
 * (rejection sampling): the draft is accepted with its probability p(draft) under the processed
 * distribution (a uniform draw from a stream of its own); when it is rejected, out is a draw from that
 * distribution without the draft, renormalised. Either way out's token follows the distribution
 * kiln_sample_next draws from. */
kiln_status kiln_sample_verify_draft(kiln_sampler *s, const kiln_sampling_params *p, const float *logits,
                                     const int32_t *prompt, int n_prompt, const int32_t *generated, int n_generated,
                                     int32_t draft, kiln_sample *out, bool *accepted);

/* A draft model's token for the position after `generated` (speculative decoding with a draft model),
 * with kiln_sample_next's arguments and errors. Greedy: kiln_sample_next's token (q untouched).
 * Temperature > 0: a draw, from a stream of its own, from the processed distribution of the draft's
 * logits, written whole to q[vocab] (zero outside the kept candidates) for
 * kiln_sample_verify_draft_dist. */
kiln_status kiln_sample_draft(kiln_sampler *s, const kiln_sampling_params *p, const float *logits,
                              const int32_t *prompt, int n_prompt, const int32_t *generated, int n_generated, float *q,
                              kiln_sample *out);

/* kiln_sample_verify_draft for a draft drawn from the distribution q[vocab] (kiln_sample_draft's).
 * Greedy: as kiln_sample_verify_draft (q unread). Temperature > 0: with p the target's processed
 * distribution, the draft x is accepted with probability min(1, p(x) / q(x)); when it is rejected, out
 * is a draw from max(p - q, 0), renormalised. Either way out's token follows p. */
kiln_status kiln_sample_verify_draft_dist(kiln_sampler *s, const kiln_sampling_params *p, const float *logits,
                                          const int32_t *prompt, int n_prompt, const int32_t *generated,
                                          int n_generated, int32_t draft, const float *q, kiln_sample *out,
                                          bool *accepted);

#ifdef __cplusplus
}
#endif
#endif
