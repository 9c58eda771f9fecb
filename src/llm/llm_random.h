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

/* Fills the fields a config.json would, for arch and the given shape: head_dim = d_model / n_head,
 * max_pos, norm_eps 1e-5, rope_theta 10000 without scaling, untied embeddings, no BOS/EOS ids. */
void kiln_llm_config_init(kiln_llm_config *c, kiln_llm_arch arch, int n_layer, int d_model, int n_head, int n_kv_head,
                          int d_ff, int vocab, int max_pos);

/* A model of config c (validated: positive dims, an even head_dim, n_kv_head dividing n_head and equal
 * to it for GPT-2; else KILN_ERR_INVALID_ARGUMENT naming the config) with random weights from seed. Caller owns *out
 * (kiln_llm_model_free). */
kiln_status kiln_llm_model_random(const kiln_llm_config *c, uint64_t seed, kiln_llm_model **out);

#ifdef __cplusplus
}
#endif
#endif
