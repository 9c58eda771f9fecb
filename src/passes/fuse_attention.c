/* fuse_attention.c — recognizes scaled dot-product attention and replaces it with one kiln.Attention
 * (semantics in ir/fused_ops.h):
 *     MatMul(Q, K^T) -> [Mul or Div by a scalar] -> [Add(mask) | Where(bool mask, ., fill)]
 *         -> Softmax(last axis) -> MatMul(., V)
 * around which it also absorbs
 *   - a scalar Mul/Div applied to Q or to K^T beforehand (pre-scaled queries/keys),
 *   - the Transpose that makes K^T (a Transpose whose permutation, with its last two axes swapped,
 *     is not the identity becomes one Transpose that makes K instead),
 *   - grouped-query attention as Llama exports it: K and V each Reshape(Expand(Unsqueeze(kv, 2)))
 *     from [B, Hkv, S, D] to [B, Hkv * r, S, D] become kv_repeat = r on the unexpanded K and V,
 *   - a constant mask that is exactly causal, which becomes causal = 1.
 * The matched MatMul/scale/mask/Softmax/MatMul values must feed nothing else; the absorbed
 * neighbours are absorbed only when they too feed only the attention (else they stay).
 *
 * Then the layouts (ir/fused_ops.h): an Attention whose Q, K, V come from Transposes [B, S, H, D] ->
 * [B, H, S, D] and whose output goes through the inverse Transpose reads and writes [B, S, H, D]
 * directly (layout 1: four Transposes fewer); and one whose Q, K and V are the three equal parts of
 * one Split of a fused QKV projection reads that projection's output (layout 2, packed: the Split
 * goes too), as does one whose Q, K and V are three projections of one input (BERT's query, key and
 * value: they become one GEMM over the three weights side by side). */
#include "passes/passes.h"

#include "core/status.h"
#include "ir/fused_ops.h"
#include "passes/pass_util.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#define ATTN_MASKED (-1e30) /* additive mask values at or below this make a key invisible */

typedef struct attn_match {
    int set[PASS_MAX_SET];
    int n;
    int q, kt, v, mask;
    bool bool_mask, causal;
    double scale, fill;
    int mm1, softmax, anchor;
} attn_match;

static void add(attn_match *m, int id) {
    if (m->n < PASS_MAX_SET) m->set[m->n++] = id;
}

/* Adds the nodes ids[0..k) to the match when the match stays closed with them; returns whether. */
static bool absorb(const pass_ctx *c, attn_match *m, const int *ids, int k) {
    if (m->n + k > PASS_MAX_SET) return false;
    int save = m->n;
    for (int i = 0; i < k; i++) add(m, ids[i]);
    if (pass_closed(c, m->set, m->n, m->anchor)) return true;
    m->n = save;
    return false;
}

/* v = Mul(u, c), Mul(c, u) or Div(u, c) with a one-element constant c of no higher rank than u (so
 * that it broadcasts nothing): returns the node and sets *u and *factor (1/c for Div); -1 otherwise. */
static int scalar_scale(const pass_ctx *c, int v, int *u, double *factor) {
    const kiln_graph *g = c->g;
    int p = pass_producer(c, v, "Mul"), d = pass_producer(c, v, "Div");
    int id = p >= 0 ? p : d;
    if (id < 0) return -1;
    const kiln_node *n = &g->nodes[id];
    for (int s = 0; s < (p >= 0 ? 2 : 1); s++) {
        int x = n->inputs[s], k = n->inputs[1 - s];
        double f;
        if (!pass_const_scalar(c, k, &f) || g->values[x].ndim < 0 || g->values[k].ndim > g->values[x].ndim) continue;
        if (d >= 0 && f == 0) return -1;
        *u = x;
        *factor = d >= 0 ? 1.0 / f : f;
        return id;
    }
    return -1;
}

