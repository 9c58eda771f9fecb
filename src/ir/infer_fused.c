/* infer_fused.c — shape and type inference for the kiln-domain ops the fusion passes create
 * (semantics in fused_ops.h). FusedConv, FusedPool and FusedMatMul reuse the Conv / pool / MatMul
 * inference of their ONNX counterparts (channels-last ones on channels-first views of their
 * shapes); the epilogue inputs (bias, residual) are checked where their shapes are known. */
#include "ir/fused_ops.h"
#include "ir/op_schema.h"

#include "core/ckd.h"
#include "core/status.h"

#include <string.h>

static bool is_float(kiln_dtype t) { return t == KILN_F32 || t == KILN_F16 || t == KILN_BF16 || t == KILN_F64; }

/* Fails when two dims are both static and differ. */
static kiln_status dims_compatible(const kiln_node *n, kiln_dim a, kiln_dim b, const char *what) {
    if (a.sym == 0 && b.sym == 0 && a.value != b.value)
        return kiln_error(KILN_ERR_SHAPE, "%s: %s (%lld vs %lld)", n->op_type, what, (long long)a.value, (long long)b.value);
    return KILN_OK;
}

/* Checks the activation attributes and the residual input z (same shape as output 0 where known). */
static kiln_status check_epilogue(const kiln_graph *g, const kiln_node *n, int z) {
    kiln_act act;
    KILN_TRY(kiln_fused_activation(n, &act));
    kiln_value *zv = kiln_node_input(g, n, z), *y = kiln_node_output(g, n, 0);
    if (!zv || !y || zv->ndim < 0 || y->ndim < 0) return KILN_OK;
    if (zv->ndim != y->ndim)
        return kiln_error(KILN_ERR_SHAPE, "%s: the residual has rank %d, the output rank %d", n->op_type, zv->ndim, y->ndim);
    for (int d = 0; d < y->ndim; d++)
        KILN_TRY(dims_compatible(n, zv->dims[d], y->dims[d], "the residual's shape differs from the output's"));
    return KILN_OK;
}

/* Runs the inference of the ONNX op `base` on n (whose leading inputs and attributes are base's). */
static kiln_status infer_as(kiln_graph *g, kiln_node *n, const char *base) {
    const kiln_op_schema *s = kiln_op_schema_find("", base);
    KILN_ASSERT(s && s->infer);
    return s->infer(g, n);
}

/* dims[1..rank) rotated: to_first moves the last dim to position 1 (NHWC -> NCHW order), else
 * position 1 to the end (NCHW -> NHWC). */
static void rotate_channels(kiln_dim *dims, int rank, bool to_first) {
    if (rank < 3) return;
    kiln_dim t[KILN_MAX_DIMS];
    memcpy(t, dims, sizeof *t * (size_t)rank);
    for (int d = 1; d < rank; d++) dims[d] = to_first ? t[d == 1 ? rank - 1 : d - 1] : t[d == rank - 1 ? 1 : d + 1];
}

/* FusedConv with channels_last = 1: Conv's inference on NCHW views. X's and W's dims are rotated
 * to channels-first in place for the call and restored after it (whatever it returns); Y's are
 * rotated back to channels-last. */
static kiln_status infer_conv_channels_last(kiln_graph *g, kiln_node *n) {
    kiln_value *x = kiln_node_input(g, n, 0), *w = kiln_node_input(g, n, 1);
    if (!x || !w) return kiln_error(KILN_ERR_INVALID_ARGUMENT, "FusedConv needs inputs X and W");
    if ((x->ndim >= 0 && x->ndim != 4) || (w->ndim >= 0 && w->ndim != 4))
        return kiln_error(KILN_ERR_SHAPE, "FusedConv: channels_last needs 4-D X and W (2-D convolution), has ranks %d "
                          "and %d", x->ndim, w->ndim);
    if (x == w) return kiln_error(KILN_ERR_INVALID_ARGUMENT, "FusedConv: X and W are the same value");
    rotate_channels(x->dims, x->ndim, true);
    rotate_channels(w->dims, w->ndim, true);
    kiln_status st = infer_as(g, n, "Conv");
    rotate_channels(x->dims, x->ndim, false);
    rotate_channels(w->dims, w->ndim, false);
    kiln_value *y = kiln_node_output(g, n, 0);
    if (st == KILN_OK && y) rotate_channels(y->dims, y->ndim, false);
    return st;
}

