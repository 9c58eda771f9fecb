/* quant_conv.c — CPU integer convolutions, any number of spatial dims, groups, strides, dilations,
 * pads and auto_pad (the window geometry of ir/nn_window.h, as Conv):
 *   ConvInteger   int32 Y = conv(X - x_zero_point, W - w_zero_point[m]);
 *   QLinearConv   8-bit Y = saturate(round((conv + B[m]) * x_scale * w_scale[m] / y_scale) + y_zero_point),
 *                 B int32 (optional);
 *   kiln.QConv    ir/quant_ops.h (the folded DequantizeLinear -> Conv -> QuantizeLinear).
 * Per image: the input becomes channels-last int16 differences from x_zero_point; per group it is
 * unfolded (im2col) into rows [P, k * C/group] (tap-major, padding contributing 0), the weights are
 * packed once as int16 rows [M, k * C/group] minus their zero points, quant_igemm forms the exact
 * int32 sums [M/group, P], and the epilogue writes each output channel. */
#include "backends/cpu/quant_kernels.h"

#include "core/status.h"
#include "ir/nn_window.h"
#include "ir/quant_ops.h"

#include <stdlib.h>
#include <string.h>

/* Geometry of one convolution. */
typedef struct qconv_geom {
    int nsp;
    int64_t N, C, M, group, Cg, Mg;
    int64_t in[KILN_MAX_DIMS], out[KILN_MAX_DIMS], k[KILN_MAX_DIMS], s[KILN_MAX_DIMS], d[KILN_MAX_DIMS],
        pb[KILN_MAX_DIMS];
    int64_t in_size, P, ksize, Kc; /* input plane, output positions, kernel taps, row length Cg * ksize */
    int ndim;
    int64_t odims[KILN_MAX_DIMS];
} qconv_geom;

static kiln_status qconv_geom_make(const kiln_node *n, const kiln_tensor *x, const kiln_tensor *w, qconv_geom *g) {
    memset(g, 0, sizeof *g);
    if (x->ndim < 3 || w->ndim != x->ndim)
        return kiln_error(KILN_ERR_SHAPE, "%s needs x of rank >= 3 and w of the same rank (got %d and %d)", n->op_type,
                          x->ndim, w->ndim);
    g->nsp = x->ndim - 2;
    g->N = x->dims[0];
    g->C = x->dims[1];
    g->M = w->dims[0];
    g->group = kiln_attr_int(n, "group", 1);
    if (g->group < 1 || g->M % g->group || w->dims[1] * g->group != g->C)
        return kiln_error(KILN_ERR_SHAPE, "%s: %lld input channels, weights [%lld, %lld, ...] and group %lld do not agree",
                          n->op_type, (long long)g->C, (long long)g->M, (long long)w->dims[1], (long long)g->group);
    g->Cg = w->dims[1];
    g->Mg = g->M / g->group;
    kiln_window win;
    KILN_TRY(kiln_window_parse(n, g->nsp, w->dims + 2, &win));
    g->in_size = g->P = g->ksize = 1;
    g->odims[0] = g->N;
    g->odims[1] = g->M;
    for (int i = 0; i < g->nsp; i++) {
        int64_t pe;
        g->in[i] = x->dims[2 + i];
        g->k[i] = w->dims[2 + i];
        g->s[i] = win.stride[i];
        g->d[i] = win.dilation[i];
        KILN_TRY(kiln_window_out(&win, i, g->in[i], &g->out[i], &g->pb[i], &pe));
        g->odims[2 + i] = g->out[i];
        g->in_size *= g->in[i];
        g->P *= g->out[i];
        g->ksize *= g->k[i];
    }
    g->ndim = x->ndim;
    g->Kc = g->Cg * g->ksize;
    if (g->Kc > (INT64_C(1) << 15))
        return kiln_error(KILN_ERR_UNSUPPORTED, "%s: %lld products per output could overflow the int32 sum (at most 32768)",
                          n->op_type, (long long)g->Kc);
    return KILN_OK;
}

/* Row-major multi-index over dims[0..m) of flat index f. */
static void decode(int m, const int64_t *dims, int64_t f, int64_t *idx) {
    for (int i = m - 1; i >= 0; i--) {
        idx[i] = f % dims[i];
        f /= dims[i];
    }
}

