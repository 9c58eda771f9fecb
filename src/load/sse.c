/* sse.c — the incremental Server-Sent Events parser of sse.h. */
#include "load/sse.h"

#include "core/status.h"

#include <string.h>

void kiln_sse_init(kiln_sse *s) { memset(s, 0, sizeof *s); }

void kiln_sse_reset(kiln_sse *s) {
    kiln_strbuf_clear(&s->line);
    kiln_strbuf_clear(&s->data);
    s->has_data = false;
    s->after_cr = false;
}

void kiln_sse_free(kiln_sse *s) {
    kiln_strbuf_free(&s->line);
    kiln_strbuf_free(&s->data);
    kiln_sse_init(s);
}

bool kiln_sse_pending(const kiln_sse *s) { return s->has_data || s->line.len > 0; }

/* Handles one complete line (without its terminator): a blank line dispatches the event. */
static kiln_status end_line(kiln_sse *s, const char *line, size_t n, kiln_sse_event_fn fn, void *user) {
    if (n == 0) {
        if (!s->has_data) return KILN_OK;
        s->has_data = false;
        kiln_strbuf_putc(&s->data, '\0'); /* make sure data is allocated and terminated */
        KILN_TRY(kiln_strbuf_status(&s->data));
        size_t len = s->data.len - 1;
        kiln_status st = fn(user, s->data.data, len);
        kiln_strbuf_clear(&s->data);
        return st;
    }
    if (line[0] == ':') return KILN_OK; /* comment */
    const char *colon = memchr(line, ':', n);
    size_t flen = colon ? (size_t)(colon - line) : n;
    if (flen != 4 || memcmp(line, "data", 4)) return KILN_OK; /* event, id, retry: not needed */
    const char *v = colon ? colon + 1 : line + n;
    size_t vlen = (size_t)(line + n - v);
    if (vlen && v[0] == ' ') { v++; vlen--; }
    if (s->has_data) kiln_strbuf_putc(&s->data, '\n');
    kiln_strbuf_append(&s->data, v, vlen);
    s->has_data = true;
    return kiln_strbuf_status(&s->data);
}

kiln_status kiln_sse_feed(kiln_sse *s, const char *buf, size_t n, kiln_sse_event_fn fn, void *user) {
    size_t i = 0;
    while (i < n) {
        if (s->after_cr) {
            s->after_cr = false;
            if (buf[i] == '\n') { i++; continue; }
        }
        size_t j = i;
        while (j < n && buf[j] != '\n' && buf[j] != '\r') j++;
        if (j == n) { /* no terminator: keep the partial line */
            if (s->line.len + (n - i) > KILN_SSE_MAX_LINE)
                return kiln_error(KILN_ERR_PARSE, "event stream: a line longer than %u bytes", KILN_SSE_MAX_LINE);
            kiln_strbuf_append(&s->line, buf + i, n - i);
            return kiln_strbuf_status(&s->line);
        }
        s->after_cr = buf[j] == '\r';
        kiln_status st;
        if (s->line.len) { /* finish a line begun in an earlier feed */
            kiln_strbuf_append(&s->line, buf + i, j - i);
            KILN_TRY(kiln_strbuf_status(&s->line));
            st = end_line(s, s->line.data, s->line.len, fn, user);
            kiln_strbuf_clear(&s->line);
        } else {
            st = end_line(s, buf + i, j - i, fn, user);
        }
        if (st != KILN_OK) return st;
        i = j + 1;
    }
    return KILN_OK;
}
