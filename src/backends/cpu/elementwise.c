/* elementwise.c — CPU kernels for the elementwise op family: the family's kernel table, the
 * broadcast planner and row iterator, and the binary and variadic drivers that the op files
 * (elementwise_unary.c, elementwise_binary.c, elementwise_cast.c) run their typed loops through.
 *
 * A binary op is a table of typed row functions o[i] = op(a[i*sa], b[i*sb]). The driver broadcasts
 * the two shapes, merges every run of dims that is contiguous for all operands, and calls the row
 * function once per innermost row — so equal shapes or a scalar operand make a single call over the
 * whole tensor, where the row functions have tight, vectorized loops. */
#include "backends/cpu/elementwise_util.h"

#include "core/status.h"

#include <string.h>

#define EW_TABLE_ENTRY(name) {#name, "", kiln_ew_exec_##name},

const kiln_cpu_kernel kiln_cpu_kernels_elementwise[] = {
    EW_UNARY_OPS(EW_TABLE_ENTRY)
    EW_BINARY_OPS(EW_TABLE_ENTRY)
    EW_CAST_OPS(EW_TABLE_ENTRY)
    {0},
};

/* ---------------------------------------------------------------- broadcast planning */

kiln_status ew_bcast_plan(ew_bcast *b, int nin, const int *ndims, const int64_t *const *dims, int out_ndim,
                          const int64_t *out_dims) {
    KILN_ASSERT(nin >= 1 && nin <= EW_MAX_IN && out_ndim >= 0 && out_ndim <= KILN_MAX_DIMS);
    int64_t full[EW_MAX_IN][KILN_MAX_DIMS];
    for (int k = 0; k < nin; k++) {
        if (ndims[k] > out_ndim) goto mismatch;
        for (int d = 0; d < ndims[k]; d++) {
            int64_t in = dims[k][d], o = out_dims[out_ndim - ndims[k] + d];
            if (in != o && in != 1) goto mismatch;
        }
        kiln_broadcast_strides(ndims[k], dims[k], out_ndim, out_dims, full[k]);
    }
    memset(b, 0, sizeof *b);
    b->nin = nin;
    b->numel = kiln_numel(out_ndim, out_dims);
    /* Walk from the innermost dim outwards, skipping size-1 dims and merging a dim into the one
     * inside it when every input steps through both as one contiguous run. */
    int64_t rd[KILN_MAX_DIMS], rs[EW_MAX_IN][KILN_MAX_DIMS];
    int r = 0;
    for (int d = out_ndim - 1; d >= 0; d--) {
        if (out_dims[d] == 1) continue;
        bool merge = r > 0;
        for (int k = 0; k < nin && merge; k++) merge = full[k][d] == rs[k][r - 1] * rd[r - 1];
        if (merge) {
            rd[r - 1] *= out_dims[d];
            continue;
        }
        rd[r] = out_dims[d];
        for (int k = 0; k < nin; k++) rs[k][r] = full[k][d];
        r++;
    }
    if (r == 0) { /* a single element */
        rd[0] = 1;
        for (int k = 0; k < nin; k++) rs[k][0] = 0;
        r = 1;
    }
    b->ndim = r;
    for (int d = 0; d < r; d++) {
        b->dims[d] = rd[r - 1 - d];
        for (int k = 0; k < nin; k++) b->strides[k][d] = rs[k][r - 1 - d];
    }
    return KILN_OK;
mismatch:;
    char so[128], si[EW_MAX_IN][128];
    for (int k = 0; k < nin; k++) kiln_shape_str(si[k], sizeof si[k], ndims[k], dims[k]);
    return kiln_error(KILN_ERR_SHAPE, "input shapes %s%s%s%s%s cannot be broadcast to %s", si[0],
                      nin > 1 ? ", " : "", nin > 1 ? si[1] : "", nin > 2 ? ", " : "", nin > 2 ? si[2] : "",
                      kiln_shape_str(so, sizeof so, out_ndim, out_dims));
}

