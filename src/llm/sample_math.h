/* sample_math.h — the two pieces of arithmetic that the CPU sampler (sampler.c) and the GPU one
 * (cuda/llm_cuda_sample.cu) must do bit for bit alike: the counter-based uniform draw and the
 * exponential that turns processed logits into unnormalised probabilities. Both are header-only and
 * compile for the host and (under nvcc) for the device; on the device every double product and sum
 * is rounded on its own (no fused multiply-add), as on a host without FMA contraction. */
#ifndef KILN_LLM_SAMPLE_MATH_H
#define KILN_LLM_SAMPLE_MATH_H

#include <math.h>
#include <stdint.h>

#ifdef __CUDACC__
#define KSM_FN static inline __host__ __device__
#else
#define KSM_FN static inline
#endif

#ifdef __CUDA_ARCH__
#define KSM_DMUL(a, b) __dmul_rn((a), (b))
#define KSM_DADD(a, b) __dadd_rn((a), (b))
#else
#define KSM_DMUL(a, b) ((a) * (b))
#define KSM_DADD(a, b) ((a) + (b))
#endif

/* The n-th number in [0, 1) of the stream named by seed (splitmix64 of seed + (n + 1) * gamma). */
KSM_FN double kiln_sample_uniform_at(uint64_t seed, uint64_t n) {
    uint64_t z = seed + (n + 1) * 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    return (double)(z >> 11) * 0x1.0p-53;
}

/* exp(x) for x <= 0 as a float: x = k ln2 + r (|r| <= ln2 / 2, ln2 split in two so that k * hi is
 * exact), e^r by its Taylor series to r^11 in double (error far below a float's rounding), scaled by
 * 2^k and rounded once to float. 0 below -104, where e^x is under half the smallest float. */
KSM_FN float kiln_sample_exp(float x) {
    if (!(x > -104.0f)) return 0.0f;
    const double ln2_hi = 6.93147180369123816490e-01, ln2_lo = 1.90821492927058770002e-10;
    const double xd = x, k = rint(KSM_DMUL(xd, 1.44269504088896338700e+00));
    const double r = KSM_DADD(KSM_DADD(xd, KSM_DMUL(-k, ln2_hi)), KSM_DMUL(-k, ln2_lo));
    double p = 1.0 / 39916800.0;
    p = KSM_DADD(KSM_DMUL(p, r), 1.0 / 3628800.0);
    p = KSM_DADD(KSM_DMUL(p, r), 1.0 / 362880.0);
    p = KSM_DADD(KSM_DMUL(p, r), 1.0 / 40320.0);
    p = KSM_DADD(KSM_DMUL(p, r), 1.0 / 5040.0);
    p = KSM_DADD(KSM_DMUL(p, r), 1.0 / 720.0);
    p = KSM_DADD(KSM_DMUL(p, r), 1.0 / 120.0);
    p = KSM_DADD(KSM_DMUL(p, r), 1.0 / 24.0);
    p = KSM_DADD(KSM_DMUL(p, r), 1.0 / 6.0);
    p = KSM_DADD(KSM_DMUL(p, r), 0.5);
    p = KSM_DADD(KSM_DMUL(p, r), 1.0);
    p = KSM_DADD(KSM_DMUL(p, r), 1.0);
    return (float)ldexp(p, (int)k);
}

#endif
