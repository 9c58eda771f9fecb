/* resize.c — CPU kernels for Resize (opsets 10..) and the deprecated Upsample (7, 9).
 *
 * Resampling is separable: each resized axis gets a plan (for every output position, the input
 * positions it reads and their weights), following the ONNX reference exactly — coordinate
 * transformation, the choice of neighbours, edge clamping, exclude_outside, antialias and
 * tf_crop_and_resize extrapolation. mode=nearest is a pure index gather, so it is type-generic;
 * linear and cubic run one axis at a time on float32 data (float16, bfloat16 and float64 inputs go
 * through a float32 copy), with weights computed in double precision. */
#include "backends/cpu/shape_util.h"

#include "core/half.h"
#include "ir/shape_calc.h"

#include <math.h>
#include <stdlib.h>

enum { M_NEAREST, M_LINEAR, M_CUBIC };
enum { C_HALF_PIXEL, C_HALF_PIXEL_SYM, C_PYTORCH_HALF_PIXEL, C_ALIGN_CORNERS, C_ASYMMETRIC, C_TF_CROP, C_TF_HALF_PIXEL_NN };
enum { N_PREFER_FLOOR, N_PREFER_CEIL, N_FLOOR, N_CEIL, N_SIMPLE };

typedef struct resize_params {
    int mode, coord, nearest;
    float cubic_a, extrapolation;
    bool exclude_outside, antialias;
    int rank;
    int64_t in[KILN_MAX_DIMS], out[KILN_MAX_DIMS];
    double scale[KILN_MAX_DIMS], roi0[KILN_MAX_DIMS], roi1[KILN_MAX_DIMS];
} resize_params;

static int pick(const char *s, const char *const *names, int count) {
    for (int i = 0; i < count; i++)
        if (!strcmp(s, names[i])) return i;
    return -1;
}

