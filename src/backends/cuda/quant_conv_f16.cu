/* quant_conv_f16.cu — kiln.QConv's float16 path (quant_gemm.cuh: kiln_qg_conv_f16), the build's
 * alternative to its int8 one when tuning an `--int8 --fp16` engine: the same layer computed from the
 * same quantized operands (and residual), dequantized to float16, through cuDNN's convolution (conv.cu,
 * NCHW or channels-last NHWC, the residual as kiln.FusedConv's Z), to float16's rounding. */
#include "backends/cuda/quant_gemm.cuh"

#include <stdlib.h>

/* st->w16 (w_scale[c] (w - w_zero_point[c]) as [M, Cg, taps]) and st->b16 (the bias, after the
 * weights in the same allocation), once. */
static kiln_status qg_conv_prepare_f16(const kiln_node *n, const kiln_quant_layer *ql, const qg_host_weights *w,
                                       const kiln_cuda_tensor *bias, int64_t K, qg_state *st) {
    if (st->w16) return KILN_OK;
    int64_t M = w->M, w_shift = w->dtype == KILN_U8 ? 128 : 0;
    size_t wn = (size_t)(M * K), bytes = (wn + (size_t)M) * sizeof(uint16_t);
    uint16_t *host = (uint16_t *)malloc(bytes + 1);
    if (!host) return kiln_error(KILN_ERR_OUT_OF_MEMORY, "%s '%s': out of memory for its float16 weights", n->op_type, n->name);
    for (int64_t c = 0; c < M; c++) {
        int64_t zp = ql->nwzp == 0 ? 0 : ql->w_zero_point[ql->nwzp == 1 ? 0 : c];
        float scale = ql->w_scale[ql->nw == 1 ? 0 : c];
        for (int64_t k = 0; k < K; k++)
            host[c * K + k] = kiln_f32_to_f16((float)(kiln_qg_weight_at(w, K, c, k) - (zp - w_shift)) * scale);
        if (bias) {
            float b = bias->host_dtype == KILN_F16   ? kiln_f16_to_f32(((const uint16_t *)bias->host)[c])
                      : bias->host_dtype == KILN_BF16 ? kiln_bf16_to_f32(((const uint16_t *)bias->host)[c])
                                                      : ((const float *)bias->host)[c];
            host[wn + (size_t)c] = kiln_f32_to_f16(b);
        }
    }
    void *dev = NULL;
    cudaError_t e = cudaMalloc(&dev, bytes);
    if (e == cudaSuccess) e = cudaMemcpy(dev, host, bytes, cudaMemcpyHostToDevice);
    free(host);
    if (e != cudaSuccess) {
        if (dev) cudaFree(dev);
        return kiln_cuda_error(e, "cudaMalloc/cudaMemcpy of the float16 weights", __FILE__, __LINE__);
    }
    st->w16 = (__half *)dev;
    st->b16 = bias ? st->w16 + wn : NULL;
    return KILN_OK;
}

/* A float16 device tensor view of shape dims[0..ndim) at data. */
static kiln_cuda_tensor qg_f16_view(int ndim, const int64_t *dims, void *data) {
    kiln_cuda_tensor t;
    memset(&t, 0, sizeof t);
    t.dtype = KILN_F16;
    t.ndim = ndim;
    memcpy(t.dims, dims, sizeof(int64_t) * (size_t)ndim);
    t.data = data;
    return t;
}

bool kiln_qg_f16_residual_ok(const kiln_cuda_tensor *r) {
    return !r || r->dtype == KILN_I8 || r->dtype == KILN_U8 || r->dtype == KILN_F16;
}

