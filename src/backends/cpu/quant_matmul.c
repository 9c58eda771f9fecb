/* quant_matmul.c — CPU integer matrix products with numpy MatMul shapes (batch dims broadcast, 1-D
 * operands promoted and their unit dim dropped):
 *   MatMulInteger   int32 Y = (A - a_zero_point) (B - b_zero_point); a_zero_point per tensor or per
 *                   row of A, b_zero_point per tensor or per column of B;
 *   QLinearMatMul   8-bit Y = saturate(round(Y_int32 * a_scale * b_scale / y_scale) + y_zero_point),
 *                   b_scale / b_zero_point per tensor or per column;
 *   kiln.QMatMul    ir/quant_ops.h (the folded DequantizeLinear -> MatMul -> QuantizeLinear).
 * Each batch matrix is packed as int16 differences (zero points subtracted) and multiplied exactly
 * by quant_igemm, then the epilogue (quant_kernels.h) writes the output. */
#include "backends/cpu/quant_kernels.h"

#include "core/status.h"
#include "ir/quant_ops.h"

#include <stdlib.h>
#include <string.h>

/* The operands and zero points of one integer product. */
typedef struct qmm_args {
    const kiln_tensor *a, *b;
    quant_zp za, zb;          /* za per row of A (M), zb per column of B (N) */
    const quant_epilogue *ep; /* NULL: int32 output */
} qmm_args;

/* Shapes of y = a @ b; fails like MatMul on a mismatch. */
typedef struct qmm_shape {
    int64_t M, K, N, batch;
    int nb;
    int64_t bdims[KILN_MAX_DIMS], sa[KILN_MAX_DIMS], sb[KILN_MAX_DIMS];
    int ndim;
    int64_t odims[KILN_MAX_DIMS];
} qmm_shape;

static kiln_status qmm_shape_make(const kiln_node *n, const kiln_tensor *a, const kiln_tensor *b, qmm_shape *s) {
    if (a->ndim < 1 || b->ndim < 1) return kiln_error(KILN_ERR_SHAPE, "%s operands must have rank >= 1", n->op_type);
    s->M = a->ndim > 1 ? a->dims[a->ndim - 2] : 1;
    s->K = a->dims[a->ndim - 1];
    int64_t Kb = b->ndim > 1 ? b->dims[b->ndim - 2] : b->dims[0];
    s->N = b->ndim > 1 ? b->dims[b->ndim - 1] : 1;
    if (s->K != Kb)
        return kiln_error(KILN_ERR_SHAPE, "%s inner dimensions differ (%lld vs %lld)", n->op_type, (long long)s->K,
                          (long long)Kb);
    if (s->K > (INT64_C(1) << 15))
        return kiln_error(KILN_ERR_UNSUPPORTED, "%s: an inner dimension of %lld could overflow the int32 sum (at most 32768)",
                          n->op_type, (long long)s->K);
    int nba = a->ndim > 2 ? a->ndim - 2 : 0, nbb = b->ndim > 2 ? b->ndim - 2 : 0;
    KILN_TRY(kiln_broadcast_shape(nba, a->dims, nbb, b->dims, &s->nb, s->bdims));
    kiln_broadcast_strides(nba, a->dims, s->nb, s->bdims, s->sa);
    kiln_broadcast_strides(nbb, b->dims, s->nb, s->bdims, s->sb);
    s->batch = kiln_numel(s->nb, s->bdims);
    s->ndim = s->nb;
    memcpy(s->odims, s->bdims, (size_t)s->nb * sizeof *s->odims);
    if (a->ndim > 1) s->odims[s->ndim++] = s->M;
    if (b->ndim > 1) s->odims[s->ndim++] = s->N;
    return KILN_OK;
}

/* dst[r * K + k] = src[r * rs + k * ks] - z(r) for r < R, k < K: an 8-bit matrix (row stride rs,
 * element stride ks) as int16 rows minus a zero point per row. */
#define DEFINE_PACK(T)                                                                             \
    static void pack_##T(const T *src, int64_t R, int64_t K, int64_t rs, int64_t ks, const quant_zp *z, \
                         int16_t *dst) {                                                           \
        for (int64_t r = 0; r < R; r++) {                                                          \
            int32_t zr = quant_zp_at(z, r);                                                        \
            for (int64_t k = 0; k < K; k++) dst[r * K + k] = (int16_t)(src[r * rs + k * ks] - zr); \
        }                                                                                          \
    }
DEFINE_PACK(int8_t)
DEFINE_PACK(uint8_t)

/* Packs t's elements from offset off as int16 rows [R, K] (row stride rs, element stride ks). */
static void pack(const kiln_tensor *t, int64_t off, int64_t R, int64_t K, int64_t rs, int64_t ks, const quant_zp *z,
                 int16_t *dst) {
    if (t->dtype == KILN_I8) pack_int8_t((const int8_t *)t->data + off, R, K, rs, ks, z, dst);
    else pack_uint8_t((const uint8_t *)t->data + off, R, K, rs, ks, z, dst);
}

