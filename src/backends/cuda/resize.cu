/* resize.cu — CUDA kernels of Resize (opsets 10..19) and Upsample (7, 9), with the CPU kernel's
 * semantics (src/backends/cpu/resize.c): every mode, coordinate transformation, nearest_mode,
 * cubic_coeff_a, exclude_outside, antialias, axes, keep_aspect_ratio_policy and tf_crop_and_resize
 * extrapolation.
 *
 * Both backends take the geometry from ir/resize_geom.h: a first small kernel evaluates it per axis
 * and output position (nearest: the input index; linear/cubic: the taps' indices and weights) into
 * the workspace — this file compiles with --fmad=false, so its double arithmetic rounds exactly as
 * the host's. Then one thread per output element gathers (nearest, any dtype, by element size) or
 * sums the tensor product of the resized axes' taps in float32 (linear/cubic: float32, float16,
 * bfloat16). The CPU resamples one axis at a time, so the two differ only by float32 rounding. */
#include "backends/cuda/kernel_util.cuh"

extern "C" {
#include "ir/resize_geom.h"
}

#define RS_MAX_TAPS 16 /* per axis: a cubic antialias downscale by up to 1/4 */

/* Where the per-axis tables of the resized axes sit in the workspace. */
typedef struct rs_geom {
    int r, m;                    /* rank; resized (non-identity) axes */
    int ax[KILN_MAX_DIMS];       /* the resized axes, ascending */
    int taps[KILN_MAX_DIMS];     /* taps per output position of each (1 for nearest) */
    int64_t tab[KILN_MAX_DIMS];  /* first table entry of each */
    int64_t out[KILN_MAX_DIMS];  /* output dims */
    int64_t istr[KILN_MAX_DIMS]; /* input strides */
} rs_geom;

/* Fills the tables: one thread per position i (resized axis j, output position o; i = the sizes of
 * the resized axes before j + o). Tap t of (j, o) is entry e = tab[j] + o * taps[j] + t: idx[e] its
 * input index, w[e] its weight (nearest: one tap of weight 1); ex[i] marks an extrapolated position. */
__global__ void rs_plan_kernel(kiln_resize_params p, rs_geom g, int64_t positions, int64_t *idx, float *w, bool *ex) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < positions; i += (int64_t)gridDim.x * blockDim.x) {
        int j = 0;
        int64_t o = i;
        while (o >= g.out[g.ax[j]]) o -= g.out[g.ax[j++]];
        int a = g.ax[j], n = g.taps[j];
        int64_t e = g.tab[j] + o * n;
        if (p.mode == KILN_RESIZE_NEAREST) {
            idx[e] = kiln_resize_nearest_index(&p, a, o);
            w[e] = 1.0f;
            ex[i] = idx[e] < 0;
            continue;
        }
        int64_t ti[RS_MAX_TAPS];
        double tw[RS_MAX_TAPS];
        bool x;
        kiln_resize_plan_taps(&p, a, o, n, ti, tw, &x);
        for (int t = 0; t < n; t++) {
            idx[e + t] = ti[t];
            w[e + t] = (float)tw[t];
        }
        ex[i] = x;
    }
}

/* For output element i: *base = the input offset of its identity axes, pos[j] = its coordinate on
 * resized axis j. Returns whether any resized axis is extrapolated there. */
static __device__ __forceinline__ bool rs_locate(const rs_geom &g, int64_t i, const bool *ex, int64_t *base,
                                                 int64_t *pos) {
    int64_t c[KILN_MAX_DIMS];
    for (int d = g.r - 1; d >= 0; d--) {
        c[d] = i % g.out[d];
        i /= g.out[d];
    }
    int64_t b = 0, before = 0;
    for (int d = 0, j = 0; d < g.r; d++) {
        if (j < g.m && g.ax[j] == d) {
            pos[j] = c[d];
            j++;
        } else {
            b += c[d] * g.istr[d];
        }
    }
    bool any = false;
    for (int j = 0; j < g.m; j++) {
        any |= ex[before + pos[j]];
        before += g.out[g.ax[j]];
    }
    *base = b;
    return any;
}

/* Nearest: y[i] = x[base + sum idx_j * istr_j], or the extrapolation bits. */
template <typename T>
__global__ void rs_nearest_kernel(const T *__restrict__ x, T *__restrict__ y, rs_geom g, int64_t total,
                                  const int64_t *__restrict__ idx, const bool *__restrict__ ex, T extrap) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += (int64_t)gridDim.x * blockDim.x) {
        int64_t base, pos[KILN_MAX_DIMS];
        if (rs_locate(g, i, ex, &base, pos)) {
            y[i] = extrap;
            continue;
        }
        for (int j = 0; j < g.m; j++) base += idx[g.tab[j] + pos[j]] * g.istr[g.ax[j]];
        y[i] = x[base];
    }
}

