/* elementwise_cast.c — Cast and CastLike on the CPU, and the run converters (load a strided run of
 * any numeric dtype into float/double/int64, store it back) that the rest of the elementwise family
 * uses to run float16/bfloat16 and mixed-type ops through a wider type.
 *
 * Conversions follow C: integer -> integer keeps the low bits (two's complement wrap) and never goes
 * through double; float -> integer truncates toward zero (out of range, where C is undefined, gives
 * the low bits of INT64_MIN); anything -> bool is v != 0; double -> float16/bfloat16 rounds once
 * (through float32 rounded to odd). Float8, 4-bit and string types are refused. */
#include "backends/cpu/elementwise_util.h"

#include "core/half.h"
#include "core/status.h"

#include <math.h>
#include <string.h>

bool ew_cast_supported(kiln_dtype t) {
    return ew_is_float(t) || ew_is_int(t) || t == KILN_BOOL;
}

/* ---------------------------------------------------------------- loads */

#define LOAD_RUN(T, CONV)                                                                          \
    do {                                                                                           \
        const T *s_ = p;                                                                           \
        for (int64_t i = 0; i < n; i++) dst[i] = CONV(s_[i * stride]);                             \
    } while (0)
#define AS_IS(x) (x)

void ew_load_f32(kiln_dtype t, const void *p, int64_t stride, int64_t n, float *dst) {
    switch (t) {
    case KILN_F32: LOAD_RUN(float, AS_IS); break;
    case KILN_F16: LOAD_RUN(uint16_t, kiln_f16_to_f32); break;
    case KILN_BF16: LOAD_RUN(uint16_t, kiln_bf16_to_f32); break;
    default: KILN_ASSERT(!"ew_load_f32: not a 32/16-bit float type");
    }
}

void ew_load_f64(kiln_dtype t, const void *p, int64_t stride, int64_t n, double *dst) {
    switch (t) {
    case KILN_F32: LOAD_RUN(float, AS_IS); break;
    case KILN_F64: LOAD_RUN(double, AS_IS); break;
    case KILN_F16: LOAD_RUN(uint16_t, kiln_f16_to_f32); break;
    case KILN_BF16: LOAD_RUN(uint16_t, kiln_bf16_to_f32); break;
    case KILN_I8: LOAD_RUN(int8_t, AS_IS); break;
    case KILN_I16: LOAD_RUN(int16_t, AS_IS); break;
    case KILN_I32: LOAD_RUN(int32_t, AS_IS); break;
    case KILN_I64: LOAD_RUN(int64_t, (double)); break;
    case KILN_U8: case KILN_BOOL: LOAD_RUN(uint8_t, AS_IS); break;
    case KILN_U16: LOAD_RUN(uint16_t, AS_IS); break;
    case KILN_U32: LOAD_RUN(uint32_t, AS_IS); break;
    case KILN_U64: LOAD_RUN(uint64_t, (double)); break;
    default: KILN_ASSERT(!"ew_load_f64: not a numeric type");
    }
}

void ew_load_i64(kiln_dtype t, const void *p, int64_t stride, int64_t n, int64_t *dst) {
    switch (t) {
    case KILN_I8: LOAD_RUN(int8_t, AS_IS); break;
    case KILN_I16: LOAD_RUN(int16_t, AS_IS); break;
    case KILN_I32: LOAD_RUN(int32_t, AS_IS); break;
    case KILN_I64: LOAD_RUN(int64_t, AS_IS); break;
    case KILN_U8: case KILN_BOOL: LOAD_RUN(uint8_t, AS_IS); break;
    case KILN_U16: LOAD_RUN(uint16_t, AS_IS); break;
    case KILN_U32: LOAD_RUN(uint32_t, AS_IS); break;
    case KILN_U64: LOAD_RUN(uint64_t, (int64_t)); break;
    default: KILN_ASSERT(!"ew_load_i64: not an integer type");
    }
}

/* ---------------------------------------------------------------- stores */

#define STORE_RUN(T, CONV)                                                                         \
    do {                                                                                           \
        T *d_ = p;                                                                                 \
        for (int64_t i = 0; i < n; i++) d_[i] = CONV(src[i]);                                      \
    } while (0)
#define NONZERO(x) ((x) != 0)

