/* conv.cu — Conv, ConvTranspose and kiln.FusedConv's convolution on the GPU through cuDNN (the legacy
 * descriptor API): 1-D (run as 2-D with a unit height), 2-D and 3-D, with groups, strides, dilations,
 * explicit or automatic padding, and the optional bias; float32, float16 and bfloat16 storage. Tensors
 * are NCHW, or, for a FusedConv with channels_last = 1 (2-D only, ir/fused_ops.h), NHWC with the filter
 * as KRSC (cuDNN's CUDNN_TENSOR_NHWC for x, y, z and the filter alike).
 *
 * Precision: float32 runs with CUDNN_FMA_MATH (no TF32: results must match the CPU oracle to 1e-4
 * relative), float16/bfloat16 with float32 compute and tensor-op math. The window geometry comes
 * from src/ir/nn_window.c (as for shape inference and the CPU kernels). cuDNN pads symmetrically,
 * so:
 *  - Conv with begin != end padding copies the input into ctx->workspace with the surplus padding
 *    made explicit (zeros) and lets cuDNN pad the common part (NCHW and NHWC alike);
 *  - ConvTranspose whose cropping cuDNN cannot express (output_padding, asymmetric pads,
 *    output_shape) computes the uncropped transposed result into ctx->workspace and then crops /
 *    zero-extends it into the output.
 * Large batches run in chunks of images so that every tensor stays within cuDNN's 2^31-element
 * limit and a staging copy within half of the workspace.
 *
 * kiln.FusedConv (y = act(conv(x) + b + z)) with activation none or Relu is one call of
 * cudnnConvolutionBiasActivationForward (identity only with IMPLICIT_PRECOMP_GEMM, cuDNN's rule; an
 * absent bias reads ctx->zero). Other activations, and nodes for which cuDNN refuses the fused call
 * (remembered per node, logged once), run the convolution, then one epilogue kernel
 * (fused_epilogue.cu) per chunk; plain Conv adds its bias with a small kernel of this file.
 *
 * The algorithm is the first of cudnnGetConvolutionForwardAlgorithm_v7's heuristic list that fits the
 * workspace left (an identity FusedConv prefers IMPLICIT_PRECOMP_GEMM, so that it can fuse). A Conv or
 * FusedConv tuned at build time (cuda_kernels.h: tactics) runs its recorded algorithm and math type
 * instead, when cuDNN accepts them within the workspace. Conv and FusedConv keep their descriptors and
 * chosen algorithm per node and shape in the context's node state (ctx->state), made on the first run
 * of a shape and reused after, so an eager run does no heuristic queries; ConvTranspose makes its
 * descriptors and follows the heuristic on every call (host work only; a captured CUDA graph replays
 * none of it). */
#include "backends/cuda/kernel_util.cuh"

#include <float.h>

extern "C" {
#include "core/log.h"
#include "ir/fused_ops.h"
#include "ir/nn_window.h"
}

#define CONV_MAX_SP 3
#define CONV_ALIGN 256
/* Cached cuDNN calls per node and context: two per shape plan (full chunks and a last, smaller one)
 * for cuda_internal.h's 16 plans; the least recently used is replaced beyond. */
#define CONV_CALLS 32

/* One convolution as cuDNN sees it (forward: x -> y; backward data: y -> x, i.e. ConvTranspose
 * reads "y" and writes "x"): nd = 2 or 3 spatial dims, sizes as ints, in cuDNN's logical NCHW order
 * whatever the memory layout. */
typedef struct conv_desc_dims {
    int nd;
    int x[5], w[5], y[5];
    int pad[3], stride[3], dil[3];
    int groups;
} conv_desc_dims;

/* b and act exist only for the fused call (cudnnConvolutionBiasActivationForward). */
typedef struct conv_descs {
    cudnnTensorDescriptor_t x, y, b;
    cudnnFilterDescriptor_t w;
    cudnnConvolutionDescriptor_t c;
    cudnnActivationDescriptor_t act;
} conv_descs;

/* What a FusedConv asks of cuDNN: nothing fused, or the fused call with an identity or Relu tail. */
typedef enum conv_fuse_mode { CONV_UNFUSED = 0, CONV_FUSE_IDENTITY, CONV_FUSE_RELU } conv_fuse_mode;

/* Everything the descriptors and the algorithm choice of one call depend on (compared bytewise:
 * built from a zeroed struct). */
typedef struct conv_key {
    conv_desc_dims dd;
    int dtype, nhwc, mode, unused; /* unused: no padding bytes before avail */
    size_t avail;      /* workspace bytes left for cuDNN */
} conv_key;

/* One cached cuDNN call: descriptors set for key, the algorithm chosen for them. */
typedef struct conv_call {
    conv_key key;
    bool used;
    uint64_t last_used;
    conv_descs d;
    cudnnConvolutionFwdAlgoPerf_t perf;
    bool from_tactic;  /* perf is the node's tactic */
    bool fused;        /* runs cudnnConvolutionBiasActivationForward */
} conv_call;

/* A Conv / FusedConv node's state in one context (ctx->state; see cuda_kernels.h). */
typedef struct conv_state {
    kiln_cuda_node_state base;
    bool fused_refused; /* cuDNN refused the fused call once: this node runs unfused from now on */
    uint64_t tick;
    conv_call calls[CONV_CALLS];
} conv_state;

/* The tail of a kiln.FusedConv: act(y + z) (the bias is the convolution's). */
typedef struct conv_fuse {
    kiln_act act;
    const kiln_cuda_tensor *z; /* the residual, exactly Y's shape and layout, or NULL */
} conv_fuse;

/* A shift between two planes' worth of spatial boxes: destination coordinate = source coordinate
 * + off (per spatial dim; negative offsets crop). inner: elements per spatial position (1 for NCHW
 * planes, C for NHWC images). */
typedef struct conv_shift {
    int nsp;
    int64_t src[CONV_MAX_SP], dst[CONV_MAX_SP], off[CONV_MAX_SP];
    int64_t inner;
} conv_shift;

/* y is (N, M, plane): y[n, m, j] += b[m]. total = N * M * plane. NHWC output: N = images x
 * positions, plane = 1. */
template <typename T>
__global__ void conv_bias_kernel(T *__restrict__ y, const T *__restrict__ b, int64_t M, int64_t plane, int64_t total) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += (int64_t)gridDim.x * blockDim.x) {
        int64_t m = (i / plane) % M;
        y[i] = ku_from_f32<T>(ku_f32(y[i]) + ku_f32(b[m]));
    }
}

