/* llm_cuda_gemv_q.cu — the weight-only INT8 products of the LLM forward on CUDA (weights int8 [N, K]
 * with one fp32 scale per output row, kept so on the device): a dequantizing GEMV for decode (one warp
 * per output row, 16 int8 weights per 16-byte load converted to fp32 in registers, up to
 * LLMC_GEMV_MAX token rows summed in fp32 against the same loaded weights, the row's scale applied
 * once to each sum), and for many token rows (prefill) tiles of weight rows dequantized to the
 * activation dtype in a device workspace, each multiplied by llmc_linear's cuBLASLt product. Also the
 * embedding lookup of an int8 token embedding. Activations are the model's compute dtype (fp16 or
 * bf16). */
#include "llm/cuda/llm_cuda_util.cuh"

#define QG_WARPS 4 /* output rows (one warp each) of a GEMV block */
#define QD_THREADS 256

/* ---------------------------------------------------------------- GEMV */

/* The 16 int8 values of u as fp32. */
static __device__ __forceinline__ void q8_unpack16(const uint4 &u, float (&f)[16]) {
    const uint32_t w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
    for (int j = 0; j < 4; j++) {
#pragma unroll
        for (int b = 0; b < 4; b++) f[4 * j + b] = (float)(int8_t)(w[j] >> (8 * b));
    }
}

/* y[r, o] = scale[o] * sum_k x[r, k] q[o, k] + bias[o], r < NR; K % 16 == 0, x rows 16-byte aligned. */
template <typename T, typename O, int NR>
__global__ void __launch_bounds__(QG_WARPS * 32)
    gemv_q8_kernel(const T *__restrict__ x, int ldx, int K, const int8_t *__restrict__ w, const float *__restrict__ scale,
                   const T *__restrict__ bias, int N, O *__restrict__ y, int ldy) {
    const int lane = threadIdx.x & 31, o = blockIdx.x * QG_WARPS + (threadIdx.x >> 5);
    if (o >= N) return;
    const int8_t *wr = w + (size_t)o * K;
    float acc[NR];
#pragma unroll
    for (int r = 0; r < NR; r++) acc[r] = 0.0f;
#pragma unroll 4 /* several 16-byte weight loads in flight per lane */
    for (int k = lane * 16; k < K; k += 32 * 16) {
        float wf[16];
        q8_unpack16(__ldg(reinterpret_cast<const uint4 *>(wr + k)), wf);
#pragma unroll
        for (int r = 0; r < NR; r++) {
            float a[8], b[8];
            lc_load8<T>(x + (size_t)r * ldx + k, a);
            lc_load8<T>(x + (size_t)r * ldx + k + 8, b);
            float s = acc[r];
#pragma unroll
            for (int j = 0; j < 8; j++) s = fmaf(a[j], wf[j], s);
#pragma unroll
            for (int j = 0; j < 8; j++) s = fmaf(b[j], wf[8 + j], s);
            acc[r] = s;
        }
    }
#pragma unroll
    for (int r = 0; r < NR; r++) {
#pragma unroll
        for (int m = 16; m; m >>= 1) acc[r] += __shfl_xor_sync(0xffffffffu, acc[r], m);
    }
    if (lane) return;
    const float sc = scale[o], bo = bias ? ku_f32(bias[o]) : 0.0f;
#pragma unroll
    for (int r = 0; r < NR; r++) y[(size_t)r * ldy + o] = ku_from_f32<O>(acc[r] * sc + bo);
}

template <typename T, typename O, int NR>
static void gemv_q8_rows(cudaStream_t st, const void *x, int ldx, int K, const int8_t *w, const float *scale,
                         const void *bias, int N, void *y, int ldy) {
    gemv_q8_kernel<T, O, NR><<<(N + QG_WARPS - 1) / QG_WARPS, QG_WARPS * 32, 0, st>>>(
        (const T *)x, ldx, K, w, scale, (const T *)bias, N, (O *)y, ldy);
}

template <typename T, typename O>
static void gemv_q8_n(cudaStream_t st, const void *x, int ldx, int n, int K, const int8_t *w, const float *scale,
                      const void *bias, int N, void *y, int ldy) {
    switch (n) {
    case 1: gemv_q8_rows<T, O, 1>(st, x, ldx, K, w, scale, bias, N, y, ldy); break;
    case 2: gemv_q8_rows<T, O, 2>(st, x, ldx, K, w, scale, bias, N, y, ldy); break;
    case 3: gemv_q8_rows<T, O, 3>(st, x, ldx, K, w, scale, bias, N, y, ldy); break;
    case 4: gemv_q8_rows<T, O, 4>(st, x, ldx, K, w, scale, bias, N, y, ldy); break;
    case 5: gemv_q8_rows<T, O, 5>(st, x, ldx, K, w, scale, bias, N, y, ldy); break;
    case 6: gemv_q8_rows<T, O, 6>(st, x, ldx, K, w, scale, bias, N, y, ldy); break;
    case 7: gemv_q8_rows<T, O, 7>(st, x, ldx, K, w, scale, bias, N, y, ldy); break;
    default: gemv_q8_rows<T, O, 8>(st, x, ldx, K, w, scale, bias, N, y, ldy); break;
    }
}

