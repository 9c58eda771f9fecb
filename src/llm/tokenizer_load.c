/* tokenizer_load.c — kiln_tokenizer_load: finds tokenizer.json (and tokenizer_config.json), reads the
 * BPE model (vocabulary, merges, byte tables), lets tokenizer_parts.c read the other parts, and
 * builds the per-id tables (text, decoded bytes, special flag, ByteFallback bytes). Also the small lookups of the API. */
#include "llm/tokenizer_internal.h"

#include "core/file.h"
#include "core/status.h"
#include "llm/unicode_class.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

size_t kiln_tok_keep_text(kiln_tokenizer *tok, const char *s, size_t len) {
    size_t off = tok->text_used;
    memcpy(tok->text + off, s, len);
    tok->text[off + len] = '\0';
    tok->text_used += len + 1;
    return off;
}

/* Allocates the per-id tables for ids below nids (the largest id of vocab and added_tokens + 1) and
 * the text buffer for all their strings. */
static kiln_status alloc_tables(kiln_tokenizer *tok, const kiln_jdoc *d, const kiln_jnode *vocab,
                                const kiln_jnode *added, const char *path) {
    int32_t max = -1;
    size_t bytes = 0;
    for (const kiln_jnode *v = kiln_jdoc_first(d, vocab); v; v = kiln_jdoc_next(d, v)) {
        int32_t id;
        KILN_TRY(kiln_tok_id_of(v, "model.vocab entry", path, &id));
        if (id > max) max = id;
        bytes += strlen(v->key) + 1;
    }
    for (const kiln_jnode *a = kiln_jdoc_first(d, added); a; a = kiln_jdoc_next(d, a)) {
        int32_t id;
        KILN_TRY(kiln_tok_id_of(kiln_jdoc_get(d, a, "id"), "added_tokens[].id", path, &id));
        if (id > max) max = id;
        const kiln_jnode *c = kiln_jdoc_get(d, a, "content");
        bytes += (c && c->type == KILN_JNODE_STRING ? c->len : 0) + 1;
    }
    tok->nids = max + 1;
    size_t n = (size_t)tok->nids;
    tok->text = malloc(bytes + 1);
    tok->tok_off = malloc((n ? n : 1) * sizeof *tok->tok_off);
    tok->tok_len = calloc(n ? n : 1, sizeof *tok->tok_len);
    tok->special = calloc(n ? n : 1, sizeof *tok->special);
    if (!tok->text || !tok->tok_off || !tok->tok_len || !tok->special)
        return kiln_error(KILN_ERR_OUT_OF_MEMORY, "%s: out of memory for %zu tokens", path, n);
    for (size_t i = 0; i < n; i++) tok->tok_off[i] = -1;
    return KILN_OK;
}

/* model.vocab into the text table and the vocabulary map (the first token of an id names it). */
static kiln_status read_vocab(kiln_tokenizer *tok, const kiln_jdoc *d, const kiln_jnode *vocab) {
    KILN_TRY(kiln_tok_strmap_init(&tok->vocab, (size_t)vocab->count));
    for (const kiln_jnode *v = kiln_jdoc_first(d, vocab); v; v = kiln_jdoc_next(d, v)) {
        int32_t id = (int32_t)v->num; /* checked by alloc_tables */
        size_t len = strlen(v->key), off = kiln_tok_keep_text(tok, v->key, len);
        kiln_tok_strmap_put(&tok->vocab, tok->text + off, len, id);
        if (tok->tok_off[id] < 0) {
            tok->tok_off[id] = (int64_t)off;
            tok->tok_len[id] = (uint32_t)len;
        }
    }
    return KILN_OK;
}

