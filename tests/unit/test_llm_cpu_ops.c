/* test_llm_cpu_ops.c — the CPU LLM forward's decode kernels (src/llm/llm_gemv.c,
 * llm_decode_attention.c, llm_cpu_ops.c): kiln_llm_gemv over 1-4 token rows, odd and even sizes,
 * with and without bias, residual add and GELU, against a float64 product (relative error) and
 * against a scalar model of the summation order it promises (bit for bit: the order is what keeps a
 * model's greedy text unchanged), the output padding between rows never written; the attention of
 * one new token over a paged FP32 cache (scattered blocks, grouped-query heads, contexts inside one
 * block and across several, odd head sizes, sliding windows starting inside a block or covering it
 * all) against a float64 attention; the one-dispatch decode step (QKV product with bias, whole or
 * partial RoPE, cache write, windowed attention; FP32 and FP8 caches) against those steps run one by one, bit for bit; a model's weights moved into huge pages (llm_weights_hugepages.c): every array unchanged and
 * inside the block, a tied lm_head still the embedding, freed without a leak. Exit 0 = pass. */
#include "check.h"
#include "llm/kv_cache.h"
#include "llm/llm_cpu_ops.h"
#include "llm/llm_engine_internal.h"
#include "llm/llm_gemv.h"
#include "llm/llm_random.h"

#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static uint32_t g_seed = 12345;

static void fill(float *p, size_t n) {
    for (size_t i = 0; i < n; i++) {
        g_seed = g_seed * 1664525u + 1013904223u;
        p[i] = (float)((g_seed >> 8) & 0xffff) / 32768.0f - 1.0f;
    }
}

#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF /* products rounded before they are added, as in the kernel */
#endif

/* x . w in the promised order: one row, lane i (16 lanes) of k = i mod 16 while 16 remain, lanes
 * i and i + 8 added, summed as ((0+4)+(1+5))+((2+6)+(3+7)), then the tail; several rows, 8 lanes
 * of k = i mod 8, summed the same way, plus the tail summed on its own. */
static float ordered_dot(const float *x, const float *w, int K, int rows) {
    float lane[16] = {0}, h[8], tail = 0;
    const int width = rows == 1 ? 16 : 8, main_k = K / width * width;
    for (int k = 0; k < main_k; k++) lane[k % width] += w[k] * x[k];
    for (int i = 0; i < 8; i++) h[i] = width == 16 ? lane[i] + lane[i + 8] : lane[i];
    float s = ((h[0] + h[4]) + (h[1] + h[5])) + ((h[2] + h[6]) + (h[3] + h[7]));
    if (rows == 1) {
        for (int k = main_k; k < K; k++) s += x[k] * w[k];
        return s;
    }
    for (int k = main_k; k < K; k++) tail += w[k] * x[k];
    return s + tail;
}

static void gemv_case(int n, int in, int out, bool bias, bool accumulate, bool gelu) {
    const int ldx = in + 3, ldy = out + 2;
    float *x = malloc(sizeof(float) * (size_t)n * ldx), *w = malloc(sizeof(float) * (size_t)out * in);
    float *b = malloc(sizeof(float) * (size_t)out), *y = malloc(sizeof(float) * (size_t)n * ldy);
    float *y0 = malloc(sizeof(float) * (size_t)n * ldy), *want = malloc(sizeof(float) * (size_t)n * ldy);
    fill(x, (size_t)n * ldx);
    fill(w, (size_t)out * in);
    fill(b, (size_t)out);
    fill(y, (size_t)n * ldy);
    memcpy(y0, y, sizeof(float) * (size_t)n * ldy);
    kiln_llm_gemv_args a = {.x = x, .ldx = ldx, .n = n, .in = in, .w = w, .bias = bias ? b : NULL, .out = out, .y = y,
                            .ldy = ldy, .accumulate = accumulate, .gelu = gelu};
    kiln_llm_gemv(&a);
    double worst = 0;
    int mismatched = 0;
    for (int t = 0; t < n; t++) {
        for (int o = 0; o < out; o++) {
            const float *xr = x + (size_t)t * ldx, *wr = w + (size_t)o * in;
            double s = 0;
            for (int k = 0; k < in; k++) s += (double)xr[k] * wr[k];
            float old = y0[(size_t)t * ldy + o], add = bias ? b[o] : 0.0f;
            double ref = s + (bias ? add : 0.0) + (accumulate ? old : 0.0);
            float v = ordered_dot(xr, wr, in, n), *wv = &want[(size_t)t * ldy + o];
            *wv = accumulate ? v + (bias ? old + add : old) : bias ? v + add : v;
            if (gelu) {
                ref = 0.5 * ref * (1.0 + tanh(0.7978845608028654 * (ref + 0.044715 * ref * ref * ref)));
                kiln_llm_gelu_tanh(wv, 1);
            }
            double got = y[(size_t)t * ldy + o], err = fabs(got - ref) / (1.0 + fabs(ref));
            if (err > worst) worst = err;
            if (memcmp(&y[(size_t)t * ldy + o], wv, sizeof(float)) != 0) mismatched++;
        }
        for (int o = out; o < ldy; o++) CHECK(y[(size_t)t * ldy + o] == y0[(size_t)t * ldy + o]);
    }
    CHECKF(worst < 1e-5, "gemv n %d in %d out %d bias %d acc %d gelu %d: relative error %g", n, in, out, bias,
           accumulate, gelu, worst);
    CHECKF(mismatched == 0, "gemv n %d in %d out %d bias %d acc %d gelu %d: %d outputs differ from the promised order",
               n, in, out, bias, accumulate, gelu, mismatched);
    free(x);
    free(w);
    free(b);
    free(y);
    free(y0);
    free(want);
}

