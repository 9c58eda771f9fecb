/* jinja_sort.c — the chat-template filters that order or aggregate a sequence (jinja.h): sort and
 * dictsort (stable, as Python's sorted, strings compared without case unless case_sensitive), reverse,
 * sum, min, max and round, with Jinja's arguments. */
#include "llm/jinja.h"


#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct sort_item {
    jv key, value;
} sort_item;

/* The comparison key of a value: its attribute(s) when given, strings lowered unless case_sensitive. */
static jv ignore_case(jctx *c, jv v, bool case_sensitive) {
    if (case_sensitive || v.type != JV_STR) return v;
    char *p = jalloc(c, v.s.len + 1);
    for (size_t i = 0; i < v.s.len; i++) p[i] = (char)tolower((unsigned char)v.s.p[i]);
    return jv_str(p, v.s.len);
}

static jv sort_key(jctx *c, jv item, jv attribute, bool case_sensitive) {
    if (attribute.type != JV_STR) return ignore_case(c, item, case_sensitive);
    jstr a = attribute.s;
    if (!memchr(a.p, ',', a.len)) return ignore_case(c, jinja_attribute(c, item, a), case_sensitive);
    jlist *keys = jlist_new(c, 2); /* "a,b": a tuple of attributes */
    for (size_t i = 0; i <= a.len;) {
        size_t e = i;
        while (e < a.len && a.p[e] != ',') e++;
        jlist_push(c, keys, ignore_case(c, jinja_attribute(c, item, (jstr){e - i, a.p + i}), case_sensitive));
        i = e + 1;
    }
    keys->tuple = true;
    return (jv){.type = JV_LIST, .l = keys};
}

/* Stable merge sort of items[0..n) by key (descending when reverse, equal keys keeping their order). */
static void merge_sort(jctx *c, const jnode *at, sort_item *items, sort_item *tmp, size_t n, bool reverse) {
    if (n < 2) return;
    size_t mid = n / 2;
    merge_sort(c, at, items, tmp, mid, reverse);
    merge_sort(c, at, items + mid, tmp, n - mid, reverse);
    size_t i = 0, j = mid, k = 0;
    jwork(c, at, n);
    while (i < mid && j < n) {
        int cmp = jinja_compare(c, at, items[j].key, items[i].key);
        if (reverse) cmp = -cmp;
        tmp[k++] = cmp < 0 ? items[j++] : items[i++];
    }
    while (i < mid) tmp[k++] = items[i++];
    while (j < n) tmp[k++] = items[j++];
    memcpy(items, tmp, n * sizeof *items);
}

static jv sorted(jctx *c, const jnode *at, sort_item *items, size_t n, bool reverse) {
    sort_item *tmp = jalloc(c, (n ? n : 1) * sizeof *tmp);
    merge_sort(c, at, items, tmp, n, reverse);
    jlist *out = jlist_new(c, n);
    for (size_t i = 0; i < n; i++) jlist_push(c, out, items[i].value);
    return (jv){.type = JV_LIST, .l = out};
}

/* Python's round(x, ndigits) for floats: correctly rounded, ties to even. */
static double round_common(double x, int64_t ndigits) {
    if (!isfinite(x)) return x;
    if (ndigits >= 0) {
        char buf[400];
        snprintf(buf, sizeof buf, "%.*f", (int)(ndigits > 300 ? 300 : ndigits), x);
        return strtod(buf, NULL);
    }
    double scale = pow(10.0, (double)-ndigits);
    return nearbyint(x / scale) * scale;
}

