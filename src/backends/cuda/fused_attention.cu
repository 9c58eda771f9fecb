/* fused_attention.cu — kiln.Attention (ir/fused_ops.h) on the GPU, two kernels:
 *
 *  - fa_kernel (float16 / bfloat16 with D = Dv in {32, 64, 96, 128}, compute capability >= 8.0):
 *    FlashAttention-2 on the tensor cores (mma.sync m16n8k16, float32 accumulation). A block of 4
 *    warps takes 64 query rows of one output batch index, each warp 16 of them; K and V go through
 *    shared memory in tiles of 64 keys, double-buffered by cp.async (tile j + 1 loads while tile j is
 *    used). Per tile a warp computes its 16 x 64 scores S = Q K^T in registers, applies scale, mask
 *    and the causal limit (scores kept times log2(e), so each probability is one ex2; a whole tile
 *    of visible keys skips the per-key limit, and a 16-bit padding mask is read a key pair per
 *    32-bit load), runs the online softmax in float32 (running max and sum per row), packs
 *    the probabilities P to the storage type and adds P V into its 16 x D float32 accumulators. A
 *    causal block stops at its last visible key tile (the per-tile core, flash_tile.cuh, is shared
 *    with the LLM prefill attention). Tails (Sq, Sk not multiples of 64) are zero
 *    rows in shared memory, keys past Sk score -inf, rows past Sq are not written.
 *  - at_kernel (everything else: float32, other head dims up to AT_DMAX, D != Dv, older GPUs,
 *    unaligned tensors): on CUDA cores. A block of 4 warps takes 16 query rows of one output batch
 *    index (4 rows per warp) into shared memory, then walks the keys in tiles of 32: K and V tiles go
 *    through shared memory (float32), lane j of a warp scores key j against each of its rows, and an
 *    online softmax in float32 rescales the row's accumulators, which each lane keeps for head dims
 *    lane, lane + 32, ... .
 *
 * Semantics follow the CPU kernel (src/backends/cpu/attention.c): batch dims broadcast like numpy,
 * K/V's head axis (batch dim -1) is read through kv_repeat (grouped-query attention, no copies), a
 * float mask is added to the scaled score, a bool mask puts mask_fill where false, then causal sets
 * key j > i + Sk - Sq to -inf. A row whose keys are all -inf gives NaN, as on the CPU. The score
 * matrix is never stored. Head dims above AT_DMAX are refused at build time. */
#include "backends/cuda/kernel_util.cuh"
#include "backends/cuda/flash_tile.cuh"
#include "ir/fused_ops.h"

#include <math.h>

#define AT_DMAX 128
#define AT_WARPS 4
#define AT_ROWS_PER_WARP 4
#define AT_BQ (AT_WARPS * AT_ROWS_PER_WARP)
#define AT_BK 32

/* How one operand's matrices lie over the output's batch dims: element strides (0 where the operand
 * is broadcast) and the divisor of the head axis (kv_repeat for K and V, else 1). */
typedef struct at_view {
    int64_t strides[KILN_MAX_DIMS];
    int64_t rep;
} at_view;

typedef struct at_args {
    int nb;
    int64_t bdims[KILN_MAX_DIMS], batch;
    at_view q, k, v, m, o;
    int64_t sq, sk, d, dv, mq, mk;
    int64_t ldq, ldk, ldv, ldo; /* elements between consecutive rows (sequence positions) of each operand */
    float scale, fill;
    int causal, mask_kind; /* mask_kind: 0 none, 1 float (added), 2 bool (mask_fill where false) */
} at_args;

static __device__ __forceinline__ int64_t at_offset(const at_view &v, int nb, const int64_t *bdims, int64_t t) {
    int64_t off = 0;
    for (int i = nb - 1; i >= 0; i--) {
        int64_t c = t % bdims[i];
        t /= bdims[i];
        if (i == nb - 1 && v.rep > 1) c /= v.rep;
        off += c * v.strides[i];
    }
    return off;
}

/* ---------------------------------------------------------------- CUDA cores: at_kernel */

