/* quant_igemm.c — what the CPU integer layers share: the exact int32-accumulating product of int16
 * operands (8-bit values with their zero points already subtracted) and the requantizing epilogue
 * (quant_kernels.h). The product is a widening multiply-add loop the compiler vectorizes (an AVX2
 * clone on x86-64), four output columns per pass over a row, the columns split over the thread pool. */
#include "backends/cpu/quant_kernels.h"

#include "backends/cpu/cpu_simd.h"
#include "backends/cpu/fused_kernels.h"
#include "core/status.h"
#include "core/threadpool.h"

#include <stdlib.h>
#include <string.h>

/* Columns per inner block: a block of B rows stays in cache while every row of A passes over it. */
#define IGEMM_COL_BLOCK 32

typedef struct igemm_job {
    int64_t M, K, ldc;
    const int16_t *A, *B;
    int32_t *C;
} igemm_job;

/* out[c] = sum_k a[k] * b[c * K + k] for the ncols (1..4) columns c, each load of a shared by them. */
KILN_SIMD_CLONES QUANT_VECTORIZE
static void dot_cols_s16(const int16_t *restrict a, const int16_t *restrict b, int64_t K, int ncols,
                         int32_t *restrict out) {
    const int16_t *b0 = b, *b1 = ncols > 1 ? b + K : b, *b2 = ncols > 2 ? b + 2 * K : b, *b3 = ncols > 3 ? b + 3 * K : b;
    int32_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
    for (int64_t k = 0; k < K; k++) {
        int32_t av = a[k];
        s0 += av * b0[k];
        s1 += av * b1[k];
        s2 += av * b2[k];
        s3 += av * b3[k];
    }
    int32_t r[4] = {s0, s1, s2, s3};
    for (int c = 0; c < ncols; c++) out[c] = r[c];
}

static void igemm_cols(void *ctx, int64_t j0, int64_t j1) {
    const igemm_job *job = ctx;
    int32_t r[4];
    for (int64_t jb = j0; jb < j1; jb += IGEMM_COL_BLOCK) {
        int64_t je = jb + IGEMM_COL_BLOCK < j1 ? jb + IGEMM_COL_BLOCK : j1;
        for (int64_t i = 0; i < job->M; i++) {
            const int16_t *a = job->A + i * job->K;
            int32_t *c = job->C + i * job->ldc;
            for (int64_t j = jb; j < je; j += 4) {
                int n = je - j < 4 ? (int)(je - j) : 4;
                dot_cols_s16(a, job->B + j * job->K, job->K, n, r);
                for (int q = 0; q < n; q++) c[j + q] = r[q];
            }
        }
    }
}

void quant_igemm(int64_t M, int64_t N, int64_t K, const int16_t *A, const int16_t *B, int32_t *C, int64_t ldc) {
    igemm_job job = {M, K, ldc, A, B, C};
    int64_t work = M * K > 0 ? M * K : 1, min_cols = (INT64_C(1) << 16) / work + 1;
    kiln_parallel_for(N, min_cols, igemm_cols, &job);
}

void quant_epilogue_run(const quant_epilogue *ep, int64_t c, const int32_t *acc, int64_t count, int64_t stride,
                        void *y, int64_t at, float *scratch) {
    float ws = ep->w_scale[ep->nw == 1 ? 0 : c];
    int32_t lo, hi;
    quant_range(ep->y_dtype, &lo, &hi);
    if (ep->qlinear) {
        /* ONNX's formula: the multiplier in float32, the product with the sum as numpy does it (double). */
        double mult = (double)(ep->x_scale * ws / ep->y_scale);
        int64_t ib = ep->ibias ? ep->ibias[c] : 0;
        for (int64_t i = 0; i < count; i++) {
            double v = (double)((int64_t)acc[i] + ib) * mult + (double)ep->y_zero_point;
            double r = __builtin_rint(v); /* NaN (a NaN or infinite scale) saturates to lo */
            quant_store(y, ep->y_dtype, at + i * stride, !(r >= lo) ? lo : r > hi ? hi : (int32_t)r);
        }
        return;
    }
    float sc = ep->x_scale * ws, b = ep->bias ? ep->bias[c] : 0.0f;
    for (int64_t i = 0; i < count; i++) scratch[i] = (float)acc[i] * sc + b;
    if (ep->residual && ep->r_dtype == KILN_F32) /* the Add of a float residual */
        for (int64_t i = 0; i < count; i++) scratch[i] += ((const float *)ep->residual)[at + i * stride];
    else if (ep->residual) /* DequantizeLinear of R, then the Add, in float32 */
        for (int64_t i = 0; i < count; i++)
            scratch[i] += (float)(quant_load(ep->residual, ep->r_dtype, at + i * stride) - ep->r_zero_point) * ep->r_scale;
    kiln_cpu_activation_apply(scratch, count, &ep->act);
    if (ep->y_dtype == KILN_F32) {
        float *yf = y;
        for (int64_t i = 0; i < count; i++) yf[at + i * stride] = scratch[i];
        return;
    }
    for (int64_t i = 0; i < count; i++)
        quant_store(y, ep->y_dtype, at + i * stride,
                    quant_round_sat(__builtin_rintf(scratch[i] / ep->y_scale) + (float)ep->y_zero_point, lo, hi));
}

