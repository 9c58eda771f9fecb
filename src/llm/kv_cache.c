/* kv_cache.c — the paged KV cache of kv_cache.h: one allocation laid out
 * [layer][keys | values][block][n_kv_head][block_size][head_dim], a reference count per block (which
 * catches a block released twice), a stack of never-published free block ids, and the prefix cache:
 * published blocks chained in hash buckets, with their tokens and parent hash to confirm a hit, and
 * the idle ones on a doubly linked LRU list (evicted from its head). */
#include "llm/kv_cache.h"

#include "core/ckd.h"
#include "core/status.h"

#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct kiln_kv_cache {
    kiln_kv_cache_config cfg;
    unsigned char *data;
    float *scales;      /* FP8: [n_layer][2][n_kv_head]; else NULL */
    size_t block_bytes; /* one block of keys (or values) of one layer */
    int *free_stack;    /* [n_blocks] never-published free blocks; the top is free_stack[n_free - 1] */
    int n_free;
    int *refs;          /* [n_blocks] references; 0 = free or cached */
    /* the prefix cache */
    bool *published;     /* [n_blocks] */
    uint64_t *hash, *parent; /* [n_blocks] of published blocks */
    int32_t *tokens;     /* [n_blocks * block_size] of published blocks */
    int *bucket;         /* [n_buckets] first published block of each hash bucket, -1 none */
    int *chain;          /* [n_blocks] next published block in the same bucket */
    int n_buckets;       /* a power of two */
    int *lru_prev, *lru_next; /* [n_blocks] the idle cached blocks, head = least recently released */
    int lru_head, lru_tail, n_cached, n_published;
};

/* Bytes of one block's keys or values in one layer, or 0 for an invalid shape. */
static uint64_t block_bytes(const kiln_kv_cache_config *c) {
    if (c->n_layer <= 0 || c->n_kv_head <= 0 || c->head_dim <= 0 || c->block_size <= 0) return 0;
    if (c->dtype != KILN_F32 && c->dtype != KILN_F16 && c->dtype != KILN_BF16 && c->dtype != KILN_F8E4M3FN) return 0;
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
                          "dtype %s; dims must be positive and dtype F32, F16, BF16 or F8E4M3FN)",
                          cfg->n_layer, cfg->n_kv_head, cfg->head_dim, cfg->block_size, cfg->n_blocks,
                          kiln_dtype_name(cfg->dtype));
    uint64_t total = bb * 2 * (uint64_t)cfg->n_layer, bytes;
    if (!kiln_mul_u64_ok(total, (uint64_t)cfg->n_blocks, &bytes) || bytes > host_memory_bytes())
        return kiln_error(KILN_ERR_OUT_OF_MEMORY,
                          "KV cache: %d blocks of %llu bytes need %.1f GiB, more than this host's %.1f GiB of memory",
                          cfg->n_blocks, (unsigned long long)total, (double)total * cfg->n_blocks / 1073741824.0,
                          (double)host_memory_bytes() / 1073741824.0);
    const size_t n_scales = (size_t)cfg->n_layer * 2 * (size_t)cfg->n_kv_head;
    for (size_t i = 0; cfg->dtype == KILN_F8E4M3FN && cfg->scales && i < n_scales; i++)
        if (!(cfg->scales[i] > 0.0f && isfinite(cfg->scales[i])))
            return kiln_error(KILN_ERR_INVALID_ARGUMENT, "KV cache: FP8 scale %zu is %g (scales must be positive and "
                              "finite)", i, (double)cfg->scales[i]);
    kiln_kv_cache *kv = calloc(1, sizeof *kv);
    if (kv) {
        kv->cfg = *cfg;
        kv->cfg.scales = NULL;
        kv->block_bytes = (size_t)bb;
        kv->data = calloc((size_t)bytes, 1);
        size_t n = (size_t)cfg->n_blocks;
        kv->n_buckets = 1;
        while (kv->n_buckets < cfg->n_blocks && kv->n_buckets < (1 << 30)) kv->n_buckets *= 2;
        kv->free_stack = malloc(n * sizeof *kv->free_stack);
        kv->refs = calloc(n, sizeof *kv->refs);
        kv->published = calloc(n, sizeof *kv->published);
        kv->hash = malloc(n * sizeof *kv->hash);
        kv->parent = malloc(n * sizeof *kv->parent);
        kv->tokens = malloc(n * (size_t)cfg->block_size * sizeof *kv->tokens);
        kv->bucket = malloc((size_t)kv->n_buckets * sizeof *kv->bucket);
        kv->chain = malloc(n * sizeof *kv->chain);
        kv->lru_prev = malloc(n * sizeof *kv->lru_prev);
        kv->lru_next = malloc(n * sizeof *kv->lru_next);
        if (cfg->dtype == KILN_F8E4M3FN) kv->scales = malloc(n_scales * sizeof *kv->scales);
    }
    if (!kv || !kv->data || !kv->free_stack || !kv->refs || !kv->published || !kv->hash || !kv->parent || !kv->tokens ||
        !kv->bucket || !kv->chain || !kv->lru_prev || !kv->lru_next || (cfg->dtype == KILN_F8E4M3FN && !kv->scales)) {
        kiln_kv_cache_free(kv);
        return kiln_error(KILN_ERR_OUT_OF_MEMORY, "KV cache: out of memory for %d blocks of %llu bytes", cfg->n_blocks,
                          (unsigned long long)total);
    }
    for (size_t i = 0; kv->scales && i < n_scales; i++) kv->scales[i] = cfg->scales ? cfg->scales[i] : 1.0f;
    kv->cfg.scales = kv->scales;
    /* lowest ids on top, so a fresh cache hands out 0, 1, 2, ... */
    for (int i = 0; i < cfg->n_blocks; i++) kv->free_stack[i] = cfg->n_blocks - 1 - i;
    kv->n_free = cfg->n_blocks;
    for (int i = 0; i < kv->n_buckets; i++) kv->bucket[i] = -1;
    kv->lru_head = kv->lru_tail = -1;
    *out = kv;
    return KILN_OK;
}

