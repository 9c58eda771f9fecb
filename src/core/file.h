/* file.h — read-only memory mapping of whole files (models, engines, weights). */
#ifndef KILN_CORE_FILE_H
#define KILN_CORE_FILE_H

#include "kiln/kiln.h"

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct kiln_file_map {
    const unsigned char *data; /* NULL for an empty file */
    size_t size;
} kiln_file_map;

/* Maps path read-only. Fails with KILN_ERR_IO naming the path and the OS reason. On success the
 * caller owns *out and releases it with kiln_file_unmap. */
kiln_status kiln_file_map_open(const char *path, kiln_file_map *out);
void kiln_file_unmap(kiln_file_map *m); /* accepts an already-unmapped / zeroed map */
/* Heap-allocated copy of kiln_file_map for kiln_graph_keep_alive (release with kiln_file_map_free). */
kiln_status kiln_file_map_new(const char *path, kiln_file_map **out);
void kiln_file_map_free(void *m);

/* Writes size bytes to path atomically (to path.tmp, fsync, rename). KILN_ERR_IO on failure. */
kiln_status kiln_file_write_atomic(const char *path, const void *const *chunks, const size_t *sizes, int nchunks);

#ifdef __cplusplus
}
#endif
#endif
