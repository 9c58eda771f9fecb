/* movement_gather_scatter.cu — CUDA kernels of the indexed data-movement ops: Gather,
 * GatherElements, GatherND, ScatterND, ScatterElements (and Scatter, its opset 9-10 name).
 *
 * Index operands live on the device and are read there: negative indices wrap once, and an index
 * still outside [0, dim) is CLAMPED to the nearest valid one (a kernel cannot report an error without
 * a host synchronization; clamping keeps every access in bounds — the CPU backend rejects such
 * indices instead). */
#include "backends/cuda/movement_util.cuh"

/* ---------------------------------------------------------------------------------------------
 * Gather, GatherElements, GatherND
 * ------------------------------------------------------------------------------------------- */

/* Index v (negative counts from the end) into a dimension of size dim > 0, clamped into range. */
__device__ __forceinline__ int64_t mv_index(int64_t v, int64_t dim) {
    if (v < 0) v += dim;
    return v < 0 ? 0 : v >= dim ? dim - 1 : v;
}

/* Gather: x is (outer, adim, inner), idx has nidx entries, y is (outer, nidx, inner); units of T. */
template <typename T, typename IDX>
__global__ void mv_gather_kernel(const T *__restrict__ x, const IDX *__restrict__ idx, T *__restrict__ y, int64_t nidx,
                                 int64_t adim, int64_t inner, int64_t total) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += (int64_t)gridDim.x * blockDim.x) {
        int64_t u = i % inner, t = i / inner, j = t % nidx, o = t / nidx;
        int64_t v = mv_index((int64_t)idx[j], adim);
        y[i] = x[(o * adim + v) * inner + u];
    }
}

/* The widest unit (<= 16 bytes, a multiple of es) dividing run bytes and the given addresses. */
static size_t mv_unit(size_t es, int64_t run, const void *a, const void *b) {
    for (size_t u = 16; u > es; u /= 2)
        if ((uint64_t)run * es % u == 0 && (uintptr_t)a % u == 0 && (uintptr_t)b % u == 0) return u;
    return es;
}

template <typename T>
static kiln_status mv_launch_gather(kiln_cuda_ctx *ctx, const kiln_cuda_tensor *idx, const void *x, void *y, int64_t nidx,
                                    int64_t adim, int64_t inner, int64_t total) {
    unsigned blocks = ku_blocks(total, KU_THREADS, ctx);
    if (idx->dtype == KILN_I64)
        mv_gather_kernel<T, int64_t><<<blocks, KU_THREADS, 0, ctx->stream>>>((const T *)x, (const int64_t *)idx->data,
                                                                              (T *)y, nidx, adim, inner, total);
    else
        mv_gather_kernel<T, int32_t><<<blocks, KU_THREADS, 0, ctx->stream>>>((const T *)x, (const int32_t *)idx->data,
                                                                              (T *)y, nidx, adim, inner, total);
    KILN_CUDA_LAUNCH_CHECK("mv_gather_kernel");
    return KILN_OK;
}

static kiln_status exec_gather(const kiln_node *n, const kiln_cuda_tensor *in, int nin, const kiln_cuda_tensor *out,
                               int nout, kiln_cuda_ctx *ctx) {
    const kiln_cuda_tensor *x = &in[0], *idx = &in[1], *y = &out[0];
    int axis = 0;
    if (x->ndim < 1) return kiln_error(KILN_ERR_SHAPE, "Gather: data must have rank >= 1");
    KILN_TRY(kiln_axis_normalize(kiln_attr_int(n, "axis", 0), x->ndim, &axis));
    int64_t nidx = ku_numel(idx), adim = x->dims[axis];
    int64_t outer = kiln_numel(axis, x->dims), inner = kiln_numel(x->ndim - axis - 1, x->dims + axis + 1);
    int64_t total = outer * nidx * inner;
    if (ku_numel(y) != total)
        return kiln_error(KILN_ERR_SHAPE, "Gather: output has %lld elements, expected %lld", (long long)ku_numel(y),
                          (long long)total);
    if (!total) return KILN_OK;
    if (adim == 0) return kiln_error(KILN_ERR_INVALID_ARGUMENT, "Gather: indices into an empty axis");
    size_t es = kiln_dtype_size(x->dtype), u = mv_unit(es, inner, x->data, y->data);
    int64_t f = (int64_t)(u / es);
    inner /= f;
    total /= f;
    switch (u) {
    case 1: return mv_launch_gather<uint8_t>(ctx, idx, x->data, y->data, nidx, adim, inner, total);
    case 2: return mv_launch_gather<uint16_t>(ctx, idx, x->data, y->data, nidx, adim, inner, total);
    case 4: return mv_launch_gather<uint32_t>(ctx, idx, x->data, y->data, nidx, adim, inner, total);
    case 8: return mv_launch_gather<unsigned long long>(ctx, idx, x->data, y->data, nidx, adim, inner, total);
    default: return mv_launch_gather<uint4>(ctx, idx, x->data, y->data, nidx, adim, inner, total);
    }
}

