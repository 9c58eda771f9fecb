/* conn.c — kiln load's native HTTP/1.1 transport for http:// servers: one kept-alive, non-blocking
 * TCP connection per request slot, registered once with epoll (level-triggered, read interest; write
 * interest only while a request is partly written), the request written with one sendmsg, the
 * response read straight into the incremental parser of http1.c. Per request this costs one write
 * and one read system call, which is what lets one thread keep up with wrk while recording full
 * histograms. A kept-alive connection found dead before any response byte arrived is retried once on
 * a new connection (as browsers and libcurl do). Failures become request errors by kind. */
#include "load/load_internal.h"

#include "core/status.h"

#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <sys/epoll.h>
#include <sys/uio.h>
#include <unistd.h>

kiln_status load_native_prepare(load_target *t, const char *url) {
    CURLU *u = curl_url();
    char *host = NULL, *port = NULL, *path = NULL, *query = NULL, *scheme = NULL;
    kiln_status st = KILN_OK;
    if (!u || curl_url_set(u, CURLUPART_URL, url, 0) != CURLUE_OK) st = kiln_error(KILN_ERR_INVALID_ARGUMENT, "URL '%s' is not valid", url);
    if (st == KILN_OK) {
        curl_url_get(u, CURLUPART_SCHEME, &scheme, 0);
        curl_url_get(u, CURLUPART_HOST, &host, 0);
        curl_url_get(u, CURLUPART_PORT, &port, CURLU_DEFAULT_PORT);
        curl_url_get(u, CURLUPART_PATH, &path, 0);
        curl_url_get(u, CURLUPART_QUERY, &query, 0);
        if (!scheme || strcasecmp(scheme, "http"))
            st = kiln_error(KILN_ERR_INVALID_ARGUMENT, "the native transport speaks plain http:// only; use --transport curl for '%s'", url);
    }
    if (st == KILN_OK) {
        const kiln_load_config *c = t->cfg;
        const char *method = c->api != KILN_LOAD_API_HTTP ? "POST" : c->method ? c->method : c->body ? "POST" : "GET";
        t->head_method = !strcasecmp(method, "HEAD");
        kiln_strbuf *b = &t->request_head;
        kiln_strbuf_printf(b, "%s %s%s%s HTTP/1.1\r\nHost: %s", method, path && path[0] ? path : "/", query ? "?" : "", query ? query : "", host);
        char *explicit_port = NULL;
        if (curl_url_get(u, CURLUPART_PORT, &explicit_port, 0) == CURLUE_OK) kiln_strbuf_printf(b, ":%s", explicit_port);
        curl_free(explicit_port);
        kiln_strbuf_printf(b, "\r\nUser-Agent: kiln-load/%s\r\nAccept: */*\r\n", kiln_version());
        for (const struct curl_slist *h = t->headers; h; h = h->next) {
            const char *colon = strchr(h->data, ':');
            if (colon && colon[1 + strspn(colon + 1, " \t")] == '\0') continue; /* "Name:" removes a header (curl's rule) */
            kiln_strbuf_printf(b, "%s\r\n", h->data);
        }
        st = kiln_strbuf_status(b);
        /* the name is resolved once, now (up to 4 addresses, e.g. ::1 and 127.0.0.1 for localhost: a
         * connection tries them in turn); a failure is recorded against every request */
        char hostname[256];
        snprintf(hostname, sizeof hostname, "%s", host);
        size_t hl = strlen(hostname);
        if (hl > 1 && hostname[0] == '[' && hostname[hl - 1] == ']') { /* IPv6 literal */
            memmove(hostname, hostname + 1, hl - 2);
            hostname[hl - 2] = '\0';
        }
        struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *res = NULL;
        int rc = getaddrinfo(hostname, port, &hints, &res);
        for (struct addrinfo *a = rc == 0 ? res : NULL; a && t->naddrs < 4; a = a->ai_next) {
            if (a->ai_addrlen > sizeof t->addrs[0]) continue;
            memcpy(&t->addrs[t->naddrs], a->ai_addr, a->ai_addrlen);
            t->addrlens[t->naddrs++] = a->ai_addrlen;
        }
        if (!t->naddrs)
            snprintf(t->resolve_error, sizeof t->resolve_error, "cannot resolve '%s': %s", hostname, rc ? gai_strerror(rc) : "no address");
        if (res) freeaddrinfo(res);
        t->native = true;
    }
    curl_free(scheme);
    curl_free(host);
    curl_free(port);
    curl_free(path);
    curl_free(query);
    curl_url_cleanup(u);
    return st;
}

