/* jinja_builtins.c — what chat templates call by name (jinja.h): Jinja's filters and tests, and
 * transformers' globals (raise_exception, strftime_now, namespace) with Jinja's range and dict. The
 * ordering filters are in jinja_sort.c, the string methods and helpers in jinja_strings.c. */
#include "llm/jinja.h"

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

jstr jv_need_str(jctx *c, const jnode *at, jv v, const char *what) {
    if (v.type != JV_STR) jfail(c, at, "%s must be a string, not %s", what, jv_type_name(v));
    return v.s;
}

int64_t jv_need_int(jctx *c, const jnode *at, jv v, const char *what) {
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

/* ---------------------------------------------------------------- filters */

static const char *const FILTERS[] = {"trim", "length", "count", "tojson", "upper", "lower", "capitalize", "title",
                                      "replace", "join", "first", "last", "default", "d", "items", "string", "int",
                                      "float", "list", "selectattr", "rejectattr", "select", "reject", "map",
                                      "safe", "indent", "abs", "unique", "dictsort", "sort", "reverse", "sum",
                                      "min", "max", "round", "format", "attr", NULL};
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
        attr = jv_need_str(c, at, args[0], "the attribute name");
    }
    for (size_t i = 0; i < items->n; i++) {
        jv v = by_attr ? jinja_attribute(c, items->v[i], attr) : items->v[i];
        bool ok;
        if (nargs > first_test_arg) {
            jstr test = jv_need_str(c, at, args[first_test_arg], "the test name");
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
        jstr s = jstr_strip(v.s, NULL, true, true).s;
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
        int64_t n = jv_need_int(c, at, ind, "indent");
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
        item_sep = jv_need_str(c, at, seps.l->v[0], "a separator");
        key_sep = jv_need_str(c, at, seps.l->v[1], "a separator");
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
        jstr name = jv_need_str(c, at, attr, "map's attribute");
        for (size_t i = 0; i < items->n; i++) {
            jv v = jinja_attribute(c, items->v[i], name);
            jlist_push(c, out, v.type == JV_UNDEF ? dflt : v);
        }
        return lazy_value(out);
    }
    if (nargs < 1 || kw[0].p) jfail(c, at, "map needs a filter name or attribute=");
    jstr filter = jv_need_str(c, at, args[0], "map's filter name");
    if (!jinja_has_filter(filter) || jstr_eq(filter, "map"))
        jfail(c, at, "map: unknown filter '%.*s'", (int)filter.len, filter.p);
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
        jstr s = jv_need_str(c, at, sep, "join's separator");
        jlist *items = jv_iterate(c, at, value);
        jv *parts = jalloc(c, (items->n + 1) * sizeof *parts);
        size_t total = 0;
        for (size_t i = 0; i < items->n; i++) {
            jv v = by_attr ? jinja_attribute(c, items->v[i], jv_need_str(c, at, attr, "join's attribute"))
                           : items->v[i];
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
    if ((jstr_eq(name, "int") || jstr_eq(name, "float")) && value.type == JV_UNDEF) /* int(Undefined) fails */
        jfail(c, at, "%.*s", (int)value.s.len, value.s.len ? value.s.p : "an undefined value");
    if (jstr_eq(name, "int")) {
        jv dflt = jv_int(0);
        jinja_arg(args, kw, nargs, 0, "default", &dflt);
        return to_int(c, value, dflt);
    }
    if (jstr_eq(name, "float")) {
        if (value.type == JV_FLOAT) return value;
        if (value.type == JV_INT) return jv_float((double)value.i);
        if (value.type == JV_BOOL) return jv_float(value.b);
        if (value.type == JV_STR) {
            char buf[64];
            jstr s = jstr_strip(value.s, NULL, true, true).s;
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
        if (value.type == JV_BOOL) return jv_int(value.b);
        if (value.type == JV_INT && value.i != INT64_MIN) return jv_int(value.i < 0 ? -value.i : value.i);
        if (value.type == JV_FLOAT) return jv_float(fabs(value.f));
        jfail(c, at, "bad operand type for abs(): '%s'", jv_type_name(value));
    }
    if (jstr_eq(name, "unique")) {
        jlist *src = jv_iterate(c, at, value), *l = jlist_new(c, src->n);
        for (size_t i = 0; i < src->n; i++) {
            jwork(c, at, l->n + 1);
            if (src->v[i].type == JV_LIST || src->v[i].type == JV_DICT || src->v[i].type == JV_NS)
                jfail(c, at, "unhashable type: '%s'", jv_type_name(src->v[i]));
            bool seen = false;
            for (size_t k = 0; k < l->n && !seen; k++) seen = jv_equal(l->v[k], src->v[i]);
            if (!seen) jlist_push(c, l, src->v[i]);
        }
        return lazy_value(l);
    }
    if (jstr_eq(name, "attr")) { /* getattr only: a dict's keys are not its attributes */
        jstr attr = jv_need_str(c, at, a0, "attr's name");
        jv *v = value.type == JV_NS ? jdict_find(value.d, attr.p, attr.len) : NULL;
        return v ? *v : jv_undef(NULL);
    }
    if (jstr_eq(name, "indent") && value.type != JV_STR) { /* Jinja appends "\n" to the value itself */
        if (value.type == JV_UNDEF) jfail(c, at, "%.*s", (int)value.s.len, value.s.len ? value.s.p : "undefined");
        jfail(c, at, "unsupported operand type(s) for +=: '%s' and 'str'", jv_type_name(value));
    }
    /* the string filters: str() of the value first, as Jinja's soft_str */
    jstr s = jv_stringify(c, value).s;
    jwork(c, at, s.len);
    if (jstr_eq(name, "string")) return jv_str(s.p, s.len);
    if (jstr_eq(name, "trim")) {
        jv chars;
        if (jinja_arg(args, kw, nargs, 0, "chars", &chars) && chars.type != JV_NONE) {
            jstr cs = jv_need_str(c, at, chars, "trim's characters");
            return jstr_strip(s, &cs, true, true);
        }
        return jstr_strip(s, NULL, true, true);
    }
    if (jstr_eq(name, "upper")) return jstr_map_case(c, s, CASE_UPPER);
    if (jstr_eq(name, "lower")) return jstr_map_case(c, s, CASE_LOWER);
    if (jstr_eq(name, "capitalize")) return jstr_map_case(c, s, CASE_CAPITALIZE);
    if (jstr_eq(name, "title")) return jstr_map_case(c, s, CASE_TITLE_JINJA);
    if (jstr_eq(name, "format")) { /* fmt|format(a, b) is fmt % (a, b); keywords make a mapping */
        jlist *positional = jlist_new(c, (size_t)nargs + 1);
        jdict *named = jdict_new(c, 2);
        for (int i = 0; i < nargs; i++) {
            if (kw[i].p) jdict_set(c, named, kw[i], args[i]);
            else jlist_push(c, positional, args[i]);
        }
        if (positional->n && named->n) jfail(c, at, "can't handle positional and keyword arguments at the same time");
        positional->tuple = true;
        return jinja_percent_format(c, at, s, named->n ? (jv){.type = JV_DICT, .d = named} : list_value(positional));
    }
    if (jstr_eq(name, "replace")) {
        jv count = jv_none();
        if (!jinja_arg(args, kw, nargs, 0, "old", &a0) || !jinja_arg(args, kw, nargs, 1, "new", &a1))
            jfail(c, at, "replace needs the old and the new text");
        jinja_arg(args, kw, nargs, 2, "count", &count);
        jstr old = jv_stringify(c, a0).s, new = jv_stringify(c, a1).s;
        return jstr_replace(c, s, old, new, count.type == JV_NONE ? -1 : jv_need_int(c, at, count, "replace's count"));
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
            int64_t w = jv_need_int(c, at, width, "indent's width");
            if (w < 0) w = 0;
            if (w > 256) jfail(c, at, "indent: width beyond 256");
            char *sp = jalloc(c, (size_t)w + 1);
            memset(sp, ' ', (size_t)w);
            ind = (jstr){(size_t)w, sp};
        }
        return jstr_indent(c, s, ind, jv_truthy(first), jv_truthy(blank));
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
    if (jstr_eq(name, "lower") || jstr_eq(name, "upper")) { /* str(v).islower() / .isupper() */
        jstr s = jv_stringify(c, v).s;
        bool lower = jstr_eq(name, "lower");
        jstr same = jstr_map_case(c, s, lower ? CASE_LOWER : CASE_UPPER).s;
        jstr other = jstr_map_case(c, s, lower ? CASE_UPPER : CASE_LOWER).s;
        bool unchanged = same.len == s.len && memcmp(same.p, s.p, s.len) == 0;
        bool has_cased = other.len != s.len || memcmp(other.p, s.p, s.len) != 0;
        return unchanged && has_cased;
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
    /* odd: v % 2 == 1, even: v % 2 == 0, divisibleby: v % a == 0, with Python's % (floats too) */
    jv rem = jinja_binary(c, at, JOP_MOD, v, jstr_eq(name, "divisibleby") ? a : jv_int(2));
    return jv_equal(rem, jv_int(jstr_eq(name, "odd") ? 1 : 0));
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
        jstr f = jv_need_str(c, at, args[0], "strftime_now's format");
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
        for (int i = 0; i < nargs; i++) v[i] = jv_need_int(c, at, args[i], "range's argument");
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
