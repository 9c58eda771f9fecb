/* test_quant.c — the CPU quantization kernels and the Q/DQ folding pass on small cases with known
 * answers: QuantizeLinear rounds half to even and saturates (int8, uint8), DequantizeLinear of
 * int32, DynamicQuantizeLinear of an all-zero input (scale 1, no NaN), exact int32 sums at the
 * extremes of uint8 x int8, QLinearMatMul saturation; refusals with clear messages (a per-axis
 * scale of the wrong length, a bad kiln.QConv attribute, a zero point outside its operand's range); and fuse_qdq: DequantizeLinear -> Conv ->
 * Relu -> QuantizeLinear becomes one kiln.QConv whose results equal the unfolded graph's, a
 * pattern whose input scale is not a constant stays as it is, and a residual Add of a quantized
 * shortcut folds into the QConv (its R input) with the same results; a channels-last QConv equals
 * the channels-first one transposed; fuse_qdq_output: a float QMatMul -> bias Add -> Gelu ->
 * QuantizeLinear becomes one QMatMul writing int8, with equal results; the FP8 reference
 * kiln.F8MatMul on hand-computed values, and fuse_qdq_output's folds into it (bias, residual, the
 * Gelu before it) with equal results. */
#include "check.h"
#include "graph_build.h"

#include "ir/quant_ops.h"
#include "passes/passes.h"
#include "quant/fp8.h"

#include <string.h>

/* A tensor of dtype dt, shape dims, with values v (converted). */
static kiln_tensor make(kiln_dtype dt, int ndim, const int64_t *dims, const double *v) {
    kiln_tensor t = {0};
    REQUIRE_OK(kiln_tensor_alloc(&t, dt, ndim, dims));
    for (int64_t i = 0; i < kiln_tensor_numel(&t); i++) kiln_tensor_set_f64(&t, i, v[i]);
    return t;
}

/* A node (of a throw-away graph) for op in domain: attributes are added to it by the caller. */
static kiln_graph *g_nodes;
static kiln_node *make_node(const char *domain, const char *op, int nin, int nout) {
    int ins[8], outs[4], id;
    for (int i = 0; i < nin; i++) REQUIRE_OK(kiln_graph_new_value(g_nodes, "in", &ins[i]));
    for (int i = 0; i < nout; i++) REQUIRE_OK(kiln_graph_new_value(g_nodes, "out", &outs[i]));
    REQUIRE_OK(kiln_graph_add_node(g_nodes, op, domain, op, nin, ins, nout, outs, &id));
    g_nodes->nodes[id].opset = 21;
    return &g_nodes->nodes[id];
}

static kiln_status exec(const kiln_node *n, kiln_tensor **in, int nin, kiln_tensor **out, int nout) {
    const kiln_cpu_kernel *k = kiln_cpu_kernel_find(n->domain, n->op_type);
    REQUIRE_OK(k ? KILN_OK : KILN_ERR_UNSUPPORTED);
    return k->exec(n, in, nin, out, nout);
}

static void test_quantize_rounding(void) {
    const double xv[] = {0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 300.0, -300.0, 3.49};
    const double want_i8[] = {0, 2, 2, 0, -2, -2, 127, -128, 3};
    const double want_u8[] = {10, 12, 12, 10, 8, 8, 255, 0, 13}; /* zero point 10 */
    int64_t n = 9;
    kiln_tensor x = make(KILN_F32, 1, &n, xv), s = make(KILN_F32, 0, NULL, (double[]){1.0});
    kiln_tensor z8 = make(KILN_I8, 0, NULL, (double[]){0}), zu = make(KILN_U8, 0, NULL, (double[]){10});
    kiln_node *q = make_node("", "QuantizeLinear", 3, 1);
    for (int pass = 0; pass < 2; pass++) {
        kiln_tensor y = {0};
        kiln_tensor *in[3] = {&x, &s, pass ? &zu : &z8}, *out[1] = {&y};
        CHECK_OK(exec(q, in, 3, out, 1));
        CHECK(y.dtype == (pass ? KILN_U8 : KILN_I8));
        for (int64_t i = 0; i < n && y.data; i++)
            CHECKF(kiln_tensor_get_i64(&y, i) == (int64_t)(pass ? want_u8 : want_i8)[i], "%s x=%g: got %lld",
                   pass ? "uint8" : "int8", xv[i], (long long)kiln_tensor_get_i64(&y, i));
        kiln_tensor_release(&y);
    }
    /* a per-axis scale of the wrong length is refused, naming the problem */
    int64_t three = 3;
    kiln_tensor s3 = make(KILN_F32, 1, &three, (double[]){1, 2, 3}), z3 = make(KILN_I8, 1, &three, (double[]){0, 0, 0});
    kiln_node *qa = make_node("", "QuantizeLinear", 3, 1);
    kiln_node_add_attr(g_nodes, qa, "axis", KILN_ATTR_INT)->i = 0;
    kiln_tensor y = {0};
    kiln_tensor *in[3] = {&x, &s3, &z3}, *out[1] = {&y};
    CHECK(exec(qa, in, 3, out, 1) == KILN_ERR_SHAPE);
    CHECKF(strstr(kiln_last_error(), "per-axis") != NULL, "message: %s", kiln_last_error());
    kiln_tensor_release(&y);
    kiln_tensor_release(&x), kiln_tensor_release(&s), kiln_tensor_release(&z8), kiln_tensor_release(&zu);
    kiln_tensor_release(&s3), kiln_tensor_release(&z3);
}

