/* llm_cuda_gemm_q.cu — the weight-only INT8 and INT4 products of 9 to LLMC_GEMM_Q_MAX token rows on the
 * tensor cores: y[n, N] = x[n, K] W^T (+ bias), W dequantized in shared memory on the way, so the
 * weights are read once as they are stored (one byte or half a byte each) instead of being widened
 * into a 16-bit copy first (the dequantized-tile path that larger products keep).
 *
 * A block computes GQ_BM weight rows x GQ_BN token rows over its share of K in steps of GQ_BK: per
 * step its threads load the weight tile (16 bytes a thread), unpack it to the activation dtype in
 * shared memory (INT8: the integer values, exact, the row scale applied to the sums; INT4: (q - zero)
 * * scale of the value's group, rounded to the dtype as the dequantized-tile path rounds it) and copy
 * the activation tile there (cp.async, zero-filled past n and K); its four warps (2 x 2: 16 rows x 32
 * tokens each) multiply them with mma.sync m16n8k16 (fp32 sums; mma_util.cuh's fragments). When the
 * row blocks would not fill the GPU, K is split over blockIdx.z: each split adds its fp32 sums into a
 * zeroed workspace (atomicAdd) and a second kernel applies the row scale and the bias. Taken when
 * g->gemm_q (KILN_LLM_GEMM_Q; off by default until its op cases have run on a GPU). */
#include "backends/cuda/mma_util.cuh"
#include "llm/cuda/llm_cuda_util.cuh"

#define GQ_BM 32      /* weight rows of a block */
#define GQ_BN 64      /* token rows of a block */
#define GQ_BK 64      /* K of a step */
#define GQ_PAD 8      /* elements after each shared row (16 bytes: rows stay aligned, ldmatrix conflict-free) */
#define GQ_THREADS 128

