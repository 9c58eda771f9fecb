/* norm.cu — CUDA kernels of the normalization family: Softmax and LogSoftmax, LayerNormalization,
 * RMSNormalization, BatchNormalization (inference form), InstanceNormalization and
 * GroupNormalization, with the semantics of the CPU kernels (src/backends/cpu/nn.c, norm.c).
 * float32/float16/bfloat16 storage, every statistic in FP32.
 *
 * Softmax views X as (outer, len, inner) around its axis (before opset 13: coerced to 2-D, so len
 * spans dims [axis, rank) and inner = 1). Rows (inner == 1) get one warp each up to 1024 elements,
 * one block each beyond; each thread keeps an online (max, sum of exp) pair that the warp/block
 * combines, then a second pass writes the outputs. inner > 1 runs one thread per column, coalesced
 * across inner.
 *
 * The layer/instance/group/RMS norms are one row kernel: each normalized group of elements is a
 * contiguous row (LayerNorm: dims [axis, rank) of one index of the outer dims; InstanceNorm: one
 * (n, c) plane; GroupNorm: the channels of one (n, group)), one block per row, the row cached in
 * shared memory (as float) when it fits; mean, then variance from the deviations (two passes, as
 * the CPU does), then the affine output. Only the scale/bias indexing differs between the ops.
 * LayerNorm / RMSNorm rows of at most 8192 elements with an aligned, vectorizable layout and
 * per-element or scalar scale/bias take norm_rows_fast instead (same formulas, row in registers).
 *
 * kiln_cuda_norm_rows (cuda_launchers.h) is the row norm on plain parameters that both runtimes call:
 * the LayerNorm / RMSNorm nodes with per-element scale and bias, and the LLM forward's residual add +
 * norm (an FP32 residual stream plus a 16-bit delta, FP32 weights, gathered rows), which runs
 * norm_residual_rows: one block per row, tuned for the few rows of a decode step. */
#include "backends/cuda/cuda_launchers.h"
#include "backends/cuda/kernel_util.cuh"

#include <math.h>
#include <string.h>

#define NORM_SMEM_FLOATS 12000 /* rows up to this length are cached in shared memory (with the
                                 * static reduction scratch, under the 48 KB default limit) */

/* Stores float v as element i of p (float32/float16/bfloat16 dtype t). */
static __device__ __forceinline__ void store_float(void *p, kiln_dtype t, int64_t i, float v) {
    if (t == KILN_F32) ((float *)p)[i] = v;
    else if (t == KILN_F16) ((__half *)p)[i] = __float2half_rn(v);
    else ((bf16 *)p)[i] = __float2bfloat16_rn(v);
}

/* KILN_OK when inputs [0, count) of n are present and float tensors of input 0's dtype; optional
 * inputs past `required` may be absent. */
static kiln_status float_inputs(const kiln_graph *g, const kiln_node *n, int required, int count) {
    const kiln_value *x = ku_in(g, n, 0);
    if (!x) return kiln_error(KILN_ERR_INVALID_ARGUMENT, "%s: input 0 is missing", n->op_type);
    if (!ku_is_float(x->dtype)) return ku_refuse_dtype(n, 0, x->dtype);
    for (int i = 1; i < count; i++) {
        const kiln_value *v = ku_in(g, n, i);
        if (!v && i < required) return kiln_error(KILN_ERR_INVALID_ARGUMENT, "%s: input %d is missing", n->op_type, i);
        if (v && v->dtype != x->dtype) return ku_refuse_dtype(n, i, v->dtype);
    }
    return KILN_OK;
}

/* ================================================================ Softmax / LogSoftmax */

typedef struct sm_args {
    const void *x;
    void *y;
    int64_t outer, len, inner;
    bool log; /* LogSoftmax */
} sm_args;

/* Online softmax state: m the largest value seen (-inf: none), s the sum of exp(x - m). */
typedef struct sm_state {
    float m, s;
} sm_state;

static __device__ __forceinline__ void sm_add(sm_state &st, float x) {
    if (x > st.m) {
        st.s *= expf(st.m - x); /* 0 when m was -inf */
        st.m = x;
    }
    if (x != -INFINITY) st.s += expf(x - st.m); /* -inf adds nothing (and -inf - -inf would be NaN) */
}

static __device__ __forceinline__ sm_state sm_comb(sm_state a, sm_state b) {
    float m = fmaxf(a.m, b.m);
    float sa = a.s == 0.0f ? 0.0f : a.m == m ? a.s : a.s * expf(a.m - m);
    float sb = b.s == 0.0f ? 0.0f : b.m == m ? b.s : b.s * expf(b.m - m);
    return sm_state{m, sa + sb};
}

static __device__ __forceinline__ sm_state sm_warp(sm_state st) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        sm_state other{__shfl_xor_sync(0xffffffffu, st.m, o), __shfl_xor_sync(0xffffffffu, st.s, o)};
        st = sm_comb(st, other);
    }
    return st;
}

/* Output of element x given the row's state: exp(x - m) / s, or x - (m + log s). */
static __device__ __forceinline__ float sm_out(float x, sm_state st, float inv_or_lse, bool log) {
    return log ? x - inv_or_lse : expf(x - st.m) * inv_or_lse;
}

/* Folds row[0..len) (contiguous, T) into st by the `lanes` threads numbered `lane`; vec: row is
 * 16-byte aligned and len a multiple of the vector length. */
template <typename T>
static __device__ __forceinline__ void sm_fold_row(sm_state &st, const T *row, int64_t len, int lane, int lanes, bool vec) {
    if (vec) {
        const int V = ku_vec<T>::n;
        for (int64_t v = lane; v < len / V; v += lanes) {
            T e[V];
            ku_load(e, row + v * V);
#pragma unroll
            for (int k = 0; k < V; k++) sm_add(st, ku_f32(e[k]));
        }
    } else {
        for (int64_t j = lane; j < len; j += lanes) sm_add(st, ku_f32(row[j]));
    }
}

/* Writes the outputs of row[0..len) into out[0..len) (same layout as sm_fold_row). */
template <typename T>
static __device__ __forceinline__ void sm_write_row(const T *row, T *out, int64_t len, sm_state st, bool log, int lane,
                                                    int lanes, bool vec) {
    float k2 = log ? st.m + logf(st.s) : 1.0f / st.s;
    if (vec) {
        const int V = ku_vec<T>::n;
        for (int64_t v = lane; v < len / V; v += lanes) {
            T e[V];
            ku_load(e, row + v * V);
#pragma unroll
            for (int k = 0; k < V; k++) e[k] = ku_from_f32<T>(sm_out(ku_f32(e[k]), st, k2, log));
            ku_store(out + v * V, e);
        }
    } else {
        for (int64_t j = lane; j < len; j += lanes) out[j] = ku_from_f32<T>(sm_out(ku_f32(row[j]), st, k2, log));
    }
}

