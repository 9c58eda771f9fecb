/* fused_chain.cu — kiln.ElementwiseChain (ir/fused_ops.h) on the GPU: one grid-stride kernel that
 * interprets the node's postfix program for every output element, on a float32 stack, like the CPU
 * kernel (src/backends/cpu/fused_chain.c). Inputs have Y's shape or one element (read as a scalar).
 * The program, its constants and the input pointers travel by value in the launch parameters, so the
 * program and input counts are bounded (FC_MAX_*); larger chains are refused at build time. */
#include "backends/cuda/kernel_util.cuh"
#include "ir/fused_ops.h"

#define FC_MAX_PROG 128
#define FC_MAX_CONST 32
#define FC_MAX_IN 16

template <typename T> struct fc_args {
    const T *in[FC_MAX_IN];
    unsigned scalar; /* bit i: input i is one element */
    int nprog;
    int16_t prog[FC_MAX_PROG];
    float consts[FC_MAX_CONST];
};

template <typename T> __global__ void fc_chain_kernel(const fc_args<T> a, T *__restrict__ y, int64_t total) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += (int64_t)gridDim.x * blockDim.x) {
        float st[KILN_CHAIN_MAX_STACK];
        int sp = 0;
        for (int pc = 0; pc < a.nprog; pc++) {
            switch (a.prog[pc]) {
            case KILN_CHAIN_LOAD: {
                int k = a.prog[++pc];
                st[sp++] = ku_f32(a.in[k][(a.scalar >> k) & 1u ? 0 : i]);
                break;
            }
            case KILN_CHAIN_CONST: st[sp++] = a.consts[a.prog[++pc]]; break;
            case KILN_CHAIN_ADD: sp--; st[sp - 1] = st[sp - 1] + st[sp]; break;
            case KILN_CHAIN_SUB: sp--; st[sp - 1] = st[sp - 1] - st[sp]; break;
            case KILN_CHAIN_MUL: sp--; st[sp - 1] = st[sp - 1] * st[sp]; break;
            case KILN_CHAIN_DIV: sp--; st[sp - 1] = st[sp - 1] / st[sp]; break;
            case KILN_CHAIN_NEG: st[sp - 1] = -st[sp - 1]; break;
            case KILN_CHAIN_RELU: st[sp - 1] = st[sp - 1] < 0.0f ? 0.0f : st[sp - 1]; break;
            case KILN_CHAIN_SIGMOID: st[sp - 1] = 1.0f / (1.0f + expf(-st[sp - 1])); break;
            case KILN_CHAIN_TANH: st[sp - 1] = tanhf(st[sp - 1]); break;
            case KILN_CHAIN_EXP: st[sp - 1] = expf(st[sp - 1]); break;
            case KILN_CHAIN_SQRT: st[sp - 1] = sqrtf(st[sp - 1]); break;
            case KILN_CHAIN_RECIPROCAL: st[sp - 1] = 1.0f / st[sp - 1]; break;
            case KILN_CHAIN_ERF: st[sp - 1] = erff(st[sp - 1]); break;
            case KILN_CHAIN_ABS: st[sp - 1] = fabsf(st[sp - 1]); break;
            default: break;
            }
        }
        y[i] = ku_from_f32<T>(st[0]);
    }
}

