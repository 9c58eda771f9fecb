/* tokenizer_decode.c — ids back to text: each token's ByteLevel-decoded bytes (precomputed at load),
 * concatenated, then made valid UTF-8 the way Rust's String::from_utf8_lossy does it (each maximal
 * invalid subpart becomes one U+FFFD), which is what `tokenizers` returns. The streaming decoder
 * runs the same conversion but holds back a character whose last bytes have not arrived yet.
 * SentencePiece style (no ByteLevel), as `tokenizers`' decoders Replace, ByteFallback, Fuse and Strip
 * do it: each token's text with the Replace applied (precomputed), runs of "<0xXX>" tokens as their
 * bytes or, when those are not valid UTF-8, one U+FFFD per token, and leading spaces stripped. */
#include "llm/tokenizer_internal.h"

#include "core/status.h"

#include <stdlib.h>
#include <string.h>

static const char REPLACEMENT[] = "\xEF\xBF\xBD"; /* U+FFFD */

/* The number of bytes of the character led by c (0 when c cannot lead one), and the range of the
 * second byte (narrower after E0, ED, F0, F4: no overlong forms, surrogates or values > U+10FFFF). */
static int lead_info(unsigned char c, unsigned char *lo, unsigned char *hi) {
    *lo = 0x80, *hi = 0xBF;
    if (c >= 0xC2 && c <= 0xDF) return 2;
    if (c >= 0xE0 && c <= 0xEF) {
        if (c == 0xE0) *lo = 0xA0;
        if (c == 0xED) *hi = 0x9F;
        return 3;
    }
    if (c >= 0xF0 && c <= 0xF4) {
        if (c == 0xF0) *lo = 0x90;
        if (c == 0xF4) *hi = 0x8F;
        return 4;
    }
    return 0;
}

/* Appends s[0..n) to out as valid UTF-8 (invalid subparts as U+FFFD). A character cut off by the
 * end of s is left unconsumed unless `final`. Returns the number of bytes consumed. */
static size_t append_lossy(const unsigned char *s, size_t n, bool final, kiln_strbuf *out) {
    size_t i = 0, run = 0; /* s[run, i) is valid and not yet appended */
    while (i < n) {
        if (s[i] < 0x80) { i++; continue; }
        unsigned char lo, hi;
        int need = lead_info(s[i], &lo, &hi), k = 1;
        while (k < need && i + (size_t)k < n && s[i + k] >= lo && s[i + k] <= hi) {
            k++;
            lo = 0x80, hi = 0xBF;
        }
        if (k == need) { i += (size_t)need; continue; }
        kiln_strbuf_append(out, s + run, i - run);
        if (i + (size_t)k == n && need && !final) return i;
        kiln_strbuf_puts(out, REPLACEMENT);
        i += (size_t)k;
        run = i;
    }
    if (n > run) kiln_strbuf_append(out, s + run, n - run);
    return n;
}

/* Whether s[0..n) is valid UTF-8 (UTF8_VALID), valid but for a character cut off at its end
 * (UTF8_CUT), or invalid somewhere before (UTF8_INVALID). */
enum { UTF8_VALID, UTF8_CUT, UTF8_INVALID };
static int utf8_state(const unsigned char *s, size_t n) {
    for (size_t i = 0; i < n;) {
        if (s[i] < 0x80) { i++; continue; }
        unsigned char lo, hi;
        int need = lead_info(s[i], &lo, &hi), k = 1;
        while (k < need && i + (size_t)k < n && s[i + k] >= lo && s[i + k] <= hi) {
            k++;
            lo = 0x80, hi = 0xBF;
        }
        if (k == need) { i += (size_t)need; continue; }
        return need && i + (size_t)k == n ? UTF8_CUT : UTF8_INVALID;
    }
    return UTF8_VALID;
}

