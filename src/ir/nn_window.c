/* nn_window.c — sliding-window geometry of Conv, ConvTranspose and pooling (see nn_window.h). */
#include "ir/nn_window.h"

#include "core/ckd.h"
#include "core/status.h"

#include <string.h>

/* Copies an INTS attribute of exactly `want` values into dst (all >= lo), or leaves dst as is when
 * the attribute is absent. */
static kiln_status read_ints(const kiln_node *n, const char *name, int want, int64_t lo, int64_t *dst) {
    int count = 0;
    const int64_t *v = kiln_attr_ints(n, name, &count);
    if (!v) return KILN_OK;
    if (count != want)
        return kiln_error(KILN_ERR_INVALID_ARGUMENT, "attribute '%s' has %d values, expected %d", name, count, want);
    for (int i = 0; i < count; i++) {
        if (v[i] < lo)
            return kiln_error(KILN_ERR_INVALID_ARGUMENT, "attribute '%s' value %lld is below %lld", name,
                              (long long)v[i], (long long)lo);
        dst[i] = v[i];
    }
    return KILN_OK;
}

kiln_status kiln_window_parse(const kiln_node *n, int nsp, const int64_t *weight_kernel, kiln_window *w) {
    memset(w, 0, sizeof *w);
    if (nsp < 1 || nsp > KILN_MAX_DIMS - 2)
        return kiln_error(KILN_ERR_SHAPE, "%s needs 1..%d spatial dimensions, got %d", n->op_type,
                          KILN_MAX_DIMS - 2, nsp);
    w->nsp = nsp;
    for (int i = 0; i < nsp; i++) w->stride[i] = w->dilation[i] = 1;
    int count = 0;
    const int64_t *ks = kiln_attr_ints(n, "kernel_shape", &count);
    if (ks) {
        KILN_TRY(read_ints(n, "kernel_shape", nsp, 1, w->kernel));
        if (weight_kernel)
            for (int i = 0; i < nsp; i++)
                if (weight_kernel[i] != w->kernel[i])
                    return kiln_error(KILN_ERR_SHAPE, "kernel_shape[%d] = %lld but the weights have %lld", i,
                                      (long long)w->kernel[i], (long long)weight_kernel[i]);
        w->has_kernel = true;
    } else if (weight_kernel) {
        for (int i = 0; i < nsp; i++)
            if (weight_kernel[i] < 1)
                return kiln_error(KILN_ERR_SHAPE, "the weights have an empty kernel (spatial dim %d is %lld)", i,
                                  (long long)weight_kernel[i]);
        memcpy(w->kernel, weight_kernel, (size_t)nsp * sizeof *w->kernel);
        w->has_kernel = true;
    }
    KILN_TRY(read_ints(n, "strides", nsp, 1, w->stride));
    KILN_TRY(read_ints(n, "dilations", nsp, 1, w->dilation));
    KILN_TRY(read_ints(n, "pads", 2 * nsp, 0, w->pads));
    KILN_TRY(read_ints(n, "output_padding", nsp, 0, w->out_pad));
    const int64_t *os = kiln_attr_ints(n, "output_shape", &count);
    if (os) {
        /* Some exporters write the full N, C, spatial... shape; the spatial part is what counts. */
        int skip = count == nsp + 2 ? 2 : 0;
        if (count != nsp && !skip)
            return kiln_error(KILN_ERR_INVALID_ARGUMENT, "attribute 'output_shape' has %d values, expected %d",
                              count, nsp);
        for (int i = 0; i < nsp; i++) {
            if (os[skip + i] < 0)
                return kiln_error(KILN_ERR_INVALID_ARGUMENT, "attribute 'output_shape' has a negative value");
            w->out_shape[i] = os[skip + i];
        }
        w->has_out_shape = true;
    }
    const char *ap = kiln_attr_string(n, "auto_pad", "NOTSET");
    if (!strcmp(ap, "NOTSET") || !ap[0]) w->auto_pad = KILN_AUTO_PAD_NOTSET;
    else if (!strcmp(ap, "SAME_UPPER")) w->auto_pad = KILN_AUTO_PAD_SAME_UPPER;
    else if (!strcmp(ap, "SAME_LOWER")) w->auto_pad = KILN_AUTO_PAD_SAME_LOWER;
    else if (!strcmp(ap, "VALID")) w->auto_pad = KILN_AUTO_PAD_VALID;
    else return kiln_error(KILN_ERR_INVALID_ARGUMENT, "unknown auto_pad '%s'", ap);
    int64_t ceil_mode = kiln_attr_int(n, "ceil_mode", 0);
    if (ceil_mode != 0 && ceil_mode != 1)
        return kiln_error(KILN_ERR_INVALID_ARGUMENT, "ceil_mode must be 0 or 1, got %lld", (long long)ceil_mode);
    w->ceil_mode = ceil_mode == 1;
    return KILN_OK;
}

