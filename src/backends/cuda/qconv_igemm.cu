/* qconv_igemm.cu — kiln.QConv (ir/quant_ops.h) as an INT8 implicit-GEMM convolution on tensor cores:
 * mma.sync m16n8k32 s8 x s8 -> s32, no materialized im2col, int32 sums in registers and the
 * requantization in the kernel's epilogue (zero-point correction, per-channel scale
 * x_scale * w_scale[c], bias, the residual R of ResNet's shortcut (8-bit or float), activation, int8 /
 * uint8 / float output): the formulas of the CPU oracle (src/backends/cpu/quant_conv.c) and of
 * quant_gemm.cu's epilogue, the same IEEE operations in the same order.
 *
 * The GEMM: rows r = output pixels (image, oy, ox) of the batch, columns c = output channels, inner
 * index k = (ky * kw + kx) * Cp + ci over the taps of a channels-last input whose channels are padded
 * to Cp, a multiple of 16, so that every 16-byte piece of a row of A is 16 channels of one input
 * pixel (one cp.async) — or, for inputs of at most 8 channels (the stem), to Cp = 8, every 16-byte
 * piece two taps of 8 channels (two 8-byte cp.async), so that no k step is half padding. X
 * channels-last (channels_last = 1, the layout pass's form) in int8 with C = Cp is read in place;
 * otherwise one kernel writes it channels-last into the workspace
 * (NCHW transposed, uint8 shifted to int8 by -128, the padding channels zero), a chunk of images at a
 * time. Y (and the residual R) are NCHW or, channels-last, NHWC. The weights are prepared once per
 * context as rows [c][k] (k contiguous, the padding channels and k beyond taps * Cp zero up to Kp, a
 * multiple of QCI_BK), so B tiles are plain 16-byte copies too. A tap outside the image reads the
 * input's (shifted) zero point, so the correction - x_zero_point * colsum(w)[c] in the epilogue makes
 * the padding contribute nothing, as on the CPU.
 *
 * The kernel: a CTA computes a BM x BN tile of D with WM x WN warps; K is walked in QCI_BK-byte
 * steps through a STAGES-deep cp.async pipeline in shared memory (rows padded to QCI_LDS bytes so
 * that ldmatrix reads hit 8 distinct bank groups); ldmatrix.x4 loads the A and B fragments of
 * m16n8k32 straight from those rows (an 8 x 16-byte matrix is 8 rows of 16 int8 of k). The
 * epilogue stages the CTA's int32 sums in the same shared memory and then requantizes them with
 * consecutive threads on consecutive output addresses (runs of pixels of one channel for NCHW, of
 * channels of one pixel for NHWC), where the residual is read as well. Four tile shapes
 * (qconv_igemm.h: kiln_qci_tile): 128 x 256 and 128 x 128 with 8 warps for large layers, 64 x 64 and
 * 32 x 64 with 4 warps for small maps and few channels; a tuned layer runs the one its tactic names,
 * else 128 x 128 when it gives every SM a tile and 64 x 64 otherwise. The split-K launch of the 64 x 64
 * tile (batch 1's small maps with deep K) divides the k steps among CTAs (grid z), which add their
 * int32 sums atomically into the workspace; a second kernel then applies the same epilogue. */
#include "backends/cuda/qconv_igemm.h"

#include "backends/cuda/activation.cuh"
#include "backends/cuda/kernel_util.cuh"
#include "backends/cuda/mma_util.cuh"

#include <limits.h>
#include <stdlib.h>

extern "C" {
#include "ir/nn_window.h"
}

#define QCI_BK 64                 /* bytes (int8 values) of k per pipeline step */
#define QCI_LDS (QCI_BK + 16)     /* shared-memory row pitch: 80 bytes, conflict-free ldmatrix rows */
#define QCI_CP_ALIGN 16           /* input channels padded to a multiple of this (one cp.async) ... */
#define QCI_CP_SMALL 8            /* ... or, when there are at most this many, to exactly this many */
#define QCI_MAX_K 32768           /* as the CPU kernels: no 8-bit sum of this many taps overflows int32 */
#define QCI_MAX_IMAGES 65535      /* images per chunk: the transposing kernel's grid.z */

static_assert(QCI_BK % 32 == 0, "a pipeline step holds whole m16n8k32 k-steps");
static_assert(QCI_LDS % 16 == 0, "shared rows start on 16-byte boundaries (cp.async, ldmatrix)");
static_assert(QCI_BK % QCI_CP_ALIGN == 0, "a 16-byte piece of A never straddles two taps of 16+ channels");
static_assert(QCI_CP_ALIGN == 2 * QCI_CP_SMALL, "a 16-byte piece of A holds two whole taps of QCI_CP_SMALL channels");

/* ---------------------------------------------------------------- device code */

/* The epilogue's per-layer constants and per-channel parameters (device pointers). */
typedef struct qci_epi {
    const float *scale;    /* [M] x_scale * w_scale[c] (the float32 product, as the CPU) */
    const float *bias;     /* [M] or NULL */
    const int32_t *colsum; /* [M] sum_k w'[c, k] of the shifted weights */
    int32_t xzp;           /* the shifted input zero point */
    int kind;              /* activation */
    float p0, p1;
    float y_scale, y_zero_point;
    int32_t lo, hi;        /* integer output range */
} qci_epi;

/* The residual's storage types: 8-bit (scaled, with a zero point) or float (added as it is). */
enum qci_residual_kind { QCI_R_I8, QCI_R_U8, QCI_R_F32, QCI_R_F16, QCI_R_BF16 };

/* One launch's geometry: the channels-last input chunk, the prepared weights and the output map
 * y + (r / P) * img_stride + c * c_stride + (r % P) * p_stride of sum D[r, c]. */
typedef struct qci_args {
    const int8_t *x;       /* [images][H][W][Cp] shifted int8 */
    const int8_t *w;       /* [M][Kp] shifted int8 */
    int H, W, Cp, OH, OW, kw, sy, sx, dy, dx, pt, pl;
    int M, Kp, Ktaps;      /* Ktaps = kh * kw * Cp: k beyond it reads zeros */
    int rows;              /* images * OH * OW */
    int64_t img_stride, c_stride, p_stride;
    uint32_t pad4;         /* the shifted input zero point in each of 4 bytes */
    const void *r;         /* the residual R (y's layout) or NULL */
    int r_kind;            /* R's type: qci_residual_kind */
    float r_scale;
    int32_t r_zero_point;
    bool vec4;             /* channels-last output written 4 channels at a time (M % 4 == 0, y aligned) */
    int splits;            /* split-K: blockIdx.z takes k steps [KT z / splits, KT (z + 1) / splits) ... */
    int32_t *acc;          /* ... and adds its sums into acc [rows][M] (zeroed first); NULL: one split */
    qci_epi e;
} qci_args;

