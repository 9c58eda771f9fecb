/* test_conv_depthwise.c — the depthwise 2-D Conv kernel (conv2d_depthwise.c, through
 * kiln_conv2d_run) against a double-precision loop written here, on every instruction set the
 * processor runs: 3x3 and 5x5 kernels (their unrolled forms) at strides 1 and 2, other kernels,
 * strides and dilations (the tap-table form), planes wide enough for two-vector blocks and a masked
 * tail, planes narrower than a vector (computed over flattened rows), channel multipliers 2 and 3,
 * two images, asymmetric pads, and the epilogue (bias, residual, ReLU, SiLU, HardSwish,
 * HardSigmoid, Sigmoid, Clip) applied before the store. */
#include "check.h"

#include "backends/cpu/conv2d.h"
#include "backends/cpu/packed_gemm.h"

#include <stdint.h>
#include <string.h>

static uint32_t g_rng = 777;
static float frand(void) {
    g_rng = g_rng * 1664525u + 1013904223u;
    return (float)((g_rng >> 8) & 0xffff) / 16384.0f - 2.0f;
}

static double act_reference(const kiln_act *a, double x) {
    double c;
    switch (a->kind) {
    case KILN_ACT_NONE: return x;
    case KILN_ACT_RELU: return x < 0 ? 0 : x;
    case KILN_ACT_CLIP: return x < a->p0 ? a->p0 : x > a->p1 ? a->p1 : x;
    case KILN_ACT_HARD_SIGMOID: c = a->p0 * x + a->p1; return c < 0 ? 0 : c > 1 ? 1 : c;
    case KILN_ACT_HARD_SWISH: c = x / 6 + 0.5; return x * (c < 0 ? 0 : c > 1 ? 1 : c);
    case KILN_ACT_SIGMOID: return 1.0 / (1.0 + exp(-x));
    case KILN_ACT_SILU: return x / (1.0 + exp(-x));
    default: return NAN;
    }
}

/* One depthwise case: C input channels, multiplier mult (M = C mult, group C), H x W planes,
 * KH x KW kernel, stride s, dilation d, leading pads ph, pw and trailing pads pe (both axes). */
typedef struct dw_case {
    int64_t N, C, mult, H, W, KH, KW, s, d, ph, pw, pe;
    bool bias, residual;
    kiln_act act;
} dw_case;

static void run_case(const dw_case *k) {
    int64_t M = k->C * k->mult;
    kiln_conv2d g = {k->N, k->C, k->H, k->W, M, 0, 0, k->KH, k->KW, k->C, k->s, k->s, k->d, k->d, k->ph, k->pw};
    g.OH = (k->H + k->ph + k->pe - k->d * (k->KH - 1) - 1) / k->s + 1;
    g.OW = (k->W + k->pw + k->pe - k->d * (k->KW - 1) - 1) / k->s + 1;
    CHECK(kiln_conv2d_depthwise_fits(M, 1, k->KH, k->KW, k->C));
    int64_t nx = k->N * k->C * k->H * k->W, nw = M * k->KH * k->KW, ny = k->N * M * g.OH * g.OW;
    float *x = malloc(sizeof(float) * (size_t)nx), *w = malloc(sizeof(float) * (size_t)nw);
    float *b = malloc(sizeof(float) * (size_t)M), *z = malloc(sizeof(float) * (size_t)ny);
    float *y = malloc(sizeof(float) * (size_t)ny);
    double *want = malloc(sizeof(double) * (size_t)ny);
    for (int64_t i = 0; i < nx; i++) x[i] = frand();
    for (int64_t i = 0; i < nw; i++) w[i] = frand() / 2;
    for (int64_t i = 0; i < M; i++) b[i] = frand();
    for (int64_t i = 0; i < ny; i++) z[i] = frand();
    for (int64_t n = 0; n < k->N; n++)
        for (int64_t m = 0; m < M; m++)
            for (int64_t oh = 0; oh < g.OH; oh++)
                for (int64_t ow = 0; ow < g.OW; ow++) {
                    double s = k->bias ? b[m] : 0.0;
                    const float *xc = x + (n * k->C + m / k->mult) * k->H * k->W;
                    for (int64_t kh = 0; kh < k->KH; kh++)
                        for (int64_t kw = 0; kw < k->KW; kw++) {
                            int64_t ih = oh * k->s + kh * k->d - k->ph, iw = ow * k->s + kw * k->d - k->pw;
                            if (ih >= 0 && ih < k->H && iw >= 0 && iw < k->W)
                                s += (double)w[(m * k->KH + kh) * k->KW + kw] * xc[ih * k->W + iw];
                        }
                    int64_t o = ((n * M + m) * g.OH + oh) * g.OW + ow;
                    want[o] = act_reference(&k->act, s + (k->residual ? z[o] : 0.0));
                }
    for (int isa = KILN_PG_PORTABLE; isa <= KILN_PG_AVX512; isa++) {
        if (!kiln_pg_isa_set((kiln_pg_isa)isa)) continue;
        memset(y, 0xff, sizeof(float) * (size_t)ny); /* NaN: every output must be written */
        CHECK_OK(kiln_conv2d_run(&g, x, w, NULL, k->bias ? b : NULL, k->residual ? z : NULL, &k->act, y));
        double worst = 0;
        for (int64_t i = 0; i < ny; i++) {
            double err = fabs(y[i] - want[i]) / (1.0 + fabs(want[i]));
            if (isnan(err) || err > worst) worst = isnan(err) ? INFINITY : err;
        }
        CHECKF(worst < 4e-6 * sqrt((double)(k->KH * k->KW)),
               "depthwise N%lld C%lld x%lld %lldx%lld k%lldx%lld s%lld d%lld p%lld,%lld,%lld bias %d res %d act %d "
               "isa %d: error %g",
               (long long)k->N, (long long)k->C, (long long)k->mult, (long long)k->H, (long long)k->W,
               (long long)k->KH, (long long)k->KW, (long long)k->s, (long long)k->d, (long long)k->ph,
               (long long)k->pw, (long long)k->pe, k->bias, k->residual, k->act.kind, isa, worst);
    }
    kiln_pg_isa_set(kiln_pg_isa_best());
    free(x);
    free(w);
    free(b);
    free(z);
    free(y);
    free(want);
}

