/* openai.c — the OpenAI-compatible endpoints: GET /v1/models, and the front of POST /v1/completions,
 * /v1/chat/completions (LLM models) and /v1/embeddings (encoder tensor models): the body parsed, the
 * model found and held; the work itself is openai_generate.c and openai_embeddings.c. Errors are {"error":{"message","type","param","code"}}. */
#include "serve/openai.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

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

typedef enum openai_endpoint { OPENAI_COMPLETIONS, OPENAI_CHAT, OPENAI_EMBEDDINGS } openai_endpoint;

static enum MHD_Result model_request(serve_conn *c, openai_endpoint endpoint) {
    if (strcmp(c->method, "POST")) return serve_openai_error(c, 405, "invalid_request_error", NULL, "%s takes POST", c->url);
    cJSON *root = cJSON_ParseWithLength(c->body ? c->body : "", c->body_len);
    if (!cJSON_IsObject(root)) {
        cJSON_Delete(root);
        return serve_openai_error(c, 400, "invalid_request_error", NULL, "the request body is not a JSON object");
    }
    const cJSON *model = cJSON_GetObjectItemCaseSensitive(root, "model");
    enum MHD_Result ok = MHD_NO;
    serve_version *v = NULL;
    char msg[768];
    if (!cJSON_IsString(model)) {
        ok = serve_openai_error(c, 400, "invalid_request_error", "model", "'model' must be a string naming the model");
    } else if (!serve_auth_allows(c->key, model->valuestring)) {
        ok = serve_openai_error(c, 403, "permission_error", "model", "this API key may not use model '%s'", model->valuestring);
    } else {
        int status = serve_repo_acquire(c->srv->repo, model->valuestring, NULL, &v, msg, sizeof msg);
        char number[32] = "";
        if (v) snprintf(number, sizeof number, "%lld", (long long)v->number);
        if (status != 404) serve_conn_set_model(c, model->valuestring, number);
        if (status != 200) {
            ok = serve_openai_error(c, status, status == 404 ? "not_found_error" : "unavailable_error", "model", "%s", msg);
        } else if (v->llm && endpoint == OPENAI_EMBEDDINGS) {
            ok = serve_openai_error(c, 400, "invalid_request_error", "model",
                                    "model '%s' is an LLM: /v1/embeddings serves encoder tensor models", model->valuestring);
            serve_repo_release(c->srv->repo, v);
        } else if (v->llm) {
            ok = serve_openai_generate(c, v, endpoint == OPENAI_CHAT, root);
        } else if (endpoint == OPENAI_EMBEDDINGS) {
            ok = serve_openai_embeddings(c, v, model->valuestring, root);
        } else {
            ok = serve_openai_error(c, 400, "invalid_request_error", "model",
                                    "model '%s' is a tensor model: use /v2/models/%s/infer", model->valuestring,
                                    model->valuestring);
            serve_repo_release(c->srv->repo, v);
        }
    }
    cJSON_Delete(root);
    return ok;
}

enum MHD_Result serve_openai(serve_conn *c) {
    if (!strcmp(c->url, "/v1/models")) return list_models(c);
    if (!strcmp(c->url, "/v1/completions")) return model_request(c, OPENAI_COMPLETIONS);
    if (!strcmp(c->url, "/v1/chat/completions")) return model_request(c, OPENAI_CHAT);
    if (!strcmp(c->url, "/v1/embeddings")) return model_request(c, OPENAI_EMBEDDINGS);
    return serve_openai_error(c, 404, "not_found_error", NULL, "no endpoint %.200s", c->url);
}
