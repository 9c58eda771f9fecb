/* fuse_qdq.c — folds the DequantizeLinear -> Conv / MatMul / Gemm -> QuantizeLinear patterns of
 * explicitly quantized (QDQ) models into kiln's integer layers kiln.QConv / kiln.QMatMul
 * (ir/quant_ops.h):
 *
 *   x_q -> DequantizeLinear ---------------\
 *   W_q (constant) -> DequantizeLinear ----- Conv / MatMul / Gemm [-> activation] [-> QuantizeLinear] -> y
 *   B (Conv, Gemm: a float32 constant, or DequantizeLinear of constants) -/
 *
 * becomes one node reading x_q and W_q that sums x_q * W_q exactly in int32 and requantizes in its
 * epilogue (bias, activation, output scale). It fires when the input's scale and zero point are
 * per-tensor constants, the weight's are per-tensor or per output channel (Conv: axis 0; MatMul:
 * axis 1 of a 2-D B; Gemm: its N axis, the weights transposed to [K, N] when transB), both are 8-bit
 * (Gemm: transA 0, alpha and beta 1, A 2-D), and nothing else reads what the pattern removes. Without a
 * following QuantizeLinear (or when the result has other readers) the layer writes float32. The
 * activation is Relu or Clip with constant bounds, taken only when it is the layer's sole reader.
 * A convolution without groups and with symmetric weights (zero point 0, uint8: 128) whose sole
 * reader is an Add of a value R of the same shape takes the Add too, before the activation:
 * kiln.QConv's residual input R — a DequantizeLinear's 8-bit input (ResNet's identity shortcut,
 * quantized) or a float32 value (a downsampling block's shortcut convolution).
 * Every DequantizeLinear / QuantizeLinear outside these patterns stays and runs as written.
 *
 * kiln_pass_fuse_qdq_output runs later, after fuse_gelu: a float integer layer takes what follows
 * it into its epilogue — a bias Add (exporters write a Linear as MatMul + Add, and the pattern above
 * folds only the MatMul), a Gelu (BERT's FFN: the erf GELU is written out element by element until
 * fuse_gelu), a QuantizeLinear (then it writes the 8-bit output itself). A kiln.F8MatMul takes the
 * bias Add (when it has no bias) and then the residual Add (a value of its output's shape: its input
 * R) that follow it the same way, and a Gelu whose sole reader is an F8MatMul becomes that layer's
 * input_activation (applied as A is rounded to E4M3).
 *
 * This pass runs before constant folding (which would otherwise turn the weights' DequantizeLinear
 * into float32 constants). */
#include "passes/passes.h"

#include "core/status.h"
#include "ir/quant_ops.h"
#include "passes/pass_util.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static bool is_8bit(kiln_dtype t) { return t == KILN_U8 || t == KILN_I8; }

/* The constant tensor of value v, or NULL. */
static const kiln_tensor *const_of(const kiln_graph *g, int v) { return v >= 0 ? g->values[v].constant : NULL; }

/* A DequantizeLinear whose scale and zero point are constants: its node, quantized input and
 * parameters (scale float32 with ns elements; zp NULL or ns elements of q's type). */
typedef struct dq_match {
    int node;
    int q;          /* the quantized value it reads */
    const kiln_tensor *scale, *zp;
    int64_t ns;
    int axis;       /* normalized against q's rank (when q's rank is known) */
} dq_match;

/* Whether value v is produced by a DequantizeLinear with constant float32 scale and constant zero
 * point of an 8-bit input, without block_size; fills m. */
static bool match_dq(const pass_ctx *c, int v, dq_match *m) {
    kiln_graph *g = c->g;
    int id = pass_producer(c, v, "DequantizeLinear");
    if (id < 0) return false;
    const kiln_node *n = &g->nodes[id];
    if (kiln_attr_int(n, "block_size", 0) != 0 || n->ninputs < 2) return false;
    m->node = id;
    m->q = n->inputs[0];
    m->scale = const_of(g, n->inputs[1]);
    m->zp = n->ninputs > 2 ? const_of(g, n->inputs[2]) : NULL;
    if (n->ninputs > 2 && n->inputs[2] >= 0 && !m->zp) return false;
    const kiln_value *q = &g->values[m->q];
    if (!m->scale || m->scale->dtype != KILN_F32 || !is_8bit(q->dtype) || q->ndim < 0) return false;
    m->ns = kiln_tensor_numel(m->scale);
    if (m->zp && (m->zp->dtype != q->dtype || kiln_tensor_numel(m->zp) != m->ns)) return false;
    int64_t axis = kiln_attr_int(n, "axis", 1);
    m->axis = (int)(axis < 0 ? axis + q->ndim : axis);
    return m->ns == 1 || (m->scale->ndim == 1 && m->axis >= 0 && m->axis < q->ndim);
}

