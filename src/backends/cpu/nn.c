/* nn.c — the CPU nn family's kernel table, the helpers its files share (float16/bfloat16 through
 * float32, input checks), and the kernels small enough to live here: Softmax, LogSoftmax, Hardmax
 * (2-D coercion before opset 13, one axis from 13) and LRN, all float32. */
#include "backends/cpu/nn_kernels.h"

#include "core/half.h"
#include "core/status.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define NN_MAX_IO 8

bool nn_has_half_input(kiln_tensor *const *in, int nin) {
    for (int i = 0; i < nin; i++)
        if (in[i] && (in[i]->dtype == KILN_F16 || in[i]->dtype == KILN_BF16)) return true;
    return false;
}

kiln_status nn_require_f32(const kiln_node *n, const kiln_tensor *t, int input) {
    if (t->dtype != KILN_F32)
        return kiln_error(KILN_ERR_UNSUPPORTED, "%s on the CPU does not support %s (input %d)", n->op_type,
                          kiln_dtype_name(t->dtype), input);
    return KILN_OK;
}

kiln_status nn_require_inputs(const kiln_node *n, kiln_tensor *const *in, int nin, int count) {
    for (int i = 0; i < count; i++)
        if (i >= nin || !in[i]) return kiln_error(KILN_ERR_INVALID_ARGUMENT, "%s needs input %d", n->op_type, i);
    return KILN_OK;
}

/* dst (float32, allocated here) = src (float16 or bfloat16). */
static kiln_status half_to_f32(kiln_tensor *dst, const kiln_tensor *src) {
    KILN_TRY(kiln_tensor_alloc(dst, KILN_F32, src->ndim, src->dims));
    const uint16_t *s = src->data;
    float *d = dst->data;
    int64_t count = kiln_tensor_numel(src);
    if (src->dtype == KILN_F16)
        for (int64_t i = 0; i < count; i++) d[i] = kiln_f16_to_f32(s[i]);
    else
        for (int64_t i = 0; i < count; i++) d[i] = kiln_bf16_to_f32(s[i]);
    return KILN_OK;
}

/* dst (dtype float16 or bfloat16, allocated here) = src (float32). */
static kiln_status f32_to_half(kiln_tensor *dst, kiln_dtype dtype, const kiln_tensor *src) {
    KILN_TRY(kiln_tensor_alloc(dst, dtype, src->ndim, src->dims));
    const float *s = src->data;
    uint16_t *d = dst->data;
    int64_t count = kiln_tensor_numel(src);
    if (dtype == KILN_F16)
        for (int64_t i = 0; i < count; i++) d[i] = kiln_f32_to_f16(s[i]);
    else
        for (int64_t i = 0; i < count; i++) d[i] = kiln_f32_to_bf16(s[i]);
    return KILN_OK;
}

kiln_status nn_via_f32(kiln_cpu_exec_fn fn, const kiln_node *n, kiln_tensor *const *in, int nin,
                       kiln_tensor *const *out, int nout, unsigned out_mask) {
    if (nin > NN_MAX_IO || nout > NN_MAX_IO)
        return kiln_error(KILN_ERR_INVALID_ARGUMENT, "%s has too many inputs or outputs", n->op_type);
    kiln_tensor tin[NN_MAX_IO], tout[NN_MAX_IO];
    kiln_tensor *pin[NN_MAX_IO] = {0}, *pout[NN_MAX_IO] = {0};
    memset(tin, 0, sizeof tin);
    memset(tout, 0, sizeof tout);
    kiln_status st = KILN_OK;
    for (int i = 0; i < nin; i++) {
        pin[i] = in[i];
        if (st == KILN_OK && in[i] && (in[i]->dtype == KILN_F16 || in[i]->dtype == KILN_BF16)) {
            st = half_to_f32(&tin[i], in[i]);
            pin[i] = &tin[i];
        }
    }
    for (int i = 0; i < nout; i++) pout[i] = out[i] ? &tout[i] : NULL;
    if (st == KILN_OK) st = fn(n, pin, nin, pout, nout);
    kiln_dtype target = nin > 0 && in[0] ? in[0]->dtype : KILN_F32;
    for (int i = 0; i < nout && st == KILN_OK; i++) {
        if (!out[i]) continue;
        if ((out_mask >> i & 1u) && tout[i].dtype == KILN_F32 && (target == KILN_F16 || target == KILN_BF16)) {
            st = f32_to_half(out[i], target, &tout[i]);
        } else {
            *out[i] = tout[i]; /* ownership moves to the caller's tensor */
            memset(&tout[i], 0, sizeof tout[i]);
        }
    }
    for (int i = 0; i < NN_MAX_IO; i++) {
        kiln_tensor_release(&tin[i]);
        kiln_tensor_release(&tout[i]);
    }
    return st;
}

