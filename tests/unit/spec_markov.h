/* spec_markov.h — the sampled-distribution check test_spec_decode.c and test_spec_draft.c share: run a
 * scheduler whose target is a Markov chain over SPEC_FV tokens, three sampled tokens per request, and
 * take the chi-square of the 27 outcomes against the chain's exact joint distribution. */
#ifndef KILN_TESTS_SPEC_MARKOV_H
#define KILN_TESTS_SPEC_MARKOV_H

#include "check.h"
#include "llm/scheduler.h"

#include <stdint.h>

enum { SPEC_FV = 3 };

/* The chain's next-token probabilities after token prev under sampling p (out: SPEC_FV values). */
typedef void spec_next_probs_fn(int prev, const kiln_sampling_params *p, double *out);

/* Adds n_draws (<= 20000) requests of prompt, each generating 3 tokens sampled with p seeded i + 1 and
 * speculating when speculate(i) says so, steps s until no work is left, stores its statistics in
 * *stats and frees it (its KV caches stay the caller's); returns the chi-square of the outcomes'
 * counts against next's joint distribution (an outcome of probability 0 that came is a failure). */
static double spec_markov_chi2(kiln_scheduler *s, const int32_t *prompt, int n_prompt, kiln_sampling_params p,
                               int n_draws, bool (*speculate)(int i), spec_next_probs_fn *next,
                               kiln_scheduler_stats *stats) {
    enum { FV = SPEC_FV };
    static int32_t gen[20000][3];
    static int n_gen[20000];
    for (int i = 0; i < n_draws; i++) {
        p.seed = (uint64_t)i + 1;
        kiln_request_params rp = {.prompt = prompt, .n_prompt = n_prompt, .max_tokens = 3, .sampling = p,
                                  .user = (void *)(intptr_t)i, .speculate = speculate(i)};
        uint64_t id;
        REQUIRE_OK(kiln_scheduler_add(s, &rp, &id));
        n_gen[i] = 0;
    }
    while (kiln_scheduler_has_work(s)) {
        const kiln_sched_event *ev;
        int n;
        REQUIRE_OK(kiln_scheduler_step(s, &ev, &n));
        for (int e = 0; e < n; e++) {
            int i = (int)(intptr_t)ev[e].user;
            if (ev[e].sample.token >= 0 && n_gen[i] < 3) gen[i][n_gen[i]++] = ev[e].sample.token;
        }
    }
    *stats = kiln_scheduler_get_stats(s);
    kiln_scheduler_free(s);
    double count[FV * FV * FV] = {0}, expect[FV * FV * FV];
    for (int i = 0; i < n_draws; i++) {
        CHECK(n_gen[i] == 3);
        count[gen[i][0] * FV * FV + gen[i][1] * FV + gen[i][2]]++;
    }
    double p1[FV], p2[FV], p3[FV], chi2 = 0;
    next(prompt[n_prompt - 1], &p, p1);
    for (int a = 0; a < FV; a++) {
        next(a, &p, p2);
        for (int b = 0; b < FV; b++) {
            next(b, &p, p3);
            for (int c = 0; c < FV; c++) expect[a * FV * FV + b * FV + c] = n_draws * p1[a] * p2[b] * p3[c];
        }
    }
    for (int k = 0; k < FV * FV * FV; k++) {
        if (expect[k] == 0) CHECKF(count[k] == 0, "outcome %d has probability 0 but came %g times", k, count[k]);
        else chi2 += (count[k] - expect[k]) * (count[k] - expect[k]) / expect[k];
    }
    return chi2;
}

#endif
