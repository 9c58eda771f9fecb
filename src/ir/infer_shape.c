/* infer_shape.c — shape and type inference for the shape op family: the schema table, and the ops
 * that only rearrange or re-describe data (Shape, Size, Reshape, Flatten, Squeeze, Unsqueeze,
 * Transpose, Concat, Split, Expand, Tile, Identity, Dropout, DepthToSpace, SpaceToDepth). The
 * indexing ops (Slice, Gather*, Scatter*, Pad, Resize, Upsample) are in infer_shape_index.c.
 *
 * Symbolic dims are carried wherever the output dim provably equals an input dim. Shape-like inputs
 * (Reshape's shape, Expand's shape, Tile's repeats, Squeeze/Unsqueeze/Split lists) are read when
 * they are constants or computed from shapes (kiln_shape_value), giving static or symbolic dims. */
#include "ir/infer_shape_util.h"
#include "ir/shape_calc.h"
#include "ir/shape_value.h"

#include <string.h>

static kiln_status set_unknown_rank(kiln_graph *g, kiln_node *n, int out, kiln_dtype dt) {
    kiln_infer_set(g, n, out, dt, -1, NULL);
    return KILN_OK;
}

/* Shape: int64 [end - start] (start/end attributes from opset 15). */
static kiln_status infer_shape(kiln_graph *g, kiln_node *n) {
    KILN_TRY(shp_need_input(g, n, 0, "data"));
    kiln_value *x = kiln_node_input(g, n, 0);
    kiln_dim d = KILN_DIM_UNKNOWN;
    if (x->ndim >= 0) {
        int64_t start, end;
        kiln_shape_op_range(n, x->ndim, &start, &end);
        d = kiln_dim_static(end > start ? end - start : 0);
    }
    kiln_infer_set(g, n, 0, KILN_I64, 1, &d);
    return KILN_OK;
}

static kiln_status infer_size(kiln_graph *g, kiln_node *n) {
    KILN_TRY(shp_need_input(g, n, 0, "data"));
    kiln_infer_set(g, n, 0, KILN_I64, 0, NULL);
    return KILN_OK;
}

static kiln_status infer_identity(kiln_graph *g, kiln_node *n) {
    KILN_TRY(shp_need_input(g, n, 0, "input"));
    kiln_infer_copy(g, n, 0, 0);
    return KILN_OK;
}

/* The dim a Reshape -1 stands for: the input's element count divided by the other output dims, with
 * matching symbolic factors cancelled. Unknown when it cannot be decided at build time. */
static kiln_status reshape_infer_minus1(const kiln_value *x, int k, const kiln_dim *out, int skip, kiln_dim *res) {
    bool used[KILN_MAX_DIMS] = {false};
    int64_t num = 1, den = 1;
    int nsym = 0;
    kiln_dim sym = KILN_DIM_UNKNOWN;
    *res = KILN_DIM_UNKNOWN;
    for (int j = 0; j < k; j++) {
        if (j == skip) continue;
        if (out[j].sym == 0) {
            if (out[j].value && den > INT64_MAX / out[j].value) return KILN_OK;
            den *= out[j].value;
            continue;
        }
        int match = -1;
        for (int i = 0; i < x->ndim && match < 0; i++)
            if (!used[i] && out[j].sym > 0 && x->dims[i].sym == out[j].sym) match = i;
        if (match < 0) return KILN_OK; /* an output factor we cannot cancel */
        used[match] = true;
    }
    for (int i = 0; i < x->ndim; i++) {
        if (used[i]) continue;
        if (x->dims[i].sym < 0) return KILN_OK;
        if (x->dims[i].sym > 0) {
            nsym++;
            sym = x->dims[i];
        } else {
            if (x->dims[i].value && num > INT64_MAX / x->dims[i].value) return KILN_OK;
            num *= x->dims[i].value;
        }
    }
    if (den == 0) return KILN_OK;
    if (nsym == 0) {
        if (num % den)
            return kiln_error(KILN_ERR_SHAPE, "Reshape: %lld elements cannot be reshaped with the other dims' product %lld",
                              (long long)num, (long long)den);
        *res = kiln_dim_static(num / den);
    } else if (nsym == 1 && num == den) {
        *res = sym;
    }
    return KILN_OK;
}

