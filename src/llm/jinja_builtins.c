/* jinja_builtins.c — what chat templates call by name (jinja.h): Jinja's filters and tests, the
 * Python string and dict methods templates use, and transformers' globals (raise_exception,
 * strftime_now, namespace) with Jinja's range and dict. Case mapping (upper, lower, title,
 * capitalize) covers ASCII, Latin-1, Latin Extended-A, Greek and Cyrillic; other characters pass
 * through unchanged. */
#include "llm/jinja.h"

#include "core/utf8.h"

#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------- arguments */

bool jinja_arg(const jv *args, const jstr *kw, int nargs, int pos, const char *name, jv *out) {
    int p = 0;
    for (int i = 0; i < nargs; i++) {
        if (kw[i].p) {
            if (jstr_eq(kw[i], name)) {
                *out = args[i];
                return true;
            }
        } else if (p++ == pos) {
            *out = args[i];
            return true;
        }
    }
    return false;
}

static jstr need_str(jctx *c, const jnode *at, jv v, const char *what) {
    if (v.type != JV_STR) jfail(c, at, "%s must be a string, not %s", what, jv_type_name(v));
    return v.s;
}

static int64_t need_int(jctx *c, const jnode *at, jv v, const char *what) {
    if (v.type == JV_BOOL) return v.b;
    if (v.type != JV_INT) jfail(c, at, "%s must be an integer, not %s", what, jv_type_name(v));
    return v.i;
}

static jv list_value(jlist *l) { return (jv){.type = JV_LIST, .l = l}; }

/* What Jinja returns as a generator. */
static jv lazy_value(jlist *l) {
    l->lazy = true;
    return list_value(l);
}

/* ---------------------------------------------------------------- string helpers */

static bool in_chars(uint32_t cp, const jstr *chars) {
    if (!chars) return junicode_space(cp);
    for (size_t i = 0; i < chars->len;) {
        uint32_t d;
        int n = kiln_utf8_next((const unsigned char *)chars->p + i, chars->len - i, &d);
        if (d == cp) return true;
        i += (size_t)n;
    }
    return false;
}

/* Python's str.strip / lstrip / rstrip (chars NULL: whitespace). */
static jv strip(jstr s, const jstr *chars, bool left, bool right) {
    size_t b = 0, e = s.len;
    while (left && b < e) {
        uint32_t cp;
        int n = kiln_utf8_next((const unsigned char *)s.p + b, e - b, &cp);
        if (!in_chars(cp, chars)) break;
        b += (size_t)n;
    }
    while (right && e > b) {
        size_t k = e - 1;
        while (k > b && ((unsigned char)s.p[k] & 0xC0) == 0x80) k--;
        uint32_t cp;
        kiln_utf8_next((const unsigned char *)s.p + k, e - k, &cp);
        if (!in_chars(cp, chars)) break;
        e = k;
    }
    return jv_str(s.p + b, e - b);
}

typedef enum { CASE_UPPER, CASE_LOWER, CASE_CAPITALIZE, CASE_TITLE_PY, CASE_TITLE_JINJA } case_map;

/* Simple case mapping for ASCII, Latin-1, Latin Extended-A, Greek and Cyrillic (one code point to
 * one); other code points have no case here. */
static uint32_t to_upper_cp(uint32_t cp) {
    if (cp < 0x80) return cp >= 'a' && cp <= 'z' ? cp - 32 : cp;
    if ((cp >= 0xE0 && cp <= 0xFE && cp != 0xF7)) return cp - 32;
    if (cp == 0xFF) return 0x178;
    if (cp >= 0x100 && cp <= 0x17F && cp != 0x130 && cp != 0x131 && cp != 0x138 && cp != 0x149 && cp != 0x17F) {
        bool odd_lower = (cp >= 0x139 && cp <= 0x148) || (cp >= 0x179 && cp <= 0x17E);
        return (cp & 1) == (odd_lower ? 0u : 1u) ? cp - 1 : cp;
    }
    if (cp >= 0x3B1 && cp <= 0x3C9 && cp != 0x3C2) return cp - 32;
    if (cp >= 0x430 && cp <= 0x44F) return cp - 32;
    if (cp >= 0x450 && cp <= 0x45F) return cp - 80;
    return cp;
}

static uint32_t to_lower_cp(uint32_t cp) {
    if (cp < 0x80) return cp >= 'A' && cp <= 'Z' ? cp + 32 : cp;
    if ((cp >= 0xC0 && cp <= 0xDE && cp != 0xD7)) return cp + 32;
    if (cp == 0x178) return 0xFF;
    if (cp >= 0x100 && cp <= 0x17F && cp != 0x130 && cp != 0x131 && cp != 0x138 && cp != 0x149 && cp != 0x17F) {
        bool odd_lower = (cp >= 0x139 && cp <= 0x148) || (cp >= 0x179 && cp <= 0x17E);
        return (cp & 1) == (odd_lower ? 1u : 0u) ? cp + 1 : cp;
    }
    if (cp >= 0x391 && cp <= 0x3A9 && cp != 0x3A2) return cp + 32;
    if (cp >= 0x410 && cp <= 0x42F) return cp + 32;
    if (cp >= 0x400 && cp <= 0x40F) return cp + 80;
    return cp;
}

