/* llm_cpu_ops.c — FP32 kernels of the CPU LLM forward: norms, matrix products (a decode step's few
 * rows through llm_gemv.h with the bias, residual and GELU fused in, more rows through
 * kiln_cpu_sgemm), GELU(tanh), SwiGLU and GeGLU, RoPE (whole or partial), and paged attention (keys
 * and values of a sequence gathered from their blocks into FP32, FP8 ones dequantized with their
 * layer's and KV head's scale, then two products per head with a
 * causal, optionally windowed, FP32 softmax between them; a decode step over an FP32 cache in
 * llm_decode_attention.c). */
#include "llm/llm_cpu_ops.h"

#include "backends/cpu/cpu_gemm.h"
#include "core/half.h"
#include "llm/llm_gemv.h"
#include "quant/fp8.h"

#include <cblas.h>
#include <math.h>
#include <string.h>

void kiln_llm_norm(const float *x, int n, int d, const float *w, float w_offset, const float *b, float eps,
                   float *y) {
    for (int t = 0; t < n; t++) {
        const float *xr = x + (size_t)t * d;
        float *yr = y + (size_t)t * d;
        double mean = 0, var = 0;
        if (b) {
            for (int i = 0; i < d; i++) mean += xr[i];
            mean /= d;
        }
        for (int i = 0; i < d; i++) var += (xr[i] - mean) * (xr[i] - mean);
        float r = (float)(1.0 / sqrt(var / d + eps));
        for (int i = 0; i < d; i++) yr[i] = (float)(xr[i] - mean) * r * (w[i] + w_offset) + (b ? b[i] : 0.0f);
    }
}

void kiln_llm_linear(const float *x, int ldx, int n, int in, const float *w, const float *bias, int out, float *y,
                     int ldy, int accumulate) {
    if (n == 0) return;
    if (n <= KILN_LLM_GEMV_ROWS) {
        kiln_llm_gemv_args a = {.x = x, .ldx = ldx, .n = n, .in = in, .w = w, .bias = bias, .out = out, .y = y,
                                .ldy = ldy, .accumulate = accumulate != 0};
        kiln_llm_gemv(&a);
        return;
    }
    if (bias) {
        for (int t = 0; t < n; t++) {
            float *yr = y + (size_t)t * ldy;
            for (int o = 0; o < out; o++) yr[o] = accumulate ? yr[o] + bias[o] : bias[o];
        }
    }
    kiln_cpu_sgemm(false, true, n, out, in, 1.0f, x, ldx, w, in, bias || accumulate ? 1.0f : 0.0f, y, ldy);
}

void kiln_llm_linear_gelu(const float *x, int ldx, int n, int in, const float *w, const float *bias, int out,
                          float *y, int ldy) {
    if (n == 0) return;
    if (n <= KILN_LLM_GEMV_ROWS) {
        kiln_llm_gemv_args a = {.x = x, .ldx = ldx, .n = n, .in = in, .w = w, .bias = bias, .out = out, .y = y,
                                .ldy = ldy, .gelu = true};
        kiln_llm_gemv(&a);
        return;
    }
    kiln_llm_linear(x, ldx, n, in, w, bias, out, y, ldy, 0);
    for (int t = 0; t < n; t++) kiln_llm_gelu_tanh(y + (size_t)t * ldy, (size_t)out);
}

static float gelu_tanh(float v) {
    const float k = 0.7978845608028654f; /* sqrt(2 / pi) */
    return 0.5f * v * (1.0f + tanhf(k * (v + 0.044715f * v * v * v)));
}

void kiln_llm_gelu_tanh(float *x, size_t count) {
    for (size_t i = 0; i < count; i++) x[i] = gelu_tanh(x[i]);
}

void kiln_llm_gated(float *gu, int n, int ff, kiln_llm_gate_act act) {
    for (int t = 0; t < n; t++) {
        float *g = gu + (size_t)t * 2 * ff, *u = g + ff;
        if (act == KILN_GATE_GELU_TANH)
            for (int i = 0; i < ff; i++) g[i] = gelu_tanh(g[i]) * u[i];
        else
            for (int i = 0; i < ff; i++) g[i] = g[i] / (1.0f + expf(-g[i])) * u[i];
    }
}

void kiln_llm_rope(float *x, int n_heads, int head_dim, int rot_dim, const float *cos, const float *sin) {
    const int half = rot_dim / 2;
    for (int h = 0; h < n_heads; h++) {
        float *a = x + (size_t)h * head_dim, *b = a + half;
        for (int i = 0; i < half; i++) {
            float x1 = a[i], x2 = b[i];
            a[i] = x1 * cos[i] - x2 * sin[i];
            b[i] = x2 * cos[i] + x1 * sin[i];
        }
    }
}

/* Element offset of (kv head g, position pos) inside its block, and the block's id. */
static size_t slot_offset(const kiln_kv_cache_config *c, const int32_t *blocks, int g, int pos, int *block) {
    *block = blocks[pos / c->block_size];
    return ((size_t)g * c->block_size + (size_t)(pos % c->block_size)) * c->head_dim;
}

/* n elements of dtype at src (element offset off) as floats into dst (FP8 codes through lut: each
 * code's value times the scale). */
