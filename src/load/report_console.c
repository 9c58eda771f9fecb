/* report_console.c — kiln load's console summary, in the spirit of MLPerf LoadGen's: what was
 * asked (scenario, scheduled rate) against what happened (completed rate, late sends), latency
 * percentiles per metric, errors by kind and status, the SLO verdict, and for sweeps a table of
 * steps and the capacity plan. */
#include "load/load.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#define RULE "================================================================================\n"

/* "open loop, Poisson arrivals, 20 req/s scheduled" or "closed loop, 8 requests in flight". */
static void scenario(const kiln_load_config *c, const kiln_load_step *s, char *buf, size_t cap) {
    if (s->open_loop)
        snprintf(buf, cap, "open loop, %s arrivals at %g req/s (at most %d in flight)", s->poisson ? "Poisson" : "constant-rate", s->rate,
                 c->connections);
    else snprintf(buf, cap, "closed loop, %d request%s in flight", s->concurrency, s->concurrency == 1 ? "" : "s");
}

/* One line of percentiles (ms) for a histogram, or nothing when it is empty. */
static void pct_line(FILE *f, const char *label, const kiln_hist *h) {
    if (kiln_hist_count(h) == 0) return;
    fprintf(f, "  %-10s", label);
    for (int i = 0; i < KILN_LOAD_NPCT; i++) fprintf(f, " %10.3f", (double)kiln_load_pct_us(h, kiln_load_pcts[i]) / 1e3);
    fprintf(f, " %10.3f %10.3f %9lld\n", (double)kiln_hist_max(h) / 1e3, kiln_hist_mean(h) / 1e3, (long long)kiln_hist_count(h));
}

/* The SLO terms as text ("ttft <= 200 ms, e2e <= 2000 ms"). */
static void slo_text(const kiln_load_config *c, char *buf, size_t cap) {
    size_t n = 0;
    buf[0] = '\0';
    const struct { const char *name; int64_t us; } terms[] = {{"ttft", c->slo_ttft_us}, {"tpot", c->slo_tpot_us}, {"itl", c->slo_itl_us}, {"e2e", c->slo_e2e_us}};
    for (int i = 0; i < 4; i++)
        if (terms[i].us && n < cap) n += (size_t)snprintf(buf + n, cap - n, "%s%s <= %g ms", n ? ", " : "", terms[i].name, (double)terms[i].us / 1e3);
}

/* The errors of a step, by kind and by HTTP status. */
static void errors_block(FILE *f, const kiln_load_step *s) {
    if (!s->failed) return;
    fprintf(f, "errors        ");
    for (int k = 0; k < KILN_LOADERR_COUNT; k++)
        if (s->err[k] && k != KILN_LOADERR_HTTP) fprintf(f, "%s %lld  ", kiln_load_err_name((kiln_load_err)k), (long long)s->err[k]);
    for (int code = 0; code < 600; code++)
        if (s->status_counts[code]) fprintf(f, "HTTP %d: %lld  ", code, (long long)s->status_counts[code]);
    fprintf(f, "\n              first: %s\n", s->first_error);
}

/* The block of one step. */
static void print_step(const kiln_load_config *c, const kiln_load_result *r, const kiln_load_step *s, int index, FILE *f) {
    char buf[256];
    kiln_load_rates rt;
    kiln_load_step_rates(s, &rt);
    if (r->nsteps > 1) fprintf(f, "---- step %d of %d\n", index + 1, r->nsteps);
    scenario(c, s, buf, sizeof buf);
    fprintf(f, "scenario      %s\n", buf);
    fprintf(f, "window        %.2f s measured after %.2f s of warm-up (%lld warm-up requests not counted)\n", s->window_s, s->warmup_s,
            (long long)s->warmup_requests);
    fprintf(f, "requests      %lld scheduled, %lld sent, %lld ok, %lld failed; %lld sent late (> %d ms behind schedule)\n",
            (long long)s->scheduled, (long long)s->sent, (long long)s->ok, (long long)s->failed, (long long)s->late, KILN_LOAD_LATE_US / 1000);
    const double kept = rt.completed > rt.window_completed ? rt.completed : rt.window_completed;
    fprintf(f, "rate          scheduled %.2f req/s, completed %.2f req/s (%.2f req/s inside the window)%s\n", rt.scheduled,
            rt.completed, rt.window_completed,
            s->open_loop && rt.scheduled > 0 && kept < 0.98 * rt.scheduled ? "  (server is not keeping up)" : "");
    if (c->api == KILN_LOAD_API_OPENAI_CHAT || c->api == KILN_LOAD_API_OPENAI_COMPLETIONS)
        fprintf(f, "tokens        %lld in, %lld out (%s), %.1f output tokens/s; %.1f/s completed in the window\n",
                (long long)s->in_tokens, (long long)s->out_tokens,
                s->tokens_estimated ? (s->tokens_from_usage ? "partly estimated: ~4 bytes/token where the server sent no usage"
                                                            : "ESTIMATED: ~4 bytes/token, the server sent no usage")
                                    : "from the server's usage",
                rt.out_tokens, rt.window_out_tokens);
    fprintf(f, "latency (ms)         p50        p90        p95        p99      p99.9        max       mean     count\n");
    static const char *const labels[KILN_METRIC_COUNT] = {"e2e", "ttft", "itl", "tpot", "send lag"};
    for (int m = 0; m < KILN_METRIC_COUNT; m++) pct_line(f, labels[m], s->hist[m]);
    errors_block(f, s);
    if (s->nscrapes) {
        double mean = 0, max = 0;
        for (int i = 0; i < s->nscrapes; i++) {
            mean += s->scrapes[i].mean / s->nscrapes;
            if (s->scrapes[i].max > max) max = s->scrapes[i].max;
        }
        fprintf(f, "server        %s: mean %.1f, max %.1f over %d scrapes\n", c->metrics_match ? c->metrics_match : "GPU utilization", mean, max,
                s->nscrapes);
    } else if (c->metrics_url) {
        fprintf(f, "server        metrics: %s\n", s->scrape_failures ? "the scrapes failed" : "no matching series");
    }
    if (kiln_load_has_slo(c)) {
        slo_text(c, buf, sizeof buf);
        bool met = kiln_load_step_meets_slo(c, s);
        fprintf(f, "SLO           %s: goodput %.2f%% (%lld of %lld), %.2f good req/s -> %s (needs >= %g%%)\n", buf,
                kiln_load_step_goodput(s) * 100, (long long)s->good, (long long)s->scheduled, rt.good, met ? "MET" : "NOT MET",
                c->goodput_share * 100);
    }
    if (s->stopped) fprintf(f, "stop rule     fired: %s\n", s->stop_reason);
}

