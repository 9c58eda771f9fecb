/* openai.h — what the OpenAI endpoints share: the error shape, the generation of completions and
 * chat completions over kiln_llm.h (openai_generate.c), and embeddings of encoder tensor models
 * (openai_embeddings.c). */
#ifndef KILN_SERVE_OPENAI_H
#define KILN_SERVE_OPENAI_H

#include "serve/http.h"

/* {"error":{"message","type","param","code"}} with the HTTP status; param may be NULL. */
enum MHD_Result serve_openai_error(serve_conn *c, int status, const char *type, const char *param, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));

/* Answers POST /v1/completions (chat false) or /v1/chat/completions (chat true) for the request
 * body root with LLM version v, which the caller holds: this function releases it (at once, or when
 * a streamed response ends). */
enum MHD_Result serve_openai_generate(serve_conn *c, serve_version *v, bool chat, const cJSON *root);

/* Answers POST /v1/embeddings for the request body root with tensor-model version v (requested as
 * `model`), which the caller holds: this function releases it. */
enum MHD_Result serve_openai_embeddings(serve_conn *c, serve_version *v, const char *model, const cJSON *root);

#endif
