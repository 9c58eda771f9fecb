/* cpu_simd.h — how the CPU kernels get wide vectors without giving up portability: a hot function
 * marked KILN_SIMD_CLONES is compiled twice on x86-64 Linux, for x86-64-v3 (AVX2 + FMA) and for the
 * baseline, and the loader picks the clone the processor runs (GCC/Clang target_clones). Kernels
 * written on the 8-lane kiln_v8f type then use one AVX register, or two SSE registers. */
#ifndef KILN_CPU_SIMD_H
#define KILN_CPU_SIMD_H

#include <string.h>

#if defined(__x86_64__) && defined(__linux__) && !defined(KILN_NO_SIMD_CLONES)
#define KILN_SIMD_CLONES __attribute__((target_clones("arch=x86-64-v3", "default")))
#else
#define KILN_SIMD_CLONES
#endif

/* The helpers below pass 8-lane vectors by value; inlined, no call crosses the clones' ABIs. */
#pragma GCC diagnostic ignored "-Wpsabi"

typedef float kiln_v8f __attribute__((vector_size(32)));

static inline kiln_v8f kiln_v8_load(const float *p) {
    kiln_v8f v;
    memcpy(&v, p, sizeof v);
    return v;
}
static inline void kiln_v8_store(float *p, kiln_v8f v) { memcpy(p, &v, sizeof v); }
static inline kiln_v8f kiln_v8_splat(float x) { return (kiln_v8f){x, x, x, x, x, x, x, x}; }
static inline float kiln_v8_sum(kiln_v8f v) {
    return ((v[0] + v[4]) + (v[1] + v[5])) + ((v[2] + v[6]) + (v[3] + v[7]));
}

#endif
