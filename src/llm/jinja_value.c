/* jinja_value.c — the chat-template engine's values (jinja.h): the capped arena they live in, their
 * constructors, truthiness and equality as Python has them, and their text forms: Python's str() and
 * repr() (what `{{ value }}` prints) and transformers' tojson (json.dumps). */
#include "llm/jinja.h"

#include "core/status.h"
#include "core/utf8.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------- arena */

struct jchunk {
    struct jchunk *next;
    size_t size, used;
    _Alignas(16) unsigned char data[];
};

void *jarena_alloc(jarena *a, size_t n) {
    n = (n + 15) & ~(size_t)15;
    if (n == 0) n = 16;
    if (n > a->cap || a->used > a->cap - n) return NULL;
    struct jchunk *ch = a->chunks;
    if (!ch || ch->size - ch->used < n) {
        /* chunks of 4 KB, doubling up to 64 KB: a small template or render touches little memory */
        size_t size = ch ? (ch->size < 65536 ? 2 * ch->size : 65536) : 4096;
        if (size < n) size = n;
        ch = malloc(sizeof *ch + size);
        if (!ch) return NULL;
        ch->next = a->chunks;
        ch->size = size;
        ch->used = 0;
        a->chunks = ch;
    }
    void *p = ch->data + ch->used;
    ch->used += n;
    a->used += n;
    memset(p, 0, n);
    return p;
}

void jarena_free(jarena *a) {
    while (a->chunks) {
        struct jchunk *next = a->chunks->next;
        free(a->chunks);
        a->chunks = next;
    }
    a->used = 0;
}

void *jalloc(jctx *c, size_t n) {
    jwork(c, NULL, n / JINJA_WORK_BYTES);
    void *p = jarena_alloc(c->arena, n);
    if (!p) {
        c->status = kiln_error(KILN_ERR_INVALID_ARGUMENT,
                               "chat template: the render needs more than %zu MiB of memory",
                               c->arena->cap >> 20);
        longjmp(c->fail, 1);
    }
    return p;
}

void jwork(jctx *c, const jnode *at, size_t units) {
    c->work += units;
    if (c->work > c->budget)
        jfail(c, at, "the render takes more than %llu steps (the limit: %llu plus %llu per byte of the messages and "
              "tools)", c->budget, JINJA_WORK_BASE, JINJA_WORK_PER_BYTE);
}

/* ---------------------------------------------------------------- errors */

void jfail(jctx *c, const jnode *n, const char *fmt, ...) {
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (n)
        c->status = kiln_error(KILN_ERR_INVALID_ARGUMENT, "chat template: %s (at line %d:%d)", msg, n->line, n->col);
    else
        c->status = kiln_error(KILN_ERR_INVALID_ARGUMENT, "chat template: %s", msg);
    longjmp(c->fail, 1);
}

void jraise(jctx *c, const char *msg, size_t len) {
    c->status = kiln_error(KILN_ERR_INVALID_ARGUMENT, "%.*s", (int)(len > 2000 ? 2000 : len), msg);
    longjmp(c->fail, 1);
}

/* ---------------------------------------------------------------- constructors */

jv jv_undef(const char *why) { return (jv){.type = JV_UNDEF, .s = {why ? strlen(why) : 0, why}}; }
jv jv_none(void) { return (jv){.type = JV_NONE}; }
jv jv_bool(bool b) { return (jv){.type = JV_BOOL, .b = b}; }
jv jv_int(int64_t i) { return (jv){.type = JV_INT, .i = i}; }
jv jv_float(double f) { return (jv){.type = JV_FLOAT, .f = f}; }
jv jv_str(const char *p, size_t len) { return (jv){.type = JV_STR, .s = {len, p}}; }
jv jv_strz(const char *p) { return jv_str(p, strlen(p)); }

jv jv_str_copy(jctx *c, const char *p, size_t len) {
    char *q = jalloc(c, len + 1);
    if (len) memcpy(q, p, len);
    return jv_str(q, len);
}

