/* json_read.c — the strict JSON reader of json_read.h (recursive descent into a node array) and the JSON
 * re-writer. Decoded strings never outgrow their source text, so one buffer of the
 * input's size holds them all and their pointers stay valid while nodes are added. */
#include "core/json_read.h"

#include "core/json_write.h"
#include "core/status.h"
#include "core/utf8.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define JSON_MAX_DEPTH 256

typedef struct parser {
    const char *s;
    size_t len, pos;
    const char *what;
    kiln_jdoc *doc;
    size_t spos; /* next free byte in doc->strings */
} parser;

/* Fails with KILN_ERR_PARSE at the current offset. */
static kiln_status fail(parser *p, const char *problem) {
    return kiln_error(KILN_ERR_PARSE, "%s: invalid JSON at byte %zu: %s", p->what, p->pos, problem);
}

/* Skips JSON whitespace. */
static void skip_ws(parser *p) {
    while (p->pos < p->len) {
        char c = p->s[p->pos];
        if (c != ' ' && c != '\t' && c != '\n' && c != '\r') break;
        p->pos++;
    }
}

/* Appends a zeroed node of `type`; its index in *idx. */
static kiln_status new_node(parser *p, kiln_jtype type, int *idx) {
    kiln_jdoc *d = p->doc;
    if (d->nnodes == d->cap) {
        int cap = d->cap ? d->cap * 2 : 64;
        kiln_jnode *n = realloc(d->nodes, (size_t)cap * sizeof *n);
        if (!n) return kiln_error(KILN_ERR_OUT_OF_MEMORY, "%s: out of memory parsing JSON", p->what);
        d->nodes = n;
        d->cap = cap;
    }
    *idx = d->nnodes++;
    d->nodes[*idx] = (kiln_jnode){.type = type, .first = -1, .next = -1};
    return KILN_OK;
}

/* Reads 4 hex digits at p->pos into *out. */
static bool read_hex4(parser *p, unsigned *out) {
    if (p->len - p->pos < 4) return false;
    unsigned v = 0;
    for (int i = 0; i < 4; i++) {
        char c = p->s[p->pos + i];
        v <<= 4;
        if (c >= '0' && c <= '9') v |= (unsigned)(c - '0');
        else if (c >= 'a' && c <= 'f') v |= (unsigned)(c - 'a' + 10);
        else if (c >= 'A' && c <= 'F') v |= (unsigned)(c - 'A' + 10);
        else return false;
    }
    p->pos += 4;
    *out = v;
    return true;
}

/* Parses a string literal (p->pos at the opening quote) into the string buffer. */
static kiln_status parse_string(parser *p, const char **out, size_t *outlen) {
    p->pos++; /* opening quote */
    char *dst = p->doc->strings + p->spos;
    size_t n = 0;
    for (;;) {
        if (p->pos >= p->len) return fail(p, "unterminated string");
        unsigned char c = (unsigned char)p->s[p->pos];
        if (c == '"') { p->pos++; break; }
        if (c < 0x20) return fail(p, "control character in string");
        if (c != '\\') { dst[n++] = (char)c; p->pos++; continue; }
        if (++p->pos >= p->len) return fail(p, "unterminated escape");
        char e = p->s[p->pos++];
        switch (e) {
        case '"': dst[n++] = '"'; break;
        case '\\': dst[n++] = '\\'; break;
        case '/': dst[n++] = '/'; break;
        case 'b': dst[n++] = '\b'; break;
        case 'f': dst[n++] = '\f'; break;
        case 'n': dst[n++] = '\n'; break;
        case 'r': dst[n++] = '\r'; break;
        case 't': dst[n++] = '\t'; break;
        case 'u': {
            unsigned cp;
            if (!read_hex4(p, &cp)) return fail(p, "bad \\u escape");
            if (cp >= 0xD800 && cp < 0xDC00) {
                unsigned lo;
                if (p->len - p->pos < 2 || p->s[p->pos] != '\\' || p->s[p->pos + 1] != 'u')
                    return fail(p, "lone high surrogate");
                p->pos += 2;
                if (!read_hex4(p, &lo) || lo < 0xDC00 || lo > 0xDFFF) return fail(p, "bad low surrogate");
                cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
            } else if (cp >= 0xDC00 && cp < 0xE000) {
                return fail(p, "lone low surrogate");
            }
            n += (size_t)kiln_utf8_put(cp, dst + n);
            break;
        }
        default: return fail(p, "unknown escape");
        }
    }
    dst[n] = '\0';
    p->spos += n + 1;
    *out = dst;
    *outlen = n;
    return KILN_OK;
}

