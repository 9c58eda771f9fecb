/* jinja_lex.c — the chat-template lexer (jinja.h): splits a template into text and the tokens of its
 * {{ }} / {% %} tags ({# #} comments are dropped), applying whitespace control as Jinja's lexer does
 * with transformers' settings: `-` strips all whitespace on that side of a tag, `+` keeps it,
 * trim_blocks drops the newline right after a block or comment tag, lstrip_blocks drops the spaces
 * and tabs before a block or comment tag that starts a line. As Jinja, the source's \r\n and \r
 * become \n and one trailing newline is dropped. */
#include "llm/jinja.h"

#include "core/status.h"
#include "core/utf8.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

typedef struct lexer {
    const char *s; /* normalized source */
    size_t n, pos;
    int line, col_base; /* line of pos; offset of that line's start */
    jarena *arena;
    jtoken *toks;
    int ntoks, cap;
    kiln_status status;
} lexer;

static void advance_to(lexer *L, size_t to) {
    const char *nl;
    while (L->pos < to && (nl = memchr(L->s + L->pos, '\n', to - L->pos)) != NULL) {
        L->line++;
        L->pos = (size_t)(nl - L->s) + 1;
        L->col_base = (int)L->pos;
    }
    if (L->pos < to) L->pos = to;
}

static int col_of(const lexer *L, size_t at) { return (int)at - L->col_base + 1; }

static bool fail(lexer *L, kiln_status s, size_t at, const char *what) {
    int line = L->line, base = L->col_base;
    for (size_t i = L->pos; i < at && i < L->n; i++)
        if (L->s[i] == '\n') {
            line++;
            base = (int)i + 1;
        }
    L->status = kiln_error(s, "chat template: %s (at line %d:%d)", what, line, (int)at - base + 1);
    return false;
}

static jtoken *push(lexer *L, jtok type, size_t at) {
    if (L->ntoks == L->cap) { /* on the heap, grown in place: the parser is done with it before the render */
        if (L->cap > INT_MAX / 2) return NULL;
        int cap = L->cap ? 2 * L->cap : 64;
        jtoken *t = realloc(L->toks, (size_t)cap * sizeof *t);
        if (!t) return NULL;
        L->toks = t;
        L->cap = cap;
    }
    jtoken *t = &L->toks[L->ntoks++];
    memset(t, 0, sizeof *t);
    t->type = type;
    t->line = L->line;
    t->col = col_of(L, at);
    return t;
}

/* Length of the whitespace code point at s[0..n) (Python's \s), 0 if none. */
static int space_at(const char *s, size_t n) {
    uint32_t cp;
    int len = kiln_utf8_next((const unsigned char *)s, n, &cp);
    return junicode_space(cp) ? len : 0;
}

static size_t rstrip_len(const char *s, size_t n) {
    while (n > 0) {
        size_t back = 1;
        while (back < n && back < 4 && ((unsigned char)s[n - back] & 0xC0) == 0x80) back++;
        if (space_at(s + n - back, back) != (int)back) break;
        n -= back;
    }
    return n;
}

static size_t skip_space(const lexer *L, size_t at) {
    int k;
    while (at < L->n && (k = space_at(L->s + at, L->n - at)) > 0) at += (size_t)k;
    return at;
}

/* Decodes a string literal's escapes as Python's unicode-escape codec (what Jinja applies). */
static bool decode_string(lexer *L, size_t at, size_t end, jstr *out) {
    char *p = jarena_alloc(L->arena, end - at + 1);
    if (!p) return fail(L, KILN_ERR_OUT_OF_MEMORY, at, "out of memory");
    size_t o = 0;
    for (size_t i = at + 1; i < end - 1; i++) {
        char ch = L->s[i];
        if (ch != '\\') {
            p[o++] = ch;
            continue;
        }
        char e = L->s[++i];
        int hex = 0;
        switch (e) {
        case 'n': p[o++] = '\n'; break;
        case 't': p[o++] = '\t'; break;
        case 'r': p[o++] = '\r'; break;
        case 'a': p[o++] = '\a'; break;
        case 'b': p[o++] = '\b'; break;
        case 'f': p[o++] = '\f'; break;
        case 'v': p[o++] = '\v'; break;
        case '0': case '1': case '2': case '3': case '4': case '5': case '6': case '7': {
            uint32_t v = 0;
            int k = 0;
            for (; k < 3 && L->s[i + k] >= '0' && L->s[i + k] <= '7'; k++) v = v * 8 + (uint32_t)(L->s[i + k] - '0');
            i += (size_t)k - 1;
            o += (size_t)kiln_utf8_put(v, p + o);
            break;
        }
        case 'x': hex = 2; break;
        case 'u': hex = 4; break;
        case 'U': hex = 8; break;
        case '\n': break;
        case '\\': case '\'': case '"': p[o++] = e; break;
        default: p[o++] = '\\'; p[o++] = e; break;
        }
        if (hex) {
            uint32_t v = 0;
            for (int k = 1; k <= hex; k++) {
                char h = i + (size_t)k < end - 1 ? L->s[i + (size_t)k] : 0;
                if (!isxdigit((unsigned char)h))
                    return fail(L, KILN_ERR_PARSE, i - 1, "truncated \\x/\\u escape in a string");
                v = v * 16 + (uint32_t)(isdigit((unsigned char)h) ? h - '0' : (tolower((unsigned char)h) - 'a' + 10));
            }
            if (v >= 0x110000 || (v >= 0xD800 && v < 0xE000))
                return fail(L, KILN_ERR_UNSUPPORTED, i - 1, "escape of a code point UTF-8 cannot hold");
            i += (size_t)hex;
            o += (size_t)kiln_utf8_put(v, p + o);
        }
    }
    *out = (jstr){o, p};
    return true;
}