static kiln_status sup_gather(const kiln_graph *g, const kiln_node *n) {
    KILN_TRY(mv_sup_dtype(g, n, 0));
    return mv_sup_index(g, n, 1);
}

typedef struct mv_elems {
    int r, axis;
    int64_t idims[KILN_MAX_DIMS], xs[KILN_MAX_DIMS];
} mv_elems;

/* GatherElements: y (dims p.idims) [j] = x at j's coordinates with the axis one replaced by idx[j]. */
template <typename T, typename IDX>
__global__ void mv_gather_elements_kernel(const T *__restrict__ x, const IDX *__restrict__ idx, T *__restrict__ y,
                                          mv_elems p, int64_t adim, int64_t total) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += (int64_t)gridDim.x * blockDim.x) {
        int64_t rem = i, off = 0;
        for (int d = p.r - 1; d >= 0; d--) {
            int64_t q = rem / p.idims[d], c = rem - q * p.idims[d];
            rem = q;
            if (d != p.axis) off += c * p.xs[d];
        }
        off += mv_index((int64_t)idx[i], adim) * p.xs[p.axis];
        y[i] = x[off];
    }
}

template <typename T>
static kiln_status mv_launch_gather_elements(kiln_cuda_ctx *ctx, const kiln_cuda_tensor *idx, const void *x, void *y,
                                             const mv_elems *p, int64_t adim, int64_t total) {
    unsigned blocks = ku_blocks(total, KU_THREADS, ctx);
    if (idx->dtype == KILN_I64)
        mv_gather_elements_kernel<T, int64_t><<<blocks, KU_THREADS, 0, ctx->stream>>>(
            (const T *)x, (const int64_t *)idx->data, (T *)y, *p, adim, total);
    else
        mv_gather_elements_kernel<T, int32_t><<<blocks, KU_THREADS, 0, ctx->stream>>>(
            (const T *)x, (const int32_t *)idx->data, (T *)y, *p, adim, total);
    KILN_CUDA_LAUNCH_CHECK("mv_gather_elements_kernel");
    return KILN_OK;
}

static kiln_status exec_gather_elements(const kiln_node *n, const kiln_cuda_tensor *in, int nin, const kiln_cuda_tensor *out,
                                        int nout, kiln_cuda_ctx *ctx) {
    const kiln_cuda_tensor *x = &in[0], *idx = &in[1], *y = &out[0];
    mv_elems p;
    if (idx->ndim != x->ndim || x->ndim < 1)
        return kiln_error(KILN_ERR_SHAPE, "GatherElements: data (rank %d) and indices (rank %d) must have the same rank >= 1",
                          x->ndim, idx->ndim);
    KILN_TRY(kiln_axis_normalize(kiln_attr_int(n, "axis", 0), x->ndim, &p.axis));
    for (int i = 0; i < x->ndim; i++)
        if (i != p.axis && idx->dims[i] > x->dims[i])
            return kiln_error(KILN_ERR_SHAPE, "GatherElements: indices dimension %d (%lld) exceeds data's (%lld)", i,
                              (long long)idx->dims[i], (long long)x->dims[i]);
    int64_t total = ku_numel(idx), adim = x->dims[p.axis];
    if (ku_numel(y) != total) return kiln_error(KILN_ERR_SHAPE, "GatherElements: output and indices differ in size");
    if (!total) return KILN_OK;
    if (adim == 0) return kiln_error(KILN_ERR_INVALID_ARGUMENT, "GatherElements: indices into an empty axis");
    p.r = x->ndim;
    memcpy(p.idims, idx->dims, sizeof p.idims);
    kiln_strides(x->ndim, x->dims, p.xs);
    switch (kiln_dtype_size(x->dtype)) {
    case 1: return mv_launch_gather_elements<uint8_t>(ctx, idx, x->data, y->data, &p, adim, total);
    case 2: return mv_launch_gather_elements<uint16_t>(ctx, idx, x->data, y->data, &p, adim, total);
    case 4: return mv_launch_gather_elements<uint32_t>(ctx, idx, x->data, y->data, &p, adim, total);
    case 8: return mv_launch_gather_elements<unsigned long long>(ctx, idx, x->data, y->data, &p, adim, total);
    default: return mv_launch_gather_elements<uint4>(ctx, idx, x->data, y->data, &p, adim, total);
    }
}

