/* openai_embeddings.c — POST /v1/embeddings for encoder tensor models: a model whose inputs are
 * input_ids [batch, seq] (int32 or int64) and optionally attention_mask and token_type_ids (filled
 * with ones over the tokens and zeros), and whose first float output is [batch, seq, hidden] (mean
 * pooled over the attention mask) or [batch, hidden] (used as is). Inputs are token ids, or text
 * when the version directory holds a tokenizer.json that kiln loads. Consecutive inputs of one
 * length run together as rows of one batch (up to the model's max_batch) through its batcher; a
 * static sequence length is reached by padding with id 0 under a zero mask (which needs an
 * attention_mask input). */
#include "serve/openai.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define EMBED_MAX_INPUTS 2048 /* OpenAI's own limit on inputs per request */

/* Where the encoder's tensors are among the engine's inputs and outputs. */
typedef struct encoder_shape {
    int ids, mask, types; /* input indices, -1 when absent (ids never is) */
    int output;           /* the float output's index */
    bool pooled;          /* output [batch, hidden] rather than [batch, seq, hidden] */
    int64_t seq;          /* input_ids' static sequence length, or -1 */
    bool batch_dynamic;   /* every input's batch dimension is dynamic (else it is 1) */
} encoder_shape;

typedef struct token_list {
    int32_t *ids;
    size_t n;
} token_list;

/* Fills s when engine e looks like an encoder, else 0 is returned and why says what does not fit. */
static bool find_encoder(const kiln_engine *e, encoder_shape *s, char *why, size_t size) {
    *s = (encoder_shape){.ids = -1, .mask = -1, .types = -1, .output = -1, .seq = -1, .batch_dynamic = true};
    kiln_tensor_desc d;
    for (int i = 0; i < kiln_engine_num_inputs(e); i++) {
        if (kiln_engine_input(e, i, &d)) return snprintf(why, size, "input %d has no description", i), false;
        int *slot = !strcmp(d.name, "input_ids") ? &s->ids
                    : !strcmp(d.name, "attention_mask") ? &s->mask
                    : !strcmp(d.name, "token_type_ids") ? &s->types
                                                        : NULL;
        if (!slot)
            return snprintf(why, size, "input '%s' is none of input_ids, attention_mask, token_type_ids", d.name), false;
        if ((d.dtype != KILN_I64 && d.dtype != KILN_I32) || d.ndim != 2 || (d.dims[0] >= 0 && d.dims[0] != 1))
            return snprintf(why, size, "input '%s' is not an int32 or int64 [batch, seq] tensor", d.name), false;
        *slot = i;
        if (d.dims[0] >= 0) s->batch_dynamic = false;
        if (slot == &s->ids) s->seq = d.dims[1];
    }
    if (s->ids < 0) return snprintf(why, size, "it has no input_ids input"), false;
    for (int i = 0; i < kiln_engine_num_outputs(e) && s->output < 0; i++)
        if (!kiln_engine_output(e, i, &d) && d.dtype == KILN_F32 && (d.ndim == 2 || d.ndim == 3)) {
            s->output = i;
            s->pooled = d.ndim == 2;
        }
    if (s->output < 0) return snprintf(why, size, "it has no float32 [batch, seq, hidden] or [batch, hidden] output"), false;
    return true;
}

static void free_lists(token_list *lists, int n) {
    for (int i = 0; i < n; i++) free(lists[i].ids);
    free(lists);
}

/* One token list from a JSON array of integer ids (0 on success, else a message). */
static int parse_ids(const cJSON *a, token_list *t, int index, char *msg, size_t size) {
    int n = cJSON_GetArraySize(a);
    if (!n) return snprintf(msg, size, "input %d is an empty list of token ids", index), 400;
    t->ids = malloc((size_t)n * sizeof *t->ids);
    if (!t->ids) return snprintf(msg, size, "out of memory for input %d", index), 500;
    const cJSON *x;
    cJSON_ArrayForEach(x, a) {
        if (!cJSON_IsNumber(x) || x->valuedouble < 0 || x->valuedouble > INT32_MAX || x->valuedouble != (int32_t)x->valuedouble)
            return snprintf(msg, size, "input %d: token ids must be integers in 0..%d", index, INT32_MAX), 400;
        t->ids[t->n++] = (int32_t)x->valuedouble;
    }
    return 0;
}

