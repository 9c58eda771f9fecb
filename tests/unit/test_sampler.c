/* test_sampler.c — the sampler (src/llm/sampler.h) on distributions whose answers are known: greedy
 * and its tie-break, top-k = 1 equals greedy, top-k keeps the k largest, top-p keeps the minimal
 * nucleus, the min-p threshold, penalties change exactly the right logits by the right amounts,
 * log-probabilities, the same seed gives the same tokens, sample frequencies match the processed
 * probabilities (chi-square with a fixed seed), and parameter / input errors. Exit 0 = pass. */
#include "check.h"
#include "llm/sampler.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NEAR(a, b, tol) (fabs((double)(a) - (double)(b)) <= (tol))

static kiln_sampler *make_sampler(int vocab) {
    kiln_sampler *s = NULL;
    if (kiln_sampler_create(vocab, &s) != KILN_OK) {
        fprintf(stderr, "FAIL: kiln_sampler_create(%d): %s\n", vocab, kiln_last_error());
        exit(1);
    }
    return s;
}

/* One draw with no history beyond n_generated copies of token 0 (which only moves the stream). */
static kiln_sample draw(kiln_sampler *s, const kiln_sampling_params *p, const float *logits, int n_generated) {
    static int32_t zeros[1 << 16];
    kiln_sample out;
    CHECK(kiln_sample_next(s, p, logits, NULL, 0, zeros, n_generated, &out) == KILN_OK);
    return out;
}

static void set_log_probs(float *logits, const double *probs, int n) {
    for (int i = 0; i < n; i++) logits[i] = (float)log(probs[i]) + 3.0f; /* any shift is the same softmax */
}

static void test_greedy(void) {
    kiln_sampler *s = make_sampler(6);
    kiln_sampling_params p = kiln_sampling_defaults();
    float l[6] = {0.5f, 2.0f, -1.0f, 2.0f, 1.9f, -INFINITY};
    kiln_sample out = draw(s, &p, l, 0);
    CHECK(out.token == 1); /* the tie with token 3 goes to the lower id */
    p.logprobs = true;
    p.top_logprobs = 3;
    out = draw(s, &p, l, 7);
    double lse = log(exp(0.5) + 2 * exp(2.0) + exp(-1.0) + exp(1.9));
    CHECK(out.token == 1 && NEAR(out.logprob, 2.0 - lse, 1e-5));
    CHECK(out.n_top == 3 && out.top[0].token == 1 && out.top[1].token == 3 && out.top[2].token == 4);
    CHECK(NEAR(out.top[2].logprob, 1.9 - lse, 1e-5));
    p.top_logprobs = 20; /* only the 5 finite tokens are listed */
    out = draw(s, &p, l, 0);
    CHECK(out.n_top == 5 && out.top[4].token == 2);
    kiln_sampler_free(s);
}

static void test_top_k(void) {
    enum { V = 1000 };
    kiln_sampler *s = make_sampler(V);
    float l[V];
    uint64_t r = 12345;
    kiln_sampling_params greedy = kiln_sampling_defaults(), k1 = greedy;
    k1.temperature = 1.0f;
    k1.top_k = 1;
    for (int trial = 0; trial < 50; trial++) {
        for (int i = 0; i < V; i++) l[i] = (float)(kiln_sample_uniform(r, (uint64_t)(trial * V + i)) * 8 - 4);
        k1.seed = (uint64_t)trial;
        CHECK(draw(s, &k1, l, trial).token == draw(s, &greedy, l, 0).token);
    }
    /* top-k = 5 keeps exactly the five largest logits: they are the only alternatives listed */
    for (int i = 0; i < V; i++) l[i] = (float)i * 0.001f;
    l[17] = 5, l[400] = 4.5f, l[999] = 4, l[3] = 3.5f, l[600] = 3;
    kiln_sampling_params k5 = greedy;
    k5.temperature = 1.0f;
    k5.top_k = 5;
    k5.logprobs = true;
    k5.top_logprobs = 20;
    kiln_sample out = draw(s, &k5, l, 0);
    int want[5] = {17, 400, 999, 3, 600};
    CHECK(out.n_top == 5);
    for (int i = 0; i < 5 && i < out.n_top; i++) CHECK(out.top[i].token == want[i]);
    double lse = log(exp(5.0) + exp(4.5) + exp(4.0) + exp(3.5) + exp(3.0));
    CHECK(NEAR(out.top[0].logprob, 5.0 - lse, 1e-5));
    /* ties at the boundary: the lower ids are kept */
    for (int i = 0; i < V; i++) l[i] = 1.0f;
    k5.top_k = 3;
    out = draw(s, &k5, l, 0);
    CHECK(out.n_top == 3 && out.top[0].token == 0 && out.top[1].token == 1 && out.top[2].token == 2);
    CHECK(out.token <= 2 && NEAR(out.logprob, -log(3.0), 1e-5));
    kiln_sampler_free(s);
}

