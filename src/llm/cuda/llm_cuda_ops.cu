/* llm_cuda_ops.cu — the per-token kernels of the LLM forward on CUDA: embedding (+ GPT-2's learned
 * positions, times Gemma's scale), residual add fused with LayerNorm / RMSNorm (the tensor engine's
 * launcher, kiln_cuda_norm_rows of cuda_launchers.h, in its residual form), RoPE (whole or partial, LongRoPE's scale)
 * fused with the KV cache write, GELU(tanh), SwiGLU and GeGLU, the greedy argmax of the logits, and
 * the random fill of benchmark weights. Each mirrors the CPU op of
 * llm_cpu_ops.c on values rounded to the model dtype between kernels. */
#include "backends/cuda/cuda_launchers.h" /* kiln_cuda_norm_rows */
#include "llm/cuda/llm_cuda_attn.cuh" /* att_to_e4m3 (and llm_cuda_util.cuh) */
#include "llm/llm_internal.h" /* kiln_llm_rope_dim, kiln_llm_rope_scale, kiln_llm_norm_offset */

#include <math.h>
#include <stdint.h>
#include <string.h>

#define OPS_THREADS 256

/* ---------------------------------------------------------------- embedding */

/* scale: 1, or sqrt(d_model) for Gemma (exact for 1, so the other families' values are unchanged). */
template <typename T>
__global__ void embed_kernel(float *__restrict__ x, const T *__restrict__ tok, const T *__restrict__ pos,
                             const int32_t *__restrict__ tokens, const int32_t *__restrict__ positions, int d,
                             float scale) {
    const int t = blockIdx.x;
    const T *e = tok + (size_t)tokens[t] * d;
    const T *p = pos ? pos + (size_t)positions[t] * d : NULL;
    float *xr = x + (size_t)t * d;
    for (int i = threadIdx.x; i < d; i += blockDim.x) xr[i] = (ku_f32(e[i]) + (p ? ku_f32(p[i]) : 0.0f)) * scale;
}

template <typename T> static kiln_status launch_embed(kiln_llm_cuda *g, const llmc_step *s) {
    const float scale = g->cfg.scale_emb ? sqrtf((float)g->cfg.d_model) : 1.0f;
    embed_kernel<T><<<s->n_tokens, OPS_THREADS, 0, g->kc.stream>>>(g->x, (const T *)g->tok_emb, (const T *)g->pos_emb,
                                                              s->tokens, s->positions, g->cfg.d_model, scale);
    KILN_CUDA_LAUNCH_CHECK("embed_kernel");
    return KILN_OK;
}

extern "C" kiln_status llmc_embed(kiln_llm_cuda *g, const llmc_step *s) { return LC_DISPATCH(g->dtype, launch_embed, g, s); }

/* ---------------------------------------------------------------- residual add + norm */

extern "C" kiln_status llmc_add_norm(kiln_llm_cuda *g, int n_rows, const int32_t *rows, const void *delta, bool store,
                                     const float *w, const float *b) {
    kiln_cuda_norm a;
    memset(&a, 0, sizeof a);
    a.dtype = g->dtype;
    a.residual = true;
    a.rms = b == NULL;
    a.rows = n_rows;
    a.len = g->cfg.d_model;
    a.x = g->x;
    a.delta = delta;
    a.gather = rows;
    a.store = store;
    a.scale = w;
    a.bias = b;
    a.scale_offset = kiln_llm_norm_offset(&g->cfg);
    a.eps = g->cfg.norm_eps;
    a.y = g->h;
    a.sm_count = g->kc.sm_count;
    a.pdl = g->pdl && n_rows <= g->opt.gemv_max_tokens; /* after a GEMV (or the first layer's embedding) */
    return kiln_cuda_norm_rows(&a, g->kc.stream);
}

/* ---------------------------------------------------------------- RoPE + KV cache write */

#define ROPE_HEADS_MANY 4 /* heads of a RoPE + KV block in steps of more than ROPE_FEW_TOKENS tokens */
#define ROPE_FEW_TOKENS 8

