/* elementwise.cu — CUDA kernels of the unary elementwise ops (math, activations, rounding,
 * IsNaN/IsInf, Not, BitwiseNot, Clip) and the family's kernel table (binary and variadic ops live in
 * elementwise_binary.cu, casts in elementwise_cast.cu).
 *
 * One grid-stride kernel template per (storage type, op): float16/bfloat16/float32 compute in
 * float32 with the same formulas as the CPU kernels (src/backends/cpu/elementwise_unary.c); integer
 * ops wrap like two's-complement hardware. When input and output are 16-byte aligned each thread
 * moves whole 16-byte vectors, the tail element by element. */
#include "backends/cuda/elementwise.cuh"

#include <float.h>
#include <string.h>
#include <type_traits>

#define EWC_TABLE_ENTRY(name) {#name, "", kiln_ewc_exec_##name, kiln_ewc_supports_##name},

extern "C" const kiln_cuda_kernel kiln_cuda_kernels_elementwise[] = {
    EWC_UNARY_OPS(EWC_TABLE_ENTRY)
    EWC_BINARY_OPS(EWC_TABLE_ENTRY)
    EWC_CAST_OPS(EWC_TABLE_ENTRY)
    {NULL, NULL, NULL, NULL},
};

/* ---------------------------------------------------------------- ops */

enum un_op {
    U_ABS, U_NEG, U_EXP, U_LOG, U_SQRT, U_RECIP, U_SIGN, U_SIN, U_COS, U_TAN, U_ASIN, U_ACOS, U_ATAN,
    U_SINH, U_COSH, U_ASINH, U_ACOSH, U_ATANH, U_ERF, U_TANH, U_SIGMOID, U_RELU, U_LEAKY, U_ELU, U_SELU,
    U_CELU, U_HSIG, U_HSWISH, U_GELU_ERF, U_GELU_TANH, U_SOFTPLUS, U_SOFTSIGN, U_MISH, U_THRELU, U_FLOOR,
    U_CEIL, U_ROUND, U_ISNAN, U_ISINF, U_NOT, U_BITNOT, U_CLIP, U_DIVN,
};

/* dtype classes an op accepts */
enum { C_F = 1, C_S = 2, C_U = 4, C_B = 8 };

static __host__ __device__ constexpr unsigned un_classes(int op) {
    return op == U_ABS || op == U_SIGN || op == U_CLIP ? C_F | C_S | C_U
           : op == U_NEG || op == U_RELU              ? C_F | C_S
           : op == U_NOT                              ? C_B
           : op == U_BITNOT                           ? C_S | C_U
                                                      : C_F;
}
static __host__ __device__ constexpr bool un_bool_out(int op) { return op == U_ISNAN || op == U_ISINF; }

static unsigned dtype_class(kiln_dtype t) {
    return ku_is_float(t) ? C_F : ku_is_sint(t) ? C_S : ku_is_uint(t) ? C_U : t == KILN_BOOL ? C_B : 0;
}

/* Attribute values of one call. lo/hi: Clip's bound tensors on the device (x's dtype), or NULL. */
typedef struct un_params {
    float alpha, beta, gamma;
    bool flag_a, flag_b; /* IsInf: detect_negative, detect_positive */
    const void *lo, *hi;
} un_params;

/* ---------------------------------------------------------------- device math */

static __device__ __forceinline__ float clip_lo(float v, float lo) { return v < lo ? lo : v; }
static __device__ __forceinline__ float clip_hi(float v, float hi) { return v > hi ? hi : v; }
static __device__ __forceinline__ float sigmoidf(float v) { return 1.0f / (1.0f + expf(-v)); }
static __device__ __forceinline__ float softplusf(float v) { return v > 0.0f ? v + log1pf(expf(-v)) : log1pf(expf(v)); }

