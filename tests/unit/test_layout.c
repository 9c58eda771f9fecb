/* test_layout.c — unit tests of the channels-last layout (pass layout_channels_last, the
 * channels-last FusedConv's and FusedPool's shape inference and CPU kernels, the builder's
 * channels_last / fusion / unfused_ops options and their KILN_CHANNELS_LAST override) and of
 * eliminate_noops on a Transpose whose output fans out.
 *
 * Graphs are built with the IR API twice: one copy stays as built (the reference, run op by op on
 * the CPU kernels), the other goes through the passes. Checks: node and Transpose counts before and
 * after, the channels_last attribute, equal outputs on the same random inputs. The main graph is a
 * small ResNet: a stem Conv+BN+Relu, MaxPool, Conv+BN+Relu, a bottleneck block (1x1, 3x3 group conv
 * with auto_pad SAME_UPPER, 1x1 + identity residual), a downsampling block (3x3 stride 2 with
 * asymmetric pads, 3x3, residual from a 1x1 stride-2 downsample conv), GlobalAveragePool, Flatten,
 * Gemm. The bottleneck's input (a conv's output) fans out to its first conv, its residual and the
 * downsample conv. The layout also makes the MaxPool and the GlobalAveragePool channels-last
 * FusedPools (their inputs come from laid-out convolutions), so after the layout and the clean-up
 * passes only the Transposes at the region boundaries remain: 2 (into the stem, out of the
 * GlobalAveragePool into the Flatten). The pool cases put one pool of each kind between
 * convolutions, and check that a pool with its Indices in use or on the graph's input is left as
 * it is. A chain of two kiln.QConv layers (the second with the first's output as its residual) is
 * laid out with one Transpose at each end.
 *
 * Tolerance: max |laid out - reference| / max |reference| <= 1e-5 (float32: BN folding reorders a
 * few operations; the layout itself only moves data, so laid out vs not laid out must agree to it). */
#include "backends/cpu/cpu_kernels.h"
#include "builder.h"
#include "check.h"
#include "core/status.h"
#include "graph_build.h"
#include "ir/fused_ops.h"
#include "ir/graph.h"
#include "passes/passes.h"
#include "runtime/engine_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TOL_F32 1e-5
#define MAX_IO 4
#define RESNET_TRANSPOSES 2
#define RESNET_CONVS 8
#define RESNET_POOLS 2

static int cases;

/* ------------------------------------------------------------------------------ test graphs */

/* A k x k Conv from c to m channels (group g, stride s) with random constant weights and bias. pads
 * NULL: auto_pad SAME_UPPER. */
static int conv(int x, int c, int m, int k, int g, int s, const int64_t *pads) {
    int64_t wd[4] = {m, c / g, k, k}, bd[1] = {m};
    int y = node_in("", "Conv", 3, (int[]){x, constant(KILN_F32, 4, wd, NULL, -0.5, 0.5), constant(KILN_F32, 1, bd, NULL, -0.2, 0.2)});
    attr_ints("kernel_shape", 2, (int64_t[]){k, k});
    attr_ints("strides", 2, (int64_t[]){s, s});
    if (g > 1) attr_int("group", g);
    if (pads) attr_ints("pads", 4, pads);
    else attr_string("auto_pad", "SAME_UPPER");
    return y;
}

/* Conv + inference BatchNormalization (random parameters). */
static int conv_bn(int x, int c, int m, int k, int g, int s, const int64_t *pads) {
    int64_t md[1] = {m};
    int in[5] = {conv(x, c, m, k, g, s, pads), constant(KILN_F32, 1, md, NULL, 0.5, 1.5), constant(KILN_F32, 1, md, NULL, -0.5, 0.5),
                 constant(KILN_F32, 1, md, NULL, -0.5, 0.5), constant(KILN_F32, 1, md, NULL, 0.5, 1.5)};
    return node_in("", "BatchNormalization", 5, in);
}

static const int64_t P1[4] = {1, 1, 1, 1}, P0[4] = {0, 0, 0, 0}, PASYM[4] = {0, 1, 1, 0};
static const int64_t XRES[4] = {2, 3, 16, 16};

