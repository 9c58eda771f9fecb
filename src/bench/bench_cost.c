/* bench_cost.c — the FLOP and byte estimate of one node for kiln bench's roofline numbers. FLOPs are
 * counted only where they dominate (2 per multiply-add of the matrix products, convolutions and
 * attention); bytes are every input and output touched once, which is what a kernel that does not
 * spill must at least move. */
#include "bench/bench.h"

#include "ir/fused_ops.h"

#include <string.h>

/* Elements of v when all its dims are known, else -1. */
static double numel(const kiln_value *v) {
    if (!v || v->ndim < 0) return -1;
    double n = 1;
    for (int d = 0; d < v->ndim; d++) {
        if (v->dims[d].sym != 0 || v->dims[d].value < 0) return -1;
        n *= (double)v->dims[d].value;
    }
    return n;
}

/* Dim d of v (negative d counts from the end), or -1 when unknown. */
static double dim(const kiln_value *v, int d) {
    if (!v || v->ndim <= 0) return -1;
    if (d < 0) d += v->ndim;
    if (d < 0 || d >= v->ndim || v->dims[d].sym != 0) return -1;
    return (double)v->dims[d].value;
}

static const kiln_value *arg(const kiln_node *n, const kiln_value *vals, int i, bool output) {
    int id = output ? (i < n->noutputs ? n->outputs[i] : -1) : (i < n->ninputs ? n->inputs[i] : -1);
    return id >= 0 ? &vals[id] : NULL;
}

static bool is_op(const kiln_node *n, const char *onnx, const char *fused) {
    bool kiln = n->domain && !strcmp(n->domain, KILN_FUSED_DOMAIN);
    return (!kiln && onnx && !strcmp(n->op_type, onnx)) || (kiln && fused && !strcmp(n->op_type, fused));
}

/* 2 x the multiply-adds of the node, or 0 when it is not one of the counted ops or a dim is unknown. */
static double node_flops(const kiln_node *n, const kiln_value *vals) {
    const kiln_value *a = arg(n, vals, 0, false), *b = arg(n, vals, 1, false), *y = arg(n, vals, 0, true);
    double out = numel(y), r = -1;
    if (out < 0) return 0;
    if (is_op(n, "MatMul", "FusedMatMul")) {
        r = 2 * out * dim(a, -1);
    } else if (is_op(n, "Gemm", "FusedGemm")) {
        r = 2 * out * dim(a, kiln_attr_int(n, "transA", 0) ? 0 : 1);
    } else if (is_op(n, "Conv", "FusedConv")) {
        double w = numel(b), cout = dim(b, 0);
        if (w >= 0 && cout > 0) r = 2 * out * (w / cout);
    } else if (is_op(n, "ConvTranspose", NULL)) {
        double w = numel(b), cin = dim(b, 0), x = numel(a);
        if (w >= 0 && cin > 0 && x >= 0) r = 2 * x * (w / cin);
    } else if (is_op(n, NULL, "Attention")) {
        int64_t layout = kiln_attr_int(n, "layout", 0); /* 1, 2: [B, S, H, D]; 2: K is in QKV [B, S, 3, H, D] */
        double dq = dim(a, -1), sk = layout == 0 ? dim(b, -2) : dim(layout == 2 ? a : b, 1), dv = dim(y, -1);
        if (dq >= 0 && sk >= 0 && dv > 0) r = 2 * (out / dv) * sk * (dq + dv);
    }
    return r > 0 ? r : 0;
}

void kiln_bench_node_cost(const kiln_node *n, const kiln_value *vals, double *flops, double *bytes) {
    double b = 0;
    for (int pass = 0; pass < 2; pass++) {
        int count = pass ? n->noutputs : n->ninputs;
        for (int i = 0; i < count; i++) {
            const kiln_value *v = arg(n, vals, i, pass == 1);
            double e = numel(v);
            if (e > 0) b += e * (double)kiln_dtype_size(v->dtype);
        }
    }
    *flops = node_flops(n, vals);
    *bytes = b;
}
