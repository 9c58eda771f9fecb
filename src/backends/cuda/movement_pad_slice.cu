/* movement_pad_slice.cu — CUDA kernels of the data-movement ops that take or repeat a box of their
 * input: Slice, Expand, Tile (through the strided-copy engine of movement.cu) and Pad. Pad merges the
 * axes it does not pad into their neighbours, runs constant padding of the last axis only (an NHWC
 * channel pad) through a row kernel whose threads each write 16, 8 or 4 bytes of a row with one
 * store, and everything else through a per-element kernel, both with 32-bit index arithmetic when
 * the sizes fit. */
#include "backends/cuda/movement_util.cuh"

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
 * The family's table (slices, pads)
 * ------------------------------------------------------------------------------------------- */

extern "C" const kiln_cuda_kernel kiln_cuda_kernels_pad_slice[] = {
    {"Slice", "", exec_slice, sup_slice},
    {"Expand", "", exec_expand, sup_data},
    {"Tile", "", exec_tile, sup_data},
    {"Pad", "", exec_pad, sup_pad},
    {NULL, NULL, NULL, NULL},
};