/* Sets the epoll interest of s's connection (read, plus write while `out`). */
static void watch(load_engine *e, load_slot *s, bool out, int op) {
    struct epoll_event ev = {.events = EPOLLIN | (out ? EPOLLOUT : 0u), .data.u64 = ((uint64_t)s->index << 2) | LOAD_TAG_NATIVE};
    epoll_ctl(e->epfd, op, s->fd, &ev);
    s->want_out = out;
}

void load_native_close(load_engine *e, load_slot *s) {
    if (s->fd < 0) return;
    epoll_ctl(e->epfd, EPOLL_CTL_DEL, s->fd, NULL);
    close(s->fd);
    s->fd = -1;
    s->connecting = s->reused = false;
}

/* Ends the request with an error of `kind`; the connection is closed (its state is unknown). */
static void fail(load_engine *e, load_slot *s, kiln_load_err kind, const char *what, int err) {
    char detail[200];
    snprintf(detail, sizeof detail, "%s%s%s (%.120s)", what, err ? ": " : "", err ? strerror(err) : "", e->tgt->url);
    load_native_close(e, s);
    load_engine_finish(e, s, kind, 0, detail);
}

static bool connect_failed(load_engine *e, load_slot *s, int err);

/* The error kind of a failed connect. */
static kiln_load_err connect_kind(int err) { return err == ECONNREFUSED ? KILN_LOADERR_REFUSED : err == ETIMEDOUT ? KILN_LOADERR_TIMEOUT : KILN_LOADERR_CONNECT; }

/* Opens a new connection for s to address k (of the target's, counted from the preferred one);
 * false (request failed) when that is impossible right away. */