void ew_bcast_each(const ew_bcast *b, ew_row_fn row, void *ctx) {
    if (b->numel == 0) return;
    int nd = b->ndim;
    int64_t idx[KILN_MAX_DIMS] = {0}, off[EW_MAX_IN] = {0}, step[EW_MAX_IN] = {0};
    for (int k = 0; k < b->nin; k++) step[k] = b->strides[k][nd - 1];
    int64_t inner = b->dims[nd - 1], out_off = 0;
    for (;;) {
        row(ctx, off, out_off, inner, step);
        out_off += inner;
        int d = nd - 2;
        for (; d >= 0; d--) {
            idx[d]++;
            for (int k = 0; k < b->nin; k++) off[k] += b->strides[k][d];
            if (idx[d] < b->dims[d]) break;
            for (int k = 0; k < b->nin; k++) off[k] -= b->strides[k][d] * b->dims[d];
            idx[d] = 0;
        }
        if (d < 0) return;
    }
}

/* ---------------------------------------------------------------- binary driver */

typedef struct bin_ctx {
    ew_binary_fn fn;
    kiln_dtype dtype; /* of the inputs */
    const char *a, *b;
    char *o;
    size_t esize, out_esize;
    bool via_f32, bool_out;
} bin_ctx;

static void bin_row(void *c, const int64_t *off, int64_t out_off, int64_t n, const int64_t *step) {
    const bin_ctx *x = c;
    x->fn(x->a + off[0] * (int64_t)x->esize, step[0], x->b + off[1] * (int64_t)x->esize, step[1],
          x->o + out_off * (int64_t)x->out_esize, n);
}

/* float16/bfloat16: converts chunks of the row to float32, runs the float32 function, converts back
 * (or writes bool directly). Loads finish before the store, so in-place use stays correct. */
static void bin_row_via_f32(void *c, const int64_t *off, int64_t out_off, int64_t n, const int64_t *step) {
    const bin_ctx *x = c;
    float ta[EW_CHUNK], tb[EW_CHUNK], to[EW_CHUNK];
    for (int64_t i0 = 0; i0 < n; i0 += EW_CHUNK) {
        int64_t m = n - i0 < EW_CHUNK ? n - i0 : EW_CHUNK;
        int64_t pa = (off[0] + i0 * step[0]) * (int64_t)x->esize, pb = (off[1] + i0 * step[1]) * (int64_t)x->esize;
        ew_load_f32(x->dtype, x->a + pa, step[0], step[0] ? m : 1, ta);
        ew_load_f32(x->dtype, x->b + pb, step[1], step[1] ? m : 1, tb);
        char *o = x->o + (out_off + i0) * (int64_t)x->out_esize;
        if (x->bool_out) {
            x->fn(ta, step[0] != 0, tb, step[1] != 0, o, m);
        } else {
            x->fn(ta, step[0] != 0, tb, step[1] != 0, to, m);
            ew_store_f32(x->dtype, o, m, to);
        }
    }
}

/* The row function op uses for dtype (and whether through float32), or false when unsupported. */
static bool binary_fn(const ew_binary_op *op, kiln_dtype dtype, ew_binary_fn *fn, bool *via_f32) {
    if (dtype > KILN_UNDEFINED && dtype < KILN_DTYPE_COUNT && op->fn[dtype]) {
        *fn = op->fn[dtype];
        *via_f32 = false;
        return true;
    }
    if ((dtype == KILN_F16 || dtype == KILN_BF16) && op->fn[KILN_F32]) {
        *fn = op->fn[KILN_F32];
        *via_f32 = true;
        return true;
    }
    return false;
}

static kiln_status unsupported_dtype(const char *op, kiln_dtype t) {
    return kiln_error(KILN_ERR_UNSUPPORTED, "%s: inputs of dtype %s are not supported", op, kiln_dtype_name(t));
}

