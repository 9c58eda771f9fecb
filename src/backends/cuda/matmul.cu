/* matmul.cu — MatMul (numpy batching and broadcasting, 1-D operands) and Gemm (transA/transB,
 * alpha, beta, C broadcast) on the GPU through cuBLASLt, for float32, float16 and bfloat16.
 *
 * Precision: CUBLAS_COMPUTE_32F with 32-bit float scale for every dtype — float32 data therefore
 * never uses TF32 (results must match the CPU oracle to 1e-4 relative); float16/bfloat16 data
 * accumulate in float32 on the tensor cores.
 *
 * Row-major products go through cuBLASLt's column-major interface by the transposed identity
 * Y = A B  <=>  Y^T = B^T A^T: a row-major [r, c] matrix is a column-major [c, r] one with the same
 * memory, so cuBLASLt computes D (N x M, column-major = Y row-major) = op(B) op(A).
 *
 * MatMul batches: a right operand shared by a full left batch folds into one product of
 * (batch * M) rows; otherwise the batch dims are split into an outer part looped over on the host
 * and the longest inner part over which both operands advance by a constant stride (0 for a
 * broadcast operand), which becomes one strided-batched call. Should cuBLASLt refuse a strided
 * batch, the batch runs as single products.
 *
 * Gemm's C: a row vector [N] / [1, N] with beta = 1 becomes the bias epilogue; any other C is
 * broadcast into Y by a small kernel first and cuBLASLt accumulates Y = alpha A' B' + beta Y.
 *
 * Descriptors and the heuristic query (cublasLtMatmulAlgoGetHeuristic, workspace = ctx->workspace)
 * are made on every call: host work only, and a captured CUDA graph replays none of it.
 *
 * Tactics (cuda_kernels.h): a node tuned at build time carries its cublasLtMatmulAlgo_t; every call
 * of the node checks it (cublasLtMatmulAlgoCheck, the workspace, the algorithm's pointer alignment
 * needs) before running it, and asks the heuristic instead when it does not fit. */
#include "backends/cuda/kernel_util.cuh"
#include "backends/cuda/matmul.cuh"

/* One (possibly strided-batched) row-major product D = act(alpha op(A) op(B) + beta C (+ bias)),
 * where op(A) is M x K, op(B) is K x N, D and C are dense M x N, strides are in elements between
 * batch entries. C == NULL means beta is 0; bias (N values) selects the bias epilogue; relu the ReLU
 * one (act = max(0, .), else the identity). */
typedef struct mm_call {
    kiln_dtype dtype;
    bool ta, tb, relu;
    int64_t M, N, K, batch;
    float alpha, beta;
    const void *a, *b, *c, *bias;
    void *d;
    int64_t stride_a, stride_b, stride_d;
} mm_call;

static cudaDataType_t mm_cuda_type(kiln_dtype t) {
    return t == KILN_F32 ? CUDA_R_32F : t == KILN_F16 ? CUDA_R_16F : CUDA_R_16BF;
}

void kiln_cuda_lt_descs_free(kiln_cuda_lt_descs *d) {
    if (d->pref) cublasLtMatmulPreferenceDestroy(d->pref);
    if (d->ld) cublasLtMatrixLayoutDestroy(d->ld);
    if (d->lb) cublasLtMatrixLayoutDestroy(d->lb);
    if (d->la) cublasLtMatrixLayoutDestroy(d->la);
    if (d->op) cublasLtMatmulDescDestroy(d->op);
    memset(d, 0, sizeof *d);
}

uint32_t kiln_cuda_lt_align(const void *p, int64_t stride_bytes) {
    uint64_t v = (uint64_t)(uintptr_t)p | (uint64_t)stride_bytes;
    uint64_t a = v ? v & (~v + 1) : 256;
    return (uint32_t)(a > 256 ? 256 : a);
}

/* A column-major layout of rows x cols with leading dimension ld, strided-batched when batch > 1. */
static kiln_status lt_layout(cublasLtMatrixLayout_t *l, cudaDataType_t t, int64_t rows, int64_t cols, int64_t ld,
                             int64_t batch, int64_t stride) {
    KILN_CUBLAS_TRY(cublasLtMatrixLayoutCreate(l, t, (uint64_t)rows, (uint64_t)cols, ld));
    if (batch > 1) {
        int32_t count = (int32_t)batch;
        KILN_CUBLAS_TRY(cublasLtMatrixLayoutSetAttribute(*l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, sizeof count));
        KILN_CUBLAS_TRY(cublasLtMatrixLayoutSetAttribute(*l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride, sizeof stride));
    }
    return KILN_OK;
}

