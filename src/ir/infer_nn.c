/* infer_nn.c — shape and type inference for the nn op family: convolutions, pooling, Gemm/MatMul,
 * the normalizations, the softmax family and LRN. Window geometry comes from nn_window.c so that
 * these shapes are exactly the ones the kernels produce. */
#include "core/ckd.h"
#include "core/status.h"
#include "ir/nn_window.h"
#include "ir/op_schema.h"

#include <string.h>

static bool is_float_dtype(kiln_dtype t) { return t == KILN_F32 || t == KILN_F16 || t == KILN_F64 || t == KILN_BF16; }

static bool is_int_dtype(kiln_dtype t) {
    return t == KILN_I8 || t == KILN_I16 || t == KILN_I32 || t == KILN_I64 || t == KILN_U8 || t == KILN_U16 ||
           t == KILN_U32 || t == KILN_U64;
}

/* Fails unless input i (when present and typed) has a float dtype, or (allow_int) an integer one. */
static kiln_status check_dtype(const kiln_graph *g, const kiln_node *n, int i, bool allow_int) {
    kiln_value *v = kiln_node_input(g, n, i);
    if (!v || v->dtype == KILN_UNDEFINED || is_float_dtype(v->dtype) || (allow_int && is_int_dtype(v->dtype)))
        return KILN_OK;
    return kiln_error(KILN_ERR_INVALID_ARGUMENT, "%s does not accept %s input %d", n->op_type,
                      kiln_dtype_name(v->dtype), i);
}

static bool dim_is(kiln_dim d, int64_t v) { return d.sym == 0 && d.value == v; }

/* Fails when two dims are both static and differ. */
static kiln_status check_dim_eq(const kiln_node *n, kiln_dim a, kiln_dim b, const char *what) {
    if (a.sym == 0 && b.sym == 0 && a.value != b.value)
        return kiln_error(KILN_ERR_SHAPE, "%s: %s (%lld vs %lld)", n->op_type, what, (long long)a.value,
                          (long long)b.value);
    return KILN_OK;
}

/* Fails when input i is present with a known rank other than want. */
static kiln_status check_rank(const kiln_graph *g, const kiln_node *n, int i, int want) {
    kiln_value *v = kiln_node_input(g, n, i);
    if (v && v->ndim >= 0 && v->ndim != want)
        return kiln_error(KILN_ERR_SHAPE, "%s: input %d must have rank %d, has rank %d", n->op_type, i, want, v->ndim);
    return KILN_OK;
}

/* Output 0 gets input 0's dtype and shape (for elementwise-shaped ops) after a dtype check. */
static kiln_status infer_same_float(kiln_graph *g, kiln_node *n) {
    KILN_TRY(check_dtype(g, n, 0, false));
    kiln_infer_copy(g, n, 0, 0);
    return KILN_OK;
}

/* ---------------------------------------------------------------- convolution */

/* Conv: X [N, C, D1..Dk], W [M, C/group, k1..kk], B [M] -> Y [N, M, O1..Ok]. */
static kiln_status infer_conv(kiln_graph *g, kiln_node *n) {
    KILN_TRY(check_dtype(g, n, 0, false));
    kiln_value *x = kiln_node_input(g, n, 0), *w = kiln_node_input(g, n, 1), *b = kiln_node_input(g, n, 2);
    if (!x || !w) return kiln_error(KILN_ERR_INVALID_ARGUMENT, "Conv needs inputs X and W");
    kiln_dtype dt = x->dtype != KILN_UNDEFINED ? x->dtype : w->dtype;
    int rank;
    kiln_dim out[KILN_MAX_DIMS];
    KILN_TRY(kiln_window_conv_shape(n, x, w, &rank, out));
    if (rank < 0) {
        kiln_infer_set(g, n, 0, dt, -1, NULL);
        return KILN_OK;
    }
    if (b && b->ndim >= 0) {
        KILN_TRY(check_rank(g, n, 2, 1));
        KILN_TRY(check_dim_eq(n, b->dims[0], out[1], "bias length differs from the output channels"));
    }
    kiln_infer_set(g, n, 0, dt, rank, out);
    return KILN_OK;
}

