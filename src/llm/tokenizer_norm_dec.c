/* tokenizer_norm_dec.c — the normalizer and decoder parts of tokenizer.json: NFC, Prepend and Replace
 * normalizers (into tok->norms), and the ByteLevel decoder or, without ByteLevel, the Metaspace decoder
 * or a Sequence of Replace, ByteFallback, Fuse and Strip (into the dec_* settings). Each accepts
 * exactly what kiln implements and names anything else in a KILN_ERR_UNSUPPORTED. */
#include "llm/tokenizer_internal.h"

#include "core/status.h"

#include <string.h>

kiln_status kiln_tok_get_affix(const kiln_jdoc *d, const kiln_jnode *v, const char *key, const char *what, char *out,
                               const char *path) {
    const char *s;
    KILN_TRY(kiln_tok_get_str(d, v, key, &s, path));
    if (!s || !*s) return kiln_error(KILN_ERR_PARSE, "%s: %s has no \"%s\" string", path, what, key);
    if (strlen(s) > KILN_TOK_MAX_AFFIX)
        return kiln_error(KILN_ERR_UNSUPPORTED, "%s: %s \"%s\" is longer than %d bytes", path, what, key,
                          KILN_TOK_MAX_AFFIX);
    strcpy(out, s);
    return KILN_OK;
}

/* A Replace (normalizer or decoder): pattern {"String": from} (a regex is refused) and content. */
static kiln_status read_replace(const kiln_jdoc *d, const kiln_jnode *v, const char *what, char *from, char *to,
                                const char *path) {
    const kiln_jnode *pat = kiln_jdoc_get(d, v, "pattern");
    if (!pat || pat->type != KILN_JNODE_OBJECT || !kiln_jdoc_get(d, pat, "String"))
        return kiln_error(KILN_ERR_UNSUPPORTED, "%s: %s Replace with a pattern other than {\"String\": ...} is not "
                          "supported", path, what);
    KILN_TRY(kiln_tok_get_affix(d, pat, "String", what, from, path));
    const char *content;
    KILN_TRY(kiln_tok_get_str(d, v, "content", &content, path));
    if (!content || strlen(content) > KILN_TOK_MAX_AFFIX)
        return kiln_error(KILN_ERR_UNSUPPORTED, "%s: %s Replace has no content of at most %d bytes", path, what,
                          KILN_TOK_MAX_AFFIX);
    strcpy(to, content);
    return KILN_OK;
}

/* One normalizer (a Sequence recursively): NFC, Prepend, Replace of a string. */
static kiln_status read_norm(kiln_tokenizer *tok, const kiln_jdoc *d, const kiln_jnode *v, const char *path) {
    const char *type = NULL;
    if (v->type == KILN_JNODE_OBJECT) KILN_TRY(kiln_tok_get_str(d, v, "type", &type, path));
    if (!type) return kiln_error(KILN_ERR_PARSE, "%s: a normalizer has no \"type\"", path);
    bool nfc = !strcmp(type, "NFC"), prepend = !strcmp(type, "Prepend"), replace = !strcmp(type, "Replace");
    if ((nfc || prepend || replace) && tok->nnorms == KILN_TOK_MAX_STAGES)
        return kiln_error(KILN_ERR_UNSUPPORTED, "%s: more than %d normalizer steps", path, KILN_TOK_MAX_STAGES);
    kiln_tok_norm *n = &tok->norms[tok->nnorms];
    *n = (kiln_tok_norm){.kind = nfc ? KILN_TOK_NORM_NFC : prepend ? KILN_TOK_NORM_PREPEND : KILN_TOK_NORM_REPLACE};
    if (prepend) KILN_TRY(kiln_tok_get_affix(d, v, "prepend", "normalizer Prepend", n->to, path));
    if (replace) KILN_TRY(read_replace(d, v, "normalizer", n->from, n->to, path));
    if (nfc || prepend || replace) {
        tok->nnorms++;
        return KILN_OK;
    }
    const kiln_jnode *list = kiln_jdoc_get(d, v, "normalizers");
    if (!strcmp(type, "Sequence") && list && list->type == KILN_JNODE_ARRAY) {
        for (const kiln_jnode *n = kiln_jdoc_first(d, list); n; n = kiln_jdoc_next(d, n))
            KILN_TRY(read_norm(tok, d, n, path));
        return KILN_OK;
    }
    return kiln_error(KILN_ERR_UNSUPPORTED,
                      "%s: normalizer \"%s\" is not supported (kiln implements NFC, Prepend, Replace and Sequence)", path,
                      type);
}

kiln_status kiln_tok_read_normalizer(kiln_tokenizer *tok, const kiln_jdoc *d, const kiln_jnode *root, const char *path) {
    const kiln_jnode *v = kiln_jdoc_get(d, root, "normalizer");
    return v && v->type != KILN_JNODE_NULL ? read_norm(tok, d, v, path) : KILN_OK;
}