/* x, y are (outer, len) (inner == 1): one warp per row. */
template <typename T> __global__ void __launch_bounds__(KU_THREADS) sm_rows_warp(sm_args a, bool vec) {
    int lane = threadIdx.x & 31;
    int64_t warp = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) >> 5, nwarps = ((int64_t)gridDim.x * blockDim.x) >> 5;
    for (int64_t r = warp; r < a.outer; r += nwarps) {
        const T *row = (const T *)a.x + r * a.len;
        sm_state st{-INFINITY, 0.0f};
        sm_fold_row(st, row, a.len, lane, 32, vec);
        st = sm_warp(st);
        sm_write_row(row, (T *)a.y + r * a.len, a.len, st, a.log, lane, 32, vec);
    }
}

/* x, y are (outer, len) (inner == 1): one block per row. */
template <typename T> __global__ void __launch_bounds__(1024) sm_rows_block(sm_args a, bool vec) {
    __shared__ sm_state sh[32];
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    for (int64_t r = blockIdx.x; r < a.outer; r += gridDim.x) {
        const T *row = (const T *)a.x + r * a.len;
        sm_state st{-INFINITY, 0.0f};
        sm_fold_row(st, row, a.len, threadIdx.x, blockDim.x, vec);
        st = sm_warp(st);
        if (lane == 0) sh[warp] = st;
        __syncthreads();
        st = sh[0];
        for (int w = 1; w < nw; w++) st = sm_comb(st, sh[w]);
        __syncthreads();
        sm_write_row(row, (T *)a.y + r * a.len, a.len, st, a.log, threadIdx.x, blockDim.x, vec);
    }
}

/* x, y are (outer, len, inner) with inner > 1: one thread per (outer, inner) column. */
template <typename T> __global__ void __launch_bounds__(KU_THREADS) sm_cols(sm_args a) {
    int64_t cols = a.outer * a.inner, stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t c = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; c < cols; c += stride) {
        int64_t o = c / a.inner, i = c - o * a.inner, base = o * a.len * a.inner + i;
        const T *x = (const T *)a.x + base;
        T *y = (T *)a.y + base;
        sm_state st{-INFINITY, 0.0f};
        for (int64_t j = 0; j < a.len; j++) sm_add(st, ku_f32(x[j * a.inner]));
        float k2 = a.log ? st.m + logf(st.s) : 1.0f / st.s;
        for (int64_t j = 0; j < a.len; j++) y[j * a.inner] = ku_from_f32<T>(sm_out(ku_f32(x[j * a.inner]), st, k2, a.log));
    }
}

template <typename T> static kiln_status sm_go(const sm_args &a, kiln_cuda_ctx *ctx) {
    if (a.inner > 1) {
        sm_cols<T><<<ku_blocks(a.outer * a.inner, KU_THREADS, ctx), KU_THREADS, 0, ctx->stream>>>(a);
        KILN_CUDA_LAUNCH_CHECK("sm_cols");
        return KILN_OK;
    }
    bool vec = ku_aligned16(a.x) && ku_aligned16(a.y) && a.len % ku_vec<T>::n == 0;
    if (a.len <= 1024) {
        sm_rows_warp<T><<<ku_blocks(a.outer * 32, KU_THREADS, ctx), KU_THREADS, 0, ctx->stream>>>(a, vec);
        KILN_CUDA_LAUNCH_CHECK("sm_rows_warp");
    } else {
        int threads = a.len >= 16384 ? 1024 : 256;
        sm_rows_block<T><<<ku_blocks(a.outer * threads, threads, ctx), threads, 0, ctx->stream>>>(a, vec);
        KILN_CUDA_LAUNCH_CHECK("sm_rows_block");
    }
    return KILN_OK;
}

static kiln_status softmax_exec(bool log, const kiln_node *n, const kiln_cuda_tensor *in, int nin,
                                const kiln_cuda_tensor *out, kiln_cuda_ctx *ctx) {
    if (nin < 1 || ku_absent(&in[0])) return kiln_error(KILN_ERR_INVALID_ARGUMENT, "%s: input is missing", n->op_type);
    const kiln_cuda_tensor *x = &in[0];
    bool legacy = n->opset < 13;
    int64_t axis_attr = kiln_attr_int(n, "axis", legacy ? 1 : -1);
    int axis = 0;
    if (x->ndim > 0 && kiln_axis_normalize(axis_attr, x->ndim, &axis) != KILN_OK)
        return kiln_error(KILN_ERR_INVALID_ARGUMENT, "%s: axis %lld is out of range for an input of rank %d", n->op_type,
                          (long long)axis_attr, x->ndim);
    sm_args a;
    a.x = x->data;
    a.y = out[0].data;
    a.log = log;
    a.outer = kiln_numel(axis, x->dims);
    if (x->ndim == 0) {
        a.len = a.inner = 1;
    } else if (legacy) {
        a.len = kiln_numel(x->ndim - axis, x->dims + axis);
        a.inner = 1;
    } else {
        a.len = x->dims[axis];
        a.inner = kiln_numel(x->ndim - axis - 1, x->dims + axis + 1);
    }
    if (a.outer * a.len * a.inner == 0) return KILN_OK;
    switch (x->dtype) {
    case KILN_F32: return sm_go<float>(a, ctx);
    case KILN_F16: return sm_go<__half>(a, ctx);
    case KILN_BF16: return sm_go<bf16>(a, ctx);
    default: return ku_refuse_dtype(n, 0, x->dtype);
    }
}

static kiln_status softmax_run(const kiln_node *n, const kiln_cuda_tensor *in, int nin, const kiln_cuda_tensor *out,
                               int nout, kiln_cuda_ctx *ctx) {
    return softmax_exec(false, n, in, nin, out, ctx);
}
static kiln_status logsoftmax_run(const kiln_node *n, const kiln_cuda_tensor *in, int nin, const kiln_cuda_tensor *out,
                                  int nout, kiln_cuda_ctx *ctx) {
    return softmax_exec(true, n, in, nin, out, ctx);
}
static kiln_status softmax_supports(const kiln_graph *g, const kiln_node *n) { return float_inputs(g, n, 1, 1); }

/* ================================================================ row normalizations */

