/* auth.c — API keys (hashed), their model lists and token-bucket limits (contract in auth.h). */
#include "serve/auth.h"

#include "core/sha256.h"
#include "core/status.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

void serve_auth_init(serve_auth *a) {
    memset(a, 0, sizeof *a);
    pthread_mutex_init(&a->mu, NULL);
}

void serve_auth_free(serve_auth *a) {
    for (int i = 0; i < a->n_keys; i++) free(a->keys[i].models);
    free(a->keys);
    pthread_mutex_destroy(&a->mu);
}

static serve_key *add_key(serve_auth *a) {
    if (a->n_keys == a->cap_keys) {
        int cap = a->cap_keys ? 2 * a->cap_keys : 8;
        serve_key *grown = realloc(a->keys, sizeof(serve_key) * (size_t)cap);
        if (!grown) return NULL;
        a->keys = grown;
        a->cap_keys = cap;
    }
    serve_key *k = &a->keys[a->n_keys++];
    memset(k, 0, sizeof *k);
    return k;
}

static void fill_buckets(serve_key *k) {
    if (k->rps > 0 && k->burst <= 0) k->burst = k->rps < 1 ? 1 : k->rps;
    k->req_bucket = k->burst;
    k->tok_bucket = k->tpm;
    k->last_us = now_us();
}

kiln_status serve_auth_add_plain(serve_auth *a, const char *key) {
    if (!key[0]) return kiln_error(KILN_ERR_INVALID_ARGUMENT, "an API key may not be empty");
    serve_key *k = add_key(a);
    if (!k) return kiln_error(KILN_ERR_OUT_OF_MEMORY, "API keys");
    kiln_sha256_hex(key, strlen(key), k->hash);
    snprintf(k->name, sizeof k->name, "key%d", a->n_keys);
    k->rps = a->default_rps, k->burst = a->default_burst, k->tpm = a->default_tpm;
    fill_buckets(k);
    return KILN_OK;
}

static bool parse_num(const char *s, double *out) {
    char *end;
    double v = strtod(s, &end);
    if (end == s || *end || !(v >= 0) || v > 1e12) return false;
    *out = v;
    return true;
}

static kiln_status parse_line(serve_auth *a, char *line, const char *path, int lineno) {
    char *save = NULL, *tok = strtok_r(line, " \t\r\n", &save);
    if (!tok || tok[0] == '#') return KILN_OK;
    if (!strncmp(tok, "sha256:", 7)) tok += 7;
    bool hex = strlen(tok) == 64;
    for (const char *p = tok; hex && *p; p++) hex = isxdigit((unsigned char)*p);
    if (!hex) return kiln_error(KILN_ERR_PARSE, "%s:%d: expected the 64 hex digits of a key's SHA-256", path, lineno);
    serve_key *k = add_key(a);
    if (!k) return kiln_error(KILN_ERR_OUT_OF_MEMORY, "API keys");
    for (int i = 0; i < 64; i++) k->hash[i] = (char)tolower((unsigned char)tok[i]);
    snprintf(k->name, sizeof k->name, "%.10s", k->hash);
    while ((tok = strtok_r(NULL, " \t\r\n", &save)) && tok[0] != '#') {
        char *eq = strchr(tok, '=');
        if (!eq) return kiln_error(KILN_ERR_PARSE, "%s:%d: '%s' is not KEY=VALUE", path, lineno, tok);
        *eq = 0;
        const char *v = eq + 1;
        bool ok = true;
        if (!strcmp(tok, "name")) snprintf(k->name, sizeof k->name, "%s", v);
        else if (!strcmp(tok, "models")) ok = v[0] && (k->models = strdup(v));
        else if (!strcmp(tok, "rps")) ok = parse_num(v, &k->rps);
        else if (!strcmp(tok, "burst")) ok = parse_num(v, &k->burst);
        else if (!strcmp(tok, "tpm")) ok = parse_num(v, &k->tpm);
        else return kiln_error(KILN_ERR_PARSE, "%s:%d: unknown setting '%s' (name, models, rps, burst, tpm)", path, lineno, tok);
        if (!ok) return kiln_error(KILN_ERR_PARSE, "%s:%d: bad value '%s' for %s", path, lineno, v, tok);
    }
    fill_buckets(k);
    return KILN_OK;
}