/* The small ResNet of the file comment: x [2, 3, 16, 16] -> [2, 5]. */
static void b_resnet(void) {
    begin(17);
    int x = input("x", KILN_F32, 4, XRES);
    int stem = op1("Relu", conv_bn(x, 3, 8, 3, 1, 1, P1));
    int x0 = op1("MaxPool", stem);
    attr_ints("kernel_shape", 2, (int64_t[]){2, 2});
    attr_ints("strides", 2, (int64_t[]){2, 2});
    int x1 = op1("Relu", conv_bn(x0, 8, 8, 3, 1, 1, P1));
    /* bottleneck: x1 feeds a1, the residual and the downsample conv of the next block */
    int a1 = op1("Relu", conv_bn(x1, 8, 4, 1, 1, 1, P0));
    int a2 = op1("Relu", conv_bn(a1, 4, 4, 3, 2, 1, NULL));
    int xa = op1("Relu", op2("Add", conv_bn(a2, 4, 8, 1, 1, 1, P0), x1));
    /* downsampling block */
    int b1 = op1("Relu", conv_bn(xa, 8, 16, 3, 1, 2, PASYM));
    int b2 = conv_bn(b1, 16, 16, 3, 1, 1, P1);
    int ds = conv_bn(x1, 8, 16, 1, 1, 2, P0);
    int xb = op1("Relu", op2("Add", b2, ds));
    int f = op1("Flatten", op1("GlobalAveragePool", xb));
    int64_t wd[2] = {16, 5}, bd[1] = {5};
    output(node_in("", "Gemm", 3, (int[]){f, constant(KILN_F32, 2, wd, NULL, -1, 1), constant(KILN_F32, 1, bd, NULL, -1, 1)}));
}

/* One FusedConv (kiln domain, written directly) with bias, residual and Relu; weights constant or an
 * input; rank 4 or (one_d) 3. */
static void fused_conv_graph(bool const_w, bool one_d) {
    begin(17);
    kiln_opset_import *ops = kiln_graph_alloc(G, 2 * sizeof *ops);
    ops[0] = G->opsets[0];
    ops[1] = (kiln_opset_import){KILN_FUSED_DOMAIN, KILN_FUSED_OPSET};
    G->opsets = ops;
    G->nopsets = 2;
    int nd = one_d ? 3 : 4;
    int64_t xd[4] = {2, 6, 7, 6}, wd[4] = {6, 3, 3, 2}, zd[4] = {2, 6, 4, 5}, bd[1] = {6};
    int x = input("x", KILN_F32, nd, xd), z = input("z", KILN_F32, nd, zd);
    int w = const_w ? constant(KILN_F32, nd, wd, NULL, -0.5, 0.5) : input("w", KILN_F32, nd, wd);
    int y = node_in(KILN_FUSED_DOMAIN, "FusedConv", 4, (int[]){x, w, constant(KILN_F32, 1, bd, NULL, -1, 1), z});
    attr_int("group", 2);
    attr_ints("kernel_shape", nd - 2, (int64_t[]){3, 2});
    attr_ints("strides", nd - 2, (int64_t[]){2, 1});
    attr_ints("pads", 2 * (nd - 2), one_d ? (int64_t[]){1, 1} : (int64_t[]){1, 0, 1, 0});
    attr_string("activation", "Relu");
    output(y);
}

static void b_fused_conv(void) { fused_conv_graph(true, false); }
static void b_fused_conv_input_w(void) { fused_conv_graph(false, false); }
static void b_fused_conv_1d(void) { fused_conv_graph(true, true); }

/* eliminate_noops on a Transpose read by several Transposes: every reader's perm composes to the
 * identity (all), or one reader of the NCHW value is a Relu (mixed). */
static void transpose_fanout(bool mixed) {
    begin(17);
    int64_t xd[4] = {2, 4, 5, 3};
    int64_t to_first[4] = {0, 3, 1, 2}, to_last[4] = {0, 2, 3, 1};
    int m = transpose(input("x", KILN_F32, 4, xd), 4, to_first);
    output(op1("Sigmoid", transpose(m, 4, to_last)));
    output(op1("Tanh", transpose(m, 4, to_last)));
    if (mixed) output(op1("Relu", m));
}

/* A pool between channels-last convolutions: x [2, 8, 13, 11] -> Conv 3x3 (8 -> 8) -> Relu -> pool
 * -> Conv 3x3 (8 -> 16) (a windowed pool) or Flatten (a global one). g_pool_op names the pool;
 * g_pool_variant: 0 ResNet's 3x3 stride-2 window with pads 1; 1 an asymmetric window ([3, 2],
 * strides [2, 1], pads [0, 1, 1, 0], ceil_mode, with dilations [2, 1] (MaxPool) or
 * count_include_pad (AveragePool)); 2 variant 0 with the MaxPool's Indices a graph output too; 3
 * variant 0 on the graph's input instead of the Relu (no channels-last region before it). */
static const char *g_pool_op;
static int g_pool_variant;

