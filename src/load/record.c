/* record.c — turns finished requests into a step's numbers: the outcome (ok, or which kind of
 * error), the latency histograms (µs, measured from the intended send time), token counts, SLO
 * goodput, and the per-second series. Only requests of the measured window count; warm-up requests
 * appear in the per-second series alone. */
#include "load/load_internal.h"

#include "core/status.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define HIST_LOWEST 1                       /* µs */
#define HIST_HIGHEST (3600LL * 1000000)     /* one hour in µs */
#define HIST_DIGITS 3

kiln_status load_step_init(kiln_load_step *s) {
    memset(s, 0, sizeof *s);
    for (int m = 0; m < KILN_METRIC_COUNT; m++) {
        kiln_status st = kiln_hist_create(HIST_LOWEST, HIST_HIGHEST, HIST_DIGITS, &s->hist[m]);
        if (st != KILN_OK) {
            load_step_free(s);
            return st;
        }
    }
    return KILN_OK;
}

void load_step_free(kiln_load_step *s) {
    for (int m = 0; m < KILN_METRIC_COUNT; m++) kiln_hist_free(s->hist[m]);
    free(s->ticks);
    free(s->scrapes);
    memset(s, 0, sizeof *s);
}

kiln_status load_step_merge(kiln_load_step *into, const kiln_load_step *from) {
    into->rate += from->rate;
    into->concurrency += from->concurrency;
    if (from->window_s > into->window_s) into->window_s = from->window_s;
    if (from->elapsed_s > into->elapsed_s) into->elapsed_s = from->elapsed_s;
    into->scheduled += from->scheduled;
    into->sent += from->sent;
    into->ok += from->ok;
    into->failed += from->failed;
    into->late += from->late;
    into->warmup_requests += from->warmup_requests;
    for (int k = 0; k < KILN_LOADERR_COUNT; k++) into->err[k] += from->err[k];
    for (int k = 0; k < 600; k++) into->status_counts[k] += from->status_counts[k];
    for (int m = 0; m < KILN_METRIC_COUNT; m++) KILN_TRY(kiln_hist_merge(into->hist[m], from->hist[m]));
    into->in_tokens += from->in_tokens;
    into->out_tokens += from->out_tokens;
    into->tokens_from_usage += from->tokens_from_usage;
    into->tokens_estimated += from->tokens_estimated;
    into->good += from->good;
    if (from->nticks > into->nticks) {
        kiln_load_tick *tk = realloc(into->ticks, (size_t)from->nticks * sizeof *tk);
        if (!tk) return kiln_error(KILN_ERR_OUT_OF_MEMORY, "out of memory merging the per-second series");
        memset(tk + into->nticks, 0, (size_t)(from->nticks - into->nticks) * sizeof *tk);
        into->ticks = tk;
        into->nticks = from->nticks;
    }
    for (int i = 0; i < from->nticks; i++) {
        kiln_load_tick *a = &into->ticks[i];
        const kiln_load_tick *b = &from->ticks[i];
        a->sent += b->sent;
        a->ok += b->ok;
        a->failed += b->failed;
        a->e2e_sum_us += b->e2e_sum_us;
        if (b->e2e_max_us > a->e2e_max_us) a->e2e_max_us = b->e2e_max_us;
        a->out_tokens += b->out_tokens;
    }
    if (!into->nscrapes && from->nscrapes) {
        kiln_load_scrape *sc = malloc((size_t)from->nscrapes * sizeof *sc);
        if (!sc) return kiln_error(KILN_ERR_OUT_OF_MEMORY, "out of memory merging the scrapes");
        memcpy(sc, from->scrapes, (size_t)from->nscrapes * sizeof *sc);
        free(into->scrapes);
        into->scrapes = sc;
        into->nscrapes = from->nscrapes;
    }
    into->scrape_failures += from->scrape_failures;
    if (!into->first_error[0]) memcpy(into->first_error, from->first_error, sizeof into->first_error);
    return KILN_OK;
}