kiln_status quant_param_check(const kiln_node *n, const kiln_tensor *t, const char *what, kiln_dtype want,
                              int64_t count) {
    if (!t) return KILN_OK;
    if (t->dtype != want)
        return kiln_error(want == KILN_F32 ? KILN_ERR_UNSUPPORTED : KILN_ERR_INVALID_ARGUMENT, "%s: %s is %s, expected %s",
                          n->op_type, what, kiln_dtype_name(t->dtype), kiln_dtype_name(want));
    int64_t k = kiln_tensor_numel(t);
    if (t->ndim > 1 || (k != 1 && k != count))
        return kiln_error(KILN_ERR_SHAPE, "%s: %s must be a scalar%s (has %lld elements)", n->op_type, what,
                          count > 1 ? " or 1-D with one value per channel" : "", (long long)k);
    return KILN_OK;
}

kiln_status quant_layer_zero_points_check(const kiln_node *n, int32_t x_zero_point, kiln_dtype xt,
                                          const int64_t *w_zero_point, int count, kiln_dtype wt) {
    int32_t lo, hi;
    quant_range(xt, &lo, &hi);
    if (x_zero_point < lo || x_zero_point > hi)
        return kiln_error(KILN_ERR_INVALID_ARGUMENT, "%s: x_zero_point %d is outside %s's range", n->op_type,
                          (int)x_zero_point, kiln_dtype_name(xt));
    quant_range(wt, &lo, &hi);
    for (int i = 0; i < count; i++)
        if (w_zero_point[i] < lo || w_zero_point[i] > hi)
            return kiln_error(KILN_ERR_INVALID_ARGUMENT, "%s: w_zero_point[%d] %lld is outside %s's range", n->op_type, i,
                              (long long)w_zero_point[i], kiln_dtype_name(wt));
    return KILN_OK;
}

kiln_status quant_zp_from_tensor(const kiln_tensor *t, quant_zp *z) {
    z->n = 0;
    z->v = NULL;
    if (!t || kiln_tensor_numel(t) == 0) return KILN_OK;
    int64_t k = kiln_tensor_numel(t);
    if (!(z->v = malloc((size_t)k * sizeof *z->v))) return kiln_error(KILN_ERR_OUT_OF_MEMORY, "zero point: out of memory");
    for (int64_t i = 0; i < k; i++) z->v[i] = quant_load(t->data, t->dtype, i);
    z->n = k;
    return KILN_OK;
}

kiln_status quant_zp_from_ints(const int64_t *v, int64_t count, quant_zp *z) {
    z->n = 0;
    z->v = NULL;
    if (count == 0) return KILN_OK;
    if (!(z->v = malloc((size_t)count * sizeof *z->v))) return kiln_error(KILN_ERR_OUT_OF_MEMORY, "zero point: out of memory");
    for (int64_t i = 0; i < count; i++) z->v[i] = (int32_t)v[i];
    z->n = count;
    return KILN_OK;
}

void quant_zp_free(quant_zp *z) {
    free(z->v);
    z->v = NULL;
    z->n = 0;
}