static void b_pool_chain(void) {
    begin(19);
    int64_t xd[4] = {2, 8, 13, 11};
    int x = input("x", KILN_F32, 4, xd);
    int a = op1("Relu", conv(x, 8, 8, 3, 1, 1, P1));
    bool global = !strncmp(g_pool_op, "Global", 6);
    int p = node_n(g_pool_op, 1, (int[]){g_pool_variant == 3 ? x : a}, g_pool_variant == 2 ? 2 : 1);
    if (g_pool_variant == 2) output(last_node()->outputs[1]);
    if (!global && g_pool_variant != 1) {
        attr_ints("kernel_shape", 2, (int64_t[]){3, 3});
        attr_ints("strides", 2, (int64_t[]){2, 2});
        attr_ints("pads", 4, P1);
    } else if (!global) {
        attr_ints("kernel_shape", 2, (int64_t[]){3, 2});
        attr_ints("strides", 2, (int64_t[]){2, 1});
        attr_ints("pads", 4, (int64_t[]){0, 1, 1, 0});
        attr_int("ceil_mode", 1);
        if (!strcmp(g_pool_op, "MaxPool")) attr_ints("dilations", 2, (int64_t[]){2, 1});
        else attr_int("count_include_pad", 1);
    }
    if (global) output(op1("Flatten", p));
    else output(op1("Relu", conv(p, 8, 16, 3, 1, 1, P1)));
    if (g_pool_variant == 3) output(a);
}

static void b_fanout_all(void) { transpose_fanout(false); }
static void b_fanout_mixed(void) { transpose_fanout(true); }

/* ------------------------------------------------------------------------------ running */

/* How many FusedConv nodes of g have channels_last = 1. */
static int count_channels_last(const kiln_graph *g) {
    int c = 0;
    for (int i = 0; i < g->nnodes; i++)
        c += !strcmp(g->nodes[i].op_type, "FusedConv") && kiln_attr_int(&g->nodes[i], "channels_last", 0) == 1;
    return c;
}

/* How many FusedPool nodes of g have channels_last = 1. */
static int count_pools_last(const kiln_graph *g) {
    int c = 0;
    for (int i = 0; i < g->nnodes; i++)
        c += !strcmp(g->nodes[i].op_type, "FusedPool") && kiln_attr_int(&g->nodes[i], "channels_last", 0) == 1;
    return c;
}

typedef kiln_status (*pass_fn)(kiln_graph *g, bool *changed);

/* Runs pass on g, then shape inference and verification; returns its changed flag. */
static bool run_pass(const char *label, kiln_graph *g, pass_fn pass) {
    bool changed = false;
    kiln_status st = pass(g, &changed);
    CHECKF(st == KILN_OK, "%s: the pass failed: %s", label, kiln_last_error());
    REQUIRE_OK(kiln_graph_infer_shapes(g));
    REQUIRE_OK(kiln_graph_verify(g));
    return changed;
}

/* The clean-up passes of the builder, to a fixed point. */
static void cleanup(const char *label, kiln_graph *g) {
    static const pass_fn passes[] = {kiln_pass_fold_constants, kiln_pass_eliminate_noops, kiln_pass_cse,
                                     kiln_pass_remove_dead};
    for (int round = 0; round < 8; round++) {
        bool any = false;
        for (size_t i = 0; i < sizeof passes / sizeof *passes; i++) any |= run_pass(label, g, passes[i]);
        if (!any) return;
    }
}

/* ------------------------------------------------------------------------------ cases */

/* The layout pass alone on one FusedConv with a residual: + 3 Transposes, W laid out, same outputs,
 * and a second run changes nothing. */
static void test_single(void) {
    cases++;
    b_fused_conv();
    kiln_graph *ref = finish();
    b_fused_conv();
    kiln_graph *g = finish();
    CHECKF(run_pass("single", g, kiln_pass_layout_channels_last), "single: changed is false");
    CHECKF(g->nnodes == 4 && count_op(g, "Transpose") == 3 && count_channels_last(g) == 1,
          "single: %d nodes, %d Transposes, %d channels-last FusedConv (expected 4, 3, 1)", g->nnodes,
          count_op(g, "Transpose"), count_channels_last(g));
    for (int i = 0; i < g->nnodes; i++) {
        if (strcmp(g->nodes[i].op_type, "FusedConv")) continue;
        const kiln_value *w = kiln_node_input(g, &g->nodes[i], 1), *y = kiln_node_output(g, &g->nodes[i], 0);
        CHECKF(w->constant && w->ndim == 4 && w->dims[1].value == 3 && w->dims[2].value == 2 && w->dims[3].value == 3,
              "single: the weights are not [M, kH, kW, C/g] = [6, 3, 2, 3]");
        CHECKF(y->ndim == 4 && y->dims[1].value == 4 && y->dims[2].value == 5 && y->dims[3].value == 6,
              "single: the inferred output is not [N, H', W', M] = [2, 4, 5, 6]");
    }
    check_same_outputs("single", ref, "reference", g, "laid-out graph", TOL_F32);
    CHECKF(!run_pass("single, second run", g, kiln_pass_layout_channels_last), "single: a second run changed the graph");
    CHECKF(g->nnodes == 4, "single: a second run left %d nodes", g->nnodes);
    kiln_graph_free(ref);
    kiln_graph_free(g);
}

