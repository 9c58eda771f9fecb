/* activation_wide.c — kiln_cpu_activation_wide (activation_wide.h): GCC/Clang vector extensions of
 * 16 floats in functions compiled for AVX-512F, chosen once from the processor; the tail goes
 * through a zero-padded vector. */
#include "backends/cpu/activation_wide.h"

#include "backends/cpu/elementwise_vmath.h"

#include <pthread.h>
#include <string.h>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__)) && !defined(KILN_NO_SIMD_CLONES)
#define WIDE __attribute__((target("avx512f"))) static inline

typedef float v16f __attribute__((vector_size(64)));
typedef int32_t v16i __attribute__((vector_size(64)));
typedef uint32_t v16u __attribute__((vector_size(64)));

WIDE v16f splat(float x) { return (v16f){0} + x; }
WIDE v16f select16(v16i m, v16f a, v16f b) { return (v16f)((m & (v16i)a) | (~m & (v16i)b)); }
WIDE v16f clamp16(v16f v, float lo, float hi) {
    v = select16(v < lo, splat(lo), v);
    return select16(v > hi, splat(hi), v);
}

/* ew_vexp (elementwise_vmath.h) on 16 lanes: the same range reduction and polynomial. */
WIDE v16f exp16(v16f in) {
    v16i nan = in != in;
    v16f x = select16(nan, splat(0.0f), in);
    x = select16(x < -87.0f, splat(-87.0f), x);
    x = select16(x > 88.0f, splat(88.0f), x);
    v16f k = (x * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
    v16f r = (x - k * 0.693145751953125f) - k * 1.428606765330187e-06f;
    v16u e = (v16u)(__builtin_convertvector(k, v16i) + 127) << 23;
    v16f p = splat(EW_EXP_POLY[EW_NCOEF(EW_EXP_POLY) - 1]);
    for (int i = EW_NCOEF(EW_EXP_POLY) - 2; i >= 0; i--) p = p * r + EW_EXP_POLY[i];
    v16f y = p * (v16f)e;
    y = select16(in < -87.0f, splat(0.0f), y);
    y = select16(in > 88.0f, splat(__builtin_inff()), y);
    return select16(nan, in, y);
}

WIDE v16f sigmoid16(v16f x) { return 1.0f / (1.0f + exp16(-x)); }

/* One vector through the activation (kind checked by the caller). */
WIDE v16f act16(v16f v, kiln_activation kind, float p0, float p1) {
    switch (kind) {
    case KILN_ACT_RELU: return select16(v < 0.0f, splat(0.0f), v);
    case KILN_ACT_LEAKY_RELU: return select16(v < 0.0f, v * p0, v);
    case KILN_ACT_CLIP: return clamp16(v, p0, p1);
    case KILN_ACT_HARD_SIGMOID: return clamp16(p0 * v + p1, 0.0f, 1.0f);
    case KILN_ACT_HARD_SWISH: return v * clamp16(v / 6.0f + 0.5f, 0.0f, 1.0f);
    case KILN_ACT_SIGMOID: return sigmoid16(v);
    case KILN_ACT_SILU: return v * sigmoid16(v);
    default: return v;
    }
}

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
            v16f v = {0};                                                                          \
            memcpy(&v, y + i, (size_t)(n - i) * sizeof(float));                                    \
            v = act16(v, KIND, p0, p1);                                                            \
            memcpy(y + i, &v, (size_t)(n - i) * sizeof(float));                                    \
        }                                                                                          \
    } while (0)

__attribute__((target("avx512f"))) static void apply_wide(float *y, int64_t n, kiln_activation kind, float p0, float p1) {
    switch (kind) {
    case KILN_ACT_RELU: WIDE_LOOP(KILN_ACT_RELU); break;
    case KILN_ACT_LEAKY_RELU: WIDE_LOOP(KILN_ACT_LEAKY_RELU); break;
    case KILN_ACT_CLIP: WIDE_LOOP(KILN_ACT_CLIP); break;
    case KILN_ACT_HARD_SIGMOID: WIDE_LOOP(KILN_ACT_HARD_SIGMOID); break;
    case KILN_ACT_HARD_SWISH: WIDE_LOOP(KILN_ACT_HARD_SWISH); break;
    case KILN_ACT_SIGMOID: WIDE_LOOP(KILN_ACT_SIGMOID); break;
    case KILN_ACT_SILU: WIDE_LOOP(KILN_ACT_SILU); break;
    default: break;
    }
}

static bool g_avx512;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static void probe(void) {
    __builtin_cpu_init();
    g_avx512 = __builtin_cpu_supports("avx512f");
}

bool kiln_cpu_activation_wide(float *y, int64_t n, const kiln_act *a) {
    pthread_once(&g_once, probe);
    switch (a->kind) {
    case KILN_ACT_RELU: case KILN_ACT_LEAKY_RELU: case KILN_ACT_CLIP: case KILN_ACT_HARD_SIGMOID:
    case KILN_ACT_HARD_SWISH: case KILN_ACT_SIGMOID: case KILN_ACT_SILU: break;
    default: return false;
    }
    if (!g_avx512) return false;
    apply_wide(y, n, a->kind, a->p0, a->p1);
    return true;
}
#else
bool kiln_cpu_activation_wide(float *y, int64_t n, const kiln_act *a) {
    (void)y;
    (void)n;
    (void)a;
    return false;
}
#endif
