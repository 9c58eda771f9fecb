/* gemm.c — CPU Gemm and MatMul. float32 goes through kiln_cpu_sgemm (cpu_gemm.h), float64 through
 * OpenBLAS dgemm (MatMul batches that share one right operand become a single product), integer types through a plain
 * loop that wraps like numpy (accumulated modulo 2^64, then narrowed), float16/bfloat16 through
 * float32. */
#include "backends/cpu/nn_kernels.h"

#include "backends/cpu/cpu_gemm.h"
#include "core/status.h"

#include <cblas.h>
#include <stdlib.h>
#include <string.h>

static bool is_int_dtype(kiln_dtype t) {
    return t == KILN_I8 || t == KILN_I16 || t == KILN_I32 || t == KILN_I64 || t == KILN_U8 || t == KILN_U16 ||
           t == KILN_U32 || t == KILN_U64;
}

/* y[i][j] = alpha * sum_k a[i*sai + k*sak] * b[k*sbk + j*sbj] + beta * c[i*cstr[0] + j*cstr[1]]
 * for integer type T (c may be NULL). With alpha = beta = 1 everything wraps modulo 2^64 like
 * numpy and is narrowed to T; other alpha/beta scale in double. acc is scratch of n entries. */
#define DEFINE_INT_MM(T)                                                                           \
    static void int_mm_##T(const void *av, int64_t sai, int64_t sak, const void *bv, int64_t sbk,  \
                           int64_t sbj, void *yv, int64_t m, int64_t n, int64_t k, uint64_t *acc,  \
                           const kiln_tensor *c, const int64_t *cstr, double alpha, double beta) { \
        const T *a = av, *b = bv;                                                                  \
        T *y = yv;                                                                                 \
        bool exact = alpha == 1.0 && (!c || beta == 1.0);                                          \
        for (int64_t i = 0; i < m; i++) {                                                          \
            for (int64_t j = 0; j < n; j++)                                                        \
                acc[j] = c && exact ? (uint64_t)kiln_tensor_get_i64(c, i * cstr[0] + j * cstr[1]) : 0; \
            for (int64_t kk = 0; kk < k; kk++) {                                                   \
                uint64_t av_ = (uint64_t)a[i * sai + kk * sak];                                    \
                const T *br = b + kk * sbk;                                                        \
                for (int64_t j = 0; j < n; j++) acc[j] += av_ * (uint64_t)br[j * sbj];             \
            }                                                                                      \
            for (int64_t j = 0; j < n; j++) {                                                      \
                if (exact) {                                                                       \
                    y[i * n + j] = (T)acc[j];                                                      \
                } else {                                                                           \
                    double cv = c ? (double)kiln_tensor_get_i64(c, i * cstr[0] + j * cstr[1]) : 0.0; \
                    y[i * n + j] = (T)(alpha * (double)(T)acc[j] + beta * cv);                     \
                }                                                                                  \
            }                                                                                      \
        }                                                                                          \
    }
DEFINE_INT_MM(int8_t)
DEFINE_INT_MM(int16_t)
DEFINE_INT_MM(int32_t)
DEFINE_INT_MM(int64_t)
DEFINE_INT_MM(uint8_t)
DEFINE_INT_MM(uint16_t)
DEFINE_INT_MM(uint32_t)
DEFINE_INT_MM(uint64_t)

typedef void (*int_mm_fn)(const void *, int64_t, int64_t, const void *, int64_t, int64_t, void *, int64_t, int64_t,
                          int64_t, uint64_t *, const kiln_tensor *, const int64_t *, double, double);

static int_mm_fn int_mm_for(kiln_dtype t) {
    switch (t) {
    case KILN_I8: return int_mm_int8_t;
    case KILN_I16: return int_mm_int16_t;
    case KILN_I32: return int_mm_int32_t;
    case KILN_I64: return int_mm_int64_t;
    case KILN_U8: return int_mm_uint8_t;
    case KILN_U16: return int_mm_uint16_t;
    case KILN_U32: return int_mm_uint32_t;
    case KILN_U64: return int_mm_uint64_t;
    default: return NULL;
    }
}

/* Fails unless a and b share a dtype this file computes natively (float32, float64, integers). */
static kiln_status product_dtype(const kiln_node *n, const kiln_tensor *a, const kiln_tensor *b) {
    if (a->dtype != b->dtype)
        return kiln_error(KILN_ERR_INVALID_ARGUMENT, "%s operands have different dtypes (%s and %s)", n->op_type,
                          kiln_dtype_name(a->dtype), kiln_dtype_name(b->dtype));
    if (a->dtype != KILN_F32 && a->dtype != KILN_F64 && !is_int_dtype(a->dtype))
        return kiln_error(KILN_ERR_UNSUPPORTED, "%s does not support %s", n->op_type, kiln_dtype_name(a->dtype));
    return KILN_OK;
}

