/* llm_gemv.c — kiln_llm_gemv (llm_gemv.h). The pool's unit of work is a group of four output rows.
 * One token row: a 16-lane accumulator per weight row, whose lane i sums elements i, i+16, ... (as
 * the two 8-lane accumulators of kiln_cpu_sgemm's dot product did); the final reduction adds the
 * halves, then sums ((0+4)+(1+5))+((2+6)+(3+7)), then the tail. Two to eight token rows (a short
 * prefill chunk, or a decode step with speculative decoding's draft tokens): an 8-lane
 * accumulator per token row, the same tree, the tail summed apart. The weights are read ahead with
 * software prefetches (the stream runs at memory speed: 55 MB of GPT-2 weights per token). */
#include "llm/llm_gemv.h"

#include "core/threadpool.h"
#include "llm/llm_cpu_ops.h"

#include <string.h>

#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF /* products rounded before they are added, as GCC's ISO C mode does */
#endif

#if defined(__x86_64__) && defined(__linux__) && !defined(KILN_NO_SIMD_CLONES)
#define GEMV_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define GEMV_CLONES
#endif

#define GROUP 4
/* Bytes ahead of the weight stream's read position that are prefetched, reaching into the rows that
 * follow (a sweep over GPT-2's shapes on one core, huge pages: 2 KiB 32-34 GB/s, 4 KiB 35-38, 8 KiB
 * 39-44, 16 KiB 37-42, 32 KiB 36-38). */
#define PREFETCH_BYTES 8192
/* Below this many multiply-adds a product runs on the calling thread alone. */
#define PARALLEL_MACS (1 << 15)

typedef float v16f __attribute__((vector_size(64)));
typedef float v8f __attribute__((vector_size(32)));

#define LOAD16(p)                                                                                  \
    ({                                                                                             \
        v16f v_;                                                                                   \
        memcpy(&v_, (p), sizeof v_);                                                               \
        v_;                                                                                        \
    })
#define LOAD8(p)                                                                                   \
    ({                                                                                             \
        v8f v_;                                                                                    \
        memcpy(&v_, (p), sizeof v_);                                                               \
        v_;                                                                                        \
    })
/* kiln_cpu_sgemm's reduction of an 8-lane sum. */
#define SUM8(h) (((h[0] + h[4]) + (h[1] + h[5])) + ((h[2] + h[6]) + (h[3] + h[7])))
/* A 16-lane accumulator as the two 8-lane ones it stands for (lanes 0-7 and 8-15), added, summed. */
#define SUM16(v)                                                                                   \
    ({                                                                                             \
        v16f a_ = (v);                                                                             \
        v8f h_ = {a_[0] + a_[8],  a_[1] + a_[9],  a_[2] + a_[10], a_[3] + a_[11],                  \
                  a_[4] + a_[12], a_[5] + a_[13], a_[6] + a_[14], a_[7] + a_[15]};                 \
        SUM8(h_);                                                                                  \
    })

/* y = v + bias (+ y's value when accumulating), as the separate bias step and beta = 1 give it. */
static inline void store_out(const kiln_llm_gemv_args *a, float *y, int o, float v) {
    if (a->accumulate) y[o] = v + (a->bias ? y[o] + a->bias[o] : y[o]);
    else y[o] = a->bias ? v + a->bias[o] : v;
}

/* One token row, output rows [o0, o1): one weight row at a time, so that the read is one forward
 * stream (four rows read side by side, four streams, measured 20-30 % slower here), one 16-lane
 * accumulator per row. */
GEMV_CLONES
static void gemv_one(const kiln_llm_gemv_args *a, int o0, int o1) {
    const int K = a->in, K16 = K & ~15;
    const float *x = a->x;
    for (int o = o0; o < o1; o++) {
        const float *w = (const float *)a->w + (size_t)o * K;
        v16f s = {0};
        for (int k = 0; k < K16; k += 16) {
            __builtin_prefetch((const char *)(w + k) + PREFETCH_BYTES);
            s += LOAD16(w + k) * LOAD16(x + k);
        }
        float r = SUM16(s);
        for (int k = K16; k < K; k++) r += x[k] * w[k];
        store_out(a, a->y, o, r);
    }
}

/* Two to eight token rows, output rows [o0, o1): each weight row read once for all of them. n is a
 * constant where it is inlined (gemv_few), so that the accumulators stay in registers. */
static inline __attribute__((always_inline)) void few_rows(const kiln_llm_gemv_args *a, int o0, int o1, const int n) {
    const int K = a->in, K8 = K & ~7;
    for (int o = o0; o < o1; o++) {
        const float *w = (const float *)a->w + (size_t)o * K;
        v8f acc[KILN_LLM_GEMV_ROWS] = {{0}};
        float tail[KILN_LLM_GEMV_ROWS] = {0};
        for (int k = 0; k < K8; k += 8) {
            __builtin_prefetch((const char *)(w + k) + PREFETCH_BYTES);
            v8f wv = LOAD8(w + k);
#pragma GCC unroll 8
            for (int t = 0; t < n; t++) acc[t] += wv * LOAD8(a->x + (size_t)t * a->ldx + k);
        }
        for (int k = K8; k < K; k++)
            for (int t = 0; t < n; t++) tail[t] += w[k] * a->x[(size_t)t * a->ldx + k];
        for (int t = 0; t < n; t++) store_out(a, a->y + (size_t)t * a->ldy, o, SUM8(acc[t]) + tail[t]);
    }
}

GEMV_CLONES
static void gemv_few(const kiln_llm_gemv_args *a, int o0, int o1) {
    switch (a->n) {
    case 2: few_rows(a, o0, o1, 2); break;
    case 3: few_rows(a, o0, o1, 3); break;
    case 4: few_rows(a, o0, o1, 4); break;
    case 5: few_rows(a, o0, o1, 5); break;
    case 6: few_rows(a, o0, o1, 6); break;
    case 7: few_rows(a, o0, o1, 7); break;
    default: few_rows(a, o0, o1, 8); break;
    }
}

void kiln_llm_gemv_rows(const kiln_llm_gemv_args *a, int o0, int o1) {
    if (a->n == 1) gemv_one(a, o0, o1);
    else gemv_few(a, o0, o1);
    if (a->gelu) /* while the rows are in cache */
        for (int t = 0; t < a->n; t++) kiln_llm_gelu_tanh(a->y + (size_t)t * a->ldy + o0, (size_t)(o1 - o0));
}

/* Groups [g0, g1) of output rows. */
static void gemv_part(void *ctx, int64_t g0, int64_t g1) {
    const kiln_llm_gemv_args *a = ctx;
    kiln_llm_gemv_rows(a, (int)g0 * GROUP, (int)g1 * GROUP < a->out ? (int)g1 * GROUP : a->out);
}

void kiln_llm_gemv(const kiln_llm_gemv_args *a) {
    const int64_t groups = (a->out + GROUP - 1) / GROUP;
    const bool serial = (int64_t)a->n * a->out * a->in < PARALLEL_MACS;
    kiln_parallel_for(groups, serial ? groups : 4, gemv_part, (void *)a);
}
