/* tokenizer_bpe.c — the BPE model: GPT-2's bytes-to-unicode table, and one word's merges as
 * `tokenizers` applies them: start from one symbol per byte (byte-level: its mapped character's id)
 * or per UTF-8 character (SentencePiece style: the character's id), else the "<0xXX>" byte-fallback
 * ids, else unk, then repeatedly merge the adjacent pair of lowest merge rank
 * (leftmost first among equal ranks), with a heap of candidate pairs so a long word stays
 * O(n log n). With ignore_merges, a word that is itself in the vocabulary is one token. */
#include "llm/tokenizer_internal.h"

#include "llm/unicode_class.h"

#include <stdlib.h>

typedef struct kiln_tok_sym {
    int32_t id, prev, next; /* prev / next: neighbours in the word, -1 at the ends */
    bool dead;              /* merged into its left neighbour */
} kiln_tok_sym;

typedef struct kiln_tok_heap_ent {
    int32_t rank, pos, merged; /* merge symbols pos and its next into `merged` */
} kiln_tok_heap_ent;

/* True for the bytes that GPT-2's table maps to the character of the same code point. */
static bool byte_is_printable(int b) {
    return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
}

/* The bytes that are not printable, in order, map to 256, 257, ...: 0x00-0x20 (33 of them), then
 * 0x7F-0xA0 (34), then 0xAD. */
static uint32_t byte_to_cp(int b) {
    if (byte_is_printable(b)) return (uint32_t)b;
    if (b <= 0x20) return 256 + (uint32_t)b;
    if (b <= 0xA0) return 256 + 33 + (uint32_t)(b - 0x7F);
    return 256 + 67; /* 0xAD */
}

void kiln_tok_init_byte_chars(kiln_tokenizer *tok) {
    for (int b = 0; b < 256; b++) {
        int n = kiln_utf8_put(byte_to_cp(b), tok->byte_char[b]);
        tok->byte_char[b][n] = '\0';
    }
}

int kiln_tok_char_byte(uint32_t cp) {
    if (cp < 256) return byte_is_printable((int)cp) ? (int)cp : -1;
    uint32_t n = cp - 256;
    if (n < 33) return (int)n;
    if (n < 67) return 0x7F + (int)(n - 33);
    return n == 67 ? 0xAD : -1;
}

void kiln_tok_work_free(kiln_tok_work *w) {
    kiln_strbuf_free(&w->mapped);
    kiln_strbuf_free(&w->normalized[0]);
    kiln_strbuf_free(&w->normalized[1]);
    for (int i = 0; i < KILN_TOK_MAX_STAGES; i++) kiln_strbuf_free(&w->stage_text[i]);
    free(w->syms);
    free(w->heap);
    free(w->ids);
    *w = (kiln_tok_work){0};
}

void kiln_tok_emit(kiln_tok_work *w, int32_t id) {
    if (w->oom) return;
    if (w->nids == w->idcap) {
        size_t cap = w->idcap ? w->idcap * 2 : 256;
        int32_t *p = realloc(w->ids, cap * sizeof *p);
        if (!p) { w->oom = true; return; }
        w->ids = p;
        w->idcap = cap;
    }
    w->ids[w->nids++] = id;
}

/* Room for the symbols (2 per byte at most) and heap entries (3 per symbol) of a len-byte word. */
static bool reserve(kiln_tok_work *w, size_t len) {
    if (len <= w->cap) return true;
    size_t cap = len < 64 ? 64 : len * 2;
    kiln_tok_sym *s = realloc(w->syms, 2 * cap * sizeof *s);
    if (s) w->syms = s;
    kiln_tok_heap_ent *h = realloc(w->heap, 6 * cap * sizeof *h);
    if (h) w->heap = h;
    if (!s || !h) return false;
    w->cap = cap;
    return true;
}

/* Appends a symbol with id to the word of n symbols. */
static void add_sym(kiln_tok_sym *syms, int32_t *n, int32_t id) {
    syms[*n] = (kiln_tok_sym){.id = id, .prev = *n - 1, .next = -1};
    if (*n > 0) syms[*n - 1].next = *n;
    ++*n;
}

/* The initial symbols of a word, one per byte, as `tokenizers`' BPE makes them from the byte-level
 * characters: the character's id; else its UTF-8 bytes as "<0xXX>" tokens (byte_fallback); else unk,
 * consecutive unks fused with fuse_unk; else the character is dropped. Returns the symbol count. */
static int32_t initial_symbols(const kiln_tokenizer *tok, const unsigned char *word, size_t len,
                               kiln_tok_sym *syms) {
    int32_t n = 0;
    bool unk = false;
    for (size_t i = 0; i < len; i++) {
        int32_t id = tok->byte_id[word[i]];
        if (id >= 0) {
            if (unk) add_sym(syms, &n, tok->unk_id);
            unk = false;
            add_sym(syms, &n, id);
            continue;
        }
        const unsigned char *ch = (const unsigned char *)tok->byte_char[word[i]];
        bool fallback = tok->byte_fallback && tok->fallback_id[ch[0]] >= 0 &&
                        (!ch[1] || tok->fallback_id[ch[1]] >= 0);
        if (fallback) {
            for (int k = 0; ch[k]; k++) add_sym(syms, &n, tok->fallback_id[ch[k]]);
        } else if (tok->unk_id >= 0) {
            if (unk && !tok->fuse_unk) add_sym(syms, &n, tok->unk_id);
            unk = true;
        }
    }
    if (unk) add_sym(syms, &n, tok->unk_id);
    return n;
}