static void test_gemv(void) {
    const int ins[] = {1, 5, 16, 37, 384}, outs[] = {1, 3, 4, 7, 66, 1000};
    for (int n = 1; n <= KILN_LLM_GEMV_ROWS; n++)
        for (size_t i = 0; i < sizeof ins / sizeof *ins; i++)
            for (size_t o = 0; o < sizeof outs / sizeof *outs; o++)
                for (int mode = 0; mode < 4; mode++) /* plain, bias, bias + residual, bias + GELU */
                    gemv_case(n, ins[i], outs[o], mode > 0, mode == 2, mode == 3);
}

/* One new token's attention over ctx positions (the last `window` of them when window > 0) of a
 * cache whose blocks are handed out in a shuffled order, against float64. */
static void attention_case(int n_head, int n_kv_head, int hd, int ctx, int window) {
    const int bs = 4, n_blocks = (ctx + bs - 1) / bs + 3;
    kiln_kv_cache_config kc = {.n_layer = 2, .n_kv_head = n_kv_head, .head_dim = hd, .block_size = bs,
                               .n_blocks = n_blocks, .dtype = KILN_F32};
    kiln_kv_cache *kv;
    REQUIRE_OK(kiln_kv_cache_create(&kc, &kv));
    int32_t blocks[64];
    for (int i = 0; i < n_blocks; i++) blocks[i] = kiln_kv_cache_alloc_block(kv);
    for (int i = n_blocks - 1; i > 0; i--) { /* the table's blocks out of order */
        int r = (int)(g_seed % (uint32_t)(i + 1)), t = blocks[i];
        g_seed = g_seed * 1664525u + 1013904223u;
        blocks[i] = blocks[r];
        blocks[r] = t;
    }
    const size_t kvd = (size_t)n_kv_head * hd, qd = (size_t)n_head * hd;
    float *k = malloc(sizeof(float) * ctx * kvd), *v = malloc(sizeof(float) * ctx * kvd);
    float *q = malloc(sizeof(float) * qd), *out = malloc(sizeof(float) * qd);
    float *scratch = malloc(sizeof(float) * KILN_LLM_ATTN_SCRATCH(1, ctx, n_head, hd));
    fill(k, ctx * kvd);
    fill(v, ctx * kvd);
    fill(q, qd);
    kiln_llm_seq_kv s = {kv, 1, blocks};
    for (int p = 0; p < ctx; p++) kiln_llm_kv_write(&s, p, k + p * kvd, v + p * kvd);
    kiln_llm_attention(&s, 1, ctx, window, n_head, q, (int)qd, out, (int)qd, scratch);
    const int first = window > 0 && ctx > window ? ctx - window : 0; /* the oldest key seen */
    double worst = 0, *sc = malloc(sizeof(double) * ctx);
    for (int h = 0; h < n_head; h++) {
        const int g = h / (n_head / n_kv_head);
        double mx = -INFINITY, sum = 0;
        for (int p = first; p < ctx; p++) {
            double d = 0;
            for (int i = 0; i < hd; i++) d += (double)q[h * hd + i] * k[p * kvd + g * hd + i];
            sc[p] = d / sqrt((double)hd);
            if (sc[p] > mx) mx = sc[p];
        }
        for (int p = first; p < ctx; p++) sum += sc[p] = exp(sc[p] - mx);
        for (int i = 0; i < hd; i++) {
            double want = 0;
            for (int p = first; p < ctx; p++) want += sc[p] / sum * v[p * kvd + g * hd + i];
            double err = fabs(out[h * hd + i] - want);
            if (err > worst) worst = err;
        }
    }
    CHECKF(worst < 1e-5, "decode attention heads %d/%d hd %d ctx %d window %d: error %g", n_head, n_kv_head, hd, ctx,
           window, worst);
    free(sc);
    free(k);
    free(v);
    free(q);
    free(out);
    free(scratch);
    kiln_kv_cache_free(kv);
}

