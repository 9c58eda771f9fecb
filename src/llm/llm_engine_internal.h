/* llm_engine_internal.h — what the LLM engine writer and reader share: the list of a model's weight
 * arrays under their engine names and shapes, and the byte records of the llm config and tokenizer
 * sections (docs/engine-format.md, "LLM engines"). */
#ifndef KILN_LLM_ENGINE_INTERNAL_H
#define KILN_LLM_ENGINE_INTERNAL_H

#include "llm/llm_engine.h"
#include "llm/llm_internal.h"

/* One weight array of a model: its engine name, shape ([rows, cols] or [n]) and the model field
 * that holds it. */
typedef struct kiln_llm_weight {
    char name[48];
    int ndim;
    int64_t dims[2];
    float **slot;
    kiln_llm_q8 *q8; /* where the matrix goes when stored as INT8; NULL for vectors, pos_emb, and the layers'
                        matrices of a model without m->q8 */
} kiln_llm_weight;

/* The weight arrays m->cfg implies, in engine order, into out[0..count) (out may be NULL to count
 * them); m->layers must hold cfg.n_layer entries when out is not NULL. Returns the count. Names:
 * tok_emb, pos_emb (GPT-2), layers.N.{norm1,qkv,o,norm2,up,down}.{weight,bias} (biases and norm
 * shifts GPT-2 only, but qkv.bias also with cfg.qkv_bias), norm_f.weight, norm_f.bias (GPT-2),
 * lm_head (untied only). Matrices are in the layout of llm_internal.h ([out, in]; q/k/v and gate/up
 * stacked). */
int kiln_llm_weights_list(kiln_llm_model *m, kiln_llm_weight *out);

/* The llm config section: cfg and the generation eos ids, little-endian, no padding. */
kiln_status kiln_llm_config_encode(const kiln_llm_config *cfg, const int32_t *gen_eos, int n_gen_eos, kiln_strbuf *out);
/* Decodes and checks it (every size positive and consistent, known enums, eos ids inside the
 * vocabulary, the section consumed exactly); corruption is KILN_ERR_PARSE "engine file is corrupted:
 * ...". */
kiln_status kiln_llm_config_decode(const uint8_t *p, size_t n, kiln_llm_config *cfg, int32_t *gen_eos, int *n_gen_eos);

#endif
