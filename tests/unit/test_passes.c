/* test_passes.c — unit tests of the graph passes (src/passes/). For every pass, small graphs are
 * built with the IR API twice: one copy stays as built, the other goes through the pass. The test
 * checks the node counts before and after and the ops that must appear, then runs both copies on the
 * CPU kernels (a plain interpreter in node order) on the same random inputs and requires equal
 * outputs. Negative cases (an intermediate value read twice, non-constant parameters, a graph output
 * in the middle, a wrong axis, a wrong constant, broadcasting) must leave the graph unchanged. A last
 * case builds an engine with fused ops through the whole pipeline, saves, loads and runs it.
 *
 * Tolerance: max |fused - unfused| / max |unfused| <= 1e-5 for float32 (the fused kernels reorder a
 * few float operations: scale inside the sgemm, folded BN weights, double-accumulated statistics);
 * 2e-3 for the float16 RMSNorm case (the unfused graph rounds to float16 between the normalization
 * and the gamma product, the fused op once: up to two float16 ulps, 2^-9). */
#include "backends/cpu/cpu_kernels.h"
#include "builder.h"
#include "check.h"
#include "core/half.h"
#include "core/status.h"
#include "graph_build.h"
#include "ir/fused_ops.h"
#include "ir/graph.h"
#include "ir/op_schema.h"
#include "passes/passes.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define TOL_F32 1e-5
#define TOL_F16_RMS 2e-3
#define MAX_IO 8 /* inputs and outputs of a test graph */

static int cases;

typedef void (*build_fn)(void);
typedef kiln_status (*pass_fn)(kiln_graph *g, bool *changed);

/* Builds the graph twice, runs pass on one copy and checks: node counts before/after, the op
 * expect_op present (when given), the pass's changed flag, and equal outputs within tol. Returns the
 * optimized graph for further checks (caller frees). */
static kiln_graph *check_pass_tol(const char *label, build_fn build, pass_fn pass, int before, int after,
                                  const char *expect_op, double tol) {
    cases++;
    build();
    kiln_graph *ref = finish();
    build();
    kiln_graph *opt = finish();
    CHECKF(opt->nnodes == before, "%s: %d nodes built, expected %d", label, opt->nnodes, before);
    bool changed = false;
    kiln_status st = pass(opt, &changed);
    CHECKF(st == KILN_OK, "%s: the pass failed: %s", label, kiln_last_error());
    if (st == KILN_OK) {
        REQUIRE_OK(kiln_graph_infer_shapes(opt));
        REQUIRE_OK(kiln_graph_verify(opt));
    }
    CHECKF(opt->nnodes == after, "%s: %d nodes after the pass, expected %d", label, opt->nnodes, after);
    CHECKF(changed == (before != after || expect_op != NULL), "%s: changed = %d", label, changed);
    if (expect_op) CHECKF(count_op(opt, expect_op) >= 1, "%s: no %s node after the pass", label, expect_op);
    check_same_outputs(label, ref, "unfused graph", opt, "optimized graph", tol);
    kiln_graph_free(ref);
    return opt;
}

static void check_pass(const char *label, build_fn build, pass_fn pass, int before, int after, const char *expect_op) {
    kiln_graph_free(check_pass_tol(label, build, pass, before, after, expect_op, TOL_F32));
}

static const int64_t D234[3] = {2, 3, 4};

/* ------------------------------------------------------------------------------ eliminate_noops */

static void b_noop_chain(void) {
    begin(17);
    int x = input("x", KILN_F32, 3, D234);
    int y = op1("Identity", x);
    y = op1("Dropout", y);
    y = op1("Cast", y);
    attr_int("to", KILN_F32);
    y = reshape(y, 3, D234);
    int64_t id[3] = {0, 1, 2};
    y = transpose(y, 3, id);
    y = op1("Squeeze", op2("Unsqueeze", y, ints(1, (int64_t[]){0})));
    output(op1("Relu", y));
}

static void b_transpose_cancel(void) {
    begin(17);
    int x = input("x", KILN_F32, 3, D234);
    int64_t p[3] = {1, 2, 0}, q[3] = {2, 0, 1};
    output(op1("Relu", transpose(transpose(x, 3, p), 3, q)));
}

static void b_transpose_merge(void) {
    begin(17);
    int x = input("x", KILN_F32, 3, D234);
    int64_t p[3] = {1, 0, 2}, q[3] = {0, 2, 1};
    output(op1("Relu", transpose(transpose(x, 3, p), 3, q)));
}

static void b_reshape_chain(void) {
    begin(17);
    int x = input("x", KILN_F32, 3, D234);
    int y = reshape(reshape(x, 2, (int64_t[]){6, 4}), 2, (int64_t[]){4, -1});
    output(op1("Relu", y));
}

static void b_identity_to_output(void) {
    begin(17);
    int x = input("x", KILN_F32, 3, D234);
    output(op1("Identity", op1("Relu", x)));
}

/* negative: a real Cast, a real Reshape, a Reshape chain whose 0 copies a dim, a Dropout whose mask
 * is read, and an Identity from a graph input to a graph output */
static void b_noop_negative(void) {
    begin(17);
    int x = input("x", KILN_F32, 3, D234);
    int c = op1("Cast", x);
    attr_int("to", KILN_F64);
    output(c);
    output(reshape(reshape(x, 2, (int64_t[]){6, 4}), 3, (int64_t[]){0, 2, 2}));
    int in[1] = {x};
    int d = node_n("Dropout", 1, in, 2);
    output(d);
    output(d + 1);
    output(op1("Identity", x));
}

/* ------------------------------------------------------------------------------ cse */

static void b_cse(void) {
    begin(17);
    int x = input("x", KILN_F32, 3, D234);
    int a = op1("Relu", x), b = op1("Relu", x);
    int64_t p[3] = {0, 1, 2};
    int t1 = transpose(a, 3, p), t2 = transpose(b, 3, p);
    /* equal constants in different values */
    double two = 2.0;
    int m1 = op2("Mul", x, constant(KILN_F32, 0, NULL, &two, 0, 0)), m2 = op2("Mul", x, constant(KILN_F32, 0, NULL, &two, 0, 0));
    /* tensor attributes compared by value */
    int shape = ints(3, D234);
    int c1 = op1("ConstantOfShape", shape);
    attr_tensor_f32("value", 2.5f);
    int c2 = op1("ConstantOfShape", shape);
    attr_tensor_f32("value", 2.5f);
    output(op2("Add", op2("Add", t1, t2), op2("Add", op2("Add", m1, m2), op2("Add", c1, c2))));
}

