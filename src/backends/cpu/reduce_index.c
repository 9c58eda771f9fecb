/* reduce_index.c — CPU kernels for the reduce family's index-producing and scanning ops: ArgMax,
 * ArgMin, TopK and CumSum.
 *
 * Each works on the input viewed as [outer, len, inner] around its axis. ArgMax/ArgMin and TopK
 * compare order-preserving unsigned keys (exact for every integer width; NaN counts as the largest
 * value, as numpy's argmax/sort do, and as the smallest for ArgMin so that it is still picked).
 * CumSum accumulates floats in double and integers in wrapping int64. */
#include "backends/cpu/reduce_util.h"

#include <stdlib.h>
#include <string.h>

/* Splits shape dims[rank] around axis into outer * len * inner. */
static void split_axis(const kiln_tensor *x, int axis, int64_t *outer, int64_t *len, int64_t *inner) {
    *outer = kiln_numel(axis, x->dims);
    *len = x->dims[axis];
    *inner = kiln_numel(x->ndim - axis - 1, x->dims + axis + 1);
}

/* ArgMax / ArgMin: int64 index of the first (or, with select_last_index, last) extreme along axis. */
static kiln_status arg_exec(const kiln_node *n, kiln_tensor *const *in, int nin, kiln_tensor *const *out, bool is_max) {
    KILN_TRY(kiln_red_need(n, in, nin, 0, "data"));
    const kiln_tensor *x = in[0];
    if (!kiln_red_is_numeric(x->dtype)) return kiln_red_unsupported(n, x->dtype);
    int axis;
    if (kiln_axis_normalize(kiln_attr_int(n, "axis", 0), x->ndim, &axis) != KILN_OK)
        return kiln_error(KILN_ERR_INVALID_ARGUMENT, "%s: axis %lld is out of range for an input of rank %d", n->op_type,
                          (long long)kiln_attr_int(n, "axis", 0), x->ndim);
    bool keepdims = kiln_attr_int(n, "keepdims", 1) != 0;
    bool last = n->opset >= 12 && kiln_attr_int(n, "select_last_index", 0) != 0;
    int64_t outer, len, inner, odims[KILN_MAX_DIMS];
    split_axis(x, axis, &outer, &len, &inner);
    int ond = 0;
    for (int d = 0; d < x->ndim; d++)
        if (d != axis) odims[ond++] = x->dims[d];
        else if (keepdims) odims[ond++] = 1;
    if (len == 0 && outer * inner > 0)
        return kiln_error(KILN_ERR_INVALID_ARGUMENT, "%s: axis %d is empty, it has no extreme value", n->op_type, axis);
    KILN_TRY(kiln_tensor_alloc(out[0], KILN_I64, ond, odims));
    if (outer * inner == 0) return KILN_OK;

    uint64_t *best = malloc((size_t)inner * 2 * sizeof *best);
    if (!best) return kiln_error(KILN_ERR_OUT_OF_MEMORY, "%s: out of memory", n->op_type);
    uint64_t *row = best + inner;
    int64_t *res = out[0]->data;
    for (int64_t o = 0; o < outer; o++) {
        int64_t *r = res + o * inner;
        kiln_red_order_keys(x, o * len * inner, 1, inner, is_max, best);
        memset(r, 0, (size_t)inner * sizeof *r);
        for (int64_t k = 1; k < len; k++) {
            kiln_red_order_keys(x, (o * len + k) * inner, 1, inner, is_max, row);
            for (int64_t i = 0; i < inner; i++) {
                bool take = is_max ? (last ? row[i] >= best[i] : row[i] > best[i])
                                   : (last ? row[i] <= best[i] : row[i] < best[i]);
                if (take) {
                    best[i] = row[i];
                    r[i] = k;
                }
            }
        }
    }
    free(best);
    return KILN_OK;
}

kiln_status kiln_cpu_argmax(const kiln_node *n, kiln_tensor *const *in, int nin, kiln_tensor *const *out, int nout) {
    (void)nout;
    return arg_exec(n, in, nin, out, true);
}

kiln_status kiln_cpu_argmin(const kiln_node *n, kiln_tensor *const *in, int nin, kiln_tensor *const *out, int nout) {
    (void)nout;
    return arg_exec(n, in, nin, out, false);
}

typedef struct topk_item {
    uint64_t key;
    int64_t idx;
} topk_item;

