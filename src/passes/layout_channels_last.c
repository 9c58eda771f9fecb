/* layout_channels_last.c — lays 2-D convolutions, and the pools next to them, out channels-last
 * (NHWC), for backends whose convolutions run faster that way (tensor-core kernels want C
 * innermost). Each kiln.FusedConv still channels-first, and each plain Conv, with a 4-D X and
 * constant weights becomes a FusedConv with channels_last = 1 (ir/fused_ops.h):
 *     X -> Transpose(0,2,3,1) -> FusedConv(W' = W as [M, kH, kW, C/g], B, Z -> Transpose(0,2,3,1))
 *       -> Transpose(0,3,1,2) -> Y
 * Y keeps its name and every reader, so the graph's interface and the layout everything else sees
 * are unchanged. The pass leaves the Transposes between consecutive convolutions to the clean-up
 * passes: eliminate_noops cancels each inverse pair (one per reader of a value that fans out) and
 * cse merges the equal Transposes of one value, so what is left sits at the boundaries of the
 * convolution regions (the graph's input and output, a pooling layer, a reshape). The weights become
 * new constants (the old ones may be shared, or read-only memory of a loaded engine).
 *
 * A 2-D pool (MaxPool, AveragePool, GlobalAveragePool, GlobalMaxPool; float, no MaxPool Indices in
 * use) whose input such a region writes (a Transpose(0,3,1,2), after the convolutions are laid out)
 * becomes a kiln.FusedPool with channels_last = 1 between Transposes the same way, so that the
 * Transposes around a pool between convolutions (ResNet's stem MaxPool) cancel too; a pool at the
 * end of a region (a GlobalAveragePool before the classifier) moves the region's last Transpose
 * after itself, onto its smaller output. Pools are not laid out on their own: one between
 * channels-first ops would only gain two Transposes.
 *
 * An integer kiln.QConv (ir/quant_ops.h) of the same kind, without groups and with symmetric weights,
 * stays a QConv and gets channels_last = 1 the same way (its residual R transposed like Z), so that a
 * chain of int8 convolutions (ResNet's blocks, their residual Adds folded in) runs channels-last
 * between one Transpose at each end.
 *
 * A per-tensor QuantizeLinear between two such regions (after ResNet's stem MaxPool, before the
 * integer convolutions) is elementwise in any layout: it moves between Transposes the same way, so
 * that they cancel too.
 *
 * A convolution without groups whose input channels C are not a multiple of 8 (an RGB stem: C = 3)
 * also gets its channels zero-padded to the next multiple of 8, a Pad after the input's Transpose and
 * zero weights for the new channels: the result is the same, and tensor-core kernels, which want C a
 * multiple of 8, then take it (cuDNN ran ResNet-50's 7x7 stem at batch 256 in 3.1 ms with C = 3); a
 * kiln.QConv's to a multiple of 16, which its GPU kernel reads in place (or, with at most 8 input
 * channels, the stem's, to 8: that kernel copies two taps of 8 channels per 16 bytes). */
#include "passes/passes.h"

#include "core/status.h"
#include "ir/fused_ops.h"
#include "ir/quant_ops.h"
#include "passes/pass_util.h"

#include <stdio.h>
#include <string.h>

static const int64_t g_to_last[4] = {0, 2, 3, 1};  /* NCHW -> NHWC */
static const int64_t g_to_first[4] = {0, 3, 1, 2}; /* NHWC -> NCHW */

static bool is_fused_conv(const kiln_node *n) {
    return pass_alive(n) && !strcmp(n->domain, KILN_FUSED_DOMAIN) && !strcmp(n->op_type, "FusedConv");
}

/* Whether kiln.QConv n is one this pass lays out: channels-first, 2-D, without groups, constant
 * 8-bit weights with symmetric zero points (int8: 0, uint8: 128) — the layers the GPU's channels-last
 * integer kernel takes. */