/* Weight row r, columns [k, k + 16 * C) of the tile (C chunks of 16 values) into shared row dst. */
template <typename T, int WB>
static __device__ __forceinline__ void gq_stage_chunk(T *dst, const uint8_t *__restrict__ w, size_t row_bytes, int row,
                                                      int k, int K, int N, const float *__restrict__ scale,
                                                      const float *__restrict__ zero, int G) {
    constexpr int V = WB == 8 ? 16 : 32; /* values of one 16-byte load */
    float f[V];
    if (row < N && k < K) {
        const uint4 u = __ldcs(reinterpret_cast<const uint4 *>(w + (size_t)row * row_bytes + (size_t)k * WB / 8));
        if constexpr (WB == 8) {
            lc_unpack_i8x16(u, f);
        } else {
            const size_t gi = (size_t)row * G + k / 128;
            const float s = __ldg(scale + gi), z = __ldg(zero + gi);
            const uint32_t wd[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
            for (int j = 0; j < 4; j++)
#pragma unroll
                for (int b = 0; b < 8; b++) f[8 * j + b] = ((float)((wd[j] >> (4 * b)) & 15u) - z) * s;
        }
    } else {
#pragma unroll
        for (int e = 0; e < V; e++) f[e] = 0.0f;
    }
    uint32_t p[V / 2];
#pragma unroll
    for (int e = 0; e < V / 2; e++) p[e] = fa_mma<T>::pack(f[2 * e], f[2 * e + 1]);
#pragma unroll
    for (int e = 0; e < V / 8; e++)
        reinterpret_cast<uint4 *>(dst)[e] = make_uint4(p[4 * e], p[4 * e + 1], p[4 * e + 2], p[4 * e + 3]);
}

/* Row o, token t of the output: v (INT8: times the row scale) plus the bias, in O. */
template <typename T, typename O, int WB>
static __device__ __forceinline__ void gq_out(O *y, int ldy, int t, int o, float v, const float *scale, const T *bias) {
    if (WB == 8) v *= scale[o];
    y[(size_t)t * ldy + o] = ku_from_f32<O>(v + (bias ? ku_f32(bias[o]) : 0.0f));
}

/* The block (blockIdx.x: rows GQ_BM x, blockIdx.y: tokens GQ_BN y, blockIdx.z: K split z of gridDim.z,
 * kps steps each). ws NULL: the outputs; else the fp32 sums added into ws [n][N]. */
template <typename T, typename O, int WB>
__global__ void __launch_bounds__(GQ_THREADS)
    gemm_q_kernel(const T *__restrict__ x, int ldx, int n, int K, const uint8_t *__restrict__ w,
                  const float *__restrict__ scale, const float *__restrict__ zero, const T *__restrict__ bias, int N,
                  O *__restrict__ y, int ldy, float *__restrict__ ws, int kps) {
    __shared__ __align__(16) T as[GQ_BM][GQ_BK + GQ_PAD];
    __shared__ __align__(16) T bs[GQ_BN][GQ_BK + GQ_PAD];
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, q = lane & 3;
    const int r0 = blockIdx.x * GQ_BM, t0 = blockIdx.y * GQ_BN;
    const int wr = (warp >> 1) * 16, wc = (warp & 1) * 32; /* the warp's rows and tokens in the tile */
    const int G = (K + 127) / 128;
    const size_t row_bytes = WB == 8 ? (size_t)K : (size_t)G * 64;
    const int steps = (K + GQ_BK - 1) / GQ_BK, s0 = blockIdx.z * kps, s1 = min(steps, s0 + kps);
    float acc[4][4]; /* the warp's 4 tiles of 8 tokens: c[0..3] of mma_util.cuh's C fragment */
#pragma unroll
    for (int j = 0; j < 4; j++)
#pragma unroll
        for (int e = 0; e < 4; e++) acc[j][e] = 0.0f;
    lc_pdl_wait();
    for (int s = s0; s < s1; s++) {
        const int k0 = s * GQ_BK;
        __syncthreads(); /* the previous step's tiles are read */
        /* activations: GQ_BN x GQ_BK, 8 values a copy */
        for (int i = tid; i < GQ_BN * GQ_BK / 8; i += GQ_THREADS) {
            const int t = i / (GQ_BK / 8), c = i % (GQ_BK / 8), k = k0 + 8 * c;
            const bool ok = t0 + t < n && k < K;
            fa_cp16(&bs[t][8 * c], ok ? x + (size_t)(t0 + t) * ldx + k : x, ok);
        }
        fa_commit();
        /* weights: INT8 4 loads of 16 a row, INT4 2 of 32 */
        constexpr int CPR = WB == 8 ? GQ_BK / 16 : GQ_BK / 32;
        if (tid < GQ_BM * CPR) {
            const int r = tid / CPR, c = tid % CPR, k = k0 + c * (WB == 8 ? 16 : 32);
            gq_stage_chunk<T, WB>(&as[r][c * (WB == 8 ? 16 : 32)], w, row_bytes, r0 + r, k, K, N, scale, zero, G);
        }
        fa_wait<0>();
        __syncthreads();
#pragma unroll
        for (int kk = 0; kk < GQ_BK; kk += 16) {
            uint32_t a[4];
            fa_ldsm_x4(a, &as[wr + (lane & 15)][kk + 8 * (lane >> 4)]);
#pragma unroll
            for (int jj = 0; jj < 2; jj++) { /* 16 tokens a load: tiles 2 jj and 2 jj + 1 */
                uint32_t b[4];
                fa_ldsm_x4(b, &bs[wc + 16 * jj + (lane & 7) + 8 * (lane >> 4)][kk + 8 * ((lane >> 3) & 1)]);
                fa_mma<T>::run(acc[2 * jj], a, b[0], b[1]);
                fa_mma<T>::run(acc[2 * jj + 1], a, b[2], b[3]);
            }
        }
    }
    lc_pdl_launch_dependents();
#pragma unroll
    for (int j = 0; j < 4; j++)
#pragma unroll
        for (int e = 0; e < 4; e++) {
            const int o = r0 + wr + g + (e >> 1) * 8, t = t0 + wc + 8 * j + 2 * q + (e & 1);
            if (o >= N || t >= n) continue;
            if (ws) atomicAdd(ws + (size_t)t * N + o, acc[j][e]);
            else gq_out<T, O, WB>(y, ldy, t, o, acc[j][e], scale, bias);
        }
}

/* The split-K finish: y = ws (times the INT8 row scale) + bias. */
template <typename T, typename O, int WB>
__global__ void gemm_q_finish(const float *__restrict__ ws, int n, int N, const float *__restrict__ scale,
                              const T *__restrict__ bias, O *__restrict__ y, int ldy) {
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n * N; i += gridDim.x * blockDim.x)
        gq_out<T, O, WB>(y, ldy, i / N, i % N, ws[i], scale, bias);
}

