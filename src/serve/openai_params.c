/* openai_params.c — OpenAI request bodies into kiln_llm requests (contract in openai_params.h). The
 * parameters and their ranges are OpenAI's, plus vLLM's extras (top_k, min_p, repetition_penalty,
 * ignore_eos); fields kiln does not use (user, logit_bias, ...) are ignored as OpenAI's servers do. */
#include "serve/openai_params.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int bad(const char **param, const char *name, char *msg, size_t size, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
static int bad(const char **param, const char *name, char *msg, size_t size, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, size, fmt, ap);
    va_end(ap);
    *param = name;
    return 400;
}

/* A number parameter in [lo, hi] (integer when asked); absent leaves *out. */
static int number(const cJSON *root, const char *name, double lo, double hi, bool integer, double *out,
                  const char **param, char *msg, size_t size) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, name);
    if (!v || cJSON_IsNull(v)) return 0;
    if (!cJSON_IsNumber(v) || !(v->valuedouble >= lo && v->valuedouble <= hi) ||
        (integer && v->valuedouble != floor(v->valuedouble)))
        return bad(param, name, msg, size, "'%s' must be %s in [%g, %g]", name, integer ? "an integer" : "a number", lo, hi);
    *out = v->valuedouble;
    return 0;
}

static int boolean(const cJSON *root, const char *name, bool *out, const char **param, char *msg, size_t size) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, name);
    if (!v || cJSON_IsNull(v)) return 0;
    if (!cJSON_IsBool(v)) return bad(param, name, msg, size, "'%s' must be true or false", name);
    *out = cJSON_IsTrue(v);
    return 0;
}

static int parse_stop(const cJSON *root, openai_params *p, const char **param, char *msg, size_t size) {
    const cJSON *stop = cJSON_GetObjectItemCaseSensitive(root, "stop");
    if (!stop || cJSON_IsNull(stop)) return 0;
    if (cJSON_IsString(stop)) {
        if (!stop->valuestring[0]) return 0;
        p->stops[p->req.n_stop++] = strdup(stop->valuestring);
    } else if (cJSON_IsArray(stop) && cJSON_GetArraySize(stop) <= OPENAI_MAX_STOP) {
        const cJSON *s;
        cJSON_ArrayForEach(s, stop) {
            if (!cJSON_IsString(s)) return bad(param, "stop", msg, size, "'stop' must be a string or a list of strings");
            if (s->valuestring[0]) p->stops[p->req.n_stop++] = strdup(s->valuestring);
        }
    } else {
        return bad(param, "stop", msg, size, "'stop' must be a string or a list of at most %d strings", OPENAI_MAX_STOP);
    }
    for (int i = 0; i < p->req.n_stop; i++)
        if (!p->stops[i]) return bad(param, "stop", msg, size, "out of memory");
    p->req.stop = (const char *const *)p->stops;
    return 0;
}

/* A list of token ids into *ids. */
static int token_list(const cJSON *list, int32_t **ids, int *n, const char **param, char *msg, size_t size) {
    int count = cJSON_GetArraySize(list);
    *ids = malloc(sizeof(int32_t) * (size_t)(count + 1));
    if (!*ids) return bad(param, "prompt", msg, size, "out of memory");
    *n = 0;
    const cJSON *t;
    cJSON_ArrayForEach(t, list) {
        if (!cJSON_IsNumber(t) || t->valuedouble != floor(t->valuedouble) || t->valuedouble < 0 || t->valuedouble > 2e9)
            return bad(param, "prompt", msg, size, "token ids in 'prompt' must be non-negative integers");
        (*ids)[(*n)++] = (int32_t)t->valuedouble;
    }
    return 0;
}

