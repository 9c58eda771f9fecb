/* calib_hist.c — activation histograms and the minmax / percentile / entropy thresholds of INT8
 * calibration (calib_hist.h). */
#include "quant/calib_hist.h"

#include "core/status.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PERCENTILE_DEFAULT 99.99
/* Mass moved onto the empty bins of a distribution before KL(P || Q), so that a bin P has and Q
 * lacks costs a large but finite amount. */
#define KL_SMOOTHING 1e-4

kiln_status kiln_calib_method_parse(const char *text, kiln_calib_method *out) {
    out->kind = KILN_CALIB_ENTROPY;
    out->percentile = PERCENTILE_DEFAULT;
    if (!text || !text[0] || !strcmp(text, "entropy")) return KILN_OK;
    if (!strcmp(text, "minmax")) {
        out->kind = KILN_CALIB_MINMAX;
        return KILN_OK;
    }
    if (!strncmp(text, "percentile", 10) && (text[10] == '\0' || text[10] == ':')) {
        out->kind = KILN_CALIB_PERCENTILE;
        if (text[10] == '\0') return KILN_OK;
        char *end;
        double p = strtod(text + 11, &end);
        if (end != text + 11 && !*end && p > 0.0 && p <= 100.0) {
            out->percentile = p;
            return KILN_OK;
        }
    }
    return kiln_error(KILN_ERR_INVALID_ARGUMENT,
                      "calibrator '%s': use entropy, minmax, percentile or percentile:P with P in (0, 100]", text);
}

void kiln_calib_method_name(const kiln_calib_method *m, char *buf, size_t cap) {
    if (m->kind == KILN_CALIB_PERCENTILE) snprintf(buf, cap, "percentile:%g", m->percentile);
    else snprintf(buf, cap, "%s", m->kind == KILN_CALIB_MINMAX ? "minmax" : "entropy");
}

void kiln_calib_hist_init(kiln_calib_hist *h, double range) {
    memset(h, 0, sizeof *h);
    h->range = range > 0.0 ? range : 1.0;
}

void kiln_calib_hist_add(kiln_calib_hist *h, const float *x, int64_t n) {
    double per_bin = KILN_CALIB_BINS / h->range;
    for (int64_t i = 0; i < n; i++) {
        float a = fabsf(x[i]);
        if (isnan(a)) continue;
        if (a > h->amax) h->amax = a;
        double b = a > 0.0f ? (double)a * per_bin : 0.0; /* 0 * inf (a tiny range) would be NaN */
        h->counts[b < KILN_CALIB_BINS ? (int)b : KILN_CALIB_BINS - 1]++;
    }
}

static double bin_width(const kiln_calib_hist *h) { return h->range / KILN_CALIB_BINS; }

/* The upper edge of the bin holding the p-th percentile of |x|. */
static double percentile_threshold(const kiln_calib_hist *h, double p) {
    uint64_t total = 0;
    for (int i = 0; i < KILN_CALIB_BINS; i++) total += h->counts[i];
    double want = (double)total * p / 100.0, cum = 0.0;
    for (int i = 0; i < KILN_CALIB_BINS; i++) {
        cum += (double)h->counts[i];
        if (cum >= want) return (i + 1) * bin_width(h);
    }
    return h->range;
}

/* Normalises d[0..n) to sum 1 and moves KL_SMOOTHING onto each empty bin (taken evenly from the
 * others); false when d is all zero. */
static bool normalise_smoothed(double *d, int n) {
    double sum = 0.0;
    int zeros = 0;
    for (int i = 0; i < n; i++) {
        sum += d[i];
        zeros += d[i] == 0.0;
    }
    if (sum <= 0.0 || zeros == n) return false;
    double take = KL_SMOOTHING * zeros / (n - zeros);
    for (int i = 0; i < n; i++) d[i] = d[i] == 0.0 ? KL_SMOOTHING : d[i] / sum - take;
    return true;
}

/* KL(P || Q) for P = the first `bins` bins with the tail folded into the last, Q = their 128-level
 * quantization; p and q are scratch of `bins` doubles. */
static double clipped_kl(const kiln_calib_hist *h, int bins, double *p, double *q) {
    double tail = 0.0;
    for (int i = 0; i < KILN_CALIB_BINS; i++) {
        if (i < bins) p[i] = (double)h->counts[i];
        else tail += (double)h->counts[i];
    }
    p[bins - 1] += tail;
    double per_level = (double)bins / KILN_CALIB_LEVELS;
    for (int j = 0; j < KILN_CALIB_LEVELS; j++) {
        int start = (int)floor(j * per_level), end = j == KILN_CALIB_LEVELS - 1 ? bins : (int)floor((j + 1) * per_level);
        double total = 0.0;
        int nonzero = 0;
        for (int k = start; k < end; k++) {
            total += (double)h->counts[k];
            nonzero += h->counts[k] != 0;
        }
        for (int k = start; k < end; k++) q[k] = h->counts[k] && nonzero ? total / nonzero : 0.0;
    }
    if (!normalise_smoothed(p, bins) || !normalise_smoothed(q, bins)) return INFINITY;
    double kl = 0.0;
    for (int i = 0; i < bins; i++) kl += p[i] * log(p[i] / q[i]);
    return kl;
}

/* The entropy search runs on a copy whose bin 0 holds bin 1's count: the spike of exact zeros a
 * ReLU leaves there would otherwise dominate the divergence and pull T towards 0 (NVIDIA's
 * pytorch-quantization entropy calibrator does the same). */
static double entropy_threshold(const kiln_calib_hist *given) {
    kiln_calib_hist copy = *given, *h = &copy;
    h->counts[0] = h->counts[1];
    double p[KILN_CALIB_BINS], q[KILN_CALIB_BINS], best = INFINITY;
    int best_bins = KILN_CALIB_BINS;
    for (int bins = KILN_CALIB_LEVELS; bins <= KILN_CALIB_BINS; bins++) {
        double kl = clipped_kl(h, bins, p, q);
        if (kl < best) {
            best = kl;
            best_bins = bins;
        }
    }
    return best_bins * bin_width(h);
}

double kiln_calib_threshold(const kiln_calib_hist *h, const kiln_calib_method *m) {
    double t;
    switch (m->kind) {
    case KILN_CALIB_MINMAX: t = h->amax; break;
    case KILN_CALIB_PERCENTILE: t = percentile_threshold(h, m->percentile); break;
    default: t = entropy_threshold(h); break;
    }
    if (m->kind != KILN_CALIB_MINMAX && t > h->amax && h->amax > 0.0f) t = h->amax; /* never beyond what was seen */
    return t > 0.0 ? t : bin_width(h);
}
