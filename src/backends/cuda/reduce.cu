/* reduce.cu — CUDA kernels of the reduce family: ReduceSum/Mean/Prod/Max/Min/L1/L2/LogSum/
 * LogSumExp/SumSquare, ArgMax/ArgMin, CumSum and TopK, with the semantics of the CPU kernels
 * (src/backends/cpu/reduce.c, reduce_index.c).
 *
 * A reduction is planned on the host: size-1 dims are dropped and neighbouring dims that are both
 * reduced or both kept are merged. When the reduced dims form one run the input is viewed as
 * (outer, len, inner) and one of three kernels runs:
 *   - inner == 1, len <= 1024: one warp per row;
 *   - inner == 1, longer rows: one block per row (rows split across several blocks when there are
 *     too few rows to fill the GPU; the partial results meet in ctx->workspace and a second kernel
 *     combines them — no atomics);
 *   - inner > 1 (or tiny rows): one thread per output column, coalesced across inner, with the
 *     block's y threads (and, when needed, several blocks) splitting len;
 * any other pattern (e.g. axes 0 and 2 of a 3-D tensor) runs a general kernel, one block per output
 * decomposing reduced indices over up to 8 dims.
 * Each kernel is written once over a "policy" type (init / fold / combine / store of an
 * accumulator): float inputs accumulate in FP32 (LogSumExp as an online (max, sum) pair), integer
 * inputs in wrapping int64, ArgMax/ArgMin in (order key, index) pairs. */
#include "backends/cuda/kernel_util.cuh"
#include "ir/reduce_axes.h"

#include <math.h>
#include <string.h>

#define RED_FULL 0xffffffffu
#define RED_BLOCK 256 /* threads of the block-per-row and general kernels */
#define RED_MAX_SPLITS 1024

enum red_op { R_SUM, R_MEAN, R_PROD, R_MAX, R_MIN, R_L1, R_L2, R_LOGSUM, R_LSE, R_SUMSQ };

/* Everything a reduction kernel needs (passed by value). */
typedef struct red_args {
    const void *x;
    void *y;
    kiln_dtype xt, yt;
    int64_t nout;         /* output elements */
    int64_t count;        /* reduced elements per output */
    long long init;       /* integer path: the accumulator's identity */
    bool last;            /* ArgMax/ArgMin: select_last_index */
    int64_t outer, len, inner; /* the (outer, len, inner) view */
    int nk, nr;           /* general view: kept / reduced dims with their input strides */
    int64_t kdims[KILN_MAX_DIMS], kstr[KILN_MAX_DIMS], rdims[KILN_MAX_DIMS], rstr[KILN_MAX_DIMS];
    int splits;           /* > 1: partial accumulators go to part[out * splits + s] */
    void *part;
} red_args;

/* ---------------------------------------------------------------- element loads */

/* Element i of p (integer or bool dtype t) as int64 (unsigned types zero-extended). */
static __device__ __forceinline__ long long load_int(const void *p, kiln_dtype t, int64_t i) {
    switch (t) {
    case KILN_I8: return ((const int8_t *)p)[i];
    case KILN_I16: return ((const int16_t *)p)[i];
    case KILN_I32: return ((const int32_t *)p)[i];
    case KILN_I64: return ((const int64_t *)p)[i];
    case KILN_U16: return ((const uint16_t *)p)[i];
    case KILN_U32: return ((const uint32_t *)p)[i];
    case KILN_U64: return (long long)((const uint64_t *)p)[i];
    default: return ((const uint8_t *)p)[i]; /* U8, BOOL */
    }
}

/* Stores the low bits of v as element i of p (integer dtype t; bool stores v != 0). */
static __device__ __forceinline__ void store_int(void *p, kiln_dtype t, int64_t i, long long v) {
    switch (t) {
    case KILN_BOOL: ((uint8_t *)p)[i] = v != 0; break;
    case KILN_I8: case KILN_U8: ((uint8_t *)p)[i] = (uint8_t)v; break;
    case KILN_I16: case KILN_U16: ((uint16_t *)p)[i] = (uint16_t)v; break;
    case KILN_I32: case KILN_U32: ((uint32_t *)p)[i] = (uint32_t)v; break;
    default: ((uint64_t *)p)[i] = (uint64_t)v; break;
    }
}

/* An unsigned key of a float whose order is the numeric order; -0 == +0; NaN above +inf when
 * nan_high, below -inf otherwise. */
static __device__ __forceinline__ unsigned long long float_key(float v, bool nan_high) {
    if (v != v) return nan_high ? ~0ull : 0ull;
    if (v == 0.0f) v = 0.0f;
    unsigned b = __float_as_uint(v);
    b = (b >> 31) ? ~b : (b | 0x80000000u);
    return ((unsigned long long)b << 32) | 1ull; /* | 1: above the low NaN key 0 */
}

/* The order key of element i of p (any numeric dtype t): numeric order, exact for every integer
 * width (see float_key for floats). */
static __device__ __forceinline__ unsigned long long order_key(const void *p, kiln_dtype t, int64_t i, bool nan_high) {
    switch (t) {
    case KILN_F32: return float_key(((const float *)p)[i], nan_high);
    case KILN_F16: return float_key(__half2float(((const __half *)p)[i]), nan_high);
    case KILN_BF16: return float_key(__bfloat162float(((const bf16 *)p)[i]), nan_high);
    case KILN_I8: case KILN_I16: case KILN_I32: case KILN_I64:
        return (unsigned long long)load_int(p, t, i) ^ (1ull << 63);
    default: return (unsigned long long)load_int(p, t, i);
    }
}

/* ---------------------------------------------------------------- float policy */

static __device__ __forceinline__ float lse_ref(float m) { return m == -INFINITY ? 0.0f : m; }
/* s * f, except that sums holding only non-finite contributions (0, inf) keep them. */
static __device__ __forceinline__ float lse_rescale(float s, float f) { return (s == 0.0f || isinf(s)) ? s : s * f; }

/* Float inputs (float32/float16/bfloat16 storage T) accumulated in float32. acc.x is the running
 * value; for LogSumExp acc.x is the largest finite value seen (-inf: none) and acc.y the sum of
 * exp(x - ref(acc.x)). */