/* dst is (planes, s.dst..., s.inner), src is (planes, s.src..., s.inner): dst[p, c, k] =
 * src[p, c - s.off, k] where that lies inside src, else 0. T is an unsigned integer of the element
 * size (bits are moved). */
template <typename T>
__global__ void conv_shift_kernel(const T *__restrict__ src, T *__restrict__ dst, conv_shift s, int64_t planes) {
    int64_t dplane = 1, splane = 1;
    for (int d = 0; d < s.nsp; d++) {
        dplane *= s.dst[d];
        splane *= s.src[d];
    }
    int64_t total = planes * dplane * s.inner;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += (int64_t)gridDim.x * blockDim.x) {
        int64_t q = i / s.inner, k = i - q * s.inner;
        int64_t p = q / dplane, r = q - p * dplane, soff = 0, sstr = 1;
        bool inside = true;
        for (int d = s.nsp - 1; d >= 0; d--) {
            int64_t c = r % s.dst[d] - s.off[d];
            r /= s.dst[d];
            inside = inside && c >= 0 && c < s.src[d];
            soff += c * sstr;
            sstr *= s.src[d];
        }
        dst[i] = inside ? src[(p * splane + soff) * s.inner + k] : (T)0;
    }
}

static kiln_status conv_add_bias(kiln_cuda_ctx *ctx, kiln_dtype t, void *y, const void *b, int64_t N, int64_t M,
                                 int64_t plane) {
    int64_t total = N * M * plane;
    if (!total) return KILN_OK;
    unsigned blocks = ku_blocks(total, KU_THREADS, ctx);
    switch (t) {
    case KILN_F32:
        conv_bias_kernel<float><<<blocks, KU_THREADS, 0, ctx->stream>>>((float *)y, (const float *)b, M, plane, total);
        break;
    case KILN_F16:
        conv_bias_kernel<__half><<<blocks, KU_THREADS, 0, ctx->stream>>>((__half *)y, (const __half *)b, M, plane, total);
        break;
    default:
        conv_bias_kernel<bf16><<<blocks, KU_THREADS, 0, ctx->stream>>>((bf16 *)y,
                                                                                  (const bf16 *)b, M, plane, total);
        break;
    }
    KILN_CUDA_LAUNCH_CHECK("conv_bias_kernel");
    return KILN_OK;
}

static kiln_status conv_run_shift(kiln_cuda_ctx *ctx, size_t es, const void *src, void *dst, const conv_shift *s,
                                  int64_t planes) {
    int64_t total = planes * s->inner;
    for (int d = 0; d < s->nsp; d++) total *= s->dst[d];
    if (!total) return KILN_OK;
    unsigned blocks = ku_blocks(total, KU_THREADS, ctx);
    if (es == 4) conv_shift_kernel<uint32_t><<<blocks, KU_THREADS, 0, ctx->stream>>>((const uint32_t *)src, (uint32_t *)dst, *s, planes);
    else conv_shift_kernel<uint16_t><<<blocks, KU_THREADS, 0, ctx->stream>>>((const uint16_t *)src, (uint16_t *)dst, *s, planes);
    KILN_CUDA_LAUNCH_CHECK("conv_shift_kernel");
    return KILN_OK;
}

static cudnnDataType_t conv_dnn_type(kiln_dtype t) {
    return t == KILN_F32 ? CUDNN_DATA_FLOAT : t == KILN_F16 ? CUDNN_DATA_HALF : CUDNN_DATA_BFLOAT16;
}

/* Writes cuDNN dims (N, C, spatial...) into out; a 1-D problem gets a unit height. Fails when a
 * size or the element count does not fit cuDNN's int sizes. */
static kiln_status conv_dims(const kiln_node *n, int nsp, int64_t N, int64_t C, const int64_t *sp, int *out) {
    int64_t v[5], total = N * C;
    int r = 0;
    v[r++] = N;
    v[r++] = C;
    if (nsp == 1) v[r++] = 1;
    for (int i = 0; i < nsp; i++) {
        v[r++] = sp[i];
        total *= sp[i];
    }
    for (int i = 0; i < r; i++) {
        if (v[i] > INT32_MAX)
            return kiln_error(KILN_ERR_UNSUPPORTED, "%s: dimension %lld exceeds cuDNN's int range", n->op_type, (long long)v[i]);
        out[i] = (int)v[i];
    }
    if (total > INT32_MAX)
        return kiln_error(KILN_ERR_UNSUPPORTED, "%s: a tensor of %lld elements exceeds cuDNN's 2^31 limit", n->op_type,
                          (long long)total);
    return KILN_OK;
}

/* Per-dim ints for cuDNN, with the unit height of a 1-D problem (value unit there). */
static void conv_ints(int nsp, const int64_t *v, int unit, int *out) {
    int r = 0;
    if (nsp == 1) out[r++] = unit;
    for (int i = 0; i < nsp; i++) out[r++] = (int)v[i];
}

/* Creates x, y, w and c, and with fused also b and act (d zeroed by the caller; on failure the
 * ones made stay in d for conv_descs_destroy). */
static kiln_status conv_descs_create(conv_descs *d, bool fused) {
    KILN_CUDNN_TRY(cudnnCreateTensorDescriptor(&d->x));
    KILN_CUDNN_TRY(cudnnCreateTensorDescriptor(&d->y));
    KILN_CUDNN_TRY(cudnnCreateFilterDescriptor(&d->w));
    KILN_CUDNN_TRY(cudnnCreateConvolutionDescriptor(&d->c));
    if (fused) {
        KILN_CUDNN_TRY(cudnnCreateTensorDescriptor(&d->b));
        KILN_CUDNN_TRY(cudnnCreateActivationDescriptor(&d->act));
    }
    return KILN_OK;
}

static void conv_descs_destroy(conv_descs *d) {
    if (d->x) cudnnDestroyTensorDescriptor(d->x);
    if (d->y) cudnnDestroyTensorDescriptor(d->y);
    if (d->b) cudnnDestroyTensorDescriptor(d->b);
    if (d->w) cudnnDestroyFilterDescriptor(d->w);
    if (d->c) cudnnDestroyConvolutionDescriptor(d->c);
    if (d->act) cudnnDestroyActivationDescriptor(d->act);
    memset(d, 0, sizeof *d);
}

