/* arena.h — a bump allocator for things that live exactly as long as their owner (a graph's names,
 * attribute arrays). Everything is freed at once by kiln_arena_free. */
#ifndef KILN_CORE_ARENA_H
#define KILN_CORE_ARENA_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct kiln_arena kiln_arena;

kiln_arena *kiln_arena_create(void);           /* NULL on out of memory */
void kiln_arena_free(kiln_arena *a);            /* accepts NULL */
/* Zeroed, 16-byte aligned memory; NULL on out of memory. */
void *kiln_arena_alloc(kiln_arena *a, size_t size);
/* A NUL-terminated copy of s[0..len). NULL on out of memory. */
char *kiln_arena_strndup(kiln_arena *a, const char *s, size_t len);
char *kiln_arena_strdup(kiln_arena *a, const char *s);

#ifdef __cplusplus
}
#endif
#endif
