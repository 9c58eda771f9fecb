/* elementwise_binary.cu — CUDA kernels of the broadcasting binary ops (arithmetic, comparison,
 * logic, bitwise, Pow, Mod, PRelu), the variadic Min/Max/Sum/Mean and the ternary Where.
 *
 * The host first plans the broadcast as the CPU does (size-1 dims dropped, dims that are contiguous
 * for every operand merged). Most graphs then need one of the fast shapes — one flat dim where each
 * operand is dense or a scalar, or two dims [M, N] where an operand is dense, a row [N] repeated, a
 * column [M, 1] repeated or a scalar — which a flat grid-stride kernel serves with 16-byte vector
 * loads when the pointers are aligned. Anything else runs through a general kernel that decomposes
 * the output index over up to 8 dims (32-bit arithmetic when the tensor allows).
 *
 * Semantics follow src/backends/cpu/elementwise_binary.c: float16/bfloat16 compute in float32 and
 * round once; integer arithmetic wraps; integer division truncates, x / 0 and x % 0 give 0; Mod with
 * fmod=0 takes the divisor's sign; Max/Min propagate NaN; shifts by >= the width give the sign
 * fill. Pow with different base and exponent dtypes computes in double (or int64 for two integer
 * types) and converts to the base's dtype. */
#include "backends/cuda/elementwise.cuh"

#include <string.h>
#include <type_traits>

/* ---------------------------------------------------------------- ops */

enum bin_op {
    B_ADD, B_SUB, B_MUL, B_DIV, B_MAX, B_MIN, B_PRELU, B_MODF, B_MODT, B_POW, B_EQ, B_LT, B_GT, B_LE, B_GE,
    B_AND, B_OR, B_XOR, B_BAND, B_BOR, B_BXOR, B_SHL, B_SHR,
};
enum { C_F = 1, C_S = 2, C_U = 4, C_B = 8 };

static __host__ __device__ constexpr unsigned bin_classes(int op) {
    return op == B_EQ                                               ? C_F | C_S | C_U | C_B
           : op == B_AND || op == B_OR || op == B_XOR               ? C_B
           : op == B_BAND || op == B_BOR || op == B_BXOR || op == B_SHL || op == B_SHR ? C_S | C_U
           : op == B_MODT                                           ? C_F | C_S
                                                                    : C_F | C_S | C_U;
}
static __host__ __device__ constexpr bool bin_bool_out(int op) {
    return op == B_EQ || op == B_LT || op == B_GT || op == B_LE || op == B_GE;
}
static unsigned dtype_class(kiln_dtype t) {
    return ku_is_float(t) ? C_F : ku_is_sint(t) ? C_S : ku_is_uint(t) ? C_U : t == KILN_BOOL ? C_B : 0;
}

/* ---------------------------------------------------------------- device math */

/* Floor modulo in float: the result takes y's sign. */
static __device__ __forceinline__ float mod_floor_f(float x, float y) {
    float r = fmodf(x, y);
    if (r != 0.0f) return (r < 0.0f) != (y < 0.0f) ? r + y : r;
    return copysignf(0.0f, y);
}

/* x^e with wrap-around; a negative exponent gives the truncated 1 / x^-e. */
static __device__ __forceinline__ long long ipow64(long long x, long long e) {
    if (e < 0) return x == 1 ? 1 : x == -1 ? ((e & 1) ? -1 : 1) : 0;
    unsigned long long r = 1, b = (unsigned long long)x;
    for (; e; e >>= 1, b *= b)
        if (e & 1) r *= b;
    return (long long)r;
}

/* a op b in float32 (not comparisons). */
template <int OP> static __device__ __forceinline__ float bin_f(float a, float b) {
    switch (OP) {
    case B_ADD: return a + b;
    case B_SUB: return a - b;
    case B_MUL: return a * b;
    case B_DIV: return a / b;
    case B_MAX: return (a != a || a > b) ? a : b;
    case B_MIN: return (a != a || a < b) ? a : b;
    case B_PRELU: return a < 0.0f ? a * b : a;
    case B_MODF: return mod_floor_f(a, b);
    case B_MODT: return fmodf(a, b);
    case B_POW: return b == 2.0f ? a * a : powf(a, b);
    default: return a;
    }
}

