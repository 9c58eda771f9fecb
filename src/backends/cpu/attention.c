/* attention.c — kiln.Attention on the CPU (semantics in ir/fused_ops.h) in float32 (float16 /
 * bfloat16 through float32): for each output batch index, S = scale Q K^T (one sgemm), the mask and
 * the causal limit applied, a softmax per row, O = P V (one sgemm). Batch dims broadcast like numpy;
 * K and V's head axis is read through kv_repeat, so grouped-query K/V are never copied. One Sq x Sk
 * score buffer per call; exponentials on 4-lane vectors (elementwise_vmath.h). */
#include "backends/cpu/fused_kernels.h"

#include "backends/cpu/elementwise_vmath.h"
#include "core/status.h"

#include <cblas.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* The batch layout of one operand over the output's nb batch dims: effective dims (the head axis,
 * batch dim nb - 1, multiplied by rep) and element strides (contiguous, matrices of mat elements). */
typedef struct batch_view {
    int64_t dims[KILN_MAX_DIMS], strides[KILN_MAX_DIMS];
    int64_t rep;
} batch_view;

/* Lays out x (rank >= 2; its last two dims are the matrix, or those of the mask padded with 1s) over
 * nb batch dims. */
static void view_of(const kiln_tensor *x, int nb, int64_t rep, int64_t mat, batch_view *v) {
    int xb = x->ndim - 2, pad = nb - xb;
    int64_t stride = mat;
    for (int i = nb - 1; i >= 0; i--) {
        v->dims[i] = i < pad ? 1 : x->dims[i - pad];
        v->strides[i] = stride;
        stride *= v->dims[i];
    }
    v->rep = rep;
    if (rep > 1 && nb > 0) v->dims[nb - 1] *= rep;
}

/* Broadcasts v's dims into out (dims already 1 or set); fails on a mismatch naming what. */
static kiln_status broadcast(const kiln_node *n, int nb, const batch_view *v, int64_t *out, const char *what) {
    for (int i = 0; i < nb; i++) {
        if (v->dims[i] == 1) continue;
        if (out[i] != 1 && out[i] != v->dims[i])
            return kiln_error(KILN_ERR_SHAPE, "%s: batch dim %d of %s is %lld, others have %lld", n->op_type, i, what,
                              (long long)v->dims[i], (long long)out[i]);
        out[i] = v->dims[i];
    }
    return KILN_OK;
}

/* Element offset of the matrix that v holds for output batch index idx. */
static int64_t offset(const batch_view *v, int nb, const int64_t *idx) {
    int64_t off = 0;
    for (int i = 0; i < nb; i++) {
        if (v->dims[i] == 1) continue;
        int64_t c = idx[i];
        if (i == nb - 1 && v->rep > 1) c /= v->rep;
        off += c * v->strides[i];
    }
    return off;
}

/* Softmax of row s[0..n) in place (max-subtracted), on 4-lane vectors; the tail in scalars. */
static void softmax_row(float *s, int64_t n) {
    ew_v4f vmx = (ew_v4f){0} - INFINITY, v;
    int64_t j = 0;
    for (; j + 4 <= n; j += 4) {
        memcpy(&v, s + j, sizeof v);
        vmx = ew_vselect(v > vmx, v, vmx);
    }
    float mx = fmaxf(fmaxf(vmx[0], vmx[1]), fmaxf(vmx[2], vmx[3]));
    for (; j < n; j++) mx = s[j] > mx ? s[j] : mx;
    ew_v4f acc = {0};
    for (j = 0; j + 4 <= n; j += 4) {
        memcpy(&v, s + j, sizeof v);
        v = ew_vexp(v - mx);
        memcpy(s + j, &v, sizeof v);
        acc += v;
    }
    double sum = (double)acc[0] + acc[1] + acc[2] + acc[3];
    for (; j < n; j++) {
        s[j] = expf(s[j] - mx);
        sum += s[j];
    }
    float inv = (float)(1.0 / sum);
    for (j = 0; j + 4 <= n; j += 4) {
        memcpy(&v, s + j, sizeof v);
        v *= inv;
        memcpy(s + j, &v, sizeof v);
    }
    for (; j < n; j++) s[j] *= inv;
}