/* ConvTranspose: X [N, C, D1..Dk], W [C, M/group, k1..kk], B [M] -> Y [N, M, O1..Ok]. */
static kiln_status infer_conv_transpose(kiln_graph *g, kiln_node *n) {
    KILN_TRY(check_dtype(g, n, 0, false));
    kiln_value *x = kiln_node_input(g, n, 0), *w = kiln_node_input(g, n, 1), *b = kiln_node_input(g, n, 2);
    if (!x || !w) return kiln_error(KILN_ERR_INVALID_ARGUMENT, "ConvTranspose needs inputs X and W");
    kiln_dtype dt = x->dtype != KILN_UNDEFINED ? x->dtype : w->dtype;
    int rank = x->ndim >= 0 ? x->ndim : w->ndim;
    if (rank < 0) {
        kiln_infer_set(g, n, 0, dt, -1, NULL);
        return KILN_OK;
    }
    if (rank < 3) return kiln_error(KILN_ERR_SHAPE, "ConvTranspose input must have rank >= 3, has rank %d", rank);
    if (w->ndim >= 0 && w->ndim != rank)
        return kiln_error(KILN_ERR_SHAPE, "ConvTranspose weights have rank %d but the input has rank %d", w->ndim, rank);
    int nsp = rank - 2;
    int64_t group = kiln_attr_int(n, "group", 1);
    if (group < 1) return kiln_error(KILN_ERR_INVALID_ARGUMENT, "ConvTranspose group must be >= 1");
    int64_t wk[KILN_MAX_DIMS];
    bool wk_known = w->ndim == rank;
    for (int i = 0; wk_known && i < nsp; i++) {
        wk_known = kiln_dim_is_static(w->dims[2 + i]);
        wk[i] = w->dims[2 + i].value;
    }
    kiln_window win;
    KILN_TRY(kiln_window_parse(n, nsp, wk_known ? wk : NULL, &win));
    kiln_dim out[KILN_MAX_DIMS];
    out[0] = x->ndim >= 0 ? x->dims[0] : KILN_DIM_UNKNOWN;
    out[1] = KILN_DIM_UNKNOWN;
    if (w->ndim >= 0) {
        if (x->ndim >= 0) KILN_TRY(check_dim_eq(n, x->dims[1], w->dims[0], "input channels differ from weight dim 0"));
        if (w->dims[0].sym == 0 && w->dims[0].value % group)
            return kiln_error(KILN_ERR_SHAPE, "ConvTranspose input channels %lld are not divisible by group %lld",
                              (long long)w->dims[0].value, (long long)group);
        int64_t oc;
        if (w->dims[1].sym == 0 && !kiln_mul_i64_ok(w->dims[1].value, group, &oc))
            return kiln_error(KILN_ERR_SHAPE, "ConvTranspose: %lld output channels per group x group %lld overflow",
                              (long long)w->dims[1].value, (long long)group);
        if (w->dims[1].sym == 0) out[1] = kiln_dim_static(oc);
        else if (group == 1) out[1] = w->dims[1];
    }
    if (b && b->ndim >= 0) {
        KILN_TRY(check_rank(g, n, 2, 1));
        KILN_TRY(check_dim_eq(n, b->dims[0], out[1], "bias length differs from the output channels"));
    }
    for (int i = 0; i < nsp; i++) {
        out[2 + i] = KILN_DIM_UNKNOWN;
        if (win.has_out_shape) {
            out[2 + i] = kiln_dim_static(win.out_shape[i]);
        } else if (x->ndim >= 0 && kiln_dim_is_static(x->dims[2 + i]) && win.has_kernel) {
            int64_t o, pb;
            KILN_TRY(kiln_window_out_transpose(&win, i, x->dims[2 + i].value, &o, &pb));
            out[2 + i] = kiln_dim_static(o);
        }
    }
    kiln_infer_set(g, n, 0, dt, rank, out);
    return KILN_OK;
}

/* ---------------------------------------------------------------- pooling */