/* Index tuples into x: tuple t (of `last` entries) addresses dims xd[0..last) with strides xs
 * (in units), after a batch offset (t / per_batch) * batch_stride. */
typedef struct mv_tuples {
    int last;
    int64_t per_batch, batch_stride;
    int64_t xd[KILN_MAX_DIMS], xs[KILN_MAX_DIMS];
} mv_tuples;

template <typename IDX>
__device__ __forceinline__ int64_t mv_tuple_offset(const IDX *idx, const mv_tuples &p, int64_t t) {
    int64_t off = (t / p.per_batch) * p.batch_stride;
    for (int k = 0; k < p.last; k++) off += mv_index((int64_t)idx[t * p.last + k], p.xd[k]) * p.xs[k];
    return off;
}

/* GatherND: y is (tuples, slice) units; y[t, e] = x[offset(t) + e]. */
template <typename T, typename IDX>
__global__ void mv_gather_nd_kernel(const T *__restrict__ x, const IDX *__restrict__ idx, T *__restrict__ y, mv_tuples p,
                                    int64_t slice, int64_t total) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += (int64_t)gridDim.x * blockDim.x) {
        int64_t t = i / slice, e = i - t * slice;
        y[i] = x[mv_tuple_offset(idx, p, t) + e];
    }
}

template <typename T>
static kiln_status mv_launch_gather_nd(kiln_cuda_ctx *ctx, const kiln_cuda_tensor *idx, const void *x, void *y,
                                       const mv_tuples *p, int64_t slice, int64_t total) {
    unsigned blocks = ku_blocks(total, KU_THREADS, ctx);
    if (idx->dtype == KILN_I64)
        mv_gather_nd_kernel<T, int64_t><<<blocks, KU_THREADS, 0, ctx->stream>>>((const T *)x, (const int64_t *)idx->data,
                                                                                 (T *)y, *p, slice, total);
    else
        mv_gather_nd_kernel<T, int32_t><<<blocks, KU_THREADS, 0, ctx->stream>>>((const T *)x, (const int32_t *)idx->data,
                                                                                 (T *)y, *p, slice, total);
    KILN_CUDA_LAUNCH_CHECK("mv_gather_nd_kernel");
    return KILN_OK;
}

/* Fills the tuple geometry for x (rank r) indexed by tuples of length last after b batch dims. */
static void mv_tuples_make(const kiln_cuda_tensor *x, int b, int last, int64_t per_batch, int64_t unit_div, mv_tuples *p) {
    int64_t xs[KILN_MAX_DIMS];
    kiln_strides(x->ndim, x->dims, xs);
    p->last = last;
    p->per_batch = per_batch > 0 ? per_batch : 1;
    p->batch_stride = b > 0 ? xs[b - 1] / unit_div : 0;
    for (int k = 0; k < last; k++) {
        p->xd[k] = x->dims[b + k];
        p->xs[k] = xs[b + k] / unit_div;
    }
}

