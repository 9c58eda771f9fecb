/* infer_reduce.c — shape and type inference for the reduce family: the Reduce* ops, ArgMax/ArgMin,
 * TopK, CumSum, Trilu, Range, ConstantOfShape, OneHot, NonZero, EyeLike and Einsum, and the family's
 * schema table.
 *
 * Constant inputs (Reduce axes, TopK K, Range bounds, ConstantOfShape shape, OneHot depth) are read
 * to produce static dims; symbolic dims are carried where the output dim equals an input dim. */
#include "core/status.h"
#include "ir/einsum_eq.h"
#include "ir/op_schema.h"
#include "ir/shape_value.h"

#include <math.h>
#include <string.h>

/* The newest opset whose semantics these ops were checked against (onnx 1.23: opset 28). */
#define REDUCE_OPSET_CHECKED 28

static bool is_int_dtype(kiln_dtype t) {
    return t == KILN_I64 || t == KILN_I32 || t == KILN_I16 || t == KILN_I8 || t == KILN_U8 || t == KILN_U16 ||
           t == KILN_U32 || t == KILN_U64;
}
static bool is_float_dtype(kiln_dtype t) { return t == KILN_F32 || t == KILN_F64 || t == KILN_F16 || t == KILN_BF16; }

static kiln_status need_input(const kiln_graph *g, const kiln_node *n, int i, const char *what, kiln_value **v) {
    *v = kiln_node_input(g, n, i);
    if (!*v) return kiln_error(KILN_ERR_INVALID_ARGUMENT, "%s: required input '%s' (#%d) is missing", n->op_type, what, i);
    return KILN_OK;
}

/* Fails for a known dtype outside float/int (and bool when allow_bool). */
static kiln_status check_numeric(const kiln_node *n, kiln_dtype t, bool allow_bool) {
    if (t == KILN_UNDEFINED || is_float_dtype(t) || is_int_dtype(t) || (allow_bool && t == KILN_BOOL)) return KILN_OK;
    return kiln_error(KILN_ERR_UNSUPPORTED, "%s: element type %s is not supported", n->op_type, kiln_dtype_name(t));
}

/* Reads a one-element constant input as int64 (floats truncate); false when not constant. */
static bool const_scalar(const kiln_graph *g, const kiln_node *n, int i, int64_t *v) {
    const kiln_tensor *t;
    if (!kiln_infer_const_input(g, n, i, &t) || kiln_tensor_numel(t) != 1) return false;
    if (!is_int_dtype(t->dtype) && !is_float_dtype(t->dtype)) return false;
    *v = is_int_dtype(t->dtype) ? kiln_tensor_get_i64(t, 0) : (int64_t)kiln_tensor_get_f64(t, 0);
    return true;
}

/* Output 0 = input x's shape with one axis reduced (kept as 1 or removed). */
static void set_reduced_one(kiln_graph *g, const kiln_node *n, int out, kiln_dtype dt, const kiln_value *x, int axis,
                            bool keepdims, kiln_dim kept) {
    kiln_dim dims[KILN_MAX_DIMS];
    int nd = 0;
    for (int d = 0; d < x->ndim; d++)
        if (d != axis) dims[nd++] = x->dims[d];
        else if (keepdims) dims[nd++] = kept;
    kiln_infer_set(g, n, out, dt, nd, dims);
}

static kiln_status bad_axis(const kiln_node *n, int64_t axis, int rank) {
    return kiln_error(KILN_ERR_INVALID_ARGUMENT, "%s: axis %lld is out of range for an input of rank %d", n->op_type,
                      (long long)axis, rank);
}