bool jinja_list_filter(jctx *c, const jnode *at, jstr name, jv value, const jv *args, const jstr *kw, int nargs,
                       jv *out) {
    if (jstr_eq(name, "sort") || jstr_eq(name, "dictsort")) {
        bool dict = jstr_eq(name, "dictsort");
        jv reverse = jv_bool(false), case_sensitive = jv_bool(false), attribute = jv_none(), by = jv_strz("key");
        if (dict) {
            jinja_arg(args, kw, nargs, 0, "case_sensitive", &case_sensitive);
            jinja_arg(args, kw, nargs, 1, "by", &by);
            jinja_arg(args, kw, nargs, 2, "reverse", &reverse);
            if (value.type != JV_DICT) jfail(c, at, "dictsort: expected a mapping, got %s", jv_type_name(value));
        } else {
            jinja_arg(args, kw, nargs, 0, "reverse", &reverse);
            jinja_arg(args, kw, nargs, 1, "case_sensitive", &case_sensitive);
            jinja_arg(args, kw, nargs, 2, "attribute", &attribute);
        }
        jlist *src = dict ? NULL : jv_iterate(c, at, value);
        size_t n = dict ? value.d->n : src->n;
        sort_item *items = jalloc(c, (n ? n : 1) * sizeof *items);
        bool by_value = by.type == JV_STR && jstr_eq(by.s, "value");
        if (dict && !by_value && !(by.type == JV_STR && jstr_eq(by.s, "key")))
            jfail(c, at, "dictsort: you can only sort by either \"key\" or \"value\"");
        for (size_t i = 0; i < n; i++) {
            if (dict) {
                jlist *pair = jlist_new(c, 2);
                jlist_push(c, pair, value.d->k[i]);
                jlist_push(c, pair, value.d->v[i]);
                pair->tuple = true;
                items[i].value = (jv){.type = JV_LIST, .l = pair};
                items[i].key = ignore_case(c, pair->v[by_value ? 1 : 0], jv_truthy(case_sensitive));
            } else {
                items[i].value = src->v[i];
                items[i].key = sort_key(c, src->v[i], attribute, jv_truthy(case_sensitive));
            }
        }
        *out = sorted(c, at, items, n, jv_truthy(reverse));
        return true;
    }
    if (jstr_eq(name, "reverse")) {
        jlist *src = jv_iterate(c, at, value), *l = jlist_new(c, src->n);
        for (size_t i = src->n; i > 0; i--) jlist_push(c, l, src->v[i - 1]);
        if (value.type != JV_STR) { /* a list's reversed() iterator; a generator is listed first */
            l->lazy = !(value.type == JV_LIST && value.l->lazy);
            *out = (jv){.type = JV_LIST, .l = l};
            return true;
        }
        char *p = jalloc(c, value.s.len + 1), *q = p;
        for (size_t i = 0; i < l->n; i++) {
            memcpy(q, l->v[i].s.p, l->v[i].s.len);
            q += l->v[i].s.len;
        }
        *out = jv_str(p, value.s.len);
        return true;
    }
    if (jstr_eq(name, "sum")) {
        jv attribute = jv_none(), total = jv_int(0);
        jinja_arg(args, kw, nargs, 0, "attribute", &attribute);
        jinja_arg(args, kw, nargs, 1, "start", &total);
        jlist *src = jv_iterate(c, at, value);
        for (size_t i = 0; i < src->n; i++) {
            jv v = attribute.type == JV_STR ? jinja_attribute(c, src->v[i], attribute.s) : src->v[i];
            total = jinja_binary(c, at, JOP_ADD, total, v);
        }
        *out = total;
        return true;
    }
    if (jstr_eq(name, "min") || jstr_eq(name, "max")) {
        jv case_sensitive = jv_bool(false), attribute = jv_none();
        jinja_arg(args, kw, nargs, 0, "case_sensitive", &case_sensitive);
        jinja_arg(args, kw, nargs, 1, "attribute", &attribute);
        jlist *src = jv_iterate(c, at, value);
        if (src->n == 0) {
            *out = jv_undef("No aggregated item, sequence was empty.");
            return true;
        }
        bool want_max = jstr_eq(name, "max");
        size_t best = 0;
        jv best_key = sort_key(c, src->v[0], attribute, jv_truthy(case_sensitive));
        for (size_t i = 1; i < src->n; i++) {
            jv key = sort_key(c, src->v[i], attribute, jv_truthy(case_sensitive));
            int cmp = jinja_compare(c, at, key, best_key);
            if (want_max ? cmp > 0 : cmp < 0) {
                best = i;
                best_key = key;
            }
        }
        *out = src->v[best];
        return true;
    }
    if (jstr_eq(name, "round")) {
        jv precision = jv_int(0), method = jv_strz("common");
        jinja_arg(args, kw, nargs, 0, "precision", &precision);
        jinja_arg(args, kw, nargs, 1, "method", &method);
        if (precision.type != JV_INT) jfail(c, at, "round: precision must be an integer");
        if (value.type != JV_INT && value.type != JV_FLOAT && value.type != JV_BOOL)
            jfail(c, at, "round: expected a number, got %s", jv_type_name(value));
        bool common = method.type == JV_STR && jstr_eq(method.s, "common");
        if (!common && !(method.type == JV_STR && (jstr_eq(method.s, "floor") || jstr_eq(method.s, "ceil"))))
            jfail(c, at, "round: method must be 'common', 'ceil' or 'floor'");
        if (common && value.type != JV_FLOAT) {
            *out = value.type == JV_BOOL ? jv_int(value.b) : value; /* Python's round(int, n) is the int */
            return true;
        }
        double x = value.type == JV_FLOAT ? value.f : value.type == JV_INT ? (double)value.i : value.b;
        if (common) {
            *out = jv_float(round_common(x, precision.i));
        } else {
            double scale = pow(10.0, (double)precision.i);
            *out = jv_float((jstr_eq(method.s, "floor") ? floor(x * scale) : ceil(x * scale)) / scale);
        }
        return true;
    }
    return false;
}
