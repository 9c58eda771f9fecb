/* fp8_layer.c — turning a calibrated MatMul / Gemm into kiln.F8MatMul (fp8.h: kiln_fp8_layer_ok,
 * kiln_fp8_rewrite_layer): the weights rounded to E4M3 codes with one scale max|W| / 448, the
 * activation's scale its threshold / 448, a Gemm's bias kept as it is. */
#include "quant/fp8.h"

#include "core/status.h"
#include "ir/quant_ops.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

static bool default_op(const kiln_node *n, const char *op) {
    return (!n->domain[0] || !strcmp(n->domain, "ai.onnx")) && !strcmp(n->op_type, op);
}

bool kiln_fp8_layer_ok(const kiln_graph *g, const kiln_node *n) {
    bool mm = default_op(n, "MatMul"), gemm = default_op(n, "Gemm");
    if ((!mm && !gemm) || n->ninputs < 2 || n->inputs[0] < 0 || n->inputs[1] < 0) return false;
    const kiln_value *x = &g->values[n->inputs[0]], *w = &g->values[n->inputs[1]];
    if (x->constant || x->dtype != KILN_F32 || !w->constant || w->constant->dtype != KILN_F32 || w->constant->ndim != 2)
        return false;
    if (mm) return true;
    if (kiln_attr_int(n, "transA", 0) || kiln_attr_float(n, "alpha", 1.0f) != 1.0f || kiln_attr_float(n, "beta", 1.0f) != 1.0f)
        return false;
    if (n->ninputs < 3 || n->inputs[2] < 0) return true;
    /* a bias: a float32 constant of one value per output column */
    const kiln_tensor *c = g->values[n->inputs[2]].constant;
    int64_t N = w->constant->dims[kiln_attr_int(n, "transB", 0) ? 0 : 1];
    return c && c->dtype == KILN_F32 && kiln_tensor_numel(c) == N && c->dims[c->ndim > 0 ? c->ndim - 1 : 0] == N;
}

kiln_status kiln_fp8_rewrite_layer(kiln_graph *g, int layer, double threshold) {
    kiln_node *n = &g->nodes[layer];
    bool transB = default_op(n, "Gemm") && kiln_attr_int(n, "transB", 0);
    bool bias = default_op(n, "Gemm") && n->ninputs > 2 && n->inputs[2] >= 0;
    const kiln_tensor *w = g->values[n->inputs[1]].constant;
    int64_t K = w->dims[transB ? 1 : 0], N = w->dims[transB ? 0 : 1], dims[2] = {K, N};
    const float *wv = w->data;
    float amax = 0.0f;
    for (int64_t i = 0; i < K * N; i++) amax = fmaxf(amax, fabsf(wv[i]));
    float w_scale = amax > 0.0f ? (float)kiln_fp8_scale(amax) : 1.0f;
    float x_scale = threshold > 0.0 ? (float)kiln_fp8_scale(threshold) : 1.0f;
    kiln_tensor codes = {0};
    KILN_TRY(kiln_tensor_alloc(&codes, KILN_U8, 2, dims));
    uint8_t *c = codes.data;
    for (int64_t k = 0; k < K; k++)
        for (int64_t j = 0; j < N; j++) c[k * N + j] = kiln_f32_to_e4m3(wv[transB ? j * K + k : k * N + j] / w_scale);
    char hint[300];
    snprintf(hint, sizeof hint, "%.280s_e4m3", g->values[n->inputs[1]].name);
    int id;
    kiln_status s = kiln_graph_new_value(g, hint, &id);
    if (s == KILN_OK) s = kiln_graph_set_constant(g, id, &codes);
    kiln_tensor_release(&codes);
    KILN_TRY(s);
    KILN_TRY(kiln_graph_import_opset(g, KILN_FUSED_DOMAIN, KILN_FUSED_OPSET));
    n = &g->nodes[layer];
    n->domain = kiln_graph_strdup(g, KILN_FUSED_DOMAIN);
    n->op_type = kiln_graph_strdup(g, "F8MatMul");
    if (!n->domain || !n->op_type) return kiln_error(KILN_ERR_OUT_OF_MEMORY, "fp8: out of memory");
    n->opset = KILN_FUSED_OPSET;
    n->inputs[1] = id;
    n->ninputs = bias ? 3 : 2;
    n->nattrs = 0;
    kiln_attr *a = kiln_node_add_attr(g, n, "x_scale", KILN_ATTR_FLOAT); /* each add moves the array */
    if (a) a->f = x_scale;
    if (a && (a = kiln_node_add_attr(g, n, "w_scale", KILN_ATTR_FLOAT))) a->f = w_scale;
    return a ? KILN_OK : kiln_error(KILN_ERR_OUT_OF_MEMORY, "fp8: out of memory");
}
