/* quant_conv_im2col.cu — kiln.QConv (ir/quant_ops.h) on the GPU: 1-D and 2-D windows (any pads, strides,
 * dilations, auto_pad, groups: one GEMM per group), NCHW in and out, as an im2col of int8 rows
 * feeding quant_gemm.cu's exact IMMA GEMM and kiln's requantizing epilogue (quant_kernels.cu); a
 * recorded tactic of kind KILN_TACTIC_PATH names the layer's path (qconv_path: the float16 path of
 * quant_conv_f16.cu, a tile shape of the implicit-GEMM kernel, the fused cuBLASLt GEMM of
 * quant_conv_gemm.cu), all of which the build times against each other where they apply. Layers
 * the implicit-GEMM kernel takes (qconv_igemm.cu: group 1, no weight zero point, sm_80+) run on it
 * unless the float16 path won; layers with a residual input or channels-last tensors run there or on
 * the float16 path (cuDNN's NHWC convolution for channels-last ones, the residual its Z; a float32 or
 * bfloat16 residual only on the implicit-GEMM kernel, so such a layer lists no float16 candidate to
 * the build's tuning). The
 * im2col rows hold x - 128 for uint8 input and the (shifted) input zero point in the padding, so
 * padding contributes nothing after the correction. */
#include "backends/cuda/qconv_igemm.h"
#include "backends/cuda/quant_conv_gemm.h"
#include "backends/cuda/quant_gemm.cuh"

#include <stdlib.h>

extern "C" {
#include "core/log.h"
#include "ir/nn_window.h"
}

/* kiln.QConv's paths: the algo of its KILN_TACTIC_PATH tactics. */
typedef enum {
    QCONV_INT8,          /* the default: the implicit-GEMM kernel (tile by its rule) where it applies, else im2col */
    QCONV_F16,           /* the float16 path (cuDNN) */
    QCONV_IGEMM_128X128, /* the implicit-GEMM kernel on one tile shape ... */
    QCONV_IGEMM_64X64,
    QCONV_IGEMM_128X256,
    QCONV_IGEMM_32X64,
    QCONV_GEMM,          /* cuBLASLt's fused int8 GEMM on X (1x1) or its im2col rows (quant_conv_gemm.cu) */
    QCONV_IGEMM_SPLITK,  /* the implicit-GEMM kernel on 64 x 64 tiles with split-K (small maps, deep K) */
    QCONV_PATHS
} qconv_path_id;

/* The implicit-GEMM tile shape of path p (AUTO for the paths that name none). */
static kiln_qci_tile qconv_tile(int p) {
    switch (p) {
    case QCONV_IGEMM_128X128: return KILN_QCI_TILE_128X128;
    case QCONV_IGEMM_64X64: return KILN_QCI_TILE_64X64;
    case QCONV_IGEMM_128X256: return KILN_QCI_TILE_128X256;
    case QCONV_IGEMM_32X64: return KILN_QCI_TILE_32X64;
    case QCONV_IGEMM_SPLITK: return KILN_QCI_TILE_64X64_SPLITK;
    default: return KILN_QCI_TILE_AUTO;
    }
}

/* The path ctx's tactic names (a tactic of another kind is rejected: the default runs, or, while
 * tuning, the call fails). Without a tactic, KILN_CUDA_QCONV_PATH (a path number, for tests that
 * force each path in turn) or the default. */
static kiln_status qconv_path(const kiln_node *n, kiln_cuda_ctx *ctx, int *path) {
    *path = QCONV_INT8;
    if (!ctx->tactic) {
        const char *forced = getenv("KILN_CUDA_QCONV_PATH");
        char *end = NULL;
        long p = forced && *forced ? strtol(forced, &end, 10) : -1;
        if (end && !*end && p >= 0 && p < QCONV_PATHS) *path = (int)p;
        return KILN_OK;
    }
    if (ctx->tactic->kind == KILN_TACTIC_PATH && ctx->tactic->algo >= 0 && ctx->tactic->algo < QCONV_PATHS) {
        *path = ctx->tactic->algo;
        return KILN_OK;
    }
    return kiln_cuda_tactic_rejected(n, ctx, "not a kiln.QConv path");
}

/* Lists QConv n's paths for the tuner (ctx->candidates): the default first, the float16 path when it
 * takes residual r, each tile shape of the implicit-GEMM kernel the layer and device take, the fused
 * cuBLASLt GEMM where it applies and the split-K launch where it splits; nothing when there is no
 * choice. */
