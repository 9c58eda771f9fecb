/* tokenizer_hash.c — the open-addressing maps of tokenizer_hash.h: FNV-1a over the token bytes, a
 * 64-bit mix for id pairs, linear probing over a power-of-two table at most half full. */
#include "llm/tokenizer_hash.h"

#include "core/status.h"

#include <stdlib.h>
#include <string.h>

/* The smallest power of two >= 2 * n (and >= 16), or 0 when that overflows. */
static size_t table_size(size_t n) {
    size_t cap = 16;
    while (cap < 2 * n) {
        if (cap > SIZE_MAX / 4) return 0;
        cap *= 2;
    }
    return cap;
}

static uint64_t hash_bytes(const char *s, size_t len) {
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < len; i++) h = (h ^ (unsigned char)s[i]) * 1099511628211ull;
    return h ^ (h >> 29);
}

static uint64_t hash_u64(uint64_t x) {
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ull;
    return x ^ (x >> 33);
}

kiln_status kiln_tok_strmap_init(kiln_tok_strmap *m, size_t n) {
    size_t cap = table_size(n);
    m->slots = cap ? calloc(cap, sizeof *m->slots) : NULL;
    if (!m->slots) return kiln_error(KILN_ERR_OUT_OF_MEMORY, "out of memory for a vocabulary of %zu tokens", n);
    m->mask = cap - 1;
    return KILN_OK;
}

void kiln_tok_strmap_free(kiln_tok_strmap *m) {
    free(m->slots);
    m->slots = NULL;
}

/* The slot of key: the one holding it, or the empty one where it would go. */
static kiln_tok_str_slot *str_slot(const kiln_tok_strmap *m, const char *key, size_t len) {
    size_t i = (size_t)hash_bytes(key, len) & m->mask;
    for (;; i = (i + 1) & m->mask) {
        kiln_tok_str_slot *s = &m->slots[i];
        if (!s->key || (s->len == len && !memcmp(s->key, key, len))) return s;
    }
}

void kiln_tok_strmap_put(kiln_tok_strmap *m, const char *key, size_t len, int32_t val) {
    kiln_tok_str_slot *s = str_slot(m, key, len);
    *s = (kiln_tok_str_slot){.key = key, .len = (uint32_t)len, .val = val};
}

int32_t kiln_tok_strmap_get(const kiln_tok_strmap *m, const char *key, size_t len) {
    const kiln_tok_str_slot *s = str_slot(m, key, len);
    return s->key ? s->val : -1;
}

kiln_status kiln_tok_pairmap_init(kiln_tok_pairmap *m, size_t n) {
    size_t cap = table_size(n);
    m->slots = cap ? malloc(cap * sizeof *m->slots) : NULL;
    if (!m->slots) return kiln_error(KILN_ERR_OUT_OF_MEMORY, "out of memory for %zu merges", n);
    for (size_t i = 0; i < cap; i++) m->slots[i].key = UINT64_MAX;
    m->mask = cap - 1;
    return KILN_OK;
}

void kiln_tok_pairmap_free(kiln_tok_pairmap *m) {
    free(m->slots);
    m->slots = NULL;
}

/* The slot of key: the one holding it, or the empty one where it would go. */
static kiln_tok_pair_slot *pair_slot(const kiln_tok_pairmap *m, uint64_t key) {
    size_t i = (size_t)hash_u64(key) & m->mask;
    for (;; i = (i + 1) & m->mask) {
        kiln_tok_pair_slot *s = &m->slots[i];
        if (s->key == key || s->key == UINT64_MAX) return s;
    }
}

void kiln_tok_pairmap_put(kiln_tok_pairmap *m, int32_t left, int32_t right, kiln_tok_merge merge) {
    uint64_t key = (uint64_t)(uint32_t)left << 32 | (uint32_t)right;
    kiln_tok_pair_slot *s = pair_slot(m, key);
    s->key = key;
    s->merge = merge;
}

const kiln_tok_merge *kiln_tok_pairmap_get(const kiln_tok_pairmap *m, int32_t left, int32_t right) {
    uint64_t key = (uint64_t)(uint32_t)left << 32 | (uint32_t)right;
    const kiln_tok_pair_slot *s = pair_slot(m, key);
    return s->key == key ? &s->merge : NULL;
}