template <typename T, typename O, int WB>
static kiln_status gemm_q_run(const llmc_gemm_q *p) {
    const unsigned bx = (unsigned)((p->N + GQ_BM - 1) / GQ_BM), by = (unsigned)((p->n + GQ_BN - 1) / GQ_BN);
    const int steps = (p->K + GQ_BK - 1) / GQ_BK;
    /* K splits: until the blocks fill the SMs about four times over, at least 8 steps a split */
    int splits = 1;
    const long want = 4L * (p->sm_count > 0 ? p->sm_count : 1);
    const bool room = p->ws && (size_t)p->n * p->N * 4 <= p->ws_bytes;
    while (room && (long)bx * by * splits < want && steps / (splits * 2) >= 8) splits *= 2;
    const int kps = (steps + splits - 1) / splits;
    float *ws = splits > 1 ? p->ws : NULL;
    if (ws) KILN_CUDA_TRY(cudaMemsetAsync(ws, 0, (size_t)p->n * p->N * 4, p->stream));
    /* after the workspace's memset: a plain launch */
    KILN_TRY(lc_launch_grid(gemm_q_kernel<T, O, WB>, dim3(bx, by, (unsigned)splits), dim3(GQ_THREADS), 0, p->stream,
                            p->pdl && !ws, (const T *)p->x, p->ldx, p->n, p->K, (const uint8_t *)p->w, p->scale,
                            p->zero, (const T *)p->bias, p->N, (O *)p->y, p->ldy, ws, kps));
    if (ws) {
        const long total = (long)p->n * p->N;
        const unsigned blocks = (unsigned)((total + 255) / 256 < 4096 ? (total + 255) / 256 : 4096);
        gemm_q_finish<T, O, WB><<<blocks, 256, 0, p->stream>>>(ws, p->n, p->N, p->scale, (const T *)p->bias, (O *)p->y,
                                                                p->ldy);
        KILN_CUDA_LAUNCH_CHECK("gemm_q_finish");
    }
    return KILN_OK;
}

template <typename T> static kiln_status gemm_q_any(const llmc_gemm_q *p) {
    if (p->wbits == 4) return p->out_f32 ? gemm_q_run<T, float, 4>(p) : gemm_q_run<T, T, 4>(p);
    return p->out_f32 ? gemm_q_run<T, float, 8>(p) : gemm_q_run<T, T, 8>(p);
}

extern "C" bool llmc_gemm_q_fits(int wbits, int n, int K, int ldx, const void *x, const void *w) {
    return (wbits == 8 || wbits == 4) && n >= 1 && n <= LLMC_GEMM_Q_MAX && K >= 16 && K % (wbits == 4 ? 32 : 16) == 0 &&
           ldx % 8 == 0 && ldx >= K && ku_aligned16(x) && ku_aligned16(w);
}

extern "C" kiln_status llmc_gemm_q_launch(const llmc_gemm_q *p) {
    if (p->dtype != KILN_F16 && p->dtype != KILN_BF16)
        return kiln_error(KILN_ERR_INVALID_ARGUMENT, "quantized gemm: activations %s (float16 or bfloat16)",
                          kiln_dtype_name(p->dtype));
    if (!llmc_gemm_q_fits(p->wbits, p->n, p->K, p->ldx, p->x, p->w) || p->N < 1 || p->ldy < p->N || !p->scale ||
        (p->wbits == 4 && !p->zero))
        return kiln_error(KILN_ERR_INVALID_ARGUMENT, "quantized gemm: int%d weights, n %d (1..%d), K %d, ldx %d, N %d, "
                          "ldy %d (K a multiple of %d, ldx of 8, x and w 16-byte aligned, scales%s given)", p->wbits,
                          p->n, LLMC_GEMM_Q_MAX, p->K, p->ldx, p->N, p->ldy, p->wbits == 4 ? 32 : 16,
                          p->wbits == 4 ? " and zero points" : "");
    return LC_DISPATCH(p->dtype, gemm_q_any, p);
}

extern "C" kiln_status llmc_linear_gemm_q(kiln_llm_cuda *g, int wbits, const void *x, int ldx, int n, int K,
                                          const void *w, const float *scale, const float *zero, const void *bias,
                                          int N, void *y, int ldy, bool out_f32) {
    const llmc_gemm_q p = {g->dtype, g->kc.stream, g->pdl, wbits, x, ldx, n, K, w, scale, zero, bias, N, y, ldy,
                           out_f32, (float *)g->deq, g->deq ? LLMC_DEQUANT_BYTES : 0, g->kc.sm_count};
    return llmc_gemm_q_launch(&p);
}
