/* eliminate_noops.c — removes nodes that do not change their input: Identity, inference-mode
 * Dropout, Cast/CastLike to the type the value already has, Reshape/Flatten/Squeeze/Unsqueeze to
 * the shape it already has (static sizes or the same symbols), Transpose by the identity
 * permutation, and pairs of reshaping ops that return to the shape they started from; merges a
 * Transpose of a Transpose into one (or nothing, when they cancel) and lets a Reshape read past an
 * earlier reshaping op. */
#include "passes/passes.h"

#include "core/log.h"
#include "core/status.h"
#include "passes/pass_util.h"

#include <string.h>

static bool is_reshaping(const kiln_node *n) {
    return pass_is_op(n, "Reshape") || pass_is_op(n, "Flatten") || pass_is_op(n, "Squeeze") || pass_is_op(n, "Unsqueeze");
}

/* Whether node n (one of the no-op candidates) provably returns its input 0 unchanged. */
static bool is_noop(const pass_ctx *c, const kiln_node *n) {
    const kiln_graph *g = c->g;
    const kiln_value *x = kiln_node_input(g, n, 0), *y = kiln_node_output(g, n, 0);
    if (!x || !y || n->noutputs < 1) return false;
    if (pass_is_op(n, "Identity")) return true;
    if (pass_is_op(n, "Dropout")) {
        const kiln_value *mode = n->opset >= 12 ? kiln_node_input(g, n, 2) : NULL;
        double m;
        if (mode && !(pass_const_scalar(c, n->inputs[2], &m) && m == 0.0)) return false;
        return true; /* remove_noop keeps the node when its mask output is read */
    }
    if (x->dtype == KILN_UNDEFINED || x->dtype != y->dtype) return false;
    if (pass_is_op(n, "Cast")) return kiln_attr_int(n, "to", -1) == (int64_t)x->dtype;
    if (pass_is_op(n, "CastLike")) {
        const kiln_value *like = kiln_node_input(g, n, 1);
        return like && like->dtype == x->dtype;
    }
    if (is_reshaping(n)) return pass_same_shape(x, y);
    if (pass_is_op(n, "Transpose")) {
        int np;
        const int64_t *perm = kiln_attr_ints(n, "perm", &np);
        if (!perm) return x->ndim >= 0 && x->ndim <= 1;
        for (int i = 0; i < np; i++)
            if (perm[i] != i) return false;
        return true;
    }
    return false;
}

/* Removes no-op node id whose output is its input 0. When the output is a graph output, the input's
 * producer writes it directly instead (if nothing else reads the input). Returns whether it did. */
static bool remove_noop(pass_ctx *c, int id) {
    kiln_graph *g = c->g;
    kiln_node *n = &g->nodes[id];
    int x = n->inputs[0], y = n->outputs[0];
    for (int k = 1; k < n->noutputs; k++) /* a Dropout mask that someone reads keeps the node */
        if (n->outputs[k] >= 0 && (pass_uses(c, n->outputs[k]) > 0 || g->values[n->outputs[k]].is_output)) return false;
    if (!g->values[y].is_output) {
        KILN_LOG(KILN_LOG_VERBOSE, "%s: %s '%s' removed (reads '%s' unchanged)", c->pass, n->op_type, n->name,
                 g->values[x].name);
        pass_replace_uses(c, y, x);
        pass_detach(c, id);
        c->changes++;
        return true;
    }
    int p = pass_producer(c, x, NULL);
    const kiln_value *xv = &g->values[x];
    if (p < 0 || pass_uses(c, x) != 1 || xv->is_output || xv->is_input || xv->constant) return false;
    kiln_node *pn = &g->nodes[p];
    KILN_LOG(KILN_LOG_VERBOSE, "%s: %s '%s' removed (%s '%s' writes graph output '%s')", c->pass, n->op_type, n->name,
             pn->op_type, pn->name, g->values[y].name);
    for (int k = 0; k < pn->noutputs; k++)
        if (pn->outputs[k] == x) pn->outputs[k] = y;
    g->values[x].producer = -1;
    pass_detach(c, id);
    g->values[y].producer = p;
    c->changes++;
    return true;
}

/* The permutation of Transpose n (its default reverses the rank), into perm; false when unknown. */
static bool transpose_perm(const kiln_graph *g, const kiln_node *n, int64_t *perm, int *rank) {
    int np;
    const int64_t *p = kiln_attr_ints(n, "perm", &np);
    const kiln_value *x = kiln_node_input(g, n, 0);
    if (p) {
        if (np > KILN_MAX_DIMS) return false;
        memcpy(perm, p, (size_t)np * sizeof *perm);
        *rank = np;
        return true;
    }
    if (!x || x->ndim < 0) return false;
    for (int i = 0; i < x->ndim; i++) perm[i] = x->ndim - 1 - i;
    *rank = x->ndim;
    return true;
}