static void test_dequantize_and_dynamic(void) {
    int64_t n = 3;
    kiln_tensor x = make(KILN_I32, 1, &n, (double[]){-2000000000.0, 7, 0}), s = make(KILN_F32, 0, NULL, (double[]){0.5});
    kiln_tensor y = {0};
    kiln_tensor *in[2] = {&x, &s}, *out[1] = {&y};
    CHECK_OK(exec(make_node("", "DequantizeLinear", 2, 1), in, 2, out, 1));
    CHECK_NEAR(kiln_tensor_get_f64(&y, 0), -1e9, 0);
    CHECK_NEAR(kiln_tensor_get_f64(&y, 1), 3.5, 0);
    kiln_tensor_release(&y);
    kiln_tensor zeros = make(KILN_F32, 1, &n, (double[]){0, 0, 0}), yq = {0}, ys = {0}, yz = {0};
    kiln_tensor *din[1] = {&zeros}, *dout[3] = {&yq, &ys, &yz};
    CHECK_OK(exec(make_node("", "DynamicQuantizeLinear", 1, 3), din, 1, dout, 3));
    CHECK_NEAR(kiln_tensor_get_f64(&ys, 0), 1.0, 0); /* an empty range: scale 1, as onnxruntime */
    CHECK(kiln_tensor_get_i64(&yz, 0) == 0);
    CHECK(kiln_tensor_get_i64(&yq, 2) == 0);
    kiln_tensor_release(&yq), kiln_tensor_release(&ys), kiln_tensor_release(&yz);
    kiln_tensor_release(&x), kiln_tensor_release(&s), kiln_tensor_release(&zeros);
}

/* uint8 255 x int8 -128 over K = 32768 (the most the kernels accept): -1069547520, exact in int32. */
static void test_integer_sum_extremes(void) {
    enum { K = 32768 };
    int64_t ad[2] = {1, K}, bd[2] = {K, 1};
    kiln_tensor a = {0}, b = {0}, y = {0};
    REQUIRE_OK(kiln_tensor_alloc(&a, KILN_U8, 2, ad));
    REQUIRE_OK(kiln_tensor_alloc(&b, KILN_I8, 2, bd));
    memset(a.data, 255, K);
    memset(b.data, 0x80, K);
    kiln_tensor *in[2] = {&a, &b}, *out[1] = {&y};
    CHECK_OK(exec(make_node("", "MatMulInteger", 2, 1), in, 2, out, 1));
    CHECK(y.dtype == KILN_I32 && kiln_tensor_get_i64(&y, 0) == INT64_C(255) * -128 * K);
    kiln_tensor_release(&y);
    /* QLinearMatMul saturates the same sum to int8's low end */
    kiln_tensor as = make(KILN_F32, 0, NULL, (double[]){1}), az = make(KILN_U8, 0, NULL, (double[]){0});
    kiln_tensor bz = make(KILN_I8, 0, NULL, (double[]){0}), yz = make(KILN_I8, 0, NULL, (double[]){5});
    kiln_tensor *qin[8] = {&a, &as, &az, &b, &as, &bz, &as, &yz};
    CHECK_OK(exec(make_node("", "QLinearMatMul", 8, 1), qin, 8, out, 1));
    CHECK(y.dtype == KILN_I8 && kiln_tensor_get_i64(&y, 0) == -128);
    kiln_tensor_release(&y);
    kiln_tensor_release(&a), kiln_tensor_release(&b), kiln_tensor_release(&as), kiln_tensor_release(&az);
    kiln_tensor_release(&bz), kiln_tensor_release(&yz);
}

