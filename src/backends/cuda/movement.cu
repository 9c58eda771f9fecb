/* movement.cu — CUDA kernels of the data-movement ops: Reshape, Flatten, Squeeze, Unsqueeze,
 * Identity, Dropout (device copies), Transpose, DepthToSpace, SpaceToDepth, Concat, Split, Slice,
 * Expand, Tile (one strided-copy engine), Pad, Gather, GatherElements, GatherND, ScatterND,
 * ScatterElements (and Scatter), Trilu, Range and ConstantOfShape.
 *
 * Everything but Range and the scatter reductions is dtype-generic: elements move by their byte
 * size (1, 2, 4, 8 or 16). The strided-copy engine (mv_copy) drops unit dims, merges dims that are
 * contiguous in source and destination, widens contiguous runs to 16/8/4-byte units when sizes and
 * addresses allow, and sends a transpose whose source runs along the destination's second-to-last
 * dim through a 32x32 shared-memory tile kernel; everything else goes through one grid-stride
 * kernel with 32-bit index arithmetic whenever the extents fit. Pad merges the axes it does not pad
 * into their neighbours, runs constant padding of the last axis only (an NHWC channel pad) through
 * a row kernel whose threads each write 16, 8 or 4 bytes of a row with one store, and everything
 * else through a per-element kernel, both with 32-bit index arithmetic when the sizes fit.
 *
 * Index operands (Gather*, Scatter*) live on the device and are read there: negative indices wrap
 * once, and an index still outside [0, dim) is CLAMPED to the nearest valid one (a kernel cannot
 * report an error without a host synchronization; clamping keeps every access in bounds — the CPU
 * backend rejects such indices instead). */
#include "backends/cuda/kernel_util.cuh"

#include <math.h>

extern "C" {
#include "core/half.h"
#include "ir/shape_calc.h"
}

#define MV_MAX_DIMS (2 * KILN_MAX_DIMS) /* Tile doubles the rank */

/* ---------------------------------------------------------------------------------------------
 * Host helpers
 * ------------------------------------------------------------------------------------------- */

static bool mv_present(const kiln_cuda_tensor *t, int nt, int i) { return i < nt && t[i].ndim >= 0; }

/* Element size of a dtype the engine moves (1, 2, 4, 8, 16), or 0. */
static size_t mv_esize(kiln_dtype t) {
    size_t es = kiln_dtype_size(t);
    return es == 1 || es == 2 || es == 4 || es == 8 || es == 16 ? es : 0;
}

/* Reads an integer list given as the INTS attribute `name` before opset input_from and as input
 * `idx` from then on; *present is false when neither is given. */
static kiln_status mv_list(const kiln_node *n, const kiln_cuda_tensor *in, int nin, int idx, const char *name,
                           int input_from, int64_t *vals, int cap, int *count, bool *present) {
    *count = 0;
    *present = false;
    if (n->opset < input_from) {
        const int64_t *a = kiln_attr_ints(n, name, count);
        if (!a) return KILN_OK;
        if (*count > cap)
            return kiln_error(KILN_ERR_INVALID_ARGUMENT, "%s: '%s' has %d entries (at most %d)", n->op_type, name, *count, cap);
        memcpy(vals, a, (size_t)*count * sizeof *vals);
        *present = true;
        return KILN_OK;
    }
    if (!mv_present(in, nin, idx)) return KILN_OK;
    *present = true;
    return ku_host_ints(n, &in[idx], name, vals, cap, count);
}

/* The bit pattern of value v stored as dtype t (floats rounded to nearest even, integers truncated
 * toward zero like a C cast, bool v != 0), in the low kiln_dtype_size(t) bytes of *bits. */
static kiln_status mv_scalar_bits(const kiln_node *n, kiln_dtype t, double v, int64_t vi, bool is_int, uint64_t *bits) {
    *bits = 0;
    switch (t) {
    case KILN_F32: { float f = is_int ? (float)vi : (float)v; memcpy(bits, &f, 4); break; }
    case KILN_F64: { double d = is_int ? (double)vi : v; memcpy(bits, &d, 8); break; }
    case KILN_F16: *bits = kiln_f32_to_f16(is_int ? (float)vi : (float)v); break;
    case KILN_BF16: *bits = kiln_f32_to_bf16(is_int ? (float)vi : (float)v); break;
    case KILN_BOOL: *bits = is_int ? vi != 0 : v != 0.0; break;
    case KILN_I8: case KILN_U8: case KILN_I16: case KILN_U16: case KILN_I32: case KILN_U32: case KILN_I64: case KILN_U64: {
        int64_t x = is_int ? vi : (isfinite(v) && fabs(v) < 9.2e18 ? (int64_t)v : 0);
        uint64_t u = (uint64_t)x;
        size_t es = kiln_dtype_size(t);
        *bits = es == 8 ? u : u & ((UINT64_C(1) << (8 * es)) - 1);
        break;
    }
    default:
        return kiln_error(KILN_ERR_UNSUPPORTED, "%s: cannot make a %s scalar on the CUDA backend", n->op_type,
                          kiln_dtype_name(t));
    }
    return KILN_OK;
}

static bool mv_is_int(kiln_dtype t) {
    return t == KILN_I8 || t == KILN_U8 || t == KILN_I16 || t == KILN_U16 || t == KILN_I32 || t == KILN_U32 ||
           t == KILN_I64 || t == KILN_U64 || t == KILN_BOOL;
}

/* The bit pattern, in dtype t, of element 0 of host tensor src (any numeric dtype). */
static kiln_status mv_tensor_bits(const kiln_node *n, kiln_dtype t, const kiln_tensor *src, uint64_t *bits) {
    if (src->dtype == t) {
        *bits = 0;
        memcpy(bits, src->data, kiln_dtype_size(t));
        return KILN_OK;
    }
    if (mv_is_int(src->dtype)) return mv_scalar_bits(n, t, 0.0, kiln_tensor_get_i64(src, 0), true, bits);
    return mv_scalar_bits(n, t, kiln_tensor_get_f64(src, 0), 0, false, bits);
}

/* ---------------------------------------------------------------------------------------------
 * Build-time checks
 * ------------------------------------------------------------------------------------------- */

/* Fails unless input i of n has a dtype the engine moves. */
static kiln_status mv_sup_dtype(const kiln_graph *g, const kiln_node *n, int i) {
    const kiln_value *v = kiln_node_input(g, n, i);
    if (v && !mv_esize(v->dtype))
        return kiln_error(KILN_ERR_UNSUPPORTED, "%s: %s data is not supported on the CUDA backend", n->op_type,
                          kiln_dtype_name(v->dtype));
    return KILN_OK;
}

/* Fails unless input i is an int32 or int64 index tensor. */
static kiln_status mv_sup_index(const kiln_graph *g, const kiln_node *n, int i) {
    const kiln_value *v = kiln_node_input(g, n, i);
    if (v && v->dtype != KILN_I32 && v->dtype != KILN_I64)
        return kiln_error(KILN_ERR_UNSUPPORTED, "%s: indices must be int32 or int64, got %s", n->op_type,
                          kiln_dtype_name(v->dtype));
    return KILN_OK;
}

static kiln_status sup_data(const kiln_graph *g, const kiln_node *n) { return mv_sup_dtype(g, n, 0); }

/* ---------------------------------------------------------------------------------------------
 * The strided-copy engine
 * ------------------------------------------------------------------------------------------- */

/* A box of dims[0..r) elements; element i sits at sum(i_k * ss[k]) in the source and
 * sum(i_k * ds[k]) in the destination (strides in units, source strides may be 0 or negative). */
typedef struct mv_box {
    int r;
    int64_t dims[MV_MAX_DIMS];
    int64_t ss[MV_MAX_DIMS];
    int64_t ds[MV_MAX_DIMS];
} mv_box;

/* dst[off_d(i)] = src[off_s(i)] for every multi-index i of the box, total = prod(dims) items,
 * I the index type (int32_t when every offset and the total fit, else int64_t). */
template <typename T, typename I>
__global__ void mv_strided_kernel(const T *__restrict__ src, T *__restrict__ dst, mv_box b, I total) {
    for (I i = (I)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += (I)gridDim.x * blockDim.x) {
        I rem = i, so = 0, dof = 0;
        for (int d = b.r - 1; d >= 0; d--) {
            I dim = (I)b.dims[d];
            I q = rem / dim, c = rem - q * dim;
            so += c * (I)b.ss[d];
            dof += c * (I)b.ds[d];
            rem = q;
        }
        dst[dof] = src[so];
    }
}

