/* report.h — the report writers shared by kiln bench, kiln load and kiln serve:
 *   (a) a small streaming JSON writer (correct escaping; non-finite numbers become null),
 *   (b) a CSV writer (RFC 4180 quoting),
 *   (c) one self-contained HTML report: title, key/value summary blocks, tables and inline SVG charts
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

#include "kiln/kiln.h"
#include "stats/histogram.h"
#include "core/strbuf.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Formats a finite double in the shortest of %.15g / %.16g / %.17g that reads back as the same
 * value ("0.1", "1e+300", "3"); non-finite values as "nan", "inf" or "-inf". buf must hold 32 bytes.
 * Returns buf. */
char *kiln_format_double(char buf[32], double v);

/* ------------------------------------------------------------------ (a) JSON
 * Usage:
 *   kiln_strbuf b = {0}; kiln_json j; kiln_json_init(&j, &b, 2);
 *   kiln_json_object_begin(&j);
 *     kiln_json_kv_string(&j, "model", name);
 *     kiln_json_key(&j, "p99_ms"); kiln_json_number(&j, p99);
 *   kiln_json_object_end(&j);
 *   KILN_TRY(kiln_json_finish(&j));   // then use b.data / kiln_strbuf_write_file
 * Misuse (a value in an object without a key, a key in an array, unbalanced ends, a second top-level
 * value, nesting deeper than KILN_JSON_MAX_DEPTH) writes nothing more and is reported by
 * kiln_json_finish; so is running out of memory. Strings are UTF-8: valid sequences pass through
 * unchanged, '"', '\\' and control characters (< 0x20) are escaped (\n \r \t \b \f or \u00XX), and each
 * byte of an invalid UTF-8 sequence becomes \ufffd, so the output is always valid JSON. */
#define KILN_JSON_MAX_DEPTH 64

typedef struct kiln_json {
    kiln_strbuf *out;
    int indent;                            /* spaces per level; 0 = compact, one line */
    int depth;                             /* open containers */
    bool pending_key;                      /* a key was written and awaits its value */
    bool done;                             /* a complete top-level value has been written */
    unsigned char open[KILN_JSON_MAX_DEPTH]; /* per open container: bit 0 object, bit 1 non-empty */
    const char *misuse;                    /* first misuse, NULL if none */
} kiln_json;

/* Starts a JSON document appended to `out` (which the caller owns and keeps alive). */
void kiln_json_init(kiln_json *j, kiln_strbuf *out, int indent);
void kiln_json_object_begin(kiln_json *j);
void kiln_json_object_end(kiln_json *j);
void kiln_json_array_begin(kiln_json *j);
void kiln_json_array_end(kiln_json *j);
/* The next member's key (only directly inside an object). */
void kiln_json_key(kiln_json *j, const char *key);
/* A string value; NULL writes null. */
void kiln_json_string(kiln_json *j, const char *s);
/* A string value of n bytes (may contain NULs, written as \u0000). */
void kiln_json_string_n(kiln_json *j, const char *s, size_t n);
/* A number (kiln_format_double); NaN and +-infinity are written as null. */
void kiln_json_number(kiln_json *j, double v);
void kiln_json_int(kiln_json *j, int64_t v);
void kiln_json_bool(kiln_json *j, bool v);
void kiln_json_null(kiln_json *j);
/* Key + value in one call. */
void kiln_json_kv_string(kiln_json *j, const char *key, const char *s);
void kiln_json_kv_number(kiln_json *j, const char *key, double v);
void kiln_json_kv_int(kiln_json *j, const char *key, int64_t v);
void kiln_json_kv_bool(kiln_json *j, const char *key, bool v);
/* Ends the document (appends a newline). KILN_OK when exactly one complete value was written with
 * no misuse; KILN_ERR_INVALID_ARGUMENT naming the misuse; KILN_ERR_OUT_OF_MEMORY. */
kiln_status kiln_json_finish(kiln_json *j);
/* Appends s[0..n) as a quoted, escaped JSON string (the rules above). */
void kiln_json_escape(kiln_strbuf *out, const char *s, size_t n);

/* ------------------------------------------------------------------ (b) CSV
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

/* ------------------------------------------------------------------ (c) HTML report
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
