/* quant_gemm.cu — kiln.QMatMul and kiln.QConv (ir/quant_ops.h) on the GPU, their shared part: the
 * node state and the cuBLASLt integer tensor-core GEMM (IMMA: int8 A and B, CUBLAS_COMPUTE_32I).
 * quant_matmul.cu and quant_conv_im2col.cu run the layers, quant_kernels.cu has the kernels around the GEMM.
 *
 * Two paths (both exact in the integer sums):
 * - exact: the GEMM writes int32 D into the workspace, then kiln's own requantizing epilogue kernel
 *   corrects for the zero points, scales by x_scale * w_scale[c], adds the bias, applies the
 *   activation and writes int8 / uint8 (round half to even, saturated) or the engine's float type:
 *   the formulas of the CPU reference kernels (src/backends/cpu/quant_*.c), whose integer outputs it
 *   matches within one unit (the float rounding of the scaling is the same sequence of IEEE
 *   operations, no fused multiply-add; erf-based activations may differ by an ulp).
 * - fused (QMatMul): when no zero point is left after the shift (symmetric int8, what `kiln build
 *   --int8` makes), N is a multiple of 4 and the output int8 with zero point 0 and activation none or
 *   Relu (or float, with none, Relu or tanh-Gelu), one cuBLASLt call writes y itself: alpha a
 *   per-row device vector (CUBLASLT_POINTER_MODE_ALPHA_DEVICE_VECTOR_BETA_ZERO) of x_scale *
 *   w_scale[c] / y_scale, the bias / y_scale in float32 through the BIAS (RELU_BIAS, GELU_BIAS)
 *   epilogue, cuBLASLt's own rounding and saturation to int8 (a float output: no / y_scale). No int32 round trip through memory; the result may differ from the CPU
 *   oracle by one unit in an element (the scale is applied as one product, the division folded into
 *   it). A layer whose call cuBLASLt refuses keeps the exact path (a verbose log line says why).
 *
 * IMMA's regular-layout contract (cuBLASLt): only "TN" (A transposed, B not), m and k multiples of
 * 4, leading dimensions multiples of 4, 4-byte aligned pointers. So the product is formed column-major
 * as D[Mp, R] = Wt[Kp, Mp]^T X[Kp, R]: Wt the weights as rows [channel, k] (k contiguous, padded with
 * zeros to Kp = K rounded up to 4, channels padded to Mp), X the activations as rows [row, k] (a
 * QMatMul's A itself when it is int8 with K a multiple of 4; otherwise a copy in the workspace:
 * uint8 shifted to int8 by -128, rows padded to Kp; a QConv's im2col rows), D int32 [R, Mp] row-major
 * in the workspace. uint8 operands are shifted to int8 (x - 128) with their zero points shifted
 * alike, so the sums are sum (x' - zx')(w' - zw') = sum x'w' - zx' colsum(w') - zw' rowsum(x') +
 * K zx' zw', the corrections applied in the epilogue in 64-bit integers (rowsum only when some weight
 * zero point is non-zero).
 *
 * Weights, per-channel scales, biases and zero points are prepared once per context, on the node's
 * first run (always eager, outside any graph capture: cuda_kernels.h), from their host copies, into
 * one device allocation that the node's state owns (the bias in float32 in 16-bit engines too). A run
 * enqueues only kernels and cuBLASLt calls, split into chunks of rows (QConv: of images) that fit the
 * workspace and whose int32 D stays in L2 (QG_D_TARGET); the cuBLASLt descriptors and the
 * algorithm are cached per chunk shape (the fastest of the heuristic's IMMA candidates, timed when the
 * call is made: lt_pick.cuh); a
 * call cuBLASLt refuses runs a CUDA-core kernel instead, with one warning per node naming the reason. */
#include "backends/cuda/quant_gemm.cuh"
#include "backends/cuda/lt_pick.cuh"

#include <stdlib.h>

extern "C" {
#include "core/log.h"
}

/* ---------------------------------------------------------------- node state */

static const char qg_state_owner[] = "quant_gemm.cu";

static void qg_call_clear(qg_call *c) {
    if (c->ld) cublasLtMatrixLayoutDestroy(c->ld);
    if (c->lb) cublasLtMatrixLayoutDestroy(c->lb);
    if (c->la) cublasLtMatrixLayoutDestroy(c->la);
    if (c->op) cublasLtMatmulDescDestroy(c->op);
    memset(c, 0, sizeof *c);
}

