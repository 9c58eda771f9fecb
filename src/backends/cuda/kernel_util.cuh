/* kernel_util.cuh — helpers shared by the CUDA op-family kernels (elementwise*.cu, reduce.cu,
 * norm.cu): float32 views of the storage types, 16-byte vector access, warp/block reductions,
 * launch sizing for grid-stride loops, reading small host parameter tensors, fill-value bit patterns,
 * and the dtype checks their `supports` functions share. Everything is static inline: each .cu gets its own copy. */
#ifndef KILN_CUDA_KERNEL_UTIL_CUH
#define KILN_CUDA_KERNEL_UTIL_CUH

#include "backends/cuda/cuda_kernels.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

extern "C" {
#include "core/half.h"
}

typedef __nv_bfloat16 bf16;

/* Threads per block of the flat (grid-stride) kernels. */
#define KU_THREADS 256

/* ---------------------------------------------------------------- device: conversions */

/* float32 value of a storage element (float types exactly; integers rounded to nearest). */
static __device__ __forceinline__ float ku_f32(float x) { return x; }
static __device__ __forceinline__ float ku_f32(__half x) { return __half2float(x); }
static __device__ __forceinline__ float ku_f32(bf16 x) { return __bfloat162float(x); }

/* A float32 rounded (to nearest even) into storage type T. */
template <typename T> static __device__ __forceinline__ T ku_from_f32(float v);
template <> __device__ __forceinline__ float ku_from_f32<float>(float v) { return v; }
template <> __device__ __forceinline__ __half ku_from_f32<__half>(float v) { return __float2half_rn(v); }
template <> __device__ __forceinline__ bf16 ku_from_f32<bf16>(float v) { return __float2bfloat16_rn(v); }

/* ---------------------------------------------------------------- device: fast math */

#define KU_LOG2E 1.4426950408889634f /* log2(e): exp(x) = 2^(x log2(e)) */

/* 2^x and 1/x by the special function unit (ex2.approx / rcp.approx, denormals flushed: a relative
 * error of about 2^-22), one instruction each, for kernels whose results are rounded far coarser. */
