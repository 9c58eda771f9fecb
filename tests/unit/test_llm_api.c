/* test_llm_api.c — the public LLM API (kiln/kiln_llm.h) on the bundled 14M GPT-2 (models/kjv-gpt2),
 * on the CPU: greedy output equal to what `kiln generate` printed before it moved onto this API;
 * submissions from 8 threads at once, by callback and by polling, with their usage; a cancel from
 * another thread that frees the request's KV blocks; stop strings cut across token boundaries and
 * held back while they could still match; admission control (max_waiting and max_waiting_tokens ->
 * KILN_ERR_BUSY while the running request goes on, a request that can never fit ->
 * KILN_ERR_INVALID_ARGUMENT naming the limit, queue_timeout_ms -> FINISH_TIMEOUT); drain; close with
 * requests in flight (leaks show under the sanitizer build); logprobs; bad input; chat templates from
 * the options and from tokenizer_config.json; a tokenizer smaller than the model's vocabulary (the
 * ids it does not name add no text); the same outputs with speculative decoding (prompt lookup). */
#include "kiln/kiln_llm.h"

#include "check.h"

#include <pthread.h>
#include <stdint.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const char *model_dir;

/* `kiln generate DIR --prompt P --temperature 0 --max-tokens 24 --print-ids` before the move. */
typedef struct reference {
    const char *prompt;
    int32_t ids[24];
    const char *text;
} reference;
static const reference REFS[] = {
    {"In the beginning",
     {269, 259, 1140, 12, 298, 259, 574, 269, 259, 343, 475, 323, 370, 12, 547, 12, 1190, 269, 403, 12, 743, 371, 956, 516},
     " of the month, that the word of the LORD came unto me, saying, Son of man, set thy face against"},
    {"And God said",
     {323, 334, 12, 828, 12, 297, 397, 884, 398, 260, 2669, 268, 260, 2669, 12, 268, 260, 2669, 12, 268, 260, 2669, 12, 268},
     " unto him, Behold, I have given thee a blessing and a blessing, and a blessing, and a blessing, and"},
    {"The LORD is my shepherd",
     {26, 310, 458, 546, 370, 378, 879, 269, 259, 1448, 269, 259, 2140, 14, 459, 343, 458, 392, 12, 297, 396, 345, 410, 363},
     ": he hath made me an end of the sheep of the goats. The LORD hath said, I will not go up"},
    {"Jesus wept. And",
     {438, 310, 375, 491, 290, 705, 12, 310, 392, 323, 339, 12, 1784, 462, 400, 533, 589, 586, 31, 299, 336, 392, 323, 334},
     " when he was come to Jerusalem, he said unto them, Why do ye so great things? And they said unto him"},
};
#define N_REFS ((int)(sizeof REFS / sizeof *REFS))

/* What a callback request saw. */
typedef struct collect {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int32_t tokens[300];
    int n_tokens, n_events, n_final;
    char text[1024];
    size_t len;
    kiln_llm_finish finish;
    kiln_llm_usage usage;
    bool first_token;
} collect;

static void collect_init(collect *c) {
    memset(c, 0, sizeof *c);
    pthread_mutex_init(&c->mu, NULL);
    pthread_cond_init(&c->cv, NULL);
}

static void collect_free(collect *c) {
    pthread_mutex_destroy(&c->mu);
    pthread_cond_destroy(&c->cv);
}

static void on_event(const kiln_llm_event *ev) {
    collect *c = ev->user;
    pthread_mutex_lock(&c->mu);
    c->n_events++;
    if (ev->token >= 0 && c->n_tokens < 300) c->tokens[c->n_tokens++] = ev->token;
    if (ev->token >= 0) c->first_token = true;
    if (c->len + ev->text_len < sizeof c->text) {
        memcpy(c->text + c->len, ev->text, ev->text_len);
        c->len += ev->text_len;
        c->text[c->len] = 0;
    }
    if (ev->finish != KILN_LLM_FINISH_NONE) {
        c->n_final++;
        c->finish = ev->finish;
        c->usage = ev->usage;
    }
    pthread_cond_broadcast(&c->cv);
    pthread_mutex_unlock(&c->mu);
}

static void wait_final(collect *c) {
    pthread_mutex_lock(&c->mu);
    while (!c->n_final) pthread_cond_wait(&c->cv, &c->mu);
    pthread_mutex_unlock(&c->mu);
}

static void wait_first_token(collect *c) {
    pthread_mutex_lock(&c->mu);
    while (!c->first_token && !c->n_final) pthread_cond_wait(&c->cv, &c->mu);
    pthread_mutex_unlock(&c->mu);
}