static void test_qconv_attributes_checked(void) {
    kiln_node *n = make_node(KILN_FUSED_DOMAIN, "QConv", 2, 1);
    kiln_quant_layer q;
    CHECK(kiln_quant_layer_read(n, &q) == KILN_ERR_INVALID_ARGUMENT); /* no x_scale */
    kiln_node_add_attr(g_nodes, n, "x_scale", KILN_ATTR_FLOAT)->f = 0.1f;
    kiln_attr *ws = kiln_node_add_attr(g_nodes, n, "w_scale", KILN_ATTR_FLOATS);
    ws->floats = kiln_graph_alloc(g_nodes, sizeof *ws->floats);
    REQUIRE_OK(ws->floats ? KILN_OK : KILN_ERR_OUT_OF_MEMORY);
    ws->floats[0] = 0.01f;
    ws->n = 1;
    kiln_attr *yd = kiln_node_add_attr(g_nodes, n, "y_dtype", KILN_ATTR_INT);
    yd->i = KILN_I16;
    CHECK(kiln_quant_layer_read(n, &q) == KILN_ERR_INVALID_ARGUMENT);
    CHECKF(strstr(kiln_last_error(), "y_dtype") != NULL, "message: %s", kiln_last_error());
    /* a zero point outside its operand's range (which would let an int32 sum overflow) is refused */
    yd->i = KILN_F32;
    kiln_node_add_attr(g_nodes, n, "x_zero_point", KILN_ATTR_INT)->i = 200;
    int64_t xd[4] = {1, 1, 3, 3}, wd[4] = {1, 1, 1, 1};
    kiln_tensor x = {0}, w = {0}, y = {0};
    REQUIRE_OK(kiln_tensor_alloc(&x, KILN_I8, 4, xd));
    REQUIRE_OK(kiln_tensor_alloc(&w, KILN_I8, 4, wd));
    kiln_tensor *in[2] = {&x, &w}, *out[1] = {&y};
    CHECK(exec(n, in, 2, out, 1) == KILN_ERR_INVALID_ARGUMENT);
    CHECKF(strstr(kiln_last_error(), "x_zero_point") != NULL, "message: %s", kiln_last_error());
    kiln_tensor_release(&x), kiln_tensor_release(&w), kiln_tensor_release(&y);
}

/* 4-D t [A, B, C, D] (8-bit) as [A, C, D, B] (to_last) or [A, D, B, C]. */
static kiln_tensor rotate4(const kiln_tensor *t, bool to_last) {
    const int64_t *d = t->dims;
    int64_t od[4] = {d[0], to_last ? d[2] : d[3], to_last ? d[3] : d[1], to_last ? d[1] : d[2]};
    kiln_tensor o = {0};
    REQUIRE_OK(kiln_tensor_alloc(&o, t->dtype, 4, od));
    for (int64_t a = 0; a < d[0]; a++)
        for (int64_t b = 0; b < d[1]; b++)
            for (int64_t c = 0; c < d[2]; c++)
                for (int64_t e = 0; e < d[3]; e++) {
                    int64_t src = ((a * d[1] + b) * d[2] + c) * d[3] + e;
                    int64_t dst = to_last ? ((a * od[1] + c) * od[2] + e) * od[3] + b : ((a * od[1] + e) * od[2] + b) * od[3] + c;
                    ((int8_t *)o.data)[dst] = ((const int8_t *)t->data)[src];
                }
    return o;
}

/* kiln.QConv with channels_last = 1 on transposed X, W and R equals the channels-first layer
 * transposed (strided, padded, with a residual and int8 output). */
