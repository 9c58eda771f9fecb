/* quant_kernels.cu — the CUDA kernels around the integer layers' GEMM (quant_gemm.cuh): the
 * requantizing epilogue of the exact path (zero-point corrections in 64-bit integers, scale, bias,
 * activation, round half to even and saturation: the CPU kernels' sequence of float32 operations, no
 * fused multiply-add), the copies of activation rows and im2col rows as shifted int8, the row sums,
 * the CUDA-core product for shapes cuBLASLt refuses, and the float16 path's dequantization and
 * epilogue; each with its launcher. */
#include "backends/cuda/activation.cuh"
#include "backends/cuda/quant_gemm.cuh"

/* Integer output: saturate(round_half_even(v / y_scale) + y_zero_point) as the CPU's quant_round_sat. */
template <typename T> static __device__ __forceinline__ T qg_out(float v, const qg_epi &e);
template <> __device__ __forceinline__ int8_t qg_out<int8_t>(float v, const qg_epi &e) {
    float r = rintf(__fadd_rn(rintf(__fdiv_rn(v, e.y_scale)), e.y_zero_point));
    return (int8_t)(!(r >= (float)e.lo) ? e.lo : r > (float)e.hi ? e.hi : (int32_t)r);
}
template <> __device__ __forceinline__ uint8_t qg_out<uint8_t>(float v, const qg_epi &e) {
    float r = rintf(__fadd_rn(rintf(__fdiv_rn(v, e.y_scale)), e.y_zero_point));
    return (uint8_t)(!(r >= (float)e.lo) ? e.lo : r > (float)e.hi ? e.hi : (int32_t)r);
}
template <> __device__ __forceinline__ float qg_out<float>(float v, const qg_epi &) { return v; }
template <> __device__ __forceinline__ __half qg_out<__half>(float v, const qg_epi &) { return __float2half_rn(v); }
template <> __device__ __forceinline__ bf16 qg_out<bf16>(float v, const qg_epi &) { return __float2bfloat16_rn(v); }

/* The activation of sum acc of channel ch (rs: its row's sum of x, read only when rowsum is set):
 * the zero-point corrections, scale, bias and activation. */
static __device__ __forceinline__ float qg_value(int32_t acc32, int64_t ch, const int32_t *rowsum, int32_t rs,
                                                 const qg_epi &e) {
    int64_t acc = acc32;
    if (e.xzp) acc -= (int64_t)e.xzp * e.colsum[ch];
    if (rowsum) acc -= (int64_t)e.wzp[ch] * rs - (int64_t)e.K * e.xzp * e.wzp[ch];
    float v = __fmul_rn((float)(int32_t)acc, e.scale[ch]);
    v = __fadd_rn(v, e.bias ? e.bias[ch] : 0.0f);
    return kiln_cuda_act(v, e.kind, e.p0, e.p1);
}

/* y(D[r, c]) for r < R, c < Mg (channel c0 + c) through map m. p_fast: consecutive threads take
 * consecutive r (NCHW output), else c. */
template <typename T>
static __global__ void qg_epilogue_kernel(const int32_t *__restrict__ D, int64_t ldd, int64_t R, int64_t Mg, int64_t c0,
                                   const int32_t *__restrict__ rowsum, qg_epi e, qg_out_map m, bool p_fast,
                                   T *__restrict__ y) {
    int64_t total = R * Mg;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += (int64_t)gridDim.x * blockDim.x) {
        int64_t r = p_fast ? i % R : i / Mg, c = p_fast ? i / R : i % Mg, ch = c0 + c;
        float v = qg_value(D[r * ldd + c], ch, rowsum, rowsum ? rowsum[r] : 0, e);
        y[(r / m.P) * m.img_stride + ch * m.c_stride + (r % m.P) * m.p_stride] = qg_out<T>(v, e);
    }
}

/* The row-major case of qg_epilogue_kernel (a QMatMul: y [R, N] dense, D [R, N] with N a multiple of
 * 4, 16-byte aligned): four columns per thread from one 16-byte load of D. */
