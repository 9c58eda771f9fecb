/* op_cases.c — the cases of test_backend_ops (notation in op_cases.h): every op of the CPU op
 * families (src/ir/infer_elementwise.c, infer_nn.c, infer_reduce.c, infer_shape.c), each at several
 * shapes and attribute settings, the LLM kernels of src/llm/cuda/ (llm_op_cases.h), and the large
 * shapes that --perf times. */
#include "op_cases.h"

#include <stddef.h>

/* Unary ops: a scalar-like [1], odd lengths, a 2-D tail, rank 5 and an empty tensor. */
#define UNARY(op, t, range, attrs)                                                                 \
    {op, t "[1]" range, attrs, 0, 0}, {op, t "[7]" range, attrs, 0, 0},                             \
    {op, t "[4097]" range, attrs, 0, 0}, {op, t "[33,1000]" range, attrs, 0, 0},                    \
    {op, t "[2,3,5,7,11]" range, attrs, 0, 0}, {op, t "[0,5]" range, attrs, 0, 0}

/* Binary ops: equal shapes, row / column / outer / middle broadcasting, scalars on either side, rank 5. */
#define BINARY(op, t, ra, rb, attrs)                                                               \
    {op, t "[1]" ra " " t "[1]" rb, attrs, 0, 0},                                                  \
    {op, t "[4097]" ra " " t "[4097]" rb, attrs, 0, 0},                                            \
    {op, t "[33,1000]" ra " " t "[1000]" rb, attrs, 0, 0},                                         \
    {op, t "[33,1]" ra " " t "[1,1000]" rb, attrs, 0, 0},                                          \
    {op, t "[2,3,4,5]" ra " " t "[3,1,5]" rb, attrs, 0, 0},                                        \
    {op, t "[4097]" ra " " t "[]" rb, attrs, 0, 0},                                                \
    {op, t "[]" ra " " t "[7,33]" rb, attrs, 0, 0},                                                \
    {op, t "[2,3,5,7,11]" ra " " t "[2,1,5,1,11]" rb, attrs, 0, 0}

/* Comparisons: integer-valued floats so that equal pairs occur, plus plain floats and int64. */
#define COMPARE(op)                                                                                \
    {op, "fi[33,1000]{-3,3} fi[1000]{-3,3}", "", 0, 0},                                            \
    {op, "fi[7]{-3,3} fi[]{-3,3}", "", 0, 0},                                                      \
    {op, "fi[2,3,5,7,11]{-2,2} fi[2,1,5,1,11]{-2,2}", "", 0, 0},                                   \
    {op, "f[33,65] f[65]", "", 0, 0},                                                              \
    {op, "i64[33,65]{0,4} i64[65]{0,4}", "", 0, 0}

#define VARIADIC(op)                                                                               \
    {op, "f[33,1000]", "", 0, 0},                                                                  \
    {op, "f[33,1000] f[1000]", "", 0, 0},                                                          \
    {op, "f[2,3,4,5] f[3,1,5] f[5]", "", 0, 0},                                                    \
    {op, "f[4097] f[4097] f[4097] f[4097]", "", 0, 0},                                             \
    {op, "f[] f[7,1] f[1,33]", "", 0, 0}

/* Reductions over an axes input (opset >= 18; ReduceSum >= 13): trailing and leading axes, several
 * axes, all axes, negative axes, rank 5, and the attribute form of opset 11. */
#define REDUCE(op, t, range)                                                                       \
    {op, t "[33,1000]" range " Ki64[1]=1", "", 0, 0},                                              \
    {op, t "[33,1000]" range " Ki64[1]=0", "keepdims=0", 0, 0},                                    \
    {op, t "[2,3,5,7]" range " Ki64[2]=1,3", "", 0, 0},                                            \
    {op, t "[4097]" range, "", 0, 0},                                                              \
    {op, t "[7,33,65]" range " Ki64[1]=-1", "keepdims=0", 0, 0},                                   \
    {op, t "[2,3,5,7,11]" range " Ki64[3]=0,2,4", "", 0, 0},                                       \
    {op, t "[1,1]" range, "keepdims=0", 0, 0},                                                     \
    {op, t "[2,3,7,7]" range, "axes=[2,3]", 0, 11}

#define SOFTMAX(op)                                                                                \
    {op, "f[33,1000]{-5,5}", "", 0, 0},                                                            \
    {op, "f[2,3,4,5]", "axis=1", 0, 0},                                                            \
    {op, "f[4097]{-5,5}", "", 0, 0},                                                               \
    {op, "f[7,33,65]", "axis=0", 0, 0},                                                            \
    {op, "f[2,12,128,128]{-5,5}", "", 0, 0},                                                       \
    {op, "f[1,1]", "", 0, 0},                                                                      \
    {op, "fi[7,33]{-3,3}", "", 0, 0},                                                              \
    {op, "f[2,3,4]", "axis=1", 0, 11}

#define POOL(op, attrs)                                                                            \
    {op, "f[1,3,32,32]", "kernel_shape=[3,3] strides=[2,2] pads=[1,1,1,1]" attrs, 0, 0},           \
    {op, "f[2,16,33,33]", "kernel_shape=[2,2] strides=[2,2] ceil_mode=1" attrs, 0, 0},             \
    {op, "f[1,4,1000]", "kernel_shape=[5] strides=[3]" attrs, 0, 0},                               \
    {op, "f[1,2,9,9,9]", "kernel_shape=[3,3,3] strides=[2,2,2]" attrs, 0, 0},                      \
    {op, "f[1,3,8,8]", "kernel_shape=[3,3] auto_pad='SAME_UPPER' strides=[2,2]" attrs, 0, 0},      \
    {op, "f[4,64,56,56]", "kernel_shape=[3,3] strides=[2,2] pads=[1,1,1,1]" attrs, 0, 0},          \
    {op, "f[1,3,7,7]", "kernel_shape=[7,7]" attrs, 0, 0}

#define GLOBAL_POOL(op, attrs)                                                                     \
    {op, "f[2,64,7,7]", attrs, 0, 0}, {op, "f[1,3,1000]", attrs, 0, 0},                             \
    {op, "f[1,2,3,4,5]", attrs, 0, 0}, {op, "f[4,2048,7,7]", attrs, 0, 0},                          \
    {op, "f[1,1,1,1]", attrs, 0, 0}

/* LLM kernels (llm_op_cases.h): the launchers of src/llm/cuda/ on plain device arrays against their
 * CPU references, in f16 and bf16 (argmax and the sampler: f32). The inputs field holds the shape as
 * name=number tokens. */

/* One attention shape (head dim, query heads, KV heads, sequences, first row of the sequence table,
 * cache blocks no sequence owns) through every attention kernel: prefill on CUDA cores and on tensor
 * cores, the decode kernel's token rows of the same prompts, decode with the heuristic's splits and
 * with 48 keys per split. */
