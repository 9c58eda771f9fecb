/* activation_wide.c — kiln_cpu_activation_wide (activation_wide.h): the 16-lane activations of
 * activation_v16.h over an array, in a function compiled for AVX-512F, chosen once from the
 * processor; the tail goes through a zero-padded vector. */
#include "backends/cpu/activation_wide.h"

#include "backends/cpu/activation_v16.h"

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
            v16f v = {0};                                                                          \
            memcpy(&v, y + i, (size_t)(n - i) * sizeof(float));                                    \
            v = act16(v, KIND, p0, p1);                                                            \
            memcpy(y + i, &v, (size_t)(n - i) * sizeof(float));                                    \
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
#else
bool kiln_cpu_activation_wide(float *y, int64_t n, const kiln_act *a) {
    (void)y;
    (void)n;
    (void)a;
    return false;
}
#endif
