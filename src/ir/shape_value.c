/* shape_value.c — element-wise, symbolic evaluation of small integer shape tensors at build time
 * (see shape_value.h). Walks producers backwards through the ops exporters use to compute shapes;
 * anything else yields unknown elements (or an unknown count). Never fails: it only informs. */
#include "ir/shape_value.h"

#include "ir/shape_calc.h"

#include <string.h>

/* Bounds on one evaluation: recursion depth and the number of values visited (a DAG of shared
 * shape arithmetic must not take exponential time). */
#define MAX_DEPTH 32
#define MAX_VISITS 4096

typedef struct sv_ctx {
    const kiln_graph *g;
    int visits;
} sv_ctx;

static bool is_int(kiln_dtype t) {
    return t == KILN_I64 || t == KILN_I32 || t == KILN_I16 || t == KILN_I8 || t == KILN_U8 || t == KILN_U16 ||
           t == KILN_U32 || t == KILN_U64;
}

/* Shape values are integer lists; bool lists (Equal's result, Where's condition) are 0/1 elements. */
static bool is_list_type(kiln_dtype t) { return is_int(t) || t == KILN_BOOL; }

static bool eval(sv_ctx *c, int vid, kiln_dim *e, int cap, int *count, int depth);

static bool eval_input(sv_ctx *c, const kiln_node *n, int i, kiln_dim *e, int cap, int *count, int depth) {
    if (i >= n->ninputs || n->inputs[i] < 0) return false;
    return eval(c, n->inputs[i], e, cap, count, depth + 1);
}

/* The integer list input i when all its elements are known (count <= cap), or false. */
static bool const_list(sv_ctx *c, const kiln_node *n, int i, int64_t *vals, int cap, int *count, int depth) {
    kiln_dim e[KILN_SHAPE_VALUE_MAX];
    if (cap > KILN_SHAPE_VALUE_MAX) cap = KILN_SHAPE_VALUE_MAX;
    return eval_input(c, n, i, e, cap, count, depth) && kiln_shape_value_static(e, *count, vals);
}

/* One element of a (op) b; unknown unless it is decidable at build time. */
static kiln_dim binary_elem(const char *op, kiln_dim x, kiln_dim y) {
    if (x.sym == 0 && y.sym == 0) {
        int64_t u = x.value, v = y.value;
        const int64_t lim = INT64_C(1) << 31; /* shape arithmetic stays small: no overflow */
        if (u > lim || u < -lim || v > lim || v < -lim) return KILN_DIM_UNKNOWN;
        if (!strcmp(op, "Add")) return kiln_dim_static(u + v);
        if (!strcmp(op, "Sub")) return kiln_dim_static(u - v);
        if (!strcmp(op, "Mul")) return kiln_dim_static(u * v);
        if (!strcmp(op, "Div")) return v > 0 && u >= 0 ? kiln_dim_static(u / v) : KILN_DIM_UNKNOWN;
        if (!strcmp(op, "Max")) return kiln_dim_static(u > v ? u : v);
        return kiln_dim_static(u < v ? u : v); /* Min */
    }
    bool y0 = y.sym == 0 && y.value == 0, y1 = y.sym == 0 && y.value == 1;
    bool x0 = x.sym == 0 && x.value == 0, x1 = x.sym == 0 && x.value == 1;
    if (((!strcmp(op, "Mul") || !strcmp(op, "Div")) && y1) || ((!strcmp(op, "Add") || !strcmp(op, "Sub")) && y0)) return x;
    if ((!strcmp(op, "Mul") && x1) || (!strcmp(op, "Add") && x0)) return y;
    return KILN_DIM_UNKNOWN;
}

/* Equal of two elements: 1/0 when decidable (a dimension is never negative), else unknown. */
static kiln_dim equal_elem(kiln_dim x, kiln_dim y) {
    if (x.sym == 0 && y.sym == 0) return kiln_dim_static(x.value == y.value);
    if (x.sym > 0 && x.sym == y.sym) return kiln_dim_static(1);
    if ((x.sym > 0 && y.sym == 0 && y.value < 0) || (y.sym > 0 && x.sym == 0 && x.value < 0)) return kiln_dim_static(0);
    return KILN_DIM_UNKNOWN;
}

/* Elementwise a (op) b with numpy broadcasting of a one-element side. */
static bool eval_binary(const char *op, const kiln_dim *a, int na, const kiln_dim *b, int nb, kiln_dim *e, int cap,
                        int *count) {
    int k = na > nb ? na : nb;
    if ((na != k && na != 1) || (nb != k && nb != 1) || k > cap) return false;
    for (int j = 0; j < k; j++) {
        kiln_dim x = a[na == 1 ? 0 : j], y = b[nb == 1 ? 0 : j];
        e[j] = !strcmp(op, "Equal") ? equal_elem(x, y) : binary_elem(op, x, y);
    }
    *count = k;
    return true;
}

