/* infer_shape_index.c — shape and type inference for the shape family's indexing and resampling ops:
 * Slice, Gather, GatherElements, GatherND, ScatterND, ScatterElements/Scatter, Pad, Resize and
 * Upsample. Registered in infer_shape.c's table. starts/ends/pads/scales/sizes known at build time
 * (constants, or computed from shapes: kiln_shape_value) give static or symbolic dims; an axis that
 * provably keeps its size keeps its (possibly symbolic) dim. */
#include "ir/infer_shape_util.h"
#include "ir/shape_calc.h"
#include "ir/shape_value.h"

#include <string.h>

/* An integer list operand: from attribute `attr` when opset < input_from, else from input idx (known
 * when its values are known at build time, see kiln_shape_value).
 * state: 0 absent, 1 known (vals/count filled), 2 present but not known. */
typedef struct int_list {
    int state;
    int count;
    int64_t vals[2 * KILN_MAX_DIMS];
} int_list;

static kiln_status get_list(kiln_graph *g, kiln_node *n, const char *attr, int input_from, int idx, int_list *l) {
    l->state = 0;
    l->count = 0;
    if (n->opset < input_from) {
        const int64_t *a = kiln_attr_ints(n, attr, &l->count);
        if (!a) return KILN_OK;
        if (l->count > 2 * KILN_MAX_DIMS)
            return kiln_error(KILN_ERR_INVALID_ARGUMENT, "%s: '%s' has %d entries", n->op_type, attr, l->count);
        memcpy(l->vals, a, (size_t)l->count * sizeof *a);
        l->state = 1;
        return KILN_OK;
    }
    if (!kiln_node_input(g, n, idx)) return KILN_OK;
    KILN_TRY(shp_check_int_input(g, n, idx, attr, true));
    kiln_dim el[KILN_SHAPE_VALUE_MAX];
    l->state = 2;
    if (kiln_shape_value_input(g, n, idx, el, 2 * KILN_MAX_DIMS, &l->count) && kiln_shape_value_static(el, l->count, l->vals))
        l->state = 1;
    return KILN_OK;
}

/* Output `out` gets dtype dt and rank `rank` (-1: unknown) with every dim unknown. */
static kiln_status set_dims_unknown(kiln_graph *g, kiln_node *n, int out, kiln_dtype dt, int rank) {
    kiln_dim d[KILN_MAX_DIMS];
    for (int i = 0; i < rank; i++) d[i] = KILN_DIM_UNKNOWN;
    kiln_infer_set(g, n, out, dt, rank, rank >= 0 ? d : NULL);
    return KILN_OK;
}