/* Left alone: weights that are an input, a 1-D convolution. */
static void test_negative(const char *label, void (*build)(void)) {
    cases++;
    build();
    kiln_graph *g = finish();
    CHECKF(!run_pass(label, g, kiln_pass_layout_channels_last), "%s: changed", label);
    CHECKF(g->nnodes == 1 && count_channels_last(g) == 0, "%s: %d nodes after the pass", label, g->nnodes);
    kiln_graph_free(g);
}

/* Shape inference refuses channels_last on a 1-D convolution and values other than 0 and 1. */
static void test_infer_errors(void) {
    cases++;
    b_fused_conv_1d();
    attr_int("channels_last", 1);
    REQUIRE_OK(kiln_graph_resolve_ops(G, NULL));
    REQUIRE_OK(kiln_graph_toposort(G));
    kiln_status st = kiln_graph_infer_shapes(G);
    CHECKF(st != KILN_OK && strstr(kiln_last_error(), "channels_last needs 4-D"), "1-D channels_last: %s",
          st == KILN_OK ? "accepted" : kiln_last_error());
    kiln_graph_free(G);
    b_fused_conv();
    attr_int("channels_last", 2);
    REQUIRE_OK(kiln_graph_resolve_ops(G, NULL));
    REQUIRE_OK(kiln_graph_toposort(G));
    st = kiln_graph_infer_shapes(G);
    CHECKF(st != KILN_OK && strstr(kiln_last_error(), "must be 0 or 1"), "channels_last = 2: %s",
          st == KILN_OK ? "accepted" : kiln_last_error());
    kiln_graph_free(G);
}

/* eliminate_noops on a fanned-out Transpose: nodes before and after. */
static void test_fanout(const char *label, void (*build)(void), int before, int after) {
    cases++;
    build();
    kiln_graph *ref = finish();
    build();
    kiln_graph *g = finish();
    CHECKF(g->nnodes == before, "%s: %d nodes built, expected %d", label, g->nnodes, before);
    CHECKF(run_pass(label, g, kiln_pass_eliminate_noops), "%s: unchanged", label);
    CHECKF(g->nnodes == after, "%s: %d nodes after eliminate_noops, expected %d", label, g->nnodes, after);
    check_same_outputs(label, ref, "reference", g, "laid-out graph", TOL_F32);
    kiln_graph_free(ref);
    kiln_graph_free(g);
}

/* The ResNet through the passes the builder runs (fusions, layout, clean-up), on the interpreter. */
static void test_resnet_passes(void) {
    cases++;
    b_resnet();
    kiln_graph *ref = finish();
    b_resnet();
    kiln_graph *g = finish();
    cleanup("resnet", g);
    run_pass("resnet", g, kiln_pass_fuse_conv_bn);
    run_pass("resnet", g, kiln_pass_fuse_epilogue);
    cleanup("resnet", g);
    int convs = count_op(g, "FusedConv") + count_op(g, "Conv"), before = g->nnodes;
    CHECKF(convs == RESNET_CONVS && count_op(g, "Transpose") == 0, "resnet: %d convolutions, %d Transposes before the "
          "layout", convs, count_op(g, "Transpose"));
    CHECKF(run_pass("resnet", g, kiln_pass_layout_channels_last), "resnet: the layout changed nothing");
    /* one X and one Y Transpose per convolution, one Z Transpose per residual (2), one channel Pad
     * per convolution without groups whose input channels are not a multiple of 8 (the RGB stem), an
     * X and a Y Transpose per pool */
    int pads = count_op(g, "Pad");
    CHECKF(pads >= 1 && g->nnodes == before + 2 * RESNET_CONVS + 2 + pads + 2 * RESNET_POOLS &&
               count_channels_last(g) == RESNET_CONVS && count_pools_last(g) == RESNET_POOLS,
          "resnet: %d -> %d nodes, %d channel Pads, %d channels-last convolutions, %d pools", before, g->nnodes, pads,
          count_channels_last(g), count_pools_last(g));
    cleanup("resnet", g);
    int left = count_op(g, "Transpose");
    printf("test_layout: resnet: %d Transposes left after the clean-up (%d nodes)\n", left, g->nnodes);
    CHECKF(left == RESNET_TRANSPOSES, "resnet: %d Transposes left, expected %d", left, RESNET_TRANSPOSES);
    check_same_outputs("resnet passes", ref, "reference", g, "laid-out graph", TOL_F32);
    kiln_graph_free(ref);
    kiln_graph_free(g);
}

