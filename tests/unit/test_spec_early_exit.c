/* test_spec_early_exit.c — early-exit self-speculation (kiln_llm_options.draft "layers:N"): the draft is
 * the target's first N layers with its final norm and lm_head, on the target's own KV cache. In the
 * scheduler (draft_kv == kv): greedy tokens equal to plain decoding's on a tiny random Llama with
 * N = 1 (some drafts rejected) and N = all layers (the target itself: every draft accepted, which only
 * holds when the shared cache gives each draft step the right keys and values), in batches that mix
 * speculating and plain requests, with a cache small enough to preempt, a tight step budget, prefix
 * caching on, every block free at the end, and with sample functions standing in for the GPU sampler
 * (the drafts chosen and verified by tokens alone, as on CUDA); the same on the bundled GPT-2 (argv[1], models/kjv-gpt2)
 * for N = 1 .. 5, printing each N's acceptance rate and tokens per speculating step. Sampled (temperature
 * 0.8, seeded) with N = 1 on the tiny Llama and N = 4 on the bundled GPT-2: the sample functions (the
 * draft and the target sharing one "device" logits buffer, as the early-exit draft shares the target's
 * runner on CUDA; the plain requests' tokens drawn there, the drafts and their verification handed back
 * as logits_only rows) give the host sampler's tokens and statistics exactly. Through the public
 * API on the CPU: "layers:N" generates plain decoding's tokens and reports its acceptance in the
 * statistics; N < 1, N >= the model's layers and a malformed N are refused naming the range; a batch
 * whose exit_layers is outside 0 .. n_layer is refused. Exit 0 = pass. */
#include "check.h"
#include "kiln/kiln_llm.h"
#include "llm/kv_cache.h"
#include "llm/llm.h"
#include "llm/llm_random.h"
#include "llm/scheduler.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { N_REQS = 6, GEN = 24 };

typedef struct run_result {
    int32_t tokens[N_REQS][GEN];
    int n[N_REQS];
    kiln_scheduler_stats stats;
} run_result;

typedef struct exit_model {
    const kiln_llm_model *m;
    int n_layers;        /* 0: every layer (the target) */
    float *dev;          /* the last step's logits "on the device" (a forward without logits) */
    kiln_sampler *smp;   /* the sample function's */
    int device_rows;     /* rows the sample function gave tokens for */
    int handed_back;     /* rows it handed back (logits_only): drawn on the host */
} exit_model;

static kiln_status exit_forward(void *ctx, kiln_kv_cache *kv, const kiln_llm_batch *b, float *logits) {
    const exit_model *e = ctx;
    kiln_llm_batch head = *b;
    head.exit_layers = e->n_layers;
    return kiln_llm_forward(e->m, kv, &head, logits ? logits : e->dev);
}

/* kiln_sample_fn over the "device" logits: the CPU sampler (the GPU sampler's oracle). */
static kiln_status device_sample(void *ctx, int n_rows, const kiln_sched_sample_row *rows, float *host_logits,
                                 int32_t *tokens) {
    exit_model *e = ctx;
    const int vocab = kiln_llm_model_config(e->m)->vocab;
    for (int i = 0; i < n_rows; i++) {
        const kiln_sched_sample_row *q = &rows[i];
        const float *l = e->dev + (size_t)q->row * vocab;
        kiln_sample smp;
        if (q->logits_only || q->params->logprobs) {
            memcpy(host_logits + (size_t)q->row * vocab, l, sizeof(float) * (size_t)vocab);
            tokens[i] = -1;
            e->handed_back++;
            continue;
        }
        KILN_TRY(kiln_sample_next(e->smp, q->params, l, q->prompt, q->n_prompt, q->generated, q->n_generated, &smp));
        tokens[i] = smp.token;
        e->device_rows++;
    }
    return KILN_OK;
}