/* Reshape: shape input (attribute before opset 5); 0 copies the input dim (unless allowzero), -1 is
 * inferred. */
static kiln_status infer_reshape(kiln_graph *g, kiln_node *n) {
    KILN_TRY(shp_need_input(g, n, 0, "data"));
    kiln_value *x = kiln_node_input(g, n, 0);
    kiln_dim el[KILN_SHAPE_VALUE_MAX]; /* the shape's elements, possibly symbolic or unknown */
    int k = -1;
    bool allowzero = n->opset >= 14 && kiln_attr_int(n, "allowzero", 0) != 0;
    if (n->opset < 5) {
        const int64_t *a = kiln_attr_ints(n, "shape", &k);
        if (!a) return kiln_error(KILN_ERR_INVALID_ARGUMENT, "Reshape: attribute 'shape' is missing");
        if (k > KILN_MAX_DIMS) return kiln_error(KILN_ERR_UNSUPPORTED, "Reshape: output rank %d exceeds %d", k, KILN_MAX_DIMS);
        for (int j = 0; j < k; j++) el[j] = kiln_dim_static(a[j]);
    } else {
        KILN_TRY(shp_need_input(g, n, 1, "shape"));
        KILN_TRY(shp_check_int_input(g, n, 1, "shape", false));
        if (!kiln_shape_value_input(g, n, 1, el, KILN_SHAPE_VALUE_MAX, &k)) return set_unknown_rank(g, n, 0, x->dtype);
        if (k > KILN_MAX_DIMS) return kiln_error(KILN_ERR_UNSUPPORTED, "Reshape: output rank %d exceeds %d", k, KILN_MAX_DIMS);
    }
    kiln_dim out[KILN_MAX_DIMS];
    int minus1 = -1;
    bool has_zero = false;
    for (int j = 0; j < k; j++) {
        int64_t v = el[j].value;
        if (el[j].sym != 0) {
            out[j] = el[j]; /* a symbolic size (taken to be > 0), or unknown */
        } else if (v == -1) {
            if (minus1 >= 0) return kiln_error(KILN_ERR_INVALID_ARGUMENT, "Reshape: more than one -1 in shape");
            minus1 = j;
            out[j] = KILN_DIM_UNKNOWN;
        } else if (v < -1) {
            return kiln_error(KILN_ERR_INVALID_ARGUMENT, "Reshape: invalid dimension %lld in shape", (long long)v);
        } else if (v == 0 && !allowzero) {
            if (x->ndim >= 0 && j >= x->ndim)
                return kiln_error(KILN_ERR_SHAPE, "Reshape: shape[%d] = 0 copies a dimension the rank-%d input lacks", j, x->ndim);
            out[j] = x->ndim >= 0 ? x->dims[j] : KILN_DIM_UNKNOWN;
        } else {
            has_zero |= v == 0;
            out[j] = kiln_dim_static(v);
        }
    }
    if (has_zero && minus1 >= 0)
        return kiln_error(KILN_ERR_INVALID_ARGUMENT, "Reshape: allowzero shape has both 0 and -1");
    if (x->ndim >= 0) {
        if (minus1 >= 0) {
            KILN_TRY(reshape_infer_minus1(x, k, out, minus1, &out[minus1]));
        } else {
            kiln_dim a = shp_dims_prod(x->dims, 0, x->ndim), b = shp_dims_prod(out, 0, k);
            if (a.sym == 0 && b.sym == 0 && a.value != b.value)
                return kiln_error(KILN_ERR_SHAPE, "Reshape: cannot reshape %lld elements into %lld", (long long)a.value,
                                  (long long)b.value);
        }
    }
    kiln_infer_set(g, n, 0, x->dtype, k, out);
    return KILN_OK;
}