static bool cased(uint32_t cp) { return to_upper_cp(cp) != cp || to_lower_cp(cp) != cp; }

static jv map_case(jctx *c, jstr s, case_map how) {
    char *p = jalloc(c, s.len + 1);
    size_t o = 0;
    bool after_sep = true, prev_cased = false, first = true;
    for (size_t i = 0; i < s.len;) {
        uint32_t cp;
        int n = kiln_utf8_next((const unsigned char *)s.p + i, s.len - i, &cp);
        if (cp == 0xFFFFFFFF) { /* an invalid byte passes through */
            p[o++] = s.p[i++];
            first = after_sep = prev_cased = false;
            continue;
        }
        bool up;
        switch (how) {
        case CASE_UPPER: up = true; break;
        case CASE_LOWER: up = false; break;
        case CASE_CAPITALIZE: up = first; break;
        case CASE_TITLE_PY: up = !prev_cased; break;
        default: up = after_sep; break;
        }
        uint32_t mapped = up ? to_upper_cp(cp) : to_lower_cp(cp);
        char enc[4];
        int m = kiln_utf8_put(mapped, enc);
        if (m != n) { /* the output never outgrows the input: keep the character */
            memcpy(enc, s.p + i, (size_t)n);
            m = n;
        }
        memcpy(p + o, enc, (size_t)m);
        o += (size_t)m;
        prev_cased = cased(cp);
        after_sep = (cp != 0 && cp < 0x80 && strchr("-({[<", (int)cp) != NULL) || junicode_space(cp);
        first = false;
        i += (size_t)n;
    }
    return jv_str(p, o);
}

static jv replace(jctx *c, jstr s, jstr old, jstr new, int64_t count) {
    kiln_strbuf_clear(&c->scratch);
    kiln_strbuf *b = &c->scratch;
    size_t i = 0;
    int64_t done = 0;
    if (old.len == 0) { /* Python inserts `new` around every character */
        jlist *chars = jv_iterate(c, NULL, jv_str(s.p, s.len));
        for (size_t k = 0; k <= chars->n; k++) {
            if (b->len > JINJA_MAX_OUTPUT) jfail(c, NULL, "replace: the result is too large");
            if (count < 0 || done < count) {
                kiln_strbuf_append(b, new.p, new.len);
                done++;
            }
            if (k < chars->n) kiln_strbuf_append(b, chars->v[k].s.p, chars->v[k].s.len);
        }
    } else {
        while (i < s.len) {
            if (b->len > JINJA_MAX_OUTPUT) jfail(c, NULL, "replace: the result is too large");
            if ((count < 0 || done < count) && i + old.len <= s.len && memcmp(s.p + i, old.p, old.len) == 0) {
                kiln_strbuf_append(b, new.p, new.len);
                i += old.len;
                done++;
            } else {
                kiln_strbuf_putc(b, s.p[i++]);
            }
        }
    }
    if (b->failed || b->len > JINJA_MAX_OUTPUT) jfail(c, NULL, "replace: the result is too large");
    return jv_str_copy(c, b->data ? b->data : "", b->len);
}

/* Python's str.split(sep=None, maxsplit=-1). */
static jv split(jctx *c, jstr s, const jstr *sep, int64_t maxsplit) {
    jlist *l = jlist_new(c, 4);
    if (sep) {
        if (sep->len == 0) jfail(c, NULL, "split: empty separator");
        size_t start = 0;
        for (size_t i = 0; i + sep->len <= s.len;) {
            if ((maxsplit < 0 || (int64_t)l->n < maxsplit) && memcmp(s.p + i, sep->p, sep->len) == 0) {
                jlist_push(c, l, jv_str(s.p + start, i - start));
                i += sep->len;
                start = i;
            } else {
                i++;
            }
        }
        jlist_push(c, l, jv_str(s.p + start, s.len - start));
        return list_value(l);
    }
    size_t i = 0;
    for (;;) {
        jstr rest = strip((jstr){s.len - i, s.p + i}, NULL, true, false).s;
        i = (size_t)(rest.p - s.p);
        if (i >= s.len) break;
        if (maxsplit >= 0 && (int64_t)l->n >= maxsplit) { /* the rest, trailing whitespace kept */
            jlist_push(c, l, jv_str(s.p + i, s.len - i));
            break;
        }
        size_t e = i;
        while (e < s.len) {
            uint32_t cp;
            int n = kiln_utf8_next((const unsigned char *)s.p + e, s.len - e, &cp);
            if (junicode_space(cp)) break;
            e += (size_t)n;
        }
        jlist_push(c, l, jv_str(s.p + i, e - i));
        i = e;
    }
    return list_value(l);
}

static bool prefix_match(jctx *c, const jnode *at, jstr s, jv prefix, bool at_end) {
    if (prefix.type == JV_LIST) {
        for (size_t i = 0; i < prefix.l->n; i++)
            if (prefix_match(c, at, s, prefix.l->v[i], at_end)) return true;
        return false;
    }
    jstr p = need_str(c, at, prefix, at_end ? "endswith's argument" : "startswith's argument");
    if (p.len > s.len) return false;
    return memcmp(at_end ? s.p + s.len - p.len : s.p, p.p, p.len) == 0;
}

