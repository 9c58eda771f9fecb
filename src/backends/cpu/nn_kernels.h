/* nn_kernels.h — the CPU nn family: the exec functions each of its files (conv.c, pool.c, gemm.c,
 * norm.c, nn.c) exports to the family's kernel table in nn.c, and the helpers they share. */
#ifndef KILN_CPU_NN_KERNELS_H
#define KILN_CPU_NN_KERNELS_H

#include "backends/cpu/cpu_kernels.h"

#include <stdbool.h>
#include <stdint.h>

#define NN_EXEC(name)                                                                              \
    kiln_status name(const kiln_node *n, kiln_tensor *const *in, int nin, kiln_tensor *const *out, int nout)

/* Runs a float32 kernel on float16 / bfloat16 data: every F16/BF16 input becomes a float32
 * temporary, fn runs, and each float32 output i with bit i set in out_mask is converted back to
 * input 0's dtype (outputs outside the mask, such as int64 indices or float32 statistics, are
 * moved as they are). */
kiln_status nn_via_f32(kiln_cpu_exec_fn fn, const kiln_node *n, kiln_tensor *const *in, int nin,
                       kiln_tensor *const *out, int nout, unsigned out_mask);

/* True when some present input is float16 or bfloat16. */
bool nn_has_half_input(kiln_tensor *const *in, int nin);

/* Defines exec function `name` that runs `impl` directly on float32 (and whatever else impl
 * accepts) and through nn_via_f32 when an input is float16 / bfloat16. */
#define NN_FLOAT_EXEC(name, impl, out_mask)                                                        \
    NN_EXEC(name) {                                                                                \
        if (nn_has_half_input(in, nin)) return nn_via_f32(impl, n, in, nin, out, nout, out_mask);  \
        return impl(n, in, nin, out, nout);                                                        \
    }

/* KILN_ERR_UNSUPPORTED naming the op, the input and its dtype, unless t is float32. */
kiln_status nn_require_f32(const kiln_node *n, const kiln_tensor *t, int input);
/* KILN_ERR_INVALID_ARGUMENT unless inputs [0, count) are present. */
kiln_status nn_require_inputs(const kiln_node *n, kiln_tensor *const *in, int nin, int count);

/* conv.c */
NN_EXEC(kiln_cpu_conv);
NN_EXEC(kiln_cpu_conv_transpose);
/* The prepared Conv and FusedConv (cpu_kernels.h): a 2-D channels-first node whose W is a float32
 * graph constant gets its weights packed (conv2d.h), or uses those the engine file stores packed
 * (packed_weights.h); the FusedConv exec is in fused.c. */
kiln_status kiln_cpu_conv_prepare(const kiln_graph *g, const kiln_node *n, void **state);
/* The panels of a prepared Conv state for the engine file (the panels hook of cpu_kernels.h). */
bool kiln_cpu_conv_panels(const void *state, kiln_packed_tag *tag, const float **panels);
/* The inputs a prepared Conv kernel runs on: in itself, or, when state's weights are stored packed
 * (the constant W is their 1-D panels), a copy in args[0, nin) whose W is *view, a tensor of W's
 * declared shape over the panels, so the kernels read W's geometry (never its data: they run on the
 * panels). Inputs beyond KILN_CONV_MAX_INPUTS are left as they are (the kernels refuse them). */
#define KILN_CONV_MAX_INPUTS 8
kiln_tensor *const *kiln_cpu_conv_inputs(const void *state, kiln_tensor *const *in, int nin, kiln_tensor *view,
                                         kiln_tensor **args);
kiln_status kiln_cpu_conv_prepared(const kiln_node *n, const void *state, kiln_tensor *const *in, int nin,
                                   kiln_tensor *const *out, int nout);
kiln_status kiln_cpu_fused_conv_prepared(const kiln_node *n, const void *state, kiln_tensor *const *in, int nin,
                                         kiln_tensor *const *out, int nout);
void kiln_cpu_conv_state_free(void *state);
/* pool.c */
NN_EXEC(kiln_cpu_max_pool);
NN_EXEC(kiln_cpu_average_pool);
NN_EXEC(kiln_cpu_lp_pool);
NN_EXEC(kiln_cpu_global_average_pool);
NN_EXEC(kiln_cpu_global_max_pool);
NN_EXEC(kiln_cpu_global_lp_pool);
/* gemm.c */
NN_EXEC(kiln_cpu_gemm);
NN_EXEC(kiln_cpu_matmul);
/* gemm_packed.c: the prepared MatMul and Gemm (cpu_kernels.h), for FusedMatMul and FusedGemm too:
 * a float32 constant 2-D right operand (Gemm: without transA, alpha 1) gets packed; the fused
 * execs are in fused.c. */
kiln_status kiln_cpu_matmul_prepare(const kiln_graph *g, const kiln_node *n, void **state);
/* The panels of a prepared MatMul / Gemm state for the engine file (the panels hook of cpu_kernels.h). */
bool kiln_cpu_matmul_panels(const void *state, kiln_packed_tag *tag, const float **panels);
kiln_status kiln_cpu_matmul_prepared(const kiln_node *n, const void *state, kiln_tensor *const *in, int nin,
                                     kiln_tensor *const *out, int nout);
kiln_status kiln_cpu_gemm_prepared(const kiln_node *n, const void *state, kiln_tensor *const *in, int nin,
                                   kiln_tensor *const *out, int nout);
kiln_status kiln_cpu_fused_matmul_prepared(const kiln_node *n, const void *state, kiln_tensor *const *in, int nin,
                                           kiln_tensor *const *out, int nout);
kiln_status kiln_cpu_fused_gemm_prepared(const kiln_node *n, const void *state, kiln_tensor *const *in, int nin,
                                         kiln_tensor *const *out, int nout);
void kiln_cpu_matmul_state_free(void *state);
/* norm.c */
NN_EXEC(kiln_cpu_batchnorm);
NN_EXEC(kiln_cpu_instancenorm);
NN_EXEC(kiln_cpu_groupnorm);
NN_EXEC(kiln_cpu_layernorm);
NN_EXEC(kiln_cpu_rmsnorm);

#endif
