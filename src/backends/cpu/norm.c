/* norm.c — CPU normalizations in float32 (float16/bfloat16 through float32): BatchNormalization
 * (inference form only), InstanceNormalization, GroupNormalization, LayerNormalization and
 * RMSNormalization. Means and variances are accumulated in double, two passes (mean, then squared
 * deviations), so large offsets do not cancel. LayerNormalization and RMSNormalization split their
 * rows over the thread pool. */
#include "backends/cpu/cpu_simd.h"
#include "backends/cpu/nn_kernels.h"

#include "core/status.h"
#include "core/threadpool.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Elements a part of a threaded row loop gets at least (smaller normalizations stay on one thread). */
#define ROWS_PARALLEL_ELEMS 16384

/* The row helpers below are written in blocks of 8 independent lanes over restrict pointers so
 * that GCC's -O2 vectorizer takes them; sums use 8 double accumulators. */

/* sum of x[0..n) (sq = false) or of (x - center)^2 (sq = true), in double. */
KILN_SIMD_CLONES
static double row_sum(const float *restrict x, int64_t n, bool sq, double center) {
    double acc[8] = {0};
    int64_t j = 0;
    if (sq) {
        for (; j + 8 <= n; j += 8)
            for (int k = 0; k < 8; k++) {
                double d = (double)x[j + k] - center;
                acc[k] += d * d;
            }
    } else {
        for (; j + 8 <= n; j += 8)
            for (int k = 0; k < 8; k++) acc[k] += x[j + k];
    }
    double s = 0.0;
    for (; j < n; j++) {
        double d = sq ? (double)x[j] - center : (double)x[j];
        s += sq ? d * d : d;
    }
    for (int k = 0; k < 8; k++) s += acc[k];
    return s;
}

/* Mean and 1/sqrt(var + eps) of v[0..count) (population variance, two passes). */
static void mean_invstd(const float *v, int64_t count, double eps, double *mean, double *invstd) {
    double m = count ? row_sum(v, count, false, 0.0) / (double)count : 0.0;
    double var = count ? row_sum(v, count, true, m) / (double)count : 0.0;
    *mean = m;
    *invstd = 1.0 / sqrt(var + eps);
}

/* y[j] = x[j] * a + c. */
static void row_axpb(float *restrict y, const float *restrict x, int64_t n, float a, float c) {
    int64_t j = 0;
    for (; j + 8 <= n; j += 8)
        for (int k = 0; k < 8; k++) y[j + k] = x[j + k] * a + c;
    for (; j < n; j++) y[j] = x[j] * a + c;
}

/* y[j] = (x[j] - m) * is * s[j] (+ b[j] when b != NULL). */
static void row_norm_affine(float *restrict y, const float *restrict x, int64_t n, float m, float is,
                            const float *restrict s, const float *restrict b) {
    int64_t j = 0;
    if (b) {
        for (; j + 8 <= n; j += 8)
            for (int k = 0; k < 8; k++) y[j + k] = (x[j + k] - m) * is * s[j + k] + b[j + k];
        for (; j < n; j++) y[j] = (x[j] - m) * is * s[j] + b[j];
    } else {
        for (; j + 8 <= n; j += 8)
            for (int k = 0; k < 8; k++) y[j + k] = (x[j + k] - m) * is * s[j + k];
        for (; j < n; j++) y[j] = (x[j] - m) * is * s[j];
    }
}

/* Checks that input i is a float32 vector of length len. */
static kiln_status check_vec(const kiln_node *n, const kiln_tensor *t, int i, int64_t len) {
    KILN_TRY(nn_require_f32(n, t, i));
    if (kiln_tensor_numel(t) != len || t->ndim > 1)
        return kiln_error(KILN_ERR_SHAPE, "%s: input %d must be a vector of %lld values", n->op_type, i, (long long)len);
    return KILN_OK;
}

/* X [N, C, ...] as N x C planes of `plane` elements; fails unless X is float32 of rank >= 2. */
static kiln_status nc_planes(const kiln_node *n, const kiln_tensor *x, int64_t *N, int64_t *C, int64_t *plane) {
    KILN_TRY(nn_require_f32(n, x, 0));
    if (x->ndim < 2) return kiln_error(KILN_ERR_SHAPE, "%s input must have rank >= 2, has rank %d", n->op_type, x->ndim);
    *N = x->dims[0];
    *C = x->dims[1];
    *plane = kiln_numel(x->ndim - 2, x->dims + 2);
    return KILN_OK;
}