/* Python's str.splitlines: the lines of s without their line breaks (no empty piece after a final
 * break). */
static jlist *splitlines(jctx *c, jstr s) {
    jlist *l = jlist_new(c, 8);
    size_t i = 0;
    while (i < s.len) {
        size_t e = i, brk = 0;
        for (; e < s.len; e++) {
            const unsigned char *q = (const unsigned char *)s.p + e;
            size_t left = s.len - e;
            if (q[0] == '\r' && left > 1 && q[1] == '\n') brk = 2;
            else if (q[0] == '\n' || q[0] == '\r' || q[0] == '\v' || q[0] == '\f' || (q[0] >= 0x1c && q[0] <= 0x1e)) brk = 1;
            else if (left > 1 && q[0] == 0xC2 && q[1] == 0x85) brk = 2;
            else if (left > 2 && q[0] == 0xE2 && q[1] == 0x80 && (q[2] == 0xA8 || q[2] == 0xA9)) brk = 3;
            if (brk) break;
        }
        jlist_push(c, l, jv_str(s.p + i, e - i));
        i = e + brk;
    }
    return l;
}

/* Jinja's indent filter, quirks included (it appends a newline before splitting the lines). */
static jv indent(jctx *c, jstr s, jstr ind, bool first, bool blank) {
    char *with_nl = jalloc(c, s.len + 2);
    memcpy(with_nl, s.p, s.len);
    with_nl[s.len] = '\n';
    jlist *lines = splitlines(c, (jstr){s.len + 1, with_nl});
    kiln_strbuf_clear(&c->scratch);
    kiln_strbuf *b = &c->scratch;
    if (first) kiln_strbuf_append(b, ind.p, ind.len);
    for (size_t i = 0; i < lines->n; i++) {
        jstr line = lines->v[i].s;
        if (b->len + line.len + ind.len > JINJA_MAX_OUTPUT) jfail(c, NULL, "indent: the result is too large");
        if (i > 0) {
            kiln_strbuf_putc(b, '\n');
            if (blank || line.len) kiln_strbuf_append(b, ind.p, ind.len);
        }
        kiln_strbuf_append(b, line.p, line.len);
    }
    if (b->failed) jfail(c, NULL, "out of memory");
    return jv_str_copy(c, b->data ? b->data : "", b->len);
}

/* ---------------------------------------------------------------- filters */

static const char *const FILTERS[] = {"trim", "length", "count", "tojson", "upper", "lower", "capitalize", "title",
                                      "replace", "join", "first", "last", "default", "d", "items", "string", "int",
                                      "float", "list", "selectattr", "rejectattr", "select", "reject", "map",
                                      "safe", "indent", "abs", "unique", "dictsort", "sort", "reverse", "sum",
                                      "min", "max", "round", NULL};
static const char *const TESTS[] = {"defined", "undefined", "none", "string", "number", "integer", "float",
                                    "boolean", "true", "false", "mapping", "iterable", "sequence", "callable",
                                    "equalto", "eq", "==", "ne", "!=", "lt", "<", "le", "<=", "gt", ">", "ge",
                                    ">=", "in", "odd", "even", "divisibleby", "sameas", "lower", "upper", NULL};

static bool listed(const char *const *names, jstr name) {
    for (int i = 0; names[i]; i++)
        if (jstr_eq(name, names[i])) return true;
    return false;
}

bool jinja_has_filter(jstr name) { return listed(FILTERS, name); }
bool jinja_has_test(jstr name) { return listed(TESTS, name); }

jv jinja_attribute(jctx *c, jv item, jstr attr) {
    size_t i = 0;
    for (;;) {
        size_t e = i;
        while (e < attr.len && attr.p[e] != '.') e++;
        jstr part = {e - i, attr.p + i};
        bool digits = part.len > 0 && part.len < 10;
        size_t index = 0;
        for (size_t k = 0; k < part.len && digits; k++) {
            digits = isdigit((unsigned char)part.p[k]) != 0;
            index = index * 10 + (size_t)(part.p[k] - '0');
        }
        jwork(c, NULL, 1);
        if (item.type == JV_DICT || item.type == JV_NS) {
            jv *v = jdict_find(item.d, part.p, part.len);
            if (!v) return jv_undef(NULL);
            item = *v;
        } else if (item.type == JV_LIST && digits && index < item.l->n) {
            item = item.l->v[index];
        } else {
            return jv_undef(NULL);
        }
        if (e >= attr.len) return item;
        i = e + 1;
    }
}