template <typename T>
__global__ void __launch_bounds__(AT_WARPS * 32) at_kernel(const at_args a, const T *__restrict__ qd, const T *__restrict__ kd,
                                                          const T *__restrict__ vd, const void *__restrict__ md,
                                                          T *__restrict__ od) {
    __shared__ float qs[AT_BQ][AT_DMAX];
    __shared__ float ks[AT_BK][AT_DMAX + 1];
    __shared__ float vs[AT_BK][AT_DMAX];
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int64_t row0 = (int64_t)blockIdx.x * AT_BQ;
    const int d = (int)a.d, dv = (int)a.dv;
    for (int64_t t = blockIdx.y; t < a.batch; t += gridDim.y) {
        const T *qb = qd + at_offset(a.q, a.nb, a.bdims, t), *kb = kd + at_offset(a.k, a.nb, a.bdims, t);
        const T *vb = vd + at_offset(a.v, a.nb, a.bdims, t);
        T *ob = od + at_offset(a.o, a.nb, a.bdims, t);
        int64_t mo = a.mask_kind ? at_offset(a.m, a.nb, a.bdims, t) : 0;
        __syncthreads(); /* the previous batch index is done with qs */
        for (int e = tid; e < AT_BQ * d; e += AT_WARPS * 32) {
            int r = e / d, c = e - r * d;
            qs[r][c] = row0 + r < a.sq ? ku_f32(qb[(row0 + r) * a.ldq + c]) : 0.0f;
        }
        float mrow[AT_ROWS_PER_WARP], lrow[AT_ROWS_PER_WARP], acc[AT_ROWS_PER_WARP][AT_DMAX / 32];
        for (int r = 0; r < AT_ROWS_PER_WARP; r++) {
            mrow[r] = -INFINITY;
            lrow[r] = 0.0f;
            for (int c = 0; c < AT_DMAX / 32; c++) acc[r][c] = 0.0f;
        }
        for (int64_t j0 = 0; j0 < a.sk; j0 += AT_BK) {
            __syncthreads(); /* qs written / the previous tile consumed */
            for (int e = tid; e < AT_BK * d; e += AT_WARPS * 32) {
                int j = e / d, c = e - j * d;
                ks[j][c] = j0 + j < a.sk ? ku_f32(kb[(j0 + j) * a.ldk + c]) : 0.0f;
            }
            for (int e = tid; e < AT_BK * dv; e += AT_WARPS * 32) {
                int j = e / dv, c = e - j * dv;
                vs[j][c] = j0 + j < a.sk ? ku_f32(vb[(j0 + j) * a.ldv + c]) : 0.0f;
            }
            __syncthreads();
            const int64_t key = j0 + lane;
            for (int r = 0; r < AT_ROWS_PER_WARP; r++) {
                const int lr = warp * AT_ROWS_PER_WARP + r;
                const int64_t i = row0 + lr;
                if (i >= a.sq) continue; /* the whole warp skips: i is uniform across it */
                bool valid = key < a.sk;
                float s = -INFINITY;
                if (valid) {
                    float dot = 0.0f;
                    for (int c = 0; c < d; c++) dot = fmaf(qs[lr][c], ks[lane][c], dot);
                    s = a.scale * dot;
                    if (a.mask_kind) {
                        int64_t mi = mo + (a.mq == 1 ? 0 : i * a.mk) + (a.mk == 1 ? 0 : key);
                        if (a.mask_kind == 2) {
                            if (!((const uint8_t *)md)[mi]) s = a.fill;
                        } else {
                            s += ku_f32(((const T *)md)[mi]);
                        }
                    }
                    if (a.causal && key > i + a.sk - a.sq) s = -INFINITY;
                }
                float mnew = fmaxf(mrow[r], ku_warp_max(valid ? s : -INFINITY));
                float p = 0.0f, corr = 1.0f;
                if (mnew != -INFINITY) {
                    p = valid ? __expf(s - mnew) : 0.0f;
                    corr = __expf(mrow[r] - mnew);
                }
                mrow[r] = mnew;
                lrow[r] = lrow[r] * corr + ku_warp_sum(p);
                for (int c = 0; c < AT_DMAX / 32; c++) acc[r][c] *= corr;
                for (int j = 0; j < AT_BK; j++) {
                    float pj = __shfl_sync(0xffffffffu, p, j);
                    for (int c = 0; c < AT_DMAX / 32; c++)
                        if (lane + 32 * c < dv) acc[r][c] = fmaf(pj, vs[j][lane + 32 * c], acc[r][c]);
                }
            }
        }
        for (int r = 0; r < AT_ROWS_PER_WARP; r++) {
            const int64_t i = row0 + warp * AT_ROWS_PER_WARP + r;
            if (i >= a.sq) continue;
            T *orow = ob + i * a.ldo;
            float inv = 1.0f / lrow[r];
            for (int c = 0; c < AT_DMAX / 32; c++)
                if (lane + 32 * c < dv) orow[lane + 32 * c] = ku_from_f32<T>(acc[r][c] * inv);
        }
    }
}

/* ---------------------------------------------------------------- tensor cores: fa_kernel */

#define FA_WARPS 4
#define FA_BQ (FA_WARPS * 16) /* query rows per block: 16 per warp (the mma's M) */
#define FA_BK 64              /* keys per shared-memory tile */
#ifndef FA_MINB /* blocks per SM the registers must allow (D = 64: 4 blocks of 45 KB shared memory fit) */
#define FA_MINB(D) ((D) <= 64 ? 4 : 2)
#endif

#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 800 /* fa_load_rows exists where fa_kernel has a body */
/* rows [r0, r0 + R) of an [n, d] matrix at src with rows ld apart (d <= D, d and ld multiples of 8)
 * into dst ([R][D + 8], 16-byte chunks spread over the block); rows at or past n and columns at or
 * past d become zeros (so that padded head dims add nothing and 0-probability keys never meet NaN
 * garbage in V). */