static kiln_status qconv_list_paths(const kiln_node *n, const kiln_cuda_tensor *in, int nin, const kiln_cuda_tensor *y,
                                    kiln_cuda_ctx *ctx) {
    kiln_cuda_candidates *cd = ctx->candidates;
    if (cd->done) return KILN_OK;
    cd->done = true;
    cd->count = 0;
    kiln_quant_layer ql;
    KILN_TRY(kiln_quant_layer_read(n, &ql));
    const kiln_cuda_tensor *x = &in[0], *w = &in[1], *r = kiln_qg_input(in, nin, 3);
    bool igemm = qg_is_8bit(x->dtype) && qg_is_8bit(w->dtype) && kiln_cuda_qconv_igemm_takes(n, &ql, x, w, ctx);
    int paths[QCONV_PATHS], np = 0;
    paths[np++] = QCONV_INT8;
    if (kiln_qg_f16_residual_ok(r)) paths[np++] = QCONV_F16;
    else
        KILN_LOG(KILN_LOG_VERBOSE, "cuda: %s '%s': no float16 path to time against int8 (a %s residual input runs only "
                 "on the int8 kernels)", n->op_type, n->name, kiln_dtype_name(r->dtype));
    for (int p = QCONV_IGEMM_128X128; igemm && p <= QCONV_IGEMM_32X64; p++)
        if (kiln_cuda_qconv_igemm_tile_fits(qconv_tile(p))) paths[np++] = p;
    if (kiln_qg_conv_gemm_takes(n, &ql, x, w, r, y, ctx)) paths[np++] = QCONV_GEMM;
    if (igemm && kiln_cuda_qconv_igemm_splitk_takes(n, &ql, x, w, ctx)) paths[np++] = QCONV_IGEMM_SPLITK;
    if (np < 2) {
        KILN_LOG(KILN_LOG_VERBOSE, "cuda: %s '%s': one path only, nothing to time", n->op_type, n->name);
        return KILN_OK;
    }
    for (int i = 0; i < np && cd->count < cd->max; i++) {
        kiln_tactic *t = &cd->list[cd->count++];
        memset(t, 0, sizeof *t);
        t->kind = KILN_TACTIC_PATH;
        t->algo = paths[i];
        t->heuristic_index = i;
    }
    return KILN_OK;
}

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

/* The geometry of channels-last QConv n (x [N, H, W, C], w [M, kh, kw, C/group], y [N, OH, OW, M]) as
 * far as the float16 path reads it: the counts of images, channels, taps and pixels. */
static kiln_status qg_conv_geom_cl(const kiln_node *n, const kiln_cuda_tensor *x, const kiln_cuda_tensor *w,
                                   const kiln_cuda_tensor *y, qg_conv_geom *gm) {
    memset(gm, 0, sizeof *gm);
    if (x->ndim != 4 || w->ndim != 4 || y->ndim != 4)
        return kiln_error(KILN_ERR_UNSUPPORTED, "%s '%s': channels_last needs X [N,H,W,C], W [M,kH,kW,C/group] and Y "
                          "[N,H',W',M] (ranks %d, %d, %d)", n->op_type, n->name, x->ndim, w->ndim, y->ndim);
    gm->N = x->dims[0], gm->H = x->dims[1], gm->W = x->dims[2], gm->C = x->dims[3];
    gm->M = w->dims[0], gm->kh = w->dims[1], gm->kw = w->dims[2], gm->Cg = w->dims[3];
    gm->OH = y->dims[1], gm->OW = y->dims[2];
    gm->group = kiln_attr_int(n, "group", 1);
    if (gm->group < 1 || gm->M % gm->group || gm->Cg * gm->group != gm->C || y->dims[3] != gm->M)
        return kiln_error(KILN_ERR_SHAPE, "%s '%s': %lld input channels, weights [%lld, ..., %lld], group %lld and %lld "
                          "output channels do not agree", n->op_type, n->name, (long long)gm->C, (long long)gm->M,
                          (long long)gm->Cg, (long long)gm->group, (long long)y->dims[3]);
    gm->Mg = gm->M / gm->group;
    return KILN_OK;
}

