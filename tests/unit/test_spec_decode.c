/* test_spec_decode.c — speculative decoding by prompt lookup in the scheduler (scheduler_spec.c).
 * Greedy: the same tokens as plain decoding on the bundled GPT-2 (argv[1], models/kjv-gpt2) and a tiny
 * random Llama, in batches that mix speculating and plain requests, with a cache small enough to
 * preempt, a step budget that leaves room for one draft token, prefix caching on, every block free or
 * cached at the end. Sampled (temperature > 0, and
 * with top-k): on a fake Markov model over a 3-token vocabulary, the joint distribution of three
 * generated tokens over many seeds against the exact one (a chi-square check), with and without
 * speculation. Statistics: every draft accepted when the model continues the prompt's cycle, and on
 * GPT-2 with a repetitive prompt some accepted, more than one token per speculating step. Exit 0 = pass. */
#include "check.h"
#include "spec_markov.h"
#include "llm/llm.h"
#include "llm/llm_random.h"
#include "llm/scheduler.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { MAX_REQS = 8, MAX_GEN = 32 };

typedef struct run_result {
    int32_t tokens[MAX_REQS][MAX_GEN];
    int n[MAX_REQS];
    kiln_finish_reason finish[MAX_REQS];
    kiln_scheduler_stats stats;
} run_result;

static kiln_status model_forward(void *m, kiln_kv_cache *kv, const kiln_llm_batch *b, float *logits) {
    return kiln_llm_forward(m, kv, b, logits);
}

/* Runs `n_reqs` greedy requests (prompt i: prompts[i]; odd ones speculate) on model m to the end with a
 * cache of n_blocks blocks of 4 tokens, steps of at most `budget` tokens (4 sequences), draft_tokens
 * draft tokens (0: plain decoding). */
static void run_model(kiln_llm_model *m, int draft_tokens, int n_blocks, int budget, int n_reqs,
                      int32_t prompts[][24], const int *n_prompt, int max_tokens, run_result *out) {
    const kiln_llm_config *c = kiln_llm_model_config(m);
    memset(out, 0, sizeof *out);
    kiln_kv_cache_config kc = {.n_layer = c->n_layer, .n_kv_head = c->n_kv_head, .head_dim = c->head_dim,
                               .block_size = 4, .n_blocks = n_blocks, .dtype = KILN_F32};
    kiln_kv_cache *kv;
    REQUIRE_OK(kiln_kv_cache_create(&kc, &kv));
    kiln_scheduler_config sc = {.forward = model_forward, .model = m, .kv = kv, .vocab = c->vocab,
                                .max_model_len = c->max_pos, .max_num_batched_tokens = budget, .max_num_seqs = 4,
                                .draft_tokens = draft_tokens};
    kiln_scheduler *s;
    REQUIRE_OK(kiln_scheduler_create(&sc, &s));
    for (int i = 0; i < n_reqs; i++) {
        kiln_request_params rp = {.prompt = prompts[i], .n_prompt = n_prompt[i], .max_tokens = max_tokens,
                                  .sampling = kiln_sampling_defaults(), .user = (void *)(intptr_t)i,
                                  .speculate = i % 2 == 1};
        uint64_t id;
        REQUIRE_OK(kiln_scheduler_add(s, &rp, &id));
    }
    for (int steps = 0; kiln_scheduler_has_work(s) && steps < 1000; steps++) {
        const kiln_sched_event *ev;
        int n;
        CHECK_OK(kiln_scheduler_step(s, &ev, &n));
        for (int e = 0; e < n; e++) {
            int i = (int)(intptr_t)ev[e].user;
            if (ev[e].sample.token >= 0) {
                CHECK(out->n[i] < MAX_GEN && ev[e].n_generated == out->n[i] + 1);
                if (out->n[i] < MAX_GEN) out->tokens[i][out->n[i]++] = ev[e].sample.token;
            }
            if (ev[e].finish != KILN_FINISH_NONE) out->finish[i] = ev[e].finish;
        }
    }
    CHECK(!kiln_scheduler_has_work(s));
    out->stats = kiln_scheduler_get_stats(s);
    CHECKF(out->stats.kv_blocks_used == 0, "%d blocks still used", out->stats.kv_blocks_used);
    kiln_scheduler_free(s);
    kiln_kv_cache_free(kv);
}

