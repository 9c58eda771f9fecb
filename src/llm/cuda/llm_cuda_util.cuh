/* llm_cuda_util.cuh — device helpers of the LLM kernels (llm_cuda_*.cu): eight 16-bit floats from one
 * 16-byte load as FP32, the opt-in to more than 48 KB of shared memory, the programmatic dependent
 * launch waits, and the dtype dispatch of their launchers. */
#ifndef KILN_LLM_CUDA_UTIL_CUH
#define KILN_LLM_CUDA_UTIL_CUH

#include "backends/cuda/kernel_util.cuh"
#include "llm/cuda/llm_cuda_internal.h"

/* The 8 elements of T packed in u, as FP32. */
template <typename T> static __device__ __forceinline__ void lc_unpack8(const uint4 &u, float (&f)[8]);
template <> __device__ __forceinline__ void lc_unpack8<__half>(const uint4 &u, float (&f)[8]) {
    const __half2 *h = reinterpret_cast<const __half2 *>(&u);
#pragma unroll
    for (int j = 0; j < 4; j++) {
        float2 v = __half22float2(h[j]);
        f[2 * j] = v.x;
        f[2 * j + 1] = v.y;
    }
}
template <> __device__ __forceinline__ void lc_unpack8<bf16>(const uint4 &u, float (&f)[8]) {
    const __nv_bfloat162 *h = reinterpret_cast<const __nv_bfloat162 *>(&u);
#pragma unroll
    for (int j = 0; j < 4; j++) {
        float2 v = __bfloat1622float2(h[j]);
        f[2 * j] = v.x;
        f[2 * j + 1] = v.y;
    }
}

/* 8 elements of T at p (16-byte aligned) as FP32, through the read-only cache. */
template <typename T> static __device__ __forceinline__ void lc_load8(const T *p, float (&f)[8]) {
    uint4 u = __ldg(reinterpret_cast<const uint4 *>(p));
    lc_unpack8<T>(u, f);
}

/* Programmatic dependent launch (sm_90; no-ops before, and in a kernel launched without the attribute):
 * wait until the kernels before have finished and their writes are visible (call before touching
 * anything they write or read), and let the next kernel launch now (its own wait still holds it). */
static __device__ __forceinline__ void lc_pdl_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

static __device__ __forceinline__ void lc_pdl_launch_dependents() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

/* Calls F<__half> or F<bf16> by g's dtype: LC_DISPATCH(g->dtype, launch_x, args...) where launch_x is
 * a function template returning kiln_status. */
#define LC_DISPATCH(dtype, fn, ...) ((dtype) == KILN_F16 ? fn<__half>(__VA_ARGS__) : fn<bf16>(__VA_ARGS__))

#endif
