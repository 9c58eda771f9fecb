/* pool.cu — CUDA pooling: MaxPool (with the optional Indices output, either storage order),
 * AveragePool (count_include_pad), LpPool, and the global forms GlobalAveragePool, GlobalMaxPool
 * and GlobalLpPool, for float32, float16 and bfloat16 storage with float32 arithmetic (MaxPool also
 * int8 and uint8), over 1 to 6 spatial dims.
 *
 * The window geometry (pads, auto_pad, ceil_mode, dilations) is resolved on the host by
 * src/ir/nn_window.c, the same code the shape inference and the CPU kernels use, so the three
 * agree exactly. The windowed kernel gives each output element one thread, which walks the taps of
 * its window that lie inside the input in row-major order (the CPU's order: the first maximum wins,
 * and sums accumulate in the same sequence). 2-D MaxPool / AveragePool without dilation whose sizes
 * fit in 32 bits take pool2d_kernel instead: the same taps and order, 32-bit index arithmetic and
 * read-only-cache loads (ResNet's stem pool). The global pools give each plane one warp (small
 * planes) or one block (large planes).
 *
 * kiln.FusedPool (ir/fused_ops.h) runs the same kernels channels-first; channels-last (NHWC, the
 * layout_channels_last pass's pools between convolutions) it has its own windowed and global
 * kernels, each thread 16 bytes of channels of one output pixel (8 float16 channels, one 16-byte
 * load per tap). */
#include "backends/cuda/kernel_util.cuh"

#include <math.h>

extern "C" {
#include "ir/fused_ops.h"
#include "ir/nn_window.h"
}

#define POOL_MAX_SP (KILN_MAX_DIMS - 2)
/* Planes larger than this get a whole block in the global pools, smaller ones a warp. */
#define POOL_BLOCK_PLANE 8192

enum { POOL_AVG, POOL_MAX, POOL_LP };

/* MaxPool also takes int8 and uint8 (ONNX, opset 12): their values are exact in float32, and an
 * empty window's -inf saturates to the type's lowest value, as on the CPU. */
static __device__ __forceinline__ float ku_f32(int8_t x) { return (float)x; }
static __device__ __forceinline__ float ku_f32(uint8_t x) { return (float)x; }
template <> __device__ __forceinline__ int8_t ku_from_f32<int8_t>(float v) { return (int8_t)fminf(fmaxf(v, -128.0f), 127.0f); }
template <> __device__ __forceinline__ uint8_t ku_from_f32<uint8_t>(float v) { return (uint8_t)fminf(fmaxf(v, 0.0f), 255.0f); }

/* One pooling node for its actual input: per spatial dim the input and output sizes, kernel,
 * stride, dilation, the padding before and after, and the input's row-major strides within a
 * plane; the plane sizes and count; count_include_pad (cip), the Indices storage order (col) and
 * the Lp exponent (lp). */
typedef struct pool_geom {
    int64_t in[POOL_MAX_SP], out[POOL_MAX_SP], k[POOL_MAX_SP], s[POOL_MAX_SP], d[POOL_MAX_SP];
    int64_t pb[POOL_MAX_SP], pe[POOL_MAX_SP], istr[POOL_MAX_SP];
    int64_t in_size, out_size, planes;
    bool cip, col;
    float lp;
} pool_geom;

/* ceil(a / b) for b > 0 and any a (the CPU's definition). */
__device__ __forceinline__ int64_t pool_ceil_div(int64_t a, int64_t b) { return a >= 0 ? (a + b - 1) / b : -((-a) / b); }

__device__ __forceinline__ int64_t pool_clamp(int64_t v, int64_t lo, int64_t hi) { return v < lo ? lo : v > hi ? hi : v; }

/* |v|^p as the CPU computes it (exact forms for p = 1 and 2). */
__device__ __forceinline__ float pool_lp_term(float v, float p) {
    return p == 1.0f ? fabsf(v) : p == 2.0f ? v * v : powf(fabsf(v), p);
}

/* sum^(1/p) as the CPU computes it. */
__device__ __forceinline__ float pool_lp_root(float sum, float p) {
    return p == 1.0f ? sum : p == 2.0f ? sqrtf(sum) : powf(sum, 1.0f / p);
}

/* Windowed pooling. x is (planes, in...), y is (planes, out...). MODE: max, average, or Lp. IDX
 * (max only) writes ind (planes, out...) = the flat input index (plane included) of the first
 * maximum, column-major within the plane when g.col. An empty window yields -inf (max), NaN
 * (average) or 0 (Lp), as on the CPU. */
template <typename T, int NSP, int MODE, bool IDX>
__global__ void pool_window_kernel(const T *__restrict__ x, T *__restrict__ y, int64_t *__restrict__ ind, pool_geom g) {
    int64_t total = g.planes * g.out_size;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += (int64_t)gridDim.x * blockDim.x) {
        int64_t pl = i / g.out_size, o = i - pl * g.out_size;
        int64_t st[NSP], lo[NSP], hi[NSP], t[NSP], cnt = 1;
        bool empty = false;
#pragma unroll
        for (int d = NSP - 1; d >= 0; d--) {
            int64_t od = o % g.out[d];
            o /= g.out[d];
            st[d] = od * g.s[d] - g.pb[d];
            lo[d] = pool_clamp(pool_ceil_div(-st[d], g.d[d]), 0, g.k[d]);
            hi[d] = pool_clamp(pool_ceil_div(g.in[d] - st[d], g.d[d]), lo[d], g.k[d]);
            empty = empty || lo[d] >= hi[d];
            cnt *= g.cip ? pool_clamp(pool_ceil_div(g.in[d] + g.pe[d] - st[d], g.d[d]), 0, g.k[d]) : hi[d] - lo[d];
            t[d] = lo[d];
        }
        const T *xp = x + pl * g.in_size;
        float acc = MODE == POOL_MAX ? -INFINITY : 0.0f;
        int64_t best = -1;
        while (!empty) {
            int64_t off = 0;
#pragma unroll
            for (int d = 0; d < NSP; d++) off += (st[d] + t[d] * g.d[d]) * g.istr[d];
            float v = ku_f32(xp[off]);
            if (MODE == POOL_MAX) {
                if (v > acc || (IDX && best < 0)) {
                    acc = v;
                    best = off;
                }
            } else {
                acc += MODE == POOL_LP ? pool_lp_term(v, g.lp) : v;
            }
            bool carry = true;
#pragma unroll
            for (int d = NSP - 1; d >= 0; d--)
                if (carry) {
                    if (++t[d] < hi[d]) carry = false;
                    else t[d] = lo[d];
                }
            empty = carry;
        }
        float r = MODE == POOL_MAX ? acc : MODE == POOL_LP ? pool_lp_root(acc, g.lp) : cnt > 0 ? acc / (float)cnt : NAN;
        y[i] = ku_from_f32<T>(r);
        if (IDX) {
            int64_t off = best < 0 ? 0 : best;
            if (g.col) {
                int64_t rem = off, c = 0, mul = 1, pos[NSP];
#pragma unroll
                for (int d = NSP - 1; d >= 0; d--) {
                    pos[d] = rem % g.in[d];
                    rem /= g.in[d];
                }
#pragma unroll
                for (int d = 0; d < NSP; d++) {
                    c += pos[d] * mul;
                    mul *= g.in[d];
                }
                off = c;
            }
            ind[i] = pl * g.in_size + off;
        }
    }
}