/* The kept set of a truncation, read through the listed alternatives (never lists removed tokens). */
static int kept(kiln_sampler *s, kiln_sampling_params p, const float *l, int32_t *ids) {
    p.logprobs = true;
    p.top_logprobs = KILN_MAX_TOP_LOGPROBS;
    kiln_sample out = draw(s, &p, l, 0);
    for (int i = 0; i < out.n_top; i++) ids[i] = out.top[i].token;
    return out.n_top;
}

static void test_top_p_min_p(void) {
    kiln_sampler *s = make_sampler(5);
    double probs[5] = {0.05, 0.30, 0.10, 0.50, 0.05}; /* by id; sorted: 3 (.5), 1 (.3), 2 (.1), 0, 4 */
    float l[5];
    set_log_probs(l, probs, 5);
    kiln_sampling_params p = kiln_sampling_defaults();
    p.temperature = 1.0f;
    int32_t ids[KILN_MAX_TOP_LOGPROBS];
    p.top_p = 0.45f;
    CHECK(kept(s, p, l, ids) == 1 && ids[0] == 3);
    p.top_p = 0.75f; /* .5 < .75 <= .8 */
    CHECK(kept(s, p, l, ids) == 2 && ids[0] == 3 && ids[1] == 1);
    p.top_p = 0.85f; /* .8 < .85 <= .9 */
    CHECK(kept(s, p, l, ids) == 3 && ids[2] == 2);
    p.top_p = 0.93f; /* .9 < .93: one of the two 0.05 tokens, the lower id */
    CHECK(kept(s, p, l, ids) == 4 && ids[3] == 0);
    p.top_p = 1.0f;
    CHECK(kept(s, p, l, ids) == 5);
    /* the renormalised log-probability of the nucleus {3, 1} */
    p.top_p = 0.75f;
    p.logprobs = true;
    for (int n = 0; n < 50; n++) {
        kiln_sample out = draw(s, &p, l, n);
        CHECK(out.token == 3 || out.token == 1);
        CHECK(NEAR(out.logprob, log(probs[out.token] / 0.8), 1e-5));
    }
    p.logprobs = false;
    /* min-p: threshold min_p * 0.5 */
    p.top_p = 1.0f;
    p.min_p = 0.5f; /* 0.25: keeps .5, .3 */
    CHECK(kept(s, p, l, ids) == 2 && ids[0] == 3 && ids[1] == 1);
    p.min_p = 0.15f; /* 0.075: keeps .5, .3, .1 */
    CHECK(kept(s, p, l, ids) == 3);
    p.min_p = 1.0f; /* only the most likely */
    CHECK(kept(s, p, l, ids) == 1 && ids[0] == 3);
    /* temperature flattens before truncation: at T = 100 all five are nearly equal, min-p 0.9 keeps all */
    p.temperature = 100.0f;
    p.min_p = 0.9f;
    CHECK(kept(s, p, l, ids) == 5);
    kiln_sampler_free(s);
}

