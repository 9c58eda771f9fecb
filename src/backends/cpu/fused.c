/* fused.c — the CPU fused family's kernel table, and FusedConv / FusedGemm / FusedMatMul: the
 * existing Conv, Gemm and MatMul kernels compute the product, then the epilogue (bias, residual,
 * activation) runs in place over the output (a channels-first 2-D FusedConv runs conv2d.c, which
 * applies it inside each part of the convolution); a channels-last FusedConv runs the same Conv on
 * channels-first copies of its tensors, and FusedPool the ONNX pool's kernel the same way. float32; float16/bfloat16 through float32. The
 * activations use the same vector math as the standalone ops (16 lanes wide where the processor
 * has AVX-512: activation_wide.h), so a fused node matches the nodes it replaced to rounding. */
#include "backends/cpu/fused_kernels.h"

#include "backends/cpu/activation_wide.h"
#include "backends/cpu/conv2d.h"
#include "backends/cpu/cpu_simd.h"
#include "backends/cpu/elementwise_vmath.h"
#include "core/status.h"
#include "ir/fused_ops.h"

#include <string.h>

/* y[i] = EXPR for i in [0, n), EXPR computed on 4-lane vectors v of y (branch-free: activations on
 * data of random sign must not branch per element); the tail is padded with zeros. */
#define VEC_INPLACE(y, n, v, EXPR)                                                                 \
    do {                                                                                           \
        int64_t i_ = 0;                                                                            \
        for (; i_ + 4 <= (n); i_ += 4) {                                                           \
            ew_v4f v;                                                                              \
            memcpy(&v, (y) + i_, sizeof v);                                                        \
            v = (EXPR);                                                                            \
            memcpy((y) + i_, &v, sizeof v);                                                        \
        }                                                                                          \
        if (i_ < (n)) {                                                                            \
            ew_v4f v = {0};                                                                        \
            memcpy(&v, (y) + i_, (size_t)((n) - i_) * sizeof(float));                              \
            v = (EXPR);                                                                            \
            memcpy((y) + i_, &v, (size_t)((n) - i_) * sizeof(float));                              \
        }                                                                                          \
    } while (0)

/* min(max(v, lo), hi) per lane; NaN passes through, as in Clip. */
static inline ew_v4f vclamp(ew_v4f v, float lo, float hi) {
    v = ew_vselect(v < lo, (ew_v4f){0} + lo, v);
    return ew_vselect(v > hi, (ew_v4f){0} + hi, v);
}

static inline ew_v4f vsilu(ew_v4f x) { return x * ew_vsigmoid(x); }

/* y[i] = act(y[i]) for i in [0, n): kiln_cpu_activation_apply's body, in AVX2+FMA and baseline
 * clones (a static function: Clang 14 emits no clone dispatcher for an external one). */
KILN_SIMD_CLONES
static void apply_activation(float *y, int64_t n, const kiln_act *a) {
    const float p0 = a->p0, p1 = a->p1;
    const ew_v4f zero = {0};
    switch (a->kind) {
    case KILN_ACT_NONE: break;
    case KILN_ACT_RELU: VEC_INPLACE(y, n, v, ew_vselect(v < 0.0f, zero, v)); break;
    case KILN_ACT_LEAKY_RELU: VEC_INPLACE(y, n, v, ew_vselect(v < 0.0f, v * p0, v)); break;
    case KILN_ACT_CLIP: VEC_INPLACE(y, n, v, vclamp(v, p0, p1)); break;
    case KILN_ACT_HARD_SIGMOID: VEC_INPLACE(y, n, v, vclamp(p0 * v + p1, 0.0f, 1.0f)); break;
    case KILN_ACT_HARD_SWISH: VEC_INPLACE(y, n, v, v * vclamp(v / 6.0f + 0.5f, 0.0f, 1.0f)); break;
    case KILN_ACT_SIGMOID: EW_VEC_MAP(y, y, n, ew_vsigmoid); break;
    case KILN_ACT_TANH: EW_VEC_MAP(y, y, n, ew_vtanh); break;
    case KILN_ACT_GELU: EW_VEC_MAP(y, y, n, ew_vgelu_erf); break;
    case KILN_ACT_GELU_TANH: EW_VEC_MAP(y, y, n, ew_vgelu_tanh); break;
    case KILN_ACT_SILU: EW_VEC_MAP(y, y, n, vsilu); break;
    case KILN_ACT_COUNT: break;
    }
}