jlist *jlist_new(jctx *c, size_t cap) {
    jlist *l = jalloc(c, sizeof *l);
    l->cap = cap ? cap : 4;
    l->v = jalloc(c, l->cap * sizeof *l->v);
    return l;
}

void jlist_push(jctx *c, jlist *l, jv v) {
    if (l->n == l->cap) {
        jv *v2 = jalloc(c, 2 * l->cap * sizeof *v2);
        memcpy(v2, l->v, l->n * sizeof *v2);
        l->v = v2;
        l->cap *= 2;
    }
    l->v[l->n++] = v;
}

jdict *jdict_new(jctx *c, size_t cap) {
    jdict *d = jalloc(c, sizeof *d);
    d->cap = cap ? cap : 4;
    d->k = jalloc(c, d->cap * sizeof *d->k);
    d->v = jalloc(c, d->cap * sizeof *d->v);
    return d;
}

jv *jdict_find(const jdict *d, const char *key, size_t len) {
    for (size_t i = 0; i < d->n; i++)
        if (d->k[i].type == JV_STR && d->k[i].s.len == len && memcmp(d->k[i].s.p, key, len) == 0) return &d->v[i];
    return NULL;
}

jv *jdict_get(const jdict *d, jv key) {
    if (key.type == JV_STR) return jdict_find(d, key.s.p, key.s.len);
    for (size_t i = 0; i < d->n; i++)
        if (d->k[i].type != JV_STR && jv_equal(d->k[i], key)) return &d->v[i];
    return NULL;
}

void jdict_set(jctx *c, jdict *d, jstr key, jv v) { jdict_put(c, d, jv_str(key.p, key.len), v); }

void jdict_put(jctx *c, jdict *d, jv key, jv v) {
    jv *slot = jdict_get(d, key);
    if (slot) {
        *slot = v;
        return;
    }
    if (d->n == d->cap) {
        jv *k2 = jalloc(c, 2 * d->cap * sizeof *k2);
        jv *v2 = jalloc(c, 2 * d->cap * sizeof *v2);
        memcpy(k2, d->k, d->n * sizeof *k2);
        memcpy(v2, d->v, d->n * sizeof *v2);
        d->k = k2;
        d->v = v2;
        d->cap *= 2;
    }
    d->k[d->n] = key;
    d->v[d->n++] = v;
}

size_t jstr_find(jstr s, size_t from, jstr sub) {
    if (from > s.len || sub.len > s.len - from) return SIZE_MAX;
    if (sub.len == 0) return from;
    const char *hit = memmem(s.p + from, s.len - from, sub.p, sub.len);
    return hit ? (size_t)(hit - s.p) : SIZE_MAX;
}

size_t jstr_codepoints(jstr s) {
    size_t n = 0;
    for (size_t i = 0; i < s.len; i++) n += ((unsigned char)s.p[i] & 0xC0) != 0x80;
    return n;
}

bool junicode_space(uint32_t cp) {
    return (cp >= 0x09 && cp <= 0x0D) || (cp >= 0x1C && cp <= 0x20) || cp == 0x85 || cp == 0xA0 ||
           cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F ||
           cp == 0x205F || cp == 0x3000;
}

/* ---------------------------------------------------------------- truth and equality */

bool jv_truthy(jv v) {
    switch (v.type) {
    case JV_UNDEF:
    case JV_NONE: return false;
    case JV_BOOL: return v.b;
    case JV_INT: return v.i != 0;
    case JV_FLOAT: return v.f != 0.0;
    case JV_STR: return v.s.len != 0;
    case JV_LIST: return v.l->lazy || v.l->n != 0;
    case JV_DICT: return v.d->n != 0;
    default: return true;
    }
}

static bool is_number(jv v) { return v.type == JV_INT || v.type == JV_FLOAT || v.type == JV_BOOL; }
static double as_double(jv v) { return v.type == JV_FLOAT ? v.f : v.type == JV_INT ? (double)v.i : (double)v.b; }

