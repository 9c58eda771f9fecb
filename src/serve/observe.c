/* observe.c — what operators see: GET /metrics (the request counters and histograms, then live
 * gauges read from every loaded version: queue depth, instances, LLM running/waiting requests and
 * KV-cache use, engine-loop heartbeat; NVML GPU gauges where present), the readiness rule behind
 * /v2/health/ready, and the status page at / (plain HTML with inline SVG, no external assets). */
#include "serve/http.h"

#include <stdlib.h>
#include <stddef.h>
#include <string.h>
#include <time.h>

/* An LLM engine loop with work that has not gone round for this long is taken for hung. */
#define HEARTBEAT_LIMIT_MS 30000.0

typedef struct version_view {
    char labels[400];
    char model[SERVE_NAME_MAX];
    int64_t number;
    bool llm;
    serve_pool_stats pool;
    kiln_llm_stats llm_stats;            /* summed over its devices' LLMs */
    int n_llms;
    int llm_devices[SERVE_MAX_DEVICES];
    kiln_llm_stats llm_device[SERVE_MAX_DEVICES]; /* each device's LLM */
} version_view;

/* Sums the LLM statistics the pages show (heartbeat age: the oldest) of v's devices into v->llm_stats. */
static void sum_llm_stats(version_view *v) {
    kiln_llm_stats *t = &v->llm_stats;
    for (int k = 0; k < v->n_llms; k++) {
        const kiln_llm_stats *d = &v->llm_device[k];
        t->running += d->running;
        t->waiting += d->waiting;
        t->kv_blocks_used += d->kv_blocks_used;
        t->kv_blocks_total += d->kv_blocks_total;
        t->preemptions += d->preemptions;
        t->prefix_cache_queries += d->prefix_cache_queries;
        t->prefix_cache_hits += d->prefix_cache_hits;
        t->spec_steps += d->spec_steps;
        t->spec_drafted += d->spec_drafted;
        t->spec_accepted += d->spec_accepted;
        t->spec_emitted += d->spec_emitted;
        if (d->running + d->waiting > 0 && d->ms_since_heartbeat > t->ms_since_heartbeat)
            t->ms_since_heartbeat = d->ms_since_heartbeat;
    }
}

/* Copies what the pages need of every loaded version; the caller frees *out. */
static int snapshot(serve_server *s, version_view **out) {
    serve_repo *r = s->repo;
    pthread_mutex_lock(&r->mu);
    int n = 0;
    for (int i = 0; i < r->n_models; i++) n += r->models[i].n_versions;
    version_view *v = calloc((size_t)n + 1, sizeof *v);
    int k = 0;
    for (int i = 0; v && i < r->n_models; i++)
        for (int j = 0; j < r->models[i].n_versions; j++, k++) {
            const serve_version *sv = r->models[i].versions[j];
            char num[32];
            snprintf(num, sizeof num, "%lld", (long long)sv->number);
            snprintf(v[k].model, sizeof v[k].model, "%s", r->models[i].name);
            serve_metrics_labels(v[k].labels, sizeof v[k].labels, r->models[i].name, num);
            v[k].number = sv->number;
            v[k].llm = sv->llm != NULL;
            if (sv->pool) serve_pool_get_stats(sv->pool, &v[k].pool);
            v[k].n_llms = sv->n_llms;
            for (int d = 0; d < sv->n_llms; d++) {
                v[k].llm_devices[d] = sv->llm_devices[d];
                kiln_llm_get_stats(sv->llms[d], &v[k].llm_device[d]);
            }
            sum_llm_stats(&v[k]);
        }
    pthread_mutex_unlock(&r->mu);
    *out = v;
    return v ? n : 0;
}