template <typename T>
static __global__ void qg_epilogue_rows4_kernel(const int32_t *__restrict__ D, int64_t R, int64_t N,
                                         const int32_t *__restrict__ rowsum, qg_epi e, T *__restrict__ y) {
    int64_t total4 = R * N / 4;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < total4; i += (int64_t)gridDim.x * blockDim.x) {
        int64_t at = i * 4, r = at / N, c = at % N;
        int4 d = *(const int4 *)(D + at);
        int32_t rs = rowsum ? rowsum[r] : 0;
        y[at] = qg_out<T>(qg_value(d.x, c, rowsum, rs, e), e);
        y[at + 1] = qg_out<T>(qg_value(d.y, c + 1, rowsum, rs, e), e);
        y[at + 2] = qg_out<T>(qg_value(d.z, c + 2, rowsum, rs, e), e);
        y[at + 3] = qg_out<T>(qg_value(d.w, c + 3, rowsum, rs, e), e);
    }
}

/* dst[r * Kp + k] = k < K ? src[r * K + k] - shift : 0 for r < R: 8-bit rows as int8, padded to Kp. */
template <typename S>
static __global__ void qg_rows_kernel(const S *__restrict__ src, int64_t R, int64_t K, int64_t Kp, int shift,
                               int8_t *__restrict__ dst) {
    int64_t total = R * Kp;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += (int64_t)gridDim.x * blockDim.x) {
        int64_t r = i / Kp, k = i % Kp;
        dst[i] = k < K ? (int8_t)((int)src[r * K + k] - shift) : (int8_t)0;
    }
}

/* im2col of images [img0, img0 + R / P) of x (NCHW), group g's channels: dst[r * Kp + k] with
 * r = image * P + output position, k = (c * kh + ky) * kw + kx (W's own order); x - shift inside the
 * image, pad_value (the shifted zero point) in the padding, 0 for k >= K. */
template <typename S>
static __global__ void qg_im2col_kernel(const S *__restrict__ x, qg_conv_geom gm, int64_t img0, int64_t g, int64_t R,
                                 int64_t K, int64_t Kp, int shift, int8_t pad_value, int8_t *__restrict__ dst) {
    int64_t total = R * Kp, P = gm.OH * gm.OW, taps = gm.kh * gm.kw;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += (int64_t)gridDim.x * blockDim.x) {
        int64_t r = i / Kp, k = i % Kp;
        if (k >= K) {
            dst[i] = 0;
            continue;
        }
        int64_t img = img0 + r / P, p = r % P, oy = p / gm.OW, ox = p % gm.OW;
        int64_t c = k / taps, t = k % taps, ky = t / gm.kw, kx = t % gm.kw;
        int64_t iy = oy * gm.sy - gm.pt + ky * gm.dy, ix = ox * gm.sx - gm.pl + kx * gm.dx;
        bool in = iy >= 0 && iy < gm.H && ix >= 0 && ix < gm.W;
        dst[i] = in ? (int8_t)((int)x[((img * gm.C + g * gm.Cg + c) * gm.H + iy) * gm.W + ix] - shift) : pad_value;
    }
}

/* rowsum[r] = sum_k a[r * lda + k] for k < K, one warp per row. */
static __global__ void qg_rowsum_kernel(const int8_t *__restrict__ a, int64_t R, int64_t lda, int64_t K,
                                 int32_t *__restrict__ rowsum) {
    int64_t warp = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) / 32, lane = threadIdx.x % 32;
    int64_t warps = (int64_t)gridDim.x * blockDim.x / 32;
    for (int64_t r = warp; r < R; r += warps) {
        int32_t s = 0;
        for (int64_t k = lane; k < K; k += 32) s += a[r * lda + k];
        for (int o = 16; o > 0; o /= 2) s += __shfl_down_sync(0xffffffffu, s, o);
        if (lane == 0) rowsum[r] = s;
    }
}

/* D[r, c] = sum_k x[r * ldb + k] w[c * Kp + k] for r < R, c < Mp, k < Kp (Kp and ldb multiples of
 * 4, rows 4-byte aligned): the CUDA-core product (4-way int8 dot products) for a shape cuBLASLt's
 * integer GEMM refuses. */