/* x_hwc[pos * C + c] = x[c * in_size + pos] - zx for one image x [C, in...]: channels-last int16, so
 * that each tap of the unfolding below is one contiguous run of channels. */
static void image_to_hwc(const qconv_geom *g, const void *x, kiln_dtype xt, int32_t zx, int16_t *x_hwc) {
    for (int64_t c = 0; c < g->C; c++) {
        int16_t *dst = x_hwc + c;
        if (xt == KILN_I8) {
            const int8_t *src = (const int8_t *)x + c * g->in_size;
            for (int64_t pos = 0; pos < g->in_size; pos++) dst[pos * g->C] = (int16_t)(src[pos] - zx);
        } else {
            const uint8_t *src = (const uint8_t *)x + c * g->in_size;
            for (int64_t pos = 0; pos < g->in_size; pos++) dst[pos * g->C] = (int16_t)(src[pos] - zx);
        }
    }
}

/* col[p * Kc + kk * Cg + c] = x_hwc at tap kk of output position p, channel c0 + c, or 0 in the
 * padding (x's zero point, once subtracted). */
static void im2col(const qconv_geom *g, const int16_t *x_hwc, int64_t c0, int16_t *col) {
    int nsp = g->nsp;
    int64_t oidx[KILN_MAX_DIMS], kidx[KILN_MAX_DIMS], istr[KILN_MAX_DIMS];
    kiln_strides(nsp, g->in, istr);
    size_t run = (size_t)g->Cg * sizeof *col;
    for (int64_t p = 0; p < g->P; p++) {
        decode(nsp, g->out, p, oidx);
        int16_t *row = col + p * g->Kc;
        for (int i = 0; i < nsp; i++) kidx[i] = 0;
        for (int64_t kk = 0; kk < g->ksize; kk++) {
            int64_t off = 0;
            bool inside = true;
            for (int i = 0; i < nsp && inside; i++) {
                int64_t pos = oidx[i] * g->s[i] - g->pb[i] + kidx[i] * g->d[i];
                inside = pos >= 0 && pos < g->in[i];
                off += pos * istr[i];
            }
            if (inside) memcpy(row + kk * g->Cg, x_hwc + off * g->C + c0, run);
            else memset(row + kk * g->Cg, 0, run);
            for (int i = nsp - 1; i >= 0 && ++kidx[i] == g->k[i]; i--) kidx[i] = 0;
        }
    }
}

/* The operands of one integer convolution. */
typedef struct qconv_args {
    const kiln_tensor *x, *w;
    int32_t zx;
    quant_zp zw;              /* per output channel */
    const quant_epilogue *ep; /* NULL: int32 output */
    const kiln_tensor *r;     /* kiln.QConv's residual (ep->residual's tensor) or NULL */
} qconv_args;