/* Transpose of tiles: for every outer index o (dims b.dims[0..b.r), strides b.ss / b.ds), the
 * rows x cols block with source element (r, c) at r + c * cstride (rows contiguous in the source)
 * goes to destination r * rpitch + c (cols contiguous in the destination), through a 32x32 tile in
 * shared memory so that both the reads and the writes are coalesced. Block is (32, 8). */
template <typename T>
__global__ void mv_tile_kernel(const T *__restrict__ src, T *__restrict__ dst, mv_box b, int64_t outer, int64_t rows,
                               int64_t cols, int64_t cstride, int64_t rpitch) {
    __shared__ T tile[32][33];
    int64_t tiles_r = (rows + 31) / 32, tiles_c = (cols + 31) / 32;
    int tx = threadIdx.x, ty = threadIdx.y;
    for (int64_t o = blockIdx.z; o < outer; o += gridDim.z) {
        int64_t rem = o, so = 0, dof = 0;
        for (int d = b.r - 1; d >= 0; d--) {
            int64_t q = rem / b.dims[d], c = rem - q * b.dims[d];
            so += c * b.ss[d];
            dof += c * b.ds[d];
            rem = q;
        }
        const T *s = src + so;
        T *t = dst + dof;
        for (int64_t tr = blockIdx.y; tr < tiles_r; tr += gridDim.y)
            for (int64_t tc = blockIdx.x; tc < tiles_c; tc += gridDim.x) {
                int64_t r0 = tr * 32, c0 = tc * 32;
                for (int j = 0; j < 32; j += 8) {
                    int64_t r = r0 + tx, c = c0 + ty + j;
                    if (r < rows && c < cols) tile[ty + j][tx] = s[r + c * cstride];
                }
                __syncthreads();
                for (int j = 0; j < 32; j += 8) {
                    int64_t r = r0 + ty + j, c = c0 + tx;
                    if (r < rows && c < cols) t[r * rpitch + c] = tile[tx][ty + j];
                }
                __syncthreads();
            }
    }
}

/* Interleaving a few planes (NCHW -> NHWC with small C): for every outer index o (dims b.dims[0..r),
 * strides b.ss / b.ds) and position p < len, the C = b.dims[r + 1] elements src[o + p + c * cstride]
 * (each plane contiguous in p) go to dst[o + p * C + c]: one thread per p, reading C coalesced
 * planes and writing its C elements next to its neighbours'. I: the index type, as for
 * mv_strided_kernel. */
template <typename T, typename I, int C>
__global__ void mv_interleave_kernel(const T *__restrict__ src, T *__restrict__ dst, mv_box b, I outer, I len, I cstride) {
    const I total = outer * len;
    for (I i = (I)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += (I)gridDim.x * blockDim.x) {
        I o = i / len, p = i - o * len, so = 0, dof = 0;
        for (int d = b.r - 1; d >= 0; d--) {
            I dim = (I)b.dims[d], q = o / dim, c = o - q * dim;
            so += c * (I)b.ss[d];
            dof += c * (I)b.ds[d];
            o = q;
        }
        T v[C];
        for (int c = 0; c < C; c++) v[c] = src[so + p + c * cstride];
        for (int c = 0; c < C; c++) dst[dof + p * C + c] = v[c];
    }
}

/* Launches mv_interleave_kernel on box b, whose last two dims are (len, C) with C in 2..7, the
 * source contiguous along len and the destination along C. */
template <typename T>
static kiln_status mv_launch_interleave(kiln_cuda_ctx *ctx, const void *src, void *dst, const mv_box *b) {
    mv_box outer_box = *b;
    outer_box.r = b->r - 2;
    int64_t len = b->dims[b->r - 2], c = b->dims[b->r - 1], cstride = b->ss[b->r - 1];
    int64_t outer = kiln_numel(outer_box.r, outer_box.dims), span = outer * len * c + len + c * cstride;
    for (int d = 0; d < outer_box.r; d++) span += (b->dims[d] - 1) * ((b->ss[d] < 0 ? -b->ss[d] : b->ss[d]) + b->ds[d]);
    unsigned blocks = ku_blocks(outer * len, KU_THREADS, ctx);
#define MV_INTERLEAVE(CC)                                                                                              \
    case CC:                                                                                                           \
        if (span < INT32_MAX / 2)                                                                                      \
            mv_interleave_kernel<T, int32_t, CC><<<blocks, KU_THREADS, 0, ctx->stream>>>(                              \
                (const T *)src, (T *)dst, outer_box, (int32_t)outer, (int32_t)len, (int32_t)cstride);                  \
        else                                                                                                           \
            mv_interleave_kernel<T, int64_t, CC><<<blocks, KU_THREADS, 0, ctx->stream>>>((const T *)src, (T *)dst,     \
                                                                                         outer_box, outer, len, cstride); \
        break;
    switch (c) {
        MV_INTERLEAVE(2)
        MV_INTERLEAVE(3)
        MV_INTERLEAVE(4)
        MV_INTERLEAVE(5)
        MV_INTERLEAVE(6)
        MV_INTERLEAVE(7)
    default: return kiln_error(KILN_ERR_INTERNAL, "mv_launch_interleave: %lld planes", (long long)c);
    }
#undef MV_INTERLEAVE
    KILN_CUDA_LAUNCH_CHECK("mv_interleave_kernel");
    return KILN_OK;
}

/* Launches the generic kernel on box b (units of sizeof(T)). */
template <typename T>
static kiln_status mv_launch_strided(kiln_cuda_ctx *ctx, const void *src, void *dst, const mv_box *b, int64_t total) {
    int64_t span = total;
    for (int d = 0; d < b->r; d++) {
        span += (b->dims[d] - 1) * (b->ss[d] < 0 ? -b->ss[d] : b->ss[d]);
        span += (b->dims[d] - 1) * b->ds[d];
    }
    unsigned blocks = ku_blocks(total, KU_THREADS, ctx);
    if (span < INT32_MAX / 2)
        mv_strided_kernel<T, int32_t><<<blocks, KU_THREADS, 0, ctx->stream>>>((const T *)src, (T *)dst, *b, (int32_t)total);
    else
        mv_strided_kernel<T, int64_t><<<blocks, KU_THREADS, 0, ctx->stream>>>((const T *)src, (T *)dst, *b, total);
    KILN_CUDA_LAUNCH_CHECK("mv_strided_kernel");
    return KILN_OK;
}

/* Launches the tile kernel: the last two dims of b are the rows (source-contiguous) and cols
 * (destination-contiguous) of the tiles. */
template <typename T>
static kiln_status mv_launch_tiled(kiln_cuda_ctx *ctx, const void *src, void *dst, const mv_box *b) {
    mv_box outer_box = *b;
    outer_box.r = b->r - 2;
    int64_t rows = b->dims[b->r - 2], cols = b->dims[b->r - 1];
    int64_t outer = kiln_numel(outer_box.r, outer_box.dims);
    int64_t tc = (cols + 31) / 32, tr = (rows + 31) / 32;
    dim3 grid((unsigned)(tc < 65535 ? tc : 65535), (unsigned)(tr < 65535 ? tr : 65535),
              (unsigned)(outer < 65535 ? outer : 65535));
    mv_tile_kernel<T><<<grid, dim3(32, 8), 0, ctx->stream>>>((const T *)src, (T *)dst, outer_box, outer, rows, cols,
                                                             b->ss[b->r - 1], b->ds[b->r - 2]);
    KILN_CUDA_LAUNCH_CHECK("mv_tile_kernel");
    return KILN_OK;
}

