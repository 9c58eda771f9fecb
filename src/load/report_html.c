/* report_html.c — kiln load's self-contained HTML report (through stats/report.h): the run's
 * settings, a table of steps, throughput against latency across a sweep, latency CDFs, TTFT and
 * inter-token latency histograms, request rate and latency over time (all steps end to end), server
 * GPU utilization when scraped, and errors. Chart element ids are stable for tests:
 * throughput-latency, e2e-cdf, ttft-cdf, ttft-histogram, itl-histogram, e2e-histogram,
 * rate-over-time, latency-over-time, server-metrics. */
#include "load/load.h"

#include "core/status.h"
#include "stats/report.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Percentile p of histogram h in ms as text ("" when empty). */
static void pct_cell(char *buf, size_t cap, const kiln_hist *h, double p) {
    if (kiln_hist_count(h)) snprintf(buf, cap, "%.3f", (double)kiln_load_pct_us(h, p) / 1e3);
    else buf[0] = '\0';
}

/* "rate 20/s" or "concurrency 4". */
static void step_name(const kiln_load_step *s, char *buf, size_t cap) {
    if (s->open_loop) snprintf(buf, cap, "rate %g/s", s->rate);
    else snprintf(buf, cap, "concurrency %d", s->concurrency);
}

/* The table of steps (token columns for the OpenAI APIs, the verdict with an SLO). */
static kiln_status steps_table(kiln_report *rp, const kiln_load_config *c, const kiln_load_result *r) {
    static const char *const H[] = {"step", "load", "scheduled/s", "completed/s", "ok", "failed", "late", "e2e p50 ms", "e2e p99 ms",
                                    "ttft p99 ms", "itl p99 ms", "tpot p99 ms", "output tok/s", "goodput %", "SLO"};
    enum { NC = sizeof H / sizeof H[0] };
    bool llm = c->api == KILN_LOAD_API_OPENAI_CHAT || c->api == KILN_LOAD_API_OPENAI_COMPLETIONS;
    bool keep[NC];
    const char *head[NC];
    int nk = 0;
    for (int k = 0; k < NC; k++) {
        keep[k] = (llm || k < 9 || k > 12) && (k != 14 || kiln_load_has_slo(c));
        if (keep[k]) head[nk++] = H[k];
    }
    KILN_TRY(kiln_report_table_begin(rp, "one row per measured window", nk, head));
    for (int i = 0; i < r->nsteps; i++) {
        const kiln_load_step *s = &r->steps[i];
        kiln_load_rates rt;
        kiln_load_step_rates(s, &rt);
        char cells[NC][48];
        const char *row[NC];
        snprintf(cells[0], 48, "%d", i + 1);
        step_name(s, cells[1], 48);
        snprintf(cells[2], 48, "%.2f", rt.scheduled);
        snprintf(cells[3], 48, "%.2f", rt.completed);
        snprintf(cells[4], 48, "%lld", (long long)s->ok);
        snprintf(cells[5], 48, "%lld", (long long)s->failed);
        snprintf(cells[6], 48, "%lld", (long long)s->late);
        pct_cell(cells[7], 48, s->hist[KILN_METRIC_E2E], 50);
        pct_cell(cells[8], 48, s->hist[KILN_METRIC_E2E], 99);
        pct_cell(cells[9], 48, s->hist[KILN_METRIC_TTFT], 99);
        pct_cell(cells[10], 48, s->hist[KILN_METRIC_ITL], 99);
        pct_cell(cells[11], 48, s->hist[KILN_METRIC_TPOT], 99);
        snprintf(cells[12], 48, "%.1f", rt.out_tokens);
        snprintf(cells[13], 48, "%.2f", kiln_load_step_goodput(s) * 100);
        snprintf(cells[14], 48, "%s", kiln_load_has_slo(c) ? (kiln_load_step_meets_slo(c, s) ? "met" : "not met") : "");
        int j = 0;
        for (int k = 0; k < NC; k++)
            if (keep[k]) row[j++] = cells[k];
        KILN_TRY(kiln_report_table_row(rp, row));
    }
    return kiln_report_table_end(rp);
}

