/* generate.cu — CUDA kernels of the ops that generate tensors from a few parameters: OneHot and
 * EyeLike, with the CPU kernels' semantics (src/backends/cpu/generate.c); and NonZero's refusal.
 *
 * Both kernels are dtype-generic on their output (elements move by their byte size, 1, 2, 4 or 8),
 * one thread per output element. NonZero's output shape depends on its input's values: the runtime
 * evaluates it on the host when its input is known there (a constant or shape arithmetic), and a
 * NonZero of a device value is refused at build time (the shape plan would need them on the host). */
#include "backends/cuda/kernel_util.cuh"

extern "C" {
#include "backends/cpu/reduce_util.h"
}

/* ---------------------------------------------------------------- OneHot */

/* The integer value of an index element (floats truncated toward zero, as the CPU loads them). */
template <typename I> static __device__ __forceinline__ int64_t gen_index(I v) { return (int64_t)v; }
static __device__ __forceinline__ int64_t gen_index(__half v) { return (int64_t)__half2float(v); }
static __device__ __forceinline__ int64_t gen_index(bf16 v) { return (int64_t)__bfloat162float(v); }

/* y seen as [outer, depth, inner]: y[o, d, i] = on where index[o, i] (negative ones plus depth when
 * wrap) == d, else off. */
template <typename T, typename I>
__global__ void gen_onehot_kernel(const I *__restrict__ ind, const T *__restrict__ vals, T *__restrict__ y,
                                  int64_t depth, int64_t inner, int64_t total, bool wrap) {
    T off = vals[0], on = vals[1];
    for (int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; e < total; e += (int64_t)gridDim.x * blockDim.x) {
        int64_t i = e % inner, od = e / inner, d = od % depth, o = od / depth;
        int64_t v = gen_index(ind[o * inner + i]);
        if (v < 0 && wrap) v += depth;
        y[e] = v == d ? on : off;
    }
}

template <typename T, typename I>
static kiln_status gen_onehot_launch(kiln_cuda_ctx *ctx, const kiln_cuda_tensor *ind, const kiln_cuda_tensor *vals,
                                     const kiln_cuda_tensor *y, int64_t depth, int64_t inner, bool wrap) {
    int64_t total = ku_numel(y);
    gen_onehot_kernel<T, I><<<ku_blocks(total, KU_THREADS, ctx, 4), KU_THREADS, 0, ctx->stream>>>(
        (const I *)ind->data, (const T *)vals->data, (T *)y->data, depth, inner, total, wrap);
    KILN_CUDA_LAUNCH_CHECK("gen_onehot_kernel");
    return KILN_OK;
}

/* Dispatches on the index type I, then the value size. */
template <typename I>
static kiln_status gen_onehot_values(kiln_cuda_ctx *ctx, const kiln_cuda_tensor *ind, const kiln_cuda_tensor *vals,
                                     const kiln_cuda_tensor *y, int64_t depth, int64_t inner, bool wrap) {
    switch (kiln_dtype_size(vals->dtype)) {
    case 1: return gen_onehot_launch<uint8_t, I>(ctx, ind, vals, y, depth, inner, wrap);
    case 2: return gen_onehot_launch<uint16_t, I>(ctx, ind, vals, y, depth, inner, wrap);
    case 4: return gen_onehot_launch<uint32_t, I>(ctx, ind, vals, y, depth, inner, wrap);
    default: return gen_onehot_launch<unsigned long long, I>(ctx, ind, vals, y, depth, inner, wrap);
    }
}

static kiln_status onehot_run(const kiln_node *n, const kiln_cuda_tensor *in, int nin, const kiln_cuda_tensor *out,
                              int nout, kiln_cuda_ctx *ctx) {
    const kiln_cuda_tensor *ind = &in[0], *vals = &in[2], *y = &out[0];
    kiln_tensor dv;
    int64_t depth;
    kiln_tensor_view(&dv, in[1].host_dtype, in[1].ndim, in[1].dims, (void *)in[1].host);
    KILN_TRY(kiln_red_read_scalar_i64(n, &dv, "depth", &depth));
    if (ku_numel(vals) != 2)
        return kiln_error(KILN_ERR_INVALID_ARGUMENT, "%s: 'values' must hold [off_value, on_value], got %lld elements",
                          n->op_type, (long long)ku_numel(vals));
    int axis;
    KILN_TRY(kiln_axis_normalize(kiln_attr_int(n, "axis", -1), ind->ndim + 1, &axis));
    if (y->dims[axis] != depth)
        return kiln_error(KILN_ERR_INTERNAL, "%s (cuda): planned depth %lld, input says %lld", n->op_type,
                          (long long)y->dims[axis], (long long)depth);
    if (ku_numel(y) == 0) return KILN_OK;
    int64_t inner = kiln_numel(ind->ndim - axis, ind->dims + axis);
    bool wrap = n->opset >= 11;
    switch (ind->dtype) {
    case KILN_I64: return gen_onehot_values<int64_t>(ctx, ind, vals, y, depth, inner, wrap);
    case KILN_I32: return gen_onehot_values<int32_t>(ctx, ind, vals, y, depth, inner, wrap);
    case KILN_I16: return gen_onehot_values<int16_t>(ctx, ind, vals, y, depth, inner, wrap);
    case KILN_I8: return gen_onehot_values<int8_t>(ctx, ind, vals, y, depth, inner, wrap);
    case KILN_U8: return gen_onehot_values<uint8_t>(ctx, ind, vals, y, depth, inner, wrap);
    case KILN_U16: return gen_onehot_values<uint16_t>(ctx, ind, vals, y, depth, inner, wrap);
    case KILN_U32: return gen_onehot_values<uint32_t>(ctx, ind, vals, y, depth, inner, wrap);
    case KILN_F32: return gen_onehot_values<float>(ctx, ind, vals, y, depth, inner, wrap);
    case KILN_F16: return gen_onehot_values<__half>(ctx, ind, vals, y, depth, inner, wrap);
    case KILN_BF16: return gen_onehot_values<bf16>(ctx, ind, vals, y, depth, inner, wrap);
    default: return ku_refuse_dtype(n, 0, ind->dtype);
    }
}

