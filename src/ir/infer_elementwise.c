/* infer_elementwise.c — shape and type inference for the elementwise op family: unary ops keep
 * their input's type (IsNaN/IsInf give bool), binary and variadic ops broadcast numpy-style (ONNX
 * opset < 7: the legacy `broadcast`/`axis` alignment, where the output has the first input's shape),
 * comparisons give bool, Where broadcasts three inputs, Cast/CastLike change the dtype only. */
#include "ir/op_schema.h"

#include "core/status.h"

/* Fails when inputs i and j both have known, different dtypes. */
static kiln_status same_dtype(const kiln_graph *g, const kiln_node *n, int i, int j) {
    kiln_value *a = kiln_node_input(g, n, i), *b = kiln_node_input(g, n, j);
    if (!a || !b || a->dtype == KILN_UNDEFINED || b->dtype == KILN_UNDEFINED || a->dtype == b->dtype) return KILN_OK;
    return kiln_error(KILN_ERR_INVALID_ARGUMENT, "%s: input %d is %s but input %d is %s", n->op_type, i,
                      kiln_dtype_name(a->dtype), j, kiln_dtype_name(b->dtype));
}

static kiln_status need_inputs(const kiln_graph *g, const kiln_node *n, int count) {
    for (int i = 0; i < count; i++)
        if (!kiln_node_input(g, n, i))
            return kiln_error(KILN_ERR_INVALID_ARGUMENT, "%s: input %d is missing", n->op_type, i);
    return KILN_OK;
}

/* Output 0 = input 0 (unary ops, Clip, PRelu). */
static kiln_status infer_unary(kiln_graph *g, kiln_node *n) {
    KILN_TRY(need_inputs(g, n, 1));
    kiln_infer_copy(g, n, 0, 0);
    return KILN_OK;
}

/* IsNaN, IsInf: a bool of the input's shape. */
static kiln_status infer_predicate(kiln_graph *g, kiln_node *n) {
    KILN_TRY(need_inputs(g, n, 1));
    kiln_value *x = kiln_node_input(g, n, 0);
    kiln_infer_set(g, n, 0, KILN_BOOL, x->ndim, x->dims);
    return KILN_OK;
}

static kiln_status infer_prelu(kiln_graph *g, kiln_node *n) {
    KILN_TRY(need_inputs(g, n, 2));
    KILN_TRY(same_dtype(g, n, 0, 1));
    kiln_infer_copy(g, n, 0, 0);
    return KILN_OK;
}

/* The broadcast shape of inputs 0 and 1; before opset 7, the first input's shape. */
static kiln_status binary_shape(kiln_graph *g, kiln_node *n, int *ndim, kiln_dim *dims) {
    KILN_TRY(need_inputs(g, n, 2));
    if (n->opset >= 1 && n->opset < 7) {
        kiln_value *a = kiln_node_input(g, n, 0);
        *ndim = a->ndim;
        for (int d = 0; d < a->ndim; d++) dims[d] = a->dims[d];
        return KILN_OK;
    }
    static const int idx[2] = {0, 1};
    kiln_status s = kiln_infer_broadcast(g, n, 2, idx, ndim, dims);
    return s == KILN_OK ? s : kiln_error_prefix(s, "%s", n->op_type);
}

/* Same-dtype binary ops whose output has the input dtype. */
static kiln_status infer_binary(kiln_graph *g, kiln_node *n) {
    int ndim;
    kiln_dim dims[KILN_MAX_DIMS];
    KILN_TRY(binary_shape(g, n, &ndim, dims));
    KILN_TRY(same_dtype(g, n, 0, 1));
    kiln_infer_set(g, n, 0, kiln_node_input(g, n, 0)->dtype, ndim, dims);
    return KILN_OK;
}

/* Comparisons: bool output. */
static kiln_status infer_compare(kiln_graph *g, kiln_node *n) {
    int ndim;
    kiln_dim dims[KILN_MAX_DIMS];
    KILN_TRY(binary_shape(g, n, &ndim, dims));
    KILN_TRY(same_dtype(g, n, 0, 1));
    kiln_infer_set(g, n, 0, KILN_BOOL, ndim, dims);
    return KILN_OK;
}