/* The dilated kernel extent (kernel - 1) * dilation + 1 of spatial dimension i, or false when it
 * overflows (kernel >= 1 and dilation >= 1 are checked by kiln_window_parse). */
static bool dilated_kernel(const kiln_window *w, int i, int64_t *dk) {
    return kiln_mul_i64_ok(w->kernel[i] - 1, w->dilation[i], dk) && kiln_add_i64_ok(*dk, 1, dk);
}

/* The error for window attributes whose sizes overflow 64 bits. */
static kiln_status too_large(const kiln_window *w, int i) {
    return kiln_error(KILN_ERR_SHAPE,
                      "spatial dimension %d: kernel %lld, stride %lld, dilation %lld and pads %lld+%lld give sizes beyond "
                      "64 bits", i, (long long)w->kernel[i], (long long)w->stride[i], (long long)w->dilation[i],
                      (long long)w->pads[i], (long long)w->pads[w->nsp + i]);
}

kiln_status kiln_window_out(const kiln_window *w, int i, int64_t in, int64_t *out, int64_t *pad_begin,
                            int64_t *pad_end) {
    KILN_ASSERT(w->has_kernel && i >= 0 && i < w->nsp);
    int64_t s = w->stride[i], dk;
    int64_t o, pb = 0, pe = 0;
    if (!dilated_kernel(w, i, &dk)) return too_large(w, i);
    switch (w->auto_pad) {
    case KILN_AUTO_PAD_SAME_UPPER:
    case KILN_AUTO_PAD_SAME_LOWER: {
        o = in / s + (in % s != 0);
        int64_t total;
        if (!kiln_mul_i64_ok(o - 1, s, &total) || !kiln_add_i64_ok(total, dk - in, &total)) return too_large(w, i);
        if (total < 0) total = 0;
        pb = w->auto_pad == KILN_AUTO_PAD_SAME_UPPER ? total / 2 : total - total / 2;
        pe = total - pb;
        break;
    }
    case KILN_AUTO_PAD_VALID:
        if (in < dk) goto too_small;
        o = (in - dk) / s + 1;
        break;
    default: {
        pb = w->pads[i];
        pe = w->pads[w->nsp + i];
        int64_t span;
        if (!kiln_add_i64_ok(in, pb, &span) || !kiln_add_i64_ok(span, pe, &span)) return too_large(w, i);
        if (!kiln_sub_i64_ok(span, dk, &span)) return too_large(w, i);
        if (span < 0) goto too_small;
        o = span / s + 1;
        if (w->ceil_mode && span % s) {
            o++;
            /* a window that would start in the end padding is dropped */
            int64_t start;
            if (!kiln_mul_i64_ok(o - 1, s, &start) || start >= in + pb) o--;
        }
        break;
    }
    }
    *out = o;
    *pad_begin = pb;
    *pad_end = pe;
    return KILN_OK;
too_small:
    return kiln_error(KILN_ERR_SHAPE,
                      "spatial dimension %d: input size %lld (padded %lld+%lld) is smaller than the dilated kernel %lld",
                      i, (long long)in, (long long)w->pads[i], (long long)w->pads[w->nsp + i], (long long)dk);
}

