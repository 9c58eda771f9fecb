/* llm_forward_cpu.c — kiln_llm_forward on the CPU in FP32: checks the ragged batch against the model
 * and the cache, then runs embeddings (scaled for Gemma), the decoder layers (norm, fused QKV product
 * over all tokens, RoPE, cache write, per-sequence paged attention with the sliding window when the
 * model has one, output product + residual, MLP + residual) and the final norm and lm_head over the
 * rows whose logits are wanted. A single decode token over an FP32 cache runs its QKV product (biases
 * included), RoPE (partial or LongRoPE too), cache write and windowed attention as one pool dispatch.
 * An INT8 or INT4 engine's quantized matrices go through the INT8 (llm_gemv_q8.h) or INT4 product
 * (llm_gemv_q4.h) instead, an FP8 engine's through the FP8 one (llm_gemv_fp8.h), a W8A8 engine's layer
 * matrices through the W8A8 one (llm_gemm_w8a8.h); a model's observer (W8A8 calibration) sees every
 * layer product's input first. While m->probe is set the products' inputs are recorded (llm_awq.h); while
 * m->act_amax is set their largest magnitudes (FP8 calibration, llm_fp8_calib.h). */
#include "llm/llm_internal.h"

#include "core/status.h"
#include "llm/kv_cache.h"
#include "llm/llm_cpu_ops.h"
#include "llm/llm_awq.h"
#include "llm/llm_gemm_w8a8.h"
#include "llm/llm_gemv_fp8.h"
#include "llm/llm_gemv_q4.h"
#include "llm/llm_gemv_q8.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static bool cpu_block_taken(const void *kv, int block) { return kiln_kv_cache_block_taken(kv, block); }

/* Checks the cache shape, then the batch (kiln_llm_batch_check). */
static kiln_status check_batch(const kiln_llm_config *c, const kiln_kv_cache *kv, const kiln_llm_batch *b) {
    const kiln_kv_cache_config *kc = kiln_kv_cache_get_config(kv);
    if (kc->n_layer != c->n_layer || kc->n_kv_head != c->n_kv_head || kc->head_dim != c->head_dim)
        return kiln_error(KILN_ERR_INVALID_ARGUMENT,
                          "KV cache shape (n_layer %d, n_kv_head %d, head_dim %d) does not match the model's (%d, %d, %d)",
                          kc->n_layer, kc->n_kv_head, kc->head_dim, c->n_layer, c->n_kv_head, c->head_dim);
    return kiln_llm_batch_check(c, b, kc->block_size, kc->n_blocks, cpu_block_taken, kv);
}

static const kiln_llm_q8_layer NO_Q8; /* a layer without INT8 matrices */

/* y = x W^T + bias (GELU'd when gelu), W the fp32 w or, when q holds it, the INT8, INT4 or FP8 matrix (with
 * INT8 activations quantized into xq for a W8A8 one: not fp8, q->act_scale > 0). */
static void linear(const float *x, int ldx, int n, int in, const float *w, const kiln_llm_q8 *q, const float *bias,
                   int out, float *y, int ldy, int accumulate, bool gelu, int16_t *xq) {
    if (q->q && !q->fp8 && q->act_scale > 0) {
        const kiln_llm_gemv_args a = {.x = x, .ldx = ldx, .n = n, .in = in, .w = q->q, .format = KILN_LLM_W_W8A8,
                                      .scale = q->scale, .act_scale = q->act_scale, .bias = bias, .out = out, .y = y,
                                      .ldy = ldy, .accumulate = accumulate, .gelu = gelu};
        kiln_llm_gemm_w8a8(&a, xq);
    } else if (q->q) {
        const kiln_llm_gemv_args a = {.x = x, .ldx = ldx, .n = n, .in = in, .w = q->q,
                                      .format = q->fp8 ? KILN_LLM_W_FP8 : q->zero ? KILN_LLM_W_INT4 : KILN_LLM_W_INT8,
                                      .scale = q->scale, .act_scale = q->fp8 ? q->act_scale : 0.0f, .zero = q->zero,
                                      .bias = bias, .out = out, .y = y, .ldy = ldy, .accumulate = accumulate,
                                      .gelu = gelu};
        if (q->fp8) kiln_llm_gemm_fp8(&a);
        else if (q->zero) kiln_llm_gemm_q4(&a);
        else kiln_llm_gemm_q8(&a);
    } else if (gelu) {
        kiln_llm_linear_gelu(x, ldx, n, in, w, bias, out, y, ldy);
    } else {
        kiln_llm_linear(x, ldx, n, in, w, bias, out, y, ldy, accumulate);
    }
}

