/* llm_cuda_attn.cu — causal attention of a step's new tokens over the paged KV cache (the step's own
 * keys and values are already written), flash-attention style: scores, an online softmax and the
 * weighted sum of values in FP32, never materializing the score matrix.
 *
 * The shared core (att_tile): a warp holds up to ATT_R query rows (FP32, pre-scaled by 1/sqrt(hd), in
 * shared memory) and attends them to a tile of 32 keys, lane j scoring key j against every row
 * (16-byte loads of the key), then updating each row's running max m, sum l and output accumulator;
 * lane i owns output dims [i * hd/32, (i + 1) * hd/32). Rows of one warp share the keys they read:
 * they are heads of one KV head (GQA) and/or consecutive tokens.
 *
 *  - prefill_kernel: grid (row tiles, KV heads, sequences); the rows of a sequence are its (new token,
 *    query head of the group) pairs, ATT_R per warp, ATT_WARPS warps per block, each warp walking the
 *    keys up to its last row's position (causal).
 *  - decode_kernel (every sequence has one new token): grid (splits, KV heads, sequences); a block
 *    takes one split of `part` keys of the context for all query heads of its KV head, its warps
 *    taking interleaved tiles, merged through shared memory. With one split the block writes the
 *    output; otherwise it writes (accumulator, m, l) and decode_reduce_kernel combines the splits. */
#include "llm/cuda/llm_cuda_util.cuh"

#include <math.h>

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

template <typename T, int HD>
__global__ void __launch_bounds__(ATT_WARPS * 32)
    decode_kernel(const T *__restrict__ qkv, int ldq, T *__restrict__ out, int ldo, const int32_t *__restrict__ ctx_len,
                  const int32_t *__restrict__ table, int table_stride, const T *__restrict__ kc, const T *__restrict__ vc,
                  int n_head, int n_kv_head, int bs, float scale, int part, float *__restrict__ partial, int split_cap) {
    constexpr int E = HD / 32;
    __shared__ __align__(16) float qs[ATT_R][HD];
    __shared__ float wm[ATT_WARPS][ATT_R], wl[ATT_WARPS][ATT_R];
    __shared__ float wacc[ATT_WARPS][ATT_R][HD];
    const int seq = blockIdx.z, g = blockIdx.y, split = blockIdx.x, warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int group = n_head / n_kv_head, ctx = ctx_len[seq], k0 = split * part;
    if (k0 >= ctx) return; /* the whole block: before any __syncthreads */
    const int k1 = min(ctx, k0 + part), n_splits = (ctx + part - 1) / part;
    const T *q = qkv + (size_t)seq * ldq + (size_t)g * group * HD; /* token index == sequence index */
    for (int i = threadIdx.x; i < ATT_R * HD; i += blockDim.x) {
        const int r = i / HD;
        qs[r][i - r * HD] = r < group ? ku_f32(q[i]) * scale : 0.0f;
    }
    __syncthreads();
    int limit[ATT_R];
#pragma unroll
    for (int r = 0; r < ATT_R; r++) limit[r] = r < group ? ctx - 1 : -1;
    const att_cache c = {table + (size_t)seq * table_stride, bs, (size_t)n_kv_head * bs * HD, (size_t)g * bs * HD};
    att_state<E> st;
    att_init(st);
    for (int j0 = k0 + warp * 32; j0 < k1; j0 += ATT_WARPS * 32) att_tile<T, HD>(st, &qs[0][0], limit, j0, k1, kc, vc, c);
#pragma unroll
    for (int r = 0; r < ATT_R; r++) {
        if (lane == 0) {
            wm[warp][r] = st.m[r];
            wl[warp][r] = st.l[r];
        }
#pragma unroll
        for (int e = 0; e < E; e++) wacc[warp][r][lane * E + e] = st.acc[r][e];
    }
    __syncthreads();
    for (int i = threadIdx.x; i < group * HD; i += blockDim.x) {
        const int r = i / HD, e = i - r * HD, h = g * group + r;
        float M = -INFINITY, L = 0.0f, A = 0.0f;
        for (int w = 0; w < ATT_WARPS; w++) M = fmaxf(M, wm[w][r]);
        for (int w = 0; w < ATT_WARPS; w++) {
            if (wm[w][r] == -INFINITY) continue; /* a warp that saw no key */
            const float f = __expf(wm[w][r] - M);
            L += wl[w][r] * f;
            A += wacc[w][r][e] * f;
        }
        if (n_splits == 1) {
            out[(size_t)seq * ldo + (size_t)h * HD + e] = ku_from_f32<T>(A / L);
        } else {
            float *pp = partial + (((size_t)seq * n_head + h) * split_cap + split) * (HD + 2);
            pp[e] = A;
            if (e == 0) {
                pp[HD] = M;
                pp[HD + 1] = L;
            }
        }
    }
}