/* The elements of Shape(x) (start/end from opset 15). */
static bool eval_shape(sv_ctx *c, const kiln_node *n, kiln_dim *e, int cap, int *count) {
    const kiln_value *x = kiln_node_input(c->g, n, 0);
    if (!x || x->ndim < 0) return false;
    int64_t start, end;
    kiln_shape_op_range(n, x->ndim, &start, &end);
    if (end - start > cap) return false;
    *count = 0;
    for (int64_t i = start; i < end; i++) e[(*count)++] = x->dims[i];
    return true;
}

/* Slice of a shape list along its only axis (with one start/end/axis/step). */
static bool eval_slice(sv_ctx *c, const kiln_node *n, kiln_dim *e, int cap, int *count, int depth) {
    kiln_dim d[KILN_SHAPE_VALUE_MAX];
    int64_t st[1], en[1], ax[1] = {0}, sp[1] = {1};
    int nd, k;
    if (!eval_input(c, n, 0, d, KILN_SHAPE_VALUE_MAX, &nd, depth)) return false;
    if (n->opset < 10) {
        const int64_t *a = kiln_attr_ints(n, "starts", &k);
        if (!a || k != 1) return false;
        st[0] = a[0];
        if (!(a = kiln_attr_ints(n, "ends", &k)) || k != 1) return false;
        en[0] = a[0];
        if ((a = kiln_attr_ints(n, "axes", &k))) {
            if (k != 1) return false;
            ax[0] = a[0];
        }
    } else {
        if (!const_list(c, n, 1, st, 1, &k, depth) || k != 1 || !const_list(c, n, 2, en, 1, &k, depth) || k != 1) return false;
        if (n->ninputs > 3 && n->inputs[3] >= 0 && (!const_list(c, n, 3, ax, 1, &k, depth) || k != 1)) return false;
        if (n->ninputs > 4 && n->inputs[4] >= 0 && (!const_list(c, n, 4, sp, 1, &k, depth) || k != 1)) return false;
    }
    if ((ax[0] != 0 && ax[0] != -1) || sp[0] == 0) return false;
    int64_t first, cnt;
    kiln_slice_axis(nd, st[0], en[0], sp[0], &first, &cnt);
    if (cnt > cap) return false;
    for (int64_t j = 0; j < cnt; j++) e[j] = d[first + j * sp[0]];
    *count = (int)cnt;
    return true;
}

/* Evaluates value out, produced by node n. */
static bool eval_node(sv_ctx *c, const kiln_node *n, const kiln_value *out, kiln_dim *e, int cap, int *count,
                      int depth) {
    const char *op = n->op_type;
    if (n->domain && n->domain[0] && strcmp(n->domain, "ai.onnx")) return false;
    if (!strcmp(op, "Shape")) return eval_shape(c, n, e, cap, count);
    if (!strcmp(op, "Size")) {
        const kiln_value *x = kiln_node_input(c->g, n, 0);
        if (!x || cap < 1) return false;
        e[0] = KILN_DIM_UNKNOWN;
        if (x->ndim >= 0) {
            int64_t p = 1;
            bool ok = true;
            for (int i = 0; i < x->ndim && ok; i++) {
                ok = x->dims[i].sym == 0 && (x->dims[i].value == 0 || p <= INT64_MAX / x->dims[i].value);
                if (ok) p *= x->dims[i].value;
            }
            if (ok) e[0] = kiln_dim_static(p);
            else if (x->ndim == 1) e[0] = x->dims[0];
        }
        *count = 1;
        return true;
    }
    /* ops that keep the elements (out has rank <= 1 here) */
    if (!strcmp(op, "Identity") || !strcmp(op, "Squeeze") || !strcmp(op, "Unsqueeze") || !strcmp(op, "Reshape") ||
        (!strcmp(op, "Cast") && is_int((kiln_dtype)kiln_attr_int(n, "to", 0))))
        return out->ndim >= 0 && eval_input(c, n, 0, e, cap, count, depth);
    if (!strcmp(op, "Concat")) {
        *count = 0;
        for (int i = 0; i < n->ninputs; i++) {
            int part;
            if (n->inputs[i] < 0) continue;
            if (!eval_input(c, n, i, e + *count, cap - *count, &part, depth)) return false;
            *count += part;
        }
        return true;
    }
    if (!strcmp(op, "Gather")) {
        kiln_dim d[KILN_SHAPE_VALUE_MAX];
        int64_t idx[KILN_SHAPE_VALUE_MAX];
        int nd, ni;
        if (kiln_attr_int(n, "axis", 0) != 0 || !eval_input(c, n, 0, d, KILN_SHAPE_VALUE_MAX, &nd, depth) ||
            !const_list(c, n, 1, idx, cap, &ni, depth))
            return false;
        for (int j = 0; j < ni; j++) {
            int64_t i = idx[j] < 0 ? idx[j] + nd : idx[j];
            if (i < 0 || i >= nd) return false;
            e[j] = d[i];
        }
        *count = ni;
        return true;
    }
    if (!strcmp(op, "Slice")) return eval_slice(c, n, e, cap, count, depth);
    if (!strcmp(op, "ConstantOfShape")) {
        /* a list of `count` copies of the integer value attribute (0 by default) */
        const kiln_attr *a = kiln_node_attr(n, "value");
        int64_t len[1], value = 0;
        int k;
        if (a && (a->type != KILN_ATTR_TENSOR || !a->t || !is_list_type(a->t->dtype) || kiln_tensor_numel(a->t) != 1))
            return false;
        if (a) value = kiln_tensor_get_i64(a->t, 0);
        if (!const_list(c, n, 0, len, 1, &k, depth) || k != 1 || len[0] < 0 || len[0] > cap) return false;
        for (int64_t j = 0; j < len[0]; j++) e[j] = kiln_dim_static(value);
        *count = (int)len[0];
        return true;
    }
    if (!strcmp(op, "Where")) {
        kiln_dim w[KILN_SHAPE_VALUE_MAX], a[KILN_SHAPE_VALUE_MAX], b[KILN_SHAPE_VALUE_MAX];
        int nw, na, nb;
        if (n->ninputs != 3 || !eval_input(c, n, 0, w, KILN_SHAPE_VALUE_MAX, &nw, depth) ||
            !eval_input(c, n, 1, a, KILN_SHAPE_VALUE_MAX, &na, depth) || !eval_input(c, n, 2, b, KILN_SHAPE_VALUE_MAX, &nb, depth))
            return false;
        int k = nw > na ? nw : na;
        k = nb > k ? nb : k;
        if ((nw != k && nw != 1) || (na != k && na != 1) || (nb != k && nb != 1) || k > cap) return false;
        for (int j = 0; j < k; j++) {
            kiln_dim cond = w[nw == 1 ? 0 : j], x = a[na == 1 ? 0 : j], y = b[nb == 1 ? 0 : j];
            bool same = (x.sym == 0 && y.sym == 0 && x.value == y.value) || (x.sym > 0 && x.sym == y.sym);
            e[j] = cond.sym == 0 ? (cond.value ? x : y) : same ? x : KILN_DIM_UNKNOWN;
        }
        *count = k;
        return true;
    }
    if (!strcmp(op, "Add") || !strcmp(op, "Sub") || !strcmp(op, "Mul") || !strcmp(op, "Div") || !strcmp(op, "Max") ||
        !strcmp(op, "Min") || !strcmp(op, "Equal")) {
        kiln_dim a[KILN_SHAPE_VALUE_MAX], b[KILN_SHAPE_VALUE_MAX];
        int na, nb;
        if (n->ninputs != 2 || !eval_input(c, n, 0, a, KILN_SHAPE_VALUE_MAX, &na, depth) ||
            !eval_input(c, n, 1, b, KILN_SHAPE_VALUE_MAX, &nb, depth))
            return false;
        return eval_binary(op, a, na, b, nb, e, cap, count);
    }
    return false;
}

