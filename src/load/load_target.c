/* load_target.c — everything settled before load is sent: the URL is checked and the endpoint
 * derived from it (a server root gets the API's standard path), the headers, the OpenAI model name
 * (asked from GET /v1/models when not given), the prompts, --extra, the KServe payload, and the
 * transport (native HTTP/1.1 for http://, libcurl for https:// or when asked). */
#include "load/load_internal.h"

#include "core/status.h"
#include "core/json_read.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* Body sink of load_http_get. */
static size_t get_sink(char *data, size_t size, size_t nmemb, void *userp) {
    kiln_strbuf_append(userp, data, size * nmemb);
    return size * nmemb;
}

kiln_status load_http_get(const char *url, const struct curl_slist *headers, double timeout_s, kiln_strbuf *body, long *status) {
    CURL *h = curl_easy_init();
    if (!h) return kiln_error(KILN_ERR_OUT_OF_MEMORY, "curl_easy_init failed");
    kiln_strbuf_clear(body);
    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, headers);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, get_sink);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, body);
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, (long)(timeout_s * 1000));
    char why[CURL_ERROR_SIZE] = ""; /* curl's detail ("... port 9: Connection refused") */
    curl_easy_setopt(h, CURLOPT_ERRORBUFFER, why);
    CURLcode rc = curl_easy_perform(h);
    *status = 0;
    long os_errno = 0; /* the system's reason, which the detail may leave out ("Connection refused") */
    curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, status);
    curl_easy_getinfo(h, CURLINFO_OS_ERRNO, &os_errno);
    curl_easy_cleanup(h);
    if (rc != CURLE_OK)
        return kiln_error(KILN_ERR_IO, "GET %s: %s%s%s%s", url, why[0] ? why : curl_easy_strerror(rc), os_errno ? " (" : "",
                          os_errno ? strerror((int)os_errno) : "", os_errno ? ")" : "");
    return kiln_strbuf_status(body);
}

/* The parts of a URL kiln load needs: "scheme://host[:port]" and the path without a trailing '/'. */
static kiln_status split_url(const char *url, char *root, size_t rootcap, char *path, size_t pathcap) {
    CURLU *u = curl_url();
    if (!u) return kiln_error(KILN_ERR_OUT_OF_MEMORY, "out of memory");
    char *scheme = NULL, *host = NULL, *port = NULL, *p = NULL;
    kiln_status st = KILN_OK;
    CURLUcode uc = curl_url_set(u, CURLUPART_URL, url, 0);
    if (uc != CURLUE_OK) {
        st = kiln_error(KILN_ERR_INVALID_ARGUMENT, "URL '%s': %s (expected http://HOST[:PORT][/PATH])", url, curl_url_strerror(uc));
    } else {
        curl_url_get(u, CURLUPART_SCHEME, &scheme, 0);
        curl_url_get(u, CURLUPART_HOST, &host, 0);
        curl_url_get(u, CURLUPART_PORT, &port, 0);
        curl_url_get(u, CURLUPART_PATH, &p, 0);
        if (!scheme || (strcasecmp(scheme, "http") && strcasecmp(scheme, "https")))
            st = kiln_error(KILN_ERR_INVALID_ARGUMENT, "URL '%s': scheme '%s' is not supported (use http:// or https://)", url,
                            scheme ? scheme : "");
        else if (!host || !host[0])
            st = kiln_error(KILN_ERR_INVALID_ARGUMENT, "URL '%s': no host", url);
    }
    if (st == KILN_OK) {
        snprintf(root, rootcap, "%s://%s%s%s", scheme, host, port ? ":" : "", port ? port : "");
        snprintf(path, pathcap, "%s", p ? p : "");
        size_t n = strlen(path);
        while (n > 0 && path[n - 1] == '/') path[--n] = '\0';
    }
    curl_free(scheme);
    curl_free(host);
    curl_free(port);
    curl_free(p);
    curl_url_cleanup(u);
    return st;
}

/* True when s ends with suffix. */
static bool ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && !strcmp(s + n - m, suffix);
}

/* True when the user gave a header with this name. */
static bool user_has_header(const kiln_load_config *c, const char *name) {
    size_t n = strlen(name);
    for (int i = 0; i < c->nheaders; i++)
        if (!strncasecmp(c->headers[i], name, n) && c->headers[i][n] == ':') return true;
    return false;
}

