/* test_scheduler.c — the continuous-batching scheduler (src/llm/scheduler.h) on a fake model. The fake
 * forward writes each new token and its position into the real paged KV cache through the block
 * table, then reads every sequence's whole context back from the cache and derives the logits from a
 * hash of it: a wrong block table, a lost or stale token, or a bad resume after preemption changes
 * the generated tokens. Each scenario compares every request's tokens with a plain loop over the same
 * logits and the sampler (the request alone), and checks the final events and that every block is
 * free at the end: many concurrent requests of different lengths, a tiny cache (preemption), a small
 * token budget (chunked prefill), aborts, a request too large for the cache, the context limit, a
 * failing forward step, and invalid requests; prefix caching (requests sharing system prompts of
 * lengths around block boundaries, prompts entirely cached, through preemption, aborts and eviction:
 * the same tokens as without it, the exact hit counts, every block free or cached at the end); and
 * the same scenarios with a sample function (kiln_sample_fn, as the GPU sampler plugs in) that
 * samples the fake's "device" logits and hands back the rows asking for logprobs or holding a NaN.
 * Exit 0 = pass. */
#include "check.h"
#include "llm/scheduler.h"

#include "core/status.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { V = 64, EOS = 5, MAX_REQ = 40, MAX_LEN = 256 };

/* ------------------------------------------------------------------ the fake model */

enum { FAKE_MAX_SEQS = 64 };

typedef struct fake_model {
    int calls, fail_at_call;       /* the forward fails on call number fail_at_call (0: never) */
    int nan_ctx_len;               /* logits of contexts this long are NaN (0: never) */
    int max_step_tokens, max_step_seqs;
    long computed;                 /* tokens run through the forward in all */
    /* "device" sampling (fake_sample): the forward keeps its logits here when given none */
    bool on_device;
    float dev[FAKE_MAX_SEQS * V];
    int last_seqs;                 /* sequences of the last step */
    int sample_calls, fail_sample_at_call; /* fake_sample fails on this call (0: never) */
    int dev_rows, host_rows;       /* rows fake_sample sampled / handed back */
    bool bad_contract;             /* the scheduler broke kiln_sample_fn's contract */
    kiln_sampler *sampler;
} fake_model;