/* How scale or bias is indexed for element j of row r. */
enum {
    A_NONE,   /* absent: scale 1, bias 0 */
    A_ELEM,   /* p[j] */
    A_SCALAR, /* p[0] */
    A_ROW,    /* p[r % C] (InstanceNorm; GroupNorm before opset 21) */
    A_CHAN,   /* p[(r % C) * cg + j / plane] (GroupNorm from opset 21, C = groups) */
    A_BCAST,  /* p[sum of idx_d * stride_d] over x's dims (LayerNorm's general broadcast) */
};

typedef struct norm_args {
    const void *x;
    void *y;
    int64_t rows, len;
    float eps;
    bool rms;                  /* RMSNormalization: no centering */
    const void *scale, *bias;  /* x's dtype */
    int smode, bmode;
    int64_t C, cg, plane;      /* A_ROW / A_CHAN */
    int nd;                    /* A_BCAST: x's dims and the scale/bias strides in them */
    int64_t dims[KILN_MAX_DIMS], sstr[KILN_MAX_DIMS], bstr[KILN_MAX_DIMS];
    void *mean, *invstd;       /* optional per-row statistics (LayerNorm), dtypes below */
    kiln_dtype mean_t, invstd_t;
} norm_args;

/* Element index of scale or bias (mode m, strides st) for element j of row r. */
static __device__ __forceinline__ int64_t aff_index(const norm_args &a, int m, const int64_t *st, int64_t r, int64_t j) {
    switch (m) {
    case A_ELEM: return j;
    case A_ROW: return r % a.C;
    case A_CHAN: return (r % a.C) * a.cg + j / a.plane;
    case A_BCAST: {
        int64_t flat = r * a.len + j, off = 0;
        for (int d = a.nd - 1; d >= 0; d--) {
            int64_t q = flat / a.dims[d];
            off += (flat - q * a.dims[d]) * st[d];
            flat = q;
        }
        return off;
    }
    default: return 0;
    }
}

/* x, y are (rows, len): one block per row normalizes it (see the file comment); dynamic shared
 * memory holds the row as float when it is large enough for len. */
template <typename T> __global__ void __launch_bounds__(512) norm_rows(norm_args a, bool cached) {
    extern __shared__ float row_cache[];
    __shared__ float red[32];
    for (int64_t r = blockIdx.x; r < a.rows; r += gridDim.x) {
        const T *x = (const T *)a.x + r * a.len;
        T *y = (T *)a.y + r * a.len;
        float s = 0.0f;
        for (int64_t j = threadIdx.x; j < a.len; j += blockDim.x) {
            float v = ku_f32(x[j]);
            if (cached) row_cache[j] = v;
            s += a.rms ? v * v : v;
        }
        s = ku_block_sum(s, red);
        float mean = 0.0f, var;
        if (a.rms) {
            var = a.len ? s / (float)a.len : 0.0f;
        } else {
            mean = a.len ? s / (float)a.len : 0.0f;
            float d2 = 0.0f;
            for (int64_t j = threadIdx.x; j < a.len; j += blockDim.x) {
                float d = (cached ? row_cache[j] : ku_f32(x[j])) - mean;
                d2 += d * d;
            }
            d2 = ku_block_sum(d2, red);
            var = a.len ? d2 / (float)a.len : 0.0f;
        }
        float is = 1.0f / sqrtf(var + a.eps);
        for (int64_t j = threadIdx.x; j < a.len; j += blockDim.x) {
            float v = ((cached ? row_cache[j] : ku_f32(x[j])) - mean) * is;
            if (a.smode != A_NONE) v *= ku_f32(((const T *)a.scale)[aff_index(a, a.smode, a.sstr, r, j)]);
            if (a.bmode != A_NONE) v += ku_f32(((const T *)a.bias)[aff_index(a, a.bmode, a.bstr, r, j)]);
            y[j] = ku_from_f32<T>(v);
        }
        if (threadIdx.x == 0) {
            if (a.mean) store_float(a.mean, a.mean_t, r, mean);
            if (a.invstd) store_float(a.invstd, a.invstd_t, r, is);
        }
        __syncthreads(); /* the cache is rewritten by the next row */
    }
}

/* Fast path (LayerNorm / RMSNorm over contiguous rows, the common case): rows of at most
 * NORM_FAST_MAX elements, held in registers (at most NORM_FAST_ELEMS floats per thread), moved in
 * 16-byte vectors, 32-bit index math inside a row. One warp per row (BLOCK = false: rows up to
 * 32 * NORM_FAST_ELEMS elements, 8 rows per 256-thread block) or one block per row (BLOCK = true:
 * blockDim.x = ceil(len / NORM_FAST_ELEMS) rounded up to 32, at most 256). Same statistics as
 * norm_rows: mean = sum / len, var = sum of squared deviations / len (RMS: sum of squares / len),
 * is = 1 / sqrtf(var + eps), y = ((x - mean) * is) * scale + bias. Scale and bias are A_NONE,
 * A_SCALAR or A_ELEM (then 16-byte aligned); x, y 16-byte aligned and len a multiple of the vector
 * length (so every row starts aligned); rows <= INT32_MAX (the grid covers the rows). */
#define NORM_FAST_MAX 8192
#define NORM_FAST_ELEMS 32

