/* histogram.h — a lossless log-linear histogram of int64 values (latencies in microseconds or
 * nanoseconds: the histogram does not know the unit, the caller picks one and keeps to it), in the
 * style of HdrHistogram.
 *
 * Layout. The value range [0, highest] is covered by buckets whose widths double from one bucket to
 * the next; each bucket is split linearly into sub-buckets. With `sig_digits` = d significant
 * decimal digits, every sub-bucket is at most max(v * 10^-d, unit) wide, where v is the lowest
 * value of the sub-bucket and unit = 2^floor(log2(lowest)) is the resolution near zero. So any
 * recorded value is known to within a relative error of 10^-d (or an absolute error below `unit`
 * for values smaller than about unit * 10^d). The counts are exact: nothing is sampled or decayed.
 *
 * Equivalent values. All values that fall into one sub-bucket are "equivalent"; the sub-bucket is
 * reported by its range [lowest equivalent, highest equivalent] (kiln_hist_lowest_equivalent /
 * kiln_hist_highest_equivalent).
 *
 * Out-of-range values are clamped and counted, never dropped: a value above `highest` is recorded as
 * `highest` and counted in kiln_hist_overflow(); a negative value is recorded as 0 and counted in
 * kiln_hist_underflow(). Clamped values are included in every statistic (count, min, max, mean, ...)
 * at their clamped value.
 *
 * Exact side statistics. min, max, mean and standard deviation are computed from the exact recorded
 * (clamped) values — not from the buckets — with Welford's running update (and Chan's formula when
 * merging). Percentiles come from the buckets (see kiln_hist_value_at_percentile).
 *
 * Threads. A histogram is single-writer: one thread records into it, and nobody reads it while that
 * thread writes. Multi-threaded recorders give every thread its own histogram (kiln_hist_create_like)
 * and merge them (kiln_hist_merge) when done. Recording never allocates and never fails.
 */
#ifndef KILN_STATS_HISTOGRAM_H
#define KILN_STATS_HISTOGRAM_H

#include "kiln/kiln.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct kiln_hist kiln_hist;

/* Creates an empty histogram. `lowest` (>= 1) is the lowest discernible value: the resolution near
 * zero is 2^floor(log2(lowest)). `highest` (>= 2 * lowest) is the highest trackable value; larger
 * values are clamped to it. `sig_digits` (1..5) is the number of significant decimal digits kept.
 * Memory is about 8 * 2 * 10^d * log2(highest / (lowest * 10^d)) bytes (d = sig_digits): e.g. 270 KB
 * for 1 us .. 1 h in microseconds at 3 digits, 27 MB at 5 digits.
 * On success *out owns the histogram (free with kiln_hist_free). Errors: KILN_ERR_INVALID_ARGUMENT
 * for a bad parameter, KILN_ERR_OUT_OF_MEMORY. */
kiln_status kiln_hist_create(int64_t lowest, int64_t highest, int sig_digits, kiln_hist **out);
/* Creates an empty histogram with the same configuration as `h` (for per-thread histograms that
 * will be merged). Ownership and errors as kiln_hist_create. */
kiln_status kiln_hist_create_like(const kiln_hist *h, kiln_hist **out);
/* Frees a histogram. Accepts NULL. */
void kiln_hist_free(kiln_hist *h);
/* Empties the histogram (all counts and statistics back to zero); keeps the configuration. */
void kiln_hist_reset(kiln_hist *h);

/* Records one value (clamped as described above). */
void kiln_hist_record(kiln_hist *h, int64_t value);
/* Records `count` occurrences of a value (count <= 0 records nothing). */
void kiln_hist_record_n(kiln_hist *h, int64_t value, int64_t count);
/* Records a value and back-fills the samples a closed-loop measurement missed while the system was
 * stalled (HdrHistogram's coordinated-omission correction): if expected_interval > 0 and
 * value > expected_interval, also records value - k * expected_interval for k = 1, 2, ... while that
 * is >= expected_interval. Use only for closed-loop measurements that are to be compared with
 * open-loop ones; kiln load itself is open-loop and records plainly. Costs one record per
 * back-filled value (value / expected_interval of them). */
void kiln_hist_record_corrected(kiln_hist *h, int64_t value, int64_t expected_interval);
/* Adds every count and statistic of `src` into `dst`. Both must have the same (lowest, highest,
 * sig_digits); otherwise KILN_ERR_INVALID_ARGUMENT and dst is unchanged. src may not be dst. */
kiln_status kiln_hist_merge(kiln_hist *dst, const kiln_hist *src);