static int tokenize(const kiln_tokenizer *tok, const char *text, token_list *t, int index, char *msg, size_t size) {
    if (!*text) return snprintf(msg, size, "input %d is an empty string", index), 400;
    if (kiln_tokenizer_encode(tok, text, strlen(text), true, &t->ids, &t->n))
        return snprintf(msg, size, "input %d: %s", index, kiln_last_error()), 500;
    if (!t->n) return snprintf(msg, size, "input %d encodes to no tokens", index), 400;
    return 0;
}

/* 'input' (string | [string] | [int] | [[int]]) into *lists[*count]: 0, or an HTTP status and msg. */
static int parse_input(const cJSON *input, const kiln_tokenizer *tok, const char *model, token_list **lists, int *count,
                       char *msg, size_t size) {
    *lists = NULL, *count = 0;
    int n = cJSON_IsString(input) ? 1 : cJSON_IsArray(input) ? cJSON_GetArraySize(input) : 0;
    const cJSON *first = cJSON_IsArray(input) ? cJSON_GetArrayItem(input, 0) : input;
    bool one_id_list = cJSON_IsArray(input) && cJSON_IsNumber(first);
    if (one_id_list) n = 1;
    if (!n || n > EMBED_MAX_INPUTS || !(cJSON_IsString(first) || cJSON_IsNumber(first) || cJSON_IsArray(first)))
        return snprintf(msg, size, "'input' must be a string, a list of 1..%d strings, a list of token ids or a list of "
                                   "lists of token ids", EMBED_MAX_INPUTS), 400;
    if (cJSON_IsString(first) && !tok)
        return snprintf(msg, size, "model '%s' has no tokenizer.json that kiln loads: it takes token ids only "
                                   "('input' as [int] or [[int]])", model), 400;
    *lists = calloc((size_t)n, sizeof **lists);
    if (!*lists) return snprintf(msg, size, "out of memory for %d inputs", n), 500;
    *count = n;
    if (one_id_list) return parse_ids(input, &(*lists)[0], 0, msg, size);
    if (cJSON_IsString(input)) return tokenize(tok, input->valuestring, &(*lists)[0], 0, msg, size);
    int i = 0, status = 0;
    const cJSON *x;
    cJSON_ArrayForEach(x, input) {
        if (cJSON_IsString(first) && cJSON_IsString(x)) status = tokenize(tok, x->valuestring, &(*lists)[i], i, msg, size);
        else if (cJSON_IsArray(first) && cJSON_IsArray(x)) status = parse_ids(x, &(*lists)[i], i, msg, size);
        else status = 400, snprintf(msg, size, "input %d: the inputs of one request must all be strings or all lists of token ids", i);
        if (status) return status;
        i++;
    }
    return 0;
}

/* A [rows, len] tensor named like engine input `index`, of its dtype, for the token lists t[0..rows):
 * the ids (padded with 0), the mask (1 over the tokens, 0 over the padding) or zeros. */
static int fill_input(const kiln_engine *e, int index, const encoder_shape *s, const token_list *t, int rows, int64_t len,
                      serve_tensor *out) {
    kiln_tensor_desc d;
    kiln_engine_input(e, index, &d);
    snprintf(out->name, sizeof out->name, "%s", d.name);
    out->dtype = d.dtype, out->ndim = 2, out->dims[0] = rows, out->dims[1] = len;
    size_t elem = d.dtype == KILN_I64 ? 8 : 4;
    out->bytes = (size_t)(rows * len) * elem;
    out->data = calloc((size_t)(rows * len), elem);
    if (!out->data) return 500;
    for (int r = 0; r < rows; r++)
        for (int64_t k = 0; k < (int64_t)t[r].n; k++) {
            int64_t v = index == s->ids ? t[r].ids[k] : index == s->mask ? 1 : 0;
            if (elem == 8) ((int64_t *)out->data)[r * len + k] = v;
            else ((int32_t *)out->data)[r * len + k] = (int32_t)v;
        }
    return 0;
}

