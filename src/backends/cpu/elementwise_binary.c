/* elementwise_binary.c — CPU kernels of the broadcasting binary ops (arithmetic, comparison, logic,
 * bitwise, Pow, Mod, PRelu), the variadic Min/Max/Sum/Mean and the ternary Where.
 *
 * Each op is a table of typed row functions (see ew_binary_fn) run by the broadcast driver in
 * elementwise.c. Every row function has tight blocked loops for the three contiguous cases (both
 * operands dense, either one a scalar) and a plain strided loop for the rest. Integer arithmetic
 * wraps (computed in an unsigned type, since signed overflow is undefined in C); integer division
 * truncates toward zero and division by zero gives 0 rather than a trap. */
#include "backends/cpu/cpu_simd.h"
#include "backends/cpu/elementwise_util.h"

#include "core/status.h"

#include <math.h>
#include <string.h>

/* ---------------------------------------------------------------- typed row generators */

/* name_sfx: o[i] = OP(a[i*sa], b[i*sb]) over element type TT (UTT: unsigned, at least as wide as TT
 * and int, for wrapping arithmetic), writing OTT. */
#define BIN_DEF(name, sfx, TT, UTT, OTT, OP)                                                       \
    static void name##_##sfx(const void *av, int64_t sa, const void *bv, int64_t sb, void *ov, int64_t n) { \
        typedef TT T;                                                                              \
        typedef UTT UT;                                                                            \
        typedef OTT OT;                                                                            \
        (void)sizeof(T), (void)sizeof(UT);                                                         \
        const T *a = av, *b = bv;                                                                  \
        OT *o = ov;                                                                                \
        if (sa == 1 && sb == 1) {                                                                  \
            EW_BLOCKED_LOOP(OT, o, n, OP(a[i], b[i]));                                             \
        } else if (sa == 0 && sb == 1) {                                                           \
            const T s = a[0];                                                                      \
            EW_BLOCKED_LOOP(OT, o, n, OP(s, b[i]));                                                \
        } else if (sa == 1 && sb == 0) {                                                           \
            const T s = b[0];                                                                      \
            EW_BLOCKED_LOOP(OT, o, n, OP(a[i], s));                                                \
        } else {                                                                                   \
            for (int64_t i = 0; i < n; i++) o[i] = OP(a[i * sa], b[i * sb]);                       \
        }                                                                                          \
    }

/* Families of element types; OUT(T) names the output type (T itself, or uint8_t for bool). */
#define BIN_FLOAT(name, OP, OUT)                                                                   \
    BIN_DEF(name, f32, float, uint32_t, OUT(float), OP)                                            \
    BIN_DEF(name, f64, double, uint64_t, OUT(double), OP)
/* name_f32 for the float32 arithmetic that models run most (a squeeze-excitation gate's Mul scales
 * every row of a block's largest tensor by one value): the three contiguous cases on 8-lane
 * vectors (cpu_simd.h: one AVX register in the x86-64-v3 clone), each vector loaded before its
 * result is stored (o may be a or b), the tail and the strided case element by element. */
#define BIN_F32_V8(name, OP)                                                                       \
    KILN_SIMD_CLONES static void name##_f32(const void *av, int64_t sa, const void *bv, int64_t sb, void *ov, \
                                            int64_t n) {                                           \
        const float *a = av, *b = bv;                                                              \
        float *o = ov;                                                                             \
        int64_t i = 0;                                                                             \
        if (sa == 1 && sb == 1)                                                                    \
            for (; i + 8 <= n; i += 8) kiln_v8_store(o + i, OP(kiln_v8_load(a + i), kiln_v8_load(b + i))); \
        else if (sa == 0 && sb == 1)                                                               \
            for (kiln_v8f s = kiln_v8_splat(a[0]); i + 8 <= n; i += 8) kiln_v8_store(o + i, OP(s, kiln_v8_load(b + i))); \
        else if (sa == 1 && sb == 0)                                                               \
            for (kiln_v8f s = kiln_v8_splat(b[0]); i + 8 <= n; i += 8) kiln_v8_store(o + i, OP(kiln_v8_load(a + i), s)); \
        for (; i < n; i++) o[i] = OP(a[i * sa], b[i * sb]);                                        \
    }