/* op(v) in float32 (bool-valued ops give 0 or 1). */
template <int OP> static __device__ __forceinline__ float un_f(float v, const un_params &p) {
    switch (OP) {
    case U_ABS: return fabsf(v);
    case U_NEG: return -v;
    case U_EXP: return expf(v);
    case U_LOG: return logf(v);
    case U_SQRT: return sqrtf(v);
    case U_RECIP: return 1.0f / v;
    case U_SIGN: return v > 0.0f ? 1.0f : v < 0.0f ? -1.0f : v;
    case U_SIN: return sinf(v);
    case U_COS: return cosf(v);
    case U_TAN: return tanf(v);
    case U_ASIN: return asinf(v);
    case U_ACOS: return acosf(v);
    case U_ATAN: return atanf(v);
    case U_SINH: return sinhf(v);
    case U_COSH: return coshf(v);
    case U_ASINH: return asinhf(v);
    case U_ACOSH: return acoshf(v);
    case U_ATANH: return atanhf(v);
    case U_ERF: return erff(v);
    case U_TANH: return tanhf(v);
    case U_SIGMOID: return sigmoidf(v);
    case U_RELU: return v < 0.0f ? 0.0f : v;
    case U_LEAKY: return v < 0.0f ? p.alpha * v : v;
    case U_ELU: return v > 0.0f ? v : p.alpha * expm1f(v);
    case U_SELU: return v > 0.0f ? p.gamma * v : p.gamma * p.alpha * expm1f(v);
    case U_CELU: return v > 0.0f ? v : p.alpha * expm1f(v / p.alpha);
    case U_HSIG: return clip_hi(clip_lo(p.alpha * v + p.beta, 0.0f), 1.0f);
    case U_HSWISH: return v * clip_hi(clip_lo(v / 6.0f + 0.5f, 0.0f), 1.0f);
    /* 0.5 x erfc(-x / sqrt 2): no cancellation where erf is near -1 */
    case U_GELU_ERF: return 0.5f * v * erfcf(-v * 0.70710678118654752f);
    /* 0.5 x (1 + tanh(y)) = x sigmoid(2y), y = sqrt(2/pi) (x + 0.044715 x^3) */
    case U_GELU_TANH: return v * sigmoidf(1.5957691216057308f * (v + 0.044715f * v * v * v));
    case U_SOFTPLUS: return softplusf(v);
    case U_SOFTSIGN: return v / (1.0f + fabsf(v));
    case U_MISH: return v * tanhf(softplusf(v));
    case U_THRELU: return v > p.alpha ? v : 0.0f;
    case U_FLOOR: return floorf(v);
    case U_CEIL: return ceilf(v);
    case U_ROUND: return rintf(v); /* half to even */
    case U_ISNAN: return v != v ? 1.0f : 0.0f;
    case U_ISINF: return (p.flag_b && v == INFINITY) || (p.flag_a && v == -INFINITY) ? 1.0f : 0.0f;
    case U_CLIP: return clip_hi(clip_lo(v, p.alpha), p.beta); /* NaN passes, lo > hi gives hi */
    case U_DIVN: return v / p.alpha;
    default: return v;
    }
}

/* op(v) on an integer or bool type, wrapping. */
template <int OP, typename T> static __device__ __forceinline__ T un_i(T v, T lo, T hi) {
    constexpr bool is_signed = (T)-1 < (T)0;
    if constexpr (OP == U_ABS) {
        if constexpr (is_signed) return v < (T)0 ? (T)(0ull - (unsigned long long)v) : v;
        else return v;
    } else if constexpr (OP == U_NEG) {
        return (T)(0ull - (unsigned long long)v);
    } else if constexpr (OP == U_SIGN) {
        if constexpr (is_signed) return (T)((v > (T)0) - (v < (T)0));
        else return (T)(v != (T)0);
    } else if constexpr (OP == U_RELU) {
        return v < (T)0 ? (T)0 : v; /* signed types only */
    } else if constexpr (OP == U_BITNOT) {
        return (T)~v;
    } else if constexpr (OP == U_NOT) {
        return (T)(v == (T)0);
    } else {
        static_assert(OP == U_CLIP, "un_i: not an integer op");
        T r = v < lo ? lo : v;
        return r > hi ? hi : r;
    }
}

/* The smallest / largest value of integer type T (Clip's default bounds). */
template <typename T> static __device__ __forceinline__ T int_min() {
    return (T)-1 < (T)0 ? (T)((unsigned long long)1 << (8 * sizeof(T) - 1)) : (T)0;
}
template <typename T> static __device__ __forceinline__ T int_max() { return (T)~int_min<T>(); }

/* out = op(x) for one element: float storage through float32, integers natively. */
template <int OP, typename T, typename O>
static __device__ __forceinline__ O un_apply(T v, const un_params &p, T lo, T hi) {
    if constexpr (ku_float_type<T>::value) {
        float r = un_f<OP>(ku_f32(v), p);
        if constexpr (un_bool_out(OP)) return (O)(r != 0.0f);
        else return ku_from_f32<O>(r);
    } else {
        return un_i<OP, T>(v, lo, hi);
    }
}

/* y[i] = op(x[i]) for i < n; x, y dense arrays of n elements (y may equal x). vec: both are
 * 16-byte aligned, so whole vectors of 16 / sizeof(T) elements move at once. */
