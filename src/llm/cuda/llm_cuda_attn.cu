/* llm_cuda_attn.cu — causal attention of a step's new tokens over the paged KV cache (the step's own
 * keys and values are already written), flash-attention style: scores, an online softmax and the
 * weighted sum of values in FP32, never materializing the score matrix.
 *
 * The prefill core (att_tile): a warp holds up to ATT_R query rows (FP32, pre-scaled by 1/sqrt(hd), in
 * shared memory) and attends them to a tile of 32 keys, lane j scoring key j against every row
 * (16-byte loads of the key), then updating each row's running max m, sum l and output accumulator;
 * lane i owns output dims [i * hd/32, (i + 1) * hd/32). Rows of one warp share the keys they read:
 * they are heads of one KV head (GQA) and/or consecutive tokens.
 *
 *  - prefill_kernel: grid (row tiles, KV heads, sequences); the rows of a sequence are its (new token,
 *    query head of the group) pairs, ATT_R per warp, ATT_WARPS warps per block, each warp walking the
 *    keys up to its last row's position (causal).
 *  - dec_kernel (decode: every sequence has one new token): grid (splits, KV heads, sequences); a block
 *    takes one split of the context for all query heads of its KV head. Each of its warps streams
 *    tiles of 4 KB of keys + 4 KB of values (32 keys at hd 64, 16 at hd 128) with cp.async into its own
 *    double buffer in shared memory (coalesced 16-byte copies, the next tile in flight while this one
 *    is computed), scores from there (a lane per key, two at hd 128), and accumulates its output dims
 *    over the value rows; the warps merge through shared memory. With one split the block writes the
 *    output; with several the last block of a (sequence, KV head) to finish (an atomic counter, left at
 *    zero for the next launch) combines the splits, so a decode attention is one launch. */
#include "llm/cuda/llm_cuda_util.cuh"

#include <math.h>
#include <string.h>

#define ATT_WARPS 4
#define ATT_R LLMC_MAX_GROUP /* query rows per warp */

/* The paged-cache geometry of one sequence in one layer. */
typedef struct att_cache {
    const int32_t *blocks; /* the sequence's block table row */
    int bs;                /* tokens per block */
    size_t block_stride;   /* elements per block: n_kv_head * bs * hd */
    size_t head_off;       /* elements to the KV head's rows inside a block: g * bs * hd */
} att_cache;

template <int HD> static __device__ __forceinline__ size_t att_slot(const att_cache &c, int j) {
    return (size_t)c.blocks[j / c.bs] * c.block_stride + c.head_off + (size_t)(j % c.bs) * HD;
}

/* A warp's online-softmax state for its ATT_R rows; acc holds the lane's E = HD / 32 dims. */
template <int E> struct att_state {
    float m[ATT_R], l[ATT_R], acc[ATT_R][E];
};

template <int E> static __device__ __forceinline__ void att_init(att_state<E> &st) {
#pragma unroll
    for (int r = 0; r < ATT_R; r++) {
        st.m[r] = -INFINITY;
        st.l[r] = 0.0f;
#pragma unroll
        for (int e = 0; e < E; e++) st.acc[r][e] = 0.0f;
    }
}

/* Attends rows q[r] ([ATT_R][HD] in shared memory) to keys [j0, min(j0 + 32, j_end)); row r may see
 * keys 0..limit[r] (-1: an unused row). The whole warp calls it with the same arguments. */
