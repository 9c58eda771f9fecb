/* llm_runner.c — the forward step that kiln generate and kiln bench --llm drive the scheduler with: the
 * CPU one (kiln_llm_forward over a host KV cache) or llm_cuda.h's (a device KV cache). The scheduler hands out
 * blocks of a host kiln_kv_cache; on the GPU that cache is bookkeeping only (one float per token
 * slot), and each host block is mapped to a device block when a step first uses it and given back
 * once the scheduler has released it. */
#include "llm/llm_runner.h"

#include "core/status.h"
#include "llm/llm_cuda.h"
#include "llm/llm_random.h"

#include <stdlib.h>
#include <string.h>

struct llm_runner {
    const kiln_llm_model *m; /* target cpu */
    kiln_llm_model *owned;   /* the random host model (llm_runner_create_random on the CPU) */
    kiln_llm_config cfg;
    kiln_llm_cuda *g;       /* target cuda */
    kiln_llm_cuda_kv *gkv;
    int *map;               /* [n_blocks] host block -> device block, -1 none */
    int n_blocks;
    int32_t *table;         /* the remapped block table of one step */
    size_t table_cap;
    kiln_dtype dtype;
};

/* The device check and the options of ro; 0 when ro->target is not cuda. */
static kiln_status cuda_options(const llm_runner_options *ro, kiln_llm_cuda_options *o, char *dev, size_t cap) {
    if (kiln_llm_cuda_device_check(ro->device, dev, cap) != KILN_OK)
        return kiln_error(KILN_ERR_UNSUPPORTED, "--target cuda is not available: %s", dev);
    kiln_llm_cuda_options_default(o);
    o->device = ro->device;
    o->max_seqs = ro->max_seqs;
    o->max_tokens = ro->max_tokens;
    o->max_context = ro->max_context;
    return KILN_OK;
}

kiln_status llm_runner_create(const kiln_llm_model *m, const llm_runner_options *ro, char *desc, size_t cap,
                              llm_runner **out) {
    llm_runner *r = calloc(1, sizeof *r);
    if (!r) return kiln_error(KILN_ERR_OUT_OF_MEMORY, "out of memory");
    r->m = m;
    r->cfg = *kiln_llm_model_config(m);
    *out = r;
    if (strcmp(ro->target, "cuda")) {
        snprintf(desc, cap, "CPU forward (fp32, OpenBLAS)");
        return KILN_OK;
    }
    char dev[192];
    kiln_llm_cuda_options o;
    KILN_TRY(cuda_options(ro, &o, dev, sizeof dev));
    r->dtype = ro->bf16 ? KILN_BF16 : KILN_F16;
    KILN_TRY(kiln_llm_cuda_create(m, r->dtype, &o, &r->g));
    snprintf(desc, cap, "CUDA forward (%s): %s", r->dtype == KILN_BF16 ? "bf16" : "fp16", dev);
    return KILN_OK;
}

kiln_status llm_runner_create_random(const kiln_llm_config *c, uint64_t seed, const llm_runner_options *ro,
                                     char *desc, size_t cap, llm_runner **out) {
    llm_runner *r = calloc(1, sizeof *r);
    if (!r) return kiln_error(KILN_ERR_OUT_OF_MEMORY, "out of memory");
    r->cfg = *c;
    *out = r;
    if (strcmp(ro->target, "cuda")) {
        KILN_TRY(kiln_llm_model_random(c, seed, &r->owned));
        r->m = r->owned;
        snprintf(desc, cap, "CPU forward (fp32, OpenBLAS), random weights");
        return KILN_OK;
    }
    char dev[192];
    kiln_llm_cuda_options o;
    KILN_TRY(cuda_options(ro, &o, dev, sizeof dev));
    r->dtype = ro->bf16 ? KILN_BF16 : KILN_F16;
    KILN_TRY(kiln_llm_cuda_create_random(c, r->dtype, &o, seed, &r->g));
    snprintf(desc, cap, "CUDA forward (%s), random weights made on the device: %s", r->dtype == KILN_BF16 ? "bf16" : "fp16",
             dev);
    return KILN_OK;
}

const kiln_llm_config *llm_runner_config(const llm_runner *r) { return &r->cfg; }

