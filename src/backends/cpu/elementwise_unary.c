/* elementwise_unary.c — CPU kernels of the unary elementwise ops (math, activations, rounding,
 * IsNaN/IsInf, Not, BitwiseNot) and Clip.
 *
 * Each op is a table of typed loops y[i] = f(x[i]) over dense data, one per dtype it supports. Float
 * loops are written once over a type T with <tgmath.h>, giving the float32 and float64 versions,
 * except that float32 Sigmoid, Tanh, Erf, Gelu and Mish use the vector math of elementwise_vmath.h;
 * float16/bfloat16 run the float32 loop on converted chunks. Attributes are read once per call into
 * un_params. Integer loops wrap like two's complement hardware instead of overflowing (UB in C). */
#include "backends/cpu/elementwise_util.h"

#include "backends/cpu/elementwise_vmath.h"
#include "core/status.h"

#include <float.h>
#include <string.h>
#include <tgmath.h>

typedef struct un_params {
    double alpha, beta, gamma;     /* float attributes (Clip: the bounds of float types) */
    int64_t ilo, ihi;              /* Clip bounds of integer types (bits of the element type) */
    bool has_lo, has_hi;           /* Clip bounds present (integer types) */
    bool flag_a, flag_b;           /* Gelu: tanh approximation; IsInf: detect_negative, detect_positive */
} un_params;

typedef void (*un_fn)(const void *x, void *y, int64_t n, const un_params *p);

typedef struct un_op {
    const char *name;
    un_fn fn[KILN_DTYPE_COUNT]; /* float16/bfloat16 fall back to float32 */
    bool bool_out;              /* IsNaN, IsInf */
    kiln_status (*read)(const kiln_node *n, un_params *p); /* attributes; NULL when none */
} un_op;

/* ---------------------------------------------------------------- typed loop generators */

#define UN_DEF(name, sfx, TT, OP)                                                                  \
    static void name##_##sfx(const void *xv, void *yv, int64_t n, const un_params *p) {           \
        typedef TT T;                                                                              \
        const T *x = xv;                                                                           \
        T *y = yv;                                                                                 \
        const T alpha = (T)p->alpha, beta = (T)p->beta, gamma = (T)p->gamma;                       \
        (void)alpha, (void)beta, (void)gamma;                                                      \
        EW_BLOCKED_LOOP(T, y, n, OP(x[i]));                                                        \
    }
/* An op on float32 and float64 (and so float16/bfloat16). OP(v) may use T, alpha, beta, gamma, p. */
#define UN_FLOAT(name, OP)                                                                         \
    UN_DEF(name, f32, float, OP)                                                                   \
    UN_DEF(name, f64, double, OP)
#define UN_FLOAT_FNS(name) [KILN_F32] = name##_f32, [KILN_F64] = name##_f64

#define UN_IDEF(name, sfx, TT, UTT, OP)                                                            \
    static void name##_##sfx(const void *xv, void *yv, int64_t n, const un_params *p) {           \
        typedef TT T;                                                                              \
        typedef UTT UT;                                                                            \
        (void)sizeof(UT);                                                                          \
        const T *x = xv;                                                                           \
        T *y = yv;                                                                                 \
        (void)p;                                                                                   \
        EW_BLOCKED_LOOP(T, y, n, OP(x[i]));                                                        \
    }
/* An op on the signed / unsigned integer types; OP(v) may use T and UT, an unsigned type at least
 * as wide as T and int, for wrapping arithmetic. */
#define UN_SINT(name, OP)                                                                          \
    UN_IDEF(name, i8, int8_t, uint32_t, OP)                                                        \
    UN_IDEF(name, i16, int16_t, uint32_t, OP)                                                      \
    UN_IDEF(name, i32, int32_t, uint32_t, OP)                                                      \
    UN_IDEF(name, i64, int64_t, uint64_t, OP)
#define UN_UINT(name, OP)                                                                          \
    UN_IDEF(name, u8, uint8_t, uint32_t, OP)                                                       \
    UN_IDEF(name, u16, uint16_t, uint32_t, OP)                                                     \
    UN_IDEF(name, u32, uint32_t, uint32_t, OP)                                                     \
    UN_IDEF(name, u64, uint64_t, uint64_t, OP)