void kiln_kv_cache_free(kiln_kv_cache *kv) {
    if (!kv) return;
    free(kv->data);
    free(kv->scales);
    free(kv->free_stack);
    free(kv->refs);
    free(kv->published);
    free(kv->hash);
    free(kv->parent);
    free(kv->tokens);
    free(kv->bucket);
    free(kv->chain);
    free(kv->lru_prev);
    free(kv->lru_next);
    free(kv);
}

const kiln_kv_cache_config *kiln_kv_cache_get_config(const kiln_kv_cache *kv) { return &kv->cfg; }

const float *kiln_kv_cache_scales(const kiln_kv_cache *kv, int layer) {
    return kv->scales ? kv->scales + (size_t)layer * 2 * (size_t)kv->cfg.n_kv_head : NULL;
}

static int bucket_of(const kiln_kv_cache *kv, uint64_t hash) { return (int)(hash & (uint64_t)(kv->n_buckets - 1)); }

static void lru_remove(kiln_kv_cache *kv, int b) {
    int p = kv->lru_prev[b], n = kv->lru_next[b];
    if (p >= 0) kv->lru_next[p] = n;
    else kv->lru_head = n;
    if (n >= 0) kv->lru_prev[n] = p;
    else kv->lru_tail = p;
    kv->n_cached--;
}

static void lru_append(kiln_kv_cache *kv, int b) {
    kv->lru_prev[b] = kv->lru_tail;
    kv->lru_next[b] = -1;
    if (kv->lru_tail >= 0) kv->lru_next[kv->lru_tail] = b;
    else kv->lru_head = b;
    kv->lru_tail = b;
    kv->n_cached++;
}

/* Takes published block b out of its hash bucket. */
static void unpublish(kiln_kv_cache *kv, int b) {
    int *link = &kv->bucket[bucket_of(kv, kv->hash[b])];
    while (*link != b) link = &kv->chain[*link];
    *link = kv->chain[b];
    kv->published[b] = false;
    kv->n_published--;
}