template <typename T, int OP> struct fpol {
    typedef float2 acc;
    static __device__ __forceinline__ acc init(const red_args &) {
        float v = OP == R_PROD ? 1.0f : OP == R_MAX || OP == R_LSE ? -INFINITY : OP == R_MIN ? INFINITY : 0.0f;
        return make_float2(v, 0.0f);
    }
    static __device__ __forceinline__ acc add(acc a, float x) {
        switch (OP) {
        case R_SUMSQ: case R_L2: a.x += x * x; break;
        case R_L1: a.x += fabsf(x); break;
        case R_PROD: a.x *= x; break;
        case R_MAX: a.x = (x > a.x || x != x) ? x : a.x; break;
        case R_MIN: a.x = (x < a.x || x != x) ? x : a.x; break;
        case R_LSE:
            if (isfinite(x) && x > a.x) {
                a.y = lse_rescale(a.y, expf(lse_ref(a.x) - x));
                a.x = x;
            }
            a.y += expf(x - lse_ref(a.x));
            break;
        default: a.x += x; break; /* SUM, MEAN, LOGSUM */
        }
        return a;
    }
    static __device__ __forceinline__ acc fold(const red_args &g, acc a, int64_t off, int64_t) {
        return add(a, ku_f32(((const T *)g.x)[off]));
    }
    static __device__ __forceinline__ acc comb(const red_args &, acc a, acc b) {
        switch (OP) {
        case R_PROD: a.x *= b.x; return a;
        case R_MAX: case R_MIN: return add(a, b.x);
        case R_LSE: {
            float m = fmaxf(a.x, b.x), r = lse_ref(m);
            return make_float2(m, lse_rescale(a.y, expf(lse_ref(a.x) - r)) + lse_rescale(b.y, expf(lse_ref(b.x) - r)));
        }
        default: a.x += b.x; return a;
        }
    }
    static __device__ __forceinline__ acc shfl(acc a, int m) {
        return make_float2(__shfl_xor_sync(RED_FULL, a.x, m), __shfl_xor_sync(RED_FULL, a.y, m));
    }
    static __device__ __forceinline__ void store(const red_args &g, int64_t o, acc a) {
        float v = a.x;
        switch (OP) {
        case R_MEAN: v = a.x / (float)g.count; break;
        case R_L2: v = sqrtf(a.x); break;
        case R_LOGSUM: v = logf(a.x); break;
        case R_LSE: v = logf(a.y) + lse_ref(a.x); break;
        default: break;
        }
        ((T *)g.y)[o] = ku_from_f32<T>(v);
    }
};

/* ---------------------------------------------------------------- integer policy */

/* Integer and bool inputs accumulated in int64, sums and products wrapping; U: the dtype is
 * unsigned (or bool), so comparisons and the final division are unsigned. */
template <int OP, bool U> struct ipol {
    typedef long long acc;
    static __device__ __forceinline__ acc init(const red_args &g) { return g.init; }
    static __device__ __forceinline__ acc add(acc a, long long x) {
        typedef unsigned long long W;
        switch (OP) {
        case R_SUMSQ: case R_L2: return (acc)((W)a + (W)x * (W)x);
        case R_L1: return (acc)((W)a + (!U && x < 0 ? 0ull - (W)x : (W)x));
        case R_PROD: return (acc)((W)a * (W)x);
        case R_MAX: return U ? ((W)x > (W)a ? x : a) : (x > a ? x : a);
        case R_MIN: return U ? ((W)x < (W)a ? x : a) : (x < a ? x : a);
        default: return (acc)((W)a + (W)x);
        }
    }
    static __device__ __forceinline__ acc fold(const red_args &g, acc a, int64_t off, int64_t) {
        return add(a, load_int(g.x, g.xt, off));
    }
    static __device__ __forceinline__ acc comb(const red_args &, acc a, acc b) {
        typedef unsigned long long W;
        switch (OP) {
        case R_PROD: return (acc)((W)a * (W)b);
        case R_MAX: case R_MIN: return add(a, b);
        default: return (acc)((W)a + (W)b); /* partial sums */
        }
    }
    static __device__ __forceinline__ acc shfl(acc a, int m) { return __shfl_xor_sync(RED_FULL, a, m); }
    static __device__ __forceinline__ void store(const red_args &g, int64_t o, acc a) {
        long long v = a;
        if (OP == R_L2) {
            v = (long long)sqrt(U ? (double)(unsigned long long)a : (double)a);
        } else if (OP == R_MEAN) {
            if (g.count == 0) v = 0;
            else v = U ? (long long)((unsigned long long)a / (unsigned long long)g.count) : a / g.count;
        }
        store_int(g.y, g.yt, o, v);
    }
};

/* ---------------------------------------------------------------- ArgMax / ArgMin policy */

typedef struct arg_acc {
    unsigned long long key;
    long long idx; /* -1: nothing seen */
} arg_acc;

/* The extreme (MAX: largest key) and its index along the reduced axis; ties go to the lower index,
 * or the higher one with select_last_index. NaN counts as the extreme for both. */
template <bool MAX> struct apol {
    typedef arg_acc acc;
    static __device__ __forceinline__ acc init(const red_args &) { return arg_acc{0ull, -1ll}; }
    static __device__ __forceinline__ acc comb(const red_args &g, acc a, acc b) {
        if (a.idx < 0) return b;
        if (b.idx < 0) return a;
        if (a.key != b.key) return (MAX ? a.key > b.key : a.key < b.key) ? a : b;
        return (g.last ? a.idx > b.idx : a.idx < b.idx) ? a : b;
    }
    static __device__ __forceinline__ acc fold(const red_args &g, acc a, int64_t off, int64_t j) {
        return comb(g, a, arg_acc{order_key(g.x, g.xt, off, MAX), (long long)j});
    }
    static __device__ __forceinline__ acc shfl(acc a, int m) {
        return arg_acc{__shfl_xor_sync(RED_FULL, a.key, m), __shfl_xor_sync(RED_FULL, a.idx, m)};
    }
    static __device__ __forceinline__ void store(const red_args &g, int64_t o, acc a) {
        ((int64_t *)g.y)[o] = a.idx < 0 ? 0 : a.idx;
    }
};

/* ---------------------------------------------------------------- kernels over a policy */

template <typename R> static __device__ __forceinline__ typename R::acc warp_reduce(const red_args &g, typename R::acc a) {
#pragma unroll
    for (int m = 16; m > 0; m >>= 1) a = R::comb(g, a, R::shfl(a, m));
    return a;
}

