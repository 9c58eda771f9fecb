/* fused_chain.c — kiln.ElementwiseChain on the CPU: runs the node's postfix program (ir/fused_ops.h)
 * over 4-lane float32 vectors, a small stack of vectors per block of 4 output elements. Each input
 * has the output's shape (that of input 0) or one element. Sigmoid, Tanh and Erf use the vector math
 * of the standalone ops, Exp and Sqrt libm per lane, so the result matches the unfused ops. */
#include "backends/cpu/fused_kernels.h"

#include "backends/cpu/elementwise_vmath.h"
#include "core/status.h"
#include "ir/fused_ops.h"

#include <math.h>
#include <string.h>

#define CHAIN_MAX_IN 64

static inline ew_v4f vrelu(ew_v4f x) { return ew_vselect(x < 0.0f, (ew_v4f){0}, x); }

static inline ew_v4f lanes_exp(ew_v4f x) {
    for (int l = 0; l < 4; l++) x[l] = (float)exp(x[l]);
    return x;
}

static inline ew_v4f lanes_sqrt(ew_v4f x) {
    for (int l = 0; l < 4; l++) x[l] = (float)sqrt(x[l]);
    return x;
}

/* Runs the (validated) program for elements [i, i + count) (count <= 4) into y. */
static void run_block(const int64_t *prog, int nprog, const float *const *in, const bool *scalar, const float *consts,
                      int64_t i, int64_t count, float *y) {
    ew_v4f st[KILN_CHAIN_MAX_STACK];
    int sp = 0;
    for (int pc = 0; pc < nprog; pc++) {
        switch ((kiln_chain_op)prog[pc]) {
        case KILN_CHAIN_LOAD: {
            int k = (int)prog[++pc];
            ew_v4f v = {0};
            if (scalar[k]) v = v + in[k][0];
            else memcpy(&v, in[k] + i, (size_t)count * sizeof(float));
            st[sp++] = v;
            break;
        }
        case KILN_CHAIN_CONST: st[sp++] = (ew_v4f){0} + consts[prog[++pc]]; break;
        case KILN_CHAIN_ADD: sp--; st[sp - 1] = st[sp - 1] + st[sp]; break;
        case KILN_CHAIN_SUB: sp--; st[sp - 1] = st[sp - 1] - st[sp]; break;
        case KILN_CHAIN_MUL: sp--; st[sp - 1] = st[sp - 1] * st[sp]; break;
        case KILN_CHAIN_DIV: sp--; st[sp - 1] = st[sp - 1] / st[sp]; break;
        case KILN_CHAIN_NEG: st[sp - 1] = -st[sp - 1]; break;
        case KILN_CHAIN_RELU: st[sp - 1] = vrelu(st[sp - 1]); break;
        case KILN_CHAIN_SIGMOID: st[sp - 1] = ew_vsigmoid(st[sp - 1]); break;
        case KILN_CHAIN_TANH: st[sp - 1] = ew_vtanh(st[sp - 1]); break;
        case KILN_CHAIN_EXP: st[sp - 1] = lanes_exp(st[sp - 1]); break;
        case KILN_CHAIN_SQRT: st[sp - 1] = lanes_sqrt(st[sp - 1]); break;
        case KILN_CHAIN_RECIPROCAL: st[sp - 1] = 1.0f / st[sp - 1]; break;
        case KILN_CHAIN_ERF: st[sp - 1] = ew_verf(st[sp - 1]); break;
        case KILN_CHAIN_ABS: st[sp - 1] = ew_vabs(st[sp - 1]); break;
        case KILN_CHAIN_OP_COUNT: break;
        }
    }
    memcpy(y + i, &st[0], (size_t)count * sizeof(float));
}

static NN_EXEC(chain_f32) {
    int nprog, nconst;
    const int64_t *prog = kiln_attr_ints(n, "program", &nprog);
    const float *consts = kiln_attr_floats(n, "constants", &nconst);
    if (nin < 1 || nin > CHAIN_MAX_IN)
        return kiln_error(KILN_ERR_INVALID_ARGUMENT, "ElementwiseChain takes 1 to %d inputs, has %d", CHAIN_MAX_IN, nin);
    KILN_TRY(kiln_chain_validate(prog, nprog, nin, nconst));
    KILN_TRY(nn_require_inputs(n, in, nin, nin));
    const kiln_tensor *x0 = in[0];
    int64_t count = kiln_tensor_numel(x0);
    const float *data[CHAIN_MAX_IN];
    bool scalar[CHAIN_MAX_IN];
    for (int k = 0; k < nin; k++) {
        KILN_TRY(nn_require_f32(n, in[k], k));
        int64_t c = kiln_tensor_numel(in[k]);
        bool same = in[k]->ndim == x0->ndim && !memcmp(in[k]->dims, x0->dims, sizeof *x0->dims * (size_t)x0->ndim);
        if (!same && c != 1) {
            char a[96], b[96];
            return kiln_error(KILN_ERR_SHAPE, "ElementwiseChain: input %d is %s, neither input 0's shape %s nor one element", k,
                              kiln_shape_str(a, sizeof a, in[k]->ndim, in[k]->dims),
                              kiln_shape_str(b, sizeof b, x0->ndim, x0->dims));
        }
        data[k] = in[k]->data;
        scalar[k] = !same;
    }
    KILN_TRY(kiln_tensor_alloc(out[0], KILN_F32, x0->ndim, x0->dims));
    float *y = out[0]->data;
    for (int64_t i = 0; i < count; i += 4) run_block(prog, nprog, data, scalar, consts, i, count - i < 4 ? count - i : 4, y);
    return KILN_OK;
}

NN_FLOAT_EXEC(kiln_cpu_elementwise_chain, chain_f32, 1u)
