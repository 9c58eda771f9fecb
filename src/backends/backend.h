/* backend.h — the interface every execution backend implements (ARCHITECTURE.md §7). The plan asks
 * a backend for the kernel of each node once; the runtime then only calls those kernels. */
#ifndef KILN_BACKEND_H
#define KILN_BACKEND_H

#include "backends/cpu/cpu_kernels.h"

typedef struct kiln_backend {
    const char *name;                  /* "cpu": the engine's target */
    /* A description of device `device` ("x86_64 CPU, 2 cores, OpenBLAS 0.3.21") into buf; fails when
     * the device is absent. */
    kiln_status (*device_name)(int device, char *buf, size_t cap);
    /* Whether the backend computes floating-point tensors in precision p. */
    bool (*supports_precision)(kiln_precision p);
    /* The kernel that runs n, or NULL (with a message) when this backend cannot. */
    kiln_cpu_exec_fn (*kernel_for)(const kiln_node *n);
} kiln_backend;

/* The backend called name ("cpu"), or NULL. */
const kiln_backend *kiln_backend_find(const char *name);
/* "cpu" or "cpu, cuda": the targets this kiln was built with. */
const char *kiln_backend_names(void);

#endif