/* Zero point i of m as an int (0 without one). */
static int64_t dq_zp(const dq_match *m, int64_t i) {
    return m->zp ? kiln_tensor_get_i64(m->zp, m->ns == 1 ? 0 : i) : 0;
}

/* The float32 bias of a Conv's B or a Gemm's C (value v, M entries): a float32 constant, or the
 * dequantized values of a DequantizeLinear of constants; written into out[M]. */
static bool layer_bias(const pass_ctx *c, int v, int64_t M, float *out) {
    const kiln_tensor *t = const_of(c->g, v);
    if (t) {
        if (t->dtype != KILN_F32 || kiln_tensor_numel(t) != M) return false;
        memcpy(out, t->data, (size_t)M * sizeof *out);
        return true;
    }
    int id = pass_producer(c, v, "DequantizeLinear");
    if (id < 0) return false;
    const kiln_node *n = &c->g->nodes[id];
    const kiln_tensor *q = const_of(c->g, n->inputs[0]), *s = n->ninputs > 1 ? const_of(c->g, n->inputs[1]) : NULL;
    const kiln_tensor *z = n->ninputs > 2 ? const_of(c->g, n->inputs[2]) : NULL;
    if (!q || !s || s->dtype != KILN_F32 || kiln_tensor_numel(q) != M || kiln_attr_int(n, "block_size", 0) != 0) return false;
    if (q->dtype != KILN_I32 && !is_8bit(q->dtype)) return false;
    int64_t ns = kiln_tensor_numel(s);
    if ((ns != 1 && ns != M) || (n->ninputs > 2 && n->inputs[2] >= 0 && (!z || kiln_tensor_numel(z) != ns))) return false;
    const float *sd = s->data;
    for (int64_t i = 0; i < M; i++) {
        int64_t k = ns == 1 ? 0 : i;
        out[i] = (float)(kiln_tensor_get_i64(q, i) - (z ? kiln_tensor_get_i64(z, k) : 0)) * sd[k];
    }
    return true;
}

/* Whether node n (reading y) is an activation the integer epilogue applies (Relu, Clip with
 * constant bounds); fills act. */
static bool as_activation(const pass_ctx *c, const kiln_node *n, kiln_act *act) {
    memset(act, 0, sizeof *act);
    if (pass_is_op(n, "Relu")) {
        act->kind = KILN_ACT_RELU;
        return true;
    }
    if (!pass_is_op(n, "Clip") || n->opset < 11) return false;
    double lo = -INFINITY, hi = INFINITY;
    if (n->ninputs > 1 && n->inputs[1] >= 0 && !pass_const_scalar(c, n->inputs[1], &lo)) return false;
    if (n->ninputs > 2 && n->inputs[2] >= 0 && !pass_const_scalar(c, n->inputs[2], &hi)) return false;
    act->kind = KILN_ACT_CLIP;
    act->p0 = (float)lo;
    act->p1 = (float)hi;
    return true;
}

/* A following QuantizeLinear with a per-tensor constant scale and 8-bit constant (or absent) zero
 * point: y_scale, y_zero_point and the output dtype. */
