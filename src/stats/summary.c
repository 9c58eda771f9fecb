/* summary.c — exact sample statistics with trtexec's nearest-rank percentiles (summary.h states
 * the methods). */
#include "stats/summary.h"

#include "core/status.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

void kiln_sort_doubles(double *x, size_t n) {
    if (n > 1) qsort(x, n, sizeof *x, cmp_double);
}

/* Checks that samples[0..n) is a non-empty array of finite values. */
static kiln_status check_samples(const double *samples, size_t n) {
    if (!samples || n == 0)
        return kiln_error(KILN_ERR_INVALID_ARGUMENT, "statistics: no samples");
    for (size_t i = 0; i < n; i++)
        if (!isfinite(samples[i]))
            return kiln_error(KILN_ERR_INVALID_ARGUMENT, "statistics: sample %zu is %g (not finite)",
                              i, samples[i]);
    return KILN_OK;
}

/* A sorted, malloc'd copy of samples[0..n) in *out (the caller frees it). */
static kiln_status sorted_copy(const double *samples, size_t n, double **out) {
    KILN_TRY(check_samples(samples, n));
    double *s = malloc(n * sizeof *s);
    if (!s) return kiln_error(KILN_ERR_OUT_OF_MEMORY, "statistics: out of memory for %zu samples", n);
    memcpy(s, samples, n * sizeof *s);
    kiln_sort_doubles(s, n);
    *out = s;
    return KILN_OK;
}

uint64_t kiln_percentile_rank(uint64_t n, double p) {
    if (!(p > 0)) p = 0;
    if (p > 100) p = 100;
    double frac = p * (double)n / 100.0, near = round(frac);
    if (fabs(frac - near) <= 1e-9 * fmax(1.0, frac)) frac = near;
    double rank = ceil(frac);
    if (rank < 1) return 1;
    if (rank >= (double)n) return n;
    return (uint64_t)rank;
}

size_t kiln_percentile_rank_index(size_t n, double p) {
    return (size_t)(kiln_percentile_rank(n, p) - 1);
}

double kiln_percentile_sorted(const double *sorted, size_t n, double p) {
    return sorted[kiln_percentile_rank_index(n, p)];
}

kiln_status kiln_summary_compute_sorted(const double *sorted, size_t n, kiln_summary *out) {
    KILN_TRY(check_samples(sorted, n));
    if (sorted[0] > sorted[n - 1])
        return kiln_error(KILN_ERR_INVALID_ARGUMENT, "statistics: samples are not sorted ascending");
    kiln_summary s = {0};
    s.n = n;
    s.min = sorted[0];
    s.max = sorted[n - 1];
    for (size_t i = 0; i < n; i++) s.sum += sorted[i];
    s.mean = s.sum / (double)n;
    /* Second pass: squared deviations from the mean (more accurate than sum of squares). */
    double ss = 0;
    for (size_t i = 0; i < n; i++) {
        double d = sorted[i] - s.mean;
        ss += d * d;
    }
    s.stddev = sqrt(ss / (double)n);
    s.median = n % 2 ? sorted[n / 2] : (sorted[n / 2 - 1] + sorted[n / 2]) / 2;
    if (s.stddev == 0)
        s.cv = 0;
    else
        s.cv = s.mean == 0 ? INFINITY : s.stddev / fabs(s.mean);
    *out = s;
    return KILN_OK;
}

kiln_status kiln_summary_compute(const double *samples, size_t n, kiln_summary *out) {
    double *s;
    KILN_TRY(sorted_copy(samples, n, &s));
    kiln_status st = kiln_summary_compute_sorted(s, n, out);
    free(s);
    return st;
}

kiln_status kiln_summary_percentiles(const double *samples, size_t n, const double *ps, size_t np,
                                     double *values) {
    for (size_t i = 0; i < np; i++)
        if (!(ps[i] >= 0 && ps[i] <= 100))
            return kiln_error(KILN_ERR_INVALID_ARGUMENT,
                              "statistics: percentile %g (index %zu) is not in [0, 100]", ps[i], i);
    double *s;
    KILN_TRY(sorted_copy(samples, n, &s));
    for (size_t i = 0; i < np; i++) values[i] = kiln_percentile_sorted(s, n, ps[i]);
    free(s);
    return KILN_OK;
}