kiln_status kiln_cuda_lt_descs_make(const kiln_cuda_lt_shape *s, size_t workspace_bytes, kiln_cuda_lt_descs *d) {
    const cudaDataType_t t = mm_cuda_type(s->ab_type), td = mm_cuda_type(s->d_type);
    KILN_CUBLAS_TRY(cublasLtMatmulDescCreate(&d->op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    const int32_t op_lt_a = s->tb ? CUBLAS_OP_T : CUBLAS_OP_N, op_lt_b = s->ta ? CUBLAS_OP_T : CUBLAS_OP_N;
    KILN_CUBLAS_TRY(cublasLtMatmulDescSetAttribute(d->op, CUBLASLT_MATMUL_DESC_TRANSA, &op_lt_a, sizeof op_lt_a));
    KILN_CUBLAS_TRY(cublasLtMatmulDescSetAttribute(d->op, CUBLASLT_MATMUL_DESC_TRANSB, &op_lt_b, sizeof op_lt_b));
    if (s->bias || s->relu) {
        uint32_t epi = s->bias ? (s->relu ? CUBLASLT_EPILOGUE_RELU_BIAS : CUBLASLT_EPILOGUE_BIAS) : CUBLASLT_EPILOGUE_RELU;
        KILN_CUBLAS_TRY(cublasLtMatmulDescSetAttribute(d->op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi));
        if (s->bias)
            KILN_CUBLAS_TRY(cublasLtMatmulDescSetAttribute(d->op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &s->bias, sizeof s->bias));
    }
    /* cuBLASLt's A is our B: stored [K, N] row-major = [N, K] column-major (transposed: [K, N]). */
    const int64_t rows_a = s->tb ? s->K : s->N, rows_b = s->ta ? s->M : s->K;
    KILN_TRY(lt_layout(&d->la, t, rows_a, s->tb ? s->N : s->K, s->ldb ? s->ldb : rows_a, s->batch, s->stride_b));
    /* cuBLASLt's B is our A: stored [M, K] row-major = [K, M] column-major (transposed: [M, K]). */
    KILN_TRY(lt_layout(&d->lb, t, rows_b, s->ta ? s->K : s->M, s->lda ? s->lda : rows_b, s->batch, s->stride_a));
    KILN_TRY(lt_layout(&d->ld, td, s->N, s->M, s->ldd ? s->ldd : s->N, s->batch, s->stride_d));
    KILN_CUBLAS_TRY(cublasLtMatmulPreferenceCreate(&d->pref));
    const uint64_t ws = workspace_bytes;
    static const cublasLtMatmulPreferenceAttributes_t al_attr[4] = {
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES};
    KILN_CUBLAS_TRY(cublasLtMatmulPreferenceSetAttribute(d->pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws));
    for (int i = 0; i < 4; i++)
        KILN_CUBLAS_TRY(cublasLtMatmulPreferenceSetAttribute(d->pref, al_attr[i], &s->align[i], sizeof s->align[i]));
    return KILN_OK;
}

static_assert(sizeof(cublasLtMatmulAlgo_t) == sizeof(((kiln_tactic *)0)->blob), "a tactic holds one cublasLtMatmulAlgo_t");

/* Tuning: records up to ctx->candidates->max of the heuristic's algorithms for descriptors d, once
 * per node (its first library call). *refused when the heuristic has none (as for a run). */
static kiln_status mm_record_candidates(kiln_cuda_ctx *ctx, const kiln_cuda_lt_descs *d, bool *refused) {
    kiln_cuda_candidates *cd = ctx->candidates;
    if (cd->done) return KILN_OK;
    cublasLtMatmulHeuristicResult_t res[KILN_CUDA_MAX_CANDIDATES];
    memset(res, 0, sizeof res);
    int got = 0, want = cd->max < 1 ? 1 : cd->max > KILN_CUDA_MAX_CANDIDATES ? KILN_CUDA_MAX_CANDIDATES : cd->max;
    cublasStatus_t hs = cublasLtMatmulAlgoGetHeuristic(ctx->lt, d->op, d->la, d->lb, d->ld, d->ld, d->pref, want, res, &got);
    if (hs == CUBLAS_STATUS_NOT_SUPPORTED) {
        *refused = true;
        return KILN_OK;
    }
    KILN_CUBLAS_TRY(hs);
    cd->count = 0;
    for (int i = 0; i < got && i < want; i++) {
        if (res[i].state != CUBLAS_STATUS_SUCCESS) continue;
        kiln_tactic *t = &cd->list[cd->count];
        memset(t, 0, sizeof *t);
        t->kind = KILN_TACTIC_CUBLASLT;
        t->heuristic_index = cd->count++;
        memcpy(t->blob, &res[i].algo, sizeof res[i].algo);
        int32_t id = -1;
        size_t written = 0;
        if (cublasLtMatmulAlgoConfigGetAttribute(&res[i].algo, CUBLASLT_ALGO_CONFIG_ID, &id, sizeof id, &written) !=
            CUBLAS_STATUS_SUCCESS)
            id = -1;
        t->algo = id;
    }
    *refused = cd->count == 0;
    cd->done = cd->count > 0;
    return KILN_OK;
}

bool kiln_cuda_lt_algo_fits(const kiln_cuda_ctx *ctx, cublasLtMatmulDesc_t op, cublasLtMatrixLayout_t la,
                            cublasLtMatrixLayout_t lb, cublasLtMatrixLayout_t ld, const cublasLtMatmulAlgo_t *algo,
                            const uint32_t *al, char *why, size_t cap) {
    cublasLtMatmulHeuristicResult_t chk;
    memset(&chk, 0, sizeof chk);
    cublasStatus_t st = cublasLtMatmulAlgoCheck(ctx->lt, op, la, lb, ld, ld, algo, &chk);
    if (st == CUBLAS_STATUS_SUCCESS) st = chk.state;
    if (st != CUBLAS_STATUS_SUCCESS) {
        snprintf(why, cap, "cublasLtMatmulAlgoCheck: %s", cublasLtGetStatusString(st));
        return false;
    }
    if (chk.workspaceSize > ctx->workspace_bytes) {
        snprintf(why, cap, "it needs %zu bytes of workspace, there are %zu", chk.workspaceSize, ctx->workspace_bytes);
        return false;
    }
    static const cublasLtMatmulAlgoCapAttributes_t caps[4] = {
        CUBLASLT_ALGO_CAP_MIN_ALIGNMENT_A_BYTES, CUBLASLT_ALGO_CAP_MIN_ALIGNMENT_B_BYTES,
        CUBLASLT_ALGO_CAP_MIN_ALIGNMENT_C_BYTES, CUBLASLT_ALGO_CAP_MIN_ALIGNMENT_D_BYTES};
    for (int i = 0; i < 4; i++) {
        uint32_t need = 0;
        size_t written = 0;
        if (cublasLtMatmulAlgoCapGetAttribute(algo, caps[i], &need, sizeof need, &written) == CUBLAS_STATUS_SUCCESS &&
            need > al[i]) {
            snprintf(why, cap, "it needs %u-byte aligned %c operands, this call's are %u-byte aligned", need, "ABCD"[i], al[i]);
            return false;
        }
    }
    return true;
}

/* Runs call k through descriptors d (created empty by the caller, destroyed by the caller), with the
 * node's tactic when it fits, else the heuristic's first algorithm (see the file comment). *refused is
 * set, with nothing enqueued, when cuBLASLt has no algorithm for this configuration. With
 * ctx->candidates, records the heuristic's candidates instead of running. */
static kiln_status mm_run_descs(const kiln_node *n, kiln_cuda_ctx *ctx, const mm_call *k, kiln_cuda_lt_descs *d,
                                bool *refused) {
    const int64_t es = (int64_t)kiln_dtype_size(k->dtype), sbytes = k->batch > 1 ? es : 0;
    *refused = false;
    kiln_cuda_lt_shape sh;
    memset(&sh, 0, sizeof sh);
    sh.ab_type = sh.d_type = k->dtype;
    sh.ta = k->ta;
    sh.tb = k->tb;
    sh.relu = k->relu;
    sh.M = k->M;
    sh.N = k->N;
    sh.K = k->K;
    sh.batch = k->batch;
    sh.stride_a = k->stride_a;
    sh.stride_b = k->stride_b;
    sh.stride_d = k->stride_d;
    sh.bias = k->bias;
    const uint32_t al_a = kiln_cuda_lt_align(k->b, sbytes * k->stride_b), al_b = kiln_cuda_lt_align(k->a, sbytes * k->stride_a);
    const uint32_t al_d = kiln_cuda_lt_align(k->d, sbytes * k->stride_d);
    const uint32_t al_c = k->c ? kiln_cuda_lt_align(k->c, sbytes * k->stride_d) : al_d; /* C has D's layout */
    sh.align[0] = al_a;
    sh.align[1] = al_b;
    sh.align[2] = al_c;
    sh.align[3] = al_d;
    KILN_TRY(kiln_cuda_lt_descs_make(&sh, ctx->workspace_bytes, d));
    if (ctx->candidates) return mm_record_candidates(ctx, d, refused);
    float beta = k->c ? k->beta : 0.0f;
    if (ctx->tactic && ctx->tactic->kind == KILN_TACTIC_CUBLASLT) {
        cublasLtMatmulAlgo_t algo;
        memcpy(&algo, ctx->tactic->blob, sizeof algo);
        uint32_t al[4] = {al_a, al_b, al_c, al_d};
        char why[256];
        if (kiln_cuda_lt_algo_fits(ctx, d->op, d->la, d->lb, d->ld, &algo, al, why, sizeof why)) {
            cublasStatus_t ms = cublasLtMatmul(ctx->lt, d->op, &k->alpha, k->b, d->la, k->a, d->lb, &beta, k->c ? k->c : k->d,
                                               d->ld, k->d, d->ld, &algo, ctx->workspace, ctx->workspace_bytes, ctx->stream);
            if (ms == CUBLAS_STATUS_SUCCESS) return KILN_OK;
            snprintf(why, sizeof why, "cublasLtMatmul: %s", cublasLtGetStatusString(ms));
        }
        KILN_TRY(kiln_cuda_tactic_rejected(n, ctx, why));
    }
    cublasLtMatmulHeuristicResult_t res;
    int got = 0;
    memset(&res, 0, sizeof res);
    cublasStatus_t hs = cublasLtMatmulAlgoGetHeuristic(ctx->lt, d->op, d->la, d->lb, d->ld, d->ld, d->pref, 1, &res, &got);
    if (hs == CUBLAS_STATUS_NOT_SUPPORTED || (hs == CUBLAS_STATUS_SUCCESS && (got < 1 || res.state != CUBLAS_STATUS_SUCCESS))) {
        *refused = true;
        return KILN_OK;
    }
    KILN_CUBLAS_TRY(hs);
    KILN_CUBLAS_TRY(cublasLtMatmul(ctx->lt, d->op, &k->alpha, k->b, d->la, k->a, d->lb, &beta, k->c ? k->c : k->d, d->ld, k->d,
                                   d->ld, &res.algo, ctx->workspace, ctx->workspace_bytes, ctx->stream));
    return KILN_OK;
}

static kiln_status mm_run(const kiln_node *n, kiln_cuda_ctx *ctx, const mm_call *k, bool *refused) {
    kiln_cuda_lt_descs d;
    memset(&d, 0, sizeof d);
    kiln_status s = mm_run_descs(n, ctx, k, &d, refused);
    kiln_cuda_lt_descs_free(&d);
    return s;
}

/* Runs k; when cuBLASLt refuses a strided batch, runs its entries one by one. */
static kiln_status mm_run_batched(const kiln_node *n, kiln_cuda_ctx *ctx, const mm_call *k) {
    bool refused;
    KILN_TRY(mm_run(n, ctx, k, &refused));
    if (!refused) return KILN_OK;
    if (k->batch <= 1)
        return kiln_error(KILN_ERR_UNSUPPORTED, "%s: cuBLASLt has no %s algorithm for a %lld x %lld x %lld product%s", n->op_type,
                          kiln_dtype_name(k->dtype), (long long)k->M, (long long)k->N, (long long)k->K,
                          k->bias ? " with a bias epilogue" : "");
    size_t es = kiln_dtype_size(k->dtype);
    mm_call one = *k;
    one.batch = 1;
    for (int64_t i = 0; i < k->batch; i++) {
        one.a = (const char *)k->a + (size_t)(i * k->stride_a) * es;
        one.b = (const char *)k->b + (size_t)(i * k->stride_b) * es;
        one.d = (char *)k->d + (size_t)(i * k->stride_d) * es;
        one.c = k->c ? one.d : NULL;
        KILN_TRY(mm_run_batched(n, ctx, &one));
    }
    return KILN_OK;
}

kiln_status kiln_cuda_matmul_batched(const kiln_node *n, kiln_cuda_ctx *ctx, kiln_dtype t, int64_t batch, int64_t M,
                                     int64_t N, int64_t K, const void *a, bool ta, const void *b, bool tb, void *d) {
    mm_call k;
    memset(&k, 0, sizeof k);
    k.dtype = t;
    k.ta = ta;
    k.tb = tb;
    k.M = M;
    k.N = N;
    k.K = K;
    k.batch = batch;
    k.alpha = 1.0f;
    k.a = a;
    k.b = b;
    k.d = d;
    k.stride_a = M * K;
    k.stride_b = K * N;
    k.stride_d = M * N;
    return mm_run_batched(n, ctx, &k);
}

/* ---------------------------------------------------------------------------------------------
 * MatMul
 * ------------------------------------------------------------------------------------------- */

/* Whether an operand with batch strides s (in matrices, 0 on broadcast dims) advances by one
 * constant stride over the flattened batch dims [j, nb) of bdims; *stride gets it (0 or 1). */
static bool mm_suffix_stride(int nb, const int64_t *bdims, const int64_t *s, int j, int64_t *stride) {
    bool zero = true, dense = true;
    int64_t inner = 1;
    for (int i = nb - 1; i >= j; i--) {
        if (bdims[i] > 1) {
            zero = zero && s[i] == 0;
            dense = dense && s[i] == inner;
        }
        inner *= bdims[i];
    }
    *stride = zero ? 0 : 1;
    return zero || dense;
}

static kiln_status mm_check_int(const kiln_node *n, int64_t M, int64_t N, int64_t K) {
    if (M > INT32_MAX || N > INT32_MAX || K > INT32_MAX)
        return kiln_error(KILN_ERR_UNSUPPORTED, "%s: matrix dimensions beyond 2^31 are not supported", n->op_type);
    return KILN_OK;
}

static kiln_status exec_matmul(const kiln_node *n, const kiln_cuda_tensor *in, int nin, const kiln_cuda_tensor *out,
                               int nout, kiln_cuda_ctx *ctx) {
    const kiln_cuda_tensor *a = &in[0], *b = &in[1], *y = &out[0];
    if (a->dtype != b->dtype || y->dtype != a->dtype || (a->dtype != KILN_F32 && a->dtype != KILN_F16 && a->dtype != KILN_BF16))
        return kiln_error(KILN_ERR_UNSUPPORTED, "MatMul: A %s, B %s, Y %s on the CUDA backend", kiln_dtype_name(a->dtype),
                          kiln_dtype_name(b->dtype), kiln_dtype_name(y->dtype));
    if (a->ndim < 1 || b->ndim < 1) return kiln_error(KILN_ERR_SHAPE, "MatMul operands must have rank >= 1");
    int64_t M = a->ndim > 1 ? a->dims[a->ndim - 2] : 1, K = a->dims[a->ndim - 1];
    int64_t Kb = b->ndim > 1 ? b->dims[b->ndim - 2] : b->dims[0], N = b->ndim > 1 ? b->dims[b->ndim - 1] : 1;
    if (K != Kb) return kiln_error(KILN_ERR_SHAPE, "MatMul inner dimensions differ (%lld vs %lld)", (long long)K, (long long)Kb);
    int nba = a->ndim > 2 ? a->ndim - 2 : 0, nbb = b->ndim > 2 ? b->ndim - 2 : 0, nb;
    int64_t bdims[KILN_MAX_DIMS], sa[KILN_MAX_DIMS], sb[KILN_MAX_DIMS];
    KILN_TRY(kiln_broadcast_shape(nba, a->dims, nbb, b->dims, &nb, bdims));
    kiln_broadcast_strides(nba, a->dims, nb, bdims, sa);
    kiln_broadcast_strides(nbb, b->dims, nb, bdims, sb);
    int64_t batch = kiln_numel(nb, bdims);
    if (kiln_numel(y->ndim, y->dims) != batch * M * N)
        return kiln_error(KILN_ERR_SHAPE, "MatMul: output has %lld elements, expected %lld",
                          (long long)kiln_numel(y->ndim, y->dims), (long long)(batch * M * N));
    if (batch * M * N == 0) return KILN_OK;
    size_t es = kiln_dtype_size(a->dtype);
    if (K == 0) {
        KILN_CUDA_TRY(cudaMemsetAsync(y->data, 0, (size_t)(batch * M * N) * es, ctx->stream));
        return KILN_OK;
    }
    mm_call k;
    memset(&k, 0, sizeof k);
    k.dtype = a->dtype;
    k.alpha = 1.0f;
    k.N = N;
    k.K = K;
    bool b_shared = true;
    for (int i = 0; i < nb; i++) b_shared = b_shared && (sb[i] == 0 || bdims[i] == 1);
    if (b_shared && kiln_numel(nba, a->dims) == batch) { /* one product of batch * M rows */
        KILN_TRY(mm_check_int(n, batch * M, N, K));
        k.M = batch * M;
        k.batch = 1;
        k.a = a->data;
        k.b = b->data;
        k.d = y->data;
        return mm_run_batched(n, ctx, &k);
    }
    KILN_TRY(mm_check_int(n, M, N, K));
    int j = 0;
    int64_t fa = 0, fb = 0;
    while (!(mm_suffix_stride(nb, bdims, sa, j, &fa) && mm_suffix_stride(nb, bdims, sb, j, &fb))) j++;
    int64_t inner = kiln_numel(nb - j, bdims + j), outer = kiln_numel(j, bdims);
    if (inner > INT32_MAX) return kiln_error(KILN_ERR_UNSUPPORTED, "MatMul: a batch of %lld products", (long long)inner);
    k.M = M;
    k.batch = inner;
    k.stride_a = fa * M * K;
    k.stride_b = fb * K * N;
    k.stride_d = M * N;
    int64_t idx[KILN_MAX_DIMS] = {0};
    for (int64_t o = 0; o < outer; o++) {
        int64_t oa = 0, ob = 0;
        for (int i = 0; i < j; i++) {
            oa += idx[i] * sa[i];
            ob += idx[i] * sb[i];
        }
        k.a = (const char *)a->data + (size_t)(oa * M * K) * es;
        k.b = (const char *)b->data + (size_t)(ob * K * N) * es;
        k.d = (char *)y->data + (size_t)(o * inner * M * N) * es;
        KILN_TRY(mm_run_batched(n, ctx, &k));
        for (int i = j - 1; i >= 0; i--) {
            if (++idx[i] < bdims[i]) break;
            idx[i] = 0;
        }
    }
    return KILN_OK;
}

/* ---------------------------------------------------------------------------------------------
 * Gemm
 * ------------------------------------------------------------------------------------------- */

/* y is (M, N): y[i, j] = scale * c[i * cs0 + j * cs1] (C broadcast to Y by its strides). */
template <typename T>
__global__ void mm_broadcast_c_kernel(T *__restrict__ y, const T *__restrict__ c, int64_t cs0, int64_t cs1, int64_t N,
                                      float scale, int64_t total) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += (int64_t)gridDim.x * blockDim.x) {
        int64_t r = i / N, col = i - r * N;
        T v = c[r * cs0 + col * cs1];
        y[i] = scale == 1.0f ? v : ku_from_f32<T>(scale * ku_f32(v));
    }
}