/* a op b on an integer or bool type, wrapping. */
template <int OP, typename T> static __device__ __forceinline__ T bin_i(T a, T b) {
    typedef unsigned long long U;
    constexpr bool sgn = (T)-1 < (T)0;
    constexpr int bits = 8 * (int)sizeof(T);
    if constexpr (OP == B_ADD) {
        return (T)((U)a + (U)b);
    } else if constexpr (OP == B_SUB) {
        return (T)((U)a - (U)b);
    } else if constexpr (OP == B_MUL) {
        return (T)((U)a * (U)b);
    } else if constexpr (OP == B_DIV) {
        if (b == (T)0) return (T)0;
        if constexpr (sgn)
            if (b == (T)-1) return (T)(0ull - (U)a); /* INT_MIN / -1 would trap */
        return (T)(a / b);
    } else if constexpr (OP == B_MAX) {
        return a > b ? a : b;
    } else if constexpr (OP == B_MIN) {
        return a < b ? a : b;
    } else if constexpr (OP == B_PRELU) {
        if constexpr (sgn) return a < (T)0 ? (T)((U)a * (U)b) : a;
        else return a;
    } else if constexpr (OP == B_MODF || OP == B_MODT) {
        if (b == (T)0) return (T)0;
        if constexpr (sgn) {
            if (b == (T)-1) return (T)0; /* INT_MIN % -1 would trap */
            T r = (T)(a % b);
            if (OP == B_MODF && r != (T)0 && ((r < (T)0) != (b < (T)0))) r = (T)(r + b);
            return r;
        } else {
            return (T)(a % b);
        }
    } else if constexpr (OP == B_POW) {
        return (T)ipow64((long long)a, (long long)b);
    } else if constexpr (OP == B_AND) {
        return (T)((a != 0) & (b != 0));
    } else if constexpr (OP == B_OR) {
        return (T)((a != 0) | (b != 0));
    } else if constexpr (OP == B_XOR) {
        return (T)((a != 0) ^ (b != 0));
    } else if constexpr (OP == B_BAND) {
        return (T)(a & b);
    } else if constexpr (OP == B_BOR) {
        return (T)(a | b);
    } else if constexpr (OP == B_BXOR) {
        return (T)(a ^ b);
    } else {
        static_assert(OP == B_SHL || OP == B_SHR, "bin_i: not an integer op");
        /* a negative amount or one of at least the width leaves only the sign fill */
        bool out_of_range;
        if constexpr (sgn) out_of_range = (long long)b < 0 || (long long)b >= bits;
        else out_of_range = (U)b >= (U)bits;
        if constexpr (OP == B_SHL) {
            return out_of_range ? (T)0 : (T)((U)a << (int)b);
        } else {
            if (out_of_range) {
                if constexpr (sgn) return a < (T)0 ? (T)-1 : (T)0;
                else return (T)0;
            }
            return (T)(a >> (int)b);
        }
    }
}

template <int OP, typename V> static __device__ __forceinline__ bool bin_cmp(V a, V b) {
    switch (OP) {
    case B_EQ: return a == b;
    case B_LT: return a < b;
    case B_GT: return a > b;
    case B_LE: return a <= b;
    default: return a >= b;
    }
}

/* o = a op b for one element: float storage through float32, integers natively. */
template <int OP, typename T, typename O> static __device__ __forceinline__ O bin_apply(T a, T b) {
    if constexpr (ku_float_type<T>::value) {
        if constexpr (bin_bool_out(OP)) return (O)bin_cmp<OP>(ku_f32(a), ku_f32(b));
        else return ku_from_f32<O>(bin_f<OP>(ku_f32(a), ku_f32(b)));
    } else {
        if constexpr (bin_bool_out(OP)) return (O)bin_cmp<OP>(a, b);
        else return bin_i<OP, T>(a, b);
    }
}

/* ---------------------------------------------------------------- broadcast planning (host) */

#define EWC_MAX_IN 3

/* The output shape with size-1 dims dropped and dims merged where every input steps through them
 * as one contiguous run; strides[k][d] is input k's element stride on merged dim d (0 when
 * broadcast). ndim >= 1. */
typedef struct ewc_bcast {
    int nin, ndim;
    int64_t dims[KILN_MAX_DIMS];
    int64_t strides[EWC_MAX_IN][KILN_MAX_DIMS];
} ewc_bcast;

/* Plans iterating out_dims over nin inputs; each input must broadcast to out_dims. */
static kiln_status bcast_plan(ewc_bcast *b, int nin, const int *ndims, const int64_t *const *dims, int out_ndim,
                              const int64_t *out_dims) {
    int64_t full[EWC_MAX_IN][KILN_MAX_DIMS];
    for (int k = 0; k < nin; k++) {
        bool ok = ndims[k] <= out_ndim;
        for (int d = 0; ok && d < ndims[k]; d++) {
            int64_t i = dims[k][d], o = out_dims[out_ndim - ndims[k] + d];
            ok = i == o || i == 1;
        }
        if (!ok) {
            char si[128], so[128];
            return kiln_error(KILN_ERR_SHAPE, "input %d of shape %s cannot be broadcast to %s", k,
                              kiln_shape_str(si, sizeof si, ndims[k], dims[k]),
                              kiln_shape_str(so, sizeof so, out_ndim, out_dims));
        }
        kiln_broadcast_strides(ndims[k], dims[k], out_ndim, out_dims, full[k]);
    }
    memset(b, 0, sizeof *b);
    b->nin = nin;
    int64_t rd[KILN_MAX_DIMS], rs[EWC_MAX_IN][KILN_MAX_DIMS];
    int r = 0;
    for (int d = out_ndim - 1; d >= 0; d--) { /* innermost outwards */
        if (out_dims[d] == 1) continue;
        bool merge = r > 0;
        for (int k = 0; k < nin && merge; k++) merge = full[k][d] == rs[k][r - 1] * rd[r - 1];
        if (merge) {
            rd[r - 1] *= out_dims[d];
            continue;
        }
        rd[r] = out_dims[d];
        for (int k = 0; k < nin; k++) rs[k][r] = full[k][d];
        r++;
    }
    if (r == 0) {
        rd[0] = 1;
        for (int k = 0; k < nin; k++) rs[k][0] = 0;
        r = 1;
    }
    b->ndim = r;
    for (int d = 0; d < r; d++) {
        b->dims[d] = rd[r - 1 - d];
        for (int k = 0; k < nin; k++) b->strides[k][d] = rs[k][r - 1 - d];
    }
    return KILN_OK;
}

/* How an operand of the fast kernels is indexed by the flat output index i (row = N of [M, N]). */
enum { M_DENSE, M_SCALAR, M_ROW /* i % row */, M_COL /* i / row */ };