/* BatchNormalization, inference form: Y = scale * (X - mean) / sqrt(var + eps) + B per channel
 * (per element of [C, D...] for opset < 9 with spatial = 0). */
static NN_EXEC(batchnorm) {
    if (n->opset >= 14 && kiln_attr_int(n, "training_mode", 0) != 0)
        return kiln_error(KILN_ERR_UNSUPPORTED, "BatchNormalization with training_mode=1 is not supported "
                                                "(kiln runs inference only)");
    for (int i = 1; i < nout; i++)
        if (out[i])
            return kiln_error(KILN_ERR_UNSUPPORTED, "BatchNormalization in training form (output %d requested) is "
                                                    "not supported (kiln runs inference only)", i);
    KILN_TRY(nn_require_inputs(n, in, nin, 5));
    const kiln_tensor *x = in[0];
    int64_t N, C, plane;
    KILN_TRY(nc_planes(n, x, &N, &C, &plane));
    bool spatial = n->opset >= 9 || kiln_attr_int(n, "spatial", 1) != 0;
    int64_t plen = spatial ? C : C * plane;
    for (int i = 1; i < 5; i++) {
        KILN_TRY(nn_require_f32(n, in[i], i));
        if (kiln_tensor_numel(in[i]) != plen)
            return kiln_error(KILN_ERR_SHAPE, "BatchNormalization: input %d has %lld values, expected %lld", i,
                              (long long)kiln_tensor_numel(in[i]), (long long)plen);
    }
    double eps = kiln_attr_float(n, "epsilon", 1e-5f);
    KILN_TRY(kiln_tensor_alloc(out[0], KILN_F32, x->ndim, x->dims));
    float *ab = malloc((size_t)(2 * plen + 1) * sizeof *ab);
    if (!ab) return kiln_error(KILN_ERR_OUT_OF_MEMORY, "BatchNormalization: out of memory");
    const float *scale = in[1]->data, *bias = in[2]->data, *mean = in[3]->data, *var = in[4]->data;
    for (int64_t i = 0; i < plen; i++) {
        double a = scale[i] / sqrt((double)var[i] + eps);
        ab[i] = (float)a;
        ab[plen + i] = (float)(bias[i] - mean[i] * a);
    }
    const float *xd = x->data;
    float *yd = out[0]->data;
    for (int64_t b = 0; b < N; b++)
        for (int64_t c = 0; c < C; c++) {
            const float *xp = xd + (b * C + c) * plane;
            float *yp = yd + (b * C + c) * plane;
            if (spatial) {
                row_axpb(yp, xp, plane, ab[c], ab[plen + c]);
            } else {
                const float *a = ab + c * plane, *s = ab + plen + c * plane;
                for (int64_t i = 0; i < plane; i++) yp[i] = xp[i] * a[i] + s[i];
            }
        }
    free(ab);
    return KILN_OK;
}

/* Normalizes `count` values of x into y with the given statistics, then y = y * s + b. */
static void normalize_affine(const float *x, float *y, int64_t count, double mean, double invstd, float s, float b) {
    double a = invstd * s;
    row_axpb(y, x, count, (float)a, (float)(b - mean * a));
}

/* InstanceNormalization: per (n, c) plane, y = scale[c] * (x - mean) / sqrt(var + eps) + B[c]. */
static NN_EXEC(instancenorm) {
    KILN_TRY(nn_require_inputs(n, in, nin, 3));
    const kiln_tensor *x = in[0];
    int64_t N, C, plane;
    KILN_TRY(nc_planes(n, x, &N, &C, &plane));
    KILN_TRY(check_vec(n, in[1], 1, C));
    KILN_TRY(check_vec(n, in[2], 2, C));
    double eps = kiln_attr_float(n, "epsilon", 1e-5f);
    KILN_TRY(kiln_tensor_alloc(out[0], KILN_F32, x->ndim, x->dims));
    const float *xd = x->data, *scale = in[1]->data, *bias = in[2]->data;
    float *yd = out[0]->data;
    for (int64_t b = 0; b < N; b++)
        for (int64_t c = 0; c < C; c++) {
            double m, is;
            int64_t off = (b * C + c) * plane;
            mean_invstd(xd + off, plane, eps, &m, &is);
            normalize_affine(xd + off, yd + off, plane, m, is, scale[c], bias[c]);
        }
    return KILN_OK;
}

/* GroupNormalization: statistics per (n, group of C / num_groups channels); scale/bias per group
 * (opset 18) or per channel (opset 21). */