/* The pool graph (b_pool_chain with op and variant) through the layout and the clean-up passes:
 * pools channels-last FusedPools, transposes Transposes left, the same outputs as the graph as
 * built. */
static void test_pool(const char *op, int variant, int pools, int transposes) {
    cases++;
    char label[96];
    snprintf(label, sizeof label, "pool %s variant %d", op, variant);
    g_pool_op = op;
    g_pool_variant = variant;
    b_pool_chain();
    kiln_graph *ref = finish();
    b_pool_chain();
    kiln_graph *g = finish();
    cleanup(label, g);
    run_pass(label, g, kiln_pass_fuse_epilogue); /* the Relus into the convolutions, as the builder does */
    cleanup(label, g);
    CHECKF(run_pass(label, g, kiln_pass_layout_channels_last), "%s: the layout changed nothing", label);
    cleanup(label, g);
    int p = count_pools_last(g), t = count_op(g, "Transpose");
    printf("test_layout: %s: %d channels-last pools, %d Transposes left\n", label, p, t);
    CHECKF(p == pools && t == transposes, "%s: %d channels-last pools, %d Transposes (expected %d, %d)", label, p, t,
           pools, transposes);
    CHECKF(count_op(g, op) == 1 - pools, "%s: %d %s nodes left", label, count_op(g, op), op);
    check_same_outputs(label, ref, "reference", g, "laid-out graph", TOL_F32);
    kiln_graph_free(ref);
    kiln_graph_free(g);
}

/* FusedPool's shape inference: channels-last output shapes, and the errors (an unknown pool, a 3-D
 * channels-last X, channels_last = 2). */
/* Adds kiln.QConv (int8 output, per-tensor weight scale) reading x, weights w and optional residual r
 * (-1: none) to G with pads p on every side; returns its output. */
static int b_qconv(int x, int w, int r, int64_t p, bool relu) {
    int y = node_dn(KILN_FUSED_DOMAIN, "QConv", r >= 0 ? 4 : 2, (int[]){x, w, -1, r}, 1);
    attr_float("x_scale", 0.02f);
    kiln_attr *ws = kiln_node_add_attr(G, last_node(), "w_scale", KILN_ATTR_FLOATS);
    ws->floats = kiln_graph_alloc(G, sizeof *ws->floats);
    REQUIRE_OK(ws->floats ? KILN_OK : KILN_ERR_OUT_OF_MEMORY);
    ws->floats[0] = 0.01f;
    ws->n = 1;
    attr_int("y_dtype", KILN_I8);
    attr_float("y_scale", 0.03f);
    if (r >= 0) attr_float("r_scale", 0.03f);
    if (relu) attr_string("activation", "Relu");
    attr_ints("pads", 4, (int64_t[]){p, p, p, p});
    return y;
}

/* x [-> float Conv 1x1] -> QuantizeLinear -> QConv 3x3 (+ Relu) -> QConv 1x1 with that as its residual
 * -> DequantizeLinear: both integer layers laid out channels-last, the Transposes between them (and
 * around the QuantizeLinear after the float Conv) cancelled, 2 left: into the first convolution, out
 * of the last; the same outputs. uint8 weights without a zero point (asymmetric: not the GPU
 * kernel's) are left alone. cin: x's channels. */
static void b_qconv_chain(kiln_dtype wt, bool float_conv, int64_t cin) {
    begin(21);
    kiln_opset_import *ops = kiln_graph_alloc(G, 2 * sizeof *ops);
    REQUIRE_OK(ops ? KILN_OK : KILN_ERR_OUT_OF_MEMORY);
    ops[0] = G->opsets[0];
    ops[1] = (kiln_opset_import){KILN_FUSED_DOMAIN, KILN_FUSED_OPSET};
    G->opsets = ops;
    G->nopsets = 2;
    int64_t xd[4] = {2, cin, 6, 6}, w1[4] = {16, cin, 3, 3}, w2[4] = {16, 16, 1, 1};
    int64_t wf[4] = {cin, cin, 1, 1};
    int x = input("x", KILN_F32, 4, xd), s = scalar(0.02);
    if (float_conv) x = node_in("", "Conv", 2, (int[]){x, constant(KILN_F32, 4, wf, NULL, -0.5, 0.5)});
    int z = constant(KILN_I8, 0, NULL, (double[]){0}, 0, 0);
    int xq = node_n("QuantizeLinear", 3, (int[]){x, s, z}, 1);
    double lo = wt == KILN_U8 ? 0 : -127, hi = wt == KILN_U8 ? 255 : 127;
    int a = b_qconv(xq, constant(wt, 4, w1, NULL, lo, hi), -1, 1, true);
    int b = b_qconv(a, constant(wt, 4, w2, NULL, lo, hi), a, 0, true);
    output(node_n("DequantizeLinear", 3, (int[]){b, scalar(0.03), z}, 1));
}

