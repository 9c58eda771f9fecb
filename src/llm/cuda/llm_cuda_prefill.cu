/* llm_cuda_prefill.cu — the prefill attention on the tensor cores: FlashAttention-2 (mma.sync m16n8k16,
 * FP32 accumulation, online softmax in FP32; mma_util.cuh) over the paged KV cache, causal with a
 * context offset (the step's new tokens follow the sequence's cached prefix; chunked prefill), any
 * number of query heads per KV head, head dims any multiple of 8 up to 256 (compiled for 64, 80, 96,
 * 128 and 256; others run zero-padded to the next of those), sm_80 and later. llmc_prefill_attention
 * (llm_cuda_attn.cu) picks it or the CUDA-core kernel.
 *
 * Grid (row tiles, KV heads, sequences). The rows of a (sequence, KV head) are its (new token t, query
 * head hg of the group) pairs, row = t * group + hg, so the query heads sharing a KV head share every
 * key and value tile a block loads; row r sees keys 0 .. ctx - n + r / group (with a sliding window
 * W, only the last W of them: the block's walk starts at its first row's first key). A block of 4
 * warps takes 64 rows (16 per warp, the mma's M; the last row tiles, which see the most keys, are the
 * first blocks): Q [64][D + 8] in shared memory, then tiles of BK keys (64 at D <= 128, 32 at 256) of
 * K and V, gathered row by row from their cache blocks by cp.async and double-buffered (tile i + 1
 * loads while tile i is used; an FP8 cache's codes are loaded synchronously and dequantized into the
 * tile); padding rows, keys past the block's last visible key and dims past the head dim are zeros.
 * Per tile a warp computes its 16 x BK scores S = Q K^T, scales them by log2(e) / sqrt(hd), applies
 * the causal limit and window (skipped on a tile every row of the block sees whole), then runs
 * the online softmax and O += P V into its 16 x D FP32 accumulators: the per-tile core of
 * flash_tile.cuh, which the tensor engine's fa_kernel (fused_attention.cu) shares. At D <= 128 a warp
 * keeps its Q fragments in registers; at 256 it reads them from shared memory per tile (registers
 * hold the 16 x 256 accumulators). */
#include "backends/cuda/flash_tile.cuh"
#include "llm/cuda/llm_cuda_attn.cuh"

#include <math.h>

#define FP_WARPS 4
#define FP_BQ (FP_WARPS * 16) /* rows per block */

/* Keys per tile and blocks per SM the registers must allow, by padded head dim D. */
static __host__ __device__ constexpr int fp_tile_keys(int D) { return D <= 128 ? 64 : 32; }
static __host__ __device__ constexpr int fp_min_blocks(int D) { return D <= 64 ? 4 : D <= 128 ? 2 : 1; }

/* Shared memory of fp_kernel<T, D>: Q [FP_BQ][D + 8], K and V [2][BK][D + 8] each (the 16-byte row
 * pad puts the 8 rows of an ldmatrix on 8 distinct bank quads). */
template <int D> static constexpr size_t fp_smem_bytes() {
    return (size_t)(FP_BQ + 4 * fp_tile_keys(D)) * (D + 8) * 2;
}

/* The step as the kernel reads it: llmc_prefill_attn's device pointers and sizes. */
struct fp_args {
    const void *q, *kc, *vc;
    void *out;
    int ldq, ldo;
    const int32_t *seq_start, *ctx_len, *table;
    int table_stride, n_head, n_kv_head, block_size, hd;
    int window;   /* 0: none; else a row sees its last `window` keys only */
    const float *kv_scales; /* an FP8 cache: [2][n_kv_head] scales; NULL: 16-bit */
    float scale2; /* log2(e) / sqrt(hd) */
};

#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 800
/* Keys and values j0 .. j0 + BK - 1 of the KV head c addresses, from the caches kc and vc, into kd and
 * vd ([BK][D + 8] each; a key and its value share their cache offset); keys at or past kend and dims
 * at or past hd become zeros (not read). An FP8 cache (f8: E4M3 codes) is read synchronously, each 8
 * codes dequantized with ksc / vsc into the same 16-bit tiles. */
template <typename T, int D, int BK>
static __device__ __forceinline__ void fp_load_kv(T *kd, T *vd, const T *kc, const T *vc, const att_cache &c, int j0,
                                                  int kend, int hd, bool f8, float ksc, float vsc) {
    constexpr int LD = D + 8, CH = D / 8;
    for (int e = threadIdx.x; e < BK * CH; e += FP_WARPS * 32) {
        const int r = e / CH, col = (e - r * CH) * 8, j = j0 + r;
        const bool ok = j < kend && col < hd;
        const size_t off = ok ? att_slot(c, j, hd) + col : 0;
        if (f8) {
            att_stage8_e4m3<T>(kd + r * LD + col, reinterpret_cast<const uint8_t *>(kc) + off, ksc, ok);
            att_stage8_e4m3<T>(vd + r * LD + col, reinterpret_cast<const uint8_t *>(vc) + off, vsc, ok);
            continue;
        }
        fa_cp16(kd + r * LD + col, kc + off, ok);
        fa_cp16(vd + r * LD + col, vc + off, ok);
    }
}
#endif