/* The scores T = [scale *] MatMul(Q, K^T): sets mm1, q, kt, scale; false when T is not that. */
static bool match_scores(const pass_ctx *c, int t, attn_match *m) {
    int u = t, sn = scalar_scale(c, t, &u, &m->scale);
    if (sn < 0) m->scale = 1.0;
    int mm = pass_producer(c, u, "MatMul");
    if (mm < 0) return false;
    if (sn >= 0) add(m, sn);
    add(m, mm);
    m->mm1 = mm;
    m->q = c->g->nodes[mm].inputs[0];
    m->kt = c->g->nodes[mm].inputs[1];
    return true;
}

/* Whether Softmax node s normalizes over the last axis of its input. */
static bool softmax_last_axis(const kiln_graph *g, const kiln_node *s) {
    const kiln_value *x = kiln_node_input(g, s, 0);
    if (!x || x->ndim < 1) return false;
    int64_t axis = kiln_attr_int(s, "axis", s->opset >= 13 ? -1 : 1);
    if (axis < 0) axis += x->ndim;
    return axis == x->ndim - 1;
}

/* Matches the mandatory chain ending at MatMul node id; fills m. */
static bool match_core(const pass_ctx *c, int id, attn_match *m) {
    const kiln_graph *g = c->g;
    m->anchor = id;
    add(m, id);
    m->v = g->nodes[id].inputs[1];
    int sm = pass_producer(c, g->nodes[id].inputs[0], "Softmax");
    if (sm < 0 || !softmax_last_axis(g, &g->nodes[sm])) return false;
    add(m, sm);
    m->softmax = sm;
    int s = g->nodes[sm].inputs[0], a = pass_producer(c, s, "Add"), w = pass_producer(c, s, "Where");
    m->mask = -1;
    if (a >= 0) {
        for (int side = 0; side < 2; side++) {
            int save = m->n;
            add(m, a);
            if (match_scores(c, g->nodes[a].inputs[side], m)) {
                m->mask = g->nodes[a].inputs[1 - side];
                return true;
            }
            m->n = save;
        }
        return false;
    }
    if (w >= 0) {
        const kiln_node *wn = &g->nodes[w];
        if (wn->ninputs != 3 || wn->inputs[1] < 0 || !pass_const_scalar(c, wn->inputs[2], &m->fill)) return false;
        const kiln_value *t = &g->values[wn->inputs[1]], *fv = &g->values[wn->inputs[2]];
        if (t->ndim < 0 || fv->ndim > t->ndim) return false; /* the fill must broadcast nothing */
        add(m, w);
        m->mask = wn->inputs[0];
        m->bool_mask = true;
        return match_scores(c, wn->inputs[1], m);
    }
    return match_scores(c, s, m);
}

/* Whether the constant mask (float additive or bool) is exactly the causal mask of static scores
 * [..., sq, sk] (leading mask dims 1, sq <= sk so that every query sees a key). */
static bool mask_is_causal(const pass_ctx *c, const attn_match *m) {
    const kiln_graph *g = c->g;
    const kiln_tensor *t = g->values[m->mask].constant;
    const kiln_value *r = kiln_node_output(g, &g->nodes[m->mm1], 0);
    if (!t || !r || r->ndim < 2 || t->ndim < 2 || t->ndim > r->ndim) return false;
    kiln_dim dq = r->dims[r->ndim - 2], dk = r->dims[r->ndim - 1];
    if (dq.sym || dk.sym || t->dims[t->ndim - 2] != dq.value || t->dims[t->ndim - 1] != dk.value) return false;
    if (kiln_tensor_numel(t) != dq.value * dk.value) return false;
    if (m->bool_mask && (t->dtype != KILN_BOOL || !(m->fill <= ATTN_MASKED))) return false;
    int64_t off = dk.value - dq.value;
    if (off < 0) return false; /* some query would see no key at all */
    for (int64_t i = 0; i < dq.value; i++)
        for (int64_t j = 0; j < dk.value; j++) {
            double v = kiln_tensor_get_f64(t, i * dk.value + j);
            bool visible = j <= i + off;
            if (m->bool_mask ? (v != 0) != visible : visible ? v != 0 : !(v <= ATTN_MASKED)) return false;
        }
    return true;
}