/* Row-major [m, k] x [k, n] (each optionally transposed) into y with ldy = n, y = alpha * a b + beta * y. */
static void blas_mm(kiln_dtype t, bool ta, bool tb, int64_t m, int64_t n, int64_t k, double alpha, const void *a,
                    const void *b, double beta, void *y) {
    int lda = (int)(ta ? m : k), ldb = (int)(tb ? k : n);
    CBLAS_TRANSPOSE at = ta ? CblasTrans : CblasNoTrans, bt = tb ? CblasTrans : CblasNoTrans;
    if (t == KILN_F32)
        kiln_cpu_sgemm(ta, tb, m, n, k, (float)alpha, a, lda, b, ldb, (float)beta, y, n);
    else
        cblas_dgemm(CblasRowMajor, at, bt, (int)m, (int)n, (int)k, alpha, a, lda, b, ldb, beta, y, (int)n);
}

static kiln_status check_blas_size(const kiln_node *n, int64_t m, int64_t nn, int64_t k) {
    if (m > INT32_MAX || nn > INT32_MAX || k > INT32_MAX)
        return kiln_error(KILN_ERR_UNSUPPORTED, "%s: matrix dimensions beyond 2^31 are not supported", n->op_type);
    return KILN_OK;
}

/* Gemm: Y [M, N] = alpha * A' B' + beta * C, C unidirectionally broadcast to [M, N]. */
static NN_EXEC(gemm) {
    KILN_TRY(nn_require_inputs(n, in, nin, 2));
    const kiln_tensor *a = in[0], *b = in[1], *c = nin > 2 ? in[2] : NULL;
    KILN_TRY(product_dtype(n, a, b));
    if (a->ndim != 2 || b->ndim != 2)
        return kiln_error(KILN_ERR_SHAPE, "Gemm needs 2-D A and B (got ranks %d and %d)", a->ndim, b->ndim);
    bool ta = kiln_attr_int(n, "transA", 0) != 0, tb = kiln_attr_int(n, "transB", 0) != 0;
    double alpha = kiln_attr_float(n, "alpha", 1.0f), beta = kiln_attr_float(n, "beta", 1.0f);
    int64_t M = a->dims[ta ? 1 : 0], K = a->dims[ta ? 0 : 1], N = b->dims[tb ? 0 : 1];
    if (b->dims[tb ? 1 : 0] != K)
        return kiln_error(KILN_ERR_SHAPE, "Gemm inner dimensions differ (%lld vs %lld)", (long long)K,
                          (long long)b->dims[tb ? 1 : 0]);
    int64_t cstr[2] = {0, 0};
    if (c) {
        if (c->dtype != a->dtype)
            return kiln_error(KILN_ERR_INVALID_ARGUMENT, "Gemm C is %s but A is %s", kiln_dtype_name(c->dtype),
                              kiln_dtype_name(a->dtype));
        int64_t yd[2] = {M, N};
        if (c->ndim > 2) return kiln_error(KILN_ERR_SHAPE, "Gemm C must have rank <= 2, has rank %d", c->ndim);
        for (int i = 0; i < c->ndim; i++) {
            int64_t cd = c->dims[i], od = yd[2 - c->ndim + i];
            if (cd != 1 && cd != od)
                return kiln_error(KILN_ERR_SHAPE, "Gemm C dimension %lld cannot be broadcast to %lld", (long long)cd,
                                  (long long)od);
        }
        kiln_broadcast_strides(c->ndim, c->dims, 2, yd, cstr);
    }
    KILN_TRY(check_blas_size(n, M, N, K));
    int64_t odims[2] = {M, N};
    KILN_TRY(kiln_tensor_alloc(out[0], a->dtype, 2, odims));
    kiln_tensor *y = out[0];
    bool use_c = c && beta != 0.0 && kiln_tensor_numel(c) > 0;
    if (M * N == 0) return KILN_OK;
    if (a->dtype == KILN_F32 || a->dtype == KILN_F64) {
        if (use_c) {
            if (a->dtype == KILN_F32) {
                float *yp = y->data;
                const float *cp = c->data;
                for (int64_t i = 0; i < M; i++)
                    for (int64_t j = 0; j < N; j++) yp[i * N + j] = (float)beta * cp[i * cstr[0] + j * cstr[1]];
            } else {
                double *yp = y->data;
                const double *cp = c->data;
                for (int64_t i = 0; i < M; i++)
                    for (int64_t j = 0; j < N; j++) yp[i * N + j] = beta * cp[i * cstr[0] + j * cstr[1]];
            }
        }
        if (K > 0) blas_mm(a->dtype, ta, tb, M, N, K, alpha, a->data, b->data, use_c ? 1.0 : 0.0, y->data);
        return KILN_OK;
    }
    uint64_t *acc = malloc((size_t)N * sizeof *acc);
    if (!acc) return kiln_error(KILN_ERR_OUT_OF_MEMORY, "Gemm: out of memory");
    int_mm_for(a->dtype)(a->data, ta ? 1 : K, ta ? M : 1, b->data, tb ? 1 : N, tb ? K : 1, y->data, M, N, K, acc,
                         use_c ? c : NULL, cstr, alpha, beta);
    free(acc);
    return KILN_OK;
}

