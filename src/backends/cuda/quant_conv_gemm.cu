/* quant_conv_gemm.cu — kiln.QConv's channels-last layers (ir/quant_ops.h) as cuBLASLt IMMA GEMMs: a
 * convolution is the product Y [N*OH*OW, M] = A [N*OH*OW, kh*kw*C] times W^T [kh*kw*C, M], where A is
 * X itself for a 1x1 window without padding at stride 1 (ResNet's bottleneck 1x1 layers) and
 * otherwise its im2col rows, written into the workspace a chunk of images at a time (a strided 1x1,
 * ResNet's downsampling shortcut, gathers its pixels; a 3x3 copies nine taps). The requantization
 * runs inside the GEMM as quant_gemm.cu's fused QMatMul call does (alpha the per-channel vector
 * x_scale w_scale[c] / y_scale, the bias / y_scale and Relu in cuBLASLt's epilogue, cuBLASLt's
 * rounding and saturation to int8), with ResNet's int8 residual R folded in as beta C (C = R, beta =
 * r_scale / y_scale on the host; cuBLASLt applies the bias and Relu after the sum). Outputs may differ
 * from the CPU oracle by one unit in an element (each term is scaled by one product, the division
 * folded in). */
#include "backends/cuda/quant_conv_gemm.h"
#include "backends/cuda/quant_gemm.cuh"

extern "C" {
#include "ir/nn_window.h"
}

/* The window of a channels-last QConv: x [N, H, W, C], w [M, kh, kw, C]. */
typedef struct qcg_geom {
    int64_t N, H, W, C, M, kh, kw, OH, OW, sy, sx, dy, dx, pt, pl;
    bool in_place; /* a 1x1 window without padding at stride 1: A is X itself */
} qcg_geom;

/* dst[r][(ky * kw + kx) * C + c] = x[img][oy * sy - pt + ky * dy][ox * sx - pl + kx * dx][c], or 0 outside
 * the image, for the R = images * OH * OW output pixels r = (img, oy, ox) of channels-last int8 X
 * moved in words of type V (C a multiple of sizeof(V)); Cw = C / sizeof(V). */
template <typename V>
__global__ void qcg_im2col_kernel(const V *__restrict__ x, int64_t R, qcg_geom g, int64_t Cw, V *__restrict__ dst) {
    int64_t row = g.kh * g.kw * Cw, total = R * row, P = g.OH * g.OW;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += (int64_t)gridDim.x * blockDim.x) {
        int64_t r = i / row, k = i - r * row, tap = k / Cw, c = k - tap * Cw, ky = tap / g.kw, kx = tap - ky * g.kw;
        int64_t img = r / P, p = r - img * P, oy = p / g.OW, ox = p - oy * g.OW;
        int64_t iy = oy * g.sy - g.pt + ky * g.dy, ix = ox * g.sx - g.pl + kx * g.dx;
        V v = {};
        if (iy >= 0 && iy < g.H && ix >= 0 && ix < g.W) v = x[((img * g.H + iy) * g.W + ix) * Cw + c];
        dst[i] = v;
    }
}

/* The geometry of n on x and w (channels-last, 2-D); false when the attributes do not describe one
 * (the error cleared: takes raises none). */
static bool qcg_geom_make(const kiln_node *n, const kiln_cuda_tensor *x, const kiln_cuda_tensor *w, qcg_geom *g) {
    kiln_window win;
    int64_t out[2], pb[2], pe[2];
    if (x->ndim != 4 || w->ndim != 4 || kiln_window_parse(n, 2, w->dims + 1, &win) != KILN_OK) {
        kiln_error_clear();
        return false;
    }
    for (int i = 0; i < 2; i++)
        if (kiln_window_out(&win, i, x->dims[1 + i], &out[i], &pb[i], &pe[i]) != KILN_OK) {
            kiln_error_clear();
            return false;
        }
    *g = qcg_geom{x->dims[0], x->dims[1], x->dims[2], x->dims[3], w->dims[0], w->dims[1], w->dims[2], out[0], out[1],
                    win.stride[0], win.stride[1], win.dilation[0], win.dilation[1], pb[0], pb[1], false};
    g->in_place = g->kh == 1 && g->kw == 1 && g->sy == 1 && g->sx == 1 && pb[0] == 0 && pb[1] == 0 && pe[0] == 0 &&
                  pe[1] == 0;
    return true;
}

