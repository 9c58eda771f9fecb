/* jinja_ops.c — the chat-template engine's operators with Python's semantics (jinja.h): arithmetic on
 * ints (64-bit, overflow is an error) and floats, string and list concatenation and repetition,
 * comparisons, membership, iteration and slicing by code point. */
#include "llm/jinja.h"

#include "core/utf8.h"

#include <math.h>
#include <string.h>

static bool is_num(jv v) { return v.type == JV_INT || v.type == JV_FLOAT || v.type == JV_BOOL; }
static bool is_int(jv v) { return v.type == JV_INT || v.type == JV_BOOL; }
static int64_t to_int(jv v) { return v.type == JV_BOOL ? v.b : v.i; }
static double to_f(jv v) { return v.type == JV_FLOAT ? v.f : (double)to_int(v); }

static const char *op_name(jop op) {
    static const char *names[] = {"+", "-", "*", "/", "//", "%", "**", "~", "==", "!=", "<", "<=", ">", ">=",
                                  "in", "not in"};
    return names[op];
}

static _Noreturn void type_error(jctx *c, const jnode *at, jop op, jv a, jv b) {
    if (a.type == JV_UNDEF && a.s.len) jfail(c, at, "%.*s", (int)a.s.len, a.s.p);
    if (b.type == JV_UNDEF && b.s.len) jfail(c, at, "%.*s", (int)b.s.len, b.s.p);
    jfail(c, at, "unsupported operand type(s) for %s: '%s' and '%s'", op_name(op), jv_type_name(a), jv_type_name(b));
}

static jv repeat(jctx *c, const jnode *at, jv seq, int64_t times) {
    if (times < 0) times = 0;
    if (seq.type == JV_STR) {
        if (seq.s.len && (uint64_t)times > JINJA_MAX_OUTPUT / seq.s.len) jfail(c, at, "string repetition too long");
        char *p = jalloc(c, seq.s.len * (size_t)times + 1);
        for (int64_t i = 0; i < times; i++) memcpy(p + (size_t)i * seq.s.len, seq.s.p, seq.s.len);
        return jv_str(p, seq.s.len * (size_t)times);
    }
    if (seq.l->n && (uint64_t)times > JINJA_MAX_RANGE / seq.l->n) jfail(c, at, "list repetition too long");
    jlist *l = jlist_new(c, seq.l->n * (size_t)times);
    for (int64_t i = 0; i < times; i++)
        for (size_t j = 0; j < seq.l->n; j++) jlist_push(c, l, seq.l->v[j]);
    return (jv){.type = JV_LIST, .l = l};
}

/* markupsafe's escape of s. */
static jstr html_escape(jctx *c, jstr s) {
    size_t n = 0;
    for (size_t i = 0; i < s.len; i++) n += strchr("&<>\"'", s.p[i]) && s.p[i] ? 5 : 1;
    char *p = jalloc(c, n + 1), *q = p;
    for (size_t i = 0; i < s.len; i++) {
        const char *rep = s.p[i] == '&' ? "&amp;" : s.p[i] == '<' ? "&lt;" : s.p[i] == '>' ? "&gt;"
                        : s.p[i] == '"' ? "&#34;" : s.p[i] == '\'' ? "&#39;" : NULL;
        if (rep) {
            memcpy(q, rep, strlen(rep));
            q += strlen(rep);
        } else {
            *q++ = s.p[i];
        }
    }
    return (jstr){(size_t)(q - p), p};
}

static jv concat(jctx *c, jstr a, jstr b) {
    char *p = jalloc(c, a.len + b.len + 1);
    memcpy(p, a.p, a.len);
    memcpy(p + a.len, b.p, b.len);
    return jv_str(p, a.len + b.len);
}

static jv arith(jctx *c, const jnode *at, jop op, jv a, jv b) {
    if (is_int(a) && is_int(b)) {
        int64_t x = to_int(a), y = to_int(b), r;
        switch (op) {
        case JOP_ADD: if (__builtin_add_overflow(x, y, &r)) break; return jv_int(r);
        case JOP_SUB: if (__builtin_sub_overflow(x, y, &r)) break; return jv_int(r);
        case JOP_MUL: if (__builtin_mul_overflow(x, y, &r)) break; return jv_int(r);
        case JOP_DIV:
            if (y == 0) jfail(c, at, "division by zero");
            return jv_float((double)x / (double)y);
        case JOP_FLOORDIV:
        case JOP_MOD: {
            if (y == 0) jfail(c, at, "integer division or modulo by zero");
            if (x == INT64_MIN && y == -1) break;
            int64_t q = x / y, m = x % y;
            if (m != 0 && ((m < 0) != (y < 0))) {
                q--;
                m += y;
            }
            return jv_int(op == JOP_MOD ? m : q);
        }
        case JOP_POW:
            if (y < 0) return jv_float(pow((double)x, (double)y));
            r = 1;
            for (int64_t i = 0; i < y; i++) {
                if (__builtin_mul_overflow(r, x, &r)) jfail(c, at, "integer overflow in **");
                if (r == 0 || r == 1) break;
            }
            return jv_int(r);
        default: break;
        }
        jfail(c, at, "integer overflow in %s", op_name(op));
    }
    double x = to_f(a), y = to_f(b);
    switch (op) {
    case JOP_ADD: return jv_float(x + y);
    case JOP_SUB: return jv_float(x - y);
    case JOP_MUL: return jv_float(x * y);
    case JOP_DIV:
        if (y == 0) jfail(c, at, "float division by zero");
        return jv_float(x / y);
    case JOP_FLOORDIV:
    case JOP_MOD: {
        if (y == 0) jfail(c, at, "float modulo by zero");
        double m = fmod(x, y);
        if (m != 0 && ((m < 0) != (y < 0))) m += y;
        return jv_float(op == JOP_MOD ? m : floor((x - m) / y + 0.5));
    }
    case JOP_POW: return jv_float(pow(x, y));
    default: type_error(c, at, op, a, b);
    }
}