bool jv_equal(jv a, jv b) {
    if (is_number(a) && is_number(b)) {
        if (a.type != JV_FLOAT && b.type != JV_FLOAT)
            return (a.type == JV_INT ? a.i : a.b) == (b.type == JV_INT ? b.i : b.b);
        return as_double(a) == as_double(b);
    }
    if (a.type != b.type) return false;
    switch (a.type) {
    case JV_UNDEF:
    case JV_NONE: return true;
    case JV_STR: return a.s.len == b.s.len && memcmp(a.s.p, b.s.p, a.s.len) == 0;
    case JV_LIST:
        if (a.l->lazy || b.l->lazy) return a.l == b.l;
        if (a.l->n != b.l->n) return false;
        for (size_t i = 0; i < a.l->n; i++)
            if (!jv_equal(a.l->v[i], b.l->v[i])) return false;
        return true;
    case JV_DICT:
    case JV_NS:
        if (a.type == JV_NS) return a.d == b.d;
        if (a.d->n != b.d->n) return false;
        for (size_t i = 0; i < a.d->n; i++) {
            jv *o = jdict_get(b.d, a.d->k[i]);
            if (!o || !jv_equal(a.d->v[i], *o)) return false;
        }
        return true;
    case JV_MACRO: return a.m == b.m;
    case JV_FUNC: return a.fn == b.fn;
    case JV_LOOP: return a.loop == b.loop;
    default: return false;
    }
}

const char *jv_type_name(jv v) {
    switch (v.type) {
    case JV_UNDEF: return "Undefined";
    case JV_NONE: return "NoneType";
    case JV_BOOL: return "bool";
    case JV_INT: return "int";
    case JV_FLOAT: return "float";
    case JV_STR: return "str";
    case JV_LIST: return v.l->lazy ? "generator" : v.l->tuple ? "tuple" : "list";
    case JV_DICT: return "dict";
    case JV_NS: return "Namespace";
    case JV_MACRO: return "Macro";
    case JV_FUNC: return "function";
    case JV_LOOP: return "LoopContext";
    }
    return "?";
}

/* ---------------------------------------------------------------- str() and repr() */

void jfloat_repr(double f, char *buf, size_t cap) {
    if (isnan(f)) {
        snprintf(buf, cap, "nan");
        return;
    }
    if (isinf(f)) {
        snprintf(buf, cap, f < 0 ? "-inf" : "inf");
        return;
    }
    char e[40];
    int prec = 1;
    for (; prec <= 17; prec++) { /* the shortest form that reads back the same double */
        snprintf(e, sizeof e, "%.*e", prec - 1, f);
        if (strtod(e, NULL) == f) break;
    }
    /* e is "-d.ddde+XX": gather the digits and the decimal exponent */
    char digits[24];
    int nd = 0, exp10;
    const char *p = e;
    bool neg = *p == '-';
    if (neg) p++;
    for (; *p && *p != 'e'; p++)
        if (*p >= '0' && *p <= '9') digits[nd++] = *p;
    exp10 = atoi(p + 1);
    while (nd > 1 && digits[nd - 1] == '0') nd--;
    size_t o = 0;
    if (neg) buf[o++] = '-';
    if (exp10 < -4 || exp10 >= 16) {
        buf[o++] = digits[0];
        if (nd > 1) {
            buf[o++] = '.';
            for (int i = 1; i < nd; i++) buf[o++] = digits[i];
        }
        snprintf(buf + o, cap - o, "e%c%02d", exp10 < 0 ? '-' : '+', exp10 < 0 ? -exp10 : exp10);
        return;
    }
    if (exp10 < 0) {
        buf[o++] = '0';
        buf[o++] = '.';
        for (int i = 0; i < -exp10 - 1; i++) buf[o++] = '0';
        for (int i = 0; i < nd; i++) buf[o++] = digits[i];
    } else {
        for (int i = 0; i <= exp10; i++) buf[o++] = i < nd ? digits[i] : '0';
        buf[o++] = '.';
        if (nd > exp10 + 1)
            for (int i = exp10 + 1; i < nd; i++) buf[o++] = digits[i];
        else
            buf[o++] = '0';
    }
    buf[o] = 0;
}

