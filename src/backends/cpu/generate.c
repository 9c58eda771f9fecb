/* generate.c — CPU kernels of the reduce family that make tensors rather than fold them: Trilu,
 * Range, ConstantOfShape, OneHot, NonZero and EyeLike. Data movement is dtype-generic (by element
 * size); arithmetic goes through int64 or double (see reduce_util.h). */
#include "backends/cpu/reduce_util.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Trilu: keeps the upper (j - i >= k) or lower (j - i <= k) triangle of every matrix in the last two
 * dims and zeroes the rest; k is the optional input 1 (default 0). */
kiln_status kiln_cpu_trilu(const kiln_node *n, kiln_tensor *const *in, int nin, kiln_tensor *const *out, int nout) {
    (void)nout;
    KILN_TRY(kiln_red_need(n, in, nin, 0, "input"));
    const kiln_tensor *x = in[0];
    size_t es = kiln_dtype_size(x->dtype);
    if (es == 0) return kiln_red_unsupported(n, x->dtype);
    if (x->ndim < 2)
        return kiln_error(KILN_ERR_INVALID_ARGUMENT, "%s: input must have rank >= 2, got rank %d", n->op_type, x->ndim);
    int64_t k = 0;
    if (nin > 1 && in[1]) KILN_TRY(kiln_red_read_scalar_i64(n, in[1], "k", &k));
    bool upper = kiln_attr_int(n, "upper", 1) != 0;
    KILN_TRY(kiln_tensor_copy(out[0], x));
    int64_t rows = x->dims[x->ndim - 2], cols = x->dims[x->ndim - 1];
    int64_t nmat = kiln_numel(x->ndim - 2, x->dims);
    char *base = out[0]->data;
    for (int64_t b = 0; b < nmat; b++) {
        for (int64_t i = 0; i < rows; i++) {
            char *row = base + (size_t)((b * rows + i) * cols) * es;
            /* zero [lo, hi) of this row; k may be huge, so clamp before adding */
            int64_t edge = k > cols ? cols + 1 : k < -rows - 1 ? -rows - 1 : k;
            int64_t lo, hi;
            if (upper) { lo = 0; hi = i + edge; }
            else { lo = i + edge + 1; hi = cols; }
            if (lo < 0) lo = 0;
            if (hi > cols) hi = cols;
            if (hi > lo) memset(row + (size_t)lo * es, 0, (size_t)(hi - lo) * es);
        }
    }
    return KILN_OK;
}

/* Range: start, start + delta, ... up to limit (exclusive); max(ceil((limit - start) / delta), 0)
 * elements. Integers are computed exactly in int64, floats in double. */
