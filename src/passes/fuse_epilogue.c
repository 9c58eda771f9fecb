/* fuse_epilogue.c — folds what follows a Conv, Gemm or MatMul into it, in this order:
 *   bias      Add of a constant: a Conv without bias takes a [M, 1, ...] constant as its bias, a Gemm
 *             without C takes a constant that broadcasts to [M, N] as C, a MatMul takes a constant of
 *             N elements (N = its last output dim) along the last axis;
 *   residual  Add of a value of exactly the output's shape;
 *   activation Relu, LeakyRelu, Clip (constant bounds: ReLU6 and friends), Sigmoid, Tanh,
 *             HardSigmoid, HardSwish, Gelu (both forms), and x * Sigmoid(x) (SiLU).
 * The result is a kiln.FusedConv / FusedGemm / FusedMatMul (ir/fused_ops.h), or the plain Conv /
 * Gemm when only a bias was folded. Every folded value must feed nothing but the next step.
 * One view (Reshape, Flatten, Squeeze, Unsqueeze) that keeps the last dim may sit anywhere between a
 * Gemm / MatMul and the rest (GPT-2 exports: Gemm [B*S, N] -> Reshape [B, S, N] -> Gelu or residual
 * Add): the fused node then keeps the GEMM's output shape, reads a residual through a Reshape to it,
 * and a copy of the view follows it, writing the value the last folded node wrote. */
#include "passes/passes.h"

#include "core/status.h"
#include "ir/fused_ops.h"
#include "passes/pass_util.h"

#include <float.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

typedef enum { EP_CONV, EP_GEMM, EP_MATMUL } ep_kind;

typedef struct ep_match {
    int set[8];
    int n;
    int anchor;
    int y;        /* the value the next step reads */
    int bias;     /* MatMul bias, Gemm C or Conv B to use (-1: none new) */
    bool new_bias;
    int z;        /* residual, or -1 */
    kiln_act act;
    int view;     /* the view node stepped over (see step_over_view), or -1 */
    int pre;      /* the value that view reads: the fused node's output in the GEMM's shape */
    int vin[2];   /* the view's inputs, saved for the copy of it that follows the fused node */
    int vnin;
    bool z_view;  /* z was matched after the view: the fused node reads it reshaped to pre's shape */
} ep_match;

/* The one-element float value of optional input k of n (constant), or dflt when absent; false when
 * present but not a constant scalar. */
static bool bound(const pass_ctx *c, const kiln_node *n, int k, double dflt, double *out) {
    *out = dflt;
    if (k >= n->ninputs || n->inputs[k] < 0) return true;
    return pass_const_scalar(c, n->inputs[k], out);
}

/* Whether node n (reading y as input 0) is an activation the fused ops apply; fills act. */
static bool as_activation(const pass_ctx *c, const kiln_node *n, int y, kiln_act *act) {
    memset(act, 0, sizeof *act);
    if (n->ninputs < 1 || n->inputs[0] != y) return false;
    if (pass_is_op(n, "Relu")) act->kind = KILN_ACT_RELU;
    else if (pass_is_op(n, "Sigmoid")) act->kind = KILN_ACT_SIGMOID;
    else if (pass_is_op(n, "Tanh")) act->kind = KILN_ACT_TANH;
    else if (pass_is_op(n, "HardSwish")) act->kind = KILN_ACT_HARD_SWISH;
    else if (pass_is_op(n, "LeakyRelu")) {
        act->kind = KILN_ACT_LEAKY_RELU;
        act->p0 = kiln_attr_float(n, "alpha", 0.01f);
    } else if (pass_is_op(n, "HardSigmoid")) {
        act->kind = KILN_ACT_HARD_SIGMOID;
        act->p0 = kiln_attr_float(n, "alpha", 0.2f);
        act->p1 = kiln_attr_float(n, "beta", 0.5f);
    } else if (pass_is_op(n, "Gelu")) {
        const char *a = kiln_attr_string(n, "approximate", "none");
        if (strcmp(a, "none") && strcmp(a, "tanh")) return false;
        act->kind = strcmp(a, "tanh") ? KILN_ACT_GELU : KILN_ACT_GELU_TANH;
    } else if (pass_is_op(n, "Clip")) {
        double lo, hi;
        if (n->opset < 11) {
            lo = kiln_attr_float(n, "min", -FLT_MAX);
            hi = kiln_attr_float(n, "max", FLT_MAX);
        } else if (!bound(c, n, 1, -INFINITY, &lo) || !bound(c, n, 2, INFINITY, &hi)) {
            return false;
        }
        act->kind = KILN_ACT_CLIP;
        act->p0 = (float)lo;
        act->p1 = (float)hi;
    } else {
        return false;
    }
    return true;
}

