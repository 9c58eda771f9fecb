/* passes.h — graph optimization passes. Each pass is one file with one entry point; it returns
 * whether it changed the graph in *changed and logs each change at KILN_LOG_VERBOSE. A pass leaves
 * the graph alone wherever it cannot prove its pattern. The passes that rewrite patterns expect
 * inferred shapes and leave nodes in topological order; the builder re-infers shapes after them. */
#ifndef KILN_PASSES_H
#define KILN_PASSES_H

#include "ir/graph.h"

/* Evaluates nodes whose inputs are all constant (with the CPU reference kernels) and turns their
 * outputs into constants, when an output is no larger than max(its inputs, 1 MiB). */
kiln_status kiln_pass_fold_constants(kiln_graph *g, bool *changed);
/* Removes nodes and values that no graph output depends on. */
kiln_status kiln_pass_remove_dead(kiln_graph *g, bool *changed);
/* Removes Identity, inference Dropout, Cast to the same type, reshapes to the same shape and
 * identity Transposes; merges Transpose pairs and Reshape chains. */
kiln_status kiln_pass_eliminate_noops(kiln_graph *g, bool *changed);
/* Common-subexpression elimination: equal constants and repeated nodes (same op, inputs, attributes). */
kiln_status kiln_pass_cse(kiln_graph *g, bool *changed);
/* Folds inference BatchNormalization into the preceding Conv's weights and bias (new constants). */
kiln_status kiln_pass_fuse_conv_bn(kiln_graph *g, bool *changed);
/* Element-by-element GELU (erf and tanh forms) -> Gelu. */
kiln_status kiln_pass_fuse_gelu(kiln_graph *g, bool *changed);
/* Element-by-element layer / RMS normalization -> LayerNormalization / RMSNormalization. */
kiln_status kiln_pass_fuse_norm(kiln_graph *g, bool *changed);
/* MatMul -> scale -> mask -> Softmax -> MatMul (with the K transpose and GQA expansion around it)
 * -> kiln.Attention. */
kiln_status kiln_pass_fuse_attention(kiln_graph *g, bool *changed);
/* DequantizeLinear -> Conv / MatMul (+ bias, Relu / Clip) -> QuantizeLinear -> kiln.QConv / kiln.QMatMul
 * (ir/quant_ops.h); runs before constant folding. */
kiln_status kiln_pass_fuse_qdq(kiln_graph *g, bool *changed);
/* kiln.QMatMul / kiln.QConv writing float32 -> [bias Add] -> [Gelu] -> [QuantizeLinear] -> the
 * integer layer with the bias, the Gelu activation, the 8-bit output (runs after fuse_gelu). */
kiln_status kiln_pass_fuse_qdq_output(kiln_graph *g, bool *changed);
/* Conv / Gemm / MatMul + bias + residual Add + activation -> kiln.FusedConv / FusedGemm / FusedMatMul. */
kiln_status kiln_pass_fuse_epilogue(kiln_graph *g, bool *changed);
/* Chains of float elementwise ops over same-shaped values -> one kiln.ElementwiseChain. */
kiln_status kiln_pass_fuse_elementwise(kiln_graph *g, bool *changed);
/* 2-D FusedConv / Conv with constant weights -> kiln.FusedConv channels_last = 1 (weights as new
 * [M, kH, kW, C/g] constants) between Transposes to NHWC and back; the clean-up passes then cancel
 * the Transposes between consecutive convolutions. */
kiln_status kiln_pass_layout_channels_last(kiln_graph *g, bool *changed);
/* MatMul with a 2-D float constant right operand of N columns, N >= 64 not a multiple of 8 -> MatMul
 * with the operand zero-padded to a multiple of 8 columns, then a Slice back to N (16-byte aligned
 * rows for tensor-core GEMMs). */
kiln_status kiln_pass_align_matmul(kiln_graph *g, bool *changed);
/* Float32 graph inputs and node-made outputs -> float16 under the same names, with a Cast to float32
 * after each input and a Cast to float16 before each output (build option io_fp16). */
kiln_status kiln_pass_io_fp16(kiln_graph *g, bool *changed);

#endif