/* The two sides of merge number i: "a b" (exactly one space) or ["a", "b"]. */
static kiln_status merge_sides(const kiln_jdoc *d, const kiln_jnode *m, int i, const char *path, const char **a,
                               size_t *alen, const char **b, size_t *blen) {
    if (m->type == KILN_JNODE_STRING) {
        const char *sp = memchr(m->str, ' ', m->len);
        if (!sp || memchr(sp + 1, ' ', m->len - (size_t)(sp + 1 - m->str)))
            return kiln_error(KILN_ERR_PARSE, "%s: model.merges[%d] \"%s\" is not two tokens separated by one space",
                              path, i, m->str);
        *a = m->str, *alen = (size_t)(sp - m->str), *b = sp + 1, *blen = m->len - *alen - 1;
        return KILN_OK;
    }
    const kiln_jnode *x = kiln_jdoc_at(d, m, 0), *y = kiln_jdoc_at(d, m, 1);
    if (m->type != KILN_JNODE_ARRAY || m->count != 2 || x->type != KILN_JNODE_STRING || y->type != KILN_JNODE_STRING)
        return kiln_error(KILN_ERR_PARSE, "%s: model.merges[%d] is neither \"a b\" nor [\"a\", \"b\"]", path, i);
    *a = x->str, *alen = x->len, *b = y->str, *blen = y->len;
    return KILN_OK;
}

/* model.merges: rank = position in the list; both sides and their concatenation must be tokens. */
static kiln_status read_merges(kiln_tokenizer *tok, const kiln_jdoc *d, const kiln_jnode *merges, const char *path) {
    KILN_TRY(kiln_tok_pairmap_init(&tok->merges, (size_t)merges->count));
    kiln_strbuf cat = {0};
    int i = 0;
    kiln_status s = KILN_OK;
    for (const kiln_jnode *m = kiln_jdoc_first(d, merges); m && s == KILN_OK; m = kiln_jdoc_next(d, m), i++) {
        const char *a = NULL, *b = NULL;
        size_t alen = 0, blen = 0;
        s = merge_sides(d, m, i, path, &a, &alen, &b, &blen);
        if (s != KILN_OK) break;
        kiln_strbuf_clear(&cat);
        kiln_strbuf_append(&cat, a, alen);
        kiln_strbuf_append(&cat, b, blen);
        if ((s = kiln_strbuf_status(&cat)) != KILN_OK) break;
        int32_t ia = kiln_tok_strmap_get(&tok->vocab, a, alen), ib = kiln_tok_strmap_get(&tok->vocab, b, blen);
        int32_t im = kiln_tok_strmap_get(&tok->vocab, cat.data, cat.len);
        if (ia < 0 || ib < 0 || im < 0)
            s = kiln_error(KILN_ERR_PARSE, "%s: model.merges[%d] (\"%.*s\" + \"%.*s\"): %s is not in model.vocab", path,
                           i, (int)alen, a, (int)blen, b, ia < 0 ? "the left token" : ib < 0 ? "the right token" : "the merged token");
        else
            kiln_tok_pairmap_put(&tok->merges, ia, ib, (kiln_tok_merge){.rank = i, .merged = im});
    }
    kiln_strbuf_free(&cat);
    return s;
}

/* The byte-level tables: each byte's character id, the "<0xXX>" ids, and the unk token. */
static kiln_status read_byte_tables(kiln_tokenizer *tok, const kiln_jdoc *d, const kiln_jnode *model, const char *path) {
    kiln_tok_init_byte_chars(tok);
    for (int b = 0; b < 256; b++) {
        char hex[8];
        snprintf(hex, sizeof hex, "<0x%02X>", b);
        tok->byte_id[b] = kiln_tok_strmap_get(&tok->vocab, tok->byte_char[b], strlen(tok->byte_char[b]));
        tok->fallback_id[b] = kiln_tok_strmap_get(&tok->vocab, hex, strlen(hex));
    }
    const char *unk;
    KILN_TRY(kiln_tok_get_str(d, model, "unk_token", &unk, path));
    tok->unk_id = unk ? kiln_tok_strmap_get(&tok->vocab, unk, strlen(unk)) : -1;
    if (unk && tok->unk_id < 0)
        return kiln_error(KILN_ERR_PARSE, "%s: model.unk_token \"%s\" is not in model.vocab", path, unk);
    return KILN_OK;
}

