/* elementwise_vmath.h — float32 exp, sigmoid, tanh, erf, GELU and Mish on 4-lane vectors (GCC/Clang
 * vector extensions: one SSE register on x86-64, one NEON register on arm64), for the hot
 * activations of elementwise_unary.c. glibc's tanhf/erff cost ~14 ns an element and no libm call
 * vectorizes at -O2; these run branch-free on whole vectors.
 *
 * Accuracy (measured against double precision over dense grids): exp within 1.5 ulp on [-87, 88]; it
 * gives 0 below and inf above (the true results there are below FLT_MIN, or within a factor 2 of
 * FLT_MAX), which is why the Exp op itself keeps libm; tanh 1.5 ulp, erf 2.5, sigmoid 2.5, Mish 4.5,
 * GELU a few ulp except where its value is below 1e-10 (erfc's e^(-x^2) then carries the rounding
 * of x^2). NaN propagates. The polynomial coefficients are least-squares fits made
 * for kiln: e^r on [-ln2/2, ln2/2] (relative error 2e-9), erf(x)/x in x^2 on [0, 1] (1.2e-9),
 * erfcx(x) = erfc(x) e^(x^2) in u = 1/x on [1, 10] (1.4e-8), tanh(x)/x in x^2 on [0, 0.55] (9.4e-10). */
#ifndef KILN_CPU_ELEMENTWISE_VMATH_H
#define KILN_CPU_ELEMENTWISE_VMATH_H

#include <stdint.h>
#include <string.h>

typedef float ew_v4f __attribute__((vector_size(16)));
typedef int32_t ew_v4i __attribute__((vector_size(16)));
typedef uint32_t ew_v4u __attribute__((vector_size(16)));

static const float EW_EXP_POLY[] = {1.000000001e+00f, 1.000000039e+00f, 4.999999159e-01f, 1.666641024e-01f,
                                    4.166828886e-02f, 8.375644988e-03f, 1.383579468e-03f};
static const float EW_ERF_SMALL[] = {1.128379166e+00f, -3.761262585e-01f, 1.128358533e-01f, -2.685381821e-02f,
                                     5.188338010e-03f, -8.010275402e-04f, 7.854110874e-05f};
static const float EW_ERFCX_U[] = {-3.301399591e-06f, 5.643277330e-01f, -2.486849440e-03f, -2.567071247e-01f,
                                   -1.627316149e-01f, 1.102867785e+00f, -1.821609075e+00f, 1.713439985e+00f,
                                   -9.900293742e-01f, 3.287772769e-01f, -4.826185785e-02f};
static const float EW_TANH_SMALL[] = {9.999999991e-01f, -3.333331100e-01f, 1.333246146e-01f, -5.384276080e-02f,
                                      2.103985224e-02f, -6.235771822e-03f};
#define EW_NCOEF(c) ((int)(sizeof c / sizeof *c))

/* m ? a : b per lane (m: all ones or zero, from a comparison). */
static inline ew_v4f ew_vselect(ew_v4i m, ew_v4f a, ew_v4f b) {
    return (ew_v4f)((m & (ew_v4i)a) | (~m & (ew_v4i)b));
}
static inline ew_v4f ew_vabs(ew_v4f x) { return (ew_v4f)((ew_v4i)x & INT32_MAX); }
/* |mag| with the sign of s. */
static inline ew_v4f ew_vcopysign(ew_v4f mag, ew_v4f s) {
    return (ew_v4f)(((ew_v4i)mag & INT32_MAX) | ((ew_v4i)s & INT32_MIN));
}
static inline ew_v4f ew_vpoly(const float *c, int n, ew_v4f t) {
    ew_v4f r = (ew_v4f){0} + c[n - 1];
    for (int k = n - 2; k >= 0; k--) r = r * t + c[k];
    return r;
}

/* e^x: x = k ln2 + r with |r| <= ln2/2, e^r by polynomial, 2^k built in the exponent bits. */
static inline ew_v4f ew_vexp(ew_v4f in) {
    ew_v4i nan = in != in;
    ew_v4f x = ew_vselect(nan, (ew_v4f){0}, in); /* NaN lanes compute e^0 and are put back below */
    x = ew_vselect(x < -87.0f, (ew_v4f){0} - 87.0f, x);
    x = ew_vselect(x > 88.0f, (ew_v4f){0} + 88.0f, x);
    ew_v4f k = (x * 1.44269504088896341f + 12582912.0f) - 12582912.0f; /* round to nearest */
    ew_v4f r = (x - k * 0.693145751953125f) - k * 1.428606765330187e-06f;
    ew_v4u e = (ew_v4u)(__builtin_convertvector(k, ew_v4i) + 127) << 23;
    ew_v4f y = ew_vpoly(EW_EXP_POLY, EW_NCOEF(EW_EXP_POLY), r) * (ew_v4f)e;
    y = ew_vselect(in < -87.0f, (ew_v4f){0}, y);
    y = ew_vselect(in > 88.0f, (ew_v4f){0} + __builtin_inff(), y);
    return ew_vselect(nan, in, y);
}

