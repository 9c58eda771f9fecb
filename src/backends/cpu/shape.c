/* shape.c — CPU kernels for the shape op family: the family's kernel table, the helpers of
 * shape_util.h, and the ops that re-describe or cut data without reordering it (Shape, Size,
 * Reshape, Flatten, Squeeze, Unsqueeze, Identity, Dropout, Concat, Split). The others live in
 * transpose.c, slice.c, gather.c and resize.c. Everything is type-generic and moves bytes with
 * memcpy in contiguous runs. */
#include "backends/cpu/shape_util.h"

#include "core/threadpool.h"
#include "ir/shape_calc.h"

#include <stdlib.h>

kiln_status kiln_cpu_shape_check_dtype(const kiln_node *n, const kiln_tensor *t) {
    if (kiln_dtype_size(t->dtype) == 0)
        return kiln_error(KILN_ERR_UNSUPPORTED, "%s: dtype %s is not supported", n->op_type, kiln_dtype_name(t->dtype));
    return KILN_OK;
}

kiln_status kiln_cpu_shape_check_index(const kiln_node *n, const kiln_tensor *t, const char *what) {
    if (t->dtype != KILN_I32 && t->dtype != KILN_I64)
        return kiln_error(KILN_ERR_INVALID_ARGUMENT, "%s: '%s' must be int32 or int64, got %s", n->op_type, what,
                          kiln_dtype_name(t->dtype));
    return KILN_OK;
}

kiln_status kiln_cpu_shape_read_ints(const kiln_node *n, const kiln_tensor *t, const char *what, int64_t *vals, int cap,
                                     int *count) {
    KILN_TRY(kiln_cpu_shape_check_index(n, t, what));
    int64_t c = kiln_tensor_numel(t);
    if (t->ndim > 1 || c > cap)
        return kiln_error(KILN_ERR_INVALID_ARGUMENT, "%s: '%s' must be a list of at most %d integers (got rank %d, %lld values)",
                          n->op_type, what, cap, t->ndim, (long long)c);
    for (int64_t i = 0; i < c; i++) vals[i] = shp_index_at(t, i);
    *count = (int)c;
    return KILN_OK;
}

kiln_status kiln_cpu_shape_read_list(const kiln_node *n, const kiln_tensor *t, const char *name, int input_from,
                                     int64_t *vals, int cap, int *count, bool *present) {
    *count = 0;
    *present = false;
    if (n->opset < input_from) {
        const int64_t *a = kiln_attr_ints(n, name, count);
        if (!a) return KILN_OK;
        if (*count > cap) return kiln_error(KILN_ERR_INVALID_ARGUMENT, "%s: '%s' has %d entries (at most %d)", n->op_type, name, *count, cap);
        memcpy(vals, a, (size_t)*count * sizeof *vals);
        *present = true;
        return KILN_OK;
    }
    if (!t) return KILN_OK;
    *present = true;
    return kiln_cpu_shape_read_ints(n, t, name, vals, cap, count);
}

/* out[0] = a copy of x's data with shape (ndim, dims). */
static kiln_status copy_as(const kiln_node *n, const kiln_tensor *x, kiln_tensor *out, int ndim, const int64_t *dims) {
    KILN_TRY(kiln_cpu_shape_check_dtype(n, x));
    KILN_TRY(kiln_tensor_alloc(out, x->dtype, ndim, dims));
    if (out->nbytes != x->nbytes) return kiln_error(KILN_ERR_INTERNAL, "%s: size mismatch in reshape copy", n->op_type);
    if (x->nbytes) memcpy(out->data, x->data, x->nbytes);
    return KILN_OK;
}

static kiln_status exec_shape(const kiln_node *n, kiln_tensor *const *in, int nin, kiln_tensor *const *out, int nout) {
    const kiln_tensor *x = in[0];
    int64_t start, end;
    kiln_shape_op_range(n, x->ndim, &start, &end);
    int64_t len = end - start;
    KILN_TRY(kiln_tensor_alloc(out[0], KILN_I64, 1, &len));
    if (len) memcpy(out[0]->data, x->dims + start, (size_t)len * sizeof(int64_t));
    return KILN_OK;
}