/* ---------------------------------------------------------------- softmax family */

typedef enum { SM_SOFTMAX, SM_LOGSOFTMAX, SM_HARDMAX } sm_kind;

/* 4-lane float32 vectors (GCC/Clang vector extensions; SSE2 on baseline x86-64). */
typedef float nn_v4f __attribute__((vector_size(16)));
typedef int32_t nn_v4i __attribute__((vector_size(16)));

/* m ? a : b per lane (m all ones or zero, from a vector comparison). */
static inline nn_v4f v4_select(nn_v4i m, nn_v4f a, nn_v4f b) { return (nn_v4f)((m & (nn_v4i)a) | (~m & (nn_v4i)b)); }

/* e^x per lane for x <= 88.37 (larger values clamp there; softmax only passes x - max <= 0):
 * x = n ln2 + r with |r| <= ln2 / 2, the degree-7 Taylor polynomial of e^r, 2^n put in the exponent
 * bits; below ln(FLT_MIN) the result is exactly 0 (so masked -inf logits give 0). Relative error
 * about 1e-7; NaN propagates. */
static inline nn_v4f v4_exp(nn_v4f x) {
    const float hi = 88.3762626647949f, lo = -87.3365478515625f, magic = 12582912.0f; /* 1.5 * 2^23 */
    nn_v4i nan = x != x, under = x < lo;
    nn_v4f xc = v4_select(x > hi, (nn_v4f){hi, hi, hi, hi}, x);
    xc = v4_select(under | nan, (nn_v4f){0, 0, 0, 0}, xc);
    nn_v4f t = xc * 1.44269504088896341f + magic, nf = t - magic; /* nf = round(x / ln2) */
    nn_v4i n = (nn_v4i)t - 0x4B400000;                            /* its integer value */
    nn_v4f r = xc - nf * 0.693145751953125f - nf * 1.42860682030941723212e-6f; /* ln2 in two parts */
    nn_v4f p = r * (1.0f / 5040.0f) + 1.0f / 720.0f;
    p = p * r + 1.0f / 120.0f;
    p = p * r + 1.0f / 24.0f;
    p = p * r + 1.0f / 6.0f;
    p = p * r + 0.5f;
    p = p * r + 1.0f;
    p = p * r + 1.0f;
    nn_v4f y = p * (nn_v4f)((n + 127) << 23);
    y = v4_select(under, (nn_v4f){0, 0, 0, 0}, y);
    return v4_select(nan, x, y);
}

/* y[j] = exp(x[j] - sub) for j in [0, n); returns their sum. */
static float exp_row(float *y, const float *x, int64_t n, float sub) {
    nn_v4f acc = {0, 0, 0, 0}, v;
    int64_t j = 0;
    for (; j + 4 <= n; j += 4) {
        memcpy(&v, x + j, sizeof v);
        v = v4_exp(v - sub);
        memcpy(y + j, &v, sizeof v);
        acc += v;
    }
    if (j < n) { /* the tail, padded with -inf (whose exp is 0) */
        float tail[4] = {-INFINITY, -INFINITY, -INFINITY, -INFINITY};
        memcpy(tail, x + j, (size_t)(n - j) * sizeof *tail);
        memcpy(&v, tail, sizeof v);
        v = v4_exp(v - sub);
        memcpy(tail, &v, sizeof v);
        memcpy(y + j, tail, (size_t)(n - j) * sizeof *tail);
        acc += v;
    }
    return (acc[0] + acc[1]) + (acc[2] + acc[3]);
}

/* Softmax / LogSoftmax of float32 rows of len contiguous elements (the inner == 1 case). */
static void softmax_rows_f32(const float *restrict xd, float *restrict yd, int64_t rows, int64_t len, sm_kind kind) {
    for (int64_t r = 0; r < rows; r++) {
        const float *x = xd + r * len;
        float *y = yd + r * len, mx[8], m = x[0];
        int64_t j = 0;
        for (int k = 0; k < 8; k++) mx[k] = x[0];
        for (; j + 8 <= len; j += 8)
            for (int k = 0; k < 8; k++) mx[k] = x[j + k] > mx[k] ? x[j + k] : mx[k];
        for (; j < len; j++) m = x[j] > m ? x[j] : m;
        for (int k = 0; k < 8; k++) m = mx[k] > m ? mx[k] : m;
        float sum = exp_row(y, x, len, m);
        if (kind == SM_SOFTMAX) {
            float inv = 1.0f / sum;
            for (j = 0; j + 8 <= len; j += 8)
                for (int k = 0; k < 8; k++) y[j + k] *= inv;
            for (; j < len; j++) y[j] *= inv;
        } else {
            float lse = m + logf(sum);
            for (j = 0; j + 8 <= len; j += 8)
                for (int k = 0; k < 8; k++) y[j + k] = x[j + k] - lse;
            for (; j < len; j++) y[j] = x[j] - lse;
        }
    }
}

