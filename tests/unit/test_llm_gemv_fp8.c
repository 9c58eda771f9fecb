/* test_llm_gemv_fp8.c — the FP8 (E4M3) product of the CPU LLM forward (src/llm/llm_gemv_fp8.c): the
 * weight quantizer's scales and codes, the activation scales (dynamic per token row, static, a row of
 * zeros) and their saturation, and kiln_llm_gemm_fp8 against an exact float64 reference (every code
 * decoded, every product summed in float64) for token counts 1..9, 16 and 33 (the tiles through the
 * GEMM), inner sizes not a multiple of 16, with bias, accumulation and GELU, dynamic and static
 * activation scales. */
#include "check.h"
#include "llm/llm_cpu_ops.h"
#include "llm/llm_gemv_fp8.h"
#include "quant/fp8.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

static uint64_t rng = 88172645463325252ull;
static float uniform(void) { /* xorshift64, in [-1, 1) */
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (float)((double)(rng >> 11) / (double)(1ull << 52) - 1.0);
}

static void test_quantize(void) {
    const float w[2][5] = {{0.5f, -1.0f, 0.25f, 0.0f, 1.0f / 3}, {0, 0, 0, 0, 0}};
    uint8_t q[10];
    float scale[2];
    kiln_llm_quantize_rows_fp8(&w[0][0], 2, 5, q, scale);
    CHECK(scale[0] == 1.0f / 448 && scale[1] == 0);
    CHECK(q[1] == 0xfe && q[0] == 0x76 && q[2] == 0x6e && q[3] == 0); /* -448, 224, 112 */
    CHECK(q[4] == kiln_f32_to_e4m3((1.0f / 3) / (1.0f / 448)));         /* 149.33 -> 144 */
    CHECK(kiln_e4m3_to_f32(q[4]) == 144.0f);
    for (int k = 5; k < 10; k++) CHECK(q[k] == 0);
    float row[5];
    const kiln_llm_q8 m = {.q = (const int8_t *)q, .scale = scale, .fp8 = true};
    kiln_llm_fp8_row(&m, 0, 5, row);
    CHECK(row[1] == -1.0f && row[0] == 0.5f && fabsf(row[4] - 1.0f / 3) <= (1.0f / 3) / 16);
}

static void test_act_scales(void) {
    const float x[4] = {0.5f, -2.0f, 1.0f, 0.0f}, zeros[3] = {0, 0, 0};
    CHECK(kiln_llm_fp8_act_scale(x, 4, 0) == 2.0f / 448);
    CHECK(kiln_llm_fp8_act_scale(x, 4, 0.25f) == 0.25f);
    CHECK(kiln_llm_fp8_act_scale(zeros, 3, 0) == 1.0f);
    uint8_t c[4];
    kiln_llm_fp8_quantize_acts(x, 4, 2.0f / 448, c);
    CHECK(c[1] == 0xfe && c[3] == 0 && kiln_e4m3_to_f32(c[0]) == 112.0f);
    kiln_llm_fp8_quantize_acts(x, 4, 1.0f / 448, c); /* a static scale too small: -2 saturates at -448 */
    CHECK(c[1] == 0xfe && c[2] == 0x7e && kiln_e4m3_to_f32(c[0]) == 224.0f);
}

