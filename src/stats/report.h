/* report.h — the report writers shared by kiln bench and kiln load (the JSON writer they also use is
 * core/json_write.h, included here):
 *   (a) a CSV writer (RFC 4180 quoting),
 *   (b) one self-contained HTML report: title, key/value summary blocks, tables and inline SVG charts
 *       (histogram, percentile distribution / CDF, line chart over time, scatter/line chart for
 *       sweeps, horizontal bar chart). No network, no script, no external CSS or fonts.
 * All of them append to a kiln_strbuf (strbuf.h); write it out with kiln_strbuf_write_file.
 *
 * SVG structure (stable: tests and users may select on it). Every chart is
 *   <figure class="kiln-figure"><svg class="kiln-chart KIND" id="ID" ...> ... </svg></figure>
 * with KIND one of kiln-hist, kiln-cdf, kiln-line-chart, kiln-scatter, kiln-barh. Inside:
 *   <text class="kiln-chart-title">, <g class="kiln-axis kiln-axis-x"> / kiln-axis-y holding
 *   <line class="kiln-tick"> and <text class="kiln-tick-label">, <text class="kiln-axis-label">,
 *   one <g class="kiln-series" data-name="NAME"> per series holding <rect class="kiln-bar"> (one per
 *   bin / bar), <polyline class="kiln-line"> (one per line) and <circle class="kiln-point"> (scatter:
 *   one per plotted point), <g class="kiln-legend"> with one <g class="kiln-legend-item"> per series
 *   (charts with a single unnamed series have no legend), and <text class="kiln-note"> for points
 *   that could not be drawn (e.g. values <= 0 on a log axis: they are counted, never silently lost).
 * Bars and points carry a <title> child with their exact values (a tooltip, no script needed).
 * Tables are <table class="kiln-table">, key/value blocks <dl class="kiln-kv">.
 */
#ifndef KILN_STATS_REPORT_H
#define KILN_STATS_REPORT_H

#include "core/json_write.h"
#include "core/strbuf.h"
#include "kiln/kiln.h"
#include "stats/histogram.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* ------------------------------------------------------------------ (a) CSV
 * Cells are separated by ',' and rows end with "\n". A cell is quoted ("...", inner quotes doubled)
 * when it contains ',', '"', '\r' or '\n' or starts or ends with a space. Numbers use
 * kiln_format_double; a non-finite number is an empty cell. */
typedef struct kiln_csv {
    kiln_strbuf *out;
    int col; /* cells written in the current row */
} kiln_csv;

void kiln_csv_init(kiln_csv *c, kiln_strbuf *out);
/* A text cell; NULL is an empty cell. */
void kiln_csv_string(kiln_csv *c, const char *s);
void kiln_csv_number(kiln_csv *c, double v);
void kiln_csv_int(kiln_csv *c, int64_t v);
/* Ends the current row. */
void kiln_csv_end_row(kiln_csv *c);
/* A whole row of n text cells, ended. */
void kiln_csv_row(kiln_csv *c, const char *const *cells, int n);

/* ------------------------------------------------------------------ (b) HTML report
 * Elements appear in the order they are added. Every adding call returns KILN_OK, or an error for a
 * bad argument (then nothing is added) or KILN_ERR_OUT_OF_MEMORY. Text arguments are plain text
 * (HTML-escaped by the writer), UTF-8. */
typedef struct kiln_report kiln_report;

/* A chart's options. Zero-initialise and set what you need. */
typedef struct kiln_chart {
    const char *id;      /* element id of the <svg>; characters other than [A-Za-z0-9_-] become
                            '-'; NULL = "chart-N" (N counts the report's charts from 1) */
    const char *title;   /* drawn above the plot; NULL = none */
    const char *x_label; /* axis titles; NULL = none */
    const char *y_label;
    bool log_x;          /* logarithmic x axis (the CDF: the 1/(1-p) axis, see kiln_report_cdf) */
    bool log_y;          /* logarithmic y axis (not for bar charts) */
    int width, height;   /* SVG size in px; 0 = 960 x 400 */
} kiln_chart;

/* One data series: points (x[i], y[i]) for i < n; x == NULL means x[i] = i. Points with a
 * non-finite coordinate (or <= 0 on a log axis) are not drawn and are counted in a kiln-note. */
typedef struct kiln_series {
    const char *name; /* legend text; NULL = unnamed */
    const double *x;
    const double *y;
    size_t n;
} kiln_series;

/* Creates an empty report with the given title (shown as <title> and <h1>). *out owns it (free with
 * kiln_report_free). Errors: KILN_ERR_INVALID_ARGUMENT (NULL), KILN_ERR_OUT_OF_MEMORY. */