static void test_qconv_channels_last(void) {
    int64_t xd[4] = {2, 5, 7, 6}, wd[4] = {3, 5, 3, 3}, rd[4] = {2, 3, 4, 3};
    double xv[2 * 5 * 7 * 6], wv[3 * 5 * 9], rv[2 * 3 * 4 * 3];
    for (size_t i = 0; i < sizeof xv / sizeof *xv; i++) xv[i] = (double)((int)(i * 37 % 255) - 128);
    for (size_t i = 0; i < sizeof wv / sizeof *wv; i++) wv[i] = (double)((int)(i * 53 % 255) - 127);
    for (size_t i = 0; i < sizeof rv / sizeof *rv; i++) rv[i] = (double)((int)(i * 29 % 255) - 128);
    kiln_tensor x = make(KILN_I8, 4, xd, xv), w = make(KILN_I8, 4, wd, wv), r = make(KILN_I8, 4, rd, rv);
    kiln_node *nodes[2];
    for (int cl = 0; cl < 2; cl++) {
        kiln_node *n = nodes[cl] = make_node(KILN_FUSED_DOMAIN, "QConv", 4, 1);
        kiln_node_add_attr(g_nodes, n, "x_scale", KILN_ATTR_FLOAT)->f = 0.05f;
        kiln_attr *ws = kiln_node_add_attr(g_nodes, n, "w_scale", KILN_ATTR_FLOATS);
        ws->floats = kiln_graph_alloc(g_nodes, sizeof *ws->floats);
        REQUIRE_OK(ws->floats ? KILN_OK : KILN_ERR_OUT_OF_MEMORY);
        ws->floats[0] = 0.002f;
        ws->n = 1;
        kiln_node_add_attr(g_nodes, n, "r_scale", KILN_ATTR_FLOAT)->f = 0.03f;
        kiln_node_add_attr(g_nodes, n, "y_dtype", KILN_ATTR_INT)->i = KILN_I8;
        kiln_node_add_attr(g_nodes, n, "y_scale", KILN_ATTR_FLOAT)->f = 0.05f;
        kiln_attr *st = kiln_node_add_attr(g_nodes, n, "strides", KILN_ATTR_INTS); /* filled before the next add */
        st->ints = kiln_graph_alloc(g_nodes, 2 * sizeof *st->ints);
        REQUIRE_OK(st->ints ? KILN_OK : KILN_ERR_OUT_OF_MEMORY);
        st->ints[0] = st->ints[1] = 2;
        st->n = 2;
        kiln_attr *pads = kiln_node_add_attr(g_nodes, n, "pads", KILN_ATTR_INTS);
        pads->ints = kiln_graph_alloc(g_nodes, 4 * sizeof *pads->ints);
        REQUIRE_OK(pads->ints ? KILN_OK : KILN_ERR_OUT_OF_MEMORY);
        pads->ints[0] = 1, pads->ints[1] = 0, pads->ints[2] = 1, pads->ints[3] = 1;
        pads->n = 4;
        if (cl) kiln_node_add_attr(g_nodes, n, "channels_last", KILN_ATTR_INT)->i = 1;
    }
    kiln_tensor xl = rotate4(&x, true), wl = rotate4(&w, true), rl = rotate4(&r, true), y = {0}, yl = {0};
    kiln_tensor *in[4] = {&x, &w, NULL, &r}, *inl[4] = {&xl, &wl, NULL, &rl}, *out[1] = {&y}, *outl[1] = {&yl};
    CHECK_OK(exec(nodes[0], in, 4, out, 1));
    CHECK_OK(exec(nodes[1], inl, 4, outl, 1));
    CHECK(y.ndim == 4 && yl.ndim == 4 && y.dims[1] == 3 && y.dims[2] == 4 && y.dims[3] == 3 && yl.dims[3] == 3);
    if (y.ndim == 4 && yl.ndim == 4) {
        kiln_tensor back = rotate4(&yl, false);
        CHECK(!memcmp(back.data, y.data, (size_t)kiln_tensor_numel(&y)));
        kiln_tensor_release(&back);
    }
    kiln_tensor_release(&x), kiln_tensor_release(&w), kiln_tensor_release(&r), kiln_tensor_release(&xl);
    kiln_tensor_release(&wl), kiln_tensor_release(&rl), kiln_tensor_release(&y), kiln_tensor_release(&yl);
}

/* x -> Q -> DQ -> Conv(DQ(W int8 per channel), B) -> Relu -> Q -> DQ -> y. xs_const: whether the input
 * scale of the first DequantizeLinear is a constant (else a graph input: the pattern cannot fold). */
static kiln_graph *qdq_conv_graph(bool xs_const) {
    begin(21);
    int64_t xd[4] = {1, 3, 6, 6}, wd[4] = {4, 3, 3, 3}, m = 4, one = 1;
    int x = input("x", KILN_F32, 4, xd);
    int xs = xs_const ? scalar(0.02) : input("xs", KILN_F32, 1, &one);
    int xz = constant(KILN_I8, 0, NULL, (double[]){0}, 0, 0);
    int xq = node_n("QuantizeLinear", 3, (int[]){x, xs, xz}, 1);
    int xdq = node_n("DequantizeLinear", 3, (int[]){xq, xs, xz}, 1);
    int w = constant(KILN_I8, 4, wd, NULL, -127, 127);
    int wsc = constant(KILN_F32, 1, &m, NULL, 0.01, 0.02), wz = constant(KILN_I8, 1, &m, (double[]){0, 0, 0, 0}, 0, 0);
    int wdq = node_n("DequantizeLinear", 3, (int[]){w, wsc, wz}, 1);
    attr_int("axis", 0);
    int b = constant(KILN_F32, 1, &m, NULL, -0.5, 0.5);
    int c = node_n("Conv", 3, (int[]){xdq, wdq, b}, 1);
    attr_ints("pads", 4, (int64_t[]){1, 1, 1, 1});
    int r = op1("Relu", c);
    int ys = scalar(0.05), yz = constant(KILN_U8, 0, NULL, (double[]){0}, 0, 0);
    int yq = node_n("QuantizeLinear", 3, (int[]){r, ys, yz}, 1);
    output(node_n("DequantizeLinear", 3, (int[]){yq, ys, yz}, 1));
    return finish();
}

