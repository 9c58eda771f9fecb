/* bench_html.c — kiln bench --report FILE.html: one self-contained page (stats/report.h: inline SVG,
 * no script, no network). For one benchmark: the summary, environment, memory, roofline and diagnosis,
 * the latency histogram and CDF, latency over time, and the per-layer chart and table. For a sweep:
 * the comparison table and throughput against latency. Chart ids (stable, for tests): latency-hist,
 * latency-cdf, latency-over-time, layers, sweep-throughput-latency. */
#include "bench/bench_internal.h"

#include "core/status.h"
#include "stats/histogram.h"
#include "stats/report.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define MAX_POINTS 2000 /* latency-over-time: queries are averaged into at most this many points */
#define MAX_BARS 30     /* the layer chart shows the slowest layers */

static kiln_status stats_kv(kiln_report *rp, const char *label, const kiln_bench_stats *s) {
    if (!s->present) return kiln_report_kv(rp, label, "absent");
    return kiln_report_kv_printf(rp, label, "median %.4g ms, mean %.4g, min %.4g, max %.4g, p90 %.4g, p95 %.4g, p99 %.4g, p99.9 %.4g, stddev %.4g",
                                 s->s.median, s->s.mean, s->s.min, s->s.max, s->p90, s->p95, s->p99, s->p999, s->s.stddev);
}

static kiln_status summary(kiln_report *rp, const kiln_bench_doc *d) {
    const kiln_bench_result *r = d->res;
    char a[32], b[32], c[32], e[32];
    KILN_TRY(kiln_report_heading(rp, "Summary"));
    KILN_TRY(kiln_report_kv_printf(rp, "model", "%s (target %s, %s)", d->model_path, d->target, kiln_bench_precision_name(d->precision)));
    KILN_TRY(kiln_report_kv(rp, "device", d->device));
    KILN_TRY(kiln_report_kv(rp, "inputs", r->inputs));
    KILN_TRY(kiln_report_kv_printf(rp, "throughput", "%.4g qps, %.4g items/s (batch %lld)", r->qps, r->items_per_s, (long long)r->batch));
    KILN_TRY(stats_kv(rp, "latency", &r->latency));
    KILN_TRY(stats_kv(rp, "enqueue", &r->enqueue));
    KILN_TRY(stats_kv(rp, "H2D", &r->h2d));
    KILN_TRY(stats_kv(rp, d->env->gpu ? "GPU compute" : "compute (host)", &r->compute));
    KILN_TRY(stats_kv(rp, "D2H", &r->d2h));
    KILN_TRY(kiln_report_kv_printf(rp, "queries", "%zu measured over %.3f s, %lld warm-up", r->nqueries, r->walltime_s, (long long)r->warmup_queries));
    KILN_TRY(kiln_report_kv(rp, "percentile method", KILN_SUMMARY_PERCENTILE_METHOD));
    KILN_TRY(kiln_report_kv_printf(rp, "memory", "weights %s, activations %s, workspace %s, staging %s (%s)",
                                   kiln_bench_bytes_text((double)r->mem.weights, a, 32), kiln_bench_bytes_text((double)r->mem.activations, b, 32),
                                   kiln_bench_bytes_text((double)r->mem.workspace, c, 32), kiln_bench_bytes_text((double)r->mem.staging, e, 32),
                                   r->mem.device ? "device" : "host"));
    KILN_TRY(kiln_report_kv_printf(rp, "work per query", "%.4g GFLOP, %s touched (estimate)", r->flops / 1e9, kiln_bench_bytes_text(r->bytes, a, 32)));
    if (d->diag->achieved_gbps >= 0)
        KILN_TRY(kiln_report_kv_printf(rp, "achieved", "%.2f GB/s, %.4f TFLOP/s", d->diag->achieved_gbps, d->diag->achieved_tflops));
    KILN_TRY(kiln_report_heading(rp, "Diagnosis"));
    KILN_TRY(kiln_report_paragraph(rp, d->diag->text));
    for (int i = 0; i < d->diag->nwarnings; i++) KILN_TRY(kiln_report_paragraph(rp, d->diag->warnings[i]));
    return KILN_OK;
}

