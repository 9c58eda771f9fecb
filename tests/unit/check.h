/* check.h — the check macros, failure count and one-line summary shared by the unit tests
 * (tests/unit/test_*.c): a failed check is printed and counted and the test goes on; a failed setup
 * step (REQUIRE_OK) ends the test; main ends with `return checks_report("test_name");`.
 *
 * Contracts:
 * - Include it from the test's main .c only. `failures` is static: each translation unit that
 *   includes this header has its own count, and checks_report reports the count of its own unit.
 * - Every macro evaluates each argument once (tol of CHECK_NEAR up to twice) and is a single
 *   statement (do { } while (0)); messages go to stderr, one line each, starting "FILE:LINE: ".
 * - CHECK(cond): cond false -> "FILE:LINE: check failed: COND", failures + 1.
 * - CHECKF(cond, fmt, ...): the same followed by ": " and the printf-formatted message.
 * - CHECK_OK(expr): expr is a kiln_status; not KILN_OK -> "FILE:LINE: EXPR failed: LAST_ERROR",
 *   failures + 1.
 * - CHECK_NEAR(a, b, tol): as doubles, not |a - b| <= tol (NaN fails) ->
 *   "FILE:LINE: A == a, expected b (tol tol)", failures + 1.
 * - REQUIRE_OK(expr): expr is a kiln_status; not KILN_OK -> "FILE:LINE: EXPR failed: STATUS:
 *   LAST_ERROR" and exit(1) (for steps the rest of the test depends on).
 * - checks_report(name): no failures -> "NAME: all checks passed" on stdout, returns 0; otherwise
 *   "NAME: N check(s) failed" on stderr, returns 1 (main's exit status). */
#ifndef KILN_TESTS_UNIT_CHECK_H
#define KILN_TESTS_UNIT_CHECK_H

#include "core/status.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

static int failures;

#define CHECK(cond)                                                                                \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond);               \
            failures++;                                                                            \
        }                                                                                          \
    } while (0)

#define CHECKF(cond, ...)                                                                          \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "%s:%d: check failed: %s: ", __FILE__, __LINE__, #cond);               \
            fprintf(stderr, __VA_ARGS__);                                                          \
            fprintf(stderr, "\n");                                                                 \
            failures++;                                                                            \
        }                                                                                          \
    } while (0)

#define CHECK_OK(expr)                                                                             \
    do {                                                                                           \
        kiln_status s_ = (expr);                                                                   \
        if (s_ != KILN_OK) {                                                                       \
            fprintf(stderr, "%s:%d: %s failed: %s\n", __FILE__, __LINE__, #expr, kiln_last_error()); \
            failures++;                                                                            \
        }                                                                                          \
    } while (0)

#define CHECK_NEAR(a, b, tol)                                                                      \
    do {                                                                                           \
        double a_ = (a), b_ = (b);                                                                 \
        if (!(fabs(a_ - b_) <= (tol))) {                                                           \
            fprintf(stderr, "%s:%d: %s == %.17g, expected %.17g (tol %g)\n", __FILE__, __LINE__,   \
                    #a, a_, b_, (double)(tol));                                                    \
            failures++;                                                                            \
        }                                                                                          \
    } while (0)

#define REQUIRE_OK(expr)                                                                           \
    do {                                                                                           \
        kiln_status s_ = (expr);                                                                   \
        if (s_ != KILN_OK) {                                                                       \
            fprintf(stderr, "%s:%d: %s failed: %s: %s\n", __FILE__, __LINE__, #expr,               \
                    kiln_status_name(s_), kiln_last_error());                                      \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

static inline int checks_report(const char *name) {
    if (failures) {
        fprintf(stderr, "%s: %d check(s) failed\n", name, failures);
        return 1;
    }
    printf("%s: all checks passed\n", name);
    return 0;
}

#endif
