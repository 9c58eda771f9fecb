/* llm_decode_attention.c — the attention of one new token over an FP32 or FP8 (E4M3) paged cache,
 * read in place from its blocks (no gathering copy; FP8 codes through a table of their values times
 * the head's scale), within the sliding window when the model has one:
 * kiln_llm_attention_decode (the heads split over the thread pool) and kiln_llm_decode_qkv_attention
 * (llm_cpu_ops.h), which also computes the token's q, k and v rows (bias included), RoPE (whole or
 * partial) and the cache write in the same pool dispatch, each part owning whole KV-head
 * groups, so that a decode step has one barrier fewer per layer (when the groups share out evenly
 * over the threads; else the steps run one after the other). Per head: the scores q . k_j
 * (16-lane dot products), the softmax as kiln_llm_attention computes it (scaled, max subtracted,
 * expf, each term divided by the sum), then the probability-weighted sum of the value rows. */
#include "llm/llm_cpu_ops.h"

#include "core/threadpool.h"
#include "llm/llm_gemv.h"
#include "quant/fp8.h"

#include <math.h>
#include <string.h>

#if defined(__x86_64__) && defined(__linux__) && !defined(KILN_NO_SIMD_CLONES)
#define ATTN_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define ATTN_CLONES
#endif

/* Below this many multiply-adds (heads x context x head size) the heads run on the calling thread. */
#define PARALLEL_MACS (1 << 14)

typedef float v16f __attribute__((vector_size(64)));

#define LOAD16(p)                                                                                  \
    ({                                                                                             \
        v16f v_;                                                                                   \
        memcpy(&v_, (p), sizeof v_);                                                               \
        v_;                                                                                        \
    })

typedef struct decode_job {
    const kiln_llm_seq_kv *s;
    const kiln_kv_cache_config *c;
    int j0, ctx, group; /* keys j0 .. ctx - 1 (j0 > 0: the sliding window) */
    const float *kv_scales; /* FP8 cache: the layer's [2][n_kv_head] scales; NULL: an FP32 cache */
    float scale;
    const float *q;
    float *out, *scores; /* scores: [n_head, ctx], keys from j0 on */
} decode_job;

/* a . b over n elements. */
static inline float dot(const float *a, const float *b, int n) {
    v16f acc = {0};
    int k = 0;
    for (; k + 16 <= n; k += 16) acc += LOAD16(a + k) * LOAD16(b + k);
    float s = (((acc[0] + acc[8]) + (acc[4] + acc[12])) + ((acc[2] + acc[10]) + (acc[6] + acc[14]))) +
              (((acc[1] + acc[9]) + (acc[5] + acc[13])) + ((acc[3] + acc[11]) + (acc[7] + acc[15])));
    for (; k < n; k++) s += a[k] * b[k];
    return s;
}

/* y[0, n) += p * v[0, n). */
static inline void axpy(float *y, float p, const float *v, int n) {
    int k = 0;
    for (; k + 16 <= n; k += 16) {
        v16f r = LOAD16(y + k) + p * LOAD16(v + k);
        memcpy(y + k, &r, sizeof r);
    }
    for (; k < n; k++) y[k] += p * v[k];
}

/* a . (b's E4M3 codes through lut) over n elements. */
static inline float dot_e4m3(const float *a, const uint8_t *b, const float *lut, int n) {
    v16f acc = {0};
    int k = 0;
    for (; k + 16 <= n; k += 16) {
        v16f bv = {0};
        for (int e = 0; e < 16; e++) bv[e] = lut[b[k + e]];
        acc += LOAD16(a + k) * bv;
    }
    float s = (((acc[0] + acc[8]) + (acc[4] + acc[12])) + ((acc[2] + acc[10]) + (acc[6] + acc[14]))) +
              (((acc[1] + acc[9]) + (acc[5] + acc[13])) + ((acc[3] + acc[11]) + (acc[7] + acc[15])));
    for (; k < n; k++) s += a[k] * lut[b[k]];
    return s;
}

/* y[0, n) += p * (v's E4M3 codes through lut). */
static inline void axpy_e4m3(float *y, float p, const uint8_t *v, const float *lut, int n) {
    for (int k = 0; k < n; k++) y[k] += p * lut[v[k]];
}

/* lut[c] = the value of E4M3 code c times scale. */
static void e4m3_table(float scale, float *lut) {
    for (int c = 0; c < 256; c++) lut[c] = kiln_e4m3_to_f32((uint8_t)c) * scale;
}

