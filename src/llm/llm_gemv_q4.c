/* llm_gemv_q4.c — kiln_llm_gemm_q4 and the group quantizer (llm_gemv_q4.h). The pool's unit of work
 * is a chunk of ROWS output rows; within it token rows go four at a time, each weight row (in L1
 * after the first pass) read group by group: 16 packed bytes at a time split into their low and high
 * nibbles, interleaved back into k order and widened to fp32 (AVX-512: two vectors of 16; AVX2: four
 * of 8), the group's zero point subtracted, multiplied into one group accumulator per token row that
 * is scaled into the row's accumulator at the group's end; a short last group's columns past the
 * vector part are summed one at a time. Then bias, residual and GELU as kiln_llm_gemm_q8. A prefill
 * product (GEMM_TOKENS token rows or more) dequantizes tiles of weight rows to fp32 in a scratch
 * buffer and multiplies them with kiln_llm_linear's GEMM instead. */
#include "llm/llm_gemv_q4.h"

#include "core/threadpool.h"
#include "llm/llm_cpu_ops.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define Q4_X86 1
#endif

#define ROWS 16   /* output rows per unit of pool work */
#define TOKENS 4  /* token rows per pass over a chunk */
#define PARALLEL_MACS (1 << 15)
#define GEMM_TOKENS 16 /* from this many token rows on, dequantized tiles go through the GEMM */
#define TILE_ROWS 256  /* weight rows per tile */
#define GROUP_BYTES (KILN_Q4_GROUP / 2)

static inline void store_out(const kiln_llm_gemv_args *a, float *y, int o, float v) {
    if (a->bias) v += a->bias[o];
    y[o] = a->accumulate ? y[o] + v : v;
}

static inline int nibble(const uint8_t *row, int k) { return k & 1 ? row[k >> 1] >> 4 : row[k >> 1] & 15; }

/* The dot products of packed weight row w (K columns, scales s and zeros z per group) with nt token
 * rows x (stride ldx) into r. */
typedef void (*q4_dot_fn)(const uint8_t *w, const float *s, const float *z, const float *x, size_t ldx, int K, int nt,
                          float *r);

static void dot_scalar(const uint8_t *w, const float *s, const float *z, const float *x, size_t ldx, int K, int nt,
                       float *r) {
    for (int t = 0; t < nt; t++) {
        float acc = 0;
        for (int k0 = 0, g = 0; k0 < K; k0 += KILN_Q4_GROUP, g++) {
            const int k1 = K - k0 < KILN_Q4_GROUP ? K : k0 + KILN_Q4_GROUP;
            float gs = 0;
            for (int k = k0; k < k1; k++) gs += ((float)nibble(w, k) - z[g]) * x[t * ldx + k];
            acc += gs * s[g];
        }
        r[t] = acc;
    }
}

/* The part of a group past its whole 32-column blocks, k in [kv, k1), for nt token rows, into tail. */
static inline void group_tail(const uint8_t *w, float s, float z, const float *x, size_t ldx, int kv, int k1, int nt,
                              float *tail) {
    for (int t = 0; t < nt; t++) {
        float gs = 0;
        for (int k = kv; k < k1; k++) gs += ((float)nibble(w, k) - z) * x[t * ldx + k];
        tail[t] += gs * s;
    }
}

#ifdef Q4_X86
/* 16 packed bytes (32 columns) as nibble bytes in k order: lo = columns 0-15, hi = 16-31. */
#define Q4_SPLIT(p, lo, hi)                                                                        \
    do {                                                                                           \
        const __m128i b_ = _mm_loadu_si128((const __m128i *)(const void *)(p));                    \
        const __m128i m_ = _mm_set1_epi8(15);                                                      \
        const __m128i l_ = _mm_and_si128(b_, m_), h_ = _mm_and_si128(_mm_srli_epi16(b_, 4), m_);   \
        lo = _mm_unpacklo_epi8(l_, h_);                                                            \
        hi = _mm_unpackhi_epi8(l_, h_);                                                            \
    } while (0)