template <typename T, bool BLOCK> __global__ void __launch_bounds__(256) norm_rows_fast(norm_args a, int len) {
    const int V = ku_vec<T>::n, VPT = NORM_FAST_ELEMS / V;
    __shared__ float red[32];
    int t, nt;
    unsigned r;
    if (BLOCK) {
        r = blockIdx.x;
        t = threadIdx.x;
        nt = blockDim.x;
    } else {
        r = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
        t = threadIdx.x & 31;
        nt = 32;
        if (r >= (unsigned)a.rows) return; /* the whole warp leaves together */
    }
    const int nvec = len / V;
    const T *x = (const T *)a.x + (size_t)r * (unsigned)len;
    T *y = (T *)a.y + (size_t)r * (unsigned)len;
    float v[VPT][V];
    float s = 0.0f;
#pragma unroll
    for (int k = 0; k < VPT; k++) {
        int vi = t + k * nt;
        if (vi < nvec) {
            T e[V];
            ku_load(e, x + vi * V);
#pragma unroll
            for (int q = 0; q < V; q++) {
                v[k][q] = ku_f32(e[q]);
                s += a.rms ? v[k][q] * v[k][q] : v[k][q];
            }
        } else {
#pragma unroll
            for (int q = 0; q < V; q++) v[k][q] = 0.0f;
        }
    }
    s = BLOCK ? ku_block_sum(s, red) : ku_warp_sum(s);
    float mean = 0.0f, var;
    if (a.rms) {
        var = s / (float)len;
    } else {
        mean = s / (float)len;
        float d2 = 0.0f;
#pragma unroll
        for (int k = 0; k < VPT; k++) {
            if (t + k * nt < nvec) {
#pragma unroll
                for (int q = 0; q < V; q++) {
                    float d = v[k][q] - mean;
                    d2 += d * d;
                }
            }
        }
        d2 = BLOCK ? ku_block_sum(d2, red) : ku_warp_sum(d2);
        var = d2 / (float)len;
    }
    float is = 1.0f / sqrtf(var + a.eps);
    const T *sc = (const T *)a.scale, *bi = (const T *)a.bias;
    float s0 = a.smode == A_SCALAR ? ku_f32(sc[0]) : 1.0f, b0 = a.bmode == A_SCALAR ? ku_f32(bi[0]) : 0.0f;
#pragma unroll
    for (int k = 0; k < VPT; k++) {
        int vi = t + k * nt;
        if (vi < nvec) {
            T sv[V], bv[V], o[V];
            if (a.smode == A_ELEM) ku_load(sv, sc + vi * V);
            if (a.bmode == A_ELEM) ku_load(bv, bi + vi * V);
#pragma unroll
            for (int q = 0; q < V; q++) {
                float w = (v[k][q] - mean) * is;
                if (a.smode != A_NONE) w *= a.smode == A_ELEM ? ku_f32(sv[q]) : s0;
                if (a.bmode != A_NONE) w += a.bmode == A_ELEM ? ku_f32(bv[q]) : b0;
                o[q] = ku_from_f32<T>(w);
            }
            ku_store(y + vi * V, o);
        }
    }
    if (t == 0) {
        if (a.mean) store_float(a.mean, a.mean_t, r, mean);
        if (a.invstd) store_float(a.invstd, a.invstd_t, r, is);
    }
}

/* Whether scale or bias (mode m, data p) suits norm_rows_fast. */
static bool norm_fast_affine(int m, const void *p) {
    return m == A_NONE || m == A_SCALAR || (m == A_ELEM && ku_aligned16(p));
}

template <typename T> static kiln_status norm_go(const norm_args &a, kiln_cuda_ctx *ctx) {
    const int V = ku_vec<T>::n;
    if (a.len > 0 && a.len <= NORM_FAST_MAX && a.len % V == 0 && a.rows <= 0x7fffffff && ku_aligned16(a.x) &&
        ku_aligned16(a.y) && norm_fast_affine(a.smode, a.scale) && norm_fast_affine(a.bmode, a.bias)) {
        int len = (int)a.len;
        if (len <= 32 * NORM_FAST_ELEMS) {
            unsigned blocks = (unsigned)((a.rows + 7) / 8);
            norm_rows_fast<T, false><<<blocks, 256, 0, ctx->stream>>>(a, len);
        } else {
            int threads = ((len + NORM_FAST_ELEMS - 1) / NORM_FAST_ELEMS + 31) / 32 * 32;
            norm_rows_fast<T, true><<<(unsigned)a.rows, threads, 0, ctx->stream>>>(a, len);
        }
        KILN_CUDA_LAUNCH_CHECK("norm_rows_fast");
        return KILN_OK;
    }
    int64_t per = (a.len + 3) / 4;
    int threads = (int)(per < 32 ? 32 : per > 512 ? 512 : (per + 31) / 32 * 32);
    bool cached = a.len <= NORM_SMEM_FLOATS;
    size_t smem = cached ? (size_t)a.len * sizeof(float) : 0;
    norm_rows<T><<<ku_blocks(a.rows * threads, threads, ctx, 2), threads, smem, ctx->stream>>>(a, cached);
    KILN_CUDA_LAUNCH_CHECK("norm_rows");
    return KILN_OK;
}

static kiln_status norm_run(kiln_dtype t, const norm_args &a, kiln_cuda_ctx *ctx) {
    if (a.rows == 0) return KILN_OK;
    switch (t) {
    case KILN_F32: return norm_go<float>(a, ctx);
    case KILN_F16: return norm_go<__half>(a, ctx);
    default: return norm_go<bf16>(a, ctx);
    }
}

/* ---------------------------------------------------------------- the shared launcher */

/* Lets a kernel launched after this one as a programmatic dependent launch start now (sm_90; a no-op
 * before, and for kernels launched plainly): it still waits for this kernel's end before touching its
 * inputs (griddepcontrol.wait), so the residual norms call this first thing, and the LLM decode's
 * next product fetches its weights while they run. */
static __device__ __forceinline__ void norm_launch_dependents() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

/* Waits for the kernel before this one to end, its writes visible (sm_90; returns at once before, and
 * for kernels launched plainly): the residual norms' first read follows it. */
static __device__ __forceinline__ void norm_wait_previous() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

/* The residual form of kiln_cuda_norm_rows: one block per output row; the row's len values (FP32
 * residual plus delta) live in shared memory between the passes. rms is uniform: every thread takes
 * the centering's block sum or none does. */
template <typename T>
__global__ void norm_residual_rows(float *__restrict__ x, const T *__restrict__ delta, const int32_t *__restrict__ gather,
                                   int len, int store, const float *__restrict__ w, float w_offset,
                                   const float *__restrict__ b, int rms, float eps, T *__restrict__ y) {
    extern __shared__ float row[];
    __shared__ float red[32];
    norm_launch_dependents();
    norm_wait_previous();
    const int r = blockIdx.x, t = gather ? gather[r] : r;
    float *xr = x + (size_t)t * len;
    const T *dr = delta ? delta + (size_t)t * len : NULL;
    float sum = 0.0f;
    for (int i = threadIdx.x; i < len; i += blockDim.x) {
        float v = xr[i] + (dr ? ku_f32(dr[i]) : 0.0f);
        if (store) xr[i] = v;
        row[i] = v;
        sum += v;
    }
    const float mean = rms ? 0.0f : ku_block_sum(sum, red) / (float)len;
    float sq = 0.0f;
    for (int i = threadIdx.x; i < len; i += blockDim.x) sq += (row[i] - mean) * (row[i] - mean);
    const float rs = rsqrtf(ku_block_sum(sq, red) / (float)len + eps);
    T *yr = y + (size_t)r * len;
    for (int i = threadIdx.x; i < len; i += blockDim.x)
        yr[i] = ku_from_f32<T>((row[i] - mean) * rs * (w[i] + w_offset) + (b ? b[i] : 0.0f));
}

#define NORM_RESIDUAL_THREADS 256

/* kernel<<<rows, NORM_RESIDUAL_THREADS, smem, stream>>>(args...), as a programmatic dependent launch
 * when pdl. */