int kiln_kv_cache_alloc_block(kiln_kv_cache *kv) {
    int b;
    if (kv->n_free) {
        b = kv->free_stack[--kv->n_free];
    } else if (kv->lru_head >= 0) {
        b = kv->lru_head;
        lru_remove(kv, b);
        unpublish(kv, b);
    } else {
        return -1;
    }
    kv->refs[b] = 1;
    return b;
}

void kiln_kv_cache_release_block(kiln_kv_cache *kv, int block) {
    KILN_ASSERT(block >= 0 && block < kv->cfg.n_blocks && kv->refs[block] > 0);
    if (--kv->refs[block]) return;
    if (kv->published[block]) lru_append(kv, block);
    else kv->free_stack[kv->n_free++] = block;
}

int kiln_kv_cache_free_blocks(const kiln_kv_cache *kv) { return kv->n_free + kv->n_cached; }

bool kiln_kv_cache_block_taken(const kiln_kv_cache *kv, int block) {
    return block >= 0 && block < kv->cfg.n_blocks && kv->refs[block] > 0;
}

static uint64_t mix64(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

uint64_t kiln_kv_block_hash(uint64_t parent, const int32_t *tokens, int block_size) {
    uint64_t h = mix64(parent ^ 0x9E3779B97F4A7C15ull);
    for (int i = 0; i < block_size; i++) h = mix64(h ^ ((uint64_t)(uint32_t)tokens[i] + 0x632BE59BD9B4E019ull));
    return h;
}

int kiln_kv_cache_lookup(const kiln_kv_cache *kv, uint64_t hash, uint64_t parent, const int32_t *tokens) {
    const size_t bs = (size_t)kv->cfg.block_size;
    for (int b = kv->bucket[bucket_of(kv, hash)]; b >= 0; b = kv->chain[b])
        if (kv->hash[b] == hash && kv->parent[b] == parent && !memcmp(kv->tokens + (size_t)b * bs, tokens, bs * sizeof *tokens))
            return b;
    return -1;
}

bool kiln_kv_cache_block_cached_idle(const kiln_kv_cache *kv, int block) {
    return block >= 0 && block < kv->cfg.n_blocks && kv->published[block] && !kv->refs[block];
}

void kiln_kv_cache_share_block(kiln_kv_cache *kv, int block) {
    KILN_ASSERT(block >= 0 && block < kv->cfg.n_blocks && (kv->refs[block] > 0 || kv->published[block]));
    if (!kv->refs[block]++) lru_remove(kv, block);
}

void kiln_kv_cache_publish_block(kiln_kv_cache *kv, int block, uint64_t hash, uint64_t parent, const int32_t *tokens) {
    KILN_ASSERT(block >= 0 && block < kv->cfg.n_blocks && kv->refs[block] > 0);
    if (kv->published[block] || kiln_kv_cache_lookup(kv, hash, parent, tokens) >= 0) return;
    const size_t bs = (size_t)kv->cfg.block_size;
    memcpy(kv->tokens + (size_t)block * bs, tokens, bs * sizeof *tokens);
    kv->hash[block] = hash;
    kv->parent[block] = parent;
    int *head = &kv->bucket[bucket_of(kv, hash)];
    kv->chain[block] = *head;
    *head = block;
    kv->published[block] = true;
    kv->n_published++;
}

int kiln_kv_cache_published_blocks(const kiln_kv_cache *kv) { return kv->n_published; }

/* Start of keys (which 0) or values (1) of block in layer. */
static void *block_ptr(kiln_kv_cache *kv, int layer, int block, int which) {
    KILN_ASSERT(layer >= 0 && layer < kv->cfg.n_layer && block >= 0 && block < kv->cfg.n_blocks);
    size_t index = ((size_t)layer * 2 + (size_t)which) * (size_t)kv->cfg.n_blocks + (size_t)block;
    return kv->data + index * kv->block_bytes;
}

void *kiln_kv_cache_keys(kiln_kv_cache *kv, int layer, int block) { return block_ptr(kv, layer, block, 0); }

void *kiln_kv_cache_values(kiln_kv_cache *kv, int layer, int block) { return block_ptr(kv, layer, block, 1); }