/* Throughput (completed req/s) against e2e p50/p99 and TTFT p99 across the steps of a sweep. */
static kiln_status sweep_chart(kiln_report *rp, const kiln_load_config *c, const kiln_load_result *r, double *buf) {
    int n = r->nsteps;
    double *x = buf, *p50 = buf + n, *p99 = buf + 2 * n, *ttft = buf + 3 * n;
    for (int i = 0; i < n; i++) {
        kiln_load_rates rt;
        kiln_load_step_rates(&r->steps[i], &rt);
        x[i] = rt.completed;
        p50[i] = (double)kiln_load_pct_us(r->steps[i].hist[KILN_METRIC_E2E], 50) / 1e3;
        p99[i] = (double)kiln_load_pct_us(r->steps[i].hist[KILN_METRIC_E2E], 99) / 1e3;
        ttft[i] = (double)kiln_load_pct_us(r->steps[i].hist[KILN_METRIC_TTFT], 99) / 1e3;
    }
    kiln_series s[3] = {{"e2e p50", x, p50, (size_t)n}, {"e2e p99", x, p99, (size_t)n}, {"ttft p99", x, ttft, (size_t)n}};
    kiln_chart ch = {.id = "throughput-latency", .title = "Throughput vs latency across the sweep", .x_label = "completed requests/s",
                     .y_label = "latency (ms, log scale)", .log_y = true};
    KILN_TRY(kiln_report_heading(rp, "Throughput vs latency"));
    return kiln_report_scatter(rp, &ch, s, c->stream ? 3 : 2, true);
}

/* CDF of one metric, one series per step. */
static kiln_status cdf_chart(kiln_report *rp, const kiln_load_result *r, kiln_load_metric m, const char *id, const char *title) {
    int n = r->nsteps;
    kiln_series *s = calloc((size_t)n, sizeof *s);
    double *pct = malloc((size_t)n * 256 * sizeof *pct), *val = malloc((size_t)n * 256 * sizeof *val);
    int64_t raw[256];
    char (*names)[48] = malloc((size_t)n * sizeof *names);
    kiln_status st = s && pct && val && names ? KILN_OK : kiln_error(KILN_ERR_OUT_OF_MEMORY, "out of memory");
    size_t ns = 0;
    for (int i = 0; st == KILN_OK && i < n; i++) {
        int k = kiln_hist_percentile_points(r->steps[i].hist[m], 5, pct + i * 256, raw, 256);
        if (k == 0) continue;
        int64_t max = kiln_hist_max(r->steps[i].hist[m]);
        for (int q = 0; q < k; q++) val[i * 256 + q] = (double)(raw[q] < max ? raw[q] : max) / 1e3;
        step_name(&r->steps[i], names[i], 48);
        s[ns++] = (kiln_series){n > 1 ? names[i] : NULL, pct + i * 256, val + i * 256, (size_t)k};
    }
    kiln_chart ch = {.id = id, .title = title, .x_label = "percentile", .y_label = "latency (ms, log scale)", .log_x = true,
                     .log_y = true};
    if (st == KILN_OK && ns > 0) st = kiln_report_cdf(rp, &ch, s, ns);
    free(s);
    free(pct);
    free(val);
    free(names);
    return st;
}

