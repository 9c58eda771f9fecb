/* conv.cu — Conv and ConvTranspose on the GPU through cuDNN (the legacy descriptor API), NCHW,
 * 1-D (run as 2-D with a unit height), 2-D and 3-D, with groups, strides, dilations, explicit or
 * automatic padding, and the optional bias; float32, float16 and bfloat16 storage.
 *
 * Precision: float32 runs with CUDNN_FMA_MATH (no TF32: results must match the CPU oracle to 1e-4
 * relative), float16/bfloat16 with float32 compute and tensor-op math. The window geometry comes
 * from src/ir/nn_window.c (as for shape inference and the CPU kernels). cuDNN pads symmetrically,
 * so:
 *  - Conv with begin != end padding copies the input into ctx->workspace with the surplus padding
 *    made explicit (zeros) and lets cuDNN pad the common part;
 *  - ConvTranspose whose cropping cuDNN cannot express (output_padding, asymmetric pads,
 *    output_shape) computes the uncropped transposed result into ctx->workspace and then crops /
 *    zero-extends it into the output.
 * Large batches run in chunks of images so that every tensor stays within cuDNN's 2^31-element
 * limit and a staging copy within half of the workspace. The bias is added by a small kernel of
 * this file (one pass, every dtype). The algorithm is the first of cudnnGet*Algorithm_v7's
 * heuristic list that fits the workspace left; descriptors and the heuristic query are made on
 * every call (host work only; a captured CUDA graph replays none of it). A Conv tuned at build time
 * (cuda_kernels.h: tactics) runs its recorded algorithm and math type instead, when cuDNN accepts
 * them for the call within the workspace; ConvTranspose always follows the heuristic. */
#include "backends/cuda/kernel_util.cuh"

extern "C" {
#include "ir/nn_window.h"
}

#define CONV_MAX_SP 3
#define CONV_ALIGN 256

/* One convolution as cuDNN sees it (forward: x -> y; backward data: y -> x, i.e. ConvTranspose
 * reads "y" and writes "x"): nd = 2 or 3 spatial dims, sizes as ints. */
typedef struct conv_desc_dims {
    int nd;
    int x[5], w[5], y[5];
    int pad[3], stride[3], dil[3];
    int groups;
} conv_desc_dims;

typedef struct conv_descs {
    cudnnTensorDescriptor_t x, y;
    cudnnFilterDescriptor_t w;
    cudnnConvolutionDescriptor_t c;
} conv_descs;

/* A shift between two planes' worth of spatial boxes: destination coordinate = source coordinate
 * + off (per spatial dim; negative offsets crop). */
typedef struct conv_shift {
    int nsp;
    int64_t src[CONV_MAX_SP], dst[CONV_MAX_SP], off[CONV_MAX_SP];
} conv_shift;

/* y is (N, M, plane): y[n, m, j] += b[m]. total = N * M * plane. */
template <typename T>
__global__ void conv_bias_kernel(T *__restrict__ y, const T *__restrict__ b, int64_t M, int64_t plane, int64_t total) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += (int64_t)gridDim.x * blockDim.x) {
        int64_t m = (i / plane) % M;
        y[i] = ku_from_f32<T>(ku_f32(y[i]) + ku_f32(b[m]));
    }
}

/* dst is (planes, s.dst...), src is (planes, s.src...): dst[p, c] = src[p, c - s.off] where that
 * lies inside src, else 0. T is an unsigned integer of the element size (bits are moved). */
