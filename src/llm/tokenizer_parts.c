/* tokenizer_parts.c — the parts of tokenizer.json around the BPE model: added_tokens, pre_tokenizer
 * (into the stage list of tokenizer_internal.h) and post_processor (tokenizer_norm_dec.c reads the
 * normalizer and decoder). Each
 * accepts exactly what kiln implements and names anything else in a KILN_ERR_UNSUPPORTED. */
#include "llm/tokenizer_internal.h"

#include "core/status.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

kiln_status kiln_tok_get_bool(const kiln_jdoc *d, const kiln_jnode *obj, const char *key, bool dflt, bool *out,
                              const char *path) {
    const kiln_jnode *v = kiln_jdoc_get(d, obj, key);
    if (!v || v->type == KILN_JNODE_NULL) *out = dflt;
    else if (v->type == KILN_JNODE_TRUE || v->type == KILN_JNODE_FALSE) *out = v->type == KILN_JNODE_TRUE;
    else return kiln_error(KILN_ERR_PARSE, "%s: \"%s\" is not a boolean", path, key);
    return KILN_OK;
}

kiln_status kiln_tok_get_str(const kiln_jdoc *d, const kiln_jnode *obj, const char *key, const char **out,
                             const char *path) {
    const kiln_jnode *v = kiln_jdoc_get(d, obj, key);
    *out = NULL;
    if (!v || v->type == KILN_JNODE_NULL) return KILN_OK;
    if (v->type != KILN_JNODE_STRING) return kiln_error(KILN_ERR_PARSE, "%s: \"%s\" is not a string", path, key);
    *out = v->str;
    return KILN_OK;
}

kiln_status kiln_tok_id_of(const kiln_jnode *v, const char *what, const char *path, int32_t *out) {
    if (!v) return kiln_error(KILN_ERR_PARSE, "%s: %s is missing", path, what);
    if (v->type != KILN_JNODE_NUMBER || v->num < 0 || v->num != floor(v->num))
        return kiln_error(KILN_ERR_PARSE, "%s: %s is not a token id (a non-negative integer)", path, what);
    if (v->num >= KILN_TOK_MAX_ID)
        return kiln_error(KILN_ERR_UNSUPPORTED, "%s: %s %.0f is beyond kiln's limit of %d token ids", path, what,
                          v->num, KILN_TOK_MAX_ID);
    *out = (int32_t)v->num;
    return KILN_OK;
}

/* ------------------------------------------------------------------------ added_tokens */

static int cmp_added(const void *pa, const void *pb) {
    const kiln_tok_added *a = pa, *b = pb;
    unsigned char fa = (unsigned char)a->content[0], fb = (unsigned char)b->content[0];
    if (fa != fb) return fa < fb ? -1 : 1;
    if (a->len != b->len) return a->len > b->len ? -1 : 1;
    return a->id < b->id ? -1 : a->id > b->id;
}

/* One entry of added_tokens into tok->added[tok->nadded] (empty contents name an id but never match). */
static kiln_status read_added_one(kiln_tokenizer *tok, const kiln_jdoc *d, const kiln_jnode *a, int i, const char *path) {
    if (a->type != KILN_JNODE_OBJECT) return kiln_error(KILN_ERR_PARSE, "%s: added_tokens[%d] is not an object", path, i);
    const kiln_jnode *c = kiln_jdoc_get(d, a, "content");
    if (!c || c->type != KILN_JNODE_STRING)
        return kiln_error(KILN_ERR_PARSE, "%s: added_tokens[%d].content is not a string", path, i);
    kiln_tok_added t = {.len = c->len, .id = (int32_t)kiln_jdoc_get(d, a, "id")->num}; /* checked at load */
    KILN_TRY(kiln_tok_get_bool(d, a, "special", false, &t.special, path));
    KILN_TRY(kiln_tok_get_bool(d, a, "normalized", !t.special, &t.normalized, path));
    KILN_TRY(kiln_tok_get_bool(d, a, "lstrip", false, &t.lstrip, path));
    KILN_TRY(kiln_tok_get_bool(d, a, "rstrip", false, &t.rstrip, path));
    KILN_TRY(kiln_tok_get_bool(d, a, "single_word", false, &t.single_word, path));
    size_t off = kiln_tok_keep_text(tok, c->str, c->len);
    t.content = tok->text + off;
    tok->tok_off[t.id] = (int64_t)off;
    tok->tok_len[t.id] = (uint32_t)c->len;
    tok->special[t.id] = t.special;
    if (t.len > 0) tok->added[tok->nadded++] = t;
    return KILN_OK;
}