/* negative: same op and input, different attributes (perm; tensor value) */
static void b_cse_negative(void) {
    begin(17);
    int x = input("x", KILN_F32, 3, D234);
    int64_t p[3] = {0, 1, 2}, q[3] = {0, 1, 2};
    int t1 = transpose(x, 3, p);
    attr_int("unused", 1);
    int t2 = transpose(x, 3, q);
    attr_int("unused", 2);
    int shape = ints(3, D234);
    int c1 = op1("ConstantOfShape", shape);
    attr_tensor_f32("value", 2.5f);
    int c2 = op1("ConstantOfShape", shape);
    attr_tensor_f32("value", 3.5f);
    output(op2("Add", op2("Add", t1, t2), op2("Add", c1, c2)));
}

/* ------------------------------------------------------------------------------ fuse_conv_bn */

static const int64_t XCONV[4] = {2, 3, 6, 6}, WCONV[4] = {4, 3, 3, 3}, M4[1] = {4};

static int conv(int x, int w, int b) {
    int in[3] = {x, w, b};
    int y = node_n("Conv", b >= 0 ? 3 : 2, in, 1);
    attr_ints("kernel_shape", 2, (int64_t[]){3, 3});
    attr_ints("pads", 4, (int64_t[]){1, 1, 1, 1});
    return y;
}

/* BatchNormalization with the given parameter values (-1: a random constant). */
static int batchnorm(int x, int scale, int bias, int mean, int var) {
    int in[5] = {x, scale >= 0 ? scale : constant(KILN_F32, 1, M4, NULL, 0.5, 1.5),
                 bias >= 0 ? bias : constant(KILN_F32, 1, M4, NULL, -0.5, 0.5),
                 mean >= 0 ? mean : constant(KILN_F32, 1, M4, NULL, -0.5, 0.5),
                 var >= 0 ? var : constant(KILN_F32, 1, M4, NULL, 0.5, 1.5)};
    int y = node_n("BatchNormalization", 5, in, 1);
    attr_float("epsilon", 1e-3f);
    return y;
}

static void b_conv_bn(void) {
    begin(17);
    int x = input("x", KILN_F32, 4, XCONV);
    int w = constant(KILN_F32, 4, WCONV, NULL, -0.5, 0.5);
    int y = batchnorm(conv(x, w, constant(KILN_F32, 1, M4, NULL, -1, 1)), -1, -1, -1, -1);
    /* a second Conv shares the weights: they must not change under it */
    output(y);
    output(conv(x, w, -1));
}

static void b_conv_bn_nobias(void) {
    begin(17);
    int x = input("x", KILN_F32, 4, XCONV);
    output(batchnorm(conv(x, constant(KILN_F32, 4, WCONV, NULL, -0.5, 0.5), -1), -1, -1, -1, -1));
}

/* negatives: a BN parameter that is an input; a Conv output read twice; a Conv output that is a graph output */
static void b_conv_bn_param_input(void) {
    begin(17);
    int x = input("x", KILN_F32, 4, XCONV), mean = input("mean", KILN_F32, 1, M4);
    output(batchnorm(conv(x, constant(KILN_F32, 4, WCONV, NULL, -0.5, 0.5), -1), -1, -1, mean, -1));
}

static void b_conv_bn_shared(void) {
    begin(17);
    int x = input("x", KILN_F32, 4, XCONV);
    int c = conv(x, constant(KILN_F32, 4, WCONV, NULL, -0.5, 0.5), -1);
    output(op2("Add", batchnorm(c, -1, -1, -1, -1), op1("Relu", c)));
}

static void b_conv_bn_output(void) {
    begin(17);
    int x = input("x", KILN_F32, 4, XCONV);
    int c = conv(x, constant(KILN_F32, 4, WCONV, NULL, -0.5, 0.5), -1);
    output(c);
    output(batchnorm(c, -1, -1, -1, -1));
}

/* ------------------------------------------------------------------------------ fuse_gelu */

/* BERT's erf form: ((x * (1 + erf(x / sqrt2))) * 0.5), or (x * 0.5) * (1 + erf(x * 1/sqrt2)). */
static void b_gelu_erf(void) {
    begin(17);
    int x = op1("Relu", input("x", KILN_F32, 3, D234)); /* x itself is a node output */
    int e = op1("Erf", op2("Div", x, scalar(1.4142135381698608)));
    output(op2("Mul", op2("Mul", x, op2("Add", e, scalar(1.0))), scalar(0.5)));
}

static void b_gelu_erf_variant(void) {
    begin(17);
    int x = input("x", KILN_F32, 3, D234);
    int e = op1("Erf", op2("Mul", scalar(0.7071067811865476), x));
    output(op2("Mul", op2("Mul", scalar(0.5), x), op2("Add", scalar(1.0), e)));
}

/* GPT-2's tanh form as the dynamo exporter groups it; cube as Pow or as x * (x * x). */
static void gelu_tanh(bool pow_cube) {
    begin(17);
    int x = input("x", KILN_F32, 3, D234);
    int half = op2("Mul", x, scalar(0.5));
    int cube = pow_cube ? op2("Pow", x, scalar(3.0)) : op2("Mul", x, op2("Mul", x, x));
    int inner = op2("Add", x, op2("Mul", cube, scalar(0.044715)));
    int t = op1("Tanh", op2("Mul", inner, scalar(0.7978845608028654)));
    output(op2("Mul", half, op2("Add", t, scalar(1.0))));
}
static void b_gelu_tanh_pow(void) { gelu_tanh(true); }
static void b_gelu_tanh_mul(void) { gelu_tanh(false); }

/* negatives: 0.6 instead of 0.5; the erf output also a graph output */
static void b_gelu_wrong_const(void) {
    begin(17);
    int x = input("x", KILN_F32, 3, D234);
    int e = op1("Erf", op2("Div", x, scalar(1.4142135381698608)));
    output(op2("Mul", op2("Mul", x, op2("Add", e, scalar(1.0))), scalar(0.6)));
}