/* The fast-kernel modes of every input of plan b, or false when b needs the general kernel. */
static bool fast_modes(const ewc_bcast *b, int *modes, int64_t *row) {
    *row = 1;
    if (b->ndim == 1) {
        for (int k = 0; k < b->nin; k++) modes[k] = b->strides[k][0] ? M_DENSE : M_SCALAR;
        return true;
    }
    if (b->ndim != 2) return false;
    int64_t N = b->dims[1];
    *row = N;
    for (int k = 0; k < b->nin; k++) {
        int64_t s0 = b->strides[k][0], s1 = b->strides[k][1];
        if (s0 == N && s1 == 1) modes[k] = M_DENSE;
        else if (s0 == 0 && s1 == 1) modes[k] = M_ROW;
        else if (s0 == 1 && s1 == 0) modes[k] = M_COL;
        else if (s0 == 0 && s1 == 0) modes[k] = M_SCALAR;
        else return false;
    }
    return true;
}

/* ---------------------------------------------------------------- device indexing */

static __host__ __device__ __forceinline__ int64_t mode_index(int mode, int64_t i, int64_t row) {
    if (mode == M_DENSE) return i;
    if (mode == M_SCALAR) return 0;
    if (((uint64_t)i | (uint64_t)row) >> 32 == 0) { /* 32-bit division is several times cheaper */
        uint32_t i32 = (uint32_t)i, r32 = (uint32_t)row;
        return mode == M_ROW ? i32 % r32 : i32 / r32;
    }
    return mode == M_ROW ? i % row : i / row;
}

/* v[0..V) = the V operand elements of outputs i..i+V (i a multiple of V; for M_ROW / M_COL, row is
 * a multiple of V, so the run stays in one row; dense runs are 16-byte aligned). */
template <typename T, int V>
static __device__ __forceinline__ void mode_load(T (&v)[V], const T *p, int mode, int64_t i, int64_t row) {
    if (mode == M_DENSE || mode == M_ROW) {
        ku_load(v, p + mode_index(mode, i, row));
    } else {
        T s = p[mode_index(mode, i, row)];
#pragma unroll
        for (int k = 0; k < V; k++) v[k] = s;
    }
}

/* Per-input element offsets of output element i under plan b, with index type I (uint32_t when
 * the tensor has fewer than 2^32 elements: cheaper division). */
template <typename I, int NIN>
static __host__ __device__ __forceinline__ void bcast_offsets(I i, const ewc_bcast &b, int64_t (&off)[NIN]) {
    for (int k = 0; k < NIN; k++) off[k] = 0;
    for (int d = b.ndim - 1; d >= 0; d--) {
        I dim = (I)b.dims[d], q = i / dim, c = i - q * dim;
        for (int k = 0; k < NIN; k++) off[k] += (int64_t)c * b.strides[k][d];
        i = q;
    }
}

/* ---------------------------------------------------------------- binary kernels */

/* o[i] = a[ia] op b[ib] for i < n, o dense; ia/ib from the operands' modes (fast shapes). vec:
 * every dense/row operand and o are 16-byte aligned and row is a multiple of the vector length. */
template <typename T, typename O, int OP>
__global__ void __launch_bounds__(KU_THREADS)
bin_fast_kernel(const T *a, const T *b, O *o, int64_t n, int ma, int mb, int64_t row, bool vec) {
    int64_t stride = (int64_t)gridDim.x * blockDim.x, tid = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    int64_t done = 0;
    if (vec) {
        const int V = ku_vec<T>::n;
        int64_t nv = n / V;
        for (int64_t v = tid; v < nv; v += stride) {
            int64_t i = v * V;
            T x[V], y[V];
            O r[V];
            mode_load(x, a, ma, i, row);
            mode_load(y, b, mb, i, row);
#pragma unroll
            for (int k = 0; k < V; k++) r[k] = bin_apply<OP, T, O>(x[k], y[k]);
            ku_store(o + i, r);
        }
        done = nv * V;
    }
    for (int64_t i = done + tid; i < n; i += stride)
        o[i] = bin_apply<OP, T, O>(a[mode_index(ma, i, row)], b[mode_index(mb, i, row)]);
}

/* o[i] = a[off0(i)] op b[off1(i)] for i < n under a general broadcast plan; o dense. */
template <typename T, typename O, int OP>
__global__ void __launch_bounds__(KU_THREADS) bin_general_kernel(const T *a, const T *b, O *o, int64_t n, ewc_bcast bc) {
    int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        int64_t off[2];
        if (n <= 0xffffffffll) bcast_offsets<uint32_t, 2>((uint32_t)i, bc, off);
        else bcast_offsets<uint64_t, 2>((uint64_t)i, bc, off);
        o[i] = bin_apply<OP, T, O>(a[off[0]], b[off[1]]);
    }
}

/* One binary run: operands of a given dtype and shape, dense output of out_ndim/out_dims. */
typedef struct bin_call {
    const void *a, *b;
    void *o;
    int a_ndim, b_ndim, o_ndim;
    const int64_t *a_dims, *b_dims, *o_dims;
} bin_call;