template <typename T, int D, int R>
static __device__ __forceinline__ void fa_load_rows(T *dst, const T *src, int64_t r0, int64_t n, int d, int64_t ld) {
    constexpr int LD = D + 8, CH = D / 8; /* elements per row in shared memory, 16-byte chunks per row */
    for (int e = threadIdx.x; e < R * CH; e += FA_WARPS * 32) {
        int r = e / CH, c = (e - r * CH) * 8;
        bool ok = r0 + r < n && c < d;
        fa_cp16(dst + r * LD + c, ok ? src + (r0 + r) * ld + c : src, ok);
    }
}

#endif

/* Shared memory of fa_kernel<T, D>: Q [64][D + 8], K and V [2][64][D + 8] each (the 16-byte row pad
 * makes the 8 rows of an ldmatrix hit 8 distinct bank quads). */
/* The element offsets of Q, K, V, the mask and O for output batch index t (at_offset for each view, from one
 * decomposition of t in 32-bit arithmetic where it fits: 64-bit division is a long software routine). */
static __device__ __forceinline__ void fa_offsets(const at_args &a, int64_t t, int64_t (&off)[5]) {
    off[0] = off[1] = off[2] = off[3] = off[4] = 0;
    const bool narrow = a.batch <= 0xffffffffll;
    for (int i = a.nb - 1; i >= 0; i--) {
        int64_t c;
        if (narrow) {
            const uint32_t tt = (uint32_t)t, b = (uint32_t)a.bdims[i];
            c = tt % b;
            t = tt / b;
        } else {
            c = t % a.bdims[i];
            t /= a.bdims[i];
        }
        const bool last = i == a.nb - 1;
        off[0] += c * a.q.strides[i];
        off[1] += (last && a.k.rep > 1 ? c / a.k.rep : c) * a.k.strides[i];
        off[2] += (last && a.v.rep > 1 ? c / a.v.rep : c) * a.v.strides[i];
        off[3] += c * a.m.strides[i]; /* the mask's rep is 1 */
        off[4] += c * a.o.strides[i];
    }
}

template <int D> static constexpr size_t fa_smem_bytes() { return (size_t)(FA_BQ + 4 * FA_BK) * (D + 8) * 2; }

/* O [batch, Sq, d] = attention of Q [.., Sq, d], K [.., Sk, d], V [.., Sk, d] (views and row strides
 * in a, d = a.d = a.dv, a multiple of 8 and at most D: the head dim is zero-padded to D in shared memory); T is
 * __half or bf16, the mask T (added) or bool. Grid: x over 64-row query blocks, y over batch indices
 * (grid-stride). Needs fa_smem_bytes<D>() of dynamic shared memory and sm_80+. */