static inline ew_v4f ew_vsigmoid(ew_v4f x) { return 1.0f / (1.0f + ew_vexp(-x)); }

/* tanh: polynomial near 0, else 1 - 2 / (e^(2|x|) + 1) with x's sign. */
static inline ew_v4f ew_vtanh(ew_v4f x) {
    ew_v4f a = ew_vabs(x);
    ew_v4f small = x * ew_vpoly(EW_TANH_SMALL, EW_NCOEF(EW_TANH_SMALL), x * x);
    ew_v4f big = ew_vcopysign(1.0f - 2.0f / (ew_vexp(2.0f * a) + 1.0f), x);
    return ew_vselect(a < 0.55f, small, big);
}

/* erfc(a) for a >= 1, 0 from 10 on where it underflows (other lanes: don't care). */
static inline ew_v4f ew_verfc_ge1(ew_v4f a) {
    ew_v4f r = ew_vexp(-(a * a)) * ew_vpoly(EW_ERFCX_U, EW_NCOEF(EW_ERFCX_U), 1.0f / a);
    return ew_vselect(a >= 10.0f, (ew_v4f){0}, r);
}

/* erf: polynomial below 1, else 1 - erfc(|x|) with x's sign (exactly +-1 from 4 on). */
static inline ew_v4f ew_verf(ew_v4f x) {
    ew_v4f a = ew_vabs(x);
    ew_v4f small = x * ew_vpoly(EW_ERF_SMALL, EW_NCOEF(EW_ERF_SMALL), x * x);
    ew_v4f big = ew_vcopysign(1.0f - ew_verfc_ge1(a), x);
    return ew_vselect(a < 1.0f, small, big);
}

/* 0.5 x (1 + erf(x / sqrt 2)), as 0.5 x erfc(-x / sqrt 2) where erf is near -1 (no cancellation). */
static inline ew_v4f ew_vgelu_erf(ew_v4f x) {
    ew_v4f z = x * 0.70710678118654752f;
    ew_v4f a = ew_vabs(z);
    ew_v4f small = z * ew_vpoly(EW_ERF_SMALL, EW_NCOEF(EW_ERF_SMALL), z * z);
    ew_v4f erfc_a = ew_verfc_ge1(a);
    ew_v4f erf = ew_vselect(a < 1.0f, small, ew_vcopysign(1.0f - erfc_a, z));
    return ew_vselect(z > -1.0f, 0.5f * x * (1.0f + erf), 0.5f * x * erfc_a);
}

/* 0.5 x (1 + tanh(y)) with y = sqrt(2/pi) (x + 0.044715 x^3), as x sigmoid(2y) (no cancellation). */
static inline ew_v4f ew_vgelu_tanh(ew_v4f x) {
    return x * ew_vsigmoid(1.5957691216057308f * (x + 0.044715f * x * x * x));
}

/* x tanh(ln(1 + e^x)) = x n (n + 2) / (n (n + 2) + 2) with n = e^x; x itself from 20 on, where the
 * tanh is 1 in float (and n^2 would overflow). */
static inline ew_v4f ew_vmish(ew_v4f x) {
    ew_v4f n = ew_vexp(x), m = n * (n + 2.0f);
    return ew_vselect(x > 20.0f, x, x * m / (m + 2.0f));
}

/* y[i] = F(x[i]) for i in [0, n), 4 lanes at a time (the tail padded with zeros). */
#define EW_VEC_MAP(x, y, n, F)                                                                     \
    do {                                                                                           \
        int64_t i_ = 0;                                                                            \
        for (; i_ + 4 <= (n); i_ += 4) {                                                           \
            ew_v4f v_;                                                                             \
            memcpy(&v_, (x) + i_, sizeof v_);                                                      \
            v_ = F(v_);                                                                            \
            memcpy((y) + i_, &v_, sizeof v_);                                                      \
        }                                                                                          \
        if (i_ < (n)) {                                                                            \
            ew_v4f v_ = {0};                                                                       \
            memcpy(&v_, (x) + i_, (size_t)((n) - i_) * sizeof(float));                            \
            v_ = F(v_);                                                                            \
            memcpy((y) + i_, &v_, (size_t)((n) - i_) * sizeof(float));                             \
        }                                                                                          \
    } while (0)

#endif
