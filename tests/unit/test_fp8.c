/* test_fp8.c — FP8 E4M3 conversions over all 256 codes: decoding against the format's definition
 * (known anchors, NaN only at 0x7f / 0xff, monotone positive codes), every finite code round trips,
 * every midpoint between neighbouring codes rounds to the even one and its neighbouring floats to
 * the nearer code, saturation to +-448 (large values, infinities), NaN kept, a brute-force
 * nearest-code search agreeing on a wide sweep of floats, the calibrated per-tensor scale, and which
 * GPUs have FP8 (compute capability from the cuda backend's device description). */
#include "check.h"

#include "quant/fp8.h"

#include <float.h>
#include <math.h>
#include <string.h>

/* The nearest positive finite code to |x| by scanning all of them, ties to the even code, then the
 * sign; >= 448 saturates. */
static uint8_t brute_force_e4m3(float x) {
    uint8_t sign = signbit(x) ? 0x80 : 0;
    double a = fabs((double)x);
    if (isnan(x)) return sign | KILN_E4M3_NAN;
    if (a >= KILN_E4M3_MAX) return sign | 0x7e;
    uint8_t best = 0;
    double best_err = INFINITY;
    for (int c = 0; c <= 0x7e; c++) {
        double err = fabs((double)kiln_e4m3_to_f32((uint8_t)c) - a);
        if (err < best_err || (err == best_err && !(c & 1))) best = (uint8_t)c, best_err = err;
    }
    return sign | best;
}

static void test_decode(void) {
    CHECK(kiln_e4m3_to_f32(0x00) == 0.0f && !signbit(kiln_e4m3_to_f32(0x00)));
    CHECK(kiln_e4m3_to_f32(0x80) == 0.0f && signbit(kiln_e4m3_to_f32(0x80)));
    CHECK(kiln_e4m3_to_f32(0x01) == ldexpf(1.0f, -9));  /* smallest subnormal */
    CHECK(kiln_e4m3_to_f32(0x07) == ldexpf(7.0f, -9));  /* largest subnormal */
    CHECK(kiln_e4m3_to_f32(0x08) == ldexpf(1.0f, -6));  /* smallest normal */
    CHECK(kiln_e4m3_to_f32(0x38) == 1.0f);
    CHECK(kiln_e4m3_to_f32(0x3f) == 1.875f);
    CHECK(kiln_e4m3_to_f32(0x40) == 2.0f);
    CHECK(kiln_e4m3_to_f32(0x7e) == 448.0f);
    CHECK(kiln_e4m3_to_f32(0xfe) == -448.0f);
    CHECK(kiln_e4m3_to_f32(0x77) == 240.0f); /* exponent 14 exists: no infinity code */
    int nans = 0;
    for (int c = 0; c < 256; c++) {
        float v = kiln_e4m3_to_f32((uint8_t)c);
        if (isnan(v)) {
            nans++;
            CHECKF((c & 0x7f) == 0x7f, "code 0x%02x decodes to NaN", c);
            continue;
        }
        CHECKF(v == -kiln_e4m3_to_f32((uint8_t)(c ^ 0x80)), "code 0x%02x is not the negation of its pair", c);
        if ((c & 0x7f) > 0 && (c & 0x7f) <= 0x7e)
            CHECKF(kiln_e4m3_to_f32((uint8_t)(c & 0x7f)) > kiln_e4m3_to_f32((uint8_t)((c & 0x7f) - 1)),
                   "positive codes not increasing at 0x%02x", c & 0x7f);
    }
    CHECK(nans == 2);
}

static void test_round_trip_and_midpoints(void) {
    for (int c = 0; c < 256; c++) {
        if ((c & 0x7f) == 0x7f) continue;
        float v = kiln_e4m3_to_f32((uint8_t)c);
        CHECKF(kiln_f32_to_e4m3(v) == c, "code 0x%02x (%g) encodes to 0x%02x", c, v, kiln_f32_to_e4m3(v));
    }
    /* Between each code and the next (positive and negative): ties to even, neighbours to the nearer. */
    for (int c = 0; c < 0x7e; c++)
        for (int sign = 0; sign <= 0x80; sign += 0x80) {
            float lo = kiln_e4m3_to_f32((uint8_t)(sign | c)), hi = kiln_e4m3_to_f32((uint8_t)(sign | (c + 1)));
            float mid = (lo + hi) / 2; /* exact: float32 has bits to spare */
            uint8_t even = (uint8_t)(sign | (c & 1 ? c + 1 : c));
            CHECKF(kiln_f32_to_e4m3(mid) == even, "midpoint %g of 0x%02x encodes to 0x%02x, expected 0x%02x", mid,
                   sign | c, kiln_f32_to_e4m3(mid), even);
            CHECKF(kiln_f32_to_e4m3(nextafterf(mid, lo)) == (sign | c), "just below midpoint %g", mid);
            CHECKF(kiln_f32_to_e4m3(nextafterf(mid, hi)) == (sign | (c + 1)), "just above midpoint %g", mid);
        }
}

