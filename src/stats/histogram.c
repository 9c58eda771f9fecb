/* histogram.c — the log-linear histogram of histogram.h.
 *
 * Index arithmetic. Let unit = 2^u (u = floor(log2(lowest))), S = 2^s sub-buckets per bucket (the
 * smallest power of two >= 2 * 10^d) and H = S / 2. Bucket 0 covers [0, S * unit) in S steps of
 * unit; bucket b >= 1 covers [H * 2^b * unit, S * 2^b * unit) in H steps of 2^b * unit (its lower
 * half would repeat bucket b - 1, so only the upper half is stored). The counts array is therefore
 * H * (buckets + 1) long: slot (b + 1) * H + (k - H) holds sub-bucket k (H <= k < S) of bucket b, and
 * bucket 0's lower half k < H lands in slots 0 .. H - 1. A step of bucket b is at most
 * (H * 2^b * unit) / H = 1/H of its lowest value, and H >= 10^d: hence the d-digit precision. */
#include "stats/histogram.h"

#include "core/status.h"
#include "stats/summary.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

struct kiln_hist {
    int64_t lowest, highest;
    int sig_digits;
    int unit_magnitude;      /* u */
    int sub_half_magnitude;  /* s - 1 */
    int32_t sub_count;       /* S */
    int32_t sub_half;        /* H */
    int64_t sub_mask;        /* (S - 1) << u */
    int32_t bucket_count;
    int32_t counts_len;
    int64_t total, overflow, underflow;
    int64_t min, max;
    double mean, m2;         /* Welford: running mean and sum of squared deviations */
    int64_t *counts;
};

/* floor(log2(v)) for v >= 1. */
static int floor_log2(uint64_t v) { return 63 - __builtin_clzll(v); }

/* Index of the bucket holding v (0 <= v <= highest). OR-ing the mask makes every value below
 * S * unit land in bucket 0. */
static int bucket_of(const kiln_hist *h, int64_t v) {
    int pow2ceil = 64 - __builtin_clzll((uint64_t)(v | h->sub_mask));
    return pow2ceil - h->unit_magnitude - (h->sub_half_magnitude + 1);
}

/* Sub-bucket of v within bucket b (H <= k < S for b >= 1; 0 <= k < S for b == 0). */
static int32_t sub_bucket_of(const kiln_hist *h, int64_t v, int b) {
    return (int32_t)(v >> (b + h->unit_magnitude));
}

static int32_t slot_of(const kiln_hist *h, int64_t v) {
    int b = bucket_of(h, v);
    int32_t k = sub_bucket_of(h, v, b);
    return ((b + 1) << h->sub_half_magnitude) + (k - h->sub_half);
}

/* The bucket and sub-bucket of a counts slot (inverse of slot_of). */
static void slot_position(const kiln_hist *h, int32_t slot, int *b, int32_t *k) {
    int bb = (slot >> h->sub_half_magnitude) - 1;
    int32_t kk = (slot & (h->sub_half - 1)) + h->sub_half;
    if (bb < 0) {
        kk -= h->sub_half;
        bb = 0;
    }
    *b = bb;
    *k = kk;
}

/* Lowest value of a slot. */
static int64_t slot_lowest(const kiln_hist *h, int32_t slot) {
    int b;
    int32_t k;
    slot_position(h, slot, &b, &k);
    return (int64_t)k << (b + h->unit_magnitude);
}

/* Highest value of a slot (lowest + width - 1, added in that order: the top slot of a histogram
 * reaching INT64_MAX ends exactly there). */
static int64_t slot_highest(const kiln_hist *h, int32_t slot) {
    int b;
    int32_t k;
    slot_position(h, slot, &b, &k);
    return ((int64_t)k << (b + h->unit_magnitude)) + (((int64_t)1 << (b + h->unit_magnitude)) - 1);
}