/* Reads attributes, scales/sizes/roi and computes the output shape into p. */
static kiln_status resize_setup(const kiln_node *n, kiln_tensor *const *in, int nin, resize_params *p) {
    const kiln_tensor *x = in[0];
    bool upsample = !strcmp(n->op_type, "Upsample"), v10 = upsample || n->opset < 11;
    static const char *const modes[] = {"nearest", "linear", "cubic"};
    static const char *const coords[] = {"half_pixel", "half_pixel_symmetric", "pytorch_half_pixel", "align_corners",
                                         "asymmetric", "tf_crop_and_resize", "tf_half_pixel_for_nn"};
    static const char *const nearest[] = {"round_prefer_floor", "round_prefer_ceil", "floor", "ceil"};
    const char *ms = kiln_attr_string(n, "mode", "nearest"), *cs = kiln_attr_string(n, "coordinate_transformation_mode", "half_pixel"),
               *ns = kiln_attr_string(n, "nearest_mode", "round_prefer_floor");
    p->mode = pick(ms, modes, v10 ? 2 : 3);
    p->coord = v10 ? C_ASYMMETRIC : pick(cs, coords, 7);
    p->nearest = v10 ? N_SIMPLE : pick(ns, nearest, 4);
    if (p->mode < 0) return kiln_error(KILN_ERR_INVALID_ARGUMENT, "%s: unknown mode '%s'", n->op_type, ms);
    if (p->coord < 0) return kiln_error(KILN_ERR_INVALID_ARGUMENT, "%s: unknown coordinate_transformation_mode '%s'", n->op_type, cs);
    if (p->nearest < 0) return kiln_error(KILN_ERR_INVALID_ARGUMENT, "%s: unknown nearest_mode '%s'", n->op_type, ns);
    p->cubic_a = kiln_attr_float(n, "cubic_coeff_a", -0.75f);
    p->extrapolation = kiln_attr_float(n, "extrapolation_value", 0.0f);
    p->exclude_outside = kiln_attr_int(n, "exclude_outside", 0) != 0;
    p->antialias = n->opset >= 18 && kiln_attr_int(n, "antialias", 0) != 0;
    if (p->antialias && p->mode == M_NEAREST)
        return kiln_error(KILN_ERR_INVALID_ARGUMENT, "Resize: antialias is not defined for mode 'nearest'");
    int r = p->rank = x->ndim, axes[KILN_MAX_DIMS], naxes = r;
    int nax;
    const int64_t *axattr = !upsample && n->opset >= 18 ? kiln_attr_ints(n, "axes", &nax) : NULL;
    if (axattr) {
        if (nax > r) return kiln_error(KILN_ERR_INVALID_ARGUMENT, "Resize: %d axes for rank %d", nax, r);
        KILN_TRY(kiln_axes_normalize("Resize", nax, axattr, r, axes));
        naxes = nax;
    } else {
        for (int i = 0; i < r; i++) axes[i] = i;
    }
    const kiln_tensor *scales = NULL, *sizes = NULL, *roi = NULL;
    int si = upsample ? (n->opset >= 9 ? 1 : -1) : v10 ? 1 : 2;
    if (si > 0 && nin > si && in[si] && kiln_tensor_numel(in[si]) > 0) scales = in[si];
    if (!v10 && nin > 3 && in[3] && kiln_tensor_numel(in[3]) > 0) sizes = in[3];
    if (!v10 && nin > 1 && in[1] && kiln_tensor_numel(in[1]) > 0) roi = in[1];
    if (scales && sizes) return kiln_error(KILN_ERR_INVALID_ARGUMENT, "Resize: only one of 'scales' and 'sizes' may be given");
    double sc[KILN_MAX_DIMS];
    if (si < 0) {
        int c;
        const float *f = kiln_attr_floats(n, "scales", &c);
        if (!f || c != naxes) return kiln_error(KILN_ERR_INVALID_ARGUMENT, "Upsample: attribute 'scales' must have %d values", naxes);
        for (int j = 0; j < c; j++) sc[j] = f[j];
    } else if (scales) {
        if (scales->dtype != KILN_F32 || kiln_tensor_numel(scales) != naxes)
            return kiln_error(KILN_ERR_INVALID_ARGUMENT, "%s: 'scales' must be %d float32 values", n->op_type, naxes);
        for (int j = 0; j < naxes; j++) sc[j] = ((const float *)scales->data)[j];
    } else if (!sizes) {
        return kiln_error(KILN_ERR_INVALID_ARGUMENT, "%s: one of 'scales' and 'sizes' is required", n->op_type);
    }
    if (sizes) {
        int64_t sz[KILN_MAX_DIMS];
        int c;
        KILN_TRY(kiln_cpu_shape_read_ints(n, sizes, "sizes", sz, KILN_MAX_DIMS, &c));
        if (c != naxes) return kiln_error(KILN_ERR_INVALID_ARGUMENT, "Resize: %d sizes for %d axes", c, naxes);
        const char *policy = n->opset >= 18 ? kiln_attr_string(n, "keep_aspect_ratio_policy", "stretch") : "stretch";
        KILN_TRY(kiln_resize_sizes(r, x->dims, naxes, axes, sz, policy, p->out, p->scale));
    } else {
        for (int i = 0; i < r; i++) {
            p->out[i] = x->dims[i];
            p->scale[i] = 1.0;
        }
        for (int j = 0; j < naxes; j++) {
            if (!(sc[j] > 0)) return kiln_error(KILN_ERR_INVALID_ARGUMENT, "%s: scale %g must be positive", n->op_type, sc[j]);
            p->scale[axes[j]] = sc[j];
            p->out[axes[j]] = kiln_resize_dim(x->dims[axes[j]], sc[j]);
        }
    }
    for (int i = 0; i < r; i++) {
        p->in[i] = x->dims[i];
        p->roi0[i] = 0.0;
        p->roi1[i] = 1.0;
    }
    if (p->coord == C_TF_CROP) {
        if (!roi || kiln_tensor_numel(roi) != 2 * naxes)
            return kiln_error(KILN_ERR_INVALID_ARGUMENT, "Resize: tf_crop_and_resize needs a roi of %d values", 2 * naxes);
        for (int j = 0; j < naxes; j++) {
            p->roi0[axes[j]] = kiln_tensor_get_f64(roi, j);
            p->roi1[axes[j]] = kiln_tensor_get_f64(roi, j + naxes);
        }
    }
    return KILN_OK;
}

