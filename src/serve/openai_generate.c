/* openai_generate.c — completions and chat completions over kiln_llm.h. Every choice (prompt x n) is
 * one polled kiln_llm request. A plain response is built once every choice has ended; a streamed one
 * (Server-Sent Events, `data: [DONE]` at the end) is a libmicrohttpd content reader that waits in
 * kiln_llm_next on the connection's own thread and sends each batch of tokens as it comes. A client
 * that goes away cancels its requests: the reader sees the closed socket (or libmicrohttpd ends the
 * request) and kiln_llm_release frees their KV blocks. */
#include "serve/openai.h"
#include "serve/openai_params.h"

#include "core/strbuf.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define POLL_MS 20

typedef struct choice {
    uint64_t id;                /* 0: not submitted */
    int index;
    kiln_strbuf text;           /* the completion (plain responses) */
    cJSON *logprobs;            /* chat: {"content": [...]}; completions: {"tokens", ...} (plain responses) */
    size_t text_offset;
    kiln_llm_finish finish;
    char message[256];          /* why it failed */
    kiln_llm_usage usage;
    bool done, started;
    double last_token_us;
} choice;

typedef struct gen {
    serve_server *srv;
    serve_conn *conn;           /* valid until the request completes (stream_free) */
    serve_version *v;
    openai_params params;
    bool chat;
    choice *ch;
    int n_ch;
    char id[48];
    double created;
    char model[SERVE_NAME_MAX];
    char labels[400];
    kiln_strbuf out;            /* SSE bytes not yet handed to libmicrohttpd */
    size_t out_at;
    bool finished;              /* the last choice ended and the closing events are in out */
    double start_us;
    double next_gone_check_us;  /* when to look at the client's socket again (should_stop) */
    kiln_llm *llm;              /* the version's LLM (one per device) its choices run on */
    int llm_index;              /* its index in the version's llms, counted in (serve_version_take_llm) */
    bool llm_taken;
} gen;

static atomic_ullong next_seed = 0x9e3779b97f4a7c15ull, next_id;

static const char *finish_reason(kiln_llm_finish f) {
    return f == KILN_LLM_FINISH_LENGTH ? "length" : "stop";
}

static bool failed(kiln_llm_finish f) {
    return f == KILN_LLM_FINISH_CANCELLED || f == KILN_LLM_FINISH_TIMEOUT || f == KILN_LLM_FINISH_ERROR;
}

/* One token as OpenAI's logprob entries show it: its text, and its UTF-8 bytes. */
static cJSON *token_entry(const kiln_llm *llm, int32_t token, float logprob, bool chat) {
    size_t len = 0;
    const char *bytes = kiln_llm_token_text(llm, token, &len);
    char *text = malloc(len + 1);
    if (text) memcpy(text, bytes ? bytes : "", len), text[len] = 0;
    cJSON *e = cJSON_CreateObject();
    cJSON_AddStringToObject(e, "token", text ? text : "");
    cJSON_AddNumberToObject(e, "logprob", logprob);
    if (chat) {
        cJSON *b = cJSON_AddArrayToObject(e, "bytes");
        for (size_t i = 0; i < len; i++) cJSON_AddItemToArray(b, cJSON_CreateNumber((unsigned char)bytes[i]));
    }
    free(text);
    return e;
}