/* Python's repr of a string: quotes chosen as Python does, control and non-printable bytes escaped. */
static void str_repr(jstr s, kiln_strbuf *b) {
    bool has_single = memchr(s.p, '\'', s.len) != NULL, has_double = memchr(s.p, '"', s.len) != NULL;
    char q = has_single && !has_double ? '"' : '\'';
    kiln_strbuf_putc(b, q);
    for (size_t i = 0; i < s.len;) {
        uint32_t cp;
        int n = kiln_utf8_next((const unsigned char *)s.p + i, s.len - i, &cp);
        if (cp == (uint32_t)q || cp == '\\') {
            kiln_strbuf_putc(b, '\\');
            kiln_strbuf_putc(b, (char)cp);
        } else if (cp == '\n') kiln_strbuf_puts(b, "\\n");
        else if (cp == '\r') kiln_strbuf_puts(b, "\\r");
        else if (cp == '\t') kiln_strbuf_puts(b, "\\t");
        else if (cp < 0x20 || cp == 0x7F || (cp >= 0x80 && cp <= 0xA0) || cp == 0xAD)
            kiln_strbuf_printf(b, "\\x%02x", cp);
        else if (cp == 0xFFFFFFFF)
            kiln_strbuf_printf(b, "\\x%02x", (unsigned char)s.p[i]);
        else
            kiln_strbuf_append(b, s.p + i, (size_t)n);
        i += (size_t)n;
    }
    kiln_strbuf_putc(b, q);
}

static void jv_repr(jctx *c, jv v, kiln_strbuf *b, int depth);

static void seq_repr(jctx *c, jv v, kiln_strbuf *b, int depth) {
    if (v.type == JV_LIST && v.l->lazy) {
        kiln_strbuf_puts(b, "<generator object>");
        return;
    }
    if (v.type == JV_LIST) {
        kiln_strbuf_putc(b, v.l->tuple ? '(' : '[');
        for (size_t i = 0; i < v.l->n; i++) {
            if (i) kiln_strbuf_puts(b, ", ");
            jv_repr(c, v.l->v[i], b, depth + 1);
        }
        if (v.l->tuple && v.l->n == 1) kiln_strbuf_putc(b, ',');
        kiln_strbuf_putc(b, v.l->tuple ? ')' : ']');
        return;
    }
    kiln_strbuf_putc(b, '{');
    for (size_t i = 0; i < v.d->n; i++) {
        if (i) kiln_strbuf_puts(b, ", ");
        jv_repr(c, v.d->k[i], b, depth + 1);
        kiln_strbuf_puts(b, ": ");
        jv_repr(c, v.d->v[i], b, depth + 1);
    }
    kiln_strbuf_putc(b, '}');
}

/* Fails when text being built would exceed the output limit (checked before each piece). */
static void check_size(jctx *c, const jnode *at, const kiln_strbuf *b, size_t more) {
    jwork(c, at, 1);
    if (b->len + more > JINJA_MAX_OUTPUT) jfail(c, at, "a value's text exceeds %u MiB", JINJA_MAX_OUTPUT >> 20);
}

static void jv_repr(jctx *c, jv v, kiln_strbuf *b, int depth) {
    if (depth > JINJA_MAX_PARSE_DEPTH) jfail(c, NULL, "a value nests too deeply to print");
    check_size(c, NULL, b, v.type == JV_STR ? v.s.len : 0);
    if (v.type == JV_STR && v.safe) {
        kiln_strbuf_puts(b, "Markup(");
        str_repr(v.s, b);
        kiln_strbuf_putc(b, ')');
    } else if (v.type == JV_STR) str_repr(v.s, b);
    else if (v.type == JV_UNDEF) kiln_strbuf_puts(b, "Undefined");
    else if (v.type == JV_LIST || v.type == JV_DICT) seq_repr(c, v, b, depth);
    else jv_to_str(c, v, b);
}