/* Slice: starts/ends/axes attributes before opset 10, then inputs starts, ends, axes, steps. */
kiln_status kiln_infer_slice(kiln_graph *g, kiln_node *n) {
    KILN_TRY(shp_need_input(g, n, 0, "data"));
    kiln_value *x = kiln_node_input(g, n, 0);
    if (n->opset >= 10) {
        KILN_TRY(shp_need_input(g, n, 1, "starts"));
        KILN_TRY(shp_need_input(g, n, 2, "ends"));
    }
    int_list st, en, ax, sp;
    KILN_TRY(get_list(g, n, "starts", 10, 1, &st));
    KILN_TRY(get_list(g, n, "ends", 10, 2, &en));
    KILN_TRY(get_list(g, n, "axes", 10, 3, &ax));
    KILN_TRY(get_list(g, n, "steps", 10, 4, &sp));
    if (n->opset < 10 && (st.state == 0 || en.state == 0))
        return kiln_error(KILN_ERR_INVALID_ARGUMENT, "Slice: attributes 'starts' and 'ends' are required");
    if (x->ndim < 0) return set_dims_unknown(g, n, 0, x->dtype, -1);
    int k = ax.state == 1 ? ax.count : st.state == 1 ? st.count : en.state == 1 ? en.count : sp.state == 1 ? sp.count : -1;
    if (k < 0) {
        kiln_value *s = kiln_node_input(g, n, 1);
        if (s && s->ndim == 1 && s->dims[0].sym == 0) k = (int)s->dims[0].value;
    }
    if (ax.state == 2 || k < 0) return set_dims_unknown(g, n, 0, x->dtype, x->ndim);
    if ((st.state == 1 && st.count != k) || (en.state == 1 && en.count != k) || (sp.state == 1 && sp.count != k))
        return kiln_error(KILN_ERR_INVALID_ARGUMENT, "Slice: starts, ends, axes and steps differ in length");
    if (k > x->ndim) return kiln_error(KILN_ERR_INVALID_ARGUMENT, "Slice: %d axes for rank %d", k, x->ndim);
    int axes[KILN_MAX_DIMS];
    if (ax.state == 1) KILN_TRY(kiln_axes_normalize("Slice", k, ax.vals, x->ndim, axes));
    else
        for (int j = 0; j < k; j++) axes[j] = j;
    kiln_dim out[KILN_MAX_DIMS];
    memcpy(out, x->dims, (size_t)x->ndim * sizeof *out);
    bool vals_known = st.state == 1 && en.state == 1 && sp.state != 2;
    /* ends computed from shapes: x[0:seq] along an axis is seq long (for a valid model, seq <= dim) */
    kiln_dim ends[KILN_SHAPE_VALUE_MAX];
    int ne;
    bool sym_ends = !vals_known && st.state == 1 && sp.state != 2 && en.state == 2 &&
                    kiln_shape_value_input(g, n, 2, ends, KILN_SHAPE_VALUE_MAX, &ne) && ne == k;
    for (int j = 0; j < k; j++) {
        kiln_dim d = x->dims[axes[j]];
        int64_t step = sp.state == 1 ? sp.vals[j] : 1;
        if (step == 0) return kiln_error(KILN_ERR_INVALID_ARGUMENT, "Slice: step 0 on axis %d", axes[j]);
        if (sym_ends && ends[j].sym > 0 && st.vals[j] == 0 && step == 1) {
            out[axes[j]] = ends[j];
        } else if (!vals_known) {
            out[axes[j]] = KILN_DIM_UNKNOWN;
        } else if (d.sym == 0) {
            int64_t first, count;
            kiln_slice_axis(d.value, st.vals[j], en.vals[j], step, &first, &count);
            out[axes[j]] = kiln_dim_static(count);
        } else {
            /* a whole-axis slice of a symbolic dim keeps it */
            bool whole = step == 1 && st.vals[j] == 0 && en.vals[j] >= INT32_MAX;
            out[axes[j]] = whole ? d : KILN_DIM_UNKNOWN;
        }
    }
    kiln_infer_set(g, n, 0, x->dtype, x->ndim, out);
    return KILN_OK;
}

kiln_status kiln_infer_gather(kiln_graph *g, kiln_node *n) {
    KILN_TRY(shp_need_input(g, n, 0, "data"));
    KILN_TRY(shp_need_input(g, n, 1, "indices"));
    KILN_TRY(shp_check_int_input(g, n, 1, "indices", true));
    kiln_value *x = kiln_node_input(g, n, 0), *idx = kiln_node_input(g, n, 1);
    if (x->ndim < 0 || idx->ndim < 0) return set_dims_unknown(g, n, 0, x->dtype, -1);
    if (x->ndim == 0) return kiln_error(KILN_ERR_SHAPE, "Gather: data must have rank >= 1");
    int axis;
    KILN_TRY(kiln_axis_normalize(kiln_attr_int(n, "axis", 0), x->ndim, &axis));
    int r = x->ndim - 1 + idx->ndim;
    if (r > KILN_MAX_DIMS) return kiln_error(KILN_ERR_UNSUPPORTED, "Gather: output rank %d exceeds %d", r, KILN_MAX_DIMS);
    kiln_dim out[KILN_MAX_DIMS];
    int o = 0;
    for (int i = 0; i < axis; i++) out[o++] = x->dims[i];
    for (int i = 0; i < idx->ndim; i++) out[o++] = idx->dims[i];
    for (int i = axis + 1; i < x->ndim; i++) out[o++] = x->dims[i];
    kiln_infer_set(g, n, 0, x->dtype, r, out);
    return KILN_OK;
}

