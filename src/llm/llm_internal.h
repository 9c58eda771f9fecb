/* llm_internal.h — what the model loader and the CPU forward share: the weights of a loaded model in
 * the layout the forward's matrix products want, the config parser and the RoPE frequencies. */
#ifndef KILN_LLM_LLM_INTERNAL_H
#define KILN_LLM_LLM_INTERNAL_H

#include "core/json_read.h"
#include "llm/llm.h"

/* One decoder layer. Every matrix is [out, in] row-major (nn.Linear's layout; GPT-2's Conv1D weights
 * are transposed at load) so that y = x W^T + b. Biases and the LayerNorm shifts are NULL for the
 * Llama-like families, but for qkv_b when cfg.qkv_bias (Qwen2). Norm weights are as the checkpoint
 * stores them: Gemma's RMSNorm scales by 1 + w (kiln_llm_norm_offset). */
typedef struct kiln_llm_layer {
    float *norm1_w, *norm1_b; /* [d_model] */
    float *qkv_w, *qkv_b;     /* [q_dim + 2 kv_dim, d_model]: rows of q, then k, then v */
    float *o_w, *o_b;         /* [d_model, q_dim] */
    float *norm2_w, *norm2_b; /* [d_model] */
    float *up_w, *up_b;       /* GPT-2: c_fc [d_ff, d_model]; others: gate rows then up rows [2 d_ff, d_model] */
    float *down_w, *down_b;   /* [d_model, d_ff] */
} kiln_llm_layer;

/* A weight-only INT8 matrix [out, in]: w[o, k] ~ q[o, k] * scale[o] (symmetric, per output row); or,
 * with zero, an INT4 one in llm_gemv_q4.h's layout: w[o, k] ~ (q[o, k] - zero[o, g]) * scale[o, g]; or,
 * when fp8, an FP8 matrix: q holds E4M3 codes, w[o, k] ~ e4m3(q[o, k]) * scale[o], and the products'
 * activations are rounded to E4M3 too (llm_gemv_fp8.h). */
typedef struct kiln_llm_q8 {
    const int8_t *q;     /* [out, in] (INT4: the packed bytes), NULL when the matrix is not quantized */
    const float *scale;  /* [out]; INT4: [out, groups] */
    bool fp8;            /* q holds E4M3 codes */
    float act_scale;     /* the product's static per-tensor activation scale. INT8 (not fp8, no zero): > 0 makes
                            the matrix W8A8, the input quantized too, x ~ int8(x / act_scale) * act_scale; 0:
                            weight-only. fp8: x ~ e4m3(x / act_scale) * act_scale, or 0: one scale per token
                            row. INT4: 0 */
    const float *zero;   /* INT4: [out, groups] zero points; NULL for INT8, W8A8 and FP8 */
} kiln_llm_q8;

/* Sees the input rows x [n, in] (row stride ldx) of every layer matrix product of the CPU forward
 * before it runs (W8A8 calibration); matrix: KILN_LLM_MAT_QKV .. KILN_LLM_MAT_DOWN. */
typedef enum kiln_llm_matrix { KILN_LLM_MAT_QKV, KILN_LLM_MAT_O, KILN_LLM_MAT_UP, KILN_LLM_MAT_DOWN } kiln_llm_matrix;
typedef struct kiln_llm_act_observer {
    void (*see)(void *ctx, int layer, kiln_llm_matrix matrix, const float *x, int ldx, int n, int in);
    void *ctx;
} kiln_llm_act_observer;

/* The quantized matrices of one layer; a matrix held here has NULL in its kiln_llm_layer field. */
typedef struct kiln_llm_q8_layer {
    kiln_llm_q8 qkv, o, up, down;
} kiln_llm_q8_layer;

