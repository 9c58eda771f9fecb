/* nn.c — CPU kernels for the nn op family. */
#include "backends/cpu/cpu_kernels.h"

const kiln_cpu_kernel kiln_cpu_kernels_nn[] = {
    {0},
};
