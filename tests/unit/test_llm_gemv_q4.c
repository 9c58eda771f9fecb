/* test_llm_gemv_q4.c — the weight-only INT4 product of the CPU LLM forward (src/llm/llm_gemv_q4.c):
 * the group quantizer (range, zero point, packing, clipping, constant and zero groups, short last
 * groups and their zero padding) and kiln_llm_gemm_q4 against a float64 product of the dequantized
 * weights for token counts 1..9 and 33, inner sizes that are whole groups, a short last group, under
 * one group, and not a multiple of 32, with bias, accumulation and GELU, in every instruction set this
 * processor runs (AVX-512, AVX2, scalar) and the automatic choice (its 33 rows through the GEMM). */
#include "check.h"
#include "llm/llm_cpu_ops.h"
#include "llm/llm_gemv_q4.h"

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

static int nib(const uint8_t *row, int k) { return k & 1 ? row[k / 2] >> 4 : row[k / 2] & 15; }

static void test_quantize(void) {
    /* row 0: one group of 130 values in [-1, 2] (two groups: 128 + a short one of 2); row 1 constant 0.3;
     * row 2 zero */
    enum { C = 130 };
    float w[3][C];
    for (int k = 0; k < C; k++) w[0][k] = -1.0f + 3.0f * (float)k / 127, w[1][k] = 0.3f, w[2][k] = 0;
    w[0][128] = 0.5f, w[0][129] = -0.25f;
    uint8_t q[3 * 128];
    float s[6], z[6];
    CHECK(kiln_q4_groups(C) == 2 && kiln_q4_row_bytes(C) == 128);
    kiln_llm_quantize_q4(&w[0][0], 3, C, 1.0f, q, s, z);
    CHECK(fabsf(s[0] - 0.2f) < 1e-6f && fabsf(z[0] - 5.0f) < 1e-5f);
    CHECK(nib(q, 0) == 0 && nib(q, 127) == 15);             /* the ends of the range */
    CHECK(fabsf(s[1] - 0.05f) < 1e-7f && fabsf(z[1] - 5.0f) < 1e-5f); /* [-0.25, 0.5] / 15 */
    CHECK(nib(q, 128) == 15 && nib(q, 129) == 0);
    for (int k = 130; k < 256; k++) CHECK(nib(q, k) == 0); /* the short group's padding */
    float row[C];
    kiln_llm_q4_row(q, s, z, 0, C, row);
    for (int k = 0; k < C; k++) CHECK(fabsf(row[k] - w[0][k]) <= 0.5f * s[k / 128] * 1.0001f);
    kiln_llm_q4_row(q, s, z, 1, C, row); /* a constant group is exact */
    for (int k = 0; k < C; k++) CHECK(fabsf(row[k] - 0.3f) < 1e-6f);
    CHECK(s[4] == 0 && z[4] == 0 && s[5] == 0);
    kiln_llm_q4_row(q, s, z, 2, C, row);
    for (int k = 0; k < C; k++) CHECK(row[k] == 0);
    kiln_llm_quantize_q4(&w[0][0], 1, C, 0.5f, q, s, z); /* clipped to [-0.5, 1] */
    CHECK(fabsf(s[0] - 0.1f) < 1e-6f && nib(q, 0) == 0 && nib(q, 127) == 15);
}

/* One product of n token rows, in -> out, with isa's kernel, checked against float64. */
static void check_product(kiln_llm_q8_isa isa, int n, int in, int out, bool bias, bool accumulate, bool gelu) {
    const int64_t groups = kiln_q4_groups(in), rb = kiln_q4_row_bytes(in);
    float *x = malloc(sizeof(float) * (size_t)n * in), *w = malloc(sizeof(float) * (size_t)out * in);
    float *b = malloc(sizeof(float) * (size_t)out), *y = malloc(sizeof(float) * (size_t)n * out);
    float *s = malloc(sizeof(float) * (size_t)(out * groups)), *z = malloc(sizeof(float) * (size_t)(out * groups));
    float *y0 = malloc(sizeof(float) * (size_t)n * out), *deq = malloc(sizeof(float) * (size_t)in);
    uint8_t *q = malloc((size_t)(out * rb));
    for (int i = 0; i < n * in; i++) x[i] = uniform();
    for (int i = 0; i < out * in; i++) w[i] = 0.2f * uniform() + 0.05f;
    for (int i = 0; i < out; i++) b[i] = uniform();
    for (int i = 0; i < n * out; i++) y[i] = y0[i] = uniform();
    kiln_llm_quantize_q4(w, out, in, 1.0f, q, s, z);
    const kiln_llm_gemv_args a = {.x = x, .ldx = in, .n = n, .in = in, .w = q, .format = KILN_LLM_W_INT4,
                                  .scale = s, .zero = z, .bias = bias ? b : NULL, .out = out, .y = y, .ldy = out,
                                  .accumulate = accumulate, .gelu = gelu};
    if (isa == KILN_Q8_AUTO) kiln_llm_gemm_q4(&a); /* the GEMM tiles from 16 token rows on */
    else CHECK(kiln_llm_gemm_q4_isa(&a, isa));
    double worst = 0, werr = 0;
    for (int o = 0; o < out; o++) {
        kiln_llm_q4_row(q, s, z, o, in, deq);
        for (int k = 0; k < in; k++) werr = fmax(werr, fabs(deq[k] - w[(size_t)o * in + k]) / s[o * groups + k / 128]);
        for (int t = 0; t < n; t++) {
            double acc = 0, mag = 0;
            for (int k = 0; k < in; k++) {
                const int g = k / 128;
                double p = (double)x[t * in + k] * ((nib(q + o * rb, k) - (double)z[o * groups + g]) * s[o * groups + g]);
                acc += p;
                mag += fabs(p);
            }
            if (bias) acc += b[o];
            if (accumulate) acc += y0[t * out + o];
            if (gelu) acc = 0.5 * acc * (1 + tanh(sqrt(2 / M_PI) * (acc + 0.044715 * acc * acc * acc)));
            double err = fabs(y[t * out + o] - acc) / (mag + fabs(acc) + 1);
            worst = err > worst ? err : worst;
        }
    }
    CHECK(werr <= 0.5 + 1e-3); /* every weight within half a step of its group */
    CHECK(worst < 2e-6);
    if (worst >= 2e-6) fprintf(stderr, "isa %d n %d in %d out %d: relative error %.3g\n", isa, n, in, out, worst);
    free(x), free(w), free(b), free(y), free(s), free(z), free(y0), free(deq), free(q);
}

int main(void) {
    test_quantize();
    const int ns[] = {1, 2, 3, 4, 5, 8, 9, 33};
    for (kiln_llm_q8_isa isa = KILN_Q8_AUTO; isa <= KILN_Q8_SCALAR; isa++) {
        if (!kiln_llm_q8_isa_supported(isa)) {
            printf("  instruction set %d: not on this processor, skipped\n", isa);
            continue;
        }
        for (size_t i = 0; i < sizeof ns / sizeof *ns; i++) {
            check_product(isa, ns[i], 256, 48, true, false, false); /* whole groups */
            check_product(isa, ns[i], 200, 19, false, true, false); /* a short last group of 72 */
            check_product(isa, ns[i], 45, 21, true, false, true);   /* under one group, not a multiple of 32 */
            check_product(isa, ns[i], 161, 7, true, true, false);   /* a short group of 33 */
        }
        check_product(isa, 3, 768, 2304, true, true, false); /* large enough to go parallel */
    }
    return checks_report("test_llm_gemv_q4");
}