/* Bytes of one image's im2col rows (0 when A is X itself). */
static size_t qcg_image_bytes(const qcg_geom *g) {
    return g->in_place ? 0 : (size_t)(g->OH * g->OW) * (size_t)(g->kh * g->kw * g->C);
}

bool kiln_qg_conv_gemm_takes(const kiln_node *n, const kiln_quant_layer *ql, const kiln_cuda_tensor *x,
                             const kiln_cuda_tensor *w, const kiln_cuda_tensor *r, const kiln_cuda_tensor *y,
                             const kiln_cuda_ctx *ctx) {
    qcg_geom g;
    if (!kiln_attr_int(n, "channels_last", 0) || kiln_attr_int(n, "group", 1) != 1 || y->ndim != 4 || !w->host ||
        !qcg_geom_make(n, x, w, &g))
        return false;
    if (w->dims[3] != g.C || g.C % 4 || g.M % 4 || y->dims[3] != g.M || g.kh * g.kw * g.C > QG_MAX_K) return false;
    if (x->dtype != KILN_I8 || ql->x_zero_point != 0 || (w->dtype != KILN_I8 && w->dtype != KILN_U8) ||
        ((uintptr_t)x->data & 15))
        return false;
    for (int64_t c = 0; c < g.M; c++) {
        int64_t zp = ql->nwzp == 0 ? 0 : ql->w_zero_point[ql->nwzp == 1 ? 0 : c];
        if (zp != (w->dtype == KILN_U8 ? 128 : 0)) return false;
    }
    /* int8 out only: cuBLASLt's IMMA kernels take no float D in places (docs/quantization.md) */
    bool int8_out = y->dtype == KILN_I8 && ql->y_dtype == KILN_I8 && ql->y_zero_point == 0 &&
                    (ql->act.kind == KILN_ACT_NONE || ql->act.kind == KILN_ACT_RELU);
    bool r_ok = !r || (r->dtype == KILN_I8 && ql->r_zero_point == 0 && ql->r_scale > 0.0f && ku_numel(r) == ku_numel(y));
    size_t need = qg_align(qcg_image_bytes(&g)) + kiln_qg_lt_bytes(ctx);
    return int8_out && r_ok && (g.in_place || need <= ctx->workspace_bytes);
}

/* Writes the im2col rows of images [i0, i0 + imgs) of X (channels-last int8) into dst. */
static kiln_status qcg_im2col(const int8_t *x, const qcg_geom &g, int64_t i0, int64_t imgs, int8_t *dst,
                              kiln_cuda_ctx *ctx) {
    int64_t R = imgs * g.OH * g.OW, taps = g.kh * g.kw;
    const int8_t *xi = x + i0 * g.H * g.W * g.C;
    if (g.C % 16 == 0 && ((uintptr_t)dst & 15) == 0) {
        qcg_im2col_kernel<uint4><<<ku_blocks(R * taps * g.C / 16, KU_THREADS, ctx, 4), KU_THREADS, 0, ctx->stream>>>(
            (const uint4 *)xi, R, g, g.C / 16, (uint4 *)dst);
    } else {
        qcg_im2col_kernel<uint32_t><<<ku_blocks(R * taps * g.C / 4, KU_THREADS, ctx, 4), KU_THREADS, 0, ctx->stream>>>(
            (const uint32_t *)xi, R, g, g.C / 4, (uint32_t *)dst);
    }
    KILN_CUDA_LAUNCH_CHECK("qcg_im2col_kernel");
    return KILN_OK;
}