template <typename T, int D>
__global__ void __launch_bounds__(FP_WARPS * 32, fp_min_blocks(D)) fp_kernel(const fp_args a) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    constexpr int BK = fp_tile_keys(D), LD = D + 8, KS = D / 16, NT = BK / 8;
    constexpr bool QREG = D <= 128; /* Q fragments in registers for the whole walk */
    static_assert(D % 16 == 0 && BK % 16 == 0, "mma tiles");
    extern __shared__ __align__(16) unsigned char fp_smem[];
    T *qs = reinterpret_cast<T *>(fp_smem), *ks = qs + FP_BQ * LD, *vs = ks + 2 * BK * LD;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, q4 = lane & 3;
    const int seq = blockIdx.z, kvh = blockIdx.y, hd = a.hd;
    const int group = a.n_head / a.n_kv_head, s0 = a.seq_start[seq], n = a.seq_start[seq + 1] - s0;
    /* the last row tiles (the most keys) first: the light ones fill in behind them */
    const int nrows = n * group, row0 = (gridDim.x - 1 - blockIdx.x) * FP_BQ, past = a.ctx_len[seq] - n;
    if (row0 >= nrows) return; /* uniform over the block: before any barrier */
    /* this lane's rows (g and g + 8 of its warp): each sees keys lo .. vis - 1 (vis 0: a padding row) */
    const int rows[2] = {row0 + warp * 16 + g, row0 + warp * 16 + g + 8};
    int vis[2], lo[2];
    for (int r = 0; r < 2; r++) {
        vis[r] = rows[r] < nrows ? past + rows[r] / group + 1 : 0;
        lo[r] = a.window > 0 ? max(0, vis[r] - a.window) : 0;
    }
    const int last = min(row0 + FP_BQ, nrows) - 1;
    const int kend = past + last / group + 1;      /* keys the block sees: its last row's */
    const int kfull = past + row0 / group + 1;     /* keys every row of the block sees: its first row's */
    const int kbeg = a.window > 0 ? max(0, kfull - a.window) : 0; /* the first key any row sees */
    const int klo = a.window > 0 ? max(0, kend - a.window) : 0;   /* every row sees the keys from here */
    const int ntiles = (kend - kbeg + BK - 1) / BK; /* >= 1: every row sees its own key */
    const att_cache c = {a.table + (size_t)seq * a.table_stride, a.block_size, (size_t)a.n_kv_head * a.block_size * hd,
                         (size_t)kvh * a.block_size * hd};
    const T *kc = static_cast<const T *>(a.kc), *vc = static_cast<const T *>(a.vc);
    const bool f8 = a.kv_scales != nullptr;
    const float ksc = f8 ? a.kv_scales[kvh] : 1.0f, vsc = f8 ? a.kv_scales[a.n_kv_head + kvh] : 1.0f;
    /* Q rows of the block: row r is token r / group, head kvh * group + r % group */
    {
        const T *q = static_cast<const T *>(a.q);
        constexpr int CH = D / 8;
        for (int e = threadIdx.x; e < FP_BQ * CH; e += FP_WARPS * 32) {
            const int r = e / CH, col = (e - r * CH) * 8, row = row0 + r;
            const bool ok = row < nrows && col < hd;
            const T *src = q;
            if (ok) src = q + (size_t)(s0 + row / group) * a.ldq + (size_t)(kvh * group + row % group) * hd + col;
            fa_cp16(qs + r * LD + col, src, ok);
        }
    }
    fp_load_kv<T, D, BK>(ks, vs, kc, vc, c, kbeg, kend, hd, f8, ksc, vsc);
    fa_commit();
    const float NEG_INF = -INFINITY;
    float o[D / 8][4], mrow[2] = {NEG_INF, NEG_INF}, lrow[2] = {0.0f, 0.0f};
