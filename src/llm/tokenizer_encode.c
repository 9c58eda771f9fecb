/* tokenizer_encode.c — kiln_tokenizer_encode: the text is first cut at the added tokens (those with
 * normalized false over the whole text, then, in each piece left after the normalizer steps (NFC,
 * Prepend, Replace), those with normalized true, as `tokenizers` does), each match leftmost-longest; the
 * pieces between them go through the pre-tokenizer stages, each resulting word through BPE. Pieces
 * stream through the stages depth-first, so no list of pieces is ever built. */
#include "llm/tokenizer_internal.h"

#include "core/status.h"
#include "llm/unicode_class.h"
#include "llm/unicode_norm.h"

#include <stdlib.h>
#include <string.h>

static void run_metaspace(const kiln_tokenizer *tok, kiln_tok_work *w, int k, const char *s, size_t len, bool first);
static void run_split_string(const kiln_tokenizer *tok, kiln_tok_work *w, int k, const char *s, size_t len);

/* Runs stages[k..] over the piece s[0..len) (len >= 1), then BPE on each word. */
static void run_stages(const kiln_tokenizer *tok, kiln_tok_work *w, int k, const char *s, size_t len) {
    bool first = w->at_start;
    w->at_start = false;
    if (k == tok->nstages) {
        kiln_tok_bpe_word(tok, s, len, w);
        return;
    }
    const kiln_tok_stage *st = &tok->stages[k];
    if (st->kind == KILN_TOK_METASPACE) {
        run_metaspace(tok, w, k, s, len, first);
        return;
    }
    if (st->kind == KILN_TOK_SPLIT_STRING) {
        run_split_string(tok, w, k, s, len);
        return;
    }
    if (st->kind == KILN_TOK_PREFIX_SPACE) {
        if (s[0] == ' ') {
            run_stages(tok, w, k + 1, s, len);
            return;
        }
        kiln_strbuf *b = &w->stage_text[k];
        kiln_strbuf_clear(b);
        kiln_strbuf_putc(b, ' ');
        kiln_strbuf_append(b, s, len);
        if (b->failed) w->oom = true;
        else run_stages(tok, w, k + 1, b->data, b->len);
        return;
    }
    for (size_t i = 0; i < len && !w->oom;) {
        size_t m = kiln_pretok_match(st->pattern, s + i, len - i);
        run_stages(tok, w, k + 1, s + i, m);
        i += m;
    }
}

/* The class of the character that ends at s[end) (end > 0), stepping back over continuation bytes;
 * its start in *start. */
static kiln_uc_class class_before(const char *s, size_t end, size_t *start) {
    size_t p = end - 1;
    while (p > 0 && end - p < 4 && ((unsigned char)s[p] & 0xC0) == 0x80) p--;
    uint32_t cp;
    if ((size_t)kiln_utf8_next((const unsigned char *)s + p, end - p, &cp) != end - p) p = end - 1, cp = 0xFFFFFFFFu;
    *start = p;
    return kiln_uc_class_of(cp);
}

static bool is_word_class(kiln_uc_class c) { return c == KILN_UC_LETTER || c == KILN_UC_NUMBER; }

/* single_word: the match s[start, end) is not glued to a letter or digit on either side (Rust's
 * is_alphanumeric, approximated by the classes L and N). */
static bool single_word_ok(const char *s, size_t len, size_t start, size_t end) {
    size_t p;
    uint32_t cp;
    if (start > 0 && is_word_class(class_before(s, start, &p))) return false;
    if (end < len) {
        kiln_utf8_next((const unsigned char *)s + end, len - end, &cp);
        if (is_word_class(kiln_uc_class_of(cp))) return false;
    }
    return true;
}

