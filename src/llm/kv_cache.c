/* kv_cache.c — the paged KV cache of kv_cache.h: one allocation laid out
 * [layer][keys | values][block][n_kv_head][block_size][head_dim], a stack of free block ids, and a
 * per-block flag that catches a block released twice. */
#include "llm/kv_cache.h"

#include "core/ckd.h"
#include "core/status.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct kiln_kv_cache {
    kiln_kv_cache_config cfg;
    unsigned char *data;
    size_t block_bytes; /* one block of keys (or values) of one layer */
    int *free_stack;    /* [n_blocks]; the top is free_stack[n_free - 1] */
    int n_free;
    bool *taken;        /* [n_blocks] */
};

/* Bytes of one block's keys or values in one layer, or 0 for an invalid shape. */
static uint64_t block_bytes(const kiln_kv_cache_config *c) {
    if (c->n_layer <= 0 || c->n_kv_head <= 0 || c->head_dim <= 0 || c->block_size <= 0) return 0;
    if (c->dtype != KILN_F32 && c->dtype != KILN_F16 && c->dtype != KILN_BF16) return 0;
    return (uint64_t)c->n_kv_head * (uint64_t)c->block_size * (uint64_t)c->head_dim * kiln_dtype_size(c->dtype);
}

int kiln_kv_cache_blocks_for_budget(const kiln_kv_cache_config *shape, uint64_t budget_bytes) {
    uint64_t per_block = block_bytes(shape) * 2 * (uint64_t)(shape->n_layer > 0 ? shape->n_layer : 0);
    if (!per_block) return 0;
    uint64_t n = budget_bytes / per_block;
    return n > INT32_MAX ? INT32_MAX : (int)n;
}

/* The host's physical memory: no cache larger than it can be used (an overcommitting calloc may still
 * succeed for it), and asking for one is a mistake to report, not to try. */
static uint64_t host_memory_bytes(void) {
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    return pages > 0 && page > 0 ? (uint64_t)pages * (uint64_t)page : UINT64_MAX;
}

kiln_status kiln_kv_cache_create(const kiln_kv_cache_config *cfg, kiln_kv_cache **out) {
    *out = NULL;
    uint64_t bb = block_bytes(cfg);
    if (!bb || cfg->n_blocks <= 0)
        return kiln_error(KILN_ERR_INVALID_ARGUMENT,
                          "KV cache: invalid shape (n_layer %d, n_kv_head %d, head_dim %d, block_size %d, n_blocks %d, "
                          "dtype %s; dims must be positive and dtype F32, F16 or BF16)",
                          cfg->n_layer, cfg->n_kv_head, cfg->head_dim, cfg->block_size, cfg->n_blocks,
                          kiln_dtype_name(cfg->dtype));
    uint64_t total = bb * 2 * (uint64_t)cfg->n_layer, bytes;
    if (!kiln_mul_u64_ok(total, (uint64_t)cfg->n_blocks, &bytes) || bytes > host_memory_bytes())
        return kiln_error(KILN_ERR_OUT_OF_MEMORY,
                          "KV cache: %d blocks of %llu bytes need %.1f GiB, more than this host's %.1f GiB of memory",
                          cfg->n_blocks, (unsigned long long)total, (double)total * cfg->n_blocks / 1073741824.0,
                          (double)host_memory_bytes() / 1073741824.0);
    kiln_kv_cache *kv = calloc(1, sizeof *kv);
    if (kv) {
        kv->cfg = *cfg;
        kv->block_bytes = (size_t)bb;
        kv->data = calloc((size_t)bytes, 1);
        kv->free_stack = malloc((size_t)cfg->n_blocks * sizeof *kv->free_stack);
        kv->taken = calloc((size_t)cfg->n_blocks, sizeof *kv->taken);
    }
    if (!kv || !kv->data || !kv->free_stack || !kv->taken) {
        kiln_kv_cache_free(kv);
        return kiln_error(KILN_ERR_OUT_OF_MEMORY, "KV cache: out of memory for %d blocks of %llu bytes", cfg->n_blocks,
                          (unsigned long long)total);
    }
    /* lowest ids on top, so a fresh cache hands out 0, 1, 2, ... */
    for (int i = 0; i < cfg->n_blocks; i++) kv->free_stack[i] = cfg->n_blocks - 1 - i;
    kv->n_free = cfg->n_blocks;
    *out = kv;
    return KILN_OK;
}

void kiln_kv_cache_free(kiln_kv_cache *kv) {
    if (!kv) return;
    free(kv->data);
    free(kv->free_stack);
    free(kv->taken);
    free(kv);
}

const kiln_kv_cache_config *kiln_kv_cache_get_config(const kiln_kv_cache *kv) { return &kv->cfg; }

int kiln_kv_cache_alloc_block(kiln_kv_cache *kv) {
    if (!kv->n_free) return -1;
    int b = kv->free_stack[--kv->n_free];
    kv->taken[b] = true;
    return b;
}

void kiln_kv_cache_release_block(kiln_kv_cache *kv, int block) {
    KILN_ASSERT(block >= 0 && block < kv->cfg.n_blocks && kv->taken[block]);
    kv->taken[block] = false;
    kv->free_stack[kv->n_free++] = block;
}

int kiln_kv_cache_free_blocks(const kiln_kv_cache *kv) { return kv->n_free; }

bool kiln_kv_cache_block_taken(const kiln_kv_cache *kv, int block) {
    return block >= 0 && block < kv->cfg.n_blocks && kv->taken[block];
}

/* Start of keys (which 0) or values (1) of block in layer. */
static void *block_ptr(kiln_kv_cache *kv, int layer, int block, int which) {
    KILN_ASSERT(layer >= 0 && layer < kv->cfg.n_layer && block >= 0 && block < kv->cfg.n_blocks);
    size_t index = ((size_t)layer * 2 + (size_t)which) * (size_t)kv->cfg.n_blocks + (size_t)block;
    return kv->data + index * kv->block_bytes;
}

void *kiln_kv_cache_keys(kiln_kv_cache *kv, int layer, int block) { return block_ptr(kv, layer, block, 0); }

void *kiln_kv_cache_values(kiln_kv_cache *kv, int layer, int block) { return block_ptr(kv, layer, block, 1); }