/* The repeat r when value kv is Reshape(Expand(Unsqueeze(kv0, axis 2))) from [B, H, S, D] to
 * [B, H * r, S, D] with H, r and D provably kept and the Reshape provably merging H and r; sets *kv0
 * and the three node ids. 0 otherwise. The Expand may still broadcast B or S from 1: B broadcasts
 * the same way inside the fused op, and an S of 1 would make K's and V's lengths differ there,
 * which the kernel refuses rather than computing something else. */
static int64_t gqa_repeat(const pass_ctx *c, int kv, int *kv0, int ids[3]) {
    const kiln_graph *g = c->g;
    int rs = pass_producer(c, kv, "Reshape");
    int ex = rs >= 0 ? pass_producer(c, g->nodes[rs].inputs[0], "Expand") : -1;
    int un = ex >= 0 ? pass_producer(c, g->nodes[ex].inputs[0], "Unsqueeze") : -1;
    if (un < 0) return 0;
    const kiln_node *u = &g->nodes[un];
    int count = 0;
    const int64_t *axes = u->opset < 13 ? kiln_attr_ints(u, "axes", &count) : NULL;
    if (u->opset >= 13) {
        const kiln_tensor *t = u->ninputs > 1 && u->inputs[1] >= 0 ? g->values[u->inputs[1]].constant : NULL;
        if (!t || t->dtype != KILN_I64) return 0;
        axes = t->data;
        count = (int)kiln_tensor_numel(t);
    }
    if (count != 1 || !(axes[0] == 2 || axes[0] == -3)) return 0;
    const kiln_value *k0 = kiln_node_input(g, u, 0), *e = kiln_node_output(g, &g->nodes[ex], 0),
                     *r = kiln_node_output(g, &g->nodes[rs], 0);
    if (!k0 || !e || !r || k0->ndim != 4 || e->ndim != 5 || r->ndim != 4) return 0;
    kiln_dim h = k0->dims[1], rep = e->dims[2];
    if (h.sym || rep.sym || rep.value < 1 || !pass_same_dim(e->dims[1], h)) return 0;
    if (!pass_same_dim(e->dims[4], k0->dims[3]) || !pass_same_dim(r->dims[0], e->dims[0]) ||
        !pass_same_dim(r->dims[3], e->dims[4]) || r->dims[1].sym || r->dims[1].value != h.value * rep.value)
        return 0;
    *kv0 = u->inputs[0];
    ids[0] = rs;
    ids[1] = ex;
    ids[2] = un;
    return rep.value;
}

/* Makes the value K (keys, [..., Sk, D]) that the fused op reads from K^T: the input of a Transpose
 * whose swapped permutation is the identity, else a new Transpose. Absorbs the old Transpose when
 * only the attention reads it. */
static kiln_status make_keys(pass_ctx *c, attn_match *m, int *k, bool *made) {
    kiln_graph *g = c->g;
    const kiln_value *ktv = &g->values[m->kt];
    int r = ktv->ndim;
    int64_t perm[KILN_MAX_DIMS];
    for (int i = 0; i < r; i++) perm[i] = i;
    int src = m->kt;
    int tp = pass_producer(c, m->kt, "Transpose");
    int np = 0;
    const int64_t *p = tp >= 0 ? kiln_attr_ints(&g->nodes[tp], "perm", &np) : NULL;
    if (p && np == r) {
        memcpy(perm, p, (size_t)r * sizeof *perm);
        src = g->nodes[tp].inputs[0];
        absorb(c, m, &tp, 1);
    }
    int64_t t = perm[r - 2];
    perm[r - 2] = perm[r - 1];
    perm[r - 1] = t;
    bool identity = true;
    for (int i = 0; i < r; i++) identity = identity && perm[i] == i;
    *made = !identity;
    if (identity) {
        *k = src;
        return KILN_OK;
    }
    char hint[300];
    snprintf(hint, sizeof hint, "%.280s_keys", g->values[m->kt].name);
    KILN_TRY(pass_new_value(c, hint, k));
    const kiln_value *sv = &g->values[src];
    kiln_value *kv = &g->values[*k];
    kv->dtype = sv->dtype;
    kv->ndim = r;
    for (int i = 0; i < r && sv->ndim == r; i++) kv->dims[i] = sv->dims[perm[i]];
    snprintf(hint, sizeof hint, "%.280s/keys", g->nodes[m->mm1].name);
    int id;
    KILN_TRY(pass_add_node(c, "", "Transpose", pass_onnx_opset(g, 13), hint, 1, &src, *k, &id));
    return pass_attr_ints(g, &g->nodes[id], "perm", perm, r);
}