/* The constant bias that Add node `add` (reading m->y) contributes, when the base op can take it. */
static bool match_bias(pass_ctx *c, ep_kind kind, const kiln_node *base, int add, ep_match *m) {
    const kiln_graph *g = c->g;
    int b = pass_other_input(&g->nodes[add], m->y);
    const kiln_value *bv = b >= 0 ? &g->values[b] : NULL, *y = &g->values[m->y];
    if (!bv || !bv->constant || bv->dtype != y->dtype || y->ndim < 1 || bv->ndim > y->ndim) return false;
    const kiln_tensor *t = bv->constant;
    if (kind != EP_MATMUL && base->ninputs > 2 && base->inputs[2] >= 0) return false; /* has its Gemm C / Conv B */
    if (kind == EP_GEMM && m->view < 0) {
        for (int d = 0; d < t->ndim; d++) {
            kiln_dim yd = y->dims[y->ndim - t->ndim + d];
            if (t->dims[d] != 1 && !(yd.sym == 0 && yd.value == t->dims[d])) return false;
        }
        m->bias = b;
        return true;
    }
    /* Conv: channel axis 1 of y; MatMul, and a Gemm seen through a view (y is not [M, N] then, but
     * its last axis is N): the last axis */
    int axis = kind == EP_CONV ? 1 : y->ndim - 1;
    kiln_dim ad = y->dims[axis];
    if (ad.sym != 0 || kiln_tensor_numel(t) != ad.value) return false;
    for (int d = 0; d < t->ndim; d++)
        if (t->dims[d] != 1 && y->ndim - t->ndim + d != axis) return false;
    m->bias = b;
    m->new_bias = kind != EP_MATMUL && t->ndim != 1;
    return true;
}

/* The dims of v for a Reshape constant: static sizes, the one symbolic size (if any) as -1; false
 * when the rank is unknown, more than one size is not static, or one is 0 (Reshape reads 0 as
 * "copy this dim of the input"). */
static bool reshape_dims(const kiln_value *v, int64_t *dims) {
    int unknown = 0;
    if (v->ndim < 1) return false;
    for (int d = 0; d < v->ndim; d++) {
        dims[d] = v->dims[d].sym == 0 ? v->dims[d].value : -1;
        unknown += v->dims[d].sym != 0;
        if (v->dims[d].sym == 0 && v->dims[d].value <= 0) return false;
    }
    return unknown <= 1;
}

/* Steps over node nx, the sole reader of m->y, when it is a view between a Gemm / MatMul and its
 * epilogue (a GPT-2 export's Gemm [B*S, N] -> Reshape [B, S, N] -> Gelu): a Reshape, Flatten,
 * Squeeze or Unsqueeze (element order kept) whose output keeps the last dim N, along which a bias
 * broadcasts, so it only regroups the leading dims; whose output feeds one node and no graph
 * output; whose attributes are plain ints (the rewrite copies them). At most one view per match.
 * Returns the node after the view, or nx when it did not step. */
