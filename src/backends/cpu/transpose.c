/* transpose.c — CPU kernels that permute or replicate data: Transpose, DepthToSpace, SpaceToDepth,
 * Expand and Tile, plus the strided-copy engine (kiln_cpu_copy_strided) they share with Slice and
 * Pad. All are type-generic (elements are moved by their byte size).
 *
 * The engine first drops size-1 dims and merges dims that are contiguous in both source and
 * destination, so a Transpose that keeps an inner block together or an Expand of a row copies whole
 * runs with memcpy; a plain 2-D transpose is tiled for the cache. */
#include "backends/cpu/shape_util.h"
#include "core/ckd.h"

#include <stdlib.h>

#define TILE 32

/* Copies n elements from src (stride s) to dst (stride t), strides in elements. */
static void strided_row(size_t es, int64_t n, const char *src, int64_t s, char *dst, int64_t t) {
    if (s == 1 && t == 1) {
        memcpy(dst, src, (size_t)n * es);
        return;
    }
    switch (es) {
    case 1: for (int64_t i = 0; i < n; i++) dst[i * t] = src[i * s]; break;
    case 2: for (int64_t i = 0; i < n; i++) memcpy(dst + i * t * 2, src + i * s * 2, 2); break;
    case 4: for (int64_t i = 0; i < n; i++) memcpy(dst + i * t * 4, src + i * s * 4, 4); break;
    case 8: for (int64_t i = 0; i < n; i++) memcpy(dst + i * t * 8, src + i * s * 8, 8); break;
    default:
        for (int64_t i = 0; i < n; i++) memcpy(dst + i * t * (int64_t)es, src + i * s * (int64_t)es, es);
        break;
    }
}

/* Copies an a x b block (src strides sa, sb; dst strides da, db) in TILE x TILE tiles. */
static void tiled_2d(size_t es, int64_t a, int64_t b, const char *src, int64_t sa, int64_t sb, char *dst, int64_t da,
                     int64_t db) {
    int64_t e = (int64_t)es;
    for (int64_t i0 = 0; i0 < a; i0 += TILE)
        for (int64_t j0 = 0; j0 < b; j0 += TILE) {
            int64_t i1 = i0 + TILE < a ? i0 + TILE : a, j1 = j0 + TILE < b ? j0 + TILE : b;
            for (int64_t i = i0; i < i1; i++)
                strided_row(es, j1 - j0, src + (i * sa + j0 * sb) * e, sb, dst + (i * da + j0 * db) * e, db);
        }
}

void kiln_cpu_copy_strided(size_t es, int r, const int64_t *dims, const void *src, const int64_t *sstride, void *dst,
                           const int64_t *dstride) {
    int64_t d[KILN_MAX_DIMS], ss[KILN_MAX_DIMS], ds[KILN_MAX_DIMS];
    int k = 0;
    for (int i = 0; i < r; i++) {
        if (dims[i] == 0) return;
        if (dims[i] == 1) continue;
        if (k > 0 && ss[k - 1] == sstride[i] * dims[i] && ds[k - 1] == dstride[i] * dims[i]) {
            d[k - 1] *= dims[i];
            ss[k - 1] = sstride[i];
            ds[k - 1] = dstride[i];
            continue;
        }
        d[k] = dims[i];
        ss[k] = sstride[i];
        ds[k] = dstride[i];
        k++;
    }
    if (k == 0) {
        shp_copy_elem(dst, src, es);
        return;
    }
    /* When the source runs along the second-to-last dim instead of the last (a transpose), copy the last
     * two dims as a block: tiled when both are long, else with the long one innermost. */
    bool block = k >= 2 && ss[k - 1] != 1 && ss[k - 2] == 1;
    int outer = block ? k - 2 : k - 1;
    int64_t cnt[KILN_MAX_DIMS] = {0}, so = 0, dof = 0, e = (int64_t)es;
    for (;;) {
        const char *s = (const char *)src + so * e;
        char *t = (char *)dst + dof * e;
        if (!block) strided_row(es, d[k - 1], s, ss[k - 1], t, ds[k - 1]);
        else if (d[k - 1] >= TILE / 4) tiled_2d(es, d[k - 2], d[k - 1], s, ss[k - 2], ss[k - 1], t, ds[k - 2], ds[k - 1]);
        else
            for (int64_t j = 0; j < d[k - 1]; j++)
                strided_row(es, d[k - 2], s + j * ss[k - 1] * e, 1, t + j * ds[k - 1] * e, ds[k - 2]);
        int j = outer - 1;
        for (; j >= 0; j--) {
            so += ss[j];
            dof += ds[j];
            if (++cnt[j] < d[j]) break;
            so -= ss[j] * d[j];
            dof -= ds[j] * d[j];
            cnt[j] = 0;
        }
        if (j < 0) break;
    }
}