kiln_status kiln_infer_gather_elements(kiln_graph *g, kiln_node *n) {
    KILN_TRY(shp_need_input(g, n, 0, "data"));
    KILN_TRY(shp_need_input(g, n, 1, "indices"));
    KILN_TRY(shp_check_int_input(g, n, 1, "indices", true));
    kiln_value *x = kiln_node_input(g, n, 0), *idx = kiln_node_input(g, n, 1);
    if (x->ndim >= 0 && idx->ndim >= 0 && x->ndim != idx->ndim)
        return kiln_error(KILN_ERR_SHAPE, "GatherElements: data has rank %d but indices rank %d", x->ndim, idx->ndim);
    int rank = x->ndim >= 0 ? x->ndim : idx->ndim;
    if (rank >= 0) {
        int axis;
        KILN_TRY(kiln_axis_normalize(kiln_attr_int(n, "axis", 0), rank, &axis));
    }
    if (idx->ndim < 0) return set_dims_unknown(g, n, 0, x->dtype, rank);
    kiln_infer_set(g, n, 0, x->dtype, idx->ndim, idx->dims);
    return KILN_OK;
}

kiln_status kiln_infer_gather_nd(kiln_graph *g, kiln_node *n) {
    KILN_TRY(shp_need_input(g, n, 0, "data"));
    KILN_TRY(shp_need_input(g, n, 1, "indices"));
    KILN_TRY(shp_check_int_input(g, n, 1, "indices", false));
    kiln_value *x = kiln_node_input(g, n, 0), *idx = kiln_node_input(g, n, 1);
    int64_t b = n->opset >= 12 ? kiln_attr_int(n, "batch_dims", 0) : 0;
    if (x->ndim < 0 || idx->ndim < 0) return set_dims_unknown(g, n, 0, x->dtype, -1);
    int q = idx->ndim, r = x->ndim;
    if (q < 1 || r < 1) return kiln_error(KILN_ERR_SHAPE, "GatherND: data and indices must have rank >= 1");
    if (b < 0 || b >= q || b >= r)
        return kiln_error(KILN_ERR_INVALID_ARGUMENT, "GatherND: batch_dims %lld is invalid for ranks %d and %d", (long long)b, r, q);
    kiln_dim last = idx->dims[q - 1];
    if (last.sym != 0) return set_dims_unknown(g, n, 0, x->dtype, -1);
    if (last.value < 1 || b + last.value > r)
        return kiln_error(KILN_ERR_SHAPE, "GatherND: index tuples of length %lld do not fit data of rank %d with %lld batch dims",
                          (long long)last.value, r, (long long)b);
    int orank = q - 1 + r - (int)(b + last.value);
    if (orank > KILN_MAX_DIMS) return kiln_error(KILN_ERR_UNSUPPORTED, "GatherND: output rank %d exceeds %d", orank, KILN_MAX_DIMS);
    kiln_dim out[KILN_MAX_DIMS];
    int o = 0;
    for (int i = 0; i < q - 1; i++) out[o++] = i < b ? shp_dim_merge(idx->dims[i], x->dims[i]) : idx->dims[i];
    for (int i = (int)(b + last.value); i < r; i++) out[o++] = x->dims[i];
    kiln_infer_set(g, n, 0, x->dtype, orank, out);
    return KILN_OK;
}

