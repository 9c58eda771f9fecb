/* fuse_elementwise.c — turns a tree of float32 elementwise ops over values of one shape into one
 * kiln.ElementwiseChain (a postfix program, ir/fused_ops.h), so the intermediate tensors are never
 * written. An op joins when its output has exactly the shape of each of its inputs (no broadcasting
 * except one-element constants, which become program constants) and, unless it is the tree's root,
 * its output feeds only the tree. Runs after the pattern fusions, so it takes what they left. */
#include "passes/passes.h"

#include "core/status.h"
#include "ir/fused_ops.h"
#include "passes/pass_util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CHAIN_MAX_INPUTS 8
#define CHAIN_MAX_PROG 128

static const struct {
    const char *op;
    kiln_chain_op code;
    int arity;
} g_ops[] = {
    {"Add", KILN_CHAIN_ADD, 2},   {"Sub", KILN_CHAIN_SUB, 2},         {"Mul", KILN_CHAIN_MUL, 2},
    {"Div", KILN_CHAIN_DIV, 2},   {"Neg", KILN_CHAIN_NEG, 1},         {"Relu", KILN_CHAIN_RELU, 1},
    {"Sigmoid", KILN_CHAIN_SIGMOID, 1}, {"Tanh", KILN_CHAIN_TANH, 1}, {"Exp", KILN_CHAIN_EXP, 1},
    {"Sqrt", KILN_CHAIN_SQRT, 1}, {"Reciprocal", KILN_CHAIN_RECIPROCAL, 1}, {"Erf", KILN_CHAIN_ERF, 1},
    {"Abs", KILN_CHAIN_ABS, 1},
};

/* The opcode of node n when it is a chainable op (float32, every input of the output's shape or a
 * one-element constant), else 0. */
static int chain_code(const pass_ctx *c, const kiln_node *n) {
    const kiln_value *y = kiln_node_output(c->g, n, 0);
    if (!y || y->dtype != KILN_F32 || y->ndim < 0 || n->noutputs != 1) return 0;
    for (size_t i = 0; i < sizeof g_ops / sizeof *g_ops; i++) {
        if (!pass_is_op(n, g_ops[i].op) || n->ninputs != g_ops[i].arity) continue;
        for (int k = 0; k < n->ninputs; k++) {
            const kiln_value *x = kiln_node_input(c->g, n, k);
            double s;
            if (!x || x->dtype != KILN_F32) return 0;
            bool scalar = pass_const_scalar(c, n->inputs[k], &s) && x->ndim <= y->ndim;
            if (!scalar && !pass_same_shape(x, y)) return 0;
        }
        return g_ops[i].code;
    }
    return 0;
}

typedef struct chain {
    int set[PASS_MAX_SET];
    int n;
    int64_t prog[CHAIN_MAX_PROG];
    int nprog;
    int inputs[CHAIN_MAX_INPUTS];
    int ninputs;
    float consts[CHAIN_MAX_PROG];
    int nconsts;
    int depth, max_depth;
    bool overflow;
} chain;

static void emit(chain *ch, int64_t v) {
    if (ch->nprog < CHAIN_MAX_PROG) ch->prog[ch->nprog++] = v;
    else ch->overflow = true;
}

static void push(chain *ch) {
    if (++ch->depth > ch->max_depth) ch->max_depth = ch->depth;
}

/* Emits the program computing value v: a value made by a chainable node, read only once (by the
 * tree) and of the tree's shape is expanded into that node's program (the node joins the tree); a
 * one-element constant becomes a program constant; anything else is loaded as an input. */
static void emit_value(const pass_ctx *c, chain *ch, int v, const kiln_value *shape) {
    double s;
    int p = pass_producer(c, v, NULL);
    int code = p >= 0 ? chain_code(c, &c->g->nodes[p]) : 0;
    if (code && pass_sole_consumer(c, v) >= 0 && pass_same_shape(&c->g->values[v], shape) && ch->n < PASS_MAX_SET) {
        const kiln_node *n = &c->g->nodes[p];
        ch->set[ch->n++] = p;
        for (int k = 0; k < n->ninputs; k++) emit_value(c, ch, n->inputs[k], shape);
        emit(ch, code);
        if (n->ninputs == 2) ch->depth--;
        return;
    }
    if (pass_const_scalar(c, v, &s) && !pass_same_shape(&c->g->values[v], shape)) {
        emit(ch, KILN_CHAIN_CONST);
        emit(ch, ch->nconsts);
        ch->consts[ch->nconsts++] = (float)s;
        push(ch);
        return;
    }
    int slot = 0;
    while (slot < ch->ninputs && ch->inputs[slot] != v) slot++;
    if (slot == ch->ninputs) {
        if (ch->ninputs == CHAIN_MAX_INPUTS) {
            ch->overflow = true;
            return;
        }
        ch->inputs[ch->ninputs++] = v;
    }
    emit(ch, KILN_CHAIN_LOAD);
    emit(ch, slot);
    push(ch);
}

static kiln_status try_chain(pass_ctx *c, int root, bool *claimed) {
    kiln_graph *g = c->g;
    const kiln_node *r = &g->nodes[root];
    int code = chain_code(c, r);
    if (!code || claimed[root]) return KILN_OK;
    chain ch;
    memset(&ch, 0, sizeof ch);
    ch.set[ch.n++] = root;
    const kiln_value *shape = kiln_node_output(g, r, 0);
    for (int k = 0; k < r->ninputs; k++) emit_value(c, &ch, r->inputs[k], shape);
    emit(&ch, code);
    for (int s = 0; s < ch.n; s++) claimed[ch.set[s]] = true;
    if (ch.n < 2 || ch.overflow || ch.max_depth > KILN_CHAIN_MAX_STACK || ch.ninputs == 0) return KILN_OK;
    if (!pass_closed(c, ch.set, ch.n, root)) return KILN_OK;
    KILN_TRY(pass_use_kiln_domain(c));
    char detail[64];
    snprintf(detail, sizeof detail, "%d ops, %d inputs", ch.n, ch.ninputs);
    kiln_node *out;
    KILN_TRY(pass_rewrite(c, ch.set, ch.n, root, KILN_FUSED_DOMAIN, "ElementwiseChain", KILN_FUSED_OPSET, r->name,
                          ch.ninputs, ch.inputs, -1, detail, &out));
    KILN_TRY(pass_attr_ints(g, out, "program", ch.prog, ch.nprog));
    return pass_attr_floats(g, out, "constants", ch.consts, ch.nconsts);
}

kiln_status kiln_pass_fuse_elementwise(kiln_graph *g, bool *changed) {
    pass_ctx c;
    KILN_TRY(pass_begin(&c, g, "fuse_elementwise"));
    bool *claimed = calloc((size_t)g->nnodes + 1, sizeof *claimed);
    kiln_status st = claimed ? KILN_OK : kiln_error(KILN_ERR_OUT_OF_MEMORY, "fuse_elementwise: out of memory");
    /* consumers come after producers: walking backwards meets each tree at its root first */
    for (int i = g->nnodes - 1; i >= 0 && st == KILN_OK; i--)
        if (pass_alive(&g->nodes[i])) st = try_chain(&c, i, claimed);
    free(claimed);
    return pass_end(&c, st, changed);
}