void ew_store_f32(kiln_dtype t, void *p, int64_t n, const float *src) {
    switch (t) {
    case KILN_F32: memcpy(p, src, (size_t)n * sizeof *src); break;
    case KILN_F16: STORE_RUN(uint16_t, kiln_f32_to_f16); break;
    case KILN_BF16: STORE_RUN(uint16_t, kiln_f32_to_bf16); break;
    default: KILN_ASSERT(!"ew_store_f32: not a 32/16-bit float type");
    }
}

int64_t ew_f64_to_i64(double v) {
    /* [-2^63, 2^63) converts exactly as C truncation; NaN and the rest have no int64 value. */
    if (v >= -9223372036854775808.0 && v < 9223372036854775808.0) return (int64_t)v;
    return INT64_MIN;
}

static uint64_t f64_to_u64(double v) {
    if (v >= 9223372036854775808.0 && v < 18446744073709551616.0)
        return (uint64_t)(v - 9223372036854775808.0) + ((uint64_t)1 << 63);
    return (uint64_t)ew_f64_to_i64(v);
}

/* double -> float rounded to odd (truncate, then set the last bit if anything was lost), so that a
 * second rounding to a format with at least two fewer mantissa bits rounds as directly from double. */
static float f64_to_f32_odd(double v) {
    float f = (float)v;
    if ((double)f == v || isnan(f) || isinf(f)) return f;
    if (fabs((double)f) > fabs(v)) f = nextafterf(f, 0.0f);
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    u |= 1;
    memcpy(&f, &u, sizeof f);
    return f;
}

#define F64_TO_F16(x) kiln_f32_to_f16(f64_to_f32_odd(x))
#define F64_TO_BF16(x) kiln_f32_to_bf16(f64_to_f32_odd(x))
#define F64_TO_INT(x) ((uint64_t)ew_f64_to_i64(x))

void ew_store_f64(kiln_dtype t, void *p, int64_t n, const double *src) {
    switch (t) {
    case KILN_F32: STORE_RUN(float, (float)); break;
    case KILN_F64: memcpy(p, src, (size_t)n * sizeof *src); break;
    case KILN_F16: STORE_RUN(uint16_t, F64_TO_F16); break;
    case KILN_BF16: STORE_RUN(uint16_t, F64_TO_BF16); break;
    case KILN_I8: STORE_RUN(int8_t, (int8_t)F64_TO_INT); break;
    case KILN_I16: STORE_RUN(int16_t, (int16_t)F64_TO_INT); break;
    case KILN_I32: STORE_RUN(int32_t, (int32_t)F64_TO_INT); break;
    case KILN_I64: STORE_RUN(int64_t, ew_f64_to_i64); break;
    case KILN_U8: STORE_RUN(uint8_t, (uint8_t)F64_TO_INT); break;
    case KILN_U16: STORE_RUN(uint16_t, (uint16_t)F64_TO_INT); break;
    case KILN_U32: STORE_RUN(uint32_t, (uint32_t)F64_TO_INT); break;
    case KILN_U64: STORE_RUN(uint64_t, f64_to_u64); break;
    case KILN_BOOL: STORE_RUN(uint8_t, NONZERO); break;
    default: KILN_ASSERT(!"ew_store_f64: not a numeric type");
    }
}

void ew_store_i64(kiln_dtype t, void *p, int64_t n, const int64_t *src, bool src_unsigned) {
    if (ew_is_float(t)) {
        double tmp[EW_CHUNK];
        for (int64_t i0 = 0; i0 < n; i0 += EW_CHUNK) {
            int64_t m = n - i0 < EW_CHUNK ? n - i0 : EW_CHUNK;
            const int64_t *s = src + i0;
            char *d = (char *)p + i0 * (int64_t)kiln_dtype_size(t);
            if (t == KILN_F32) { /* one rounding, straight from the integer */
                float *f = (float *)d;
                if (src_unsigned) for (int64_t i = 0; i < m; i++) f[i] = (float)(uint64_t)s[i];
                else for (int64_t i = 0; i < m; i++) f[i] = (float)s[i];
                continue;
            }
            if (src_unsigned) for (int64_t i = 0; i < m; i++) tmp[i] = (double)(uint64_t)s[i];
            else for (int64_t i = 0; i < m; i++) tmp[i] = (double)s[i];
            ew_store_f64(t, d, m, tmp);
        }
        return;
    }
    switch (t) {
    case KILN_I8: STORE_RUN(int8_t, (int8_t)); break;
    case KILN_I16: STORE_RUN(int16_t, (int16_t)); break;
    case KILN_I32: STORE_RUN(int32_t, (int32_t)); break;
    case KILN_I64: STORE_RUN(int64_t, AS_IS); break;
    case KILN_U8: STORE_RUN(uint8_t, (uint8_t)); break;
    case KILN_U16: STORE_RUN(uint16_t, (uint16_t)); break;
    case KILN_U32: STORE_RUN(uint32_t, (uint32_t)); break;
    case KILN_U64: STORE_RUN(uint64_t, (uint64_t)); break;
    case KILN_BOOL: STORE_RUN(uint8_t, NONZERO); break;
    default: KILN_ASSERT(!"ew_store_i64: not a numeric type");
    }
}