static void b_gelu_shared(void) {
    begin(17);
    int x = input("x", KILN_F32, 3, D234);
    int e = op1("Erf", op2("Div", x, scalar(1.4142135381698608)));
    output(op2("Mul", op2("Mul", x, op2("Add", e, scalar(1.0))), scalar(0.5)));
    output(e);
}

/* ------------------------------------------------------------------------------ fuse_norm */

static int reduce_mean(int x, int axis, int opset) {
    int y = opset >= 18 ? op2("ReduceMean", x, ints(1, (int64_t[]){axis})) : op1("ReduceMean", x);
    if (opset < 18) attr_ints("axes", 1, (int64_t[]){axis});
    return y;
}

/* The decomposed LayerNorm of older exports (axes as attribute at opset 17, as input at 18);
 * variant: d*d and Mul by Reciprocal. mean_axis/var_axis let negatives reduce the wrong axis. */
static void layernorm(int opset, bool variant, int mean_axis, int var_axis, bool shared) {
    begin(opset);
    int x = input("x", KILN_F32, 3, D234);
    int d = op2("Sub", x, reduce_mean(x, mean_axis, opset));
    int var = reduce_mean(variant ? op2("Mul", d, d) : op2("Pow", d, scalar(2.0)), var_axis, opset);
    int s = op1("Sqrt", op2("Add", var, scalar(1e-5)));
    int nrm = variant ? op2("Mul", d, op1("Reciprocal", s)) : op2("Div", d, s);
    int64_t h[1] = {4};
    output(op2("Add", op2("Mul", nrm, constant(KILN_F32, 1, h, NULL, 0.5, 1.5)), constant(KILN_F32, 1, h, NULL, -1, 1)));
    if (shared) output(var);
}
static void b_layernorm17(void) { layernorm(17, false, -1, -1, false); }
static void b_layernorm18_variant(void) { layernorm(18, true, 2, -1, false); }
static void b_layernorm_wrong_axis(void) { layernorm(17, false, -1, 1, false); }
static void b_layernorm_shared(void) { layernorm(17, false, -1, -1, true); }

/* Llama's RMSNorm: w * (x * 1 / sqrt(mean(x^2) + eps)); with_cast: x float16, Cast to float32 and back */
static void rmsnorm(bool with_cast) {
    begin(18);
    int x0 = input("x", with_cast ? KILN_F16 : KILN_F32, 3, D234), x = x0;
    if (with_cast) {
        x = op1("Cast", x0);
        attr_int("to", KILN_F32);
    }
    int ms = reduce_mean(op2("Pow", x, scalar(2.0)), -1, 18);
    int n = op2("Mul", x, op1("Reciprocal", op1("Sqrt", op2("Add", ms, scalar(1e-6)))));
    if (with_cast) {
        n = op1("Cast", n);
        attr_int("to", KILN_F16);
    }
    int64_t h[1] = {4};
    output(op2("Mul", constant(with_cast ? KILN_F16 : KILN_F32, 1, h, NULL, 0.5, 1.5), n));
}
static void b_rmsnorm(void) { rmsnorm(false); }
static void b_rmsnorm_cast(void) { rmsnorm(true); }

/* negative: keepdims = 0 cannot broadcast back the way the pattern needs */
static void b_rmsnorm_keepdims0(void) {
    begin(17);
    int x = input("x", KILN_F32, 3, D234);
    int ms = reduce_mean(op2("Pow", x, scalar(2.0)), -1, 17);
    attr_int("keepdims", 0);
    int r = op1("Reciprocal", op1("Sqrt", op2("Add", ms, scalar(1e-6))));
    output(op2("Mul", x, op2("Unsqueeze", r, ints(1, (int64_t[]){-1}))));
}

/* ------------------------------------------------------------------------------ fuse_attention */

#define AB 2
#define AS 5
#define AH 4
#define AD 8

/* [B, S, H*D] -> Reshape [B, S, H, D] -> Transpose perm */
static int split_heads(int x, int heads, const int64_t *perm) {
    return transpose(reshape(x, 4, (int64_t[]){AB, AS, heads, AD}), 4, perm);
}

/* BERT-style MHA: K^T made by perm [0,2,3,1], Div scale, additive mask [B,1,1,S]; variants: the
 * softmax on another axis (negative), the scores read twice (negative). */
static void mha(int softmax_axis, bool shared_scores) {
    begin(17);
    int64_t xd[3] = {AB, AS, AH * AD}, md[4] = {AB, 1, 1, AS};
    int q = input("q", KILN_F32, 3, xd), k = input("k", KILN_F32, 3, xd), v = input("v", KILN_F32, 3, xd);
    int mask = input("mask", KILN_F32, 4, md);
    int qh = split_heads(q, AH, (int64_t[]){0, 2, 1, 3}), kt = split_heads(k, AH, (int64_t[]){0, 2, 3, 1});
    int vh = split_heads(v, AH, (int64_t[]){0, 2, 1, 3});
    int s = op2("Div", op2("MatMul", qh, kt), scalar(sqrt((double)AD)));
    int p = op1("Softmax", op2("Add", s, mask));
    attr_int("axis", softmax_axis);
    int o = transpose(op2("MatMul", p, vh), 4, (int64_t[]){0, 2, 1, 3});
    output(reshape(o, 3, xd));
    if (shared_scores) output(s);
}
/* GPT-2-style: one QKV projection [B, S, 3 H D] split into Q, K and V, each -> [B, S, H, D] ->
 * Transpose; with out_transposed the output goes back to [B, S, H D] (the packed layout applies),
 * without it the output is read as [B, H, S, D] (layout 0 stays, with its Transposes). */
static void mha_packed(bool out_transposed) {
    begin(17);
    int64_t xd[3] = {AB, AS, 3 * AH * AD}, od[3] = {AB, AS, AH * AD}, md[4] = {AB, 1, 1, AS};
    int x = input("qkv", KILN_F32, 3, xd), mask = input("mask", KILN_F32, 4, md);
    int sin[2] = {x, ints(3, (int64_t[]){AH * AD, AH * AD, AH * AD})};
    node_n("Split", 2, sin, 3);
    attr_int("axis", -1);
    int parts[3] = {last_node()->outputs[0], last_node()->outputs[1], last_node()->outputs[2]};
    int qh = split_heads(parts[0], AH, (int64_t[]){0, 2, 1, 3}), kt = split_heads(parts[1], AH, (int64_t[]){0, 2, 3, 1});
    int vh = split_heads(parts[2], AH, (int64_t[]){0, 2, 1, 3});
    int s = op2("Mul", op2("MatMul", qh, kt), scalar(1.0 / sqrt((double)AD)));
    int p = op1("Softmax", op2("Add", s, mask));
    attr_int("axis", -1);
    int o = op2("MatMul", p, vh);
    output(out_transposed ? reshape(transpose(o, 4, (int64_t[]){0, 2, 1, 3}), 3, od) : o);
}
static void b_mha_packed(void) { mha_packed(true); }

