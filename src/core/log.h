/* log.h — the process-wide logger. KILN_LOG does not evaluate its arguments below the level. */
#ifndef KILN_CORE_LOG_H
#define KILN_CORE_LOG_H

#include "kiln/kiln.h"

#ifdef __cplusplus
extern "C" {
#endif

extern kiln_log_level kiln_log_level_current;

void kiln_log_write(kiln_log_level level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Milliseconds on the monotonic clock: the stage times logged at KILN_LOG_VERBOSE. */
double kiln_log_now_ms(void);

#define KILN_LOG(level, ...)                                                                       \
    do {                                                                                           \
        if ((level) <= kiln_log_level_current) kiln_log_write((level), __VA_ARGS__);               \
    } while (0)

#ifdef __cplusplus
}
#endif
#endif