/* Fills the descriptors for data type t from dd, in NCHW or (nhwc) NHWC / KRSC memory layout (dd's
 * sizes are in the logical NCHW order either way, as cuDNN takes them); sets the math type the
 * precision allows (float32: FMA only, no TF32; 16-bit: tensor ops). With d->b and d->act (the
 * fused call): the bias as a [1, M, 1, ...] tensor of t in y's layout, and the activation mode
 * (identity or Relu). */
static kiln_status conv_descs_set(conv_descs *d, const conv_desc_dims *dd, kiln_dtype t, bool nhwc,
                                  cudnnActivationMode_t mode) {
    cudnnDataType_t dt = conv_dnn_type(t);
    cudnnTensorFormat_t fmt = nhwc ? CUDNN_TENSOR_NHWC : CUDNN_TENSOR_NCHW;
    int nb = dd->nd + 2;
    KILN_CUDNN_TRY(cudnnSetTensorNdDescriptorEx(d->x, fmt, dt, nb, dd->x));
    KILN_CUDNN_TRY(cudnnSetTensorNdDescriptorEx(d->y, fmt, dt, nb, dd->y));
    KILN_CUDNN_TRY(cudnnSetFilterNdDescriptor(d->w, dt, fmt, nb, dd->w));
    KILN_CUDNN_TRY(cudnnSetConvolutionNdDescriptor(d->c, dd->nd, dd->pad, dd->stride, dd->dil, CUDNN_CROSS_CORRELATION,
                                                   CUDNN_DATA_FLOAT));
    KILN_CUDNN_TRY(cudnnSetConvolutionGroupCount(d->c, dd->groups));
    KILN_CUDNN_TRY(cudnnSetConvolutionMathType(d->c, t == KILN_F32 ? CUDNN_FMA_MATH : CUDNN_TENSOR_OP_MATH));
    if (d->b) {
        int bdims[5] = {1, dd->y[1], 1, 1, 1};
        KILN_CUDNN_TRY(cudnnSetTensorNdDescriptorEx(d->b, fmt, dt, nb, bdims));
    }
    if (d->act) /* coef: the Relu has no ceiling (cuDNN reads coef only for clipped modes) */
        KILN_CUDNN_TRY(cudnnSetActivationDescriptor(d->act, mode, CUDNN_PROPAGATE_NAN, DBL_MAX));
    return KILN_OK;
}

/* Whether a heuristic result may run: it succeeded, fits the workspace, and (float32) uses no
 * tensor-op math. */
static bool conv_algo_ok(cudnnStatus_t st, size_t memory, cudnnMathType_t math, kiln_dtype t, size_t avail) {
    if (st != CUDNN_STATUS_SUCCESS || memory > avail) return false;
    return t != KILN_F32 || (math != CUDNN_TENSOR_OP_MATH && math != CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION);
}

static size_t conv_align(size_t v) { return (v + CONV_ALIGN - 1) / CONV_ALIGN * CONV_ALIGN; }

/* Checks X [N, C, sp...], W and B of a Conv (transpose = false) or ConvTranspose; parses the
 * window. *M gets the output channels. */
static kiln_status conv_check(const kiln_node *n, const kiln_cuda_tensor *in, int nin, const kiln_cuda_tensor *y,
                              bool transpose, kiln_window *win, int64_t *group, int64_t *M) {
    const kiln_cuda_tensor *x = &in[0], *w = &in[1];
    if (x->ndim < 3 || x->ndim > CONV_MAX_SP + 2 || w->ndim != x->ndim || y->ndim != x->ndim)
        return kiln_error(KILN_ERR_SHAPE, "%s needs X, W and Y of the same rank 3..5 (got %d, %d, %d)", n->op_type, x->ndim,
                          w->ndim, y->ndim);
    if (w->dtype != x->dtype || y->dtype != x->dtype || (x->dtype != KILN_F32 && x->dtype != KILN_F16 && x->dtype != KILN_BF16))
        return kiln_error(KILN_ERR_UNSUPPORTED, "%s: X %s, W %s, Y %s on the CUDA backend", n->op_type,
                          kiln_dtype_name(x->dtype), kiln_dtype_name(w->dtype), kiln_dtype_name(y->dtype));
    int nsp = x->ndim - 2;
    int64_t C = x->dims[1];
    *group = kiln_attr_int(n, "group", 1);
    if (*group < 1 || C % *group || *group > INT32_MAX)
        return kiln_error(KILN_ERR_SHAPE, "%s: %lld input channels cannot be split in %lld groups", n->op_type, (long long)C,
                          (long long)*group);
    if (transpose) {
        if (w->dims[0] != C)
            return kiln_error(KILN_ERR_SHAPE, "ConvTranspose: weight dim 0 is %lld, input has %lld channels",
                              (long long)w->dims[0], (long long)C);
        *M = w->dims[1] * *group;
    } else {
        if (w->dims[1] * *group != C || w->dims[0] % *group)
            return kiln_error(KILN_ERR_SHAPE, "Conv: weights [%lld, %lld, ...] do not fit %lld input channels in %lld groups",
                              (long long)w->dims[0], (long long)w->dims[1], (long long)C, (long long)*group);
        *M = w->dims[0];
    }
    if (y->dims[0] != x->dims[0] || y->dims[1] != *M)
        return kiln_error(KILN_ERR_SHAPE, "%s: output is not [%lld, %lld, ...]", n->op_type, (long long)x->dims[0], (long long)*M);
    if (nin > 2 && in[2].ndim >= 0 && (kiln_numel(in[2].ndim, in[2].dims) != *M || in[2].dtype != x->dtype))
        return kiln_error(KILN_ERR_SHAPE, "%s: bias must be %lld values of %s", n->op_type, (long long)*M,
                          kiln_dtype_name(x->dtype));
    return kiln_window_parse(n, nsp, w->dims + 2, win);
}

/* Images per cuDNN call: all N unless an image's tensors (per_image[0..count) elements each) would
 * pass cuDNN's 2^31-element limit, or the staging copy (stage bytes per image, 0 for none) would take
 * more than half of the workspace bytes ws (the rest stays for cuDNN's algorithms). 0 when not even
 * one image fits. */
static int64_t conv_chunk(int64_t N, const int64_t *per_image, int count, size_t stage, size_t ws) {
    int64_t nb = N;
    for (int i = 0; i < count; i++)
        if (per_image[i] > 0 && INT32_MAX / per_image[i] < nb) nb = INT32_MAX / per_image[i];
    if (stage && (int64_t)(ws / 2 / stage) < nb) nb = (int64_t)(ws / 2 / stage);
    return nb;
}