template <typename T, int OP> static kiln_status bin_go(const bin_call &c, kiln_cuda_ctx *ctx) {
    typedef typename std::conditional<bin_bool_out(OP), uint8_t, T>::type O;
    int64_t n = kiln_numel(c.o_ndim, c.o_dims);
    if (n == 0) return KILN_OK;
    ewc_bcast plan;
    const int ndims[2] = {c.a_ndim, c.b_ndim};
    const int64_t *const dims[2] = {c.a_dims, c.b_dims};
    KILN_TRY(bcast_plan(&plan, 2, ndims, dims, c.o_ndim, c.o_dims));
    int modes[2];
    int64_t row;
    if (fast_modes(&plan, modes, &row)) {
        const int V = ku_vec<T>::n;
        bool vec = ku_aligned16(c.o);
        const void *ptr[2] = {c.a, c.b};
        for (int k = 0; k < 2; k++) {
            if (modes[k] == M_DENSE || modes[k] == M_ROW) vec = vec && ku_aligned16(ptr[k]);
            if (modes[k] == M_ROW || modes[k] == M_COL) vec = vec && row % V == 0;
        }
        int64_t items = vec ? n / V + 1 : n;
        bin_fast_kernel<T, O, OP><<<ku_blocks(items, KU_THREADS, ctx), KU_THREADS, 0, ctx->stream>>>(
            (const T *)c.a, (const T *)c.b, (O *)c.o, n, modes[0], modes[1], row, vec);
        KILN_CUDA_LAUNCH_CHECK("bin_fast_kernel");
    } else {
        bin_general_kernel<T, O, OP><<<ku_blocks(n, KU_THREADS, ctx), KU_THREADS, 0, ctx->stream>>>(
            (const T *)c.a, (const T *)c.b, (O *)c.o, n, plan);
        KILN_CUDA_LAUNCH_CHECK("bin_general_kernel");
    }
    return KILN_OK;
}

template <int OP> static kiln_status bin_launch(kiln_dtype t, const bin_call &c, kiln_cuda_ctx *ctx) {
    constexpr unsigned cl = bin_classes(OP);
    switch (t) {
    case KILN_F32: if constexpr ((cl & C_F) != 0) return bin_go<float, OP>(c, ctx); break;
    case KILN_F16: if constexpr ((cl & C_F) != 0) return bin_go<__half, OP>(c, ctx); break;
    case KILN_BF16: if constexpr ((cl & C_F) != 0) return bin_go<bf16, OP>(c, ctx); break;
    case KILN_I8: if constexpr ((cl & C_S) != 0) return bin_go<int8_t, OP>(c, ctx); break;
    case KILN_I16: if constexpr ((cl & C_S) != 0) return bin_go<int16_t, OP>(c, ctx); break;
    case KILN_I32: if constexpr ((cl & C_S) != 0) return bin_go<int32_t, OP>(c, ctx); break;
    case KILN_I64: if constexpr ((cl & C_S) != 0) return bin_go<int64_t, OP>(c, ctx); break;
    case KILN_U8: if constexpr ((cl & C_U) != 0) return bin_go<uint8_t, OP>(c, ctx); break;
    case KILN_U16: if constexpr ((cl & C_U) != 0) return bin_go<uint16_t, OP>(c, ctx); break;
    case KILN_U32: if constexpr ((cl & C_U) != 0) return bin_go<uint32_t, OP>(c, ctx); break;
    case KILN_U64: if constexpr ((cl & C_U) != 0) return bin_go<uint64_t, OP>(c, ctx); break;
    case KILN_BOOL: if constexpr ((cl & C_B) != 0) return bin_go<uint8_t, OP>(c, ctx); break;
    default: break;
    }
    return kiln_error(KILN_ERR_UNSUPPORTED, "elementwise (cuda): dtype %s is not supported by this op", kiln_dtype_name(t));
}

#define BIN_CODES(X)                                                                               \
    X(B_ADD) X(B_SUB) X(B_MUL) X(B_DIV) X(B_MAX) X(B_MIN) X(B_PRELU) X(B_MODF) X(B_MODT) X(B_POW) X(B_EQ)   \
    X(B_LT) X(B_GT) X(B_LE) X(B_GE) X(B_AND) X(B_OR) X(B_XOR) X(B_BAND) X(B_BOR) X(B_BXOR) X(B_SHL) X(B_SHR)

/* Runs run-time op code op on operands of dtype t. */
static kiln_status bin_run(int op, kiln_dtype t, const bin_call &c, kiln_cuda_ctx *ctx) {
    switch (op) {
#define BIN_CASE(code) case code: return bin_launch<code>(t, c, ctx);
        BIN_CODES(BIN_CASE)
#undef BIN_CASE
    }
    return kiln_error(KILN_ERR_INTERNAL, "elementwise (cuda): unknown binary op %d", op);
}

/* ---------------------------------------------------------------- plain binary ops */

/* The shape b takes part in broadcasting with: its own, or before opset 7 the legacy alignment
 * (broadcast=1: b's dims placed at `axis` of a's, default suffix, padded with ones; broadcast=0:
 * shapes must be equal). */
static kiln_status b_shape(const kiln_node *n, const kiln_cuda_tensor *a, const kiln_cuda_tensor *b, int *ndim,
                           int64_t *dims) {
    *ndim = b->ndim;
    memcpy(dims, b->dims, sizeof b->dims);
    if (n->opset < 1 || n->opset >= 7 || !kiln_attr_int(n, "broadcast", 0)) return KILN_OK;
    int64_t axis = kiln_node_attr(n, "axis") ? kiln_attr_int(n, "axis", 0) : a->ndim - b->ndim;
    if (axis < 0) axis += a->ndim;
    if (b->ndim > a->ndim || axis < 0 || axis + b->ndim > a->ndim)
        return kiln_error(KILN_ERR_SHAPE, "%s: cannot align input B (rank %d) with A (rank %d) at axis %lld",
                          n->op_type, b->ndim, a->ndim, (long long)axis);
    *ndim = a->ndim;
    for (int d = 0; d < a->ndim; d++) dims[d] = 1;
    for (int d = 0; d < b->ndim; d++) dims[axis + d] = b->dims[d];
    return KILN_OK;
}