#define UN_SINT_FNS(name) [KILN_I8] = name##_i8, [KILN_I16] = name##_i16, [KILN_I32] = name##_i32, [KILN_I64] = name##_i64
#define UN_UINT_FNS(name) [KILN_U8] = name##_u8, [KILN_U16] = name##_u16, [KILN_U32] = name##_u32, [KILN_U64] = name##_u64

/* Sigmoid, Tanh, Erf, Gelu and Mish on float32 run on vectors (elementwise_vmath.h). */
static void sigmoid_f32(const void *xv, void *yv, int64_t n, const un_params *p) {
    (void)p;
    EW_VEC_MAP((const float *)xv, (float *)yv, n, ew_vsigmoid);
}
static void tanh_f32(const void *xv, void *yv, int64_t n, const un_params *p) {
    (void)p;
    EW_VEC_MAP((const float *)xv, (float *)yv, n, ew_vtanh);
}
static void erf_f32(const void *xv, void *yv, int64_t n, const un_params *p) {
    (void)p;
    EW_VEC_MAP((const float *)xv, (float *)yv, n, ew_verf);
}
static void gelu_f32(const void *xv, void *yv, int64_t n, const un_params *p) {
    if (p->flag_a) EW_VEC_MAP((const float *)xv, (float *)yv, n, ew_vgelu_tanh);
    else EW_VEC_MAP((const float *)xv, (float *)yv, n, ew_vgelu_erf);
}
static void mish_f32(const void *xv, void *yv, int64_t n, const un_params *p) {
    (void)p;
    EW_VEC_MAP((const float *)xv, (float *)yv, n, ew_vmish);
}

/* ---------------------------------------------------------------- the ops */

/* max(v, lo) and min(v, hi) that let NaN through (as numpy.clip / maximum / minimum do). */
#define CLIP_LO(v, lo) ((v) < (lo) ? (lo) : (v))
#define CLIP_HI(v, hi) ((v) > (hi) ? (hi) : (v))
#define ABS_F(v) fabs(v)
#define NEG_F(v) (-(v))
#define SIGN_F(v) ((v) > 0 ? (T)1 : (v) < 0 ? (T)-1 : (v)) /* keeps 0, -0 and NaN */
#define RELU_F(v) ((v) < 0 ? (T)0 : (v))                    /* NaN passes through */
#define EXP_F(v) exp(v)
#define LOG_F(v) log(v)
#define SQRT_F(v) sqrt(v)
#define RECIP_F(v) ((T)1 / (v))
#define SIN_F(v) sin(v)
#define COS_F(v) cos(v)
#define TAN_F(v) tan(v)
#define ASIN_F(v) asin(v)
#define ACOS_F(v) acos(v)
#define ATAN_F(v) atan(v)
#define SINH_F(v) sinh(v)
#define COSH_F(v) cosh(v)
#define ASINH_F(v) asinh(v)
#define ACOSH_F(v) acosh(v)
#define ATANH_F(v) atanh(v)
#define ERF_F(v) erf(v)
#define TANH_F(v) tanh(v)
#define SIGMOID_F(v) ((T)1 / ((T)1 + exp(-(v))))
#define LEAKY_F(v) ((v) < 0 ? alpha * (v) : (v))
#define ELU_F(v) ((v) > 0 ? (v) : alpha * expm1(v))
#define SELU_F(v) ((v) > 0 ? gamma * (v) : gamma * alpha * expm1(v))
#define CELU_F(v) ((v) > 0 ? (v) : alpha * expm1((v) / alpha))
#define HSIG_F(v) CLIP_HI(CLIP_LO(alpha * (v) + beta, (T)0), (T)1)
#define HSWISH_F(v) ((v) * CLIP_HI(CLIP_LO((v) / (T)6 + (T)0.5, (T)0), (T)1))
/* log(1 + e^v) without overflow for large v. */
#define SOFTPLUS_F(v) ((v) > 0 ? (v) + log1p(exp(-(v))) : log1p(exp(v)))
#define SOFTSIGN_F(v) ((v) / ((T)1 + fabs(v)))
#define MISH_F(v) ((v) * TANH_F(SOFTPLUS_F(v)))
#define THRELU_F(v) ((v) > alpha ? (v) : (T)0)
#define GELU_F(v)                                                                                  \
    (p->flag_a ? (T)0.5 * (v) * ((T)1 + tanh((T)0.7978845608028654 * ((v) + (T)0.044715 * (v) * (v) * (v)))) \
               : (T)0.5 * (v) * erfc(-(v) * (T)0.7071067811865476))
