/* fuse_gelu.c — recognizes both GELU forms that exporters write out element by element and replaces
 * each with one Gelu (opset 20 semantics):
 *     erf form   x * 0.5 * (1 + erf(x / sqrt(2)))            (or x * (1/sqrt 2) inside the erf)
 *     tanh form  0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 * x^3)))   (x^3 as Pow or Mul)
 * The outer product may be grouped and ordered any way (x * 0.5 first, or 0.5 * (1 + ...) first).
 * Constants must match to 1e-6 relative; every intermediate must feed only the pattern. */
#include "passes/passes.h"

#include "core/status.h"
#include "passes/pass_util.h"

#include <math.h>

#define GELU_TOL 1e-6

typedef struct gelu_match {
    int set[PASS_MAX_SET];
    int n;
    int x;      /* the GELU input */
    bool tanh;  /* approximate = "tanh" */
} gelu_match;

static void add_node(gelu_match *m, int id) {
    if (m->n < PASS_MAX_SET) m->set[m->n++] = id;
}

/* The operand of binary node n that is the constant want (either side); returns the other one, or -1. */
static int with_const(const pass_ctx *c, const kiln_node *n, double want) {
    if (n->ninputs != 2) return -1;
    if (pass_const_is(c, n->inputs[1], want, GELU_TOL)) return n->inputs[0];
    if (pass_const_is(c, n->inputs[0], want, GELU_TOL)) return n->inputs[1];
    return -1;
}

/* erf argument t = x / sqrt 2 or x * (1 / sqrt 2): sets m->x. */
static bool match_erf_arg(const pass_ctx *c, int t, gelu_match *m) {
    int d = pass_producer(c, t, "Div");
    if (d >= 0) {
        const kiln_node *n = &c->g->nodes[d];
        if (!pass_const_is(c, n->inputs[1], sqrt(2.0), GELU_TOL)) return false;
        m->x = n->inputs[0];
        add_node(m, d);
        return true;
    }
    int p = pass_producer(c, t, "Mul");
    if (p < 0 || (m->x = with_const(c, &c->g->nodes[p], 1.0 / sqrt(2.0))) < 0) return false;
    add_node(m, p);
    return true;
}

/* cube = Pow(x, 3), Mul(x, Mul(x, x)) or Mul(Mul(x, x), x). */
static bool match_cube(const pass_ctx *c, int cube, int x, gelu_match *m) {
    int p = pass_producer(c, cube, "Pow");
    if (p >= 0) {
        const kiln_node *n = &c->g->nodes[p];
        if (n->inputs[0] != x || !pass_const_is(c, n->inputs[1], 3.0, 0.0)) return false;
        add_node(m, p);
        return true;
    }
    p = pass_producer(c, cube, "Mul");
    if (p < 0) return false;
    const kiln_node *n = &c->g->nodes[p];
    int sq = pass_other_input(n, x);
    int q = sq >= 0 ? pass_producer(c, sq, "Mul") : -1;
    if (q < 0 || c->g->nodes[q].inputs[0] != x || c->g->nodes[q].inputs[1] != x) return false;
    add_node(m, p);
    add_node(m, q);
    return true;
}

/* tanh argument t = sqrt(2/pi) * (x + 0.044715 * x^3): sets m->x. */
static bool match_tanh_arg(const pass_ctx *c, int t, gelu_match *m) {
    int p = pass_producer(c, t, "Mul");
    if (p < 0) return false;
    int inner = with_const(c, &c->g->nodes[p], sqrt(2.0 / 3.14159265358979323846));
    int a = pass_producer(c, inner, "Add");
    if (a < 0) return false;
    const kiln_node *an = &c->g->nodes[a];
    for (int side = 0; side < 2; side++) {
        int x = an->inputs[side], term = an->inputs[1 - side];
        int tm = pass_producer(c, term, "Mul");
        if (tm < 0 || with_const(c, &c->g->nodes[tm], 0.044715) < 0) continue;
        int save = m->n;
        add_node(m, p);
        add_node(m, a);
        add_node(m, tm);
        if (match_cube(c, with_const(c, &c->g->nodes[tm], 0.044715), x, m)) {
            m->x = x;
            return true;
        }
        m->n = save;
    }
    return false;
}