template <typename T>
__global__ void conv_shift_kernel(const T *__restrict__ src, T *__restrict__ dst, conv_shift s, int64_t planes) {
    int64_t dplane = 1, splane = 1;
    for (int d = 0; d < s.nsp; d++) {
        dplane *= s.dst[d];
        splane *= s.src[d];
    }
    int64_t total = planes * dplane;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += (int64_t)gridDim.x * blockDim.x) {
        int64_t p = i / dplane, r = i - p * dplane, soff = 0, sstr = 1;
        bool inside = true;
        for (int d = s.nsp - 1; d >= 0; d--) {
            int64_t c = r % s.dst[d] - s.off[d];
            r /= s.dst[d];
            inside = inside && c >= 0 && c < s.src[d];
            soff += c * sstr;
            sstr *= s.src[d];
        }
        dst[i] = inside ? src[p * splane + soff] : (T)0;
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
    int64_t total = planes;
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

static kiln_status conv_descs_create(conv_descs *d) {
    KILN_CUDNN_TRY(cudnnCreateTensorDescriptor(&d->x));
    KILN_CUDNN_TRY(cudnnCreateTensorDescriptor(&d->y));
    KILN_CUDNN_TRY(cudnnCreateFilterDescriptor(&d->w));
    KILN_CUDNN_TRY(cudnnCreateConvolutionDescriptor(&d->c));
    return KILN_OK;
}

static void conv_descs_destroy(conv_descs *d) {
    if (d->x) cudnnDestroyTensorDescriptor(d->x);
    if (d->y) cudnnDestroyTensorDescriptor(d->y);
    if (d->w) cudnnDestroyFilterDescriptor(d->w);
    if (d->c) cudnnDestroyConvolutionDescriptor(d->c);
}

/* Fills the descriptors for data type t from dd; sets the math type the precision allows
 * (float32: FMA only, no TF32; 16-bit: tensor ops). */
static kiln_status conv_descs_set(conv_descs *d, const conv_desc_dims *dd, kiln_dtype t) {
    cudnnDataType_t dt = conv_dnn_type(t);
    int nb = dd->nd + 2;
    KILN_CUDNN_TRY(cudnnSetTensorNdDescriptorEx(d->x, CUDNN_TENSOR_NCHW, dt, nb, dd->x));
    KILN_CUDNN_TRY(cudnnSetTensorNdDescriptorEx(d->y, CUDNN_TENSOR_NCHW, dt, nb, dd->y));
    KILN_CUDNN_TRY(cudnnSetFilterNdDescriptor(d->w, dt, CUDNN_TENSOR_NCHW, nb, dd->w));
    KILN_CUDNN_TRY(cudnnSetConvolutionNdDescriptor(d->c, dd->nd, dd->pad, dd->stride, dd->dil, CUDNN_CROSS_CORRELATION,
                                                   CUDNN_DATA_FLOAT));
    KILN_CUDNN_TRY(cudnnSetConvolutionGroupCount(d->c, dd->groups));
    KILN_CUDNN_TRY(cudnnSetConvolutionMathType(d->c, t == KILN_F32 ? CUDNN_FMA_MATH : CUDNN_TENSOR_OP_MATH));
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
 * then); otherwise the first of cuDNN's heuristic list that may run within avail bytes. With
 * ctx->candidates (tuning), also records that list's usable entries, once per node. */
static kiln_status conv_pick_fwd(const kiln_node *n, kiln_cuda_ctx *ctx, conv_descs *d, kiln_dtype t, size_t avail,
                                 bool use_tactic, cudnnConvolutionFwdAlgoPerf_t *pick, bool *from_tactic) {
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
    kiln_cuda_candidates *cd = ctx->candidates;
    if (cd && !cd->done) {
        cd->count = 0;
        for (int i = 0; i < got && cd->count < cd->max && cd->count < KILN_CUDA_MAX_CANDIDATES; i++) {
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
    for (int i = 0; i < got; i++)
        if (conv_algo_ok(perf[i].status, perf[i].memory, perf[i].mathType, t, avail)) {
            *pick = perf[i];
            if (t != KILN_F32) KILN_CUDNN_TRY(cudnnSetConvolutionMathType(d->c, perf[i].mathType));
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

/* Conv: y = x (*) w (+ b), in batch chunks (see conv_chunk). */
static kiln_status conv_forward(const kiln_node *n, const kiln_cuda_tensor *in, int nin, const kiln_cuda_tensor *y,
                                kiln_cuda_ctx *ctx, conv_descs *d) {
    const kiln_cuda_tensor *x = &in[0], *w = &in[1];
    kiln_window win;
    int64_t group = 1, M = 0;
    KILN_TRY(conv_check(n, in, nin, y, false, &win, &group, &M));
    int nsp = x->ndim - 2;
    int64_t N = x->dims[0], C = x->dims[1], sym[CONV_MAX_SP], ext[CONV_MAX_SP], plane = 1, in_img = C, ext_img = C;
    conv_shift shift;
    bool explicit_pad = false;
    shift.nsp = nsp;
    for (int i = 0; i < nsp; i++) {
        int64_t o, pb, pe;
        KILN_TRY(kiln_window_out(&win, i, x->dims[2 + i], &o, &pb, &pe));
        if (o != y->dims[2 + i])
            return kiln_error(KILN_ERR_SHAPE, "Conv: spatial dim %d of the output is %lld, the window gives %lld", i,
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
            return kiln_error(KILN_ERR_UNSUPPORTED, "Conv: stride, dilation or padding beyond cuDNN's int range");
    }
    if (N * M * plane == 0) return KILN_OK;
    size_t es = kiln_dtype_size(x->dtype);
    int64_t out_img = M * plane, per[2] = {explicit_pad ? ext_img : in_img, out_img};
    size_t stage = explicit_pad ? (size_t)ext_img * es : 0;
    int64_t nb = conv_chunk(N, per, 2, stage, ctx->workspace_bytes);
    if (nb < 1)
        return kiln_error(KILN_ERR_UNSUPPORTED, "Conv: one image (%lld input, %lld output elements) exceeds cuDNN's limits or "
                          "the %zu-byte workspace", (long long)per[0], (long long)out_img, ctx->workspace_bytes);
    size_t used = explicit_pad ? conv_align((size_t)nb * stage) : 0;
    conv_desc_dims dd;
    memset(&dd, 0, sizeof dd);
    dd.nd = nsp == 1 ? 2 : nsp;
    dd.groups = (int)group;
    KILN_TRY(conv_dims(n, nsp, M, C / group, w->dims + 2, dd.w));
    conv_ints(nsp, sym, 0, dd.pad);
    conv_ints(nsp, win.stride, 1, dd.stride);
    conv_ints(nsp, win.dilation, 1, dd.dil);
    KILN_CUDNN_TRY(cudnnSetStream(ctx->dnn, ctx->stream));
    cudnnConvolutionFwdAlgoPerf_t perf;
    memset(&perf, 0, sizeof perf);
    int64_t set_for = -1; /* the chunk size the descriptors and perf are for */
    bool from_tactic = false; /* perf is the node's tactic */
    float one = 1.0f, zero = 0.0f;
    for (int64_t n0 = 0; n0 < N; n0 += nb) {
        int64_t cnt = N - n0 < nb ? N - n0 : nb;
        const void *xs = (const char *)x->data + (size_t)(n0 * in_img) * es;
        void *ys = (char *)y->data + (size_t)(n0 * out_img) * es;
        if (explicit_pad) {
            KILN_TRY(conv_run_shift(ctx, es, xs, ctx->workspace, &shift, cnt * C));
            xs = ctx->workspace;
        }
        if (cnt != set_for) {
            KILN_TRY(conv_dims(n, nsp, cnt, C, explicit_pad ? ext : x->dims + 2, dd.x));
            KILN_TRY(conv_dims(n, nsp, cnt, M, y->dims + 2, dd.y));
            KILN_TRY(conv_descs_set(d, &dd, x->dtype));
            KILN_TRY(conv_pick_fwd(n, ctx, d, x->dtype, ctx->workspace_bytes - used, true, &perf, &from_tactic));
            if (ctx->candidates) return KILN_OK; /* tuning: the candidates are recorded */
            set_for = cnt;
        }
        cudnnStatus_t st = cudnnConvolutionForward(ctx->dnn, &one, d->x, xs, d->w, w->data, d->c, perf.algo,
                                                   (char *)ctx->workspace + used, perf.memory, &zero, d->y, ys);
        if (st != CUDNN_STATUS_SUCCESS && from_tactic) { /* cuDNN refused the tactic only when asked to run it */
            char why[256];
            snprintf(why, sizeof why, "cudnnConvolutionForward: %s", cudnnGetErrorString(st));
            KILN_TRY(kiln_cuda_tactic_rejected(n, ctx, why));
            KILN_CUDNN_TRY(cudnnSetConvolutionMathType(d->c, x->dtype == KILN_F32 ? CUDNN_FMA_MATH : CUDNN_TENSOR_OP_MATH));
            KILN_TRY(conv_pick_fwd(n, ctx, d, x->dtype, ctx->workspace_bytes - used, false, &perf, &from_tactic));
            st = cudnnConvolutionForward(ctx->dnn, &one, d->x, xs, d->w, w->data, d->c, perf.algo,
                                         (char *)ctx->workspace + used, perf.memory, &zero, d->y, ys);
        }
        if (st != CUDNN_STATUS_SUCCESS) return kiln_cudnn_error(st, "cudnnConvolutionForward(...)", __FILE__, __LINE__);
    }
    if (nin > 2 && in[2].ndim >= 0) KILN_TRY(conv_add_bias(ctx, x->dtype, y->data, in[2].data, N, M, plane));
    return KILN_OK;
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
            KILN_TRY(conv_descs_set(d, &dd, x->dtype));
            KILN_TRY(conv_pick_bwd(n, ctx, d, x->dtype, ctx->workspace_bytes - used, &perf));
            set_for = cnt;
        }
        KILN_CUDNN_TRY(cudnnConvolutionBackwardData(ctx->dnn, &one, d->w, w->data, d->y, xs, d->c, perf.algo,
                                                    (char *)ctx->workspace + used, perf.memory, &zero, d->x, dst));
        if (!direct) KILN_TRY(conv_run_shift(ctx, es, dst, ys, &crop, cnt * M));
    }
    if (nin > 2 && in[2].ndim >= 0) KILN_TRY(conv_add_bias(ctx, x->dtype, y->data, in[2].data, N, M, plane));
    return KILN_OK;
}

static kiln_status exec_conv(const kiln_node *n, const kiln_cuda_tensor *in, int nin, const kiln_cuda_tensor *out, int nout,
                             kiln_cuda_ctx *ctx) {
    if (nin < 2) return kiln_error(KILN_ERR_INVALID_ARGUMENT, "%s needs X and W", n->op_type);
    conv_descs d;
    memset(&d, 0, sizeof d);
    kiln_status s = conv_descs_create(&d);
    if (s == KILN_OK) s = conv_forward(n, in, nin, &out[0], ctx, &d);
    conv_descs_destroy(&d);
    return s;
}

static kiln_status exec_conv_transpose(const kiln_node *n, const kiln_cuda_tensor *in, int nin, const kiln_cuda_tensor *out,
                                       int nout, kiln_cuda_ctx *ctx) {
    if (nin < 2) return kiln_error(KILN_ERR_INVALID_ARGUMENT, "%s needs X and W", n->op_type);
    conv_descs d;
    memset(&d, 0, sizeof d);
    kiln_status s = conv_descs_create(&d);
    if (s == KILN_OK) s = conv_transpose(n, in, nin, &out[0], ctx, &d);
    conv_descs_destroy(&d);
    return s;
}

/* X, W (and B) float32/float16/bfloat16 of one dtype; 1 to 3 spatial dims; attributes that parse. */
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
