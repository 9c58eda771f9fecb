/* conv.c — CPU Conv and ConvTranspose in float32 (float16/bfloat16 through float32), any number of
 * spatial dims, groups, strides, dilations and pads. The general path is im2col (resp. col2im)
 * around OpenBLAS sgemm, done in chunks of output (resp. input) lines so the column buffer stays
 * bounded; 1x1 stride-1 unpadded Conv multiplies the input in place, and depthwise 1-D/2-D Conv
 * runs a direct loop; 2-D Conv goes to the threaded kernels of conv2d.c. A "line" is one position over all spatial dims but the last. */
#include "backends/cpu/nn_kernels.h"

#include "backends/cpu/conv2d.h"
#include "backends/cpu/packed_gemm.h"
#include "backends/cpu/packed_weights.h"
#include "core/ckd.h"
#include "core/status.h"
#include "ir/nn_window.h"

#include <cblas.h>
#include <stdlib.h>
#include <string.h>

/* Column-buffer budget per chunk, in floats (8 MiB). */
#define CONV_COL_BUDGET (INT64_C(1) << 21)

typedef struct conv_geom {
    int nsp;
    int64_t in[KILN_MAX_DIMS], out[KILN_MAX_DIMS];
    int64_t k[KILN_MAX_DIMS], s[KILN_MAX_DIMS], d[KILN_MAX_DIMS], pb[KILN_MAX_DIMS];
    int64_t in_size, out_size, k_size;
} conv_geom;

static int64_t ceil_div(int64_t a, int64_t b) { return a >= 0 ? (a + b - 1) / b : -((-a) / b); }

/* For positions p = j * s + off, j in [0, count): the j range [*lo, *hi) with 0 <= p < limit. */
static void valid_range(int64_t off, int64_t s, int64_t limit, int64_t count, int64_t *lo, int64_t *hi) {
    int64_t l = off >= 0 ? 0 : ceil_div(-off, s);
    int64_t h = ceil_div(limit - off, s);
    if (h > count) h = count;
    if (l > h) l = h;
    *lo = l;
    *hi = h;
}

/* Row-major multi-index idx over dims[0..m) of flat index f. */
static void decode(int m, const int64_t *dims, int64_t f, int64_t *idx) {
    for (int i = m - 1; i >= 0; i--) {
        idx[i] = dims[i] ? f % dims[i] : 0;
        f = dims[i] ? f / dims[i] : 0;
    }
}

/* Advances a row-major multi-index over dims[0..m). */
static void advance(int m, const int64_t *dims, int64_t *idx) {
    for (int i = m - 1; i >= 0; i--) {
        if (++idx[i] < dims[i]) return;
        idx[i] = 0;
    }
}

/* Lines per chunk so that rows x (lines x line_len) floats fit the budget (at least one line). */
static int64_t chunk_lines(int64_t rows, int64_t line_len) {
    int64_t per = rows * line_len;
    int64_t l = per > 0 ? CONV_COL_BUDGET / per : 1;
    return l < 1 ? 1 : l;
}

/* col[(c * k_size + kk) * width + j] for the output positions of lines [l0, l1) (width = (l1 - l0)
 * * out[last]): the input element under kernel tap kk of that position, or 0 in the padding.
 * x is [channels, in...]. */