/* FusedConv: Conv's inference, channels-first or (channels_last = 1, fused_ops.h) channels-last. */
static kiln_status infer_fused_conv(kiln_graph *g, kiln_node *n) {
    int64_t cl = kiln_attr_int(n, "channels_last", 0);
    if (cl != 0 && cl != 1)
        return kiln_error(KILN_ERR_INVALID_ARGUMENT, "FusedConv: channels_last must be 0 or 1, is %lld", (long long)cl);
    KILN_TRY(cl ? infer_conv_channels_last(g, n) : infer_as(g, n, "Conv"));
    return check_epilogue(g, n, 3);
}

/* FusedPool: the inference of the ONNX pool it computes (kiln_fused_pool_base), on NCHW views of
 * X and Y when channels_last = 1 (X's dims rotated in place for the call and restored after it). */
static kiln_status infer_fused_pool(kiln_graph *g, kiln_node *n) {
    kiln_node base;
    KILN_TRY(kiln_fused_pool_base(n, &base));
    int64_t cl = kiln_attr_int(n, "channels_last", 0);
    if (cl != 0 && cl != 1)
        return kiln_error(KILN_ERR_INVALID_ARGUMENT, "FusedPool: channels_last must be 0 or 1, is %lld", (long long)cl);
    if (n->noutputs != 1) return kiln_error(KILN_ERR_INVALID_ARGUMENT, "FusedPool has one output, has %d", n->noutputs);
    kiln_value *x = kiln_node_input(g, n, 0);
    if (!x) return kiln_error(KILN_ERR_INVALID_ARGUMENT, "FusedPool needs input X");
    if (x->dtype != KILN_UNDEFINED && !is_float(x->dtype))
        return kiln_error(KILN_ERR_INVALID_ARGUMENT, "FusedPool does not accept %s X", kiln_dtype_name(x->dtype));
    if (!cl) return infer_as(g, &base, base.op_type);
    if (x->ndim >= 0 && x->ndim != 4)
        return kiln_error(KILN_ERR_SHAPE, "FusedPool: channels_last needs a 4-D X (2-D pooling), has rank %d", x->ndim);
    rotate_channels(x->dims, x->ndim, true);
    kiln_status st = infer_as(g, &base, base.op_type);
    rotate_channels(x->dims, x->ndim, false);
    kiln_value *y = kiln_node_output(g, n, 0);
    if (st == KILN_OK && y) rotate_channels(y->dims, y->ndim, false);
    return st;
}

/* FusedGemm: Y [M, N] from A and B (each optionally transposed); C broadcasts to Y. */
static kiln_status infer_fused_gemm(kiln_graph *g, kiln_node *n) {
    kiln_value *a = kiln_node_input(g, n, 0), *b = kiln_node_input(g, n, 1), *c = kiln_node_input(g, n, 2);
    if (!a || !b) return kiln_error(KILN_ERR_INVALID_ARGUMENT, "FusedGemm needs inputs A and B");
    if ((a->ndim >= 0 && a->ndim != 2) || (b->ndim >= 0 && b->ndim != 2))
        return kiln_error(KILN_ERR_SHAPE, "FusedGemm needs 2-D A and B (ranks %d and %d)", a->ndim, b->ndim);
    bool ta = kiln_attr_int(n, "transA", 0) != 0, tb = kiln_attr_int(n, "transB", 0) != 0;
    kiln_dim out[2] = {KILN_DIM_UNKNOWN, KILN_DIM_UNKNOWN};
    if (a->ndim == 2) out[0] = a->dims[ta ? 1 : 0];
    if (b->ndim == 2) out[1] = b->dims[tb ? 0 : 1];
    if (a->ndim == 2 && b->ndim == 2)
        KILN_TRY(dims_compatible(n, a->dims[ta ? 0 : 1], b->dims[tb ? 1 : 0], "inner dimensions of A and B differ"));
    if (c && c->ndim > 2) return kiln_error(KILN_ERR_SHAPE, "FusedGemm: C must have rank <= 2, has rank %d", c->ndim);
    for (int i = 0; c && i < c->ndim; i++) {
        kiln_dim cd = c->dims[i];
        if (!(cd.sym == 0 && cd.value == 1))
            KILN_TRY(dims_compatible(n, cd, out[2 - c->ndim + i], "C cannot be broadcast to the output"));
    }
    kiln_infer_set(g, n, 0, a->dtype != KILN_UNDEFINED ? a->dtype : b->dtype, 2, out);
    return check_epilogue(g, n, 3);
}

