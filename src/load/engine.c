/* engine.c — the load generator's event loop: one thread, one epoll set holding the native
 * transport's connections (conn.c) or the sockets of a curl multi handle (driven through
 * curl_multi_socket_action; also used for /metrics scrapes), and a timerfd for sub-millisecond send
 * times. It keeps the
 * schedule (open loop: intended send times, constant or Poisson; closed loop: refill on every
 * completion), a backlog of requests whose time has come but that have no free connection yet
 * (they keep their intended time: waiting is part of their latency), and hands finished requests
 * to record.c. */
#include "load/load_internal.h"

#include "core/status.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/epoll.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

int64_t load_now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* curl's socket callback: mirrors the sockets curl wants watched into the epoll set. */
static int on_socket(CURL *easy, curl_socket_t fd, int what, void *userp, void *socketp) {
    load_engine *e = userp;
    if (what == CURL_POLL_REMOVE) {
        epoll_ctl(e->epfd, EPOLL_CTL_DEL, fd, NULL);
        curl_multi_assign(e->multi, fd, NULL);
        return 0;
    }
    struct epoll_event ev = {.events = ((what & CURL_POLL_IN) ? EPOLLIN : 0u) | ((what & CURL_POLL_OUT) ? EPOLLOUT : 0u),
                             .data.u64 = ((uint64_t)fd << 2) | LOAD_TAG_CURL};
    if (socketp) {
        epoll_ctl(e->epfd, EPOLL_CTL_MOD, fd, &ev);
    } else {
        epoll_ctl(e->epfd, EPOLL_CTL_ADD, fd, &ev);
        curl_multi_assign(e->multi, fd, e); /* any non-NULL marks it as registered */
    }
    return 0;
}

/* curl's timer callback: remembers when curl wants curl_multi_socket_action(CURL_SOCKET_TIMEOUT). */
static int on_timer(CURLM *multi, long timeout_ms, void *userp) {
    load_engine *e = userp;
    e->curl_deadline_ns = timeout_ms < 0 ? -1 : load_now_ns() + (int64_t)timeout_ms * 1000000;
    return 0;
}

void load_slot_body(load_slot *s, const char *data, size_t n) {
    s->resp_bytes += n;
    switch (s->eng->cfg->api) {
    case KILN_LOAD_API_OPENAI_CHAT:
    case KILN_LOAD_API_OPENAI_COMPLETIONS:
        load_openai_body(s, data, n);
        break;
    case KILN_LOAD_API_KSERVE: kiln_strbuf_append(&s->resp, data, n); break;
    case KILN_LOAD_API_HTTP: break; /* counted, not kept */
    }
}

/* libcurl's body sink: timestamps the bytes and hands them on. */
static size_t on_write(char *data, size_t size, size_t nmemb, void *userp) {
    load_slot *s = userp;
    s->now_ns = load_now_ns();
    load_slot_body(s, data, size * nmemb);
    return size * nmemb;
}

/* Prepares slot s; for libcurl, sets the options of its easy handle that stay the same for every
 * request. */
static kiln_status slot_setup(load_engine *e, load_slot *s) {
    const kiln_load_config *c = e->cfg;
    s->eng = e;
    s->fd = -1;
    if (e->tgt->native) return KILN_OK;
    CURL *h = curl_easy_init();
    if (!h) return kiln_error(KILN_ERR_OUT_OF_MEMORY, "curl_easy_init failed");
    s->h = h;
    s->eng = e;
    long timeout_ms = (long)(c->timeout_s * 1000);
    curl_easy_setopt(h, CURLOPT_URL, e->tgt->url);
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, e->tgt->headers);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_write);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, s);
    curl_easy_setopt(h, CURLOPT_PRIVATE, s);
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h, CURLOPT_TCP_NODELAY, 1L);
    curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, timeout_ms);
    curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, timeout_ms < 10000 ? timeout_ms : 10000L);
    curl_easy_setopt(h, CURLOPT_HTTP_VERSION, (long)CURL_HTTP_VERSION_1_1);
    curl_easy_setopt(h, CURLOPT_PROXY, ""); /* never through a proxy from the environment */
    curl_easy_setopt(h, CURLOPT_PATH_AS_IS, 1L);
    if (c->api == KILN_LOAD_API_HTTP) {
        if (c->body) {
            curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)c->body_len);
            curl_easy_setopt(h, CURLOPT_POSTFIELDS, c->body);
        }
        if (c->method && !strcasecmp(c->method, "HEAD")) curl_easy_setopt(h, CURLOPT_NOBODY, 1L);
        else if (c->method) curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, c->method);
    } else if (c->api == KILN_LOAD_API_KSERVE) {
        curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)e->tgt->payload.len);
        curl_easy_setopt(h, CURLOPT_POSTFIELDS, e->tgt->payload.data);
    }
    return KILN_OK;
}