static kiln_status exec_size(const kiln_node *n, kiln_tensor *const *in, int nin, kiln_tensor *const *out, int nout) {
    KILN_TRY(kiln_tensor_alloc(out[0], KILN_I64, 0, NULL));
    *(int64_t *)out[0]->data = kiln_tensor_numel(in[0]);
    return KILN_OK;
}

static kiln_status exec_identity(const kiln_node *n, kiln_tensor *const *in, int nin, kiln_tensor *const *out, int nout) {
    return copy_as(n, in[0], out[0], in[0]->ndim, in[0]->dims);
}

/* Reshape: 0 copies the input dim (unless allowzero), -1 takes the remaining element count. */
static kiln_status exec_reshape(const kiln_node *n, kiln_tensor *const *in, int nin, kiln_tensor *const *out, int nout) {
    const kiln_tensor *x = in[0];
    int64_t vals[KILN_MAX_DIMS], od[KILN_MAX_DIMS];
    int k;
    if (n->opset < 5) {
        const int64_t *a = kiln_attr_ints(n, "shape", &k);
        if (!a || k > KILN_MAX_DIMS) return kiln_error(KILN_ERR_INVALID_ARGUMENT, "Reshape: attribute 'shape' is missing or too long");
        memcpy(vals, a, (size_t)k * sizeof *vals);
    } else {
        if (nin < 2 || !in[1]) return kiln_error(KILN_ERR_INVALID_ARGUMENT, "Reshape: input 'shape' is missing");
        KILN_TRY(kiln_cpu_shape_read_ints(n, in[1], "shape", vals, KILN_MAX_DIMS, &k));
    }
    bool allowzero = n->opset >= 14 && kiln_attr_int(n, "allowzero", 0) != 0;
    int minus1 = -1;
    int64_t prod = 1, total = kiln_tensor_numel(x);
    for (int j = 0; j < k; j++) {
        int64_t v = vals[j];
        if (v == -1) {
            if (minus1 >= 0) return kiln_error(KILN_ERR_INVALID_ARGUMENT, "Reshape: more than one -1 in shape");
            minus1 = j;
            continue;
        }
        if (v < -1) return kiln_error(KILN_ERR_INVALID_ARGUMENT, "Reshape: invalid dimension %lld in shape", (long long)v);
        if (v == 0 && !allowzero) {
            if (j >= x->ndim)
                return kiln_error(KILN_ERR_SHAPE, "Reshape: shape[%d] = 0 copies a dimension the rank-%d input lacks", j, x->ndim);
            v = x->dims[j];
        }
        if (v > 0 && prod > INT64_MAX / v) return kiln_error(KILN_ERR_SHAPE, "Reshape: shape is too large");
        od[j] = v;
        prod *= v;
    }
    char sa[128], sb[128];
    if (minus1 >= 0) {
        if (prod == 0 || total % prod)
            return kiln_error(KILN_ERR_SHAPE, "Reshape: cannot reshape %s into a shape with -1 and other dims' product %lld",
                              kiln_shape_str(sa, sizeof sa, x->ndim, x->dims), (long long)prod);
        od[minus1] = total / prod;
    } else if (prod != total) {
        return kiln_error(KILN_ERR_SHAPE, "Reshape: cannot reshape %s into %s", kiln_shape_str(sa, sizeof sa, x->ndim, x->dims),
                          kiln_shape_str(sb, sizeof sb, k, od));
    }
    return copy_as(n, x, out[0], k, od);
}

static kiln_status exec_flatten(const kiln_node *n, kiln_tensor *const *in, int nin, kiln_tensor *const *out, int nout) {
    const kiln_tensor *x = in[0];
    int64_t axis = kiln_attr_int(n, "axis", 1);
    if (axis < -x->ndim || axis > x->ndim)
        return kiln_error(KILN_ERR_INVALID_ARGUMENT, "Flatten: axis %lld is out of range for rank %d", (long long)axis, x->ndim);
    if (axis < 0) axis += x->ndim;
    int64_t od[2] = {kiln_numel((int)axis, x->dims), kiln_numel(x->ndim - (int)axis, x->dims + axis)};
    return copy_as(n, x, out[0], 2, od);
}