/* Appends the event's logprobs to lp (created on first use) in the endpoint's shape. */
static void add_logprobs(gen *g, cJSON **lp, size_t *text_offset, const kiln_llm_event *ev) {
    const kiln_llm *llm = g->v->llm;
    if (!g->params.logprobs || ev->token < 0) return;
    if (!*lp) {
        *lp = cJSON_CreateObject();
        if (g->chat) {
            cJSON_AddArrayToObject(*lp, "content");
        } else {
            cJSON_AddArrayToObject(*lp, "tokens");
            cJSON_AddArrayToObject(*lp, "token_logprobs");
            cJSON_AddArrayToObject(*lp, "top_logprobs");
            cJSON_AddArrayToObject(*lp, "text_offset");
        }
    }
    if (g->chat) {
        cJSON *e = token_entry(llm, ev->token, ev->logprob, true);
        cJSON *top = cJSON_AddArrayToObject(e, "top_logprobs");
        for (int i = 0; i < ev->n_top && i < g->params.top_logprobs; i++)
            cJSON_AddItemToArray(top, token_entry(llm, ev->top[i].token, ev->top[i].logprob, true));
        cJSON_AddItemToArray(cJSON_GetObjectItem(*lp, "content"), e);
        return;
    }
    cJSON *e = token_entry(llm, ev->token, ev->logprob, false);
    cJSON_AddItemToArray(cJSON_GetObjectItem(*lp, "tokens"), cJSON_Duplicate(cJSON_GetObjectItem(e, "token"), true));
    cJSON_AddItemToArray(cJSON_GetObjectItem(*lp, "token_logprobs"), cJSON_CreateNumber(ev->logprob));
    cJSON *top = cJSON_CreateObject();
    for (int i = 0; i < ev->n_top && i < g->params.top_logprobs; i++) {
        cJSON *t = token_entry(llm, ev->top[i].token, ev->top[i].logprob, false);
        cJSON_AddNumberToObject(top, cJSON_GetObjectItem(t, "token")->valuestring, ev->top[i].logprob);
        cJSON_Delete(t);
    }
    cJSON_AddItemToArray(cJSON_GetObjectItem(*lp, "top_logprobs"), top);
    cJSON_AddItemToArray(cJSON_GetObjectItem(*lp, "text_offset"), cJSON_CreateNumber((double)*text_offset));
    *text_offset += ev->text_len;
    cJSON_Delete(e);
}

static void record_token_metrics(gen *g, choice *ch, const kiln_llm_event *ev) {
    double now = serve_now_us();
    if (ev->token >= 0 && ch->last_token_us > 0)
        serve_metrics_observe(g->srv->metrics, "kiln_inter_token_latency_seconds", g->labels, (now - ch->last_token_us) / 1e6);
    if (ev->token >= 0) ch->last_token_us = now;
    if (ev->finish == KILN_LLM_FINISH_NONE) return;
    const kiln_llm_usage *u = &ev->usage;
    if (u->ttft_ms > 0) serve_metrics_observe(g->srv->metrics, "kiln_time_to_first_token_seconds", g->labels, u->ttft_ms / 1e3);
    serve_metrics_observe(g->srv->metrics, "kiln_queue_duration_seconds", g->labels, u->queue_ms / 1e3);
    serve_metrics_observe(g->srv->metrics, "kiln_compute_duration_seconds", g->labels,
                          (now - g->start_us) / 1e6 - u->queue_ms / 1e3);
    serve_metrics_observe(g->srv->metrics, "kiln_request_prompt_tokens", g->labels, u->prompt_tokens);
    serve_metrics_observe(g->srv->metrics, "kiln_request_generation_tokens", g->labels, u->completion_tokens);
    serve_metrics_add(g->srv->metrics, "kiln_prompt_tokens_total", g->labels, u->prompt_tokens);
    serve_metrics_add(g->srv->metrics, "kiln_generation_tokens_total", g->labels, u->completion_tokens);
}

/* Records an event of choice ch: usage, finish, metrics. */
static void note_event(gen *g, choice *ch, const kiln_llm_event *ev) {
    ch->usage = ev->usage;
    record_token_metrics(g, ch, ev);
    if (ev->finish == KILN_LLM_FINISH_NONE) return;
    ch->finish = ev->finish;
    ch->done = true;
    if (ev->message) snprintf(ch->message, sizeof ch->message, "%s", ev->message);
}

static void usage_json(gen *g, cJSON *parent) {
    int prompt = 0, completion = 0;
    for (int i = 0; i < g->n_ch; i++) {
        if (i % g->params.n == 0) prompt += g->ch[i].usage.prompt_tokens;
        completion += g->ch[i].usage.completion_tokens;
    }
    cJSON *u = cJSON_AddObjectToObject(parent, "usage");
    cJSON_AddNumberToObject(u, "prompt_tokens", prompt);
    cJSON_AddNumberToObject(u, "completion_tokens", completion);
    cJSON_AddNumberToObject(u, "total_tokens", prompt + completion);
}

static cJSON *envelope(gen *g, bool chunk) {
    cJSON *j = cJSON_CreateObject();
    cJSON_AddStringToObject(j, "id", g->id);
    cJSON_AddStringToObject(j, "object", g->chat ? (chunk ? "chat.completion.chunk" : "chat.completion") : "text_completion");
    cJSON_AddNumberToObject(j, "created", g->created);
    cJSON_AddStringToObject(j, "model", g->model);
    return j;
}