static kiln_status infer_flatten(kiln_graph *g, kiln_node *n) {
    KILN_TRY(shp_need_input(g, n, 0, "input"));
    kiln_value *x = kiln_node_input(g, n, 0);
    kiln_dim out[2] = {KILN_DIM_UNKNOWN, KILN_DIM_UNKNOWN};
    if (x->ndim >= 0) {
        int64_t axis = kiln_attr_int(n, "axis", 1);
        if (axis < -x->ndim || axis > x->ndim || (axis < 0 && n->opset < 11))
            return kiln_error(KILN_ERR_INVALID_ARGUMENT, "Flatten: axis %lld is out of range for rank %d", (long long)axis, x->ndim);
        if (axis < 0) axis += x->ndim;
        out[0] = shp_dims_prod(x->dims, 0, (int)axis);
        out[1] = shp_dims_prod(x->dims, (int)axis, x->ndim);
    }
    kiln_infer_set(g, n, 0, x->dtype, 2, out);
    return KILN_OK;
}

/* Reads Squeeze/Unsqueeze/Split-style integer lists: the attribute `name` before opset `input_from`,
 * else input `idx` when its values are known at build time (see kiln_shape_value). *known is false
 * when they are not (or there are more than cap); *present is false when there is no list at all. */
static kiln_status read_int_list(kiln_graph *g, kiln_node *n, const char *name, int input_from, int idx,
                                 int64_t *vals, int cap, int *count, bool *known, bool *present) {
    *count = 0;
    *known = true;
    *present = true;
    if (n->opset < input_from) {
        const int64_t *a = kiln_attr_ints(n, name, count);
        if (!a) {
            *present = false;
            return KILN_OK;
        }
        if (*count > cap) return kiln_error(KILN_ERR_UNSUPPORTED, "%s: '%s' has %d entries (at most %d)", n->op_type, name, *count, cap);
        memcpy(vals, a, (size_t)*count * sizeof *vals);
        return KILN_OK;
    }
    if (!kiln_node_input(g, n, idx)) {
        *present = false;
        return KILN_OK;
    }
    KILN_TRY(shp_check_int_input(g, n, idx, name, false));
    kiln_dim el[KILN_SHAPE_VALUE_MAX];
    int c;
    if (!kiln_shape_value_input(g, n, idx, el, KILN_SHAPE_VALUE_MAX, &c) || c > cap || !kiln_shape_value_static(el, c, vals)) {
        *known = false;
        return KILN_OK;
    }
    *count = c;
    return KILN_OK;
}

static kiln_status infer_squeeze(kiln_graph *g, kiln_node *n) {
    KILN_TRY(shp_need_input(g, n, 0, "data"));
    kiln_value *x = kiln_node_input(g, n, 0);
    int64_t axes[KILN_MAX_DIMS];
    int k;
    bool known, present;
    KILN_TRY(read_int_list(g, n, "axes", 13, 1, axes, KILN_MAX_DIMS, &k, &known, &present));
    if (x->ndim < 0 || !known) return set_unknown_rank(g, n, 0, x->dtype);
    bool drop[KILN_MAX_DIMS] = {false};
    if (present) {
        int ax[KILN_MAX_DIMS];
        KILN_TRY(kiln_axes_normalize("Squeeze", k, axes, x->ndim, ax));
        for (int j = 0; j < k; j++) {
            kiln_dim d = x->dims[ax[j]];
            if (d.sym == 0 && d.value != 1)
                return kiln_error(KILN_ERR_SHAPE, "Squeeze: dimension %d has size %lld, not 1", ax[j], (long long)d.value);
            drop[ax[j]] = true;
        }
    } else {
        for (int i = 0; i < x->ndim; i++) {
            if (x->dims[i].sym != 0) return set_unknown_rank(g, n, 0, x->dtype);
            drop[i] = x->dims[i].value == 1;
        }
    }
    kiln_dim out[KILN_MAX_DIMS];
    int r = 0;
    for (int i = 0; i < x->ndim; i++)
        if (!drop[i]) out[r++] = x->dims[i];
    kiln_infer_set(g, n, 0, x->dtype, r, out);
    return KILN_OK;
}