static kiln_llm_request text_request(const char *prompt, int max_tokens, collect *c) {
    kiln_llm_request q = kiln_llm_request_defaults();
    q.prompt = prompt;
    q.max_tokens = max_tokens;
    q.user = c;
    q.on_event = c ? on_event : NULL;
    return q;
}

/* Runs one callback request to its end. */
static kiln_status run(kiln_llm *llm, const kiln_llm_request *q, collect *c) {
    uint64_t id;
    kiln_status st = kiln_llm_submit(llm, q, &id);
    if (st == KILN_OK) wait_final(c);
    return st;
}

static kiln_llm *open_model(const kiln_llm_options *o) {
    kiln_llm *llm = NULL;
    REQUIRE_OK(kiln_llm_open(model_dir, o, &llm));
    return llm;
}

static void test_greedy_matches_generate(kiln_llm *llm) {
    for (int i = 0; i < N_REFS; i++) {
        collect c;
        collect_init(&c);
        kiln_llm_request q = text_request(REFS[i].prompt, 24, &c);
        CHECK_OK(run(llm, &q, &c));
        CHECKF(c.n_tokens == 24 && !memcmp(c.tokens, REFS[i].ids, sizeof REFS[i].ids), "prompt '%s'", REFS[i].prompt);
        CHECKF(!strcmp(c.text, REFS[i].text), "'%s' gave '%s'", REFS[i].prompt, c.text);
        CHECK(c.finish == KILN_LLM_FINISH_LENGTH && c.n_final == 1 && c.usage.completion_tokens == 24);
        CHECK(c.usage.prompt_tokens >= 3 && c.usage.ttft_ms > 0 && c.usage.queue_ms >= 0);
        collect_free(&c);
    }
}

/* Stop strings: one spanning three tokens cuts the text before it; one that starts matching but never
 * completes is held back and then sent. */
static void test_stop_strings(kiln_llm *llm) {
    collect c;
    collect_init(&c);
    const char *stops[] = {"rd of th", "LORD came unto them"};
    kiln_llm_request q = text_request("In the beginning", 24, &c);
    q.stop = stops;
    q.n_stop = 2;
    CHECK_OK(run(llm, &q, &c));
    CHECKF(!strcmp(c.text, " of the month, that the wo"), "got '%s'", c.text);
    CHECK(c.finish == KILN_LLM_FINISH_STOP_STRING && c.usage.completion_tokens == 9);
    collect_free(&c);

    collect_init(&c);
    q = text_request("In the beginning", 24, &c);
    q.stop = stops + 1;
    q.n_stop = 1;
    CHECK_OK(run(llm, &q, &c));
    CHECKF(!strcmp(c.text, REFS[0].text), "got '%s'", c.text);
    CHECK(c.finish == KILN_LLM_FINISH_LENGTH);
    collect_free(&c);
}

/* A stop token (here the request's own, with the model's eos ignored) ends the request; its text is not
 * sent. */
static void test_stop_token(kiln_llm *llm) {
    collect c;
    collect_init(&c);
    kiln_llm_request q = text_request("In the beginning", 24, &c);
    const int32_t comma = REFS[0].ids[3];
    q.stop_ids = &comma;
    q.n_stop_ids = 1;
    q.ignore_eos = true;
    CHECK_OK(run(llm, &q, &c));
    CHECK(c.finish == KILN_LLM_FINISH_STOP_TOKEN && c.n_tokens == 4 && c.tokens[3] == comma);
    CHECKF(!strcmp(c.text, " of the month"), "got '%s'", c.text);
    collect_free(&c);
}

/* 8 threads submit at once: half by callback, half by polling; every request ends with its greedy
 * reference tokens and text and the right usage. */
typedef struct worker {
    kiln_llm *llm;
    int index, failed;
    char expect[4][256];
} worker;