static kiln_status exec_gather_nd(const kiln_node *n, const kiln_cuda_tensor *in, int nin, const kiln_cuda_tensor *out,
                                  int nout, kiln_cuda_ctx *ctx) {
    const kiln_cuda_tensor *x = &in[0], *idx = &in[1], *y = &out[0];
    int64_t b = n->opset >= 12 ? kiln_attr_int(n, "batch_dims", 0) : 0;
    int q = idx->ndim, r = x->ndim;
    if (q < 1 || r < 1 || b < 0 || b >= q || b >= r)
        return kiln_error(KILN_ERR_INVALID_ARGUMENT, "GatherND: invalid ranks %d (data), %d (indices) for batch_dims %lld", r,
                          q, (long long)b);
    int64_t last = idx->dims[q - 1];
    if (last < 1 || b + last > r)
        return kiln_error(KILN_ERR_SHAPE, "GatherND: index tuples of length %lld do not fit data of rank %d", (long long)last, r);
    for (int i = 0; i < b; i++)
        if (idx->dims[i] != x->dims[i]) return kiln_error(KILN_ERR_SHAPE, "GatherND: batch dimension %d differs", i);
    for (int k = 0; k < last; k++)
        if (x->dims[b + k] == 0 && ku_numel(idx) > 0)
            return kiln_error(KILN_ERR_INVALID_ARGUMENT, "GatherND: indices into an empty axis");
    int64_t tuples = kiln_numel(q - 1, idx->dims), M = kiln_numel(q - 1 - (int)b, idx->dims + b);
    int64_t slice = kiln_numel(r - (int)(b + last), x->dims + b + last), total = tuples * slice;
    if (ku_numel(y) != total) return kiln_error(KILN_ERR_SHAPE, "GatherND: output has %lld elements, expected %lld",
                                                (long long)ku_numel(y), (long long)total);
    if (!total) return KILN_OK;
    size_t es = kiln_dtype_size(x->dtype), u = mv_unit(es, slice, x->data, y->data);
    int64_t f = (int64_t)(u / es);
    mv_tuples p;
    mv_tuples_make(x, (int)b, (int)last, M, f, &p);
    slice /= f;
    total /= f;
    switch (u) {
    case 1: return mv_launch_gather_nd<uint8_t>(ctx, idx, x->data, y->data, &p, slice, total);
    case 2: return mv_launch_gather_nd<uint16_t>(ctx, idx, x->data, y->data, &p, slice, total);
    case 4: return mv_launch_gather_nd<uint32_t>(ctx, idx, x->data, y->data, &p, slice, total);
    case 8: return mv_launch_gather_nd<unsigned long long>(ctx, idx, x->data, y->data, &p, slice, total);
    default: return mv_launch_gather_nd<uint4>(ctx, idx, x->data, y->data, &p, slice, total);
    }
}

/* ---------------------------------------------------------------------------------------------
 * ScatterND
 * ------------------------------------------------------------------------------------------- */

enum { RED_NONE, RED_ADD, RED_MUL, RED_MAX, RED_MIN };
/* How a scatter reduction reads element bits. */
enum { K_SINT, K_UINT, K_F16, K_BF16, K_F32, K_F64 };

/* ScatterND without reduction: y (already a copy of x) [offset(t) + e] = up[t, e]; up is (tuples, slice). */
template <typename T, typename IDX>
__global__ void mv_scatter_nd_kernel(const T *__restrict__ up, const IDX *__restrict__ idx, T *__restrict__ y, mv_tuples p,
                                     int64_t slice, int64_t total) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += (int64_t)gridDim.x * blockDim.x) {
        int64_t t = i / slice, e = i - t * slice;
        y[mv_tuple_offset(idx, p, t) + e] = up[i];
    }
}

template <typename W> struct mv_signed;
template <> struct mv_signed<unsigned short> { typedef short type; };
template <> struct mv_signed<unsigned int> { typedef int type; };
template <> struct mv_signed<unsigned long long> { typedef long long type; };

/* a (red) b on raw element bits W interpreted as KIND; the CPU's order: a is the current value,
 * max = a > b ? a : b, min = a < b ? a : b; integers add and multiply modulo 2^bits. */
template <int KIND, typename W>
__device__ __forceinline__ W mv_red_apply(W a, W b, int red) {
    if (KIND == K_SINT || KIND == K_UINT) {
        typedef typename mv_signed<W>::type S;
        if (red == RED_ADD) return (W)(a + b);
        if (red == RED_MUL) return (W)(a * b);
        bool gt = KIND == K_SINT ? (S)a > (S)b : a > b, lt = KIND == K_SINT ? (S)a < (S)b : a < b;
        return red == RED_MAX ? (gt ? a : b) : (lt ? a : b);
    }
    if (KIND == K_F64) {
        double x = __longlong_as_double((long long)a), y = __longlong_as_double((long long)b);
        double r = red == RED_ADD ? x + y : red == RED_MUL ? x * y : red == RED_MAX ? (x > y ? x : y) : (x < y ? x : y);
        return (W)__double_as_longlong(r);
    }
    float x, y; /* float32, and float16/bfloat16 through float32 like the CPU */
    if (KIND == K_F32) {
        x = __uint_as_float((unsigned)a);
        y = __uint_as_float((unsigned)b);
    } else if (KIND == K_F16) {
        x = __half2float(__ushort_as_half((unsigned short)a));
        y = __half2float(__ushort_as_half((unsigned short)b));
    } else {
        x = __bfloat162float(__ushort_as_bfloat16((unsigned short)a));
        y = __bfloat162float(__ushort_as_bfloat16((unsigned short)b));
    }
    float r = red == RED_ADD ? x + y : red == RED_MUL ? x * y : red == RED_MAX ? (x > y ? x : y) : (x < y ? x : y);
    if (KIND == K_F32) return (W)__float_as_uint(r);
    if (KIND == K_F16) return (W)__half_as_ushort(__float2half_rn(r));
    return (W)__bfloat16_as_ushort(__float2bfloat16_rn(r));
}

