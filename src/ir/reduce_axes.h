/* reduce_axes.h — which dimensions a Reduce* node reduces, shared by the CPU and CUDA kernels so both
 * apply one definition (axes list, noop_with_empty_axes, negative axes, duplicates). */
#ifndef KILN_IR_REDUCE_AXES_H
#define KILN_IR_REDUCE_AXES_H

#include "ir/graph.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Sets reduce[0..rank) from the node's axes (axes[0..count), already read from the attribute or the
 * input): all dimensions when count == 0 unless noop_with_empty_axes is set. Fails with
 * KILN_ERR_INVALID_ARGUMENT for an axis out of range or listed twice. */
kiln_status kiln_reduce_axes_mask(const kiln_node *n, const int64_t *axes, int count, int rank, bool *reduce);

#ifdef __cplusplus
}
#endif
#endif