/* Refuses BPE options kiln does not implement (dropout, subword prefix / suffix). */
static kiln_status check_bpe_options(const kiln_jdoc *d, const kiln_jnode *model, const char *path) {
    double dropout = kiln_jdoc_get_num(d, model, "dropout", 0.0);
    if (dropout != 0.0) return kiln_error(KILN_ERR_UNSUPPORTED, "%s: model.dropout %g is not supported", path, dropout);
    static const char *const affixes[] = {"continuing_subword_prefix", "end_of_word_suffix"};
    for (int i = 0; i < 2; i++) {
        const char *v;
        KILN_TRY(kiln_tok_get_str(d, model, affixes[i], &v, path));
        if (v && *v)
            return kiln_error(KILN_ERR_UNSUPPORTED, "%s: model.%s \"%s\" is not supported", path, affixes[i], v);
    }
    return KILN_OK;
}

/* The model object: type BPE, its vocabulary, merges and flags. */
static kiln_status read_model(kiln_tokenizer *tok, const kiln_jdoc *d, const kiln_jnode *root, const char *path) {
    const kiln_jnode *model = kiln_jdoc_get(d, root, "model");
    if (!model || model->type != KILN_JNODE_OBJECT) return kiln_error(KILN_ERR_PARSE, "%s: no \"model\" object", path);
    const char *type;
    KILN_TRY(kiln_tok_get_str(d, model, "type", &type, path));
    if (type && strcmp(type, "BPE"))
        return kiln_error(KILN_ERR_UNSUPPORTED, "%s: model type \"%s\" is not supported (kiln implements BPE)", path, type);
    const kiln_jnode *vocab = kiln_jdoc_get(d, model, "vocab"), *merges = kiln_jdoc_get(d, model, "merges");
    const kiln_jnode *added = kiln_jdoc_get(d, root, "added_tokens");
    if (!vocab || vocab->type != KILN_JNODE_OBJECT) return kiln_error(KILN_ERR_PARSE, "%s: model.vocab is not an object", path);
    if (!merges || merges->type != KILN_JNODE_ARRAY) return kiln_error(KILN_ERR_PARSE, "%s: model.merges is not an array", path);
    if (added && added->type != KILN_JNODE_ARRAY && added->type != KILN_JNODE_NULL)
        return kiln_error(KILN_ERR_PARSE, "%s: added_tokens is not an array", path);
    KILN_TRY(check_bpe_options(d, model, path));
    KILN_TRY(kiln_tok_get_bool(d, model, "ignore_merges", false, &tok->ignore_merges, path));
    KILN_TRY(kiln_tok_get_bool(d, model, "byte_fallback", false, &tok->byte_fallback, path));
    KILN_TRY(kiln_tok_get_bool(d, model, "fuse_unk", false, &tok->fuse_unk, path));
    KILN_TRY(alloc_tables(tok, d, vocab, added, path));
    KILN_TRY(read_vocab(tok, d, vocab));
    KILN_TRY(read_merges(tok, d, merges, path));
    return read_byte_tables(tok, d, model, path);
}

/* The byte of a ByteFallback token "<0xXX>" (either case of hex digit), else -1. */
static int fallback_byte(const char *t, size_t len) {
    if (len != 6 || memcmp(t, "<0x", 3) || t[5] != '>') return -1;
    int v = 0;
    for (int k = 3; k < 5; k++) {
        char c = t[k];
        int h = c >= '0' && c <= '9' ? c - '0' : c >= 'A' && c <= 'F' ? c - 'A' + 10 : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
        if (h < 0) return -1;
        v = v * 16 + h;
    }
    return v;
}

/* Without ByteLevel: every token's text with the decoder's Replace applied (which may lengthen it,
 * hence the size bound), and the byte of each ByteFallback token (which is also its text). */
