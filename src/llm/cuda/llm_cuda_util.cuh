/* llm_cuda_util.cuh — device helpers of the LLM kernels (llm_cuda_*.cu): eight 16-bit floats from one
 * 16-byte load as FP32, the 16-bit GEMV family's loop over the weights (shared by the plain and the
 * fused GEMV), the split-K sum over a thread block cluster, a launch with clusters and programmatic
 * dependent launch, that launch's wait and trigger, and the dtype dispatch of their launchers. */
#ifndef KILN_LLM_CUDA_UTIL_CUH
#define KILN_LLM_CUDA_UTIL_CUH

#include "backends/cuda/kernel_util.cuh"
#include "llm/cuda/llm_cuda_internal.h"

#include <cooperative_groups.h>

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

/* The 16 int8 values of u as fp32, exactly: each byte, offset by 128, becomes the low mantissa byte of
 * 2^23 (one byte permute), and 2^23 + 128 is subtracted (one add); cheaper than 16 integer-to-float
 * conversions, whose throughput would bound a kernel below the memory's. */
static __device__ __forceinline__ void lc_unpack_i8x16(const uint4 &u, float (&f)[16]) {
    const uint32_t w[4] = {u.x ^ 0x80808080u, u.y ^ 0x80808080u, u.z ^ 0x80808080u, u.w ^ 0x80808080u};
#pragma unroll
    for (int j = 0; j < 4; j++) {
#pragma unroll
        for (int b = 0; b < 4; b++)
            f[4 * j + b] = __int_as_float((int)__byte_perm(w[j], 0x4B000000u, 0x7540u | b)) - 8388736.0f;
    }
}

/* 8 elements of T at p (16-byte aligned) as FP32, through the read-only cache. */
template <typename T> static __device__ __forceinline__ void lc_load8(const T *p, float (&f)[8]) {
    uint4 u = __ldg(reinterpret_cast<const uint4 *>(p));
    lc_unpack8<T>(u, f);
}

/* 8 elements of T at p (16-byte aligned; shared or global memory) as FP32, by a plain load. */
template <typename T> static __device__ __forceinline__ void lc_load8_any(const T *p, float (&f)[8]) {
    const uint4 u = *reinterpret_cast<const uint4 *>(p);
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

/* The 16-bit GEMV family's loop over the weights (gemv_tpl_kernel, gemv_fused_kernel): a group's thread
 * takes the 16-byte chunks first, first + STEP, ... of its RW weight rows wr[r] (K8 chunks a row; row r
 * is live when r % R < rows, a dead row loads zeros), U chunks of every row in flight per round,
 * streamed with __ldcs (each weight is read once per product), and adds the chunk's 8 weights times
 * token row t's 8 inputs at xr[t] to acc[r][t]: through the read-only cache (XLDG, x in global memory)
 * or by plain loads (x may be in shared memory). One order of FP32 operations, so the kernels that
 * share this loop compute the same bits. WAIT: lc_pdl_wait once the first round's weight loads are
 * issued (a programmatic dependent launch fetches weights while the kernel before it finishes; x is
 * read after the wait). */
template <typename T, int NT, int STEP, int R, int RW, int U, bool XLDG, bool WAIT = false>
static __device__ __forceinline__ void lc_gemv_rows(const uint4 *const (&wr)[RW], int rows, const T *const (&xr)[NT],
                                                    int first, int K8, float (&acc)[RW][NT]) {
    for (int c0 = first; c0 < K8; c0 += STEP * U) {
        uint4 wv[U][RW];
#pragma unroll
        for (int u = 0; u < U; u++) {
            const int c = c0 + u * STEP;
#pragma unroll
            for (int r = 0; r < RW; r++)
                wv[u][r] = c < K8 && r % R < rows ? __ldcs(wr[r] + c) : make_uint4(0, 0, 0, 0);
        }
        if (WAIT && c0 == first) lc_pdl_wait();
#pragma unroll
        for (int u = 0; u < U; u++) {
            const int c = c0 + u * STEP;
            if (c >= K8) break;
            float wf[RW][8];
#pragma unroll
            for (int r = 0; r < RW; r++) lc_unpack8<T>(wv[u][r], wf[r]);
#pragma unroll
            for (int t = 0; t < NT; t++) {
                float xf[8];
                if (XLDG) lc_load8<T>(xr[t] + (size_t)c * 8, xf);
                else lc_load8_any<T>(xr[t] + (size_t)c * 8, xf);
#pragma unroll
                for (int r = 0; r < RW; r++)
#pragma unroll
                    for (int e = 0; e < 8; e++) acc[r][t] += wf[r][e] * xf[e];
            }
        }
    }
}

/* Split-K over the S blocks of a thread block cluster (sm_90): each block has put count partial sums in
 * part (its shared memory); then block rank 0's thread with i < count gets in out the sum of element i
 * over the ranks 0 .. S - 1, in rank order, and true. Every thread of every block of the cluster calls
 * it (two cluster barriers: the sums are read before any block exits). Traps before sm_90 (launchers
 * run S = 1 there, lc_launch). */
template <int S>
static __device__ __forceinline__ bool lc_cluster_sum(const float *part, int i, int count, float &out) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    cooperative_groups::cluster_group cl = cooperative_groups::this_cluster();
    cl.sync();
    const bool mine = cl.block_rank() == 0 && i >= 0 && i < count;
    if (mine) {
        float v = 0.0f;
#pragma unroll
        for (int q = 0; q < S; q++) v += *cl.map_shared_rank(part + i, q);
        out = v;
    }
    cl.sync();
    return mine;
#else
    __trap();
    return false;
#endif
}