kiln_status kiln_tok_read_added(kiln_tokenizer *tok, const kiln_jdoc *d, const kiln_jnode *root, const char *path) {
    const kiln_jnode *list = kiln_jdoc_get(d, root, "added_tokens");
    int n = list && list->type == KILN_JNODE_ARRAY ? list->count : 0;
    tok->added = calloc(n ? (size_t)n : 1, sizeof *tok->added);
    if (!tok->added) return kiln_error(KILN_ERR_OUT_OF_MEMORY, "%s: out of memory for %d added tokens", path, n);
    int i = 0;
    for (const kiln_jnode *a = kiln_jdoc_first(d, list); a; a = kiln_jdoc_next(d, a), i++)
        KILN_TRY(read_added_one(tok, d, a, i, path));
    qsort(tok->added, (size_t)tok->nadded, sizeof *tok->added, cmp_added);
    int k = 0;
    for (int b = 0; b <= 256; b++) {
        while (k < tok->nadded && (unsigned char)tok->added[k].content[0] < b) k++;
        tok->added_start[b] = k;
    }
    return KILN_OK;
}

/* ------------------------------------------------------------------------ pre_tokenizer */

static kiln_status add_stage(kiln_tokenizer *tok, kiln_tok_stage st, const char *path) {
    if (tok->nstages == KILN_TOK_MAX_STAGES)
        return kiln_error(KILN_ERR_UNSUPPORTED, "%s: more than %d pre-tokenizer steps", path, KILN_TOK_MAX_STAGES);
    tok->stages[tok->nstages++] = st;
    return KILN_OK;
}

/* Split on a string: any behavior, invert false. */
static kiln_status read_split_string(kiln_tokenizer *tok, const kiln_jdoc *d, const kiln_jnode *v, const char *path) {
    static const char *const names[] = {"Removed", "Isolated", "MergedWithPrevious", "MergedWithNext", "Contiguous"};
    kiln_tok_stage st = {.kind = KILN_TOK_SPLIT_STRING};
    KILN_TRY(kiln_tok_get_affix(d, kiln_jdoc_get(d, v, "pattern"), "String", "pre_tokenizer Split", st.replacement, path));
    const char *behavior;
    bool invert = false;
    KILN_TRY(kiln_tok_get_str(d, v, "behavior", &behavior, path));
    KILN_TRY(kiln_tok_get_bool(d, v, "invert", false, &invert, path));
    int b = 0;
    while (behavior && b < 5 && strcmp(behavior, names[b])) b++;
    if (!behavior || b == 5 || invert)
        return kiln_error(KILN_ERR_UNSUPPORTED, "%s: Split behavior %s%s is not supported", path,
                          behavior ? behavior : "null", invert ? " with invert" : "");
    st.behavior = (kiln_tok_split_behavior)b;
    return add_stage(tok, st, path);
}

/* Split: a regex kiln knows, behavior Isolated, invert false. */
static kiln_status read_split(kiln_tokenizer *tok, const kiln_jdoc *d, const kiln_jnode *v, const char *path) {
    const kiln_jnode *pat = kiln_jdoc_get(d, v, "pattern");
    const char *regex = NULL, *literal = NULL, *behavior;
    bool invert = false;
    if (pat && pat->type == KILN_JNODE_OBJECT) {
        KILN_TRY(kiln_tok_get_str(d, pat, "Regex", &regex, path));
        KILN_TRY(kiln_tok_get_str(d, pat, "String", &literal, path));
    }
    if (literal) return read_split_string(tok, d, v, path);
    if (!regex) return kiln_error(KILN_ERR_PARSE, "%s: Split has no pattern {\"Regex\": ...}", path);
    kiln_pretok_pattern p = kiln_pretok_pattern_of(regex);
    if (p == KILN_PRETOK_NONE)
        return kiln_error(KILN_ERR_UNSUPPORTED,
                          "%s: Split pattern %s is not supported (kiln knows GPT-2's, Llama-3's and Qwen2's patterns)", path, regex);
    KILN_TRY(kiln_tok_get_str(d, v, "behavior", &behavior, path));
    KILN_TRY(kiln_tok_get_bool(d, v, "invert", false, &invert, path));
    if (!behavior || strcmp(behavior, "Isolated") || invert)
        return kiln_error(KILN_ERR_UNSUPPORTED, "%s: Split behavior %s%s is not supported (kiln implements Isolated)",
                          path, behavior ? behavior : "null", invert ? " with invert" : "");
    return add_stage(tok, (kiln_tok_stage){.kind = KILN_TOK_SPLIT, .pattern = p}, path);
}