static kiln_status infer_unsqueeze(kiln_graph *g, kiln_node *n) {
    KILN_TRY(shp_need_input(g, n, 0, "data"));
    kiln_value *x = kiln_node_input(g, n, 0);
    int64_t axes[KILN_MAX_DIMS];
    int k;
    bool known, present;
    KILN_TRY(read_int_list(g, n, "axes", 13, 1, axes, KILN_MAX_DIMS, &k, &known, &present));
    if (!present) return kiln_error(KILN_ERR_INVALID_ARGUMENT, "Unsqueeze: 'axes' is required");
    if (x->ndim < 0 || !known) return set_unknown_rank(g, n, 0, x->dtype);
    int r = x->ndim + k;
    if (r > KILN_MAX_DIMS) return kiln_error(KILN_ERR_UNSUPPORTED, "Unsqueeze: output rank %d exceeds %d", r, KILN_MAX_DIMS);
    int ax[KILN_MAX_DIMS];
    KILN_TRY(kiln_axes_normalize("Unsqueeze", k, axes, r, ax));
    bool ins[KILN_MAX_DIMS] = {false};
    for (int j = 0; j < k; j++) ins[ax[j]] = true;
    kiln_dim out[KILN_MAX_DIMS];
    for (int i = 0, s = 0; i < r; i++) out[i] = ins[i] ? kiln_dim_static(1) : x->dims[s++];
    kiln_infer_set(g, n, 0, x->dtype, r, out);
    return KILN_OK;
}

static kiln_status infer_transpose(kiln_graph *g, kiln_node *n) {
    KILN_TRY(shp_need_input(g, n, 0, "data"));
    kiln_value *x = kiln_node_input(g, n, 0);
    int np;
    const int64_t *perm = kiln_attr_ints(n, "perm", &np);
    if (x->ndim < 0) {
        if (!perm) return set_unknown_rank(g, n, 0, x->dtype);
        kiln_dim d[KILN_MAX_DIMS];
        if (np > KILN_MAX_DIMS) return kiln_error(KILN_ERR_UNSUPPORTED, "Transpose: rank %d exceeds %d", np, KILN_MAX_DIMS);
        for (int i = 0; i < np; i++) d[i] = KILN_DIM_UNKNOWN;
        kiln_infer_set(g, n, 0, x->dtype, np, d);
        return KILN_OK;
    }
    if (perm && np != x->ndim)
        return kiln_error(KILN_ERR_INVALID_ARGUMENT, "Transpose: perm has %d entries for rank %d", np, x->ndim);
    kiln_dim out[KILN_MAX_DIMS];
    bool seen[KILN_MAX_DIMS] = {false};
    for (int i = 0; i < x->ndim; i++) {
        int64_t p = perm ? perm[i] : x->ndim - 1 - i;
        if (p < 0 || p >= x->ndim || seen[p])
            return kiln_error(KILN_ERR_INVALID_ARGUMENT, "Transpose: perm is not a permutation of 0..%d", x->ndim - 1);
        seen[p] = true;
        out[i] = x->dims[p];
    }
    kiln_infer_set(g, n, 0, x->dtype, x->ndim, out);
    return KILN_OK;
}

