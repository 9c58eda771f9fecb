/* report_svg.c — inline-SVG charts for the HTML report: axes with "nice" ticks (linear, log10, and
 * HdrHistogram's 1/(1-p) percentile axis), histogram bars, polylines, points, horizontal bars and
 * legends. Coordinates are written with one decimal; colours are attributes, so an <svg> copied out
 * of the report still renders. */
#include "stats/report_svg.h"

#include "core/status.h"

#include <math.h>
#include <string.h>

#define DEFAULT_W 960
#define DEFAULT_H 400

static const char *const PALETTE[] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e",
                                      "#9467bd", "#8c564b", "#e377c2", "#17becf"};
#define PALETTE_N (sizeof PALETTE / sizeof PALETTE[0])

typedef enum { AX_LIN, AX_LOG, AX_CDF } axis_kind;

/* An axis maps transformed values t in [lo, hi] to pixels [p0, p1]. t = v (linear), log10(v) (log),
 * log10(1 / (1 - p/100)) (percentile; p = 100 is t = +inf and maps to hi). */
typedef struct axis {
    axis_kind kind;
    double lo, hi;
    double p0, p1;
    double step;     /* linear: tick step */
    bool end_at_max; /* percentile axis: the last tick is the p = 100 position */
} axis;

void kiln_html_escape(kiln_strbuf *out, const char *s) {
    if (!s) return;
    const char *run = s;
    for (; *s; s++) {
        const char *e = *s == '&' ? "&amp;" : *s == '<' ? "&lt;" : *s == '>' ? "&gt;"
                      : *s == '"' ? "&quot;" : *s == '\'' ? "&#39;" : NULL;
        if (!e) continue;
        kiln_strbuf_append(out, run, (size_t)(s - run));
        kiln_strbuf_puts(out, e);
        run = s + 1;
    }
    kiln_strbuf_puts(out, run);
}

/* The transformed value of v on an axis of this kind; false if v cannot be drawn there. */
static bool transform(axis_kind kind, double v, double *t) {
    if (!isfinite(v)) return false;
    switch (kind) {
    case AX_LIN: *t = v; return true;
    case AX_LOG:
        if (v <= 0) return false;
        *t = log10(v);
        return true;
    case AX_CDF:
        if (v < 0 || v > 100) return false;
        *t = v >= 100 ? INFINITY : -log10(1.0 - v / 100.0);
        return true;
    }
    return false;
}

static double axis_px(const axis *a, double t) {
    if (isinf(t)) t = t > 0 ? a->hi : a->lo;
    return a->p0 + (t - a->lo) / (a->hi - a->lo) * (a->p1 - a->p0);
}

/* Fits an axis of `kind` around transformed data in [tlo, thi] (tlo > thi: no data). Linear axes
 * get a 1-2-5 step and snap outwards to it, starting at 0 when include_zero and the data are >= 0;
 * log axes snap to whole decades; percentile axes run from p = 0 to the decade above the data, plus
 * one more decade for p = 100 points when has_max. */
static void axis_fit(axis *a, axis_kind kind, double tlo, double thi, bool include_zero,
                     bool has_max) {
    a->kind = kind;
    a->end_at_max = false;
    if (tlo > thi) { /* no drawable data */
        tlo = 0;
        thi = 1;
    }
    if (kind == AX_LOG) {
        a->lo = floor(tlo);
        a->hi = ceil(thi);
        if (a->hi <= a->lo) a->hi = a->lo + 1;
        return;
    }
    if (kind == AX_CDF) {
        a->lo = 0;
        a->hi = fmax(1.0, ceil(thi - 1e-9));
        if (has_max) {
            a->hi += 1;
            a->end_at_max = true;
        }
        return;
    }
    if (include_zero && tlo >= 0) tlo = 0;
    if (thi <= tlo) {
        double pad = tlo == 0 ? 1 : fabs(tlo) * 0.1;
        thi = tlo + pad;
        if (!(include_zero && tlo == 0)) tlo -= pad;
    }
    double raw = (thi - tlo) / 6, mag = pow(10, floor(log10(raw))), norm = raw / mag;
    a->step = (norm <= 1 ? 1 : norm <= 2 ? 2 : norm <= 5 ? 5 : 10) * mag;
    a->lo = floor(tlo / a->step + 1e-9) * a->step;
    a->hi = ceil(thi / a->step - 1e-9) * a->step;
    if (a->hi <= a->lo) a->hi = a->lo + a->step;
}

