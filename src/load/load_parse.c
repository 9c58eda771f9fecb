/* load_parse.c — kiln load's configuration defaults, the parsers for its compound arguments
 * (durations, SLOs, sweeps, stop rules, shapes) and the printable names of its enums. */
#include "load/load.h"

#include "core/status.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void kiln_load_config_defaults(kiln_load_config *c) {
    memset(c, 0, sizeof *c);
    c->api = KILN_LOAD_API_HTTP;
    c->concurrency = 1;
    c->connections = 256;
    c->threads = 1;
    c->warmup_s = 1;
    c->timeout_s = 60;
    c->seed = 1;
    c->goodput_share = 0.99;
    c->input_len = (kiln_len_dist){KILN_LEN_FIXED, 128, 0};
    c->output_len = (kiln_len_dist){KILN_LEN_FIXED, 128, 0};
    c->nprompts = 256;
    c->scrape_interval_s = 1;
}

kiln_status kiln_load_parse_duration_us(const char *text, int64_t *out) {
    char *end;
    double v = strtod(text, &end);
    double scale;
    if (end == text) scale = -1;
    else if (!*end || !strcmp(end, "s")) scale = 1e6;
    else if (!strcmp(end, "ms")) scale = 1e3;
    else if (!strcmp(end, "us") || !strcmp(end, "\xc2\xb5s")) scale = 1;
    else if (!strcmp(end, "m") || !strcmp(end, "min")) scale = 60e6;
    else if (!strcmp(end, "h")) scale = 3600e6;
    else scale = -1;
    if (scale < 0 || !isfinite(v) || v <= 0 || v * scale > 1e15)
        return kiln_error(KILN_ERR_INVALID_ARGUMENT, "'%s' is not a duration (expected a positive number with us, ms, s, m or h, like 250ms or 2s)", text);
    *out = (int64_t)llround(v * scale) > 0 ? (int64_t)llround(v * scale) : 1;
    return KILN_OK;
}

kiln_status kiln_load_parse_api(const char *text, kiln_load_api *out) {
    if (!strcmp(text, "openai-chat") || !strcmp(text, "chat")) *out = KILN_LOAD_API_OPENAI_CHAT;
    else if (!strcmp(text, "openai-completions") || !strcmp(text, "openai") || !strcmp(text, "completions")) *out = KILN_LOAD_API_OPENAI_COMPLETIONS;
    else if (!strcmp(text, "kserve") || !strcmp(text, "kserve-v2")) *out = KILN_LOAD_API_KSERVE;
    else if (!strcmp(text, "http")) *out = KILN_LOAD_API_HTTP;
    else return kiln_error(KILN_ERR_INVALID_ARGUMENT, "--api '%s': expected openai-chat, openai-completions, kserve or http", text);
    return KILN_OK;
}

kiln_status kiln_load_parse_transport(const char *text, kiln_load_transport *out) {
    if (!strcmp(text, "auto")) *out = KILN_TRANSPORT_AUTO;
    else if (!strcmp(text, "native")) *out = KILN_TRANSPORT_NATIVE;
    else if (!strcmp(text, "curl")) *out = KILN_TRANSPORT_CURL;
    else return kiln_error(KILN_ERR_INVALID_ARGUMENT, "--transport '%s': expected auto, native or curl", text);
    return KILN_OK;
}

/* Copies the next comma-separated item of *p into buf (false at the end). */
static bool next_item(const char **p, char *buf, size_t cap) {
    if (!**p) return false;
    const char *comma = strchr(*p, ',');
    size_t n = comma ? (size_t)(comma - *p) : strlen(*p);
    snprintf(buf, cap, "%.*s", (int)n, *p);
    *p += n + (comma ? 1 : 0);
    return true;
}