/* Packs A's matrix at element offset off as int16 rows [M, K] minus the row zero points. */
static void pack_a(const qmm_args *q, const qmm_shape *s, int64_t off, int16_t *p) {
    pack(q->a, off, s->M, s->K, s->K, 1, &q->za, p);
}

/* Packs B's matrix at element offset off transposed, as int16 rows [N, K] minus the column zero points. */
static void pack_b(const qmm_args *q, const qmm_shape *s, int64_t off, int16_t *p) {
    pack(q->b, off, s->N, s->K, 1, s->N, &q->zb, p);
}

/* Checks the zero-point counts against the shape: za 0, 1 or M values, zb 0, 1 or N. */
static kiln_status qmm_check_zp(const kiln_node *n, const qmm_args *q, const qmm_shape *s) {
    if (q->za.n > 1 && q->za.n != s->M)
        return kiln_error(KILN_ERR_SHAPE, "%s: %lld row zero points for %lld rows", n->op_type, (long long)q->za.n, (long long)s->M);
    if (q->zb.n > 1 && q->zb.n != s->N)
        return kiln_error(KILN_ERR_SHAPE, "%s: %lld column zero points for %lld columns", n->op_type, (long long)q->zb.n,
                          (long long)s->N);
    return KILN_OK;
}

/* Computes y (allocated here: int32, or the epilogue's dtype) = the product of q. */
static kiln_status qmm_run(const kiln_node *n, const qmm_args *q, kiln_tensor *y) {
    qmm_shape s;
    KILN_TRY(qmm_shape_make(n, q->a, q->b, &s));
    KILN_TRY(qmm_check_zp(n, q, &s));
    kiln_dtype yt = q->ep ? q->ep->y_dtype : KILN_I32;
    KILN_TRY(kiln_tensor_alloc_uninit(y, yt, s.ndim, s.odims));
    if (s.batch * s.M * s.N == 0) return KILN_OK;
    int16_t *pa = malloc((size_t)(s.M * s.K + 1) * sizeof *pa), *pb = malloc((size_t)(s.N * s.K + 1) * sizeof *pb);
    int32_t *acc = malloc((size_t)(s.M * s.N) * sizeof *acc);
    float *scratch = malloc((size_t)s.M * sizeof *scratch);
    if (!pa || !pb || !acc || !scratch) {
        free(pa), free(pb), free(acc), free(scratch);
        return kiln_error(KILN_ERR_OUT_OF_MEMORY, "%s: out of memory for the packed operands", n->op_type);
    }
    int64_t idx[KILN_MAX_DIMS] = {0}, packed_b = -1;
    for (int64_t t = 0; t < s.batch; t++) {
        int64_t oa = 0, ob = 0;
        for (int i = 0; i < s.nb; i++) {
            oa += idx[i] * s.sa[i];
            ob += idx[i] * s.sb[i];
        }
        pack_a(q, &s, oa * s.M * s.K, pa);
        if (ob != packed_b) pack_b(q, &s, ob * s.K * s.N, pb);
        packed_b = ob;
        /* acc [N, M]: one run of M values per output column, the epilogue's channel */
        quant_igemm(s.N, s.M, s.K, pb, pa, acc, s.M);
        int64_t base = t * s.M * s.N;
        for (int64_t j = 0; j < s.N; j++) {
            const int32_t *col = acc + j * s.M;
            if (q->ep) {
                quant_epilogue_run(q->ep, j, col, s.M, s.N, y->data, base + j, scratch);
            } else {
                int32_t *yi = y->data;
                for (int64_t i = 0; i < s.M; i++) yi[base + i * s.N + j] = col[i];
            }
        }
        for (int i = s.nb - 1; i >= 0; i--) {
            if (++idx[i] < s.bdims[i]) break;
            idx[i] = 0;
        }
    }
    free(pa), free(pb), free(acc), free(scratch);
    return KILN_OK;
}

static bool is_8bit(kiln_dtype t) { return t == KILN_U8 || t == KILN_I8; }

/* Fails unless a and b are 8-bit integer tensors. */
static kiln_status require_8bit_operands(const kiln_node *n, const kiln_tensor *a, const kiln_tensor *b) {
    if (!is_8bit(a->dtype) || !is_8bit(b->dtype))
        return kiln_error(KILN_ERR_UNSUPPORTED, "%s of %s and %s is not supported (int8 and uint8 are)", n->op_type,
                          kiln_dtype_name(a->dtype), kiln_dtype_name(b->dtype));
    return KILN_OK;
}

/* The row count of a (M) and column count of b (N), for zero-point checks before the product. */
static int64_t rows_of(const kiln_tensor *a) { return a->ndim > 1 ? a->dims[a->ndim - 2] : 1; }
static int64_t cols_of(const kiln_tensor *b) { return b->ndim > 1 ? b->dims[b->ndim - 1] : 1; }

/* Runs q with zero points from tensors za and zb (each NULL for zero). */
static kiln_status run_with_zp_tensors(const kiln_node *n, qmm_args *q, const kiln_tensor *za, const kiln_tensor *zb,
                                       kiln_tensor *y) {
    kiln_status s = quant_zp_from_tensor(za, &q->za);
    if (s == KILN_OK) s = quant_zp_from_tensor(zb, &q->zb);
    if (s == KILN_OK) s = qmm_run(n, q, y);
    quant_zp_free(&q->za);
    quant_zp_free(&q->zb);
    return s;
}