/* A tick label: numbers with up to 6 significant digits. */
static void tick_number(kiln_strbuf *out, double v) {
    if (fabs(v) < 1e-12) v = 0;
    kiln_strbuf_printf(out, "%.6g", v);
}

/* Appends <line class="cls" .../> from (x1, y1) to (x2, y2). */
static void svg_line(kiln_strbuf *out, const char *cls, double x1, double y1, double x2, double y2,
                     const char *stroke) {
    kiln_strbuf_printf(out,
                       "<line class=\"%s\" x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\""
                       " stroke=\"%s\"/>",
                       cls, x1, y1, x2, y2, stroke);
}

/* Appends ticks, grid lines and labels of one axis. `x`: horizontal axis at pixel y = cross;
 * otherwise vertical at pixel x = cross; `span` is the plot's extent across (for grid lines). */
static void axis_draw(kiln_strbuf *out, const axis *a, bool x, double cross, double span0,
                      double span1) {
    kiln_strbuf_printf(out, "<g class=\"kiln-axis %s\">", x ? "kiln-axis-x" : "kiln-axis-y");
    if (x)
        svg_line(out, "kiln-axis-line", a->p0, cross, a->p1, cross, "#333");
    else
        svg_line(out, "kiln-axis-line", cross, a->p0, cross, a->p1, "#333");
    double ticks[64];
    int nt = 0;
    if (a->kind == AX_LIN) {
        int count = (int)lround((a->hi - a->lo) / a->step);
        for (int i = 0; i <= count && nt < 64; i++) ticks[nt++] = a->lo + i * a->step;
    } else if (a->kind == AX_LOG) {
        int decades = (int)lround(a->hi - a->lo), stride = decades > 16 ? (decades + 15) / 16 : 1;
        for (int k = 0; k <= decades && nt < 64; k += stride) {
            ticks[nt++] = a->lo + k;
            for (int m = 2; decades <= 2 && m <= 5 && k < decades && nt < 64; m += 3)
                ticks[nt++] = a->lo + k + log10(m);
        }
    } else {
        int top = (int)lround(a->hi) - (a->end_at_max ? 1 : 0);
        for (int k = 0; k <= top && nt < 63; k++) {
            ticks[nt++] = k;
            if (k == 0 && top <= 6) ticks[nt++] = log10(2.0); /* 50 % */
        }
        if (a->end_at_max) ticks[nt++] = a->hi;
    }
    for (int i = 0; i < nt; i++) {
        double p = axis_px(a, ticks[i]);
        if (x) {
            svg_line(out, "kiln-grid", p, span0, p, span1, "#e4e4e4");
            svg_line(out, "kiln-tick", p, cross, p, cross + 5, "#333");
            kiln_strbuf_printf(out, "<text class=\"kiln-tick-label\" x=\"%.1f\" y=\"%.1f\" "
                                    "text-anchor=\"middle\">", p, cross + 18);
        } else {
            svg_line(out, "kiln-grid", span0, p, span1, p, "#e4e4e4");
            svg_line(out, "kiln-tick", cross - 5, p, cross, p, "#333");
            kiln_strbuf_printf(out, "<text class=\"kiln-tick-label\" x=\"%.1f\" y=\"%.1f\" "
                                    "text-anchor=\"end\">", cross - 8, p + 4);
        }
        if (a->kind == AX_LIN)
            tick_number(out, ticks[i]);
        else if (a->kind == AX_LOG)
            tick_number(out, pow(10, ticks[i]));
        else if (a->end_at_max && i == nt - 1)
            kiln_strbuf_puts(out, "100%");
        else
            kiln_strbuf_printf(out, "%.10g%%", 100.0 - 100.0 * pow(10, -ticks[i]));
        kiln_strbuf_puts(out, "</text>");
    }
    kiln_strbuf_puts(out, "</g>");
}

/* The plot area of a chart and its two axes. */
typedef struct frame {
    kiln_strbuf *out;
    int w, h;
    double left, right, top, bottom; /* plot area in pixels */
    axis ax, ay;
} frame;

/* Opens the figure and svg elements, draws the title and sets the plot area (legend_w: pixels kept
 * free on the right for a legend). */
