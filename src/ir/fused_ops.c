/* fused_ops.c — the helpers every user of the kiln-domain fused ops shares: activation names and
 * their attribute parsing, the ONNX pool a FusedPool computes, and the validation of
 * ElementwiseChain programs. */
#include "ir/fused_ops.h"

#include "core/status.h"

#include <string.h>

static const char *const g_act_names[KILN_ACT_COUNT] = {
    [KILN_ACT_NONE] = "",
    [KILN_ACT_RELU] = "Relu",
    [KILN_ACT_LEAKY_RELU] = "LeakyRelu",
    [KILN_ACT_CLIP] = "Clip",
    [KILN_ACT_SIGMOID] = "Sigmoid",
    [KILN_ACT_TANH] = "Tanh",
    [KILN_ACT_HARD_SIGMOID] = "HardSigmoid",
    [KILN_ACT_HARD_SWISH] = "HardSwish",
    [KILN_ACT_GELU] = "Gelu",
    [KILN_ACT_GELU_TANH] = "GeluTanh",
    [KILN_ACT_SILU] = "Silu",
};

const char *kiln_activation_name(kiln_activation a) {
    return a >= 0 && a < KILN_ACT_COUNT ? g_act_names[a] : "?";
}

int kiln_activation_nparams(kiln_activation a) {
    switch (a) {
    case KILN_ACT_LEAKY_RELU: return 1;
    case KILN_ACT_CLIP: case KILN_ACT_HARD_SIGMOID: return 2;
    default: return 0;
    }
}

kiln_status kiln_fused_activation(const kiln_node *n, kiln_act *out) {
    memset(out, 0, sizeof *out);
    const char *name = kiln_attr_string(n, "activation", "");
    int k = 0;
    while (k < KILN_ACT_COUNT && strcmp(g_act_names[k], name)) k++;
    if (k == KILN_ACT_COUNT)
        return kiln_error(KILN_ERR_INVALID_ARGUMENT, "%s: unknown activation '%s'", n->op_type, name);
    out->kind = (kiln_activation)k;
    int np;
    const float *p = kiln_attr_floats(n, "activation_params", &np);
    if (np != kiln_activation_nparams(out->kind))
        return kiln_error(KILN_ERR_INVALID_ARGUMENT, "%s: activation %s takes %d activation_params, got %d", n->op_type,
                          name, kiln_activation_nparams(out->kind), np);
    if (np > 0) out->p0 = p[0];
    if (np > 1) out->p1 = p[1];
    return KILN_OK;
}

kiln_status kiln_fused_pool_base(const kiln_node *n, kiln_node *base) {
    static const char *const pools[] = {"MaxPool", "AveragePool", "GlobalAveragePool", "GlobalMaxPool"};
    const char *pool = kiln_attr_string(n, "pool", "");
    for (size_t i = 0; i < sizeof pools / sizeof *pools; i++)
        if (!strcmp(pool, pools[i])) {
            *base = *n;
            base->op_type = pools[i];
            base->domain = "";
            base->opset = KILN_FUSED_POOL_ONNX_OPSET;
            base->schema = NULL;
            return KILN_OK;
        }
    return kiln_error(KILN_ERR_INVALID_ARGUMENT, "%s: pool must be MaxPool, AveragePool, GlobalAveragePool or "
                      "GlobalMaxPool, is '%s'", n->op_type, pool);
}

kiln_status kiln_chain_validate(const int64_t *prog, int nprog, int ninputs, int nconsts) {
    int depth = 0;
    for (int pc = 0; pc < nprog; pc++) {
        int64_t op = prog[pc];
        if (op == KILN_CHAIN_LOAD || op == KILN_CHAIN_CONST) {
            if (pc + 1 >= nprog)
                return kiln_error(KILN_ERR_INVALID_ARGUMENT, "ElementwiseChain: instruction %d lacks its operand", pc);
            int64_t arg = prog[++pc], limit = op == KILN_CHAIN_LOAD ? ninputs : nconsts;
            if (arg < 0 || arg >= limit)
                return kiln_error(KILN_ERR_INVALID_ARGUMENT, "ElementwiseChain: %s %lld is out of range (%lld available)",
                                  op == KILN_CHAIN_LOAD ? "input" : "constant", (long long)arg, (long long)limit);
            if (++depth > KILN_CHAIN_MAX_STACK)
                return kiln_error(KILN_ERR_INVALID_ARGUMENT, "ElementwiseChain: the program needs more than %d stack slots",
                                  KILN_CHAIN_MAX_STACK);
        } else if (op >= KILN_CHAIN_ADD && op <= KILN_CHAIN_DIV) {
            if (depth < 2) return kiln_error(KILN_ERR_INVALID_ARGUMENT, "ElementwiseChain: stack underflow at %d", pc);
            depth--;
        } else if (op > KILN_CHAIN_DIV && op < KILN_CHAIN_OP_COUNT) {
            if (depth < 1) return kiln_error(KILN_ERR_INVALID_ARGUMENT, "ElementwiseChain: stack underflow at %d", pc);
        } else {
            return kiln_error(KILN_ERR_INVALID_ARGUMENT, "ElementwiseChain: unknown opcode %lld at %d", (long long)op, pc);
        }
    }
    if (depth != 1)
        return kiln_error(KILN_ERR_INVALID_ARGUMENT, "ElementwiseChain: the program leaves %d values, not 1", depth);
    return KILN_OK;
}
