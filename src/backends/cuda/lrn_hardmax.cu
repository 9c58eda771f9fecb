/* lrn_hardmax.cu — CUDA kernels of Hardmax and LRN, with the CPU kernels' semantics
 * (src/backends/cpu/nn.c), on float32/float16/bfloat16 storage computing in float32.
 *
 * Hardmax views X as (outer, len, inner) around its axis (before opset 13: coerced to 2-D at axis,
 * default 1, so len spans dims [axis, rank) and inner = 1; from 13: len = dims[axis], default -1)
 * and writes 1 at the first maximum along len, found by the CPU's sequential scan (a NaN first
 * element wins; later NaNs are skipped): one thread per (outer, inner) column.
 *
 * LRN: y = x / (bias + alpha / size * sum of x^2 over channels [c - floor((size-1)/2),
 * c + ceil((size-1)/2)])^beta on X [N, C, D...], one thread per element, the squares summed in the
 * CPU's channel order without FMA contraction. */
#include "backends/cuda/kernel_util.cuh"

/* ---------------------------------------------------------------- Hardmax */

template <typename T>
__global__ void hardmax_kernel(const T *__restrict__ x, T *__restrict__ y, int64_t len, int64_t inner, int64_t cols) {
    T one = ku_from_f32<T>(1.0f), zero = ku_from_f32<T>(0.0f);
    for (int64_t c = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; c < cols; c += (int64_t)gridDim.x * blockDim.x) {
        int64_t o = c / inner, i = c - o * inner, base = o * len * inner + i, arg = 0;
        float mx = ku_f32(x[base]);
        for (int64_t l = 1; l < len; l++) {
            float v = ku_f32(x[base + l * inner]);
            if (v > mx) {
                mx = v;
                arg = l;
            }
        }
        for (int64_t l = 0; l < len; l++) y[base + l * inner] = l == arg ? one : zero;
    }
}

template <typename T>
static kiln_status hardmax_launch(kiln_cuda_ctx *ctx, const void *x, void *y, int64_t len, int64_t inner, int64_t cols) {
    hardmax_kernel<T><<<ku_blocks(cols, KU_THREADS, ctx, 4), KU_THREADS, 0, ctx->stream>>>((const T *)x, (T *)y, len,
                                                                                          inner, cols);
    KILN_CUDA_LAUNCH_CHECK("hardmax_kernel");
    return KILN_OK;
}

static kiln_status hardmax_run(const kiln_node *n, const kiln_cuda_tensor *in, int nin, const kiln_cuda_tensor *out,
                               int nout, kiln_cuda_ctx *ctx) {
    const kiln_cuda_tensor *x = &in[0];
    bool legacy = n->opset < 13;
    int axis;
    KILN_TRY(kiln_axis_normalize(kiln_attr_int(n, "axis", legacy ? 1 : -1), x->ndim, &axis));
    int64_t outer = kiln_numel(axis, x->dims), len, inner;
    if (x->ndim == 0) {
        len = inner = 1;
    } else if (legacy) {
        len = kiln_numel(x->ndim - axis, x->dims + axis);
        inner = 1;
    } else {
        len = x->dims[axis];
        inner = kiln_numel(x->ndim - axis - 1, x->dims + axis + 1);
    }
    int64_t cols = outer * inner;
    if (cols * len == 0) return KILN_OK;
    switch (x->dtype) {
    case KILN_F32: return hardmax_launch<float>(ctx, x->data, out[0].data, len, inner, cols);
    case KILN_F16: return hardmax_launch<__half>(ctx, x->data, out[0].data, len, inner, cols);
    default: return hardmax_launch<bf16>(ctx, x->data, out[0].data, len, inner, cols);
    }
}

/* ---------------------------------------------------------------- LRN */

template <typename T>
__global__ void lrn_kernel(const T *__restrict__ x, T *__restrict__ y, int64_t C, int64_t plane, int64_t before,
                           int64_t after, float bias, float coef, float beta, int64_t total) {
    for (int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; e < total; e += (int64_t)gridDim.x * blockDim.x) {
        int64_t i = e % plane, bc = e / plane, c = bc % C, b = bc / C;
        int64_t c0 = c - before < 0 ? 0 : c - before, c1 = c + after >= C ? C - 1 : c + after;
        float sq = 0.0f;
        for (int64_t k = c0; k <= c1; k++) {
            float v = ku_f32(x[(b * C + k) * plane + i]);
            sq = __fadd_rn(sq, __fmul_rn(v, v));
        }
        y[e] = ku_from_f32<T>(ku_f32(x[e]) / powf(__fadd_rn(bias, __fmul_rn(coef, sq)), beta));
    }
}

template <typename T>
static kiln_status lrn_launch(kiln_cuda_ctx *ctx, const kiln_cuda_tensor *x, void *y, int64_t before, int64_t after,
                              float bias, float coef, float beta) {
    int64_t total = ku_numel(x), plane = kiln_numel(x->ndim - 2, x->dims + 2);
    lrn_kernel<T><<<ku_blocks(total, KU_THREADS, ctx, 4), KU_THREADS, 0, ctx->stream>>>(
        (const T *)x->data, (T *)y, x->dims[1], plane, before, after, bias, coef, beta, total);
    KILN_CUDA_LAUNCH_CHECK("lrn_kernel");
    return KILN_OK;
}

static kiln_status lrn_run(const kiln_node *n, const kiln_cuda_tensor *in, int nin, const kiln_cuda_tensor *out,
                           int nout, kiln_cuda_ctx *ctx) {
    const kiln_cuda_tensor *x = &in[0];
    if (x->ndim < 3) return kiln_error(KILN_ERR_SHAPE, "LRN input must have rank >= 3, has rank %d", x->ndim);
    int64_t size = kiln_attr_int(n, "size", 0);
    if (size < 1) return kiln_error(KILN_ERR_INVALID_ARGUMENT, "LRN needs a positive 'size' attribute");
    float alpha = kiln_attr_float(n, "alpha", 1e-4f), beta = kiln_attr_float(n, "beta", 0.75f);
    float bias = kiln_attr_float(n, "bias", 1.0f), coef = alpha / (float)size;
    int64_t before = (size - 1) / 2, after = size - 1 - before;
    if (ku_numel(x) == 0) return KILN_OK;
    switch (x->dtype) {
    case KILN_F32: return lrn_launch<float>(ctx, x, out[0].data, before, after, bias, coef, beta);
    case KILN_F16: return lrn_launch<__half>(ctx, x, out[0].data, before, after, bias, coef, beta);
    default: return lrn_launch<bf16>(ctx, x, out[0].data, before, after, bias, coef, beta);
    }
}

/* Float32/float16/bfloat16 input (the CPU kernels take floats only). */
static kiln_status float_input(const kiln_graph *g, const kiln_node *n) {
    const kiln_value *x = ku_in(g, n, 0);
    if (!x) return kiln_error(KILN_ERR_INVALID_ARGUMENT, "%s: input 0 is missing", n->op_type);
    return ku_is_float(x->dtype) ? KILN_OK : ku_refuse_dtype(n, 0, x->dtype);
}

extern "C" const kiln_cuda_kernel kiln_cuda_kernels_lrn_hardmax[] = {
    {"Hardmax", "", hardmax_run, float_input},
    {"LRN", "", lrn_run, float_input},
    {NULL, NULL, NULL, NULL},
};