/* The sequence length that token list t runs at. */
static int64_t run_length(const encoder_shape *s, const token_list *t) {
    return s->seq >= 0 ? s->seq : (int64_t)t->n;
}

/* How many of the token lists t[0..n) from the first on run together: those of the same run length,
 * up to max_rows. */
static int group_size(const encoder_shape *s, const token_list *t, int n, int max_rows) {
    int rows = 1;
    while (rows < n && rows < max_rows && run_length(s, &t[rows]) == run_length(s, &t[0])) rows++;
    return rows;
}

/* Pools output o of a run of `rows` token lists t into vec[0..rows), each malloc'ed, *hidden long. */
static int pool_rows(const encoder_shape *s, const serve_tensor *o, const token_list *t, int rows, int64_t len,
                     float **vec, int64_t *hidden, char *msg, size_t size) {
    if (o->dtype != KILN_F32 || o->ndim != (s->pooled ? 2 : 3) || o->dims[0] != rows || (!s->pooled && o->dims[1] != len))
        return snprintf(msg, size, "the model's output '%s' has a shape that does not follow its [%d, %lld] input", o->name,
                        rows, (long long)len), 500;
    int64_t h = o->dims[o->ndim - 1];
    *hidden = h;
    for (int r = 0; r < rows; r++) {
        const float *x = (const float *)o->data + r * (s->pooled ? 1 : len) * h;
        int64_t tokens = s->pooled ? 1 : (int64_t)t[r].n;
        if (!(vec[r] = malloc((size_t)(h > 0 ? h : 1) * sizeof **vec))) return snprintf(msg, size, "out of memory"), 500;
        for (int64_t j = 0; j < h; j++) {
            double sum = 0;
            for (int64_t k = 0; k < tokens; k++) sum += x[k * h + j];
            vec[r][j] = (float)(sum / (double)tokens);
        }
    }
    return 0;
}

/* What the runs of one request share: the connection (for metrics), the held version, its encoder
 * shape, and where a failure's message goes. */
typedef struct embed_request {
    serve_conn *c;
    const serve_version *v;
    const encoder_shape *s;
    char *msg;
    size_t msg_size;
} embed_request;


/* Runs the token lists t[0..rows) (of one run length; request inputs first..) as one batch through
 * the pool and leaves their embeddings in vec[0..rows) (malloc'ed), *hidden long. */
static int embed_rows(const embed_request *q, const token_list *t, int rows, int first, float **vec, int64_t *hidden) {
    const encoder_shape *s = q->s;
    char *msg = q->msg;
    size_t size = q->msg_size;
    int64_t len = run_length(s, &t[0]);
    for (int r = 0; r < rows; r++) {
        if ((int64_t)t[r].n > len)
            return snprintf(msg, size, "input %d has %zu tokens, the model takes at most %lld", first + r, t[r].n,
                            (long long)len), 400;
        if ((int64_t)t[r].n < len && s->mask < 0)
            return snprintf(msg, size, "input %d has %zu tokens, the model takes exactly %lld (it has no attention_mask to "
                                       "pad with)", first + r, t[r].n, (long long)len), 400;
    }
    serve_tensor ins[3] = {0};
    int n_in = kiln_engine_num_inputs(q->v->engine), status = 0;
    for (int i = 0; i < n_in && !status; i++) status = fill_input(q->v->engine, i, s, t, rows, len, &ins[i]);
    serve_infer r = {.inputs = ins, .n_inputs = n_in, .client_gone = serve_client_gone_arg, .client_arg = q->c};
    if (status) snprintf(msg, size, "out of memory for input %d", first);
    else if ((status = serve_pool_check(q->v->pool, &r))) snprintf(msg, size, "input %d: %s", first, r.message);
    else {
        serve_pool_infer(q->v->pool, &r);
        status = r.http_status == 200 ? 0 : r.http_status;
        if (status && rows > 1) snprintf(msg, size, "inputs %d..%d: %s", first, first + rows - 1, r.message);
        else if (status) snprintf(msg, size, "input %d: %s", first, r.message);
        else
            serve_metrics_record_run(q->c->srv->metrics, q->c->model, q->c->version, r.queue_us / 1e6,
                                     r.compute_us / 1e6, r.first_of_run ? r.batch_rows : 0);
    }
    if (!status) status = pool_rows(s, &r.outputs[s->output], t, rows, len, vec, hidden, msg, size);
    serve_infer_clear(&r);
    for (int i = 0; i < n_in; i++) serve_tensor_clear(&ins[i]);
    return status;
}