static void *submit_worker(void *arg) {
    worker *w = arg;
    const bool polled = w->index % 2;
    for (int k = 0; k < 2; k++) {
        const reference *ref = &REFS[(w->index + k) % N_REFS];
        collect c;
        collect_init(&c);
        kiln_llm_request q = text_request(ref->prompt, 8, polled ? NULL : &c);
        uint64_t id;
        if (kiln_llm_submit(w->llm, &q, &id) != KILN_OK) {
            w->failed++;
            collect_free(&c);
            continue;
        }
        kiln_llm_usage usage = {0};
        kiln_llm_finish finish = KILN_LLM_FINISH_NONE;
        char text[1024] = "";
        if (polled) {
            kiln_llm_event ev;
            size_t len = 0;
            while (finish == KILN_LLM_FINISH_NONE && kiln_llm_next(w->llm, id, -1, &ev) == KILN_OK) {
                if (len + ev.text_len < sizeof text) memcpy(text + len, ev.text, ev.text_len + 1);
                len += ev.text_len;
                finish = ev.finish;
                usage = ev.usage;
            }
            kiln_llm_release(w->llm, id);
        } else {
            wait_final(&c);
            snprintf(text, sizeof text, "%s", c.text);
            finish = c.finish;
            usage = c.usage;
            if (c.n_tokens != 8 || memcmp(c.tokens, ref->ids, 8 * sizeof *c.tokens)) w->failed++;
        }
        if (finish != KILN_LLM_FINISH_LENGTH || usage.completion_tokens != 8 || usage.prompt_tokens < 3 ||
            strcmp(text, w->expect[(w->index + k) % N_REFS]))
            w->failed++;
        collect_free(&c);
    }
    return NULL;
}

static void test_threads(kiln_llm *llm) {
    worker w[8];
    pthread_t t[8];
    for (int i = 0; i < 8; i++) {
        w[i] = (worker){.llm = llm, .index = i};
        for (int r = 0; r < N_REFS; r++) { /* the first 8 tokens' text */
            char *text;
            size_t len;
            REQUIRE_OK(kiln_llm_detokenize(llm, REFS[r].ids, 8, false, &text, &len));
            snprintf(w[i].expect[r], sizeof w[i].expect[r], "%s", text);
            free(text);
        }
    }
    kiln_llm_stats before;
    CHECK_OK(kiln_llm_get_stats(llm, &before));
    for (int i = 0; i < 8; i++) pthread_create(&t[i], NULL, submit_worker, &w[i]);
    for (int i = 0; i < 8; i++) {
        pthread_join(t[i], NULL);
        CHECKF(!w[i].failed, "worker %d: %d failures", i, w[i].failed);
    }
    kiln_llm_stats after;
    CHECK_OK(kiln_llm_get_stats(llm, &after));
    CHECK(after.requests_submitted - before.requests_submitted == 16);
    CHECK(after.requests_finished - before.requests_finished == 16);
    CHECK(after.generated_tokens - before.generated_tokens == 16 * 8);
}

typedef struct canceller {
    kiln_llm *llm;
    uint64_t id;
} canceller;

static void *cancel_thread(void *arg) {
    canceller *c = arg;
    kiln_llm_cancel(c->llm, c->id);
    return NULL;
}

/* A cancel from another thread ends the request and frees its KV blocks (seen in the statistics). */
static void test_cancel(kiln_llm *llm) {
    collect c;
    collect_init(&c);
    kiln_llm_request q = text_request("In the beginning", 200, &c);
    uint64_t id;
    REQUIRE_OK(kiln_llm_submit(llm, &q, &id));
    wait_first_token(&c);
    kiln_llm_stats s;
    CHECK_OK(kiln_llm_get_stats(llm, &s));
    CHECKF(s.kv_blocks_used > 0 && s.running == 1, "used %d running %d", s.kv_blocks_used, s.running);
    canceller cc = {llm, id};
    pthread_t t;
    pthread_create(&t, NULL, cancel_thread, &cc);
    pthread_join(t, NULL);
    wait_final(&c);
    CHECK(c.finish == KILN_LLM_FINISH_CANCELLED && c.n_final == 1 && c.usage.completion_tokens < 200);
    CHECK_OK(kiln_llm_get_stats(llm, &s));
    CHECKF(s.kv_blocks_used == 0 && s.running == 0, "after the cancel: %d blocks used, %d running", s.kv_blocks_used,
           s.running);
    CHECK_OK(kiln_llm_cancel(llm, id)); /* ended: a no-op */
    CHECK_OK(kiln_llm_cancel(llm, 999999));
    collect_free(&c);
}

/* With one sequence slot: max_waiting / max_waiting_tokens refuse with KILN_ERR_BUSY while the running
 * request goes on; the waiting one then runs; a request that can never fit is refused up front. */