/* Launches the windowed kernel for one dtype and spatial rank. */
template <typename T, int NSP>
static kiln_status pool_launch_nsp(kiln_cuda_ctx *ctx, const void *x, void *y, int64_t *ind, const pool_geom *g, int mode) {
    unsigned blocks = ku_blocks(g->planes * g->out_size, KU_THREADS, ctx);
    const T *xs = (const T *)x;
    T *ys = (T *)y;
    cudaStream_t st = ctx->stream;
    if constexpr (sizeof(T) == 1) { /* 8-bit integers: MaxPool only (pool_exec checks) */
    } else if (mode == POOL_AVG) {
        pool_window_kernel<T, NSP, POOL_AVG, false><<<blocks, KU_THREADS, 0, st>>>(xs, ys, NULL, *g);
        KILN_CUDA_LAUNCH_CHECK("pool_window_kernel");
        return KILN_OK;
    } else if (mode == POOL_LP) {
        pool_window_kernel<T, NSP, POOL_LP, false><<<blocks, KU_THREADS, 0, st>>>(xs, ys, NULL, *g);
        KILN_CUDA_LAUNCH_CHECK("pool_window_kernel");
        return KILN_OK;
    }
    if (ind) pool_window_kernel<T, NSP, POOL_MAX, true><<<blocks, KU_THREADS, 0, st>>>(xs, ys, ind, *g);
    else pool_window_kernel<T, NSP, POOL_MAX, false><<<blocks, KU_THREADS, 0, st>>>(xs, ys, NULL, *g);
    KILN_CUDA_LAUNCH_CHECK("pool_window_kernel");
    return KILN_OK;
}

template <typename T>
static kiln_status pool_launch(kiln_cuda_ctx *ctx, int nsp, const void *x, void *y, int64_t *ind, const pool_geom *g, int mode) {
    switch (nsp) {
    case 1: return pool_launch_nsp<T, 1>(ctx, x, y, ind, g, mode);
    case 2: return pool_launch_nsp<T, 2>(ctx, x, y, ind, g, mode);
    case 3: return pool_launch_nsp<T, 3>(ctx, x, y, ind, g, mode);
    case 4: return pool_launch_nsp<T, 4>(ctx, x, y, ind, g, mode);
    case 5: return pool_launch_nsp<T, 5>(ctx, x, y, ind, g, mode);
    default: return pool_launch_nsp<T, 6>(ctx, x, y, ind, g, mode);
    }
}

/* ---------------------------------------------------------------------------------------------
 * 2-D fast path: MaxPool / AveragePool over (N, C, H, W) without dilation, every size in 32 bits.
 * ------------------------------------------------------------------------------------------- */

/* The 2-D window in 32-bit ints: input and output plane sizes, kernel, stride, padding before and
 * after (h then w); total = planes * oh * ow output elements. pool2d_geom_from checks that every
 * value the kernel forms fits. */
typedef struct pool2d_geom {
    int h, w, oh, ow, kh, kw, sh, sw, ph, pw, peh, pew;
    int total;
    bool cip, col;
} pool2d_geom;

/* *p through the read-only data cache (the 16-bit types as their bits, for any CUDA version). */
static __device__ __forceinline__ float pool_ldg(const float *p) { return __ldg(p); }
static __device__ __forceinline__ float pool_ldg(const int8_t *p) { return (float)__ldg(reinterpret_cast<const signed char *>(p)); }
static __device__ __forceinline__ float pool_ldg(const uint8_t *p) { return (float)__ldg(reinterpret_cast<const unsigned char *>(p)); }
static __device__ __forceinline__ float pool_ldg(const __half *p) {
    unsigned short b = __ldg(reinterpret_cast<const unsigned short *>(p));
    __half v;
    memcpy(&v, &b, sizeof v);
    return __half2float(v);
}
static __device__ __forceinline__ float pool_ldg(const bf16 *p) {
    unsigned short b = __ldg(reinterpret_cast<const unsigned short *>(p));
    bf16 v;
    memcpy(&v, &b, sizeof v);
    return __bfloat162float(v);
}

/* pool_window_kernel for NSP = 2, dilation 1, MODE max or average, one thread per output element
 * and 32-bit index arithmetic: the same taps in the same (row-major) order, the same comparisons
 * (a NaN never beats the running maximum, except as the first tap when IDX), the same count and
 * division, and the same Indices. */
template <typename T, int MODE, bool IDX>
__global__ void __launch_bounds__(KU_THREADS)
pool2d_kernel(const T *__restrict__ x, T *__restrict__ y, int64_t *__restrict__ ind, pool2d_geom g) {
    unsigned i = blockIdx.x * (unsigned)blockDim.x + threadIdx.x;
    if (i >= (unsigned)g.total) return;
    unsigned q = i / (unsigned)g.ow, pl = q / (unsigned)g.oh;
    int ox = (int)(i - q * (unsigned)g.ow), oy = (int)(q - pl * (unsigned)g.oh);
    int ys = oy * g.sh - g.ph, xs = ox * g.sw - g.pw;
    int y0 = max(ys, 0), y1 = min(ys + g.kh, g.h);
    int x0 = max(xs, 0), x1 = min(xs + g.kw, g.w);
    unsigned plane = (unsigned)g.h * (unsigned)g.w;
    const T *xp = x + (size_t)pl * plane;
    float acc = MODE == POOL_MAX ? -INFINITY : 0.0f;
    int best = -1;
    for (int r = y0; r < y1; r++) {
        const T *row = xp + r * g.w;
        for (int c = x0; c < x1; c++) {
            float v = pool_ldg(row + c);
            if (MODE == POOL_MAX) {
                if (v > acc || (IDX && best < 0)) {
                    acc = v;
                    if (IDX) best = r * g.w + c;
                }
            } else {
                acc += v;
            }
        }
    }
    float res = acc;
    if (MODE == POOL_AVG) {
        int ch, cw;
        if (g.cip) {
            ch = min(max(g.h + g.peh - ys, 0), g.kh);
            cw = min(max(g.w + g.pew - xs, 0), g.kw);
        } else {
            ch = max(y1 - y0, 0);
            cw = max(x1 - x0, 0);
        }
        int64_t cnt = (int64_t)ch * cw;
        res = cnt > 0 ? acc / (float)cnt : NAN;
    }
    y[i] = ku_from_f32<T>(res);
    if (IDX) {
        int off = 0;
        if (best >= 0) off = g.col ? (best % g.w) * g.h + best / g.w : best;
        ind[i] = (int64_t)pl * plane + off;
    }
}