/* A layer product's input rows, shown to the model's observer (when it has one) before the product. */
static void observe(const kiln_llm_model *m, int l, kiln_llm_matrix mat, const float *x, int ldx, int n, int in) {
    if (m->observer) m->observer->see(m->observer->ctx, l, mat, x, ldx, n, in);
}

/* Calibration (m->act_amax set): raises m->act_amax[slot] to the largest |x| of the product input x
 * [n, in] (row stride ldx). */
static void observe_amax(const kiln_llm_model *m, int slot, const float *x, int ldx, int n, int in) {
    if (!m->act_amax) return;
    float mx = m->act_amax[slot];
    for (int t = 0; t < n; t++)
        for (int k = 0; k < in; k++) mx = fabsf(x[(size_t)t * ldx + k]) > mx ? fabsf(x[(size_t)t * ldx + k]) : mx;
    m->act_amax[slot] = mx;
}

/* Scratch of one step, carved from one allocation (xq: the W8A8 products' quantized inputs, only for a
 * model with W8A8 matrices). */
typedef struct step_mem {
    float *x, *h, *qkv, *att, *mlp, *rope_cos, *rope_sin, *attn_scratch;
    int16_t *xq;
    double *inv_freq;
    void *block;
} step_mem;

static kiln_status step_alloc(const kiln_llm_model *m, const kiln_llm_batch *b, step_mem *sm) {
    const kiln_llm_config *c = &m->cfg;
    const size_t n = (size_t)b->n_tokens, d = (size_t)c->d_model, hd = (size_t)c->head_dim, half = hd / 2;
    const size_t qkv_w = (size_t)(c->n_head + 2 * c->n_kv_head) * hd, qd = (size_t)c->n_head * hd;
    const size_t mlp_w = (size_t)c->d_ff * (c->arch == KILN_LLM_LLAMA ? 2 : 1);
    size_t attn = 0;
    for (int i = 0; i < b->n_seqs; i++) {
        size_t ni = (size_t)(b->seq_start[i + 1] - b->seq_start[i]), ctx = (size_t)b->ctx_len[i];
        size_t need = KILN_LLM_ATTN_SCRATCH(ni, ctx, (size_t)c->n_head, hd);
        if (need > attn) attn = need;
    }
    bool w8a8 = false;
    for (int l = 0; m->q8 && l < c->n_layer; l++) {
        const kiln_llm_q8_layer *q = &m->q8[l];
        w8a8 |= !q->qkv.fp8 && (q->qkv.act_scale > 0 || q->o.act_scale > 0 || q->up.act_scale > 0 || q->down.act_scale > 0);
    }
    const size_t max_in = d > qd ? (d > mlp_w ? d : mlp_w) : (qd > mlp_w ? qd : mlp_w);
    const size_t xq = w8a8 ? KILN_LLM_W8A8_SCRATCH(n, max_in) : 0;
    const size_t sizes[] = {n * d, n * d, n * qkv_w, n * qd, n * mlp_w, n * half, n * half, attn};
    float **slots[] = {&sm->x, &sm->h, &sm->qkv, &sm->att, &sm->mlp, &sm->rope_cos, &sm->rope_sin, &sm->attn_scratch};
    size_t total = half * sizeof(double) + xq * sizeof(int16_t);
    for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++) total += sizes[i] * sizeof(float);
    unsigned char *p = sm->block = malloc(total);
    if (!p) return kiln_error(KILN_ERR_OUT_OF_MEMORY, "out of memory for the step's %zu bytes of activations", total);
    sm->inv_freq = (double *)p;
    p += half * sizeof(double);
    for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++) {
        *slots[i] = (float *)p;
        p += sizes[i] * sizeof(float);
    }
    sm->xq = xq ? (int16_t *)(void *)p : NULL;
    return KILN_OK;
}

/* Token embeddings (+ learned positions for GPT-2, times sqrt(d_model) for Gemma) into x; RoPE cos/sin
 * tables for the others. */
