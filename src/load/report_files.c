/* report_files.c — kiln load's machine-readable results: the JSON document (configuration, per
 * step counts, rates, latency statistics in ms, percentile curves, errors, per-second series,
 * server metrics, capacity plan; `kiln load compare` reads it back) and the CSV (one row per step).
 * Latency statistics come from the lossless histograms: percentiles are HdrHistogram's
 * (value of rank ceil(p/100 N), reported as its bucket's highest equivalent, within 0.1 %). */
#include "load/load.h"

#include "kiln/kiln.h"
#include "stats/report.h"

#include <stdio.h>

#define JSON_FORMAT_VERSION 1

/* {"count", "min", "mean", "stddev", "p50"..."p99.9", "max"} in ms for one histogram. */
static void json_latency(kiln_json *j, const kiln_hist *h) {
    kiln_json_object_begin(j);
    kiln_json_kv_int(j, "count", kiln_hist_count(h));
    kiln_json_kv_number(j, "min", (double)kiln_hist_min(h) / 1e3);
    kiln_json_kv_number(j, "mean", kiln_hist_mean(h) / 1e3);
    kiln_json_kv_number(j, "stddev", kiln_hist_stddev(h) / 1e3);
    for (int i = 0; i < KILN_LOAD_NPCT; i++)
        kiln_json_kv_number(j, kiln_load_pct_names[i], (double)kiln_load_pct_us(h, kiln_load_pcts[i]) / 1e3);
    kiln_json_kv_number(j, "max", (double)kiln_hist_max(h) / 1e3);
    kiln_json_object_end(j);
}

/* [[percentile, ms], ...]: the HdrHistogram percentile distribution of a histogram. */
static void json_curve(kiln_json *j, const kiln_hist *h) {
    double pct[256];
    int64_t val[256];
    int n = kiln_hist_percentile_points(h, 5, pct, val, 256);
    kiln_json_array_begin(j);
    for (int i = 0; i < n; i++) {
        kiln_json_array_begin(j);
        kiln_json_number(j, pct[i]);
        kiln_json_number(j, (double)(val[i] < kiln_hist_max(h) ? val[i] : kiln_hist_max(h)) / 1e3);
        kiln_json_array_end(j);
    }
    kiln_json_array_end(j);
}

/* The configuration block. */
static void json_config(kiln_json *j, const kiln_load_config *c, const kiln_load_result *r) {
    char buf[96];
    kiln_json_key(j, "config");
    kiln_json_object_begin(j);
    kiln_json_kv_string(j, "url", c->url);
    kiln_json_kv_string(j, "endpoint", r->endpoint);
    kiln_json_kv_string(j, "api", kiln_load_api_name(c->api));
    kiln_json_kv_string(j, "transport", r->transport);
    kiln_json_kv_string(j, "model", r->model[0] ? r->model : NULL);
    kiln_json_kv_bool(j, "stream", c->stream);
    kiln_json_kv_string(j, "arrivals", c->poisson ? "poisson" : "constant");
    kiln_json_kv_number(j, "rate", c->rate);
    kiln_json_kv_int(j, "concurrency", c->concurrency);
    kiln_json_kv_int(j, "connections", c->connections);
    kiln_json_kv_int(j, "threads", c->threads);
    kiln_json_kv_number(j, "duration_s", c->duration_s);
    kiln_json_kv_int(j, "requests", c->requests);
    kiln_json_kv_number(j, "warmup_s", c->warmup_s);
    kiln_json_kv_number(j, "timeout_s", c->timeout_s);
    kiln_json_kv_int(j, "seed", (int64_t)c->seed);
    kiln_json_kv_string(j, "input_len", c->prompts_path ? NULL : kiln_len_dist_str(&c->input_len, buf, sizeof buf));
    kiln_json_kv_string(j, "output_len", kiln_len_dist_str(&c->output_len, buf, sizeof buf));
    kiln_json_kv_string(j, "prompts", c->prompts_path);
    kiln_json_kv_string(j, "sweep", c->sweep == KILN_SWEEP_RATE ? "rate" : c->sweep == KILN_SWEEP_CONCURRENCY ? "concurrency" : NULL);
    kiln_json_key(j, "slo_ms");
    kiln_json_object_begin(j);
    if (c->slo_ttft_us) kiln_json_kv_number(j, "ttft", (double)c->slo_ttft_us / 1e3);
    if (c->slo_tpot_us) kiln_json_kv_number(j, "tpot", (double)c->slo_tpot_us / 1e3);
    if (c->slo_itl_us) kiln_json_kv_number(j, "itl", (double)c->slo_itl_us / 1e3);
    if (c->slo_e2e_us) kiln_json_kv_number(j, "e2e", (double)c->slo_e2e_us / 1e3);
    kiln_json_object_end(j);
    kiln_json_kv_number(j, "goodput_share", c->goodput_share);
    kiln_json_kv_number(j, "target_rate", c->target_rate);
    kiln_json_kv_number(j, "late_threshold_ms", KILN_LOAD_LATE_US / 1e3);
    kiln_json_object_end(j);
}