#define BIN_FLOAT_V8(name, OP) BIN_F32_V8(name, OP) BIN_DEF(name, f64, double, uint64_t, double, OP)
#define BIN_SINT(name, OP, OUT)                                                                    \
    BIN_DEF(name, i8, int8_t, uint32_t, OUT(int8_t), OP)                                           \
    BIN_DEF(name, i16, int16_t, uint32_t, OUT(int16_t), OP)                                        \
    BIN_DEF(name, i32, int32_t, uint32_t, OUT(int32_t), OP)                                        \
    BIN_DEF(name, i64, int64_t, uint64_t, OUT(int64_t), OP)
#define BIN_UINT(name, OP, OUT)                                                                    \
    BIN_DEF(name, u8, uint8_t, uint32_t, OUT(uint8_t), OP)                                         \
    BIN_DEF(name, u16, uint16_t, uint32_t, OUT(uint16_t), OP)                                      \
    BIN_DEF(name, u32, uint32_t, uint32_t, OUT(uint32_t), OP)                                      \
    BIN_DEF(name, u64, uint64_t, uint64_t, OUT(uint64_t), OP)
#define BIN_BOOL(name, OP, OUT) BIN_DEF(name, b8, uint8_t, uint32_t, uint8_t, OP)
#define SAME(T) T
#define TO_BOOL(T) uint8_t

#define F_FNS(name) [KILN_F32] = name##_f32, [KILN_F64] = name##_f64
#define S_FNS(name) [KILN_I8] = name##_i8, [KILN_I16] = name##_i16, [KILN_I32] = name##_i32, [KILN_I64] = name##_i64
#define U_FNS(name) [KILN_U8] = name##_u8, [KILN_U16] = name##_u16, [KILN_U32] = name##_u32, [KILN_U64] = name##_u64
#define B_FNS(name) [KILN_BOOL] = name##_b8

/* ---------------------------------------------------------------- arithmetic */

#define ADD_F(x, y) ((x) + (y))
#define SUB_F(x, y) ((x) - (y))
#define MUL_F(x, y) ((x) * (y))
#define DIV_F(x, y) ((x) / (y))
#define ADD_I(x, y) ((T)((UT)(x) + (UT)(y)))
#define SUB_I(x, y) ((T)((UT)(x) - (UT)(y)))
#define MUL_I(x, y) ((T)((UT)(x) * (UT)(y)))
/* x / -1 is negation (INT_MIN / -1 would trap). */
#define DIV_S(x, y) ((y) == 0 ? (T)0 : (y) == -1 ? (T)(0 - (UT)(x)) : (T)((x) / (y)))
#define DIV_U(x, y) ((y) == 0 ? (T)0 : (T)((x) / (y)))
/* NaN-propagating max/min (numpy.maximum / numpy.minimum). */
#define MAX_F(x, y) (((x) != (x) || (x) > (y)) ? (x) : (y))
#define MIN_F(x, y) (((x) != (x) || (x) < (y)) ? (x) : (y))
#define MAX_I(x, y) ((x) > (y) ? (x) : (y))
#define MIN_I(x, y) ((x) < (y) ? (x) : (y))
#define PRELU_F(x, y) ((x) < 0 ? (x) * (y) : (x))
#define PRELU_S(x, y) ((x) < 0 ? (T)((UT)(x) * (UT)(y)) : (x))
#define PRELU_U(x, y) ((void)(y), (x))

BIN_FLOAT_V8(add, ADD_F) BIN_SINT(add, ADD_I, SAME) BIN_UINT(add, ADD_I, SAME)
BIN_FLOAT_V8(sub, SUB_F) BIN_SINT(sub, SUB_I, SAME) BIN_UINT(sub, SUB_I, SAME)
BIN_FLOAT_V8(mul, MUL_F) BIN_SINT(mul, MUL_I, SAME) BIN_UINT(mul, MUL_I, SAME)
BIN_FLOAT_V8(div, DIV_F) BIN_SINT(div, DIV_S, SAME) BIN_UINT(div, DIV_U, SAME)
BIN_FLOAT(max, MAX_F, SAME) BIN_SINT(max, MAX_I, SAME) BIN_UINT(max, MAX_I, SAME)
BIN_FLOAT(min, MIN_F, SAME) BIN_SINT(min, MIN_I, SAME) BIN_UINT(min, MIN_I, SAME)
BIN_FLOAT(prelu, PRELU_F, SAME) BIN_SINT(prelu, PRELU_S, SAME) BIN_UINT(prelu, PRELU_U, SAME)