static kiln_status infer_concat(kiln_graph *g, kiln_node *n) {
    const kiln_attr *a = kiln_node_attr(n, "axis");
    if (!a) return kiln_error(KILN_ERR_INVALID_ARGUMENT, "Concat: attribute 'axis' is required");
    int rank = -1;
    kiln_dtype dt = KILN_UNDEFINED;
    int nin = 0;
    for (int k = 0; k < n->ninputs; k++) {
        kiln_value *v = kiln_node_input(g, n, k);
        if (!v) continue;
        nin++;
        if (v->dtype != KILN_UNDEFINED) {
            if (dt != KILN_UNDEFINED && dt != v->dtype)
                return kiln_error(KILN_ERR_INVALID_ARGUMENT, "Concat: inputs mix %s and %s", kiln_dtype_name(dt),
                                  kiln_dtype_name(v->dtype));
            dt = v->dtype;
        }
        if (v->ndim >= 0) {
            if (rank >= 0 && rank != v->ndim)
                return kiln_error(KILN_ERR_SHAPE, "Concat: inputs have ranks %d and %d", rank, v->ndim);
            rank = v->ndim;
        }
    }
    if (nin == 0) return kiln_error(KILN_ERR_INVALID_ARGUMENT, "Concat: no inputs");
    if (rank < 0) return set_unknown_rank(g, n, 0, dt);
    int axis;
    KILN_TRY(kiln_axis_normalize(a->i, rank, &axis));
    kiln_dim out[KILN_MAX_DIMS];
    for (int i = 0; i < rank; i++) out[i] = KILN_DIM_UNKNOWN;
    int64_t sum = 0;
    int nonstatic = 0;
    kiln_dim only = KILN_DIM_UNKNOWN;
    bool first = true;
    for (int k = 0; k < n->ninputs; k++) {
        kiln_value *v = kiln_node_input(g, n, k);
        if (!v) continue;
        if (v->ndim < 0) {
            nonstatic += 2; /* unknown rank: the axis size is unknown */
            continue;
        }
        for (int i = 0; i < rank; i++) {
            if (i == axis) continue;
            kiln_dim d = v->dims[i];
            if (!first && out[i].sym == 0 && d.sym == 0 && out[i].value != d.value)
                return kiln_error(KILN_ERR_SHAPE, "Concat: inputs differ in dimension %d (%lld vs %lld)", i,
                                  (long long)out[i].value, (long long)d.value);
            out[i] = first ? d : shp_dim_merge(out[i], d);
        }
        first = false;
        if (v->dims[axis].sym == 0 && sum <= INT64_MAX - v->dims[axis].value) {
            sum += v->dims[axis].value;
        } else {
            nonstatic++;
            only = v->dims[axis];
        }
    }
    out[axis] = nonstatic == 0 ? kiln_dim_static(sum) : (nonstatic == 1 && sum == 0) ? only : KILN_DIM_UNKNOWN;
    kiln_infer_set(g, n, 0, dt, rank, out);
    return KILN_OK;
}

