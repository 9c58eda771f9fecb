/* cuda_tuning.h — what cuda_tuning.c (the build's tuning: shapes, cache, budgets) and
 * cuda_tuning_layer.c (timing one layer's candidates) share: the tuner's state and the drop rule. */
#ifndef KILN_CUDA_TUNING_H
#define KILN_CUDA_TUNING_H

#include "backends/cuda/cuda_internal.h"
#include "engine/timing_cache.h"

#include <time.h>

#define TUNE_DROP_RATIO 4.0f /* a probe over this many times the fastest probe so far drops the candidate */
#define TUNE_MUST_REPS 5     /* the fewest repetitions of a candidate that is always timed (the level's, when fewer) */
#define TUNE_DROPS_TO_SKIP 2 /* a cuDNN algorithm dropped on this many layers of a kind is skipped */
#define TUNE_MATH_TYPES 4    /* cudnnMathType_t values */

typedef struct kiln_cuda_tuner {
    kiln_backend_engine *be;
    int level;
    int candidates, reps;   /* the level's: candidates per layer, timed runs per candidate (at most) */
    kiln_cuda_ctx kc;       /* the tuning's own stream, handles and workspace */
    cudaEvent_t ev[2];
    char env[512];          /* GPU and library versions: the prefix of every cache key */
    kiln_timing_cache cache;
    int loaded;             /* records the cache had before this build (later ones were timed now) */
    kiln_tuning_stats *stats;
    bool broken;            /* the device reported an error that may be sticky: stop timing */
    double build_end;       /* kiln_cuda_now_ms() after which no layer is timed (INFINITY: no bound) */
    double layer_ms;        /* each layer's budget (INFINITY: no bound) */
    size_t max_workspace;   /* the workspace candidates are listed and timed with */
    /* per cuDNN algorithm and math type, for ungrouped [0] and grouped [1] convolutions: on how many
     * layers it was dropped as far slower, and whether it was ever timed in full */
    unsigned char conv_dropped[2][CUDNN_CONVOLUTION_FWD_ALGO_COUNT][TUNE_MATH_TYPES];
    bool conv_kept[2][CUDNN_CONVOLUTION_FWD_ALGO_COUNT][TUNE_MATH_TYPES];
} kiln_cuda_tuner;

/* Monotonic wall clock in milliseconds. */
static inline double kiln_cuda_now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

/* cuda_tuning_layer.c — lists node i's candidates under plan p (on scratch buffers of its shapes) and
 * times them within t's bounds; *out gets the fastest (kind HEURISTIC when none could be timed: the
 * reason is logged). Fails only when host memory runs out. */
kiln_status kiln_cuda_tune_layer(kiln_cuda_tuner *t, const kiln_cuda_plan *p, int i, kiln_tactic *out);

#endif