/* Parses a number per the JSON grammar (no leading zeros, no '+', no hex, no NaN). */
static kiln_status parse_number(parser *p, double *out) {
    size_t start = p->pos;
    const char *s = p->s;
    if (p->pos < p->len && s[p->pos] == '-') p->pos++;
    if (p->pos >= p->len) return fail(p, "truncated number");
    if (s[p->pos] == '0') p->pos++;
    else if (s[p->pos] >= '1' && s[p->pos] <= '9') while (p->pos < p->len && s[p->pos] >= '0' && s[p->pos] <= '9') p->pos++;
    else return fail(p, "bad number");
    if (p->pos < p->len && s[p->pos] == '.') {
        p->pos++;
        if (p->pos >= p->len || s[p->pos] < '0' || s[p->pos] > '9') return fail(p, "bad fraction");
        while (p->pos < p->len && s[p->pos] >= '0' && s[p->pos] <= '9') p->pos++;
    }
    if (p->pos < p->len && (s[p->pos] == 'e' || s[p->pos] == 'E')) {
        p->pos++;
        if (p->pos < p->len && (s[p->pos] == '+' || s[p->pos] == '-')) p->pos++;
        if (p->pos >= p->len || s[p->pos] < '0' || s[p->pos] > '9') return fail(p, "bad exponent");
        while (p->pos < p->len && s[p->pos] >= '0' && s[p->pos] <= '9') p->pos++;
    }
    char tmp[64];
    size_t n = p->pos - start;
    if (n < sizeof tmp) {
        memcpy(tmp, s + start, n);
        tmp[n] = '\0';
        *out = strtod(tmp, NULL);
    } else {
        char *big = malloc(n + 1);
        if (!big) return kiln_error(KILN_ERR_OUT_OF_MEMORY, "%s: out of memory", p->what);
        memcpy(big, s + start, n);
        big[n] = '\0';
        *out = strtod(big, NULL);
        free(big);
    }
    return KILN_OK;
}

/* Matches a literal word (true, false, null). */
static bool match(parser *p, const char *word) {
    size_t n = strlen(word);
    if (p->len - p->pos < n || memcmp(p->s + p->pos, word, n)) return false;
    p->pos += n;
    return true;
}

static kiln_status parse_value(parser *p, int depth, int *idx);

/* Parses the members or elements of an object / array (p->pos after the opening bracket). */
static kiln_status parse_container(parser *p, int depth, int self, bool object) {
    char close = object ? '}' : ']';
    int last = -1;
    skip_ws(p);
    if (p->pos < p->len && p->s[p->pos] == close) { p->pos++; return KILN_OK; }
    for (;;) {
        const char *key = NULL;
        size_t keylen;
        skip_ws(p);
        if (object) {
            if (p->pos >= p->len || p->s[p->pos] != '"') return fail(p, "expected a member name");
            KILN_TRY(parse_string(p, &key, &keylen));
            skip_ws(p);
            if (p->pos >= p->len || p->s[p->pos] != ':') return fail(p, "expected ':'");
            p->pos++;
        }
        int child;
        KILN_TRY(parse_value(p, depth + 1, &child));
        kiln_jnode *nodes = p->doc->nodes;
        nodes[child].key = key;
        if (last < 0) nodes[self].first = child;
        else nodes[last].next = child;
        last = child;
        nodes[self].count++;
        skip_ws(p);
        if (p->pos >= p->len) return fail(p, object ? "unterminated object" : "unterminated array");
        char c = p->s[p->pos++];
        if (c == close) return KILN_OK;
        if (c != ',') return fail(p, object ? "expected ',' or '}'" : "expected ',' or ']'");
    }
}

/* Parses one value (after optional whitespace) into a new node, index in *idx. */
static kiln_status parse_value(parser *p, int depth, int *idx) {
    if (depth > JSON_MAX_DEPTH) return fail(p, "nesting deeper than 256 levels");
    skip_ws(p);
    if (p->pos >= p->len) return fail(p, "unexpected end of input");
    char c = p->s[p->pos];
    if (c == '{' || c == '[') {
        KILN_TRY(new_node(p, c == '{' ? KILN_JNODE_OBJECT : KILN_JNODE_ARRAY, idx));
        p->pos++;
        return parse_container(p, depth, *idx, c == '{');
    }
    if (c == '"') {
        const char *s;
        size_t n;
        KILN_TRY(parse_string(p, &s, &n));
        KILN_TRY(new_node(p, KILN_JNODE_STRING, idx));
        p->doc->nodes[*idx].str = s;
        p->doc->nodes[*idx].len = n;
        return KILN_OK;
    }
    if (c == '-' || (c >= '0' && c <= '9')) {
        double v = 0;
        KILN_TRY(parse_number(p, &v));
        KILN_TRY(new_node(p, KILN_JNODE_NUMBER, idx));
        p->doc->nodes[*idx].num = v;
        return KILN_OK;
    }
    if (match(p, "true")) return new_node(p, KILN_JNODE_TRUE, idx);
    if (match(p, "false")) return new_node(p, KILN_JNODE_FALSE, idx);
    if (match(p, "null")) return new_node(p, KILN_JNODE_NULL, idx);
    return fail(p, "unexpected character");
}