/* Number of recorded values (including clamped ones). */
int64_t kiln_hist_count(const kiln_hist *h);
/* Number of recorded values that were above `highest` (recorded as `highest`). */
int64_t kiln_hist_overflow(const kiln_hist *h);
/* Number of recorded values that were negative (recorded as 0). */
int64_t kiln_hist_underflow(const kiln_hist *h);
/* Exact smallest / largest recorded (clamped) value; 0 when the histogram is empty. */
int64_t kiln_hist_min(const kiln_hist *h);
int64_t kiln_hist_max(const kiln_hist *h);
/* Exact arithmetic mean of the recorded (clamped) values; 0 when empty. */
double kiln_hist_mean(const kiln_hist *h);
/* Exact population standard deviation (divides by N, not N - 1) of the recorded (clamped) values;
 * 0 when empty. */
double kiln_hist_stddev(const kiln_hist *h);

/* The value at percentile p (0..100; clamped into that range, NaN counts as 0), defined as in
 * HdrHistogram: the lowest recorded value v such that at least p% of the recorded values are <= v —
 * i.e. the value of rank r = max(1, ceil(p/100 * N)) in sorted order (1-based; computed by
 * kiln_percentile_rank of summary.h, exact for decimal p such as 99.9) — reported as the
 * highest equivalent value of its sub-bucket. For p == 0 the *lowest* equivalent value of the first
 * non-empty sub-bucket is returned (as HdrHistogram does). Returns 0 when the histogram is empty.
 * Guarantee: with x the exact rank-r value, x <= result <= x + max(x * 10^-d, unit) - 1 (p > 0). */
int64_t kiln_hist_value_at_percentile(const kiln_hist *h, double p);
/* Percentile rank of a value: 100 * (number of recorded values <= highest equivalent of v) / N.
 * Returns 0 when empty (and 100 for v >= max). */
double kiln_hist_percentile_of(const kiln_hist *h, int64_t value);

/* The range of values equivalent to `value` (sharing its sub-bucket); value is clamped into
 * [0, highest] first. lowest_equivalent(v) <= v <= highest_equivalent(v). */
int64_t kiln_hist_lowest_equivalent(const kiln_hist *h, int64_t value);
int64_t kiln_hist_highest_equivalent(const kiln_hist *h, int64_t value);

/* ------------------------------------------------------------------ iteration (for charts)
 * Visits the non-empty sub-buckets in increasing value order:
 *
 *     kiln_hist_iter it; kiln_hist_bucket b;
 *     kiln_hist_iter_init(&it, h);
 *     while (kiln_hist_iter_next(&it, &b)) { ... b.lo, b.hi, b.count, b.cumulative ... }
 *
 * The histogram must not be written during the iteration. */
typedef struct kiln_hist_bucket {
    int64_t lo;         /* lowest equivalent value of the sub-bucket */
    int64_t hi;         /* highest equivalent value (inclusive) */
    int64_t count;      /* > 0 */
    int64_t cumulative; /* count of all values <= hi (this bucket and the ones before) */
} kiln_hist_bucket;

typedef struct kiln_hist_iter {
    const kiln_hist *h;
    int32_t next_index; /* next counts slot to look at (internal) */
    int64_t cumulative; /* running count so far (internal) */
} kiln_hist_iter;

void kiln_hist_iter_init(kiln_hist_iter *it, const kiln_hist *h);
/* Fills *b with the next non-empty sub-bucket and returns true; false when there are no more. */
bool kiln_hist_iter_next(kiln_hist_iter *it, kiln_hist_bucket *b);

/* ------------------------------------------------------------------ display helpers */

/* One bar of a displayed histogram: the values in [lo, hi) (the last bin also includes hi). */
typedef struct kiln_hist_bin {
    double lo, hi;
    int64_t count;
} kiln_hist_bin;

/* Re-buckets the histogram into at most `nbins` (>= 1) display bins spanning [min, max] of the
 * recorded values, with logarithmically spaced edges when log_scale (edges lo * (hi/lo)^(i/nbins);
 * a lower edge of 0 is replaced by max(1, min) and zero values go into the first bin) or equal
 * widths otherwise. Each sub-bucket's count goes to the bin that holds its midpoint value (clamped to
 * [min, max]), so counts are exact and sum to kiln_hist_count(h), while bin edges are resolved only
 * to the sub-bucket width. Writes the bins to bins[0..n) and returns n: 0 when the histogram is
 * empty, 1 when min == max, else nbins. */
int kiln_hist_display_bins(const kiln_hist *h, int nbins, bool log_scale, kiln_hist_bin *bins);

/* The HdrHistogram percentile distribution: writes (percentile, value) points at percentiles
 * 0, then `ticks_per_half` (>= 1) evenly spaced steps in each halving of the remaining distance to
 * 100 (50, 75, 87.5, ... for ticks_per_half = 1), stopping after the first percentile whose
 * 1/(1 - p/100) exceeds the count, then 100. Each value is kiln_hist_value_at_percentile (all found
 * in one sweep over the counts). At most `cap` points are written to pct[] / val[] (the point at
 * 100 always ends the list when cap >= 2); returns the number written (0 when the histogram is
 * empty). */
int kiln_hist_percentile_points(const kiln_hist *h, int ticks_per_half, double *pct, int64_t *val,
                                int cap);

#endif