kiln_status kiln_cpu_range(const kiln_node *n, kiln_tensor *const *in, int nin, kiln_tensor *const *out, int nout) {
    (void)nout;
    const char *names[3] = {"start", "limit", "delta"};
    for (int i = 0; i < 3; i++) {
        KILN_TRY(kiln_red_need(n, in, nin, i, names[i]));
        if (kiln_tensor_numel(in[i]) != 1)
            return kiln_error(KILN_ERR_INVALID_ARGUMENT, "%s: input '%s' must be a scalar, got %lld elements", n->op_type,
                              names[i], (long long)kiln_tensor_numel(in[i]));
        if (in[i]->dtype != in[0]->dtype)
            return kiln_error(KILN_ERR_INVALID_ARGUMENT, "%s: inputs have different types (%s and %s)", n->op_type,
                              kiln_dtype_name(in[0]->dtype), kiln_dtype_name(in[i]->dtype));
    }
    kiln_dtype t = in[0]->dtype;
    if (!kiln_red_is_float(t) && t != KILN_I16 && t != KILN_I32 && t != KILN_I64) return kiln_red_unsupported(n, t);
    if (kiln_red_is_float(t)) {
        double v[3];
        for (int i = 0; i < 3; i++) kiln_red_load_f64(in[i], 0, 1, &v[i]);
        if (v[2] == 0 || !isfinite(v[0]) || !isfinite(v[1]) || !isfinite(v[2]))
            return kiln_error(KILN_ERR_INVALID_ARGUMENT, "%s: start, limit and delta must be finite and delta non-zero",
                              n->op_type);
        double cnt = ceil((v[1] - v[0]) / v[2]);
        if (cnt > (double)(INT64_C(1) << 40))
            return kiln_error(KILN_ERR_INVALID_ARGUMENT, "%s: %g elements are too many", n->op_type, cnt);
        int64_t len = cnt > 0 ? (int64_t)cnt : 0;
        KILN_TRY(kiln_tensor_alloc(out[0], t, 1, &len));
        double buf[256];
        for (int64_t s = 0; s < len; s += 256) {
            int64_t m = len - s < 256 ? len - s : 256;
            for (int64_t i = 0; i < m; i++) buf[i] = v[0] + (double)(s + i) * v[2];
            kiln_red_store_f64(out[0], s, m, buf);
        }
        return KILN_OK;
    }
    int64_t v[3];
    for (int i = 0; i < 3; i++) kiln_red_load_i64(in[i], 0, 1, &v[i]);
    if (v[2] == 0) return kiln_error(KILN_ERR_INVALID_ARGUMENT, "%s: delta must be non-zero", n->op_type);
    /* checked in double first so that extreme int64 values cannot overflow limit - start */
    double span = (double)v[1] - (double)v[0];
    if (fabs(span) >= 9.0e18 || fabs(span / (double)v[2]) > (double)(INT64_C(1) << 40))
        return kiln_error(KILN_ERR_INVALID_ARGUMENT, "%s: the range from %lld to %lld is too large", n->op_type,
                          (long long)v[0], (long long)v[1]);
    int64_t diff = v[1] - v[0], len = 0;
    if (v[2] > 0 && diff > 0) len = (diff + v[2] - 1) / v[2];
    if (v[2] < 0 && diff < 0) len = (diff + v[2] + 1) / v[2];
    KILN_TRY(kiln_tensor_alloc(out[0], t, 1, &len));
    int64_t buf[256];
    for (int64_t s = 0; s < len; s += 256) {
        int64_t m = len - s < 256 ? len - s : 256;
        for (int64_t i = 0; i < m; i++) buf[i] = v[0] + (s + i) * v[2];
        kiln_red_store_i64(out[0], s, m, buf);
    }
    return KILN_OK;
}

/* Reads a shape given as a 1-D integer tensor; fails on a negative dim. */
static kiln_status read_shape(const kiln_node *n, const kiln_tensor *t, int *ndim, int64_t *dims) {
    KILN_TRY(kiln_red_read_ints(n, t, "shape", dims, KILN_MAX_DIMS, ndim));
    for (int i = 0; i < *ndim; i++)
        if (dims[i] < 0)
            return kiln_error(KILN_ERR_INVALID_ARGUMENT, "%s: shape dim %d is negative (%lld)", n->op_type, i,
                              (long long)dims[i]);
    return KILN_OK;
}

/* Fills numel elements of es bytes at dst with copies of the element at val. */
static void fill_elems(char *dst, int64_t numel, const void *val, size_t es) {
    if (numel == 0) return;
    memcpy(dst, val, es);
    size_t have = es, total = (size_t)numel * es;
    while (have < total) { /* doubling copies */
        size_t m = have < total - have ? have : total - have;
        memcpy(dst + have, dst, m);
        have += m;
    }
}

/* ConstantOfShape: a tensor of the shape in input 0 filled with the one-element `value` attribute
 * (float32 0 by default). */
