/* model_config.c — reads DIR/<model>/config.json of the model repository into a serve_model_config
 * (keys documented in docs/serve.md). Strict: an unknown key or a value of the wrong type or range
 * fails the load with a message naming it, so that a typo never goes unnoticed. */
#include "serve/repo.h"

#include "core/status.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <stddef.h>
#include <string.h>

static void defaults(serve_model_config *c) {
    memset(c, 0, sizeof *c);
    c->batch = (serve_batch_config){.max_batch = 8, .max_queue_delay_us = 500, .max_queue = 64, .timeout_us = 30000000,
                                    .instances = 1, .priority_levels = 1, .breaker_failures = 3,
                                    .breaker_cooldown_ms = 5000, .landing_batches = 8};
    c->version_latest = 1;
    snprintf(c->target, sizeof c->target, "cpu");
    c->n_devices = 1;
}

/* The integer value of item in [lo, hi], else an error naming key. */
static kiln_status int_in(const cJSON *item, const char *what, int64_t lo, int64_t hi, int64_t *out) {
    double v = cJSON_IsNumber(item) ? item->valuedouble : NAN;
    if (!cJSON_IsNumber(item) || v != floor(v) || v < (double)lo || v > (double)hi)
        return kiln_error(KILN_ERR_INVALID_ARGUMENT, "%s: '%s' must be an integer in [%lld, %lld]", what, item->string,
                          (long long)lo, (long long)hi);
    *out = (int64_t)v;
    return KILN_OK;
}

/* Whether an earlier member of parent has item's key (JSON leaves duplicates to the reader; a
 * config that names a setting twice is refused rather than read one way or the other). */
static bool key_seen_before(const cJSON *parent, const cJSON *item) {
    for (const cJSON *p = parent->child; p && p != item; p = p->next)
        if (!strcmp(p->string, item->string)) return true;
    return false;
}

static kiln_status parse_versions(const cJSON *item, const char *what, serve_model_config *c) {
    if (cJSON_IsString(item) && !strcmp(item->valuestring, "all")) {
        c->version_all = true;
        return KILN_OK;
    }
    const cJSON *latest = cJSON_GetObjectItemCaseSensitive(item, "latest");
    const cJSON *specific = cJSON_GetObjectItemCaseSensitive(item, "specific");
    if (cJSON_IsObject(item) && cJSON_GetArraySize(item) == 1 && latest) {
        int64_t n;
        if (int_in(latest, what, 1, 1000, &n)) return KILN_ERR_INVALID_ARGUMENT;
        c->version_latest = (int)n;
        return KILN_OK;
    }
    if (cJSON_IsObject(item) && cJSON_GetArraySize(item) == 1 && cJSON_IsArray(specific) &&
        cJSON_GetArraySize(specific) > 0 && cJSON_GetArraySize(specific) <= SERVE_MAX_SPECIFIC) {
        const cJSON *v;
        cJSON_ArrayForEach(v, specific) {
            int64_t n;
            if (int_in(v, what, 1, INT64_C(1) << 50, &n)) return KILN_ERR_INVALID_ARGUMENT;
            c->version_specific[c->n_specific++] = n;
        }
        return KILN_OK;
    }
    return kiln_error(KILN_ERR_INVALID_ARGUMENT,
                      "%s: 'version_policy' must be \"all\", {\"latest\": N} or {\"specific\": [v, ...]} (at most %d)",
                      what, SERVE_MAX_SPECIFIC);
}

/* "devices": [0, 1]: distinct GPU ordinals. */
static kiln_status parse_devices(const cJSON *item, const char *what, serve_model_config *c) {
    if (!cJSON_IsArray(item) || cJSON_GetArraySize(item) < 1 || cJSON_GetArraySize(item) > SERVE_MAX_DEVICES)
        return kiln_error(KILN_ERR_INVALID_ARGUMENT, "%s: 'devices' must be a list of 1 to %d GPU ordinals, e.g. [0, 1]",
                          what, SERVE_MAX_DEVICES);
    c->n_devices = 0;
    const cJSON *v;
    cJSON_ArrayForEach(v, item) {
        int64_t d;
        if (int_in(v, what, 0, 64, &d)) return KILN_ERR_INVALID_ARGUMENT;
        for (int k = 0; k < c->n_devices; k++)
            if (c->devices[k] == d) return kiln_error(KILN_ERR_INVALID_ARGUMENT, "%s: 'devices' names GPU %d twice", what, (int)d);
        c->devices[c->n_devices++] = (int)d;
    }
    return KILN_OK;
}

