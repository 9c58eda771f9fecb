/* report.c — the self-contained HTML report of report.h: the document around the body (inline CSS,
 * no script, no external resource), headings, paragraphs, key/value blocks, tables, and the chart
 * calls, which hand their drawing to report_svg.c. The body is built as elements are added, so
 * writing the document is one copy. */
#include "stats/report.h"

#include "core/status.h"
#include "stats/report_svg.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct kiln_report {
    char *title;
    kiln_strbuf body;
    int charts;     /* charts added so far (for default ids) */
    bool in_kv;     /* a <dl class="kiln-kv"> block is open */
    int table_cols; /* columns of the open table; 0 when none is open */
};

static const char CSS[] =
    "body{font-family:-apple-system,'Segoe UI',Helvetica,Arial,sans-serif;margin:0;background:#f6f6f4;"
    "color:#222}\n"
    ".kiln-report{max-width:1100px;margin:0 auto;padding:24px 32px;background:#fff}\n"
    "h1{font-size:24px;margin:0 0 16px}\n"
    "h2{font-size:18px;margin:28px 0 10px;border-bottom:1px solid #ddd;padding-bottom:4px}\n"
    ".kiln-kv{display:grid;grid-template-columns:max-content auto;gap:3px 18px;margin:8px 0 16px}\n"
    ".kiln-kv dt{font-weight:600;color:#555}.kiln-kv dd{margin:0;font-family:monospace}\n"
    ".kiln-table{border-collapse:collapse;margin:8px 0 16px;font-size:13px}\n"
    ".kiln-table caption{text-align:left;font-weight:600;padding:4px 0}\n"
    ".kiln-table th,.kiln-table td{border:1px solid #ddd;padding:3px 10px}\n"
    ".kiln-table th{background:#f0f0ee}.kiln-table td.num{text-align:right;font-family:monospace}\n"
    ".kiln-table tbody tr:nth-child(even){background:#fafaf8}\n"
    ".kiln-figure{margin:12px 0}.kiln-chart{max-width:100%;height:auto}\n"
    ".kiln-footer{margin-top:32px;color:#888;font-size:12px}\n";

kiln_status kiln_report_create(const char *title, kiln_report **out) {
    if (!out) return kiln_error(KILN_ERR_INVALID_ARGUMENT, "kiln_report_create: out is NULL");
    *out = NULL;
    if (!title) return kiln_error(KILN_ERR_INVALID_ARGUMENT, "kiln_report_create: title is NULL");
    kiln_report *r = calloc(1, sizeof *r);
    char *t = strdup(title);
    if (!r || !t) {
        free(r);
        free(t);
        return kiln_error(KILN_ERR_OUT_OF_MEMORY, "report: out of memory");
    }
    r->title = t;
    *out = r;
    return KILN_OK;
}

void kiln_report_free(kiln_report *r) {
    if (!r) return;
    free(r->title);
    kiln_strbuf_free(&r->body);
    free(r);
}

/* Readies the body for a new element that is not a key/value line: fails while a table is open,
 * closes an open key/value block. */
static kiln_status begin_element(kiln_report *r, const char *what) {
    if (!r) return kiln_error(KILN_ERR_INVALID_ARGUMENT, "report: NULL report for %s", what);
    if (r->table_cols)
        return kiln_error(KILN_ERR_INVALID_ARGUMENT, "report: %s added while a table is open", what);
    if (r->in_kv) kiln_strbuf_puts(&r->body, "</dl>\n");
    r->in_kv = false;
    return KILN_OK;
}

/* Appends <tag>escaped text</tag>. */
static kiln_status text_element(kiln_report *r, const char *tag, const char *text) {
    KILN_TRY(begin_element(r, tag));
    if (!text) return kiln_error(KILN_ERR_INVALID_ARGUMENT, "report: NULL text for <%s>", tag);
    kiln_strbuf_printf(&r->body, "<%s>", tag);
    kiln_html_escape(&r->body, text);
    kiln_strbuf_printf(&r->body, "</%s>\n", tag);
    return kiln_strbuf_status(&r->body);
}