#define LLM_ATTENTION(hd, q, kv, batch, rot, holes)                                                \
    {"llm.PrefillAttention", "hd=" #hd " heads=" #q " kv=" #kv " batch=" #batch " rot=" #rot " holes=" #holes " kernel=1", \
     NULL, 0, 0},                                                                                  \
    {"llm.PrefillAttention", "hd=" #hd " heads=" #q " kv=" #kv " batch=" #batch " rot=" #rot " holes=" #holes " kernel=2", \
     NULL, 0, 0},                                                                                  \
    {"llm.DecodeAttention", "hd=" #hd " heads=" #q " kv=" #kv " batch=" #batch " rot=" #rot " holes=" #holes " rows=1", \
     NULL, 0, 0},                                                                                  \
    {"llm.DecodeAttention", "hd=" #hd " heads=" #q " kv=" #kv " batch=" #batch " rot=" #rot " holes=" #holes, NULL, 0, 0}, \
    {"llm.DecodeAttention", "hd=" #hd " heads=" #q " kv=" #kv " batch=" #batch " rot=" #rot " holes=" #holes " part=48", \
     NULL, 0, 0}
/* Chunked prefill on the tensor cores: 1..300 new tokens after cached prefixes of up to 600 tokens. */
#define LLM_CHUNKS(hd, q, kv, batch, rot)                                                          \
    {"llm.PrefillAttention", "hd=" #hd " heads=" #q " kv=" #kv " batch=" #batch " rot=" #rot " seqs=1 holes=3 kernel=2", \
     NULL, 0, 0}
/* A sliding window of w keys through every attention kernel (the prefill ones on the chunks of
 * 1..300 new tokens after cached prefixes, the token rows on the same chunks). */
#define LLM_WINDOW(hd, q, kv, batch, rot, w)                                                       \
    {"llm.PrefillAttention", "hd=" #hd " heads=" #q " kv=" #kv " batch=" #batch " rot=" #rot " seqs=1 window=" #w " kernel=1", \
     NULL, 0, 0},                                                                                  \
    {"llm.PrefillAttention", "hd=" #hd " heads=" #q " kv=" #kv " batch=" #batch " rot=" #rot " seqs=1 window=" #w " kernel=2", \
     NULL, 0, 0},                                                                                  \
    {"llm.DecodeAttention", "hd=" #hd " heads=" #q " kv=" #kv " batch=" #batch " rot=" #rot " seqs=1 window=" #w " rows=1", \
     NULL, 0, 0},                                                                                  \
    {"llm.DecodeAttention", "hd=" #hd " heads=" #q " kv=" #kv " batch=" #batch " rot=" #rot " window=" #w, NULL, 0, 0}, \
    {"llm.DecodeAttention", "hd=" #hd " heads=" #q " kv=" #kv " batch=" #batch " rot=" #rot " window=" #w " part=48", \
     NULL, 0, 0}
/* An FP8 (E4M3) cache with per-head scales (window w, 0 none) through every attention kernel: the
 * prefill ones on the chunks, the token rows on the prompts. */
#define LLM_FP8(hd, q, kv, batch, rot, w)                                                          \
    {"llm.PrefillAttention", "hd=" #hd " heads=" #q " kv=" #kv " batch=" #batch " rot=" #rot " seqs=1 window=" #w " fp8=1 kernel=1", \
     NULL, 0, 0},                                                                                  \
    {"llm.PrefillAttention", "hd=" #hd " heads=" #q " kv=" #kv " batch=" #batch " rot=" #rot " seqs=1 window=" #w " fp8=1 kernel=2", \
     NULL, 0, 0},                                                                                  \
    {"llm.DecodeAttention", "hd=" #hd " heads=" #q " kv=" #kv " batch=" #batch " rot=" #rot " window=" #w " fp8=1 rows=1", \
     NULL, 0, 0},                                                                                  \
    {"llm.DecodeAttention", "hd=" #hd " heads=" #q " kv=" #kv " batch=" #batch " rot=" #rot " window=" #w " fp8=1", NULL, 0, 0}, \
    {"llm.DecodeAttention", "hd=" #hd " heads=" #q " kv=" #kv " batch=" #batch " rot=" #rot " window=" #w " fp8=1 part=48", \
     NULL, 0, 0}
/* Residual add + norm at width d: two row counts, LayerNorm and RMSNorm, with and without the residual
 * add, its sum stored or not, rows gathered or not. */
#define LLM_NORMS(d, rows, layer, other)                                                           \
    {"llm.AddNorm", "d=" #d " rows=" #rows " layer=" #layer, NULL, 0, 0},                          \
    {"llm.AddNorm", "d=" #d " rows=5 layer=" #other " store=1", NULL, 0, 0},                       \
    {"llm.AddNorm", "d=" #d " rows=" #rows " layer=" #layer " store=1 gather=1", NULL, 0, 0},      \
    {"llm.AddNorm", "d=" #d " rows=5 layer=" #other " residual=0 gather=1", NULL, 0, 0}
/* Every GEMV configuration at one shape (K inputs, N outputs, n token rows): with a bias, 16-bit out;
 * without; FP32 out. */
#define LLM_GEMV(K, N, n)                                                                          \
    {"llm.Gemv", "K=" #K " N=" #N " n=" #n " bias=1", NULL, 0, 0},                                 \
    {"llm.Gemv", "K=" #K " N=" #N " n=" #n, NULL, 0, 0},                                           \
    {"llm.Gemv", "K=" #K " N=" #N " n=" #n " f32=1", NULL, 0, 0}
/* The fused GEMV in every configuration at one shape (K inputs, N outputs, n token rows, LayerNorm or
 * RMSNorm): each epilogue (store, GELU, SwiGLU, GeGLU, the residual add), then the FP32 store; the odd
 * configurations under programmatic dependent launch on sm_90. */
#define LLM_GEMV_FUSED(K, N, n, layer)                                                             \
    {"llm.GemvFused", "K=" #K " N=" #N " n=" #n " layer=" #layer " epi=0", NULL, 0, 0},            \
    {"llm.GemvFused", "K=" #K " N=" #N " n=" #n " layer=" #layer " epi=1", NULL, 0, 0},            \
    {"llm.GemvFused", "K=" #K " N=" #N " n=" #n " layer=" #layer " epi=2", NULL, 0, 0},            \
    {"llm.GemvFused", "K=" #K " N=" #N " n=" #n " layer=" #layer " epi=3", NULL, 0, 0},            \
    {"llm.GemvFused", "K=" #K " N=" #N " n=" #n " layer=" #layer " epi=4", NULL, 0, 0},            \
    {"llm.GemvFused", "K=" #K " N=" #N " n=" #n " layer=" #layer " epi=0 f32=1", NULL, 0, 0}
/* Every INT8 GEMV configuration at one shape: with a bias, 16-bit out; without; FP32 out. */
#define LLM_GEMV_Q8(K, N, n)                                                                       \
    {"llm.GemvQ8", "K=" #K " N=" #N " n=" #n " bias=1", NULL, 0, 0},                               \
    {"llm.GemvQ8", "K=" #K " N=" #N " n=" #n, NULL, 0, 0},                                         \
    {"llm.GemvQ8", "K=" #K " N=" #N " n=" #n " f32=1", NULL, 0, 0}
/* The W8A8 GEMV at one shape: with a bias, 16-bit out; without; FP32 out. */
#define LLM_GEMV_W8A8(K, N, n)                                                                     \
    {"llm.GemvW8A8", "K=" #K " N=" #N " n=" #n " bias=1", NULL, 0, 0},                             \
    {"llm.GemvW8A8", "K=" #K " N=" #N " n=" #n, NULL, 0, 0},                                       \
    {"llm.GemvW8A8", "K=" #K " N=" #N " n=" #n " f32=1", NULL, 0, 0}
/* The INT4 GEMV at one shape: with a bias, 16-bit out; without; FP32 out. */
#define LLM_GEMV_Q4(K, N, n)                                                                       \
    {"llm.GemvQ4", "K=" #K " N=" #N " n=" #n " bias=1", NULL, 0, 0},                               \
    {"llm.GemvQ4", "K=" #K " N=" #N " n=" #n, NULL, 0, 0},                                         \
    {"llm.GemvQ4", "K=" #K " N=" #N " n=" #n " f32=1", NULL, 0, 0}
/* The tensor-core INT8 / INT4 product at one shape: with a bias, 16-bit out; without; FP32 out. */
#define LLM_GEMM_Q(OP, K, N, n)                                                                    \
    {OP, "K=" #K " N=" #N " n=" #n " bias=1", NULL, 0, 0},                                         \
    {OP, "K=" #K " N=" #N " n=" #n, NULL, 0, 0},                                                   \
    {OP, "K=" #K " N=" #N " n=" #n " f32=1", NULL, 0, 0}
/* The FP8 product at one shape: with a bias, 16-bit out; without; FP32 out (n <= 8: the GEMV, more
 * rows: cuBLASLt's FP8 GEMM when K is a multiple of 16). */
#define LLM_LINEAR_FP8(K, N, n)                                                                    \
    {"llm.LinearFp8", "K=" #K " N=" #N " n=" #n " bias=1", NULL, 0, 0},                            \
    {"llm.LinearFp8", "K=" #K " N=" #N " n=" #n, NULL, 0, 0},                                      \
    {"llm.LinearFp8", "K=" #K " N=" #N " n=" #n " f32=1", NULL, 0, 0}
/* RoPE + KV write of one head shape, rotated and not (GPT-2), and not rotated into an FP8 cache. */
#define LLM_ROPE(hd, q, kv)                                                                        \
    {"llm.RopeKvWrite", "hd=" #hd " heads=" #q " kv=" #kv, NULL, 0, 0},                            \
    {"llm.RopeKvWrite", "hd=" #hd " heads=" #q " kv=" #kv " rotate=0", NULL, 0, 0},                \
    {"llm.RopeKvWrite", "hd=" #hd " heads=" #q " kv=" #kv " rotate=0 fp8=1", NULL, 0, 0}
/* The sampler at one vocabulary size: greedy (with and without penalties), temperature with top-k,
 * top-p, min-p and penalties. */
#define LLM_SAMPLE(vocab)                                                                          \
    {"llm.Sample", "vocab=" #vocab, NULL, 0, 0},                                                   \
    {"llm.Sample", "vocab=" #vocab " pen=1", NULL, 0, 0},                                          \
    {"llm.Sample", "vocab=" #vocab " temp=0.8 top_k=40", NULL, 0, 0},                              \
    {"llm.Sample", "vocab=" #vocab " temp=1.0 top_p=0.9", NULL, 0, 0},                             \
    {"llm.Sample", "vocab=" #vocab " temp=1.2 min_p=0.05 pen=1", NULL, 0, 0}

const op_case kiln_op_cases[] = {
    /* ---------------------------------------------------------------- elementwise: unary */
    UNARY("Abs", "f", "", ""),
    UNARY("Neg", "f", "", ""),
    UNARY("Exp", "f", "{-5,5}", ""),
    UNARY("Log", "f", "{0.1,4}", ""),
    UNARY("Sqrt", "f", "{0,4}", ""),
    UNARY("Reciprocal", "f", "{0.5,2}", ""),
    UNARY("Sign", "fi", "{-3,3}", ""),
    UNARY("Sin", "f", "{-4,4}", ""),
    UNARY("Cos", "f", "{-4,4}", ""),
    UNARY("Tan", "f", "{-1.2,1.2}", ""),
    UNARY("Asin", "f", "{-0.99,0.99}", ""),
    UNARY("Acos", "f", "{-0.99,0.99}", ""),
    UNARY("Atan", "f", "{-4,4}", ""),
    UNARY("Sinh", "f", "{-3,3}", ""),
    UNARY("Cosh", "f", "{-3,3}", ""),
    UNARY("Asinh", "f", "{-4,4}", ""),
    UNARY("Acosh", "f", "{1,4}", ""),
    UNARY("Atanh", "f", "{-0.95,0.95}", ""),
    UNARY("Erf", "f", "{-3,3}", ""),
    UNARY("Tanh", "f", "{-4,4}", ""),
    UNARY("Sigmoid", "f", "{-6,6}", ""),
    UNARY("Relu", "f", "", ""),
    UNARY("LeakyRelu", "f", "", "alpha=0.1"),
    UNARY("Elu", "f", "{-3,3}", "alpha=0.7"),
    UNARY("Selu", "f", "{-3,3}", ""),
    {"Selu", "f[33,1000]{-3,3}", "alpha=1.5 gamma=0.5", 0, 0},
    UNARY("Celu", "f", "{-3,3}", "alpha=1.5"),
    UNARY("HardSigmoid", "f", "{-4,4}", "alpha=0.3 beta=0.4"),
    UNARY("HardSwish", "f", "{-4,4}", ""),
    UNARY("Gelu", "f", "{-4,4}", ""),
    UNARY("Gelu", "f", "{-4,4}", "approximate='tanh'"),
    UNARY("Softplus", "f", "{-5,5}", ""),
    UNARY("Softsign", "f", "{-5,5}", ""),
    UNARY("Mish", "f", "{-5,5}", ""),
    UNARY("ThresholdedRelu", "f", "", "alpha=0.3"),
    UNARY("Floor", "f", "{-4,4}", ""),
    UNARY("Ceil", "f", "{-4,4}", ""),
    UNARY("Round", "f", "{-4,4}", ""),
    {"Round", "f[8]=0.5,1.5,2.5,-0.5,-1.5,-2.5,0.49,-0.51", "", 0, 0},
    UNARY("Relu", "i64", "{-9,9}", ""),
    UNARY("Abs", "i32", "{-9,9}", ""),
    UNARY("Neg", "i64", "{-9,9}", ""),
    {"IsNaN", "f[8]=0.0,nan,inf,-inf,1.5,-2.0,nan,3.0", "", 0, 0},
    {"IsNaN", "fs[33,1000]", "", 0, 0},
    {"IsInf", "f[8]=0.0,nan,inf,-inf,1.5,-2.0,nan,3.0", "", 0, 0},
    {"IsInf", "f[8]=0.0,nan,inf,-inf,1.5,-2.0,nan,3.0", "detect_negative=0", 0, 0},
    {"IsInf", "f[8]=0.0,nan,inf,-inf,1.5,-2.0,nan,3.0", "detect_positive=0", 0, 0},
    {"IsInf", "fs[4097]", "", 0, 0},
    {"IsInf", "fs[2,3,5,7,11]", "detect_negative=0", 0, 0},
    {"Not", "b[33,1000]", "", 0, 0},
    {"Not", "b[7]", "", 0, 0},
    {"BitwiseNot", "i32[33,1000]{-100,100}", "", 0, 0},
    {"BitwiseNot", "u8[4097]{0,256}", "", 0, 0},
    {"BitwiseNot", "i64[7]{-5,5}", "", 0, 0},
    {"Clip", "f[33,1000]{-2,2} Kf[]=-0.5 Kf[]=0.7", "", 0, 0},
    {"Clip", "f[4097] Kf[]=0.0", "", 0, 0},
    {"Clip", "f[7] - Kf[]=0.3", "", 0, 0},
    {"Clip", "f[2,3,5,7,11]", "", 0, 0},
    {"Clip", "f[33,1000] Kf[]=0.0 Kf[]=6.0", "", 0, 0},
    {"Clip", "i64[33,65]{-20,20} Ki64[]=-3 Ki64[]=5", "", 0, 0},
    {"Clip", "f[33,1000]", "min=-0.5 max=0.5", 0, 6},

    /* ---------------------------------------------------------------- elementwise: binary */
    BINARY("Add", "f", "", "", ""),
    BINARY("Sub", "f", "", "", ""),
    BINARY("Mul", "f", "", "", ""),
    BINARY("Div", "f", "", "{0.5,2}", ""),
    {"Add", "i64[33,1000]{-100,100} i64[1000]{-100,100}", "", 0, 0},
    {"Add", "i32[7] i32[]", "", 0, 0},
    {"Add", "f[0,5] f[5]", "", 0, 0},
    {"Sub", "i64[2,3,4,5]{-100,100} i64[3,1,5]{-100,100}", "", 0, 0},
    {"Mul", "i32[33,1000]{-100,100} i32[1000]{-100,100}", "", 0, 0},
    {"Div", "i64[33,1000]{-50,50} i64[1000]{1,7}", "", 0, 0},
    {"Div", "i32[4097]{-50,50} i32[]{-7,-1}", "", 0, 0},
    BINARY("Pow", "f", "{0.1,2}", "{-2,2}", ""),
    {"Pow", "f[33,1000]{-2,2} Kf[]=2.0", "", 0, 0},
    {"Pow", "f[33,1000]{-2,2} Kf[]=3.0", "", 0, 0},
    {"Pow", "f[4097]{0.1,2} Kf[]=0.5", "", 0, 0},
    {"Pow", "f[7]{-2,2} Ki64[]=2", "", 0, 0},
    {"Mod", "i64[33,1000]{-50,50} i64[1000]{1,7}", "", 0, 0},
    {"Mod", "i32[4097]{-50,50} i32[]{-7,-1}", "", 0, 0},
    {"Mod", "f[33,1000]{-5,5} f[1000]{0.5,2}", "fmod=1", 0, 0},
    {"Mod", "f[2,3,5,7,11]{-5,5} f[2,1,5,1,11]{-2,-0.5}", "fmod=1", 0, 0},
    {"PRelu", "f[2,3,7,7] f[3,1,1]", "", 0, 0},
    {"PRelu", "f[33,1000] f[1000]", "", 0, 0},
    {"PRelu", "f[4097] f[1]", "", 0, 0},
    {"PRelu", "f[2,3,5,7,11] Kf[11]", "", 0, 0},
    COMPARE("Equal"),
    {"Equal", "b[33,65] b[65]", "", 0, 0},
    COMPARE("Less"),
    COMPARE("Greater"),
    COMPARE("LessOrEqual"),
    COMPARE("GreaterOrEqual"),
    {"And", "b[33,1000] b[1000]", "", 0, 0},
    {"And", "b[7] b[7]", "", 0, 0},
    {"And", "b[2,3,4,5] b[3,1,5]", "", 0, 0},
    {"Or", "b[33,1000] b[1000]", "", 0, 0},
    {"Or", "b[7] b[]", "", 0, 0},
    {"Or", "b[2,3,4,5] b[3,1,5]", "", 0, 0},
    {"Xor", "b[33,1000] b[1000]", "", 0, 0},
    {"Xor", "b[4097] b[4097]", "", 0, 0},
    {"Xor", "b[2,3,4,5] b[3,1,5]", "", 0, 0},
    {"BitShift", "u8[33,1000]{0,256} u8[1000]{0,8}", "direction='LEFT'", 0, 0},
    {"BitShift", "u32[4097]{0,100000} u32[4097]{0,32}", "direction='RIGHT'", 0, 0},
    {"BitShift", "u64[7]{0,100000} u64[]{0,40}", "direction='LEFT'", 0, 0},
    {"BitwiseAnd", "i32[33,1000]{-1000,1000} i32[1000]{-1000,1000}", "", 0, 0},
    {"BitwiseAnd", "u8[4097]{0,256} u8[]{0,256}", "", 0, 0},
    {"BitwiseOr", "i32[33,1000]{-1000,1000} i32[1000]{-1000,1000}", "", 0, 0},
    {"BitwiseOr", "i64[2,3,4,5]{-100,100} i64[3,1,5]{-100,100}", "", 0, 0},
    {"BitwiseXor", "i32[33,1000]{-1000,1000} i32[1000]{-1000,1000}", "", 0, 0},
    {"BitwiseXor", "u8[7]{0,256} u8[7]{0,256}", "", 0, 0},

    /* ---------------------------------------------------------------- elementwise: variadic, Where, Cast */
    VARIADIC("Sum"),
    VARIADIC("Mean"),
    VARIADIC("Min"),
    VARIADIC("Max"),
    {"Min", "i64[33,65]{-9,9} i64[65]{-9,9}", "", 0, 0},
    {"Max", "i32[7]{-9,9} i32[7]{-9,9} i32[]{-9,9}", "", 0, 0},
    {"Where", "b[33,1000] f[33,1000] f[1000]", "", 0, 0},
    {"Where", "b[1000] f[33,1] f[]", "", 0, 0},
    {"Where", "b[2,3,5,7,11] f[2,1,5,1,11] f[11]", "", 0, 0},
    {"Where", "b[7] i64[7]{-5,5} i64[7]{-5,5}", "", 0, 0},
    {"Where", "b[1,1,128,128] Kf[] f[2,12,128,128]", "", 0, 0},
    {"Cast", "f[33,1000]{-100,100}", "to=7", 0, 0},
    {"Cast", "f[4097]{-100,100}", "to=6", 0, 0},
    {"Cast", "f[33,1000]{-10,10}", "to=10", 0, 0},
    {"Cast", "f[7]{-10,10}", "to=16", 0, 0},
    {"Cast", "fi[33,65]{-2,2}", "to=9", 0, 0},
    {"Cast", "f[33,1000]", "to=1", 0, 0},
    {"Cast", "i64[33,1000]{-1000,1000}", "to=1", 0, 0},
    {"Cast", "b[4097]", "to=1", 0, 0},
    {"Cast", "f16[33,65]", "to=1", 0, 0},
    {"Cast", "i32[7]{-9,9}", "to=7", 0, 0},
    {"Cast", "i64[2,3,5,7,11]{-100,100}", "to=6", 0, 0},
    {"Cast", "fi[7]{0,200}", "to=2", 0, 0},
    {"Cast", "u8[33,65]{0,256}", "to=1", 0, 0},
    {"Cast", "i64[33,65]{0,3}", "to=9", 0, 0},
    {"CastLike", "f[33,1000]{-100,100} i64[1]", "", 0, 0},
    {"CastLike", "i64[4097]{-9,9} f[1]", "", 0, 0},

    /* ---------------------------------------------------------------- nn: convolution */
    {"Conv", "f[1,3,7,7] Kf[4,3,3,3] Kf[4]", "pads=[1,1,1,1]", 0, 0},
    {"Conv", "f[2,8,33,33] Kf[16,8,3,3]", "strides=[2,2]", 0, 0},
    {"Conv", "f[1,32,17,17] Kf[32,1,3,3] Kf[32]", "group=32 pads=[1,1,1,1]", 0, 0},
    {"Conv", "f[4,64,14,14] Kf[128,64,1,1] Kf[128]", "", 0, 0},
    {"Conv", "f[2,4,1000] Kf[8,4,5] Kf[8]", "pads=[2,2]", 0, 0},
    {"Conv", "f[1,2,5,6,7] Kf[3,2,3,3,3]", "", 0, 0},
    {"Conv", "f[1,4,15,15] Kf[6,4,3,3]", "dilations=[2,2] pads=[1,0,2,1]", 0, 0},
    {"Conv", "f[2,6,9,9] Kf[4,3,3,3]", "group=2 auto_pad='SAME_UPPER' strides=[2,2]", 0, 0},
    {"Conv", "f[1,3,224,224] Kf[64,3,7,7] Kf[64]", "strides=[2,2] pads=[3,3,3,3]", 0, 0},
    {"Conv", "f[2,3,7,7] f[4,3,3,3] f[4]", "", 0, 0},
    {"Conv", "f[1,5,1,4097] Kf[3,5,1,3]", "", 0, 0},
    {"Conv", "f[8,256,14,14] Kf[256,256,3,3] Kf[256]", "pads=[1,1,1,1]", 0, 0},
    {"ConvTranspose", "f[1,4,7,7] Kf[4,8,3,3] Kf[8]", "strides=[2,2] pads=[1,1,1,1] output_padding=[1,1]", 0, 0},
    {"ConvTranspose", "f[2,8,5,5] Kf[8,2,4,4]", "group=2 strides=[2,2] pads=[1,1,1,1]", 0, 0},
    {"ConvTranspose", "f[2,3,33] Kf[3,5,4]", "strides=[3]", 0, 0},
    {"ConvTranspose", "f[1,2,3,4,5] Kf[2,3,2,2,2]", "strides=[2,2,2]", 0, 0},
    {"ConvTranspose", "f[1,6,9,9] Kf[6,4,3,3] Kf[4]", "dilations=[2,2]", 0, 0},
    {"ConvTranspose", "f[1,3,5,5] Kf[3,2,3,3]", "strides=[2,2] output_shape=[11,11]", 0, 0},
    {"ConvTranspose", "f[2,64,16,16] Kf[64,32,2,2] Kf[32]", "strides=[2,2]", 0, 0},

    /* ---------------------------------------------------------------- nn: pooling */
    POOL("MaxPool", ""),
    {"MaxPool", "f[1,3,17,17]", "kernel_shape=[3,3] dilations=[2,2]", 0, 0},
    {"MaxPool", "f[1,3,9,9]", "kernel_shape=[3,3] strides=[2,2]", 2, 0},
    POOL("AveragePool", ""),
    {"AveragePool", "f[1,3,32,32]", "kernel_shape=[3,3] strides=[2,2] pads=[1,1,1,1] count_include_pad=1", 0, 0},
    {"AveragePool", "f[2,16,33,33]", "kernel_shape=[3,3] strides=[2,2] pads=[1,1,1,1] ceil_mode=1", 0, 0},
    /* the CUDA 2-D fast path (NCHW, dilation 1): odd sizes, ceil_mode, asymmetric and auto pads,
     * strides above the kernel, a kernel wider than the input, windows wholly in the padding, NaN,
     * Indices in both storage orders, float16 models */
    {"MaxPool", "f[2,3,17,19]", "kernel_shape=[3,3] strides=[2,2] pads=[1,1,1,1]", 0, 0},
    {"MaxPool", "f[1,8,112,112]", "kernel_shape=[3,3] strides=[2,2] pads=[1,1,1,1] ceil_mode=1", 0, 0},
    /* int8 / uint8 (opset 12): the 2-D path with Indices, and the n-D path */
    {"MaxPool", "i8[2,3,17,19]{-128,128}", "kernel_shape=[3,3] strides=[2,2] pads=[1,1,1,1]", 2, 0},
    {"MaxPool", "u8[1,2,9,9,5]{0,256}", "kernel_shape=[3,2,2] strides=[2,2,1]", 0, 0},
    {"MaxPool", "f[2,3,17,19]", "kernel_shape=[3,4] strides=[2,3] pads=[1,0,2,1] ceil_mode=1", 0, 0},
    {"MaxPool", "f[1,3,9,10]", "kernel_shape=[4,4] strides=[2,3] auto_pad='SAME_LOWER'", 0, 0},
    {"MaxPool", "f[1,2,20,21]", "kernel_shape=[2,3] strides=[4,5]", 0, 0},
    {"MaxPool", "f[1,2,3,3]", "kernel_shape=[5,5] pads=[2,2,2,2]", 0, 0},
    {"MaxPool", "f[1,2,4,5]", "kernel_shape=[2,2] pads=[3,3,3,3]", 0, 0},
    {"MaxPool", "fs[2,3,17,19]", "kernel_shape=[3,3] strides=[2,2] pads=[1,1,1,1]", 0, 0},
    {"MaxPool", "fs[2,3,17,19]", "kernel_shape=[3,3] strides=[2,2] pads=[1,1,1,1]", 2, 0},
    {"MaxPool", "f[2,3,17,19]", "kernel_shape=[3,3] strides=[2,2] pads=[1,1,1,1] ceil_mode=1", 2, 0},
    {"MaxPool", "f[2,3,17,19]", "kernel_shape=[3,2] strides=[2,2] pads=[1,0,1,1] storage_order=1", 2, 0},
    {"MaxPool", "f16[2,3,17,19]", "kernel_shape=[3,3] strides=[2,2] pads=[1,1,1,1]", 0, 0},
    {"AveragePool", "f[2,3,17,19]", "kernel_shape=[3,4] strides=[2,3] pads=[1,0,2,1]", 0, 0},
    {"AveragePool", "f[2,3,17,19]", "kernel_shape=[3,4] strides=[2,3] pads=[1,0,2,1] count_include_pad=1", 0, 0},
    {"AveragePool", "f[1,4,10,13]", "kernel_shape=[3,3] strides=[2,2] pads=[1,1,0,0] ceil_mode=1 count_include_pad=1", 0, 0},
    {"AveragePool", "f[1,4,10,13]", "kernel_shape=[3,3] strides=[2,2] pads=[1,1,0,0] ceil_mode=1", 0, 0},
    {"AveragePool", "f[1,8,112,112]", "kernel_shape=[3,3] strides=[2,2] pads=[1,1,1,1] ceil_mode=1", 0, 0},
    {"AveragePool", "f[1,3,9,10]", "kernel_shape=[4,4] strides=[2,3] auto_pad='SAME_UPPER' count_include_pad=1", 0, 0},
    {"AveragePool", "f[1,2,4,5]", "kernel_shape=[2,2] pads=[3,3,3,3]", 0, 0},
    {"AveragePool", "f[1,2,4,5]", "kernel_shape=[2,2] pads=[3,3,3,3] count_include_pad=1", 0, 0},
    {"AveragePool", "f16[2,3,17,19]", "kernel_shape=[3,3] strides=[2,2] pads=[1,1,1,1] count_include_pad=1", 0, 0},
    POOL("LpPool", " p=2"),
    {"LpPool", "f[1,3,16,16]", "kernel_shape=[2,2] strides=[2,2] p=1", 0, 0},
    GLOBAL_POOL("GlobalAveragePool", ""),
    GLOBAL_POOL("GlobalMaxPool", ""),
    GLOBAL_POOL("GlobalLpPool", "p=2"),

    /* ---------------------------------------------------------------- nn: matrix products */
    {"Gemm", "f[33,65] Kf[65,17] Kf[17]", "", 0, 0},
    {"Gemm", "f[65,33] Kf[17,65] Kf[17]", "transA=1 transB=1 alpha=0.5 beta=2.0", 0, 0},
    {"Gemm", "f[1,4097] Kf[7,4097] Kf[7]", "transB=1", 0, 0},
    {"Gemm", "f[33,65] f[65,17] f[33,17]", "", 0, 0},
    {"Gemm", "f[33,65] Kf[65,17] Kf[33,1]", "", 0, 0},
    {"Gemm", "f[33,65] Kf[65,17] Kf[]", "beta=0.5", 0, 0},
    {"Gemm", "f[33,65] Kf[65,17]", "", 0, 0},
    {"Gemm", "f[128,768] Kf[3072,768] Kf[3072]", "transB=1", 0, 0},
    {"Gemm", "f[1,1] Kf[1,1] Kf[1]", "", 0, 0},
    {"Gemm", "f[65,33] f[65,17]", "transA=1", 0, 0},
    {"MatMul", "f[1,1] Kf[1,1]", "", 0, 0},
    {"MatMul", "f[33,65] Kf[65,17]", "", 0, 0},
    {"MatMul", "f[4097] f[4097]", "", 0, 0},
    {"MatMul", "f[7] f[7,33]", "", 0, 0},
    {"MatMul", "f[33,7] f[7]", "", 0, 0},
    {"MatMul", "f[2,3,33,65] Kf[65,17]", "", 0, 0},
    {"MatMul", "f[2,1,7,9] f[3,9,5]", "", 0, 0},
    {"MatMul", "f[3,4097] Kf[4097,5]", "", 0, 0},
    {"MatMul", "f[256,1024] Kf[1024,1000]", "", 0, 0},
    {"MatMul", "f[2,12,128,64] f[2,12,64,128]", "", 0, 0},
    {"MatMul", "f[4097,1] f[1,33]", "", 0, 0},
    {"MatMul", "f[1,128,1600] Kf[1600,4800]", "", 0, 0},
    {"MatMul", "f[5,33,65] f[5,65,17]", "", 0, 0},

    /* ---------------------------------------------------------------- nn: normalization, softmax */
    {"BatchNormalization", "f[2,3,7,7] Kf[3] Kf[3] Kf[3] Kf[3]{0.5,2}", "", 0, 0},
    {"BatchNormalization", "f[4,16] Kf[16] Kf[16] Kf[16] Kf[16]{0.5,2}", "", 0, 0},
    {"BatchNormalization", "f[1,5,1000] Kf[5] Kf[5] Kf[5] Kf[5]{0.5,2}", "epsilon=0.01", 0, 0},
    {"BatchNormalization", "f[2,7,3,4,5] Kf[7] Kf[7] Kf[7] Kf[7]{0.5,2}", "", 0, 0},
    {"BatchNormalization", "f[2,3,7,7] f[3] f[3] f[3] f[3]{0.5,2}", "", 0, 0},
    {"InstanceNormalization", "f[2,3,33,33] Kf[3] Kf[3]", "", 0, 0},
    {"InstanceNormalization", "f[1,4,1000] Kf[4] Kf[4]", "epsilon=0.001", 0, 0},
    {"InstanceNormalization", "f[2,3,4,5,6] Kf[3] Kf[3]", "", 0, 0},
    {"GroupNormalization", "f[2,8,7,7] Kf[8] Kf[8]", "num_groups=4", 0, 0},
    {"GroupNormalization", "f[1,6,1000] Kf[6] Kf[6]", "num_groups=3", 0, 0},
    {"GroupNormalization", "f[2,4,5,5] Kf[4] Kf[4]", "num_groups=1 epsilon=0.001", 0, 0},
    {"LayerNormalization", "f[33,1000] Kf[1000] Kf[1000]", "", 0, 0},
    {"LayerNormalization", "f[2,128,768] Kf[768] Kf[768]", "epsilon=1e-12", 0, 0},
    {"LayerNormalization", "f[7,4097] Kf[4097]", "", 0, 0},
    {"LayerNormalization", "f[2,3,4,5] Kf[4,5] Kf[4,5]", "axis=2", 0, 0},
    {"LayerNormalization", "f[4,3,5] Kf[3,5]", "axis=1", 0, 0},
    {"LayerNormalization", "f[1] Kf[1] Kf[1]", "", 0, 0},
    {"LayerNormalization", "f[2,7,1600] f[1600] f[1600]", "epsilon=1e-5", 0, 0},
    {"RMSNormalization", "f[33,1000] Kf[1000]", "", 0, 23},
    {"RMSNormalization", "f[2,7,4097] Kf[4097]", "epsilon=1e-6", 0, 23},
    {"RMSNormalization", "f[2,3,4,5] Kf[4,5]", "axis=2", 0, 23},
    /* the CUDA fast path (norm_rows_fast: rows <= 8192, len a multiple of the 16-byte vector, scale
     * and bias per element or scalar): one warp per row (<= 1024), one block per row (> 1024), its
     * edges (partial last vectors per lane, 8192, scalar scale, Mean/InvStdDev outputs), and the
     * fallback (len not a multiple of 8, > 8192) */
    {"LayerNormalization", "f[4096,768] Kf[768] Kf[768]", "epsilon=1e-12", 0, 0},
    {"LayerNormalization", "f[3,1000]{-3,5} Kf[1000] Kf[1000]", "", 0, 0},
    {"LayerNormalization", "f[3,1001] Kf[1001] Kf[1001]", "", 0, 0},
    {"LayerNormalization", "f[2,5,4096]{2,4} Kf[4096] Kf[4096]", "", 0, 0},
    {"LayerNormalization", "f[3,8192] Kf[8192] Kf[8192]", "", 0, 0},
    {"LayerNormalization", "f[2,8200] Kf[8200] Kf[8200]", "", 0, 0},
    {"LayerNormalization", "f[9,8] Kf[8] Kf[8]", "", 0, 0},
    {"LayerNormalization", "f[5,1032] f[1032] f[1032]", "", 0, 0},
    {"LayerNormalization", "f[4,768] Kf[1] Kf[768]", "", 0, 0},
    {"LayerNormalization", "f[6,2,384] Kf[2,384] Kf[2,384]", "axis=1", 3, 0},
    {"RMSNormalization", "f[7,2048] Kf[2048]", "epsilon=1e-6", 0, 23},
    {"RMSNormalization", "f[37,512] Kf[512]", "", 0, 23},
    {"RMSNormalization", "f[3,12] Kf[12]", "", 0, 23},
    SOFTMAX("Softmax"),
    SOFTMAX("LogSoftmax"),
    SOFTMAX("Hardmax"),
    {"LRN", "f[2,8,7,7]", "size=3 alpha=0.0001 beta=0.75 bias=1.0", 0, 0},
    {"LRN", "f[1,5,33,33]{-3,3}", "size=5 alpha=0.01 beta=0.5 bias=2.0", 0, 0},
    {"LRN", "f[2,7,33]{-2,2}", "size=4 alpha=0.001 beta=0.6", 0, 0},
    {"LRN", "f[1,3,4,5,6]", "size=7 alpha=0.5 beta=1.0 bias=1.5", 0, 0},
    {"LRN", "f[2,16,9,9]{-4,4}", "size=1", 0, 0},
    {"Hardmax", "f[2,3,4,5]", "axis=2", 0, 11},
    {"Hardmax", "fi[5,7,9]{-1,1}", "axis=1", 0, 13},
    {"Hardmax", "f[3,4097]{-5,5}", "axis=-1", 0, 13},
    {"Hardmax", "f[2,3,4]", "", 0, 1},

    /* ---------------------------------------------------------------- reduce */
    REDUCE("ReduceSum", "f", ""),
    REDUCE("ReduceMean", "f", ""),
    REDUCE("ReduceMax", "f", ""),
    REDUCE("ReduceMin", "f", ""),
    REDUCE("ReduceL1", "f", ""),
    REDUCE("ReduceL2", "f", ""),
    REDUCE("ReduceSumSquare", "f", ""),
    REDUCE("ReduceLogSum", "f", "{0.1,2}"),
    REDUCE("ReduceLogSumExp", "f", "{-5,5}"),
    /* products of up to 4097 factors: values near 1 keep them inside float16's range */
    REDUCE("ReduceProd", "f", "{0.95,1.05}"),
    {"ReduceSum", "f[33,65] Ki64[0]", "noop_with_empty_axes=1", 0, 0},
    {"ReduceSum", "i64[33,65]{-100,100} Ki64[1]=1", "", 0, 0},
    {"ReduceMax", "i64[33,65]{-100,100} Ki64[1]=1", "", 0, 0},
    {"ReduceMin", "i32[33,65]{-100,100} Ki64[1]=0", "keepdims=0", 0, 0},
    {"ReduceMean", "f[2,128,768] Ki64[1]=-1", "", 0, 0},
    {"ArgMax", "f[33,1000]", "axis=1", 0, 0},
    {"ArgMax", "f[33,1000]", "axis=0 keepdims=0", 0, 0},
    {"ArgMax", "f[4097]", "", 0, 0},
    {"ArgMax", "fi[7,33,65]{-3,3}", "axis=2 select_last_index=1", 0, 0},
    {"ArgMax", "fi[7,33,65]{-3,3}", "axis=1", 0, 0},
    {"ArgMax", "i64[33,65]{-9,9}", "axis=1", 0, 0},
    {"ArgMin", "f[33,1000]", "axis=1", 0, 0},
    {"ArgMin", "f[33,1000]", "axis=0 keepdims=0", 0, 0},
    {"ArgMin", "f[4097]", "", 0, 0},
    {"ArgMin", "fi[7,33,65]{-3,3}", "axis=2 select_last_index=1", 0, 0},
    {"ArgMin", "fi[7,33,65]{-3,3}", "axis=1", 0, 0},
    {"TopK", "f[33,1000] Ki64[1]=5", "", 2, 0},
    {"TopK", "f[33,1000] Ki64[1]=7", "axis=0 largest=0", 2, 0},
    {"TopK", "f[4097] Ki64[1]=100", "", 2, 0},
    {"TopK", "fi[7,65]{-3,3} Ki64[1]=10", "", 2, 0},
    {"TopK", "f[2,3,4,5] Ki64[1]=2", "axis=1", 2, 0},
    {"TopK", "i64[33,65]{-1000,1000} Ki64[1]=4", "", 2, 0},
    {"TopK", "f[7,33] Ki64[1]=1", "", 2, 0},
    {"TopK", "f[7,33] Ki64[1]=33", "", 2, 0},
    {"TopK", "f[1,50257] Ki64[1]=50", "", 2, 0},
    {"CumSum", "f[33,1000] Ki64[]=1", "", 0, 0},
    {"CumSum", "f[33,1000] Ki64[]=0", "exclusive=1", 0, 0},
    {"CumSum", "f[4097] Ki32[]=0", "reverse=1", 0, 0},
    {"CumSum", "f[2,3,4,5] Ki64[]=-2", "exclusive=1 reverse=1", 0, 0},
    {"CumSum", "i64[33,65]{-9,9} Ki64[]=1", "", 0, 0},
    {"Trilu", "f[5,7]", "", 0, 0},
    {"Trilu", "f[5,7] Ki64[]=1", "", 0, 0},
    {"Trilu", "f[33,65] Ki64[]=-2", "upper=0", 0, 0},
    {"Trilu", "f[2,3,33,65]", "upper=0", 0, 0},
    {"Trilu", "i64[7,7]{-9,9} Ki64[]=0", "", 0, 0},
    {"Trilu", "f[4097,3] Ki64[]=-1", "", 0, 0},
    {"Range", "f[]=0.0 f[]=10.0 f[]=0.5", "", 0, 0},
    {"Range", "i64[]=-5 i64[]=100 i64[]=3", "", 0, 0},
    {"ConstantOfShape", "i64[2]=3,5", "value=<f:1.5>", 0, 0},
    {"ConstantOfShape", "i64[3]=2,3,4", "value=<i64:7>", 0, 0},
    {"OneHot", "i64[7]{0,10} Ki64[]=10 Kf[2]=0.0,1.0", "", 0, 0},
    {"OneHot", "i64[33,65]{-5,5} Ki64[1]=5 Kf[2]=-1.0,2.0", "axis=1", 0, 0},
    {"OneHot", "i32[4097]{0,16} Ki64[]=16 Ki64[2]=0,1", "", 0, 0},
    {"OneHot", "i32[5,7]{-6,6} Ki64[]=6 Kf[2]=0.5,3.0", "axis=0", 0, 0},
    {"OneHot", "i64[2,3,5]{-4,9} Ki32[1]=7 Ki32[2]=-1,1", "axis=-2", 0, 0},
    {"OneHot", "i64[7,3]{-4,6} Ki64[]=4 Kf[2]=0.0,1.0", "axis=1", 0, 9},
    {"OneHot", "f[3,5]{-3,5} Kf[]=5.0 Ki64[2]=3,9", "", 0, 0},
    {"OneHot", "u8[33]{0,12} Ki64[]=9 Ki64[2]=0,1", "", 0, 0},
    {"NonZero", "fi[33,65]{0,2}", "", 0, 0},
    {"NonZero", "b[7]", "", 0, 0},
    {"NonZero", "i64[4097]{0,3}", "", 0, 0},
    /* a NonZero of a constant is evaluated on the host by the cuda backend */
    {"NonZero", "Kfi[7,5]{0,2}", "", 0, 0},
    {"NonZero", "Ki64[3,4,5]{0,2}", "", 0, 0},
    {"EyeLike", "f[5,7]", "", 0, 0},
    {"EyeLike", "f[33,65]", "k=3", 0, 0},
    {"EyeLike", "i64[7,7]{0,1}", "k=-2", 0, 0},
    {"EyeLike", "f[4,4]", "dtype=7", 0, 0},
    {"EyeLike", "f[9,4]", "k=-3", 0, 0},
    {"EyeLike", "f[5,7]", "k=10", 0, 0},
    {"EyeLike", "f[5,7]", "k=-5", 0, 0},
    {"EyeLike", "i32[33,65]", "k=1", 0, 0},
    {"EyeLike", "f[6,6]", "dtype=9", 0, 0},
    {"EyeLike", "u8[3,8]", "dtype=1 k=2", 0, 0},
    {"Einsum", "f[33,65] f[65,17]", "equation='ij,jk->ik'", 0, 0},
    {"Einsum", "f[2,7,9] f[2,9,5]", "equation='bij,bjk->bik'", 0, 0},
    {"Einsum", "f[2,3,7,8] f[2,3,9,8]", "equation='bhid,bhjd->bhij'", 0, 0},
    {"Einsum", "f[33,65]", "equation='ij->ji'", 0, 0},
    {"Einsum", "f[7,7]", "equation='ii->i'", 0, 0},
    {"Einsum", "f[33,65]", "equation='ij->'", 0, 0},
    {"Einsum", "f[5] f[7]", "equation='i,j->ij'", 0, 0},
    {"Einsum", "f[2,7,9] f[2,5,9]", "equation='bij,bkj->bik'", 0, 0},
    {"Einsum", "f[9,7] f[9,5]", "equation='ji,jk->ik'", 0, 0},
    {"Einsum", "f[33,65] f[33,65]", "equation='ij,ij->i'", 0, 0},
    {"Einsum", "f[3,1,7,9] f[2,9,5]", "equation='...ij,...jk->...ik'", 0, 0},
    {"Einsum", "f[4097] f[4097]", "equation='i,i'", 0, 0},
    {"Einsum", "f[5,7] f[7,3] f[3,4]", "equation='ij,jk,kl->il'", 0, 0},
    {"Einsum", "f[3,6,6]", "equation='bii->bi'", 0, 0},
    {"Einsum", "f[2,3,5] f[5,7]", "equation='bij,jk'", 0, 0},
    {"Einsum", "f[2,3,4,5]", "equation='abcd->dbca'", 0, 0},
    {"Einsum", "i64[7,9]{-5,5} i64[9,4]{-5,5}", "equation='ij,jk->ik'", 0, 0},
    {"Einsum", "i32[5,6]{-5,5}", "equation='ij->j'", 0, 0},

    /* ---------------------------------------------------------------- shape and movement */
    {"Shape", "f[2,3,5]", "", 0, 0},
    {"Shape", "f[2,3,5,7]", "start=1 end=-1", 0, 0},
    {"Shape", "i64[4097]", "", 0, 0},
    {"Size", "f[2,3,5]", "", 0, 0},
    {"Size", "f[0,5]", "", 0, 0},
    {"Reshape", "f[2,3,4] Ki64[2]=4,-1", "", 0, 0},
    {"Reshape", "f[33,1000] Ki64[3]=0,10,100", "", 0, 0},
    {"Reshape", "i64[7,6]{0,9} Ki64[1]=-1", "", 0, 0},
    {"Reshape", "f[2,3,5,7,11] Ki64[2]=30,77", "", 0, 0},
    {"Reshape", "f[4097] Ki64[3]=1,4097,1", "", 0, 0},
    {"Reshape", "f[2,128,768] Ki64[4]=2,128,12,64", "", 0, 0},
    {"Flatten", "f[2,3,4,5]", "axis=1", 0, 0},
    {"Flatten", "f[2,3,4,5]", "axis=0", 0, 0},
    {"Flatten", "f[2,3,4,5]", "axis=-1", 0, 0},
    {"Flatten", "f[2,3,5,7,11]", "axis=3", 0, 0},
    {"Flatten", "i64[4097]{0,9}", "", 0, 0},
    {"Squeeze", "f[3,1,5] Ki64[1]=1", "", 0, 0},
    {"Squeeze", "f[1,33,1,65]", "", 0, 0},
    {"Squeeze", "f[1,4097] Ki64[1]=-2", "", 0, 0},
    {"Squeeze", "i64[1,7]{0,9} Ki64[1]=0", "", 0, 0},
    {"Squeeze", "f[3,1,5]", "axes=[1]", 0, 11},
    {"Unsqueeze", "f[33,65] Ki64[2]=0,3", "", 0, 0},
    {"Unsqueeze", "f[4097] Ki64[1]=-1", "", 0, 0},
    {"Unsqueeze", "f[] Ki64[1]=0", "", 0, 0},
    {"Unsqueeze", "b[7] Ki64[1]=1", "", 0, 0},
    {"Unsqueeze", "f[33,65]", "axes=[0]", 0, 11},
    {"Transpose", "f[33,1000]", "perm=[1,0]", 0, 0},
    {"Transpose", "f[2,3,7,9]", "perm=[0,2,3,1]", 0, 0},
    {"Transpose", "f[2,3,7,9]", "perm=[0,3,1,2]", 0, 0},
    {"Transpose", "f[7,33,65]", "perm=[2,0,1]", 0, 0},
    {"Transpose", "f[2,3,4,5,6]", "perm=[0,3,1,4,2]", 0, 0},
    {"Transpose", "f[33,65]", "", 0, 0},
    {"Transpose", "f[1,4097]", "perm=[1,0]", 0, 0},
    {"Transpose", "f[1024,4097]", "perm=[1,0]", 0, 0},
    {"Transpose", "i64[7,9]{0,9}", "perm=[1,0]", 0, 0},
    {"Transpose", "f[2,12,128,64]", "perm=[0,2,1,3]", 0, 0},
    /* a few planes interleaved (an RGB image to NHWC: mv_interleave_kernel), C = 2..7, odd sizes */
    {"Transpose", "f[2,3,37,41]", "perm=[0,2,3,1]", 0, 0},
    {"Transpose", "f[3,5,1000]", "perm=[0,2,1]", 0, 0},
    {"Transpose", "f[7,2,33]", "perm=[0,2,1]", 0, 0},
    {"Transpose", "i64[4,7,65]{0,99}", "perm=[0,2,1]", 0, 0},
    {"Transpose", "u8[2,3,50,64]{0,255}", "perm=[0,2,3,1]", 0, 0},
    {"Transpose", "b[5,7]", "perm=[1,0]", 0, 0},
    {"Transpose", "f[7]", "", 0, 0},
    {"Concat", "f[33,65] f[7,65]", "axis=0", 0, 0},
    {"Concat", "f[2,3,5] f[2,7,5] f[2,1,5]", "axis=1", 0, 0},
    {"Concat", "f[33,1000] f[33,1]", "axis=-1", 0, 0},
    {"Concat", "i64[3]{0,9} i64[4097]{0,9}", "axis=0", 0, 0},
    {"Concat", "f[2,3,4,5,6] f[2,3,4,5,1]", "axis=4", 0, 0},
    {"Concat", "f[1] f[1] f[1] f[1] f[1] f[1] f[1] f[1]", "axis=0", 0, 0},
    {"Concat", "f[0,5] f[3,5]", "axis=0", 0, 0},
    {"Concat", "f[2,12,128,64] Kf[2,12,1,64]", "axis=2", 0, 0},
    {"Split", "f[4,10] Ki64[3]=2,3,5", "axis=1", 3, 0},
    {"Split", "f[6,5]", "axis=0 num_outputs=3", 3, 0},
    {"Split", "f[7,33]", "num_outputs=2", 2, 0},
    {"Split", "f[2,4097] Ki64[2]=4000,97", "axis=-1", 2, 0},
    {"Split", "f[2,128,2304]", "axis=2 num_outputs=3", 3, 0},
    {"Split", "f[4,10]", "axis=1 split=[2,8]", 2, 11},
    {"Split", "f[6,5]", "", 2, 13},
    {"Expand", "f[3,1] Ki64[3]=2,3,5", "", 0, 0},
    {"Expand", "f[1] Ki64[2]=33,1000", "", 0, 0},
    {"Expand", "f[7,1,5] Ki64[3]=1,6,1", "", 0, 0},
    {"Expand", "i64[1,65]{0,9} Ki64[2]=33,65", "", 0, 0},
    {"Expand", "f[4097] Ki64[2]=3,1", "", 0, 0},
    {"Expand", "b[1,7] Ki64[2]=5,7", "", 0, 0},
    {"Tile", "f[2,3] Ki64[2]=3,2", "", 0, 0},
    {"Tile", "f[2,3,4] Ki64[3]=1,1,5", "", 0, 0},
    {"Tile", "i64[7]{0,9} Ki64[1]=3", "", 0, 0},
    {"Tile", "f[1,4097] Ki64[2]=2,1", "", 0, 0},
    {"Identity", "f[33,1000]", "", 0, 0},
    {"Identity", "i64[7]{0,9}", "", 0, 0},
    {"Identity", "b[4097]", "", 0, 0},
    {"Dropout", "f[33,1000]", "", 0, 0},
    {"Dropout", "f[7] Kf[]=0.5", "", 2, 0},
    {"Dropout", "f[33,65]", "ratio=0.3", 0, 11},
    {"DepthToSpace", "f[1,8,3,3]", "blocksize=2", 0, 0},
    {"DepthToSpace", "f[2,8,3,5]", "blocksize=2 mode='CRD'", 0, 0},
    {"DepthToSpace", "f[1,27,4,4]", "blocksize=3", 0, 0},
    {"SpaceToDepth", "f[1,2,6,6]", "blocksize=2", 0, 0},
    {"SpaceToDepth", "f[2,3,9,12]", "blocksize=3", 0, 0},
    {"Slice", "f[33,1000] Ki64[2]=1,10 Ki64[2]=30,-10 Ki64[2]=0,1", "", 0, 0},
    {"Slice", "f[33,1000] Ki64[1]=-1 Ki64[1]=-1000000 Ki64[1]=1 Ki64[1]=-3", "", 0, 0},
    {"Slice", "f[4097] Ki64[1]=0 Ki64[1]=9223372036854775807 Ki64[1]=0 Ki64[1]=7", "", 0, 0},
    {"Slice", "f[2,3,4,5,6] Ki64[3]=1,0,1 Ki64[3]=2,3,5 Ki64[3]=0,2,4 Ki64[3]=1,2,2", "", 0, 0},
    {"Slice", "i64[7,9]{0,9} Ki64[1]=2 Ki64[1]=5", "", 0, 0},
    {"Slice", "f[2,12,128,64] Ki64[1]=32 Ki64[1]=64 Ki64[1]=3", "", 0, 0},
    {"Slice", "f[5,7] Ki64[1]=10 Ki64[1]=20", "", 0, 0},
    {"Slice", "f[33,65]", "starts=[1] ends=[30] axes=[0]", 0, 9},
    {"Gather", "f[50,16] i64[7]{0,50}", "", 0, 0},
    {"Gather", "f[33,1000] i64[3,2]{-1000,1000}", "axis=1", 0, 0},
    {"Gather", "f[33,65] i64[]=5", "", 0, 0},
    {"Gather", "f[7,33,65] i32[4,5]{0,33}", "axis=1", 0, 0},
    {"Gather", "i64[9]{0,100} i64[4]{0,9}", "", 0, 0},
    {"Gather", "Kf[50257,64] i64[1,128]{0,50257}", "", 0, 0},
    {"Gather", "f[33,65] Ki64[2]=3,1", "", 0, 0},
    {"GatherElements", "f[33,65] i64[33,7]{0,65}", "axis=1", 0, 0},
    {"GatherElements", "f[5,65] i64[9,65]{-5,5}", "axis=0", 0, 0},
    {"GatherElements", "f[2,3,4,5] i64[2,3,4,2]{0,5}", "axis=3", 0, 0},
    {"GatherND", "f[5,6,7] i64[3,2]{0,5}", "", 0, 0},
    {"GatherND", "f[4,5,6] i64[4,3,1]{0,5}", "batch_dims=1", 0, 0},
    {"GatherND", "f[33,65] i64[7,2]{0,33}", "", 0, 0},
    {"GatherND", "i64[5,6]{0,9} i64[4,1]{0,5}", "", 0, 0},
    /* scatter indices are fixed: a repeated index without a reduction has no defined result */
    {"ScatterND", "f[4,5,6] Ki64[2,1]=1,3 f[2,5,6]", "", 0, 0},
    {"ScatterND", "f[33,65] i64[3,2]=0,1,5,7,32,64 f[3]", "", 0, 0},
    {"ScatterND", "f[8] Ki64[4,1]=1,1,3,3 f[4]", "reduction='add'", 0, 0},
    {"ScatterND", "f[8] Ki64[4,1]=1,1,3,7 f[4]", "reduction='max'", 0, 0},
    {"ScatterElements", "f[5,3] Ki64[2,3]=0,4,2,3,1,0 f[2,3]", "axis=0", 0, 0},
    {"ScatterElements", "f[3,7] Ki64[3,2]=1,6,0,3,5,5 f[3,2]", "axis=1 reduction='add'", 0, 0},
    {"ScatterElements", "f[33,65] i64[1,65]{0,33} f[1,65]", "axis=0", 0, 0},
    {"Scatter", "f[5,3] Ki64[2,3]=0,4,2,3,1,0 f[2,3]", "axis=0", 0, 10},
    {"Pad", "f[2,3,7,7] Ki64[8]=0,0,1,2,0,0,2,1 Kf[]=0.5", "", 0, 0},
    {"Pad", "f[2,3,7,7] Ki64[8]=0,0,2,2,0,0,2,2", "mode='reflect'", 0, 0},
    {"Pad", "f[2,3,7,7] Ki64[8]=0,0,1,3,0,0,3,1", "mode='edge'", 0, 0},
    {"Pad", "f[2,3,7,7] Ki64[8]=0,0,2,2,0,0,2,2", "mode='wrap'", 0, 0},
    {"Pad", "f[33,1000] Ki64[4]=-1,3,2,-5", "", 0, 0},
    {"Pad", "f[4097] Ki64[2]=5,0", "", 0, 0},
    {"Pad", "f[2,3,4,5] Ki64[4]=1,1,2,0 - Ki64[2]=1,3", "", 0, 0},
    {"Pad", "i64[7,9]{0,9} Ki64[4]=1,1,1,1 Ki64[]=-1", "", 0, 0},
    {"Pad", "f[2,3,7,7]", "pads=[0,0,1,1,0,0,1,1] value=1.5", 0, 2},
    /* the CUDA Pad's merged axes and its constant last-axis row kernel (one store of 16, 8, 4 or
     * element bytes per thread), over several blocks: an NHWC stem channel pad 3 -> 8, odd rows,
     * a cropped last axis with a constant, leading-axis pads (merged into one axis), 8-byte and
     * 1-byte data; then the per-element kernel on merged axes in the other modes */
    {"Pad", "f16[8,30,30,3] Ki64[8]=0,0,0,0,0,0,0,5", "", 0, 0},
    {"Pad", "f[8,30,30,3] Ki64[8]=0,0,0,0,0,0,0,5", "", 0, 0},
    {"Pad", "f[37,41,5] Ki64[6]=0,0,2,0,0,3", "", 0, 0},
    {"Pad", "f16[3,333,7] Ki64[6]=0,0,1,0,0,1", "", 0, 0},
    {"Pad", "f[65,300,6] Ki64[6]=0,0,-1,0,0,3 Kf[]=0.25", "", 0, 0},
    {"Pad", "f[5,40,33] Ki64[6]=2,0,0,1,0,0 Kf[]=-2.0", "", 0, 0},
    {"Pad", "f[6,5,40,9] Ki64[8]=1,0,2,0,0,0,1,0", "", 0, 0},
    {"Pad", "i64[300,5]{0,9} Ki64[4]=0,1,0,2 Ki64[]=-1", "", 0, 0},
    {"Pad", "u8[513,3]{0,200} Ki64[4]=0,0,0,5", "", 0, 0},
    {"Pad", "f[3,5,40,20] Ki64[8]=0,0,0,3,0,0,0,2", "mode='edge'", 0, 0},
    {"Pad", "f[4,6,30,10] Ki64[8]=0,0,2,2,0,0,2,2", "mode='reflect'", 0, 0},
    {"Pad", "f[4,6,30,10] Ki64[8]=1,0,0,0,2,0,0,0", "mode='wrap'", 0, 0},
    {"Resize", "f[1,3,7,7] - Kf[4]=1.0,1.0,2.0,2.0", "mode='nearest'", 0, 0},
    {"Resize", "f[2,3,7,9] - Kf[4]=1.0,1.0,2.0,3.0", "mode='linear'", 0, 0},
    {"Resize", "f[1,3,7,7] - Kf[4]=1.0,1.0,2.0,2.0", "mode='linear' coordinate_transformation_mode='align_corners'", 0, 0},
    {"Resize", "f[1,3,7,7] - Kf[4]=1.0,1.0,2.0,2.0",
     "mode='nearest' coordinate_transformation_mode='asymmetric' nearest_mode='floor'", 0, 0},
    {"Resize", "f[1,3,8,8] - - Ki64[4]=1,3,5,11", "mode='linear'", 0, 0},
    {"Resize", "f[1,3,7,7] - Kf[4]=1.0,1.0,1.5,1.5", "mode='cubic' cubic_coeff_a=-0.75", 0, 0},
    {"Resize", "f[1,3,16,16] - Kf[4]=1.0,1.0,0.5,0.5", "mode='linear' coordinate_transformation_mode='pytorch_half_pixel'", 0, 0},
    {"Resize", "f[2,5,33] - Kf[3]=1.0,1.0,2.5", "mode='linear'", 0, 0},
    {"Resize", "f[1,2,4,5,6] - Kf[5]=1.0,1.0,2.0,2.0,2.0", "mode='nearest'", 0, 0},
    {"Upsample", "f[1,3,7,7] Kf[4]=1.0,1.0,2.0,2.0", "mode='nearest'", 0, 9},
    {"Upsample", "f[1,3,4,5] Kf[4]=1.0,1.0,2.0,3.0", "mode='linear'", 0, 9},
    /* Resize across opsets, every nearest_mode and coordinate mode, cubic variants, antialias, axes,
     * aspect-ratio policies, tf_crop_and_resize extrapolation, downscales and non-float nearest */
    {"Resize", "f[1,2,5,7] Kf[4]=1.0,1.0,1.6,2.3", "mode='nearest'", 0, 10},
    {"Resize", "f[1,2,9,11] Kf[4]=1.0,1.0,0.6,0.45", "mode='linear'", 0, 10},
    {"Resize", "f[1,3,7,9] - Kf[4]=1.0,1.0,1.7,2.2", "mode='nearest' nearest_mode='round_prefer_ceil'", 0, 11},
    {"Resize", "f[1,3,7,9] - Kf[4]=1.0,1.0,1.7,2.2", "mode='nearest' nearest_mode='ceil'", 0, 13},
    {"Resize", "f[1,3,7,9] - Kf[4]=1.0,1.0,0.7,0.45", "mode='nearest' nearest_mode='floor'", 0, 13},
    {"Resize", "f[2,3,5,5] - Kf[4]=1.0,1.0,3.0,3.0",
     "mode='nearest' coordinate_transformation_mode='tf_half_pixel_for_nn'", 0, 13},
    {"Resize", "f[2,3,5,5] - Kf[4]=1.0,1.0,3.0,3.0",
     "mode='nearest' coordinate_transformation_mode='align_corners' nearest_mode='round_prefer_ceil'", 0, 13},
    {"Resize", "f[1,2,9,7] - Kf[4]=1.0,1.0,1.5,2.5", "mode='linear' coordinate_transformation_mode='half_pixel_symmetric'", 0, 19},
    {"Resize", "f[1,2,9,7] - Kf[4]=1.0,1.0,1.5,2.5", "mode='linear' coordinate_transformation_mode='asymmetric'", 0, 13},
    {"Resize", "f[1,2,8,9] Kf[8]=0.0,0.0,0.2,0.1,1.0,1.0,0.9,1.2 - Ki64[4]=1,2,7,11",
     "mode='linear' coordinate_transformation_mode='tf_crop_and_resize' extrapolation_value=0.5", 0, 13},
    {"Resize", "f[1,2,8,9] Kf[8]=0.0,0.0,-0.1,0.1,1.0,1.0,0.9,1.3 - Ki64[4]=1,2,6,10",
     "mode='nearest' coordinate_transformation_mode='tf_crop_and_resize' extrapolation_value=-2.0", 0, 13},
    {"Resize", "f[2,3,7,11] - Kf[4]=1.0,1.0,1.3,0.7", "mode='cubic' cubic_coeff_a=-0.5 exclude_outside=1", 0, 13},
    {"Resize", "f[1,3,9,9] - Kf[4]=1.0,1.0,2.0,2.0",
     "mode='cubic' coordinate_transformation_mode='align_corners'", 0, 13},
    {"Resize", "f[1,3,7,7] - Kf[4]=1.0,1.0,3.0,3.0", "mode='cubic' coordinate_transformation_mode='pytorch_half_pixel'", 0, 13},
    {"Resize", "f[1,3,33,31] - Kf[4]=1.0,1.0,0.5,0.3", "mode='linear' antialias=1", 0, 18},
    {"Resize", "f[1,2,29,37] - Kf[4]=1.0,1.0,0.4,0.6", "mode='cubic' antialias=1", 0, 18},
    {"Resize", "f[1,2,29,37] - Kf[4]=1.0,1.0,1.4,0.6", "mode='cubic' antialias=1 exclude_outside=1", 0, 19},
    {"Resize", "f[2,3,9,13] - Kf[2]=2.0,0.5", "mode='linear' axes=[2,3]", 0, 18},
    {"Resize", "f[2,3,9,13] - - Ki64[2]=11,20", "mode='linear' axes=[-2,-1] keep_aspect_ratio_policy='not_larger'", 0, 18},
    {"Resize", "f[2,3,9,13] - - Ki64[2]=11,20", "mode='nearest' axes=[2,3] keep_aspect_ratio_policy='not_smaller'", 0, 19},
    {"Resize", "f[3,5,7] - Kf[3]=1.0,1.0,1.0", "mode='linear'", 0, 13},
    {"Resize", "f[4097] - Kf[1]=0.37", "mode='linear'", 0, 13},
    {"Resize", "i64[1,2,5,7]{-100,100} - Kf[4]=1.0,1.0,2.0,1.5", "mode='nearest'", 0, 13},
    {"Resize", "u8[1,3,6,6]{0,255} - - Ki64[4]=1,3,9,4", "mode='nearest' nearest_mode='floor'", 0, 13},
    {"Resize", "b[2,7,5] - Kf[3]=1.0,2.0,2.0", "mode='nearest'", 0, 13},
    {"Upsample", "f[1,2,5,7]", "mode='nearest' scales=[1.0,1.0,2.0,3.0]", 0, 7},
    {"Upsample", "f[1,2,5,7]", "mode='linear' scales=[1.0,1.0,1.5,2.0]", 0, 7},
    {"Upsample", "i32[2,3,5]{-9,9} Kf[3]=1.0,2.0,3.0", "mode='nearest'", 0, 9},

    /* ---------------------------------------------------------------- fused ops (src/ir/fused_ops.h) */
    {"kiln.FusedConv", "f[2,8,15,15] Kf[16,8,3,3] Kf[16]", "pads=[1,1,1,1] activation='Relu'", 0, 0},
    {"kiln.FusedConv", "f[1,16,14,14] Kf[16,16,3,3] Kf[16] f[1,16,14,14]", "pads=[1,1,1,1] activation='Relu'", 0, 0},
    {"kiln.FusedConv", "f[1,32,9,9] Kf[32,1,3,3] Kf[32]", "group=32 pads=[1,1,1,1] activation='Clip' activation_params=[0.0,6.0]", 0, 0},
    {"kiln.FusedConv", "f[2,4,11,11] Kf[8,4,3,3]", "strides=[2,2] activation='LeakyRelu' activation_params=[0.1]", 0, 0},
    {"kiln.FusedConv", "f[1,8,7,7] Kf[8,8,1,1] - f[1,8,7,7]", "", 0, 0},
    {"kiln.FusedConv", "f[2,16,7,7] Kf[24,16,1,1] Kf[24]", "activation='Silu'", 0, 0},
    {"kiln.FusedConv", "f[2,16,7,7] Kf[24,16,1,1] Kf[24]", "activation='HardSwish'", 0, 0},
    {"kiln.FusedConv", "f[1,3,33] Kf[5,3,3] Kf[5]", "pads=[1,1] activation='Sigmoid'", 0, 0},
    {"kiln.FusedConv", "f[2,6,9,9] Kf[4,3,3,3] Kf[4] f[2,4,5,5]", "group=2 strides=[2,2] pads=[1,1,1,1] activation='Gelu'", 0, 0},
    /* the fused cuDNN call (activation none or Relu): identity with a bias, Relu without one (the
     * context's zero bias), and a batch of 9 whose explicit-padding staging copy chunks it when
     * KILN_CUDA_WORKSPACE_MB=1 in f32 (7 images, then 2: both cached calls, Z at an offset) */
    {"kiln.FusedConv", "f[2,16,9,9] Kf[32,16,1,1] Kf[32]", "", 0, 0},
    {"kiln.FusedConv", "f[2,8,9,9] Kf[8,8,3,3]", "pads=[1,1,1,1] activation='Relu'", 0, 0},
    {"kiln.FusedConv", "f[9,16,33,33] Kf[16,16,3,3] Kf[16] f[9,16,32,32]", "pads=[1,1,0,0] activation='Relu'", 0, 0},
    /* channels_last = 1 (ir/fused_ops.h): X [N,H,W,C], W [M,kH,kW,C/group], Z and Y [N,H',W',M] */
    {"kiln.FusedConv", "f[2,15,15,8] Kf[16,3,3,8] Kf[16]", "pads=[1,1,1,1] activation='Relu' channels_last=1", 0, 0},
    {"kiln.FusedConv", "f[1,14,14,16] Kf[16,3,3,16] Kf[16] f[1,14,14,16]", "pads=[1,1,1,1] activation='Relu' channels_last=1", 0, 0},
    {"kiln.FusedConv", "f[1,7,7,8] Kf[8,1,1,8] - f[1,7,7,8]", "channels_last=1", 0, 0},
    {"kiln.FusedConv", "f[2,9,9,16] Kf[32,1,1,16] Kf[32]", "channels_last=1", 0, 0},
    {"kiln.FusedConv", "f[2,9,9,8] Kf[8,3,3,8]", "pads=[1,1,1,1] activation='Relu' channels_last=1", 0, 0},
    {"kiln.FusedConv", "f[1,9,9,32] Kf[32,3,3,1] Kf[32]", "group=32 pads=[1,1,1,1] activation='Clip' activation_params=[0.0,6.0] channels_last=1", 0, 0},
    {"kiln.FusedConv", "f[2,9,9,6] Kf[4,3,3,3] Kf[4] f[2,5,5,4]", "group=2 strides=[2,2] pads=[1,1,1,1] activation='Relu' channels_last=1", 0, 0},
    {"kiln.FusedConv", "f[1,15,13,5] Kf[6,3,3,5] Kf[6]", "dilations=[2,2] pads=[1,0,2,1] activation='Relu' channels_last=1", 0, 0},
    {"kiln.FusedConv", "f[2,10,10,6] Kf[4,3,3,6] Kf[4] f[2,5,5,4]", "auto_pad='SAME_UPPER' strides=[2,2] channels_last=1", 0, 0},
    {"kiln.FusedConv", "f[2,11,11,4] Kf[8,3,3,4]", "strides=[2,2] activation='LeakyRelu' activation_params=[0.1] channels_last=1", 0, 0},
    {"kiln.FusedConv", "f[2,7,9,24] Kf[24,1,1,24] Kf[24] f[2,7,9,24]", "activation='Silu' channels_last=1", 0, 0},
    {"kiln.FusedConv", "f[1,224,224,3] Kf[64,7,7,3] Kf[64]", "strides=[2,2] pads=[3,3,3,3] activation='Relu' channels_last=1", 0, 0},
    /* kiln.FusedPool channels-last (X [N,H,W,C]): the NHWC kernels with 16 bytes of channels per
     * thread (C a multiple of 8) and one channel (C = 3, 6, 12: float16 unvectorized), over many
     * blocks; odd sizes, ceil_mode, dilations, asymmetric and auto pads, NaN; then channels-first */
    {"kiln.FusedPool", "f[4,28,28,64]", "pool='MaxPool' kernel_shape=[3,3] strides=[2,2] pads=[1,1,1,1] channels_last=1", 0, 0},
    {"kiln.FusedPool", "f16[2,17,19,16]", "pool='MaxPool' kernel_shape=[3,3] strides=[2,2] pads=[1,1,1,1] channels_last=1", 0, 0},
    {"kiln.FusedPool", "f[2,17,19,3]", "pool='MaxPool' kernel_shape=[3,3] strides=[2,2] pads=[1,1,1,1] channels_last=1", 0, 0},
    {"kiln.FusedPool", "f[1,15,13,8]",
     "pool='MaxPool' kernel_shape=[3,2] strides=[2,1] pads=[0,1,1,0] dilations=[2,1] ceil_mode=1 channels_last=1", 0, 0},
    {"kiln.FusedPool", "fs[2,17,19,8]", "pool='MaxPool' kernel_shape=[3,3] strides=[2,2] pads=[1,1,1,1] channels_last=1", 0, 0},
    {"kiln.FusedPool", "f[1,4,5,8]", "pool='MaxPool' kernel_shape=[2,2] pads=[3,3,3,3] channels_last=1", 0, 0},
    {"kiln.FusedPool", "f[2,17,19,16]", "pool='AveragePool' kernel_shape=[3,4] strides=[2,3] pads=[1,0,2,1] channels_last=1", 0, 0},
    {"kiln.FusedPool", "f[2,17,19,12]",
     "pool='AveragePool' kernel_shape=[3,3] strides=[2,2] pads=[1,1,1,1] ceil_mode=1 count_include_pad=1 channels_last=1", 0, 0},
    {"kiln.FusedPool", "f[1,9,10,8]", "pool='AveragePool' kernel_shape=[4,4] strides=[2,3] auto_pad='SAME_UPPER' channels_last=1", 0, 0},
    {"kiln.FusedPool", "f[1,4,5,8]", "pool='AveragePool' kernel_shape=[2,2] pads=[3,3,3,3] count_include_pad=1 channels_last=1", 0, 0},
    {"kiln.FusedPool", "f[4,7,7,256]", "pool='GlobalAveragePool' channels_last=1", 0, 0},
    {"kiln.FusedPool", "f16[3,5,4,6]", "pool='GlobalAveragePool' channels_last=1", 0, 0},
    {"kiln.FusedPool", "f[2,7,7,32]", "pool='GlobalMaxPool' channels_last=1", 0, 0},
    {"kiln.FusedPool", "f[2,3,17,19]", "pool='MaxPool' kernel_shape=[3,3] strides=[2,2] pads=[1,1,1,1]", 0, 0},
    {"kiln.FusedPool", "f[2,8,7,7]", "pool='GlobalAveragePool'", 0, 0},
    {"kiln.FusedConv", "f[9,33,33,16] Kf[16,3,3,16] Kf[16] f[9,32,32,16]", "pads=[1,1,0,0] activation='Relu' channels_last=1", 0, 0},
    {"kiln.FusedGemm", "f[33,65] Kf[17,65] Kf[17]", "transB=1 activation='Relu'", 0, 0},
    {"kiln.FusedGemm", "f[33,65] Kf[65,17] Kf[17] f[33,17]", "activation='GeluTanh'", 0, 0},
    {"kiln.FusedGemm", "f[65,33] Kf[65,17] Kf[1,17]", "transA=1 alpha=0.5 beta=2.0 activation='Tanh'", 0, 0},
    {"kiln.FusedGemm", "f[1,4097] Kf[7,4097]", "transB=1 activation='Sigmoid'", 0, 0},
    {"kiln.FusedGemm", "f[33,65] Kf[65,17] Kf[33,1] f[33,17]", "beta=0.5 activation='Gelu'", 0, 0},
    {"kiln.FusedGemm", "f[7,9] Kf[9,5] - f[7,5]", "alpha=2.0 activation='HardSwish'", 0, 0},
    {"kiln.FusedMatMul", "f[2,7,65] Kf[65,17] Kf[17]", "activation='Gelu'", 0, 0},
    {"kiln.FusedMatMul", "f[2,7,65] Kf[65,17] Kf[17] f[2,7,17]", "", 0, 0},
    {"kiln.FusedMatMul", "f[33,65] Kf[65,17]", "activation='Tanh'", 0, 0},
    {"kiln.FusedMatMul", "f[2,3,7,9] f[2,3,9,5]", "activation='HardSigmoid' activation_params=[0.2,0.5]", 0, 0},
    {"kiln.FusedMatMul", "f[1,128,768] Kf[768,3072] Kf[3072]", "activation='GeluTanh'", 0, 0},
    {"kiln.FusedMatMul", "f[3,1,7,9] f[2,9,13] Kf[13] f[3,2,7,13]", "activation='Silu'", 0, 0},
    {"kiln.FusedMatMul", "f[5,33] Kf[33,7] - f[5,7]", "activation='Clip' activation_params=[-0.5,0.5]", 0, 0},
    /* the CUDA vector epilogue (fe_epilogue_vec: last dim a multiple of 8, aligned buffers) and its
     * fallback (last dim 8k + 4 for 16-bit storage, odd for float32) */
    {"kiln.FusedMatMul", "f[64,768] Kf[768,3072] Kf[3072]", "activation='Gelu'", 0, 0},
    {"kiln.FusedMatMul", "f[64,768] Kf[768,3072] Kf[3072] f[64,3072]", "activation='Gelu'", 0, 0},
    {"kiln.FusedMatMul", "f[2,33,64] Kf[64,40] - f[2,33,40]", "activation='Relu'", 0, 0},
    {"kiln.FusedMatMul", "f[3,17,64] Kf[64,36] Kf[36] f[3,17,36]", "activation='Gelu'", 0, 0},
    {"kiln.FusedMatMul", "f[5,64] Kf[64,103] Kf[103]", "activation='Gelu'", 0, 0},
    {"kiln.FusedGemm", "f[33,64] Kf[64,24] Kf[24] f[33,24]", "activation='Silu'", 0, 0},
    /* all inside cuBLASLt's epilogue (bias, ReLU, the residual as C): Gemm C as the bias, a residual
     * alone, bias + residual + ReLU over a batch of rows */
    {"kiln.FusedGemm", "f[33,64] Kf[64,24] Kf[24] f[33,24]", "", 0, 0},
    {"kiln.FusedGemm", "f[33,64] Kf[24,64] - f[33,24]", "transB=1 alpha=0.5", 0, 0},
    {"kiln.FusedMatMul", "f[2,33,64] Kf[64,40] Kf[40]", "activation='Relu'", 0, 0},
    {"kiln.FusedMatMul", "f[4,17,64] Kf[64,48] Kf[48] f[4,17,48]", "activation='Relu'", 0, 0},
    {"kiln.FusedMatMul", "f[4,17,64] Kf[64,48] - f[4,17,48]", "", 0, 0},
    {"kiln.Attention", "f[2,4,16,8] f[2,4,16,8] f[2,4,16,8]", "scale=0.35355", 0, 0},
    {"kiln.Attention", "f[2,4,16,8] f[2,4,16,8] f[2,4,16,8]", "scale=0.35355 causal=1", 0, 0},
    {"kiln.Attention", "f[2,4,16,8] f[2,4,16,8] f[2,4,16,8] f[2,1,1,16]{-3,0}", "scale=0.35355", 0, 0},
    {"kiln.Attention", "f[2,4,16,8] f[2,4,16,8] f[2,4,16,8] b[2,1,16,16]", "scale=0.35355 mask_fill=-10000.0", 0, 0},
    {"kiln.Attention", "f[1,8,5,16] f[1,4,9,16] f[1,4,9,16]", "scale=0.25 kv_repeat=2 causal=1", 0, 0},
    {"kiln.Attention", "f[2,12,128,64] f[2,12,128,64] f[2,12,128,64]", "scale=0.125 causal=1", 0, 0},
    {"kiln.Attention", "f[1,2,1,64] f[1,2,300,64] f[1,2,300,64]", "scale=0.125", 0, 0},
    {"kiln.Attention", "f[7,33,24] f[7,40,24] f[7,40,20]", "scale=0.2", 0, 0},
    /* the GPU kernel's edges: head dims 128 and odd ones, partial key/query tiles, GQA 4:1 with a
     * padding mask, per-query float masks, a rank-2 problem, a broadcast batch */
    {"kiln.Attention", "f[1,4,37,128] f[1,4,77,128] f[1,4,77,128]", "scale=0.0884 causal=1", 0, 0},
    {"kiln.Attention", "f[2,8,33,40] f[2,2,65,40] f[2,2,65,40] b[2,1,1,65]", "scale=0.158 kv_repeat=4 mask_fill=-10000.0", 0, 0},
    {"kiln.Attention", "f[2,8,1,64] f[2,2,97,64] f[2,2,97,64] f[2,1,1,97]{-5,0}", "scale=0.125 kv_repeat=4", 0, 0},
    {"kiln.Attention", "f[3,2,17,33] f[3,2,17,33] f[3,2,17,127] f[1,2,17,17]", "scale=0.174", 0, 0},
    {"kiln.Attention", "f[50,16] f[70,16] f[70,8] f[70]{-2,0}", "scale=0.25", 0, 0},
    {"kiln.Attention", "f[1,3,20,32] f[2,1,45,32] f[2,1,45,32]", "scale=0.177 kv_repeat=3 causal=1", 0, 0},
    /* the tensor-core kernel (f16/bf16, D = Dv in {32, 64, 96, 128}; f32 runs these on CUDA cores):
     * BERT with a padding mask, GPT causal over two query blocks, GQA 4:1 at D 128 with Sq != Sk,
     * decode (Sq 1) over four key tiles, odd Sq/Sk tails with and without causal, bool masks per query,
     * a full per-head mask at D 96, a rank-2 mask, many key tiles (the double buffer's both halves) */
    {"kiln.Attention", "f[2,12,128,64] f[2,12,128,64] f[2,12,128,64] f[2,1,1,128]{-5,0}", "scale=0.125", 0, 0},
    {"kiln.Attention", "f[1,12,77,64] f[1,12,77,64] f[1,12,77,64]", "scale=0.125 causal=1", 0, 0},
    {"kiln.Attention", "f[2,16,70,128] f[2,4,150,128] f[2,4,150,128]", "scale=0.0884 kv_repeat=4", 0, 0},
    {"kiln.Attention", "f[1,16,90,128] f[1,4,130,128] f[1,4,130,128]", "scale=0.0884 kv_repeat=4 causal=1", 0, 0},
    {"kiln.Attention", "f[2,12,1,64] f[2,12,200,64] f[2,12,200,64]", "scale=0.125", 0, 0},
    {"kiln.Attention", "f[2,12,1,64] f[2,12,200,64] f[2,12,200,64] f[2,1,1,200]{-5,0}", "scale=0.125 causal=1", 0, 0},
    {"kiln.Attention", "f[2,3,37,64] f[2,3,53,64] f[2,3,53,64]", "scale=0.125", 0, 0},
    {"kiln.Attention", "f[2,3,37,128] f[2,3,53,128] f[2,3,53,128]", "scale=0.0884 causal=1", 0, 0},
    {"kiln.Attention", "f[2,12,64,64] f[2,12,96,64] f[2,12,96,64] b[2,1,64,96]", "scale=0.125 mask_fill=-10000.0", 0, 0},
    {"kiln.Attention", "f[1,4,53,128] f[1,4,53,128] f[1,4,53,128] b[1,1,1,53]", "scale=0.0884 mask_fill=-3.0", 0, 0},
    {"kiln.Attention", "f[1,4,65,96] f[1,4,65,96] f[1,4,65,96] f[1,4,65,65]{-2,0}", "scale=0.102", 0, 0},
    {"kiln.Attention", "f[2,4,50,32] f[2,4,70,32] f[2,4,70,32]", "scale=0.177 causal=1", 0, 0},
    {"kiln.Attention", "f[2,4,40,64] f[2,4,40,64] f[2,4,40,64] f[40,40]{-3,0}", "scale=0.125", 0, 0},
    {"kiln.Attention", "f[1,2,300,64] f[1,2,300,64] f[1,2,300,64]", "scale=0.125 causal=1", 0, 0},
    /* the sequence-first layouts: 1 ([B, S, H, D], row strides H D; GQA, masks per head and padding,
     * odd heads / lengths, a head dim the tensor-core kernel pads) and 2 (packed QKV [B, S, 3, H, D],
     * row stride 3 H D: GPT-2's and BERT's shapes, causal and masked) */
    {"kiln.Attention", "f[2,128,12,64] f[2,128,12,64] f[2,128,12,64] f[2,1,1,128]{-5,0}", "scale=0.125 layout=1", 0, 0},
    {"kiln.Attention", "f[1,37,8,64] f[1,53,2,64] f[1,53,2,64]", "scale=0.125 kv_repeat=4 causal=1 layout=1", 0, 0},
    {"kiln.Attention", "f[2,33,3,40] f[2,65,3,40] f[2,65,3,40] b[2,3,33,65]", "scale=0.158 mask_fill=-10000.0 layout=1", 0, 0},
    {"kiln.Attention", "f[3,17,5,24] f[3,17,5,24] f[3,17,5,16]", "scale=0.2 layout=1", 0, 0},
    {"kiln.Attention", "f[1,128,3,25,64] - -", "scale=0.125 causal=1 layout=2", 0, 0},
    {"kiln.Attention", "f[2,77,3,12,64] - - f[2,1,1,77]{-5,0}", "scale=0.125 layout=2", 0, 0},
    {"kiln.Attention", "f[2,19,3,4,8] - - b[2,1,19,19]", "scale=0.35 mask_fill=-10000.0 layout=2", 0, 0},
    {"kiln.Attention", "f[1,70,3,2,128] - -", "scale=0.0884 causal=1 layout=2", 0, 0},
    /* x sigmoid(1.702 x) */
    {"kiln.ElementwiseChain", "f[33,1000]", "program=[1,0,1,0,2,0,5,9,5] constants=[1.702]", 0, 0},
    /* relu((x0 + x1) * 0.5); the inputs of a chain have the output's shape or one element (what
     * passes/fuse_elementwise.c makes and the CPU kernel takes) */
    {"kiln.ElementwiseChain", "f[33,1000] f[33,1000]", "program=[1,0,1,1,3,2,0,5,8] constants=[0.5]", 0, 0},
    /* (sqrt|x0| + erf x0 - exp(-x0)) * 1 / (|x1| + 1), and tanh x0 / 4, all opcodes */
    {"kiln.ElementwiseChain", "f[2,3,5,7,11] f[1]",
     "program=[1,0,15,12,1,0,14,3,1,0,7,11,4,1,1,15,2,0,3,13,5,1,0,10,2,1,6,3] constants=[1.0,4.0]", 0, 0},
    /* QuantizeLinear / DequantizeLinear per tensor (quant.cu): ties, saturation, the default uint8 */
    {"QuantizeLinear", "f[33,65]{-3,3} Kf[]=0.02 Ki8[]=3", "", 0, 0},
    {"QuantizeLinear", "f[7,1000]{-8,8} Kf[]=0.05 Ku8[]=128", "", 0, 0},
    {"QuantizeLinear", "fi[2,3,5]{-300,300} Kf[]=2.0", "", 0, 0},
    {"DequantizeLinear", "i8[33,65]{-128,128} Kf[]=0.02 Ki8[]=-3", "", 0, 0},
    {"DequantizeLinear", "u8[7,1000]{0,256} Kf[]=0.05 Ku8[]=128", "", 0, 0},
    {"DequantizeLinear", "i32[5,9]{-100000,100000} Kf[]=0.001", "", 0, 0},
    /* kiln.QMatMul / kiln.QConv (ir/quant_ops.h): the CUDA IMMA GEMM with its requantizing epilogue
     * against the CPU integer kernels. int8 A with K a multiple of 4 (read in place), uint8 A and odd K
     * (copied, shifted by -128), uint8 weights with a zero point (the row-sum correction), per-channel
     * and per-tensor scales, int8 / uint8 / float outputs, ReLU / Clip / Gelu; convolutions padded,
     * strided, dilated, grouped, depthwise and 1-D. Symmetric QMatMuls (no zero point after the shift,
     * N a multiple of 4, no activation or Relu, int8 or float out) requantize inside cuBLASLt's GEMM
     * (within one unit of the CPU, in at most 1% of the elements); N = 10 keeps the exact path. */
    {"kiln.QMatMul", "i8[2,7,64]{-128,128} Ki8[64,8]{-127,128} Kf[8]",
     "x_scale=0.05 w_scale=[0.002,0.003,0.001,0.002,0.004,0.002,0.0015,0.0025] y_dtype=3 y_scale=0.05 activation='Relu'", 0, 0},
    {"kiln.QMatMul", "u8[33,65]{0,256} Ki8[65,17]{-127,128}",
     "x_scale=0.05 x_zero_point=128 w_scale=[0.002] y_dtype=2 y_scale=0.05 y_zero_point=128", 0, 0},
    {"kiln.QMatMul", "i8[5,40]{-128,128} Ku8[40,12]{0,256} Kf[12]",
     "x_scale=0.05 w_scale=[0.002] w_zero_point=[120] activation='Gelu'", 0, 0},
    {"kiln.QMatMul", "u8[3,9,33]{0,256} Ki8[33,1000]{-127,128} Kf[1000]",
     "x_scale=0.02 x_zero_point=3 w_scale=[0.001] y_dtype=3 y_scale=0.02 y_zero_point=-5 activation='Clip' "
     "activation_params=[-1.0,1.0]", 0, 0},
    {"kiln.QMatMul", "i8[3,11,96]{-128,128} Ki8[96,12]{-127,128} Kf[12]",
     "x_scale=0.04 w_scale=[0.002,0.003,0.001,0.002,0.004,0.002,0.0015,0.0025,0.001,0.003,0.002,0.002] y_dtype=3 "
     "y_scale=0.03", 0, 0},
    {"kiln.QMatMul", "i8[7,64]{-128,128} Ki8[64,12]{-127,128} Kf[12]", "x_scale=0.05 w_scale=[0.002] activation='Relu'", 0, 0},
    {"kiln.QMatMul", "i8[6,48]{-128,128} Ku8[48,16]{0,256}", "x_scale=0.05 w_scale=[0.002] w_zero_point=[128] y_dtype=3 "
     "y_scale=0.04", 0, 0},
    {"kiln.QMatMul", "i8[4,32]{-128,128} Ki8[32,10]{-127,128} Kf[10]", "x_scale=0.05 w_scale=[0.002] y_dtype=3 y_scale=0.05",
     0, 0},
    /* tanh-Gelu: fused (GELU_BIAS) for a float output, the exact path for an int8 one */
    {"kiln.QMatMul", "i8[5,32]{-128,128} Ki8[32,16]{-127,128} Kf[16]", "x_scale=0.05 w_scale=[0.002] activation='GeluTanh'",
     0, 0},
    {"kiln.QMatMul", "i8[5,32]{-128,128} Ki8[32,16]{-127,128} Kf[16]",
     "x_scale=0.05 w_scale=[0.002] y_dtype=3 y_scale=0.02 activation='GeluTanh'", 0, 0},
    /* kiln.F8MatMul (ir/quant_ops.h): A rounded to E4M3, cuBLASLt's FP8 GEMM with the per-tensor scales
     * and the bias epilogue, against the CPU reference; weight codes all positive (0..126) or all
     * negative (128..254: no NaN code); K and N multiples of 16, and not (padded rows, D copied out) */
    {"kiln.F8MatMul", "f[2,7,64]{-4,4} Ku8[64,32]{0,127} Kf[32]", "x_scale=0.02 w_scale=0.001", 0, 0},
    {"kiln.F8MatMul", "f[5,40]{-4,4} Ku8[40,20]{128,255}", "x_scale=0.01 w_scale=0.002", 0, 0},
    /* a Gelu folded into A's rounding (fuse_qdq_output: BERT's FFN), erf and tanh forms */
    {"kiln.F8MatMul", "f[3,5,48]{-4,4} Ku8[48,32]{0,127} Kf[32]", "x_scale=0.02 w_scale=0.001 input_activation='Gelu'",
     0, 0},
    {"kiln.F8MatMul", "f[7,64]{-4,4} Ku8[64,20]{128,255}", "x_scale=0.02 w_scale=0.002 input_activation='GeluTanh'", 0, 0},
    /* a residual folded in (the GEMM's C when D is Y; added by a kernel when N is padded) */
    {"kiln.F8MatMul", "f[2,8,64]{-4,4} Ku8[64,32]{0,127} Kf[32] f[2,8,32]", "x_scale=0.02 w_scale=0.001", 0, 0},
    {"kiln.F8MatMul", "f[5,40]{-4,4} Ku8[40,20]{0,127} Kf[20] f[5,20]", "x_scale=0.02 w_scale=0.001", 0, 0},
    {"kiln.QConv", "i8[2,8,15,15]{-128,128} Ki8[4,8,3,3]{-127,128} Kf[4]",
     "pads=[1,1,1,1] x_scale=0.05 w_scale=[0.002,0.003,0.001,0.002] y_dtype=3 y_scale=0.05 activation='Relu'", 0, 0},
    {"kiln.QConv", "u8[2,6,11,11]{0,256} Ki8[8,3,3,3]{-127,128} Kf[8]",
     "group=2 strides=[2,2] pads=[1,0,2,1] x_scale=0.05 x_zero_point=128 w_scale=[0.002] y_dtype=2 y_scale=0.05 "
     "y_zero_point=128", 0, 0},
    {"kiln.QConv", "i8[1,16,9,9]{-128,128} Ki8[16,1,3,3]{-127,128} Kf[16]",
     "group=16 dilations=[2,2] pads=[2,2,2,2] x_scale=0.05 w_scale=[0.01] y_dtype=3 y_scale=0.02", 0, 0},
    {"kiln.QConv", "u8[2,5,33]{0,256} Ku8[7,5,3]{0,256}",
     "auto_pad='SAME_UPPER' x_scale=0.05 x_zero_point=100 w_scale=[0.002] w_zero_point=[128] activation='Relu'", 0, 0},
    {"kiln.QConv", "i8[3,3,17,17]{-128,128} Ki8[5,3,7,7]{-127,128} Kf[5]",
     "strides=[2,2] pads=[3,3,3,3] x_scale=0.05 w_scale=[0.001] activation='Relu'", 0, 0},
    /* attention: head dims 8..256 (the fast paths 64, 80, 96, 128, 256 and odd multiples of 8), query
     * heads per KV head 1..16, 1, 3 or 8 sequences, contexts 1..600 at and around the block edges */
    LLM_ATTENTION(8, 1, 1, 1, 0, 0), LLM_ATTENTION(8, 6, 2, 3, 1, 5), LLM_ATTENTION(8, 12, 1, 8, 2, 17),
    LLM_ATTENTION(16, 4, 2, 3, 1, 0), LLM_ATTENTION(16, 8, 1, 8, 2, 5), LLM_ATTENTION(16, 32, 2, 1, 3, 17),
    LLM_ATTENTION(24, 6, 2, 8, 2, 0), LLM_ATTENTION(24, 12, 1, 1, 3, 5), LLM_ATTENTION(24, 1, 1, 3, 4, 17),
    LLM_ATTENTION(40, 8, 1, 1, 3, 0), LLM_ATTENTION(40, 32, 2, 3, 4, 5), LLM_ATTENTION(40, 4, 2, 8, 5, 17),
    LLM_ATTENTION(64, 12, 1, 3, 4, 0), LLM_ATTENTION(64, 1, 1, 8, 5, 5), LLM_ATTENTION(64, 6, 2, 1, 6, 17),
    LLM_ATTENTION(72, 32, 2, 8, 5, 0), LLM_ATTENTION(72, 4, 2, 1, 6, 5), LLM_ATTENTION(72, 8, 1, 3, 7, 17),
    LLM_ATTENTION(80, 1, 1, 1, 6, 0), LLM_ATTENTION(80, 6, 2, 3, 7, 5), LLM_ATTENTION(80, 12, 1, 8, 8, 17),
    LLM_ATTENTION(96, 4, 2, 3, 7, 0), LLM_ATTENTION(96, 8, 1, 8, 8, 5), LLM_ATTENTION(96, 32, 2, 1, 9, 17),
    LLM_ATTENTION(104, 6, 2, 8, 8, 0), LLM_ATTENTION(104, 12, 1, 1, 9, 5), LLM_ATTENTION(104, 1, 1, 3, 10, 17),
    LLM_ATTENTION(128, 8, 1, 1, 9, 0), LLM_ATTENTION(128, 32, 2, 3, 10, 5), LLM_ATTENTION(128, 4, 2, 8, 11, 17),
    LLM_ATTENTION(136, 12, 1, 3, 10, 0), LLM_ATTENTION(136, 1, 1, 8, 11, 5), LLM_ATTENTION(136, 6, 2, 1, 12, 17),
    LLM_ATTENTION(192, 32, 2, 8, 11, 0), LLM_ATTENTION(192, 4, 2, 1, 12, 5), LLM_ATTENTION(192, 8, 1, 3, 13, 17),
    LLM_ATTENTION(248, 1, 1, 1, 12, 0), LLM_ATTENTION(248, 6, 2, 3, 13, 5), LLM_ATTENTION(248, 12, 1, 8, 14, 17),
    LLM_ATTENTION(256, 4, 2, 3, 13, 0), LLM_ATTENTION(256, 8, 1, 8, 14, 5), LLM_ATTENTION(256, 32, 2, 1, 15, 17),
    LLM_CHUNKS(64, 2, 2, 1, 0), LLM_CHUNKS(64, 2, 2, 1, 1), LLM_CHUNKS(64, 8, 2, 1, 2), LLM_CHUNKS(64, 8, 2, 3, 3),
    LLM_CHUNKS(64, 8, 1, 1, 4), LLM_CHUNKS(64, 8, 1, 1, 5), LLM_CHUNKS(64, 10, 2, 1, 6), LLM_CHUNKS(64, 10, 2, 3, 7),
    LLM_CHUNKS(80, 2, 2, 1, 0), LLM_CHUNKS(80, 2, 2, 1, 2), LLM_CHUNKS(80, 8, 2, 1, 2), LLM_CHUNKS(80, 8, 2, 3, 4),
    LLM_CHUNKS(80, 8, 1, 1, 4), LLM_CHUNKS(80, 8, 1, 1, 6), LLM_CHUNKS(80, 10, 2, 1, 6), LLM_CHUNKS(80, 10, 2, 3, 8),
    LLM_CHUNKS(96, 2, 2, 1, 0), LLM_CHUNKS(96, 2, 2, 1, 3), LLM_CHUNKS(96, 8, 2, 1, 2), LLM_CHUNKS(96, 8, 2, 3, 5),
    LLM_CHUNKS(96, 8, 1, 1, 4), LLM_CHUNKS(96, 8, 1, 1, 7), LLM_CHUNKS(96, 10, 2, 1, 6), LLM_CHUNKS(96, 10, 2, 3, 9),
    LLM_CHUNKS(128, 2, 2, 1, 0), LLM_CHUNKS(128, 2, 2, 1, 4), LLM_CHUNKS(128, 8, 2, 1, 2), LLM_CHUNKS(128, 8, 2, 3, 6),
    LLM_CHUNKS(128, 8, 1, 1, 4), LLM_CHUNKS(128, 8, 1, 1, 8), LLM_CHUNKS(128, 10, 2, 1, 6), LLM_CHUNKS(128, 10, 2, 3, 10),
    LLM_CHUNKS(256, 2, 2, 1, 0), LLM_CHUNKS(256, 2, 2, 1, 5), LLM_CHUNKS(256, 8, 2, 1, 2), LLM_CHUNKS(256, 8, 2, 3, 7),
    LLM_CHUNKS(256, 8, 1, 1, 4), LLM_CHUNKS(256, 8, 1, 1, 9), LLM_CHUNKS(256, 10, 2, 1, 6), LLM_CHUNKS(256, 10, 2, 3, 11),
    LLM_CHUNKS(8, 2, 2, 1, 0), LLM_CHUNKS(8, 2, 2, 1, 6), LLM_CHUNKS(8, 8, 2, 1, 2), LLM_CHUNKS(8, 8, 2, 3, 8),
    LLM_CHUNKS(8, 8, 1, 1, 4), LLM_CHUNKS(8, 8, 1, 1, 10), LLM_CHUNKS(8, 10, 2, 1, 6), LLM_CHUNKS(8, 10, 2, 3, 12),
    LLM_CHUNKS(40, 2, 2, 1, 0), LLM_CHUNKS(40, 2, 2, 1, 7), LLM_CHUNKS(40, 8, 2, 1, 2), LLM_CHUNKS(40, 8, 2, 3, 9),
    LLM_CHUNKS(40, 8, 1, 1, 4), LLM_CHUNKS(40, 8, 1, 1, 11), LLM_CHUNKS(40, 10, 2, 1, 6), LLM_CHUNKS(40, 10, 2, 3, 13),
    LLM_CHUNKS(72, 2, 2, 1, 0), LLM_CHUNKS(72, 2, 2, 1, 8), LLM_CHUNKS(72, 8, 2, 1, 2), LLM_CHUNKS(72, 8, 2, 3, 10),
    LLM_CHUNKS(72, 8, 1, 1, 4), LLM_CHUNKS(72, 8, 1, 1, 12), LLM_CHUNKS(72, 10, 2, 1, 6), LLM_CHUNKS(72, 10, 2, 3, 14),
    LLM_CHUNKS(88, 2, 2, 1, 0), LLM_CHUNKS(88, 2, 2, 1, 9), LLM_CHUNKS(88, 8, 2, 1, 2), LLM_CHUNKS(88, 8, 2, 3, 11),
    LLM_CHUNKS(88, 8, 1, 1, 4), LLM_CHUNKS(88, 8, 1, 1, 13), LLM_CHUNKS(88, 10, 2, 1, 6), LLM_CHUNKS(88, 10, 2, 3, 15),
    LLM_CHUNKS(112, 2, 2, 1, 0), LLM_CHUNKS(112, 2, 2, 1, 10), LLM_CHUNKS(112, 8, 2, 1, 2), LLM_CHUNKS(112, 8, 2, 3, 12),
    LLM_CHUNKS(112, 8, 1, 1, 4), LLM_CHUNKS(112, 8, 1, 1, 14), LLM_CHUNKS(112, 10, 2, 1, 6), LLM_CHUNKS(112, 10, 2, 3, 16),
    LLM_CHUNKS(136, 2, 2, 1, 0), LLM_CHUNKS(136, 2, 2, 1, 11), LLM_CHUNKS(136, 8, 2, 1, 2), LLM_CHUNKS(136, 8, 2, 3, 13),
    LLM_CHUNKS(136, 8, 1, 1, 4), LLM_CHUNKS(136, 8, 1, 1, 15), LLM_CHUNKS(136, 10, 2, 1, 6), LLM_CHUNKS(136, 10, 2, 3, 17),
    LLM_CHUNKS(200, 2, 2, 1, 0), LLM_CHUNKS(200, 2, 2, 1, 12), LLM_CHUNKS(200, 8, 2, 1, 2), LLM_CHUNKS(200, 8, 2, 3, 14),
    LLM_CHUNKS(200, 8, 1, 1, 4), LLM_CHUNKS(200, 8, 1, 1, 16), LLM_CHUNKS(200, 10, 2, 1, 6), LLM_CHUNKS(200, 10, 2, 3, 18),
    /* the CUDA-core prefill kernel on the long chunks too, at a fast path and a generic head dim */
    {"llm.PrefillAttention", "hd=128 heads=8 kv=2 batch=3 rot=0 seqs=1 holes=7 kernel=1", NULL, 0, 0},
    {"llm.PrefillAttention", "hd=72 heads=8 kv=2 batch=3 rot=4 seqs=1 holes=7 kernel=1", NULL, 0, 0},
    /* sliding windows (Mistral's): shorter than one block, at a block edge, past the 32- and 64-key
     * tiles and longer than some contexts, with a fast path and a generic head dim */
    LLM_WINDOW(128, 8, 2, 8, 0, 1), LLM_WINDOW(72, 4, 2, 8, 1, 1), LLM_WINDOW(128, 8, 2, 3, 1, 7),
    LLM_WINDOW(72, 4, 2, 3, 2, 7), LLM_WINDOW(128, 8, 2, 8, 2, 16), LLM_WINDOW(72, 4, 2, 8, 3, 16),
    LLM_WINDOW(128, 8, 2, 3, 3, 33), LLM_WINDOW(72, 4, 2, 3, 4, 33), LLM_WINDOW(128, 8, 2, 8, 4, 100),
    LLM_WINDOW(72, 4, 2, 8, 5, 100), LLM_WINDOW(128, 8, 2, 3, 5, 256), LLM_WINDOW(72, 4, 2, 3, 6, 256),
    /* an FP8 (E4M3) cache with per-head scales: fast-path and generic head dims, GQA, with and without
     * a window */
    LLM_FP8(128, 8, 2, 8, 0, 0), LLM_FP8(64, 4, 4, 3, 1, 33), LLM_FP8(72, 6, 2, 8, 2, 0), LLM_FP8(256, 4, 1, 3, 3, 33),
    LLM_FP8(96, 12, 1, 8, 4, 0),
    /* what the attention launchers refuse: a head dim not a multiple of 8, one past 256, query heads
     * not a multiple of the KV heads, an unknown prefill kernel */
    {"llm.DecodeAttention", "hd=12 heads=2 kv=2 refused=1", NULL, 0, 0},
    {"llm.DecodeAttention", "hd=264 heads=2 kv=2 refused=1", NULL, 0, 0},
    {"llm.DecodeAttention", "hd=64 heads=6 kv=4 refused=1", NULL, 0, 0},
    {"llm.PrefillAttention", "hd=12 heads=2 kv=2 refused=1", NULL, 0, 0},
    {"llm.PrefillAttention", "hd=264 heads=2 kv=2 refused=1", NULL, 0, 0},
    {"llm.PrefillAttention", "hd=64 heads=6 kv=4 refused=1", NULL, 0, 0},
    {"llm.PrefillAttention", "hd=64 heads=2 kv=2 kernel=3 refused=1", NULL, 0, 0},
    {"llm.PrefillAttention", "hd=64 heads=2 kv=2 kernel=5 refused=1", NULL, 0, 0},
    /* RoPE + KV write: head dims 8..256, GQA, positions at block edges; partial rotation (Phi-3) */
    LLM_ROPE(8, 2, 2), LLM_ROPE(16, 4, 1), LLM_ROPE(24, 3, 3), LLM_ROPE(64, 8, 2), LLM_ROPE(80, 4, 4),
    LLM_ROPE(96, 6, 2), LLM_ROPE(128, 8, 1), LLM_ROPE(136, 2, 2), LLM_ROPE(256, 4, 2),
    {"llm.RopeKvWrite", "hd=96 heads=4 kv=2 rot_dim=32", NULL, 0, 0},
    {"llm.RopeKvWrite", "hd=128 heads=8 kv=8 rot_dim=64", NULL, 0, 0},
    /* decode steps of 1..8 tokens: a head a block */
    {"llm.RopeKvWrite", "hd=128 heads=32 kv=8 tokens=1", NULL, 0, 0},
    {"llm.RopeKvWrite", "hd=64 heads=25 kv=25 tokens=1 rotate=0", NULL, 0, 0},
    {"llm.RopeKvWrite", "hd=96 heads=4 kv=2 rot_dim=32 tokens=5", NULL, 0, 0},
    {"llm.RopeKvWrite", "hd=64 heads=6 kv=3 tokens=8 rotate=0 fp8=1", NULL, 0, 0},
    {"llm.RopeKvWrite", "hd=64 heads=6 kv=3 tokens=9", NULL, 0, 0},
    /* GELU(tanh), SwiGLU, GeGLU: the 16-byte path (ff a multiple of 8) and the scalar one */
    {"llm.Activation", "ff=64 rows=3", NULL, 0, 0},
    {"llm.Activation", "ff=33 rows=2", NULL, 0, 0},
    {"llm.Activation", "ff=6400 rows=4", NULL, 0, 0},
    {"llm.Activation", "ff=64 rows=3 gated=1", NULL, 0, 0},
    {"llm.Activation", "ff=33 rows=2 gated=1", NULL, 0, 0},
    {"llm.Activation", "ff=40 rows=5 gated=1 act=1", NULL, 0, 0},
    {"llm.Activation", "ff=14336 rows=2 gated=1", NULL, 0, 0},
    {"llm.Activation", "ff=1000 rows=260 gated=1", NULL, 0, 0},
    {"llm.Activation", "ff=9 rows=7 gated=1 act=1", NULL, 0, 0},
    {"llm.Activation", "ff=256 rows=9 gated=1 act=1", NULL, 0, 0},
    /* residual add + LayerNorm / RMSNorm: widths 8..12288 (the widest the kernel takes) */
    LLM_NORMS(8, 1, 1, 0), LLM_NORMS(64, 2, 0, 1), LLM_NORMS(80, 3, 1, 0), LLM_NORMS(768, 4, 0, 1),
    LLM_NORMS(2048, 1, 1, 0), LLM_NORMS(5120, 2, 0, 1), LLM_NORMS(8192, 3, 1, 0), LLM_NORMS(12288, 4, 0, 1),
    LLM_NORMS(30, 2, 1, 0), LLM_NORMS(1600, 1, 0, 1), LLM_NORMS(4096, 1, 1, 0), LLM_NORMS(1601, 2, 0, 1),
    /* the GEMV family: K 8..4096, N 1..2304 with tails past every tile, 1..8 token rows */
    LLM_GEMV(64, 5, 2), LLM_GEMV(256, 7, 3), LLM_GEMV(1000, 301, 8), LLM_GEMV(4096, 2048, 1), LLM_GEMV(768, 2304, 3),
    LLM_GEMV(8, 1, 1), LLM_GEMV(72, 33, 5), LLM_GEMV(2056, 129, 4), LLM_GEMV(1600, 1600, 1),
    /* the fused GEMV: norm prologue (gathered, padded residual rows), every epilogue, K 64..6144 (the
     * last 96 KB of normed rows, past the 48 KB a kernel has without opting in), 1..8 token rows;
     * without programmatic dependent launch too */
    LLM_GEMV_FUSED(64, 5, 1, 1), LLM_GEMV_FUSED(256, 7, 3, 0), LLM_GEMV_FUSED(1000, 301, 8, 1),
    LLM_GEMV_FUSED(4096, 1024, 5, 0), LLM_GEMV_FUSED(768, 2304, 2, 1), LLM_GEMV_FUSED(6144, 96, 8, 0),
    {"llm.GemvFused", "K=6144 N=96 n=8 layer=1 epi=2 pdl=0", NULL, 0, 0},
    {"llm.GemvFused", "K=4096 N=1024 n=5 layer=1 epi=4 pdl=0", NULL, 0, 0},
    /* the weight-only INT8 GEMV (K multiples of 16 up to 14336) and the dequantized prefill tiles */
    LLM_GEMV_Q8(16, 1, 1), LLM_GEMV_Q8(64, 5, 2), LLM_GEMV_Q8(384, 1152, 1), LLM_GEMV_Q8(1536, 384, 8),
    LLM_GEMV_Q8(4096, 6144, 1), LLM_GEMV_Q8(14336, 4096, 3), LLM_GEMV_Q8(528, 33, 7),
    LLM_GEMV_Q8(1600, 1600, 1), LLM_GEMV_Q8(4096, 37, 8), LLM_GEMV_Q8(2048, 70, 5), LLM_GEMV_Q8(32, 9, 4),
    {"llm.DequantQ8", "rows=64 K=64", NULL, 0, 0}, {"llm.DequantQ8", "rows=7 K=13", NULL, 0, 0},
    {"llm.DequantQ8", "rows=300 K=4096", NULL, 0, 0}, {"llm.DequantQ8", "rows=5 K=48", NULL, 0, 0},
    {"llm.QuantizeAct", "n=1 K=384", NULL, 0, 0}, {"llm.QuantizeAct", "n=7 K=13", NULL, 0, 0},
    {"llm.QuantizeAct", "n=64 K=4096", NULL, 0, 0},
    LLM_GEMV_W8A8(16, 1, 1), LLM_GEMV_W8A8(64, 5, 2), LLM_GEMV_W8A8(384, 1152, 1), LLM_GEMV_W8A8(1536, 384, 8),
    LLM_GEMV_W8A8(4096, 6144, 1), LLM_GEMV_W8A8(14336, 4096, 3), LLM_GEMV_W8A8(528, 36, 7),
    {"llm.ImmaW8A8", "K=384 N=1152 n=16 bias=1", NULL, 0, 0}, {"llm.ImmaW8A8", "K=1536 N=384 n=300", NULL, 0, 0},
    {"llm.ImmaW8A8", "K=4096 N=6144 n=64", NULL, 0, 0}, {"llm.ImmaW8A8", "K=14336 N=512 n=33", NULL, 0, 0},
    {"llm.ImmaW8A8", "K=64 N=8 n=9 bias=1 f32=1", NULL, 0, 0},
    LLM_GEMV_Q4(32, 1, 1), LLM_GEMV_Q4(160, 5, 2), LLM_GEMV_Q4(384, 1152, 1), LLM_GEMV_Q4(1536, 384, 8),
    LLM_GEMV_Q4(4096, 6144, 1), LLM_GEMV_Q4(14336, 4096, 3), LLM_GEMV_Q4(544, 33, 7),
    LLM_GEMV_Q4(1600, 1600, 1), LLM_GEMV_Q4(4096, 37, 8), LLM_GEMV_Q4(2048, 70, 5), LLM_GEMV_Q4(32, 9, 4),
    LLM_GEMM_Q("llm.GemmQ8", 16, 1, 9), LLM_GEMM_Q("llm.GemmQ8", 64, 33, 16),
    LLM_GEMM_Q("llm.GemmQ8", 1600, 70, 64), LLM_GEMM_Q("llm.GemmQ8", 4096, 256, 17),
    LLM_GEMM_Q("llm.GemmQ8", 14336, 96, 128), LLM_GEMM_Q("llm.GemmQ8", 80, 40, 65),
    LLM_GEMM_Q("llm.GemmQ4", 32, 1, 9), LLM_GEMM_Q("llm.GemmQ4", 160, 33, 16),
    LLM_GEMM_Q("llm.GemmQ4", 1600, 70, 64), LLM_GEMM_Q("llm.GemmQ4", 4096, 256, 17),
    LLM_GEMM_Q("llm.GemmQ4", 14336, 96, 128), LLM_GEMM_Q("llm.GemmQ4", 96, 40, 65),
    {"llm.DequantQ4", "rows=64 K=128", NULL, 0, 0}, {"llm.DequantQ4", "rows=7 K=13", NULL, 0, 0},
    {"llm.DequantQ4", "rows=300 K=4100", NULL, 0, 0}, {"llm.DequantQ4", "rows=33 K=160", NULL, 0, 0},
    /* FP8: the activations' rounding (codes and scales bit for bit), the GEMV (n <= 8; K not a
     * multiple of 16: one code at a time), cuBLASLt's FP8 GEMM and its epilogue (n > 8) */
    {"llm.QuantFp8", "K=64 n=1", NULL, 0, 0}, {"llm.QuantFp8", "K=4096 n=5", NULL, 0, 0},
    {"llm.QuantFp8", "K=4096 n=3 static=1", NULL, 0, 0}, {"llm.QuantFp8", "K=13 n=2", NULL, 0, 0},
    LLM_LINEAR_FP8(16, 1, 1), LLM_LINEAR_FP8(64, 5, 2), LLM_LINEAR_FP8(384, 1152, 1), LLM_LINEAR_FP8(1536, 384, 8),
    LLM_LINEAR_FP8(4096, 6144, 1), LLM_LINEAR_FP8(14336, 4096, 3), LLM_LINEAR_FP8(40, 33, 7),
    LLM_LINEAR_FP8(4096, 4096, 64), LLM_LINEAR_FP8(4096, 14336, 128), LLM_LINEAR_FP8(384, 8192, 33),
    LLM_LINEAR_FP8(40, 33, 20),
    /* greedy argmax: ties to the lowest id, NaN never wins */
    {"llm.Argmax", "vocab=1", NULL, 0, 0}, {"llm.Argmax", "vocab=7", NULL, 0, 0}, {"llm.Argmax", "vocab=1000", NULL, 0, 0},
    {"llm.Argmax", "vocab=50257", NULL, 0, 0}, {"llm.Argmax", "vocab=128256", NULL, 0, 0},
    /* the sampler: the same seed gives kiln_sample_next's token, at temperature 0 and above */
    LLM_SAMPLE(7), LLM_SAMPLE(1000), LLM_SAMPLE(50257),
    {"llm.Sample", "vocab=128256 temp=0.7 top_k=50 top_p=0.95", NULL, 0, 0},
    {"llm.Sample", "vocab=7 mixed=1", NULL, 0, 0}, {"llm.Sample", "vocab=1000 mixed=1", NULL, 0, 0},
    {"llm.Sample", "vocab=50257 mixed=1", NULL, 0, 0},
    /* the channels-last implicit-GEMM kernel (qconv_igemm.cu: group 1, no weight zero point): odd
     * channel counts (input padded to 16, k tails short of a 64-byte step), strides 1 and 2, 1x1 / 3x3
     * / 7x7, asymmetric pads and dilation, uint8 input whose zero point fills the padding, int8 /
     * uint8 / float outputs, batch 1, and a call large enough for its 128 x 128 tiles */
    {"kiln.QConv", "i8[2,19,13,11]{-128,128} Ki8[37,19,3,3]{-127,128} Kf[37]",
     "strides=[2,2] pads=[1,0,1,2] x_scale=0.05 w_scale=[0.002] y_dtype=3 y_scale=0.04 activation='Relu'", 0, 0},
    {"kiln.QConv", "u8[3,24,9,9]{0,256} Ki8[40,24,3,3]{-127,128} Kf[40]",
     "pads=[1,1,1,1] x_scale=0.05 x_zero_point=131 w_scale=[0.002] y_dtype=2 y_scale=0.05 y_zero_point=128", 0, 0},
    {"kiln.QConv", "i8[1,64,15,15]{-128,128} Ki8[128,64,1,1]{-127,128} Kf[128]",
     "strides=[2,2] x_scale=0.05 w_scale=[0.001] y_dtype=3 y_scale=0.05", 0, 0},
    {"kiln.QConv", "i8[2,16,12,12]{-128,128} Ki8[24,16,3,3]{-127,128}",
     "dilations=[2,2] pads=[2,2,2,2] x_scale=0.05 x_zero_point=-7 w_scale=[0.002] activation='Clip' "
     "activation_params=[-1.0,1.0]", 0, 0},
    {"kiln.QConv", "i8[2,3,32,32]{-128,128} Ki8[64,3,7,7]{-127,128} Kf[64]",
     "strides=[2,2] pads=[3,3,3,3] x_scale=0.05 w_scale=[0.002] y_dtype=3 y_scale=0.05 activation='Relu'", 0, 0},
    {"kiln.QConv", "i8[8,32,33,33]{-128,128} Ki8[160,32,3,3]{-127,128} Kf[160]",
     "pads=[1,1,1,1] x_scale=0.05 w_scale=[0.001] y_dtype=3 y_scale=0.05 activation='Relu'", 0, 0},
    /* with a residual R (ResNet's Add before the ReLU): int8, and uint8 with a zero point into floats */
    {"kiln.QConv", "i8[2,64,14,14]{-128,128} Ki8[64,64,3,3]{-127,128} Kf[64] i8[2,64,14,14]{-128,128}",
     "pads=[1,1,1,1] x_scale=0.05 w_scale=[0.001] r_scale=0.04 y_dtype=3 y_scale=0.05 activation='Relu'", 0, 0},
    {"kiln.QConv", "i8[1,32,9,9]{-128,128} Ki8[48,32,1,1]{-127,128} - u8[1,48,9,9]{0,256}",
     "x_scale=0.05 w_scale=[0.002] r_scale=0.03 r_zero_point=128", 0, 0},
    /* channels-last (the layout pass's form): X read in place (C a multiple of 16, or the stem's C = 8:
     * two taps per 16 bytes) or padded (C = 8, uint8), a residual, a 1x1 */
    {"kiln.QConv", "i8[2,9,9,32]{-128,128} Ki8[48,3,3,32]{-127,128} Kf[48]",
     "pads=[1,1,1,1] channels_last=1 x_scale=0.05 w_scale=[0.001] y_dtype=3 y_scale=0.05 activation='Relu'", 0, 0},
    {"kiln.QConv", "i8[3,13,11,8]{-128,128} Ki8[20,7,7,8]{-127,128} Kf[20]",
     "strides=[2,2] pads=[3,3,3,3] channels_last=1 x_scale=0.05 w_scale=[0.002] y_dtype=3 y_scale=0.05", 0, 0},
    {"kiln.QConv", "u8[2,11,11,8]{0,256} Ki8[24,7,7,8]{-127,128} Kf[24] u8[2,6,6,24]{0,256}",
     "strides=[2,2] pads=[3,3,3,3] channels_last=1 x_scale=0.05 x_zero_point=128 w_scale=[0.002] r_scale=0.03 "
     "r_zero_point=128 y_dtype=2 y_scale=0.05 y_zero_point=128 activation='Relu'", 0, 0},
    {"kiln.QConv", "i8[3,7,7,64]{-128,128} Ki8[256,1,1,64]{-127,128} Kf[256] i8[3,7,7,256]{-128,128}",
     "channels_last=1 x_scale=0.05 w_scale=[0.001] r_scale=0.04 y_dtype=3 y_scale=0.05 activation='Relu'", 0, 0},
    /* a float residual (a downsampling block's shortcut convolution), in the engine's float type */
    {"kiln.QConv", "i8[2,14,14,64]{-128,128} Ki8[128,3,3,64]{-127,128} Kf[128] f[2,7,7,128]{-2,2}",
     "strides=[2,2] pads=[1,1,1,1] channels_last=1 x_scale=0.05 w_scale=[0.001] y_dtype=3 y_scale=0.05 "
     "activation='Relu'", 0, 0},
    {"kiln.QConv", "i8[2,64,14,14]{-128,128} Ki8[32,64,1,1]{-127,128} - f[2,32,14,14]{-2,2}",
     "x_scale=0.05 w_scale=[0.002]", 0, 0},
    /* QConv's paths (quant_conv_im2col.cu), each forced in turn by KILN_CUDA_QCONV_PATH (ctest
     * test_backend_ops_qconv_path*): channels-last 1x1 layers — batch 1 with an int8 residual and
     * channel counts that are multiples of 4 but not of 16, a stride-2 downsample (gathered rows for
     * the fused cuBLASLt GEMM) without activation, a float output (which the GEMM leaves to the
     * others) — a 3x3 layer of more than 256 channels for the 128 x 256 tile, and a dilated, strided
     * window with uneven pads (the GEMM's im2col rows in 4-byte words) */
    {"kiln.QConv", "i8[1,5,7,20]{-128,128} Ki8[36,1,1,20]{-127,128} Kf[36] i8[1,5,7,36]{-128,128}",
     "channels_last=1 x_scale=0.05 w_scale=[0.002] r_scale=0.04 y_dtype=3 y_scale=0.05 activation='Relu'", 0, 0},
    {"kiln.QConv", "i8[2,13,14,64]{-128,128} Ki8[128,1,1,64]{-127,128} Kf[128]",
     "strides=[2,2] channels_last=1 x_scale=0.05 w_scale=[0.001] y_dtype=3 y_scale=0.05", 0, 0},
    {"kiln.QConv", "i8[2,6,6,32]{-128,128} Ki8[24,1,1,32]{-127,128} Kf[24]",
     "channels_last=1 x_scale=0.05 w_scale=[0.002] activation='Relu'", 0, 0},
    {"kiln.QConv", "i8[2,12,12,48]{-128,128} Ki8[272,3,3,48]{-127,128} Kf[272] i8[2,12,12,272]{-128,128}",
     "pads=[1,1,1,1] channels_last=1 x_scale=0.05 w_scale=[0.001] r_scale=0.04 y_dtype=3 y_scale=0.05 "
     "activation='Relu'", 0, 0},
    {"kiln.QConv", "i8[2,10,9,12]{-128,128} Ki8[16,3,3,12]{-127,128} Kf[16]",
     "dilations=[2,1] strides=[1,2] pads=[2,0,1,1] channels_last=1 x_scale=0.05 w_scale=[0.002] y_dtype=3 "
     "y_scale=0.05 activation='Relu'", 0, 0},
    /* batch 1, few tiles and deep K: the split-K launch (9 and 5 splits on 132 SMs), channels-last with
     * a residual and NCHW into uint8 */
    {"kiln.QConv", "i8[1,5,5,256]{-128,128} Ki8[96,3,3,256]{-127,128} Kf[96] i8[1,5,5,96]{-128,128}",
     "pads=[1,1,1,1] channels_last=1 x_scale=0.05 w_scale=[0.001] r_scale=0.04 y_dtype=3 y_scale=0.05 "
     "activation='Relu'", 0, 0},
    {"kiln.QConv", "i8[1,160,6,6]{-128,128} Ki8[40,160,3,3]{-127,128} Kf[40]",
     "pads=[1,1,1,1] x_scale=0.05 w_scale=[0.001] y_dtype=2 y_scale=0.05 y_zero_point=128", 0, 0},
    {NULL, NULL, NULL, 0, 0},
};

/* --perf: bandwidth-bound ops on 4096x4096 (64 MiB in float32), GEMMs at 4096^3 and transformer
 * sizes, ResNet-50 convolutions at batch 32 (plain, and as FusedConv in both layouts; integer ones
 * also channels-last at batch 256). */
const op_case kiln_perf_cases[] = {
    {"Add", "f[4096,4096] f[4096,4096]", "", 0, 0},
    {"Mul", "f[4096,4096] Kf[4096]", "", 0, 0},
    {"Relu", "f[4096,4096]", "", 0, 0},
    {"Gelu", "f[4096,4096]", "", 0, 0},
    {"Cast", "f[4096,4096]", "to=10", 0, 0},
    {"Softmax", "f[4096,4096]", "", 0, 0},
    {"LayerNormalization", "f[4096,4096] Kf[4096] Kf[4096]", "", 0, 0},
    /* BERT-base at batch 32, seq 128: LayerNorm, and the FFN's first GEMM with bias + Gelu (erf) */
    {"LayerNormalization", "f[4096,768] Kf[768] Kf[768]", "epsilon=1e-12", 0, 0},
    {"kiln.FusedMatMul", "f[4096,768] Kf[768,3072] Kf[3072]", "activation='Gelu'", 0, 0},
    {"ReduceSum", "f[4096,4096] Ki64[1]=1", "", 0, 0},
    {"ReduceMean", "f[4096,4096] Ki64[1]=0", "", 0, 0},
    {"Transpose", "f[4096,4096]", "perm=[1,0]", 0, 0},
    {"Transpose", "f[32,128,12,64]", "perm=[0,2,1,3]", 0, 0},
    {"Concat", "f[2048,4096] f[2048,4096]", "axis=1", 0, 0},
    {"Slice", "f[4096,4096] Ki64[1]=1 Ki64[1]=4095 Ki64[1]=1", "", 0, 0},
    {"Gather", "Kf[50257,1600] i64[1,128]{0,50257}", "", 0, 0},
    {"Where", "b[4096,4096] f[4096,4096] Kf[]", "", 0, 0},
    {"MatMul", "f[4096,4096] Kf[4096,4096]", "", 0, 0},
    {"MatMul", "f[1,128,1600] Kf[1600,6400]", "", 0, 0},
    {"MatMul", "f[32,128,768] Kf[768,3072]", "", 0, 0},
    {"MatMul", "f[32,12,128,64] f[32,12,64,128]", "", 0, 0},
    /* BERT-base attention at batch 32, seq 128: the unfused parts (Q K^T above, softmax, P V) and
     * kiln.Attention (K, V and the padding mask constants, so that only Q and O cross the bus) */
    {"Softmax", "f[32,12,128,128]", "", 0, 0},
    {"MatMul", "f[32,12,128,128] f[32,12,128,64]", "", 0, 0},
    {"kiln.Attention", "f[32,12,128,64] Kf[32,12,128,64] Kf[32,12,128,64] Kf[32,1,1,128]{-5,0}", "scale=0.125", 0, 0},
    {"kiln.Attention", "f[32,12,128,64] Kf[32,12,128,64] Kf[32,12,128,64]", "scale=0.125 causal=1", 0, 0},
    {"kiln.Attention", "f[32,12,128,64] Kf[32,12,128,64] Kf[32,12,128,64]", "scale=0.125", 0, 0},
    /* as BERT's engine runs it: packed QKV [B, S, 3, H, D] straight from the fused projection */
    {"kiln.Attention", "f[32,128,3,12,64] - - Kf[32,1,1,128]{-5,0}", "scale=0.125 layout=2", 0, 0},
    {"Gemm", "f[4096,4096] Kf[4096,4096] Kf[4096]", "transB=1", 0, 0},
    {"Gemm", "f[256,2048] Kf[1000,2048] Kf[1000]", "transB=1", 0, 0},
    {"Conv", "f[32,3,224,224] Kf[64,3,7,7] Kf[64]", "strides=[2,2] pads=[3,3,3,3]", 0, 0},
    {"Conv", "f[32,64,56,56] Kf[64,64,3,3] Kf[64]", "pads=[1,1,1,1]", 0, 0},
    {"Conv", "f[32,256,56,56] Kf[64,256,1,1] Kf[64]", "", 0, 0},
    {"Conv", "f[32,128,28,28] Kf[128,128,3,3] Kf[128]", "pads=[1,1,1,1]", 0, 0},
    {"Conv", "f[32,512,7,7] Kf[512,512,3,3] Kf[512]", "pads=[1,1,1,1]", 0, 0},
    {"Conv", "f[32,1024,14,14] Kf[2048,1024,1,1]", "strides=[2,2]", 0, 0},
    {"kiln.FusedConv", "f[32,64,56,56] Kf[64,64,3,3] Kf[64]", "pads=[1,1,1,1] activation='Relu'", 0, 0},
    {"kiln.FusedConv", "f[32,56,56,64] Kf[64,3,3,64] Kf[64]", "pads=[1,1,1,1] activation='Relu' channels_last=1", 0, 0},
    {"kiln.FusedConv", "f[32,56,56,64] Kf[256,1,1,64] Kf[256] f[32,56,56,256]", "activation='Relu' channels_last=1", 0, 0},
    {"kiln.FusedConv", "f[32,14,14,1024] Kf[2048,1,1,1024] Kf[2048]", "strides=[2,2] channels_last=1", 0, 0},
    {"MaxPool", "f[32,64,112,112]", "kernel_shape=[3,3] strides=[2,2] pads=[1,1,1,1]", 0, 0},
    /* ResNet-50's stem pool at batch 256 */
    {"MaxPool", "f[256,64,112,112]", "kernel_shape=[3,3] strides=[2,2] pads=[1,1,1,1]", 0, 0},
    {"kiln.FusedPool", "f[256,112,112,64]", "pool='MaxPool' kernel_shape=[3,3] strides=[2,2] pads=[1,1,1,1] channels_last=1", 0, 0},
    {"GlobalAveragePool", "f[32,2048,7,7]", "", 0, 0},
    {"kiln.FusedPool", "f[256,7,7,2048]", "pool='GlobalAveragePool' channels_last=1", 0, 0},
    /* ResNet-50's stem channel pad (NHWC, 3 -> 8) at batch 256 */
    {"Pad", "f[256,224,224,3] Ki64[8]=0,0,0,0,0,0,0,5", "", 0, 0},
    {"BatchNormalization", "f[32,64,56,56] Kf[64] Kf[64] Kf[64] Kf[64]{0.5,2}", "", 0, 0},
    /* integer layers: BERT-base's FFN GEMM at batch 32 x seq 128 (int8 out, and fp out as before a
     * LayerNorm) and ResNet-50 3x3 / 1x1 convolutions at batch 32 (compare with the float rows above) */
    {"kiln.QMatMul", "i8[4096,768]{-128,128} Ki8[768,3072]{-127,128} Kf[3072]",
     "x_scale=0.05 w_scale=[0.002] y_dtype=3 y_scale=0.05 activation='Gelu'", 0, 0},
    {"kiln.QMatMul", "i8[4096,3072]{-128,128} Ki8[3072,768]{-127,128} Kf[768]", "x_scale=0.05 w_scale=[0.002]", 0, 0},
    /* BERT-base's GEMMs in FP8 at batch 32 x seq 128 (compare with the QMatMul and float rows): FFN1,
     * FFN2 with the Gelu folded into its A and its residual, and the 768-wide projections */
    {"kiln.F8MatMul", "f[4096,768]{-2,2} Ku8[768,3072]{0,127} Kf[3072]", "x_scale=0.01 w_scale=0.001", 0, 0},
    {"kiln.F8MatMul", "f[4096,3072]{-2,2} Ku8[3072,768]{0,127} Kf[768] f[4096,768]",
     "x_scale=0.01 w_scale=0.001 input_activation='Gelu'", 0, 0},
    {"kiln.F8MatMul", "f[4096,768]{-2,2} Ku8[768,768]{0,127} Kf[768]", "x_scale=0.01 w_scale=0.001", 0, 0},
    {"MatMul", "f[4096,768] Kf[768,768]", "", 0, 0},
    /* BERT-base's attention projections (int8 in and out: requantized inside the GEMM) */
    {"kiln.QMatMul", "i8[4096,768]{-128,128} Ki8[768,768]{-127,128} Kf[768]",
     "x_scale=0.05 w_scale=[0.002] y_dtype=3 y_scale=0.05", 0, 0},
    {"kiln.QConv", "i8[32,64,56,56]{-128,128} Ki8[64,64,3,3]{-127,128} Kf[64]",
     "pads=[1,1,1,1] x_scale=0.05 w_scale=[0.002] y_dtype=3 y_scale=0.05 activation='Relu'", 0, 0},
    {"kiln.QConv", "i8[32,256,56,56]{-128,128} Ki8[64,256,1,1]{-127,128} Kf[64]",
     "x_scale=0.05 w_scale=[0.002] y_dtype=3 y_scale=0.05 activation='Relu'", 0, 0},
    /* ResNet-50's stem, a stride-2 3x3, a stride-2 1x1 downsample and a 7x7-map 3x3 at batch 32 */
    {"kiln.QConv", "i8[32,3,224,224]{-128,128} Ki8[64,3,7,7]{-127,128} Kf[64]",
     "strides=[2,2] pads=[3,3,3,3] x_scale=0.05 w_scale=[0.002] y_dtype=3 y_scale=0.05 activation='Relu'", 0, 0},
    {"kiln.QConv", "i8[32,128,56,56]{-128,128} Ki8[128,128,3,3]{-127,128} Kf[128]",
     "strides=[2,2] pads=[1,1,1,1] x_scale=0.05 w_scale=[0.002] y_dtype=3 y_scale=0.05 activation='Relu'", 0, 0},
    {"kiln.QConv", "i8[32,1024,14,14]{-128,128} Ki8[2048,1024,1,1]{-127,128} Kf[2048]",
     "strides=[2,2] x_scale=0.05 w_scale=[0.002] y_dtype=3 y_scale=0.05", 0, 0},
    {"kiln.QConv", "i8[32,512,7,7]{-128,128} Ki8[512,512,3,3]{-127,128} Kf[512]",
     "pads=[1,1,1,1] x_scale=0.05 w_scale=[0.002] y_dtype=3 y_scale=0.05 activation='Relu'", 0, 0},
    /* the same layers as the layout pass leaves them at batch 256 (channels-last, int8 in place,
     * NHWC out), a bottleneck's last 1x1 with its residual, and the padded RGB stem */
    {"kiln.QConv", "i8[256,56,56,64]{-128,128} Ki8[64,3,3,64]{-127,128} Kf[64]",
     "pads=[1,1,1,1] channels_last=1 x_scale=0.05 w_scale=[0.002] y_dtype=3 y_scale=0.05 activation='Relu'", 0, 0},
    {"kiln.QConv", "i8[256,56,56,64]{-128,128} Ki8[256,1,1,64]{-127,128} Kf[256] i8[256,56,56,256]{-128,128}",
     "channels_last=1 x_scale=0.05 w_scale=[0.002] r_scale=0.05 y_dtype=3 y_scale=0.05 activation='Relu'", 0, 0},
    {"kiln.QConv", "i8[256,14,14,1024]{-128,128} Ki8[256,1,1,1024]{-127,128} Kf[256]",
     "channels_last=1 x_scale=0.05 w_scale=[0.002] y_dtype=3 y_scale=0.05 activation='Relu'", 0, 0},
    {"kiln.QConv", "i8[256,7,7,512]{-128,128} Ki8[512,3,3,512]{-127,128} Kf[512]",
     "pads=[1,1,1,1] channels_last=1 x_scale=0.05 w_scale=[0.002] y_dtype=3 y_scale=0.05 activation='Relu'", 0, 0},
    {"kiln.QConv", "i8[256,224,224,8]{-128,128} Ki8[64,7,7,8]{-127,128} Kf[64]",
     "strides=[2,2] pads=[3,3,3,3] channels_last=1 x_scale=0.05 w_scale=[0.002] activation='Relu'", 0, 0},
    /* more of ResNet-50's channels-last layers at batch 256 (a 56x56 1x1 reduce, the stride-2 1x1
     * downsample into stage 2), then the same kinds at batch 1 (latency); KILN_CUDA_QCONV_PATH=N
     * times each path (quant_conv_im2col.cu) */
    {"kiln.QConv", "i8[256,56,56,256]{-128,128} Ki8[64,1,1,256]{-127,128} Kf[64]",
     "channels_last=1 x_scale=0.05 w_scale=[0.002] y_dtype=3 y_scale=0.05 activation='Relu'", 0, 0},
    {"kiln.QConv", "i8[256,56,56,256]{-128,128} Ki8[512,1,1,256]{-127,128} Kf[512]",
     "strides=[2,2] channels_last=1 x_scale=0.05 w_scale=[0.002] y_dtype=3 y_scale=0.05", 0, 0},
    {"kiln.QConv", "i8[1,56,56,64]{-128,128} Ki8[64,3,3,64]{-127,128} Kf[64]",
     "pads=[1,1,1,1] channels_last=1 x_scale=0.05 w_scale=[0.002] y_dtype=3 y_scale=0.05 activation='Relu'", 0, 0},
    {"kiln.QConv", "i8[1,56,56,64]{-128,128} Ki8[256,1,1,64]{-127,128} Kf[256] i8[1,56,56,256]{-128,128}",
     "channels_last=1 x_scale=0.05 w_scale=[0.002] r_scale=0.05 y_dtype=3 y_scale=0.05 activation='Relu'", 0, 0},
    {"kiln.QConv", "i8[1,14,14,1024]{-128,128} Ki8[256,1,1,1024]{-127,128} Kf[256]",
     "channels_last=1 x_scale=0.05 w_scale=[0.002] y_dtype=3 y_scale=0.05 activation='Relu'", 0, 0},
    {"kiln.QConv", "i8[1,7,7,512]{-128,128} Ki8[512,3,3,512]{-127,128} Kf[512]",
     "pads=[1,1,1,1] channels_last=1 x_scale=0.05 w_scale=[0.002] y_dtype=3 y_scale=0.05 activation='Relu'", 0, 0},
    {"kiln.QConv", "i8[1,224,224,8]{-128,128} Ki8[64,7,7,8]{-127,128} Kf[64]",
     "strides=[2,2] pads=[3,3,3,3] channels_last=1 x_scale=0.05 w_scale=[0.002] y_dtype=3 y_scale=0.05 "
     "activation='Relu'", 0, 0},
    {NULL, NULL, NULL, 0, 0},
};