/* The per-second bucket holding time t (NULL when it cannot be grown). */
static kiln_load_tick *tick_at(load_engine *e, int64_t t) {
    kiln_load_step *st = e->step;
    int64_t i = t > e->t0_ns ? (t - e->t0_ns) / 1000000000 : 0;
    if (i >= 1000000) return NULL; /* over 11 days: stop the series rather than grow without bound */
    if (i >= st->nticks) {
        int n = (int)i + 1, cap = st->nticks;
        while (cap < n) cap = cap ? cap * 2 : 64;
        if (n > st->nticks) {
            kiln_load_tick *tk = realloc(st->ticks, (size_t)cap * sizeof *tk);
            if (!tk) return NULL;
            memset(tk + st->nticks, 0, (size_t)(cap - st->nticks) * sizeof *tk);
            st->ticks = tk;
            st->nticks = n;
        }
    }
    return &st->ticks[i];
}

void load_record_sent(load_engine *e, int64_t now_ns) {
    kiln_load_tick *tk = tick_at(e, now_ns);
    if (tk) tk->sent++;
}

kiln_load_err load_curl_error_kind(CURL *h, CURLcode rc) {
    long os_errno = 0;
    switch (rc) {
    case CURLE_COULDNT_CONNECT:
        curl_easy_getinfo(h, CURLINFO_OS_ERRNO, &os_errno);
        return os_errno == ECONNREFUSED ? KILN_LOADERR_REFUSED : KILN_LOADERR_CONNECT;
    case CURLE_OPERATION_TIMEDOUT: return KILN_LOADERR_TIMEOUT;
    case CURLE_COULDNT_RESOLVE_HOST:
    case CURLE_COULDNT_RESOLVE_PROXY: return KILN_LOADERR_RESOLVE;
    case CURLE_SSL_CONNECT_ERROR:
    case CURLE_PEER_FAILED_VERIFICATION:
    case CURLE_SSL_CERTPROBLEM:
    case CURLE_SSL_CIPHER:
    case CURLE_SSL_CACERT_BADFILE: return KILN_LOADERR_CONNECT;
    case CURLE_GOT_NOTHING:
    case CURLE_RECV_ERROR:
    case CURLE_SEND_ERROR:
    case CURLE_PARTIAL_FILE: return KILN_LOADERR_CLOSED;
    case CURLE_WEIRD_SERVER_REPLY:
    case CURLE_BAD_CONTENT_ENCODING:
    case CURLE_UNSUPPORTED_PROTOCOL:
    case CURLE_HTTP2:
    case CURLE_HTTP2_STREAM: return KILN_LOADERR_MALFORMED;
    default: return KILN_LOADERR_OTHER;
    }
}

/* Whether a successful request met every SLO term (ttft < 0: not streamed, judged by e2e;
 * tpot / max_itl < 0: not measured, not judged). */
static bool within_slo(const kiln_load_config *c, int64_t e2e, int64_t ttft, int64_t tpot, int64_t max_itl) {
    if (c->slo_e2e_us && e2e > c->slo_e2e_us) return false;
    if (c->slo_ttft_us && (ttft >= 0 ? ttft : e2e) > c->slo_ttft_us) return false;
    if (c->slo_tpot_us && tpot >= 0 && tpot > c->slo_tpot_us) return false;
    if (c->slo_itl_us && max_itl >= 0 && max_itl > c->slo_itl_us) return false;
    return true;
}

/* Counts a failure of a measured request (not in the per-second series: callers do that). */
static void record_failure(load_engine *e, kiln_load_err kind, long status, const char *detail) {
    kiln_load_step *st = e->step;
    st->failed++;
    st->err[kind]++;
    if (kind == KILN_LOADERR_HTTP && status >= 0 && status < 600) st->status_counts[status]++;
    if (!st->first_error[0]) snprintf(st->first_error, sizeof st->first_error, "%s: %.220s", kiln_load_err_name(kind), detail);
}

void load_record_not_sent(load_engine *e, int64_t intended_ns) {
    kiln_load_tick *tk = tick_at(e, load_now_ns());
    if (tk) tk->failed++;
    if (intended_ns < e->window_start_ns) return;
    record_failure(e, KILN_LOADERR_NOT_SENT, 0, "no connection became free before the end of the run");
}

/* The protocol's verdict on a complete 2xx response. */
static bool response_ok(load_engine *e, load_slot *s) {
    switch (e->cfg->api) {
    case KILN_LOAD_API_OPENAI_CHAT:
    case KILN_LOAD_API_OPENAI_COMPLETIONS: return load_openai_finish(s);
    case KILN_LOAD_API_KSERVE: return load_kserve_finish(s);
    default: return true;
    }
}

/* Records the streaming metrics (TTFT, ITL, TPOT) of a good response; sets *ttft, *tpot, *max_itl
 * (-1 when not measurable). */