void llm_runner_free(llm_runner *r) {
    if (!r) return;
    kiln_llm_cuda_kv_free(r->gkv);
    kiln_llm_cuda_free(r->g);
    kiln_llm_model_free(r->owned);
    free(r->map);
    free(r->table);
    free(r);
}

kiln_status llm_runner_make_cache(llm_runner *r, int n_blocks, int block_size, kiln_kv_cache **kv) {
    const kiln_llm_config *c = &r->cfg;
    kiln_kv_cache_config kc = {.n_layer = c->n_layer, .n_kv_head = c->n_kv_head, .head_dim = c->head_dim,
                               .block_size = block_size, .n_blocks = n_blocks, .dtype = KILN_F32};
    if (!r->g) return kiln_kv_cache_create(&kc, kv);
    kiln_llm_cuda_kv_free(r->gkv);
    r->gkv = NULL;
    uint64_t block_bytes = 2ull * (uint64_t)c->n_layer * (uint64_t)c->n_kv_head * (uint64_t)block_size * (uint64_t)c->head_dim * 2;
    kiln_llm_cuda_kv_options ko = {.block_size = block_size, .mem_fraction = 0.9, .max_bytes = block_bytes * (uint64_t)(n_blocks + 1)};
    KILN_TRY(kiln_llm_cuda_kv_create(r->g, &ko, &r->gkv));
    kc = (kiln_kv_cache_config){.n_layer = 1, .n_kv_head = 1, .head_dim = 1, .block_size = block_size,
                                .n_blocks = kiln_llm_cuda_kv_blocks(r->gkv), .dtype = KILN_F32};
    free(r->map);
    r->n_blocks = kc.n_blocks;
    if (!(r->map = malloc((size_t)kc.n_blocks * sizeof *r->map))) return kiln_error(KILN_ERR_OUT_OF_MEMORY, "out of memory");
    for (int i = 0; i < kc.n_blocks; i++) r->map[i] = -1;
    return kiln_kv_cache_create(&kc, kv);
}

/* The batch with its block table moved to device blocks (taking new ones, giving back released ones). */
static kiln_status remap(llm_runner *r, kiln_kv_cache *kv, const kiln_llm_batch *b, kiln_llm_batch *out) {
    for (int i = 0; i < r->n_blocks; i++)
        if (r->map[i] >= 0 && !kiln_kv_cache_block_taken(kv, i)) {
            kiln_llm_cuda_kv_release_block(r->gkv, r->map[i]);
            r->map[i] = -1;
        }
    size_t n = (size_t)b->n_seqs * (size_t)b->max_blocks_per_seq;
    if (n > r->table_cap) {
        int32_t *t = realloc(r->table, n * sizeof *t);
        if (!t) return kiln_error(KILN_ERR_OUT_OF_MEMORY, "out of memory");
        r->table = t;
        r->table_cap = n;
    }
    const int bs = kiln_llm_cuda_kv_block_size(r->gkv);
    for (int s = 0; s < b->n_seqs; s++)
        for (int j = 0; j < b->max_blocks_per_seq; j++) {
            size_t k = (size_t)s * (size_t)b->max_blocks_per_seq + (size_t)j;
            int host = b->block_table[k];
            r->table[k] = host;
            if (j >= (b->ctx_len[s] + bs - 1) / bs) continue;
            if (host < 0 || host >= r->n_blocks)
                return kiln_error(KILN_ERR_INVALID_ARGUMENT, "block %d is not a block of the cache", host);
            if (r->map[host] < 0 && (r->map[host] = kiln_llm_cuda_kv_alloc_block(r->gkv)) < 0)
                return kiln_error(KILN_ERR_INTERNAL, "the device KV cache has fewer free blocks than the host one");
            r->table[k] = r->map[host];
        }
    *out = *b;
    out->block_table = r->table;
    return KILN_OK;
}

kiln_status llm_runner_forward(void *ctx, kiln_kv_cache *kv, const kiln_llm_batch *b, float *logits) {
    llm_runner *r = ctx;
    if (!r->g) return kiln_llm_forward(r->m, kv, b, logits);
    kiln_llm_batch db;
    KILN_TRY(remap(r, kv, b, &db));
    return kiln_llm_cuda_forward(r->g, r->gkv, &db, logits, NULL);
}
