/* llm_perplexity.h — the perplexity of a language model on a text, by transformers' published method
 * for fixed-length models ("Perplexity of fixed-length models"): windows of at most ctx tokens start
 * every stride tokens; in each, only the tokens not scored by the window before are targets, the
 * window's mean negative log-likelihood over them is weighted by (targets - 1) as the guide weights it
 * (for the first window, and whenever stride >= ctx, that is exactly the targets with a preceding
 * position), and the perplexity is exp(sum / weights). The forward runs on the CPU or CUDA through
 * llm_runner.h, logits of every window position coming back to the host. */
#ifndef KILN_LLM_LLM_PERPLEXITY_H
#define KILN_LLM_LLM_PERPLEXITY_H

#include "kiln/kiln.h"
#include "llm/llm_runner.h"

#include <stddef.h>
#include <stdint.h>

typedef struct kiln_llm_perplexity_options {
    const char *target; /* "cpu" (NULL) or "cuda" */
    int device;         /* the CUDA device ordinal */
    int ctx;            /* window length in tokens (0: the model's max_pos) */
    int stride;         /* tokens between window starts (0: ctx) */
    const char *kv_cache_dtype; /* NULL or "auto", or "fp8" (kiln_llm_options.kv_cache_dtype) */
    const char *calib_text;     /* fp8: the calibration text file (kiln_llm_options.kv_calib_text) */
} kiln_llm_perplexity_options;

typedef struct kiln_llm_perplexity_result {
    double perplexity;  /* exp(nll) */
    double nll;         /* mean negative log-likelihood per scored token, nats */
    int64_t n_tokens;   /* tokens of the text (the tokenizer's, special tokens included) */
    int64_t n_scored;   /* the weights' sum: the tokens the guide counts as scored */
    int n_windows;
    int ctx, stride;    /* as used */
    char target[128];   /* what ran the forward, e.g. "cpu (fp32, 2 threads)" */
} kiln_llm_perplexity_result;

/* Opens the model at path (an LLM engine file or a Hugging Face checkpoint directory, with a
 * tokenizer), encodes text[0..len) with its tokenizer (add_special as transformers' tokenizer(text)
 * does by default) and measures the perplexity into *out. Errors: the model's (as kiln_llm_open),
 * KILN_ERR_INVALID_ARGUMENT for a model without a tokenizer, a text of fewer than two tokens, ctx
 * outside [2, max_pos], stride outside [1, ctx]; KILN_ERR_OUT_OF_MEMORY. */
kiln_status kiln_llm_perplexity(const char *path, const char *text, size_t len, const kiln_llm_perplexity_options *o,
                                kiln_llm_perplexity_result *out);

/* The perplexity of token ids[0..n) with a model's runner already made (the core of
 * kiln_llm_perplexity, for callers that hold a model): ids within the runner's vocabulary, the same
 * limits on n, ctx and stride. out->target is left as it is. */
kiln_status kiln_llm_perplexity_ids(llm_runner *runner, const int32_t *ids, int64_t n, int ctx, int stride,
                                    kiln_llm_perplexity_result *out);

#endif
