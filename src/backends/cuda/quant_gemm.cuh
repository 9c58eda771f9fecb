/* quant_gemm.cuh — what the integer layers' CUDA files share (kiln.QMatMul: quant_matmul.cu,
 * kiln.QConv: quant_conv_im2col.cu): the node state with its prepared device parameters, the cuBLASLt IMMA
 * GEMM exact (int32 D) or with the requantization fused in (quant_gemm.cu), and the kernels around it
 * (quant_kernels.cu). The contract of the whole is in quant_gemm.cu's header comment. */
#ifndef KILN_CUDA_QUANT_GEMM_CUH
#define KILN_CUDA_QUANT_GEMM_CUH

#include "backends/cuda/kernel_util.cuh"

extern "C" {
#include "ir/quant_ops.h"
}

#define QG_MAX_K 32768                     /* as the CPU kernels: no 8-bit sum of this many can overflow */
#define QG_ALIGN 256                       /* workspace sub-buffers start on this boundary */
#define QG_LT_WORKSPACE ((size_t)32 << 20) /* at most this much workspace for cuBLASLt itself */
#define QG_CALLS 2                         /* cached GEMM shapes per node: full chunks and the last one */
/* A chunk's int32 D is kept to about this size when a chunk of one row (image) allows it, so that the
 * epilogue reads it back from L2 (50 MiB on Hopper) rather than from memory. */
#define QG_D_TARGET ((size_t)16 << 20)

static inline size_t qg_align(size_t b) { return (b + QG_ALIGN - 1) / QG_ALIGN * QG_ALIGN; }
static inline int64_t qg_round4(int64_t v) { return (v + 3) / 4 * 4; }
static inline bool qg_is_8bit(kiln_dtype t) { return t == KILN_I8 || t == KILN_U8; }

/* Where the epilogue writes D[r, c]: y + (r / P) * img_stride + c * c_stride + (r % P) * p_stride.
 * QMatMul: P = rows, c_stride 1, p_stride N; QConv (NCHW): P output positions, img_stride M * P,
 * c_stride P, p_stride 1. */
typedef struct qg_out_map {
    int64_t P, img_stride, c_stride, p_stride;
} qg_out_map;

/* The per-channel parameters on the device and the constants of the epilogue. */
typedef struct qg_epi {
    const float *scale;    /* [M] x_scale * w_scale[c] (float32 product, as the CPU) */
    const float *bias;     /* [M] or NULL */
    const int32_t *colsum; /* [M] sum_k w'[c, k] */
    const int32_t *wzp;    /* [M] shifted weight zero points */
    int32_t xzp;           /* shifted input zero point */
    int32_t K;             /* real inner length (per group) */
    int kind;              /* activation */
    float p0, p1;
    float y_scale;
    float y_zero_point;
    int32_t lo, hi;        /* integer output range */
} qg_epi;

/* The geometry of one QConv (2-D; a 1-D one has H = OH = kh = 1). */
typedef struct qg_conv_geom {
    int64_t N, C, H, W, M, OH, OW, kh, kw, sy, sx, dy, dx, pt, pl, group, Cg, Mg;
} qg_conv_geom;

/* One cached cuBLASLt call: D[Mp, R] = Wt^T X (ldb the activations' row length). fallback: cuBLASLt
 * cannot make it (the CUDA-core kernel runs it instead). fused: the requantizing call (out_dtype D,
 * the per-channel alpha vector and the bias epilogue), ldd D's row length. */
typedef struct qg_call {
    bool valid, fallback, fused, with_c; /* with_c: the fused call adds beta C (beta on the host) */
    int64_t R, ldb, ldd;
    kiln_dtype out_dtype;   /* KILN_I32 for the exact path's D */
    uint32_t align_b, align_d; /* the alignments of X and D cuBLASLt was told */
    cublasLtMatmulDesc_t op;
    cublasLtMatrixLayout_t la, lb, ld;
    cublasLtMatmulAlgo_t algo;
    size_t ws_need;
} qg_call;

/* Whether a QMatMul's requantization runs inside the GEMM (quant_gemm.cu: kiln_qg_fused_ok). */
typedef enum { QG_FUSED_UNTRIED, QG_FUSED_YES, QG_FUSED_NO } qg_fused_state;