/* Fills *f from g when the 2-D fast path applies: 2 spatial dims, dilation 1, and every size and
 * every intermediate the kernel forms (window starts and ends, padded extents, plane offsets, the
 * output count) within int32. */
static bool pool2d_geom_from(int nsp, const pool_geom *g, pool2d_geom *f) {
    if (nsp != 2 || g->d[0] != 1 || g->d[1] != 1) return false;
    for (int i = 0; i < 2; i++) {
        const int64_t v[6] = {g->in[i], g->out[i], g->k[i], g->s[i], g->pb[i], g->pe[i]};
        for (int j = 0; j < 6; j++)
            if (v[j] < 0 || v[j] > INT32_MAX) return false;
        if (g->out[i] < 1 || g->s[i] < 1 || g->k[i] < 1) return false;
        /* bounds |ys|, ys + k and in + pe - ys */
        if ((g->out[i] - 1) * g->s[i] + g->k[i] + g->pb[i] + g->pe[i] + g->in[i] > INT32_MAX) return false;
    }
    if (g->in_size > INT32_MAX || g->out_size > INT32_MAX || g->planes > INT32_MAX / g->out_size) return false;
    f->h = (int)g->in[0], f->w = (int)g->in[1];
    f->oh = (int)g->out[0], f->ow = (int)g->out[1];
    f->kh = (int)g->k[0], f->kw = (int)g->k[1];
    f->sh = (int)g->s[0], f->sw = (int)g->s[1];
    f->ph = (int)g->pb[0], f->pw = (int)g->pb[1];
    f->peh = (int)g->pe[0], f->pew = (int)g->pe[1];
    f->total = (int)(g->planes * g->out_size);
    f->cip = g->cip;
    f->col = g->col;
    return true;
}

template <typename T>
static kiln_status pool2d_launch(kiln_cuda_ctx *ctx, const void *x, void *y, int64_t *ind, const pool2d_geom *f, int mode) {
    unsigned blocks = (unsigned)(((int64_t)f->total + KU_THREADS - 1) / KU_THREADS);
    const T *xs = (const T *)x;
    T *ys = (T *)y;
    cudaStream_t st = ctx->stream;
    if constexpr (sizeof(T) == 1) { /* 8-bit integers: MaxPool only */
    } else if (mode == POOL_AVG) {
        pool2d_kernel<T, POOL_AVG, false><<<blocks, KU_THREADS, 0, st>>>(xs, ys, NULL, *f);
        KILN_CUDA_LAUNCH_CHECK("pool2d_kernel");
        return KILN_OK;
    }
    if (ind) pool2d_kernel<T, POOL_MAX, true><<<blocks, KU_THREADS, 0, st>>>(xs, ys, ind, *f);
    else pool2d_kernel<T, POOL_MAX, false><<<blocks, KU_THREADS, 0, st>>>(xs, ys, NULL, *f);
    KILN_CUDA_LAUNCH_CHECK("pool2d_kernel");
    return KILN_OK;
}

/* Resolves the window of node n for input x (N, C, in...) and checks it against output y. */
static kiln_status pool_setup(const kiln_node *n, const kiln_cuda_tensor *x, const kiln_cuda_tensor *y, pool_geom *g,
                              int *nsp_out) {
    memset(g, 0, sizeof *g);
    if (x->ndim < 3 || x->ndim - 2 > POOL_MAX_SP)
        return kiln_error(KILN_ERR_SHAPE, "%s input must have rank 3..%d, has rank %d", n->op_type, POOL_MAX_SP + 2, x->ndim);
    int nsp = x->ndim - 2;
    kiln_window w;
    KILN_TRY(kiln_window_parse(n, nsp, NULL, &w));
    if (!w.has_kernel) return kiln_error(KILN_ERR_INVALID_ARGUMENT, "%s needs the kernel_shape attribute", n->op_type);
    if (y->ndim != x->ndim || y->dims[0] != x->dims[0] || y->dims[1] != x->dims[1])
        return kiln_error(KILN_ERR_SHAPE, "%s: output rank/batch/channels differ from the input's", n->op_type);
    g->in_size = g->out_size = 1;
    for (int i = 0; i < nsp; i++) {
        int64_t o;
        g->in[i] = x->dims[2 + i];
        g->k[i] = w.kernel[i];
        g->s[i] = w.stride[i];
        g->d[i] = w.dilation[i];
        KILN_TRY(kiln_window_out(&w, i, g->in[i], &o, &g->pb[i], &g->pe[i]));
        if (o != y->dims[2 + i])
            return kiln_error(KILN_ERR_SHAPE, "%s: spatial dim %d of the output is %lld, the window gives %lld", n->op_type, i,
                              (long long)y->dims[2 + i], (long long)o);
        g->out[i] = o;
        g->in_size *= g->in[i];
        g->out_size *= o;
    }
    kiln_strides(nsp, g->in, g->istr);
    g->planes = x->dims[0] * x->dims[1];
    *nsp_out = nsp;
    return KILN_OK;
}

/* The LpPool / GlobalLpPool exponent (a float attribute in opset 1, an int later); must be > 0. */
static kiln_status pool_lp_exponent(const kiln_node *n, float *p) {
    *p = kiln_attr_float(n, "p", 2.0f);
    if (!(*p > 0.0f)) return kiln_error(KILN_ERR_INVALID_ARGUMENT, "%s p must be positive, got %g", n->op_type, (double)*p);
    return KILN_OK;
}

