/* llm.h — decoder-only language models (GPT-2 and the Llama-like families) as kiln runs them: the
 * model description read from a Hugging Face checkpoint, and one forward step over a batch of
 * sequences whose keys and values live in a paged KV cache (kv_cache.h). The scheduler (scheduler.h)
 * decides what each step holds; this layer only computes it.
 *
 * A step is "ragged": every sequence contributes any number of new tokens (a prefill chunk, or one
 * decode token), packed one after the other. New tokens attend causally to everything cached for their
 * sequence plus the new tokens before them (only the last sliding_window positions when the model has
 * a window); their keys and values are written into the cache blocks the block table names. */
#ifndef KILN_LLM_LLM_H
#define KILN_LLM_LLM_H

#include "kiln/kiln.h"

#include <stdbool.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define KILN_LLM_MAX_EOS 8

typedef enum kiln_llm_arch {
    KILN_LLM_GPT2 = 1,  /* learned positions, LayerNorm, GELU(tanh) MLP, fused c_attn (Conv1D layout) */
    KILN_LLM_LLAMA = 2, /* RoPE, RMSNorm, gated MLP, grouped-query attention: every family but GPT-2 */
} kiln_llm_arch;

/* The checkpoint's model family (config.json's model_type). GPT-2 has arch KILN_LLM_GPT2, the others
 * KILN_LLM_LLAMA with the variations kiln_llm_config's feature fields describe. */
typedef enum kiln_llm_family {
    KILN_FAMILY_GPT2 = 1,
    KILN_FAMILY_LLAMA,   /* Llama 1/2/3.x */
    KILN_FAMILY_MISTRAL, /* Llama's layout, optionally a sliding attention window */
    KILN_FAMILY_QWEN2,   /* Qwen2 / Qwen2.5: biases on the q, k and v projections */
    KILN_FAMILY_PHI3,    /* fused qkv_proj and gate_up_proj (split at load), optionally partial RoPE */
    KILN_FAMILY_GEMMA,   /* GeGLU (gelu-tanh gate), embeddings scaled by sqrt(d_model), RMSNorm by 1 + w */
} kiln_llm_family;
#define KILN_LLM_FAMILY_LAST KILN_FAMILY_GEMMA
/* The model_type names kiln reads, for messages. */
#define KILN_LLM_FAMILY_LIST "gpt2, llama, mistral, qwen2, phi3, gemma"

/* config.json's model_type of family f ("gpt2", "llama", ...); "unknown" outside the enum. */
const char *kiln_llm_family_name(kiln_llm_family f);

/* The activation of the gate half of a gated MLP (arch KILN_LLM_LLAMA): act(gate) * up. */
typedef enum kiln_llm_gate_act {
    KILN_GATE_SILU = 0,      /* SwiGLU */
    KILN_GATE_GELU_TANH = 1, /* GeGLU with the tanh approximation (Gemma) */
} kiln_llm_gate_act;

typedef enum kiln_rope_scaling {
    KILN_ROPE_NONE = 0,
    KILN_ROPE_LINEAR,  /* positions divided by factor */
    KILN_ROPE_DYNAMIC, /* NTK-aware base growth beyond the original context */
    KILN_ROPE_LLAMA3,  /* Llama 3.1 frequency-band scaling */
    KILN_ROPE_LONGROPE, /* Phi-3's LongRoPE: per-frequency short / long factors, cos and sin scaled */
} kiln_rope_scaling;

#define KILN_LLM_MAX_ROPE_FACTORS 128 /* LongRoPE factors: one per rotated pair, head_dim 256 at most */

/* The shape of a model, from config.json. The feature fields after `family` are zero for GPT-2 and
 * Llama, so a config made by kiln_llm_config_init (llm_random.h) is a plain one of its arch. */
typedef struct kiln_llm_config {
    kiln_llm_arch arch;
    kiln_llm_family family;
    kiln_llm_gate_act gate_act;
    bool qkv_bias;        /* the q/k/v rows of the fused projection have a bias (Qwen2) */
    bool scale_emb;       /* token embeddings are multiplied by sqrt(d_model) (Gemma; not the tied lm_head) */
    int rotary_dim;       /* RoPE rotates the first rotary_dim dims of each head; 0: all head_dim */
    int sliding_window;   /* 0: none; else a token attends only to the last sliding_window positions, its own
                             included (transformers: key position > query position - sliding_window) */
    int n_layer, d_model, n_head, n_kv_head, head_dim, d_ff, vocab, max_pos;
    float norm_eps;
    float rope_theta;
    kiln_rope_scaling rope_scaling;
    float rope_factor, rope_low_freq_factor, rope_high_freq_factor;
    int rope_original_max_pos;
    /* LongRoPE: frequency i is divided by rope_long[i] when the context passes rope_original_max_pos,
     * else by rope_short[i] (i < kiln_llm_rope_dim / 2); cos and sin are scaled by rope_attn_factor (0,
     * unused, with the other scalings) */
    float rope_attn_factor;
    float rope_short[KILN_LLM_MAX_ROPE_FACTORS], rope_long[KILN_LLM_MAX_ROPE_FACTORS];
    bool tied_embeddings; /* lm_head shares the token embedding */
    int bos_id, eos_id;   /* -1 when the config names none; eos_id is eos_ids[0] */
    int n_eos;            /* every end-of-sequence id (Llama 3 configs list several) */
    int eos_ids[KILN_LLM_MAX_EOS];
} kiln_llm_config;