/* 400 when a prompt and max_tokens together exceed the model's context (as vLLM answers). */
static int check_context(gen *g, char *msg, size_t size) {
    kiln_llm_info info;
    const openai_params *p = &g->params;
    if (!p->req.max_tokens || kiln_llm_get_info(g->v->llm, &info)) return 200;
    for (int i = 0; i < p->n_prompts; i++) {
        size_t n = (size_t)p->prompts[i].n_ids;
        int32_t *ids = NULL;
        if (p->prompts[i].text && kiln_llm_tokenize(g->v->llm, p->prompts[i].text, strlen(p->prompts[i].text),
                                                    p->req.add_special, &ids, &n))
            return 200; /* kiln_llm_submit reports it */
        free(ids);
        if ((int64_t)n + p->req.max_tokens > info.max_context) {
            snprintf(msg, size, "this model's maximum context length is %d tokens; the prompt has %zu and max_tokens "
                     "asks for %d more", info.max_context, n, p->req.max_tokens);
            return 400;
        }
    }
    return 200;
}

/* Submits every choice; on failure cancels those submitted and returns the status with msg. */
static int submit_all(gen *g, char *msg, size_t size) {
    openai_params *p = &g->params;
    int status = check_context(g, msg, size);
    if (status != 200) return status;
    g->llm_index = serve_version_take_llm(g->v, g->n_ch);
    g->llm_taken = true;
    g->llm = g->v->llms[g->llm_index];
    for (int i = 0; i < g->n_ch; i++) {
        const openai_prompt *op = &p->prompts[i / p->n];
        kiln_llm_request r = p->req;
        r.prompt = op->text;
        r.prompt_ids = op->ids;
        r.n_prompt_ids = op->n_ids;
        r.sampling.seed = p->seed_given ? p->req.sampling.seed + (uint64_t)(i % p->n) : atomic_fetch_add(&next_seed, 0x9e3779b97f4a7c15ull);
        g->ch[i].index = i;
        kiln_status st = kiln_llm_submit(g->llm, &r, &g->ch[i].id);
        if (st) {
            g->ch[i].id = 0;
            snprintf(msg, size, "%s", kiln_last_error());
            return st == KILN_ERR_BUSY ? 429 : st == KILN_ERR_INVALID_ARGUMENT ? 400 : 500;
        }
    }
    return 200;
}

static void release_all(gen *g) {
    for (int i = 0; i < g->n_ch; i++)
        if (g->ch[i].id) kiln_llm_release(g->llm, g->ch[i].id), g->ch[i].id = 0;
}

static void gen_free(gen *g) {
    release_all(g);
    if (g->llm_taken) serve_version_llm_done(g->v, g->llm_index, g->n_ch);
    int tokens = 0;
    for (int i = 0; i < g->n_ch; i++) {
        tokens += g->ch[i].usage.completion_tokens + (i % g->params.n == 0 ? g->ch[i].usage.prompt_tokens : 0);
        kiln_strbuf_free(&g->ch[i].text);
        cJSON_Delete(g->ch[i].logprobs);
    }
    if (g->conn) serve_auth_charge_tokens(&g->srv->auth, g->conn->key, tokens);
    serve_repo_release(g->srv->repo, g->v);
    openai_params_free(&g->params);
    kiln_strbuf_free(&g->out);
    free(g->ch);
    free(g);
}

/* Whether generation should stop: the client closed its side of the connection (a close or a
 * half-close look the same to the server before it writes) or the server stops. The socket is
 * looked at every POLL_MS at most, whether tokens flow or not, so that a client gone in the middle of
 * a long generation frees its KV blocks within POLL_MS. */
static bool should_stop(gen *g) {
    double now = serve_now_us();
    if (now < g->next_gone_check_us) return false;
    g->next_gone_check_us = now + POLL_MS * 1e3;
    return serve_client_gone(g->conn) || g->srv->stopping;
}

/* ---------------------------------------------------------------- plain responses */