static bool match_q(const pass_ctx *c, int node, float *scale, int64_t *zp, kiln_dtype *dt) {
    const kiln_node *n = &c->g->nodes[node];
    if (!pass_is_op(n, "QuantizeLinear") || n->ninputs < 2 || kiln_attr_int(n, "block_size", 0) != 0) return false;
    const kiln_tensor *s = const_of(c->g, n->inputs[1]), *z = n->ninputs > 2 ? const_of(c->g, n->inputs[2]) : NULL;
    if (!s || s->dtype != KILN_F32 || kiln_tensor_numel(s) != 1) return false;
    if (n->ninputs > 2 && n->inputs[2] >= 0 && (!z || kiln_tensor_numel(z) != 1)) return false;
    int64_t od = kiln_attr_int(n, "output_dtype", 0); /* 0: the zero point's type, else uint8 */
    *dt = z ? z->dtype : od ? (kiln_dtype)od : KILN_U8;
    if (!is_8bit(*dt)) return false;
    *scale = *(const float *)s->data;
    *zp = z ? kiln_tensor_get_i64(z, 0) : 0;
    return isfinite(*scale) && *scale > 0.0f;
}

typedef enum { L_CONV, L_MATMUL, L_GEMM } layer_kind;

/* Whether every weight zero point of dw is the symmetric one of its type (int8: 0, uint8: 128). */
static bool symmetric_weights(const dq_match *dw, kiln_dtype wt) {
    for (int64_t i = 0; i < dw->ns; i++)
        if (dq_zp(dw, i) != (wt == KILN_U8 ? 128 : 0)) return false;
    return true;
}

/* A residual connection after a convolution's output y: y's sole reader is an Add whose other input,
 * of y's shape (nothing broadcasts), is a DequantizeLinear (per-tensor constant scale and zero point)
 * of an 8-bit value (r->node >= 0; the residual is r->q) or a float32 value (r->node = -1, r->q the
 * value: a downsampling block's shortcut convolution); *add is the Add. */
static bool match_residual(const pass_ctx *c, int y, int *add, dq_match *r) {
    int id = pass_sole_consumer(c, y);
    if (id < 0 || !pass_is_op(&c->g->nodes[id], "Add")) return false;
    int other = pass_other_input(&c->g->nodes[id], y);
    if (other < 0 || other == y) return false;
    if (!match_dq(c, other, r) || r->ns != 1) {
        memset(r, 0, sizeof *r);
        r->node = -1;
        r->q = other;
        if (c->g->values[other].dtype != KILN_F32) return false;
    }
    if (!pass_same_shape(&c->g->values[y], &c->g->values[r->q])) return false;
    *add = id;
    return true;
}

/* Whether Gemm node n computes A B' + C with A 2-D: transA 0, alpha 1, beta 1 (or no C). */
static bool plain_gemm(const pass_ctx *c, const kiln_node *n) {
    const kiln_value *a = kiln_node_input(c->g, n, 0);
    bool has_c = n->ninputs > 2 && n->inputs[2] >= 0;
    return a && a->ndim == 2 && kiln_attr_int(n, "transA", 0) == 0 && kiln_attr_float(n, "alpha", 1.0f) == 1.0f &&
           (!has_c || kiln_attr_float(n, "beta", 1.0f) == 1.0f);
}

/* The int8/uint8 [K, N] transpose of constant w [N, K], as a new constant of the pass. */
static kiln_status transposed_weights(pass_ctx *c, int w, int *id) {
    const kiln_tensor *t = c->g->values[w].constant;
    int64_t N = t->dims[0], K = t->dims[1], dims[2] = {K, N};
    kiln_tensor tt = {0};
    KILN_TRY(kiln_tensor_alloc(&tt, t->dtype, 2, dims));
    const uint8_t *src = t->data;
    uint8_t *dst = tt.data;
    for (int64_t n = 0; n < N; n++)
        for (int64_t k = 0; k < K; k++) dst[k * N + n] = src[n * K + k];
    char hint[300];
    snprintf(hint, sizeof hint, "%.280s_t", c->g->values[w].name);
    kiln_status s = pass_new_constant(c, hint, &tt, id);
    kiln_tensor_release(&tt);
    return s;
}

