/* report_sample.c — writes a sample of every report format into a directory, for test_stats
 * (`test_stats --write-sample DIR`) and tests/e2e/test_report_render.py, which parses the JSON and
 * CSV with Python and renders the HTML in headless Chromium. The data are synthetic and seeded, so
 * the output is the same on every run. The counts the e2e test expects are stated here:
 *   sample.json       the tricky strings and numbers listed in test_report_render.py
 *   sample.csv        a header and 3 rows, with cells that need quoting
 *   sample.html       charts (svg ids): latency-hist (kiln-hist, 40 bars, log x),
 *                     latency-cdf (kiln-cdf, 2 series / 2 lines, 1/(1-p) x axis),
 *                     linear-cdf (kiln-cdf, 1 line, linear x), throughput (kiln-line-chart, 3 lines),
 *                     sweep (kiln-scatter, 2 series x 6 points, connected), layers (kiln-barh, 12 bars),
 *                     small-hist (kiln-hist, 10 bars, linear x); 2 tables, 2 key/value blocks. */
#include "stats/histogram.h"
#include "stats/report.h"
#include "stats/summary.h"

#include "core/status.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

/* Declared again in test_stats.c (the only caller). */
kiln_status kiln_test_write_sample(const char *dir);

/* A seeded xorshift64* generator, uniform in (0, 1). */
static double next_uniform(uint64_t *s) {
    *s ^= *s >> 12;
    *s ^= *s << 25;
    *s ^= *s >> 27;
    return ((double)((*s * 2685821657736338717ULL) >> 11) + 0.5) / 9007199254740992.0;
}

/* A log-normal latency in microseconds around `median_us`. */
static int64_t latency_us(uint64_t *s, double median_us, double sigma) {
    double u1 = next_uniform(s), u2 = next_uniform(s);
    double z = sqrt(-2 * log(u1)) * cos(2 * M_PI * u2);
    return (int64_t)(median_us * exp(sigma * z));
}

static kiln_status write_json(const char *path) {
    kiln_strbuf b = {0};
    kiln_json j;
    kiln_json_init(&j, &b, 2);
    kiln_json_object_begin(&j);
    kiln_json_kv_string(&j, "quote_backslash", "say \"hi\" \\ bye");
    kiln_json_kv_string(&j, "controls", "a\nb\tc\rd\be\ff\x01g\x1fh");
    kiln_json_key(&j, "nul");
    kiln_json_string_n(&j, "x\0y", 3);
    kiln_json_kv_string(&j, "unicode", "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80 \xe2\x80\xa8");
    kiln_json_kv_string(&j, "invalid_utf8", "a\xff" "b\xc3" "c\xed\xa0\x80" "d");
    kiln_json_kv_number(&j, "nan", NAN);
    kiln_json_kv_number(&j, "inf", INFINITY);
    kiln_json_kv_number(&j, "neg_inf", -INFINITY);
    kiln_json_kv_number(&j, "tenth", 0.1);
    kiln_json_kv_number(&j, "big", 1e300);
    kiln_json_kv_number(&j, "tiny", 5e-324);
    kiln_json_kv_int(&j, "int_min", INT64_MIN);
    kiln_json_kv_bool(&j, "yes", true);
    kiln_json_kv_string(&j, "null_string", NULL);
    kiln_json_key(&j, "nested");
    kiln_json_array_begin(&j);
    kiln_json_array_begin(&j);
    kiln_json_array_end(&j);
    kiln_json_object_begin(&j);
    kiln_json_object_end(&j);
    kiln_json_int(&j, 1);
    kiln_json_null(&j);
    kiln_json_array_end(&j);
    kiln_json_object_end(&j);
    kiln_status s = kiln_json_finish(&j);
    if (s == KILN_OK) s = kiln_strbuf_write_file(&b, path);
    kiln_strbuf_free(&b);
    return s;
}