static kiln_status exec_squeeze(const kiln_node *n, kiln_tensor *const *in, int nin, kiln_tensor *const *out, int nout) {
    const kiln_tensor *x = in[0];
    int64_t axes[KILN_MAX_DIMS], od[KILN_MAX_DIMS];
    int k, ax[KILN_MAX_DIMS];
    bool present, drop[KILN_MAX_DIMS] = {false};
    KILN_TRY(kiln_cpu_shape_read_list(n, nin > 1 ? in[1] : NULL, "axes", 13, axes, KILN_MAX_DIMS, &k, &present));
    if (present) {
        KILN_TRY(kiln_axes_normalize("Squeeze", k, axes, x->ndim, ax));
        for (int j = 0; j < k; j++) {
            if (x->dims[ax[j]] != 1)
                return kiln_error(KILN_ERR_SHAPE, "Squeeze: dimension %d has size %lld, not 1", ax[j], (long long)x->dims[ax[j]]);
            drop[ax[j]] = true;
        }
    } else {
        for (int i = 0; i < x->ndim; i++) drop[i] = x->dims[i] == 1;
    }
    int r = 0;
    for (int i = 0; i < x->ndim; i++)
        if (!drop[i]) od[r++] = x->dims[i];
    return copy_as(n, x, out[0], r, od);
}

static kiln_status exec_unsqueeze(const kiln_node *n, kiln_tensor *const *in, int nin, kiln_tensor *const *out, int nout) {
    const kiln_tensor *x = in[0];
    int64_t axes[KILN_MAX_DIMS], od[KILN_MAX_DIMS];
    int k, ax[KILN_MAX_DIMS];
    bool present, ins[KILN_MAX_DIMS] = {false};
    KILN_TRY(kiln_cpu_shape_read_list(n, nin > 1 ? in[1] : NULL, "axes", 13, axes, KILN_MAX_DIMS, &k, &present));
    if (!present) return kiln_error(KILN_ERR_INVALID_ARGUMENT, "Unsqueeze: 'axes' is required");
    int r = x->ndim + k;
    if (r > KILN_MAX_DIMS) return kiln_error(KILN_ERR_UNSUPPORTED, "Unsqueeze: output rank %d exceeds %d", r, KILN_MAX_DIMS);
    KILN_TRY(kiln_axes_normalize("Unsqueeze", k, axes, r, ax));
    for (int j = 0; j < k; j++) ins[ax[j]] = true;
    for (int i = 0, s = 0; i < r; i++) od[i] = ins[i] ? 1 : x->dims[s++];
    return copy_as(n, x, out[0], r, od);
}

/* Dropout in inference mode: output = input, mask all true. training_mode = true with a non-zero
 * ratio is refused. */
static kiln_status exec_dropout(const kiln_node *n, kiln_tensor *const *in, int nin, kiln_tensor *const *out, int nout) {
    const kiln_tensor *x = in[0];
    if (n->opset >= 12 && nin > 2 && in[2] && kiln_tensor_numel(in[2]) >= 1 && kiln_tensor_get_f64(in[2], 0) != 0) {
        double ratio = nin > 1 && in[1] && kiln_tensor_numel(in[1]) >= 1 ? kiln_tensor_get_f64(in[1], 0) : 0.5;
        if (ratio != 0)
            return kiln_error(KILN_ERR_UNSUPPORTED, "Dropout: training_mode = true (ratio %g) is not supported; kiln runs inference only",
                              ratio);
    }
    KILN_TRY(copy_as(n, x, out[0], x->ndim, x->dims));
    if (nout > 1 && out[1]) {
        kiln_dtype mt = n->opset >= 10 ? KILN_BOOL : x->dtype;
        KILN_TRY(kiln_tensor_alloc(out[1], mt, x->ndim, x->dims));
        int64_t cnt = kiln_tensor_numel(x);
        if (mt == KILN_BOOL) memset(out[1]->data, 1, (size_t)cnt);
        else
            for (int64_t i = 0; i < cnt; i++) kiln_tensor_set_f64(out[1], i, 1.0);
    }
    return KILN_OK;
}

/* Bytes of Concat's output one pool task copies at least (a few pages: the copies stay long). */
#define CONCAT_BLOCK ((int64_t)1 << 16)

typedef struct concat_job {
    kiln_tensor *const *in;
    int nin;
    const int64_t *start; /* [nin + 1]: byte offset of input k's part within one output row */
    int64_t row;          /* bytes of one output row (all inputs' parts along the axis) */
    int64_t total;        /* bytes of the output */
    char *dst;
} concat_job;

