/* test_llm_kv_fp8.c — the FP8 (E4M3) KV cache on the CPU: kiln_llm_kv_write quantizes with each
 * (layer, KV head)'s key and value scale (every code the nearest E4M3 of x / scale, saturating at
 * +-448; bad scales refused; 4x the blocks of an fp32 cache per budget); the attention reading it
 * (decode, prefill, sliding window) equals, to float rounding, the fp32 attention over the dequantized
 * keys and values, and stays within 2^-4 (half an E4M3 step; of the largest |output|; 2e-2 to 3.6e-2
 * measured) of the unquantized fp32 attention;
 * the calibration (kiln_llm_kv_calibrate) picks scales under which each head's largest |key| and
 * |value| over the calibration tokens is exactly the largest E4M3 code. Exit 0 = pass. */
#include "check.h"
#include "llm/kv_cache.h"
#include "llm/llm_cpu_ops.h"
#include "llm/llm_kv_fp8.h"
#include "llm/llm_random.h"
#include "quant/fp8.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static uint32_t g_rng = 2024;

/* Uniform in [-1, 1). */
static float frand(void) {
    g_rng = g_rng * 1664525u + 1013904223u;
    return (float)((g_rng >> 8) & 0xffffff) / 8388608.0f - 1.0f;
}

#define NL 2
#define NKV 2
#define HD 32
#define BS 8

/* Codes written for values x, scale s: the nearest E4M3 of x / s (saturating); every code read back
 * times s within half an E4M3 step of x (relative 2^-4 for normal values). */
static void test_round_trip(void) {
    const float scales[NL * 2 * NKV] = {0.5f, 2.0f, 0.01f, 1.0f, 3.0f, 0.25f, 0.125f, 8.0f};
    kiln_kv_cache_config c = {.n_layer = NL, .n_kv_head = NKV, .head_dim = HD, .block_size = BS, .n_blocks = 3,
                              .dtype = KILN_F8E4M3FN, .scales = scales};
    kiln_kv_cache *kv;
    REQUIRE_OK(kiln_kv_cache_create(&c, &kv));
    const int32_t blocks[2] = {2, 0};
    float k[NKV * HD], v[NKV * HD];
    for (int l = 0; l < NL; l++) {
        const float *sc = kiln_kv_cache_scales(kv, l);
        CHECK(sc && !memcmp(sc, scales + l * 2 * NKV, sizeof(float) * 2 * NKV));
        const kiln_llm_seq_kv s = {kv, l, blocks};
        for (int pos = 0; pos < 2 * BS; pos++) {
            /* magnitudes from 1e-4 to 600 times the scale: subnormals, normals and saturation */
            for (int i = 0; i < NKV * HD; i++) {
                const float m = powf(10.0f, 4.0f * (frand() + 1.0f) / 2.0f * 1.7f - 4.0f);
                k[i] = m * sc[i / HD] * (frand() < 0 ? -1.0f : 1.0f);
                v[i] = m * sc[NKV + i / HD] * (frand() < 0 ? -1.0f : 1.0f);
            }
            kiln_llm_kv_write(&s, pos, k, v);
            for (int g = 0; g < NKV; g++) {
                const size_t off = ((size_t)g * BS + pos % BS) * HD;
                const uint8_t *kc = (const uint8_t *)kiln_kv_cache_keys(kv, l, blocks[pos / BS]) + off;
                const uint8_t *vc = (const uint8_t *)kiln_kv_cache_values(kv, l, blocks[pos / BS]) + off;
                for (int e = 0; e < HD; e++) {
                    const float x = k[g * HD + e], y = v[g * HD + e], ks = sc[g], vs = sc[NKV + g];
                    CHECK(kc[e] == kiln_f32_to_e4m3(x / ks) && vc[e] == kiln_f32_to_e4m3(y / vs));
                    const float kd = kiln_e4m3_to_f32(kc[e]) * ks, clip = fminf(fabsf(x), 448.0f * ks);
                    CHECKF(fabsf(fabsf(kd) - clip) <= fmaxf(clip / 16.0f, ks * 0x1p-10f) * 1.0001f,
                           "layer %d head %d: %g read back as %g (scale %g)", l, g, x, kd, ks);
                }
            }
        }
    }
    kiln_kv_cache_free(kv);
    /* bad scales; the scales of other dtypes; the budget */
    float bad[NL * 2 * NKV];
    memcpy(bad, scales, sizeof bad);
    bad[5] = 0.0f;
    c.scales = bad;
    CHECK(kiln_kv_cache_create(&c, &kv) == KILN_ERR_INVALID_ARGUMENT && strstr(kiln_last_error(), "scale 5"));
    bad[5] = NAN;
    CHECK(kiln_kv_cache_create(&c, &kv) == KILN_ERR_INVALID_ARGUMENT);
    c.scales = NULL; /* all 1.0 */
    REQUIRE_OK(kiln_kv_cache_create(&c, &kv));
    CHECK(kiln_kv_cache_scales(kv, 1)[3] == 1.0f);
    kiln_kv_cache_free(kv);
    kiln_kv_cache_config f32 = c;
    f32.dtype = KILN_F32;
    REQUIRE_OK(kiln_kv_cache_create(&f32, &kv));
    CHECK(kiln_kv_cache_scales(kv, 0) == NULL);
    kiln_kv_cache_free(kv);
    CHECK(kiln_kv_cache_blocks_for_budget(&c, 1u << 20) == 4 * kiln_kv_cache_blocks_for_budget(&f32, 1u << 20));
}

