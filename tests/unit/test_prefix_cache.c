/* test_prefix_cache.c — automatic prefix caching through the public LLM API (kiln/kiln_llm.h) on the CPU
 * forward of a tiny random Llama: requests sharing system prompts of lengths around the 16-token block
 * boundaries (one prompt entirely cached), greedy and seeded sampling, submitted in waves so that
 * later ones find the earlier ones' blocks, generate the same tokens as with no_prefix_cache; hits
 * show in kiln_llm_stats; a small cache (preemption, eviction) and a cancel of a request sharing
 * blocks change nothing; and after every request every block is free or cached. Exit 0 = pass. */
#include "check.h"
#include "kiln/kiln_llm.h"

#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

enum { N_REQ = 16, MAX_PROMPT = 120, NEW_TOKENS = 12, VOCAB_USED = 500 };

typedef struct req {
    int32_t prompt[MAX_PROMPT];
    int n_prompt, max_tokens; /* 0: NEW_TOKENS */
    uint64_t seed;
    bool greedy;
    int32_t out[NEW_TOKENS];
    int n_out;
    kiln_llm_finish finish;
    atomic_bool ended;
} req;

static uint64_t mix(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* Request i: the first shared[i % 7] tokens of system prompt i % 2, then its own tokens. */
static void make_requests(req *r) {
    static const int shared[7] = {15, 16, 17, 32, 33, 64, 96};
    memset(r, 0, N_REQ * sizeof *r);
    for (int i = 0; i < N_REQ; i++) {
        int len = shared[i % 7];
        r[i].n_prompt = len + 1 + (int)(mix((uint64_t)i) % 20);
        for (int j = 0; j < r[i].n_prompt; j++)
            r[i].prompt[j] = (int32_t)(mix(j < len ? (uint64_t)(1000 * (i % 2) + j) : (uint64_t)(77777 + 1000 * i + j)) %
                                       VOCAB_USED);
        r[i].greedy = i % 2 == 0;
        r[i].seed = mix((uint64_t)i + 5);
    }
    r[N_REQ - 1].n_prompt = 32; /* the first 32 tokens of system prompt 1, exactly two blocks: all cached */
    memcpy(r[N_REQ - 1].prompt, r[1].prompt, 32 * sizeof(int32_t));
}

/* Records every token (events come on the engine loop's thread). */
static void on_event(const kiln_llm_event *ev) {
    req *r = ev->user;
    if (ev->token >= 0 && r->n_out < NEW_TOKENS) r->out[r->n_out++] = ev->token;
    if (ev->finish == KILN_LLM_FINISH_NONE) return;
    r->finish = ev->finish;
    atomic_store(&r->ended, true);
}

static uint64_t submit(kiln_llm *llm, req *r) {
    kiln_llm_request q = kiln_llm_request_defaults();
    q.prompt_ids = r->prompt;
    q.n_prompt_ids = r->n_prompt;
    q.max_tokens = r->max_tokens ? r->max_tokens : NEW_TOKENS;
    q.ignore_eos = true;
    if (!r->greedy) {
        q.sampling.temperature = 0.9f;
        q.sampling.top_k = 50;
        q.sampling.seed = r->seed;
    }
    q.user = r;
    q.on_event = on_event;
    r->n_out = 0;
    atomic_store(&r->ended, false);
    uint64_t id = 0;
    CHECK(kiln_llm_submit(llm, &q, &id) == KILN_OK);
    return id;
}

/* Waits (at most 60 s) until r has ended, or has a token when first_token. */
static void wait_for(const req *r, bool first_token) {
    for (int ms = 0; ms < 60000 && !atomic_load(&r->ended) && !(first_token && r->n_out > 0); ms++)
        nanosleep(&(struct timespec){0, 1000000}, NULL);
    CHECK(atomic_load(&r->ended) || first_token);
}

/* Runs the requests in waves of `wave` (each wave submitted at once, then collected); returns the
 * stats after all. With `cancel`, a long request sharing system prompt 1 joins the second wave and is
 * cancelled after its first token. */
static kiln_llm_stats run(req *r, bool cache, int kv_blocks, int wave, bool cancel) {
    kiln_llm_options o = {.max_seqs = 8, .kv_cache_blocks = kv_blocks, .no_prefix_cache = !cache};
    kiln_llm *llm = NULL;
    kiln_llm_stats st = {0};
    if (kiln_llm_open_random("tiny-llama", KILN_PRECISION_FP32, 3, &o, &llm) != KILN_OK) {
        fprintf(stderr, "FAIL: open: %s\n", kiln_last_error());
        CHECK(false);
        return st;
    }
    for (int w = 0; w < N_REQ; w += wave) {
        int n = w + wave < N_REQ ? wave : N_REQ - w;
        for (int i = 0; i < n; i++) submit(llm, &r[w + i]);
        if (cancel && w == wave) {
            static req extra;
            memset(&extra, 0, sizeof extra);
            memcpy(extra.prompt, r[1].prompt, 40 * sizeof(int32_t));
            extra.n_prompt = 41;
            extra.max_tokens = 900;
            extra.greedy = true;
            uint64_t id = submit(llm, &extra);
            wait_for(&extra, true);
            CHECK(kiln_llm_cancel(llm, id) == KILN_OK);
            wait_for(&extra, false);
            CHECK(extra.finish == KILN_LLM_FINISH_CANCELLED);
        }
        for (int i = 0; i < n; i++) wait_for(&r[w + i], false);
    }
    CHECK(kiln_llm_get_stats(llm, &st) == KILN_OK);
    CHECK(st.running == 0 && st.waiting == 0 && st.kv_blocks_used == 0); /* every block free or cached */
    kiln_llm_close(llm);
    return st;
}

static void check_same(const req *a, const req *b) {
    for (int i = 0; i < N_REQ; i++) {
        bool same = a[i].n_out == NEW_TOKENS && b[i].n_out == NEW_TOKENS && !memcmp(a[i].out, b[i].out, sizeof a[i].out);
        if (!same) fprintf(stderr, "  request %d (prompt %d, %s): tokens differ\n", i, a[i].n_prompt, a[i].greedy ? "greedy" : "seeded");
        CHECK(same);
    }
}

static req plain[N_REQ], cached[N_REQ];

int main(void) {
    make_requests(plain);
    kiln_llm_stats off = run(plain, false, 0, 4, false);
    CHECK(off.prefix_cache_queries == 0 && off.prefix_cache_hits == 0);
    make_requests(cached);
    kiln_llm_stats on = run(cached, true, 0, 4, false);
    check_same(plain, cached);
    CHECK(on.prefix_cache_hits > 0 && on.prefix_cache_hits < on.prefix_cache_queries);
    printf("prefix cache: %llu of %llu prompt tokens cached\n", (unsigned long long)on.prefix_cache_hits,
           (unsigned long long)on.prefix_cache_queries);
    /* a cache of 20 blocks of 16 tokens, 8 sequences at once: preemption and eviction of shared blocks */
    make_requests(cached);
    kiln_llm_stats small = run(cached, true, 20, 8, false);
    check_same(plain, cached);
    CHECK(small.preemptions > 0 && small.prefix_cache_hits > 0);
    printf("small cache: %llu preemptions, %llu of %llu prompt tokens cached\n", (unsigned long long)small.preemptions,
           (unsigned long long)small.prefix_cache_hits, (unsigned long long)small.prefix_cache_queries);
    /* a request sharing a system prompt cancelled while it runs: the others are unchanged */
    make_requests(cached);
    run(cached, true, 0, 4, true);
    check_same(plain, cached);
    return checks_report("test_prefix_cache");
}