static kiln_status try_attention(pass_ctx *c, int id) {
    kiln_graph *g = c->g;
    attn_match m;
    memset(&m, 0, sizeof m);
    if (!match_core(c, id, &m)) return KILN_OK;
    const kiln_value *q = &g->values[m.q], *kt = &g->values[m.kt], *v = &g->values[m.v];
    if (!pass_is_float(q->dtype) || q->dtype != kt->dtype || q->dtype != v->dtype) return KILN_OK;
    if (q->ndim < 2 || kt->ndim < 2 || v->ndim < 2) return KILN_OK;
    kiln_dim d = q->dims[q->ndim - 1], dv = v->dims[v->ndim - 1];
    if (d.sym || dv.sym || d.value > KILN_ATTENTION_MAX_HEAD_DIM || dv.value > KILN_ATTENTION_MAX_HEAD_DIM) return KILN_OK;
    if (m.mask >= 0) {
        const kiln_value *mk = &g->values[m.mask];
        if (mk->ndim < 0 || (m.bool_mask ? mk->dtype != KILN_BOOL : mk->dtype != q->dtype)) return KILN_OK;
    }
    if (!pass_closed(c, m.set, m.n, m.anchor)) return KILN_OK;
    /* optional: pre-scaled Q and K^T */
    int u, sn;
    double f;
    if ((sn = scalar_scale(c, m.q, &u, &f)) >= 0 && absorb(c, &m, &sn, 1)) {
        m.q = u;
        m.scale *= f;
    }
    if ((sn = scalar_scale(c, m.kt, &u, &f)) >= 0 && absorb(c, &m, &sn, 1)) {
        m.kt = u;
        m.scale *= f;
    }
    if (g->values[m.kt].ndim < 2) return KILN_OK;
    if (m.mask >= 0 && g->values[m.mask].constant && mask_is_causal(c, &m)) {
        m.causal = true;
        m.mask = -1;
    }
    int k;
    bool made;
    KILN_TRY(make_keys(c, &m, &k, &made));
    int vv = m.v;
    int64_t rep = 1;
    int k0, v0, kids[3], vids[3];
    if (!made) {
        int64_t rk = gqa_repeat(c, k, &k0, kids), rv = gqa_repeat(c, vv, &v0, vids);
        int both[6] = {kids[0], kids[1], kids[2], vids[0], vids[1], vids[2]};
        if (rk > 1 && rk == rv && absorb(c, &m, both, 6)) {
            rep = rk;
            k = k0;
            vv = v0;
        }
    }
    char detail[160];
    snprintf(detail, sizeof detail, "scale %g%s%s%s%s", m.scale, m.causal ? ", causal" : "",
             m.mask < 0 ? "" : m.bool_mask ? ", bool mask" : ", additive mask", rep > 1 ? ", grouped kv heads" : "",
             made ? ", K from a new Transpose" : "");
    KILN_TRY(pass_use_kiln_domain(c));
    int ins[4] = {m.q, k, vv, m.mask};
    kiln_node *out;
    KILN_TRY(pass_rewrite(c, m.set, m.n, m.anchor, KILN_FUSED_DOMAIN, "Attention", KILN_FUSED_OPSET,
                          g->nodes[m.softmax].name, m.mask >= 0 ? 4 : 3, ins, -1, detail, &out));
    KILN_TRY(pass_attr_float(g, out, "scale", (float)m.scale));
    if (rep > 1) KILN_TRY(pass_attr_int(g, out, "kv_repeat", rep));
    if (m.causal) KILN_TRY(pass_attr_int(g, out, "causal", 1));
    if (m.bool_mask && m.mask >= 0) KILN_TRY(pass_attr_float(g, out, "mask_fill", (float)m.fill));
    return KILN_OK;
}

