/* kserve.c — the KServe v2 / Open Inference Protocol endpoints (/v2...): server and model metadata,
 * health and readiness, inference through the model's dynamic batcher (JSON and binary tensors),
 * and the repository extension (index, load, unload). Errors are {"error": "message"}. */
#include "serve/http.h"
#include "serve/kserve_tensor.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A parsed /v2/models/{m}[/versions/{v}][/{action}] path. */
typedef struct model_path {
    char model[SERVE_NAME_MAX];
    char version[32];
    char action[16]; /* "", "ready", "infer" */
} model_path;

static bool parse_model_path(const char *rest, model_path *p) {
    memset(p, 0, sizeof *p);
    const char *slash = strchr(rest, '/');
    size_t n = slash ? (size_t)(slash - rest) : strlen(rest);
    if (!n || n >= sizeof p->model) return false;
    memcpy(p->model, rest, n);
    rest += n;
    if (!strncmp(rest, "/versions/", 10)) {
        rest += 10;
        slash = strchr(rest, '/');
        n = slash ? (size_t)(slash - rest) : strlen(rest);
        if (!n || n >= sizeof p->version) return false;
        memcpy(p->version, rest, n);
        rest += n;
    }
    if (!*rest) return true;
    if (strcmp(rest, "/ready") && strcmp(rest, "/infer")) return false;
    snprintf(p->action, sizeof p->action, "%s", rest + 1);
    return true;
}

static cJSON *tensor_meta(const kiln_tensor_desc *d) {
    cJSON *t = cJSON_CreateObject();
    cJSON_AddStringToObject(t, "name", d->name);
    const char *dt = kserve_datatype(d->dtype);
    cJSON_AddStringToObject(t, "datatype", dt ? dt : kiln_dtype_name(d->dtype));
    cJSON *s = cJSON_AddArrayToObject(t, "shape");
    for (int k = 0; k < d->ndim; k++) cJSON_AddItemToArray(s, cJSON_CreateNumber(d->dims[k] < 0 ? -1 : (double)d->dims[k]));
    return t;
}

static enum MHD_Result model_metadata(serve_conn *c, serve_version *v, const char *name) {
    serve_repo *r = c->srv->repo;
    cJSON *j = cJSON_CreateObject();
    cJSON_AddStringToObject(j, "name", name);
    cJSON *versions = cJSON_AddArrayToObject(j, "versions");
    pthread_mutex_lock(&r->mu);
    serve_model *m = serve_repo_find(r, name);
    for (int i = 0; m && i < m->n_versions; i++) {
        char num[32];
        snprintf(num, sizeof num, "%lld", (long long)m->versions[i]->number);
        cJSON_AddItemToArray(versions, cJSON_CreateString(num));
    }
    pthread_mutex_unlock(&r->mu);
    cJSON_AddStringToObject(j, "platform", v->llm ? "kiln_llm" : "kiln");
    cJSON *ins = cJSON_AddArrayToObject(j, "inputs"), *outs = cJSON_AddArrayToObject(j, "outputs");
    if (v->engine) {
        kiln_tensor_desc d;
        for (int i = 0; i < kiln_engine_num_inputs(v->engine); i++)
            if (!kiln_engine_input(v->engine, i, &d)) cJSON_AddItemToArray(ins, tensor_meta(&d));
        for (int i = 0; i < kiln_engine_num_outputs(v->engine); i++)
            if (!kiln_engine_output(v->engine, i, &d)) cJSON_AddItemToArray(outs, tensor_meta(&d));
    }
    return serve_reply_json(c, 200, j);
}

/* The Inference-Header-Content-Length header's value when it is a length up to `within`; else false. */
static bool header_length(serve_conn *c, size_t within, size_t *out) {
    const char *hdr = serve_header(c, "Inference-Header-Content-Length");
    if (!hdr) return false;
    char *end;
    unsigned long long n = strtoull(hdr, &end, 10);
    if (end == hdr || *end || n > within) return false;
    *out = (size_t)n;
    return true;
}

void serve_kserve_landing(serve_conn *c, size_t announced) {
    model_path p;
    size_t json_len;
    if (strcmp(c->method, "POST") || strncmp(c->url, "/v2/models/", 11) || !parse_model_path(c->url + 11, &p) ||
        strcmp(p.action, "infer") || !header_length(c, announced, &json_len) || !json_len || json_len == announced)
        return;
    serve_version *v;
    char msg[768];
    serve_repo_acquire(c->srv->repo, p.model, p.version, &v, msg, sizeof msg);
    if (!v) return; /* the request is answered with the reason when it is dispatched */
    c->landing = v->pool ? serve_pool_landing_reserve(v->pool, announced - json_len) : NULL;
    if (!c->landing) {
        serve_repo_release(c->srv->repo, v);
        return;
    }
    c->landing_v = v;
    c->landing_json = json_len;
    c->landing_len = announced - json_len;
}

