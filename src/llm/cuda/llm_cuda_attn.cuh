/* llm_cuda_attn.cuh — what the attention kernels (llm_cuda_attn.cu: prefill, llm_cuda_decode.cu:
 * decode) share: the paged-cache geometry of one sequence, the head-dim geometry of an instantiation
 * (a fast path compiled for one head dim, or a generic one taking any multiple of 8 up to a bound),
 * the load of a lane's output dims of a value row, the E4M3 conversions of an FP8 cache, and the
 * dispatch from a head dim to its instantiation. */
#ifndef KILN_LLM_CUDA_ATTN_CUH
#define KILN_LLM_CUDA_ATTN_CUH

#include "llm/cuda/llm_cuda_util.cuh"

#include <cuda_fp8.h>

/* The paged-cache geometry of one sequence in one layer. */
typedef struct att_cache {
    const int32_t *blocks; /* the sequence's block table row */
    int bs;                /* tokens per block */
    size_t block_stride;   /* elements per block: n_kv_head * bs * hd */
    size_t head_off;       /* elements to the KV head's rows inside a block: g * bs * hd */
} att_cache;

/* Element offset of key (or value) j of the sequence's KV head, rows of hd elements. */
static __device__ __forceinline__ size_t att_slot(const att_cache &c, int j, int hd) {
    return (size_t)c.blocks[j / c.bs] * c.block_stride + c.head_off + (size_t)(j % c.bs) * hd;
}

/* The head-dim geometry of an instantiation. HDC: the head dim when fixed at compile time (the fast
 * paths 64, 80, 96, 128, 256; then HDM == HDC), else 0 and the head dim is a kernel argument, a
 * multiple of 8 <= HDM. HDM: the largest head dim it takes (its registers and shared memory). A lane
 * owns E = ceil(HDM / 32) output dims: contiguous [lane E, lane E + E) when the head dim is fixed at
 * 32, 64, 128 or 256 (one vector access of E elements), else strided lane + 32 e (coalesced scalar
 * accesses), those at or past the head dim unused. */
template <int HDC, int HDM> struct att_dims {
    static_assert(HDM % 8 == 0 && HDM >= 8 && HDM <= LLMC_MAX_HEAD_DIM && (HDC == 0 || HDC == HDM), "head dims");
    static constexpr int E = (HDM + 31) / 32;
    static constexpr bool CONTIG = HDC == HDM && HDM % 32 == 0 && (E & (E - 1)) == 0;
    static __device__ __forceinline__ int dim(int lane, int e) { return CONTIG ? lane * E + e : lane + 32 * e; }
    /* the lane's e-th dim exists (always in the contiguous layout) */
    static __device__ __forceinline__ bool has(int lane, int e, int hd) { return CONTIG || dim(lane, e) < hd; }
};

/* vf = the lane's output dims of the 16-bit row `row` (head dim hd) as FP32, 0 for unused dims. */
template <typename T, int HDC, int HDM>
static __device__ __forceinline__ void att_load_dims(float (&vf)[att_dims<HDC, HDM>::E], const T *row, int lane, int hd) {
    using D = att_dims<HDC, HDM>;
    if constexpr (D::CONTIG) {
        T v[D::E];
        ku_load<T, D::E>(v, row + lane * D::E);
#pragma unroll
        for (int e = 0; e < D::E; e++) vf[e] = ku_f32(v[e]);
    } else {
#pragma unroll
        for (int e = 0; e < D::E; e++) vf[e] = D::has(lane, e, hd) ? ku_f32(row[D::dim(lane, e)]) : 0.0f;
    }
}

/* ---- FP8 (E4M3) caches: a key or value is stored as e4m3(x / scale), scale per (layer, KV head) */

/* The E4M3 code of x / scale: nearest, ties to even, saturated at +-448 (src/quant/fp8.h's rule). */
static __device__ __forceinline__ uint8_t att_to_e4m3(float x, float scale) {
    return (uint8_t)__nv_cvt_float_to_fp8(x / scale, __NV_SATFINITE, __NV_E4M3);
}

/* The value of E4M3 code c times scale. */
static __device__ __forceinline__ float att_from_e4m3(uint8_t c, float scale) {
    const __half_raw h = __nv_cvt_fp8_to_halfraw((__nv_fp8_storage_t)c, __NV_E4M3);
    return __half2float(__half(h)) * scale;
}