/* ---------------------------------------------------------------- sequence-first layouts */

/* The input of Transpose node t when it swaps axes 1 and 2 of a rank-4 value ([B, S, H, D] <-> [B, H,
 * S, D]); -1 otherwise. */
static int swap12_input(const kiln_graph *g, int t) {
    if (t < 0) return -1;
    int np = 0;
    const int64_t *p = kiln_attr_ints(&g->nodes[t], "perm", &np);
    const kiln_value *x = kiln_node_input(g, &g->nodes[t], 0);
    if (!p || np != 4 || !x || x->ndim != 4 || p[0] != 0 || p[1] != 2 || p[2] != 1 || p[3] != 3) return -1;
    return g->nodes[t].inputs[0];
}

/* Sets the layout attribute of node n (replacing a copied one). */
static kiln_status set_layout(kiln_graph *g, kiln_node *n, int64_t layout) {
    for (int k = 0; k < n->nattrs; k++)
        if (!strcmp(n->attrs[k].name, "layout")) {
            n->attrs[k].i = layout;
            return KILN_OK;
        }
    return pass_attr_int(g, n, "layout", layout);
}

/* Attention a (layout 0) whose Q, K and V are each Transpose(0, 2, 1, 3) of a [B, S, H, D] value
 * read by nothing else, and whose output only a Transpose(0, 2, 1, 3) reads, becomes one layout-1
 * Attention over the untransposed values, producing that Transpose's output (four Transposes gone). */
static kiln_status try_sequence_first(pass_ctx *c, int a) {
    kiln_graph *g = c->g;
    const kiln_node *n = &g->nodes[a];
    if (kiln_attr_int(n, "layout", 0) != 0 || n->ninputs < 3) return KILN_OK;
    int set[5] = {a}, ins[4] = {-1, -1, -1, n->ninputs > 3 ? n->inputs[3] : -1};
    for (int k = 0; k < 3; k++) {
        int t = pass_producer(c, n->inputs[k], "Transpose");
        ins[k] = swap12_input(g, t);
        if (ins[k] < 0 || pass_sole_consumer(c, n->inputs[k]) != a) return KILN_OK;
        set[1 + k] = t;
    }
    int ot = pass_sole_consumer(c, n->outputs[0]);
    if (ot < 0 || !pass_is_op(&g->nodes[ot], "Transpose") || swap12_input(g, ot) != n->outputs[0]) return KILN_OK;
    set[4] = ot;
    if (ins[3] >= 0 && g->values[ins[3]].ndim > 4) return KILN_OK;
    if (!pass_closed(c, set, 5, ot)) return KILN_OK;
    kiln_node *out;
    KILN_TRY(pass_rewrite(c, set, 5, ot, KILN_FUSED_DOMAIN, "Attention", KILN_FUSED_OPSET, g->nodes[a].name,
                          ins[3] >= 0 ? 4 : 3, ins, a, "sequence-first layout: Q, K, V and O stay [B, S, H, D]", &out));
    return set_layout(g, out, 1);
}

/* A new view *xr = Reshape(x [B, S, 3 H D], [0, 0, 3, H, D]) (0 keeps x's B and S), named after node
 * `owner`; *shape_id gets the shape constant. */
static kiln_status packed_view(pass_ctx *c, int x, int64_t h, int64_t d, const char *owner, int *shape_id, int *xr) {
    kiln_graph *g = c->g;
    const int64_t shape[5] = {0, 0, 3, h, d};
    char hint[300];
    snprintf(hint, sizeof hint, "%.280s_packed_shape", g->values[x].name);
    KILN_TRY(pass_new_ints(c, hint, shape, 5, shape_id));
    snprintf(hint, sizeof hint, "%.280s_packed", g->values[x].name);
    KILN_TRY(pass_new_value(c, hint, xr));
    snprintf(hint, sizeof hint, "%.280s/qkv", owner);
    int rins[2] = {x, *shape_id}, rid;
    return pass_add_node(c, "", "Reshape", pass_onnx_opset(g, 14), hint, 2, rins, *xr, &rid);
}