kiln_status kiln_window_out_transpose(const kiln_window *w, int i, int64_t in, int64_t *out,
                                      int64_t *pad_begin) {
    KILN_ASSERT(w->has_kernel && i >= 0 && i < w->nsp);
    int64_t s = w->stride[i], dk, full = 0; /* full: the uncropped transposed extent */
    if (!dilated_kernel(w, i, &dk)) return too_large(w, i);
    if (in > 0 && (!kiln_mul_i64_ok(s, in - 1, &full) || !kiln_add_i64_ok(full, w->out_pad[i], &full) ||
                   !kiln_add_i64_ok(full, dk, &full)))
        return too_large(w, i);
    bool same = w->auto_pad == KILN_AUTO_PAD_SAME_UPPER || w->auto_pad == KILN_AUTO_PAD_SAME_LOWER;
    if (w->has_out_shape || same) {
        int64_t o = w->out_shape[i];
        if (!w->has_out_shape && !kiln_mul_i64_ok(in, s, &o)) return too_large(w, i);
        int64_t total = full - o;
        if (total < 0) total = 0; /* a larger requested output is extended at the end */
        *pad_begin = w->auto_pad == KILN_AUTO_PAD_SAME_UPPER ? total / 2 : total - total / 2;
        *out = o;
        return KILN_OK;
    }
    int64_t pb = w->auto_pad == KILN_AUTO_PAD_VALID ? 0 : w->pads[i];
    int64_t pe = w->auto_pad == KILN_AUTO_PAD_VALID ? 0 : w->pads[w->nsp + i];
    int64_t o;
    if (!kiln_sub_i64_ok(full, pb, &o) || !kiln_sub_i64_ok(o, pe, &o)) return too_large(w, i);
    if (o < 0)
        return kiln_error(KILN_ERR_SHAPE, "spatial dimension %d: pads %lld+%lld exceed the transposed size %lld", i,
                          (long long)pb, (long long)pe, (long long)full);
    *out = o;
    *pad_begin = pb;
    return KILN_OK;
}

kiln_status kiln_window_conv_shape(const kiln_node *n, const kiln_value *x, const kiln_value *w, int *rank,
                                   kiln_dim out[KILN_MAX_DIMS]) {
    *rank = x->ndim >= 0 ? x->ndim : w->ndim;
    if (*rank < 0) return KILN_OK;
    if (*rank < 3) return kiln_error(KILN_ERR_SHAPE, "%s input must have rank >= 3, has rank %d", n->op_type, *rank);
    if (w->ndim >= 0 && w->ndim != *rank)
        return kiln_error(KILN_ERR_SHAPE, "%s weights have rank %d but the input has rank %d", n->op_type, w->ndim,
                          *rank);
    int nsp = *rank - 2;
    int64_t group = kiln_attr_int(n, "group", 1), wk[KILN_MAX_DIMS], wc;
    if (group < 1)
        return kiln_error(KILN_ERR_INVALID_ARGUMENT, "%s group must be >= 1, got %lld", n->op_type, (long long)group);
    bool wk_known = w->ndim == *rank;
    for (int i = 0; wk_known && i < nsp; i++) {
        wk_known = kiln_dim_is_static(w->dims[2 + i]);
        wk[i] = w->dims[2 + i].value;
    }
    kiln_window win;
    KILN_TRY(kiln_window_parse(n, nsp, wk_known ? wk : NULL, &win));
    if (x->ndim >= 0 && w->ndim >= 0 && x->dims[1].sym == 0 && w->dims[1].sym == 0 &&
        (!kiln_mul_i64_ok(w->dims[1].value, group, &wc) || x->dims[1].value != wc))
        return kiln_error(KILN_ERR_SHAPE, "%s input has %lld channels but weights expect %lld x group %lld", n->op_type,
                          (long long)x->dims[1].value, (long long)w->dims[1].value, (long long)group);
    out[0] = x->ndim >= 0 ? x->dims[0] : KILN_DIM_UNKNOWN;
    out[1] = w->ndim >= 0 ? w->dims[0] : KILN_DIM_UNKNOWN;
    if (out[1].sym == 0 && out[1].value % group)
        return kiln_error(KILN_ERR_SHAPE, "%s output channels %lld are not divisible by group %lld", n->op_type,
                          (long long)out[1].value, (long long)group);
    for (int i = 0; i < nsp; i++) {
        out[2 + i] = KILN_DIM_UNKNOWN;
        if (x->ndim >= 0 && kiln_dim_is_static(x->dims[2 + i]) && win.has_kernel) {
            int64_t o, pb, pe;
            KILN_TRY(kiln_window_out(&win, i, x->dims[2 + i].value, &o, &pb, &pe));
            out[2 + i] = kiln_dim_static(o);
        }
    }
    return KILN_OK;
}