static enum MHD_Result reply_plain(gen *g) {
    serve_conn *c = g->conn;
    int done = 0;
    while (done < g->n_ch) {
        bool any = false;
        for (int i = 0; i < g->n_ch; i++) {
            choice *ch = &g->ch[i];
            kiln_llm_event ev;
            if (ch->done || kiln_llm_next(g->llm, ch->id, any ? 0 : POLL_MS, &ev)) continue;
            any = true;
            kiln_strbuf_append(&ch->text, ev.text, ev.text_len);
            add_logprobs(g, &ch->logprobs, &ch->text_offset, &ev);
            note_event(g, ch, &ev);
            done += ch->done;
        }
        if (should_stop(g)) {
            c->status = 499;
            return MHD_NO; /* gen_free releases (cancels) the requests */
        }
    }
    for (int i = 0; i < g->n_ch; i++) {
        choice *ch = &g->ch[i];
        if (!failed(ch->finish)) continue;
        int status = ch->finish == KILN_LLM_FINISH_ERROR ? 500 : 503;
        return serve_openai_error(c, status, status == 500 ? "server_error" : "unavailable_error", NULL, "choice %d: %s%s%s",
                                  i, kiln_llm_finish_name(ch->finish), ch->message[0] ? ": " : "", ch->message);
    }
    cJSON *j = envelope(g, false), *choices = cJSON_AddArrayToObject(j, "choices");
    for (int i = 0; i < g->n_ch; i++) {
        choice *ch = &g->ch[i];
        cJSON *e = cJSON_CreateObject();
        cJSON_AddNumberToObject(e, "index", i);
        const char *text = ch->text.data ? ch->text.data : "";
        if (g->chat) {
            cJSON *m = cJSON_AddObjectToObject(e, "message");
            cJSON_AddStringToObject(m, "role", "assistant");
            cJSON_AddStringToObject(m, "content", text);
        } else {
            cJSON_AddStringToObject(e, "text", text);
        }
        if (ch->logprobs) cJSON_AddItemToObject(e, "logprobs", ch->logprobs), ch->logprobs = NULL;
        else cJSON_AddNullToObject(e, "logprobs");
        cJSON_AddStringToObject(e, "finish_reason", finish_reason(ch->finish));
        cJSON_AddItemToArray(choices, e);
    }
    usage_json(g, j);
    return serve_reply_json(c, 200, j);
}

/* ---------------------------------------------------------------- streamed responses */

static void sse(gen *g, cJSON *j) {
    char *text = cJSON_PrintUnformatted(j);
    cJSON_Delete(j);
    kiln_strbuf_puts(&g->out, "data: ");
    kiln_strbuf_puts(&g->out, text ? text : "{}");
    kiln_strbuf_puts(&g->out, "\n\n");
    cJSON_free(text);
}

/* The chunk of one event of choice ch. */
static void stream_event(gen *g, choice *ch, const kiln_llm_event *ev) {
    cJSON *lp = NULL; /* this event's logprobs only: each chunk carries its own */
    add_logprobs(g, &lp, &ch->text_offset, ev);
    note_event(g, ch, ev);
    if (failed(ch->finish)) {
        cJSON *j = cJSON_CreateObject(), *e = cJSON_AddObjectToObject(j, "error");
        char msg[400];
        snprintf(msg, sizeof msg, "choice %d: %s%s%s", ch->index, kiln_llm_finish_name(ch->finish),
                 ch->message[0] ? ": " : "", ch->message);
        cJSON_AddStringToObject(e, "message", msg);
        cJSON_AddStringToObject(e, "type", ch->finish == KILN_LLM_FINISH_ERROR ? "server_error" : "unavailable_error");
        cJSON_AddNullToObject(e, "param");
        cJSON_AddNumberToObject(e, "code", ch->finish == KILN_LLM_FINISH_ERROR ? 500 : 503);
        sse(g, j);
        cJSON_Delete(lp);
        return;
    }
    if (!ev->text_len && !lp && !ch->done && ch->started) return;
    cJSON *j = envelope(g, true), *choices = cJSON_AddArrayToObject(j, "choices"), *e = cJSON_CreateObject();
    cJSON_AddNumberToObject(e, "index", ch->index);
    if (g->chat) {
        cJSON *d = cJSON_AddObjectToObject(e, "delta");
        if (!ch->started) cJSON_AddStringToObject(d, "role", "assistant");
        if (ev->text_len || !ch->started) cJSON_AddStringToObject(d, "content", ev->text ? ev->text : "");
    } else {
        cJSON_AddStringToObject(e, "text", ev->text ? ev->text : "");
    }
    ch->started = true;
    if (lp) cJSON_AddItemToObject(e, "logprobs", lp);
    else cJSON_AddNullToObject(e, "logprobs");
    if (ch->done) cJSON_AddStringToObject(e, "finish_reason", finish_reason(ch->finish));
    else cJSON_AddNullToObject(e, "finish_reason");
    cJSON_AddItemToArray(choices, e);
    if (g->params.include_usage) cJSON_AddNullToObject(j, "usage");
    sse(g, j);
}