/* Reduce*: axes from the attribute before opset `since`, from the optional input 1 after. */
static kiln_status infer_reduce_common(kiln_graph *g, kiln_node *n, int since, bool allow_bool) {
    kiln_value *x;
    KILN_TRY(need_input(g, n, 0, "data", &x));
    KILN_TRY(check_numeric(n, x->dtype, allow_bool));
    bool keepdims = kiln_attr_int(n, "keepdims", 1) != 0;
    bool noop = kiln_attr_int(n, "noop_with_empty_axes", 0) != 0;
    int64_t axes[KILN_MAX_DIMS];
    int count = 0;
    bool known = true;
    int unknown_count = -1; /* number of axes when only the axes input's length is known */
    if (n->opset >= since) {
        kiln_value *av = kiln_node_input(g, n, 1);
        const kiln_tensor *t;
        if (av && kiln_infer_const_input(g, n, 1, &t)) {
            if (!is_int_dtype(t->dtype) || t->ndim > 1)
                return kiln_error(KILN_ERR_INVALID_ARGUMENT, "%s: input 'axes' must be a 1-D integer tensor", n->op_type);
            if (kiln_tensor_numel(t) > KILN_MAX_DIMS)
                return kiln_error(KILN_ERR_INVALID_ARGUMENT, "%s: too many axes (%lld)", n->op_type,
                                  (long long)kiln_tensor_numel(t));
            count = (int)kiln_tensor_numel(t);
            for (int i = 0; i < count; i++) axes[i] = kiln_tensor_get_i64(t, i);
        } else if (av && !(av->ndim == 1 && kiln_dim_is_static(av->dims[0]) && av->dims[0].value == 0)) {
            known = false; /* (an axes input known to be empty is as good as a constant) */
            if (av->ndim == 1 && kiln_dim_is_static(av->dims[0])) unknown_count = (int)av->dims[0].value;
        }
    } else {
        const int64_t *a = kiln_attr_ints(n, "axes", &count);
        if (count > KILN_MAX_DIMS)
            return kiln_error(KILN_ERR_INVALID_ARGUMENT, "%s: too many axes (%d)", n->op_type, count);
        if (count) memcpy(axes, a, (size_t)count * sizeof *a);
    }
    if (known && count == 0 && noop) {
        kiln_infer_copy(g, n, 0, 0);
        return KILN_OK;
    }
    if (x->ndim < 0) {
        bool all = known && count == 0;
        kiln_infer_set(g, n, 0, x->dtype, all && !keepdims ? 0 : -1, NULL);
        return KILN_OK;
    }
    if (!known) { /* which axes go is decided at run time */
        kiln_dim dims[KILN_MAX_DIMS];
        int nd = keepdims ? x->ndim : unknown_count > 0 && unknown_count <= x->ndim ? x->ndim - unknown_count : -1;
        for (int d = 0; d < nd; d++)
            dims[d] = keepdims && kiln_dim_is_static(x->dims[d]) && x->dims[d].value == 1 ? x->dims[d] : KILN_DIM_UNKNOWN;
        kiln_infer_set(g, n, 0, x->dtype, nd, dims);
        return KILN_OK;
    }
    bool reduce[KILN_MAX_DIMS];
    for (int d = 0; d < x->ndim; d++) reduce[d] = count == 0;
    for (int i = 0; i < count; i++) {
        int a;
        if (kiln_axis_normalize(axes[i], x->ndim, &a) != KILN_OK) return bad_axis(n, axes[i], x->ndim);
        if (reduce[a])
            return kiln_error(KILN_ERR_INVALID_ARGUMENT, "%s: axis %lld is listed twice", n->op_type, (long long)axes[i]);
        reduce[a] = true;
    }
    kiln_dim dims[KILN_MAX_DIMS];
    int nd = 0;
    for (int d = 0; d < x->ndim; d++)
        if (!reduce[d]) dims[nd++] = x->dims[d];
        else if (keepdims) dims[nd++] = kiln_dim_static(1);
    kiln_infer_set(g, n, 0, x->dtype, nd, dims);
    return KILN_OK;
}

static kiln_status infer_reduce_sum(kiln_graph *g, kiln_node *n) { return infer_reduce_common(g, n, 13, false); }
static kiln_status infer_reduce_18(kiln_graph *g, kiln_node *n) { return infer_reduce_common(g, n, 18, false); }
static kiln_status infer_reduce_minmax(kiln_graph *g, kiln_node *n) { return infer_reduce_common(g, n, 18, true); }

/* ArgMax / ArgMin: int64, the axis reduced. */
static kiln_status infer_arg(kiln_graph *g, kiln_node *n) {
    kiln_value *x;
    KILN_TRY(need_input(g, n, 0, "data", &x));
    KILN_TRY(check_numeric(n, x->dtype, true));
    bool keepdims = kiln_attr_int(n, "keepdims", 1) != 0;
    if (x->ndim < 0) {
        kiln_infer_set(g, n, 0, KILN_I64, -1, NULL);
        return KILN_OK;
    }
    int64_t a = kiln_attr_int(n, "axis", 0);
    int axis;
    if (kiln_axis_normalize(a, x->ndim, &axis) != KILN_OK) return bad_axis(n, a, x->ndim);
    set_reduced_one(g, n, 0, KILN_I64, x, axis, keepdims, kiln_dim_static(1));
    return KILN_OK;
}