#define FLOOR_F(v) floor(v)
#define CEIL_F(v) ceil(v)
#define ROUND_F(v) rint(v) /* half to even in the default rounding mode */

UN_FLOAT(abs, ABS_F)
UN_FLOAT(neg, NEG_F)
UN_FLOAT(sign, SIGN_F)
UN_FLOAT(relu, RELU_F)
UN_FLOAT(exp, EXP_F)
UN_FLOAT(log, LOG_F)
UN_FLOAT(sqrt, SQRT_F)
UN_FLOAT(recip, RECIP_F)
UN_FLOAT(sin, SIN_F)
UN_FLOAT(cos, COS_F)
UN_FLOAT(tan, TAN_F)
UN_FLOAT(asin, ASIN_F)
UN_FLOAT(acos, ACOS_F)
UN_FLOAT(atan, ATAN_F)
UN_FLOAT(sinh, SINH_F)
UN_FLOAT(cosh, COSH_F)
UN_FLOAT(asinh, ASINH_F)
UN_FLOAT(acosh, ACOSH_F)
UN_FLOAT(atanh, ATANH_F)
UN_DEF(erf, f64, double, ERF_F) /* erf, tanh, sigmoid, mish, gelu: float32 above, on vectors */
UN_DEF(tanh, f64, double, TANH_F)
UN_DEF(sigmoid, f64, double, SIGMOID_F)
UN_FLOAT(leaky, LEAKY_F)
UN_FLOAT(elu, ELU_F)
UN_FLOAT(selu, SELU_F)
UN_FLOAT(celu, CELU_F)
UN_FLOAT(hsig, HSIG_F)
UN_FLOAT(hswish, HSWISH_F)
UN_FLOAT(softplus, SOFTPLUS_F)
UN_FLOAT(softsign, SOFTSIGN_F)
UN_DEF(mish, f64, double, MISH_F)
UN_FLOAT(threlu, THRELU_F)
UN_DEF(gelu, f64, double, GELU_F)
UN_FLOAT(floor, FLOOR_F)
UN_FLOAT(ceil, CEIL_F)
UN_FLOAT(round, ROUND_F)

#define ISNAN_F(v) ((v) != (v))
#define ISINF_F(v) ((p->flag_b && (v) == (T)INFINITY) || (p->flag_a && (v) == -(T)INFINITY))
/* Float -> bool predicates. */
#define UN_PRED(name, sfx, TT, OP)                                                                 \
    static void name##_##sfx(const void *xv, void *yv, int64_t n, const un_params *p) {           \
        typedef TT T;                                                                              \
        const T *x = xv;                                                                           \
        uint8_t *y = yv;                                                                           \
        (void)p;                                                                                   \
        EW_BLOCKED_LOOP(uint8_t, y, n, (uint8_t)(OP(x[i])));                                       \
    }
UN_PRED(isnan, f32, float, ISNAN_F)
UN_PRED(isnan, f64, double, ISNAN_F)
UN_PRED(isinf, f32, float, ISINF_F)
UN_PRED(isinf, f64, double, ISINF_F)

#define ABS_S(v) ((v) < 0 ? (T)(0 - (UT)(v)) : (v))
#define NEG_S(v) ((T)(0 - (UT)(v)))
#define SIGN_S(v) ((T)(((v) > 0) - ((v) < 0)))
#define RELU_S(v) ((v) < 0 ? (T)0 : (v))
#define SAME_U(v) (v)
#define SIGN_U(v) ((T)((v) != 0))
#define BITNOT_I(v) ((T)~(v))
#define NOT_B(v) ((uint8_t)((v) == 0))

UN_SINT(abs, ABS_S)
UN_SINT(neg, NEG_S)
UN_SINT(sign, SIGN_S)
UN_SINT(relu, RELU_S)
UN_SINT(bitnot, BITNOT_I)
UN_UINT(abs, SAME_U)
UN_UINT(sign, SIGN_U)
UN_UINT(bitnot, BITNOT_I)
UN_IDEF(lnot, b8, uint8_t, uint32_t, NOT_B)

/* ---------------------------------------------------------------- attributes */