kiln_status kiln_report_heading(kiln_report *r, const char *text) { return text_element(r, "h2", text); }

kiln_status kiln_report_paragraph(kiln_report *r, const char *text) {
    return text_element(r, "p", text);
}

kiln_status kiln_report_kv(kiln_report *r, const char *key, const char *value) {
    if (!r || !key || !value)
        return kiln_error(KILN_ERR_INVALID_ARGUMENT, "report: key/value line with a NULL argument");
    if (r->table_cols)
        return kiln_error(KILN_ERR_INVALID_ARGUMENT,
                          "report: key/value line added while a table is open");
    if (!r->in_kv) kiln_strbuf_puts(&r->body, "<dl class=\"kiln-kv\">\n");
    r->in_kv = true;
    kiln_strbuf_puts(&r->body, "<dt>");
    kiln_html_escape(&r->body, key);
    kiln_strbuf_puts(&r->body, "</dt><dd>");
    kiln_html_escape(&r->body, value);
    kiln_strbuf_puts(&r->body, "</dd>\n");
    return kiln_strbuf_status(&r->body);
}

kiln_status kiln_report_kv_printf(kiln_report *r, const char *key, const char *fmt, ...) {
    if (!fmt) return kiln_error(KILN_ERR_INVALID_ARGUMENT, "report: NULL format for key/value line");
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0) return kiln_error(KILN_ERR_INVALID_ARGUMENT, "report: bad format \"%s\"", fmt);
    char *value = malloc((size_t)n + 1);
    if (!value) return kiln_error(KILN_ERR_OUT_OF_MEMORY, "report: out of memory");
    va_start(ap, fmt);
    vsnprintf(value, (size_t)n + 1, fmt, ap);
    va_end(ap);
    kiln_status s = kiln_report_kv(r, key, value);
    free(value);
    return s;
}

/* ------------------------------------------------------------------ tables */

/* Whether a cell reads entirely as a number (then it is right-aligned). */
static bool is_number(const char *s) {
    if (!s || !*s) return false;
    char *end;
    strtod(s, &end);
    return end != s && *end == 0;
}

kiln_status kiln_report_table_begin(kiln_report *r, const char *caption, int ncols,
                                    const char *const *header) {
    KILN_TRY(begin_element(r, "a table"));
    if (ncols < 1 || !header)
        return kiln_error(KILN_ERR_INVALID_ARGUMENT,
                          "report: a table needs a header of >= 1 column (got %d)", ncols);
    kiln_strbuf_puts(&r->body, "<table class=\"kiln-table\">");
    if (caption) {
        kiln_strbuf_puts(&r->body, "<caption>");
        kiln_html_escape(&r->body, caption);
        kiln_strbuf_puts(&r->body, "</caption>");
    }
    kiln_strbuf_puts(&r->body, "\n<thead><tr>");
    for (int i = 0; i < ncols; i++) {
        kiln_strbuf_puts(&r->body, "<th>");
        kiln_html_escape(&r->body, header[i]);
        kiln_strbuf_puts(&r->body, "</th>");
    }
    kiln_strbuf_puts(&r->body, "</tr></thead>\n<tbody>\n");
    r->table_cols = ncols;
    return kiln_strbuf_status(&r->body);
}

kiln_status kiln_report_table_row(kiln_report *r, const char *const *cells) {
    if (!r || !r->table_cols)
        return kiln_error(KILN_ERR_INVALID_ARGUMENT, "report: table row without an open table");
    if (!cells) return kiln_error(KILN_ERR_INVALID_ARGUMENT, "report: table row with NULL cells");
    kiln_strbuf_puts(&r->body, "<tr>");
    for (int i = 0; i < r->table_cols; i++) {
        kiln_strbuf_puts(&r->body, is_number(cells[i]) ? "<td class=\"num\">" : "<td>");
        kiln_html_escape(&r->body, cells[i]);
        kiln_strbuf_puts(&r->body, "</td>");
    }
    kiln_strbuf_puts(&r->body, "</tr>\n");
    return kiln_strbuf_status(&r->body);
}