/* MaxPool / AveragePool / LpPool: X [N, C, D1..Dk] -> Y [N, C, O1..Ok] (+ MaxPool Indices, int64). */
static kiln_status infer_pool(kiln_graph *g, kiln_node *n) {
    bool is_max = !strcmp(n->op_type, "MaxPool");
    kiln_value *x = kiln_node_input(g, n, 0);
    if (!x) return kiln_error(KILN_ERR_INVALID_ARGUMENT, "%s needs input X", n->op_type);
    if (is_max && (x->dtype == KILN_I8 || x->dtype == KILN_U8)) {
        if (n->opset < 12)
            return kiln_error(KILN_ERR_INVALID_ARGUMENT, "MaxPool accepts %s only from opset 12",
                              kiln_dtype_name(x->dtype));
    } else {
        KILN_TRY(check_dtype(g, n, 0, false));
    }
    if (!kiln_node_attr(n, "kernel_shape"))
        return kiln_error(KILN_ERR_INVALID_ARGUMENT, "%s needs the kernel_shape attribute", n->op_type);
    if (is_max && (uint64_t)kiln_attr_int(n, "storage_order", 0) > 1)
        return kiln_error(KILN_ERR_INVALID_ARGUMENT, "MaxPool storage_order must be 0 or 1");
    if ((uint64_t)kiln_attr_int(n, "count_include_pad", 0) > 1)
        return kiln_error(KILN_ERR_INVALID_ARGUMENT, "%s count_include_pad must be 0 or 1", n->op_type);
    if (!strcmp(n->op_type, "AveragePool") && n->opset < 19 && kiln_node_attr(n, "dilations"))
        return kiln_error(KILN_ERR_INVALID_ARGUMENT, "AveragePool accepts dilations only from opset 19");
    if (!strcmp(n->op_type, "LpPool") && !(kiln_attr_float(n, "p", 2.0f) > 0.0f))
        return kiln_error(KILN_ERR_INVALID_ARGUMENT, "LpPool p must be positive");
    if (x->ndim < 0) {
        kiln_infer_set(g, n, 0, x->dtype, -1, NULL);
        if (is_max) kiln_infer_set(g, n, 1, KILN_I64, -1, NULL);
        return KILN_OK;
    }
    if (x->ndim < 3) return kiln_error(KILN_ERR_SHAPE, "%s input must have rank >= 3, has rank %d", n->op_type, x->ndim);
    int nsp = x->ndim - 2;
    kiln_window win;
    KILN_TRY(kiln_window_parse(n, nsp, NULL, &win));
    kiln_dim out[KILN_MAX_DIMS];
    out[0] = x->dims[0];
    out[1] = x->dims[1];
    for (int i = 0; i < nsp; i++) {
        out[2 + i] = KILN_DIM_UNKNOWN;
        if (kiln_dim_is_static(x->dims[2 + i])) {
            int64_t o, pb, pe;
            KILN_TRY(kiln_window_out(&win, i, x->dims[2 + i].value, &o, &pb, &pe));
            out[2 + i] = kiln_dim_static(o);
        }
    }
    kiln_infer_set(g, n, 0, x->dtype, x->ndim, out);
    if (is_max) kiln_infer_set(g, n, 1, KILN_I64, x->ndim, out);
    return KILN_OK;
}

/* GlobalAveragePool / GlobalMaxPool / GlobalLpPool: X [N, C, D1..Dk] -> Y [N, C, 1..1]. */
static kiln_status infer_global_pool(kiln_graph *g, kiln_node *n) {
    KILN_TRY(check_dtype(g, n, 0, false));
    kiln_value *x = kiln_node_input(g, n, 0);
    if (!x) return kiln_error(KILN_ERR_INVALID_ARGUMENT, "%s needs input X", n->op_type);
    if (x->ndim < 0) {
        kiln_infer_set(g, n, 0, x->dtype, -1, NULL);
        return KILN_OK;
    }
    if (x->ndim < 2) return kiln_error(KILN_ERR_SHAPE, "%s input must have rank >= 2, has rank %d", n->op_type, x->ndim);
    kiln_dim out[KILN_MAX_DIMS];
    for (int i = 0; i < x->ndim; i++) out[i] = i < 2 ? x->dims[i] : kiln_dim_static(1);
    kiln_infer_set(g, n, 0, x->dtype, x->ndim, out);
    return KILN_OK;
}