static void test_admission(void) {
    kiln_llm_options o = {.max_seqs = 1, .max_waiting = 1, .kv_cache_blocks = 8};
    kiln_llm *llm = open_model(&o);
    collect a, b;
    collect_init(&a);
    collect_init(&b);
    kiln_llm_request qa = text_request("In the beginning", 40, &a), qb = text_request("And God said", 4, &b);
    uint64_t id;
    REQUIRE_OK(kiln_llm_submit(llm, &qa, &id));
    wait_first_token(&a);
    REQUIRE_OK(kiln_llm_submit(llm, &qb, &id));
    kiln_llm_request qc = text_request("Jesus wept. And", 4, &b);
    CHECK(kiln_llm_submit(llm, &qc, &id) == KILN_ERR_BUSY && strstr(kiln_last_error(), "max_waiting"));
    kiln_llm_stats s;
    CHECK_OK(kiln_llm_get_stats(llm, &s));
    CHECKF(s.waiting == 1 && s.running == 1 && s.waiting_tokens == 3, "waiting %d running %d tokens %lld", s.waiting,
           s.running, (long long)s.waiting_tokens);
    wait_final(&a);
    wait_final(&b);
    CHECK(a.finish == KILN_LLM_FINISH_LENGTH && a.usage.completion_tokens == 40);
    CHECK(b.finish == KILN_LLM_FINISH_LENGTH && b.usage.completion_tokens == 4 && b.usage.queue_ms > 0);

    /* 8 blocks of 16 tokens hold 129 tokens: 3 + 200 never fit, nor does a prompt of the whole context */
    kiln_llm_request big = text_request("In the beginning", 200, &a);
    CHECK(kiln_llm_submit(llm, &big, &id) == KILN_ERR_INVALID_ARGUMENT && strstr(kiln_last_error(), "kv_cache") &&
          strstr(kiln_last_error(), "8"));
    int32_t ids[256];
    for (int i = 0; i < 256; i++) ids[i] = 5;
    kiln_llm_request whole = {.prompt_ids = ids, .n_prompt_ids = 256, .max_tokens = 1,
                              .sampling = kiln_sampling_defaults()};
    CHECK(kiln_llm_submit(llm, &whole, &id) == KILN_ERR_INVALID_ARGUMENT && strstr(kiln_last_error(), "max_context"));
    collect_free(&a);
    collect_free(&b);
    kiln_llm_close(llm);

    kiln_llm_options ot = {.max_seqs = 1, .max_waiting_tokens = 5};
    llm = open_model(&ot);
    collect_init(&a);
    collect_init(&b);
    qa = text_request("In the beginning", 30, &a);
    qb = text_request("And God said", 2, &b);
    REQUIRE_OK(kiln_llm_submit(llm, &qa, &id));
    wait_first_token(&a);
    REQUIRE_OK(kiln_llm_submit(llm, &qb, &id));
    qc = text_request("Jesus wept. And", 2, &b);
    CHECK(kiln_llm_submit(llm, &qc, &id) == KILN_ERR_BUSY && strstr(kiln_last_error(), "max_waiting_tokens"));
    wait_final(&a);
    wait_final(&b);
    CHECK(a.finish == KILN_LLM_FINISH_LENGTH && b.finish == KILN_LLM_FINISH_LENGTH);
    collect_free(&a);
    collect_free(&b);
    kiln_llm_close(llm);
}

/* A request that waits longer than queue_timeout_ms behind a running one ends with FINISH_TIMEOUT. The
 * cache is given in bytes: a block of 16 tokens is 2 x 6 layers x 6 heads x 16 x 64 x 4 bytes here. */
static void test_queue_timeout(void) {
    const uint64_t block_bytes = 2ull * 6 * 6 * 16 * 64 * 4;
    kiln_llm_options o = {.max_seqs = 1, .queue_timeout_ms = 30, .kv_cache_bytes = 10 * block_bytes + 100};
    kiln_llm *llm = open_model(&o);
    kiln_llm_info info;
    CHECK_OK(kiln_llm_get_info(llm, &info));
    CHECK(info.kv_blocks_total == 10 && info.block_size == 16);
    collect a, b;
    collect_init(&a);
    collect_init(&b);
    kiln_llm_request qa = text_request("In the beginning", 60, &a), qb = text_request("And God said", 4, &b);
    uint64_t id;
    REQUIRE_OK(kiln_llm_submit(llm, &qa, &id));
    wait_first_token(&a);
    REQUIRE_OK(kiln_llm_submit(llm, &qb, &id));
    wait_final(&b);
    CHECK(b.finish == KILN_LLM_FINISH_TIMEOUT && b.usage.completion_tokens == 0 && b.usage.queue_ms >= 30);
    wait_final(&a);
    CHECK(a.finish == KILN_LLM_FINISH_LENGTH && a.usage.completion_tokens == 60);
    collect_free(&a);
    collect_free(&b);
    kiln_llm_close(llm);
}