/* *addr = *addr (red) v atomically, by a compare-and-swap loop on the element's word W
 * (duplicate targets combine correctly, in an unspecified order). */
template <typename W, int KIND>
__device__ __forceinline__ void mv_atomic_red(W *addr, W v, int red) {
    W old = *addr, assumed;
    do {
        assumed = old;
        old = atomicCAS(addr, assumed, mv_red_apply<KIND, W>(assumed, v, red));
    } while (old != assumed);
}

/* ScatterND with a reduction: y [offset(t) + e] (red)= up[t, e]. W is the unsigned word of the
 * element size. */
template <typename W, int KIND, typename IDX>
__global__ void mv_scatter_nd_red_kernel(const W *__restrict__ up, const IDX *__restrict__ idx, W *y, mv_tuples p,
                                         int64_t slice, int64_t total, int red) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += (int64_t)gridDim.x * blockDim.x) {
        int64_t t = i / slice, e = i - t * slice;
        mv_atomic_red<W, KIND>(y + mv_tuple_offset(idx, p, t) + e, up[i], red);
    }
}

template <typename T>
static kiln_status mv_launch_scatter_nd(kiln_cuda_ctx *ctx, const kiln_cuda_tensor *idx, const void *up, void *y,
                                        const mv_tuples *p, int64_t slice, int64_t total) {
    unsigned blocks = ku_blocks(total, KU_THREADS, ctx);
    if (idx->dtype == KILN_I64)
        mv_scatter_nd_kernel<T, int64_t><<<blocks, KU_THREADS, 0, ctx->stream>>>((const T *)up, (const int64_t *)idx->data,
                                                                                  (T *)y, *p, slice, total);
    else
        mv_scatter_nd_kernel<T, int32_t><<<blocks, KU_THREADS, 0, ctx->stream>>>((const T *)up, (const int32_t *)idx->data,
                                                                                  (T *)y, *p, slice, total);
    KILN_CUDA_LAUNCH_CHECK("mv_scatter_nd_kernel");
    return KILN_OK;
}

template <typename W, int KIND>
static kiln_status mv_launch_scatter_red(kiln_cuda_ctx *ctx, const kiln_cuda_tensor *idx, const void *up, void *y,
                                         const mv_tuples *p, int64_t slice, int64_t total, int red) {
    unsigned blocks = ku_blocks(total, KU_THREADS, ctx);
    if (idx->dtype == KILN_I64)
        mv_scatter_nd_red_kernel<W, KIND, int64_t><<<blocks, KU_THREADS, 0, ctx->stream>>>(
            (const W *)up, (const int64_t *)idx->data, (W *)y, *p, slice, total, red);
    else
        mv_scatter_nd_red_kernel<W, KIND, int32_t><<<blocks, KU_THREADS, 0, ctx->stream>>>(
            (const W *)up, (const int32_t *)idx->data, (W *)y, *p, slice, total, red);
    KILN_CUDA_LAUNCH_CHECK("mv_scatter_nd_red_kernel");
    return KILN_OK;
}

/* ScatterND's reduction attribute (opset 16+; max/min from 18), or -1. */
static int scatter_reduction(const kiln_node *n) {
    const char *s = n->opset >= 16 ? kiln_attr_string(n, "reduction", "none") : "none";
    return !strcmp(s, "none") ? RED_NONE : !strcmp(s, "add") ? RED_ADD : !strcmp(s, "mul") ? RED_MUL
           : !strcmp(s, "max") && n->opset >= 18 ? RED_MAX : !strcmp(s, "min") && n->opset >= 18 ? RED_MIN : -1;
}