/* ---------------------------------------------------------------- products */

/* Gemm: Y [M, N] = alpha * A' [M, K] * B' [K, N] + beta * C (C unidirectionally broadcast to [M, N]). */
static kiln_status infer_gemm(kiln_graph *g, kiln_node *n) {
    KILN_TRY(check_dtype(g, n, 0, true));
    kiln_value *a = kiln_node_input(g, n, 0), *b = kiln_node_input(g, n, 1), *c = kiln_node_input(g, n, 2);
    if (!a || !b) return kiln_error(KILN_ERR_INVALID_ARGUMENT, "Gemm needs inputs A and B");
    if (n->opset < 11 && !c) return kiln_error(KILN_ERR_INVALID_ARGUMENT, "Gemm before opset 11 needs input C");
    KILN_TRY(check_rank(g, n, 0, 2));
    KILN_TRY(check_rank(g, n, 1, 2));
    bool ta = kiln_attr_int(n, "transA", 0) != 0, tb = kiln_attr_int(n, "transB", 0) != 0;
    kiln_dim out[2] = {KILN_DIM_UNKNOWN, KILN_DIM_UNKNOWN};
    kiln_dim ka = KILN_DIM_UNKNOWN, kb = KILN_DIM_UNKNOWN;
    if (a->ndim == 2) {
        out[0] = a->dims[ta ? 1 : 0];
        ka = a->dims[ta ? 0 : 1];
    }
    if (b->ndim == 2) {
        out[1] = b->dims[tb ? 0 : 1];
        kb = b->dims[tb ? 1 : 0];
    }
    KILN_TRY(check_dim_eq(n, ka, kb, "inner dimensions of A and B differ"));
    if (c && c->ndim >= 0) {
        if (c->ndim > 2) return kiln_error(KILN_ERR_SHAPE, "Gemm C must have rank <= 2, has rank %d", c->ndim);
        for (int i = 0; i < c->ndim; i++) {
            kiln_dim cd = c->dims[i], od = out[2 - c->ndim + i];
            if (!dim_is(cd, 1)) KILN_TRY(check_dim_eq(n, cd, od, "C cannot be broadcast to the output"));
        }
    }
    kiln_infer_set(g, n, 0, a->dtype != KILN_UNDEFINED ? a->dtype : b->dtype, 2, out);
    return KILN_OK;
}

/* MatMul: numpy matmul (batch dims broadcast, a 1-D operand gains and then loses a unit dim). */
static kiln_status infer_matmul(kiln_graph *g, kiln_node *n) {
    KILN_TRY(check_dtype(g, n, 0, true));
    kiln_value *a = kiln_node_input(g, n, 0), *b = kiln_node_input(g, n, 1);
    if (!a || !b) return kiln_error(KILN_ERR_INVALID_ARGUMENT, "MatMul needs inputs A and B");
    kiln_dtype dt = a->dtype != KILN_UNDEFINED ? a->dtype : b->dtype;
    if (a->ndim < 0 || b->ndim < 0) {
        kiln_infer_set(g, n, 0, dt, -1, NULL);
        return KILN_OK;
    }
    if (a->ndim == 0 || b->ndim == 0) return kiln_error(KILN_ERR_SHAPE, "MatMul operands must have rank >= 1");
    kiln_dim ad[KILN_MAX_DIMS], bd[KILN_MAX_DIMS];
    int ra = a->ndim, rb = b->ndim;
    memcpy(ad, a->dims, (size_t)ra * sizeof *ad);
    memcpy(bd, b->dims, (size_t)rb * sizeof *bd);
    if (ra == 1) { ad[1] = ad[0]; ad[0] = kiln_dim_static(1); ra = 2; }
    if (rb == 1) { bd[1] = kiln_dim_static(1); rb = 2; }
    KILN_TRY(check_dim_eq(n, ad[ra - 1], bd[rb - 2], "inner dimensions differ"));
    int nb = (ra > rb ? ra : rb) - 2;
    kiln_dim out[KILN_MAX_DIMS];
    for (int i = 0; i < nb; i++) {
        int ia = i - (nb - (ra - 2)), ib = i - (nb - (rb - 2));
        kiln_dim da = ia >= 0 ? ad[ia] : kiln_dim_static(1), db = ib >= 0 ? bd[ib] : kiln_dim_static(1);
        if (dim_is(da, 1)) out[i] = db;
        else if (dim_is(db, 1)) out[i] = da;
        else if (da.sym == 0 && db.sym == 0) {
            if (da.value != db.value)
                return kiln_error(KILN_ERR_SHAPE, "MatMul batch dimensions %lld and %lld cannot be broadcast",
                                  (long long)da.value, (long long)db.value);
            out[i] = da;
        } else if (da.sym > 0 && da.sym == db.sym) out[i] = da;
        else if (da.sym == 0) out[i] = da;
        else if (db.sym == 0) out[i] = db;
        else out[i] = KILN_DIM_UNKNOWN;
    }
    int r = nb;
    if (a->ndim > 1) out[r++] = ad[ra - 2];
    if (b->ndim > 1) out[r++] = bd[rb - 1];
    kiln_infer_set(g, n, 0, dt, r, out);
    return KILN_OK;
}