static int step_over_view(pass_ctx *c, ep_kind kind, int nx, ep_match *m) {
    const kiln_graph *g = c->g;
    if (kind == EP_CONV || m->view >= 0 || nx < 0) return nx;
    const kiln_node *v = &g->nodes[nx];
    if (!pass_is_op(v, "Reshape") && !pass_is_op(v, "Flatten") && !pass_is_op(v, "Squeeze") && !pass_is_op(v, "Unsqueeze"))
        return nx;
    if (v->ninputs < 1 || v->ninputs > 2 || v->inputs[0] != m->y || v->noutputs != 1) return nx;
    const kiln_value *x = &g->values[m->y], *out = &g->values[v->outputs[0]];
    if (x->ndim < 1 || out->ndim < 1 || out->dtype != x->dtype ||
        !pass_same_dim(x->dims[x->ndim - 1], out->dims[out->ndim - 1]))
        return nx;
    for (int k = 0; k < v->nattrs; k++)
        if (v->attrs[k].type != KILN_ATTR_INT && v->attrs[k].type != KILN_ATTR_INTS) return nx;
    int after = pass_sole_consumer(c, v->outputs[0]);
    if (after < 0) return nx;
    m->view = nx;
    m->pre = m->y;
    m->vnin = v->ninputs;
    for (int k = 0; k < v->ninputs; k++) m->vin[k] = v->inputs[k];
    m->set[m->n++] = nx;
    m->y = v->outputs[0];
    return after;
}

/* Walks from base node id through bias, residual and activation, stepping over one view; fills m. */
static void match_steps(pass_ctx *c, ep_kind kind, int id, ep_match *m) {
    kiln_graph *g = c->g;
    m->set[m->n++] = id;
    m->anchor = id;
    m->y = g->nodes[id].outputs[0];
    m->bias = m->z = m->view = m->pre = -1;
    int nx = step_over_view(c, kind, pass_sole_consumer(c, m->y), m);
    if (nx >= 0 && pass_is_op(&g->nodes[nx], "Add") && match_bias(c, kind, &g->nodes[id], nx, m)) {
        m->set[m->n++] = m->anchor = nx;
        m->y = g->nodes[nx].outputs[0];
        nx = pass_sole_consumer(c, m->y);
    }
    nx = step_over_view(c, kind, nx, m);
    int64_t dims[KILN_MAX_DIMS];
    if (nx >= 0 && pass_is_op(&g->nodes[nx], "Add")) {
        int z = pass_other_input(&g->nodes[nx], m->y);
        /* after a view, z (of the view's output shape) is read reshaped to the GEMM's shape */
        if (z >= 0 && z != m->y && pass_same_shape(&g->values[z], &g->values[m->y]) &&
            g->values[z].dtype == g->values[m->y].dtype && (m->view < 0 || reshape_dims(&g->values[m->pre], dims))) {
            m->z = z;
            m->z_view = m->view >= 0;
            m->set[m->n++] = m->anchor = nx;
            m->y = g->nodes[nx].outputs[0];
            nx = pass_sole_consumer(c, m->y);
        }
    }
    nx = step_over_view(c, kind, nx, m);
    if (nx >= 0 && as_activation(c, &g->nodes[nx], m->y, &m->act)) {
        m->set[m->n++] = m->anchor = nx;
        return;
    }
    /* SiLU: y * Sigmoid(y) */
    int cons[2];
    if (pass_uses(c, m->y) != 2 || g->values[m->y].is_output || pass_consumers(c, m->y, cons, 2) != 2) return;
    for (int s = 0; s < 2; s++) {
        const kiln_node *sg = &g->nodes[cons[s]], *mu = &g->nodes[cons[1 - s]];
        if (pass_is_op(sg, "Sigmoid") && pass_is_op(mu, "Mul") && pass_other_input(mu, m->y) == sg->outputs[0]) {
            m->act.kind = KILN_ACT_SILU;
            m->set[m->n++] = cons[s];
            m->set[m->n++] = m->anchor = cons[1 - s];
            return;
        }
    }
}

