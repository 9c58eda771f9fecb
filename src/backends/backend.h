/* backend.h — the interface every execution backend implements (ARCHITECTURE.md §7). The plan asks
 * a backend for the kernel of each node once; the runtime then only calls those kernels. */
#ifndef KILN_BACKEND_H
#define KILN_BACKEND_H

#include "backends/cpu/cpu_kernels.h"

typedef struct kiln_backend {
    const char *name;                  /* "cpu": the engine's target */
    /* A description of the device ("x86_64, 2 cores, OpenBLAS 0.3.21") into buf. */
    void (*device_name)(char *buf, size_t cap);
    /* The kernel that runs n, or NULL (with a message) when this backend cannot. */
    kiln_cpu_exec_fn (*kernel_for)(const kiln_node *n);
} kiln_backend;

/* The backend called name ("cpu"), or NULL. */
const kiln_backend *kiln_backend_find(const char *name);

#endif