void jv_to_repr(jctx *c, jv v, kiln_strbuf *b) { jv_repr(c, v, b, 0); }

void jv_to_str(jctx *c, jv v, kiln_strbuf *b) {
    char num[40];
    switch (v.type) {
    case JV_UNDEF: return;
    case JV_NONE: kiln_strbuf_puts(b, "None"); return;
    case JV_BOOL: kiln_strbuf_puts(b, v.b ? "True" : "False"); return;
    case JV_INT: kiln_strbuf_printf(b, "%lld", (long long)v.i); return;
    case JV_FLOAT: jfloat_repr(v.f, num, sizeof num); kiln_strbuf_puts(b, num); return;
    case JV_STR:
        check_size(c, NULL, b, v.s.len);
        kiln_strbuf_append(b, v.s.p, v.s.len);
        return;
    case JV_LIST:
    case JV_DICT: seq_repr(c, v, b, 0); return;
    case JV_NS:
        kiln_strbuf_puts(b, "<Namespace ");
        seq_repr(c, (jv){.type = JV_DICT, .d = v.d}, b, 0);
        kiln_strbuf_putc(b, '>');
        return;
    default: kiln_strbuf_printf(b, "<%s>", jv_type_name(v)); return;
    }
}

jv jv_stringify(jctx *c, jv v) {
    if (v.type == JV_STR) return v;
    kiln_strbuf_clear(&c->scratch);
    jv_to_str(c, v, &c->scratch);
    if (c->scratch.failed) jfail(c, NULL, "out of memory");
    return jv_str_copy(c, c->scratch.data ? c->scratch.data : "", c->scratch.len);
}

/* ---------------------------------------------------------------- json.dumps */

typedef struct json_opts {
    bool ensure_ascii, sort_keys;
    const jstr *indent;
    jstr item_sep, key_sep;
} json_opts;

static void json_string(jstr s, bool ensure_ascii, kiln_strbuf *b) {
    kiln_strbuf_putc(b, '"');
    for (size_t i = 0; i < s.len;) {
        unsigned char ch = (unsigned char)s.p[i];
        if (ch == '"') kiln_strbuf_puts(b, "\\\"");
        else if (ch == '\\') kiln_strbuf_puts(b, "\\\\");
        else if (ch == '\n') kiln_strbuf_puts(b, "\\n");
        else if (ch == '\r') kiln_strbuf_puts(b, "\\r");
        else if (ch == '\t') kiln_strbuf_puts(b, "\\t");
        else if (ch == '\b') kiln_strbuf_puts(b, "\\b");
        else if (ch == '\f') kiln_strbuf_puts(b, "\\f");
        else if (ch < 0x20) kiln_strbuf_printf(b, "\\u%04x", ch);
        else if (ch >= 0x80 && ensure_ascii) {
            uint32_t cp;
            int n = kiln_utf8_next((const unsigned char *)s.p + i, s.len - i, &cp);
            if (cp == 0xFFFFFFFF) cp = 0xFFFD;
            if (cp >= 0x10000) {
                cp -= 0x10000;
                kiln_strbuf_printf(b, "\\u%04x\\u%04x", 0xD800 + (cp >> 10), 0xDC00 + (cp & 0x3FF));
            } else {
                kiln_strbuf_printf(b, "\\u%04x", cp);
            }
            i += (size_t)n;
            continue;
        } else kiln_strbuf_putc(b, (char)ch);
        i++;
    }
    kiln_strbuf_putc(b, '"');
}

static void json_newline(const json_opts *o, int level, kiln_strbuf *b) {
    kiln_strbuf_putc(b, '\n');
    for (int i = 0; i < level; i++) kiln_strbuf_append(b, o->indent->p, o->indent->len);
}