static void im2col(const conv_geom *g, const float *x, int64_t channels, int64_t l0, int64_t l1, float *col) {
    int nsp = g->nsp, last = nsp - 1;
    int64_t L = g->out[last], width = (l1 - l0) * L;
    int64_t istr[KILN_MAX_DIMS], kidx[KILN_MAX_DIMS], oidx[KILN_MAX_DIMS];
    kiln_strides(nsp, g->in, istr);
    for (int64_t kk = 0; kk < g->k_size; kk++) {
        decode(nsp, g->k, kk, kidx);
        int64_t off_last = kidx[last] * g->d[last] - g->pb[last], lo, hi;
        valid_range(off_last, g->s[last], g->in[last], L, &lo, &hi);
        for (int64_t c = 0; c < channels; c++) {
            const float *xc = x + c * g->in_size;
            float *row = col + (c * g->k_size + kk) * width;
            decode(last, g->out, l0, oidx);
            for (int64_t l = l0; l < l1; l++, row += L) {
                int64_t base = 0;
                bool inside = true;
                for (int i = 0; i < last && inside; i++) {
                    int64_t p = oidx[i] * g->s[i] - g->pb[i] + kidx[i] * g->d[i];
                    inside = p >= 0 && p < g->in[i];
                    base += p * istr[i];
                }
                advance(last, g->out, oidx);
                if (!inside || lo >= hi) {
                    memset(row, 0, (size_t)L * sizeof *row);
                    continue;
                }
                if (lo > 0) memset(row, 0, (size_t)lo * sizeof *row);
                int64_t s = g->s[last], first = base + off_last + lo * s; /* input index of tap at j = lo */
                if (s == 1) memcpy(row + lo, xc + first, (size_t)(hi - lo) * sizeof *row);
                else
                    for (int64_t j = lo; j < hi; j++) row[j] = xc[first + (j - lo) * s];
                if (hi < L) memset(row + hi, 0, (size_t)(L - hi) * sizeof *row);
            }
        }
    }
}

/* y[j] += w * x[j] for j in [0, n); written in blocks of 8 so that GCC's -O2 vectorizer takes it. */
static void axpy(float *restrict y, const float *restrict x, float w, int64_t n) {
    int64_t j = 0;
    for (; j + 8 <= n; j += 8)
        for (int k = 0; k < 8; k++) y[j + k] += w * x[j + k];
    for (; j < n; j++) y[j] += w * x[j];
}

/* Depthwise Conv (one input channel per group) on 1-D/2-D data, directly, row by row:
 * y[m] (zeroed) += w[m] (*) x[m / mult]. kw_lo/kw_hi: scratch of KW entries each. */
static void conv_depthwise(const conv_geom *g, const float *x, const float *w, float *y, int64_t channels,
                           int64_t mult, int64_t *kw_lo, int64_t *kw_hi) {
    bool two = g->nsp == 2;
    int64_t H = two ? g->in[0] : 1, W = g->in[g->nsp - 1];
    int64_t OH = two ? g->out[0] : 1, OW = g->out[g->nsp - 1];
    int64_t KH = two ? g->k[0] : 1, KW = g->k[g->nsp - 1];
    int64_t sh = two ? g->s[0] : 1, sw = g->s[g->nsp - 1], dh = two ? g->d[0] : 1, dw = g->d[g->nsp - 1];
    int64_t ph = two ? g->pb[0] : 0, pw = g->pb[g->nsp - 1];
    for (int64_t kw = 0; kw < KW; kw++) /* the ow range where tap kw is inside the row */
        valid_range(kw * dw - pw, sw, W, OW, &kw_lo[kw], &kw_hi[kw]);
    for (int64_t m = 0; m < channels * mult; m++) {
        const float *xc = x + (m / mult) * H * W, *wm = w + m * KH * KW;
        float *ym = y + m * OH * OW;
        for (int64_t oh = 0; oh < OH; oh++) {
            int64_t ih0 = oh * sh - ph, kh_lo, kh_hi;
            valid_range(ih0, dh, H, KH, &kh_lo, &kh_hi);
            float *yr = ym + oh * OW;
            for (int64_t kh = kh_lo; kh < kh_hi; kh++) {
                const float *xr = xc + (ih0 + kh * dh) * W;
                for (int64_t kw = 0; kw < KW; kw++) {
                    int64_t lo = kw_lo[kw], cnt = kw_hi[kw] - lo, first = lo * sw + kw * dw - pw;
                    float wv = wm[kh * KW + kw];
                    if (cnt <= 0) continue;
                    if (sw == 1) axpy(yr + lo, xr + first, wv, cnt);
                    else
                        for (int64_t j = 0; j < cnt; j++) yr[lo + j] += wv * xr[first + j * sw];
                }
            }
        }
    }
}

