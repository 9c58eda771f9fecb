/* fuse_norm.c — recognizes layer and RMS normalization written out element by element and replaces
 * each with LayerNormalization (opset 17) or RMSNormalization (opset 23 semantics; the node carries
 * that opset):
 *     LayerNorm  d = x - ReduceMean(x);  y = d / sqrt(ReduceMean(d^2) + eps)  [* gamma] [+ beta]
 *     RMSNorm    y = x / sqrt(ReduceMean(x^2) + eps)  [* gamma]
 * with the variants exporters emit: d^2 as Pow(d, 2) or Mul(d, d); the division as Div(d, s),
 * Mul(d, Reciprocal(s)), Mul(d, 1 / s) or Mul(d, Pow(v, -0.5)); s as Sqrt(v) or Pow(v, 0.5); and the
 * mixed-precision form (Llama) where x is Cast to float32 first and the normalized value Cast back
 * before the gamma Mul. Both ReduceMeans must reduce the same trailing axes with keepdims; gamma and
 * beta must broadcast onto the normalized axes without enlarging x. */
#include "passes/passes.h"

#include "core/status.h"
#include "passes/pass_util.h"

#include <stdio.h>
#include <string.h>

typedef struct norm_match {
    int set[PASS_MAX_SET];
    int n;
    int x;        /* the normalized input (before any Cast to float32) */
    int axis;     /* first normalized axis */
    double eps;
    bool layer;   /* LayerNorm (else RMSNorm) */
    int gamma, beta;
    int first_reduce;
    int anchor;
} norm_match;

static void add(norm_match *m, int id) {
    if (m->n < PASS_MAX_SET) m->set[m->n++] = id;
}

/* The first reduced axis of ReduceMean node r over a rank-`rank` input when it reduces a trailing run
 * of axes with keepdims = 1; -1 otherwise. */
static int reduce_axis(const pass_ctx *c, const kiln_node *r, int rank) {
    if (kiln_attr_int(r, "keepdims", 1) != 1 || rank < 1) return -1;
    int count = 0;
    const int64_t *axes = NULL;
    if (r->opset < 18) {
        axes = kiln_attr_ints(r, "axes", &count);
    } else if (r->ninputs > 1 && r->inputs[1] >= 0) {
        const kiln_tensor *t = c->g->values[r->inputs[1]].constant;
        if (!t || t->dtype != KILN_I64) return -1;
        axes = t->data;
        count = (int)kiln_tensor_numel(t);
    }
    if (count == 0) return r->opset >= 18 && kiln_attr_int(r, "noop_with_empty_axes", 0) ? -1 : 0;
    bool seen[KILN_MAX_DIMS] = {false};
    for (int i = 0; i < count; i++) {
        int64_t a = axes[i] < 0 ? axes[i] + rank : axes[i];
        if (a < 0 || a >= rank || seen[a]) return -1;
        seen[a] = true;
    }
    int first = rank - count;
    for (int a = first; a < rank; a++)
        if (!seen[a]) return -1;
    return first;
}

/* v = w^2 as Pow(w, 2) or Mul(w, w): returns w, or -1. */
static int square_of(const pass_ctx *c, int v, norm_match *m) {
    int p = pass_producer(c, v, "Pow");
    if (p >= 0 && pass_const_is(c, c->g->nodes[p].inputs[1], 2.0, 0.0)) {
        add(m, p);
        return c->g->nodes[p].inputs[0];
    }
    p = pass_producer(c, v, "Mul");
    if (p >= 0 && c->g->nodes[p].inputs[0] == c->g->nodes[p].inputs[1]) {
        add(m, p);
        return c->g->nodes[p].inputs[0];
    }
    return -1;
}

/* v = ReduceMean(w^2) + eps: returns w and sets eps, the reduce axis, first_reduce; or -1. */
static int mean_square_eps(const pass_ctx *c, int v, norm_match *m) {
    int a = pass_producer(c, v, "Add");
    if (a < 0) return -1;
    const kiln_node *an = &c->g->nodes[a];
    int var = -1;
    for (int k = 0; k < 2 && var < 0; k++)
        if (pass_const_scalar(c, an->inputs[1 - k], &m->eps)) var = an->inputs[k];
    int r = pass_producer(c, var, "ReduceMean");
    if (r < 0 || m->eps < 0) return -1;
    add(m, a);
    add(m, r);
    int w = square_of(c, c->g->nodes[r].inputs[0], m);
    const kiln_value *wv = w >= 0 ? &c->g->values[w] : NULL;
    if (!wv || wv->ndim < 1 || (m->axis = reduce_axis(c, &c->g->nodes[r], wv->ndim)) < 0) return -1;
    m->first_reduce = r;
    return w;
}