template <typename... KArgs, typename... Args>
static cudaError_t nr_launch(void (*kernel)(KArgs...), int64_t rows, size_t smem, cudaStream_t stream, bool pdl,
                             Args... args) {
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3((unsigned)rows);
    cfg.blockDim = dim3(NORM_RESIDUAL_THREADS);
    cfg.dynamicSmemBytes = smem;
    cfg.stream = stream;
    cudaLaunchAttribute attr[1] = {};
    attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[0].val.programmaticStreamSerializationAllowed = 1;
    cfg.attrs = attr;
    cfg.numAttrs = pdl ? 1 : 0;
    return cudaLaunchKernelEx(&cfg, kernel, (KArgs)args...);
}

/* Four consecutive 16-bit values as floats (one 8-byte load) and back. */
template <typename T> static __device__ __forceinline__ float4 nr_load4(const T *p) {
    uint2 u = *(const uint2 *)p;
    const T *h = (const T *)&u;
    return make_float4(ku_f32(h[0]), ku_f32(h[1]), ku_f32(h[2]), ku_f32(h[3]));
}
template <typename T> static __device__ __forceinline__ void nr_store4(T *p, float4 v) {
    uint2 u;
    T *h = (T *)&u;
    h[0] = ku_from_f32<T>(v.x);
    h[1] = ku_from_f32<T>(v.y);
    h[2] = ku_from_f32<T>(v.z);
    h[3] = ku_from_f32<T>(v.w);
    *(uint2 *)p = u;
}

/* norm_residual_rows for rows of len = 4 n4 values with 16-byte aligned x, w and b and 8-byte aligned
 * delta and y: the row stays in registers (PER groups of 4 per thread, PER * blockDim.x >= n4) and
 * every load of a pass is issued before the first is used, so a row costs about one memory latency
 * per pass instead of one per element a thread visits (the decode step's few rows are latency-bound).
 * Same formulas as norm_residual_rows; the sums are formed in another order. */
template <typename T, int PER>
__global__ void __launch_bounds__(NORM_RESIDUAL_THREADS)
norm_residual_rows_vec(float *__restrict__ x, const T *__restrict__ delta, const int32_t *__restrict__ gather, int n4,
                       int store, const float *__restrict__ w, float w_offset, const float *__restrict__ b, int rms,
                       float eps, T *__restrict__ y) {
    __shared__ float red[32];
    norm_launch_dependents();
    norm_wait_previous();
    const int r = blockIdx.x, t = gather ? gather[r] : r;
    float4 *xr = (float4 *)(x + (size_t)t * 4 * n4);
    const T *dr = delta ? delta + (size_t)t * 4 * n4 : NULL;
    float4 v[PER];
    float sum = 0.0f;
#pragma unroll
    for (int j = 0; j < PER; j++) {
        const int i = threadIdx.x + j * NORM_RESIDUAL_THREADS;
        v[j] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        if (i < n4) {
            v[j] = xr[i];
            if (dr) {
                float4 d = nr_load4(dr + 4 * i);
                v[j].x += d.x, v[j].y += d.y, v[j].z += d.z, v[j].w += d.w;
            }
        }
    }
#pragma unroll
    for (int j = 0; j < PER; j++) {
        const int i = threadIdx.x + j * NORM_RESIDUAL_THREADS;
        if (i < n4) {
            if (store) xr[i] = v[j];
            sum += (v[j].x + v[j].y) + (v[j].z + v[j].w);
        }
    }
    const float len = 4.0f * (float)n4;
    const float mean = rms ? 0.0f : ku_block_sum(sum, red) / len;
    float sq = 0.0f;
#pragma unroll
    for (int j = 0; j < PER; j++)
        if (threadIdx.x + j * NORM_RESIDUAL_THREADS < n4) {
            float a = v[j].x - mean, c = v[j].y - mean, e = v[j].z - mean, f = v[j].w - mean;
            sq += (a * a + c * c) + (e * e + f * f);
        }
    const float rs = rsqrtf(ku_block_sum(sq, red) / len + eps);
    T *yr = y + (size_t)r * 4 * n4;
    const float4 *w4 = (const float4 *)w, *b4 = (const float4 *)b;
#pragma unroll
    for (int j = 0; j < PER; j++) {
        const int i = threadIdx.x + j * NORM_RESIDUAL_THREADS;
        if (i < n4) {
            float4 ww = w4[i], bb = b4 ? b4[i] : make_float4(0.0f, 0.0f, 0.0f, 0.0f), o;
            o.x = (v[j].x - mean) * rs * (ww.x + w_offset) + bb.x;
            o.y = (v[j].y - mean) * rs * (ww.y + w_offset) + bb.y;
            o.z = (v[j].z - mean) * rs * (ww.z + w_offset) + bb.z;
            o.w = (v[j].w - mean) * rs * (ww.w + w_offset) + bb.w;
            nr_store4(yr + 4 * i, o);
        }
    }
}

/* Launches norm_residual_rows_vec<T, PER> over a's rows of 4 n4 values. */
template <typename T, int PER> static cudaError_t nr_vec_launch(const kiln_cuda_norm *a, int n4, cudaStream_t stream) {
    return nr_launch(norm_residual_rows_vec<T, PER>, a->rows, 0, stream, a->pdl, (float *)a->x, (const T *)a->delta,
                     a->gather, n4, a->store ? 1 : 0, (const float *)a->scale, a->scale_offset, (const float *)a->bias,
                     a->rms ? 1 : 0, a->eps, (T *)a->y);
}
/* Launches norm_residual_rows_vec for a when its layout allows it (len a multiple of 4, at most
 * 12 x 4 x NORM_RESIDUAL_THREADS, aligned arrays): *launched says whether it did (if not, the scalar
 * kernel runs); returns the launch's error. */
template <typename T> static cudaError_t norm_residual_vec(const kiln_cuda_norm *a, cudaStream_t stream, bool *launched) {
    const uintptr_t a16 = (uintptr_t)a->x | (uintptr_t)a->scale | (uintptr_t)a->bias;
    const uintptr_t a8 = (uintptr_t)a->delta | (uintptr_t)a->y;
    const int n4 = (int)(a->len / 4), per = (n4 + NORM_RESIDUAL_THREADS - 1) / NORM_RESIDUAL_THREADS;
    *launched = !(a->len % 4 || (a16 & 15) || (a8 & 7)) && per <= 12;
    if (!*launched) return cudaSuccess;
    if (per <= 1) return nr_vec_launch<T, 1>(a, n4, stream);
    if (per <= 2) return nr_vec_launch<T, 2>(a, n4, stream);
    if (per <= 4) return nr_vec_launch<T, 4>(a, n4, stream);
    if (per <= 8) return nr_vec_launch<T, 8>(a, n4, stream);
    return nr_vec_launch<T, 12>(a, n4, stream);
}