/* selectattr / rejectattr / select / reject. */
static jv select_items(jctx *c, const jnode *at, jv seq, const jv *args, int nargs, bool by_attr, bool keep) {
    if (!jv_truthy(seq)) return lazy_value(jlist_new(c, 1)); /* Jinja yields nothing from a false value */
    jlist *items = jv_iterate(c, at, seq), *out = jlist_new(c, items->n);
    int first_test_arg = by_attr ? 1 : 0;
    jstr attr = {0};
    if (by_attr) {
        if (nargs < 1) jfail(c, at, "selectattr / rejectattr need an attribute name");
        attr = need_str(c, at, args[0], "the attribute name");
    }
    for (size_t i = 0; i < items->n; i++) {
        jv v = by_attr ? jinja_attribute(c, items->v[i], attr) : items->v[i];
        bool ok;
        if (nargs > first_test_arg) {
            jstr test = need_str(c, at, args[first_test_arg], "the test name");
            if (!jinja_has_test(test)) jfail(c, at, "unknown test '%.*s'", (int)test.len, test.p);
            ok = jinja_test(c, at, test, v, args + first_test_arg + 1, nargs - first_test_arg - 1);
        } else {
            ok = jv_truthy(v);
        }
        if (ok == keep) jlist_push(c, out, items->v[i]);
    }
    return lazy_value(out);
}

static jv first_or_last(jctx *c, const jnode *at, jv v, bool last) {
    if (last && v.type == JV_LIST && v.l->lazy) jfail(c, at, "'generator' object is not reversible");
    jlist *items = jv_iterate(c, at, v);
    if (items->n == 0) return jv_undef("No first item, sequence was empty.");
    return items->v[last ? items->n - 1 : 0];
}

static jv to_int(jctx *c, jv v, jv dflt) {
    switch (v.type) {
    case JV_INT: return v;
    case JV_BOOL: return jv_int(v.b);
    case JV_FLOAT:
        if (!isfinite(v.f) || fabs(v.f) >= 9.2e18) return dflt;
        return jv_int((int64_t)v.f);
    case JV_STR: {
        char buf[64];
        jstr s = strip(v.s, NULL, true, true).s;
        if (s.len == 0 || s.len >= sizeof buf) return dflt;
        memcpy(buf, s.p, s.len);
        buf[s.len] = 0;
        char *end;
        long long i = strtoll(buf, &end, 10);
        if (*end == 0) return jv_int(i);
        double f = strtod(buf, &end);
        if (*end == 0 && isfinite(f) && fabs(f) < 9.2e18) return jv_int((int64_t)f);
        return dflt;
    }
    default: (void)c; return dflt;
    }
}

static jv filter_tojson(jctx *c, const jnode *at, jv value, const jv *args, const jstr *kw, int nargs) {
    jv ensure_ascii = jv_bool(false), ind = jv_none(), seps = jv_none(), sort = jv_bool(false);
    jinja_arg(args, kw, nargs, 0, "ensure_ascii", &ensure_ascii);
    jinja_arg(args, kw, nargs, 1, "indent", &ind);
    jinja_arg(args, kw, nargs, 2, "separators", &seps);
    jinja_arg(args, kw, nargs, 3, "sort_keys", &sort);
    jstr indent_str, *indent = NULL;
    if (ind.type == JV_INT || ind.type == JV_BOOL) {
        int64_t n = need_int(c, at, ind, "indent");
        if (n > 64) jfail(c, at, "tojson: indent beyond 64");
        char *sp = jalloc(c, (size_t)(n > 0 ? n : 0) + 1);
        memset(sp, ' ', (size_t)(n > 0 ? n : 0));
        indent_str = (jstr){(size_t)(n > 0 ? n : 0), sp};
        indent = &indent_str;
    } else if (ind.type == JV_STR) {
        indent_str = ind.s;
        indent = &indent_str;
    } else if (ind.type != JV_NONE) {
        jfail(c, at, "tojson: indent must be an integer or a string");
    }
    jstr item_sep = indent ? (jstr){1, ","} : (jstr){2, ", "}, key_sep = {2, ": "};
    if (seps.type == JV_LIST && seps.l->n == 2) {
        item_sep = need_str(c, at, seps.l->v[0], "a separator");
        key_sep = need_str(c, at, seps.l->v[1], "a separator");
    } else if (seps.type != JV_NONE) {
        jfail(c, at, "tojson: separators must be a pair of strings");
    }
    kiln_strbuf_clear(&c->scratch);
    jv_to_json(c, at, value, jv_truthy(ensure_ascii), indent, item_sep, key_sep, jv_truthy(sort), &c->scratch);
    if (c->scratch.failed) jfail(c, at, "out of memory");
    return jv_str_copy(c, c->scratch.data ? c->scratch.data : "", c->scratch.len);
}