/* Layout-1 Attention a whose Q, K and V are Reshapes to [B, S, H, D] of outputs 0, 1 and 2 of one
 * Split of X [B, S, 3 H D] into three equal parts along its last axis, each read by nothing else,
 * becomes a layout-2 Attention reading X reshaped (a view) to [B, S, 3, H, D]. */
static kiln_status try_packed(pass_ctx *c, int a) {
    kiln_graph *g = c->g;
    const kiln_node *n = &g->nodes[a];
    if (kiln_attr_int(n, "layout", 0) != 1 || kiln_attr_int(n, "kv_repeat", 1) != 1 || n->ninputs < 3) return KILN_OK;
    int set[5] = {a}, split = -1;
    for (int k = 0; k < 3; k++) {
        int r = pass_producer(c, n->inputs[k], "Reshape");
        if (r < 0 || pass_sole_consumer(c, n->inputs[k]) != a) return KILN_OK;
        int sv = g->nodes[r].inputs[0], sp = pass_producer(c, sv, "Split");
        if (sp < 0 || (split >= 0 && sp != split) || g->nodes[sp].noutputs != 3 || g->nodes[sp].outputs[k] != sv ||
            pass_sole_consumer(c, sv) != r)
            return KILN_OK;
        split = sp;
        set[1 + k] = r;
    }
    set[4] = split;
    const kiln_node *sn = &g->nodes[split];
    const kiln_value *x = kiln_node_input(g, sn, 0), *q = &g->values[n->inputs[0]];
    if (!x || x->ndim != 3 || q->ndim != 4) return KILN_OK;
    int64_t axis = kiln_attr_int(sn, "axis", 0);
    if (axis != 2 && axis != -1) return KILN_OK;
    kiln_dim h = q->dims[2], d = q->dims[3], e = x->dims[2];
    if (h.sym || d.sym || e.sym || e.value != 3 * h.value * d.value) return KILN_OK;
    for (int k = 0; k < 3; k++) { /* equal thirds, each [B, S, H, D] */
        const kiln_value *part = &g->values[sn->outputs[k]], *qk = &g->values[n->inputs[k]];
        if (part->ndim != 3 || part->dims[2].sym || part->dims[2].value != h.value * d.value || !pass_same_shape(qk, q)) return KILN_OK;
    }
    if (!pass_same_dim(q->dims[0], x->dims[0]) || !pass_same_dim(q->dims[1], x->dims[1])) return KILN_OK;
    if (!pass_closed(c, set, 5, a)) return KILN_OK;
    int shape_id, xr, mask = n->ninputs > 3 ? n->inputs[3] : -1;
    KILN_TRY(packed_view(c, sn->inputs[0], h.value, d.value, g->nodes[a].name, &shape_id, &xr));
    int ins[4] = {xr, -1, -1, mask};
    kiln_node *out;
    KILN_TRY(pass_rewrite(c, set, 5, a, KILN_FUSED_DOMAIN, "Attention", KILN_FUSED_OPSET, g->nodes[a].name,
                          mask >= 0 ? 4 : 3, ins, a, "packed QKV: reads the projection's output directly", &out));
    return set_layout(g, out, 2);
}

/* The projection behind value v = Reshape(P): the node making P, a MatMul or a FusedMatMul with at
 * most a bias (X, W [K, N] constant, bias [N] constant), when only the Reshape reads P; *reshape gets
 * the Reshape. -1 otherwise. */