/* The softmax-family loop for element type T over x, y seen as [outer, len, inner]; buf holds
 * 2 * inner T, arg inner indices (Hardmax only). y starts zeroed. */
#define DEFINE_SOFTMAX(T, EXP, LOG)                                                                \
    static void softmax_##T(const T *xd, T *yd, int64_t outer, int64_t len, int64_t inner, sm_kind kind, \
                            T *buf, int64_t *arg) {                                                \
        T *mx = buf, *sum = buf + inner;                                                           \
        for (int64_t o = 0; o < outer; o++) {                                                      \
            const T *xo = xd + o * len * inner;                                                    \
            T *yo = yd + o * len * inner;                                                          \
            memcpy(mx, xo, (size_t)inner * sizeof *mx);                                            \
            if (kind == SM_HARDMAX) { /* 1 at the first maximum along len */                       \
                for (int64_t j = 0; j < inner; j++) arg[j] = 0;                                    \
                for (int64_t l = 1; l < len; l++)                                                  \
                    for (int64_t j = 0; j < inner; j++)                                            \
                        if (xo[l * inner + j] > mx[j]) {                                           \
                            mx[j] = xo[l * inner + j];                                             \
                            arg[j] = l;                                                            \
                        }                                                                          \
                for (int64_t j = 0; j < inner; j++) yo[arg[j] * inner + j] = 1;                    \
                continue;                                                                          \
            }                                                                                      \
            for (int64_t l = 1; l < len; l++)                                                      \
                for (int64_t j = 0; j < inner; j++) mx[j] = xo[l * inner + j] > mx[j] ? xo[l * inner + j] : mx[j]; \
            memset(sum, 0, (size_t)inner * sizeof *sum);                                           \
            for (int64_t l = 0; l < len; l++)                                                      \
                for (int64_t j = 0; j < inner; j++) {                                              \
                    T e = EXP(xo[l * inner + j] - mx[j]);                                          \
                    sum[j] += e;                                                                   \
                    if (kind == SM_SOFTMAX) yo[l * inner + j] = e;                                 \
                }                                                                                  \
            if (kind == SM_SOFTMAX) {                                                              \
                for (int64_t j = 0; j < inner; j++) sum[j] = 1 / sum[j];                           \
                for (int64_t l = 0; l < len; l++)                                                  \
                    for (int64_t j = 0; j < inner; j++) yo[l * inner + j] *= sum[j];               \
            } else {                                                                               \
                for (int64_t j = 0; j < inner; j++) sum[j] = mx[j] + LOG(sum[j]);                  \
                for (int64_t l = 0; l < len; l++)                                                  \
                    for (int64_t j = 0; j < inner; j++) yo[l * inner + j] = xo[l * inner + j] - sum[j]; \
            }                                                                                      \
        }                                                                                          \
    }
DEFINE_SOFTMAX(float, expf, logf)
DEFINE_SOFTMAX(double, exp, log)

/* Softmax / LogSoftmax / Hardmax (float32, float64) over X seen as [outer, len, inner]: before
 * opset 13 the input is coerced to 2-D at axis (default 1), so len spans dims [axis, rank) and
 * inner = 1; from opset 13 len is dims[axis] (default -1). */
static kiln_status softmax_common(const kiln_node *n, kiln_tensor *const *in, int nin, kiln_tensor *const *out,
                                  sm_kind kind) {
    KILN_TRY(nn_require_inputs(n, in, nin, 1));
    const kiln_tensor *x = in[0];
    if (x->dtype != KILN_F64) KILN_TRY(nn_require_f32(n, x, 0));
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
    KILN_TRY(kiln_tensor_alloc(out[0], x->dtype, x->ndim, x->dims));
    if (outer * len * inner == 0) return KILN_OK;
    void *buf = malloc((size_t)(2 * inner) * kiln_dtype_size(x->dtype));
    int64_t *arg = kind == SM_HARDMAX ? malloc((size_t)inner * sizeof *arg) : NULL;
    if (!buf || (kind == SM_HARDMAX && !arg)) {
        free(buf);
        free(arg);
        return kiln_error(KILN_ERR_OUT_OF_MEMORY, "%s: out of memory", n->op_type);
    }
    if (x->dtype == KILN_F32 && inner == 1 && kind != SM_HARDMAX)
        softmax_rows_f32(x->data, out[0]->data, outer, len, kind);
    else if (x->dtype == KILN_F64) softmax_double(x->data, out[0]->data, outer, len, inner, kind, buf, arg);
    else softmax_float(x->data, out[0]->data, outer, len, inner, kind, buf, arg);
    free(buf);
    free(arg);
    return KILN_OK;
}

