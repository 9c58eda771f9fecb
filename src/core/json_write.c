/* json_write.c — the streaming JSON writer of json_write.h, and the shortest round-trip number
 * formatting it shares with the CSV and HTML report writers (stats/report.h). */
#include "core/json_write.h"

#include "core/status.h"
#include "core/utf8.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { OPEN_OBJECT = 1, OPEN_NONEMPTY = 2 };

char *kiln_format_double(char buf[32], double v) {
    if (isnan(v)) return strcpy(buf, "nan");
    if (isinf(v)) return strcpy(buf, v > 0 ? "inf" : "-inf");
    for (int prec = 15; prec <= 17; prec++) {
        snprintf(buf, 32, "%.*g", prec, v);
        if (prec == 17 || strtod(buf, NULL) == v) break;
    }
    return buf;
}

void kiln_json_escape(kiln_strbuf *out, const char *str, size_t n) {
    const unsigned char *s = (const unsigned char *)str;
    kiln_strbuf_putc(out, '"');
    size_t run = 0; /* start of the pending run of bytes that need no escaping */
    for (size_t i = 0; i < n;) {
        unsigned c = s[i];
        uint32_t cp = 0;
        int len = c >= 0x20 && c != '"' && c != '\\' ? kiln_utf8_next(s + i, n - i, &cp) : 0;
        if (len && cp != 0xFFFFFFFFu) { /* a valid sequence: copied as it is */
            i += (size_t)len;
            continue;
        }
        kiln_strbuf_append(out, s + run, i - run);
        switch (c) {
        case '"': kiln_strbuf_puts(out, "\\\""); break;
        case '\\': kiln_strbuf_puts(out, "\\\\"); break;
        case '\n': kiln_strbuf_puts(out, "\\n"); break;
        case '\r': kiln_strbuf_puts(out, "\\r"); break;
        case '\t': kiln_strbuf_puts(out, "\\t"); break;
        case '\b': kiln_strbuf_puts(out, "\\b"); break;
        case '\f': kiln_strbuf_puts(out, "\\f"); break;
        default:
            if (c < 0x20) kiln_strbuf_printf(out, "\\u%04x", c);
            else kiln_strbuf_puts(out, "\\ufffd"); /* a byte of an invalid UTF-8 sequence */
        }
        i++;
        run = i;
    }
    kiln_strbuf_append(out, s + run, n - run);
    kiln_strbuf_putc(out, '"');
}

void kiln_json_init(kiln_json *j, kiln_strbuf *out, int indent) {
    memset(j, 0, sizeof *j);
    j->out = out;
    j->indent = indent < 0 ? 0 : indent;
}

/* A newline and the indentation of the current depth (pretty mode only). */
static void newline(kiln_json *j) {
    if (!j->indent) return;
    kiln_strbuf_putc(j->out, '\n');
    for (int i = 0; i < j->depth * j->indent; i++) kiln_strbuf_putc(j->out, ' ');
}

/* Records the first misuse; later calls write nothing. */
static void misuse(kiln_json *j, const char *what) {
    if (!j->misuse) j->misuse = what;
}

/* Writes what must precede a value (separator, indentation) and returns whether the value may be
 * written at this point. */
static bool begin_value(kiln_json *j) {
    if (j->misuse) return false;
    if (j->depth == 0) {
        if (j->done) {
            misuse(j, "a second top-level value");
            return false;
        }
        return true;
    }
    unsigned char *top = &j->open[j->depth - 1];
    if (*top & OPEN_OBJECT) {
        if (!j->pending_key) {
            misuse(j, "a value inside an object without a key");
            return false;
        }
        j->pending_key = false;
        return true;
    }
    if (*top & OPEN_NONEMPTY) kiln_strbuf_putc(j->out, ',');
    *top |= OPEN_NONEMPTY;
    newline(j);
    return true;
}

/* Marks a complete top-level value. */
static void end_value(kiln_json *j) {
    if (j->depth == 0) j->done = true;
}

static void open_container(kiln_json *j, bool object) {
    if (!begin_value(j)) return;
    if (j->depth == KILN_JSON_MAX_DEPTH) {
        misuse(j, "nesting deeper than KILN_JSON_MAX_DEPTH");
        return;
    }
    kiln_strbuf_putc(j->out, object ? '{' : '[');
    j->open[j->depth++] = object ? OPEN_OBJECT : 0;
}

