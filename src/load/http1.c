/* http1.c — the incremental HTTP/1.1 response parser of http1.h. The header block is parsed in
 * place when it arrives whole in one read (the common case) and copied only when it is split; the
 * body is decoded by a small state machine (length, chunk size line, chunk data, chunk CRLF,
 * trailers, until-close). */
#include "load/http1.h"

#include <stdio.h>
#include <string.h>
#include <strings.h>

enum { S_HEAD, S_LENGTH, S_CHUNK_SIZE, S_CHUNK_DATA, S_CHUNK_CRLF, S_TRAILER, S_CLOSE, S_DONE };

void kiln_http1_reset(kiln_http1_parser *p, bool head_request) {
    kiln_strbuf head = p->head;
    kiln_strbuf_clear(&head);
    memset(p, 0, sizeof *p);
    p->head = head;
    p->infer_header_len = -1;
    p->head_request = head_request;
}

void kiln_http1_free(kiln_http1_parser *p) { kiln_strbuf_free(&p->head); }

bool kiln_http1_untouched(const kiln_http1_parser *p) { return p->seen == 0; }

/* Sets the error message and returns KILN_HTTP1_ERROR. */
static kiln_http1_result fail(kiln_http1_parser *p, const char *why) {
    snprintf(p->error, sizeof p->error, "%s", why);
    return KILN_HTTP1_ERROR;
}

/* Parses a non-negative decimal header value; false if it is not one. */
static bool parse_len(const char *v, size_t n, int64_t *out) {
    int64_t x = 0;
    if (n == 0 || n > 18) return false;
    for (size_t i = 0; i < n; i++) {
        if (v[i] < '0' || v[i] > '9') return false;
        x = x * 10 + (v[i] - '0');
    }
    *out = x;
    return true;
}

/* True when the comma-separated header value contains `token` (case-insensitive). */
static bool has_token(const char *v, size_t n, const char *token) {
    size_t m = strlen(token);
    for (size_t i = 0; i + m <= n; i++)
        if (!strncasecmp(v + i, token, m) && (i == 0 || v[i - 1] == ',' || v[i - 1] == ' ') &&
            (i + m == n || v[i + m] == ',' || v[i + m] == ' ' || v[i + m] == ';'))
            return true;
    return false;
}

/* Parses the header block h[0..n) (ending in CRLFCRLF) and picks the body's framing. */
static kiln_http1_result parse_head(kiln_http1_parser *p, const char *h, size_t n) {
    if (n < 16 || memcmp(h, "HTTP/1.", 7) || (h[7] != '0' && h[7] != '1') || h[8] != ' ' || h[9] < '1' || h[9] > '5' ||
        h[10] < '0' || h[10] > '9' || h[11] < '0' || h[11] > '9' || (h[12] != ' ' && h[12] != '\r'))
        return fail(p, "not an HTTP/1.x status line");
    p->status = (h[9] - '0') * 100 + (h[10] - '0') * 10 + (h[11] - '0');
    p->keep_alive = h[7] == '1';
    bool chunked = false, have_len = false;
    int64_t len = 0;
    const char *line = memchr(h, '\n', n) + 1, *end = h + n;
    while (line < end) {
        const char *nl = memchr(line, '\n', (size_t)(end - line));
        if (!nl || nl == line || nl[-1] != '\r') return fail(p, "a header line without CRLF");
        size_t ll = (size_t)(nl - 1 - line);
        if (ll == 0) break; /* the blank line */
        const char *colon = memchr(line, ':', ll);
        if (!colon || colon == line) return fail(p, "a header line without a name");
        size_t nlen = (size_t)(colon - line);
        const char *v = colon + 1, *vend = line + ll;
        while (v < vend && (*v == ' ' || *v == '\t')) v++;
        while (vend > v && (vend[-1] == ' ' || vend[-1] == '\t')) vend--;
        size_t vlen = (size_t)(vend - v);
        if (nlen == 14 && !strncasecmp(line, "content-length", 14)) {
            int64_t x;
            if (!parse_len(v, vlen, &x) || (have_len && x != len)) return fail(p, "a bad Content-Length");
            len = x;
            have_len = true;
        } else if (nlen == 17 && !strncasecmp(line, "transfer-encoding", 17)) {
            chunked = has_token(v, vlen, "chunked");
        } else if (nlen == 10 && !strncasecmp(line, "connection", 10)) {
            if (has_token(v, vlen, "close")) p->keep_alive = false;
            else if (has_token(v, vlen, "keep-alive")) p->keep_alive = true;
        } else if (nlen == 31 && !strncasecmp(line, "inference-header-content-length", 31)) {
            if (!parse_len(v, vlen, &p->infer_header_len)) return fail(p, "a bad Inference-Header-Content-Length");
        }
        line = nl + 1;
    }
    if (p->status < 200) { /* interim response: the real one follows */
        p->status = 0;
        p->infer_header_len = -1;
        return KILN_HTTP1_MORE;
    }
    if (p->head_request || p->status == 204 || p->status == 304) p->state = S_DONE;
    else if (chunked) p->state = S_CHUNK_SIZE;
    else if (have_len) p->state = len ? S_LENGTH : S_DONE, p->remaining = len;
    else p->state = S_CLOSE, p->keep_alive = false;
    return KILN_HTTP1_MORE;
}