/* Runs N_REQS requests, greedy (temperature 0) or sampled (request i seeded i + 1), odd ones
 * speculating with draft_tokens drafts of the first n_layers layers (draft_tokens 0: plain decoding),
 * on m with a cache of n_blocks blocks of 4 tokens and steps of at most `budget` tokens (4 sequences),
 * sampling on the host or (on_device) through device_sample. On the device the draft and the target
 * share one logits buffer, as the early-exit draft shares the target's runner on CUDA. */
static void run(const kiln_llm_model *m, int n_layers, int draft_tokens, int n_blocks, int budget, bool on_device,
                float temperature, run_result *out) {
    const kiln_llm_config *c = kiln_llm_model_config(m);
    memset(out, 0, sizeof *out);
    kiln_kv_cache_config kc = {.n_layer = c->n_layer, .n_kv_head = c->n_kv_head, .head_dim = c->head_dim,
                               .block_size = 4, .n_blocks = n_blocks, .dtype = KILN_F32};
    kiln_kv_cache *kv;
    REQUIRE_OK(kiln_kv_cache_create(&kc, &kv));
    exit_model target = {m, 0, NULL, NULL, 0, 0}, draft = {m, n_layers, NULL, NULL, 0, 0};
    float *dev = NULL; /* [4 sequences x (1 + draft_tokens) rows, vocab] */
    if (on_device) {
        dev = malloc((size_t)4 * (size_t)(1 + draft_tokens) * (size_t)c->vocab * sizeof *dev);
        REQUIRE_OK(dev ? KILN_OK : KILN_ERR_OUT_OF_MEMORY);
        REQUIRE_OK(kiln_sampler_create(c->vocab, &target.smp));
        REQUIRE_OK(kiln_sampler_create(c->vocab, &draft.smp));
        target.dev = dev;
        draft.dev = dev;
    }
    kiln_scheduler_config sc = {.forward = exit_forward, .sample = on_device ? device_sample : NULL,
                                .draft_sample = on_device && draft_tokens ? device_sample : NULL,
                                .model = &target, .kv = kv, .vocab = c->vocab,
                                .max_model_len = c->max_pos, .max_num_batched_tokens = budget, .max_num_seqs = 4,
                                .draft_tokens = draft_tokens, .draft_forward = draft_tokens ? exit_forward : NULL,
                                .draft_model = &draft, .draft_kv = draft_tokens ? kv : NULL};
    kiln_scheduler *s;
    REQUIRE_OK(kiln_scheduler_create(&sc, &s));
    int32_t prompt[24];
    for (int i = 0; i < N_REQS; i++) {
        const int n_prompt = 12 + i % 3 * 4;
        const int period = i < 2 ? 4 : 24, offset = i < 2 ? 5 : i * 11; /* two prompts share a prefix */
        for (int t = 0; t < n_prompt; t++) prompt[t] = (int32_t)((t % period * 37 + offset) % c->vocab);
        kiln_request_params rp = {.prompt = prompt, .n_prompt = n_prompt, .max_tokens = GEN,
                                  .sampling = kiln_sampling_defaults(), .user = (void *)(intptr_t)i,
                                  .speculate = i % 2 == 1};
        rp.sampling.temperature = temperature;
        rp.sampling.seed = (uint64_t)i + 1;
        uint64_t id;
        REQUIRE_OK(kiln_scheduler_add(s, &rp, &id));
    }
    for (int steps = 0; kiln_scheduler_has_work(s) && steps < 1000; steps++) {
        const kiln_sched_event *ev;
        int n;
        CHECK_OK(kiln_scheduler_step(s, &ev, &n));
        for (int e = 0; e < n; e++) {
            const int i = (int)(intptr_t)ev[e].user;
            if (ev[e].sample.token >= 0 && out->n[i] < GEN) out->tokens[i][out->n[i]++] = ev[e].sample.token;
            CHECKF(ev[e].finish != KILN_FINISH_ERROR, "request %d: %s", i, ev[e].message ? ev[e].message : "?");
        }
    }
    CHECK(!kiln_scheduler_has_work(s));
    out->stats = kiln_scheduler_get_stats(s);
    CHECKF(out->stats.kv_blocks_used == 0, "%d blocks still used", out->stats.kv_blocks_used);
    /* greedy: both sample functions give tokens; sampled: the plain requests' tokens come from the target's,
     * the drafts and the rows that verify them are handed back */
    const bool sampled = temperature > 0;
    CHECKF(!on_device || (target.device_rows > 0 && (sampled || draft.device_rows > 0)),
           "the sample functions gave %d and %d tokens", target.device_rows, draft.device_rows);
    CHECKF(!on_device || !sampled || (draft.device_rows == 0 && draft.handed_back > 0 && target.handed_back > 0),
           "sampled: the draft's sample function gave %d tokens and handed back %d rows, the target's %d",
           draft.device_rows, draft.handed_back, target.handed_back);
    kiln_scheduler_free(s);
    kiln_sampler_free(target.smp);
    kiln_sampler_free(draft.smp);
    free(dev);
    kiln_kv_cache_free(kv);
}

