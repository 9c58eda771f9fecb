/* chat_template.c — the public chat-template calls of kiln_llm.h: parse a template once (jinja.h),
 * render it for a conversation with the variables transformers' apply_chat_template passes
 * (messages, add_generation_prompt, bos_token, eos_token, tools and documents as none), and the
 * built-in ChatML template used when a model brings none. Internally (chat_template_internal.h) also
 * with a given clock, and with messages and tools as JSON (tool calls, names, any field). */
#include "llm/chat_template_internal.h"

#include "core/json_read.h"
#include "core/status.h"
#include "llm/jinja.h"

#include <stdlib.h>
#include <string.h>

struct kiln_chat_template {
    jtemplate parsed;
    char *bos, *eos;
};

static const char CHATML[] =
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";

kiln_status kiln_chat_template_create(const char *source, const char *bos_token, const char *eos_token,
                                      kiln_chat_template **out) {
    if (!source || !out) return kiln_error(KILN_ERR_INVALID_ARGUMENT, "kiln_chat_template_create: NULL argument");
    *out = NULL;
    kiln_chat_template *t = calloc(1, sizeof *t);
    if (!t) return kiln_error(KILN_ERR_OUT_OF_MEMORY, "chat template: out of memory");
    t->bos = strdup(bos_token ? bos_token : "");
    t->eos = strdup(eos_token ? eos_token : "");
    if (!t->bos || !t->eos) {
        kiln_chat_template_free(t);
        return kiln_error(KILN_ERR_OUT_OF_MEMORY, "chat template: out of memory");
    }
    kiln_status s = jinja_parse(source, strlen(source), &t->parsed);
    if (s != KILN_OK) {
        kiln_chat_template_free(t);
        return s;
    }
    *out = t;
    return KILN_OK;
}

kiln_status kiln_chat_template_chatml(kiln_chat_template **out) {
    return kiln_chat_template_create(CHATML, "", "<|im_end|>", out);
}

void kiln_chat_template_free(kiln_chat_template *t) {
    if (!t) return;
    jinja_template_free(&t->parsed);
    free(t->bos);
    free(t->eos);
    free(t);
}

/* Renders t with messages and tools (values in arena, which is freed here) into *text. */
static kiln_status render(const kiln_chat_template *t, jv messages, jv tools, bool add_generation_prompt,
                          const struct tm *now, jarena *arena, char **text, size_t *len) {
    jinja_var vars[] = {
        {"messages", messages},
        {"add_generation_prompt", jv_bool(add_generation_prompt)},
        {"bos_token", jv_strz(t->bos)},
        {"eos_token", jv_strz(t->eos)},
        {"tools", tools},
        {"documents", jv_none()},
    };
    kiln_strbuf out = {0};
    kiln_status s = jinja_render(&t->parsed, vars, (int)(sizeof vars / sizeof *vars), now, arena, &out);
    jarena_free(arena);
    if (s == KILN_OK) s = kiln_strbuf_status(&out);
    if (s != KILN_OK) {
        kiln_strbuf_free(&out);
        return s;
    }
    if (!out.data) {
        out.data = calloc(1, 1);
        if (!out.data) return kiln_error(KILN_ERR_OUT_OF_MEMORY, "chat template: out of memory");
    }
    *text = out.data;
    if (len) *len = out.len;
    return KILN_OK;
}

kiln_status kiln_chat_template_apply_at(const kiln_chat_template *t, const kiln_chat_message *messages, int n,
                                        bool add_generation_prompt, const struct tm *now, char **text, size_t *len) {
    if (!t || !text || (n > 0 && !messages) || n < 0)
        return kiln_error(KILN_ERR_INVALID_ARGUMENT, "kiln_chat_template_apply: bad arguments");
    *text = NULL;
    if (len) *len = 0;
    for (int i = 0; i < n; i++)
        if (!messages[i].role || !messages[i].content)
            return kiln_error(KILN_ERR_INVALID_ARGUMENT, "kiln_chat_template_apply: message %d has no role or content",
                              i);
    jarena arena = {.cap = JINJA_MAX_ARENA};
    /* the messages as a list of {role, content} dicts, borrowing the caller's strings */
    size_t cap = n ? (size_t)n : 1;
    jlist *list = jarena_alloc(&arena, sizeof *list);
    jv *items = jarena_alloc(&arena, cap * sizeof *items);
    jdict *dicts = jarena_alloc(&arena, cap * sizeof *dicts);
    jv *keys = jarena_alloc(&arena, 2 * cap * sizeof *keys);
    jv *vals = jarena_alloc(&arena, 2 * cap * sizeof *vals);
    if (!list || !items || !dicts || !keys || !vals) {
        jarena_free(&arena);
        return kiln_error(KILN_ERR_OUT_OF_MEMORY, "chat template: out of memory");
    }
    for (int i = 0; i < n; i++) {
        keys[2 * i] = jv_str("role", 4);
        keys[2 * i + 1] = jv_str("content", 7);
        vals[2 * i] = jv_strz(messages[i].role);
        vals[2 * i + 1] = jv_strz(messages[i].content);
        dicts[i] = (jdict){.n = 2, .cap = 2, .k = keys + 2 * i, .v = vals + 2 * i};
        items[i] = (jv){.type = JV_DICT, .d = &dicts[i]};
    }
    *list = (jlist){.n = (size_t)n, .cap = cap, .v = items};
    return render(t, (jv){.type = JV_LIST, .l = list}, jv_none(), add_generation_prompt, now, &arena, text, len);
}

