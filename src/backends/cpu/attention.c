/* attention.c — kiln.Attention on the CPU (semantics in ir/fused_ops.h) in float32 (float16 /
 * bfloat16 through float32): for each output batch index, S = scale Q K^T, the mask and the causal
 * limit applied, a softmax per row, O = P V, both products by kiln's packed kernel (packed_gemm.h)
 * with K^T and V packed per matrix. Batch dims broadcast like numpy; K and V's head axis is read
 * through kv_repeat, so grouped-query K/V are never copied. The sequence-first layouts (1: [B, S,
 * H, D], 2: packed QKV) are the same matrices read with a row stride, so nothing is transposed
 * either. The batch of matrices (batch x heads) is split over the thread pool, each part with a
 * per-thread buffer (Sq x Sk scores, the packed operand, the product's scratch); exponentials on 16-lane vectors
 * where the processor has them (activation_wide.h), else on 4-lane ones (elementwise_vmath.h). */
#include "backends/cpu/fused_kernels.h"

#include "backends/cpu/activation_wide.h"
#include "backends/cpu/cpu_scratch.h"
#include "backends/cpu/cpu_simd.h"
#include "backends/cpu/elementwise_vmath.h"
#include "backends/cpu/packed_gemm.h"
#include "core/ckd.h"
#include "core/status.h"
#include "core/threadpool.h"
#include "ir/fused_ops.h"

#include <math.h>
#include <stdatomic.h>
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

/* Softmax of row s[0..n) in place (max-subtracted), on 16-lane vectors where the processor has
 * them, else on 4-lane vectors with the tail in scalars. */
