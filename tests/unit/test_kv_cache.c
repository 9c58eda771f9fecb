/* test_kv_cache.c — the paged KV cache (src/llm/kv_cache.c): budget arithmetic, invalid shapes,
 * handing out and taking back every block, that the key and value storage of every (layer, block) is
 * distinct, of the stated size and writable; and the prefix cache: publishing, lookups that confirm
 * tokens and parent, shared references, idle cached blocks counted free, eviction only when no
 * never-published block is free and least recently released first, a duplicate hash left private.
 * Exit 0 = pass. */
#include "check.h"
#include "llm/kv_cache.h"

#include <stdio.h>
#include <string.h>

static void test_prefix_cache(void) {
    kiln_kv_cache_config c = {.n_layer = 1, .n_kv_head = 1, .head_dim = 2, .block_size = 4, .n_blocks = 4,
                              .dtype = KILN_F32};
    kiln_kv_cache *kv;
    CHECK(kiln_kv_cache_create(&c, &kv) == KILN_OK);
    const int32_t t1[4] = {1, 2, 3, 4}, t2[4] = {5, 6, 7, 8}, t1x[4] = {1, 2, 3, 5};
    const uint64_t h1 = kiln_kv_block_hash(0, t1, 4), h2 = kiln_kv_block_hash(h1, t2, 4);
    CHECK(h1 != h2 && h1 != kiln_kv_block_hash(0, t1x, 4) && h2 != kiln_kv_block_hash(0, t2, 4));
    int a = kiln_kv_cache_alloc_block(kv), b = kiln_kv_cache_alloc_block(kv);
    CHECK(kiln_kv_cache_lookup(kv, h1, 0, t1) == -1);
    kiln_kv_cache_publish_block(kv, a, h1, 0, t1);
    kiln_kv_cache_publish_block(kv, b, h2, h1, t2);
    CHECK(kiln_kv_cache_published_blocks(kv) == 2);
    CHECK(kiln_kv_cache_lookup(kv, h1, 0, t1) == a && kiln_kv_cache_lookup(kv, h2, h1, t2) == b);
    CHECK(kiln_kv_cache_lookup(kv, h1, 0, t1x) == -1 && kiln_kv_cache_lookup(kv, h2, 0, t2) == -1); /* no false hit */
    /* shared, then idle: still cached, counted free, its contents live */
    kiln_kv_cache_share_block(kv, a);
    kiln_kv_cache_release_block(kv, a);
    CHECK(kiln_kv_cache_block_taken(kv, a) && !kiln_kv_cache_block_cached_idle(kv, a));
    kiln_kv_cache_release_block(kv, a);
    kiln_kv_cache_release_block(kv, b);
    CHECK(!kiln_kv_cache_block_taken(kv, a) && kiln_kv_cache_block_cached_idle(kv, a));
    CHECK(kiln_kv_cache_free_blocks(kv) == 4 && kiln_kv_cache_lookup(kv, h1, 0, t1) == a);
    /* taking an idle block back uses up a free one */
    kiln_kv_cache_share_block(kv, b);
    CHECK(kiln_kv_cache_block_taken(kv, b) && kiln_kv_cache_free_blocks(kv) == 3);
    kiln_kv_cache_release_block(kv, b); /* now b was released after a: a is the least recent */
    /* the two never-published blocks go first; then a, then b are evicted */
    int c1 = kiln_kv_cache_alloc_block(kv), c2 = kiln_kv_cache_alloc_block(kv);
    CHECK(c1 != a && c1 != b && c2 != a && c2 != b && kiln_kv_cache_published_blocks(kv) == 2);
    CHECK(kiln_kv_cache_alloc_block(kv) == a && kiln_kv_cache_lookup(kv, h1, 0, t1) == -1);
    CHECK(kiln_kv_cache_lookup(kv, h2, h1, t2) == b && kiln_kv_cache_published_blocks(kv) == 1);
    CHECK(kiln_kv_cache_alloc_block(kv) == b && kiln_kv_cache_published_blocks(kv) == 0);
    CHECK(kiln_kv_cache_alloc_block(kv) == -1 && !kiln_kv_cache_block_taken(kv, 4) &&
          !kiln_kv_cache_block_cached_idle(kv, 4));
    /* a hash already published by another block: the second stays private and is freed on release */
    kiln_kv_cache_publish_block(kv, c1, h1, 0, t1);
    kiln_kv_cache_publish_block(kv, c2, h1, 0, t1);
    CHECK(kiln_kv_cache_published_blocks(kv) == 1 && kiln_kv_cache_lookup(kv, h1, 0, t1) == c1);
    kiln_kv_cache_release_block(kv, c2);
    CHECK(!kiln_kv_cache_block_taken(kv, c2) && !kiln_kv_cache_block_cached_idle(kv, c2) &&
          kiln_kv_cache_free_blocks(kv) == 1);
    CHECK(kiln_kv_cache_alloc_block(kv) == c2 && kiln_kv_cache_published_blocks(kv) == 1);
    kiln_kv_cache_free(kv);
}