static void qg_state_destroy(kiln_cuda_node_state *base) {
    qg_state *st = (qg_state *)base;
    for (int i = 0; i < QG_CALLS; i++) qg_call_clear(&st->calls[i]);
    if (st->dev) cudaFree(st->dev);
    if (st->w16) cudaFree(st->w16);
    if (st->conv16) st->conv16->destroy(st->conv16);
    free(st);
}

int32_t kiln_qg_weight_at(const qg_host_weights *w, int64_t K, int64_t c, int64_t k) {
    int64_t i = w->matmul ? k * w->M + c : c * K + k;
    return w->dtype == KILN_U8 ? (int32_t)((const uint8_t *)w->data)[i] - 128 : (int32_t)((const int8_t *)w->data)[i];
}

/* Element i of float tensor t's host copy (float32, float16 or bfloat16) as float32. */
static float qg_host_float(const kiln_cuda_tensor *t, int64_t i) {
    if (t->host_dtype == KILN_F16) return kiln_f16_to_f32(((const uint16_t *)t->host)[i]);
    if (t->host_dtype == KILN_BF16) return kiln_bf16_to_f32(((const uint16_t *)t->host)[i]);
    return ((const float *)t->host)[i];
}

/* Prepares st's device parameters: the weights as [group][Mp][Kp] shifted int8 rows (zero-padded),
 * their column sums and shifted zero points, the scales x_scale * w_scale[c] and the biases (float32),
 * the fused call's alpha and bias vectors ([Mp], zero-padded) and a float zero, uploaded into one
 * allocation (st->dev), and the epilogue's constants. */
static kiln_status qg_state_prepare(const kiln_node *n, const kiln_quant_layer *ql, const qg_host_weights *w,
                                    const kiln_cuda_tensor *bias, kiln_dtype x_dtype, qg_state *st) {
    int64_t M = w->M, total_rows = st->group * st->Mp;
    size_t wt_bytes = qg_align((size_t)(total_rows * st->Kp)), m_bytes = qg_align((size_t)M * 4);
    size_t v_bytes = qg_align((size_t)total_rows * 4), v_at = wt_bytes + 4 * m_bytes; /* the fused vectors */
    size_t bytes = v_at + 4 * v_bytes + QG_ALIGN;
    unsigned char *host = (unsigned char *)calloc(1, bytes);
    if (!host) return kiln_error(KILN_ERR_OUT_OF_MEMORY, "%s '%s': out of memory preparing the weights", n->op_type, n->name);
    int8_t *wt = (int8_t *)host;
    int32_t *colsum = (int32_t *)(host + wt_bytes), *wzp = (int32_t *)(host + wt_bytes + m_bytes);
    float *scale = (float *)(host + wt_bytes + 2 * m_bytes), *b = (float *)(host + wt_bytes + 3 * m_bytes);
    float *alpha_q = (float *)(host + v_at), *bias_q = (float *)(host + v_at + v_bytes);
    float *alpha_f = (float *)(host + v_at + 2 * v_bytes), *bias_f = (float *)(host + v_at + 3 * v_bytes);
    int w_shift = w->dtype == KILN_U8 ? 128 : 0;
    st->any_wzp = false;
    for (int64_t c = 0; c < M; c++) {
        int64_t g = c / st->Mg, row = g * st->Mp + c % st->Mg;
        int32_t sum = 0;
        for (int64_t k = 0; k < st->K; k++) {
            int32_t v = kiln_qg_weight_at(w, st->K, c, k);
            wt[row * st->Kp + k] = (int8_t)v;
            sum += v;
        }
        colsum[c] = sum;
        int64_t zp = ql->nwzp == 0 ? 0 : ql->w_zero_point[ql->nwzp == 1 ? 0 : c];
        wzp[c] = (int32_t)(zp - w_shift);
        st->any_wzp |= wzp[c] != 0;
        scale[c] = ql->x_scale * ql->w_scale[ql->nw == 1 ? 0 : c];
        b[c] = bias ? qg_host_float(bias, c) : 0.0f;
        alpha_f[row] = scale[c];
        bias_f[row] = b[c];
        alpha_q[row] = scale[c] / ql->y_scale;
        bias_q[row] = b[c] / ql->y_scale;
    }
    cudaError_t e = cudaMalloc(&st->dev, bytes);
    if (e == cudaSuccess) e = cudaMemcpy(st->dev, host, bytes, cudaMemcpyHostToDevice);
    free(host);
    if (e != cudaSuccess) return kiln_cuda_error(e, "cudaMalloc/cudaMemcpy of the prepared weights", __FILE__, __LINE__);
    unsigned char *d = (unsigned char *)st->dev;
    st->wt = (const int8_t *)d;
    st->x_shift = x_dtype == KILN_U8 ? 128 : 0;
    qg_epi *ep = &st->epi;
    st->alpha_q = (const float *)(d + v_at);
    st->bias_q = (const float *)(d + v_at + v_bytes);
    st->alpha_f = (const float *)(d + v_at + 2 * v_bytes);
    st->bias_f = (const float *)(d + v_at + 3 * v_bytes);
    st->zero = (const float *)(d + v_at + 4 * v_bytes);
    ep->colsum = (const int32_t *)(d + wt_bytes);
    ep->wzp = (const int32_t *)(d + wt_bytes + m_bytes);
    ep->scale = (const float *)(d + wt_bytes + 2 * m_bytes);
    ep->bias = bias ? (const float *)(d + wt_bytes + 3 * m_bytes) : NULL;
    ep->xzp = ql->x_zero_point - st->x_shift;
    ep->K = (int32_t)st->K;
    ep->kind = (int)ql->act.kind;
    ep->p0 = ql->act.p0;
    ep->p1 = ql->act.p1;
    ep->y_scale = ql->y_scale;
    ep->y_zero_point = (float)ql->y_zero_point;
    ep->lo = ql->y_dtype == KILN_U8 ? 0 : -128;
    ep->hi = ql->y_dtype == KILN_U8 ? 255 : 127;
    return KILN_OK;
}