static jv filter_map(jctx *c, const jnode *at, jv value, const jv *args, const jstr *kw, int nargs) {
    if (!jv_truthy(value)) return lazy_value(jlist_new(c, 1)); /* Jinja yields nothing from a false value */
    jlist *items = jv_iterate(c, at, value), *out = jlist_new(c, items->n);
    jv attr, dflt = jv_undef(NULL);
    bool by_attr = jinja_arg(args, kw, nargs, -1, "attribute", &attr);
    jinja_arg(args, kw, nargs, -1, "default", &dflt);
    if (by_attr) {
        jstr name = need_str(c, at, attr, "map's attribute");
        for (size_t i = 0; i < items->n; i++) {
            jv v = jinja_attribute(c, items->v[i], name);
            jlist_push(c, out, v.type == JV_UNDEF ? dflt : v);
        }
        return lazy_value(out);
    }
    if (nargs < 1 || kw[0].p) jfail(c, at, "map needs a filter name or attribute=");
    jstr filter = need_str(c, at, args[0], "map's filter name");
    if (!jinja_has_filter(filter) || jstr_eq(filter, "map")) jfail(c, at, "map: unknown filter '%.*s'", (int)filter.len, filter.p);
    for (size_t i = 0; i < items->n; i++)
        jlist_push(c, out, jinja_filter(c, at, filter, items->v[i], args + 1, kw + 1, nargs - 1));
    return lazy_value(out);
}

jv jinja_filter(jctx *c, const jnode *at, jstr name, jv value, const jv *args, const jstr *kw, int nargs) {
    jv a0, a1, listed_result;
    if (jinja_list_filter(c, at, name, value, args, kw, nargs, &listed_result)) return listed_result;
    bool has0 = nargs > 0 && !kw[0].p;
    a0 = has0 ? args[0] : jv_undef(NULL);
    if (jstr_eq(name, "safe")) {
        jv s = jv_stringify(c, value);
        s.safe = true;
        return s;
    }
    if (jstr_eq(name, "default") || jstr_eq(name, "d")) {
        jv dflt = jv_str("", 0), boolean = jv_bool(false);
        jinja_arg(args, kw, nargs, 0, "default_value", &dflt);
        jinja_arg(args, kw, nargs, 1, "boolean", &boolean);
        if (value.type == JV_UNDEF || (jv_truthy(boolean) && !jv_truthy(value))) return dflt;
        return value;
    }
    if (jstr_eq(name, "length") || jstr_eq(name, "count")) {
        if (value.type == JV_STR) {
            jwork(c, at, value.s.len);
            return jv_int((int64_t)jstr_codepoints(value.s));
        }
        if (value.type == JV_LIST && value.l->lazy) jfail(c, at, "object of type 'generator' has no len()");
        if (value.type == JV_LIST) return jv_int((int64_t)value.l->n);
        if (value.type == JV_DICT || value.type == JV_NS) return jv_int((int64_t)value.d->n);
        if (value.type == JV_UNDEF) return jv_int(0);
        jfail(c, at, "object of type '%s' has no len()", jv_type_name(value));
    }
    if (jstr_eq(name, "tojson")) return filter_tojson(c, at, value, args, kw, nargs);
    if (jstr_eq(name, "items")) {
        if (value.type == JV_UNDEF) return lazy_value(jlist_new(c, 1));
        if (value.type != JV_DICT) jfail(c, at, "items: expected a mapping, got %s", jv_type_name(value));
        jlist *l = jlist_new(c, value.d->n);
        for (size_t i = 0; i < value.d->n; i++) {
            jlist *pair = jlist_new(c, 2);
            jlist_push(c, pair, value.d->k[i]);
            jlist_push(c, pair, value.d->v[i]);
            pair->tuple = true;
            jlist_push(c, l, list_value(pair));
        }
        return lazy_value(l);
    }
    if (jstr_eq(name, "list")) {
        jlist *src = jv_iterate(c, at, value), *l = jlist_new(c, src->n);
        for (size_t i = 0; i < src->n; i++) jlist_push(c, l, src->v[i]);
        return list_value(l);
    }
    if (jstr_eq(name, "first") || jstr_eq(name, "last")) return first_or_last(c, at, value, jstr_eq(name, "last"));
    if (jstr_eq(name, "selectattr") || jstr_eq(name, "rejectattr"))
        return select_items(c, at, value, args, nargs, true, jstr_eq(name, "selectattr"));
    if (jstr_eq(name, "select") || jstr_eq(name, "reject"))
        return select_items(c, at, value, args, nargs, false, jstr_eq(name, "select"));
    if (jstr_eq(name, "map")) return filter_map(c, at, value, args, kw, nargs);
    if (jstr_eq(name, "join")) {
        jv sep = jv_str("", 0), attr;
        jinja_arg(args, kw, nargs, 0, "d", &sep);
        bool by_attr = jinja_arg(args, kw, nargs, 1, "attribute", &attr);
        jstr s = need_str(c, at, sep, "join's separator");
        jlist *items = jv_iterate(c, at, value);
        jv *parts = jalloc(c, (items->n + 1) * sizeof *parts);
        size_t total = 0;
        for (size_t i = 0; i < items->n; i++) {
            jv v = by_attr ? jinja_attribute(c, items->v[i], need_str(c, at, attr, "join's attribute")) : items->v[i];
            parts[i] = jv_stringify(c, v);
            total += parts[i].s.len + s.len;
        }
        char *p = jalloc(c, total + 1), *q = p;
        for (size_t i = 0; i < items->n; i++) {
            if (i) {
                memcpy(q, s.p, s.len);
                q += s.len;
            }
            memcpy(q, parts[i].s.p, parts[i].s.len);
            q += parts[i].s.len;
        }
        return jv_str(p, (size_t)(q - p));
    }
    if (jstr_eq(name, "int")) {
        jv dflt = jv_int(0);
        jinja_arg(args, kw, nargs, 0, "default", &dflt);
        return to_int(c, value, dflt);
    }
    if (jstr_eq(name, "float")) {
        if (value.type == JV_FLOAT) return value;
        if (value.type == JV_INT || value.type == JV_BOOL) return jv_float(value.type == JV_INT ? (double)value.i : value.b);
        if (value.type == JV_STR) {
            char buf[64];
            jstr s = strip(value.s, NULL, true, true).s;
            if (s.len && s.len < sizeof buf) {
                memcpy(buf, s.p, s.len);
                buf[s.len] = 0;
                char *end;
                double f = strtod(buf, &end);
                if (*end == 0) return jv_float(f);
            }
        }
        return jv_float(0.0);
    }
    if (jstr_eq(name, "abs")) {
        if (value.type == JV_INT && value.i != INT64_MIN) return jv_int(value.i < 0 ? -value.i : value.i);
        if (value.type == JV_FLOAT) return jv_float(fabs(value.f));
        jfail(c, at, "bad operand type for abs(): '%s'", jv_type_name(value));
    }
    if (jstr_eq(name, "unique")) {
        jlist *src = jv_iterate(c, at, value), *l = jlist_new(c, src->n);
        for (size_t i = 0; i < src->n; i++) {
            jwork(c, at, l->n + 1);
            bool seen = false;
            for (size_t k = 0; k < l->n && !seen; k++) seen = jv_equal(l->v[k], src->v[i]);
            if (!seen) jlist_push(c, l, src->v[i]);
        }
        return lazy_value(l);
    }
    /* the string filters: str() of the value first, as Jinja's soft_str */
    jstr s = jv_stringify(c, value).s;
    jwork(c, at, s.len);
    if (jstr_eq(name, "string")) return jv_str(s.p, s.len);
    if (jstr_eq(name, "trim")) {
        jv chars;
        if (jinja_arg(args, kw, nargs, 0, "chars", &chars) && chars.type != JV_NONE) {
            jstr cs = need_str(c, at, chars, "trim's characters");
            return strip(s, &cs, true, true);
        }
        return strip(s, NULL, true, true);
    }
    if (jstr_eq(name, "upper")) return map_case(c, s, CASE_UPPER);
    if (jstr_eq(name, "lower")) return map_case(c, s, CASE_LOWER);
    if (jstr_eq(name, "capitalize")) return map_case(c, s, CASE_CAPITALIZE);
    if (jstr_eq(name, "title")) return map_case(c, s, CASE_TITLE_JINJA);
    if (jstr_eq(name, "replace")) {
        jv count = jv_none();
        if (!jinja_arg(args, kw, nargs, 0, "old", &a0) || !jinja_arg(args, kw, nargs, 1, "new", &a1))
            jfail(c, at, "replace needs the old and the new text");
        jinja_arg(args, kw, nargs, 2, "count", &count);
        jstr old = jv_stringify(c, a0).s, new = jv_stringify(c, a1).s;
        return replace(c, s, old, new, count.type == JV_NONE ? -1 : need_int(c, at, count, "replace's count"));
    }
    if (jstr_eq(name, "indent")) {
        jv width = jv_int(4), first = jv_bool(false), blank = jv_bool(false);
        jinja_arg(args, kw, nargs, 0, "width", &width);
        jinja_arg(args, kw, nargs, 1, "first", &first);
        jinja_arg(args, kw, nargs, 2, "blank", &blank);
        jstr ind;
        if (width.type == JV_STR) {
            ind = width.s;
        } else {
            int64_t w = need_int(c, at, width, "indent's width");
            if (w < 0) w = 0;
            if (w > 256) jfail(c, at, "indent: width beyond 256");
            char *sp = jalloc(c, (size_t)w + 1);
            memset(sp, ' ', (size_t)w);
            ind = (jstr){(size_t)w, sp};
        }
        return indent(c, s, ind, jv_truthy(first), jv_truthy(blank));
    }
    jfail(c, at, "unknown filter '%.*s'", (int)name.len, name.p);
}