/* ScatterND, ScatterElements and Scatter: the output is the data input with some elements replaced. */
kiln_status kiln_infer_scatter(kiln_graph *g, kiln_node *n) {
    KILN_TRY(shp_need_input(g, n, 0, "data"));
    KILN_TRY(shp_need_input(g, n, 1, "indices"));
    KILN_TRY(shp_need_input(g, n, 2, "updates"));
    bool nd = !strcmp(n->op_type, "ScatterND");
    KILN_TRY(shp_check_int_input(g, n, 1, "indices", !nd));
    kiln_value *x = kiln_node_input(g, n, 0), *idx = kiln_node_input(g, n, 1), *up = kiln_node_input(g, n, 2);
    if (up->dtype != KILN_UNDEFINED && x->dtype != KILN_UNDEFINED && up->dtype != x->dtype)
        return kiln_error(KILN_ERR_INVALID_ARGUMENT, "%s: updates are %s but data is %s", n->op_type,
                          kiln_dtype_name(up->dtype), kiln_dtype_name(x->dtype));
    const char *red = n->opset >= 16 ? kiln_attr_string(n, "reduction", "none") : "none";
    if (strcmp(red, "none") && strcmp(red, "add") && strcmp(red, "mul") && strcmp(red, "max") && strcmp(red, "min"))
        return kiln_error(KILN_ERR_INVALID_ARGUMENT, "%s: unknown reduction '%s'", n->op_type, red);
    if (!nd && idx->ndim >= 0 && up->ndim >= 0) {
        if (idx->ndim != up->ndim)
            return kiln_error(KILN_ERR_SHAPE, "%s: indices have rank %d but updates rank %d", n->op_type, idx->ndim, up->ndim);
        for (int i = 0; i < idx->ndim; i++)
            if (idx->dims[i].sym == 0 && up->dims[i].sym == 0 && idx->dims[i].value != up->dims[i].value)
                return kiln_error(KILN_ERR_SHAPE, "%s: indices and updates differ in dimension %d", n->op_type, i);
    }
    kiln_infer_copy(g, n, 0, 0);
    return KILN_OK;
}

static kiln_status check_pad_mode(const kiln_node *n, const char *mode) {
    if (!strcmp(mode, "constant") || !strcmp(mode, "reflect") || !strcmp(mode, "edge") ||
        (!strcmp(mode, "wrap") && n->opset >= 19))
        return KILN_OK;
    return kiln_error(KILN_ERR_INVALID_ARGUMENT, "Pad: unknown mode '%s' for opset %d", mode, n->opset);
}

/* Pad: pads attribute ("paddings" in opset 1) before opset 11, then pads input, and from opset 18 an
 * optional axes input. Negative pads crop. */
kiln_status kiln_infer_pad(kiln_graph *g, kiln_node *n) {
    KILN_TRY(shp_need_input(g, n, 0, "data"));
    kiln_value *x = kiln_node_input(g, n, 0);
    KILN_TRY(check_pad_mode(n, kiln_attr_string(n, "mode", "constant")));
    int_list pads, axl;
    KILN_TRY(get_list(g, n, n->opset < 2 ? "paddings" : "pads", 11, 1, &pads));
    if (n->opset >= 11) KILN_TRY(shp_need_input(g, n, 1, "pads"));
    else if (pads.state == 0) return kiln_error(KILN_ERR_INVALID_ARGUMENT, "Pad: attribute 'pads' is required");
    axl.state = 0;
    if (n->opset >= 18) KILN_TRY(get_list(g, n, "axes", 18, 3, &axl));
    if (x->ndim < 0) return set_dims_unknown(g, n, 0, x->dtype, -1);
    if (pads.state != 1 || axl.state == 2) return set_dims_unknown(g, n, 0, x->dtype, x->ndim);
    int naxes = axl.state == 1 ? axl.count : x->ndim;
    int axes[KILN_MAX_DIMS];
    if (naxes > x->ndim) return kiln_error(KILN_ERR_INVALID_ARGUMENT, "Pad: %d axes for rank %d", naxes, x->ndim);
    if (axl.state == 1) KILN_TRY(kiln_axes_normalize("Pad", naxes, axl.vals, x->ndim, axes));
    else
        for (int j = 0; j < naxes; j++) axes[j] = j;
    if (pads.count != 2 * naxes)
        return kiln_error(KILN_ERR_INVALID_ARGUMENT, "Pad: %d pads for %d axes (need %d)", pads.count, naxes, 2 * naxes);
    kiln_dim out[KILN_MAX_DIMS];
    memcpy(out, x->dims, (size_t)x->ndim * sizeof *out);
    for (int j = 0; j < naxes; j++) {
        const int64_t lim = INT64_C(1) << 40;
        if (pads.vals[j] > lim || pads.vals[j] < -lim || pads.vals[j + naxes] > lim || pads.vals[j + naxes] < -lim)
            return kiln_error(KILN_ERR_INVALID_ARGUMENT, "Pad: pads %lld,%lld are out of range", (long long)pads.vals[j],
                              (long long)pads.vals[j + naxes]);
        int64_t add = pads.vals[j] + pads.vals[j + naxes];
        kiln_dim d = x->dims[axes[j]];
        if (d.sym == 0) {
            if (d.value + add < 0)
                return kiln_error(KILN_ERR_SHAPE, "Pad: pads %lld,%lld make axis %d of size %lld negative",
                                  (long long)pads.vals[j], (long long)pads.vals[j + naxes], axes[j], (long long)d.value);
            out[axes[j]] = kiln_dim_static(d.value + add);
        } else {
            out[axes[j]] = pads.vals[j] == 0 && pads.vals[j + naxes] == 0 ? d : KILN_DIM_UNKNOWN;
        }
    }
    kiln_infer_set(g, n, 0, x->dtype, x->ndim, out);
    return KILN_OK;
}