kiln_status load_engine_init(load_engine *e, const kiln_load_config *cfg, load_target *t, int nslots, int thread_index,
                             int threads) {
    memset(e, 0, sizeof *e);
    e->cfg = cfg;
    e->tgt = t;
    e->thread_index = thread_index;
    e->threads = threads;
    e->requests = cfg->requests / threads + (thread_index < cfg->requests % threads);
    e->next_prompt = thread_index; /* the loops take prompts in turn from different places */
    e->epfd = e->tfd = -1;
    e->curl_deadline_ns = e->armed_ns = -1;
    kiln_rng_seed(&e->rng, cfg->seed + (uint64_t)thread_index);
    e->epfd = epoll_create1(EPOLL_CLOEXEC);
    e->tfd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
    if (e->epfd < 0 || e->tfd < 0) {
        load_engine_free(e);
        return kiln_error(KILN_ERR_IO, "cannot create the event loop: %s", strerror(errno));
    }
    struct epoll_event ev = {.events = EPOLLIN, .data.u64 = LOAD_TAG_TIMER};
    epoll_ctl(e->epfd, EPOLL_CTL_ADD, e->tfd, &ev);
    e->multi = curl_multi_init();
    e->slots = calloc((size_t)nslots, sizeof *e->slots);
    e->free_slots = malloc((size_t)nslots * sizeof *e->free_slots);
    if (!e->multi || !e->slots || !e->free_slots) {
        load_engine_free(e);
        return kiln_error(KILN_ERR_OUT_OF_MEMORY, "out of memory for %d connections", nslots);
    }
    curl_multi_setopt(e->multi, CURLMOPT_SOCKETFUNCTION, on_socket);
    curl_multi_setopt(e->multi, CURLMOPT_SOCKETDATA, e);
    curl_multi_setopt(e->multi, CURLMOPT_TIMERFUNCTION, on_timer);
    curl_multi_setopt(e->multi, CURLMOPT_TIMERDATA, e);
    curl_multi_setopt(e->multi, CURLMOPT_MAXCONNECTS, (long)nslots + 1);
    e->nslots = nslots;
    for (int i = 0; i < nslots; i++) {
        e->slots[i].index = i;
        kiln_status s = slot_setup(e, &e->slots[i]);
        if (s != KILN_OK) {
            load_engine_free(e);
            return s;
        }
        e->free_slots[e->nfree++] = nslots - 1 - i;
    }
    return KILN_OK;
}

void load_engine_free(load_engine *e) {
    for (int i = 0; i < e->nslots && e->slots; i++) {
        load_slot *s = &e->slots[i];
        load_native_close(e, s);
        kiln_strbuf_free(&s->out);
        kiln_http1_free(&s->parser);
        if (s->h) {
            if (s->busy && e->multi) curl_multi_remove_handle(e->multi, s->h);
            curl_easy_cleanup(s->h);
        }
        kiln_strbuf_free(&s->req);
        kiln_strbuf_free(&s->resp);
        kiln_sse_free(&s->sse);
        free(s->tok_ns);
    }
    if (e->scrape_h) {
        if (e->scrape_busy && e->multi) curl_multi_remove_handle(e->multi, e->scrape_h);
        curl_easy_cleanup(e->scrape_h);
    }
    kiln_strbuf_free(&e->scrape_body);
    if (e->multi) curl_multi_cleanup(e->multi);
    if (e->epfd >= 0) close(e->epfd);
    if (e->tfd >= 0) close(e->tfd);
    free(e->slots);
    free(e->free_slots);
    free(e->queue);
    memset(e, 0, sizeof *e);
    e->epfd = e->tfd = -1;
}