static NN_EXEC(groupnorm) {
    KILN_TRY(nn_require_inputs(n, in, nin, 3));
    const kiln_tensor *x = in[0];
    int64_t N, C, plane, G = kiln_attr_int(n, "num_groups", 0);
    KILN_TRY(nc_planes(n, x, &N, &C, &plane));
    if (G < 1 || C % G)
        return kiln_error(KILN_ERR_SHAPE, "GroupNormalization: %lld channels cannot be split in %lld groups",
                          (long long)C, (long long)G);
    bool per_channel = n->opset >= 21;
    KILN_TRY(check_vec(n, in[1], 1, per_channel ? C : G));
    KILN_TRY(check_vec(n, in[2], 2, per_channel ? C : G));
    double eps = kiln_attr_float(n, "epsilon", 1e-5f);
    KILN_TRY(kiln_tensor_alloc(out[0], KILN_F32, x->ndim, x->dims));
    const float *xd = x->data, *scale = in[1]->data, *bias = in[2]->data;
    float *yd = out[0]->data;
    int64_t cg = C / G;
    for (int64_t b = 0; b < N; b++)
        for (int64_t g = 0; g < G; g++) {
            double m, is;
            int64_t off = (b * C + g * cg) * plane;
            mean_invstd(xd + off, cg * plane, eps, &m, &is);
            for (int64_t c = g * cg; c < (g + 1) * cg; c++) {
                int64_t p = per_channel ? c : g, o = (b * C + c) * plane;
                normalize_affine(xd + o, yd + o, plane, m, is, scale[p], bias[p]);
            }
        }
    return KILN_OK;
}

/* Broadcasts float32 t (unidirectionally) to x's shape, seen as rows of `inner` elements from
 * dim `axis` on: row r's values start at *p + r * *row_stride. Uses t's data when its layout
 * already fits, else fills *buf (the caller frees it). */
static kiln_status bcast_rows(const kiln_node *n, const kiln_tensor *t, int input, const kiln_tensor *x, int axis,
                              const float **p, int64_t *row_stride, float **buf) {
    KILN_TRY(nn_require_f32(n, t, input));
    *buf = NULL;
    if (t->ndim > x->ndim)
        return kiln_error(KILN_ERR_SHAPE, "%s: input %d has a higher rank than X", n->op_type, input);
    for (int i = 0; i < t->ndim; i++) {
        int64_t d = t->dims[i], xd = x->dims[x->ndim - t->ndim + i];
        if (d != 1 && d != xd)
            return kiln_error(KILN_ERR_SHAPE, "%s: input %d cannot be broadcast to X", n->op_type, input);
    }
    int64_t st[KILN_MAX_DIMS];
    kiln_broadcast_strides(t->ndim, t->dims, x->ndim, x->dims, st);
    bool outer_zero = true;
    for (int i = 0; i < axis; i++) outer_zero = outer_zero && st[i] == 0;
    int first = outer_zero ? axis : 0, nd = x->ndim - first;
    int64_t count = kiln_numel(nd, x->dims + first);
    *row_stride = outer_zero ? 0 : kiln_numel(x->ndim - axis, x->dims + axis);
    if (kiln_tensor_numel(t) == count) {
        *p = t->data;
        return KILN_OK;
    }
    float *b = malloc((size_t)(count + 1) * sizeof *b);
    if (!b) return kiln_error(KILN_ERR_OUT_OF_MEMORY, "%s: out of memory", n->op_type);
    const float *src = t->data;
    int64_t idx[KILN_MAX_DIMS] = {0};
    for (int64_t j = 0; j < count; j++) {
        int64_t off = 0;
        for (int i = 0; i < nd; i++) off += idx[i] * st[first + i];
        b[j] = src[off];
        for (int i = nd - 1; i >= 0; i--) {
            if (++idx[i] < x->dims[first + i]) break;
            idx[i] = 0;
        }
    }
    *buf = b;
    *p = b;
    return KILN_OK;
}

/* The rows of a LayerNormalization or RMSNormalization: x and y [outer, inner], scale and bias rows
 * (stride 0: one row for all), the stashed mean and 1/std outputs (NULL: not wanted). */
typedef struct rows_job {
    const float *x;
    float *y;
    int64_t inner;
    const float *scale;
    int64_t scale_stride;
    const float *bias; /* NULL: none */
    int64_t bias_stride;
    double eps;
    bool rms;
    kiln_tensor *mean, *invstd;
} rows_job;