static kiln_status infer_split(kiln_graph *g, kiln_node *n) {
    KILN_TRY(shp_need_input(g, n, 0, "input"));
    kiln_value *x = kiln_node_input(g, n, 0);
    int nout = n->noutputs;
    if (x->ndim < 0) {
        for (int i = 0; i < nout; i++) set_unknown_rank(g, n, i, x->dtype);
        return KILN_OK;
    }
    int axis;
    KILN_TRY(kiln_axis_normalize(kiln_attr_int(n, "axis", 0), x->ndim, &axis));
    int64_t stack_sizes[64];
    int64_t *sizes = nout <= 64 ? stack_sizes : kiln_graph_alloc(g, (size_t)nout * sizeof *sizes);
    if (!sizes) return kiln_error(KILN_ERR_OUT_OF_MEMORY, "Split: out of memory");
    int k = 0;
    bool known = true, present = false;
    if (n->opset < 13) {
        const int64_t *a = kiln_attr_ints(n, "split", &k);
        if (a) {
            present = true;
            if (k != nout)
                return kiln_error(KILN_ERR_INVALID_ARGUMENT, "Split: 'split' has %d entries for %d outputs", k, nout);
            memcpy(sizes, a, (size_t)k * sizeof *sizes);
        }
    } else if (kiln_node_input(g, n, 1)) {
        KILN_TRY(read_int_list(g, n, "split", 13, 1, sizes, nout, &k, &known, &present));
        if (known && k != nout)
            return kiln_error(KILN_ERR_INVALID_ARGUMENT, "Split: 'split' has %d entries for %d outputs", k, nout);
    }
    kiln_dim dax = x->dims[axis];
    if (present && known) {
        int64_t total = 0;
        for (int i = 0; i < nout; i++) {
            if (sizes[i] < 0 || sizes[i] > INT64_MAX / nout)
                return kiln_error(KILN_ERR_INVALID_ARGUMENT, "Split: invalid split size %lld", (long long)sizes[i]);
            total += sizes[i];
        }
        if (dax.sym == 0 && total != dax.value)
            return kiln_error(KILN_ERR_SHAPE, "Split: split sizes sum to %lld but the axis has %lld", (long long)total,
                              (long long)dax.value);
    } else if (!present && dax.sym == 0) {
        int parts = nout;
        bool uneven = false;
        if (n->opset >= 18) {
            int64_t no = kiln_attr_int(n, "num_outputs", 0);
            if (!no) return kiln_error(KILN_ERR_INVALID_ARGUMENT, "Split: needs a 'split' input or 'num_outputs'");
            if (no != nout)
                return kiln_error(KILN_ERR_INVALID_ARGUMENT, "Split: num_outputs = %lld but the node has %d outputs", (long long)no, nout);
            uneven = true;
        }
        KILN_TRY(kiln_split_even("Split", dax.value, parts, uneven, sizes));
    } else {
        known = false;
    }
    for (int i = 0; i < nout; i++) {
        kiln_dim d[KILN_MAX_DIMS];
        memcpy(d, x->dims, (size_t)x->ndim * sizeof *d);
        d[axis] = (present && known) || (!present && dax.sym == 0) ? kiln_dim_static(sizes[i])
                  : nout == 1                                      ? dax
                                                                   : KILN_DIM_UNKNOWN;
        kiln_infer_set(g, n, i, x->dtype, x->ndim, d);
    }
    return KILN_OK;
}

/* Expand: bidirectional broadcast of the input shape with the shape input's elements (constant or
 * computed from shapes, possibly symbolic). */
static kiln_status infer_expand(kiln_graph *g, kiln_node *n) {
    KILN_TRY(shp_need_input(g, n, 0, "input"));
    KILN_TRY(shp_need_input(g, n, 1, "shape"));
    KILN_TRY(shp_check_int_input(g, n, 1, "shape", false));
    kiln_value *x = kiln_node_input(g, n, 0);
    kiln_dim el[KILN_SHAPE_VALUE_MAX];
    int k;
    if (x->ndim < 0 || !kiln_shape_value_input(g, n, 1, el, KILN_SHAPE_VALUE_MAX, &k)) return set_unknown_rank(g, n, 0, x->dtype);
    int r = k > x->ndim ? k : x->ndim;
    if (r > KILN_MAX_DIMS) return kiln_error(KILN_ERR_UNSUPPORTED, "Expand: output rank %d exceeds %d", r, KILN_MAX_DIMS);
    kiln_dim out[KILN_MAX_DIMS];
    for (int i = 0; i < r; i++) {
        int xi = i - (r - x->ndim), si = i - (r - k);
        kiln_dim a = xi >= 0 ? x->dims[xi] : kiln_dim_static(1), b = si >= 0 ? el[si] : kiln_dim_static(1);
        if (b.sym == 0 && b.value < 0)
            return kiln_error(KILN_ERR_INVALID_ARGUMENT, "Expand: negative dimension %lld in shape", (long long)b.value);
        if (shp_dim_is(b, 1) || shp_dim_eq(a, b)) out[i] = a;
        else if (shp_dim_is(a, 1)) out[i] = b;
        else if (a.sym == 0 && b.sym == 0)
            return kiln_error(KILN_ERR_SHAPE, "Expand: input dimension %lld cannot be expanded to %lld", (long long)a.value,
                              (long long)b.value);
        else if (a.sym == 0) out[i] = a; /* b must be 1 or equal to a */
        else if (b.sym == 0) out[i] = b; /* a must be 1 or equal to b */
        else out[i] = KILN_DIM_UNKNOWN;
    }
    kiln_infer_set(g, n, 0, x->dtype, r, out);
    return KILN_OK;
}