void kiln_cpu_transpose(size_t es, int r, const int64_t *dims, const int *perm, const void *src, void *dst) {
    int64_t is[KILN_MAX_DIMS], od[KILN_MAX_DIMS], ss[KILN_MAX_DIMS], ds[KILN_MAX_DIMS];
    kiln_strides(r, dims, is);
    for (int i = 0; i < r; i++) {
        od[i] = dims[perm[i]];
        ss[i] = is[perm[i]];
    }
    kiln_strides(r, od, ds);
    kiln_cpu_copy_strided(es, r, od, src, ss, dst, ds);
}

kiln_status kiln_cpu_shape_transpose(const kiln_node *n, kiln_tensor *const *in, int nin, kiln_tensor *const *out, int nout) {
    const kiln_tensor *x = in[0];
    KILN_TRY(kiln_cpu_shape_check_dtype(n, x));
    int np, perm[KILN_MAX_DIMS];
    const int64_t *p = kiln_attr_ints(n, "perm", &np);
    if (p && np != x->ndim)
        return kiln_error(KILN_ERR_INVALID_ARGUMENT, "Transpose: perm has %d entries for rank %d", np, x->ndim);
    bool seen[KILN_MAX_DIMS] = {false};
    int64_t od[KILN_MAX_DIMS];
    for (int i = 0; i < x->ndim; i++) {
        int64_t v = p ? p[i] : x->ndim - 1 - i;
        if (v < 0 || v >= x->ndim || seen[v])
            return kiln_error(KILN_ERR_INVALID_ARGUMENT, "Transpose: perm is not a permutation of 0..%d", x->ndim - 1);
        seen[v] = true;
        perm[i] = (int)v;
        od[i] = x->dims[v];
    }
    KILN_TRY(kiln_tensor_alloc(out[0], x->dtype, x->ndim, od));
    if (out[0]->nbytes) kiln_cpu_transpose(kiln_dtype_size(x->dtype), x->ndim, x->dims, perm, x->data, out[0]->data);
    return KILN_OK;
}

/* The error for a blocksize whose output dims do not fit 64 bits. */
static kiln_status depth_space_too_large(const kiln_node *n, int64_t b) {
    return kiln_error(KILN_ERR_SHAPE, "%s: blocksize %lld makes the output's dims overflow", n->op_type, (long long)b);
}

/* DepthToSpace and SpaceToDepth as a 6-D transpose of a reshaped view. */
kiln_status kiln_cpu_shape_depth_space(const kiln_node *n, kiln_tensor *const *in, int nin, kiln_tensor *const *out, int nout) {
    const kiln_tensor *x = in[0];
    KILN_TRY(kiln_cpu_shape_check_dtype(n, x));
    bool d2s = !strcmp(n->op_type, "DepthToSpace");
    int64_t b = kiln_attr_int(n, "blocksize", 0);
    const char *mode = kiln_attr_string(n, "mode", "DCR");
    bool crd = !strcmp(mode, "CRD");
    if (!crd && strcmp(mode, "DCR"))
        return kiln_error(KILN_ERR_INVALID_ARGUMENT, "%s: mode must be DCR or CRD, got '%s'", n->op_type, mode);
    if (b <= 0 || b > INT32_MAX) /* so that b * b fits */
        return kiln_error(KILN_ERR_INVALID_ARGUMENT, "%s: blocksize %lld is outside 1..2^31-1", n->op_type, (long long)b);
    if (x->ndim != 4) return kiln_error(KILN_ERR_SHAPE, "%s: input must have rank 4, got %d", n->op_type, x->ndim);
    int64_t N = x->dims[0], C = x->dims[1], H = x->dims[2], W = x->dims[3], view[6], od[4];
    int perm[6];
    if (d2s) {
        if (C % (b * b))
            return kiln_error(KILN_ERR_SHAPE, "DepthToSpace: channels %lld not divisible by blocksize^2 = %lld",
                              (long long)C, (long long)(b * b));
        int64_t c = C / (b * b);
        int64_t v_dcr[6] = {N, b, b, c, H, W}, v_crd[6] = {N, c, b, b, H, W};
        int p_dcr[6] = {0, 3, 4, 1, 5, 2}, p_crd[6] = {0, 1, 4, 2, 5, 3};
        memcpy(view, crd ? v_crd : v_dcr, sizeof view);
        memcpy(perm, crd ? p_crd : p_dcr, sizeof perm);
        od[0] = N, od[1] = c;
        if (!kiln_mul_i64_ok(H, b, &od[2]) || !kiln_mul_i64_ok(W, b, &od[3])) return depth_space_too_large(n, b);
    } else {
        if (H % b || W % b)
            return kiln_error(KILN_ERR_SHAPE, "SpaceToDepth: spatial dims %lldx%lld not divisible by blocksize %lld",
                              (long long)H, (long long)W, (long long)b);
        int64_t v[6] = {N, C, H / b, b, W / b, b};
        int p_dcr[6] = {0, 3, 5, 1, 2, 4}, p_crd[6] = {0, 1, 3, 5, 2, 4};
        memcpy(view, v, sizeof view);
        memcpy(perm, crd ? p_crd : p_dcr, sizeof perm);
        od[0] = N, od[2] = H / b, od[3] = W / b;
        if (!kiln_mul_i64_ok(C, b * b, &od[1])) return depth_space_too_large(n, b);
    }
    KILN_TRY(kiln_tensor_alloc(out[0], x->dtype, 4, od));
    if (out[0]->nbytes) kiln_cpu_transpose(kiln_dtype_size(x->dtype), 6, view, perm, x->data, out[0]->data);
    return KILN_OK;
}

