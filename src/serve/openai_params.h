/* openai_params.h — an OpenAI completions or chat completions request body turned into kiln_llm
 * requests: the prompts (text, token ids, or chat messages rendered with the model's template) and
 * one request template carrying sampling, stops and limits. */
#ifndef KILN_SERVE_OPENAI_PARAMS_H
#define KILN_SERVE_OPENAI_PARAMS_H

#include "kiln/kiln_llm.h"

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stddef.h>

#define OPENAI_MAX_STOP 16
#define OPENAI_MAX_N 16
#define OPENAI_MAX_PROMPTS 64

typedef struct openai_prompt {
    char *text;      /* owned; NULL when ids */
    int32_t *ids;    /* owned */
    int n_ids;
} openai_prompt;

typedef struct openai_params {
    kiln_llm_request req;            /* sampling, stops (pointing into stops), max_tokens, ignore_eos */
    char *stops[OPENAI_MAX_STOP];
    openai_prompt *prompts;
    int n_prompts;
    int n;                           /* choices per prompt */
    bool seed_given;
    bool stream, include_usage;
    bool logprobs;                   /* report logprobs (chat: "logprobs": true; completions: "logprobs": k) */
    int top_logprobs;
} openai_params;

/* Parses root (chat: messages, else prompt) for llm. Returns 0, or 400 with the offending parameter
 * in *param (NULL when none) and a message. p is to be freed with openai_params_free either way. */
int openai_params_parse(const cJSON *root, bool chat, const kiln_llm *llm, openai_params *p, const char **param,
                        char *msg, size_t msg_size);
void openai_params_free(openai_params *p);

#endif
