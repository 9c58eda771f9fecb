/* strbuf.c — the growable buffer of strbuf.h (sticky out-of-memory flag instead of per-call
 * errors, so writers can append freely and check once). */
#include "core/strbuf.h"

#include "core/file.h"
#include "core/status.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void kiln_strbuf_init(kiln_strbuf *b) { memset(b, 0, sizeof *b); }

void kiln_strbuf_free(kiln_strbuf *b) {
    free(b->data);
    kiln_strbuf_init(b);
}

void kiln_strbuf_clear(kiln_strbuf *b) {
    b->len = 0;
    b->failed = false;
    if (b->data) b->data[0] = 0;
}

/* Makes room for `extra` more bytes plus the NUL; false (and `failed` set) on out of memory. */
static bool reserve(kiln_strbuf *b, size_t extra) {
    if (b->failed) return false;
    if (extra > SIZE_MAX / 2 - b->len) {
        b->failed = true;
        return false;
    }
    size_t need = b->len + extra + 1;
    if (need <= b->cap) return true;
    size_t cap = b->cap ? b->cap : 256;
    while (cap < need) cap *= 2;
    char *p = realloc(b->data, cap);
    if (!p) {
        b->failed = true;
        return false;
    }
    b->data = p;
    b->cap = cap;
    return true;
}

void kiln_strbuf_append(kiln_strbuf *b, const void *s, size_t n) {
    if (!reserve(b, n)) return;
    if (n) memcpy(b->data + b->len, s, n);
    b->len += n;
    b->data[b->len] = 0;
}

void kiln_strbuf_puts(kiln_strbuf *b, const char *s) { kiln_strbuf_append(b, s, strlen(s)); }

void kiln_strbuf_putc(kiln_strbuf *b, char c) { kiln_strbuf_append(b, &c, 1); }

void kiln_strbuf_printf(kiln_strbuf *b, const char *fmt, ...) {
    char small[256];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(small, sizeof small, fmt, ap);
    va_end(ap);
    if (n < 0) {
        b->failed = true;
        return;
    }
    if ((size_t)n < sizeof small) {
        kiln_strbuf_append(b, small, (size_t)n);
        return;
    }
    if (!reserve(b, (size_t)n)) return;
    va_start(ap, fmt);
    vsnprintf(b->data + b->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
}

kiln_status kiln_strbuf_status(const kiln_strbuf *b) {
    if (b->failed)
        return kiln_error(KILN_ERR_OUT_OF_MEMORY, "out of memory while writing a %zu-byte text",
                          b->len);
    return KILN_OK;
}

kiln_status kiln_strbuf_write_file(const kiln_strbuf *b, const char *path) {
    KILN_TRY(kiln_strbuf_status(b));
    const void *chunks[1] = {b->data};
    size_t sizes[1] = {b->len};
    return kiln_file_write_atomic(path, chunks, sizes, 1);
}
