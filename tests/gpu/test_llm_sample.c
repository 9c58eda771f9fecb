/* test_llm_sample.c — the GPU sampler (kiln_llm_cuda_sample, llm_cuda.h) against the CPU one
 * (kiln_sample_next, the oracle): the tokens must be equal. Vocabularies of 1000, 50257 and 128256
 * tokens, batches of 1 to 64 rows; random logits (normal, of several spreads; some rows rounded to
 * quarters so that values tie, some with -inf entries) with a pool of favoured tokens that the
 * prompt and generated history repeat; per row a random mix of greedy and temperatures, top-k
 * (1 to 1000), top-p, min-p, repetition / frequency / presence penalties, seed and stream position.
 * Passes when at least 99.9 % of the draws agree; each disagreement is printed with the two tokens,
 * their processed logits and the row's parameters (the arithmetic is meant to be identical, so any is
 * a finding: only a float tie at a decision boundary could excuse one). Also checks that a NaN logit
 * and a row asking for logprobs are refused.
 *
 * Then the serving path: the scheduler (scheduler.h) over the CUDA runner (llm_runner.h) on tiny
 * random models made on the GPU (GPT-2 with GPT-2's vocabulary of 50257, Llama with GQA), 12 requests
 * of a mix of greedy, greedy with penalties, temperature + top-k + top-p, and temperature + top-p +
 * min-p + penalties, each with its seed, one asking for logprobs, some with a stop id, through chunked
 * prefill (a budget of 64 tokens) and a cache small enough to preempt. Run with the host sampler (the
 * forward returns logits, kiln_sample_next samples) and with the GPU sampler (llm_runner_sample, the
 * scheduler's sample function): every request's tokens and finish reason must be equal, exactly. In
 * the GPU run, every other step's forward also copies its logits aside (the others are only enqueued,
 * as in kiln generate) and the GPU sampler's tokens of that step are checked against kiln_sample_next
 * on them; the logprobs request's rows must be handed back (its events carry logprobs), and no other
 * row may be. Also: KILN_LLM_HOST_SAMPLER=1 gives a runner
 * without the sample function. Without a GPU (or the cuda backend) prints "skipped: no GPU (...)" and
 * exits 77. */
#include "core/status.h"
#include "llm/llm_cuda.h"
#include "llm/llm_random.h"
#include "llm/llm_runner.h"
#include "llm/sampler.h"
#include "llm/scheduler.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MAX_ROWS 64
#define MAX_HIST 64 /* prompt and generated tokens of one row, each */
#define POOL 24     /* favoured tokens the histories draw from */

static uint64_t rng_state = 0x243F6A8885A308D3ull;

static uint64_t rnd(void) { /* xorshift64* */
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return rng_state * 2685821657736338717ull;
}
static double rnd_unit(void) { return (double)(rnd() >> 11) * 0x1.0p-53; }
static int rnd_int(int n) { return (int)(rnd() % (uint64_t)n); }
static float rnd_normal(void) {
    double u = rnd_unit(), v = rnd_unit();
    return (float)(sqrt(-2.0 * log(u + 1e-300)) * cos(6.283185307179586 * v));
}

typedef struct row_case {
    kiln_sampling_params p;
    int32_t prompt[MAX_HIST], gen[MAX_HIST];
    int n_prompt, n_gen;
} row_case;

