/* test_kv_cache.c — the paged KV cache (src/llm/kv_cache.c): budget arithmetic, invalid shapes,
 * handing out and taking back every block, and that the key and value storage of every (layer,
 * block) is distinct, of the stated size and writable. Exit 0 = pass. */
#include "check.h"
#include "llm/kv_cache.h"

#include <stdio.h>
#include <string.h>

int main(void) {
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