/* The sweep table: one line per step. */
static void sweep_table(const kiln_load_config *c, const kiln_load_result *r, FILE *f) {
    bool has = kiln_load_has_slo(c);
    fprintf(f, "---- sweep\n  %-12s %10s %10s %10s %10s %10s %10s %8s %9s%s\n", c->sweep == KILN_SWEEP_RATE ? "rate req/s" : "concurrency",
            "done req/s", "e2e p50", "e2e p99", "ttft p99", "tpot p99", "tok/s", "errors", "goodput", has ? "  SLO" : "");
    for (int i = 0; i < r->nsteps; i++) {
        const kiln_load_step *s = &r->steps[i];
        kiln_load_rates rt;
        kiln_load_step_rates(s, &rt);
        fprintf(f, "  %-12g %10.2f %10.2f %10.2f %10.2f %10.2f %10.1f %8lld %8.2f%%%s\n", s->open_loop ? s->rate : (double)s->concurrency,
                rt.completed, (double)kiln_load_pct_us(s->hist[KILN_METRIC_E2E], 50) / 1e3,
                (double)kiln_load_pct_us(s->hist[KILN_METRIC_E2E], 99) / 1e3,
                (double)kiln_load_pct_us(s->hist[KILN_METRIC_TTFT], 99) / 1e3,
                (double)kiln_load_pct_us(s->hist[KILN_METRIC_TPOT], 99) / 1e3, rt.out_tokens, (long long)s->failed,
                kiln_load_step_goodput(s) * 100, has ? (kiln_load_step_meets_slo(c, s) ? "  met" : "  NOT met") : "");
    }
}

void kiln_load_print_summary(const kiln_load_config *c, const kiln_load_result *r, FILE *f) {
    fprintf(f, RULE "kiln load results\n" RULE);
    fprintf(f, "target        %s (%s%s%s%s)\n", r->endpoint, kiln_load_api_name(c->api), c->stream ? ", streaming" : "",
            r->model[0] ? ", model " : "", r->model);
    fprintf(f, "started       %s (transport: %s)\n", r->started_at, r->transport);
    for (int i = 0; i < r->nsteps; i++) print_step(c, r, &r->steps[i], i, f);
    if (r->nsteps > 1) sweep_table(c, r, f);
    if (r->have_capacity) {
        char slo[160];
        slo_text(c, slo, sizeof slo);
        if (r->capacity_step < 0) {
            fprintf(f, "capacity      no %s met the SLO (%s, goodput >= %g%%)\n", r->nsteps > 1 ? "step" : "run", slo, c->goodput_share * 100);
        } else {
            fprintf(f, "capacity      %.2f req/s per server within the SLO (%s, goodput >= %g%%)%s\n", r->capacity_rate, slo,
                    c->goodput_share * 100, r->capacity_step + 1 < r->nsteps ? "; the next step did not meet it" : "");
            if (c->target_rate > 0)
                fprintf(f, "              target %.2f req/s -> %d server%s\n", c->target_rate, r->servers_needed, r->servers_needed == 1 ? "" : "s");
        }
    }
    fprintf(f, RULE);
}
