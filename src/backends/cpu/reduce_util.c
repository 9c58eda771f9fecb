/* reduce_util.c — dtype conversion of contiguous runs, sort keys and small-input readers shared by
 * the reduce family's CPU kernels (see reduce_util.h). */
#include "backends/cpu/reduce_util.h"

#include "core/half.h"

#include <string.h>

/* Switches on t's dtype and expands BODY(x) in each case, x being the expression that reads element
 * i of t's data from offset off as that dtype's C type (f16/bf16 widened to float). */
#define RED_EACH_DTYPE(t, off, BODY)                                                               \
    switch ((t)->dtype) {                                                                          \
    case KILN_F32: { const float *p = (const float *)(t)->data + (off); BODY(p[i]); break; }      \
    case KILN_F64: { const double *p = (const double *)(t)->data + (off); BODY(p[i]); break; }    \
    case KILN_F16: { const uint16_t *p = (const uint16_t *)(t)->data + (off); BODY(kiln_f16_to_f32(p[i])); break; } \
    case KILN_BF16: { const uint16_t *p = (const uint16_t *)(t)->data + (off); BODY(kiln_bf16_to_f32(p[i])); break; } \
    case KILN_I8: { const int8_t *p = (const int8_t *)(t)->data + (off); BODY(p[i]); break; }     \
    case KILN_I16: { const int16_t *p = (const int16_t *)(t)->data + (off); BODY(p[i]); break; }  \
    case KILN_I32: { const int32_t *p = (const int32_t *)(t)->data + (off); BODY(p[i]); break; }  \
    case KILN_I64: { const int64_t *p = (const int64_t *)(t)->data + (off); BODY(p[i]); break; }  \
    case KILN_U8: case KILN_BOOL: { const uint8_t *p = (const uint8_t *)(t)->data + (off); BODY(p[i]); break; } \
    case KILN_U16: { const uint16_t *p = (const uint16_t *)(t)->data + (off); BODY(p[i]); break; } \
    case KILN_U32: { const uint32_t *p = (const uint32_t *)(t)->data + (off); BODY(p[i]); break; } \
    case KILN_U64: { const uint64_t *p = (const uint64_t *)(t)->data + (off); BODY(p[i]); break; } \
    default: KILN_ASSERT(!"reduce_util: non-numeric dtype");                                       \
    }

/* double -> int64 that is defined for every input (C leaves out-of-range casts undefined): NaN
 * gives 0, values in [2^63, 2^64) keep their uint64 bits, others saturate. */
static inline int64_t f64_to_i64(double d) {
    if (d != d) return 0;
    if (d >= 9223372036854775808.0)
        return d < 18446744073709551616.0 ? (int64_t)(uint64_t)d : (int64_t)UINT64_MAX;
    if (d <= -9223372036854775808.0) return INT64_MIN;
    return (int64_t)d;
}

void kiln_red_load_f64(const kiln_tensor *t, int64_t off, int64_t n, double *dst) {
#define LOAD_F64(x) for (int64_t i = 0; i < n; i++) dst[i] = (double)(x)
    RED_EACH_DTYPE(t, off, LOAD_F64)
#undef LOAD_F64
}

void kiln_red_load_i64(const kiln_tensor *t, int64_t off, int64_t n, int64_t *dst) {
    if (kiln_red_is_float(t->dtype)) {
#define LOAD_TRUNC(x) for (int64_t i = 0; i < n; i++) dst[i] = f64_to_i64((double)(x))
        RED_EACH_DTYPE(t, off, LOAD_TRUNC)
#undef LOAD_TRUNC
        return;
    }
#define LOAD_I64(x) for (int64_t i = 0; i < n; i++) dst[i] = (int64_t)(x)
    RED_EACH_DTYPE(t, off, LOAD_I64)
#undef LOAD_I64
}

void kiln_red_store_f64(kiln_tensor *t, int64_t off, int64_t n, const double *src) {
    switch (t->dtype) {
#define STORE(T, EXPR) { T *q = (T *)t->data + off; for (int64_t i = 0; i < n; i++) q[i] = (EXPR); return; }
    case KILN_F32: STORE(float, (float)src[i])
    case KILN_F64: STORE(double, src[i])
    case KILN_F16: STORE(uint16_t, kiln_f32_to_f16((float)src[i]))
    case KILN_BF16: STORE(uint16_t, kiln_f32_to_bf16((float)src[i]))
    case KILN_BOOL: STORE(uint8_t, src[i] != 0)
#undef STORE
    default: break;
    }
    int64_t buf[256]; /* integer dtypes: through int64, a bounded chunk at a time */
    for (int64_t s = 0; s < n; s += 256) {
        int64_t m = n - s < 256 ? n - s : 256;
        for (int64_t i = 0; i < m; i++) buf[i] = f64_to_i64(src[s + i]);
        kiln_red_store_i64(t, off + s, m, buf);
    }
}