#define ALL_NUM_FNS(name) F_FNS(name), S_FNS(name), U_FNS(name)
static const ew_binary_op op_add = {"Add", {ALL_NUM_FNS(add)}, false};
static const ew_binary_op op_sub = {"Sub", {ALL_NUM_FNS(sub)}, false};
static const ew_binary_op op_mul = {"Mul", {ALL_NUM_FNS(mul)}, false};
static const ew_binary_op op_div = {"Div", {ALL_NUM_FNS(div)}, false};
static const ew_binary_op op_max = {"Max", {ALL_NUM_FNS(max)}, false};
static const ew_binary_op op_min = {"Min", {ALL_NUM_FNS(min)}, false};
static const ew_binary_op op_sum = {"Sum", {ALL_NUM_FNS(add)}, false};
static const ew_binary_op op_mean = {"Mean", {F_FNS(add)}, false};
static const ew_binary_op op_prelu = {"PRelu", {ALL_NUM_FNS(prelu)}, false};

/* Mod, fmod=0: the result takes the divisor's sign (numpy.mod); fmod=1: the dividend's (C fmod).
 * Integer x % 0 gives 0, and x % -1 is 0 (INT_MIN % -1 would trap). */
static inline double mod_floor_f64(double x, double y) {
    double r = fmod(x, y);
    if (r != 0) return (r < 0) != (y < 0) ? r + y : r;
    return copysign(0.0, y);
}
static inline float mod_floor_f32(float x, float y) {
    float r = fmodf(x, y);
    if (r != 0) return (r < 0) != (y < 0) ? r + y : r;
    return copysignf(0.0f, y);
}
static inline int64_t mod_trunc_s64(int64_t x, int64_t y) { return y == 0 || y == -1 ? 0 : x % y; }
static inline int64_t mod_floor_s64(int64_t x, int64_t y) {
    int64_t r = mod_trunc_s64(x, y);
    return r != 0 && (r < 0) != (y < 0) ? r + y : r;
}
#define MOD_FLOOR_F32(x, y) mod_floor_f32(x, y)
#define MOD_FLOOR_F64(x, y) mod_floor_f64(x, y)
#define MOD_TRUNC_F32(x, y) fmodf(x, y)
#define MOD_TRUNC_F64(x, y) fmod(x, y)
#define MOD_FLOOR_S(x, y) ((T)mod_floor_s64(x, y))
#define MOD_TRUNC_S(x, y) ((T)mod_trunc_s64(x, y))
#define MOD_U(x, y) ((y) == 0 ? (T)0 : (T)((x) % (y)))
BIN_DEF(modfl, f32, float, uint32_t, float, MOD_FLOOR_F32)
BIN_DEF(modfl, f64, double, uint64_t, double, MOD_FLOOR_F64)
BIN_DEF(modtr, f32, float, uint32_t, float, MOD_TRUNC_F32)
BIN_DEF(modtr, f64, double, uint64_t, double, MOD_TRUNC_F64)
BIN_SINT(modfl, MOD_FLOOR_S, SAME) BIN_SINT(modtr, MOD_TRUNC_S, SAME) BIN_UINT(modu, MOD_U, SAME)
static const ew_binary_op op_mod_floor = {"Mod", {F_FNS(modfl), S_FNS(modfl), U_FNS(modu)}, false};
static const ew_binary_op op_mod_trunc = {"Mod", {F_FNS(modtr), S_FNS(modtr), U_FNS(modu)}, false};

/* ---------------------------------------------------------------- comparison and logic */

#define EQ(x, y) ((uint8_t)((x) == (y)))
#define LT(x, y) ((uint8_t)((x) < (y)))
#define GT(x, y) ((uint8_t)((x) > (y)))
#define LE(x, y) ((uint8_t)((x) <= (y)))
#define GE(x, y) ((uint8_t)((x) >= (y)))
#define COMPARE(name, OP) BIN_FLOAT(name, OP, TO_BOOL) BIN_SINT(name, OP, TO_BOOL) BIN_UINT(name, OP, TO_BOOL)
COMPARE(eq, EQ) COMPARE(lt, LT) COMPARE(gt, GT) COMPARE(le, LE) COMPARE(ge, GE)
#define BEQ(x, y) ((uint8_t)(((x) != 0) == ((y) != 0)))
#define AND(x, y) ((uint8_t)(((x) != 0) & ((y) != 0)))
#define OR(x, y) ((uint8_t)(((x) != 0) | ((y) != 0)))
#define XOR(x, y) ((uint8_t)(((x) != 0) ^ ((y) != 0)))
BIN_BOOL(eq, BEQ, 0) BIN_BOOL(and, AND, 0) BIN_BOOL(or, OR, 0) BIN_BOOL(xor, XOR, 0)