void kiln_cpu_activation_apply(float *y, int64_t n, const kiln_act *a) {
    if (!kiln_cpu_activation_wide(y, n, a)) apply_activation(y, n, a);
}

/* y[i] += x[i] for i in [0, n) on 8-lane vectors. */
KILN_SIMD_CLONES
static void add_into(float *y, const float *x, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) kiln_v8_store(y + i, kiln_v8_load(y + i) + kiln_v8_load(x + i));
    for (; i < n; i++) y[i] += x[i];
}

/* The epilogue over y (float32): y = act((y + bias) + z), bias (may be NULL) repeated along the last
 * axis, z (may be NULL) exactly y's shape. */
static kiln_status epilogue(const kiln_node *n, kiln_tensor *y, const kiln_tensor *bias, const kiln_tensor *z) {
    kiln_act act;
    KILN_TRY(kiln_fused_activation(n, &act));
    KILN_TRY(nn_require_f32(n, y, 0));
    int64_t count = kiln_tensor_numel(y), row = y->ndim ? y->dims[y->ndim - 1] : 1;
    float *yd = y->data;
    if (bias) {
        KILN_TRY(nn_require_f32(n, bias, 2));
        if (kiln_tensor_numel(bias) != row)
            return kiln_error(KILN_ERR_SHAPE, "%s: the bias has %lld elements, the output rows %lld", n->op_type,
                              (long long)kiln_tensor_numel(bias), (long long)row);
        for (int64_t r = 0; row > 0 && r < count / row; r++) add_into(yd + r * row, bias->data, row);
    }
    if (z) {
        KILN_TRY(nn_require_f32(n, z, 3));
        if (z->ndim != y->ndim || memcmp(z->dims, y->dims, sizeof *z->dims * (size_t)y->ndim)) {
            char a[96], b[96];
            return kiln_error(KILN_ERR_SHAPE, "%s: the residual is %s but the output is %s", n->op_type,
                              kiln_shape_str(a, sizeof a, z->ndim, z->dims), kiln_shape_str(b, sizeof b, y->ndim, y->dims));
        }
        add_into(yd, z->data, count);
    }
    kiln_cpu_activation_apply(yd, count, &act);
    return KILN_OK;
}

static const kiln_tensor *opt_input(kiln_tensor *const *in, int nin, int i) { return i < nin ? in[i] : NULL; }

/* dst = src (4-D float32) with its axes permuted: dst dim i is src dim perm[i]. */
static kiln_status permute4(const kiln_tensor *src, const int *perm, kiln_tensor *dst) {
    int64_t dims[4], sstr[4], st[4];
    kiln_strides(4, src->dims, sstr);
    for (int i = 0; i < 4; i++) {
        dims[i] = src->dims[perm[i]];
        st[i] = sstr[perm[i]];
    }
    KILN_TRY(kiln_tensor_alloc(dst, KILN_F32, 4, dims));
    const float *s = src->data;
    float *d = dst->data;
    for (int64_t a = 0; a < dims[0]; a++)
        for (int64_t b = 0; b < dims[1]; b++)
            for (int64_t c = 0; c < dims[2]; c++) {
                const float *row = s + a * st[0] + b * st[1] + c * st[2];
                for (int64_t e = 0; e < dims[3]; e++) *d++ = row[e * st[3]];
            }
    return KILN_OK;
}

static const int g_to_first[4] = {0, 3, 1, 2}; /* [N, H, W, C] -> [N, C, H, W]; [M, kH, kW, C/g] -> [M, C/g, kH, kW] */
static const int g_to_last[4] = {0, 2, 3, 1};  /* [N, M, H', W'] -> [N, H', W', M] */

/* Channels-last FusedConv (fused_ops.h): X and W are transposed to channels-first temporaries, the
 * NCHW Conv runs into a third, which is transposed into Y; the epilogue then reads Z as it is
 * (channels-last, like Y). Correct rather than fast: three copies around the convolution. */