static void test_fuse_qdq(void) {
    kiln_graph *ref = qdq_conv_graph(true), *opt = qdq_conv_graph(true);
    bool changed = false;
    REQUIRE_OK(kiln_pass_fuse_qdq(opt, &changed));
    REQUIRE_OK(kiln_graph_infer_shapes(opt));
    CHECK(changed && count_op(opt, "QConv") == 1 && count_op(opt, "Conv") == 0 && count_op(opt, "Relu") == 0);
    /* the folded layer rounds once from float32 sums of exact integer products: equal here */
    check_same_outputs("fuse_qdq conv", ref, "unfolded graph", opt, "folded graph", 1e-6);
    kiln_graph_free(ref);
    kiln_graph_free(opt);
    kiln_graph *dyn = qdq_conv_graph(false);
    changed = true;
    REQUIRE_OK(kiln_pass_fuse_qdq(dyn, &changed));
    CHECK(!changed && count_op(dyn, "Conv") == 1);
    kiln_graph_free(dyn);
}

/* x -> Q -> DQ -> Conv(DQ(W int8, zero point wz), B) -> Add(DQ(Q(r)), or r itself when !quantized) ->
 * Relu -> Q -> DQ -> y: ResNet's residual block end, its shortcut quantized or float. */
static kiln_graph *qdq_residual_graph(double wz, bool quantized) {
    begin(21);
    int64_t xd[4] = {2, 4, 5, 5}, wd[4] = {4, 4, 3, 3}, m = 4;
    int x = input("x", KILN_F32, 4, xd), r = input("r", KILN_F32, 4, xd);
    int xs = scalar(0.02), rs = scalar(0.03), z = constant(KILN_I8, 0, NULL, (double[]){0}, 0, 0);
    int xdq = node_n("DequantizeLinear", 3, (int[]){node_n("QuantizeLinear", 3, (int[]){x, xs, z}, 1), xs, z}, 1);
    int rdq = quantized ? node_n("DequantizeLinear", 3, (int[]){node_n("QuantizeLinear", 3, (int[]){r, rs, z}, 1), rs, z}, 1)
                        : r;
    int w = constant(KILN_I8, 4, wd, NULL, -127, 127);
    int wsc = constant(KILN_F32, 1, &m, NULL, 0.01, 0.02), wzc = constant(KILN_I8, 1, &m, (double[]){wz, wz, wz, wz}, 0, 0);
    int wdq = node_n("DequantizeLinear", 3, (int[]){w, wsc, wzc}, 1);
    attr_int("axis", 0);
    int c = node_n("Conv", 3, (int[]){xdq, wdq, constant(KILN_F32, 1, &m, NULL, -0.5, 0.5)}, 1);
    attr_ints("pads", 4, (int64_t[]){1, 1, 1, 1});
    int y = op1("Relu", op2("Add", c, rdq));
    int ys = scalar(0.05);
    output(node_n("DequantizeLinear", 3, (int[]){node_n("QuantizeLinear", 3, (int[]){y, ys, z}, 1), ys, z}, 1));
    return finish();
}

/* The residual Add folds into the QConv (input R, r_scale) with its ReLU and QuantizeLinear, and the
 * CPU kernel's results equal the unfolded graph's; so does a float shortcut (no r_scale); with
 * asymmetric weights it does not fold. */
static void test_fuse_qdq_residual(void) {
    kiln_graph *ref = qdq_residual_graph(0, true), *opt = qdq_residual_graph(0, true);
    bool changed = false;
    REQUIRE_OK(kiln_pass_fuse_qdq(opt, &changed));
    REQUIRE_OK(kiln_graph_infer_shapes(opt));
    CHECK(changed && count_op(opt, "QConv") == 1 && count_op(opt, "Add") == 0 && count_op(opt, "Relu") == 0);
    for (int i = 0; i < opt->nnodes; i++)
        if (!strcmp(opt->nodes[i].op_type, "QConv")) {
            CHECK(opt->nodes[i].ninputs == 4);
            CHECK_NEAR(kiln_attr_float(&opt->nodes[i], "r_scale", 0.0f), 0.03, 1e-9);
        }
    check_same_outputs("fuse_qdq residual", ref, "unfolded graph", opt, "folded graph", 1e-6);
    kiln_graph_free(ref);
    kiln_graph_free(opt);
    ref = qdq_residual_graph(0, false), opt = qdq_residual_graph(0, false);
    REQUIRE_OK(kiln_pass_fuse_qdq(opt, &changed));
    REQUIRE_OK(kiln_graph_infer_shapes(opt));
    CHECK(changed && count_op(opt, "QConv") == 1 && count_op(opt, "Add") == 0 && count_op(opt, "Relu") == 0);
    for (int i = 0; i < opt->nnodes; i++)
        if (!strcmp(opt->nodes[i].op_type, "QConv"))
            CHECK(opt->nodes[i].ninputs == 4 && !kiln_node_attr(&opt->nodes[i], "r_scale"));
    check_same_outputs("fuse_qdq float residual", ref, "unfolded graph", opt, "folded graph", 1e-6);
    kiln_graph_free(ref);
    kiln_graph_free(opt);
    kiln_graph *asym = qdq_residual_graph(3, true);
    REQUIRE_OK(kiln_pass_fuse_qdq(asym, &changed));
    CHECK(changed && count_op(asym, "QConv") == 1 && count_op(asym, "Add") == 1);
    kiln_graph_free(asym);
}