/* Adds bias[m] to every element of channel m of y ([batch, channels, plane]). */
static void add_bias(float *y, const float *bias, int64_t batch, int64_t channels, int64_t plane) {
    for (int64_t b = 0; b < batch; b++)
        for (int64_t m = 0; m < channels; m++) {
            float v = bias[m], *p = y + (b * channels + m) * plane;
            for (int64_t i = 0; i < plane; i++) p[i] += v;
        }
}

/* The error for sizes beyond what the im2col/col2im path indexes (or beyond 64 bits). */
static kiln_status too_large(const kiln_node *n) {
    return kiln_error(KILN_ERR_UNSUPPORTED, "%s: a spatial plane or kernel matrix above 2^31 elements", n->op_type);
}

/* Checks X [N, C, ...], W and the optional bias, parses the window and fills the geometry that
 * Conv (transpose = false) or ConvTranspose computes; *out_channels and the output dims in odims. */
static kiln_status conv_setup(const kiln_node *n, kiln_tensor *const *in, int nin, bool transpose, conv_geom *g,
                              int64_t *group, int64_t *out_channels, int64_t *odims) {
    KILN_TRY(nn_require_inputs(n, in, nin, 2));
    const kiln_tensor *x = in[0], *w = in[1], *b = nin > 2 ? in[2] : NULL;
    for (int i = 0; i < nin && i < 3; i++)
        if (in[i]) KILN_TRY(nn_require_f32(n, in[i], i));
    if (x->ndim < 3 || w->ndim != x->ndim)
        return kiln_error(KILN_ERR_SHAPE, "%s needs X and W of the same rank >= 3 (got %d and %d)", n->op_type,
                          x->ndim, w->ndim);
    int nsp = x->ndim - 2;
    *group = kiln_attr_int(n, "group", 1);
    int64_t C = x->dims[1];
    if (*group < 1 || C % *group)
        return kiln_error(KILN_ERR_SHAPE, "%s: %lld input channels cannot be split in %lld groups", n->op_type,
                          (long long)C, (long long)*group);
    if (transpose) {
        if (w->dims[0] != C)
            return kiln_error(KILN_ERR_SHAPE, "ConvTranspose: weight dim 0 is %lld, input has %lld channels",
                              (long long)w->dims[0], (long long)C);
        if (!kiln_mul_i64_ok(w->dims[1], *group, out_channels)) return too_large(n);
    } else {
        int64_t wc;
        if (!kiln_mul_i64_ok(w->dims[1], *group, &wc) || wc != C || w->dims[0] % *group)
            return kiln_error(KILN_ERR_SHAPE, "Conv: weights [%lld, %lld, ...] do not fit %lld input channels in %lld groups",
                              (long long)w->dims[0], (long long)w->dims[1], (long long)C, (long long)*group);
        *out_channels = w->dims[0];
    }
    if (b && (b->ndim != 1 || b->dims[0] != *out_channels))
        return kiln_error(KILN_ERR_SHAPE, "%s: bias must be [%lld]", n->op_type, (long long)*out_channels);
    kiln_window win;
    KILN_TRY(kiln_window_parse(n, nsp, w->dims + 2, &win));
    memset(g, 0, sizeof *g);
    g->nsp = nsp;
    g->in_size = g->out_size = g->k_size = 1;
    for (int i = 0; i < nsp; i++) {
        int64_t pe;
        g->in[i] = x->dims[2 + i];
        g->k[i] = w->dims[2 + i];
        g->s[i] = win.stride[i];
        g->d[i] = win.dilation[i];
        if (transpose) KILN_TRY(kiln_window_out_transpose(&win, i, g->in[i], &g->out[i], &g->pb[i]));
        else KILN_TRY(kiln_window_out(&win, i, g->in[i], &g->out[i], &g->pb[i], &pe));
        if (!kiln_mul_i64_ok(g->in_size, g->in[i], &g->in_size) || !kiln_mul_i64_ok(g->out_size, g->out[i], &g->out_size) ||
            !kiln_mul_i64_ok(g->k_size, g->k[i], &g->k_size))
            return too_large(n);
    }
    int64_t in_rows, out_rows;
    if (g->in_size > INT32_MAX || g->out_size > INT32_MAX || !kiln_mul_i64_ok(C, g->k_size, &in_rows) ||
        !kiln_mul_i64_ok(*out_channels, g->k_size, &out_rows) || in_rows > INT32_MAX || out_rows > INT32_MAX)
        return too_large(n);
    odims[0] = x->dims[0];
    odims[1] = *out_channels;
    memcpy(odims + 2, g->out, (size_t)nsp * sizeof *odims);
    return KILN_OK;
}