/* Copies a box of es-byte elements (see mv_box; strides in elements) from src to dst. */
static kiln_status mv_copy(kiln_cuda_ctx *ctx, size_t es, int r, const int64_t *dims, const void *src, const int64_t *ss,
                           void *dst, const int64_t *ds) {
    mv_box b;
    int k = 0;
    for (int i = 0; i < r; i++) {
        if (dims[i] == 0) return KILN_OK;
        if (dims[i] == 1) continue;
        if (k > 0 && b.ss[k - 1] == ss[i] * dims[i] && b.ds[k - 1] == ds[i] * dims[i]) {
            b.dims[k - 1] *= dims[i];
            b.ss[k - 1] = ss[i];
            b.ds[k - 1] = ds[i];
            continue;
        }
        b.dims[k] = dims[i];
        b.ss[k] = ss[i];
        b.ds[k] = ds[i];
        k++;
    }
    b.r = k;
    if (k == 0) {
        KILN_CUDA_TRY(cudaMemcpyAsync(dst, src, es, cudaMemcpyDeviceToDevice, ctx->stream));
        return KILN_OK;
    }
    if (k == 1 && b.ss[0] == 1 && b.ds[0] == 1) {
        KILN_CUDA_TRY(cudaMemcpyAsync(dst, src, (size_t)b.dims[0] * es, cudaMemcpyDeviceToDevice, ctx->stream));
        return KILN_OK;
    }
    if (k >= 2 && b.ss[k - 2] == 1 && b.ds[k - 1] == 1 && b.ss[k - 1] != 1 && b.dims[k - 1] >= 8 && b.dims[k - 2] >= 8) {
        switch (es) {
        case 1: return mv_launch_tiled<uint8_t>(ctx, src, dst, &b);
        case 2: return mv_launch_tiled<uint16_t>(ctx, src, dst, &b);
        case 4: return mv_launch_tiled<uint32_t>(ctx, src, dst, &b);
        case 8: return mv_launch_tiled<unsigned long long>(ctx, src, dst, &b);
        default: return mv_launch_tiled<uint4>(ctx, src, dst, &b);
        }
    }
    if (k >= 2 && b.ss[k - 2] == 1 && b.ds[k - 1] == 1 && b.ds[k - 2] == b.dims[k - 1] && b.ss[k - 1] > 1 &&
        b.dims[k - 1] >= 2 && b.dims[k - 1] < 8 && b.dims[k - 2] >= 32) { /* a few planes interleaved (an RGB image to NHWC) */
        switch (es) {
        case 1: return mv_launch_interleave<uint8_t>(ctx, src, dst, &b);
        case 2: return mv_launch_interleave<uint16_t>(ctx, src, dst, &b);
        case 4: return mv_launch_interleave<uint32_t>(ctx, src, dst, &b);
        case 8: return mv_launch_interleave<unsigned long long>(ctx, src, dst, &b);
        default: return mv_launch_interleave<uint4>(ctx, src, dst, &b);
        }
    }
    size_t unit = es;
    if (b.ss[k - 1] == 1 && b.ds[k - 1] == 1) {
        uint64_t run = (uint64_t)b.dims[k - 1] * es;
        for (size_t u = 16; u > es; u /= 2) {
            bool ok = run % u == 0 && (uintptr_t)src % u == 0 && (uintptr_t)dst % u == 0;
            for (int d = 0; ok && d < k - 1; d++)
                ok = ((b.ss[d] < 0 ? -b.ss[d] : b.ss[d]) * (int64_t)es) % (int64_t)u == 0 &&
                     (b.ds[d] * (int64_t)es) % (int64_t)u == 0;
            if (!ok) continue;
            int64_t f = (int64_t)(u / es);
            b.dims[k - 1] /= f;
            for (int d = 0; d < k - 1; d++) {
                b.ss[d] /= f;
                b.ds[d] /= f;
            }
            unit = u;
            break;
        }
    }
    int64_t total = kiln_numel(b.r, b.dims);
    switch (unit) {
    case 1: return mv_launch_strided<uint8_t>(ctx, src, dst, &b, total);
    case 2: return mv_launch_strided<uint16_t>(ctx, src, dst, &b, total);
    case 4: return mv_launch_strided<uint32_t>(ctx, src, dst, &b, total);
    case 8: return mv_launch_strided<unsigned long long>(ctx, src, dst, &b, total);
    default: return mv_launch_strided<uint4>(ctx, src, dst, &b, total);
    }
}

/* Copies dense src (dims) into dense dst permuted: dst dims are dims[perm[i]]. */
static kiln_status mv_transpose(kiln_cuda_ctx *ctx, size_t es, int r, const int64_t *dims, const int *perm,
                                const void *src, void *dst) {
    int64_t is[MV_MAX_DIMS], od[MV_MAX_DIMS], ss[MV_MAX_DIMS], ds[MV_MAX_DIMS];
    kiln_strides(r, dims, is);
    for (int i = 0; i < r; i++) {
        od[i] = dims[perm[i]];
        ss[i] = is[perm[i]];
    }
    kiln_strides(r, od, ds);
    return mv_copy(ctx, es, r, od, src, ss, dst, ds);
}

/* ---------------------------------------------------------------------------------------------
 * Fill
 * ------------------------------------------------------------------------------------------- */

/* dst[i] = v for i < n. */
template <typename T>
__global__ void mv_fill_kernel(T *dst, T v, int64_t n) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) dst[i] = v;
}

/* Fills n elements of es bytes at dst with the low es bytes of bits. */
static kiln_status mv_fill(kiln_cuda_ctx *ctx, void *dst, size_t es, int64_t n, uint64_t bits) {
    if (n == 0) return KILN_OK;
    if (bits == 0 || es == 1) {
        KILN_CUDA_TRY(cudaMemsetAsync(dst, (int)(bits & 0xff), (size_t)n * es, ctx->stream));
        return KILN_OK;
    }
    unsigned blocks = ku_blocks(n, KU_THREADS, ctx);
    switch (es) {
    case 2: mv_fill_kernel<uint16_t><<<blocks, KU_THREADS, 0, ctx->stream>>>((uint16_t *)dst, (uint16_t)bits, n); break;
    case 4: mv_fill_kernel<uint32_t><<<blocks, KU_THREADS, 0, ctx->stream>>>((uint32_t *)dst, (uint32_t)bits, n); break;
    default:
        mv_fill_kernel<unsigned long long><<<blocks, KU_THREADS, 0, ctx->stream>>>((unsigned long long *)dst,
                                                                                   (unsigned long long)bits, n);
        break;
    }
    KILN_CUDA_LAUNCH_CHECK("mv_fill_kernel");
    return KILN_OK;
}

/* ---------------------------------------------------------------------------------------------
 * Reshape family: same bytes, new shape
 * ------------------------------------------------------------------------------------------- */

/* out[0] = in[0]'s bytes (the shapes have the same element count). */
static kiln_status mv_copy_same(const kiln_node *n, const kiln_cuda_tensor *x, const kiln_cuda_tensor *y,
                                kiln_cuda_ctx *ctx) {
    int64_t cnt = ku_numel(x);
    if (ku_numel(y) != cnt || kiln_dtype_size(x->dtype) != kiln_dtype_size(y->dtype))
        return kiln_error(KILN_ERR_SHAPE, "%s: output has %lld elements of %s, input %lld of %s", n->op_type,
                          (long long)ku_numel(y), kiln_dtype_name(y->dtype), (long long)cnt, kiln_dtype_name(x->dtype));
    size_t bytes = (size_t)cnt * kiln_dtype_size(x->dtype);
    if (bytes && x->data != y->data)
        KILN_CUDA_TRY(cudaMemcpyAsync(y->data, x->data, bytes, cudaMemcpyDeviceToDevice, ctx->stream));
    return KILN_OK;
}

/* Reshape, Flatten, Squeeze, Unsqueeze, Identity: the runtime resolved the output shape. */
static kiln_status exec_same(const kiln_node *n, const kiln_cuda_tensor *in, int nin, const kiln_cuda_tensor *out,
                             int nout, kiln_cuda_ctx *ctx) {
    return mv_copy_same(n, &in[0], &out[0], ctx);
}

/* Dropout in inference: y = x, and the optional mask all true (bool, or x's dtype before opset 10). */
static kiln_status exec_dropout(const kiln_node *n, const kiln_cuda_tensor *in, int nin, const kiln_cuda_tensor *out,
                                int nout, kiln_cuda_ctx *ctx) {
    KILN_TRY(mv_copy_same(n, &in[0], &out[0], ctx));
    if (!mv_present(out, nout, 1) || !out[1].data) return KILN_OK;
    uint64_t one;
    KILN_TRY(mv_scalar_bits(n, out[1].dtype, 1.0, 1, true, &one));
    return mv_fill(ctx, out[1].data, kiln_dtype_size(out[1].dtype), ku_numel(&out[1]), one);
}

/* Dropout: refused in training mode (a training_mode input that is not a constant false, with a
 * ratio that may be non-zero). */
static kiln_status sup_dropout(const kiln_graph *g, const kiln_node *n) {
    KILN_TRY(mv_sup_dtype(g, n, 0));
    const kiln_value *tm = n->opset >= 12 ? kiln_node_input(g, n, 2) : NULL;
    if (!tm) return KILN_OK;
    if (!tm->constant)
        return kiln_error(KILN_ERR_UNSUPPORTED, "Dropout: training_mode is not a constant; kiln runs inference only");
    bool training = kiln_tensor_numel(tm->constant) >= 1 && kiln_tensor_get_f64(tm->constant, 0) != 0;
    const kiln_value *ratio = kiln_node_input(g, n, 1);
    bool zero_ratio = ratio && ratio->constant && kiln_tensor_numel(ratio->constant) >= 1 &&
                      kiln_tensor_get_f64(ratio->constant, 0) == 0;
    if (training && !zero_ratio)
        return kiln_error(KILN_ERR_UNSUPPORTED, "Dropout: training_mode = true is not supported; kiln runs inference only");
    return KILN_OK;
}