/* Computes y (allocated here: int32, or the epilogue's dtype) = the convolution of q. */
static kiln_status qconv_run(const kiln_node *n, const qconv_args *q, kiln_tensor *y) {
    qconv_geom g;
    KILN_TRY(qconv_geom_make(n, q->x, q->w, &g));
    if (q->zw.n > 1 && q->zw.n != g.M)
        return kiln_error(KILN_ERR_SHAPE, "%s: %lld weight zero points for %lld output channels", n->op_type,
                          (long long)q->zw.n, (long long)g.M);
    if (q->r && kiln_tensor_numel(q->r) != g.N * g.M * g.P)
        return kiln_error(KILN_ERR_SHAPE, "%s: the residual R has %lld elements, the output %lld", n->op_type,
                          (long long)kiln_tensor_numel(q->r), (long long)(g.N * g.M * g.P));
    KILN_TRY(kiln_tensor_alloc_uninit(y, q->ep ? q->ep->y_dtype : KILN_I32, g.ndim, g.odims));
    if (g.N * g.M * g.P == 0) return KILN_OK;
    int16_t *wp = malloc((size_t)(g.M * g.Kc + 1) * sizeof *wp), *col = malloc((size_t)(g.P * g.Kc + 1) * sizeof *col);
    int16_t *x_hwc = malloc((size_t)(g.C * g.in_size + 1) * sizeof *x_hwc);
    int32_t *acc = malloc((size_t)(g.Mg * g.P) * sizeof *acc);
    float *scratch = malloc((size_t)g.P * sizeof *scratch);
    if (!wp || !col || !x_hwc || !acc || !scratch) {
        free(wp), free(col), free(x_hwc), free(acc), free(scratch);
        return kiln_error(KILN_ERR_OUT_OF_MEMORY, "%s: out of memory for the unfolded input", n->op_type);
    }
    /* weights as rows [m][kk * Cg + c], the order of the unfolded input */
    for (int64_t m = 0; m < g.M; m++) {
        int32_t z = quant_zp_at(&q->zw, m);
        for (int64_t c = 0; c < g.Cg; c++)
            for (int64_t kk = 0; kk < g.ksize; kk++)
                wp[m * g.Kc + kk * g.Cg + c] =
                    (int16_t)(quant_load(q->w->data, q->w->dtype, (m * g.Cg + c) * g.ksize + kk) - z);
    }
    size_t xes = kiln_dtype_size(q->x->dtype);
    for (int64_t b = 0; b < g.N; b++) {
        image_to_hwc(&g, (const char *)q->x->data + (size_t)(b * g.C * g.in_size) * xes, q->x->dtype, q->zx, x_hwc);
        for (int64_t gi = 0; gi < g.group; gi++) {
            im2col(&g, x_hwc, gi * g.Cg, col);
            quant_igemm(g.Mg, g.P, g.Kc, wp + gi * g.Mg * g.Kc, col, acc, g.P);
            for (int64_t m = 0; m < g.Mg; m++) {
                int64_t ch = gi * g.Mg + m, at = (b * g.M + ch) * g.P;
                if (q->ep) quant_epilogue_run(q->ep, ch, acc + m * g.P, g.P, 1, y->data, at, scratch);
                else memcpy((int32_t *)y->data + at, acc + m * g.P, (size_t)g.P * sizeof *acc);
            }
        }
    }
    free(wp), free(col), free(x_hwc), free(acc), free(scratch);
    return KILN_OK;
}

static bool is_8bit(kiln_dtype t) { return t == KILN_U8 || t == KILN_I8; }

static kiln_status require_8bit_operands(const kiln_node *n, const kiln_tensor *x, const kiln_tensor *w) {
    if (!is_8bit(x->dtype) || !is_8bit(w->dtype))
        return kiln_error(KILN_ERR_UNSUPPORTED, "%s of %s and %s is not supported (int8 and uint8 are)", n->op_type,
                          kiln_dtype_name(x->dtype), kiln_dtype_name(w->dtype));
    return KILN_OK;
}

/* Runs q with the weight zero points of tensor zw (NULL: zero). */
static kiln_status run_with_zw_tensor(const kiln_node *n, qconv_args *q, const kiln_tensor *zw, kiln_tensor *y) {
    kiln_status s = quant_zp_from_tensor(zw, &q->zw);
    if (s == KILN_OK) s = qconv_run(n, q, y);
    quant_zp_free(&q->zw);
    return s;
}

/* ConvInteger: x, w, x_zero_point (optional, scalar), w_zero_point (optional, scalar or per channel). */
NN_EXEC(kiln_cpu_conv_integer) {
    (void)nout;
    KILN_TRY(nn_require_inputs(n, in, nin, 2));
    const kiln_tensor *x = in[0], *w = in[1], *zx = nin > 2 ? in[2] : NULL, *zw = nin > 3 ? in[3] : NULL;
    KILN_TRY(require_8bit_operands(n, x, w));
    KILN_TRY(quant_param_check(n, zx, "x_zero_point", x->dtype, 1));
    KILN_TRY(quant_param_check(n, zw, "w_zero_point", w->dtype, w->dims[0]));
    qconv_args q = {.x = x, .w = w, .zx = zx ? quant_load(zx->data, x->dtype, 0) : 0};
    return run_with_zw_tensor(n, &q, zw, out[0]);
}