static bool qconv_candidate(const kiln_graph *g, const kiln_node *n) {
    if (!pass_alive(n) || strcmp(n->domain, KILN_FUSED_DOMAIN) || strcmp(n->op_type, "QConv")) return false;
    if (kiln_attr_int(n, "channels_last", 0) != 0 || kiln_attr_int(n, "group", 1) != 1) return false;
    const kiln_value *x = kiln_node_input(g, n, 0), *w = kiln_node_input(g, n, 1);
    if (!x || !w || !kiln_node_output(g, n, 0) || x->ndim != 4 || !w->constant || w->constant->ndim != 4) return false;
    if (w->constant->dtype != KILN_I8 && w->constant->dtype != KILN_U8) return false;
    kiln_quant_layer q;
    if (kiln_quant_layer_read(n, &q) != KILN_OK) {
        kiln_error_clear(); /* shape inference reports it */
        return false;
    }
    int64_t symmetric = w->constant->dtype == KILN_U8 ? 128 : 0;
    if (q.nwzp == 0) return symmetric == 0;
    for (int i = 0; i < q.nwzp; i++)
        if (q.w_zero_point[i] != symmetric) return false;
    return true;
}

/* Whether node n is a convolution this pass lays out: a channels-first FusedConv or a Conv, with a
 * 4-D X and float constant 4-D weights, or a kiln.QConv qconv_candidate takes. */
static bool candidate(const kiln_graph *g, const kiln_node *n) {
    if (qconv_candidate(g, n)) return true;
    bool fused = is_fused_conv(n);
    if (!fused && !pass_is_op(n, "Conv")) return false;
    if (fused && kiln_attr_int(n, "channels_last", 0) != 0) return false;
    const kiln_value *x = kiln_node_input(g, n, 0), *w = kiln_node_input(g, n, 1);
    if (!x || !w || !kiln_node_output(g, n, 0) || x->ndim != 4 || !w->constant) return false;
    return w->constant->ndim == 4 && pass_is_float(w->constant->dtype);
}

/* The multiple the cg input channels of node n's channels-last form are padded to: 16 for a
 * kiln.QConv of more than 8 (16 int8 channels: one 16-byte copy of its GPU kernel, which then reads X
 * in place), else 8. */
static int64_t channel_multiple(const kiln_node *n, int64_t cg) {
    return !strcmp(n->op_type, "QConv") && cg > 8 ? 16 : 8;
}

/* The input channels node n's channels-last form reads: C rounded up to channel_multiple for a
 * convolution without groups, else C/group as it is (w: the channels-first weights). */
static int64_t padded_channels(const kiln_node *n, const kiln_tensor *w) {
    int64_t cg = w->dims[1], m = channel_multiple(n, cg);
    return kiln_attr_int(n, "group", 1) == 1 ? (cg + m - 1) / m * m : cg;
}

/* out = w [M, C/g, kH, kW] as [M, kH, kW, cp], same dtype; channels from C/g to cp are zeros. */
static kiln_status weights_channels_last(const kiln_tensor *w, int64_t cp, kiln_tensor *out) {
    int64_t m = w->dims[0], cg = w->dims[1], kh = w->dims[2], kw = w->dims[3];
    int64_t dims[4] = {m, kh, kw, cp};
    KILN_TRY(kiln_tensor_alloc(out, w->dtype, 4, dims));
    size_t es = kiln_dtype_size(w->dtype);
    const char *s = w->data;
    char *d = out->data;
    memset(d, 0, (size_t)(m * kh * kw * cp) * es);
    for (int64_t o = 0; o < m; o++)
        for (int64_t c = 0; c < cg; c++)
            for (int64_t y = 0; y < kh; y++)
                for (int64_t x = 0; x < kw; x++)
                    memcpy(d + (size_t)(((o * kh + y) * kw + x) * cp + c) * es,
                           s + (size_t)(((o * cg + c) * kh + y) * kw + x) * es, es);
    return KILN_OK;
}

/* Appends Pad(src) adding `extra` zero channels after the last axis of the NHWC value src (to cp); *out
 * receives the padded value. */