/* Output bytes [b * CONCAT_BLOCK, e * CONCAT_BLOCK), the last block ending with the output
 * (kiln_parallel_fn): each run of them that one input holds is one memcpy from that input's part
 * of the same row. */
static void concat_part(void *ctx, int64_t b, int64_t e) {
    const concat_job *j = ctx;
    int64_t pos = b * CONCAT_BLOCK, end = e * CONCAT_BLOCK < j->total ? e * CONCAT_BLOCK : j->total;
    int64_t o = pos / j->row, off = pos % j->row; /* off: first within the row, then within the part */
    int k = 0;
    while (j->start[k + 1] <= off) k++;
    off -= j->start[k];
    while (pos < end) {
        int64_t part = j->start[k + 1] - j->start[k];
        int64_t n = part - off < end - pos ? part - off : end - pos;
        memcpy(j->dst + pos, (const char *)j->in[k]->data + o * part + off, (size_t)n);
        pos += n;
        off = 0;
        do { /* the next input with a part, in this row or the next */
            if (++k == j->nin) {
                k = 0;
                o++;
            }
        } while (pos < end && j->start[k + 1] == j->start[k]);
    }
}

static kiln_status exec_concat(const kiln_node *n, kiln_tensor *const *in, int nin, kiln_tensor *const *out, int nout) {
    const kiln_attr *a = kiln_node_attr(n, "axis");
    if (!a) return kiln_error(KILN_ERR_INVALID_ARGUMENT, "Concat: attribute 'axis' is required");
    const kiln_tensor *first = NULL;
    for (int k = 0; k < nin && !first; k++) first = in[k];
    if (!first) return kiln_error(KILN_ERR_INVALID_ARGUMENT, "Concat: no inputs");
    KILN_TRY(kiln_cpu_shape_check_dtype(n, first));
    int r = first->ndim, axis;
    KILN_TRY(kiln_axis_normalize(a->i, r, &axis));
    int64_t od[KILN_MAX_DIMS];
    memcpy(od, first->dims, (size_t)r * sizeof *od);
    od[axis] = 0;
    for (int k = 0; k < nin; k++) {
        const kiln_tensor *t = in[k];
        if (!t) continue;
        if (t->dtype != first->dtype)
            return kiln_error(KILN_ERR_INVALID_ARGUMENT, "Concat: input %d is %s, input 0 is %s", k, kiln_dtype_name(t->dtype),
                              kiln_dtype_name(first->dtype));
        bool ok = t->ndim == r;
        for (int i = 0; i < r && ok; i++) ok = i == axis || t->dims[i] == first->dims[i];
        if (!ok) {
            char sa[128], sb[128];
            return kiln_error(KILN_ERR_SHAPE, "Concat: input %d has shape %s, incompatible with %s on axis %d", k,
                              kiln_shape_str(sa, sizeof sa, t->ndim, t->dims), kiln_shape_str(sb, sizeof sb, r, first->dims), axis);
        }
        od[axis] += t->dims[axis];
    }
    KILN_TRY(kiln_tensor_alloc_uninit(out[0], first->dtype, r, od)); /* every byte is copied below */
    int64_t total = (int64_t)out[0]->nbytes;
    if (!total) return KILN_OK;
    int64_t es = (int64_t)kiln_dtype_size(first->dtype), inner = kiln_numel(r - axis - 1, od + axis + 1);
    int64_t *start = malloc((size_t)(nin + 1) * sizeof *start);
    if (!start) {
        kiln_tensor_release(out[0]);
        return kiln_error(KILN_ERR_OUT_OF_MEMORY, "Concat: out of memory");
    }
    start[0] = 0;
    for (int k = 0; k < nin; k++) start[k + 1] = start[k] + (in[k] ? in[k]->dims[axis] * inner * es : 0);
    concat_job job = {in, nin, start, start[nin], total, out[0]->data};
    int64_t blocks = (total + CONCAT_BLOCK - 1) / CONCAT_BLOCK;
    kiln_parallel_for(blocks, 1, concat_part, &job);
    free(start);
    return KILN_OK;
}