template <typename T>
static kiln_status launch_gemv_q8(cudaStream_t st, const void *x, int ldx, int n, int K, const int8_t *w,
                                  const float *scale, const void *bias, int N, void *y, int ldy, bool out_f32) {
    if (out_f32) gemv_q8_n<T, float>(st, x, ldx, n, K, w, scale, bias, N, y, ldy);
    else gemv_q8_n<T, T>(st, x, ldx, n, K, w, scale, bias, N, y, ldy);
    KILN_CUDA_LAUNCH_CHECK("gemv_q8_kernel");
    return KILN_OK;
}

static bool aligned16(const void *p) { return ((uintptr_t)p & 15) == 0; }

extern "C" kiln_status llmc_gemv_q8_launch(kiln_dtype dtype, cudaStream_t stream, const void *x, int ldx, int n,
                                           int K, const int8_t *w, const float *scale, const void *bias, int N,
                                           void *y, int ldy, bool out_f32) {
    if (dtype != KILN_F16 && dtype != KILN_BF16)
        return kiln_error(KILN_ERR_INVALID_ARGUMENT, "int8 gemv: activations %s (float16 or bfloat16)",
                          kiln_dtype_name(dtype));
    if (n < 1 || n > LLMC_GEMV_MAX || K < 16 || K % 16 || ldx % 8 || N < 1 || ldy < N || !aligned16(x) ||
        !aligned16(w))
        return kiln_error(KILN_ERR_INVALID_ARGUMENT, "int8 gemv: n %d (1..%d), K %d (a multiple of 16), ldx %d "
                          "(a multiple of 8), N %d, ldy %d, x and w 16-byte aligned", n, LLMC_GEMV_MAX, K, ldx, N, ldy);
    return LC_DISPATCH(dtype, launch_gemv_q8, stream, x, ldx, n, K, w, scale, bias, N, y, ldy, out_f32);
}

/* ---------------------------------------------------------------- dequantized tiles */

/* dst[r, k] = q[r, k] * scale[r] in T, r < rows, k < K; four values per thread. */
template <typename T>
__global__ void dequant_q8_kernel(const int8_t *__restrict__ q, const float *__restrict__ scale, int64_t rows, int K,
                                  T *__restrict__ dst) {
    const int64_t n = rows * K;
    for (int64_t i = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) * 4; i < n; i += (int64_t)gridDim.x * blockDim.x * 4) {
#pragma unroll
        for (int j = 0; j < 4; j++) {
            const int64_t e = i + j;
            if (e < n) dst[e] = ku_from_f32<T>((float)q[e] * scale[e / K]);
        }
    }
}

template <typename T>
static kiln_status launch_dequant(cudaStream_t st, const int8_t *q, const float *scale, int rows, int K, void *dst) {
    const int64_t n = (int64_t)rows * K;
    int64_t blocks = (n / 4 + QD_THREADS - 1) / QD_THREADS;
    if (blocks > 65535) blocks = 65535;
    if (blocks < 1) blocks = 1;
    dequant_q8_kernel<T><<<(unsigned)blocks, QD_THREADS, 0, st>>>(q, scale, rows, K, (T *)dst);
    KILN_CUDA_LAUNCH_CHECK("dequant_q8_kernel");
    return KILN_OK;
}

extern "C" kiln_status llmc_dequant_q8_launch(kiln_dtype dtype, cudaStream_t stream, const int8_t *q,
                                              const float *scale, int rows, int K, void *dst) {
    if (dtype != KILN_F16 && dtype != KILN_BF16)
        return kiln_error(KILN_ERR_INVALID_ARGUMENT, "int8 dequantize: into %s (float16 or bfloat16)",
                          kiln_dtype_name(dtype));
    return LC_DISPATCH(dtype, launch_dequant, stream, q, scale, rows, K, dst);
}

/* ---------------------------------------------------------------- the product */