/* QLinearConv: x, x_scale, x_zero_point, w, w_scale, w_zero_point, y_scale, y_zero_point, B (optional). */
NN_EXEC(kiln_cpu_qlinear_conv) {
    (void)nout;
    KILN_TRY(nn_require_inputs(n, in, nin, 7));
    const kiln_tensor *x = in[0], *xs = in[1], *zx = in[2], *w = in[3], *ws = in[4], *zw = in[5], *ys = in[6],
                      *zy = nin > 7 ? in[7] : NULL, *bias = nin > 8 ? in[8] : NULL;
    KILN_TRY(require_8bit_operands(n, x, w));
    if (w->ndim < 1) return kiln_error(KILN_ERR_SHAPE, "QLinearConv weights must have rank >= 3");
    int64_t M = w->dims[0];
    KILN_TRY(quant_param_check(n, xs, "x_scale", KILN_F32, 1));
    KILN_TRY(quant_param_check(n, zx, "x_zero_point", x->dtype, 1));
    KILN_TRY(quant_param_check(n, ws, "w_scale", KILN_F32, M));
    KILN_TRY(quant_param_check(n, zw, "w_zero_point", w->dtype, M));
    KILN_TRY(quant_param_check(n, ys, "y_scale", KILN_F32, 1));
    kiln_dtype yt = zy ? zy->dtype : x->dtype;
    if (!is_8bit(yt)) return kiln_error(KILN_ERR_UNSUPPORTED, "QLinearConv to %s is not supported", kiln_dtype_name(yt));
    KILN_TRY(quant_param_check(n, zy, "y_zero_point", yt, 1));
    if (bias && (bias->dtype != KILN_I32 || bias->ndim != 1 || bias->dims[0] != M))
        return kiln_error(KILN_ERR_SHAPE, "QLinearConv: B must be int32 [%lld]", (long long)M);
    quant_epilogue ep = {.qlinear = true,
                         .x_scale = *(const float *)xs->data,
                         .w_scale = ws->data,
                         .nw = kiln_tensor_numel(ws),
                         .ibias = bias ? bias->data : NULL,
                         .y_dtype = yt,
                         .y_scale = *(const float *)ys->data,
                         .y_zero_point = zy ? quant_load(zy->data, yt, 0) : 0};
    qconv_args q = {.x = x, .w = w, .zx = zx ? quant_load(zx->data, x->dtype, 0) : 0, .ep = &ep};
    return run_with_zw_tensor(n, &q, zw, out[0]);
}

/* kiln.QConv channels-first: X, W, B (optional float32 [M]), R (optional residual, 8-bit or float32,
 * Y's shape) into y. */
static kiln_status qconv_layer(const kiln_node *n, const kiln_quant_layer *ql, const kiln_tensor *x,
                               const kiln_tensor *w, const kiln_tensor *bias, const kiln_tensor *r, kiln_tensor *y) {
    KILN_TRY(require_8bit_operands(n, x, w));
    int64_t M = w->ndim > 0 ? w->dims[0] : 0;
    KILN_TRY(quant_layer_zero_points_check(n, ql->x_zero_point, x->dtype, ql->w_zero_point, ql->nwzp, w->dtype));
    if (ql->nw != 1 && ql->nw != M)
        return kiln_error(KILN_ERR_SHAPE, "QConv: %d weight scales for %lld output channels", ql->nw, (long long)M);
    if (bias && (bias->dtype != KILN_F32 || kiln_tensor_numel(bias) != M))
        return kiln_error(KILN_ERR_SHAPE, "QConv: the bias must be float32 with %lld elements", (long long)M);
    bool r_float = r && r->dtype == KILN_F32;
    if (r && ((!r_float && r->dtype != KILN_I8 && r->dtype != KILN_U8) || (!r_float) != (ql->r_scale > 0.0f)))
        return kiln_error(KILN_ERR_INVALID_ARGUMENT, "QConv: the residual R must be int8 or uint8 with r_scale, or float32 "
                          "without (is %s)", kiln_dtype_name(r->dtype));
    quant_epilogue ep = {.x_scale = ql->x_scale, .w_scale = ql->w_scale, .nw = ql->nw, .bias = bias ? bias->data : NULL,
                         .act = ql->act, .y_dtype = ql->y_dtype, .y_scale = ql->y_scale, .y_zero_point = ql->y_zero_point,
                         .residual = r ? r->data : NULL, .r_dtype = r ? r->dtype : KILN_UNDEFINED,
                         .r_scale = ql->r_scale, .r_zero_point = ql->r_zero_point};
    qconv_args q = {.x = x, .w = w, .zx = ql->x_zero_point, .ep = &ep, .r = r};
    kiln_status s = quant_zp_from_ints(ql->w_zero_point, ql->nwzp, &q.zw);
    if (s == KILN_OK) s = qconv_run(n, &q, y);
    quant_zp_free(&q.zw);
    return s;
}