/* Drain: requests that end in time give KILN_OK; then new ones are refused; a drain whose deadline
 * passes cancels what still runs. Close with requests in flight (callback and polled) ends them all. */
static void test_drain_and_close(void) {
    kiln_llm *llm = open_model(NULL);
    collect c[3];
    uint64_t id;
    for (int i = 0; i < 3; i++) {
        collect_init(&c[i]);
        kiln_llm_request q = text_request(REFS[i].prompt, 6, &c[i]);
        REQUIRE_OK(kiln_llm_submit(llm, &q, &id));
    }
    CHECK_OK(kiln_llm_drain(llm, 60000));
    for (int i = 0; i < 3; i++) CHECK(c[i].n_final == 1 && c[i].finish == KILN_LLM_FINISH_LENGTH);
    kiln_llm_stats s;
    CHECK_OK(kiln_llm_get_stats(llm, &s));
    CHECK(s.draining && s.running == 0 && s.waiting == 0 && s.ms_since_heartbeat < 5000 && s.busy_ms > 0 && s.steps > 0);
    kiln_llm_request q = text_request("In the beginning", 4, &c[0]);
    CHECK(kiln_llm_submit(llm, &q, &id) == KILN_ERR_BUSY && strstr(kiln_last_error(), "draining"));
    for (int i = 0; i < 3; i++) collect_free(&c[i]);
    kiln_llm_close(llm);

    llm = open_model(NULL);
    collect_init(&c[0]);
    q = text_request("In the beginning", 0, &c[0]); /* until the context limit */
    REQUIRE_OK(kiln_llm_submit(llm, &q, &id));
    wait_first_token(&c[0]);
    CHECK(kiln_llm_drain(llm, 1) == KILN_ERR_BUSY && strstr(kiln_last_error(), "cancelled"));
    CHECK(c[0].n_final == 1 && c[0].finish == KILN_LLM_FINISH_CANCELLED);
    collect_free(&c[0]);
    kiln_llm_close(llm);

    llm = open_model(NULL);
    collect_init(&c[0]);
    collect_init(&c[1]);
    for (int i = 0; i < 2; i++) {
        q = text_request(REFS[i].prompt, 100, &c[i]);
        REQUIRE_OK(kiln_llm_submit(llm, &q, &id));
    }
    q = text_request("Jesus wept. And", 100, NULL);
    REQUIRE_OK(kiln_llm_submit(llm, &q, &id)); /* polled, never released: close frees it */
    wait_first_token(&c[0]);
    kiln_llm_close(llm);
    CHECK(c[0].n_final == 1 && c[0].finish == KILN_LLM_FINISH_CANCELLED);
    CHECK(c[1].n_final == 1 && c[1].finish == KILN_LLM_FINISH_CANCELLED);
    collect_free(&c[0]);
    collect_free(&c[1]);
}

/* Logprobs: polled events are not coalesced; each carries the chosen token's log-probability and
 * the top alternatives, most likely first (greedy: the chosen token is the first). */
static void test_logprobs(kiln_llm *llm) {
    kiln_llm_request q = text_request("In the beginning", 6, NULL);
    q.sampling.logprobs = true;
    q.sampling.top_logprobs = 3;
    uint64_t id;
    REQUIRE_OK(kiln_llm_submit(llm, &q, &id));
    kiln_llm_event ev = {0};
    int n = 0;
    while (kiln_llm_next(llm, id, 60000, &ev) == KILN_OK) {
        CHECK(ev.token == REFS[0].ids[n] && ev.n_top == 3 && ev.top && ev.logprob <= 0);
        CHECK(ev.top[0].token == ev.token && ev.top[0].logprob >= ev.top[1].logprob &&
              ev.top[1].logprob >= ev.top[2].logprob);
        n++;
        if (ev.finish != KILN_LLM_FINISH_NONE) break;
    }
    CHECK(n == 6 && ev.finish == KILN_LLM_FINISH_LENGTH);
    CHECK(kiln_llm_next(llm, id, -1, &ev) == KILN_ERR_INVALID_ARGUMENT && strstr(kiln_last_error(), "ended"));
    kiln_llm_release(llm, id);
    CHECK(kiln_llm_next(llm, id, 0, &ev) == KILN_ERR_INVALID_ARGUMENT);
}

