/* resize_geom.h — the geometry of Resize / Upsample shared by the CPU kernel (backends/cpu/resize.c)
 * and the CUDA kernel (backends/cuda/resize.cu), so that both pick the same input positions and
 * weights: the parameters of one call (kiln_resize_setup, resize_geom.c), and the per-axis coordinate
 * functions, following the ONNX reference exactly — coordinate transformation, the choice of
 * neighbours, edge clamping, exclude_outside, antialias and tf_crop_and_resize extrapolation.
 *
 * The coordinate functions are static inline and compile for the host and, under nvcc, for the device
 * too (KILN_RG_FN); the CUDA file compiles with --fmad=false so that double arithmetic rounds as here. */
#ifndef KILN_IR_RESIZE_GEOM_H
#define KILN_IR_RESIZE_GEOM_H

#include "core/tensor.h"
#include "ir/graph.h"
#include "kiln/kiln.h"

#include <math.h>
#include <stdbool.h>
#include <stdint.h>

#ifdef __CUDACC__
#define KILN_RG_FN static inline __host__ __device__
#else
#define KILN_RG_FN static inline
#endif

enum { KILN_RESIZE_NEAREST, KILN_RESIZE_LINEAR, KILN_RESIZE_CUBIC };
enum { KILN_RC_HALF_PIXEL, KILN_RC_HALF_PIXEL_SYM, KILN_RC_PYTORCH_HALF_PIXEL, KILN_RC_ALIGN_CORNERS,
       KILN_RC_ASYMMETRIC, KILN_RC_TF_CROP, KILN_RC_TF_HALF_PIXEL_NN };
enum { KILN_RN_PREFER_FLOOR, KILN_RN_PREFER_CEIL, KILN_RN_FLOOR, KILN_RN_CEIL, KILN_RN_SIMPLE };

/* Everything one Resize call needs: mode, coordinate mode, nearest mode, attributes, and per axis the
 * input and output sizes, the scale and the roi ([0, 1] unless tf_crop_and_resize). */
typedef struct kiln_resize_params {
    int mode, coord, nearest;
    float cubic_a, extrapolation;
    bool exclude_outside, antialias;
    int rank;
    int64_t in[KILN_MAX_DIMS], out[KILN_MAX_DIMS];
    double scale[KILN_MAX_DIMS], roi0[KILN_MAX_DIMS], roi1[KILN_MAX_DIMS];
} kiln_resize_params;

/* Reads n's attributes (mode, coordinate_transformation_mode, nearest_mode, cubic_coeff_a,
 * exclude_outside, extrapolation_value, antialias, axes, keep_aspect_ratio_policy; Upsample's
 * scales) and its parameter inputs into p for an input of the given rank and dims: scales (float32),
 * roi (any numeric type) and sizes (int64/int32), each NULL when absent or empty. Fails with
 * KILN_ERR_INVALID_ARGUMENT naming what is wrong. (resize_geom.c) */
kiln_status kiln_resize_setup(const kiln_node *n, int rank, const int64_t *dims, const kiln_tensor *scales,
                              const kiln_tensor *roi, const kiln_tensor *sizes, kiln_resize_params *p);

/* The source coordinate of output position o on axis a; *extrap is set when it falls outside the
 * input (tf_crop_and_resize only). */
KILN_RG_FN double kiln_resize_source(const kiln_resize_params *p, int a, int64_t o, bool *extrap) {
    double in_w = (double)p->in[a], s = p->scale[a], out_w = s * in_w, x = (double)o;
    *extrap = false;
    switch (p->coord) {
    case KILN_RC_HALF_PIXEL: return (x + 0.5) / s - 0.5;
    case KILN_RC_HALF_PIXEL_SYM: {
        double adj = (double)p->out[a] / out_w, center = in_w / 2;
        return center * (1 - adj) + (x + 0.5) / s - 0.5;
    }
    case KILN_RC_PYTORCH_HALF_PIXEL: return out_w == 1 ? -0.5 : (x + 0.5) / s - 0.5;
    case KILN_RC_ALIGN_CORNERS: return out_w == 1 ? 0.0 : x * (in_w - 1) / (out_w - 1);
    case KILN_RC_TF_HALF_PIXEL_NN: return (x + 0.5) / s;
    case KILN_RC_TF_CROP: {
        double r0 = p->roi0[a], r1 = p->roi1[a];
        double v = out_w == 1 ? (r1 - r0) * (in_w - 1) / 2 : x * (r1 - r0) * (in_w - 1) / (out_w - 1);
        v += r0 * (in_w - 1);
        *extrap = v < 0 || v > in_w - 1;
        return v;
    }
    default: return x / s;
    }
}

/* The first of the n input positions that interpolate source coordinate x, chosen as the ONNX
 * reference does (the n positions nearest to x, ties to the smaller one), measured on x shifted by
 * ceil(n/2) — which matters when x is off an integer by rounding noise. */
