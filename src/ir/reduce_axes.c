/* reduce_axes.c — the reduced-dimension mask of a Reduce* node. */
#include "ir/reduce_axes.h"

#include "core/status.h"

kiln_status kiln_reduce_axes_mask(const kiln_node *n, const int64_t *axes, int count, int rank, bool *reduce) {
    bool all = count == 0 && kiln_attr_int(n, "noop_with_empty_axes", 0) == 0;
    for (int d = 0; d < rank; d++) reduce[d] = all;
    for (int i = 0; i < count; i++) {
        int a;
        if (kiln_axis_normalize(axes[i], rank, &a) != KILN_OK)
            return kiln_error(KILN_ERR_INVALID_ARGUMENT, "%s: axis %lld is out of range for an input of rank %d",
                              n->op_type, (long long)axes[i], rank);
        if (reduce[a])
            return kiln_error(KILN_ERR_INVALID_ARGUMENT, "%s: axis %lld is listed twice", n->op_type, (long long)axes[i]);
        reduce[a] = true;
    }
    return KILN_OK;
}