kiln_status kiln_qg_conv_f16(const kiln_node *n, const kiln_quant_layer *ql, qg_state *st, const qg_host_weights *w,
                             const kiln_cuda_tensor *bias, const kiln_cuda_tensor *x, const kiln_cuda_tensor *wt,
                             const kiln_cuda_tensor *r, const qg_conv_geom &gm, const kiln_cuda_tensor *y,
                             kiln_cuda_ctx *ctx) {
    if (!kiln_qg_f16_residual_ok(r))
        return kiln_error(KILN_ERR_UNSUPPORTED, "%s '%s': the float16 path takes an 8-bit or float16 residual, not %s",
                          n->op_type, n->name, kiln_dtype_name(r->dtype));
    KILN_TRY(qg_conv_prepare_f16(n, ql, w, bias, gm.Cg * gm.kh * gm.kw, st));
    int64_t in_img = gm.C * gm.H * gm.W, out_img = gm.M * gm.OH * gm.OW;
    bool direct = y->dtype == KILN_F16; /* cuDNN writes y itself; else a float16 copy, then converted */
    bool r8 = r && r->dtype != KILN_F16; /* an 8-bit residual, dequantized into the workspace */
    size_t per = qg_align((size_t)in_img * 2) + (direct ? 0 : qg_align((size_t)out_img * 2)) +
                 (r8 ? qg_align((size_t)out_img * 2) : 0);
    size_t half = ctx->workspace_bytes / 2;
    int64_t chunk = per ? (int64_t)(half / per) : gm.N;
    if (gm.N > 0 && chunk < 1)
        return kiln_error(KILN_ERR_UNSUPPORTED, "%s '%s': %zu bytes of workspace do not hold one image of its float16 path",
                          n->op_type, n->name, ctx->workspace_bytes);
    qg_epi convert = st->epi; /* the output conversion alone: cuDNN applied the bias and activation */
    convert.bias = NULL;
    convert.kind = KILN_ACT_NONE;
    size_t es = kiln_dtype_size(y->dtype);
    for (int64_t i0 = 0; i0 < gm.N; i0 += chunk) {
        int64_t imgs = gm.N - i0 < chunk ? gm.N - i0 : chunk;
        unsigned char *ws = (unsigned char *)ctx->workspace;
        __half *x16 = (__half *)ws;
        size_t used = qg_align((size_t)(imgs * in_img) * 2);
        unsigned char *yb = (unsigned char *)y->data + (size_t)(i0 * out_img) * es;
        __half *y16 = direct ? (__half *)yb : (__half *)(ws + used);
        if (!direct) used += qg_align((size_t)(imgs * out_img) * 2);
        const unsigned char *xb = (const unsigned char *)x->data + (size_t)(i0 * in_img);
        KILN_TRY(kiln_qg_dequant_f16(xb, x->dtype, imgs * in_img, ql->x_zero_point, ql->x_scale, x16, ctx));
        __half *r16 = NULL;
        if (r8) {
            r16 = (__half *)(ws + used);
            used += qg_align((size_t)(imgs * out_img) * 2);
            KILN_TRY(kiln_qg_dequant_f16((const unsigned char *)r->data + (size_t)(i0 * out_img), r->dtype, imgs * out_img,
                                         ql->r_zero_point, ql->r_scale, r16, ctx));
        } else if (r) {
            r16 = (__half *)r->data + i0 * out_img;
        }
        int64_t xd[KILN_MAX_DIMS], yd[KILN_MAX_DIMS];
        memcpy(xd, x->dims, sizeof(int64_t) * (size_t)x->ndim);
        memcpy(yd, y->dims, sizeof(int64_t) * (size_t)y->ndim);
        xd[0] = yd[0] = imgs;
        kiln_cuda_tensor args[4] = {qg_f16_view(x->ndim, xd, x16), qg_f16_view(wt->ndim, wt->dims, st->w16),
                                    qg_f16_view(1, &gm.M, st->b16), qg_f16_view(y->ndim, yd, r16)};
        if (!st->b16) args[2].ndim = -1;
        kiln_cuda_tensor out = qg_f16_view(y->ndim, yd, y16);
        kiln_cuda_ctx sub = *ctx; /* cuDNN's workspace after the buffers; its own state; no tactic */
        sub.workspace = ws + used;
        sub.workspace_bytes = ctx->workspace_bytes - used;
        sub.tactic = NULL;
        sub.tactic_strict = false;
        sub.candidates = NULL;
        sub.state = &st->conv16;
        KILN_TRY(kiln_cuda_fused_conv(n, args, r ? 4 : 3, &out, &sub));
        if (!direct) KILN_TRY(kiln_qg_epilogue_f16(n, y16, imgs * out_img, 1, convert, y->dtype, yb, ctx));
    }
    return KILN_OK;
}
