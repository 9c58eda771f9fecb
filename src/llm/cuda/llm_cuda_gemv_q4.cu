/* llm_cuda_gemv_q4.cu — the weight-only INT4 products of the LLM forward on CUDA. A matrix [N, K] is
 * kept on the device as the engine stores it (llm_gemv_q4.h): rows of packed unsigned nibbles in
 * groups of 128 (64 bytes a group, the low nibble the even column), then its fp32 scales [N, G] and
 * right after them its zero points [N, G] (G = ceil(K / 128)), so that one scale pointer finds both.
 * Decode (up to LLMC_GEMV_MAX token rows): the quantized GEMV family of llm_cuda_gemv_q.cu, which
 * unpacks 32 weights from each 16-byte load in registers (no conversion instructions) and sums
 * s * (sum q x - z sum x) per group, its geometry timed per shape.
 * Up to LLMC_GEMM_Q_MAX token rows, when g->gemm_q: llm_cuda_gemm_q.cu's tensor-core product. Else:
 * tiles of weight rows dequantized to the activation dtype in the device workspace, each multiplied by
 * llmc_linear's cuBLASLt product, as INT8 does. Also the lookup of an INT4 token embedding and random
 * INT4 weights for benchmarks. */
#include "llm/cuda/llm_cuda_util.cuh"

#define Q4_THREADS 256
#define Q4_GROUP 128

static __host__ __device__ __forceinline__ int q4_groups(int K) { return (K + Q4_GROUP - 1) / Q4_GROUP; }

/* ---------------------------------------------------------------- dequantized tiles */

/* The value of column k of packed row r (G groups a row). */
static __device__ __forceinline__ float q4_value(const uint8_t *__restrict__ q, const float *__restrict__ scale,
                                                 const float *__restrict__ zero, int64_t r, int k, int G) {
    const uint8_t b = q[r * G * (Q4_GROUP / 2) + k / 2];
    const int64_t g = r * G + k / Q4_GROUP;
    return ((float)(k & 1 ? b >> 4 : b & 15) - zero[g]) * scale[g];
}

/* dst[r, k] = (q[r, k] - zero[r, g]) * scale[r, g] in T, r < rows, k < K. K % 32 == 0: 32 values (one
 * 16-byte load, inside one group) and four 16-byte stores per thread and round; else one value at a
 * time. */
template <typename T>
__global__ void dequant_q4_kernel(const uint8_t *__restrict__ q, const float *__restrict__ scale,
                                  const float *__restrict__ zero, int64_t rows, int K, T *__restrict__ dst) {
    const int64_t n = rows * K, first = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    const int G = q4_groups(K);
    if (K % 32 == 0) {
        const int KC = K / 32; /* chunks of a row */
        for (int64_t c = first; c < n / 32; c += stride) {
            const int64_t r = c / KC;
            const int k = (int)(c - r * KC) * 32;
            const uint4 u = __ldcs(reinterpret_cast<const uint4 *>(q + r * G * (Q4_GROUP / 2) + k / 2));
            const int64_t g = r * G + k / Q4_GROUP;
            const float s = scale[g], z = zero[g];
            const uint32_t w[4] = {u.x, u.y, u.z, u.w};
            T out[32];
#pragma unroll
            for (int j = 0; j < 4; j++)
#pragma unroll
                for (int b = 0; b < 8; b++) out[8 * j + b] = ku_from_f32<T>(((float)((w[j] >> (4 * b)) & 15u) - z) * s);
            uint4 *d = reinterpret_cast<uint4 *>(dst + r * K + k);
#pragma unroll
            for (int j = 0; j < 4; j++) d[j] = *reinterpret_cast<const uint4 *>(out + 8 * j);
        }
        return;
    }
    for (int64_t e = first; e < n; e += stride) dst[e] = ku_from_f32<T>(q4_value(q, scale, zero, e / K, (int)(e % K), G));
}

template <typename T>
static kiln_status launch_dequant(cudaStream_t st, const uint8_t *q, const float *scale, const float *zero, int rows,
                                  int K, void *dst) {
    const int64_t n = (int64_t)rows * K, per = K % 32 == 0 ? 32 : 1;
    int64_t blocks = (n / per + Q4_THREADS - 1) / Q4_THREADS;
    if (blocks > 65535) blocks = 65535;
    if (blocks < 1) blocks = 1;
    dequant_q4_kernel<T><<<(unsigned)blocks, Q4_THREADS, 0, st>>>(q, scale, zero, rows, K, (T *)dst);
    KILN_CUDA_LAUNCH_CHECK("dequant_q4_kernel");
    return KILN_OK;
}

extern "C" kiln_status llmc_dequant_q4_launch(kiln_dtype dtype, cudaStream_t stream, const uint8_t *q,
                                              const float *scale, const float *zero, int rows, int K, void *dst) {
    if (dtype != KILN_F16 && dtype != KILN_BF16)
        return kiln_error(KILN_ERR_INVALID_ARGUMENT, "int4 dequantize: into %s (float16 or bfloat16)",
                          kiln_dtype_name(dtype));
    return LC_DISPATCH(dtype, launch_dequant, stream, q, scale, zero, rows, K, dst);
}

/* ---------------------------------------------------------------- the product */