/* BERT-style: Q, K and V are three projections X [B, S, 16] x W [16, H D] of one input */
static void b_mha_projections(void) {
    begin(17);
    int64_t xd[3] = {AB, AS, 16}, wd[2] = {16, AH * AD}, od[3] = {AB, AS, AH * AD}, md[4] = {AB, 1, 1, AS};
    int x = input("x", KILN_F32, 3, xd), mask = input("mask", KILN_F32, 4, md);
    int pq = op2("MatMul", x, constant(KILN_F32, 2, wd, NULL, -0.5, 0.5));
    int pk = op2("MatMul", x, constant(KILN_F32, 2, wd, NULL, -0.4, 0.6));
    int pv = op2("MatMul", x, constant(KILN_F32, 2, wd, NULL, -0.6, 0.4));
    int qh = split_heads(pq, AH, (int64_t[]){0, 2, 1, 3}), kt = split_heads(pk, AH, (int64_t[]){0, 2, 3, 1});
    int vh = split_heads(pv, AH, (int64_t[]){0, 2, 1, 3});
    int s = op2("Div", op2("MatMul", qh, kt), scalar(sqrt((double)AD)));
    int p = op1("Softmax", op2("Add", s, mask));
    attr_int("axis", -1);
    output(reshape(transpose(op2("MatMul", p, vh), 4, (int64_t[]){0, 2, 1, 3}), 3, od));
}
static void b_mha_heads_out(void) { mha_packed(false); }
static void b_mha(void) { mha(-1, false); }
static void b_mha_axis(void) { mha(2, false); }
static void b_mha_shared(void) { mha(-1, true); }

/* Llama-style GQA: K, V [B, Hkv, S, D] -> Unsqueeze(2) -> Expand [B, Hkv, r, S, D] -> Reshape
 * [B, Hkv*r, S, D]; K^T by perm [0,1,3,2]; Mul scale; additive mask [1,1,S,S]. */
static void b_gqa(void) {
    begin(18);
    int64_t qd[4] = {AB, AH, AS, AD}, kd[4] = {AB, 2, AS, AD}, md[4] = {1, 1, AS, AS};
    int q = input("q", KILN_F32, 4, qd), k = input("k", KILN_F32, 4, kd), v = input("v", KILN_F32, 4, kd);
    int mask = input("mask", KILN_F32, 4, md);
    int64_t ex[5] = {AB, 2, 2, AS, AD};
    int kx = reshape(op2("Expand", op2("Unsqueeze", k, ints(1, (int64_t[]){2})), ints(5, ex)), 4, qd);
    int vx = reshape(op2("Expand", op2("Unsqueeze", v, ints(1, (int64_t[]){2})), ints(5, ex)), 4, qd);
    int s = op2("Mul", op2("MatMul", q, transpose(kx, 4, (int64_t[]){0, 1, 3, 2})), scalar(1.0 / sqrt((double)AD)));
    int p = op1("Softmax", op2("Add", s, mask));
    attr_int("axis", -1);
    output(op2("MatMul", p, vx));
}

/* a constant causal bool mask through Where, and Q and K^T pre-scaled by sqrt(scale) each */
static void b_causal_prescaled(void) {
    begin(17);
    int64_t qd[4] = {AB, AH, AS, AD}, kd[4] = {AB, AH, AD, AS}, cd[2] = {AS, AS};
    int q = input("q", KILN_F32, 4, qd), kt = input("kt", KILN_F32, 4, kd), v = input("v", KILN_F32, 4, qd);
    double tril[AS * AS];
    for (int i = 0; i < AS; i++)
        for (int j = 0; j < AS; j++) tril[i * AS + j] = j <= i;
    int cond = constant(KILN_BOOL, 2, cd, tril, 0, 0);
    double c = pow((double)AD, -0.25);
    int s = op2("MatMul", op2("Mul", q, scalar(c)), op2("Mul", kt, scalar(c)));
    int in[3] = {cond, s, scalar(-INFINITY)};
    int w = node_n("Where", 3, in, 1);
    int p = op1("Softmax", w);
    attr_int("axis", 3);
    output(op2("MatMul", p, v));
}

/* ------------------------------------------------------------------------------ align_matmul */

/* A [2, 3, 16] x W [16, n], W constant (an LM head when n is odd) */
static void matmul_const(int64_t n) {
    begin(17);
    int64_t ad[3] = {2, 3, 16}, wd[2] = {16, n};
    output(op2("MatMul", input("a", KILN_F32, 3, ad), constant(KILN_F32, 2, wd, NULL, -1, 1)));
}
static void b_matmul_n100(void) { matmul_const(100); }
static void b_matmul_n96(void) { matmul_const(96); }
static void b_matmul_n20(void) { matmul_const(20); }

/* ------------------------------------------------------------------------------ fuse_epilogue */

/* Conv + Add(bias [1, M, 1, 1]) + Add(residual) + Relu */
static void b_conv_epilogue(void) {
    begin(17);
    int64_t od[4] = {2, 4, 6, 6}, bd[4] = {1, 4, 1, 1};
    int x = input("x", KILN_F32, 4, XCONV), z = input("z", KILN_F32, 4, od);
    int c = conv(x, constant(KILN_F32, 4, WCONV, NULL, -0.5, 0.5), -1);
    output(op1("Relu", op2("Add", z, op2("Add", c, constant(KILN_F32, 4, bd, NULL, -1, 1)))));
}

/* Conv (with bias) + Clip(0, 6) = ReLU6 */
static void b_conv_relu6(void) {
    begin(17);
    int x = input("x", KILN_F32, 4, XCONV);
    int c = conv(x, constant(KILN_F32, 4, WCONV, NULL, -0.5, 0.5), constant(KILN_F32, 1, M4, NULL, -1, 1));
    int in[3] = {c, scalar(0.0), scalar(0.1)};
    output(node_n("Clip", 3, in, 1));
}

