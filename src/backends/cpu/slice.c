/* slice.c — CPU kernels for Slice and Pad (type-generic).
 *
 * Slice maps to one strided copy (negative steps are negative strides), so a slice that keeps the
 * inner dim whole with step 1 copies contiguous runs with memcpy. Pad works row by row over the
 * output: each output row maps to one input row (or to the constant), its interior is one memcpy
 * and only the border elements are mapped one by one. */
#include "backends/cpu/shape_util.h"

#include "ir/shape_calc.h"

enum { PAD_CONSTANT, PAD_REFLECT, PAD_EDGE, PAD_WRAP };

/* Reads starts/ends/axes/steps (attributes before opset 10, inputs 1..4 after); list i absent -> *present false. */
static kiln_status slice_list(const kiln_node *n, kiln_tensor *const *in, int nin, int idx, const char *name, int64_t *vals,
                              int *count, bool *present) {
    if (n->opset < 10) return kiln_cpu_shape_read_list(n, NULL, name, 10, vals, KILN_MAX_DIMS, count, present);
    return kiln_cpu_shape_read_list(n, nin > idx ? in[idx] : NULL, name, 10, vals, KILN_MAX_DIMS, count, present);
}

kiln_status kiln_cpu_shape_slice(const kiln_node *n, kiln_tensor *const *in, int nin, kiln_tensor *const *out, int nout) {
    const kiln_tensor *x = in[0];
    KILN_TRY(kiln_cpu_shape_check_dtype(n, x));
    int64_t st[KILN_MAX_DIMS], en[KILN_MAX_DIMS], axv[KILN_MAX_DIMS], sp[KILN_MAX_DIMS];
    int ks, ke, ka, kp, ax[KILN_MAX_DIMS];
    bool has_st, has_en, has_ax, has_sp;
    KILN_TRY(slice_list(n, in, nin, 1, "starts", st, &ks, &has_st));
    KILN_TRY(slice_list(n, in, nin, 2, "ends", en, &ke, &has_en));
    KILN_TRY(slice_list(n, in, nin, 3, "axes", axv, &ka, &has_ax));
    KILN_TRY(slice_list(n, in, nin, 4, "steps", sp, &kp, &has_sp));
    if (!has_st || !has_en) return kiln_error(KILN_ERR_INVALID_ARGUMENT, "Slice: 'starts' and 'ends' are required");
    if (ke != ks || (has_ax && ka != ks) || (has_sp && kp != ks))
        return kiln_error(KILN_ERR_INVALID_ARGUMENT, "Slice: starts, ends, axes and steps differ in length");
    if (has_ax) KILN_TRY(kiln_axes_normalize("Slice", ks, axv, x->ndim, ax));
    else if (ks > x->ndim) return kiln_error(KILN_ERR_INVALID_ARGUMENT, "Slice: %d starts for rank %d", ks, x->ndim);
    else
        for (int j = 0; j < ks; j++) ax[j] = j;
    int64_t first[KILN_MAX_DIMS], od[KILN_MAX_DIMS], step[KILN_MAX_DIMS], is[KILN_MAX_DIMS], ss[KILN_MAX_DIMS],
        ds[KILN_MAX_DIMS];
    for (int i = 0; i < x->ndim; i++) {
        first[i] = 0;
        od[i] = x->dims[i];
        step[i] = 1;
    }
    for (int j = 0; j < ks; j++) {
        int a = ax[j];
        step[a] = has_sp ? sp[j] : 1;
        if (step[a] == 0) return kiln_error(KILN_ERR_INVALID_ARGUMENT, "Slice: step 0 on axis %d", a);
        kiln_slice_axis(x->dims[a], st[j], en[j], step[a], &first[a], &od[a]);
    }
    KILN_TRY(kiln_tensor_alloc(out[0], x->dtype, x->ndim, od));
    if (!out[0]->nbytes) return KILN_OK;
    size_t es = kiln_dtype_size(x->dtype);
    kiln_strides(x->ndim, x->dims, is);
    kiln_strides(x->ndim, od, ds);
    int64_t base = 0;
    for (int i = 0; i < x->ndim; i++) {
        base += first[i] * is[i];
        ss[i] = od[i] > 1 ? is[i] * step[i] : 0; /* od > 1 bounds |step| by the dim; a huge step takes one element */
    }
    kiln_cpu_copy_strided(es, x->ndim, od, (const char *)x->data + base * (int64_t)es, ss, out[0]->data, ds);
    return KILN_OK;
}