static const ew_binary_op op_equal = {"Equal", {ALL_NUM_FNS(eq), B_FNS(eq)}, true};
static const ew_binary_op op_less = {"Less", {ALL_NUM_FNS(lt)}, true};
static const ew_binary_op op_greater = {"Greater", {ALL_NUM_FNS(gt)}, true};
static const ew_binary_op op_less_equal = {"LessOrEqual", {ALL_NUM_FNS(le)}, true};
static const ew_binary_op op_greater_equal = {"GreaterOrEqual", {ALL_NUM_FNS(ge)}, true};
static const ew_binary_op op_and = {"And", {B_FNS(and)}, false};
static const ew_binary_op op_or = {"Or", {B_FNS(or)}, false};
static const ew_binary_op op_xor = {"Xor", {B_FNS(xor)}, false};

/* ---------------------------------------------------------------- bitwise */

#define BAND(x, y) ((T)((x) & (y)))
#define BOR(x, y) ((T)((x) | (y)))
#define BXOR(x, y) ((T)((x) ^ (y)))
#define BITWISE(name, OP) BIN_SINT(name, OP, SAME) BIN_UINT(name, OP, SAME)
BITWISE(band, BAND) BITWISE(bor, BOR) BITWISE(bxor, BXOR)
static const ew_binary_op op_bitwise_and = {"BitwiseAnd", {S_FNS(band), U_FNS(band)}, false};
static const ew_binary_op op_bitwise_or = {"BitwiseOr", {S_FNS(bor), U_FNS(bor)}, false};
static const ew_binary_op op_bitwise_xor = {"BitwiseXor", {S_FNS(bxor), U_FNS(bxor)}, false};

/* A shift by a negative amount or by the type's width or more leaves only the sign fill: 0, or -1
 * for a right shift of a negative value. Left shifts go through the unsigned type. */
#define NBITS (8 * (int64_t)sizeof(T))
#define SHL(x, y) ((y) < 0 || (int64_t)(y) >= NBITS ? (T)0 : (T)((UT)(x) << (y)))
#define SHR(x, y) ((y) < 0 || (int64_t)(y) >= NBITS ? (T)((x) < 0 ? -1 : 0) : (T)((x) >> (y)))
#define SHL_U(x, y) ((y) >= NBITS ? (T)0 : (T)((UT)(x) << (y)))
#define SHR_U(x, y) ((y) >= NBITS ? (T)0 : (T)((x) >> (y)))
BIN_SINT(shl, SHL, SAME) BIN_SINT(shr, SHR, SAME) BIN_UINT(shl, SHL_U, SAME) BIN_UINT(shr, SHR_U, SAME)
static const ew_binary_op op_shift_left = {"BitShift", {S_FNS(shl), U_FNS(shl)}, false};
static const ew_binary_op op_shift_right = {"BitShift", {S_FNS(shr), U_FNS(shr)}, false};

/* ---------------------------------------------------------------- exec: plain binary ops */

#define BINARY_EXEC(Name, op)                                                                      \
    kiln_status kiln_ew_exec_##Name(EW_EXEC_ARGS) {                                                \
        if (nin < 2) return kiln_error(KILN_ERR_INVALID_ARGUMENT, #Name ": needs two inputs");     \
        return ew_binary_exec(n, &op, in[0], in[1], out[0]);                                       \
    }
BINARY_EXEC(Add, op_add)
BINARY_EXEC(Sub, op_sub)
BINARY_EXEC(Mul, op_mul)
BINARY_EXEC(Div, op_div)
BINARY_EXEC(Equal, op_equal)
BINARY_EXEC(Less, op_less)
BINARY_EXEC(Greater, op_greater)
BINARY_EXEC(LessOrEqual, op_less_equal)
BINARY_EXEC(GreaterOrEqual, op_greater_equal)
BINARY_EXEC(And, op_and)
BINARY_EXEC(Or, op_or)
BINARY_EXEC(Xor, op_xor)
BINARY_EXEC(BitwiseAnd, op_bitwise_and)
BINARY_EXEC(BitwiseOr, op_bitwise_or)
BINARY_EXEC(BitwiseXor, op_bitwise_xor)

