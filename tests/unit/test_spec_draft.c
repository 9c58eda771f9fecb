/* test_spec_draft.c — speculative decoding with a draft model in the scheduler (scheduler_draft.c).
 * Greedy: the same tokens as plain decoding on a tiny random Llama with the target itself as the draft
 * (every draft accepted) and with a different, smaller random model (some rejected), and on the
 * bundled GPT-2 (argv[1], models/kjv-gpt2) drafting for itself, in batches that mix speculating and
 * plain requests, with a cache small enough to preempt, a tight step budget, prefix caching on, every
 * block free or cached at the end. Sampled (temperature > 0, and with top-k): on fake Markov models over
 * a 3-token vocabulary, a draft whose distribution q differs from the target's, the joint distribution
 * of three generated tokens over many seeds against the exact one (a chi-square check), also with a
 * sample function standing in for the GPU sampler (greedy rows' tokens from it, sampled speculating
 * sequences' rows handed back as logits_only and verified on the host). A draft cache
 * that does not match the target's is refused; a failing draft forward ends its step's requests with
 * its message; the sampler accepts a draft from the target's own distribution always and one the target
 * cannot produce never. Exit 0 = pass. */
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

static kiln_kv_cache *cache_for(const kiln_llm_model *m, int n_blocks) {
    const kiln_llm_config *c = kiln_llm_model_config(m);
    kiln_kv_cache_config kc = {.n_layer = c->n_layer, .n_kv_head = c->n_kv_head, .head_dim = c->head_dim,
                               .block_size = 4, .n_blocks = n_blocks, .dtype = KILN_F32};
    kiln_kv_cache *kv;
    REQUIRE_OK(kiln_kv_cache_create(&kc, &kv));
    return kv;
}

/* Runs `n_reqs` greedy requests (odd ones speculate) on target m to the end with caches of n_blocks
 * blocks of 4 tokens, steps of at most `budget` tokens (4 sequences), draft_tokens drafts from the
 * draft model (NULL: plain decoding). */
static void run_model(kiln_llm_model *m, kiln_llm_model *draft, int draft_tokens, int n_blocks, int budget,
                      int n_reqs, int32_t prompts[][24], const int *n_prompt, int max_tokens, run_result *out) {
    const kiln_llm_config *c = kiln_llm_model_config(m);
    memset(out, 0, sizeof *out);
    kiln_kv_cache *kv = cache_for(m, n_blocks), *dkv = draft ? cache_for(draft, n_blocks) : NULL;
    kiln_scheduler_config sc = {.forward = model_forward, .model = m, .kv = kv, .vocab = c->vocab,
                                .max_model_len = c->max_pos, .max_num_batched_tokens = budget, .max_num_seqs = 4,
                                .draft_tokens = draft ? draft_tokens : 0, .draft_forward = draft ? model_forward : NULL,
                                .draft_model = draft, .draft_kv = dkv};
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
    kiln_kv_cache_free(dkv);
}

static bool same_tokens(const run_result *a, const run_result *b, int i) {
    return a->n[i] == b->n[i] && !memcmp(a->tokens[i], b->tokens[i], sizeof a->tokens[i]) &&
           a->finish[i] == b->finish[i];
}

/* Greedy: drafting changes no token, with preemption (a small cache), a tight budget and prefix
 * caching; returns the acceptance rate of the roomy run. */