/* Conv: X [N, C, in...] (*) W [M, C/group, k...] + B [M] -> Y [N, M, out...]; packed: W packed for
 * the 2-D kernels, or NULL. */
static kiln_status conv_run(const kiln_node *n, kiln_tensor *const *in, int nin, kiln_tensor *const *out,
                            const kiln_conv2d_weights *packed) {
    conv_geom g;
    int64_t group, M, odims[KILN_MAX_DIMS];
    KILN_TRY(conv_setup(n, in, nin, false, &g, &group, &M, odims));
    const kiln_tensor *x = in[0], *w = in[1], *b = nin > 2 ? in[2] : NULL;
    KILN_TRY(kiln_tensor_alloc(out[0], KILN_F32, x->ndim, odims));
    int64_t N = x->dims[0], C = x->dims[1], Cg = C / group, Mg = M / group, rows = Cg * g.k_size;
    const float *xd = x->data, *wd = w->data;
    float *yd = out[0]->data;
    if (N * M * g.out_size == 0) return KILN_OK;
    if (g.nsp == 2) { /* the fast 2-D kernels (conv2d.c) */
        kiln_conv2d c2 = {N, C, g.in[0], g.in[1], M, g.out[0], g.out[1], g.k[0], g.k[1], group,
                          g.s[0], g.s[1], g.d[0], g.d[1], g.pb[0], g.pb[1]};
        return kiln_conv2d_run(&c2, xd, wd, packed, b ? b->data : NULL, NULL, NULL, yd);
    }
    bool pointwise = true;
    for (int i = 0; i < g.nsp; i++)
        pointwise = pointwise && g.k[i] == 1 && g.s[i] == 1 && g.pb[i] == 0 && g.out[i] == g.in[i];
    int last = g.nsp - 1;
    int64_t L = g.out[last], nlines = g.out_size / L;
    float *col = NULL;
    int64_t *ranges = NULL;
    if (Cg == 1 && g.nsp <= 2 && !pointwise) {
        ranges = malloc((size_t)(2 * g.k[g.nsp - 1]) * sizeof *ranges);
        if (!ranges) return kiln_error(KILN_ERR_OUT_OF_MEMORY, "Conv: out of memory");
    } else if (!pointwise) {
        int64_t lines = chunk_lines(rows, L);
        if (lines > nlines) lines = nlines;
        col = malloc((size_t)(rows * lines * L) * sizeof *col);
        if (!col) return kiln_error(KILN_ERR_OUT_OF_MEMORY, "Conv: out of memory for a %lld x %lld column buffer",
                                    (long long)rows, (long long)(lines * L));
    }
    for (int64_t nn = 0; nn < N; nn++) {
        const float *xn = xd + nn * C * g.in_size;
        float *yn = yd + nn * M * g.out_size;
        if (ranges) {
            conv_depthwise(&g, xn, wd, yn, C, Mg, ranges, ranges + g.k[g.nsp - 1]);
            continue;
        }
        for (int64_t gr = 0; gr < group; gr++) {
            const float *xg = xn + gr * Cg * g.in_size, *wg = wd + gr * Mg * rows;
            float *yg = yn + gr * Mg * g.out_size;
            if (pointwise) {
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)Mg, (int)g.out_size, (int)Cg, 1.0f, wg,
                            (int)Cg, xg, (int)g.in_size, 0.0f, yg, (int)g.out_size);
                continue;
            }
            int64_t step = chunk_lines(rows, L);
            for (int64_t l0 = 0; l0 < nlines; l0 += step) {
                int64_t l1 = l0 + step < nlines ? l0 + step : nlines, width = (l1 - l0) * L;
                im2col(&g, xg, Cg, l0, l1, col);
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)Mg, (int)width, (int)rows, 1.0f, wg,
                            (int)rows, col, (int)width, 0.0f, yg + l0 * L, (int)g.out_size);
            }
        }
    }
    free(col);
    free(ranges);
    if (b) add_bias(yd, b->data, N, M, g.out_size);
    return KILN_OK;
}