static kiln_status exec_scatter_nd(const kiln_node *n, const kiln_cuda_tensor *in, int nin, const kiln_cuda_tensor *out,
                                   int nout, kiln_cuda_ctx *ctx) {
    const kiln_cuda_tensor *x = &in[0], *idx = &in[1], *up = &in[2], *y = &out[0];
    int red = scatter_reduction(n);
    if (red < 0) return kiln_error(KILN_ERR_INVALID_ARGUMENT, "ScatterND: unknown reduction for opset %d", n->opset);
    int q = idx->ndim, r = x->ndim;
    int64_t k = q >= 1 ? idx->dims[q - 1] : -1;
    bool ok = q >= 1 && k >= 0 && k <= r && up->ndim == q - 1 + r - k && up->dtype == x->dtype;
    for (int i = 0; ok && i < up->ndim; i++) ok = up->dims[i] == (i < q - 1 ? idx->dims[i] : x->dims[k + i - (q - 1)]);
    if (!ok) return kiln_error(KILN_ERR_SHAPE, "ScatterND: updates do not match data and indices");
    KILN_TRY(mv_copy_same(n, x, y, ctx));
    int64_t tuples = kiln_numel(q - 1, idx->dims), slice = kiln_numel(r - (int)k, x->dims + k), total = tuples * slice;
    if (!total) return KILN_OK;
    for (int j = 0; j < k; j++)
        if (x->dims[j] == 0) return kiln_error(KILN_ERR_INVALID_ARGUMENT, "ScatterND: indices into an empty axis");
    size_t es = kiln_dtype_size(x->dtype);
    mv_tuples p;
    if (red == RED_NONE) {
        size_t u = mv_unit(es, slice, up->data, y->data);
        int64_t f = (int64_t)(u / es);
        mv_tuples_make(x, 0, (int)k, tuples, f, &p);
        slice /= f;
        total /= f;
        switch (u) {
        case 1: return mv_launch_scatter_nd<uint8_t>(ctx, idx, up->data, y->data, &p, slice, total);
        case 2: return mv_launch_scatter_nd<uint16_t>(ctx, idx, up->data, y->data, &p, slice, total);
        case 4: return mv_launch_scatter_nd<uint32_t>(ctx, idx, up->data, y->data, &p, slice, total);
        case 8: return mv_launch_scatter_nd<unsigned long long>(ctx, idx, up->data, y->data, &p, slice, total);
        default: return mv_launch_scatter_nd<uint4>(ctx, idx, up->data, y->data, &p, slice, total);
        }
    }
    mv_tuples_make(x, 0, (int)k, tuples, 1, &p);
    switch (x->dtype) {
    case KILN_F32: return mv_launch_scatter_red<unsigned int, K_F32>(ctx, idx, up->data, y->data, &p, slice, total, red);
    case KILN_F16: return mv_launch_scatter_red<unsigned short, K_F16>(ctx, idx, up->data, y->data, &p, slice, total, red);
    case KILN_BF16: return mv_launch_scatter_red<unsigned short, K_BF16>(ctx, idx, up->data, y->data, &p, slice, total, red);
    case KILN_F64: return mv_launch_scatter_red<unsigned long long, K_F64>(ctx, idx, up->data, y->data, &p, slice, total, red);
    case KILN_I16: return mv_launch_scatter_red<unsigned short, K_SINT>(ctx, idx, up->data, y->data, &p, slice, total, red);
    case KILN_U16: return mv_launch_scatter_red<unsigned short, K_UINT>(ctx, idx, up->data, y->data, &p, slice, total, red);
    case KILN_I32: return mv_launch_scatter_red<unsigned int, K_SINT>(ctx, idx, up->data, y->data, &p, slice, total, red);
    case KILN_U32: return mv_launch_scatter_red<unsigned int, K_UINT>(ctx, idx, up->data, y->data, &p, slice, total, red);
    case KILN_I64: return mv_launch_scatter_red<unsigned long long, K_SINT>(ctx, idx, up->data, y->data, &p, slice, total, red);
    case KILN_U64: return mv_launch_scatter_red<unsigned long long, K_UINT>(ctx, idx, up->data, y->data, &p, slice, total, red);
    default:
        return kiln_error(KILN_ERR_UNSUPPORTED, "ScatterND: reduction on %s data", kiln_dtype_name(x->dtype));
    }
}

/* ScatterND, ScatterElements, Scatter: reductions need a 16/32/64-bit numeric type (an atomic
 * compare-and-swap word). */
static kiln_status sup_scatter(const kiln_graph *g, const kiln_node *n) {
    KILN_TRY(mv_sup_dtype(g, n, 0));
    KILN_TRY(mv_sup_index(g, n, 1));
    int red = scatter_reduction(n);
    if (red < 0) return kiln_error(KILN_ERR_UNSUPPORTED, "%s: unknown reduction for opset %d", n->op_type, n->opset);
    const kiln_value *x = kiln_node_input(g, n, 0);
    if (red != RED_NONE && x) {
        kiln_dtype t = x->dtype;
        bool ok = t == KILN_F32 || t == KILN_F16 || t == KILN_BF16 || t == KILN_F64 || t == KILN_I16 || t == KILN_U16 ||
                  t == KILN_I32 || t == KILN_U32 || t == KILN_I64 || t == KILN_U64;
        if (!ok)
            return kiln_error(KILN_ERR_UNSUPPORTED, "%s: reduction '%s' on %s data is not supported on the CUDA backend",
                              n->op_type, kiln_attr_string(n, "reduction", ""), kiln_dtype_name(t));
    }
    return KILN_OK;
}