static kiln_status infer_tile(kiln_graph *g, kiln_node *n) {
    KILN_TRY(shp_need_input(g, n, 0, "input"));
    KILN_TRY(shp_need_input(g, n, 1, "repeats"));
    KILN_TRY(shp_check_int_input(g, n, 1, "repeats", false));
    kiln_value *x = kiln_node_input(g, n, 0);
    if (x->ndim < 0) return set_unknown_rank(g, n, 0, x->dtype);
    kiln_dim el[KILN_SHAPE_VALUE_MAX], out[KILN_MAX_DIMS];
    int k;
    bool known = kiln_shape_value_input(g, n, 1, el, KILN_SHAPE_VALUE_MAX, &k);
    if (known && k != x->ndim) return kiln_error(KILN_ERR_SHAPE, "Tile: repeats has %d entries for rank %d", k, x->ndim);
    for (int i = 0; i < x->ndim; i++) {
        kiln_dim rep = known ? el[i] : KILN_DIM_UNKNOWN;
        if (rep.sym == 0 && rep.value < 0) return kiln_error(KILN_ERR_INVALID_ARGUMENT, "Tile: negative repeat %lld", (long long)rep.value);
        out[i] = shp_dim_mul(x->dims[i], rep);
    }
    kiln_infer_set(g, n, 0, x->dtype, x->ndim, out);
    return KILN_OK;
}

/* Dropout in inference: output = input; mask (bool from opset 10) all true. Training is refused. */
static kiln_status infer_dropout(kiln_graph *g, kiln_node *n) {
    KILN_TRY(shp_need_input(g, n, 0, "data"));
    kiln_value *x = kiln_node_input(g, n, 0);
    const kiln_tensor *tm, *ratio;
    if (n->opset >= 12 && kiln_infer_const_input(g, n, 2, &tm) && kiln_tensor_numel(tm) >= 1 &&
        kiln_tensor_get_f64(tm, 0) != 0) {
        double r = kiln_infer_const_input(g, n, 1, &ratio) && kiln_tensor_numel(ratio) >= 1 ? kiln_tensor_get_f64(ratio, 0)
                   : kiln_node_input(g, n, 1)                                                ? -1
                                                                                             : 0.5;
        if (r != 0)
            return kiln_error(KILN_ERR_UNSUPPORTED, "Dropout: training_mode = true is not supported (kiln runs inference only)");
    }
    kiln_infer_copy(g, n, 0, 0);
    kiln_infer_set(g, n, 1, n->opset >= 10 ? KILN_BOOL : x->dtype, x->ndim, x->dims);
    return KILN_OK;
}

static kiln_status check_mode(const kiln_node *n, const char *mode) {
    if (strcmp(mode, "DCR") && strcmp(mode, "CRD"))
        return kiln_error(KILN_ERR_INVALID_ARGUMENT, "%s: mode must be DCR or CRD, got '%s'", n->op_type, mode);
    return KILN_OK;
}

