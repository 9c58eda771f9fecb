/* settings.c — the server-wide settings of `kiln serve --config FILE` (keys in docs/serve.md). */
#include "serve/serve.h"

#include "core/status.h"

#include <cjson/cJSON.h>
#include <string.h>

kiln_status serve_settings_parse(const char *json, size_t len, const char *what, serve_settings *s) {
    *s = (serve_settings){.max_body_bytes = 64u << 20, .connection_timeout_s = 30, .max_connections = 512,
                          .drain_timeout_s = 30, .connection_memory_bytes = 256u << 10};
    if (!json) return KILN_OK;
    cJSON *root = cJSON_ParseWithLength(json, len);
    if (!cJSON_IsObject(root)) {
        cJSON_Delete(root);
        return kiln_error(KILN_ERR_PARSE, "%s: not a JSON object", what);
    }
    static const struct { const char *key; double lo, hi; } KEYS[] = {
        {"max_body_bytes", 1024, 1e12},      {"connection_timeout_s", 1, 86400}, {"max_connections", 1, 100000},
        {"drain_timeout_s", 0, 86400},       {"requests_per_second", 0, 1e9},    {"burst", 0, 1e9},
        {"tokens_per_minute", 0, 1e12},      {"poll_repository_s", 0, 86400},    {"connection_memory_bytes", 65536, 1 << 26},
    };
    kiln_status st = KILN_OK;
    const cJSON *item;
    cJSON_ArrayForEach(item, root) {
        int k = -1;
        for (int i = 0; i < (int)(sizeof KEYS / sizeof KEYS[0]); i++)
            if (!strcmp(item->string, KEYS[i].key)) k = i;
        if (k < 0) {
            st = kiln_error(KILN_ERR_INVALID_ARGUMENT,
                            "%s: unknown key '%s' (known: max_body_bytes, connection_timeout_s, max_connections, "
                            "drain_timeout_s, requests_per_second, burst, tokens_per_minute, poll_repository_s, "
                            "connection_memory_bytes)",
                            what, item->string);
            break;
        }
        double v = item->valuedouble;
        if (!cJSON_IsNumber(item) || !(v >= KEYS[k].lo && v <= KEYS[k].hi)) {
            st = kiln_error(KILN_ERR_INVALID_ARGUMENT, "%s: '%s' must be a number in [%g, %g]", what, item->string,
                            KEYS[k].lo, KEYS[k].hi);
            break;
        }
        switch (k) {
        case 0: s->max_body_bytes = (size_t)v; break;
        case 1: s->connection_timeout_s = (unsigned)v; break;
        case 2: s->max_connections = (unsigned)v; break;
        case 3: s->drain_timeout_s = v; break;
        case 4: s->requests_per_second = v; break;
        case 5: s->burst = v; break;
        case 6: s->tokens_per_minute = v; break;
        case 7: s->poll_repository_s = v; break;
        default: s->connection_memory_bytes = (size_t)v; break;
        }
    }
    cJSON_Delete(root);
    return st;
}
