/* mma_util.cuh — the tensor-core building blocks of the flash-attention kernels (fused_attention.cu's
 * fa_kernel, llm_cuda_prefill.cu's paged prefill): mma.sync m16n8k16 with FP32 accumulation for
 * __half and bf16, packing two FP32 values into one 16-bit pair, ldmatrix (plain and transposed)
 * and cp.async 16-byte copies with their commit / wait. sm_80 and later. */
#ifndef KILN_CUDA_MMA_UTIL_CUH
#define KILN_CUDA_MMA_UTIL_CUH

#include "backends/cuda/kernel_util.cuh"

/* Fragments of mma.sync.aligned.m16n8k16.row.col.f32.{f16,bf16} (PTX ISA, "Matrix Fragments for
 * mma.m16n8k16 with floating point type"). Lane l of the warp, g = l / 4 (groupID), q = l % 4
 * (threadID_in_group); each .b32 register holds two 16-bit elements, the lower column index in the
 * low half.
 *   A (16 x 16, row-major)  a[0] = A[g][2q, 2q+1]      a[1] = A[g+8][2q, 2q+1]
 *                           a[2] = A[g][2q+8, 2q+9]    a[3] = A[g+8][2q+8, 2q+9]
 *   B (16 x 8, K x N)       b[0] = B[2q, 2q+1][g]      b[1] = B[2q+8, 2q+9][g]
 *   C, D (16 x 8, float32)  c[0], c[1] = C[g][2q, 2q+1]    c[2], c[3] = C[g+8][2q, 2q+1]
 * ldmatrix.m8n8.x4: lanes 8m..8m+7 give the row addresses of 8 x 8 matrix m (16 bytes a row) and
 * register m receives that matrix's row l / 4, columns 2q, 2q+1; with .trans its column l / 4, rows
 * 2q, 2q+1. So
 *   - Q (A operand, rows r0.., cols k0..): lane l points at row r0 + l % 16, col k0 + 8 (l / 16):
 *     matrices (rows 0-7, k0), (rows 8-15, k0), (rows 0-7, k0+8), (rows 8-15, k0+8) = a[0..3].
 *   - K (B operand of S = Q K^T: B[d][key] = K[key][d], K rows are keys): lane l points at key
 *     n0 + l % 8 + 8 (l / 16), col k0 + 8 ((l / 8) % 2): registers 0, 1 = b[0], b[1] of keys
 *     n0..n0+7, registers 2, 3 = those of keys n0+8..n0+15.
 *   - V (B operand of O = P V: B[key][dv] = V[key][dv], V rows are keys), .trans: lane l points at
 *     key k0 + l % 8 + 8 ((l / 8) % 2), col n0 + 8 (l / 16): registers 0, 1 = b[0], b[1] of dv
 *     n0..n0+7, registers 2, 3 = those of dv n0+8..n0+15.
 *   - P (A operand of P V) is the score accumulators themselves: keys 16k..16k+15 are the C tiles
 *     2k and 2k+1, and C tile 2k's (c[0], c[1]) / (c[2], c[3]) are a[0] / a[1], tile 2k+1's a[2] / a[3].
 * Each row's values are spread over the 4 lanes of its group (same g): row reductions are
 * __shfl_xor over lane bits 0 and 1. */
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 800 /* the helpers exist where kernels using them have a body */
template <typename T> struct fa_mma;
template <> struct fa_mma<__half> {
    static __device__ __forceinline__ void run(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
        asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                     "{%0,%1,%2,%3};\n"
                     : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
    }
    static __device__ __forceinline__ __half from_bits(unsigned short b) { return __ushort_as_half(b); }
    static __device__ __forceinline__ uint32_t pack(float lo, float hi) {
        __half2 h = __floats2half2_rn(lo, hi); /* .x (low half) = lo */
        uint32_t r;
        memcpy(&r, &h, 4);
        return r;
    }
};
template <> struct fa_mma<bf16> {
    static __device__ __forceinline__ void run(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
        asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                     "{%0,%1,%2,%3};\n"
                     : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
    }
    static __device__ __forceinline__ bf16 from_bits(unsigned short b) { return __ushort_as_bfloat16(b); }
    static __device__ __forceinline__ uint32_t pack(float lo, float hi) {
        __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
        uint32_t r;
        memcpy(&r, &h, 4);
        return r;
    }
};

static __device__ __forceinline__ void fa_ldsm_x4(uint32_t (&r)[4], const void *p) {
    unsigned s = (unsigned)__cvta_generic_to_shared(p);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(s));
}
static __device__ __forceinline__ void fa_ldsm_x4_trans(uint32_t (&r)[4], const void *p) {
    unsigned s = (unsigned)__cvta_generic_to_shared(p);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(s));
}
/* 16 bytes global -> shared without passing through registers; zeros when !valid (src not read). */
static __device__ __forceinline__ void fa_cp16(void *smem, const void *gmem, bool valid) {
    unsigned s = (unsigned)__cvta_generic_to_shared(smem);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(s), "l"(gmem), "r"(valid ? 16 : 0));
}
/* 8 bytes global -> shared through the L1 (cp.async.ca; .cg takes only 16), zero-filled when !valid. */
static __device__ __forceinline__ void fa_cp8(void *smem, const void *gmem, bool valid) {
    unsigned s = (unsigned)__cvta_generic_to_shared(smem);
    asm volatile("cp.async.ca.shared.global [%0], [%1], 8, %2;\n" ::"r"(s), "l"(gmem), "r"(valid ? 8 : 0));
}
static __device__ __forceinline__ void fa_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N> static __device__ __forceinline__ void fa_wait() {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}
#endif

#endif