static NN_EXEC(softmax) { return softmax_common(n, in, nin, out, SM_SOFTMAX); }
static NN_EXEC(logsoftmax) { return softmax_common(n, in, nin, out, SM_LOGSOFTMAX); }
static NN_EXEC(hardmax) { return softmax_common(n, in, nin, out, SM_HARDMAX); }

/* ---------------------------------------------------------------- LRN */

/* LRN: y = x / (bias + alpha / size * sum of x^2 over channels [c - floor((size-1)/2),
 * c + ceil((size-1)/2)])^beta, X [N, C, D...]. */
static NN_EXEC(lrn) {
    KILN_TRY(nn_require_inputs(n, in, nin, 1));
    const kiln_tensor *x = in[0];
    KILN_TRY(nn_require_f32(n, x, 0));
    if (x->ndim < 3) return kiln_error(KILN_ERR_SHAPE, "LRN input must have rank >= 3, has rank %d", x->ndim);
    int64_t size = kiln_attr_int(n, "size", 0);
    if (size < 1) return kiln_error(KILN_ERR_INVALID_ARGUMENT, "LRN needs a positive 'size' attribute");
    float alpha = kiln_attr_float(n, "alpha", 1e-4f), beta = kiln_attr_float(n, "beta", 0.75f);
    float bias = kiln_attr_float(n, "bias", 1.0f), coef = alpha / (float)size;
    int64_t N = x->dims[0], C = x->dims[1], plane = kiln_numel(x->ndim - 2, x->dims + 2);
    int64_t before = (size - 1) / 2, after = size - 1 - before;
    KILN_TRY(kiln_tensor_alloc(out[0], KILN_F32, x->ndim, x->dims));
    float *sq = malloc((size_t)(plane + 1) * sizeof *sq);
    if (!sq) return kiln_error(KILN_ERR_OUT_OF_MEMORY, "LRN: out of memory");
    const float *xd = x->data;
    float *yd = out[0]->data;
    for (int64_t b = 0; b < N; b++)
        for (int64_t c = 0; c < C; c++) {
            int64_t c0 = c - before < 0 ? 0 : c - before, c1 = c + after >= C ? C - 1 : c + after;
            memset(sq, 0, (size_t)plane * sizeof *sq);
            for (int64_t k = c0; k <= c1; k++) {
                const float *xk = xd + (b * C + k) * plane;
                for (int64_t i = 0; i < plane; i++) sq[i] += xk[i] * xk[i];
            }
            const float *xc = xd + (b * C + c) * plane;
            float *yc = yd + (b * C + c) * plane;
            for (int64_t i = 0; i < plane; i++) yc[i] = xc[i] / powf(bias + coef * sq[i], beta);
        }
    free(sq);
    return KILN_OK;
}

static NN_FLOAT_EXEC(kiln_cpu_softmax, softmax, 1u)
static NN_FLOAT_EXEC(kiln_cpu_logsoftmax, logsoftmax, 1u)
static NN_FLOAT_EXEC(kiln_cpu_hardmax, hardmax, 1u)
static NN_FLOAT_EXEC(kiln_cpu_lrn, lrn, 1u)

const kiln_cpu_kernel kiln_cpu_kernels_nn[] = {
    {"Conv", "", kiln_cpu_conv},
    {"ConvTranspose", "", kiln_cpu_conv_transpose},
    {"MaxPool", "", kiln_cpu_max_pool},
    {"AveragePool", "", kiln_cpu_average_pool},
    {"LpPool", "", kiln_cpu_lp_pool},
    {"GlobalAveragePool", "", kiln_cpu_global_average_pool},
    {"GlobalMaxPool", "", kiln_cpu_global_max_pool},
    {"GlobalLpPool", "", kiln_cpu_global_lp_pool},
    {"Gemm", "", kiln_cpu_gemm},
    {"MatMul", "", kiln_cpu_matmul},
    {"BatchNormalization", "", kiln_cpu_batchnorm},
    {"InstanceNormalization", "", kiln_cpu_instancenorm},
    {"GroupNormalization", "", kiln_cpu_groupnorm},
    {"LayerNormalization", "", kiln_cpu_layernorm},
    {"RMSNormalization", "", kiln_cpu_rmsnorm},
    {"Softmax", "", kiln_cpu_softmax},
    {"LogSoftmax", "", kiln_cpu_logsoftmax},
    {"Hardmax", "", kiln_cpu_hardmax},
    {"LRN", "", kiln_cpu_lrn},
    {0},
};