kiln_status kiln_cpu_constant_of_shape(const kiln_node *n, kiln_tensor *const *in, int nin,
                                       kiln_tensor *const *out, int nout) {
    (void)nout;
    KILN_TRY(kiln_red_need(n, in, nin, 0, "input"));
    int ndim;
    int64_t dims[KILN_MAX_DIMS];
    KILN_TRY(read_shape(n, in[0], &ndim, dims));
    const kiln_attr *a = kiln_node_attr(n, "value");
    float zero = 0;
    kiln_dtype t = KILN_F32;
    const void *val = &zero;
    if (a) {
        if (a->type != KILN_ATTR_TENSOR || !a->t || kiln_tensor_numel(a->t) != 1)
            return kiln_error(KILN_ERR_INVALID_ARGUMENT, "%s: attribute 'value' must be a one-element tensor", n->op_type);
        t = a->t->dtype;
        val = a->t->data;
    }
    size_t es = kiln_dtype_size(t);
    if (es == 0 || !val) return kiln_red_unsupported(n, t);
    KILN_TRY(kiln_tensor_alloc(out[0], t, ndim, dims));
    fill_elems(out[0]->data, kiln_tensor_numel(out[0]), val, es);
    return KILN_OK;
}

/* OneHot: output[..., d, ...] (d inserted at `axis`) = values[1] where indices == d (from opset 11,
 * negative indices count from depth), values[0] elsewhere; out-of-range indices give an all-off
 * row. */
kiln_status kiln_cpu_onehot(const kiln_node *n, kiln_tensor *const *in, int nin, kiln_tensor *const *out, int nout) {
    (void)nout;
    KILN_TRY(kiln_red_need(n, in, nin, 0, "indices"));
    KILN_TRY(kiln_red_need(n, in, nin, 1, "depth"));
    KILN_TRY(kiln_red_need(n, in, nin, 2, "values"));
    const kiln_tensor *ind = in[0], *vals = in[2];
    if (!kiln_red_is_numeric(ind->dtype) || ind->dtype == KILN_BOOL) return kiln_red_unsupported(n, ind->dtype);
    int64_t depth;
    KILN_TRY(kiln_red_read_scalar_i64(n, in[1], "depth", &depth));
    if (depth < 0) return kiln_error(KILN_ERR_INVALID_ARGUMENT, "%s: depth %lld is negative", n->op_type, (long long)depth);
    size_t es = kiln_dtype_size(vals->dtype);
    if (es == 0) return kiln_red_unsupported(n, vals->dtype);
    if (kiln_tensor_numel(vals) != 2)
        return kiln_error(KILN_ERR_INVALID_ARGUMENT, "%s: 'values' must hold [off_value, on_value], got %lld elements",
                          n->op_type, (long long)kiln_tensor_numel(vals));
    if (ind->ndim + 1 > KILN_MAX_DIMS)
        return kiln_error(KILN_ERR_UNSUPPORTED, "%s: output rank %d exceeds %d", n->op_type, ind->ndim + 1, KILN_MAX_DIMS);
    int axis;
    if (kiln_axis_normalize(kiln_attr_int(n, "axis", -1), ind->ndim + 1, &axis) != KILN_OK)
        return kiln_error(KILN_ERR_INVALID_ARGUMENT, "%s: axis %lld is out of range for an output of rank %d", n->op_type,
                          (long long)kiln_attr_int(n, "axis", -1), ind->ndim + 1);
    int64_t odims[KILN_MAX_DIMS];
    for (int d = 0, j = 0; d <= ind->ndim; d++) odims[d] = d == axis ? depth : ind->dims[j++];
    KILN_TRY(kiln_tensor_alloc(out[0], vals->dtype, ind->ndim + 1, odims));
    char *dst = out[0]->data;
    const char *off_v = vals->data, *on_v = off_v + es;
    fill_elems(dst, kiln_tensor_numel(out[0]), off_v, es);
    int64_t inner = kiln_numel(ind->ndim - axis, ind->dims + axis), total = kiln_tensor_numel(ind);
    int64_t buf[256];
    for (int64_t s = 0; s < total; s += 256) {
        int64_t m = total - s < 256 ? total - s : 256;
        kiln_red_load_i64(ind, s, m, buf);
        for (int64_t j = 0; j < m; j++) {
            int64_t v = buf[j] < 0 && n->opset >= 11 ? buf[j] + depth : buf[j]; /* before 11: out of range */
            if (v < 0 || v >= depth) continue;
            int64_t p = s + j, o = p / inner, i = p % inner;
            memcpy(dst + (size_t)((o * depth + v) * inner + i) * es, on_v, es);
        }
    }
    return KILN_OK;
}

