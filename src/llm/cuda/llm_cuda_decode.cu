/* llm_cuda_decode.cu — the decode attention (every sequence has one new token) over the paged KV
 * cache, in one launch: grid (splits, KV heads x head chunks, sequences); a block takes one split of
 * the context for up to LLMC_MAX_GROUP query heads of its KV head (more query heads per KV head are
 * cut into chunks of LLMC_MAX_GROUP, a block each). Each of its warps streams tiles of about 4 KB of
 * keys + 4 KB of values (32 keys at head dim <= 64, 16 at <= 128, 8 at <= 256) with cp.async into its
 * own double buffer in shared memory (coalesced 16-byte copies, the next tile in flight while this one
 * is computed), scores from there (a lane per key for the 32-key tiles; two or four lanes per key,
 * joined by shuffles, otherwise), and accumulates its output dims over the value rows; the warps merge
 * through shared memory. With one split the block writes the output; with several the last block of a
 * (sequence, KV head, chunk) to finish (an atomic counter, left at zero for the next launch) combines
 * the splits. Head dims: any multiple of 8 up to 256, fast paths compiled for 64, 80, 96, 128 and 256
 * (llm_cuda_attn.cuh). An FP8 (E4M3) cache's codes are read synchronously and dequantized (times the
 * KV head's scale) into the same 16-bit tiles. With a sliding window a row's keys start at max(0, ctx - window) and the
 * splits cover the window only. Shared memory: about 70 KB a block (opted into beyond 48 KB). Rows may also be
 * the new tokens of a prefill step (row_seq, row_pos: each token over its own causal context, one
 * split), which keeps the GPU busy where the prefill kernel would not: few new tokens, long contexts. */
#include "llm/cuda/llm_cuda_attn.cuh"

#include <math.h>
#include <string.h>