static void embed(const kiln_llm_model *m, const kiln_llm_batch *b, step_mem *sm) {
    const kiln_llm_config *c = &m->cfg;
    const size_t d = (size_t)c->d_model;
    const float scale = sqrtf((float)c->d_model);
    for (int t = 0; t < b->n_tokens; t++) {
        float *xr = sm->x + t * d;
        if (m->tok_emb) memcpy(xr, m->tok_emb + (size_t)b->tokens[t] * d, d * sizeof(float));
        else if (m->q8_tok_emb.zero)
            kiln_llm_q4_row((const uint8_t *)m->q8_tok_emb.q, m->q8_tok_emb.scale, m->q8_tok_emb.zero, b->tokens[t], (int)d, xr);
        else if (m->q8_tok_emb.fp8) kiln_llm_fp8_row(&m->q8_tok_emb, b->tokens[t], (int)d, xr);
        else kiln_llm_q8_row(&m->q8_tok_emb, b->tokens[t], (int)d, xr);
        if (m->pos_emb)
            for (size_t i = 0; i < d; i++) xr[i] += m->pos_emb[(size_t)b->positions[t] * d + i];
        if (c->scale_emb)
            for (size_t i = 0; i < d; i++) xr[i] *= scale;
    }
    if (c->arch != KILN_LLM_LLAMA) return;
    const int half = kiln_llm_rope_dim(c) / 2;
    const double rs = kiln_llm_rope_scale(c);
    for (int i = 0; i < b->n_seqs; i++) {
        kiln_llm_rope_inv_freq(c, b->ctx_len[i], sm->inv_freq);
        for (int t = b->seq_start[i]; t < b->seq_start[i + 1]; t++)
            for (int j = 0; j < half; j++) {
                double a = b->positions[t] * sm->inv_freq[j];
                sm->rope_cos[(size_t)t * half + j] = (float)(cos(a) * rs);
                sm->rope_sin[(size_t)t * half + j] = (float)(sin(a) * rs);
            }
    }
}

/* Attention block of one layer: x += Wo · attention(norm1(x)) (+ bias). */
static void attention_block(const kiln_llm_model *m, int l, kiln_kv_cache *kv, const kiln_llm_batch *b, step_mem *sm) {
    const kiln_llm_config *c = &m->cfg;
    const kiln_llm_layer *y = &m->layers[l];
    const kiln_llm_q8_layer *q8 = m->q8 ? &m->q8[l] : &NO_Q8;
    const int n = b->n_tokens, d = c->d_model, hd = c->head_dim, rot = kiln_llm_rope_dim(c), half = rot / 2;
    const int qd = c->n_head * hd, kvd = c->n_kv_head * hd, ldq = qd + 2 * kvd;
    kiln_llm_norm(sm->x, n, d, y->norm1_w, kiln_llm_norm_offset(c), y->norm1_b, c->norm_eps, sm->h);
    if (m->probe) kiln_llm_probe_record(m->probe, l, KILN_PROBE_QKV, sm->h, d, n, d);
    const kiln_dtype kvt = kiln_kv_cache_get_config(kv)->dtype;
    observe(m, l, KILN_LLM_MAT_QKV, sm->h, d, n, d);
    observe_amax(m, KILN_LLM_ACT_QKV(l), sm->h, d, n, d);
    if (n == 1 && !q8->qkv.q && !m->observer && !m->act_amax && (kvt == KILN_F32 || kvt == KILN_F8E4M3FN)) {
        /* one decode token */
        kiln_llm_seq_kv s = {kv, l, b->block_table};
        const bool rope = c->arch == KILN_LLM_LLAMA;
        const kiln_llm_decode_qkv a = {.x = sm->h, .d = d, .w = y->qkv_w, .bias = y->qkv_b, .rot_dim = rot,
                                       .rope_cos = rope ? sm->rope_cos : NULL, .rope_sin = rope ? sm->rope_sin : NULL,
                                       .window = c->sliding_window, .qkv = sm->qkv, .out = sm->att,
                                       .scratch = sm->attn_scratch};
        kiln_llm_decode_qkv_attention(&s, b->positions[0], c->n_head, &a);
        linear(sm->att, qd, n, qd, y->o_w, &q8->o, y->o_b, d, sm->x, d, 1, false, sm->xq);
        return;
    }
    linear(sm->h, d, n, d, y->qkv_w, &q8->qkv, y->qkv_b, ldq, sm->qkv, ldq, 0, false, sm->xq);
    for (int i = 0; i < b->n_seqs; i++) {
        kiln_llm_seq_kv s = {kv, l, b->block_table + (size_t)i * b->max_blocks_per_seq};
        const int s0 = b->seq_start[i], ni = b->seq_start[i + 1] - s0;
        for (int t = s0; t < s0 + ni; t++) {
            float *q = sm->qkv + (size_t)t * ldq;
            if (c->arch == KILN_LLM_LLAMA) {
                const float *cs = sm->rope_cos + (size_t)t * half, *sn = sm->rope_sin + (size_t)t * half;
                kiln_llm_rope(q, c->n_head, hd, rot, cs, sn);
                kiln_llm_rope(q + qd, c->n_kv_head, hd, rot, cs, sn);
            }
            kiln_llm_kv_write(&s, b->positions[t], q + qd, q + qd + kvd);
        }
        kiln_llm_attention(&s, ni, b->ctx_len[i], c->sliding_window, c->n_head, sm->qkv + (size_t)s0 * ldq, ldq,
                           sm->att + (size_t)s0 * qd, qd, sm->attn_scratch);
    }
    observe_amax(m, KILN_LLM_ACT_O(l), sm->att, qd, n, qd);
    observe(m, l, KILN_LLM_MAT_O, sm->att, qd, n, qd);
    if (m->probe) kiln_llm_probe_record(m->probe, l, KILN_PROBE_O, sm->att, qd, n, qd);
    linear(sm->att, qd, n, qd, y->o_w, &q8->o, y->o_b, d, sm->x, d, 1, false, sm->xq);
}