void serve_kserve_landing_release(serve_conn *c) {
    if (!c->landing) return;
    serve_pool_landing_release(c->landing_v->pool, c->landing);
    serve_repo_release(c->srv->repo, c->landing_v);
    c->landing = NULL;
}

static enum MHD_Result infer(serve_conn *c, serve_version *v, const char *name) {
    if (strcmp(c->method, "POST")) return serve_reply_error(c, 405, "infer takes POST");
    if (v->llm) return serve_reply_error(c, 400, "model '%s' is an LLM: use /v1/completions or /v1/chat/completions", name);
    size_t total = c->body_len + c->landing_got, json_len = total;
    if (serve_header(c, "Inference-Header-Content-Length") && !header_length(c, total, &json_len))
        return serve_reply_error(c, 400, "Inference-Header-Content-Length '%.40s' is not a length within the body's %zu bytes",
                                 serve_header(c, "Inference-Header-Content-Length"), total);
    /* the binary part: where it landed, or after the JSON in the body */
    const char *json = c->body ? c->body : "", *bin = c->landing ? c->landing : json + json_len;
    serve_infer r = {0};
    kserve_output_request want;
    char msg[512];
    int status = kserve_parse_infer(json, json_len, bin, total - json_len, &r, &want, msg, sizeof msg);
    if (!status) status = serve_pool_check(v->pool, &r);
    if (status == 400 && r.message[0]) snprintf(msg, sizeof msg, "%s", r.message);
    if (!status) {
        r.client_gone = serve_client_gone_arg;
        r.client_arg = c;
        serve_pool_infer(v->pool, &r);
        status = r.http_status;
        snprintf(msg, sizeof msg, "%s", r.message);
        if (status == 200) {
            serve_metrics_record_run(c->srv->metrics, c->model, c->version, r.queue_us / 1e6, r.compute_us / 1e6,
                                     r.first_of_run ? r.batch_rows : 0);
            c->ran = true;
            c->queued_us = r.arrival_us;
            c->run_start_us = r.run_start_us;
            c->inputs_joined_us = r.inputs_joined_us;
            c->run_done_us = r.run_done_us;
        }
    }
    enum MHD_Result ok;
    if (status == 200) {
        char *body;
        size_t len, jlen;
        char version[32];
        snprintf(version, sizeof version, "%lld", (long long)v->number);
        status = kserve_build_response(name, version, &r, &want, &body, &len, &jlen, msg, sizeof msg);
        if (!status) {
            char num[32];
            snprintf(num, sizeof num, "%zu", jlen);
            if (jlen != len) serve_add_header(c, "Inference-Header-Content-Length", num);
            ok = serve_reply(c, 200, jlen != len ? "application/octet-stream" : "application/json", body, len);
            free(body);
        } else {
            ok = serve_reply_error(c, status, "%s", msg);
        }
    } else if (status == 499) { /* the client left while the request waited in the queue: no answer */
        c->status = 499;
        ok = MHD_NO;
    } else {
        if (status == 429) serve_add_header(c, MHD_HTTP_HEADER_RETRY_AFTER, "1");
        ok = serve_reply_error(c, status, "%s", msg);
    }
    for (int i = 0; i < r.n_inputs; i++) serve_tensor_clear(&r.inputs[i]);
    free(r.inputs);
    serve_infer_clear(&r);
    kserve_output_request_free(&want);
    return ok;
}

static enum MHD_Result models(serve_conn *c, const char *rest) {
    model_path p;
    if (!parse_model_path(rest, &p)) return serve_reply_error(c, 404, "no endpoint %.200s", c->url);
    if (!serve_auth_allows(c->key, p.model))
        return serve_reply_error(c, 403, "this API key may not use model '%s'", p.model);
    serve_version *v = NULL;
    char msg[768];
    int status = 0;
    if (c->landing && !p.version[0]) { /* the version whose landing memory holds the body (no new traffic pick) */
        char landed[32];
        snprintf(landed, sizeof landed, "%lld", (long long)c->landing_v->number);
        status = serve_repo_acquire(c->srv->repo, p.model, landed, &v, msg, sizeof msg);
    }
    if (!v) status = serve_repo_acquire(c->srv->repo, p.model, p.version, &v, msg, sizeof msg);
    char number[32] = "";
    if (v) snprintf(number, sizeof number, "%lld", (long long)v->number);
    /* unknown names stay out of the metrics' labels, which a client could otherwise grow without bound */
    if (!strcmp(p.action, "infer") && status != 404) serve_conn_set_model(c, p.model, number);
    enum MHD_Result ok;
    if (!strcmp(p.action, "ready")) {
        cJSON *j = cJSON_CreateObject();
        cJSON_AddStringToObject(j, "name", p.model);
        cJSON_AddBoolToObject(j, "ready", v != NULL);
        ok = status == 404 ? serve_reply_error(c, 404, "%s", msg) : serve_reply_json(c, v ? 200 : 503, j);
        if (status == 404) cJSON_Delete(j);
    } else if (!v) {
        ok = serve_reply_error(c, status, "%s", msg);
    } else if (!strcmp(p.action, "infer")) {
        ok = infer(c, v, p.model);
    } else {
        ok = model_metadata(c, v, p.model);
    }
    serve_repo_release(c->srv->repo, v);
    return ok;
}

