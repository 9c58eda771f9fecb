/* movement.cu — CUDA kernels of the data-movement ops that copy, transpose and fill: Reshape,
 * Flatten, Squeeze, Unsqueeze, Identity, Dropout (device copies), Transpose, DepthToSpace,
 * SpaceToDepth, Concat, Split, Trilu, Range and ConstantOfShape; and the strided-copy engine and
 * fill that movement_pad_slice.cu and movement_gather_scatter.cu use too (movement_util.cuh).
 *
 * The strided-copy engine (mv_copy) drops unit dims, merges dims that are contiguous in source and
 * destination, widens contiguous runs to 16/8/4-byte units when sizes and addresses allow, and sends
 * a transpose whose source runs along the destination's second-to-last dim through a 32x32
 * shared-memory tile kernel; everything else goes through one grid-stride kernel with 32-bit index
 * arithmetic whenever the extents fit. */
#include "backends/cuda/movement_util.cuh"

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
kiln_status mv_copy(kiln_cuda_ctx *ctx, size_t es, int r, const int64_t *dims, const void *src, const int64_t *ss,
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
kiln_status mv_transpose(kiln_cuda_ctx *ctx, size_t es, int r, const int64_t *dims, const int *perm,
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
kiln_status mv_fill(kiln_cuda_ctx *ctx, void *dst, size_t es, int64_t n, uint64_t bits) {
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
kiln_status mv_copy_same(const kiln_node *n, const kiln_cuda_tensor *x, const kiln_cuda_tensor *y,
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
 * The family's table (copies, transposes, fills)
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
    {"Trilu", "", exec_trilu, sup_trilu},
    {"Range", "", exec_range, sup_range},
    {"ConstantOfShape", "", exec_constant_of_shape, sup_constant_of_shape},
    {NULL, NULL, NULL, NULL},
};