static double check_greedy_identical(kiln_llm_model *m, kiln_llm_model *draft, const char *name) {
    const int vocab = kiln_llm_model_config(m)->vocab;
    int32_t prompts[MAX_REQS][24];
    int n_prompt[MAX_REQS];
    for (int i = 0; i < 6; i++) {
        n_prompt[i] = 12 + i % 3 * 4;
        const int period = i < 2 ? 4 : 24, offset = i < 2 ? 5 : i * 11; /* two prompts share a prefix */
        for (int t = 0; t < n_prompt[i]; t++) prompts[i][t] = (int32_t)((t % period * 37 + offset) % vocab);
    }
    static run_result plain, spec, spec_small, spec_tight;
    run_model(m, NULL, 0, 64, 64, 6, prompts, n_prompt, 24, &plain);
    run_model(m, draft, 4, 64, 64, 6, prompts, n_prompt, 24, &spec);
    run_model(m, draft, 3, 16, 64, 6, prompts, n_prompt, 24, &spec_small);
    run_model(m, draft, 4, 64, 5, 6, prompts, n_prompt, 24, &spec_tight); /* one token beyond the 4 decodes */
    for (int i = 0; i < 6; i++) {
        CHECKF(plain.n[i] == 24 && plain.finish[i] == KILN_FINISH_LENGTH, "%s request %d: %d tokens", name, i,
               plain.n[i]);
        CHECKF(same_tokens(&spec, &plain, i), "%s request %d: the draft model changed the greedy tokens", name, i);
        CHECKF(same_tokens(&spec_small, &plain, i), "%s request %d: drafting with preemption changed the tokens",
               name, i);
        CHECKF(same_tokens(&spec_tight, &plain, i), "%s request %d: drafting in a tight budget changed the tokens",
               name, i);
    }
    CHECKF(spec_small.stats.preemptions > 0, "%s: the small cache preempted nobody", name);
    CHECKF(spec_small.stats.prefix_cache_hits > 0, "%s: nothing came from the prefix cache", name);
    CHECKF(spec_tight.stats.spec_drafted > 0 && spec_tight.stats.spec_drafted < spec.stats.spec_drafted,
           "%s: %llu drafts in the tight budget", name, (unsigned long long)spec_tight.stats.spec_drafted);
    const kiln_scheduler_stats *st = &spec.stats;
    CHECKF(st->spec_steps > 0 && st->spec_accepted <= st->spec_drafted &&
           st->spec_emitted <= st->spec_accepted + st->spec_steps, "%s: spec stats steps %llu drafted %llu "
           "accepted %llu emitted %llu", name, (unsigned long long)st->spec_steps,
           (unsigned long long)st->spec_drafted, (unsigned long long)st->spec_accepted,
           (unsigned long long)st->spec_emitted);
    const double rate = st->spec_drafted ? (double)st->spec_accepted / (double)st->spec_drafted : 0.0;
    printf("%s: acceptance %.2f (%llu of %llu drafts), %.2f tokens per speculating step, steps %llu -> %llu\n", name,
           rate, (unsigned long long)st->spec_accepted, (unsigned long long)st->spec_drafted,
           st->spec_steps ? (double)st->spec_emitted / (double)st->spec_steps : 0.0,
           (unsigned long long)plain.stats.steps, (unsigned long long)spec.stats.steps);
    return rate;
}

/* ------------------------------------------------------------------ fake Markov models */

enum { FV = SPEC_FV }; /* the chain's vocabulary */
static float markov[FV][FV], markov_draft[FV][FV]; /* logits of the next token given the last one */

static kiln_status table_forward(float table[FV][FV], const kiln_llm_batch *b, float *logits) {
    int32_t rows[512];
    int n = kiln_llm_batch_logit_rows(b, NULL);
    if (n > 512) return kiln_error(KILN_ERR_INVALID_ARGUMENT, "markov forward: %d rows", n);
    kiln_llm_batch_logit_rows(b, rows);
    for (int r = 0; r < n; r++) memcpy(logits + (size_t)r * FV, table[b->tokens[rows[r]]], sizeof table[0]);
    return KILN_OK;
}

/* The last step's logits "on the device" (a forward without logits; the model pointer of the
 * on-device runs), the target's and the draft's. */
static float device_logits[512 * FV], device_draft_logits[512 * FV];
static int device_rows, handed_rows;  /* rows the sample functions sampled / handed back */

static kiln_status markov_forward(void *model, kiln_kv_cache *kv, const kiln_llm_batch *b, float *logits) {
    (void)kv;
    return table_forward(markov, b, logits ? logits : model);
}

