/* ckd.h — checked integer arithmetic for sizes computed from values kiln does not control (model
 * attributes and shapes, file headers, command-line numbers). Each function stores the exact result
 * in *out and returns true, or returns false when it does not fit the type (*out is then
 * unspecified). Use them before a product or sum of such values is compared, allocated or indexed
 * with: signed overflow is undefined behaviour, and a wrapped size passes every later check. */
#ifndef KILN_CORE_CKD_H
#define KILN_CORE_CKD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

static inline bool kiln_mul_i64_ok(int64_t a, int64_t b, int64_t *out) { return !__builtin_mul_overflow(a, b, out); }
static inline bool kiln_add_i64_ok(int64_t a, int64_t b, int64_t *out) { return !__builtin_add_overflow(a, b, out); }
static inline bool kiln_sub_i64_ok(int64_t a, int64_t b, int64_t *out) { return !__builtin_sub_overflow(a, b, out); }
static inline bool kiln_mul_u64_ok(uint64_t a, uint64_t b, uint64_t *out) { return !__builtin_mul_overflow(a, b, out); }
static inline bool kiln_mul_size_ok(size_t a, size_t b, size_t *out) { return !__builtin_mul_overflow(a, b, out); }
static inline bool kiln_add_size_ok(size_t a, size_t b, size_t *out) { return !__builtin_add_overflow(a, b, out); }

/* The product of n values (1 for n == 0) in *out; false when it overflows int64_t. */
static inline bool kiln_prod_i64_ok(int n, const int64_t *v, int64_t *out) {
    int64_t p = 1;
    for (int i = 0; i < n; i++)
        if (!kiln_mul_i64_ok(p, v[i], &p)) return false;
    *out = p;
    return true;
}

#endif
