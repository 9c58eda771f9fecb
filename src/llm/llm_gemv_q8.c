/* llm_gemv_q8.c — kiln_llm_gemm_q8 and the row quantizer (llm_gemv_q8.h). The pool's unit of work is
 * a chunk of ROWS output rows; within it, token rows go four at a time, each weight row of the chunk
 * (in L1 after the first pass) widened to fp32 a vector at a time (AVX-512: 16 int8 lanes sign-
 * extended and converted, vpmovsxbd + vcvtdq2ps; AVX2: 8 lanes; both with FMA; otherwise one at a
 * time) and multiplied into one accumulator per token row; the row's sum is scaled once by its scale, then bias,
 * residual and GELU are applied as kiln_llm_gemv does. The instruction set is chosen once, at the
 * first call, from what the processor has. A prefill product (GEMM_TOKENS token rows or more) widens
 * tiles of weight rows to fp32 in a scratch buffer instead and multiplies them with OpenBLAS's GEMM
 * (the same kiln_llm_linear the fp32 forward uses), which the kernel cannot match there. */
#include "llm/llm_gemv_q8.h"

#include "core/threadpool.h"
#include "llm/llm_cpu_ops.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define Q8_X86 1
#endif

#define ROWS 16   /* output rows per unit of pool work */
#define TOKENS 4  /* token rows per pass over a chunk */
#define PARALLEL_MACS (1 << 15)
#define PREFETCH_BYTES 2048 /* ahead of the int8 weight stream */
#define GEMM_TOKENS 16   /* from this many token rows on, tiles widened to fp32 go through the GEMM */
#define TILE_ROWS 256    /* weight rows per tile */

static inline void store_out(const kiln_llm_gemv_args *a, float *y, int o, float v) {
    if (a->bias) v += a->bias[o];
    y[o] = a->accumulate ? y[o] + v : v;
}

/* The unscaled dot products of weight row w (K int8) with nt token rows x (stride ldx) into r. */
typedef void (*q8_dot_fn)(const int8_t *w, const float *x, size_t ldx, int K, int nt, float *r);

static void dot_scalar(const int8_t *w, const float *x, size_t ldx, int K, int nt, float *r) {
    for (int t = 0; t < nt; t++) {
        float s = 0;
        for (int k = 0; k < K; k++) s += (float)w[k] * x[t * ldx + k];
        r[t] = s;
    }
}

#ifdef Q8_X86
/* One kernel per token count NT (accumulators in registers), for an ISA: VEC lanes of LANES floats,
 * WIDEN(p) the int8 lanes at p as floats, SUM(v) a vector's sum. */
#define Q8_DOT(ISA, TARGET, VEC, LANES, WIDEN, LOADX, FMA, SUM, NT)                                \
    __attribute__((target(TARGET))) static void dot_##ISA##_##NT(const int8_t *w, const float *x, size_t ldx, \
                                                                 int K, float *r) {                \
        const int KV = K - K % LANES;                                                              \
        VEC acc[NT];                                                                               \
        for (int t = 0; t < NT; t++) acc[t] = (VEC){0};                                            \
        for (int k = 0; k < KV; k += LANES) {                                                      \
            __builtin_prefetch(w + k + PREFETCH_BYTES);                                            \
            const VEC wv = WIDEN(w + k);                                                           \
            for (int t = 0; t < NT; t++) acc[t] = FMA(wv, LOADX(x + t * ldx + k), acc[t]);         \
        }                                                                                          \
        for (int t = 0; t < NT; t++) {                                                             \
            r[t] = SUM(acc[t]);                                                                    \
            for (int k = KV; k < K; k++) r[t] += (float)w[k] * x[t * ldx + k];                     \
        }                                                                                          \
    }