/* ---------------------------------------------------------------- Cast / CastLike */

/* out = x converted to dtype `to` (out is allocated with x's shape). */
static kiln_status cast_run(const char *op, const kiln_tensor *x, kiln_dtype to, kiln_tensor *out) {
    if (!ew_cast_supported(x->dtype) || !ew_cast_supported(to))
        return kiln_error(KILN_ERR_UNSUPPORTED, "%s: casting %s to %s is not supported", op,
                          kiln_dtype_name(x->dtype), kiln_dtype_name(to));
    KILN_TRY(kiln_tensor_alloc(out, to, x->ndim, x->dims));
    int64_t n = kiln_tensor_numel(x);
    size_t es = kiln_dtype_size(x->dtype), ed = kiln_dtype_size(to);
    if (x->dtype == to) {
        if (x->nbytes) memcpy(out->data, x->data, x->nbytes);
        return KILN_OK;
    }
    bool src_float = ew_is_float(x->dtype);
    bool f32_pair = (x->dtype == KILN_F32 && (to == KILN_F16 || to == KILN_BF16)) ||
                    (to == KILN_F32 && (x->dtype == KILN_F16 || x->dtype == KILN_BF16));
    for (int64_t i0 = 0; i0 < n; i0 += EW_CHUNK) {
        int64_t m = n - i0 < EW_CHUNK ? n - i0 : EW_CHUNK;
        const char *s = (const char *)x->data + i0 * (int64_t)es;
        char *d = (char *)out->data + i0 * (int64_t)ed;
        if (f32_pair) {
            if (to == KILN_F32) ew_load_f32(x->dtype, s, 1, m, (float *)d);
            else ew_store_f32(to, d, m, (const float *)s);
        } else if (src_float) {
            double buf[EW_CHUNK];
            ew_load_f64(x->dtype, s, 1, m, buf);
            ew_store_f64(to, d, m, buf);
        } else {
            int64_t buf[EW_CHUNK];
            ew_load_i64(x->dtype, s, 1, m, buf);
            ew_store_i64(to, d, m, buf, x->dtype == KILN_U64);
        }
    }
    return KILN_OK;
}

kiln_status kiln_ew_exec_Cast(EW_EXEC_ARGS) {
    if (nin < 1 || !in[0]) return kiln_error(KILN_ERR_INVALID_ARGUMENT, "Cast: input is missing");
    const kiln_attr *to = kiln_node_attr(n, "to");
    if (!to) return kiln_error(KILN_ERR_INVALID_ARGUMENT, "Cast: attribute 'to' is missing");
    kiln_dtype t = (to->i > KILN_UNDEFINED && to->i < KILN_DTYPE_COUNT) ? (kiln_dtype)to->i : KILN_UNDEFINED;
    if (t == KILN_UNDEFINED)
        return kiln_error(KILN_ERR_UNSUPPORTED, "Cast: target type %lld is not supported", (long long)to->i);
    return cast_run("Cast", in[0], t, out[0]);
}

kiln_status kiln_ew_exec_CastLike(EW_EXEC_ARGS) {
    if (nin < 2 || !in[0] || !in[1]) return kiln_error(KILN_ERR_INVALID_ARGUMENT, "CastLike: needs two inputs");
    return cast_run("CastLike", in[0], in[1]->dtype, out[0]);
}