/* Starts a request with the given intended send time in a free slot. */
static void start_request(load_engine *e, int64_t intended_ns) {
    KILN_ASSERT(e->nfree > 0);
    load_slot *s = &e->slots[e->free_slots[--e->nfree]];
    s->busy = true;
    s->intended_ns = intended_ns;
    s->measured = intended_ns >= e->window_start_ns;
    s->first_token_ns = s->last_token_ns = 0;
    s->resp_bytes = s->content_bytes = 0;
    s->ntok = 0;
    s->usage_in = s->usage_out = -1;
    s->done_marker = s->malformed = false;
    s->detail[0] = '\0';
    kiln_strbuf_clear(&s->resp);
    kiln_sse_reset(&s->sse);
    s->infer_header_len = -1;
    s->attempts = 0;
    s->now_ns = 0;
    s->body = e->tgt->body;
    s->body_len = e->tgt->body_len;
    if (e->cfg->api == KILN_LOAD_API_OPENAI_CHAT || e->cfg->api == KILN_LOAD_API_OPENAI_COMPLETIONS) {
        load_openai_build(e, s);
        s->body = s->req.data;
        s->body_len = s->req.len;
        if (!e->tgt->native) {
            curl_easy_setopt(s->h, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)s->req.len);
            curl_easy_setopt(s->h, CURLOPT_POSTFIELDS, s->req.data);
        }
    }
    s->sent_ns = load_now_ns();
    load_record_sent(e, s->sent_ns);
    if (e->tgt->native) load_native_start(e, s);
    else curl_multi_add_handle(e->multi, s->h);
}

void load_engine_finish(load_engine *e, load_slot *s, int err, long status, const char *detail) {
    load_record_done(e, s, load_now_ns(), err, status, detail);
    s->busy = false;
    e->free_slots[e->nfree++] = s->index;
}

/* Appends an intended send time to the backlog. */
static bool queue_push(load_engine *e, int64_t t) {
    if (e->qcount == e->qcap) {
        int64_t cap = e->qcap ? e->qcap * 2 : 1024;
        int64_t *q = malloc((size_t)cap * sizeof *q);
        if (!q) return false;
        for (int64_t i = 0; i < e->qcount; i++) q[i] = e->queue[(e->qhead + i) % e->qcap];
        free(e->queue);
        e->queue = q;
        e->qcap = cap;
        e->qhead = 0;
    }
    e->queue[(e->qhead + e->qcount) % e->qcap] = t;
    e->qcount++;
    return true;
}

/* True when the measured window is over for a request scheduled (or started) at t. */
static bool window_closed(load_engine *e, int64_t t) {
    return t >= e->window_start_ns && (t >= e->window_end_ns || (e->requests > 0 && e->step->scheduled >= e->requests));
}

/* Counts a newly scheduled request in its phase. */
static void count_scheduled(load_engine *e, int64_t t) {
    if (t >= e->window_start_ns) e->step->scheduled++;
    else e->step->warmup_requests++;
    e->issued++;
}

/* Open loop: moves every request whose intended time has come into the backlog, then starts as
 * many as there are free slots. */
static void open_loop_advance(load_engine *e, int64_t now) {
    while (!e->sched_done && e->next_ns <= now) {
        int64_t t = e->next_ns;
        if (window_closed(e, t)) {
            e->sched_done = true;
            e->sched_end_ns = t;
            break;
        }
        count_scheduled(e, t);
        if (!queue_push(e, t)) load_record_not_sent(e, t); /* out of memory: counted, not lost */
        if (e->cfg->poisson) e->next_ns = t + (int64_t)kiln_rng_exponential(&e->rng, e->mean_gap_ns);
        else e->next_ns = e->first_ns + (int64_t)llround((double)e->issued * e->mean_gap_ns);
    }
    while (e->qcount > 0 && e->nfree > 0) {
        int64_t t = e->queue[e->qhead];
        e->qhead = (e->qhead + 1) % e->qcap;
        e->qcount--;
        start_request(e, t);
    }
}