/* MaxPool, AveragePool or LpPool (mode). */
static kiln_status pool_exec(const kiln_node *n, const kiln_cuda_tensor *in, const kiln_cuda_tensor *out, int nout,
                             kiln_cuda_ctx *ctx, int mode) {
    const kiln_cuda_tensor *x = &in[0], *y = &out[0];
    pool_geom g;
    int nsp = 0;
    KILN_TRY(pool_setup(n, x, y, &g, &nsp));
    int64_t *ind = NULL;
    if (mode == POOL_MAX) {
        int64_t order = kiln_attr_int(n, "storage_order", 0);
        if (order != 0 && order != 1)
            return kiln_error(KILN_ERR_INVALID_ARGUMENT, "MaxPool storage_order must be 0 or 1, got %lld", (long long)order);
        g.col = order == 1;
        if (nout > 1 && out[1].ndim >= 0) {
            if (out[1].dtype != KILN_I64) return kiln_error(KILN_ERR_INVALID_ARGUMENT, "MaxPool: Indices must be int64");
            ind = (int64_t *)out[1].data;
        }
    } else if (mode == POOL_AVG) {
        int64_t c = kiln_attr_int(n, "count_include_pad", 0);
        if (c != 0 && c != 1) return kiln_error(KILN_ERR_INVALID_ARGUMENT, "AveragePool count_include_pad must be 0 or 1");
        g.cip = c == 1;
        if (n->opset < 19 && kiln_node_attr(n, "dilations"))
            return kiln_error(KILN_ERR_INVALID_ARGUMENT, "AveragePool accepts dilations only from opset 19");
    } else {
        KILN_TRY(pool_lp_exponent(n, &g.lp));
    }
    if (x->dtype != y->dtype)
        return kiln_error(KILN_ERR_INVALID_ARGUMENT, "%s: output is %s, input %s", n->op_type, kiln_dtype_name(y->dtype),
                          kiln_dtype_name(x->dtype));
    if (g.planes * g.out_size == 0) return KILN_OK;
    if (g.in_size == 0) return kiln_error(KILN_ERR_SHAPE, "%s: empty spatial input", n->op_type);
    pool2d_geom f;
    if (mode != POOL_LP && pool2d_geom_from(nsp, &g, &f)) {
        switch (x->dtype) {
        case KILN_F32: return pool2d_launch<float>(ctx, x->data, y->data, ind, &f, mode);
        case KILN_F16: return pool2d_launch<__half>(ctx, x->data, y->data, ind, &f, mode);
        case KILN_BF16: return pool2d_launch<bf16>(ctx, x->data, y->data, ind, &f, mode);
        case KILN_I8: if (mode == POOL_MAX) return pool2d_launch<int8_t>(ctx, x->data, y->data, ind, &f, mode); break;
        case KILN_U8: if (mode == POOL_MAX) return pool2d_launch<uint8_t>(ctx, x->data, y->data, ind, &f, mode); break;
        default: break;
        }
    }
    switch (x->dtype) {
    case KILN_F32: return pool_launch<float>(ctx, nsp, x->data, y->data, ind, &g, mode);
    case KILN_F16: return pool_launch<__half>(ctx, nsp, x->data, y->data, ind, &g, mode);
    case KILN_BF16: return pool_launch<bf16>(ctx, nsp, x->data, y->data, ind, &g, mode);
    case KILN_I8:
        if (mode == POOL_MAX) return pool_launch<int8_t>(ctx, nsp, x->data, y->data, ind, &g, mode);
        return kiln_error(KILN_ERR_UNSUPPORTED, "%s: int8 input on the CUDA backend (MaxPool only)", n->op_type);
    case KILN_U8:
        if (mode == POOL_MAX) return pool_launch<uint8_t>(ctx, nsp, x->data, y->data, ind, &g, mode);
        return kiln_error(KILN_ERR_UNSUPPORTED, "%s: uint8 input on the CUDA backend (MaxPool only)", n->op_type);
    default: return kiln_error(KILN_ERR_UNSUPPORTED, "%s: %s input on the CUDA backend", n->op_type, kiln_dtype_name(x->dtype));
    }
}

static kiln_status exec_max_pool(const kiln_node *n, const kiln_cuda_tensor *in, int nin, const kiln_cuda_tensor *out,
                                 int nout, kiln_cuda_ctx *ctx) {
    return pool_exec(n, in, out, nout, ctx, POOL_MAX);
}

static kiln_status exec_average_pool(const kiln_node *n, const kiln_cuda_tensor *in, int nin, const kiln_cuda_tensor *out,
                                     int nout, kiln_cuda_ctx *ctx) {
    return pool_exec(n, in, out, nout, ctx, POOL_AVG);
}

static kiln_status exec_lp_pool(const kiln_node *n, const kiln_cuda_tensor *in, int nin, const kiln_cuda_tensor *out,
                                int nout, kiln_cuda_ctx *ctx) {
    return pool_exec(n, in, out, nout, ctx, POOL_LP);
}

/* ---------------------------------------------------------------------------------------------
 * Global pools
 * ------------------------------------------------------------------------------------------- */

/* The running value after element v: max, or the sum of v (average) or |v|^p (Lp). */
template <int MODE>
__device__ __forceinline__ float pool_step(float acc, float v, float p) {
    return MODE == POOL_MAX ? (v > acc ? v : acc) : acc + (MODE == POOL_LP ? pool_lp_term(v, p) : v);
}

template <int MODE>
__device__ __forceinline__ float pool_warp_reduce(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        float w = __shfl_xor_sync(0xffffffffu, v, o);
        v = MODE == POOL_MAX ? (w > v ? w : v) : v + w;
    }
    return v;
}

/* The result of a plane of size elements from its reduced value. */
template <int MODE>
__device__ __forceinline__ float pool_global_final(float acc, int64_t size, float p) {
    return MODE == POOL_MAX ? acc : MODE == POOL_LP ? pool_lp_root(acc, p) : size > 0 ? acc / (float)size : NAN;
}

/* x is (planes, size), y is (planes): one warp per plane. */
template <typename T, int MODE>
__global__ void pool_global_warp_kernel(const T *__restrict__ x, T *__restrict__ y, int64_t planes, int64_t size, float p) {
    int lane = threadIdx.x & 31;
    int64_t warp = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) >> 5, nwarps = ((int64_t)gridDim.x * blockDim.x) >> 5;
    for (int64_t pl = warp; pl < planes; pl += nwarps) {
        const T *xp = x + pl * size;
        float acc = MODE == POOL_MAX ? -INFINITY : 0.0f;
        for (int64_t j = lane; j < size; j += 32) acc = pool_step<MODE>(acc, ku_f32(xp[j]), p);
        acc = pool_warp_reduce<MODE>(acc);
        if (lane == 0) y[pl] = ku_from_f32<T>(pool_global_final<MODE>(acc, size, p));
    }
}