kiln_status ew_binary_run(const ew_binary_op *op, kiln_dtype dtype, const void *a, int a_ndim,
                          const int64_t *a_dims, const void *b, int b_ndim, const int64_t *b_dims,
                          kiln_tensor *out) {
    bin_ctx c = {.dtype = dtype, .a = a, .b = b, .o = out->data, .esize = kiln_dtype_size(dtype),
                 .out_esize = kiln_dtype_size(out->dtype), .bool_out = op->bool_out};
    if (!binary_fn(op, dtype, &c.fn, &c.via_f32)) return unsupported_dtype(op->name, dtype);
    ew_bcast plan;
    const int ndims[2] = {a_ndim, b_ndim};
    const int64_t *const dims[2] = {a_dims, b_dims};
    kiln_status s = ew_bcast_plan(&plan, 2, ndims, dims, out->ndim, out->dims);
    if (s != KILN_OK) return kiln_error_prefix(s, "%s", op->name);
    ew_bcast_each(&plan, c.via_f32 ? bin_row_via_f32 : bin_row, &c);
    return KILN_OK;
}

/* ONNX opset < 7 broadcasting: with broadcast=1, b's shape is aligned with a's dims starting at
 * `axis` (default: suffix alignment) and padded with ones; with broadcast=0 shapes must be equal. */
static kiln_status legacy_b_shape(const kiln_node *n, const kiln_tensor *a, const kiln_tensor *b, int *ndim,
                                  int64_t *dims) {
    char sa[128], sb[128];
    if (!kiln_attr_int(n, "broadcast", 0)) {
        bool same = a->ndim == b->ndim;
        for (int d = 0; same && d < a->ndim; d++) same = a->dims[d] == b->dims[d];
        if (!same)
            return kiln_error(KILN_ERR_SHAPE, "%s: shapes %s and %s differ and broadcast=0 (opset %d)", n->op_type,
                              kiln_shape_str(sa, sizeof sa, a->ndim, a->dims),
                              kiln_shape_str(sb, sizeof sb, b->ndim, b->dims), n->opset);
        *ndim = b->ndim;
        memcpy(dims, b->dims, sizeof b->dims);
        return KILN_OK;
    }
    int64_t axis = kiln_node_attr(n, "axis") ? kiln_attr_int(n, "axis", 0) : a->ndim - b->ndim;
    if (axis < 0) axis += a->ndim;
    bool ok = b->ndim <= a->ndim && axis >= 0 && axis + b->ndim <= a->ndim;
    if (!ok)
        return kiln_error(KILN_ERR_SHAPE, "%s: cannot broadcast %s to %s at axis %lld", n->op_type,
                          kiln_shape_str(sb, sizeof sb, b->ndim, b->dims),
                          kiln_shape_str(sa, sizeof sa, a->ndim, a->dims), (long long)axis);
    *ndim = a->ndim;
    for (int d = 0; d < a->ndim; d++) dims[d] = 1;
    for (int d = 0; d < b->ndim; d++) dims[axis + d] = b->dims[d];
    return KILN_OK;
}

kiln_status ew_binary_shape(const kiln_node *n, const kiln_tensor *a, const kiln_tensor *b, int *b_ndim,
                            int64_t *b_dims, int *out_ndim, int64_t *out_dims) {
    *b_ndim = b->ndim;
    memcpy(b_dims, b->dims, sizeof b->dims);
    if (n->opset >= 1 && n->opset < 7) KILN_TRY(legacy_b_shape(n, a, b, b_ndim, b_dims));
    kiln_status s = kiln_broadcast_shape(a->ndim, a->dims, *b_ndim, b_dims, out_ndim, out_dims);
    return s == KILN_OK ? s : kiln_error_prefix(s, "%s", n->op_type);
}