static kiln_status exec_split(const kiln_node *n, kiln_tensor *const *in, int nin, kiln_tensor *const *out, int nout) {
    const kiln_tensor *x = in[0];
    KILN_TRY(kiln_cpu_shape_check_dtype(n, x));
    int axis;
    KILN_TRY(kiln_axis_normalize(kiln_attr_int(n, "axis", 0), x->ndim, &axis));
    int64_t *sizes = malloc((size_t)(nout > 0 ? nout : 1) * sizeof *sizes);
    if (!sizes) return kiln_error(KILN_ERR_OUT_OF_MEMORY, "Split: out of memory");
    kiln_status s = KILN_OK;
    int k = 0;
    bool present;
    s = kiln_cpu_shape_read_list(n, nin > 1 ? in[1] : NULL, "split", 13, sizes, nout, &k, &present);
    if (s == KILN_OK && present) {
        int64_t total = 0;
        bool bad = false;
        for (int i = 0; i < k && !bad; i++) {
            bad = sizes[i] < 0 || sizes[i] > x->dims[axis];
            total += sizes[i];
        }
        if (bad) s = kiln_error(KILN_ERR_INVALID_ARGUMENT, "Split: a split size is negative or exceeds the axis (%lld)",
                                (long long)x->dims[axis]);
        else if (k != nout || total != x->dims[axis])
            s = kiln_error(KILN_ERR_SHAPE, "Split: %d split sizes summing to %lld for %d outputs and an axis of %lld", k,
                           (long long)total, nout, (long long)x->dims[axis]);
    } else if (s == KILN_OK) {
        int64_t no = n->opset >= 18 ? kiln_attr_int(n, "num_outputs", 0) : 0;
        if (n->opset >= 18 && no != nout)
            s = kiln_error(KILN_ERR_INVALID_ARGUMENT, "Split: num_outputs = %lld but the node has %d outputs", (long long)no, nout);
        else s = kiln_split_even("Split", x->dims[axis], nout, n->opset >= 18, sizes);
    }
    size_t es = kiln_dtype_size(x->dtype);
    int64_t outer = kiln_numel(axis, x->dims), inner = kiln_numel(x->ndim - axis - 1, x->dims + axis + 1);
    size_t row = (size_t)(x->dims[axis] * inner) * es;
    int64_t od[KILN_MAX_DIMS], off = 0;
    memcpy(od, x->dims, (size_t)x->ndim * sizeof *od);
    for (int i = 0; i < nout && s == KILN_OK; i++) {
        size_t chunk = (size_t)(sizes[i] * inner) * es;
        if (out[i]) {
            od[axis] = sizes[i];
            s = kiln_tensor_alloc(out[i], x->dtype, x->ndim, od);
            for (int64_t o = 0; s == KILN_OK && chunk && o < outer; o++)
                memcpy((char *)out[i]->data + (size_t)o * chunk, (const char *)x->data + (size_t)o * row + (size_t)off, chunk);
        }
        off += (int64_t)chunk;
    }
    free(sizes);
    return s;
}

const kiln_cpu_kernel kiln_cpu_kernels_shape[] = {
    {"Shape", "", exec_shape},
    {"Size", "", exec_size},
    {"Reshape", "", exec_reshape},
    {"Flatten", "", exec_flatten},
    {"Squeeze", "", exec_squeeze},
    {"Unsqueeze", "", exec_unsqueeze},
    {"Identity", "", exec_identity},
    {"Dropout", "", exec_dropout},
    {"Concat", "", exec_concat},
    {"Split", "", exec_split},
    {"Transpose", "", kiln_cpu_shape_transpose},
    {"DepthToSpace", "", kiln_cpu_shape_depth_space},
    {"SpaceToDepth", "", kiln_cpu_shape_depth_space},
    {"Expand", "", kiln_cpu_shape_expand},
    {"Tile", "", kiln_cpu_shape_tile},
    {"Slice", "", kiln_cpu_shape_slice},
    {"Pad", "", kiln_cpu_shape_pad},
    {"Gather", "", kiln_cpu_shape_gather},
    {"GatherElements", "", kiln_cpu_shape_gather_elements},
    {"GatherND", "", kiln_cpu_shape_gather_nd},
    {"ScatterND", "", kiln_cpu_shape_scatter_nd},
    {"ScatterElements", "", kiln_cpu_shape_scatter_elements},
    {"Scatter", "", kiln_cpu_shape_scatter_elements},
    {"Resize", "", kiln_cpu_shape_resize},
    {"Upsample", "", kiln_cpu_shape_resize},
    {0},
};