/* 8 E4M3 codes at p (8-byte aligned) times scale, as FP32 (ok false: zeros, nothing read). */
static __device__ __forceinline__ void att_load8_e4m3(const uint8_t *p, float scale, bool ok, float (&f)[8]) {
    const uint2 u = ok ? __ldg(reinterpret_cast<const uint2 *>(p)) : make_uint2(0, 0);
    const uint8_t *b = reinterpret_cast<const uint8_t *>(&u);
#pragma unroll
    for (int i = 0; i < 8; i++) f[i] = ok ? att_from_e4m3(b[i], scale) : 0.0f;
}

/* 8 E4M3 codes at p times scale as 8 T in shared memory at dst (16-byte aligned; zeros when !ok): the
 * FP8 cache's keys and values reach the 16-bit tiles of the kernels this way, synchronously. */
template <typename T>
static __device__ __forceinline__ void att_stage8_e4m3(T *dst, const uint8_t *p, float scale, bool ok) {
    float f[8];
    att_load8_e4m3(p, scale, ok, f);
    T v[8];
#pragma unroll
    for (int i = 0; i < 8; i++) v[i] = ku_from_f32<T>(f[i]);
    *reinterpret_cast<uint4 *>(dst) = *reinterpret_cast<const uint4 *>(v);
}

/* The lane's output dims of an FP8 value row, as att_load_dims does for 16-bit rows. */
template <int HDC, int HDM>
static __device__ __forceinline__ void att_load_dims_e4m3(float (&vf)[att_dims<HDC, HDM>::E], const uint8_t *row,
                                                          float scale, int lane, int hd) {
    using D = att_dims<HDC, HDM>;
#pragma unroll
    for (int e = 0; e < D::E; e++) vf[e] = D::has(lane, e, hd) ? att_from_e4m3(row[D::dim(lane, e)], scale) : 0.0f;
}

/* row[dim] = o[e] for the lane's dims that exist (a vector store in the contiguous layout). */
template <typename T, int HDC, int HDM>
static __device__ __forceinline__ void att_store_dims(T *row, const float (&o)[att_dims<HDC, HDM>::E], int lane, int hd) {
    using D = att_dims<HDC, HDM>;
    if constexpr (D::CONTIG) {
        T v[D::E];
#pragma unroll
        for (int e = 0; e < D::E; e++) v[e] = ku_from_f32<T>(o[e]);
        ku_store<T, D::E>(row + lane * D::E, v);
    } else {
#pragma unroll
        for (int e = 0; e < D::E; e++)
            if (D::has(lane, e, hd)) row[D::dim(lane, e)] = ku_from_f32<T>(o[e]);
    }
}

/* Calls L::template run<T, HDC, HDM>(args...) for head dim hd (a multiple of 8, 8..256, checked by
 * the caller): the fast path of 64, 80, 96, 128 or 256, else the generic instantiation of the
 * smallest HDM of 64, 128, 256 that holds hd. */
template <typename L, typename T, typename... A> static kiln_status att_dispatch_hd(int hd, A... args) {
    switch (hd) {
    case 64: return L::template run<T, 64, 64>(args...);
    case 80: return L::template run<T, 80, 80>(args...);
    case 96: return L::template run<T, 96, 96>(args...);
    case 128: return L::template run<T, 128, 128>(args...);
    case 256: return L::template run<T, 256, 256>(args...);
    default: break;
    }
    if (hd <= 64) return L::template run<T, 0, 64>(args...);
    if (hd <= 128) return L::template run<T, 0, 128>(args...);
    return L::template run<T, 0, 256>(args...);
}

/* Whether the attention kernels take these shapes: dtype f16/bf16, head_dim a multiple of 8 in
 * 8..LLMC_MAX_HEAD_DIM, n_head a positive multiple of n_kv_head >= 1. */
static inline bool att_shape_ok(kiln_dtype dtype, int head_dim, int n_head, int n_kv_head) {
    return (dtype == KILN_F16 || dtype == KILN_BF16) && head_dim >= 8 && head_dim <= LLMC_MAX_HEAD_DIM &&
           head_dim % 8 == 0 && n_kv_head >= 1 && n_head >= n_kv_head && n_head % n_kv_head == 0;
}

#endif