#define CTX 45
#define NH 4
#define MAXN 7

/* max |a - b| / max |b| over n values. */
static double rel_err(const float *a, const float *b, int n) {
    double d = 0, m = 0;
    for (int i = 0; i < n; i++) {
        d = fmax(d, fabs((double)a[i] - b[i]));
        m = fmax(m, fabs((double)b[i]));
    }
    return d / m;
}

/* The same keys and values in three caches: FP8 (scales amax / 448 per head), fp32 holding the FP8
 * values dequantized, fp32 unquantized; the attention of n new tokens over each. */
static void attention_case(int n, int window) {
    const size_t rows = (size_t)CTX * NKV * HD;
    float *k = malloc(rows * 4), *v = malloc(rows * 4), scales[NL * 2 * NKV];
    float amax[2 * NKV] = {0};
    for (size_t i = 0; i < rows; i++) {
        const int g = (int)(i / HD) % NKV;
        k[i] = frand() * (g ? 9.0f : 0.3f); /* heads of different ranges: per-head scales matter */
        v[i] = frand() * (g ? 0.05f : 2.0f);
        amax[g] = fmaxf(amax[g], fabsf(k[i]));
        amax[NKV + g] = fmaxf(amax[NKV + g], fabsf(v[i]));
    }
    for (int l = 0; l < NL; l++)
        for (int i = 0; i < 2 * NKV; i++) scales[l * 2 * NKV + i] = amax[i] / KILN_E4M3_MAX;
    kiln_kv_cache_config c = {.n_layer = NL, .n_kv_head = NKV, .head_dim = HD, .block_size = BS,
                              .n_blocks = (CTX + BS - 1) / BS, .dtype = KILN_F8E4M3FN, .scales = scales};
    kiln_kv_cache *q8, *deq, *ref;
    REQUIRE_OK(kiln_kv_cache_create(&c, &q8));
    c.dtype = KILN_F32;
    REQUIRE_OK(kiln_kv_cache_create(&c, &deq));
    REQUIRE_OK(kiln_kv_cache_create(&c, &ref));
    int32_t blocks[(CTX + BS - 1) / BS];
    for (int b = 0; b < c.n_blocks; b++) blocks[b] = c.n_blocks - 1 - b; /* out of order */
    const int l = 1;
    const kiln_llm_seq_kv s8 = {q8, l, blocks}, sd = {deq, l, blocks}, sr = {ref, l, blocks};
    float kd[NKV * HD], vd[NKV * HD];
    for (int p = 0; p < CTX; p++) {
        const float *kp = k + (size_t)p * NKV * HD, *vp = v + (size_t)p * NKV * HD;
        for (int i = 0; i < NKV * HD; i++) {
            kd[i] = kiln_e4m3_to_f32(kiln_f32_to_e4m3(kp[i] / scales[l * 2 * NKV + i / HD])) * scales[l * 2 * NKV + i / HD];
            vd[i] = kiln_e4m3_to_f32(kiln_f32_to_e4m3(vp[i] / scales[l * 2 * NKV + NKV + i / HD])) *
                    scales[l * 2 * NKV + NKV + i / HD];
        }
        kiln_llm_kv_write(&s8, p, kp, vp);
        kiln_llm_kv_write(&sd, p, kd, vd);
        kiln_llm_kv_write(&sr, p, kp, vp);
    }
    float q[MAXN * NH * HD], o8[MAXN * NH * HD], od[MAXN * NH * HD], orf[MAXN * NH * HD];
    for (int i = 0; i < n * NH * HD; i++) q[i] = frand();
    float *scratch = malloc(KILN_LLM_ATTN_SCRATCH(MAXN, CTX, NH, HD) * sizeof(float));
    kiln_llm_attention(&s8, n, CTX, window, NH, q, NH * HD, o8, NH * HD, scratch);
    kiln_llm_attention(&sd, n, CTX, window, NH, q, NH * HD, od, NH * HD, scratch);
    kiln_llm_attention(&sr, n, CTX, window, NH, q, NH * HD, orf, NH * HD, scratch);
    const double exact = rel_err(o8, od, n * NH * HD), quant = rel_err(o8, orf, n * NH * HD);
    CHECKF(exact <= 1e-5, "%d new tokens, window %d: FP8 attention vs fp32 over the dequantized cache: %.3e", n,
           window, exact);
    /* 2^-4: half an E4M3 step, relative (each value row's own error; a window of one key shows it) */
    CHECKF(quant <= 0x1p-4, "%d new tokens, window %d: FP8 attention vs fp32: %.3e (tolerance 2^-4)", n, window, quant);
    printf("  attention, %d new token%s, window %2d: vs dequantized fp32 %.1e, vs fp32 %.2e\n", n, n > 1 ? "s" : " ",
           window, exact, quant);
    free(scratch);
    free(k);
    free(v);
    kiln_kv_cache_free(q8);
    kiln_kv_cache_free(deq);
    kiln_kv_cache_free(ref);
}