/* Closed loop: fills every free slot with a request sent now. */
static void closed_loop_advance(load_engine *e) {
    while (!e->sched_done && e->nfree > 0) {
        int64_t now = load_now_ns(); /* requests can fail at once (refused): time moves on meanwhile */
        if (window_closed(e, now)) {
            e->sched_done = true;
            e->sched_end_ns = now;
            break;
        }
        count_scheduled(e, now);
        start_request(e, now);
    }
}

/* Hands every finished curl transfer to the recorder (or the scraper) and frees its slot. */
static void reap(load_engine *e) {
    CURLMsg *m;
    int left;
    while ((m = curl_multi_info_read(e->multi, &left))) {
        if (m->msg != CURLMSG_DONE) continue;
        CURL *h = m->easy_handle;
        CURLcode rc = m->data.result;
        if (h == e->scrape_h) {
            curl_multi_remove_handle(e->multi, h);
            load_scrape_done(e, rc);
            continue;
        }
        load_slot *s = NULL;
        long status = 0;
        curl_easy_getinfo(h, CURLINFO_PRIVATE, (char **)&s);
        curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &status);
        struct curl_header *hd;
        if (e->cfg->api == KILN_LOAD_API_KSERVE &&
            curl_easy_header(h, "Inference-Header-Content-Length", 0, CURLH_HEADER, -1, &hd) == CURLHE_OK) {
            char *end;
            long long v = strtoll(hd->value, &end, 10);
            s->infer_header_len = end != hd->value && v >= 0 ? v : INT64_MAX; /* INT64_MAX: unreadable */
        }
        char detail[200] = "";
        int err = -1;
        if (rc != CURLE_OK) {
            err = (int)load_curl_error_kind(h, rc);
            snprintf(detail, sizeof detail, "%s%s (%.120s)", err == KILN_LOADERR_MALFORMED ? "the reply is not valid HTTP: " : "",
                     curl_easy_strerror(rc), e->tgt->url);
        }
        curl_multi_remove_handle(e->multi, h);
        load_engine_finish(e, s, err, status, detail);
    }
}

/* Arms the timerfd for an absolute CLOCK_MONOTONIC deadline (if it changed). */
static void arm_timer(load_engine *e, int64_t deadline) {
    if (deadline == e->armed_ns) return;
    struct itimerspec its = {.it_value = {.tv_sec = deadline / 1000000000, .tv_nsec = deadline % 1000000000}};
    timerfd_settime(e->tfd, TFD_TIMER_ABSTIME, &its, NULL);
    e->armed_ns = deadline;
}

/* Prints one progress line on stderr. */
static void progress(load_engine *e, int64_t now) {
    const kiln_load_step *st = e->step;
    double t = (double)(now - e->window_start_ns) / 1e9;
    char share[48] = "";
    if (e->threads > 1) snprintf(share, sizeof share, "  (event loop 1 of %d)", e->threads);
    fprintf(stderr, "kiln load: %s %6.1f s  scheduled %lld  ok %lld  failed %lld  in flight %d  queued %lld%s\n",
            t < 0 ? "warm-up" : "measure", t < 0 ? -t : t, (long long)st->scheduled, (long long)st->ok,
            (long long)st->failed, e->nslots - e->nfree, (long long)e->qcount, share);
}

/* One pass of waiting and dispatching socket events and curl's timeout. */
static void poll_once(load_engine *e, int64_t deadline) {
    int64_t now = load_now_ns();
    int timeout_ms = 1000;
    if (deadline <= now) timeout_ms = 0;
    else if (deadline < now + 1000000000) arm_timer(e, deadline);
    struct epoll_event evs[128];
    int n = epoll_wait(e->epfd, evs, 128, timeout_ms);
    int running;
    for (int i = 0; i < n; i++) {
        uint64_t tag = evs[i].data.u64 & 3, index = evs[i].data.u64 >> 2;
        uint32_t ev = evs[i].events;
        if (tag == LOAD_TAG_TIMER) {
            uint64_t expirations;
            if (read(e->tfd, &expirations, sizeof expirations) < 0) { /* EAGAIN: already drained */ }
            e->armed_ns = -1;
        } else if (tag == LOAD_TAG_NATIVE) {
            load_native_event(e, &e->slots[index], ev);
        } else {
            int flags = ((ev & EPOLLIN) ? CURL_CSELECT_IN : 0) | ((ev & EPOLLOUT) ? CURL_CSELECT_OUT : 0) |
                        ((ev & (EPOLLERR | EPOLLHUP)) ? CURL_CSELECT_ERR : 0);
            curl_multi_socket_action(e->multi, (curl_socket_t)index, flags, &running);
        }
    }
    if (e->curl_deadline_ns >= 0 && load_now_ns() >= e->curl_deadline_ns) {
        e->curl_deadline_ns = -1;
        curl_multi_socket_action(e->multi, CURL_SOCKET_TIMEOUT, 0, &running);
    }
    reap(e);
}