static enum MHD_Result repository_index(serve_conn *c) {
    serve_repo *r = c->srv->repo;
    /* models on disk that were never loaded are listed too */
    serve_repo_scan(r);
    cJSON *list = cJSON_CreateArray();
    pthread_mutex_lock(&r->mu);
    for (int i = 0; i < r->n_models; i++) {
        const serve_model *m = &r->models[i];
        if (!m->n_versions) {
            cJSON *e = cJSON_CreateObject();
            cJSON_AddStringToObject(e, "name", m->name);
            cJSON_AddStringToObject(e, "state", "UNAVAILABLE");
            cJSON_AddStringToObject(e, "reason", m->reason[0] ? m->reason : "unloaded");
            cJSON_AddItemToArray(list, e);
        }
        for (int k = 0; k < m->n_versions; k++) {
            char num[32];
            snprintf(num, sizeof num, "%lld", (long long)m->versions[k]->number);
            cJSON *e = cJSON_CreateObject();
            cJSON_AddStringToObject(e, "name", m->name);
            cJSON_AddStringToObject(e, "version", num);
            cJSON_AddStringToObject(e, "state", "READY");
            cJSON_AddStringToObject(e, "reason", "");
            cJSON_AddItemToArray(list, e);
        }
    }
    pthread_mutex_unlock(&r->mu);
    return serve_reply_json(c, 200, list);
}

static enum MHD_Result repository(serve_conn *c, const char *rest) {
    if (strcmp(c->method, "POST")) return serve_reply_error(c, 405, "the repository endpoints take POST");
    if (!strcmp(rest, "index")) return repository_index(c);
    if (strncmp(rest, "models/", 7)) return serve_reply_error(c, 404, "no endpoint %.200s", c->url);
    rest += 7;
    const char *slash = strrchr(rest, '/');
    if (!slash || slash == rest || (strcmp(slash, "/load") && strcmp(slash, "/unload")))
        return serve_reply_error(c, 404, "no endpoint %.200s (models/{m}/load or /unload)", c->url);
    char name[SERVE_NAME_MAX];
    size_t n = (size_t)(slash - rest);
    if (n >= sizeof name) return serve_reply_error(c, 400, "model name too long");
    memcpy(name, rest, n);
    name[n] = 0;
    if (!serve_auth_allows(c->key, name)) return serve_reply_error(c, 403, "this API key may not use model '%s'", name);
    kiln_status st = strcmp(slash, "/load") ? serve_repo_unload(c->srv->repo, name) : serve_repo_load(c->srv->repo, name);
    if (st) return serve_reply_error(c, st == KILN_ERR_IO || st == KILN_ERR_INVALID_ARGUMENT ? 400 : 500, "%s", kiln_last_error());
    return serve_reply(c, 200, "application/json", "{}", 2);
}

enum MHD_Result serve_kserve(serve_conn *c) {
    const char *u = c->url;
    bool get = !strcmp(c->method, "GET") || !strcmp(c->method, "HEAD");
    if (!strcmp(u, "/v2") || !strcmp(u, "/v2/")) {
        cJSON *j = cJSON_CreateObject();
        cJSON_AddStringToObject(j, "name", "kiln");
        cJSON_AddStringToObject(j, "version", kiln_version());
        cJSON *ext = cJSON_AddArrayToObject(j, "extensions");
        cJSON_AddItemToArray(ext, cJSON_CreateString("binary_tensor_data"));
        cJSON_AddItemToArray(ext, cJSON_CreateString("model_repository"));
        return serve_reply_json(c, 200, j);
    }
    if (!strcmp(u, "/v2/health/live")) return get ? serve_reply(c, 200, "application/json", "{\"live\":true}", 13)
                                                  : serve_reply_error(c, 405, "health takes GET");
    if (!strcmp(u, "/v2/health/ready")) {
        bool ready = serve_ready(c->srv);
        return serve_reply(c, ready ? 200 : 503, "application/json", ready ? "{\"ready\":true}" : "{\"ready\":false}",
                           ready ? 14 : 15);
    }
    if (!strncmp(u, "/v2/models/", 11)) return models(c, u + 11);
    if (!strncmp(u, "/v2/repository/", 15)) return repository(c, u + 15);
    return serve_reply_error(c, 404, "no endpoint %.200s", u);
}