static int parse_prompt(const cJSON *root, openai_params *p, const char **param, char *msg, size_t size) {
    const cJSON *prompt = cJSON_GetObjectItemCaseSensitive(root, "prompt");
    const char *shape = "'prompt' must be a string, a list of strings, a list of token ids or a list of such lists";
    if (cJSON_IsString(prompt)) {
        p->prompts = calloc(1, sizeof *p->prompts);
        if (!p->prompts || !(p->prompts[0].text = strdup(prompt->valuestring))) return bad(param, "prompt", msg, size, "out of memory");
        p->n_prompts = 1;
        return 0;
    }
    if (!cJSON_IsArray(prompt) || cJSON_GetArraySize(prompt) < 1) return bad(param, "prompt", msg, size, "%s", shape);
    const cJSON *first = cJSON_GetArrayItem(prompt, 0);
    if (cJSON_IsNumber(first)) {
        p->prompts = calloc(1, sizeof *p->prompts);
        if (!p->prompts) return bad(param, "prompt", msg, size, "out of memory");
        p->n_prompts = 1;
        return token_list(prompt, &p->prompts[0].ids, &p->prompts[0].n_ids, param, msg, size);
    }
    int count = cJSON_GetArraySize(prompt);
    if (count > OPENAI_MAX_PROMPTS) return bad(param, "prompt", msg, size, "at most %d prompts per request", OPENAI_MAX_PROMPTS);
    p->prompts = calloc((size_t)count, sizeof *p->prompts);
    if (!p->prompts) return bad(param, "prompt", msg, size, "out of memory");
    const cJSON *e;
    cJSON_ArrayForEach(e, prompt) {
        openai_prompt *op = &p->prompts[p->n_prompts++];
        if (cJSON_IsString(e)) {
            if (!(op->text = strdup(e->valuestring))) return bad(param, "prompt", msg, size, "out of memory");
        } else if (cJSON_IsArray(e)) {
            int st = token_list(e, &op->ids, &op->n_ids, param, msg, size);
            if (st) return st;
        } else {
            return bad(param, "prompt", msg, size, "%s", shape);
        }
    }
    return 0;
}

/* A message's content: a string, or a list of parts of which the text ones are joined. */
static char *message_text(const cJSON *content) {
    if (cJSON_IsString(content)) return strdup(content->valuestring);
    if (cJSON_IsNull(content) || !content) return strdup("");
    if (!cJSON_IsArray(content)) return NULL;
    size_t len = 0;
    const cJSON *part;
    cJSON_ArrayForEach(part, content) {
        const cJSON *type = cJSON_GetObjectItemCaseSensitive(part, "type");
        const cJSON *text = cJSON_GetObjectItemCaseSensitive(part, "text");
        if (!cJSON_IsString(type) || strcmp(type->valuestring, "text") || !cJSON_IsString(text)) return NULL;
        len += strlen(text->valuestring);
    }
    char *out = malloc(len + 1);
    if (!out) return NULL;
    out[0] = 0;
    cJSON_ArrayForEach(part, content) strcat(out, cJSON_GetObjectItemCaseSensitive(part, "text")->valuestring);
    return out;
}

static int parse_messages(const cJSON *root, const kiln_llm *llm, openai_params *p, const char **param, char *msg,
                          size_t size) {
    const cJSON *messages = cJSON_GetObjectItemCaseSensitive(root, "messages");
    if (!cJSON_IsArray(messages) || cJSON_GetArraySize(messages) < 1 || cJSON_GetArraySize(messages) > 4096)
        return bad(param, "messages", msg, size, "'messages' must be a non-empty list of {\"role\", \"content\"}");
    int n = cJSON_GetArraySize(messages), st = 0;
    kiln_chat_message *m = calloc((size_t)n, sizeof *m);
    if (!m) return bad(param, "messages", msg, size, "out of memory");
    int k = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, messages) {
        const cJSON *role = cJSON_GetObjectItemCaseSensitive(e, "role");
        char *text = cJSON_IsString(role) ? message_text(cJSON_GetObjectItemCaseSensitive(e, "content")) : NULL;
        if (!text) {
            st = bad(param, "messages", msg, size,
                     "message %d needs a 'role' string and a 'content' string or list of text parts", k);
            break;
        }
        m[k].role = role->valuestring;
        m[k++].content = text;
    }
    p->prompts = st ? NULL : calloc(1, sizeof *p->prompts);
    if (!st && !p->prompts) st = bad(param, "messages", msg, size, "out of memory");
    size_t len;
    if (!st && kiln_llm_apply_chat_template(llm, m, n, true, &p->prompts[0].text, &len))
        st = bad(param, "messages", msg, size, "the chat template failed: %s", kiln_last_error());
    if (!st) p->n_prompts = 1;
    for (int i = 0; i < k; i++) free((char *)m[i].content);
    free(m);
    return st;
}

