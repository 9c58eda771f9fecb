/* quant_conv_gemm.h — kiln.QConv's channels-last layers as cuBLASLt IMMA GEMMs with the
 * requantization (and ResNet's int8 residual) fused into them (quant_conv_gemm.cu): a path of the
 * layer that the build times against the implicit-GEMM kernel and the float16 path. */
#ifndef KILN_CUDA_QUANT_CONV_GEMM_H
#define KILN_CUDA_QUANT_CONV_GEMM_H

#include "backends/cuda/cuda_kernels.h"

extern "C" {
#include "ir/quant_ops.h"
}

/* Whether kiln_qg_conv_gemm runs QConv n (parameters ql) on x, the weights w, the residual r (NULL:
 * none) into y with ctx's workspace: channels-last 2-D, group 1, int8 X with zero point 0 and C a
 * multiple of 4, constant 8-bit W without a weight zero point (after uint8's shift by 128), M a
 * multiple of 4, at most 32768 taps per output, an int8 output with zero point 0 and activation none
 * or Relu, and an int8 residual with zero point 0 or none; a layer other than a 1x1 without padding
 * at stride 1 also needs a workspace that holds one image's im2col rows besides cuBLASLt's share.
 * Whether cuBLASLt offers the call is known only when it runs. No error is raised. */
bool kiln_qg_conv_gemm_takes(const kiln_node *n, const kiln_quant_layer *ql, const kiln_cuda_tensor *x,
                             const kiln_cuda_tensor *w, const kiln_cuda_tensor *r, const kiln_cuda_tensor *y,
                             const kiln_cuda_ctx *ctx);

/* Runs QConv n (a call kiln_qg_conv_gemm_takes accepts; in = X [N, H, W, C], W [M, kh, kw, C],
 * optional bias, optional residual R [N, OH, OW, M]) as Y [N*OH*OW, M] = requantize(A W^T + R) in one
 * cuBLASLt call per chunk of images: A is X itself for a 1x1 window without padding at stride 1,
 * else its im2col rows [pixel][tap][channel] (padding taps 0, the input's zero point) written into
 * the workspace a chunk at a time. Fails with KILN_ERR_UNSUPPORTED naming the node when cuBLASLt
 * offers no algorithm for the fused call, else on a CUDA error. */
kiln_status kiln_qg_conv_gemm(const kiln_node *n, const kiln_quant_layer *ql, const kiln_cuda_tensor *in, int nin,
                              const kiln_cuda_tensor *y, kiln_cuda_ctx *ctx);

#endif