/* The first request whose tokens differ between a and b, or -1. */
static int first_difference(const run_result *a, const run_result *b) {
    for (int i = 0; i < N_REQS; i++)
        if (a->n[i] != GEN || b->n[i] != GEN || memcmp(a->tokens[i], b->tokens[i], sizeof a->tokens[i])) return i;
    return -1;
}

/* Greedy tokens of an n_layers draft equal plain decoding's, roomy, preempting, in a tight budget and
 * verified against a sample function's tokens (device: also for the roomy run, on a model whose vocab
 * device_sample's buffer holds); returns the roomy run's acceptance rate. */
static double check_identical(const kiln_llm_model *m, int n_layers, bool device, const char *name) {
    static run_result plain, spec, small, tight, dev;
    run(m, 0, 0, 64, 64, false, 0.0f, &plain);
    run(m, n_layers, 4, 64, 64, false, 0.0f, &spec);
    run(m, n_layers, 3, 16, 64, false, 0.0f, &small);
    run(m, n_layers, 4, 64, 5, false, 0.0f, &tight);
    if (device) {
        run(m, n_layers, 4, 64, 64, true, 0.0f, &dev);
        const int i = first_difference(&plain, &dev);
        CHECKF(i < 0, "%s, layers:%d: request %d's tokens changed when verified against device tokens", name,
               n_layers, i);
        const kiln_scheduler_stats *a = &dev.stats, *b = &spec.stats;
        CHECKF(a->steps == b->steps && a->spec_steps == b->spec_steps && a->spec_drafted == b->spec_drafted &&
               a->spec_accepted == b->spec_accepted && a->spec_emitted == b->spec_emitted,
               "%s, layers:%d: the device verification accepted other drafts", name, n_layers);
    }
    int i = first_difference(&plain, &spec);
    CHECKF(i < 0, "%s, layers:%d: request %d's greedy tokens changed", name, n_layers, i);
    i = first_difference(&plain, &small);
    CHECKF(i < 0, "%s, layers:%d: request %d's tokens changed with preemption", name, n_layers, i);
    i = first_difference(&plain, &tight);
    CHECKF(i < 0, "%s, layers:%d: request %d's tokens changed in a tight budget", name, n_layers, i);
    CHECKF(small.stats.preemptions > 0, "%s: the small cache preempted nobody", name);
    CHECKF(small.stats.prefix_cache_hits > 0, "%s: nothing came from the prefix cache", name);
    const kiln_scheduler_stats *st = &spec.stats;
    CHECKF(st->spec_steps > 0 && st->spec_drafted > 0, "%s, layers:%d: nothing drafted", name, n_layers);
    const double rate = st->spec_drafted ? (double)st->spec_accepted / (double)st->spec_drafted : 0.0;
    printf("%s, layers:%d, 4 drafts: acceptance %.2f (%llu of %llu), %.2f tokens per speculating step, steps %llu -> "
           "%llu\n", name, n_layers, rate, (unsigned long long)st->spec_accepted, (unsigned long long)st->spec_drafted,
           st->spec_steps ? (double)st->spec_emitted / (double)st->spec_steps : 0.0,
           (unsigned long long)plain.stats.steps, (unsigned long long)spec.stats.steps);
    return rate;
}