/* NonZero: int64 [rank, count] coordinates (row-major order) of the non-zero elements (NaN counts
 * as non-zero). A scalar is treated as a one-element vector, as numpy does. */
kiln_status kiln_cpu_nonzero(const kiln_node *n, kiln_tensor *const *in, int nin, kiln_tensor *const *out, int nout) {
    (void)nout;
    KILN_TRY(kiln_red_need(n, in, nin, 0, "X"));
    const kiln_tensor *x = in[0];
    if (!kiln_red_is_numeric(x->dtype)) return kiln_red_unsupported(n, x->dtype);
    int64_t total = kiln_tensor_numel(x), count = 0;
    double buf[256];
    for (int64_t s = 0; s < total; s += 256) {
        int64_t m = total - s < 256 ? total - s : 256;
        kiln_red_load_f64(x, s, m, buf);
        for (int64_t j = 0; j < m; j++) count += buf[j] != 0;
    }
    int rank = x->ndim ? x->ndim : 1;
    int64_t odims[2] = {rank, count};
    KILN_TRY(kiln_tensor_alloc(out[0], KILN_I64, 2, odims));
    int64_t *res = out[0]->data, idx[KILN_MAX_DIMS] = {0}, c = 0;
    for (int64_t s = 0; s < total; s += 256) {
        int64_t m = total - s < 256 ? total - s : 256;
        kiln_red_load_f64(x, s, m, buf);
        for (int64_t j = 0; j < m; j++) {
            if (buf[j] != 0) {
                for (int d = 0; d < x->ndim; d++) res[d * count + c] = idx[d];
                if (x->ndim == 0) res[c] = 0;
                c++;
            }
            for (int d = x->ndim - 1; d >= 0; d--) {
                if (++idx[d] < x->dims[d]) break;
                idx[d] = 0;
            }
        }
    }
    return KILN_OK;
}

/* EyeLike: a 2-D tensor shaped like the input with ones on diagonal k and zeros elsewhere; its type
 * is the `dtype` attribute, or the input's. */
kiln_status kiln_cpu_eyelike(const kiln_node *n, kiln_tensor *const *in, int nin, kiln_tensor *const *out, int nout) {
    (void)nout;
    KILN_TRY(kiln_red_need(n, in, nin, 0, "input"));
    const kiln_tensor *x = in[0];
    if (x->ndim != 2)
        return kiln_error(KILN_ERR_INVALID_ARGUMENT, "%s: input must be 2-D, got rank %d", n->op_type, x->ndim);
    kiln_dtype t = kiln_node_attr(n, "dtype") ? (kiln_dtype)kiln_attr_int(n, "dtype", 0) : x->dtype;
    if (!kiln_red_is_numeric(t)) return kiln_red_unsupported(n, t);
    int64_t k = kiln_attr_int(n, "k", 0), rows = x->dims[0], cols = x->dims[1];
    KILN_TRY(kiln_tensor_alloc(out[0], t, 2, x->dims));
    const double one = 1.0;
    if (k <= -rows || k >= cols) return KILN_OK; /* the diagonal misses the matrix (and -k cannot overflow) */
    for (int64_t i = k < 0 ? -k : 0; i < rows && i + k < cols; i++) kiln_red_store_f64(out[0], i * cols + i + k, 1, &one);
    return KILN_OK;
}
