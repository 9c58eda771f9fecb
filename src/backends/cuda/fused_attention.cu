/* fused_attention.cu — kiln.Attention (ir/fused_ops.h) on the GPU: a flash-attention-style kernel on
 * CUDA cores. A block of 4 warps takes 16 query rows of one output batch index (4 rows per warp) into
 * shared memory, then walks the keys in tiles of 32: K and V tiles go through shared memory (float32),
 * lane j of a warp scores key j against each of its rows (scale, the mask, the causal limit), and an
 * online softmax in float32 (running max and sum per row) rescales the row's accumulators, which
 * each lane keeps for head dims lane, lane + 32, ... . The score matrix is never stored.
 *
 * Semantics follow the CPU kernel (src/backends/cpu/attention.c): batch dims broadcast like numpy,
 * K/V's head axis (batch dim -1) is read through kv_repeat (grouped-query attention, no copies), a
 * float mask is added to the scaled score, a bool mask puts mask_fill where false, then causal sets
 * key j > i + Sk - Sq to -inf. A row whose keys are all -inf gives NaN, as on the CPU.
 * Head dims (D of Q/K, Dv of V) up to AT_DMAX; larger ones are refused at build time. */
#include "backends/cuda/kernel_util.cuh"
#include "ir/fused_ops.h"

#include <math.h>

#define AT_DMAX 128
#define AT_WARPS 4
#define AT_ROWS_PER_WARP 4
#define AT_BQ (AT_WARPS * AT_ROWS_PER_WARP)
#define AT_BK 32

/* How one operand's matrices lie over the output's batch dims: element strides (0 where the operand
 * is broadcast) and the divisor of the head axis (kv_repeat for K and V, else 1). */
typedef struct at_view {
    int64_t strides[KILN_MAX_DIMS];
    int64_t rep;
} at_view;

typedef struct at_args {
    int nb;
    int64_t bdims[KILN_MAX_DIMS], batch;
    at_view q, k, v, m;
    int64_t sq, sk, d, dv, mq, mk;
    float scale, fill;
    int causal, mask_kind; /* mask_kind: 0 none, 1 float (added), 2 bool (mask_fill where false) */
} at_args;

static __device__ __forceinline__ int64_t at_offset(const at_view &v, int nb, const int64_t *bdims, int64_t t) {
    int64_t off = 0;
    for (int i = nb - 1; i >= 0; i--) {
        int64_t c = t % bdims[i];
        t /= bdims[i];
        if (i == nb - 1 && v.rep > 1) c /= v.rep;
        off += c * v.strides[i];
    }
    return off;
}