/* A value s = 1 + erf(...) or 1 + tanh(...) (either operand order): fills the inner part of m. */
static bool match_sum(const pass_ctx *c, int s, gelu_match *m) {
    int a = pass_producer(c, s, "Add");
    if (a < 0) return false;
    int e = with_const(c, &c->g->nodes[a], 1.0);
    int erf = pass_producer(c, e, "Erf"), tanh = pass_producer(c, e, "Tanh");
    if (erf < 0 && tanh < 0) return false;
    int save = m->n;
    add_node(m, a);
    add_node(m, erf >= 0 ? erf : tanh);
    m->tanh = tanh >= 0;
    bool ok = m->tanh ? match_tanh_arg(c, c->g->nodes[tanh].inputs[0], m) : match_erf_arg(c, c->g->nodes[erf].inputs[0], m);
    if (!ok) m->n = save;
    return ok;
}

/* Splits the product rooted at Mul node id into factors (values, at most 8; *nf = 9 when there are
 * more), descending into Mul nodes other than the producers of stop1 / stop2, at most depth levels
 * deep and through at most 4 Mul nodes (listed in muls). */
static void factors(const pass_ctx *c, int id, int stop1, int stop2, int depth, int *f, int *nf, int *muls, int *nm) {
    const kiln_node *n = &c->g->nodes[id];
    muls[(*nm)++] = id;
    for (int k = 0; k < 2; k++) {
        int v = n->inputs[k], p = pass_producer(c, v, "Mul");
        if (p >= 0 && v != stop1 && v != stop2 && depth > 0 && *nm < 4) factors(c, p, stop1, stop2, depth - 1, f, nf, muls, nm);
        else if (*nf < 8) f[(*nf)++] = v;
        else *nf = 9; /* too many factors: the caller gives up */
    }
}

/* Tries the GELU pattern with Mul node id as its last node. */
static kiln_status try_gelu(pass_ctx *c, int id) {
    kiln_graph *g = c->g;
    /* find the (1 + erf/tanh) factor among the operands of this Mul and of the Muls below it */
    int f[8], nf = 0, muls[4], nm = 0;
    factors(c, id, -1, -1, 2, f, &nf, muls, &nm);
    if (nf > 8) nf = 8;
    gelu_match m = {.n = 0, .x = -1};
    int sum = -1;
    for (int k = 0; k < nf && sum < 0; k++) {
        m.n = 0;
        if (match_sum(c, f[k], &m)) sum = f[k];
    }
    if (sum < 0) return KILN_OK;
    /* the product must be exactly x * 0.5 * sum */
    nf = nm = 0;
    factors(c, id, m.x, sum, 2, f, &nf, muls, &nm);
    if (nf > 8) return KILN_OK;
    int seen_x = 0, seen_sum = 0;
    double k = 1.0, cv;
    for (int i = 0; i < nf; i++) {
        if (f[i] == m.x) seen_x++;
        else if (f[i] == sum) seen_sum++;
        else if (pass_const_scalar(c, f[i], &cv)) k *= cv;
        else return KILN_OK;
    }
    if (seen_x != 1 || seen_sum != 1 || fabs(k - 0.5) > 0.5 * GELU_TOL) return KILN_OK;
    for (int i = 0; i < nm; i++) add_node(&m, muls[i]);
    const kiln_value *x = &g->values[m.x], *y = kiln_node_output(g, &g->nodes[id], 0);
    if (m.n >= PASS_MAX_SET || !pass_is_float(x->dtype) || x->ndim < 0 || !y || y->ndim != x->ndim) return KILN_OK;
    if (!pass_closed(c, m.set, m.n, id)) return KILN_OK;
    int ins[1] = {m.x};
    kiln_node *out;
    KILN_TRY(pass_rewrite(c, m.set, m.n, id, "", "Gelu", pass_onnx_opset(g, 20), g->nodes[id].name, 1, ins, -1,
                          m.tanh ? "tanh form" : "erf form", &out));
    return m.tanh ? pass_attr_string(g, out, "approximate", "tanh") : KILN_OK;
}

kiln_status kiln_pass_fuse_gelu(kiln_graph *g, bool *changed) {
    pass_ctx c;
    KILN_TRY(pass_begin(&c, g, "fuse_gelu"));
    kiln_status st = KILN_OK;
    for (int i = 0; i < g->nnodes && st == KILN_OK; i++)
        if (pass_is_op(&g->nodes[i], "Mul")) st = try_gelu(&c, i);
    return pass_end(&c, st, changed);
}
