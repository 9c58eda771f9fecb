/* fuse_conv_bn.c — folds an inference BatchNormalization into the Conv before it:
 *     W'[m] = W[m] * s[m],  B'[m] = (B[m] - mean[m]) * s[m] + beta[m],  s = scale / sqrt(var + eps)
 * computed in double into NEW constants (the old weights may be shared, or read-only memory of a
 * loaded engine). Fires only when W, B and all four BN parameters are float32 constants of the
 * right shapes and the Conv's output feeds nothing but the BN. */
#include "passes/passes.h"

#include "core/status.h"
#include "passes/pass_util.h"

#include <math.h>
#include <stdio.h>

/* The float32 data of constant value v when it is 1-D of length m, else NULL. */
static const float *vec_param(const kiln_graph *g, int v, int64_t m) {
    if (v < 0) return NULL;
    const kiln_tensor *t = g->values[v].constant;
    if (!t || t->dtype != KILN_F32 || t->ndim != 1 || t->dims[0] != m) return NULL;
    return t->data;
}

/* Folds BatchNormalization node bn into its producing Conv when the pattern holds. */
static kiln_status try_fold(pass_ctx *c, int bn) {
    kiln_graph *g = c->g;
    const kiln_node *b = &g->nodes[bn];
    if (b->ninputs < 5 || (b->opset < 9 && kiln_attr_int(b, "spatial", 1) != 1) ||
        (b->opset >= 14 && kiln_attr_int(b, "training_mode", 0) != 0))
        return KILN_OK;
    int conv = pass_producer(c, b->inputs[0], "Conv");
    if (conv < 0) return KILN_OK;
    const kiln_node *cv = &g->nodes[conv];
    const kiln_value *wv = kiln_node_input(g, cv, 1);
    if (!wv || !wv->constant || wv->constant->dtype != KILN_F32 || wv->constant->ndim < 3) return KILN_OK;
    const kiln_tensor *w = wv->constant;
    int64_t m = w->dims[0];
    const float *bias = NULL;
    if (cv->ninputs > 2 && cv->inputs[2] >= 0 && !(bias = vec_param(g, cv->inputs[2], m))) return KILN_OK;
    const float *scale = vec_param(g, b->inputs[1], m), *beta = vec_param(g, b->inputs[2], m);
    const float *mean = vec_param(g, b->inputs[3], m), *var = vec_param(g, b->inputs[4], m);
    if (!scale || !beta || !mean || !var) return KILN_OK;
    int set[2] = {conv, bn};
    if (!pass_closed(c, set, 2, bn)) return KILN_OK;
    double eps = kiln_attr_float(b, "epsilon", 1e-5f);
    kiln_tensor nw = {0}, nb = {0};
    KILN_TRY(kiln_tensor_alloc(&nw, KILN_F32, w->ndim, w->dims));
    kiln_status st = kiln_tensor_alloc(&nb, KILN_F32, 1, &m);
    if (st != KILN_OK) {
        kiln_tensor_release(&nw);
        return st;
    }
    int64_t per = m ? kiln_tensor_numel(w) / m : 0;
    const float *wd = w->data;
    float *nwd = nw.data, *nbd = nb.data;
    for (int64_t o = 0; o < m; o++) {
        double s = (double)scale[o] / sqrt((double)var[o] + eps);
        for (int64_t j = 0; j < per; j++) nwd[o * per + j] = (float)(wd[o * per + j] * s);
        nbd[o] = (float)(((bias ? (double)bias[o] : 0.0) - mean[o]) * s + beta[o]);
    }
    char hint[300];
    int wid, bid;
    snprintf(hint, sizeof hint, "%.280s_bn_folded", g->values[cv->inputs[1]].name);
    st = pass_new_constant(c, hint, &nw, &wid);
    snprintf(hint, sizeof hint, "%.280s_bn_bias", g->nodes[conv].name);
    if (st == KILN_OK) st = pass_new_constant(c, hint, &nb, &bid);
    kiln_tensor_release(&nw);
    kiln_tensor_release(&nb);
    if (st != KILN_OK) return st;
    cv = &g->nodes[conv];
    int ins[3] = {cv->inputs[0], wid, bid};
    kiln_node *out;
    return pass_rewrite(c, set, 2, bn, "", "Conv", cv->opset, cv->name, 3, ins, conv, NULL, &out);
}

kiln_status kiln_pass_fuse_conv_bn(kiln_graph *g, bool *changed) {
    pass_ctx c;
    KILN_TRY(pass_begin(&c, g, "fuse_conv_bn"));
    kiln_status st = KILN_OK;
    for (int i = 0; i < g->nnodes && st == KILN_OK; i++)
        if (pass_is_op(&g->nodes[i], "BatchNormalization")) st = try_fold(&c, i);
    return pass_end(&c, st, changed);
}