/* MatMulInteger: A, B, a_zero_point (optional), b_zero_point (optional). */
NN_EXEC(kiln_cpu_matmul_integer) {
    (void)nout;
    KILN_TRY(nn_require_inputs(n, in, nin, 2));
    const kiln_tensor *a = in[0], *b = in[1], *za = nin > 2 ? in[2] : NULL, *zb = nin > 3 ? in[3] : NULL;
    KILN_TRY(require_8bit_operands(n, a, b));
    KILN_TRY(quant_param_check(n, za, "a_zero_point", a->dtype, rows_of(a)));
    KILN_TRY(quant_param_check(n, zb, "b_zero_point", b->dtype, cols_of(b)));
    qmm_args q = {.a = a, .b = b};
    return run_with_zp_tensors(n, &q, za, zb, out[0]);
}

/* QLinearMatMul: a, a_scale, a_zero_point, b, b_scale, b_zero_point, y_scale, y_zero_point. */
NN_EXEC(kiln_cpu_qlinear_matmul) {
    (void)nout;
    KILN_TRY(nn_require_inputs(n, in, nin, 7));
    const kiln_tensor *a = in[0], *as = in[1], *za = in[2], *b = in[3], *bs = in[4], *zb = nin > 5 ? in[5] : NULL,
                      *ys = in[6], *zy = nin > 7 ? in[7] : NULL;
    KILN_TRY(require_8bit_operands(n, a, b));
    KILN_TRY(quant_param_check(n, as, "a_scale", KILN_F32, 1));
    KILN_TRY(quant_param_check(n, za, "a_zero_point", a->dtype, 1));
    KILN_TRY(quant_param_check(n, bs, "b_scale", KILN_F32, cols_of(b)));
    KILN_TRY(quant_param_check(n, zb, "b_zero_point", b->dtype, cols_of(b)));
    KILN_TRY(quant_param_check(n, ys, "y_scale", KILN_F32, 1));
    kiln_dtype yt = zy ? zy->dtype : a->dtype;
    if (!is_8bit(yt)) return kiln_error(KILN_ERR_UNSUPPORTED, "QLinearMatMul to %s is not supported", kiln_dtype_name(yt));
    KILN_TRY(quant_param_check(n, zy, "y_zero_point", yt, 1));
    quant_epilogue ep = {.qlinear = true,
                         .x_scale = *(const float *)as->data,
                         .w_scale = bs->data,
                         .nw = kiln_tensor_numel(bs),
                         .y_dtype = yt,
                         .y_scale = *(const float *)ys->data,
                         .y_zero_point = zy ? quant_load(zy->data, yt, 0) : 0};
    qmm_args q = {.a = a, .b = b, .ep = &ep};
    return run_with_zp_tensors(n, &q, za, zb, out[0]);
}

/* kiln.QMatMul: A, B (2-D), bias (optional float32 [N]); parameters in attributes. */
NN_EXEC(kiln_cpu_kiln_qmatmul) {
    (void)nout;
    KILN_TRY(nn_require_inputs(n, in, nin, 2));
    const kiln_tensor *a = in[0], *b = in[1], *bias = nin > 2 ? in[2] : NULL;
    KILN_TRY(require_8bit_operands(n, a, b));
    if (b->ndim != 2) return kiln_error(KILN_ERR_SHAPE, "QMatMul needs a 2-D B, has rank %d", b->ndim);
    kiln_quant_layer ql;
    KILN_TRY(kiln_quant_layer_read(n, &ql));
    int64_t N = b->dims[1];
    KILN_TRY(quant_layer_zero_points_check(n, ql.x_zero_point, a->dtype, ql.w_zero_point, ql.nwzp, b->dtype));
    if (ql.nw != 1 && ql.nw != N)
        return kiln_error(KILN_ERR_SHAPE, "QMatMul: %d weight scales for %lld columns", ql.nw, (long long)N);
    if (bias && (bias->dtype != KILN_F32 || kiln_tensor_numel(bias) != N))
        return kiln_error(KILN_ERR_SHAPE, "QMatMul: the bias must be float32 with %lld elements", (long long)N);
    quant_epilogue ep = {.x_scale = ql.x_scale, .w_scale = ql.w_scale, .nw = ql.nw, .bias = bias ? bias->data : NULL,
                         .act = ql.act, .y_dtype = ql.y_dtype, .y_scale = ql.y_scale, .y_zero_point = ql.y_zero_point};
    qmm_args q = {.a = a, .b = b, .ep = &ep};
    int64_t xz = ql.x_zero_point;
    kiln_status s = quant_zp_from_ints(&xz, 1, &q.za);
    if (s == KILN_OK) s = quant_zp_from_ints(ql.w_zero_point, ql.nwzp, &q.zb);
    if (s == KILN_OK) s = qmm_run(n, &q, out[0]);
    quant_zp_free(&q.za);
    quant_zp_free(&q.zb);
    return s;
}