static __device__ __forceinline__ float ku_exp2_approx(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
    return y;
}
static __device__ __forceinline__ float ku_rcp_approx(float x) {
    float y;
    asm("rcp.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
    return y;
}

/* Whether T is one of the float storage types (float, __half, bf16) that compute in float32. */
template <typename T> struct ku_float_type { static const bool value = false; };
template <> struct ku_float_type<float> { static const bool value = true; };
template <> struct ku_float_type<__half> { static const bool value = true; };
template <> struct ku_float_type<bf16> { static const bool value = true; };

/* ---------------------------------------------------------------- device: vector access */

/* An unsigned integer type of exactly BYTES bytes (1..16), for moving BYTES bytes in one access. */
template <int BYTES> struct ku_bits;
template <> struct ku_bits<1> { typedef uint8_t type; };
template <> struct ku_bits<2> { typedef uint16_t type; };
template <> struct ku_bits<4> { typedef uint32_t type; };
template <> struct ku_bits<8> { typedef uint2 type; };
template <> struct ku_bits<16> { typedef uint4 type; };

/* Elements of T per 16-byte vector. */
template <typename T> struct ku_vec { static const int n = 16 / (int)sizeof(T); };

/* v[0..N) = p[0..N) in one access of N * sizeof(T) bytes (p aligned to that size). */
template <typename T, int N> static __device__ __forceinline__ void ku_load(T (&v)[N], const T *p) {
    typedef typename ku_bits<N * (int)sizeof(T)>::type B;
    B b = *reinterpret_cast<const B *>(p);
    memcpy(v, &b, sizeof b);
}
/* p[0..N) = v[0..N) in one access (p aligned to N * sizeof(T)). */
template <typename T, int N> static __device__ __forceinline__ void ku_store(T *p, const T (&v)[N]) {
    typedef typename ku_bits<N * (int)sizeof(T)>::type B;
    B b;
    memcpy(&b, v, sizeof b);
    *reinterpret_cast<B *>(p) = b;
}

static inline bool ku_aligned16(const void *p) { return ((uintptr_t)p & 15) == 0; }

/* ---------------------------------------------------------------- device: reductions */

static __device__ __forceinline__ float ku_warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
static __device__ __forceinline__ float ku_warp_max(float v) {
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

/* Sum of v over the block (blockDim.x a multiple of 32, at most 1024), returned to every thread.
 * sh holds 32 floats of shared memory; all threads must call it. */
static __device__ __forceinline__ float ku_block_sum(float v, float *sh) {
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    v = ku_warp_sum(v);
    if (lane == 0) sh[warp] = v;
    __syncthreads();
    v = lane < nw ? sh[lane] : 0.0f;
    v = ku_warp_sum(v);
    __syncthreads(); /* sh may be reused by the caller right after */
    return v;
}

/* ---------------------------------------------------------------- host: launch sizing */

/* Blocks of `threads` threads for a grid-stride loop over `items` per-thread work items: enough to
 * cover the work, capped at `waves` rounds of fully resident blocks (2048 threads per SM, so at
 * least 2 x SMs blocks whenever the work allows), and at least one. */
static inline unsigned ku_blocks(int64_t items, int threads, const kiln_cuda_ctx *ctx, int waves = 1) {
    int64_t sms = ctx->sm_count > 0 ? ctx->sm_count : 1;
    int64_t cap = sms * (2048 / threads) * waves;
    int64_t need = (items + threads - 1) / threads;
    if (need > cap) need = cap;
    return need < 1 ? 1u : (unsigned)need;
}

/* Opts kernel f into `bytes` of dynamic shared memory (and, with max_carveout, all of the SM's
 * unified memory as shared memory) on the current device, once per device: done is the kernel's own
 * flag word (bit d: device d, >= 64 every time). Never while stream is being captured (the attributes
 * are not stream work): then it returns KILN_OK and the first call outside a capture sets them. */
template <typename K>
static kiln_status ku_smem_opt_in(K *f, size_t bytes, bool max_carveout, unsigned long long *done, cudaStream_t stream) {
    int dev = 0;
    KILN_CUDA_TRY(cudaGetDevice(&dev));
    if (dev < 64 && (__atomic_load_n(done, __ATOMIC_ACQUIRE) >> dev & 1)) return KILN_OK;
    cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
    KILN_CUDA_TRY(cudaStreamIsCapturing(stream, &cs));
    if (cs != cudaStreamCaptureStatusNone) return KILN_OK;
    KILN_CUDA_TRY(cudaFuncSetAttribute(f, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes));
    if (max_carveout)
        KILN_CUDA_TRY(cudaFuncSetAttribute(f, cudaFuncAttributePreferredSharedMemoryCarveout, cudaSharedmemCarveoutMaxShared));
    if (dev < 64) __atomic_fetch_or(done, 1ull << dev, __ATOMIC_RELEASE);
    return KILN_OK;
}

/* ---------------------------------------------------------------- host: tensors and checks */

static inline bool ku_absent(const kiln_cuda_tensor *t) { return t->ndim < 0; }
/* Element count (1 for a scalar, 0 for an absent tensor). */
static inline int64_t ku_numel(const kiln_cuda_tensor *t) { return t->ndim < 0 ? 0 : kiln_numel(t->ndim, t->dims); }

static inline bool ku_is_float(kiln_dtype t) { return t == KILN_F32 || t == KILN_F16 || t == KILN_BF16; }
static inline bool ku_is_sint(kiln_dtype t) { return t == KILN_I8 || t == KILN_I16 || t == KILN_I32 || t == KILN_I64; }
static inline bool ku_is_uint(kiln_dtype t) { return t == KILN_U8 || t == KILN_U16 || t == KILN_U32 || t == KILN_U64; }
static inline bool ku_is_int(kiln_dtype t) { return ku_is_sint(t) || ku_is_uint(t); }

/* Value of input i of n, or NULL when absent. */
static inline const kiln_value *ku_in(const kiln_graph *g, const kiln_node *n, int i) { return kiln_node_input(g, n, i); }
static inline const kiln_value *ku_out(const kiln_graph *g, const kiln_node *n, int i) { return kiln_node_output(g, n, i); }

/* KILN_ERR_UNSUPPORTED naming the op and the dtype of input i. */
static inline kiln_status ku_refuse_dtype(const kiln_node *n, int i, kiln_dtype t) {
    return kiln_error(KILN_ERR_UNSUPPORTED, "%s (cuda): input %d of dtype %s is not supported", n->op_type, i,
                      kiln_dtype_name(t));
}

/* KILN_OK when optional input i is absent or will have a host copy at run time, else
 * KILN_ERR_UNSUPPORTED naming it (`what`): the kernel reads it from .host. */
static inline kiln_status ku_need_host(const kiln_graph *g, const kiln_node *n, int i, const char *what) {
    const kiln_value *v = ku_in(g, n, i);
    if (!v || kiln_cuda_value_on_host(g, n->inputs[i])) return KILN_OK;
    return kiln_error(KILN_ERR_UNSUPPORTED, "%s (cuda): input %d ('%s', value '%s') is computed on the device, but "
                      "the kernel needs it on the host", n->op_type, i, what, v->name);
}

/* Reads a host integer tensor of at most one dimension (int32 or int64) into out[0..*count), at
 * most cap values; `what` names it in errors. */
static inline kiln_status ku_host_ints(const kiln_node *n, const kiln_cuda_tensor *t, const char *what, int64_t *out,
                                       int cap, int *count) {
    if (!t->host && ku_numel(t) != 0) /* an empty tensor may have no data at all */
        return kiln_error(KILN_ERR_INTERNAL, "%s (cuda): input '%s' has no host copy", n->op_type, what);
    if ((t->host_dtype != KILN_I64 && t->host_dtype != KILN_I32) || t->ndim > 1)
        return kiln_error(KILN_ERR_INVALID_ARGUMENT, "%s: input '%s' must be a 1-D int32/int64 tensor, got %s of rank %d",
                          n->op_type, what, kiln_dtype_name(t->host_dtype), t->ndim);
    int64_t cnt = ku_numel(t);
    if (cnt > cap)
        return kiln_error(KILN_ERR_INVALID_ARGUMENT, "%s: input '%s' has %lld values (at most %d allowed)", n->op_type,
                          what, (long long)cnt, cap);
    for (int64_t i = 0; i < cnt; i++)
        out[i] = t->host_dtype == KILN_I64 ? ((const int64_t *)t->host)[i] : ((const int32_t *)t->host)[i];
    *count = (int)cnt;
    return KILN_OK;
}

/* The bit pattern of v stored as dtype t (floats rounded to nearest even, integers truncated toward
 * zero like a C cast, bool v != 0), in the low kiln_dtype_size(t) bytes: a fill value for the
 * dtype-generic kernels that move elements by their size. */
static inline uint64_t ku_value_bits(kiln_dtype t, double v) {
    uint64_t b = 0;
    switch (t) {
    case KILN_F32: { float f = (float)v; memcpy(&b, &f, 4); break; }
    case KILN_F64: memcpy(&b, &v, 8); break;
    case KILN_F16: b = kiln_f32_to_f16((float)v); break;
    case KILN_BF16: b = kiln_f32_to_bf16((float)v); break;
    case KILN_BOOL: b = v != 0.0; break;
    default: {
        int64_t s = isfinite(v) && fabs(v) < 9.2e18 ? (int64_t)v : 0;
        size_t es = kiln_dtype_size(t);
        b = es >= 8 ? (uint64_t)s : (uint64_t)s & ((UINT64_C(1) << (8 * es)) - 1);
    }
    }
    return b;
}

/* outer = prod dims[0, axis), len = dims[axis], inner = prod dims(axis, ndim). */
static inline void ku_split_axis(const kiln_cuda_tensor *t, int axis, int64_t *outer, int64_t *len, int64_t *inner) {
    *outer = kiln_numel(axis, t->dims);
    *len = t->dims[axis];
    *inner = kiln_numel(t->ndim - axis - 1, t->dims + axis + 1);
}

#endif