static void test_bad_input(kiln_llm *llm) {
    uint64_t id;
    kiln_llm_request q = text_request("", 4, NULL);
    CHECK(kiln_llm_submit(llm, &q, &id) == KILN_ERR_INVALID_ARGUMENT && strstr(kiln_last_error(), "empty"));
    q = text_request("In", 4, NULL);
    q.sampling.top_p = 0;
    CHECK(kiln_llm_submit(llm, &q, &id) == KILN_ERR_INVALID_ARGUMENT && strstr(kiln_last_error(), "top_p"));
    const char *empty[] = {""};
    q = text_request("In", 4, NULL);
    q.stop = empty;
    q.n_stop = 1;
    CHECK(kiln_llm_submit(llm, &q, &id) == KILN_ERR_INVALID_ARGUMENT && strstr(kiln_last_error(), "stop"));
    int32_t bad = 1 << 20;
    kiln_llm_request qi = {.prompt_ids = &bad, .n_prompt_ids = 1, .max_tokens = 1, .sampling = kiln_sampling_defaults()};
    CHECK(kiln_llm_submit(llm, &qi, &id) == KILN_ERR_INVALID_ARGUMENT && strstr(kiln_last_error(), "vocabulary"));
    kiln_llm_event ev;
    CHECK(kiln_llm_next(llm, 424242, 0, &ev) == KILN_ERR_INVALID_ARGUMENT);
    kiln_llm *none = NULL;
    CHECK(kiln_llm_open("/nonexistent/model", NULL, &none) != KILN_OK && !none);
    kiln_llm_options o = {.target = "tpu"};
    CHECK(kiln_llm_open(model_dir, &o, &none) == KILN_ERR_INVALID_ARGUMENT && strstr(kiln_last_error(), "tpu"));
    o = (kiln_llm_options){.kv_cache_bytes = 100};
    CHECK(kiln_llm_open(model_dir, &o, &none) == KILN_ERR_INVALID_ARGUMENT && strstr(kiln_last_error(), "kv_cache_bytes"));
    CHECK(kiln_llm_open_random("gpt5", KILN_PRECISION_FP32, 0, NULL, &none) == KILN_ERR_INVALID_ARGUMENT &&
          strstr(kiln_last_error(), "tiny-gpt2"));
    kiln_llm_close(NULL);
}

/* A copy of the model directory (links) whose tokenizer_config.json is `config`. */
static void write_checkpoint(const char *dir, const char *config) {
    static const char *const files[] = {"config.json", "generation_config.json", "model.safetensors", "tokenizer.json"};
    char src[4096], dst[4096];
    mkdir(dir, 0755);
    for (size_t i = 0; i < sizeof files / sizeof *files; i++) {
        snprintf(src, sizeof src, "%s/%s", model_dir, files[i]);
        snprintf(dst, sizeof dst, "%s/%s", dir, files[i]);
        unlink(dst);
        if (symlink(src, dst)) fprintf(stderr, "cannot link %s\n", dst);
    }
    snprintf(dst, sizeof dst, "%s/tokenizer_config.json", dir);
    FILE *f = fopen(dst, "w");
    if (f) {
        fputs(config, f);
        fclose(f);
    }
}

static void expect_chat(kiln_llm *llm, const char *want) {
    const kiln_chat_message m[] = {{"system", "Be brief."}, {"user", "Who made light?"}};
    char *text = NULL;
    size_t len = 0;
    CHECK_OK(kiln_llm_apply_chat_template(llm, m, 2, true, &text, &len));
    CHECKF(text && !strcmp(text, want) && len == strlen(want), "got '%s'", text ? text : "(null)");
    free(text);
}

/* The chat template: ChatML when the model has none; the options' override (with the model's bos);
 * tokenizer_config.json's, also as a list of named templates with {"content": ...} tokens. */