static kiln_status add_channel_pad(pass_ctx *c, int src, int64_t extra, int64_t cp, const char *conv, int *out) {
    kiln_graph *g = c->g;
    const int64_t pads[8] = {0, 0, 0, 0, 0, 0, 0, extra}; /* [begin N, H, W, C, end N, H, W, C] */
    char name[300];
    int pid;
    snprintf(name, sizeof name, "%.280s_cpad", conv);
    KILN_TRY(pass_new_ints(c, name, pads, 8, &pid));
    snprintf(name, sizeof name, "%.260s_c%lld", g->values[src].name, (long long)cp);
    KILN_TRY(pass_new_value(c, name, out));
    int ins[2] = {src, pid}, id;
    snprintf(name, sizeof name, "%.280s_x_cpad", conv);
    return pass_add_node(c, "", "Pad", pass_onnx_opset(g, 13), name, 2, ins, *out, &id);
}

/* Appends Transpose(src, perm) named `name` writing value dst (-1: a new value named from src);
 * *out receives the value it writes. */
static kiln_status add_transpose(pass_ctx *c, int src, int dst, const int64_t *perm, const char *name, int *out) {
    kiln_graph *g = c->g;
    if (dst < 0) {
        char hint[300];
        snprintf(hint, sizeof hint, "%.280s_%s", g->values[src].name, perm == g_to_last ? "nhwc" : "nchw");
        KILN_TRY(pass_new_value(c, hint, &dst));
    }
    int id;
    KILN_TRY(pass_add_node(c, "", "Transpose", pass_onnx_opset(g, 13), name, 1, &src, dst, &id));
    *out = dst;
    return pass_attr_ints(g, &g->nodes[id], "perm", perm, 4);
}

/* The new constant holding node id's weights channels-last with cp input channels; its value id
 * into *wid. */
static kiln_status new_weights(pass_ctx *c, int id, int64_t cp, int *wid) {
    kiln_graph *g = c->g;
    int w = g->nodes[id].inputs[1];
    kiln_tensor t = {0};
    KILN_TRY(weights_channels_last(g->values[w].constant, cp, &t));
    char hint[300];
    snprintf(hint, sizeof hint, "%.280s_nhwc", g->values[w].name);
    kiln_status st = pass_new_constant(c, hint, &t, wid);
    kiln_tensor_release(&t);
    return st;
}

/* Sets node n's channels_last attribute to 1 (it is absent or 0). */
static kiln_status set_channels_last(kiln_graph *g, kiln_node *n) {
    for (int k = 0; k < n->nattrs; k++)
        if (!strcmp(n->attrs[k].name, "channels_last")) {
            n->attrs[k].type = KILN_ATTR_INT;
            n->attrs[k].i = 1;
            return KILN_OK;
        }
    return pass_attr_int(g, n, "channels_last", 1);
}

/* The end of a rewrite into a channels-last node n (id; just rewritten, still writing y): marks it
 * channels_last, makes it write the NHWC value yl instead and appends Transpose(0,3,1,2) from yl to
 * y (named after `owner`), so that y keeps its name, layout and readers. */
static kiln_status finish_channels_last(pass_ctx *c, kiln_node *n, int id, int y, int yl, const char *owner) {
    kiln_graph *g = c->g;
    KILN_TRY(set_channels_last(g, n));
    n->outputs[0] = yl;
    g->values[yl].producer = id;
    g->values[y].producer = -1;
    char name[300];
    snprintf(name, sizeof name, "%.280s_y_nchw", owner);
    int out;
    return add_transpose(c, yl, y, g_to_first, name, &out);
}