/* MLP block of one layer: x += MLP(norm2(x)). */
static void mlp_block(const kiln_llm_model *m, int l, int n, step_mem *sm) {
    const kiln_llm_config *c = &m->cfg;
    const kiln_llm_layer *y = &m->layers[l];
    const kiln_llm_q8_layer *q8 = m->q8 ? &m->q8[l] : &NO_Q8;
    const int d = c->d_model, ff = c->d_ff;
    kiln_llm_norm(sm->x, n, d, y->norm2_w, kiln_llm_norm_offset(c), y->norm2_b, c->norm_eps, sm->h);
    observe_amax(m, KILN_LLM_ACT_UP(l), sm->h, d, n, d);
    observe(m, l, KILN_LLM_MAT_UP, sm->h, d, n, d);
    if (m->probe) kiln_llm_probe_record(m->probe, l, KILN_PROBE_UP, sm->h, d, n, d);
    if (c->arch == KILN_LLM_GPT2) {
        linear(sm->h, d, n, d, y->up_w, &q8->up, y->up_b, ff, sm->mlp, ff, 0, true, sm->xq);
        observe_amax(m, KILN_LLM_ACT_DOWN(l), sm->mlp, ff, n, ff);
        observe(m, l, KILN_LLM_MAT_DOWN, sm->mlp, ff, n, ff);
        if (m->probe) kiln_llm_probe_record(m->probe, l, KILN_PROBE_DOWN, sm->mlp, ff, n, ff);
        linear(sm->mlp, ff, n, ff, y->down_w, &q8->down, y->down_b, d, sm->x, d, 1, false, sm->xq);
    } else {
        linear(sm->h, d, n, d, y->up_w, &q8->up, NULL, 2 * ff, sm->mlp, 2 * ff, 0, false, sm->xq);
        kiln_llm_gated(sm->mlp, n, ff, c->gate_act);
        observe_amax(m, KILN_LLM_ACT_DOWN(l), sm->mlp, 2 * ff, n, ff);
        observe(m, l, KILN_LLM_MAT_DOWN, sm->mlp, 2 * ff, n, ff);
        if (m->probe) kiln_llm_probe_record(m->probe, l, KILN_PROBE_DOWN, sm->mlp, 2 * ff, n, ff);
        linear(sm->mlp, 2 * ff, n, ff, y->down_w, &q8->down, NULL, d, sm->x, d, 1, false, sm->xq);
    }
}

kiln_status kiln_llm_forward(const kiln_llm_model *m, kiln_kv_cache *kv, const kiln_llm_batch *b, float *logits) {
    const kiln_llm_config *c = &m->cfg;
    KILN_TRY(check_batch(c, kv, b));
    step_mem sm = {0};
    KILN_TRY(step_alloc(m, b, &sm));
    embed(m, b, &sm);
    const int n_layers = b->exit_layers ? b->exit_layers : c->n_layer;
    for (int l = 0; l < n_layers; l++) {
        attention_block(m, l, kv, b, &sm);
        mlp_block(m, l, b->n_tokens, &sm);
    }
    /* the rows whose logits are wanted, gathered into h, then the final norm and lm_head */
    const size_t d = (size_t)c->d_model;
    const int n_out = kiln_llm_batch_logit_rows(b, NULL);
    for (int r = 0, i = 0; i < b->n_seqs; i++) { /* kiln_llm_batch_logit_rows' order, without scratch */
        const int end = b->seq_start[i + 1];
        const int want = b->all_logits ? end - b->seq_start[i] : b->n_logits ? b->n_logits[i] : 1;
        for (int t = end - want; t < end; t++, r++) memcpy(sm.h + r * d, sm.x + t * d, d * sizeof(float));
    }
    kiln_llm_norm(sm.h, n_out, c->d_model, m->norm_f_w, kiln_llm_norm_offset(c), m->norm_f_b, c->norm_eps, sm.h);
    if (m->probe) kiln_llm_probe_record_head(m->probe, sm.h, c->d_model, n_out, c->d_model);
    observe_amax(m, KILN_LLM_ACT_LM_HEAD(c), sm.h, c->d_model, n_out, c->d_model);
    linear(sm.h, c->d_model, n_out, c->d_model, m->lm_head, &m->q8_lm_head, NULL, c->vocab, logits, c->vocab, 0, false, sm.xq);
    free(sm.block);
    return KILN_OK;
}