/* ---------------------------------------------------------------- normalization */

/* Fails when 1-D parameter input i (if present with a known shape) is not [want]. */
static kiln_status check_param_len(const kiln_graph *g, const kiln_node *n, int i, kiln_dim want, const char *what) {
    kiln_value *v = kiln_node_input(g, n, i);
    if (!v || v->ndim < 0) return KILN_OK;
    if (v->ndim != 1)
        return kiln_error(KILN_ERR_SHAPE, "%s: %s (input %d) must be 1-D, has rank %d", n->op_type, what, i, v->ndim);
    return check_dim_eq(n, v->dims[0], want, what);
}

/* BatchNormalization (inference form): Y = scale * (X - mean) / sqrt(var + eps) + B per channel. */
static kiln_status infer_batchnorm(kiln_graph *g, kiln_node *n) {
    if (n->opset >= 14 && kiln_attr_int(n, "training_mode", 0) != 0)
        return kiln_error(KILN_ERR_UNSUPPORTED, "BatchNormalization with training_mode=1 is not supported "
                                                "(kiln runs inference only)");
    for (int i = 1; i < n->noutputs; i++)
        if (kiln_node_output(g, n, i))
            return kiln_error(KILN_ERR_UNSUPPORTED, "BatchNormalization in training form (output %d requested) is "
                                                    "not supported (kiln runs inference only)", i);
    if (n->ninputs < 5) return kiln_error(KILN_ERR_INVALID_ARGUMENT, "BatchNormalization needs 5 inputs");
    KILN_TRY(check_dtype(g, n, 0, false));
    kiln_value *x = kiln_node_input(g, n, 0);
    if (!x) return kiln_error(KILN_ERR_INVALID_ARGUMENT, "BatchNormalization needs input X");
    if (x->ndim >= 0 && x->ndim < 2)
        return kiln_error(KILN_ERR_SHAPE, "BatchNormalization input must have rank >= 2, has rank %d", x->ndim);
    bool spatial = n->opset >= 9 || kiln_attr_int(n, "spatial", 1) != 0;
    if (x->ndim >= 2 && spatial)
        for (int i = 1; i < 5; i++) KILN_TRY(check_param_len(g, n, i, x->dims[1], "parameter length differs from C"));
    kiln_infer_copy(g, n, 0, 0);
    return KILN_OK;
}

/* InstanceNormalization: per (n, c) normalization over the spatial dims; scale and B are [C]. */
static kiln_status infer_instancenorm(kiln_graph *g, kiln_node *n) {
    KILN_TRY(check_dtype(g, n, 0, false));
    kiln_value *x = kiln_node_input(g, n, 0);
    if (!x || n->ninputs < 3 || !kiln_node_input(g, n, 1) || !kiln_node_input(g, n, 2))
        return kiln_error(KILN_ERR_INVALID_ARGUMENT, "InstanceNormalization needs inputs X, scale and B");
    if (x->ndim >= 0 && x->ndim < 2)
        return kiln_error(KILN_ERR_SHAPE, "InstanceNormalization input must have rank >= 2, has rank %d", x->ndim);
    if (x->ndim >= 2)
        for (int i = 1; i < 3; i++) KILN_TRY(check_param_len(g, n, i, x->dims[1], "parameter length differs from C"));
    kiln_infer_copy(g, n, 0, 0);
    return KILN_OK;
}

