/* scheduler_prefix.c — the scheduler's side of prefix caching (kv_cache.h): when a waiting request is
 * admitted, the longest run of its full blocks already cached (chained by hash from its first token)
 * is shared instead of recomputed, always leaving at least its last token to compute (its logits are
 * needed); after each forward step, the request's newly completed blocks are published for later
 * requests. Requests keep the hash chain of their full blocks, extended as tokens arrive. */
#include "llm/scheduler_internal.h"

/* The hash of r's block j (its tokens [j * block_size, (j + 1) * block_size) are all known). */
static uint64_t block_hash(const kiln_scheduler *s, sched_req *r, int j) {
    for (; r->n_hashed <= j; r->n_hashed++) {
        const uint64_t parent = r->n_hashed ? r->hashes[r->n_hashed - 1] : 0;
        r->hashes[r->n_hashed] = kiln_kv_block_hash(parent, r->tokens + (size_t)r->n_hashed * s->block_size, s->block_size);
    }
    return r->hashes[j];
}

int sched_prefix_match(kiln_scheduler *s, sched_req *r, int *idle) {
    *idle = 0;
    if (s->cfg.no_prefix_cache) return 0;
    const int most = (r->n_tokens - 1) / s->block_size; /* the last token is always computed */
    int hit = 0;
    for (; hit < most; hit++) {
        const uint64_t parent = hit ? r->hashes[hit - 1] : 0;
        int b = kiln_kv_cache_lookup(s->cfg.kv, block_hash(s, r, hit), parent, r->tokens + (size_t)hit * s->block_size);
        if (b < 0) break;
        r->blocks[hit] = b;
        *idle += kiln_kv_cache_block_cached_idle(s->cfg.kv, b);
    }
    return hit;
}

void sched_prefix_take(kiln_scheduler *s, sched_req *r, int hit) {
    for (int j = 0; j < hit; j++) kiln_kv_cache_share_block(s->cfg.kv, r->blocks[j]);
    r->n_blocks = r->n_published = hit;
    r->n_computed = r->draft_computed = hit * s->block_size; /* a published block holds both models' */
    if (s->cfg.no_prefix_cache) return;
    s->prefix_queries += (uint64_t)r->n_tokens;
    s->prefix_hits += (uint64_t)r->n_computed;
}

void sched_prefix_publish(kiln_scheduler *s, sched_req *r) {
    if (s->cfg.no_prefix_cache) return;
    /* with a draft model of its own cache, a block is published once both models' keys and values fill it */
    const bool behind = s->draft && s->cfg.draft_kv != s->cfg.kv && r->draft_computed < r->n_computed;
    const int computed = behind ? r->draft_computed : r->n_computed;
    for (const int full = computed / s->block_size; r->n_published < full; r->n_published++) {
        const int j = r->n_published;
        kiln_kv_cache_publish_block(s->cfg.kv, r->blocks[j], block_hash(s, r, j), j ? r->hashes[j - 1] : 0,
                                    r->tokens + (size_t)j * s->block_size);
    }
}