/* The combination of a over the block (valid in thread 0); sh holds 32 accumulators. */
template <typename R>
static __device__ __forceinline__ typename R::acc block_reduce(const red_args &g, typename R::acc a, typename R::acc *sh) {
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    a = warp_reduce<R>(g, a);
    if (lane == 0) sh[warp] = a;
    __syncthreads();
    if (warp == 0) {
        a = lane < nw ? sh[lane] : R::init(g);
        a = warp_reduce<R>(g, a);
    }
    __syncthreads();
    return a;
}

/* Final value of output o, or partial s of it when the reduction is split. */
template <typename R> static __device__ __forceinline__ void put(const red_args &g, int64_t o, int s, typename R::acc a) {
    if (g.splits == 1) R::store(g, o, a);
    else ((typename R::acc *)g.part)[o * g.splits + s] = a;
}

/* x is (outer, len) (inner == 1), y is (outer): one warp per row. */
template <typename R> __global__ void __launch_bounds__(RED_BLOCK) red_rows_warp(red_args g) {
    int lane = threadIdx.x & 31;
    int64_t warp = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) >> 5, nwarps = ((int64_t)gridDim.x * blockDim.x) >> 5;
    for (int64_t r = warp; r < g.outer; r += nwarps) {
        typename R::acc a = R::init(g);
        int64_t base = r * g.len;
#pragma unroll 4
        for (int64_t j = lane; j < g.len; j += 32) a = R::fold(g, a, base + j, j);
        a = warp_reduce<R>(g, a);
        if (lane == 0) R::store(g, r, a);
    }
}

/* x is (outer, len) (inner == 1), y is (outer): one block per row, or per split of a row (len in
 * g.splits chunks). */
template <typename R> __global__ void __launch_bounds__(RED_BLOCK) red_rows_block(red_args g) {
    __shared__ typename R::acc sh[32];
    int64_t chunk = (g.len + g.splits - 1) / g.splits, items = g.outer * g.splits;
    for (int64_t b = blockIdx.x; b < items; b += gridDim.x) {
        int64_t r = b / g.splits;
        int s = (int)(b - r * g.splits);
        int64_t j0 = s * chunk, j1 = j0 + chunk < g.len ? j0 + chunk : g.len, base = r * g.len;
        typename R::acc a = R::init(g);
#pragma unroll 4
        for (int64_t j = j0 + threadIdx.x; j < j1; j += blockDim.x) a = R::fold(g, a, base + j, j);
        a = block_reduce<R>(g, a, sh);
        if (threadIdx.x == 0) put<R>(g, r, s, a);
    }
}

/* x is (outer, len, inner), y is (outer, inner): thread x of the block owns output column
 * q = o * inner + i, its blockDim.y threads (and g.splits blocks) split len. blockDim.x * blockDim.y
 * == RED_BLOCK. */
template <typename R> __global__ void __launch_bounds__(RED_BLOCK) red_cols(red_args g) {
    __shared__ typename R::acc sh[RED_BLOCK];
    int tx = threadIdx.x, ty = threadIdx.y, TX = blockDim.x, BY = blockDim.y;
    int64_t nq = g.outer * g.inner, tiles = (nq + TX - 1) / TX, items = tiles * g.splits;
    int64_t chunk = (g.len + g.splits - 1) / g.splits;
    for (int64_t b = blockIdx.x; b < items; b += gridDim.x) {
        int64_t tile = b / g.splits;
        int s = (int)(b - tile * g.splits);
        int64_t q = tile * TX + tx;
        typename R::acc a = R::init(g);
        if (q < nq) {
            int64_t o = q / g.inner, i = q - o * g.inner, base = o * g.len * g.inner + i;
            int64_t j0 = s * chunk, j1 = j0 + chunk < g.len ? j0 + chunk : g.len;
#pragma unroll 4
            for (int64_t j = j0 + ty; j < j1; j += BY) a = R::fold(g, a, base + j * g.inner, j);
        }
        if (BY > 1) {
            sh[ty * TX + tx] = a;
            __syncthreads();
            if (ty == 0)
                for (int y = 1; y < BY; y++) a = R::comb(g, a, sh[y * TX + tx]);
            __syncthreads();
        }
        if (ty == 0 && q < nq) put<R>(g, q, s, a);
    }
}

/* Any pattern of reduced dims: one block per output (or per split of its reduced elements); the
 * output index decomposes over the kept dims, the reduced index over the reduced dims. */
template <typename R> __global__ void __launch_bounds__(RED_BLOCK) red_general(red_args g) {
    __shared__ typename R::acc sh[32];
    int64_t chunk = (g.count + g.splits - 1) / g.splits, items = g.nout * g.splits;
    for (int64_t b = blockIdx.x; b < items; b += gridDim.x) {
        int64_t o = b / g.splits, rem = o, koff = 0;
        int s = (int)(b - o * g.splits);
        for (int d = g.nk - 1; d >= 0; d--) {
            int64_t q = rem / g.kdims[d];
            koff += (rem - q * g.kdims[d]) * g.kstr[d];
            rem = q;
        }
        int64_t j0 = s * chunk, j1 = j0 + chunk < g.count ? j0 + chunk : g.count;
        typename R::acc a = R::init(g);
        for (int64_t j = j0 + threadIdx.x; j < j1; j += blockDim.x) {
            int64_t r = j, off = koff;
            for (int d = g.nr - 1; d >= 0; d--) {
                int64_t q = r / g.rdims[d];
                off += (r - q * g.rdims[d]) * g.rstr[d];
                r = q;
            }
            a = R::fold(g, a, off, j);
        }
        a = block_reduce<R>(g, a, sh);
        if (threadIdx.x == 0) put<R>(g, o, s, a);
    }
}

/* Combines the g.splits partials of every output and stores the result. */
template <typename R> __global__ void __launch_bounds__(RED_BLOCK) red_finish(red_args g) {
    const typename R::acc *part = (const typename R::acc *)g.part;
    int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t o = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; o < g.nout; o += stride) {
        typename R::acc a = part[o * g.splits];
        for (int s = 1; s < g.splits; s++) a = R::comb(g, a, part[o * g.splits + s]);
        R::store(g, o, a);
    }
}

/* ---------------------------------------------------------------- host: planning and launch */