template <typename T, int HD>
static __device__ __forceinline__ void att_tile(att_state<HD / 32> &st, const float *q, const int (&limit)[ATT_R], int j0,
                                                int j_end, const T *__restrict__ kc, const T *__restrict__ vc,
                                                const att_cache &c) {
    constexpr int E = HD / 32;
    const int lane = threadIdx.x & 31, j = j0 + lane;
    float s[ATT_R];
#pragma unroll
    for (int r = 0; r < ATT_R; r++) s[r] = 0.0f;
    if (j < j_end) {
        const T *kr = kc + att_slot<HD>(c, j);
#pragma unroll 2
        for (int d0 = 0; d0 < HD; d0 += 8) {
            float kf[8];
            lc_load8<T>(kr + d0, kf);
#pragma unroll
            for (int r = 0; r < ATT_R; r++) {
                if (limit[r] < j0) continue; /* uniform over the warp */
#pragma unroll
                for (int e = 0; e < 8; e++) s[r] += q[r * HD + d0 + e] * kf[e];
            }
        }
    }
#pragma unroll
    for (int r = 0; r < ATT_R; r++) {
        if (limit[r] < j0) {
            s[r] = 0.0f;
            continue;
        }
        const float sv = j < j_end && j <= limit[r] ? s[r] : -INFINITY;
        const float mn = fmaxf(st.m[r], ku_warp_max(sv)); /* finite: key j0 <= limit[r] is visible */
        const float p = sv == -INFINITY ? 0.0f : __expf(sv - mn);
        const float corr = st.m[r] == -INFINITY ? 0.0f : __expf(st.m[r] - mn);
        st.l[r] = st.l[r] * corr + ku_warp_sum(p);
        st.m[r] = mn;
#pragma unroll
        for (int e = 0; e < E; e++) st.acc[r][e] *= corr;
        s[r] = p;
    }
    const int nk = min(32, j_end - j0);
    for (int jj = 0; jj < nk; jj++) {
        T v[E];
        ku_load<T, E>(v, vc + att_slot<HD>(c, j0 + jj) + lane * E);
#pragma unroll
        for (int r = 0; r < ATT_R; r++) {
            if (limit[r] < j0) continue;
            const float p = __shfl_sync(0xffffffffu, s[r], jj);
#pragma unroll
            for (int e = 0; e < E; e++) st.acc[r][e] += p * ku_f32(v[e]);
        }
    }
}

/* ---------------------------------------------------------------- prefill (any number of new tokens) */

template <typename T, int HD>
__global__ void __launch_bounds__(ATT_WARPS * 32)
    prefill_kernel(const T *__restrict__ qkv, int ldq, T *__restrict__ out, int ldo, const int32_t *__restrict__ seq_start,
                   const int32_t *__restrict__ ctx_len, const int32_t *__restrict__ table, int table_stride,
                   const T *__restrict__ kc, const T *__restrict__ vc, int n_head, int n_kv_head, int bs, float scale) {
    constexpr int E = HD / 32;
    __shared__ __align__(16) float qs[ATT_WARPS][ATT_R][HD];
    const int seq = blockIdx.z, g = blockIdx.y, warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int group = n_head / n_kv_head, s0 = seq_start[seq], n = seq_start[seq + 1] - s0, ctx = ctx_len[seq];
    const int row0 = (blockIdx.x * ATT_WARPS + warp) * ATT_R; /* rows: (token t, head hg) as t * group + hg */
    if (row0 >= n * group) return;                            /* no block-wide synchronization below */
    int limit[ATT_R], jmax = -1;
#pragma unroll
    for (int r = 0; r < ATT_R; r++) {
        const int row = row0 + r, t = row / group, h = g * group + row % group;
        const bool used = row < n * group;
        limit[r] = used ? ctx - n + t : -1;
        jmax = max(jmax, limit[r]);
        const T *qp = qkv + (size_t)(s0 + t) * ldq + (size_t)h * HD;
        for (int e = lane; e < HD; e += 32) qs[warp][r][e] = used ? ku_f32(qp[e]) * scale : 0.0f;
    }
    __syncwarp();
    const att_cache c = {table + (size_t)seq * table_stride, bs, (size_t)n_kv_head * bs * HD, (size_t)g * bs * HD};
    att_state<E> st;
    att_init(st);
    for (int j0 = 0; j0 <= jmax; j0 += 32) att_tile<T, HD>(st, &qs[warp][0][0], limit, j0, jmax + 1, kc, vc, c);
#pragma unroll
    for (int r = 0; r < ATT_R; r++) {
        if (limit[r] < 0) continue;
        const int row = row0 + r, t = row / group, h = g * group + row % group;
        const float inv = 1.0f / st.l[r];
        T o[E];
#pragma unroll
        for (int e = 0; e < E; e++) o[e] = ku_from_f32<T>(st.acc[r][e] * inv);
        ku_store<T, E>(out + (size_t)(s0 + t) * ldo + (size_t)h * HD + lane * E, o);
    }
}