template <typename T> static kiln_status norm_residual_go(const kiln_cuda_norm *a, cudaStream_t stream) {
    bool vec = false;
    KILN_CUDA_TRY(norm_residual_vec<T>(a, stream, &vec));
    if (vec) return KILN_OK;
    static unsigned long long opted; /* rows up to the longest: past 48 KB with the static reduction */
    KILN_TRY(ku_smem_opt_in(norm_residual_rows<T>, (size_t)KILN_CUDA_NORM_RESIDUAL_MAX_LEN * sizeof(float), false, &opted,
                            stream));
    KILN_CUDA_TRY(nr_launch(norm_residual_rows<T>, a->rows, (size_t)a->len * sizeof(float), stream, a->pdl, (float *)a->x,
                            (const T *)a->delta, a->gather, (int)a->len, a->store ? 1 : 0, (const float *)a->scale,
                            a->scale_offset, (const float *)a->bias, a->rms ? 1 : 0, a->eps, (T *)a->y));
    return KILN_OK;
}

extern "C" kiln_status kiln_cuda_norm_rows(const kiln_cuda_norm *a, cudaStream_t stream) {
    const bool half = a->dtype == KILN_F16 || a->dtype == KILN_BF16;
    if (a->rows < 0 || a->len < 1 || !a->x || !a->y || (a->rms && a->bias))
        return kiln_error(KILN_ERR_INVALID_ARGUMENT, "norm rows: %lld rows of %lld%s: bad arguments", (long long)a->rows,
                          (long long)a->len, a->rms && a->bias ? " (RMS with a bias)" : "");
    if (a->residual) {
        if (!half || a->len > KILN_CUDA_NORM_RESIDUAL_MAX_LEN || a->rows > 0x7fffffff || !a->scale)
            return kiln_error(KILN_ERR_INVALID_ARGUMENT, "norm rows (residual): %s rows of %lld values (F16 or BF16, 1..%d, "
                              "with a scale) are not supported", kiln_dtype_name(a->dtype), (long long)a->len,
                              KILN_CUDA_NORM_RESIDUAL_MAX_LEN);
        if (a->rows == 0) return KILN_OK;
        return a->dtype == KILN_F16 ? norm_residual_go<__half>(a, stream) : norm_residual_go<bf16>(a, stream);
    }
    if ((!half && a->dtype != KILN_F32) || a->delta || a->gather || a->store || a->scale_offset != 0.0f)
        return kiln_error(KILN_ERR_INVALID_ARGUMENT, "norm rows: %s rows with a delta, gather, store or scale offset "
                          "need the residual form", kiln_dtype_name(a->dtype));
    norm_args na;
    memset(&na, 0, sizeof na);
    na.x = a->x;
    na.y = a->y;
    na.rows = a->rows;
    na.len = a->len;
    na.eps = a->eps;
    na.rms = a->rms;
    na.scale = a->scale;
    na.bias = a->bias;
    na.smode = a->scale ? A_ELEM : A_NONE;
    na.bmode = a->bias ? A_ELEM : A_NONE;
    kiln_cuda_ctx kc;
    memset(&kc, 0, sizeof kc);
    kc.stream = stream;
    kc.sm_count = a->sm_count;
    return norm_run(a->dtype, na, &kc);
}

/* Fails unless tensor t (input i of n) has `count` elements. */
static kiln_status check_count(const kiln_node *n, const kiln_cuda_tensor *t, int i, int64_t count) {
    if (ku_numel(t) == count) return KILN_OK;
    return kiln_error(KILN_ERR_SHAPE, "%s: input %d has %lld values, expected %lld", n->op_type, i,
                      (long long)ku_numel(t), (long long)count);
}

/* ---------------------------------------------------------------- LayerNormalization, RMSNormalization */

/* The indexing mode of LayerNorm's scale or bias t (input i), which broadcasts to x's shape
 * (unidirectionally): its own row of `len` values, one value, or the general strided form. */
static kiln_status ln_affine(const kiln_node *n, const kiln_cuda_tensor *t, int i, const kiln_cuda_tensor *x, int axis,
                             int64_t len, int *mode, int64_t *strides) {
    if (t->ndim > x->ndim) return kiln_error(KILN_ERR_SHAPE, "%s: input %d has a higher rank than X", n->op_type, i);
    for (int d = 0; d < t->ndim; d++) {
        int64_t td = t->dims[d], xd = x->dims[x->ndim - t->ndim + d];
        if (td != 1 && td != xd) return kiln_error(KILN_ERR_SHAPE, "%s: input %d cannot be broadcast to X", n->op_type, i);
    }
    kiln_broadcast_strides(t->ndim, t->dims, x->ndim, x->dims, strides);
    bool outer_zero = true;
    for (int d = 0; d < axis; d++) outer_zero = outer_zero && strides[d] == 0;
    int64_t numel = ku_numel(t);
    *mode = numel == 1 ? A_SCALAR : outer_zero && numel == len ? A_ELEM : A_BCAST;
    return KILN_OK;
}

/* LayerNormalization (rms = false) or RMSNormalization over dims [axis, rank); LayerNorm's optional
 * outputs Mean and InvStdDev have shape dims[0, axis) followed by ones. */