/* Gemm without C + Add(bias [N]): becomes a plain Gemm with C */
static void b_gemm_bias(void) {
    begin(17);
    int64_t ad[2] = {3, 5}, bd[2] = {6, 5}, nd[1] = {6};
    int a = input("a", KILN_F32, 2, ad);
    int y = op2("Gemm", a, constant(KILN_F32, 2, bd, NULL, -1, 1));
    attr_int("transB", 1);
    attr_float("beta", 0.25f); /* irrelevant without C; must become 1 with the folded bias */
    output(op2("Add", y, constant(KILN_F32, 1, nd, NULL, -1, 1)));
}

/* Gemm + Add(residual) + HardSwish */
static void b_gemm_residual(void) {
    begin(17);
    int64_t ad[2] = {3, 5}, bd[2] = {5, 6}, od[2] = {3, 6};
    int a = input("a", KILN_F32, 2, ad), z = input("z", KILN_F32, 2, od);
    int y = op2("Gemm", a, constant(KILN_F32, 2, bd, NULL, -1, 1));
    attr_float("alpha", 2.0f);
    output(op1("HardSwish", op2("Add", y, z)));
}

/* MatMul + Add(bias) + Gelu(tanh), rank 3 */
static void b_matmul_gelu(void) {
    begin(20);
    int64_t wd[2] = {4, 7}, nd[1] = {7};
    int x = input("x", KILN_F32, 3, D234);
    int y = op2("Add", constant(KILN_F32, 1, nd, NULL, -1, 1), op2("MatMul", x, constant(KILN_F32, 2, wd, NULL, -1, 1)));
    output(op1("Gelu", y));
    attr_string("approximate", "tanh");
}

/* MatMul + SiLU (x * Sigmoid(x)) */
static void b_matmul_silu(void) {
    begin(17);
    int64_t wd[2] = {4, 7};
    int x = input("x", KILN_F32, 3, D234);
    int y = op2("MatMul", x, constant(KILN_F32, 2, wd, NULL, -1, 1));
    output(op2("Mul", op1("Sigmoid", y), y));
}

/* negatives: the Conv output read twice; a residual that broadcasts (an input [1, M, 1, 1]); Clip
 * with a bound that is an input */
static void b_epilogue_shared(void) {
    begin(17);
    int x = input("x", KILN_F32, 4, XCONV);
    int c = conv(x, constant(KILN_F32, 4, WCONV, NULL, -0.5, 0.5), -1);
    output(op1("Relu", c));
    output(op1("Sigmoid", c));
}

static void b_epilogue_broadcast(void) {
    begin(17);
    int64_t zd[4] = {1, 4, 1, 1};
    int x = input("x", KILN_F32, 4, XCONV), z = input("z", KILN_F32, 4, zd), hi = input("hi", KILN_F32, 0, NULL);
    int c = conv(x, constant(KILN_F32, 4, WCONV, NULL, -0.5, 0.5), -1);
    int in[3] = {op2("Add", c, z), scalar(0.0), hi};
    output(node_n("Clip", 3, in, 1));
}

/* Epilogues behind a view, as in GPT-2 exports: Gemm(a [6, 5], W [5, 8], C [8]) [6, 8] -> Reshape
 * [2, 3, 8] -> epilogue. */
static const int64_t VA[2] = {6, 5}, VW[2] = {5, 8}, VN[1] = {8}, VO[3] = {2, 3, 8};

static int view_gemm(bool with_c) {
    int a = input("a", KILN_F32, 2, VA);
    int in[3] = {a, constant(KILN_F32, 2, VW, NULL, -1, 1), with_c ? constant(KILN_F32, 1, VN, NULL, -1, 1) : -1};
    int y = node_n("Gemm", with_c ? 3 : 2, in, 1);
    attr_float("alpha", 0.5f);
    return y;
}

/* Gemm (with C) -> Reshape -> Gelu (c_fc) */
static void b_view_gelu(void) {
    begin(20);
    output(op1("Gelu", reshape(view_gemm(true), 3, VO)));
}

/* Gemm (with C) -> Reshape -> Add(residual, .) (mlp c_proj) */
static void b_view_residual(void) {
    begin(20);
    int z = input("z", KILN_F32, 3, VO);
    output(op2("Add", z, reshape(view_gemm(true), 3, VO)));
}

/* Gemm -> Unsqueeze (axes input) -> Add(., residual) -> Tanh (attn c_proj, another view op) */
static void b_view_unsqueeze_residual(void) {
    begin(20);
    int64_t zd[3] = {1, 6, 8};
    int z = input("z", KILN_F32, 3, zd);
    output(op1("Tanh", op2("Add", op2("Unsqueeze", view_gemm(false), ints(1, (int64_t[]){0})), z)));
}

/* Gemm without C -> Reshape -> Add(bias [1, 1, 8]) -> Gelu: the bias becomes C, flattened to [8] */
static void b_view_bias_gelu(void) {
    begin(20);
    int64_t bd[3] = {1, 1, 8};
    int y = reshape(view_gemm(false), 3, VO);
    output(op1("Gelu", op2("Add", y, constant(KILN_F32, 3, bd, NULL, -1, 1))));
}

/* MatMul [2, 3, 4] x [4, 8] -> Reshape [6, 8] -> Add(bias [8]) -> Relu */
static void b_view_matmul(void) {
    begin(20);
    int64_t wd[2] = {4, 8}, od[2] = {6, 8};
    int x = input("x", KILN_F32, 3, D234);
    int y = reshape(op2("MatMul", x, constant(KILN_F32, 2, wd, NULL, -1, 1)), 2, od);
    output(op1("Relu", op2("Add", y, constant(KILN_F32, 1, VN, NULL, -1, 1))));
}

/* negatives: a Reshape that changes the last dim ([6, 8] -> [2, 24]); a Reshape output with a
 * second reader; a residual that broadcasts ([1, 3, 8] against [2, 3, 8]) */
static void b_view_last_dim(void) {
    begin(20);
    output(op1("Gelu", reshape(view_gemm(true), 2, (int64_t[]){2, 24})));
}

