/* pretokenize.c — the GPT-2, Llama-3 and Qwen2 split patterns of pretokenize.h as direct matchers. Each
 * alternative of a pattern is tried in order, as a backtracking regex engine would, and the greedy
 * runs with their lookahead / backtracking are resolved in one scan. */
#include "llm/pretokenize.h"

#include "llm/unicode_class.h"

#include <stdbool.h>
#include <stdint.h>
#include <string.h>

static const char GPT2_REGEX[] =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";
static const char LLAMA3_REGEX[] =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
    "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
static const char QWEN2_REGEX[] =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
    "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

kiln_pretok_pattern kiln_pretok_pattern_of(const char *regex) {
    if (!strcmp(regex, GPT2_REGEX)) return KILN_PRETOK_GPT2;
    if (!strcmp(regex, LLAMA3_REGEX)) return KILN_PRETOK_LLAMA3;
    if (!strcmp(regex, QWEN2_REGEX)) return KILN_PRETOK_QWEN2;
    return KILN_PRETOK_NONE;
}

/* The class of the character at s[i] (i < n); its end in *next and its code point in *cp. */
static kiln_uc_class class_at(const unsigned char *s, size_t n, size_t i, size_t *next, uint32_t *cp) {
    *next = i + (size_t)kiln_utf8_next(s + i, n - i, cp);
    return kiln_uc_class_of(*cp);
}

/* The end of the run of characters of class c that starts at i, at most `max` characters long. */
static size_t run_end(const unsigned char *s, size_t n, size_t i, kiln_uc_class c, size_t max) {
    size_t next;
    uint32_t cp;
    for (size_t k = 0; k < max && i < n && class_at(s, n, i, &next, &cp) == c; k++) i = next;
    return i;
}

/* Lower-cases cp for the case-insensitive contractions: A-Z, and U+017F (long s), which Unicode
 * case folding maps to 's'. */
static uint32_t fold(uint32_t cp) {
    if (cp >= 'A' && cp <= 'Z') return cp + 32;
    return cp == 0x17F ? 's' : cp;
}

/* The length of 's|'t|'re|'ve|'m|'ll|'d at s (s[0] is the apostrophe), case-insensitively when
 * `ci`; 0 when none matches. */
static size_t contraction(const unsigned char *s, size_t n, bool ci) {
    if (n < 2) return 0;
    uint32_t a, b;
    size_t i = 1 + (size_t)kiln_utf8_next(s + 1, n - 1, &a);
    if (ci) a = fold(a);
    if (a == 's' || a == 't' || a == 'm' || a == 'd') return i;
    if ((a != 'r' && a != 'v' && a != 'l') || i >= n) return 0;
    size_t j = i + (size_t)kiln_utf8_next(s + i, n - i, &b);
    if (ci) b = fold(b);
    if (((a == 'r' || a == 'v') && b == 'e') || (a == 'l' && b == 'l')) return j;
    return 0;
}

/* The white-space alternatives at a white-space character: \s+(?!\S) (the run, less its last
 * character when a non-space follows) and else \s+; with `newline`, \s*[\r\n]+ first (the run up to
 * and including its last \r or \n). */
static size_t space_match(const unsigned char *s, size_t n, bool newline) {
    size_t i = 0, last = 0, after_nl = 0, next;
    uint32_t cp;
    while (i < n && class_at(s, n, i, &next, &cp) == KILN_UC_SPACE) {
        last = i;
        i = next;
        if (cp == '\r' || cp == '\n') after_nl = i;
    }
    if (newline && after_nl) return after_nl;
    if (i == n || last == 0) return i;
    return last;
}

/* GPT-2: 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+ */
static size_t match_gpt2(const unsigned char *s, size_t n) {
    size_t c = s[0] == '\'' ? contraction(s, n, false) : 0;
    if (c) return c;
    size_t next, next2;
    uint32_t cp;
    kiln_uc_class c0 = class_at(s, n, 0, &next, &cp);
    if (s[0] == ' ' && next < n) {
        kiln_uc_class c1 = class_at(s, n, next, &next2, &cp);
        if (c1 != KILN_UC_SPACE) return run_end(s, n, next, c1, SIZE_MAX);
    }
    if (c0 != KILN_UC_SPACE) return run_end(s, n, 0, c0, SIZE_MAX);
    return space_match(s, n, false);
}

/* Llama-3: (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|
 *          ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
 * and Qwen2, the same with \p{N} for \p{N}{1,3}: digit runs of at most max_digits. */
static size_t match_llama3(const unsigned char *s, size_t n, size_t max_digits) {
    size_t c = s[0] == '\'' ? contraction(s, n, true) : 0;
    if (c) return c;
    size_t next, next2;
    uint32_t cp0, cp1;
    kiln_uc_class c0 = class_at(s, n, 0, &next, &cp0);
    kiln_uc_class c1 = next < n ? class_at(s, n, next, &next2, &cp1) : KILN_UC_OTHER;
    if (c0 == KILN_UC_LETTER) return run_end(s, n, 0, KILN_UC_LETTER, SIZE_MAX);
    if (c0 != KILN_UC_NUMBER && cp0 != '\r' && cp0 != '\n' && next < n && c1 == KILN_UC_LETTER)
        return run_end(s, n, next, KILN_UC_LETTER, SIZE_MAX);
    if (c0 == KILN_UC_NUMBER) return run_end(s, n, 0, KILN_UC_NUMBER, max_digits);
    size_t start = SIZE_MAX;
    if (s[0] == ' ' && next < n && c1 == KILN_UC_OTHER) start = next;
    else if (c0 == KILN_UC_OTHER) start = 0;
    if (start != SIZE_MAX) {
        size_t e = run_end(s, n, start, KILN_UC_OTHER, SIZE_MAX);
        while (e < n && (s[e] == '\r' || s[e] == '\n')) e++;
        return e;
    }
    return space_match(s, n, true);
}

size_t kiln_pretok_match(kiln_pretok_pattern p, const char *s, size_t n) {
    const unsigned char *u = (const unsigned char *)s;
    if (p == KILN_PRETOK_LLAMA3) return match_llama3(u, n, 3);
    if (p == KILN_PRETOK_QWEN2) return match_llama3(u, n, 1);
    return match_gpt2(u, n);
}
