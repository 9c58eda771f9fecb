/* test_stats.c — tests of src/stats/: exact summaries and trtexec percentiles on known inputs, the
 * log-linear histogram (bucket boundaries, the top of the range, clamping, merge, the coordinated-
 * omission back-fill, and invariants over random data: every percentile is the highest equivalent
 * value of the exact sorted one), the JSON and CSV writers (exact escaped output, misuse), and the
 * HTML report's structure. `test_stats --write-sample DIR` only writes the sample files of
 * report_sample.c (for tests/e2e/test_report_render.py). */
#include "check.h"
#include "stats/histogram.h"
#include "stats/report.h"
#include "stats/summary.h"

#include "core/status.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

kiln_status kiln_test_write_sample(const char *dir); /* report_sample.c */

#define CHECK_EQ_I(a, b)                                                                           \
    do {                                                                                           \
        long long a_ = (long long)(a), b_ = (long long)(b);                                        \
        if (a_ != b_) {                                                                            \
            fprintf(stderr, "%s:%d: %s == %lld, expected %s == %lld\n", __FILE__, __LINE__, #a, a_, \
                    #b, b_);                                                                       \
            failures++;                                                                            \
        }                                                                                          \
    } while (0)

static uint64_t rng = 88172645463325252ULL;
static uint64_t next_u64(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}
static double next_unit(void) { return (double)(next_u64() >> 11) / 9007199254740992.0; }

/* ------------------------------------------------------------------ summary.h */

static void check_summary(const double *x, size_t n, double mn, double mx, double mean, double median,
                          double sd) {
    kiln_summary s;
    REQUIRE_OK(kiln_summary_compute(x, n, &s));
    CHECK_EQ_I(s.n, n);
    CHECK_NEAR(s.min, mn, 0);
    CHECK_NEAR(s.max, mx, 0);
    CHECK_NEAR(s.mean, mean, 1e-12 * fabs(mean));
    CHECK_NEAR(s.median, median, 0);
    CHECK_NEAR(s.stddev, sd, 1e-12 * (sd + 1));
    CHECK_NEAR(s.cv, sd == 0 ? 0 : sd / fabs(mean), 1e-12);
}

static void test_summary(void) {
    double a[1000];
    /* 1..100 shuffled: p = k is value k; population sd = sqrt((N^2 - 1) / 12). */
    for (int i = 0; i < 100; i++) a[i] = i + 1;
    for (int i = 99; i > 0; i--) {
        int j = (int)(next_u64() % (uint64_t)(i + 1));
        double t = a[i];
        a[i] = a[j], a[j] = t;
    }
    check_summary(a, 100, 1, 100, 50.5, 50.5, sqrt(9999.0 / 12));
    const double ps[] = {0, 1, 50, 90, 95, 99, 99.9, 100, 0.5, 33.3};
    const double want100[] = {1, 1, 50, 90, 95, 99, 100, 100, 1, 34};
    double got[10];
    REQUIRE_OK(kiln_summary_percentiles(a, 100, ps, 10, got));
    for (int i = 0; i < 10; i++) CHECK_NEAR(got[i], want100[i], 0);
    /* 1..1000 */
    for (int i = 0; i < 1000; i++) a[i] = i + 1;
    check_summary(a, 1000, 1, 1000, 500.5, 500.5, sqrt(999999.0 / 12));
    const double want1000[] = {1, 10, 500, 900, 950, 990, 999, 1000, 5, 333};
    REQUIRE_OK(kiln_summary_percentiles(a, 1000, ps, 10, got));
    for (int i = 0; i < 10; i++) CHECK_NEAR(got[i], want1000[i], 0);
    /* 1..10 at p = 90: (1 - 0.9) * 10 is exactly 1 here (trtexec's float arithmetic gives 0.99..). */
    CHECK_NEAR(kiln_percentile_sorted(a, 10, 90), 9, 0);
    /* a single value, all equal, two values */
    double one = 4.25;
    check_summary(&one, 1, 4.25, 4.25, 4.25, 4.25, 0);
    CHECK_NEAR(kiln_percentile_sorted(&one, 1, 0), 4.25, 0);
    CHECK_NEAR(kiln_percentile_sorted(&one, 1, 99.99), 4.25, 0);
    double same[7] = {3, 3, 3, 3, 3, 3, 3};
    check_summary(same, 7, 3, 3, 3, 3, 0);
    double two[2] = {3, 1};
    check_summary(two, 2, 1, 3, 2, 2, 1);
    const double p2[] = {0, 50, 50.1, 100};
    const double w2[] = {1, 1, 3, 3};
    REQUIRE_OK(kiln_summary_percentiles(two, 2, p2, 4, got));
    for (int i = 0; i < 4; i++) CHECK_NEAR(got[i], w2[i], 0);
    /* cv with a zero mean and a spread is infinite (written as null in JSON) */
    double sym[2] = {-1, 1};
    kiln_summary s;
    REQUIRE_OK(kiln_summary_compute(sym, 2, &s));
    CHECK(isinf(s.cv));
    /* The nearest-rank index is HdrHistogram's rank: max(1, ceil(p * n / 100)) - 1. */
    for (size_t n = 1; n <= 300; n++)
        for (int p = 0; p <= 100; p++) {
            size_t rank = ((size_t)p * n + 99) / 100;
            if (rank < 1) rank = 1;
            if (kiln_percentile_rank_index(n, p) != rank - 1) {
                fprintf(stderr, "rank index n=%zu p=%d: %zu, expected %zu\n", n, p,
                        kiln_percentile_rank_index(n, p), rank - 1);
                failures++;
            }
        }
    /* errors */
    double bad[3] = {1, NAN, 2};
    CHECK(kiln_summary_compute(bad, 3, &s) == KILN_ERR_INVALID_ARGUMENT);
    CHECK(strstr(kiln_last_error(), "sample 1") != NULL);
    CHECK(kiln_summary_compute(a, 0, &s) == KILN_ERR_INVALID_ARGUMENT);
    double p101 = 101;
    CHECK(kiln_summary_percentiles(a, 10, &p101, 1, got) == KILN_ERR_INVALID_ARGUMENT);
}

/* ------------------------------------------------------------------ histogram.h */

static kiln_hist *make_hist(int64_t lo, int64_t hi, int digits) {
    kiln_hist *h;
    REQUIRE_OK(kiln_hist_create(lo, hi, digits, &h));
    return h;
}

static void test_hist_config(void) {
    kiln_hist *h;
    CHECK(kiln_hist_create(0, 100, 3, &h) == KILN_ERR_INVALID_ARGUMENT && h == NULL);
    CHECK(kiln_hist_create(10, 19, 3, &h) == KILN_ERR_INVALID_ARGUMENT);
    CHECK(kiln_hist_create(1, 1000, 0, &h) == KILN_ERR_INVALID_ARGUMENT);
    CHECK(kiln_hist_create(1, 1000, 6, &h) == KILN_ERR_INVALID_ARGUMENT);
    CHECK(strstr(kiln_last_error(), "1..5") != NULL);
    REQUIRE_OK(kiln_hist_create(1, INT64_MAX, 5, &h)); /* the full range is allowed */
    kiln_hist_record(h, INT64_MAX);
    CHECK_EQ_I(kiln_hist_max(h), INT64_MAX);
    CHECK_EQ_I(kiln_hist_overflow(h), 0);
    CHECK(kiln_hist_value_at_percentile(h, 100) >= INT64_MAX / 2);
    kiln_hist_free(h);
    kiln_hist_free(NULL);
}

static void test_hist_buckets(void) {
    /* 1 .. 1 h in us, 3 digits: 2048 sub-buckets, exact below 2048, then widths 2, 4, 8, ... */
    const int64_t top = 3600LL * 1000 * 1000;
    kiln_hist *h = make_hist(1, top, 3);
    for (int64_t v = 0; v < 2048; v++) {
        CHECK_EQ_I(kiln_hist_lowest_equivalent(h, v), v);
        CHECK_EQ_I(kiln_hist_highest_equivalent(h, v), v);
    }
    CHECK_EQ_I(kiln_hist_lowest_equivalent(h, 2049), 2048);
    CHECK_EQ_I(kiln_hist_highest_equivalent(h, 2048), 2049);
    CHECK_EQ_I(kiln_hist_lowest_equivalent(h, 4095), 4094);
    CHECK_EQ_I(kiln_hist_highest_equivalent(h, 4096), 4099);
    CHECK_EQ_I(kiln_hist_lowest_equivalent(h, 10007), 10000);
    /* Ranges tile [0, top] without gaps, are powers of two wide and at most v / 1000 (or 1) wide. */
    int64_t v = 0;
    int steps = 0;
    while (v <= top) {
        int64_t lo = kiln_hist_lowest_equivalent(h, v), hi = kiln_hist_highest_equivalent(h, v);
        int64_t w = hi - lo + 1;
        if (lo != v || w <= 0 || (w & (w - 1)) || (w > 1 && (double)w > (double)lo / 1000)) {
            fprintf(stderr, "range of %lld is [%lld, %lld]\n", (long long)v, (long long)lo, (long long)hi);
            failures++;
            break;
        }
        /* jump ahead in big strides, but check every range boundary of one in 64 buckets */
        v = (steps++ % 64 == 0) ? hi + 1 : kiln_hist_lowest_equivalent(h, hi + 1 + w * 7);
    }
    /* The top of the range and beyond: clamped to `top` and counted. */
    kiln_hist_record(h, top);
    kiln_hist_record(h, top + 1);
    kiln_hist_record(h, INT64_MAX);
    kiln_hist_record(h, -5);
    CHECK_EQ_I(kiln_hist_count(h), 4);
    CHECK_EQ_I(kiln_hist_overflow(h), 2);
    CHECK_EQ_I(kiln_hist_underflow(h), 1);
    CHECK_EQ_I(kiln_hist_max(h), top);
    CHECK_EQ_I(kiln_hist_min(h), 0);
    CHECK_EQ_I(kiln_hist_value_at_percentile(h, 100), kiln_hist_highest_equivalent(h, top));
    CHECK(kiln_hist_highest_equivalent(h, top) >= top);
    CHECK_EQ_I(kiln_hist_value_at_percentile(h, 25), 0);
    CHECK_EQ_I(kiln_hist_value_at_percentile(h, 0), 0);
    kiln_hist_reset(h);
    CHECK_EQ_I(kiln_hist_count(h), 0);
    CHECK_EQ_I(kiln_hist_overflow(h), 0);
    CHECK_EQ_I(kiln_hist_value_at_percentile(h, 50), 0);
    kiln_hist_free(h);
    /* A coarse unit: lowest = 1000 (ns histogram with 1 us resolution) gives a unit of 512. */
    h = make_hist(1000, 60LL * 1000 * 1000 * 1000, 2);
    CHECK_EQ_I(kiln_hist_lowest_equivalent(h, 300), 0);
    CHECK_EQ_I(kiln_hist_highest_equivalent(h, 300), 511);
    CHECK_EQ_I(kiln_hist_lowest_equivalent(h, 512), 512);
    kiln_hist_free(h);
}

static void test_hist_known(void) {
    kiln_hist *h = make_hist(1, 1000000, 3);
    for (int v = 1; v <= 100; v++) kiln_hist_record(h, v);
    CHECK_EQ_I(kiln_hist_value_at_percentile(h, 0), 1);
    CHECK_EQ_I(kiln_hist_value_at_percentile(h, 50), 50);
    CHECK_EQ_I(kiln_hist_value_at_percentile(h, 90), 90);
    CHECK_EQ_I(kiln_hist_value_at_percentile(h, 99), 99);
    CHECK_EQ_I(kiln_hist_value_at_percentile(h, 99.9), 100);
    CHECK_EQ_I(kiln_hist_value_at_percentile(h, 100), 100);
    CHECK_EQ_I(kiln_hist_value_at_percentile(h, 33.3), 34);
    CHECK_NEAR(kiln_hist_mean(h), 50.5, 1e-12);
    CHECK_NEAR(kiln_hist_stddev(h), sqrt(9999.0 / 12), 1e-9);
    CHECK_NEAR(kiln_hist_percentile_of(h, 50), 50, 1e-12);
    CHECK_NEAR(kiln_hist_percentile_of(h, 100), 100, 0);
    kiln_hist_reset(h);
    for (int v = 1; v <= 1000; v++) kiln_hist_record(h, v);
    CHECK_EQ_I(kiln_hist_value_at_percentile(h, 50), 500);
    CHECK_EQ_I(kiln_hist_value_at_percentile(h, 99), 990);
    CHECK_EQ_I(kiln_hist_value_at_percentile(h, 99.9), 999);
    CHECK_NEAR(kiln_hist_stddev(h), sqrt(999999.0 / 12), 1e-9);
    /* A single value above the exact range: min/max/mean exact, percentiles its bucket's top. */
    kiln_hist_reset(h);
    kiln_hist_record(h, 5000);
    CHECK_EQ_I(kiln_hist_min(h), 5000);
    CHECK_EQ_I(kiln_hist_max(h), 5000);
    CHECK_NEAR(kiln_hist_mean(h), 5000, 0);
    CHECK_NEAR(kiln_hist_stddev(h), 0, 0);
    CHECK_EQ_I(kiln_hist_value_at_percentile(h, 0), 5000);
    CHECK_EQ_I(kiln_hist_value_at_percentile(h, 50), 5003);
    CHECK_EQ_I(kiln_hist_value_at_percentile(h, 100), 5003);
    /* all equal via record_n; two values */
    kiln_hist_reset(h);
    kiln_hist_record_n(h, 777, 1000);
    kiln_hist_record_n(h, 5, 0);
    kiln_hist_record_n(h, 5, -3);
    CHECK_EQ_I(kiln_hist_count(h), 1000);
    CHECK_EQ_I(kiln_hist_value_at_percentile(h, 99.999), 777);
    CHECK_NEAR(kiln_hist_stddev(h), 0, 1e-9);
    kiln_hist_reset(h);
    kiln_hist_record(h, 10);
    kiln_hist_record(h, 30);
    CHECK_EQ_I(kiln_hist_value_at_percentile(h, 50), 10);
    CHECK_EQ_I(kiln_hist_value_at_percentile(h, 50.1), 30);
    CHECK_NEAR(kiln_hist_mean(h), 20, 0);
    CHECK_NEAR(kiln_hist_stddev(h), 10, 1e-12);
    /* coordinated-omission back-fill: 100 with interval 10 adds 90, 80, ..., 10 */
    kiln_hist_reset(h);
    kiln_hist_record_corrected(h, 100, 10);
    CHECK_EQ_I(kiln_hist_count(h), 10);
    CHECK_EQ_I(kiln_hist_min(h), 10);
    CHECK_NEAR(kiln_hist_mean(h), 55, 1e-12);
    kiln_hist_record_corrected(h, 10, 10);
    kiln_hist_record_corrected(h, 1000, 0);
    CHECK_EQ_I(kiln_hist_count(h), 12);
    /* percentile points of a huge count stop when no representable step is left below 100 % */
    kiln_hist_reset(h);
    kiln_hist_record_n(h, 5, 1000000000000000000LL);
    double pct[400];
    int64_t val[400];
    int n = kiln_hist_percentile_points(h, 5, pct, val, 400);
    CHECK(n > 200 && n < 400 && pct[n - 1] == 100 && val[n - 1] == 5);
    for (int i = 1; i < n; i++) CHECK(pct[i] > pct[i - 1]);
    kiln_hist_free(h);
}

static int cmp_i64(const void *a, const void *b) {
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

/* Random log-uniform data in [1, 1e9]: counts, exact statistics, percentiles against the sorted
 * data, iteration, merge and display bins. */
static void test_hist_random(int digits) {
    enum { N = 100000, PARTS = 4 };
    int64_t *x = malloc(N * sizeof *x);
    CHECK(x != NULL);
    if (!x) return;
    kiln_hist *h = make_hist(1, 2000000000LL, digits), *part[PARTS];
    for (int k = 0; k < PARTS; k++) REQUIRE_OK(kiln_hist_create_like(h, &part[k]));
    double sum = 0;
    for (int i = 0; i < N; i++) {
        x[i] = (int64_t)exp(next_unit() * log(1e9));
        kiln_hist_record(h, x[i]);
        kiln_hist_record(part[i % PARTS], x[i]);
        sum += (double)x[i];
    }
    qsort(x, N, sizeof *x, cmp_i64);
    double mean = sum / N, ss = 0;
    for (int i = 0; i < N; i++) ss += ((double)x[i] - mean) * ((double)x[i] - mean);
    CHECK_EQ_I(kiln_hist_count(h), N);
    CHECK_EQ_I(kiln_hist_min(h), x[0]);
    CHECK_EQ_I(kiln_hist_max(h), x[N - 1]);
    CHECK_NEAR(kiln_hist_mean(h), mean, 1e-9 * mean);
    CHECK_NEAR(kiln_hist_stddev(h), sqrt(ss / N), 1e-9 * sqrt(ss / N));
    double rel = pow(10, -digits);
    int bad = 0;
    for (int t = 0; t < 2000; t++) {
        double p = t < 1000 ? t / 10.0 : next_unit() * 100;
        int64_t rank = (int64_t)ceil(p * N / 100 - 1e-9);
        if (rank < 1) rank = 1;
        int64_t exact = x[rank - 1], got = kiln_hist_value_at_percentile(h, p);
        int64_t want = p == 0 ? kiln_hist_lowest_equivalent(h, exact) : kiln_hist_highest_equivalent(h, exact);
        bool within = p == 0 || (got >= exact && (double)(got - exact) <= fmax(exact * rel, 1.0));
        if ((got != want || !within) && bad++ < 5)
            fprintf(stderr, "digits %d p %.4f: got %lld, exact %lld, want %lld\n", digits, p,
                    (long long)got, (long long)exact, (long long)want);
    }
    CHECK_EQ_I(bad, 0);
    /* iteration: increasing disjoint ranges whose counts match the sorted data */
    kiln_hist_iter it;
    kiln_hist_bucket b;
    kiln_hist_iter_init(&it, h);
    int64_t total = 0, prev_hi = -1;
    size_t pos = 0;
    bool ok = true;
    while (kiln_hist_iter_next(&it, &b)) {
        size_t start = pos;
        while (pos < N && x[pos] <= b.hi) pos++;
        ok = ok && b.lo > prev_hi && b.count > 0 && (int64_t)(pos - start) == b.count &&
             x[start] >= b.lo;
        total += b.count;
        ok = ok && b.cumulative == total;
        prev_hi = b.hi;
    }
    CHECK(ok);
    CHECK_EQ_I(total, N);
    /* merge: the parts add up to the whole, bucket by bucket */
    kiln_hist *m;
    REQUIRE_OK(kiln_hist_create_like(h, &m));
    for (int k = 0; k < PARTS; k++) REQUIRE_OK(kiln_hist_merge(m, part[k]));
    kiln_hist_iter im;
    kiln_hist_bucket bm;
    kiln_hist_iter_init(&it, h);
    kiln_hist_iter_init(&im, m);
    bool same = true;
    while (kiln_hist_iter_next(&it, &b))
        same = same && kiln_hist_iter_next(&im, &bm) && bm.lo == b.lo && bm.count == b.count;
    CHECK(same && !kiln_hist_iter_next(&im, &bm));
    CHECK_EQ_I(kiln_hist_count(m), N);
    CHECK_EQ_I(kiln_hist_min(m), x[0]);
    CHECK_EQ_I(kiln_hist_max(m), x[N - 1]);
    CHECK_NEAR(kiln_hist_mean(m), mean, 1e-9 * mean);
    CHECK_NEAR(kiln_hist_stddev(m), sqrt(ss / N), 1e-9 * sqrt(ss / N));
    CHECK_EQ_I(kiln_hist_value_at_percentile(m, 99.9), kiln_hist_value_at_percentile(h, 99.9));
    /* display bins: counts sum to N, edges increase from min to max */
    kiln_hist_bin bins[50];
    for (int lg = 0; lg < 2; lg++) {
        int n = kiln_hist_display_bins(h, 50, lg, bins);
        CHECK_EQ_I(n, 50);
        int64_t c = 0;
        bool edges = bins[0].lo == (double)x[0] && bins[n - 1].hi == (double)x[N - 1];
        for (int i = 0; i < n; i++) {
            c += bins[i].count;
            edges = edges && bins[i].lo < bins[i].hi && (i == 0 || bins[i].lo == bins[i - 1].hi);
        }
        CHECK_EQ_I(c, N);
        CHECK(edges);
    }
    /* percentile points: 0, 10, 20, ... (5 ticks per half), non-decreasing values, ending at 100 */
    double pct[400];
    int64_t val[400];
    int n = kiln_hist_percentile_points(h, 5, pct, val, 400);
    CHECK(n > 20 && pct[0] == 0 && pct[1] == 10 && pct[5] == 50 && pct[6] == 55 && pct[n - 1] == 100);
    for (int i = 1; i < n; i++) CHECK(pct[i] > pct[i - 1] && val[i] >= val[i - 1]);
    for (int i = 0; i < n; i++) CHECK_EQ_I(val[i], kiln_hist_value_at_percentile(h, pct[i]));
    CHECK(1.0 / (1.0 - pct[n - 2] / 100) > N);
    CHECK_EQ_I(kiln_hist_percentile_points(h, 1, pct, val, 3), 3);
    CHECK(pct[1] == 50 && pct[2] == 100);
    kiln_hist_free(m);
    for (int k = 0; k < PARTS; k++) kiln_hist_free(part[k]);
    kiln_hist_free(h);
    free(x);
}

static void test_hist_merge_errors(void) {
    kiln_hist *a = make_hist(1, 1000, 3), *b = make_hist(1, 1000, 2), *c = make_hist(1, 1000, 3);
    kiln_hist_record(a, 5);
    kiln_hist_record(b, 7);
    CHECK(kiln_hist_merge(a, b) == KILN_ERR_INVALID_ARGUMENT);
    CHECK(strstr(kiln_last_error(), "configurations differ") != NULL);
    CHECK_EQ_I(kiln_hist_count(a), 1);
    CHECK(kiln_hist_merge(a, a) == KILN_ERR_INVALID_ARGUMENT);
    REQUIRE_OK(kiln_hist_merge(a, c)); /* empty source */
    CHECK_EQ_I(kiln_hist_count(a), 1);
    kiln_hist_record(c, 2000); /* overflow travels with the merge */
    REQUIRE_OK(kiln_hist_merge(a, c));
    CHECK_EQ_I(kiln_hist_overflow(a), 1);
    CHECK_EQ_I(kiln_hist_max(a), 1000);
    kiln_hist_bin bins[4];
    kiln_hist_reset(c);
    CHECK_EQ_I(kiln_hist_display_bins(c, 4, true, bins), 0);
    kiln_hist_record_n(c, 9, 3);
    CHECK_EQ_I(kiln_hist_display_bins(c, 4, true, bins), 1);
    CHECK(bins[0].count == 3 && bins[0].lo == 9 && bins[0].hi == 9);
    kiln_hist_free(a);
    kiln_hist_free(b);
    kiln_hist_free(c);
}

/* ------------------------------------------------------------------ JSON, CSV */

/* Checks that the JSON string escape of s[0..n) is `want`. */
static void check_escape(const char *s, size_t n, const char *want) {
    kiln_strbuf b = {0};
    kiln_json_escape(&b, s, n);
    if (!b.data || strcmp(b.data, want) != 0) {
        fprintf(stderr, "escape: got %s, expected %s\n", b.data ? b.data : "(null)", want);
        failures++;
    }
    kiln_strbuf_free(&b);
}

static void test_json(void) {
    check_escape("plain", 5, "\"plain\"");
    check_escape("a\"b\\c/", 6, "\"a\\\"b\\\\c/\"");
    check_escape("\n\r\t\b\f\x01\x1f\x7f", 8, "\"\\n\\r\\t\\b\\f\\u0001\\u001f\x7f\"");
    check_escape("x\0y", 3, "\"x\\u0000y\"");
    check_escape("caf\xc3\xa9 \xf0\x9f\x98\x80", 10, "\"caf\xc3\xa9 \xf0\x9f\x98\x80\"");
    check_escape("\xff", 1, "\"\\ufffd\"");
    check_escape("a\xc3", 2, "\"a\\ufffd\"");               /* truncated sequence */
    check_escape("\xc0\xaf", 2, "\"\\ufffd\\ufffd\"");       /* overlong */
    check_escape("\xed\xa0\x80", 3, "\"\\ufffd\\ufffd\\ufffd\""); /* surrogate */
    check_escape("\xf4\x90\x80\x80", 4, "\"\\ufffd\\ufffd\\ufffd\\ufffd\""); /* > U+10FFFF */
    kiln_strbuf b = {0};
    kiln_json j;
    kiln_json_init(&j, &b, 0);
    kiln_json_object_begin(&j);
    kiln_json_kv_number(&j, "a", 0.1);
    kiln_json_kv_number(&j, "nan", NAN);
    kiln_json_kv_number(&j, "inf", -INFINITY);
    kiln_json_kv_int(&j, "i", -7);
    kiln_json_key(&j, "l");
    kiln_json_array_begin(&j);
    kiln_json_bool(&j, false);
    kiln_json_string(&j, NULL);
    kiln_json_object_begin(&j);
    kiln_json_object_end(&j);
    kiln_json_array_end(&j);
    kiln_json_object_end(&j);
    REQUIRE_OK(kiln_json_finish(&j));
    CHECK(strcmp(b.data, "{\"a\":0.1,\"nan\":null,\"inf\":null,\"i\":-7,\"l\":[false,null,{}]}\n") == 0);
    kiln_strbuf_clear(&b);
    kiln_json_init(&j, &b, 2);
    kiln_json_object_begin(&j);
    kiln_json_kv_number(&j, "x", 1e300);
    kiln_json_key(&j, "y");
    kiln_json_array_begin(&j);
    kiln_json_number(&j, 3);
    kiln_json_array_end(&j);
    kiln_json_object_end(&j);
    REQUIRE_OK(kiln_json_finish(&j));
    CHECK(strcmp(b.data, "{\n  \"x\": 1e+300,\n  \"y\": [\n    3\n  ]\n}\n") == 0);
    /* misuse is reported, not written */
    kiln_strbuf_clear(&b);
    kiln_json_init(&j, &b, 0);
    kiln_json_object_begin(&j);
    kiln_json_int(&j, 1);
    CHECK(kiln_json_finish(&j) == KILN_ERR_INVALID_ARGUMENT && strstr(kiln_last_error(), "without a key"));
    kiln_json_init(&j, &b, 0);
    kiln_json_array_begin(&j);
    kiln_json_key(&j, "k");
    CHECK(kiln_json_finish(&j) == KILN_ERR_INVALID_ARGUMENT && strstr(kiln_last_error(), "outside an object"));
    kiln_json_init(&j, &b, 0);
    kiln_json_array_begin(&j);
    CHECK(kiln_json_finish(&j) == KILN_ERR_INVALID_ARGUMENT && strstr(kiln_last_error(), "left open"));
    kiln_json_init(&j, &b, 0);
    kiln_json_array_end(&j);
    CHECK(kiln_json_finish(&j) == KILN_ERR_INVALID_ARGUMENT);
    kiln_json_init(&j, &b, 0);
    kiln_json_int(&j, 1);
    kiln_json_int(&j, 2);
    CHECK(kiln_json_finish(&j) == KILN_ERR_INVALID_ARGUMENT && strstr(kiln_last_error(), "second top-level"));
    kiln_json_init(&j, &b, 0);
    CHECK(kiln_json_finish(&j) == KILN_ERR_INVALID_ARGUMENT);
    kiln_json_init(&j, &b, 0);
    for (int i = 0; i < KILN_JSON_MAX_DEPTH + 1; i++) kiln_json_array_begin(&j);
    CHECK(kiln_json_finish(&j) == KILN_ERR_INVALID_ARGUMENT && strstr(kiln_last_error(), "deeper"));
    /* shortest round-trip numbers */
    char buf[32];
    CHECK(strcmp(kiln_format_double(buf, 0.1), "0.1") == 0);
    CHECK(strcmp(kiln_format_double(buf, 3), "3") == 0);
    CHECK(strcmp(kiln_format_double(buf, NAN), "nan") == 0);
    for (int i = 0; i < 10000; i++) {
        uint64_t bits = next_u64();
        double v;
        memcpy(&v, &bits, sizeof v);
        if (!isfinite(v)) continue;
        if (strtod(kiln_format_double(buf, v), NULL) != v && failures++ < 100)
            fprintf(stderr, "format_double(%a) = %s does not round-trip\n", v, buf);
    }
    /* CSV */
    kiln_strbuf_clear(&b);
    kiln_csv c;
    kiln_csv_init(&c, &b);
    const char *row[] = {"a", "b,c", "say \"x\"", " pad", "line\nbreak", NULL, ""};
    kiln_csv_row(&c, row, 7);
    kiln_csv_number(&c, 2.5);
    kiln_csv_number(&c, INFINITY);
    kiln_csv_int(&c, -3);
    kiln_csv_end_row(&c);
    CHECK(strcmp(b.data, "a,\"b,c\",\"say \"\"x\"\"\",\" pad\",\"line\nbreak\",,\n2.5,,-3\n") == 0);
    kiln_strbuf_free(&b);
}

/* ------------------------------------------------------------------ HTML report */

static int count(const char *hay, const char *needle) {
    int n = 0;
    for (const char *p = hay; (p = strstr(p, needle)) != NULL; p += strlen(needle)) n++;
    return n;
}

static void test_report(void) {
    kiln_report *r;
    REQUIRE_OK(kiln_report_create("T <script>alert(1)</script>", &r));
    REQUIRE_OK(kiln_report_kv(r, "k&", "v\"<"));
    REQUIRE_OK(kiln_report_kv(r, "k2", "v2"));
    const char *hdr[] = {"a", "b"};
    REQUIRE_OK(kiln_report_table_begin(r, "cap", 2, hdr));
    CHECK(kiln_report_heading(r, "x") == KILN_ERR_INVALID_ARGUMENT);
    const char *row[] = {"1.5", "x"};
    REQUIRE_OK(kiln_report_table_row(r, row));
    REQUIRE_OK(kiln_report_table_end(r));
    CHECK(kiln_report_table_end(r) == KILN_ERR_INVALID_ARGUMENT);
    kiln_hist_bin bins[3] = {{0, 1, 5}, {1, 2, 0}, {2, 3, 9}};
    kiln_chart hc = {.id = "my hist!"};
    REQUIRE_OK(kiln_report_histogram(r, &hc, bins, 3));
    bins[1].hi = -1;
    CHECK(kiln_report_histogram(r, &hc, bins, 3) == KILN_ERR_INVALID_ARGUMENT);
    double x[4] = {1, 2, 3, 4}, y[4] = {1, -1, NAN, 8};
    kiln_series s[2] = {{"one", x, y, 4}, {NULL, NULL, y, 4}};
    kiln_chart lc = {.log_y = true, .title = "L"};
    REQUIRE_OK(kiln_report_line_chart(r, &lc, s, 2));
    kiln_chart sc = {0};
    REQUIRE_OK(kiln_report_scatter(r, &sc, s, 1, false));
    double pct[3] = {0, 99, 100}, v[3] = {1, 2, 3};
    kiln_series cs = {"c", pct, v, 3};
    kiln_chart cc = {.log_x = true};
    REQUIRE_OK(kiln_report_cdf(r, &cc, &cs, 1));
    const char *labels[2] = {"l1", "l2"};
    double vals[2] = {1, 0};
    kiln_chart bc = {.log_x = true};
    CHECK(kiln_report_bar_chart(r, &bc, labels, vals, 2) == KILN_ERR_INVALID_ARGUMENT);
    bc.log_x = false;
    REQUIRE_OK(kiln_report_bar_chart(r, &bc, labels, vals, 2));
    kiln_strbuf b = {0};
    REQUIRE_OK(kiln_report_html(r, &b));
    const char *h = b.data;
    CHECK(strstr(h, "<title>T &lt;script&gt;alert(1)&lt;/script&gt;</title>") != NULL);
    CHECK(count(h, "<script") == 0 && count(h, "href=") == 0 && count(h, "src=") == 0 &&
          count(h, "url(") == 0 && count(h, "@import") == 0);
    CHECK(count(h, "http") == count(h, "xmlns=\"http://www.w3.org/2000/svg\""));
    CHECK(strstr(h, "<dt>k&amp;</dt><dd>v&quot;&lt;</dd>") != NULL);
    CHECK(count(h, "<dl class=\"kiln-kv\">") == 1 && count(h, "</dl>") == 1);
    CHECK(strstr(h, "<td class=\"num\">1.5</td><td>x</td>") != NULL);
    CHECK(strstr(h, "class=\"kiln-chart kiln-hist\" id=\"my-hist-\"") != NULL);
    CHECK(strstr(h, "class=\"kiln-chart kiln-line-chart\" id=\"chart-2\"") != NULL);
    CHECK(strstr(h, "class=\"kiln-chart kiln-cdf\" id=\"chart-4\"") != NULL);
    CHECK(count(h, "class=\"kiln-bar\"") == 3 + 2);
    CHECK(count(h, "class=\"kiln-line\"") == 2 + 1);
    CHECK(count(h, "class=\"kiln-point\"") == 3); /* y = 1, -1, 8 (NaN is not drawable) */
    CHECK(count(h, "class=\"kiln-legend-item\"") == 2 + 1 + 1);
    CHECK(strstr(h, "4 point(s) not drawn") != NULL);  /* -1 and nan in both series on a log y axis */
    CHECK(strstr(h, ">100%</text>") != NULL && strstr(h, ">99%</text>") != NULL);
    CHECK(strstr(h, "</html>\n") != NULL);
    kiln_strbuf_free(&b);
    kiln_report_free(r);
    /* file errors name the path */
    kiln_strbuf e = {0};
    kiln_strbuf_puts(&e, "x");
    CHECK(kiln_strbuf_write_file(&e, "/nonexistent-dir/x.html") == KILN_ERR_IO);
    CHECK(strstr(kiln_last_error(), "/nonexistent-dir/x.html") != NULL);
    kiln_strbuf_free(&e);
}

int main(int argc, char **argv) {
    if (argc == 3 && strcmp(argv[1], "--write-sample") == 0) {
        REQUIRE_OK(kiln_test_write_sample(argv[2]));
        printf("wrote %s/sample.{json,csv,html}\n", argv[2]);
        return 0;
    }
    test_summary();
    test_hist_config();
    test_hist_buckets();
    test_hist_known();
    for (int d = 1; d <= 5; d++) test_hist_random(d);
    test_hist_merge_errors();
    test_json();
    test_report();
    char dir[] = "/tmp/kiln-test-stats-XXXXXX";
    if (mkdtemp(dir)) {
        REQUIRE_OK(kiln_test_write_sample(dir));
        char cmd[128];
        snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
        CHECK(system(cmd) == 0);
    } else {
        CHECK(!"mkdtemp failed");
    }
    return checks_report("test_stats");
}