/* Sampled requests (temperature 0.8) with an n_layers draft: a sample function standing in for the GPU
 * sampler (tokens of the plain requests' rows on the "device", the drafts' and the verifying rows handed
 * back) gives the host sampler's tokens and statistics exactly, roomy and preempting. */
static void check_sampled(const kiln_llm_model *m, int n_layers, const char *name) {
    static run_result host, dev, host_small, dev_small;
    run(m, n_layers, 4, 64, 64, false, 0.8f, &host);
    run(m, n_layers, 4, 64, 64, true, 0.8f, &dev);
    run(m, n_layers, 3, 16, 64, false, 0.8f, &host_small);
    run(m, n_layers, 3, 16, 64, true, 0.8f, &dev_small);
    int i = first_difference(&host, &dev);
    CHECKF(i < 0, "%s, sampled, layers:%d: request %d's tokens differ between the device and the host sampler", name,
           n_layers, i);
    i = first_difference(&host_small, &dev_small);
    CHECKF(i < 0, "%s, sampled, layers:%d: request %d's tokens differ with preemption", name, n_layers, i);
    const kiln_scheduler_stats *a = &dev.stats, *b = &host.stats;
    CHECKF(a->steps == b->steps && a->spec_steps == b->spec_steps && a->spec_drafted == b->spec_drafted &&
           a->spec_accepted == b->spec_accepted && a->spec_emitted == b->spec_emitted,
           "%s, sampled, layers:%d: the device run accepted other drafts", name, n_layers);
    CHECKF(b->spec_drafted > 0 && b->spec_accepted < b->spec_drafted, "%s, sampled, layers:%d: %llu of %llu drafts "
           "accepted (some must be rejected)", name, n_layers, (unsigned long long)b->spec_accepted,
           (unsigned long long)b->spec_drafted);
    CHECKF(host_small.stats.preemptions > 0, "%s, sampled: the small cache preempted nobody", name);
    printf("%s, sampled, layers:%d, 4 drafts: acceptance %.2f (%llu of %llu), device and host samplers agree\n", name,
           n_layers, (double)b->spec_accepted / (double)b->spec_drafted, (unsigned long long)b->spec_accepted,
           (unsigned long long)b->spec_drafted);
}

static int32_t got[GEN]; /* the tokens of check_api's request, by on_event (the engine loop's thread) */
static int n_got;

static void on_event(const kiln_llm_event *ev) {
    if (ev->token >= 0 && n_got < GEN) got[n_got++] = ev->token;
}

/* The public API on the CPU: "layers:1" of tiny-gpt2 (2 layers) gives plain decoding's tokens and
 * counts its drafts; bad N are refused. */