template <typename T>
__global__ void __launch_bounds__(AT_WARPS * 32) at_kernel(const at_args a, const T *__restrict__ qd, const T *__restrict__ kd,
                                                          const T *__restrict__ vd, const void *__restrict__ md,
                                                          T *__restrict__ od) {
    __shared__ float qs[AT_BQ][AT_DMAX];
    __shared__ float ks[AT_BK][AT_DMAX + 1];
    __shared__ float vs[AT_BK][AT_DMAX];
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int64_t row0 = (int64_t)blockIdx.x * AT_BQ;
    const int d = (int)a.d, dv = (int)a.dv;
    for (int64_t t = blockIdx.y; t < a.batch; t += gridDim.y) {
        const T *qb = qd + at_offset(a.q, a.nb, a.bdims, t), *kb = kd + at_offset(a.k, a.nb, a.bdims, t);
        const T *vb = vd + at_offset(a.v, a.nb, a.bdims, t);
        int64_t mo = a.mask_kind ? at_offset(a.m, a.nb, a.bdims, t) : 0;
        __syncthreads(); /* the previous batch index is done with qs */
        for (int e = tid; e < AT_BQ * d; e += AT_WARPS * 32) {
            int r = e / d, c = e - r * d;
            qs[r][c] = row0 + r < a.sq ? ku_f32(qb[(row0 + r) * a.d + c]) : 0.0f;
        }
        float mrow[AT_ROWS_PER_WARP], lrow[AT_ROWS_PER_WARP], acc[AT_ROWS_PER_WARP][AT_DMAX / 32];
        for (int r = 0; r < AT_ROWS_PER_WARP; r++) {
            mrow[r] = -INFINITY;
            lrow[r] = 0.0f;
            for (int c = 0; c < AT_DMAX / 32; c++) acc[r][c] = 0.0f;
        }
        for (int64_t j0 = 0; j0 < a.sk; j0 += AT_BK) {
            __syncthreads(); /* qs written / the previous tile consumed */
            for (int e = tid; e < AT_BK * d; e += AT_WARPS * 32) {
                int j = e / d, c = e - j * d;
                ks[j][c] = j0 + j < a.sk ? ku_f32(kb[(j0 + j) * a.d + c]) : 0.0f;
            }
            for (int e = tid; e < AT_BK * dv; e += AT_WARPS * 32) {
                int j = e / dv, c = e - j * dv;
                vs[j][c] = j0 + j < a.sk ? ku_f32(vb[(j0 + j) * a.dv + c]) : 0.0f;
            }
            __syncthreads();
            const int64_t key = j0 + lane;
            for (int r = 0; r < AT_ROWS_PER_WARP; r++) {
                const int lr = warp * AT_ROWS_PER_WARP + r;
                const int64_t i = row0 + lr;
                if (i >= a.sq) continue; /* the whole warp skips: i is uniform across it */
                bool valid = key < a.sk;
                float s = -INFINITY;
                if (valid) {
                    float dot = 0.0f;
                    for (int c = 0; c < d; c++) dot = fmaf(qs[lr][c], ks[lane][c], dot);
                    s = a.scale * dot;
                    if (a.mask_kind) {
                        int64_t mi = mo + (a.mq == 1 ? 0 : i * a.mk) + (a.mk == 1 ? 0 : key);
                        if (a.mask_kind == 2) {
                            if (!((const uint8_t *)md)[mi]) s = a.fill;
                        } else {
                            s += ku_f32(((const T *)md)[mi]);
                        }
                    }
                    if (a.causal && key > i + a.sk - a.sq) s = -INFINITY;
                }
                float mnew = fmaxf(mrow[r], ku_warp_max(valid ? s : -INFINITY));
                float p = 0.0f, corr = 1.0f;
                if (mnew != -INFINITY) {
                    p = valid ? __expf(s - mnew) : 0.0f;
                    corr = __expf(mrow[r] - mnew);
                }
                mrow[r] = mnew;
                lrow[r] = lrow[r] * corr + ku_warp_sum(p);
                for (int c = 0; c < AT_DMAX / 32; c++) acc[r][c] *= corr;
                for (int j = 0; j < AT_BK; j++) {
                    float pj = __shfl_sync(0xffffffffu, p, j);
                    for (int c = 0; c < AT_DMAX / 32; c++)
                        if (lane + 32 * c < dv) acc[r][c] = fmaf(pj, vs[j][lane + 32 * c], acc[r][c]);
                }
            }
        }
        for (int r = 0; r < AT_ROWS_PER_WARP; r++) {
            const int64_t i = row0 + warp * AT_ROWS_PER_WARP + r;
            if (i >= a.sq) continue;
            T *orow = od + (t * a.sq + i) * a.dv;
            float inv = 1.0f / lrow[r];
            for (int c = 0; c < AT_DMAX / 32; c++)
                if (lane + 32 * c < dv) orow[lane + 32 * c] = ku_from_f32<T>(acc[r][c] * inv);
        }
    }
}

/* Lays x (rank >= 2; the mask padded with leading 1s to rank 2) over nb batch dims like the CPU's
 * view_of: strides of its own dims (mat elements per matrix), 0 where its dim is 1; its head axis
 * (times rep) merges into bdims. Fails on a batch dim that does not broadcast. */