static void make_row(float *logits, int vocab, row_case *rc) {
    static const float temps[] = {0, 0.3f, 0.7f, 1, 1, 1.5f};
    static const int ks[] = {0, 0, 0, 1, 5, 40, 1000};
    static const float tps[] = {1, 1, 0.5f, 0.9f, 0.95f, 0.999f};
    static const float mps[] = {0, 0, 0.01f, 0.1f};
    static const float sigmas[] = {0.5f, 1, 3, 8};
    const float sigma = sigmas[rnd_int(4)];
    const bool quarters = rnd_int(4) == 0, holes = rnd_int(4) == 0;
    for (int i = 0; i < vocab; i++) {
        float v = sigma * rnd_normal();
        if (quarters) v = roundf(v * 4) / 4;
        if (holes && rnd_int(10) == 0) v = -INFINITY;
        logits[i] = v;
    }
    int pool[POOL];
    for (int j = 0; j < POOL; j++) {
        pool[j] = rnd_int(vocab);
        logits[pool[j]] = sigma * (2.0f + (float)rnd_unit());
    }
    kiln_sampling_params *p = &rc->p;
    *p = kiln_sampling_defaults();
    p->temperature = temps[rnd_int(6)];
    p->top_k = ks[rnd_int(7)];
    p->top_p = tps[rnd_int(6)];
    p->min_p = mps[rnd_int(4)];
    p->repetition_penalty = rnd_int(2) ? 1.0f : (rnd_int(2) ? 1.3f : 0.8f);
    p->frequency_penalty = rnd_int(2) ? 0.0f : (float)(rnd_unit() * 2 - 1);
    p->presence_penalty = rnd_int(2) ? 0.0f : (float)(rnd_unit() * 2 - 1);
    p->seed = rnd();
    rc->n_prompt = 1 + rnd_int(MAX_HIST);
    rc->n_gen = rnd_int(MAX_HIST + 1);
    for (int i = 0; i < rc->n_prompt; i++) rc->prompt[i] = rnd_int(3) ? pool[rnd_int(POOL)] : rnd_int(vocab);
    for (int i = 0; i < rc->n_gen; i++) rc->gen[i] = rnd_int(3) ? pool[rnd_int(POOL)] : rnd_int(vocab);
}

static void print_row(const row_case *rc, const float *logits, int cpu, int gpu) {
    const kiln_sampling_params *p = &rc->p;
    printf("  MISMATCH cpu %d (logit %.9g) gpu %d (logit %.9g): T %g top_k %d top_p %g min_p %g rep %g freq %g pres %g "
           "seed %llu n_gen %d n_prompt %d\n",
           cpu, logits[cpu], gpu, gpu >= 0 ? logits[gpu] : NAN, p->temperature, p->top_k, p->top_p, p->min_p,
           p->repetition_penalty, p->frequency_penalty, p->presence_penalty, (unsigned long long)p->seed, rc->n_gen,
           rc->n_prompt);
}

/* ---------------------------------------------------------------- the scheduler over the CUDA runner */

#define SCHED_REQS 12
#define SCHED_MAX_NEW 40
#define SCHED_SEQS 8
#define SCHED_BUDGET 64
#define SCHED_BLOCK 16
#define SCHED_BLOCKS 30 /* 8 sequences of up to 100 tokens need 56: the scheduler preempts */
#define LOGPROBS_REQ 5

typedef struct sched_req_case {
    int32_t prompt[64];
    int n_prompt, max_tokens;
    kiln_sampling_params sp;
    int32_t stop;
    int n_stop;
} sched_req_case;

typedef struct sched_out {
    int32_t tokens[SCHED_REQS][SCHED_MAX_NEW];
    int n[SCHED_REQS];
    kiln_finish_reason finish[SCHED_REQS];
    int logprob_events; /* events of LOGPROBS_REQ that carry logprobs (n_top >= 1) */
    uint64_t preemptions, steps;
} sched_out;

/* The test's view of one run: the runner, and the checks of the GPU sampler's rows. */
typedef struct sched_ctx {
    llm_runner *rn;
    int vocab;
    float *step_logits; /* [SCHED_SEQS, vocab]: the GPU run's logits of the last step, copied aside */
    bool copied;        /* the last step's logits were copied aside (every other step) */
    int steps;
    kiln_sampler *cpu;
    long gpu_rows, checked_rows, back_rows, mismatches, bad_backs;
} sched_ctx;

/* The runner's forward. In the GPU run (logits NULL) every other step also copies its logits aside
 * (they stay on the device for the sampler: kiln_llm_cuda_forward keeps them until the next step); the
 * other steps are only enqueued, as in kiln generate and kiln bench. */
static kiln_status sched_forward(void *ctx, kiln_kv_cache *kv, const kiln_llm_batch *b, float *logits) {
    sched_ctx *c = ctx;
    c->copied = !logits && c->steps++ % 2 == 0;
    return llm_runner_forward(c->rn, kv, b, logits ? logits : c->copied ? c->step_logits : NULL);
}