/* The source coordinate of output position o on axis a; *extrap is set when it falls outside the
 * input (tf_crop_and_resize only). */
static double source_coord(const resize_params *p, int a, int64_t o, bool *extrap) {
    double in_w = (double)p->in[a], s = p->scale[a], out_w = s * in_w, x = (double)o;
    *extrap = false;
    switch (p->coord) {
    case C_HALF_PIXEL: return (x + 0.5) / s - 0.5;
    case C_HALF_PIXEL_SYM: {
        double adj = (double)p->out[a] / out_w, center = in_w / 2;
        return center * (1 - adj) + (x + 0.5) / s - 0.5;
    }
    case C_PYTORCH_HALF_PIXEL: return out_w == 1 ? -0.5 : (x + 0.5) / s - 0.5;
    case C_ALIGN_CORNERS: return out_w == 1 ? 0.0 : x * (in_w - 1) / (out_w - 1);
    case C_TF_HALF_PIXEL_NN: return (x + 0.5) / s;
    case C_TF_CROP: {
        double r0 = p->roi0[a], r1 = p->roi1[a];
        double v = out_w == 1 ? (r1 - r0) * (in_w - 1) / 2 : x * (r1 - r0) * (in_w - 1) / (out_w - 1);
        v += r0 * (in_w - 1);
        *extrap = v < 0 || v > in_w - 1;
        return v;
    }
    default: return x / s;
    }
}

/* The first of the n input positions that interpolate source coordinate x, chosen as the ONNX
 * reference does (the n positions nearest to x, ties to the smaller one), measured on x shifted by
 * ceil(n/2) — which matters when x is off an integer by rounding noise. */
static int64_t tap_first(double x, int n) {
    int pad = (n + 1) / 2;
    double xp = x + pad, pp = floor(xp), frac = xp - pp;
    int off = n % 2 == 0 ? (frac == 0 ? -(n / 2) : 1 - n / 2) : (frac <= 0.5 ? -((n - 1) / 2) : 1 - (n - 1) / 2);
    return (int64_t)pp + off - pad;
}

/* The weight position of x between its two neighbours: x - floor(x), or 1 when x is integral. */
static double tap_ratio(double x) {
    double fl = floor(x);
    return x == fl ? 1.0 : x - fl;
}

/* The nearest input index for output o on axis a, or -1 when it is extrapolated. */
static int64_t nearest_index(const resize_params *p, int a, int64_t o) {
    bool ex;
    double x = source_coord(p, a, o, &ex);
    if (ex) return -1;
    int64_t i;
    if (p->nearest == N_SIMPLE) {
        i = p->scale[a] < 1 ? (int64_t)ceil(x) : (int64_t)floor(x);
    } else {
        double r = tap_ratio(x);
        bool second = r == 1.0 || (p->nearest == N_PREFER_FLOOR && r > 0.5) || (p->nearest == N_PREFER_CEIL && r >= 0.5) ||
                      p->nearest == N_CEIL;
        i = tap_first(x, 2) + second;
    }
    return i < 0 ? 0 : i >= p->in[a] ? p->in[a] - 1 : i;
}

/* Cubic convolution kernel with parameter A at distance d, evaluated in float32 as the ONNX reference
 * does (its coefficient A is a float32 attribute), so results agree where cubic taps cancel. */
