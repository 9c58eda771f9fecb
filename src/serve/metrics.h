/* metrics.h — the server's counters and histograms, written as Prometheus text (version 0.0.4).
 * Families are fixed (metrics.c lists them with their help text and buckets); a series is a family
 * plus a label set given as Prometheus label text (`model="m",version="1"`). Any thread may record;
 * one mutex guards the registry. Gauges (queue depth, KV-cache use) are not kept here: the /metrics
 * handler reads them live from the models. */
#ifndef KILN_SERVE_METRICS_H
#define KILN_SERVE_METRICS_H

#include "core/strbuf.h"

#include <stddef.h>
#include <stdint.h>

typedef struct serve_metrics serve_metrics;

/* NULL when out of memory. */
serve_metrics *serve_metrics_create(void);
void serve_metrics_free(serve_metrics *m); /* accepts NULL */

/* Adds v to counter `family` of the label set (created at 0). An unknown family is ignored. */
void serve_metrics_add(serve_metrics *m, const char *family, const char *labels, double v);
/* Records v into histogram `family` of the label set. */
void serve_metrics_observe(serve_metrics *m, const char *family, const char *labels, double v);
/* The counter's value (0 when the series does not exist), for the status page. */
double serve_metrics_value(serve_metrics *m, const char *family, const char *labels);
/* A histogram's per-bucket counts (not cumulative; the last one above every bound) into counts[0..n)
 * and its sum and count; returns the number of buckets written (0: no such series). bounds (may be
 * NULL) receives the buckets' upper bounds. */
int serve_metrics_histogram(serve_metrics *m, const char *family, const char *labels, uint64_t *counts, double *bounds,
                            int n, double *sum, uint64_t *count);
/* Appends every family with its # HELP / # TYPE lines and series to out. */
void serve_metrics_render(serve_metrics *m, kiln_strbuf *out);

/* Writes `model="<name>",version="<v>"` into buf with Prometheus escaping (\\, \", \n). */
void serve_metrics_labels(char *buf, size_t size, const char *model, const char *version);
/* One request's part of a tensor model's run: its queue and compute seconds, and the run's batch size
 * when batch_rows > 0 (given by the first request of each run only, so that every run counts once). */
void serve_metrics_record_run(serve_metrics *m, const char *model, const char *version, double queue_s,
                              double compute_s, int batch_rows);
/* A tensor inference's stage durations (stage_us[k] microseconds for stage stage_names[k], k < n)
 * into kiln_request_stage_duration_seconds, the series of labels plus stage="<name>". */
void serve_metrics_record_stages(serve_metrics *m, const char *labels, const char *const *stage_names,
                                 const double *stage_us, int n);

#endif