/* Indices: signed integers, uint8/16/32 or floats; depth known on the host; values of 1-8 bytes. */
static kiln_status onehot_supports(const kiln_graph *g, const kiln_node *n) {
    const kiln_value *ind = ku_in(g, n, 0), *depth = ku_in(g, n, 1), *vals = ku_in(g, n, 2);
    if (!ind || !depth || !vals) return kiln_error(KILN_ERR_INVALID_ARGUMENT, "%s: needs indices, depth and values", n->op_type);
    if (!(ku_is_sint(ind->dtype) || ku_is_float(ind->dtype) || ind->dtype == KILN_U8 || ind->dtype == KILN_U16 ||
          ind->dtype == KILN_U32))
        return ku_refuse_dtype(n, 0, ind->dtype);
    size_t es = kiln_dtype_size(vals->dtype);
    if (es != 1 && es != 2 && es != 4 && es != 8) return ku_refuse_dtype(n, 2, vals->dtype);
    return ku_need_host(g, n, 1, "depth");
}

/* ---------------------------------------------------------------- EyeLike */

/* y[r, c] = one where c - r == k, else zero bits. */
template <typename T>
__global__ void gen_eye_kernel(T *__restrict__ y, int64_t cols, int64_t k, int64_t total, T one) {
    for (int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; e < total; e += (int64_t)gridDim.x * blockDim.x) {
        int64_t r = e / cols, c = e - r * cols;
        y[e] = c - r == k ? one : (T)0;
    }
}

template <typename T>
static kiln_status gen_eye_launch(kiln_cuda_ctx *ctx, const kiln_cuda_tensor *y, int64_t k, uint64_t bits) {
    T one;
    memcpy(&one, &bits, sizeof one);
    int64_t total = ku_numel(y);
    gen_eye_kernel<T><<<ku_blocks(total, KU_THREADS, ctx, 4), KU_THREADS, 0, ctx->stream>>>((T *)y->data, y->dims[1], k,
                                                                                           total, one);
    KILN_CUDA_LAUNCH_CHECK("gen_eye_kernel");
    return KILN_OK;
}

static kiln_status eyelike_run(const kiln_node *n, const kiln_cuda_tensor *in, int nin, const kiln_cuda_tensor *out,
                               int nout, kiln_cuda_ctx *ctx) {
    const kiln_cuda_tensor *y = &out[0];
    if (y->ndim != 2) return kiln_error(KILN_ERR_INVALID_ARGUMENT, "%s: input must be 2-D, got rank %d", n->op_type, y->ndim);
    if (ku_numel(y) == 0) return KILN_OK;
    int64_t k = kiln_attr_int(n, "k", 0);
    if (k <= -y->dims[0] || k >= y->dims[1]) k = y->dims[1]; /* the diagonal misses the matrix */
    uint64_t bits = ku_value_bits(y->dtype, 1.0);
    switch (kiln_dtype_size(y->dtype)) {
    case 1: return gen_eye_launch<uint8_t>(ctx, y, k, bits);
    case 2: return gen_eye_launch<uint16_t>(ctx, y, k, bits);
    case 4: return gen_eye_launch<uint32_t>(ctx, y, k, bits);
    default: return gen_eye_launch<unsigned long long>(ctx, y, k, bits);
    }
}

/* Outputs of any numeric dtype of 1-8 bytes (the input is read for its shape only). */
static kiln_status eyelike_supports(const kiln_graph *g, const kiln_node *n) {
    const kiln_value *y = ku_out(g, n, 0);
    if (!y) return kiln_error(KILN_ERR_INVALID_ARGUMENT, "%s: output 0 is missing", n->op_type);
    size_t es = kiln_dtype_size(y->dtype);
    if (es != 1 && es != 2 && es != 4 && es != 8)
        return kiln_error(KILN_ERR_UNSUPPORTED, "%s (cuda): output dtype %s is not supported", n->op_type,
                          kiln_dtype_name(y->dtype));
    return KILN_OK;
}

/* ---------------------------------------------------------------- NonZero */

static kiln_status nonzero_refusal(const kiln_node *n) {
    return kiln_error(KILN_ERR_UNSUPPORTED, "%s (cuda): its output shape depends on the values of its input, which is "
                      "computed on the device; only a NonZero of a value known on the host (a constant or shape "
                      "arithmetic) runs, evaluated on the host", n->op_type);
}

/* Never reached: nonzero_supports refuses every node the host does not evaluate. */
static kiln_status nonzero_run(const kiln_node *n, const kiln_cuda_tensor *in, int nin, const kiln_cuda_tensor *out,
                               int nout, kiln_cuda_ctx *ctx) {
    return nonzero_refusal(n);
}

static kiln_status nonzero_supports(const kiln_graph *g, const kiln_node *n) { return nonzero_refusal(n); }

extern "C" const kiln_cuda_kernel kiln_cuda_kernels_generate[] = {
    {"OneHot", "", onehot_run, onehot_supports},
    {"EyeLike", "", eyelike_run, eyelike_supports},
    {"NonZero", "", nonzero_run, nonzero_supports},
    {NULL, NULL, NULL, NULL},
};
