/* quant_conv_gemm.cu — kiln.QConv's 1x1 layers (ir/quant_ops.h) as cuBLASLt IMMA GEMMs: a
 * channels-last 1x1 convolution without padding is the product Y [N*OH*OW, M] = X [N*OH*OW, C] times
 * W^T [C, M] (X read in place at stride 1; a strided one, ResNet's downsampling shortcut, gathers its
 * pixels first), requantized inside the GEMM as quant_gemm.cu's fused QMatMul call does (alpha the
 * per-channel vector x_scale w_scale[c] / y_scale, the bias / y_scale and Relu in cuBLASLt's
 * epilogue, cuBLASLt's rounding and saturation to int8), with ResNet's int8 residual R folded in as
 * beta C (C = R, beta = r_scale / y_scale on the host). Outputs may differ from the CPU oracle by one
 * unit in an element (the scaling is applied as one product per term, the division folded in). */
#include "backends/cuda/quant_conv_gemm.h"
#include "backends/cuda/quant_gemm.cuh"

extern "C" {
#include "ir/nn_window.h"
}

/* dst[r][c] = x[img][oy * sy][ox * sx][c] for the R = images * OH * OW output pixels r = (img, oy, ox)
 * of channels-last int8 X (C a multiple of 4: 4-byte words). */
__global__ void qg_gather_strided_kernel(const uint32_t *__restrict__ x, int64_t R, int64_t H, int64_t W, int64_t Cw,
                                         int64_t OH, int64_t OW, int64_t sy, int64_t sx, uint32_t *__restrict__ dst) {
    int64_t total = R * Cw, P = OH * OW;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += (int64_t)gridDim.x * blockDim.x) {
        int64_t r = i / Cw, c = i - r * Cw, img = r / P, p = r - img * P, oy = p / OW, ox = p - oy * OW;
        dst[i] = x[((img * H + oy * sy) * W + ox * sx) * Cw + c];
    }
}

/* The 1x1 window of n on x [N, H, W, C]: its strides and output size; false when it pads, is not 1x1
 * or the attributes do not parse (the error cleared: takes raises none). */
static bool qg_conv1x1_window(const kiln_node *n, const kiln_cuda_tensor *x, const kiln_cuda_tensor *w, int64_t *sy,
                              int64_t *sx, int64_t *OH, int64_t *OW) {
    kiln_window win;
    int64_t out[2], pb, pe;
    if (w->dims[1] != 1 || w->dims[2] != 1 || kiln_window_parse(n, 2, w->dims + 1, &win) != KILN_OK) {
        kiln_error_clear();
        return false;
    }
    for (int i = 0; i < 2; i++) {
        if (kiln_window_out(&win, i, x->dims[1 + i], &out[i], &pb, &pe) != KILN_OK) {
            kiln_error_clear();
            return false;
        }
        if (pb != 0 || pe != 0) return false;
    }
    *sy = win.stride[0], *sx = win.stride[1], *OH = out[0], *OW = out[1];
    return true;
}

bool kiln_qg_conv1x1_takes(const kiln_node *n, const kiln_quant_layer *ql, const kiln_cuda_tensor *x,
                           const kiln_cuda_tensor *w, const kiln_cuda_tensor *r, const kiln_cuda_tensor *y) {
    if (!kiln_attr_int(n, "channels_last", 0) || kiln_attr_int(n, "group", 1) != 1 || x->ndim != 4 || w->ndim != 4 ||
        y->ndim != 4 || !w->host)
        return false;
    int64_t C = x->dims[3], M = w->dims[0], sy, sx, OH, OW;
    if (w->dims[3] != C || C % 4 || M % 4 || y->dims[3] != M || !qg_conv1x1_window(n, x, w, &sy, &sx, &OH, &OW))
        return false;
    if (x->dtype != KILN_I8 || ql->x_zero_point != 0 || (w->dtype != KILN_I8 && w->dtype != KILN_U8) ||
        ((uintptr_t)x->data & 3))
        return false;
    for (int64_t c = 0; c < M; c++) {
        int64_t zp = ql->nwzp == 0 ? 0 : ql->w_zero_point[ql->nwzp == 1 ? 0 : c];
        if (zp != (w->dtype == KILN_U8 ? 128 : 0)) return false;
    }
    bool relu_or_none = ql->act.kind == KILN_ACT_NONE || ql->act.kind == KILN_ACT_RELU;
    bool int8_out = y->dtype == KILN_I8 && ql->y_dtype == KILN_I8 && ql->y_zero_point == 0 && relu_or_none;
    bool float_out = ql->y_dtype == KILN_F32 && (y->dtype == KILN_F32 || y->dtype == KILN_F16 || y->dtype == KILN_BF16) &&
                     (relu_or_none || ql->act.kind == KILN_ACT_GELU_TANH);
    bool r_ok = !r || (int8_out && r->dtype == KILN_I8 && ql->r_zero_point == 0 && ql->r_scale > 0.0f &&
                       ku_numel(r) == ku_numel(y));
    return (int8_out || float_out) && r_ok;
}