static void test_chat_templates(kiln_llm *llm, const char *tmp) {
    kiln_llm_info info;
    CHECK_OK(kiln_llm_get_info(llm, &info));
    CHECK(!info.has_chat_template);
    expect_chat(llm, "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nWho made light?<|im_end|>\n"
                     "<|im_start|>assistant\n");
    kiln_llm_options o = {.chat_template = "{{ bos_token }}{% for m in messages %}[{{ m.role }}] {{ m.content }}|"
                                           "{% endfor %}{% if add_generation_prompt %}>{% endif %}"};
    kiln_llm *other = open_model(&o);
    CHECK_OK(kiln_llm_get_info(other, &info));
    CHECK(info.has_chat_template);
    expect_chat(other, "<|endoftext|>[system] Be brief.|[user] Who made light?|>");
    kiln_llm_close(other);
    o.chat_template = "{% for m in messages %}";
    CHECK(kiln_llm_open(model_dir, &o, &other) == KILN_ERR_PARSE && strstr(kiln_last_error(), "chat_template"));

    char dir[4096];
    snprintf(dir, sizeof dir, "%s/chat_ckpt", tmp);
    write_checkpoint(dir, "{\"bos_token\": {\"content\": \"<|endoftext|>\", \"lstrip\": false}, \"eos_token\": "
                          "\"<|endoftext|>\", "
                          "\"chat_template\": [{\"name\": \"tool_use\", \"template\": \"tools\"}, {\"name\": "
                          "\"default\", \"template\": \"{{ bos_token }}{{ messages[-1].content }}/{{ eos_token }}\"}]}");
    REQUIRE_OK(kiln_llm_open(dir, NULL, &other));
    CHECK_OK(kiln_llm_get_info(other, &info));
    CHECK(info.has_chat_template);
    expect_chat(other, "<|endoftext|>Who made light?/<|endoftext|>");
    kiln_llm_close(other);
    write_checkpoint(dir, "{\"chat_template\": \"{% if %}\"}");
    REQUIRE_OK(kiln_llm_open(dir, NULL, &other)); /* completions still run */
    const kiln_chat_message m = {"user", "x"};
    char *text = NULL;
    size_t len;
    CHECK(kiln_llm_apply_chat_template(other, &m, 1, true, &text, &len) != KILN_OK &&
          strstr(kiln_last_error(), "does not parse") && !text);
    kiln_llm_close(other);
}

/* The model with a byte-level tokenizer of printable ASCII and the space only (95 ids): greedy ids the
 * tokenizer does not name add no text, and the request ends by length, not by error. */
static void test_small_tokenizer(const char *tmp) {
    char dir[2048], src[4096], dst[4096]; /* dir leaves room for the names joined to it */
    snprintf(dir, sizeof dir, "%s/small_tok", tmp);
    mkdir(dir, 0755);
    static const char *const files[] = {"config.json", "model.safetensors"};
    for (size_t i = 0; i < 2; i++) {
        snprintf(src, sizeof src, "%s/%s", model_dir, files[i]);
        snprintf(dst, sizeof dst, "%s/%s", dir, files[i]);
        unlink(dst);
        if (symlink(src, dst)) fprintf(stderr, "cannot link %s\n", dst);
    }
    snprintf(dst, sizeof dst, "%s/tokenizer.json", dir);
    FILE *f = fopen(dst, "w");
    CHECK(f != NULL);
    if (!f) return;
    fputs("{\"model\": {\"type\": \"BPE\", \"merges\": [], \"vocab\": {", f);
    for (int c = '!'; c <= '~'; c++) fprintf(f, "\"%s%c\": %d, ", c == '"' || c == '\\' ? "\\" : "", c, c - '!');
    fputs("\"\\u0120\": 94}}, \"pre_tokenizer\": {\"type\": \"ByteLevel\", \"add_prefix_space\": false}, "
          "\"decoder\": {\"type\": \"ByteLevel\"}}", f);
    fclose(f);
    kiln_llm *llm = NULL;
    REQUIRE_OK(kiln_llm_open(dir, NULL, &llm));
    collect c;
    collect_init(&c);
    kiln_llm_request q = text_request("In the beginning", 24, &c);
    CHECK_OK(run(llm, &q, &c));
    int beyond = 0, named = 0;
    for (int i = 0; i < c.n_tokens; i++) beyond += c.tokens[i] >= 95, named += c.tokens[i] < 95;
    CHECKF(c.finish == KILN_LLM_FINISH_LENGTH && c.n_tokens == 24 && beyond > 0, "finish %s, %d tokens, %d beyond",
           kiln_llm_finish_name(c.finish), c.n_tokens, beyond);
    CHECKF(c.len == (size_t)named, "%d named ids gave %zu bytes of text", named, c.len);
    collect_free(&c);
    kiln_llm_close(llm);
}