static kiln_status layer_exec(bool rms, const kiln_node *n, const kiln_cuda_tensor *in, int nin,
                              const kiln_cuda_tensor *out, int nout, kiln_cuda_ctx *ctx) {
    if (nin < 2 || ku_absent(&in[0]) || ku_absent(&in[1]))
        return kiln_error(KILN_ERR_INVALID_ARGUMENT, "%s: inputs X and scale are required", n->op_type);
    const kiln_cuda_tensor *x = &in[0];
    if (x->ndim < 1) return kiln_error(KILN_ERR_SHAPE, "%s input must have rank >= 1", n->op_type);
    int axis;
    KILN_TRY(kiln_axis_normalize(kiln_attr_int(n, "axis", -1), x->ndim, &axis));
    norm_args a;
    memset(&a, 0, sizeof a);
    a.x = x->data;
    a.y = out[0].data;
    a.rows = kiln_numel(axis, x->dims);
    a.len = kiln_numel(x->ndim - axis, x->dims + axis);
    a.eps = kiln_attr_float(n, "epsilon", 1e-5f);
    a.rms = rms;
    a.nd = x->ndim;
    memcpy(a.dims, x->dims, sizeof a.dims);
    a.scale = in[1].data;
    KILN_TRY(ln_affine(n, &in[1], 1, x, axis, a.len, &a.smode, a.sstr));
    if (!rms && nin > 2 && !ku_absent(&in[2])) {
        a.bias = in[2].data;
        KILN_TRY(ln_affine(n, &in[2], 2, x, axis, a.len, &a.bmode, a.bstr));
    }
    if (!rms && nout > 1 && !ku_absent(&out[1])) {
        a.mean = out[1].data;
        a.mean_t = out[1].dtype;
    }
    if (!rms && nout > 2 && !ku_absent(&out[2])) {
        a.invstd = out[2].data;
        a.invstd_t = out[2].dtype;
    }
    if (a.len == 0 && !a.mean && !a.invstd) return KILN_OK;
    if (a.smode == A_ELEM && (a.bmode == A_ELEM || a.bmode == A_NONE) && !a.mean && !a.invstd && a.len > 0) {
        kiln_cuda_norm plain;
        memset(&plain, 0, sizeof plain);
        plain.dtype = x->dtype;
        plain.rms = rms;
        plain.rows = a.rows;
        plain.len = a.len;
        plain.x = (void *)a.x;
        plain.scale = a.scale;
        plain.bias = a.bias;
        plain.eps = a.eps;
        plain.y = a.y;
        plain.sm_count = ctx->sm_count;
        return kiln_cuda_norm_rows(&plain, ctx->stream);
    }
    return norm_run(x->dtype, a, ctx);
}

static kiln_status layernorm_run(const kiln_node *n, const kiln_cuda_tensor *in, int nin, const kiln_cuda_tensor *out,
                                 int nout, kiln_cuda_ctx *ctx) {
    return layer_exec(false, n, in, nin, out, nout, ctx);
}
static kiln_status rmsnorm_run(const kiln_node *n, const kiln_cuda_tensor *in, int nin, const kiln_cuda_tensor *out,
                               int nout, kiln_cuda_ctx *ctx) {
    return layer_exec(true, n, in, nin, out, nout, ctx);
}

/* X, scale (and LayerNorm's optional bias) float of one dtype; Mean / InvStdDev outputs float;
 * stash_type a float type. */
static kiln_status layer_supports(const kiln_graph *g, const kiln_node *n) {
    bool rms = !strcmp(n->op_type, "RMSNormalization");
    KILN_TRY(float_inputs(g, n, 2, rms ? 2 : 3));
    int64_t stash = kiln_attr_int(n, "stash_type", KILN_F32);
    if (stash != KILN_F32 && stash != KILN_F64 && stash != KILN_F16 && stash != KILN_BF16)
        return kiln_error(KILN_ERR_INVALID_ARGUMENT, "%s: stash_type %lld is not a float type", n->op_type, (long long)stash);
    for (int i = 1; i < n->noutputs && !rms; i++) {
        const kiln_value *o = ku_out(g, n, i);
        if (o && !ku_is_float(o->dtype))
            return kiln_error(KILN_ERR_UNSUPPORTED, "%s (cuda): output %d of dtype %s is not supported", n->op_type, i,
                              kiln_dtype_name(o->dtype));
    }
    return KILN_OK;
}

/* ---------------------------------------------------------------- InstanceNormalization, GroupNormalization */

/* X [N, C, ...] as N, C and the plane size; fails unless rank >= 2. */
static kiln_status nc_planes(const kiln_node *n, const kiln_cuda_tensor *x, int64_t *N, int64_t *C, int64_t *plane) {
    if (x->ndim < 2) return kiln_error(KILN_ERR_SHAPE, "%s input must have rank >= 2, has rank %d", n->op_type, x->ndim);
    *N = x->dims[0];
    *C = x->dims[1];
    *plane = kiln_numel(x->ndim - 2, x->dims + 2);
    return KILN_OK;
}

/* InstanceNormalization: per (n, c) plane, y = scale[c] (x - mean) / sqrt(var + eps) + B[c]. */
static kiln_status instancenorm_run(const kiln_node *n, const kiln_cuda_tensor *in, int nin, const kiln_cuda_tensor *out,
                                    int nout, kiln_cuda_ctx *ctx) {
    if (nin < 3 || ku_absent(&in[0]) || ku_absent(&in[1]) || ku_absent(&in[2]))
        return kiln_error(KILN_ERR_INVALID_ARGUMENT, "InstanceNormalization: needs inputs X, scale and B");
    int64_t N = 0, C = 0, plane = 0;
    KILN_TRY(nc_planes(n, &in[0], &N, &C, &plane));
    KILN_TRY(check_count(n, &in[1], 1, C));
    KILN_TRY(check_count(n, &in[2], 2, C));
    norm_args a;
    memset(&a, 0, sizeof a);
    a.x = in[0].data;
    a.y = out[0].data;
    a.rows = N * C;
    a.len = plane;
    a.eps = kiln_attr_float(n, "epsilon", 1e-5f);
    a.scale = in[1].data;
    a.bias = in[2].data;
    a.smode = a.bmode = A_ROW;
    a.C = C;
    if (plane == 0) return KILN_OK;
    return norm_run(in[0].dtype, a, ctx);
}

/* GroupNormalization: statistics per (n, group of C / num_groups channels); scale and bias per
 * group (opset 18) or per channel (opset 21). */
static kiln_status groupnorm_run(const kiln_node *n, const kiln_cuda_tensor *in, int nin, const kiln_cuda_tensor *out,
                                 int nout, kiln_cuda_ctx *ctx) {
    if (nin < 3 || ku_absent(&in[0]) || ku_absent(&in[1]) || ku_absent(&in[2]))
        return kiln_error(KILN_ERR_INVALID_ARGUMENT, "GroupNormalization: needs inputs X, scale and bias");
    int64_t N = 0, C = 0, plane = 0, G = kiln_attr_int(n, "num_groups", 0);
    KILN_TRY(nc_planes(n, &in[0], &N, &C, &plane));
    if (G < 1 || C % G)
        return kiln_error(KILN_ERR_SHAPE, "GroupNormalization: %lld channels cannot be split in %lld groups",
                          (long long)C, (long long)G);
    bool per_channel = n->opset >= 21;
    KILN_TRY(check_count(n, &in[1], 1, per_channel ? C : G));
    KILN_TRY(check_count(n, &in[2], 2, per_channel ? C : G));
    norm_args a;
    memset(&a, 0, sizeof a);
    a.x = in[0].data;
    a.y = out[0].data;
    a.rows = N * G;
    a.cg = C / G;
    a.plane = plane;
    a.len = a.cg * plane;
    a.eps = kiln_attr_float(n, "epsilon", 1e-5f);
    a.scale = in[1].data;
    a.bias = in[2].data;
    a.smode = a.bmode = per_channel ? A_CHAN : A_ROW;
    a.C = G;
    if (a.len == 0) return KILN_OK;
    return norm_run(in[0].dtype, a, ctx);
}