static bool eval(sv_ctx *c, int vid, kiln_dim *e, int cap, int *count, int depth) {
    const kiln_graph *g = c->g;
    if (vid < 0 || vid >= g->nvalues || depth > MAX_DEPTH || ++c->visits > MAX_VISITS) return false;
    const kiln_value *v = &g->values[vid];
    if (v->dtype != KILN_UNDEFINED && !is_list_type(v->dtype)) return false;
    if (v->ndim > 1) return false;
    if (v->constant) {
        const kiln_tensor *t = v->constant;
        int64_t k = kiln_tensor_numel(t);
        if (!is_list_type(t->dtype) || t->ndim > 1 || k > cap) return false;
        for (int64_t j = 0; j < k; j++) e[j] = kiln_dim_static(kiln_tensor_get_i64(t, j));
        *count = (int)k;
        return true;
    }
    if (v->producer >= 0 && v->producer < g->nnodes && eval_node(c, &g->nodes[v->producer], v, e, cap, count, depth))
        return true;
    /* the count is known from the value's own shape even if its elements are not */
    if (v->ndim == 1 && v->dims[0].sym == 0 && v->dims[0].value <= cap) {
        *count = (int)v->dims[0].value;
        for (int j = 0; j < *count; j++) e[j] = KILN_DIM_UNKNOWN;
        return true;
    }
    if (v->ndim == 0 && cap >= 1) {
        *count = 1;
        e[0] = KILN_DIM_UNKNOWN;
        return true;
    }
    return false;
}

bool kiln_shape_value(const kiln_graph *g, int vid, kiln_dim *elems, int cap, int *count) {
    sv_ctx c = {g, 0};
    if (cap > KILN_SHAPE_VALUE_MAX) cap = KILN_SHAPE_VALUE_MAX;
    return eval(&c, vid, elems, cap, count, 0);
}

bool kiln_shape_value_input(const kiln_graph *g, const kiln_node *n, int i, kiln_dim *elems, int cap, int *count) {
    if (i >= n->ninputs || n->inputs[i] < 0) return false;
    return kiln_shape_value(g, n->inputs[i], elems, cap, count);
}

bool kiln_shape_value_static(const kiln_dim *elems, int count, int64_t *vals) {
    for (int j = 0; j < count; j++) {
        if (elems[j].sym != 0) return false;
        vals[j] = elems[j].value;
    }
    return true;
}