/* Block (token, group of blockDim.y heads): slice threadIdx.y takes head = blockIdx.y * blockDim.y +
 * threadIdx.y (+ n_head without inv_freq, as no q head changes then); head < n_head is q head head,
 * head < n_head + n_kv_head k head head - n_head with its v head, others nothing. A decode step of
 * few tokens runs a head a block (its one token spreads over n_head + n_kv_head blocks), larger steps
 * ROPE_HEADS_MANY; each value is read and written in one round trip. With inv_freq (not GPT-2) the
 * first rot dims of the head are rotated in place by HF's rotate_half convention over those dims
 * (cos/sin of position * inv_freq, times rscale (LongRoPE's attention factor, else 1), computed in
 * double, rounded to FP32, as the CPU does); a k slice then writes its k and v heads to slot
 * (pos % bs) of block table[pos / bs]. */
template <typename T>
__global__ void rope_kv_kernel(T *__restrict__ qkv, int ldq, const int32_t *__restrict__ positions,
                               const int32_t *__restrict__ tok_seq, const double *__restrict__ inv_freq, int freq_stride,
                               const int32_t *__restrict__ table, int table_stride, T *__restrict__ kc,
                               T *__restrict__ vc, const float *__restrict__ kv_scales, int n_head, int n_kv_head, int hd,
                               int rot, double rscale, int bs) {
    extern __shared__ float sm[]; /* [rot / 2] cos, [rot / 2] sin, then [blockDim.y][hd] the heads' values */
    const int t = blockIdx.x, half = rot / 2, heads = n_head + n_kv_head;
    const int head = (blockIdx.y * blockDim.y + threadIdx.y) + (inv_freq ? 0 : n_head);
    const bool live = head < heads;
    float *head_v = sm + rot + threadIdx.y * hd;
    lc_pdl_wait();
    lc_pdl_launch_dependents();
    const int pos = positions[t], seq = tok_seq[t];
    T *a = qkv + (size_t)t * ldq + (size_t)(live ? head : 0) * hd; /* q heads then k heads: contiguous */
    if (inv_freq) {
        for (int i = threadIdx.y * blockDim.x + threadIdx.x; i < half; i += blockDim.x * blockDim.y) {
            double ang = (double)pos * inv_freq[(size_t)seq * freq_stride + i];
            sm[i] = (float)(cos(ang) * rscale);
            sm[half + i] = (float)(sin(ang) * rscale);
        }
        for (int e = threadIdx.x; e < rot && live; e += blockDim.x) head_v[e] = ku_f32(a[e]);
        __syncthreads();
        for (int e = threadIdx.x; e < rot && live; e += blockDim.x) {
            const int i = e < half ? e : e - half;
            const float x1 = head_v[i], x2 = head_v[i + half];
            a[e] = ku_from_f32<T>(e < half ? x1 * sm[i] - x2 * sm[half + i] : x2 * sm[i] + x1 * sm[half + i]);
        }
    }
    if (!live || head < n_head) return;
    const int gh = head - n_head, blk = table[(size_t)seq * table_stride + pos / bs], slot = pos % bs;
    const T *k = a, *v = a + (size_t)n_kv_head * hd; /* k[e]: rotated above by this same thread */
    const size_t base = (((size_t)blk * n_kv_head + gh) * bs + slot) * hd;
    for (int e = threadIdx.x; e < hd; e += blockDim.x) {
        if (kv_scales) { /* an FP8 cache: codes of x / scale */
            reinterpret_cast<uint8_t *>(kc)[base + e] = att_to_e4m3(ku_f32(k[e]), kv_scales[gh]);
            reinterpret_cast<uint8_t *>(vc)[base + e] = att_to_e4m3(ku_f32(v[e]), kv_scales[n_kv_head + gh]);
        } else {
            kc[base + e] = k[e];
            vc[base + e] = v[e];
        }
    }
}

template <typename T> static kiln_status launch_rope_kv(const llmc_rope_kv *a, cudaStream_t stream) {
    const int rot = a->rot_dim ? a->rot_dim : a->head_dim;
    const int heads = (a->inv_freq ? a->n_head : 0) + a->n_kv_head; /* the heads that change */
    const int per = a->n_tokens > ROPE_FEW_TOKENS ? ROPE_HEADS_MANY : 1;
    const dim3 grid((unsigned)a->n_tokens, (unsigned)((heads + per - 1) / per));
    const dim3 block((unsigned)((a->head_dim / 2 + 31) / 32 * 32), (unsigned)per); /* a pair of values a thread */
    return lc_launch_grid(rope_kv_kernel<T>, grid, block, (size_t)(rot + per * a->head_dim) * sizeof(float), stream,
                          a->pdl, (T *)a->qkv, a->ldq, a->positions, a->tok_seq, a->inv_freq, a->inv_freq_stride,
                          a->table, a->table_stride, (T *)a->kc, (T *)a->vc, a->kv_scales, a->n_head, a->n_kv_head,
                          a->head_dim, rot, a->rope_scale ? a->rope_scale : 1.0, a->block_size);
}