static void softmax_row(float *s, int64_t n) {
    if (kiln_cpu_softmax_wide(s, n)) return;
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

/* x[i] *= scale for i in [0, n). */
KILN_SIMD_CLONES
static void scale_all(float *x, float scale, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) kiln_v8_store(x + i, kiln_v8_load(x + i) * scale);
    for (; i < n; i++) x[i] *= scale;
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

/* Where the matrices of one call lie: nb batch dims (odims), per operand a batch view, a base offset
 * and a row stride (elements between consecutive sequence positions), and the output's. */
typedef struct attn_geometry {
    int nb;
    int64_t odims[KILN_MAX_DIMS];
    int64_t sq, sk, d, dv;
    batch_view bq, bk, bv, bo;
    int64_t kbase, vbase;    /* offsets of K and V in their tensors (packed: in Q's) */
    int64_t ldq, ldk, ldv, ldo;
} attn_geometry;

/* Layout 0: matrices [..., S, D], batch dims broadcast like numpy (the output's are their broadcast). */
static kiln_status geometry_matrices(const kiln_node *n, const kiln_tensor *q, const kiln_tensor *k, const kiln_tensor *v,
                                     const kiln_tensor *m, int64_t rep, attn_geometry *g) {
    if (q->ndim < 2 || k->ndim < 2 || v->ndim < 2 || (rep > 1 && (k->ndim < 3 || v->ndim < 3)))
        return kiln_error(KILN_ERR_SHAPE, "Attention: Q, K, V need rank >= 2 (>= 3 with kv_repeat %lld), have %d, %d, %d",
                          (long long)rep, q->ndim, k->ndim, v->ndim);
    g->sq = q->dims[q->ndim - 2];
    g->d = q->dims[q->ndim - 1];
    g->sk = k->dims[k->ndim - 2];
    g->dv = v->dims[v->ndim - 1];
    if (k->dims[k->ndim - 1] != g->d || v->dims[v->ndim - 2] != g->sk)
        return kiln_error(KILN_ERR_SHAPE, "Attention: Q [..., %lld, %lld], K [..., %lld, %lld] and V [..., %lld, %lld] do not fit",
                          (long long)g->sq, (long long)g->d, (long long)g->sk, (long long)k->dims[k->ndim - 1],
                          (long long)v->dims[v->ndim - 2], (long long)g->dv);
    int rank = q->ndim;
    if (k->ndim > rank) rank = k->ndim;
    if (v->ndim > rank) rank = v->ndim;
    if (m && m->ndim > rank) rank = m->ndim;
    g->nb = rank - 2;
    view_of(q, g->nb, 1, g->sq * g->d, &g->bq);
    view_of(k, g->nb, rep, g->sk * g->d, &g->bk);
    view_of(v, g->nb, rep, g->sk * g->dv, &g->bv);
    for (int i = 0; i < g->nb; i++) g->odims[i] = 1;
    KILN_TRY(broadcast(n, g->nb, &g->bq, g->odims, "Q"));
    KILN_TRY(broadcast(n, g->nb, &g->bk, g->odims, "K"));
    KILN_TRY(broadcast(n, g->nb, &g->bv, g->odims, "V"));
    int64_t stride = g->sq * g->dv;
    for (int i = g->nb - 1; i >= 0; i--) {
        g->bo.dims[i] = g->odims[i];
        g->bo.strides[i] = stride;
        stride *= g->odims[i];
    }
    g->bo.rep = 1;
    g->ldq = g->d;
    g->ldk = g->d;
    g->ldv = g->dv;
    g->ldo = g->dv;
    return KILN_OK;
}

/* One operand of layout 1 or 2 over batch dims [B, H]: sequence rows ld apart, heads hstride apart. */
static void seq_view(int64_t b, int64_t h, int64_t s, int64_t ld, int64_t hstride, int64_t rep, batch_view *v) {
    v->dims[0] = b;
    v->dims[1] = h * rep;
    v->strides[0] = s * ld;
    v->strides[1] = hstride;
    v->rep = rep;
}

/* Layouts 1 (Q [B, Sq, H, D], K [B, Sk, Hk, D], V [B, Sk, Hk, Dv]) and 2 (QKV [B, S, 3, H, D]). */
static kiln_status geometry_sequence_first(int64_t layout, const kiln_tensor *q, const kiln_tensor *k, const kiln_tensor *v,
                                           int64_t rep, attn_geometry *g) {
    int64_t b = q->dims[0], h;
    g->nb = 2;
    if (layout == 2) {
        if (q->ndim != 5 || q->dims[2] != 3 || rep != 1)
            return kiln_error(KILN_ERR_SHAPE, "Attention: packed QKV must be [B, S, 3, H, D] (rank %d) without kv_repeat",
                              q->ndim);
        h = q->dims[3];
        g->sq = g->sk = q->dims[1];
        g->d = g->dv = q->dims[4];
        g->ldq = g->ldk = g->ldv = 3 * h * g->d;
        g->kbase = h * g->d;
        g->vbase = 2 * h * g->d;
        seq_view(b, h, g->sq, g->ldq, g->d, 1, &g->bq);
        g->bk = g->bv = g->bq;
    } else {
        if (!k || !v || q->ndim != 4 || k->ndim != 4 || v->ndim != 4)
            return kiln_error(KILN_ERR_SHAPE, "Attention: layout 1 needs Q, K and V of rank 4 [B, S, H, D]");
        h = q->dims[2];
        g->sq = q->dims[1];
        g->d = q->dims[3];
        g->sk = k->dims[1];
        g->dv = v->dims[3];
        if (k->dims[0] != b || v->dims[0] != b || k->dims[3] != g->d || v->dims[1] != g->sk || k->dims[2] != v->dims[2] ||
            k->dims[2] * rep != h)
            return kiln_error(KILN_ERR_SHAPE, "Attention: Q [%lld, %lld, %lld, %lld], K [%lld, %lld, %lld, %lld] and V "
                              "[%lld, %lld, %lld, %lld] do not fit (kv_repeat %lld)", (long long)b, (long long)g->sq,
                              (long long)h, (long long)g->d, (long long)k->dims[0], (long long)k->dims[1],
                              (long long)k->dims[2], (long long)k->dims[3], (long long)v->dims[0], (long long)v->dims[1],
                              (long long)v->dims[2], (long long)v->dims[3], (long long)rep);
        g->ldq = h * g->d;
        g->ldk = k->dims[2] * g->d;
        g->ldv = k->dims[2] * g->dv;
        seq_view(b, h, g->sq, g->ldq, g->d, 1, &g->bq);
        seq_view(b, k->dims[2], g->sk, g->ldk, g->d, rep, &g->bk);
        seq_view(b, k->dims[2], g->sk, g->ldv, g->dv, rep, &g->bv);
    }
    g->odims[0] = b;
    g->odims[1] = h;
    g->ldo = h * g->dv;
    seq_view(b, h, g->sq, g->ldo, g->dv, 1, &g->bo);
    return KILN_OK;
}

/* One call's work: the geometry, the mask and its view, and the batch of score matrices split into
 * parts over the thread pool, each part on its thread's scratch (cpu_scratch.h: kept between calls). */
typedef struct attn_job {
    const attn_geometry *g;
    const kiln_tensor *m; /* NULL: no mask */
    const batch_view *bm;
    int64_t mq, mk;
    float scale, fill;
    bool causal;
    const float *qd, *kd, *vd; /* K and V at their base offsets */
    float *od;
    int64_t batch, parts;
    int64_t part_floats, packed; /* a part's buffer: scores (sq * sk), packed K^T or V (packed), product scratch */
    atomic_bool oom;
} attn_job;

/* Output batch index t of the matrices: S = scale Q K^T, mask, causal limit, softmax, O = P V,
 * with buf the part's buffer. */
static void attend(const attn_job *j, int64_t t, float *buf) {
    const attn_geometry *g = j->g;
    const int nb = g->nb;
    const int64_t sq = g->sq, sk = g->sk, d = g->d, dv = g->dv;
    int64_t idx[KILN_MAX_DIMS] = {0};
    for (int i = nb - 1; i >= 0; i--) {
        idx[i] = t % g->odims[i];
        t /= g->odims[i];
    }
    const float *qb = j->qd + offset(&g->bq, nb, idx), *kb = j->kd + offset(&g->bk, nb, idx),
                *vb = j->vd + offset(&g->bv, nb, idx);
    float *s = buf, *packed = buf + sq * sk, *scratch = packed + j->packed;
    if (sk > 0 && d > 0) {
        kiln_pg_pack_b(kb, 1, g->ldk, d, sk, packed); /* K^T: element (i, key) at kb[key * ldk + i] */
        kiln_pg_gemm_packed_b(qb, g->ldq, sq, d, packed, sk, s, sk, scratch);
        if (j->scale != 1.0f) scale_all(s, j->scale, sq * sk);
    } else {
        memset(s, 0, (size_t)(sq * sk) * sizeof *s);
    }
    if (j->m) {
        int64_t mo = offset(j->bm, nb, idx);
        for (int64_t i = 0; i < sq; i++) {
            float *row = s + i * sk;
            int64_t base = mo + (j->mq == 1 ? 0 : i * j->mk);
            if (j->m->dtype == KILN_BOOL) {
                const uint8_t *mb = j->m->data;
                for (int64_t c = 0; c < sk; c++)
                    if (!mb[base + (j->mk == 1 ? 0 : c)]) row[c] = j->fill;
            } else {
                add_mask_row(row, (const float *)j->m->data + base, j->mk == 1, sk);
            }
        }
    }
    for (int64_t i = 0; i < sq; i++) {
        float *row = s + i * sk;
        if (j->causal)
            for (int64_t c = i + sk - sq + 1; c < sk; c++)
                if (c >= 0) row[c] = -INFINITY;
        softmax_row(row, sk);
    }
    float *ob = j->od + offset(&g->bo, nb, idx);
    if (sk > 0) {
        kiln_pg_pack_b(vb, g->ldv, 1, sk, dv, packed);
        kiln_pg_gemm_packed_b(s, sk, sq, sk, packed, dv, ob, g->ldo, scratch);
    } else
        for (int64_t i = 0; i < sq; i++) memset(ob + i * g->ldo, 0, (size_t)dv * sizeof *ob);
}

/* Parts [p0, p1): part p takes batch indices [p * batch / parts, (p + 1) * batch / parts) with
 * score buffer p. */
static void attend_parts(void *ctx, int64_t p0, int64_t p1) {
    attn_job *j = ctx;
    float *buf = kiln_cpu_scratch(KILN_SCRATCH_TASK, (size_t)j->part_floats);
    if (!buf) {
        atomic_store(&j->oom, true);
        return;
    }
    for (int64_t p = p0; p < p1; p++) {
        for (int64_t t = p * j->batch / j->parts; t < (p + 1) * j->batch / j->parts; t++) attend(j, t, buf);
    }
}

static NN_EXEC(attention_f32) {
    int64_t layout = kiln_attr_int(n, "layout", 0);
    KILN_TRY(nn_require_inputs(n, in, nin, layout == 2 ? 1 : 3));
    const kiln_tensor *q = in[0], *k = layout == 2 ? q : in[1], *v = layout == 2 ? q : in[2], *m = nin > 3 ? in[3] : NULL;
    for (int i = 0; i < (layout == 2 ? 1 : 3); i++) KILN_TRY(nn_require_f32(n, in[i], i));
    if (m && m->dtype != KILN_F32 && m->dtype != KILN_BOOL)
        return kiln_error(KILN_ERR_UNSUPPORTED, "Attention: the mask must be float32 or bool, not %s", kiln_dtype_name(m->dtype));
    if (layout < 0 || layout > 2) return kiln_error(KILN_ERR_INVALID_ARGUMENT, "Attention: layout %lld is not 0, 1 or 2", (long long)layout);
    int64_t rep = kiln_attr_int(n, "kv_repeat", 1);
    float scale = kiln_attr_float(n, "scale", 1.0f), fill = kiln_attr_float(n, "mask_fill", -INFINITY);
    bool causal = kiln_attr_int(n, "causal", 0) != 0;
    if (rep < 1 || rep > KILN_MAX_KV_REPEAT)
        return kiln_error(KILN_ERR_SHAPE, "Attention: kv_repeat must be from 1 to %d, is %lld", KILN_MAX_KV_REPEAT, (long long)rep);
    attn_geometry g;
    memset(&g, 0, sizeof g);
    KILN_TRY(layout == 0 ? geometry_matrices(n, q, k, v, m, rep, &g) : geometry_sequence_first(layout, q, k, v, rep, &g));
    int64_t sq = g.sq, sk = g.sk, d = g.d, dv = g.dv;
    if (sq > INT32_MAX || sk > INT32_MAX || d > INT32_MAX || dv > INT32_MAX || g.ldq > INT32_MAX || g.ldk > INT32_MAX ||
        g.ldv > INT32_MAX || g.ldo > INT32_MAX)
        return kiln_error(KILN_ERR_UNSUPPORTED, "Attention: dimensions beyond 2^31 are not supported");
    /* the mask, padded to rank >= 2: [..., mq, mk] with mq in {1, sq}, mk in {1, sk} */
    kiln_tensor mview;
    batch_view bm;
    int64_t mq = 1, mk = 1;
    if (m) {
        int64_t md[KILN_MAX_DIMS] = {1, 1};
        int mr = m->ndim < 2 ? 2 : m->ndim;
        for (int i = 0; i < m->ndim; i++) md[mr - m->ndim + i] = m->dims[i];
        kiln_tensor_view(&mview, m->dtype, mr, md, m->data);
        mq = md[mr - 2];
        mk = md[mr - 1];
        if ((mq != 1 && mq != sq) || (mk != 1 && mk != sk))
            return kiln_error(KILN_ERR_SHAPE, "Attention: the mask's last dims [%lld, %lld] do not fit the scores [%lld, %lld]",
                              (long long)mq, (long long)mk, (long long)sq, (long long)sk);
        if (mr - 2 > g.nb) return kiln_error(KILN_ERR_SHAPE, "Attention: the mask has rank %d, more than the scores", mr);
        m = &mview;
        view_of(m, g.nb, 1, mq * mk, &bm);
        int64_t want[KILN_MAX_DIMS];
        memcpy(want, g.odims, sizeof want);
        KILN_TRY(broadcast(n, g.nb, &bm, want, "the mask"));
        if (layout != 0 && memcmp(want, g.odims, sizeof want))
            return kiln_error(KILN_ERR_SHAPE, "Attention: the mask's batch dims do not broadcast to [B, H]");
        memcpy(g.odims, want, sizeof want);
    }
    int nb = g.nb;
    int64_t odims[KILN_MAX_DIMS + 2];
    int orank;
    if (layout == 0) {
        memcpy(odims, g.odims, sizeof g.odims);
        odims[nb] = sq;
        odims[nb + 1] = dv;
        orank = nb + 2;
        int64_t stride = sq * dv; /* the mask may have widened the batch */
        for (int i = nb - 1; i >= 0; i--) {
            g.bo.dims[i] = g.odims[i];
            g.bo.strides[i] = stride;
            stride *= g.odims[i];
        }
    } else {
        int64_t o4[4] = {g.odims[0], sq, g.odims[1], dv};
        memcpy(odims, o4, sizeof o4);
        orank = 4;
    }
    KILN_TRY(kiln_tensor_alloc(out[0], KILN_F32, orank, odims));
    int64_t batch = kiln_numel(nb, g.odims);
    if (batch * sq * dv == 0) return KILN_OK;
    int64_t parts = batch < kiln_threadpool_size() ? batch : kiln_threadpool_size();
    int64_t pk = kiln_pg_packed_b_floats(g.d, g.sk), pv = kiln_pg_packed_b_floats(g.sk, g.dv);
    int64_t packed = pk > pv ? pk : pv;
    size_t per_part;
    if (!kiln_mul_size_ok((size_t)sq, (size_t)sk, &per_part) ||
        !kiln_add_size_ok(per_part, (size_t)(packed + kiln_pg_scratch_b_floats()), &per_part))
        return kiln_error(KILN_ERR_OUT_OF_MEMORY, "Attention: %lld x %lld scores do not fit in memory", (long long)sq,
                          (long long)sk);
    attn_job j = {&g, m, m ? &bm : NULL, mq, mk, scale, fill, causal, q->data, (const float *)k->data + g.kbase,
                  (const float *)v->data + g.vbase, out[0]->data, batch, parts, (int64_t)per_part, packed, false};
    kiln_parallel_for(parts, 1, attend_parts, &j);
    if (atomic_load(&j.oom))
        return kiln_error(KILN_ERR_OUT_OF_MEMORY, "Attention: out of memory for %lld x %lld scores", (long long)sq,
                          (long long)sk);
    return KILN_OK;
}

NN_FLOAT_EXEC(kiln_cpu_attention, attention_f32, 1u)