/* Larger key first; equal keys by lower index. */
static int cmp_largest(const void *pa, const void *pb) {
    const topk_item *a = pa, *b = pb;
    if (a->key != b->key) return a->key > b->key ? -1 : 1;
    return (a->idx > b->idx) - (a->idx < b->idx);
}

/* Smaller key first; equal keys by lower index. */
static int cmp_smallest(const void *pa, const void *pb) {
    const topk_item *a = pa, *b = pb;
    if (a->key != b->key) return a->key < b->key ? -1 : 1;
    return (a->idx > b->idx) - (a->idx < b->idx);
}

/* Up to this K, TopK keeps a sorted window of the best K by insertion (one comparison for most
 * elements); above it, it sorts the whole slice. */
#define TOPK_INSERT_MAX 64

/* items[0..k) = the k best of keys[0..len) (largest or smallest first, ties by lower index), by
 * insertion into a sorted window. Elements arrive in index order, so an element equal to one in the
 * window goes after it. */
static void topk_select(const uint64_t *keys, int64_t len, int64_t k, bool largest, topk_item *items) {
    int64_t have = 0;
    for (int64_t j = 0; j < len; j++) {
        uint64_t key = keys[j];
        if (have == k && (largest ? key <= items[k - 1].key : key >= items[k - 1].key)) continue;
        int64_t p = have < k ? have++ : k - 1; /* the slot freed (or the worst one dropped) */
        while (p > 0 && (largest ? key > items[p - 1].key : key < items[p - 1].key)) {
            items[p] = items[p - 1];
            p--;
        }
        items[p] = (topk_item){key, j};
    }
}

/* TopK: the K largest (or smallest) values along axis and their int64 indices, always sorted
 * (sorted=0 leaves the order unspecified, so sorted output is conformant); ties go to the lower
 * index. K is the attribute `k` before opset 10, input 1 after. */
kiln_status kiln_cpu_topk(const kiln_node *n, kiln_tensor *const *in, int nin, kiln_tensor *const *out, int nout) {
    KILN_TRY(kiln_red_need(n, in, nin, 0, "X"));
    const kiln_tensor *x = in[0];
    if (!kiln_red_is_numeric(x->dtype)) return kiln_red_unsupported(n, x->dtype);
    int64_t k;
    if (n->opset < 10) {
        if (!kiln_node_attr(n, "k"))
            return kiln_error(KILN_ERR_INVALID_ARGUMENT, "%s: attribute 'k' is required before opset 10", n->op_type);
        k = kiln_attr_int(n, "k", 0);
    } else {
        KILN_TRY(kiln_red_need(n, in, nin, 1, "K"));
        KILN_TRY(kiln_red_read_scalar_i64(n, in[1], "K", &k));
    }
    int axis;
    if (kiln_axis_normalize(kiln_attr_int(n, "axis", -1), x->ndim, &axis) != KILN_OK)
        return kiln_error(KILN_ERR_INVALID_ARGUMENT, "%s: axis %lld is out of range for an input of rank %d", n->op_type,
                          (long long)kiln_attr_int(n, "axis", -1), x->ndim);
    bool largest = n->opset < 11 || kiln_attr_int(n, "largest", 1) != 0;
    int64_t outer, len, inner;
    split_axis(x, axis, &outer, &len, &inner);
    if (k < 0 || k > len)
        return kiln_error(KILN_ERR_INVALID_ARGUMENT, "%s: K = %lld is outside [0, %lld] (the size of axis %d)", n->op_type,
                          (long long)k, (long long)len, axis);
    int64_t odims[KILN_MAX_DIMS];
    memcpy(odims, x->dims, sizeof odims);
    odims[axis] = k;
    kiln_tensor *vals = out[0], *idxs = nout > 1 ? out[1] : NULL;
    if (vals) KILN_TRY(kiln_tensor_alloc(vals, x->dtype, x->ndim, odims));
    if (idxs) KILN_TRY(kiln_tensor_alloc(idxs, KILN_I64, x->ndim, odims));
    if (k == 0 || outer * inner == 0) return KILN_OK;

    topk_item *items = malloc((size_t)len * sizeof *items);
    uint64_t *keys = malloc((size_t)len * sizeof *keys);
    if (!items || !keys) {
        free(items);
        free(keys);
        return kiln_error(KILN_ERR_OUT_OF_MEMORY, "%s: out of memory", n->op_type);
    }
    size_t es = kiln_dtype_size(x->dtype);
    const char *src = x->data;
    for (int64_t o = 0; o < outer; o++) {
        for (int64_t i = 0; i < inner; i++) {
            kiln_red_order_keys(x, o * len * inner + i, inner, len, true, keys);
            if (k <= TOPK_INSERT_MAX) {
                topk_select(keys, len, k, largest, items);
            } else {
                for (int64_t j = 0; j < len; j++) items[j] = (topk_item){keys[j], j};
                qsort(items, (size_t)len, sizeof *items, largest ? cmp_largest : cmp_smallest);
            }
            for (int64_t j = 0; j < k; j++) {
                int64_t dst = (o * k + j) * inner + i;
                if (vals)
                    memcpy((char *)vals->data + dst * es, src + ((o * len + items[j].idx) * inner + i) * es, es);
                if (idxs) ((int64_t *)idxs->data)[dst] = items[j].idx;
            }
        }
    }
    free(items);
    free(keys);
    return KILN_OK;
}

