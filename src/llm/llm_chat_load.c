/* llm_chat_load.c — where a kiln_llm's chat template comes from: kiln_llm_options.chat_template, else
 * tokenizer_config.json's "chat_template" (from the checkpoint directory or the engine's copy), with
 * that file's bos_token and eos_token as the values the template sees. */
#include "llm/llm_api_internal.h"

#include "core/json_read.h"
#include "core/status.h"

#include <stdlib.h>
#include <string.h>

/* A token setting's text: a string, or an AddedToken object's "content"; NULL otherwise. */
static const char *token_text(const kiln_jdoc *doc, const kiln_jnode *v) {
    if (v && v->type == KILN_JNODE_OBJECT) v = kiln_jdoc_get(doc, v, "content");
    return kiln_jdoc_str(v);
}

/* chat_template: a string, or the template named "default" of a list of {name, template}. */
static const char *template_text(const kiln_jdoc *doc, const kiln_jnode *v) {
    if (!v || v->type != KILN_JNODE_ARRAY) return kiln_jdoc_str(v);
    for (const kiln_jnode *e = kiln_jdoc_first(doc, v); e; e = kiln_jdoc_next(doc, e)) {
        const char *name = kiln_jdoc_str(kiln_jdoc_get(doc, e, "name"));
        if (name && !strcmp(name, "default")) return kiln_jdoc_str(kiln_jdoc_get(doc, e, "template"));
    }
    return NULL;
}

static kiln_status dup(const char *s, char **out) {
    if (!s) return KILN_OK;
    if (!(*out = strdup(s))) return kiln_error(KILN_ERR_OUT_OF_MEMORY, "out of memory");
    return KILN_OK;
}

kiln_status llm_chat_load(kiln_llm *llm, const char *override) {
    const char *cfg = llm->bundle.tokenizer_config;
    kiln_jdoc doc = {0};
    kiln_status st = KILN_OK;
    if (cfg) st = kiln_jdoc_parse(cfg, strlen(cfg), "tokenizer_config.json", &doc);
    const kiln_jnode *root = cfg && st == KILN_OK ? kiln_jdoc_root(&doc) : NULL;
    if (root && root->type != KILN_JNODE_OBJECT) st = kiln_error(KILN_ERR_PARSE, "tokenizer_config.json is no JSON object");
    if (st == KILN_OK) st = dup(override ? override : template_text(&doc, kiln_jdoc_get(&doc, root, "chat_template")),
                                &llm->chat_source);
    if (st == KILN_OK) st = dup(token_text(&doc, kiln_jdoc_get(&doc, root, "bos_token")), &llm->chat_bos);
    if (st == KILN_OK) st = dup(token_text(&doc, kiln_jdoc_get(&doc, root, "eos_token")), &llm->chat_eos);
    kiln_jdoc_free(&doc);
    return st;
}