static __global__ void qg_gemm_fallback_kernel(const int8_t *__restrict__ x, int64_t ldb, const int8_t *__restrict__ w,
                                        int64_t Kp, int64_t R, int64_t Mp, int32_t *__restrict__ D) {
    int64_t total = R * Mp;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += (int64_t)gridDim.x * blockDim.x) {
        const int *xr = (const int *)(x + (i / Mp) * ldb), *wr = (const int *)(w + (i % Mp) * Kp);
        int sum = 0;
        for (int64_t k = 0; k < Kp / 4; k++) sum = __dp4a(xr[k], wr[k], sum);
        D[i] = sum;
    }
}

/* dst[i] = x_scale * (src[i] - zp) in float16 for i < count: a QMatMul's A for its float16 path. */
template <typename S>
static __global__ void qg_dequant_kernel(const S *__restrict__ src, int64_t count, int32_t zp, float x_scale,
                                  __half *__restrict__ dst) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < count; i += (int64_t)gridDim.x * blockDim.x)
        dst[i] = __float2half_rn(__fmul_rn((float)((int)src[i] - zp), x_scale));
}

/* y[r, c] = out(act(D[r, c] + bias[c])) for the float16 path's product D [R, N] (float16). */
template <typename T>
static __global__ void qg_epilogue_f16_kernel(const __half *__restrict__ D, int64_t R, int64_t N, qg_epi e,
                                       T *__restrict__ y) {
    int64_t total = R * N;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += (int64_t)gridDim.x * blockDim.x) {
        float v = __fadd_rn(__half2float(D[i]), e.bias ? e.bias[i % N] : 0.0f);
        y[i] = qg_out<T>(kiln_cuda_act(v, e.kind, e.p0, e.p1), e);
    }
}

/* ---------------------------------------------------------------- launchers */

kiln_status kiln_qg_rowsums(const qg_state *st, const int8_t *x, int64_t R, int64_t ldb, int32_t *rowsum,
                            kiln_cuda_ctx *ctx) {
    if (!st->any_wzp) return KILN_OK;
    qg_rowsum_kernel<<<ku_blocks(R * 32, KU_THREADS, ctx), KU_THREADS, 0, ctx->stream>>>(x, R, ldb, st->K, rowsum);
    KILN_CUDA_LAUNCH_CHECK("qg_rowsum_kernel");
    return KILN_OK;
}

kiln_status kiln_qg_epilogue(const kiln_node *n, const qg_state *st, int64_t g, const int32_t *D, int64_t R,
                             const int32_t *rowsum, const qg_out_map &m, bool p_fast, kiln_dtype t, void *y,
                             kiln_cuda_ctx *ctx) {
    const int32_t *rs = st->any_wzp ? rowsum : NULL;
    int64_t c0 = g * st->Mg;
    /* the four-column kernel for a dense row-major result (one group, m.p_stride = Mg = Mp) */
    bool rows4 = !p_fast && st->group == 1 && st->Mg % 4 == 0 && m.p_stride == st->Mg && m.c_stride == 1;
    unsigned blocks = ku_blocks(rows4 ? R * st->Mg / 4 : R * st->Mg, KU_THREADS, ctx, 4);
#define QG_EPI(T)                                                                                  \
    do {                                                                                           \
        if (rows4)                                                                                 \
            qg_epilogue_rows4_kernel<T><<<blocks, KU_THREADS, 0, ctx->stream>>>(D, R, st->Mg, rs, st->epi, (T *)y); \
        else                                                                                       \
            qg_epilogue_kernel<T><<<blocks, KU_THREADS, 0, ctx->stream>>>(D, st->Mp, R, st->Mg, c0, rs, st->epi, m, \
                                                                          p_fast, (T *)y);         \
    } while (0)
    switch (t) {
    case KILN_I8: QG_EPI(int8_t); break;
    case KILN_U8: QG_EPI(uint8_t); break;
    case KILN_F32: QG_EPI(float); break;
    case KILN_F16: QG_EPI(__half); break;
    case KILN_BF16: QG_EPI(bf16); break;
    default: return ku_refuse_dtype(n, 0, t);
    }
#undef QG_EPI
    KILN_CUDA_LAUNCH_CHECK("qg_epilogue_kernel");
    return KILN_OK;
}

