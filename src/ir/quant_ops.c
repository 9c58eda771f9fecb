/* quant_ops.c — reading and checking the attributes of kiln's integer layers (ir/quant_ops.h). */
#include "ir/quant_ops.h"

#include "core/status.h"

#include <math.h>
#include <string.h>

/* The value range of an 8-bit dtype. */
static void int8_range(kiln_dtype t, int32_t *lo, int32_t *hi) {
    *lo = t == KILN_I8 ? -128 : 0;
    *hi = t == KILN_I8 ? 127 : 255;
}

bool kiln_quant_dtype_ok(kiln_dtype t) { return t == KILN_U8 || t == KILN_I8 || t == KILN_U16 || t == KILN_I16; }

static bool positive_finite(float v) { return isfinite(v) && v > 0.0f; }

kiln_status kiln_quant_layer_read(const kiln_node *n, kiln_quant_layer *q) {
    memset(q, 0, sizeof *q);
    q->x_scale = kiln_attr_float(n, "x_scale", 0.0f);
    if (!positive_finite(q->x_scale))
        return kiln_error(KILN_ERR_INVALID_ARGUMENT, "%s: x_scale must be a positive finite float", n->op_type);
    int64_t xzp = kiln_attr_int(n, "x_zero_point", 0);
    if (xzp < -128 || xzp > 255)
        return kiln_error(KILN_ERR_INVALID_ARGUMENT, "%s: x_zero_point %lld is outside the 8-bit range", n->op_type,
                          (long long)xzp);
    q->x_zero_point = (int32_t)xzp;
    q->w_scale = kiln_attr_floats(n, "w_scale", &q->nw);
    if (q->nw < 1) return kiln_error(KILN_ERR_INVALID_ARGUMENT, "%s: w_scale is missing", n->op_type);
    for (int i = 0; i < q->nw; i++)
        if (!positive_finite(q->w_scale[i]))
            return kiln_error(KILN_ERR_INVALID_ARGUMENT, "%s: w_scale[%d] must be a positive finite float", n->op_type, i);
    q->w_zero_point = kiln_attr_ints(n, "w_zero_point", &q->nwzp);
    if (q->nwzp != 0 && q->nwzp != 1 && q->nwzp != q->nw)
        return kiln_error(KILN_ERR_INVALID_ARGUMENT, "%s: w_zero_point has %d values, w_scale %d", n->op_type, q->nwzp,
                          q->nw);
    for (int i = 0; i < q->nwzp; i++)
        if (q->w_zero_point[i] < -128 || q->w_zero_point[i] > 255)
            return kiln_error(KILN_ERR_INVALID_ARGUMENT, "%s: w_zero_point[%d] is outside the 8-bit range", n->op_type, i);
    KILN_TRY(kiln_fused_activation(n, &q->act));
    int64_t yd = kiln_attr_int(n, "y_dtype", KILN_F32);
    if (yd != KILN_F32 && yd != KILN_U8 && yd != KILN_I8)
        return kiln_error(KILN_ERR_INVALID_ARGUMENT, "%s: y_dtype %lld is not float32, uint8 or int8", n->op_type,
                          (long long)yd);
    q->y_dtype = (kiln_dtype)yd;
    if (kiln_node_attr(n, "r_scale")) {
        q->r_scale = kiln_attr_float(n, "r_scale", 0.0f);
        if (!positive_finite(q->r_scale))
            return kiln_error(KILN_ERR_INVALID_ARGUMENT, "%s: r_scale must be a positive finite float", n->op_type);
        int64_t rzp = kiln_attr_int(n, "r_zero_point", 0);
        if (rzp < -128 || rzp > 255)
            return kiln_error(KILN_ERR_INVALID_ARGUMENT, "%s: r_zero_point %lld is outside the 8-bit range", n->op_type,
                              (long long)rzp);
        q->r_zero_point = (int32_t)rzp;
    }
    if (q->y_dtype == KILN_F32) return KILN_OK;
    q->y_scale = kiln_attr_float(n, "y_scale", 0.0f);
    if (!positive_finite(q->y_scale))
        return kiln_error(KILN_ERR_INVALID_ARGUMENT, "%s: y_scale must be a positive finite float", n->op_type);
    int32_t lo, hi;
    int8_range(q->y_dtype, &lo, &hi);
    int64_t yzp = kiln_attr_int(n, "y_zero_point", 0);
    if (yzp < lo || yzp > hi)
        return kiln_error(KILN_ERR_INVALID_ARGUMENT, "%s: y_zero_point %lld is outside %s's range", n->op_type,
                          (long long)yzp, kiln_dtype_name(q->y_dtype));
    q->y_zero_point = (int32_t)yzp;
    return KILN_OK;
}

kiln_status kiln_fp8_layer_read(const kiln_node *n, kiln_fp8_layer *q) {
    q->x_scale = kiln_attr_float(n, "x_scale", 0.0f);
    q->w_scale = kiln_attr_float(n, "w_scale", 0.0f);
    if (!positive_finite(q->x_scale))
        return kiln_error(KILN_ERR_INVALID_ARGUMENT, "%s: x_scale must be a positive finite float", n->op_type);
    if (!positive_finite(q->w_scale))
        return kiln_error(KILN_ERR_INVALID_ARGUMENT, "%s: w_scale must be a positive finite float", n->op_type);
    const char *act = kiln_attr_string(n, "input_activation", ""); /* "" names KILN_ACT_NONE */
    int k = 0;
    while (k < KILN_ACT_COUNT && strcmp(kiln_activation_name((kiln_activation)k), act)) k++;
    if (k == KILN_ACT_COUNT || kiln_activation_nparams((kiln_activation)k) != 0)
        return kiln_error(KILN_ERR_INVALID_ARGUMENT, "%s: input_activation '%s' is not a parameterless activation of "
                          "fused_ops.h", n->op_type, act);
    q->in_act = (kiln_activation)k;
    return KILN_OK;
}

int kiln_graph_int8_layers(const kiln_graph *g) {
    int n = 0;
    for (int i = 0; i < g->nnodes; i++) {
        const kiln_node *node = &g->nodes[i];
        n += node->domain && !strcmp(node->domain, KILN_FUSED_DOMAIN) &&
             (!strcmp(node->op_type, "QConv") || !strcmp(node->op_type, "QMatMul"));
    }
    return n;
}

int kiln_graph_fp8_layers(const kiln_graph *g) {
    int n = 0;
    for (int i = 0; i < g->nnodes; i++)
        n += g->nodes[i].domain && !strcmp(g->nodes[i].domain, KILN_FUSED_DOMAIN) && !strcmp(g->nodes[i].op_type, "F8MatMul");
    return n;
}
