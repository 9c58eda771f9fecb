/* host_memory.c — kiln_host_alloc / kiln_host_free: host memory for run inputs and outputs,
 * page-locked through the backend that offers it (cuda, when a device is present), else ordinary
 * aligned memory. A 256-byte header in front of every block records how it was allocated, so that
 * kiln_host_free releases it the same way. */
#include "backends/backend.h"

#include "core/log.h"
#include "core/status.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define HEADER_BYTES 256                     /* keeps the caller's pointer 256-byte aligned */
#define HEADER_MAGIC 0x6b696c6e686f7374ull   /* "klnhost" */

typedef struct header {
    uint64_t magic;
    const kiln_backend *pinned_by; /* the backend whose host_alloc made the block, or NULL (malloc) */
} header;

kiln_status kiln_host_alloc(size_t bytes, void **out) {
    if (!out) return kiln_error(KILN_ERR_INVALID_ARGUMENT, "kiln_host_alloc: out is required");
    *out = NULL;
    if (bytes == 0 || bytes > SIZE_MAX - 2 * HEADER_BYTES)
        return kiln_error(KILN_ERR_INVALID_ARGUMENT, "kiln_host_alloc: %zu bytes is not a size to allocate", bytes);
    size_t total = (bytes + 2 * HEADER_BYTES - 1) / HEADER_BYTES * HEADER_BYTES;
    const kiln_backend *b = kiln_backend_host_memory();
    void *base = NULL;
    if (b && b->host_alloc(total, &base) != KILN_OK) {
        KILN_LOG(KILN_LOG_VERBOSE, "host memory: %s; using ordinary memory", kiln_last_error());
        base = NULL;
        b = NULL;
    }
    if (!b) base = aligned_alloc(HEADER_BYTES, total);
    if (!base) return kiln_error(KILN_ERR_OUT_OF_MEMORY, "out of memory allocating %zu bytes of host memory", bytes);
    header *h = base;
    h->magic = HEADER_MAGIC;
    h->pinned_by = b;
    *out = (unsigned char *)base + HEADER_BYTES;
    return KILN_OK;
}

void kiln_host_free(void *p) {
    if (!p) return;
    header *h = (header *)((unsigned char *)p - HEADER_BYTES);
    if (h->magic != HEADER_MAGIC) {
        KILN_LOG(KILN_LOG_ERROR, "kiln_host_free: %p did not come from kiln_host_alloc; not freed", p);
        return;
    }
    h->magic = 0;
    if (h->pinned_by) h->pinned_by->host_free(h);
    else free(h);
}