/* kiln.F8MatMul on values whose E4M3 roundings are known: 0.55 / 0.5 = 1.1 rounds to 1.125, 300 / 0.5
 * saturates to 448; the sums and the scaling are exact here, so the result is too. A missing w_scale
 * is refused naming it. */
static void test_f8matmul(void) {
    kiln_node *n = make_node(KILN_FUSED_DOMAIN, "F8MatMul", 3, 1);
    kiln_node_add_attr(g_nodes, n, "x_scale", KILN_ATTR_FLOAT)->f = 0.5f;
    int64_t ad[2] = {2, 3}, wd[2] = {3, 2}, nb = 2;
    kiln_tensor a = make(KILN_F32, 2, ad, (double[]){1.0, -0.75, 0.55, 2.5, 300.0, 0.0});
    kiln_tensor w = {0}, y = {0}, b = make(KILN_F32, 1, &nb, (double[]){0.5, -1.0});
    REQUIRE_OK(kiln_tensor_alloc(&w, KILN_U8, 2, wd));
    const float wv[6] = {1.0f, 2.0f, -0.5f, 0.25f, 4.0f, -1.0f};
    for (int i = 0; i < 6; i++) ((uint8_t *)w.data)[i] = kiln_f32_to_e4m3(wv[i]);
    kiln_tensor *in[3] = {&a, &w, &b}, *out[1] = {&y};
    CHECK(exec(n, in, 3, out, 1) == KILN_ERR_INVALID_ARGUMENT);
    CHECKF(strstr(kiln_last_error(), "w_scale") != NULL, "message: %s", kiln_last_error());
    kiln_node_add_attr(g_nodes, n, "w_scale", KILN_ATTR_FLOAT)->f = 0.25f;
    REQUIRE_OK(exec(n, in, 3, out, 1));
    const float want[4] = {1.40625f, -0.6875f, -26.875f, 14.25f};
    CHECK(y.ndim == 2 && y.dims[0] == 2 && y.dims[1] == 2);
    for (int i = 0; i < 4; i++)
        CHECKF(((const float *)y.data)[i] == want[i], "F8MatMul y[%d] = %g, want %g", i, ((const float *)y.data)[i],
               want[i]);
    kiln_tensor_release(&a), kiln_tensor_release(&w), kiln_tensor_release(&b), kiln_tensor_release(&y);
}

/* x -> Q -> DQ -> MatMul(DQ(W int8 per column)) -> Add(bias) -> Gelu -> Q -> DQ -> y: a Linear as
 * exporters write it, with the Gelu node itself (what fuse_gelu leaves of an exported erf GELU). */
static kiln_graph *qdq_matmul_gelu_graph(void) {
    begin(21);
    int64_t xd[2] = {5, 8}, wd[2] = {8, 12}, n = 12;
    int x = input("x", KILN_F32, 2, xd);
    int xs = scalar(0.02), xz = constant(KILN_I8, 0, NULL, (double[]){0}, 0, 0);
    int xq = node_n("QuantizeLinear", 3, (int[]){x, xs, xz}, 1);
    int xdq = node_n("DequantizeLinear", 3, (int[]){xq, xs, xz}, 1);
    int w = constant(KILN_I8, 2, wd, NULL, -127, 127);
    int wsc = constant(KILN_F32, 1, &n, NULL, 0.01, 0.02);
    int wdq = node_n("DequantizeLinear", 2, (int[]){w, wsc}, 1);
    attr_int("axis", 1);
    int bias = constant(KILN_F32, 1, &n, NULL, -0.3, 0.3);
    int gelu = op1("Gelu", op2("Add", op2("MatMul", xdq, wdq), bias));
    int ys = scalar(0.01), yz = constant(KILN_I8, 0, NULL, (double[]){0}, 0, 0);
    int yq = node_n("QuantizeLinear", 3, (int[]){gelu, ys, yz}, 1);
    output(node_n("DequantizeLinear", 3, (int[]){yq, ys, yz}, 1));
    return finish();
}

