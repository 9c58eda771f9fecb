/* activation_v16.h — the epilogue activations on one 16-lane AVX-512 vector, inline, for kernels
 * that apply them in registers before storing (activation_wide.c over arrays, the depthwise Conv
 * kernel on its accumulators). Defined where GCC/Clang target x86-64 (KILN_V16 is then 1); every
 * function is compiled for AVX-512F + FMA and may only run where the processor has them. exp is
 * ew_vexp's range reduction and polynomial, with 2^k applied by vscalefps, which also gives 0 far
 * below and inf far above; the logistic forms (Sigmoid, SiLU, tanh-GELU) take a shorter e^-x of
 * their own (exp_neg16). */
#ifndef KILN_CPU_ACTIVATION_V16_H
#define KILN_CPU_ACTIVATION_V16_H

#include "backends/cpu/elementwise_vmath.h"
#include "ir/fused_ops.h"

#include <stdint.h>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__)) && !defined(KILN_NO_SIMD_CLONES)
#include <immintrin.h>
#define KILN_V16 1
#define KILN_V16_FN __attribute__((target("avx512f,fma"), always_inline)) static inline

typedef float v16f __attribute__((vector_size(64)));
typedef int32_t v16i __attribute__((vector_size(64)));

KILN_V16_FN v16f splat16(float x) { return (v16f){0} + x; }
/* a b + c in one rounding (kiln compiles ISO C, where GCC does not contract a * b + c itself). */
KILN_V16_FN v16f fma16(v16f a, v16f b, v16f c) { return (v16f)_mm512_fmadd_ps((__m512)a, (__m512)b, (__m512)c); }
KILN_V16_FN v16f select16(v16i m, v16f a, v16f b) { return (v16f)((m & (v16i)a) | (~m & (v16i)b)); }
KILN_V16_FN v16f clamp16(v16f v, float lo, float hi) {
    v = select16(v < lo, splat16(lo), v);
    return select16(v > hi, splat16(hi), v);
}

/* e^x: x = k ln2 + r with |r| <= ln2/2, e^r by ew_vexp's polynomial, times 2^k by vscalefps (0 and
 * inf beyond the float range, NaN through). */
KILN_V16_FN v16f exp16(v16f x) {
    /* clamped where e^x is 0 or inf anyway (infinities would make r NaN); vmaxps/vminps return
     * their second operand, x, when it is NaN */
    x = (v16f)_mm512_min_ps(_mm512_set1_ps(89.0f), _mm512_max_ps(_mm512_set1_ps(-104.0f), (__m512)x));
    v16f k = (v16f)_mm512_roundscale_ps((__m512)(x * 1.44269504088896341f), _MM_FROUND_TO_NEAREST_INT);
    v16f r = fma16(k, splat16(-0.693145751953125f), x);
    r = fma16(k, splat16(-1.428606765330187e-06f), r);
    v16f p = splat16(EW_EXP_POLY[EW_NCOEF(EW_EXP_POLY) - 1]);
    for (int i = EW_NCOEF(EW_EXP_POLY) - 2; i >= 0; i--) p = fma16(p, r, splat16(EW_EXP_POLY[i]));
    return (v16f)_mm512_scalef_ps((__m512)p, (__m512)k);
}

/* e^-x for the logistic: -x = k ln2 + r' with k = round(-x / ln2), taken as r = x + k ln2 = -r' in
 * one FMA (ln2 rounded to float: an error of |k| 2e-9 in r, 2.4e-7 relative at |k| = 127), e^r' by
 * a degree-5 polynomial in r (the alternating signs of SIGMOID_EXP_POLY, a relative-error fit to
 * e^t on [-ln2/2, ln2/2] within 7.5e-8), times 2^k by vscalefps. x is clamped to [-88, 104]
 * first (e^88 is below FLT_MAX; at 104 e^-x is 0 in float). Against ew_vexp: one reduction step
 * and one polynomial term fewer, no negation. */
static const float SIGMOID_EXP_POLY[] = {1.0000001192e+00f, -9.999997020e-01f, 4.999889433e-01f,
                                         -1.666756570e-01f, 4.191542044e-02f, -8.298279718e-03f};