/* llm_runner_sample, each of its tokens checked against kiln_sample_next on the same logits. */
static kiln_status sched_sample(void *ctx, int n_rows, const kiln_sched_sample_row *rows, float *host_logits,
                                int32_t *tokens) {
    sched_ctx *c = ctx;
    kiln_status st = llm_runner_sample(c->rn, n_rows, rows, host_logits, tokens);
    if (st != KILN_OK) return st;
    for (int i = 0; i < n_rows; i++) {
        const kiln_sched_sample_row *q = &rows[i];
        const float *l = c->step_logits + (size_t)q->row * (size_t)c->vocab;
        if (tokens[i] < 0) { /* handed back: the logprobs rows only, with the step's logits */
            c->back_rows++;
            if (!q->params->logprobs || (c->copied && memcmp(host_logits + (size_t)q->row * (size_t)c->vocab, l,
                                                             (size_t)c->vocab * sizeof *l))) {
                printf("  row %d handed back (logprobs %d) or with logits other than the step's\n", q->row,
                       q->params->logprobs);
                c->bad_backs++;
            }
            continue;
        }
        c->gpu_rows++;
        if (q->params->logprobs) c->bad_backs++; /* the GPU sampler cannot give logprobs */
        if (!c->copied) continue;
        c->checked_rows++;
        kiln_sample s;
        if (kiln_sample_next(c->cpu, q->params, l, q->prompt, q->n_prompt, q->generated, q->n_generated, &s) != KILN_OK ||
            s.token != tokens[i]) {
            printf("  MISMATCH in the scheduler run: gpu %d cpu %d (T %g top_k %d top_p %g min_p %g rep %g n_gen %d)\n",
                   tokens[i], s.token, q->params->temperature, q->params->top_k, q->params->top_p, q->params->min_p,
                   q->params->repetition_penalty, q->n_generated);
            c->mismatches++;
        }
    }
    return KILN_OK;
}

static void make_sched_requests(sched_req_case *rq, int vocab) {
    for (int i = 0; i < SCHED_REQS; i++) {
        sched_req_case *r = &rq[i];
        r->n_prompt = 5 + rnd_int(56);
        for (int j = 0; j < r->n_prompt; j++) r->prompt[j] = rnd_int(vocab);
        r->max_tokens = 16 + rnd_int(SCHED_MAX_NEW - 15);
        kiln_sampling_params *p = &r->sp;
        *p = kiln_sampling_defaults();
        p->seed = rnd();
        switch (i % 4) {
        case 0: break; /* greedy */
        case 1: p->temperature = 0.8f, p->top_k = 40, p->top_p = 0.9f; break;
        case 2:
            p->temperature = 1.0f, p->top_p = 0.95f, p->min_p = 0.02f, p->repetition_penalty = 1.3f;
            p->frequency_penalty = 0.5f, p->presence_penalty = 0.4f;
            break;
        case 3: p->repetition_penalty = 1.2f, p->frequency_penalty = 0.3f; break; /* greedy with penalties */
        }
        if (i == LOGPROBS_REQ) p->logprobs = true, p->top_logprobs = 3;
        r->n_stop = i % 3 == 0;
        r->stop = rnd_int(vocab);
    }
}

