/* cpu_backend.c — the CPU backend's entry in the backend interface: kernels from cpu_dispatch.c,
 * matrix products through OpenBLAS. */
#include "backends/backend.h"

#include <cblas.h>
#include <stdio.h>
#include <string.h>
#include <sys/utsname.h>
#include <unistd.h>

static void cpu_device_name(char *buf, size_t cap) {
    struct utsname u;
    const char *machine = uname(&u) == 0 ? u.machine : "unknown";
    snprintf(buf, cap, "%s CPU, %ld cores, %s", machine, sysconf(_SC_NPROCESSORS_ONLN), openblas_get_config());
}

static kiln_cpu_exec_fn cpu_kernel_for(const kiln_node *n) {
    const kiln_cpu_kernel *k = kiln_cpu_kernel_find(n->domain, n->op_type);
    return k ? k->exec : NULL;
}

static const kiln_backend g_cpu = {"cpu", cpu_device_name, cpu_kernel_for};

const kiln_backend *kiln_backend_find(const char *name) {
    if (!name || !strcmp(name, "cpu")) return &g_cpu;
    return NULL;
}