static void frame_begin(frame *f, kiln_strbuf *out, const char *kind, const char *id,
                        const kiln_chart *c, int default_h, double left, double legend_w) {
    f->out = out;
    f->w = c->width > 0 ? c->width : DEFAULT_W;
    f->h = c->height > 0 ? c->height : default_h;
    f->left = left;
    f->right = f->w - 20 - legend_w;
    f->top = c->title ? 40 : 16;
    f->bottom = f->h - (c->x_label ? 52 : 34);
    kiln_strbuf_printf(out, "<figure class=\"kiln-figure\"><svg class=\"kiln-chart %s\""
                            " id=\"", kind);
    kiln_html_escape(out, id);
    kiln_strbuf_printf(out, "\" xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" "
                            "viewBox=\"0 0 %d %d\" role=\"img\" aria-label=\"",
                       f->w, f->h, f->w, f->h);
    kiln_html_escape(out, c->title ? c->title : kind);
    kiln_strbuf_printf(out, "\" font-family=\"sans-serif\" font-size=\"11\">"
                            "<rect class=\"kiln-background\" x=\"0\" y=\"0\" width=\"%d\""
                            " height=\"%d\" fill=\"#fff\"/>",
                       f->w, f->h);
    if (c->title) {
        kiln_strbuf_printf(out, "<text class=\"kiln-chart-title\" x=\"%.1f\" y=\"24\""
                                " text-anchor=\"middle\" font-size=\"14\" font-weight=\"bold\">",
                           f->w / 2.0);
        kiln_html_escape(out, c->title);
        kiln_strbuf_puts(out, "</text>");
    }
}

/* Draws both axes (if draw_y) and their titles. */
static void frame_axes(frame *f, const kiln_chart *c, bool draw_y) {
    kiln_strbuf *out = f->out;
    axis_draw(out, &f->ax, true, f->bottom, f->top, f->bottom);
    if (draw_y) axis_draw(out, &f->ay, false, f->left, f->left, f->right);
    if (c->x_label) {
        kiln_strbuf_printf(out, "<text class=\"kiln-axis-label kiln-axis-label-x\" x=\"%.1f\""
                                " y=\"%.1f\" text-anchor=\"middle\" font-size=\"12\">",
                           (f->left + f->right) / 2, (double)f->h - 10);
        kiln_html_escape(out, c->x_label);
        kiln_strbuf_puts(out, "</text>");
    }
    if (c->y_label) {
        double cy = (f->top + f->bottom) / 2;
        kiln_strbuf_printf(out, "<text class=\"kiln-axis-label kiln-axis-label-y\" x=\"14\""
                                " y=\"%.1f\" text-anchor=\"middle\" font-size=\"12\""
                                " transform=\"rotate(-90 14 %.1f)\">",
                           cy, cy);
        kiln_html_escape(out, c->y_label);
        kiln_strbuf_puts(out, "</text>");
    }
}

/* Appends the kiln-note line (if any text) and closes the svg and figure. */
static void frame_end(frame *f, const char *note) {
    if (note && *note) {
        kiln_strbuf_printf(f->out, "<text class=\"kiln-note\" x=\"%.1f\" y=\"%.1f\" fill=\"#a00\">",
                           f->left, f->top - 4);
        kiln_html_escape(f->out, note);
        kiln_strbuf_puts(f->out, "</text>");
    }
    kiln_strbuf_puts(f->out, "</svg></figure>\n");
}

/* Width of a legend for these series names (0 when the chart gets no legend). */
static double legend_width(const kiln_series *s, size_t ns) {
    if (ns == 1 && !s[0].name) return 0;
    size_t longest = 8;
    for (size_t i = 0; i < ns; i++)
        if (s[i].name && strlen(s[i].name) > longest) longest = strlen(s[i].name);
    return fmin(240, 30 + 6.5 * (double)longest);
}

static void legend_draw(frame *f, const kiln_series *s, size_t ns) {
    if (ns == 1 && !s[0].name) return;
    kiln_strbuf *out = f->out;
    kiln_strbuf_puts(out, "<g class=\"kiln-legend\">");
    for (size_t i = 0; i < ns; i++) {
        double y = f->top + 8 + 18.0 * (double)i;
        kiln_strbuf_printf(out, "<g class=\"kiln-legend-item\"><rect x=\"%.1f\" y=\"%.1f\""
                                " width=\"12\" height=\"12\" fill=\"%s\"/>"
                                "<text x=\"%.1f\" y=\"%.1f\">",
                           f->right + 16, y - 10, PALETTE[i % PALETTE_N], f->right + 32, y);
        if (s[i].name) kiln_html_escape(out, s[i].name);
        else kiln_strbuf_printf(out, "series %zu", i + 1);
        kiln_strbuf_puts(out, "</text></g>");
    }
    kiln_strbuf_puts(out, "</g>");
}