/* Which kernel a planned reduction runs. */
enum { K_ROWS_WARP, K_ROWS_BLOCK, K_COLS, K_GENERAL };

typedef struct red_plan {
    int kind;
    int by;     /* K_COLS: blockDim.y */
    int64_t units; /* blocks' worth of independent work before splitting */
    int64_t work;  /* elements each unit reduces */
} red_plan;

/* Fills g's views from x's shape and the reduced-dim flags, and picks the kernel. */
static void red_plan_build(int rank, const int64_t *dims, const bool *reduce, const int64_t *strides, red_args *g,
                           red_plan *p) {
    int nd = 0;
    int64_t md[KILN_MAX_DIMS], ms[KILN_MAX_DIMS];
    bool mr[KILN_MAX_DIMS];
    for (int d = 0; d < rank; d++) {
        if (dims[d] == 1) continue;
        if (nd > 0 && mr[nd - 1] == reduce[d]) { /* row-major: the outer dim's stride grows */
            md[nd - 1] *= dims[d];
            ms[nd - 1] = strides[d];
        } else {
            md[nd] = dims[d];
            ms[nd] = strides[d];
            mr[nd++] = reduce[d];
        }
    }
    g->nk = g->nr = 0;
    for (int d = 0; d < nd; d++) {
        if (mr[d]) {
            g->rdims[g->nr] = md[d];
            g->rstr[g->nr++] = ms[d];
        } else {
            g->kdims[g->nk] = md[d];
            g->kstr[g->nk++] = ms[d];
        }
    }
    /* (outer, len, inner) when the reduced dims are one run (or none) */
    int first_r = -1, nruns = 0;
    for (int d = 0; d < nd; d++)
        if (mr[d]) {
            if (first_r < 0) first_r = d;
            nruns++;
        }
    if (nruns <= 1) {
        int r = first_r < 0 ? nd : first_r;
        g->outer = 1;
        for (int d = 0; d < r; d++) g->outer *= md[d];
        g->len = first_r < 0 ? 1 : md[first_r];
        g->inner = 1;
        for (int d = (first_r < 0 ? nd : first_r + 1); d < nd; d++) g->inner *= md[d];
        if (g->inner == 1 && g->len >= 32) {
            p->kind = g->len <= 1024 ? K_ROWS_WARP : K_ROWS_BLOCK;
            p->units = g->outer;
            p->work = g->len;
        } else {
            p->kind = K_COLS;
            p->by = g->len >= 8 ? 8 : g->len >= 4 ? 4 : g->len >= 2 ? 2 : 1;
            p->units = (g->outer * g->inner + RED_BLOCK / p->by - 1) / (RED_BLOCK / p->by);
            p->work = g->len;
        }
    } else {
        p->kind = K_GENERAL;
        p->units = g->nout;
        p->work = g->count;
    }
}

/* Splits for a reduction of `units` independent blocks of `work` elements each: more than one only
 * when the units cannot fill the GPU and each split keeps >= 4096 elements, bounded by the
 * workspace (acc_size bytes per partial). */
static int red_splits(const red_plan *p, int64_t nout, size_t acc_size, const kiln_cuda_ctx *ctx) {
    if (p->kind == K_ROWS_WARP) return 1;
    int64_t sms = ctx->sm_count > 0 ? ctx->sm_count : 1;
    if (p->units >= 2 * sms || p->work < 8192) return 1;
    int64_t s = (4 * sms + p->units - 1) / p->units, by_work = p->work / 4096;
    if (s > by_work) s = by_work;
    if (s > RED_MAX_SPLITS) s = RED_MAX_SPLITS;
    int64_t room = nout > 0 ? (int64_t)(ctx->workspace_bytes / ((size_t)nout * acc_size)) : 0;
    if (s > room) s = room;
    return s < 2 ? 1 : (int)s;
}

/* Runs a planned reduction with policy R. */
template <typename R> static kiln_status red_launch(red_args g, const red_plan &p, kiln_cuda_ctx *ctx) {
    g.splits = red_splits(&p, g.nout, sizeof(typename R::acc), ctx);
    g.part = ctx->workspace;
    int64_t sms = ctx->sm_count > 0 ? ctx->sm_count : 1, cap = sms * (2048 / RED_BLOCK);
    int64_t blocks;
    switch (p.kind) {
    case K_ROWS_WARP:
        blocks = (g.outer * 32 + RED_BLOCK - 1) / RED_BLOCK;
        red_rows_warp<R><<<(unsigned)(blocks < cap ? blocks : cap), RED_BLOCK, 0, ctx->stream>>>(g);
        KILN_CUDA_LAUNCH_CHECK("red_rows_warp");
        break;
    case K_ROWS_BLOCK:
        blocks = g.outer * g.splits;
        red_rows_block<R><<<(unsigned)(blocks < cap ? blocks : cap), RED_BLOCK, 0, ctx->stream>>>(g);
        KILN_CUDA_LAUNCH_CHECK("red_rows_block");
        break;
    case K_COLS:
        blocks = p.units * g.splits;
        red_cols<R><<<(unsigned)(blocks < cap ? blocks : cap), dim3(RED_BLOCK / p.by, p.by), 0, ctx->stream>>>(g);
        KILN_CUDA_LAUNCH_CHECK("red_cols");
        break;
    default:
        blocks = g.nout * g.splits;
        red_general<R><<<(unsigned)(blocks < cap ? blocks : cap), RED_BLOCK, 0, ctx->stream>>>(g);
        KILN_CUDA_LAUNCH_CHECK("red_general");
        break;
    }
    if (g.splits > 1) {
        red_finish<R><<<ku_blocks(g.nout, RED_BLOCK, ctx), RED_BLOCK, 0, ctx->stream>>>(g);
        KILN_CUDA_LAUNCH_CHECK("red_finish");
    }
    return KILN_OK;
}

/* ---------------------------------------------------------------- Reduce* ops */

static bool red_float_only(int op) { return op == R_LOGSUM || op == R_LSE; }
static bool red_bool_ok(int op) { return op == R_MAX || op == R_MIN; }

static kiln_status red_dtype_check(const kiln_node *n, int op, kiln_dtype t) {
    bool ok = ku_is_float(t) || (!red_float_only(op) && (ku_is_int(t) || (t == KILN_BOOL && red_bool_ok(op))));
    return ok ? KILN_OK : ku_refuse_dtype(n, 0, t);
}