/* row[j] += m[j] (contiguous) or += m[0] (a broadcast scalar) for j in [0, n). */
static void add_mask_row(float *row, const float *m, bool scalar, int64_t n) {
    int64_t j = 0;
    ew_v4f a, b = (ew_v4f){0} + m[0];
    for (; j + 4 <= n; j += 4) {
        memcpy(&a, row + j, sizeof a);
        if (!scalar) memcpy(&b, m + j, sizeof b);
        a += b;
        memcpy(row + j, &a, sizeof a);
    }
    for (; j < n; j++) row[j] += m[scalar ? 0 : j];
}

static NN_EXEC(attention_f32) {
    KILN_TRY(nn_require_inputs(n, in, nin, 3));
    const kiln_tensor *q = in[0], *k = in[1], *v = in[2], *m = nin > 3 ? in[3] : NULL;
    for (int i = 0; i < 3; i++) KILN_TRY(nn_require_f32(n, in[i], i));
    if (m && m->dtype != KILN_F32 && m->dtype != KILN_BOOL)
        return kiln_error(KILN_ERR_UNSUPPORTED, "Attention: the mask must be float32 or bool, not %s", kiln_dtype_name(m->dtype));
    int64_t rep = kiln_attr_int(n, "kv_repeat", 1);
    float scale = kiln_attr_float(n, "scale", 1.0f), fill = kiln_attr_float(n, "mask_fill", -INFINITY);
    bool causal = kiln_attr_int(n, "causal", 0) != 0;
    if (q->ndim < 2 || k->ndim < 2 || v->ndim < 2 || rep < 1 || (rep > 1 && (k->ndim < 3 || v->ndim < 3)))
        return kiln_error(KILN_ERR_SHAPE, "Attention: Q, K, V need rank >= 2 (>= 3 with kv_repeat %lld), have %d, %d, %d",
                          (long long)rep, q->ndim, k->ndim, v->ndim);
    int64_t sq = q->dims[q->ndim - 2], d = q->dims[q->ndim - 1], sk = k->dims[k->ndim - 2];
    int64_t dv = v->dims[v->ndim - 1];
    if (k->dims[k->ndim - 1] != d || v->dims[v->ndim - 2] != sk)
        return kiln_error(KILN_ERR_SHAPE, "Attention: Q [..., %lld, %lld], K [..., %lld, %lld] and V [..., %lld, %lld] do not fit",
                          (long long)sq, (long long)d, (long long)sk, (long long)k->dims[k->ndim - 1],
                          (long long)v->dims[v->ndim - 2], (long long)dv);
    if (sq > INT32_MAX || sk > INT32_MAX || d > INT32_MAX || dv > INT32_MAX)
        return kiln_error(KILN_ERR_UNSUPPORTED, "Attention: dimensions beyond 2^31 are not supported");
    /* the mask, padded to rank >= 2: [..., mq, mk] with mq in {1, sq}, mk in {1, sk} */
    kiln_tensor mview;
    if (m) {
        int64_t md[KILN_MAX_DIMS] = {1, 1};
        int mr = m->ndim < 2 ? 2 : m->ndim;
        for (int i = 0; i < m->ndim; i++) md[mr - m->ndim + i] = m->dims[i];
        kiln_tensor_view(&mview, m->dtype, mr, md, m->data);
        int64_t mq = md[mr - 2], mk = md[mr - 1];
        if ((mq != 1 && mq != sq) || (mk != 1 && mk != sk))
            return kiln_error(KILN_ERR_SHAPE, "Attention: the mask's last dims [%lld, %lld] do not fit the scores [%lld, %lld]",
                              (long long)mq, (long long)mk, (long long)sq, (long long)sk);
        m = &mview;
    }
    int rank = q->ndim;
    if (k->ndim > rank) rank = k->ndim;
    if (v->ndim > rank) rank = v->ndim;
    if (m && m->ndim > rank) rank = m->ndim;
    int nb = rank - 2;
    batch_view bq, bk, bv, bm;
    view_of(q, nb, 1, sq * d, &bq);
    view_of(k, nb, rep, sk * d, &bk);
    view_of(v, nb, rep, sk * dv, &bv);
    int64_t odims[KILN_MAX_DIMS];
    for (int i = 0; i < nb; i++) odims[i] = 1;
    KILN_TRY(broadcast(n, nb, &bq, odims, "Q"));
    KILN_TRY(broadcast(n, nb, &bk, odims, "K"));
    KILN_TRY(broadcast(n, nb, &bv, odims, "V"));
    int64_t mq = 1, mk = 1;
    if (m) {
        mq = m->dims[m->ndim - 2];
        mk = m->dims[m->ndim - 1];
        view_of(m, nb, 1, mq * mk, &bm);
        KILN_TRY(broadcast(n, nb, &bm, odims, "the mask"));
    }
    odims[nb] = sq;
    odims[nb + 1] = dv;
    KILN_TRY(kiln_tensor_alloc(out[0], KILN_F32, rank, odims));
    int64_t batch = kiln_numel(nb, odims);
    if (batch * sq * dv == 0) return KILN_OK;
    float *s = malloc((size_t)(sq * sk + 1) * sizeof *s);
    if (!s) return kiln_error(KILN_ERR_OUT_OF_MEMORY, "Attention: out of memory for %lld x %lld scores", (long long)sq,
                              (long long)sk);
    const float *qd = q->data, *kd = k->data, *vd = v->data;
    float *od = out[0]->data;
    int64_t idx[KILN_MAX_DIMS] = {0};
    for (int64_t t = 0; t < batch; t++) {
        const float *qb = qd + offset(&bq, nb, idx), *kb = kd + offset(&bk, nb, idx), *vb = vd + offset(&bv, nb, idx);
        if (sk > 0 && d > 0)
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)sq, (int)sk, (int)d, scale, qb, (int)d, kb, (int)d,
                        0.0f, s, (int)sk);
        else
            memset(s, 0, (size_t)(sq * sk) * sizeof *s);
        if (m) {
            int64_t mo = offset(&bm, nb, idx);
            for (int64_t i = 0; i < sq; i++) {
                float *row = s + i * sk;
                int64_t base = mo + (mq == 1 ? 0 : i * mk);
                if (m->dtype == KILN_BOOL) {
                    const uint8_t *mb = m->data;
                    for (int64_t j = 0; j < sk; j++)
                        if (!mb[base + (mk == 1 ? 0 : j)]) row[j] = fill;
                } else {
                    add_mask_row(row, (const float *)m->data + base, mk == 1, sk);
                }
            }
        }
        for (int64_t i = 0; i < sq; i++) {
            float *row = s + i * sk;
            if (causal)
                for (int64_t j = i + sk - sq + 1; j < sk; j++)
                    if (j >= 0) row[j] = -INFINITY;
            softmax_row(row, sk);
        }
        float *ob = od + t * sq * dv;
        if (sk > 0)
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)sq, (int)dv, (int)sk, 1.0f, s, (int)sk, vb, (int)dv,
                        0.0f, ob, (int)dv);
        else
            memset(ob, 0, (size_t)(sq * dv) * sizeof *ob);
        for (int i = nb - 1; i >= 0; i--) {
            if (++idx[i] < odims[i]) break;
            idx[i] = 0;
        }
    }
    free(s);
    return KILN_OK;
}

NN_FLOAT_EXEC(kiln_cpu_attention, attention_f32, 1u)