/* ByteLevel: add_prefix_space (default true), then GPT-2's split when use_regex (default true); the
 * byte mapping itself happens in the BPE model, so it must be the last step. */
static kiln_status read_byte_level(kiln_tokenizer *tok, const kiln_jdoc *d, const kiln_jnode *v, const char *path) {
    bool prefix = false, regex = false;
    KILN_TRY(kiln_tok_get_bool(d, v, "add_prefix_space", true, &prefix, path));
    KILN_TRY(kiln_tok_get_bool(d, v, "use_regex", true, &regex, path));
    if (prefix) KILN_TRY(add_stage(tok, (kiln_tok_stage){.kind = KILN_TOK_PREFIX_SPACE}, path));
    if (regex) KILN_TRY(add_stage(tok, (kiln_tok_stage){.kind = KILN_TOK_SPLIT, .pattern = KILN_PRETOK_GPT2}, path));
    return KILN_OK;
}

/* Metaspace: replacement, prepend_scheme ("always", "first", "never"; older files say
 * add_prefix_space instead), split. */
static kiln_status read_metaspace(kiln_tokenizer *tok, const kiln_jdoc *d, const kiln_jnode *v, const char *path) {
    kiln_tok_stage st = {.kind = KILN_TOK_METASPACE, .prepend = KILN_TOK_PREPEND_ALWAYS};
    KILN_TRY(kiln_tok_get_affix(d, v, "replacement", "pre_tokenizer Metaspace", st.replacement, path));
    const char *scheme;
    bool add_prefix = true;
    KILN_TRY(kiln_tok_get_str(d, v, "prepend_scheme", &scheme, path));
    KILN_TRY(kiln_tok_get_bool(d, v, "add_prefix_space", true, &add_prefix, path));
    KILN_TRY(kiln_tok_get_bool(d, v, "split", true, &st.split, path));
    if (!scheme) st.prepend = add_prefix ? KILN_TOK_PREPEND_ALWAYS : KILN_TOK_PREPEND_NEVER;
    else if (!strcmp(scheme, "first")) st.prepend = KILN_TOK_PREPEND_FIRST;
    else if (!strcmp(scheme, "never")) st.prepend = KILN_TOK_PREPEND_NEVER;
    else if (strcmp(scheme, "always"))
        return kiln_error(KILN_ERR_PARSE, "%s: Metaspace prepend_scheme \"%s\" is none of always, first, never", path,
                          scheme);
    return add_stage(tok, st, path);
}

/* One pre-tokenizer (a Sequence recursively); *byte_level is set once the ByteLevel step was read. */
static kiln_status read_pretok(kiln_tokenizer *tok, const kiln_jdoc *d, const kiln_jnode *v, bool *byte_level,
                               const char *path) {
    const char *type = NULL;
    if (v->type == KILN_JNODE_OBJECT) KILN_TRY(kiln_tok_get_str(d, v, "type", &type, path));
    if (!type) return kiln_error(KILN_ERR_PARSE, "%s: a pre_tokenizer has no \"type\"", path);
    if (*byte_level)
        return kiln_error(KILN_ERR_UNSUPPORTED, "%s: pre_tokenizer %s after ByteLevel is not supported", path, type);
    if (!strcmp(type, "Split")) return read_split(tok, d, v, path);
    if (!strcmp(type, "Metaspace")) return read_metaspace(tok, d, v, path);
    if (!strcmp(type, "ByteLevel")) {
        *byte_level = true;
        return read_byte_level(tok, d, v, path);
    }
    const kiln_jnode *list = kiln_jdoc_get(d, v, "pretokenizers");
    if (!strcmp(type, "Sequence") && list && list->type == KILN_JNODE_ARRAY) {
        for (const kiln_jnode *p = kiln_jdoc_first(d, list); p; p = kiln_jdoc_next(d, p))
            KILN_TRY(read_pretok(tok, d, p, byte_level, path));
        return KILN_OK;
    }
    return kiln_error(KILN_ERR_UNSUPPORTED,
                      "%s: pre_tokenizer \"%s\" is not supported (kiln implements ByteLevel, Split, Metaspace and "
                      "Sequence)", path, type);
}

kiln_status kiln_tok_read_pre_tokenizer(kiln_tokenizer *tok, const kiln_jdoc *d, const kiln_jnode *root,
                                        const char *path) {
    const kiln_jnode *v = kiln_jdoc_get(d, root, "pre_tokenizer");
    if (v && v->type != KILN_JNODE_NULL) KILN_TRY(read_pretok(tok, d, v, &tok->byte_level, path));
    return KILN_OK;
}