/* ---------------------------------------------------------------- tests */

bool jinja_test(jctx *c, const jnode *at, jstr name, jv v, const jv *args, int nargs) {
    jv a = nargs > 0 ? args[0] : jv_undef(NULL);
    if (jstr_eq(name, "defined")) return v.type != JV_UNDEF;
    if (jstr_eq(name, "undefined")) return v.type == JV_UNDEF;
    if (jstr_eq(name, "none")) return v.type == JV_NONE;
    if (jstr_eq(name, "string")) return v.type == JV_STR;
    if (jstr_eq(name, "number")) return v.type == JV_INT || v.type == JV_FLOAT || v.type == JV_BOOL;
    if (jstr_eq(name, "integer")) return v.type == JV_INT;
    if (jstr_eq(name, "float")) return v.type == JV_FLOAT;
    if (jstr_eq(name, "boolean")) return v.type == JV_BOOL;
    if (jstr_eq(name, "true")) return v.type == JV_BOOL && v.b;
    if (jstr_eq(name, "false")) return v.type == JV_BOOL && !v.b;
    if (jstr_eq(name, "mapping")) return v.type == JV_DICT;
    if (jstr_eq(name, "iterable") || jstr_eq(name, "sequence"))
        return (v.type == JV_LIST && !(v.l->lazy && name.p[0] == 's')) || v.type == JV_DICT || v.type == JV_STR ||
               v.type == JV_UNDEF;
    if (jstr_eq(name, "callable")) return v.type == JV_MACRO || v.type == JV_FUNC;
    if (jstr_eq(name, "lower") || jstr_eq(name, "upper")) {
        if (v.type != JV_STR) return false;
        bool cased = false;
        for (size_t i = 0; i < v.s.len; i++) {
            unsigned char ch = (unsigned char)v.s.p[i];
            if (jstr_eq(name, "lower") ? isupper(ch) : islower(ch)) return false;
            cased |= isalpha(ch) != 0;
        }
        return cased;
    }
    if (nargs < 1 && !jstr_eq(name, "odd") && !jstr_eq(name, "even"))
        jfail(c, at, "test '%.*s' needs an argument", (int)name.len, name.p);
    if (jstr_eq(name, "equalto") || jstr_eq(name, "eq") || jstr_eq(name, "==")) return jv_equal(v, a);
    if (jstr_eq(name, "ne") || jstr_eq(name, "!=")) return !jv_equal(v, a);
    if (jstr_eq(name, "sameas")) return jv_equal(v, a) && v.type == a.type;
    if (jstr_eq(name, "lt") || jstr_eq(name, "<")) return jv_truthy(jinja_binary(c, at, JOP_LT, v, a));
    if (jstr_eq(name, "le") || jstr_eq(name, "<=")) return jv_truthy(jinja_binary(c, at, JOP_LE, v, a));
    if (jstr_eq(name, "gt") || jstr_eq(name, ">")) return jv_truthy(jinja_binary(c, at, JOP_GT, v, a));
    if (jstr_eq(name, "ge") || jstr_eq(name, ">=")) return jv_truthy(jinja_binary(c, at, JOP_GE, v, a));
    if (jstr_eq(name, "in")) return jv_truthy(jinja_binary(c, at, JOP_IN, v, a));
    int64_t i = need_int(c, at, v, "the tested value");
    if (jstr_eq(name, "odd")) return i % 2 != 0;
    if (jstr_eq(name, "even")) return i % 2 == 0;
    int64_t d = need_int(c, at, a, "divisibleby's argument");
    if (d == 0) jfail(c, at, "divisibleby 0");
    return i % d == 0;
}

