/* activation.cuh — the fused activations of ir/fused_ops.h as one device function, shared by the
 * float epilogue (fused_epilogue.cu) and the integer layers' requantizing epilogue (quant_gemm.cu):
 * the formulas of the CPU kernels (src/backends/cpu/fused.c), in float32. */
#ifndef KILN_CUDA_ACTIVATION_CUH
#define KILN_CUDA_ACTIVATION_CUH

#include "ir/fused_ops.h"

#include <math.h>

/* act(x) for one of kiln_activation's kinds, p0/p1 its params. */
static __device__ __forceinline__ float kiln_cuda_act(float x, int kind, float p0, float p1) {
    switch (kind) {
    case KILN_ACT_RELU: return x < 0.0f ? 0.0f : x;
    case KILN_ACT_LEAKY_RELU: return x < 0.0f ? x * p0 : x;
    case KILN_ACT_CLIP: return fminf(fmaxf(x, p0), p1);
    case KILN_ACT_HARD_SIGMOID: return fminf(fmaxf(p0 * x + p1, 0.0f), 1.0f);
    case KILN_ACT_HARD_SWISH: return x * fminf(fmaxf(x / 6.0f + 0.5f, 0.0f), 1.0f);
    case KILN_ACT_SIGMOID: return 1.0f / (1.0f + expf(-x));
    case KILN_ACT_TANH: return tanhf(x);
    case KILN_ACT_GELU: return 0.5f * x * (1.0f + erff(x * 0.70710678118654752f));
    case KILN_ACT_GELU_TANH:
        return 0.5f * x * (1.0f + tanhf(0.79788456080286536f * (x + 0.044715f * x * x * x)));
    case KILN_ACT_SILU: return x / (1.0f + expf(-x));
    default: return x;
    }
}

#endif
