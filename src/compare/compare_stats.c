/* compare_stats.c — error statistics of one tensor against its reference, and the tolerance rule
 * (numpy's allclose: |test - ref| <= atol + rtol * |ref| for every element). */
#include "compare/compare.h"

#include <math.h>
#include <string.h>

void kiln_compare_tolerance(kiln_precision p, double *atol, double *rtol) {
    double t = p == KILN_PRECISION_FP16 ? 1e-2 : p == KILN_PRECISION_BF16 ? 2e-2 : 1e-4;
    *atol = t;
    *rtol = t;
}

/* Whether one element pair passes; NaN matches NaN and an infinity the same infinity. */
static bool element_ok(double t, double r, double atol, double rtol) {
    if (isnan(t) || isnan(r)) return isnan(t) && isnan(r);
    if (isinf(t) || isinf(r)) return t == r;
    return fabs(t - r) <= atol + rtol * fabs(r);
}

static bool is_float(kiln_dtype t) { return t == KILN_F32 || t == KILN_F16 || t == KILN_BF16 || t == KILN_F64; }

/* The class of row r's largest element (the first on ties; NaNs never win). */
static int64_t argmax_row(const kiln_tensor *t, int64_t r, int64_t classes) {
    int64_t best = 0;
    double v = -INFINITY;
    for (int64_t c = 0; c < classes; c++) {
        double x = kiln_tensor_get_f64(t, r * classes + c);
        if (x > v) v = x, best = c;
    }
    return best;
}

/* Top-1 agreement of a [rows, classes] float output. */
static void top1(const kiln_tensor *test, const kiln_tensor *ref, kiln_compare_stats *out) {
    if (ref->ndim != 2 || ref->dims[1] < 2 || !is_float(ref->dtype) || !is_float(test->dtype)) return;
    out->rows = ref->dims[0];
    for (int64_t r = 0; r < out->rows; r++)
        out->top1 += argmax_row(test, r, ref->dims[1]) == argmax_row(ref, r, ref->dims[1]);
}

void kiln_compare_tensors(const kiln_tensor *test, const kiln_tensor *ref, double atol, double rtol,
                          kiln_compare_stats *out) {
    memset(out, 0, sizeof *out);
    out->shape_ok = test->ndim == ref->ndim;
    for (int d = 0; out->shape_ok && d < ref->ndim; d++) out->shape_ok = test->dims[d] == ref->dims[d];
    if (!out->shape_ok || kiln_dtype_size(test->dtype) == 0 || kiln_dtype_size(ref->dtype) == 0) {
        out->shape_ok = out->shape_ok && kiln_dtype_size(test->dtype) && kiln_dtype_size(ref->dtype);
        return;
    }
    int64_t n = kiln_tensor_numel(ref);
    double sum_abs = 0, dot = 0, nt = 0, nr = 0;
    for (int64_t i = 0; i < n; i++) {
        double t = kiln_tensor_get_f64(test, i), r = kiln_tensor_get_f64(ref, i);
        if (!element_ok(t, r, atol, rtol)) out->failing++;
        double d = fabs(t - r);
        if (isnan(d)) {
            if (isnan(t) != isnan(r)) out->max_abs = INFINITY;
            continue;
        }
        if (t == r) d = 0; /* equal infinities */
        out->max_abs = fmax(out->max_abs, d);
        if (fabs(r) > atol) out->max_rel = fmax(out->max_rel, d / fabs(r));
        sum_abs += d;
        dot += t * r;
        nt += t * t;
        nr += r * r;
    }
    out->count = n;
    out->mean_abs = n ? sum_abs / (double)n : 0;
    out->cosine = nt == 0 && nr == 0 ? 1.0 : nt == 0 || nr == 0 ? 0.0 : dot / (sqrt(nt) * sqrt(nr));
    out->pass = out->failing == 0;
    top1(test, ref, out);
}