/* Python's ordering: numbers with numbers, strings with strings (by code point = by UTF-8 bytes),
 * lists element-wise. */
static int order(jctx *c, const jnode *at, jop op, jv a, jv b) {
    if (is_num(a) && is_num(b)) {
        if (is_int(a) && is_int(b)) return (to_int(a) > to_int(b)) - (to_int(a) < to_int(b));
        double x = to_f(a), y = to_f(b);
        return (x > y) - (x < y);
    }
    if (a.type == JV_STR && b.type == JV_STR) {
        size_t n = a.s.len < b.s.len ? a.s.len : b.s.len;
        int r = memcmp(a.s.p, b.s.p, n);
        return r ? (r > 0) - (r < 0) : (a.s.len > b.s.len) - (a.s.len < b.s.len);
    }
    if (a.type == JV_LIST && b.type == JV_LIST) {
        for (size_t i = 0; i < a.l->n && i < b.l->n; i++)
            if (!jv_equal(a.l->v[i], b.l->v[i])) return order(c, at, op, a.l->v[i], b.l->v[i]);
        return (a.l->n > b.l->n) - (a.l->n < b.l->n);
    }
    jfail(c, at, "'%s' not supported between instances of '%s' and '%s'", op_name(op), jv_type_name(a),
          jv_type_name(b));
}

static bool contains(jctx *c, const jnode *at, jv item, jv seq) {
    jwork(c, at, seq.type == JV_STR ? seq.s.len : seq.type == JV_LIST ? seq.l->n : 1);
    switch (seq.type) {
    case JV_STR:
        if (item.type != JV_STR)
            jfail(c, at, "'in <string>' requires string as left operand, not %s", jv_type_name(item));
        return jstr_find(seq.s, 0, item.s) != SIZE_MAX;
    case JV_LIST:
        for (size_t i = 0; i < seq.l->n; i++)
            if (jv_equal(seq.l->v[i], item)) return true;
        return false;
    case JV_DICT:
    case JV_NS:
        if (item.type == JV_LIST || item.type == JV_DICT || item.type == JV_NS)
            jfail(c, at, "unhashable type: '%s'", jv_type_name(item));
        return jdict_get(seq.d, item) != NULL;
    case JV_UNDEF: return false;
    default: jfail(c, at, "argument of type '%s' is not iterable", jv_type_name(seq));
    }
}

int jinja_compare(jctx *c, const jnode *at, jv a, jv b) { return order(c, at, JOP_LT, a, b); }

jv jinja_binary(jctx *c, const jnode *at, jop op, jv a, jv b) {
    switch (op) {
    case JOP_EQ: return jv_bool(jv_equal(a, b));
    case JOP_NE: return jv_bool(!jv_equal(a, b));
    case JOP_LT: return jv_bool(order(c, at, op, a, b) < 0);
    case JOP_LE: return jv_bool(order(c, at, op, a, b) <= 0);
    case JOP_GT: return jv_bool(order(c, at, op, a, b) > 0);
    case JOP_GE: return jv_bool(order(c, at, op, a, b) >= 0);
    case JOP_IN: return jv_bool(contains(c, at, a, b));
    case JOP_NOT_IN: return jv_bool(!contains(c, at, a, b));
    case JOP_CONCAT: {
        jv x = jv_stringify(c, a), y = jv_stringify(c, b);
        return concat(c, x.s, y.s);
    }
    case JOP_ADD:
        if (a.type == JV_STR && b.type == JV_STR && a.safe != b.safe) { /* Markup + str escapes the str */
            jv r = concat(c, a.safe ? a.s : html_escape(c, a.s), b.safe ? b.s : html_escape(c, b.s));
            r.safe = true;
            return r;
        }
        if (a.type == JV_STR && b.type == JV_STR) {
            jv r = concat(c, a.s, b.s);
            r.safe = a.safe;
            return r;
        }
        if (a.type == JV_LIST && b.type == JV_LIST && !a.l->lazy && !b.l->lazy) {
            jlist *l = jlist_new(c, a.l->n + b.l->n);
            for (size_t i = 0; i < a.l->n; i++) jlist_push(c, l, a.l->v[i]);
            for (size_t i = 0; i < b.l->n; i++) jlist_push(c, l, b.l->v[i]);
            l->tuple = a.l->tuple && b.l->tuple;
            return (jv){.type = JV_LIST, .l = l};
        }
        break;
    case JOP_MOD:
        if (a.type == JV_STR) return jinja_percent_format(c, at, a.s, b);
        break;
    case JOP_MUL:
        if ((a.type == JV_STR || (a.type == JV_LIST && !a.l->lazy)) && is_int(b)) return repeat(c, at, a, to_int(b));
        if ((b.type == JV_STR || (b.type == JV_LIST && !b.l->lazy)) && is_int(a)) return repeat(c, at, b, to_int(a));
        break;
    default: break;
    }
    if (is_num(a) && is_num(b)) return arith(c, at, op, a, b);
    type_error(c, at, op, a, b);
}