/* Appends a finished ByteFallback run: its bytes when they are valid UTF-8, else one U+FFFD per byte. */
static void append_run(const unsigned char *run, size_t n, kiln_strbuf *out) {
    if (utf8_state(run, n) == UTF8_VALID) kiln_strbuf_append(out, run, n);
    else for (size_t i = 0; i < n; i++) kiln_strbuf_puts(out, REPLACEMENT);
}

/* KILN_OK when id names a token, else KILN_ERR_INVALID_ARGUMENT. */
static kiln_status check_id(const kiln_tokenizer *tok, int32_t id) {
    if (id >= 0 && id < tok->nids && tok->tok_off[id] >= 0) return KILN_OK;
    return kiln_error(KILN_ERR_INVALID_ARGUMENT, "token id %d names no token (vocabulary of %d ids)", id, tok->nids);
}

const char *kiln_tokenizer_token_text(const kiln_tokenizer *tok, int32_t id, size_t *len) {
    *len = 0;
    if (id < 0 || id >= tok->nids || tok->tok_off[id] < 0) return NULL;
    *len = tok->dec_off[id + 1] - tok->dec_off[id];
    return tok->dec + tok->dec_off[id];
}

/* SentencePiece style: the ids' texts into out, each ByteFallback run as append_run gives it, and
 * the leading spaces of the decoder's Strip removed. */
static void decode_chars(const kiln_tokenizer *tok, const int32_t *ids, size_t n, bool skip_special, kiln_strbuf *out) {
    kiln_strbuf run = {0};
    for (size_t i = 0; i < n; i++) {
        if (skip_special && tok->special[ids[i]]) continue;
        if (tok->byte_of[ids[i]] >= 0) {
            kiln_strbuf_putc(&run, (char)tok->byte_of[ids[i]]);
            continue;
        }
        append_run((const unsigned char *)run.data, run.len, out);
        kiln_strbuf_clear(&run);
        size_t tl;
        const char *t = kiln_tokenizer_token_text(tok, ids[i], &tl);
        append_lossy((const unsigned char *)t, tl, true, out);
    }
    append_run((const unsigned char *)run.data, run.len, out);
    if (run.failed) out->failed = true;
    kiln_strbuf_free(&run);
    size_t strip = 0;
    while ((int)strip < tok->dec_strip && strip < out->len && out->data[strip] == ' ') strip++;
    if (strip) {
        memmove(out->data, out->data + strip, out->len - strip);
        out->len -= strip;
    }
}

kiln_status kiln_tokenizer_decode(const kiln_tokenizer *tok, const int32_t *ids, size_t n, bool skip_special,
                                  char **text, size_t *len) {
    *text = NULL;
    *len = 0;
    kiln_strbuf raw = {0}, out = {0};
    for (size_t i = 0; i < n; i++) {
        kiln_status s = check_id(tok, ids[i]);
        if (s != KILN_OK) {
            kiln_strbuf_free(&raw);
            return kiln_error_prefix(s, "decoding ids[%zu]", i);
        }
        if (skip_special && tok->special[ids[i]]) continue;
        size_t tl;
        const char *t = kiln_tokenizer_token_text(tok, ids[i], &tl);
        if (tok->byte_level) kiln_strbuf_append(&raw, t, tl);
    }
    if (tok->byte_level) append_lossy((const unsigned char *)raw.data, raw.len, true, &out);
    else decode_chars(tok, ids, n, skip_special, &out);
    kiln_strbuf_putc(&out, '\0'); /* so an empty text is allocated too */
    kiln_status s = raw.failed ? kiln_strbuf_status(&raw) : kiln_strbuf_status(&out);
    kiln_strbuf_free(&raw);
    if (s != KILN_OK) {
        kiln_strbuf_free(&out);
        return s;
    }
    *text = out.data;
    *len = out.len - 1;
    return KILN_OK;
}

void kiln_tokenizer_stream_init(kiln_tokenizer_stream *s) { memset(s, 0, sizeof *s); }