/* ------------------------------------------------------------------------ post_processor */

/* Appends the ids of template special token `name` to ids[*n]. */
static kiln_status template_ids(const kiln_tokenizer *tok, const kiln_jdoc *d, const kiln_jnode *specials,
                                const char *name, int32_t *ids, int *n, const char *path) {
    const kiln_jnode *st = kiln_jdoc_get(d, specials, name);
    const kiln_jnode *list = kiln_jdoc_get(d, st, "ids");
    if (!list || list->type != KILN_JNODE_ARRAY)
        return kiln_error(KILN_ERR_PARSE, "%s: post_processor special token \"%s\" has no ids", path, name);
    for (const kiln_jnode *v = kiln_jdoc_first(d, list); v; v = kiln_jdoc_next(d, v)) {
        int32_t id;
        KILN_TRY(kiln_tok_id_of(v, "post_processor special token id", path, &id));
        if (id >= tok->nids || tok->tok_off[id] < 0) /* encode would hand out an id that decodes to nothing */
            return kiln_error(KILN_ERR_PARSE, "%s: post_processor id %d names no token", path, id);
        if (*n == KILN_TOK_MAX_TEMPLATE)
            return kiln_error(KILN_ERR_UNSUPPORTED, "%s: more than %d template tokens", path, KILN_TOK_MAX_TEMPLATE);
        ids[(*n)++] = id;
    }
    return KILN_OK;
}

/* TemplateProcessing's "single" template: special tokens before and after the sequence $A. */
static kiln_status read_template(kiln_tokenizer *tok, const kiln_jdoc *d, const kiln_jnode *v, const char *path) {
    const kiln_jnode *single = kiln_jdoc_get(d, v, "single"), *specials = kiln_jdoc_get(d, v, "special_tokens");
    if (!single || single->type != KILN_JNODE_ARRAY)
        return kiln_error(KILN_ERR_PARSE, "%s: TemplateProcessing has no \"single\" template", path);
    bool after = false;
    for (const kiln_jnode *it = kiln_jdoc_first(d, single); it; it = kiln_jdoc_next(d, it)) {
        const kiln_jnode *sp = kiln_jdoc_get(d, it, "SpecialToken"), *seq = kiln_jdoc_get(d, it, "Sequence");
        const char *name = NULL;
        if (sp) KILN_TRY(kiln_tok_get_str(d, sp, "id", &name, path));
        if (name && after) KILN_TRY(template_ids(tok, d, specials, name, tok->suffix, &tok->nsuffix, path));
        else if (name) KILN_TRY(template_ids(tok, d, specials, name, tok->prefix, &tok->nprefix, path));
        else if (seq && !after) after = true;
        else return kiln_error(KILN_ERR_PARSE, "%s: TemplateProcessing's single template has an unknown piece", path);
    }
    tok->has_template = true;
    return KILN_OK;
}

static kiln_status read_post(kiln_tokenizer *tok, const kiln_jdoc *d, const kiln_jnode *v, const char *path) {
    const char *type = NULL;
    if (v->type == KILN_JNODE_OBJECT) KILN_TRY(kiln_tok_get_str(d, v, "type", &type, path));
    if (!type) return kiln_error(KILN_ERR_PARSE, "%s: a post_processor has no \"type\"", path);
    if (!strcmp(type, "ByteLevel")) return KILN_OK; /* only adjusts offsets */
    if (!strcmp(type, "TemplateProcessing")) {
        if (tok->has_template) return kiln_error(KILN_ERR_UNSUPPORTED, "%s: two TemplateProcessing post-processors", path);
        return read_template(tok, d, v, path);
    }
    const kiln_jnode *list = kiln_jdoc_get(d, v, "processors");
    if (!strcmp(type, "Sequence") && list && list->type == KILN_JNODE_ARRAY) {
        for (const kiln_jnode *p = kiln_jdoc_first(d, list); p; p = kiln_jdoc_next(d, p))
            KILN_TRY(read_post(tok, d, p, path));
        return KILN_OK;
    }
    return kiln_error(KILN_ERR_UNSUPPORTED,
                      "%s: post_processor \"%s\" is not supported (kiln implements ByteLevel, TemplateProcessing and "
                      "Sequence)", path, type);
}

kiln_status kiln_tok_read_post_processor(kiln_tokenizer *tok, const kiln_jdoc *d, const kiln_jnode *root,
                                         const char *path) {
    const kiln_jnode *v = kiln_jdoc_get(d, root, "post_processor");
    return v && v->type != KILN_JNODE_NULL ? read_post(tok, d, v, path) : KILN_OK;
}
