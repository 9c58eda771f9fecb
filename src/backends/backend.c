/* backend.c — the registry of backends this kiln was built with. */
#include "backends/backend.h"

#include <string.h>

extern const kiln_backend kiln_backend_cpu;
#ifdef KILN_HAVE_CUDA
extern const kiln_backend kiln_backend_cuda;
#endif

static const kiln_backend *const g_backends[] = {
    &kiln_backend_cpu,
#ifdef KILN_HAVE_CUDA
    &kiln_backend_cuda,
#endif
};

const kiln_backend *kiln_backend_find(const char *name) {
    if (!name) name = "cpu";
    for (size_t i = 0; i < sizeof g_backends / sizeof *g_backends; i++)
        if (!strcmp(g_backends[i]->name, name)) return g_backends[i];
    return NULL;
}

const kiln_backend *kiln_backend_host_memory(void) {
    for (size_t i = 0; i < sizeof g_backends / sizeof *g_backends; i++)
        if (g_backends[i]->host_alloc) return g_backends[i];
    return NULL;
}

const char *kiln_backend_names(void) {
#ifdef KILN_HAVE_CUDA
    return "cpu, cuda";
#else
    return "cpu";
#endif
}