/* Linear/cubic: y[i] = sum over every combination of taps of prod(w) * x, in float32. */
template <typename T>
__global__ void rs_interp_kernel(const T *__restrict__ x, T *__restrict__ y, rs_geom g, int64_t total,
                                 const int64_t *__restrict__ idx, const float *__restrict__ w,
                                 const bool *__restrict__ ex, float extrap) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += (int64_t)gridDim.x * blockDim.x) {
        int64_t base, pos[KILN_MAX_DIMS];
        if (rs_locate(g, i, ex, &base, pos)) {
            y[i] = ku_from_f32<T>(extrap);
            continue;
        }
        int64_t combos = 1;
        for (int j = 0; j < g.m; j++) combos *= g.taps[j];
        float acc = 0.0f;
        for (int64_t k = 0; k < combos; k++) {
            int64_t rem = k, off = base;
            float wt = 1.0f;
            for (int j = g.m - 1; j >= 0; j--) {
                int t = (int)(rem % g.taps[j]);
                rem /= g.taps[j];
                int64_t e = g.tab[j] + pos[j] * g.taps[j] + t;
                off += idx[e] * g.istr[g.ax[j]];
                wt *= w[e];
            }
            if (wt != 0.0f) acc += wt * ku_f32(x[off]);
        }
        y[i] = ku_from_f32<T>(acc);
    }
}

/* n rounded up to 256 bytes (workspace sub-buffers). */
static size_t rs_align(size_t n) { return (n + 255) & ~(size_t)255; }

/* Input indices of scales, roi and sizes for n (-1: not an input). */
static void rs_input_slots(const kiln_node *n, int *scales, int *roi, int *sizes) {
    bool upsample = !strcmp(n->op_type, "Upsample"), v10 = upsample || n->opset < 11;
    *scales = upsample ? (n->opset >= 9 ? 1 : -1) : v10 ? 1 : 2;
    *roi = v10 ? -1 : 1;
    *sizes = v10 ? -1 : 3;
}

/* A host view of input i of in (NULL when it is absent, empty or not an input). */
static const kiln_tensor *rs_view(const kiln_cuda_tensor *in, int nin, int i, kiln_tensor *buf) {
    if (i < 0 || i >= nin || ku_absent(&in[i]) || ku_numel(&in[i]) == 0) return NULL;
    kiln_tensor_view(buf, in[i].host_dtype, in[i].ndim, in[i].dims, (void *)in[i].host);
    return buf;
}

template <typename T>
static kiln_status rs_launch_nearest(kiln_cuda_ctx *ctx, const void *x, void *y, const rs_geom &g, int64_t total,
                                     const int64_t *idx, const bool *ex, uint64_t bits) {
    T extrap;
    memcpy(&extrap, &bits, sizeof extrap);
    rs_nearest_kernel<T><<<ku_blocks(total, KU_THREADS, ctx, 4), KU_THREADS, 0, ctx->stream>>>(
        (const T *)x, (T *)y, g, total, idx, ex, extrap);
    KILN_CUDA_LAUNCH_CHECK("rs_nearest_kernel");
    return KILN_OK;
}

template <typename T>
static kiln_status rs_launch_interp(kiln_cuda_ctx *ctx, const void *x, void *y, const rs_geom &g, int64_t total,
                                    const int64_t *idx, const float *w, const bool *ex, float extrap) {
    rs_interp_kernel<T><<<ku_blocks(total, KU_THREADS, ctx, 4), KU_THREADS, 0, ctx->stream>>>(
        (const T *)x, (T *)y, g, total, idx, w, ex, extrap);
    KILN_CUDA_LAUNCH_CHECK("rs_interp_kernel");
    return KILN_OK;
}