static kiln_status environment(kiln_report *rp, const kiln_bench_doc *d) {
    const kiln_bench_env *env = d->env;
    KILN_TRY(kiln_report_heading(rp, "Environment"));
    KILN_TRY(kiln_report_kv_printf(rp, "CPU", "%s, %d threads", env->cpu_model, env->cpu_threads));
    KILN_TRY(kiln_report_kv_printf(rp, "host", "%s, %s", env->host, env->os));
    if (!env->gpu) return kiln_report_kv(rp, "GPU", "absent");
    KILN_TRY(kiln_report_kv_printf(rp, "GPU", "%s (%s)", env->gpu_name[0] ? env->gpu_name : "absent", env->gpu_arch));
    KILN_TRY(kiln_report_kv_printf(rp, "versions", "driver %s, CUDA %s / runtime %s, cuBLASLt %s, cuDNN %s", env->driver[0] ? env->driver : "absent",
                                   env->cuda_driver, env->cuda_runtime, env->cublas, env->cudnn));
    const kiln_gpu_sample *s[2] = {&env->before, &env->after};
    for (int i = 0; i < 2; i++) {
        if (!s[i]->valid) {
            KILN_TRY(kiln_report_kv(rp, i ? "after" : "before", "absent (no NVML)"));
            continue;
        }
        char thr[256];
        kiln_bench_throttle_text(s[i]->throttle, thr, sizeof thr);
        KILN_TRY(kiln_report_kv_printf(rp, i ? "after" : "before", "SM %.0f MHz, memory %.0f MHz, %.1f W, %.0f C, throttle: %s", s[i]->sm_mhz,
                                       s[i]->mem_mhz, s[i]->power_w, s[i]->temp_c, thr));
    }
    return KILN_OK;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Histogram, CDF and latency over time. */
static kiln_status latency_charts(kiln_report *rp, const kiln_bench_result *r) {
    size_t n = r->nqueries;
    if (!n) return KILN_OK;
    kiln_hist *h = NULL;
    KILN_TRY(kiln_hist_create(1, (int64_t)3600 * 1000000, 3, &h));
    for (size_t i = 0; i < n; i++) kiln_hist_record(h, (int64_t)llround(r->queries[i].latency_ms * 1e3));
    size_t npts = n < MAX_POINTS ? n : MAX_POINTS;
    double *v = malloc((3 * n + 3 * npts + 64) * sizeof *v);
    kiln_status s = v ? KILN_OK : kiln_error(KILN_ERR_OUT_OF_MEMORY, "out of memory");
    if (s == KILN_OK) {
        bool wide = kiln_hist_max(h) > 20 * (kiln_hist_min(h) > 0 ? kiln_hist_min(h) : 1); /* a log axis shows the tail */
        kiln_chart ch = {.id = "latency-hist", .title = "Latency histogram", .x_label = wide ? "latency (ms, log scale)" : "latency (ms)",
                         .y_label = "queries", .log_x = wide};
        s = kiln_report_heading(rp, "Latency");
        if (s == KILN_OK) s = kiln_report_histogram_of(rp, &ch, h, 40, 1e-3);
    }
    if (s == KILN_OK) { /* exact CDF from the sorted latencies */
        double *sorted = v, *pct = v + n, *val = v + 2 * n;
        for (size_t i = 0; i < n; i++) sorted[i] = r->queries[i].latency_ms;
        qsort(sorted, n, sizeof *sorted, cmp_double);
        size_t k = 0;
        for (size_t i = 0; i < npts; i++) {
            size_t idx = npts == 1 ? 0 : i * (n - 1) / (npts - 1);
            pct[k] = 100.0 * (double)(idx + 1) / (double)n;
            val[k++] = sorted[idx];
        }
        kiln_series se = {"latency", pct, val, k};
        kiln_chart ch = {.id = "latency-cdf", .title = "Latency percentiles", .x_label = "percentile", .y_label = "latency (ms)", .log_x = true};
        s = kiln_report_cdf(rp, &ch, &se, 1);
    }
    if (s == KILN_OK) { /* mean and max latency per group of consecutive queries */
        double *t = v + 3 * n, *mean = t + npts, *max = mean + npts;
        size_t per = (n + npts - 1) / npts, k = 0;
        for (size_t i = 0; i < n; i += per, k++) {
            double sum = 0, mx = 0;
            size_t end = i + per < n ? i + per : n;
            for (size_t q = i; q < end; q++) {
                sum += r->queries[q].latency_ms;
                mx = r->queries[q].latency_ms > mx ? r->queries[q].latency_ms : mx;
            }
            t[k] = r->queries[i].start_ms / 1e3;
            mean[k] = sum / (double)(end - i);
            max[k] = mx;
        }
        kiln_series se[2] = {{"mean", t, mean, k}, {"max", t, max, k}};
        kiln_chart ch = {.id = "latency-over-time", .title = "Latency over time", .x_label = "time (s)", .y_label = "latency (ms)"};
        s = kiln_report_line_chart(rp, &ch, se, 2);
    }
    free(v);
    kiln_hist_free(h);
    return s;
}

static int by_time_desc(const void *a, const void *b) {
    double x = (*(const kiln_bench_layer *const *)a)->ms, y = (*(const kiln_bench_layer *const *)b)->ms;
    return (x < y) - (x > y);
}

/* The slowest layers as bars, then every layer in a table. */
static kiln_status layer_section(kiln_report *rp, const kiln_bench_result *r) {
    const kiln_bench_layer **order = malloc(((size_t)r->nlayers + 1) * sizeof *order);
    const char **labels = malloc((MAX_BARS + 1) * sizeof *labels);
    double *vals = malloc((MAX_BARS + 1) * sizeof *vals);
    kiln_status s = order && labels && vals ? KILN_OK : kiln_error(KILN_ERR_OUT_OF_MEMORY, "out of memory");
    size_t nt = 0;
    for (int i = 0; s == KILN_OK && i < r->nlayers; i++)
        if (r->layers[i].ms >= 0) order[nt++] = &r->layers[i];
    if (s == KILN_OK) qsort(order, nt, sizeof *order, by_time_desc);
    size_t nb = nt < MAX_BARS ? nt : MAX_BARS;
    for (size_t i = 0; i < nb; i++) {
        labels[i] = order[i]->name;
        vals[i] = order[i]->ms;
    }
    if (s == KILN_OK) s = kiln_report_heading(rp, "Layers");
    kiln_chart ch = {.id = "layers", .title = "Slowest layers (mean time per query)", .x_label = "time (ms)"};
    if (s == KILN_OK && nb) s = kiln_report_bar_chart(rp, &ch, labels, vals, nb);
    static const char *const H[] = {"layer", "op", "tactic", "precision", "time ms", "share %", "GB/s", "TFLOP/s"};
    if (s == KILN_OK) s = kiln_report_table_begin(rp, "every layer, in execution order", 8, H);
    for (int i = 0; s == KILN_OK && i < r->nlayers; i++) {
        const kiln_bench_layer *l = &r->layers[i];
        char ms[32] = "", sh[32] = "", gb[32] = "", tf[32] = "";
        if (l->ms >= 0) {
            snprintf(ms, sizeof ms, "%.4f", l->ms);
            snprintf(sh, sizeof sh, "%.1f", 100 * l->share);
        }
        if (l->ms > 0) {
            snprintf(gb, sizeof gb, "%.2f", l->bytes / (l->ms * 1e-3) / 1e9);
            snprintf(tf, sizeof tf, "%.4f", l->flops / (l->ms * 1e-3) / 1e12);
        }
        const char *row[8] = {l->name, l->op, l->tactic, l->precision, ms, sh, gb, tf};
        s = kiln_report_table_row(rp, row);
    }
    if (s == KILN_OK) s = kiln_report_table_end(rp);
    free(order);
    free(labels);
    free(vals);
    return s;
}

static kiln_status sweep_section(kiln_report *rp, const kiln_bench_sweep *sw) {
    static const char *const H[] = {"precision", "batch", "streams", "status", "build s", "engine MB", "qps", "items/s", "p50 ms",
                                    "p95 ms", "p99 ms", "memory MB", "GPU util %", "max abs err", "max rel err", "cosine",
                                    "top-1"};
    KILN_TRY(kiln_report_heading(rp, "Sweep"));
    KILN_TRY(kiln_report_table_begin(rp, "one row per configuration", 17, H));
    double x[KILN_BENCH_SWEEP_MAX], p50[KILN_BENCH_SWEEP_MAX], p99[KILN_BENCH_SWEEP_MAX];
    size_t np = 0;
    for (int i = 0; i < sw->nrows; i++) {
        const kiln_bench_sweep_row *r = &sw->rows[i];
        char c[17][64] = {{0}};
        snprintf(c[0], 64, "%s", kiln_bench_precision_name(r->precision));
        snprintf(c[1], 64, "%lld", (long long)r->batch);
        snprintf(c[2], 64, "%d", r->streams);
        snprintf(c[3], 64, "%.63s", r->error[0] ? r->error : "ok");
        if (!r->error[0]) {
            if (r->build_s >= 0) snprintf(c[4], 64, "%.2f", r->build_s);
            if (r->engine_bytes >= 0) snprintf(c[5], 64, "%.2f", (double)r->engine_bytes / 1e6);
            snprintf(c[6], 64, "%.1f", r->qps);
            snprintf(c[7], 64, "%.1f", r->items_per_s);
            snprintf(c[8], 64, "%.4f", r->p50_ms);
            snprintf(c[9], 64, "%.4f", r->p95_ms);
            snprintf(c[10], 64, "%.4f", r->p99_ms);
            snprintf(c[11], 64, "%.2f", r->memory_mb);
            snprintf(c[12], 64, "%s", r->gpu_util_pct >= 0 ? "" : "absent");
            if (r->gpu_util_pct >= 0) snprintf(c[12], 64, "%.0f", r->gpu_util_pct);
            if (!isnan(r->max_abs_err)) snprintf(c[13], 64, "%.3g", r->max_abs_err);
            if (!isnan(r->max_rel_err)) snprintf(c[14], 64, "%.3g", r->max_rel_err);
            if (!isnan(r->cosine)) snprintf(c[15], 64, "%.6f", r->cosine);
            if (r->top1_rows > 0) snprintf(c[16], 64, "%lld/%lld", (long long)r->top1, (long long)r->top1_rows);
            x[np] = r->items_per_s;
            p50[np] = r->p50_ms;
            p99[np++] = r->p99_ms;
        }
        const char *row[17];
        for (int k = 0; k < 17; k++) row[k] = c[k];
        KILN_TRY(kiln_report_table_row(rp, row));
    }
    KILN_TRY(kiln_report_table_end(rp));
    if (!np) return KILN_OK;
    kiln_series s[2] = {{"p50", x, p50, np}, {"p99", x, p99, np}};
    kiln_chart ch = {.id = "sweep-throughput-latency", .title = "Throughput vs latency across the sweep", .x_label = "items/s",
                     .y_label = "latency (ms)"};
    return kiln_report_scatter(rp, &ch, s, 2, false);
}

kiln_status kiln_bench_write_html(const kiln_bench_doc *d, const char *path) {
    kiln_report *rp = NULL;
    char title[512];
    snprintf(title, sizeof title, "kiln bench: %s", d->model_path);
    KILN_TRY(kiln_report_create(title, &rp));
    kiln_status s;
    if (d->sweep) {
        s = sweep_section(rp, d->sweep);
        if (s == KILN_OK) s = environment(rp, d);
    } else {
        s = summary(rp, d);
        if (s == KILN_OK) s = environment(rp, d);
        if (s == KILN_OK) s = latency_charts(rp, d->res);
        if (s == KILN_OK) s = layer_section(rp, d->res);
    }
    if (s == KILN_OK) s = kiln_report_write_html(rp, path);
    kiln_report_free(rp);
    return s;
}