template <typename T, typename O, int OP>
__global__ void __launch_bounds__(KU_THREADS) un_kernel(const T *x, O *y, int64_t n, un_params p, bool vec) {
    T lo = T(), hi = T();
    if constexpr (OP == U_CLIP) { /* bounds are read once per thread from the device tensors */
        if constexpr (ku_float_type<T>::value) {
            if (p.lo) p.alpha = ku_f32(*(const T *)p.lo);
            if (p.hi) p.beta = ku_f32(*(const T *)p.hi);
        } else {
            lo = p.lo ? *(const T *)p.lo : int_min<T>();
            hi = p.hi ? *(const T *)p.hi : int_max<T>();
        }
    }
    int64_t stride = (int64_t)gridDim.x * blockDim.x, tid = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    int64_t done = 0;
    if (vec) {
        const int V = ku_vec<T>::n;
        int64_t nv = n / V;
        for (int64_t i = tid; i < nv; i += stride) {
            T a[V];
            O r[V];
            ku_load(a, x + i * V);
#pragma unroll
            for (int k = 0; k < V; k++) r[k] = un_apply<OP, T, O>(a[k], p, lo, hi);
            ku_store(y + i * V, r);
        }
        done = nv * V;
    }
    for (int64_t i = done + tid; i < n; i += stride) y[i] = un_apply<OP, T, O>(x[i], p, lo, hi);
}

/* ---------------------------------------------------------------- host launch */

template <typename T, int OP>
static kiln_status un_go(const void *x, void *y, int64_t n, const un_params &p, kiln_cuda_ctx *ctx) {
    typedef typename std::conditional<un_bool_out(OP), uint8_t, T>::type O;
    bool vec = ku_aligned16(x) && ku_aligned16(y);
    int64_t items = vec ? n / ku_vec<T>::n + 1 : n;
    un_kernel<T, O, OP><<<ku_blocks(items, KU_THREADS, ctx), KU_THREADS, 0, ctx->stream>>>(
        (const T *)x, (O *)y, n, p, vec);
    KILN_CUDA_LAUNCH_CHECK("un_kernel");
    return KILN_OK;
}

/* Runs op OP over dtype t, or fails when the op does not take t. */
template <int OP>
static kiln_status un_launch(kiln_dtype t, const void *x, void *y, int64_t n, const un_params &p, kiln_cuda_ctx *ctx) {
    constexpr unsigned c = un_classes(OP);
    switch (t) {
    case KILN_F32: if constexpr ((c & C_F) != 0) return un_go<float, OP>(x, y, n, p, ctx); break;
    case KILN_F16: if constexpr ((c & C_F) != 0) return un_go<__half, OP>(x, y, n, p, ctx); break;
    case KILN_BF16: if constexpr ((c & C_F) != 0) return un_go<bf16, OP>(x, y, n, p, ctx); break;
    case KILN_I8: if constexpr ((c & C_S) != 0) return un_go<int8_t, OP>(x, y, n, p, ctx); break;
    case KILN_I16: if constexpr ((c & C_S) != 0) return un_go<int16_t, OP>(x, y, n, p, ctx); break;
    case KILN_I32: if constexpr ((c & C_S) != 0) return un_go<int32_t, OP>(x, y, n, p, ctx); break;
    case KILN_I64: if constexpr ((c & C_S) != 0) return un_go<int64_t, OP>(x, y, n, p, ctx); break;
    case KILN_U8: if constexpr ((c & C_U) != 0) return un_go<uint8_t, OP>(x, y, n, p, ctx); break;
    case KILN_U16: if constexpr ((c & C_U) != 0) return un_go<uint16_t, OP>(x, y, n, p, ctx); break;
    case KILN_U32: if constexpr ((c & C_U) != 0) return un_go<uint32_t, OP>(x, y, n, p, ctx); break;
    case KILN_U64: if constexpr ((c & C_U) != 0) return un_go<uint64_t, OP>(x, y, n, p, ctx); break;
    case KILN_BOOL: if constexpr ((c & C_B) != 0) return un_go<uint8_t, OP>(x, y, n, p, ctx); break;
    default: break;
    }
    return kiln_error(KILN_ERR_UNSUPPORTED, "elementwise (cuda): dtype %s is not supported by this op", kiln_dtype_name(t));
}