/* Random weights: token-id prompts only. */
static void test_random(void) {
    kiln_llm *llm = NULL;
    kiln_llm_options o = {.kv_cache_blocks = 4, .block_size = 8};
    REQUIRE_OK(kiln_llm_open_random("tiny-llama", KILN_PRECISION_FP32, 1, &o, &llm));
    kiln_llm_info info;
    CHECK_OK(kiln_llm_get_info(llm, &info));
    CHECK(!info.has_tokenizer && !strcmp(info.family, "llama") && info.kv_blocks_total == 4 && info.block_size == 8);
    collect c;
    collect_init(&c);
    int32_t ids[3] = {1, 2, 3};
    kiln_llm_request q = {.prompt_ids = ids, .n_prompt_ids = 3, .max_tokens = 5, .sampling = kiln_sampling_defaults(),
                          .user = &c, .on_event = on_event};
    CHECK_OK(run(llm, &q, &c));
    CHECK(c.n_tokens == 5 && c.len == 0 && c.finish == KILN_LLM_FINISH_LENGTH);
    uint64_t id;
    kiln_llm_request qt = text_request("hi", 2, &c);
    CHECK(kiln_llm_submit(llm, &qt, &id) == KILN_ERR_INVALID_ARGUMENT && strstr(kiln_last_error(), "tokenizer"));
    collect_free(&c);
    kiln_llm_close(llm);
}

/* Speculative decoding by prompt lookup: the same greedy text, stop strings, stop tokens and
 * concurrent requests as plain decoding, with drafts accepted; bad options refused. */
static void test_speculation(void) {
    kiln_llm_options o = {.max_seqs = 8, .spec = "ngram", .draft_tokens = 5};
    kiln_llm *llm = open_model(&o);
    test_greedy_matches_generate(llm);
    test_stop_strings(llm);
    test_stop_token(llm);
    test_threads(llm);
    /* polled: several tokens of one step come in one read, their text whole */
    kiln_llm_request q = text_request(REFS[0].prompt, 24, NULL);
    uint64_t id;
    CHECK_OK(kiln_llm_submit(llm, &q, &id));
    char text[1024] = "";
    kiln_llm_event ev;
    while (kiln_llm_next(llm, id, 60000, &ev) == KILN_OK) {
        if (strlen(text) + ev.text_len < sizeof text) strncat(text, ev.text, ev.text_len);
        if (ev.finish != KILN_LLM_FINISH_NONE) break;
    }
    kiln_llm_release(llm, id);
    CHECKF(!strcmp(text, REFS[0].text), "polled text '%s'", text);
    kiln_llm_stats st;
    CHECK_OK(kiln_llm_get_stats(llm, &st));
    CHECKF(st.spec_steps > 0 && st.spec_accepted > 0 && st.spec_accepted <= st.spec_drafted &&
           st.spec_emitted <= st.spec_accepted + st.spec_steps, "spec steps %llu drafted %llu accepted %llu emitted %llu",
           (unsigned long long)st.spec_steps, (unsigned long long)st.spec_drafted,
           (unsigned long long)st.spec_accepted, (unsigned long long)st.spec_emitted);
    kiln_llm_close(llm);
    kiln_llm *none = NULL;
    o = (kiln_llm_options){.spec = "medusa"};
    CHECK(kiln_llm_open(model_dir, &o, &none) == KILN_ERR_INVALID_ARGUMENT && strstr(kiln_last_error(), "ngram") && !none);
    o = (kiln_llm_options){.spec = "ngram", .draft_tokens = KILN_LLM_MAX_DRAFT_TOKENS + 1};
    CHECK(kiln_llm_open(model_dir, &o, &none) == KILN_ERR_INVALID_ARGUMENT && strstr(kiln_last_error(), "draft_tokens"));
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: test_llm_api MODEL_DIR TMP_DIR\n");
        return 2;
    }
    static char abs_dir[4096];
    model_dir = realpath(argv[1], abs_dir) ? abs_dir : argv[1]; /* the links of write_checkpoint need it absolute */
    kiln_llm_options o = {.max_seqs = 8};
    kiln_llm *llm = open_model(&o);
    kiln_llm_info info;
    CHECK_OK(kiln_llm_get_info(llm, &info));
    CHECK(!strcmp(info.family, "gpt2") && info.has_tokenizer && info.max_context == 256 && info.max_seqs == 8 &&
          info.kv_blocks_total > 0 && info.eos_id >= 0 && strstr(info.target, "CPU"));
    test_greedy_matches_generate(llm);
    test_stop_strings(llm);
    test_stop_token(llm);
    test_threads(llm);
    test_cancel(llm);
    test_logprobs(llm);
    test_bad_input(llm);
    test_chat_templates(llm, argv[2]);
    kiln_llm_close(llm);
    test_speculation();
    test_small_tokenizer(argv[2]);
    test_admission();
    test_queue_timeout();
    test_drain_and_close();
    test_random();
    return checks_report("test_llm_api");
}