kiln_status kiln_qg_state_get(const kiln_node *n, const kiln_quant_layer *ql, const qg_host_weights *w,
                              const kiln_cuda_tensor *bias, kiln_dtype x_dtype, int64_t K, int64_t Mg, int64_t group,
                              kiln_cuda_ctx *ctx, qg_state **out, bool *temp) {
    *temp = !ctx->state;
    if (ctx->state && *ctx->state) {
        if ((*ctx->state)->owner != qg_state_owner)
            return kiln_error(KILN_ERR_INTERNAL, "%s '%s': its node state belongs to another kernel", n->op_type, n->name);
        *out = (qg_state *)*ctx->state;
        return KILN_OK;
    }
    qg_state *st = (qg_state *)calloc(1, sizeof *st);
    if (!st) return kiln_error(KILN_ERR_OUT_OF_MEMORY, "out of memory for the state of %s '%s'", n->op_type, n->name);
    st->base.owner = qg_state_owner;
    st->base.destroy = qg_state_destroy;
    st->K = K;
    st->Kp = qg_round4(K);
    st->Mg = Mg;
    st->Mp = qg_round4(Mg);
    st->group = group;
    kiln_status s = qg_state_prepare(n, ql, w, bias, x_dtype, st);
    if (s != KILN_OK) {
        qg_state_destroy(&st->base);
        return s;
    }
    if (ctx->state) *ctx->state = &st->base;
    *out = st;
    return KILN_OK;
}

bool kiln_qg_state_free_or_mine(const kiln_cuda_ctx *ctx) {
    return !ctx->state || !*ctx->state || (*ctx->state)->owner == qg_state_owner;
}

kiln_status kiln_qg_finish(qg_state *st, bool temp, kiln_status s, kiln_cuda_ctx *ctx) {
    if (!temp) return s;
    cudaError_t e = cudaStreamSynchronize(ctx->stream);
    if (s == KILN_OK && e != cudaSuccess) s = kiln_cuda_error(e, "cudaStreamSynchronize", __FILE__, __LINE__);
    qg_state_destroy(&st->base);
    return s;
}

/* ---------------------------------------------------------------- the GEMM */