int main(void) {
    const kiln_act none = {KILN_ACT_NONE, 0, 0}, relu = {KILN_ACT_RELU, 0, 0}, silu = {KILN_ACT_SILU, 0, 0};
    const kiln_act hswish = {KILN_ACT_HARD_SWISH, 0, 0}, hsig = {KILN_ACT_HARD_SIGMOID, 0.2f, 0.5f};
    const kiln_act sig = {KILN_ACT_SIGMOID, 0, 0}, clip = {KILN_ACT_CLIP, 0, 6};
    const dw_case cases[] = {
        /* 3x3 and 5x5, stride 1: wide rows (two-vector blocks, a 16-vector, a masked tail) */
        {1, 3, 1, 11, 57, 3, 3, 1, 1, 1, 1, 1, true, false, silu},
        {1, 2, 1, 9, 50, 5, 5, 1, 1, 2, 2, 2, true, true, hswish},
        /* stride 2 (deinterleaved planes), odd and even widths, asymmetric pads */
        {2, 3, 1, 13, 67, 3, 3, 2, 1, 1, 1, 1, true, false, relu},
        {1, 4, 1, 15, 36, 3, 3, 2, 1, 0, 0, 1, false, true, clip},
        {1, 3, 1, 17, 29, 5, 5, 2, 1, 2, 2, 2, true, false, silu},
        {1, 2, 2, 12, 12, 5, 5, 2, 1, 1, 1, 2, true, true, sig},
        /* narrow planes: flattened rows (stride 1, no residual), and with a residual per row */
        {1, 5, 1, 7, 7, 3, 3, 1, 1, 1, 1, 1, true, false, silu},
        {1, 6, 1, 7, 7, 5, 5, 1, 1, 2, 2, 2, true, false, hsig},
        {2, 3, 2, 4, 5, 3, 3, 1, 1, 1, 1, 1, false, false, none},
        {1, 4, 1, 14, 14, 5, 5, 1, 1, 2, 2, 2, true, false, hswish},
        {1, 3, 1, 7, 7, 3, 3, 1, 1, 1, 1, 1, true, true, relu},
        {1, 2, 1, 1, 1, 3, 3, 1, 1, 1, 1, 1, true, false, silu},
        {2, 3, 1, 11, 2, 3, 3, 1, 1, 1, 1, 1, true, false, silu}, /* rows of 4: four rows per vector */
        {1, 2, 1, 5, 17, 5, 5, 1, 1, 2, 0, 1, true, false, relu}, /* one-sided pads: rows of 20 */
        /* the tap table: other sizes, stride 3, dilation 2, multiplier 3, a 1x7 row kernel */
        {1, 2, 3, 10, 23, 3, 3, 3, 1, 1, 1, 1, true, false, relu},
        {1, 3, 1, 19, 40, 3, 3, 1, 2, 2, 2, 2, true, true, silu},
        {1, 2, 1, 6, 41, 1, 7, 1, 1, 0, 3, 3, false, false, hswish},
        {1, 2, 1, 9, 9, 7, 7, 1, 1, 3, 3, 3, true, false, none},
        {1, 3, 1, 8, 20, 2, 2, 2, 1, 0, 0, 0, true, false, sig},
        /* stride 1 read in place (outputs 8 to 32 wide): three rows, rows whose taps fall partly
         * outside the plane (one-sided and asymmetric pads), a tail of two rows with a residual,
         * no pads, dilation 2; a 1x9 kernel (wider than the in-place path takes: padded plane,
         * tap table) */
        {1, 2, 1, 3, 12, 5, 5, 1, 1, 2, 2, 2, true, true, silu},
        {1, 3, 1, 14, 14, 3, 3, 1, 1, 1, 1, 1, true, true, silu},
        {1, 2, 1, 10, 18, 3, 3, 1, 1, 2, 0, 1, true, true, relu},
        {1, 3, 1, 12, 21, 5, 5, 1, 1, 0, 0, 0, true, false, hswish},
        {1, 2, 1, 20, 32, 3, 3, 1, 2, 2, 2, 2, false, false, none},
        {1, 2, 1, 6, 30, 1, 9, 1, 1, 0, 4, 4, true, true, relu},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) run_case(&cases[i]);
    return checks_report("test_conv_depthwise");
}
