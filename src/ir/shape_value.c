/* shape_value.c — element-wise, symbolic evaluation of small integer shape tensors at build time
 * (see shape_value.h). Walks producers backwards through the ops exporters use to compute shapes;
 * anything else yields unknown elements (or an unknown count). Never fails: it only informs. */
#include "ir/shape_value.h"

#include "ir/shape_calc.h"

#include <string.h>

#define MAX_DEPTH 32

static bool is_int(kiln_dtype t) {
    return t == KILN_I64 || t == KILN_I32 || t == KILN_I16 || t == KILN_I8 || t == KILN_U8 || t == KILN_U16 ||
           t == KILN_U32 || t == KILN_U64;
}

static bool eval(const kiln_graph *g, int vid, kiln_dim *e, int cap, int *count, int depth);

static bool eval_input(const kiln_graph *g, const kiln_node *n, int i, kiln_dim *e, int cap, int *count, int depth) {
    if (i >= n->ninputs || n->inputs[i] < 0) return false;
    return eval(g, n->inputs[i], e, cap, count, depth + 1);
}

/* The constant integer list of input i (count <= cap), or false. */
static bool const_list(const kiln_graph *g, const kiln_node *n, int i, int64_t *vals, int cap, int *count, int depth) {
    kiln_dim e[KILN_SHAPE_VALUE_MAX];
    if (cap > KILN_SHAPE_VALUE_MAX) cap = KILN_SHAPE_VALUE_MAX;
    return eval_input(g, n, i, e, cap, count, depth) && kiln_shape_value_static(e, *count, vals);
}

/* Elementwise a (op) b with numpy broadcasting of a one-element side. */
static bool eval_binary(const kiln_node *n, const kiln_dim *a, int na, const kiln_dim *b, int nb, kiln_dim *e, int cap,
                        int *count) {
    int k = na > nb ? na : nb;
    if ((na != k && na != 1) || (nb != k && nb != 1) || k > cap) return false;
    char op = n->op_type[0] == 'A' ? '+' : n->op_type[0] == 'S' ? '-' : n->op_type[0] == 'D' ? '/'
              : !strcmp(n->op_type, "Mul")                            ? '*'
              : !strcmp(n->op_type, "Max")                            ? 'M'
                                                                      : 'm';
    for (int j = 0; j < k; j++) {
        kiln_dim x = a[na == 1 ? 0 : j], y = b[nb == 1 ? 0 : j];
        e[j] = KILN_DIM_UNKNOWN;
        if (x.sym == 0 && y.sym == 0) {
            int64_t u = x.value, v = y.value;
            const int64_t lim = INT64_C(1) << 31; /* shape arithmetic stays small: no overflow */
            if (u > lim || u < -lim || v > lim || v < -lim) continue;
            if (op == '/' && (v == 0 || u < 0 || v < 0)) continue;
            int64_t r = op == '+' ? u + v : op == '-' ? u - v : op == '*' ? u * v : op == '/' ? u / v : op == 'M' ? (u > v ? u : v)
                                                                                                    : (u < v ? u : v);
            e[j] = kiln_dim_static(r);
        } else if ((op == '*' && y.sym == 0 && y.value == 1) || ((op == '+' || op == '-') && y.sym == 0 && y.value == 0) ||
                   (op == '/' && y.sym == 0 && y.value == 1)) {
            e[j] = x;
        } else if ((op == '*' && x.sym == 0 && x.value == 1) || (op == '+' && x.sym == 0 && x.value == 0)) {
            e[j] = y;
        }
    }
    *count = k;
    return true;
}