/* ---------------------------------------------------------------- decode (one new token per sequence) */

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
#define DEC_BLOCKS_PER_SM 3 /* resident decode blocks per SM: shared memory (~70 KB each) allows 3 */
#define DEC_MAX_SPLITS 1024 /* the reduction keeps a weight per (row, split) in shared memory */

/* The geometry of a warp's tile: TK keys (4 KB of keys and 4 KB of values in 16-bit), staged in two
 * buffers per warp so that the next tile loads while this one is computed. */
template <int HD> struct dec_geo {
    static constexpr int TK = HD == 64 ? 32 : 16;              /* keys of a tile */
    static constexpr int LPK = 32 / TK;                        /* lanes scoring one key, 64 dims each */
    static constexpr int CH = HD / 8;                          /* 16-byte chunks of a key row */
    static constexpr int NLD = TK * CH / 32;                   /* chunks a lane copies, of K and of V: 8 */
    static constexpr int KROW = HD + 8;                        /* padded key row (elements): no bank conflicts */
    static constexpr int E = HD / 32;                          /* output dims a lane accumulates */
    static constexpr int QROW = HD + 4;                        /* padded query row (floats) */
    static constexpr int KBYTES = TK * KROW * 2;               /* a stage: keys, then values [TK][HD] */
    static constexpr int STAGE = KBYTES + TK * HD * 2;
    static constexpr int WARP_BYTES = 2 * STAGE;
};

template <int HD, int R> static constexpr size_t dec_smem_bytes() {
    return (size_t)DEC_WARPS * dec_geo<HD>::WARP_BYTES + (size_t)R * dec_geo<HD>::QROW * 4 + 16;
}

/* A warp's online-softmax state for R query rows (scores in log2 units). */
template <int HD, int R> struct dec_state {
    float m[R], l[R], acc[R][HD / 32];
};

/* Starts copying keys [j0, min(j0 + TK, k1)) and their values into `stage` (one commit group is the
 * caller's). Lane kk % TK finds key kk's row in the paged cache; the warp's 16-byte chunks are
 * consecutive within each row (a row is 128 or 256 contiguous bytes). */
template <typename T, int HD>
static __device__ __forceinline__ void dec_issue(char *stage, int j0, int k1, const att_cache &c, const T *__restrict__ kc,
                                                 const T *__restrict__ vc, int lane) {
    using G = dec_geo<HD>;
    const int j = j0 + lane % G::TK;
    long long off = 0;
    if (j < k1) off = (long long)(c.blocks[j / c.bs] * c.block_stride + c.head_off + (size_t)(j % c.bs) * HD);
    T *ks = reinterpret_cast<T *>(stage), *vs = reinterpret_cast<T *>(stage + G::KBYTES);
#pragma unroll
    for (int i = 0; i < G::NLD; i++) {
        const int ch = lane + 32 * i, kk = ch / G::CH, seg = ch % G::CH;
        const long long o = __shfl_sync(0xffffffffu, off, kk) + seg * 8;
        const bool ok = j0 + kk < k1;
        dec_cp16(ks + kk * G::KROW + seg * 8, kc + o, ok);
        dec_cp16(vs + kk * HD + seg * 8, vc + o, ok);
    }
}

/* The i-th float of a float4 (i a constant after unrolling). */
static __device__ __forceinline__ float dec_f4(const float4 &v, int i) {
    return i == 0 ? v.x : i == 1 ? v.y : i == 2 ? v.z : v.w;
}

/* Attends the `group` query rows qs ([R][QROW], FP32, pre-scaled by log2(e)/sqrt(hd)) to the tile of
 * keys [j0, min(j0 + TK, k1)) in `stage`. Scores: lane kk % TK takes key kk, dims [64 (lane / TK), +64)
 * (two lanes and a shuffle per key for hd 128). The probabilities go to shared memory over the keys
 * (no longer needed), then every lane accumulates its E output dims over the tile's values. */
