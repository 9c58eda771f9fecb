/* tokenizer_decode.c — ids back to text: each token's ByteLevel-decoded bytes (precomputed at load),
 * concatenated, then made valid UTF-8 the way Rust's String::from_utf8_lossy does it (each maximal
 * invalid subpart becomes one U+FFFD), which is what `tokenizers` returns. The streaming decoder
 * runs the same conversion but holds back a character whose last bytes have not arrived yet. */
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
        kiln_strbuf_append(&raw, t, tl);
    }
    append_lossy((const unsigned char *)raw.data, raw.len, true, &out);
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

kiln_status kiln_tokenizer_stream_push(const kiln_tokenizer *tok, kiln_tokenizer_stream *s, int32_t id,
                                       bool skip_special, kiln_strbuf *out) {
    KILN_TRY(check_id(tok, id));
    if (skip_special && tok->special[id]) return KILN_OK;
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
    append_lossy(s->pending, (size_t)s->npending, true, out);
    s->npending = 0;
}
