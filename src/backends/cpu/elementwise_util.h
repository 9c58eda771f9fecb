/* elementwise_util.h — shared machinery of the CPU elementwise family (elementwise*.c): the
 * broadcast planner and row iterator, the binary/variadic drivers, dtype conversion of element runs,
 * and the exec functions each file exports to the family's kernel table in elementwise.c. */
#ifndef KILN_CPU_ELEMENTWISE_UTIL_H
#define KILN_CPU_ELEMENTWISE_UTIL_H

#include "backends/cpu/cpu_kernels.h"

#include <stdbool.h>
#include <stdint.h>

/* Elements converted per chunk when an op runs through a wider type (float16 via float32, ...). */
#define EW_CHUNK 256
/* Loops are written as blocks of EW_BLOCK independent iterations (load all, then store all): GCC's
 * -O2 vectorizer (very-cheap cost model) vectorizes those, and exact in-place aliasing stays safe. */
#define EW_BLOCK 8
/* Most inputs a broadcast plan handles at once (Where has three). */
#define EW_MAX_IN 3

/* y[i] = EXPR for i in [0, n): EXPR may use `i`. Blocked as described at EW_BLOCK. */
#define EW_BLOCKED_LOOP(T, y, n, EXPR)                                                             \
    do {                                                                                           \
        int64_t i0_ = 0;                                                                           \
        for (; i0_ + EW_BLOCK <= (n); i0_ += EW_BLOCK) {                                           \
            T t_[EW_BLOCK];                                                                        \
            for (int j_ = 0; j_ < EW_BLOCK; j_++) {                                                \
                int64_t i = i0_ + j_;                                                              \
                t_[j_] = (EXPR);                                                                   \
            }                                                                                      \
            for (int j_ = 0; j_ < EW_BLOCK; j_++) (y)[i0_ + j_] = t_[j_];                          \
        }                                                                                          \
        for (int64_t i = i0_; i < (n); i++) (y)[i] = (EXPR);                                       \
    } while (0)

/* ---- broadcasting ---- */

/* An output shape and, per input, its element strides in that shape (0 on broadcast dims), with
 * size-1 dims dropped and dims that are contiguous for every input merged. ndim >= 1. */
typedef struct ew_bcast {
    int nin, ndim;
    int64_t numel;
    int64_t dims[KILN_MAX_DIMS];
    int64_t strides[EW_MAX_IN][KILN_MAX_DIMS];
} ew_bcast;

/* Plans iterating out_dims over nin inputs of the given shapes; each input must broadcast to
 * out_dims (KILN_ERR_SHAPE otherwise). */
kiln_status ew_bcast_plan(ew_bcast *b, int nin, const int *ndims, const int64_t *const *dims, int out_ndim,
                          const int64_t *out_dims);

/* Called once per innermost row: off[k] is input k's element offset of the row's first element,
 * out_off the output's (the output is dense), n the row length and step[k] input k's stride along it. */
typedef void (*ew_row_fn)(void *ctx, const int64_t *off, int64_t out_off, int64_t n, const int64_t *step);
/* Calls row for every innermost row of the plan, in output order. */
void ew_bcast_each(const ew_bcast *b, ew_row_fn row, void *ctx);

/* ---- binary ops ---- */

/* o[i] = op(a[i*sa], b[i*sb]) for i in [0, n); element strides sa, sb are typically 0 or 1. o may
 * equal a or b (exactly, with stride 1) for in-place accumulation. */
typedef void (*ew_binary_fn)(const void *a, int64_t sa, const void *b, int64_t sb, void *o, int64_t n);

typedef struct ew_binary_op {
    const char *name;
    ew_binary_fn fn[KILN_DTYPE_COUNT]; /* per input dtype; float16/bfloat16 fall back to float32 */
    bool bool_out;                     /* output is bool (comparisons) instead of the input dtype */
} ew_binary_op;

/* out = op(a, b) with numpy broadcasting (ONNX opset < 7: the legacy `broadcast`/`axis` attributes).
 * Checks that a and b have one dtype the op supports; allocates out. */
kiln_status ew_binary_exec(const kiln_node *n, const ew_binary_op *op, const kiln_tensor *a,
                           const kiln_tensor *b, kiln_tensor *out);
/* The shape b takes part in broadcasting with (b's own, or for opset < 7 the legacy alignment) and
 * the broadcast output shape; fails with KILN_ERR_SHAPE naming the op. */
kiln_status ew_binary_shape(const kiln_node *n, const kiln_tensor *a, const kiln_tensor *b, int *b_ndim,
                            int64_t *b_dims, int *out_ndim, int64_t *out_dims);
/* Runs op over tensors whose shapes are given explicitly (b_ndim/b_dims may differ from b's own, for
 * legacy and unidirectional broadcasting) into an out that is already allocated with out's shape.
 * dtype is the inputs' dtype; out may alias a exactly. */