/* GroupNormalization: scale/bias are [num_groups] (opset 18) or [C] (opset 21). */
static kiln_status infer_groupnorm(kiln_graph *g, kiln_node *n) {
    KILN_TRY(check_dtype(g, n, 0, false));
    kiln_value *x = kiln_node_input(g, n, 0);
    if (!x || n->ninputs < 3 || !kiln_node_input(g, n, 1) || !kiln_node_input(g, n, 2))
        return kiln_error(KILN_ERR_INVALID_ARGUMENT, "GroupNormalization needs inputs X, scale and bias");
    const kiln_attr *ng = kiln_node_attr(n, "num_groups");
    if (!ng || ng->type != KILN_ATTR_INT || ng->i < 1)
        return kiln_error(KILN_ERR_INVALID_ARGUMENT, "GroupNormalization needs a positive num_groups attribute");
    if (x->ndim >= 0 && x->ndim < 2)
        return kiln_error(KILN_ERR_SHAPE, "GroupNormalization input must have rank >= 2, has rank %d", x->ndim);
    if (x->ndim >= 2) {
        kiln_dim c = x->dims[1];
        if (c.sym == 0 && c.value % ng->i)
            return kiln_error(KILN_ERR_SHAPE, "GroupNormalization: %lld channels are not divisible by %lld groups",
                              (long long)c.value, (long long)ng->i);
        kiln_dim want = n->opset >= 21 ? c : kiln_dim_static(ng->i);
        for (int i = 1; i < 3; i++) KILN_TRY(check_param_len(g, n, i, want, "parameter length is wrong"));
    }
    kiln_infer_copy(g, n, 0, 0);
    return KILN_OK;
}

/* Fails when input i (if present with a known rank) cannot be unidirectionally broadcast to x. */
static kiln_status check_unidirectional(const kiln_graph *g, const kiln_node *n, int i, const kiln_value *x) {
    kiln_value *v = kiln_node_input(g, n, i);
    if (!v || v->ndim < 0 || x->ndim < 0) return KILN_OK;
    if (v->ndim > x->ndim)
        return kiln_error(KILN_ERR_SHAPE, "%s: input %d has rank %d, above the rank %d of X", n->op_type, i, v->ndim,
                          x->ndim);
    for (int d = 0; d < v->ndim; d++) {
        kiln_dim vd = v->dims[d], xd = x->dims[x->ndim - v->ndim + d];
        if (!dim_is(vd, 1)) KILN_TRY(check_dim_eq(n, vd, xd, "an input cannot be broadcast to X"));
    }
    return KILN_OK;
}

/* LayerNormalization: Y like X; Mean and InvStdDev [d0..d(axis-1), 1..1] of the stash type. */
static kiln_status infer_layernorm(kiln_graph *g, kiln_node *n) {
    KILN_TRY(check_dtype(g, n, 0, false));
    kiln_value *x = kiln_node_input(g, n, 0);
    if (!x || !kiln_node_input(g, n, 1))
        return kiln_error(KILN_ERR_INVALID_ARGUMENT, "LayerNormalization needs inputs X and Scale");
    kiln_dtype stash = (kiln_dtype)kiln_attr_int(n, "stash_type", KILN_F32);
    if (!is_float_dtype(stash))
        return kiln_error(KILN_ERR_INVALID_ARGUMENT, "LayerNormalization stash_type %d is not a float type", (int)stash);
    KILN_TRY(check_unidirectional(g, n, 1, x));
    KILN_TRY(check_unidirectional(g, n, 2, x));
    kiln_infer_copy(g, n, 0, 0);
    if (x->ndim < 0) {
        kiln_infer_set(g, n, 1, stash, -1, NULL);
        kiln_infer_set(g, n, 2, stash, -1, NULL);
        return KILN_OK;
    }
    int axis;
    KILN_TRY(kiln_axis_normalize(kiln_attr_int(n, "axis", -1), x->ndim, &axis));
    kiln_dim md[KILN_MAX_DIMS];
    for (int i = 0; i < x->ndim; i++) md[i] = i < axis ? x->dims[i] : kiln_dim_static(1);
    kiln_infer_set(g, n, 1, stash, x->ndim, md);
    kiln_infer_set(g, n, 2, stash, x->ndim, md);
    return KILN_OK;
}