/* out = in[0] op in[1]. */
static kiln_status bin_exec(int op, EWC_EXEC_ARGS) {
    if (nin < 2 || ku_absent(&in[0]) || ku_absent(&in[1]))
        return kiln_error(KILN_ERR_INVALID_ARGUMENT, "%s: needs two inputs", n->op_type);
    if (in[0].dtype != in[1].dtype)
        return kiln_error(KILN_ERR_INVALID_ARGUMENT, "%s: input dtypes differ (%s vs %s)", n->op_type,
                          kiln_dtype_name(in[0].dtype), kiln_dtype_name(in[1].dtype));
    int bnd;
    int64_t bdims[KILN_MAX_DIMS];
    KILN_TRY(b_shape(n, &in[0], &in[1], &bnd, bdims));
    bin_call c = {in[0].data, in[1].data, out[0].data, in[0].ndim, bnd, out[0].ndim, in[0].dims, bdims, out[0].dims};
    kiln_status s = bin_run(op, in[0].dtype, c, ctx);
    return s == KILN_OK ? s : kiln_error_prefix(s, "%s", n->op_type);
}

/* Both inputs present, of one dtype of the op's classes. */
static kiln_status bin_supports(int op, EWC_SUPPORTS_ARGS) {
    const kiln_value *a = ku_in(g, n, 0), *b = ku_in(g, n, 1);
    if (!a || !b) return kiln_error(KILN_ERR_INVALID_ARGUMENT, "%s: needs two inputs", n->op_type);
    if (!(dtype_class(a->dtype) & bin_classes(op))) return ku_refuse_dtype(n, 0, a->dtype);
    if (b->dtype != a->dtype) return ku_refuse_dtype(n, 1, b->dtype);
    return KILN_OK;
}

#define BIN_OP(Name, code)                                                                         \
    kiln_status kiln_ewc_exec_##Name(EWC_EXEC_ARGS) { return bin_exec(code, n, in, nin, out, nout, ctx); } \
    kiln_status kiln_ewc_supports_##Name(EWC_SUPPORTS_ARGS) { return bin_supports(code, g, n); }
BIN_OP(Add, B_ADD)
BIN_OP(Sub, B_SUB)
BIN_OP(Mul, B_MUL)
BIN_OP(Div, B_DIV)
BIN_OP(Equal, B_EQ)
BIN_OP(Less, B_LT)
BIN_OP(Greater, B_GT)
BIN_OP(LessOrEqual, B_LE)
BIN_OP(GreaterOrEqual, B_GE)
BIN_OP(And, B_AND)
BIN_OP(Or, B_OR)
BIN_OP(Xor, B_XOR)
BIN_OP(BitwiseAnd, B_BAND)
BIN_OP(BitwiseOr, B_BOR)
BIN_OP(BitwiseXor, B_BXOR)
#undef BIN_OP

/* Mod: fmod=0 (floor, divisor's sign; integers and floats) or fmod=1 (truncated, C fmod). Unsigned
 * types have one Mod. */
static kiln_status mod_code(const kiln_node *n, kiln_dtype t, int *code) {
    int64_t f = kiln_attr_int(n, "fmod", 0);
    if (f != 0 && f != 1) return kiln_error(KILN_ERR_INVALID_ARGUMENT, "Mod: fmod must be 0 or 1, not %lld", (long long)f);
    *code = f && !ku_is_uint(t) ? B_MODT : B_MODF;
    return KILN_OK;
}
kiln_status kiln_ewc_exec_Mod(EWC_EXEC_ARGS) {
    int code = 0;
    if (nin < 1 || ku_absent(&in[0])) return kiln_error(KILN_ERR_INVALID_ARGUMENT, "Mod: needs two inputs");
    KILN_TRY(mod_code(n, in[0].dtype, &code));
    return bin_exec(code, n, in, nin, out, nout, ctx);
}
kiln_status kiln_ewc_supports_Mod(EWC_SUPPORTS_ARGS) {
    const kiln_value *a = ku_in(g, n, 0);
    int code = 0;
    if (!a) return kiln_error(KILN_ERR_INVALID_ARGUMENT, "Mod: needs two inputs");
    KILN_TRY(mod_code(n, a->dtype, &code));
    return bin_supports(code, g, n);
}

/* BitShift: direction "LEFT" or "RIGHT". */
static kiln_status shift_code(const kiln_node *n, int *code) {
    const char *dir = kiln_attr_string(n, "direction", "");
    if (strcmp(dir, "LEFT") && strcmp(dir, "RIGHT"))
        return kiln_error(KILN_ERR_INVALID_ARGUMENT, "BitShift: direction must be \"LEFT\" or \"RIGHT\", not \"%s\"", dir);
    *code = !strcmp(dir, "LEFT") ? B_SHL : B_SHR;
    return KILN_OK;
}
kiln_status kiln_ewc_exec_BitShift(EWC_EXEC_ARGS) {
    int code = 0;
    KILN_TRY(shift_code(n, &code));
    return bin_exec(code, n, in, nin, out, nout, ctx);
}
kiln_status kiln_ewc_supports_BitShift(EWC_SUPPORTS_ARGS) {
    int code = 0;
    KILN_TRY(shift_code(n, &code));
    return bin_supports(code, g, n);
}