/* The same with one block (a multiple of 32 threads, at most 1024) per plane. */
template <typename T, int MODE>
__global__ void pool_global_block_kernel(const T *__restrict__ x, T *__restrict__ y, int64_t planes, int64_t size, float p) {
    __shared__ float part[32];
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    for (int64_t pl = blockIdx.x; pl < planes; pl += gridDim.x) {
        const T *xp = x + pl * size;
        float acc = MODE == POOL_MAX ? -INFINITY : 0.0f;
        for (int64_t j = threadIdx.x; j < size; j += blockDim.x) acc = pool_step<MODE>(acc, ku_f32(xp[j]), p);
        acc = pool_warp_reduce<MODE>(acc);
        if (lane == 0) part[warp] = acc;
        __syncthreads();
        if (warp == 0) {
            acc = lane < nw ? part[lane] : (MODE == POOL_MAX ? -INFINITY : 0.0f);
            acc = pool_warp_reduce<MODE>(acc);
            if (lane == 0) y[pl] = ku_from_f32<T>(pool_global_final<MODE>(acc, size, p));
        }
        __syncthreads();
    }
}

template <typename T, int MODE>
static kiln_status pool_global_launch_mode(kiln_cuda_ctx *ctx, const void *x, void *y, int64_t planes, int64_t size, float p) {
    if (size > POOL_BLOCK_PLANE) {
        unsigned blocks = ku_blocks(planes * KU_THREADS, KU_THREADS, ctx);
        pool_global_block_kernel<T, MODE><<<blocks, KU_THREADS, 0, ctx->stream>>>((const T *)x, (T *)y, planes, size, p);
    } else {
        unsigned blocks = ku_blocks(planes * 32, KU_THREADS, ctx);
        pool_global_warp_kernel<T, MODE><<<blocks, KU_THREADS, 0, ctx->stream>>>((const T *)x, (T *)y, planes, size, p);
    }
    KILN_CUDA_LAUNCH_CHECK("pool_global_kernel");
    return KILN_OK;
}

template <typename T>
static kiln_status pool_global_launch(kiln_cuda_ctx *ctx, const void *x, void *y, int64_t planes, int64_t size, int mode,
                                      float p) {
    switch (mode) {
    case POOL_MAX: return pool_global_launch_mode<T, POOL_MAX>(ctx, x, y, planes, size, p);
    case POOL_LP: return pool_global_launch_mode<T, POOL_LP>(ctx, x, y, planes, size, p);
    default: return pool_global_launch_mode<T, POOL_AVG>(ctx, x, y, planes, size, p);
    }
}

/* GlobalAveragePool / GlobalMaxPool / GlobalLpPool: x [N, C, D...] -> y [N, C, 1...]. */
static kiln_status global_exec(const kiln_node *n, const kiln_cuda_tensor *in, const kiln_cuda_tensor *out,
                               kiln_cuda_ctx *ctx, int mode) {
    const kiln_cuda_tensor *x = &in[0], *y = &out[0];
    if (x->ndim < 2) return kiln_error(KILN_ERR_SHAPE, "%s input must have rank >= 2, has rank %d", n->op_type, x->ndim);
    float p = 0.0f;
    if (mode == POOL_LP) KILN_TRY(pool_lp_exponent(n, &p));
    int64_t planes = x->dims[0] * x->dims[1], size = kiln_numel(x->ndim - 2, x->dims + 2);
    if (kiln_numel(y->ndim, y->dims) != planes || x->dtype != y->dtype)
        return kiln_error(KILN_ERR_SHAPE, "%s: output must be %lld values of %s", n->op_type, (long long)planes,
                          kiln_dtype_name(x->dtype));
    if (planes == 0) return KILN_OK;
    switch (x->dtype) {
    case KILN_F32: return pool_global_launch<float>(ctx, x->data, y->data, planes, size, mode, p);
    case KILN_F16: return pool_global_launch<__half>(ctx, x->data, y->data, planes, size, mode, p);
    case KILN_BF16: return pool_global_launch<bf16>(ctx, x->data, y->data, planes, size, mode, p);
    default: return kiln_error(KILN_ERR_UNSUPPORTED, "%s: %s input on the CUDA backend", n->op_type, kiln_dtype_name(x->dtype));
    }
}

static kiln_status exec_global_average_pool(const kiln_node *n, const kiln_cuda_tensor *in, int nin,
                                            const kiln_cuda_tensor *out, int nout, kiln_cuda_ctx *ctx) {
    return global_exec(n, in, out, ctx, POOL_AVG);
}

static kiln_status exec_global_max_pool(const kiln_node *n, const kiln_cuda_tensor *in, int nin, const kiln_cuda_tensor *out,
                                        int nout, kiln_cuda_ctx *ctx) {
    return global_exec(n, in, out, ctx, POOL_MAX);
}

static kiln_status exec_global_lp_pool(const kiln_node *n, const kiln_cuda_tensor *in, int nin, const kiln_cuda_tensor *out,
                                       int nout, kiln_cuda_ctx *ctx) {
    return global_exec(n, in, out, ctx, POOL_LP);
}

/* ---------------------------------------------------------------------------------------------
 * kiln.FusedPool (ir/fused_ops.h): channels-first it is the ONNX pool; channels-last (NHWC) it has
 * kernels of its own, each thread V consecutive channels of one output pixel: V = 16 bytes of
 * channels (8 float16/bfloat16, 4 float32) with one 16-byte load per tap when C * element size is
 * a multiple of 16 and the tensors 16-byte aligned, else V = 1. Adjacent threads read adjacent
 * channels, so every load of a warp is coalesced.
 * ------------------------------------------------------------------------------------------- */

/* V elements of T loaded and stored as one unit. */
template <typename T, int V>
struct __align__(sizeof(T) * V) pool_vec {
    T e[V];
};

/* A 2-D window over X [N, H, W, C] -> Y [N, OH, OW, C]: kernel, stride, dilation, padding before
 * and after (h then w), count_include_pad. */
typedef struct pool_nhwc_geom {
    int64_t n, h, w, c, oh, ow, kh, kw, sh, sw, dh, dw, ph, pw, peh, pew;
    bool cip;
} pool_nhwc_geom;

template <typename I>
__device__ __forceinline__ I pool_ceil_div_i(I a, I b) { return a >= 0 ? (a + b - 1) / b : -((-a) / b); }

template <typename I>
__device__ __forceinline__ I pool_clamp_i(I v, I lo, I hi) { return v < lo ? lo : v > hi ? hi : v; }

/* The taps [lo, hi) of a window starting at st (may be negative) that lie inside [0, in), and
 * (cip) the taps inside the padded extent [.., in + pe), for kernel k and dilation d. */
