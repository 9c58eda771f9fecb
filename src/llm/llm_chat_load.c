/* llm_chat_load.c — a kiln_llm's chat template: kiln_llm_options.chat_template, else
 * tokenizer_config.json's "chat_template" (from the checkpoint directory or the engine's copy), with
 * that file's bos_token and eos_token as the values the template sees, else the built-in ChatML;
 * parsed once at open (chat_template.c), applied by kiln_llm_apply_chat_template from any thread. */
#include "llm/llm_api_internal.h"

#include "core/json_read.h"
#include "core/status.h"

#include <stdio.h>
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

/* The template of source with bos / eos, or ChatML without a source. A model's template that does not
 * parse leaves llm->chat NULL and its error in llm->chat_error (the model still serves completions);
 * an override that does not parse fails the open. */
static kiln_status prepare(kiln_llm *llm, const char *source, bool override, const char *bos, const char *eos) {
    kiln_status st = source ? kiln_chat_template_create(source, bos, eos, &llm->chat) : kiln_chat_template_chatml(&llm->chat);
    if (st == KILN_OK || override) return st == KILN_OK ? st : kiln_error_prefix(st, "chat_template");
    snprintf(llm->chat_error, sizeof llm->chat_error, "the model's chat template (tokenizer_config.json) does not "
             "parse: %s", kiln_last_error());
    return KILN_OK;
}

kiln_status llm_chat_load(kiln_llm *llm, const char *override) {
    const char *cfg = llm->bundle.tokenizer_config;
    kiln_jdoc doc = {0};
    kiln_status st = KILN_OK;
    if (cfg) st = kiln_jdoc_parse(cfg, strlen(cfg), "tokenizer_config.json", &doc);
    const kiln_jnode *root = cfg && st == KILN_OK ? kiln_jdoc_root(&doc) : NULL;
    if (root && root->type != KILN_JNODE_OBJECT) st = kiln_error(KILN_ERR_PARSE, "tokenizer_config.json is no JSON object");
    const char *source = override ? override : template_text(&doc, kiln_jdoc_get(&doc, root, "chat_template"));
    llm->info.has_chat_template = source != NULL;
    if (st == KILN_OK)
        st = prepare(llm, source, override != NULL, token_text(&doc, kiln_jdoc_get(&doc, root, "bos_token")),
                     token_text(&doc, kiln_jdoc_get(&doc, root, "eos_token")));
    kiln_jdoc_free(&doc);
    return st;
}

kiln_status kiln_llm_apply_chat_template(const kiln_llm *llm, const kiln_chat_message *messages, int n,
                                         bool add_generation_prompt, char **text, size_t *len) {
    if (!llm) return kiln_error(KILN_ERR_INVALID_ARGUMENT, "kiln_llm_apply_chat_template: llm is NULL");
    if (!llm->chat) return kiln_error(KILN_ERR_UNSUPPORTED, "%s", llm->chat_error);
    return kiln_chat_template_apply(llm->chat, messages, n, add_generation_prompt, text, len);
}
