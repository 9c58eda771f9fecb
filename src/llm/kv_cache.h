/* kv_cache.h — the paged KV cache: fixed-size blocks of keys and values for every layer, handed out
 * to sequences through block tables (vLLM's PagedAttention layout). The cache never grows; the
 * scheduler admits and preempts sequences by its free-block count.
 *
 * Prefix caching (vLLM's automatic prefix caching): a full block can be published under a hash of the
 * tokens it holds and of its prefix (the parent block's hash). Blocks are reference-counted: several
 * sequences may share a published block, and when its last reference goes it stays cached (its keys
 * and values intact) on an LRU list, so that a later sequence with the same prefix takes it back
 * instead of recomputing it. Cached blocks count as free: a block is evicted (forgotten, least
 * recently released first) only when an allocation finds no never-published free block left. */
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
    kiln_dtype dtype; /* KILN_F32, KILN_F16, KILN_BF16 or KILN_F8E4M3FN (FP8: a value is stored as
                       * e4m3(x / scale) with its layer's and KV head's scale) */
    const float *scales; /* FP8 only: [n_layer][2][n_kv_head], the keys' scales then the values' (> 0,
                          * finite), copied at create; NULL: all 1.0 */
} kiln_kv_cache_config;

typedef struct kiln_kv_cache kiln_kv_cache;

/* Blocks that fit in budget_bytes for this model shape (0 if not even one). */
int kiln_kv_cache_blocks_for_budget(const kiln_kv_cache_config *shape, uint64_t budget_bytes);
/* Allocates the cache (all blocks free). Caller owns *out (kiln_kv_cache_free). */
kiln_status kiln_kv_cache_create(const kiln_kv_cache_config *cfg, kiln_kv_cache **out);
void kiln_kv_cache_free(kiln_kv_cache *kv); /* accepts NULL */
const kiln_kv_cache_config *kiln_kv_cache_get_config(const kiln_kv_cache *kv);

/* Takes a free block (reference count 1): a never-published one, else the least recently released
 * cached one, which is evicted (unpublished); -1 when none is free. */
int kiln_kv_cache_alloc_block(kiln_kv_cache *kv);
/* Drops one reference to a taken block (releasing a block that is not taken is a bug and aborts). At
 * zero references a published block becomes cached (the most recently released), others free. */
void kiln_kv_cache_release_block(kiln_kv_cache *kv, int block);
/* Blocks that alloc can hand out: never-published free ones plus cached ones. */
int kiln_kv_cache_free_blocks(const kiln_kv_cache *kv);
/* Whether block is a valid id with at least one reference (the forward refuses blocks that are not). */
bool kiln_kv_cache_block_taken(const kiln_kv_cache *kv, int block);

/* The hash of a full block of block_size tokens after the prefix whose last block hashed to parent
 * (0 for the first block of a sequence). */
uint64_t kiln_kv_block_hash(uint64_t parent, const int32_t *tokens, int block_size);
/* The published block holding `tokens` after prefix `parent` (hash = kiln_kv_block_hash(parent,
 * tokens)), or -1. The tokens and parent are compared, so a hash collision is never a hit. Takes no
 * reference: kiln_kv_cache_share_block does. */
int kiln_kv_cache_lookup(const kiln_kv_cache *kv, uint64_t hash, uint64_t parent, const int32_t *tokens);
/* Whether block is cached with zero references (taking it back uses up one free block). */
bool kiln_kv_cache_block_cached_idle(const kiln_kv_cache *kv, int block);
/* Takes one more reference to a block that lookup returned (taken, or cached: it leaves the LRU). */
void kiln_kv_cache_share_block(kiln_kv_cache *kv, int block);
/* Publishes a taken block whose block_size tokens are all written, under hash (from parent and
 * tokens, as for lookup). A no-op when that hash is already published (by another block: this one
 * stays private and is freed on release) or the block already is. */
void kiln_kv_cache_publish_block(kiln_kv_cache *kv, int block, uint64_t hash, uint64_t parent, const int32_t *tokens);
/* Published blocks (taken or cached). */
int kiln_kv_cache_published_blocks(const kiln_kv_cache *kv);

/* An FP8 cache's scales of one layer: [2][n_kv_head] (keys', then values'); NULL for other dtypes. */
const float *kiln_kv_cache_scales(const kiln_kv_cache *kv, int layer);

/* Keys / values of one block of one layer: [n_kv_head][block_size][head_dim] elements of cfg.dtype. */
void *kiln_kv_cache_keys(kiln_kv_cache *kv, int layer, int block);
void *kiln_kv_cache_values(kiln_kv_cache *kv, int layer, int block);

#ifdef __cplusplus
}
#endif
#endif
