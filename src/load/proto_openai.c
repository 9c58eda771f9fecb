/* proto_openai.c — OpenAI-compatible completions and chat completions: request bodies (prompt,
 * max_tokens, streaming with usage), the stream (SSE chunks: content deltas timestamped as tokens
 * arrive, usage counts, [DONE]) and non-streamed responses. Anything a server sends that does not
 * follow the API makes the request "malformed", with the reason kept for the report. */
#include "load/load_internal.h"

#include "core/json_read.h"
#include "core/json_write.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Marks the response malformed with a reason (the first reason wins). */
static void malformed(load_slot *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void malformed(load_slot *s, const char *fmt, ...) {
    if (s->malformed) return;
    s->malformed = true;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(s->detail, sizeof s->detail, fmt, ap);
    va_end(ap);
}

void load_openai_build(load_engine *e, load_slot *s) {
    const kiln_load_config *c = e->cfg;
    const load_target *t = e->tgt;
    const kiln_prompt *p = &t->prompts.items[e->next_prompt++ % t->prompts.n];
    bool chat = c->api == KILN_LOAD_API_OPENAI_CHAT;
    s->max_tokens = p->max_tokens > 0 ? p->max_tokens : kiln_len_dist_sample(&c->output_len, &e->rng);
    s->input_tokens = p->input_tokens;
    kiln_strbuf *b = &s->req;
    kiln_strbuf_clear(b);
    kiln_strbuf_puts(b, "{\"model\":");
    kiln_json_escape(b, t->model, strlen(t->model));
    if (chat && p->messages) {
        kiln_strbuf_puts(b, ",\"messages\":");
        kiln_strbuf_puts(b, p->messages);
    } else if (chat) {
        kiln_strbuf_puts(b, ",\"messages\":[{\"role\":\"user\",\"content\":");
        kiln_json_escape(b, p->text, strlen(p->text));
        kiln_strbuf_puts(b, "}]");
    } else {
        kiln_strbuf_puts(b, ",\"prompt\":");
        kiln_json_escape(b, p->text, strlen(p->text));
    }
    kiln_strbuf_printf(b, ",\"max_tokens\":%d", s->max_tokens);
    if (c->stream) kiln_strbuf_puts(b, ",\"stream\":true,\"stream_options\":{\"include_usage\":true}");
    if (c->ignore_eos) kiln_strbuf_puts(b, ",\"ignore_eos\":true");
    if (t->extra_members && t->extra_members[0]) {
        kiln_strbuf_putc(b, ',');
        kiln_strbuf_puts(b, t->extra_members);
    }
    kiln_strbuf_putc(b, '}');
}

/* Takes usage counts from a response or final stream chunk, when present. */
static void take_usage(load_slot *s, const kiln_jdoc *d, const kiln_jnode *root) {
    const kiln_jnode *u = kiln_jdoc_get(d, root, "usage");
    if (!u || u->type != KILN_JNODE_OBJECT) return;
    double v;
    if (kiln_jdoc_num(kiln_jdoc_get(d, u, "completion_tokens"), &v) && v >= 0) s->usage_out = (int64_t)v;
    if (kiln_jdoc_num(kiln_jdoc_get(d, u, "prompt_tokens"), &v) && v >= 0) s->usage_in = (int64_t)v;
}

/* The generated text of choices[0]: message.content / delta.content (chat, also reasoning_content)
 * or text (completions). *present says whether the field exists at all. */
static size_t choice_text_len(const kiln_jdoc *d, const kiln_jnode *choice, bool chat, const char *holder, bool *present) {
    *present = false;
    const kiln_jnode *obj = chat ? kiln_jdoc_get(d, choice, holder) : choice;
    if (!obj) return 0;
    size_t n = 0;
    const char *keys[2] = {chat ? "content" : "text", chat ? "reasoning_content" : NULL};
    for (int k = 0; k < 2 && keys[k]; k++) {
        const kiln_jnode *v = kiln_jdoc_get(d, obj, keys[k]);
        if (v && (v->type == KILN_JNODE_STRING || v->type == KILN_JNODE_NULL)) *present = true;
        if (v && v->type == KILN_JNODE_STRING) n += v->len;
    }
    return n;
}

/* The error message of an {"error": ...} body, or NULL. */
static const char *error_message(const kiln_jdoc *d, const kiln_jnode *root) {
    const kiln_jnode *err = kiln_jdoc_get(d, root, "error");
    if (!err || err->type == KILN_JNODE_NULL) return NULL;
    const char *msg = kiln_jdoc_str(kiln_jdoc_get(d, err, "message"));
    return msg ? msg : kiln_jdoc_str(err) ? kiln_jdoc_str(err) : "(no message)";
}

/* Records one content chunk arriving at s->now_ns. */
static void add_token_time(load_slot *s) {
    if (s->ntok == s->tokcap) {
        int cap = s->tokcap ? s->tokcap * 2 : 256;
        int64_t *t = realloc(s->tok_ns, (size_t)cap * sizeof *t);
        if (!t) {
            malformed(s, "out of memory recording token times");
            return;
        }
        s->tok_ns = t;
        s->tokcap = cap;
    }
    s->tok_ns[s->ntok++] = s->now_ns;
}

/* One SSE event of a streamed response. Never fails the feed: problems mark the slot malformed. */
static kiln_status on_event(void *user, const char *data, size_t len) {
    load_slot *s = user;
    if (s->malformed) return KILN_OK;
    if (len == 6 && !memcmp(data, "[DONE]", 6)) {
        s->done_marker = true;
        return KILN_OK;
    }
    if (s->done_marker) {
        malformed(s, "stream: data after [DONE]");
        return KILN_OK;
    }
    kiln_jdoc d;
    if (kiln_jdoc_parse(data, len, "stream chunk", &d) != KILN_OK) {
        malformed(s, "stream chunk is not JSON: %.80s", data);
        return KILN_OK;
    }
    const kiln_jnode *root = kiln_jdoc_root(&d);
    const char *err = error_message(&d, root);
    const kiln_jnode *choices = kiln_jdoc_get(&d, root, "choices");
    if (err) {
        malformed(s, "server error in the stream: %.150s", err);
    } else if (root->type != KILN_JNODE_OBJECT || ((!choices || choices->type != KILN_JNODE_ARRAY) && !kiln_jdoc_get(&d, root, "usage"))) {
        malformed(s, "stream chunk without \"choices\": %.80s", data);
    } else {
        take_usage(s, &d, root);
        const kiln_jnode *c0 = kiln_jdoc_at(&d, choices, 0);
        bool present;
        size_t n = c0 ? choice_text_len(&d, c0, s->eng->cfg->api == KILN_LOAD_API_OPENAI_CHAT, "delta", &present) : 0;
        if (n > 0) {
            s->content_bytes += n;
            if (!s->first_token_ns) s->first_token_ns = s->now_ns;
            s->last_token_ns = s->now_ns;
            add_token_time(s);
        }
    }
    kiln_jdoc_free(&d);
    return KILN_OK;
}

void load_openai_body(load_slot *s, const char *data, size_t n) {
    if (!s->eng->cfg->stream) {
        kiln_strbuf_append(&s->resp, data, n);
        return;
    }
    if (s->malformed) return;
    if (kiln_sse_feed(&s->sse, data, n, on_event, s) != KILN_OK) malformed(s, "event stream: %s", kiln_last_error());
}

/* Judges a complete non-streamed response body. */
static bool finish_plain(load_slot *s) {
    if (kiln_strbuf_status(&s->resp) != KILN_OK) {
        malformed(s, "out of memory buffering the response");
        return false;
    }
    kiln_jdoc d;
    if (kiln_jdoc_parse(s->resp.data ? s->resp.data : "", s->resp.len, "response", &d) != KILN_OK) {
        malformed(s, "response is not JSON: %.150s", kiln_last_error());
        return false;
    }
    const kiln_jnode *root = kiln_jdoc_root(&d);
    const kiln_jnode *choices = kiln_jdoc_get(&d, root, "choices");
    const char *err = error_message(&d, root);
    bool present = false;
    size_t n = 0;
    if (err) malformed(s, "server error: %.150s", err);
    else if (!choices || choices->type != KILN_JNODE_ARRAY || choices->count == 0)
        malformed(s, "response without a non-empty \"choices\" array");
    else n = choice_text_len(&d, kiln_jdoc_at(&d, choices, 0), s->eng->cfg->api == KILN_LOAD_API_OPENAI_CHAT, "message", &present);
    if (!s->malformed && !present) malformed(s, "choices[0] has no %s", s->eng->cfg->api == KILN_LOAD_API_OPENAI_CHAT ? "message.content" : "text");
    if (!s->malformed) {
        s->content_bytes = n;
        take_usage(s, &d, root);
    }
    kiln_jdoc_free(&d);
    return !s->malformed;
}

bool load_openai_finish(load_slot *s) {
    if (!s->eng->cfg->stream) return finish_plain(s);
    if (s->malformed) return false;
    if (!s->done_marker) {
        malformed(s, s->resp_bytes ? "stream ended without \"data: [DONE]\" (%d content chunks)"
                                   : "empty response where an event stream was expected (%d chunks)", s->ntok);
        return false;
    }
    return true;
}