kiln_status kiln_qg_copy_rows(const void *src, kiln_dtype src_dtype, int64_t R, int64_t K, int64_t Kp, int8_t *dst,
                              kiln_cuda_ctx *ctx) {
    unsigned blocks = ku_blocks(R * Kp, KU_THREADS, ctx, 4);
    if (src_dtype == KILN_U8)
        qg_rows_kernel<uint8_t><<<blocks, KU_THREADS, 0, ctx->stream>>>((const uint8_t *)src, R, K, Kp, 128, dst);
    else
        qg_rows_kernel<int8_t><<<blocks, KU_THREADS, 0, ctx->stream>>>((const int8_t *)src, R, K, Kp, 0, dst);
    KILN_CUDA_LAUNCH_CHECK("qg_rows_kernel");
    return KILN_OK;
}

kiln_status kiln_qg_im2col(const void *x, kiln_dtype x_dtype, const qg_conv_geom &gm, int64_t img0, int64_t g,
                           int64_t R, int64_t K, int64_t Kp, int8_t pad_value, int8_t *dst, kiln_cuda_ctx *ctx) {
    unsigned blocks = ku_blocks(R * Kp, KU_THREADS, ctx, 4);
    if (x_dtype == KILN_U8)
        qg_im2col_kernel<uint8_t><<<blocks, KU_THREADS, 0, ctx->stream>>>((const uint8_t *)x, gm, img0, g, R, K, Kp, 128,
                                                                          pad_value, dst);
    else
        qg_im2col_kernel<int8_t><<<blocks, KU_THREADS, 0, ctx->stream>>>((const int8_t *)x, gm, img0, g, R, K, Kp, 0,
                                                                         pad_value, dst);
    KILN_CUDA_LAUNCH_CHECK("qg_im2col_kernel");
    return KILN_OK;
}

kiln_status kiln_qg_gemm_cuda_cores(const int8_t *x, int64_t ldb, const int8_t *w, int64_t Kp, int64_t R, int64_t Mp,
                                    int32_t *D, kiln_cuda_ctx *ctx) {
    qg_gemm_fallback_kernel<<<ku_blocks(R * Mp, KU_THREADS, ctx, 4), KU_THREADS, 0, ctx->stream>>>(x, ldb, w, Kp, R, Mp, D);
    KILN_CUDA_LAUNCH_CHECK("qg_gemm_fallback_kernel");
    return KILN_OK;
}

kiln_status kiln_qg_dequant_f16(const void *src, kiln_dtype src_dtype, int64_t count, int32_t zp, float x_scale,
                                __half *dst, kiln_cuda_ctx *ctx) {
    unsigned blocks = ku_blocks(count, KU_THREADS, ctx, 4);
    if (src_dtype == KILN_U8)
        qg_dequant_kernel<uint8_t><<<blocks, KU_THREADS, 0, ctx->stream>>>((const uint8_t *)src, count, zp, x_scale, dst);
    else
        qg_dequant_kernel<int8_t><<<blocks, KU_THREADS, 0, ctx->stream>>>((const int8_t *)src, count, zp, x_scale, dst);
    KILN_CUDA_LAUNCH_CHECK("qg_dequant_kernel");
    return KILN_OK;
}

kiln_status kiln_qg_epilogue_f16(const kiln_node *n, const __half *D, int64_t R, int64_t N, const qg_epi &e,
                                 kiln_dtype t, void *y, kiln_cuda_ctx *ctx) {
    unsigned blocks = ku_blocks(R * N, KU_THREADS, ctx, 4);
#define QG_EPI16(T) qg_epilogue_f16_kernel<T><<<blocks, KU_THREADS, 0, ctx->stream>>>(D, R, N, e, (T *)y)
    switch (t) {
    case KILN_I8: QG_EPI16(int8_t); break;
    case KILN_U8: QG_EPI16(uint8_t); break;
    case KILN_F32: QG_EPI16(float); break;
    case KILN_F16: QG_EPI16(__half); break;
    case KILN_BF16: QG_EPI16(bf16); break;
    default: return ku_refuse_dtype(n, 0, t);
    }
#undef QG_EPI16
    KILN_CUDA_LAUNCH_CHECK("qg_epilogue_f16_kernel");
    return KILN_OK;
}