/* Lays convolution node id out channels-last (the pattern in the file comment). */
static kiln_status lay_out(pass_ctx *c, int id) {
    kiln_graph *g = c->g;
    const char *conv = g->nodes[id].name;
    const int *in = g->nodes[id].inputs;
    int nin = g->nodes[id].ninputs, y = g->nodes[id].outputs[0];
    bool qconv = !strcmp(g->nodes[id].op_type, "QConv"); /* stays a QConv, else becomes a FusedConv */
    int ins[4] = {in[0], -1, nin > 2 ? in[2] : -1, nin > 3 ? in[3] : -1}; /* X, W', B, Z (QConv: R) */
    char name[300], detail[480];
    const kiln_tensor *w = g->values[in[1]].constant;
    int64_t cg = w->dims[1], cp = padded_channels(&g->nodes[id], w);
    KILN_TRY(pass_use_kiln_domain(c));
    KILN_TRY(new_weights(c, id, cp, &ins[1]));
    snprintf(name, sizeof name, "%.280s_x_nhwc", conv);
    KILN_TRY(add_transpose(c, ins[0], -1, g_to_last, name, &ins[0]));
    if (cp > cg) KILN_TRY(add_channel_pad(c, ins[0], cp - cg, cp, conv, &ins[0]));
    if (ins[3] >= 0) {
        snprintf(name, sizeof name, "%.280s_z_nhwc", conv);
        KILN_TRY(add_transpose(c, ins[3], -1, g_to_last, name, &ins[3]));
    }
    int yl;
    snprintf(name, sizeof name, "%.280s_nhwc", g->values[y].name);
    KILN_TRY(pass_new_value(c, name, &yl));
    char padded[64] = "";
    if (cp > cg) snprintf(padded, sizeof padded, ", input channels zero-padded to %lld", (long long)cp);
    snprintf(detail, sizeof detail, "channels-last between Transposes, weights '%.180s' -> '%.180s'%s",
             g->values[g->nodes[id].inputs[1]].name, g->values[ins[1]].name, padded);
    int set[1] = {id};
    kiln_node *n;
    KILN_TRY(pass_rewrite(c, set, 1, id, KILN_FUSED_DOMAIN, qconv ? "QConv" : "FusedConv", KILN_FUSED_OPSET, conv,
                          ins[3] >= 0 ? 4 : (ins[2] >= 0 ? 3 : 2), ins, id, detail, &n));
    return finish_channels_last(c, n, id, y, yl, conv);
}

/* The pooling ops laid out channels-last, as kiln.FusedPool (fused_ops.h). */
static const char *const g_pools[] = {"MaxPool", "AveragePool", "GlobalAveragePool", "GlobalMaxPool"};

/* Whether value v is written by a Transpose(0,3,1,2): a channels-last region's output, such as a
 * laid-out convolution's Y. */
static bool from_channels_last(const pass_ctx *c, int v) {
    int t = pass_producer(c, v, "Transpose");
    if (t < 0) return false;
    int np;
    const int64_t *perm = kiln_attr_ints(&c->g->nodes[t], "perm", &np);
    return np == 4 && !memcmp(perm, g_to_first, sizeof g_to_first);
}

/* Whether node id is a pooling op this pass lays out: one of g_pools with a 4-D float X that comes
 * from a channels-last region, and no MaxPool Indices in use. */
static bool pool_candidate(const pass_ctx *c, int id) {
    const kiln_graph *g = c->g;
    const kiln_node *n = &g->nodes[id];
    bool pool = false;
    for (size_t k = 0; k < sizeof g_pools / sizeof *g_pools; k++) pool = pool || pass_is_op(n, g_pools[k]);
    if (!pool) return false;
    const kiln_value *x = kiln_node_input(g, n, 0);
    if (!x || x->ndim != 4 || !pass_is_float(x->dtype) || !kiln_node_output(g, n, 0)) return false;
    return pass_closed(c, &id, 1, id) && from_channels_last(c, n->inputs[0]);
}

/* Lays pooling node id out channels-last: X -> Transpose(0,2,3,1) -> FusedPool(pool = its op,
 * channels_last = 1) -> Transpose(0,3,1,2) -> Y; the first Transpose cancels against X's. */
static kiln_status lay_out_pool(pass_ctx *c, int id) {
    kiln_graph *g = c->g;
    const char *pool_name = g->nodes[id].name;
    char name[300], pool[32];
    snprintf(pool, sizeof pool, "%s", g->nodes[id].op_type);
    int x = g->nodes[id].inputs[0], y = g->nodes[id].outputs[0], xl, yl;
    KILN_TRY(pass_use_kiln_domain(c));
    snprintf(name, sizeof name, "%.280s_x_nhwc", pool_name);
    KILN_TRY(add_transpose(c, x, -1, g_to_last, name, &xl));
    snprintf(name, sizeof name, "%.280s_nhwc", g->values[y].name);
    KILN_TRY(pass_new_value(c, name, &yl));
    int set[1] = {id};
    kiln_node *n;
    KILN_TRY(pass_rewrite(c, set, 1, id, KILN_FUSED_DOMAIN, "FusedPool", KILN_FUSED_OPSET, pool_name, 1, &xl, id,
                          "channels-last between Transposes", &n));
    KILN_TRY(pass_attr_string(g, n, "pool", pool));
    return finish_channels_last(c, n, id, y, yl, pool_name);
}