/* ---------------------------------------------------------------- PRelu */

/* PRelu: slope broadcasts to X's shape (one direction only). Before opset 7 a 1-D slope of X's
 * channel count (dim 1) applies per channel. */
kiln_status kiln_ewc_exec_PRelu(EWC_EXEC_ARGS) {
    if (nin < 2 || ku_absent(&in[0]) || ku_absent(&in[1]))
        return kiln_error(KILN_ERR_INVALID_ARGUMENT, "PRelu: needs two inputs");
    const kiln_cuda_tensor *x = &in[0], *slope = &in[1];
    int snd = slope->ndim;
    int64_t sdims[KILN_MAX_DIMS];
    memcpy(sdims, slope->dims, sizeof sdims);
    if (n->opset < 7 && slope->ndim == 1 && x->ndim >= 2 && slope->dims[0] == x->dims[1] &&
        x->dims[x->ndim - 1] != slope->dims[0]) {
        snd = x->ndim - 1;
        for (int d = 0; d < snd; d++) sdims[d] = d == 0 ? slope->dims[0] : 1;
    }
    bin_call c = {x->data, slope->data, out[0].data, x->ndim, snd, out[0].ndim, x->dims, sdims, out[0].dims};
    kiln_status s = bin_run(B_PRELU, x->dtype, c, ctx);
    return s == KILN_OK ? s : kiln_error_prefix(s, "PRelu");
}
kiln_status kiln_ewc_supports_PRelu(EWC_SUPPORTS_ARGS) { return bin_supports(B_PRELU, g, n); }

/* ---------------------------------------------------------------- variadic Min / Max / Sum / Mean */

/* out = in[0] op in[1] op ... (each step broadcast into out's shape), Mean dividing by the count.
 * One input is a copy. */
static kiln_status variadic_exec(int op, bool mean, EWC_EXEC_ARGS) {
    const kiln_cuda_tensor *o = &out[0];
    for (int k = 0; k < nin; k++)
        if (ku_absent(&in[k])) return kiln_error(KILN_ERR_INVALID_ARGUMENT, "%s: input %d is missing", n->op_type, k);
    if (nin < 1) return kiln_error(KILN_ERR_INVALID_ARGUMENT, "%s: needs at least one input", n->op_type);
    int64_t count = ku_numel(o);
    if (count == 0) return KILN_OK;
    if (nin == 1) {
        if (ku_numel(&in[0]) != count)
            return kiln_error(KILN_ERR_SHAPE, "%s: output has %lld elements, input %lld", n->op_type, (long long)count,
                              (long long)ku_numel(&in[0]));
        if (in[0].data != o->data)
            KILN_CUDA_TRY(cudaMemcpyAsync(o->data, in[0].data, (size_t)count * kiln_dtype_size(o->dtype),
                                          cudaMemcpyDeviceToDevice, ctx->stream));
    } else {
        for (int k = 1; k < nin; k++) {
            const kiln_cuda_tensor *a = k == 1 ? &in[0] : o;
            bin_call c = {a->data, in[k].data, o->data, a->ndim, in[k].ndim, o->ndim, a->dims, in[k].dims, o->dims};
            kiln_status s = bin_run(op, in[0].dtype, c, ctx);
            if (s != KILN_OK) return kiln_error_prefix(s, "%s", n->op_type);
        }
    }
    if (mean) KILN_TRY(kiln_ewc_divide(o->dtype, o->data, count, (float)nin, ctx));
    return KILN_OK;
}

static kiln_status variadic_supports(int op, bool mean, EWC_SUPPORTS_ARGS) {
    const kiln_value *a = ku_in(g, n, 0);
    if (!a) return kiln_error(KILN_ERR_INVALID_ARGUMENT, "%s: needs at least one input", n->op_type);
    unsigned allowed = mean ? (unsigned)C_F : bin_classes(op);
    if (!(dtype_class(a->dtype) & allowed)) return ku_refuse_dtype(n, 0, a->dtype);
    for (int k = 1; k < n->ninputs; k++) {
        const kiln_value *b = ku_in(g, n, k);
        if (!b) return kiln_error(KILN_ERR_INVALID_ARGUMENT, "%s: input %d is missing", n->op_type, k);
        if (b->dtype != a->dtype) return ku_refuse_dtype(n, k, b->dtype);
    }
    return KILN_OK;
}

#define VAR_OP(Name, code, mean)                                                                   \
    kiln_status kiln_ewc_exec_##Name(EWC_EXEC_ARGS) { return variadic_exec(code, mean, n, in, nin, out, nout, ctx); } \
    kiln_status kiln_ewc_supports_##Name(EWC_SUPPORTS_ARGS) { return variadic_supports(code, mean, g, n); }
VAR_OP(Min, B_MIN, false)
VAR_OP(Max, B_MAX, false)
VAR_OP(Sum, B_ADD, false)
VAR_OP(Mean, B_ADD, true)
#undef VAR_OP

/* ---------------------------------------------------------------- Pow */