/* Requests per second and latency per second over all steps, end to end; GPU utilization. */
static kiln_status time_charts(kiln_report *rp, const kiln_load_result *r) {
    int total = 0, nsc = 0;
    for (int i = 0; i < r->nsteps; i++) {
        total += r->steps[i].nticks;
        nsc += r->steps[i].nscrapes;
    }
    if (total == 0) return KILN_OK;
    double *v = malloc((size_t)(total * 6 + nsc * 3 + 1) * sizeof *v);
    if (!v) return kiln_error(KILN_ERR_OUT_OF_MEMORY, "out of memory");
    double *t = v, *sent = v + total, *ok = v + 2 * total, *fail = v + 3 * total, *mean = v + 4 * total, *max = v + 5 * total;
    double *st = v + 6 * total, *gm = st + nsc, *gx = gm + nsc;
    int k = 0, q = 0;
    double offset = 0;
    for (int i = 0; i < r->nsteps; i++) {
        const kiln_load_step *s = &r->steps[i];
        for (int j = 0; j < s->nticks; j++, k++) {
            const kiln_load_tick *tk = &s->ticks[j];
            t[k] = offset + j + 0.5;
            sent[k] = (double)tk->sent;
            ok[k] = (double)tk->ok;
            fail[k] = (double)tk->failed;
            mean[k] = tk->ok ? tk->e2e_sum_us / (double)tk->ok / 1e3 : NAN;
            max[k] = tk->ok ? (double)tk->e2e_max_us / 1e3 : NAN;
        }
        for (int j = 0; j < s->nscrapes; j++, q++) {
            st[q] = offset + s->scrapes[j].t_s;
            gm[q] = s->scrapes[j].mean;
            gx[q] = s->scrapes[j].max;
        }
        offset += s->nticks;
    }
    kiln_series rate[3] = {{"sent/s", t, sent, (size_t)total}, {"ok/s", t, ok, (size_t)total}, {"failed/s", t, fail, (size_t)total}};
    kiln_series lat[2] = {{"e2e mean", t, mean, (size_t)total}, {"e2e max", t, max, (size_t)total}};
    kiln_series gpu[2] = {{"mean", st, gm, (size_t)nsc}, {"max", st, gx, (size_t)nsc}};
    kiln_chart c1 = {.id = "rate-over-time", .title = "Requests per second (warm-up included; steps end to end)", .x_label = "time (s)",
                     .y_label = "requests/s"};
    kiln_chart c2 = {.id = "latency-over-time", .title = "End-to-end latency by completion second", .x_label = "time (s)",
                     .y_label = "latency (ms)"};
    kiln_chart c3 = {.id = "server-metrics", .title = "Server metric (GPU utilization) from /metrics", .x_label = "time (s)", .y_label = "value"};
    kiln_status s = kiln_report_heading(rp, "Over time");
    if (s == KILN_OK) s = kiln_report_line_chart(rp, &c1, rate, 3);
    if (s == KILN_OK) s = kiln_report_line_chart(rp, &c2, lat, 2);
    if (s == KILN_OK && nsc > 0) s = kiln_report_line_chart(rp, &c3, gpu, 2);
    free(v);
    return s;
}

/* The errors table (kinds x steps), when anything failed. */
static kiln_status errors_table(kiln_report *rp, const kiln_load_result *r) {
    int64_t total = 0;
    for (int i = 0; i < r->nsteps; i++) total += r->steps[i].failed;
    if (!total) return KILN_OK;
    static const char *const H[] = {"step", "kind", "count", "first error"};
    KILN_TRY(kiln_report_heading(rp, "Errors"));
    KILN_TRY(kiln_report_table_begin(rp, "errors by kind", 4, H));
    for (int i = 0; i < r->nsteps; i++) {
        const kiln_load_step *s = &r->steps[i];
        bool first = true;
        for (int k = 0; k < KILN_LOADERR_COUNT; k++) {
            if (!s->err[k]) continue;
            char step[16], count[32];
            snprintf(step, sizeof step, "%d", i + 1);
            snprintf(count, sizeof count, "%lld", (long long)s->err[k]);
            const char *row[4] = {step, kiln_load_err_name((kiln_load_err)k), count, first ? s->first_error : ""};
            first = false;
            KILN_TRY(kiln_report_table_row(rp, row));
        }
    }
    return kiln_report_table_end(rp);
}

/* Whether a histogram's values span enough (over 20x) for a logarithmic axis. */
static bool wide(const kiln_hist *h) { return kiln_hist_max(h) > 20 * (kiln_hist_min(h) > 0 ? kiln_hist_min(h) : 1); }