kiln_status kiln_qg_conv_gemm(const kiln_node *n, const kiln_quant_layer *ql, const kiln_cuda_tensor *in, int nin,
                              const kiln_cuda_tensor *y, kiln_cuda_ctx *ctx) {
    const kiln_cuda_tensor *x = &in[0], *w = &in[1], *r = kiln_qg_input(in, nin, 3);
    qcg_geom g;
    if (!kiln_qg_conv_gemm_takes(n, ql, x, w, r, y, ctx) || !qcg_geom_make(n, x, w, &g))
        return kiln_error(KILN_ERR_UNSUPPORTED, "%s '%s': not a channels-last layer the fused int8 GEMM runs", n->op_type,
                          n->name);
    if (ql->nw != 1 && ql->nw != g.M)
        return kiln_error(KILN_ERR_SHAPE, "%s '%s': %d weight scales for %lld channels", n->op_type, n->name, ql->nw,
                          (long long)g.M);
    int64_t P = g.OH * g.OW, K = g.kh * g.kw * g.C;
    if (g.N == 0 || P == 0 || g.M == 0) return KILN_OK;
    const kiln_cuda_tensor *bias;
    KILN_TRY(kiln_qg_host_bias(n, kiln_qg_input(in, nin, 2), g.M, &bias));
    qg_host_weights hw = {w->host, w->dtype, false, g.M}; /* [M][kh][kw][C]: k = tap * C + c, A's order */
    qg_state *st;
    bool temp;
    KILN_TRY(kiln_qg_state_get(n, ql, &hw, bias, x->dtype, K, g.M, 1, ctx, &st, &temp));
    if (!kiln_qg_fused_ok(st, ql, y->dtype))
        return kiln_qg_finish(st, temp, kiln_error(KILN_ERR_UNSUPPORTED, "%s '%s': cuBLASLt cannot requantize this "
                                                   "layer inside its int8 GEMM", n->op_type, n->name), ctx);
    size_t lt_bytes = kiln_qg_lt_bytes(ctx), image = qcg_image_bytes(&g);
    int64_t chunk = g.in_place ? g.N : (int64_t)((ctx->workspace_bytes - lt_bytes - QG_ALIGN) / image);
    if (chunk > g.N) chunk = g.N;
    if (chunk < 1) chunk = 1; /* takes checked that one image's rows fit, aligned, besides cuBLASLt's share */
    float beta = r ? ql->r_scale / ql->y_scale : 0.0f;
    size_t es = kiln_dtype_size(y->dtype);
    kiln_status s = KILN_OK;
    for (int64_t i0 = 0; s == KILN_OK && i0 < g.N; i0 += chunk) {
        int64_t imgs = g.N - i0 < chunk ? g.N - i0 : chunk, R = imgs * P;
        unsigned char *ws = (unsigned char *)ctx->workspace;
        const int8_t *a = (const int8_t *)x->data + i0 * g.H * g.W * g.C;
        size_t used = 0;
        if (!g.in_place) {
            s = qcg_im2col((const int8_t *)x->data, g, i0, imgs, (int8_t *)ws, ctx);
            a = (const int8_t *)ws;
            used = qg_align((size_t)R * (size_t)K);
        }
        size_t lt_use = ctx->workspace_bytes - used < lt_bytes ? ctx->workspace_bytes - used : lt_bytes;
        unsigned char *yb = (unsigned char *)y->data + (size_t)(i0 * P * g.M) * es;
        const unsigned char *rb = r ? (const unsigned char *)r->data + (size_t)(i0 * P * g.M) : NULL;
        bool done = false;
        if (s == KILN_OK) s = kiln_qg_gemm_fused_c(n, st, a, R, K, y->dtype, yb, g.M, rb, beta, ws + used, lt_use, ctx, &done);
        if (s == KILN_OK && !done)
            s = kiln_error(KILN_ERR_UNSUPPORTED, "%s '%s': cuBLASLt offers no int8 GEMM with this requantization%s",
                           n->op_type, n->name, r ? " and an int8 residual (beta on the host)" : "");
    }
    return kiln_qg_finish(st, temp, s, ctx);
}