static void b_view_shared(void) {
    begin(20);
    int r = reshape(view_gemm(true), 3, VO);
    output(op1("Gelu", r));
    output(op1("Relu", r));
}

static void b_view_residual_broadcast(void) {
    begin(20);
    int64_t zd[3] = {1, 3, 8};
    int z = input("z", KILN_F32, 3, zd);
    output(op2("Add", reshape(view_gemm(true), 3, VO), z));
}

/* ------------------------------------------------------------------------------ fuse_elementwise */

/* (Sigmoid(x * 2 + y) * Tanh(x) - 1) / Abs(y) */
static void b_chain(void) {
    begin(17);
    int x = input("x", KILN_F32, 3, D234), y = input("y", KILN_F32, 3, D234);
    int s = op1("Sigmoid", op2("Add", op2("Mul", x, scalar(2.0)), y));
    output(op2("Div", op2("Sub", op2("Mul", s, op1("Tanh", x)), scalar(1.0)), op1("Abs", y)));
}

/* negative: every op broadcasts against a [4] input or feeds two readers */
static void b_chain_negative(void) {
    begin(17);
    int64_t bd[1] = {4};
    int x = input("x", KILN_F32, 3, D234), b = input("b", KILN_F32, 1, bd);
    int a = op2("Add", x, b);
    output(op2("Mul", a, b));
    output(op1("Relu", a));
    output(a);
}

/* ------------------------------------------------------------------------------ whole pipeline */

/* Conv+BN+residual+Relu and an attention, built into an engine by the real pipeline, saved, loaded
 * and run: the fused ops survive the engine format and agree with the unfused graph. */
static void b_pipeline(void) {
    begin(17);
    int64_t od[4] = {2, 4, 6, 6}, qd[4] = {AB, AH, AS, AD};
    int x = input("x", KILN_F32, 4, XCONV), z = input("z", KILN_F32, 4, od);
    int c = batchnorm(conv(x, constant(KILN_F32, 4, WCONV, NULL, -0.5, 0.5), -1), -1, -1, -1, -1);
    output(op1("Relu", op2("Add", c, z)));
    int q = input("q", KILN_F32, 4, qd), k = input("k", KILN_F32, 4, qd), v = input("v", KILN_F32, 4, qd);
    int s = op2("Mul", op2("MatMul", q, transpose(k, 4, (int64_t[]){0, 1, 3, 2})), scalar(0.3));
    int p = op1("Softmax", s);
    attr_int("axis", -1);
    output(op2("MatMul", p, v));
}

/* Counts verbose log lines that report a fusion into FusedConv, into Attention, and a Conv+BN fold. */
static void count_fusions(kiln_log_level level, const char *msg, void *user) {
    int *seen = user;
    if (level != KILN_LOG_VERBOSE) return;
    seen[0] += strstr(msg, "fuse_conv_bn: Conv ") != NULL;
    seen[1] += strstr(msg, "fuse_epilogue: Conv ") && strstr(msg, "-> FusedConv ");
    seen[2] += strstr(msg, "fuse_attention: ") && strstr(msg, "-> Attention ");
}

static void test_pipeline(const char *dir) {
    cases++;
    b_pipeline();
    kiln_graph *ref = finish();
    b_pipeline();
    kiln_graph *g = G;
    kiln_engine *built = NULL, *loaded = NULL;
    int seen[3] = {0, 0, 0};
    kiln_log_set_callback(count_fusions, seen);
    kiln_build_options opts = {.target = "cpu", .verbose = true};
    REQUIRE_OK(kiln_build_graph(g, "test_passes", &opts, &built));
    kiln_log_set_callback(NULL, NULL);
    CHECKF(seen[0] == 1 && seen[1] == 1 && seen[2] == 1, "pipeline: verbose log reports conv_bn %d, FusedConv %d, Attention %d",
          seen[0], seen[1], seen[2]);
    char path[4096];
    snprintf(path, sizeof path, "%s/test_passes_%d.kiln", dir, (int)getpid());
    REQUIRE_OK(kiln_engine_save(built, path));
    REQUIRE_OK(kiln_engine_load(path, &loaded));
    remove(path);
    kiln_tensor in[MAX_IO], out_ref[MAX_IO] = {{0}};
    make_inputs(ref, in);
    REQUIRE_OK(run_graph(ref, in, out_ref));
    kiln_context *ctx;
    REQUIRE_OK(kiln_context_create(loaded, &ctx));
    for (int k = 0; k < ref->ninputs; k++)
        REQUIRE_OK(kiln_context_set_input(ctx, ref->values[ref->inputs[k]].name, in[k].dtype, in[k].ndim, in[k].dims,
                                          in[k].data));
    REQUIRE_OK(kiln_context_run(ctx));
    for (int k = 0; k < ref->noutputs; k++) {
        kiln_tensor_desc d;
        const void *data;
        REQUIRE_OK(kiln_context_output(ctx, k, &d, &data));
        kiln_tensor got;
        kiln_tensor_view(&got, d.dtype, d.ndim, d.dims, (void *)data);
        double e = rel_error(&got, &out_ref[k]);
        CHECKF(e <= TOL_F32, "pipeline: output %d differs from the unfused graph by %.3g", k, e);
        kiln_tensor_release(&out_ref[k]);
    }
    for (int k = 0; k < ref->ninputs; k++) kiln_tensor_release(&in[k]);
    kiln_context_free(ctx);
    kiln_engine_free(built);
    kiln_engine_free(loaded);
    kiln_graph_free(ref);
}

/* ------------------------------------------------------------------------------ main */

/* The value of float attribute name of the first node with op_type op in g (NAN when absent). */
static double op_attr_float(const kiln_graph *g, const char *op, const char *name) {
    for (int i = 0; i < g->nnodes; i++)
        if (!strcmp(g->nodes[i].op_type, op)) return kiln_attr_float(&g->nodes[i], name, NAN);
    return NAN;
}

static int64_t op_attr_int(const kiln_graph *g, const char *op, const char *name) {
    for (int i = 0; i < g->nnodes; i++)
        if (!strcmp(g->nodes[i].op_type, op)) return kiln_attr_int(&g->nodes[i], name, -1);
    return -1;
}