/* The first opset where the op takes its axes as input 1 instead of an attribute. */
static int axes_input_since(int op) { return op == R_SUM ? 13 : 18; }

/* The reduced-dim flags of a rank-`rank` input: axes from input 1 (opset >= since, a host value) or
 * the attribute; empty axes mean all dims, or none with noop_with_empty_axes (each element is then
 * reduced alone, so ReduceSumSquare still squares). */
static kiln_status red_axes(const kiln_node *n, const kiln_cuda_tensor *in, int nin, int rank, int since, bool *reduce) {
    int64_t axes[KILN_MAX_DIMS + 1];
    int count = 0;
    if (n->opset >= since) {
        if (nin > 1 && !ku_absent(&in[1])) KILN_TRY(ku_host_ints(n, &in[1], "axes", axes, KILN_MAX_DIMS + 1, &count));
    } else {
        const int64_t *a = kiln_attr_ints(n, "axes", &count);
        if (count > KILN_MAX_DIMS)
            return kiln_error(KILN_ERR_INVALID_ARGUMENT, "%s: %d axes for a tensor of rank %d", n->op_type, count, rank);
        if (count) memcpy(axes, a, (size_t)count * sizeof *a);
    }
    return kiln_reduce_axes_mask(n, axes, count, rank, reduce);
}

/* The integer path's identity (what an empty reduction gives). */
static long long int_identity(int op, kiln_dtype t) {
    int bits = (int)kiln_dtype_size(t) * 8;
    bool uns = ku_is_uint(t) || t == KILN_BOOL;
    switch (op) {
    case R_PROD: return 1;
    case R_MAX:
        if (uns) return 0;
        return bits == 64 ? INT64_MIN : -(1ll << (bits - 1));
    case R_MIN:
        if (t == KILN_BOOL) return 1;
        if (uns) return bits == 64 ? (long long)UINT64_MAX : (1ll << bits) - 1;
        return bits == 64 ? INT64_MAX : (1ll << (bits - 1)) - 1;
    default: return 0;
    }
}

template <int OP> static kiln_status red_float(kiln_dtype t, const red_args &g, const red_plan &p, kiln_cuda_ctx *ctx) {
    switch (t) {
    case KILN_F32: return red_launch<fpol<float, OP>>(g, p, ctx);
    case KILN_F16: return red_launch<fpol<__half, OP>>(g, p, ctx);
    default: return red_launch<fpol<bf16, OP>>(g, p, ctx);
    }
}

template <int OP> static kiln_status red_typed(kiln_dtype t, const red_args &g, const red_plan &p, kiln_cuda_ctx *ctx) {
    if (ku_is_float(t)) return red_float<OP>(t, g, p, ctx);
    if constexpr (OP == R_LOGSUM || OP == R_LSE) {
        return kiln_error(KILN_ERR_UNSUPPORTED, "reduce (cuda): dtype %s", kiln_dtype_name(t));
    } else {
        if (ku_is_uint(t) || t == KILN_BOOL) return red_launch<ipol<OP, true>>(g, p, ctx);
        return red_launch<ipol<OP, false>>(g, p, ctx);
    }
}

/* The whole Reduce* kernel for op. */
static kiln_status reduce_exec(int op, const kiln_node *n, const kiln_cuda_tensor *in, int nin, const kiln_cuda_tensor *out,
                               kiln_cuda_ctx *ctx) {
    if (nin < 1 || ku_absent(&in[0])) return kiln_error(KILN_ERR_INVALID_ARGUMENT, "%s: input 'data' is missing", n->op_type);
    const kiln_cuda_tensor *x = &in[0];
    KILN_TRY(red_dtype_check(n, op, x->dtype));
    bool reduce[KILN_MAX_DIMS];
    KILN_TRY(red_axes(n, in, nin, x->ndim, axes_input_since(op), reduce));
    red_args g;
    memset(&g, 0, sizeof g);
    g.x = x->data;
    g.y = out[0].data;
    g.xt = x->dtype;
    g.yt = out[0].dtype;
    g.nout = ku_numel(&out[0]);
    g.count = 1;
    for (int d = 0; d < x->ndim; d++)
        if (reduce[d]) g.count *= x->dims[d];
    if (g.nout * g.count != ku_numel(x) && ku_numel(x) != 0)
        return kiln_error(KILN_ERR_SHAPE, "%s: output of %lld elements does not match the reduction", n->op_type,
                          (long long)g.nout);
    if (g.nout == 0) return KILN_OK;
    if (!ku_is_float(x->dtype)) g.init = int_identity(op, x->dtype);
    int64_t strides[KILN_MAX_DIMS];
    kiln_strides(x->ndim, x->dims, strides);
    red_plan p;
    red_plan_build(x->ndim, x->dims, reduce, strides, &g, &p);
    kiln_status s;
    switch (op) {
    case R_SUM: s = red_typed<R_SUM>(x->dtype, g, p, ctx); break;
    case R_MEAN: s = red_typed<R_MEAN>(x->dtype, g, p, ctx); break;
    case R_PROD: s = red_typed<R_PROD>(x->dtype, g, p, ctx); break;
    case R_MAX: s = red_typed<R_MAX>(x->dtype, g, p, ctx); break;
    case R_MIN: s = red_typed<R_MIN>(x->dtype, g, p, ctx); break;
    case R_L1: s = red_typed<R_L1>(x->dtype, g, p, ctx); break;
    case R_L2: s = red_typed<R_L2>(x->dtype, g, p, ctx); break;
    case R_LOGSUM: s = red_typed<R_LOGSUM>(x->dtype, g, p, ctx); break;
    case R_LSE: s = red_typed<R_LSE>(x->dtype, g, p, ctx); break;
    default: s = red_typed<R_SUMSQ>(x->dtype, g, p, ctx); break;
    }
    return s == KILN_OK ? s : kiln_error_prefix(s, "%s", n->op_type);
}

static kiln_status reduce_supports(int op, const kiln_graph *g, const kiln_node *n) {
    const kiln_value *x = ku_in(g, n, 0);
    if (!x) return kiln_error(KILN_ERR_INVALID_ARGUMENT, "%s: input 'data' is missing", n->op_type);
    KILN_TRY(red_dtype_check(n, op, x->dtype));
    if (n->opset >= axes_input_since(op)) KILN_TRY(ku_need_host(g, n, 1, "axes"));
    return KILN_OK;
}