/* Folds the pattern around Conv, MatMul or Gemm node `layer` when it holds. */
static kiln_status try_fold(pass_ctx *c, int layer, layer_kind kind) {
    kiln_graph *g = c->g;
    const kiln_node *n = &g->nodes[layer];
    if (n->ninputs < 2 || (kind == L_GEMM && !plain_gemm(c, n))) return KILN_OK;
    dq_match dx, dw;
    if (!match_dq(c, n->inputs[0], &dx) || dx.ns != 1 || !match_dq(c, n->inputs[1], &dw)) return KILN_OK;
    const kiln_value *wv = &g->values[dw.q];
    if (!wv->constant || (kind == L_CONV ? wv->ndim < 3 : wv->ndim != 2)) return KILN_OK;
    /* the output-channel axis of the weights: Conv's M, MatMul's N, Gemm's N (axis 0 when transB) */
    int axis = kind == L_CONV || (kind == L_GEMM && kiln_attr_int(n, "transB", 0)) ? 0 : 1;
    int64_t M = wv->constant->dims[axis];
    if (dw.ns != 1 && (dw.ns != M || dw.axis != axis)) return KILN_OK;
    float *bias = NULL;
    if (kind != L_MATMUL && n->ninputs > 2 && n->inputs[2] >= 0) {
        if (!(bias = malloc((size_t)M * sizeof *bias))) return kiln_error(KILN_ERR_OUT_OF_MEMORY, "fuse_qdq: out of memory");
        if (!layer_bias(c, n->inputs[2], M, bias)) {
            free(bias);
            return KILN_OK;
        }
    }
    /* the set: the layer, then a residual Add (a convolution without groups, symmetric weights: the
     * layers every backend's residual epilogue takes), an activation and a QuantizeLinear when they
     * are the sole readers */
    int set[4] = {layer}, nset = 1, next, add = -1;
    kiln_act act = {0};
    int y = n->outputs[0];
    dq_match dr;
    if (kind == L_CONV && kiln_attr_int(n, "group", 1) == 1 && symmetric_weights(&dw, wv->dtype) &&
        match_residual(c, y, &add, &dr)) {
        set[nset++] = add;
        y = g->nodes[add].outputs[0];
    }
    if ((next = pass_sole_consumer(c, y)) >= 0 && as_activation(c, &g->nodes[next], &act) &&
        g->nodes[next].inputs[0] == y) {
        set[nset++] = next;
        y = g->nodes[next].outputs[0];
    } else {
        act.kind = KILN_ACT_NONE;
    }
    float ys = 0.0f;
    int64_t yz = 0;
    kiln_dtype yt = KILN_F32;
    if ((next = pass_sole_consumer(c, y)) >= 0 && g->nodes[next].inputs[0] == y && match_q(c, next, &ys, &yz, &yt))
        set[nset++] = next;
    if (!pass_closed(c, set, nset, set[nset - 1])) {
        free(bias);
        return KILN_OK;
    }
    int bid = -1;
    kiln_status st = KILN_OK;
    if (bias) {
        kiln_tensor bt = {0};
        st = kiln_tensor_alloc(&bt, KILN_F32, 1, &M);
        if (st == KILN_OK) {
            memcpy(bt.data, bias, (size_t)M * sizeof *bias);
            char hint[300];
            snprintf(hint, sizeof hint, "%.280s_qbias", g->nodes[layer].name);
            st = pass_new_constant(c, hint, &bt, &bid);
        }
        kiln_tensor_release(&bt);
    }
    free(bias);
    KILN_TRY(st);
    int wq = dw.q;
    if (axis == 0 && kind == L_GEMM) KILN_TRY(transposed_weights(c, dw.q, &wq));
    KILN_TRY(pass_use_kiln_domain(c));
    /* the parameters, read before the rewrite moves anything */
    float xs = *(const float *)dx.scale->data;
    int64_t xz = dq_zp(&dx, 0);
    float *wsc = malloc((size_t)dw.ns * sizeof *wsc);
    int64_t *wzp = malloc((size_t)dw.ns * sizeof *wzp);
    if (!wsc || !wzp) {
        free(wsc), free(wzp);
        return kiln_error(KILN_ERR_OUT_OF_MEMORY, "fuse_qdq: out of memory");
    }
    for (int64_t i = 0; i < dw.ns; i++) {
        wsc[i] = ((const float *)dw.scale->data)[i];
        wzp[i] = dq_zp(&dw, i);
    }
    bool r_8bit = add >= 0 && dr.node >= 0; /* else a float residual: no r_scale */
    float rs = r_8bit ? *(const float *)dr.scale->data : 0.0f;
    int64_t rz = r_8bit ? dq_zp(&dr, 0) : 0;
    int ins[4] = {dx.q, wq, bid, add >= 0 ? dr.q : -1}, nin = add >= 0 ? 4 : bid >= 0 ? 3 : 2;
    char detail[112];
    snprintf(detail, sizeof detail, "%s weights, %s output%s", dw.ns == 1 ? "per-tensor" : "per-channel",
             kiln_dtype_name(yt), r_8bit ? ", 8-bit residual" : add >= 0 ? ", float residual" : "");
    kiln_node *q;
    const char *name = g->nodes[layer].name;
    st = pass_rewrite(c, set, nset, set[nset - 1], KILN_FUSED_DOMAIN, kind == L_CONV ? "QConv" : "QMatMul",
                      KILN_FUSED_OPSET, name, nin, ins, kind == L_CONV ? layer : -1, detail, &q);
    if (st == KILN_OK) st = pass_attr_float(g, q, "x_scale", xs);
    if (st == KILN_OK) st = pass_attr_int(g, q, "x_zero_point", xz);
    if (st == KILN_OK) st = pass_attr_floats(g, q, "w_scale", wsc, (int)dw.ns);
    if (st == KILN_OK && dw.zp) st = pass_attr_ints(g, q, "w_zero_point", wzp, (int)dw.ns);
    if (st == KILN_OK && act.kind != KILN_ACT_NONE) st = pass_attr_string(g, q, "activation", kiln_activation_name(act.kind));
    float clip[2] = {act.p0, act.p1};
    if (st == KILN_OK && act.kind == KILN_ACT_CLIP) st = pass_attr_floats(g, q, "activation_params", clip, 2);
    if (st == KILN_OK) st = pass_attr_int(g, q, "y_dtype", yt);
    if (st == KILN_OK && yt != KILN_F32) st = pass_attr_float(g, q, "y_scale", ys);
    if (st == KILN_OK && yt != KILN_F32) st = pass_attr_int(g, q, "y_zero_point", yz);
    if (st == KILN_OK && r_8bit) st = pass_attr_float(g, q, "r_scale", rs);
    if (st == KILN_OK && r_8bit) st = pass_attr_int(g, q, "r_zero_point", rz);
    free(wsc), free(wzp);
    return st;
}

