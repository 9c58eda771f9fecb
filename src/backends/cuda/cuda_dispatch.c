/* cuda_dispatch.c — finds the CUDA kernel for an op (one table per op family, each in its .cu file),
 * and says which kiln-domain fused ops the fusion passes may create for this backend. */
#include "backends/cuda/cuda_kernels.h"
#include "ir/fused_ops.h"

#include <stdlib.h>
#include <string.h>

extern const kiln_cuda_kernel kiln_cuda_kernels_elementwise[];
extern const kiln_cuda_kernel kiln_cuda_kernels_reduce[];
extern const kiln_cuda_kernel kiln_cuda_kernels_norm[];
extern const kiln_cuda_kernel kiln_cuda_kernels_matmul[];
extern const kiln_cuda_kernel kiln_cuda_kernels_conv[];
extern const kiln_cuda_kernel kiln_cuda_kernels_pool[];
extern const kiln_cuda_kernel kiln_cuda_kernels_movement[];
extern const kiln_cuda_kernel kiln_cuda_kernels_pad_slice[];
extern const kiln_cuda_kernel kiln_cuda_kernels_gather_scatter[];
extern const kiln_cuda_kernel kiln_cuda_kernels_resize[];
extern const kiln_cuda_kernel kiln_cuda_kernels_einsum[];
extern const kiln_cuda_kernel kiln_cuda_kernels_generate[];
extern const kiln_cuda_kernel kiln_cuda_kernels_lrn_hardmax[];
extern const kiln_cuda_kernel kiln_cuda_kernels_fused_epilogue[];
extern const kiln_cuda_kernel kiln_cuda_kernels_fused_chain[];
extern const kiln_cuda_kernel kiln_cuda_kernels_fused_attention[];
extern const kiln_cuda_kernel kiln_cuda_kernels_quant[];
extern const kiln_cuda_kernel kiln_cuda_kernels_quantize[];
extern const kiln_cuda_kernel kiln_cuda_kernels_fp8[];

static const kiln_cuda_kernel *const g_families[] = {
    kiln_cuda_kernels_elementwise, kiln_cuda_kernels_reduce, kiln_cuda_kernels_norm, kiln_cuda_kernels_matmul,
    kiln_cuda_kernels_conv,        kiln_cuda_kernels_pool,   kiln_cuda_kernels_movement, kiln_cuda_kernels_pad_slice,
    kiln_cuda_kernels_gather_scatter,
    kiln_cuda_kernels_resize,      kiln_cuda_kernels_einsum, kiln_cuda_kernels_generate, kiln_cuda_kernels_lrn_hardmax,
    kiln_cuda_kernels_fused_epilogue, kiln_cuda_kernels_fused_chain, kiln_cuda_kernels_fused_attention, kiln_cuda_kernels_quant,
    kiln_cuda_kernels_quantize, kiln_cuda_kernels_fp8,
};

static bool domain_is_default(const char *d) { return !d || !d[0] || !strcmp(d, "ai.onnx"); }

const kiln_cuda_kernel *kiln_cuda_kernel_find(const char *domain, const char *op_type) {
    if (!op_type) return NULL;
    for (size_t f = 0; f < sizeof g_families / sizeof *g_families; f++)
        for (const kiln_cuda_kernel *k = g_families[f]; k->op_type; k++) {
            bool dom = domain_is_default(k->domain) ? domain_is_default(domain) : (domain && !strcmp(k->domain, domain));
            if (dom && !strcmp(k->op_type, op_type)) return k;
        }
    return NULL;
}

bool kiln_cuda_runs_fused_op(const char *op_type, const kiln_build_options *opts) {
    bool all = opts->fusion == KILN_SWITCH_ON;
#ifdef KILN_CUDA_NO_FUSION
    if (!all) return false; /* only with fusion ON (KILN_CUDA_FUSION=all or 1) */
#endif
    /* kiln.Attention by default only in 16-bit builds, which run the tensor-core kernel
     * (fused_attention.cu); fp32 would run the CUDA-core kernel, slower than cuBLASLt's MatMuls */
    if (op_type && !strcmp(op_type, "Attention") && opts->precision == KILN_PRECISION_FP32 && !all) return false;
    return kiln_cuda_kernel_find(KILN_FUSED_DOMAIN, op_type) != NULL;
}