static int count_qconv_last(const kiln_graph *g) {
    int c = 0;
    for (int i = 0; i < g->nnodes; i++)
        c += !strcmp(g->nodes[i].op_type, "QConv") && kiln_attr_int(&g->nodes[i], "channels_last", 0) == 1;
    return c;
}

static void test_qconv_chain(bool float_conv) {
    const char *label = float_conv ? "qconv after a float conv" : "qconv";
    cases++;
    b_qconv_chain(KILN_I8, float_conv, 8);
    kiln_graph *ref = finish();
    b_qconv_chain(KILN_I8, float_conv, 8);
    kiln_graph *g = finish();
    CHECKF(run_pass(label, g, kiln_pass_layout_channels_last), "%s: the layout changed nothing", label);
    cleanup(label, g);
    CHECKF(count_qconv_last(g) == 2 && count_op(g, "Transpose") == 2 && count_channels_last(g) == float_conv,
           "%s: %d channels-last QConv, %d Transposes, %d FusedConv (expected 2, 2, %d)", label, count_qconv_last(g),
           count_op(g, "Transpose"), count_channels_last(g), float_conv);
    /* the integer layers only move data: exact; a float conv's summation order may move a rounding by
     * one output unit */
    check_same_outputs(label, ref, "reference", g, "laid-out graph", float_conv ? 0.05 : 0.0);
    kiln_graph_free(ref);
    kiln_graph_free(g);
    if (float_conv) return;
    cases++;
    b_qconv_chain(KILN_U8, false, 8);
    g = finish();
    CHECKF(!run_pass("qconv, uint8 weights", g, kiln_pass_layout_channels_last) && count_qconv_last(g) == 0,
           "qconv, uint8 weights without a zero point: laid out");
    kiln_graph_free(g);
}

/* A QConv stem of 3 input channels: its channels-last form pads them to 8, not 16 (the GPU kernel
 * copies two taps of 8 channels per 16 bytes), its weights [16, 3, 3, 8]; the same outputs. */
static void test_qconv_stem(void) {
    const char *label = "qconv stem";
    cases++;
    b_qconv_chain(KILN_I8, false, 3);
    kiln_graph *ref = finish();
    b_qconv_chain(KILN_I8, false, 3);
    kiln_graph *g = finish();
    CHECKF(run_pass(label, g, kiln_pass_layout_channels_last), "%s: the layout changed nothing", label);
    cleanup(label, g);
    int64_t cp = -1;
    for (int i = 0; i < g->nnodes; i++) {
        const kiln_node *n = &g->nodes[i];
        const kiln_tensor *w = n->ninputs > 1 ? g->values[n->inputs[1]].constant : NULL;
        if (!strcmp(n->op_type, "QConv") && w && w->ndim == 4 && w->dims[1] == 3) cp = w->dims[3];
    }
    CHECKF(count_qconv_last(g) == 2 && cp == 8, "%s: %d channels-last QConv, stem weights' channels %lld (expected 2, 8)",
           label, count_qconv_last(g), (long long)cp);
    check_same_outputs(label, ref, "reference", g, "laid-out graph", 0.0);
    kiln_graph_free(ref);
    kiln_graph_free(g);
}