#define UN_CODES(X)                                                                                \
    X(U_ABS) X(U_NEG) X(U_EXP) X(U_LOG) X(U_SQRT) X(U_RECIP) X(U_SIGN) X(U_SIN) X(U_COS) X(U_TAN) X(U_ASIN) \
    X(U_ACOS) X(U_ATAN) X(U_SINH) X(U_COSH) X(U_ASINH) X(U_ACOSH) X(U_ATANH) X(U_ERF) X(U_TANH) X(U_SIGMOID) \
    X(U_RELU) X(U_LEAKY) X(U_ELU) X(U_SELU) X(U_CELU) X(U_HSIG) X(U_HSWISH) X(U_GELU_ERF) X(U_GELU_TANH)  \
    X(U_SOFTPLUS) X(U_SOFTSIGN) X(U_MISH) X(U_THRELU) X(U_FLOOR) X(U_CEIL) X(U_ROUND) X(U_ISNAN) X(U_ISINF) \
    X(U_NOT) X(U_BITNOT) X(U_CLIP) X(U_DIVN)

/* Runs run-time op code op over n dense elements of dtype t. */
static kiln_status un_run(int op, kiln_dtype t, const void *x, void *y, int64_t n, const un_params &p,
                          kiln_cuda_ctx *ctx) {
    if (n == 0) return KILN_OK;
    switch (op) {
#define UN_CASE(code) case code: return un_launch<code>(t, x, y, n, p, ctx);
        UN_CODES(UN_CASE)
#undef UN_CASE
    }
    return kiln_error(KILN_ERR_INTERNAL, "elementwise (cuda): unknown unary op %d", op);
}

kiln_status kiln_ewc_divide(kiln_dtype t, void *y, int64_t count, float d, kiln_cuda_ctx *ctx) {
    un_params p = {};
    p.alpha = d;
    return un_run(U_DIVN, t, y, y, count, p, ctx);
}

/* ---------------------------------------------------------------- attributes */

/* The op code of node n (Gelu picks its variant) and its attribute values; fails on a bad
 * attribute. */
static kiln_status un_read(const kiln_node *n, int op, int *code, un_params *p) {
    *p = un_params{};
    *code = op;
    switch (op) {
    case U_LEAKY: p->alpha = kiln_attr_float(n, "alpha", 0.01f); break;
    case U_ELU: case U_THRELU: p->alpha = kiln_attr_float(n, "alpha", 1.0f); break;
    case U_CELU:
        p->alpha = kiln_attr_float(n, "alpha", 1.0f);
        if (p->alpha == 0.0f) return kiln_error(KILN_ERR_INVALID_ARGUMENT, "Celu: alpha must not be 0");
        break;
    case U_SELU:
        p->alpha = kiln_attr_float(n, "alpha", 1.67326319217681884765625f);
        p->gamma = kiln_attr_float(n, "gamma", 1.05070102214813232421875f);
        break;
    case U_HSIG:
        p->alpha = kiln_attr_float(n, "alpha", 0.2f);
        p->beta = kiln_attr_float(n, "beta", 0.5f);
        break;
    case U_GELU_ERF: {
        const char *a = kiln_attr_string(n, "approximate", "none");
        if (strcmp(a, "none") && strcmp(a, "tanh"))
            return kiln_error(KILN_ERR_INVALID_ARGUMENT, "Gelu: approximate must be \"none\" or \"tanh\", not \"%s\"", a);
        if (!strcmp(a, "tanh")) *code = U_GELU_TANH;
        break;
    }
    case U_ISINF:
        p->flag_a = kiln_attr_int(n, "detect_negative", 1) != 0;
        p->flag_b = kiln_attr_int(n, "detect_positive", 1) != 0;
        break;
    default: break;
    }
    return KILN_OK;
}

/* ---------------------------------------------------------------- exec and supports */

static kiln_status un_exec(int op, EWC_EXEC_ARGS) {
    if (nin < 1 || ku_absent(&in[0])) return kiln_error(KILN_ERR_INVALID_ARGUMENT, "%s: input is missing", n->op_type);
    int code = 0;
    un_params p;
    KILN_TRY(un_read(n, op, &code, &p));
    return un_run(code, in[0].dtype, in[0].data, out[0].data, ku_numel(&out[0]), p, ctx);
}

static kiln_status un_supports(int op, EWC_SUPPORTS_ARGS) {
    const kiln_value *x = ku_in(g, n, 0);
    if (!x) return kiln_error(KILN_ERR_INVALID_ARGUMENT, "%s: input is missing", n->op_type);
    if (!(dtype_class(x->dtype) & un_classes(op))) return ku_refuse_dtype(n, 0, x->dtype);
    int code = 0;
    un_params p;
    return un_read(n, op, &code, &p);
}