/* ---------------------------------------------------------------------------------------------
 * Transpose, DepthToSpace, SpaceToDepth
 * ------------------------------------------------------------------------------------------- */

static kiln_status exec_transpose(const kiln_node *n, const kiln_cuda_tensor *in, int nin, const kiln_cuda_tensor *out,
                                  int nout, kiln_cuda_ctx *ctx) {
    const kiln_cuda_tensor *x = &in[0];
    int np, perm[KILN_MAX_DIMS];
    const int64_t *p = kiln_attr_ints(n, "perm", &np);
    if (p && np != x->ndim)
        return kiln_error(KILN_ERR_INVALID_ARGUMENT, "Transpose: perm has %d entries for rank %d", np, x->ndim);
    bool seen[KILN_MAX_DIMS] = {false};
    for (int i = 0; i < x->ndim; i++) {
        int64_t v = p ? p[i] : x->ndim - 1 - i;
        if (v < 0 || v >= x->ndim || seen[v] || out[0].dims[i] != x->dims[v])
            return kiln_error(KILN_ERR_INVALID_ARGUMENT, "Transpose: perm is not a permutation of 0..%d matching the output",
                              x->ndim - 1);
        seen[v] = true;
        perm[i] = (int)v;
    }
    if (!ku_numel(x)) return KILN_OK;
    return mv_transpose(ctx, kiln_dtype_size(x->dtype), x->ndim, x->dims, perm, x->data, out[0].data);
}

/* DepthToSpace and SpaceToDepth as a 6-D transpose of a reshaped view (the CPU's decomposition). */
static kiln_status exec_depth_space(const kiln_node *n, const kiln_cuda_tensor *in, int nin, const kiln_cuda_tensor *out,
                                    int nout, kiln_cuda_ctx *ctx) {
    const kiln_cuda_tensor *x = &in[0];
    bool d2s = !strcmp(n->op_type, "DepthToSpace");
    int64_t b = kiln_attr_int(n, "blocksize", 0);
    const char *mode = kiln_attr_string(n, "mode", "DCR");
    bool crd = !strcmp(mode, "CRD");
    if (!crd && strcmp(mode, "DCR"))
        return kiln_error(KILN_ERR_INVALID_ARGUMENT, "%s: mode must be DCR or CRD, got '%s'", n->op_type, mode);
    if (b <= 0 || x->ndim != 4)
        return kiln_error(KILN_ERR_INVALID_ARGUMENT, "%s: needs a positive blocksize and a rank-4 input", n->op_type);
    int64_t N = x->dims[0], C = x->dims[1], H = x->dims[2], W = x->dims[3], view[6];
    int perm[6];
    if (d2s) {
        if (C % (b * b)) return kiln_error(KILN_ERR_SHAPE, "DepthToSpace: channels %lld not divisible by blocksize^2", (long long)C);
        int64_t c = C / (b * b);
        int64_t v_dcr[6] = {N, b, b, c, H, W}, v_crd[6] = {N, c, b, b, H, W};
        int p_dcr[6] = {0, 3, 4, 1, 5, 2}, p_crd[6] = {0, 1, 4, 2, 5, 3};
        memcpy(view, crd ? v_crd : v_dcr, sizeof view);
        memcpy(perm, crd ? p_crd : p_dcr, sizeof perm);
    } else {
        if (H % b || W % b) return kiln_error(KILN_ERR_SHAPE, "SpaceToDepth: spatial dims not divisible by blocksize");
        int64_t v[6] = {N, C, H / b, b, W / b, b};
        int p_dcr[6] = {0, 3, 5, 1, 2, 4}, p_crd[6] = {0, 1, 3, 5, 2, 4};
        memcpy(view, v, sizeof view);
        memcpy(perm, crd ? p_crd : p_dcr, sizeof perm);
    }
    if (ku_numel(&out[0]) != ku_numel(x))
        return kiln_error(KILN_ERR_SHAPE, "%s: output size differs from the input's", n->op_type);
    if (!ku_numel(x)) return KILN_OK;
    return mv_transpose(ctx, kiln_dtype_size(x->dtype), 6, view, perm, x->data, out[0].data);
}

/* ---------------------------------------------------------------------------------------------
 * Concat, Split
 * ------------------------------------------------------------------------------------------- */

static kiln_status exec_concat(const kiln_node *n, const kiln_cuda_tensor *in, int nin, const kiln_cuda_tensor *out,
                               int nout, kiln_cuda_ctx *ctx) {
    const kiln_cuda_tensor *y = &out[0];
    const kiln_attr *a = kiln_node_attr(n, "axis");
    if (!a) return kiln_error(KILN_ERR_INVALID_ARGUMENT, "Concat: attribute 'axis' is required");
    int axis = 0;
    KILN_TRY(kiln_axis_normalize(a->i, y->ndim, &axis));
    size_t es = kiln_dtype_size(y->dtype);
    int64_t outer = kiln_numel(axis, y->dims), inner = kiln_numel(y->ndim - axis - 1, y->dims + axis + 1);
    int64_t dpitch = y->dims[axis] * inner, off = 0;
    for (int k = 0; k < nin; k++) {
        const kiln_cuda_tensor *t = &in[k];
        if (t->ndim < 0) continue;
        if (t->ndim != y->ndim || kiln_dtype_size(t->dtype) != es)
            return kiln_error(KILN_ERR_SHAPE, "Concat: input %d has rank %d / %s, the output rank %d / %s", k, t->ndim,
                              kiln_dtype_name(t->dtype), y->ndim, kiln_dtype_name(y->dtype));
        int64_t width = t->dims[axis] * inner;
        if (off + width > dpitch || ku_numel(t) != outer * width)
            return kiln_error(KILN_ERR_SHAPE, "Concat: input %d does not fit the output", k);
        if (width && outer) {
            int64_t dims[2] = {outer, width}, ss[2] = {width, 1}, ds[2] = {dpitch, 1};
            KILN_TRY(mv_copy(ctx, es, 2, dims, t->data, ss, (char *)y->data + (size_t)off * es, ds));
        }
        off += width;
    }
    if (off != dpitch) return kiln_error(KILN_ERR_SHAPE, "Concat: the inputs do not fill the output along axis %d", axis);
    return KILN_OK;
}

/* Split sizes along axis: the present outputs' dims when all are present, else the 'split'
 * attribute / host input or an even split. */
static kiln_status split_sizes(const kiln_node *n, const kiln_cuda_tensor *in, int nin, const kiln_cuda_tensor *out,
                               int nout, int axis, int64_t *sizes) {
    bool all = true;
    for (int i = 0; i < nout; i++) all = all && out[i].ndim >= 0;
    if (all) {
        for (int i = 0; i < nout; i++) sizes[i] = out[i].dims[axis];
        return KILN_OK;
    }
    int k = 0;
    bool present = false;
    KILN_TRY(mv_list(n, in, nin, 1, "split", 13, sizes, nout, &k, &present));
    if (present) {
        if (k != nout) return kiln_error(KILN_ERR_SHAPE, "Split: %d split sizes for %d outputs", k, nout);
        return KILN_OK;
    }
    return kiln_split_even("Split", in[0].dims[axis], nout, n->opset >= 18, sizes);
}

static kiln_status exec_split(const kiln_node *n, const kiln_cuda_tensor *in, int nin, const kiln_cuda_tensor *out,
                              int nout, kiln_cuda_ctx *ctx) {
    const kiln_cuda_tensor *x = &in[0];
    int axis = 0;
    KILN_TRY(kiln_axis_normalize(kiln_attr_int(n, "axis", 0), x->ndim, &axis));
    int64_t *sizes = (int64_t *)malloc((size_t)(nout > 0 ? nout : 1) * sizeof *sizes);
    if (!sizes) return kiln_error(KILN_ERR_OUT_OF_MEMORY, "Split: out of memory");
    kiln_status s = split_sizes(n, in, nin, out, nout, axis, sizes);
    size_t es = kiln_dtype_size(x->dtype);
    int64_t outer = kiln_numel(axis, x->dims), inner = kiln_numel(x->ndim - axis - 1, x->dims + axis + 1);
    int64_t spitch = x->dims[axis] * inner, off = 0;
    for (int i = 0; i < nout && s == KILN_OK; i++) {
        int64_t width = sizes[i] * inner;
        if (sizes[i] < 0 || off + width > spitch) {
            s = kiln_error(KILN_ERR_SHAPE, "Split: output %d does not fit the input along axis %d", i, axis);
            break;
        }
        if (out[i].ndim >= 0 && width && outer) {
            if (ku_numel(&out[i]) != outer * width)
                s = kiln_error(KILN_ERR_SHAPE, "Split: output %d has %lld elements, expected %lld", i,
                               (long long)ku_numel(&out[i]), (long long)(outer * width));
            else {
                int64_t dims[2] = {outer, width}, ss[2] = {spitch, 1}, ds[2] = {width, 1};
                s = mv_copy(ctx, es, 2, dims, (const char *)x->data + (size_t)off * es, ss, out[i].data, ds);
            }
        }
        off += width;
    }
    free(sizes);
    return s;
}

