/* resize.c — CPU kernels for Resize (opsets 10..) and the deprecated Upsample (7, 9).
 *
 * Resampling is separable: each resized axis gets a plan (for every output position, the input
 * positions it reads and their weights) from the geometry shared with the CUDA kernel
 * (ir/resize_geom.h). mode=nearest is a pure index gather, so it is type-generic;
 * linear and cubic run one axis at a time on float32 data (float16, bfloat16 and float64 inputs go
 * through a float32 copy), with weights computed in double precision. */
#include "backends/cpu/shape_util.h"

#include "core/half.h"
#include "ir/resize_geom.h"

#include <math.h>
#include <stdlib.h>

/* The scales / roi / sizes inputs of n that are present and non-empty (NULL otherwise), as
 * kiln_resize_setup takes them. */
static void resize_inputs(const kiln_node *n, kiln_tensor *const *in, int nin, const kiln_tensor **scales,
                          const kiln_tensor **roi, const kiln_tensor **sizes) {
    bool upsample = !strcmp(n->op_type, "Upsample"), v10 = upsample || n->opset < 11;
    int si = upsample ? (n->opset >= 9 ? 1 : -1) : v10 ? 1 : 2;
    *scales = si > 0 && nin > si && in[si] && kiln_tensor_numel(in[si]) > 0 ? in[si] : NULL;
    *sizes = !v10 && nin > 3 && in[3] && kiln_tensor_numel(in[3]) > 0 ? in[3] : NULL;
    *roi = !v10 && nin > 1 && in[1] && kiln_tensor_numel(in[1]) > 0 ? in[1] : NULL;
}

/* mode=nearest on any dtype: y[o] = x[map_0[o_0], ..., map_r[o_r]], or the extrapolation value
 * when a coordinate is extrapolated. */
static kiln_status resize_nearest(const kiln_resize_params *p, const kiln_tensor *x, kiln_tensor *y) {
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
        for (int64_t o = 0; o < p->out[a]; o++) maps[a][o] = kiln_resize_nearest_index(p, a, o);
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
static kiln_status resize_pass(const kiln_resize_params *p, int a, const int64_t *dims, const float *src, float *dst) {
    int n = kiln_resize_taps(p, a);
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
    for (int64_t o = 0; o < ow; o++) kiln_resize_plan_taps(p, a, o, n, idx + o * n, wd + o * n, &ex[o]);
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
static kiln_status resize_interp(const kiln_resize_params *p, const float *src, float *dst) {
    int64_t dims[KILN_MAX_DIMS];
    int last = -1;
    memcpy(dims, p->in, (size_t)p->rank * sizeof *dims);
    for (int a = 0; a < p->rank; a++)
        if (!kiln_resize_axis_identity(p, a)) last = a;
    if (last < 0) {
        memcpy(dst, src, (size_t)kiln_numel(p->rank, p->in) * sizeof *dst);
        return KILN_OK;
    }
    float *tmp = NULL;
    kiln_status st = KILN_OK;
    for (int a = 0; a <= last && st == KILN_OK; a++) {
        if (kiln_resize_axis_identity(p, a)) continue;
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
    kiln_resize_params p;
    const kiln_tensor *scales, *roi, *sizes;
    resize_inputs(n, in, nin, &scales, &roi, &sizes);
    KILN_TRY(kiln_resize_setup(n, x->ndim, x->dims, scales, roi, sizes, &p));
    KILN_TRY(kiln_tensor_alloc(out[0], x->dtype, p.rank, p.out));
    if (!out[0]->nbytes) return KILN_OK;
    if (!x->nbytes) return kiln_error(KILN_ERR_SHAPE, "%s: cannot resize an empty input to a non-empty output", n->op_type);
    if (p.mode == KILN_RESIZE_NEAREST) return resize_nearest(&p, x, out[0]);
    kiln_dtype dt = x->dtype;
    if (dt == KILN_F32) return resize_interp(&p, x->data, out[0]->data);
    if (dt != KILN_F16 && dt != KILN_BF16 && dt != KILN_F64)
        return kiln_error(KILN_ERR_UNSUPPORTED, "%s: mode '%s' on %s is not supported (float types only)", n->op_type,
                          p.mode == KILN_RESIZE_LINEAR ? "linear" : "cubic", kiln_dtype_name(dt));
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