jlist *jv_iterate(jctx *c, const jnode *at, jv v) {
    switch (v.type) {
    case JV_LIST: return v.l;
    case JV_UNDEF: return jlist_new(c, 1);
    case JV_DICT:
    case JV_NS: {
        jlist *l = jlist_new(c, v.d->n);
        for (size_t i = 0; i < v.d->n; i++) jlist_push(c, l, v.d->k[i]);
        return l;
    }
    case JV_STR: {
        jwork(c, at, v.s.len);
        jlist *l = jlist_new(c, v.s.len);
        for (size_t i = 0; i < v.s.len;) {
            uint32_t cp;
            int n = kiln_utf8_next((const unsigned char *)v.s.p + i, v.s.len - i, &cp);
            jlist_push(c, l, jv_str(v.s.p + i, (size_t)n));
            i += (size_t)n;
        }
        return l;
    }
    default: jfail(c, at, "'%s' object is not iterable", jv_type_name(v));
    }
}

/* Python's slice.indices: clamps start/stop for a sequence of n items. */
static void slice_indices(jctx *c, const jnode *at, jv start, jv stop, jv step, int64_t n, int64_t *b, int64_t *e,
                          int64_t *s) {
    for (int k = 0; k < 3; k++) {
        jv x = k == 0 ? start : k == 1 ? stop : step;
        if (x.type != JV_NONE && x.type != JV_UNDEF && !is_int(x))
            jfail(c, at, "slice indices must be integers or None, not %s", jv_type_name(x));
    }
    *s = is_int(step) ? to_int(step) : 1;
    if (*s == 0) jfail(c, at, "slice step cannot be zero");
    int64_t lo = *s < 0 ? -1 : 0, hi = *s < 0 ? n - 1 : n;
    if (is_int(start)) {
        *b = to_int(start);
        if (*b < 0) *b = *b + n < lo ? lo : *b + n;
        else if (*b > hi) *b = hi;
    } else *b = *s < 0 ? hi : lo;
    if (is_int(stop)) {
        *e = to_int(stop);
        if (*e < 0) *e = *e + n < lo ? lo : *e + n;
        else if (*e > hi) *e = hi;
    } else *e = *s < 0 ? lo : hi;
}

jv jinja_slice(jctx *c, const jnode *at, jv obj, jv start, jv stop, jv step) {
    /* slices bypass Jinja's getitem: Python's own obj[a:b] and its errors */
    if (obj.type == JV_UNDEF) jfail(c, at, "%.*s", (int)obj.s.len, obj.s.len ? obj.s.p : "an undefined value");
    if (obj.type == JV_DICT) jfail(c, at, "unhashable type: 'slice'");
    if ((obj.type != JV_LIST && obj.type != JV_STR) || (obj.type == JV_LIST && obj.l->lazy))
        jfail(c, at, "'%s' object is not subscriptable", jv_type_name(obj));
    jlist *items = jv_iterate(c, at, obj);
    int64_t b, e, s;
    slice_indices(c, at, start, stop, step, (int64_t)items->n, &b, &e, &s);
    jlist *out = jlist_new(c, 0);
    for (int64_t i = b; s > 0 ? i < e : i > e; i += s) jlist_push(c, out, items->v[i]);
    if (obj.type == JV_LIST) {
        out->tuple = obj.l->tuple;
        return (jv){.type = JV_LIST, .l = out};
    }
    size_t len = 0;
    for (size_t i = 0; i < out->n; i++) len += out->v[i].s.len;
    char *p = jalloc(c, len + 1), *q = p;
    for (size_t i = 0; i < out->n; i++) {
        memcpy(q, out->v[i].s.p, out->v[i].s.len);
        q += out->v[i].s.len;
    }
    return jv_str(p, len);
}