template <typename T, int D>
__global__ void __launch_bounds__(FA_WARPS * 32, FA_MINB(D)) fa_kernel(const at_args a, const T *__restrict__ qd, const T *__restrict__ kd,
                                                          const T *__restrict__ vd, const void *__restrict__ md,
                                                          T *__restrict__ od) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    constexpr int LD = D + 8, KS = D / 16, NT = FA_BK / 8; /* k-steps over D, 8-key score tiles per tile */
    extern __shared__ __align__(16) unsigned char fa_smem[];
    T *qs = reinterpret_cast<T *>(fa_smem), *ks = qs + FA_BQ * LD, *vs = ks + 2 * FA_BK * LD;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, q4 = lane & 3;
    const int64_t row0 = (int64_t)blockIdx.x * FA_BQ;
    const int64_t rows[2] = {row0 + warp * 16 + g, row0 + warp * 16 + g + 8}; /* this lane's query rows */
    const float NEG_INF = -INFINITY;
    const float scale2 = a.scale * KU_LOG2E, fill2 = a.fill * KU_LOG2E; /* -inf stays -inf */
    const int d = (int)a.d;
    /* the mask, per lane: a byte pointer to each of its two rows' mask rows (rows past Sq read row
     * Sq - 1: their results are never written), the byte step per key (0 for a [.., Sq, 1] mask) and
     * whether both rows read the same mask row (a [.., 1, Sk] padding mask: half the loads) */
    const int mesz = a.mask_kind == 2 ? 1 : (int)sizeof(T), mstep = a.mk == 1 ? 0 : mesz;
    const bool mshared = a.mq == 1;
    int64_t mrow_off[2];
    for (int r = 0; r < 2; r++) mrow_off[r] = a.mq == 1 ? 0 : (rows[r] < a.sq ? rows[r] : a.sq - 1) * a.mk * mesz;
    for (int64_t t = blockIdx.y; t < a.batch; t += gridDim.y) {
        int64_t off[5];
        fa_offsets(a, t, off);
        const T *qb = qd + off[0], *kb = kd + off[1], *vb = vd + off[2];
        T *ob = od + off[4];
        const unsigned char *mb[2] = {(const unsigned char *)md + off[3] * mesz + mrow_off[0],
                                      (const unsigned char *)md + off[3] * mesz + mrow_off[1]};
        /* keys this block can see: causal row i sees keys j <= i + Sk - Sq */
        int64_t kend = a.sk;
        if (a.causal && row0 + FA_BQ + a.sk - a.sq < kend) kend = row0 + FA_BQ + a.sk - a.sq;
        const int64_t ntiles = kend > 0 ? (kend + FA_BK - 1) / FA_BK : 0;
        __syncthreads(); /* the previous batch index is done with the shared tiles */
        if (ntiles > 0) {
            fa_load_rows<T, D, FA_BQ>(qs, qb, row0, a.sq, d, a.ldq);
            fa_load_rows<T, D, FA_BK>(ks, kb, 0, a.sk, d, a.ldk);
            fa_load_rows<T, D, FA_BK>(vs, vb, 0, a.sk, d, a.ldv);
        }
        fa_commit();
        float o[D / 8][4], mrow[2] = {NEG_INF, NEG_INF}, lrow[2] = {0.0f, 0.0f};
        for (int j = 0; j < D / 8; j++) o[j][0] = o[j][1] = o[j][2] = o[j][3] = 0.0f;
        uint32_t qf[KS][4];
        for (int64_t it = 0; it < ntiles; it++) {
            const int buf = (int)(it & 1);
            const int64_t j0 = it * FA_BK;
            /* keys of this tile that exist (klim) and that row r sees (vlim[r], <= 0: none); key j0 + c
             * of row r is visible when c < vlim[r] */
            const int klim = (int)(a.sk - j0 < FA_BK ? a.sk - j0 : FA_BK);
            int vlim[2];
            for (int r = 0; r < 2; r++) {
                int64_t v = klim;
                if (a.causal) {
                    const int64_t c = rows[r] + a.sk - a.sq + 1 - j0;
                    if (c < v) v = c < -1 ? -1 : c;
                }
                vlim[r] = (int)v;
            }
            /* this tile's mask values, loaded before the wait and the Q K^T mma cover their latency,
             * raw (16-bit T or bool byte) two to a register: mv[n][r] holds row r's keys
             * j0 + 8n + 2q (low half) and + 1 (high half); keys past Sk read key Sk - 1 (they score -inf) */
            uint32_t mv[NT][2];
            /* a whole tile of visible keys: no per-key limit below; with a 16-bit per-key mask whose
             * rows are 4-byte aligned, each lane's key pair is one 32-bit load */
            const bool full = !a.causal && klim == FA_BK;
            const unsigned char *mt[2] = {mb[0] + j0 * mstep, mb[1] + j0 * mstep};
            const bool mpairs = full && a.mask_kind == 1 && mstep == 2 && ((uintptr_t)mt[0] & 3) == 0 &&
                                ((uintptr_t)mt[1] & 3) == 0;
            if (mpairs) {
                for (int n = 0; n < NT; n++) {
                    mv[n][0] = *reinterpret_cast<const uint32_t *>(mt[0] + (n * 8 + 2 * q4) * 2);
                    mv[n][1] = mshared ? mv[n][0] : *reinterpret_cast<const uint32_t *>(mt[1] + (n * 8 + 2 * q4) * 2);
                }
            } else if (a.mask_kind) {
                for (int n = 0; n < NT; n++)
                    for (int r = 0; r < 2; r++) {
                        if (mshared && r == 1) {
                            mv[n][1] = mv[n][0];
                            continue;
                        }
                        const int c0 = n * 8 + 2 * q4, c1 = c0 + 1;
                        const unsigned char *p0 = mt[r] + (c0 < klim ? c0 : klim - 1) * mstep;
                        const unsigned char *p1 = mt[r] + (c1 < klim ? c1 : klim - 1) * mstep;
                        uint32_t lo, hi;
                        if (a.mask_kind == 2) {
                            lo = *p0;
                            hi = *p1;
                        } else {
                            lo = *reinterpret_cast<const unsigned short *>(p0);
                            hi = *reinterpret_cast<const unsigned short *>(p1);
                        }
                        mv[n][r] = lo | hi << 16;
                    }
            }
            if (it + 1 < ntiles) { /* prefetch the next tile into the other buffer (freed by the last sync) */
                fa_load_rows<T, D, FA_BK>(ks + (buf ^ 1) * FA_BK * LD, kb, (it + 1) * FA_BK, a.sk, d, a.ldk);
                fa_load_rows<T, D, FA_BK>(vs + (buf ^ 1) * FA_BK * LD, vb, (it + 1) * FA_BK, a.sk, d, a.ldv);
                fa_commit();
                fa_wait<1>(); /* all but the prefetch: this tile (and Q) landed */
            } else {
                fa_wait<0>();
            }
            __syncthreads();
            if (it == 0)
                for (int kk = 0; kk < KS; kk++)
                    fa_ldsm_x4(qf[kk], qs + (warp * 16 + (lane & 15)) * LD + kk * 16 + ((lane >> 4) << 3));
            const T *kt = ks + buf * FA_BK * LD, *vt = vs + buf * FA_BK * LD;
            /* S = Q K^T: s[n] holds keys j0 + 8n .. j0 + 8n + 7 */
            float s[NT][4];
            for (int n = 0; n < NT; n++) s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.0f;
            for (int kk = 0; kk < KS; kk++) fa_qk_step<T, D, FA_BK>(s, qf[kk], kt, kk, lane);
            /* scale, mask, causal limit, key tail, in the log2 domain (every score times log2(e), so
             * that each exponential below is one ex2): element (n, e) is row rows[e / 2], key
             * j0 + 8n + 2q + e % 2 */
            for (int n = 0; n < NT; n++)
                for (int e = 0; e < 4; e++) {
                    float x = s[n][e] * scale2;
                    const unsigned short mraw = (unsigned short)(mv[n][e >> 1] >> (16 * (e & 1)));
                    if (a.mask_kind == 1) x = fmaf(ku_f32(fa_mma<T>::from_bits(mraw)), KU_LOG2E, x);
                    else if (a.mask_kind == 2 && mraw == 0) x = fill2;
                    s[n][e] = full || n * 8 + 2 * q4 + (e & 1) < vlim[e >> 1] ? x : NEG_INF;
                }
            fa_softmax_pv<T, D, FA_BK>(s, o, mrow, lrow, vt, lane); /* online softmax, O += P V */
            __syncthreads(); /* this buffer is refilled by the next iteration's prefetch */
        }
        fa_wait<0>(); /* nothing in flight when no tile ran */
        /* rows past Sq are not written; one with no visible key gives NaN, as on the CPU */
        T *const orow[2] = {rows[0] < a.sq ? ob + rows[0] * a.ldo : NULL, rows[1] < a.sq ? ob + rows[1] * a.ldo : NULL};
        fa_store_rows<T, D>(o, lrow, orow, d, lane);
    }