kiln_status kiln_hist_create(int64_t lowest, int64_t highest, int sig_digits, kiln_hist **out) {
    if (!out) return kiln_error(KILN_ERR_INVALID_ARGUMENT, "kiln_hist_create: out is NULL");
    *out = NULL;
    if (lowest < 1)
        return kiln_error(KILN_ERR_INVALID_ARGUMENT,
                          "histogram: lowest discernible value %lld must be >= 1", (long long)lowest);
    if (highest < 2 || highest / 2 < lowest)
        return kiln_error(KILN_ERR_INVALID_ARGUMENT,
                          "histogram: highest trackable value %lld must be >= 2 * lowest (%lld)",
                          (long long)highest, (long long)lowest);
    if (sig_digits < 1 || sig_digits > 5)
        return kiln_error(KILN_ERR_INVALID_ARGUMENT,
                          "histogram: significant digits %d must be in 1..5", sig_digits);
    int64_t single_unit_max = 2;
    for (int i = 0; i < sig_digits; i++) single_unit_max *= 10;
    int s = floor_log2((uint64_t)single_unit_max);
    if (((int64_t)1 << s) < single_unit_max) s++;
    int u = floor_log2((uint64_t)lowest);
    if (u + s > 61)
        return kiln_error(KILN_ERR_INVALID_ARGUMENT,
                          "histogram: lowest %lld with %d digits leaves no room below 2^63",
                          (long long)lowest, sig_digits);
    /* Buckets: double the first bucket's limit until it exceeds `highest`. */
    int32_t buckets = 1;
    uint64_t limit = (uint64_t)1 << (s + u);
    while (limit <= (uint64_t)highest) {
        if (limit > (uint64_t)INT64_MAX / 2) {
            buckets++;
            break;
        }
        limit <<= 1;
        buckets++;
    }
    kiln_hist *h = calloc(1, sizeof *h);
    if (!h) return kiln_error(KILN_ERR_OUT_OF_MEMORY, "histogram: out of memory");
    h->lowest = lowest;
    h->highest = highest;
    h->sig_digits = sig_digits;
    h->unit_magnitude = u;
    h->sub_half_magnitude = s - 1;
    h->sub_count = (int32_t)1 << s;
    h->sub_half = h->sub_count / 2;
    h->sub_mask = (int64_t)(h->sub_count - 1) << u;
    h->bucket_count = buckets;
    h->counts_len = (buckets + 1) * h->sub_half;
    h->counts = calloc((size_t)h->counts_len, sizeof *h->counts);
    if (!h->counts) {
        int32_t len = h->counts_len;
        free(h);
        return kiln_error(KILN_ERR_OUT_OF_MEMORY, "histogram: out of memory for %d counts", (int)len);
    }
    *out = h;
    return KILN_OK;
}

kiln_status kiln_hist_create_like(const kiln_hist *h, kiln_hist **out) {
    if (!h) {
        if (out) *out = NULL;
        return kiln_error(KILN_ERR_INVALID_ARGUMENT, "kiln_hist_create_like: histogram is NULL");
    }
    return kiln_hist_create(h->lowest, h->highest, h->sig_digits, out);
}

void kiln_hist_free(kiln_hist *h) {
    if (!h) return;
    free(h->counts);
    free(h);
}

void kiln_hist_reset(kiln_hist *h) {
    memset(h->counts, 0, (size_t)h->counts_len * sizeof *h->counts);
    h->total = h->overflow = h->underflow = 0;
    h->min = h->max = 0;
    h->mean = h->m2 = 0;
}

void kiln_hist_record_n(kiln_hist *h, int64_t value, int64_t count) {
    if (count <= 0) return;
    if (value < 0) {
        h->underflow += count;
        value = 0;
    } else if (value > h->highest) {
        h->overflow += count;
        value = h->highest;
    }
    h->counts[slot_of(h, value)] += count;
    if (h->total == 0 || value < h->min) h->min = value;
    if (h->total == 0 || value > h->max) h->max = value;
    /* Weighted Welford update: `count` copies of value at once. */
    h->total += count;
    double delta = (double)value - h->mean;
    h->mean += delta * (double)count / (double)h->total;
    h->m2 += delta * ((double)value - h->mean) * (double)count;
}

void kiln_hist_record(kiln_hist *h, int64_t value) { kiln_hist_record_n(h, value, 1); }