/* A QMatMul / QConv node's state in one context: its prepared parameters on the device. */
typedef struct qg_state {
    kiln_cuda_node_state base;
    void *dev;               /* one allocation: wt, colsum, wzp, scale, bias, fused alpha / bias, a zero */
    const int8_t *wt;        /* [group][Mp][Kp] shifted weights, zero-padded */
    qg_epi epi;              /* pointers into dev and the epilogue constants */
    const float *alpha_q;    /* [Mp] scale[c] / y_scale: the fused call's alpha vector for an int8 output */
    const float *bias_q;     /* [Mp] bias[c] / y_scale (zeros without a bias) */
    const float *alpha_f;    /* [Mp] scale[c]: the fused call's alpha vector for a float output */
    const float *bias_f;     /* [Mp] bias[c] (zeros without a bias) */
    const float *zero;       /* one float 0 on the device: beta */
    int64_t K, Kp, Mg, Mp, group;
    bool any_wzp;            /* some shifted weight zero point is non-zero: rowsums are needed */
    int x_shift;             /* 128 for uint8 input, else 0 */
    qg_call calls[QG_CALLS];
    int next_call;
    qg_fused_state fused;    /* whether the fused call runs (decided on the first run) */
    bool fallback_logged;    /* the CUDA-core product's warning was given */
    __half *w16;             /* the float16 path's weights w_scale[c] (w - w_zero_point[c]): QMatMul [K, N],
                              * QConv [M, Cg, taps]; made on its first use */
    __half *b16;             /* QConv's float16 path: the bias in float16, inside w16's allocation (NULL
                              * without one) */
    kiln_cuda_node_state *conv16; /* QConv's float16 path: the state of its cuDNN convolution (conv.cu) */
} qg_state;

/* A layer's weights as its host copy holds them: QMatMul [K, N], QConv [M, Cg, taps] (weight k of
 * output channel c at c * K + k). */
typedef struct qg_host_weights {
    const void *data;
    kiln_dtype dtype;
    bool matmul;  /* [K, N] (QMatMul) rather than [M, Cg, taps] (QConv) */
    int64_t M;    /* output channels */
} qg_host_weights;

/* ---------------------------------------------------------------- quant_gemm.cu */

/* Weight k of output channel c, shifted to int8 (uint8 - 128). */
int32_t kiln_qg_weight_at(const qg_host_weights *w, int64_t K, int64_t c, int64_t k);

/* The node's state (*ctx->state), prepared on its first run from the host copies (weights, scales,
 * zero points, bias: NULL when absent); *temp when the context keeps none (ctx->state NULL: the
 * tuner), for the caller to end with kiln_qg_finish. */
kiln_status kiln_qg_state_get(const kiln_node *n, const kiln_quant_layer *ql, const qg_host_weights *w,
                              const kiln_cuda_tensor *bias, kiln_dtype x_dtype, int64_t K, int64_t Mg, int64_t group,
                              kiln_cuda_ctx *ctx, qg_state **out, bool *temp);

/* Ends a call with status s: a temporary state (temp) is destroyed once the stream has done its work. */
kiln_status kiln_qg_finish(qg_state *st, bool temp, kiln_status s, kiln_cuda_ctx *ctx);
/* True when ctx keeps no node state yet, or one of this file's (kiln_qg_state_get would take it). */
bool kiln_qg_state_free_or_mine(const kiln_cuda_ctx *ctx);

/* D[R, Mp] (int32, row-major, in ctx's workspace) = X[R, ldb] (int8 rows) times group g's weights:
 * cuBLASLt's IMMA GEMM, or the CUDA-core kernel where cuBLASLt refuses the call (warned once). */
kiln_status kiln_qg_gemm(const kiln_node *n, qg_state *st, int64_t g, const int8_t *x, int64_t R, int64_t ldb,
                         int32_t *D, void *lt_ws, size_t lt_bytes, kiln_cuda_ctx *ctx);

/* Whether a QMatMul of state st, activation ql->act and output y (dtype t) may requantize inside
 * the GEMM: one group, no zero point left after the shift (symmetric int8 input and weights, or
 * uint8 ones at 128), N (= Mp) a multiple of 4, and an int8 output with zero point 0 and activation
 * none or Relu, or a float output with none, Relu or tanh-Gelu (cuBLASLt's epilogues). Whether cuBLASLt takes it is known only on the first call (st->fused). */
bool kiln_qg_fused_ok(const qg_state *st, const kiln_quant_layer *ql, kiln_dtype t);