/* Fills the report. */
static kiln_status build(kiln_report *rp, const kiln_load_config *c, const kiln_load_result *r) {
    KILN_TRY(kiln_report_kv(rp, "target", r->endpoint));
    KILN_TRY(kiln_report_kv_printf(rp, "api", "%s%s%s%s", kiln_load_api_name(c->api), c->stream ? ", streaming" : "", r->model[0] ? ", model " : "",
                                   r->model));
    KILN_TRY(kiln_report_kv(rp, "started (UTC)", r->started_at));
    KILN_TRY(kiln_report_kv_printf(rp, "windows", "%g s warm-up + %s per step; timeout %g s", c->warmup_s,
                                   c->duration_s > 0 ? "measured window" : "a fixed number of requests", c->timeout_s));
    if (c->api == KILN_LOAD_API_OPENAI_CHAT || c->api == KILN_LOAD_API_OPENAI_COMPLETIONS)
        KILN_TRY(kiln_report_kv(rp, "token counts", !strcmp(r->token_source, "usage") ? "from the server's usage" : r->token_source));
    if (r->have_capacity && r->capacity_step >= 0)
        KILN_TRY(kiln_report_kv_printf(rp, "capacity", "%.2f req/s per server within the SLO (goodput >= %g%%)", r->capacity_rate,
                                       c->goodput_share * 100));
    if (r->have_capacity && r->capacity_step >= 0 && c->target_rate > 0)
        KILN_TRY(kiln_report_kv_printf(rp, "servers for the target", "%d for %.2f req/s", r->servers_needed, c->target_rate));
    if (r->have_capacity && r->capacity_step < 0) KILN_TRY(kiln_report_kv(rp, "capacity", "no step met the SLO"));
    KILN_TRY(kiln_report_paragraph(rp, "Open-loop latencies are measured from each request's intended send time, so time spent waiting "
                                       "for a connection counts (no coordinated omission). Percentiles come from lossless log-linear "
                                       "histograms with 3 significant digits (HdrHistogram's definition)."));
    KILN_TRY(kiln_report_heading(rp, "Steps"));
    KILN_TRY(steps_table(rp, c, r));
    if (r->nsteps > 1) {
        double *buf = malloc((size_t)r->nsteps * 4 * sizeof *buf);
        if (!buf) return kiln_error(KILN_ERR_OUT_OF_MEMORY, "out of memory");
        kiln_status s = sweep_chart(rp, c, r, buf);
        free(buf);
        KILN_TRY(s);
    }
    KILN_TRY(kiln_report_heading(rp, "Latency distribution"));
    KILN_TRY(cdf_chart(rp, r, KILN_METRIC_E2E, "e2e-cdf", "End-to-end latency by percentile"));
    KILN_TRY(cdf_chart(rp, r, KILN_METRIC_TTFT, "ttft-cdf", "Time to first token by percentile"));
    const kiln_load_step *m = &r->steps[r->capacity_step >= 0 ? r->capacity_step : r->nsteps - 1];
    char title[160], name[48];
    step_name(m, name, sizeof name);
    kiln_chart h = {.x_label = "ms", .y_label = "requests"};
    if (kiln_hist_count(m->hist[KILN_METRIC_TTFT])) {
        snprintf(title, sizeof title, "Time to first token (%s)", name);
        h.id = "ttft-histogram", h.title = title, h.log_x = wide(m->hist[KILN_METRIC_TTFT]);
        KILN_TRY(kiln_report_histogram_of(rp, &h, m->hist[KILN_METRIC_TTFT], 40, 1e-3));
    }
    if (kiln_hist_count(m->hist[KILN_METRIC_ITL])) {
        snprintf(title, sizeof title, "Inter-token latency (%s)", name);
        h.id = "itl-histogram", h.title = title, h.y_label = "gaps", h.log_x = wide(m->hist[KILN_METRIC_ITL]);
        KILN_TRY(kiln_report_histogram_of(rp, &h, m->hist[KILN_METRIC_ITL], 40, 1e-3));
    }
    snprintf(title, sizeof title, "End-to-end latency (%s)", name);
    h.id = "e2e-histogram", h.title = title, h.y_label = "requests", h.log_x = wide(m->hist[KILN_METRIC_E2E]);
    KILN_TRY(kiln_report_histogram_of(rp, &h, m->hist[KILN_METRIC_E2E], 40, 1e-3));
    KILN_TRY(time_charts(rp, r));
    return errors_table(rp, r);
}

kiln_status kiln_load_write_html(const kiln_load_config *c, const kiln_load_result *r, const char *path) {
    kiln_report *rp;
    KILN_TRY(kiln_report_create("kiln load report", &rp));
    kiln_status s = build(rp, c, r);
    if (s == KILN_OK) s = kiln_report_write_html(rp, path);
    kiln_report_free(rp);
    return s;
}