/* Errors by kind and by HTTP status. */
static void json_errors(kiln_json *j, const kiln_load_step *s) {
    char code[16];
    kiln_json_key(j, "errors");
    kiln_json_object_begin(j);
    for (int k = 0; k < KILN_LOADERR_COUNT; k++) kiln_json_kv_int(j, kiln_load_err_name((kiln_load_err)k), s->err[k]);
    kiln_json_object_end(j);
    kiln_json_key(j, "status_codes");
    kiln_json_object_begin(j);
    for (int i = 0; i < 600; i++)
        if (s->status_counts[i]) {
            snprintf(code, sizeof code, "%d", i);
            kiln_json_kv_int(j, code, s->status_counts[i]);
        }
    kiln_json_object_end(j);
    kiln_json_kv_string(j, "first_error", s->first_error[0] ? s->first_error : NULL);
}

/* Per-second series and server metric scrapes. */
static void json_series(kiln_json *j, const kiln_load_step *s) {
    kiln_json_key(j, "timeline");
    kiln_json_array_begin(j);
    for (int i = 0; i < s->nticks; i++) {
        const kiln_load_tick *t = &s->ticks[i];
        kiln_json_object_begin(j);
        kiln_json_kv_int(j, "t_s", i);
        kiln_json_kv_int(j, "sent", t->sent);
        kiln_json_kv_int(j, "ok", t->ok);
        kiln_json_kv_int(j, "failed", t->failed);
        kiln_json_kv_number(j, "e2e_mean_ms", t->ok ? t->e2e_sum_us / (double)t->ok / 1e3 : 0);
        kiln_json_kv_number(j, "e2e_max_ms", (double)t->e2e_max_us / 1e3);
        kiln_json_kv_int(j, "out_tokens", t->out_tokens);
        kiln_json_object_end(j);
    }
    kiln_json_array_end(j);
    kiln_json_key(j, "server_metrics");
    kiln_json_array_begin(j);
    for (int i = 0; i < s->nscrapes; i++) {
        kiln_json_object_begin(j);
        kiln_json_kv_number(j, "t_s", s->scrapes[i].t_s);
        kiln_json_kv_number(j, "mean", s->scrapes[i].mean);
        kiln_json_kv_number(j, "max", s->scrapes[i].max);
        kiln_json_kv_int(j, "series", s->scrapes[i].nseries);
        kiln_json_object_end(j);
    }
    kiln_json_array_end(j);
    kiln_json_kv_int(j, "scrape_failures", s->scrape_failures);
}