extern "C" kiln_status llmc_linear_q4(kiln_llm_cuda *g, const void *x, int ldx, int n, int K, const void *w,
                                      const float *scale, const void *bias, int N, void *y, int ldy, bool out_f32) {
    const uint8_t *q = (const uint8_t *)w;
    const int G = q4_groups(K);
    const float *zero = scale + (size_t)N * G;
    if (n <= g->opt.gemv_max_tokens && llmc_gemv_q4_fits(n, K, ldx, x, q)) {
        int cfg = 0;
        KILN_TRY(llmc_gemv_q4_config(g, x, ldx, n, K, q, scale, zero, bias, N, y, ldy, out_f32, &cfg));
        return llmc_gemv_q4_launch(g->dtype, g->kc.stream, cfg, x, ldx, n, K, q, scale, zero, bias, N, y, ldy, out_f32,
                                   g->pdl);
    }
    if (g->gemm_q && llmc_gemm_q_fits(4, n, K, ldx, x, q))
        return llmc_linear_gemm_q(g, 4, x, ldx, n, K, q, scale, zero, bias, N, y, ldy, out_f32);
    int64_t tile = 0;
    KILN_TRY(llmc_dequant_tile_rows("int4", K, &tile));
    const size_t ys = out_f32 ? 4 : 2;
    for (int r0 = 0; r0 < N; r0 += (int)tile) {
        const int rows = N - r0 < tile ? N - r0 : (int)tile;
        KILN_TRY(llmc_dequant_q4_launch(g->dtype, g->kc.stream, q + (size_t)r0 * G * (Q4_GROUP / 2),
                                        scale + (size_t)r0 * G, zero + (size_t)r0 * G, rows, K, g->deq));
        KILN_TRY(llmc_linear(g, x, ldx, n, K, g->deq, bias ? (const char *)bias + (size_t)r0 * 2 : NULL, rows,
                             (char *)y + (size_t)r0 * ys, ldy, out_f32));
    }
    return KILN_OK;
}

/* ---------------------------------------------------------------- embedding */

/* x[t] = (dequantized tok[tokens[t]] + pos[positions[t]]) * emb_scale. */
template <typename T>
__global__ void embed_q4_kernel(float *__restrict__ x, const uint8_t *__restrict__ tok, const float *__restrict__ tok_s,
                                const float *__restrict__ tok_z, const T *__restrict__ pos,
                                const int32_t *__restrict__ tokens, const int32_t *__restrict__ positions, int d,
                                float emb_scale) {
    const int t = blockIdx.x, G = q4_groups(d);
    const int64_t id = tokens[t];
    const T *p = pos ? pos + (size_t)positions[t] * d : NULL;
    float *xr = x + (size_t)t * d;
    for (int i = threadIdx.x; i < d; i += blockDim.x)
        xr[i] = (q4_value(tok, tok_s, tok_z, id, i, G) + (p ? ku_f32(p[i]) : 0.0f)) * emb_scale;
}

template <typename T> static kiln_status launch_embed_q4(kiln_llm_cuda *g, const llmc_step *s) {
    const float scale = g->cfg.scale_emb ? sqrtf((float)g->cfg.d_model) : 1.0f;
    const float *zero = g->tok_emb_s + (size_t)g->cfg.vocab * q4_groups(g->cfg.d_model);
    embed_q4_kernel<T><<<s->n_tokens, Q4_THREADS, 0, g->kc.stream>>>(g->x, (const uint8_t *)g->tok_emb, g->tok_emb_s,
                                                                    zero, (const T *)g->pos_emb, s->tokens,
                                                                    s->positions, g->cfg.d_model, scale);
    KILN_CUDA_LAUNCH_CHECK("embed_q4_kernel");
    return KILN_OK;
}

extern "C" kiln_status llmc_embed_q4(kiln_llm_cuda *g, const llmc_step *s) {
    return LC_DISPATCH(g->dtype, launch_embed_q4, g, s);
}

/* ---------------------------------------------------------------- random INT4 weights (benchmarks) */

/* Every packed byte uniform from splitmix64 of (seed, i); scales amp / 7.5 and zero points 7.5, so that
 * the values lie in [-amp, amp]. */
__global__ void fill_q4_kernel(uint8_t *__restrict__ q, float *__restrict__ scale, int64_t bytes, int64_t groups,
                               uint64_t seed, float amp) {
    const int64_t stride = (int64_t)gridDim.x * blockDim.x, first = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    for (int64_t i = first; i < bytes; i += stride) {
        uint64_t z = seed + 0x9E3779B97F4A7C15ULL * (uint64_t)(i + 1);
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
        q[i] = (uint8_t)(z ^ (z >> 31));
    }
    for (int64_t g = first; g < groups; g += stride) {
        scale[g] = amp / 7.5f;
        scale[groups + g] = 7.5f;
    }
}

extern "C" kiln_status llmc_fill_random_q4(kiln_llm_cuda *g, uint8_t *q, float *scale, size_t rows, size_t cols,
                                           uint64_t seed, float amp) {
    const unsigned blocks = (unsigned)((g->kc.sm_count > 0 ? g->kc.sm_count : 1) * 8);
    const int64_t G = q4_groups((int)cols);
    fill_q4_kernel<<<blocks, Q4_THREADS, 0, g->kc.stream>>>(q, scale, (int64_t)rows * G * (Q4_GROUP / 2),
                                                            (int64_t)rows * G, seed, amp);
    KILN_CUDA_LAUNCH_CHECK("fill_q4_kernel");
    return KILN_OK;
}
