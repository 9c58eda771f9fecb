/* flash_tile.cuh — the per-tile core of the tensor-core FlashAttention-2 kernels, shared by the tensor
 * engine's fa_kernel (fused_attention.cu: strided and broadcast Q, K, V, masks) and the LLM prefill's
 * fp_kernel (llm_cuda_prefill.cu: K and V gathered from the paged cache). Each kernel addresses and
 * stages its operands its own way and brings a tile of BK keys and their values into shared memory
 * as rows of D + 8 16-bit elements (D a multiple of 16, the head dim zero-padded to it); a warp owns
 * 16 query rows, the lane rows g = lane / 4 and g + 8 (fragment layouts: mma_util.cuh). Per tile the
 * warp runs fa_qk_step for every 16-dim k-step (S = Q K^T), applies its own scale, mask and causal
 * limit to S in the log2 domain (a score times log2(e); -inf for a key the row does not see), then
 * fa_softmax_pv (the online softmax and O += P V). */
#ifndef KILN_CUDA_FLASH_TILE_CUH
#define KILN_CUDA_FLASH_TILE_CUH

#include "backends/cuda/mma_util.cuh"

#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 800
/* s += the scores of head dims 16 kk .. 16 kk + 15: qa, the warp's Q A fragment of that k-step, times
 * the keys of kt ([BK][D + 8] in shared memory). s[n] is the C fragment of keys 8n .. 8n + 7. */
template <typename T, int D, int BK>
static __device__ __forceinline__ void fa_qk_step(float (&s)[BK / 8][4], const uint32_t (&qa)[4], const T *kt, int kk,
                                                  int lane) {
    constexpr int LD = D + 8;
#pragma unroll
    for (int n2 = 0; n2 < BK / 16; n2++) {
        uint32_t b[4];
        fa_ldsm_x4(b, kt + (n2 * 16 + (lane & 7) + ((lane >> 4) << 3)) * LD + kk * 16 + (((lane >> 3) & 1) << 3));
        fa_mma<T>::run(s[2 * n2], qa, b[0], b[1]);
        fa_mma<T>::run(s[2 * n2 + 1], qa, b[2], b[3]);
    }
}

/* One tile of the online softmax and O += P V for the lane's rows r = 0 (g) and 1 (g + 8): s, the
 * tile's scores in the log2 domain (element (n, e) is row e / 2, key 8n + 2 (lane % 4) + e % 2; -inf:
 * not seen), becomes its probabilities; mrow (running max, log2 domain, -inf before any seen key) and
 * lrow (this lane's part of the running sum: the row's sum is over the 4 lanes of the group) are
 * updated, o (the 16 x D FP32 accumulators as D / 8 C fragments) rescaled and P, rounded to T, times
 * the values of vt ([BK][D + 8] in shared memory) added. */
template <typename T, int D, int BK>
static __device__ __forceinline__ void fa_softmax_pv(float (&s)[BK / 8][4], float (&o)[D / 8][4], float (&mrow)[2],
                                                     float (&lrow)[2], const T *vt, int lane) {
    constexpr int LD = D + 8, NT = BK / 8;
    const float NEG_INF = -INFINITY;
    float corr[2], msub[2];
#pragma unroll
    for (int r = 0; r < 2; r++) {
        float mx = mrow[r];
#pragma unroll
        for (int n = 0; n < NT; n++) mx = fmaxf(mx, fmaxf(s[n][2 * r], s[n][2 * r + 1]));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
        msub[r] = mx == NEG_INF ? 0.0f : mx; /* no visible key yet: every exp below is 0 */
        corr[r] = ku_exp2_approx(mrow[r] - msub[r]);
        mrow[r] = mx;
    }
    float ls[2] = {0.0f, 0.0f};
#pragma unroll
    for (int n = 0; n < NT; n++)
#pragma unroll
        for (int e = 0; e < 4; e++) {
            s[n][e] = ku_exp2_approx(s[n][e] - msub[e >> 1]);
            ls[e >> 1] += s[n][e];
        }
#pragma unroll
    for (int r = 0; r < 2; r++) lrow[r] = lrow[r] * corr[r] + ls[r];
#pragma unroll
    for (int j = 0; j < D / 8; j++) {
        o[j][0] *= corr[0];
        o[j][1] *= corr[0];
        o[j][2] *= corr[1];
        o[j][3] *= corr[1];
    }
#pragma unroll
    for (int kk = 0; kk < BK / 16; kk++) {
        const uint32_t pa[4] = {fa_mma<T>::pack(s[2 * kk][0], s[2 * kk][1]), fa_mma<T>::pack(s[2 * kk][2], s[2 * kk][3]),
                                fa_mma<T>::pack(s[2 * kk + 1][0], s[2 * kk + 1][1]),
                                fa_mma<T>::pack(s[2 * kk + 1][2], s[2 * kk + 1][3])};
#pragma unroll
        for (int dn = 0; dn < D / 16; dn++) {
            uint32_t b[4];
            fa_ldsm_x4_trans(b, vt + (kk * 16 + (lane & 7) + (((lane >> 3) & 1) << 3)) * LD + dn * 16 + ((lane >> 4) << 3));
            fa_mma<T>::run(o[2 * dn], pa, b[0], b[1]);
            fa_mma<T>::run(o[2 * dn + 1], pa, b[2], b[3]);
        }
    }
}

/* The lane's two output rows: row r's D / 8 pairs (columns 8j + 2 (lane % 4), + 1) of o divided by the
 * row's sum (lrow[r] summed over the group's 4 lanes: every lane of the warp calls this), stored as
 * 32-bit pairs at orow[r] + 8j for 8j < d (d a multiple of 8); orow[r] NULL: row r is not stored. A
 * row with no seen key gives NaN. */
template <typename T, int D>
static __device__ __forceinline__ void fa_store_rows(const float (&o)[D / 8][4], const float (&lrow)[2], T *const (&orow)[2],
                                                     int d, int lane) {
#pragma unroll
    for (int r = 0; r < 2; r++) {
        float l = lrow[r];
        l += __shfl_xor_sync(0xffffffffu, l, 1);
        l += __shfl_xor_sync(0xffffffffu, l, 2);
        if (!orow[r]) continue;
        const float inv = 1.0f / l;
        T *p = orow[r] + 2 * (lane & 3);
#pragma unroll
        for (int j = 0; j < D / 8; j++)
            if (j * 8 < d) /* d is a multiple of 8: a whole 8-column tile is in or out */
                *reinterpret_cast<uint32_t *>(p + j * 8) = fa_mma<T>::pack(o[j][2 * r] * inv, o[j][2 * r + 1] * inv);
    }
}
#endif

#endif