KILN_V16_FN v16f exp_neg16(v16f x) {
    __m512 xc = _mm512_min_ps(_mm512_set1_ps(104.0f), _mm512_max_ps(_mm512_set1_ps(-88.0f), (__m512)x));
    __m512 k = _mm512_roundscale_ps(_mm512_mul_ps(xc, _mm512_set1_ps(-1.44269504088896341f)), _MM_FROUND_TO_NEAREST_INT);
    v16f r = fma16((v16f)k, splat16(0.693147180559945309f), (v16f)xc);
    v16f p = splat16(SIGMOID_EXP_POLY[EW_NCOEF(SIGMOID_EXP_POLY) - 1]);
    for (int i = EW_NCOEF(SIGMOID_EXP_POLY) - 2; i >= 0; i--) p = fma16(p, r, splat16(SIGMOID_EXP_POLY[i]));
    return (v16f)_mm512_scalef_ps((__m512)p, k);
}

/* 1 / (1 + e^-x) by vrcp14ps and one Newton step (no division); 0 below -87, where the true value
 * falls under FLT_MIN (and the reciprocal of 1 + e^-x would be subnormal); NaN through (the clamp
 * keeps it, and the mask lets it pass). Within 4e-7 relative of the true value. */
KILN_V16_FN v16f sigmoid16(v16f x) {
    __m512 d = _mm512_add_ps(_mm512_set1_ps(1.0f), (__m512)exp_neg16(x)), r = _mm512_rcp14_ps(d);
    __mmask16 live = _mm512_cmp_ps_mask((__m512)x, _mm512_set1_ps(-87.0f), _CMP_NLT_UQ);
    return (v16f)_mm512_maskz_mul_ps(live, r, _mm512_fnmadd_ps(d, r, _mm512_set1_ps(2.0f)));
}

KILN_V16_FN v16f abs16(v16f x) { return (v16f)((v16i)x & INT32_MAX); }
/* |mag| with the sign of s. */
KILN_V16_FN v16f copysign16(v16f mag, v16f s) { return (v16f)(((v16i)mag & INT32_MAX) | ((v16i)s & INT32_MIN)); }
KILN_V16_FN v16f poly16(const float *c, int n, v16f t) {
    v16f r = splat16(c[n - 1]);
    for (int k = n - 2; k >= 0; k--) r = fma16(r, t, splat16(c[k]));
    return r;
}

/* The 16-lane forms of ew_vtanh, ew_verfc_ge1 and ew_vgelu_erf (elementwise_vmath.h). */
KILN_V16_FN v16f tanh16(v16f x) {
    v16f a = abs16(x);
    v16f small = x * poly16(EW_TANH_SMALL, EW_NCOEF(EW_TANH_SMALL), x * x);
    v16f big = copysign16(1.0f - 2.0f / (exp16(2.0f * a) + 1.0f), x);
    return select16(a < 0.55f, small, big);
}
KILN_V16_FN v16f erfc_ge1_16(v16f a) {
    v16f r = exp16(-(a * a)) * poly16(EW_ERFCX_U, EW_NCOEF(EW_ERFCX_U), 1.0f / a);
    return select16(a >= 10.0f, splat16(0.0f), r);
}
KILN_V16_FN v16f gelu_erf16(v16f x) {
    v16f z = x * 0.70710678118654752f, a = abs16(z);
    v16f small = z * poly16(EW_ERF_SMALL, EW_NCOEF(EW_ERF_SMALL), z * z);
    v16f erfc_a = erfc_ge1_16(a);
    v16f erf = select16(a < 1.0f, small, copysign16(1.0f - erfc_a, z));
    return select16(z > -1.0f, 0.5f * x * (1.0f + erf), 0.5f * x * erfc_a);
}

/* One vector through the activation (kind checked by the caller). */
KILN_V16_FN v16f act16(v16f v, kiln_activation kind, float p0, float p1) {
    switch (kind) {
    case KILN_ACT_RELU: return select16(v < 0.0f, splat16(0.0f), v);
    case KILN_ACT_LEAKY_RELU: return select16(v < 0.0f, v * p0, v);
    case KILN_ACT_CLIP: return clamp16(v, p0, p1);
    case KILN_ACT_HARD_SIGMOID: return clamp16(fma16(v, splat16(p0), splat16(p1)), 0.0f, 1.0f);
    case KILN_ACT_HARD_SWISH: /* ONNX's alpha x + beta, alpha = 1/6: no division */
        return v * clamp16(fma16(v, splat16(1.0f / 6.0f), splat16(0.5f)), 0.0f, 1.0f);
    case KILN_ACT_SIGMOID: return sigmoid16(v);
    case KILN_ACT_SILU: return v * sigmoid16(v);
    case KILN_ACT_TANH: return tanh16(v);
    case KILN_ACT_GELU: return gelu_erf16(v);
    case KILN_ACT_GELU_TANH: return v * sigmoid16(1.5957691216057308f * (v + 0.044715f * v * v * v));
    default: return v;
    }
}

#endif
#endif