/* TopK: values (X's type) and int64 indices, X's shape with K along axis. */
static kiln_status infer_topk(kiln_graph *g, kiln_node *n) {
    kiln_value *x;
    KILN_TRY(need_input(g, n, 0, "X", &x));
    KILN_TRY(check_numeric(n, x->dtype, false));
    kiln_dim kd = KILN_DIM_UNKNOWN;
    int64_t k;
    if (n->opset < 10) {
        if (!kiln_node_attr(n, "k"))
            return kiln_error(KILN_ERR_INVALID_ARGUMENT, "%s: attribute 'k' is required before opset 10", n->op_type);
        kd = kiln_dim_static(kiln_attr_int(n, "k", 0));
    } else {
        kiln_value *kv;
        KILN_TRY(need_input(g, n, 1, "K", &kv));
        if (const_scalar(g, n, 1, &k)) kd = kiln_dim_static(k);
    }
    if (x->ndim < 0) {
        kiln_infer_set(g, n, 0, x->dtype, -1, NULL);
        kiln_infer_set(g, n, 1, KILN_I64, -1, NULL);
        return KILN_OK;
    }
    int64_t a = kiln_attr_int(n, "axis", -1);
    int axis;
    if (kiln_axis_normalize(a, x->ndim, &axis) != KILN_OK) return bad_axis(n, a, x->ndim);
    if (kd.sym == 0 && (kd.value < 0 || (kiln_dim_is_static(x->dims[axis]) && kd.value > x->dims[axis].value)))
        return kiln_error(KILN_ERR_INVALID_ARGUMENT, "%s: K = %lld is outside [0, size of axis %d]", n->op_type,
                          (long long)kd.value, axis);
    set_reduced_one(g, n, 0, x->dtype, x, axis, true, kd);
    set_reduced_one(g, n, 1, KILN_I64, x, axis, true, kd);
    return KILN_OK;
}

/* CumSum, Trilu: the input's type and shape. */
static kiln_status infer_cumsum(kiln_graph *g, kiln_node *n) {
    kiln_value *x, *axis;
    KILN_TRY(need_input(g, n, 0, "x", &x));
    KILN_TRY(need_input(g, n, 1, "axis", &axis));
    KILN_TRY(check_numeric(n, x->dtype, false));
    if (axis->dtype != KILN_UNDEFINED && axis->dtype != KILN_I32 && axis->dtype != KILN_I64)
        return kiln_error(KILN_ERR_INVALID_ARGUMENT, "%s: input 'axis' must be int32 or int64, got %s", n->op_type,
                          kiln_dtype_name(axis->dtype));
    int64_t a;
    int ax;
    if (x->ndim >= 0 && const_scalar(g, n, 1, &a) && kiln_axis_normalize(a, x->ndim, &ax) != KILN_OK)
        return bad_axis(n, a, x->ndim);
    kiln_infer_copy(g, n, 0, 0);
    return KILN_OK;
}

static kiln_status infer_trilu(kiln_graph *g, kiln_node *n) {
    kiln_value *x;
    KILN_TRY(need_input(g, n, 0, "input", &x));
    if (x->ndim >= 0 && x->ndim < 2)
        return kiln_error(KILN_ERR_INVALID_ARGUMENT, "%s: input must have rank >= 2, got rank %d", n->op_type, x->ndim);
    kiln_infer_copy(g, n, 0, 0);
    return KILN_OK;
}

/* Range: 1-D of start's type; the length when start, limit and delta are constants, or symbolic for
 * Range(0, n, 1) of a symbolic size n. */
