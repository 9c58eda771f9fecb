/* reduce.c — CPU kernels for the reduce op family. */
#include "backends/cpu/cpu_kernels.h"

const kiln_cpu_kernel kiln_cpu_kernels_reduce[] = {
    {0},
};