template <typename I>
__device__ __forceinline__ void pool_taps(I st, I in, I pe, I k, I d, I *lo, I *hi, I *padded) {
    *lo = pool_clamp_i<I>(pool_ceil_div_i<I>(-st, d), 0, k);
    *hi = pool_clamp_i<I>(pool_ceil_div_i<I>(in - st, d), *lo, k);
    *padded = pool_clamp_i<I>(pool_ceil_div_i<I>(in + pe - st, d), 0, k);
}

/* acc[e] = max or sum of acc[e] and v's element e, in float32. */
template <typename T, int V, int MODE>
__device__ __forceinline__ void pool_vec_step(float *acc, const pool_vec<T, V> &v) {
#pragma unroll
    for (int e = 0; e < V; e++) {
        float f = ku_f32(v.e[e]);
        if (MODE == POOL_MAX) acc[e] = f > acc[e] ? f : acc[e];
        else acc[e] += f;
    }
}

/* Windowed pooling channels-last; total = N * OH * OW * C / V units of V channels. The taps in
 * row-major order, max ignoring NaN after -inf (a NaN never beats the running maximum) and the
 * average's count as in pool_window_kernel, so the results match the channels-first kernels'. I:
 * int32_t when every offset fits, else int64_t. */
template <typename T, int V, int MODE, typename I>
__global__ void __launch_bounds__(KU_THREADS)
pool_nhwc_kernel(const pool_vec<T, V> *__restrict__ x, pool_vec<T, V> *__restrict__ y, pool_nhwc_geom g, I total) {
    const I cv = (I)(g.c / V), ow = (I)g.ow, oh = (I)g.oh, h = (I)g.h, w = (I)g.w;
    for (I i = (I)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += (I)gridDim.x * blockDim.x) {
        I q = i / cv, cc = i - q * cv;
        I q2 = q / ow, ox = q - q2 * ow;
        I img = q2 / oh, oy = q2 - img * oh;
        I ys = oy * (I)g.sh - (I)g.ph, xs = ox * (I)g.sw - (I)g.pw;
        I r0, r1, rp, c0, c1, cp;
        pool_taps<I>(ys, h, (I)g.peh, (I)g.kh, (I)g.dh, &r0, &r1, &rp);
        pool_taps<I>(xs, w, (I)g.pew, (I)g.kw, (I)g.dw, &c0, &c1, &cp);
        const pool_vec<T, V> *xb = x + img * h * w * cv + cc;
        float acc[V];
#pragma unroll
        for (int e = 0; e < V; e++) acc[e] = MODE == POOL_MAX ? -INFINITY : 0.0f;
        for (I r = r0; r < r1; r++) {
            const pool_vec<T, V> *row = xb + (ys + r * (I)g.dh) * w * cv;
            for (I s = c0; s < c1; s++) pool_vec_step<T, V, MODE>(acc, row[(xs + s * (I)g.dw) * cv]);
        }
        pool_vec<T, V> o;
        int64_t cnt = g.cip ? (int64_t)rp * cp : (int64_t)(r1 - r0) * (c1 - c0);
#pragma unroll
        for (int e = 0; e < V; e++)
            o.e[e] = ku_from_f32<T>(MODE == POOL_MAX ? acc[e] : cnt > 0 ? acc[e] / (float)cnt : NAN);
        y[i] = o;
    }
}

/* pool_nhwc_kernel for a KH x KW window without dilation (ResNet's 3 x 3 stem pool) in 32-bit
 * index math: the taps are unrolled, so that a thread issues the loads of all its taps inside the
 * input before it reduces any (the general kernel's runtime-bounded loop waited on each in turn);
 * the reduction then visits them in the same row-major order. */
template <typename T, int V, int MODE, int KH, int KW>
__global__ void __launch_bounds__(KU_THREADS)
pool_nhwc_fixed_kernel(const pool_vec<T, V> *__restrict__ x, pool_vec<T, V> *__restrict__ y, pool_nhwc_geom g,
                       int total) {
    const int cv = (int)(g.c / V), ow = (int)g.ow, oh = (int)g.oh, h = (int)g.h, w = (int)g.w;
    for (int i = (int)(blockIdx.x * blockDim.x + threadIdx.x); i < total; i += (int)(gridDim.x * blockDim.x)) {
        int q = i / cv, cc = i - q * cv;
        int q2 = q / ow, ox = q - q2 * ow;
        int img = q2 / oh, oy = q2 - img * oh;
        int ys = oy * (int)g.sh - (int)g.ph, xs = ox * (int)g.sw - (int)g.pw;
        const pool_vec<T, V> *xb = x + (img * h * w) * cv + cc;
        pool_vec<T, V> tap[KH][KW];
        bool in[KH][KW];
#pragma unroll
        for (int r = 0; r < KH; r++)
#pragma unroll
            for (int s = 0; s < KW; s++) {
                in[r][s] = (unsigned)(ys + r) < (unsigned)h && (unsigned)(xs + s) < (unsigned)w;
                if (in[r][s]) tap[r][s] = xb[((ys + r) * w + xs + s) * cv];
            }
        float acc[V];
#pragma unroll
        for (int e = 0; e < V; e++) acc[e] = MODE == POOL_MAX ? -INFINITY : 0.0f;
        int inside = 0;
#pragma unroll
        for (int r = 0; r < KH; r++)
#pragma unroll
            for (int s = 0; s < KW; s++)
                if (in[r][s]) {
                    pool_vec_step<T, V, MODE>(acc, tap[r][s]);
                    inside++;
                }
        int rp = pool_clamp_i<int>(h + (int)g.peh - ys, 0, KH), cp = pool_clamp_i<int>(w + (int)g.pew - xs, 0, KW);
        int cnt = g.cip ? rp * cp : inside;
        pool_vec<T, V> o;
#pragma unroll
        for (int e = 0; e < V; e++)
            o.e[e] = ku_from_f32<T>(MODE == POOL_MAX ? acc[e] : cnt > 0 ? acc[e] / (float)cnt : NAN);
        y[i] = o;
    }
}

/* Global pooling channels-last: X [N, S, C] -> Y [N, C] (S = H * W); total = N * C / V units. */
template <typename T, int V, int MODE>
__global__ void __launch_bounds__(KU_THREADS)
pool_nhwc_global_kernel(const pool_vec<T, V> *__restrict__ x, pool_vec<T, V> *__restrict__ y, int64_t size, int64_t cv,
                        int64_t total) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += (int64_t)gridDim.x * blockDim.x) {
        int64_t img = i / cv, cc = i - img * cv;
        const pool_vec<T, V> *xb = x + img * size * cv + cc;
        float acc[V];
#pragma unroll
        for (int e = 0; e < V; e++) acc[e] = MODE == POOL_MAX ? -INFINITY : 0.0f;
        for (int64_t s = 0; s < size; s++) {
            pool_vec<T, V> v = xb[s * cv];
#pragma unroll
            for (int e = 0; e < V; e++) acc[e] = pool_step<MODE>(acc[e], ku_f32(v.e[e]), 0.0f);
        }
        pool_vec<T, V> o;
#pragma unroll
        for (int e = 0; e < V; e++) o.e[e] = ku_from_f32<T>(pool_global_final<MODE>(acc[e], size, 0.0f));
        y[i] = o;
    }
}