static NN_EXEC(conv_f32) {
    (void)nout;
    return conv_run(n, in, nin, out, NULL);
}

/* Whether n's strides and dilations are all 1 (or absent). */
static bool unit_window(const kiln_node *n) {
    static const char *const names[2] = {"strides", "dilations"};
    for (int a = 0; a < 2; a++) {
        int count = 0;
        const int64_t *v = kiln_attr_ints(n, names[a], &count);
        for (int i = 0; v && i < count; i++)
            if (v[i] != 1) return false;
    }
    return true;
}

/* Whether the stored panels that tag describes fit Conv n's declared weights [M, Cg, KH, KW]
 * (static, positive; no depthwise shape), its group and, for Winograd transforms, its window. */
static bool stored_fit(const kiln_node *n, const kiln_value *w, const kiln_packed_tag *tag) {
    bool fits = w->ndim == 4;
    for (int i = 0; fits && i < 4; i++) fits = kiln_dim_is_static(w->dims[i]) && w->dims[i].value > 0;
    if (!fits) return false;
    int64_t M = w->dims[0].value, Cg = w->dims[1].value, KH = w->dims[2].value, KW = w->dims[3].value, L;
    int64_t group = kiln_attr_int(n, "group", 1);
    if (kiln_conv2d_depthwise_fits(M, Cg, KH, KW, group)) return false; /* the direct kernel reads plain weights */
    if (tag->kind == KILN_PACKED_WINOGRAD_ROWS || tag->kind == KILN_PACKED_WINOGRAD_TILES)
        return tag->groups == KILN_CONV2D_WINOGRAD_XI && group == 1 && KH == 3 && KW == 3 && unit_window(n) &&
               M == tag->P && Cg == tag->L;
    /* groups * P is bounded by the checked panel size */
    return group == tag->groups && M == tag->groups * tag->P && kiln_mul_i64_ok(Cg, KH, &L) &&
           kiln_mul_i64_ok(L, KW, &L) && L == tag->L;
}

/* The stored panels of n (packed_weights.h) into *state, checked against W's declared shape. */
static kiln_status prepare_stored(const kiln_graph *g, const kiln_node *n, void **state) {
    kiln_packed_tag tag;
    const float *panels;
    float *owned;
    KILN_TRY(kiln_cpu_stored_panels(g, n, KILN_PACKED_CONV_ROWS, &tag, &panels, &owned));
    if (!panels) return KILN_OK;
    const kiln_value *w = &g->values[n->inputs[1]];
    bool fits = stored_fit(n, w, &tag);
    kiln_conv2d_weights *pw = fits ? calloc(1, sizeof *pw) : NULL;
    if (!pw) {
        free(owned);
        return kiln_cpu_stored_refused(fits);
    }
    bool winograd = tag.kind == KILN_PACKED_WINOGRAD_ROWS || tag.kind == KILN_PACKED_WINOGRAD_TILES;
    int64_t width = kiln_packed_width(tag.kind), floats = (tag.P + width - 1) / width * width * tag.L;
    *pw = (kiln_conv2d_weights){w->dims[0].value, w->dims[1].value, w->dims[2].value, w->dims[3].value,
                                winograd ? 1 : tag.groups, floats, tag.kind == KILN_PACKED_CONV_COLUMNS, winograd,
                                tag.kind == KILN_PACKED_WINOGRAD_TILES, owned ? owned : (float *)panels, true,
                                owned == NULL};
    *state = pw;
    return KILN_OK;
}