/* Asks for the cache lines of the bytes p[0, n). */
static inline void prefetch_bytes(const void *p, size_t n) {
    for (size_t i = 0; i < n; i += 64) __builtin_prefetch((const char *)p + i);
}

/* Head h (the helpers above are inlined into each clone). */
ATTN_CLONES
static void head_attention(const decode_job *j, int h) {
    const kiln_kv_cache_config *c = j->c;
    const int hd = c->head_dim, bs = c->block_size;
    kiln_kv_cache *kv = j->s->kv;
    const int g = h / j->group;
    const float *q = j->q + h * hd;
    float *S = j->scores + h * j->ctx, *out = j->out + h * hd, mx = -INFINITY, sum = 0;
    const bool fp8 = j->kv_scales != NULL;
    const size_t elem = fp8 ? 1 : sizeof(float);
    float klut[256], vlut[256]; /* FP8: the code values times this KV head's key and value scales */
    if (fp8) {
        e4m3_table(j->kv_scales[g], klut);
        e4m3_table(j->kv_scales[c->n_kv_head + g], vlut);
    }
    /* [b0, b1): the keys of one block, from j0 on (the window may start inside a block) */
    for (int b0 = j->j0, b1; b0 < j->ctx; b0 = b1) {
        b1 = (b0 / bs + 1) * bs < j->ctx ? (b0 / bs + 1) * bs : j->ctx;
        const int block = j->s->blocks[b0 / bs], r0 = b0 % bs;
        const size_t off = ((size_t)g * bs + r0) * hd * elem; /* bytes */
        const char *k = (const char *)kiln_kv_cache_keys(kv, j->s->layer, block) + off;
        /* the cache is cold (a step's weights went through the caches since): this block's values
         * and the next block's keys are fetched while these keys are read */
        prefetch_bytes((const char *)kiln_kv_cache_values(kv, j->s->layer, block) + off, (size_t)(b1 - b0) * hd * elem);
        if (b1 < j->ctx) {
            const int next = j->s->blocks[b1 / bs], next_rows = j->ctx - b1 < bs ? j->ctx - b1 : bs;
            prefetch_bytes((const char *)kiln_kv_cache_keys(kv, j->s->layer, next) + (size_t)g * bs * hd * elem,
                           (size_t)next_rows * hd * elem);
        }
        for (int r = 0; r < b1 - b0; r++) {
            const char *kr = k + (size_t)r * hd * elem;
            float v = (fp8 ? dot_e4m3(q, (const uint8_t *)kr, klut, hd) : dot(q, (const float *)kr, hd)) * j->scale;
            S[b0 + r] = v;
            if (v > mx) mx = v;
        }
    }
    for (int t = j->j0; t < j->ctx; t++) {
        S[t] = expf(S[t] - mx);
        sum += S[t];
    }
    memset(out, 0, (size_t)hd * sizeof(float));
    for (int b0 = j->j0, b1; b0 < j->ctx; b0 = b1) {
        b1 = (b0 / bs + 1) * bs < j->ctx ? (b0 / bs + 1) * bs : j->ctx;
        const int block = j->s->blocks[b0 / bs], r0 = b0 % bs;
        const char *v = (const char *)kiln_kv_cache_values(kv, j->s->layer, block) + ((size_t)g * bs + r0) * hd * elem;
        for (int r = 0; r < b1 - b0; r++) {
            const char *vr = v + (size_t)r * hd * elem;
            if (fp8) axpy_e4m3(out, S[b0 + r] / sum, (const uint8_t *)vr, vlut, hd);
            else axpy(out, S[b0 + r] / sum, (const float *)vr, hd);
        }
    }
}

static void heads_part(void *ctx, int64_t h0, int64_t h1) {
    for (int64_t h = h0; h < h1; h++) head_attention(ctx, (int)h);
}

/* The first key that the token at position ctx_len - 1 sees through a window (0: none). */
static int window_start(int ctx_len, int window) { return window > 0 && ctx_len > window ? ctx_len - window : 0; }

void kiln_llm_attention_decode(const kiln_llm_seq_kv *s, int ctx_len, int window, int n_head, const float *q,
                               float *out, float *scratch) {
    const kiln_kv_cache_config *c = kiln_kv_cache_get_config(s->kv);
    const int j0 = window_start(ctx_len, window);
    decode_job j = {s, c, j0, ctx_len, n_head / c->n_kv_head, kiln_kv_cache_scales(s->kv, s->layer),
                    1.0f / sqrtf((float)c->head_dim), q, out, scratch};
    const bool serial = (int64_t)n_head * (ctx_len - j0) * c->head_dim < PARALLEL_MACS;
    kiln_parallel_for(n_head, serial ? n_head : 1, heads_part, &j);
}