/* DepthToSpace [N,C,H,W] -> [N,C/b^2,H*b,W*b]; SpaceToDepth the reverse. */
static kiln_status infer_depth_space(kiln_graph *g, kiln_node *n) {
    KILN_TRY(shp_need_input(g, n, 0, "input"));
    kiln_value *x = kiln_node_input(g, n, 0);
    bool d2s = !strcmp(n->op_type, "DepthToSpace");
    int64_t b = kiln_attr_int(n, "blocksize", 0);
    if (b <= 0 || b > INT32_MAX) /* so that b * b fits */
        return kiln_error(KILN_ERR_INVALID_ARGUMENT, "%s: blocksize %lld is outside 1..2^31-1", n->op_type, (long long)b);
    KILN_TRY(check_mode(n, kiln_attr_string(n, "mode", "DCR")));
    kiln_dim out[4];
    for (int i = 0; i < 4; i++) out[i] = KILN_DIM_UNKNOWN;
    if (x->ndim >= 0) {
        if (x->ndim != 4) return kiln_error(KILN_ERR_SHAPE, "%s: input must have rank 4, got %d", n->op_type, x->ndim);
        out[0] = x->dims[0];
        if (d2s) {
            kiln_dim c = x->dims[1];
            if (c.sym == 0 && c.value % (b * b))
                return kiln_error(KILN_ERR_SHAPE, "DepthToSpace: channels %lld not divisible by blocksize^2 = %lld",
                                  (long long)c.value, (long long)(b * b));
            out[1] = c.sym == 0 ? kiln_dim_static(c.value / (b * b)) : b == 1 ? c : KILN_DIM_UNKNOWN;
            out[2] = shp_dim_mul(x->dims[2], kiln_dim_static(b));
            out[3] = shp_dim_mul(x->dims[3], kiln_dim_static(b));
        } else {
            out[1] = shp_dim_mul(x->dims[1], kiln_dim_static(b * b));
            for (int i = 2; i < 4; i++) {
                kiln_dim d = x->dims[i];
                if (d.sym == 0 && d.value % b)
                    return kiln_error(KILN_ERR_SHAPE, "SpaceToDepth: dimension %d (%lld) not divisible by blocksize %lld", i,
                                      (long long)d.value, (long long)b);
                out[i] = d.sym == 0 ? kiln_dim_static(d.value / b) : b == 1 ? d : KILN_DIM_UNKNOWN;
            }
        }
    }
    kiln_infer_set(g, n, 0, x->dtype, 4, out);
    return KILN_OK;
}

const kiln_op_schema kiln_schemas_shape[] = {
    {"Shape", "", 1, 0, infer_shape},
    {"Size", "", 1, 0, infer_size},
    {"Reshape", "", 1, 0, infer_reshape},
    {"Flatten", "", 1, 0, infer_flatten},
    {"Squeeze", "", 1, 0, infer_squeeze},
    {"Unsqueeze", "", 1, 0, infer_unsqueeze},
    {"Transpose", "", 1, 0, infer_transpose},
    {"Concat", "", 1, 0, infer_concat},
    {"Split", "", 1, 0, infer_split},
    {"Expand", "", 8, 0, infer_expand},
    {"Tile", "", 6, 0, infer_tile},
    {"Identity", "", 1, 0, infer_identity},
    {"Dropout", "", 1, 0, infer_dropout},
    {"DepthToSpace", "", 1, 0, infer_depth_space},
    {"SpaceToDepth", "", 1, 0, infer_depth_space},
    {"Slice", "", 1, 0, kiln_infer_slice},
    {"Gather", "", 1, 0, kiln_infer_gather},
    {"GatherElements", "", 11, 0, kiln_infer_gather_elements},
    {"GatherND", "", 11, 0, kiln_infer_gather_nd},
    {"ScatterND", "", 11, 0, kiln_infer_scatter},
    {"ScatterElements", "", 11, 0, kiln_infer_scatter},
    {"Scatter", "", 9, 10, kiln_infer_scatter},
    {"Pad", "", 1, 0, kiln_infer_pad},
    {"Resize", "", 10, 0, kiln_infer_resize},
    {"Upsample", "", 7, 9, kiln_infer_resize},
    {0},
};