kiln_status kiln_cpu_conv_prepare(const kiln_graph *g, const kiln_node *n, void **state) {
    *state = NULL;
    if (n->ninputs < 2 || n->inputs[1] < 0 || kiln_attr_int(n, "channels_last", 0) != 0) return KILN_OK;
    if (kiln_node_attr(n, KILN_PACKED_ATTR)) return prepare_stored(g, n, state);
    const kiln_tensor *w = g->values[n->inputs[1]].constant;
    if (!w || w->dtype != KILN_F32 || w->ndim != 4) return KILN_OK;
    kiln_conv2d_weights *pw;
    const kiln_value *yv = n->noutputs > 0 && n->outputs[0] >= 0 ? &g->values[n->outputs[0]] : NULL;
    int64_t positions = 0; /* the output's OH * OW where shape inference knows it */
    if (yv && yv->ndim == 4 && kiln_dim_is_static(yv->dims[2]) && kiln_dim_is_static(yv->dims[3]))
        positions = yv->dims[2].value * yv->dims[3].value;
    KILN_TRY(kiln_conv2d_weights_pack(w->data, w->dims[0], w->dims[1], w->dims[2], w->dims[3],
                                      kiln_attr_int(n, "group", 1), positions, unit_window(n), &pw));
    *state = pw;
    return KILN_OK;
}

bool kiln_cpu_conv_panels(const void *state, kiln_packed_tag *tag, const float **panels) {
    const kiln_conv2d_weights *pw = state;
    if (pw->stored) return false;
    if (pw->winograd) {
        int64_t kind = pw->winograd_by_tiles ? KILN_PACKED_WINOGRAD_TILES : KILN_PACKED_WINOGRAD_ROWS;
        *tag = (kiln_packed_tag){kind, kiln_pg_isa_current(), kiln_packed_width(kind), KILN_CONV2D_WINOGRAD_XI, pw->M,
                                 pw->Cg};
    } else {
        int64_t kind = pw->by_columns ? KILN_PACKED_CONV_COLUMNS : KILN_PACKED_CONV_ROWS;
        *tag = (kiln_packed_tag){kind, kiln_pg_isa_current(), kiln_packed_width(kind), pw->group, pw->M / pw->group,
                                 pw->Cg * pw->KH * pw->KW};
    }
    *panels = pw->data;
    return true;
}

kiln_tensor *const *kiln_cpu_conv_inputs(const void *state, kiln_tensor *const *in, int nin, kiln_tensor *view,
                                         kiln_tensor **args) {
    const kiln_conv2d_weights *pw = state;
    if (!pw->stored || nin < 2 || nin > KILN_CONV_MAX_INPUTS || !in[1]) return in;
    *view = *in[1];
    int64_t dims[4] = {pw->M, pw->Cg, pw->KH, pw->KW};
    view->ndim = 4;
    memcpy(view->dims, dims, sizeof dims);
    view->nbytes = (size_t)kiln_numel(4, dims) * sizeof(float); /* the panels hold at least as many floats */
    view->owned = false;
    for (int i = 0; i < nin; i++) args[i] = in[i];
    args[1] = view;
    return args;
}

kiln_status kiln_cpu_conv_prepared(const kiln_node *n, const void *state, kiln_tensor *const *in, int nin,
                                   kiln_tensor *const *out, int nout) {
    if (nn_has_half_input(in, nin)) return kiln_cpu_conv(n, in, nin, out, nout);
    kiln_tensor view, *args[KILN_CONV_MAX_INPUTS];
    return conv_run(n, kiln_cpu_conv_inputs(state, in, nin, &view, args), nin, out, state);
}

void kiln_cpu_conv_state_free(void *state) { kiln_conv2d_weights_free(state); }

/* Scatter-adds col[(m * k_size + kk) * width + j] (input positions of lines [l0, l1)) into
 * y [channels, out...] at the output position each tap kk of that input position reaches. */