/* check_pass of fuse_epilogue on a GEMM whose epilogue sits behind a view: besides the counts and
 * the numbers, no Add or activation is left, the graph output is written by a view op reading the
 * fused node's output (in the GEMM's shape), and the fused node has a bias (C) when has_bias. */
static void check_view_epilogue(const char *label, build_fn build, int before, int after, const char *fused,
                                bool has_bias) {
    kiln_graph *g = check_pass_tol(label, build, kiln_pass_fuse_epilogue, before, after, fused, TOL_F32);
    const char *gone[] = {"Add", "Gelu", "Relu", "Tanh"};
    for (int k = 0; k < 4; k++) CHECKF(count_op(g, gone[k]) == 0, "%s: a %s is left", label, gone[k]);
    const kiln_value *out = &g->values[g->outputs[0]];
    const kiln_node *view = out->producer >= 0 ? &g->nodes[out->producer] : NULL;
    CHECKF(view && kiln_op_is_view(view->domain, view->op_type), "%s: the output is not written by a view", label);
    int f = view ? g->values[view->inputs[0]].producer : -1;
    CHECKF(f >= 0 && !strcmp(g->nodes[f].op_type, fused), "%s: the view does not read the %s", label, fused);
    if (f >= 0) {
        const kiln_value *y = &g->values[g->nodes[f].outputs[0]];
        CHECKF(y->ndim >= 2 && y->ndim != out->ndim && y->dims[y->ndim - 1].value == 8,
               "%s: the %s output is not the GEMM's [..., 8]", label, fused);
        CHECKF((g->nodes[f].ninputs > 2 && g->nodes[f].inputs[2] >= 0) == has_bias, "%s: bias present = %d", label, !has_bias);
    }
    kiln_graph_free(g);
}

