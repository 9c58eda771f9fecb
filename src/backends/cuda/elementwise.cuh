/* elementwise.cuh — internal interface of the CUDA elementwise family: the exec and supports
 * functions that elementwise.cu (unary ops, Clip), elementwise_binary.cu (binary, variadic, Where,
 * Pow, PRelu) and elementwise_cast.cu (Cast, CastLike) contribute to the family's kernel table in
 * elementwise.cu, and the unary launcher the binary file reuses (Mean's final division). */
#ifndef KILN_CUDA_ELEMENTWISE_CUH
#define KILN_CUDA_ELEMENTWISE_CUH

#include "backends/cuda/kernel_util.cuh"

#define EWC_EXEC_ARGS                                                                              \
    const kiln_node *n, const kiln_cuda_tensor *in, int nin, const kiln_cuda_tensor *out, int nout, kiln_cuda_ctx *ctx
#define EWC_SUPPORTS_ARGS const kiln_graph *g, const kiln_node *n

/* Op names of each file, in table order. */
#define EWC_UNARY_OPS(X)                                                                           \
    X(Abs) X(Neg) X(Exp) X(Log) X(Sqrt) X(Reciprocal) X(Sign) X(Sin) X(Cos) X(Tan) X(Asin) X(Acos)     \
    X(Atan) X(Sinh) X(Cosh) X(Asinh) X(Acosh) X(Atanh) X(Erf) X(Tanh) X(Sigmoid) X(Relu) X(LeakyRelu) \
    X(Elu) X(Selu) X(Celu) X(HardSigmoid) X(HardSwish) X(Gelu) X(Softplus) X(Softsign) X(Mish)        \
    X(ThresholdedRelu) X(Floor) X(Ceil) X(Round) X(IsNaN) X(IsInf) X(Not) X(BitwiseNot) X(Clip)
#define EWC_BINARY_OPS(X)                                                                          \
    X(Add) X(Sub) X(Mul) X(Div) X(Pow) X(Mod) X(PRelu) X(Equal) X(Less) X(Greater) X(LessOrEqual)       \
    X(GreaterOrEqual) X(And) X(Or) X(Xor) X(BitShift) X(BitwiseAnd) X(BitwiseOr) X(BitwiseXor) X(Min)  \
    X(Max) X(Sum) X(Mean) X(Where)
#define EWC_CAST_OPS(X) X(Cast) X(CastLike)

#define EWC_DECLARE(name)                                                                          \
    kiln_status kiln_ewc_exec_##name(EWC_EXEC_ARGS);                                               \
    kiln_status kiln_ewc_supports_##name(EWC_SUPPORTS_ARGS);
EWC_UNARY_OPS(EWC_DECLARE)
EWC_BINARY_OPS(EWC_DECLARE)
EWC_CAST_OPS(EWC_DECLARE)
#undef EWC_DECLARE

/* y[i] = y[i] / d for i < count, y a dense float32/float16/bfloat16 array (Mean's last step). */
kiln_status kiln_ewc_divide(kiln_dtype t, void *y, int64_t count, float d, kiln_cuda_ctx *ctx);

#endif