int main(void) {
    test_prefix_cache();
    kiln_kv_cache_config c = {.n_layer = 3, .n_kv_head = 2, .head_dim = 8, .block_size = 4, .n_blocks = 5,
                              .dtype = KILN_F16};
    const size_t block = 2 * 4 * 8 * 2; /* keys of one block of one layer, in bytes */
    CHECK(kiln_kv_cache_blocks_for_budget(&c, 3 * 2 * block * 7 + 1) == 7);
    CHECK(kiln_kv_cache_blocks_for_budget(&c, 3 * 2 * block - 1) == 0);
    kiln_kv_cache_config bad = c;
    bad.dtype = KILN_I32;
    kiln_kv_cache *kv;
    CHECK(kiln_kv_cache_create(&bad, &kv) == KILN_ERR_INVALID_ARGUMENT && strstr(kiln_last_error(), "int32"));
    CHECK(kiln_kv_cache_blocks_for_budget(&bad, 1u << 30) == 0);
    bad = c;
    bad.block_size = 0;
    CHECK(kiln_kv_cache_create(&bad, &kv) == KILN_ERR_INVALID_ARGUMENT && strstr(kiln_last_error(), "block_size 0"));

    CHECK(kiln_kv_cache_create(&c, &kv) == KILN_OK);
    CHECK(kiln_kv_cache_free_blocks(kv) == 5 && kiln_kv_cache_get_config(kv)->n_blocks == 5);
    int got[5], seen = 0;
    for (int i = 0; i < 5; i++) {
        got[i] = kiln_kv_cache_alloc_block(kv);
        CHECK(got[i] >= 0 && got[i] < 5 && !(seen & 1 << got[i]) && kiln_kv_cache_block_taken(kv, got[i]));
        seen |= 1 << got[i];
    }
    CHECK(kiln_kv_cache_alloc_block(kv) == -1 && kiln_kv_cache_free_blocks(kv) == 0);
    CHECK(!kiln_kv_cache_block_taken(kv, -1) && !kiln_kv_cache_block_taken(kv, 5));
    kiln_kv_cache_release_block(kv, got[2]);
    CHECK(!kiln_kv_cache_block_taken(kv, got[2]) && kiln_kv_cache_free_blocks(kv) == 1);
    CHECK(kiln_kv_cache_alloc_block(kv) == got[2]);

    /* each (layer, block, keys/values) region: fill with its own byte, then check none was overwritten */
    for (int l = 0; l < 3; l++)
        for (int b = 0; b < 5; b++) {
            memset(kiln_kv_cache_keys(kv, l, b), 1 + (l * 5 + b) * 2, block);
            memset(kiln_kv_cache_values(kv, l, b), 2 + (l * 5 + b) * 2, block);
        }
    for (int l = 0; l < 3; l++)
        for (int b = 0; b < 5; b++) {
            const unsigned char *k = kiln_kv_cache_keys(kv, l, b), *v = kiln_kv_cache_values(kv, l, b);
            for (size_t i = 0; i < block; i++)
                CHECK(k[i] == 1 + (l * 5 + b) * 2 && v[i] == 2 + (l * 5 + b) * 2);
        }
    for (int i = 0; i < 5; i++) kiln_kv_cache_release_block(kv, got[i]);
    CHECK(kiln_kv_cache_free_blocks(kv) == 5);
    kiln_kv_cache_free(kv);
    kiln_kv_cache_free(NULL);
    return checks_report("test_kv_cache");
}