kiln_status kiln_load_parse_slo(const char *text, kiln_load_config *c) {
    char item[128];
    const char *p = text;
    if (!*text) return kiln_error(KILN_ERR_INVALID_ARGUMENT, "--slo: empty (expected e.g. ttft=200ms,tpot=50ms,e2e=2s)");
    while (next_item(&p, item, sizeof item)) {
        char *eq = strchr(item, '=');
        if (!eq) return kiln_error(KILN_ERR_INVALID_ARGUMENT, "--slo '%s': expected KEY=DURATION with KEY one of ttft, tpot, itl, e2e", item);
        *eq = '\0';
        int64_t *dst = !strcmp(item, "ttft") ? &c->slo_ttft_us : !strcmp(item, "tpot") ? &c->slo_tpot_us
                     : !strcmp(item, "itl") ? &c->slo_itl_us : !strcmp(item, "e2e") || !strcmp(item, "latency") ? &c->slo_e2e_us : NULL;
        if (!dst) return kiln_error(KILN_ERR_INVALID_ARGUMENT, "--slo: unknown term '%s' (expected ttft, tpot, itl or e2e)", item);
        kiln_status s = kiln_load_parse_duration_us(eq + 1, dst);
        if (s != KILN_OK) return kiln_error_prefix(s, "--slo %s", item);
    }
    return KILN_OK;
}

kiln_status kiln_load_parse_sweep(const char *text, kiln_load_config *c) {
    const char *eq = strchr(text, '=');
    size_t klen = eq ? (size_t)(eq - text) : 0;
    if (eq && klen == 4 && !memcmp(text, "rate", 4)) c->sweep = KILN_SWEEP_RATE;
    else if (eq && klen == 11 && !memcmp(text, "concurrency", 11)) c->sweep = KILN_SWEEP_CONCURRENCY;
    else return kiln_error(KILN_ERR_INVALID_ARGUMENT, "--sweep '%s': expected rate=R1,R2,... or concurrency=N1,N2,...", text);
    char item[64];
    const char *p = eq + 1;
    c->nsweep = 0;
    while (next_item(&p, item, sizeof item)) {
        char *end;
        double v = strtod(item, &end);
        bool conc = c->sweep == KILN_SWEEP_CONCURRENCY;
        if (end == item || *end || !isfinite(v) || v <= 0 || (conc && (v != floor(v) || v > 100000)) || v > 1e7)
            return kiln_error(KILN_ERR_INVALID_ARGUMENT, "--sweep: '%s' is not a %s", item,
                              conc ? "whole number of requests in flight (1..100000)" : "positive rate in requests/s");
        if (c->nsweep == KILN_LOAD_MAX_STEPS) return kiln_error(KILN_ERR_INVALID_ARGUMENT, "--sweep: more than %d values", KILN_LOAD_MAX_STEPS);
        c->sweep_values[c->nsweep++] = v;
    }
    if (c->nsweep == 0) return kiln_error(KILN_ERR_INVALID_ARGUMENT, "--sweep '%s': no values", text);
    return KILN_OK;
}

/* Parses one stop condition "LHS>RHS". */
static kiln_status parse_stop_item(const char *item, kiln_load_stop *s) {
    static const char *FORMS = "expected [e2e_|ttft_|itl_|tpot_](p50|p90|p95|p99|p99.9|max|mean)>DURATION or errors>PERCENT%";
    const char *gt = strchr(item, '>');
    if (!gt) return kiln_error(KILN_ERR_INVALID_ARGUMENT, "--stop-when '%s': %s", item, FORMS);
    char lhs[64];
    snprintf(lhs, sizeof lhs, "%.*s", (int)(gt - item), item);
    const char *rhs = gt[1] == '=' ? gt + 2 : gt + 1;
    memset(s, 0, sizeof *s);
    if (!strcmp(lhs, "errors") || !strcmp(lhs, "error_rate") || !strcmp(lhs, "error-rate")) {
        char *end;
        double v = strtod(rhs, &end);
        bool pct = *end == '%';
        if (end == rhs || (pct ? end[1] != '\0' : *end != '\0') || !(v >= 0))
            return kiln_error(KILN_ERR_INVALID_ARGUMENT, "--stop-when '%s': the error rate must be a fraction or a percentage (errors>1%%)", item);
        s->error_rate = true;
        s->threshold = pct ? v / 100 : v;
        return KILN_OK;
    }
    const char *stat = lhs;
    s->metric = KILN_METRIC_E2E;
    static const char *const METRICS[] = {"e2e", "ttft", "itl", "tpot"};
    for (int m = 0; m < 4; m++) {
        size_t n = strlen(METRICS[m]);
        if (!strncmp(lhs, METRICS[m], n) && (lhs[n] == '_' || lhs[n] == '.')) {
            s->metric = (kiln_load_metric)m;
            stat = lhs + n + 1;
        }
    }
    char *end;
    if (!strcmp(stat, "max")) s->percentile = 100;
    else if (!strcmp(stat, "mean")) s->percentile = -1;
    else if (stat[0] == 'p' && (s->percentile = strtod(stat + 1, &end), end != stat + 1 && !*end) && s->percentile > 0 && s->percentile <= 100) {}
    else return kiln_error(KILN_ERR_INVALID_ARGUMENT, "--stop-when '%s': %s", item, FORMS);
    int64_t us;
    kiln_status st = kiln_load_parse_duration_us(rhs, &us);
    if (st != KILN_OK) return kiln_error_prefix(st, "--stop-when '%s'", item);
    s->threshold = (double)us;
    return KILN_OK;
}