static kiln_status write_csv(const char *path) {
    kiln_strbuf b = {0};
    kiln_csv c;
    kiln_csv_init(&c, &b);
    const char *header[] = {"name", "value", "note"};
    kiln_csv_row(&c, header, 3);
    kiln_csv_string(&c, "plain");
    kiln_csv_number(&c, 1.5);
    kiln_csv_string(&c, "a,b");
    kiln_csv_end_row(&c);
    kiln_csv_string(&c, "say \"x\"");
    kiln_csv_number(&c, NAN);
    kiln_csv_string(&c, "two\nlines");
    kiln_csv_end_row(&c);
    kiln_csv_string(&c, " padded ");
    kiln_csv_int(&c, -42);
    kiln_csv_string(&c, NULL);
    kiln_csv_end_row(&c);
    kiln_status s = kiln_strbuf_write_file(&b, path);
    kiln_strbuf_free(&b);
    return s;
}

/* The HTML sample: two latency histograms (runs A and B), charts of every kind, tables. */
static kiln_status write_html(kiln_report *r, kiln_hist *a, kiln_hist *b, const char *path) {
    uint64_t seed = 0x9e3779b97f4a7c15ULL;
    for (int i = 0; i < 20000; i++) kiln_hist_record(a, latency_us(&seed, 2000, 0.5));
    for (int i = 0; i < 20000; i++) kiln_hist_record(b, latency_us(&seed, 1500, 0.9));
    KILN_TRY(kiln_report_heading(r, "Configuration <with markup & \"quotes\">"));
    KILN_TRY(kiln_report_kv(r, "server", "http://127.0.0.1:8000/v1 (not contacted: synthetic data)"));
    KILN_TRY(kiln_report_kv_printf(r, "requests", "%lld + %lld", (long long)kiln_hist_count(a),
                                   (long long)kiln_hist_count(b)));
    KILN_TRY(kiln_report_kv(r, "percentiles", KILN_SUMMARY_PERCENTILE_METHOD));
    KILN_TRY(kiln_report_heading(r, "Latency"));
    const char *hdr[] = {"run", "p50 (ms)", "p90 (ms)", "p99 (ms)", "p99.9 (ms)", "max (ms)"};
    KILN_TRY(kiln_report_table_begin(r, "Latency percentiles (HdrHistogram, 3 digits)", 6, hdr));
    kiln_hist *runs[2] = {a, b};
    const double ps[4] = {50, 90, 99, 99.9};
    for (int k = 0; k < 2; k++) {
        char cell[5][32];
        const char *cells[6] = {k ? "B" : "A"};
        for (int i = 0; i < 4; i++) {
            snprintf(cell[i], sizeof cell[i], "%.3f", kiln_hist_value_at_percentile(runs[k], ps[i]) / 1e3);
            cells[i + 1] = cell[i];
        }
        snprintf(cell[4], sizeof cell[4], "%.3f", kiln_hist_max(runs[k]) / 1e3);
        cells[5] = cell[4];
        KILN_TRY(kiln_report_table_row(r, cells));
    }
    KILN_TRY(kiln_report_table_end(r));
    kiln_chart hc = {.id = "latency-hist", .title = "Latency histogram (run A)", .x_label = "latency (ms)",
                     .y_label = "requests", .log_x = true};
    KILN_TRY(kiln_report_histogram_of(r, &hc, a, 40, 1e-3));
    /* The CDF of both runs, from the histograms' percentile points. */
    double pct[2][400], val[2][400];
    int64_t raw[400];
    kiln_series cdf[2];
    for (int k = 0; k < 2; k++) {
        int n = kiln_hist_percentile_points(runs[k], 5, pct[k], raw, 400);
        for (int i = 0; i < n; i++) val[k][i] = raw[i] / 1e3;
        cdf[k] = (kiln_series){k ? "run B" : "run A", pct[k], val[k], (size_t)n};
    }
    kiln_chart cc = {.id = "latency-cdf", .title = "Latency by percentile", .x_label = "percentile",
                     .y_label = "latency (ms)", .log_x = true};
    KILN_TRY(kiln_report_cdf(r, &cc, cdf, 2));
    kiln_chart lc = {.id = "linear-cdf", .title = "Latency by percentile (linear)", .x_label = "percentile",
                     .y_label = "latency (ms)"};
    KILN_TRY(kiln_report_cdf_of(r, &lc, a, "run A", 1e-3));
    KILN_TRY(kiln_report_heading(r, "Over time"));
    double t[60], y[3][60];
    for (int i = 0; i < 60; i++) {
        t[i] = i;
        y[0][i] = 1000 + 80 * sin(i / 5.0);
        y[1][i] = 950 + 60 * cos(i / 7.0);
        y[2][i] = i < 30 ? 1000 : 700 + 3 * i;
    }
    kiln_series ts[3] = {{"sent (req/s)", t, y[0], 60}, {"completed (req/s)", t, y[1], 60},
                         {"target (req/s)", t, y[2], 60}};
    kiln_chart tc = {.id = "throughput", .title = "Throughput", .x_label = "time (s)", .y_label = "req/s"};
    KILN_TRY(kiln_report_line_chart(r, &tc, ts, 3));
    double qps[6] = {100, 200, 400, 800, 1600, 3200}, lat[2][6];
    for (int i = 0; i < 6; i++) {
        lat[0][i] = 2.0 + 0.001 * qps[i] + (i == 5 ? 40 : 0);
        lat[1][i] = 3.0 + 0.004 * qps[i];
    }
    kiln_series sw[2] = {{"p50", qps, lat[0], 6}, {"p99", qps, lat[1], 6}};
    kiln_chart sc = {.id = "sweep", .title = "Latency vs offered load", .x_label = "offered load (req/s)",
                     .y_label = "latency (ms)", .log_x = true};
    KILN_TRY(kiln_report_scatter(r, &sc, sw, 2, true));
    KILN_TRY(kiln_report_heading(r, "Per-layer times"));
    const char *layers[12];
    char names[12][32];
    double ms[12];
    for (int i = 0; i < 12; i++) {
        snprintf(names[i], sizeof names[i], "conv%d + relu", i);
        layers[i] = names[i];
        ms[i] = 0.05 + 0.4 * next_uniform(&seed);
    }
    kiln_chart bc = {.id = "layers", .title = "Mean time per layer", .x_label = "time (ms)"};
    KILN_TRY(kiln_report_bar_chart(r, &bc, layers, ms, 12));
    const char *lh[] = {"layer", "time (ms)"};
    KILN_TRY(kiln_report_table_begin(r, NULL, 2, lh));
    for (int i = 0; i < 12; i++) {
        char v[32];
        snprintf(v, sizeof v, "%.4f", ms[i]);
        const char *row[2] = {layers[i], v};
        KILN_TRY(kiln_report_table_row(r, row));
    }
    KILN_TRY(kiln_report_table_end(r));
    kiln_hist_bin bins[10];
    for (int i = 0; i < 10; i++) bins[i] = (kiln_hist_bin){i * 0.5, (i + 1) * 0.5, (i * 7) % 10};
    kiln_chart sh = {.id = "small-hist", .title = "A linear histogram", .x_label = "ms", .y_label = "count"};
    KILN_TRY(kiln_report_histogram(r, &sh, bins, 10));
    KILN_TRY(kiln_report_kv(r, "written by", "tests/unit/report_sample.c"));
    return kiln_report_write_html(r, path);
}

kiln_status kiln_test_write_sample(const char *dir) {
    char path[4096];
    snprintf(path, sizeof path, "%s/sample.json", dir);
    KILN_TRY(write_json(path));
    snprintf(path, sizeof path, "%s/sample.csv", dir);
    KILN_TRY(write_csv(path));
    snprintf(path, sizeof path, "%s/sample.html", dir);
    kiln_report *r = NULL;
    kiln_hist *a = NULL, *b = NULL;
    kiln_status s = kiln_report_create("kiln report sample <&>", &r);
    if (s == KILN_OK) s = kiln_hist_create(1, 3600LL * 1000 * 1000, 3, &a);
    if (s == KILN_OK) s = kiln_hist_create_like(a, &b);
    if (s == KILN_OK) s = write_html(r, a, b, path);
    kiln_hist_free(a);
    kiln_hist_free(b);
    kiln_report_free(r);
    return s;
}