/* y[R, Mp] (dtype t, rows of ldd elements) = requantize(X[R, ldb] times the weights) in one cuBLASLt
 * call: alpha[c] = x_scale w_scale[c] (/ y_scale for int8), the bias (/ y_scale) and Relu in its
 * epilogue, int8 rounded and saturated by cuBLASLt. *done false (nothing enqueued, st->fused set to
 * QG_FUSED_NO with a verbose log line naming the reason) when cuBLASLt offers no algorithm for it. */
kiln_status kiln_qg_gemm_fused(const kiln_node *n, qg_state *st, const int8_t *x, int64_t R, int64_t ldb, kiln_dtype t,
                               void *y, int64_t ldd, void *lt_ws, size_t lt_bytes, kiln_cuda_ctx *ctx, bool *done);

/* kiln_qg_gemm_fused plus beta c_in (c_in NULL: none): y = epilogue(alpha[c] (X W)[r, c] + beta
 * c_in[r, c]) with c_in of y's type and layout and beta a host float
 * (CUBLASLT_POINTER_MODE_ALPHA_DEVICE_VECTOR_BETA_HOST); the bias and Relu of the epilogue apply after
 * the sum (cuBLASLt: D = epilogue(alpha AB + beta C)). QConv's residual R, int8 with zero point 0, is
 * c_in with beta = r_scale / y_scale. */
kiln_status kiln_qg_gemm_fused_c(const kiln_node *n, qg_state *st, const int8_t *x, int64_t R, int64_t ldb,
                                 kiln_dtype t, void *y, int64_t ldd, const void *c_in, float beta, void *lt_ws,
                                 size_t lt_bytes, kiln_cuda_ctx *ctx, bool *done);

/* The workspace split of one chunk of R rows: activation rows (when copied), D, rowsums, then
 * cuBLASLt's share. Returns the bytes before cuBLASLt's share. */
size_t kiln_qg_chunk_bytes(const qg_state *st, int64_t R, bool copy_rows);

/* How many of `units` (rows or images of `per` rows each) make a chunk: as many as fit the workspace
 * with cuBLASLt's share lt_bytes and keep D within QG_D_TARGET, at least one; fails naming the node
 * when not even one fits the workspace. */
kiln_status kiln_qg_chunk_units(const kiln_node *n, const qg_state *st, int64_t units, int64_t per, bool copy_rows,
                                size_t lt_bytes, const kiln_cuda_ctx *ctx, int64_t *out);

/* cuBLASLt's share of the workspace: a quarter of it, at most QG_LT_WORKSPACE. */
size_t kiln_qg_lt_bytes(const kiln_cuda_ctx *ctx);

/* Input i of a node's inputs, NULL when absent. */
const kiln_cuda_tensor *kiln_qg_input(const kiln_cuda_tensor *in, int nin, int i);

/* The bias (absent: NULL) when it has a host copy of count float32 / float16 / bfloat16 values (a
 * 16-bit engine may store its constants in 16 bits: cuda_weights.c); fails otherwise. */
kiln_status kiln_qg_host_bias(const kiln_node *n, const kiln_cuda_tensor *b, int64_t count,
                              const kiln_cuda_tensor **out);

/* The output dtypes the layer may write: its y_dtype, or any float type for a float result. */
bool kiln_qg_out_ok(const kiln_quant_layer *ql, kiln_dtype t);

/* Both layers' build-time check: 8-bit X, constant 8-bit weights of rank weight_rank_lo..hi, a
 * constant bias when present, valid attributes, an output of the layer's y_dtype (or a float type). */
kiln_status kiln_qg_supports(const kiln_graph *g, const kiln_node *n, int weight_rank_lo, int weight_rank_hi);

/* The candidates of a quantized layer for the tuner (ctx->candidates): tactics of kind
 * KILN_TACTIC_PATH, algo 0 its int8 (kiln.F8MatMul: fp8) path, the default, algo 1 its float16 one. */
kiln_status kiln_qg_list_paths(kiln_cuda_ctx *ctx);

/* Whether ctx's tactic asks for the float16 path (a tactic of another kind is rejected: the int8 path
 * runs, or, while tuning, the call fails). */
kiln_status kiln_qg_wants_f16(const kiln_node *n, kiln_cuda_ctx *ctx, bool *f16);