/* Whether the current device runs thread block clusters (sm_90 and later). */
static inline bool lc_clusters_ok(void) {
    int dev = 0, major = 0;
    if (cudaGetDevice(&dev) != cudaSuccess || cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) !=
                                                   cudaSuccess) {
        (void)cudaGetLastError();
        return false;
    }
    return major >= 9;
}

/* Launches kernel over grid blocks of block threads with smem bytes of dynamic shared memory on stream;
 * with pdl, as a programmatic dependent launch (as lc_launch's). */
template <typename... KArgs, typename... Args>
static kiln_status lc_launch_grid(void (*kernel)(KArgs...), dim3 grid, dim3 block, size_t smem, cudaStream_t stream,
                                  bool pdl, Args... args) {
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = grid;
    cfg.blockDim = block;
    cfg.dynamicSmemBytes = smem;
    cfg.stream = stream;
    cudaLaunchAttribute attr[1] = {};
    attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[0].val.programmaticStreamSerializationAllowed = 1;
    cfg.attrs = attr;
    cfg.numAttrs = pdl ? 1 : 0;
    KILN_CUDA_TRY(cudaLaunchKernelEx(&cfg, kernel, ((KArgs)args)...));
    return KILN_OK;
}

/* Launches kernel over blocks x S blocks (clusters of S along x when S > 1), threads each, smem bytes of
 * dynamic shared memory, on stream; with pdl, as a programmatic dependent launch (sm_90: it may start
 * while the kernel before it still runs, once that one's blocks have all called
 * lc_pdl_launch_dependents; it must call lc_pdl_wait before touching what kernels before it write or
 * read). */
template <typename... KArgs, typename... Args>
static kiln_status lc_launch(void (*kernel)(KArgs...), unsigned blocks, int S, int threads, size_t smem,
                             cudaStream_t stream, bool pdl, Args... args) {
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3(blocks * (unsigned)S);
    cfg.blockDim = dim3((unsigned)threads);
    cfg.dynamicSmemBytes = smem;
    cfg.stream = stream;
    cudaLaunchAttribute attr[2] = {};
    int na = 0;
    if (S > 1) {
        attr[na].id = cudaLaunchAttributeClusterDimension;
        attr[na].val.clusterDim.x = (unsigned)S;
        attr[na].val.clusterDim.y = 1;
        attr[na].val.clusterDim.z = 1;
        na++;
    }
    if (pdl) {
        attr[na].id = cudaLaunchAttributeProgrammaticStreamSerialization;
        attr[na].val.programmaticStreamSerializationAllowed = 1;
        na++;
    }
    cfg.attrs = attr;
    cfg.numAttrs = (unsigned)na;
    KILN_CUDA_TRY(cudaLaunchKernelEx(&cfg, kernel, ((KArgs)args)...));
    return KILN_OK;
}

/* Calls F<__half> or F<bf16> by g's dtype: LC_DISPATCH(g->dtype, launch_x, args...) where launch_x is
 * a function template returning kiln_status. */
#define LC_DISPATCH(dtype, fn, ...) ((dtype) == KILN_F16 ? fn<__half>(__VA_ARGS__) : fn<bf16>(__VA_ARGS__))

#endif