/* The longest added token (with `normalized` as given) that starts at s[i], or NULL. */
static const kiln_tok_added *added_at(const kiln_tokenizer *tok, const char *s, size_t len, size_t i, bool normalized) {
    unsigned char b = (unsigned char)s[i];
    for (int k = tok->added_start[b]; k < tok->added_start[b + 1]; k++) {
        const kiln_tok_added *a = &tok->added[k];
        if (a->normalized == normalized && a->len <= len - i && !memcmp(s + i, a->content, a->len)) return a;
    }
    return NULL;
}

static void encode_segment(const kiln_tokenizer *tok, kiln_tok_work *w, const char *s, size_t len, bool normalized);

/* Appends every from in s[0..len) replaced by to (from is not empty). */
static void replace_all(const char *s, size_t len, const char *from, const char *to, kiln_strbuf *out) {
    size_t fl = strlen(from), done = 0;
    for (size_t i = 0; i + fl <= len;) {
        if (memcmp(s + i, from, fl)) { i++; continue; }
        kiln_strbuf_append(out, s + done, i - done);
        kiln_strbuf_puts(out, to);
        done = i += fl;
    }
    kiln_strbuf_append(out, s + done, len - done);
}

/* Appends one normalizer step's result on s[0..len) (len >= 1) to out. */
static void normalize(const kiln_tok_norm *n, const char *s, size_t len, kiln_strbuf *out) {
    if (n->kind == KILN_TOK_NORM_NFC) {
        kiln_un_nfc(s, len, out);
    } else if (n->kind == KILN_TOK_NORM_PREPEND) {
        kiln_strbuf_puts(out, n->to);
        kiln_strbuf_append(out, s, len);
    } else {
        replace_all(s, len, n->from, n->to, out);
    }
}

/* Runs the next stages on s[0..len) unless it is empty. */
static void next_piece(const kiln_tokenizer *tok, kiln_tok_work *w, int k, const char *s, size_t len) {
    if (len > 0 && !w->oom) run_stages(tok, w, k + 1, s, len);
}

/* A string Split of the piece s[0..len): the pieces between occurrences (left to right, not
 * overlapping) and the occurrences themselves, kept, dropped or joined per the behavior. */
static void run_split_string(const kiln_tokenizer *tok, kiln_tok_work *w, int k, const char *s, size_t len) {
    const kiln_tok_stage *st = &tok->stages[k];
    size_t pl = strlen(st->replacement), start = 0; /* s[start, ...) is not cut yet */
    for (size_t i = 0; i + pl <= len;) {
        if (memcmp(s + i, st->replacement, pl)) { i++; continue; }
        size_t end = i + pl;
        switch (st->behavior) {
        case KILN_TOK_SPLIT_REMOVED: next_piece(tok, w, k, s + start, i - start); start = end; break;
        case KILN_TOK_SPLIT_MERGED_PREV: next_piece(tok, w, k, s + start, end - start); start = end; break;
        case KILN_TOK_SPLIT_MERGED_NEXT: next_piece(tok, w, k, s + start, i - start); start = i; break;
        case KILN_TOK_SPLIT_ISOLATED:
            next_piece(tok, w, k, s + start, i - start);
            next_piece(tok, w, k, s + i, pl);
            start = end;
            break;
        case KILN_TOK_SPLIT_CONTIGUOUS:
            next_piece(tok, w, k, s + start, i - start);
            while (end + pl <= len && !memcmp(s + end, st->replacement, pl)) end += pl;
            next_piece(tok, w, k, s + i, end - i);
            start = end;
            break;
        }
        i = end;
    }
    next_piece(tok, w, k, s + start, len - start);
}

/* Metaspace on the piece s[0..len): spaces become the replacement, which is prepended per the
 * scheme (`first`: only at the start of the text); then the next stages, on the whole piece or, with
 * split, on each part that starts at a replacement. */