/* n bytes as standard base64 (malloc'ed, NUL-terminated), or NULL when out of memory. */
static char *base64(const unsigned char *p, size_t n) {
    static const char digits[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    char *out = malloc((n + 2) / 3 * 4 + 1), *w = out;
    if (!out) return NULL;
    for (size_t i = 0; i < n; i += 3) {
        uint32_t v = (uint32_t)p[i] << 16 | (i + 1 < n ? (uint32_t)p[i + 1] << 8 : 0) | (i + 2 < n ? p[i + 2] : 0);
        *w++ = digits[v >> 18 & 63];
        *w++ = digits[v >> 12 & 63];
        *w++ = i + 1 < n ? digits[v >> 6 & 63] : '=';
        *w++ = i + 2 < n ? digits[v & 63] : '=';
    }
    *w = 0;
    return out;
}

/* The embedding as OpenAI gives it: a list of numbers, or base64 of little-endian float32 bytes. */
static cJSON *embedding_json(const float *vec, int64_t hidden, bool as_base64) {
    if (as_base64) {
        char *text = base64((const unsigned char *)vec, (size_t)hidden * sizeof *vec);
        cJSON *j = text ? cJSON_CreateString(text) : NULL;
        free(text);
        return j;
    }
    cJSON *a = cJSON_CreateArray();
    for (int64_t j = 0; a && j < hidden; j++) cJSON_AddItemToArray(a, cJSON_CreateNumber(vec[j]));
    return a;
}

static enum MHD_Result reply_embeddings(serve_conn *c, const char *model, float **vecs, int n, int64_t hidden,
                                        bool as_base64, size_t tokens) {
    cJSON *j = cJSON_CreateObject();
    cJSON_AddStringToObject(j, "object", "list");
    cJSON *data = cJSON_AddArrayToObject(j, "data");
    for (int i = 0; i < n; i++) {
        cJSON *e = cJSON_CreateObject();
        cJSON_AddStringToObject(e, "object", "embedding");
        cJSON_AddNumberToObject(e, "index", i);
        cJSON_AddItemToObject(e, "embedding", embedding_json(vecs[i], hidden, as_base64));
        cJSON_AddItemToArray(data, e);
    }
    cJSON_AddStringToObject(j, "model", model);
    cJSON *usage = cJSON_AddObjectToObject(j, "usage");
    cJSON_AddNumberToObject(usage, "prompt_tokens", (double)tokens);
    cJSON_AddNumberToObject(usage, "total_tokens", (double)tokens);
    return serve_reply_json(c, 200, j);
}

/* Checks the request's options: encoding_format into *as_base64, dimensions into *dimensions (0: not
 * given). 0, or 400 with msg and *param naming the field. */
static int parse_options(const cJSON *root, bool *as_base64, int64_t *dimensions, const char **param, char *msg, size_t size) {
    const cJSON *format = cJSON_GetObjectItemCaseSensitive(root, "encoding_format");
    const cJSON *dims = cJSON_GetObjectItemCaseSensitive(root, "dimensions");
    *as_base64 = cJSON_IsString(format) && !strcmp(format->valuestring, "base64");
    *dimensions = 0;
    if (format && !cJSON_IsNull(format) && !*as_base64 && !(cJSON_IsString(format) && !strcmp(format->valuestring, "float"))) {
        *param = "encoding_format";
        return snprintf(msg, size, "'encoding_format' must be \"float\" or \"base64\""), 400;
    }
    if (dims && !cJSON_IsNull(dims)) {
        if (!cJSON_IsNumber(dims) || dims->valuedouble < 1 || dims->valuedouble != (double)(int64_t)dims->valuedouble) {
            *param = "dimensions";
            return snprintf(msg, size, "'dimensions' must be a positive integer"), 400;
        }
        *dimensions = (int64_t)dims->valuedouble;
    }
    return 0;
}

/* OpenAI's error type for an HTTP status of this endpoint. */
static const char *error_type(int status) {
    return status == 400 ? "invalid_request_error" : status == 429 ? "rate_limit_error" : status == 503 ? "unavailable_error"
                                                                                                        : "server_error";
}

enum MHD_Result serve_openai_embeddings(serve_conn *c, serve_version *v, const char *model, const cJSON *root) {
    char msg[768], why[256];
    const char *param = NULL;
    encoder_shape s;
    token_list *lists = NULL;
    int n = 0, status = 0;
    bool as_base64 = false;
    int64_t dimensions = 0, hidden = 0;
    float **vecs = NULL;
    size_t tokens = 0;
    if (!find_encoder(v->engine, &s, why, sizeof why)) {
        status = 400, param = "model";
        snprintf(msg, sizeof msg, "model '%s' is not an encoder (%s): /v1/embeddings needs input_ids [batch, seq] and a "
                                  "float [batch, seq, hidden] or [batch, hidden] output", model, why);
    }
    if (!status) status = parse_options(root, &as_base64, &dimensions, &param, msg, sizeof msg);
    if (!status && (status = parse_input(cJSON_GetObjectItemCaseSensitive(root, "input"), v->tokenizer, model, &lists,
                                         &n, msg, sizeof msg)))
        param = "input";
    if (!status && !(vecs = calloc((size_t)n, sizeof *vecs))) status = 500, snprintf(msg, sizeof msg, "out of memory");
    const embed_request q = {.c = c, .v = v, .s = &s, .msg = msg, .msg_size = sizeof msg};
    int max_rows = s.batch_dynamic && serve_pool_config(v->pool)->max_batch > 1 ? serve_pool_config(v->pool)->max_batch : 1;
    for (int i = 0, rows; i < n && !status; i += rows) {
        int64_t h = 0;
        rows = group_size(&s, &lists[i], n - i, max_rows);
        status = embed_rows(&q, &lists[i], rows, i, &vecs[i], &h);
        if (!status && i && h != hidden) status = 500, snprintf(msg, sizeof msg, "the model's embeddings differ in size");
        hidden = h;
        for (int k = 0; k < rows; k++) tokens += lists[i + k].n;
    }
    if (!status && dimensions && dimensions != hidden) {
        status = 400, param = "dimensions";
        snprintf(msg, sizeof msg, "model '%s' gives %lld dimensions and does not shorten them: 'dimensions' must be %lld or left out",
                 model, (long long)hidden, (long long)hidden);
    }
    if (status == 429) serve_add_header(c, MHD_HTTP_HEADER_RETRY_AFTER, "1");
    if (status == 499) c->status = 499; /* the client left while its rows waited in the queue: no answer */
    enum MHD_Result ok = status == 499 ? MHD_NO : status ? serve_openai_error(c, status, error_type(status), param, "%s", msg)
                                : reply_embeddings(c, model, vecs, n, hidden, as_base64, tokens);
    for (int i = 0; vecs && i < n; i++) free(vecs[i]);
    free(vecs);
    free_lists(lists, n);
    serve_repo_release(c->srv->repo, v);
    return ok;
}