static kiln_status infer_range(kiln_graph *g, kiln_node *n) {
    kiln_value *v[3];
    const char *names[3] = {"start", "limit", "delta"};
    const kiln_tensor *t[3];
    int nconst = 0;
    for (int i = 0; i < 3; i++) {
        KILN_TRY(need_input(g, n, i, names[i], &v[i]));
        if (v[i]->dtype != KILN_UNDEFINED && v[0]->dtype != KILN_UNDEFINED && v[i]->dtype != v[0]->dtype)
            return kiln_error(KILN_ERR_INVALID_ARGUMENT, "%s: inputs have different types (%s and %s)", n->op_type,
                              kiln_dtype_name(v[0]->dtype), kiln_dtype_name(v[i]->dtype));
        if (kiln_infer_const_input(g, n, i, &t[i]) && kiln_tensor_numel(t[i]) == 1) nconst++;
    }
    kiln_dtype dt = v[0]->dtype;
    if (dt != KILN_UNDEFINED && !is_float_dtype(dt) && dt != KILN_I16 && dt != KILN_I32 && dt != KILN_I64)
        return kiln_error(KILN_ERR_UNSUPPORTED, "%s: element type %s is not supported", n->op_type, kiln_dtype_name(dt));
    kiln_dim d = KILN_DIM_UNKNOWN;
    if (nconst == 3) { /* the length; spans too large to count are left to the kernel to refuse */
        double s = kiln_tensor_get_f64(t[0], 0), l = kiln_tensor_get_f64(t[1], 0), dl = kiln_tensor_get_f64(t[2], 0);
        if (dl == 0) return kiln_error(KILN_ERR_INVALID_ARGUMENT, "%s: delta must be non-zero", n->op_type);
        double c = ceil((l - s) / dl);
        if (is_int_dtype(t[0]->dtype) && fabs(l - s) < 9.0e18) {
            int64_t is = kiln_tensor_get_i64(t[0], 0), il = kiln_tensor_get_i64(t[1], 0), id = kiln_tensor_get_i64(t[2], 0);
            int64_t diff = il - is;
            d = kiln_dim_static(id > 0 ? (diff > 0 ? (diff + id - 1) / id : 0) : (diff < 0 ? (diff + id + 1) / id : 0));
        } else if (!is_int_dtype(t[0]->dtype) && isfinite(c) && c < (double)(INT64_C(1) << 40)) {
            d = kiln_dim_static(c > 0 ? (int64_t)c : 0);
        }
    } else if (is_int_dtype(dt)) {
        /* Range(0, n, 1) with n a size read through Shape (positions 0..S-1 in exported
         * transformers): n elements, symbolic */
        kiln_dim e[3];
        int count;
        bool ok = true;
        for (int i = 0; i < 3 && ok; i++) ok = kiln_shape_value_input(g, n, i, &e[i], 1, &count) && count == 1;
        if (ok && e[0].sym == 0 && e[0].value == 0 && e[2].sym == 0 && e[2].value == 1 && e[1].sym > 0) d = e[1];
    }
    kiln_infer_set(g, n, 0, v[0]->dtype, 1, &d);
    return KILN_OK;
}

/* ConstantOfShape: the value attribute's type (float32 by default); the shape input's values. */
static kiln_status infer_constant_of_shape(kiln_graph *g, kiln_node *n) {
    kiln_value *s;
    KILN_TRY(need_input(g, n, 0, "input", &s));
    kiln_dtype dt = KILN_F32;
    const kiln_attr *a = kiln_node_attr(n, "value");
    if (a) {
        if (a->type != KILN_ATTR_TENSOR || !a->t || kiln_tensor_numel(a->t) != 1)
            return kiln_error(KILN_ERR_INVALID_ARGUMENT, "%s: attribute 'value' must be a one-element tensor", n->op_type);
        dt = a->t->dtype;
        if (kiln_dtype_size(dt) == 0)
            return kiln_error(KILN_ERR_UNSUPPORTED, "%s: element type %s is not supported", n->op_type, kiln_dtype_name(dt));
    }
    const kiln_tensor *t;
    if (kiln_infer_const_input(g, n, 0, &t)) {
        if (!is_int_dtype(t->dtype) || t->ndim > 1 || kiln_tensor_numel(t) > KILN_MAX_DIMS)
            return kiln_error(KILN_ERR_INVALID_ARGUMENT, "%s: input must be a 1-D integer tensor of at most %d values",
                              n->op_type, KILN_MAX_DIMS);
        kiln_dim dims[KILN_MAX_DIMS];
        int nd = (int)kiln_tensor_numel(t);
        for (int i = 0; i < nd; i++) {
            int64_t v = kiln_tensor_get_i64(t, i);
            if (v < 0)
                return kiln_error(KILN_ERR_INVALID_ARGUMENT, "%s: shape dim %d is negative (%lld)", n->op_type, i,
                                  (long long)v);
            dims[i] = kiln_dim_static(v);
        }
        kiln_infer_set(g, n, 0, dt, nd, dims);
        return KILN_OK;
    }
    if (s->ndim == 1 && kiln_dim_is_static(s->dims[0]) && s->dims[0].value <= KILN_MAX_DIMS) {
        kiln_dim dims[KILN_MAX_DIMS];
        for (int i = 0; i < s->dims[0].value; i++) dims[i] = KILN_DIM_UNKNOWN;
        kiln_infer_set(g, n, 0, dt, (int)s->dims[0].value, dims);
        return KILN_OK;
    }
    kiln_infer_set(g, n, 0, dt, -1, NULL);
    return KILN_OK;
}