/* CumSum: running sum along the axis given by input 1 (int32/int64, one element); `exclusive`
 * leaves the current element out, `reverse` runs from the end. */
kiln_status kiln_cpu_cumsum(const kiln_node *n, kiln_tensor *const *in, int nin, kiln_tensor *const *out, int nout) {
    (void)nout;
    KILN_TRY(kiln_red_need(n, in, nin, 0, "x"));
    KILN_TRY(kiln_red_need(n, in, nin, 1, "axis"));
    const kiln_tensor *x = in[0];
    if (!kiln_red_is_numeric(x->dtype) || x->dtype == KILN_BOOL) return kiln_red_unsupported(n, x->dtype);
    if (in[1]->dtype != KILN_I32 && in[1]->dtype != KILN_I64)
        return kiln_error(KILN_ERR_INVALID_ARGUMENT, "%s: input 'axis' must be int32 or int64, got %s", n->op_type,
                          kiln_dtype_name(in[1]->dtype));
    int64_t a;
    KILN_TRY(kiln_red_read_scalar_i64(n, in[1], "axis", &a));
    int axis;
    if (kiln_axis_normalize(a, x->ndim, &axis) != KILN_OK)
        return kiln_error(KILN_ERR_INVALID_ARGUMENT, "%s: axis %lld is out of range for an input of rank %d", n->op_type,
                          (long long)a, x->ndim);
    bool exclusive = kiln_attr_int(n, "exclusive", 0) != 0, reverse = kiln_attr_int(n, "reverse", 0) != 0;
    KILN_TRY(kiln_tensor_alloc(out[0], x->dtype, x->ndim, x->dims));
    int64_t outer, len, inner;
    split_axis(x, axis, &outer, &len, &inner);
    if (kiln_tensor_numel(x) == 0) return KILN_OK;

    bool fp = kiln_red_is_float(x->dtype);
    void *scratch = malloc((size_t)inner * 2 * 8);
    if (!scratch) return kiln_error(KILN_ERR_OUT_OF_MEMORY, "%s: out of memory", n->op_type);
    for (int64_t o = 0; o < outer; o++) {
        memset(scratch, 0, (size_t)inner * 8); /* 0.0 and 0 share the all-zero bit pattern */
        for (int64_t kk = 0; kk < len; kk++) {
            int64_t off = (o * len + (reverse ? len - 1 - kk : kk)) * inner;
            if (fp) {
                double *acc = scratch, *row = acc + inner;
                kiln_red_load_f64(x, off, inner, row);
                for (int64_t i = 0; i < inner; i++) {
                    double v = row[i];
                    row[i] = exclusive ? acc[i] : acc[i] + v;
                    acc[i] += v;
                }
                kiln_red_store_f64(out[0], off, inner, row);
            } else {
                int64_t *acc = scratch, *row = acc + inner;
                kiln_red_load_i64(x, off, inner, row);
                for (int64_t i = 0; i < inner; i++) {
                    uint64_t v = (uint64_t)row[i], s = (uint64_t)acc[i] + v;
                    row[i] = exclusive ? acc[i] : (int64_t)s;
                    acc[i] = (int64_t)s;
                }
                kiln_red_store_i64(out[0], off, inner, row);
            }
        }
    }
    free(scratch);
    return KILN_OK;
}