/* One kernel per token count NT (accumulators in registers). */
#define Q4_DOT512(NT)                                                                              \
    __attribute__((target("avx512f,fma"))) static void dot_avx512_##NT(                            \
        const uint8_t *w, const float *s, const float *z, const float *x, size_t ldx, int K, float *r) { \
        __m512 acc[NT];                                                                            \
        float tail[NT];                                                                            \
        for (int t = 0; t < NT; t++) acc[t] = _mm512_setzero_ps(), tail[t] = 0;                    \
        for (int k0 = 0, g = 0; k0 < K; k0 += KILN_Q4_GROUP, g++) {                                \
            const int k1 = K - k0 < KILN_Q4_GROUP ? K : k0 + KILN_Q4_GROUP, kv = k0 + ((k1 - k0) & ~31); \
            const __m512 zv = _mm512_set1_ps(z[g]);                                                \
            __m512 ga[NT];                                                                         \
            for (int t = 0; t < NT; t++) ga[t] = _mm512_setzero_ps();                              \
            for (int k = k0; k < kv; k += 32) {                                                    \
                __m128i lo, hi;                                                                    \
                Q4_SPLIT(w + k / 2, lo, hi);                                                       \
                const __m512 w0 = _mm512_sub_ps(_mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(lo)), zv); \
                const __m512 w1 = _mm512_sub_ps(_mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(hi)), zv); \
                for (int t = 0; t < NT; t++) {                                                     \
                    ga[t] = _mm512_fmadd_ps(w0, _mm512_loadu_ps(x + t * ldx + k), ga[t]);          \
                    ga[t] = _mm512_fmadd_ps(w1, _mm512_loadu_ps(x + t * ldx + k + 16), ga[t]);     \
                }                                                                                  \
            }                                                                                      \
            const __m512 sv = _mm512_set1_ps(s[g]);                                                \
            for (int t = 0; t < NT; t++) acc[t] = _mm512_fmadd_ps(ga[t], sv, acc[t]);              \
            if (kv < k1) group_tail(w, s[g], z[g], x, ldx, kv, k1, NT, tail);                      \
        }                                                                                          \
        for (int t = 0; t < NT; t++) r[t] = _mm512_reduce_add_ps(acc[t]) + tail[t];                \
    }

#define SUM256(v)                                                                                  \
    ({                                                                                             \
        __m128 h_ = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps((v), 1));          \
        h_ = _mm_add_ps(h_, _mm_movehl_ps(h_, h_));                                                \
        _mm_cvtss_f32(_mm_add_ss(h_, _mm_movehdup_ps(h_)));                                        \
    })
#define WIDEN256(v, zv) _mm256_sub_ps(_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(v)), zv)
#define Q4_DOT256(NT)                                                                              \
    __attribute__((target("avx2,fma"))) static void dot_avx2_##NT(                                 \
        const uint8_t *w, const float *s, const float *z, const float *x, size_t ldx, int K, float *r) { \
        __m256 acc[NT];                                                                            \
        float tail[NT];                                                                            \
        for (int t = 0; t < NT; t++) acc[t] = _mm256_setzero_ps(), tail[t] = 0;                    \
        for (int k0 = 0, g = 0; k0 < K; k0 += KILN_Q4_GROUP, g++) {                                \
            const int k1 = K - k0 < KILN_Q4_GROUP ? K : k0 + KILN_Q4_GROUP, kv = k0 + ((k1 - k0) & ~31); \
            const __m256 zv = _mm256_set1_ps(z[g]);                                                \
            __m256 ga[NT];                                                                         \
            for (int t = 0; t < NT; t++) ga[t] = _mm256_setzero_ps();                              \
            for (int k = k0; k < kv; k += 32) {                                                    \
                __m128i lo, hi;                                                                    \
                Q4_SPLIT(w + k / 2, lo, hi);                                                       \
                const __m256 w0 = WIDEN256(lo, zv), w1 = WIDEN256(_mm_srli_si128(lo, 8), zv);      \
                const __m256 w2 = WIDEN256(hi, zv), w3 = WIDEN256(_mm_srli_si128(hi, 8), zv);      \
                for (int t = 0; t < NT; t++) {                                                     \
                    const float *xt = x + t * ldx + k;                                             \
                    ga[t] = _mm256_fmadd_ps(w0, _mm256_loadu_ps(xt), ga[t]);                       \
                    ga[t] = _mm256_fmadd_ps(w1, _mm256_loadu_ps(xt + 8), ga[t]);                   \
                    ga[t] = _mm256_fmadd_ps(w2, _mm256_loadu_ps(xt + 16), ga[t]);                  \
                    ga[t] = _mm256_fmadd_ps(w3, _mm256_loadu_ps(xt + 24), ga[t]);                  \
                }                                                                                  \
            }                                                                                      \
            const __m256 sv = _mm256_set1_ps(s[g]);                                                \
            for (int t = 0; t < NT; t++) acc[t] = _mm256_fmadd_ps(ga[t], sv, acc[t]);              \
            if (kv < k1) group_tail(w, s[g], z[g], x, ldx, kv, k1, NT, tail);                      \
        }                                                                                          \
        for (int t = 0; t < NT; t++) r[t] = SUM256(acc[t]) + tail[t];                              \
    }

