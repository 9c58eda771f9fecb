/* summary.h — exact statistics over an array of samples (double; kiln uses milliseconds), the way
 * trtexec reports them. Reports must state the methods; these are they:
 *
 *   min, max       exact.
 *   mean           arithmetic mean, sum / N.
 *   median         the middle sorted value for odd N, the average of the two middle values for even N.
 *   percentile p   nearest rank as trtexec computes it: sorted[max(0, N - 1 - floor((1 - p/100) * N))]
 *                  (0-based, ascending). Since floor(N - q*N) = N - ceil(q*N), this is the value of
 *                  1-based rank max(1, ceil(p/100 * N)): the same rank HdrHistogram uses
 *                  (histogram.h), and kiln computes it that way (kiln_percentile_rank), snapping
 *                  p/100 * N to the nearest integer when it is within 1e-9 (relative) of it, so that
 *                  decimal percentiles whose exact product is an integer (99.9 % of 1000, 90 % of 10)
 *                  get the exact rank despite the binary rounding of p (trtexec's float arithmetic
 *                  can land one rank off there). p = 0 gives the minimum, p = 100 the maximum.
 *   stddev         POPULATION standard deviation, sqrt(sum((x - mean)^2) / N) (as trtexec), computed
 *                  with two passes over the data.
 *   cv             coefficient of variation, stddev / |mean|, as a fraction (0.05 = 5 %); 0 when
 *                  stddev == 0, +infinity when mean == 0 and stddev > 0.
 *
 * Samples must be finite; NaN or infinity is an error (KILN_ERR_INVALID_ARGUMENT) naming its index.
 */
#ifndef KILN_STATS_SUMMARY_H
#define KILN_STATS_SUMMARY_H

#include "kiln/kiln.h"

#include <stddef.h>
#include <stdint.h>

/* Text for reports, naming the methods above. */
#define KILN_SUMMARY_PERCENTILE_METHOD "nearest rank (trtexec): sorted[N-1-floor((1-p/100)*N)]"
#define KILN_SUMMARY_STDDEV_METHOD "population standard deviation (divides by N)"
#define KILN_SUMMARY_MEDIAN_METHOD "middle value; mean of the two middle values for even N"

typedef struct kiln_summary {
    size_t n;
    double min, max, mean, median;
    double stddev; /* population */
    double cv;     /* stddev / |mean| (fraction) */
    double sum;
} kiln_summary;

/* Computes the summary of samples[0..n). n >= 1; samples are not modified (a sorted copy is made).
 * Errors: KILN_ERR_INVALID_ARGUMENT (n == 0, NULL, non-finite sample), KILN_ERR_OUT_OF_MEMORY. */
kiln_status kiln_summary_compute(const double *samples, size_t n, kiln_summary *out);

/* The same, for samples already sorted ascending (not checked beyond min <= max); no allocation. */
kiln_status kiln_summary_compute_sorted(const double *sorted, size_t n, kiln_summary *out);

/* Writes the nearest-rank percentile (rule above) of samples[0..n) for each ps[i] (0..100) to
 * values[i]. Samples are not modified (a sorted copy is made). Errors: KILN_ERR_INVALID_ARGUMENT
 * (n == 0, a p outside [0, 100] or NaN, a non-finite sample), KILN_ERR_OUT_OF_MEMORY. */
kiln_status kiln_summary_percentiles(const double *samples, size_t n, const double *ps, size_t np,
                                     double *values);

/* The 1-based rank max(1, ceil(p/100 * n)) of percentile p among n >= 1 values (p is clamped into
 * [0, 100], NaN counts as 0), with the integer snapping described above. Shared with histogram.c. */
uint64_t kiln_percentile_rank(uint64_t n, double p);

/* The 0-based index in a sorted array of n >= 1 values that the nearest-rank rule picks for p:
 * kiln_percentile_rank(n, p) - 1. */
size_t kiln_percentile_rank_index(size_t n, double p);

/* The nearest-rank percentile p of sorted[0..n) (ascending, n >= 1): sorted[rank_index(n, p)]. */
double kiln_percentile_sorted(const double *sorted, size_t n, double p);

/* Sorts x[0..n) ascending in place (finite values; the order of NaNs is unspecified). */
void kiln_sort_doubles(double *x, size_t n);

#endif