static void load_row(const void *src, size_t off, kiln_dtype dt, const float *lut, int n, float *dst) {
    if (dt == KILN_F32) {
        memcpy(dst, (const float *)src + off, (size_t)n * sizeof(float));
        return;
    }
    if (dt == KILN_F8E4M3FN) {
        const uint8_t *b = (const uint8_t *)src + off;
        for (int i = 0; i < n; i++) dst[i] = lut[b[i]];
        return;
    }
    const uint16_t *h = (const uint16_t *)src + off;
    for (int i = 0; i < n; i++) dst[i] = dt == KILN_F16 ? kiln_f16_to_f32(h[i]) : kiln_bf16_to_f32(h[i]);
}

/* n floats into dtype at dst (element offset off; FP8: x / scale rounded to E4M3). */
static void store_row(void *dst, size_t off, kiln_dtype dt, float scale, int n, const float *src) {
    if (dt == KILN_F32) {
        memcpy((float *)dst + off, src, (size_t)n * sizeof(float));
        return;
    }
    if (dt == KILN_F8E4M3FN) {
        kiln_e4m3_quantize(src, n, scale, (uint8_t *)dst + off);
        return;
    }
    uint16_t *h = (uint16_t *)dst + off;
    for (int i = 0; i < n; i++) h[i] = dt == KILN_F16 ? kiln_f32_to_f16(src[i]) : kiln_f32_to_bf16(src[i]);
}

void kiln_llm_kv_write(const kiln_llm_seq_kv *s, int pos, const float *k, const float *v) {
    const kiln_kv_cache_config *c = kiln_kv_cache_get_config(s->kv);
    const float *sc = kiln_kv_cache_scales(s->kv, s->layer);
    for (int g = 0; g < c->n_kv_head; g++) {
        int block;
        size_t off = slot_offset(c, s->blocks, g, pos, &block);
        store_row(kiln_kv_cache_keys(s->kv, s->layer, block), off, c->dtype, sc ? sc[g] : 1.0f, c->head_dim,
                  k + (size_t)g * c->head_dim);
        store_row(kiln_kv_cache_values(s->kv, s->layer, block), off, c->dtype, sc ? sc[c->n_kv_head + g] : 1.0f,
                  c->head_dim, v + (size_t)g * c->head_dim);
    }
}

/* A row of scores over keys 0..width-1 becomes the softmax over keys lo..hi, zeros elsewhere. */
static void masked_softmax(float *row, int width, int lo, int hi, float scale) {
    float mx = -INFINITY;
    for (int j = lo; j <= hi; j++) {
        row[j] *= scale;
        if (row[j] > mx) mx = row[j];
    }
    float sum = 0;
    for (int j = lo; j <= hi; j++) {
        row[j] = expf(row[j] - mx);
        sum += row[j];
    }
    for (int j = lo; j <= hi; j++) row[j] /= sum;
    for (int j = 0; j < lo; j++) row[j] = 0;
    for (int j = hi + 1; j < width; j++) row[j] = 0;
}

void kiln_llm_attention(const kiln_llm_seq_kv *s, int n, int ctx_len, int window, int n_head, const float *q, int ldq,
                        float *out, int ldo, float *scratch) {
    const kiln_kv_cache_config *c = kiln_kv_cache_get_config(s->kv);
    if (n == 1 && (c->dtype == KILN_F32 || c->dtype == KILN_F8E4M3FN)) {
        kiln_llm_attention_decode(s, ctx_len, window, n_head, q, out, scratch);
        return;
    }
    const int hd = c->head_dim, group = n_head / c->n_kv_head, first = ctx_len - n; /* first new position */
    /* keys from j0 on: the oldest any new token sees */
    const int j0 = window > 0 && first - window + 1 > 0 ? first - window + 1 : 0, width = ctx_len - j0;
    const float scale = 1.0f / sqrtf((float)hd);
    float *K = scratch, *V = K + (size_t)width * hd, *S = V + (size_t)width * hd;
    const float *sc = kiln_kv_cache_scales(s->kv, s->layer);
    float klut[256], vlut[256]; /* FP8: the code values times the KV head's key and value scales */
    for (int g = 0; g < c->n_kv_head; g++) {
        for (int code = 0; sc && code < 256; code++) {
            klut[code] = kiln_e4m3_to_f32((uint8_t)code) * sc[g];
            vlut[code] = kiln_e4m3_to_f32((uint8_t)code) * sc[c->n_kv_head + g];
        }
        for (int j = j0; j < ctx_len; j++) {
            int block;
            size_t off = slot_offset(c, s->blocks, g, j, &block);
            load_row(kiln_kv_cache_keys(s->kv, s->layer, block), off, c->dtype, klut, hd, K + (size_t)(j - j0) * hd);
            load_row(kiln_kv_cache_values(s->kv, s->layer, block), off, c->dtype, vlut, hd, V + (size_t)(j - j0) * hd);
        }
        for (int h = g * group; h < (g + 1) * group; h++) {
            /* S[n, width] = Q_h K^T; causal (windowed) softmax; out_h = S V */
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, width, hd, 1.0f, q + (size_t)h * hd, ldq, K, hd,
                        0.0f, S, width);
            for (int t = 0; t < n; t++) {
                const int pos = first + t, lo = window > 0 && pos - window + 1 > j0 ? pos - window + 1 : j0;
                masked_softmax(S + (size_t)t * width, width, lo - j0, pos - j0, scale);
            }
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, hd, width, 1.0f, S, width, V, hd, 0.0f,
                        out + (size_t)h * hd, ldo);
        }
    }
}