/* fuse_qdq leaves the MatMul writing float32 (the Add and the Gelu are not in its pattern);
 * fuse_qdq_output then moves the bias, the Gelu and the QuantizeLinear into the QMatMul, which
 * computes the same int8 values. */
static void test_fuse_qdq_output(void) {
    kiln_graph *ref = qdq_matmul_gelu_graph(), *opt = qdq_matmul_gelu_graph();
    bool changed = false;
    REQUIRE_OK(kiln_pass_fuse_qdq(ref, &changed));
    REQUIRE_OK(kiln_pass_fuse_qdq(opt, &changed));
    CHECK(count_op(opt, "QMatMul") == 1 && count_op(opt, "Gelu") == 1);
    changed = false;
    REQUIRE_OK(kiln_pass_fuse_qdq_output(opt, &changed));
    REQUIRE_OK(kiln_graph_infer_shapes(opt));
    CHECK(changed && count_op(opt, "QMatMul") == 1 && count_op(opt, "Gelu") == 0 && count_op(opt, "Add") == 0 &&
          count_op(opt, "QuantizeLinear") == 1);
    for (int i = 0; i < opt->nnodes; i++)
        if (!strcmp(opt->nodes[i].op_type, "QMatMul")) {
            CHECK(kiln_attr_int(&opt->nodes[i], "y_dtype", 0) == KILN_I8 && opt->nodes[i].ninputs == 3);
            CHECK(!strcmp(kiln_attr_string(&opt->nodes[i], "activation", ""), "Gelu"));
        }
    /* the same float32 operations in the same order, then the same rounding: equal */
    check_same_outputs("fuse_qdq_output", ref, "Gelu and QuantizeLinear nodes", opt, "folded layer", 1e-6);
    kiln_graph_free(ref);
    kiln_graph_free(opt);
}

/* Starts a graph (opset 20) that may hold kiln-domain nodes. */
static void begin_kiln(void) {
    begin(20); /* Gelu's opset */
    kiln_opset_import *ops = kiln_graph_alloc(G, 2 * sizeof *ops);
    ops[0] = G->opsets[0];
    ops[1] = (kiln_opset_import){KILN_FUSED_DOMAIN, KILN_FUSED_OPSET};
    G->opsets = ops;
    G->nopsets = 2;
}

/* F8MatMul(x) [K -> N] without a bias, E4M3 weight codes from a fixed pattern, then Add(bias) with the
 * bias first when bias_first (exporters write both orders): what the fp8 calibration makes of a Linear. */
static int f8_linear(int x, int64_t K, int64_t N, bool bias_first) {
    int64_t wd[2] = {K, N};
    kiln_tensor codes = {0};
    REQUIRE_OK(kiln_tensor_alloc(&codes, KILN_U8, 2, wd));
    for (int64_t i = 0; i < K * N; i++) ((uint8_t *)codes.data)[i] = kiln_f32_to_e4m3((float)((i * 37) % 29 - 14) / 4.0f);
    int w;
    REQUIRE_OK(kiln_graph_new_value(G, "codes", &w));
    REQUIRE_OK(kiln_graph_set_constant(G, w, &codes));
    int mm = node_in(KILN_FUSED_DOMAIN, "F8MatMul", 2, (int[]){x, w});
    attr_float("x_scale", 0.01f);
    attr_float("w_scale", 0.02f);
    int bias = constant(KILN_F32, 1, &N, NULL, -0.5, 0.5);
    return bias_first ? op2("Add", bias, mm) : op2("Add", mm, bias);
}

/* x -> one fp8 Linear -> y. */
static kiln_graph *f8_matmul_bias_graph(bool bias_first) {
    begin_kiln();
    int64_t xd[3] = {2, 5, 16};
    output(f8_linear(input("x", KILN_F32, 3, xd), 16, 8, bias_first));
    return finish();
}

/* fuse_qdq_output folds the bias Add after a bias-less F8MatMul into it (either operand order): one
 * node fewer, the same values (the CPU kernel adds the bias to the same scaled sum); an F8MatMul
 * whose result has another reader keeps its Add. */
