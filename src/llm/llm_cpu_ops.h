/* llm_cpu_ops.h — the FP32 building blocks of the CPU forward (llm_forward_cpu.c): norms, the
 * matrix product with bias, activations, RoPE, and attention of one sequence over its paged cache.
 * Row-major throughout; n is the number of token rows. */
#ifndef KILN_LLM_LLM_CPU_OPS_H
#define KILN_LLM_LLM_CPU_OPS_H

#include "llm/kv_cache.h"
#include "llm/llm.h"

#include <stdint.h>

/* y[n, d] = LayerNorm(x) * (w + w_offset) + b (b NULL: RMSNorm, x / sqrt(mean(x^2) + eps) * (w + w_offset));
 * w_offset is 0, or 1 for Gemma's RMSNorm. */
void kiln_llm_norm(const float *x, int n, int d, const float *w, float w_offset, const float *b, float eps, float *y);

/* y[n, out] (row stride ldy) = x[n, in] (row stride ldx) W^T + bias, W [out, in]; bias may be NULL.
 * With accumulate, adds to y instead (bias included). */
void kiln_llm_linear(const float *x, int ldx, int n, int in, const float *w, const float *bias, int out, float *y,
                     int ldy, int accumulate);

/* y[n, out] (row stride ldy) = GELU(tanh)(x W^T + bias), as kiln_llm_linear then kiln_llm_gelu_tanh
 * on each row, bit for bit. */
void kiln_llm_linear_gelu(const float *x, int ldx, int n, int in, const float *w, const float *bias, int out,
                          float *y, int ldy);

/* In place: x = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) over count elements. */
void kiln_llm_gelu_tanh(float *x, size_t count);

/* Rows [gate | up] of width 2 ff: gate = act(gate) * up, in place (the up half is left as is); act is
 * SiLU (SwiGLU) or GELU(tanh) (GeGLU). */
void kiln_llm_gated(float *gu, int n, int ff, kiln_llm_gate_act act);

/* Rotates the first rot_dim dims of each of n_heads head vectors (head_dim apart) of one token by HF's
 * rotate_half convention, half = rot_dim / 2: x[i] * cos[i] - x[i + half] * sin[i] and
 * x[i + half] * cos[i] + x[i] * sin[i] for i < half; dims from rot_dim on are left as they are. */
void kiln_llm_rope(float *x, int n_heads, int head_dim, int rot_dim, const float *cos, const float *sin);

/* The paged-cache view of one sequence in one layer. */
typedef struct kiln_llm_seq_kv {
    kiln_kv_cache *kv;
    int layer;
    const int32_t *blocks; /* its block table row */
} kiln_llm_seq_kv;

/* Writes the key and value of the token at position pos (each n_kv_head * head_dim floats, head by
 * head) into its cache slot, converted to the cache dtype (FP8: divided by the layer's and KV head's
 * scale, rounded to the nearest E4M3, saturated at +-448). */
void kiln_llm_kv_write(const kiln_llm_seq_kv *s, int pos, const float *k, const float *v);

/* Causal attention of one sequence's n new tokens, at positions ctx_len - n .. ctx_len - 1, over its
 * ctx_len cached keys and values; with window > 0, the token at position p sees only positions
 * p - window + 1 .. p (a sliding window). q: row t of the new tokens at q + t * ldq (n_head heads of
 * head_dim); out: row t at out + t * ldo. scratch holds KILN_LLM_ATTN_SCRATCH(...) floats. One new
 * token over an FP32 or FP8 cache goes to kiln_llm_attention_decode; otherwise the keys and values
 * are read through FP32 copies (FP8 codes times their scale). */
#define KILN_LLM_ATTN_SCRATCH(n, ctx_len, n_head, head_dim)                                        \
    ((size_t)((2 * (head_dim) + (n)) > (n_head) ? 2 * (head_dim) + (n) : (n_head)) * (size_t)(ctx_len))
void kiln_llm_attention(const kiln_llm_seq_kv *s, int n, int ctx_len, int window, int n_head, const float *q, int ldq,
                        float *out, int ldo, float *scratch);

/* The attention of one new token (position ctx_len - 1) over an FP32 or FP8 (E4M3, per-head scales)
 * cache, read from the blocks in place, the heads split over the thread pool; window as
 * kiln_llm_attention's. q, out: n_head heads of head_dim; scratch holds n_head * ctx_len floats. */
void kiln_llm_attention_decode(const kiln_llm_seq_kv *s, int ctx_len, int window, int n_head, const float *q,
                               float *out, float *scratch);

/* One decode token's attention from its normalized input (kiln_llm_decode_qkv_attention). */
typedef struct kiln_llm_decode_qkv {
    const float *x; /* [d], the normalized input */
    int d;
    const float *w, *bias; /* the fused QKV product: W [q_dim + 2 kv_dim, d], bias [q_dim + 2 kv_dim] or NULL */
    int rot_dim;           /* RoPE rotates the first rot_dim dims of each q and k head (kiln_llm_rope) */
    const float *rope_cos, *rope_sin; /* rot_dim / 2 each (LongRoPE's factor already in); NULL: no RoPE */
    int window;                       /* the sliding window (kiln_llm_attention); 0: none */
    float *qkv;                       /* [q_dim + 2 kv_dim]: the product, roped */
    float *out;                       /* [q_dim]: the attention */
    float *scratch;                   /* n_head * (pos + 1) floats */
} kiln_llm_decode_qkv;

/* One decode step's attention over an FP32 or FP8 cache, in one pool dispatch: a->qkv = a->x W^T + bias (as
 * kiln_llm_linear), RoPE on q and k, k and v written at position pos, then a->out = the attention
 * over positions 0..pos within the window (kiln_llm_attention_decode). The same results, bit for bit,
 * as those steps one after the other. */
void kiln_llm_decode_qkv_attention(const kiln_llm_seq_kv *s, int pos, int n_head, const kiln_llm_decode_qkv *a);

#endif
