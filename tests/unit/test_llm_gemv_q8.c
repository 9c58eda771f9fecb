/* test_llm_gemv_q8.c — the weight-only INT8 product of the CPU LLM forward (src/llm/llm_gemv_q8.c):
 * the quantizer's scales, rounding and clamping, and kiln_llm_gemm_q8 against a float64 product of
 * the dequantized weights for token counts 1..9 and 33 (the four-row passes and their tails), inner
 * sizes not a multiple of 16, output counts across its chunks, with bias, accumulation and GELU, in
 * every instruction set this processor runs (AVX-512, AVX2, scalar), and the automatic choice, whose
 * 33 token rows go through widened tiles and the GEMM. */
#include "check.h"
#include "llm/llm_cpu_ops.h"
#include "llm/llm_gemv_q8.h"

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
    const float w[2][5] = {{0.5f, -1.0f, 0.25f, 0.0f, 1.0f / 254}, {0, 0, 0, 0, 0}};
    int8_t q[10];
    float scale[2];
    kiln_llm_quantize_rows(&w[0][0], 2, 5, q, scale);
    CHECK(scale[0] == 1.0f / 127 && scale[1] == 0);
    CHECK(q[0] == 64 && q[1] == -127 && q[2] == 32 && q[3] == 0 && q[4] == 1); /* 63.5 -> 64, 0.5 -> 1 */
    for (int k = 5; k < 10; k++) CHECK(q[k] == 0);
    float row[5];
    const kiln_llm_q8 m = {.q = q, .scale = scale, .zero = NULL};
    kiln_llm_q8_row(&m, 0, 5, row);
    CHECK(row[1] == -1.0f && fabsf(row[0] - 0.5f) <= 0.5f / 127);
}

/* One product of n token rows, in -> out, with isa's kernel, checked against float64. */
static void check_product(kiln_llm_q8_isa isa, int n, int in, int out, bool bias, bool accumulate, bool gelu) {
    float *x = malloc(sizeof(float) * (size_t)n * in), *w = malloc(sizeof(float) * (size_t)out * in);
    float *b = malloc(sizeof(float) * (size_t)out), *y = malloc(sizeof(float) * (size_t)n * out);
    float *scale = malloc(sizeof(float) * (size_t)out), *y0 = malloc(sizeof(float) * (size_t)n * out);
    int8_t *q = malloc((size_t)out * in);
    for (int i = 0; i < n * in; i++) x[i] = uniform();
    for (int i = 0; i < out * in; i++) w[i] = 0.2f * uniform();
    for (int i = 0; i < out; i++) b[i] = uniform();
    for (int i = 0; i < n * out; i++) y[i] = y0[i] = uniform();
    kiln_llm_quantize_rows(w, out, in, q, scale);
    const kiln_llm_gemv_args a = {.x = x, .ldx = in, .n = n, .in = in, .w = q, .format = KILN_LLM_W_INT8,
                                  .scale = scale, .bias = bias ? b : NULL, .out = out, .y = y, .ldy = out,
                                  .accumulate = accumulate, .gelu = gelu};
    if (isa == KILN_Q8_AUTO) kiln_llm_gemm_q8(&a); /* the GEMM tiles from 16 token rows on */
    else CHECK(kiln_llm_gemm_q8_isa(&a, isa));
    double worst = 0;
    for (int t = 0; t < n; t++)
        for (int o = 0; o < out; o++) {
            double s = 0, mag = 0;
            for (int k = 0; k < in; k++) {
                double p = (double)x[t * in + k] * q[(size_t)o * in + k] * scale[o];
                s += p;
                mag += fabs(p);
            }
            if (bias) s += b[o];
            if (accumulate) s += y0[t * out + o];
            if (gelu) s = 0.5 * s * (1 + tanh(sqrt(2 / M_PI) * (s + 0.044715 * s * s * s)));
            double err = fabs(y[t * out + o] - s) / (mag + fabs(s) + 1);
            worst = err > worst ? err : worst;
        }
    CHECK(worst < 1e-6);
    if (worst >= 1e-6) fprintf(stderr, "isa %d n %d in %d out %d: relative error %.3g\n", isa, n, in, out, worst);
    free(x), free(w), free(b), free(y), free(scale), free(y0), free(q);
}

int main(void) {
    test_quantize();
    CHECK(kiln_llm_q8_isa_supported(KILN_Q8_SCALAR) && kiln_llm_q8_isa_supported(KILN_Q8_AUTO));
    const int ns[] = {1, 2, 3, 4, 5, 8, 9, 33};
    for (kiln_llm_q8_isa isa = KILN_Q8_AUTO; isa <= KILN_Q8_SCALAR; isa++) {
        if (!kiln_llm_q8_isa_supported(isa)) {
            printf("  instruction set %d: not on this processor, skipped\n", isa);
            continue;
        }
        for (size_t i = 0; i < sizeof ns / sizeof *ns; i++) {
            check_product(isa, ns[i], 64, 48, true, false, false);
            check_product(isa, ns[i], 37, 19, false, true, false);
            check_product(isa, ns[i], 100, 70, true, false, true);
        }
        check_product(isa, 3, 768, 2304, true, true, false); /* large enough to go parallel */
    }
    return checks_report("test_llm_gemv_q8");
}