static void json_value(jctx *c, const jnode *at, jv v, const json_opts *o, int level, kiln_strbuf *b) {
    if (level > JINJA_MAX_PARSE_DEPTH) jfail(c, at, "tojson: the value nests too deeply");
    check_size(c, at, b, (v.type == JV_STR ? v.s.len : 0) + (o->indent ? o->indent->len * (size_t)(level + 1) : 0));
    char num[40];
    switch (v.type) {
    case JV_NONE: kiln_strbuf_puts(b, "null"); return;
    case JV_BOOL: kiln_strbuf_puts(b, v.b ? "true" : "false"); return;
    case JV_INT: kiln_strbuf_printf(b, "%lld", (long long)v.i); return;
    case JV_FLOAT:
        if (isnan(v.f)) kiln_strbuf_puts(b, "NaN");
        else if (isinf(v.f)) kiln_strbuf_puts(b, v.f < 0 ? "-Infinity" : "Infinity");
        else {
            jfloat_repr(v.f, num, sizeof num);
            kiln_strbuf_puts(b, num);
        }
        return;
    case JV_STR: json_string(v.s, o->ensure_ascii, b); return;
    case JV_LIST:
        if (v.l->lazy) jfail(c, at, "Object of type generator is not JSON serializable");
        if (v.l->n == 0) {
            kiln_strbuf_puts(b, "[]");
            return;
        }
        kiln_strbuf_putc(b, '[');
        for (size_t i = 0; i < v.l->n; i++) {
            if (i) kiln_strbuf_append(b, o->item_sep.p, o->item_sep.len);
            if (o->indent) json_newline(o, level + 1, b);
            json_value(c, at, v.l->v[i], o, level + 1, b);
        }
        if (o->indent) json_newline(o, level, b);
        kiln_strbuf_putc(b, ']');
        return;
    case JV_DICT: {
        if (v.d->n == 0) {
            kiln_strbuf_puts(b, "{}");
            return;
        }
        size_t *order = jalloc(c, v.d->n * sizeof *order);
        for (size_t i = 0; i < v.d->n; i++) { /* insertion sort: stable, and dicts are small */
            size_t k = i;
            if (o->sort_keys) {
                jwork(c, at, i + 1);
                while (k > 0 && jinja_compare(c, at, v.d->k[i], v.d->k[order[k - 1]]) < 0) {
                    order[k] = order[k - 1];
                    k--;
                }
            }
            order[k] = i;
        }
        kiln_strbuf_putc(b, '{');
        for (size_t i = 0; i < v.d->n; i++) {
            jv key = v.d->k[order[i]];
            if (i) kiln_strbuf_append(b, o->item_sep.p, o->item_sep.len);
            if (o->indent) json_newline(o, level + 1, b);
            if (key.type == JV_STR) {
                json_string(key.s, o->ensure_ascii, b);
            } else { /* json.dumps turns other keys into strings: 1 -> "1", True -> "true", None -> "null" */
                kiln_strbuf_putc(b, '"');
                json_value(c, at, key, o, level + 1, b);
                kiln_strbuf_putc(b, '"');
            }
            kiln_strbuf_append(b, o->key_sep.p, o->key_sep.len);
            json_value(c, at, v.d->v[order[i]], o, level + 1, b);
        }
        if (o->indent) json_newline(o, level, b);
        kiln_strbuf_putc(b, '}');
        return;
    }
    default: jfail(c, at, "Object of type %s is not JSON serializable", jv_type_name(v));
    }
}

void jv_to_json(jctx *c, const jnode *at, jv v, bool ensure_ascii, const jstr *indent, jstr item_sep, jstr key_sep,
                bool sort_keys, kiln_strbuf *b) {
    json_opts o = {ensure_ascii, sort_keys, indent, item_sep, key_sep};
    json_value(c, at, v, &o, 0, b);
}