/* One step. */
static void json_step(kiln_json *j, const kiln_load_config *c, const kiln_load_step *s) {
    kiln_load_rates rt;
    kiln_load_step_rates(s, &rt);
    kiln_json_object_begin(j);
    kiln_json_kv_string(j, "mode", s->open_loop ? "open" : "closed");
    kiln_json_kv_number(j, "rate", s->rate);
    kiln_json_kv_int(j, "concurrency", s->concurrency);
    kiln_json_kv_number(j, "warmup_s", s->warmup_s);
    kiln_json_kv_number(j, "window_s", s->window_s);
    kiln_json_kv_number(j, "elapsed_s", s->elapsed_s);
    kiln_json_kv_int(j, "scheduled", s->scheduled);
    kiln_json_kv_int(j, "sent", s->sent);
    kiln_json_kv_int(j, "ok", s->ok);
    kiln_json_kv_int(j, "failed", s->failed);
    kiln_json_kv_int(j, "late", s->late);
    kiln_json_kv_int(j, "warmup_requests", s->warmup_requests);
    kiln_json_kv_number(j, "scheduled_rate", rt.scheduled);
    kiln_json_kv_number(j, "sent_rate", rt.sent);
    kiln_json_kv_number(j, "completed_rate", rt.completed);
    kiln_json_kv_int(j, "good", s->good);
    kiln_json_kv_number(j, "goodput", kiln_load_step_goodput(s));
    kiln_json_kv_number(j, "goodput_rate", rt.good);
    kiln_json_key(j, "meets_slo");
    if (kiln_load_has_slo(c)) kiln_json_bool(j, kiln_load_step_meets_slo(c, s));
    else kiln_json_null(j);
    kiln_json_kv_int(j, "in_tokens", s->in_tokens);
    kiln_json_kv_int(j, "out_tokens", s->out_tokens);
    kiln_json_kv_number(j, "output_token_rate", rt.out_tokens);
    kiln_json_kv_int(j, "window_ok", s->window_ok);
    kiln_json_kv_number(j, "window_completed_rate", rt.window_completed);
    kiln_json_kv_int(j, "window_out_tokens", s->window_out_tokens);
    kiln_json_kv_number(j, "window_output_token_rate", rt.window_out_tokens);
    kiln_json_kv_int(j, "tokens_from_usage", s->tokens_from_usage);
    kiln_json_kv_int(j, "tokens_estimated", s->tokens_estimated);
    kiln_json_key(j, "latency_ms");
    kiln_json_object_begin(j);
    for (int m = 0; m < KILN_METRIC_COUNT; m++) {
        kiln_json_key(j, kiln_load_metric_name((kiln_load_metric)m));
        json_latency(j, s->hist[m]);
    }
    kiln_json_object_end(j);
    kiln_json_key(j, "percentile_curves_ms");
    kiln_json_object_begin(j);
    for (int m = 0; m < KILN_METRIC_COUNT; m++) {
        if (!kiln_hist_count(s->hist[m])) continue;
        kiln_json_key(j, kiln_load_metric_name((kiln_load_metric)m));
        json_curve(j, s->hist[m]);
    }
    kiln_json_object_end(j);
    json_errors(j, s);
    json_series(j, s);
    kiln_json_kv_bool(j, "stopped", s->stopped);
    kiln_json_kv_string(j, "stop_reason", s->stopped ? s->stop_reason : NULL);
    kiln_json_object_end(j);
}

kiln_status kiln_load_write_json(const kiln_load_config *c, const kiln_load_result *r, const char *path) {
    kiln_strbuf b = {0};
    kiln_json j;
    kiln_json_init(&j, &b, 1);
    kiln_json_object_begin(&j);
    kiln_json_kv_int(&j, "kiln_load_format", JSON_FORMAT_VERSION);
    kiln_json_kv_string(&j, "kiln_version", kiln_version());
    kiln_json_kv_string(&j, "started_at", r->started_at);
    kiln_json_kv_string(&j, "token_counts", r->token_source);
    kiln_json_kv_string(&j, "latency_unit", "ms");
    json_config(&j, c, r);
    kiln_json_key(&j, "steps");
    kiln_json_array_begin(&j);
    for (int i = 0; i < r->nsteps; i++) json_step(&j, c, &r->steps[i]);
    kiln_json_array_end(&j);
    kiln_json_key(&j, "capacity");
    if (!r->have_capacity) {
        kiln_json_null(&j);
    } else {
        kiln_json_object_begin(&j);
        kiln_json_kv_int(&j, "step", r->capacity_step);
        kiln_json_kv_number(&j, "rate_per_server", r->capacity_rate);
        kiln_json_kv_number(&j, "target_rate", c->target_rate);
        kiln_json_kv_int(&j, "servers_needed", r->servers_needed);
        kiln_json_object_end(&j);
    }
    kiln_json_object_end(&j);
    kiln_status s = kiln_json_finish(&j);
    if (s == KILN_OK) s = kiln_strbuf_write_file(&b, path);
    kiln_strbuf_free(&b);
    return s;
}