static kiln_status mm_broadcast_c(kiln_cuda_ctx *ctx, kiln_dtype t, void *y, const void *c, const int64_t *cstr, int64_t M,
                                  int64_t N, float scale) {
    int64_t total = M * N;
    unsigned blocks = ku_blocks(total, KU_THREADS, ctx);
    switch (t) {
    case KILN_F32:
        mm_broadcast_c_kernel<float><<<blocks, KU_THREADS, 0, ctx->stream>>>((float *)y, (const float *)c, cstr[0], cstr[1], N,
                                                                             scale, total);
        break;
    case KILN_F16:
        mm_broadcast_c_kernel<__half><<<blocks, KU_THREADS, 0, ctx->stream>>>((__half *)y, (const __half *)c, cstr[0], cstr[1],
                                                                              N, scale, total);
        break;
    default:
        mm_broadcast_c_kernel<bf16><<<blocks, KU_THREADS, 0, ctx->stream>>>(
            (bf16 *)y, (const bf16 *)c, cstr[0], cstr[1], N, scale, total);
        break;
    }
    KILN_CUDA_LAUNCH_CHECK("mm_broadcast_c_kernel");
    return KILN_OK;
}

/* Gemm: Y [M, N] = alpha A' B' + beta C, C unidirectionally broadcast to [M, N]. */
static kiln_status exec_gemm(const kiln_node *n, const kiln_cuda_tensor *in, int nin, const kiln_cuda_tensor *out, int nout,
                             kiln_cuda_ctx *ctx) {
    const kiln_cuda_tensor *a = &in[0], *b = &in[1], *c = nin > 2 && in[2].ndim >= 0 ? &in[2] : NULL, *y = &out[0];
    if (a->dtype != b->dtype || y->dtype != a->dtype || (c && c->dtype != a->dtype) ||
        (a->dtype != KILN_F32 && a->dtype != KILN_F16 && a->dtype != KILN_BF16))
        return kiln_error(KILN_ERR_UNSUPPORTED, "Gemm: A %s, B %s, Y %s on the CUDA backend", kiln_dtype_name(a->dtype),
                          kiln_dtype_name(b->dtype), kiln_dtype_name(y->dtype));
    if (a->ndim != 2 || b->ndim != 2)
        return kiln_error(KILN_ERR_SHAPE, "Gemm needs 2-D A and B (got ranks %d and %d)", a->ndim, b->ndim);
    bool ta = kiln_attr_int(n, "transA", 0) != 0, tb = kiln_attr_int(n, "transB", 0) != 0;
    float alpha = kiln_attr_float(n, "alpha", 1.0f), beta = kiln_attr_float(n, "beta", 1.0f);
    int64_t M = a->dims[ta ? 1 : 0], K = a->dims[ta ? 0 : 1], N = b->dims[tb ? 0 : 1];
    if (b->dims[tb ? 1 : 0] != K)
        return kiln_error(KILN_ERR_SHAPE, "Gemm inner dimensions differ (%lld vs %lld)", (long long)K,
                          (long long)b->dims[tb ? 1 : 0]);
    if (y->ndim != 2 || y->dims[0] != M || y->dims[1] != N)
        return kiln_error(KILN_ERR_SHAPE, "Gemm: output is not [%lld, %lld]", (long long)M, (long long)N);
    int64_t cstr[2] = {0, 0}, yd[2] = {M, N};
    bool use_c = c && beta != 0.0f && kiln_numel(c->ndim, c->dims) > 0, row_vector = false;
    if (use_c) {
        if (c->ndim > 2) return kiln_error(KILN_ERR_SHAPE, "Gemm C must have rank <= 2, has rank %d", c->ndim);
        for (int i = 0; i < c->ndim; i++) {
            int64_t cd = c->dims[i], od = yd[2 - c->ndim + i];
            if (cd != 1 && cd != od)
                return kiln_error(KILN_ERR_SHAPE, "Gemm C dimension %lld cannot be broadcast to %lld", (long long)cd,
                                  (long long)od);
        }
        kiln_broadcast_strides(c->ndim, c->dims, 2, yd, cstr);
        row_vector = (c->ndim == 1 && c->dims[0] == N) || (c->ndim == 2 && c->dims[0] == 1 && c->dims[1] == N);
    }
    if (M * N == 0) return KILN_OK;
    size_t es = kiln_dtype_size(a->dtype);
    if (K == 0) { /* the product is empty: Y = beta C */
        if (!use_c) {
            KILN_CUDA_TRY(cudaMemsetAsync(y->data, 0, (size_t)(M * N) * es, ctx->stream));
            return KILN_OK;
        }
        return mm_broadcast_c(ctx, a->dtype, y->data, c->data, cstr, M, N, beta);
    }
    KILN_TRY(mm_check_int(n, M, N, K));
    mm_call k;
    memset(&k, 0, sizeof k);
    k.dtype = a->dtype;
    k.ta = ta;
    k.tb = tb;
    k.M = M;
    k.N = N;
    k.K = K;
    k.batch = 1;
    k.alpha = alpha;
    k.beta = beta;
    k.a = a->data;
    k.b = b->data;
    k.d = y->data;
    if (use_c && row_vector && beta == 1.0f) {
        bool refused;
        k.bias = c->data;
        KILN_TRY(mm_run(n, ctx, &k, &refused));
        if (!refused) return KILN_OK;
        k.bias = NULL;
    }
    if (use_c) {
        KILN_TRY(mm_broadcast_c(ctx, a->dtype, y->data, c->data, cstr, M, N, 1.0f));
        k.c = y->data;
    }
    return mm_run_batched(n, ctx, &k);
}