KILN_RG_FN int64_t kiln_resize_tap_first(double x, int n) {
    int pad = (n + 1) / 2;
    double xp = x + pad, pp = floor(xp), frac = xp - pp;
    int off = n % 2 == 0 ? (frac == 0 ? -(n / 2) : 1 - n / 2) : (frac <= 0.5 ? -((n - 1) / 2) : 1 - (n - 1) / 2);
    return (int64_t)pp + off - pad;
}

/* The weight position of x between its two neighbours: x - floor(x), or 1 when x is integral. */
KILN_RG_FN double kiln_resize_tap_ratio(double x) {
    double fl = floor(x);
    return x == fl ? 1.0 : x - fl;
}

/* True when axis a is left as it is (same size, scale 1, whole roi). */
KILN_RG_FN bool kiln_resize_axis_identity(const kiln_resize_params *p, int a) {
    return p->out[a] == p->in[a] && p->scale[a] == 1.0 &&
           (p->coord != KILN_RC_TF_CROP || (p->roi0[a] == 0.0 && p->roi1[a] == 1.0));
}

/* The nearest input index for output o on axis a (o itself on an identity axis), or -1 when it is
 * extrapolated. */
KILN_RG_FN int64_t kiln_resize_nearest_index(const kiln_resize_params *p, int a, int64_t o) {
    if (kiln_resize_axis_identity(p, a)) return o;
    bool ex;
    double x = kiln_resize_source(p, a, o, &ex);
    if (ex) return -1;
    int64_t i;
    if (p->nearest == KILN_RN_SIMPLE) {
        i = p->scale[a] < 1 ? (int64_t)ceil(x) : (int64_t)floor(x);
    } else {
        double r = kiln_resize_tap_ratio(x);
        bool second = r == 1.0 || (p->nearest == KILN_RN_PREFER_FLOOR && r > 0.5) ||
                      (p->nearest == KILN_RN_PREFER_CEIL && r >= 0.5) || p->nearest == KILN_RN_CEIL;
        i = kiln_resize_tap_first(x, 2) + second;
    }
    return i < 0 ? 0 : i >= p->in[a] ? p->in[a] - 1 : i;
}

/* Cubic convolution kernel with parameter A at distance d, evaluated in float32 as the ONNX reference
 * does (its coefficient A is a float32 attribute), so results agree where cubic taps cancel. */
KILN_RG_FN double kiln_resize_cubic_w(double d, float A) {
    float x = (float)fabs(d);
    if (x <= 1) return ((A + 2) * x - (A + 3)) * x * x + 1;
    if (x < 2) return ((A * x - 5 * A) * x + 8 * A) * x - 4 * A;
    return 0;
}

/* The tap count of linear/cubic on axis a (antialias widens the kernel when downsampling). */
KILN_RG_FN int kiln_resize_taps(const kiln_resize_params *p, int a) {
    int base = p->mode == KILN_RESIZE_LINEAR ? 1 : 2;
    if (!p->antialias) return 2 * base;
    double s = p->scale[a] < 1 ? p->scale[a] : 1.0;
    int start = (int)floor(-base / s) + 1;
    return 2 - 2 * start;
}

/* Fills the n taps (input indices idx, weights w) of output o on axis a, as the reference does: tap
 * t reads tap_first(x) + t (clamped into the input) and is weighted by the kernel at distance
 * (1 - n/2 + t) - tap_ratio(x). *extrap when extrapolated. */
KILN_RG_FN void kiln_resize_plan_taps(const kiln_resize_params *p, int a, int64_t o, int n, int64_t *idx, double *w,
                                      bool *extrap) {
    double x = kiln_resize_source(p, a, o, extrap), ratio = kiln_resize_tap_ratio(x);
    double s = p->scale[a] < 1 ? p->scale[a] : 1.0, sum = 0;
    int64_t first = kiln_resize_tap_first(x, n);
    int start = 1 - n / 2;
    for (int t = 0; t < n; t++) {
        double dist = (double)(start + t) - ratio;
        if (p->antialias) dist *= s;
        w[t] = p->mode == KILN_RESIZE_LINEAR ? fmax(0.0, 1 - fabs(dist)) : kiln_resize_cubic_w(dist, p->cubic_a);
        idx[t] = first + t;
        sum += w[t];
    }
    if (p->antialias && sum != 0)
        for (int t = 0; t < n; t++) w[t] /= sum;
    if (p->exclude_outside) {
        sum = 0;
        for (int t = 0; t < n; t++) {
            if (idx[t] < 0 || idx[t] >= p->in[a]) w[t] = 0;
            sum += w[t];
        }
        if (sum != 0)
            for (int t = 0; t < n; t++) w[t] /= sum;
    }
    for (int t = 0; t < n; t++) idx[t] = idx[t] < 0 ? 0 : idx[t] >= p->in[a] ? p->in[a] - 1 : idx[t];
}

#endif