static kiln_status infer_fused_matmul(kiln_graph *g, kiln_node *n) {
    KILN_TRY(infer_as(g, n, "MatMul"));
    kiln_value *bias = kiln_node_input(g, n, 2), *y = kiln_node_output(g, n, 0);
    if (bias && y && y->ndim >= 1 && bias->ndim >= 0) {
        int64_t count = 1;
        bool known = true;
        for (int d = 0; d < bias->ndim && known; d++)
            known = bias->dims[d].sym == 0 && kiln_mul_i64_ok(count, bias->dims[d].value, &count);
        kiln_dim last = y->dims[y->ndim - 1];
        if (known && last.sym == 0 && count != last.value)
            return kiln_error(KILN_ERR_SHAPE, "FusedMatMul: the bias has %lld elements, the output rows %lld",
                              (long long)count, (long long)last.value);
    }
    return check_epilogue(g, n, 3);
}

/* Broadcasts batch dims src[0..n) into dst[0..rank) (right-aligned; dst starts all 1). */
static kiln_status broadcast_into(const kiln_node *n, kiln_dim *dst, int rank, const kiln_dim *src, int count) {
    for (int i = 0; i < count; i++) {
        kiln_dim s = src[i], *o = &dst[rank - count + i];
        if (s.sym == 0 && s.value == 1) continue;
        if (o->sym == 0 && o->value == 1) *o = s;
        else if (s.sym == 0 && o->sym == 0) KILN_TRY(dims_compatible(n, s, *o, "batch dimensions cannot be broadcast"));
        else if (s.sym == 0) *o = s;
        else if (!(s.sym > 0 && s.sym == o->sym) && o->sym != 0) *o = KILN_DIM_UNKNOWN;
    }
    return KILN_OK;
}

/* Attention: O [broadcast(batch of Q, K', V', mask)..., Sq, Dv]. */
/* Attention in the sequence-first layouts: layout 1, O [B, Sq, H, Dv] of Q [B, Sq, H, D], K [B, Sk, Hk,
 * D], V [B, Sk, Hk, Dv]; layout 2, O [B, S, H, D] of QKV [B, S, 3, H, D]. */