#define UN_OP(Name, code)                                                                          \
    kiln_status kiln_ewc_exec_##Name(EWC_EXEC_ARGS) { return un_exec(code, n, in, nin, out, nout, ctx); } \
    kiln_status kiln_ewc_supports_##Name(EWC_SUPPORTS_ARGS) { return un_supports(code, g, n); }
UN_OP(Abs, U_ABS)
UN_OP(Neg, U_NEG)
UN_OP(Exp, U_EXP)
UN_OP(Log, U_LOG)
UN_OP(Sqrt, U_SQRT)
UN_OP(Reciprocal, U_RECIP)
UN_OP(Sign, U_SIGN)
UN_OP(Sin, U_SIN)
UN_OP(Cos, U_COS)
UN_OP(Tan, U_TAN)
UN_OP(Asin, U_ASIN)
UN_OP(Acos, U_ACOS)
UN_OP(Atan, U_ATAN)
UN_OP(Sinh, U_SINH)
UN_OP(Cosh, U_COSH)
UN_OP(Asinh, U_ASINH)
UN_OP(Acosh, U_ACOSH)
UN_OP(Atanh, U_ATANH)
UN_OP(Erf, U_ERF)
UN_OP(Tanh, U_TANH)
UN_OP(Sigmoid, U_SIGMOID)
UN_OP(Relu, U_RELU)
UN_OP(LeakyRelu, U_LEAKY)
UN_OP(Elu, U_ELU)
UN_OP(Selu, U_SELU)
UN_OP(Celu, U_CELU)
UN_OP(HardSigmoid, U_HSIG)
UN_OP(HardSwish, U_HSWISH)
UN_OP(Gelu, U_GELU_ERF)
UN_OP(Softplus, U_SOFTPLUS)
UN_OP(Softsign, U_SOFTSIGN)
UN_OP(Mish, U_MISH)
UN_OP(ThresholdedRelu, U_THRELU)
UN_OP(Floor, U_FLOOR)
UN_OP(Ceil, U_CEIL)
UN_OP(Round, U_ROUND)
UN_OP(IsNaN, U_ISNAN)
UN_OP(IsInf, U_ISINF)
UN_OP(Not, U_NOT)
UN_OP(BitwiseNot, U_BITNOT)
#undef UN_OP

/* ---------------------------------------------------------------- Clip */

/* Clip: y = min(max(x, lo), hi). Before opset 11 the bounds are float attributes; from 11 they are
 * optional one-element inputs of x's dtype, read on the device by the kernel (so they need not be
 * constants). */
kiln_status kiln_ewc_exec_Clip(EWC_EXEC_ARGS) {
    if (nin < 1 || ku_absent(&in[0])) return kiln_error(KILN_ERR_INVALID_ARGUMENT, "Clip: input is missing");
    un_params p = {};
    p.alpha = -INFINITY;
    p.beta = INFINITY;
    if (n->opset < 11) {
        p.alpha = kiln_attr_float(n, "min", -FLT_MAX);
        p.beta = kiln_attr_float(n, "max", FLT_MAX);
    } else {
        for (int i = 1; i <= 2 && i < nin; i++) {
            const kiln_cuda_tensor *b = &in[i];
            if (ku_absent(b)) continue;
            if (b->dtype != in[0].dtype || ku_numel(b) != 1)
                return kiln_error(KILN_ERR_INVALID_ARGUMENT, "Clip: %s must be one %s element (got %s with %lld)",
                                  i == 1 ? "min" : "max", kiln_dtype_name(in[0].dtype), kiln_dtype_name(b->dtype),
                                  (long long)ku_numel(b));
            if (i == 1) p.lo = b->data;
            else p.hi = b->data;
        }
    }
    return un_run(U_CLIP, in[0].dtype, in[0].data, out[0].data, ku_numel(&out[0]), p, ctx);
}

kiln_status kiln_ewc_supports_Clip(EWC_SUPPORTS_ARGS) {
    const kiln_value *x = ku_in(g, n, 0);
    if (!x) return kiln_error(KILN_ERR_INVALID_ARGUMENT, "Clip: input is missing");
    unsigned allowed = n->opset < 11 ? (unsigned)C_F : un_classes(U_CLIP);
    if (!(dtype_class(x->dtype) & allowed)) return ku_refuse_dtype(n, 0, x->dtype);
    for (int i = 1; i <= 2; i++) {
        const kiln_value *b = ku_in(g, n, i);
        if (n->opset >= 11 && b && b->dtype != x->dtype) return ku_refuse_dtype(n, i, b->dtype);
    }
    return KILN_OK;
}