extern "C" kiln_status llmc_rope_kv_launch(const llmc_rope_kv *a, cudaStream_t stream) {
    if ((a->dtype != KILN_F16 && a->dtype != KILN_BF16) || a->head_dim < 2 || a->head_dim % 2 ||
        a->head_dim > LLMC_MAX_HEAD_DIM || a->n_head < 1 || a->n_kv_head < 1 || a->block_size < 1 || a->n_tokens < 0 ||
        a->rot_dim < 0 || a->rot_dim % 2 || a->rot_dim > a->head_dim || !(a->rope_scale >= 0))
        return kiln_error(KILN_ERR_INVALID_ARGUMENT, "RoPE + KV write: head_dim %d (rotated %d, scale %g), %d heads, %d "
                          "KV heads, block_size %d, %d tokens, %s: unsupported", a->head_dim, a->rot_dim,
                          a->rope_scale, a->n_head, a->n_kv_head, a->block_size, a->n_tokens,
                          kiln_dtype_name(a->dtype));
    if (a->n_tokens == 0) return KILN_OK;
    return LC_DISPATCH(a->dtype, launch_rope_kv, a, stream);
}

extern "C" kiln_status llmc_rope_kv_write(kiln_llm_cuda *g, const llmc_step *s, void *kc, void *vc, const float *kv_scales,
                                          int block_size) {
    const kiln_llm_config *c = &g->cfg;
    llmc_rope_kv a;
    memset(&a, 0, sizeof a);
    a.dtype = g->dtype;
    a.n_tokens = s->n_tokens;
    a.n_head = c->n_head;
    a.n_kv_head = c->n_kv_head;
    a.head_dim = c->head_dim;
    a.rot_dim = kiln_llm_rope_dim(c);
    a.rope_scale = kiln_llm_rope_scale(c);
    a.block_size = block_size;
    a.qkv = g->qkv;
    a.ldq = (c->n_head + 2 * c->n_kv_head) * c->head_dim;
    a.positions = s->positions;
    a.tok_seq = s->tok_seq;
    a.inv_freq = s->inv_freq;
    a.inv_freq_stride = s->inv_freq_stride;
    a.table = s->table;
    a.table_stride = s->table_stride;
    a.kc = kc;
    a.vc = vc;
    a.kv_scales = kv_scales;
    /* after the fused QKV product, or the GEMV one */
    a.pdl = (g->fuse == LLMC_FUSE_PDL || g->pdl) && s->n_tokens <= g->opt.gemv_max_tokens;
    return llmc_rope_kv_launch(&a, g->kc.stream);
}

/* ---------------------------------------------------------------- activations */

/* V consecutive values of T, loaded and stored at once (V * sizeof(T) bytes, aligned so). */
template <typename T, int V> struct alignas(sizeof(T) * V) act_pack {
    T v[V];
};

static __device__ __forceinline__ float act_gelu(float v) {
    const float k = 0.7978845608028654f; /* sqrt(2 / pi) */
    return 0.5f * v * (1.0f + tanhf(k * (v + 0.044715f * v * v * v)));
}

/* x[i] = GELU(tanh)(x[i]), i < count, V values a thread at a time (count a multiple of V, x aligned to
 * V values). */
template <typename T, int V> __global__ void gelu_kernel(T *__restrict__ x, size_t count) {
    lc_pdl_launch_dependents(); /* the down product may fetch its weights meanwhile */
    lc_pdl_wait();
    for (size_t c = (size_t)blockIdx.x * blockDim.x + threadIdx.x; c < count / V; c += (size_t)gridDim.x * blockDim.x) {
        act_pack<T, V> p = reinterpret_cast<const act_pack<T, V> *>(x)[c];
#pragma unroll
        for (int i = 0; i < V; i++) p.v[i] = ku_from_f32<T>(act_gelu(ku_f32(p.v[i])));
        reinterpret_cast<act_pack<T, V> *>(x)[c] = p;
    }
}

/* Rows [gate | up] of width 2 ff: gate = SiLU(gate) * up, or GELU(tanh)(gate) * up with GELU; count = rows
 * x ff, V values a thread at a time (ff a multiple of V, gu aligned to V values). */