/* ---------------------------------------------------------------------------------------------
 * ScatterElements (and Scatter, its opset 9-10 name)
 * ------------------------------------------------------------------------------------------- */

/* The offset in data (strides p.xs) of element i of an index tensor (dims p.idims) with the axis
 * coordinate replaced by index v. */
__device__ __forceinline__ int64_t mv_elem_offset(const mv_elems &p, int64_t i, int64_t v) {
    int64_t rem = i, off = 0;
    for (int d = p.r - 1; d >= 0; d--) {
        int64_t q = rem / p.idims[d], c = rem - q * p.idims[d];
        rem = q;
        if (d != p.axis) off += c * p.xs[d];
    }
    return off + v * p.xs[p.axis];
}

/* ScatterElements without reduction: y (already a copy of data) at element i's position with the
 * axis coordinate idx[i] = up[i]; up and idx have dims p.idims. */
template <typename T, typename IDX>
__global__ void mv_scatter_elements_kernel(const T *__restrict__ up, const IDX *__restrict__ idx, T *__restrict__ y,
                                           mv_elems p, int64_t adim, int64_t total) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += (int64_t)gridDim.x * blockDim.x)
        y[mv_elem_offset(p, i, mv_index((int64_t)idx[i], adim))] = up[i];
}

/* The same with a reduction (atomic, see mv_atomic_red). */
template <typename W, int KIND, typename IDX>
__global__ void mv_scatter_elements_red_kernel(const W *__restrict__ up, const IDX *__restrict__ idx, W *y, mv_elems p,
                                               int64_t adim, int64_t total, int red) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += (int64_t)gridDim.x * blockDim.x)
        mv_atomic_red<W, KIND>(y + mv_elem_offset(p, i, mv_index((int64_t)idx[i], adim)), up[i], red);
}

template <typename T>
static kiln_status mv_launch_scatter_elements(kiln_cuda_ctx *ctx, const kiln_cuda_tensor *idx, const void *up, void *y,
                                              const mv_elems *p, int64_t adim, int64_t total) {
    unsigned blocks = ku_blocks(total, KU_THREADS, ctx);
    if (idx->dtype == KILN_I64)
        mv_scatter_elements_kernel<T, int64_t><<<blocks, KU_THREADS, 0, ctx->stream>>>(
            (const T *)up, (const int64_t *)idx->data, (T *)y, *p, adim, total);
    else
        mv_scatter_elements_kernel<T, int32_t><<<blocks, KU_THREADS, 0, ctx->stream>>>(
            (const T *)up, (const int32_t *)idx->data, (T *)y, *p, adim, total);
    KILN_CUDA_LAUNCH_CHECK("mv_scatter_elements_kernel");
    return KILN_OK;
}

template <typename W, int KIND>
static kiln_status mv_launch_scatter_elements_red(kiln_cuda_ctx *ctx, const kiln_cuda_tensor *idx, const void *up, void *y,
                                                  const mv_elems *p, int64_t adim, int64_t total, int red) {
    unsigned blocks = ku_blocks(total, KU_THREADS, ctx);
    if (idx->dtype == KILN_I64)
        mv_scatter_elements_red_kernel<W, KIND, int64_t><<<blocks, KU_THREADS, 0, ctx->stream>>>(
            (const W *)up, (const int64_t *)idx->data, (W *)y, *p, adim, total, red);
    else
        mv_scatter_elements_red_kernel<W, KIND, int32_t><<<blocks, KU_THREADS, 0, ctx->stream>>>(
            (const W *)up, (const int32_t *)idx->data, (W *)y, *p, adim, total, red);
    KILN_CUDA_LAUNCH_CHECK("mv_scatter_elements_red_kernel");
    return KILN_OK;
}