/* Greedy: speculation changes no token, with preemption (a small cache) and prefix caching. */
static void check_greedy_identical(kiln_llm_model *m, const char *name) {
    const int vocab = kiln_llm_model_config(m)->vocab;
    int32_t prompts[MAX_REQS][24];
    int n_prompt[MAX_REQS];
    for (int i = 0; i < 6; i++) {
        n_prompt[i] = 12 + i % 3 * 4;
        int period = i < 3 ? 3 + i : 24; /* repetitive prompts, then unstructured ones */
        for (int t = 0; t < n_prompt[i]; t++) prompts[i][t] = (int32_t)((t % period * 37 + i * 11 + 5) % vocab);
    }
    static run_result plain, spec, spec_small, spec_tight;
    run_model(m, 0, 64, 64, 6, prompts, n_prompt, 24, &plain);
    run_model(m, 4, 64, 64, 6, prompts, n_prompt, 24, &spec);
    run_model(m, 3, 16, 64, 6, prompts, n_prompt, 24, &spec_small);
    run_model(m, 4, 64, 5, 6, prompts, n_prompt, 24, &spec_tight); /* one token beyond the 4 decodes */
    for (int i = 0; i < 6; i++) {
        CHECKF(plain.n[i] == 24 && plain.finish[i] == KILN_FINISH_LENGTH, "%s request %d: %d tokens", name, i,
               plain.n[i]);
        CHECKF(spec.n[i] == plain.n[i] && !memcmp(spec.tokens[i], plain.tokens[i], sizeof plain.tokens[i]),
               "%s request %d: speculation changed the greedy tokens", name, i);
        CHECKF(spec_small.n[i] == plain.n[i] && !memcmp(spec_small.tokens[i], plain.tokens[i], sizeof plain.tokens[i]),
               "%s request %d: speculation with preemption changed the greedy tokens", name, i);
        CHECKF(spec_tight.n[i] == plain.n[i] && !memcmp(spec_tight.tokens[i], plain.tokens[i], sizeof plain.tokens[i]),
               "%s request %d: speculation in a tight token budget changed the greedy tokens", name, i);
        CHECK(spec.finish[i] == KILN_FINISH_LENGTH && spec_small.finish[i] == KILN_FINISH_LENGTH &&
              spec_tight.finish[i] == KILN_FINISH_LENGTH);
    }
    CHECKF(spec_small.stats.preemptions > 0, "%s: the small cache preempted nobody", name);
    CHECK(plain.stats.spec_steps == 0 && plain.stats.spec_drafted == 0);
    CHECKF(spec_tight.stats.spec_drafted > 0 && spec_tight.stats.spec_drafted < spec.stats.spec_drafted,
           "%s: %llu drafts in the tight budget", name, (unsigned long long)spec_tight.stats.spec_drafted);
    const kiln_scheduler_stats *st = &spec.stats;
    CHECKF(st->spec_steps > 0 && st->spec_accepted <= st->spec_drafted && st->spec_emitted <= st->spec_accepted +
           st->spec_steps, "%s: spec stats steps %llu drafted %llu accepted %llu emitted %llu", name,
           (unsigned long long)st->spec_steps, (unsigned long long)st->spec_drafted,
           (unsigned long long)st->spec_accepted, (unsigned long long)st->spec_emitted);
    CHECKF(spec.stats.steps < plain.stats.steps, "%s: %llu steps with speculation, %llu without", name,
           (unsigned long long)spec.stats.steps, (unsigned long long)plain.stats.steps);
    printf("%s: acceptance %.2f (%llu of %llu drafts), %.2f tokens per speculating step, steps %llu -> %llu\n", name,
           st->spec_drafted ? (double)st->spec_accepted / (double)st->spec_drafted : 0.0,
           (unsigned long long)st->spec_accepted, (unsigned long long)st->spec_drafted,
           st->spec_steps ? (double)st->spec_emitted / (double)st->spec_steps : 0.0,
           (unsigned long long)plain.stats.steps, (unsigned long long)spec.stats.steps);
}

