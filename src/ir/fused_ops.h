/* fused_ops.h — the operators kiln's fusion passes create in the "kiln" domain (opset 1): what each
 * computes, its inputs and attributes. This is the contract between the passes (src/passes/), shape
 * inference (src/ir/infer_fused.c) and every backend's kernels. All attributes are of the ordinary
 * kinds (INT, FLOAT, STRING, INTS, FLOATS), so engines store them like any ONNX attribute.
 *
 * kiln.FusedConv   Y = act(Conv(X, W, B) + Z)
 *     inputs  X, W, B (optional), Z (optional, the residual: exactly Y's shape)
 *     attrs   Conv's own (auto_pad, dilations, group, kernel_shape, pads, strides) + activation
 *             + channels_last (int, default 0). With channels_last = 1 (2-D only) the tensors are
 *             laid out channels-last: X [N, H, W, C], W [M, kH, kW, C/group], Z and Y [N, H', W', M];
 *             B stays [M]; the window attributes keep their (H, W) order.
 * kiln.FusedPool   Y = pool(X), pool one of MaxPool, AveragePool, GlobalAveragePool, GlobalMaxPool
 *     inputs  X
 *     attrs   pool (string: the ONNX op it computes) + that op's own attributes, as ONNX opset
 *             KILN_FUSED_POOL_ONNX_OPSET defines them (AveragePool takes dilations)
 *             + channels_last (int, default 0). One output: no MaxPool Indices. With
 *             channels_last = 1 (2-D only) X is [N, H, W, C] and Y [N, H', W', C] (the global
 *             pools: [N, 1, 1, C]); the window attributes keep their (H, W) order. The
 *             layout_channels_last pass makes them, so that a pool between channels-last
 *             convolutions needs no Transposes.
 * kiln.FusedGemm   Y = act(alpha * A' B' + beta * C + Z)
 *     inputs  A, B, C (optional), Z (optional, exactly Y's shape)
 *     attrs   Gemm's own (alpha, beta, transA, transB) + activation
 * kiln.FusedMatMul Y = act(MatMul(A, B) + bias + Z)
 *     inputs  A, B, bias (optional: N = Y's last dim elements, added to every row), Z (optional,
 *             exactly Y's shape)
 *     attrs   activation
 * kiln.Attention   O = softmax(scale * Q K'^T [+ mask | where(mask, ., mask_fill)] [causal]) V'
 *     inputs  Q [..., Sq, D], K [..., Sk, D], V [..., Sk, Dv], mask (optional)
 *     attrs   scale (float), kv_repeat (int, 1..KILN_MAX_KV_REPEAT, default 1), causal (int, default 0),
 *             mask_fill (float)
 *     K' and V' are K and V with their head axis (-3) repeated kv_repeat times, each head
 *     kv_repeat times in a row (grouped-query attention: query head h reads kv head h / kv_repeat).
 *     The leading (batch) dims of Q, K', V' and the mask broadcast like numpy; O is
 *     [broadcast batch..., Sq, Dv]. A float mask is added to the scaled scores; a bool mask keeps the
 *     score where true and puts mask_fill elsewhere. Its last two dims are 1 or Sq / Sk. causal = 1
 *     masks key j for query i when j > i + Sk - Sq. Softmax is over the keys.
 *     layout (int, default 0): 0 is the above. 1, sequence first (a projection's output split into
 *     heads without a Transpose): Q [B, Sq, H, D], K [B, Sk, Hk, D], V [B, Sk, Hk, Dv] (H = Hk *
 *     kv_repeat), O [B, Sq, H, Dv]: layout 0 applied to Q, K, V transposed to [B, H, S, D], with O
 *     transposed back; the mask broadcasts over [B, H, Sq, Sk] as in layout 0. 2, packed: input 0
 *     is QKV [B, S, 3, H, D] (Q, K, V of one projection side by side), K and V are absent,
 *     kv_repeat is 1; otherwise as layout 1, O [B, S, H, D].
 * kiln.ElementwiseChain  Y = a program of elementwise float32 ops over X0..Xn-1 (see below)
 *
 * Activation attributes (FusedConv/FusedGemm/FusedMatMul): activation (string: one of the names
 * below, absent or "" for none) and activation_params (floats, per activation: LeakyRelu {alpha},
 * Clip {min, max}, HardSigmoid {alpha, beta}; others none). */
#ifndef KILN_IR_FUSED_OPS_H
#define KILN_IR_FUSED_OPS_H

#include "ir/graph.h"

