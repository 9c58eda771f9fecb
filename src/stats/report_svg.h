/* report_svg.h — internal to src/stats/: the inline-SVG chart renderer behind the kiln_report_*
 * chart calls (report.h states the SVG structure and the meaning of every option). Each function
 * validates its arguments, then appends one <figure class="kiln-figure"><svg ...>...</svg></figure>
 * to `out`; on a bad argument it appends nothing and returns KILN_ERR_INVALID_ARGUMENT. `id` is the
 * already-sanitised element id. */
#ifndef KILN_STATS_REPORT_SVG_H
#define KILN_STATS_REPORT_SVG_H

#include "stats/report.h"

/* The kinds of x-y chart kiln_svg_xy draws. */
typedef enum kiln_svg_xy_kind {
    KILN_SVG_LINE,    /* kiln-line-chart: polylines */
    KILN_SVG_SCATTER, /* kiln-scatter: points, optionally connected */
    KILN_SVG_CDF,     /* kiln-cdf: x is a percentile; c->log_x selects the 1/(1-p) axis */
} kiln_svg_xy_kind;

/* Appends s with &, <, >, " and ' replaced by entities (valid in HTML text, attributes and SVG). */
void kiln_html_escape(kiln_strbuf *out, const char *s);

kiln_status kiln_svg_histogram(kiln_strbuf *out, const char *id, const kiln_chart *c,
                               const kiln_hist_bin *bins, int nbins, const char *note);
kiln_status kiln_svg_xy(kiln_strbuf *out, const char *id, const kiln_chart *c, kiln_svg_xy_kind kind,
                        const kiln_series *s, size_t ns, bool connect);
kiln_status kiln_svg_barh(kiln_strbuf *out, const char *id, const kiln_chart *c,
                          const char *const *labels, const double *values, size_t n);

#endif