static void col2im(const conv_geom *g, const float *col, int64_t channels, int64_t l0, int64_t l1, float *y) {
    int nsp = g->nsp, last = nsp - 1;
    int64_t L = g->in[last], width = (l1 - l0) * L;
    int64_t ostr[KILN_MAX_DIMS], kidx[KILN_MAX_DIMS], iidx[KILN_MAX_DIMS];
    kiln_strides(nsp, g->out, ostr);
    for (int64_t kk = 0; kk < g->k_size; kk++) {
        decode(nsp, g->k, kk, kidx);
        int64_t off_last = kidx[last] * g->d[last] - g->pb[last], lo, hi;
        valid_range(off_last, g->s[last], g->out[last], L, &lo, &hi);
        if (lo >= hi) continue;
        for (int64_t m = 0; m < channels; m++) {
            float *ym = y + m * g->out_size;
            const float *row = col + (m * g->k_size + kk) * width;
            decode(last, g->in, l0, iidx);
            for (int64_t l = l0; l < l1; l++, row += L) {
                int64_t base = 0;
                bool inside = true;
                for (int i = 0; i < last && inside; i++) {
                    int64_t p = iidx[i] * g->s[i] - g->pb[i] + kidx[i] * g->d[i];
                    inside = p >= 0 && p < g->out[i];
                    base += p * ostr[i];
                }
                advance(last, g->in, iidx);
                if (!inside) continue;
                int64_t s = g->s[last], first = base + off_last + lo * s;
                for (int64_t j = lo; j < hi; j++) ym[first + (j - lo) * s] += row[j];
            }
        }
    }
}

/* ConvTranspose: X [N, C, in...], W [C, M/group, k...], B [M] -> Y [N, M, out...]. */
static NN_EXEC(conv_transpose_f32) {
    conv_geom g;
    int64_t group, M, odims[KILN_MAX_DIMS];
    KILN_TRY(conv_setup(n, in, nin, true, &g, &group, &M, odims));
    const kiln_tensor *x = in[0], *w = in[1], *b = nin > 2 ? in[2] : NULL;
    KILN_TRY(kiln_tensor_alloc(out[0], KILN_F32, x->ndim, odims));
    int64_t N = x->dims[0], C = x->dims[1], Cg = C / group, Mg = M / group, rows = Mg * g.k_size;
    const float *xd = x->data, *wd = w->data;
    float *yd = out[0]->data;
    if (N * M * g.out_size == 0) return KILN_OK;
    if (g.in_size > 0 && rows > 0 && Cg > 0) {
        int last = g.nsp - 1;
        int64_t L = g.in[last], nlines = g.in_size / L, step = chunk_lines(rows, L);
        if (step > nlines) step = nlines;
        float *col = malloc((size_t)(rows * step * L) * sizeof *col);
        if (!col) return kiln_error(KILN_ERR_OUT_OF_MEMORY, "ConvTranspose: out of memory for a column buffer");
        for (int64_t nn = 0; nn < N; nn++)
            for (int64_t gr = 0; gr < group; gr++) {
                const float *xg = xd + (nn * C + gr * Cg) * g.in_size, *wg = wd + gr * Cg * rows;
                float *yg = yd + (nn * M + gr * Mg) * g.out_size;
                for (int64_t l0 = 0; l0 < nlines; l0 += step) {
                    int64_t l1 = l0 + step < nlines ? l0 + step : nlines, width = (l1 - l0) * L;
                    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (int)rows, (int)width, (int)Cg, 1.0f, wg,
                                (int)rows, xg + l0 * L, (int)g.in_size, 0.0f, col, (int)width);
                    col2im(&g, col, Mg, l0, l1, yg);
                }
            }
        free(col);
    }
    if (b) add_bias(yd, b->data, N, M, g.out_size);
    return KILN_OK;
}

NN_FLOAT_EXEC(kiln_cpu_conv, conv_f32, 1u)
NN_FLOAT_EXEC(kiln_cpu_conv_transpose, conv_transpose_f32, 1u)