/* ---------------------------------------------------------------- methods */

jv jinja_method(jctx *c, const jnode *at, jv obj, jstr name, const jv *args, const jstr *kw, int nargs) {
    jwork(c, at, obj.type == JV_STR ? obj.s.len : 1); /* string methods scan their string */
    jv a0 = nargs > 0 ? args[0] : jv_none(), a1 = nargs > 1 ? args[1] : jv_none();
    (void)kw;
    if (obj.type == JV_DICT) {
        if (jstr_eq(name, "get")) {
            jv *v = jdict_get(obj.d, a0);
            return v ? *v : a1;
        }
        if (jstr_eq(name, "items")) { /* a view, not a generator: it has a length */
            jv items = jinja_filter(c, at, (jstr){5, "items"}, obj, NULL, NULL, 0);
            items.l->lazy = false;
            return items;
        }
        if (jstr_eq(name, "keys")) return (jv){.type = JV_LIST, .l = jv_iterate(c, at, obj)};
        if (jstr_eq(name, "values")) {
            jlist *l = jlist_new(c, obj.d->n);
            for (size_t i = 0; i < obj.d->n; i++) jlist_push(c, l, obj.d->v[i]);
            return list_value(l);
        }
        jv *v = jdict_find(obj.d, name.p, name.len); /* a dict holding a macro */
        if (v && v->type == JV_MACRO) jfail(c, at, "calling a macro stored in a dict is not supported");
        jfail(c, at, "'dict object' has no method '%.*s'", (int)name.len, name.p);
    }
    if (obj.type == JV_LIST) jfail(c, at, "'%s object' has no method '%.*s'", jv_type_name(obj), (int)name.len, name.p);
    jstr s = obj.s;
    if (jstr_eq(name, "strip") || jstr_eq(name, "lstrip") || jstr_eq(name, "rstrip")) {
        bool l = name.p[0] != 'r', r = name.p[0] != 'l';
        if (nargs > 0 && a0.type != JV_NONE) {
            jstr chars = need_str(c, at, a0, "strip's characters");
            return strip(s, &chars, l, r);
        }
        return strip(s, NULL, l, r);
    }
    if (jstr_eq(name, "startswith") || jstr_eq(name, "endswith")) {
        if (nargs < 1) jfail(c, at, "%.*s needs an argument", (int)name.len, name.p);
        return jv_bool(prefix_match(c, at, s, a0, name.p[0] == 'e'));
    }
    if (jstr_eq(name, "split")) {
        jstr sep;
        int64_t maxsplit = nargs > 1 ? need_int(c, at, a1, "split's maxsplit") : -1;
        if (nargs > 0 && a0.type != JV_NONE) {
            sep = need_str(c, at, a0, "split's separator");
            if (sep.len == 0) jfail(c, at, "empty separator");
            return split(c, s, &sep, maxsplit);
        }
        return split(c, s, NULL, maxsplit);
    }
    if (jstr_eq(name, "upper")) return map_case(c, s, CASE_UPPER);
    if (jstr_eq(name, "lower")) return map_case(c, s, CASE_LOWER);
    if (jstr_eq(name, "title")) return map_case(c, s, CASE_TITLE_PY);
    if (jstr_eq(name, "capitalize")) return map_case(c, s, CASE_CAPITALIZE);
    if (jstr_eq(name, "replace")) {
        if (nargs < 2) jfail(c, at, "replace needs two arguments");
        int64_t count = nargs > 2 ? need_int(c, at, args[2], "replace's count") : -1;
        return replace(c, s, need_str(c, at, a0, "replace's argument"), need_str(c, at, a1, "replace's argument"), count);
    }
    if (jstr_eq(name, "find")) {
        jstr sub = need_str(c, at, a0, "find's argument");
        for (size_t i = 0; i + sub.len <= s.len; i++)
            if (memcmp(s.p + i, sub.p, sub.len) == 0) return jv_int((int64_t)jstr_codepoints((jstr){i, s.p}));
        return jv_int(-1);
    }
    if (jstr_eq(name, "count")) {
        jstr sub = need_str(c, at, a0, "count's argument");
        if (sub.len == 0) return jv_int((int64_t)jstr_codepoints(s) + 1);
        int64_t k = 0;
        for (size_t i = 0; i + sub.len <= s.len;) {
            if (memcmp(s.p + i, sub.p, sub.len) == 0) {
                k++;
                i += sub.len;
            } else {
                i++;
            }
        }
        return jv_int(k);
    }
    if (jstr_eq(name, "join")) return jinja_filter(c, at, (jstr){4, "join"}, a0, &obj, (jstr[]){{0, NULL}}, 1);
    jfail(c, at, "'str object' has no method '%.*s'", (int)name.len, name.p);
}