/* Fills a from the node's (validated) program and the device inputs, then launches. */
template <typename T>
static kiln_status fc_launch(const kiln_node *n, const int64_t *prog, int nprog, const float *consts, int nconst,
                             const kiln_cuda_tensor *in, int nin, const kiln_cuda_tensor *y, int64_t total,
                             kiln_cuda_ctx *ctx) {
    fc_args<T> a;
    memset(&a, 0, sizeof a);
    for (int i = 0; i < nin; i++) {
        int64_t cnt = ku_numel(&in[i]);
        if (in[i].dtype != y->dtype || (cnt != total && cnt != 1))
            return kiln_error(KILN_ERR_SHAPE, "ElementwiseChain: input %d has %lld %s elements, Y has %lld %s", i,
                              (long long)cnt, kiln_dtype_name(in[i].dtype), (long long)total, kiln_dtype_name(y->dtype));
        a.in[i] = (const T *)in[i].data;
        if (cnt == 1) a.scalar |= 1u << i;
    }
    a.nprog = nprog;
    for (int i = 0; i < nprog; i++) a.prog[i] = (int16_t)prog[i];
    for (int i = 0; i < nconst; i++) a.consts[i] = consts[i];
    fc_chain_kernel<T><<<ku_blocks(total, KU_THREADS, ctx), KU_THREADS, 0, ctx->stream>>>(a, (T *)y->data, total);
    KILN_CUDA_LAUNCH_CHECK("fc_chain_kernel");
    return KILN_OK;
}

static kiln_status exec_chain(const kiln_node *n, const kiln_cuda_tensor *in, int nin, const kiln_cuda_tensor *out, int nout,
                              kiln_cuda_ctx *ctx) {
    int nprog = 0, nconst = 0;
    const int64_t *prog = kiln_attr_ints(n, "program", &nprog);
    const float *consts = kiln_attr_floats(n, "constants", &nconst);
    if (nin < 1 || nin > FC_MAX_IN || nprog > FC_MAX_PROG || nconst > FC_MAX_CONST)
        return kiln_error(KILN_ERR_UNSUPPORTED, "ElementwiseChain (cuda): %d inputs, %d instructions, %d constants", nin,
                          nprog, nconst);
    KILN_TRY(kiln_chain_validate(prog, nprog, nin, nconst));
    const kiln_cuda_tensor *y = &out[0];
    int64_t total = ku_numel(y);
    if (total == 0) return KILN_OK;
    switch (y->dtype) {
    case KILN_F32: return fc_launch<float>(n, prog, nprog, consts, nconst, in, nin, y, total, ctx);
    case KILN_F16: return fc_launch<__half>(n, prog, nprog, consts, nconst, in, nin, y, total, ctx);
    case KILN_BF16: return fc_launch<bf16>(n, prog, nprog, consts, nconst, in, nin, y, total, ctx);
    default: return ku_refuse_dtype(n, 0, y->dtype);
    }
}

/* Float inputs of Y's dtype, a valid program within the launch-parameter bounds. */
static kiln_status sup_chain(const kiln_graph *g, const kiln_node *n) {
    int nprog = 0, nconst = 0;
    const int64_t *prog = kiln_attr_ints(n, "program", &nprog);
    kiln_attr_floats(n, "constants", &nconst);
    if (n->ninputs < 1 || n->ninputs > FC_MAX_IN || nprog > FC_MAX_PROG || nconst > FC_MAX_CONST)
        return kiln_error(KILN_ERR_UNSUPPORTED, "ElementwiseChain (cuda): %d inputs (max %d), %d instructions (max %d), "
                          "%d constants (max %d)", n->ninputs, FC_MAX_IN, nprog, FC_MAX_PROG, nconst, FC_MAX_CONST);
    KILN_TRY(kiln_chain_validate(prog, nprog, n->ninputs, nconst));
    const kiln_value *y = ku_out(g, n, 0);
    for (int i = 0; i < n->ninputs; i++) {
        const kiln_value *v = ku_in(g, n, i);
        if (!v || !ku_is_float(v->dtype) || (y && v->dtype != y->dtype))
            return kiln_error(KILN_ERR_UNSUPPORTED, "ElementwiseChain (cuda): input %d is %s, not the output's float type", i,
                              v ? kiln_dtype_name(v->dtype) : "absent");
    }
    return KILN_OK;
}

extern "C" const kiln_cuda_kernel kiln_cuda_kernels_fused_chain[] = {
    {"ElementwiseChain", KILN_FUSED_DOMAIN, exec_chain, sup_chain},
    {NULL, NULL, NULL, NULL},
};