/* match_steps, minus a view that nothing after it joined. */
static void match_epilogue(pass_ctx *c, ep_kind kind, int id, ep_match *m) {
    match_steps(c, kind, id, m);
    if (m->view >= 0 && m->set[m->n - 1] == m->view) {
        m->n--;
        m->y = m->pre;
        m->view = m->pre = -1;
    }
}

/* A 1-D copy of the bias constant b: a Conv's [M, 1, ...] or [1, M, 1, ...], a Gemm's [1, ..., N]
 * seen through a view. */
static kiln_status flat_bias(pass_ctx *c, int b, const char *name, int *out) {
    const kiln_tensor *t = c->g->values[b].constant;
    int64_t count = kiln_tensor_numel(t);
    kiln_tensor flat = {0};
    KILN_TRY(kiln_tensor_alloc(&flat, t->dtype, 1, &count));
    memcpy(flat.data, t->data, t->nbytes);
    char hint[300];
    snprintf(hint, sizeof hint, "%.280s_bias", name);
    kiln_status st = pass_new_constant(c, hint, &flat, out);
    kiln_tensor_release(&flat);
    return st;
}

/* A Reshape of the residual m->z (the view's output shape) to m->pre's shape, the fused node's
 * output shape, which Z must have (fused_ops.h); the same elements in the same order. */
static kiln_status residual_view(pass_ctx *c, const ep_match *m, const char *name, int *out) {
    kiln_graph *g = c->g;
    int64_t dims[KILN_MAX_DIMS];
    bool ok = reshape_dims(&g->values[m->pre], dims);
    KILN_ASSERT(ok); /* match_steps checked it */
    char hint[300];
    snprintf(hint, sizeof hint, "%.280s_residual", name);
    int shape, id;
    KILN_TRY(pass_new_ints(c, hint, dims, g->values[m->pre].ndim, &shape));
    KILN_TRY(pass_new_value(c, hint, out));
    int ins[2] = {m->z, shape};
    return pass_add_node(c, "", "Reshape", pass_onnx_opset(g, 13), hint, 2, ins, *out, &id);
}

/* After the rewrite, with a view stepped over: the fused node m->anchor writes m->pre (the GEMM's
 * shape, free now that its producer and the view are detached) and a copy of the view (op, opset,
 * inputs, attributes) reads it and writes the fused node's old output, so what follows sees the
 * same values and shapes. The copy is appended; pass_end sorts it after the fused node. */
static kiln_status view_after(pass_ctx *c, const ep_match *m) {
    kiln_graph *g = c->g;
    int y = g->nodes[m->anchor].outputs[0], ins[2] = {m->pre, m->vin[1]}, id;
    g->nodes[m->anchor].outputs[0] = m->pre;
    g->values[m->pre].producer = m->anchor;
    g->values[y].producer = -1;
    const kiln_node *v = &g->nodes[m->view];
    KILN_TRY(pass_add_node(c, v->domain, v->op_type, v->opset, v->name, m->vnin, ins, y, &id));
    for (int k = 0; k < g->nodes[m->view].nattrs; k++) { /* ints only (step_over_view) */
        const kiln_attr *a = &g->nodes[m->view].attrs[k];
        if (a->type == KILN_ATTR_INT) KILN_TRY(pass_attr_int(g, &g->nodes[id], a->name, a->i));
        else KILN_TRY(pass_attr_ints(g, &g->nodes[id], a->name, a->ints, a->n));
    }
    return KILN_OK;
}