/* ---------------------------------------------------------------------------------------------
 * Products with their epilogue inside cuBLASLt (kiln.FusedMatMul, kiln.FusedGemm)
 * ------------------------------------------------------------------------------------------- */

/* MatMul A [..., M, K] x B [K, N] (a 2-D B shared by every row: one product of batch * M rows) into
 * k; false when the product has another form. */
static bool mm_single_matmul(const kiln_cuda_tensor *a, const kiln_cuda_tensor *b, const kiln_cuda_tensor *y, mm_call *k) {
    if (a->ndim < 2 || b->ndim != 2 || a->dims[a->ndim - 1] != b->dims[0]) return false;
    int64_t rows = kiln_numel(a->ndim - 1, a->dims), N = b->dims[1], K = b->dims[0];
    if (ku_numel(y) != rows * N || rows > INT32_MAX || N > INT32_MAX || K > INT32_MAX || rows * N * K == 0) return false;
    k->M = rows;
    k->N = N;
    k->K = K;
    k->a = a->data;
    k->b = b->data;
    k->alpha = 1.0f;
    return true;
}

/* Gemm of 2-D A and B into k, its C only as a row vector [N] / [1, N] with beta 1 (which becomes
 * the bias); false for another C or shape. */
static bool mm_single_gemm(const kiln_node *n, const kiln_cuda_tensor *in, int nin, const kiln_cuda_tensor *y, mm_call *k) {
    const kiln_cuda_tensor *a = &in[0], *b = &in[1], *c = nin > 2 && !ku_absent(&in[2]) ? &in[2] : NULL;
    if (a->ndim != 2 || b->ndim != 2 || y->ndim != 2) return false;
    k->ta = kiln_attr_int(n, "transA", 0) != 0;
    k->tb = kiln_attr_int(n, "transB", 0) != 0;
    k->alpha = kiln_attr_float(n, "alpha", 1.0f);
    float beta = kiln_attr_float(n, "beta", 1.0f);
    k->M = a->dims[k->ta ? 1 : 0];
    k->K = a->dims[k->ta ? 0 : 1];
    k->N = b->dims[k->tb ? 0 : 1];
    if (b->dims[k->tb ? 1 : 0] != k->K || y->dims[0] != k->M || y->dims[1] != k->N || k->M * k->N * k->K == 0) return false;
    if (k->M > INT32_MAX || k->N > INT32_MAX || k->K > INT32_MAX) return false;
    if (c && beta != 0.0f && ku_numel(c) > 0) {
        bool row = (c->ndim == 1 && c->dims[0] == k->N) || (c->ndim == 2 && c->dims[0] == 1 && c->dims[1] == k->N);
        if (!row || beta != 1.0f) return false;
        k->bias = c->data;
    }
    k->a = a->data;
    k->b = b->data;
    return true;
}