void kiln_red_store_i64(kiln_tensor *t, int64_t off, int64_t n, const int64_t *src) {
    switch (t->dtype) {
#define STORE(T, EXPR) { T *q = (T *)t->data + off; for (int64_t i = 0; i < n; i++) q[i] = (EXPR); return; }
    case KILN_F32: STORE(float, (float)src[i])
    case KILN_F64: STORE(double, (double)src[i])
    case KILN_F16: STORE(uint16_t, kiln_f32_to_f16((float)src[i]))
    case KILN_BF16: STORE(uint16_t, kiln_f32_to_bf16((float)src[i]))
    case KILN_BOOL: STORE(uint8_t, src[i] != 0)
    case KILN_I8: STORE(int8_t, (int8_t)src[i])
    case KILN_I16: STORE(int16_t, (int16_t)src[i])
    case KILN_I32: STORE(int32_t, (int32_t)src[i])
    case KILN_I64: STORE(int64_t, src[i])
    case KILN_U8: STORE(uint8_t, (uint8_t)src[i])
    case KILN_U16: STORE(uint16_t, (uint16_t)src[i])
    case KILN_U32: STORE(uint32_t, (uint32_t)src[i])
    case KILN_U64: STORE(uint64_t, (uint64_t)src[i])
#undef STORE
    default: KILN_ASSERT(!"reduce_util: non-numeric dtype");
    }
}

/* The unsigned order key of a double (see kiln_red_order_keys). */
static inline uint64_t f64_key(double d, bool nan_high) {
    if (d != d) return nan_high ? UINT64_MAX : 0;
    if (d == 0) d = 0; /* -0 and +0 compare equal */
    uint64_t b;
    memcpy(&b, &d, sizeof b);
    return (b >> 63) ? ~b : b | (UINT64_C(1) << 63);
}

void kiln_red_order_keys(const kiln_tensor *t, int64_t off, int64_t stride, int64_t n, bool nan_high,
                         uint64_t *keys) {
    const char *base = (const char *)t->data;
    switch (t->dtype) {
#define KEYS(T, EXPR)                                                                              \
    { const T *p = (const T *)base + off; for (int64_t i = 0; i < n; i++) { T x = p[i * stride]; keys[i] = (EXPR); } break; }
    case KILN_F32: KEYS(float, f64_key(x, nan_high))
    case KILN_F64: KEYS(double, f64_key(x, nan_high))
    case KILN_F16: KEYS(uint16_t, f64_key(kiln_f16_to_f32(x), nan_high))
    case KILN_BF16: KEYS(uint16_t, f64_key(kiln_bf16_to_f32(x), nan_high))
    case KILN_I8: KEYS(int8_t, (uint64_t)(int64_t)x ^ (UINT64_C(1) << 63))
    case KILN_I16: KEYS(int16_t, (uint64_t)(int64_t)x ^ (UINT64_C(1) << 63))
    case KILN_I32: KEYS(int32_t, (uint64_t)(int64_t)x ^ (UINT64_C(1) << 63))
    case KILN_I64: KEYS(int64_t, (uint64_t)x ^ (UINT64_C(1) << 63))
    case KILN_U8: case KILN_BOOL: KEYS(uint8_t, x)
    case KILN_U16: KEYS(uint16_t, x)
    case KILN_U32: KEYS(uint32_t, x)
    case KILN_U64: KEYS(uint64_t, x)
#undef KEYS
    default: KILN_ASSERT(!"reduce_util: non-numeric dtype");
    }
}

static bool is_int_dtype(kiln_dtype t) { return kiln_red_is_signed_int(t) || kiln_red_is_unsigned_int(t); }

kiln_status kiln_red_read_ints(const kiln_node *n, const kiln_tensor *t, const char *what, int64_t *out,
                               int cap, int *count) {
    if (!is_int_dtype(t->dtype) || t->ndim > 1)
        return kiln_error(KILN_ERR_INVALID_ARGUMENT, "%s: input '%s' must be a 1-D integer tensor, got %s of rank %d",
                          n->op_type, what, kiln_dtype_name(t->dtype), t->ndim);
    int64_t cnt = kiln_tensor_numel(t);
    if (cnt > cap)
        return kiln_error(KILN_ERR_INVALID_ARGUMENT, "%s: input '%s' has %lld values (at most %d allowed)", n->op_type,
                          what, (long long)cnt, cap);
    if (cnt) kiln_red_load_i64(t, 0, cnt, out); /* an empty tensor may have no data pointer */
    *count = (int)cnt;
    return KILN_OK;
}

kiln_status kiln_red_read_scalar_i64(const kiln_node *n, const kiln_tensor *t, const char *what, int64_t *v) {
    if (!kiln_red_is_numeric(t->dtype) || kiln_tensor_numel(t) != 1 || t->ndim > 1)
        return kiln_error(KILN_ERR_INVALID_ARGUMENT, "%s: input '%s' must hold exactly one number (got %s of %lld elements)",
                          n->op_type, what, kiln_dtype_name(t->dtype), (long long)kiln_tensor_numel(t));
    kiln_red_load_i64(t, 0, 1, v);
    return KILN_OK;
}

kiln_status kiln_red_need(const kiln_node *n, kiln_tensor *const *in, int nin, int i, const char *what) {
    if (i >= nin || !in[i])
        return kiln_error(KILN_ERR_INVALID_ARGUMENT, "%s: required input '%s' (#%d) is missing", n->op_type, what, i);
    return KILN_OK;
}

kiln_status kiln_red_unsupported(const kiln_node *n, kiln_dtype t) {
    return kiln_error(KILN_ERR_UNSUPPORTED, "%s: element type %s is not supported", n->op_type, kiln_dtype_name(t));
}
