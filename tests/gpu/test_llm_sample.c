/* test_llm_sample.c — the GPU sampler (kiln_llm_cuda_sample, llm_cuda.h) against the CPU one
 * (kiln_sample_next, the oracle): the tokens must be equal. Vocabularies of 1000, 50257 and 128256
 * tokens, batches of 1 to 64 rows; random logits (normal, of several spreads; some rows rounded to
 * quarters so that values tie, some with -inf entries) with a pool of favoured tokens that the
 * prompt and generated history repeat; per row a random mix of greedy and temperatures, top-k
 * (1 to 1000), top-p, min-p, repetition / frequency / presence penalties, seed and stream position.
 * Passes when at least 99.9 % of the draws agree; each disagreement is printed with the two tokens,
 * their processed logits and the row's parameters (the arithmetic is meant to be identical, so any is
 * a finding: only a float tie at a decision boundary could excuse one). Also checks that a NaN logit
 * and a row asking for logprobs are refused. Without a GPU (or the cuda backend) prints "skipped: no
 * GPU (...)" and exits 77. */
#include "llm/llm_cuda.h"
#include "llm/sampler.h"

#include <math.h>
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
    printf("%s\n", failures ? "FAILED" : "all passed");
    return failures ? 1 : 0;
}
