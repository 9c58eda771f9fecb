/* shape_calc.c — integer shape arithmetic shared by the shape family's inference and CPU kernels
 * (see shape_calc.h). */
#include "ir/shape_calc.h"

#include "core/status.h"

#include <math.h>
#include <string.h>

static int64_t clamp64(int64_t v, int64_t lo, int64_t hi) { return v < lo ? lo : v > hi ? hi : v; }

void kiln_slice_axis(int64_t dim, int64_t start, int64_t end, int64_t step, int64_t *first, int64_t *count) {
    *first = 0;
    *count = 0;
    if (dim <= 0) return;
    if (start < 0) start += dim; /* no overflow: dim >= 0 and start < 0 */
    if (end < 0) end += dim;
    if (step > 0) {
        start = clamp64(start, 0, dim);
        end = clamp64(end, 0, dim);
        if (end > start) *count = (int64_t)((uint64_t)(end - start - 1) / (uint64_t)step) + 1;
    } else {
        start = clamp64(start, 0, dim - 1);
        end = clamp64(end, -1, dim - 1);
        uint64_t s = step == INT64_MIN ? (uint64_t)1 << 63 : (uint64_t)(-step);
        if (start > end) *count = (int64_t)((uint64_t)(start - end - 1) / s) + 1;
    }
    *first = start;
}

kiln_status kiln_split_even(const char *op, int64_t dim, int n, bool uneven_ok, int64_t *sizes) {
    if (n <= 0) return kiln_error(KILN_ERR_INVALID_ARGUMENT, "%s: number of outputs must be positive, got %d", op, n);
    if (dim % n == 0) {
        for (int i = 0; i < n; i++) sizes[i] = dim / n;
        return KILN_OK;
    }
    if (!uneven_ok)
        return kiln_error(KILN_ERR_SHAPE, "%s: dimension %lld cannot be split into %d equal parts", op, (long long)dim, n);
    int64_t chunk = dim / n + 1;
    int64_t last = dim - chunk * (n - 1);
    if (last < 0)
        return kiln_error(KILN_ERR_SHAPE, "%s: dimension %lld cannot be split into %d parts of %lld", op,
                          (long long)dim, n, (long long)chunk);
    for (int i = 0; i < n - 1; i++) sizes[i] = chunk;
    sizes[n - 1] = last;
    return KILN_OK;
}

int64_t kiln_resize_dim(int64_t dim, double scale) {
    double v = floor((double)dim * scale);
    return !(v > 0) ? 0 : v >= 9.0e18 ? INT64_MAX : (int64_t)v;
}

kiln_status kiln_resize_sizes(int rank, const int64_t *dims, int naxes, const int *axes, const int64_t *sizes,
                              const char *policy, int64_t *out, double *scale) {
    for (int i = 0; i < rank; i++) {
        out[i] = dims[i];
        scale[i] = 1.0;
    }
    bool stretch = !strcmp(policy, "stretch"), not_larger = !strcmp(policy, "not_larger");
    if (!stretch && strcmp(policy, "not_larger") && strcmp(policy, "not_smaller"))
        return kiln_error(KILN_ERR_INVALID_ARGUMENT, "Resize: unknown keep_aspect_ratio_policy '%s'", policy);
    double pick = 0;
    for (int j = 0; j < naxes; j++) {
        int a = axes[j];
        if (sizes[j] < 0) return kiln_error(KILN_ERR_SHAPE, "Resize: negative output size %lld", (long long)sizes[j]);
        if (dims[a] == 0) {
            if (!stretch) return kiln_error(KILN_ERR_SHAPE, "Resize: keep_aspect_ratio_policy '%s' needs non-empty input", policy);
            out[a] = sizes[j];
            scale[a] = 1.0;
            continue;
        }
        double s = (double)sizes[j] / (double)dims[a];
        if (stretch) {
            out[a] = sizes[j];
            scale[a] = s;
        } else if (j == 0 || (not_larger ? s < pick : s > pick)) {
            pick = s;
        }
    }
    if (!stretch)
        for (int j = 0; j < naxes; j++) {
            int a = axes[j];
            scale[a] = pick;
            out[a] = (int64_t)(pick * (double)dims[a] + 0.5);
        }
    return KILN_OK;
}

kiln_status kiln_axes_normalize(const char *op, int naxes, const int64_t *axes, int rank, int *out) {
    for (int j = 0; j < naxes; j++) {
        if (axes[j] < -rank || axes[j] >= rank)
            return kiln_error(KILN_ERR_INVALID_ARGUMENT, "%s: axis %lld is out of range for rank %d", op,
                              (long long)axes[j], rank);
        out[j] = (int)(axes[j] < 0 ? axes[j] + rank : axes[j]);
        for (int k = 0; k < j; k++)
            if (out[k] == out[j])
                return kiln_error(KILN_ERR_INVALID_ARGUMENT, "%s: axis %lld is repeated", op, (long long)axes[j]);
    }
    return KILN_OK;
}

void kiln_shape_op_range(const kiln_node *n, int64_t rank, int64_t *start, int64_t *end) {
    int64_t s = 0, e = rank;
    if (n->opset >= 15) {
        s = kiln_attr_int(n, "start", 0);
        e = kiln_attr_int(n, "end", rank);
    }
    if (s < 0) s += rank;
    if (e < 0) e += rank;
    *start = s < 0 ? 0 : s > rank ? rank : s;
    *end = e < 0 ? 0 : e > rank ? rank : e;
    if (*end < *start) *end = *start;
}