static void test_penalties(void) {
    enum { V = 8 };
    kiln_sampler *s = make_sampler(V);
    float l[V] = {0.1f, 1.0f, -1.0f, 2.0f, -0.5f, 0.0f, 0.7f, -2.0f};
    int32_t prompt[] = {1, 2, 5, 1};
    int32_t gen[] = {2, 3, 3, 4};
    kiln_sampling_params p = kiln_sampling_defaults();
    p.repetition_penalty = 2.0f;
    p.frequency_penalty = 0.5f;
    p.presence_penalty = 0.25f;
    p.logprobs = true;
    p.top_logprobs = V;
    /* repetition over prompt+generated {1,2,3,4,5}; frequency/presence over generated {2:1, 3:2, 4:1} */
    double want[V] = {0.1, 1.0 / 2, -1.0 * 2 - 0.75, 2.0 / 2 - 1.25, -0.5 * 2 - 0.75, 0.0, 0.7, -2.0};
    kiln_sample out;
    CHECK(kiln_sample_next(s, &p, l, prompt, 4, gen, 4, &out) == KILN_OK);
    CHECK(out.n_top == V);
    double got[V];
    for (int i = 0; i < out.n_top; i++) got[out.top[i].token] = out.top[i].logprob;
    for (int i = 1; i < V; i++) CHECK(NEAR(got[i] - got[0], want[i] - want[0], 1e-5));
    CHECK(out.token == 6); /* 0.7 is now the largest */
    /* the input logits are not modified */
    CHECK(l[1] == 1.0f && l[3] == 2.0f);
    /* a negative presence penalty raises the generated tokens only */
    kiln_sampling_params q = kiln_sampling_defaults();
    q.presence_penalty = -2.0f;
    CHECK(kiln_sample_next(s, &q, l, prompt, 4, gen, 4, &out) == KILN_OK && out.token == 3);
    /* repeated calls leave no state behind: without penalties the argmax is token 3 again */
    CHECK(kiln_sample_next(s, &p, l, NULL, 0, NULL, 0, &out) == KILN_OK && out.token == 3);
    kiln_sampler_free(s);
}

static void test_seed(void) {
    enum { V = 50 };
    kiln_sampler *s = make_sampler(V);
    float l[V];
    for (int i = 0; i < V; i++) l[i] = (float)((i * 37) % 11) * 0.3f;
    kiln_sampling_params p = kiln_sampling_defaults();
    p.temperature = 1.3f;
    p.top_p = 0.95f;
    p.seed = 42;
    int a[64], b[64], c[64], differ = 0;
    for (int n = 0; n < 64; n++) a[n] = draw(s, &p, l, n).token;
    for (int n = 63; n >= 0; n--) b[n] = draw(s, &p, l, n).token; /* order of calls does not matter */
    p.seed = 43;
    for (int n = 0; n < 64; n++) c[n] = draw(s, &p, l, n).token;
    for (int n = 0; n < 64; n++) {
        CHECK(a[n] == b[n]);
        differ += a[n] != c[n];
    }
    CHECK(differ > 16);
    kiln_sampler_free(s);
}

/* Draws n samples (request seeds p->seed + i, stream positions i % 64) and returns Pearson's
 * chi-square against expected probabilities. */
static double chi_square(kiln_sampler *s, const kiln_sampling_params *p, const float *l, const double *expect,
                         int vocab, int n) {
    int count[16] = {0};
    kiln_sampling_params q = *p;
    for (int i = 0; i < n; i++) {
        q.seed = p->seed + (uint64_t)i;
        int t = draw(s, &q, l, i % 64).token;
        if (t >= 0 && t < vocab) count[t]++;
    }
    double chi = 0;
    for (int t = 0; t < vocab; t++) {
        if (expect[t] == 0) {
            CHECK(count[t] == 0);
            continue;
        }
        double e = expect[t] * n;
        chi += (count[t] - e) * (count[t] - e) / e;
    }
    return chi;
}

