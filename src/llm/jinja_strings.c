/* jinja_strings.c — the chat-template engine's string functions (jinja.h): Python's str methods that
 * templates call (strip, lstrip, rstrip, startswith, endswith, split, upper, lower, title,
 * capitalize, replace, find, count, join) and dict's (get, items, keys, values), and the string
 * helpers the filters share. Whitespace is Python's (Unicode); case mapping covers ASCII, Latin-1,
 * Latin Extended-A, Greek and Cyrillic, other characters pass through unchanged. */
#include "llm/jinja.h"

#include "core/utf8.h"

#include <ctype.h>
#include <string.h>

static jv list_value(jlist *l) { return (jv){.type = JV_LIST, .l = l}; }

/* ---------------------------------------------------------------- helpers */

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

jv jstr_strip(jstr s, const jstr *chars, bool left, bool right) {
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

jv jstr_map_case(jctx *c, jstr s, case_map how) {
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

jv jstr_replace(jctx *c, jstr s, jstr old, jstr new, int64_t count) {
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
            size_t hit = count < 0 || done < count ? jstr_find(s, i, old) : SIZE_MAX;
            size_t upto = hit == SIZE_MAX ? s.len : hit;
            kiln_strbuf_append(b, s.p + i, upto - i);
            i = upto;
            if (hit != SIZE_MAX) {
                kiln_strbuf_append(b, new.p, new.len);
                i += old.len;
                done++;
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
        size_t start = 0, hit;
        while ((maxsplit < 0 || (int64_t)l->n < maxsplit) && (hit = jstr_find(s, start, *sep)) != SIZE_MAX) {
            jlist_push(c, l, jv_str(s.p + start, hit - start));
            start = hit + sep->len;
        }
        jlist_push(c, l, jv_str(s.p + start, s.len - start));
        return list_value(l);
    }
    size_t i = 0;
    for (;;) {
        jstr rest = jstr_strip((jstr){s.len - i, s.p + i}, NULL, true, false).s;
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
    jstr p = jv_need_str(c, at, prefix, at_end ? "endswith's argument" : "startswith's argument");
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
            else if (q[0] == '\n' || q[0] == '\r' || q[0] == '\v' || q[0] == '\f' || (q[0] >= 0x1c && q[0] <= 0x1e))
                brk = 1;
            else if (left > 1 && q[0] == 0xC2 && q[1] == 0x85) brk = 2;
            else if (left > 2 && q[0] == 0xE2 && q[1] == 0x80 && (q[2] == 0xA8 || q[2] == 0xA9)) brk = 3;
            if (brk) break;
        }
        jlist_push(c, l, jv_str(s.p + i, e - i));
        i = e + brk;
    }
    return l;
}

jv jstr_indent(jctx *c, jstr s, jstr ind, bool first, bool blank) {
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
    if (obj.type == JV_LIST && jstr_eq(name, "count")) {
        int64_t k = 0;
        for (size_t i = 0; i < obj.l->n; i++) k += jv_equal(obj.l->v[i], a0);
        return jv_int(k);
    }
    if (obj.type == JV_LIST) jfail(c, at, "'%s object' has no method '%.*s'", jv_type_name(obj), (int)name.len, name.p);
    jstr s = obj.s;
    if (jstr_eq(name, "strip") || jstr_eq(name, "lstrip") || jstr_eq(name, "rstrip")) {
        bool l = name.p[0] != 'r', r = name.p[0] != 'l';
        if (nargs > 0 && a0.type != JV_NONE) {
            jstr chars = jv_need_str(c, at, a0, "strip's characters");
            return jstr_strip(s, &chars, l, r);
        }
        return jstr_strip(s, NULL, l, r);
    }
    if (jstr_eq(name, "startswith") || jstr_eq(name, "endswith")) {
        if (nargs < 1) jfail(c, at, "%.*s needs an argument", (int)name.len, name.p);
        return jv_bool(prefix_match(c, at, s, a0, name.p[0] == 'e'));
    }
    if (jstr_eq(name, "split")) {
        jstr sep;
        int64_t maxsplit = nargs > 1 ? jv_need_int(c, at, a1, "split's maxsplit") : -1;
        if (nargs > 0 && a0.type != JV_NONE) {
            sep = jv_need_str(c, at, a0, "split's separator");
            if (sep.len == 0) jfail(c, at, "empty separator");
            return split(c, s, &sep, maxsplit);
        }
        return split(c, s, NULL, maxsplit);
    }
    if (jstr_eq(name, "upper")) return jstr_map_case(c, s, CASE_UPPER);
    if (jstr_eq(name, "lower")) return jstr_map_case(c, s, CASE_LOWER);
    if (jstr_eq(name, "title")) return jstr_map_case(c, s, CASE_TITLE_PY);
    if (jstr_eq(name, "capitalize")) return jstr_map_case(c, s, CASE_CAPITALIZE);
    if (jstr_eq(name, "replace")) {
        if (nargs < 2) jfail(c, at, "replace needs two arguments");
        int64_t count = nargs > 2 ? jv_need_int(c, at, args[2], "replace's count") : -1;
        return jstr_replace(c, s, jv_need_str(c, at, a0, "replace's argument"),
                            jv_need_str(c, at, a1, "replace's argument"), count);
    }
    if (jstr_eq(name, "find")) {
        jstr sub = jv_need_str(c, at, a0, "find's argument");
        size_t hit = jstr_find(s, 0, sub);
        return jv_int(hit == SIZE_MAX ? -1 : (int64_t)jstr_codepoints((jstr){hit, s.p}));
    }
    if (jstr_eq(name, "count")) {
        jstr sub = jv_need_str(c, at, a0, "count's argument");
        if (sub.len == 0) return jv_int((int64_t)jstr_codepoints(s) + 1);
        int64_t k = 0;
        for (size_t i = jstr_find(s, 0, sub); i != SIZE_MAX; i = jstr_find(s, i + sub.len, sub)) k++;
        return jv_int(k);
    }
    if (jstr_eq(name, "join")) return jinja_filter(c, at, (jstr){4, "join"}, a0, &obj, (jstr[]){{0, NULL}}, 1);
    jfail(c, at, "'str object' has no method '%.*s'", (int)name.len, name.p);
}

