/* llm_gemm_w8a8.c — kiln_llm_gemm_w8a8 and the activation quantizer (llm_gemm_w8a8.h). The input rows
 * are quantized once per call into the caller's scratch, int16 lanes holding int8 values (the kernels multiply
 * 16-bit pairs: vpdpwssd / vpmaddwd sum two int8 x int8 products per 32-bit lane, exactly); the pool's
 * unit of work is a chunk of ROWS output rows, token rows four at a time against each weight row (in
 * L1 after the first pass), the weight lanes sign-extended once per pass and multiplied into one int32
 * accumulator per token row. Every kernel gives the same int32 sums (|sum| <= 127 * 127 * in, within
 * int32 for in < 133,000); the sum is dequantized once, (float)sum * (act_scale * scale[o]), then bias,
 * residual and GELU are applied as kiln_llm_gemv does. */
#include "llm/llm_gemm_w8a8.h"

#include "core/threadpool.h"
#include "llm/llm_cpu_ops.h"

#include <math.h>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define W8A8_X86 1
#endif

#define ROWS 16  /* output rows per unit of pool work */
#define TOKENS 4 /* token rows per pass over a chunk */
#define PARALLEL_MACS (1 << 15)

/* x / act_scale rounded to nearest, ties to even, saturated to [-127, 127]; NaN: 0. */
static inline int quantize1(float x, float act_scale) {
    const float v = rintf(x / act_scale); /* the default rounding mode: to nearest, ties to even */
    return v >= 127.0f ? 127 : v <= -127.0f ? -127 : v == v ? (int)v : 0;
}

void kiln_llm_quantize_act(const float *x, int64_t n, float act_scale, int8_t *q) {
    for (int64_t i = 0; i < n; i++) q[i] = (int8_t)quantize1(x[i], act_scale);
}

/* The int32 dot products of weight row w (K int8) with nt quantized token rows x (int16 lanes, stride ldx). */
typedef void (*w8a8_dot_fn)(const int8_t *w, const int16_t *x, size_t ldx, int K, int nt, int32_t *r);

static void dot_scalar(const int8_t *w, const int16_t *x, size_t ldx, int K, int nt, int32_t *r) {
    for (int t = 0; t < nt; t++) {
        int32_t s = 0;
        for (int k = 0; k < K; k++) s += (int32_t)w[k] * x[t * ldx + k];
        r[t] = s;
    }
}

#ifdef W8A8_X86
/* One kernel per token count NT: LANES weights a step, WIDEN(p) them as int16, MAC(acc, w, x) the pairs'
 * products added to acc's int32 lanes, SUM(v) the lanes' sum. */
#define W8A8_DOT(ISA, TARGET, VEC, LANES, WIDEN, LOADX, MAC, SUM, NT)                              \
    __attribute__((target(TARGET))) static void dot_##ISA##_##NT(const int8_t *w, const int16_t *x, size_t ldx, \
                                                                 int K, int32_t *r) {              \
        const int KV = K - K % LANES;                                                              \
        VEC acc[NT];                                                                               \
        for (int t = 0; t < NT; t++) acc[t] = (VEC){0};                                            \
        for (int k = 0; k < KV; k += LANES) {                                                      \
            const VEC wv = WIDEN(w + k);                                                           \
            for (int t = 0; t < NT; t++) acc[t] = MAC(acc[t], wv, LOADX(x + t * ldx + k));         \
        }                                                                                          \
        for (int t = 0; t < NT; t++) {                                                             \
            r[t] = SUM(acc[t]);                                                                    \
            for (int k = KV; k < K; k++) r[t] += (int32_t)w[k] * x[t * ldx + k];                   \
        }                                                                                          \
    }
#define W8A8_DISPATCH(ISA, TARGET)                                                                 \
    __attribute__((target(TARGET))) static void dot_##ISA(const int8_t *w, const int16_t *x, size_t ldx, int K, \
                                                          int nt, int32_t *r) {                    \
        switch (nt) {                                                                              \
        case 1: dot_##ISA##_1(w, x, ldx, K, r); break;                                             \
        case 2: dot_##ISA##_2(w, x, ldx, K, r); break;                                             \
        case 3: dot_##ISA##_3(w, x, ldx, K, r); break;                                             \
        default: dot_##ISA##_4(w, x, ldx, K, r); break;                                            \
        }                                                                                          \
    }
#define W8A8_ISA(ISA, TARGET, VEC, LANES, WIDEN, LOADX, MAC, SUM)                                  \
    W8A8_DOT(ISA, TARGET, VEC, LANES, WIDEN, LOADX, MAC, SUM, 1)                                   \
    W8A8_DOT(ISA, TARGET, VEC, LANES, WIDEN, LOADX, MAC, SUM, 2)                                   \
    W8A8_DOT(ISA, TARGET, VEC, LANES, WIDEN, LOADX, MAC, SUM, 3)                                   \
    W8A8_DOT(ISA, TARGET, VEC, LANES, WIDEN, LOADX, MAC, SUM, 4)                                   \
    W8A8_DISPATCH(ISA, TARGET)