/* ------------------------------------------------------------------ a fake Markov model */

enum { FV = SPEC_FV }; /* the chain's vocabulary */
static float markov[FV][FV]; /* logits of the next token given the last one */

static kiln_status markov_forward(void *model, kiln_kv_cache *kv, const kiln_llm_batch *b, float *logits) {
    (void)model, (void)kv;
    int32_t rows[512];
    int n = kiln_llm_batch_logit_rows(b, NULL);
    if (n > 512) return kiln_error(KILN_ERR_INVALID_ARGUMENT, "markov forward: %d rows", n);
    kiln_llm_batch_logit_rows(b, rows);
    for (int r = 0; r < n; r++) memcpy(logits + (size_t)r * FV, markov[b->tokens[rows[r]]], sizeof markov[0]);
    return KILN_OK;
}

/* The processed distribution after `prev` (temperature, then top-k). */
static void next_probs(int prev, const kiln_sampling_params *p, double *out) {
    double z = 0, mx = -INFINITY;
    for (int v = 0; v < FV; v++) mx = fmax(mx, markov[prev][v] / p->temperature);
    for (int v = 0; v < FV; v++) {
        int better = 0; /* tokens ranked above v (value, then lower id) */
        for (int u = 0; u < FV; u++)
            better += markov[prev][u] > markov[prev][v] || (markov[prev][u] == markov[prev][v] && u < v);
        out[v] = p->top_k && better >= p->top_k ? 0 : exp(markov[prev][v] / p->temperature - mx);
        z += out[v];
    }
    for (int v = 0; v < FV; v++) out[v] /= z;
}

/* markov_chi2's choices of which requests speculate: every one, or none. */
static bool speculate_all(int i) { (void)i; return true; }
static bool speculate_none(int i) { (void)i; return false; }

/* n_draws requests with seeds 1.. (speculating or not) of 3 tokens after a cyclic prompt; the
 * chi-square of the 27 outcomes' counts against the exact joint distribution. */
static double markov_chi2(kiln_sampling_params p, bool speculate, int n_draws, kiln_scheduler_stats *stats) {
    kiln_kv_cache_config kc = {.n_layer = 1, .n_kv_head = 1, .head_dim = 2, .block_size = 4, .n_blocks = 512,
                               .dtype = KILN_F32};
    kiln_kv_cache *kv;
    REQUIRE_OK(kiln_kv_cache_create(&kc, &kv));
    kiln_scheduler_config sc = {.forward = markov_forward, .kv = kv, .vocab = FV, .max_model_len = 64,
                                .max_num_batched_tokens = 256, .max_num_seqs = 32, .draft_tokens = 3};
    kiln_scheduler *s;
    REQUIRE_OK(kiln_scheduler_create(&sc, &s));
    static const int32_t prompt[8] = {0, 1, 2, 0, 1, 2, 0, 1};
    double chi2 = spec_markov_chi2(s, prompt, 8, p, n_draws, speculate ? speculate_all : speculate_none, next_probs, stats);
    kiln_kv_cache_free(kv);
    return chi2;
}