kiln_status ew_binary_exec(const kiln_node *n, const ew_binary_op *op, const kiln_tensor *a,
                           const kiln_tensor *b, kiln_tensor *out) {
    if (!a || !b) return kiln_error(KILN_ERR_INVALID_ARGUMENT, "%s: needs two inputs", op->name);
    if (a->dtype != b->dtype)
        return kiln_error(KILN_ERR_INVALID_ARGUMENT, "%s: input dtypes differ (%s vs %s)", op->name,
                          kiln_dtype_name(a->dtype), kiln_dtype_name(b->dtype));
    ew_binary_fn fn;
    bool via;
    if (!binary_fn(op, a->dtype, &fn, &via)) return unsupported_dtype(op->name, a->dtype);
    int b_ndim, out_ndim;
    int64_t b_dims[KILN_MAX_DIMS], out_dims[KILN_MAX_DIMS];
    KILN_TRY(ew_binary_shape(n, a, b, &b_ndim, b_dims, &out_ndim, out_dims));
    /* not zeroed: the broadcast driver writes every element */
    KILN_TRY(kiln_tensor_alloc_uninit(out, op->bool_out ? KILN_BOOL : a->dtype, out_ndim, out_dims));
    return ew_binary_run(op, a->dtype, a->data, a->ndim, a->dims, b->data, b_ndim, b_dims, out);
}

/* ---------------------------------------------------------------- variadic driver */

/* out /= count, in out's dtype (a float type). */
static void divide_by(kiln_tensor *out, int count) {
    int64_t n = kiln_tensor_numel(out);
    if (out->dtype == KILN_F64) {
        double *p = out->data, d = count;
        EW_BLOCKED_LOOP(double, p, n, p[i] / d);
        return;
    }
    float t[EW_CHUNK], d = (float)count;
    for (int64_t i0 = 0; i0 < n; i0 += EW_CHUNK) {
        int64_t m = n - i0 < EW_CHUNK ? n - i0 : EW_CHUNK;
        char *p = (char *)out->data + i0 * (int64_t)kiln_dtype_size(out->dtype);
        if (out->dtype == KILN_F32) {
            float *f = (float *)p;
            EW_BLOCKED_LOOP(float, f, m, f[i] / d);
        } else {
            ew_load_f32(out->dtype, p, 1, m, t);
            EW_BLOCKED_LOOP(float, t, m, t[i] / d);
            ew_store_f32(out->dtype, p, m, t);
        }
    }
}

kiln_status ew_variadic_exec(const kiln_node *n, const ew_binary_op *op, bool mean, kiln_tensor *const *in,
                             int nin, kiln_tensor *out) {
    if (nin < 1 || !in[0]) return kiln_error(KILN_ERR_INVALID_ARGUMENT, "%s: needs at least one input", op->name);
    kiln_dtype dtype = in[0]->dtype;
    ew_binary_fn fn;
    bool via;
    if (!binary_fn(op, dtype, &fn, &via) || (mean && !ew_is_float(dtype))) return unsupported_dtype(op->name, dtype);
    int ndim = in[0]->ndim;
    int64_t dims[KILN_MAX_DIMS];
    memcpy(dims, in[0]->dims, sizeof dims);
    for (int k = 1; k < nin; k++) {
        if (!in[k]) return kiln_error(KILN_ERR_INVALID_ARGUMENT, "%s: input %d is missing", op->name, k);
        if (in[k]->dtype != dtype)
            return kiln_error(KILN_ERR_INVALID_ARGUMENT, "%s: input %d has dtype %s, input 0 has %s", op->name, k,
                              kiln_dtype_name(in[k]->dtype), kiln_dtype_name(dtype));
        int64_t next[KILN_MAX_DIMS];
        kiln_status s = kiln_broadcast_shape(ndim, dims, in[k]->ndim, in[k]->dims, &ndim, next);
        if (s != KILN_OK) return kiln_error_prefix(s, "%s", op->name);
        memcpy(dims, next, sizeof dims);
    }
    KILN_TRY(kiln_tensor_alloc(out, dtype, ndim, dims));
    if (nin == 1) {
        if (in[0]->nbytes) memcpy(out->data, in[0]->data, in[0]->nbytes);
        return KILN_OK;
    }
    KILN_TRY(ew_binary_run(op, dtype, in[0]->data, in[0]->ndim, in[0]->dims, in[1]->data, in[1]->ndim,
                           in[1]->dims, out));
    for (int k = 2; k < nin; k++)
        KILN_TRY(ew_binary_run(op, dtype, out->data, out->ndim, out->dims, in[k]->data, in[k]->ndim, in[k]->dims,
                               out));
    if (mean) divide_by(out, nin);
    return KILN_OK;
}