/* Rows [r0, r1) of j (a part of the thread pool's split). */
static void norm_rows(void *ctx, int64_t r0, int64_t r1) {
    const rows_job *j = ctx;
    const int64_t inner = j->inner;
    for (int64_t r = r0; r < r1; r++) {
        const float *xr = j->x + r * inner, *s = j->scale + r * j->scale_stride;
        const float *b = j->bias ? j->bias + r * j->bias_stride : NULL;
        double m = 0.0, is;
        if (j->rms) is = 1.0 / sqrt((inner ? row_sum(xr, inner, true, 0.0) / (double)inner : 0.0) + j->eps);
        else mean_invstd(xr, inner, j->eps, &m, &is);
        row_norm_affine(j->y + r * inner, xr, inner, (float)m, (float)is, s, b);
        if (j->mean) kiln_tensor_set_f64(j->mean, r, m);
        if (j->invstd) kiln_tensor_set_f64(j->invstd, r, is);
    }
}

/* LayerNormalization (rms = false) or RMSNormalization (rms = true) over dims [axis, rank). */
static kiln_status layer_or_rms(const kiln_node *n, kiln_tensor *const *in, int nin, kiln_tensor *const *out, int nout,
                                bool rms) {
    KILN_TRY(nn_require_inputs(n, in, nin, 2));
    const kiln_tensor *x = in[0], *bt = !rms && nin > 2 ? in[2] : NULL;
    KILN_TRY(nn_require_f32(n, x, 0));
    if (x->ndim < 1) return kiln_error(KILN_ERR_SHAPE, "%s input must have rank >= 1", n->op_type);
    int axis;
    KILN_TRY(kiln_axis_normalize(kiln_attr_int(n, "axis", -1), x->ndim, &axis));
    double eps = kiln_attr_float(n, "epsilon", 1e-5f);
    kiln_dtype stash = (kiln_dtype)kiln_attr_int(n, "stash_type", KILN_F32);
    if (stash != KILN_F32 && stash != KILN_F64 && stash != KILN_F16 && stash != KILN_BF16)
        return kiln_error(KILN_ERR_INVALID_ARGUMENT, "%s stash_type %d is not a float type", n->op_type, (int)stash);
    int64_t outer = kiln_numel(axis, x->dims), inner = kiln_numel(x->ndim - axis, x->dims + axis);
    const float *sp, *bp = NULL;
    float *sbuf = NULL, *bbuf = NULL;
    int64_t sstr, bstr = 0;
    KILN_TRY(bcast_rows(n, in[1], 1, x, axis, &sp, &sstr, &sbuf));
    kiln_status st = bt ? bcast_rows(n, bt, 2, x, axis, &bp, &bstr, &bbuf) : KILN_OK;
    if (st == KILN_OK) st = kiln_tensor_alloc(out[0], KILN_F32, x->ndim, x->dims);
    int64_t sdims[KILN_MAX_DIMS];
    for (int i = 0; i < x->ndim; i++) sdims[i] = i < axis ? x->dims[i] : 1;
    kiln_tensor *mean_t = !rms && nout > 1 ? out[1] : NULL, *inv_t = !rms && nout > 2 ? out[2] : NULL;
    if (st == KILN_OK && mean_t) st = kiln_tensor_alloc(mean_t, stash, x->ndim, sdims);
    if (st == KILN_OK && inv_t) st = kiln_tensor_alloc(inv_t, stash, x->ndim, sdims);
    if (st != KILN_OK) {
        free(sbuf);
        free(bbuf);
        return st;
    }
    rows_job j = {x->data, out[0]->data, inner, sp, sstr, bp, bstr, eps, rms, mean_t, inv_t};
    kiln_parallel_for(outer, inner >= ROWS_PARALLEL_ELEMS ? 1 : ROWS_PARALLEL_ELEMS / (inner ? inner : 1), norm_rows, &j);
    free(sbuf);
    free(bbuf);
    return KILN_OK;
}

static NN_EXEC(layernorm) { return layer_or_rms(n, in, nin, out, nout, false); }
static NN_EXEC(rmsnorm) { return layer_or_rms(n, in, nin, out, nout, true); }

NN_FLOAT_EXEC(kiln_cpu_batchnorm, batchnorm, 1u)
NN_FLOAT_EXEC(kiln_cpu_instancenorm, instancenorm, 1u)
NN_FLOAT_EXEC(kiln_cpu_groupnorm, groupnorm, 1u)
NN_FLOAT_EXEC(kiln_cpu_layernorm, layernorm, 1u)
NN_FLOAT_EXEC(kiln_cpu_rmsnorm, rmsnorm, 1u)