/* Four consecutive outputs, stored as one access. */
template <typename T> struct __align__(4 * sizeof(T)) qci_vec4 {
    T v[4];
};

/* Integer output: saturate(round_half_even(v / y_scale) + y_zero_point), as the CPU's quant_round_sat. */
template <typename T> static __device__ __forceinline__ T qci_out(float v, const qci_epi &e);
template <> __device__ __forceinline__ int8_t qci_out<int8_t>(float v, const qci_epi &e) {
    float r = rintf(__fadd_rn(rintf(__fdiv_rn(v, e.y_scale)), e.y_zero_point));
    return (int8_t)(!(r >= (float)e.lo) ? e.lo : r > (float)e.hi ? e.hi : (int32_t)r);
}
template <> __device__ __forceinline__ uint8_t qci_out<uint8_t>(float v, const qci_epi &e) {
    float r = rintf(__fadd_rn(rintf(__fdiv_rn(v, e.y_scale)), e.y_zero_point));
    return (uint8_t)(!(r >= (float)e.lo) ? e.lo : r > (float)e.hi ? e.hi : (int32_t)r);
}
template <> __device__ __forceinline__ float qci_out<float>(float v, const qci_epi &) { return v; }
template <> __device__ __forceinline__ __half qci_out<__half>(float v, const qci_epi &) { return __float2half_rn(v); }
template <> __device__ __forceinline__ bf16 qci_out<bf16>(float v, const qci_epi &) { return __float2bfloat16_rn(v); }

/* The layer's output value of sum acc of channel c (output element at): zero-point correction, scale,
 * bias, the residual (8-bit: r_scale * (R[at] - r_zero_point); float: R[at]) when there is one,
 * activation. */
static __device__ __forceinline__ float qci_value(int32_t acc, int c, int64_t at, const qci_args &a) {
    const qci_epi &e = a.e;
    int64_t corrected = (int64_t)acc - (int64_t)e.xzp * __ldg(e.colsum + c);
    float v = __fmul_rn((float)(int32_t)corrected, __ldg(e.scale + c));
    v = __fadd_rn(v, e.bias ? __ldg(e.bias + c) : 0.0f);
    if (a.r) {
        float rv;
        switch (a.r_kind) {
        case QCI_R_I8: rv = __fmul_rn((float)((int)__ldg((const int8_t *)a.r + at) - a.r_zero_point), a.r_scale); break;
        case QCI_R_U8: rv = __fmul_rn((float)((int)__ldg((const uint8_t *)a.r + at) - a.r_zero_point), a.r_scale); break;
        case QCI_R_F32: rv = __ldg((const float *)a.r + at); break;
        case QCI_R_F16: rv = __half2float(((const __half *)a.r)[at]); break;
        default: rv = __bfloat162float(((const bf16 *)a.r)[at]); break;
        }
        v = __fadd_rn(v, rv);
    }
    return kiln_cuda_act(v, e.kind, e.p0, e.p1);
}

/* dst[img][p][c] = c < C ? x[img][c][p] - shift : 0 for p < HW, c < Cp: a chunk of NCHW images
 * channels-last, padded, as int8. Grid (ceil(HW / 32), ceil(Cp / 32), images), block 32 x 8. */
template <typename S>
__global__ void qci_to_nhwc_kernel(const S *__restrict__ x, int64_t C, int64_t HW, int64_t Cp, int shift,
                                   int8_t *__restrict__ dst) {
    __shared__ int tile[32][33];
    const S *xi = x + (int64_t)blockIdx.z * C * HW;
    int8_t *di = dst + (int64_t)blockIdx.z * HW * Cp;
    int64_t p0 = (int64_t)blockIdx.x * 32, c0 = (int64_t)blockIdx.y * 32;
    for (int j = threadIdx.y; j < 32; j += 8) {
        int64_t c = c0 + j, p = p0 + threadIdx.x;
        tile[j][threadIdx.x] = c < C && p < HW ? (int)xi[c * HW + p] - shift : 0;
    }
    __syncthreads();
    for (int j = threadIdx.y; j < 32; j += 8) {
        int64_t p = p0 + j, c = c0 + threadIdx.x;
        if (p < HW && c < Cp) di[p * Cp + c] = (int8_t)tile[threadIdx.x][j];
    }
}

/* dst[p][c] = c < C ? x[p][c] - shift : 0 for p < pixels, c < Cp: channels-last X padded to Cp
 * channels, as int8. */
template <typename S>
__global__ void qci_pad_channels_kernel(const S *__restrict__ x, int64_t pixels, int64_t C, int64_t Cp, int shift,
                                        int8_t *__restrict__ dst) {
    int64_t total = pixels * Cp;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += (int64_t)gridDim.x * blockDim.x) {
        int64_t p = i / Cp, c = i % Cp;
        dst[i] = c < C ? (int8_t)((int)x[p * C + c] - shift) : (int8_t)0;
    }
}

#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 800 /* the mma exists where the kernel has a body */
/* c += a * b for one m16n8k32 tile: a 16 x 32 int8 (row-major fragments a[0..3]), b 32 x 8 int8
 * (column fragments b[0..1]), c 16 x 8 int32. Fragments (PTX ISA, mma.m16n8k32 .s8): lane l, g = l / 4,
 * q = l % 4; a[0] = A[g][4q..4q+3], a[1] = A[g+8][4q..], a[2] = A[g][16+4q..], a[3] = A[g+8][16+4q..];
 * b[0] = B[4q..4q+3][g], b[1] = B[16+4q..][g]; c[0], c[1] = C[g][2q, 2q+1], c[2], c[3] = C[g+8][2q, 2q+1]. */