kiln_status kiln_report_create(const char *title, kiln_report **out);
/* Frees a report. Accepts NULL. */
void kiln_report_free(kiln_report *r);

/* A section heading (<h2>). */
kiln_status kiln_report_heading(kiln_report *r, const char *text);
/* A paragraph of text. */
kiln_status kiln_report_paragraph(kiln_report *r, const char *text);
/* One key/value line of a summary block; consecutive calls form one block (<dl class="kiln-kv">). */
kiln_status kiln_report_kv(kiln_report *r, const char *key, const char *value);
kiln_status kiln_report_kv_printf(kiln_report *r, const char *key, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* A table: begin with the header (ncols >= 1 names), add rows of exactly ncols cells (NULL = empty),
 * end it. Cells that read entirely as a number are right-aligned. Only one table is open at a time;
 * adding anything else while a table is open is an error (KILN_ERR_INVALID_ARGUMENT). */
kiln_status kiln_report_table_begin(kiln_report *r, const char *caption, int ncols,
                                    const char *const *header);
kiln_status kiln_report_table_row(kiln_report *r, const char *const *cells);
kiln_status kiln_report_table_end(kiln_report *r);

/* A histogram: one <rect class="kiln-bar"> per bin (bins[i].lo .. bins[i].hi, height = count; empty
 * bins draw a zero-height bar, a non-empty bin is at least 1 px high so lone tail values show). c->log_x puts the x axis on a log scale (then bins with lo <= 0 are
 * drawn from the axis start). One series, no legend. nbins >= 1. */
kiln_status kiln_report_histogram(kiln_report *r, const kiln_chart *c, const kiln_hist_bin *bins,
                                  int nbins);
/* Convenience: kiln_hist_display_bins(h, nbins, c->log_x) with every edge multiplied by value_scale
 * (e.g. 1e-3 for a microsecond histogram drawn in milliseconds), then kiln_report_histogram.
 * An empty histogram draws an empty chart with a note. */
kiln_status kiln_report_histogram_of(kiln_report *r, const kiln_chart *c, const kiln_hist *h,
                                     int nbins, double value_scale);
/* A percentile distribution (CDF): each series has x = percentile in [0, 100] and y = value, drawn
 * as a step-free polyline. With c->log_x the x axis is HdrHistogram's 1/(1 - p/100) log scale
 * (ticks labelled 0%, 50%, 90%, 99%, 99.9%, ...); points at p = 100 (which that scale cannot place)
 * are drawn at the right end, one decade beyond the last decade tick, at a tick labelled 100%.
 * Otherwise x is linear 0..100 %. */
kiln_status kiln_report_cdf(kiln_report *r, const kiln_chart *c, const kiln_series *s, size_t ns);
/* Convenience: one CDF series named `name` from kiln_hist_percentile_points(h, 5, ...), values
 * multiplied by value_scale. */
kiln_status kiln_report_cdf_of(kiln_report *r, const kiln_chart *c, const kiln_hist *h,
                               const char *name, double value_scale);
/* A line chart (e.g. throughput or latency over time): one <polyline class="kiln-line"> per series
 * with at least one drawable point. ns >= 1. */
kiln_status kiln_report_line_chart(kiln_report *r, const kiln_chart *c, const kiln_series *s,
                                   size_t ns);
/* A scatter chart (e.g. latency vs throughput across a sweep): one <circle class="kiln-point"> per
 * drawable point and, when `connect`, a polyline through each series' points in the given order. */
kiln_status kiln_report_scatter(kiln_report *r, const kiln_chart *c, const kiln_series *s,
                                size_t ns, bool connect);
/* A horizontal bar chart (e.g. per-layer times): one <rect class="kiln-bar"> per value, labelled by
 * labels[i] (<text class="kiln-bar-label">, the value in <text class="kiln-bar-value">), in the given
 * order, top to bottom; values must be finite and >= 0 (> 0 with c->log_x).
 * The value axis is x; c->x_label names it. n >= 1. */
kiln_status kiln_report_bar_chart(kiln_report *r, const kiln_chart *c, const char *const *labels,
                                  const double *values, size_t n);

/* Appends the whole HTML document to `out`. Errors: KILN_ERR_INVALID_ARGUMENT if a table is still
 * open, KILN_ERR_OUT_OF_MEMORY. */
kiln_status kiln_report_html(const kiln_report *r, kiln_strbuf *out);
/* Writes the HTML document to `path`. Errors as kiln_report_html, and KILN_ERR_IO. */
kiln_status kiln_report_write_html(const kiln_report *r, const char *path);

#endif