/* OneHot: values' type; indices' shape with depth inserted at axis. */
static kiln_status infer_onehot(kiln_graph *g, kiln_node *n) {
    kiln_value *ind, *depth, *vals;
    KILN_TRY(need_input(g, n, 0, "indices", &ind));
    KILN_TRY(need_input(g, n, 1, "depth", &depth));
    KILN_TRY(need_input(g, n, 2, "values", &vals));
    KILN_TRY(check_numeric(n, ind->dtype, false));
    if (ind->ndim < 0) {
        kiln_infer_set(g, n, 0, vals->dtype, -1, NULL);
        return KILN_OK;
    }
    if (ind->ndim + 1 > KILN_MAX_DIMS)
        return kiln_error(KILN_ERR_UNSUPPORTED, "%s: output rank %d exceeds %d", n->op_type, ind->ndim + 1, KILN_MAX_DIMS);
    int64_t a = kiln_attr_int(n, "axis", -1), dv;
    int axis;
    if (kiln_axis_normalize(a, ind->ndim + 1, &axis) != KILN_OK) return bad_axis(n, a, ind->ndim + 1);
    kiln_dim dd = KILN_DIM_UNKNOWN, dims[KILN_MAX_DIMS];
    if (const_scalar(g, n, 1, &dv)) {
        if (dv < 0) return kiln_error(KILN_ERR_INVALID_ARGUMENT, "%s: depth %lld is negative", n->op_type, (long long)dv);
        dd = kiln_dim_static(dv);
    }
    for (int d = 0, j = 0; d <= ind->ndim; d++) dims[d] = d == axis ? dd : ind->dims[j++];
    kiln_infer_set(g, n, 0, vals->dtype, ind->ndim + 1, dims);
    return KILN_OK;
}

/* NonZero: int64 [rank, count], count known only at run time. */
static kiln_status infer_nonzero(kiln_graph *g, kiln_node *n) {
    kiln_value *x;
    KILN_TRY(need_input(g, n, 0, "X", &x));
    KILN_TRY(check_numeric(n, x->dtype, true));
    kiln_dim dims[2] = {x->ndim < 0 ? KILN_DIM_UNKNOWN : kiln_dim_static(x->ndim ? x->ndim : 1), KILN_DIM_UNKNOWN};
    kiln_infer_set(g, n, 0, KILN_I64, 2, dims);
    return KILN_OK;
}

/* EyeLike: the input's 2-D shape; the `dtype` attribute's type or the input's. */
static kiln_status infer_eyelike(kiln_graph *g, kiln_node *n) {
    kiln_value *x;
    KILN_TRY(need_input(g, n, 0, "input", &x));
    if (x->ndim >= 0 && x->ndim != 2)
        return kiln_error(KILN_ERR_INVALID_ARGUMENT, "%s: input must be 2-D, got rank %d", n->op_type, x->ndim);
    kiln_dtype dt = kiln_node_attr(n, "dtype") ? (kiln_dtype)kiln_attr_int(n, "dtype", 0) : x->dtype;
    KILN_TRY(check_numeric(n, dt, true));
    kiln_infer_set(g, n, 0, dt, x->ndim, x->dims);
    return KILN_OK;
}

/* Einsum: the operands' type; each output dim is its label's size (a static size other than 1
 * wins over 1 and over symbolic sizes). */