/* ---------------------------------------------------------------- quant_conv_im2col.cu, quant_conv_f16.cu */

/* QConv's float16 path, the tuner's alternative to its int8 one: x dequantized to float16, cuDNN's
 * float16 convolution by the dequantized weights with the bias, the residual r (NULL: none; 8-bit,
 * dequantized to float16, or float16 as it is: kiln_qg_f16_residual_ok) and the activation (conv.cu,
 * its state in st->conv16; NHWC for a channels-last node), then the output conversion (int8 / uint8
 * quantized as the exact path does, or the float type), in chunks of images that fit half the
 * workspace. */
kiln_status kiln_qg_conv_f16(const kiln_node *n, const kiln_quant_layer *ql, qg_state *st, const qg_host_weights *w,
                             const kiln_cuda_tensor *bias, const kiln_cuda_tensor *x, const kiln_cuda_tensor *wt,
                             const kiln_cuda_tensor *r, const qg_conv_geom &gm, const kiln_cuda_tensor *y,
                             kiln_cuda_ctx *ctx);

/* Whether the float16 path takes residual r (NULL: no residual): int8, uint8 or float16. */
bool kiln_qg_f16_residual_ok(const kiln_cuda_tensor *r);

/* kiln.QConv's exec function (kiln_cuda_kernels_quant, in quant_matmul.cu, lists it). */
kiln_status kiln_qg_exec_qconv(const kiln_node *n, const kiln_cuda_tensor *in, int nin, const kiln_cuda_tensor *out,
                               int nout, kiln_cuda_ctx *ctx);

/* ---------------------------------------------------------------- quant_kernels.cu (launchers) */

/* rowsum[r] of the R rows of x (row length ldb) when the weights have zero points; else no kernel. */
kiln_status kiln_qg_rowsums(const qg_state *st, const int8_t *x, int64_t R, int64_t ldb, int32_t *rowsum,
                            kiln_cuda_ctx *ctx);

/* The epilogue of D (R rows, group g's channels) into y (dtype t) through map m; p_fast: consecutive
 * threads take consecutive rows (NCHW output). */
kiln_status kiln_qg_epilogue(const kiln_node *n, const qg_state *st, int64_t g, const int32_t *D, int64_t R,
                             const int32_t *rowsum, const qg_out_map &m, bool p_fast, kiln_dtype t, void *y,
                             kiln_cuda_ctx *ctx);

/* dst[r * Kp + k] = k < K ? src[r * K + k] - shift : 0 for r < R: 8-bit rows (src_dtype int8 or
 * uint8, shift 128 for uint8) as int8, padded to Kp. */
kiln_status kiln_qg_copy_rows(const void *src, kiln_dtype src_dtype, int64_t R, int64_t K, int64_t Kp, int8_t *dst,
                              kiln_cuda_ctx *ctx);

/* im2col of images [img0, img0 + R / P) of x (NCHW, int8 or uint8), group g's channels, into
 * dst[r * Kp + k] (quant_kernels.cu's kernel has the layout); pad_value in the padding. */
kiln_status kiln_qg_im2col(const void *x, kiln_dtype x_dtype, const qg_conv_geom &gm, int64_t img0, int64_t g,
                           int64_t R, int64_t K, int64_t Kp, int8_t pad_value, int8_t *dst, kiln_cuda_ctx *ctx);

/* D[r, c] = sum_k x[r * ldb + k] w[c * Kp + k] on CUDA cores (4-way int8 dot products). */
kiln_status kiln_qg_gemm_cuda_cores(const int8_t *x, int64_t ldb, const int8_t *w, int64_t Kp, int64_t R, int64_t Mp,
                                    int32_t *D, kiln_cuda_ctx *ctx);

/* dst[i] = x_scale * (src[i] - zp) in float16 for i < count (src int8 or uint8). */
kiln_status kiln_qg_dequant_f16(const void *src, kiln_dtype src_dtype, int64_t count, int32_t zp, float x_scale,
                                __half *dst, kiln_cuda_ctx *ctx);

/* y[r, c] = out(act(D[r, c] + bias[c])) for the float16 path's product D [R, N] (float16), y dtype t. */
kiln_status kiln_qg_epilogue_f16(const kiln_node *n, const __half *D, int64_t R, int64_t N, const qg_epi &e,
                                 kiln_dtype t, void *y, kiln_cuda_ctx *ctx);

#endif