/* Appends a header line; false when out of memory. */
static bool add_header(load_target *t, const char *line) {
    struct curl_slist *l = curl_slist_append(t->headers, line);
    if (!l) return false;
    t->headers = l;
    return true;
}

/* Asks GET ROOT/v1/models for the first model id (when --model is not given). */
static kiln_status discover_model(load_target *t, const char *root, const char *path) {
    char url[1600];
    const char *v1 = strstr(path, "/v1");
    snprintf(url, sizeof url, "%s%.*s/v1/models", root, v1 ? (int)(v1 - path) : 0, path);
    kiln_strbuf body = {0};
    long status;
    kiln_status st = load_http_get(url, t->headers, t->cfg->timeout_s, &body, &status);
    kiln_jdoc d = {0};
    const char *id = NULL;
    if (st == KILN_OK && status == 200 && kiln_jdoc_parse(body.data ? body.data : "", body.len, url, &d) == KILN_OK)
        id = kiln_jdoc_str(kiln_jdoc_get(&d, kiln_jdoc_at(&d, kiln_jdoc_get(&d, kiln_jdoc_root(&d), "data"), 0), "id"));
    if (id) snprintf(t->model, sizeof t->model, "%s", id);
    else if (st != KILN_OK) st = kiln_error(st, "no --model given, and asking the server for one failed: %s", kiln_last_error());
    else if (status != 200) st = kiln_error(KILN_ERR_INVALID_ARGUMENT, "no --model given, and %s answered HTTP %ld: pass --model NAME", url, status);
    else st = kiln_error(KILN_ERR_INVALID_ARGUMENT, "no --model given, and %s did not name one (no data[0].id): pass --model NAME", url);
    kiln_jdoc_free(&d);
    kiln_strbuf_free(&body);
    return st;
}

/* Checks --extra (a JSON object) and keeps its members' text. */
static kiln_status prepare_extra(load_target *t) {
    const char *x = t->cfg->extra_json;
    kiln_jdoc d;
    KILN_TRY(kiln_jdoc_parse(x, strlen(x), "--extra", &d));
    const kiln_jnode *root = kiln_jdoc_root(&d);
    kiln_status st = KILN_OK;
    if (root->type != KILN_JNODE_OBJECT) {
        st = kiln_error(KILN_ERR_INVALID_ARGUMENT, "--extra must be a JSON object, like '{\"temperature\":0}'");
    } else {
        kiln_strbuf b = {0};
        kiln_jdoc_write(&d, root, &b);
        if (kiln_strbuf_status(&b) != KILN_OK) st = kiln_strbuf_status(&b);
        else {
            b.data[b.len - 1] = '\0'; /* drop the braces */
            t->extra_members = strdup(b.data + 1);
            if (!t->extra_members) st = kiln_error(KILN_ERR_OUT_OF_MEMORY, "out of memory");
        }
        kiln_strbuf_free(&b);
    }
    kiln_jdoc_free(&d);
    return st;
}

/* The request URL (and for KServe the metadata URL) for the API, from root and path. */
static kiln_status endpoint(load_target *t, const char *root, const char *path, char *meta, size_t metacap) {
    const kiln_load_config *c = t->cfg;
    const char *std = c->api == KILN_LOAD_API_OPENAI_CHAT ? "/chat/completions" : "/completions";
    switch (c->api) {
    case KILN_LOAD_API_OPENAI_CHAT:
    case KILN_LOAD_API_OPENAI_COMPLETIONS:
        if (!path[0]) snprintf(t->url, sizeof t->url, "%s/v1%s", root, std);
        else if (ends_with(path, "/v1")) snprintf(t->url, sizeof t->url, "%s%s%s", root, path, std);
        else snprintf(t->url, sizeof t->url, "%s", c->url);
        return KILN_OK;
    case KILN_LOAD_API_KSERVE:
        if (strstr(path, "/v2/models/")) {
            size_t n = strlen(path) - (ends_with(path, "/infer") ? 6 : 0);
            snprintf(meta, metacap, "%s%.*s", root, (int)n, path);
            snprintf(t->url, sizeof t->url, "%s/infer", meta);
            return KILN_OK;
        }
        if (!c->model)
            return kiln_error(KILN_ERR_INVALID_ARGUMENT, "kserve: give --model NAME (or a URL ending in /v2/models/NAME/infer)");
        snprintf(meta, metacap, "%s%s/v2/models/%s%s%s", root, path, c->model, c->model_version ? "/versions/" : "",
                 c->model_version ? c->model_version : "");
        snprintf(t->url, sizeof t->url, "%s/infer", meta);
        return KILN_OK;
    case KILN_LOAD_API_HTTP: snprintf(t->url, sizeof t->url, "%s", c->url); return KILN_OK;
    }
    return KILN_OK;
}

