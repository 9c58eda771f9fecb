/* jinja_format.c — Python's printf-style string formatting (`'%s: %d' % (a, b)`, the format filter)
 * for the chat-template engine (jinja.h): the conversions s r a d i u f F e E g G x X o c %, the flags
 * - + space # 0, width and precision (counted in code points for strings, as Python does), a tuple of
 * arguments or one value, and %(key)s from a dict. */
#include "llm/jinja.h"

#include "core/utf8.h"

#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

typedef struct spec {
    char flags[8];
    int nflags;
    int width, precision; /* -1: not given */
    char conv;
} spec;

/* Appends s padded to the width (in code points), truncated to the precision for %s / %r. */
static void put_padded(kiln_strbuf *b, const spec *sp, jstr s, bool truncate) {
    size_t cps = 0, bytes = 0;
    for (; bytes < s.len; cps++) {
        if (truncate && sp->precision >= 0 && cps == (size_t)sp->precision) break;
        uint32_t cp;
        bytes += (size_t)kiln_utf8_next((const unsigned char *)s.p + bytes, s.len - bytes, &cp);
    }
    bool left = memchr(sp->flags, '-', (size_t)sp->nflags) != NULL;
    size_t pad = sp->width > 0 && (size_t)sp->width > cps ? (size_t)sp->width - cps : 0;
    if (!left)
        for (size_t i = 0; i < pad; i++) kiln_strbuf_putc(b, ' ');
    kiln_strbuf_append(b, s.p, bytes);
    if (left)
        for (size_t i = 0; i < pad; i++) kiln_strbuf_putc(b, ' ');
}

/* One numeric conversion through C's snprintf, whose output these conversions share with Python. */
static void put_number(jctx *c, const jnode *at, kiln_strbuf *b, const spec *sp, jv v) {
    char fmt[32], out[512];
    int k = 0;
    fmt[k++] = '%';
    for (int i = 0; i < sp->nflags; i++)
        if (!(sp->flags[i] == '#' && sp->conv == 'o')) fmt[k++] = sp->flags[i];
    int width = sp->width > 200 ? 200 : sp->width, precision = sp->precision > 200 ? 200 : sp->precision;
    if (width >= 0) k += snprintf(fmt + k, sizeof fmt - (size_t)k, "%d", width);
    if (precision >= 0) k += snprintf(fmt + k, sizeof fmt - (size_t)k, ".%d", precision);
    if (sp->conv == 'c' && v.type == JV_STR) {
        if (jstr_codepoints(v.s) != 1) jfail(c, at, "%%c requires an int or a unicode character");
        put_padded(b, sp, v.s, false);
        return;
    }
    if (strchr("diuxXoc", sp->conv)) {
        int64_t i;
        if (v.type == JV_INT || v.type == JV_BOOL) i = v.type == JV_INT ? v.i : v.b;
        else if (v.type == JV_FLOAT && strchr("diu", sp->conv) && isfinite(v.f) && fabs(v.f) < 9.2e18) i = (int64_t)v.f;
        else jfail(c, at, "%%%c format: a real number is required, not %s", sp->conv, jv_type_name(v));
        if (sp->conv == 'c') {
            if (i < 0 || i >= 0x110000) jfail(c, at, "%%c arg not in range(0x110000)");
            char u[4];
            put_padded(b, sp, (jstr){(size_t)kiln_utf8_put((uint32_t)i, u), u}, false);
            return;
        }
        char conv = sp->conv == 'i' || sp->conv == 'u' ? 'd' : sp->conv;
        if (sp->conv == 'o' && memchr(sp->flags, '#', (size_t)sp->nflags)) { /* Python writes 0o17 */
            kiln_strbuf_puts(b, i < 0 ? "-0o" : "0o");
            i = i < 0 ? -i : i;
        }
        snprintf(fmt + k, sizeof fmt - (size_t)k, "ll%c", conv);
        snprintf(out, sizeof out, fmt, (long long)i);
    } else {
        double f;
        if (v.type == JV_FLOAT) f = v.f;
        else if (v.type == JV_INT || v.type == JV_BOOL) f = v.type == JV_INT ? (double)v.i : v.b;
        else jfail(c, at, "must be real number, not %s", jv_type_name(v));
        snprintf(fmt + k, sizeof fmt - (size_t)k, "%c", sp->conv);
        snprintf(out, sizeof out, fmt, f);
    }
    kiln_strbuf_puts(b, out);
}