extern "C" kiln_status llmc_linear_w(kiln_llm_cuda *g, const void *x, int ldx, int n, int K, const void *w,
                                     const float *scale, const void *bias, int N, void *y, int ldy, bool out_f32) {
    if (!scale) return llmc_linear(g, x, ldx, n, K, w, bias, N, y, ldy, out_f32);
    if (g->int4) return llmc_linear_q4(g, x, ldx, n, K, w, scale, bias, N, y, ldy, out_f32);
    const int8_t *q = (const int8_t *)w;
    if (n <= g->opt.gemv_max_tokens && K % 16 == 0 && ldx % 8 == 0 && aligned16(x) && aligned16(q))
        return llmc_gemv_q8_launch(g->dtype, g->kc.stream, x, ldx, n, K, q, scale, bias, N, y, ldy, out_f32);
    /* tiles of weight rows (a multiple of 64, so that bias and output offsets stay aligned) */
    int64_t tile = (int64_t)(LLMC_DEQUANT_BYTES / 2 / (size_t)K) / 64 * 64;
    if (tile < 64)
        return kiln_error(KILN_ERR_UNSUPPORTED, "llm cuda: int8 matrix of %d inputs (the dequantizing workspace takes "
                          "at most %zu)", K, LLMC_DEQUANT_BYTES / 2 / 64);
    const size_t ys = out_f32 ? 4 : 2;
    for (int r0 = 0; r0 < N; r0 += (int)tile) {
        const int rows = N - r0 < tile ? N - r0 : (int)tile;
        KILN_TRY(llmc_dequant_q8_launch(g->dtype, g->kc.stream, q + (size_t)r0 * K, scale + r0, rows, K, g->deq));
        KILN_TRY(llmc_linear(g, x, ldx, n, K, g->deq, bias ? (const char *)bias + (size_t)r0 * 2 : NULL, rows,
                             (char *)y + (size_t)r0 * ys, ldy, out_f32));
    }
    return KILN_OK;
}

/* ---------------------------------------------------------------- embedding */

/* x[t] = (q[tokens[t]] * scale[tokens[t]] + pos[positions[t]]) * emb_scale. */
template <typename T>
__global__ void embed_q8_kernel(float *__restrict__ x, const int8_t *__restrict__ tok, const float *__restrict__ tok_s,
                                const T *__restrict__ pos, const int32_t *__restrict__ tokens,
                                const int32_t *__restrict__ positions, int d, float emb_scale) {
    const int t = blockIdx.x;
    const int64_t id = tokens[t];
    const int8_t *e = tok + id * d;
    const float s = tok_s[id];
    const T *p = pos ? pos + (size_t)positions[t] * d : NULL;
    float *xr = x + (size_t)t * d;
    for (int i = threadIdx.x; i < d; i += blockDim.x) xr[i] = ((float)e[i] * s + (p ? ku_f32(p[i]) : 0.0f)) * emb_scale;
}

template <typename T> static kiln_status launch_embed_q8(kiln_llm_cuda *g, const llmc_step *s) {
    const float scale = g->cfg.scale_emb ? sqrtf((float)g->cfg.d_model) : 1.0f;
    embed_q8_kernel<T><<<s->n_tokens, QD_THREADS, 0, g->kc.stream>>>(g->x, (const int8_t *)g->tok_emb, g->tok_emb_s,
                                                                    (const T *)g->pos_emb, s->tokens, s->positions,
                                                                    g->cfg.d_model, scale);
    KILN_CUDA_LAUNCH_CHECK("embed_q8_kernel");
    return KILN_OK;
}

extern "C" kiln_status llmc_embed_any(kiln_llm_cuda *g, const llmc_step *s) {
    if (!g->tok_emb_s) return llmc_embed(g, s);
    if (g->int4) return llmc_embed_q4(g, s);
    return LC_DISPATCH(g->dtype, launch_embed_q8, g, s);
}

/* ---------------------------------------------------------------- random INT8 weights (benchmarks) */

/* q[i] = a uniform integer in [-127, 127] from splitmix64 of (seed, i); scale[r] = amp / 127. */
__global__ void fill_q8_kernel(int8_t *__restrict__ q, float *__restrict__ scale, int64_t rows, int64_t cols,
                               uint64_t seed, float amp) {
    const int64_t stride = (int64_t)gridDim.x * blockDim.x, first = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    for (int64_t i = first; i < rows * cols; i += stride) {
        uint64_t z = seed + 0x9E3779B97F4A7C15ULL * (uint64_t)(i + 1);
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
        z ^= z >> 31;
        q[i] = (int8_t)((int)(z % 255u) - 127);
    }
    for (int64_t r = first; r < rows; r += stride) scale[r] = amp / 127.0f;
}

extern "C" kiln_status llmc_fill_random_q8(kiln_llm_cuda *g, int8_t *q, float *scale, size_t rows, size_t cols,
                                           uint64_t seed, float amp) {
    const unsigned blocks = (unsigned)((g->kc.sm_count > 0 ? g->kc.sm_count : 1) * 8);
    fill_q8_kernel<<<blocks, QD_THREADS, 0, g->kc.stream>>>(q, scale, (int64_t)rows, (int64_t)cols, seed, amp);
    KILN_CUDA_LAUNCH_CHECK("fill_q8_kernel");
    return KILN_OK;
}