kiln_status ew_binary_run(const ew_binary_op *op, kiln_dtype dtype, const void *a, int a_ndim,
                          const int64_t *a_dims, const void *b, int b_ndim, const int64_t *b_dims,
                          kiln_tensor *out);
/* Sum / Min / Max / Mean: out = op(in[0], op(in[1], ...)) broadcast over all inputs; mean divides the
 * result by nin. */
kiln_status ew_variadic_exec(const kiln_node *n, const ew_binary_op *op, bool mean, kiln_tensor *const *in,
                             int nin, kiln_tensor *out);

/* ---- dtype conversion of element runs ---- */

static inline bool ew_is_float(kiln_dtype t) {
    return t == KILN_F32 || t == KILN_F64 || t == KILN_F16 || t == KILN_BF16;
}
static inline bool ew_is_unsigned(kiln_dtype t) {
    return t == KILN_U8 || t == KILN_U16 || t == KILN_U32 || t == KILN_U64 || t == KILN_BOOL;
}
static inline bool ew_is_int(kiln_dtype t) {
    return t == KILN_I8 || t == KILN_I16 || t == KILN_I32 || t == KILN_I64 || t == KILN_U8 || t == KILN_U16 ||
           t == KILN_U32 || t == KILN_U64;
}
/* Every dtype Cast converts between (numeric types and bool). */
bool ew_cast_supported(kiln_dtype t);

/* dst[i] = float32 value of element i*stride of p (float32/float16/bfloat16). */
void ew_load_f32(kiln_dtype t, const void *p, int64_t stride, int64_t n, float *dst);
/* Element i of p (float32/float16/bfloat16, dense) = src[i], rounded to nearest even. */
void ew_store_f32(kiln_dtype t, void *p, int64_t n, const float *src);
/* dst[i] = element i*stride of p as double (any numeric type; float types exactly). */
void ew_load_f64(kiln_dtype t, const void *p, int64_t stride, int64_t n, double *dst);
/* dst[i] = element i*stride of p as int64 (integer/bool types; uint64 keeps its bits). */
void ew_load_i64(kiln_dtype t, const void *p, int64_t stride, int64_t n, int64_t *dst);
/* Stores doubles into a dense run of any numeric type: float types round to nearest, integer types
 * truncate toward zero and wrap (NaN and values beyond 64 bits give INT64_MIN's low bits), bool is
 * v != 0. */
void ew_store_f64(kiln_dtype t, void *p, int64_t n, const double *src);
/* Stores int64 values into a dense run of any numeric type: integer types keep the low bits, bool is
 * v != 0, float types round; src_unsigned reads the values as uint64. */
void ew_store_i64(kiln_dtype t, void *p, int64_t n, const int64_t *src, bool src_unsigned);
/* double -> int64 truncating toward zero, defined for every input (see ew_store_f64). */
int64_t ew_f64_to_i64(double v);

/* ---- exec functions, one per op, collected in kiln_cpu_kernels_elementwise ---- */

#define EW_EXEC_ARGS const kiln_node *n, kiln_tensor *const *in, int nin, kiln_tensor *const *out, int nout

/* elementwise_unary.c */
#define EW_UNARY_OPS(X)                                                                            \
    X(Abs) X(Neg) X(Exp) X(Log) X(Sqrt) X(Reciprocal) X(Sign) X(Sin) X(Cos) X(Tan) X(Asin) X(Acos)     \
    X(Atan) X(Sinh) X(Cosh) X(Asinh) X(Acosh) X(Atanh) X(Erf) X(Tanh) X(Sigmoid) X(Relu) X(LeakyRelu) \
    X(Elu) X(Selu) X(Celu) X(HardSigmoid) X(HardSwish) X(Gelu) X(Softplus) X(Softsign) X(Mish)        \
    X(ThresholdedRelu) X(Floor) X(Ceil) X(Round) X(IsNaN) X(IsInf) X(Not) X(BitwiseNot) X(Clip)
/* elementwise_binary.c */
#define EW_BINARY_OPS(X)                                                                           \
    X(Add) X(Sub) X(Mul) X(Div) X(Pow) X(Mod) X(PRelu) X(Equal) X(Less) X(Greater) X(LessOrEqual)       \
    X(GreaterOrEqual) X(And) X(Or) X(Xor) X(BitShift) X(BitwiseAnd) X(BitwiseOr) X(BitwiseXor) X(Min)  \
    X(Max) X(Sum) X(Mean) X(Where)
/* elementwise_cast.c */
#define EW_CAST_OPS(X) X(Cast) X(CastLike)

#define EW_DECLARE_EXEC(name) kiln_status kiln_ew_exec_##name(EW_EXEC_ARGS);
EW_UNARY_OPS(EW_DECLARE_EXEC)
EW_BINARY_OPS(EW_DECLARE_EXEC)
EW_CAST_OPS(EW_DECLARE_EXEC)
#undef EW_DECLARE_EXEC

#endif