/* An integer layer that writes float32 with no activation of its own (what try_fold leaves when a
 * Gelu pattern, fused only later, stood between it and the QuantizeLinear). */
static bool float_integer_layer(const kiln_node *n) {
    return pass_alive(n) && n->domain && !strcmp(n->domain, KILN_FUSED_DOMAIN) &&
           (!strcmp(n->op_type, "QMatMul") || !strcmp(n->op_type, "QConv")) &&
           kiln_attr_int(n, "y_dtype", KILN_F32) == KILN_F32 && !kiln_node_attr(n, "activation");
}

static bool f8_layer(const kiln_node *n) {
    return pass_alive(n) && n->domain && !strcmp(n->domain, KILN_FUSED_DOMAIN) && !strcmp(n->op_type, "F8MatMul");
}

/* Whether node id is an Add of y and a value r of y's shape (no broadcasting), a skip connection;
 * *r gets r's id. */
static bool residual_add(const pass_ctx *c, int id, int y, int *r) {
    const kiln_node *n = &c->g->nodes[id];
    if (!pass_is_op(n, "Add") || n->ninputs != 2) return false;
    *r = pass_other_input(n, y);
    return *r >= 0 && *r != y && pass_same_shape(&c->g->values[y], &c->g->values[*r]);
}

/* Whether node id is an Add of y and a float32 constant b of N values along the last axis (shape
 * [1, ..., 1, N]): a MatMul's bias as exporters write it; *b gets its value id. */
static bool bias_add(const pass_ctx *c, int id, int y, int64_t N, int *b) {
    const kiln_node *n = &c->g->nodes[id];
    if (!pass_is_op(n, "Add") || n->ninputs != 2) return false;
    *b = pass_other_input(n, y);
    const kiln_tensor *t = *b >= 0 ? const_of(c->g, *b) : NULL;
    if (!t || t->dtype != KILN_F32 || t->ndim < 1 || t->dims[t->ndim - 1] != N || kiln_tensor_numel(t) != N) return false;
    return c->g->values[y].ndim < 0 || t->ndim <= c->g->values[y].ndim; /* broadcasting b must not widen y */
}