/* Whether the node's cuDNN tactic may run the convolution of d within avail bytes (its math type
 * allowed for t, cuDNN giving it a workspace size that fits); sets d's math type and fills *pick.
 * Otherwise why gets the reason. */
static bool conv_tactic_fits(kiln_cuda_ctx *ctx, conv_descs *d, kiln_dtype t, size_t avail,
                             cudnnConvolutionFwdAlgoPerf_t *pick, char *why, size_t cap) {
    const kiln_tactic *tc = ctx->tactic;
    cudnnMathType_t math = (cudnnMathType_t)tc->math;
    if (tc->algo < 0 || tc->algo >= CUDNN_CONVOLUTION_FWD_ALGO_COUNT || !conv_algo_ok(CUDNN_STATUS_SUCCESS, 0, math, t, avail)) {
        snprintf(why, cap, "algorithm %d with math type %d is not allowed for %s", tc->algo, tc->math, kiln_dtype_name(t));
        return false;
    }
    cudnnStatus_t st = t != KILN_F32 ? cudnnSetConvolutionMathType(d->c, math) : CUDNN_STATUS_SUCCESS;
    size_t bytes = 0;
    cudnnConvolutionFwdAlgo_t algo = (cudnnConvolutionFwdAlgo_t)tc->algo;
    if (st == CUDNN_STATUS_SUCCESS) st = cudnnGetConvolutionForwardWorkspaceSize(ctx->dnn, d->x, d->w, d->c, d->y, algo, &bytes);
    if (st != CUDNN_STATUS_SUCCESS) {
        snprintf(why, cap, "cudnnGetConvolutionForwardWorkspaceSize: %s", cudnnGetErrorString(st));
        return false;
    }
    if (bytes > avail) {
        snprintf(why, cap, "it needs %zu bytes of workspace, %zu are left", bytes, avail);
        return false;
    }
    memset(pick, 0, sizeof *pick);
    pick->algo = algo;
    pick->memory = bytes;
    pick->mathType = math;
    return true;
}

/* The forward algorithm: with use_tactic, the node's cuDNN tactic when it fits (*from_tactic is set
 * then); otherwise the first of cuDNN's heuristic list that may run within avail bytes, or with
 * prefer_precomp (an identity FusedConv, which fuses only with it) IMPLICIT_PRECOMP_GEMM when the
 * list has it usable. With ctx->candidates (tuning), also records that list's usable entries, once
 * per node, the one the heuristic path would pick first. */