/* Element i of p (dtype t, any numeric) as double / as int64 (integer and bool types). */
static __device__ __forceinline__ double load_f64(const void *p, kiln_dtype t, int64_t i) {
    switch (t) {
    case KILN_F32: return ((const float *)p)[i];
    case KILN_F16: return __half2float(((const __half *)p)[i]);
    case KILN_BF16: return __bfloat162float(((const bf16 *)p)[i]);
    case KILN_I8: return ((const int8_t *)p)[i];
    case KILN_I16: return ((const int16_t *)p)[i];
    case KILN_I32: return ((const int32_t *)p)[i];
    case KILN_I64: return (double)((const int64_t *)p)[i];
    case KILN_U16: return ((const uint16_t *)p)[i];
    case KILN_U32: return ((const uint32_t *)p)[i];
    case KILN_U64: return (double)((const uint64_t *)p)[i];
    default: return ((const uint8_t *)p)[i];
    }
}
static __device__ __forceinline__ long long load_i64(const void *p, kiln_dtype t, int64_t i) {
    switch (t) {
    case KILN_I8: return ((const int8_t *)p)[i];
    case KILN_I16: return ((const int16_t *)p)[i];
    case KILN_I32: return ((const int32_t *)p)[i];
    case KILN_I64: return ((const int64_t *)p)[i];
    case KILN_U16: return ((const uint16_t *)p)[i];
    case KILN_U32: return ((const uint32_t *)p)[i];
    case KILN_U64: return (long long)((const uint64_t *)p)[i];
    default: return ((const uint8_t *)p)[i];
    }
}

/* double -> int64 truncating toward zero; NaN and values outside [-2^63, 2^63) give INT64_MIN. */
static __device__ __forceinline__ long long f64_to_i64(double v) {
    return v >= -9223372036854775808.0 && v < 9223372036854775808.0 ? (long long)v : (long long)INT64_MIN;
}

/* Stores v (or iv when is_int) as element i of p of dtype t; integers keep the low bits. */
static __device__ __forceinline__ void store_pow(void *p, kiln_dtype t, int64_t i, double v, long long iv, bool is_int) {
    if (!is_int) iv = f64_to_i64(v);
    switch (t) {
    case KILN_F32: ((float *)p)[i] = is_int ? (float)iv : (float)v; break;
    case KILN_F16: ((__half *)p)[i] = is_int ? __ll2half_rn(iv) : __double2half(v); break;
    case KILN_BF16: ((bf16 *)p)[i] = is_int ? __ll2bfloat16_rn(iv) : __double2bfloat16(v); break;
    case KILN_I8: case KILN_U8: ((uint8_t *)p)[i] = (uint8_t)iv; break;
    case KILN_I16: case KILN_U16: ((uint16_t *)p)[i] = (uint16_t)iv; break;
    case KILN_I32: case KILN_U32: ((uint32_t *)p)[i] = (uint32_t)iv; break;
    default: ((uint64_t *)p)[i] = (uint64_t)iv; break;
    }
}

/* o = a ^ b with a, b of different dtypes (a: float or integer, b: float or integer), broadcast by
 * plan bc; int64 arithmetic when both are integers, else double; o has a's dtype. */
__global__ void __launch_bounds__(KU_THREADS)
pow_mixed_kernel(const void *a, kiln_dtype ta, const void *b, kiln_dtype tb, void *o, int64_t n, ewc_bcast bc) {
    bool ints = !(ta == KILN_F32 || ta == KILN_F16 || ta == KILN_BF16) && !(tb == KILN_F32 || tb == KILN_F16 || tb == KILN_BF16);
    int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        int64_t off[2];
        if (n <= 0xffffffffll) bcast_offsets<uint32_t, 2>((uint32_t)i, bc, off);
        else bcast_offsets<uint64_t, 2>((uint64_t)i, bc, off);
        if (ints) store_pow(o, ta, i, 0.0, ipow64(load_i64(a, ta, off[0]), load_i64(b, tb, off[1])), true);
        else store_pow(o, ta, i, pow(load_f64(a, ta, off[0]), load_f64(b, tb, off[1])), 0, false);
    }
}

static bool pow_dtype_ok(kiln_dtype t) { return ku_is_float(t) || ku_is_int(t); }

kiln_status kiln_ewc_exec_Pow(EWC_EXEC_ARGS) {
    if (nin < 2 || ku_absent(&in[0]) || ku_absent(&in[1]))
        return kiln_error(KILN_ERR_INVALID_ARGUMENT, "Pow: needs two inputs");
    if (in[0].dtype == in[1].dtype) return bin_exec(B_POW, n, in, nin, out, nout, ctx);
    const kiln_cuda_tensor *a = &in[0], *b = &in[1];
    if (!pow_dtype_ok(a->dtype) || !pow_dtype_ok(b->dtype))
        return kiln_error(KILN_ERR_UNSUPPORTED, "Pow: base %s with exponent %s is not supported", kiln_dtype_name(a->dtype),
                          kiln_dtype_name(b->dtype));
    int bnd;
    int64_t bdims[KILN_MAX_DIMS];
    KILN_TRY(b_shape(n, a, b, &bnd, bdims));
    int64_t count = ku_numel(&out[0]);
    if (count == 0) return KILN_OK;
    ewc_bcast plan;
    const int ndims[2] = {a->ndim, bnd};
    const int64_t *const dims[2] = {a->dims, bdims};
    kiln_status s = bcast_plan(&plan, 2, ndims, dims, out[0].ndim, out[0].dims);
    if (s != KILN_OK) return kiln_error_prefix(s, "Pow");
    pow_mixed_kernel<<<ku_blocks(count, KU_THREADS, ctx), KU_THREADS, 0, ctx->stream>>>(a->data, a->dtype, b->data,
                                                                                        b->dtype, out[0].data, count, plan);
    KILN_CUDA_LAUNCH_CHECK("pow_mixed_kernel");
    return KILN_OK;
}

