/* unicode_norm.c — NFC (unicode_norm.h): the text is decoded into code points, each decomposed
 * (Hangul syllables arithmetically, the rest from the table), runs of combining marks are stably
 * sorted by combining class, and then starters compose with the marks and starters that follow them
 * as UAX #15's composition algorithm says. Text with no code point from U+0300 up is already NFC and
 * is copied as it is. */
#include "llm/unicode_norm.h"

#include "core/utf8.h"

#include <stdlib.h>
#include <string.h>

/* Hangul syllable arithmetic (Unicode chapter 3.12). */
enum { S_BASE = 0xAC00, L_BASE = 0x1100, V_BASE = 0x1161, T_BASE = 0x11A7, L_COUNT = 19, V_COUNT = 21,
       T_COUNT = 28, N_COUNT = V_COUNT * T_COUNT, S_COUNT = L_COUNT * N_COUNT };

/* An invalid byte b of the input is carried as RAW_BYTE | b: a starter that composes with nothing. */
#define RAW_BYTE 0x80000000u

static const kiln_un_decomp *find_decomp(uint32_t cp) {
    int lo = 0, hi = kiln_un_ndecomps - 1;
    while (lo <= hi) {
        int mid = (lo + hi) / 2;
        if (kiln_un_decomps[mid].cp == cp) return &kiln_un_decomps[mid];
        if (kiln_un_decomps[mid].cp < cp) lo = mid + 1;
        else hi = mid - 1;
    }
    return NULL;
}

/* The canonical combining class of cp (0 for starters and raw bytes). */
static uint32_t ccc_of(uint32_t cp) {
    int lo = 0, hi = kiln_un_ncombinings - 1;
    while (lo <= hi) {
        int mid = (lo + hi) / 2;
        if (cp < kiln_un_combinings[mid].lo) hi = mid - 1;
        else if (cp > kiln_un_combinings[mid].hi) lo = mid + 1;
        else return kiln_un_combinings[mid].ccc;
    }
    return 0;
}

/* The primary composite of a followed by b, or 0 when they do not compose. */
static uint32_t compose(uint32_t a, uint32_t b) {
    if (a - L_BASE < L_COUNT && b - V_BASE < V_COUNT) return S_BASE + ((a - L_BASE) * V_COUNT + (b - V_BASE)) * T_COUNT;
    if (a - S_BASE < S_COUNT && (a - S_BASE) % T_COUNT == 0 && b - T_BASE - 1 < T_COUNT - 1) return a + (b - T_BASE);
    int lo = 0, hi = kiln_un_npairs - 1;
    while (lo <= hi) {
        int mid = (lo + hi) / 2;
        const kiln_un_pair *p = &kiln_un_pairs[mid];
        if (p->a == a && p->b == b) return p->c;
        if (p->a < a || (p->a == a && p->b < b)) lo = mid + 1;
        else hi = mid - 1;
    }
    return 0;
}

/* A growing array of code points. */
typedef struct cp_buf {
    uint32_t *v;
    size_t n, cap;
    bool failed;
} cp_buf;

static void push(cp_buf *b, uint32_t cp) {
    if (b->failed) return;
    if (b->n == b->cap) {
        size_t cap = b->cap ? 2 * b->cap : 64;
        uint32_t *v = realloc(b->v, cap * sizeof *v);
        if (!v) { b->failed = true; return; }
        b->v = v, b->cap = cap;
    }
    b->v[b->n++] = cp;
}

/* Appends the full canonical decomposition of cp. */
static void decompose(cp_buf *b, uint32_t cp) {
    if (cp - S_BASE < S_COUNT) {
        uint32_t s = cp - S_BASE;
        push(b, L_BASE + s / N_COUNT);
        push(b, V_BASE + (s % N_COUNT) / T_COUNT);
        if (s % T_COUNT) push(b, T_BASE + s % T_COUNT);
        return;
    }
    const kiln_un_decomp *d = find_decomp(cp);
    if (!d) { push(b, cp); return; }
    for (uint32_t i = 0; i < d->len; i++) push(b, kiln_un_pool[d->off + i]);
}

/* Stable insertion sort of every run of non-starters by combining class. */
static void reorder(uint32_t *v, size_t n) {
    for (size_t i = 1; i < n; i++) {
        uint32_t c = v[i], cc = ccc_of(c);
        if (cc == 0) continue;
        size_t j = i;
        while (j > 0 && ccc_of(v[j - 1]) > cc) { v[j] = v[j - 1]; j--; }
        v[j] = c;
    }
}

/* Canonical composition in place; returns the new length. */
static size_t compose_all(uint32_t *v, size_t n) {
    if (n == 0) return 0;
    size_t starter = 0, out = 1;
    uint32_t last = ccc_of(v[0]) ? 256 : 0; /* a leading non-starter blocks every composition */
    for (size_t i = 1; i < n; i++) {
        uint32_t c = v[i], cc = ccc_of(c), comp = 0;
        /* not blocked: nothing kept since the starter, or only marks of a lower class */
        if (!(v[starter] & RAW_BYTE) && !(c & RAW_BYTE) && (last < cc || last == 0)) comp = compose(v[starter], c);
        if (comp) {
            v[starter] = comp;
            continue;
        }
        if (cc == 0) starter = out;
        last = cc;
        v[out++] = c;
    }
    return out;
}

bool kiln_un_nfc(const char *s, size_t n, kiln_strbuf *out) {
    const unsigned char *u = (const unsigned char *)s;
    size_t k = 0;
    while (k < n && u[k] < 0xCC) k++; /* lead bytes below 0xCC start code points below U+0300 */
    if (k == n) {
        kiln_strbuf_append(out, s, n);
        return !out->failed;
    }
    cp_buf b = {0};
    for (size_t i = 0; i < n;) {
        uint32_t cp;
        int len = kiln_utf8_next(u + i, n - i, &cp);
        if (cp == 0xFFFFFFFFu) push(&b, RAW_BYTE | u[i]);
        else decompose(&b, cp);
        i += (size_t)len;
    }
    if (!b.failed) {
        reorder(b.v, b.n);
        b.n = compose_all(b.v, b.n);
        for (size_t i = 0; i < b.n; i++) {
            char enc[4];
            if (b.v[i] & RAW_BYTE) kiln_strbuf_putc(out, (char)(b.v[i] & 0xFF));
            else kiln_strbuf_append(out, enc, (size_t)kiln_utf8_put(b.v[i], enc));
        }
    }
    bool ok = !b.failed && !out->failed;
    free(b.v);
    return ok;
}