static void record_stream(load_engine *e, load_slot *s, int64_t out_tokens, int64_t *ttft, int64_t *tpot, int64_t *max_itl) {
    kiln_load_step *st = e->step;
    *ttft = *tpot = *max_itl = -1;
    if (s->ntok == 0) return;
    *ttft = (s->tok_ns[0] - s->intended_ns) / 1000;
    kiln_hist_record(st->hist[KILN_METRIC_TTFT], *ttft);
    for (int i = 1; i < s->ntok; i++) {
        int64_t gap = (s->tok_ns[i] - s->tok_ns[i - 1]) / 1000;
        kiln_hist_record(st->hist[KILN_METRIC_ITL], gap);
        if (gap > *max_itl) *max_itl = gap;
    }
    if (out_tokens >= 2 && s->ntok >= 2) {
        *tpot = (s->tok_ns[s->ntok - 1] - s->tok_ns[0]) / 1000 / (out_tokens - 1);
        kiln_hist_record(st->hist[KILN_METRIC_TPOT], *tpot);
    }
}

/* Output tokens of a good OpenAI response: the server's usage, else ~4 bytes of content per token
 * (*estimated set). */
static int64_t output_tokens(const load_slot *s, bool *estimated) {
    *estimated = s->usage_out < 0;
    return *estimated ? (int64_t)((s->content_bytes + 3) / 4) : s->usage_out;
}

/* True when a completion at t falls inside the measured window (which ends where scheduling ends). */
static bool in_window(const load_engine *e, int64_t t) {
    return t >= e->window_start_ns && t < e->window_end_ns && !(e->sched_done && t >= e->sched_end_ns);
}

void load_record_done(load_engine *e, load_slot *s, int64_t done_ns, int err, long status, const char *transport_detail) {
    kiln_load_step *st = e->step;
    bool ok = false;
    kiln_load_err kind = KILN_LOADERR_OTHER;
    char detail[224];
    if (err >= 0) {
        kind = (kiln_load_err)err;
        snprintf(detail, sizeof detail, "%s", transport_detail ? transport_detail : "");
    } else if (status < 200 || status >= 300) {
        kind = KILN_LOADERR_HTTP;
        snprintf(detail, sizeof detail, "HTTP status %ld from %.150s", status, e->tgt->url);
    } else if (!(ok = response_ok(e, s))) {
        kind = KILN_LOADERR_MALFORMED;
        snprintf(detail, sizeof detail, "%s", s->detail[0] ? s->detail : "unreadable response");
    }
    kiln_load_tick *tk = tick_at(e, done_ns);
    if (tk && ok) {
        int64_t e2e = (done_ns - s->intended_ns) / 1000;
        tk->ok++;
        tk->e2e_sum_us += (double)e2e;
        if (e2e > tk->e2e_max_us) tk->e2e_max_us = e2e;
    } else if (tk) {
        tk->failed++;
    }
    const bool openai = e->cfg->api == KILN_LOAD_API_OPENAI_CHAT || e->cfg->api == KILN_LOAD_API_OPENAI_COMPLETIONS;
    bool estimated = false;
    const int64_t out = ok && openai ? output_tokens(s, &estimated) : 0;
    if (ok && in_window(e, done_ns)) {
        st->window_ok++;
        st->window_out_tokens += out;
    }
    if (!s->measured) return;
    if (done_ns > e->last_done_ns) e->last_done_ns = done_ns;
    st->sent++;
    int64_t lag = (s->sent_ns - s->intended_ns) / 1000;
    kiln_hist_record(st->hist[KILN_METRIC_LAG], lag);
    if (lag > KILN_LOAD_LATE_US) st->late++;
    if (!ok) {
        record_failure(e, kind, status, detail);
        return;
    }
    st->ok++;
    int64_t e2e = (done_ns - s->intended_ns) / 1000;
    kiln_hist_record(st->hist[KILN_METRIC_E2E], e2e);
    int64_t ttft = -1, tpot = -1, max_itl = -1;
    if (openai) {
        if (estimated) st->tokens_estimated++;
        else st->tokens_from_usage++;
        st->out_tokens += out;
        st->in_tokens += s->usage_in >= 0 ? s->usage_in : s->input_tokens;
        if (tk) tk->out_tokens += out;
        record_stream(e, s, out, &ttft, &tpot, &max_itl);
    }
    if (within_slo(e->cfg, e2e, ttft, tpot, max_itl)) st->good++;
}