/* The length of the operator at s (left bytes): 2 for // ** == != <= >=, 1 for the one-character
 * ones, 0 for none. */
static size_t op_len(const char *s, size_t left) {
    char second = left >= 2 ? s[1] : 0;
    switch (s[0]) {
    case '/':
    case '*': return second == s[0] ? 2 : 1;
    case '=':
    case '<':
    case '>': return second == '=' ? 2 : 1;
    case '!': return second == '=' ? 2 : 0;
    case '+': case '-': case '%': case '~': case '(': case ')': case '[': case ']': case '{': case '}':
    case ',': case '.': case ':': case '|': return 1;
    default: return 0;
    }
}

/* Lexes the inside of one {{ }} or {% %} tag, up to and including its end. */
static bool lex_tag(lexer *L, bool block) {
    int depth = 0; /* open brackets: an end marker inside them is not the tag's end */
    for (;;) {
        size_t at = skip_space(L, L->pos);
        advance_to(L, at);
        if (at >= L->n) return fail(L, KILN_ERR_PARSE, at, block ? "unclosed {% tag" : "unclosed {{ tag");
        const char *s = L->s + at;
        size_t left = L->n - at;
        if (depth == 0) {
            char close = block ? '%' : '}'; /* an end is "%}" or "}}", after an optional sign */
            size_t sign = s[0] == '-' || (block && s[0] == '+');
            bool at_end = left >= sign + 2 && s[sign] == close && s[sign + 1] == '}';
            bool minus = at_end && s[0] == '-', plus = at_end && sign && s[0] == '+';
            if (at_end) {
                if (!push(L, block ? JT_BLOCK_END : JT_VAR_END, at))
                    return fail(L, KILN_ERR_OUT_OF_MEMORY, at, "out of memory");
                size_t after = at + 2 + (minus || plus);
                if (minus) after = skip_space(L, after);
                else if (block && !plus && after < L->n && L->s[after] == '\n') after++; /* trim_blocks */
                advance_to(L, after);
                return true;
            }
        }
        jtoken *t;
        if (isalpha((unsigned char)s[0]) || s[0] == '_') {
            size_t k = 1;
            while (k < left && (isalnum((unsigned char)s[k]) || s[k] == '_')) k++;
            if (!(t = push(L, JT_NAME, at))) return fail(L, KILN_ERR_OUT_OF_MEMORY, at, "out of memory");
            t->text = (jstr){k, s};
            advance_to(L, at + k);
        } else if (isdigit((unsigned char)s[0])) {
            size_t k = 0;
            bool is_float = false;
            while (k < left && (isdigit((unsigned char)s[k]) || s[k] == '_')) k++;
            if (k + 1 < left && s[k] == '.' && isdigit((unsigned char)s[k + 1])) {
                is_float = true;
                for (k++; k < left && (isdigit((unsigned char)s[k]) || s[k] == '_');) k++;
            }
            if (k < left && (s[k] == 'e' || s[k] == 'E')) {
                size_t e = k + 1;
                if (e < left && (s[e] == '+' || s[e] == '-')) e++;
                if (e < left && isdigit((unsigned char)s[e])) {
                    is_float = true;
                    for (k = e; k < left && isdigit((unsigned char)s[k]);) k++;
                }
            }
            char num[64];
            size_t m = 0;
            for (size_t i = 0; i < k && m < sizeof num - 1; i++)
                if (s[i] != '_') num[m++] = s[i];
            num[m] = 0;
            if (!(t = push(L, is_float ? JT_FLOAT : JT_INT, at)))
                return fail(L, KILN_ERR_OUT_OF_MEMORY, at, "out of memory");
            errno = 0;
            if (is_float) t->f = strtod(num, NULL);
            else t->i = strtoll(num, NULL, 10);
            if (errno == ERANGE && !is_float)
                return fail(L, KILN_ERR_UNSUPPORTED, at, "integer literal beyond 64 bits");
            advance_to(L, at + k);
        } else if (s[0] == '\'' || s[0] == '"') {
            size_t k = 1;
            while (k < left && s[k] != s[0]) k += s[k] == '\\' && k + 1 < left ? 2 : 1;
            if (k >= left) return fail(L, KILN_ERR_PARSE, at, "unterminated string");
            if (!(t = push(L, JT_STRING, at))) return fail(L, KILN_ERR_OUT_OF_MEMORY, at, "out of memory");
            if (!decode_string(L, at, at + k + 1, &t->text)) return false;
            advance_to(L, at + k + 1);
        } else {
            size_t k = op_len(s, left);
            if (!k) return fail(L, KILN_ERR_PARSE, at, "unexpected character in a tag");
            if (s[0] == '(' || s[0] == '[' || s[0] == '{') depth++;
            if ((s[0] == ')' || s[0] == ']' || s[0] == '}') && depth > 0) depth--;
            if (!(t = push(L, JT_OP, at))) return fail(L, KILN_ERR_OUT_OF_MEMORY, at, "out of memory");
            t->text = (jstr){k, s};
            advance_to(L, at + k);
        }
    }
}