/* Pow: base and exponent may differ in dtype; the output has the base's. */
static kiln_status infer_pow(kiln_graph *g, kiln_node *n) {
    int ndim;
    kiln_dim dims[KILN_MAX_DIMS];
    KILN_TRY(binary_shape(g, n, &ndim, dims));
    kiln_infer_set(g, n, 0, kiln_node_input(g, n, 0)->dtype, ndim, dims);
    return KILN_OK;
}

/* Min, Max, Sum, Mean: any number of same-dtype inputs, broadcast together. */
static kiln_status infer_variadic(kiln_graph *g, kiln_node *n) {
    if (n->ninputs < 1) return kiln_error(KILN_ERR_INVALID_ARGUMENT, "%s: needs at least one input", n->op_type);
    if (n->ninputs > 1024) return kiln_error(KILN_ERR_INVALID_ARGUMENT, "%s: too many inputs (%d)", n->op_type, n->ninputs);
    KILN_TRY(need_inputs(g, n, n->ninputs));
    int idx[1024];
    for (int i = 0; i < n->ninputs; i++) {
        idx[i] = i;
        KILN_TRY(same_dtype(g, n, 0, i));
    }
    int ndim;
    kiln_dim dims[KILN_MAX_DIMS];
    kiln_status s = kiln_infer_broadcast(g, n, n->ninputs, idx, &ndim, dims);
    if (s != KILN_OK) return kiln_error_prefix(s, "%s", n->op_type);
    kiln_infer_set(g, n, 0, kiln_node_input(g, n, 0)->dtype, ndim, dims);
    return KILN_OK;
}

static kiln_status infer_where(kiln_graph *g, kiln_node *n) {
    KILN_TRY(need_inputs(g, n, 3));
    kiln_value *c = kiln_node_input(g, n, 0);
    if (c->dtype != KILN_UNDEFINED && c->dtype != KILN_BOOL)
        return kiln_error(KILN_ERR_INVALID_ARGUMENT, "Where: condition must be bool, not %s", kiln_dtype_name(c->dtype));
    KILN_TRY(same_dtype(g, n, 1, 2));
    static const int idx[3] = {0, 1, 2};
    int ndim;
    kiln_dim dims[KILN_MAX_DIMS];
    kiln_status s = kiln_infer_broadcast(g, n, 3, idx, &ndim, dims);
    if (s != KILN_OK) return kiln_error_prefix(s, "Where");
    kiln_infer_set(g, n, 0, kiln_node_input(g, n, 1)->dtype, ndim, dims);
    return KILN_OK;
}

static kiln_status infer_cast(kiln_graph *g, kiln_node *n) {
    KILN_TRY(need_inputs(g, n, 1));
    const kiln_attr *to = kiln_node_attr(n, "to");
    if (!to || to->type != KILN_ATTR_INT)
        return kiln_error(KILN_ERR_INVALID_ARGUMENT, "Cast: integer attribute 'to' is missing");
    if (to->i <= KILN_UNDEFINED || to->i >= KILN_DTYPE_COUNT)
        return kiln_error(KILN_ERR_UNSUPPORTED, "Cast: target type %lld is not supported", (long long)to->i);
    kiln_value *x = kiln_node_input(g, n, 0);
    kiln_infer_set(g, n, 0, (kiln_dtype)to->i, x->ndim, x->dims);
    return KILN_OK;
}

static kiln_status infer_castlike(kiln_graph *g, kiln_node *n) {
    KILN_TRY(need_inputs(g, n, 2));
    kiln_value *x = kiln_node_input(g, n, 0);
    kiln_infer_set(g, n, 0, kiln_node_input(g, n, 1)->dtype, x->ndim, x->dims);
    return KILN_OK;
}