/* Keys and values reach shared memory through cp.async: 16 bytes a lane, zero-filled past the split. */
static __device__ __forceinline__ void dec_cp16(void *smem, const void *gmem, bool valid) {
    const unsigned s = (unsigned)__cvta_generic_to_shared(smem);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(s), "l"(gmem), "r"(valid ? 16 : 0) : "memory");
}
static __device__ __forceinline__ void dec_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int N> static __device__ __forceinline__ void dec_wait() {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

#define DEC_WARPS 4 /* warps of a decode block */
#define DEC_BLOCKS_PER_SM 3 /* resident decode blocks per SM: shared memory (<= 74 KB each) allows 3 */
#define DEC_MAX_SPLITS 1024 /* the reduction keeps a weight per (row, split) in shared memory */

/* Keys of a tile for head dims up to hdm: about 4 KB of 16-bit keys. */
static __host__ __device__ constexpr int dec_tile_keys(int hdm) { return hdm <= 64 ? 32 : hdm <= 128 ? 16 : 8; }

/* The geometry of a warp's tile for head dims up to HDM: TK keys (and their values), staged in two
 * buffers per warp so that the next tile loads while this one is computed. */
template <int HDM> struct dec_geo {
    static constexpr int TK = dec_tile_keys(HDM);  /* keys of a tile */
    static constexpr int LPK = 32 / TK;            /* lanes scoring one key */
    static constexpr int CH = HDM / 8;             /* 16-byte chunks of a (longest) key row */
    static constexpr int CPL = CH / LPK;           /* chunks of its key a lane scores: 8 (5 at 80, 6 at 96) */
    static constexpr int NLD = TK * CH / 32;       /* chunks a lane copies, of K and of V */
    static constexpr int KROW = HDM + 8;           /* padded key row (elements): no bank conflicts */
    static constexpr int VROW = HDM;               /* value row (elements) */
    static constexpr int QROW = HDM + 4;           /* padded query row (floats) */
    static constexpr int KBYTES = TK * KROW * 2;   /* a stage: keys, then values [TK][VROW] */
    static constexpr int STAGE = KBYTES + TK * VROW * 2;
    static constexpr int WARP_BYTES = 2 * STAGE;
    static_assert(CH % LPK == 0 && TK * CH % 32 == 0, "tile geometry");
    static_assert(LLMC_MAX_GROUP * TK * 4 <= KBYTES, "the probabilities fit over a stage's keys");
    static_assert((16 + LLMC_MAX_GROUP * HDM) * 4 <= WARP_BYTES, "a warp's state fits its buffers");
    static_assert(DEC_WARPS * WARP_BYTES >= LLMC_MAX_GROUP * DEC_MAX_SPLITS * 4, "the split weights fit");
};

template <int HDM, int R> static constexpr size_t dec_smem_bytes() {
    return (size_t)DEC_WARPS * dec_geo<HDM>::WARP_BYTES + (size_t)R * dec_geo<HDM>::QROW * 4 + 16;
}

/* A warp's online-softmax state for R query rows (scores in log2 units). */
template <int E, int R> struct dec_state {
    float m[R], l[R], acc[R][E];
};

/* Starts copying keys [j0, min(j0 + TK, k1)) and their values (head dim hd) into `stage` (one commit
 * group is the caller's). Lane kk % TK finds key kk's row in the paged cache; the warp's 16-byte
 * chunks are consecutive within each row (a row is hd contiguous 16-bit values); chunks at or past
 * the head dim (generic instantiations) are not copied and never read. An FP8 cache (f8: kc and vc
 * hold E4M3 codes, 8 bytes a chunk) is read synchronously instead, each chunk dequantized with ksc /
 * vsc into the same 16-bit tile. */
template <typename T, int HDM>
static __device__ __forceinline__ void dec_issue(char *stage, int j0, int k1, const att_cache &c, const T *__restrict__ kc,
                                                 const T *__restrict__ vc, int lane, int hd, bool f8, float ksc,
                                                 float vsc) {
    using G = dec_geo<HDM>;
    const int j = j0 + lane % G::TK, ch_used = hd / 8;
    long long off = 0;
    if (j < k1) off = (long long)att_slot(c, j, hd);
    T *ks = reinterpret_cast<T *>(stage), *vs = reinterpret_cast<T *>(stage + G::KBYTES);
#pragma unroll
    for (int i = 0; i < G::NLD; i++) {
        const int ch = lane + 32 * i, kk = ch / G::CH, seg = ch % G::CH;
        const long long o = __shfl_sync(0xffffffffu, off, kk) + seg * 8;
        const bool ok = j0 + kk < k1;
        if (seg < ch_used && f8) {
            att_stage8_e4m3<T>(ks + kk * G::KROW + seg * 8, reinterpret_cast<const uint8_t *>(kc) + o, ksc, ok);
            att_stage8_e4m3<T>(vs + kk * G::VROW + seg * 8, reinterpret_cast<const uint8_t *>(vc) + o, vsc, ok);
        } else if (seg < ch_used) {
            dec_cp16(ks + kk * G::KROW + seg * 8, kc + o, ok);
            dec_cp16(vs + kk * G::VROW + seg * 8, vc + o, ok);
        }
    }
}

/* The i-th float of a float4 (i a constant after unrolling). */
static __device__ __forceinline__ float dec_f4(const float4 &v, int i) {
    return i == 0 ? v.x : i == 1 ? v.y : i == 2 ? v.z : v.w;
}

/* Attends the `rows` query rows qs ([R][QROW], FP32, pre-scaled by log2(e)/sqrt(hd)) to the tile of
 * keys [j0, min(j0 + TK, k1)) in `stage`. Scores: lane kk % TK takes key kk, its chunks
 * [CPL (lane / TK), + CPL) (LPK lanes and shuffles per key). The probabilities go to shared memory
 * over the keys (no longer needed), then every lane accumulates its output dims over the tile's
 * values. */
template <typename T, int HDC, int HDM, int R>
static __device__ __forceinline__ void dec_tile(dec_state<att_dims<HDC, HDM>::E, R> &st, char *stage, const float *qs,
                                                int rows, int j0, int k1, int lane, int hd) {
    using G = dec_geo<HDM>;
    constexpr int E = att_dims<HDC, HDM>::E;
    const T *ks = reinterpret_cast<const T *>(stage), *vs = reinterpret_cast<const T *>(stage + G::KBYTES);
    float *ps = reinterpret_cast<float *>(stage); /* [R][TK] probabilities, over the keys once scored */
    const int kk = lane % G::TK, hh = lane / G::TK, ch_used = hd / 8;
    float s[R];
#pragma unroll
    for (int r = 0; r < R; r++) s[r] = 0.0f;
    const T *kr = ks + kk * G::KROW + hh * G::CPL * 8;
    const float *qh = qs + hh * G::CPL * 8;
#pragma unroll
    for (int ci = 0; ci < G::CPL; ci++) {
        if (HDC == 0 && hh * G::CPL + ci >= ch_used) continue; /* generic: past the head dim */
        const int d0 = ci * 8;
        float kf[8];
        lc_unpack8<T>(*reinterpret_cast<const uint4 *>(kr + d0), kf);
#pragma unroll
        for (int r = 0; r < R; r++) {
            if (r >= rows) continue; /* uniform */
            const float4 qa = *reinterpret_cast<const float4 *>(qh + r * G::QROW + d0);
            const float4 qb = *reinterpret_cast<const float4 *>(qh + r * G::QROW + d0 + 4);
            float t = s[r];
            t = fmaf(qa.x, kf[0], t);
            t = fmaf(qa.y, kf[1], t);
            t = fmaf(qa.z, kf[2], t);
            t = fmaf(qa.w, kf[3], t);
            t = fmaf(qb.x, kf[4], t);
            t = fmaf(qb.y, kf[5], t);
            t = fmaf(qb.z, kf[6], t);
            s[r] = fmaf(qb.w, kf[7], t);
        }
    }
    /* the LPK lanes of a key are TK apart */
    if (G::LPK >= 2) {
#pragma unroll
        for (int r = 0; r < R; r++) s[r] += __shfl_xor_sync(0xffffffffu, s[r], 16);
    }
    if (G::LPK >= 4) {
#pragma unroll
        for (int r = 0; r < R; r++) s[r] += __shfl_xor_sync(0xffffffffu, s[r], 8);
    }
    const bool valid = j0 + kk < k1;
    __syncwarp(); /* every lane has read its key before ps overwrites them */
#pragma unroll
    for (int r = 0; r < R; r++) {
        if (r >= rows) continue;
        const float sv = valid ? s[r] : -INFINITY;
        const float mn = fmaxf(st.m[r], ku_warp_max(sv)); /* finite: key j0 < k1 is valid */
        const float corr = exp2f(st.m[r] - mn);            /* 0 while m is -inf */
        const float p = valid ? exp2f(sv - mn) : 0.0f;
        st.l[r] = st.l[r] * corr + ku_warp_sum(hh == 0 ? p : 0.0f);
        st.m[r] = mn;
#pragma unroll
        for (int e = 0; e < E; e++) st.acc[r][e] *= corr;
        if (hh == 0) ps[r * G::TK + kk] = p;
    }
    __syncwarp();
#pragma unroll
    for (int k4 = 0; k4 < G::TK; k4 += 4) {
        float4 pr[R];
#pragma unroll
        for (int r = 0; r < R; r++)
            pr[r] = r < rows ? *reinterpret_cast<const float4 *>(ps + r * G::TK + k4) : make_float4(0, 0, 0, 0);
#pragma unroll
        for (int u = 0; u < 4; u++) {
            float vf[E];
            att_load_dims<T, HDC, HDM>(vf, vs + (k4 + u) * G::VROW, lane, hd); /* zero past the split */
#pragma unroll
            for (int r = 0; r < R; r++) {
                if (r >= rows) continue;
                const float p = dec_f4(pr[r], u);
#pragma unroll
                for (int e = 0; e < E; e++) st.acc[r][e] = fmaf(p, vf[e], st.acc[r][e]);
            }
        }
    }
    __syncwarp(); /* the stage may be refilled */
}

/* Grid (splits, n_kv_head * chunks, sequences), DEC_WARPS warps, chunks = ceil(group / R): the block
 * takes keys [split * part, + part) of its sequence's context (none past ctx_len: such blocks exit)
 * for `rows` <= R query heads h0.. of KV head g (blockIdx.y = g * chunks + chunk). Warp w takes the
 * split's tiles w, w + DEC_WARPS, ..., each loaded two tiles ahead by cp.async into the warp's own
 * double buffer; the warps' states merge through shared memory. One split: the block writes the
 * output. Several: it writes its unnormalized output to pa [seq][head][splits][hd] and (max, sum) to
 * pml [seq][head][splits][2], and the last block of the (sequence, blockIdx.y) to arrive (count,
 * reset to 0 by that block) combines the splits. */
template <typename T, int HDC, int HDM, int R>
__global__ void __launch_bounds__(DEC_WARPS * 32, DEC_BLOCKS_PER_SM)
    dec_kernel(const T *__restrict__ q, int ldq, T *__restrict__ out, int ldo, const int32_t *__restrict__ ctx_len,
               const int32_t *__restrict__ table, int table_stride, const T *__restrict__ kc, const T *__restrict__ vc,
               int n_head, int n_kv_head, int bs, float qscale, int part, float *__restrict__ pa, float *__restrict__ pml,
               unsigned *__restrict__ count, const int32_t *__restrict__ row_seq, const int32_t *__restrict__ row_pos,
               int window, const float *__restrict__ kv_scales, int hd_arg) {
    using G = dec_geo<HDM>;
    using D = att_dims<HDC, HDM>;
    extern __shared__ __align__(16) char dsm[];
    lc_pdl_launch_dependents(); /* the output product may fetch its weights meanwhile */
    lc_pdl_wait();
    const int hd = HDC ? HDC : hd_arg;
    const int split = blockIdx.x, splits = gridDim.x, seq = blockIdx.z;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int group = n_head / n_kv_head, chunks = (group + R - 1) / R, g = blockIdx.y / chunks;
    const int h0 = g * group + (blockIdx.y - g * chunks) * R, rows = min(R, (g + 1) * group - h0);
    const int ctx = row_pos ? row_pos[seq] + 1 : ctx_len[seq];
    const int jw = window > 0 && ctx > window ? ctx - window : 0; /* the first key of the window */
    const int k0 = jw + split * part;
    if (k0 >= ctx) return; /* the whole block: before any barrier */
    const int k1 = min(ctx, k0 + part), n_tiles = (k1 - k0 + G::TK - 1) / G::TK;
    const int n_splits = min((ctx - jw + part - 1) / part, splits); /* ctx - jw <= the span: never clamped */
    char *wbase = dsm + warp * G::WARP_BYTES;
    float *qs = reinterpret_cast<float *>(dsm + DEC_WARPS * G::WARP_BYTES);
    int *last = reinterpret_cast<int *>(qs + R * G::QROW);
    const size_t trow = row_seq ? (size_t)row_seq[seq] : (size_t)seq;
    const att_cache c = {table + trow * table_stride, bs, (size_t)n_kv_head * bs * hd, (size_t)g * bs * hd};
    const bool f8 = kv_scales != nullptr;
    const float ksc = f8 ? kv_scales[g] : 1.0f, vsc = f8 ? kv_scales[n_kv_head + g] : 1.0f;
    /* the warp's first two tiles start loading before anything else */
#pragma unroll
    for (int i = 0; i < 2; i++) {
        const int t = warp + i * DEC_WARPS;
        if (t < n_tiles)
            dec_issue<T, HDM>(wbase + i * G::STAGE, k0 + t * G::TK, k1, c, kc, vc, lane, hd, f8, ksc, vsc);
        dec_commit();
    }
    const T *qp = q + (size_t)seq * ldq + (size_t)h0 * hd; /* token index == sequence index */
    for (int i = threadIdx.x; i < R * hd; i += blockDim.x) {
        const int r = i / hd, e = i - r * hd;
        qs[r * G::QROW + e] = r < rows ? ku_f32(qp[i]) * qscale : 0.0f;
    }
    __syncthreads();
    dec_state<D::E, R> st;
#pragma unroll
    for (int r = 0; r < R; r++) {
        st.m[r] = -INFINITY;
        st.l[r] = 0.0f;
#pragma unroll
        for (int e = 0; e < D::E; e++) st.acc[r][e] = 0.0f;
    }
    for (int i = 0, t = warp; t < n_tiles; i++, t += DEC_WARPS) {
        char *stage = wbase + (i & 1) * G::STAGE;
        dec_wait<1>(); /* this lane's copies of tile i are done; __syncwarp makes everyone's visible */
        __syncwarp();
        dec_tile<T, HDC, HDM, R>(st, stage, qs, rows, k0 + t * G::TK, k1, lane, hd);
        const int tn = t + 2 * DEC_WARPS;
        if (tn < n_tiles) dec_issue<T, HDM>(stage, k0 + tn * G::TK, k1, c, kc, vc, lane, hd, f8, ksc, vsc);
        dec_commit();
    }
    dec_wait<0>();
    __syncwarp();
    /* merge the warps: each leaves (m, l) and its accumulator in its own (now idle) buffers */
    float *wm = reinterpret_cast<float *>(wbase), *wacc = wm + 16; /* wm[R], wl[R], then [R][HDM] at 64 bytes */
    if (lane == 0) {
#pragma unroll
        for (int r = 0; r < R; r++) {
            wm[r] = st.m[r];
            wm[R + r] = st.l[r];
        }
    }
#pragma unroll
    for (int r = 0; r < R; r++)
#pragma unroll
        for (int e = 0; e < D::E; e++)
            if (D::has(lane, e, hd)) wacc[r * HDM + D::dim(lane, e)] = st.acc[r][e];
    __syncthreads();
    const int q4 = hd / 4, n4 = rows * q4;
    for (int i = threadIdx.x; i < n4; i += blockDim.x) {
        const int r = i / q4, e4 = (i - r * q4) * 4;
        float M = -INFINITY, L = 0.0f;
        float4 A = make_float4(0, 0, 0, 0);
        for (int w = 0; w < DEC_WARPS; w++) M = fmaxf(M, reinterpret_cast<const float *>(dsm + w * G::WARP_BYTES)[r]);
        for (int w = 0; w < DEC_WARPS; w++) {
            const float *b = reinterpret_cast<const float *>(dsm + w * G::WARP_BYTES);
            if (b[r] == -INFINITY) continue; /* a warp that had no tile */
            const float f = exp2f(b[r] - M);
            const float4 a = *reinterpret_cast<const float4 *>(b + 16 + r * HDM + e4);
            L += b[R + r] * f;
            A.x += a.x * f;
            A.y += a.y * f;
            A.z += a.z * f;
            A.w += a.w * f;
        }
        if (n_splits == 1) {
            const float inv = 1.0f / L;
            const T o[4] = {ku_from_f32<T>(A.x * inv), ku_from_f32<T>(A.y * inv), ku_from_f32<T>(A.z * inv),
                            ku_from_f32<T>(A.w * inv)};
            ku_store<T, 4>(out + (size_t)seq * ldo + (size_t)(h0 + r) * hd + e4, o);
        } else {
            const size_t slot = ((size_t)seq * n_head + h0 + r) * splits + split;
            *reinterpret_cast<float4 *>(pa + slot * hd + e4) = A;
            if (e4 == 0) {
                pml[slot * 2] = M;
                pml[slot * 2 + 1] = L;
            }
        }
    }
    if (n_splits == 1) return;
    /* the last split of this (sequence, KV head, chunk) to finish combines them all */
    __threadfence();
    __syncthreads();
    if (threadIdx.x == 0) {
        unsigned *cnt = count + (size_t)seq * gridDim.y + blockIdx.y;
        const bool is_last = atomicAdd(cnt, 1u) == (unsigned)n_splits - 1;
        if (is_last) *cnt = 0; /* ready for the next launch (graph replays) */
        *last = is_last;
    }
    __syncthreads();
    if (!*last) return;
    __threadfence();
    float *wts = reinterpret_cast<float *>(dsm); /* [rows][n_splits]: the warps' buffers are free again */
    float *row_l = qs;                           /* [rows] */
    for (int r = warp; r < rows; r += DEC_WARPS) {
        const size_t base = ((size_t)seq * n_head + h0 + r) * splits;
        float M = -INFINITY, L = 0.0f;
        for (int sp = lane; sp < n_splits; sp += 32) M = fmaxf(M, __ldcg(pml + (base + sp) * 2));
        M = ku_warp_max(M);
        for (int sp = lane; sp < n_splits; sp += 32) {
            const float f = exp2f(__ldcg(pml + (base + sp) * 2) - M); /* every split saw a key: finite */
            wts[r * n_splits + sp] = f;
            L += __ldcg(pml + (base + sp) * 2 + 1) * f;
        }
        L = ku_warp_sum(L);
        if (lane == 0) row_l[r] = L;
    }
    __syncthreads();
    for (int i = threadIdx.x; i < n4; i += blockDim.x) {
        const int r = i / q4, e4 = (i - r * q4) * 4;
        const float *wr = wts + r * n_splits;
        const float4 *ap = reinterpret_cast<const float4 *>(pa + ((size_t)seq * n_head + h0 + r) * splits * hd + e4);
        float4 A = make_float4(0, 0, 0, 0);
#pragma unroll 8
        for (int sp = 0; sp < n_splits; sp++) {
            const float4 a = __ldcg(ap + (size_t)sp * q4);
            const float f = wr[sp];
            A.x += a.x * f;
            A.y += a.y * f;
            A.z += a.z * f;
            A.w += a.w * f;
        }
        const float inv = 1.0f / row_l[r];
        const T o[4] = {ku_from_f32<T>(A.x * inv), ku_from_f32<T>(A.y * inv), ku_from_f32<T>(A.z * inv),
                        ku_from_f32<T>(A.w * inv)};
        ku_store<T, 4>(out + (size_t)seq * ldo + (size_t)(h0 + r) * hd + e4, o);
    }
}

/* ---------------------------------------------------------------- launch */

extern "C" int llmc_decode_part(int head_dim, int n_seqs, int n_kv_head, int max_ctx, int sm_count, int max_splits) {
    const int gran = DEC_WARPS * dec_tile_keys(head_dim); /* a tile per warp */
    const long long base = (long long)(n_seqs > 0 ? n_seqs : 1) * (n_kv_head > 0 ? n_kv_head : 1);
    const long long slots = (long long)DEC_BLOCKS_PER_SM * (sm_count > 0 ? sm_count : 1);
    long long splits = (2 * slots + base / 2) / base; /* about two waves of resident blocks */
    if (splits < 1) splits = 1;
    long long part = (max_ctx + splits - 1) / splits;
    part = (part + gran - 1) / gran * gran;
    if (part < 2 * gran) part = 2 * gran; /* two tiles per warp: a block's buffers all in flight at once */
    long long cap = max_splits < DEC_MAX_SPLITS ? max_splits : DEC_MAX_SPLITS;
    if (cap < 1) cap = 1;
    if ((max_ctx + part - 1) / part > cap) part = ((max_ctx + cap - 1) / cap + gran - 1) / gran * gran;
    return (int)part;
}

template <typename T, int HDC, int HDM, int R>
static kiln_status dec_launch(const llmc_decode_attn *a, int part, int splits, cudaStream_t stream) {
    const size_t smem = dec_smem_bytes<HDM, R>();
    /* beyond 48 KB, and all shared memory, no L1 to speak of: DEC_BLOCKS_PER_SM blocks fit (the copies
     * bypass L1) */
    static unsigned long long done;
    KILN_TRY(ku_smem_opt_in(dec_kernel<T, HDC, HDM, R>, smem, true, &done, stream));
    const int hd = a->head_dim, chunks = (a->n_head / a->n_kv_head + R - 1) / R;
    const float qscale = 1.4426950408889634f / sqrtf((float)hd); /* scores in log2 units: exp2 */
    float *pa = a->part, *pml = a->part + (size_t)a->n_seqs * a->n_head * splits * hd;
    const dim3 grid((unsigned)splits, (unsigned)(a->n_kv_head * chunks), (unsigned)a->n_seqs);
    return lc_launch_grid(dec_kernel<T, HDC, HDM, R>, grid, dim3(DEC_WARPS * 32), smem, stream, a->pdl,
                          (const T *)a->q, a->ldq, (T *)a->out, a->ldo, a->ctx_len, a->table, a->table_stride,
                          (const T *)a->kc, (const T *)a->vc, a->n_head, a->n_kv_head, a->block_size, qscale, part, pa,
                          pml, a->count, a->row_seq, a->row_pos, a->window, a->kv_scales, hd);
}

/* Rows per block: the smallest of 1, 2, 4, 8 that holds the group (8 for larger groups, in chunks). */
struct dec_launcher {
    template <typename T, int HDC, int HDM> static kiln_status run(const llmc_decode_attn *a, cudaStream_t stream) {
        const int group = a->n_head / a->n_kv_head;
        const int gran = DEC_WARPS * dec_tile_keys(a->head_dim);
        /* the most keys a row sees: the window, when shorter than the contexts */
        const int span = a->window > 0 && a->window < a->max_ctx ? a->window : a->max_ctx;
        const int part = a->part_keys > 0 ? a->part_keys
                         : a->part_keys < 0
                             ? (span + gran - 1) / gran * gran
                             : llmc_decode_part(a->head_dim, a->n_seqs, a->n_kv_head, span, a->sm_count, a->split_cap);
        const int splits = (span + part - 1) / part;
        if (splits > a->split_cap || splits > DEC_MAX_SPLITS)
            return kiln_error(KILN_ERR_INTERNAL, "decode attention: %d splits of %d keys exceed the %d allocated", splits,
                              part, a->split_cap < DEC_MAX_SPLITS ? a->split_cap : DEC_MAX_SPLITS);
        if (group <= 1) return dec_launch<T, HDC, HDM, 1>(a, part, splits, stream);
        if (group <= 2) return dec_launch<T, HDC, HDM, 2>(a, part, splits, stream);
        if (group <= 4) return dec_launch<T, HDC, HDM, 4>(a, part, splits, stream);
        return dec_launch<T, HDC, HDM, LLMC_MAX_GROUP>(a, part, splits, stream);
    }
};

extern "C" kiln_status llmc_decode_attention(const llmc_decode_attn *a, cudaStream_t stream) {
    const bool token_rows = a->row_seq || a->row_pos;
    if (!att_shape_ok(a->dtype, a->head_dim, a->n_head, a->n_kv_head) || a->n_seqs < 1 || a->max_ctx < 1 ||
        a->block_size < 1 || a->ldq % 8 || a->ldo % 8 || a->window < 0 ||
        (token_rows && (!a->row_seq || !a->row_pos || a->part_keys >= 0)))
        return kiln_error(KILN_ERR_INVALID_ARGUMENT, "decode attention: head_dim %d (a multiple of 8 up to %d), %d "
                          "heads over %d KV heads, %d rows, max_ctx %d, block_size %d, ldq %d, ldo %d, window %d, %s%s: "
                          "unsupported", a->head_dim, LLMC_MAX_HEAD_DIM, a->n_head, a->n_kv_head, a->n_seqs,
                          a->max_ctx, a->block_size, a->ldq, a->ldo, a->window, kiln_dtype_name(a->dtype),
                          token_rows ? " (token rows need row_seq, row_pos and part_keys -1)" : "");
    return a->dtype == KILN_F16 ? att_dispatch_hd<dec_launcher, __half>(a->head_dim, a, stream)
                                : att_dispatch_hd<dec_launcher, bf16>(a->head_dim, a, stream);
}