kiln_status kiln_report_table_end(kiln_report *r) {
    if (!r || !r->table_cols)
        return kiln_error(KILN_ERR_INVALID_ARGUMENT, "report: table end without an open table");
    kiln_strbuf_puts(&r->body, "</tbody></table>\n");
    r->table_cols = 0;
    return kiln_strbuf_status(&r->body);
}

/* ------------------------------------------------------------------ charts */

/* Readies the body for a chart and writes its element id into id[0..cap): c->id with characters
 * outside [A-Za-z0-9_-] replaced by '-', or "chart-N". Counts the chart. */
static kiln_status begin_chart(kiln_report *r, const kiln_chart *c, char *id, size_t cap) {
    KILN_TRY(begin_element(r, "a chart"));
    if (!c) return kiln_error(KILN_ERR_INVALID_ARGUMENT, "report: NULL chart options");
    if (c->width < 0 || c->height < 0 || c->width > 20000 || c->height > 100000)
        return kiln_error(KILN_ERR_INVALID_ARGUMENT, "report: chart size %dx%d is out of range",
                          c->width, c->height);
    r->charts++;
    if (!c->id || !*c->id) {
        snprintf(id, cap, "chart-%d", r->charts);
        return KILN_OK;
    }
    size_t n = 0;
    for (const char *p = c->id; *p && n + 1 < cap; p++, n++) {
        char ch = *p;
        bool ok = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
                  ch == '_' || ch == '-';
        id[n] = ok ? ch : '-';
    }
    id[n] = 0;
    return KILN_OK;
}

/* Undoes begin_chart's count when the chart was refused. */
static kiln_status end_chart(kiln_report *r, kiln_status s) {
    if (s != KILN_OK && s != KILN_ERR_OUT_OF_MEMORY) r->charts--;
    return s;
}

kiln_status kiln_report_histogram(kiln_report *r, const kiln_chart *c, const kiln_hist_bin *bins,
                                  int nbins) {
    char id[128];
    KILN_TRY(begin_chart(r, c, id, sizeof id));
    if (nbins < 1)
        return end_chart(r, kiln_error(KILN_ERR_INVALID_ARGUMENT, "histogram chart: %d bins", nbins));
    return end_chart(r, kiln_svg_histogram(&r->body, id, c, bins, nbins, NULL));
}

kiln_status kiln_report_histogram_of(kiln_report *r, const kiln_chart *c, const kiln_hist *h,
                                     int nbins, double value_scale) {
    char id[128];
    KILN_TRY(begin_chart(r, c, id, sizeof id));
    if (!h || nbins < 1 || nbins > 100000 || !(value_scale > 0) || !isfinite(value_scale))
        return end_chart(r, kiln_error(KILN_ERR_INVALID_ARGUMENT,
                                       "histogram chart: need a histogram, 1..100000 bins (got %d) "
                                       "and a finite scale > 0 (got %g)", nbins, value_scale));
    kiln_hist_bin *bins = malloc((size_t)nbins * sizeof *bins);
    if (!bins) return kiln_error(KILN_ERR_OUT_OF_MEMORY, "histogram chart: out of memory");
    int n = kiln_hist_display_bins(h, nbins, c->log_x, bins);
    for (int i = 0; i < n; i++) bins[i].lo *= value_scale, bins[i].hi *= value_scale;
    char note[160] = "";
    if (n == 0)
        snprintf(note, sizeof note, "no values recorded");
    else if (kiln_hist_overflow(h) || kiln_hist_underflow(h))
        snprintf(note, sizeof note, "%lld value(s) above the highest trackable value and %lld below 0 "
                 "were clamped into the range", (long long)kiln_hist_overflow(h),
                 (long long)kiln_hist_underflow(h));
    kiln_status s = kiln_svg_histogram(&r->body, id, c, bins, n, note);
    free(bins);
    return end_chart(r, s);
}

kiln_status kiln_report_cdf(kiln_report *r, const kiln_chart *c, const kiln_series *s, size_t ns) {
    char id[128];
    KILN_TRY(begin_chart(r, c, id, sizeof id));
    return end_chart(r, kiln_svg_xy(&r->body, id, c, KILN_SVG_CDF, s, ns, true));
}