template <typename T, int HD, int R>
static __device__ __forceinline__ void dec_tile(dec_state<HD, R> &st, char *stage, const float *qs, int group, int j0,
                                                int k1, int lane) {
    using G = dec_geo<HD>;
    constexpr int E = G::E;
    const T *ks = reinterpret_cast<const T *>(stage), *vs = reinterpret_cast<const T *>(stage + G::KBYTES);
    float *ps = reinterpret_cast<float *>(stage); /* [R][TK] probabilities, over the keys once scored */
    const int kk = lane % G::TK, hh = lane / G::TK;
    float s[R];
#pragma unroll
    for (int r = 0; r < R; r++) s[r] = 0.0f;
    const T *kr = ks + kk * G::KROW + hh * 64;
#pragma unroll
    for (int d0 = 0; d0 < 64; d0 += 8) {
        float kf[8];
        lc_unpack8<T>(*reinterpret_cast<const uint4 *>(kr + d0), kf);
#pragma unroll
        for (int r = 0; r < R; r++) {
            if (r >= group) continue; /* uniform */
            const float4 qa = *reinterpret_cast<const float4 *>(qs + r * G::QROW + hh * 64 + d0);
            const float4 qb = *reinterpret_cast<const float4 *>(qs + r * G::QROW + hh * 64 + d0 + 4);
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
    if (G::LPK == 2) {
#pragma unroll
        for (int r = 0; r < R; r++) s[r] += __shfl_xor_sync(0xffffffffu, s[r], 16);
    }
    const bool valid = j0 + kk < k1;
    __syncwarp(); /* every lane has read its key before ps overwrites them */
#pragma unroll
    for (int r = 0; r < R; r++) {
        if (r >= group) continue;
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
            pr[r] = r < group ? *reinterpret_cast<const float4 *>(ps + r * G::TK + k4) : make_float4(0, 0, 0, 0);
#pragma unroll
        for (int u = 0; u < 4; u++) {
            T v[E];
            ku_load<T, E>(v, vs + (k4 + u) * HD + lane * E); /* zero past the split */
            float vf[E];
#pragma unroll
            for (int e = 0; e < E; e++) vf[e] = ku_f32(v[e]);
#pragma unroll
            for (int r = 0; r < R; r++) {
                if (r >= group) continue;
                const float p = dec_f4(pr[r], u);
#pragma unroll
                for (int e = 0; e < E; e++) st.acc[r][e] = fmaf(p, vf[e], st.acc[r][e]);
            }
        }
    }
    __syncwarp(); /* the stage may be refilled */
}

/* Grid (splits, KV heads, sequences), DEC_WARPS warps: the block takes keys [split * part, + part) of
 * its sequence's context (none past ctx_len: such blocks exit) for the `group` query heads of its KV
 * head, R >= group rows. Warp w takes the split's tiles w, w + DEC_WARPS, ..., each loaded two tiles
 * ahead by cp.async into the warp's own double buffer; the warps' states merge through shared memory.
 * One split: the block writes the output. Several: it writes its unnormalized output to pa
 * [seq][head][splits][HD] and (max, sum) to pml [seq][head][splits][2], and the last block of the
 * (sequence, KV head) to arrive (count, reset to 0 by that block) combines the splits. */
template <typename T, int HD, int R>
__global__ void __launch_bounds__(DEC_WARPS * 32, DEC_BLOCKS_PER_SM)
    dec_kernel(const T *__restrict__ q, int ldq, T *__restrict__ out, int ldo, const int32_t *__restrict__ ctx_len,
               const int32_t *__restrict__ table, int table_stride, const T *__restrict__ kc, const T *__restrict__ vc,
               int n_head, int n_kv_head, int bs, float qscale, int part, float *__restrict__ pa, float *__restrict__ pml,
               unsigned *__restrict__ count) {
    using G = dec_geo<HD>;
    extern __shared__ __align__(16) char dsm[];
    const int split = blockIdx.x, splits = gridDim.x, g = blockIdx.y, seq = blockIdx.z;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int group = n_head / n_kv_head, ctx = ctx_len[seq], k0 = split * part;
    if (k0 >= ctx) return; /* the whole block: before any barrier */
    const int k1 = min(ctx, k0 + part), n_tiles = (k1 - k0 + G::TK - 1) / G::TK;
    const int n_splits = min((ctx + part - 1) / part, splits); /* ctx <= max_ctx: never clamped */
    char *wbase = dsm + warp * G::WARP_BYTES;
    float *qs = reinterpret_cast<float *>(dsm + DEC_WARPS * G::WARP_BYTES);
    int *last = reinterpret_cast<int *>(qs + R * G::QROW);
    const att_cache c = {table + (size_t)seq * table_stride, bs, (size_t)n_kv_head * bs * HD, (size_t)g * bs * HD};
    /* the warp's first two tiles start loading before anything else */
#pragma unroll
    for (int i = 0; i < 2; i++) {
        const int t = warp + i * DEC_WARPS;
        if (t < n_tiles) dec_issue<T, HD>(wbase + i * G::STAGE, k0 + t * G::TK, k1, c, kc, vc, lane);
        dec_commit();
    }
    const T *qp = q + (size_t)seq * ldq + (size_t)g * group * HD; /* token index == sequence index */
    for (int i = threadIdx.x; i < R * HD; i += blockDim.x) {
        const int r = i / HD, e = i - r * HD;
        qs[r * G::QROW + e] = r < group ? ku_f32(qp[i]) * qscale : 0.0f;
    }
    __syncthreads();
    dec_state<HD, R> st;
#pragma unroll
    for (int r = 0; r < R; r++) {
        st.m[r] = -INFINITY;
        st.l[r] = 0.0f;
#pragma unroll
        for (int e = 0; e < G::E; e++) st.acc[r][e] = 0.0f;
    }
    for (int i = 0, t = warp; t < n_tiles; i++, t += DEC_WARPS) {
        char *stage = wbase + (i & 1) * G::STAGE;
        dec_wait<1>(); /* this lane's copies of tile i are done; __syncwarp makes everyone's visible */
        __syncwarp();
        dec_tile<T, HD, R>(st, stage, qs, group, k0 + t * G::TK, k1, lane);
        const int tn = t + 2 * DEC_WARPS;
        if (tn < n_tiles) dec_issue<T, HD>(stage, k0 + tn * G::TK, k1, c, kc, vc, lane);
        dec_commit();
    }
    dec_wait<0>();
    __syncwarp();
    /* merge the warps: each leaves (m, l) and its accumulator in its own (now idle) buffers */
    float *wm = reinterpret_cast<float *>(wbase), *wacc = wm + 16; /* wm[R], wl[R], then [R][HD] at 64 bytes */
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
        for (int e = 0; e < G::E; e++) wacc[r * HD + lane * G::E + e] = st.acc[r][e];
    __syncthreads();
    constexpr int Q4 = HD / 4;
    const int n4 = group * Q4, h0 = g * group;
    for (int i = threadIdx.x; i < n4; i += blockDim.x) {
        const int r = i / Q4, e4 = (i - r * Q4) * 4;
        float M = -INFINITY, L = 0.0f;
        float4 A = make_float4(0, 0, 0, 0);
        for (int w = 0; w < DEC_WARPS; w++) M = fmaxf(M, reinterpret_cast<const float *>(dsm + w * G::WARP_BYTES)[r]);
        for (int w = 0; w < DEC_WARPS; w++) {
            const float *b = reinterpret_cast<const float *>(dsm + w * G::WARP_BYTES);
            if (b[r] == -INFINITY) continue; /* a warp that had no tile */
            const float f = exp2f(b[r] - M);
            const float4 a = *reinterpret_cast<const float4 *>(b + 16 + r * HD + e4);
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
            ku_store<T, 4>(out + (size_t)seq * ldo + (size_t)(h0 + r) * HD + e4, o);
        } else {
            const size_t slot = ((size_t)seq * n_head + h0 + r) * splits + split;
            *reinterpret_cast<float4 *>(pa + slot * HD + e4) = A;
            if (e4 == 0) {
                pml[slot * 2] = M;
                pml[slot * 2 + 1] = L;
            }
        }
    }
    if (n_splits == 1) return;
    /* the last split of this (sequence, KV head) to finish combines them all */
    __threadfence();
    __syncthreads();
    if (threadIdx.x == 0) {
        unsigned *cnt = count + (size_t)seq * n_kv_head + g;
        const bool is_last = atomicAdd(cnt, 1u) == (unsigned)n_splits - 1;
        if (is_last) *cnt = 0; /* ready for the next launch (graph replays) */
        *last = is_last;
    }
    __syncthreads();
    if (!*last) return;
    __threadfence();
    float *wts = reinterpret_cast<float *>(dsm); /* [group][n_splits]: the warps' buffers are free again */
    float *row_l = qs;                           /* [group] */
    for (int r = warp; r < group; r += DEC_WARPS) {
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
        const int r = i / Q4, e4 = (i - r * Q4) * 4;
        const float *wr = wts + r * n_splits;
        const float4 *ap = reinterpret_cast<const float4 *>(pa + ((size_t)seq * n_head + h0 + r) * splits * HD + e4);
        float4 A = make_float4(0, 0, 0, 0);
#pragma unroll 8
        for (int sp = 0; sp < n_splits; sp++) {
            const float4 a = __ldcg(ap + (size_t)sp * Q4);
            const float f = wr[sp];
            A.x += a.x * f;
            A.y += a.y * f;
            A.z += a.z * f;
            A.w += a.w * f;
        }
        const float inv = 1.0f / row_l[r];
        const T o[4] = {ku_from_f32<T>(A.x * inv), ku_from_f32<T>(A.y * inv), ku_from_f32<T>(A.z * inv),
                        ku_from_f32<T>(A.w * inv)};
        ku_store<T, 4>(out + (size_t)seq * ldo + (size_t)(h0 + r) * HD + e4, o);
    }
}

/* ---------------------------------------------------------------- launch */

extern "C" int llmc_decode_part(int head_dim, int n_seqs, int n_kv_head, int max_ctx, int sm_count, int max_splits) {
    const int tk = head_dim == 64 ? 32 : 16, gran = DEC_WARPS * tk; /* a tile per warp */
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

template <typename T, int HD, int R>
static kiln_status dec_launch(const llmc_decode_attn *a, int part, int splits, cudaStream_t stream) {
    const size_t smem = dec_smem_bytes<HD, R>();
    /* the shared memory beyond 48 KB is opted into once per device, never during a capture */
    static unsigned long long done; /* bit d: device d */
    int dev = 0;
    KILN_CUDA_TRY(cudaGetDevice(&dev));
    if (dev >= 64 || !(__atomic_load_n(&done, __ATOMIC_ACQUIRE) >> dev & 1)) {
        cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
        KILN_CUDA_TRY(cudaStreamIsCapturing(stream, &cs));
        if (cs == cudaStreamCaptureStatusNone) {
            KILN_CUDA_TRY(cudaFuncSetAttribute(dec_kernel<T, HD, R>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
            /* all shared memory, no L1 to speak of: DEC_BLOCKS_PER_SM blocks fit (the copies bypass L1) */
            KILN_CUDA_TRY(cudaFuncSetAttribute(dec_kernel<T, HD, R>, cudaFuncAttributePreferredSharedMemoryCarveout,
                                               cudaSharedmemCarveoutMaxShared));
            if (dev < 64) __atomic_fetch_or(&done, 1ull << dev, __ATOMIC_RELEASE);
        }
    }
    const float qscale = 1.4426950408889634f / sqrtf((float)HD); /* scores in log2 units: exp2 */
    float *pa = a->part, *pml = a->part + (size_t)a->n_seqs * a->n_head * splits * HD;
    dim3 grid((unsigned)splits, (unsigned)a->n_kv_head, (unsigned)a->n_seqs);
    dec_kernel<T, HD, R><<<grid, DEC_WARPS * 32, smem, stream>>>(
        (const T *)a->q, a->ldq, (T *)a->out, a->ldo, a->ctx_len, a->table, a->table_stride, (const T *)a->kc,
        (const T *)a->vc, a->n_head, a->n_kv_head, a->block_size, qscale, part, pa, pml, a->count);
    KILN_CUDA_LAUNCH_CHECK("dec_kernel");
    return KILN_OK;
}

template <typename T, int HD>
static kiln_status dec_launch_hd(const llmc_decode_attn *a, cudaStream_t stream) {
    const int group = a->n_head / a->n_kv_head;
    const int part = a->part_keys > 0 ? a->part_keys
                                      : llmc_decode_part(HD, a->n_seqs, a->n_kv_head, a->max_ctx, a->sm_count, a->split_cap);
    const int splits = (a->max_ctx + part - 1) / part;
    if (splits > a->split_cap || splits > DEC_MAX_SPLITS)
        return kiln_error(KILN_ERR_INTERNAL, "decode attention: %d splits of %d keys exceed the %d allocated", splits, part,
                          a->split_cap < DEC_MAX_SPLITS ? a->split_cap : DEC_MAX_SPLITS);
    if (group <= 1) return dec_launch<T, HD, 1>(a, part, splits, stream);
    if (group <= 2) return dec_launch<T, HD, 2>(a, part, splits, stream);
    if (group <= 4) return dec_launch<T, HD, 4>(a, part, splits, stream);
    return dec_launch<T, HD, 8>(a, part, splits, stream);
}

template <typename T> static kiln_status dec_launch_t(const llmc_decode_attn *a, cudaStream_t stream) {
    return a->head_dim == 64 ? dec_launch_hd<T, 64>(a, stream) : dec_launch_hd<T, 128>(a, stream);
}

extern "C" kiln_status llmc_decode_attention(const llmc_decode_attn *a, cudaStream_t stream) {
    if ((a->head_dim != 64 && a->head_dim != 128) || a->n_kv_head < 1 || a->n_head % a->n_kv_head ||
        a->n_head / a->n_kv_head > LLMC_MAX_GROUP || a->n_seqs < 1 || a->max_ctx < 1 || a->block_size < 1 ||
        (a->dtype != KILN_F16 && a->dtype != KILN_BF16))
        return kiln_error(KILN_ERR_INVALID_ARGUMENT, "decode attention: head_dim %d, %d heads over %d KV heads, %d "
                          "sequences, max_ctx %d, block_size %d, %s: unsupported", a->head_dim, a->n_head, a->n_kv_head,
                          a->n_seqs, a->max_ctx, a->block_size, kiln_dtype_name(a->dtype));
    return LC_DISPATCH(a->dtype, dec_launch_t, a, stream);
}

template <typename T, int HD>
static kiln_status launch_attention(kiln_llm_cuda *g, const llmc_step *s, const void *kc, const void *vc, int bs) {
    const kiln_llm_config *c = &g->cfg;
    const int group = c->n_head / c->n_kv_head, ldq = (c->n_head + 2 * c->n_kv_head) * HD, ldo = c->n_head * HD;
    if (!s->decode) {
        const float scale = 1.0f / sqrtf((float)HD);
        const int rows_per_block = ATT_WARPS * ATT_R;
        dim3 grid((unsigned)((s->max_new * group + rows_per_block - 1) / rows_per_block), (unsigned)c->n_kv_head,
                  (unsigned)s->n_seqs);
        prefill_kernel<T, HD><<<grid, ATT_WARPS * 32, 0, g->stream>>>(
            (const T *)g->qkv, ldq, (T *)g->att, ldo, s->seq_start, s->ctx_len, s->table, s->table_stride, (const T *)kc,
            (const T *)vc, c->n_head, c->n_kv_head, bs, scale);
        KILN_CUDA_LAUNCH_CHECK("prefill_kernel");
        return KILN_OK;
    }
    /* the grid is a function of (n_seqs, the context bucket s->max_ctx): what a graph is keyed by */
    llmc_decode_attn a;
    memset(&a, 0, sizeof a);
    a.dtype = g->dtype;
    a.head_dim = HD;
    a.n_head = c->n_head;
    a.n_kv_head = c->n_kv_head;
    a.n_seqs = s->n_seqs;
    a.block_size = bs;
    a.max_ctx = s->max_ctx;
    a.q = g->qkv;
    a.ldq = ldq;
    a.out = g->att;
    a.ldo = ldo;
    a.ctx_len = s->ctx_len;
    a.table = s->table;
    a.table_stride = s->table_stride;
    a.kc = kc;
    a.vc = vc;
    a.part = g->part;
    a.split_cap = g->split_cap;
    a.count = g->att_count;
    a.sm_count = g->sm_count;
    return dec_launch_hd<T, HD>(&a, g->stream);
}

template <typename T>
static kiln_status attention_hd(kiln_llm_cuda *g, const llmc_step *s, const void *kc, const void *vc, int bs) {
    return g->cfg.head_dim == 64 ? launch_attention<T, 64>(g, s, kc, vc, bs) : launch_attention<T, 128>(g, s, kc, vc, bs);
}

extern "C" kiln_status llmc_attention(kiln_llm_cuda *g, const llmc_step *s, const void *kc, const void *vc, int block_size) {
    return LC_DISPATCH(g->dtype, attention_hd, g, s, kc, vc, block_size);
}