static kiln_status conv_channels_last(const kiln_node *n, kiln_tensor *const *in, int nin, kiln_tensor *y) {
    KILN_TRY(nn_require_inputs(n, in, nin, 2));
    KILN_TRY(nn_require_f32(n, in[0], 0));
    KILN_TRY(nn_require_f32(n, in[1], 1));
    if (in[0]->ndim != 4 || in[1]->ndim != 4)
        return kiln_error(KILN_ERR_SHAPE, "%s: channels_last needs 4-D X and W, has ranks %d and %d", n->op_type,
                          in[0]->ndim, in[1]->ndim);
    kiln_tensor xt = {0}, wt = {0}, yt = {0};
    kiln_tensor *cin[3] = {&xt, &wt, nin > 2 ? in[2] : NULL}, *cout[1] = {&yt};
    kiln_status st = permute4(in[0], g_to_first, &xt);
    if (st == KILN_OK) st = permute4(in[1], g_to_first, &wt);
    if (st == KILN_OK) st = kiln_cpu_conv(n, cin, nin > 3 ? 3 : nin, cout, 1);
    if (st == KILN_OK && yt.ndim != 4) st = kiln_error(KILN_ERR_INTERNAL, "%s: Conv returned rank %d", n->op_type, yt.ndim);
    if (st == KILN_OK) st = permute4(&yt, g_to_last, y);
    kiln_tensor_release(&xt);
    kiln_tensor_release(&wt);
    kiln_tensor_release(&yt);
    return st;
}

/* Channels-first FusedConv on 4-D float32 tensors: conv2d.c with the epilogue fused into its parts. */
static kiln_status conv2d_fused(const kiln_node *n, kiln_tensor *const *in, int nin, kiln_tensor *y,
                                const kiln_conv2d_weights *packed) {
    const kiln_tensor *x = in[0], *w = in[1], *b = opt_input(in, nin, 2), *z = opt_input(in, nin, 3);
    for (int i = 0; i < nin && i < 4; i++)
        if (in[i]) KILN_TRY(nn_require_f32(n, in[i], i));
    kiln_conv2d g;
    kiln_act act;
    KILN_TRY(kiln_conv2d_geometry(n, x, w, b, &g));
    KILN_TRY(kiln_fused_activation(n, &act));
    int64_t dims[4] = {g.N, g.M, g.OH, g.OW};
    if (z && (z->ndim != 4 || memcmp(z->dims, dims, sizeof dims))) {
        char a[96], c[96];
        return kiln_error(KILN_ERR_SHAPE, "%s: the residual is %s but the output is %s", n->op_type,
                          kiln_shape_str(a, sizeof a, z->ndim, z->dims), kiln_shape_str(c, sizeof c, 4, dims));
    }
    KILN_TRY(kiln_tensor_alloc_uninit(y, KILN_F32, 4, dims)); /* conv2d writes every element */
    return kiln_conv2d_run(&g, x->data, w->data, packed, b ? b->data : NULL, z ? z->data : NULL, &act, y->data);
}

/* FusedConv; packed: W packed for the channels-first 2-D kernels, or NULL. */
static kiln_status fused_conv_run(const kiln_node *n, kiln_tensor *const *in, int nin, kiln_tensor *const *out,
                                  const kiln_conv2d_weights *packed) {
    int64_t cl = kiln_attr_int(n, "channels_last", 0);
    if (cl != 0 && cl != 1)
        return kiln_error(KILN_ERR_INVALID_ARGUMENT, "%s: channels_last must be 0 or 1, is %lld", n->op_type, (long long)cl);
    KILN_TRY(nn_require_inputs(n, in, nin, 2));
    if (!cl && in[0]->ndim == 4 && in[1]->ndim == 4) return conv2d_fused(n, in, nin, out[0], packed);
    if (cl) KILN_TRY(conv_channels_last(n, in, nin, out[0]));
    else KILN_TRY(kiln_cpu_conv(n, in, nin > 3 ? 3 : nin, out, 1));
    return epilogue(n, out[0], NULL, opt_input(in, nin, 3));
}

static NN_EXEC(fused_conv) {
    (void)nout;
    return fused_conv_run(n, in, nin, out, NULL);
}

/* FusedPool (fused_ops.h): the ONNX pool's CPU kernel on the node as that pool; channels-last, on a
 * channels-first copy of X, the result transposed into Y (correct rather than fast). */