int main(int argc, char **argv) {
    const char *dir = argc > 1 ? argv[1] : ".";
    if (getenv("KILN_TEST_VERBOSE")) kiln_log_set_level(KILN_LOG_VERBOSE);

    /* eliminate_noops */
    check_pass("noop chain", b_noop_chain, kiln_pass_eliminate_noops, 8, 1, NULL);
    check_pass("transposes cancel", b_transpose_cancel, kiln_pass_eliminate_noops, 3, 1, NULL);
    check_pass("transposes merge", b_transpose_merge, kiln_pass_eliminate_noops, 3, 2, NULL);
    check_pass("reshape chain", b_reshape_chain, kiln_pass_eliminate_noops, 3, 2, NULL);
    check_pass("identity to a graph output", b_identity_to_output, kiln_pass_eliminate_noops, 2, 1, NULL);
    check_pass("noops negative", b_noop_negative, kiln_pass_eliminate_noops, 5, 5, NULL);
    /* cse */
    check_pass("cse", b_cse, kiln_pass_cse, 13, 9, NULL);
    check_pass("cse negative", b_cse_negative, kiln_pass_cse, 7, 7, NULL);
    /* fuse_conv_bn */
    kiln_graph *g = check_pass_tol("conv+bn", b_conv_bn, kiln_pass_fuse_conv_bn, 3, 2, "Conv", TOL_F32);
    CHECKF(count_op(g, "BatchNormalization") == 0, "conv+bn: a BatchNormalization is left");
    kiln_graph_free(g);
    check_pass("conv+bn without conv bias", b_conv_bn_nobias, kiln_pass_fuse_conv_bn, 2, 1, "Conv");
    check_pass("conv+bn, BN mean is an input", b_conv_bn_param_input, kiln_pass_fuse_conv_bn, 2, 2, NULL);
    check_pass("conv+bn, conv output read twice", b_conv_bn_shared, kiln_pass_fuse_conv_bn, 4, 4, NULL);
    check_pass("conv+bn, conv output is a graph output", b_conv_bn_output, kiln_pass_fuse_conv_bn, 2, 2, NULL);
    /* fuse_gelu */
    check_pass("gelu erf", b_gelu_erf, kiln_pass_fuse_gelu, 6, 2, "Gelu");
    check_pass("gelu erf variant", b_gelu_erf_variant, kiln_pass_fuse_gelu, 5, 1, "Gelu");
    g = check_pass_tol("gelu tanh (Pow)", b_gelu_tanh_pow, kiln_pass_fuse_gelu, 8, 1, "Gelu", TOL_F32);
    CHECKF(g->nnodes == 1 && !strcmp(kiln_attr_string(&g->nodes[0], "approximate", ""), "tanh"), "gelu tanh: approximate");
    kiln_graph_free(g);
    check_pass("gelu tanh (x*x*x)", b_gelu_tanh_mul, kiln_pass_fuse_gelu, 9, 1, "Gelu");
    check_pass("gelu, 0.6 instead of 0.5", b_gelu_wrong_const, kiln_pass_fuse_gelu, 5, 5, NULL);
    check_pass("gelu, erf read twice", b_gelu_shared, kiln_pass_fuse_gelu, 5, 5, NULL);
    /* fuse_norm */
    check_pass("layernorm opset 17", b_layernorm17, kiln_pass_fuse_norm, 9, 1, "LayerNormalization");
    check_pass("layernorm opset 18, d*d, reciprocal", b_layernorm18_variant, kiln_pass_fuse_norm, 10, 1, "LayerNormalization");
    check_pass("layernorm, variance over another axis", b_layernorm_wrong_axis, kiln_pass_fuse_norm, 9, 9, NULL);
    check_pass("layernorm, variance is a graph output", b_layernorm_shared, kiln_pass_fuse_norm, 9, 9, NULL);
    check_pass("rmsnorm", b_rmsnorm, kiln_pass_fuse_norm, 7, 1, "RMSNormalization");
    kiln_graph_free(check_pass_tol("rmsnorm float16 with casts", b_rmsnorm_cast, kiln_pass_fuse_norm, 9, 1,
                                   "RMSNormalization", TOL_F16_RMS));
    check_pass("rmsnorm, keepdims 0", b_rmsnorm_keepdims0, kiln_pass_fuse_norm, 7, 7, NULL);
    /* fuse_attention */
    /* the Transposes around it go: Q, K, V and O stay [B, S, H, D] (layout 1) */
    g = check_pass_tol("attention (MHA)", b_mha, kiln_pass_fuse_attention, 13, 5, "Attention", TOL_F32);
    CHECKF(fabs(op_attr_float(g, "Attention", "scale") - 1.0 / sqrt((double)AD)) < 1e-7, "mha: scale");
    CHECKF(op_attr_int(g, "Attention", "layout") == 1 && count_op(g, "Transpose") == 0, "mha: layout 1, no Transpose");
    kiln_graph_free(g);
    /* one QKV projection split three ways: the Split goes too (layout 2, QKV read as [B, S, 3, H, D]) */
    g = check_pass_tol("attention (packed QKV)", b_mha_packed, kiln_pass_fuse_attention, 14, 3, "Attention", TOL_F32);
    CHECKF(op_attr_int(g, "Attention", "layout") == 2 && count_op(g, "Split") == 0, "packed: layout 2, no Split");
    kiln_graph_free(g);
    g = check_pass_tol("attention (three projections)", b_mha_projections, kiln_pass_fuse_attention, 16, 4, "Attention",
                       TOL_F32);
    CHECKF(op_attr_int(g, "Attention", "layout") == 2 && count_op(g, "MatMul") == 1, "projections: one MatMul, layout 2");
    kiln_graph_free(g);
    g = check_pass_tol("attention, output read per head", b_mha_heads_out, kiln_pass_fuse_attention, 12, 8, "Attention",
                       TOL_F32);
    CHECKF(op_attr_int(g, "Attention", "layout") == -1, "heads out: no layout attribute (0)");
    kiln_graph_free(g);
    check_pass("attention, softmax over axis 2", b_mha_axis, kiln_pass_fuse_attention, 13, 13, NULL);
    check_pass("attention, scores are a graph output", b_mha_shared, kiln_pass_fuse_attention, 13, 13, NULL);
    g = check_pass_tol("attention (GQA)", b_gqa, kiln_pass_fuse_attention, 12, 1, "Attention", TOL_F32);
    CHECKF(op_attr_int(g, "Attention", "kv_repeat") == 2, "gqa: kv_repeat");
    kiln_graph_free(g);
    g = check_pass_tol("attention (causal, pre-scaled)", b_causal_prescaled, kiln_pass_fuse_attention, 6, 2,
                       "Attention", TOL_F32);
    CHECKF(op_attr_int(g, "Attention", "causal") == 1, "causal: causal attribute");
    CHECKF(fabs(op_attr_float(g, "Attention", "scale") - 1.0 / sqrt((double)AD)) < 1e-6, "causal: scale");
    kiln_graph_free(g);
    /* align_matmul: 100 columns padded to 104, then sliced back; 96 and 20 (narrow) stay */
    g = check_pass_tol("matmul, 100 columns", b_matmul_n100, kiln_pass_align_matmul, 1, 2, "MatMul", TOL_F32);
    CHECKF(count_op(g, "Slice") == 1, "align: a Slice");
    for (int i = 0; i < g->nnodes; i++)
        if (!strcmp(g->nodes[i].op_type, "MatMul")) {
            const kiln_value *w = kiln_node_input(g, &g->nodes[i], 1);
            CHECKF(w && w->constant && w->constant->dims[1] == 104, "align: the operand has 104 columns");
        }
    kiln_graph_free(g);
    check_pass("matmul, 96 columns", b_matmul_n96, kiln_pass_align_matmul, 1, 1, NULL);
    check_pass("matmul, 20 columns", b_matmul_n20, kiln_pass_align_matmul, 1, 1, NULL);
    /* fuse_epilogue */
    check_pass("conv + bias + residual + relu", b_conv_epilogue, kiln_pass_fuse_epilogue, 4, 1, "FusedConv");
    check_pass("conv + clip", b_conv_relu6, kiln_pass_fuse_epilogue, 2, 1, "FusedConv");
    g = check_pass_tol("gemm + bias", b_gemm_bias, kiln_pass_fuse_epilogue, 2, 1, "Gemm", TOL_F32);
    CHECKF(op_attr_float(g, "Gemm", "beta") == 1.0, "gemm + bias: beta");
    kiln_graph_free(g);
    check_pass("gemm + residual + hardswish", b_gemm_residual, kiln_pass_fuse_epilogue, 3, 1, "FusedGemm");
    check_pass("matmul + bias + gelu", b_matmul_gelu, kiln_pass_fuse_epilogue, 3, 1, "FusedMatMul");
    check_pass("matmul + silu", b_matmul_silu, kiln_pass_fuse_epilogue, 3, 1, "FusedMatMul");
    check_pass("epilogue, conv output read twice", b_epilogue_shared, kiln_pass_fuse_epilogue, 3, 3, NULL);
    check_pass("epilogue, broadcast residual, clip bound input", b_epilogue_broadcast, kiln_pass_fuse_epilogue, 3, 3, NULL);
    check_view_epilogue("gemm + reshape + gelu", b_view_gelu, 3, 2, "FusedGemm", true);
    check_view_epilogue("gemm (C) + reshape + residual", b_view_residual, 3, 3, "FusedGemm", true); /* + Reshape of Z */
    check_view_epilogue("gemm + unsqueeze + residual + tanh", b_view_unsqueeze_residual, 4, 3, "FusedGemm", false);
    check_view_epilogue("gemm + reshape + bias [1, 1, N] + gelu", b_view_bias_gelu, 4, 2, "FusedGemm", true);
    check_view_epilogue("matmul + reshape + bias + relu", b_view_matmul, 4, 2, "FusedMatMul", true);
    check_pass("epilogue, reshape changes the last dim", b_view_last_dim, kiln_pass_fuse_epilogue, 3, 3, NULL);
    check_pass("epilogue, reshape output read twice", b_view_shared, kiln_pass_fuse_epilogue, 4, 4, NULL);
    check_pass("epilogue, residual behind a reshape broadcasts", b_view_residual_broadcast, kiln_pass_fuse_epilogue, 3, 3, NULL);
    /* fuse_elementwise */
    check_pass("elementwise chain", b_chain, kiln_pass_fuse_elementwise, 8, 1, "ElementwiseChain");
    check_pass("elementwise, broadcast and shared", b_chain_negative, kiln_pass_fuse_elementwise, 3, 3, NULL);
    /* everything, through the engine file */
    test_pipeline(dir);

    if (failures) {
        fprintf(stderr, "test_passes: %d check(s) failed\n", failures);
        return 1;
    }
    printf("test_passes: %d cases passed\n", cases);
    return 0;
}