static void close_container(kiln_json *j, bool object) {
    if (j->misuse) return;
    if (j->depth == 0 || !(j->open[j->depth - 1] & OPEN_OBJECT) != !object) {
        misuse(j, object ? "an object end without a matching begin"
                         : "an array end without a matching begin");
        return;
    }
    if (j->pending_key) {
        misuse(j, "a key without a value");
        return;
    }
    bool nonempty = j->open[--j->depth] & OPEN_NONEMPTY;
    if (nonempty) newline(j);
    kiln_strbuf_putc(j->out, object ? '}' : ']');
    end_value(j);
}

void kiln_json_object_begin(kiln_json *j) { open_container(j, true); }
void kiln_json_object_end(kiln_json *j) { close_container(j, true); }
void kiln_json_array_begin(kiln_json *j) { open_container(j, false); }
void kiln_json_array_end(kiln_json *j) { close_container(j, false); }

void kiln_json_key(kiln_json *j, const char *key) {
    if (j->misuse) return;
    if (j->depth == 0 || !(j->open[j->depth - 1] & OPEN_OBJECT) || j->pending_key || !key) {
        misuse(j, !key               ? "a NULL key"
                  : j->pending_key ? "two keys in a row"
                                   : "a key outside an object");
        return;
    }
    unsigned char *top = &j->open[j->depth - 1];
    if (*top & OPEN_NONEMPTY) kiln_strbuf_putc(j->out, ',');
    *top |= OPEN_NONEMPTY;
    newline(j);
    kiln_json_escape(j->out, key, strlen(key));
    kiln_strbuf_puts(j->out, j->indent ? ": " : ":");
    j->pending_key = true;
}

void kiln_json_string_n(kiln_json *j, const char *s, size_t n) {
    if (!begin_value(j)) return;
    kiln_json_escape(j->out, s, n);
    end_value(j);
}

void kiln_json_string(kiln_json *j, const char *s) {
    if (!s) {
        kiln_json_null(j);
        return;
    }
    kiln_json_string_n(j, s, strlen(s));
}

void kiln_json_number(kiln_json *j, double v) {
    if (!begin_value(j)) return;
    char buf[32];
    kiln_strbuf_puts(j->out, isfinite(v) ? kiln_format_double(buf, v) : "null");
    end_value(j);
}

void kiln_json_int(kiln_json *j, int64_t v) {
    if (!begin_value(j)) return;
    kiln_strbuf_printf(j->out, "%" PRId64, v);
    end_value(j);
}

void kiln_json_bool(kiln_json *j, bool v) {
    if (!begin_value(j)) return;
    kiln_strbuf_puts(j->out, v ? "true" : "false");
    end_value(j);
}

void kiln_json_null(kiln_json *j) {
    if (!begin_value(j)) return;
    kiln_strbuf_puts(j->out, "null");
    end_value(j);
}

void kiln_json_kv_string(kiln_json *j, const char *key, const char *s) {
    kiln_json_key(j, key);
    kiln_json_string(j, s);
}

void kiln_json_kv_number(kiln_json *j, const char *key, double v) {
    kiln_json_key(j, key);
    kiln_json_number(j, v);
}

void kiln_json_kv_int(kiln_json *j, const char *key, int64_t v) {
    kiln_json_key(j, key);
    kiln_json_int(j, v);
}

void kiln_json_kv_bool(kiln_json *j, const char *key, bool v) {
    kiln_json_key(j, key);
    kiln_json_bool(j, v);
}

kiln_status kiln_json_finish(kiln_json *j) {
    if (j->misuse) return kiln_error(KILN_ERR_INVALID_ARGUMENT, "JSON writer misuse: %s", j->misuse);
    if (j->depth > 0)
        return kiln_error(KILN_ERR_INVALID_ARGUMENT, "JSON writer misuse: %d container(s) left open",
                          j->depth);
    if (!j->done) return kiln_error(KILN_ERR_INVALID_ARGUMENT, "JSON writer misuse: no value written");
    kiln_strbuf_putc(j->out, '\n');
    return kiln_strbuf_status(j->out);
}