/* A cuBLASLt failure as a status naming the node and the call. */
static kiln_status qg_lt_fail(const kiln_node *n, cublasStatus_t e, const char *call) {
    return kiln_error(KILN_ERR_BACKEND, "%s '%s': %s failed: %s", n->op_type, n->name, call, cublasLtGetStatusString(e));
}
#define QG_LT(call)                                                                                \
    do {                                                                                           \
        cublasStatus_t qg_e_ = (call);                                                             \
        if (qg_e_ != CUBLAS_STATUS_SUCCESS) return qg_lt_fail(n, qg_e_, #call);                    \
    } while (0)

/* cuBLASLt's epilogue for a fused call of activation kind act (with or without a bias), or false
 * for an activation it has not (GELU_BIAS is the tanh form, so only KILN_ACT_GELU_TANH maps to it). */
static bool qg_lt_epilogue(int act, bool bias, cublasLtEpilogue_t *out) {
    switch (act) {
    case KILN_ACT_NONE: *out = bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT; return true;
    case KILN_ACT_RELU: *out = bias ? CUBLASLT_EPILOGUE_RELU_BIAS : CUBLASLT_EPILOGUE_RELU; return true;
    case KILN_ACT_GELU_TANH: *out = bias ? CUBLASLT_EPILOGUE_GELU_BIAS : CUBLASLT_EPILOGUE_GELU; return true;
    default: return false;
    }
}

/* The cuBLASLt type of D for output dtype t (KILN_I32 the exact path's D); false for another. */
static bool qg_lt_dtype(kiln_dtype t, cudaDataType_t *out) {
    switch (t) {
    case KILN_I32: *out = CUDA_R_32I; return true;
    case KILN_I8: *out = CUDA_R_8I; return true;
    case KILN_F32: *out = CUDA_R_32F; return true;
    case KILN_F16: *out = CUDA_R_16F; return true;
    case KILN_BF16: *out = CUDA_R_16BF; return true;
    default: return false;
    }
}

/* The largest power of two up to 256 that divides p's address: the alignment cuBLASLt is told. */
static uint32_t qg_alignment(const void *p) {
    uint32_t a = 256;
    while (a > 1 && (uintptr_t)p % a) a /= 2;
    return a;
}

/* What one cached call is for: R activation rows of length ldb; out the type of D (KILN_I32: the
 * exact path's int32 D [R, Mp]; else the fused call's y, rows of ldd); the alignments of X and D (and
 * C); with_c: the fused call adds beta C (C of D's type and layout, beta a host float). */
typedef struct qg_call_key {
    int64_t R, ldb, ldd;
    kiln_dtype out;
    uint32_t align_b, align_d;
    bool with_c;
} qg_call_key;

static bool qg_call_is(const qg_call *c, const qg_call_key *k) {
    return c->valid && c->R == k->R && c->ldb == k->ldb && c->ldd == k->ldd && c->out_dtype == k->out &&
           c->align_b == k->align_b && c->align_d == k->align_d && c->with_c == k->with_c;
}

/* The operands of one call, for timing the heuristic's candidates (lt_pick.cuh): alpha and beta as
 * cublasLtMatmul takes them (host scalars, or the fused call's device vector and a zero or host
 * beta), c the C it reads (NULL: none). */
typedef struct qg_operands {
    const int8_t *w, *x;
    void *d;
    const void *alpha, *beta;
    void *lt_ws;
    const void *c;
} qg_operands;

/* Makes call c for key k: descriptors, and the fastest of the heuristic's IMMA algorithms within
 * lt_ws bytes of workspace (timed on o's operands when the stream is not capturing: lt_pick.cuh).
 * The fused call (k->out not KILN_I32) scales by st's alpha vector in float32
 * (CUBLASLT_POINTER_MODE_ALPHA_DEVICE_VECTOR_BETA_ZERO, or ..._BETA_HOST with C) and adds the bias
 * and activation in its epilogue, after beta C; its D is y itself. */
static kiln_status qg_call_make(const kiln_node *n, const qg_state *st, const qg_call_key *k, const qg_operands *o,
                                size_t lt_ws, kiln_cuda_ctx *ctx, qg_call *c) {
    bool fused = k->out != KILN_I32;
    cudaDataType_t dt = CUDA_R_32I;
    cublasLtEpilogue_t epi = CUBLASLT_EPILOGUE_DEFAULT;
    if (!qg_lt_dtype(k->out, &dt) || (fused && !qg_lt_epilogue(st->epi.kind, st->epi.bias != NULL, &epi)))
        return kiln_error(KILN_ERR_UNSUPPORTED, "%s '%s': no fused requantization into %s with activation %d", n->op_type,
                          n->name, kiln_dtype_name(k->out), st->epi.kind);
    QG_LT(cublasLtMatmulDescCreate(&c->op, CUBLAS_COMPUTE_32I, fused ? CUDA_R_32F : CUDA_R_32I));
    cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
    QG_LT(cublasLtMatmulDescSetAttribute(c->op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
    QG_LT(cublasLtMatmulDescSetAttribute(c->op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
    if (fused) {
        cublasLtPointerMode_t pm = k->with_c ? CUBLASLT_POINTER_MODE_ALPHA_DEVICE_VECTOR_BETA_HOST
                                             : CUBLASLT_POINTER_MODE_ALPHA_DEVICE_VECTOR_BETA_ZERO;
        QG_LT(cublasLtMatmulDescSetAttribute(c->op, CUBLASLT_MATMUL_DESC_POINTER_MODE, &pm, sizeof pm));
        QG_LT(cublasLtMatmulDescSetAttribute(c->op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi));
        if (st->epi.bias) {
            cudaDataType_t bt = CUDA_R_32F;
            const float *bias = k->out == KILN_I8 ? st->bias_q : st->bias_f;
            QG_LT(cublasLtMatmulDescSetAttribute(c->op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bt, sizeof bt));
            QG_LT(cublasLtMatmulDescSetAttribute(c->op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias));
        }
    }
    QG_LT(cublasLtMatrixLayoutCreate(&c->la, CUDA_R_8I, (uint64_t)st->Kp, (uint64_t)st->Mp, st->Kp));
    QG_LT(cublasLtMatrixLayoutCreate(&c->lb, CUDA_R_8I, (uint64_t)st->Kp, (uint64_t)k->R, k->ldb));
    QG_LT(cublasLtMatrixLayoutCreate(&c->ld, dt, (uint64_t)st->Mp, (uint64_t)k->R, fused ? k->ldd : st->Mp));
    cublasLtMatmulPreference_t pref;
    QG_LT(cublasLtMatmulPreferenceCreate(&pref));
    cublasStatus_t e = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &lt_ws,
                                                            sizeof lt_ws);
    if (e == CUBLAS_STATUS_SUCCESS)
        e = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &k->align_b,
                                                 sizeof k->align_b);
    if (e == CUBLAS_STATUS_SUCCESS)
        e = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &k->align_d,
                                                 sizeof k->align_d);
    if (e == CUBLAS_STATUS_SUCCESS)
        e = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &k->align_d,
                                                 sizeof k->align_d);
    cublasLtMatmulHeuristicResult_t res;
    int found = 0;
    bool timed = false;
    kiln_lt_problem p = {ctx->lt, c->op, c->la, c->lb, c->ld, pref, o->alpha, o->w, o->x, o->beta, o->d, o->lt_ws, lt_ws,
                         ctx->stream, o->c};
    if (e == CUBLAS_STATUS_SUCCESS) e = kiln_lt_pick(&p, &res, &found, &timed);
    cublasLtMatmulPreferenceDestroy(pref);
    if (e != CUBLAS_STATUS_SUCCESS) return qg_lt_fail(n, e, "cublasLtMatmulAlgoGetHeuristic");
    if (found < 1)
        return kiln_error(KILN_ERR_UNSUPPORTED, "%s '%s': cuBLASLt offers no int8 (IMMA) algorithm %s for %lld x %lld x %lld "
                          "within %zu bytes of workspace", n->op_type, n->name,
                          fused ? "with an alpha vector and this epilogue" : "with int32 output", (long long)st->Mp,
                          (long long)k->R, (long long)st->Kp, lt_ws);
    c->algo = res.algo;
    c->ws_need = res.workspaceSize;
    c->R = k->R;
    c->ldb = k->ldb;
    c->ldd = k->ldd;
    c->out_dtype = k->out;
    c->align_b = k->align_b;
    c->align_d = k->align_d;
    c->fused = fused;
    c->with_c = k->with_c;
    c->valid = true;
    KILN_LOG(KILN_LOG_VERBOSE, "cuda: %s '%s': cuBLASLt int8 GEMM %lld x %lld x %lld%s: %s of %d candidates", n->op_type,
             n->name, (long long)st->Mp, (long long)k->R, (long long)st->Kp, fused ? " (requantizing)" : "",
             timed ? "the fastest" : "the heuristic's first", found);
    return KILN_OK;
}

/* Switches call c to the CUDA-core product, warning once per node with the reason (the last error). */
static void qg_call_fall_back(const kiln_node *n, qg_state *st, qg_call *c) {
    if (!st->fallback_logged)
        KILN_LOG(KILN_LOG_WARN, "cuda: %s '%s': cuBLASLt's int8 GEMM is unavailable (%s); a CUDA-core kernel computes "
                 "it (slower)", n->op_type, n->name, kiln_last_error());
    kiln_error_clear();
    st->fallback_logged = true;
    c->fallback = true;
}

/* The cached call for k, or one made now in the next slot; NULL (the slot cleared, the error set)
 * when cuBLASLt cannot make it. */
static qg_call *qg_call_get(const kiln_node *n, qg_state *st, const qg_call_key *k, const qg_operands *o, size_t lt_ws,
                            kiln_cuda_ctx *ctx) {
    for (int i = 0; i < QG_CALLS; i++)
        if (qg_call_is(&st->calls[i], k)) return &st->calls[i];
    qg_call *c = &st->calls[st->next_call];
    st->next_call = (st->next_call + 1) % QG_CALLS;
    qg_call_clear(c);
    if (qg_call_make(n, st, k, o, lt_ws, ctx, c) == KILN_OK) return c;
    qg_call_clear(c);
    return NULL;
}

kiln_status kiln_qg_gemm(const kiln_node *n, qg_state *st, int64_t g, const int8_t *x, int64_t R, int64_t ldb,
                         int32_t *D, void *lt_ws, size_t lt_bytes, kiln_cuda_ctx *ctx) {
    qg_call_key k = {R, ldb, st->Mp, KILN_I32, qg_alignment(x), qg_alignment(D), false};
    const int8_t *w = st->wt + g * st->Mp * st->Kp;
    const int32_t one = 1, zero = 0;
    const qg_operands o = {w, x, D, &one, &zero, lt_ws, NULL};
    qg_call *c = qg_call_get(n, st, &k, &o, lt_bytes, ctx);
    if (!c) { /* remembered as a call that falls back */
        c = &st->calls[(st->next_call + QG_CALLS - 1) % QG_CALLS];
        qg_call_fall_back(n, st, c);
        c->R = R;
        c->ldb = ldb;
        c->ldd = st->Mp;
        c->out_dtype = KILN_I32;
        c->align_b = k.align_b;
        c->align_d = k.align_d;
        c->valid = true;
    }
    if (!c->fallback) {
        const int32_t alpha = 1, beta = 0;
        cublasStatus_t e = cublasLtMatmul(ctx->lt, c->op, &alpha, w, c->la, x, c->lb, &beta, D, c->ld, D, c->ld, &c->algo,
                                          lt_ws, lt_bytes, ctx->stream);
        if (e == CUBLAS_STATUS_SUCCESS) return KILN_OK;
        (void)qg_lt_fail(n, e, "cublasLtMatmul"); /* the reason the warning gives */
        qg_call_fall_back(n, st, c);
    }
    return kiln_qg_gemm_cuda_cores(x, ldb, w, st->Kp, R, st->Mp, D, ctx);
}

bool kiln_qg_fused_ok(const qg_state *st, const kiln_quant_layer *ql, kiln_dtype t) {
    cublasLtEpilogue_t epi;
    /* an int8 output folds 1 / y_scale into alpha and the bias, so the activation must commute with
     * that positive scaling: none or Relu (a Gelu would see v / y_scale) */
    bool int8_ok = t == KILN_I8 && ql->y_dtype == KILN_I8 && ql->y_zero_point == 0 &&
                   (st->epi.kind == KILN_ACT_NONE || st->epi.kind == KILN_ACT_RELU);
    bool float_ok = ql->y_dtype == KILN_F32 && (t == KILN_F32 || t == KILN_F16 || t == KILN_BF16);
    return st->fused != QG_FUSED_NO && st->group == 1 && st->epi.xzp == 0 && !st->any_wzp && st->Mp == st->Mg &&
           (int8_ok || float_ok) && qg_lt_epilogue(st->epi.kind, st->epi.bias != NULL, &epi);
}

/* Says once, in the verbose log, which path a QMatMul takes, and why not the fused one. */
static void qg_fused_decided(const kiln_node *n, qg_state *st, bool fused) {
    st->fused = fused ? QG_FUSED_YES : QG_FUSED_NO;
    if (fused)
        KILN_LOG(KILN_LOG_VERBOSE, "cuda: %s '%s': requantization fused into cuBLASLt's int8 GEMM", n->op_type, n->name);
    else
        KILN_LOG(KILN_LOG_VERBOSE, "cuda: %s '%s': the int32 GEMM and kiln's epilogue run (%s)", n->op_type, n->name,
                 kiln_last_error());
    kiln_error_clear();
}

kiln_status kiln_qg_gemm_fused(const kiln_node *n, qg_state *st, const int8_t *x, int64_t R, int64_t ldb, kiln_dtype t,
                               void *y, int64_t ldd, void *lt_ws, size_t lt_bytes, kiln_cuda_ctx *ctx, bool *done) {
    return kiln_qg_gemm_fused_c(n, st, x, R, ldb, t, y, ldd, NULL, 0.0f, lt_ws, lt_bytes, ctx, done);
}

kiln_status kiln_qg_gemm_fused_c(const kiln_node *n, qg_state *st, const int8_t *x, int64_t R, int64_t ldb,
                                 kiln_dtype t, void *y, int64_t ldd, const void *c_in, float beta, void *lt_ws,
                                 size_t lt_bytes, kiln_cuda_ctx *ctx, bool *done) {
    *done = false;
    uint32_t align_d = qg_alignment(y), align_c = c_in ? qg_alignment(c_in) : align_d;
    qg_call_key k = {R, ldb, ldd, t, qg_alignment(x), align_c < align_d ? align_c : align_d, c_in != NULL};
    const float *alpha = t == KILN_I8 ? st->alpha_q : st->alpha_f;
    const void *beta_p = c_in ? (const void *)&beta : (const void *)st->zero;
    const qg_operands o = {st->wt, x, y, alpha, beta_p, lt_ws, c_in};
    qg_call *c = qg_call_get(n, st, &k, &o, lt_bytes, ctx);
    if (!c) {
        qg_fused_decided(n, st, false);
        return KILN_OK;
    }
    cublasStatus_t e = cublasLtMatmul(ctx->lt, c->op, alpha, st->wt, c->la, x, c->lb, beta_p, c_in ? c_in : y, c->ld, y,
                                      c->ld, &c->algo, lt_ws, lt_bytes, ctx->stream);
    if (e != CUBLAS_STATUS_SUCCESS) {
        (void)qg_lt_fail(n, e, "cublasLtMatmul");
        qg_call_clear(c);
        qg_fused_decided(n, st, false);
        return KILN_OK;
    }
    if (st->fused == QG_FUSED_UNTRIED) qg_fused_decided(n, st, true);
    *done = true;
    return KILN_OK;
}

size_t kiln_qg_chunk_bytes(const qg_state *st, int64_t R, bool copy_rows) {
    return (copy_rows ? qg_align((size_t)(R * st->Kp)) : 0) + qg_align((size_t)(R * st->Mp) * 4) +
           qg_align((size_t)R * 4);
}

kiln_status kiln_qg_chunk_units(const kiln_node *n, const qg_state *st, int64_t units, int64_t per, bool copy_rows,
                                  size_t lt_bytes, const kiln_cuda_ctx *ctx, int64_t *out) {
    size_t avail = ctx->workspace_bytes > lt_bytes ? ctx->workspace_bytes - lt_bytes : 0;
    int64_t lo = 0, hi = units;
    while (lo < hi) { /* the largest count that fits */
        int64_t mid = lo + (hi - lo + 1) / 2;
        bool d_fits = mid == 1 || (size_t)(mid * per * st->Mp) * 4 <= QG_D_TARGET;
        if (d_fits && kiln_qg_chunk_bytes(st, mid * per, copy_rows) <= avail) lo = mid;
        else hi = mid - 1;
    }
    if (lo < 1)
        return kiln_error(KILN_ERR_UNSUPPORTED, "%s '%s': %zu bytes of workspace do not hold one chunk of %lld rows "
                          "(raise the CUDA workspace)", n->op_type, n->name, ctx->workspace_bytes, (long long)per);
    *out = lo;
    return KILN_OK;
}

size_t kiln_qg_lt_bytes(const kiln_cuda_ctx *ctx) {
    size_t q = ctx->workspace_bytes / 4 / QG_ALIGN * QG_ALIGN;
    return q < QG_LT_WORKSPACE ? q : QG_LT_WORKSPACE;
}

/* ---------------------------------------------------------------- helpers of both layers */

kiln_status kiln_qg_list_paths(kiln_cuda_ctx *ctx) {
    kiln_cuda_candidates *cd = ctx->candidates;
    if (cd->done) return KILN_OK;
    cd->done = true;
    cd->count = 0;
    for (int path = 0; path < 2 && cd->count < cd->max; path++) {
        kiln_tactic *t = &cd->list[cd->count++];
        memset(t, 0, sizeof *t);
        t->kind = KILN_TACTIC_PATH;
        t->algo = path;
        t->heuristic_index = path;
    }
    return KILN_OK;
}

kiln_status kiln_qg_wants_f16(const kiln_node *n, kiln_cuda_ctx *ctx, bool *f16) {
    *f16 = false;
    if (!ctx->tactic) return KILN_OK;
    if (ctx->tactic->kind == KILN_TACTIC_PATH && (ctx->tactic->algo == 0 || ctx->tactic->algo == 1)) {
        *f16 = ctx->tactic->algo == 1;
        return KILN_OK;
    }
    return kiln_cuda_tactic_rejected(n, ctx, "not an integer layer's int8 / fp16 choice");
}

const kiln_cuda_tensor *kiln_qg_input(const kiln_cuda_tensor *in, int nin, int i) {
    return i < nin && !ku_absent(&in[i]) ? &in[i] : NULL;
}

kiln_status kiln_qg_host_bias(const kiln_node *n, const kiln_cuda_tensor *b, int64_t count,
                                const kiln_cuda_tensor **out) {
    *out = b;
    if (b && (!b->host || !ku_is_float(b->host_dtype) || ku_numel(b) != count))
        return kiln_error(KILN_ERR_UNSUPPORTED, "%s '%s': the bias must be a float constant of %lld values", n->op_type,
                          n->name, (long long)count);
    return KILN_OK;
}

bool kiln_qg_out_ok(const kiln_quant_layer *ql, kiln_dtype t) {
    return ql->y_dtype == KILN_F32 ? ku_is_float(t) : t == ql->y_dtype;
}

kiln_status kiln_qg_supports(const kiln_graph *g, const kiln_node *n, int weight_rank_lo, int weight_rank_hi) {
    kiln_quant_layer ql;
    KILN_TRY(kiln_quant_layer_read(n, &ql));
    const kiln_value *x = ku_in(g, n, 0), *w = ku_in(g, n, 1), *b = ku_in(g, n, 2), *y = ku_out(g, n, 0);
    if (!x || !w || !y) return kiln_error(KILN_ERR_INVALID_ARGUMENT, "%s '%s' needs X and W", n->op_type, n->name);
    if (!qg_is_8bit(x->dtype)) return ku_refuse_dtype(n, 0, x->dtype);
    if (!qg_is_8bit(w->dtype)) return ku_refuse_dtype(n, 1, w->dtype);
    if (!kiln_cuda_value_on_host(g, n->inputs[1]))
        return kiln_error(KILN_ERR_UNSUPPORTED, "%s '%s': the cuda backend needs constant weights", n->op_type, n->name);
    if (w->ndim >= 0 && (w->ndim < weight_rank_lo || w->ndim > weight_rank_hi))
        return kiln_error(KILN_ERR_UNSUPPORTED, "%s '%s': weights of rank %d (the cuda backend takes %d to %d)", n->op_type,
                          n->name, w->ndim, weight_rank_lo, weight_rank_hi);
    if (b && !kiln_cuda_value_on_host(g, n->inputs[2]))
        return kiln_error(KILN_ERR_UNSUPPORTED, "%s '%s': the cuda backend needs a constant bias", n->op_type, n->name);
    if (!kiln_qg_out_ok(&ql, y->dtype)) return ku_refuse_dtype(n, 0, y->dtype);
    return KILN_OK;
}