kiln_status kiln_load_parse_stop(const char *text, kiln_load_config *c) {
    char item[128];
    const char *p = text;
    if (!*text) return kiln_error(KILN_ERR_INVALID_ARGUMENT, "--stop-when: empty (expected e.g. p99>500ms)");
    while (next_item(&p, item, sizeof item)) {
        if (c->nstops == KILN_LOAD_MAX_STOPS) return kiln_error(KILN_ERR_INVALID_ARGUMENT, "--stop-when: more than %d conditions", KILN_LOAD_MAX_STOPS);
        KILN_TRY(parse_stop_item(item, &c->stops[c->nstops]));
        c->nstops++;
    }
    return KILN_OK;
}

kiln_status kiln_load_parse_shape(const char *text, kiln_load_config *c) {
    const char *eq = strchr(text, '=');
    if (!eq || eq == text || eq - text >= 128)
        return kiln_error(KILN_ERR_INVALID_ARGUMENT, "--shape '%s': expected NAME=D1xD2x... (e.g. input=1x3x224x224)", text);
    if (c->nshapes == KILN_LOAD_MAX_INPUTS) return kiln_error(KILN_ERR_INVALID_ARGUMENT, "--shape: more than %d", KILN_LOAD_MAX_INPUTS);
    int i = c->nshapes, nd = 0;
    const char *p = eq + 1;
    for (;;) {
        char *end;
        long long v = strtoll(p, &end, 10);
        if (end == p || v < 0 || v > (1LL << 31) || nd == 8)
            return kiln_error(KILN_ERR_INVALID_ARGUMENT, "--shape '%s': dimensions must be whole numbers >= 0, at most 8 of them", text);
        c->shape_dims[i][nd++] = v;
        if (*end == '\0') break;
        if (*end != 'x' && *end != ',') return kiln_error(KILN_ERR_INVALID_ARGUMENT, "--shape '%s': separate dimensions with 'x'", text);
        p = end + 1;
    }
    snprintf(c->shape_names[i], sizeof c->shape_names[i], "%.*s", (int)(eq - text), text);
    c->shape_ndims[i] = nd;
    c->nshapes++;
    return KILN_OK;
}

kiln_status kiln_load_parse_input(const char *text, kiln_load_config *c) {
    const char *eq = strchr(text, '=');
    if (!eq || eq == text || !eq[1] || eq - text >= 128)
        return kiln_error(KILN_ERR_INVALID_ARGUMENT, "--input '%s': expected NAME=FILE.npy", text);
    if (c->ninputs == KILN_LOAD_MAX_INPUTS) return kiln_error(KILN_ERR_INVALID_ARGUMENT, "--input: more than %d", KILN_LOAD_MAX_INPUTS);
    snprintf(c->input_names[c->ninputs], sizeof c->input_names[0], "%.*s", (int)(eq - text), text);
    c->input_files[c->ninputs++] = eq + 1;
    return KILN_OK;
}

const char *kiln_load_api_name(kiln_load_api a) {
    switch (a) {
    case KILN_LOAD_API_OPENAI_CHAT: return "openai-chat";
    case KILN_LOAD_API_OPENAI_COMPLETIONS: return "openai-completions";
    case KILN_LOAD_API_KSERVE: return "kserve";
    default: return "http";
    }
}

const char *kiln_load_metric_name(kiln_load_metric m) {
    static const char *const N[] = {"e2e", "ttft", "itl", "tpot", "send_lag"};
    return m >= 0 && m < KILN_METRIC_COUNT ? N[m] : "?";
}

const char *kiln_load_err_name(kiln_load_err e) {
    static const char *const N[] = {"http_status", "refused", "timeout", "resolve", "connect", "closed", "malformed", "not_sent", "other"};
    return e >= 0 && e < KILN_LOADERR_COUNT ? N[e] : "?";
}