/* One token's q, k, v, RoPE, cache write and attention, split by KV-head group. */
typedef struct qkv_job {
    kiln_llm_gemv_args qkv; /* the token's row of the fused QKV product */
    int rot_dim;
    const float *rope_cos, *rope_sin;
    const kiln_llm_seq_kv *s;
    int pos, n_head;
    decode_job attn;
} qkv_job;

/* RoPE on the q heads and the k head of KV-head group g, then its k and v into the cache. */
static void finish_group(const qkv_job *j, int g) {
    const kiln_kv_cache_config *c = j->attn.c;
    const int hd = c->head_dim, group = j->attn.group, qd = j->n_head * hd, kvd = c->n_kv_head * hd;
    float *q = j->qkv.y, *k = q + qd + g * hd, *v = k + kvd;
    if (j->rope_cos) {
        kiln_llm_rope(q + g * group * hd, group, hd, j->rot_dim, j->rope_cos, j->rope_sin);
        kiln_llm_rope(k, 1, hd, j->rot_dim, j->rope_cos, j->rope_sin);
    }
    const int block = j->s->blocks[j->pos / c->block_size];
    const size_t off = ((size_t)g * c->block_size + (size_t)(j->pos % c->block_size)) * hd;
    const float *sc = j->attn.kv_scales;
    if (sc) { /* FP8: quantized as kiln_llm_kv_write does */
        kiln_e4m3_quantize(k, hd, sc[g], (uint8_t *)kiln_kv_cache_keys(j->s->kv, j->s->layer, block) + off);
        kiln_e4m3_quantize(v, hd, sc[c->n_kv_head + g], (uint8_t *)kiln_kv_cache_values(j->s->kv, j->s->layer, block) + off);
        return;
    }
    memcpy((float *)kiln_kv_cache_keys(j->s->kv, j->s->layer, block) + off, k, (size_t)hd * sizeof(float));
    memcpy((float *)kiln_kv_cache_values(j->s->kv, j->s->layer, block) + off, v, (size_t)hd * sizeof(float));
}

/* KV-head groups [g0, g1): their q, k and v rows, RoPE, cache write and heads. */
static void groups_part(void *ctx, int64_t g0, int64_t g1) {
    const qkv_job *j = ctx;
    const int hd = j->attn.c->head_dim, group = j->attn.group, qd = j->n_head * hd, kvd = j->attn.c->n_kv_head * hd;
    for (int g = (int)g0; g < (int)g1; g++) {
        kiln_llm_gemv_rows(&j->qkv, g * group * hd, (g + 1) * group * hd);
        kiln_llm_gemv_rows(&j->qkv, qd + g * hd, qd + (g + 1) * hd);
        kiln_llm_gemv_rows(&j->qkv, qd + kvd + g * hd, qd + kvd + (g + 1) * hd);
        finish_group(j, g);
        for (int h = g * group; h < (g + 1) * group; h++) head_attention(&j->attn, h);
    }
}

void kiln_llm_decode_qkv_attention(const kiln_llm_seq_kv *s, int pos, int n_head, const kiln_llm_decode_qkv *a) {
    const kiln_kv_cache_config *c = kiln_kv_cache_get_config(s->kv);
    const int hd = c->head_dim, ldq = (n_head + 2 * c->n_kv_head) * hd, threads = kiln_threadpool_size();
    qkv_job j = {{.x = a->x, .ldx = a->d, .n = 1, .in = a->d, .w = a->w, .bias = a->bias, .out = ldq, .y = a->qkv,
                  .ldy = ldq},
                 a->rot_dim,
                 a->rope_cos,
                 a->rope_sin,
                 s,
                 pos,
                 n_head,
                 {s, c, window_start(pos + 1, a->window), pos + 1, n_head / c->n_kv_head,
                  kiln_kv_cache_scales(s->kv, s->layer), 1.0f / sqrtf((float)hd), a->qkv, a->out, a->scratch}};
    if (c->n_kv_head % threads == 0 || c->n_kv_head >= 4 * threads) {
        kiln_parallel_for(c->n_kv_head, 1, groups_part, &j);
        return;
    }
    /* too few groups to share out evenly over the threads: the steps one after the other */
    kiln_llm_gemv(&j.qkv);
    for (int g = 0; g < c->n_kv_head; g++) finish_group(&j, g);
    kiln_llm_attention_decode(s, pos + 1, a->window, n_head, a->qkv, a->out, a->scratch);
}