/* One block of HD threads per (head, sequence) whose context took more than one split. */
template <typename T, int HD>
__global__ void decode_reduce_kernel(const float *__restrict__ partial, int split_cap, const int32_t *__restrict__ ctx_len,
                                     int part, T *__restrict__ out, int ldo, int n_head) {
    const int h = blockIdx.x, seq = blockIdx.y, e = threadIdx.x;
    const int n_splits = (ctx_len[seq] + part - 1) / part;
    if (n_splits <= 1) return;
    const float *base = partial + ((size_t)seq * n_head + h) * split_cap * (HD + 2);
    float M = -INFINITY, L = 0.0f, A = 0.0f;
    for (int s = 0; s < n_splits; s++) M = fmaxf(M, base[s * (HD + 2) + HD]);
    for (int s = 0; s < n_splits; s++) {
        const float *pp = base + s * (HD + 2), f = __expf(pp[HD] - M);
        L += pp[HD + 1] * f;
        A += pp[e] * f;
    }
    out[(size_t)seq * ldo + (size_t)h * HD + e] = ku_from_f32<T>(A / L);
}

/* ---------------------------------------------------------------- launch */

/* Keys per decode split: at least LLMC_SPLIT_MIN, a multiple of it, and few enough keys that the grid
 * has about two blocks per SM when the context allows. */
static int decode_part(const kiln_llm_cuda *g, const llmc_step *s) {
    const int blocks = s->n_seqs * g->cfg.n_kv_head, want = 2 * (g->sm_count > 0 ? g->sm_count : 1);
    const int splits = blocks >= want ? 1 : (want + blocks - 1) / blocks;
    const int keys = (s->max_ctx + splits - 1) / splits;
    const int part = (keys + LLMC_SPLIT_MIN - 1) / LLMC_SPLIT_MIN * LLMC_SPLIT_MIN;
    return part > LLMC_SPLIT_MIN ? part : LLMC_SPLIT_MIN;
}

template <typename T, int HD>
static kiln_status launch_attention(kiln_llm_cuda *g, const llmc_step *s, const void *kc, const void *vc, int bs) {
    const kiln_llm_config *c = &g->cfg;
    const int group = c->n_head / c->n_kv_head, ldq = (c->n_head + 2 * c->n_kv_head) * HD, ldo = c->n_head * HD;
    const float scale = 1.0f / sqrtf((float)HD);
    if (!s->decode) {
        const int rows_per_block = ATT_WARPS * ATT_R;
        dim3 grid((unsigned)((s->max_new * group + rows_per_block - 1) / rows_per_block), (unsigned)c->n_kv_head,
                  (unsigned)s->n_seqs);
        prefill_kernel<T, HD><<<grid, ATT_WARPS * 32, 0, g->stream>>>(
            (const T *)g->qkv, ldq, (T *)g->att, ldo, s->seq_start, s->ctx_len, s->table, s->table_stride, (const T *)kc,
            (const T *)vc, c->n_head, c->n_kv_head, bs, scale);
        KILN_CUDA_LAUNCH_CHECK("prefill_kernel");
        return KILN_OK;
    }
    const int part = decode_part(g, s), splits = (s->max_ctx + part - 1) / part;
    if (splits > g->split_cap)
        return kiln_error(KILN_ERR_INTERNAL, "decode attention: %d splits of %d keys exceed the %d allocated", splits, part,
                          g->split_cap);
    dim3 grid((unsigned)splits, (unsigned)c->n_kv_head, (unsigned)s->n_seqs);
    decode_kernel<T, HD><<<grid, ATT_WARPS * 32, 0, g->stream>>>((const T *)g->qkv, ldq, (T *)g->att, ldo, s->ctx_len,
                                                                 s->table, s->table_stride, (const T *)kc, (const T *)vc,
                                                                 c->n_head, c->n_kv_head, bs, scale, part, g->part,
                                                                 g->split_cap);
    KILN_CUDA_LAUNCH_CHECK("decode_kernel");
    if (splits > 1) {
        decode_reduce_kernel<T, HD><<<dim3((unsigned)c->n_head, (unsigned)s->n_seqs), HD, 0, g->stream>>>(
            g->part, g->split_cap, s->ctx_len, part, (T *)g->att, ldo, c->n_head);
        KILN_CUDA_LAUNCH_CHECK("decode_reduce_kernel");
    }
    return KILN_OK;
}

template <typename T>
static kiln_status attention_hd(kiln_llm_cuda *g, const llmc_step *s, const void *kc, const void *vc, int bs) {
    return g->cfg.head_dim == 64 ? launch_attention<T, 64>(g, s, kc, vc, bs) : launch_attention<T, 128>(g, s, kc, vc, bs);
}

extern "C" kiln_status llmc_attention(kiln_llm_cuda *g, const llmc_step *s, const void *kc, const void *vc, int block_size) {
    return LC_DISPATCH(g->dtype, attention_hd, g, s, kc, vc, block_size);
}