#define WIDEN512(p) _mm512_cvtepi8_epi16(_mm256_loadu_si256((const __m256i *)(const void *)(p)))
#define LOADX512(p) _mm512_loadu_si512((const void *)(p))
#define MAC512(acc, a, b) _mm512_dpwssd_epi32(acc, a, b)
#define SUM512(v) _mm512_reduce_add_epi32(v)
#define WIDEN256(p) _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(const void *)(p)))
#define LOADX256(p) _mm256_loadu_si256((const __m256i *)(const void *)(p))
#define MAC256(acc, a, b) _mm256_add_epi32(acc, _mm256_madd_epi16(a, b))
#define SUM256(v)                                                                                  \
    ({                                                                                             \
        __m128i h_ = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256((v), 1));   \
        h_ = _mm_add_epi32(h_, _mm_shuffle_epi32(h_, 0x4e));                                       \
        _mm_cvtsi128_si32(_mm_add_epi32(h_, _mm_shuffle_epi32(h_, 0xb1)));                         \
    })
W8A8_ISA(vnni512, "avx512f,avx512bw,avx512vnni", __m512i, 32, WIDEN512, LOADX512, MAC512, SUM512)
W8A8_ISA(avx2, "avx2", __m256i, 16, WIDEN256, LOADX256, MAC256, SUM256)
#endif

/* isa's kernel, NULL when this processor or build lacks it (KILN_W8A8_AUTO: the best one it has). */
static w8a8_dot_fn dot_for(kiln_llm_w8a8_isa isa) {
#ifdef W8A8_X86
    __builtin_cpu_init();
    const bool vnni = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                      __builtin_cpu_supports("avx512vnni");
    const bool avx2 = __builtin_cpu_supports("avx2");
    if (isa == KILN_W8A8_VNNI512 || (isa == KILN_W8A8_AUTO && vnni)) return vnni ? dot_vnni512 : NULL;
    if (isa == KILN_W8A8_AVX2 || (isa == KILN_W8A8_AUTO && avx2)) return avx2 ? dot_avx2 : NULL;
#else
    if (isa == KILN_W8A8_VNNI512 || isa == KILN_W8A8_AVX2) return NULL;
#endif
    return dot_scalar;
}

bool kiln_llm_w8a8_isa_supported(kiln_llm_w8a8_isa isa) { return dot_for(isa) != NULL; }

typedef struct w8a8_job {
    const kiln_llm_gemv_args *a;
    const int16_t *xq; /* [n, in] */
    w8a8_dot_fn dot;
} w8a8_job;

/* Output rows [o0, o1), all token rows, TOKENS at a time. */
static void w8a8_rows(const w8a8_job *j, int o0, int o1) {
    const kiln_llm_gemv_args *a = j->a;
    const size_t in = (size_t)a->in;
    for (int t0 = 0; t0 < a->n; t0 += TOKENS) {
        const int nt = a->n - t0 < TOKENS ? a->n - t0 : TOKENS;
        for (int o = o0; o < o1; o++) {
            int32_t r[TOKENS];
            j->dot((const int8_t *)a->w + (size_t)o * in, j->xq + (size_t)t0 * in, in, a->in, nt, r);
            const float s = a->act_scale * a->scale[o];
            for (int t = 0; t < nt; t++) {
                float *y = a->y + (size_t)(t0 + t) * a->ldy;
                float v = (float)r[t] * s;
                if (a->bias) v += a->bias[o];
                y[o] = a->accumulate ? y[o] + v : v;
            }
        }
    }
    if (a->gelu)
        for (int t = 0; t < a->n; t++) kiln_llm_gelu_tanh(a->y + (size_t)t * a->ldy + o0, (size_t)(o1 - o0));
}

static void w8a8_part(void *ctx, int64_t c0, int64_t c1) {
    const w8a8_job *j = ctx;
    w8a8_rows(j, (int)c0 * ROWS, (int)c1 * ROWS < j->a->out ? (int)c1 * ROWS : j->a->out);
}

/* Quantizes a's input into xq's int16 lanes and runs dot over the pool. */
static void run(const kiln_llm_gemv_args *a, int16_t *xq, w8a8_dot_fn dot) {
    const size_t in = (size_t)a->in;
    for (int t = 0; t < a->n; t++) {
        const float *x = a->x + (size_t)t * a->ldx;
        for (size_t k = 0; k < in; k++) xq[(size_t)t * in + k] = (int16_t)quantize1(x[k], a->act_scale);
    }
    w8a8_job j = {a, xq, dot};
    const int64_t chunks = (a->out + ROWS - 1) / ROWS;
    const bool serial = (int64_t)a->n * a->out * a->in < PARALLEL_MACS;
    kiln_parallel_for(chunks, serial ? chunks : 1, w8a8_part, &j);
}

void kiln_llm_gemm_w8a8(const kiln_llm_gemv_args *a, int16_t *xq) {
    static w8a8_dot_fn best; /* chosen once; a race only stores the same value */
    if (!__atomic_load_n(&best, __ATOMIC_RELAXED)) __atomic_store_n(&best, dot_for(KILN_W8A8_AUTO), __ATOMIC_RELAXED);
    run(a, xq, __atomic_load_n(&best, __ATOMIC_RELAXED));
}

bool kiln_llm_gemm_w8a8_isa(const kiln_llm_gemv_args *a, int16_t *xq, kiln_llm_w8a8_isa isa) {
    w8a8_dot_fn dot = dot_for(isa);
    if (dot) run(a, xq, dot);
    return dot != NULL;
}