static void test_decode_attention(void) {
    const int ctxs[] = {1, 3, 4, 5, 17, 130};
    for (size_t i = 0; i < sizeof ctxs / sizeof *ctxs; i++) {
        attention_case(4, 4, 64, ctxs[i], 0);
        attention_case(8, 2, 16, ctxs[i], 0);
        attention_case(3, 1, 20, ctxs[i], 0);
        attention_case(8, 2, 16, ctxs[i], 3);  /* the window starts inside a block (blocks of 4) */
        attention_case(4, 4, 64, ctxs[i], 8);  /* at a block's start */
        attention_case(3, 1, 20, ctxs[i], 17); /* wider than the shorter contexts: all of them seen */
    }
}

/* kiln_llm_decode_qkv_attention against kiln_llm_linear, kiln_llm_rope, kiln_llm_kv_write and
 * kiln_llm_attention one after the other, each on its own cache holding the same earlier tokens.
 * rot: the dims RoPE rotates (0: no RoPE). */
static void decode_step_case(int n_head, int n_kv_head, int hd, int pos, int rot, int window, kiln_dtype kvt) {
    const int d = 40, bs = 4, n_blocks = pos / bs + 1, qkv_rows = (n_head + 2 * n_kv_head) * hd;
    const size_t kvd = (size_t)n_kv_head * hd, qd = (size_t)n_head * hd;
    float scales[2 * 8]; /* an FP8 cache's: [2][n_kv_head] */
    for (int i = 0; i < 2 * n_kv_head; i++) scales[i] = (1.0f + (float)i) / 448.0f;
    kiln_kv_cache_config kc = {.n_layer = 1, .n_kv_head = n_kv_head, .head_dim = hd, .block_size = bs,
                               .n_blocks = n_blocks, .dtype = kvt, .scales = kvt == KILN_F8E4M3FN ? scales : NULL};
    kiln_kv_cache *kv[2];
    int32_t blocks[64];
    REQUIRE_OK(kiln_kv_cache_create(&kc, &kv[0]));
    REQUIRE_OK(kiln_kv_cache_create(&kc, &kv[1]));
    for (int i = 0; i < n_blocks; i++) {
        blocks[n_blocks - 1 - i] = kiln_kv_cache_alloc_block(kv[0]);
        CHECK(kiln_kv_cache_alloc_block(kv[1]) == blocks[n_blocks - 1 - i]);
    }
    float *x = malloc(sizeof(float) * d), *w = malloc(sizeof(float) * qkv_rows * d), *b = malloc(sizeof(float) * qkv_rows);
    float *early = malloc(sizeof(float) * 2 * kvd), *cs = malloc(sizeof(float) * hd), *sn = cs + rot / 2;
    float *qkv[2], *out[2], *scratch = malloc(sizeof(float) * KILN_LLM_ATTN_SCRATCH(1, pos + 1, n_head, hd));
    fill(x, d);
    fill(w, (size_t)qkv_rows * d);
    fill(b, qkv_rows);
    fill(cs, hd);
    kiln_llm_seq_kv s[2] = {{kv[0], 0, blocks}, {kv[1], 0, blocks}};
    for (int p = 0; p < pos; p++) {
        fill(early, 2 * kvd);
        for (int i = 0; i < 2; i++) kiln_llm_kv_write(&s[i], p, early, early + kvd);
    }
    for (int i = 0; i < 2; i++) {
        qkv[i] = malloc(sizeof(float) * qkv_rows);
        out[i] = malloc(sizeof(float) * qd);
    }
    const kiln_llm_decode_qkv a = {.x = x, .d = d, .w = w, .bias = b, .rot_dim = rot, .rope_cos = rot ? cs : NULL,
                                   .rope_sin = rot ? sn : NULL, .window = window, .qkv = qkv[0], .out = out[0],
                                   .scratch = scratch};
    kiln_llm_decode_qkv_attention(&s[0], pos, n_head, &a);
    kiln_llm_linear(x, d, 1, d, w, b, qkv_rows, qkv[1], qkv_rows, 0);
    if (rot) {
        kiln_llm_rope(qkv[1], n_head, hd, rot, cs, sn);
        kiln_llm_rope(qkv[1] + qd, n_kv_head, hd, rot, cs, sn);
    }
    kiln_llm_kv_write(&s[1], pos, qkv[1] + qd, qkv[1] + qd + kvd);
    kiln_llm_attention(&s[1], 1, pos + 1, window, n_head, qkv[1], (int)qd, out[1], (int)qd, scratch);
    CHECKF(memcmp(qkv[0], qkv[1], sizeof(float) * qkv_rows) == 0 && memcmp(out[0], out[1], sizeof(float) * qd) == 0,
           "decode step heads %d/%d hd %d pos %d rot %d window %d %s cache: differs from the steps one by one", n_head,
           n_kv_head, hd, pos, rot, window, kiln_dtype_name(kvt));
    const size_t block_bytes = (size_t)n_kv_head * bs * hd * kiln_dtype_size(kvt);
    for (int i = 0; i < n_blocks; i++)
        CHECK(memcmp(kiln_kv_cache_keys(kv[0], 0, blocks[i]), kiln_kv_cache_keys(kv[1], 0, blocks[i]),
                     block_bytes) == 0 &&
              memcmp(kiln_kv_cache_values(kv[0], 0, blocks[i]), kiln_kv_cache_values(kv[1], 0, blocks[i]),
                     block_bytes) == 0);
    for (int i = 0; i < 2; i++) {
        free(qkv[i]);
        free(out[i]);
        kiln_kv_cache_free(kv[i]);
    }
    free(x);
    free(w);
    free(b);
    free(early);
    free(cs);
    free(scratch);
}