static kiln_status try_fuse(pass_ctx *c, int id) {
    kiln_graph *g = c->g;
    const kiln_node *base = &g->nodes[id];
    ep_kind kind = pass_is_op(base, "Conv") ? EP_CONV : pass_is_op(base, "Gemm") ? EP_GEMM : EP_MATMUL;
    const kiln_value *y = kiln_node_output(g, base, 0);
    if (!y || !pass_is_float(y->dtype) || base->ninputs < 2 || base->noutputs != 1) return KILN_OK;
    if (kind == EP_MATMUL) {
        const kiln_value *a = kiln_node_input(g, base, 0), *b = kiln_node_input(g, base, 1);
        if (!a || !b || a->ndim < 2 || b->ndim < 2) return KILN_OK; /* 1-D operands change the output rank */
    }
    ep_match m;
    memset(&m, 0, sizeof m);
    match_epilogue(c, kind, id, &m);
    if (m.n == 1 || !pass_closed(c, m.set, m.n, m.anchor)) return KILN_OK;
    int bias = m.bias;
    if (m.new_bias) KILN_TRY(flat_bias(c, m.bias, g->nodes[id].name, &bias));
    int z = m.z;
    if (m.z_view) KILN_TRY(residual_view(c, &m, g->nodes[id].name, &z));
    base = &g->nodes[id];
    int ins[4] = {base->inputs[0], base->inputs[1], base->ninputs > 2 ? base->inputs[2] : -1, z};
    if (bias >= 0) ins[2] = bias;
    bool plain = m.z < 0 && m.act.kind == KILN_ACT_NONE && kind != EP_MATMUL;
    const char *op = plain ? base->op_type
                           : kind == EP_CONV ? "FusedConv" : kind == EP_GEMM ? "FusedGemm" : "FusedMatMul";
    int nin = m.z >= 0 ? 4 : ins[2] >= 0 ? 3 : 2;
    char detail[128] = "";
    int len = 0;
    if (m.bias >= 0) len += snprintf(detail, sizeof detail, "bias");
    if (m.z >= 0) len += snprintf(detail + len, sizeof detail - (size_t)len, "%sresidual", len ? ", " : "");
    if (m.act.kind)
        len += snprintf(detail + len, sizeof detail - (size_t)len, "%s%s", len ? ", " : "", kiln_activation_name(m.act.kind));
    if (m.view >= 0) snprintf(detail + len, sizeof detail - (size_t)len, "; then %s", g->nodes[m.view].op_type);
    if (!plain) KILN_TRY(pass_use_kiln_domain(c));
    kiln_node *out;
    KILN_TRY(pass_rewrite(c, m.set, m.n, m.anchor, plain ? "" : KILN_FUSED_DOMAIN, op,
                          plain ? base->opset : KILN_FUSED_OPSET, base->name, nin, ins, id, detail, &out));
    if (kind == EP_GEMM && m.bias >= 0) /* C was absent, so beta did not matter before; it scales C now */
        for (int k = 0; k < out->nattrs; k++)
            if (!strcmp(out->attrs[k].name, "beta")) out->attrs[k].f = 1.0f;
    if (m.act.kind != KILN_ACT_NONE) {
        KILN_TRY(pass_attr_string(g, out, "activation", kiln_activation_name(m.act.kind)));
        float params[2] = {m.act.p0, m.act.p1};
        int np = kiln_activation_nparams(m.act.kind);
        if (np) KILN_TRY(pass_attr_floats(g, out, "activation_params", params, np));
    }
    return m.view >= 0 ? view_after(c, &m) : KILN_OK;
}

kiln_status kiln_pass_fuse_epilogue(kiln_graph *g, bool *changed) {
    pass_ctx c;
    KILN_TRY(pass_begin(&c, g, "fuse_epilogue"));
    kiln_status st = KILN_OK;
    for (int i = 0; i < g->nnodes && st == KILN_OK; i++) {
        const kiln_node *n = &g->nodes[i];
        if (pass_is_op(n, "Conv") || pass_is_op(n, "Gemm") || pass_is_op(n, "MatMul")) st = try_fuse(&c, i);
    }
    return pass_end(&c, st, changed);
}
