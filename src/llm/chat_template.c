/* chat_template.c — the public chat-template calls of kiln_llm.h: parse a template once (jinja.h),
 * render it for a conversation with the variables transformers' apply_chat_template passes
 * (messages, add_generation_prompt, bos_token, eos_token, tools and documents as none), and the
 * built-in ChatML template used when a model brings none. */
#include "llm/chat_template_internal.h"

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

kiln_status kiln_chat_template_apply_at(const kiln_chat_template *t, const kiln_chat_message *messages, int n,
                                        bool add_generation_prompt, const struct tm *now, char **text, size_t *len) {
    if (!t || !text || (n > 0 && !messages) || n < 0)
        return kiln_error(KILN_ERR_INVALID_ARGUMENT, "kiln_chat_template_apply: bad arguments");
    *text = NULL;
    if (len) *len = 0;
    for (int i = 0; i < n; i++)
        if (!messages[i].role || !messages[i].content)
            return kiln_error(KILN_ERR_INVALID_ARGUMENT, "kiln_chat_template_apply: message %d has no role or content", i);
    jarena arena = {.cap = JINJA_MAX_ARENA};
    /* the messages as a list of {role, content} dicts, borrowing the caller's strings */
    jlist *list = jarena_alloc(&arena, sizeof *list);
    jv *items = jarena_alloc(&arena, (size_t)(n ? n : 1) * sizeof *items);
    jdict *dicts = jarena_alloc(&arena, (size_t)(n ? n : 1) * sizeof *dicts);
    jstr *keys = jarena_alloc(&arena, 2 * (size_t)(n ? n : 1) * sizeof *keys);
    jv *vals = jarena_alloc(&arena, 2 * (size_t)(n ? n : 1) * sizeof *vals);
    if (!list || !items || !dicts || !keys || !vals) {
        jarena_free(&arena);
        return kiln_error(KILN_ERR_OUT_OF_MEMORY, "chat template: out of memory");
    }
    for (int i = 0; i < n; i++) {
        keys[2 * i] = (jstr){4, "role"};
        keys[2 * i + 1] = (jstr){7, "content"};
        vals[2 * i] = jv_strz(messages[i].role);
        vals[2 * i + 1] = jv_strz(messages[i].content);
        dicts[i] = (jdict){.n = 2, .cap = 2, .k = keys + 2 * i, .v = vals + 2 * i};
        items[i] = (jv){.type = JV_DICT, .d = &dicts[i]};
    }
    *list = (jlist){.n = (size_t)n, .cap = (size_t)(n ? n : 1), .v = items};
    jinja_var vars[] = {
        {"messages", {.type = JV_LIST, .l = list}},
        {"add_generation_prompt", jv_bool(add_generation_prompt)},
        {"bos_token", jv_strz(t->bos)},
        {"eos_token", jv_strz(t->eos)},
        {"tools", jv_none()},
        {"documents", jv_none()},
    };
    kiln_strbuf out = {0};
    kiln_status s = jinja_render(&t->parsed, vars, (int)(sizeof vars / sizeof *vars), now, &arena, &out);
    jarena_free(&arena);
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

kiln_status kiln_chat_template_apply(const kiln_chat_template *t, const kiln_chat_message *messages, int n,
                                     bool add_generation_prompt, char **text, size_t *len) {
    time_t now = time(NULL);
    struct tm local;
    localtime_r(&now, &local);
    return kiln_chat_template_apply_at(t, messages, n, add_generation_prompt, &local, text, len);
}