#define Q8_DISPATCH(ISA, TARGET)                                                                   \
    __attribute__((target(TARGET))) static void dot_##ISA(const int8_t *w, const float *x, size_t ldx, int K, \
                                                          int nt, float *r) {                      \
        switch (nt) {                                                                              \
        case 1: dot_##ISA##_1(w, x, ldx, K, r); break;                                             \
        case 2: dot_##ISA##_2(w, x, ldx, K, r); break;                                             \
        case 3: dot_##ISA##_3(w, x, ldx, K, r); break;                                             \
        default: dot_##ISA##_4(w, x, ldx, K, r); break;                                            \
        }                                                                                          \
    }

#define WIDEN512(p) _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(const void *)(p))))
#define LOADX512(p) _mm512_loadu_ps(p)
#define FMA512(a, b, c) _mm512_fmadd_ps(a, b, c)
#define SUM512(v) _mm512_reduce_add_ps(v)
#define WIDEN256(p) _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(const void *)(p))))
#define LOADX256(p) _mm256_loadu_ps(p)
#define FMA256(a, b, c) _mm256_fmadd_ps(a, b, c)
#define SUM256(v)                                                                                  \
    ({                                                                                             \
        __m128 h_ = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps((v), 1));          \
        h_ = _mm_add_ps(h_, _mm_movehl_ps(h_, h_));                                                \
        _mm_cvtss_f32(_mm_add_ss(h_, _mm_movehdup_ps(h_)));                                        \
    })
#define Q8_ISA(ISA, TARGET, VEC, LANES, WIDEN, LOADX, FMA, SUM)                                    \
    Q8_DOT(ISA, TARGET, VEC, LANES, WIDEN, LOADX, FMA, SUM, 1)                                     \
    Q8_DOT(ISA, TARGET, VEC, LANES, WIDEN, LOADX, FMA, SUM, 2)                                     \
    Q8_DOT(ISA, TARGET, VEC, LANES, WIDEN, LOADX, FMA, SUM, 3)                                     \
    Q8_DOT(ISA, TARGET, VEC, LANES, WIDEN, LOADX, FMA, SUM, 4)                                     \
    Q8_DISPATCH(ISA, TARGET)
Q8_ISA(avx512, "avx512f,fma", __m512, 16, WIDEN512, LOADX512, FMA512, SUM512)
Q8_ISA(avx2, "avx2,fma", __m256, 8, WIDEN256, LOADX256, FMA256, SUM256)
#endif

/* isa's kernel, NULL when this processor or build lacks it (KILN_Q8_AUTO: the best one it has). */
static q8_dot_fn dot_for(kiln_llm_q8_isa isa) {
#ifdef Q8_X86
    __builtin_cpu_init();
    const bool fma = __builtin_cpu_supports("fma");
    const bool avx512 = fma && __builtin_cpu_supports("avx512f"), avx2 = fma && __builtin_cpu_supports("avx2");
    if (isa == KILN_Q8_AVX512 || (isa == KILN_Q8_AUTO && avx512)) return avx512 ? dot_avx512 : NULL;
    if (isa == KILN_Q8_AVX2 || (isa == KILN_Q8_AUTO && avx2)) return avx2 ? dot_avx2 : NULL;
#else
    if (isa == KILN_Q8_AVX512 || isa == KILN_Q8_AVX2) return NULL;
#endif
    return dot_scalar;
}

bool kiln_llm_q8_isa_supported(kiln_llm_q8_isa isa) { return dot_for(isa) != NULL; }

typedef struct q8_job {
    const kiln_llm_gemv_args *a;
    q8_dot_fn dot;
} q8_job;

/* Output rows [o0, o1), all token rows, TOKENS at a time. */
static void q8_rows(const q8_job *j, int o0, int o1) {
    const kiln_llm_gemv_args *a = j->a;
    const size_t ldx = (size_t)a->ldx;
    for (int t0 = 0; t0 < a->n; t0 += TOKENS) {
        const int nt = a->n - t0 < TOKENS ? a->n - t0 : TOKENS;
        for (int o = o0; o < o1; o++) {
            float r[TOKENS];
            j->dot((const int8_t *)a->w + (size_t)o * a->in, a->x + (size_t)t0 * ldx, ldx, a->in, nt, r);
            for (int t = 0; t < nt; t++) store_out(a, a->y + (size_t)(t0 + t) * a->ldy, o, r[t] * a->scale[o]);
        }
    }
    if (a->gelu)
        for (int t = 0; t < a->n; t++) kiln_llm_gelu_tanh(a->y + (size_t)t * a->ldy + o0, (size_t)(o1 - o0));
}