#define REDUCE_OP(fn, op)                                                                          \
    static kiln_status fn##_exec(const kiln_node *n, const kiln_cuda_tensor *in, int nin, const kiln_cuda_tensor *out, \
                                 int nout, kiln_cuda_ctx *ctx) {                                   \
        return reduce_exec(op, n, in, nin, out, ctx);                                              \
    }                                                                                              \
    static kiln_status fn##_supports(const kiln_graph *g, const kiln_node *n) { return reduce_supports(op, g, n); }
REDUCE_OP(reduce_sum, R_SUM)
REDUCE_OP(reduce_mean, R_MEAN)
REDUCE_OP(reduce_prod, R_PROD)
REDUCE_OP(reduce_max, R_MAX)
REDUCE_OP(reduce_min, R_MIN)
REDUCE_OP(reduce_l1, R_L1)
REDUCE_OP(reduce_l2, R_L2)
REDUCE_OP(reduce_log_sum, R_LOGSUM)
REDUCE_OP(reduce_log_sum_exp, R_LSE)
REDUCE_OP(reduce_sum_square, R_SUMSQ)
#undef REDUCE_OP

/* ---------------------------------------------------------------- ArgMax / ArgMin */

static bool numeric_dtype(kiln_dtype t) { return ku_is_float(t) || ku_is_int(t) || t == KILN_BOOL; }

/* ArgMax / ArgMin: the int64 index of the first (or, with select_last_index, last) extreme along
 * `axis`; output (outer, inner) whatever keepdims says about its shape. */
static kiln_status arg_exec(bool is_max, const kiln_node *n, const kiln_cuda_tensor *in, int nin,
                            const kiln_cuda_tensor *out, kiln_cuda_ctx *ctx) {
    if (nin < 1 || ku_absent(&in[0])) return kiln_error(KILN_ERR_INVALID_ARGUMENT, "%s: input 'data' is missing", n->op_type);
    const kiln_cuda_tensor *x = &in[0];
    if (!numeric_dtype(x->dtype)) return ku_refuse_dtype(n, 0, x->dtype);
    int axis;
    if (kiln_axis_normalize(kiln_attr_int(n, "axis", 0), x->ndim, &axis) != KILN_OK)
        return kiln_error(KILN_ERR_INVALID_ARGUMENT, "%s: axis %lld is out of range for an input of rank %d", n->op_type,
                          (long long)kiln_attr_int(n, "axis", 0), x->ndim);
    red_args g;
    memset(&g, 0, sizeof g);
    int64_t outer, len, inner;
    ku_split_axis(x, axis, &outer, &len, &inner);
    if (len == 0 && outer * inner > 0)
        return kiln_error(KILN_ERR_INVALID_ARGUMENT, "%s: axis %d is empty, it has no extreme value", n->op_type, axis);
    if (outer * inner == 0) return KILN_OK;
    g.x = x->data;
    g.y = out[0].data;
    g.xt = x->dtype;
    g.yt = KILN_I64;
    g.nout = outer * inner;
    g.count = len;
    g.last = n->opset >= 12 && kiln_attr_int(n, "select_last_index", 0) != 0;
    bool reduce[3] = {false, true, false};
    int64_t dims[3] = {outer, len, inner}, strides[3] = {len * inner, inner, 1};
    red_plan p;
    red_plan_build(3, dims, reduce, strides, &g, &p);
    kiln_status s = is_max ? red_launch<apol<true>>(g, p, ctx) : red_launch<apol<false>>(g, p, ctx);
    return s == KILN_OK ? s : kiln_error_prefix(s, "%s", n->op_type);
}

static kiln_status argmax_exec(const kiln_node *n, const kiln_cuda_tensor *in, int nin, const kiln_cuda_tensor *out,
                               int nout, kiln_cuda_ctx *ctx) {
    return arg_exec(true, n, in, nin, out, ctx);
}
static kiln_status argmin_exec(const kiln_node *n, const kiln_cuda_tensor *in, int nin, const kiln_cuda_tensor *out,
                               int nout, kiln_cuda_ctx *ctx) {
    return arg_exec(false, n, in, nin, out, ctx);
}

/* Input 0 of a numeric dtype (ArgMax, ArgMin, TopK). */
static kiln_status numeric_supports(const kiln_graph *g, const kiln_node *n) {
    const kiln_value *x = ku_in(g, n, 0);
    if (!x) return kiln_error(KILN_ERR_INVALID_ARGUMENT, "%s: input 0 is missing", n->op_type);
    return numeric_dtype(x->dtype) ? KILN_OK : ku_refuse_dtype(n, 0, x->dtype);
}

/* ---------------------------------------------------------------- TopK */

typedef struct topk_args {
    const void *x;
    kiln_dtype xt;
    void *vals;        /* (outer, k, inner) of x's dtype, or NULL */
    int64_t *idx;      /* (outer, k, inner) int64, or NULL */
    int64_t outer, len, inner, k;
    bool largest;
} topk_args;

/* Whether (ka, ia) comes before (kb, ib) in TopK's output order: keys descending (largest) or
 * ascending, ties by lower index; ib < 0 is "nothing", after everything. */
static __device__ __forceinline__ bool topk_before(unsigned long long ka, long long ia, unsigned long long kb, long long ib,
                                                   bool largest) {
    if (ib < 0) return ia >= 0;
    if (ia < 0) return false;
    if (ka != kb) return largest ? ka > kb : ka < kb;
    return ia < ib;
}

/* x is (outer, len, inner); vals/idx are (outer, k, inner): one block per (outer, inner) row
 * selects its k best elements one after another, each round a block-wide search for the best
 * element that comes after the previous pick. T moves values by their bits. */