kiln_status serve_auth_load_file(serve_auth *a, const char *path) {
    FILE *f = fopen(path, "r");
    if (!f) return kiln_error(KILN_ERR_IO, "keys file %s: %s", path, strerror(errno));
    char line[4096];
    int lineno = 0;
    kiln_status st = KILN_OK;
    while (!st && fgets(line, sizeof line, f)) st = parse_line(a, line, path, ++lineno);
    fclose(f);
    return st;
}

bool serve_auth_enabled(const serve_auth *a) { return a->n_keys > 0; }

int serve_auth_check(serve_auth *a, const char *authorization, serve_key **key, char *msg, size_t msg_size) {
    *key = NULL;
    if (!authorization || strncasecmp(authorization, "Bearer ", 7)) {
        snprintf(msg, msg_size, "missing API key: send the header 'Authorization: Bearer <key>'");
        return 401;
    }
    const char *token = authorization + 7;
    while (*token == ' ') token++;
    char hash[65];
    kiln_sha256_hex(token, strlen(token), hash);
    for (int i = 0; i < a->n_keys; i++)
        if (!strcmp(a->keys[i].hash, hash)) *key = &a->keys[i];
    if (!*key) {
        snprintf(msg, msg_size, "invalid API key");
        return 401;
    }
    return 200;
}

bool serve_auth_allows(const serve_key *key, const char *model) {
    if (!key || !key->models) return true;
    size_t n = strlen(model);
    for (const char *p = key->models; *p;) {
        const char *comma = strchr(p, ',');
        size_t len = comma ? (size_t)(comma - p) : strlen(p);
        if (len == n && !strncmp(p, model, n)) return true;
        p += len + (comma ? 1 : 0);
    }
    return false;
}

static void refill(serve_key *k, double now) {
    double dt = (now - k->last_us) / 1e6;
    k->last_us = now;
    if (k->rps > 0) k->req_bucket = k->req_bucket + dt * k->rps > k->burst ? k->burst : k->req_bucket + dt * k->rps;
    if (k->tpm > 0) k->tok_bucket = k->tok_bucket + dt * k->tpm / 60 > k->tpm ? k->tpm : k->tok_bucket + dt * k->tpm / 60;
}

int serve_auth_admit(serve_auth *a, serve_key *key, double *retry_after_s, char *msg, size_t msg_size) {
    if (!key) return 200;
    int status = 200;
    pthread_mutex_lock(&a->mu);
    refill(key, now_us());
    if (key->tpm > 0 && key->tok_bucket <= 0) {
        *retry_after_s = -key->tok_bucket / (key->tpm / 60) + 0.001;
        snprintf(msg, msg_size, "key '%s' is over its limit of %g tokens per minute", key->name, key->tpm);
        status = 429;
    } else if (key->rps > 0 && key->req_bucket < 1) {
        *retry_after_s = (1 - key->req_bucket) / key->rps;
        snprintf(msg, msg_size, "key '%s' is over its limit of %g requests per second", key->name, key->rps);
        status = 429;
    } else if (key->rps > 0) {
        key->req_bucket -= 1;
    }
    pthread_mutex_unlock(&a->mu);
    return status;
}

void serve_auth_charge_tokens(serve_auth *a, serve_key *key, int tokens) {
    if (!key || key->tpm <= 0) return;
    pthread_mutex_lock(&a->mu);
    refill(key, now_us());
    key->tok_bucket -= tokens;
    pthread_mutex_unlock(&a->mu);
}