/* The decimal number at fmt[*i] (0 if none), capped at 100000; advances *i past it. */
static int read_count(jstr fmt, size_t *i) {
    int n = 0;
    for (; *i < fmt.len && isdigit((unsigned char)fmt.p[*i]); (*i)++)
        n = n > 10000 ? 100000 : n * 10 + (fmt.p[*i] - '0');
    return n;
}

jv jinja_percent_format(jctx *c, const jnode *at, jstr fmt, jv args) {
    bool tuple = args.type == JV_LIST && args.l->tuple;
    size_t nargs = tuple ? args.l->n : 1, next = 0;
    bool used_mapping = false;
    kiln_strbuf_clear(&c->scratch);
    kiln_strbuf *b = &c->scratch;
    jwork(c, at, fmt.len);
    for (size_t i = 0; i < fmt.len;) {
        if (b->len > JINJA_MAX_OUTPUT) jfail(c, at, "a formatted string exceeds %u MiB", JINJA_MAX_OUTPUT >> 20);
        if (fmt.p[i] != '%') {
            kiln_strbuf_putc(b, fmt.p[i++]);
            continue;
        }
        if (++i >= fmt.len) jfail(c, at, "incomplete format");
        jv v = jv_undef(NULL);
        bool have_value = false;
        if (fmt.p[i] == '(') { /* %(key)s */
            size_t e = i + 1;
            while (e < fmt.len && fmt.p[e] != ')') e++;
            if (e >= fmt.len) jfail(c, at, "incomplete format key");
            if (args.type != JV_DICT) jfail(c, at, "format requires a mapping");
            jv *found = jdict_find(args.d, fmt.p + i + 1, e - i - 1);
            if (!found) jfail(c, at, "KeyError: '%.*s'", (int)(e - i - 1), fmt.p + i + 1);
            v = *found;
            have_value = used_mapping = true;
            i = e + 1;
        }
        spec sp = {.width = -1, .precision = -1};
        while (i < fmt.len && strchr("-+ #0", fmt.p[i]) && sp.nflags < 7) sp.flags[sp.nflags++] = fmt.p[i++];
        if (i < fmt.len && fmt.p[i] == '*') jfail(c, at, "'*' widths are not supported");
        if (i < fmt.len && isdigit((unsigned char)fmt.p[i])) sp.width = read_count(fmt, &i);
        if (i < fmt.len && fmt.p[i] == '.') {
            i++;
            sp.precision = read_count(fmt, &i);
        }
        while (i < fmt.len && strchr("hlL", fmt.p[i])) i++;
        if (i >= fmt.len) jfail(c, at, "incomplete format");
        sp.conv = fmt.p[i++];
        if (sp.conv == '%') {
            kiln_strbuf_putc(b, '%');
            continue;
        }
        if (!strchr("sradiufFeEgGxXoc", sp.conv)) jfail(c, at, "unsupported format character '%c'", sp.conv);
        if (!have_value) {
            if (next >= nargs) jfail(c, at, "not enough arguments for format string");
            v = tuple ? args.l->v[next] : args;
            next++;
        }
        if (sp.conv == 's' || sp.conv == 'r' || sp.conv == 'a') {
            size_t start = b->len;
            if (sp.conv == 's') jv_to_str(c, v, b);
            else jv_to_repr(c, v, b);
            jstr text = jv_str_copy(c, b->data ? b->data + start : "", b->len - start).s;
            b->len = start;
            put_padded(b, &sp, text, true);
        } else {
            put_number(c, at, b, &sp, v);
        }
    }
    /* a non-tuple argument with items (a dict, a list) is taken as a mapping: no leftover check */
    bool mapping_like = !tuple && (args.type == JV_DICT || args.type == JV_LIST || args.type == JV_UNDEF);
    if (!used_mapping && next < nargs && !mapping_like)
        jfail(c, at, "not all arguments converted during string formatting");
    if (b->failed) jfail(c, at, "out of memory");
    return jv_str_copy(c, b->data ? b->data : "", b->len);
}
