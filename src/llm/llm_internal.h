/* llm_internal.h — what the model loader and the CPU forward share: the weights of a loaded model in
 * the layout the forward's matrix products want, the config parser and the RoPE frequencies. */
#ifndef KILN_LLM_LLM_INTERNAL_H
#define KILN_LLM_LLM_INTERNAL_H

#include "core/json_read.h"
#include "llm/llm.h"

/* One decoder layer. Every matrix is [out, in] row-major (nn.Linear's layout; GPT-2's Conv1D weights
 * are transposed at load) so that y = x W^T + b. Biases and the LayerNorm shifts are NULL for Llama. */
typedef struct kiln_llm_layer {
    float *norm1_w, *norm1_b; /* [d_model] */
    float *qkv_w, *qkv_b;     /* [q_dim + 2 kv_dim, d_model]: rows of q, then k, then v */
    float *o_w, *o_b;         /* [d_model, q_dim] */
    float *norm2_w, *norm2_b; /* [d_model] */
    float *up_w, *up_b;       /* GPT-2: c_fc [d_ff, d_model]; Llama: gate rows then up rows [2 d_ff, d_model] */
    float *down_w, *down_b;   /* [d_model, d_ff] */
} kiln_llm_layer;

struct kiln_llm_model {
    kiln_llm_config cfg;
    float *tok_emb;             /* [vocab, d_model] */
    float *pos_emb;             /* GPT-2: [max_pos, d_model]; NULL for Llama */
    float *norm_f_w, *norm_f_b; /* [d_model] */
    float *lm_head;             /* [vocab, d_model]; == tok_emb when tied (not freed twice) */
    kiln_llm_layer *layers;     /* [n_layer] */
    void *mapping;              /* an fp32 engine's kiln_file_map the arrays point into (not freed one by one),
                                   or NULL: every array is malloc'd */
    void *arena;                /* the block of huge pages every array was moved into
                                   (kiln_llm_model_weights_to_hugepages), or NULL */
    size_t arena_bytes;
};

/* config.json's document into *out (`what` names the file in messages). Errors as
 * kiln_llm_config_load_hf says. */
kiln_status kiln_llm_config_parse(const kiln_jdoc *doc, const char *what, kiln_llm_config *out);

/* RoPE inverse frequencies [head_dim / 2] as transformers computes them for the config's scaling;
 * seq_len (the step's largest position + 1) matters only for dynamic NTK scaling. */
void kiln_llm_rope_inv_freq(const kiln_llm_config *c, int seq_len, double *inv_freq);

/* Moves every weight array of m into one block of transparent huge pages (the CPU forward reads them
 * all once per decode step; huge pages make that stream faster), freeing malloc'd originals. Does
 * nothing when already done, or when the block cannot be had (the arrays stay where they are). */
void kiln_llm_model_weights_to_hugepages(kiln_llm_model *m);

#endif
