/* resize_geom.c — the parameters of one Resize / Upsample call (resize_geom.h), read from the node's
 * attributes and its scales / roi / sizes inputs; shared by the CPU and CUDA kernels. */
#include "ir/resize_geom.h"

#include "core/status.h"
#include "core/tensor.h"
#include "ir/graph.h"
#include "ir/shape_calc.h"

#include <string.h>

static int pick(const char *s, const char *const *names, int count) {
    for (int i = 0; i < count; i++)
        if (!strcmp(s, names[i])) return i;
    return -1;
}

/* Reads the mode attributes into p. */
static kiln_status read_modes(const kiln_node *n, bool v10, kiln_resize_params *p) {
    static const char *const modes[] = {"nearest", "linear", "cubic"};
    static const char *const coords[] = {"half_pixel", "half_pixel_symmetric", "pytorch_half_pixel", "align_corners",
                                         "asymmetric", "tf_crop_and_resize", "tf_half_pixel_for_nn"};
    static const char *const nearest[] = {"round_prefer_floor", "round_prefer_ceil", "floor", "ceil"};
    const char *ms = kiln_attr_string(n, "mode", "nearest"),
               *cs = kiln_attr_string(n, "coordinate_transformation_mode", "half_pixel"),
               *ns = kiln_attr_string(n, "nearest_mode", "round_prefer_floor");
    p->mode = pick(ms, modes, v10 ? 2 : 3);
    p->coord = v10 ? KILN_RC_ASYMMETRIC : pick(cs, coords, 7);
    p->nearest = v10 ? KILN_RN_SIMPLE : pick(ns, nearest, 4);
    if (p->mode < 0) return kiln_error(KILN_ERR_INVALID_ARGUMENT, "%s: unknown mode '%s'", n->op_type, ms);
    if (p->coord < 0) return kiln_error(KILN_ERR_INVALID_ARGUMENT, "%s: unknown coordinate_transformation_mode '%s'", n->op_type, cs);
    if (p->nearest < 0) return kiln_error(KILN_ERR_INVALID_ARGUMENT, "%s: unknown nearest_mode '%s'", n->op_type, ns);
    p->cubic_a = kiln_attr_float(n, "cubic_coeff_a", -0.75f);
    p->extrapolation = kiln_attr_float(n, "extrapolation_value", 0.0f);
    p->exclude_outside = kiln_attr_int(n, "exclude_outside", 0) != 0;
    p->antialias = n->opset >= 18 && kiln_attr_int(n, "antialias", 0) != 0;
    if (p->antialias && p->mode == KILN_RESIZE_NEAREST)
        return kiln_error(KILN_ERR_INVALID_ARGUMENT, "Resize: antialias is not defined for mode 'nearest'");
    return KILN_OK;
}

kiln_status kiln_resize_setup(const kiln_node *n, int rank, const int64_t *dims, const kiln_tensor *scales,
                              const kiln_tensor *roi, const kiln_tensor *sizes, kiln_resize_params *p) {
    bool upsample = !strcmp(n->op_type, "Upsample"), v10 = upsample || n->opset < 11;
    KILN_TRY(read_modes(n, v10, p));
    int r = p->rank = rank, axes[KILN_MAX_DIMS], naxes = r, nax;
    const int64_t *axattr = !upsample && n->opset >= 18 ? kiln_attr_ints(n, "axes", &nax) : NULL;
    if (axattr) {
        if (nax > r) return kiln_error(KILN_ERR_INVALID_ARGUMENT, "Resize: %d axes for rank %d", nax, r);
        KILN_TRY(kiln_axes_normalize("Resize", nax, axattr, r, axes));
        naxes = nax;
    } else {
        for (int i = 0; i < r; i++) axes[i] = i;
    }
    if (scales && sizes) return kiln_error(KILN_ERR_INVALID_ARGUMENT, "Resize: only one of 'scales' and 'sizes' may be given");
    double sc[KILN_MAX_DIMS];
    if (upsample && n->opset < 9) {
        int c;
        const float *f = kiln_attr_floats(n, "scales", &c);
        if (!f || c != naxes) return kiln_error(KILN_ERR_INVALID_ARGUMENT, "Upsample: attribute 'scales' must have %d values", naxes);
        for (int j = 0; j < c; j++) sc[j] = f[j];
    } else if (scales) {
        if (scales->dtype != KILN_F32 || kiln_tensor_numel(scales) != naxes)
            return kiln_error(KILN_ERR_INVALID_ARGUMENT, "%s: 'scales' must be %d float32 values", n->op_type, naxes);
        for (int j = 0; j < naxes; j++) sc[j] = ((const float *)scales->data)[j];
    } else if (!sizes) {
        return kiln_error(KILN_ERR_INVALID_ARGUMENT, "%s: one of 'scales' and 'sizes' is required", n->op_type);
    }
    if (sizes) {
        int64_t sz[KILN_MAX_DIMS], c = kiln_tensor_numel(sizes);
        if ((sizes->dtype != KILN_I64 && sizes->dtype != KILN_I32) || sizes->ndim > 1 || c != naxes)
            return kiln_error(KILN_ERR_INVALID_ARGUMENT, "Resize: 'sizes' must be %d int64 values, got %lld %s values",
                              naxes, (long long)c, kiln_dtype_name(sizes->dtype));
        for (int64_t j = 0; j < c; j++) sz[j] = kiln_tensor_get_i64(sizes, j);
        const char *policy = n->opset >= 18 ? kiln_attr_string(n, "keep_aspect_ratio_policy", "stretch") : "stretch";
        KILN_TRY(kiln_resize_sizes(r, dims, naxes, axes, sz, policy, p->out, p->scale));
    } else {
        for (int i = 0; i < r; i++) {
            p->out[i] = dims[i];
            p->scale[i] = 1.0;
        }
        for (int j = 0; j < naxes; j++) {
            if (!(sc[j] > 0)) return kiln_error(KILN_ERR_INVALID_ARGUMENT, "%s: scale %g must be positive", n->op_type, sc[j]);
            p->scale[axes[j]] = sc[j];
            p->out[axes[j]] = kiln_resize_dim(dims[axes[j]], sc[j]);
        }
    }
    for (int i = 0; i < r; i++) {
        p->in[i] = dims[i];
        p->roi0[i] = 0.0;
        p->roi1[i] = 1.0;
    }
    if (p->coord == KILN_RC_TF_CROP) {
        if (!roi || kiln_tensor_numel(roi) != 2 * naxes)
            return kiln_error(KILN_ERR_INVALID_ARGUMENT, "Resize: tf_crop_and_resize needs a roi of %d values", 2 * naxes);
        for (int j = 0; j < naxes; j++) {
            p->roi0[axes[j]] = kiln_tensor_get_f64(roi, j);
            p->roi1[axes[j]] = kiln_tensor_get_f64(roi, j + naxes);
        }
    }
    return KILN_OK;
}