static kiln_status conv_pick_fwd(const kiln_node *n, kiln_cuda_ctx *ctx, conv_descs *d, kiln_dtype t, size_t avail,
                                 bool use_tactic, bool prefer_precomp, cudnnConvolutionFwdAlgoPerf_t *pick,
                                 bool *from_tactic) {
    *from_tactic = false;
    if (use_tactic && ctx->tactic && ctx->tactic->kind == KILN_TACTIC_CUDNN && !ctx->candidates) {
        char why[256];
        if (conv_tactic_fits(ctx, d, t, avail, pick, why, sizeof why)) {
            *from_tactic = true;
            return KILN_OK;
        }
        KILN_TRY(kiln_cuda_tactic_rejected(n, ctx, why));
        KILN_CUDNN_TRY(cudnnSetConvolutionMathType(d->c, t == KILN_F32 ? CUDNN_FMA_MATH : CUDNN_TENSOR_OP_MATH));
    }
    cudnnConvolutionFwdAlgoPerf_t perf[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
    int got = 0;
    KILN_CUDNN_TRY(cudnnGetConvolutionForwardAlgorithm_v7(ctx->dnn, d->x, d->w, d->c, d->y, CUDNN_CONVOLUTION_FWD_ALGO_COUNT,
                                                          &got, perf));
    int first = -1; /* the entry the heuristic path runs */
    for (int i = 0; i < got; i++) {
        if (!conv_algo_ok(perf[i].status, perf[i].memory, perf[i].mathType, t, avail)) continue;
        if (first < 0) first = i;
        if (prefer_precomp && perf[i].algo == CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM) {
            first = i;
            break;
        }
    }
    kiln_cuda_candidates *cd = ctx->candidates;
    if (cd && !cd->done) {
        cd->count = 0;
        for (int k = -1; k < got && cd->count < cd->max && cd->count < KILN_CUDA_MAX_CANDIDATES; k++) {
            int i = k < 0 ? first : k; /* the heuristic path's pick first, then the rest in order */
            if (i < 0 || (k >= 0 && i == first)) continue;
            if (!conv_algo_ok(perf[i].status, perf[i].memory, perf[i].mathType, t, avail)) continue;
            kiln_tactic *c = &cd->list[cd->count];
            memset(c, 0, sizeof *c);
            c->kind = KILN_TACTIC_CUDNN;
            c->algo = (int32_t)perf[i].algo;
            c->math = (int32_t)perf[i].mathType;
            c->heuristic_index = cd->count++;
        }
        cd->done = cd->count > 0;
    }
    if (first >= 0) {
        *pick = perf[first];
        if (t != KILN_F32) KILN_CUDNN_TRY(cudnnSetConvolutionMathType(d->c, perf[first].mathType));
        return KILN_OK;
    }
    return kiln_error(KILN_ERR_UNSUPPORTED, "%s: cuDNN offers no %s algorithm within %zu bytes of workspace", n->op_type,
                      kiln_dtype_name(t), avail);
}

/* The same for the backward-data convolution of ConvTranspose. */
static kiln_status conv_pick_bwd(const kiln_node *n, kiln_cuda_ctx *ctx, conv_descs *d, kiln_dtype t, size_t avail,
                                 cudnnConvolutionBwdDataAlgoPerf_t *pick) {
    cudnnConvolutionBwdDataAlgoPerf_t perf[CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT];
    int got = 0;
    KILN_CUDNN_TRY(cudnnGetConvolutionBackwardDataAlgorithm_v7(ctx->dnn, d->w, d->y, d->c, d->x,
                                                               CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, &got, perf));
    for (int i = 0; i < got; i++)
        if (conv_algo_ok(perf[i].status, perf[i].memory, perf[i].mathType, t, avail)) {
            *pick = perf[i];
            if (t != KILN_F32) KILN_CUDNN_TRY(cudnnSetConvolutionMathType(d->c, perf[i].mathType));
            return KILN_OK;
        }
    return kiln_error(KILN_ERR_UNSUPPORTED, "%s: cuDNN offers no %s algorithm within %zu bytes of workspace", n->op_type,
                      kiln_dtype_name(t), avail);
}

/* ---------------------------------------------------------------- Conv and FusedConv */

static const char conv_state_owner[] = "conv.cu";

static void conv_state_destroy(kiln_cuda_node_state *base) {
    conv_state *st = (conv_state *)base;
    for (int i = 0; i < CONV_CALLS; i++) conv_descs_destroy(&st->calls[i].d);
    free(st);
}

/* The node's state in this context (*ctx->state), made on its first run. *temp when the context
 * keeps none (ctx->state NULL: the tuner): the caller destroys it after the call. */
static kiln_status conv_state_get(const kiln_node *n, kiln_cuda_ctx *ctx, conv_state **out, bool *temp) {
    *temp = !ctx->state;
    if (ctx->state && *ctx->state) {
        if ((*ctx->state)->owner != conv_state_owner)
            return kiln_error(KILN_ERR_INTERNAL, "%s '%s': its node state belongs to another kernel", n->op_type, n->name);
        *out = (conv_state *)*ctx->state;
        return KILN_OK;
    }
    conv_state *st = (conv_state *)calloc(1, sizeof *st);
    if (!st) return kiln_error(KILN_ERR_OUT_OF_MEMORY, "out of memory for the state of %s '%s'", n->op_type, n->name);
    st->base.owner = conv_state_owner;
    st->base.destroy = conv_state_destroy;
    if (ctx->state) *ctx->state = &st->base;
    *out = st;
    return KILN_OK;
}

/* The cached call for key, or one made now in the least recently used slot: descriptors set, the
 * algorithm chosen (conv_pick_fwd; with ctx->candidates this records the tuning candidates), fused
 * when the mode asks for it and the algorithm allows it (identity: IMPLICIT_PRECOMP_GEMM only). */
static kiln_status conv_call_get(const kiln_node *n, kiln_cuda_ctx *ctx, conv_state *st, const conv_key *key,
                                 conv_call **out) {
    conv_call *slot = NULL;
    for (int i = 0; i < CONV_CALLS; i++) {
        conv_call *c = &st->calls[i];
        if (c->used && !memcmp(&c->key, key, sizeof *key)) {
            c->last_used = ++st->tick;
            *out = c;
            return KILN_OK;
        }
        if (!slot || (slot->used && (!c->used || c->last_used < slot->last_used))) slot = c;
    }
    conv_descs_destroy(&slot->d);
    memset(slot, 0, sizeof *slot);
    conv_fuse_mode mode = (conv_fuse_mode)key->mode;
    kiln_dtype t = (kiln_dtype)key->dtype;
    KILN_TRY(conv_descs_create(&slot->d, mode != CONV_UNFUSED));
    KILN_TRY(conv_descs_set(&slot->d, &key->dd, t, key->nhwc != 0,
                            mode == CONV_FUSE_RELU ? CUDNN_ACTIVATION_RELU : CUDNN_ACTIVATION_IDENTITY));
    KILN_TRY(conv_pick_fwd(n, ctx, &slot->d, t, key->avail, true, mode == CONV_FUSE_IDENTITY, &slot->perf,
                           &slot->from_tactic));
    slot->fused = mode == CONV_FUSE_RELU ||
                  (mode == CONV_FUSE_IDENTITY && slot->perf.algo == CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM);
    memcpy(&slot->key, key, sizeof *key);
    slot->used = true;
    slot->last_used = ++st->tick;
    *out = slot;
    return KILN_OK;
}

/* A channels-last tensor's dims in NCHW order: [N, H, W, C] -> [N, C, H, W] (also the filter's
 * [M, kH, kW, C/group] -> [M, C/group, kH, kW]). Data unchanged. */
static void conv_nchw_view(kiln_cuda_tensor *t) {
    int64_t c = t->dims[3];
    t->dims[3] = t->dims[2];
    t->dims[2] = t->dims[1];
    t->dims[1] = c;
}

/* Conv and kiln.FusedConv (fz set): y = x (*) w (+ b), then for a FusedConv act(. + z), in batch
 * chunks (see conv_chunk), each one cached cuDNN call of st: cudnnConvolutionBiasActivationForward
 * where the call is fused, else cudnnConvolutionForward followed by the bias kernel (NCHW) and the
 * epilogue kernel (FusedConv; it adds the bias in NHWC) on the chunk. channels_last = 1: every
 * tensor NHWC (ir/fused_ops.h). */
static kiln_status conv_forward(const kiln_node *n, const kiln_cuda_tensor *in, int nin, const kiln_cuda_tensor *y,
                                kiln_cuda_ctx *ctx, const conv_fuse *fz, conv_state *st) {
    const kiln_cuda_tensor *py = y; /* y as it lies in memory */
    bool nhwc = kiln_attr_int(n, "channels_last", 0) != 0;
    kiln_cuda_tensor lv[3], ly;
    if (nhwc) {
        if (in[0].ndim != 4 || in[1].ndim != 4 || y->ndim != 4)
            return kiln_error(KILN_ERR_SHAPE, "%s: channels_last needs X [N,H,W,C], W [M,kH,kW,C/group] and Y [N,H',W',M] "
                              "(got ranks %d, %d, %d)", n->op_type, in[0].ndim, in[1].ndim, y->ndim);
        lv[0] = in[0];
        lv[1] = in[1];
        conv_nchw_view(&lv[0]);
        conv_nchw_view(&lv[1]);
        if (nin > 2) lv[2] = in[2];
        ly = *y;
        conv_nchw_view(&ly);
        in = lv;
        y = &ly;
    }
    const kiln_cuda_tensor *x = &in[0], *w = &in[1];
    kiln_window win;
    int64_t group = 1, M = 0;
    KILN_TRY(conv_check(n, in, nin, y, false, &win, &group, &M));
    int nsp = x->ndim - 2;
    int64_t N = x->dims[0], C = x->dims[1], sym[CONV_MAX_SP], ext[CONV_MAX_SP], plane = 1, in_img = C, ext_img = C;
    conv_shift shift;
    bool explicit_pad = false;
    shift.nsp = nsp;
    shift.inner = nhwc ? C : 1;
    for (int i = 0; i < nsp; i++) {
        int64_t o, pb, pe;
        KILN_TRY(kiln_window_out(&win, i, x->dims[2 + i], &o, &pb, &pe));
        if (o != y->dims[2 + i])
            return kiln_error(KILN_ERR_SHAPE, "%s: spatial dim %d of the output is %lld, the window gives %lld", n->op_type, i,
                              (long long)y->dims[2 + i], (long long)o);
        sym[i] = pb < pe ? pb : pe;
        shift.src[i] = x->dims[2 + i];
        shift.off[i] = pb - sym[i];
        ext[i] = shift.dst[i] = x->dims[2 + i] + (pb - sym[i]) + (pe - sym[i]);
        explicit_pad = explicit_pad || pb != pe;
        plane *= o;
        in_img *= x->dims[2 + i];
        ext_img *= ext[i];
        if (win.stride[i] > INT32_MAX || win.dilation[i] > INT32_MAX || sym[i] > INT32_MAX)
            return kiln_error(KILN_ERR_UNSUPPORTED, "%s: stride, dilation or padding beyond cuDNN's int range", n->op_type);
    }
    const kiln_cuda_tensor *z = fz ? fz->z : NULL;
    if (z && (z->dtype != py->dtype || z->ndim != py->ndim || memcmp(z->dims, py->dims, sizeof(int64_t) * (size_t)py->ndim)))
        return kiln_error(KILN_ERR_SHAPE, "%s: the residual Z must have Y's shape and dtype", n->op_type);
    if (N * M * plane == 0) return KILN_OK;
    size_t es = kiln_dtype_size(x->dtype);
    int64_t out_img = M * plane, per[2] = {explicit_pad ? ext_img : in_img, out_img};
    size_t stage = explicit_pad ? (size_t)ext_img * es : 0;
    int64_t nb = conv_chunk(N, per, 2, stage, ctx->workspace_bytes);
    if (nb < 1)
        return kiln_error(KILN_ERR_UNSUPPORTED, "%s: one image (%lld input, %lld output elements) exceeds cuDNN's limits or "
                          "the %zu-byte workspace", n->op_type, (long long)per[0], (long long)out_img, ctx->workspace_bytes);
    size_t used = explicit_pad ? conv_align((size_t)nb * stage) : 0;
    const void *bp = nin > 2 && in[2].ndim >= 0 ? in[2].data : NULL;
    /* The fused call when cuDNN has the activation, something is left to fuse (a bare conv is one
     * call anyway), and an absent bias can read ctx->zero. */
    conv_fuse_mode mode = CONV_UNFUSED;
    if (fz && !st->fused_refused && (fz->act.kind == KILN_ACT_RELU || (fz->act.kind == KILN_ACT_NONE && (bp || z))) &&
        (bp || (ctx->zero && (size_t)M * es <= ctx->zero_bytes)))
        mode = fz->act.kind == KILN_ACT_RELU ? CONV_FUSE_RELU : CONV_FUSE_IDENTITY;
    conv_desc_dims dd;
    memset(&dd, 0, sizeof dd);
    dd.nd = nsp == 1 ? 2 : nsp;
    dd.groups = (int)group;
    KILN_TRY(conv_dims(n, nsp, M, C / group, w->dims + 2, dd.w));
    conv_ints(nsp, sym, 0, dd.pad);
    conv_ints(nsp, win.stride, 1, dd.stride);
    conv_ints(nsp, win.dilation, 1, dd.dil);
    KILN_CUDNN_TRY(cudnnSetStream(ctx->dnn, ctx->stream));
    float one = 1.0f, zero = 0.0f, alpha2 = z ? 1.0f : 0.0f;
    for (int64_t n0 = 0; n0 < N; n0 += nb) {
        int64_t cnt = N - n0 < nb ? N - n0 : nb;
        const void *xs = (const char *)x->data + (size_t)(n0 * in_img) * es;
        void *ys = (char *)y->data + (size_t)(n0 * out_img) * es;
        const void *zs = z ? (const char *)z->data + (size_t)(n0 * out_img) * es : NULL;
        conv_key key;
        memset(&key, 0, sizeof key);
        key.dd = dd;
        KILN_TRY(conv_dims(n, nsp, cnt, C, explicit_pad ? ext : x->dims + 2, key.dd.x));
        KILN_TRY(conv_dims(n, nsp, cnt, M, y->dims + 2, key.dd.y));
        key.dtype = (int)x->dtype;
        key.nhwc = nhwc;
        key.mode = (int)mode;
        key.avail = ctx->workspace_bytes - used;
        conv_call *cl;
        KILN_TRY(conv_call_get(n, ctx, st, &key, &cl));
        if (ctx->candidates) return KILN_OK; /* tuning: the candidates are recorded */
        if (explicit_pad) {
            KILN_TRY(conv_run_shift(ctx, es, xs, ctx->workspace, &shift, nhwc ? cnt : cnt * C));
            xs = ctx->workspace;
        }
        /* cuDNN gets all the workspace left (key.avail), not the heuristic's estimate of the
         * algorithm's need, which for some NHWC configurations is below what the call then asks */
        void *wsp = (char *)ctx->workspace + used;
        if (cl->fused) {
            /* y = act(conv(x) + alpha2 z + bias); without a residual z is y itself, scaled by 0 */
            cudnnStatus_t fs = cudnnConvolutionBiasActivationForward(
                ctx->dnn, &one, cl->d.x, xs, cl->d.w, w->data, cl->d.c, cl->perf.algo, wsp, key.avail, &alpha2, cl->d.y,
                zs ? zs : ys, cl->d.b, bp ? bp : ctx->zero, cl->d.act, cl->d.y, ys);
            if (fs == CUDNN_STATUS_SUCCESS) continue;
            (void)cudaGetLastError(); /* a launch error cuDNN may have left must not fail our next launch check */
            st->fused_refused = true; /* this node runs unfused from now on in this context */
            KILN_LOG(KILN_LOG_WARN, "cuda: node '%s' (%s): cuDNN refuses the fused convolution + bias + activation "
                     "(cudnnConvolutionBiasActivationForward, algo %d: %s); it runs as a convolution and an epilogue kernel",
                     n->name, n->op_type, (int)cl->perf.algo, cudnnGetErrorString(fs));
            mode = CONV_UNFUSED;
            key.mode = (int)mode;
            KILN_TRY(conv_call_get(n, ctx, st, &key, &cl));
        }
        cudnnStatus_t cs = cudnnConvolutionForward(ctx->dnn, &one, cl->d.x, xs, cl->d.w, w->data, cl->d.c, cl->perf.algo, wsp,
                                                   key.avail, &zero, cl->d.y, ys);
        if (cs != CUDNN_STATUS_SUCCESS && cl->from_tactic) { /* cuDNN refused the tactic only when asked to run it */
            char why[256];
            snprintf(why, sizeof why, "cudnnConvolutionForward: %s", cudnnGetErrorString(cs));
            KILN_TRY(kiln_cuda_tactic_rejected(n, ctx, why));
            KILN_CUDNN_TRY(cudnnSetConvolutionMathType(cl->d.c, x->dtype == KILN_F32 ? CUDNN_FMA_MATH : CUDNN_TENSOR_OP_MATH));
            KILN_TRY(conv_pick_fwd(n, ctx, &cl->d, x->dtype, key.avail, false, false, &cl->perf, &cl->from_tactic));
            cs = cudnnConvolutionForward(ctx->dnn, &one, cl->d.x, xs, cl->d.w, w->data, cl->d.c, cl->perf.algo, wsp,
                                         key.avail, &zero, cl->d.y, ys);
        }
        if (cs != CUDNN_STATUS_SUCCESS) return kiln_cudnn_error(cs, "cudnnConvolutionForward(...)", __FILE__, __LINE__);
        /* the rest of an unfused call, on this chunk */
        if (bp && !(fz && nhwc))
            KILN_TRY(nhwc ? conv_add_bias(ctx, x->dtype, ys, bp, cnt * plane, M, 1)
                          : conv_add_bias(ctx, x->dtype, ys, bp, cnt, M, plane));
        if (fz) {
            kiln_cuda_tensor yv = *py, zv;
            yv.dims[0] = cnt;
            yv.data = ys;
            if (z) {
                zv = *z;
                zv.dims[0] = cnt;
                zv.data = (void *)zs;
            }
            /* NHWC: the bias runs along Y's last dim, in the epilogue */
            KILN_TRY(kiln_cuda_fused_epilogue(n, &yv, bp && nhwc ? &in[2] : NULL, z ? &zv : NULL, ctx));
        }
    }
    return KILN_OK;
}

/* conv_forward with the node's state in this context (a temporary one where the context keeps none). */
static kiln_status conv_run(const kiln_node *n, const kiln_cuda_tensor *in, int nin, const kiln_cuda_tensor *y,
                            kiln_cuda_ctx *ctx, const conv_fuse *fz) {
    conv_state *st = NULL;
    bool temp = false;
    KILN_TRY(conv_state_get(n, ctx, &st, &temp));
    kiln_status s = conv_forward(n, in, nin, y, ctx, fz, st);
    if (temp) conv_state_destroy(&st->base);
    return s;
}

extern "C" kiln_status kiln_cuda_fused_conv(const kiln_node *n, const kiln_cuda_tensor *in, int nin, const kiln_cuda_tensor *y,
                                            kiln_cuda_ctx *ctx) {
    if (nin < 2) return kiln_error(KILN_ERR_INVALID_ARGUMENT, "%s needs X and W", n->op_type);
    conv_fuse fz;
    KILN_TRY(kiln_fused_activation(n, &fz.act));
    fz.z = nin > 3 && in[3].ndim >= 0 ? &in[3] : NULL;
    return conv_run(n, in, nin < 3 ? nin : 3, y, ctx, &fz);
}

/* ConvTranspose: y = x (*)^T w (+ b), as cuDNN's backward-data convolution of the forward
 * convolution whose filter is W [C, M/group, k...], in batch chunks (see conv_chunk). */
static kiln_status conv_transpose(const kiln_node *n, const kiln_cuda_tensor *in, int nin, const kiln_cuda_tensor *y,
                                  kiln_cuda_ctx *ctx, conv_descs *d) {
    const kiln_cuda_tensor *x = &in[0], *w = &in[1];
    kiln_window win;
    int64_t group = 1, M = 0;
    KILN_TRY(conv_check(n, in, nin, y, true, &win, &group, &M));
    int nsp = x->ndim - 2;
    int64_t N = x->dims[0], C = x->dims[1], pad[CONV_MAX_SP], full[CONV_MAX_SP], plane = 1, in_img = C, full_img = M;
    conv_shift crop;
    bool direct = true;
    crop.nsp = nsp;
    crop.inner = 1;
    for (int i = 0; i < nsp; i++) {
        int64_t o, pb, in_i = x->dims[2 + i], s = win.stride[i], dk = (w->dims[2 + i] - 1) * win.dilation[i] + 1;
        KILN_TRY(kiln_window_out_transpose(&win, i, in_i, &o, &pb));
        if (o != y->dims[2 + i])
            return kiln_error(KILN_ERR_SHAPE, "ConvTranspose: spatial dim %d of the output is %lld, the window gives %lld", i,
                              (long long)y->dims[2 + i], (long long)o);
        /* cuDNN accepts an output of size o with symmetric pad pb when the forward convolution of
         * that size gives back the input size. */
        int64_t span = o + 2 * pb - dk;
        direct = direct && pb >= 0 && span >= 0 && span / s + 1 == in_i;
        pad[i] = pb;
        full[i] = s * (in_i - 1) + dk;
        crop.src[i] = full[i];
        crop.dst[i] = o;
        crop.off[i] = -pb;
        plane *= o;
        in_img *= in_i;
        full_img *= full[i];
        if (s > INT32_MAX || win.dilation[i] > INT32_MAX || pb > INT32_MAX)
            return kiln_error(KILN_ERR_UNSUPPORTED, "ConvTranspose: stride, dilation or padding beyond cuDNN's int range");
    }
    if (N * M * plane == 0) return KILN_OK;
    size_t es = kiln_dtype_size(x->dtype);
    int64_t out_img = M * plane;
    if (in_img == 0) { /* nothing is scattered: the output is the bias (or zeros) */
        KILN_CUDA_TRY(cudaMemsetAsync(y->data, 0, (size_t)(N * out_img) * es, ctx->stream));
        if (nin > 2 && in[2].ndim >= 0) KILN_TRY(conv_add_bias(ctx, x->dtype, y->data, in[2].data, N, M, plane));
        return KILN_OK;
    }
    int64_t per[2] = {in_img, direct ? out_img : full_img};
    size_t stage = direct ? 0 : (size_t)full_img * es;
    int64_t nb = conv_chunk(N, per, 2, stage, ctx->workspace_bytes);
    if (nb < 1)
        return kiln_error(KILN_ERR_UNSUPPORTED, "ConvTranspose: one image (%lld input, %lld output elements) exceeds cuDNN's "
                          "limits or the %zu-byte workspace", (long long)in_img, (long long)per[1], ctx->workspace_bytes);
    size_t used = direct ? 0 : conv_align((size_t)nb * stage);
    conv_desc_dims dd;
    memset(&dd, 0, sizeof dd);
    dd.nd = nsp == 1 ? 2 : nsp;
    dd.groups = (int)group;
    int64_t zero_pad[CONV_MAX_SP] = {0, 0, 0};
    KILN_TRY(conv_dims(n, nsp, C, M / group, w->dims + 2, dd.w));
    conv_ints(nsp, direct ? pad : zero_pad, 0, dd.pad);
    conv_ints(nsp, win.stride, 1, dd.stride);
    conv_ints(nsp, win.dilation, 1, dd.dil);
    KILN_CUDNN_TRY(cudnnSetStream(ctx->dnn, ctx->stream));
    cudnnConvolutionBwdDataAlgoPerf_t perf;
    memset(&perf, 0, sizeof perf);
    int64_t set_for = -1;
    float one = 1.0f, zero = 0.0f;
    for (int64_t n0 = 0; n0 < N; n0 += nb) {
        int64_t cnt = N - n0 < nb ? N - n0 : nb;
        const void *xs = (const char *)x->data + (size_t)(n0 * in_img) * es;
        void *ys = (char *)y->data + (size_t)(n0 * out_img) * es, *dst = direct ? ys : ctx->workspace;
        if (cnt != set_for) {
            /* the forward convolution's input is our output, its output our input */
            KILN_TRY(conv_dims(n, nsp, cnt, M, direct ? y->dims + 2 : full, dd.x));
            KILN_TRY(conv_dims(n, nsp, cnt, C, x->dims + 2, dd.y));
            KILN_TRY(conv_descs_set(d, &dd, x->dtype, false, CUDNN_ACTIVATION_IDENTITY));
            KILN_TRY(conv_pick_bwd(n, ctx, d, x->dtype, ctx->workspace_bytes - used, &perf));
            set_for = cnt;
        }
        KILN_CUDNN_TRY(cudnnConvolutionBackwardData(ctx->dnn, &one, d->w, w->data, d->y, xs, d->c, perf.algo,
                                                    (char *)ctx->workspace + used, ctx->workspace_bytes - used, &zero, d->x, dst));
        if (!direct) KILN_TRY(conv_run_shift(ctx, es, dst, ys, &crop, cnt * M));
    }
    if (nin > 2 && in[2].ndim >= 0) KILN_TRY(conv_add_bias(ctx, x->dtype, y->data, in[2].data, N, M, plane));
    return KILN_OK;
}

static kiln_status exec_conv(const kiln_node *n, const kiln_cuda_tensor *in, int nin, const kiln_cuda_tensor *out, int nout,
                             kiln_cuda_ctx *ctx) {
    if (nin < 2) return kiln_error(KILN_ERR_INVALID_ARGUMENT, "%s needs X and W", n->op_type);
    return conv_run(n, in, nin, &out[0], ctx, NULL);
}

static kiln_status exec_conv_transpose(const kiln_node *n, const kiln_cuda_tensor *in, int nin, const kiln_cuda_tensor *out,
                                       int nout, kiln_cuda_ctx *ctx) {
    if (nin < 2) return kiln_error(KILN_ERR_INVALID_ARGUMENT, "%s needs X and W", n->op_type);
    conv_descs d;
    memset(&d, 0, sizeof d);
    kiln_status s = conv_descs_create(&d, false);
    if (s == KILN_OK) s = conv_transpose(n, in, nin, &out[0], ctx, &d);
    conv_descs_destroy(&d);
    return s;
}

/* X, W (and B) float32/float16/bfloat16 of one dtype; 1 to 3 spatial dims; attributes that parse;
 * channels_last (kiln.FusedConv, which checks through this function) only 0, or 1 with 2 spatial
 * dims (asymmetric pads included). */
static kiln_status sup_conv(const kiln_graph *g, const kiln_node *n) {
    const kiln_value *x = kiln_node_input(g, n, 0), *w = kiln_node_input(g, n, 1), *b = kiln_node_input(g, n, 2);
    if (!x || !w) return kiln_error(KILN_ERR_INVALID_ARGUMENT, "%s needs X and W", n->op_type);
    if (x->dtype != KILN_F32 && x->dtype != KILN_F16 && x->dtype != KILN_BF16)
        return kiln_error(KILN_ERR_UNSUPPORTED, "%s: %s input is not supported on the CUDA backend (float32/16, bfloat16 only)",
                          n->op_type, kiln_dtype_name(x->dtype));
    if (w->dtype != x->dtype || (b && b->dtype != x->dtype))
        return kiln_error(KILN_ERR_UNSUPPORTED, "%s: X, W and B must share one dtype on the CUDA backend", n->op_type);
    if (x->ndim >= 0 && (x->ndim < 3 || x->ndim > CONV_MAX_SP + 2))
        return kiln_error(KILN_ERR_UNSUPPORTED, "%s: %d spatial dims; the CUDA backend runs 1 to 3", n->op_type, x->ndim - 2);
    int64_t cl = kiln_attr_int(n, "channels_last", 0);
    if (cl != 0 && cl != 1)
        return kiln_error(KILN_ERR_UNSUPPORTED, "%s: channels_last = %lld (0 or 1)", n->op_type, (long long)cl);
    if (cl && strcmp(n->op_type, "FusedConv") && strcmp(n->op_type, "Conv"))
        return kiln_error(KILN_ERR_UNSUPPORTED, "%s: channels_last is for kiln.FusedConv only", n->op_type);
    if (cl && ((x->ndim >= 0 && x->ndim != 4) || (w->ndim >= 0 && w->ndim != 4)))
        return kiln_error(KILN_ERR_UNSUPPORTED, "%s: channels_last needs a 2-D convolution (X [N,H,W,C], W [M,kH,kW,C/group]); "
                          "X has rank %d", n->op_type, x->ndim);
    if (x->ndim >= 0) {
        kiln_window win;
        KILN_TRY(kiln_window_parse(n, x->ndim - 2, NULL, &win));
    }
    return KILN_OK;
}

extern "C" const kiln_cuda_kernel kiln_cuda_kernels_conv[] = {
    {"Conv", "", exec_conv, sup_conv},
    {"ConvTranspose", "", exec_conv_transpose, sup_conv},
    {NULL, NULL, NULL, NULL},
};