static bool open_conn(load_engine *e, load_slot *s, int k) {
    load_target *t = e->tgt;
    if (!t->naddrs) {
        load_engine_finish(e, s, KILN_LOADERR_RESOLVE, 0, t->resolve_error);
        return false;
    }
    int a = (e->preferred_addr + k) % t->naddrs;
    s->addr_try = k;
    s->addr_index = a;
    s->fd = socket(t->addrs[a].ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (s->fd < 0) {
        fail(e, s, KILN_LOADERR_CONNECT, "socket", errno);
        return false;
    }
    int one = 1;
    setsockopt(s->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    s->reused = false;
    if (connect(s->fd, (const struct sockaddr *)&t->addrs[a], t->addrlens[a]) == 0) {
        s->connecting = false;
        e->preferred_addr = a;
        watch(e, s, false, EPOLL_CTL_ADD);
        return true;
    }
    if (errno != EINPROGRESS) {
        int err = errno;
        return connect_failed(e, s, err);
    }
    s->connecting = true;
    watch(e, s, true, EPOLL_CTL_ADD);
    return true;
}

/* A connect failed with err: tries the target's next address, or fails the request. Returns
 * whether a connection attempt is still under way. */
static bool connect_failed(load_engine *e, load_slot *s, int err) {
    if (s->addr_try + 1 < e->tgt->naddrs) {
        load_native_close(e, s);
        return open_conn(e, s, s->addr_try + 1);
    }
    fail(e, s, connect_kind(err), "connect", err);
    return false;
}

/* Writes what is left of the request; on a partial write waits for the socket to drain. */
static void send_more(load_engine *e, load_slot *s) {
    size_t head = s->out.len, total = head + s->body_len;
    while (s->sent < total) {
        struct iovec iov[2];
        int n = 0;
        if (s->sent < head) iov[n++] = (struct iovec){s->out.data + s->sent, head - s->sent};
        if (s->body_len) {
            size_t off = s->sent > head ? s->sent - head : 0;
            iov[n++] = (struct iovec){(void *)(s->body + off), s->body_len - off};
        }
        struct msghdr msg = {.msg_iov = iov, .msg_iovlen = (size_t)n};
        ssize_t w = sendmsg(s->fd, &msg, MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR) continue;
        if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            if (!s->want_out) watch(e, s, true, EPOLL_CTL_MOD);
            return;
        }
        if (w < 0) {
            int err = errno;
            if (s->reused && s->attempts == 1) { /* the server dropped the idle connection: retry once */
                load_native_close(e, s);
                load_native_start(e, s);
                return;
            }
            fail(e, s, KILN_LOADERR_CLOSED, "sending the request", err);
            return;
        }
        s->sent += (size_t)w;
    }
    if (s->want_out) watch(e, s, false, EPOLL_CTL_MOD);
}

void load_native_start(load_engine *e, load_slot *s) {
    s->attempts++;
    s->sent = 0;
    kiln_http1_reset(&s->parser, e->tgt->head_method);
    kiln_strbuf_clear(&s->out);
    kiln_strbuf_append(&s->out, e->tgt->request_head.data, e->tgt->request_head.len);
    if (s->body) kiln_strbuf_printf(&s->out, "Content-Length: %zu\r\n\r\n", s->body_len);
    else kiln_strbuf_puts(&s->out, "\r\n");
    if (kiln_strbuf_status(&s->out) != KILN_OK) {
        fail(e, s, KILN_LOADERR_OTHER, "out of memory", 0);
        return;
    }
    if (s->fd < 0 && !open_conn(e, s, 0)) return;
    if (s->fd >= 0 && !s->connecting) send_more(e, s);
}

/* Body bytes from the parser. */
static void on_body(void *user, const char *data, size_t n) { load_slot_body(user, data, n); }

/* The response is complete: keeps the connection for the next request when it is clean, closes it
 * otherwise, and finishes the request. */
static void complete(load_engine *e, load_slot *s, bool extra_bytes) {
    bool unsent = s->sent < s->out.len + s->body_len; /* answered before the body was sent */
    if (!s->parser.keep_alive || extra_bytes || unsent) load_native_close(e, s);
    else s->reused = true;
    s->infer_header_len = s->parser.infer_header_len;
    load_engine_finish(e, s, -1, s->parser.status, NULL);
}

/* The connection ended (EOF or reset) while s was waiting for its response. */
static void ended(load_engine *e, load_slot *s, int err) {
    if (kiln_http1_untouched(&s->parser) && s->reused && s->attempts == 1) { /* a stale kept-alive connection */
        load_native_close(e, s);
        load_native_start(e, s);
        return;
    }
    if (!err && kiln_http1_eof(&s->parser) == KILN_HTTP1_DONE) {
        complete(e, s, true);
        return;
    }
    bool malformed = !err && !kiln_http1_untouched(&s->parser) && s->parser.status == 0;
    fail(e, s, malformed ? KILN_LOADERR_MALFORMED : KILN_LOADERR_CLOSED,
         err ? "the connection was reset" : malformed ? "the reply is not valid HTTP" : "the server closed the connection", err);
}

/* Reads what the connection has and feeds it to the parser. */
static void receive(load_engine *e, load_slot *s) {
    char buf[65536];
    for (;;) {
        ssize_t n = read(s->fd, buf, sizeof buf);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
        if (!s->busy) { /* an idle connection: the server closed it, or sent something unasked */
            load_native_close(e, s);
            return;
        }
        if (n <= 0) {
            ended(e, s, n < 0 ? errno : 0);
            return;
        }
        s->now_ns = load_now_ns();
        size_t used;
        kiln_http1_result r = kiln_http1_feed(&s->parser, buf, (size_t)n, &used, on_body, s);
        if (r == KILN_HTTP1_ERROR) {
            char what[160];
            snprintf(what, sizeof what, "the reply is not valid HTTP: %s", s->parser.error);
            fail(e, s, KILN_LOADERR_MALFORMED, what, 0);
            return;
        }
        if (r == KILN_HTTP1_DONE) {
            complete(e, s, used < (size_t)n);
            return;
        }
        if ((size_t)n < sizeof buf) return; /* drained (level-triggered: more comes as an event) */
    }
}

void load_native_event(load_engine *e, load_slot *s, uint32_t events) {
    if (s->fd < 0) return;
    if (s->connecting) {
        if (!(events & (EPOLLOUT | EPOLLERR | EPOLLHUP))) return;
        int err = 0;
        socklen_t len = sizeof err;
        getsockopt(s->fd, SOL_SOCKET, SO_ERROR, &err, &len);
        if (err) {
            connect_failed(e, s, err);
            return;
        }
        s->connecting = false;
        e->preferred_addr = s->addr_index;
        send_more(e, s);
        return;
    }
    if ((events & EPOLLOUT) && s->busy && s->sent < s->out.len + s->body_len) send_more(e, s);
    if (s->fd >= 0 && (events & (EPOLLIN | EPOLLERR | EPOLLHUP))) receive(e, s);
}

void load_native_timeouts(load_engine *e, int64_t now_ns) {
    int64_t limit = (int64_t)(e->cfg->timeout_s * 1e9);
    for (int i = 0; i < e->nslots; i++) {
        load_slot *s = &e->slots[i];
        if (s->busy && now_ns - s->sent_ns > limit) fail(e, s, KILN_LOADERR_TIMEOUT, "no complete response within the timeout", 0);
    }
}