static kiln_status exec_scatter_elements(const kiln_node *n, const kiln_cuda_tensor *in, int nin,
                                         const kiln_cuda_tensor *out, int nout, kiln_cuda_ctx *ctx) {
    const kiln_cuda_tensor *x = &in[0], *idx = &in[1], *up = &in[2], *y = &out[0];
    int red = scatter_reduction(n);
    if (red < 0) return kiln_error(KILN_ERR_INVALID_ARGUMENT, "%s: unknown reduction for opset %d", n->op_type, n->opset);
    mv_elems p;
    if (idx->ndim != x->ndim || x->ndim < 1 || up->ndim != idx->ndim || up->dtype != x->dtype)
        return kiln_error(KILN_ERR_SHAPE, "%s: data, indices and updates must have one rank >= 1 (and updates data's dtype)",
                          n->op_type);
    KILN_TRY(kiln_axis_normalize(kiln_attr_int(n, "axis", 0), x->ndim, &p.axis));
    for (int i = 0; i < x->ndim; i++)
        if ((i != p.axis && idx->dims[i] > x->dims[i]) || up->dims[i] != idx->dims[i])
            return kiln_error(KILN_ERR_SHAPE, "%s: indices / updates dimension %d does not fit the data", n->op_type, i);
    KILN_TRY(mv_copy_same(n, x, y, ctx));
    int64_t total = ku_numel(idx), adim = x->dims[p.axis];
    if (!total) return KILN_OK;
    if (adim == 0) return kiln_error(KILN_ERR_INVALID_ARGUMENT, "%s: indices into an empty axis", n->op_type);
    p.r = x->ndim;
    memcpy(p.idims, idx->dims, sizeof p.idims);
    kiln_strides(x->ndim, x->dims, p.xs);
    if (red == RED_NONE) switch (kiln_dtype_size(x->dtype)) {
        case 1: return mv_launch_scatter_elements<uint8_t>(ctx, idx, up->data, y->data, &p, adim, total);
        case 2: return mv_launch_scatter_elements<uint16_t>(ctx, idx, up->data, y->data, &p, adim, total);
        case 4: return mv_launch_scatter_elements<uint32_t>(ctx, idx, up->data, y->data, &p, adim, total);
        case 8: return mv_launch_scatter_elements<unsigned long long>(ctx, idx, up->data, y->data, &p, adim, total);
        default: return mv_launch_scatter_elements<uint4>(ctx, idx, up->data, y->data, &p, adim, total);
        }
    const void *u = up->data;
    void *d = y->data;
    switch (x->dtype) {
    case KILN_F32: return mv_launch_scatter_elements_red<unsigned int, K_F32>(ctx, idx, u, d, &p, adim, total, red);
    case KILN_F16: return mv_launch_scatter_elements_red<unsigned short, K_F16>(ctx, idx, u, d, &p, adim, total, red);
    case KILN_BF16: return mv_launch_scatter_elements_red<unsigned short, K_BF16>(ctx, idx, u, d, &p, adim, total, red);
    case KILN_F64: return mv_launch_scatter_elements_red<unsigned long long, K_F64>(ctx, idx, u, d, &p, adim, total, red);
    case KILN_I16: return mv_launch_scatter_elements_red<unsigned short, K_SINT>(ctx, idx, u, d, &p, adim, total, red);
    case KILN_U16: return mv_launch_scatter_elements_red<unsigned short, K_UINT>(ctx, idx, u, d, &p, adim, total, red);
    case KILN_I32: return mv_launch_scatter_elements_red<unsigned int, K_SINT>(ctx, idx, u, d, &p, adim, total, red);
    case KILN_U32: return mv_launch_scatter_elements_red<unsigned int, K_UINT>(ctx, idx, u, d, &p, adim, total, red);
    case KILN_I64: return mv_launch_scatter_elements_red<unsigned long long, K_SINT>(ctx, idx, u, d, &p, adim, total, red);
    case KILN_U64: return mv_launch_scatter_elements_red<unsigned long long, K_UINT>(ctx, idx, u, d, &p, adim, total, red);
    default: return kiln_error(KILN_ERR_UNSUPPORTED, "%s: reduction on %s data", n->op_type, kiln_dtype_name(x->dtype));
    }
}

/* ---------------------------------------------------------------------------------------------
 * The family's table (gathers, scatters)
 * ------------------------------------------------------------------------------------------- */

extern "C" const kiln_cuda_kernel kiln_cuda_kernels_gather_scatter[] = {
    {"Gather", "", exec_gather, sup_gather},
    {"GatherElements", "", exec_gather_elements, sup_gather},
    {"GatherND", "", exec_gather_nd, sup_gather},
    {"ScatterND", "", exec_scatter_nd, sup_scatter},
    {"ScatterElements", "", exec_scatter_elements, sup_scatter},
    {"Scatter", "", exec_scatter_elements, sup_scatter},
    {NULL, NULL, NULL, NULL},
};