/* One run of every request through a scheduler over c->rn, sampling on the GPU or on the host. */
static kiln_status sched_run(sched_ctx *c, const kiln_llm_config *cfg, const sched_req_case *rq, bool gpu,
                             sched_out *out) {
    memset(out, 0, sizeof *out);
    c->steps = 0;
    kiln_kv_cache *kv = NULL;
    kiln_scheduler *s = NULL;
    kiln_status st = llm_runner_make_cache(c->rn, SCHED_BLOCKS, SCHED_BLOCK, false, &kv);
    kiln_scheduler_config sc = {.forward = sched_forward, .sample = gpu ? sched_sample : NULL, .model = c, .kv = kv,
                                .vocab = cfg->vocab, .max_model_len = cfg->max_pos,
                                .max_num_batched_tokens = SCHED_BUDGET, .max_num_seqs = SCHED_SEQS};
    if (st == KILN_OK) st = kiln_scheduler_create(&sc, &s);
    for (int i = 0; st == KILN_OK && i < SCHED_REQS; i++) {
        kiln_request_params p = {.prompt = rq[i].prompt, .n_prompt = rq[i].n_prompt, .max_tokens = rq[i].max_tokens,
                                 .sampling = rq[i].sp, .stop_ids = &rq[i].stop, .n_stop_ids = rq[i].n_stop,
                                 .user = (void *)(intptr_t)i};
        uint64_t id;
        st = kiln_scheduler_add(s, &p, &id);
    }
    while (st == KILN_OK && kiln_scheduler_has_work(s)) {
        const kiln_sched_event *ev;
        int n;
        st = kiln_scheduler_step(s, &ev, &n);
        for (int k = 0; k < n; k++) {
            const int i = (int)(intptr_t)ev[k].user;
            if (ev[k].sample.token >= 0 && out->n[i] < SCHED_MAX_NEW) {
                out->tokens[i][out->n[i]++] = ev[k].sample.token;
                if (i == LOGPROBS_REQ && ev[k].sample.n_top >= 1 && ev[k].sample.logprob <= 0) out->logprob_events++;
            }
            if (ev[k].finish == KILN_FINISH_ERROR && st == KILN_OK)
                st = kiln_error(KILN_ERR_INTERNAL, "request %d: %s", i, ev[k].message);
            if (ev[k].finish != KILN_FINISH_NONE) out->finish[i] = ev[k].finish;
        }
    }
    if (s) {
        kiln_scheduler_stats ss = kiln_scheduler_get_stats(s);
        out->preemptions = ss.preemptions;
        out->steps = ss.steps;
    }
    kiln_scheduler_free(s);
    kiln_kv_cache_free(kv);
    return st;
}

static bool same_outputs(const sched_out *a, const sched_out *b, const char *what) {
    bool same = true;
    for (int i = 0; i < SCHED_REQS; i++) {
        if (a->n[i] == b->n[i] && a->finish[i] == b->finish[i] &&
            !memcmp(a->tokens[i], b->tokens[i], (size_t)a->n[i] * sizeof(int32_t)))
            continue;
        int j = 0;
        while (j < a->n[i] && j < b->n[i] && a->tokens[i][j] == b->tokens[i][j]) j++;
        printf("  %s: request %d differs: %d vs %d tokens (%s vs %s), first at token %d\n", what, i, a->n[i], b->n[i],
               kiln_finish_reason_name(a->finish[i]), kiln_finish_reason_name(b->finish[i]), j);
        same = false;
    }
    return same;
}