kiln_status kiln_ew_exec_Mod(EW_EXEC_ARGS) {
    if (nin < 2) return kiln_error(KILN_ERR_INVALID_ARGUMENT, "Mod: needs two inputs");
    int64_t fmod_attr = kiln_attr_int(n, "fmod", 0);
    if (fmod_attr != 0 && fmod_attr != 1)
        return kiln_error(KILN_ERR_INVALID_ARGUMENT, "Mod: fmod must be 0 or 1, not %lld", (long long)fmod_attr);
    return ew_binary_exec(n, fmod_attr ? &op_mod_trunc : &op_mod_floor, in[0], in[1], out[0]);
}

kiln_status kiln_ew_exec_BitShift(EW_EXEC_ARGS) {
    if (nin < 2) return kiln_error(KILN_ERR_INVALID_ARGUMENT, "BitShift: needs two inputs");
    const char *dir = kiln_attr_string(n, "direction", "");
    if (strcmp(dir, "LEFT") && strcmp(dir, "RIGHT"))
        return kiln_error(KILN_ERR_INVALID_ARGUMENT, "BitShift: direction must be \"LEFT\" or \"RIGHT\", not \"%s\"", dir);
    return ew_binary_exec(n, !strcmp(dir, "LEFT") ? &op_shift_left : &op_shift_right, in[0], in[1], out[0]);
}

kiln_status kiln_ew_exec_Min(EW_EXEC_ARGS) { return ew_variadic_exec(n, &op_min, false, in, nin, out[0]); }
kiln_status kiln_ew_exec_Max(EW_EXEC_ARGS) { return ew_variadic_exec(n, &op_max, false, in, nin, out[0]); }
kiln_status kiln_ew_exec_Sum(EW_EXEC_ARGS) { return ew_variadic_exec(n, &op_sum, false, in, nin, out[0]); }
kiln_status kiln_ew_exec_Mean(EW_EXEC_ARGS) { return ew_variadic_exec(n, &op_mean, true, in, nin, out[0]); }

/* PRelu: slope broadcasts to X's shape (one direction only). Before opset 7 a 1-D slope of X's
 * channel count (dim 1) applied per channel. */
kiln_status kiln_ew_exec_PRelu(EW_EXEC_ARGS) {
    if (nin < 2 || !in[0] || !in[1]) return kiln_error(KILN_ERR_INVALID_ARGUMENT, "PRelu: needs two inputs");
    const kiln_tensor *x = in[0], *slope = in[1];
    if (x->dtype != slope->dtype)
        return kiln_error(KILN_ERR_INVALID_ARGUMENT, "PRelu: X is %s but slope is %s", kiln_dtype_name(x->dtype),
                          kiln_dtype_name(slope->dtype));
    int s_ndim = slope->ndim;
    int64_t s_dims[KILN_MAX_DIMS];
    memcpy(s_dims, slope->dims, sizeof s_dims);
    if (n->opset < 7 && slope->ndim == 1 && x->ndim >= 2 && slope->dims[0] == x->dims[1] &&
        x->dims[x->ndim - 1] != slope->dims[0]) {
        s_ndim = x->ndim - 1;
        for (int d = 0; d < s_ndim; d++) s_dims[d] = d == 0 ? slope->dims[0] : 1;
    }
    KILN_TRY(kiln_tensor_alloc(out[0], x->dtype, x->ndim, x->dims));
    return ew_binary_run(&op_prelu, x->dtype, x->data, x->ndim, x->dims, slope->data, s_ndim, s_dims, out[0]);
}

/* ---------------------------------------------------------------- Pow */