/* ------------------------------------------------------------------ histogram */

kiln_status kiln_svg_histogram(kiln_strbuf *out, const char *id, const kiln_chart *c,
                               const kiln_hist_bin *bins, int nbins, const char *note) {
    if (nbins < 0 || (nbins > 0 && !bins))
        return kiln_error(KILN_ERR_INVALID_ARGUMENT, "histogram chart: no bins");
    double xlo = INFINITY, xhi = -INFINITY, cmax = -INFINITY, cmin = INFINITY;
    axis_kind xk = c->log_x ? AX_LOG : AX_LIN, yk = c->log_y ? AX_LOG : AX_LIN;
    for (int i = 0; i < nbins; i++) {
        if (!isfinite(bins[i].lo) || !isfinite(bins[i].hi) || bins[i].hi < bins[i].lo ||
            bins[i].count < 0)
            return kiln_error(KILN_ERR_INVALID_ARGUMENT,
                              "histogram chart: bin %d has range [%g, %g] and count %lld", i,
                              bins[i].lo, bins[i].hi, (long long)bins[i].count);
        double t;
        if (transform(xk, bins[i].lo, &t)) xlo = fmin(xlo, t);
        if (transform(xk, bins[i].hi, &t)) xlo = fmin(xlo, t), xhi = fmax(xhi, t);
        if (bins[i].count > 0) {
            cmax = fmax(cmax, (double)bins[i].count);
            cmin = fmin(cmin, (double)bins[i].count);
        }
    }
    frame f;
    frame_begin(&f, out, "kiln-hist", id, c, DEFAULT_H, 70, 0);
    axis_fit(&f.ax, xk, xlo, xhi, false, false);
    if (yk == AX_LOG) axis_fit(&f.ay, AX_LOG, 0, cmin > cmax ? 1 : log10(cmax), false, false);
    else axis_fit(&f.ay, AX_LIN, 0, cmax > 0 ? cmax : 1, true, false);
    f.ax.p0 = f.left, f.ax.p1 = f.right, f.ay.p0 = f.bottom, f.ay.p1 = f.top;
    frame_axes(&f, c, true);
    kiln_strbuf_printf(out, "<g class=\"kiln-series\" data-name=\"histogram\""
                            " fill=\"%s\">", PALETTE[0]);
    for (int i = 0; i < nbins; i++) {
        double t0, t1, x0, x1;
        x0 = transform(xk, bins[i].lo, &t0) ? axis_px(&f.ax, t0) : f.left;
        x1 = transform(xk, bins[i].hi, &t1) ? axis_px(&f.ax, t1) : f.left;
        if (x1 - x0 < 1) { /* a degenerate bin (min == max) still gets a visible bar */
            double mid = (x0 + x1) / 2, half = fmax(1, (f.right - f.left) / 100);
            x0 = mid - half, x1 = mid + half;
        }
        double ty, y = f.bottom;
        if (bins[i].count > 0 && transform(yk, (double)bins[i].count, &ty)) y = axis_px(&f.ay, ty);
        if (bins[i].count > 0 && f.bottom - y < 1) y = f.bottom - 1; /* a lone tail value shows */
        char lo[32], hi[32];
        kiln_strbuf_printf(out, "<rect class=\"kiln-bar\" x=\"%.1f\" y=\"%.1f\" width=\"%.1f\""
                                " height=\"%.1f\"><title>[%s, %s%s: %lld</title></rect>",
                           x0 + 0.5, y, fmax(0.5, x1 - x0 - 1), f.bottom - y,
                           kiln_format_double(lo, bins[i].lo), kiln_format_double(hi, bins[i].hi),
                           i == nbins - 1 ? "]" : ")", (long long)bins[i].count);
    }
    kiln_strbuf_puts(out, "</g>");
    frame_end(&f, note);
    return kiln_strbuf_status(out);
}

/* ------------------------------------------------------------------ x-y charts */

