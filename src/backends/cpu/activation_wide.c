/* activation_wide.c — kiln_cpu_activation_wide and kiln_cpu_softmax_wide (activation_wide.h): the
 * 16-lane activations and exp of activation_v16.h over an array, in functions compiled for
 * AVX-512F, chosen once from the processor; the tail goes through a masked vector (zeros in the other lanes). */
#include "backends/cpu/activation_wide.h"

#include "backends/cpu/activation_v16.h"

#include <math.h>
#include <pthread.h>
#include <string.h>

#if defined(KILN_V16)
/* The loop, one instance per kind so the switch leaves the loop. */
#define WIDE_LOOP(KIND)                                                                            \
    do {                                                                                           \
        int64_t i = 0;                                                                             \
        for (; i + 16 <= n; i += 16) {                                                             \
            v16f v;                                                                                \
            memcpy(&v, y + i, sizeof v);                                                           \
            v = act16(v, KIND, p0, p1);                                                            \
            memcpy(y + i, &v, sizeof v);                                                           \
        }                                                                                          \
        if (i < n) {                                                                               \
            __mmask16 tail = (__mmask16)((1u << (n - i)) - 1);                                     \
            v16f v = act16((v16f)_mm512_maskz_loadu_ps(tail, y + i), KIND, p0, p1);                \
            _mm512_mask_storeu_ps(y + i, tail, (__m512)v);                                         \
        }                                                                                          \
    } while (0)

__attribute__((target("avx512f,fma"))) static void apply_wide(float *y, int64_t n, kiln_activation kind, float p0, float p1) {
    switch (kind) {
    case KILN_ACT_RELU: WIDE_LOOP(KILN_ACT_RELU); break;
    case KILN_ACT_LEAKY_RELU: WIDE_LOOP(KILN_ACT_LEAKY_RELU); break;
    case KILN_ACT_CLIP: WIDE_LOOP(KILN_ACT_CLIP); break;
    case KILN_ACT_HARD_SIGMOID: WIDE_LOOP(KILN_ACT_HARD_SIGMOID); break;
    case KILN_ACT_HARD_SWISH: WIDE_LOOP(KILN_ACT_HARD_SWISH); break;
    case KILN_ACT_SIGMOID: WIDE_LOOP(KILN_ACT_SIGMOID); break;
    case KILN_ACT_SILU: WIDE_LOOP(KILN_ACT_SILU); break;
    case KILN_ACT_TANH: WIDE_LOOP(KILN_ACT_TANH); break;
    case KILN_ACT_GELU: WIDE_LOOP(KILN_ACT_GELU); break;
    case KILN_ACT_GELU_TANH: WIDE_LOOP(KILN_ACT_GELU_TANH); break;
    default: break;
    }
}

/* The 16-lane body of kiln_cpu_softmax_wide: the maximum, e^(x - max) stored with its float sum
 * per lane (the tail under a mask), then the scale by 1 / sum (the sum of the lanes in double). */
__attribute__((target("avx512f,fma"))) static void softmax_wide(float *s, int64_t n) {
    __m512 mx = _mm512_set1_ps(-INFINITY);
    int64_t j = 0;
    for (; j + 16 <= n; j += 16) mx = _mm512_max_ps(mx, _mm512_loadu_ps(s + j));
    __mmask16 tail = (__mmask16)((1u << (n - j)) - 1);
    if (n > j) mx = _mm512_mask_max_ps(mx, tail, mx, _mm512_maskz_loadu_ps(tail, s + j));
    v16f m = splat16(_mm512_reduce_max_ps(mx)), acc = splat16(0.0f), v;
    for (j = 0; j + 16 <= n; j += 16) {
        memcpy(&v, s + j, sizeof v);
        v = exp16(v - m);
        memcpy(s + j, &v, sizeof v);
        acc += v;
    }
    if (n > j) {
        v = exp16((v16f)_mm512_maskz_loadu_ps(tail, s + j) - m);
        _mm512_mask_storeu_ps(s + j, tail, (__m512)v);
        acc = (v16f)_mm512_mask_add_ps((__m512)acc, tail, (__m512)acc, (__m512)v);
    }
    double sum = 0.0;
    for (int k = 0; k < 16; k++) sum += acc[k];
    v16f inv = splat16((float)(1.0 / sum));
    for (j = 0; j + 16 <= n; j += 16) {
        memcpy(&v, s + j, sizeof v);
        v *= inv;
        memcpy(s + j, &v, sizeof v);
    }
    if (n > j) _mm512_mask_storeu_ps(s + j, tail, _mm512_mul_ps(_mm512_maskz_loadu_ps(tail, s + j), (__m512)inv));
}

static bool g_avx512;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static void probe(void) {
    __builtin_cpu_init();
    g_avx512 = __builtin_cpu_supports("avx512f");
}

bool kiln_cpu_activation_wide(float *y, int64_t n, const kiln_act *a) {
    pthread_once(&g_once, probe);
    if (!g_avx512 || a->kind <= KILN_ACT_NONE || a->kind >= KILN_ACT_COUNT) return false;
    apply_wide(y, n, a->kind, a->p0, a->p1);
    return true;
}

bool kiln_cpu_softmax_wide(float *s, int64_t n) {
    pthread_once(&g_once, probe);
    if (!g_avx512 || n < 1) return false;
    softmax_wide(s, n);
    return true;
}
#else
bool kiln_cpu_activation_wide(float *y, int64_t n, const kiln_act *a) {
    (void)y;
    (void)n;
    (void)a;
    return false;
}

bool kiln_cpu_softmax_wide(float *s, int64_t n) {
    (void)s;
    (void)n;
    return false;
}
#endif