static uint64_t mix64(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static void context_logits(const int32_t *ctx, int n, float *logits) {
    uint64_t h = 0x243F6A8885A308D3ull;
    for (int i = 0; i < n; i++) h = mix64(h ^ (uint64_t)(ctx[i] + 1));
    for (int v = 0; v < V; v++) logits[v] = (float)(mix64(h + (uint64_t)v * 0x9E3779B97F4A7C15ull) % 1000) / 100.0f;
}

static kiln_status fake_forward(void *model, kiln_kv_cache *kv, const kiln_llm_batch *b, float *logits) {
    fake_model *f = model;
    if (++f->calls == f->fail_at_call) return kiln_error(KILN_ERR_BACKEND, "fake forward: injected failure");
    if (f->on_device != !logits || b->n_seqs > FAKE_MAX_SEQS) f->bad_contract = true;
    if (!logits) logits = f->dev;
    f->last_seqs = b->n_seqs;
    const kiln_kv_cache_config *kc = kiln_kv_cache_get_config(kv);
    int bs = kc->block_size;
    f->computed += b->n_tokens;
    if (b->n_tokens > f->max_step_tokens) f->max_step_tokens = b->n_tokens;
    if (b->n_seqs > f->max_step_seqs) f->max_step_seqs = b->n_seqs;
    if (b->seq_start[0] != 0 || b->seq_start[b->n_seqs] != b->n_tokens || b->all_logits)
        return kiln_error(KILN_ERR_INVALID_ARGUMENT, "fake forward: bad batch layout");
    /* blocks are taken, and a block written in this step belongs to its writer alone (sequences share
     * cached prefix blocks, which nobody writes) */
    static int writer[4096];
    for (int i = 0; i < kc->n_blocks; i++) writer[i] = -1;
    for (int i = 0; i < b->n_seqs; i++) {
        const int32_t *row = b->block_table + (size_t)i * b->max_blocks_per_seq;
        int first = b->ctx_len[i] - (b->seq_start[i + 1] - b->seq_start[i]);
        for (int j = 0; j < (b->ctx_len[i] + bs - 1) / bs; j++) {
            if (j >= b->max_blocks_per_seq || !kiln_kv_cache_block_taken(kv, row[j]))
                return kiln_error(KILN_ERR_INVALID_ARGUMENT, "fake forward: seq %d block %d invalid", i, j);
            if ((j + 1) * bs > first) writer[row[j]] = writer[row[j]] < 0 || writer[row[j]] == i ? i : -2;
        }
    }
    for (int i = 0; i < b->n_seqs; i++) {
        const int32_t *row = b->block_table + (size_t)i * b->max_blocks_per_seq;
        for (int j = 0; j < (b->ctx_len[i] + bs - 1) / bs; j++)
            if (writer[row[j]] != -1 && writer[row[j]] != i)
                return kiln_error(KILN_ERR_INVALID_ARGUMENT, "fake forward: seq %d block %d is written by another", i, j);
    }
    for (int i = 0; i < b->n_seqs; i++) { /* write the new tokens */
        const int32_t *row = b->block_table + (size_t)i * b->max_blocks_per_seq;
        int first = b->ctx_len[i] - (b->seq_start[i + 1] - b->seq_start[i]);
        if (b->seq_start[i + 1] <= b->seq_start[i] || first < 0)
            return kiln_error(KILN_ERR_INVALID_ARGUMENT, "fake forward: seq %d has no new token", i);
        for (int t = b->seq_start[i]; t < b->seq_start[i + 1]; t++) {
            int pos = b->positions[t];
            if (pos != first + t - b->seq_start[i] || b->tokens[t] < 0 || b->tokens[t] >= V)
                return kiln_error(KILN_ERR_INVALID_ARGUMENT, "fake forward: seq %d token %d bad", i, t);
            float *slot = (float *)kiln_kv_cache_keys(kv, 0, row[pos / bs]) + (pos % bs) * 2;
            slot[0] = (float)b->tokens[t];
            slot[1] = (float)pos;
        }
    }
    for (int i = 0; i < b->n_seqs; i++) { /* read each context back */
        const int32_t *row = b->block_table + (size_t)i * b->max_blocks_per_seq;
        int32_t ctx[MAX_LEN];
        for (int pos = 0; pos < b->ctx_len[i]; pos++) {
            const float *slot = (const float *)kiln_kv_cache_keys(kv, 0, row[pos / bs]) + (pos % bs) * 2;
            if (slot[1] != (float)pos)
                return kiln_error(KILN_ERR_INVALID_ARGUMENT, "fake forward: seq %d position %d is not in the cache", i, pos);
            ctx[pos] = (int32_t)slot[0];
        }
        context_logits(ctx, b->ctx_len[i], logits + (size_t)i * V);
        if (b->ctx_len[i] == f->nan_ctx_len) logits[(size_t)i * V + 3] = NAN;
    }
    return KILN_OK;
}

/* kiln_sample_fn over the fake "device" logits: samples with the CPU sampler (the GPU sampler's
 * oracle), hands back the rows asking for logprobs and those with a NaN logit. */
static kiln_status fake_sample(void *model, int n_rows, const kiln_sched_sample_row *rows, float *host_logits,
                               int32_t *tokens) {
    fake_model *f = model;
    if (++f->sample_calls == f->fail_sample_at_call)
        return kiln_error(KILN_ERR_BACKEND, "fake sample: injected failure");
    if (!f->sampler && kiln_sampler_create(V, &f->sampler) != KILN_OK) return KILN_ERR_OUT_OF_MEMORY;
    if (n_rows < 1 || n_rows > f->last_seqs) f->bad_contract = true;
    for (int i = 0; i < n_rows; i++) {
        const kiln_sched_sample_row *q = &rows[i];
        if (q->row < 0 || q->row >= f->last_seqs || (i && q->row <= rows[i - 1].row)) {
            f->bad_contract = true;
            return kiln_error(KILN_ERR_INTERNAL, "fake sample: bad row");
        }
        const float *l = f->dev + (size_t)q->row * V;
        bool nan = false;
        for (int v = 0; v < V; v++) nan |= isnan(l[v]);
        kiln_sample smp;
        if (q->params->logprobs || nan ||
            kiln_sample_next(f->sampler, q->params, l, q->prompt, q->n_prompt, q->generated, q->n_generated, &smp) !=
                KILN_OK) {
            memcpy(host_logits + (size_t)q->row * V, l, V * sizeof *l);
            tokens[i] = -1;
            f->host_rows++;
        } else {
            tokens[i] = smp.token;
            f->dev_rows++;
        }
    }
    return KILN_OK;
}

/* ------------------------------------------------------------------ requests and the reference */

typedef struct req {
    int32_t prompt[MAX_LEN];
    int n_prompt, max_tokens;
    kiln_sampling_params sp;
    int32_t stop;         /* a stop id, or -1 */
    uint64_t id;
    /* what the scheduler produced */
    int32_t out[MAX_LEN];
    int n_out, n_final, final_order;
    kiln_finish_reason finish;
    bool event_after_final;
    char message[256];
    /* the request alone */
    int32_t want[MAX_LEN];
    int n_want;
    kiln_finish_reason want_finish;
} req;

static void reference(req *r, int max_model_len) {
    kiln_sampler *smp;
    if (kiln_sampler_create(V, &smp) != KILN_OK) exit(1);
    int32_t ctx[MAX_LEN];
    memcpy(ctx, r->prompt, (size_t)r->n_prompt * sizeof *ctx);
    int n = r->n_prompt;
    r->n_want = 0;
    r->want_finish = KILN_FINISH_LENGTH;
    while (r->n_want < r->max_tokens && n < max_model_len) {
        float logits[V];
        context_logits(ctx, n, logits);
        kiln_sample s;
        if (kiln_sample_next(smp, &r->sp, logits, ctx, r->n_prompt, ctx + r->n_prompt, r->n_want, &s) != KILN_OK) exit(1);
        ctx[n++] = s.token;
        r->want[r->n_want++] = s.token;
        if (s.token == r->stop) {
            r->want_finish = KILN_FINISH_STOP_TOKEN;
            break;
        }
    }
    kiln_sampler_free(smp);
}

static void make_requests(req *r, int n, uint64_t seed, int min_prompt, int max_prompt, int max_new) {
    memset(r, 0, (size_t)n * sizeof *r);
    for (int i = 0; i < n; i++) {
        uint64_t h = mix64(seed * 1000 + (uint64_t)i);
        r[i].n_prompt = min_prompt + (int)(h % (uint64_t)(max_prompt - min_prompt + 1));
        for (int j = 0; j < r[i].n_prompt; j++) r[i].prompt[j] = (int32_t)(mix64(h + (uint64_t)j) % V);
        r[i].max_tokens = 1 + (int)((h >> 20) % (uint64_t)max_new);
        r[i].sp = kiln_sampling_defaults();
        r[i].stop = i % 3 == 0 ? EOS : -1;
        switch (i % 4) { /* greedy, plain sampling, truncated sampling, penalties */
        case 1: r[i].sp.temperature = 1.0f; break;
        case 2: r[i].sp.temperature = 0.7f, r[i].sp.top_k = 10, r[i].sp.top_p = 0.9f, r[i].sp.min_p = 0.05f; break;
        case 3: r[i].sp.temperature = 1.2f, r[i].sp.repetition_penalty = 1.3f, r[i].sp.frequency_penalty = 0.5f,
                r[i].sp.presence_penalty = 0.3f; break;
        }
        r[i].sp.seed = h;
        r[i].sp.logprobs = i % 2;
        r[i].sp.top_logprobs = i % 5;
    }
}

/* ------------------------------------------------------------------ running a scenario */

typedef struct setup {
    int n_blocks, block_size, budget, max_seqs, max_model_len;
    bool on_device; /* sample through fake_sample */
    bool no_prefix_cache;
} setup;

typedef struct world {
    fake_model fake;
    kiln_kv_cache *kv;
    kiln_scheduler *s;
    req *reqs;
    int n;
} world;

static void world_open(world *w, const setup *su, req *reqs, int n) {
    memset(w, 0, sizeof *w);
    kiln_kv_cache_config kc = {.n_layer = 1, .n_kv_head = 1, .head_dim = 2, .block_size = su->block_size,
                               .n_blocks = su->n_blocks, .dtype = KILN_F32};
    kiln_scheduler_config sc = {.forward = fake_forward, .sample = su->on_device ? fake_sample : NULL,
                                .model = &w->fake, .vocab = V,
                                .max_model_len = su->max_model_len ? su->max_model_len : MAX_LEN,
                                .max_num_batched_tokens = su->budget, .max_num_seqs = su->max_seqs,
                                .no_prefix_cache = su->no_prefix_cache};
    w->fake.on_device = su->on_device;
    if (kiln_kv_cache_create(&kc, &w->kv) != KILN_OK) exit(1);
    sc.kv = w->kv;
    if (kiln_scheduler_create(&sc, &w->s) != KILN_OK) {
        fprintf(stderr, "FAIL: kiln_scheduler_create: %s\n", kiln_last_error());
        exit(1);
    }
    w->reqs = reqs;
    w->n = n;
    for (int i = 0; i < n; i++) reference(&reqs[i], sc.max_model_len);
}

static void add_request(world *w, int i) {
    req *r = &w->reqs[i];
    kiln_request_params p = {.prompt = r->prompt, .n_prompt = r->n_prompt, .max_tokens = r->max_tokens,
                             .sampling = r->sp, .stop_ids = &r->stop, .n_stop_ids = r->stop >= 0, .user = r};
    CHECK(kiln_scheduler_add(w->s, &p, &r->id) == KILN_OK && r->id > 0);
}

static int finals; /* final events seen, to order them */

static void take_events(const kiln_sched_event *ev, int n) {
    for (int i = 0; i < n; i++) {
        req *r = ev[i].user;
        if (r->n_final) r->event_after_final = true;
        if (ev[i].sample.token >= 0 && r->n_out < MAX_LEN) r->out[r->n_out++] = ev[i].sample.token;
        if (ev[i].sample.token >= 0) CHECK(ev[i].n_generated == r->n_out);
        if (ev[i].finish == KILN_FINISH_NONE) continue;
        r->n_final++;
        r->final_order = finals++;
        r->finish = ev[i].finish;
        if (ev[i].message) snprintf(r->message, sizeof r->message, "%s", ev[i].message);
    }
}

/* Steps until nothing is left; returns the last step's status that was not OK (or OK). */
static kiln_status run_to_end(world *w) {
    kiln_status bad = KILN_OK;
    for (int steps = 0; kiln_scheduler_has_work(w->s); steps++) {
        if (steps > 100000) {
            CHECK(!"the scheduler does not finish");
            break;
        }
        const kiln_sched_event *ev;
        int n;
        kiln_status st = kiln_scheduler_step(w->s, &ev, &n);
        if (st != KILN_OK) bad = st;
        take_events(ev, n);
        kiln_scheduler_stats stats = kiln_scheduler_get_stats(w->s);
        CHECK(stats.running + stats.waiting <= w->n);
    }
    return bad;
}

/* Every request got its reference tokens and exactly one final event; every block is free again. */
static void check_as_alone(world *w) {
    for (int i = 0; i < w->n; i++) {
        req *r = &w->reqs[i];
        CHECK(r->n_final == 1 && !r->event_after_final);
        CHECK(r->finish == r->want_finish);
        bool same = r->n_out == r->n_want && !memcmp(r->out, r->want, (size_t)r->n_want * sizeof *r->out);
        if (!same) fprintf(stderr, "  request %d: %d tokens, want %d\n", i, r->n_out, r->n_want);
        CHECK(same);
    }
}

static void world_close(world *w) {
    kiln_scheduler_stats st = kiln_scheduler_get_stats(w->s);
    CHECK(st.running == 0 && st.waiting == 0 && st.kv_blocks_used == 0);
    CHECK(kiln_kv_cache_free_blocks(w->kv) == kiln_kv_cache_get_config(w->kv)->n_blocks);
    CHECK(!w->fake.bad_contract);
    kiln_sampler_free(w->fake.sampler);
    kiln_scheduler_free(w->s);
    kiln_kv_cache_free(w->kv);
}

/* ------------------------------------------------------------------ scenarios */

static req reqs[MAX_REQ];

static void test_concurrent(void) {
    world w;
    make_requests(reqs, MAX_REQ, 1, 1, 60, 40);
    world_open(&w, &(setup){.n_blocks = 1024, .block_size = 16, .budget = 128, .max_seqs = 16}, reqs, MAX_REQ);
    for (int i = 0; i < MAX_REQ; i++) add_request(&w, i);
    CHECK(run_to_end(&w) == KILN_OK);
    check_as_alone(&w);
    CHECK(kiln_scheduler_get_stats(w.s).preemptions == 0);
    CHECK(w.fake.max_step_seqs > 1 && w.fake.max_step_seqs <= 16 && w.fake.max_step_tokens <= 128);
    world_close(&w);
    /* requests arriving while others run */
    make_requests(reqs, MAX_REQ, 2, 1, 40, 30);
    world_open(&w, &(setup){.n_blocks = 1024, .block_size = 8, .budget = 64, .max_seqs = 8}, reqs, MAX_REQ);
    int added = 0;
    for (int steps = 0; added < MAX_REQ || kiln_scheduler_has_work(w.s); steps++) {
        if (added < MAX_REQ && steps % 3 == 0) add_request(&w, added++);
        const kiln_sched_event *ev;
        int n;
        CHECK(kiln_scheduler_step(w.s, &ev, &n) == KILN_OK);
        take_events(ev, n);
    }
    check_as_alone(&w);
    world_close(&w);
}

static void test_preemption(void) {
    world w;
    make_requests(reqs, 24, 3, 4, 30, 40);
    /* 20 blocks of 4 tokens: one 70-token request fits, a few together do not */
    world_open(&w, &(setup){.n_blocks = 20, .block_size = 4, .budget = 64, .max_seqs = 8}, reqs, 24);
    for (int i = 0; i < 24; i++) add_request(&w, i);
    CHECK(run_to_end(&w) == KILN_OK);
    check_as_alone(&w);
    kiln_scheduler_stats st = kiln_scheduler_get_stats(w.s);
    CHECK(st.preemptions > 0);
    printf("tiny cache: %llu preemptions in %llu steps\n", (unsigned long long)st.preemptions,
           (unsigned long long)st.steps);
    world_close(&w);
    /* the victim is the most recently admitted: two equal greedy requests fill a cache of 6 blocks of
     * 4 tokens with 3 blocks each at context 12; the first to need a fourth block is the older one,
     * which preempts the newer one and finishes first; the newer one resumes and finishes after */
    make_requests(reqs, 2, 10, 8, 8, 1);
    for (int i = 0; i < 2; i++) reqs[i].max_tokens = 12, reqs[i].stop = -1, reqs[i].sp = kiln_sampling_defaults();
    world_open(&w, &(setup){.n_blocks = 6, .block_size = 4, .budget = 32, .max_seqs = 4}, reqs, 2);
    add_request(&w, 0);
    add_request(&w, 1);
    CHECK(run_to_end(&w) == KILN_OK);
    check_as_alone(&w);
    CHECK(kiln_scheduler_get_stats(w.s).preemptions == 1);
    CHECK(reqs[0].final_order < reqs[1].final_order);
    world_close(&w);
}

static void test_chunked_prefill(void) {
    world w;
    make_requests(reqs, 12, 4, 30, 90, 20);
    world_open(&w, &(setup){.n_blocks = 512, .block_size = 16, .budget = 7, .max_seqs = 4}, reqs, 12);
    for (int i = 0; i < 12; i++) add_request(&w, i);
    CHECK(run_to_end(&w) == KILN_OK);
    check_as_alone(&w);
    CHECK(w.fake.max_step_tokens <= 7 && w.fake.max_step_seqs <= 4);
    world_close(&w);
    /* both at once: a small budget and a tiny cache */
    make_requests(reqs, 16, 5, 10, 50, 30);
    world_open(&w, &(setup){.n_blocks = 24, .block_size = 4, .budget = 5, .max_seqs = 5}, reqs, 16);
    for (int i = 0; i < 16; i++) add_request(&w, i);
    CHECK(run_to_end(&w) == KILN_OK);
    check_as_alone(&w);
    world_close(&w);
}

static void test_abort(void) {
    world w;
    make_requests(reqs, 6, 6, 20, 30, 40);
    for (int i = 0; i < 6; i++) reqs[i].stop = -1, reqs[i].max_tokens = 40;
    world_open(&w, &(setup){.n_blocks = 64, .block_size = 4, .budget = 128, .max_seqs = 3}, reqs, 6);
    for (int i = 0; i < 6; i++) add_request(&w, i);
    const kiln_sched_event *ev;
    int n;
    for (int k = 0; k < 4; k++) {
        CHECK(kiln_scheduler_step(w.s, &ev, &n) == KILN_OK);
        take_events(ev, n);
    }
    kiln_scheduler_stats before = kiln_scheduler_get_stats(w.s);
    CHECK(before.running == 3 && before.waiting == 3 && before.kv_blocks_used > 0);
    CHECK(kiln_scheduler_finish(w.s, reqs[1].id, KILN_FINISH_ABORTED) == KILN_OK);       /* running */
    CHECK(kiln_scheduler_finish(w.s, reqs[5].id, KILN_FINISH_STOP_STRING) == KILN_OK);   /* waiting */
    CHECK(kiln_scheduler_finish(w.s, reqs[1].id, KILN_FINISH_ABORTED) == KILN_ERR_INVALID_ARGUMENT);
    CHECK(kiln_scheduler_finish(w.s, 9999, KILN_FINISH_ABORTED) == KILN_ERR_INVALID_ARGUMENT);
    CHECK(kiln_scheduler_finish(w.s, reqs[0].id, KILN_FINISH_LENGTH) == KILN_ERR_INVALID_ARGUMENT);
    kiln_scheduler_stats after = kiln_scheduler_get_stats(w.s);
    /* request 1 held ceil((prompt + 4 generated - 1) / 4) blocks, which are free again */
    int held = (reqs[1].n_prompt + reqs[1].n_out - 1 + 3) / 4;
    CHECK(after.running == 2 && after.waiting == 2 && after.kv_blocks_used == before.kv_blocks_used - held);
    CHECK(run_to_end(&w) == KILN_OK);
    CHECK(reqs[1].finish == KILN_FINISH_ABORTED && reqs[1].n_final == 1 && reqs[1].n_out == 4);
    CHECK(reqs[5].finish == KILN_FINISH_STOP_STRING && reqs[5].n_final == 1 && reqs[5].n_out == 0);
    for (int i = 0; i < 6; i++) {
        if (i == 1 || i == 5) continue;
        CHECK(reqs[i].n_final == 1 && reqs[i].n_out == reqs[i].n_want &&
              !memcmp(reqs[i].out, reqs[i].want, (size_t)reqs[i].n_want * sizeof(int32_t)));
    }
    world_close(&w);
}

static void test_too_large_and_limits(void) {
    world w;
    make_requests(reqs, 5, 7, 5, 12, 10);
    reqs[2].n_prompt = 30; /* 30 + 10 tokens need 10 blocks of 4; the cache has 8 */
    reqs[2].max_tokens = 10;
    world_open(&w, &(setup){.n_blocks = 8, .block_size = 4, .budget = 16, .max_seqs = 4}, reqs, 5);
    for (int i = 0; i < 5; i++) add_request(&w, i);
    CHECK(run_to_end(&w) == KILN_OK);
    CHECK(reqs[2].finish == KILN_FINISH_ERROR && reqs[2].n_final == 1 && reqs[2].n_out == 0);
    CHECK(strstr(reqs[2].message, "KV-cache blocks") && strstr(reqs[2].message, "8 blocks"));
    for (int i = 0; i < 5; i++)
        if (i != 2) CHECK(reqs[i].n_final == 1 && reqs[i].finish == reqs[i].want_finish && reqs[i].n_out == reqs[i].n_want);
    world_close(&w);
    /* the context limit ends generation with "length" */
    make_requests(reqs, 2, 8, 10, 10, 1);
    reqs[0].max_tokens = reqs[1].max_tokens = 100;
    reqs[0].stop = reqs[1].stop = -1;
    world_open(&w, &(setup){.n_blocks = 64, .block_size = 4, .budget = 16, .max_seqs = 4, .max_model_len = 16}, reqs, 2);
    add_request(&w, 0);
    add_request(&w, 1);
    CHECK(run_to_end(&w) == KILN_OK);
    check_as_alone(&w);
    CHECK(reqs[0].n_out == 6 && reqs[0].finish == KILN_FINISH_LENGTH);
    /* invalid requests are refused and queue nothing */
    int32_t bad_token = V, ok[16] = {0};
    kiln_request_params p = {.prompt = ok, .n_prompt = 1, .max_tokens = 1, .sampling = kiln_sampling_defaults()};
    uint64_t id;
    p.n_prompt = 0;
    CHECK(kiln_scheduler_add(w.s, &p, &id) == KILN_ERR_INVALID_ARGUMENT && id == 0);
    p.n_prompt = 16; /* = max_model_len */
    CHECK(kiln_scheduler_add(w.s, &p, &id) == KILN_ERR_INVALID_ARGUMENT);
    p.n_prompt = 1;
    p.max_tokens = 0;
    CHECK(kiln_scheduler_add(w.s, &p, &id) == KILN_ERR_INVALID_ARGUMENT);
    p.max_tokens = 1;
    p.prompt = &bad_token;
    CHECK(kiln_scheduler_add(w.s, &p, &id) == KILN_ERR_INVALID_ARGUMENT && strstr(kiln_last_error(), "vocabulary"));
    p.prompt = ok;
    p.sampling.top_p = 2;
    CHECK(kiln_scheduler_add(w.s, &p, &id) == KILN_ERR_INVALID_ARGUMENT && strstr(kiln_last_error(), "top_p"));
    CHECK(!kiln_scheduler_has_work(w.s));
    world_close(&w);
}

/* After an injected failure (forward or sample function) in a run of the 6 requests of reqs: each
 * ended once; one or two (the failed batch) with the message, the others with all their tokens. */
static void check_failed_batch(void) {
    int errors = 0;
    for (int i = 0; i < 6; i++) {
        req *r = &reqs[i];
        CHECK(r->n_final == 1);
        if (r->finish == KILN_FINISH_ERROR) {
            errors++;
            CHECK(strstr(r->message, "injected failure") != NULL);
        } else {
            CHECK(r->n_out == r->n_want && !memcmp(r->out, r->want, (size_t)r->n_want * sizeof *r->out));
        }
    }
    CHECK(errors >= 1 && errors <= 2);
}

/* NaN logits at context 25 (sampled on the host, or on_device through the sample function, which
 * hands those rows back): the requests that sample there end alone with the error, the others
 * finish. */
static void check_nan_requests(bool on_device) {
    world w;
    make_requests(reqs, 12, 11, 5, 20, 20);
    world_open(&w, &(setup){.n_blocks = 128, .block_size = 4, .budget = 64, .max_seqs = 4, .on_device = on_device},
               reqs, 12);
    w.fake.nan_ctx_len = 25;
    for (int i = 0; i < 12; i++) add_request(&w, i);
    CHECK(run_to_end(&w) == KILN_OK);
    int errors = 0;
    for (int i = 0; i < 12; i++) {
        req *r = &reqs[i];
        int k = r->n_prompt + r->n_want > 25 ? 25 - r->n_prompt : r->n_want; /* tokens before the NaN */
        CHECK(r->n_final == 1 && r->n_out == k && !memcmp(r->out, r->want, (size_t)k * sizeof *r->out));
        CHECK((r->finish == KILN_FINISH_ERROR) == (k < r->n_want));
        if (r->finish == KILN_FINISH_ERROR) CHECK(strstr(r->message, "is nan") != NULL);
        errors += r->finish == KILN_FINISH_ERROR;
    }
    CHECK(errors > 0 && errors < 12);
    world_close(&w);
}

static void test_forward_failure(void) {
    world w;
    make_requests(reqs, 6, 9, 5, 20, 20);
    world_open(&w, &(setup){.n_blocks = 128, .block_size = 4, .budget = 64, .max_seqs = 2}, reqs, 6);
    w.fake.fail_at_call = 3;
    for (int i = 0; i < 6; i++) add_request(&w, i);
    CHECK(run_to_end(&w) == KILN_ERR_BACKEND);
    check_failed_batch();
    world_close(&w);
    /* NaN logits end that request alone: those that sample at context 25 */
    check_nan_requests(false);
}

/* The sample function (kiln_sample_fn): the same tokens as host sampling with every row sampled by
 * it, with the logprobs rows handed back, through preemption and chunked prefill; a NaN row handed
 * back ends that request alone; a failing sample function ends its batch. */
static void test_sample_fn(void) {
    world w;
    make_requests(reqs, MAX_REQ, 1, 1, 60, 40);
    world_open(&w, &(setup){.n_blocks = 1024, .block_size = 16, .budget = 128, .max_seqs = 16, .on_device = true}, reqs,
               MAX_REQ);
    for (int i = 0; i < MAX_REQ; i++) add_request(&w, i);
    CHECK(run_to_end(&w) == KILN_OK);
    check_as_alone(&w);
    CHECK(w.fake.dev_rows > 0 && w.fake.host_rows > 0); /* half the requests ask for logprobs */
    world_close(&w);
    make_requests(reqs, 24, 3, 4, 30, 40);
    for (int i = 0; i < 24; i++) reqs[i].sp.logprobs = false;
    world_open(&w, &(setup){.n_blocks = 20, .block_size = 4, .budget = 64, .max_seqs = 8, .on_device = true}, reqs, 24);
    for (int i = 0; i < 24; i++) add_request(&w, i);
    CHECK(run_to_end(&w) == KILN_OK);
    check_as_alone(&w);
    CHECK(kiln_scheduler_get_stats(w.s).preemptions > 0 && w.fake.host_rows == 0 && w.fake.dev_rows > 0);
    world_close(&w);
    make_requests(reqs, 16, 5, 10, 50, 30);
    world_open(&w, &(setup){.n_blocks = 24, .block_size = 4, .budget = 5, .max_seqs = 5, .on_device = true}, reqs, 16);
    for (int i = 0; i < 16; i++) add_request(&w, i);
    CHECK(run_to_end(&w) == KILN_OK);
    check_as_alone(&w);
    world_close(&w);
    /* NaN logits, handed back: the host sampler ends those requests alone */
    check_nan_requests(true);
    /* a failing sample function ends the requests of its batch; the others go on */
    make_requests(reqs, 6, 9, 5, 20, 20);
    world_open(&w, &(setup){.n_blocks = 128, .block_size = 4, .budget = 64, .max_seqs = 2, .on_device = true}, reqs, 6);
    w.fake.fail_sample_at_call = 3;
    for (int i = 0; i < 6; i++) add_request(&w, i);
    CHECK(run_to_end(&w) == KILN_ERR_BACKEND);
    check_failed_batch();
    world_close(&w);
}

/* ------------------------------------------------------------------ prefix caching */

/* Gives requests [0, n) the first shared[i % n_shared] tokens of one of two system prompts (by i % 2,
 * prompt lengths kept), so that they share cached prefixes of lengths around block boundaries. */
static void share_prefixes(req *r, int n, const int *shared, int n_shared) {
    int32_t sys[2][MAX_LEN];
    for (int k = 0; k < 2; k++)
        for (int j = 0; j < MAX_LEN; j++) sys[k][j] = (int32_t)(mix64((uint64_t)(k * MAX_LEN + j) + 77) % V);
    for (int i = 0; i < n; i++) {
        int len = shared[i % n_shared];
        if (r[i].n_prompt < len + 1) r[i].n_prompt = len + 1 + i % 3;
        memcpy(r[i].prompt, sys[i % 2], (size_t)len * sizeof *r[i].prompt);
    }
}

/* Adds request i every `every` steps (all at once with every 0) and runs to the end. */
static void run_staggered(world *w, int every) {
    int added = 0;
    for (int steps = 0; added < w->n || kiln_scheduler_has_work(w->s); steps++) {
        while (added < w->n && (!every || steps % every == 0)) {
            add_request(w, added++);
            if (every) break;
        }
        const kiln_sched_event *ev;
        int n;
        CHECK(kiln_scheduler_step(w->s, &ev, &n) == KILN_OK);
        take_events(ev, n);
    }
}

/* One request after another: the exact hits, a prompt entirely cached still computes its last
 * block, and the forward runs only what was not cached. */
static void test_prefix_hits(void) {
    world w;
    make_requests(reqs, 5, 20, 40, 40, 1);
    for (int i = 0; i < 5; i++) reqs[i].max_tokens = 6, reqs[i].stop = -1;
    memcpy(reqs[1].prompt, reqs[0].prompt, 40 * sizeof(int32_t)); /* all 5 blocks of 8 cached: 4 used */
    memcpy(reqs[2].prompt, reqs[0].prompt, 24 * sizeof(int32_t)); /* 3 blocks */
    memcpy(reqs[3].prompt, reqs[0].prompt, 23 * sizeof(int32_t)); /* 2 blocks */
    memcpy(reqs[4].prompt, reqs[0].prompt, 40 * sizeof(int32_t)); /* prompt 0 and 5 generated tokens */
    memcpy(reqs[4].prompt + 40, reqs[0].want, 5 * sizeof(int32_t));
    reqs[4].n_prompt = 45; /* 5 of its blocks were published as request 0 generated */
    world_open(&w, &(setup){.n_blocks = 64, .block_size = 8, .budget = 64, .max_seqs = 4}, reqs, 5);
    const int hits[5] = {0, 32, 24, 16, 40};
    long want_computed = 0;
    uint64_t queries = 0, hit_tokens = 0;
    for (int i = 0; i < 5; i++) {
        long before = w.fake.computed;
        add_request(&w, i);
        CHECK(run_to_end(&w) == KILN_OK);
        kiln_scheduler_stats st = kiln_scheduler_get_stats(w.s);
        queries += (uint64_t)reqs[i].n_prompt;
        hit_tokens += (uint64_t)hits[i];
        CHECK(st.prefix_cache_queries == queries && st.prefix_cache_hits == hit_tokens);
        CHECK(w.fake.computed - before == reqs[i].n_prompt - hits[i] + reqs[i].n_out - 1);
        CHECK(st.kv_blocks_used == 0 && st.kv_blocks_cached > 0);
        want_computed += reqs[i].n_prompt - hits[i] + reqs[i].n_out - 1;
    }
    CHECK(w.fake.computed == want_computed);
    check_as_alone(&w);
    world_close(&w);
    /* turned off: nothing is found, everything is computed */
    for (int i = 0; i < 5; i++) reqs[i].n_out = reqs[i].n_final = 0;
    world_open(&w, &(setup){.n_blocks = 64, .block_size = 8, .budget = 64, .max_seqs = 4, .no_prefix_cache = true},
               reqs, 5);
    for (int i = 0; i < 5; i++) add_request(&w, i);
    CHECK(run_to_end(&w) == KILN_OK);
    kiln_scheduler_stats st = kiln_scheduler_get_stats(w.s);
    CHECK(st.prefix_cache_queries == 0 && st.prefix_cache_hits == 0 && st.kv_blocks_cached == 0);
    check_as_alone(&w);
    world_close(&w);
}

/* Many requests sharing system prompts (greedy and seeded sampling, logprobs), arriving over time,
 * with and without prefix caching, host and device sampling: the reference tokens every time. */
static void test_prefix_shared_prompts(void) {
    const int shared[] = {7, 8, 9, 15, 16, 17, 31, 32, 33, 48, 64};
    for (int mode = 0; mode < 3; mode++) {
        world w;
        make_requests(reqs, MAX_REQ, 21, 1, 80, 20);
        share_prefixes(reqs, MAX_REQ, shared, 11);
        world_open(&w, &(setup){.n_blocks = 512, .block_size = 8, .budget = 96, .max_seqs = 8,
                                .on_device = mode == 2, .no_prefix_cache = mode == 1}, reqs, MAX_REQ);
        run_staggered(&w, 2);
        check_as_alone(&w);
        kiln_scheduler_stats st = kiln_scheduler_get_stats(w.s);
        if (mode != 1) CHECK(st.prefix_cache_hits > 0 && st.prefix_cache_hits < st.prefix_cache_queries);
        else CHECK(st.prefix_cache_hits == 0);
        printf("shared prompts (%s): %llu of %llu tokens cached, %ld computed\n",
               mode == 1 ? "off" : mode == 2 ? "on, device sampling" : "on", (unsigned long long)st.prefix_cache_hits,
               (unsigned long long)st.prefix_cache_queries, w.fake.computed);
        world_close(&w);
    }
}

/* Shared blocks through preemption (a tiny cache that also evicts), aborts of requests sharing a
 * prefix, and chunked prefill after a cached prefix: the reference tokens, no block leaked. */
static void test_prefix_pressure(void) {
    const int shared[] = {4, 8, 11, 12, 13, 20};
    world w;
    make_requests(reqs, 24, 22, 4, 30, 40);
    share_prefixes(reqs, 24, shared, 6);
    world_open(&w, &(setup){.n_blocks = 24, .block_size = 4, .budget = 64, .max_seqs = 8}, reqs, 24);
    run_staggered(&w, 3);
    check_as_alone(&w);
    kiln_scheduler_stats st = kiln_scheduler_get_stats(w.s);
    CHECK(st.preemptions > 0 && st.prefix_cache_hits > 0 && st.kv_blocks_cached <= 24);
    printf("prefix cache under pressure: %llu preemptions, %llu of %llu tokens cached\n",
           (unsigned long long)st.preemptions, (unsigned long long)st.prefix_cache_hits,
           (unsigned long long)st.prefix_cache_queries);
    world_close(&w);
    /* chunked prefill after the cached prefix */
    make_requests(reqs, 12, 23, 30, 60, 10);
    share_prefixes(reqs, 12, shared, 6);
    world_open(&w, &(setup){.n_blocks = 128, .block_size = 4, .budget = 5, .max_seqs = 4}, reqs, 12);
    run_staggered(&w, 4);
    check_as_alone(&w);
    CHECK(kiln_scheduler_get_stats(w.s).prefix_cache_hits > 0);
    world_close(&w);
    /* aborts: the first request publishes its prompt, four more share it; two are aborted mid-way */
    make_requests(reqs, 5, 24, 30, 30, 1);
    for (int i = 0; i < 5; i++) {
        memcpy(reqs[i].prompt, reqs[0].prompt, 28 * sizeof(int32_t));
        reqs[i].max_tokens = 30, reqs[i].stop = -1;
    }
    world_open(&w, &(setup){.n_blocks = 64, .block_size = 4, .budget = 128, .max_seqs = 8}, reqs, 5);
    add_request(&w, 0);
    const kiln_sched_event *ev;
    int n;
    CHECK(kiln_scheduler_step(w.s, &ev, &n) == KILN_OK);
    take_events(ev, n);
    for (int i = 1; i < 5; i++) add_request(&w, i);
    for (int k = 0; k < 3; k++) {
        CHECK(kiln_scheduler_step(w.s, &ev, &n) == KILN_OK);
        take_events(ev, n);
    }
    CHECK(kiln_scheduler_get_stats(w.s).prefix_cache_hits == 4 * 28);
    CHECK(kiln_scheduler_finish(w.s, reqs[0].id, KILN_FINISH_ABORTED) == KILN_OK);
    CHECK(kiln_scheduler_finish(w.s, reqs[2].id, KILN_FINISH_ABORTED) == KILN_OK);
    CHECK(run_to_end(&w) == KILN_OK);
    for (int i = 0; i < 5; i++) {
        req *r = &reqs[i];
        bool aborted = i == 0 || i == 2;
        CHECK(r->n_final == 1 && r->finish == (aborted ? KILN_FINISH_ABORTED : r->want_finish));
        CHECK(aborted ? r->n_out < r->n_want : r->n_out == r->n_want);
        CHECK(!memcmp(r->out, r->want, (size_t)r->n_out * sizeof *r->out));
    }
    world_close(&w);
}

static void test_config_errors(void) {
    kiln_kv_cache_config kc = {.n_layer = 1, .n_kv_head = 1, .head_dim = 2, .block_size = 4, .n_blocks = 4,
                               .dtype = KILN_F32};
    kiln_kv_cache *kv;
    if (kiln_kv_cache_create(&kc, &kv) != KILN_OK) exit(1);
    kiln_scheduler_config ok = {.forward = fake_forward, .kv = kv, .vocab = V, .max_model_len = 64};
    kiln_scheduler *s = NULL;
    kiln_scheduler_config c = ok;
    c.forward = NULL;
    CHECK(kiln_scheduler_create(&c, &s) == KILN_ERR_INVALID_ARGUMENT && !s);
    c = ok;
    c.max_num_seqs = 8, c.max_num_batched_tokens = 4;
    CHECK(kiln_scheduler_create(&c, &s) == KILN_ERR_INVALID_ARGUMENT && strstr(kiln_last_error(), "max_num_seqs"));
    c = ok;
    c.max_model_len = 1;
    CHECK(kiln_scheduler_create(&c, &s) == KILN_ERR_INVALID_ARGUMENT);
    CHECK(kiln_scheduler_create(&ok, &s) == KILN_OK && s);
    kiln_scheduler_free(s);
    kiln_kv_cache_free(kv);
    CHECK(!strcmp(kiln_finish_reason_name(KILN_FINISH_STOP_TOKEN), "stop_token"));
}

int main(void) {
    test_concurrent();
    test_preemption();
    test_chunked_prefill();
    test_abort();
    test_too_large_and_limits();
    test_forward_failure();
    test_sample_fn();
    test_prefix_hits();
    test_prefix_shared_prompts();
    test_prefix_pressure();
    test_config_errors();
    return checks_report("test_scheduler");
}