/* dst = src (4-D) with its axes permuted: dst dim i is src dim perm[i]; any element size. */
static kiln_status permute4(const kiln_tensor *src, const int *perm, kiln_tensor *dst) {
    int64_t dims[4], sstr[4], st[4];
    kiln_strides(4, src->dims, sstr);
    for (int i = 0; i < 4; i++) {
        dims[i] = src->dims[perm[i]];
        st[i] = sstr[perm[i]];
    }
    KILN_TRY(kiln_tensor_alloc(dst, src->dtype, 4, dims));
    size_t es = kiln_dtype_size(src->dtype);
    const char *s = src->data;
    char *d = dst->data;
    for (int64_t a = 0; a < dims[0]; a++)
        for (int64_t b = 0; b < dims[1]; b++)
            for (int64_t c = 0; c < dims[2]; c++)
                for (int64_t e = 0; e < dims[3]; e++, d += es)
                    memcpy(d, s + (size_t)(a * st[0] + b * st[1] + c * st[2] + e * st[3]) * es, es);
    return KILN_OK;
}

static const int g_to_first[4] = {0, 3, 1, 2}; /* [N, H, W, C] -> [N, C, H, W]; [M, kH, kW, C] -> [M, C, kH, kW] */
static const int g_to_last[4] = {0, 2, 3, 1};  /* [N, M, H', W'] -> [N, H', W', M] */

/* kiln.QConv: X, W, B (optional float32 [M]), R (optional residual, 8-bit or float32, Y's shape); parameters in
 * attributes. With channels_last = 1 (2-D: X [N, H, W, C], W [M, kH, kW, C], R and Y [N, H', W', M])
 * X, W and R are transposed to channels-first temporaries and the result back: correct rather than
 * fast, the oracle of the GPU's channels-last kernel. */
NN_EXEC(kiln_cpu_kiln_qconv) {
    (void)nout;
    KILN_TRY(nn_require_inputs(n, in, nin, 2));
    const kiln_tensor *x = in[0], *w = in[1], *bias = nin > 2 ? in[2] : NULL, *r = nin > 3 ? in[3] : NULL;
    kiln_quant_layer ql;
    KILN_TRY(kiln_quant_layer_read(n, &ql));
    int64_t cl = kiln_attr_int(n, "channels_last", 0);
    if (cl != 0 && cl != 1)
        return kiln_error(KILN_ERR_INVALID_ARGUMENT, "QConv: channels_last must be 0 or 1, is %lld", (long long)cl);
    if (!cl) return qconv_layer(n, &ql, x, w, bias, r, out[0]);
    if (x->ndim != 4 || w->ndim != 4 || (r && r->ndim != 4))
        return kiln_error(KILN_ERR_SHAPE, "QConv: channels_last needs 4-D X, W and R, has ranks %d, %d and %d", x->ndim,
                          w->ndim, r ? r->ndim : 4);
    kiln_tensor xt = {0}, wt = {0}, rt = {0}, yt = {0};
    kiln_status st = permute4(x, g_to_first, &xt);
    if (st == KILN_OK) st = permute4(w, g_to_first, &wt);
    if (st == KILN_OK && r) st = permute4(r, g_to_first, &rt);
    if (st == KILN_OK) st = qconv_layer(n, &ql, &xt, &wt, bias, r ? &rt : NULL, &yt);
    if (st == KILN_OK) st = permute4(&yt, g_to_last, out[0]);
    kiln_tensor_release(&xt), kiln_tensor_release(&wt), kiln_tensor_release(&rt), kiln_tensor_release(&yt);
    return st;
}