static kiln_status at_view_of(const kiln_node *n, int ndim, const int64_t *dims, int nb, int64_t rep, int64_t mat,
                              at_view *v, int64_t *bdims, const char *what) {
    int xb = ndim - 2, pad = nb - xb;
    int64_t stride = mat;
    for (int i = nb - 1; i >= 0; i--) {
        int64_t di = i < pad ? 1 : dims[i - pad];
        v->strides[i] = di == 1 && !(i == nb - 1 && rep > 1) ? 0 : stride;
        stride *= di;
        int64_t eff = i == nb - 1 ? di * rep : di;
        if (eff == 1) continue;
        if (bdims[i] != 1 && bdims[i] != eff)
            return kiln_error(KILN_ERR_SHAPE, "%s: batch dim %d of %s is %lld, others have %lld", n->op_type, i, what,
                              (long long)eff, (long long)bdims[i]);
        bdims[i] = eff;
    }
    v->rep = rep;
    return KILN_OK;
}

static kiln_status exec_attention(const kiln_node *n, const kiln_cuda_tensor *in, int nin, const kiln_cuda_tensor *out,
                                  int nout, kiln_cuda_ctx *ctx) {
    if (nin < 3) return kiln_error(KILN_ERR_INVALID_ARGUMENT, "Attention needs Q, K and V");
    const kiln_cuda_tensor *q = &in[0], *k = &in[1], *v = &in[2], *m = nin > 3 && !ku_absent(&in[3]) ? &in[3] : NULL;
    const kiln_cuda_tensor *y = &out[0];
    if (!ku_is_float(q->dtype) || k->dtype != q->dtype || v->dtype != q->dtype || y->dtype != q->dtype)
        return ku_refuse_dtype(n, 0, q->dtype);
    if (m && m->dtype != q->dtype && m->dtype != KILN_BOOL) return ku_refuse_dtype(n, 3, m->dtype);
    at_args a;
    memset(&a, 0, sizeof a);
    int64_t rep = kiln_attr_int(n, "kv_repeat", 1);
    a.scale = kiln_attr_float(n, "scale", 1.0f);
    a.fill = kiln_attr_float(n, "mask_fill", -INFINITY);
    a.causal = kiln_attr_int(n, "causal", 0) != 0;
    if (q->ndim < 2 || k->ndim < 2 || v->ndim < 2 || rep < 1 || (rep > 1 && (k->ndim < 3 || v->ndim < 3)))
        return kiln_error(KILN_ERR_SHAPE, "Attention: Q, K, V need rank >= 2 (>= 3 with kv_repeat %lld), have %d, %d, %d",
                          (long long)rep, q->ndim, k->ndim, v->ndim);
    a.sq = q->dims[q->ndim - 2];
    a.d = q->dims[q->ndim - 1];
    a.sk = k->dims[k->ndim - 2];
    a.dv = v->dims[v->ndim - 1];
    if (k->dims[k->ndim - 1] != a.d || v->dims[v->ndim - 2] != a.sk)
        return kiln_error(KILN_ERR_SHAPE, "Attention: Q, K and V shapes do not fit");
    if (a.d > AT_DMAX || a.dv > AT_DMAX)
        return kiln_error(KILN_ERR_UNSUPPORTED, "Attention (cuda): head dims %lld / %lld; at most %d", (long long)a.d,
                          (long long)a.dv, AT_DMAX);
    int64_t md[KILN_MAX_DIMS] = {1, 1};
    int mr = 2;
    if (m) {
        mr = m->ndim < 2 ? 2 : m->ndim;
        for (int i = 0; i < m->ndim; i++) md[mr - m->ndim + i] = m->dims[i];
        a.mq = md[mr - 2];
        a.mk = md[mr - 1];
        if ((a.mq != 1 && a.mq != a.sq) || (a.mk != 1 && a.mk != a.sk))
            return kiln_error(KILN_ERR_SHAPE, "Attention: the mask's last dims do not fit the scores");
        a.mask_kind = m->dtype == KILN_BOOL ? 2 : 1;
    }
    int rank = q->ndim;
    if (k->ndim > rank) rank = k->ndim;
    if (v->ndim > rank) rank = v->ndim;
    if (m && mr > rank) rank = mr;
    a.nb = rank - 2;
    for (int i = 0; i < a.nb; i++) a.bdims[i] = 1;
    KILN_TRY(at_view_of(n, q->ndim, q->dims, a.nb, 1, a.sq * a.d, &a.q, a.bdims, "Q"));
    KILN_TRY(at_view_of(n, k->ndim, k->dims, a.nb, rep, a.sk * a.d, &a.k, a.bdims, "K"));
    KILN_TRY(at_view_of(n, v->ndim, v->dims, a.nb, rep, a.sk * a.dv, &a.v, a.bdims, "V"));
    if (m) KILN_TRY(at_view_of(n, mr, md, a.nb, 1, a.mq * a.mk, &a.m, a.bdims, "the mask"));
    a.batch = kiln_numel(a.nb, a.bdims);
    if (ku_numel(y) != a.batch * a.sq * a.dv)
        return kiln_error(KILN_ERR_SHAPE, "Attention: the output has %lld elements, expected %lld", (long long)ku_numel(y),
                          (long long)(a.batch * a.sq * a.dv));
    if (a.batch * a.sq * a.dv == 0) return KILN_OK;
    if (a.sk == 0) return kiln_error(KILN_ERR_UNSUPPORTED, "Attention (cuda): no keys");
    int64_t qblocks = (a.sq + AT_BQ - 1) / AT_BQ;
    if (qblocks > INT32_MAX) return kiln_error(KILN_ERR_UNSUPPORTED, "Attention (cuda): %lld queries", (long long)a.sq);
    dim3 grid((unsigned)qblocks, (unsigned)(a.batch < 65535 ? a.batch : 65535));
    const void *mp = m ? m->data : NULL;
    switch (q->dtype) {
    case KILN_F32:
        at_kernel<float><<<grid, AT_WARPS * 32, 0, ctx->stream>>>(a, (const float *)q->data, (const float *)k->data,
                                                                 (const float *)v->data, mp, (float *)y->data);
        break;
    case KILN_F16:
        at_kernel<__half><<<grid, AT_WARPS * 32, 0, ctx->stream>>>(a, (const __half *)q->data, (const __half *)k->data,
                                                                  (const __half *)v->data, mp, (__half *)y->data);
        break;
    default:
        at_kernel<bf16><<<grid, AT_WARPS * 32, 0, ctx->stream>>>(a, (const bf16 *)q->data, (const bf16 *)k->data,
                                                                (const bf16 *)v->data, mp, (bf16 *)y->data);
        break;
    }
    KILN_CUDA_LAUNCH_CHECK("at_kernel");
    return KILN_OK;
}