static kiln_status sup_split(const kiln_graph *g, const kiln_node *n) {
    KILN_TRY(mv_sup_dtype(g, n, 0));
    bool all = true;
    for (int i = 0; i < n->noutputs; i++) all = all && n->outputs[i] >= 0;
    return all ? KILN_OK : ku_need_host(g, n, 1, "split");
}

/* ---------------------------------------------------------------------------------------------
 * Slice, Expand, Tile
 * ------------------------------------------------------------------------------------------- */

static kiln_status exec_slice(const kiln_node *n, const kiln_cuda_tensor *in, int nin, const kiln_cuda_tensor *out,
                              int nout, kiln_cuda_ctx *ctx) {
    const kiln_cuda_tensor *x = &in[0], *y = &out[0];
    int64_t st[KILN_MAX_DIMS], en[KILN_MAX_DIMS], axv[KILN_MAX_DIMS], sp[KILN_MAX_DIMS];
    int ks = 0, ke = 0, ka = 0, kp = 0, ax[KILN_MAX_DIMS];
    bool has_st = false, has_en = false, has_ax = false, has_sp = false;
    KILN_TRY(mv_list(n, in, nin, 1, "starts", 10, st, KILN_MAX_DIMS, &ks, &has_st));
    if (n->opset < 10 || (mv_present(in, nin, 2) && in[2].host))
        KILN_TRY(mv_list(n, in, nin, 2, "ends", 10, en, KILN_MAX_DIMS, &ke, &has_en));
    KILN_TRY(mv_list(n, in, nin, 3, "axes", 10, axv, KILN_MAX_DIMS, &ka, &has_ax));
    KILN_TRY(mv_list(n, in, nin, 4, "steps", 10, sp, KILN_MAX_DIMS, &kp, &has_sp));
    if (!has_st) return kiln_error(KILN_ERR_INVALID_ARGUMENT, "Slice: 'starts' is required");
    if ((has_en && ke != ks) || (has_ax && ka != ks) || (has_sp && kp != ks))
        return kiln_error(KILN_ERR_INVALID_ARGUMENT, "Slice: starts, ends, axes and steps differ in length");
    if (y->ndim != x->ndim) return kiln_error(KILN_ERR_SHAPE, "Slice: output rank %d differs from input rank %d", y->ndim, x->ndim);
    if (has_ax) KILN_TRY(kiln_axes_normalize("Slice", ks, axv, x->ndim, ax));
    else if (ks > x->ndim) return kiln_error(KILN_ERR_INVALID_ARGUMENT, "Slice: %d starts for rank %d", ks, x->ndim);
    else
        for (int j = 0; j < ks; j++) ax[j] = j;
    int64_t first[KILN_MAX_DIMS], step[KILN_MAX_DIMS], is[KILN_MAX_DIMS], ss[KILN_MAX_DIMS], ds[KILN_MAX_DIMS];
    for (int i = 0; i < x->ndim; i++) {
        first[i] = 0;
        step[i] = 1;
    }
    for (int j = 0; j < ks; j++) {
        int a = ax[j];
        int64_t cnt;
        step[a] = has_sp ? sp[j] : 1;
        if (step[a] == 0) return kiln_error(KILN_ERR_INVALID_ARGUMENT, "Slice: step 0 on axis %d", a);
        /* the first index does not depend on the end; the count is the output's */
        kiln_slice_axis(x->dims[a], st[j], has_en ? en[j] : st[j], step[a], &first[a], &cnt);
        if (has_en && cnt != y->dims[a])
            return kiln_error(KILN_ERR_SHAPE, "Slice: axis %d takes %lld elements but the output has %lld", a,
                              (long long)cnt, (long long)y->dims[a]);
    }
    if (!ku_numel(y)) return KILN_OK;
    for (int i = 0; i < x->ndim; i++) {
        int64_t last = first[i] + (y->dims[i] - 1) * step[i];
        if (first[i] < 0 || first[i] >= x->dims[i] || last < 0 || last >= x->dims[i])
            return kiln_error(KILN_ERR_SHAPE, "Slice: output dim %d (%lld) reads outside the input dim (%lld)", i,
                              (long long)y->dims[i], (long long)x->dims[i]);
    }
    size_t es = kiln_dtype_size(x->dtype);
    kiln_strides(x->ndim, x->dims, is);
    kiln_strides(y->ndim, y->dims, ds);
    int64_t base = 0;
    for (int i = 0; i < x->ndim; i++) {
        base += first[i] * is[i];
        ss[i] = is[i] * step[i];
    }
    return mv_copy(ctx, es, x->ndim, y->dims, (const char *)x->data + (size_t)base * es, ss, y->data, ds);
}

/* Slice needs starts, axes and steps on the host (ends only cross-check the output shape). */
static kiln_status sup_slice(const kiln_graph *g, const kiln_node *n) {
    KILN_TRY(mv_sup_dtype(g, n, 0));
    if (n->opset < 10) return KILN_OK;
    KILN_TRY(ku_need_host(g, n, 1, "starts"));
    KILN_TRY(ku_need_host(g, n, 3, "axes"));
    return ku_need_host(g, n, 4, "steps");
}

/* Expand: numpy broadcast of x to the output shape the runtime resolved. */
static kiln_status exec_expand(const kiln_node *n, const kiln_cuda_tensor *in, int nin, const kiln_cuda_tensor *out,
                               int nout, kiln_cuda_ctx *ctx) {
    const kiln_cuda_tensor *x = &in[0], *y = &out[0];
    if (y->ndim < x->ndim) return kiln_error(KILN_ERR_SHAPE, "Expand: output rank %d is below input rank %d", y->ndim, x->ndim);
    for (int i = 0; i < x->ndim; i++) {
        int64_t xd = x->dims[i], od = y->dims[y->ndim - x->ndim + i];
        if (xd != 1 && xd != od)
            return kiln_error(KILN_ERR_SHAPE, "Expand: input dim %d (%lld) cannot broadcast to %lld", i, (long long)xd,
                              (long long)od);
    }
    if (!ku_numel(y)) return KILN_OK;
    int64_t ss[KILN_MAX_DIMS], ds[KILN_MAX_DIMS];
    kiln_broadcast_strides(x->ndim, x->dims, y->ndim, y->dims, ss);
    kiln_strides(y->ndim, y->dims, ds);
    return mv_copy(ctx, kiln_dtype_size(x->dtype), y->ndim, y->dims, x->data, ss, y->data, ds);
}

/* Tile: output dim i is reps_i copies of input dim i, i.e. a copy over the doubled box
 * (reps_0, in_0, reps_1, in_1, ...) with source strides (0, is_0, 0, is_1, ...). */
static kiln_status exec_tile(const kiln_node *n, const kiln_cuda_tensor *in, int nin, const kiln_cuda_tensor *out,
                             int nout, kiln_cuda_ctx *ctx) {
    const kiln_cuda_tensor *x = &in[0], *y = &out[0];
    if (y->ndim != x->ndim) return kiln_error(KILN_ERR_SHAPE, "Tile: output rank %d differs from input rank %d", y->ndim, x->ndim);
    if (!ku_numel(y)) return KILN_OK;
    int r = x->ndim;
    int64_t is[KILN_MAX_DIMS], os[KILN_MAX_DIMS], dims[MV_MAX_DIMS], ss[MV_MAX_DIMS], ds[MV_MAX_DIMS];
    kiln_strides(r, x->dims, is);
    kiln_strides(r, y->dims, os);
    for (int i = 0; i < r; i++) {
        if (x->dims[i] == 0 || y->dims[i] % x->dims[i])
            return kiln_error(KILN_ERR_SHAPE, "Tile: output dim %d (%lld) is not a multiple of the input's (%lld)", i,
                              (long long)y->dims[i], (long long)x->dims[i]);
        dims[2 * i] = y->dims[i] / x->dims[i];
        dims[2 * i + 1] = x->dims[i];
        ss[2 * i] = 0;
        ss[2 * i + 1] = is[i];
        ds[2 * i] = x->dims[i] * os[i];
        ds[2 * i + 1] = os[i];
    }
    return mv_copy(ctx, kiln_dtype_size(x->dtype), 2 * r, dims, x->data, ss, y->data, ds);
}