/* Integer power with wrap-around; a negative exponent gives the truncated 1/x^-e (0 unless |x| = 1). */
static int64_t ipow64(int64_t x, int64_t e) {
    if (e < 0) return x == 1 ? 1 : x == -1 ? ((e & 1) ? -1 : 1) : 0;
    uint64_t r = 1, b = (uint64_t)x;
    for (; e; e >>= 1, b *= b)
        if (e & 1) r *= b;
    return (int64_t)r;
}
#define POW_F32(x, y) powf(x, y)
#define POW_F64(x, y) pow(x, y)
#define POW_I(x, y) ((T)ipow64(x, y))
BIN_DEF(pow, f32, float, uint32_t, float, POW_F32)
BIN_DEF(pow, f64, double, uint64_t, double, POW_F64)
BIN_DEF(pow, i32, int32_t, uint32_t, int32_t, POW_I)
BIN_DEF(pow, i64, int64_t, uint64_t, int64_t, POW_I)
static const ew_binary_op op_pow = {"Pow", {F_FNS(pow), [KILN_I32] = pow_i32, [KILN_I64] = pow_i64}, false};

/* Base and exponent of different dtypes: computed in int64 when both are integers, else in double,
 * and converted to the base's dtype. */
typedef struct pow_ctx {
    const kiln_tensor *a, *b;
    kiln_tensor *out;
    bool ints;
} pow_ctx;

static void pow_mixed_row(void *c, const int64_t *off, int64_t out_off, int64_t n, const int64_t *step) {
    const pow_ctx *x = c;
    size_t ea = kiln_dtype_size(x->a->dtype), eb = kiln_dtype_size(x->b->dtype), eo = kiln_dtype_size(x->out->dtype);
    for (int64_t i0 = 0; i0 < n; i0 += EW_CHUNK) {
        int64_t m = n - i0 < EW_CHUNK ? n - i0 : EW_CHUNK;
        const char *pa = (const char *)x->a->data + (off[0] + i0 * step[0]) * (int64_t)ea;
        const char *pb = (const char *)x->b->data + (off[1] + i0 * step[1]) * (int64_t)eb;
        char *po = (char *)x->out->data + (out_off + i0) * (int64_t)eo;
        if (x->ints) {
            int64_t va[EW_CHUNK], vb[EW_CHUNK];
            ew_load_i64(x->a->dtype, pa, step[0], m, va);
            ew_load_i64(x->b->dtype, pb, step[1], m, vb);
            for (int64_t i = 0; i < m; i++) va[i] = ipow64(va[i], vb[i]);
            ew_store_i64(x->out->dtype, po, m, va, false);
        } else {
            double va[EW_CHUNK], vb[EW_CHUNK];
            ew_load_f64(x->a->dtype, pa, step[0], m, va);
            ew_load_f64(x->b->dtype, pb, step[1], m, vb);
            for (int64_t i = 0; i < m; i++) va[i] = pow(va[i], vb[i]);
            ew_store_f64(x->out->dtype, po, m, va);
        }
    }
}

kiln_status kiln_ew_exec_Pow(EW_EXEC_ARGS) {
    if (nin < 2 || !in[0] || !in[1]) return kiln_error(KILN_ERR_INVALID_ARGUMENT, "Pow: needs two inputs");
    const kiln_tensor *a = in[0], *b = in[1];
    if (!ew_is_float(a->dtype) && !ew_is_int(a->dtype))
        return kiln_error(KILN_ERR_UNSUPPORTED, "Pow: base of dtype %s is not supported", kiln_dtype_name(a->dtype));
    if (!ew_is_float(b->dtype) && !ew_is_int(b->dtype))
        return kiln_error(KILN_ERR_UNSUPPORTED, "Pow: exponent of dtype %s is not supported", kiln_dtype_name(b->dtype));
    int b_ndim, out_ndim;
    int64_t b_dims[KILN_MAX_DIMS], out_dims[KILN_MAX_DIMS];
    KILN_TRY(ew_binary_shape(n, a, b, &b_ndim, b_dims, &out_ndim, out_dims));
    KILN_TRY(kiln_tensor_alloc(out[0], a->dtype, out_ndim, out_dims));
    /* x^2 (layer norms, squared errors) is x*x, exactly what powf returns for it. */
    if (a->dtype == KILN_F32 && b->dtype == KILN_F32 && kiln_tensor_numel(b) == 1 && *(const float *)b->data == 2.0f)
        return ew_binary_run(&op_mul, KILN_F32, a->data, a->ndim, a->dims, a->data, a->ndim, a->dims, out[0]);
    bool same = a->dtype == b->dtype &&
                (op_pow.fn[a->dtype] || ((a->dtype == KILN_F16 || a->dtype == KILN_BF16)));
    if (same) return ew_binary_run(&op_pow, a->dtype, a->data, a->ndim, a->dims, b->data, b_ndim, b_dims, out[0]);
    ew_bcast plan;
    const int ndims[2] = {a->ndim, b_ndim};
    const int64_t *const dims[2] = {a->dims, b_dims};
    KILN_TRY(ew_bcast_plan(&plan, 2, ndims, dims, out_ndim, out_dims));
    pow_ctx c = {a, b, out[0], ew_is_int(a->dtype) && ew_is_int(b->dtype)};
    ew_bcast_each(&plan, pow_mixed_row, &c);
    return KILN_OK;
}