static kiln_status planes_supports(const kiln_graph *g, const kiln_node *n) {
    if (!strcmp(n->op_type, "GroupNormalization") && kiln_attr_int(n, "num_groups", 0) < 1)
        return kiln_error(KILN_ERR_INVALID_ARGUMENT, "GroupNormalization: attribute num_groups must be >= 1");
    return float_inputs(g, n, 3, 3);
}

/* ================================================================ BatchNormalization */

typedef struct bn_args {
    const void *x;
    void *y;
    const void *scale, *bias, *mean, *var; /* x's dtype, per channel (or per element of [C, D...]) */
    int64_t n, C, plane;
    float eps;
    bool spatial;
} bn_args;

/* y = x * a + b for parameter p, a = scale / sqrt(var + eps), b = bias - mean * a. */
template <typename T> static __device__ __forceinline__ void bn_coef(const bn_args &g, int64_t p, float *a, float *b) {
    float s = ku_f32(((const T *)g.scale)[p]) / sqrtf(ku_f32(((const T *)g.var)[p]) + g.eps);
    *a = s;
    *b = ku_f32(((const T *)g.bias)[p]) - ku_f32(((const T *)g.mean)[p]) * s;
}

/* x, y are (N, C, plane), spatial: one block per (n, c) plane, which computes its coefficients once. */
template <typename T> __global__ void __launch_bounds__(KU_THREADS) bn_planes(bn_args g) {
    int64_t planes = g.n / g.plane;
    for (int64_t pl = blockIdx.x; pl < planes; pl += gridDim.x) {
        float a, b;
        bn_coef<T>(g, pl % g.C, &a, &b);
        const T *x = (const T *)g.x + pl * g.plane;
        T *y = (T *)g.y + pl * g.plane;
        for (int64_t j = threadIdx.x; j < g.plane; j += blockDim.x) y[j] = ku_from_f32<T>(ku_f32(x[j]) * a + b);
    }
}

/* x, y are n elements of (N, C, plane): the parameter index is the channel (spatial) or the
 * position in [C, plane] (opset < 9 with spatial = 0). */
template <typename T> __global__ void __launch_bounds__(KU_THREADS) bn_flat(bn_args g) {
    int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < g.n; i += stride) {
        int64_t p = g.spatial ? (i / g.plane) % g.C : i % (g.C * g.plane);
        float a, b;
        bn_coef<T>(g, p, &a, &b);
        ((T *)g.y)[i] = ku_from_f32<T>(ku_f32(((const T *)g.x)[i]) * a + b);
    }
}

template <typename T> static kiln_status bn_go(const bn_args &g, kiln_cuda_ctx *ctx) {
    if (g.spatial && g.plane >= 32) {
        int threads = g.plane >= KU_THREADS ? KU_THREADS : (int)((g.plane + 31) / 32 * 32);
        bn_planes<T><<<ku_blocks(g.n / g.plane * threads, threads, ctx, 2), threads, 0, ctx->stream>>>(g);
        KILN_CUDA_LAUNCH_CHECK("bn_planes");
    } else {
        bn_flat<T><<<ku_blocks(g.n, KU_THREADS, ctx), KU_THREADS, 0, ctx->stream>>>(g);
        KILN_CUDA_LAUNCH_CHECK("bn_flat");
    }
    return KILN_OK;
}

/* BatchNormalization, inference form: Y = scale * (X - mean) / sqrt(var + eps) + B per channel. */
static kiln_status batchnorm_run(const kiln_node *n, const kiln_cuda_tensor *in, int nin, const kiln_cuda_tensor *out,
                                 int nout, kiln_cuda_ctx *ctx) {
    if (nin < 5) return kiln_error(KILN_ERR_INVALID_ARGUMENT, "BatchNormalization: needs 5 inputs");
    for (int i = 0; i < 5; i++)
        if (ku_absent(&in[i])) return kiln_error(KILN_ERR_INVALID_ARGUMENT, "BatchNormalization: input %d is missing", i);
    int64_t N = 0, C = 0, plane = 0;
    KILN_TRY(nc_planes(n, &in[0], &N, &C, &plane));
    bn_args g;
    g.spatial = n->opset >= 9 || kiln_attr_int(n, "spatial", 1) != 0;
    for (int i = 1; i < 5; i++) KILN_TRY(check_count(n, &in[i], i, g.spatial ? C : C * plane));
    g.x = in[0].data;
    g.y = out[0].data;
    g.scale = in[1].data;
    g.bias = in[2].data;
    g.mean = in[3].data;
    g.var = in[4].data;
    g.n = N * C * plane;
    g.C = C;
    g.plane = plane;
    g.eps = kiln_attr_float(n, "epsilon", 1e-5f);
    if (g.n == 0) return KILN_OK;
    switch (in[0].dtype) {
    case KILN_F32: return bn_go<float>(g, ctx);
    case KILN_F16: return bn_go<__half>(g, ctx);
    default: return bn_go<bf16>(g, ctx);
    }
}

/* The inference form only: training_mode 0 and no running-statistics outputs. */
static kiln_status batchnorm_supports(const kiln_graph *g, const kiln_node *n) {
    if (n->opset >= 14 && kiln_attr_int(n, "training_mode", 0) != 0)
        return kiln_error(KILN_ERR_UNSUPPORTED, "BatchNormalization with training_mode=1 is not supported (kiln runs "
                                                "inference only)");
    for (int i = 1; i < n->noutputs; i++)
        if (ku_out(g, n, i))
            return kiln_error(KILN_ERR_UNSUPPORTED, "BatchNormalization in training form (output %d requested) is not "
                                                    "supported (kiln runs inference only)", i);
    return float_inputs(g, n, 5, 5);
}

/* ================================================================ table */

extern "C" const kiln_cuda_kernel kiln_cuda_kernels_norm[] = {
    {"Softmax", "", softmax_run, softmax_supports},
    {"LogSoftmax", "", logsoftmax_run, softmax_supports},
    {"LayerNormalization", "", layernorm_run, layer_supports},
    {"RMSNormalization", "", rmsnorm_run, layer_supports},
    {"BatchNormalization", "", batchnorm_run, batchnorm_supports},
    {"InstanceNormalization", "", instancenorm_run, planes_supports},
    {"GroupNormalization", "", groupnorm_run, planes_supports},
    {NULL, NULL, NULL, NULL},
};