/* One forward step. Sequence i owns tokens [seq_start[i], seq_start[i+1]) of `tokens` and
 * `positions`; after the step its context (cached + new) is ctx_len[i] tokens, and its cache blocks
 * are block_table[i * max_blocks_per_seq + j] for j < ceil(ctx_len[i] / block_size). */
typedef struct kiln_llm_batch {
    int n_tokens;
    const int32_t *tokens;    /* [n_tokens] */
    const int32_t *positions; /* [n_tokens] position of each token in its sequence */
    int n_seqs;
    const int32_t *seq_start; /* [n_seqs + 1], seq_start[0] == 0, seq_start[n_seqs] == n_tokens */
    const int32_t *ctx_len;   /* [n_seqs] */
    const int32_t *block_table; /* [n_seqs * max_blocks_per_seq] */
    int max_blocks_per_seq;
    bool all_logits; /* logits for every new token ([n_tokens, vocab]) instead of each sequence's last */
    /* NULL: as all_logits says. Else (all_logits false) [n_seqs]: sequence i wants the logits of its
     * last n_logits[i] new tokens (1 .. its new tokens), rows in batch order (speculative decoding
     * verifies its draft tokens this way). */
    const int32_t *n_logits;
    /* 0: every layer. Else 1 .. n_layer: only the first exit_layers layers run (their keys and values
     * written), then the final norm and lm_head: the early-exit draft of self-speculation. */
    int exit_layers;
} kiln_llm_batch;

/* A model: its config and weights, ready for the CPU forward (FP32, converted from F32/F16/BF16). */
typedef struct kiln_llm_model kiln_llm_model;
typedef struct kiln_kv_cache kiln_kv_cache; /* kv_cache.h */

/* Reads a Hugging Face checkpoint directory: config.json, model.safetensors or the shards named by
 * model.safetensors.index.json, of a family kiln runs (KILN_LLM_FAMILY_LIST). An unknown model_type
 * (KILN_ERR_UNSUPPORTED naming it and the families), missing tensors and wrong shapes are errors
 * naming them. On success the caller owns *out (kiln_llm_model_free). */
kiln_status kiln_llm_model_load_hf(const char *dir, kiln_llm_model **out);
void kiln_llm_model_free(kiln_llm_model *m); /* accepts NULL */
/* Borrowed; valid while m lives. */
const kiln_llm_config *kiln_llm_model_config(const kiln_llm_model *m);
/* Reads only dir/config.json (no weights) into *out; the same errors as kiln_llm_model_load_hf for
 * the config: KILN_ERR_UNSUPPORTED naming an unknown model_type or feature, KILN_ERR_PARSE naming a
 * missing or malformed key. */
kiln_status kiln_llm_config_load_hf(const char *dir, kiln_llm_config *out);

/* Checks b against the rules above for a model of config c and a cache of n_blocks blocks of
 * block_size tokens, whose taken blocks block_taken(kv, block) tells: counts, seq_start, each
 * sequence's context and positions, its block-table entries, token ids. KILN_ERR_INVALID_ARGUMENT
 * names the first violation. Both forwards call it first. */
kiln_status kiln_llm_batch_check(const kiln_llm_config *c, const kiln_llm_batch *b, int block_size, int n_blocks,
                                 bool (*block_taken)(const void *kv, int block), const void *kv);
/* The logits rows of a checked batch: their count, and, when rows is not NULL, the index in tokens of
 * each row's token (rows[count]). */
int kiln_llm_batch_logit_rows(const kiln_llm_batch *b, int32_t *rows);

/* Runs one step: writes the new tokens' keys and values into kv, and their logits into `logits`
 * ([n_seqs, vocab] for each sequence's last new token, [n_tokens, vocab] with all_logits, or the
 * rows n_logits asks for: kiln_llm_batch_logit_rows).
 * Every sequence has at least one new token, and its n new tokens sit at positions
 * ctx_len - n .. ctx_len - 1 (the cache holds positions 0 .. ctx_len - n - 1 from earlier steps).
 * Errors (KILN_ERR_INVALID_ARGUMENT) name what is inconsistent: a token id outside the vocabulary,
 * a position beyond max_pos (GPT-2) or out of order, a block missing from the table or not taken
 * from kv, a cache shaped for another model. Dynamic NTK RoPE takes its base from each sequence's
 * ctx_len (transformers takes it from the step's longest sequence: the same for a batch of one);
 * cached keys keep the rotation they were written with, as in transformers. The CPU forward uses
 * OpenBLAS (threaded) and allocates its activations per step. */
kiln_status kiln_llm_forward(const kiln_llm_model *m, kiln_kv_cache *kv, const kiln_llm_batch *b, float *logits);

#ifdef __cplusplus
}
#endif
#endif