static kiln_status build_decoded_chars(kiln_tokenizer *tok) {
    size_t n = (size_t)tok->nids, fl = strlen(tok->dec_from), tl = strlen(tok->dec_to);
    size_t grow = fl && tl > fl ? (tl + fl - 1) / fl : 1;
    tok->dec = malloc(tok->text_used * grow + 1);
    tok->dec_off = malloc((n + 1) * sizeof *tok->dec_off);
    tok->byte_of = malloc((n ? n : 1) * sizeof *tok->byte_of);
    if (!tok->dec || !tok->dec_off || !tok->byte_of)
        return kiln_error(KILN_ERR_OUT_OF_MEMORY, "out of memory decoding the vocabulary");
    size_t pos = 0;
    for (size_t id = 0; id < n; id++) {
        tok->dec_off[id] = pos;
        tok->byte_of[id] = -1;
        if (tok->tok_off[id] < 0) continue;
        const char *t = tok->text + tok->tok_off[id];
        size_t len = tok->tok_len[id];
        if (tok->dec_byte_fallback) tok->byte_of[id] = (int16_t)fallback_byte(t, len);
        if (tok->byte_of[id] >= 0) { /* its byte, as kiln_tokenizer_token_text promises */
            tok->dec[pos++] = (char)tok->byte_of[id];
            continue;
        }
        for (size_t k = 0; k < len;) {
            if (fl && k + fl <= len && !memcmp(t + k, tok->dec_from, fl)) {
                memcpy(tok->dec + pos, tok->dec_to, tl);
                pos += tl, k += fl;
            } else {
                tok->dec[pos++] = t[k++];
            }
        }
    }
    tok->dec_off[n] = pos;
    return KILN_OK;
}

/* The decoder's bytes for every token. ByteLevel: each character mapped back to its byte, or the
 * token's own text when one of its characters is not in the byte table. */
static kiln_status build_decoded(kiln_tokenizer *tok) {
    if (!tok->byte_level) return build_decoded_chars(tok);
    size_t n = (size_t)tok->nids;
    tok->dec = malloc(tok->text_used + 1);
    tok->dec_off = malloc((n + 1) * sizeof *tok->dec_off);
    if (!tok->dec || !tok->dec_off) return kiln_error(KILN_ERR_OUT_OF_MEMORY, "out of memory decoding the vocabulary");
    size_t pos = 0;
    for (size_t id = 0; id < n; id++) {
        tok->dec_off[id] = pos;
        if (tok->tok_off[id] < 0) continue;
        const unsigned char *t = (const unsigned char *)tok->text + tok->tok_off[id];
        size_t len = tok->tok_len[id], k = 0, start = pos;
        bool raw = false;
        while (k < len && !raw) {
            uint32_t cp;
            k += (size_t)kiln_utf8_next(t + k, len - k, &cp);
            int b = kiln_tok_char_byte(cp);
            if (b >= 0) tok->dec[pos++] = (char)b;
            raw = b < 0;
        }
        if (raw) {
            memcpy(tok->dec + start, t, len);
            pos = start + len;
        }
    }
    tok->dec_off[n] = pos;
    return KILN_OK;
}

/* The id of tokenizer_config.json's `key` (a string, or an object with "content"), -1 when absent. */
static kiln_status config_token(const kiln_tokenizer *tok, const kiln_jdoc *d, const kiln_jnode *cfg, const char *key,
                                const char *path, int32_t *out) {
    const kiln_jnode *v = kiln_jdoc_get(d, cfg, key);
    if (v && v->type == KILN_JNODE_OBJECT) v = kiln_jdoc_get(d, v, "content");
    if (!v || v->type == KILN_JNODE_NULL) return KILN_OK;
    if (v->type != KILN_JNODE_STRING) return kiln_error(KILN_ERR_PARSE, "%s: %s is not a string", path, key);
    *out = kiln_tokenizer_find(tok, v->str);
    if (*out < 0) return kiln_error(KILN_ERR_PARSE, "%s: %s \"%s\" is not a token of tokenizer.json", path, key, v->str);
    return KILN_OK;
}