static void test_pool_infer(void) {
    cases++;
    static const struct {
        const char *pool;
        int ndim, cl;
        const char *error; /* NULL: accepted, Y [2, 4, 3, 5] (windowed) or [2, 1, 1, 5] */
    } rows[] = {
        {"MaxPool", 4, 1, NULL},
        {"AveragePool", 4, 1, NULL},
        {"GlobalAveragePool", 4, 1, NULL},
        {"GlobalMaxPool", 4, 1, NULL},
        {"LpPool", 4, 1, "pool must be"},
        {"", 4, 1, "pool must be"},
        {"MaxPool", 3, 1, "channels_last needs a 4-D X"},
        {"MaxPool", 4, 2, "must be 0 or 1"},
    };
    for (size_t r = 0; r < sizeof rows / sizeof *rows; r++) {
        begin(19);
        kiln_opset_import *ops = kiln_graph_alloc(G, 2 * sizeof *ops);
        ops[0] = G->opsets[0];
        ops[1] = (kiln_opset_import){KILN_FUSED_DOMAIN, KILN_FUSED_OPSET};
        G->opsets = ops;
        G->nopsets = 2;
        int64_t xd[4] = {2, 7, 6, 5};
        int y = node_in(KILN_FUSED_DOMAIN, "FusedPool", 1, (int[]){input("x", KILN_F32, rows[r].ndim, xd)});
        attr_string("pool", rows[r].pool);
        attr_int("channels_last", rows[r].cl);
        attr_ints("kernel_shape", rows[r].ndim - 2, (int64_t[]){3, 3});
        attr_ints("strides", rows[r].ndim - 2, (int64_t[]){2, 2});
        attr_ints("pads", 2 * (rows[r].ndim - 2), (int64_t[]){1, 1, 1, 1});
        output(y);
        REQUIRE_OK(kiln_graph_resolve_ops(G, NULL));
        REQUIRE_OK(kiln_graph_toposort(G));
        kiln_status st = kiln_graph_infer_shapes(G);
        if (rows[r].error) {
            CHECKF(st != KILN_OK && strstr(kiln_last_error(), rows[r].error), "FusedPool %s rank %d channels_last %d: %s",
                   rows[r].pool, rows[r].ndim, rows[r].cl, st == KILN_OK ? "accepted" : kiln_last_error());
        } else {
            const kiln_value *v = &G->values[y];
            bool global = !strncmp(rows[r].pool, "Global", 6);
            int64_t want[4] = {2, global ? 1 : 4, global ? 1 : 3, 5};
            bool same = st == KILN_OK && v->ndim == 4;
            for (int d = 0; same && d < 4; d++) same = v->dims[d].sym == 0 && v->dims[d].value == want[d];
            CHECKF(same, "FusedPool %s channels-last: %s", rows[r].pool,
                   st == KILN_OK ? "Y is not [N, H', W', C]" : kiln_last_error());
        }
        kiln_graph_free(G);
    }
}

/* Counts the layout pass's verbose lines and its "skipped" line. */
static void count_layout(kiln_log_level level, const char *msg, void *user) {
    int *seen = user;
    if (level != KILN_LOG_VERBOSE) return;
    seen[0] += strstr(msg, "layout_channels_last: ") && strstr(msg, "-> FusedConv ") && strstr(msg, "channels-last");
    seen[1] += strstr(msg, "layout_channels_last skipped") != NULL;
}

/* The options of one test_build. */
typedef struct layout_options {
    kiln_switch channels_last, fusion;
    const char *unfused_ops;
    bool mark_all;
} layout_options;

/* Builds the ResNet for the cpu with KILN_CHANNELS_LAST = env (NULL: unset) and the options lo; checks
 * the Transposes and channels-last convolutions of the engine, the layout pass's skip lines in the
 * log, and the engine's outputs against the reference. */