/* The input index that output index i (already shifted by the begin pad) reads on an axis of size
 * len in the given mode, or -1 for the constant. len > 0 unless the mode is constant. */
static int64_t pad_map(int mode, int64_t i, int64_t len) {
    if (i >= 0 && i < len) return i;
    switch (mode) {
    case PAD_EDGE: return i < 0 ? 0 : len - 1;
    case PAD_WRAP: {
        int64_t m = i % len;
        return m < 0 ? m + len : m;
    }
    case PAD_REFLECT: {
        if (len == 1) return 0;
        int64_t p = 2 * (len - 1), m = i % p;
        if (m < 0) m += p;
        return m >= len ? p - m : m;
    }
    default: return -1;
    }
}

/* Writes count copies of the es-byte value at val to dst. */
static void fill_value(char *dst, const unsigned char *val, int64_t count, size_t es) {
    bool zero = true;
    for (size_t b = 0; b < es; b++) zero &= val[b] == 0;
    if (zero) {
        memset(dst, 0, (size_t)count * es);
        return;
    }
    for (int64_t i = 0; i < count; i++) shp_copy_elem(dst + (size_t)i * es, val, es);
}

/* Reads Pad's mode, pads (per input dim: pb begin, pe end) and constant value bytes (cval). */
static kiln_status pad_params(const kiln_node *n, kiln_tensor *const *in, int nin, const kiln_tensor *x, int *mode,
                              int64_t *pb, int64_t *pe, unsigned char *cval) {
    const char *m = kiln_attr_string(n, "mode", "constant");
    *mode = !strcmp(m, "constant") ? PAD_CONSTANT : !strcmp(m, "reflect") ? PAD_REFLECT : !strcmp(m, "edge") ? PAD_EDGE
            : !strcmp(m, "wrap") && n->opset >= 19                                                               ? PAD_WRAP
                                                                                                                 : -1;
    if (*mode < 0) return kiln_error(KILN_ERR_INVALID_ARGUMENT, "Pad: unknown mode '%s' for opset %d", m, n->opset);
    int64_t pads[2 * KILN_MAX_DIMS], axv[KILN_MAX_DIMS];
    int np, na = x->ndim, ax[KILN_MAX_DIMS];
    bool present;
    if (n->opset < 11) {
        KILN_TRY(kiln_cpu_shape_read_list(n, NULL, n->opset < 2 ? "paddings" : "pads", 11, pads, 2 * KILN_MAX_DIMS, &np, &present));
    } else {
        present = nin > 1 && in[1];
        if (present) KILN_TRY(kiln_cpu_shape_read_ints(n, in[1], "pads", pads, 2 * KILN_MAX_DIMS, &np));
    }
    if (!present) return kiln_error(KILN_ERR_INVALID_ARGUMENT, "Pad: 'pads' is required");
    if (n->opset >= 18 && nin > 3 && in[3]) {
        KILN_TRY(kiln_cpu_shape_read_ints(n, in[3], "axes", axv, KILN_MAX_DIMS, &na));
        KILN_TRY(kiln_axes_normalize("Pad", na, axv, x->ndim, ax));
    } else {
        for (int j = 0; j < na; j++) ax[j] = j;
    }
    if (np != 2 * na) return kiln_error(KILN_ERR_INVALID_ARGUMENT, "Pad: %d pads for %d axes (need %d)", np, na, 2 * na);
    for (int i = 0; i < x->ndim; i++) pb[i] = pe[i] = 0;
    for (int j = 0; j < na; j++) {
        const int64_t lim = INT64_C(1) << 40;
        if (pads[j] > lim || pads[j] < -lim || pads[j + na] > lim || pads[j + na] < -lim)
            return kiln_error(KILN_ERR_INVALID_ARGUMENT, "Pad: pads %lld,%lld are out of range", (long long)pads[j],
                              (long long)pads[j + na]);
        pb[ax[j]] = pads[j];
        pe[ax[j]] = pads[j + na];
    }
    size_t es = kiln_dtype_size(x->dtype);
    memset(cval, 0, 16);
    if (n->opset >= 11 && nin > 2 && in[2] && kiln_tensor_numel(in[2]) > 0) {
        if (in[2]->dtype != x->dtype)
            return kiln_error(KILN_ERR_INVALID_ARGUMENT, "Pad: constant_value is %s but data is %s", kiln_dtype_name(in[2]->dtype),
                              kiln_dtype_name(x->dtype));
        memcpy(cval, in[2]->data, es);
    } else if (n->opset < 11) {
        kiln_tensor t;
        int64_t one = 1;
        kiln_tensor_view(&t, x->dtype, 1, &one, cval);
        kiln_tensor_set_f64(&t, 0, kiln_attr_float(n, "value", 0.0f));
    }
    return KILN_OK;
}

