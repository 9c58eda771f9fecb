/* blas_env.c — OpenBLAS picks its CPU kernels when it is loaded, from the CPU model number. Under
 * virtual machines that hide the model ("Intel(R) Xeon(R) Processor") it falls back to "Prescott"
 * (SSE3, no AVX), which makes every matrix product about 4x slower. When that happens and the CPU
 * does have AVX2/AVX-512, the kiln command restarts itself once with OPENBLAS_CORETYPE set to the
 * matching kernel family. A user's own OPENBLAS_CORETYPE is always respected. */
#include "cli.h"

#include <cblas.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

void cli_fix_blas_cpu_detection(char **argv) {
    if (getenv("OPENBLAS_CORETYPE") || getenv("KILN_BLAS_REEXEC")) return;
    const char *core = openblas_get_corename();
    if (!core || strcmp(core, "Prescott") != 0) return;
    __builtin_cpu_init();
    const char *want = __builtin_cpu_supports("avx512f") ? "SkylakeX" : __builtin_cpu_supports("avx2") ? "Haswell" : NULL;
    if (!want) return;
    setenv("OPENBLAS_CORETYPE", want, 1);
    setenv("KILN_BLAS_REEXEC", "1", 1); /* never loop */
    execv("/proc/self/exe", argv);
    /* exec failed: carry on with the slow kernels */
}
