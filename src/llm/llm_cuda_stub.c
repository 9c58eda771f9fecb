/* llm_cuda_stub.c — llm_cuda.h in a build without the cuda backend: creation fails with
 * KILN_ERR_UNSUPPORTED, and since no model or cache can exist, the other calls are never reached with
 * one (they return neutral values). With the backend, src/llm/cuda/ implements the header instead. */
#ifndef KILN_HAVE_CUDA
#include "llm/llm_cuda.h"

#include "core/status.h"

#include <stdio.h>

#define NO_CUDA "built without the cuda backend"

void kiln_llm_cuda_options_default(kiln_llm_cuda_options *o) {
    o->device = 0;
    o->max_tokens = 2048;
    o->max_seqs = 256;
    o->max_context = 4096;
    o->gemv_max_tokens = 8;
    o->timing_cache = NULL;
}

kiln_status kiln_llm_cuda_device_check(int device, char *desc, size_t cap) {
    if (cap) snprintf(desc, cap, NO_CUDA);
    return kiln_error(KILN_ERR_UNSUPPORTED, NO_CUDA);
}

kiln_status kiln_llm_cuda_create(const kiln_llm_model *m, kiln_dtype dtype, const kiln_llm_cuda_options *o,
                                 kiln_llm_cuda **out) {
    *out = NULL;
    return kiln_error(KILN_ERR_UNSUPPORTED, NO_CUDA);
}

kiln_status kiln_llm_cuda_create_random(const kiln_llm_config *c, kiln_dtype dtype, const kiln_llm_cuda_options *o,
                                        uint64_t seed, kiln_llm_cuda **out) {
    *out = NULL;
    return kiln_error(KILN_ERR_UNSUPPORTED, NO_CUDA);
}

void kiln_llm_cuda_free(kiln_llm_cuda *g) {}
const kiln_llm_config *kiln_llm_cuda_config(const kiln_llm_cuda *g) { return NULL; }
uint64_t kiln_llm_cuda_weight_bytes(const kiln_llm_cuda *g) { return 0; }
const char *kiln_llm_cuda_decode_path(const kiln_llm_cuda *g) { return ""; }
int kiln_llm_cuda_gemv_picks(const kiln_llm_cuda *g, int i, char *line, size_t cap) { return 0; }

kiln_status kiln_llm_cuda_kv_create(kiln_llm_cuda *g, const kiln_llm_cuda_kv_options *o, kiln_llm_cuda_kv **out) {
    *out = NULL;
    return kiln_error(KILN_ERR_UNSUPPORTED, NO_CUDA);
}

void kiln_llm_cuda_kv_free(kiln_llm_cuda_kv *kv) {}
int kiln_llm_cuda_kv_blocks(const kiln_llm_cuda_kv *kv) { return 0; }
int kiln_llm_cuda_kv_block_size(const kiln_llm_cuda_kv *kv) { return 0; }
int kiln_llm_cuda_kv_alloc_block(kiln_llm_cuda_kv *kv) { return -1; }
void kiln_llm_cuda_kv_release_block(kiln_llm_cuda_kv *kv, int block) { KILN_ASSERT(!"no cuda KV cache exists"); }
int kiln_llm_cuda_kv_free_blocks(const kiln_llm_cuda_kv *kv) { return 0; }
bool kiln_llm_cuda_kv_block_taken(const kiln_llm_cuda_kv *kv, int block) { return false; }

kiln_status kiln_llm_cuda_forward(kiln_llm_cuda *g, kiln_llm_cuda_kv *kv, const kiln_llm_batch *b, float *logits,
                                  int32_t *greedy) {
    return kiln_error(KILN_ERR_UNSUPPORTED, NO_CUDA);
}

const float *kiln_llm_cuda_device_logits(const kiln_llm_cuda *g) { return NULL; }

kiln_status kiln_llm_cuda_copy_logits(kiln_llm_cuda *g, int row0, int n_rows, float *host) {
    return kiln_error(KILN_ERR_UNSUPPORTED, NO_CUDA);
}

kiln_status kiln_llm_cuda_sampler_create(int device, int vocab, int max_rows, int max_history,
                                         kiln_llm_cuda_sampler **out) {
    *out = NULL;
    return kiln_error(KILN_ERR_UNSUPPORTED, NO_CUDA);
}

void kiln_llm_cuda_sampler_free(kiln_llm_cuda_sampler *s) {}

kiln_status kiln_llm_cuda_sample(kiln_llm_cuda_sampler *s, const kiln_llm_cuda *g, const float *host_logits,
                                 int n_rows, const kiln_llm_cuda_sample_row *rows, int32_t *tokens) {
    return kiln_error(KILN_ERR_UNSUPPORTED, NO_CUDA);
}
#endif