static double cubic_w(double d, float A) {
    float x = (float)fabs(d);
    if (x <= 1) return ((A + 2) * x - (A + 3)) * x * x + 1;
    if (x < 2) return ((A * x - 5 * A) * x + 8 * A) * x - 4 * A;
    return 0;
}

/* The tap count of linear/cubic on axis a (antialias widens the kernel when downsampling). */
static int taps(const resize_params *p, int a) {
    int base = p->mode == M_LINEAR ? 1 : 2;
    if (!p->antialias) return 2 * base;
    double s = p->scale[a] < 1 ? p->scale[a] : 1.0;
    int start = (int)floor(-base / s) + 1;
    return 2 - 2 * start;
}

/* Fills the n taps (input indices idx, weights w) of output o on axis a,
 * as the reference does: tap t reads tap_first(x) + t and is weighted by the kernel at distance
 * (1 - n/2 + t) - tap_ratio(x). *extrap when extrapolated. */
static void plan_taps(const resize_params *p, int a, int64_t o, int n, int64_t *idx, double *w, bool *extrap) {
    double x = source_coord(p, a, o, extrap), ratio = tap_ratio(x), s = p->scale[a] < 1 ? p->scale[a] : 1.0, sum = 0;
    int64_t first = tap_first(x, n);
    int start = 1 - n / 2;
    for (int t = 0; t < n; t++) {
        double dist = (double)(start + t) - ratio;
        if (p->antialias) dist *= s;
        w[t] = p->mode == M_LINEAR ? fmax(0.0, 1 - fabs(dist)) : cubic_w(dist, p->cubic_a);
        idx[t] = first + t;
        sum += w[t];
    }
    if (p->antialias && sum != 0)
        for (int t = 0; t < n; t++) w[t] /= sum;
    if (p->exclude_outside) {
        sum = 0;
        for (int t = 0; t < n; t++) {
            if (idx[t] < 0 || idx[t] >= p->in[a]) w[t] = 0;
            sum += w[t];
        }
        if (sum != 0)
            for (int t = 0; t < n; t++) w[t] /= sum;
    }
    for (int t = 0; t < n; t++) {
        idx[t] = idx[t] < 0 ? 0 : idx[t] >= p->in[a] ? p->in[a] - 1 : idx[t];
    }
}

/* True when axis a is left as it is (same size, scale 1, whole roi). */
static bool axis_identity(const resize_params *p, int a) {
    return p->out[a] == p->in[a] && p->scale[a] == 1.0 && (p->coord != C_TF_CROP || (p->roi0[a] == 0.0 && p->roi1[a] == 1.0));
}

/* mode=nearest on any dtype: y[o] = x[map_0[o_0], ..., map_r[o_r]], or the extrapolation value
 * when a coordinate is extrapolated. */