const kiln_op_schema kiln_schemas_elementwise[] = {
    /* unary */
    {"Abs", "", 1, 0, infer_unary},
    {"Neg", "", 1, 0, infer_unary},
    {"Exp", "", 1, 0, infer_unary},
    {"Log", "", 1, 0, infer_unary},
    {"Sqrt", "", 1, 0, infer_unary},
    {"Reciprocal", "", 1, 0, infer_unary},
    {"Sign", "", 9, 0, infer_unary},
    {"Sin", "", 7, 0, infer_unary},
    {"Cos", "", 7, 0, infer_unary},
    {"Tan", "", 7, 0, infer_unary},
    {"Asin", "", 7, 0, infer_unary},
    {"Acos", "", 7, 0, infer_unary},
    {"Atan", "", 7, 0, infer_unary},
    {"Sinh", "", 9, 0, infer_unary},
    {"Cosh", "", 9, 0, infer_unary},
    {"Asinh", "", 9, 0, infer_unary},
    {"Acosh", "", 9, 0, infer_unary},
    {"Atanh", "", 9, 0, infer_unary},
    {"Erf", "", 9, 0, infer_unary},
    {"Tanh", "", 1, 0, infer_unary},
    {"Sigmoid", "", 1, 0, infer_unary},
    {"Relu", "", 1, 0, infer_unary},
    {"LeakyRelu", "", 1, 0, infer_unary},
    {"Elu", "", 1, 0, infer_unary},
    {"Selu", "", 1, 0, infer_unary},
    {"Celu", "", 12, 0, infer_unary},
    {"HardSigmoid", "", 1, 0, infer_unary},
    {"HardSwish", "", 14, 0, infer_unary},
    {"Gelu", "", 20, 0, infer_unary},
    {"Softplus", "", 1, 0, infer_unary},
    {"Softsign", "", 1, 0, infer_unary},
    {"Mish", "", 18, 0, infer_unary},
    {"ThresholdedRelu", "", 10, 0, infer_unary},
    {"Floor", "", 1, 0, infer_unary},
    {"Ceil", "", 1, 0, infer_unary},
    {"Round", "", 11, 0, infer_unary},
    {"IsNaN", "", 9, 0, infer_predicate},
    {"IsInf", "", 10, 0, infer_predicate},
    {"Not", "", 1, 0, infer_unary},
    {"BitwiseNot", "", 18, 0, infer_unary},
    {"Clip", "", 1, 0, infer_unary},
    /* binary */
    {"Add", "", 1, 0, infer_binary},
    {"Sub", "", 1, 0, infer_binary},
    {"Mul", "", 1, 0, infer_binary},
    {"Div", "", 1, 0, infer_binary},
    {"Pow", "", 1, 0, infer_pow},
    {"Mod", "", 10, 0, infer_binary},
    {"PRelu", "", 1, 0, infer_prelu},
    {"Equal", "", 1, 0, infer_compare},
    {"Less", "", 1, 0, infer_compare},
    {"Greater", "", 1, 0, infer_compare},
    {"LessOrEqual", "", 12, 0, infer_compare},
    {"GreaterOrEqual", "", 12, 0, infer_compare},
    {"And", "", 1, 0, infer_binary},
    {"Or", "", 1, 0, infer_binary},
    {"Xor", "", 1, 0, infer_binary},
    {"BitShift", "", 11, 0, infer_binary},
    {"BitwiseAnd", "", 18, 0, infer_binary},
    {"BitwiseOr", "", 18, 0, infer_binary},
    {"BitwiseXor", "", 18, 0, infer_binary},
    /* variadic and ternary */
    {"Min", "", 1, 0, infer_variadic},
    {"Max", "", 1, 0, infer_variadic},
    {"Sum", "", 1, 0, infer_variadic},
    {"Mean", "", 1, 0, infer_variadic},
    {"Where", "", 9, 0, infer_where},
    /* casts (Cast-1 named the target type with a string; from opset 6 it is the dtype number) */
    {"Cast", "", 6, 0, infer_cast},
    {"CastLike", "", 15, 0, infer_castlike},
    {0},
};