/* Transpose(Transpose(x, p1), p2) -> x when they cancel, else Transpose(x, p1[p2]). */
static kiln_status merge_transposes(pass_ctx *c, int id) {
    kiln_graph *g = c->g;
    int inner = pass_producer(c, g->nodes[id].inputs[0], "Transpose");
    if (inner < 0) return KILN_OK;
    int64_t p1[KILN_MAX_DIMS], p2[KILN_MAX_DIMS], comp[KILN_MAX_DIMS];
    int r1, r2;
    if (!transpose_perm(g, &g->nodes[inner], p1, &r1) || !transpose_perm(g, &g->nodes[id], p2, &r2) || r1 != r2)
        return KILN_OK;
    bool identity = true;
    for (int i = 0; i < r2; i++) {
        if (p2[i] < 0 || p2[i] >= r1) return KILN_OK;
        comp[i] = p1[p2[i]];
        identity = identity && comp[i] == i;
    }
    int x = g->nodes[inner].inputs[0], mid = g->nodes[id].inputs[0];
    const kiln_node *a = &g->nodes[inner], *b = &g->nodes[id];
    if (identity) {
        if (g->values[b->outputs[0]].is_output) return KILN_OK;
        KILN_LOG(KILN_LOG_VERBOSE, "%s: Transpose '%s' + Transpose '%s' cancel (read '%s')", c->pass, a->name, b->name,
                 g->values[x].name);
        pass_replace_uses(c, g->nodes[id].outputs[0], x);
        pass_detach(c, id);
    } else {
        KILN_LOG(KILN_LOG_VERBOSE, "%s: Transpose '%s' + Transpose '%s' -> Transpose '%s'", c->pass, a->name, b->name,
                 b->name);
        kiln_node *n = &g->nodes[id];
        kiln_node_release_attrs(n);
        KILN_TRY(pass_attr_ints(g, n, "perm", comp, r2));
        pass_set_input(c, id, 0, x);
    }
    if (pass_uses(c, mid) == 0 && !g->values[mid].is_output) pass_detach(c, inner);
    c->changes++;
    return KILN_OK;
}

/* Whether Reshape n's target can be applied to a tensor of another shape with the same elements:
 * true unless a 0 entry copies an input dimension (allowzero off) or the target is unknown. */
static bool reshape_target_portable(const pass_ctx *c, const kiln_node *n) {
    if (n->opset >= 14 && kiln_attr_int(n, "allowzero", 0) != 0) return true;
    int count;
    const int64_t *shape = n->opset < 5 ? kiln_attr_ints(n, "shape", &count) : NULL;
    if (n->opset >= 5) {
        const kiln_value *t = kiln_node_input(c->g, n, 1);
        if (!t || !t->constant || t->constant->dtype != KILN_I64) return false;
        shape = t->constant->data;
        count = (int)kiln_tensor_numel(t->constant);
    }
    if (!shape && count) return false;
    for (int i = 0; i < count; i++)
        if (shape[i] == 0) return false;
    return true;
}

/* Reshape(R(x)) -> Reshape(x) for a reshaping op R, when the outer target is portable. */
static bool skip_inner_reshape(pass_ctx *c, int id) {
    kiln_graph *g = c->g;
    int mid = g->nodes[id].inputs[0];
    int inner = pass_producer(c, mid, NULL);
    if (inner < 0 || !is_reshaping(&g->nodes[inner]) || !reshape_target_portable(c, &g->nodes[id])) return false;
    const kiln_node *a = &g->nodes[inner], *b = &g->nodes[id];
    KILN_LOG(KILN_LOG_VERBOSE, "%s: %s '%s' + Reshape '%s' -> Reshape '%s'", c->pass, a->op_type, a->name, b->name,
             b->name);
    pass_set_input(c, id, 0, a->inputs[0]);
    if (pass_uses(c, mid) == 0 && !g->values[mid].is_output) pass_detach(c, inner);
    c->changes++;
    return true;
}

/* R2(R1(x)) -> x for reshaping ops R1, R2 when R2's output has x's shape (Squeeze(Unsqueeze(x)),
 * a Reshape back to where it came from). Returns whether it did. */
static bool undo_reshape_pair(pass_ctx *c, int id) {
    kiln_graph *g = c->g;
    int mid = g->nodes[id].inputs[0], y = g->nodes[id].outputs[0];
    int inner = pass_producer(c, mid, NULL);
    if (inner < 0 || !is_reshaping(&g->nodes[inner]) || g->values[y].is_output) return false;
    int x = g->nodes[inner].inputs[0];
    if (x < 0 || !pass_same_shape(&g->values[x], &g->values[y]) || g->values[x].dtype != g->values[y].dtype) return false;
    const kiln_node *a = &g->nodes[inner], *b = &g->nodes[id];
    KILN_LOG(KILN_LOG_VERBOSE, "%s: %s '%s' + %s '%s' cancel (read '%s')", c->pass, a->op_type, a->name, b->op_type,
             b->name, g->values[x].name);
    pass_replace_uses(c, y, x);
    pass_detach(c, id);
    if (pass_uses(c, mid) == 0 && !g->values[mid].is_output) pass_detach(c, inner);
    c->changes++;
    return true;
}

kiln_status kiln_pass_eliminate_noops(kiln_graph *g, bool *changed) {
    pass_ctx c;
    KILN_TRY(pass_begin(&c, g, "eliminate_noops"));
    kiln_status st = KILN_OK;
    for (int i = 0; i < g->nnodes && st == KILN_OK; i++) {
        kiln_node *n = &g->nodes[i];
        if (!pass_alive(n) || n->ninputs < 1 || n->inputs[0] < 0) continue;
        if (is_noop(&c, n) && remove_noop(&c, i)) continue;
        if (pass_is_op(n, "Transpose")) st = merge_transposes(&c, i);
        else if (is_reshaping(n) && !undo_reshape_pair(&c, i) && pass_is_op(n, "Reshape")) skip_inner_reshape(&c, i);
    }
    return pass_end(&c, st, changed);
}