static kiln_status resize_nearest(const resize_params *p, const kiln_tensor *x, kiln_tensor *y) {
    int r = p->rank;
    size_t es = kiln_dtype_size(x->dtype);
    if (r == 0) {
        memcpy(y->data, x->data, es);
        return KILN_OK;
    }
    int64_t total = 0, *maps[KILN_MAX_DIMS], is[KILN_MAX_DIMS], cnt[KILN_MAX_DIMS] = {0};
    for (int a = 0; a < r; a++) total += p->out[a];
    int64_t *buf = malloc((size_t)total * sizeof *buf);
    if (!buf) return kiln_error(KILN_ERR_OUT_OF_MEMORY, "Resize: out of memory");
    for (int64_t a = 0, off = 0; a < r; off += p->out[a], a++) {
        maps[a] = buf + off;
        bool id = axis_identity(p, a);
        for (int64_t o = 0; o < p->out[a]; o++) maps[a][o] = id ? o : nearest_index(p, a, o);
    }
    unsigned char ext[16] = {0};
    kiln_tensor t;
    int64_t one = 1;
    kiln_tensor_view(&t, x->dtype, 1, &one, ext);
    kiln_tensor_set_f64(&t, 0, p->extrapolation);
    kiln_strides(r, p->in, is);
    int64_t L = p->out[r - 1], prev_row = -2;
    const char *src = x->data;
    char *dst = y->data;
    for (;;) {
        int64_t row = 0;
        for (int d = 0; d < r - 1 && row >= 0; d++) {
            int64_t i = maps[d][cnt[d]];
            row = i < 0 ? -1 : row + i * is[d];
        }
        if (row == prev_row) { /* upsampling repeats the previous output row */
            memcpy(dst, dst - L * (int64_t)es, (size_t)L * es);
        } else {
            const char *s = row >= 0 ? src + row * (int64_t)es : src;
            for (int64_t o = 0; o < L; o++) {
                int64_t i = maps[r - 1][o];
                shp_copy_elem(dst + o * (int64_t)es, row < 0 || i < 0 ? (const void *)ext : (const void *)(s + i * (int64_t)es), es);
            }
        }
        prev_row = row;
        dst += L * (int64_t)es;
        int d = r - 2;
        for (; d >= 0; d--) {
            if (++cnt[d] < p->out[d]) break;
            cnt[d] = 0;
        }
        if (d < 0) break;
    }
    free(buf);
    return KILN_OK;
}

/* One separable linear/cubic pass over axis a: src has dims `dims`, dst the same with dims[a]
 * replaced by p->out[a]. */
static kiln_status resize_pass(const resize_params *p, int a, const int64_t *dims, const float *src, float *dst) {
    int n = taps(p, a);
    int64_t ow = p->out[a], iw = dims[a], outer = kiln_numel(a, dims), inner = kiln_numel(p->rank - a - 1, dims + a + 1);
    int64_t *idx = malloc((size_t)(ow * n) * sizeof *idx);
    double *wd = malloc((size_t)(ow * n) * sizeof *wd);
    float *w = malloc((size_t)(ow * n) * sizeof *w);
    bool *ex = malloc((size_t)ow * sizeof *ex);
    if (!idx || !wd || !w || !ex) {
        free(idx);
        free(wd);
        free(w);
        free(ex);
        return kiln_error(KILN_ERR_OUT_OF_MEMORY, "Resize: out of memory");
    }
    for (int64_t o = 0; o < ow; o++) plan_taps(p, a, o, n, idx + o * n, wd + o * n, &ex[o]);
    for (int64_t t = 0; t < ow * n; t++) w[t] = (float)wd[t];
    float extrap = p->extrapolation;
    for (int64_t b = 0; b < outer; b++) {
        const float *s = src + b * iw * inner;
        float *d = dst + b * ow * inner;
        if (inner == 1) { /* the last axis: one dot product per output */
            for (int64_t o = 0; o < ow; o++) {
                float acc = 0;
                for (int t = 0; t < n; t++) acc += w[o * n + t] * s[idx[o * n + t]];
                d[o] = ex[o] ? extrap : acc;
            }
            continue;
        }
        for (int64_t o = 0; o < ow; o++, d += inner) {
            for (int64_t i = 0; i < inner; i++) d[i] = ex[o] ? extrap : 0;
            for (int t = 0; t < n && !ex[o]; t++) {
                float wt = w[o * n + t];
                const float *sr = s + idx[o * n + t] * inner;
                if (wt != 0)
                    for (int64_t i = 0; i < inner; i++) d[i] += wt * sr[i];
            }
        }
    }
    free(idx);
    free(wd);
    free(w);
    free(ex);
    return KILN_OK;
}