kiln_status kiln_report_cdf_of(kiln_report *r, const kiln_chart *c, const kiln_hist *h,
                               const char *name, double value_scale) {
    enum { CAP = 400 };
    if (!h || !(value_scale > 0) || !isfinite(value_scale))
        return kiln_error(KILN_ERR_INVALID_ARGUMENT,
                          "CDF chart: need a histogram and a finite scale > 0 (got %g)", value_scale);
    double *pct = malloc(CAP * sizeof *pct), *val = malloc(CAP * sizeof *val);
    int64_t *raw = malloc(CAP * sizeof *raw);
    kiln_status st = KILN_OK;
    if (!pct || !val || !raw) {
        st = kiln_error(KILN_ERR_OUT_OF_MEMORY, "CDF chart: out of memory");
    } else {
        int n = kiln_hist_percentile_points(h, 5, pct, raw, CAP);
        for (int i = 0; i < n; i++) val[i] = (double)raw[i] * value_scale;
        kiln_series s = {name, pct, val, (size_t)n};
        st = kiln_report_cdf(r, c, &s, 1);
    }
    free(pct);
    free(val);
    free(raw);
    return st;
}

kiln_status kiln_report_line_chart(kiln_report *r, const kiln_chart *c, const kiln_series *s,
                                   size_t ns) {
    char id[128];
    KILN_TRY(begin_chart(r, c, id, sizeof id));
    return end_chart(r, kiln_svg_xy(&r->body, id, c, KILN_SVG_LINE, s, ns, true));
}

kiln_status kiln_report_scatter(kiln_report *r, const kiln_chart *c, const kiln_series *s,
                                size_t ns, bool connect) {
    char id[128];
    KILN_TRY(begin_chart(r, c, id, sizeof id));
    return end_chart(r, kiln_svg_xy(&r->body, id, c, KILN_SVG_SCATTER, s, ns, connect));
}

kiln_status kiln_report_bar_chart(kiln_report *r, const kiln_chart *c, const char *const *labels,
                                  const double *values, size_t n) {
    char id[128];
    KILN_TRY(begin_chart(r, c, id, sizeof id));
    return end_chart(r, kiln_svg_barh(&r->body, id, c, labels, values, n));
}

/* ------------------------------------------------------------------ the document */

kiln_status kiln_report_html(const kiln_report *r, kiln_strbuf *out) {
    if (!r || !out) return kiln_error(KILN_ERR_INVALID_ARGUMENT, "kiln_report_html: NULL argument");
    if (r->table_cols)
        return kiln_error(KILN_ERR_INVALID_ARGUMENT,
                          "report: a table is still open (call kiln_report_table_end)");
    KILN_TRY(kiln_strbuf_status(&r->body));
    kiln_strbuf_puts(out, "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n"
                          "<meta name=\"viewport\" content=\"width=device-width, "
                          "initial-scale=1\">\n<title>");
    kiln_html_escape(out, r->title);
    kiln_strbuf_printf(out, "</title>\n<style>\n%s</style></head>\n"
                            "<body><main class=\"kiln-report\">\n<h1>", CSS);
    kiln_html_escape(out, r->title);
    kiln_strbuf_puts(out, "</h1>\n");
    if (r->body.len) kiln_strbuf_append(out, r->body.data, r->body.len);
    if (r->in_kv) kiln_strbuf_puts(out, "</dl>\n");
    kiln_strbuf_printf(out, "<footer class=\"kiln-footer\">written by kiln %s</footer>\n"
                            "</main></body></html>\n", kiln_version());
    return kiln_strbuf_status(out);
}

kiln_status kiln_report_write_html(const kiln_report *r, const char *path) {
    if (!path) return kiln_error(KILN_ERR_INVALID_ARGUMENT, "kiln_report_write_html: NULL path");
    kiln_strbuf b = {0};
    kiln_status s = kiln_report_html(r, &b);
    if (s == KILN_OK) s = kiln_strbuf_write_file(&b, path);
    kiln_strbuf_free(&b);
    return s;
}