static void check_api(void) {
    const char *bad[] = {"layers:0", "layers:2", "layers:-1", "layers:", "layers:1x"};
    for (size_t k = 0; k < sizeof bad / sizeof *bad; k++) {
        kiln_llm_options o = {.target = "cpu", .draft = bad[k]};
        kiln_llm *llm = NULL;
        CHECKF(kiln_llm_open_random("tiny-gpt2", KILN_PRECISION_FP32, 3, &o, &llm) == KILN_ERR_INVALID_ARGUMENT && !llm,
               "draft %s was not refused", bad[k]);
        CHECKF(strstr(kiln_last_error(), "1 <= N < 2") != NULL, "draft %s: %s", bad[k], kiln_last_error());
        kiln_llm_close(llm);
    }
    int32_t out[2][GEN];
    kiln_llm_stats stats;
    for (int spec = 0; spec < 2; spec++) {
        kiln_llm_options o = {.target = "cpu", .max_seqs = 2, .max_context = 64, .draft = spec ? "layers:1" : NULL,
                              .draft_tokens = 3};
        kiln_llm *llm;
        REQUIRE_OK(kiln_llm_open_random("tiny-gpt2", KILN_PRECISION_FP32, 3, &o, &llm));
        const int32_t prompt[6] = {5, 9, 5, 9, 5, 9};
        kiln_llm_request q = kiln_llm_request_defaults();
        q.prompt_ids = prompt;
        q.n_prompt_ids = 6;
        q.max_tokens = GEN;
        q.ignore_eos = true;
        q.on_event = on_event;
        n_got = 0;
        uint64_t id;
        CHECK_OK(kiln_llm_submit(llm, &q, &id));
        CHECK_OK(kiln_llm_drain(llm, 60000)); /* every event delivered */
        CHECKF(n_got == GEN, "%d tokens", n_got);
        memcpy(out[spec], got, sizeof out[spec]);
        CHECK_OK(kiln_llm_get_stats(llm, &stats));
        kiln_llm_close(llm);
    }
    CHECK(!memcmp(out[0], out[1], sizeof out[0]));
    CHECKF(stats.spec_steps > 0 && stats.spec_drafted > 0, "%llu speculating steps",
           (unsigned long long)stats.spec_steps);
}

/* A batch asking for more layers than the model has, or fewer than none, is refused. */
static void check_batch_refused(const kiln_llm_model *m) {
    const kiln_llm_config *c = kiln_llm_model_config(m);
    kiln_kv_cache_config kc = {.n_layer = c->n_layer, .n_kv_head = c->n_kv_head, .head_dim = c->head_dim,
                               .block_size = 4, .n_blocks = 4, .dtype = KILN_F32};
    kiln_kv_cache *kv;
    REQUIRE_OK(kiln_kv_cache_create(&kc, &kv));
    const int block = kiln_kv_cache_alloc_block(kv);
    const int32_t tokens[1] = {1}, positions[1] = {0}, seq_start[2] = {0, 1}, ctx_len[1] = {1}, table[1] = {block};
    static float logits[256];
    for (int exit_layers = -1; exit_layers <= c->n_layer + 1; exit_layers += c->n_layer + 2) {
        kiln_llm_batch b = {.n_tokens = 1, .tokens = tokens, .positions = positions, .n_seqs = 1,
                            .seq_start = seq_start, .ctx_len = ctx_len, .block_table = table, .max_blocks_per_seq = 1,
                            .exit_layers = exit_layers};
        CHECKF(kiln_llm_forward(m, kv, &b, logits) == KILN_ERR_INVALID_ARGUMENT &&
               strstr(kiln_last_error(), "exit_layers"), "exit_layers %d: %s", exit_layers, kiln_last_error());
    }
    kiln_kv_cache_free(kv);
}

int main(int argc, char **argv) {
    kiln_llm_config c;
    kiln_llm_config_init(&c, KILN_LLM_LLAMA, 2, 64, 4, 2, 96, 97, 256);
    kiln_llm_model *m;
    REQUIRE_OK(kiln_llm_model_random(&c, 11, &m));
    check_batch_refused(m);
    const double whole = check_identical(m, 2, true, "tiny llama");
    CHECKF(whole == 1.0, "the target drafting for itself through the shared cache accepted %.3f", whole);
    const double one = check_identical(m, 1, true, "tiny llama");
    CHECKF(one < 1.0, "the first layer alone accepted every draft (%.3f)", one);
    check_sampled(m, 1, "tiny llama");
    kiln_llm_model_free(m);
    check_api();
    if (argc > 1) {
        REQUIRE_OK(kiln_llm_model_load_hf(argv[1], &m));
        for (int n = 1; n <= 5 && n < kiln_llm_model_config(m)->n_layer; n++) check_identical(m, n, false, "kjv-gpt2");
        if (kiln_llm_model_config(m)->n_layer > 4) check_sampled(m, 4, "kjv-gpt2");
        kiln_llm_model_free(m);
    }
    return checks_report("test_spec_early_exit");
}