kiln_status kiln_cpu_shape_pad(const kiln_node *n, kiln_tensor *const *in, int nin, kiln_tensor *const *out, int nout) {
    const kiln_tensor *x = in[0];
    KILN_TRY(kiln_cpu_shape_check_dtype(n, x));
    int mode, r = x->ndim;
    int64_t pb[KILN_MAX_DIMS], pe[KILN_MAX_DIMS], od[KILN_MAX_DIMS], is[KILN_MAX_DIMS];
    unsigned char cval[16];
    KILN_TRY(pad_params(n, in, nin, x, &mode, pb, pe, cval));
    for (int i = 0; i < r; i++) {
        od[i] = x->dims[i] + pb[i] + pe[i];
        if (od[i] < 0)
            return kiln_error(KILN_ERR_SHAPE, "Pad: pads %lld,%lld make axis %d of size %lld negative", (long long)pb[i],
                              (long long)pe[i], i, (long long)x->dims[i]);
    }
    KILN_TRY(kiln_tensor_alloc(out[0], x->dtype, r, od));
    if (!out[0]->nbytes) return KILN_OK;
    size_t es = kiln_dtype_size(x->dtype);
    if (r == 0) {
        memcpy(out[0]->data, x->data, es);
        return KILN_OK;
    }
    for (int i = 0; i < r; i++)
        if (mode != PAD_CONSTANT && x->dims[i] == 0)
            return kiln_error(KILN_ERR_SHAPE, "Pad: cannot pad empty axis %d in mode '%s'", i, kiln_attr_string(n, "mode", ""));
    kiln_strides(r, x->dims, is);
    int64_t L = od[r - 1], len = x->dims[r - 1], b = pb[r - 1];
    int64_t lo = b > 0 ? b : 0, hi = b + len < L ? b + len : L; /* output range copied straight */
    int64_t cnt[KILN_MAX_DIMS] = {0};
    const char *src = x->data;
    char *dst = out[0]->data;
    for (;;) {
        int64_t row = 0;
        bool constant_row = false;
        for (int d = 0; d < r - 1 && !constant_row; d++) {
            int64_t i = pad_map(mode, cnt[d] - pb[d], x->dims[d]);
            if (i < 0) constant_row = true;
            else row += i * is[d];
        }
        if (constant_row) {
            fill_value(dst, cval, L, es);
        } else {
            const char *s = src + (size_t)row * es;
            if (hi > lo) memcpy(dst + (size_t)lo * es, s + (size_t)(lo - b) * es, (size_t)(hi - lo) * es);
            for (int64_t o = 0; o < L; o++) {
                if (o == lo && hi > lo) o = hi;
                if (o >= L) break;
                int64_t i = pad_map(mode, o - b, len);
                shp_copy_elem(dst + (size_t)o * es, i < 0 ? (const void *)cval : (const void *)(s + (size_t)i * es), es);
            }
        }
        dst += (size_t)L * es;
        int d = r - 2;
        for (; d >= 0; d--) {
            if (++cnt[d] < od[d]) break;
            cnt[d] = 0;
        }
        if (d < 0) break;
    }
    return KILN_OK;
}