/* Handles the header state: finds the end of the header block in the saved bytes plus buf. */
static kiln_http1_result feed_head(kiln_http1_parser *p, const char *buf, size_t n, size_t *used) {
    if (p->head.len == 0) { /* fast path: the whole block in this piece */
        const char *e = memmem(buf, n, "\r\n\r\n", 4);
        if (e) {
            *used = (size_t)(e - buf) + 4;
            return parse_head(p, buf, *used);
        }
    }
    size_t old = p->head.len;
    size_t take = n < KILN_HTTP1_MAX_HEAD + 4 - old ? n : KILN_HTTP1_MAX_HEAD + 4 - old;
    kiln_strbuf_append(&p->head, buf, take);
    if (kiln_strbuf_status(&p->head) != KILN_OK) return fail(p, "out of memory");
    size_t from = old > 3 ? old - 3 : 0;
    const char *e = memmem(p->head.data + from, p->head.len - from, "\r\n\r\n", 4);
    if (!e) {
        if (p->head.len > KILN_HTTP1_MAX_HEAD) return fail(p, "a header block over 64 KiB");
        *used = take;
        return KILN_HTTP1_MORE;
    }
    size_t hlen = (size_t)(e - p->head.data) + 4;
    *used = hlen - old;
    kiln_http1_result r = parse_head(p, p->head.data, hlen);
    kiln_strbuf_clear(&p->head);
    return r;
}

/* Reads a line up to its LF: its first sizeof p->line - 1 bytes into p->line, all of them counted in
 * p->linelen (so that what is known of a line does not depend on how its bytes were split), its last byte
 * before the LF in p->line_last. False while incomplete; *used counts consumed bytes. */
static bool take_line(kiln_http1_parser *p, const char *buf, size_t n, size_t *used) {
    for (size_t i = 0; i < n; i++) {
        char c = buf[i];
        if (c == '\n') {
            *used = i + 1;
            return true;
        }
        if (p->linelen < sizeof p->line - 1) p->line[p->linelen] = c;
        p->linelen++;
        p->line_last = c;
    }
    *used = n;
    return false;
}

/* Parses the chunk-size line taken by take_line: hex digits (at most 15), then CRLF or ';' and chunk
 * extensions of any length (ignored) before the CRLF; false if malformed. */
static bool chunk_size(kiln_http1_parser *p, int64_t *out) {
    if (p->linelen == 0 || p->line_last != '\r') return false;
    size_t cr = p->linelen - 1; /* the digits end at ';' or at the CR */
    int64_t x = 0;
    size_t i = 0;
    for (; i < cr && p->line[i] != ';'; i++) { /* i < 15 < sizeof p->line - 1: inside what was kept */
        char c = p->line[i];
        int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
        if (d < 0 || i >= 15) return false;
        x = x * 16 + d;
    }
    *out = x;
    return i > 0;
}

kiln_http1_result kiln_http1_feed(kiln_http1_parser *p, const char *buf, size_t n, size_t *consumed, kiln_http1_body_fn fn, void *user) {
    size_t pos = 0;
    p->seen += n;
    while (pos < n && p->state != S_DONE) {
        size_t used = 0;
        switch (p->state) {
        case S_HEAD: {
            kiln_http1_result r = feed_head(p, buf + pos, n - pos, &used);
            if (r == KILN_HTTP1_ERROR) return r;
            break;
        }
        case S_LENGTH:
        case S_CHUNK_DATA:
            used = (int64_t)(n - pos) < p->remaining ? n - pos : (size_t)p->remaining;
            fn(user, buf + pos, used);
            p->remaining -= (int64_t)used;
            if (p->remaining == 0) p->state = p->state == S_LENGTH ? S_DONE : S_CHUNK_CRLF;
            break;
        case S_CHUNK_CRLF: /* "\r\n" after chunk data, possibly split */
            if (buf[pos] != (p->linelen == 0 ? '\r' : '\n')) return fail(p, "chunk data not followed by CRLF");
            used = 1;
            if (++p->linelen == 2) p->linelen = 0, p->state = S_CHUNK_SIZE;
            break;
        case S_CHUNK_SIZE:
            if (take_line(p, buf + pos, n - pos, &used)) {
                int64_t size;
                if (!chunk_size(p, &size)) return fail(p, "a bad chunk size line");
                p->linelen = 0;
                p->remaining = size;
                p->state = size ? S_CHUNK_DATA : S_TRAILER;
            }
            break;
        case S_TRAILER: /* trailer fields are not needed: wait for the blank line */
            if (take_line(p, buf + pos, n - pos, &used)) {
                bool blank = p->linelen == 1 && p->line_last == '\r';
                if (p->linelen == 0) return fail(p, "a trailer line without CRLF");
                p->linelen = 0;
                if (blank) p->state = S_DONE;
            }
            break;
        case S_CLOSE:
            used = n - pos;
            fn(user, buf + pos, used);
            break;
        }
        pos += used;
    }
    *consumed = pos;
    return p->state == S_DONE ? KILN_HTTP1_DONE : KILN_HTTP1_MORE;
}

kiln_http1_result kiln_http1_eof(kiln_http1_parser *p) {
    if (p->state == S_CLOSE || p->state == S_DONE) {
        p->state = S_DONE;
        return KILN_HTTP1_DONE;
    }
    return fail(p, p->state == S_HEAD ? "the connection closed before a complete header block"
                                      : "the connection closed in the middle of the body");
}