static void q8_part(void *ctx, int64_t c0, int64_t c1) {
    const q8_job *j = ctx;
    q8_rows(j, (int)c0 * ROWS, (int)c1 * ROWS < j->a->out ? (int)c1 * ROWS : j->a->out);
}

static void run(const kiln_llm_gemv_args *a, q8_dot_fn dot) {
    q8_job j = {a, dot};
    const int64_t chunks = (a->out + ROWS - 1) / ROWS;
    const bool serial = (int64_t)a->n * a->out * a->in < PARALLEL_MACS;
    kiln_parallel_for(chunks, serial ? chunks : 1, q8_part, &j);
}

/* Many token rows (prefill): tiles of TILE_ROWS weight rows widened to fp32 into scratch, each
 * multiplied by kiln_llm_linear's GEMM (OpenBLAS) with the bias and accumulation, then GELU'd. False
 * when the scratch cannot be had (the caller runs the kernel instead). */
static bool run_tiled(const kiln_llm_gemv_args *a) {
    float *tile = malloc((size_t)TILE_ROWS * (size_t)a->in * sizeof *tile);
    if (!tile) return false;
    const kiln_llm_q8 q = {.q = a->w, .scale = a->scale};
    for (int o0 = 0; o0 < a->out; o0 += TILE_ROWS) {
        const int m = a->out - o0 < TILE_ROWS ? a->out - o0 : TILE_ROWS;
        for (int r = 0; r < m; r++) kiln_llm_q8_row(&q, o0 + r, a->in, tile + (size_t)r * a->in);
        kiln_llm_linear(a->x, a->ldx, a->n, a->in, tile, a->bias ? a->bias + o0 : NULL, m, a->y + o0, a->ldy,
                        a->accumulate);
        if (a->gelu)
            for (int t = 0; t < a->n; t++) kiln_llm_gelu_tanh(a->y + (size_t)t * a->ldy + o0, (size_t)m);
    }
    free(tile);
    return true;
}

void kiln_llm_gemm_q8(const kiln_llm_gemv_args *a) {
    if (a->n >= GEMM_TOKENS && run_tiled(a)) return;
    static q8_dot_fn best; /* chosen once; a race only stores the same value */
    if (!__atomic_load_n(&best, __ATOMIC_RELAXED)) __atomic_store_n(&best, dot_for(KILN_Q8_AUTO), __ATOMIC_RELAXED);
    run(a, __atomic_load_n(&best, __ATOMIC_RELAXED));
}

bool kiln_llm_gemm_q8_isa(const kiln_llm_gemv_args *a, kiln_llm_q8_isa isa) {
    q8_dot_fn dot = dot_for(isa);
    if (dot) run(a, dot);
    return dot != NULL;
}

void kiln_llm_quantize_rows(const float *w, int64_t rows, int64_t cols, int8_t *q, float *scale) {
    for (int64_t r = 0; r < rows; r++) {
        const float *row = w + r * cols;
        float mx = 0;
        for (int64_t k = 0; k < cols; k++) mx = fabsf(row[k]) > mx ? fabsf(row[k]) : mx;
        const float s = mx / 127.0f;
        scale[r] = s;
        for (int64_t k = 0; k < cols; k++) {
            float v = s > 0 ? roundf(row[k] / s) : 0.0f;
            q[r * cols + k] = (int8_t)(v > 127 ? 127 : v < -127 ? -127 : v);
        }
    }
}

void kiln_llm_q8_row(const kiln_llm_q8 *w, int64_t r, int cols, float *out) {
    const int8_t *q = w->q + r * cols;
    for (int k = 0; k < cols; k++) out[k] = (float)q[k] * w->scale[r];
}