int openai_params_parse(const cJSON *root, bool chat, const kiln_llm *llm, openai_params *p, const char **param,
                        char *msg, size_t msg_size) {
    memset(p, 0, sizeof *p);
    p->req = kiln_llm_request_defaults();
    p->n = 1;
    *param = NULL;
    kiln_sampling_params *s = &p->req.sampling;
    /* OpenAI's defaults: temperature 1, top_p 1; completions stop after 16 tokens by default */
    double temperature = 1, top_p = 1, top_k = 0, min_p = 0, rep = 1, freq = 0, pres = 0, n = 1, seed = -1;
    double max_tokens = chat ? 0 : 16, logprobs_k = -1, top_logprobs = 0;
    int st = number(root, "temperature", 0, 2, false, &temperature, param, msg, msg_size);
    if (!st) st = number(root, "top_p", 1e-9, 1, false, &top_p, param, msg, msg_size);
    if (!st) st = number(root, "top_k", -1, 1e9, true, &top_k, param, msg, msg_size);
    if (!st) st = number(root, "min_p", 0, 1, false, &min_p, param, msg, msg_size);
    if (!st) st = number(root, "repetition_penalty", 1e-6, 100, false, &rep, param, msg, msg_size);
    if (!st) st = number(root, "frequency_penalty", -2, 2, false, &freq, param, msg, msg_size);
    if (!st) st = number(root, "presence_penalty", -2, 2, false, &pres, param, msg, msg_size);
    if (!st) st = number(root, "n", 1, OPENAI_MAX_N, true, &n, param, msg, msg_size);
    if (!st) st = number(root, "seed", -9.2e18, 9.2e18, true, &seed, param, msg, msg_size);
    if (!st) st = number(root, "max_tokens", 1, 1 << 24, true, &max_tokens, param, msg, msg_size);
    if (!st && chat) st = number(root, "max_completion_tokens", 1, 1 << 24, true, &max_tokens, param, msg, msg_size);
    if (!st) st = boolean(root, "ignore_eos", &p->req.ignore_eos, param, msg, msg_size);
    if (!st) st = boolean(root, "stream", &p->stream, param, msg, msg_size);
    const cJSON *so = cJSON_GetObjectItemCaseSensitive(root, "stream_options");
    if (!st && so && !cJSON_IsNull(so)) {
        if (!cJSON_IsObject(so)) st = bad(param, "stream_options", msg, msg_size, "'stream_options' must be an object");
        else st = boolean(so, "include_usage", &p->include_usage, param, msg, msg_size);
        if (!st && !p->stream) st = bad(param, "stream_options", msg, msg_size, "'stream_options' needs \"stream\": true");
    }
    if (!st && chat) {
        st = boolean(root, "logprobs", &p->logprobs, param, msg, msg_size);
        if (!st) st = number(root, "top_logprobs", 0, KILN_MAX_TOP_LOGPROBS, true, &top_logprobs, param, msg, msg_size);
        if (!st && top_logprobs > 0 && !p->logprobs)
            st = bad(param, "top_logprobs", msg, msg_size, "'top_logprobs' needs \"logprobs\": true");
    } else if (!st) {
        st = number(root, "logprobs", 0, KILN_MAX_TOP_LOGPROBS, true, &logprobs_k, param, msg, msg_size);
        if (!st && logprobs_k >= 0) p->logprobs = true, top_logprobs = logprobs_k;
        const cJSON *echo = cJSON_GetObjectItemCaseSensitive(root, "echo");
        if (!st && cJSON_IsTrue(echo)) st = bad(param, "echo", msg, msg_size, "'echo' is not supported");
    }
    if (!st) st = parse_stop(root, p, param, msg, msg_size);
    if (!st) st = chat ? parse_messages(root, llm, p, param, msg, msg_size) : parse_prompt(root, p, param, msg, msg_size);
    if (st) return st;
    s->temperature = (float)temperature;
    s->top_p = (float)top_p;
    s->top_k = top_k < 0 ? 0 : (int)top_k;
    s->min_p = (float)min_p;
    s->repetition_penalty = (float)rep;
    s->frequency_penalty = (float)freq;
    s->presence_penalty = (float)pres;
    s->logprobs = p->logprobs;
    s->top_logprobs = p->top_logprobs = (int)top_logprobs;
    p->seed_given = seed != -1;
    s->seed = (uint64_t)(int64_t)seed;
    p->n = (int)n;
    p->req.max_tokens = (int)max_tokens;
    p->req.add_special = !chat; /* a chat template writes its own special tokens */
    return 0;
}

void openai_params_free(openai_params *p) {
    for (int i = 0; i < p->n_prompts; i++) free(p->prompts[i].text), free(p->prompts[i].ids);
    free(p->prompts);
    for (int i = 0; i < p->req.n_stop; i++) free(p->stops[i]);
    memset(p, 0, sizeof *p);
}