/* Waits for the next events and turns them into SSE bytes in g->out; false when the client is gone
 * or the server stops. */
static bool stream_poll(gen *g) {
    int open = 0;
    bool any = false;
    for (int i = 0; i < g->n_ch; i++) {
        choice *ch = &g->ch[i];
        kiln_llm_event ev;
        if (ch->done) continue;
        open++;
        if (kiln_llm_next(g->llm, ch->id, any ? 0 : POLL_MS, &ev)) continue;
        any = true;
        stream_event(g, ch, &ev);
        open -= ch->done;
    }
    if (!open) {
        if (g->params.include_usage) {
            cJSON *j = envelope(g, true);
            cJSON_AddArrayToObject(j, "choices");
            usage_json(g, j);
            sse(g, j);
        }
        kiln_strbuf_puts(&g->out, "data: [DONE]\n\n");
        g->finished = true;
        g->conn->status = 200;
        return true;
    }
    return !should_stop(g);
}

static ssize_t stream_read(void *cls, uint64_t pos, char *buf, size_t max) {
    gen *g = cls;
    while (g->out_at == g->out.len) {
        g->out_at = 0;
        kiln_strbuf_clear(&g->out);
        if (g->finished) return MHD_CONTENT_READER_END_OF_STREAM;
        if (!stream_poll(g)) {
            g->conn->status = 499;
            return MHD_CONTENT_READER_END_WITH_ERROR;
        }
    }
    size_t n = g->out.len - g->out_at < max ? g->out.len - g->out_at : max;
    memcpy(buf, g->out.data + g->out_at, n);
    g->out_at += n;
    g->conn->bytes_out += n;
    return (ssize_t)n;
}

static void stream_free(void *stream, bool completed) {
    gen_free(stream);
}

static enum MHD_Result reply_stream(gen *g) {
    serve_conn *c = g->conn;
    struct MHD_Response *r = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16384, stream_read, g, NULL);
    if (!r) return MHD_NO;
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, "text/event-stream");
    MHD_add_response_header(r, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
    c->stream = g;
    c->stream_free = stream_free;
    c->status = 200;
    enum MHD_Result ok = MHD_queue_response(c->mhd, 200, r);
    MHD_destroy_response(r);
    return ok;
}

enum MHD_Result serve_openai_generate(serve_conn *c, serve_version *v, bool chat, const cJSON *root) {
    gen *g = calloc(1, sizeof *g);
    if (!g) {
        serve_repo_release(c->srv->repo, v);
        return serve_openai_error(c, 500, "server_error", NULL, "out of memory");
    }
    g->srv = c->srv;
    g->conn = c;
    g->v = v;
    g->chat = chat;
    g->start_us = serve_now_us();
    g->created = (double)time(NULL);
    snprintf(g->model, sizeof g->model, "%s", c->model);
    char number[32];
    snprintf(number, sizeof number, "%lld", (long long)v->number);
    serve_metrics_labels(g->labels, sizeof g->labels, c->model, number);
    snprintf(g->id, sizeof g->id, "%s-%llx%llx", chat ? "chatcmpl" : "cmpl", (unsigned long long)time(NULL),
             (unsigned long long)atomic_fetch_add(&next_id, 1));
    const char *param;
    char msg[768];
    int status = openai_params_parse(root, chat, v->llm, &g->params, &param, msg, sizeof msg);
    if (!status) {
        g->n_ch = g->params.n_prompts * g->params.n;
        g->ch = calloc((size_t)g->n_ch, sizeof *g->ch);
        status = g->ch ? submit_all(g, msg, sizeof msg) : 500;
        if (!g->ch) snprintf(msg, sizeof msg, "out of memory");
        param = strstr(msg, "max_tokens") ? "max_tokens" : NULL;
    }
    if (status != 200) {
        if (status == 429) serve_add_header(c, MHD_HTTP_HEADER_RETRY_AFTER, "1");
        enum MHD_Result ok = serve_openai_error(c, status, status == 429 ? "rate_limit_error" : status == 400 ? "invalid_request_error" : "server_error",
                                                param, "%s", msg);
        gen_free(g);
        return ok;
    }
    if (g->params.stream) return reply_stream(g);
    enum MHD_Result ok = reply_plain(g);
    gen_free(g);
    return ok;
}