kiln_status kiln_ewc_supports_Pow(EWC_SUPPORTS_ARGS) {
    const kiln_value *a = ku_in(g, n, 0), *b = ku_in(g, n, 1);
    if (!a || !b) return kiln_error(KILN_ERR_INVALID_ARGUMENT, "Pow: needs two inputs");
    if (!pow_dtype_ok(a->dtype)) return ku_refuse_dtype(n, 0, a->dtype);
    if (!pow_dtype_ok(b->dtype)) return ku_refuse_dtype(n, 1, b->dtype);
    return KILN_OK;
}

/* ---------------------------------------------------------------- Where */

/* o[i] = c[ic] ? x[ix] : y[iy] for i < n, fast shapes (modes as bin_fast_kernel); T moves the
 * element's bits (its size is all that matters). */
template <typename T>
__global__ void __launch_bounds__(KU_THREADS) where_fast_kernel(const uint8_t *c, const T *x, const T *y, T *o, int64_t n,
                                                                int mc, int mx, int my, int64_t row) {
    int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
        o[i] = c[mode_index(mc, i, row)] ? x[mode_index(mx, i, row)] : y[mode_index(my, i, row)];
}

/* The same under a general broadcast plan. */
template <typename T>
__global__ void __launch_bounds__(KU_THREADS) where_general_kernel(const uint8_t *c, const T *x, const T *y, T *o, int64_t n,
                                                                   ewc_bcast bc) {
    int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        int64_t off[3];
        if (n <= 0xffffffffll) bcast_offsets<uint32_t, 3>((uint32_t)i, bc, off);
        else bcast_offsets<uint64_t, 3>((uint64_t)i, bc, off);
        o[i] = c[off[0]] ? x[off[1]] : y[off[2]];
    }
}

template <typename T>
static kiln_status where_go(const kiln_cuda_tensor *in, const kiln_cuda_tensor *o, int64_t count, kiln_cuda_ctx *ctx) {
    ewc_bcast plan;
    const int ndims[3] = {in[0].ndim, in[1].ndim, in[2].ndim};
    const int64_t *const dims[3] = {in[0].dims, in[1].dims, in[2].dims};
    kiln_status s = bcast_plan(&plan, 3, ndims, dims, o->ndim, o->dims);
    if (s != KILN_OK) return kiln_error_prefix(s, "Where");
    int modes[3];
    int64_t row;
    unsigned blocks = ku_blocks(count, KU_THREADS, ctx);
    if (fast_modes(&plan, modes, &row)) {
        where_fast_kernel<T><<<blocks, KU_THREADS, 0, ctx->stream>>>((const uint8_t *)in[0].data, (const T *)in[1].data,
                                                                     (const T *)in[2].data, (T *)o->data, count, modes[0],
                                                                     modes[1], modes[2], row);
        KILN_CUDA_LAUNCH_CHECK("where_fast_kernel");
    } else {
        where_general_kernel<T><<<blocks, KU_THREADS, 0, ctx->stream>>>((const uint8_t *)in[0].data, (const T *)in[1].data,
                                                                        (const T *)in[2].data, (T *)o->data, count, plan);
        KILN_CUDA_LAUNCH_CHECK("where_general_kernel");
    }
    return KILN_OK;
}

kiln_status kiln_ewc_exec_Where(EWC_EXEC_ARGS) {
    if (nin < 3 || ku_absent(&in[0]) || ku_absent(&in[1]) || ku_absent(&in[2]))
        return kiln_error(KILN_ERR_INVALID_ARGUMENT, "Where: needs three inputs");
    if (in[0].dtype != KILN_BOOL || in[1].dtype != in[2].dtype)
        return kiln_error(KILN_ERR_INVALID_ARGUMENT, "Where: needs a bool condition and X, Y of one dtype (got %s, %s, %s)",
                          kiln_dtype_name(in[0].dtype), kiln_dtype_name(in[1].dtype), kiln_dtype_name(in[2].dtype));
    int64_t count = ku_numel(&out[0]);
    if (count == 0) return KILN_OK;
    switch (kiln_dtype_size(in[1].dtype)) {
    case 1: return where_go<uint8_t>(in, &out[0], count, ctx);
    case 2: return where_go<uint16_t>(in, &out[0], count, ctx);
    case 4: return where_go<uint32_t>(in, &out[0], count, ctx);
    case 8: return where_go<uint64_t>(in, &out[0], count, ctx);
    default:
        return kiln_error(KILN_ERR_UNSUPPORTED, "Where: inputs of dtype %s are not supported", kiln_dtype_name(in[1].dtype));
    }
}

kiln_status kiln_ewc_supports_Where(EWC_SUPPORTS_ARGS) {
    const kiln_value *c = ku_in(g, n, 0), *x = ku_in(g, n, 1), *y = ku_in(g, n, 2);
    if (!c || !x || !y) return kiln_error(KILN_ERR_INVALID_ARGUMENT, "Where: needs three inputs");
    if (c->dtype != KILN_BOOL) return ku_refuse_dtype(n, 0, c->dtype);
    if (!dtype_class(x->dtype)) return ku_refuse_dtype(n, 1, x->dtype);
    if (y->dtype != x->dtype) return ku_refuse_dtype(n, 2, y->dtype);
    return KILN_OK;
}