kiln_status kiln_load_write_csv(const kiln_load_config *c, const kiln_load_result *r, const char *path) {
    static const char *const HEAD[] = {"step", "mode", "rate", "concurrency", "window_s", "scheduled", "sent", "ok", "failed", "late",
                                       "scheduled_rate", "completed_rate", "goodput", "meets_slo", "output_token_rate",
                                       "window_output_token_rate"};
    static const kiln_load_metric MS[] = {KILN_METRIC_E2E, KILN_METRIC_TTFT, KILN_METRIC_ITL, KILN_METRIC_TPOT};
    kiln_strbuf b = {0};
    kiln_csv v;
    kiln_csv_init(&v, &b);
    for (size_t i = 0; i < sizeof HEAD / sizeof HEAD[0]; i++) kiln_csv_string(&v, HEAD[i]);
    char name[64];
    for (size_t m = 0; m < 4; m++) {
        for (int p = 0; p < KILN_LOAD_NPCT; p++) {
            snprintf(name, sizeof name, "%s_%s_ms", kiln_load_metric_name(MS[m]), kiln_load_pct_names[p]);
            kiln_csv_string(&v, name);
        }
        snprintf(name, sizeof name, "%s_max_ms", kiln_load_metric_name(MS[m]));
        kiln_csv_string(&v, name);
    }
    kiln_csv_end_row(&v);
    for (int i = 0; i < r->nsteps; i++) {
        const kiln_load_step *s = &r->steps[i];
        kiln_load_rates rt;
        kiln_load_step_rates(s, &rt);
        kiln_csv_int(&v, i + 1);
        kiln_csv_string(&v, s->open_loop ? "open" : "closed");
        kiln_csv_number(&v, s->rate);
        kiln_csv_int(&v, s->concurrency);
        kiln_csv_number(&v, s->window_s);
        kiln_csv_int(&v, s->scheduled);
        kiln_csv_int(&v, s->sent);
        kiln_csv_int(&v, s->ok);
        kiln_csv_int(&v, s->failed);
        kiln_csv_int(&v, s->late);
        kiln_csv_number(&v, rt.scheduled);
        kiln_csv_number(&v, rt.completed);
        kiln_csv_number(&v, kiln_load_step_goodput(s));
        kiln_csv_string(&v, kiln_load_has_slo(c) ? (kiln_load_step_meets_slo(c, s) ? "yes" : "no") : NULL);
        kiln_csv_number(&v, rt.out_tokens);
        kiln_csv_number(&v, rt.window_out_tokens);
        for (size_t m = 0; m < 4; m++) {
            const kiln_hist *h = s->hist[MS[m]];
            for (int p = 0; p < KILN_LOAD_NPCT; p++) {
                if (kiln_hist_count(h)) kiln_csv_number(&v, (double)kiln_load_pct_us(h, kiln_load_pcts[p]) / 1e3);
                else kiln_csv_string(&v, NULL);
            }
            if (kiln_hist_count(h)) kiln_csv_number(&v, (double)kiln_hist_max(h) / 1e3);
            else kiln_csv_string(&v, NULL);
        }
        kiln_csv_end_row(&v);
    }
    kiln_status s = kiln_strbuf_status(&b);
    if (s == KILN_OK) s = kiln_strbuf_write_file(&b, path);
    kiln_strbuf_free(&b);
    return s;
}