static void check_sampled_distribution(void) {
    const float table[FV][FV] = {{0.2f, 1.5f, 0.4f}, {0.1f, -0.3f, 1.2f}, {1.0f, 0.6f, 0.0f}};
    memcpy(markov, table, sizeof markov);
    kiln_sampling_params p = kiln_sampling_defaults();
    /* 26 degrees of freedom: P(chi2 > 54.1) = 0.001; the seeds are fixed, so the outcome is too */
    for (int pass = 0; pass < 2; pass++) {
        p.temperature = pass ? 0.8f : 1.0f;
        p.top_k = pass ? 2 : 0;
        kiln_scheduler_stats plain_st, spec_st;
        double plain = markov_chi2(p, false, 6000, &plain_st);
        double spec = markov_chi2(p, true, 6000, &spec_st);
        printf("markov T=%.1f top_k=%d: chi2 %.1f plain, %.1f speculating (%llu of %llu drafts accepted)\n",
               p.temperature, p.top_k, plain, spec, (unsigned long long)spec_st.spec_accepted,
               (unsigned long long)spec_st.spec_drafted);
        CHECKF(plain < 54.1, "plain sampling: chi2 %.1f", plain);
        CHECKF(spec < 54.1, "speculative sampling: chi2 %.1f", spec);
        CHECK(spec_st.spec_drafted > 1000 && spec_st.spec_accepted > 0 && spec_st.spec_accepted < spec_st.spec_drafted);
    }
}

/* A model that always continues the cycle 0 1 2 accepts every draft. */
static void check_full_acceptance(void) {
    const float table[FV][FV] = {{0, 5, 0}, {0, 0, 5}, {5, 0, 0}};
    memcpy(markov, table, sizeof markov);
    kiln_kv_cache_config kc = {.n_layer = 1, .n_kv_head = 1, .head_dim = 2, .block_size = 4, .n_blocks = 64,
                               .dtype = KILN_F32};
    kiln_kv_cache *kv;
    REQUIRE_OK(kiln_kv_cache_create(&kc, &kv));
    kiln_scheduler_config sc = {.forward = markov_forward, .kv = kv, .vocab = FV, .max_model_len = 64,
                                .draft_tokens = 4};
    kiln_scheduler *s;
    REQUIRE_OK(kiln_scheduler_create(&sc, &s));
    const int32_t prompt[6] = {0, 1, 2, 0, 1, 2};
    kiln_request_params rp = {.prompt = prompt, .n_prompt = 6, .max_tokens = 21, .sampling = kiln_sampling_defaults(),
                              .speculate = true};
    uint64_t id;
    REQUIRE_OK(kiln_scheduler_add(s, &rp, &id));
    int n_tok = 0, bad = 0;
    while (kiln_scheduler_has_work(s)) {
        const kiln_sched_event *ev;
        int n;
        REQUIRE_OK(kiln_scheduler_step(s, &ev, &n));
        for (int e = 0; e < n; e++)
            if (ev[e].sample.token >= 0) bad += ev[e].sample.token != n_tok++ % FV;
    }
    kiln_scheduler_stats st = kiln_scheduler_get_stats(s);
    CHECKF(n_tok == 21 && !bad, "%d tokens, %d off the cycle", n_tok, bad);
    /* 1 prefill step, then 4 steps of 4 drafts + 1 (20 tokens) */
    CHECKF(st.steps == 5 && st.spec_steps == 4 && st.spec_drafted == 16 && st.spec_accepted == 16 &&
           st.spec_emitted == 20, "steps %llu, spec steps %llu drafted %llu accepted %llu emitted %llu",
           (unsigned long long)st.steps, (unsigned long long)st.spec_steps, (unsigned long long)st.spec_drafted,
           (unsigned long long)st.spec_accepted, (unsigned long long)st.spec_emitted);
    kiln_scheduler_free(s);
    kiln_kv_cache_free(kv);
}

int main(int argc, char **argv) {
    check_full_acceptance();
    check_sampled_distribution();
    kiln_llm_config c;
    kiln_llm_config_init(&c, KILN_LLM_LLAMA, 2, 64, 4, 2, 96, 97, 256);
    kiln_llm_model *m;
    REQUIRE_OK(kiln_llm_model_random(&c, 11, &m));
    check_greedy_identical(m, "tiny llama");
    kiln_llm_model_free(m);
    if (argc > 1) {
        REQUIRE_OK(kiln_llm_model_load_hf(argv[1], &m));
        check_greedy_identical(m, "kjv-gpt2");
        kiln_llm_model_free(m);
    }
    return checks_report("test_spec_decode");
}