#endif
}

/* Launches fa_kernel<T, D>, raising its dynamic shared memory limit first when it needs more than
 * 48 KB (once per device: the runtime runs every plan eagerly before capturing it). */
template <typename T, int D>
static kiln_status fa_launch(const at_args &a, dim3 grid, const kiln_cuda_tensor *q, const kiln_cuda_tensor *k,
                             const kiln_cuda_tensor *v, const void *mp, const kiln_cuda_tensor *y, kiln_cuda_ctx *ctx) {
    constexpr size_t smem = fa_smem_bytes<D>();
    if (smem > 48 * 1024) {
        static unsigned long long raised; /* bit per device */
        int dev = 0;
        KILN_CUDA_TRY(cudaGetDevice(&dev));
        unsigned long long bit = dev < 64 ? 1ull << dev : 0;
        if (!bit || !(__atomic_load_n(&raised, __ATOMIC_ACQUIRE) & bit)) {
            KILN_CUDA_TRY(cudaFuncSetAttribute(fa_kernel<T, D>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
            __atomic_fetch_or(&raised, bit, __ATOMIC_ACQ_REL);
        }
    }
    fa_kernel<T, D><<<grid, FA_WARPS * 32, smem, ctx->stream>>>(a, (const T *)q->data, (const T *)k->data,
                                                                (const T *)v->data, mp, (T *)y->data);
    KILN_CUDA_LAUNCH_CHECK("fa_kernel");
    return KILN_OK;
}

/* Whether fa_kernel takes this call: 16-bit storage, D = Dv a multiple of 8 up to 128 (run padded to
 * 32, 64, 96 or 128), sm_80+ (mma.sync bf16, cp.async, ldmatrix), Q, K, V 16-byte aligned with row
 * strides of whole 16-byte units (every row then is aligned), the output 4-byte aligned with an even
 * row stride. */
static bool fa_takes(const at_args *a, kiln_dtype t, const kiln_cuda_tensor *q, const kiln_cuda_tensor *k,
                     const kiln_cuda_tensor *v, const kiln_cuda_tensor *y, const kiln_cuda_ctx *ctx) {
    if (t != KILN_F16 && t != KILN_BF16) return false;
    if (a->d != a->dv || a->d % 8 != 0 || a->d < 8 || a->d > 128) return false;
    if (ctx->cc_major < 8) return false;
    if (a->ldq % 8 != 0 || a->ldk % 8 != 0 || a->ldv % 8 != 0 || a->ldo % 2 != 0) return false;
    return ku_aligned16(q->data) && ku_aligned16(k->data) && ku_aligned16(v->data) && ((uintptr_t)y->data & 3) == 0;
}

/* Lays x (rank >= 2; the mask padded with leading 1s to rank 2) over nb batch dims like the CPU's
 * view_of: strides of its own dims (mat elements per matrix), 0 where its dim is 1; its head axis
 * (times rep) merges into bdims. Fails on a batch dim that does not broadcast. */
static kiln_status at_view_of(const kiln_node *n, int ndim, const int64_t *dims, int nb, int64_t rep, int64_t mat,
                              at_view *v, int64_t *bdims, const char *what) {
    int xb = ndim - 2, pad = nb - xb;
    int64_t stride = mat;
    for (int i = nb - 1; i >= 0; i--) {
        int64_t di = i < pad ? 1 : dims[i - pad];
        v->strides[i] = di == 1 && !(i == nb - 1 && rep > 1) ? 0 : stride;
        stride *= di;
        int64_t eff = i == nb - 1 ? di * rep : di;
        if (eff == 1) continue;
        if (bdims[i] != 1 && bdims[i] != eff)
            return kiln_error(KILN_ERR_SHAPE, "%s: batch dim %d of %s is %lld, others have %lld", n->op_type, i, what,
                              (long long)eff, (long long)bdims[i]);
        bdims[i] = eff;
    }
    v->rep = rep;
    return KILN_OK;
}

/* Layout 0 (matrices [..., S, D] with numpy-broadcast batch dims over a.nb of them): the sizes, the
 * views of Q, K, V (growing a.bdims) and the row strides. */
static kiln_status at_geometry_matrices(const kiln_node *n, const kiln_cuda_tensor *q, const kiln_cuda_tensor *k,
                                        const kiln_cuda_tensor *v, int64_t rep, at_args *a) {
    if (q->ndim < 2 || k->ndim < 2 || v->ndim < 2 || (rep > 1 && (k->ndim < 3 || v->ndim < 3)))
        return kiln_error(KILN_ERR_SHAPE, "Attention: Q, K, V need rank >= 2 (>= 3 with kv_repeat %lld), have %d, %d, %d",
                          (long long)rep, q->ndim, k->ndim, v->ndim);
    a->sq = q->dims[q->ndim - 2];
    a->d = q->dims[q->ndim - 1];
    a->sk = k->dims[k->ndim - 2];
    a->dv = v->dims[v->ndim - 1];
    if (k->dims[k->ndim - 1] != a->d || v->dims[v->ndim - 2] != a->sk)
        return kiln_error(KILN_ERR_SHAPE, "Attention: Q, K and V shapes do not fit");
    KILN_TRY(at_view_of(n, q->ndim, q->dims, a->nb, 1, a->sq * a->d, &a->q, a->bdims, "Q"));
    KILN_TRY(at_view_of(n, k->ndim, k->dims, a->nb, rep, a->sk * a->d, &a->k, a->bdims, "K"));
    KILN_TRY(at_view_of(n, v->ndim, v->dims, a->nb, rep, a->sk * a->dv, &a->v, a->bdims, "V"));
    a->ldq = a->ldk = a->d;
    a->ldv = a->dv;
    return KILN_OK;
}

/* One operand of layout 1 or 2 over batch dims [B, H]: sequence rows ld apart, heads hstride apart. */
static void at_seq_view(int64_t s, int64_t ld, int64_t hstride, int64_t rep, at_view *v) {
    memset(v, 0, sizeof *v);
    v->strides[0] = s * ld;
    v->strides[1] = hstride;
    v->rep = rep;
}

/* Layouts 1 (Q [B, Sq, H, D], K [B, Sk, Hk, D], V [B, Sk, Hk, Dv]) and 2 (QKV [B, S, 3, H, D]; kp and
 * vp, copies of it, are moved to K's and V's first element): batch dims [B, H]. */
static kiln_status at_geometry_seq_first(int64_t layout, const kiln_cuda_tensor *q, kiln_cuda_tensor *kp,
                                         kiln_cuda_tensor *vp, int64_t rep, at_args *a) {
    int64_t h;
    a->nb = 2;
    if (layout == 2) {
        if (q->ndim != 5 || q->dims[2] != 3 || rep != 1)
            return kiln_error(KILN_ERR_SHAPE, "Attention: packed QKV must be [B, S, 3, H, D] (rank %d) without kv_repeat",
                              q->ndim);
        h = q->dims[3];
        a->sq = a->sk = q->dims[1];
        a->d = a->dv = q->dims[4];
        a->ldq = a->ldk = a->ldv = 3 * h * a->d;
        size_t es = kiln_dtype_size(q->dtype);
        kp->data = (char *)q->data + (size_t)(h * a->d) * es;
        vp->data = (char *)q->data + (size_t)(2 * h * a->d) * es;
        at_seq_view(a->sq, a->ldq, a->d, 1, &a->q);
        a->k = a->v = a->q;
    } else {
        const kiln_cuda_tensor *k = kp, *v = vp;
        if (q->ndim != 4 || k->ndim != 4 || v->ndim != 4)
            return kiln_error(KILN_ERR_SHAPE, "Attention: layout 1 needs Q, K and V of rank 4 [B, S, H, D]");
        h = q->dims[2];
        a->sq = q->dims[1];
        a->d = q->dims[3];
        a->sk = k->dims[1];
        a->dv = v->dims[3];
        if (k->dims[0] != q->dims[0] || v->dims[0] != q->dims[0] || k->dims[3] != a->d || v->dims[1] != a->sk ||
            k->dims[2] != v->dims[2] || k->dims[2] * rep != h)
            return kiln_error(KILN_ERR_SHAPE, "Attention: Q, K and V shapes do not fit layout 1 (kv_repeat %lld)", (long long)rep);
        a->ldq = h * a->d;
        a->ldk = k->dims[2] * a->d;
        a->ldv = k->dims[2] * a->dv;
        at_seq_view(a->sq, a->ldq, a->d, 1, &a->q);
        at_seq_view(a->sk, a->ldk, a->d, rep, &a->k);
        at_seq_view(a->sk, a->ldv, a->dv, rep, &a->v);
    }
    a->bdims[0] = q->dims[0];
    a->bdims[1] = h;
    a->ldo = h * a->dv;
    at_seq_view(a->sq, a->ldo, a->dv, 1, &a->o);
    return KILN_OK;
}

static kiln_status exec_attention(const kiln_node *n, const kiln_cuda_tensor *in, int nin, const kiln_cuda_tensor *out,
                                  int nout, kiln_cuda_ctx *ctx) {
    const int64_t layout = kiln_attr_int(n, "layout", 0);
    if (layout < 0 || layout > 2) return kiln_error(KILN_ERR_INVALID_ARGUMENT, "Attention: layout %lld is not 0, 1 or 2", (long long)layout);
    if (nin < (layout == 2 ? 1 : 3)) return kiln_error(KILN_ERR_INVALID_ARGUMENT, "Attention needs Q, K and V");
    const kiln_cuda_tensor *q = &in[0], *m = nin > 3 && !ku_absent(&in[3]) ? &in[3] : NULL;
    kiln_cuda_tensor kv[2] = {layout == 2 ? in[0] : in[1], layout == 2 ? in[0] : in[2]}; /* packed: moved below */
    const kiln_cuda_tensor *k = &kv[0], *v = &kv[1], *y = &out[0];
    if (!ku_is_float(q->dtype) || k->dtype != q->dtype || v->dtype != q->dtype || y->dtype != q->dtype)
        return ku_refuse_dtype(n, 0, q->dtype);
    if (m && m->dtype != q->dtype && m->dtype != KILN_BOOL) return ku_refuse_dtype(n, 3, m->dtype);
    at_args a;
    memset(&a, 0, sizeof a);
    int64_t rep = kiln_attr_int(n, "kv_repeat", 1);
    a.scale = kiln_attr_float(n, "scale", 1.0f);
    a.fill = kiln_attr_float(n, "mask_fill", -INFINITY);
    a.causal = kiln_attr_int(n, "causal", 0) != 0;
    if (rep < 1) return kiln_error(KILN_ERR_SHAPE, "Attention: kv_repeat must be >= 1, is %lld", (long long)rep);
    /* the mask, padded with leading 1s to rank >= 2 */
    int64_t md[KILN_MAX_DIMS] = {1, 1};
    int mr = 2;
    if (m) {
        mr = m->ndim < 2 ? 2 : m->ndim;
        for (int i = 0; i < m->ndim; i++) md[mr - m->ndim + i] = m->dims[i];
        a.mask_kind = m->dtype == KILN_BOOL ? 2 : 1;
    }
    if (layout == 0) {
        int rank = q->ndim;
        if (k->ndim > rank) rank = k->ndim;
        if (v->ndim > rank) rank = v->ndim;
        if (mr > rank) rank = mr;
        a.nb = rank < 2 ? 0 : rank - 2;
        for (int i = 0; i < a.nb; i++) a.bdims[i] = 1;
        KILN_TRY(at_geometry_matrices(n, q, k, v, rep, &a));
    } else {
        KILN_TRY(at_geometry_seq_first(layout, q, &kv[0], &kv[1], rep, &a));
        if (mr - 2 > a.nb) return kiln_error(KILN_ERR_SHAPE, "Attention: the mask has rank %d, more than the scores", mr);
    }
    if (a.d > AT_DMAX || a.dv > AT_DMAX)
        return kiln_error(KILN_ERR_UNSUPPORTED, "Attention (cuda): head dims %lld / %lld; at most %d", (long long)a.d,
                          (long long)a.dv, AT_DMAX);
    if (m) {
        a.mq = md[mr - 2];
        a.mk = md[mr - 1];
        if ((a.mq != 1 && a.mq != a.sq) || (a.mk != 1 && a.mk != a.sk))
            return kiln_error(KILN_ERR_SHAPE, "Attention: the mask's last dims do not fit the scores");
        int64_t before[KILN_MAX_DIMS];
        memcpy(before, a.bdims, sizeof before);
        KILN_TRY(at_view_of(n, mr, md, a.nb, 1, a.mq * a.mk, &a.m, a.bdims, "the mask"));
        if (layout != 0 && memcmp(before, a.bdims, sizeof before))
            return kiln_error(KILN_ERR_SHAPE, "Attention: the mask's batch dims do not broadcast to [B, H]");
    }
    if (layout == 0) { /* O: contiguous matrices over the batch dims */
        int64_t stride = a.sq * a.dv;
        for (int i = a.nb - 1; i >= 0; i--) {
            a.o.strides[i] = stride;
            stride *= a.bdims[i];
        }
        a.ldo = a.dv;
    }
    a.batch = kiln_numel(a.nb, a.bdims);
    if (ku_numel(y) != a.batch * a.sq * a.dv)
        return kiln_error(KILN_ERR_SHAPE, "Attention: the output has %lld elements, expected %lld", (long long)ku_numel(y),
                          (long long)(a.batch * a.sq * a.dv));
    if (a.batch * a.sq * a.dv == 0) return KILN_OK;
    if (a.sk == 0) return kiln_error(KILN_ERR_UNSUPPORTED, "Attention (cuda): no keys");
    const void *mp = m ? m->data : NULL;
    if (fa_takes(&a, q->dtype, q, k, v, y, ctx)) {
        dim3 fgrid((unsigned)((a.sq + FA_BQ - 1) / FA_BQ), (unsigned)(a.batch < 65535 ? a.batch : 65535));
        bool h = q->dtype == KILN_F16;
        switch ((a.d + 31) / 32 * 32) { /* the head dim padded up to the next instantiation */
        case 32: return h ? fa_launch<__half, 32>(a, fgrid, q, k, v, mp, y, ctx) : fa_launch<bf16, 32>(a, fgrid, q, k, v, mp, y, ctx);
        case 64: return h ? fa_launch<__half, 64>(a, fgrid, q, k, v, mp, y, ctx) : fa_launch<bf16, 64>(a, fgrid, q, k, v, mp, y, ctx);
        case 96: return h ? fa_launch<__half, 96>(a, fgrid, q, k, v, mp, y, ctx) : fa_launch<bf16, 96>(a, fgrid, q, k, v, mp, y, ctx);
        default: return h ? fa_launch<__half, 128>(a, fgrid, q, k, v, mp, y, ctx) : fa_launch<bf16, 128>(a, fgrid, q, k, v, mp, y, ctx);
        }
    }
    int64_t qblocks = (a.sq + AT_BQ - 1) / AT_BQ;
    if (qblocks > INT32_MAX) return kiln_error(KILN_ERR_UNSUPPORTED, "Attention (cuda): %lld queries", (long long)a.sq);
    dim3 grid((unsigned)qblocks, (unsigned)(a.batch < 65535 ? a.batch : 65535));
    switch (q->dtype) {
    case KILN_F32:
        at_kernel<float><<<grid, AT_WARPS * 32, 0, ctx->stream>>>(a, (const float *)q->data, (const float *)k->data,
                                                                 (const float *)v->data, mp, (float *)y->data);
        break;
    case KILN_F16:
        at_kernel<__half><<<grid, AT_WARPS * 32, 0, ctx->stream>>>(a, (const __half *)q->data, (const __half *)k->data,
                                                                  (const __half *)v->data, mp, (__half *)y->data);
        break;
    default:
        at_kernel<bf16><<<grid, AT_WARPS * 32, 0, ctx->stream>>>(a, (const bf16 *)q->data, (const bf16 *)k->data,
                                                                (const bf16 *)v->data, mp, (bf16 *)y->data);
        break;
    }
    KILN_CUDA_LAUNCH_CHECK("at_kernel");
    return KILN_OK;
}

/* Q, K, V (packed: QKV) float of one dtype, the mask that dtype or bool, head dims (when known) <= AT_DMAX. */
static kiln_status sup_attention(const kiln_graph *g, const kiln_node *n) {
    const bool packed = kiln_attr_int(n, "layout", 0) == 2;
    const kiln_value *q = ku_in(g, n, 0), *k = packed ? q : ku_in(g, n, 1), *v = packed ? q : ku_in(g, n, 2);
    const kiln_value *m = ku_in(g, n, 3);
    if (!q || !k || !v) return kiln_error(KILN_ERR_INVALID_ARGUMENT, "Attention needs Q, K and V");
    if (!ku_is_float(q->dtype) || k->dtype != q->dtype || v->dtype != q->dtype)
        return kiln_error(KILN_ERR_UNSUPPORTED, "Attention (cuda): Q, K, V must share one float dtype");
    if (m && m->dtype != q->dtype && m->dtype != KILN_BOOL)
        return kiln_error(KILN_ERR_UNSUPPORTED, "Attention (cuda): a %s mask", kiln_dtype_name(m->dtype));
    int64_t d = q->ndim >= 1 ? q->dims[q->ndim - 1].value : -1, dv = v->ndim >= 1 ? v->dims[v->ndim - 1].value : -1;
    if (d > AT_DMAX || dv > AT_DMAX)
        return kiln_error(KILN_ERR_UNSUPPORTED, "Attention (cuda): head dims %lld / %lld; the kernel takes at most %d",
                          (long long)d, (long long)dv, AT_DMAX);
    return KILN_OK;
}

extern "C" const kiln_cuda_kernel kiln_cuda_kernels_fused_attention[] = {
    {"Attention", KILN_FUSED_DOMAIN, exec_attention, sup_attention},
    {NULL, NULL, NULL, NULL},
};
