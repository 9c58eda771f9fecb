/* fused.c — the CPU fused family's kernel table, and FusedConv / FusedGemm / FusedMatMul: the
 * existing Conv, Gemm and MatMul kernels compute the product, then the epilogue (bias, residual,
 * activation) runs in place over the output. float32; float16/bfloat16 through float32. The
 * activations use the same vector math as the standalone ops, so a fused node matches the nodes it
 * replaced to rounding. */
#include "backends/cpu/fused_kernels.h"

#include "backends/cpu/elementwise_vmath.h"
#include "core/status.h"
#include "ir/fused_ops.h"

#include <string.h>

static inline float clampf(float v, float lo, float hi) {
    v = v < lo ? lo : v; /* NaN passes through, as in Clip */
    return v > hi ? hi : v;
}

static inline ew_v4f vsilu(ew_v4f x) { return x * ew_vsigmoid(x); }

/* y[i] = act(y[i]) for i in [0, n). */
static void apply_activation(float *y, int64_t n, const kiln_act *a) {
    float p0 = a->p0, p1 = a->p1;
    switch (a->kind) {
    case KILN_ACT_NONE: break;
    case KILN_ACT_RELU:
        for (int64_t i = 0; i < n; i++) y[i] = y[i] < 0 ? 0.0f : y[i];
        break;
    case KILN_ACT_LEAKY_RELU:
        for (int64_t i = 0; i < n; i++) y[i] = y[i] < 0 ? p0 * y[i] : y[i];
        break;
    case KILN_ACT_CLIP:
        for (int64_t i = 0; i < n; i++) y[i] = clampf(y[i], p0, p1);
        break;
    case KILN_ACT_HARD_SIGMOID:
        for (int64_t i = 0; i < n; i++) y[i] = clampf(p0 * y[i] + p1, 0.0f, 1.0f);
        break;
    case KILN_ACT_HARD_SWISH:
        for (int64_t i = 0; i < n; i++) y[i] = y[i] * clampf(y[i] / 6.0f + 0.5f, 0.0f, 1.0f);
        break;
    case KILN_ACT_SIGMOID: EW_VEC_MAP(y, y, n, ew_vsigmoid); break;
    case KILN_ACT_TANH: EW_VEC_MAP(y, y, n, ew_vtanh); break;
    case KILN_ACT_GELU: EW_VEC_MAP(y, y, n, ew_vgelu_erf); break;
    case KILN_ACT_GELU_TANH: EW_VEC_MAP(y, y, n, ew_vgelu_tanh); break;
    case KILN_ACT_SILU: EW_VEC_MAP(y, y, n, vsilu); break;
    case KILN_ACT_COUNT: break;
    }
}

/* The epilogue over y (float32): y = act((y + bias) + z), bias (may be NULL) repeated along the last
 * axis, z (may be NULL) exactly y's shape. */
static kiln_status epilogue(const kiln_node *n, kiln_tensor *y, const kiln_tensor *bias, const kiln_tensor *z) {
    kiln_act act;
    KILN_TRY(kiln_fused_activation(n, &act));
    KILN_TRY(nn_require_f32(n, y, 0));
    int64_t count = kiln_tensor_numel(y), row = y->ndim ? y->dims[y->ndim - 1] : 1;
    float *yd = y->data;
    if (bias) {
        KILN_TRY(nn_require_f32(n, bias, 2));
        if (kiln_tensor_numel(bias) != row)
            return kiln_error(KILN_ERR_SHAPE, "%s: the bias has %lld elements, the output rows %lld", n->op_type,
                              (long long)kiln_tensor_numel(bias), (long long)row);
        const float *b = bias->data;
        for (int64_t r = 0; row > 0 && r < count / row; r++)
            for (int64_t j = 0; j < row; j++) yd[r * row + j] += b[j];
    }
    if (z) {
        KILN_TRY(nn_require_f32(n, z, 3));
        if (z->ndim != y->ndim || memcmp(z->dims, y->dims, sizeof *z->dims * (size_t)y->ndim)) {
            char a[96], b[96];
            return kiln_error(KILN_ERR_SHAPE, "%s: the residual is %s but the output is %s", n->op_type,
                              kiln_shape_str(a, sizeof a, z->ndim, z->dims), kiln_shape_str(b, sizeof b, y->ndim, y->dims));
        }
        const float *zd = z->data;
        for (int64_t i = 0; i < count; i++) yd[i] += zd[i];
    }
    apply_activation(yd, count, &act);
    return KILN_OK;
}

static const kiln_tensor *opt_input(kiln_tensor *const *in, int nin, int i) { return i < nin ? in[i] : NULL; }

static NN_EXEC(fused_conv) {
    KILN_TRY(kiln_cpu_conv(n, in, nin > 3 ? 3 : nin, out, 1));
    return epilogue(n, out[0], NULL, opt_input(in, nin, 3));
}

static NN_EXEC(fused_gemm) {
    KILN_TRY(kiln_cpu_gemm(n, in, nin > 3 ? 3 : nin, out, 1));
    return epilogue(n, out[0], NULL, opt_input(in, nin, 3));
}

static NN_EXEC(fused_matmul) {
    KILN_TRY(nn_require_inputs(n, in, nin, 2));
    KILN_TRY(kiln_cpu_matmul(n, in, 2, out, 1));
    return epilogue(n, out[0], opt_input(in, nin, 2), opt_input(in, nin, 3));
}

static NN_FLOAT_EXEC(kiln_cpu_fused_conv, fused_conv, 1u)
static NN_FLOAT_EXEC(kiln_cpu_fused_gemm, fused_gemm, 1u)
static NN_FLOAT_EXEC(kiln_cpu_fused_matmul, fused_matmul, 1u)

const kiln_cpu_kernel kiln_cpu_kernels_fused[] = {
    {"FusedConv", KILN_FUSED_DOMAIN, kiln_cpu_fused_conv},
    {"FusedGemm", KILN_FUSED_DOMAIN, kiln_cpu_fused_gemm},
    {"FusedMatMul", KILN_FUSED_DOMAIN, kiln_cpu_fused_matmul},
    {"Attention", KILN_FUSED_DOMAIN, kiln_cpu_attention},
    {"ElementwiseChain", KILN_FUSED_DOMAIN, kiln_cpu_elementwise_chain},
    {0},
};
