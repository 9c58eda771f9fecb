/* status.c — per-thread error messages behind kiln_last_error(). */
#include "core/status.h"

#include <stdarg.h>
#include <string.h>

static _Thread_local char g_message[2048];

const char *kiln_last_error(void) { return g_message; }

void kiln_error_clear(void) { g_message[0] = 0; }

kiln_status kiln_error(kiln_status s, const char *fmt, ...) {
    /* Formatted apart first: an argument may be kiln_last_error() itself, and vsnprintf into the
     * buffer it reads from would overwrite the text before reading it. */
    char message[sizeof g_message];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(message, sizeof message, fmt, ap);
    va_end(ap);
    memcpy(g_message, message, strlen(message) + 1);
    return s;
}

kiln_status kiln_error_prefix(kiln_status s, const char *fmt, ...) {
    char prefix[512], old[sizeof g_message]; /* prefix apart too: its arguments may read g_message */
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(prefix, sizeof prefix, fmt, ap);
    va_end(ap);
    memcpy(old, g_message, sizeof old);
    size_t n = strlen(prefix);
    if (n + 2 >= sizeof g_message) return s;
    memcpy(g_message, prefix, n);
    memcpy(g_message + n, ": ", 2);
    size_t room = sizeof g_message - n - 3, len = strlen(old);
    if (len > room) len = room;
    memcpy(g_message + n + 2, old, len);
    g_message[n + 2 + len] = 0;
    return s;
}

const char *kiln_status_name(kiln_status s) {
    switch (s) {
    case KILN_OK: return "KILN_OK";
    case KILN_ERR_INVALID_ARGUMENT: return "KILN_ERR_INVALID_ARGUMENT";
    case KILN_ERR_IO: return "KILN_ERR_IO";
    case KILN_ERR_PARSE: return "KILN_ERR_PARSE";
    case KILN_ERR_UNSUPPORTED: return "KILN_ERR_UNSUPPORTED";
    case KILN_ERR_SHAPE: return "KILN_ERR_SHAPE";
    case KILN_ERR_OUT_OF_MEMORY: return "KILN_ERR_OUT_OF_MEMORY";
    case KILN_ERR_ENGINE_MISMATCH: return "KILN_ERR_ENGINE_MISMATCH";
    case KILN_ERR_BACKEND: return "KILN_ERR_BACKEND";
    case KILN_ERR_INTERNAL: return "KILN_ERR_INTERNAL";
    case KILN_ERR_BUSY: return "KILN_ERR_BUSY";
    }
    return "KILN_ERR_?";
}

const char *kiln_version(void) { return KILN_VERSION_STRING; }
