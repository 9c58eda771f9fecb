/* qconv_igemm.h — kiln.QConv as kiln's own INT8 implicit-GEMM convolution on tensor cores
 * (qconv_igemm.cu), the path quant_gemm.cu's QConv dispatches to when the layer fits it. */
#ifndef KILN_CUDA_QCONV_IGEMM_H
#define KILN_CUDA_QCONV_IGEMM_H

#include "backends/cuda/cuda_kernels.h"

extern "C" {
#include "ir/quant_ops.h"
}

/* The kernel's tile shapes (rows x output channels of one CTA), or AUTO: 128 x 128 when that gives
 * every SM a tile, else 64 x 64. */
typedef enum {
    KILN_QCI_TILE_AUTO,
    KILN_QCI_TILE_128X256,
    KILN_QCI_TILE_128X128,
    KILN_QCI_TILE_64X64,
    KILN_QCI_TILE_32X64,
    KILN_QCI_TILE_64X64_SPLITK, /* 64 x 64 with the k steps split over CTAs (int32 sums added in the
                                 * workspace, then requantized by a second kernel): small maps, deep K */
} kiln_qci_tile;

/* Whether the current device gives a CTA of tile shape `tile` the shared memory it needs (the
 * 128 x 256 tile needs 133 KB). */
bool kiln_cuda_qconv_igemm_tile_fits(kiln_qci_tile tile);

/* Whether the split-K launch (KILN_QCI_TILE_64X64_SPLITK) of QConv n would split: a layer
 * kiln_cuda_qconv_igemm_takes accepts with too few 64 x 64 tiles for two per SM and k steps to share,
 * and a workspace that holds one image's int32 sums (and its staged input). No error is raised. */
bool kiln_cuda_qconv_igemm_splitk_takes(const kiln_node *n, const kiln_quant_layer *ql, const kiln_cuda_tensor *x,
                                        const kiln_cuda_tensor *w, const kiln_cuda_ctx *ctx);

/* Whether kiln_cuda_qconv_igemm runs QConv n (parameters ql) on x and the weights w: a 1-D or 2-D
 * window (channels-last: 2-D) with group 1, 8-bit X and constant 8-bit W with no weight zero point
 * (after uint8's shift by 128), at most 32768 taps per output, sm_80 or later, and a workspace that
 * holds one image of X channels-last unless X is read in place (channels-last int8, C a multiple of
 * 16, 16-byte aligned). No error is raised either way. */
bool kiln_cuda_qconv_igemm_takes(const kiln_node *n, const kiln_quant_layer *ql, const kiln_cuda_tensor *x,
                                 const kiln_cuda_tensor *w, const kiln_cuda_ctx *ctx);

/* Runs QConv n (a call kiln_cuda_qconv_igemm_takes accepts): in = X [N, C, (H,) W], W, optional bias
 * (a float constant of M values), optional residual R (8-bit or float, Y's shape), out[0] = Y [N, M, (OH,) OW]
 * of the layer's output dtype; with channels_last = 1 X [N, H, W, C], W [M, kH, kW, C], R and Y
 * [N, OH, OW, M], on tile shape `tile`. The node
 * state (ctx->state) keeps the prepared weights; without a slot (the tuner) they are prepared for
 * this call and freed after it. Fails naming the node and the call on a CUDA error or a bad bias. */
kiln_status kiln_cuda_qconv_igemm(const kiln_node *n, const kiln_quant_layer *ql, const kiln_cuda_tensor *in, int nin,
                                  const kiln_cuda_tensor *y, kiln_qci_tile tile, kiln_cuda_ctx *ctx);

#endif