template <typename T> __global__ void __launch_bounds__(RED_BLOCK) topk_kernel(topk_args a) {
    __shared__ unsigned long long sk[32];
    __shared__ long long si[32];
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    int64_t rows = a.outer * a.inner;
    for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
        int64_t o = row / a.inner, i = row - o * a.inner, base = o * a.len * a.inner + i;
        unsigned long long pk = 0;
        long long pi = -1; /* the previous pick; -1: none yet */
        for (int64_t j = 0; j < a.k; j++) {
            unsigned long long bk = 0;
            long long bi = -1;
            for (int64_t e = threadIdx.x; e < a.len; e += blockDim.x) {
                unsigned long long key = order_key(a.x, a.xt, base + e * a.inner, true);
                if (pi >= 0 && !topk_before(pk, pi, key, e, a.largest)) continue; /* already picked */
                if (topk_before(key, e, bk, bi, a.largest)) {
                    bk = key;
                    bi = e;
                }
            }
            for (int m = 16; m > 0; m >>= 1) {
                unsigned long long ok = __shfl_xor_sync(RED_FULL, bk, m);
                long long oi = __shfl_xor_sync(RED_FULL, bi, m);
                if (topk_before(ok, oi, bk, bi, a.largest)) {
                    bk = ok;
                    bi = oi;
                }
            }
            if (lane == 0) {
                sk[warp] = bk;
                si[warp] = bi;
            }
            __syncthreads();
            bk = sk[0];
            bi = si[0];
            for (int w = 1; w < nw; w++)
                if (topk_before(sk[w], si[w], bk, bi, a.largest)) {
                    bk = sk[w];
                    bi = si[w];
                }
            __syncthreads();
            pk = bk;
            pi = bi;
            if (threadIdx.x == 0) {
                int64_t dst = (o * a.k + j) * a.inner + i;
                if (a.vals) ((T *)a.vals)[dst] = ((const T *)a.x)[base + bi * a.inner];
                if (a.idx) a.idx[dst] = bi;
            }
        }
    }
}

/* TopK: the K largest (or smallest) values along axis and their int64 indices, sorted, ties to the
 * lower index (NaN above +inf). K is the output's extent along axis. */
static kiln_status topk_exec(const kiln_node *n, const kiln_cuda_tensor *in, int nin, const kiln_cuda_tensor *out, int nout,
                             kiln_cuda_ctx *ctx) {
    if (nin < 1 || ku_absent(&in[0])) return kiln_error(KILN_ERR_INVALID_ARGUMENT, "TopK: input 'X' is missing");
    const kiln_cuda_tensor *x = &in[0];
    if (!numeric_dtype(x->dtype)) return ku_refuse_dtype(n, 0, x->dtype);
    int axis;
    if (kiln_axis_normalize(kiln_attr_int(n, "axis", -1), x->ndim, &axis) != KILN_OK)
        return kiln_error(KILN_ERR_INVALID_ARGUMENT, "TopK: axis %lld is out of range for an input of rank %d",
                          (long long)kiln_attr_int(n, "axis", -1), x->ndim);
    const kiln_cuda_tensor *vals = nout > 0 && !ku_absent(&out[0]) ? &out[0] : NULL;
    const kiln_cuda_tensor *idx = nout > 1 && !ku_absent(&out[1]) ? &out[1] : NULL;
    const kiln_cuda_tensor *shape = vals ? vals : idx;
    if (!shape) return KILN_OK;
    topk_args a;
    ku_split_axis(x, axis, &a.outer, &a.len, &a.inner);
    a.k = shape->ndim == x->ndim ? shape->dims[axis] : -1;
    if (a.k < 0 || a.k > a.len)
        return kiln_error(KILN_ERR_INVALID_ARGUMENT, "TopK: K = %lld is outside [0, %lld] (the size of axis %d)",
                          (long long)a.k, (long long)a.len, axis);
    if (a.k == 0 || a.outer * a.inner == 0) return KILN_OK;
    a.x = x->data;
    a.xt = x->dtype;
    a.vals = vals ? vals->data : NULL;
    a.idx = idx ? (int64_t *)idx->data : NULL;
    a.largest = n->opset < 11 || kiln_attr_int(n, "largest", 1) != 0;
    int threads = a.len > 128 ? RED_BLOCK : 32;
    unsigned blocks = ku_blocks(a.outer * a.inner * threads, threads, ctx, 2);
    switch (kiln_dtype_size(x->dtype)) {
    case 1: topk_kernel<uint8_t><<<blocks, threads, 0, ctx->stream>>>(a); break;
    case 2: topk_kernel<uint16_t><<<blocks, threads, 0, ctx->stream>>>(a); break;
    case 4: topk_kernel<uint32_t><<<blocks, threads, 0, ctx->stream>>>(a); break;
    default: topk_kernel<uint64_t><<<blocks, threads, 0, ctx->stream>>>(a); break;
    }
    KILN_CUDA_LAUNCH_CHECK("topk_kernel");
    return KILN_OK;
}

/* ---------------------------------------------------------------- CumSum */

typedef struct scan_args {
    const void *x;
    void *y;
    kiln_dtype t;
    int64_t outer, len, inner;
    bool exclusive, reverse;
} scan_args;

/* Element i of x (dtype t) as the scan's accumulator type: float for float dtypes, int64 else. */
template <typename A> static __device__ __forceinline__ A scan_load(const void *p, kiln_dtype t, int64_t i);
template <> __device__ __forceinline__ float scan_load<float>(const void *p, kiln_dtype t, int64_t i) {
    return t == KILN_F32 ? ((const float *)p)[i] : t == KILN_F16 ? __half2float(((const __half *)p)[i])
                                                                 : __bfloat162float(((const bf16 *)p)[i]);
}
template <> __device__ __forceinline__ long long scan_load<long long>(const void *p, kiln_dtype t, int64_t i) {
    return load_int(p, t, i);
}
static __device__ __forceinline__ void scan_store(void *p, kiln_dtype t, int64_t i, float v) {
    if (t == KILN_F32) ((float *)p)[i] = v;
    else if (t == KILN_F16) ((__half *)p)[i] = __float2half_rn(v);
    else ((bf16 *)p)[i] = __float2bfloat16_rn(v);
}
static __device__ __forceinline__ void scan_store(void *p, kiln_dtype t, int64_t i, long long v) { store_int(p, t, i, v); }
static __device__ __forceinline__ float scan_add(float a, float b) { return a + b; }
static __device__ __forceinline__ long long scan_add(long long a, long long b) {
    return (long long)((unsigned long long)a + (unsigned long long)b);
}

/* x, y are (outer, len, inner): one thread per (outer, inner) column runs along len. */
template <typename A> __global__ void __launch_bounds__(KU_THREADS) scan_cols_kernel(scan_args a) {
    int64_t cols = a.outer * a.inner, stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t c = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; c < cols; c += stride) {
        int64_t o = c / a.inner, i = c - o * a.inner, base = o * a.len * a.inner + i;
        A acc = A();
        for (int64_t k = 0; k < a.len; k++) {
            int64_t off = base + (a.reverse ? a.len - 1 - k : k) * a.inner;
            A v = scan_load<A>(a.x, a.t, off), next = scan_add(acc, v);
            scan_store(a.y, a.t, off, a.exclusive ? acc : next);
            acc = next;
        }
    }
}

