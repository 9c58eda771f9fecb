/* quant_gemm.cu — kiln.QMatMul and kiln.QConv (ir/quant_ops.h) on the GPU: exact int32 sums from
 * cuBLASLt's integer tensor-core GEMM (IMMA: int8 A and B, CUBLAS_COMPUTE_32I), then kiln's own
 * requantizing epilogue kernel, which corrects for the zero points, scales by x_scale * w_scale[c],
 * adds the bias, applies the activation and writes int8 / uint8 (round half to even, saturated) or
 * the engine's float type: the formulas of the CPU reference kernels (src/backends/cpu/quant_*.c),
 * whose integer outputs it matches within one unit (the float rounding of the scaling is the same
 * sequence of IEEE operations, no fused multiply-add; erf-based activations may differ by an ulp).
 *
 * IMMA's regular-layout contract (cuBLASLt): only "TN" (A transposed, B not), m and k multiples of
 * 4, leading dimensions multiples of 4, 4-byte aligned pointers. So the product is formed column-major
 * as D[Mp, R] = Wt[Kp, Mp]^T X[Kp, R]: Wt the weights as rows [channel, k] (k contiguous, padded with
 * zeros to Kp = K rounded up to 4, channels padded to Mp), X the activations as rows [row, k] (a
 * QMatMul's A itself when it is int8 with K a multiple of 4; otherwise a copy in the workspace:
 * uint8 shifted to int8 by -128, rows padded to Kp; a QConv's im2col rows), D int32 [R, Mp] row-major
 * in the workspace. uint8 operands are shifted to int8 (x - 128) with their zero points shifted
 * alike, so the sums are sum (x' - zx')(w' - zw') = sum x'w' - zx' colsum(w') - zw' rowsum(x') +
 * K zx' zw', the corrections applied in the epilogue in 64-bit integers (rowsum only when some weight
 * zero point is non-zero).
 *
 * Weights, per-channel scales, biases and zero points are prepared once per context, on the node's
 * first run (always eager, outside any graph capture: cuda_kernels.h), from their host copies, into
 * one device allocation that the node's state owns (the bias in float32 in 16-bit engines too). A run
 * enqueues only kernels and cuBLASLt calls, split into chunks of rows (QConv: of images) that fit the
 * workspace and whose int32 D stays in L2 (QG_D_TARGET); the cuBLASLt descriptors and the
 * heuristic's algorithm are cached per chunk shape (cuBLASLt's heuristic picks the IMMA kernel); a
 * call cuBLASLt refuses runs a CUDA-core kernel instead, with one warning per node naming the reason.
 *
 * INT8 against FP16 (the build's tuning, cuda_tuning*.c): a QMatMul lists two candidates, tactics of
 * kind KILN_TACTIC_PATH — algo 0 the int8 path above, algo 1 a float16 path (A dequantized to
 * float16, the product by the dequantized weights [K, N] in cuBLASLt through matmul.cuh, then bias,
 * activation and output conversion) — and runs the one its recorded tactic names (none: int8).
 *
 * QConv: the implicit-GEMM kernel of qconv_igemm.cu runs every layer it takes (group 1, no weight zero
 * point, sm_80+; layers with a residual or channels-last tensors only there); the others run here:
 * 1-D and 2-D windows (any pads, strides, dilations, auto_pad, groups: one GEMM per group), NCHW in
 * and out; the im2col rows hold x - 128 for uint8 input and the (shifted) input zero point in
 * the padding, so padding contributes nothing after the correction. */
#include "backends/cuda/activation.cuh"
#include "backends/cuda/kernel_util.cuh"
#include "backends/cuda/matmul.cuh"
#include "backends/cuda/qconv_igemm.h"

#include <stdlib.h>

extern "C" {
#include "core/log.h"
#include "ir/nn_window.h"
#include "ir/quant_ops.h"
}

#define QG_MAX_K 32768                     /* as the CPU kernels: no 8-bit sum of this many can overflow */
#define QG_ALIGN 256                       /* workspace sub-buffers start on this boundary */
#define QG_LT_WORKSPACE ((size_t)32 << 20) /* at most this much workspace for cuBLASLt itself */
#define QG_CALLS 2                         /* cached GEMM shapes per node: full chunks and the last one */
/* A chunk's int32 D is kept to about this size when a chunk of one row (image) allows it, so that the
 * epilogue reads it back from L2 (50 MiB on Hopper) rather than from memory. */
#define QG_D_TARGET ((size_t)16 << 20)

static size_t qg_align(size_t b) { return (b + QG_ALIGN - 1) / QG_ALIGN * QG_ALIGN; }
static int64_t qg_round4(int64_t v) { return (v + 3) / 4 * 4; }

/* ---------------------------------------------------------------- device kernels */

/* Where the epilogue writes D[r, c]: y + (r / P) * img_stride + c * c_stride + (r % P) * p_stride.
 * QMatMul: P = rows, c_stride 1, p_stride N; QConv (NCHW): P output positions, img_stride M * P,
 * c_stride P, p_stride 1. */
typedef struct qg_out_map {
    int64_t P, img_stride, c_stride, p_stride;
} qg_out_map;

