/* llm_cuda_attn.cu — causal attention of a step's new tokens over the paged KV cache (the step's own
 * keys and values are already written), flash-attention style: scores, an online softmax and the
 * weighted sum of values in FP32, never materializing the score matrix. This file holds the prefill
 * kernel on CUDA cores (any number of new tokens per sequence; the fallback of the tensor-core one,
 * llm_cuda_prefill.cu, before sm_80), llmc_prefill_attention, which picks one of the two, and
 * llmc_attention, which picks the prefill or the decode attention (llm_cuda_decode.cu). Head dims:
 * any multiple of 8 up to 256, fast paths compiled for 64, 80, 96, 128 and 256 (llm_cuda_attn.cuh);
 * any number of query heads per KV head; 16-bit caches, or FP8 (E4M3) ones with per-(layer, KV head)
 * scales, dequantized in registers.
 *
 * The prefill core (att_tile): a warp holds up to ATT_R query rows (FP32, pre-scaled by 1/sqrt(hd), in
 * shared memory) and attends them to a tile of 32 keys, lane j scoring key j against every row
 * (16-byte loads of the key: a key row is hd 16-bit values, hd a multiple of 8), then updating each
 * row's running max m, sum l and output accumulator; lane i owns the output dims att_dims gives it.
 * Rows of one warp share the keys they read: they are heads of one KV head (GQA) and/or consecutive
 * tokens.
 *
 * prefill_kernel: grid (row tiles, KV heads, sequences); the rows of a sequence are its (new token,
 * query head of the group) pairs, ATT_R per warp, ATT_WARPS warps per block, each warp walking the
 * keys from its first row's window start (0 without a window) up to its last row's position
 * (causal). Shared memory: ATT_WARPS * ATT_R * HDM floats (32 KB at head dim 256, static). */
#include "llm/cuda/llm_cuda_attn.cuh"

#include <math.h>
#include <string.h>

#define ATT_WARPS 4
#define ATT_R LLMC_MAX_GROUP /* query rows per warp */

/* A warp's online-softmax state for its ATT_R rows; acc holds the lane's E output dims. */
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

/* Attends rows q[r] ([ATT_R][HDM] in shared memory, the first hd of each set) to keys [j0, min(j0 +
 * 32, j_end)); row r may see keys lo[r]..limit[r] (limit -1: an unused row). A row that sees none of
 * the tile's keys skips it. f8: kc and vc hold E4M3 codes, times ksc / vsc. The whole warp calls it
 * with the same arguments. */
template <typename T, int HDC, int HDM>
static __device__ __forceinline__ void att_tile(att_state<att_dims<HDC, HDM>::E> &st, const float *q,
                                                const int (&lo)[ATT_R], const int (&limit)[ATT_R], int j0, int j_end,
                                                const T *__restrict__ kc,
                                                const T *__restrict__ vc, const att_cache &c, int hd, bool f8, float ksc,
                                                float vsc) {
    constexpr int E = att_dims<HDC, HDM>::E;
    const int lane = threadIdx.x & 31, j = j0 + lane;
    float s[ATT_R];
#pragma unroll
    for (int r = 0; r < ATT_R; r++) s[r] = 0.0f;
    if (j < j_end) {
        const size_t slot = att_slot(c, j, hd);
        const T *kr = kc + slot;
        const uint8_t *kr8 = reinterpret_cast<const uint8_t *>(kc) + slot;
#pragma unroll 2
        for (int d0 = 0; d0 < hd; d0 += 8) {
            float kf[8];
            if (f8) att_load8_e4m3(kr8 + d0, ksc, true, kf);
            else lc_load8<T>(kr + d0, kf);
#pragma unroll
            for (int r = 0; r < ATT_R; r++) {
                if (limit[r] < j0 || lo[r] >= j0 + 32) continue; /* uniform over the warp */
#pragma unroll
                for (int e = 0; e < 8; e++) s[r] += q[r * HDM + d0 + e] * kf[e];
            }
        }
    }
#pragma unroll
    for (int r = 0; r < ATT_R; r++) {
        if (limit[r] < j0 || lo[r] >= j0 + 32) {
            s[r] = 0.0f;
            continue;
        }
        const float sv = j < j_end && j <= limit[r] && j >= lo[r] ? s[r] : -INFINITY;
        const float mn = fmaxf(st.m[r], ku_warp_max(sv)); /* finite: lo[r] <= limit[r], one of them in the tile */
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
        float vf[E];
        const size_t slot = att_slot(c, j0 + jj, hd);
        if (f8) att_load_dims_e4m3<HDC, HDM>(vf, reinterpret_cast<const uint8_t *>(vc) + slot, vsc, lane, hd);
        else att_load_dims<T, HDC, HDM>(vf, vc + slot, lane, hd);
#pragma unroll
        for (int r = 0; r < ATT_R; r++) {
            if (limit[r] < j0 || lo[r] >= j0 + 32) continue;
            const float p = __shfl_sync(0xffffffffu, s[r], jj);
#pragma unroll
            for (int e = 0; e < E; e++) st.acc[r][e] += p * vf[e];
        }
    }
}

