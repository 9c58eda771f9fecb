/* tokenizer_hash.h — the two open-addressing hash maps of the BPE tokenizer: token text -> id (the
 * vocabulary) and (left id, right id) -> (rank, merged id) (the merges). Both are sized once for a
 * known number of entries (load factor at most 1/2) and never shrink; linear probing. */
#ifndef KILN_LLM_TOKENIZER_HASH_H
#define KILN_LLM_TOKENIZER_HASH_H

#include "kiln/kiln.h"

#include <stddef.h>
#include <stdint.h>

typedef struct kiln_tok_str_slot {
    const char *key; /* not owned; NULL marks an empty slot */
    uint32_t len;
    int32_t val;
} kiln_tok_str_slot;

typedef struct kiln_tok_strmap {
    kiln_tok_str_slot *slots;
    size_t mask; /* capacity - 1 (a power of two) */
} kiln_tok_strmap;

/* Allocates an empty map for up to `n` keys. KILN_ERR_OUT_OF_MEMORY on failure. */
kiln_status kiln_tok_strmap_init(kiln_tok_strmap *m, size_t n);
void kiln_tok_strmap_free(kiln_tok_strmap *m);
/* Maps key[0..len) to val, replacing an existing value. The key bytes must outlive the map. At most
 * the `n` of init distinct keys may be added. */
void kiln_tok_strmap_put(kiln_tok_strmap *m, const char *key, size_t len, int32_t val);
/* The value of key[0..len), or -1. */
int32_t kiln_tok_strmap_get(const kiln_tok_strmap *m, const char *key, size_t len);

typedef struct kiln_tok_merge {
    int32_t rank;   /* position in the merge list: lower merges first */
    int32_t merged; /* id of the concatenation */
} kiln_tok_merge;

typedef struct kiln_tok_pair_slot {
    uint64_t key; /* left << 32 | right; UINT64_MAX marks an empty slot */
    kiln_tok_merge merge;
} kiln_tok_pair_slot;

typedef struct kiln_tok_pairmap {
    kiln_tok_pair_slot *slots;
    size_t mask;
} kiln_tok_pairmap;

/* Allocates an empty map for up to `n` pairs. KILN_ERR_OUT_OF_MEMORY on failure. */
kiln_status kiln_tok_pairmap_init(kiln_tok_pairmap *m, size_t n);
void kiln_tok_pairmap_free(kiln_tok_pairmap *m);
/* Maps the pair (left, right) (ids >= 0) to merge, replacing an existing one. */
void kiln_tok_pairmap_put(kiln_tok_pairmap *m, int32_t left, int32_t right, kiln_tok_merge merge);
/* The merge of (left, right), or NULL. */
const kiln_tok_merge *kiln_tok_pairmap_get(const kiln_tok_pairmap *m, int32_t left, int32_t right);

#endif