static kiln_status infer_einsum(kiln_graph *g, kiln_node *n) {
    const char *equation = kiln_attr_string(n, "equation", NULL);
    if (!equation) return kiln_error(KILN_ERR_INVALID_ARGUMENT, "%s: attribute 'equation' is required", n->op_type);
    if (n->ninputs < 1 || n->ninputs > KILN_EINSUM_MAX_INPUTS)
        return kiln_error(KILN_ERR_UNSUPPORTED, "%s: %d operands (1 to %d are supported)", n->op_type, n->ninputs,
                          KILN_EINSUM_MAX_INPUTS);
    int ranks[KILN_EINSUM_MAX_INPUTS];
    kiln_value *v[KILN_EINSUM_MAX_INPUTS];
    for (int k = 0; k < n->ninputs; k++) {
        KILN_TRY(need_input(g, n, k, "Inputs", &v[k]));
        KILN_TRY(check_numeric(n, v[k]->dtype, false));
        ranks[k] = v[k]->ndim;
    }
    kiln_einsum_eq eq;
    KILN_TRY(kiln_einsum_parse(equation, n->ninputs, ranks, &eq));
    if (eq.out_rank < 0) {
        kiln_infer_set(g, n, 0, v[0]->dtype, -1, NULL);
        return KILN_OK;
    }
    kiln_dim size[KILN_EINSUM_MAX_LABELS];
    bool seen[KILN_EINSUM_MAX_LABELS] = {false};
    for (int k = 0; k < n->ninputs; k++)
        for (int d = 0; d < eq.in_rank[k]; d++) {
            int l = eq.in_label[k][d];
            kiln_dim s = v[k]->ndim >= 0 ? v[k]->dims[d] : KILN_DIM_UNKNOWN;
            if (!seen[l]) {
                size[l] = s;
                seen[l] = true;
            } else if (s.sym == 0 && s.value != 1) {
                char name[16];
                if (size[l].sym == 0 && size[l].value != 1 && size[l].value != s.value)
                    return kiln_error(KILN_ERR_SHAPE, "%s: label '%s' has size %lld in one place and %lld in another",
                                      n->op_type, kiln_einsum_label_name(l, name), (long long)size[l].value,
                                      (long long)s.value);
                size[l] = s;
            } else if (size[l].sym == 0 && size[l].value == 1 && s.sym != 0) {
                size[l] = s;
            } else if (size[l].sym < 0 && s.sym > 0) {
                size[l] = s;
            }
        }
    kiln_dim dims[KILN_MAX_DIMS];
    for (int d = 0; d < eq.out_rank; d++) dims[d] = size[eq.out_label[d]];
    kiln_infer_set(g, n, 0, v[0]->dtype, eq.out_rank, dims);
    return KILN_OK;
}

const kiln_op_schema kiln_schemas_reduce[] = {
    {"ReduceSum", "", 1, REDUCE_OPSET_CHECKED, infer_reduce_sum},
    {"ReduceMean", "", 1, REDUCE_OPSET_CHECKED, infer_reduce_18},
    {"ReduceProd", "", 1, REDUCE_OPSET_CHECKED, infer_reduce_18},
    {"ReduceMax", "", 1, REDUCE_OPSET_CHECKED, infer_reduce_minmax},
    {"ReduceMin", "", 1, REDUCE_OPSET_CHECKED, infer_reduce_minmax},
    {"ReduceL1", "", 1, REDUCE_OPSET_CHECKED, infer_reduce_18},
    {"ReduceL2", "", 1, REDUCE_OPSET_CHECKED, infer_reduce_18},
    {"ReduceLogSum", "", 1, REDUCE_OPSET_CHECKED, infer_reduce_18},
    {"ReduceLogSumExp", "", 1, REDUCE_OPSET_CHECKED, infer_reduce_18},
    {"ReduceSumSquare", "", 1, REDUCE_OPSET_CHECKED, infer_reduce_18},
    {"ArgMax", "", 1, REDUCE_OPSET_CHECKED, infer_arg},
    {"ArgMin", "", 1, REDUCE_OPSET_CHECKED, infer_arg},
    {"TopK", "", 1, REDUCE_OPSET_CHECKED, infer_topk},
    {"CumSum", "", 11, REDUCE_OPSET_CHECKED, infer_cumsum},
    {"Trilu", "", 14, REDUCE_OPSET_CHECKED, infer_trilu},
    {"Range", "", 11, REDUCE_OPSET_CHECKED, infer_range},
    {"ConstantOfShape", "", 9, REDUCE_OPSET_CHECKED, infer_constant_of_shape},
    {"OneHot", "", 9, REDUCE_OPSET_CHECKED, infer_onehot},
    {"NonZero", "", 9, REDUCE_OPSET_CHECKED, infer_nonzero},
    {"EyeLike", "", 9, REDUCE_OPSET_CHECKED, infer_eyelike},
    {"Einsum", "", 12, REDUCE_OPSET_CHECKED, infer_einsum},
    {0},
};