void kiln_hist_record_corrected(kiln_hist *h, int64_t value, int64_t expected_interval) {
    kiln_hist_record_n(h, value, 1);
    if (expected_interval <= 0 || value <= expected_interval) return;
    for (int64_t missing = value - expected_interval; missing >= expected_interval;
         missing -= expected_interval)
        kiln_hist_record_n(h, missing, 1);
}

kiln_status kiln_hist_merge(kiln_hist *dst, const kiln_hist *src) {
    if (!dst || !src || dst == src)
        return kiln_error(KILN_ERR_INVALID_ARGUMENT,
                          "kiln_hist_merge: need two distinct, non-NULL histograms");
    if (dst->lowest != src->lowest || dst->highest != src->highest ||
        dst->sig_digits != src->sig_digits)
        return kiln_error(KILN_ERR_INVALID_ARGUMENT,
                          "kiln_hist_merge: configurations differ (lowest %lld/%lld, highest "
                          "%lld/%lld, digits %d/%d)",
                          (long long)dst->lowest, (long long)src->lowest, (long long)dst->highest,
                          (long long)src->highest, dst->sig_digits, src->sig_digits);
    if (src->total == 0) return KILN_OK;
    for (int32_t i = 0; i < dst->counts_len; i++) dst->counts[i] += src->counts[i];
    if (dst->total == 0 || src->min < dst->min) dst->min = src->min;
    if (dst->total == 0 || src->max > dst->max) dst->max = src->max;
    /* Chan et al.: combine two (count, mean, M2) triples. */
    double na = (double)dst->total, nb = (double)src->total, n = na + nb;
    double delta = src->mean - dst->mean;
    dst->mean += delta * nb / n;
    dst->m2 += src->m2 + delta * delta * na * nb / n;
    dst->total += src->total;
    dst->overflow += src->overflow;
    dst->underflow += src->underflow;
    return KILN_OK;
}

int64_t kiln_hist_count(const kiln_hist *h) { return h->total; }
int64_t kiln_hist_overflow(const kiln_hist *h) { return h->overflow; }
int64_t kiln_hist_underflow(const kiln_hist *h) { return h->underflow; }
int64_t kiln_hist_min(const kiln_hist *h) { return h->min; }
int64_t kiln_hist_max(const kiln_hist *h) { return h->max; }
double kiln_hist_mean(const kiln_hist *h) { return h->total ? h->mean : 0.0; }

double kiln_hist_stddev(const kiln_hist *h) {
    if (h->total == 0 || h->m2 <= 0) return 0.0;
    return sqrt(h->m2 / (double)h->total);
}

/* Clamps v into the trackable range [0, highest]. */
static int64_t clamp_value(const kiln_hist *h, int64_t v) {
    return v < 0 ? 0 : v > h->highest ? h->highest : v;
}

int64_t kiln_hist_lowest_equivalent(const kiln_hist *h, int64_t value) {
    return slot_lowest(h, slot_of(h, clamp_value(h, value)));
}

int64_t kiln_hist_highest_equivalent(const kiln_hist *h, int64_t value) {
    int32_t slot = slot_of(h, clamp_value(h, value));
    return slot_highest(h, slot);
}

int64_t kiln_hist_value_at_percentile(const kiln_hist *h, double p) {
    if (h->total == 0) return 0;
    if (!(p > 0)) p = 0;
    if (p > 100) p = 100;
    /* rank = max(1, ceil(p/100 * N)), exact for decimal p (see kiln_percentile_rank). */
    int64_t rank = (int64_t)kiln_percentile_rank((uint64_t)h->total, p);
    int64_t seen = 0;
    for (int32_t i = 0; i < h->counts_len; i++) {
        seen += h->counts[i];
        if (seen >= rank)
            return p == 0 ? slot_lowest(h, i) : slot_highest(h, i);
    }
    return h->max; /* unreachable while counts and total agree */
}

double kiln_hist_percentile_of(const kiln_hist *h, int64_t value) {
    if (h->total == 0) return 0.0;
    if (value >= h->max) return 100.0;
    int32_t last = slot_of(h, clamp_value(h, value));
    int64_t seen = 0;
    for (int32_t i = 0; i <= last; i++) seen += h->counts[i];
    return 100.0 * (double)seen / (double)h->total;
}