/* MatMul: numpy matmul with broadcast batch dims; a 1-D A is [1, K] and a 1-D B is [K, 1], and the
 * unit dim is dropped from the result. */
static NN_EXEC(matmul) {
    KILN_TRY(nn_require_inputs(n, in, nin, 2));
    const kiln_tensor *a = in[0], *b = in[1];
    KILN_TRY(product_dtype(n, a, b));
    if (a->ndim < 1 || b->ndim < 1) return kiln_error(KILN_ERR_SHAPE, "MatMul operands must have rank >= 1");
    int64_t M = a->ndim > 1 ? a->dims[a->ndim - 2] : 1, K = a->dims[a->ndim - 1];
    int64_t Kb = b->ndim > 1 ? b->dims[b->ndim - 2] : b->dims[0], N = b->ndim > 1 ? b->dims[b->ndim - 1] : 1;
    if (K != Kb) return kiln_error(KILN_ERR_SHAPE, "MatMul inner dimensions differ (%lld vs %lld)", (long long)K, (long long)Kb);
    int nba = a->ndim > 2 ? a->ndim - 2 : 0, nbb = b->ndim > 2 ? b->ndim - 2 : 0, nb;
    int64_t bdims[KILN_MAX_DIMS], sa[KILN_MAX_DIMS], sb[KILN_MAX_DIMS];
    KILN_TRY(kiln_broadcast_shape(nba, a->dims, nbb, b->dims, &nb, bdims));
    kiln_broadcast_strides(nba, a->dims, nb, bdims, sa);
    kiln_broadcast_strides(nbb, b->dims, nb, bdims, sb);
    int64_t odims[KILN_MAX_DIMS], batch = kiln_numel(nb, bdims);
    int r = nb;
    memcpy(odims, bdims, (size_t)nb * sizeof *odims);
    if (a->ndim > 1) odims[r++] = M;
    if (b->ndim > 1) odims[r++] = N;
    KILN_TRY(check_blas_size(n, M * batch, N, K));
    KILN_TRY(kiln_tensor_alloc(out[0], a->dtype, r, odims));
    if (batch * M * N == 0) return KILN_OK;
    size_t es = kiln_dtype_size(a->dtype);
    const char *ad = a->data, *bd = b->data;
    char *yd = out[0]->data;
    bool blas = a->dtype == KILN_F32 || a->dtype == KILN_F64;
    if (blas && K == 0) return KILN_OK; /* already zero */
    bool b_shared = true, a_full = kiln_numel(nba, a->dims) == batch;
    for (int i = 0; i < nb; i++) b_shared = b_shared && sb[i] == 0;
    if (blas && b_shared && a_full) {
        blas_mm(a->dtype, false, false, batch * M, N, K, 1.0, ad, bd, 0.0, yd);
        return KILN_OK;
    }
    uint64_t *acc = NULL;
    int_mm_fn imm = int_mm_for(a->dtype);
    if (!blas && !(acc = malloc((size_t)N * sizeof *acc))) return kiln_error(KILN_ERR_OUT_OF_MEMORY, "MatMul: out of memory");
    int64_t idx[KILN_MAX_DIMS] = {0};
    for (int64_t t = 0; t < batch; t++) {
        int64_t oa = 0, ob = 0;
        for (int i = 0; i < nb; i++) {
            oa += idx[i] * sa[i];
            ob += idx[i] * sb[i];
        }
        const char *ap = ad + (size_t)(oa * M * K) * es, *bp = bd + (size_t)(ob * K * N) * es;
        char *yp = yd + (size_t)(t * M * N) * es;
        if (blas) blas_mm(a->dtype, false, false, M, N, K, 1.0, ap, bp, 0.0, yp);
        else imm(ap, K, 1, bp, N, 1, yp, M, N, K, acc, NULL, NULL, 1.0, 1.0);
        for (int i = nb - 1; i >= 0; i--) {
            if (++idx[i] < bdims[i]) break;
            idx[i] = 0;
        }
    }
    free(acc);
    return KILN_OK;
}

NN_FLOAT_EXEC(kiln_cpu_gemm, gemm, 1u)
NN_FLOAT_EXEC(kiln_cpu_matmul, matmul, 1u)