static kiln_status resize_run(const kiln_node *n, const kiln_cuda_tensor *in, int nin, const kiln_cuda_tensor *out,
                              int nout, kiln_cuda_ctx *ctx) {
    const kiln_cuda_tensor *x = &in[0], *y = &out[0];
    int si, ri, zi;
    rs_input_slots(n, &si, &ri, &zi);
    kiln_tensor sb, rb, zb;
    kiln_resize_params p;
    KILN_TRY(kiln_resize_setup(n, x->ndim, x->dims, rs_view(in, nin, si, &sb), rs_view(in, nin, ri, &rb),
                               rs_view(in, nin, zi, &zb), &p));
    for (int d = 0; d < p.rank; d++)
        if (p.out[d] != y->dims[d])
            return kiln_error(KILN_ERR_INTERNAL, "%s (cuda): planned output dim %d is %lld, the geometry says %lld",
                              n->op_type, d, (long long)y->dims[d], (long long)p.out[d]);
    int64_t total = ku_numel(y);
    if (total == 0) return KILN_OK;
    if (ku_numel(x) == 0)
        return kiln_error(KILN_ERR_SHAPE, "%s: cannot resize an empty input to a non-empty output", n->op_type);
    size_t es = kiln_dtype_size(x->dtype);
    if (p.rank == 0 || p.mode == KILN_RESIZE_NEAREST) {
        bool id = true;
        for (int a = 0; a < p.rank; a++) id = id && kiln_resize_axis_identity(&p, a);
        if (id) {
            KILN_CUDA_TRY(cudaMemcpyAsync(y->data, x->data, (size_t)total * es, cudaMemcpyDeviceToDevice, ctx->stream));
            return KILN_OK;
        }
    }
    rs_geom g;
    memset(&g, 0, sizeof g);
    g.r = p.rank;
    kiln_strides(p.rank, p.in, g.istr);
    int64_t entries = 0, positions = 0;
    for (int a = 0; a < p.rank; a++) {
        g.out[a] = p.out[a];
        if (kiln_resize_axis_identity(&p, a)) continue;
        int nt = p.mode == KILN_RESIZE_NEAREST ? 1 : kiln_resize_taps(&p, a);
        if (nt > RS_MAX_TAPS)
            return kiln_error(KILN_ERR_UNSUPPORTED, "%s (cuda): antialias needs %d taps on axis %d (at most %d: "
                              "downscales by up to 1/4 for cubic, 1/8 for linear)", n->op_type, nt, a, RS_MAX_TAPS);
        g.ax[g.m] = a;
        g.taps[g.m] = nt;
        g.tab[g.m++] = entries;
        entries += p.out[a] * nt;
        positions += p.out[a];
    }
    size_t ib = rs_align((size_t)entries * sizeof(int64_t)), wb = rs_align((size_t)entries * sizeof(float));
    if (ib + wb + (size_t)positions > ctx->workspace_bytes)
        return kiln_error(KILN_ERR_UNSUPPORTED, "%s (cuda): the resize tables need %zu bytes of workspace (%zu available)",
                          n->op_type, ib + wb + (size_t)positions, ctx->workspace_bytes);
    int64_t *idx = (int64_t *)ctx->workspace;
    float *w = (float *)((char *)ctx->workspace + ib);
    bool *ex = (bool *)((char *)ctx->workspace + ib + wb);
    if (g.m > 0) {
        rs_plan_kernel<<<ku_blocks(positions, KU_THREADS, ctx), KU_THREADS, 0, ctx->stream>>>(p, g, positions, idx, w, ex);
        KILN_CUDA_LAUNCH_CHECK("rs_plan_kernel");
    }
    if (p.mode == KILN_RESIZE_NEAREST) {
        uint64_t bits = ku_value_bits(y->dtype, p.extrapolation);
        switch (es) {
        case 1: return rs_launch_nearest<uint8_t>(ctx, x->data, y->data, g, total, idx, ex, bits);
        case 2: return rs_launch_nearest<uint16_t>(ctx, x->data, y->data, g, total, idx, ex, bits);
        case 4: return rs_launch_nearest<uint32_t>(ctx, x->data, y->data, g, total, idx, ex, bits);
        default: return rs_launch_nearest<unsigned long long>(ctx, x->data, y->data, g, total, idx, ex, bits);
        }
    }
    switch (x->dtype) {
    case KILN_F32: return rs_launch_interp<float>(ctx, x->data, y->data, g, total, idx, w, ex, p.extrapolation);
    case KILN_F16: return rs_launch_interp<__half>(ctx, x->data, y->data, g, total, idx, w, ex, p.extrapolation);
    default: return rs_launch_interp<bf16>(ctx, x->data, y->data, g, total, idx, w, ex, p.extrapolation);
    }
}

/* Nearest on any dtype of 1, 2, 4 or 8 bytes, linear/cubic on float32/float16/bfloat16; the scales,
 * roi and sizes inputs must be known on the host. */
static kiln_status resize_supports(const kiln_graph *g, const kiln_node *n) {
    const kiln_value *x = ku_in(g, n, 0);
    if (!x) return kiln_error(KILN_ERR_INVALID_ARGUMENT, "%s: input 0 is missing", n->op_type);
    size_t es = kiln_dtype_size(x->dtype);
    bool upsample = !strcmp(n->op_type, "Upsample"), v10 = upsample || n->opset < 11;
    const char *mode = kiln_attr_string(n, "mode", "nearest");
    if (strcmp(mode, "nearest") && !ku_is_float(x->dtype))
        return kiln_error(KILN_ERR_UNSUPPORTED, "%s (cuda): mode '%s' needs float data, got %s", n->op_type, mode,
                          kiln_dtype_name(x->dtype));
    if (es != 1 && es != 2 && es != 4 && es != 8) return ku_refuse_dtype(n, 0, x->dtype);
    int si, ri, zi;
    rs_input_slots(n, &si, &ri, &zi);
    if (si > 0 && si < n->ninputs) KILN_TRY(ku_need_host(g, n, si, "scales"));
    if (!v10 && ri < n->ninputs) KILN_TRY(ku_need_host(g, n, ri, "roi"));
    if (!v10 && zi < n->ninputs) KILN_TRY(ku_need_host(g, n, zi, "sizes"));
    return KILN_OK;
}

extern "C" const kiln_cuda_kernel kiln_cuda_kernels_resize[] = {
    {"Resize", "", resize_run, resize_supports},
    {"Upsample", "", resize_run, resize_supports},
    {NULL, NULL, NULL, NULL},
};