/* s = sqrt(v) as Sqrt(v) or Pow(v, 0.5): returns v, or -1. */
static int sqrt_of(const pass_ctx *c, int s, norm_match *m) {
    int p = pass_producer(c, s, "Sqrt");
    if (p < 0) {
        p = pass_producer(c, s, "Pow");
        if (p >= 0 && !pass_const_is(c, c->g->nodes[p].inputs[1], 0.5, 0.0)) p = -1;
    }
    if (p < 0) return -1;
    add(m, p);
    return c->g->nodes[p].inputs[0];
}

/* r = 1 / sqrt(v) as Reciprocal(sqrt), Div(1, sqrt) or Pow(v, -0.5): returns v, or -1. */
static int rsqrt_of(const pass_ctx *c, int r, norm_match *m) {
    int p = pass_producer(c, r, "Reciprocal");
    if (p >= 0) {
        add(m, p);
        return sqrt_of(c, c->g->nodes[p].inputs[0], m);
    }
    p = pass_producer(c, r, "Div");
    if (p >= 0 && pass_const_is(c, c->g->nodes[p].inputs[0], 1.0, 0.0)) {
        add(m, p);
        return sqrt_of(c, c->g->nodes[p].inputs[1], m);
    }
    p = pass_producer(c, r, "Pow");
    if (p >= 0 && pass_const_is(c, c->g->nodes[p].inputs[1], -0.5, 0.0)) {
        add(m, p);
        return c->g->nodes[p].inputs[0];
    }
    return -1;
}

/* Matches the core u / sqrt(mean(u^2) + eps) ending at node id (Div or Mul); fills m. */
static bool match_core(const pass_ctx *c, int id, norm_match *m) {
    const kiln_node *n = &c->g->nodes[id];
    add(m, id);
    for (int k = 0; k < 2; k++) {
        int save = m->n, u = n->inputs[k], v;
        if (pass_is_op(n, "Div")) {
            if (k == 1) break;
            v = sqrt_of(c, n->inputs[1], m);
        } else {
            v = rsqrt_of(c, n->inputs[1 - k], m);
        }
        if (v >= 0 && mean_square_eps(c, v, m) == u) {
            /* u = x - ReduceMean(x) over the same axes makes it a LayerNorm */
            int s = pass_producer(c, u, "Sub"), r = s >= 0 ? pass_producer(c, c->g->nodes[s].inputs[1], "ReduceMean") : -1;
            const kiln_value *xv = s >= 0 ? kiln_node_input(c->g, &c->g->nodes[s], 0) : NULL;
            if (r >= 0 && c->g->nodes[r].inputs[0] == c->g->nodes[s].inputs[0] && xv->ndim >= 1 &&
                reduce_axis(c, &c->g->nodes[r], xv->ndim) == m->axis) {
                add(m, s);
                add(m, r);
                m->layer = true;
                m->first_reduce = r;
                m->x = c->g->nodes[s].inputs[0];
            } else {
                m->x = u;
            }
            return true;
        }
        m->n = save;
    }
    return false;
}

/* Whether parameter value p broadcasts onto x's axes [axis, rank) without enlarging x. */
static bool param_fits(const kiln_graph *g, int p, int x, int axis) {
    const kiln_value *pv = &g->values[p], *xv = &g->values[x];
    if (pv->dtype != xv->dtype || pv->ndim < 0 || xv->ndim < 0 || pv->ndim > xv->ndim) return false;
    for (int d = 0; d < pv->ndim; d++) {
        int xd = xv->ndim - pv->ndim + d;
        kiln_dim a = pv->dims[d];
        bool one = a.sym == 0 && a.value == 1;
        if (xd < axis ? !one : !(one || pass_same_dim(a, xv->dims[xd]))) return false;
    }
    return true;
}

