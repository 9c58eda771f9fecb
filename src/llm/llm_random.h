/* llm_random.h — a kiln_llm_model with random weights made from a config alone (no checkpoint), for
 * tests and benchmarks that need a model of a given shape: every matrix uniform with standard
 * deviation 1/sqrt(fan_in), embeddings with standard deviation 1, norm scales near 1, shifts and
 * biases near 0. The same (config, seed) always gives the same weights. */
#ifndef KILN_LLM_LLM_RANDOM_H
#define KILN_LLM_LLM_RANDOM_H

#include "llm/llm.h"

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Fills the fields a config.json would, for arch and the given shape: family gpt2 or llama (no other
 * family's features), head_dim = d_model / n_head, max_pos, norm_eps 1e-5, rope_theta 10000 without
 * scaling, untied embeddings, no BOS/EOS ids. */
void kiln_llm_config_init(kiln_llm_config *c, kiln_llm_arch arch, int n_layer, int d_model, int n_head, int n_kv_head,
                          int d_ff, int vocab, int max_pos);

/* A model of config c (validated: positive dims, an even head_dim, n_kv_head dividing n_head and equal
 * to it for GPT-2; else KILN_ERR_INVALID_ARGUMENT naming the config) with random weights from seed. Caller owns *out
 * (kiln_llm_model_free). */
kiln_status kiln_llm_model_random(const kiln_llm_config *c, uint64_t seed, kiln_llm_model **out);

/* The parameters of a model of config c, as kiln_llm_model_random makes it (embeddings, GPT-2's
 * position table, every layer's matrices, norms and biases, the final norm, lm_head unless tied). */
int64_t kiln_llm_config_params(const kiln_llm_config *c);

/* Named published shapes, for benchmarks with random weights (kiln bench --llm --random,
 * bench/llm_decode_bench.c): gpt2 (124M), gpt2-medium (355M), gpt2-large (774M), gpt2-xl (1.5B), all
 * with tied embeddings; llama3-8b (Llama-3-8B: 32 layers, d_model 4096, GQA 32/8, d_ff 14336, vocab
 * 128256, rope_theta 500000); qwen2.5-7b (28 layers, d_model 3584, GQA 28/4, d_ff 18944, vocab 152064,
 * q/k/v biases, rope_theta 1e6); gemma-7b (28 layers, d_model 3072, 16 heads of 256, d_ff 24576, vocab
 * 256000, GeGLU, scaled embeddings, 1 + w norms, tied); tiny-gpt2, tiny-llama and tiny-gemma (2
 * layers, d_model 128, head_dim 64 (tiny-gemma 256), vocab 512; for tests, on the CPU in milliseconds,
 * and on the GPU too). */
typedef struct kiln_llm_shape {
    const char *name;
    kiln_dtype dtype; /* the precision it is usually run in on the GPU (KILN_F16 or KILN_BF16) */
    kiln_llm_config cfg;
} kiln_llm_shape;

/* The shape called name; else KILN_ERR_INVALID_ARGUMENT "unknown shape 'x' (shapes: gpt2, ...)". */
kiln_status kiln_llm_shape_find(const char *name, kiln_llm_shape *out);
/* "gpt2, gpt2-medium, ..., tiny-gemma": every shape's name (static). */
const char *kiln_llm_shape_names(void);

#ifdef __cplusplus
}
#endif
#endif