/* Folds what follows float integer layer `layer` into its epilogue, each a sole reader of the
 * previous: a bias Add (a QMatMul without a bias), a Gelu, a QuantizeLinear (then an 8-bit output). */
static kiln_status try_fold_output(pass_ctx *c, int layer) {
    kiln_graph *g = c->g;
    const kiln_node *n = &g->nodes[layer];
    int set[4] = {layer}, nset = 1, y = n->outputs[0], next, bias = n->ninputs > 2 ? n->inputs[2] : -1, b = -1;
    const kiln_tensor *w = const_of(g, n->inputs[1]);
    bool matmul = !strcmp(n->op_type, "QMatMul");
    if (matmul && bias < 0 && w && w->ndim == 2 && (next = pass_sole_consumer(c, y)) >= 0 &&
        bias_add(c, next, y, w->dims[1], &b)) {
        set[nset++] = next;
        bias = b;
        y = g->nodes[next].outputs[0];
    }
    int act = -1;
    if ((next = pass_sole_consumer(c, y)) >= 0 && pass_is_op(&g->nodes[next], "Gelu") && g->nodes[next].inputs[0] == y) {
        set[nset++] = act = next;
        y = g->nodes[next].outputs[0];
    }
    float ys = 0.0f;
    int64_t yz = 0;
    kiln_dtype yt = KILN_F32;
    if ((next = pass_sole_consumer(c, y)) >= 0 && g->nodes[next].inputs[0] == y && match_q(c, next, &ys, &yz, &yt))
        set[nset++] = next;
    else
        yt = KILN_F32;
    if (nset == 1 || !pass_closed(c, set, nset, set[nset - 1])) return KILN_OK;
    bool tanh = act >= 0 && !strcmp(kiln_attr_string(&g->nodes[act], "approximate", "none"), "tanh");
    int ins[3] = {n->inputs[0], n->inputs[1], bias};
    const char *op = n->op_type, *name = n->name; /* arena strings: they outlive the rewrite */
    char detail[96];
    snprintf(detail, sizeof detail, "%s%s%s output in the epilogue", b >= 0 ? "bias, " : "", act >= 0 ? "Gelu, " : "",
             kiln_dtype_name(yt));
    kiln_node *out;
    KILN_TRY(pass_rewrite(c, set, nset, set[nset - 1], KILN_FUSED_DOMAIN, op, KILN_FUSED_OPSET, name, bias >= 0 ? 3 : 2,
                          ins, layer, detail, &out));
    for (int i = 0; i < out->nattrs; i++) /* the copy's y_dtype: the QuantizeLinear's type, if any */
        if (!strcmp(out->attrs[i].name, "y_dtype")) out->attrs[i].i = yt;
    if (act >= 0)
        KILN_TRY(pass_attr_string(g, out, "activation", kiln_activation_name(tanh ? KILN_ACT_GELU_TANH : KILN_ACT_GELU)));
    if (yt == KILN_F32) return KILN_OK;
    KILN_TRY(pass_attr_float(g, out, "y_scale", ys));
    return pass_attr_int(g, out, "y_zero_point", yz);
}

/* Folds what follows F8MatMul `layer` into it, each a sole reader of the previous: a bias Add (when
 * it has no bias), then a residual Add (when it has no residual: its input R). */