kiln_status load_engine_run_step(load_engine *e, double rate, int64_t t0_ns, kiln_load_step *step) {
    const kiln_load_config *c = e->cfg;
    e->step = step;
    e->open_loop = rate > 0;
    step->open_loop = e->open_loop;
    step->poisson = e->open_loop && c->poisson;
    step->rate = rate / e->threads;
    step->concurrency = e->open_loop ? 0 : e->nslots;
    step->warmup_s = c->warmup_s;
    e->mean_gap_ns = e->open_loop ? 1e9 * e->threads / rate : 0;
    e->t0_ns = t0_ns;
    e->first_ns = e->t0_ns + (e->open_loop ? (int64_t)llround(1e9 / rate * e->thread_index) : 0);
    e->next_ns = e->first_ns;
    e->window_start_ns = e->t0_ns + (int64_t)(c->warmup_s * 1e9);
    e->window_end_ns = c->duration_s > 0 ? e->window_start_ns + (int64_t)(c->duration_s * 1e9) : INT64_MAX;
    e->next_scrape_ns = e->t0_ns;
    int64_t next_progress = e->t0_ns + 1000000000, drain_deadline = INT64_MAX, next_timeout_scan = e->t0_ns;
    for (;;) {
        int64_t now = load_now_ns();
        if (e->open_loop) open_loop_advance(e, now);
        else closed_loop_advance(e);
        if (e->sched_done && drain_deadline == INT64_MAX) drain_deadline = now + (int64_t)(c->timeout_s * 1e9);
        if (now >= drain_deadline && e->qcount > 0) { /* the server never freed a connection for these */
            for (; e->qcount > 0; e->qcount--, e->qhead = (e->qhead + 1) % e->qcap)
                load_record_not_sent(e, e->queue[e->qhead]);
        }
        int inflight = e->nslots - e->nfree;
        if (e->sched_done && inflight == 0 && e->qcount == 0) break;
        if (e->tgt->native && inflight && now >= next_timeout_scan) { /* the native transport's timeouts, every 10 ms */
            load_native_timeouts(e, now);
            next_timeout_scan = now + 10000000;
        }
        load_scrape_maybe_start(e, now);
        if (c->progress && e->thread_index == 0 && now >= next_progress) {
            progress(e, now);
            next_progress += 1000000000;
        }
        int64_t dl = e->curl_deadline_ns >= 0 ? e->curl_deadline_ns : INT64_MAX;
        if (!e->sched_done) dl = e->open_loop ? (e->next_ns < dl ? e->next_ns : dl) : (e->window_end_ns < dl ? e->window_end_ns : dl);
        if (e->qcount > 0 && drain_deadline < dl) dl = drain_deadline;
        if (e->tgt->metrics_url[0] && e->thread_index == 0 && !e->scrape_busy && e->next_scrape_ns < dl) dl = e->next_scrape_ns;
        if (c->progress && e->thread_index == 0 && next_progress < dl) dl = next_progress;
        if (e->tgt->native && inflight && next_timeout_scan < dl) dl = next_timeout_scan;
        poll_once(e, dl);
    }
    if (e->scrape_busy) { /* the run is over: drop a scrape still in flight */
        curl_multi_remove_handle(e->multi, e->scrape_h);
        e->scrape_busy = false;
    }
    int64_t end = e->sched_end_ns < e->window_end_ns ? e->sched_end_ns : e->window_end_ns;
    step->window_s = end > e->window_start_ns ? (double)(end - e->window_start_ns) / 1e9 : 0;
    step->elapsed_s = e->last_done_ns > e->window_start_ns ? (double)(e->last_done_ns - e->window_start_ns) / 1e9 : 0;
    return KILN_OK;
}