template <typename T, bool GELU, int V> __global__ void gated_kernel(T *__restrict__ gu, int ff, size_t count) {
    lc_pdl_launch_dependents(); /* the down product may fetch its weights meanwhile */
    lc_pdl_wait();
    const size_t ffv = (size_t)(ff / V);
    for (size_t c = (size_t)blockIdx.x * blockDim.x + threadIdx.x; c < count / V; c += (size_t)gridDim.x * blockDim.x) {
        const size_t t = c / ffv, j = (c - t * ffv) * V;
        act_pack<T, V> *gp = reinterpret_cast<act_pack<T, V> *>(gu + t * 2 * (size_t)ff + j);
        act_pack<T, V> g = gp[0], u = reinterpret_cast<const act_pack<T, V> *>(gu + t * 2 * (size_t)ff + ff + j)[0];
#pragma unroll
        for (int i = 0; i < V; i++) {
            const float gv = ku_f32(g.v[i]), uv = ku_f32(u.v[i]);
            const float act = GELU ? act_gelu(gv) : gv / (1.0f + expf(-gv));
            g.v[i] = ku_from_f32<T>(act * uv);
        }
        gp[0] = g;
    }
}

/* The activation kernel at V values a thread over count = n x ff outputs. */
template <typename T, int V> static kiln_status launch_activation_v(const llmc_activation_args *a, cudaStream_t stream) {
    const size_t count = (size_t)a->n * a->ff;
    const int64_t cap = (int64_t)(a->sm_count > 0 ? a->sm_count : 1) * 8;
    int64_t blocks = ((int64_t)(count / V) + OPS_THREADS - 1) / OPS_THREADS;
    if (blocks > cap) blocks = cap;
    if (!a->gated)
        return lc_launch(gelu_kernel<T, V>, (unsigned)blocks, 1, OPS_THREADS, 0, stream, a->pdl, (T *)a->x, count);
    if (a->act == KILN_GATE_GELU_TANH)
        return lc_launch(gated_kernel<T, true, V>, (unsigned)blocks, 1, OPS_THREADS, 0, stream, a->pdl, (T *)a->x, a->ff,
                         count);
    return lc_launch(gated_kernel<T, false, V>, (unsigned)blocks, 1, OPS_THREADS, 0, stream, a->pdl, (T *)a->x, a->ff,
                     count);
}

/* Eight values (16 bytes) a thread where ff and x allow it and there are values enough for a block of
 * such threads on every SM; else one (a decode step's few rows: more threads, shorter chains). */
template <typename T> static kiln_status launch_activation(const llmc_activation_args *a, cudaStream_t stream) {
    const size_t wide = (size_t)(a->sm_count > 0 ? a->sm_count : 1) * OPS_THREADS * 8;
    if (a->ff % 8 == 0 && (uintptr_t)a->x % 16 == 0 && (size_t)a->n * a->ff >= wide)
        return launch_activation_v<T, 8>(a, stream);
    return launch_activation_v<T, 1>(a, stream);
}

extern "C" kiln_status llmc_activation_launch(const llmc_activation_args *a, cudaStream_t stream) {
    if ((a->dtype != KILN_F16 && a->dtype != KILN_BF16) || a->n < 0 || a->ff < 1 || (a->n > 0 && !a->x) ||
        (a->gated && a->act != KILN_GATE_SILU && a->act != KILN_GATE_GELU_TANH))
        return kiln_error(KILN_ERR_INVALID_ARGUMENT, "activation: %d rows of %d, %s: unsupported", a->n, a->ff,
                          kiln_dtype_name(a->dtype));
    if (a->n == 0) return KILN_OK;
    return LC_DISPATCH(a->dtype, launch_activation, a, stream);
}

extern "C" kiln_status llmc_activation(kiln_llm_cuda *g, int n) {
    llmc_activation_args a;
    memset(&a, 0, sizeof a);
    a.dtype = g->dtype;
    a.gated = g->cfg.arch != KILN_LLM_GPT2;
    a.act = g->cfg.gate_act;
    a.x = g->mlp;
    a.n = n;
    a.ff = g->cfg.d_ff;
    a.sm_count = g->kc.sm_count;
    a.pdl = g->pdl && n <= g->opt.gemv_max_tokens; /* after the up product's GEMV */
    return llmc_activation_launch(&a, g->kc.stream);
}

/* ---------------------------------------------------------------- greedy argmax */

#define ARGMAX_THREADS 1024

