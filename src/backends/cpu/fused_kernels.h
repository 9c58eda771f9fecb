/* fused_kernels.h — the CPU fused family (kiln-domain ops, semantics in ir/fused_ops.h): the exec
 * functions its files (fused.c, attention.c, fused_chain.c) export to the family's kernel table in
 * fused.c. */
#ifndef KILN_CPU_FUSED_KERNELS_H
#define KILN_CPU_FUSED_KERNELS_H

#include "backends/cpu/nn_kernels.h"
#include "ir/fused_ops.h"

/* fused.c: y[i] = act(y[i]) for i in [0, n), with the formulas of the standalone ops (in place). */
void kiln_cpu_activation_apply(float *y, int64_t n, const kiln_act *a);

/* attention.c */
NN_EXEC(kiln_cpu_attention);
/* fused_chain.c */
NN_EXEC(kiln_cpu_elementwise_chain);

#endif