static kiln_status read_leaky(const kiln_node *n, un_params *p) {
    p->alpha = kiln_attr_float(n, "alpha", 0.01f);
    return KILN_OK;
}
static kiln_status read_alpha1(const kiln_node *n, un_params *p) { /* Elu, Celu, ThresholdedRelu */
    p->alpha = kiln_attr_float(n, "alpha", 1.0f);
    return KILN_OK;
}
static kiln_status read_celu(const kiln_node *n, un_params *p) {
    p->alpha = kiln_attr_float(n, "alpha", 1.0f);
    if (p->alpha == 0) return kiln_error(KILN_ERR_INVALID_ARGUMENT, "Celu: alpha must not be 0");
    return KILN_OK;
}
static kiln_status read_selu(const kiln_node *n, un_params *p) {
    p->alpha = kiln_attr_float(n, "alpha", 1.67326319217681884765625f);
    p->gamma = kiln_attr_float(n, "gamma", 1.05070102214813232421875f);
    return KILN_OK;
}
static kiln_status read_hardsigmoid(const kiln_node *n, un_params *p) {
    p->alpha = kiln_attr_float(n, "alpha", 0.2f);
    p->beta = kiln_attr_float(n, "beta", 0.5f);
    return KILN_OK;
}
static kiln_status read_gelu(const kiln_node *n, un_params *p) {
    const char *a = kiln_attr_string(n, "approximate", "none");
    if (strcmp(a, "none") && strcmp(a, "tanh"))
        return kiln_error(KILN_ERR_INVALID_ARGUMENT, "Gelu: approximate must be \"none\" or \"tanh\", not \"%s\"", a);
    p->flag_a = !strcmp(a, "tanh");
    return KILN_OK;
}
static kiln_status read_isinf(const kiln_node *n, un_params *p) {
    p->flag_a = kiln_attr_int(n, "detect_negative", 1) != 0;
    p->flag_b = kiln_attr_int(n, "detect_positive", 1) != 0;
    return KILN_OK;
}

/* ---------------------------------------------------------------- op table and driver */

#define FLOAT_OP(Name, fn_, read_) static const un_op op_##Name = {#Name, {UN_FLOAT_FNS(fn_)}, false, read_};
FLOAT_OP(Exp, exp, NULL)
FLOAT_OP(Log, log, NULL)
FLOAT_OP(Sqrt, sqrt, NULL)
FLOAT_OP(Reciprocal, recip, NULL)
FLOAT_OP(Sin, sin, NULL)
FLOAT_OP(Cos, cos, NULL)
FLOAT_OP(Tan, tan, NULL)
FLOAT_OP(Asin, asin, NULL)
FLOAT_OP(Acos, acos, NULL)
FLOAT_OP(Atan, atan, NULL)
FLOAT_OP(Sinh, sinh, NULL)
FLOAT_OP(Cosh, cosh, NULL)
FLOAT_OP(Asinh, asinh, NULL)
FLOAT_OP(Acosh, acosh, NULL)
FLOAT_OP(Atanh, atanh, NULL)
FLOAT_OP(Erf, erf, NULL)
FLOAT_OP(Tanh, tanh, NULL)
FLOAT_OP(Sigmoid, sigmoid, NULL)
FLOAT_OP(LeakyRelu, leaky, read_leaky)
FLOAT_OP(Elu, elu, read_alpha1)
FLOAT_OP(Selu, selu, read_selu)
FLOAT_OP(Celu, celu, read_celu)
FLOAT_OP(HardSigmoid, hsig, read_hardsigmoid)
FLOAT_OP(HardSwish, hswish, NULL)
FLOAT_OP(Gelu, gelu, read_gelu)
FLOAT_OP(Softplus, softplus, NULL)
FLOAT_OP(Softsign, softsign, NULL)
FLOAT_OP(Mish, mish, NULL)
FLOAT_OP(ThresholdedRelu, threlu, read_alpha1)
FLOAT_OP(Floor, floor, NULL)
FLOAT_OP(Ceil, ceil, NULL)
FLOAT_OP(Round, round, NULL)
static const un_op op_Abs = {"Abs", {UN_FLOAT_FNS(abs), UN_SINT_FNS(abs), UN_UINT_FNS(abs)}, false, NULL};
static const un_op op_Neg = {"Neg", {UN_FLOAT_FNS(neg), UN_SINT_FNS(neg)}, false, NULL};
static const un_op op_Sign = {"Sign", {UN_FLOAT_FNS(sign), UN_SINT_FNS(sign), UN_UINT_FNS(sign)}, false, NULL};
static const un_op op_Relu = {"Relu", {UN_FLOAT_FNS(relu), UN_SINT_FNS(relu)}, false, NULL};
static const un_op op_IsNaN = {"IsNaN", {UN_FLOAT_FNS(isnan)}, true, NULL};
static const un_op op_IsInf = {"IsInf", {UN_FLOAT_FNS(isinf)}, true, read_isinf};
static const un_op op_Not = {"Not", {[KILN_BOOL] = lnot_b8}, false, NULL};
static const un_op op_BitwiseNot = {"BitwiseNot", {UN_SINT_FNS(bitnot), UN_UINT_FNS(bitnot)}, false, NULL};

