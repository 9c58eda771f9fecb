/* fuse_epilogue.c — folds what follows a Conv, Gemm or MatMul into it, in this order:
 *   bias      Add of a constant: a Conv without bias takes a [M, 1, ...] constant as its bias, a Gemm
 *             without C takes a constant that broadcasts to [M, N] as C, a MatMul takes a constant of
 *             N elements (N = its last output dim) along the last axis;
 *   residual  Add of a value of exactly the output's shape;
 *   activation Relu, LeakyRelu, Clip (constant bounds: ReLU6 and friends), Sigmoid, Tanh,
 *             HardSigmoid, HardSwish, Gelu (both forms), and x * Sigmoid(x) (SiLU).
 * The result is a kiln.FusedConv / FusedGemm / FusedMatMul (ir/fused_ops.h), or the plain Conv /
 * Gemm when only a bias was folded. Every folded value must feed nothing but the next step. */
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
    if (kind == EP_GEMM) {
        if (base->ninputs > 2 && base->inputs[2] >= 0) return false;
        for (int d = 0; d < t->ndim; d++) {
            kiln_dim yd = y->dims[y->ndim - t->ndim + d];
            if (t->dims[d] != 1 && !(yd.sym == 0 && yd.value == t->dims[d])) return false;
        }
        m->bias = b;
        return true;
    }
    /* Conv: channel axis 1 of y; MatMul: the last axis */
    int axis = kind == EP_CONV ? 1 : y->ndim - 1;
    if (kind == EP_CONV && base->ninputs > 2 && base->inputs[2] >= 0) return false;
    kiln_dim ad = y->dims[axis];
    if (ad.sym != 0 || kiln_tensor_numel(t) != ad.value) return false;
    for (int d = 0; d < t->ndim; d++)
        if (t->dims[d] != 1 && y->ndim - t->ndim + d != axis) return false;
    m->bias = b;
    m->new_bias = kind == EP_CONV && t->ndim != 1;
    return true;
}

/* Walks from base node id through bias, residual and activation; fills m. */
static void match_epilogue(pass_ctx *c, ep_kind kind, int id, ep_match *m) {
    kiln_graph *g = c->g;
    m->set[m->n++] = id;
    m->anchor = id;
    m->y = g->nodes[id].outputs[0];
    m->bias = m->z = -1;
    int nx = pass_sole_consumer(c, m->y);
    if (nx >= 0 && pass_is_op(&g->nodes[nx], "Add") && match_bias(c, kind, &g->nodes[id], nx, m)) {
        m->set[m->n++] = m->anchor = nx;
        m->y = g->nodes[nx].outputs[0];
        nx = pass_sole_consumer(c, m->y);
    }
    if (nx >= 0 && pass_is_op(&g->nodes[nx], "Add")) {
        int z = pass_other_input(&g->nodes[nx], m->y);
        if (z >= 0 && z != m->y && pass_same_shape(&g->values[z], &g->values[m->y]) &&
            g->values[z].dtype == g->values[m->y].dtype) {
            m->z = z;
            m->set[m->n++] = m->anchor = nx;
            m->y = g->nodes[nx].outputs[0];
            nx = pass_sole_consumer(c, m->y);
        }
    }
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

/* A 1-D copy of the Conv bias constant b (shaped [M, 1, ...] or [1, M, 1, ...]). */
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
    base = &g->nodes[id];
    int ins[4] = {base->inputs[0], base->inputs[1], base->ninputs > 2 ? base->inputs[2] : -1, m.z};
    if (bias >= 0) ins[2] = bias;
    bool plain = m.z < 0 && m.act.kind == KILN_ACT_NONE && kind != EP_MATMUL;
    const char *op = plain ? base->op_type
                           : kind == EP_CONV ? "FusedConv" : kind == EP_GEMM ? "FusedGemm" : "FusedMatMul";
    int nin = m.z >= 0 ? 4 : ins[2] >= 0 ? 3 : 2;
    char detail[128] = "";
    int len = 0;
    if (m.bias >= 0) len += snprintf(detail, sizeof detail, "bias");
    if (m.z >= 0) len += snprintf(detail + len, sizeof detail - (size_t)len, "%sresidual", len ? ", " : "");
    if (m.act.kind) snprintf(detail + len, sizeof detail - (size_t)len, "%s%s", len ? ", " : "", kiln_activation_name(m.act.kind));
    if (!plain) KILN_TRY(pass_use_kiln_domain(c));
    kiln_node *out;
    KILN_TRY(pass_rewrite(c, m.set, m.n, m.anchor, plain ? "" : KILN_FUSED_DOMAIN, op,
                          plain ? base->opset : KILN_FUSED_OPSET, base->name, nin, ins, id, detail, &out));
    if (kind == EP_GEMM && m.bias >= 0) /* C was absent, so beta did not matter before; it scales C now */
        for (int k = 0; k < out->nattrs; k++)
            if (!strcmp(out->attrs[k].name, "beta")) out->attrs[k].f = 1.0f;
    if (m.act.kind == KILN_ACT_NONE) return KILN_OK;
    KILN_TRY(pass_attr_string(g, out, "activation", kiln_activation_name(m.act.kind)));
    float params[2] = {m.act.p0, m.act.p1};
    int np = kiln_activation_nparams(m.act.kind);
    return np ? pass_attr_floats(g, out, "activation_params", params, np) : KILN_OK;
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