/* Launches pool_nhwc_kernel on units of V channels. */
template <typename T, int V>
static kiln_status pool_nhwc_launch_window(kiln_cuda_ctx *ctx, const pool_vec<T, V> *xs, pool_vec<T, V> *ys,
                                           const pool_nhwc_geom *g, int mode) {
    cudaStream_t st = ctx->stream;
    int64_t total = g->n * g->oh * g->ow * (g->c / V), in_units = g->n * g->h * g->w * (g->c / V);
    unsigned blocks = ku_blocks(total, KU_THREADS, ctx);
    /* 32-bit when the unit counts and every window coordinate the kernel forms (a window start,
     * its taps' reach, the padded extent) are well inside int32; the offsets it reads stay below
     * in_units, as only taps inside the input are read */
    int64_t reach_h = g->h + g->ph + g->peh + g->kh * g->dh + g->oh * g->sh;
    int64_t reach_w = g->w + g->pw + g->pew + g->kw * g->dw + g->ow * g->sw;
    bool narrow = total < INT32_MAX / 2 && in_units < INT32_MAX / 2 && reach_h < INT32_MAX / 2 && reach_w < INT32_MAX / 2;
    if (narrow && g->kh == 3 && g->kw == 3 && g->dh == 1 && g->dw == 1) {
        if (mode == POOL_MAX) pool_nhwc_fixed_kernel<T, V, POOL_MAX, 3, 3><<<blocks, KU_THREADS, 0, st>>>(xs, ys, *g, (int)total);
        else pool_nhwc_fixed_kernel<T, V, POOL_AVG, 3, 3><<<blocks, KU_THREADS, 0, st>>>(xs, ys, *g, (int)total);
    } else if (narrow) {
        if (mode == POOL_MAX) pool_nhwc_kernel<T, V, POOL_MAX, int32_t><<<blocks, KU_THREADS, 0, st>>>(xs, ys, *g, (int32_t)total);
        else pool_nhwc_kernel<T, V, POOL_AVG, int32_t><<<blocks, KU_THREADS, 0, st>>>(xs, ys, *g, (int32_t)total);
    } else {
        if (mode == POOL_MAX) pool_nhwc_kernel<T, V, POOL_MAX, int64_t><<<blocks, KU_THREADS, 0, st>>>(xs, ys, *g, total);
        else pool_nhwc_kernel<T, V, POOL_AVG, int64_t><<<blocks, KU_THREADS, 0, st>>>(xs, ys, *g, total);
    }
    KILN_CUDA_LAUNCH_CHECK("pool_nhwc_kernel");
    return KILN_OK;
}

/* Launches the windowed (global = false) or global channels-last kernel with V channels per thread. */
template <typename T, int V>
static kiln_status pool_nhwc_launch_v(kiln_cuda_ctx *ctx, const void *x, void *y, const pool_nhwc_geom *g, bool global,
                                      int mode) {
    typedef pool_vec<T, V> P;
    const P *xs = (const P *)x;
    P *ys = (P *)y;
    cudaStream_t st = ctx->stream;
    if (global) {
        int64_t cv = g->c / V, total = g->n * cv;
        unsigned blocks = ku_blocks(total, KU_THREADS, ctx);
        if (mode == POOL_MAX) pool_nhwc_global_kernel<T, V, POOL_MAX><<<blocks, KU_THREADS, 0, st>>>(xs, ys, g->h * g->w, cv, total);
        else pool_nhwc_global_kernel<T, V, POOL_AVG><<<blocks, KU_THREADS, 0, st>>>(xs, ys, g->h * g->w, cv, total);
        KILN_CUDA_LAUNCH_CHECK("pool_nhwc_global_kernel");
        return KILN_OK;
    }
    return pool_nhwc_launch_window<T, V>(ctx, xs, ys, g, mode);
}

/* V = 16 bytes of channels when the channels and both pointers allow, else 1. */
template <typename T>
static kiln_status pool_nhwc_launch(kiln_cuda_ctx *ctx, const void *x, void *y, const pool_nhwc_geom *g, bool global,
                                    int mode) {
    const int v = 16 / (int)sizeof(T);
    if (g->c % v == 0 && (uintptr_t)x % 16 == 0 && (uintptr_t)y % 16 == 0)
        return pool_nhwc_launch_v<T, 16 / sizeof(T)>(ctx, x, y, g, global, mode);
    return pool_nhwc_launch_v<T, 1>(ctx, x, y, g, global, mode);
}

/* A channels-last FusedPool: base is the ONNX pool (MaxPool, AveragePool, GlobalAveragePool or
 * GlobalMaxPool) it computes, x [N, H, W, C], y [N, OH, OW, C]. */