/* Whether value v is read only by Transpose(0,2,3,1) nodes (laid-out convolutions' inputs), at least
 * one. */
static bool read_channels_last(const pass_ctx *c, int v) {
    int ids[16], k = pass_consumers(c, v, ids, 16);
    if (k < 1 || k > 16) return false;
    for (int i = 0; i < k; i++) {
        const kiln_node *t = &c->g->nodes[ids[i]];
        int np;
        const int64_t *perm = pass_is_op(t, "Transpose") ? kiln_attr_ints(t, "perm", &np) : NULL;
        if (!perm || np != 4 || memcmp(perm, g_to_last, sizeof g_to_last)) return false;
    }
    return true;
}

/* Whether node id is a QuantizeLinear between two channels-last regions (ResNet's after its stem
 * MaxPool): a per-tensor scale and zero point (so any layout quantizes alike), a 4-D input a region
 * writes, an output only laid-out convolutions read. */
static bool quantize_candidate(const pass_ctx *c, int id) {
    const kiln_graph *g = c->g;
    const kiln_node *n = &g->nodes[id];
    if (!pass_is_op(n, "QuantizeLinear") || n->ninputs < 2 || kiln_attr_int(n, "block_size", 0) != 0) return false;
    const kiln_value *x = kiln_node_input(g, n, 0), *s = kiln_node_input(g, n, 1), *z = kiln_node_input(g, n, 2);
    if (!x || x->ndim != 4 || !s || !s->constant || kiln_tensor_numel(s->constant) != 1) return false;
    if (z && (!z->constant || kiln_tensor_numel(z->constant) != 1)) return false;
    return from_channels_last(c, n->inputs[0]) && read_channels_last(c, n->outputs[0]);
}

/* Lays QuantizeLinear id out channels-last: X -> Transpose(0,2,3,1) -> QuantizeLinear -> Transpose(0,3,1,2)
 * -> Y, both Transposes cancelling against their neighbours'. */
static kiln_status lay_out_quantize(pass_ctx *c, int id) {
    kiln_graph *g = c->g;
    const char *q_name = g->nodes[id].name;
    char name[300];
    int x = g->nodes[id].inputs[0], y = g->nodes[id].outputs[0], xl, yl;
    snprintf(name, sizeof name, "%.280s_x_nhwc", q_name);
    KILN_TRY(add_transpose(c, x, -1, g_to_last, name, &xl));
    pass_set_input(c, id, 0, xl);
    snprintf(name, sizeof name, "%.280s_nhwc", g->values[y].name);
    KILN_TRY(pass_new_value(c, name, &yl));
    kiln_node *n = &g->nodes[id];
    n->outputs[0] = yl;
    g->values[yl].producer = id;
    g->values[y].producer = -1;
    snprintf(name, sizeof name, "%.280s_y_nchw", q_name);
    int out;
    return add_transpose(c, yl, y, g_to_first, name, &out);
}

kiln_status kiln_pass_layout_channels_last(kiln_graph *g, bool *changed) {
    pass_ctx c;
    KILN_TRY(pass_begin(&c, g, "layout_channels_last"));
    kiln_status st = KILN_OK;
    int count = g->nnodes; /* the Transposes it appends are no candidates */
    for (int i = 0; i < count && st == KILN_OK; i++)
        if (candidate(g, &g->nodes[i])) st = lay_out(&c, i);
    /* then the pools whose input a laid-out convolution (or pool, earlier in node order) writes */
    for (int i = 0; i < count && st == KILN_OK; i++)
        if (pool_candidate(&c, i)) st = lay_out_pool(&c, i);
    /* then the per-tensor QuantizeLinears between such regions */
    for (int i = 0; i < count && st == KILN_OK; i++)
        if (quantize_candidate(&c, i)) st = lay_out_quantize(&c, i);
    return pass_end(&c, st, changed);
}
