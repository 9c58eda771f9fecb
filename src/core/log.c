/* log.c — the default logger (stderr) and the callback hook. */
#include "core/log.h"

#include <stdarg.h>
#include <stdio.h>
#include <time.h>

kiln_log_level kiln_log_level_current = KILN_LOG_WARN;
static kiln_log_fn g_fn;
static void *g_user;

double kiln_log_now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

void kiln_log_set_level(kiln_log_level level) { kiln_log_level_current = level; }

void kiln_log_set_callback(kiln_log_fn fn, void *user) {
    g_fn = fn;
    g_user = user;
}

void kiln_log_write(kiln_log_level level, const char *fmt, ...) {
    char msg[4096];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (g_fn) {
        g_fn(level, msg, g_user);
        return;
    }
    static const char tag[] = {'E', 'W', 'I', 'V'};
    fprintf(stderr, "[kiln][%c] %s\n", tag[level & 3], msg);
}