static kiln_status markov_draft_forward(void *model, kiln_kv_cache *kv, const kiln_llm_batch *b, float *logits) {
    (void)kv;
    return table_forward(markov_draft, b, logits ? logits : model);
}

/* kiln_sample_fn over the device logits `model`: the CPU sampler (the GPU sampler's oracle), logits_only
 * rows handed back. */
static kiln_status markov_sample(void *model, int n_rows, const kiln_sched_sample_row *rows, float *host_logits,
                                 int32_t *tokens) {
    static kiln_sampler *sm;
    if (!sm) REQUIRE_OK(kiln_sampler_create(FV, &sm));
    for (int i = 0; i < n_rows; i++) {
        const kiln_sched_sample_row *q = &rows[i];
        const float *l = (const float *)model + (size_t)q->row * FV;
        kiln_sample smp;
        if (q->logits_only || q->params->logprobs) {
            memcpy(host_logits + (size_t)q->row * FV, l, sizeof(float) * FV);
            tokens[i] = -1;
            handed_rows++;
            continue;
        }
        REQUIRE_OK(kiln_sample_next(sm, q->params, l, q->prompt, q->n_prompt, q->generated, q->n_generated, &smp));
        tokens[i] = smp.token;
        device_rows++;
    }
    return KILN_OK;
}


/* The target's processed distribution after `prev` (temperature, then top-k). */
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

/* Which requests of markov_chi2 speculate: all but every third. */
static bool speculates(int i) { return i % 3 != 0; }

/* n_draws speculating requests with seeds 1.. of 3 tokens after a prompt, drafted by the Markov draft
 * model (and plain ones too, mixed in: every third request), sampled on the host or (on_device) through
 * markov_sample; the chi-square of the 27 outcomes' counts against the exact joint distribution. */
static double markov_chi2(kiln_sampling_params p, int n_draws, bool on_device, kiln_scheduler_stats *stats) {
    kiln_kv_cache_config kc = {.n_layer = 1, .n_kv_head = 1, .head_dim = 2, .block_size = 4, .n_blocks = 512,
                               .dtype = KILN_F32};
    kiln_kv_cache *kv, *dkv;
    REQUIRE_OK(kiln_kv_cache_create(&kc, &kv));
    REQUIRE_OK(kiln_kv_cache_create(&kc, &dkv));
    kiln_scheduler_config sc = {.forward = markov_forward, .sample = on_device ? markov_sample : NULL,
                                .model = device_logits, .kv = kv, .vocab = FV, .max_model_len = 64,
                                .max_num_batched_tokens = 256, .max_num_seqs = 32, .draft_tokens = 3,
                                .draft_forward = markov_draft_forward, .draft_model = device_draft_logits,
                                .draft_kv = dkv, .draft_sample = on_device ? markov_sample : NULL};
    kiln_scheduler *s;
    REQUIRE_OK(kiln_scheduler_create(&sc, &s));
    static const int32_t prompt[5] = {2, 1, 0, 2, 1};
    double chi2 = spec_markov_chi2(s, prompt, 5, p, n_draws, speculates, next_probs, stats);
    kiln_kv_cache_free(kv);
    kiln_kv_cache_free(dkv);
    return chi2;
}