kiln_status kiln_jdoc_parse(const char *text, size_t len, const char *what, kiln_jdoc *doc) {
    memset(doc, 0, sizeof *doc);
    parser p = {.s = text, .len = len, .what = what ? what : "JSON", .doc = doc};
    doc->strings = malloc(len + 1);
    if (!doc->strings) return kiln_error(KILN_ERR_OUT_OF_MEMORY, "%s: out of memory", p.what);
    int root;
    kiln_status s = parse_value(&p, 0, &root);
    if (s == KILN_OK) {
        skip_ws(&p);
        if (p.pos != len) s = fail(&p, "trailing characters after the value");
    }
    if (s != KILN_OK) kiln_jdoc_free(doc);
    return s;
}

void kiln_jdoc_free(kiln_jdoc *doc) {
    if (!doc) return;
    free(doc->nodes);
    free(doc->strings);
    memset(doc, 0, sizeof *doc);
}

const kiln_jnode *kiln_jdoc_root(const kiln_jdoc *doc) {
    return doc && doc->nnodes ? &doc->nodes[0] : NULL;
}

const kiln_jnode *kiln_jdoc_first(const kiln_jdoc *doc, const kiln_jnode *v) {
    if (!v || (v->type != KILN_JNODE_ARRAY && v->type != KILN_JNODE_OBJECT) || v->first < 0) return NULL;
    return &doc->nodes[v->first];
}

const kiln_jnode *kiln_jdoc_next(const kiln_jdoc *doc, const kiln_jnode *v) {
    return v && v->next >= 0 ? &doc->nodes[v->next] : NULL;
}

const kiln_jnode *kiln_jdoc_get(const kiln_jdoc *doc, const kiln_jnode *obj, const char *key) {
    if (!obj || obj->type != KILN_JNODE_OBJECT) return NULL;
    for (const kiln_jnode *c = kiln_jdoc_first(doc, obj); c; c = kiln_jdoc_next(doc, c))
        if (c->key && !strcmp(c->key, key)) return c;
    return NULL;
}

const kiln_jnode *kiln_jdoc_at(const kiln_jdoc *doc, const kiln_jnode *arr, int i) {
    if (i < 0) return NULL;
    const kiln_jnode *c = kiln_jdoc_first(doc, arr);
    while (c && i-- > 0) c = kiln_jdoc_next(doc, c);
    return c;
}

bool kiln_jdoc_num(const kiln_jnode *v, double *out) {
    if (!v || v->type != KILN_JNODE_NUMBER) return false;
    *out = v->num;
    return true;
}

const char *kiln_jdoc_str(const kiln_jnode *v) {
    return v && v->type == KILN_JNODE_STRING ? v->str : NULL;
}

double kiln_jdoc_get_num(const kiln_jdoc *doc, const kiln_jnode *obj, const char *key, double dflt) {
    double v;
    return kiln_jdoc_num(kiln_jdoc_get(doc, obj, key), &v) ? v : dflt;
}

void kiln_jdoc_write(const kiln_jdoc *doc, const kiln_jnode *v, kiln_strbuf *out) {
    char num[32];
    switch (v->type) {
    case KILN_JNODE_NULL: kiln_strbuf_puts(out, "null"); break;
    case KILN_JNODE_FALSE: kiln_strbuf_puts(out, "false"); break;
    case KILN_JNODE_TRUE: kiln_strbuf_puts(out, "true"); break;
    case KILN_JNODE_NUMBER: kiln_strbuf_puts(out, isfinite(v->num) ? kiln_format_double(num, v->num) : "null"); break;
    case KILN_JNODE_STRING: kiln_json_escape(out, v->str, v->len); break;
    case KILN_JNODE_ARRAY:
    case KILN_JNODE_OBJECT: {
        bool obj = v->type == KILN_JNODE_OBJECT;
        kiln_strbuf_putc(out, obj ? '{' : '[');
        for (const kiln_jnode *c = kiln_jdoc_first(doc, v); c; c = kiln_jdoc_next(doc, c)) {
            if (c != kiln_jdoc_first(doc, v)) kiln_strbuf_putc(out, ',');
            if (obj) {
                kiln_json_escape(out, c->key, strlen(c->key));
                kiln_strbuf_putc(out, ':');
            }
            kiln_jdoc_write(doc, c, out);
        }
        kiln_strbuf_putc(out, obj ? '}' : ']');
        break;
    }
    }
}
