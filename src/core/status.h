/* status.h — kiln's internal error reporting: set the thread's error message and return a status,
 * and the always-on assertion for programmer errors. */
#ifndef KILN_CORE_STATUS_H
#define KILN_CORE_STATUS_H

#include "kiln/kiln.h"

#include <stdio.h>
#include <stdlib.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Formats the calling thread's error message and returns s (so `return kiln_error(...)` reads well).
 * The arguments may include kiln_last_error(), to wrap the current message in a new one. */
kiln_status kiln_error(kiln_status s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Prefixes the current error message with "context: " (for adding the node or file name on the way
 * up) and returns s. */
kiln_status kiln_error_prefix(kiln_status s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Clears the calling thread's error message. */
void kiln_error_clear(void);

/* Evaluates a kiln_status expression and returns it from the current function if it failed. */
#define KILN_TRY(expr)                                                                             \
    do {                                                                                           \
        kiln_status kiln_try_s_ = (expr);                                                          \
        if (kiln_try_s_ != KILN_OK) return kiln_try_s_;                                            \
    } while (0)

/* Always on, never compiled out: a failed assertion is a bug in kiln. */
#define KILN_ASSERT(cond)                                                                          \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "kiln: assertion failed at %s:%d: %s\n", __FILE__, __LINE__, #cond);  \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

#ifdef __cplusplus
}
#endif
#endif
