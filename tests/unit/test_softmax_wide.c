/* test_softmax_wide.c — kiln_cpu_softmax_wide (activation_wide.h), the attention kernel's row
 * softmax on 16-lane vectors, against a double-precision softmax written here: rows of 1 to 200
 * elements (whole vectors and masked tails), large and negative scores, masked (-inf) entries, and
 * the rows that come out NaN (all -inf, a +inf, a NaN). Exits 77 (skipped) on a processor without
 * AVX-512, where the function declines every row. */
#include "check.h"

#include "backends/cpu/activation_wide.h"

#include <string.h>

static uint32_t g_rng = 4242;
static float frand(void) {
    g_rng = g_rng * 1664525u + 1013904223u;
    return (float)((g_rng >> 8) & 0xffff) / 4096.0f - 8.0f;
}

/* Row of n scores (offset by shift, every fifth masked when masked) against the double softmax. */
static void check_row(int64_t n, float shift, bool masked) {
    float s[256], x[256];
    for (int64_t i = 0; i < n; i++) x[i] = masked && i % 5 == 1 ? -INFINITY : frand() + shift;
    memcpy(s, x, sizeof(float) * (size_t)n);
    s[n] = 12345.0f; /* past the row: untouched */
    CHECK(kiln_cpu_softmax_wide(s, n));
    double mx = -INFINITY, sum = 0.0, worst = 0.0;
    for (int64_t i = 0; i < n; i++) mx = x[i] > mx ? x[i] : mx;
    for (int64_t i = 0; i < n; i++) sum += exp((double)x[i] - mx);
    for (int64_t i = 0; i < n; i++) {
        double want = exp((double)x[i] - mx) / sum, err = fabs(s[i] - want) / (want + 1e-30);
        if (want < 1e-30) err = fabs(s[i]); /* far below FLT_MIN: 0 or a denormal */
        if (isnan(err) || err > worst) worst = isnan(err) ? INFINITY : err;
    }
    CHECKF(worst < 2e-6, "softmax of %lld scores (shift %g, masked %d): relative error %g", (long long)n, shift,
           masked, worst);
    CHECK(s[n] == 12345.0f);
}

int main(void) {
    float probe = 0.0f;
    if (!kiln_cpu_softmax_wide(&probe, 1)) {
        printf("test_softmax_wide: skipped (no AVX-512)\n");
        return 77;
    }
    CHECK(probe == 1.0f);
    CHECK(!kiln_cpu_softmax_wide(&probe, 0));
    const int64_t lens[] = {1, 2, 5, 15, 16, 17, 31, 32, 33, 64, 128, 200};
    for (size_t i = 0; i < sizeof lens / sizeof *lens; i++) {
        check_row(lens[i], 0.0f, false);
        check_row(lens[i], 80.0f, lens[i] > 2);   /* scores far above e^x's range: max-subtracted */
        check_row(lens[i], -120.0f, lens[i] > 2); /* and far below */
    }
    float nan_rows[3][20];
    for (int r = 0; r < 3; r++)
        for (int i = 0; i < 20; i++) nan_rows[r][i] = r == 0 ? -INFINITY : frand();
    nan_rows[1][17] = INFINITY;
    nan_rows[2][3] = NAN;
    for (int r = 0; r < 3; r++) {
        CHECK(kiln_cpu_softmax_wide(nan_rows[r], 20));
        bool all_nan = true;
        for (int i = 0; i < 20; i++) all_nan = all_nan && isnan(nan_rows[r][i]);
        CHECKF(all_nan, "row %d (all -inf, a +inf, a NaN) is not NaN throughout", r);
    }
    return checks_report("test_softmax_wide");
}