/* The per-channel parameters on the device and the constants of the epilogue. */
typedef struct qg_epi {
    const float *scale;   /* [M] x_scale * w_scale[c] (float32 product, as the CPU) */
    const float *bias;    /* [M] or NULL */
    const int32_t *colsum; /* [M] sum_k w'[c, k] */
    const int32_t *wzp;   /* [M] shifted weight zero points */
    int32_t xzp;          /* shifted input zero point */
    int32_t K;            /* real inner length (per group) */
    int kind;             /* activation */
    float p0, p1;
    float y_scale;
    float y_zero_point;
    int32_t lo, hi;       /* integer output range */
} qg_epi;

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
__global__ void qg_epilogue_kernel(const int32_t *__restrict__ D, int64_t ldd, int64_t R, int64_t Mg, int64_t c0,
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
__global__ void qg_epilogue_rows4_kernel(const int32_t *__restrict__ D, int64_t R, int64_t N,
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
__global__ void qg_rows_kernel(const S *__restrict__ src, int64_t R, int64_t K, int64_t Kp, int shift,
                               int8_t *__restrict__ dst) {
    int64_t total = R * Kp;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += (int64_t)gridDim.x * blockDim.x) {
        int64_t r = i / Kp, k = i % Kp;
        dst[i] = k < K ? (int8_t)((int)src[r * K + k] - shift) : (int8_t)0;
    }
}

/* The geometry of one QConv (2-D; a 1-D one has H = OH = kh = 1). */
typedef struct qg_conv_geom {
    int64_t N, C, H, W, M, OH, OW, kh, kw, sy, sx, dy, dx, pt, pl, group, Cg, Mg;
} qg_conv_geom;

/* im2col of images [img0, img0 + R / P) of x (NCHW), group g's channels: dst[r * Kp + k] with
 * r = image * P + output position, k = (c * kh + ky) * kw + kx (W's own order); x - shift inside the
 * image, pad_value (the shifted zero point) in the padding, 0 for k >= K. */
template <typename S>
__global__ void qg_im2col_kernel(const S *__restrict__ x, qg_conv_geom gm, int64_t img0, int64_t g, int64_t R,
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
__global__ void qg_rowsum_kernel(const int8_t *__restrict__ a, int64_t R, int64_t lda, int64_t K,
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
__global__ void qg_gemm_fallback_kernel(const int8_t *__restrict__ x, int64_t ldb, const int8_t *__restrict__ w,
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
__global__ void qg_dequant_kernel(const S *__restrict__ src, int64_t count, int32_t zp, float x_scale,
                                  __half *__restrict__ dst) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < count; i += (int64_t)gridDim.x * blockDim.x)
        dst[i] = __float2half_rn(__fmul_rn((float)((int)src[i] - zp), x_scale));
}

/* y[r, c] = out(act(D[r, c] + bias[c])) for the float16 path's product D [R, N] (float16). */
template <typename T>
__global__ void qg_epilogue_f16_kernel(const __half *__restrict__ D, int64_t R, int64_t N, qg_epi e,
                                       T *__restrict__ y) {
    int64_t total = R * N;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += (int64_t)gridDim.x * blockDim.x) {
        float v = __fadd_rn(__half2float(D[i]), e.bias ? e.bias[i % N] : 0.0f);
        y[i] = qg_out<T>(kiln_cuda_act(v, e.kind, e.p0, e.p1), e);
    }
}

/* ---------------------------------------------------------------- node state */

/* One cached cuBLASLt call: D[Mp, R] = Wt^T X (ldb the activations' row length); fallback when
 * cuBLASLt cannot make it (qg_gemm_fallback_kernel runs it instead). */
typedef struct qg_call {
    bool valid, fallback;
    int64_t R, ldb;
    cublasLtMatmulDesc_t op;
    cublasLtMatrixLayout_t la, lb, ld;
    cublasLtMatmulAlgo_t algo;
    size_t ws_need;
} qg_call;

/* A QMatMul / QConv node's state in one context: its prepared parameters on the device. */
typedef struct qg_state {
    kiln_cuda_node_state base;
    void *dev;               /* one allocation: wt, colsum, wzp, scale, bias */
    const int8_t *wt;        /* [group][Mp][Kp] shifted weights, zero-padded */
    qg_epi epi;              /* pointers into dev and the epilogue constants */
    int64_t K, Kp, Mg, Mp, group;
    bool any_wzp;            /* some shifted weight zero point is non-zero: rowsums are needed */
    int x_shift;             /* 128 for uint8 input, else 0 */
    qg_call calls[QG_CALLS];
    int next_call;
    bool fallback_logged;    /* the CUDA-core product's warning was given */
    __half *w16;             /* QMatMul's float16 path: w_scale[c] (w - w_zero_point[c]) as [K, N], made on
                              * its first use */
} qg_state;

static const char qg_state_owner[] = "quant_gemm.cu";

static void qg_call_clear(qg_call *c) {
    if (c->ld) cublasLtMatrixLayoutDestroy(c->ld);
    if (c->lb) cublasLtMatrixLayoutDestroy(c->lb);
    if (c->la) cublasLtMatrixLayoutDestroy(c->la);
    if (c->op) cublasLtMatmulDescDestroy(c->op);
    memset(c, 0, sizeof *c);
}

static void qg_state_destroy(kiln_cuda_node_state *base) {
    qg_state *st = (qg_state *)base;
    for (int i = 0; i < QG_CALLS; i++) qg_call_clear(&st->calls[i]);
    if (st->dev) cudaFree(st->dev);
    if (st->w16) cudaFree(st->w16);
    free(st);
}

/* A layer's weights as its host copy holds them: QMatMul [K, N], QConv [M, Cg, taps] (weight k of
 * output channel c at c * K + k). */
typedef struct qg_host_weights {
    const void *data;
    kiln_dtype dtype;
    bool matmul;  /* [K, N] (QMatMul) rather than [M, Cg, taps] (QConv) */
    int64_t M;    /* output channels */
} qg_host_weights;

/* Weight k of output channel c, shifted to int8 (uint8 - 128). */
static int32_t qg_weight_at(const qg_host_weights *w, int64_t K, int64_t c, int64_t k) {
    int64_t i = w->matmul ? k * w->M + c : c * K + k;
    return w->dtype == KILN_U8 ? (int32_t)((const uint8_t *)w->data)[i] - 128 : (int32_t)((const int8_t *)w->data)[i];
}

/* Element i of float tensor t's host copy (float32, float16 or bfloat16) as float32. */
static float qg_host_float(const kiln_cuda_tensor *t, int64_t i) {
    if (t->host_dtype == KILN_F16) return kiln_f16_to_f32(((const uint16_t *)t->host)[i]);
    if (t->host_dtype == KILN_BF16) return kiln_bf16_to_f32(((const uint16_t *)t->host)[i]);
    return ((const float *)t->host)[i];
}

/* Prepares st's device parameters: the weights as [group][Mp][Kp] shifted int8 rows (zero-padded),
 * their column sums and shifted zero points, the scales x_scale * w_scale[c] and the biases (float32),
 * uploaded into one allocation (st->dev), and the epilogue's constants. */
static kiln_status qg_state_prepare(const kiln_node *n, const kiln_quant_layer *ql, const qg_host_weights *w,
                                    const kiln_cuda_tensor *bias, kiln_dtype x_dtype, qg_state *st) {
    int64_t M = w->M, total_rows = st->group * st->Mp;
    size_t wt_bytes = qg_align((size_t)(total_rows * st->Kp)), m_bytes = qg_align((size_t)M * 4);
    size_t bytes = wt_bytes + 4 * m_bytes;
    unsigned char *host = (unsigned char *)calloc(1, bytes);
    if (!host) return kiln_error(KILN_ERR_OUT_OF_MEMORY, "%s '%s': out of memory preparing the weights", n->op_type, n->name);
    int8_t *wt = (int8_t *)host;
    int32_t *colsum = (int32_t *)(host + wt_bytes), *wzp = (int32_t *)(host + wt_bytes + m_bytes);
    float *scale = (float *)(host + wt_bytes + 2 * m_bytes), *b = (float *)(host + wt_bytes + 3 * m_bytes);
    int w_shift = w->dtype == KILN_U8 ? 128 : 0;
    st->any_wzp = false;
    for (int64_t c = 0; c < M; c++) {
        int64_t g = c / st->Mg, row = g * st->Mp + c % st->Mg;
        int32_t sum = 0;
        for (int64_t k = 0; k < st->K; k++) {
            int32_t v = qg_weight_at(w, st->K, c, k);
            wt[row * st->Kp + k] = (int8_t)v;
            sum += v;
        }
        colsum[c] = sum;
        int64_t zp = ql->nwzp == 0 ? 0 : ql->w_zero_point[ql->nwzp == 1 ? 0 : c];
        wzp[c] = (int32_t)(zp - w_shift);
        st->any_wzp |= wzp[c] != 0;
        scale[c] = ql->x_scale * ql->w_scale[ql->nw == 1 ? 0 : c];
        b[c] = bias ? qg_host_float(bias, c) : 0.0f;
    }
    cudaError_t e = cudaMalloc(&st->dev, bytes);
    if (e == cudaSuccess) e = cudaMemcpy(st->dev, host, bytes, cudaMemcpyHostToDevice);
    free(host);
    if (e != cudaSuccess) return kiln_cuda_error(e, "cudaMalloc/cudaMemcpy of the prepared weights", __FILE__, __LINE__);
    unsigned char *d = (unsigned char *)st->dev;
    st->wt = (const int8_t *)d;
    st->x_shift = x_dtype == KILN_U8 ? 128 : 0;
    qg_epi *ep = &st->epi;
    ep->colsum = (const int32_t *)(d + wt_bytes);
    ep->wzp = (const int32_t *)(d + wt_bytes + m_bytes);
    ep->scale = (const float *)(d + wt_bytes + 2 * m_bytes);
    ep->bias = bias ? (const float *)(d + wt_bytes + 3 * m_bytes) : NULL;
    ep->xzp = ql->x_zero_point - st->x_shift;
    ep->K = (int32_t)st->K;
    ep->kind = (int)ql->act.kind;
    ep->p0 = ql->act.p0;
    ep->p1 = ql->act.p1;
    ep->y_scale = ql->y_scale;
    ep->y_zero_point = (float)ql->y_zero_point;
    ep->lo = ql->y_dtype == KILN_U8 ? 0 : -128;
    ep->hi = ql->y_dtype == KILN_U8 ? 255 : 127;
    return KILN_OK;
}

/* The node's state (*ctx->state), prepared on its first run; *temp when the context keeps none
 * (ctx->state NULL: the tuner), for the caller to destroy after the call. */
static kiln_status qg_state_get(const kiln_node *n, const kiln_quant_layer *ql, const qg_host_weights *w,
                                const kiln_cuda_tensor *bias, kiln_dtype x_dtype, int64_t K, int64_t Mg, int64_t group,
                                kiln_cuda_ctx *ctx, qg_state **out, bool *temp) {
    *temp = !ctx->state;
    if (ctx->state && *ctx->state) {
        if ((*ctx->state)->owner != qg_state_owner)
            return kiln_error(KILN_ERR_INTERNAL, "%s '%s': its node state belongs to another kernel", n->op_type, n->name);
        *out = (qg_state *)*ctx->state;
        return KILN_OK;
    }
    qg_state *st = (qg_state *)calloc(1, sizeof *st);
    if (!st) return kiln_error(KILN_ERR_OUT_OF_MEMORY, "out of memory for the state of %s '%s'", n->op_type, n->name);
    st->base.owner = qg_state_owner;
    st->base.destroy = qg_state_destroy;
    st->K = K;
    st->Kp = qg_round4(K);
    st->Mg = Mg;
    st->Mp = qg_round4(Mg);
    st->group = group;
    kiln_status s = qg_state_prepare(n, ql, w, bias, x_dtype, st);
    if (s != KILN_OK) {
        qg_state_destroy(&st->base);
        return s;
    }
    if (ctx->state) *ctx->state = &st->base;
    *out = st;
    return KILN_OK;
}

/* Ends a call with status s: a temporary state (temp) is destroyed once the stream has done its work. */
static kiln_status qg_finish(qg_state *st, bool temp, kiln_status s, kiln_cuda_ctx *ctx) {
    if (!temp) return s;
    cudaError_t e = cudaStreamSynchronize(ctx->stream);
    if (s == KILN_OK && e != cudaSuccess) s = kiln_cuda_error(e, "cudaStreamSynchronize", __FILE__, __LINE__);
    qg_state_destroy(&st->base);
    return s;
}

/* ---------------------------------------------------------------- the GEMM */

/* A cuBLASLt failure as a status naming the node and the call. */
static kiln_status qg_lt_fail(const kiln_node *n, cublasStatus_t e, const char *call) {
    return kiln_error(KILN_ERR_BACKEND, "%s '%s': %s failed: %s", n->op_type, n->name, call, cublasLtGetStatusString(e));
}
#define QG_LT(call)                                                                                \
    do {                                                                                           \
        cublasStatus_t qg_e_ = (call);                                                             \
        if (qg_e_ != CUBLAS_STATUS_SUCCESS) return qg_lt_fail(n, qg_e_, #call);                    \
    } while (0)

/* Makes call c for R activation rows of row length ldb: descriptors, and the heuristic's best IMMA
 * algorithm within lt_ws bytes of workspace. */
static kiln_status qg_call_make(const kiln_node *n, const qg_state *st, int64_t R, int64_t ldb, size_t lt_ws,
                                kiln_cuda_ctx *ctx, qg_call *c) {
    QG_LT(cublasLtMatmulDescCreate(&c->op, CUBLAS_COMPUTE_32I, CUDA_R_32I));
    cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
    QG_LT(cublasLtMatmulDescSetAttribute(c->op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
    QG_LT(cublasLtMatmulDescSetAttribute(c->op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
    QG_LT(cublasLtMatrixLayoutCreate(&c->la, CUDA_R_8I, (uint64_t)st->Kp, (uint64_t)st->Mp, st->Kp));
    QG_LT(cublasLtMatrixLayoutCreate(&c->lb, CUDA_R_8I, (uint64_t)st->Kp, (uint64_t)R, ldb));
    QG_LT(cublasLtMatrixLayoutCreate(&c->ld, CUDA_R_32I, (uint64_t)st->Mp, (uint64_t)R, st->Mp));
    cublasLtMatmulPreference_t pref;
    QG_LT(cublasLtMatmulPreferenceCreate(&pref));
    cublasStatus_t e = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &lt_ws,
                                                            sizeof lt_ws);
    cublasLtMatmulHeuristicResult_t res;
    int found = 0;
    if (e == CUBLAS_STATUS_SUCCESS)
        e = cublasLtMatmulAlgoGetHeuristic(ctx->lt, c->op, c->la, c->lb, c->ld, c->ld, pref, 1, &res, &found);
    cublasLtMatmulPreferenceDestroy(pref);
    if (e != CUBLAS_STATUS_SUCCESS) return qg_lt_fail(n, e, "cublasLtMatmulAlgoGetHeuristic");
    if (found < 1)
        return kiln_error(KILN_ERR_UNSUPPORTED, "%s '%s': cuBLASLt offers no int8 (IMMA) algorithm for %lld x %lld x %lld "
                          "within %zu bytes of workspace", n->op_type, n->name, (long long)st->Mp, (long long)R,
                          (long long)st->Kp, lt_ws);
    c->algo = res.algo;
    c->ws_need = res.workspaceSize;
    c->R = R;
    c->ldb = ldb;
    c->valid = true;
    return KILN_OK;
}

/* Switches call c to the CUDA-core product, warning once per node with the reason (the last error). */
static void qg_call_fall_back(const kiln_node *n, qg_state *st, qg_call *c) {
    if (!st->fallback_logged)
        KILN_LOG(KILN_LOG_WARN, "cuda: %s '%s': cuBLASLt's int8 GEMM is unavailable (%s); a CUDA-core kernel computes "
                 "it (slower)", n->op_type, n->name, kiln_last_error());
    kiln_error_clear();
    st->fallback_logged = true;
    c->fallback = true;
}

/* The cached call for (R, ldb), or one made now in the next slot (a fallback one when cuBLASLt
 * cannot make it). */
static qg_call *qg_call_get(const kiln_node *n, qg_state *st, int64_t R, int64_t ldb, size_t lt_ws,
                            kiln_cuda_ctx *ctx) {
    for (int i = 0; i < QG_CALLS; i++)
        if (st->calls[i].valid && st->calls[i].R == R && st->calls[i].ldb == ldb) return &st->calls[i];
    qg_call *c = &st->calls[st->next_call];
    st->next_call = (st->next_call + 1) % QG_CALLS;
    qg_call_clear(c);
    if (qg_call_make(n, st, R, ldb, lt_ws, ctx, c) != KILN_OK) {
        qg_call_clear(c);
        qg_call_fall_back(n, st, c);
        c->R = R;
        c->ldb = ldb;
        c->valid = true;
    }
    return c;
}

/* D[R, Mp] (int32, row-major) = X[R, ldb] (int8 rows) times group g's weights: cuBLASLt's IMMA GEMM,
 * or the CUDA-core kernel where cuBLASLt refuses the call. */
static kiln_status qg_gemm(const kiln_node *n, qg_state *st, int64_t g, const int8_t *x, int64_t R, int64_t ldb,
                           int32_t *D, void *lt_ws, size_t lt_bytes, kiln_cuda_ctx *ctx) {
    qg_call *c = qg_call_get(n, st, R, ldb, lt_bytes, ctx);
    const int8_t *w = st->wt + g * st->Mp * st->Kp;
    if (!c->fallback) {
        const int32_t alpha = 1, beta = 0;
        cublasStatus_t e = cublasLtMatmul(ctx->lt, c->op, &alpha, w, c->la, x, c->lb, &beta, D, c->ld, D, c->ld, &c->algo,
                                          lt_ws, lt_bytes, ctx->stream);
        if (e == CUBLAS_STATUS_SUCCESS) return KILN_OK;
        (void)qg_lt_fail(n, e, "cublasLtMatmul"); /* the reason the warning gives */
        qg_call_fall_back(n, st, c);
    }
    qg_gemm_fallback_kernel<<<ku_blocks(R * st->Mp, KU_THREADS, ctx, 4), KU_THREADS, 0, ctx->stream>>>(x, ldb, w, st->Kp, R,
                                                                                                     st->Mp, D);
    KILN_CUDA_LAUNCH_CHECK("qg_gemm_fallback_kernel");
    return KILN_OK;
}

/* rowsum[r] of the R rows of x (row length ldb) when the weights have zero points; else no kernel. */
static kiln_status qg_rowsums(const qg_state *st, const int8_t *x, int64_t R, int64_t ldb, int32_t *rowsum,
                              kiln_cuda_ctx *ctx) {
    if (!st->any_wzp) return KILN_OK;
    qg_rowsum_kernel<<<ku_blocks(R * 32, KU_THREADS, ctx), KU_THREADS, 0, ctx->stream>>>(x, R, ldb, st->K, rowsum);
    KILN_CUDA_LAUNCH_CHECK("qg_rowsum_kernel");
    return KILN_OK;
}

/* The epilogue of D (R rows, group g's channels) into y (dtype t) through map m; the four-column
 * kernel for a dense row-major result (one group, m.p_stride = Mg = Mp). */
static kiln_status qg_epilogue(const kiln_node *n, const qg_state *st, int64_t g, const int32_t *D, int64_t R,
                               const int32_t *rowsum, const qg_out_map &m, bool p_fast, kiln_dtype t, void *y,
                               kiln_cuda_ctx *ctx) {
    const int32_t *rs = st->any_wzp ? rowsum : NULL;
    int64_t c0 = g * st->Mg;
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

/* The workspace split of one chunk of R rows: activation rows (when copied), D, rowsums, then
 * cuBLASLt's share. Returns the bytes before cuBLASLt's share. */
static size_t qg_chunk_bytes(const qg_state *st, int64_t R, bool copy_rows) {
    return (copy_rows ? qg_align((size_t)(R * st->Kp)) : 0) + qg_align((size_t)(R * st->Mp) * 4) +
           qg_align((size_t)R * 4);
}

/* How many of `units` (rows or images of `per` rows each) make a chunk: as many as fit the workspace
 * with cuBLASLt's share lt_bytes and keep D within QG_D_TARGET, at least one; fails naming the node
 * when not even one fits the workspace. */
static kiln_status qg_chunk_units(const kiln_node *n, const qg_state *st, int64_t units, int64_t per, bool copy_rows,
                                  size_t lt_bytes, const kiln_cuda_ctx *ctx, int64_t *out) {
    size_t avail = ctx->workspace_bytes > lt_bytes ? ctx->workspace_bytes - lt_bytes : 0;
    int64_t lo = 0, hi = units;
    while (lo < hi) { /* the largest count that fits */
        int64_t mid = lo + (hi - lo + 1) / 2;
        bool d_fits = mid == 1 || (size_t)(mid * per * st->Mp) * 4 <= QG_D_TARGET;
        if (d_fits && qg_chunk_bytes(st, mid * per, copy_rows) <= avail) lo = mid;
        else hi = mid - 1;
    }
    if (lo < 1)
        return kiln_error(KILN_ERR_UNSUPPORTED, "%s '%s': %zu bytes of workspace do not hold one chunk of %lld rows "
                          "(raise the CUDA workspace)", n->op_type, n->name, ctx->workspace_bytes, (long long)per);
    *out = lo;
    return KILN_OK;
}

/* cuBLASLt's share of the workspace: a quarter of it, at most QG_LT_WORKSPACE. */
static size_t qg_lt_bytes(const kiln_cuda_ctx *ctx) {
    size_t q = ctx->workspace_bytes / 4 / QG_ALIGN * QG_ALIGN;
    return q < QG_LT_WORKSPACE ? q : QG_LT_WORKSPACE;
}

/* ---------------------------------------------------------------- kiln.QMatMul */

static const kiln_cuda_tensor *qg_input(const kiln_cuda_tensor *in, int nin, int i) {
    return i < nin && !ku_absent(&in[i]) ? &in[i] : NULL;
}

/* The bias (absent: NULL) when it has a host copy of count float32 / float16 / bfloat16 values (a
 * 16-bit engine may store its constants in 16 bits: cuda_weights.c); fails otherwise. */
static kiln_status qg_host_bias(const kiln_node *n, const kiln_cuda_tensor *b, int64_t count,
                                const kiln_cuda_tensor **out) {
    *out = b;
    if (b && (!b->host || !ku_is_float(b->host_dtype) || ku_numel(b) != count))
        return kiln_error(KILN_ERR_UNSUPPORTED, "%s '%s': the bias must be a float constant of %lld values", n->op_type,
                          n->name, (long long)count);
    return KILN_OK;
}

static bool qg_is_8bit(kiln_dtype t) { return t == KILN_I8 || t == KILN_U8; }

/* The output dtypes the layer may write: its y_dtype, or any float type for a float result. */
static bool qg_out_ok(const kiln_quant_layer *ql, kiln_dtype t) {
    return ql->y_dtype == KILN_F32 ? ku_is_float(t) : t == ql->y_dtype;
}

/* The candidates of a QMatMul for the tuner: its int8 path (the default) and its float16 one. */
static kiln_status qg_list_paths(kiln_cuda_ctx *ctx) {
    kiln_cuda_candidates *cd = ctx->candidates;
    if (cd->done) return KILN_OK;
    cd->done = true;
    cd->count = 0;
    for (int path = 0; path < 2 && cd->count < cd->max; path++) {
        kiln_tactic *t = &cd->list[cd->count++];
        memset(t, 0, sizeof *t);
        t->kind = KILN_TACTIC_PATH;
        t->algo = path;
        t->heuristic_index = path;
    }
    return KILN_OK;
}

/* Whether ctx's tactic asks for the float16 path (a tactic of another kind is rejected: the int8 path
 * runs, or, while tuning, the call fails). */
static kiln_status qg_wants_f16(const kiln_node *n, kiln_cuda_ctx *ctx, bool *f16) {
    *f16 = false;
    if (!ctx->tactic) return KILN_OK;
    if (ctx->tactic->kind == KILN_TACTIC_PATH && (ctx->tactic->algo == 0 || ctx->tactic->algo == 1)) {
        *f16 = ctx->tactic->algo == 1;
        return KILN_OK;
    }
    return kiln_cuda_tactic_rejected(n, ctx, "not an integer layer's int8 / fp16 choice");
}

/* st->w16 from the weights' host copy, once. */
static kiln_status qg_prepare_f16(const kiln_node *n, const kiln_quant_layer *ql, const qg_host_weights *w, int64_t K,
                                  qg_state *st) {
    if (st->w16) return KILN_OK;
    int64_t N = w->M, w_shift = w->dtype == KILN_U8 ? 128 : 0;
    uint16_t *host = (uint16_t *)malloc((size_t)(K * N) * sizeof *host + 1);
    if (!host) return kiln_error(KILN_ERR_OUT_OF_MEMORY, "%s '%s': out of memory for its float16 weights", n->op_type, n->name);
    for (int64_t c = 0; c < N; c++) {
        int64_t zp = ql->nwzp == 0 ? 0 : ql->w_zero_point[ql->nwzp == 1 ? 0 : c];
        float scale = ql->w_scale[ql->nw == 1 ? 0 : c];
        for (int64_t k = 0; k < K; k++)
            host[k * N + c] = kiln_f32_to_f16((float)(qg_weight_at(w, K, c, k) - (zp - w_shift)) * scale);
    }
    cudaError_t e = cudaMalloc(&st->w16, (size_t)(K * N) * sizeof *host);
    if (e == cudaSuccess) e = cudaMemcpy(st->w16, host, (size_t)(K * N) * sizeof *host, cudaMemcpyHostToDevice);
    free(host);
    if (e != cudaSuccess) return kiln_cuda_error(e, "cudaMalloc/cudaMemcpy of the float16 weights", __FILE__, __LINE__);
    return KILN_OK;
}

/* QMatMul's float16 path, the tuner's alternative to its int8 one: A dequantized to float16, the
 * product by the dequantized weights in cuBLASLt (FP32 accumulation: matmul.cuh), then the bias,
 * activation and output conversion. Chunks of rows fit the workspace with cuBLASLt's share. */
static kiln_status qg_run_f16(const kiln_node *n, const kiln_quant_layer *ql, const qg_state *st,
                              const kiln_cuda_tensor *a, int64_t K, int64_t N, const kiln_cuda_tensor *y,
                              kiln_cuda_ctx *ctx) {
    int64_t rows = K > 0 ? ku_numel(a) / K : 0;
    size_t lt_bytes = qg_lt_bytes(ctx), per_row = (size_t)(K + N) * 2;
    size_t avail = ctx->workspace_bytes > lt_bytes + 2 * QG_ALIGN ? ctx->workspace_bytes - lt_bytes - 2 * QG_ALIGN : 0;
    int64_t chunk = (int64_t)(avail / per_row);
    if (rows > 0 && chunk < 1)
        return kiln_error(KILN_ERR_UNSUPPORTED, "%s '%s': %zu bytes of workspace do not hold one row of its float16 path",
                          n->op_type, n->name, ctx->workspace_bytes);
    for (int64_t r0 = 0; r0 < rows; r0 += chunk) {
        int64_t R = rows - r0 < chunk ? rows - r0 : chunk;
        unsigned char *ws = (unsigned char *)ctx->workspace;
        __half *a16 = (__half *)ws, *d16 = (__half *)(ws + qg_align((size_t)(R * K) * 2));
        size_t used = qg_align((size_t)(R * K) * 2) + qg_align((size_t)(R * N) * 2);
        unsigned blocks = ku_blocks(R * K, KU_THREADS, ctx, 4);
        if (a->dtype == KILN_U8)
            qg_dequant_kernel<uint8_t><<<blocks, KU_THREADS, 0, ctx->stream>>>((const uint8_t *)a->data + r0 * K, R * K,
                                                                               ql->x_zero_point, ql->x_scale, a16);
        else
            qg_dequant_kernel<int8_t><<<blocks, KU_THREADS, 0, ctx->stream>>>((const int8_t *)a->data + r0 * K, R * K,
                                                                              ql->x_zero_point, ql->x_scale, a16);
        KILN_CUDA_LAUNCH_CHECK("qg_dequant_kernel");
        kiln_cuda_ctx sub = *ctx; /* cuBLASLt's workspace after the buffers; no tactic of its own */
        sub.workspace = ws + used;
        sub.workspace_bytes = ctx->workspace_bytes - used;
        sub.tactic = NULL;
        sub.tactic_strict = false;
        sub.candidates = NULL;
        sub.state = NULL;
        KILN_TRY(kiln_cuda_matmul_batched(n, &sub, KILN_F16, 1, R, N, K, a16, false, st->w16, false, d16));
        unsigned char *yb = (unsigned char *)y->data + (size_t)(r0 * N) * kiln_dtype_size(y->dtype);
        unsigned eblocks = ku_blocks(R * N, KU_THREADS, ctx, 4);
#define QG_EPI16(T) qg_epilogue_f16_kernel<T><<<eblocks, KU_THREADS, 0, ctx->stream>>>(d16, R, N, st->epi, (T *)yb)
        switch (y->dtype) {
        case KILN_I8: QG_EPI16(int8_t); break;
        case KILN_U8: QG_EPI16(uint8_t); break;
        case KILN_F32: QG_EPI16(float); break;
        case KILN_F16: QG_EPI16(__half); break;
        case KILN_BF16: QG_EPI16(bf16); break;
        default: return ku_refuse_dtype(n, 0, y->dtype);
        }
#undef QG_EPI16
        KILN_CUDA_LAUNCH_CHECK("qg_epilogue_f16_kernel");
    }
    return KILN_OK;
}

static kiln_status exec_qmatmul(const kiln_node *n, const kiln_cuda_tensor *in, int nin, const kiln_cuda_tensor *out,
                                int nout, kiln_cuda_ctx *ctx) {
    (void)nout;
    if (ctx->candidates) return qg_list_paths(ctx);
    bool f16;
    KILN_TRY(qg_wants_f16(n, ctx, &f16));
    const kiln_cuda_tensor *a = &in[0], *w = &in[1], *y = &out[0];
    kiln_quant_layer ql;
    KILN_TRY(kiln_quant_layer_read(n, &ql));
    if (!qg_is_8bit(a->dtype) || !qg_is_8bit(w->dtype) || w->ndim != 2 || !w->host || a->ndim < 1 ||
        !qg_out_ok(&ql, y->dtype))
        return kiln_error(KILN_ERR_UNSUPPORTED, "%s '%s': needs 8-bit A, a constant 2-D 8-bit B and a %s output",
                          n->op_type, n->name, kiln_dtype_name(ql.y_dtype));
    int64_t K = w->dims[0], N = w->dims[1];
    if (a->dims[a->ndim - 1] != K || K > QG_MAX_K || (ql.nw != 1 && ql.nw != N))
        return kiln_error(KILN_ERR_SHAPE, "%s '%s': A's last dim %lld, B [%lld, %lld], %d weight scales", n->op_type,
                          n->name, (long long)a->dims[a->ndim - 1], (long long)K, (long long)N, ql.nw);
    const kiln_cuda_tensor *bias;
    KILN_TRY(qg_host_bias(n, qg_input(in, nin, 2), N, &bias));
    qg_host_weights hw = {w->host, w->dtype, true, N};
    qg_state *st;
    bool temp;
    KILN_TRY(qg_state_get(n, &ql, &hw, bias, a->dtype, K, N, 1, ctx, &st, &temp));
    if (f16) {
        kiln_status s = qg_prepare_f16(n, &ql, &hw, K, st);
        if (s == KILN_OK) s = qg_run_f16(n, &ql, st, a, K, N, y, ctx);
        return qg_finish(st, temp, s, ctx);
    }
    int64_t rows = K > 0 ? ku_numel(a) / K : 0;
    /* A used in place when it is int8 rows IMMA can read: K a multiple of 4, 4-byte aligned */
    bool copy_rows = a->dtype != KILN_I8 || K % 4 != 0 || ((uintptr_t)a->data & 3) != 0;
    size_t lt_bytes = qg_lt_bytes(ctx);
    int64_t chunk = 0;
    kiln_status s = rows > 0 && N > 0 ? qg_chunk_units(n, st, rows, 1, copy_rows, lt_bytes, ctx, &chunk) : KILN_OK;
    for (int64_t r0 = 0; s == KILN_OK && r0 < rows; r0 += chunk) {
        int64_t R = rows - r0 < chunk ? rows - r0 : chunk;
        unsigned char *ws = (unsigned char *)ctx->workspace;
        int8_t *x = copy_rows ? (int8_t *)ws : (int8_t *)a->data + r0 * K;
        size_t off = copy_rows ? qg_align((size_t)(R * st->Kp)) : 0;
        int32_t *D = (int32_t *)(ws + off);
        int32_t *rowsum = (int32_t *)(ws + off + qg_align((size_t)(R * st->Mp) * 4));
        void *lt_ws = ws + qg_chunk_bytes(st, R, copy_rows);
        size_t lt_avail = ctx->workspace_bytes - qg_chunk_bytes(st, R, copy_rows);
        if (copy_rows) {
            unsigned blocks = ku_blocks(R * st->Kp, KU_THREADS, ctx, 4);
            if (a->dtype == KILN_U8)
                qg_rows_kernel<uint8_t><<<blocks, KU_THREADS, 0, ctx->stream>>>((const uint8_t *)a->data + r0 * K, R, K,
                                                                                st->Kp, 128, x);
            else
                qg_rows_kernel<int8_t><<<blocks, KU_THREADS, 0, ctx->stream>>>((const int8_t *)a->data + r0 * K, R, K,
                                                                               st->Kp, 0, x);
            cudaError_t e = cudaGetLastError();
            if (e != cudaSuccess) s = kiln_cuda_error(e, "launch qg_rows_kernel", __FILE__, __LINE__);
        }
        int64_t ldb = copy_rows ? st->Kp : K;
        if (s == KILN_OK) s = qg_rowsums(st, x, R, ldb, rowsum, ctx);
        if (s == KILN_OK) s = qg_gemm(n, st, 0, x, R, ldb, D, lt_ws, lt_avail < lt_bytes ? lt_avail : lt_bytes, ctx);
        qg_out_map m = {R, 0, 1, N};
        unsigned char *yb = (unsigned char *)y->data + (size_t)(r0 * N) * kiln_dtype_size(y->dtype);
        if (s == KILN_OK) s = qg_epilogue(n, st, 0, D, R, rowsum, m, false, y->dtype, yb, ctx);
    }
    return qg_finish(st, temp, s, ctx);
}

/* ---------------------------------------------------------------- kiln.QConv */

/* The geometry of QConv n on x [N, C, (H,) W] and w [M, Cg, (kh,) kw]: 1-D and 2-D windows. */
static kiln_status qg_conv_geom_make(const kiln_node *n, const kiln_cuda_tensor *x, const kiln_cuda_tensor *w,
                                     qg_conv_geom *gm) {
    memset(gm, 0, sizeof *gm);
    if ((x->ndim != 3 && x->ndim != 4) || w->ndim != x->ndim)
        return kiln_error(KILN_ERR_UNSUPPORTED, "%s '%s': the cuda backend runs 1-D and 2-D integer convolutions (x has "
                          "rank %d)", n->op_type, n->name, x->ndim);
    int nsp = x->ndim - 2;
    kiln_window win;
    KILN_TRY(kiln_window_parse(n, nsp, w->dims + 2, &win));
    int64_t out[2], pb[2], pe;
    for (int i = 0; i < nsp; i++) KILN_TRY(kiln_window_out(&win, i, x->dims[2 + i], &out[i], &pb[i], &pe));
    int h = nsp == 2 ? 0 : -1, wi = nsp - 1; /* index of the H and W spatial dims (H absent in 1-D) */
    gm->N = x->dims[0];
    gm->C = x->dims[1];
    gm->M = w->dims[0];
    gm->group = kiln_attr_int(n, "group", 1);
    gm->Cg = w->dims[1];
    if (gm->group < 1 || gm->M % gm->group || gm->Cg * gm->group != gm->C)
        return kiln_error(KILN_ERR_SHAPE, "%s '%s': %lld input channels, weights [%lld, %lld, ...] and group %lld do not "
                          "agree", n->op_type, n->name, (long long)gm->C, (long long)gm->M, (long long)gm->Cg,
                          (long long)gm->group);
    gm->Mg = gm->M / gm->group;
    gm->H = h >= 0 ? x->dims[2] : 1;
    gm->W = x->dims[2 + wi];
    gm->OH = h >= 0 ? out[h] : 1;
    gm->OW = out[wi];
    gm->kh = h >= 0 ? w->dims[2] : 1;
    gm->kw = w->dims[2 + wi];
    gm->sy = h >= 0 ? win.stride[h] : 1;
    gm->sx = win.stride[wi];
    gm->dy = h >= 0 ? win.dilation[h] : 1;
    gm->dx = win.dilation[wi];
    gm->pt = h >= 0 ? pb[h] : 0;
    gm->pl = pb[wi];
    return KILN_OK;
}

static kiln_status exec_qconv(const kiln_node *n, const kiln_cuda_tensor *in, int nin, const kiln_cuda_tensor *out,
                              int nout, kiln_cuda_ctx *ctx) {
    (void)nout;
    const kiln_cuda_tensor *x = &in[0], *w = &in[1], *y = &out[0];
    kiln_quant_layer ql;
    KILN_TRY(kiln_quant_layer_read(n, &ql));
    if (!qg_is_8bit(x->dtype) || !qg_is_8bit(w->dtype) || !w->host || !qg_out_ok(&ql, y->dtype))
        return kiln_error(KILN_ERR_UNSUPPORTED, "%s '%s': needs 8-bit X, constant 8-bit W and a %s output", n->op_type,
                          n->name, kiln_dtype_name(ql.y_dtype));
    if (kiln_cuda_qconv_igemm_takes(n, &ql, x, w, ctx)) return kiln_cuda_qconv_igemm(n, &ql, in, nin, y, ctx);
    if (qg_input(in, nin, 3) || kiln_attr_int(n, "channels_last", 0))
        return kiln_error(KILN_ERR_UNSUPPORTED, "%s '%s': a residual input or channels-last tensors need the "
                          "implicit-GEMM kernel (group 1, symmetric weights, sm_80+, a workspace of one image)",
                          n->op_type, n->name);
    qg_conv_geom gm;
    KILN_TRY(qg_conv_geom_make(n, x, w, &gm));
    int64_t K = gm.Cg * gm.kh * gm.kw, P = gm.OH * gm.OW;
    if (K > QG_MAX_K || (ql.nw != 1 && ql.nw != gm.M))
        return kiln_error(KILN_ERR_SHAPE, "%s '%s': %lld taps per output (at most %d), %d weight scales for %lld channels",
                          n->op_type, n->name, (long long)K, QG_MAX_K, ql.nw, (long long)gm.M);
    const kiln_cuda_tensor *bias;
    KILN_TRY(qg_host_bias(n, qg_input(in, nin, 2), gm.M, &bias));
    qg_host_weights hw = {w->host, w->dtype, false, gm.M};
    qg_state *st;
    bool temp;
    KILN_TRY(qg_state_get(n, &ql, &hw, bias, x->dtype, K, gm.Mg, gm.group, ctx, &st, &temp));
    size_t lt_bytes = qg_lt_bytes(ctx);
    int64_t chunk = 0;
    kiln_status s = gm.N > 0 && P > 0 && gm.M > 0 ? qg_chunk_units(n, st, gm.N, P, true, lt_bytes, ctx, &chunk) : KILN_OK;
    int8_t pad_value = (int8_t)st->epi.xzp;
    for (int64_t i0 = 0; s == KILN_OK && i0 < gm.N; i0 += chunk) {
        int64_t imgs = gm.N - i0 < chunk ? gm.N - i0 : chunk, R = imgs * P;
        unsigned char *ws = (unsigned char *)ctx->workspace;
        int8_t *cols = (int8_t *)ws;
        size_t off = qg_align((size_t)(R * st->Kp));
        int32_t *D = (int32_t *)(ws + off);
        int32_t *rowsum = (int32_t *)(ws + off + qg_align((size_t)(R * st->Mp) * 4));
        void *lt_ws = ws + qg_chunk_bytes(st, R, true);
        size_t lt_avail = ctx->workspace_bytes - qg_chunk_bytes(st, R, true);
        qg_out_map m = {P, gm.M * P, P, 1};
        unsigned char *yb = (unsigned char *)y->data + (size_t)(i0 * gm.M * P) * kiln_dtype_size(y->dtype);
        for (int64_t g = 0; s == KILN_OK && g < gm.group; g++) {
            unsigned blocks = ku_blocks(R * st->Kp, KU_THREADS, ctx, 4);
            if (x->dtype == KILN_U8)
                qg_im2col_kernel<uint8_t><<<blocks, KU_THREADS, 0, ctx->stream>>>((const uint8_t *)x->data, gm, i0, g, R,
                                                                                  K, st->Kp, 128, pad_value, cols);
            else
                qg_im2col_kernel<int8_t><<<blocks, KU_THREADS, 0, ctx->stream>>>((const int8_t *)x->data, gm, i0, g, R, K,
                                                                                 st->Kp, 0, pad_value, cols);
            cudaError_t e = cudaGetLastError();
            if (e != cudaSuccess) s = kiln_cuda_error(e, "launch qg_im2col_kernel", __FILE__, __LINE__);
            if (s == KILN_OK) s = qg_rowsums(st, cols, R, st->Kp, rowsum, ctx);
            if (s == KILN_OK)
                s = qg_gemm(n, st, g, cols, R, st->Kp, D, lt_ws, lt_avail < lt_bytes ? lt_avail : lt_bytes, ctx);
            if (s == KILN_OK) s = qg_epilogue(n, st, g, D, R, rowsum, m, true, y->dtype, yb, ctx);
        }
    }
    return qg_finish(st, temp, s, ctx);
}

/* ---------------------------------------------------------------- build-time checks */

/* Both layers: 8-bit X, constant 8-bit weights, a constant bias when present, valid attributes, an
 * output of the layer's y_dtype (or a float type). */
static kiln_status sup_quant_layer(const kiln_graph *g, const kiln_node *n, int weight_rank_lo, int weight_rank_hi) {
    kiln_quant_layer ql;
    KILN_TRY(kiln_quant_layer_read(n, &ql));
    const kiln_value *x = ku_in(g, n, 0), *w = ku_in(g, n, 1), *b = ku_in(g, n, 2), *y = ku_out(g, n, 0);
    if (!x || !w || !y) return kiln_error(KILN_ERR_INVALID_ARGUMENT, "%s '%s' needs X and W", n->op_type, n->name);
    if (!qg_is_8bit(x->dtype)) return ku_refuse_dtype(n, 0, x->dtype);
    if (!qg_is_8bit(w->dtype)) return ku_refuse_dtype(n, 1, w->dtype);
    if (!kiln_cuda_value_on_host(g, n->inputs[1]))
        return kiln_error(KILN_ERR_UNSUPPORTED, "%s '%s': the cuda backend needs constant weights", n->op_type, n->name);
    if (w->ndim >= 0 && (w->ndim < weight_rank_lo || w->ndim > weight_rank_hi))
        return kiln_error(KILN_ERR_UNSUPPORTED, "%s '%s': weights of rank %d (the cuda backend takes %d to %d)", n->op_type,
                          n->name, w->ndim, weight_rank_lo, weight_rank_hi);
    if (b && !kiln_cuda_value_on_host(g, n->inputs[2]))
        return kiln_error(KILN_ERR_UNSUPPORTED, "%s '%s': the cuda backend needs a constant bias", n->op_type, n->name);
    if (!qg_out_ok(&ql, y->dtype)) return ku_refuse_dtype(n, 0, y->dtype);
    return KILN_OK;
}

static kiln_status sup_qmatmul(const kiln_graph *g, const kiln_node *n) { return sup_quant_layer(g, n, 2, 2); }
static kiln_status sup_qconv(const kiln_graph *g, const kiln_node *n) { return sup_quant_layer(g, n, 3, 4); }

extern "C" const kiln_cuda_kernel kiln_cuda_kernels_quant[] = {
    {"QMatMul", KILN_FUSED_DOMAIN, exec_qmatmul, sup_qmatmul},
    {"QConv", KILN_FUSED_DOMAIN, exec_qconv, sup_qconv},
    {NULL, NULL, NULL, NULL},
};