static int projection(const pass_ctx *c, int v, int *reshape) {
    const kiln_graph *g = c->g;
    int r = pass_producer(c, v, "Reshape");
    if (r < 0) return -1;
    int p = g->nodes[r].inputs[0], id = pass_producer(c, p, NULL);
    if (id < 0 || pass_sole_consumer(c, p) != r) return -1;
    const kiln_node *n = &g->nodes[id];
    bool fused = !strcmp(n->domain, KILN_FUSED_DOMAIN) && !strcmp(n->op_type, "FusedMatMul");
    if (!fused && !pass_is_op(n, "MatMul")) return -1;
    if (fused && (kiln_attr_string(n, "activation", "")[0] || (n->ninputs > 3 && n->inputs[3] >= 0))) return -1;
    const kiln_value *w = kiln_node_input(g, n, 1), *b = fused && n->ninputs > 2 ? kiln_node_input(g, n, 2) : NULL;
    if (!w || !w->constant || w->constant->ndim != 2 || !pass_is_float(w->constant->dtype)) return -1;
    if (b && (!b->constant || b->constant->ndim != 1 || b->constant->dtype != w->constant->dtype ||
              b->constant->dims[0] != w->constant->dims[1]))
        return -1;
    *reshape = r;
    return id;
}

/* A new constant (named from hint): the 2-D (or 1-D) constants t[0..3) side by side along their
 * last axis. */
static kiln_status concat_constant(pass_ctx *c, const kiln_tensor *const t[3], const char *hint, int *id) {
    int r = t[0]->ndim;
    int64_t rows = r == 2 ? t[0]->dims[0] : 1, cols = t[0]->dims[r - 1], dims[2] = {rows, 3 * cols};
    kiln_tensor out = {0};
    KILN_TRY(kiln_tensor_alloc(&out, t[0]->dtype, r, r == 2 ? dims : dims + 1));
    size_t es = kiln_dtype_size(t[0]->dtype), row = (size_t)cols * es;
    for (int64_t i = 0; i < rows; i++)
        for (int k = 0; k < 3; k++)
            memcpy((char *)out.data + (size_t)i * 3 * row + (size_t)k * row, (const char *)t[k]->data + (size_t)i * row, row);
    kiln_status st = pass_new_constant(c, hint, &out, id);
    kiln_tensor_release(&out); /* left only when the constant was not made */
    return st;
}

/* Layout-1 Attention a whose Q, K and V are Reshapes [B, S, H, D] of three projections of one X
 * ([B, S, K] x [K, H D], same bias presence, no activation) becomes one projection with the three
 * weights (and biases) side by side, read by a layout-2 Attention through a view [B, S, 3, H, D]:
 * one GEMM instead of three (BERT's query, key and value). */