static void test_saturation_and_nan(void) {
    CHECK(kiln_f32_to_e4m3(448.0f) == 0x7e);
    CHECK(kiln_f32_to_e4m3(nextafterf(448.0f, 0.0f)) == 0x7e);
    CHECK(kiln_f32_to_e4m3(449.0f) == 0x7e);
    CHECK(kiln_f32_to_e4m3(464.0f) == 0x7e); /* midpoint to the NaN code's value: saturates */
    CHECK(kiln_f32_to_e4m3(480.0f) == 0x7e);
    CHECK(kiln_f32_to_e4m3(1e30f) == 0x7e);
    CHECK(kiln_f32_to_e4m3(FLT_MAX) == 0x7e);
    CHECK(kiln_f32_to_e4m3(INFINITY) == 0x7e);
    CHECK(kiln_f32_to_e4m3(-INFINITY) == 0xfe);
    CHECK(kiln_f32_to_e4m3(-1000.0f) == 0xfe);
    CHECK(kiln_f32_to_e4m3(NAN) == 0x7f);
    CHECK(kiln_f32_to_e4m3(-NAN) == 0xff);
    CHECK(kiln_f32_to_e4m3(ldexpf(1.0f, -10)) == 0x00);            /* half the smallest subnormal: to even 0 */
    CHECK(kiln_f32_to_e4m3(-ldexpf(1.0f, -10)) == 0x80);           /* keeps its sign */
    CHECK(kiln_f32_to_e4m3(nextafterf(ldexpf(1.0f, -10), 1.0f)) == 0x01);
    CHECK(kiln_f32_to_e4m3(ldexpf(1.0f, -30)) == 0x00);
    CHECK(kiln_f32_to_e4m3(FLT_MIN / 4) == 0x00);                  /* a float32 subnormal */
    CHECK(kiln_f32_to_e4m3(ldexpf(15.0f, -10)) == 0x08);           /* 7.5 * 2^-9 rounds up into the normals */
}

/* Floats over every binade E4M3 covers and beyond, with random mantissas, against the brute force. */
static void test_sweep_against_brute_force(void) {
    uint32_t state = 2463534242u;
    int mismatches = 0;
    for (int i = 0; i < 200000; i++) {
        state ^= state << 13, state ^= state >> 17, state ^= state << 5;
        uint32_t exp = 127 - 14 + (state >> 8) % 26; /* 2^-14 .. 2^11 */
        uint32_t bits = (state & 0x80000000u) | exp << 23 | (state * 2654435761u) >> 9;
        float x;
        memcpy(&x, &bits, 4);
        if (kiln_f32_to_e4m3(x) != brute_force_e4m3(x) && mismatches++ < 5)
            CHECKF(0, "%a encodes to 0x%02x, the nearest code is 0x%02x", x, kiln_f32_to_e4m3(x), brute_force_e4m3(x));
    }
    CHECKF(mismatches == 0, "%d of 200000 floats disagree with the brute-force search", mismatches);
}

static void test_quantize_and_scale(void) {
    CHECK_NEAR(kiln_fp8_scale(448.0), 1.0, 0.0);
    CHECK_NEAR(kiln_fp8_scale(4.48), 0.01, 1e-15);
    const float x[5] = {0.0f, 1.0f, -2.0f, 4.0f, 100.0f};
    uint8_t q[5];
    kiln_e4m3_quantize(x, 5, (float)kiln_fp8_scale(4.0), q); /* 4 -> 448; 100 saturates */
    CHECK(q[0] == 0x00 && q[1] == 0x6e && q[2] == 0xf6 && q[3] == 0x7e && q[4] == 0x7e);
    CHECK(kiln_e4m3_to_f32(q[1]) == 112.0f);
    /* minmax: the threshold is the largest |x|, which then maps to the largest finite code */
    kiln_calib_hist h;
    kiln_calib_hist_init(&h, 3.5);
    const float y[4] = {0.5f, -3.5f, 1.0f, 2.0f};
    kiln_calib_hist_add(&h, y, 4);
    const kiln_calib_method minmax = {KILN_CALIB_MINMAX, 0};
    double s = kiln_fp8_scale_calibrated(&h, &minmax);
    CHECK_NEAR(s, 3.5 / 448.0, 1e-12);
    CHECK(kiln_f32_to_e4m3(-3.5f / (float)s) == 0xfe);
}

static void test_device_capability(void) {
    int major = 0, minor = 0;
    CHECK(kiln_fp8_parse_sm("NVIDIA H200 (sm_90, 132 SMs, 139 GiB), driver 12.8", &major, &minor) && major == 9 && minor == 0);
    CHECK(kiln_fp8_capable(major, minor));
    CHECK(kiln_fp8_parse_sm("NVIDIA L4 (sm_89, 58 SMs)", &major, &minor) && kiln_fp8_capable(major, minor));
    CHECK(kiln_fp8_parse_sm("NVIDIA A100 (sm_80, 108 SMs)", &major, &minor) && !kiln_fp8_capable(major, minor));
    CHECK(kiln_fp8_parse_sm("NVIDIA B200 (sm_100, 148 SMs)", &major, &minor) && major == 10 && minor == 0);
    CHECK(kiln_fp8_capable(10, 0) && !kiln_fp8_capable(8, 6) && !kiln_fp8_capable(7, 5));
    CHECK(!kiln_fp8_parse_sm("x86_64 CPU, 2 cores", &major, &minor));
    CHECK(!kiln_fp8_parse_sm("sm_", &major, &minor) && !kiln_fp8_parse_sm(NULL, &major, &minor));
}

int main(void) {
    test_device_capability();
    test_decode();
    test_round_trip_and_midpoints();
    test_saturation_and_nan();
    test_sweep_against_brute_force();
    test_quantize_and_scale();
    return checks_report("test_fp8");
}
