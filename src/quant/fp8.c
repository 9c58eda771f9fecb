/* fp8.c — FP8 E4M3 conversions and scales (fp8.h). */
#include "quant/fp8.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

float kiln_e4m3_to_f32(uint8_t c) {
    int exp = (c >> 3) & 0xf, man = c & 7;
    float v;
    if (exp == 15 && man == 7) v = NAN;
    else if (exp == 0) v = ldexpf((float)man, -9);
    else v = ldexpf((float)(8 + man), exp - 10);
    return c & 0x80 ? -v : v;
}

uint8_t kiln_f32_to_e4m3(float x) {
    uint32_t bits;
    memcpy(&bits, &x, 4);
    uint8_t sign = (uint8_t)((bits >> 24) & 0x80);
    uint32_t mag = bits & 0x7fffffffu;
    if (mag > 0x7f800000u) return sign | KILN_E4M3_NAN;
    if (mag >= 0x43e00000u) return sign | 0x7e; /* >= 448, infinity included */
    if (mag >= 0x3c800000u) {                    /* >= 2^-6: a normal E4M3 value */
        uint32_t rounded = (mag + 0x7ffffu + ((mag >> 20) & 1)) >> 20; /* 8 exponent + 3 mantissa bits */
        return sign | (uint8_t)(rounded - ((127u - 7u) << 3));
    }
    /* Subnormal: a multiple of 2^-9; the product is exact and rintf rounds half to even (8 is the
     * smallest normal, code 0x08). */
    float m;
    memcpy(&m, &mag, 4);
    return sign | (uint8_t)rintf(m * 512.0f);
}

void kiln_e4m3_quantize(const float *x, int64_t n, float scale, uint8_t *out) {
    for (int64_t i = 0; i < n; i++) out[i] = kiln_f32_to_e4m3(x[i] / scale);
}

double kiln_fp8_scale(double threshold) { return threshold / KILN_E4M3_MAX; }

double kiln_fp8_scale_calibrated(const kiln_calib_hist *h, const kiln_calib_method *m) {
    return kiln_fp8_scale(kiln_calib_threshold(h, m));
}

bool kiln_fp8_capable(int major, int minor) { return major > 8 || (major == 8 && minor >= 9); }

bool kiln_fp8_parse_sm(const char *desc, int *major, int *minor) {
    const char *p = desc ? strstr(desc, "sm_") : NULL;
    if (!p || p[3] < '1' || p[3] > '9' || p[4] < '0' || p[4] > '9') return false;
    bool three = p[5] >= '0' && p[5] <= '9'; /* sm_100 and later: two digits of major */
    *major = three ? (p[3] - '0') * 10 + (p[4] - '0') : p[3] - '0';
    *minor = three ? p[5] - '0' : p[4] - '0';
    return true;
}