static void test_build(const char *env, layout_options lo, int transposes, int laid_out, int skips) {
    cases++;
    bool mark_all = lo.mark_all;
    char label[160];
    snprintf(label, sizeof label, "build KILN_CHANNELS_LAST=%s channels_last=%d fusion=%d unfused=%s%s",
             env ? env : "(unset)", (int)lo.channels_last, (int)lo.fusion, lo.unfused_ops ? lo.unfused_ops : "-",
             mark_all ? " mark-all" : "");
    b_resnet();
    kiln_graph *ref = finish();
    b_resnet();
    if (env) setenv("KILN_CHANNELS_LAST", env, 1);
    else unsetenv("KILN_CHANNELS_LAST");
    int seen[2] = {0, 0};
    kiln_log_set_callback(count_layout, seen);
    kiln_build_options opts = {.target = "cpu", .verbose = true, .mark_all_outputs = mark_all,
                               .channels_last = lo.channels_last, .fusion = lo.fusion, .unfused_ops = lo.unfused_ops};
    kiln_engine *e = NULL;
    kiln_status st = kiln_build_graph(G, "test_layout", &opts, &e);
    kiln_log_set_callback(NULL, NULL);
    unsetenv("KILN_CHANNELS_LAST");
    CHECKF(st == KILN_OK, "%s: build failed: %s", label, kiln_last_error());
    if (st != KILN_OK) {
        kiln_graph_free(ref);
        return;
    }
    int t = count_op(e->g, "Transpose"), cl = count_channels_last(e->g);
    CHECKF(t == transposes && cl == laid_out, "%s: %d Transposes, %d channels-last convolutions (expected %d, %d)", label,
          t, cl, transposes, laid_out);
    CHECKF(seen[0] == laid_out, "%s: the verbose log reports %d layouts", label, seen[0]);
    CHECKF(seen[1] == skips, "%s: the verbose log reports %d skips", label, seen[1]);
    kiln_tensor in[MAX_IO], out_ref[MAX_IO] = {{0}};
    make_inputs(ref, in);
    REQUIRE_OK(run_graph(ref, in, out_ref));
    kiln_context *ctx;
    REQUIRE_OK(kiln_context_create(e, &ctx));
    for (int k = 0; k < ref->ninputs; k++)
        REQUIRE_OK(kiln_context_set_input(ctx, ref->values[ref->inputs[k]].name, in[k].dtype, in[k].ndim, in[k].dims,
                                          in[k].data));
    REQUIRE_OK(kiln_context_run(ctx));
    for (int k = 0; k < ref->noutputs; k++) {
        int v = kiln_graph_find_value(e->g, ref->values[ref->outputs[k]].name), at = -1;
        for (int j = 0; j < e->g->noutputs; j++) /* with mark_all the model's output is one of many */
            if (e->g->outputs[j] == v) at = j;
        CHECKF(at >= 0, "%s: the engine has no output '%s'", label, ref->values[ref->outputs[k]].name);
        if (at < 0) continue;
        kiln_tensor_desc d;
        const void *data;
        REQUIRE_OK(kiln_context_output(ctx, at, &d, &data));
        kiln_tensor got;
        kiln_tensor_view(&got, d.dtype, d.ndim, d.dims, (void *)data);
        double err = rel_error(&got, &out_ref[k]);
        CHECKF(err <= TOL_F32, "%s: output %d differs from the reference by %.3g", label, k, err);
        kiln_tensor_release(&out_ref[k]);
    }
    for (int k = 0; k < ref->ninputs; k++) kiln_tensor_release(&in[k]);
    kiln_context_free(ctx);
    kiln_engine_free(e);
    kiln_graph_free(ref);
}

int main(void) {
    if (getenv("KILN_TEST_VERBOSE")) kiln_log_set_level(KILN_LOG_VERBOSE);
    test_single();
    test_negative("weights are an input", b_fused_conv_input_w);
    test_negative("1-D convolution", b_fused_conv_1d);
    test_infer_errors();
    test_fanout("transpose fan-out, all readers inverse", b_fanout_all, 5, 2);
    test_fanout("transpose fan-out, mixed readers", b_fanout_mixed, 6, 4);
    test_resnet_passes();
    test_pool("MaxPool", 0, 1, 2);
    test_pool("MaxPool", 1, 1, 2);
    test_pool("AveragePool", 0, 1, 2);
    test_pool("AveragePool", 1, 1, 2);
    test_pool("GlobalAveragePool", 0, 1, 2);
    test_pool("GlobalMaxPool", 0, 1, 2);
    test_pool("MaxPool", 2, 0, 4);
    test_pool("MaxPool", 3, 0, 4);
    test_pool_infer();
    test_qconv_chain(false);
    test_qconv_chain(true);
    test_qconv_stem();
    const kiln_switch AUTO = KILN_SWITCH_AUTO, ON = KILN_SWITCH_ON, OFF = KILN_SWITCH_OFF;
    test_build(NULL, (layout_options){AUTO, AUTO, NULL, false}, 0, 0, 0);
    test_build("0", (layout_options){AUTO, AUTO, NULL, false}, 0, 0, 0);
    test_build("1", (layout_options){AUTO, AUTO, NULL, false}, RESNET_TRANSPOSES, RESNET_CONVS, 0);
    test_build("1", (layout_options){AUTO, AUTO, NULL, true}, 0, 0, 1);
    /* the option, which the environment overrides; fusion off, or FusedPool left out, rule it out */
    test_build(NULL, (layout_options){ON, AUTO, NULL, false}, RESNET_TRANSPOSES, RESNET_CONVS, 0);
    test_build("0", (layout_options){ON, AUTO, NULL, false}, 0, 0, 0);
    test_build(NULL, (layout_options){ON, OFF, NULL, false}, 0, 0, 1);
    test_build(NULL, (layout_options){ON, AUTO, "FusedGemm, FusedPool", false}, 0, 0, 1);
    if (failures) {
        fprintf(stderr, "test_layout: %d check(s) failed\n", failures);
        return 1;
    }
    printf("test_layout: %d cases passed\n", cases);
    return 0;
}
