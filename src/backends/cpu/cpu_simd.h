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

typedef float kiln_v8f __attribute__((vector_size(32)));

/* Macros rather than functions: passing 8-lane vectors by value between a baseline function and an
 * x86-64-v3 clone would change the ABI (an error under Clang). GNU statement expressions. */
#define kiln_v8_load(p)                                                                            \
    ({                                                                                             \
        kiln_v8f v_;                                                                               \
        memcpy(&v_, (p), sizeof v_);                                                               \
        v_;                                                                                        \
    })
#define kiln_v8_store(p, v)                                                                        \
    do {                                                                                           \
        kiln_v8f s_ = (v);                                                                         \
        memcpy((p), &s_, sizeof s_);                                                               \
    } while (0)
#define kiln_v8_splat(x) ((kiln_v8f){0} + (float)(x))
#define kiln_v8_sum(v)                                                                             \
    ({                                                                                             \
        kiln_v8f h_ = (v);                                                                         \
        ((h_[0] + h_[4]) + (h_[1] + h_[5])) + ((h_[2] + h_[6]) + (h_[3] + h_[7]));                 \
    })

#endif