/* x, y are (outer, len) (inner == 1): one block per row scans it in chunks of blockDim.x elements
 * (warp scans by shuffles, then the warps' totals), carrying the running total across chunks. */
template <typename A> __global__ void __launch_bounds__(KU_THREADS) scan_rows_kernel(scan_args a) {
    __shared__ A wsum[32];
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    for (int64_t r = blockIdx.x; r < a.outer; r += gridDim.x) {
        A carry = A();
        for (int64_t c0 = 0; c0 < a.len; c0 += blockDim.x) {
            int64_t k = c0 + threadIdx.x, off = r * a.len + (a.reverse ? a.len - 1 - k : k);
            A v = k < a.len ? scan_load<A>(a.x, a.t, off) : A();
            A incl = v; /* inclusive scan within the warp */
            for (int d = 1; d < 32; d <<= 1) {
                A up = __shfl_up_sync(RED_FULL, incl, d);
                if (lane >= d) incl = scan_add(incl, up);
            }
            A excl = __shfl_up_sync(RED_FULL, incl, 1);
            if (lane == 0) excl = A();
            if (lane == 31) wsum[warp] = incl;
            __syncthreads();
            A before = carry, total = carry; /* carry + the totals of the warps before this one */
            for (int w = 0; w < nw; w++) {
                if (w < warp) before = scan_add(before, wsum[w]);
                total = scan_add(total, wsum[w]);
            }
            __syncthreads();
            if (k < a.len) scan_store(a.y, a.t, off, scan_add(before, a.exclusive ? excl : incl));
            carry = total;
        }
    }
}

/* CumSum: running sum along the axis given by input 1 (a host int32/int64 scalar); `exclusive`
 * leaves the current element out, `reverse` runs from the end. */
static kiln_status cumsum_exec(const kiln_node *n, const kiln_cuda_tensor *in, int nin, const kiln_cuda_tensor *out,
                               int nout, kiln_cuda_ctx *ctx) {
    if (nin < 2 || ku_absent(&in[0]) || ku_absent(&in[1]))
        return kiln_error(KILN_ERR_INVALID_ARGUMENT, "CumSum: inputs 'x' and 'axis' are required");
    const kiln_cuda_tensor *x = &in[0];
    if (!ku_is_float(x->dtype) && !ku_is_int(x->dtype)) return ku_refuse_dtype(n, 0, x->dtype);
    int64_t av[1];
    int cnt;
    KILN_TRY(ku_host_ints(n, &in[1], "axis", av, 1, &cnt));
    int axis;
    if (cnt != 1 || kiln_axis_normalize(av[0], x->ndim, &axis) != KILN_OK)
        return kiln_error(KILN_ERR_INVALID_ARGUMENT, "CumSum: 'axis' must be one value in [-%d, %d)", x->ndim, x->ndim);
    scan_args a;
    ku_split_axis(x, axis, &a.outer, &a.len, &a.inner);
    if (ku_numel(x) == 0) return KILN_OK;
    a.x = x->data;
    a.y = out[0].data;
    a.t = x->dtype;
    a.exclusive = kiln_attr_int(n, "exclusive", 0) != 0;
    a.reverse = kiln_attr_int(n, "reverse", 0) != 0;
    bool fp = ku_is_float(x->dtype);
    if (a.inner > 1 || a.len <= 64) {
        unsigned blocks = ku_blocks(a.outer * a.inner, KU_THREADS, ctx);
        if (fp) scan_cols_kernel<float><<<blocks, KU_THREADS, 0, ctx->stream>>>(a);
        else scan_cols_kernel<long long><<<blocks, KU_THREADS, 0, ctx->stream>>>(a);
        KILN_CUDA_LAUNCH_CHECK("scan_cols_kernel");
    } else {
        unsigned blocks = ku_blocks(a.outer * KU_THREADS, KU_THREADS, ctx, 2);
        if (fp) scan_rows_kernel<float><<<blocks, KU_THREADS, 0, ctx->stream>>>(a);
        else scan_rows_kernel<long long><<<blocks, KU_THREADS, 0, ctx->stream>>>(a);
        KILN_CUDA_LAUNCH_CHECK("scan_rows_kernel");
    }
    return KILN_OK;
}

static kiln_status cumsum_supports(const kiln_graph *g, const kiln_node *n) {
    const kiln_value *x = ku_in(g, n, 0);
    if (!x) return kiln_error(KILN_ERR_INVALID_ARGUMENT, "CumSum: input 'x' is missing");
    if (!ku_is_float(x->dtype) && !ku_is_int(x->dtype)) return ku_refuse_dtype(n, 0, x->dtype);
    return ku_need_host(g, n, 1, "axis");
}

/* ---------------------------------------------------------------- table */

extern "C" const kiln_cuda_kernel kiln_cuda_kernels_reduce[] = {
    {"ReduceSum", "", reduce_sum_exec, reduce_sum_supports},
    {"ReduceMean", "", reduce_mean_exec, reduce_mean_supports},
    {"ReduceProd", "", reduce_prod_exec, reduce_prod_supports},
    {"ReduceMax", "", reduce_max_exec, reduce_max_supports},
    {"ReduceMin", "", reduce_min_exec, reduce_min_supports},
    {"ReduceL1", "", reduce_l1_exec, reduce_l1_supports},
    {"ReduceL2", "", reduce_l2_exec, reduce_l2_supports},
    {"ReduceLogSum", "", reduce_log_sum_exec, reduce_log_sum_supports},
    {"ReduceLogSumExp", "", reduce_log_sum_exp_exec, reduce_log_sum_exp_supports},
    {"ReduceSumSquare", "", reduce_sum_square_exec, reduce_sum_square_supports},
    {"ArgMax", "", argmax_exec, numeric_supports},
    {"ArgMin", "", argmin_exec, numeric_supports},
    {"TopK", "", topk_exec, numeric_supports},
    {"CumSum", "", cumsum_exec, cumsum_supports},
    {NULL, NULL, NULL, NULL},
};