static void test_frequencies(void) {
    kiln_sampler *s = make_sampler(4);
    double probs[4] = {0.1, 0.2, 0.3, 0.4};
    float l[4];
    set_log_probs(l, probs, 4);
    kiln_sampling_params p = kiln_sampling_defaults();
    p.temperature = 1.0f;
    p.seed = 2024;
    /* chi-square critical value, 3 degrees of freedom, p = 0.001: 16.27 */
    CHECK(chi_square(s, &p, l, probs, 4, 40000) < 16.27);
    /* T = 2: probabilities proportional to sqrt(p) */
    p.temperature = 2.0f;
    double sq[4], z = 0;
    for (int i = 0; i < 4; i++) z += sq[i] = sqrt(probs[i]);
    for (int i = 0; i < 4; i++) sq[i] /= z;
    CHECK(chi_square(s, &p, l, sq, 4, 40000) < 16.27);
    /* top-k 2: {.3, .4} renormalised (1 degree of freedom, p = 0.001: 10.83) */
    p.temperature = 1.0f;
    p.top_k = 2;
    double k2[4] = {0, 0, 3.0 / 7, 4.0 / 7};
    CHECK(chi_square(s, &p, l, k2, 4, 40000) < 10.83);
    /* the stream itself is uniform: mean 1/2, variance 1/12 */
    double sum = 0, sum2 = 0;
    for (int i = 0; i < 100000; i++) {
        double u = kiln_sample_uniform(7, (uint64_t)i);
        CHECK(u >= 0 && u < 1);
        sum += u;
        sum2 += u * u;
    }
    CHECK(NEAR(sum / 1e5, 0.5, 0.005) && NEAR(sum2 / 1e5 - 0.25, 1.0 / 12, 0.002));
    kiln_sampler_free(s);
}

static void test_errors(void) {
    kiln_sampling_params p = kiln_sampling_defaults();
    CHECK(kiln_sampling_validate(&p) == KILN_OK);
    kiln_sampling_params bad[8];
    for (int i = 0; i < 8; i++) bad[i] = p;
    bad[0].temperature = -1;
    bad[1].top_k = -2;
    bad[2].top_p = 0;
    bad[3].min_p = 1.5f;
    bad[4].repetition_penalty = 0;
    bad[5].frequency_penalty = 3;
    bad[6].presence_penalty = NAN;
    bad[7].top_logprobs = KILN_MAX_TOP_LOGPROBS + 1;
    for (int i = 0; i < 8; i++) CHECK(kiln_sampling_validate(&bad[i]) == KILN_ERR_INVALID_ARGUMENT);
    kiln_sampler *s = NULL;
    CHECK(kiln_sampler_create(0, &s) == KILN_ERR_INVALID_ARGUMENT && !s);
    s = make_sampler(3);
    float l[3] = {1, NAN, 0};
    kiln_sample out;
    CHECK(kiln_sample_next(s, &p, l, NULL, 0, NULL, 0, &out) == KILN_ERR_INVALID_ARGUMENT);
    CHECK(strstr(kiln_last_error(), "token 1 is nan") != NULL);
    float pinf[3] = {0, 0, INFINITY};
    CHECK(kiln_sample_next(s, &p, pinf, NULL, 0, NULL, 0, &out) == KILN_ERR_INVALID_ARGUMENT);
    float inf[3] = {-INFINITY, -INFINITY, -INFINITY};
    CHECK(kiln_sample_next(s, &p, inf, NULL, 0, NULL, 0, &out) == KILN_ERR_INVALID_ARGUMENT);
    float ok[3] = {1, 2, 3};
    int32_t prompt[2] = {1, 3};
    CHECK(kiln_sample_next(s, &p, ok, prompt, 2, NULL, 0, &out) == KILN_ERR_INVALID_ARGUMENT);
    CHECK(strstr(kiln_last_error(), "outside the vocabulary") != NULL);
    kiln_sampler_free(s);
}

int main(void) {
    test_greedy();
    test_top_k();
    test_top_p_min_p();
    test_penalties();
    test_seed();
    test_frequencies();
    test_errors();
    return checks_report("test_sampler");
}