/* Settles the devices: "devices" and "device" exclude each other; without a list, the model runs
 * on "device" alone; a list is for target "cuda" (or, in tests, KILN_SERVE_CPU_DEVICES=1). */
static kiln_status settle_devices(const cJSON *root, const char *what, serve_model_config *c) {
    bool listed = cJSON_GetObjectItemCaseSensitive(root, "devices") != NULL;
    if (listed && cJSON_GetObjectItemCaseSensitive(root, "device"))
        return kiln_error(KILN_ERR_INVALID_ARGUMENT, "%s: give either 'device' (one GPU) or 'devices' (a list), not both", what);
    const char *cpu_devices = getenv("KILN_SERVE_CPU_DEVICES");
    if (listed && strcmp(c->target, "cuda") && !(cpu_devices && !strcmp(cpu_devices, "1")))
        return kiln_error(KILN_ERR_INVALID_ARGUMENT, "%s: 'devices' applies to target \"cuda\" (this model's target is "
                          "\"%s\"): set \"target\": \"cuda\" or remove 'devices'", what, c->target);
    if (!listed) c->devices[0] = c->device, c->n_devices = 1;
    c->devices_listed = listed;
    c->device = c->devices[0];
    return KILN_OK;
}

static kiln_status parse_list(const cJSON *item, const char *what, serve_model_config *c) {
    if (!strcmp(item->string, "preferred_batch_sizes")) {
        if (!cJSON_IsArray(item) || cJSON_GetArraySize(item) > 8)
            return kiln_error(KILN_ERR_INVALID_ARGUMENT, "%s: 'preferred_batch_sizes' must be a list of at most 8 sizes", what);
        const cJSON *v;
        cJSON_ArrayForEach(v, item) {
            int64_t n;
            if (int_in(v, what, 1, 1 << 20, &n)) return KILN_ERR_INVALID_ARGUMENT;
            c->batch.preferred[c->batch.n_preferred++] = (int)n;
        }
        return KILN_OK;
    }
    if (!cJSON_IsArray(item) || cJSON_GetArraySize(item) > SERVE_MAX_ALIASES)
        return kiln_error(KILN_ERR_INVALID_ARGUMENT, "%s: 'aliases' must be a list of at most %d names", what, SERVE_MAX_ALIASES);
    const cJSON *v;
    cJSON_ArrayForEach(v, item) {
        if (!cJSON_IsString(v) || !v->valuestring[0] || strlen(v->valuestring) >= SERVE_NAME_MAX || strchr(v->valuestring, '/'))
            return kiln_error(KILN_ERR_INVALID_ARGUMENT, "%s: every alias must be a non-empty name without '/'", what);
        snprintf(c->aliases[c->n_aliases++], SERVE_NAME_MAX, "%s", v->valuestring);
    }
    return KILN_OK;
}

/* {"1": 90, "2": 10}: version -> weight. */
static kiln_status parse_traffic(const cJSON *item, const char *what, serve_model_config *c) {
    if (!cJSON_IsObject(item) || cJSON_GetArraySize(item) < 1 || cJSON_GetArraySize(item) > SERVE_MAX_SPECIFIC)
        return kiln_error(KILN_ERR_INVALID_ARGUMENT, "%s: 'traffic' must map versions to weights, e.g. {\"1\": 90, \"2\": 10}", what);
    const cJSON *w;
    cJSON_ArrayForEach(w, item) {
        if (key_seen_before(item, w))
            return kiln_error(KILN_ERR_INVALID_ARGUMENT, "%s: 'traffic' names version \"%s\" twice", what, w->string);
        char *end;
        long long v = strtoll(w->string, &end, 10);
        if (*end || v < 1 || !cJSON_IsNumber(w) || !(w->valuedouble >= 0) || w->valuedouble > 1e9)
            return kiln_error(KILN_ERR_INVALID_ARGUMENT, "%s: 'traffic' must map versions (\"1\") to weights >= 0, got \"%s\"",
                              what, w->string);
        c->traffic_version[c->n_traffic] = v;
        c->traffic_weight[c->n_traffic++] = w->valuedouble;
    }
    return KILN_OK;
}

/* The integer settings: key, range, and the field each sets (its offset, and its C type read from the
 * field itself, so a field whose type changes cannot be written through the wrong width). */
typedef enum { SET_INT, SET_I64, SET_U64, SET_DOUBLE } setting_type;
#define FIELD(m) offsetof(serve_model_config, m), \
    _Generic(((serve_model_config *)0)->m, int: SET_INT, int64_t: SET_I64, uint64_t: SET_U64, double: SET_DOUBLE)