static kiln_status try_fold_f8_output(pass_ctx *c, int layer) {
    kiln_graph *g = c->g;
    const kiln_node *n = &g->nodes[layer];
    if (n->ninputs > 3 && n->inputs[3] >= 0) return KILN_OK;
    int set[3] = {layer}, nset = 1, y = n->outputs[0], next, b = -1, r = -1;
    int bias = n->ninputs > 2 ? n->inputs[2] : -1;
    const kiln_tensor *w = const_of(g, n->inputs[1]);
    if (bias < 0 && w && w->ndim == 2 && (next = pass_sole_consumer(c, y)) >= 0 && bias_add(c, next, y, w->dims[1], &b)) {
        set[nset++] = next;
        bias = b;
        y = g->nodes[next].outputs[0];
    }
    if ((next = pass_sole_consumer(c, y)) >= 0 && residual_add(c, next, y, &r)) {
        set[nset++] = next;
        y = g->nodes[next].outputs[0];
    } else {
        r = -1;
    }
    if (nset == 1 || !pass_closed(c, set, nset, set[nset - 1])) return KILN_OK;
    int ins[4] = {n->inputs[0], n->inputs[1], bias, r};
    const char *op = n->op_type, *name = n->name;
    kiln_node *out;
    return pass_rewrite(c, set, nset, set[nset - 1], KILN_FUSED_DOMAIN, op, KILN_FUSED_OPSET, name, r >= 0 ? 4 : 3, ins,
                        layer, b >= 0 && r >= 0 ? "bias and residual added after the product"
                               : b >= 0       ? "bias added after the product"
                                              : "residual added after the product",
                        &out);
}

/* Folds the Gelu that produces F8MatMul `layer`'s A, when the F8MatMul is its sole reader, into the
 * layer's input_activation: the layer reads the Gelu's input and applies it while rounding A to E4M3
 * (BERT's FFN: Linear -> Gelu -> Linear, the Gelu kernel gone). */
static kiln_status try_fold_input_act(pass_ctx *c, int layer) {
    kiln_graph *g = c->g;
    const kiln_node *n = &g->nodes[layer];
    if (kiln_attr_string(n, "input_activation", "")[0]) return KILN_OK;
    int act = pass_producer(c, n->inputs[0], "Gelu");
    if (act < 0 || pass_sole_consumer(c, n->inputs[0]) != layer) return KILN_OK;
    int set[2] = {act, layer};
    if (!pass_closed(c, set, 2, layer)) return KILN_OK;
    bool tanh = !strcmp(kiln_attr_string(&g->nodes[act], "approximate", "none"), "tanh");
    int ins[4] = {g->nodes[act].inputs[0], -1, -1, -1}, nin = n->ninputs < 4 ? n->ninputs : 4;
    for (int k = 1; k < nin; k++) ins[k] = n->inputs[k];
    const char *op = n->op_type, *name = n->name;
    kiln_node *out;
    KILN_TRY(pass_rewrite(c, set, 2, layer, KILN_FUSED_DOMAIN, op, KILN_FUSED_OPSET, name, nin, ins, layer,
                          "Gelu applied to A as it is rounded to E4M3", &out));
    return pass_attr_string(g, out, "input_activation", kiln_activation_name(tanh ? KILN_ACT_GELU_TANH : KILN_ACT_GELU));
}

kiln_status kiln_pass_fuse_qdq_output(kiln_graph *g, bool *changed) {
    pass_ctx c;
    KILN_TRY(pass_begin(&c, g, "fuse_qdq_output"));
    kiln_status st = KILN_OK;
    for (int i = 0; i < g->nnodes && st == KILN_OK; i++)
        if (float_integer_layer(&g->nodes[i])) st = try_fold_output(&c, i);
        else if (f8_layer(&g->nodes[i])) st = try_fold_f8_output(&c, i);
    for (int i = 0; i < g->nnodes && st == KILN_OK; i++) /* then the Gelus before F8MatMuls, their biases folded */
        if (f8_layer(&g->nodes[i])) st = try_fold_input_act(&c, i);
    return pass_end(&c, st, changed);
}

kiln_status kiln_pass_fuse_qdq(kiln_graph *g, bool *changed) {
    pass_ctx c;
    KILN_TRY(pass_begin(&c, g, "fuse_qdq"));
    kiln_status st = KILN_OK;
    for (int i = 0; i < g->nnodes && st == KILN_OK; i++) {
        const kiln_node *n = &g->nodes[i];
        if (pass_is_op(n, "Conv")) st = try_fold(&c, i, L_CONV);
        else if (pass_is_op(n, "MatMul")) st = try_fold(&c, i, L_MATMUL);
        else if (pass_is_op(n, "Gemm")) st = try_fold(&c, i, L_GEMM);
    }
    return pass_end(&c, st, changed);
}