/* Calibrated scales: writing the calibration tokens through an FP8 cache with them, every (layer,
 * K/V, head) has a code of magnitude 448 (its amax maps to the largest E4M3). */
static void test_calibrate(void) {
    kiln_llm_config c;
    kiln_llm_config_init(&c, KILN_LLM_LLAMA, 2, 32, 4, 2, 48, 50, 32);
    kiln_llm_model *m;
    REQUIRE_OK(kiln_llm_model_random(&c, 3, &m));
    int32_t ids[40];
    for (int i = 0; i < 40; i++) ids[i] = (i * 7 + 3) % 50;
    float scales[2 * 2 * 2];
    CHECK(kiln_llm_kv_calibrate(m, ids, 40, 0, scales) == KILN_ERR_INVALID_ARGUMENT);
    CHECK(kiln_llm_kv_calibrate(m, ids, 40, 33, scales) == KILN_ERR_INVALID_ARGUMENT);
    REQUIRE_OK(kiln_llm_kv_calibrate(m, ids, 40, 20, scales)); /* two windows of 20 */
    kiln_kv_cache_config kc = {.n_layer = 2, .n_kv_head = 2, .head_dim = c.head_dim, .block_size = 4, .n_blocks = 5,
                               .dtype = KILN_F8E4M3FN, .scales = scales};
    uint8_t top[8] = {0};
    for (int w = 0; w < 2; w++) {
        kiln_kv_cache *kv;
        REQUIRE_OK(kiln_kv_cache_create(&kc, &kv));
        int32_t blocks[5], pos[20], start[2] = {0, 20}, ctx = 20;
        for (int b = 0; b < 5; b++) blocks[b] = kiln_kv_cache_alloc_block(kv);
        for (int p = 0; p < 20; p++) pos[p] = p;
        const kiln_llm_batch b = {.n_tokens = 20, .tokens = ids + 20 * w, .positions = pos, .n_seqs = 1,
                                  .seq_start = start, .ctx_len = &ctx, .block_table = blocks, .max_blocks_per_seq = 5};
        float logits[50];
        REQUIRE_OK(kiln_llm_forward(m, kv, &b, logits));
        for (int l = 0; l < 2; l++)
            for (int kvi = 0; kvi < 2; kvi++)
                for (int bl = 0; bl < 5; bl++) {
                    const uint8_t *p = kvi ? kiln_kv_cache_values(kv, l, blocks[bl]) : kiln_kv_cache_keys(kv, l, blocks[bl]);
                    for (int g = 0; g < 2; g++)
                        for (int i = 0; i < 4 * c.head_dim; i++) {
                            uint8_t *t = &top[(l * 2 + kvi) * 2 + g], code = p[g * 4 * c.head_dim + i] & 0x7f;
                            *t = code > *t ? code : *t;
                        }
                }
        kiln_kv_cache_free(kv);
    }
    for (int i = 0; i < 8; i++) CHECKF(top[i] == 0x7e, "scale %d: the largest code is 0x%02x, not 448 (0x7e)", i, top[i]);
    for (int i = 0; i < 8; i++) CHECK(scales[i] > 0 && isfinite(scales[i]));
    kiln_llm_model_free(m);
}

int main(void) {
    test_round_trip();
    static const int cases[][2] = {{1, 0}, {1, 9}, {1, 1}, {MAXN, 0}, {MAXN, 16}, {3, 5}};
    for (int i = 0; i < 6; i++) attention_case(cases[i][0], cases[i][1]);
    test_calibrate();
    return checks_report("test_llm_kv_fp8");
}