/* ---------------------------------------------------------------------------------------------
 * Pad
 * ------------------------------------------------------------------------------------------- */

enum { PAD_CONSTANT, PAD_REFLECT, PAD_EDGE, PAD_WRAP };

/* The Pad of one node after mv_pad_merge: rank r, per axis the input and output sizes, the padding
 * before (negative: cropped) and the input's row-major strides. */
typedef struct mv_pad {
    int r, mode;
    int64_t in[KILN_MAX_DIMS], out[KILN_MAX_DIMS], pb[KILN_MAX_DIMS], is[KILN_MAX_DIMS];
} mv_pad;

/* The input index that shifted output index i reads on an axis of size len, or -1 for the constant
 * (I: int32_t when every index fits, else int64_t). */
template <typename I>
__device__ __forceinline__ I pad_map(int mode, I i, I len) {
    if (i >= 0 && i < len) return i;
    switch (mode) {
    case PAD_EDGE: return i < 0 ? 0 : len - 1;
    case PAD_WRAP: {
        I m = i % len;
        return m < 0 ? m + len : m;
    }
    case PAD_REFLECT: {
        if (len == 1) return 0;
        I p = 2 * (len - 1), m = i % p;
        if (m < 0) m += p;
        return m >= len ? p - m : m;
    }
    default: return -1;
    }
}

/* y (dims p.out, total elements) = x (dims p.in) padded by p.pb before each axis in p.mode; the
 * constant is *cptr when cptr != NULL, else cval. I as in pad_map. */
template <typename T, typename I>
__global__ void mv_pad_kernel(const T *__restrict__ x, T *__restrict__ y, mv_pad p, const T *cptr, T cval, I total) {
    T c = cptr ? *cptr : cval;
    for (I i = (I)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += (I)gridDim.x * blockDim.x) {
        I rem = i, off = 0;
        bool constant = false;
        for (int d = p.r - 1; d >= 0; d--) {
            I od = (I)p.out[d], q = rem / od, o = rem - q * od;
            rem = q;
            I s = pad_map<I>(p.mode, o - (I)p.pb[d], (I)p.in[d]);
            if (s < 0) constant = true;
            else off += s * (I)p.is[d];
        }
        y[i] = constant ? c : x[off];
    }
}

/* Constant padding of the last axis only: x [rows, in_w] -> y [rows, out_w], output column j reads
 * input column j - pb (the constant outside [0, in_w)). Each thread writes one V (16, 8 or 4 bytes,
 * or one T) of E = sizeof(V) / sizeof(T) consecutive output elements of one row with a single store
 * (out_w is a multiple of E and y aligned to V): a row of up to 16 bytes, such as the channel pad of
 * an NHWC stem (3 -> 8 halves), is one thread and one 16-byte store. */
template <typename T, typename V, typename I>
__global__ void mv_pad_rows_kernel(const T *__restrict__ x, V *__restrict__ y, I units, I upr, I in_w, I pb, const T *cptr,
                                   T cval) {
    static_assert(sizeof(V) >= sizeof(T) && sizeof(V) % sizeof(T) == 0, "V holds whole elements");
    const int E = sizeof(V) / sizeof(T);
    T c = cptr ? *cptr : cval;
    for (I t = (I)blockIdx.x * blockDim.x + threadIdx.x; t < units; t += (I)gridDim.x * blockDim.x) {
        I row = upr == 1 ? t : t / upr, col = (t - row * upr) * E - pb;
        const T *xr = x + row * in_w;
        union {
            V v;
            T e[E];
        } u;
#pragma unroll
        for (int j = 0; j < E; j++) {
            I k = col + j;
            u.e[j] = k >= 0 && k < in_w ? xr[k] : c;
        }
        y[t] = u.v;
    }
}

/* Launches mv_pad_rows_kernel for p (constant mode, r = 1, or r = 2 with axis 0 unpadded) with
 * store unit V. */
template <typename T, typename V>
static kiln_status mv_launch_pad_rows(kiln_cuda_ctx *ctx, const void *x, void *y, const mv_pad *p, const T *cptr, T cval,
                                      int64_t total) {
    int64_t ow = p->out[p->r - 1], iw = p->in[p->r - 1], pb = p->pb[p->r - 1];
    int64_t e = (int64_t)(sizeof(V) / sizeof(T)), units = total / e, upr = ow / e;
    unsigned blocks = ku_blocks(units, KU_THREADS, ctx);
    int64_t in_numel = total / ow * iw;
    if (total < INT32_MAX / 2 && in_numel < INT32_MAX / 2)
        mv_pad_rows_kernel<T, V, int32_t><<<blocks, KU_THREADS, 0, ctx->stream>>>(
            (const T *)x, (V *)y, (int32_t)units, (int32_t)upr, (int32_t)iw, (int32_t)pb, cptr, cval);
    else
        mv_pad_rows_kernel<T, V, int64_t><<<blocks, KU_THREADS, 0, ctx->stream>>>((const T *)x, (V *)y, units, upr, iw, pb,
                                                                                  cptr, cval);
    KILN_CUDA_LAUNCH_CHECK("mv_pad_rows_kernel");
    return KILN_OK;
}

template <typename T>
static kiln_status mv_launch_pad(kiln_cuda_ctx *ctx, const void *x, void *y, const mv_pad *p, const void *cptr, uint64_t bits,
                                 int64_t total) {
    T cval = T();
    memcpy(&cval, &bits, sizeof cval < sizeof bits ? sizeof cval : sizeof bits);
    const T *cp = (const T *)cptr;
    if (p->mode == PAD_CONSTANT && (p->r == 1 || (p->r == 2 && p->pb[0] == 0 && p->in[0] == p->out[0]))) {
        /* the widest store unit that divides a row and y's alignment */
        uint64_t row = (uint64_t)p->out[p->r - 1] * sizeof(T), at = (uintptr_t)y;
        if constexpr (sizeof(T) < 16)
            if (row % 16 == 0 && at % 16 == 0) return mv_launch_pad_rows<T, uint4>(ctx, x, y, p, cp, cval, total);
        if constexpr (sizeof(T) < 8)
            if (row % 8 == 0 && at % 8 == 0) return mv_launch_pad_rows<T, uint2>(ctx, x, y, p, cp, cval, total);
        if constexpr (sizeof(T) < 4)
            if (row % 4 == 0 && at % 4 == 0) return mv_launch_pad_rows<T, uint32_t>(ctx, x, y, p, cp, cval, total);
        return mv_launch_pad_rows<T, T>(ctx, x, y, p, cp, cval, total);
    }
    int64_t in_numel = kiln_numel(p->r, p->in);
    unsigned blocks = ku_blocks(total, KU_THREADS, ctx);
    if (total < INT32_MAX / 2 && in_numel < INT32_MAX / 2)
        mv_pad_kernel<T, int32_t><<<blocks, KU_THREADS, 0, ctx->stream>>>((const T *)x, (T *)y, *p, cp, cval, (int32_t)total);
    else
        mv_pad_kernel<T, int64_t><<<blocks, KU_THREADS, 0, ctx->stream>>>((const T *)x, (T *)y, *p, cp, cval, total);
    KILN_CUDA_LAUNCH_CHECK("mv_pad_kernel");
    return KILN_OK;
}

/* Merges adjacent axes of p (pe: the padding after each axis) in place: an axis without padding
 * joins the axis before it (both unpadded: [A, B] -> [A*B]; in constant mode also a padded one:
 * [A, B] padded by (b, e) on A is [A*B] padded by (b*B, e*B)), so [256,224,224,3] -> [..,8] becomes
 * [12845056, 3] -> [12845056, 8]. The other modes map an out-of-range index per axis, so there
 * only unpadded axes merge. */
static void mv_pad_merge(mv_pad *p, const int64_t *pe) {
    int k = 0;
    int64_t pek = 0;
    for (int i = 0; i < p->r; i++) {
        bool flat = p->pb[i] == 0 && pe[i] == 0;
        if (k > 0 && flat && (p->mode == PAD_CONSTANT || (p->pb[k - 1] == 0 && pek == 0))) {
            p->in[k - 1] *= p->in[i];
            p->out[k - 1] *= p->in[i];
            p->pb[k - 1] *= p->in[i];
            pek *= p->in[i];
            continue;
        }
        p->in[k] = p->in[i];
        p->out[k] = p->out[i];
        p->pb[k] = p->pb[i];
        pek = pe[i];
        k++;
    }
    p->r = k;
}