kiln_status kiln_cuda_product_fused(const kiln_node *n, bool gemm, const kiln_cuda_tensor *in, int nin,
                                    const kiln_cuda_tensor *y, const void *bias, const void *z, bool relu,
                                    kiln_cuda_ctx *ctx, bool *done) {
    *done = false;
    if (nin < 2) return KILN_OK;
    const kiln_cuda_tensor *a = &in[0], *b = &in[1];
    if (a->dtype != b->dtype || y->dtype != a->dtype || (a->dtype != KILN_F32 && a->dtype != KILN_F16 && a->dtype != KILN_BF16))
        return KILN_OK;
    mm_call k;
    memset(&k, 0, sizeof k);
    k.dtype = a->dtype;
    k.batch = 1;
    if (!(gemm ? mm_single_gemm(n, in, nin, y, &k) : mm_single_matmul(a, b, y, &k))) return KILN_OK;
    if (bias && k.bias) return KILN_OK; /* a Gemm's C and a bias: two biases */
    if (bias) k.bias = bias;
    k.d = y->data;
    k.c = z;
    k.beta = z ? 1.0f : 0.0f;
    k.relu = relu;
    bool refused;
    KILN_TRY(mm_run(n, ctx, &k, &refused));
    *done = !refused;
    return KILN_OK;
}

