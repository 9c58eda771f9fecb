/* cpu_dispatch.c — finds the CPU kernel for an op (one table per op family), and the prepared
 * kernel of the few ops that have one. */
#include "backends/cpu/cpu_kernels.h"

#include "backends/cpu/nn_kernels.h"
#include "ir/fused_ops.h"

#include <string.h>

extern const kiln_cpu_kernel kiln_cpu_kernels_elementwise[];
extern const kiln_cpu_kernel kiln_cpu_kernels_fused[];
extern const kiln_cpu_kernel kiln_cpu_kernels_nn[];
extern const kiln_cpu_kernel kiln_cpu_kernels_quant[];
extern const kiln_cpu_kernel kiln_cpu_kernels_reduce[];
extern const kiln_cpu_kernel kiln_cpu_kernels_shape[];

static const kiln_cpu_kernel *const g_families[] = {
    kiln_cpu_kernels_elementwise, kiln_cpu_kernels_nn, kiln_cpu_kernels_reduce, kiln_cpu_kernels_shape,
    kiln_cpu_kernels_fused, kiln_cpu_kernels_quant,
};

static bool domain_is_default(const char *d) { return !d || !d[0] || !strcmp(d, "ai.onnx"); }

const kiln_cpu_kernel *kiln_cpu_kernel_find(const char *domain, const char *op_type) {
    for (size_t f = 0; f < sizeof g_families / sizeof *g_families; f++)
        for (const kiln_cpu_kernel *k = g_families[f]; k->op_type; k++) {
            bool dom = domain_is_default(k->domain) ? domain_is_default(domain)
                                                    : (domain && !strcmp(k->domain, domain));
            if (dom && !strcmp(k->op_type, op_type)) return k;
        }
    return NULL;
}

static const kiln_cpu_prepared_kernel g_prepared[] = {
    {"Conv", "", kiln_cpu_conv_prepare, kiln_cpu_conv_prepared, kiln_cpu_conv_state_free, kiln_cpu_conv_panels},
    {"FusedConv", KILN_FUSED_DOMAIN, kiln_cpu_conv_prepare, kiln_cpu_fused_conv_prepared, kiln_cpu_conv_state_free,
     kiln_cpu_conv_panels},
    {"MatMul", "", kiln_cpu_matmul_prepare, kiln_cpu_matmul_prepared, kiln_cpu_matmul_state_free,
     kiln_cpu_matmul_panels},
    {"Gemm", "", kiln_cpu_matmul_prepare, kiln_cpu_gemm_prepared, kiln_cpu_matmul_state_free, kiln_cpu_matmul_panels},
    {"FusedMatMul", KILN_FUSED_DOMAIN, kiln_cpu_matmul_prepare, kiln_cpu_fused_matmul_prepared,
     kiln_cpu_matmul_state_free, kiln_cpu_matmul_panels},
    {"FusedGemm", KILN_FUSED_DOMAIN, kiln_cpu_matmul_prepare, kiln_cpu_fused_gemm_prepared, kiln_cpu_matmul_state_free,
     kiln_cpu_matmul_panels},
};

const kiln_cpu_prepared_kernel *kiln_cpu_prepared_find(const char *domain, const char *op_type) {
    for (size_t i = 0; i < sizeof g_prepared / sizeof *g_prepared; i++) {
        const kiln_cpu_prepared_kernel *k = &g_prepared[i];
        bool dom = domain_is_default(k->domain) ? domain_is_default(domain) : (domain && !strcmp(k->domain, domain));
        if (dom && !strcmp(k->op_type, op_type)) return k;
    }
    return NULL;
}