/* The scheduler test on one model shape; returns its failures. */
static int sched_case(const char *name, const kiln_llm_config *cfg) {
    int failures = 0;
    llm_runner_options ro = {.target = "cuda", .device = 0, .max_seqs = SCHED_SEQS, .max_tokens = SCHED_BUDGET,
                             .max_context = 128, .bf16 = false};
    char desc[256];
    sched_ctx c = {.vocab = cfg->vocab};
    static sched_out warm, host, gpu;
    sched_req_case rq[SCHED_REQS];
    make_sched_requests(rq, cfg->vocab);
    kiln_status st = llm_runner_create_random(cfg, 77, &ro, desc, sizeof desc, &c.rn);
    if (st == KILN_OK && !llm_runner_sample_fn(c.rn)) st = kiln_error(KILN_ERR_INTERNAL, "the CUDA runner has no sample function");
    c.step_logits = malloc((size_t)SCHED_SEQS * (size_t)cfg->vocab * sizeof(float));
    if (st == KILN_OK && !c.step_logits) st = kiln_error(KILN_ERR_OUT_OF_MEMORY, "out of memory");
    if (st == KILN_OK) st = kiln_sampler_create(cfg->vocab, &c.cpu);
    /* a warm-up run first: cuBLASLt autotuning and graph capture settle, so both runs see the same logits */
    if (st == KILN_OK) st = sched_run(&c, cfg, rq, false, &warm);
    if (st == KILN_OK) st = sched_run(&c, cfg, rq, false, &host);
    if (st == KILN_OK) st = sched_run(&c, cfg, rq, true, &gpu);
    if (st != KILN_OK) {
        printf("FAIL: scheduler on %s: %s\n", name, kiln_last_error());
        failures++;
    } else {
        int n_tok = 0;
        for (int i = 0; i < SCHED_REQS; i++) n_tok += gpu.n[i];
        const bool same = same_outputs(&host, &gpu, "host vs GPU sampler");
        if (!same && !same_outputs(&warm, &host, "host run vs the warm-up run"))
            printf("  (the forward itself gave different logits in two host runs)\n");
        failures += !same;
        if (c.mismatches || c.bad_backs || !c.checked_rows || !c.back_rows ||
            c.back_rows != gpu.n[LOGPROBS_REQ] || gpu.logprob_events != gpu.n[LOGPROBS_REQ]) {
            printf("FAIL: %s: %ld GPU rows (%ld checked), %ld mismatches, %ld rows handed back (%ld wrongly), logprobs "
                   "request: %d tokens, %d with logprobs\n",
                   name, c.gpu_rows, c.checked_rows, c.mismatches, c.back_rows, c.bad_backs, gpu.n[LOGPROBS_REQ], gpu.logprob_events);
            failures++;
        }
        printf("scheduler on %s: %d requests, %d tokens in %llu steps (%llu preemptions); %ld rows sampled on the GPU, "
               "%ld of them checked against the CPU sampler, %ld handed back for logprobs: %s\n",
               name, SCHED_REQS, n_tok, (unsigned long long)gpu.steps, (unsigned long long)gpu.preemptions, c.gpu_rows,
               c.checked_rows, c.back_rows, failures ? "FAILED" : "same tokens as the host sampler");
    }
    kiln_sampler_free(c.cpu);
    free(c.step_logits);
    llm_runner_free(c.rn);
    return failures;
}

/* The serving path on two shapes, and the KILN_LLM_HOST_SAMPLER switch. */
static int test_scheduler_runs(void) {
    int failures = 0;
    kiln_llm_config gpt2, llama;
    kiln_llm_config_init(&gpt2, KILN_LLM_GPT2, 2, 128, 2, 2, 512, 50257, 256);
    gpt2.tied_embeddings = true;
    kiln_llm_config_init(&llama, KILN_LLM_LLAMA, 2, 256, 4, 2, 352, 512, 256);
    failures += sched_case("gpt2 (vocab 50257)", &gpt2);
    failures += sched_case("llama (vocab 512, gqa 2)", &llama);
    setenv("KILN_LLM_HOST_SAMPLER", "1", 1);
    llm_runner_options ro = {.target = "cuda", .max_seqs = 2, .max_tokens = 16, .max_context = 64};
    char desc[256];
    llm_runner *rn = NULL;
    if (llm_runner_create_random(&llama, 1, &ro, desc, sizeof desc, &rn) != KILN_OK || llm_runner_sample_fn(rn) ||
        !strstr(desc, "KILN_LLM_HOST_SAMPLER")) {
        printf("FAIL: KILN_LLM_HOST_SAMPLER=1 still samples on the GPU (%s)\n", desc);
        failures++;
    }
    llm_runner_free(rn);
    unsetenv("KILN_LLM_HOST_SAMPLER");
    return failures;
}