/* Expand: numpy broadcast of the input to (the broadcast of) the shape input. */
kiln_status kiln_cpu_shape_expand(const kiln_node *n, kiln_tensor *const *in, int nin, kiln_tensor *const *out, int nout) {
    const kiln_tensor *x = in[0];
    KILN_TRY(kiln_cpu_shape_check_dtype(n, x));
    if (nin < 2 || !in[1]) return kiln_error(KILN_ERR_INVALID_ARGUMENT, "Expand: input 'shape' is missing");
    int64_t shape[KILN_MAX_DIMS], od[KILN_MAX_DIMS], ss[KILN_MAX_DIMS], ds[KILN_MAX_DIMS];
    int k, r;
    KILN_TRY(kiln_cpu_shape_read_ints(n, in[1], "shape", shape, KILN_MAX_DIMS, &k));
    for (int i = 0; i < k; i++)
        if (shape[i] < 0) return kiln_error(KILN_ERR_INVALID_ARGUMENT, "Expand: negative dimension %lld in shape", (long long)shape[i]);
    KILN_TRY(kiln_broadcast_shape(x->ndim, x->dims, k, shape, &r, od));
    KILN_TRY(kiln_tensor_alloc(out[0], x->dtype, r, od));
    if (!out[0]->nbytes) return KILN_OK;
    kiln_broadcast_strides(x->ndim, x->dims, r, od, ss);
    kiln_strides(r, od, ds);
    kiln_cpu_copy_strided(kiln_dtype_size(x->dtype), r, od, x->data, ss, out[0]->data, ds);
    return KILN_OK;
}

/* Fills the output block of dims d.. of Tile: copies input block src (dims d.. of the input) once
 * along dim d, then replicates that along dim d reps[d] - 1 more times. Strides are in bytes. */
static void tile_fill(int d, int r, const int64_t *idims, const int64_t *reps, const int64_t *istr, const int64_t *ostr,
                      const char *src, char *dst) {
    int64_t once;
    if (d == r - 1) {
        once = idims[d] * istr[d];
        memcpy(dst, src, (size_t)once);
    } else {
        for (int64_t i = 0; i < idims[d]; i++) tile_fill(d + 1, r, idims, reps, istr, ostr, src + i * istr[d], dst + i * ostr[d]);
        once = idims[d] * ostr[d];
    }
    for (int64_t k = 1; k < reps[d]; k++) memcpy(dst + k * once, dst, (size_t)once);
}

kiln_status kiln_cpu_shape_tile(const kiln_node *n, kiln_tensor *const *in, int nin, kiln_tensor *const *out, int nout) {
    const kiln_tensor *x = in[0];
    KILN_TRY(kiln_cpu_shape_check_dtype(n, x));
    if (nin < 2 || !in[1]) return kiln_error(KILN_ERR_INVALID_ARGUMENT, "Tile: input 'repeats' is missing");
    int64_t reps[KILN_MAX_DIMS], od[KILN_MAX_DIMS], istr[KILN_MAX_DIMS], ostr[KILN_MAX_DIMS];
    int k;
    KILN_TRY(kiln_cpu_shape_read_ints(n, in[1], "repeats", reps, KILN_MAX_DIMS, &k));
    if (k != x->ndim) return kiln_error(KILN_ERR_SHAPE, "Tile: repeats has %d entries for rank %d", k, x->ndim);
    for (int i = 0; i < k; i++) {
        if (reps[i] < 0) return kiln_error(KILN_ERR_INVALID_ARGUMENT, "Tile: negative repeat %lld", (long long)reps[i]);
        if (x->dims[i] && reps[i] > (INT64_C(1) << 40) / x->dims[i])
            return kiln_error(KILN_ERR_SHAPE, "Tile: repeat %lld of a dimension of %lld is too large", (long long)reps[i],
                              (long long)x->dims[i]);
        od[i] = x->dims[i] * reps[i];
    }
    KILN_TRY(kiln_tensor_alloc(out[0], x->dtype, k, od));
    if (!out[0]->nbytes) return KILN_OK;
    int64_t es = (int64_t)kiln_dtype_size(x->dtype);
    if (k == 0) {
        memcpy(out[0]->data, x->data, (size_t)es);
        return KILN_OK;
    }
    kiln_strides(k, x->dims, istr);
    kiln_strides(k, od, ostr);
    for (int i = 0; i < k; i++) {
        istr[i] *= es;
        ostr[i] *= es;
    }
    tile_fill(0, k, x->dims, reps, istr, ostr, x->data, out[0]->data);
    return KILN_OK;
}