/* y = op(x) for a dense x (y allocated by the caller with x's shape and the op's output dtype). */
static kiln_status unary_run(const un_op *op, const un_params *p, const kiln_tensor *x, kiln_tensor *y) {
    kiln_dtype t = x->dtype;
    int64_t n = kiln_tensor_numel(x);
    if (t > KILN_UNDEFINED && t < KILN_DTYPE_COUNT && op->fn[t]) {
        if (n) op->fn[t](x->data, y->data, n, p);
        return KILN_OK;
    }
    KILN_ASSERT((t == KILN_F16 || t == KILN_BF16) && op->fn[KILN_F32]);
    float tx[EW_CHUNK], ty[EW_CHUNK];
    for (int64_t i0 = 0; i0 < n; i0 += EW_CHUNK) {
        int64_t m = n - i0 < EW_CHUNK ? n - i0 : EW_CHUNK;
        ew_load_f32(t, (const uint16_t *)x->data + i0, 1, m, tx);
        if (op->bool_out) {
            op->fn[KILN_F32](tx, (uint8_t *)y->data + i0, m, p);
        } else {
            op->fn[KILN_F32](tx, ty, m, p);
            ew_store_f32(t, (uint16_t *)y->data + i0, m, ty);
        }
    }
    return KILN_OK;
}

static bool unary_supports(const un_op *op, kiln_dtype t) {
    if (t <= KILN_UNDEFINED || t >= KILN_DTYPE_COUNT) return false;
    return op->fn[t] || ((t == KILN_F16 || t == KILN_BF16) && op->fn[KILN_F32]);
}

static kiln_status unary_exec(const un_op *op, const kiln_node *n, kiln_tensor *const *in, int nin,
                              kiln_tensor *const *out) {
    if (nin < 1 || !in[0]) return kiln_error(KILN_ERR_INVALID_ARGUMENT, "%s: input is missing", op->name);
    const kiln_tensor *x = in[0];
    if (!unary_supports(op, x->dtype))
        return kiln_error(KILN_ERR_UNSUPPORTED, "%s: inputs of dtype %s are not supported", op->name,
                          kiln_dtype_name(x->dtype));
    un_params p = {0};
    if (op->read) KILN_TRY(op->read(n, &p));
    KILN_TRY(kiln_tensor_alloc(out[0], op->bool_out ? KILN_BOOL : x->dtype, x->ndim, x->dims));
    return unary_run(op, &p, x, out[0]);
}

#define UNARY_EXEC(Name)                                                                           \
    kiln_status kiln_ew_exec_##Name(EW_EXEC_ARGS) { return unary_exec(&op_##Name, n, in, nin, out); }
UNARY_EXEC(Abs) UNARY_EXEC(Neg) UNARY_EXEC(Exp) UNARY_EXEC(Log) UNARY_EXEC(Sqrt) UNARY_EXEC(Reciprocal)
UNARY_EXEC(Sign) UNARY_EXEC(Sin) UNARY_EXEC(Cos) UNARY_EXEC(Tan) UNARY_EXEC(Asin) UNARY_EXEC(Acos)
UNARY_EXEC(Atan) UNARY_EXEC(Sinh) UNARY_EXEC(Cosh) UNARY_EXEC(Asinh) UNARY_EXEC(Acosh) UNARY_EXEC(Atanh)
UNARY_EXEC(Erf) UNARY_EXEC(Tanh) UNARY_EXEC(Sigmoid) UNARY_EXEC(Relu) UNARY_EXEC(LeakyRelu) UNARY_EXEC(Elu)
UNARY_EXEC(Selu) UNARY_EXEC(Celu) UNARY_EXEC(HardSigmoid) UNARY_EXEC(HardSwish) UNARY_EXEC(Gelu)
UNARY_EXEC(Softplus) UNARY_EXEC(Softsign) UNARY_EXEC(Mish) UNARY_EXEC(ThresholdedRelu) UNARY_EXEC(Floor)
UNARY_EXEC(Ceil) UNARY_EXEC(Round) UNARY_EXEC(IsNaN) UNARY_EXEC(IsInf) UNARY_EXEC(Not) UNARY_EXEC(BitwiseNot)