static void gauge_head(kiln_strbuf *b, const char *name, const char *type, const char *help) {
    kiln_strbuf_printf(b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/* Speculative decoding's counters per LLM version, as vLLM's spec_decode_num_* counters. */
static void spec_metrics(kiln_strbuf *b, const version_view *v, int n) {
    static const struct {
        const char *name, *help;
        size_t offset;
    } M[] = {
        {"kiln_spec_decode_num_drafts_total", "Draft proposals verified (one per speculating sequence and step).",
         offsetof(kiln_llm_stats, spec_steps)},
        {"kiln_spec_decode_num_draft_tokens_total", "Draft tokens proposed.", offsetof(kiln_llm_stats, spec_drafted)},
        {"kiln_spec_decode_num_accepted_tokens_total", "Draft tokens accepted.",
         offsetof(kiln_llm_stats, spec_accepted)},
        {"kiln_spec_decode_num_emitted_tokens_total", "Tokens produced by speculating steps (accepted + one each).",
         offsetof(kiln_llm_stats, spec_emitted)},
    };
    for (size_t m = 0; m < sizeof M / sizeof M[0]; m++) {
        gauge_head(b, M[m].name, "counter", M[m].help);
        for (int i = 0; i < n; i++) {
            if (!v[i].llm) continue;
            const uint64_t *count = (const uint64_t *)((const char *)&v[i].llm_stats + M[m].offset);
            kiln_strbuf_printf(b, "%s{%s} %llu\n", M[m].name, v[i].labels, (unsigned long long)*count);
        }
    }
}

enum MHD_Result serve_metrics_page(serve_conn *c) {
    kiln_strbuf b = {0};
    serve_metrics_render(c->srv->metrics, &b);
    version_view *v;
    int n = snapshot(c->srv, &v);
    gauge_head(&b, "kiln_queue_depth", "gauge", "Requests waiting in a tensor model's batcher queue.");
    for (int i = 0; i < n; i++)
        if (!v[i].llm) kiln_strbuf_printf(&b, "kiln_queue_depth{%s} %d\n", v[i].labels, v[i].pool.queue_depth);
    gauge_head(&b, "kiln_queue_abandoned_total", "counter", "Requests taken out of a tensor model's queue unrun: their client left.");
    for (int i = 0; i < n; i++)
        if (!v[i].llm)
            kiln_strbuf_printf(&b, "kiln_queue_abandoned_total{%s} %llu\n", v[i].labels, (unsigned long long)v[i].pool.abandoned);
    gauge_head(&b, "kiln_batch_direct_runs_total", "counter",
               "Runs of a tensor model whose requests' inputs lay back to back in its landing memory: bound without a copy.");
    for (int i = 0; i < n; i++)
        if (!v[i].llm)
            kiln_strbuf_printf(&b, "kiln_batch_direct_runs_total{%s} %llu\n", v[i].labels,
                               (unsigned long long)v[i].pool.direct_runs);
    gauge_head(&b, "kiln_landing_misses_total", "counter",
               "Binary requests of a tensor model that found no room in its landing memory (their body was buffered).");
    for (int i = 0; i < n; i++)
        if (!v[i].llm)
            kiln_strbuf_printf(&b, "kiln_landing_misses_total{%s} %llu\n", v[i].labels,
                               (unsigned long long)v[i].pool.landing_misses);
    gauge_head(&b, "kiln_instances", "gauge", "Instances of a tensor model, in rotation (up) or out after failures.");
    for (int i = 0; i < n; i++)
        if (!v[i].llm)
            kiln_strbuf_printf(&b, "kiln_instances{%s,state=\"up\"} %d\nkiln_instances{%s,state=\"down\"} %d\n", v[i].labels,
                               v[i].pool.instances_up, v[i].labels, v[i].pool.instances - v[i].pool.instances_up);
    gauge_head(&b, "kiln_instance_up", "gauge", "Each instance of a tensor model and its device: 1 in rotation, 0 out after failures.");
    for (int i = 0; i < n; i++)
        for (int k = 0; !v[i].llm && k < v[i].pool.instances; k++)
            kiln_strbuf_printf(&b, "kiln_instance_up{%s,instance=\"%d\",device=\"%d\"} %d\n", v[i].labels, k,
                               v[i].pool.instance[k].device, v[i].pool.instance[k].up);
    gauge_head(&b, "kiln_instance_runs_total", "counter", "Runs (batches) of each instance of a tensor model, by device.");
    for (int i = 0; i < n; i++)
        for (int k = 0; !v[i].llm && k < v[i].pool.instances; k++)
            kiln_strbuf_printf(&b, "kiln_instance_runs_total{%s,instance=\"%d\",device=\"%d\"} %llu\n", v[i].labels, k,
                               v[i].pool.instance[k].device, (unsigned long long)v[i].pool.instance[k].runs);
    gauge_head(&b, "kiln_llm_device_requests", "gauge", "LLM requests running or waiting on each device's engine.");
    for (int i = 0; i < n; i++)
        for (int k = 0; k < v[i].n_llms; k++)
            kiln_strbuf_printf(&b, "kiln_llm_device_requests{%s,device=\"%d\",state=\"running\"} %d\n"
                                   "kiln_llm_device_requests{%s,device=\"%d\",state=\"waiting\"} %d\n",
                               v[i].labels, v[i].llm_devices[k], v[i].llm_device[k].running, v[i].labels,
                               v[i].llm_devices[k], v[i].llm_device[k].waiting);
    gauge_head(&b, "kiln_llm_device_requests_submitted_total", "counter", "LLM requests each device's engine was given.");
    for (int i = 0; i < n; i++)
        for (int k = 0; k < v[i].n_llms; k++)
            kiln_strbuf_printf(&b, "kiln_llm_device_requests_submitted_total{%s,device=\"%d\"} %llu\n", v[i].labels,
                               v[i].llm_devices[k], (unsigned long long)v[i].llm_device[k].requests_submitted);
    gauge_head(&b, "kiln_num_requests_running", "gauge", "LLM requests in the running batch.");
    for (int i = 0; i < n; i++)
        if (v[i].llm) kiln_strbuf_printf(&b, "kiln_num_requests_running{%s} %d\n", v[i].labels, v[i].llm_stats.running);
    gauge_head(&b, "kiln_num_requests_waiting", "gauge", "LLM requests waiting for their first step.");
    for (int i = 0; i < n; i++)
        if (v[i].llm) kiln_strbuf_printf(&b, "kiln_num_requests_waiting{%s} %d\n", v[i].labels, v[i].llm_stats.waiting);
    gauge_head(&b, "kiln_kv_cache_blocks_used", "gauge", "KV-cache blocks in use.");
    for (int i = 0; i < n; i++)
        if (v[i].llm) kiln_strbuf_printf(&b, "kiln_kv_cache_blocks_used{%s} %d\n", v[i].labels, v[i].llm_stats.kv_blocks_used);
    gauge_head(&b, "kiln_kv_cache_blocks_total", "gauge", "KV-cache blocks in all.");
    for (int i = 0; i < n; i++)
        if (v[i].llm) kiln_strbuf_printf(&b, "kiln_kv_cache_blocks_total{%s} %d\n", v[i].labels, v[i].llm_stats.kv_blocks_total);
    gauge_head(&b, "kiln_kv_cache_usage_perc", "gauge", "Fraction of the KV cache in use (0..1).");
    for (int i = 0; i < n; i++)
        if (v[i].llm)
            kiln_strbuf_printf(&b, "kiln_kv_cache_usage_perc{%s} %.6f\n", v[i].labels,
                               v[i].llm_stats.kv_blocks_total ? (double)v[i].llm_stats.kv_blocks_used / v[i].llm_stats.kv_blocks_total : 0);
    gauge_head(&b, "kiln_num_preemptions_total", "counter", "LLM requests preempted and recomputed.");
    for (int i = 0; i < n; i++)
        if (v[i].llm)
            kiln_strbuf_printf(&b, "kiln_num_preemptions_total{%s} %llu\n", v[i].labels, (unsigned long long)v[i].llm_stats.preemptions);
    gauge_head(&b, "kiln_prefix_cache_queries_total", "counter", "Prompt tokens looked up in the prefix cache.");
    for (int i = 0; i < n; i++)
        if (v[i].llm)
            kiln_strbuf_printf(&b, "kiln_prefix_cache_queries_total{%s} %llu\n", v[i].labels,
                               (unsigned long long)v[i].llm_stats.prefix_cache_queries);
    gauge_head(&b, "kiln_prefix_cache_hits_total", "counter", "Prompt tokens found in the prefix cache (not recomputed).");
    for (int i = 0; i < n; i++)
        if (v[i].llm)
            kiln_strbuf_printf(&b, "kiln_prefix_cache_hits_total{%s} %llu\n", v[i].labels,
                               (unsigned long long)v[i].llm_stats.prefix_cache_hits);
    gauge_head(&b, "kiln_prefix_cache_hit_ratio", "gauge", "Prefix-cache hits / queries since start (0..1; 0 before any).");
    for (int i = 0; i < n; i++)
        if (v[i].llm)
            kiln_strbuf_printf(&b, "kiln_prefix_cache_hit_ratio{%s} %.6f\n", v[i].labels,
                               v[i].llm_stats.prefix_cache_queries ? (double)v[i].llm_stats.prefix_cache_hits /
                                                                         (double)v[i].llm_stats.prefix_cache_queries
                                                                   : 0);
    spec_metrics(&b, v, n);
    gauge_head(&b, "kiln_engine_heartbeat_age_seconds", "gauge", "Time since the LLM engine loop last went round.");
    for (int i = 0; i < n; i++)
        if (v[i].llm)
            kiln_strbuf_printf(&b, "kiln_engine_heartbeat_age_seconds{%s} %.3f\n", v[i].labels, v[i].llm_stats.ms_since_heartbeat / 1e3);
    pthread_mutex_lock(&c->srv->active_mu);
    int active = c->srv->active;
    pthread_mutex_unlock(&c->srv->active_mu);
    gauge_head(&b, "kiln_http_requests_in_flight", "gauge", "HTTP requests being answered (this one included).");
    kiln_strbuf_printf(&b, "kiln_http_requests_in_flight %d\n", active);
    serve_gpu_metrics(&b);
    free(v);
    enum MHD_Result ok = b.failed ? serve_reply_error(c, 500, "out of memory")
                                  : serve_reply(c, 200, "text/plain; version=0.0.4; charset=utf-8", b.data, b.len);
    kiln_strbuf_free(&b);
    return ok;
}

bool serve_ready(serve_server *s) {
    if (s->draining) return false;
    version_view *v;
    int n = snapshot(s, &v);
    bool ready = v != NULL;
    for (int i = 0; ready && i < n; i++) {
        if (!v[i].llm) ready = v[i].pool.instances_up > 0;
        else ready = v[i].llm_stats.running + v[i].llm_stats.waiting == 0 || v[i].llm_stats.ms_since_heartbeat < HEARTBEAT_LIMIT_MS;
    }
    free(v);
    return ready;
}

static void html_escape(kiln_strbuf *b, const char *s) {
    for (; *s; s++) {
        if (*s == '<') kiln_strbuf_puts(b, "&lt;");
        else if (*s == '>') kiln_strbuf_puts(b, "&gt;");
        else if (*s == '&') kiln_strbuf_puts(b, "&amp;");
        else if (*s == '"') kiln_strbuf_puts(b, "&quot;");
        else kiln_strbuf_putc(b, *s);
    }
}

/* The request rate of the last minute as an SVG polyline. */
static void rate_chart(serve_server *s, kiln_strbuf *b) {
    double rate[60], peak = 1;
    serve_rate_history(s, rate, 60);
    for (int i = 0; i < 60; i++) peak = rate[i] > peak ? rate[i] : peak;
    kiln_strbuf_printf(b, "<svg width=\"600\" height=\"120\" viewBox=\"0 0 600 120\" role=\"img\">"
                          "<rect width=\"600\" height=\"120\" fill=\"#f6f6f6\"/><polyline fill=\"none\" stroke=\"#2a6\" "
                          "stroke-width=\"2\" points=\"");
    for (int i = 0; i < 60; i++) kiln_strbuf_printf(b, "%d,%.1f ", i * 10 + 5, 115 - rate[i] / peak * 105);
    kiln_strbuf_printf(b, "\"/><text x=\"4\" y=\"14\" font-size=\"12\">peak %.0f req/s</text></svg>\n", peak);
}

/* One model's latency histogram as SVG bars. */
static void latency_chart(serve_server *s, kiln_strbuf *b, const char *labels) {
    uint64_t counts[32], count = 0, peak = 1;
    double bounds[32], sum = 0;
    int n = serve_metrics_histogram(s->metrics, "kiln_request_duration_seconds", labels, counts, bounds, 32, &sum, &count);
    if (!n || !count) {
        kiln_strbuf_puts(b, "no requests yet");
        return;
    }
    for (int i = 0; i < n; i++) peak = counts[i] > peak ? counts[i] : peak;
    kiln_strbuf_printf(b, "<svg width=\"%d\" height=\"70\" role=\"img\">", n * 22);
    for (int i = 0; i < n; i++) {
        double h = 50.0 * (double)counts[i] / (double)peak;
        kiln_strbuf_printf(b, "<rect x=\"%d\" y=\"%.1f\" width=\"18\" height=\"%.1f\" fill=\"#36c\"><title>", i * 22, 52 - h, h);
        if (i < n - 1) kiln_strbuf_printf(b, "&lt;= %g s: %llu", bounds[i], (unsigned long long)counts[i]);
        else kiln_strbuf_printf(b, "&gt; %g s: %llu", bounds[i - 1], (unsigned long long)counts[i]);
        kiln_strbuf_puts(b, "</title></rect>");
    }
    kiln_strbuf_printf(b, "<text x=\"0\" y=\"66\" font-size=\"11\">mean %.2f ms over %llu requests</text></svg>",
                       sum / (double)count * 1e3, (unsigned long long)count);
}

enum MHD_Result serve_status_page(serve_conn *c) {
    serve_server *s = c->srv;
    kiln_strbuf b = {0};
    kiln_strbuf_printf(&b, "<!doctype html><html><head><meta charset=\"utf-8\"><meta http-equiv=\"refresh\" content=\"5\">"
                           "<title>kiln serve</title><style>body{font:14px sans-serif;margin:2em}table{border-collapse:"
                           "collapse}td,th{border:1px solid #ccc;padding:4px 8px;text-align:left}</style></head><body>"
                           "<h1>kiln serve %s</h1><p>up %.0f s, %s</p><h2>Requests per second (last minute)</h2>",
                       kiln_version(), (double)time(NULL) - s->started_s, serve_ready(s) ? "ready" : "NOT READY");
    rate_chart(s, &b);
    kiln_strbuf_puts(&b, "<h2>Models</h2><table><tr><th>model</th><th>version</th><th>kind</th><th>instances</th>"
                         "<th>queue / running</th><th>latency</th></tr>");
    version_view *v;
    int n = snapshot(s, &v);
    for (int i = 0; i < n; i++) {
        kiln_strbuf_puts(&b, "<tr><td>");
        html_escape(&b, v[i].model);
        kiln_strbuf_printf(&b, "</td><td>%lld</td>", (long long)v[i].number);
        if (v[i].llm) {
            kiln_strbuf_printf(&b, "<td>LLM</td><td>%d engine loop%s:", v[i].n_llms, v[i].n_llms > 1 ? "s" : "");
            for (int k = 0; k < v[i].n_llms; k++)
                kiln_strbuf_printf(&b, "<br>device %d: %d waiting / %d running", v[i].llm_devices[k],
                                   v[i].llm_device[k].waiting, v[i].llm_device[k].running);
            kiln_strbuf_printf(&b, "</td><td>%d waiting / %d running, KV %d of %d blocks, prefix cache %.1f%% of %llu prompt tokens</td>",
                               v[i].llm_stats.waiting, v[i].llm_stats.running, v[i].llm_stats.kv_blocks_used,
                               v[i].llm_stats.kv_blocks_total,
                               v[i].llm_stats.prefix_cache_queries ? 100.0 * (double)v[i].llm_stats.prefix_cache_hits /
                                                                         (double)v[i].llm_stats.prefix_cache_queries
                                                                   : 0.0,
                               (unsigned long long)v[i].llm_stats.prefix_cache_queries);
        } else {
            kiln_strbuf_printf(&b, "<td>tensor</td><td>%d up of %d:", v[i].pool.instances_up, v[i].pool.instances);
            for (int k = 0; k < v[i].pool.instances; k++)
                kiln_strbuf_printf(&b, "<br>instance %d on device %d: %s, %llu runs", k, v[i].pool.instance[k].device,
                                   v[i].pool.instance[k].up ? "up" : "out", (unsigned long long)v[i].pool.instance[k].runs);
            kiln_strbuf_printf(&b, "</td><td>%d queued, %llu runs</td>", v[i].pool.queue_depth,
                               (unsigned long long)v[i].pool.runs);
        }
        kiln_strbuf_puts(&b, "<td>");
        latency_chart(s, &b, v[i].labels);
        kiln_strbuf_puts(&b, "</td></tr>");
    }
    free(v);
    serve_repo *r = s->repo;
    pthread_mutex_lock(&r->mu);
    for (int i = 0; i < r->n_models; i++)
        if (!r->models[i].n_versions) {
            kiln_strbuf_puts(&b, "<tr><td>");
            html_escape(&b, r->models[i].name);
            kiln_strbuf_puts(&b, "</td><td colspan=\"5\">unavailable: ");
            html_escape(&b, r->models[i].reason);
            kiln_strbuf_puts(&b, "</td></tr>");
        }
    pthread_mutex_unlock(&r->mu);
    kiln_strbuf_puts(&b, "</table><p><a href=\"/metrics\">/metrics</a></p></body></html>\n");
    enum MHD_Result ok = b.failed ? serve_reply_error(c, 500, "out of memory")
                                  : serve_reply(c, 200, "text/html; charset=utf-8", b.data, b.len);
    kiln_strbuf_free(&b);
    return ok;
}