#define BATCH(f) FIELD(batch.f)
#define LLM(f) FIELD(llm.f)
static const struct int_setting {
    const char *key;
    int64_t lo, hi;
    size_t offset;
    setting_type type;
} INT_SETTINGS[] = {
    {"max_batch", 0, 4096, BATCH(max_batch)},
    {"max_queue_delay_us", 0, 10000000, BATCH(max_queue_delay_us)},
    {"max_queue", 0, 1000000, BATCH(max_queue)},
    {"timeout_us", 0, INT64_C(3600000000), BATCH(timeout_us)},
    {"instances", 1, 64, BATCH(instances)},
    {"breaker_failures", 1, 1000, BATCH(breaker_failures)},
    {"breaker_cooldown_ms", 0, 3600000, BATCH(breaker_cooldown_ms)},
    {"priority_levels", 1, 16, BATCH(priority_levels)},
    {"landing_batches", 0, 1024, BATCH(landing_batches)},
    {"device", 0, 64, FIELD(device)},
    {"kv_cache_bytes", 0, INT64_C(1) << 50, LLM(kv_cache_bytes)},
    {"kv_cache_blocks", 0, 1 << 30, LLM(kv_cache_blocks)},
    {"max_seqs", 0, 1 << 20, LLM(max_seqs)},
    {"max_batched_tokens", 0, 1 << 24, LLM(max_batched_tokens)},
    {"max_context", 0, 1 << 24, LLM(max_context)},
    {"max_waiting", 0, 1 << 24, LLM(max_waiting)},
    {"max_waiting_tokens", 0, INT64_C(1) << 40, LLM(max_waiting_tokens)},
    {"queue_timeout_ms", 0, 86400000, LLM(queue_timeout_ms)},
    {"draft_tokens", 0, KILN_LLM_MAX_DRAFT_TOKENS, LLM(draft_tokens)},
};
#undef BATCH
#undef LLM
#undef FIELD

/* Sets the integer setting named by item->string, if it is one (*known); its value checked against the range. */
static kiln_status parse_int(const cJSON *item, const char *what, serve_model_config *c, bool *known) {
    for (size_t k = 0; k < sizeof INT_SETTINGS / sizeof INT_SETTINGS[0]; k++) {
        const struct int_setting *s = &INT_SETTINGS[k];
        if (strcmp(item->string, s->key)) continue;
        *known = true;
        int64_t v;
        if (int_in(item, what, s->lo, s->hi, &v)) return KILN_ERR_INVALID_ARGUMENT;
        char *field = (char *)c + s->offset;
        switch (s->type) {
        case SET_INT: *(int *)field = (int)v; break;
        case SET_I64: *(int64_t *)field = v; break;
        case SET_U64: *(uint64_t *)field = (uint64_t)v; break;
        case SET_DOUBLE: *(double *)field = (double)v; break;
        }
        return KILN_OK;
    }
    return KILN_OK;
}