/* tokenizer_config.json (optional): bos / eos tokens, and add_bos_token / add_eos_token, which add
 * them with add_special when the post-processor has no template of its own. */
static kiln_status read_config(kiln_tokenizer *tok, const char *text, size_t len, const char *path) {
    kiln_jdoc d = {0};
    kiln_status s = kiln_jdoc_parse(text, len, path, &d);
    const kiln_jnode *cfg = kiln_jdoc_root(&d);
    if (s == KILN_OK && cfg->type != KILN_JNODE_OBJECT) s = kiln_error(KILN_ERR_PARSE, "%s: not a JSON object", path);
    if (s == KILN_OK) s = config_token(tok, &d, cfg, "bos_token", path, &tok->bos_id);
    if (s == KILN_OK) s = config_token(tok, &d, cfg, "eos_token", path, &tok->eos_id);
    bool add_bos = false, add_eos = false;
    if (s == KILN_OK) s = kiln_tok_get_bool(&d, cfg, "add_bos_token", false, &add_bos, path);
    if (s == KILN_OK) s = kiln_tok_get_bool(&d, cfg, "add_eos_token", false, &add_eos, path);
    if (s == KILN_OK && !tok->has_template && ((add_bos && tok->bos_id < 0) || (add_eos && tok->eos_id < 0)))
        s = kiln_error(KILN_ERR_PARSE, "%s: add_%s_token is true but no %s_token is set", path,
                       add_bos && tok->bos_id < 0 ? "bos" : "eos", add_bos && tok->bos_id < 0 ? "bos" : "eos");
    if (s == KILN_OK && !tok->has_template) {
        if (add_bos) tok->prefix[tok->nprefix++] = tok->bos_id;
        if (add_eos) tok->suffix[tok->nsuffix++] = tok->eos_id;
    }
    kiln_jdoc_free(&d);
    return s;
}

/* bos / eos without a tokenizer_config.json: the template's first special token, else GPT-2's
 * "<|endoftext|>" for both. */
static void default_bos_eos(kiln_tokenizer *tok) {
    int32_t eot = kiln_tokenizer_find(tok, "<|endoftext|>");
    if (tok->bos_id < 0) tok->bos_id = tok->nprefix > 0 ? tok->prefix[0] : eot;
    if (tok->eos_id < 0) tok->eos_id = eot;
}

/* Reads the parsed tokenizer.json into tok. */
static kiln_status read_tokenizer(kiln_tokenizer *tok, const kiln_jdoc *d, const char *path) {
    const kiln_jnode *root = kiln_jdoc_root(d);
    if (root->type != KILN_JNODE_OBJECT) return kiln_error(KILN_ERR_PARSE, "%s: not a JSON object", path);
    KILN_TRY(read_model(tok, d, root, path));
    KILN_TRY(kiln_tok_read_added(tok, d, root, path));
    KILN_TRY(kiln_tok_read_normalizer(tok, d, root, path));
    KILN_TRY(kiln_tok_read_pre_tokenizer(tok, d, root, path));
    KILN_TRY(kiln_tok_read_decoder(tok, d, root, path));
    KILN_TRY(kiln_tok_read_post_processor(tok, d, root, path));
    return build_decoded(tok);
}

/* path_or_dir's tokenizer.json and the tokenizer_config.json beside it, into json / config. */
static kiln_status find_files(const char *path_or_dir, kiln_strbuf *json, kiln_strbuf *config) {
    struct stat st;
    if (stat(path_or_dir, &st) == 0 && S_ISDIR(st.st_mode)) {
        kiln_strbuf_printf(json, "%s/tokenizer.json", path_or_dir);
        kiln_strbuf_printf(config, "%s/tokenizer_config.json", path_or_dir);
    } else {
        const char *slash = strrchr(path_or_dir, '/');
        kiln_strbuf_puts(json, path_or_dir);
        if (slash) kiln_strbuf_append(config, path_or_dir, (size_t)(slash - path_or_dir + 1));
        kiln_strbuf_puts(config, "tokenizer_config.json");
    }
    KILN_TRY(kiln_strbuf_status(json));
    return kiln_strbuf_status(config);
}