kiln_status kiln_qg_conv1x1(const kiln_node *n, const kiln_quant_layer *ql, const kiln_cuda_tensor *in, int nin,
                            const kiln_cuda_tensor *y, kiln_cuda_ctx *ctx) {
    const kiln_cuda_tensor *x = &in[0], *w = &in[1], *r = kiln_qg_input(in, nin, 3);
    int64_t N = x->dims[0], H = x->dims[1], W = x->dims[2], C = x->dims[3], M = w->dims[0], sy, sx, OH, OW;
    if (!kiln_qg_conv1x1_takes(n, ql, x, w, r, y) || !qg_conv1x1_window(n, x, w, &sy, &sx, &OH, &OW))
        return kiln_error(KILN_ERR_UNSUPPORTED, "%s '%s': not a channels-last 1x1 layer the fused int8 GEMM runs",
                          n->op_type, n->name);
    if (ql->nw != 1 && ql->nw != M)
        return kiln_error(KILN_ERR_SHAPE, "%s '%s': %d weight scales for %lld channels", n->op_type, n->name, ql->nw,
                          (long long)M);
    int64_t P = OH * OW;
    if (N == 0 || P == 0 || M == 0) return KILN_OK;
    const kiln_cuda_tensor *bias;
    KILN_TRY(kiln_qg_host_bias(n, kiln_qg_input(in, nin, 2), M, &bias));
    qg_host_weights hw = {w->host, w->dtype, false, M};
    qg_state *st;
    bool temp;
    KILN_TRY(kiln_qg_state_get(n, ql, &hw, bias, x->dtype, C, M, 1, ctx, &st, &temp));
    if (!kiln_qg_fused_ok(st, ql, y->dtype))
        return kiln_qg_finish(st, temp, kiln_error(KILN_ERR_UNSUPPORTED, "%s '%s': cuBLASLt cannot requantize this "
                                                   "layer inside its int8 GEMM", n->op_type, n->name), ctx);
    bool gather = sy != 1 || sx != 1;
    size_t lt_bytes = kiln_qg_lt_bytes(ctx), image = (size_t)(P * C);
    size_t rows_room = ctx->workspace_bytes > lt_bytes + QG_ALIGN ? ctx->workspace_bytes - lt_bytes - QG_ALIGN : 0;
    int64_t chunk = gather ? (int64_t)(rows_room / image) : N;
    kiln_status s = KILN_OK;
    if (chunk < 1)
        s = kiln_error(KILN_ERR_UNSUPPORTED, "%s '%s': %zu bytes of workspace do not hold one image's %zu gathered bytes",
                       n->op_type, n->name, ctx->workspace_bytes, image);
    float beta = r ? ql->r_scale / ql->y_scale : 0.0f;
    size_t es = kiln_dtype_size(y->dtype);
    for (int64_t i0 = 0; s == KILN_OK && i0 < N; i0 += chunk) {
        int64_t imgs = N - i0 < chunk ? N - i0 : chunk, R = imgs * P;
        unsigned char *ws = (unsigned char *)ctx->workspace;
        const int8_t *xr = (const int8_t *)x->data + i0 * H * W * C;
        size_t used = 0;
        if (gather) {
            unsigned blocks = ku_blocks(R * C / 4, KU_THREADS, ctx, 4);
            qg_gather_strided_kernel<<<blocks, KU_THREADS, 0, ctx->stream>>>((const uint32_t *)xr, R, H, W, C / 4, OH, OW,
                                                                            sy, sx, (uint32_t *)ws);
            cudaError_t e = cudaGetLastError();
            if (e != cudaSuccess) {
                s = kiln_cuda_error(e, "qg_gather_strided_kernel", __FILE__, __LINE__);
                break;
            }
            xr = (const int8_t *)ws;
            used = qg_align((size_t)R * (size_t)C);
        }
        size_t lt_use = ctx->workspace_bytes - used < lt_bytes ? ctx->workspace_bytes - used : lt_bytes;
        unsigned char *yb = (unsigned char *)y->data + (size_t)(i0 * P * M) * es;
        const unsigned char *rb = r ? (const unsigned char *)r->data + (size_t)(i0 * P * M) : NULL;
        bool done = false;
        s = kiln_qg_gemm_fused_c(n, st, xr, R, C, y->dtype, yb, M, rb, beta, ws + used, lt_use, ctx, &done);
        if (s == KILN_OK && !done)
            s = kiln_error(KILN_ERR_UNSUPPORTED, "%s '%s': cuBLASLt offers no int8 GEMM with this requantization%s",
                           n->op_type, n->name, r ? " and an int8 residual (beta on the host)" : "");
    }
    return kiln_qg_finish(st, temp, s, ctx);
}