/* (v, i) beats (bv, bi): larger value, or the same value at a lower index. NaN never wins. */
static __device__ __forceinline__ bool beats(float v, int i, float bv, int bi) {
    return v > bv || (v == bv && i < bi);
}

/* One block per row. */
__global__ void argmax_kernel(const float *__restrict__ logits, int vocab, int32_t *__restrict__ out) {
    __shared__ float sv[32];
    __shared__ int si[32];
    const float *row = logits + (size_t)blockIdx.x * vocab;
    float bv = -INFINITY;
    int bi = vocab; /* "none yet": loses to any real index at -inf */
    for (int i = threadIdx.x; i < vocab; i += blockDim.x)
        if (beats(row[i], i, bv, bi)) {
            bv = row[i];
            bi = i;
        }
    for (int o = 16; o > 0; o >>= 1) {
        float v = __shfl_xor_sync(0xffffffffu, bv, o);
        int i = __shfl_xor_sync(0xffffffffu, bi, o);
        if (beats(v, i, bv, bi)) {
            bv = v;
            bi = i;
        }
    }
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    if (lane == 0) {
        sv[warp] = bv;
        si[warp] = bi;
    }
    __syncthreads();
    if (warp == 0) {
        bv = lane < nw ? sv[lane] : -INFINITY;
        bi = lane < nw ? si[lane] : vocab;
        for (int o = 16; o > 0; o >>= 1) {
            float v = __shfl_xor_sync(0xffffffffu, bv, o);
            int i = __shfl_xor_sync(0xffffffffu, bi, o);
            if (beats(v, i, bv, bi)) {
                bv = v;
                bi = i;
            }
        }
        if (lane == 0) out[blockIdx.x] = bi < vocab ? bi : 0; /* a row of NaNs gives 0 */
    }
}

extern "C" kiln_status llmc_argmax_launch(cudaStream_t stream, const float *logits, int n_rows, int vocab, int32_t *ids) {
    if (n_rows < 0 || vocab < 1)
        return kiln_error(KILN_ERR_INVALID_ARGUMENT, "argmax: %d rows of %d logits: unsupported", n_rows, vocab);
    if (n_rows == 0) return KILN_OK;
    argmax_kernel<<<n_rows, ARGMAX_THREADS, 0, stream>>>(logits, vocab, ids);
    KILN_CUDA_LAUNCH_CHECK("argmax_kernel");
    return KILN_OK;
}

extern "C" kiln_status llmc_argmax_load(void) {
    struct cudaFuncAttributes attr;
    KILN_CUDA_TRY(cudaFuncGetAttributes(&attr, argmax_kernel));
    return KILN_OK;
}

extern "C" kiln_status llmc_argmax(kiln_llm_cuda *g, int n_rows) {
    return llmc_argmax_launch(g->kc.stream, g->logits, n_rows, g->cfg.vocab, g->ids);
}

/* ---------------------------------------------------------------- random fill */

/* splitmix64 of (seed, i) as a uniform in [-1, 1). */
static __device__ __forceinline__ float hash_uniform(uint64_t seed, size_t i) {
    uint64_t z = seed + 0x9E3779B97F4A7C15ULL * (uint64_t)(i + 1);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    z ^= z >> 31;
    return (float)((double)(z >> 40) / (double)(1ULL << 23) - 1.0);
}

template <typename T>
__global__ void fill_kernel(T *__restrict__ p, size_t n, uint64_t seed, float center, float scale) {
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        p[i] = ku_from_f32<T>(center + scale * hash_uniform(seed, i));
}

extern "C" kiln_status llmc_fill_random(kiln_llm_cuda *g, void *p, kiln_dtype dtype, size_t n, uint64_t seed,
                                        float center, float scale) {
    const unsigned blocks = (unsigned)((g->kc.sm_count > 0 ? g->kc.sm_count : 1) * 8);
    if (dtype == KILN_F32)
        fill_kernel<float><<<blocks, OPS_THREADS, 0, g->kc.stream>>>((float *)p, n, seed, center, scale);
    else if (dtype == KILN_F16)
        fill_kernel<__half><<<blocks, OPS_THREADS, 0, g->kc.stream>>>((__half *)p, n, seed, center, scale);
    else
        fill_kernel<bf16><<<blocks, OPS_THREADS, 0, g->kc.stream>>>((bf16 *)p, n, seed, center, scale);
    KILN_CUDA_LAUNCH_CHECK("fill_kernel");
    return KILN_OK;
}