/* The headers every request carries. */
static kiln_status prepare_headers(load_target *t) {
    const kiln_load_config *c = t->cfg;
    bool ok = true;
    if (c->api != KILN_LOAD_API_HTTP && !user_has_header(c, "Content-Type"))
        ok = add_header(t, c->api == KILN_LOAD_API_KSERVE && c->kserve_binary ? "Content-Type: application/octet-stream"
                                                                               : "Content-Type: application/json");
    if (ok && c->stream && c->api != KILN_LOAD_API_HTTP && c->api != KILN_LOAD_API_KSERVE && !user_has_header(c, "Accept"))
        ok = add_header(t, "Accept: text/event-stream");
    if (ok) ok = add_header(t, "Expect:"); /* no 100-continue round trip before POST bodies */
    for (int i = 0; ok && i < c->nheaders; i++) ok = add_header(t, c->headers[i]);
    return ok ? KILN_OK : kiln_error(KILN_ERR_OUT_OF_MEMORY, "out of memory for headers");
}

kiln_status load_target_prepare(const kiln_load_config *c, load_target *t) {
    memset(t, 0, sizeof *t);
    t->cfg = c;
    char root[512], path[1024], meta[1900] = "";
    kiln_status st = split_url(c->url, root, sizeof root, path, sizeof path);
    if (st == KILN_OK) st = endpoint(t, root, path, meta, sizeof meta);
    if (st == KILN_OK) st = prepare_headers(t);
    if (st == KILN_OK && c->metrics_url) {
        if (!c->metrics_url[0]) snprintf(t->metrics_url, sizeof t->metrics_url, "%s/metrics", root);
        else {
            char r2[512], p2[1024];
            st = split_url(c->metrics_url, r2, sizeof r2, p2, sizeof p2);
            snprintf(t->metrics_url, sizeof t->metrics_url, "%s", c->metrics_url);
        }
    }
    if (st == KILN_OK && (c->api == KILN_LOAD_API_OPENAI_CHAT || c->api == KILN_LOAD_API_OPENAI_COMPLETIONS)) {
        if (c->model) snprintf(t->model, sizeof t->model, "%s", c->model);
        else st = discover_model(t, root, path);
        if (st == KILN_OK && c->extra_json) st = prepare_extra(t);
        if (st == KILN_OK)
            st = c->prompts_path ? kiln_prompts_load_jsonl(c->prompts_path, &t->prompts)
                                 : kiln_prompts_synthetic(&c->input_len, c->nprompts, c->seed, &t->prompts);
    }
    if (st == KILN_OK && c->api == KILN_LOAD_API_KSERVE) {
        snprintf(t->model, sizeof t->model, "%s", c->model ? c->model : "");
        st = load_kserve_prepare(t, meta);
    }
    if (st == KILN_OK) {
        if (c->api == KILN_LOAD_API_KSERVE) t->body = t->payload.data, t->body_len = t->payload.len;
        else if (c->api == KILN_LOAD_API_HTTP && c->body) t->body = c->body, t->body_len = c->body_len;
        bool https = !strncasecmp(t->url, "https:", 6);
        if (c->transport == KILN_TRANSPORT_NATIVE || (c->transport == KILN_TRANSPORT_AUTO && !https)) st = load_native_prepare(t, t->url);
    }
    if (st != KILN_OK) load_target_free(t);
    return st;
}

void load_target_free(load_target *t) {
    curl_slist_free_all(t->headers);
    kiln_prompts_free(&t->prompts);
    kiln_strbuf_free(&t->payload);
    kiln_strbuf_free(&t->request_head);
    free(t->extra_members);
    memset(t, 0, sizeof *t);
}
