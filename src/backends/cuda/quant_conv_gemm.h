/* quant_conv_gemm.h — kiln.QConv's 1x1 layers as one cuBLASLt IMMA GEMM with the requantization
 * (and ResNet's int8 residual) fused into it (quant_conv_gemm.cu): a tactic of the layer that the
 * build times against the implicit-GEMM kernel and the float16 path. */
#ifndef KILN_CUDA_QUANT_CONV_GEMM_H
#define KILN_CUDA_QUANT_CONV_GEMM_H

#include "backends/cuda/cuda_kernels.h"

extern "C" {
#include "ir/quant_ops.h"
}

/* Whether kiln_qg_conv1x1 runs QConv n (parameters ql) on x, the weights w, the residual r (NULL:
 * none) into y: channels-last, group 1, a 1x1 window without padding (any stride), int8 X with zero
 * point 0 and C a multiple of 4, constant 8-bit W without a weight zero point (after uint8's shift by
 * 128), M a multiple of 4, and an int8 output with zero point 0 and activation none or Relu (then an
 * int8 residual with zero point 0 or none) or a float output with none, Relu or tanh-Gelu and no
 * residual. Whether cuBLASLt offers the call is known only when it runs. No error is raised. */
bool kiln_qg_conv1x1_takes(const kiln_node *n, const kiln_quant_layer *ql, const kiln_cuda_tensor *x,
                           const kiln_cuda_tensor *w, const kiln_cuda_tensor *r, const kiln_cuda_tensor *y);

/* Runs QConv n (a call kiln_qg_conv1x1_takes accepts; in = X [N, H, W, C], W [M, 1, 1, C], optional
 * bias, optional residual R [N, OH, OW, M]) as Y [N*OH*OW, M] = requantize(X' W^T + R) in one
 * cuBLASLt call per chunk: X' is X itself at stride 1, else its strided pixels gathered into the
 * workspace a chunk of images at a time. Fails with KILN_ERR_UNSUPPORTED naming the node when
 * cuBLASLt offers no algorithm for the fused call (nothing enqueued), else on a CUDA error. */
kiln_status kiln_qg_conv1x1(const kiln_node *n, const kiln_quant_layer *ql, const kiln_cuda_tensor *in, int nin,
                            const kiln_cuda_tensor *y, kiln_cuda_ctx *ctx);

#endif