static void test_decode_step(void) {
    const int positions[] = {0, 3, 4, 21, 100};
    for (size_t i = 0; i < sizeof positions / sizeof *positions; i++)
        for (int rope = 0; rope < 2; rope++) {
            decode_step_case(6, 6, 16, positions[i], rope ? 16 : 0, 0, KILN_F32);
            decode_step_case(8, 2, 32, positions[i], rope ? 32 : 0, 0, KILN_F32);
            decode_step_case(4, 1, 8, positions[i], rope ? 8 : 0, 0, KILN_F32);
            /* partial RoPE (Phi-3's rotary_dim, GPT-NeoX style) and sliding windows (Mistral) */
            decode_step_case(6, 6, 16, positions[i], rope ? 8 : 0, 5, KILN_F32);
            decode_step_case(8, 2, 32, positions[i], rope ? 12 : 0, 16, KILN_F32);
            decode_step_case(4, 1, 8, positions[i], rope ? 4 : 0, 1, KILN_F32);
            /* an FP8 (E4M3) cache with per-head scales */
            decode_step_case(8, 2, 32, positions[i], rope ? 32 : 0, 0, KILN_F8E4M3FN);
            decode_step_case(6, 6, 16, positions[i], rope ? 8 : 0, 5, KILN_F8E4M3FN);
        }
}

/* A random model's arrays, moved, against a second copy from the same seed. */
static void hugepages_case(kiln_llm_arch arch, bool tied) {
    kiln_llm_config c;
    kiln_llm_config_init(&c, arch, 2, 32, 4, arch == KILN_LLM_GPT2 ? 4 : 2, 48, 50, 16);
    c.tied_embeddings = tied;
    kiln_llm_model *m, *ref;
    REQUIRE_OK(kiln_llm_model_random(&c, 7, &m));
    REQUIRE_OK(kiln_llm_model_random(&c, 7, &ref));
    kiln_llm_model_weights_to_hugepages(m);
    kiln_llm_model_weights_to_hugepages(m); /* a second call changes nothing */
    const int n = kiln_llm_weights_list(m, NULL);
    kiln_llm_weight *a = malloc(sizeof *a * (size_t)n), *b = malloc(sizeof *b * (size_t)n);
    kiln_llm_weights_list(m, a);
    kiln_llm_weights_list(ref, b);
    const unsigned char *lo = m->arena, *hi = lo + m->arena_bytes;
    CHECK(m->arena != NULL);
    for (int i = 0; i < n; i++) {
        const size_t bytes = sizeof(float) * (size_t)a[i].dims[0] * (size_t)(a[i].ndim == 2 ? a[i].dims[1] : 1);
        const unsigned char *p = (const unsigned char *)*a[i].slot;
        CHECKF(p >= lo && p + bytes <= hi && (uintptr_t)p % 64 == 0, "%s is outside the block", a[i].name);
        CHECKF(memcmp(*a[i].slot, *b[i].slot, bytes) == 0, "%s changed in the move", a[i].name);
    }
    CHECK(tied ? m->lm_head == m->tok_emb : m->lm_head != m->tok_emb);
    if (!tied) CHECK(memcmp(m->lm_head, ref->lm_head, sizeof(float) * (size_t)c.vocab * c.d_model) == 0);
    free(a);
    free(b);
    kiln_llm_model_free(m);
    kiln_llm_model_free(ref);
}

static void test_hugepages(void) {
    hugepages_case(KILN_LLM_GPT2, true);
    hugepages_case(KILN_LLM_LLAMA, false);
}

int main(void) {
    setenv("KILN_NUM_THREADS", "2", 1); /* before the pool starts: the decode step's groups of 6 and 2 KV
                                           heads share out over 2 threads (one dispatch), 1 does not */
    test_gemv();
    test_hugepages();
    test_decode_attention();
    test_decode_step();
    return checks_report("test_llm_cpu_ops");
}