static void test_fuse_f8_bias(void) {
    for (int order = 0; order < 2; order++) {
        kiln_graph *ref = f8_matmul_bias_graph(order), *opt = f8_matmul_bias_graph(order);
        int before = opt->nnodes;
        bool changed = false;
        REQUIRE_OK(kiln_pass_fuse_qdq_output(opt, &changed));
        REQUIRE_OK(kiln_graph_infer_shapes(opt));
        CHECK(changed && opt->nnodes == before - 1 && count_op(opt, "Add") == 0 && count_op(opt, "F8MatMul") == 1);
        for (int i = 0; i < opt->nnodes; i++)
            if (!strcmp(opt->nodes[i].op_type, "F8MatMul"))
                CHECK(opt->nodes[i].ninputs == 3 && opt->nodes[i].inputs[2] >= 0 &&
                      opt->nodes[i].outputs[0] == opt->outputs[0]);
        check_same_outputs("fuse_qdq_output (F8MatMul bias)", ref, "F8MatMul and Add", opt, "folded F8MatMul", 1e-6);
        kiln_graph_free(ref);
        kiln_graph_free(opt);
    }
    kiln_graph *shared = f8_matmul_bias_graph(false);
    for (int i = 0; i < shared->nnodes; i++)
        if (!strcmp(shared->nodes[i].op_type, "F8MatMul")) REQUIRE_OK(kiln_graph_add_output(shared, shared->nodes[i].outputs[0]));
    bool changed = false;
    REQUIRE_OK(kiln_pass_fuse_qdq_output(shared, &changed));
    CHECK(!changed && count_op(shared, "Add") == 1);
    kiln_graph_free(shared);
}

/* x -> fp8 Linear -> Gelu -> fp8 Linear -> + x -> y (BERT's FFN with its skip connection):
 * fuse_qdq_output folds both biases, the Gelu (into the second layer's input_activation) and the
 * residual Add (its input R), four nodes fewer; the results equal the unfolded graph's within a
 * rounding flip of E4M3 (the Gelu computed by another CPU code path may differ in an ulp and move an
 * input across a rounding boundary). An unknown input_activation is refused naming it. */
static void test_fuse_f8_gelu(void) {
    kiln_graph *graphs[2];
    int x = -1;
    for (int k = 0; k < 2; k++) {
        begin_kiln();
        int64_t xd[2] = {6, 16};
        x = input("x", KILN_F32, 2, xd);
        int h = op1("Gelu", f8_linear(x, 16, 32, false));
        output(op2("Add", f8_linear(h, 32, 16, true), x));
        graphs[k] = finish();
    }
    kiln_graph *ref = graphs[0], *opt = graphs[1];
    int before = opt->nnodes;
    bool changed = false;
    REQUIRE_OK(kiln_pass_fuse_qdq_output(opt, &changed));
    REQUIRE_OK(kiln_graph_infer_shapes(opt));
    CHECKF(changed && opt->nnodes == before - 4 && count_op(opt, "Gelu") == 0 && count_op(opt, "Add") == 0,
           "%d nodes (from %d), %d Gelu, %d Add", opt->nnodes, before, count_op(opt, "Gelu"), count_op(opt, "Add"));
    int with_act = 0, with_res = 0;
    for (int i = 0; i < opt->nnodes; i++)
        if (!strcmp(opt->nodes[i].op_type, "F8MatMul")) {
            with_act += !strcmp(kiln_attr_string(&opt->nodes[i], "input_activation", ""), "Gelu");
            with_res += opt->nodes[i].ninputs == 4 && opt->nodes[i].inputs[3] == x;
        }
    CHECK(with_act == 1 && with_res == 1);
    check_same_outputs("fuse_qdq_output (F8MatMul input Gelu)", ref, "Gelu node", opt, "folded F8MatMul", 2e-2);
    kiln_graph_free(ref);
    kiln_graph_free(opt);
    kiln_node *n = make_node(KILN_FUSED_DOMAIN, "F8MatMul", 2, 1);
    kiln_node_add_attr(g_nodes, n, "x_scale", KILN_ATTR_FLOAT)->f = 0.5f;
    kiln_node_add_attr(g_nodes, n, "w_scale", KILN_ATTR_FLOAT)->f = 0.5f;
    kiln_attr *act = kiln_node_add_attr(g_nodes, n, "input_activation", KILN_ATTR_STRING);
    act->s = "Clip"; /* takes parameters */
    act->s_len = 4;
    kiln_fp8_layer q;
    CHECK(kiln_fp8_layer_read(n, &q) == KILN_ERR_INVALID_ARGUMENT);
    CHECKF(strstr(kiln_last_error(), "input_activation 'Clip'") != NULL, "message: %s", kiln_last_error());
}

int main(void) {
    g_nodes = kiln_graph_create();
    REQUIRE_OK(g_nodes ? KILN_OK : KILN_ERR_OUT_OF_MEMORY);
    test_quantize_rounding();
    test_dequantize_and_dynamic();
    test_integer_sum_extremes();
    test_qconv_attributes_checked();
    test_fuse_qdq();
    test_fuse_qdq_residual();
    test_qconv_channels_last();
    test_fuse_qdq_output();
    test_fuse_f8_bias();
    test_fuse_f8_gelu();
    test_f8matmul();
    kiln_graph_free(g_nodes);
    return checks_report("test_quant");
}