/* The same for a tokenizer without ByteLevel: one symbol per UTF-8 character (a byte that is not
 * valid UTF-8 counts as a character of its own), with the same fallbacks on the character's bytes. */
static int32_t initial_char_symbols(const kiln_tokenizer *tok, const unsigned char *word, size_t len,
                                    kiln_tok_sym *syms) {
    int32_t n = 0;
    bool unk = false;
    for (size_t i = 0; i < len;) {
        uint32_t cp;
        size_t cl = (size_t)kiln_utf8_next(word + i, len - i, &cp);
        int32_t id = kiln_tok_strmap_get(&tok->vocab, (const char *)word + i, cl);
        bool fallback = tok->byte_fallback;
        for (size_t k = 0; k < cl && fallback; k++) fallback = tok->fallback_id[word[i + k]] >= 0;
        if (id >= 0) {
            if (unk) add_sym(syms, &n, tok->unk_id);
            unk = false;
            add_sym(syms, &n, id);
        } else if (fallback) {
            for (size_t k = 0; k < cl; k++) add_sym(syms, &n, tok->fallback_id[word[i + k]]);
        } else if (tok->unk_id >= 0) {
            if (unk && !tok->fuse_unk) add_sym(syms, &n, tok->unk_id);
            unk = true;
        }
        i += cl;
    }
    if (unk) add_sym(syms, &n, tok->unk_id);
    return n;
}

static bool heap_less(const kiln_tok_heap_ent *a, const kiln_tok_heap_ent *b) {
    return a->rank != b->rank ? a->rank < b->rank : a->pos < b->pos;
}

static void heap_push(kiln_tok_heap_ent *h, size_t *n, kiln_tok_heap_ent e) {
    size_t i = (*n)++;
    while (i > 0 && heap_less(&e, &h[(i - 1) / 2])) {
        h[i] = h[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    h[i] = e;
}

static kiln_tok_heap_ent heap_pop(kiln_tok_heap_ent *h, size_t *n) {
    kiln_tok_heap_ent top = h[0], last = h[--*n];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= *n) break;
        if (c + 1 < *n && heap_less(&h[c + 1], &h[c])) c++;
        if (!heap_less(&h[c], &last)) break;
        h[i] = h[c];
        i = c;
    }
    if (*n > 0) h[i] = last;
    return top;
}

/* Pushes the merge of symbol pos with its next, when the pair has one. */
static void push_pair(const kiln_tokenizer *tok, kiln_tok_sym *syms, int32_t pos, kiln_tok_heap_ent *h, size_t *n) {
    if (pos < 0 || syms[pos].next < 0) return;
    const kiln_tok_merge *m = kiln_tok_pairmap_get(&tok->merges, syms[pos].id, syms[syms[pos].next].id);
    if (m) heap_push(h, n, (kiln_tok_heap_ent){.rank = m->rank, .pos = pos, .merged = m->merged});
}

/* Applies the merges to syms[0..n) in rank order. */
static void merge_all(const kiln_tokenizer *tok, kiln_tok_sym *syms, int32_t n, kiln_tok_heap_ent *h) {
    size_t nh = 0;
    for (int32_t i = 0; i + 1 < n; i++) push_pair(tok, syms, i, h, &nh);
    while (nh > 0) {
        kiln_tok_heap_ent e = heap_pop(h, &nh);
        kiln_tok_sym *s = &syms[e.pos];
        if (s->dead || s->next < 0) continue;
        /* a stale entry: one side has merged since it was pushed */
        const kiln_tok_merge *m = kiln_tok_pairmap_get(&tok->merges, s->id, syms[s->next].id);
        if (!m || m->merged != e.merged) continue;
        kiln_tok_sym *right = &syms[s->next];
        s->id = e.merged;
        right->dead = true;
        s->next = right->next;
        if (s->next >= 0) syms[s->next].prev = e.pos;
        push_pair(tok, syms, s->prev, h, &nh);
        push_pair(tok, syms, e.pos, h, &nh);
    }
}

/* With ignore_merges: the id of the whole word in its byte-level form, or -1. */
static int32_t whole_word_id(const kiln_tokenizer *tok, const unsigned char *word, size_t len, kiln_tok_work *w) {
    if (!tok->byte_level) return kiln_tok_strmap_get(&tok->vocab, (const char *)word, len);
    kiln_strbuf_clear(&w->mapped);
    for (size_t i = 0; i < len; i++) kiln_strbuf_puts(&w->mapped, tok->byte_char[word[i]]);
    if (w->mapped.failed) { w->oom = true; return -1; }
    return kiln_tok_strmap_get(&tok->vocab, w->mapped.data, w->mapped.len);
}

void kiln_tok_bpe_word(const kiln_tokenizer *tok, const char *word, size_t len, kiln_tok_work *w) {
    const unsigned char *u = (const unsigned char *)word;
    if (len == 0 || w->oom) return;
    if (tok->ignore_merges) {
        int32_t id = whole_word_id(tok, u, len, w);
        if (id >= 0) { kiln_tok_emit(w, id); return; }
    }
    if (!reserve(w, len)) { w->oom = true; return; }
    int32_t n = tok->byte_level ? initial_symbols(tok, u, len, w->syms) : initial_char_symbols(tok, u, len, w->syms);
    merge_all(tok, w->syms, n, w->heap);
    /* symbol 0 never dies: a merge keeps its left symbol */
    for (int32_t i = n > 0 ? 0 : -1; i >= 0; i = w->syms[i].next) kiln_tok_emit(w, w->syms[i].id);
}