/* ---------------------------------------------------------------- Clip */

/* y = min(max(x, lo), hi): a bound below the other wins as numpy.clip does; NaN passes through. */
#define CLIP_F(v) CLIP_HI(CLIP_LO(v, alpha), beta)
UN_FLOAT(clipf, CLIP_F)

#define CLIP_IDEF(sfx, TT, TMIN, TMAX)                                                             \
    static void clipi_##sfx(const void *xv, void *yv, int64_t n, const un_params *p) {            \
        typedef TT T;                                                                              \
        const T *x = xv;                                                                           \
        T *y = yv;                                                                                 \
        const T lo = p->has_lo ? (T)p->ilo : TMIN, hi = p->has_hi ? (T)p->ihi : TMAX;              \
        EW_BLOCKED_LOOP(T, y, n, CLIP_HI(CLIP_LO(x[i], lo), hi));                          \
    }
CLIP_IDEF(i8, int8_t, INT8_MIN, INT8_MAX)
CLIP_IDEF(i16, int16_t, INT16_MIN, INT16_MAX)
CLIP_IDEF(i32, int32_t, INT32_MIN, INT32_MAX)
CLIP_IDEF(i64, int64_t, INT64_MIN, INT64_MAX)
CLIP_IDEF(u8, uint8_t, 0, UINT8_MAX)
CLIP_IDEF(u16, uint16_t, 0, UINT16_MAX)
CLIP_IDEF(u32, uint32_t, 0, UINT32_MAX)
CLIP_IDEF(u64, uint64_t, 0, UINT64_MAX)
static const un_op op_Clip = {"Clip", {UN_FLOAT_FNS(clipf), UN_SINT_FNS(clipi), UN_UINT_FNS(clipi)}, false, NULL};

/* Reads Clip's optional bound input i (opset >= 11): a one-element tensor of x's dtype. */
static kiln_status clip_bound(kiln_tensor *const *in, int nin, int i, const kiln_tensor *x, bool *has,
                              double *f, int64_t *v) {
    if (i >= nin || !in[i]) return KILN_OK;
    const kiln_tensor *b = in[i];
    if (b->dtype != x->dtype)
        return kiln_error(KILN_ERR_INVALID_ARGUMENT, "Clip: %s has dtype %s, input has %s", i == 1 ? "min" : "max",
                          kiln_dtype_name(b->dtype), kiln_dtype_name(x->dtype));
    if (kiln_tensor_numel(b) != 1)
        return kiln_error(KILN_ERR_SHAPE, "Clip: %s must hold one element, it has %lld", i == 1 ? "min" : "max",
                          (long long)kiln_tensor_numel(b));
    *has = true;
    if (ew_is_float(b->dtype)) *f = kiln_tensor_get_f64(b, 0);
    else *v = kiln_tensor_get_i64(b, 0);
    return KILN_OK;
}

kiln_status kiln_ew_exec_Clip(EW_EXEC_ARGS) {
    if (nin < 1 || !in[0]) return kiln_error(KILN_ERR_INVALID_ARGUMENT, "Clip: input is missing");
    const kiln_tensor *x = in[0];
    if (!unary_supports(&op_Clip, x->dtype))
        return kiln_error(KILN_ERR_UNSUPPORTED, "Clip: inputs of dtype %s are not supported", kiln_dtype_name(x->dtype));
    un_params p = {.alpha = -INFINITY, .beta = INFINITY};
    if (n->opset < 11) {
        p.alpha = kiln_attr_float(n, "min", -FLT_MAX);
        p.beta = kiln_attr_float(n, "max", FLT_MAX);
    } else {
        KILN_TRY(clip_bound(in, nin, 1, x, &p.has_lo, &p.alpha, &p.ilo));
        KILN_TRY(clip_bound(in, nin, 2, x, &p.has_hi, &p.beta, &p.ihi));
    }
    KILN_TRY(kiln_tensor_alloc(out[0], x->dtype, x->ndim, x->dims));
    return unary_run(&op_Clip, &p, x, out[0]);
}