static kiln_status pool_nhwc_exec(const kiln_node *base, const kiln_cuda_tensor *x, const kiln_cuda_tensor *y,
                                  kiln_cuda_ctx *ctx) {
    const char *op = base->op_type;
    bool global = !strncmp(op, "Global", 6);
    int mode = strstr(op, "MaxPool") ? POOL_MAX : POOL_AVG;
    if (x->ndim != 4 || y->ndim != 4)
        return kiln_error(KILN_ERR_SHAPE, "FusedPool: channels_last needs 4-D X and Y, has ranks %d and %d", x->ndim, y->ndim);
    if (x->dtype != y->dtype)
        return kiln_error(KILN_ERR_INVALID_ARGUMENT, "FusedPool: output is %s, input %s", kiln_dtype_name(y->dtype),
                          kiln_dtype_name(x->dtype));
    /* channels-first views of the shapes, for the geometry the ONNX pool's code resolves */
    kiln_cuda_tensor xv = *x, yv = *y;
    const int64_t to_first[4] = {0, 3, 1, 2};
    for (int i = 0; i < 4; i++) {
        xv.dims[i] = x->dims[to_first[i]];
        yv.dims[i] = y->dims[to_first[i]];
    }
    pool_nhwc_geom f;
    memset(&f, 0, sizeof f);
    f.n = x->dims[0], f.h = x->dims[1], f.w = x->dims[2], f.c = x->dims[3];
    if (global) {
        if (y->dims[0] != f.n || y->dims[1] != 1 || y->dims[2] != 1 || y->dims[3] != f.c)
            return kiln_error(KILN_ERR_SHAPE, "FusedPool: a channels-last %s output must be [N, 1, 1, C]", op);
    } else {
        pool_geom g;
        int nsp = 0;
        KILN_TRY(pool_setup(base, &xv, &yv, &g, &nsp));
        if (mode == POOL_AVG) {
            int64_t c = kiln_attr_int(base, "count_include_pad", 0);
            if (c != 0 && c != 1) return kiln_error(KILN_ERR_INVALID_ARGUMENT, "AveragePool count_include_pad must be 0 or 1");
            f.cip = c == 1;
        }
        f.oh = g.out[0], f.ow = g.out[1], f.kh = g.k[0], f.kw = g.k[1], f.sh = g.s[0], f.sw = g.s[1];
        f.dh = g.d[0], f.dw = g.d[1], f.ph = g.pb[0], f.pw = g.pb[1], f.peh = g.pe[0], f.pew = g.pe[1];
        if (f.n * f.oh * f.ow * f.c == 0) return KILN_OK;
        if (f.h * f.w == 0) return kiln_error(KILN_ERR_SHAPE, "%s: empty spatial input", op);
    }
    if (f.n * f.c == 0) return KILN_OK;
    switch (x->dtype) {
    case KILN_F32: return pool_nhwc_launch<float>(ctx, x->data, y->data, &f, global, mode);
    case KILN_F16: return pool_nhwc_launch<__half>(ctx, x->data, y->data, &f, global, mode);
    case KILN_BF16: return pool_nhwc_launch<bf16>(ctx, x->data, y->data, &f, global, mode);
    default: return kiln_error(KILN_ERR_UNSUPPORTED, "FusedPool: %s input on the CUDA backend", kiln_dtype_name(x->dtype));
    }
}

/* kiln.FusedPool: the ONNX pool's kernels channels-first, the NHWC kernels above channels-last. */
static kiln_status exec_fused_pool(const kiln_node *n, const kiln_cuda_tensor *in, int nin, const kiln_cuda_tensor *out,
                                   int nout, kiln_cuda_ctx *ctx) {
    kiln_node base;
    KILN_TRY(kiln_fused_pool_base(n, &base));
    int64_t cl = kiln_attr_int(n, "channels_last", 0);
    if (cl != 0 && cl != 1)
        return kiln_error(KILN_ERR_INVALID_ARGUMENT, "FusedPool: channels_last must be 0 or 1, is %lld", (long long)cl);
    if (cl) return pool_nhwc_exec(&base, &in[0], &out[0], ctx);
    int mode = strstr(base.op_type, "MaxPool") ? POOL_MAX : POOL_AVG;
    if (!strncmp(base.op_type, "Global", 6)) return global_exec(&base, in, out, ctx, mode);
    return pool_exec(&base, in, out, 1, ctx, mode);
}

/* ---------------------------------------------------------------------------------------------
 * Build-time checks
 * ------------------------------------------------------------------------------------------- */

/* Input 0 must be float32/float16/bfloat16 (MaxPool: also int8/uint8); when its rank is known, the
 * window attributes must parse and (windowed pools) name a kernel. */
static kiln_status pool_sup(const kiln_graph *g, const kiln_node *n, bool windowed) {
    const kiln_value *x = kiln_node_input(g, n, 0);
    if (!x) return kiln_error(KILN_ERR_INVALID_ARGUMENT, "%s: input X is missing", n->op_type);
    bool int8_max = (x->dtype == KILN_I8 || x->dtype == KILN_U8) && !strcmp(n->op_type, "MaxPool");
    if (!ku_is_float(x->dtype) && !int8_max)
        return kiln_error(KILN_ERR_UNSUPPORTED, "%s: %s input is not supported on the CUDA backend (float32/16, bfloat16%s)",
                          n->op_type, kiln_dtype_name(x->dtype), strcmp(n->op_type, "MaxPool") ? "" : "; int8/uint8");
    if (!windowed || x->ndim < 0) return KILN_OK;
    if (x->ndim < 3 || x->ndim - 2 > POOL_MAX_SP)
        return kiln_error(KILN_ERR_UNSUPPORTED, "%s: rank-%d input is not supported on the CUDA backend", n->op_type, x->ndim);
    kiln_window w;
    KILN_TRY(kiln_window_parse(n, x->ndim - 2, NULL, &w));
    if (!w.has_kernel) return kiln_error(KILN_ERR_INVALID_ARGUMENT, "%s needs the kernel_shape attribute", n->op_type);
    if (!strcmp(n->op_type, "AveragePool") && n->opset < 19 && kiln_node_attr(n, "dilations"))
        return kiln_error(KILN_ERR_INVALID_ARGUMENT, "AveragePool accepts dilations only from opset 19");
    return KILN_OK;
}

static kiln_status sup_window(const kiln_graph *g, const kiln_node *n) { return pool_sup(g, n, true); }
static kiln_status sup_global(const kiln_graph *g, const kiln_node *n) { return pool_sup(g, n, false); }

/* FusedPool: its pool's checks on the node as that pool; channels-last needs a 4-D X. */
static kiln_status sup_fused_pool(const kiln_graph *g, const kiln_node *n) {
    kiln_node base;
    KILN_TRY(kiln_fused_pool_base(n, &base));
    const kiln_value *x = kiln_node_input(g, n, 0);
    if (kiln_attr_int(n, "channels_last", 0) != 0 && x && x->ndim >= 0 && x->ndim != 4)
        return kiln_error(KILN_ERR_UNSUPPORTED, "FusedPool: channels-last rank-%d input", x->ndim);
    if (kiln_attr_int(n, "channels_last", 0) != 0 && x && !ku_is_float(x->dtype))
        return kiln_error(KILN_ERR_UNSUPPORTED, "FusedPool: channels-last %s input", kiln_dtype_name(x->dtype));
    return pool_sup(g, &base, strncmp(base.op_type, "Global", 6) != 0);
}

extern "C" const kiln_cuda_kernel kiln_cuda_kernels_pool[] = {
    {"MaxPool", "", exec_max_pool, sup_window},
    {"AveragePool", "", exec_average_pool, sup_window},
    {"LpPool", "", exec_lp_pool, sup_window},
    {"GlobalAveragePool", "", exec_global_average_pool, sup_global},
    {"GlobalMaxPool", "", exec_global_max_pool, sup_global},
    {"GlobalLpPool", "", exec_global_lp_pool, sup_global},
    {"FusedPool", KILN_FUSED_DOMAIN, exec_fused_pool, sup_fused_pool},
    {NULL, NULL, NULL, NULL},
};