/* Lexes a comment starting at pos ({# already consumed); applies its end's whitespace control. */
static bool lex_comment(lexer *L) {
    const char *e = NULL;
    for (size_t i = L->pos; i + 1 < L->n; i++)
        if (L->s[i] == '#' && L->s[i + 1] == '}') {
            e = L->s + i;
            break;
        }
    if (!e) return fail(L, KILN_ERR_PARSE, L->pos, "unclosed comment");
    size_t at = (size_t)(e - L->s);
    char sign = at > L->pos ? L->s[at - 1] : 0;
    size_t after = at + 2;
    if (sign == '-') after = skip_space(L, after);
    else if (sign != '+' && after < L->n && L->s[after] == '\n') after++;
    advance_to(L, after);
    return true;
}

static bool is_raw_tag(const lexer *L, size_t at) {
    size_t k = skip_space(L, at);
    return L->n - k >= 3 && memcmp(L->s + k, "raw", 3) == 0 &&
           (k + 3 >= L->n || !(isalnum((unsigned char)L->s[k + 3]) || L->s[k + 3] == '_'));
}

static bool lex_all(lexer *L) {
    bool line_starting = true;
    while (L->pos < L->n) {
        const char *s = L->s + L->pos;
        size_t left = L->n - L->pos, tag = 0;
        const char *brace;
        while ((brace = memchr(s + tag, '{', left - tag)) != NULL) { /* the next {{, {% or {# */
            tag = (size_t)(brace - s);
            if (tag + 1 < left && (s[tag + 1] == '{' || s[tag + 1] == '%' || s[tag + 1] == '#')) break;
            tag++;
        }
        if (!brace || tag + 1 >= left) tag = left;
        size_t text_len = tag;
        char kind = tag < left ? s[tag + 1] : 0;
        char sign = tag + 2 < left ? s[tag + 2] : 0;
        if (kind && sign == '-') {
            text_len = rstrip_len(s, tag);
        } else if (kind && kind != '{' && sign != '+') { /* lstrip_blocks */
            size_t l_pos = tag;
            while (l_pos > 0 && s[l_pos - 1] != '\n') l_pos--;
            if (l_pos > 0 || line_starting) {
                size_t k = l_pos;
                int w;
                while (k < tag && (w = space_at(s + k, tag - k)) > 0) k += (size_t)w;
                if (k == tag && tag > l_pos) text_len = l_pos;
            }
        }
        if (text_len) {
            jtoken *t = push(L, JT_TEXT, L->pos);
            if (!t) return fail(L, KILN_ERR_OUT_OF_MEMORY, L->pos, "out of memory");
            t->text = (jstr){text_len, s};
        }
        if (!kind) {
            advance_to(L, L->n);
            break;
        }
        size_t open = L->pos + tag;
        advance_to(L, open + 2 + (sign == '-' || sign == '+'));
        if (kind == '#') {
            if (!lex_comment(L)) return false;
        } else {
            if (kind == '%' && is_raw_tag(L, L->pos))
                return fail(L, KILN_ERR_UNSUPPORTED, open, "{% raw %} blocks are not supported");
            jtoken *t = push(L, kind == '%' ? JT_BLOCK_BEGIN : JT_VAR_BEGIN, open);
            if (!t) return fail(L, KILN_ERR_OUT_OF_MEMORY, open, "out of memory");
            t->col = col_of(L, open);
            if (!lex_tag(L, kind == '%')) return false;
        }
        line_starting = L->pos > 0 && L->s[L->pos - 1] == '\n';
    }
    return push(L, JT_EOF, L->pos) != NULL || fail(L, KILN_ERR_OUT_OF_MEMORY, L->pos, "out of memory");
}

kiln_status jinja_lex(const char *source, size_t len, jarena *arena, jtoken **tokens, int *ntokens) {
    char *s = jarena_alloc(arena, len + 1);
    if (!s) return kiln_error(KILN_ERR_OUT_OF_MEMORY, "chat template: out of memory");
    size_t n = 0;
    for (size_t i = 0; i < len; i++) {
        if (source[i] == '\r') {
            s[n++] = '\n';
            if (i + 1 < len && source[i + 1] == '\n') i++;
        } else {
            s[n++] = source[i];
        }
    }
    if (n > 0 && s[n - 1] == '\n') n--;
    lexer L = {.s = s, .n = n, .line = 1, .arena = arena, .status = KILN_OK};
    if (!lex_all(&L)) {
        free(L.toks);
        return L.status;
    }
    *tokens = L.toks;
    *ntokens = L.ntoks;
    return KILN_OK;
}
