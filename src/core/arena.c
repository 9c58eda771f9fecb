/* arena.c — chained-block bump allocator. */
#include "core/arena.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef struct block {
    struct block *next;
    size_t used, cap;
    _Alignas(16) unsigned char data[];
} block;

struct kiln_arena {
    block *head;
};

kiln_arena *kiln_arena_create(void) { return calloc(1, sizeof(kiln_arena)); }

void kiln_arena_free(kiln_arena *a) {
    if (!a) return;
    for (block *b = a->head, *n; b; b = n) {
        n = b->next;
        free(b);
    }
    free(a);
}

void *kiln_arena_alloc(kiln_arena *a, size_t size) {
    size = (size + 15) & ~(size_t)15;
    if (size == 0) size = 16;
    block *b = a->head;
    if (!b || b->cap - b->used < size) {
        size_t cap = size > 65536 ? size : 65536;
        b = malloc(sizeof(block) + cap);
        if (!b) return NULL;
        b->cap = cap;
        b->used = 0;
        b->next = a->head;
        a->head = b;
    }
    void *p = b->data + b->used;
    b->used += size;
    memset(p, 0, size);
    return p;
}

char *kiln_arena_strndup(kiln_arena *a, const char *s, size_t len) {
    char *p = kiln_arena_alloc(a, len + 1);
    if (!p) return NULL;
    if (len) memcpy(p, s, len);
    p[len] = 0;
    return p;
}

char *kiln_arena_strdup(kiln_arena *a, const char *s) { return kiln_arena_strndup(a, s, strlen(s)); }