/* One step of a SentencePiece-style decoder Sequence: Replace, ByteFallback, Fuse, and Strip of
 * leading spaces as the last step (after Fuse it applies to the whole text). */
static kiln_status read_spm_decoder_step(kiln_tokenizer *tok, const kiln_jdoc *d, const kiln_jnode *v, bool last,
                                         const char *path) {
    const char *type = NULL;
    if (v->type == KILN_JNODE_OBJECT) KILN_TRY(kiln_tok_get_str(d, v, "type", &type, path));
    if (!type) return kiln_error(KILN_ERR_PARSE, "%s: a decoder has no \"type\"", path);
    if (!strcmp(type, "Fuse")) return KILN_OK; /* decode always returns one string */
    if (!strcmp(type, "ByteFallback")) {
        tok->dec_byte_fallback = true;
        return KILN_OK;
    }
    if (!strcmp(type, "Replace")) {
        if (tok->dec_from[0]) return kiln_error(KILN_ERR_UNSUPPORTED, "%s: two decoder Replace steps", path);
        return read_replace(d, v, "decoder", tok->dec_from, tok->dec_to, path);
    }
    if (!strcmp(type, "Strip")) {
        const char *content;
        KILN_TRY(kiln_tok_get_str(d, v, "content", &content, path));
        double start = kiln_jdoc_get_num(d, v, "start", 0), stop = kiln_jdoc_get_num(d, v, "stop", 0);
        if (!last || !content || strcmp(content, " ") || stop != 0 || start < 0 || start > 64)
            return kiln_error(KILN_ERR_UNSUPPORTED, "%s: decoder Strip is supported only as the last step, of up to "
                              "64 leading spaces", path);
        tok->dec_strip = (int)start;
        return KILN_OK;
    }
    return kiln_error(KILN_ERR_UNSUPPORTED,
                      "%s: decoder \"%s\" is not supported (kiln implements ByteLevel, and Replace, ByteFallback, "
                      "Fuse and Strip in a Sequence)", path, type);
}

/* The Metaspace decoder: the replacement back to ' ' in every token, and the first token's leading
 * space dropped unless prepend_scheme is "never": a Strip of one leading space of the whole text
 * (the same but after a first token that decodes to nothing). "<0xXX>" tokens stay as they are. */
static kiln_status read_metaspace_decoder(kiln_tokenizer *tok, const kiln_jdoc *d, const kiln_jnode *v,
                                          const char *path) {
    KILN_TRY(kiln_tok_get_affix(d, v, "replacement", "decoder Metaspace", tok->dec_from, path));
    strcpy(tok->dec_to, " ");
    const char *scheme;
    bool add_prefix = true;
    KILN_TRY(kiln_tok_get_str(d, v, "prepend_scheme", &scheme, path));
    KILN_TRY(kiln_tok_get_bool(d, v, "add_prefix_space", true, &add_prefix, path));
    tok->dec_strip = (scheme ? strcmp(scheme, "never") != 0 : add_prefix) ? 1 : 0;
    return KILN_OK;
}

kiln_status kiln_tok_read_decoder(kiln_tokenizer *tok, const kiln_jdoc *d, const kiln_jnode *root, const char *path) {
    const kiln_jnode *v = kiln_jdoc_get(d, root, "decoder");
    const char *type = NULL;
    if (v && v->type == KILN_JNODE_OBJECT) KILN_TRY(kiln_tok_get_str(d, v, "type", &type, path));
    const kiln_jnode *list = type && !strcmp(type, "Sequence") ? kiln_jdoc_get(d, v, "decoders") : NULL;
    if (tok->byte_level && type && !strcmp(type, "ByteLevel")) return KILN_OK;
    if (!tok->byte_level && type && !strcmp(type, "Metaspace")) return read_metaspace_decoder(tok, d, v, path);
    if (!tok->byte_level && list && list->type == KILN_JNODE_ARRAY) {
        for (const kiln_jnode *s = kiln_jdoc_first(d, list); s; s = kiln_jdoc_next(d, s))
            KILN_TRY(read_spm_decoder_step(tok, d, s, !kiln_jdoc_next(d, s), path));
        return KILN_OK;
    }
    return kiln_error(KILN_ERR_UNSUPPORTED,
                      "%s: decoder \"%s\" is not supported with %s (kiln implements ByteLevel with a ByteLevel "
                      "pre-tokenizer, else Metaspace or a Sequence of Replace, ByteFallback, Fuse and Strip)", path,
                      type ? type : "null", tok->byte_level ? "a ByteLevel pre-tokenizer" : "no ByteLevel pre-tokenizer");
}