/* Reads constant input i (scales) as doubles into vals (at most cap); *count is -1 when the input is
 * not constant, else its length. */
static kiln_status const_floats(kiln_graph *g, kiln_node *n, int i, double *vals, int cap, int *count) {
    const kiln_tensor *t;
    *count = -1;
    if (!kiln_infer_const_input(g, n, i, &t)) return KILN_OK;
    int64_t c = kiln_tensor_numel(t);
    if (t->ndim > 1 || c > cap)
        return kiln_error(KILN_ERR_INVALID_ARGUMENT, "%s: 'scales' must be a 1-D tensor of at most %d values", n->op_type, cap);
    for (int64_t j = 0; j < c; j++) vals[j] = kiln_tensor_get_f64(t, j);
    *count = (int)c;
    return KILN_OK;
}

/* Resize (opset 10: X, scales; 11+: X, roi, scales, sizes; axes and keep_aspect_ratio_policy from 18)
 * and Upsample (scales attribute in opset 7, input from 9). */
kiln_status kiln_infer_resize(kiln_graph *g, kiln_node *n) {
    KILN_TRY(shp_need_input(g, n, 0, "X"));
    kiln_value *x = kiln_node_input(g, n, 0);
    bool upsample = !strcmp(n->op_type, "Upsample");
    const char *mode = kiln_attr_string(n, "mode", "nearest");
    if (strcmp(mode, "nearest") && strcmp(mode, "linear") && (upsample || strcmp(mode, "cubic")))
        return kiln_error(KILN_ERR_INVALID_ARGUMENT, "%s: unknown mode '%s'", n->op_type, mode);
    int scales_in = upsample ? (n->opset >= 9 ? 1 : -1) : n->opset >= 11 ? 2 : 1;
    int sizes_in = !upsample && n->opset >= 11 ? 3 : -1;
    /* each of scales/sizes: -2 not constant, -1 absent, else its (constant) length (0 = empty) */
    double scales[KILN_MAX_DIMS];
    int nscales = -1, nsizes = -1;
    if (scales_in < 0) {
        const float *f = kiln_attr_floats(n, "scales", &nscales);
        if (!f) return kiln_error(KILN_ERR_INVALID_ARGUMENT, "Upsample: attribute 'scales' is required");
        if (nscales > KILN_MAX_DIMS) return kiln_error(KILN_ERR_INVALID_ARGUMENT, "Upsample: %d scales", nscales);
        for (int j = 0; j < nscales; j++) scales[j] = f[j];
    } else if (kiln_node_input(g, n, scales_in)) {
        KILN_TRY(const_floats(g, n, scales_in, scales, KILN_MAX_DIMS, &nscales));
        if (nscales < 0) nscales = -2;
    }
    int_list sizes = {0};
    if (sizes_in >= 0) {
        KILN_TRY(get_list(g, n, "sizes", 0, sizes_in, &sizes));
        nsizes = sizes.state == 0 ? -1 : sizes.state == 2 ? -2 : sizes.count;
    }
    if (nscales > 0 && nsizes > 0)
        return kiln_error(KILN_ERR_INVALID_ARGUMENT, "%s: only one of 'scales' and 'sizes' may be given", n->op_type);
    if (nscales != -2 && nsizes != -2 && nscales <= 0 && nsizes <= 0)
        return kiln_error(KILN_ERR_INVALID_ARGUMENT, "%s: one of 'scales' and 'sizes' is required", n->op_type);
    bool use_sizes = nsizes > 0;
    int have = use_sizes ? nsizes : nscales > 0 ? nscales : -1;
    int nax;
    const int64_t *axattr = !upsample && n->opset >= 18 ? kiln_attr_ints(n, "axes", &nax) : NULL;
    int rank = x->ndim >= 0 ? x->ndim : (!axattr && have >= 0 ? have : -1);
    if (rank < 0) return set_dims_unknown(g, n, 0, x->dtype, -1);
    int axes[KILN_MAX_DIMS], naxes = axattr ? nax : rank;
    if (axattr) KILN_TRY(kiln_axes_normalize(n->op_type, nax, axattr, rank, axes));
    else
        for (int j = 0; j < rank; j++) axes[j] = j;
    if (have >= 0 && have != naxes)
        return kiln_error(KILN_ERR_INVALID_ARGUMENT, "%s: %d %s for %d axes", n->op_type, have,
                          use_sizes ? "sizes" : "scales", naxes);
    kiln_dim out[KILN_MAX_DIMS];
    for (int i = 0; i < rank; i++) out[i] = x->ndim >= 0 ? x->dims[i] : KILN_DIM_UNKNOWN;
    const char *policy = n->opset >= 18 ? kiln_attr_string(n, "keep_aspect_ratio_policy", "stretch") : "stretch";
    if (have < 0) {
        /* sizes computed from shapes: their (possibly symbolic) elements are the output dims */
        kiln_dim el[KILN_SHAPE_VALUE_MAX];
        int c;
        bool sym = nsizes == -2 && !strcmp(policy, "stretch") &&
                   kiln_shape_value_input(g, n, sizes_in, el, KILN_SHAPE_VALUE_MAX, &c) && c == naxes;
        for (int j = 0; j < naxes; j++) out[axes[j]] = sym ? el[j] : KILN_DIM_UNKNOWN;
    } else if (use_sizes) {
        for (int j = 0; j < naxes; j++)
            if (sizes.vals[j] < 0)
                return kiln_error(KILN_ERR_INVALID_ARGUMENT, "Resize: negative output size %lld", (long long)sizes.vals[j]);
        bool all_static = x->ndim >= 0;
        for (int j = 0; j < naxes && all_static; j++) all_static = x->dims[axes[j]].sym == 0;
        if (!strcmp(policy, "stretch")) {
            for (int j = 0; j < naxes; j++) out[axes[j]] = kiln_dim_static(sizes.vals[j]);
        } else if (all_static) {
            int64_t in[KILN_MAX_DIMS], o[KILN_MAX_DIMS];
            double sc[KILN_MAX_DIMS];
            for (int i = 0; i < rank; i++) in[i] = x->dims[i].value;
            KILN_TRY(kiln_resize_sizes(rank, in, naxes, axes, sizes.vals, policy, o, sc));
            for (int j = 0; j < naxes; j++) out[axes[j]] = kiln_dim_static(o[axes[j]]);
        } else {
            for (int j = 0; j < naxes; j++) out[axes[j]] = KILN_DIM_UNKNOWN;
        }
    } else {
        for (int j = 0; j < naxes; j++) {
            if (!(scales[j] > 0)) return kiln_error(KILN_ERR_INVALID_ARGUMENT, "%s: scale %g must be positive", n->op_type, scales[j]);
            kiln_dim d = out[axes[j]];
            out[axes[j]] = d.sym == 0 ? kiln_dim_static(kiln_resize_dim(d.value, scales[j])) : scales[j] == 1.0 ? d : KILN_DIM_UNKNOWN;
        }
    }
    kiln_infer_set(g, n, 0, x->dtype, rank, out);
    return KILN_OK;
}