static void check_sampled_distribution(void) {
    const float table[FV][FV] = {{0.2f, 1.5f, 0.4f}, {0.1f, -0.3f, 1.2f}, {1.0f, 0.6f, 0.0f}};
    const float draft[FV][FV] = {{1.0f, 0.2f, 0.3f}, {0.5f, 0.5f, 0.5f}, {0.0f, 1.4f, -0.5f}}; /* q far from p */
    memcpy(markov, table, sizeof markov);
    memcpy(markov_draft, draft, sizeof markov_draft);
    kiln_sampling_params p = kiln_sampling_defaults();
    /* 26 degrees of freedom: P(chi2 > 54.1) = 0.001; the seeds are fixed, so the outcome is too */
    for (int pass = 0; pass < 4; pass++) {
        p.temperature = pass % 2 ? 0.8f : 1.0f;
        p.top_k = pass % 2 ? 2 : 0;
        const bool on_device = pass >= 2;
        device_rows = handed_rows = 0;
        kiln_scheduler_stats st;
        double chi2 = markov_chi2(p, 6000, on_device, &st);
        printf("markov draft T=%.1f top_k=%d%s: chi2 %.1f (%llu of %llu drafts accepted)\n", p.temperature, p.top_k,
               on_device ? ", sample function" : "", chi2, (unsigned long long)st.spec_accepted,
               (unsigned long long)st.spec_drafted);
        CHECKF(chi2 < 54.1, "draft-model sampling: chi2 %.1f", chi2);
        CHECK(st.spec_drafted > 1000 && st.spec_accepted > 0 && st.spec_accepted < st.spec_drafted);
        CHECKF(!on_device || (device_rows > 0 && handed_rows > 0), "%d rows sampled by the sample function, %d handed "
               "back", device_rows, handed_rows);
    }
}

/* The sampler's two halves: a draft drawn from the target's own distribution is always accepted (p / q =
 * 1); a draft the target cannot produce (outside its top-k) never is, and the replacement is one it can. */
static void check_sampler_draft_dist(void) {
    enum { V = 6 };
    const float target[V] = {0.5f, 2.0f, -1.0f, 1.5f, 0.0f, 1.0f}, other[V] = {3.0f, -2.0f, 0.0f, 0.1f, 2.5f, 0.0f};
    kiln_sampler *sm;
    REQUIRE_OK(kiln_sampler_create(V, &sm));
    kiln_sampling_params p = kiln_sampling_defaults();
    p.temperature = 0.9f;
    const int32_t prompt[1] = {0};
    float q[V];
    int same = 0, outside = 0;
    for (uint64_t seed = 1; seed <= 300; seed++) {
        p.seed = seed;
        p.top_k = 0;
        kiln_sample d, out;
        bool ok;
        REQUIRE_OK(kiln_sample_draft(sm, &p, target, prompt, 1, NULL, 0, q, &d));
        REQUIRE_OK(kiln_sample_verify_draft_dist(sm, &p, target, prompt, 1, NULL, 0, d.token, q, &out, &ok));
        same += ok && out.token == d.token;
        p.top_k = 2; /* the target keeps tokens 1 and 3; the draft (top-k 2 of `other`) proposes 0 or 4 */
        REQUIRE_OK(kiln_sample_draft(sm, &p, other, prompt, 1, NULL, 0, q, &d));
        REQUIRE_OK(kiln_sample_verify_draft_dist(sm, &p, target, prompt, 1, NULL, 0, d.token, q, &out, &ok));
        outside += !ok && (d.token == 0 || d.token == 4) && (out.token == 1 || out.token == 3);
    }
    CHECKF(same == 300, "a draft from the target's own distribution accepted %d of 300 times", same);
    CHECKF(outside == 300, "a draft outside the target's top-k rejected (and replaced from it) %d of 300 times", outside);
    kiln_sampler_free(sm);
}

static kiln_status failing_draft_forward(void *model, kiln_kv_cache *kv, const kiln_llm_batch *b, float *logits) {
    (void)model, (void)kv, (void)b, (void)logits;
    return kiln_error(KILN_ERR_BACKEND, "the draft forward broke");
}