void kiln_hist_iter_init(kiln_hist_iter *it, const kiln_hist *h) {
    it->h = h;
    it->next_index = 0;
    it->cumulative = 0;
}

bool kiln_hist_iter_next(kiln_hist_iter *it, kiln_hist_bucket *b) {
    const kiln_hist *h = it->h;
    while (it->next_index < h->counts_len) {
        int32_t i = it->next_index++;
        if (h->counts[i] == 0) continue;
        it->cumulative += h->counts[i];
        b->lo = slot_lowest(h, i);
        b->hi = slot_highest(h, i);
        b->count = h->counts[i];
        b->cumulative = it->cumulative;
        return true;
    }
    return false;
}

int kiln_hist_display_bins(const kiln_hist *h, int nbins, bool log_scale, kiln_hist_bin *bins) {
    if (h->total == 0 || nbins < 1) return 0;
    double lo = (double)h->min, hi = (double)h->max;
    if (h->min == h->max) {
        bins[0] = (kiln_hist_bin){lo, hi, h->total};
        return 1;
    }
    if (log_scale && lo <= 0) lo = 1.0;
    if (log_scale && hi <= lo) log_scale = false; /* max == 1 with min == 0: linear is exact */
    if (!log_scale) lo = (double)h->min;
    for (int i = 0; i < nbins; i++) {
        double t0 = (double)i / nbins, t1 = (double)(i + 1) / nbins;
        bins[i].lo = log_scale ? lo * pow(hi / lo, t0) : lo + (hi - lo) * t0;
        bins[i].hi = i == nbins - 1 ? hi : log_scale ? lo * pow(hi / lo, t1) : lo + (hi - lo) * t1;
        bins[i].count = 0;
    }
    kiln_hist_iter it;
    kiln_hist_bucket b;
    kiln_hist_iter_init(&it, h);
    while (kiln_hist_iter_next(&it, &b)) {
        double mid = ((double)b.lo + (double)b.hi) / 2;
        if (mid < (double)h->min) mid = (double)h->min;
        if (mid > (double)h->max) mid = (double)h->max;
        int k;
        if (log_scale)
            k = mid <= lo ? 0 : (int)floor(log(mid / lo) / log(hi / lo) * nbins);
        else
            k = (int)floor((mid - lo) / (hi - lo) * nbins);
        if (k < 0) k = 0;
        if (k >= nbins) k = nbins - 1;
        bins[k].count += b.count;
    }
    return nbins;
}

int kiln_hist_percentile_points(const kiln_hist *h, int ticks_per_half, double *pct, int64_t *val,
                                int cap) {
    if (h->total == 0 || cap < 1) return 0;
    if (ticks_per_half < 1) ticks_per_half = 1;
    int n = 0;
    double p = 0.0;
    /* Leave room for the final 100 % point when cap >= 2. */
    int room = cap >= 2 ? cap - 1 : cap;
    while (n < room) {
        pct[n++] = p;
        if (1.0 / (1.0 - p / 100.0) > (double)h->total) break;
        /* Within the current halving [100 - r, 100 - r/2), step by r / 2 / ticks. */
        double remaining = 100.0 - p;
        double half = pow(2.0, floor(log2(100.0 / remaining)));
        double next = p + 100.0 / (2.0 * half * ticks_per_half);
        if (next >= 100.0 || next == p) break; /* no representable step left below 100 */
        p = next;
    }
    if (cap >= 2) pct[n++] = 100.0;
    /* One sweep over the counts serves every point, since the percentiles increase. */
    int32_t slot = -1;
    int64_t seen = 0;
    for (int k = 0; k < n; k++) {
        int64_t rank = (int64_t)kiln_percentile_rank((uint64_t)h->total, pct[k]);
        while (seen < rank) seen += h->counts[++slot];
        val[k] = pct[k] == 0 ? slot_lowest(h, slot) : slot_highest(h, slot);
    }
    return n;
}