/* A JSON value as a template value (strings borrowed from doc). Integral numbers within 2^53 become
 * ints, others floats (JSON does not tell 1 from 1.0). */
static bool json_to_value(jarena *a, const kiln_jdoc *doc, const kiln_jnode *n, jv *out) {
    switch (n->type) {
    case KILN_JNODE_NULL: *out = jv_none(); return true;
    case KILN_JNODE_FALSE: *out = jv_bool(false); return true;
    case KILN_JNODE_TRUE: *out = jv_bool(true); return true;
    case KILN_JNODE_NUMBER:
        *out = n->num == (double)(int64_t)n->num && n->num > -9007199254740992.0 && n->num < 9007199254740992.0
                   ? jv_int((int64_t)n->num)
                   : jv_float(n->num);
        return true;
    case KILN_JNODE_STRING: *out = jv_str(n->str, n->len); return true;
    case KILN_JNODE_ARRAY: {
        jlist *l = jarena_alloc(a, sizeof *l);
        if (!l) return false;
        l->cap = n->count ? (size_t)n->count : 1;
        if (!(l->v = jarena_alloc(a, l->cap * sizeof *l->v))) return false;
        for (const kiln_jnode *x = kiln_jdoc_first(doc, n); x; x = kiln_jdoc_next(doc, x))
            if (!json_to_value(a, doc, x, &l->v[l->n++])) return false;
        *out = (jv){.type = JV_LIST, .l = l};
        return true;
    }
    case KILN_JNODE_OBJECT: {
        jdict *d = jarena_alloc(a, sizeof *d);
        if (!d) return false;
        d->cap = n->count ? (size_t)n->count : 1;
        d->k = jarena_alloc(a, d->cap * sizeof *d->k);
        d->v = jarena_alloc(a, d->cap * sizeof *d->v);
        if (!d->k || !d->v) return false;
        for (const kiln_jnode *x = kiln_jdoc_first(doc, n); x; x = kiln_jdoc_next(doc, x)) {
            jstr key = {strlen(x->key), x->key};
            jv *slot = jdict_find(d, key.p, key.len);
            jv v;
            if (!json_to_value(a, doc, x, &v)) return false;
            if (slot) { /* a repeated key: the last one wins, as in Python */
                *slot = v;
                continue;
            }
            d->k[d->n] = jv_str(key.p, key.len);
            d->v[d->n++] = v;
        }
        *out = (jv){.type = JV_DICT, .d = d};
        return true;
    }
    }
    return false;
}

kiln_status kiln_chat_template_apply_json(const kiln_chat_template *t, const char *messages_json,
                                          const char *tools_json, bool add_generation_prompt, const struct tm *now,
                                          char **text, size_t *len) {
    if (!t || !messages_json || !text)
        return kiln_error(KILN_ERR_INVALID_ARGUMENT, "kiln_chat_template_apply_json: NULL argument");
    *text = NULL;
    if (len) *len = 0;
    kiln_jdoc mdoc = {0}, tdoc = {0};
    kiln_status s = kiln_jdoc_parse(messages_json, strlen(messages_json), "chat messages", &mdoc);
    if (s == KILN_OK && tools_json) s = kiln_jdoc_parse(tools_json, strlen(tools_json), "chat tools", &tdoc);
    if (s == KILN_OK && kiln_jdoc_root(&mdoc)->type != KILN_JNODE_ARRAY)
        s = kiln_error(KILN_ERR_INVALID_ARGUMENT, "chat messages: expected a JSON array");
    if (s == KILN_OK) {
        jarena arena = {.cap = JINJA_MAX_ARENA};
        jv messages, tools = jv_none();
        if (!json_to_value(&arena, &mdoc, kiln_jdoc_root(&mdoc), &messages) ||
            (tools_json && !json_to_value(&arena, &tdoc, kiln_jdoc_root(&tdoc), &tools))) {
            jarena_free(&arena);
            s = kiln_error(KILN_ERR_OUT_OF_MEMORY, "chat template: out of memory");
        } else {
            s = render(t, messages, tools, add_generation_prompt, now, &arena, text, len);
        }
    }
    kiln_jdoc_free(&mdoc);
    kiln_jdoc_free(&tdoc);
    return s;
}

kiln_status kiln_chat_template_apply(const kiln_chat_template *t, const kiln_chat_message *messages, int n,
                                     bool add_generation_prompt, char **text, size_t *len) {
    time_t now = time(NULL);
    struct tm local;
    localtime_r(&now, &local);
    return kiln_chat_template_apply_at(t, messages, n, add_generation_prompt, &local, text, len);
}