static kiln_status infer_attention_seq_first(kiln_graph *g, kiln_node *n, int64_t layout, int64_t rep) {
    kiln_value *q = kiln_node_input(g, n, 0), *k = kiln_node_input(g, n, 1), *v = kiln_node_input(g, n, 2);
    if (layout == 2) {
        if (rep != 1) return kiln_error(KILN_ERR_INVALID_ARGUMENT, "Attention: packed QKV (layout 2) takes no kv_repeat");
        if (q->ndim < 0) {
            kiln_infer_set(g, n, 0, q->dtype, -1, NULL);
            return KILN_OK;
        }
        if (q->ndim != 5) return kiln_error(KILN_ERR_SHAPE, "Attention: packed QKV must be [B, S, 3, H, D], has rank %d", q->ndim);
        KILN_TRY(dims_compatible(n, q->dims[2], kiln_dim_static(3), "packed QKV's axis 2 must be 3"));
        kiln_dim out[4] = {q->dims[0], q->dims[1], q->dims[3], q->dims[4]};
        kiln_infer_set(g, n, 0, q->dtype, 4, out);
        return KILN_OK;
    }
    if (!k || !v) return kiln_error(KILN_ERR_INVALID_ARGUMENT, "Attention needs inputs Q, K and V");
    if (q->ndim < 0 || k->ndim < 0 || v->ndim < 0) {
        kiln_infer_set(g, n, 0, q->dtype, -1, NULL);
        return KILN_OK;
    }
    if (q->ndim != 4 || k->ndim != 4 || v->ndim != 4)
        return kiln_error(KILN_ERR_SHAPE, "Attention: layout 1 needs Q, K and V of rank 4 [B, S, H, D]");
    KILN_TRY(dims_compatible(n, q->dims[3], k->dims[3], "Q and K have different head sizes"));
    KILN_TRY(dims_compatible(n, k->dims[1], v->dims[1], "K and V have different lengths"));
    KILN_TRY(dims_compatible(n, k->dims[2], v->dims[2], "K and V have different head counts"));
    KILN_TRY(dims_compatible(n, q->dims[0], k->dims[0], "Q and K have different batch sizes"));
    KILN_TRY(dims_compatible(n, q->dims[0], v->dims[0], "Q and V have different batch sizes"));
    int64_t heads;
    if (k->dims[2].sym == 0 && !kiln_mul_i64_ok(k->dims[2].value, rep, &heads))
        return kiln_error(KILN_ERR_SHAPE, "Attention: kv_repeat %lld times %lld heads overflows", (long long)rep,
                          (long long)k->dims[2].value);
    if (k->dims[2].sym == 0)
        KILN_TRY(dims_compatible(n, q->dims[2], kiln_dim_static(heads), "Q's heads are not K's times kv_repeat"));
    kiln_dim out[4] = {q->dims[0], q->dims[1], q->dims[2], v->dims[3]};
    kiln_infer_set(g, n, 0, q->dtype, 4, out);
    return KILN_OK;
}