static __device__ __forceinline__ void qci_mma(int32_t (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    asm volatile("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};\n"
                 : "+r"(c[0]), "+r"(c[1]), "+r"(c[2]), "+r"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
#endif

/* The output stage's tile pitch in int32 sums for rows of n values: 16 bytes of padding, so that the
 * 4 lanes of a quad (2 columns apart) store to different banks. */
#define QCI_OUT_PITCH(n) ((n) + 4)
/* Where the output stage's row offsets start in shared memory: after the tile of sums in either order. */
#define QCI_OUT_ROWS_AT(BM, BN)                                                                    \
    ((size_t)((BM) * QCI_OUT_PITCH(BN) > (BN) * QCI_OUT_PITCH(BM) ? (BM) * QCI_OUT_PITCH(BN)          \
                                                                : (BN) * QCI_OUT_PITCH(BM)) * 4)

/* The shared memory of one CTA of tile BM x BN: STAGES x (BM + BN) rows of QCI_LDS bytes for the
 * pipeline, reused by the output stage (a BM x BN tile of int32 sums and BM row offsets), whichever
 * is larger. */
template <int BM, int BN, int STAGES> static constexpr __host__ __device__ size_t qci_smem_bytes() {
    return (size_t)STAGES * (BM + BN) * QCI_LDS > QCI_OUT_ROWS_AT(BM, BN) + BM * sizeof(int64_t)
               ? (size_t)STAGES * (BM + BN) * QCI_LDS
               : QCI_OUT_ROWS_AT(BM, BN) + BM * sizeof(int64_t);
}

/* y (through a's output map) = out(act(scale * (X * W - xzp colsum) + bias)) for the rows and
 * channels of CTA (blockIdx.x: BM rows, blockIdx.y: BN channels). WM x WN warps of 32 threads, each
 * a (BM / WM) x (BN / WN) tile of int32 sums; needs qci_smem_bytes<BM, BN, STAGES>() of dynamic
 * shared memory and sm_80+. Preconditions (checked by the host): Cp % 16 == 0 or Cp = 8,
 * Kp % QCI_BK == 0, x and w 16-byte aligned, Ktaps <= Kp. */
template <int BM, int BN, int WM, int WN, int STAGES, int MINB, typename T>
__global__ void __launch_bounds__(WM * WN * 32, MINB) qci_kernel(const qci_args a, T *__restrict__ y) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    constexpr int THREADS = WM * WN * 32, WTM = BM / WM, WTN = BN / WN, MI = WTM / 16, NI = WTN / 8;
    constexpr int PIECES = QCI_BK / 16; /* 16-byte pieces per row per step */
    constexpr int A_IT = BM * PIECES / THREADS, B_IT = BN * PIECES / THREADS;
    static_assert(BM % (WM * 16) == 0 && BN % (WN * 16) == 0, "warp tiles are whole 16 x 16 blocks");
    static_assert(NI % 2 == 0, "B fragments are loaded two n8 tiles at a time");
    static_assert(THREADS % PIECES == 0, "a thread copies the same piece of every row it loads");
    static_assert(A_IT * THREADS == BM * PIECES && B_IT * THREADS == BN * PIECES, "copies divide among threads");
    static_assert(STAGES >= 2, "a pipeline needs two stages");
    static_assert(QCI_OUT_ROWS_AT(BM, BN) + BM * sizeof(int64_t) <= qci_smem_bytes<BM, BN, STAGES>(),
                  "the output stage fits the pipeline's shared memory");
    extern __shared__ __align__(16) int8_t qci_smem[];
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, wm = warp / WN, wn = warp % WN;
    const int g = lane >> 2, q = lane & 3, piece = tid % PIECES;
    const int m0 = blockIdx.x * BM, n0 = blockIdx.y * BN, P = a.OH * a.OW;

    /* the A rows this thread copies: their image's offset and the top-left tap of their window */
    int64_t a_img[A_IT];
    int a_iy[A_IT], a_ix[A_IT];
    bool a_ok[A_IT];
#pragma unroll
    for (int i = 0; i < A_IT; i++) {
        int r = m0 + (tid + i * THREADS) / PIECES;
        a_ok[i] = r < a.rows;
        int rr = a_ok[i] ? r : 0, img = rr / P, p = rr - img * P, oy = p / a.OW, ox = p - oy * a.OW;
        a_img[i] = (int64_t)img * a.H * a.W * a.Cp;
        a_iy[i] = oy * a.sy - a.pt;
        a_ix[i] = ox * a.sx - a.pl;
    }

    auto load_stage = [&](int stage, int kt) {
        int8_t *sa = qci_smem + (size_t)stage * (BM + BN) * QCI_LDS, *sb = sa + BM * QCI_LDS;
        const bool halves = a.Cp == QCI_CP_SMALL; /* each 16-byte piece: two taps, 8 bytes each */
        for (int h = 0; h < 16; h += halves ? 8 : 16) {
            int k = kt * QCI_BK + piece * 16 + h;
            bool k_ok = k < a.Ktaps;
            int tap = k / a.Cp, ci = k - tap * a.Cp, ky = tap / a.kw, kx = tap - ky * a.kw;
#pragma unroll
            for (int i = 0; i < A_IT; i++) {
                int8_t *dst = sa + ((tid + i * THREADS) / PIECES) * QCI_LDS + piece * 16 + h;
                int iy = a_iy[i] + ky * a.dy, ix = a_ix[i] + kx * a.dx;
                bool inside = iy >= 0 && iy < a.H && ix >= 0 && ix < a.W;
                if (k_ok && a_ok[i] && !inside) { /* a padding tap: the input's zero point */
                    if (halves) *(uint2 *)dst = make_uint2(a.pad4, a.pad4);
                    else *(uint4 *)dst = make_uint4(a.pad4, a.pad4, a.pad4, a.pad4);
                    continue;
                }
                bool valid = k_ok && a_ok[i];
                const int8_t *src = valid ? a.x + a_img[i] + ((int64_t)iy * a.W + ix) * a.Cp + ci : a.x;
                if (halves) fa_cp8(dst, src, valid);
                else fa_cp16(dst, src, valid);
            }
        }
#pragma unroll
        for (int i = 0; i < B_IT; i++) {
            int row = (tid + i * THREADS) / PIECES, c = n0 + row;
            bool valid = c < a.M;
            const int8_t *src = valid ? a.w + (int64_t)c * a.Kp + kt * QCI_BK + piece * 16 : a.w;
            fa_cp16(sb + row * QCI_LDS + piece * 16, src, valid);
        }
    };

    int32_t acc[MI][NI][4];
#pragma unroll
    for (int mi = 0; mi < MI; mi++)
#pragma unroll
        for (int ni = 0; ni < NI; ni++)
#pragma unroll
            for (int j = 0; j < 4; j++) acc[mi][ni][j] = 0;

    const int KT = a.Kp / QCI_BK; /* this CTA's k steps: [kt0, kt0 + nkt) */
    const int kt0 = a.acc ? (int)((int64_t)KT * blockIdx.z / a.splits) : 0;
    const int nkt = a.acc ? (int)((int64_t)KT * (blockIdx.z + 1) / a.splits) - kt0 : KT;
#pragma unroll
    for (int s = 0; s < STAGES - 1; s++) {
        if (s < nkt) load_stage(s, kt0 + s);
        fa_commit();
    }
    for (int it = 0; it < nkt; it++) {
        fa_wait<STAGES - 2>(); /* step it's copies have landed (this thread's) */
        __syncthreads();       /* ... everyone's, and step it - 1's stage is free to refill */
        int next = it + STAGES - 1;
        if (next < nkt) load_stage(next % STAGES, kt0 + next);
        fa_commit();
        const int8_t *sa = qci_smem + (size_t)(it % STAGES) * (BM + BN) * QCI_LDS, *sb = sa + BM * QCI_LDS;
#pragma unroll
        for (int ks = 0; ks < QCI_BK / 32; ks++) {
            uint32_t af[MI][4], bfr[NI][2];
#pragma unroll
            for (int mi = 0; mi < MI; mi++)
                fa_ldsm_x4(af[mi], sa + (wm * WTM + mi * 16 + (lane & 15)) * QCI_LDS + ks * 32 + (lane >> 4) * 16);
#pragma unroll
            for (int nj = 0; nj < NI / 2; nj++) {
                uint32_t r[4];
                fa_ldsm_x4(r, sb + (wn * WTN + nj * 16 + (lane & 7) + ((lane >> 4) << 3)) * QCI_LDS + ks * 32 +
                                  ((lane >> 3) & 1) * 16);
                bfr[2 * nj][0] = r[0];
                bfr[2 * nj][1] = r[1];
                bfr[2 * nj + 1][0] = r[2];
                bfr[2 * nj + 1][1] = r[3];
            }
#pragma unroll
            for (int mi = 0; mi < MI; mi++)
#pragma unroll
                for (int ni = 0; ni < NI; ni++) qci_mma(acc[mi][ni], af[mi], bfr[ni][0], bfr[ni][1]);
        }
    }
    fa_wait<0>();
    if (a.acc) { /* split-K: the partial sums go to acc; qci_splitk_epilogue_kernel requantizes them */
#pragma unroll
        for (int mi = 0; mi < MI; mi++)
#pragma unroll
            for (int h = 0; h < 2; h++) {
                int r = m0 + wm * WTM + mi * 16 + g + 8 * h;
#pragma unroll
                for (int ni = 0; ni < NI; ni++)
#pragma unroll
                    for (int j = 0; j < 2; j++) {
                        int c = n0 + wn * WTN + ni * 8 + 2 * q + j;
                        if (r < a.rows && c < a.M) atomicAdd(a.acc + (int64_t)r * a.M + c, acc[mi][ni][2 * h + j]);
                    }
            }
        return;
    }
    __syncthreads(); /* the pipeline's shared memory now stages the output tile */

    /* the tile's sums into shared memory, [BN][BM] (channel-major) or [BM][BN] (channels-last output),
     * then the epilogue by consecutive threads on consecutive output addresses */
    int32_t *tile = reinterpret_cast<int32_t *>(qci_smem);
    int64_t *row_at = reinterpret_cast<int64_t *>(qci_smem + QCI_OUT_ROWS_AT(BM, BN)); /* -1: past the rows */
    const bool ch_fast = a.c_stride == 1;
    for (int rr = tid; rr < BM; rr += THREADS) {
        int r = m0 + rr, img = r / P;
        row_at[rr] = r < a.rows ? img * a.img_stride + (int64_t)(r - img * P) * a.p_stride : -1;
    }
#pragma unroll
    for (int mi = 0; mi < MI; mi++)
#pragma unroll
        for (int h = 0; h < 2; h++) {
            int rr = wm * WTM + mi * 16 + g + 8 * h;
#pragma unroll
            for (int ni = 0; ni < NI; ni++)
#pragma unroll
                for (int j = 0; j < 2; j++) {
                    int cc = wn * WTN + ni * 8 + 2 * q + j;
                    tile[ch_fast ? rr * QCI_OUT_PITCH(BN) + cc : cc * QCI_OUT_PITCH(BM) + rr] = acc[mi][ni][2 * h + j];
                }
        }
    __syncthreads();
    if (a.vec4) { /* channels-last: a thread takes 4 channels of one pixel, one 16-byte read of sums, one store */
        for (int i = tid; i < BM * BN / 4; i += THREADS) {
            int rr = i / (BN / 4), cc = (i % (BN / 4)) * 4, c = n0 + cc;
            int64_t at = row_at[rr];
            if (at < 0 || c >= a.M) continue; /* M % 4 == 0: c < M means c + 3 < M */
            at += c;
            int4 sums = *reinterpret_cast<const int4 *>(tile + rr * QCI_OUT_PITCH(BN) + cc);
            qci_vec4<T> out;
            out.v[0] = qci_out<T>(qci_value(sums.x, c, at, a), a.e);
            out.v[1] = qci_out<T>(qci_value(sums.y, c + 1, at + 1, a), a.e);
            out.v[2] = qci_out<T>(qci_value(sums.z, c + 2, at + 2, a), a.e);
            out.v[3] = qci_out<T>(qci_value(sums.w, c + 3, at + 3, a), a.e);
            *reinterpret_cast<qci_vec4<T> *>(y + at) = out;
        }
        return;
    }
    for (int i = tid; i < BM * BN; i += THREADS) {
        int rr = ch_fast ? i / BN : i % BM, cc = ch_fast ? i % BN : i / BM, c = n0 + cc;
        int64_t at = row_at[rr];
        if (at < 0 || c >= a.M) continue;
        at += (int64_t)c * a.c_stride;
        int32_t sum = tile[ch_fast ? rr * QCI_OUT_PITCH(BN) + cc : cc * QCI_OUT_PITCH(BM) + rr];
        y[at] = qci_out<T>(qci_value(sum, c, at, a), a.e);
    }
#endif
}

/* y (through a's output map) = the epilogue of the split-K sums acc [rows][M], one thread an element
 * (consecutive threads on consecutive channels). */
template <typename T>
__global__ void qci_splitk_epilogue_kernel(const qci_args a, const int32_t *__restrict__ acc, T *__restrict__ y) {
    int64_t total = (int64_t)a.rows * a.M, P = (int64_t)a.OH * a.OW;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += (int64_t)gridDim.x * blockDim.x) {
        int64_t r = i / a.M, img = r / P;
        int c = (int)(i - r * a.M);
        int64_t at = img * a.img_stride + (r - img * P) * a.p_stride + (int64_t)c * a.c_stride;
        y[at] = qci_out<T>(qci_value(acc[i], c, at, a), a.e);
    }
}

/* ---------------------------------------------------------------- tile shapes */

/* The tile shapes: <BM, BN, WM, WN, STAGES, MINB>. */
#define QCI_HUGE 128, 256, 2, 4, 4, 1
#define QCI_LARGE 128, 128, 2, 4, 4, 2
#define QCI_SMALL 64, 64, 2, 2, 4, 4
#define QCI_TINY 32, 64, 2, 2, 4, 4

/* Whether a CTA may have `bytes` of dynamic shared memory on the current device (its opt-in limit). */
static bool qci_smem_fits(size_t bytes) {
    int dev = 0, optin = 0;
    if (cudaGetDevice(&dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev) != cudaSuccess) {
        (void)cudaGetLastError();
        return false;
    }
    return bytes <= (size_t)optin;
}

/* Raises the dynamic shared-memory limit of shape S's kernel for output type T on the current device
 * (needed above 48 KB; eager, on the node's first run); a shape beyond the device's limit is left
 * alone (never launched: kiln_cuda_qconv_igemm_tile_fits). */
template <int BM, int BN, int WM, int WN, int STAGES, int MINB, typename T> static kiln_status qci_allow_smem() {
    constexpr size_t smem = qci_smem_bytes<BM, BN, STAGES>();
    if (smem > 48 * 1024 && qci_smem_fits(smem))
        KILN_CUDA_TRY(cudaFuncSetAttribute(qci_kernel<BM, BN, WM, WN, STAGES, MINB, T>,
                                           cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    return KILN_OK;
}

template <int BM, int BN, int WM, int WN, int STAGES, int MINB, typename T>
static kiln_status qci_launch(const qci_args &a, T *y, kiln_cuda_ctx *ctx) {
    dim3 grid((unsigned)((a.rows + BM - 1) / BM), (unsigned)((a.M + BN - 1) / BN), a.acc ? (unsigned)a.splits : 1u);
    if (a.acc) KILN_CUDA_TRY(cudaMemsetAsync(a.acc, 0, (size_t)a.rows * (size_t)a.M * sizeof(int32_t), ctx->stream));
    qci_kernel<BM, BN, WM, WN, STAGES, MINB, T>
        <<<grid, WM * WN * 32, qci_smem_bytes<BM, BN, STAGES>(), ctx->stream>>>(a, y);
    KILN_CUDA_LAUNCH_CHECK("qci_kernel");
    if (a.acc) {
        qci_splitk_epilogue_kernel<T><<<ku_blocks((int64_t)a.rows * a.M, KU_THREADS, ctx, 4), KU_THREADS, 0, ctx->stream>>>(
            a, a.acc, y);
        KILN_CUDA_LAUNCH_CHECK("qci_splitk_epilogue_kernel");
    }
    return KILN_OK;
}

bool kiln_cuda_qconv_igemm_tile_fits(kiln_qci_tile tile) {
    switch (tile) {
    case KILN_QCI_TILE_128X256: return qci_smem_fits(qci_smem_bytes<128, 256, 4>());
    case KILN_QCI_TILE_AUTO:
    case KILN_QCI_TILE_128X128: return qci_smem_fits(qci_smem_bytes<128, 128, 4>());
    default: return true; /* within 48 KB */
    }
}

/* The k splits of the 64 x 64 tile's split-K launch of `rows` rows, M channels and KT k steps: enough
 * to give every SM two CTAs, at most 16 and at least 4 k steps each; 1 when it would not split. */
static int qci_splits(int64_t rows, int64_t M, int64_t KT, const kiln_cuda_ctx *ctx) {
    int64_t tiles = (rows + 63) / 64 * ((M + 63) / 64), sms = ctx->sm_count > 0 ? ctx->sm_count : 1;
    int64_t s = (2 * sms + tiles - 1) / tiles;
    if (s > KT / 4) s = KT / 4;
    if (s > 16) s = 16;
    return s < 2 ? 1 : (int)s;
}

/* Whether the 128 x 128 tile runs a call of `rows` rows and M channels: more than 64 channels and
 * enough of its tiles to give every SM one. */
static bool qci_large_tiles(int64_t rows, int64_t M, const kiln_cuda_ctx *ctx) {
    int64_t tiles = (rows + 127) / 128 * ((M + 127) / 128);
    return M > 64 && tiles >= (ctx->sm_count > 0 ? ctx->sm_count : 1);
}

/* ---------------------------------------------------------------- geometry and node state */

/* The geometry of QConv n on x [N, C, (H,) W] and w [M, C, (kh,) kw] (group 1), or, channels-last
 * (cl), x [N, H, W, C] and w [M, kh, kw, C]. */
typedef struct qci_geom {
    bool cl;
    int64_t N, C, H, W, M, OH, OW, kh, kw, sy, sx, dy, dx, pt, pl;
} qci_geom;

static kiln_status qci_geom_make(const kiln_node *n, const kiln_cuda_tensor *x, const kiln_cuda_tensor *w,
                                 qci_geom *gm) {
    memset(gm, 0, sizeof *gm);
    gm->cl = kiln_attr_int(n, "channels_last", 0) != 0;
    if ((x->ndim != 3 && x->ndim != 4) || w->ndim != x->ndim || (gm->cl && x->ndim != 4))
        return kiln_error(KILN_ERR_UNSUPPORTED, "%s '%s': 1-D and 2-D windows only, channels-last 2-D (x has rank %d)",
                          n->op_type, n->name, x->ndim);
    int nsp = x->ndim - 2, h = nsp == 2 ? 0 : -1, wi = nsp - 1; /* spatial index of H (absent in 1-D) and W */
    int sp0 = gm->cl ? 1 : 2;                                   /* where the spatial dims start */
    kiln_window win;
    KILN_TRY(kiln_window_parse(n, nsp, w->dims + sp0, &win));
    int64_t out[2], pb[2], pe;
    for (int i = 0; i < nsp; i++) KILN_TRY(kiln_window_out(&win, i, x->dims[sp0 + i], &out[i], &pb[i], &pe));
    gm->N = x->dims[0];
    gm->C = x->dims[gm->cl ? 3 : 1];
    gm->M = w->dims[0];
    if (w->dims[gm->cl ? 3 : 1] != gm->C)
        return kiln_error(KILN_ERR_SHAPE, "%s '%s': %lld input channels and weights of %lld (group 1)", n->op_type,
                          n->name, (long long)gm->C, (long long)w->dims[gm->cl ? 3 : 1]);
    gm->H = h >= 0 ? x->dims[sp0] : 1;
    gm->W = x->dims[sp0 + wi];
    gm->OH = h >= 0 ? out[h] : 1;
    gm->OW = out[wi];
    gm->kh = h >= 0 ? w->dims[sp0] : 1;
    gm->kw = w->dims[sp0 + wi];
    gm->sy = h >= 0 ? win.stride[h] : 1;
    gm->sx = win.stride[wi];
    gm->dy = h >= 0 ? win.dilation[h] : 1;
    gm->dx = win.dilation[wi];
    gm->pt = h >= 0 ? pb[h] : 0;
    gm->pl = pb[wi];
    return KILN_OK;
}

static int64_t qci_round_up(int64_t v, int64_t m) { return (v + m - 1) / m * m; }

/* The channels of the kernel's channels-last X for C input channels: QCI_CP_SMALL for few, else C
 * rounded up to a multiple of QCI_CP_ALIGN. */
static int64_t qci_padded_channels(int64_t C) { return C <= QCI_CP_SMALL ? QCI_CP_SMALL : qci_round_up(C, QCI_CP_ALIGN); }

/* A QConv node's prepared parameters on the device, in one allocation. */
typedef struct qci_state {
    kiln_cuda_node_state base;
    void *dev;
    const int8_t *w;    /* [M][Kp] */
    qci_epi epi;
    int64_t Cp, Kp;
} qci_state;

static const char qci_state_owner[] = "qconv_igemm.cu";

static void qci_state_destroy(kiln_cuda_node_state *base) {
    qci_state *st = (qci_state *)base;
    if (st->dev) cudaFree(st->dev);
    free(st);
}

/* Element i of the float bias's host copy (float32, float16 or bfloat16) as float32. */
static float qci_bias_at(const kiln_cuda_tensor *b, int64_t i) {
    if (b->host_dtype == KILN_F16) return kiln_f16_to_f32(((const uint16_t *)b->host)[i]);
    if (b->host_dtype == KILN_BF16) return kiln_bf16_to_f32(((const uint16_t *)b->host)[i]);
    return ((const float *)b->host)[i];
}

/* The shifted zero point of weight channel c (uint8 weights shift by -128). */
static int64_t qci_wzp(const kiln_quant_layer *ql, kiln_dtype w_dtype, int64_t c) {
    int64_t zp = ql->nwzp == 0 ? 0 : ql->w_zero_point[ql->nwzp == 1 ? 0 : c];
    return zp - (w_dtype == KILN_U8 ? 128 : 0);
}

/* Prepares st: the weights as [M][Kp] rows in the kernel's k order (ky, kx, ci over Cp channels),
 * shifted to int8 and zero-padded, their sums over the real taps, the scales and biases; uploads them
 * and raises the kernels' shared-memory limit for output type y_dtype. */
static kiln_status qci_state_prepare(const kiln_node *n, const kiln_quant_layer *ql, const qci_geom *gm,
                                     const kiln_cuda_tensor *w, const kiln_cuda_tensor *bias, kiln_dtype x_dtype,
                                     kiln_dtype y_dtype, qci_state *st) {
    int64_t M = gm->M, taps = gm->kh * gm->kw, K = gm->C * taps;
    size_t w_bytes = (size_t)qci_round_up(M * st->Kp, 256), m_bytes = (size_t)qci_round_up(M * 4, 256);
    size_t bytes = w_bytes + 3 * m_bytes;
    unsigned char *host = (unsigned char *)calloc(1, bytes);
    if (!host) return kiln_error(KILN_ERR_OUT_OF_MEMORY, "%s '%s': out of memory preparing the weights", n->op_type, n->name);
    int8_t *wt = (int8_t *)host;
    int32_t *colsum = (int32_t *)(host + w_bytes);
    float *scale = (float *)(host + w_bytes + m_bytes), *b = (float *)(host + w_bytes + 2 * m_bytes);
    for (int64_t c = 0; c < M; c++) {
        int32_t sum = 0;
        for (int64_t k = 0; k < K; k++) { /* W's own order: k = ci * taps + tap, channels-last tap * C + ci */
            int64_t ci = gm->cl ? k % gm->C : k / taps, tap = gm->cl ? k / gm->C : k % taps, i = c * K + k;
            int32_t v = w->dtype == KILN_U8 ? (int32_t)((const uint8_t *)w->host)[i] - 128
                                            : (int32_t)((const int8_t *)w->host)[i];
            wt[c * st->Kp + tap * st->Cp + ci] = (int8_t)v;
            sum += v;
        }
        colsum[c] = sum;
        scale[c] = ql->x_scale * ql->w_scale[ql->nw == 1 ? 0 : c];
        b[c] = bias ? qci_bias_at(bias, c) : 0.0f;
    }
    cudaError_t e = cudaMalloc(&st->dev, bytes);
    if (e == cudaSuccess) e = cudaMemcpy(st->dev, host, bytes, cudaMemcpyHostToDevice);
    free(host);
    if (e != cudaSuccess) return kiln_cuda_error(e, "cudaMalloc/cudaMemcpy of the prepared weights", __FILE__, __LINE__);
    unsigned char *d = (unsigned char *)st->dev;
    st->w = (const int8_t *)d;
    qci_epi *ep = &st->epi;
    ep->colsum = (const int32_t *)(d + w_bytes);
    ep->scale = (const float *)(d + w_bytes + m_bytes);
    ep->bias = bias ? (const float *)(d + w_bytes + 2 * m_bytes) : NULL;
    ep->xzp = ql->x_zero_point - (x_dtype == KILN_U8 ? 128 : 0);
    ep->kind = (int)ql->act.kind;
    ep->p0 = ql->act.p0;
    ep->p1 = ql->act.p1;
    ep->y_scale = ql->y_scale;
    ep->y_zero_point = (float)ql->y_zero_point;
    ep->lo = ql->y_dtype == KILN_U8 ? 0 : -128;
    ep->hi = ql->y_dtype == KILN_U8 ? 255 : 127;
#define QCI_ALLOW(T)                                                                               \
    KILN_TRY((qci_allow_smem<QCI_HUGE, T>()));                                                     \
    KILN_TRY((qci_allow_smem<QCI_LARGE, T>()));                                                    \
    KILN_TRY((qci_allow_smem<QCI_SMALL, T>()));                                                    \
    KILN_TRY((qci_allow_smem<QCI_TINY, T>()))
    switch (y_dtype) {
    case KILN_I8: QCI_ALLOW(int8_t); break;
    case KILN_U8: QCI_ALLOW(uint8_t); break;
    case KILN_F32: QCI_ALLOW(float); break;
    case KILN_F16: QCI_ALLOW(__half); break;
    case KILN_BF16: QCI_ALLOW(bf16); break;
    default: return ku_refuse_dtype(n, 0, y_dtype);
    }
#undef QCI_ALLOW
    return KILN_OK;
}

/* The node's state (*ctx->state), prepared on its first run; *temp when the context keeps none. */
static kiln_status qci_state_get(const kiln_node *n, const kiln_quant_layer *ql, const qci_geom *gm,
                                 const kiln_cuda_tensor *w, const kiln_cuda_tensor *bias, kiln_dtype x_dtype,
                                 kiln_dtype y_dtype, kiln_cuda_ctx *ctx, qci_state **out, bool *temp) {
    *temp = !ctx->state;
    if (ctx->state && *ctx->state) {
        if ((*ctx->state)->owner != qci_state_owner)
            return kiln_error(KILN_ERR_INTERNAL, "%s '%s': its node state belongs to another kernel", n->op_type, n->name);
        *out = (qci_state *)*ctx->state;
        return KILN_OK;
    }
    qci_state *st = (qci_state *)calloc(1, sizeof *st);
    if (!st) return kiln_error(KILN_ERR_OUT_OF_MEMORY, "out of memory for the state of %s '%s'", n->op_type, n->name);
    st->base.owner = qci_state_owner;
    st->base.destroy = qci_state_destroy;
    st->Cp = qci_padded_channels(gm->C);
    st->Kp = qci_round_up(gm->kh * gm->kw * st->Cp, QCI_BK);
    kiln_status s = qci_state_prepare(n, ql, gm, w, bias, x_dtype, y_dtype, st);
    if (s != KILN_OK) {
        qci_state_destroy(&st->base);
        return s;
    }
    if (ctx->state) *ctx->state = &st->base;
    *out = st;
    return KILN_OK;
}

/* ---------------------------------------------------------------- entry points */

/* Whether the kernel reads channels-last X (C channels) in place: int8, no channels to pad, 16-byte
 * aligned (else a padded, shifted copy goes to the workspace). */
static bool qci_x_in_place(bool cl, const kiln_cuda_tensor *x, int64_t C) {
    return cl && x->dtype == KILN_I8 && qci_padded_channels(C) == C && ku_aligned16(x->data);
}

bool kiln_cuda_qconv_igemm_takes(const kiln_node *n, const kiln_quant_layer *ql, const kiln_cuda_tensor *x,
                                 const kiln_cuda_tensor *w, const kiln_cuda_ctx *ctx) {
    if (ctx->cc_major < 8 || !w->host || kiln_attr_int(n, "group", 1) != 1) return false;
    if ((x->dtype != KILN_I8 && x->dtype != KILN_U8) || (w->dtype != KILN_I8 && w->dtype != KILN_U8)) return false;
    bool cl = kiln_attr_int(n, "channels_last", 0) != 0;
    int ca = cl ? x->ndim - 1 : 1; /* the channel axis of X and W */
    if ((x->ndim != 3 && x->ndim != 4) || (cl && x->ndim != 4) || w->ndim != x->ndim || w->dims[ca] != x->dims[ca])
        return false;
    for (int64_t c = 0; c < w->dims[0]; c++)
        if (qci_wzp(ql, w->dtype, c) != 0) return false;
    int64_t C = x->dims[ca], taps = 1, image = qci_padded_channels(C);
    for (int i = 1; i < w->ndim; i++)
        if (i != ca) taps *= w->dims[i], image *= x->dims[i];
    bool fits = qci_x_in_place(cl, x, C) || (size_t)image <= ctx->workspace_bytes;
    return C * taps <= QCI_MAX_K && image <= INT_MAX && fits;
}

bool kiln_cuda_qconv_igemm_splitk_takes(const kiln_node *n, const kiln_quant_layer *ql, const kiln_cuda_tensor *x,
                                        const kiln_cuda_tensor *w, const kiln_cuda_ctx *ctx) {
    qci_geom gm;
    if (!kiln_cuda_qconv_igemm_takes(n, ql, x, w, ctx)) return false;
    if (qci_geom_make(n, x, w, &gm) != KILN_OK) {
        kiln_error_clear();
        return false;
    }
    int64_t Cp = qci_padded_channels(gm.C), KT = qci_round_up(gm.kh * gm.kw * Cp, QCI_BK) / QCI_BK, P = gm.OH * gm.OW;
    size_t per_image = (qci_x_in_place(gm.cl, x, gm.C) ? 0 : (size_t)(gm.H * gm.W * Cp)) + (size_t)(P * gm.M) * 4;
    return qci_splits(gm.N * P, gm.M, KT, ctx) > 1 && per_image + 256 <= ctx->workspace_bytes;
}

/* The launch of one chunk of rows with y's output type on tile shape `tile` (KILN_QCI_TILE_AUTO:
 * qci_large_tiles decides between 128 x 128 and 64 x 64). */
static kiln_status qci_run_chunk(const qci_args &a, kiln_dtype t, void *y, kiln_qci_tile tile, kiln_cuda_ctx *ctx,
                                 const kiln_node *n) {
    if (tile == KILN_QCI_TILE_AUTO) tile = qci_large_tiles(a.rows, a.M, ctx) ? KILN_QCI_TILE_128X128 : KILN_QCI_TILE_64X64;
    if (tile == KILN_QCI_TILE_64X64_SPLITK) tile = KILN_QCI_TILE_64X64; /* a.acc set: the split-K launch */
    if (tile == KILN_QCI_TILE_128X256 && !kiln_cuda_qconv_igemm_tile_fits(tile))
        return kiln_error(KILN_ERR_UNSUPPORTED, "%s '%s': the implicit-GEMM tile %d needs more shared memory than the "
                          "device gives a block", n->op_type, n->name, (int)tile);
#define QCI_RUN(T)                                                                                 \
    return tile == KILN_QCI_TILE_128X256   ? qci_launch<QCI_HUGE, T>(a, (T *)y, ctx)               \
           : tile == KILN_QCI_TILE_128X128 ? qci_launch<QCI_LARGE, T>(a, (T *)y, ctx)              \
           : tile == KILN_QCI_TILE_64X64   ? qci_launch<QCI_SMALL, T>(a, (T *)y, ctx)              \
                                           : qci_launch<QCI_TINY, T>(a, (T *)y, ctx)
    switch (t) {
    case KILN_I8: QCI_RUN(int8_t);
    case KILN_U8: QCI_RUN(uint8_t);
    case KILN_F32: QCI_RUN(float);
    case KILN_F16: QCI_RUN(__half);
    case KILN_BF16: QCI_RUN(bf16);
    default: return ku_refuse_dtype(n, 0, t);
    }
#undef QCI_RUN
}

/* Writes images [i0, i0 + imgs) of X into dst channels-last with Cp channels, as int8 (uint8 shifted
 * by -128, the padding channels zero): a transpose of NCHW X, a padded copy of channels-last X. */
static kiln_status qci_stage_x(const kiln_cuda_tensor *x, const qci_geom *gm, int64_t Cp, int64_t i0, int64_t imgs,
                               int8_t *dst, kiln_cuda_ctx *ctx) {
    int64_t HW = gm->H * gm->W, at = i0 * gm->C * HW;
    int shift = x->dtype == KILN_U8 ? 128 : 0;
    if (gm->cl) {
        unsigned blocks = ku_blocks(imgs * HW * Cp, KU_THREADS, ctx, 4);
        if (x->dtype == KILN_U8)
            qci_pad_channels_kernel<uint8_t><<<blocks, KU_THREADS, 0, ctx->stream>>>((const uint8_t *)x->data + at,
                                                                                   imgs * HW, gm->C, Cp, shift, dst);
        else
            qci_pad_channels_kernel<int8_t><<<blocks, KU_THREADS, 0, ctx->stream>>>((const int8_t *)x->data + at,
                                                                                  imgs * HW, gm->C, Cp, shift, dst);
        KILN_CUDA_LAUNCH_CHECK("qci_pad_channels_kernel");
        return KILN_OK;
    }
    dim3 grid((unsigned)((HW + 31) / 32), (unsigned)((Cp + 31) / 32), (unsigned)imgs), block(32, 8);
    if (x->dtype == KILN_U8)
        qci_to_nhwc_kernel<uint8_t><<<grid, block, 0, ctx->stream>>>((const uint8_t *)x->data + at, gm->C, HW, Cp, shift,
                                                                    dst);
    else
        qci_to_nhwc_kernel<int8_t><<<grid, block, 0, ctx->stream>>>((const int8_t *)x->data + at, gm->C, HW, Cp, shift,
                                                                   dst);
    KILN_CUDA_LAUNCH_CHECK("qci_to_nhwc_kernel");
    return KILN_OK;
}

kiln_status kiln_cuda_qconv_igemm(const kiln_node *n, const kiln_quant_layer *ql, const kiln_cuda_tensor *in, int nin,
                                  const kiln_cuda_tensor *y, kiln_qci_tile tile, kiln_cuda_ctx *ctx) {
    const kiln_cuda_tensor *x = &in[0], *w = &in[1], *bias = nin > 2 && !ku_absent(&in[2]) ? &in[2] : NULL;
    const kiln_cuda_tensor *r = nin > 3 && !ku_absent(&in[3]) ? &in[3] : NULL;
    qci_geom gm;
    KILN_TRY(qci_geom_make(n, x, w, &gm));
    bool r_8bit = r && (r->dtype == KILN_I8 || r->dtype == KILN_U8);
    if (r && ((!r_8bit && !ku_is_float(r->dtype)) || r_8bit != (ql->r_scale > 0.0f) || ku_numel(r) != ku_numel(y)))
        return kiln_error(KILN_ERR_SHAPE, "%s '%s': the residual R must have the output's %lld elements and be 8-bit with "
                          "r_scale, or float without", n->op_type, n->name, (long long)ku_numel(y));
    if (bias && (!bias->host || !ku_is_float(bias->host_dtype) || ku_numel(bias) != gm.M))
        return kiln_error(KILN_ERR_UNSUPPORTED, "%s '%s': the bias must be a float constant of %lld values", n->op_type,
                          n->name, (long long)gm.M);
    if (ql->nw != 1 && ql->nw != gm.M)
        return kiln_error(KILN_ERR_SHAPE, "%s '%s': %d weight scales for %lld channels", n->op_type, n->name, ql->nw,
                          (long long)gm.M);
    int64_t P = gm.OH * gm.OW;
    if (gm.N == 0 || P == 0 || gm.M == 0) return KILN_OK;
    qci_state *st = NULL;
    bool temp;
    KILN_TRY(qci_state_get(n, ql, &gm, w, bias, x->dtype, y->dtype, ctx, &st, &temp));

    bool in_place = qci_x_in_place(gm.cl, x, gm.C), split = tile == KILN_QCI_TILE_64X64_SPLITK;
    int64_t image = gm.H * gm.W * st->Cp; /* bytes of one channels-last image */
    /* split-K: the int32 sums [rows][M] follow the staged images in the workspace */
    size_t per_image = (in_place ? 0 : (size_t)image) + (split ? (size_t)(P * gm.M) * 4 : 0);
    int64_t chunk = in_place && !split ? gm.N
                    : split ? (ctx->workspace_bytes > 256 ? (int64_t)((ctx->workspace_bytes - 256) / per_image) : 0)
                            : (int64_t)(ctx->workspace_bytes / (size_t)image);
    if (chunk > QCI_MAX_IMAGES) chunk = QCI_MAX_IMAGES;
    if (chunk > INT_MAX / P) chunk = INT_MAX / P; /* rows are int on the device */
    kiln_status s = KILN_OK;
    if (chunk < 1 || gm.M > INT_MAX || st->Kp > INT_MAX || ((uintptr_t)ctx->workspace & 15) != 0)
        s = kiln_error(KILN_ERR_UNSUPPORTED, "%s '%s': the workspace (%zu bytes) does not hold one image of %lld bytes "
                       "channels-last, 16-byte aligned", n->op_type, n->name, ctx->workspace_bytes, (long long)image);
    qci_args a;
    memset(&a, 0, sizeof a);
    a.w = st->w;
    a.H = (int)gm.H, a.W = (int)gm.W, a.Cp = (int)st->Cp, a.OH = (int)gm.OH, a.OW = (int)gm.OW, a.kw = (int)gm.kw;
    a.sy = (int)gm.sy, a.sx = (int)gm.sx, a.dy = (int)gm.dy, a.dx = (int)gm.dx, a.pt = (int)gm.pt, a.pl = (int)gm.pl;
    a.M = (int)gm.M, a.Kp = (int)st->Kp, a.Ktaps = (int)(gm.kh * gm.kw * st->Cp);
    if (gm.cl) a.img_stride = P * gm.M, a.c_stride = 1, a.p_stride = gm.M; /* NHWC output */
    else a.img_stride = gm.M * P, a.c_stride = P, a.p_stride = 1;          /* NCHW output */
    a.pad4 = (uint32_t)(uint8_t)(int8_t)st->epi.xzp * 0x01010101u;
    a.e = st->epi;
    a.r_kind = !r                       ? QCI_R_I8
               : r->dtype == KILN_U8    ? QCI_R_U8
               : r->dtype == KILN_F32   ? QCI_R_F32
               : r->dtype == KILN_F16   ? QCI_R_F16
               : r->dtype == KILN_BF16  ? QCI_R_BF16
                                        : QCI_R_I8;
    a.r_scale = ql->r_scale;
    a.r_zero_point = ql->r_zero_point;
    size_t y_elem = kiln_dtype_size(y->dtype);
    int64_t x_image = gm.C * gm.H * gm.W; /* elements of one image of X */
    for (int64_t i0 = 0; s == KILN_OK && i0 < gm.N; i0 += chunk) {
        int64_t imgs = gm.N - i0 < chunk ? gm.N - i0 : chunk;
        if (in_place) {
            a.x = (const int8_t *)x->data + i0 * x_image;
        } else {
            a.x = (const int8_t *)ctx->workspace;
            s = qci_stage_x(x, &gm, st->Cp, i0, imgs, (int8_t *)ctx->workspace, ctx);
        }
        a.rows = (int)(imgs * P);
        a.splits = split ? qci_splits(a.rows, gm.M, st->Kp / QCI_BK, ctx) : 1;
        a.acc = a.splits > 1 ? (int32_t *)((unsigned char *)ctx->workspace +
                                           qci_round_up(in_place ? 0 : imgs * image, 256))
                             : NULL;
        a.r = r ? (const unsigned char *)r->data + (size_t)(i0 * gm.M * P) * kiln_dtype_size(r->dtype) : NULL;
        unsigned char *yb = (unsigned char *)y->data + (size_t)(i0 * gm.M * P) * y_elem;
        a.vec4 = gm.cl && gm.M % 4 == 0 && (uintptr_t)yb % (4 * y_elem) == 0;
        if (s == KILN_OK) s = qci_run_chunk(a, y->dtype, yb, tile, ctx, n);
    }
    if (temp) {
        cudaError_t e = cudaStreamSynchronize(ctx->stream);
        if (s == KILN_OK && e != cudaSuccess) s = kiln_cuda_error(e, "cudaStreamSynchronize", __FILE__, __LINE__);
        qci_state_destroy(&st->base);
    }
    return s;
}