/* Extends the match past the core: the Casts of the mixed-precision form, gamma, beta. */
static void match_affine(const pass_ctx *c, norm_match *m) {
    kiln_graph *g = c->g;
    int y = g->nodes[m->anchor].outputs[0];
    int cast_in = pass_producer(c, m->x, "Cast");
    if (cast_in >= 0 && g->values[m->x].dtype == KILN_F32) {
        int x0 = g->nodes[cast_in].inputs[0], back = pass_sole_consumer(c, y);
        kiln_dtype t0 = x0 >= 0 ? g->values[x0].dtype : KILN_UNDEFINED;
        if ((t0 == KILN_F16 || t0 == KILN_BF16) && back >= 0 && pass_is_op(&g->nodes[back], "Cast") &&
            kiln_attr_int(&g->nodes[back], "to", -1) == (int64_t)t0) {
            add(m, cast_in);
            add(m, back);
            m->x = x0;
            m->anchor = back;
            y = g->nodes[back].outputs[0];
        }
    }
    int mul = pass_sole_consumer(c, y);
    if (mul < 0 || !pass_is_op(&g->nodes[mul], "Mul")) return;
    int gamma = pass_other_input(&g->nodes[mul], y);
    if (gamma < 0 || !param_fits(g, gamma, m->x, m->axis)) return;
    add(m, mul);
    m->gamma = gamma;
    m->anchor = mul;
    y = g->nodes[mul].outputs[0];
    int plus = m->layer ? pass_sole_consumer(c, y) : -1;
    if (plus < 0 || !pass_is_op(&g->nodes[plus], "Add")) return;
    int beta = pass_other_input(&g->nodes[plus], y);
    if (beta < 0 || !param_fits(g, beta, m->x, m->axis)) return;
    add(m, plus);
    m->beta = beta;
    m->anchor = plus;
}

/* A constant of ones shaped like x's normalized axes (which must be static), as gamma. */
static kiln_status ones_gamma(pass_ctx *c, const norm_match *m, int *id) {
    const kiln_value *xv = &c->g->values[m->x];
    int64_t dims[KILN_MAX_DIMS];
    int nd = xv->ndim - m->axis;
    *id = -1;
    for (int d = 0; d < nd; d++) {
        if (xv->dims[m->axis + d].sym != 0) return KILN_OK;
        dims[d] = xv->dims[m->axis + d].value;
    }
    kiln_tensor t = {0};
    KILN_TRY(kiln_tensor_alloc(&t, xv->dtype, nd, dims));
    for (int64_t i = 0; i < kiln_tensor_numel(&t); i++) kiln_tensor_set_f64(&t, i, 1.0);
    char hint[300];
    snprintf(hint, sizeof hint, "%.280s_ones", c->g->nodes[m->first_reduce].name);
    kiln_status st = pass_new_constant(c, hint, &t, id);
    kiln_tensor_release(&t);
    return st;
}

static kiln_status try_norm(pass_ctx *c, int id) {
    kiln_graph *g = c->g;
    norm_match m;
    memset(&m, 0, sizeof m);
    m.gamma = m.beta = -1;
    if (!match_core(c, id, &m)) return KILN_OK;
    m.anchor = id;
    match_affine(c, &m);
    const kiln_value *xv = &g->values[m.x];
    if (m.n >= PASS_MAX_SET || !pass_is_float(xv->dtype) || xv->ndim < 1) return KILN_OK;
    const kiln_value *y = kiln_node_output(g, &g->nodes[m.anchor], 0);
    /* every other operand has one element or was checked by param_fits: equal ranks mean equal shapes */
    if (!y || y->ndim != xv->ndim || !pass_closed(c, m.set, m.n, m.anchor)) return KILN_OK;
    int gamma = m.gamma;
    if (gamma < 0) {
        KILN_TRY(ones_gamma(c, &m, &gamma));
        if (gamma < 0) return KILN_OK;
    }
    int ins[3] = {m.x, gamma, m.beta};
    const char *op = m.layer ? "LayerNormalization" : "RMSNormalization";
    char detail[96];
    snprintf(detail, sizeof detail, "axis %d, epsilon %g%s%s", m.axis, m.eps, m.gamma >= 0 ? ", scale" : "",
             m.beta >= 0 ? ", bias" : "");
    kiln_node *out;
    KILN_TRY(pass_rewrite(c, m.set, m.n, m.anchor, "", op, pass_onnx_opset(g, m.layer ? 17 : 23),
                          g->nodes[m.first_reduce].name, m.beta >= 0 ? 3 : 2, ins, -1, detail, &out));
    KILN_TRY(pass_attr_int(g, out, "axis", m.axis));
    KILN_TRY(pass_attr_float(g, out, "epsilon", (float)m.eps));
    return pass_attr_int(g, out, "stash_type", KILN_F32);
}

kiln_status kiln_pass_fuse_norm(kiln_graph *g, bool *changed) {
    pass_ctx c;
    KILN_TRY(pass_begin(&c, g, "fuse_norm"));
    kiln_status st = KILN_OK;
    for (int i = 0; i < g->nnodes && st == KILN_OK; i++)
        if (pass_is_op(&g->nodes[i], "Div") || pass_is_op(&g->nodes[i], "Mul")) st = try_norm(&c, i);
    return pass_end(&c, st, changed);
}