/* Attention: O [broadcast(batch of Q, K', V', mask)..., Sq, Dv]. */
static kiln_status infer_attention(kiln_graph *g, kiln_node *n) {
    kiln_value *q = kiln_node_input(g, n, 0), *k = kiln_node_input(g, n, 1), *v = kiln_node_input(g, n, 2);
    kiln_value *m = kiln_node_input(g, n, 3);
    if (!q || ((!k || !v) && kiln_attr_int(n, "layout", 0) != 2))
        return kiln_error(KILN_ERR_INVALID_ARGUMENT, "Attention needs inputs Q, K and V");
    if (q->dtype != KILN_UNDEFINED && !is_float(q->dtype))
        return kiln_error(KILN_ERR_INVALID_ARGUMENT, "Attention does not accept %s Q", kiln_dtype_name(q->dtype));
    int64_t rep = kiln_attr_int(n, "kv_repeat", 1);
    if (rep < 1 || rep > KILN_MAX_KV_REPEAT)
        return kiln_error(KILN_ERR_INVALID_ARGUMENT, "Attention: kv_repeat must be from 1 to %d, is %lld", KILN_MAX_KV_REPEAT,
                          (long long)rep);
    int64_t layout = kiln_attr_int(n, "layout", 0);
    if (layout < 0 || layout > 2) return kiln_error(KILN_ERR_INVALID_ARGUMENT, "Attention: layout %lld is not 0, 1 or 2", (long long)layout);
    if (layout != 0) return infer_attention_seq_first(g, n, layout, rep);
    if (q->ndim < 0 || k->ndim < 0 || v->ndim < 0 || (m && m->ndim < 0)) {
        kiln_infer_set(g, n, 0, q->dtype, -1, NULL);
        return KILN_OK;
    }
    if (q->ndim < 2 || k->ndim < 2 || v->ndim < 2)
        return kiln_error(KILN_ERR_SHAPE, "Attention needs Q, K and V of rank >= 2");
    if (rep > 1 && (k->ndim < 3 || v->ndim < 3))
        return kiln_error(KILN_ERR_SHAPE, "Attention: kv_repeat needs K and V with a head axis (rank >= 3)");
    KILN_TRY(dims_compatible(n, q->dims[q->ndim - 1], k->dims[k->ndim - 1], "Q and K have different head sizes"));
    KILN_TRY(dims_compatible(n, k->dims[k->ndim - 2], v->dims[v->ndim - 2], "K and V have different lengths"));
    kiln_dim kb[KILN_MAX_DIMS], vb[KILN_MAX_DIMS];
    memcpy(kb, k->dims, sizeof kb);
    memcpy(vb, v->dims, sizeof vb);
    if (rep > 1) {
        kiln_dim *hk = &kb[k->ndim - 3], *hv = &vb[v->ndim - 3];
        int64_t nk, nv;
        *hk = hk->sym == 0 && kiln_mul_i64_ok(hk->value, rep, &nk) ? kiln_dim_static(nk) : KILN_DIM_UNKNOWN;
        *hv = hv->sym == 0 && kiln_mul_i64_ok(hv->value, rep, &nv) ? kiln_dim_static(nv) : KILN_DIM_UNKNOWN;
    }
    int rank = q->ndim;
    if (k->ndim > rank) rank = k->ndim;
    if (v->ndim > rank) rank = v->ndim;
    if (m && m->ndim > rank) rank = m->ndim;
    if (rank > KILN_MAX_DIMS) return kiln_error(KILN_ERR_SHAPE, "Attention: rank %d is too large", rank);
    kiln_dim out[KILN_MAX_DIMS];
    for (int i = 0; i < rank - 2; i++) out[i] = kiln_dim_static(1);
    KILN_TRY(broadcast_into(n, out, rank - 2, q->dims, q->ndim - 2));
    KILN_TRY(broadcast_into(n, out, rank - 2, kb, k->ndim - 2));
    KILN_TRY(broadcast_into(n, out, rank - 2, vb, v->ndim - 2));
    if (m && m->ndim > 2) KILN_TRY(broadcast_into(n, out, rank - 2, m->dims, m->ndim - 2));
    out[rank - 2] = q->dims[q->ndim - 2];
    out[rank - 1] = v->dims[v->ndim - 1];
    kiln_infer_set(g, n, 0, q->dtype, rank, out);
    return KILN_OK;
}

/* ElementwiseChain: Y has input 0's shape and dtype; the program must be valid. */
static kiln_status infer_chain(kiln_graph *g, kiln_node *n) {
    if (!kiln_node_input(g, n, 0)) return kiln_error(KILN_ERR_INVALID_ARGUMENT, "ElementwiseChain needs input 0");
    int nprog, nconst;
    const int64_t *prog = kiln_attr_ints(n, "program", &nprog);
    kiln_attr_floats(n, "constants", &nconst);
    KILN_TRY(kiln_chain_validate(prog, nprog, n->ninputs, nconst));
    kiln_infer_copy(g, n, 0, 0);
    return KILN_OK;
}

const kiln_op_schema kiln_schemas_fused[] = {
    {"FusedConv", KILN_FUSED_DOMAIN, KILN_FUSED_OPSET, KILN_FUSED_OPSET, infer_fused_conv},
    {"FusedPool", KILN_FUSED_DOMAIN, KILN_FUSED_OPSET, KILN_FUSED_OPSET, infer_fused_pool},
    {"FusedGemm", KILN_FUSED_DOMAIN, KILN_FUSED_OPSET, KILN_FUSED_OPSET, infer_fused_gemm},
    {"FusedMatMul", KILN_FUSED_DOMAIN, KILN_FUSED_OPSET, KILN_FUSED_OPSET, infer_fused_matmul},
    {"Attention", KILN_FUSED_DOMAIN, KILN_FUSED_OPSET, KILN_FUSED_OPSET, infer_attention},
    {"ElementwiseChain", KILN_FUSED_DOMAIN, KILN_FUSED_OPSET, KILN_FUSED_OPSET, infer_chain},
    {0},
};