static kiln_status exec_pad(const kiln_node *n, const kiln_cuda_tensor *in, int nin, const kiln_cuda_tensor *out,
                            int nout, kiln_cuda_ctx *ctx) {
    const kiln_cuda_tensor *x = &in[0], *y = &out[0];
    const char *m = kiln_attr_string(n, "mode", "constant");
    mv_pad p;
    memset(&p, 0, sizeof p);
    p.mode = !strcmp(m, "constant") ? PAD_CONSTANT : !strcmp(m, "reflect") ? PAD_REFLECT : !strcmp(m, "edge") ? PAD_EDGE
             : !strcmp(m, "wrap") && n->opset >= 19 ? PAD_WRAP : -1;
    if (p.mode < 0) return kiln_error(KILN_ERR_INVALID_ARGUMENT, "Pad: unknown mode '%s' for opset %d", m, n->opset);
    int64_t pads[2 * KILN_MAX_DIMS], axv[KILN_MAX_DIMS];
    int np = 0, na = x->ndim, ax[KILN_MAX_DIMS];
    bool present = false;
    KILN_TRY(mv_list(n, in, nin, 1, n->opset < 2 ? "paddings" : "pads", 11, pads, 2 * KILN_MAX_DIMS, &np, &present));
    if (!present) return kiln_error(KILN_ERR_INVALID_ARGUMENT, "Pad: 'pads' is required");
    if (n->opset >= 18 && mv_present(in, nin, 3)) {
        KILN_TRY(ku_host_ints(n, &in[3], "axes", axv, KILN_MAX_DIMS, &na));
        KILN_TRY(kiln_axes_normalize("Pad", na, axv, x->ndim, ax));
    } else {
        for (int j = 0; j < na; j++) ax[j] = j;
    }
    if (np != 2 * na) return kiln_error(KILN_ERR_INVALID_ARGUMENT, "Pad: %d pads for %d axes (need %d)", np, na, 2 * na);
    p.r = x->ndim;
    int64_t pe[KILN_MAX_DIMS] = {0};
    for (int j = 0; j < na; j++) {
        p.pb[ax[j]] = pads[j];
        pe[ax[j]] = pads[j + na];
    }
    for (int i = 0; i < p.r; i++) {
        p.in[i] = x->dims[i];
        p.out[i] = y->dims[i];
        if (y->ndim != x->ndim || x->dims[i] + p.pb[i] + pe[i] != y->dims[i])
            return kiln_error(KILN_ERR_SHAPE, "Pad: output dim %d (%lld) is not input %lld + pads %lld + %lld", i,
                              (long long)y->dims[i], (long long)x->dims[i], (long long)p.pb[i], (long long)pe[i]);
        if (p.mode != PAD_CONSTANT && x->dims[i] == 0 && y->dims[i] > 0)
            return kiln_error(KILN_ERR_SHAPE, "Pad: cannot pad empty axis %d in mode '%s'", i, m);
    }
    int64_t total = ku_numel(y);
    if (!total) return KILN_OK;
    mv_pad_merge(&p, pe);
    kiln_strides(p.r, p.in, p.is);
    size_t es = kiln_dtype_size(x->dtype);
    const void *cptr = NULL;
    uint64_t bits = 0;
    if (n->opset >= 11 && mv_present(in, nin, 2) && ku_numel(&in[2]) > 0) {
        if (kiln_dtype_size(in[2].dtype) != es)
            return kiln_error(KILN_ERR_INVALID_ARGUMENT, "Pad: constant_value is %s but data is %s",
                              kiln_dtype_name(in[2].dtype), kiln_dtype_name(x->dtype));
        cptr = in[2].data;
    } else if (n->opset < 11) {
        KILN_TRY(mv_scalar_bits(n, x->dtype, kiln_attr_float(n, "value", 0.0f), 0, false, &bits));
    }
    switch (es) {
    case 1: return mv_launch_pad<uint8_t>(ctx, x->data, y->data, &p, cptr, bits, total);
    case 2: return mv_launch_pad<uint16_t>(ctx, x->data, y->data, &p, cptr, bits, total);
    case 4: return mv_launch_pad<uint32_t>(ctx, x->data, y->data, &p, cptr, bits, total);
    case 8: return mv_launch_pad<unsigned long long>(ctx, x->data, y->data, &p, cptr, bits, total);
    default:
        if (cptr || bits) return kiln_error(KILN_ERR_UNSUPPORTED, "Pad: a constant value for %s data", kiln_dtype_name(x->dtype));
        return mv_launch_pad<uint4>(ctx, x->data, y->data, &p, NULL, 0, total);
    }
}

/* Pad needs pads (and axes) on the host; the constant value is read on the device. */
static kiln_status sup_pad(const kiln_graph *g, const kiln_node *n) {
    KILN_TRY(mv_sup_dtype(g, n, 0));
    if (n->opset < 11) return KILN_OK;
    KILN_TRY(ku_need_host(g, n, 1, "pads"));
    return n->opset >= 18 ? ku_need_host(g, n, 3, "axes") : KILN_OK;
}

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
 * Trilu, Range, ConstantOfShape
 * ------------------------------------------------------------------------------------------- */

/* Trilu: x and y are (nmat, rows, cols); y keeps the upper (c - r >= k) or lower (c - r <= k)
 * triangle of each matrix and is zero elsewhere. */
template <typename T>
__global__ void mv_trilu_kernel(const T *__restrict__ x, T *__restrict__ y, int64_t rows, int64_t cols, int64_t k, bool upper,
                                int64_t total) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += (int64_t)gridDim.x * blockDim.x) {
        int64_t c = i % cols, r = (i / cols) % rows;
        bool keep = upper ? c - r >= k : c - r <= k;
        y[i] = keep ? x[i] : T();
    }
}

template <typename T>
static kiln_status mv_launch_trilu(kiln_cuda_ctx *ctx, const void *x, void *y, int64_t rows, int64_t cols, int64_t k,
                                   bool upper, int64_t total) {
    mv_trilu_kernel<T><<<ku_blocks(total, KU_THREADS, ctx), KU_THREADS, 0, ctx->stream>>>((const T *)x, (T *)y, rows, cols, k, upper, total);
    KILN_CUDA_LAUNCH_CHECK("mv_trilu_kernel");
    return KILN_OK;
}

static kiln_status exec_trilu(const kiln_node *n, const kiln_cuda_tensor *in, int nin, const kiln_cuda_tensor *out,
                              int nout, kiln_cuda_ctx *ctx) {
    const kiln_cuda_tensor *x = &in[0], *y = &out[0];
    if (x->ndim < 2) return kiln_error(KILN_ERR_INVALID_ARGUMENT, "Trilu: input must have rank >= 2, got rank %d", x->ndim);
    if (ku_numel(y) != ku_numel(x)) return kiln_error(KILN_ERR_SHAPE, "Trilu: output and input differ in size");
    int64_t k = 0;
    if (mv_present(in, nin, 1)) {
        int64_t v[1] = {0};
        int c = 0;
        KILN_TRY(ku_host_ints(n, &in[1], "k", v, 1, &c));
        if (c != 1) return kiln_error(KILN_ERR_INVALID_ARGUMENT, "Trilu: 'k' must hold one value");
        k = v[0];
    }
    int64_t rows = x->dims[x->ndim - 2], cols = x->dims[x->ndim - 1], total = ku_numel(x);
    if (!total) return KILN_OK;
    k = k > cols + 1 ? cols + 1 : k < -rows - 1 ? -rows - 1 : k; /* keeps c - r vs k exact and overflow-free */
    bool upper = kiln_attr_int(n, "upper", 1) != 0;
    switch (kiln_dtype_size(x->dtype)) {
    case 1: return mv_launch_trilu<uint8_t>(ctx, x->data, y->data, rows, cols, k, upper, total);
    case 2: return mv_launch_trilu<uint16_t>(ctx, x->data, y->data, rows, cols, k, upper, total);
    case 4: return mv_launch_trilu<uint32_t>(ctx, x->data, y->data, rows, cols, k, upper, total);
    case 8: return mv_launch_trilu<unsigned long long>(ctx, x->data, y->data, rows, cols, k, upper, total);
    default: return mv_launch_trilu<uint4>(ctx, x->data, y->data, rows, cols, k, upper, total);
    }
}

static kiln_status sup_trilu(const kiln_graph *g, const kiln_node *n) {
    KILN_TRY(mv_sup_dtype(g, n, 0));
    return ku_need_host(g, n, 1, "k");
}