/* Parses tokenizer.json text (named json_name in errors) and, when config is not NULL,
 * tokenizer_config.json text (named config_name) into a new tokenizer. */
static kiln_status load_texts(const char *json, size_t json_len, const char *json_name, const char *config,
                              size_t config_len, const char *config_name, kiln_tokenizer **out) {
    *out = NULL;
    kiln_tokenizer *tok = calloc(1, sizeof *tok);
    if (!tok) return kiln_error(KILN_ERR_OUT_OF_MEMORY, "out of memory loading a tokenizer");
    tok->bos_id = tok->eos_id = tok->unk_id = -1;
    kiln_jdoc d = {0};
    kiln_status s = kiln_jdoc_parse(json, json_len, json_name, &d);
    if (s == KILN_OK) s = read_tokenizer(tok, &d, json_name);
    kiln_jdoc_free(&d);
    if (s == KILN_OK && config) s = read_config(tok, config, config_len, config_name);
    if (s == KILN_OK) default_bos_eos(tok);
    if (s != KILN_OK) {
        kiln_tokenizer_free(tok);
        return s;
    }
    *out = tok;
    return KILN_OK;
}

kiln_status kiln_tokenizer_load_memory(const char *json, size_t json_len, const char *config, size_t config_len,
                                       const char *what, kiln_tokenizer **out) {
    char config_name[512];
    snprintf(config_name, sizeof config_name, "%s (tokenizer_config.json)", what);
    return load_texts(json, json_len, what, config, config_len, config_name, out);
}

kiln_status kiln_tokenizer_load(const char *path_or_dir, kiln_tokenizer **out) {
    *out = NULL;
    kiln_strbuf json = {0}, config = {0};
    kiln_file_map json_map = {0}, config_map = {0};
    struct stat st;
    kiln_status s = find_files(path_or_dir, &json, &config);
    if (s == KILN_OK) s = kiln_file_map_open(json.data, &json_map);
    bool has_config = s == KILN_OK && stat(config.data, &st) == 0;
    if (has_config) s = kiln_file_map_open(config.data, &config_map);
    if (s == KILN_OK)
        s = load_texts((const char *)json_map.data, json_map.size, json.data,
                       has_config ? (const char *)config_map.data : NULL, config_map.size, config.data, out);
    kiln_file_unmap(&json_map);
    kiln_file_unmap(&config_map);
    kiln_strbuf_free(&json);
    kiln_strbuf_free(&config);
    return s;
}

void kiln_tokenizer_free(kiln_tokenizer *tok) {
    if (!tok) return;
    kiln_tok_strmap_free(&tok->vocab);
    kiln_tok_pairmap_free(&tok->merges);
    free(tok->text);
    free(tok->tok_off);
    free(tok->tok_len);
    free(tok->dec);
    free(tok->dec_off);
    free(tok->special);
    free(tok->byte_of);
    free(tok->added);
    free(tok);
}

int32_t kiln_tokenizer_vocab_size(const kiln_tokenizer *tok) { return tok->nids; }
int32_t kiln_tokenizer_bos_id(const kiln_tokenizer *tok) { return tok->bos_id; }
int32_t kiln_tokenizer_eos_id(const kiln_tokenizer *tok) { return tok->eos_id; }

int32_t kiln_tokenizer_find(const kiln_tokenizer *tok, const char *token) {
    size_t len = strlen(token);
    for (int i = 0; i < tok->nadded; i++)
        if (tok->added[i].len == len && !memcmp(tok->added[i].content, token, len)) return tok->added[i].id;
    return kiln_tok_strmap_get(&tok->vocab, token, len);
}

bool kiln_tokenizer_is_special(const kiln_tokenizer *tok, int32_t id) {
    return id >= 0 && id < tok->nids && tok->special[id];
}