/* Evaluates value out, produced by node n. */
static bool eval_node(const kiln_graph *g, const kiln_node *n, const kiln_value *out, kiln_dim *e, int cap, int *count,
                      int depth) {
    const char *op = n->op_type;
    if (n->domain && n->domain[0] && strcmp(n->domain, "ai.onnx")) return false;
    if (!strcmp(op, "Shape")) {
        const kiln_value *x = kiln_node_input(g, n, 0);
        if (!x || x->ndim < 0) return false;
        int64_t r = x->ndim, start = 0, end = r;
        if (n->opset >= 15) {
            start = kiln_attr_int(n, "start", 0);
            end = kiln_attr_int(n, "end", r);
        }
        if (start < 0) start += r;
        if (end < 0) end += r;
        start = start < 0 ? 0 : start > r ? r : start;
        end = end < 0 ? 0 : end > r ? r : end;
        if (end - start > cap) return false;
        *count = 0;
        for (int64_t i = start; i < end; i++) e[(*count)++] = x->dims[i];
        return true;
    }
    if (!strcmp(op, "Size")) {
        const kiln_value *x = kiln_node_input(g, n, 0);
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
    if (!strcmp(op, "Identity") || ((!strcmp(op, "Squeeze") || !strcmp(op, "Unsqueeze") || !strcmp(op, "Reshape")) && out->ndim >= 0) ||
        (!strcmp(op, "Cast") && is_int((kiln_dtype)kiln_attr_int(n, "to", 0))))
        return eval_input(g, n, 0, e, cap, count, depth); /* the elements stay the same (out has rank <= 1) */
    if (!strcmp(op, "Concat")) {
        *count = 0;
        for (int i = 0; i < n->ninputs; i++) {
            int c;
            if (n->inputs[i] < 0) continue;
            if (!eval_input(g, n, i, e + *count, cap - *count, &c, depth)) return false;
            *count += c;
        }
        return true;
    }
    if (!strcmp(op, "Gather")) {
        kiln_dim d[KILN_SHAPE_VALUE_MAX];
        int64_t idx[KILN_SHAPE_VALUE_MAX];
        int nd, ni;
        if (kiln_attr_int(n, "axis", 0) != 0 || !eval_input(g, n, 0, d, KILN_SHAPE_VALUE_MAX, &nd, depth) ||
            !const_list(g, n, 1, idx, cap, &ni, depth))
            return false;
        for (int j = 0; j < ni; j++) {
            int64_t i = idx[j] < 0 ? idx[j] + nd : idx[j];
            if (i < 0 || i >= nd) return false;
            e[j] = d[i];
        }
        *count = ni;
        return true;
    }
    if (!strcmp(op, "Slice")) {
        kiln_dim d[KILN_SHAPE_VALUE_MAX];
        int64_t st[1], en[1], ax[1] = {0}, sp[1] = {1};
        int nd, c;
        if (!eval_input(g, n, 0, d, KILN_SHAPE_VALUE_MAX, &nd, depth)) return false;
        if (n->opset < 10) {
            const int64_t *s = kiln_attr_ints(n, "starts", &c), *t;
            if (!s || c != 1) return false;
            st[0] = s[0];
            if (!(t = kiln_attr_ints(n, "ends", &c)) || c != 1) return false;
            en[0] = t[0];
            if ((t = kiln_attr_ints(n, "axes", &c))) {
                if (c != 1) return false;
                ax[0] = t[0];
            }
        } else {
            if (!const_list(g, n, 1, st, 1, &c, depth) || c != 1 || !const_list(g, n, 2, en, 1, &c, depth) || c != 1) return false;
            if (n->ninputs > 3 && n->inputs[3] >= 0 && (!const_list(g, n, 3, ax, 1, &c, depth) || c != 1)) return false;
            if (n->ninputs > 4 && n->inputs[4] >= 0 && (!const_list(g, n, 4, sp, 1, &c, depth) || c != 1)) return false;
        }
        if ((ax[0] != 0 && ax[0] != -1) || sp[0] == 0) return false;
        int64_t first, cnt;
        kiln_slice_axis(nd, st[0], en[0], sp[0], &first, &cnt);
        if (cnt > cap) return false;
        for (int64_t j = 0; j < cnt; j++) e[j] = d[first + j * sp[0]];
        *count = (int)cnt;
        return true;
    }
    if (!strcmp(op, "Add") || !strcmp(op, "Sub") || !strcmp(op, "Mul") || !strcmp(op, "Div") || !strcmp(op, "Max") ||
        !strcmp(op, "Min")) {
        kiln_dim a[KILN_SHAPE_VALUE_MAX], b[KILN_SHAPE_VALUE_MAX];
        int na, nb;
        if (n->ninputs != 2 || !eval_input(g, n, 0, a, KILN_SHAPE_VALUE_MAX, &na, depth) ||
            !eval_input(g, n, 1, b, KILN_SHAPE_VALUE_MAX, &nb, depth))
            return false;
        return eval_binary(n, a, na, b, nb, e, cap, count);
    }
    return false;
}

static bool eval(const kiln_graph *g, int vid, kiln_dim *e, int cap, int *count, int depth) {
    if (vid < 0 || vid >= g->nvalues || depth > MAX_DEPTH) return false;
    const kiln_value *v = &g->values[vid];
    if (v->dtype != KILN_UNDEFINED && !is_int(v->dtype)) return false;
    if (v->ndim > 1) return false;
    if (v->constant) {
        const kiln_tensor *t = v->constant;
        int64_t c = kiln_tensor_numel(t);
        if (!is_int(t->dtype) || t->ndim > 1 || c > cap) return false;
        for (int64_t j = 0; j < c; j++) e[j] = kiln_dim_static(kiln_tensor_get_i64(t, j));
        *count = (int)c;
        return true;
    }
    bool ok = v->producer >= 0 && v->producer < g->nnodes && eval_node(g, &g->nodes[v->producer], v, e, cap, count, depth);
    if (!ok && v->ndim == 1 && v->dims[0].sym == 0 && v->dims[0].value <= cap) {
        /* the count is known from the value's own shape even if its elements are not */
        *count = (int)v->dims[0].value;
        for (int j = 0; j < *count; j++) e[j] = KILN_DIM_UNKNOWN;
        return true;
    }
    if (!ok && v->ndim == 0 && cap >= 1) {
        *count = 1;
        e[0] = KILN_DIM_UNKNOWN;
        return true;
    }
    return ok;
}

bool kiln_shape_value(const kiln_graph *g, int vid, kiln_dim *elems, int cap, int *count) {
    if (cap > KILN_SHAPE_VALUE_MAX) cap = KILN_SHAPE_VALUE_MAX;
    return eval(g, vid, elems, cap, count, 0);
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