/* Linear/cubic: resizes every non-identity axis of src in turn, ending in dst. */
static kiln_status resize_interp(const resize_params *p, const float *src, float *dst) {
    int64_t dims[KILN_MAX_DIMS];
    int last = -1;
    memcpy(dims, p->in, (size_t)p->rank * sizeof *dims);
    for (int a = 0; a < p->rank; a++)
        if (!axis_identity(p, a)) last = a;
    if (last < 0) {
        memcpy(dst, src, (size_t)kiln_numel(p->rank, p->in) * sizeof *dst);
        return KILN_OK;
    }
    float *tmp = NULL;
    kiln_status st = KILN_OK;
    for (int a = 0; a <= last && st == KILN_OK; a++) {
        if (axis_identity(p, a)) continue;
        int64_t nd[KILN_MAX_DIMS];
        memcpy(nd, dims, sizeof nd);
        nd[a] = p->out[a];
        float *next = a == last ? dst : malloc((size_t)kiln_numel(p->rank, nd) * sizeof *next);
        if (!next) {
            st = kiln_error(KILN_ERR_OUT_OF_MEMORY, "Resize: out of memory");
            break;
        }
        st = resize_pass(p, a, dims, tmp ? tmp : src, next);
        free(tmp);
        tmp = a == last ? NULL : next;
        memcpy(dims, nd, sizeof dims);
    }
    free(tmp);
    return st;
}

/* Converts count elements of a float16/bfloat16/float64 tensor's data to float32 (and back). */
static void to_f32(kiln_dtype dt, const void *src, float *dst, int64_t count) {
    for (int64_t i = 0; i < count; i++)
        dst[i] = dt == KILN_F16    ? kiln_f16_to_f32(((const uint16_t *)src)[i])
                 : dt == KILN_BF16 ? kiln_bf16_to_f32(((const uint16_t *)src)[i])
                                   : (float)((const double *)src)[i];
}
static void from_f32(kiln_dtype dt, const float *src, void *dst, int64_t count) {
    for (int64_t i = 0; i < count; i++) {
        if (dt == KILN_F16) ((uint16_t *)dst)[i] = kiln_f32_to_f16(src[i]);
        else if (dt == KILN_BF16) ((uint16_t *)dst)[i] = kiln_f32_to_bf16(src[i]);
        else ((double *)dst)[i] = src[i];
    }
}

kiln_status kiln_cpu_shape_resize(const kiln_node *n, kiln_tensor *const *in, int nin, kiln_tensor *const *out, int nout) {
    const kiln_tensor *x = in[0];
    KILN_TRY(kiln_cpu_shape_check_dtype(n, x));
    resize_params p;
    KILN_TRY(resize_setup(n, in, nin, &p));
    KILN_TRY(kiln_tensor_alloc(out[0], x->dtype, p.rank, p.out));
    if (!out[0]->nbytes) return KILN_OK;
    if (!x->nbytes) return kiln_error(KILN_ERR_SHAPE, "%s: cannot resize an empty input to a non-empty output", n->op_type);
    if (p.mode == M_NEAREST) return resize_nearest(&p, x, out[0]);
    kiln_dtype dt = x->dtype;
    if (dt == KILN_F32) return resize_interp(&p, x->data, out[0]->data);
    if (dt != KILN_F16 && dt != KILN_BF16 && dt != KILN_F64)
        return kiln_error(KILN_ERR_UNSUPPORTED, "%s: mode '%s' on %s is not supported (float types only)", n->op_type,
                          p.mode == M_LINEAR ? "linear" : "cubic", kiln_dtype_name(dt));
    int64_t ni = kiln_tensor_numel(x), no = kiln_tensor_numel(out[0]);
    float *a = malloc((size_t)ni * sizeof *a), *b = malloc((size_t)no * sizeof *b);
    kiln_status st = a && b ? KILN_OK : kiln_error(KILN_ERR_OUT_OF_MEMORY, "%s: out of memory", n->op_type);
    if (st == KILN_OK) {
        to_f32(dt, x->data, a, ni);
        st = resize_interp(&p, a, b);
        if (st == KILN_OK) from_f32(dt, b, out[0]->data, no);
    }
    free(a);
    free(b);
    return st;
}