/* Q, K, V float of one dtype, the mask that dtype or bool, head dims (when known) <= AT_DMAX. */
static kiln_status sup_attention(const kiln_graph *g, const kiln_node *n) {
    const kiln_value *q = ku_in(g, n, 0), *k = ku_in(g, n, 1), *v = ku_in(g, n, 2), *m = ku_in(g, n, 3);
    if (!q || !k || !v) return kiln_error(KILN_ERR_INVALID_ARGUMENT, "Attention needs Q, K and V");
    if (!ku_is_float(q->dtype) || k->dtype != q->dtype || v->dtype != q->dtype)
        return kiln_error(KILN_ERR_UNSUPPORTED, "Attention (cuda): Q, K, V must share one float dtype");
    if (m && m->dtype != q->dtype && m->dtype != KILN_BOOL)
        return kiln_error(KILN_ERR_UNSUPPORTED, "Attention (cuda): a %s mask", kiln_dtype_name(m->dtype));
    int64_t d = q->ndim >= 1 ? q->dims[q->ndim - 1].value : -1, dv = v->ndim >= 1 ? v->dims[v->ndim - 1].value : -1;
    if (d > AT_DMAX || dv > AT_DMAX)
        return kiln_error(KILN_ERR_UNSUPPORTED, "Attention (cuda): head dims %lld / %lld; the kernel takes at most %d",
                          (long long)d, (long long)dv, AT_DMAX);
    return KILN_OK;
}

extern "C" const kiln_cuda_kernel kiln_cuda_kernels_fused_attention[] = {
    {"Attention", KILN_FUSED_DOMAIN, exec_attention, sup_attention},
    {NULL, NULL, NULL, NULL},
};