/* Float operands of one dtype (float32, float16, bfloat16); integer products are not run on the GPU. */
static kiln_status sup_product(const kiln_graph *g, const kiln_node *n) {
    for (int i = 0; i < n->ninputs && i < 3; i++) {
        const kiln_value *v = kiln_node_input(g, n, i);
        if (!v) continue;
        if (v->dtype != KILN_F32 && v->dtype != KILN_F16 && v->dtype != KILN_BF16)
            return kiln_error(KILN_ERR_UNSUPPORTED, "%s: %s operands are not supported on the CUDA backend (float32/16, bfloat16 only)",
                              n->op_type, kiln_dtype_name(v->dtype));
        const kiln_value *v0 = kiln_node_input(g, n, 0);
        if (v0 && v->dtype != v0->dtype)
            return kiln_error(KILN_ERR_UNSUPPORTED, "%s: operands of different dtypes (%s and %s)", n->op_type,
                              kiln_dtype_name(v0->dtype), kiln_dtype_name(v->dtype));
    }
    return KILN_OK;
}

extern "C" const kiln_cuda_kernel kiln_cuda_kernels_matmul[] = {
    {"MatMul", "", exec_matmul, sup_product},
    {"Gemm", "", exec_gemm, sup_product},
    {NULL, NULL, NULL, NULL},
};
