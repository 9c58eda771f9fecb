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
 * neighbours are absorbed only when they too feed only the attention (else they stay). */
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

kiln_status kiln_pass_fuse_attention(kiln_graph *g, bool *changed) {
    pass_ctx c;
    KILN_TRY(pass_begin(&c, g, "fuse_attention"));
    kiln_status st = KILN_OK;
    for (int i = 0; i < g->nnodes && st == KILN_OK; i++)
        if (pass_is_op(&g->nodes[i], "MatMul")) st = try_attention(&c, i);
    return pass_end(&c, st, changed);
}