/* The x of point i of a series (its index when the series has no x array). */
static double series_x(const kiln_series *s, size_t i) { return s->x ? s->x[i] : (double)i; }

/* Whether point i of s can be drawn on axes of kinds xk / yk (a linear CDF axis also needs
 * 0 <= x <= 100); if so, its transformed coordinates. */
static bool point_ok(const kiln_series *s, size_t i, kiln_svg_xy_kind kind, axis_kind xk,
                     axis_kind yk, double *tx, double *ty) {
    double x = series_x(s, i);
    if (kind == KILN_SVG_CDF && !(x >= 0 && x <= 100)) return false;
    return transform(xk, x, tx) && transform(yk, s->y[i], ty);
}

kiln_status kiln_svg_xy(kiln_strbuf *out, const char *id, const kiln_chart *c, kiln_svg_xy_kind kind,
                        const kiln_series *s, size_t ns, bool connect) {
    if (ns == 0 || !s) return kiln_error(KILN_ERR_INVALID_ARGUMENT, "chart: no series");
    for (size_t k = 0; k < ns; k++)
        if (s[k].n > 0 && !s[k].y)
            return kiln_error(KILN_ERR_INVALID_ARGUMENT, "chart: series %zu has %zu points but no"
                                                         " y",
                              k, s[k].n);
    axis_kind xk = !c->log_x ? AX_LIN : kind == KILN_SVG_CDF ? AX_CDF : AX_LOG;
    axis_kind yk = c->log_y ? AX_LOG : AX_LIN;
    double xlo = INFINITY, xhi = -INFINITY, ylo = INFINITY, yhi = -INFINITY;
    bool has_max = false;
    size_t skipped = 0;
    for (size_t k = 0; k < ns; k++)
        for (size_t i = 0; i < s[k].n; i++) {
            double tx, ty;
            if (!point_ok(&s[k], i, kind, xk, yk, &tx, &ty)) {
                skipped++;
                continue;
            }
            if (isinf(tx)) has_max = true;
            else xlo = fmin(xlo, tx), xhi = fmax(xhi, tx);
            ylo = fmin(ylo, ty), yhi = fmax(yhi, ty);
        }
    if (kind == KILN_SVG_CDF && xk == AX_LIN) xlo = 0, xhi = 100;
    if (has_max && xlo > xhi) xlo = xhi = 0;
    static const char *const classes[] = {"kiln-line-chart", "kiln-scatter", "kiln-cdf"};
    frame f;
    frame_begin(&f, out, classes[kind], id, c, DEFAULT_H, 70, legend_width(s, ns));
    axis_fit(&f.ax, xk, xlo, xhi, false, has_max);
    axis_fit(&f.ay, yk, ylo, yhi, true, false);
    f.ax.p0 = f.left, f.ax.p1 = f.right, f.ay.p0 = f.bottom, f.ay.p1 = f.top;
    frame_axes(&f, c, true);
    bool lines = kind != KILN_SVG_SCATTER || connect, points = kind == KILN_SVG_SCATTER;
    for (size_t k = 0; k < ns; k++) {
        const char *color = PALETTE[k % PALETTE_N];
        kiln_strbuf_puts(out, "<g class=\"kiln-series\" data-name=\"");
        if (s[k].name) kiln_html_escape(out, s[k].name);
        else kiln_strbuf_printf(out, "series %zu", k + 1);
        kiln_strbuf_puts(out, "\">");
        size_t drawn = 0;
        for (size_t i = 0; lines && i < s[k].n; i++) {
            double tx, ty;
            if (!point_ok(&s[k], i, kind, xk, yk, &tx, &ty)) continue;
            kiln_strbuf_puts(out, drawn++ ? " " : "<polyline class=\"kiln-line\" points=\"");
            kiln_strbuf_printf(out, "%.1f,%.1f", axis_px(&f.ax, tx), axis_px(&f.ay, ty));
        }
        if (drawn)
            kiln_strbuf_printf(out, "\" fill=\"none\" stroke=\"%s\" stroke-width=\"1.8\""
                                    " stroke-linejoin=\"round\"/>", color);
        for (size_t i = 0; points && i < s[k].n; i++) {
            double x = series_x(&s[k], i), tx, ty;
            if (!point_ok(&s[k], i, kind, xk, yk, &tx, &ty)) continue;
            char bx[32], by[32];
            kiln_strbuf_printf(out, "<circle class=\"kiln-point\" cx=\"%.1f\" cy=\"%.1f\""
                                    " r=\"3.5\" fill=\"%s\"><title>(%s, %s)</title></circle>",
                               axis_px(&f.ax, tx), axis_px(&f.ay, ty), color,
                               kiln_format_double(bx, x), kiln_format_double(by, s[k].y[i]));
        }
        kiln_strbuf_puts(out, "</g>");
    }
    legend_draw(&f, s, ns);
    char note[160] = "";
    if (skipped)
        snprintf(note, sizeof note, "%zu point(s) not drawn (not finite%s%s)", skipped,
                 kind == KILN_SVG_CDF ? ", or p outside 0..100 %" : "",
                 (c->log_x && kind != KILN_SVG_CDF) || c->log_y ? ", or <= 0 on a log axis" : "");
    frame_end(&f, note);
    return kiln_strbuf_status(out);
}