/* ---------------------------------------------------------------- global functions */

jv jinja_call_func(jctx *c, const jnode *at, jfunc fn, const jv *args, const jstr *kw, int nargs) {
    switch (fn) {
    case JF_RAISE_EXCEPTION: {
        jv msg = nargs > 0 ? jv_stringify(c, args[0]) : jv_str("", 0);
        jraise(c, msg.s.p, msg.s.len);
    }
    case JF_STRFTIME_NOW: {
        if (nargs < 1) jfail(c, at, "strftime_now needs a format");
        jstr f = need_str(c, at, args[0], "strftime_now's format");
        if (f.len > 256) jfail(c, at, "strftime_now: format too long");
        char fmt[257], out[1024];
        memcpy(fmt, f.p, f.len);
        fmt[f.len] = 0;
        size_t n = strftime(out, sizeof out, fmt, c->now);
        return jv_str_copy(c, out, n);
    }
    case JF_NAMESPACE:
    case JF_DICT: {
        jdict *d = jdict_new(c, (size_t)nargs);
        for (int i = 0; i < nargs; i++) {
            if (kw[i].p) {
                if (fn == JF_NAMESPACE && kw[i].p[0] == '_') jfail(c, at, "namespace attributes cannot start with '_'");
                jdict_set(c, d, kw[i], args[i]);
            } else if (args[i].type == JV_DICT) {
                for (size_t k = 0; k < args[i].d->n; k++) jdict_put(c, d, args[i].d->k[k], args[i].d->v[k]);
            } else {
                jfail(c, at, "%s() takes keyword arguments or a dict", fn == JF_DICT ? "dict" : "namespace");
            }
        }
        return (jv){.type = fn == JF_DICT ? JV_DICT : JV_NS, .d = d};
    }
    case JF_RANGE: {
        int64_t v[3] = {0, 0, 1};
        if (nargs < 1 || nargs > 3) jfail(c, at, "range() takes 1 to 3 arguments");
        for (int i = 0; i < nargs; i++) v[i] = need_int(c, at, args[i], "range's argument");
        int64_t start = nargs == 1 ? 0 : v[0], stop = nargs == 1 ? v[0] : v[1], step = nargs == 3 ? v[2] : 1;
        if (step == 0) jfail(c, at, "range() arg 3 must not be zero");
        double count = step > 0 ? ceil(((double)stop - (double)start) / (double)step)
                                : ceil(((double)start - (double)stop) / (double)-step);
        if (count > JINJA_MAX_RANGE) jfail(c, at, "range too big, maximum size for range is %d", JINJA_MAX_RANGE);
        jlist *l = jlist_new(c, count > 0 ? (size_t)count : 1);
        for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) jlist_push(c, l, jv_int(i));
        return list_value(l);
    }
    }
    jfail(c, at, "unknown function");
}