/* One product of n token rows, in -> out (act_scale 0: dynamic), checked against float64. */
static void check_product(int n, int in, int out, float act_scale, bool bias, bool accumulate, bool gelu) {
    float *x = malloc(sizeof(float) * (size_t)n * in), *w = malloc(sizeof(float) * (size_t)out * in);
    float *b = malloc(sizeof(float) * (size_t)out), *y = malloc(sizeof(float) * (size_t)n * out);
    float *scale = malloc(sizeof(float) * (size_t)out), *y0 = malloc(sizeof(float) * (size_t)n * out);
    uint8_t *q = malloc((size_t)out * in), *xc = malloc((size_t)in);
    for (int i = 0; i < n * in; i++) x[i] = uniform() * (i % 7 == 0 ? 8.0f : 1.0f);
    for (int i = 0; i < out * in; i++) w[i] = 0.2f * uniform();
    for (int i = 0; i < out; i++) b[i] = uniform();
    for (int i = 0; i < n * out; i++) y[i] = y0[i] = uniform();
    kiln_llm_quantize_rows_fp8(w, out, in, q, scale);
    const kiln_llm_gemv_args a = {.x = x, .ldx = in, .n = n, .in = in, .w = q, .format = KILN_LLM_W_FP8,
                                  .scale = scale, .act_scale = act_scale, .bias = bias ? b : NULL, .out = out,
                                  .y = y, .ldy = out, .accumulate = accumulate, .gelu = gelu};
    kiln_llm_gemm_fp8(&a);
    double worst = 0;
    for (int t = 0; t < n; t++) {
        double amax = 0;
        for (int k = 0; k < in; k++) amax = fmax(amax, fabs(x[t * in + k]));
        const float st = act_scale > 0 ? act_scale : (float)amax / 448; /* the float32 scale the kernel forms */
        for (int k = 0; k < in; k++) xc[k] = kiln_f32_to_e4m3(x[t * in + k] / st);
        for (int o = 0; o < out; o++) {
            double s = 0, mag = 0;
            for (int k = 0; k < in; k++) {
                double p = (double)kiln_e4m3_to_f32(xc[k]) * kiln_e4m3_to_f32(q[(size_t)o * in + k]);
                s += p;
                mag += fabs(p);
            }
            s *= (double)scale[o] * st;
            mag *= (double)scale[o] * st;
            if (bias) s += b[o];
            if (accumulate) s += y0[t * out + o];
            if (gelu) s = 0.5 * s * (1 + tanh(sqrt(2 / M_PI) * (s + 0.044715 * s * s * s)));
            double err = fabs(y[t * out + o] - s) / (mag + fabs(s) + 1);
            worst = err > worst ? err : worst;
        }
    }
    CHECK(worst < 1e-6);
    if (worst >= 1e-6) fprintf(stderr, "n %d in %d out %d act %g: relative error %.3g\n", n, in, out, act_scale, worst);
    free(x), free(w), free(b), free(y), free(scale), free(y0), free(q), free(xc);
}

/* The FP8 product is close to the unquantized one: E4M3 keeps 3 mantissa bits, so each rounded
 * factor is within 2^-4 of its value, and the sum of n products within about 2^-3 of sum |x w|. */
static void check_close_to_fp32(void) {
    enum { N = 2, IN = 256, OUT = 32 };
    static float x[N * IN], w[OUT * IN], y[N * OUT], scale[OUT];
    static uint8_t q[OUT * IN];
    for (int i = 0; i < N * IN; i++) x[i] = uniform();
    for (int i = 0; i < OUT * IN; i++) w[i] = uniform();
    kiln_llm_quantize_rows_fp8(w, OUT, IN, q, scale);
    const kiln_llm_gemv_args a = {.x = x, .ldx = IN, .n = N, .in = IN, .w = q, .format = KILN_LLM_W_FP8,
                                  .scale = scale, .out = OUT, .y = y, .ldy = OUT};
    kiln_llm_gemm_fp8(&a);
    double worst = 0;
    for (int t = 0; t < N; t++)
        for (int o = 0; o < OUT; o++) {
            double s = 0, mag = 0;
            for (int k = 0; k < IN; k++) {
                s += (double)x[t * IN + k] * w[o * IN + k];
                mag += fabs((double)x[t * IN + k] * w[o * IN + k]);
            }
            worst = fmax(worst, fabs(y[t * OUT + o] - s) / mag);
        }
    printf("  fp8 against fp32, relative to sum |x w|: %.3g\n", worst);
    CHECK(worst < 0.125 && worst > 0);
}

int main(void) {
    test_quantize();
    test_act_scales();
    const int ns[] = {1, 2, 3, 4, 5, 8, 9, 16, 33};
    for (size_t i = 0; i < sizeof ns / sizeof *ns; i++) {
        check_product(ns[i], 64, 48, 0, true, false, false);
        check_product(ns[i], 37, 19, 0, false, true, false);
        check_product(ns[i], 100, 70, 0, true, false, true);
        check_product(ns[i], 64, 300, 0.01f, true, true, false); /* static: the 8x values saturate */
    }
    check_product(3, 768, 2304, 0, true, true, false); /* large enough to go parallel */
    check_close_to_fp32();
    return checks_report("test_llm_gemv_fp8");
}