/* RMSNormalization: Y like X. */
static kiln_status infer_rmsnorm(kiln_graph *g, kiln_node *n) {
    KILN_TRY(check_dtype(g, n, 0, false));
    kiln_value *x = kiln_node_input(g, n, 0);
    if (!x || !kiln_node_input(g, n, 1))
        return kiln_error(KILN_ERR_INVALID_ARGUMENT, "RMSNormalization needs inputs X and scale");
    KILN_TRY(check_unidirectional(g, n, 1, x));
    if (x->ndim >= 0) {
        int axis;
        KILN_TRY(kiln_axis_normalize(kiln_attr_int(n, "axis", -1), x->ndim, &axis));
    }
    kiln_infer_copy(g, n, 0, 0);
    return KILN_OK;
}

/* Softmax / LogSoftmax / Hardmax: Y like X; the axis must be valid for the rank. */
static kiln_status infer_softmax(kiln_graph *g, kiln_node *n) {
    KILN_TRY(check_dtype(g, n, 0, false));
    kiln_value *x = kiln_node_input(g, n, 0);
    if (!x) return kiln_error(KILN_ERR_INVALID_ARGUMENT, "%s needs input X", n->op_type);
    if (x->ndim >= 0) {
        int axis;
        KILN_TRY(kiln_axis_normalize(kiln_attr_int(n, "axis", n->opset >= 13 ? -1 : 1), x->ndim, &axis));
    }
    kiln_infer_copy(g, n, 0, 0);
    return KILN_OK;
}

/* LRN: Y like X, X of rank >= 3 ([N, C, D1..]). */
static kiln_status infer_lrn(kiln_graph *g, kiln_node *n) {
    kiln_value *x = kiln_node_input(g, n, 0);
    const kiln_attr *size = kiln_node_attr(n, "size");
    if (!size || size->type != KILN_ATTR_INT || size->i < 1)
        return kiln_error(KILN_ERR_INVALID_ARGUMENT, "LRN needs a positive 'size' attribute");
    if (x && x->ndim >= 0 && x->ndim < 3)
        return kiln_error(KILN_ERR_SHAPE, "LRN input must have rank >= 3, has rank %d", x->ndim);
    return infer_same_float(g, n);
}

const kiln_op_schema kiln_schemas_nn[] = {
    {"Conv", "", 1, 0, infer_conv},
    {"ConvTranspose", "", 1, 0, infer_conv_transpose},
    {"MaxPool", "", 1, 0, infer_pool},
    {"AveragePool", "", 1, 0, infer_pool},
    {"LpPool", "", 1, 0, infer_pool},
    {"GlobalAveragePool", "", 1, 0, infer_global_pool},
    {"GlobalMaxPool", "", 1, 0, infer_global_pool},
    {"GlobalLpPool", "", 1, 0, infer_global_pool},
    {"Gemm", "", 1, 0, infer_gemm},
    {"MatMul", "", 1, 0, infer_matmul},
    {"BatchNormalization", "", 6, 0, infer_batchnorm},
    {"InstanceNormalization", "", 1, 0, infer_instancenorm},
    {"GroupNormalization", "", 18, 0, infer_groupnorm},
    {"LayerNormalization", "", 17, 0, infer_layernorm},
    {"RMSNormalization", "", 23, 0, infer_rmsnorm},
    {"Softmax", "", 1, 0, infer_softmax},
    {"LogSoftmax", "", 1, 0, infer_softmax},
    {"Hardmax", "", 1, 0, infer_softmax},
    {"LRN", "", 1, 0, infer_lrn},
    {0},
};