static kiln_status try_merge_projections(pass_ctx *c, int a) {
    kiln_graph *g = c->g;
    const kiln_node *n = &g->nodes[a];
    if (kiln_attr_int(n, "layout", 0) != 1 || kiln_attr_int(n, "kv_repeat", 1) != 1 || n->ninputs < 3) return KILN_OK;
    int set[7] = {a}, proj[3], rs[3];
    for (int k = 0; k < 3; k++) {
        proj[k] = projection(c, n->inputs[k], &rs[k]);
        if (proj[k] < 0 || pass_sole_consumer(c, n->inputs[k]) != a) return KILN_OK;
        set[1 + k] = rs[k];
        set[4 + k] = proj[k];
    }
    const kiln_node *p0 = &g->nodes[proj[0]];
    const kiln_tensor *w[3], *b[3];
    bool fused = !strcmp(p0->op_type, "FusedMatMul"), bias = fused && p0->ninputs > 2 && p0->inputs[2] >= 0;
    for (int k = 0; k < 3; k++) {
        const kiln_node *pk = &g->nodes[proj[k]];
        bool bk = !strcmp(pk->op_type, "FusedMatMul") && pk->ninputs > 2 && pk->inputs[2] >= 0;
        w[k] = g->values[pk->inputs[1]].constant;
        b[k] = bk ? g->values[pk->inputs[2]].constant : NULL;
        if (pk->inputs[0] != p0->inputs[0] || bk != bias || w[k]->dtype != w[0]->dtype || w[k]->dims[0] != w[0]->dims[0] ||
            w[k]->dims[1] != w[0]->dims[1])
            return KILN_OK;
    }
    const kiln_value *x = &g->values[p0->inputs[0]], *q = &g->values[n->inputs[0]], *p = &g->values[p0->outputs[0]];
    if (x->ndim != 3 || p->ndim != 3 || q->ndim != 4 || q->dims[2].sym || q->dims[3].sym) return KILN_OK;
    int64_t h = q->dims[2].value, d = q->dims[3].value;
    if (w[0]->dims[1] != h * d || !pass_same_dim(q->dims[0], p->dims[0]) || !pass_same_dim(q->dims[1], p->dims[1])) return KILN_OK;
    for (int k = 1; k < 3; k++)
        if (!pass_same_shape(&g->values[n->inputs[k]], q)) return KILN_OK;
    if (!pass_closed(c, set, 7, a)) return KILN_OK;
    char hint[300];
    int wid, bid = -1, pcat, shape_id, xr, id, mask = n->ninputs > 3 ? n->inputs[3] : -1;
    snprintf(hint, sizeof hint, "%.280s_qkv", g->values[p0->inputs[1]].name);
    KILN_TRY(concat_constant(c, w, hint, &wid));
    if (bias) {
        snprintf(hint, sizeof hint, "%.280s_qkv", g->values[p0->inputs[2]].name);
        KILN_TRY(concat_constant(c, b, hint, &bid));
    }
    snprintf(hint, sizeof hint, "%.280s_qkv", g->values[p0->outputs[0]].name);
    KILN_TRY(pass_new_value(c, hint, &pcat));
    snprintf(hint, sizeof hint, "%.280s/qkv", p0->name);
    int pins[3] = {p0->inputs[0], wid, bid};
    KILN_TRY(pass_add_node(c, fused ? KILN_FUSED_DOMAIN : "", fused ? "FusedMatMul" : "MatMul",
                           fused ? KILN_FUSED_OPSET : g->nodes[proj[0]].opset, hint, bias ? 3 : 2, pins, pcat, &id));
    KILN_TRY(packed_view(c, pcat, h, d, g->nodes[a].name, &shape_id, &xr));
    int ins[4] = {xr, -1, -1, mask};
    kiln_node *out;
    KILN_TRY(pass_rewrite(c, set, 7, a, KILN_FUSED_DOMAIN, "Attention", KILN_FUSED_OPSET, g->nodes[a].name,
                          mask >= 0 ? 4 : 3, ins, a, "one QKV projection, packed", &out));
    return set_layout(g, out, 2);
}

/* Runs try(c, i) on every Attention node. */
static kiln_status each_attention(pass_ctx *c, kiln_status (*try)(pass_ctx *, int)) {
    kiln_status st = KILN_OK;
    for (int i = 0; i < c->g->nnodes && st == KILN_OK; i++) {
        const kiln_node *n = &c->g->nodes[i];
        if (pass_alive(n) && !strcmp(n->domain, KILN_FUSED_DOMAIN) && !strcmp(n->op_type, "Attention")) st = try(c, i);
    }
    return st;
}

kiln_status kiln_pass_fuse_attention(kiln_graph *g, bool *changed) {
    pass_ctx c;
    KILN_TRY(pass_begin(&c, g, "fuse_attention"));
    kiln_status st = KILN_OK;
    for (int i = 0; i < g->nnodes && st == KILN_OK; i++)
        if (pass_is_op(&g->nodes[i], "MatMul")) st = try_attention(&c, i);
    KILN_TRY(pass_end(&c, st, changed));
    /* then the layouts, on the sorted graph (the fusion above appends Transposes for K) */
    bool more[3] = {false, false, false};
    kiln_status (*const steps[3])(pass_ctx *, int) = {try_sequence_first, try_packed, try_merge_projections};
    for (int k = 0; k < 3; k++) {
        KILN_TRY(pass_begin(&c, g, "fuse_attention"));
        KILN_TRY(pass_end(&c, each_attention(&c, steps[k]), &more[k]));
        *changed |= more[k];
    }
    return KILN_OK;
}
