/* calib_hist.h — the math of INT8 post-training calibration: a histogram of |x| over [0, range] and
 * the three ways to pick the clipping threshold T from it (the symmetric int8 scale is T / 127):
 *   minmax      T = the largest |x| seen;
 *   percentile  T = the smallest bin edge below which at least P% of the |x| lie (default 99.99);
 *   entropy     T minimising the KL divergence between the distribution clipped at T and its
 *               128-level quantization — the search TensorRT's entropy calibrators do (NVIDIA's
 *               "8-bit Inference with TensorRT", GTC 2017): for every candidate T of 128..nbins bins,
 *               P = the first bins with the outliers beyond T added to the last one, Q = those bins
 *               merged into 128 levels and spread back over their non-empty bins, and the bin edge
 *               of the least KL(P || Q) wins (bin 0 counted as bin 1: the zeros of a ReLU say nothing
 *               about the range).
 * Pure functions over caller-owned data; nothing here knows about graphs or files. */
#ifndef KILN_QUANT_CALIB_HIST_H
#define KILN_QUANT_CALIB_HIST_H

#include "kiln/kiln.h"

#include <stdint.h>

#define KILN_CALIB_BINS 2048
#define KILN_CALIB_LEVELS 128 /* int8's non-negative levels: T maps to 127, bins to 128 levels */

typedef enum kiln_calibrator {
    KILN_CALIB_ENTROPY,
    KILN_CALIB_MINMAX,
    KILN_CALIB_PERCENTILE,
} kiln_calibrator;

/* A calibrator and its parameter (percentile: P in (0, 100]). */
typedef struct kiln_calib_method {
    kiln_calibrator kind;
    double percentile;
} kiln_calib_method;

/* Parses "entropy", "minmax", "percentile" or "percentile:P" (NULL or "": entropy). Fails with
 * KILN_ERR_INVALID_ARGUMENT naming the text. */
kiln_status kiln_calib_method_parse(const char *text, kiln_calib_method *out);
/* "entropy", "minmax", "percentile:99.99". */
void kiln_calib_method_name(const kiln_calib_method *m, char *buf, size_t cap);

/* Counts of |x| in KILN_CALIB_BINS equal bins over [0, range]; values beyond range land in the last
 * bin. amax: the largest |x| added. */
typedef struct kiln_calib_hist {
    double range;
    float amax;
    uint64_t counts[KILN_CALIB_BINS];
} kiln_calib_hist;

/* An empty histogram over [0, range] (range > 0). */
void kiln_calib_hist_init(kiln_calib_hist *h, double range);
/* Adds |x[i]| for i < n (NaNs are skipped). */
void kiln_calib_hist_add(kiln_calib_hist *h, const float *x, int64_t n);

/* The threshold T of method m for histogram h (minmax: h->amax). T > 0: an all-zero tensor gets the
 * width of one bin. */
double kiln_calib_threshold(const kiln_calib_hist *h, const kiln_calib_method *m);

#endif