struct kiln_llm_model {
    kiln_llm_config cfg;
    float *tok_emb;             /* [vocab, d_model] */
    float *pos_emb;             /* GPT-2: [max_pos, d_model]; NULL for Llama */
    float *norm_f_w, *norm_f_b; /* [d_model] */
    float *lm_head;             /* [vocab, d_model]; == tok_emb when tied (not freed twice) */
    kiln_llm_layer *layers;     /* [n_layer] */
    void *mapping;              /* an fp32 engine's kiln_file_map the arrays point into (not freed one by one),
                                   or NULL: every array is malloc'd */
    struct llm_deferred *deferred; /* a model opened for a device (llm_deferred.h): its matrices are ranges of
                                   this reservation (not freed one by one), or NULL */
    void *arena;                /* the block of huge pages every array was moved into
                                   (kiln_llm_model_weights_to_hugepages), or NULL; never with deferred */
    size_t arena_bytes;
    /* An INT8 engine's quantized matrices (llm_engine_read.c), pointing into its mapping: [n_layer]
     * layers, and the token embedding and lm_head (tok_emb / lm_head NULL when they are held here; a
     * tied lm_head is the embedding's). NULL for a model without any. */
    kiln_llm_q8_layer *q8;
    kiln_llm_q8 q8_tok_emb, q8_lm_head;
    const kiln_llm_act_observer *observer; /* W8A8 calibration's, or NULL */
    struct kiln_llm_probe *probe; /* while calibrating INT4 scales (llm_awq.h): what the CPU forward records
                                     the products' inputs into; NULL otherwise */
    /* FP8 calibration (llm_fp8_calib.h): while set, the CPU forward raises each entry to the largest |x|
     * entering one matrix product, KILN_LLM_ACT_SLOTS(cfg) of them (KILN_LLM_ACT_QKV ...); else NULL. */
    float *act_amax;
};

/* The slots of kiln_llm_model.act_amax: four per layer l, then the lm_head's. */
#define KILN_LLM_ACT_QKV(l) (4 * (l))
#define KILN_LLM_ACT_O(l) (4 * (l) + 1)
#define KILN_LLM_ACT_UP(l) (4 * (l) + 2)
#define KILN_LLM_ACT_DOWN(l) (4 * (l) + 3)
#define KILN_LLM_ACT_LM_HEAD(c) (4 * (c)->n_layer)
#define KILN_LLM_ACT_SLOTS(c) (4 * (size_t)(c)->n_layer + 1)

/* config.json's document into *out (`what` names the file in messages). Errors as
 * kiln_llm_config_load_hf says. */
kiln_status kiln_llm_config_parse(const kiln_jdoc *doc, const char *what, kiln_llm_config *out);

/* What the forward adds to every RMSNorm weight: 1 for Gemma (its RMSNorm scales by 1 + w), else 0. */
static inline float kiln_llm_norm_offset(const kiln_llm_config *c) {
    return c->family == KILN_FAMILY_GEMMA ? 1.0f : 0.0f;
}

/* The dims of each head that RoPE rotates: rotary_dim, or all head_dim when it is 0. */
static inline int kiln_llm_rope_dim(const kiln_llm_config *c) { return c->rotary_dim ? c->rotary_dim : c->head_dim; }

/* What RoPE's cos and sin are multiplied by: LongRoPE's attention factor, else 1. */
static inline float kiln_llm_rope_scale(const kiln_llm_config *c) {
    return c->rope_scaling == KILN_ROPE_LONGROPE ? c->rope_attn_factor : 1.0f;
}

/* RoPE inverse frequencies [kiln_llm_rope_dim(c) / 2] as transformers computes them for the config's
 * scaling; seq_len (the step's largest position + 1) matters only for dynamic NTK scaling and
 * LongRoPE (the long factors beyond rope_original_max_pos). */
void kiln_llm_rope_inv_freq(const kiln_llm_config *c, int seq_len, double *inv_freq);

/* Moves every weight array of m into one block of transparent huge pages (the CPU forward reads them
 * all once per decode step; huge pages make that stream faster), freeing malloc'd originals. Does
 * nothing when already done, for a deferred model (its matrices belong to the device upload), or when
 * the block cannot be had (the arrays stay where they are). */
void kiln_llm_model_weights_to_hugepages(kiln_llm_model *m);

#endif