#define Q4_DISPATCH(ISA, TARGET)                                                                   \
    __attribute__((target(TARGET))) static void dot_##ISA(const uint8_t *w, const float *s, const float *z, \
                                                          const float *x, size_t ldx, int K, int nt, float *r) { \
        switch (nt) {                                                                              \
        case 1: dot_##ISA##_1(w, s, z, x, ldx, K, r); break;                                       \
        case 2: dot_##ISA##_2(w, s, z, x, ldx, K, r); break;                                       \
        case 3: dot_##ISA##_3(w, s, z, x, ldx, K, r); break;                                       \
        default: dot_##ISA##_4(w, s, z, x, ldx, K, r); break;                                      \
        }                                                                                          \
    }
Q4_DOT512(1)
Q4_DOT512(2)
Q4_DOT512(3)
Q4_DOT512(4)
Q4_DISPATCH(avx512, "avx512f,fma")
Q4_DOT256(1)
Q4_DOT256(2)
Q4_DOT256(3)
Q4_DOT256(4)
Q4_DISPATCH(avx2, "avx2,fma")
#endif

/* isa's kernel, NULL when this processor or build lacks it (KILN_Q8_AUTO: the best one it has). */
static q4_dot_fn dot_for(kiln_llm_q8_isa isa) {
#ifdef Q4_X86
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

typedef struct q4_job {
    const kiln_llm_gemv_args *a;
    q4_dot_fn dot;
} q4_job;

/* Output rows [o0, o1), all token rows, TOKENS at a time. */
static void q4_rows(const q4_job *j, int o0, int o1) {
    const kiln_llm_gemv_args *a = j->a;
    const size_t ldx = (size_t)a->ldx, row_bytes = (size_t)kiln_q4_row_bytes(a->in);
    const size_t groups = (size_t)kiln_q4_groups(a->in);
    for (int t0 = 0; t0 < a->n; t0 += TOKENS) {
        const int nt = a->n - t0 < TOKENS ? a->n - t0 : TOKENS;
        for (int o = o0; o < o1; o++) {
            float r[TOKENS];
            j->dot((const uint8_t *)a->w + (size_t)o * row_bytes, a->scale + (size_t)o * groups,
                   a->zero + (size_t)o * groups, a->x + (size_t)t0 * ldx, ldx, a->in, nt, r);
            for (int t = 0; t < nt; t++) store_out(a, a->y + (size_t)(t0 + t) * a->ldy, o, r[t]);
        }
    }
    if (a->gelu)
        for (int t = 0; t < a->n; t++) kiln_llm_gelu_tanh(a->y + (size_t)t * a->ldy + o0, (size_t)(o1 - o0));
}

static void q4_part(void *ctx, int64_t c0, int64_t c1) {
    const q4_job *j = ctx;
    q4_rows(j, (int)c0 * ROWS, (int)c1 * ROWS < j->a->out ? (int)c1 * ROWS : j->a->out);
}

static void run(const kiln_llm_gemv_args *a, q4_dot_fn dot) {
    q4_job j = {a, dot};
    const int64_t chunks = (a->out + ROWS - 1) / ROWS;
    const bool serial = (int64_t)a->n * a->out * a->in < PARALLEL_MACS;
    kiln_parallel_for(chunks, serial ? chunks : 1, q4_part, &j);
}

/* Many token rows (prefill): tiles of TILE_ROWS weight rows dequantized into scratch, each multiplied
 * by kiln_llm_linear's GEMM with the bias and accumulation, then GELU'd. False when the scratch cannot
 * be had (the caller runs the kernel instead). */
static bool run_tiled(const kiln_llm_gemv_args *a) {
    float *tile = malloc((size_t)TILE_ROWS * (size_t)a->in * sizeof *tile);
    if (!tile) return false;
    for (int o0 = 0; o0 < a->out; o0 += TILE_ROWS) {
        const int m = a->out - o0 < TILE_ROWS ? a->out - o0 : TILE_ROWS;
        for (int r = 0; r < m; r++) kiln_llm_q4_row(a->w, a->scale, a->zero, o0 + r, a->in, tile + (size_t)r * a->in);
        kiln_llm_linear(a->x, a->ldx, a->n, a->in, tile, a->bias ? a->bias + o0 : NULL, m, a->y + o0, a->ldy,
                        a->accumulate);
        if (a->gelu)
            for (int t = 0; t < a->n; t++) kiln_llm_gelu_tanh(a->y + (size_t)t * a->ldy + o0, (size_t)m);
    }
    free(tile);
    return true;
}

void kiln_llm_gemm_q4(const kiln_llm_gemv_args *a) {
    if (a->n >= GEMM_TOKENS && run_tiled(a)) return;
    static q4_dot_fn best; /* chosen once; a race only stores the same value */
    if (!__atomic_load_n(&best, __ATOMIC_RELAXED)) __atomic_store_n(&best, dot_for(KILN_Q8_AUTO), __ATOMIC_RELAXED);
    run(a, __atomic_load_n(&best, __ATOMIC_RELAXED));
}

bool kiln_llm_gemm_q4_isa(const kiln_llm_gemv_args *a, kiln_llm_q8_isa isa) {
    q4_dot_fn dot = dot_for(isa);
    if (dot) run(a, dot);
    return dot != NULL;
}

/* One group of n values quantized into nibbles [0, n) of out (zeroed beforehand). */
static void quantize_group(const float *w, int n, float clip, uint8_t *out, float *scale, float *zero) {
    float lo = w[0], hi = w[0];
    for (int k = 1; k < n; k++) {
        lo = w[k] < lo ? w[k] : lo;
        hi = w[k] > hi ? w[k] : hi;
    }
    lo *= clip;
    hi *= clip;
    float s = (hi - lo) / 15.0f;
    if (!(s > 0)) s = fabsf(hi) / 15.0f; /* one value: it becomes q = 0 or 15 */
    if (!(s > 0)) {
        *scale = *zero = 0;
        return;
    }
    const float z = -lo / s;
    *scale = s;
    *zero = z;
    for (int k = 0; k < n; k++) {
        const float v = roundf(w[k] / s + z);
        const int q = v < 0 ? 0 : v > 15 ? 15 : (int)v;
        out[k >> 1] |= (uint8_t)(k & 1 ? q << 4 : q);
    }
}

void kiln_llm_quantize_q4(const float *w, int64_t rows, int64_t cols, float clip, uint8_t *q, float *scale, float *zero) {
    const int64_t groups = kiln_q4_groups(cols), row_bytes = kiln_q4_row_bytes(cols);
    memset(q, 0, (size_t)(rows * row_bytes));
    for (int64_t r = 0; r < rows; r++)
        for (int64_t g = 0; g < groups; g++) {
            const int64_t k0 = g * KILN_Q4_GROUP, n = cols - k0 < KILN_Q4_GROUP ? cols - k0 : KILN_Q4_GROUP;
            quantize_group(w + r * cols + k0, (int)n, clip, q + r * row_bytes + g * GROUP_BYTES, scale + r * groups + g,
                           zero + r * groups + g);
        }
}

void kiln_llm_q4_row(const uint8_t *q, const float *scale, const float *zero, int64_t r, int cols, float *out) {
    const int64_t groups = kiln_q4_groups(cols);
    const uint8_t *row = q + r * kiln_q4_row_bytes(cols);
    for (int k = 0; k < cols; k++) {
        const int64_t g = r * groups + k / KILN_Q4_GROUP;
        out[k] = ((float)nibble(row, k) - zero[g]) * scale[g];
    }
}