static void run_metaspace(const kiln_tokenizer *tok, kiln_tok_work *w, int k, const char *s, size_t len, bool first) {
    const kiln_tok_stage *st = &tok->stages[k];
    size_t rl = strlen(st->replacement);
    kiln_strbuf *b = &w->stage_text[k];
    kiln_strbuf_clear(b);
    bool starts = len >= rl && !memcmp(s, st->replacement, rl);
    if (!starts && len > 0 && s[0] == ' ') starts = true; /* the space becomes the replacement */
    if (!starts && (st->prepend == KILN_TOK_PREPEND_ALWAYS || (st->prepend == KILN_TOK_PREPEND_FIRST && first)))
        kiln_strbuf_puts(b, st->replacement);
    replace_all(s, len, " ", st->replacement, b);
    if (b->failed) { w->oom = true; return; }
    if (!st->split) {
        run_stages(tok, w, k + 1, b->data, b->len);
        return;
    }
    size_t start = 0;
    for (size_t i = rl; i + rl <= b->len && !w->oom; i++) {
        if (memcmp(b->data + i, st->replacement, rl)) continue;
        run_stages(tok, w, k + 1, b->data + start, i - start);
        start = i;
    }
    if (b->len > start) run_stages(tok, w, k + 1, b->data + start, b->len - start);
}

/* The text between added tokens: normalized, then cut at the normalized added tokens; or, between
 * those, the pre-tokenizer. */
static void encode_gap(const kiln_tokenizer *tok, kiln_tok_work *w, const char *s, size_t len, bool normalized) {
    if (len == 0) return;
    if (normalized) {
        run_stages(tok, w, 0, s, len);
        return;
    }
    for (int k = 0; k < tok->nnorms; k++) {
        kiln_strbuf *b = &w->normalized[k % 2];
        kiln_strbuf_clear(b);
        normalize(&tok->norms[k], s, len, b);
        if (b->failed) { w->oom = true; return; }
        s = b->data, len = b->len;
    }
    encode_segment(tok, w, s, len, true);
}

/* Cuts s[0..len) at the added tokens whose normalized flag is `normalized` (lstrip / rstrip take the
 * white space beside a match along) and encodes the rest. */
static void encode_segment(const kiln_tokenizer *tok, kiln_tok_work *w, const char *s, size_t len, bool normalized) {
    size_t done = 0; /* end of the last match */
    for (size_t i = 0; i < len && !w->oom;) {
        const kiln_tok_added *a = tok->nadded ? added_at(tok, s, len, i, normalized) : NULL;
        if (!a) { i++; continue; }
        size_t start = i, end = i + a->len, p;
        if (a->single_word && !single_word_ok(s, len, start, end)) { i = end; continue; }
        while (a->lstrip && start > done && class_before(s, start, &p) == KILN_UC_SPACE && p >= done) start = p;
        while (a->rstrip && end < len) {
            uint32_t cp;
            int n = kiln_utf8_next((const unsigned char *)s + end, len - end, &cp);
            if (kiln_uc_class_of(cp) != KILN_UC_SPACE) break;
            end += (size_t)n;
        }
        encode_gap(tok, w, s + done, start - done, normalized);
        kiln_tok_emit(w, a->id);
        w->at_start = false;
        done = i = end;
    }
    encode_gap(tok, w, s + done, len - done, normalized);
}

kiln_status kiln_tokenizer_encode(const kiln_tokenizer *tok, const char *text, size_t len, bool add_special,
                                  int32_t **ids, size_t *n) {
    kiln_tok_work w = {.at_start = true};
    *ids = NULL;
    *n = 0;
    for (int i = 0; add_special && i < tok->nprefix; i++) kiln_tok_emit(&w, tok->prefix[i]);
    if (len > 0) encode_segment(tok, &w, text, len, false);
    for (int i = 0; add_special && i < tok->nsuffix; i++) kiln_tok_emit(&w, tok->suffix[i]);
    if (w.oom) {
        kiln_tok_work_free(&w);
        return kiln_error(KILN_ERR_OUT_OF_MEMORY, "out of memory encoding %zu bytes of text", len);
    }
    *ids = w.ids;
    *n = w.nids;
    w.ids = NULL;
    kiln_tok_work_free(&w);
    return KILN_OK;
}
