/* cpu_backend.c — the CPU backend's entry in the backend interface: kernels from cpu_dispatch.c,
 * matrix products through OpenBLAS. */
#include "backends/backend.h"

#include <cblas.h>
#include <stdio.h>
#include <string.h>
#include <sys/utsname.h>
#include <unistd.h>

static kiln_status cpu_device_name(int device, char *buf, size_t cap) {
    struct utsname u;
    const char *machine = uname(&u) == 0 ? u.machine : "unknown";
    snprintf(buf, cap, "%s CPU, %ld cores, %s", machine, sysconf(_SC_NPROCESSORS_ONLN), openblas_get_config());
    (void)device;
    return KILN_OK;
}

static bool cpu_supports_precision(kiln_precision p) { return p == KILN_PRECISION_FP32; }

static kiln_cpu_exec_fn cpu_kernel_for(const kiln_node *n) {
    const kiln_cpu_kernel *k = kiln_cpu_kernel_find(n->domain, n->op_type);
    return k ? k->exec : NULL;
}

const kiln_backend kiln_backend_cpu = {"cpu", cpu_device_name, cpu_supports_precision, cpu_kernel_for};