#pragma unroll
    for (int j = 0; j < D / 8; j++) o[j][0] = o[j][1] = o[j][2] = o[j][3] = 0.0f;
    uint32_t qf[QREG ? KS : 1][4];
    for (int it = 0; it < ntiles; it++) {
        const int buf = it & 1, j0 = kbeg + it * BK;
        if (it + 1 < ntiles) { /* prefetch the next tile into the other buffer (freed by the last barrier) */
            fp_load_kv<T, D, BK>(ks + (buf ^ 1) * BK * LD, vs + (buf ^ 1) * BK * LD, kc, vc, c, j0 + BK, kend, hd, f8,
                                 ksc, vsc);
            fa_commit();
            fa_wait<1>(); /* all but the prefetch: this tile (and Q) landed */
        } else {
            fa_wait<0>();
        }
        __syncthreads();
        const T *qw = qs + (warp * 16 + (lane & 15)) * LD + ((lane >> 4) << 3); /* this lane's ldmatrix row of Q */
        if constexpr (QREG)
            if (it == 0)
#pragma unroll
                for (int kk = 0; kk < KS; kk++) fa_ldsm_x4(qf[kk], qw + kk * 16);
        const T *kt = ks + buf * BK * LD, *vt = vs + buf * BK * LD;
        /* S = Q K^T: s[nt] holds keys j0 + 8 nt .. j0 + 8 nt + 7 */
        float s[NT][4];
#pragma unroll
        for (int nt = 0; nt < NT; nt++) s[nt][0] = s[nt][1] = s[nt][2] = s[nt][3] = 0.0f;
#pragma unroll
        for (int kk = 0; kk < KS; kk++) {
            if constexpr (QREG) {
                fa_qk_step<T, D, BK>(s, qf[kk], kt, kk, lane);
            } else {
                uint32_t qa[4];
                fa_ldsm_x4(qa, qw + kk * 16);
                fa_qk_step<T, D, BK>(s, qa, kt, kk, lane);
            }
        }
        /* scale into the log2 domain and the causal limit (and window): element (nt, e) is row
         * rows[e / 2], key j0 + 8 nt + 2 q4 + e % 2, visible when in [lo[e / 2], vis[e / 2]) */
        const bool full = j0 + BK <= kfull && j0 >= klo;
#pragma unroll
        for (int nt = 0; nt < NT; nt++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const float x = s[nt][e] * a.scale2;
                const int j = j0 + nt * 8 + 2 * q4 + (e & 1);
                s[nt][e] = full || (j < vis[e >> 1] && j >= lo[e >> 1]) ? x : NEG_INF;
            }
        fa_softmax_pv<T, D, BK>(s, o, mrow, lrow, vt, lane); /* online softmax, O += P V */
        __syncthreads(); /* this buffer is refilled by the next iteration's prefetch */
    }
    /* rows past the sequence's are not written; every other row saw its own key */
    T *out = static_cast<T *>(a.out), *orow[2];
#pragma unroll
    for (int r = 0; r < 2; r++)
        orow[r] = rows[r] < nrows ? out + (size_t)(s0 + rows[r] / group) * a.ldo + (size_t)(kvh * group + rows[r] % group) * hd
                                  : NULL;
    fa_store_rows<T, D>(o, lrow, orow, hd, lane);
#endif
}

/* Launches fp_kernel<T, D> for a (D: the head dim padded to an instantiation), opting it into its
 * shared memory first (and into the largest shared-memory carveout: the blocks per SM its registers
 * allow need up to 180 KB). */
template <typename T, int D> static kiln_status fp_launch(const llmc_prefill_attn *a, cudaStream_t stream) {
    static unsigned long long opted; /* bit per device */
    constexpr size_t smem = fp_smem_bytes<D>();
    KILN_TRY(ku_smem_opt_in(fp_kernel<T, D>, smem, true, &opted, stream));
    const int group = a->n_head / a->n_kv_head;
    const fp_args k = {a->q, a->kc, a->vc, a->out, a->ldq, a->ldo, a->seq_start, a->ctx_len, a->table,
                       a->table_stride, a->n_head, a->n_kv_head, a->block_size, a->head_dim, a->window,
                       a->kv_scales, KU_LOG2E / sqrtf((float)a->head_dim)};
    const dim3 grid((unsigned)(((long long)a->max_new * group + FP_BQ - 1) / FP_BQ), (unsigned)a->n_kv_head,
                    (unsigned)a->n_seqs);
    fp_kernel<T, D><<<grid, FP_WARPS * 32, smem, stream>>>(k);
    KILN_CUDA_LAUNCH_CHECK("prefill fp_kernel");
    return KILN_OK;
}

template <typename T> static kiln_status fp_dispatch(const llmc_prefill_attn *a, cudaStream_t stream) {
    const int hd = a->head_dim;
    if (hd <= 64) return fp_launch<T, 64>(a, stream);
    if (hd <= 80) return fp_launch<T, 80>(a, stream);
    if (hd <= 96) return fp_launch<T, 96>(a, stream);
    if (hd <= 128) return fp_launch<T, 128>(a, stream);
    return fp_launch<T, 256>(a, stream);
}

extern "C" kiln_status llmc_prefill_attention_tc(const llmc_prefill_attn *a, cudaStream_t stream) {
    return LC_DISPATCH(a->dtype, fp_dispatch, a, stream);
}