int main(void) {
    char desc[256];
    if (kiln_llm_cuda_device_check(0, desc, sizeof desc) != KILN_OK) {
        printf("skipped: no GPU (%s)\n", desc);
        return 77;
    }
    printf("test_llm_sample on %s\n", desc);
    static const int vocabs[] = {1000, 50257, 128256};
    static const int batches[] = {80, 8, 5}; /* batches per vocabulary: about 2 900, 260 and 180 draws */
    static const int row_counts[] = {64, 1, 13, 64, 37};
    int failures = 0;
    long draws = 0, mismatches = 0;
    row_case *rc = malloc(MAX_ROWS * sizeof *rc);
    kiln_llm_cuda_sample_row *rows = malloc(MAX_ROWS * sizeof *rows);
    for (int vi = 0; vi < 3; vi++) {
        const int vocab = vocabs[vi];
        const clock_t t0 = clock();
        double gpu_s = 0;
        long v_draws = 0, v_miss = 0;
        float *logits = malloc((size_t)MAX_ROWS * (size_t)vocab * sizeof *logits);
        kiln_sampler *cpu = NULL;
        kiln_llm_cuda_sampler *gs = NULL;
        if (!logits || !rc || !rows || kiln_sampler_create(vocab, &cpu) != KILN_OK ||
            kiln_llm_cuda_sampler_create(0, vocab, MAX_ROWS, MAX_ROWS * 2 * MAX_HIST, &gs) != KILN_OK) {
            printf("FAIL: setup for vocab %d: %s\n", vocab, kiln_last_error());
            return 1;
        }
        int32_t gpu_tok[MAX_ROWS];
        for (int b = 0; b < batches[vi]; b++) {
            const int n = row_counts[b % 5];
            for (int r = 0; r < n; r++) {
                make_row(logits + (size_t)r * vocab, vocab, &rc[r]);
                rows[r] = (kiln_llm_cuda_sample_row){.params = &rc[r].p, .prompt = rc[r].prompt, .generated = rc[r].gen,
                                                     .n_prompt = rc[r].n_prompt, .n_generated = rc[r].n_gen};
            }
            struct timespec a, z;
            clock_gettime(CLOCK_MONOTONIC, &a);
            if (kiln_llm_cuda_sample(gs, NULL, logits, n, rows, gpu_tok) != KILN_OK) {
                printf("FAIL: vocab %d batch %d: %s\n", vocab, b, kiln_last_error());
                failures++;
                continue;
            }
            clock_gettime(CLOCK_MONOTONIC, &z);
            gpu_s += (double)(z.tv_sec - a.tv_sec) + 1e-9 * (double)(z.tv_nsec - a.tv_nsec);
            for (int r = 0; r < n; r++) {
                kiln_sample s;
                const float *lr = logits + (size_t)r * vocab;
                if (kiln_sample_next(cpu, &rc[r].p, lr, rc[r].prompt, rc[r].n_prompt, rc[r].gen, rc[r].n_gen, &s) !=
                    KILN_OK) {
                    printf("FAIL: cpu sampler: %s\n", kiln_last_error());
                    failures++;
                    continue;
                }
                v_draws++;
                if (s.token != gpu_tok[r]) {
                    v_miss++;
                    print_row(&rc[r], lr, s.token, gpu_tok[r]);
                }
            }
        }
        /* refusals: a NaN logit (named), a row asking for logprobs */
        make_row(logits, vocab, &rc[0]);
        rows[0] = (kiln_llm_cuda_sample_row){.params = &rc[0].p, .prompt = rc[0].prompt, .n_prompt = rc[0].n_prompt};
        logits[vocab / 2] = NAN;
        if (kiln_llm_cuda_sample(gs, NULL, logits, 1, rows, gpu_tok) == KILN_OK || !strstr(kiln_last_error(), "NaN")) {
            printf("FAIL: vocab %d: a NaN logit was not refused\n", vocab);
            failures++;
        }
        logits[vocab / 2] = 0;
        rc[0].p.logprobs = true;
        if (kiln_llm_cuda_sample(gs, NULL, logits, 1, rows, gpu_tok) == KILN_OK) {
            printf("FAIL: vocab %d: a logprobs row was not refused\n", vocab);
            failures++;
        }
        printf("vocab %6d: %5ld draws, %ld mismatches, gpu %.3f s (incl. upload), total %.2f s cpu time\n", vocab, v_draws,
               v_miss, gpu_s, (double)(clock() - t0) / CLOCKS_PER_SEC);
        draws += v_draws;
        mismatches += v_miss;
        kiln_llm_cuda_sampler_free(gs);
        kiln_sampler_free(cpu);
        free(logits);
    }
    free(rc);
    free(rows);
    const double agree = draws ? 1.0 - (double)mismatches / (double)draws : 0.0;
    printf("%ld draws, %ld mismatches: %.4f %% agree (>= 99.9 %% needed)\n", draws, mismatches, 100 * agree);
    if (agree < 0.999) failures++;
    failures += test_scheduler_runs();
    printf("%s\n", failures ? "FAILED" : "all passed");
    return failures ? 1 : 0;
}