kiln_status serve_model_config_parse(const char *json, size_t len, const char *what, serve_model_config *c) {
    defaults(c);
    if (!json) return KILN_OK;
    cJSON *root = cJSON_ParseWithLength(json, len);
    if (!cJSON_IsObject(root)) {
        cJSON_Delete(root);
        return kiln_error(KILN_ERR_PARSE, "%s: not a JSON object", what);
    }
    kiln_status st = KILN_OK;
    const cJSON *item;
    cJSON_ArrayForEach(item, root) {
        bool known = false;
        if (key_seen_before(root, item)) {
            st = kiln_error(KILN_ERR_INVALID_ARGUMENT, "%s: key '%s' is given twice", what, item->string);
            break;
        }
        if ((st = parse_int(item, what, c, &known))) break;
        if (known) continue;
        if (!strcmp(item->string, "version_policy")) st = parse_versions(item, what, c);
        else if (!strcmp(item->string, "preferred_batch_sizes") || !strcmp(item->string, "aliases")) st = parse_list(item, what, c);
        else if (!strcmp(item->string, "traffic")) st = parse_traffic(item, what, c);
        else if (!strcmp(item->string, "chat_template")) {
            if (!cJSON_IsString(item) || !item->valuestring[0] || strlen(item->valuestring) >= sizeof c->chat_template ||
                strstr(item->valuestring, ".."))
                st = kiln_error(KILN_ERR_INVALID_ARGUMENT, "%s: 'chat_template' must name a file in the model's directory", what);
            else snprintf(c->chat_template, sizeof c->chat_template, "%s", item->valuestring);
        } else if (!strcmp(item->string, "kv_cache_dtype")) {
            if (!cJSON_IsString(item) || (strcmp(item->valuestring, "auto") && strcmp(item->valuestring, "fp8")))
                st = kiln_error(KILN_ERR_INVALID_ARGUMENT, "%s: 'kv_cache_dtype' must be \"auto\" or \"fp8\"", what);
            else c->llm.kv_cache_dtype = strcmp(item->valuestring, "fp8") ? NULL : "fp8";
        } else if (!strcmp(item->string, "kv_calib_text")) {
            if (!cJSON_IsString(item) || !item->valuestring[0] || strlen(item->valuestring) >= sizeof c->kv_calib_text ||
                strstr(item->valuestring, ".."))
                st = kiln_error(KILN_ERR_INVALID_ARGUMENT, "%s: 'kv_calib_text' must name a file in the model's directory", what);
            else snprintf(c->kv_calib_text, sizeof c->kv_calib_text, "%s", item->valuestring);
        } else if (!strcmp(item->string, "prefix_cache")) {
            if (!cJSON_IsBool(item)) st = kiln_error(KILN_ERR_INVALID_ARGUMENT, "%s: 'prefix_cache' must be true or false", what);
            else c->llm.no_prefix_cache = cJSON_IsFalse(item);
        } else if (!strcmp(item->string, "spec")) {
            if (!cJSON_IsString(item) || (strcmp(item->valuestring, "ngram") && strcmp(item->valuestring, "draft") &&
                                          strcmp(item->valuestring, "off")))
                st = kiln_error(KILN_ERR_INVALID_ARGUMENT, "%s: 'spec' must be \"ngram\", \"draft\" or \"off\"", what);
            else c->llm.spec = !strcmp(item->valuestring, "off") ? NULL : strcmp(item->valuestring, "draft") ? "ngram" : "draft";
        } else if (!strcmp(item->string, "draft")) {
            if (!cJSON_IsString(item) || !item->valuestring[0] || strlen(item->valuestring) >= sizeof c->draft)
                st = kiln_error(KILN_ERR_INVALID_ARGUMENT, "%s: 'draft' must name a draft model (a directory or engine "
                                "file, relative to the model's directory unless absolute)", what);
            else snprintf(c->draft, sizeof c->draft, "%s", item->valuestring);
        } else if (!strcmp(item->string, "devices")) {
            st = parse_devices(item, what, c);
        } else if (!strcmp(item->string, "io_format")) {
            if (!cJSON_IsString(item) || (strcmp(item->valuestring, "fp32") && strcmp(item->valuestring, "fp16")))
                st = kiln_error(KILN_ERR_INVALID_ARGUMENT, "%s: 'io_format' must be \"fp32\" or \"fp16\"", what);
            else c->io_fp16 = !strcmp(item->valuestring, "fp16");
        } else if (!strcmp(item->string, "target")) {
            if (!cJSON_IsString(item) || (strcmp(item->valuestring, "cpu") && strcmp(item->valuestring, "cuda")))
                st = kiln_error(KILN_ERR_INVALID_ARGUMENT, "%s: 'target' must be \"cpu\" or \"cuda\"", what);
            else snprintf(c->target, sizeof c->target, "%s", item->valuestring);
        } else {
            st = kiln_error(KILN_ERR_INVALID_ARGUMENT,
                            "%s: unknown key '%s' (known: max_batch, preferred_batch_sizes, max_queue_delay_us, max_queue, "
                            "timeout_us, instances, breaker_failures, breaker_cooldown_ms, version_policy, target, "
                            "io_format, device, devices, aliases, kv_cache_bytes, kv_cache_blocks, max_seqs, "
                            "max_batched_tokens, max_context, max_waiting, max_waiting_tokens, queue_timeout_ms, "
                            "prefix_cache, spec, draft, draft_tokens, chat_template, kv_cache_dtype, kv_calib_text, "
                            "traffic, priority_levels, landing_batches)",
                            what, item->string);
        }
        if (st) break;
    }
    if (!st) st = settle_devices(root, what, c);
    cJSON_Delete(root);
    for (int i = 0; !st && i < c->batch.n_preferred; i++)
        if (c->batch.preferred[i] > c->batch.max_batch)
            st = kiln_error(KILN_ERR_INVALID_ARGUMENT, "%s: preferred batch size %d is above max_batch %d", what,
                            c->batch.preferred[i], c->batch.max_batch);
    return st;
}