/* ---------------------------------------------------------------- Where */

typedef struct where_ctx {
    const uint8_t *c;
    const char *x, *y;
    char *o;
    size_t esize;
} where_ctx;

#define WHERE_ROW(T)                                                                               \
    do {                                                                                           \
        const T *x = (const T *)w->x + off[1], *y = (const T *)w->y + off[2];                      \
        T *o = (T *)w->o + out_off;                                                                \
        if (step[0] == 1 && step[1] == 1 && step[2] == 1)                                          \
            EW_BLOCKED_LOOP(T, o, n, c[i] ? x[i] : y[i]);                                          \
        else                                                                                       \
            for (int64_t i = 0; i < n; i++) o[i] = c[i * step[0]] ? x[i * step[1]] : y[i * step[2]]; \
    } while (0)

static void where_row(void *ctx, const int64_t *off, int64_t out_off, int64_t n, const int64_t *step) {
    const where_ctx *w = ctx;
    const uint8_t *c = w->c + off[0];
    switch (w->esize) {
    case 1: WHERE_ROW(uint8_t); break;
    case 2: WHERE_ROW(uint16_t); break;
    case 4: WHERE_ROW(uint32_t); break;
    case 8: WHERE_ROW(uint64_t); break;
    default: /* wider elements (complex128) */
        for (int64_t i = 0; i < n; i++) {
            const char *src = c[i * step[0]] ? w->x + (off[1] + i * step[1]) * (int64_t)w->esize
                                             : w->y + (off[2] + i * step[2]) * (int64_t)w->esize;
            memcpy(w->o + (out_off + i) * (int64_t)w->esize, src, w->esize);
        }
    }
}

kiln_status kiln_ew_exec_Where(EW_EXEC_ARGS) {
    if (nin < 3 || !in[0] || !in[1] || !in[2]) return kiln_error(KILN_ERR_INVALID_ARGUMENT, "Where: needs three inputs");
    const kiln_tensor *c = in[0], *x = in[1], *y = in[2];
    if (c->dtype != KILN_BOOL)
        return kiln_error(KILN_ERR_INVALID_ARGUMENT, "Where: condition must be bool, not %s", kiln_dtype_name(c->dtype));
    if (x->dtype != y->dtype)
        return kiln_error(KILN_ERR_INVALID_ARGUMENT, "Where: X is %s but Y is %s", kiln_dtype_name(x->dtype),
                          kiln_dtype_name(y->dtype));
    size_t es = kiln_dtype_size(x->dtype);
    if (!es) return kiln_error(KILN_ERR_UNSUPPORTED, "Where: inputs of dtype %s are not supported", kiln_dtype_name(x->dtype));
    int nd = 0;
    int64_t dims[KILN_MAX_DIMS], tmp[KILN_MAX_DIMS];
    const kiln_tensor *ins[3] = {c, x, y};
    for (int k = 0; k < 3; k++) {
        kiln_status s = kiln_broadcast_shape(nd, dims, ins[k]->ndim, ins[k]->dims, &nd, tmp);
        if (s != KILN_OK) return kiln_error_prefix(s, "Where");
        memcpy(dims, tmp, sizeof dims);
    }
    KILN_TRY(kiln_tensor_alloc(out[0], x->dtype, nd, dims));
    ew_bcast plan;
    const int ndims[3] = {c->ndim, x->ndim, y->ndim};
    const int64_t *const pdims[3] = {c->dims, x->dims, y->dims};
    KILN_TRY(ew_bcast_plan(&plan, 3, ndims, pdims, nd, dims));
    where_ctx w = {c->data, x->data, y->data, out[0]->data, es};
    ew_bcast_each(&plan, where_row, &w);
    return KILN_OK;
}