/* Lets t[0..n) (valid UTF-8) out, less the leading spaces the decoder's Strip still removes. */
static void stream_emit(kiln_tokenizer_stream *s, const char *t, size_t n, kiln_strbuf *out) {
    while (!s->past_start && s->strip_left > 0 && n > 0 && t[0] == ' ') t++, n--, s->strip_left--;
    if (n > 0) s->past_start = true;
    kiln_strbuf_append(out, t, n);
}

/* Lets the held ByteFallback run out as decode would at its end. */
static void stream_end_run(kiln_tokenizer_stream *s, kiln_strbuf *out) {
    kiln_strbuf text = {0};
    append_run(s->pending, (size_t)s->npending, &text);
    stream_emit(s, text.data, text.len, out);
    if (text.failed) out->failed = true;
    kiln_strbuf_free(&text);
    s->npending = 0;
    s->byte_run = s->run_broken = false;
}

/* SentencePiece style: a byte token joins the held run (let out as U+FFFDs once it can no longer
 * be valid), any other token ends it and is let out. */
static kiln_status stream_push_chars(const kiln_tokenizer *tok, kiln_tokenizer_stream *s, int32_t id,
                                     kiln_strbuf *out) {
    if (!s->set_strip) s->strip_left = tok->dec_strip, s->set_strip = true;
    int b = tok->byte_of[id];
    if (b < 0) {
        stream_end_run(s, out);
        size_t tl;
        const char *t = kiln_tokenizer_token_text(tok, id, &tl);
        kiln_strbuf text = {0};
        append_lossy((const unsigned char *)t, tl, true, &text);
        stream_emit(s, text.data, text.len, out);
        if (text.failed) out->failed = true;
        kiln_strbuf_free(&text);
        return kiln_strbuf_status(out);
    }
    if (s->run_broken) {
        stream_emit(s, REPLACEMENT, 3, out);
        return kiln_strbuf_status(out);
    }
    s->byte_run = true;
    s->pending[s->npending++] = (unsigned char)b;
    int state = utf8_state(s->pending, (size_t)s->npending);
    if (state == UTF8_INVALID) {
        stream_end_run(s, out);
        s->run_broken = true;
    } else if (s->npending == KILN_TOK_STREAM_RUN) { /* let the whole characters out, keep a cut one */
        size_t n = (size_t)s->npending, p = n - 1;
        while (state == UTF8_CUT && p > 0 && (s->pending[p] & 0xC0) == 0x80) p--;
        size_t keep = state == UTF8_CUT ? n - p : 0;
        stream_emit(s, (const char *)s->pending, n - keep, out);
        memmove(s->pending, s->pending + n - keep, keep);
        s->npending = (int)keep;
    }
    return kiln_strbuf_status(out);
}

kiln_status kiln_tokenizer_stream_push(const kiln_tokenizer *tok, kiln_tokenizer_stream *s, int32_t id,
                                       bool skip_special, kiln_strbuf *out) {
    KILN_TRY(check_id(tok, id));
    if (skip_special && tok->special[id]) return KILN_OK;
    if (!tok->byte_level) return stream_push_chars(tok, s, id, out);
    size_t tl, np = (size_t)s->npending;
    const char *t = kiln_tokenizer_token_text(tok, id, &tl);
    unsigned char *buf = malloc(np + tl + 1);
    if (!buf) return kiln_error(KILN_ERR_OUT_OF_MEMORY, "out of memory decoding a token");
    memcpy(buf, s->pending, np);
    memcpy(buf + np, t, tl);
    size_t used = append_lossy(buf, np + tl, false, out);
    KILN_ASSERT(np + tl - used < sizeof s->pending); /* only a cut-off character stays behind */
    s->npending = (int)(np + tl - used);
    memcpy(s->pending, buf + used, (size_t)s->npending);
    free(buf);
    return kiln_strbuf_status(out);
}

void kiln_tokenizer_stream_flush(kiln_tokenizer_stream *s, kiln_strbuf *out) {
    if (s->byte_run) stream_end_run(s, out);
    else append_lossy(s->pending, (size_t)s->npending, true, out);
    kiln_tokenizer_stream_init(s);
}
