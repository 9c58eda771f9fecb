/* shape.c — CPU kernels for the shape op family. */
#include "backends/cpu/cpu_kernels.h"

const kiln_cpu_kernel kiln_cpu_kernels_shape[] = {
    {0},
};