template <typename T, int HDC, int HDM>
__global__ void __launch_bounds__(ATT_WARPS * 32)
    prefill_kernel(const T *__restrict__ qkv, int ldq, T *__restrict__ out, int ldo, const int32_t *__restrict__ seq_start,
                   const int32_t *__restrict__ ctx_len, const int32_t *__restrict__ table, int table_stride,
                   const T *__restrict__ kc, const T *__restrict__ vc, int n_head, int n_kv_head, int bs, float scale,
                   int window, const float *__restrict__ kv_scales, int hd_arg) {
    using D = att_dims<HDC, HDM>;
    constexpr int E = D::E;
    const int hd = HDC ? HDC : hd_arg;
    __shared__ __align__(16) float qs[ATT_WARPS][ATT_R][HDM];
    const int seq = blockIdx.z, g = blockIdx.y, warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int group = n_head / n_kv_head, s0 = seq_start[seq], n = seq_start[seq + 1] - s0, ctx = ctx_len[seq];
    const int row0 = (blockIdx.x * ATT_WARPS + warp) * ATT_R; /* rows: (token t, head hg) as t * group + hg */
    if (row0 >= n * group) return;                            /* no block-wide synchronization below */
    int lo[ATT_R], limit[ATT_R], jmin = ctx, jmax = -1;
#pragma unroll
    for (int r = 0; r < ATT_R; r++) {
        const int row = row0 + r, t = row / group, h = g * group + row % group;
        const bool used = row < n * group;
        limit[r] = used ? ctx - n + t : -1;
        lo[r] = window > 0 ? max(0, limit[r] + 1 - window) : 0;
        jmax = max(jmax, limit[r]);
        if (used) jmin = min(jmin, lo[r]);
        const T *qp = qkv + (size_t)(s0 + t) * ldq + (size_t)h * hd;
        for (int e = lane; e < hd; e += 32) qs[warp][r][e] = used ? ku_f32(qp[e]) * scale : 0.0f;
    }
    __syncwarp();
    const att_cache c = {table + (size_t)seq * table_stride, bs, (size_t)n_kv_head * bs * hd, (size_t)g * bs * hd};
    att_state<E> st;
    att_init(st);
    const bool f8 = kv_scales != nullptr;
    const float ksc = f8 ? kv_scales[g] : 1.0f, vsc = f8 ? kv_scales[n_kv_head + g] : 1.0f;
    for (int j0 = jmin; j0 <= jmax; j0 += 32)
        att_tile<T, HDC, HDM>(st, &qs[warp][0][0], lo, limit, j0, jmax + 1, kc, vc, c, hd, f8, ksc, vsc);
#pragma unroll
    for (int r = 0; r < ATT_R; r++) {
        if (limit[r] < 0) continue;
        const int row = row0 + r, t = row / group, h = g * group + row % group;
        const float inv = 1.0f / st.l[r];
        float o[E];
#pragma unroll
        for (int e = 0; e < E; e++) o[e] = st.acc[r][e] * inv;
        att_store_dims<T, HDC, HDM>(out + (size_t)(s0 + t) * ldo + (size_t)h * hd, o, lane, hd);
    }
}

/* ---------------------------------------------------------------- launch */

struct prefill_launcher {
    template <typename T, int HDC, int HDM> static kiln_status run(const llmc_prefill_attn *a, cudaStream_t stream) {
        const int group = a->n_head / a->n_kv_head, rows_per_block = ATT_WARPS * ATT_R;
        const float scale = 1.0f / sqrtf((float)a->head_dim);
        dim3 grid((unsigned)(((long long)a->max_new * group + rows_per_block - 1) / rows_per_block),
                  (unsigned)a->n_kv_head, (unsigned)a->n_seqs);
        prefill_kernel<T, HDC, HDM><<<grid, ATT_WARPS * 32, 0, stream>>>(
            (const T *)a->q, a->ldq, (T *)a->out, a->ldo, a->seq_start, a->ctx_len, a->table, a->table_stride,
            (const T *)a->kc, (const T *)a->vc, a->n_head, a->n_kv_head, a->block_size, scale, a->window, a->kv_scales,
            a->head_dim);
        KILN_CUDA_LAUNCH_CHECK("prefill_kernel");
        return KILN_OK;
    }
};