#ifdef __cplusplus
extern "C" {
#endif

#define KILN_FUSED_DOMAIN "kiln"
#define KILN_FUSED_OPSET 1
/* The largest head dims (D, Dv) the attention pass fuses: every backend's kernel takes them; larger
 * heads stay MatMul -> Softmax -> MatMul. */
#define KILN_ATTENTION_MAX_HEAD_DIM 128
/* The largest kiln.Attention kv_repeat (grouped-query attention repeats each KV head a few times; a
 * bound keeps heads x kv_repeat far from overflow). */
#define KILN_MAX_KV_REPEAT 65536

typedef enum kiln_activation {
    KILN_ACT_NONE,
    KILN_ACT_RELU,
    KILN_ACT_LEAKY_RELU,   /* x < 0 ? alpha x : x */
    KILN_ACT_CLIP,         /* min(max(x, lo), hi) */
    KILN_ACT_SIGMOID,
    KILN_ACT_TANH,
    KILN_ACT_HARD_SIGMOID, /* clip(alpha x + beta, 0, 1) */
    KILN_ACT_HARD_SWISH,   /* x clip(x / 6 + 0.5, 0, 1) */
    KILN_ACT_GELU,         /* 0.5 x (1 + erf(x / sqrt 2)) */
    KILN_ACT_GELU_TANH,    /* 0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3))) */
    KILN_ACT_SILU,         /* x sigmoid(x) */
    KILN_ACT_COUNT
} kiln_activation;

typedef struct kiln_act {
    kiln_activation kind;
    float p0, p1; /* LeakyRelu: alpha; Clip: lo, hi; HardSigmoid: alpha, beta */
} kiln_act;

/* The attribute name of an activation ("Relu", "Clip", "GeluTanh", ...). */
const char *kiln_activation_name(kiln_activation a);
/* How many activation_params an activation takes. */
int kiln_activation_nparams(kiln_activation a);
/* Reads a fused node's activation attributes; fails (KILN_ERR_INVALID_ARGUMENT, naming the node's op)
 * on an unknown name or a wrong number of params. */
kiln_status kiln_fused_activation(const kiln_node *n, kiln_act *out);

/* ---- kiln.FusedPool ---- */

/* The ONNX opset whose pooling ops kiln.FusedPool computes. */
#define KILN_FUSED_POOL_ONNX_OPSET 19

/* The ONNX pooling node that kiln.FusedPool n computes: *base = *n with op_type its pool attribute,
 * the default domain and opset KILN_FUSED_POOL_ONNX_OPSET (attributes, inputs and outputs shared
 * with n, channels_last ignored). Fails (KILN_ERR_INVALID_ARGUMENT) when pool is missing or names
 * another op. */
kiln_status kiln_fused_pool_base(const kiln_node *n, kiln_node *base);

/* ---- kiln.ElementwiseChain ----
 * A postfix program over a stack of float values, evaluated once per output element. Y has X0's
 * shape; every other input has that shape too or one element (then it is read as a scalar).
 * Attributes:
 *   program (ints): the instructions, each an opcode followed by its operand when it has one;
 *   constants (floats): the constants the program pushes.
 * Opcodes: LOAD i (push input i), CONST k (push constants[k]), the unary ones replace the top of the
 * stack, the binary ones pop b then a and push a op b. The program leaves exactly one value.
 * Engines store these numbers: append new opcodes, never renumber. */
typedef enum kiln_chain_op {
    KILN_CHAIN_LOAD = 1, /* operand: input index */
    KILN_CHAIN_CONST,    /* operand: constant index */
    KILN_CHAIN_ADD,
    KILN_CHAIN_SUB,
    KILN_CHAIN_MUL,
    KILN_CHAIN_DIV,
    KILN_CHAIN_NEG,
    KILN_CHAIN_RELU,
    KILN_CHAIN_SIGMOID,
    KILN_CHAIN_TANH,
    KILN_CHAIN_EXP,
    KILN_CHAIN_SQRT,
    KILN_CHAIN_RECIPROCAL,
    KILN_CHAIN_ERF,
    KILN_CHAIN_ABS,
    KILN_CHAIN_OP_COUNT
} kiln_chain_op;

#define KILN_CHAIN_MAX_STACK 16

/* Checks a chain program against its input and constant counts: known opcodes, operands in range,
 * no stack underflow, depth within KILN_CHAIN_MAX_STACK, exactly one value left. Fails with
 * KILN_ERR_INVALID_ARGUMENT naming the first problem. */
kiln_status kiln_chain_validate(const int64_t *prog, int nprog, int ninputs, int nconsts);

#ifdef __cplusplus
}
#endif
#endif
