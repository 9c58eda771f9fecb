/* elementwise.c — CPU kernels for the elementwise op family. */
#include "backends/cpu/cpu_kernels.h"

const kiln_cpu_kernel kiln_cpu_kernels_elementwise[] = {
    {0},
};
