/* timing_cache.h — the timing cache of auto-tuning (`kiln build --timing-cache FILE`): records of
 * (key -> tactic and its time), where a key names the GPU, the driver and library versions and the
 * layer's signature. A build reads the file before tuning, looks every layer up before timing it, and
 * writes the file back (atomically) with what it timed. The file format is in docs/cuda.md; a file
 * that is missing, corrupt, truncated or of another format version is ignored with a warning. */
#ifndef KILN_TIMING_CACHE_H
#define KILN_TIMING_CACHE_H

#include "engine/engine_format.h"

#define KILN_TIMING_CACHE_MAGIC "KILNTCH1" /* 8 bytes at offset 0 */
#define KILN_TIMING_CACHE_VERSION 1
#define KILN_TIMING_CACHE_HEADER 32         /* bytes before the records */
#define KILN_TIMING_CACHE_MAX_KEY 4096      /* longest key, in bytes */

typedef struct kiln_timing_record {
    char *key;         /* owned, NUL-terminated */
    kiln_tactic tactic;
} kiln_timing_record;

typedef struct kiln_timing_cache {
    kiln_timing_record *recs; /* owned */
    int n, cap;
    int added;                /* records put since the load: the file needs rewriting */
} kiln_timing_cache;

/* Parses a cache image data[0..size) into c (which must be empty). KILN_ERR_PARSE for anything but a
 * whole, intact cache (what names the file in the message), KILN_ERR_ENGINE_MISMATCH for another
 * format version, KILN_ERR_OUT_OF_MEMORY; on failure c is left empty. */
kiln_status kiln_timing_cache_parse(kiln_timing_cache *c, const void *data, size_t size, const char *what);
/* Reads the file at path into c (emptied first). A missing file leaves c empty; an unreadable,
 * corrupt or foreign-version one too, with a warning. Fails only when out of memory. */
kiln_status kiln_timing_cache_load(kiln_timing_cache *c, const char *path);
/* The tactic recorded under key, or NULL. Borrowed from c until it changes. */
const kiln_tactic *kiln_timing_cache_find(const kiln_timing_cache *c, const char *key);
/* Records t under key (replacing a record of the same key). Keys longer than
 * KILN_TIMING_CACHE_MAX_KEY bytes are refused (KILN_ERR_INVALID_ARGUMENT). */
kiln_status kiln_timing_cache_put(kiln_timing_cache *c, const char *key, const kiln_tactic *t);
/* Writes every record of c to path atomically (kiln_file_write_atomic). KILN_ERR_IO on failure. */
kiln_status kiln_timing_cache_save(const kiln_timing_cache *c, const char *path);
/* Frees c's records and leaves it empty (reusable). Accepts an empty cache. */
void kiln_timing_cache_free(kiln_timing_cache *c);

#endif
