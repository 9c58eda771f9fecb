/* test_llm_gemm_w8a8.c — the W8A8 product of the CPU LLM forward (src/llm/llm_gemm_w8a8.c): the
 * activation quantizer's rounding (to nearest, ties to even), saturation and NaN, then
 * kiln_llm_gemm_w8a8 bit for bit against an exact integer reference (int64 sums of the int8 products,
 * dequantized by the same float expression) for token counts 1..9 and 33, inner sizes not a multiple
 * of 32 or 16, output counts across its chunks, with bias, accumulation and GELU, in every instruction
 * set this processor runs (AVX-512 VNNI, AVX2, scalar) and the automatic choice; extreme values (every
 * product +-127 * 127) show the int32 sums do not overflow or saturate. */
#include "check.h"
#include "llm/llm_cpu_ops.h"
#include "llm/llm_gemm_w8a8.h"
#include "llm/llm_gemv_q8.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static uint64_t rng = 88172645463325252ull;
static float uniform(void) { /* xorshift64, in [-1, 1) */
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (float)((double)(rng >> 11) / (double)(1ull << 52) - 1.0);
}

static void test_quantize_act(void) {
    const float x[] = {0.5f, 1.5f, 2.5f, -0.5f, -1.5f, 126.6f, 127.5f, 1e9f, -1e9f, -127.4f, NAN, 0.0f, -3.49f};
    const int8_t want[] = {0, 2, 2, 0, -2, 127, 127, 127, -127, -127, 0, 0, -3};
    const int n = (int)(sizeof x / sizeof *x);
    int8_t q[sizeof x / sizeof *x];
    kiln_llm_quantize_act(x, n, 1.0f, q);
    for (int i = 0; i < n; i++) CHECKF(q[i] == want[i], "x %g -> %d, want %d", (double)x[i], q[i], want[i]);
    const float y[] = {0.75f, -0.25f}; /* / 0.5: 1.5 -> 2, -0.5 -> 0 */
    kiln_llm_quantize_act(y, 2, 0.5f, q);
    CHECK(q[0] == 2 && q[1] == 0);
}

/* The exact result: int64 sums of the quantized inputs times the weights, dequantized as the kernel. */
static void reference(const kiln_llm_gemv_args *a, float *y) {
    int8_t *xq = malloc((size_t)a->n * a->in);
    kiln_llm_quantize_act(a->x, (int64_t)a->n * a->in, a->act_scale, xq);
    const int8_t *w = a->w;
    for (int t = 0; t < a->n; t++) {
        for (int o = 0; o < a->out; o++) {
            int64_t s = 0;
            for (int k = 0; k < a->in; k++) s += (int64_t)xq[(size_t)t * a->in + k] * w[(size_t)o * a->in + k];
            float v = (float)s * (a->act_scale * a->scale[o]);
            if (a->bias) v += a->bias[o];
            float *yo = &y[(size_t)t * a->ldy + o];
            *yo = a->accumulate ? *yo + v : v;
        }
        if (a->gelu) kiln_llm_gelu_tanh(y + (size_t)t * a->ldy, (size_t)a->out);
    }
    free(xq);
}

/* One product of n token rows, in -> out, with isa's kernel, against the reference, bit for bit;
 * extreme: every input and weight at +-127 steps. */
static void check_product(kiln_llm_w8a8_isa isa, int n, int in, int out, bool bias, bool accumulate, bool gelu,
                          bool extreme) {
    float *x = malloc(sizeof(float) * (size_t)n * in), *w = malloc(sizeof(float) * (size_t)out * in);
    float *b = malloc(sizeof(float) * (size_t)out), *y = malloc(sizeof(float) * (size_t)n * out);
    float *scale = malloc(sizeof(float) * (size_t)out), *y0 = malloc(sizeof(float) * (size_t)n * out);
    int8_t *q = malloc((size_t)out * in);
    int16_t *xq = malloc(sizeof(int16_t) * KILN_LLM_W8A8_SCRATCH(n, in));
    for (int i = 0; i < n * in; i++) x[i] = extreme ? (i % 3 ? 2.0f : -2.0f) : 1.5f * uniform();
    for (int i = 0; i < out * in; i++) w[i] = extreme ? (i % 3 ? 0.2f : -0.2f) : 0.2f * uniform();
    for (int i = 0; i < out; i++) b[i] = uniform();
    for (int i = 0; i < n * out; i++) y[i] = y0[i] = uniform();
    kiln_llm_quantize_rows(w, out, in, q, scale);
    const kiln_llm_gemv_args a = {.x = x, .ldx = in, .n = n, .in = in, .w = q, .format = KILN_LLM_W_W8A8,
                                  .scale = scale, .act_scale = 1.5f / 127, .bias = bias ? b : NULL, .out = out,
                                  .y = y, .ldy = out, .accumulate = accumulate, .gelu = gelu};
    if (isa == KILN_W8A8_AUTO) kiln_llm_gemm_w8a8(&a, xq);
    else CHECK(kiln_llm_gemm_w8a8_isa(&a, xq, isa));
    reference(&a, y0);
    int bad = 0;
    for (int i = 0; i < n * out; i++) bad += memcmp(&y[i], &y0[i], sizeof(float)) != 0;
    CHECKF(bad == 0, "isa %d n %d in %d out %d bias %d acc %d gelu %d extreme %d: %d of %d outputs differ", (int)isa, n,
           in, out, bias, accumulate, gelu, extreme, bad, n * out);
    free(x);
    free(w);
    free(b);
    free(y);
    free(scale);
    free(y0);
    free(q);
    free(xq);
}

int main(void) {
    test_quantize_act();
    const kiln_llm_w8a8_isa isas[] = {KILN_W8A8_AUTO, KILN_W8A8_VNNI512, KILN_W8A8_AVX2, KILN_W8A8_SCALAR};
    CHECK(kiln_llm_w8a8_isa_supported(KILN_W8A8_SCALAR));
    for (size_t i = 0; i < sizeof isas / sizeof *isas; i++) {
        if (!kiln_llm_w8a8_isa_supported(isas[i])) {
            printf("isa %d: not on this processor, skipped\n", (int)isas[i]);
            continue;
        }
        for (int n = 1; n <= 9; n++) check_product(isas[i], n, 77, 37, n & 1, n & 2, false, false);
        check_product(isas[i], 33, 96, 70, true, false, true, false);
        check_product(isas[i], 5, 384, 1152, true, true, false, false);
        check_product(isas[i], 3, 4099, 20, false, false, false, true); /* sums of +-127 * 127 * 4099 */
    }
    return checks_report("test_llm_gemm_w8a8");
}