/* Range, floating point: y[i] = (T)(start + i * delta) computed in double like the CPU. */
template <typename T>
__global__ void mv_range_float_kernel(T *y, double start, double delta, int64_t n) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        double v = start + (double)i * delta;
        y[i] = (T)v;
    }
}
template <>
__global__ void mv_range_float_kernel<__half>(__half *y, double start, double delta, int64_t n) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        y[i] = __float2half_rn((float)(start + (double)i * delta));
}
template <>
__global__ void mv_range_float_kernel<__nv_bfloat16>(__nv_bfloat16 *y, double start, double delta, int64_t n) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        y[i] = __float2bfloat16_rn((float)(start + (double)i * delta));
}

/* Range, integers: y[i] = (T)(start + i * delta) in int64 (wrapping like the CPU's narrowing). */
template <typename T>
__global__ void mv_range_int_kernel(T *y, int64_t start, int64_t delta, int64_t n) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        y[i] = (T)(uint64_t)((uint64_t)start + (uint64_t)i * (uint64_t)delta);
}

/* Reads a host scalar as double and as int64 (*is_int tells which is exact). */
static kiln_status mv_host_scalar(const kiln_node *n, const kiln_cuda_tensor *t, const char *what, double *v, int64_t *vi,
                                  bool *is_int) {
    if (!t->host)
        return kiln_error(KILN_ERR_UNSUPPORTED, "%s: '%s' has no host copy (it must be known before the run)", n->op_type, what);
    if (ku_numel(t) != 1) return kiln_error(KILN_ERR_INVALID_ARGUMENT, "%s: '%s' must be a scalar", n->op_type, what);
    kiln_tensor h;
    int64_t one = 1;
    kiln_tensor_view(&h, t->host_dtype, 1, &one, (void *)t->host);
    *is_int = mv_is_int(t->host_dtype);
    *vi = *is_int ? kiln_tensor_get_i64(&h, 0) : 0;
    *v = *is_int ? (double)*vi : kiln_tensor_get_f64(&h, 0);
    return KILN_OK;
}

static kiln_status exec_range(const kiln_node *n, const kiln_cuda_tensor *in, int nin, const kiln_cuda_tensor *out,
                              int nout, kiln_cuda_ctx *ctx) {
    const kiln_cuda_tensor *y = &out[0];
    double s = 0.0, d = 0.0;
    int64_t si = 0, di = 0;
    bool s_int = false, d_int = false;
    KILN_TRY(mv_host_scalar(n, &in[0], "start", &s, &si, &s_int));
    KILN_TRY(mv_host_scalar(n, &in[2], "delta", &d, &di, &d_int));
    int64_t len = ku_numel(y);
    if (!len) return KILN_OK;
    if ((y->dtype == KILN_I16 || y->dtype == KILN_I32 || y->dtype == KILN_I64) && (!s_int || !d_int))
        return kiln_error(KILN_ERR_INVALID_ARGUMENT, "Range: integer output from floating-point start/delta");
    unsigned blocks = ku_blocks(len, KU_THREADS, ctx);
    cudaStream_t st = ctx->stream;
    switch (y->dtype) {
    case KILN_F32: mv_range_float_kernel<float><<<blocks, KU_THREADS, 0, st>>>((float *)y->data, s, d, len); break;
    case KILN_F64: mv_range_float_kernel<double><<<blocks, KU_THREADS, 0, st>>>((double *)y->data, s, d, len); break;
    case KILN_F16: mv_range_float_kernel<__half><<<blocks, KU_THREADS, 0, st>>>((__half *)y->data, s, d, len); break;
    case KILN_BF16:
        mv_range_float_kernel<__nv_bfloat16><<<blocks, KU_THREADS, 0, st>>>((__nv_bfloat16 *)y->data, s, d, len);
        break;
    case KILN_I16: mv_range_int_kernel<int16_t><<<blocks, KU_THREADS, 0, st>>>((int16_t *)y->data, si, di, len); break;
    case KILN_I32: mv_range_int_kernel<int32_t><<<blocks, KU_THREADS, 0, st>>>((int32_t *)y->data, si, di, len); break;
    case KILN_I64: mv_range_int_kernel<int64_t><<<blocks, KU_THREADS, 0, st>>>((int64_t *)y->data, si, di, len); break;
    default: return kiln_error(KILN_ERR_UNSUPPORTED, "Range: %s output", kiln_dtype_name(y->dtype));
    }
    KILN_CUDA_LAUNCH_CHECK("mv_range_kernel");
    return KILN_OK;
}

/* Range needs start and delta on the host (limit only sets the length, which the runtime resolved). */
static kiln_status sup_range(const kiln_graph *g, const kiln_node *n) {
    const kiln_value *y = kiln_node_output(g, n, 0);
    if (y) {
        kiln_dtype t = y->dtype;
        if (t != KILN_F32 && t != KILN_F64 && t != KILN_F16 && t != KILN_BF16 && t != KILN_I16 && t != KILN_I32 && t != KILN_I64)
            return kiln_error(KILN_ERR_UNSUPPORTED, "Range: %s output is not supported on the CUDA backend", kiln_dtype_name(t));
    }
    KILN_TRY(ku_need_host(g, n, 0, "start"));
    return ku_need_host(g, n, 2, "delta");
}

/* ConstantOfShape: the output (shape resolved by the runtime) filled with the 'value' attribute
 * converted to the output's dtype (float32 0 by default). */
static kiln_status exec_constant_of_shape(const kiln_node *n, const kiln_cuda_tensor *in, int nin,
                                          const kiln_cuda_tensor *out, int nout, kiln_cuda_ctx *ctx) {
    const kiln_cuda_tensor *y = &out[0];
    const kiln_attr *a = kiln_node_attr(n, "value");
    uint64_t bits = 0;
    if (a) {
        if (a->type != KILN_ATTR_TENSOR || !a->t || kiln_tensor_numel(a->t) != 1 || !a->t->data)
            return kiln_error(KILN_ERR_INVALID_ARGUMENT, "ConstantOfShape: attribute 'value' must be a one-element tensor");
        KILN_TRY(mv_tensor_bits(n, y->dtype, a->t, &bits));
    }
    size_t es = kiln_dtype_size(y->dtype);
    if (es != 1 && es != 2 && es != 4 && es != 8)
        return kiln_error(KILN_ERR_UNSUPPORTED, "ConstantOfShape: %s output", kiln_dtype_name(y->dtype));
    return mv_fill(ctx, y->data, es, ku_numel(y), bits);
}

static kiln_status sup_constant_of_shape(const kiln_graph *g, const kiln_node *n) {
    const kiln_value *y = kiln_node_output(g, n, 0);
    size_t es = y ? kiln_dtype_size(y->dtype) : 4;
    if (y && (es == 0 || es == 16 || (y->dtype != KILN_BOOL && !mv_is_int(y->dtype) && y->dtype != KILN_F32 &&
                                      y->dtype != KILN_F16 && y->dtype != KILN_BF16 && y->dtype != KILN_F64)))
        return kiln_error(KILN_ERR_UNSUPPORTED, "ConstantOfShape: %s output is not supported on the CUDA backend",
                          kiln_dtype_name(y->dtype));
    return KILN_OK;
}

/* ---------------------------------------------------------------------------------------------
 * The family's table
 * ------------------------------------------------------------------------------------------- */

extern "C" const kiln_cuda_kernel kiln_cuda_kernels_movement[] = {
    {"Reshape", "", exec_same, sup_data},
    {"Flatten", "", exec_same, sup_data},
    {"Squeeze", "", exec_same, sup_data},
    {"Unsqueeze", "", exec_same, sup_data},
    {"Identity", "", exec_same, sup_data},
    {"Dropout", "", exec_dropout, sup_dropout},
    {"Transpose", "", exec_transpose, sup_data},
    {"DepthToSpace", "", exec_depth_space, sup_data},
    {"SpaceToDepth", "", exec_depth_space, sup_data},
    {"Concat", "", exec_concat, sup_data},
    {"Split", "", exec_split, sup_split},
    {"Slice", "", exec_slice, sup_slice},
    {"Expand", "", exec_expand, sup_data},
    {"Tile", "", exec_tile, sup_data},
    {"Pad", "", exec_pad, sup_pad},
    {"Gather", "", exec_gather, sup_gather},
    {"GatherElements", "", exec_gather_elements, sup_gather},
    {"GatherND", "", exec_gather_nd, sup_gather},
    {"ScatterND", "", exec_scatter_nd, sup_scatter},
    {"ScatterElements", "", exec_scatter_elements, sup_scatter},
    {"Scatter", "", exec_scatter_elements, sup_scatter},
    {"Trilu", "", exec_trilu, sup_trilu},
    {"Range", "", exec_range, sup_range},
    {"ConstantOfShape", "", exec_constant_of_shape, sup_constant_of_shape},
    {NULL, NULL, NULL, NULL},
};