static NN_EXEC(fused_pool) {
    kiln_node base;
    KILN_TRY(kiln_fused_pool_base(n, &base));
    int64_t cl = kiln_attr_int(n, "channels_last", 0);
    if (cl != 0 && cl != 1)
        return kiln_error(KILN_ERR_INVALID_ARGUMENT, "%s: channels_last must be 0 or 1, is %lld", n->op_type, (long long)cl);
    KILN_TRY(nn_require_inputs(n, in, nin, 1));
    KILN_TRY(nn_require_f32(n, in[0], 0));
    const char *p = base.op_type;
    kiln_cpu_exec_fn fn = !strcmp(p, "MaxPool")             ? kiln_cpu_max_pool
                          : !strcmp(p, "AveragePool")       ? kiln_cpu_average_pool
                          : !strcmp(p, "GlobalAveragePool") ? kiln_cpu_global_average_pool
                                                            : kiln_cpu_global_max_pool;
    if (!cl) return fn(&base, in, 1, out, 1);
    if (in[0]->ndim != 4)
        return kiln_error(KILN_ERR_SHAPE, "%s: channels_last needs a 4-D X, has rank %d", n->op_type, in[0]->ndim);
    kiln_tensor xt = {0}, yt = {0};
    kiln_tensor *pin[1] = {&xt}, *pout[1] = {&yt};
    kiln_status st = permute4(in[0], g_to_first, &xt);
    if (st == KILN_OK) st = fn(&base, pin, 1, pout, 1);
    if (st == KILN_OK && (yt.ndim != 4 || yt.dtype != KILN_F32))
        st = kiln_error(KILN_ERR_INTERNAL, "%s: %s returned rank %d", n->op_type, p, yt.ndim);
    if (st == KILN_OK) st = permute4(&yt, g_to_last, out[0]);
    kiln_tensor_release(&xt);
    kiln_tensor_release(&yt);
    return st;
}

static NN_EXEC(fused_gemm) {
    KILN_TRY(kiln_cpu_gemm(n, in, nin > 3 ? 3 : nin, out, 1));
    return epilogue(n, out[0], NULL, opt_input(in, nin, 3));
}

static NN_EXEC(fused_matmul) {
    KILN_TRY(nn_require_inputs(n, in, nin, 2));
    KILN_TRY(kiln_cpu_matmul(n, in, 2, out, 1));
    return epilogue(n, out[0], opt_input(in, nin, 2), opt_input(in, nin, 3));
}

static NN_FLOAT_EXEC(kiln_cpu_fused_conv, fused_conv, 1u)
static NN_FLOAT_EXEC(kiln_cpu_fused_pool, fused_pool, 1u)
static NN_FLOAT_EXEC(kiln_cpu_fused_gemm, fused_gemm, 1u)
static NN_FLOAT_EXEC(kiln_cpu_fused_matmul, fused_matmul, 1u)

kiln_status kiln_cpu_fused_conv_prepared(const kiln_node *n, const void *state, kiln_tensor *const *in, int nin,
                                         kiln_tensor *const *out, int nout) {
    if (nn_has_half_input(in, nin)) return kiln_cpu_fused_conv(n, in, nin, out, nout);
    kiln_tensor view, *args[KILN_CONV_MAX_INPUTS];
    return fused_conv_run(n, kiln_cpu_conv_inputs(state, in, nin, &view, args), nin, out, state);
}

kiln_status kiln_cpu_fused_gemm_prepared(const kiln_node *n, const void *state, kiln_tensor *const *in, int nin,
                                         kiln_tensor *const *out, int nout) {
    if (nn_has_half_input(in, nin)) return kiln_cpu_fused_gemm(n, in, nin, out, nout);
    KILN_TRY(kiln_cpu_gemm_prepared(n, state, in, nin > 3 ? 3 : nin, out, 1));
    return epilogue(n, out[0], NULL, opt_input(in, nin, 3));
}

kiln_status kiln_cpu_fused_matmul_prepared(const kiln_node *n, const void *state, kiln_tensor *const *in, int nin,
                                           kiln_tensor *const *out, int nout) {
    if (nn_has_half_input(in, nin)) return kiln_cpu_fused_matmul(n, in, nin, out, nout);
    KILN_TRY(nn_require_inputs(n, in, nin, 2));
    KILN_TRY(kiln_cpu_matmul_prepared(n, state, in, 2, out, 1));
    return epilogue(n, out[0], opt_input(in, nin, 2), opt_input(in, nin, 3));
}

const kiln_cpu_kernel kiln_cpu_kernels_fused[] = {
    {"FusedConv", KILN_FUSED_DOMAIN, kiln_cpu_fused_conv},
    {"FusedPool", KILN_FUSED_DOMAIN, kiln_cpu_fused_pool},
    {"FusedGemm", KILN_FUSED_DOMAIN, kiln_cpu_fused_gemm},
    {"FusedMatMul", KILN_FUSED_DOMAIN, kiln_cpu_fused_matmul},
    {"Attention", KILN_FUSED_DOMAIN, kiln_cpu_attention},
    {"ElementwiseChain", KILN_FUSED_DOMAIN, kiln_cpu_elementwise_chain},
    {0},
};