/* A failing draft forward loses the step: its requests end with the message, their blocks given back. */
static void check_draft_failure(void) {
    memcpy(markov, (float[FV][FV]){{0, 5, 0}, {0, 0, 5}, {5, 0, 0}}, sizeof markov);
    kiln_kv_cache_config kc = {.n_layer = 1, .n_kv_head = 1, .head_dim = 2, .block_size = 4, .n_blocks = 16,
                               .dtype = KILN_F32};
    kiln_kv_cache *kv, *dkv;
    REQUIRE_OK(kiln_kv_cache_create(&kc, &kv));
    REQUIRE_OK(kiln_kv_cache_create(&kc, &dkv));
    kiln_scheduler_config sc = {.forward = markov_forward, .kv = kv, .vocab = FV, .max_model_len = 64,
                                .draft_tokens = 2, .draft_forward = failing_draft_forward, .draft_kv = dkv};
    kiln_scheduler *s;
    REQUIRE_OK(kiln_scheduler_create(&sc, &s));
    const int32_t prompt[3] = {0, 1, 2};
    kiln_request_params rp = {.prompt = prompt, .n_prompt = 3, .max_tokens = 8, .sampling = kiln_sampling_defaults(),
                              .speculate = true};
    uint64_t id;
    REQUIRE_OK(kiln_scheduler_add(s, &rp, &id));
    const kiln_sched_event *ev;
    int n;
    CHECK(kiln_scheduler_step(s, &ev, &n) == KILN_ERR_BACKEND);
    CHECKF(n == 1 && ev[0].finish == KILN_FINISH_ERROR && ev[0].message && strstr(ev[0].message, "draft model") &&
           strstr(ev[0].message, "broke"), "%d events, message %s", n, n ? ev[0].message : "-");
    CHECK(kiln_scheduler_get_stats(s).kv_blocks_used == 0);
    kiln_scheduler_free(s);
    kiln_kv_cache_free(kv);
    kiln_kv_cache_free(dkv);
}

/* A draft cache unlike the target's, or half a draft model, is refused. */
static void check_bad_config(void) {
    kiln_kv_cache_config kc = {.n_layer = 1, .n_kv_head = 1, .head_dim = 2, .block_size = 4, .n_blocks = 8,
                               .dtype = KILN_F32};
    kiln_kv_cache *kv, *small;
    REQUIRE_OK(kiln_kv_cache_create(&kc, &kv));
    kc.n_blocks = 4;
    REQUIRE_OK(kiln_kv_cache_create(&kc, &small));
    kiln_scheduler_config sc = {.forward = markov_forward, .kv = kv, .vocab = FV, .max_model_len = 64,
                                .draft_tokens = 2, .draft_forward = markov_draft_forward, .draft_kv = small};
    kiln_scheduler *s = NULL;
    CHECK(kiln_scheduler_create(&sc, &s) == KILN_ERR_INVALID_ARGUMENT && !s);
    CHECK(strstr(kiln_last_error(), "draft") != NULL);
    sc.draft_kv = NULL;
    CHECK(kiln_scheduler_create(&sc, &s) == KILN_ERR_INVALID_ARGUMENT && !s);
    kiln_kv_cache_free(kv);
    kiln_kv_cache_free(small);
}

int main(int argc, char **argv) {
    check_bad_config();
    check_sampler_draft_dist();
    check_draft_failure();
    check_sampled_distribution();
    kiln_llm_config c, dc;
    kiln_llm_config_init(&c, KILN_LLM_LLAMA, 2, 64, 4, 2, 96, 97, 256);
    kiln_llm_config_init(&dc, KILN_LLM_LLAMA, 1, 64, 4, 2, 96, 97, 256);
    kiln_llm_model *m, *small;
    REQUIRE_OK(kiln_llm_model_random(&c, 11, &m));
    REQUIRE_OK(kiln_llm_model_random(&dc, 11, &small));
    double self = check_greedy_identical(m, m, "tiny llama, drafting for itself");
    CHECKF(self == 1.0, "a model drafting for itself accepted %.3f of its drafts", self);
    double other = check_greedy_identical(m, small, "tiny llama, a smaller random draft");
    CHECKF(other < 1.0, "a different random draft model accepted every draft (%.3f)", other);
    kiln_llm_model_free(small);
    kiln_llm_model_free(m);
    if (argc > 1) {
        REQUIRE_OK(kiln_llm_model_load_hf(argv[1], &m));
        self = check_greedy_identical(m, m, "kjv-gpt2, drafting for itself");
        CHECKF(self == 1.0, "kjv-gpt2 drafting for itself accepted %.3f of its drafts", self);
        kiln_llm_model_free(m);
    }
    return checks_report("test_spec_draft");
}