extern "C" kiln_status llmc_prefill_attention(const llmc_prefill_attn *a, cudaStream_t stream) {
    if (!att_shape_ok(a->dtype, a->head_dim, a->n_head, a->n_kv_head) || a->n_seqs < 1 || a->max_new < 1 ||
        a->block_size < 1 || a->ldq % 8 || a->ldo % 8 || a->kernel < LLMC_PREFILL_AUTO ||
        a->kernel > LLMC_PREFILL_TENSOR_CORES || a->window < 0)
        return kiln_error(KILN_ERR_INVALID_ARGUMENT, "prefill attention: head_dim %d (a multiple of 8 up to %d), %d "
                          "heads over %d KV heads, %d sequences, max_new %d, block_size %d, ldq %d, ldo %d, %s, kernel "
                          "%d, window %d: unsupported", a->head_dim, LLMC_MAX_HEAD_DIM, a->n_head, a->n_kv_head,
                          a->n_seqs, a->max_new, a->block_size, a->ldq, a->ldo, kiln_dtype_name(a->dtype), a->kernel,
                          a->window);
    const bool aligned = ku_aligned16(a->q) && ku_aligned16(a->kc) && ku_aligned16(a->vc) && ku_aligned16(a->out);
    int dev = 0, cc_major = 0;
    KILN_CUDA_TRY(cudaGetDevice(&dev));
    KILN_CUDA_TRY(cudaDeviceGetAttribute(&cc_major, cudaDevAttrComputeCapabilityMajor, dev));
    if (a->kernel == LLMC_PREFILL_TENSOR_CORES && (cc_major < 8 || !aligned))
        return kiln_error(KILN_ERR_UNSUPPORTED, "prefill attention on the tensor cores needs sm_80 or later (device "
                          "%d is sm_%d.x) and 16-byte aligned queries, cache and output (%s)", dev, cc_major,
                          aligned ? "they are" : "they are not");
    if (a->kernel != LLMC_PREFILL_CUDA_CORES && cc_major >= 8 && aligned) return llmc_prefill_attention_tc(a, stream);
    return a->dtype == KILN_F16 ? att_dispatch_hd<prefill_launcher, __half>(a->head_dim, a, stream)
                                : att_dispatch_hd<prefill_launcher, bf16>(a->head_dim, a, stream);
}

extern "C" kiln_status llmc_attention(kiln_llm_cuda *g, const llmc_step *s, const void *kc, const void *vc,
                                      const float *kv_scales, int block_size) {
    const kiln_llm_config *c = &g->cfg;
    const int hd = c->head_dim, ldq = (c->n_head + 2 * c->n_kv_head) * hd, ldo = c->n_head * hd;
    /* few new tokens over a long context (a prompt after a cached prefix, a speculative verify step): the
     * CUDA-core prefill kernel would give a few warps the whole context each, so before sm_80 the decode
     * kernel takes every token as a row; the tensor-core kernel is faster than those rows from 8 to 64 new
     * tokens over 2,000 (bench/RESULTS.md) and takes them wherever it runs */
    const bool token_rows = !s->decode && g->kc.cc_major < 8 && s->max_new <= LLMC_TOKEN_ROWS_MAX_NEW &&
                            s->max_ctx >= 4 * s->max_new;
    if (!s->decode && !token_rows) {
        llmc_prefill_attn a;
        memset(&a, 0, sizeof a);
        a.dtype = g->dtype;
        a.head_dim = hd;
        a.n_head = c->n_head;
        a.n_kv_head = c->n_kv_head;
        a.n_seqs = s->n_seqs;
        a.block_size = block_size;
        a.max_new = s->max_new;
        a.q = g->qkv;
        a.ldq = ldq;
        a.out = g->att;
        a.ldo = ldo;
        a.seq_start = s->seq_start;
        a.ctx_len = s->ctx_len;
        a.table = s->table;
        a.table_stride = s->table_stride;
        a.kc = kc;
        a.vc = vc;
        a.window = c->sliding_window;
        a.kv_scales = kv_scales;
        return llmc_prefill_attention(&a, g->kc.stream);
    }
    /* decode: the grid is a function of (n_seqs, the context bucket s->max_ctx): what a graph is keyed by */
    llmc_decode_attn a;
    memset(&a, 0, sizeof a);
    a.dtype = g->dtype;
    a.head_dim = hd;
    a.n_head = c->n_head;
    a.n_kv_head = c->n_kv_head;
    a.n_seqs = token_rows ? s->n_tokens : s->n_seqs;
    a.block_size = block_size;
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
    a.sm_count = g->kc.sm_count;
    a.window = c->sliding_window;
    a.kv_scales = kv_scales;
    a.pdl = g->pdl; /* RoPE + KV write before it lets it start at once */
    if (token_rows) {
        a.part_keys = -1;
        a.row_seq = s->tok_seq;
        a.row_pos = s->positions;
    }
    return llmc_decode_attention(&a, g->kc.stream);
}
