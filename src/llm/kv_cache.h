/* kv_cache.h — the paged KV cache: fixed-size blocks of keys and values for every layer, handed out
 * to sequences through block tables (vLLM's PagedAttention layout). The cache never grows; the
 * scheduler admits and preempts sequences by its free-block count. */
#ifndef KILN_LLM_KV_CACHE_H
#define KILN_LLM_KV_CACHE_H

#include "kiln/kiln.h"

#include <stdbool.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct kiln_kv_cache_config {
    int n_layer, n_kv_head, head_dim;
    int block_size;   /* tokens per block (16 unless told) */
    int n_blocks;     /* blocks in the cache */
    kiln_dtype dtype; /* KILN_F32, KILN_F16 or KILN_BF16 */
} kiln_kv_cache_config;

typedef struct kiln_kv_cache kiln_kv_cache;

/* Blocks that fit in budget_bytes for this model shape (0 if not even one). */
int kiln_kv_cache_blocks_for_budget(const kiln_kv_cache_config *shape, uint64_t budget_bytes);
/* Allocates the cache (all blocks free). Caller owns *out (kiln_kv_cache_free). */
kiln_status kiln_kv_cache_create(const kiln_kv_cache_config *cfg, kiln_kv_cache **out);
void kiln_kv_cache_free(kiln_kv_cache *kv); /* accepts NULL */
const kiln_kv_cache_config *kiln_kv_cache_get_config(const kiln_kv_cache *kv);

/* Takes a free block; -1 when none is free. */
int kiln_kv_cache_alloc_block(kiln_kv_cache *kv);
/* Returns a block taken by alloc (freeing a free block is a bug and aborts). */
void kiln_kv_cache_release_block(kiln_kv_cache *kv, int block);
int kiln_kv_cache_free_blocks(const kiln_kv_cache *kv);
/* Whether block is a valid id currently taken by alloc (the forward refuses blocks that are not). */
bool kiln_kv_cache_block_taken(const kiln_kv_cache *kv, int block);

/* Keys / values of one block of one layer: [n_kv_head][block_size][head_dim] elements of cfg.dtype. */
void *kiln_kv_cache_keys(kiln_kv_cache *kv, int layer, int block);
void *kiln_kv_cache_values(kiln_kv_cache *kv, int layer, int block);

#ifdef __cplusplus
}
#endif
#endif