/* ------------------------------------------------------------------ horizontal bars */

kiln_status kiln_svg_barh(kiln_strbuf *out, const char *id, const kiln_chart *c,
                          const char *const *labels, const double *values, size_t n) {
    if (n == 0 || !values || !labels)
        return kiln_error(KILN_ERR_INVALID_ARGUMENT, "bar chart: no bars");
    double vmax = 0, vmin = INFINITY;
    size_t longest = 4;
    for (size_t i = 0; i < n; i++) {
        if (!isfinite(values[i]) || values[i] < 0 || (c->log_x && values[i] <= 0))
            return kiln_error(KILN_ERR_INVALID_ARGUMENT,
                              "bar chart: value %zu is %g (must be finite and %s 0)", i, values[i],
                              c->log_x ? ">" : ">=");
        vmax = fmax(vmax, values[i]);
        vmin = fmin(vmin, values[i]);
        if (labels[i] && strlen(labels[i]) > longest) longest = strlen(labels[i]);
    }
    const double row = 22;
    double left = fmin(320, 16 + 6.2 * (double)longest);
    int default_h = (int)(row * (double)n) + (c->title ? 40 : 16) + (c->x_label ? 52 : 34) + 8;
    frame f;
    frame_begin(&f, out, "kiln-barh", id, c, default_h, left, 60);
    if (c->log_x) axis_fit(&f.ax, AX_LOG, log10(vmin), log10(vmax), false, false);
    else axis_fit(&f.ax, AX_LIN, 0, vmax > 0 ? vmax : 1, true, false);
    f.ax.p0 = f.left, f.ax.p1 = f.right;
    frame_axes(&f, c, false);
    double rh = (f.bottom - f.top - 8) / (double)n;
    svg_line(out, "kiln-axis-line", f.left, f.top, f.left, f.bottom, "#333");
    kiln_strbuf_printf(out, "<g class=\"kiln-series\" data-name=\"bars\" fill=\"%s\">", PALETTE[0]);
    for (size_t i = 0; i < n; i++) {
        double y = f.top + 4 + rh * (double)i, t = 0;
        double x1 = c->log_x ? (transform(AX_LOG, values[i], &t), axis_px(&f.ax, t))
                             : axis_px(&f.ax, values[i]);
        char v[32];
        kiln_format_double(v, values[i]);
        kiln_strbuf_printf(out, "<text class=\"kiln-bar-label\" x=\"%.1f\" y=\"%.1f\""
                                " text-anchor=\"end\" fill=\"#222\">",
                           f.left - 6, y + rh / 2 + 4);
        kiln_html_escape(out, labels[i] ? labels[i] : "");
        kiln_strbuf_printf(out, "</text><rect class=\"kiln-bar\" x=\"%.1f\" y=\"%.1f\""
                                " width=\"%.1f\" height=\"%.1f\"><title>",
                           f.left, y + rh * 0.15, fmax(0, x1 - f.left), rh * 0.7);
        kiln_html_escape(out, labels[i] ? labels[i] : "");
        kiln_strbuf_printf(out, ": %s</title></rect><text class=\"kiln-bar-value\" x=\"%.1f\""
                                " y=\"%.1f\" fill=\"#222\">%.4g</text>",
                           v, x1 + 4, y + rh / 2 + 4, values[i]);
    }
    kiln_strbuf_puts(out, "</g>");
    frame_end(&f, NULL);
    return kiln_strbuf_status(out);
}
