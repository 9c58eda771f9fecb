/* bench_llm_requests.h — kiln bench --llm's requests through the public LLM API (kiln/kiln_llm.h): a
 * set of random-prompt requests submitted to one kiln_llm, each timed from its events' timestamps
 * (the end of the forward step that produced them, CLOCK_MONOTONIC), plus what the report needs per
 * step: the time of the steps that produced first tokens, and (saturated) the most sequences in one
 * step and the most KV blocks in use. Shared by bench_llm.c's batch and saturated runs. */
#ifndef KILN_BENCH_LLM_REQUESTS_H
#define KILN_BENCH_LLM_REQUESTS_H

#include "bench/bench_llm.h"
#include "kiln/kiln_llm.h"

#include <pthread.h>

/* One request; times in ms from the run's start. */
typedef struct bench_llm_req {
    struct bench_llm_run *run;
    int n;                     /* tokens generated */
    double submit_ms, first_ms, end_ms;
    kiln_llm_finish finish;
} bench_llm_req;

typedef struct bench_llm_run {
    kiln_llm *llm;
    const kiln_bench_llm_config *bc;
    int vocab;
    uint64_t pos;              /* the random prompts' stream position */
    int32_t *prompt;           /* [input_len] */
    bench_llm_req *reqs;       /* [n] of the current round */
    int n, submitted, done;
    int limit;                 /* most requests in flight (a new one submitted as one ends); n for a batch */
    double t0;                 /* the round's start, ms CLOCK_MONOTONIC */
    double prefill_ms, prefill_step; /* time of the steps that produced first tokens; the last one counted */
    bool peaks;                /* track the peaks below */
    double step;               /* the step whose events are being delivered */
    int step_running, step_ended, peak_running, peak_kv_blocks;
    kiln_status error;
    char message[320];
    pthread_mutex_t mu;
    pthread_cond_t cv;
} bench_llm_run;

/* A run over llm for bc's workload (the prompt buffer and cap requests per round). */
kiln_status bench_llm_run_init(bench_llm_run *r, kiln_llm *llm, const kiln_bench_llm_config *bc, int vocab, int cap);
void bench_llm_run_free(bench_llm_run *r);
/* One round: n requests, at most limit in flight, until all have ended. Fails when a request could not
 * be submitted or did not end by length with exactly output_len tokens. *wall_ms gets the start to the
 * last request's end. */
kiln_status bench_llm_round(bench_llm_run *r, int n, int limit, double *wall_ms);

#endif