/* kiln.QConv's exec function (the kernel table is quant_matmul.cu's). */
kiln_status kiln_qg_exec_qconv(const kiln_node *n, const kiln_cuda_tensor *in, int nin, const kiln_cuda_tensor *out,
                               int nout, kiln_cuda_ctx *ctx) {
    (void)nout;
    const kiln_cuda_tensor *r = kiln_qg_input(in, nin, 3);
    bool cl = kiln_attr_int(n, "channels_last", 0) != 0;
    if (ctx->candidates) return qconv_list_paths(n, in, nin, &out[0], ctx);
    int path;
    KILN_TRY(qconv_path(n, ctx, &path));
    bool f16 = path == QCONV_F16;
    const kiln_cuda_tensor *x = &in[0], *w = &in[1], *y = &out[0];
    kiln_quant_layer ql;
    KILN_TRY(kiln_quant_layer_read(n, &ql));
    if (!qg_is_8bit(x->dtype) || !qg_is_8bit(w->dtype) || !w->host || !kiln_qg_out_ok(&ql, y->dtype))
        return kiln_error(KILN_ERR_UNSUPPORTED, "%s '%s': needs 8-bit X, constant 8-bit W and a %s output", n->op_type,
                          n->name, kiln_dtype_name(ql.y_dtype));
    /* the fused cuBLASLt GEMM runs where its path was chosen and it takes the layer; else the
     * implicit-GEMM kernel takes what it can unless the float16 path was chosen (and takes the
     * residual); layers with a residual or channels-last tensors run on those or on the float16 path
     * (cuDNN's convolution, NHWC or NCHW, the residual its Z), not on the im2col one */
    if (path == QCONV_GEMM && kiln_qg_state_free_or_mine(ctx) && kiln_qg_conv_gemm_takes(n, &ql, x, w, r, y, ctx)) {
        kiln_status s = kiln_qg_conv_gemm(n, &ql, in, nin, y, ctx);
        if (s != KILN_ERR_UNSUPPORTED || ctx->tactic) return s;
        /* forced by KILN_CUDA_QCONV_PATH: cuBLASLt refused this layer before writing anything, so the
         * default runs (with a state of its own), as for any other path the layer does not take; a
         * node whose state another kernel holds is not offered this path again */
        kiln_error_clear();
        if (ctx->state && *ctx->state) {
            (*ctx->state)->destroy(*ctx->state);
            *ctx->state = NULL;
        }
        path = QCONV_INT8;
    }
    bool f16_ok = f16 && kiln_qg_f16_residual_ok(r);
    if (kiln_cuda_qconv_igemm_takes(n, &ql, x, w, ctx) && !f16_ok) {
        kiln_qci_tile tile = qconv_tile(path);
        if (tile == KILN_QCI_TILE_64X64_SPLITK && !kiln_cuda_qconv_igemm_splitk_takes(n, &ql, x, w, ctx))
            tile = KILN_QCI_TILE_AUTO;
        return kiln_cuda_qconv_igemm(n, &ql, in, nin, y, tile, ctx);
    }
    if ((r || cl) && !f16_ok)
        return kiln_error(KILN_ERR_UNSUPPORTED, "%s '%s': a residual input or channels-last tensors need the "
                          "implicit-GEMM kernel (group 1, symmetric weights, sm_80+, a workspace of one image) or the "
                          "float16 path (an 8-bit or float16 residual)", n->op_type, n->name);
    qg_conv_geom gm;
    KILN_TRY(cl ? qg_conv_geom_cl(n, x, w, y, &gm) : qg_conv_geom_make(n, x, w, &gm));
    int64_t K = gm.Cg * gm.kh * gm.kw, P = gm.OH * gm.OW;
    if (K > QG_MAX_K || (ql.nw != 1 && ql.nw != gm.M))
        return kiln_error(KILN_ERR_SHAPE, "%s '%s': %lld taps per output (at most %d), %d weight scales for %lld channels",
                          n->op_type, n->name, (long long)K, QG_MAX_K, ql.nw, (long long)gm.M);
    const kiln_cuda_tensor *bias;
    KILN_TRY(kiln_qg_host_bias(n, kiln_qg_input(in, nin, 2), gm.M, &bias));
    qg_host_weights hw = {w->host, w->dtype, false, gm.M};
    qg_state *st;
    bool temp;
    KILN_TRY(kiln_qg_state_get(n, &ql, &hw, bias, x->dtype, K, gm.Mg, gm.group, ctx, &st, &temp));
    if (f16) return kiln_qg_finish(st, temp, kiln_qg_conv_f16(n, &ql, st, &hw, bias, x, w, r, gm, y, ctx), ctx);
    size_t lt_bytes = kiln_qg_lt_bytes(ctx);
    int64_t chunk = 0;
    kiln_status s = gm.N > 0 && P > 0 && gm.M > 0 ? kiln_qg_chunk_units(n, st, gm.N, P, true, lt_bytes, ctx, &chunk) : KILN_OK;
    int8_t pad_value = (int8_t)st->epi.xzp;
    for (int64_t i0 = 0; s == KILN_OK && i0 < gm.N; i0 += chunk) {
        int64_t imgs = gm.N - i0 < chunk ? gm.N - i0 : chunk, R = imgs * P;
        unsigned char *ws = (unsigned char *)ctx->workspace;
        int8_t *cols = (int8_t *)ws;
        size_t off = qg_align((size_t)(R * st->Kp));
        int32_t *D = (int32_t *)(ws + off);
        int32_t *rowsum = (int32_t *)(ws + off + qg_align((size_t)(R * st->Mp) * 4));
        void *lt_ws = ws + kiln_qg_chunk_bytes(st, R, true);
        size_t lt_avail = ctx->workspace_bytes - kiln_qg_chunk_bytes(st, R, true);
        qg_out_map m = {P, gm.M * P, P, 1};
        unsigned char *yb = (unsigned char *)y->data + (size_t)(i0 * gm.M * P) * kiln_dtype_size(y->dtype);
        for (int64_t g = 0; s == KILN_OK && g < gm.group; g++) {
            s = kiln_qg_im2col(x->data, x->dtype, gm, i0, g, R, K, st->Kp, pad_value, cols, ctx);
            if (s == KILN_OK) s = kiln_qg_rowsums(st, cols, R, st->Kp, rowsum, ctx);
            if (s == KILN_OK)
                s = kiln_qg_gemm(n, st, g, cols, R, st->Kp, D, lt_ws, lt_avail < lt_bytes ? lt_avail : lt_bytes, ctx);
            if (s == KILN_OK) s = kiln_qg_epilogue(n, st, g, D, R, rowsum, m, true, y->dtype, yb, ctx);
        }
    }
    return kiln_qg_finish(st, temp, s, ctx);
}
