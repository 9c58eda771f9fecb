/* einsum.cu — CUDA kernel of Einsum, with the CPU kernel's semantics (src/backends/cpu/einsum.c): any
 * equation the shared parser accepts (ir/einsum_eq.h: explicit or implicit output, ellipsis
 * broadcasting, diagonals), on float32/float16/bfloat16 (float32 accumulation) and int32/int64
 * (int64 accumulation).
 *
 * A two-operand float equation that is a batched matrix product as laid out — every label a batch
 * (both operands and the output), row (left and output), column (right and output) or contraction
 * label (both operands only); no diagonal or broadcasting; each operand ordered [batch, rows,
 * contraction] or [batch, contraction, rows] (a transpose cuBLASLt takes), the output [batch, M, N]
 * or [batch, N, M] (the operands swapped), not only dot products — runs as one strided-batched cuBLASLt product
 * (matmul.cuh): "bij,bjk->bik", "bhid,bhjd->bhij", "ji,jk->ik". Any other equation (or one needing
 * an operand permuted first) runs the generic kernel: one thread per output element sums, over the
 * contraction labels, the product of the operands, walking each operand with the label strides of
 * kiln_einsum_plan_build (shared with the CPU); at most ES_MAX_IN operands and ES_MAX_CON
 * contraction labels. */
#include "backends/cuda/kernel_util.cuh"
#include "backends/cuda/matmul.cuh"

extern "C" {
#include "ir/einsum_eq.h"
}

#define ES_MAX_IN 4
#define ES_MAX_CON 16

/* kiln_einsum_plan cut to the kernel's limits (it travels as a kernel parameter). */
typedef struct es_args {
    int nin, nout, ncon;
    int64_t out_size[KILN_MAX_DIMS], con_size[ES_MAX_CON];
    int64_t out_stride[ES_MAX_IN][KILN_MAX_DIMS];
    int64_t con_stride[ES_MAX_IN][ES_MAX_CON];
    const void *x[ES_MAX_IN];
} es_args;

/* The accumulator of storage type T: float for the float types, int64 for the integers. */
template <typename T> struct es_acc { typedef float type; };
template <> struct es_acc<int32_t> { typedef int64_t type; };
template <> struct es_acc<int64_t> { typedef int64_t type; };

/* An operand element as the accumulator type A (selected by the dummy second argument), and back. */
template <typename T> static __device__ __forceinline__ float es_load(const T *p, float) { return ku_f32(*p); }
template <typename T> static __device__ __forceinline__ int64_t es_load(const T *p, int64_t) { return (int64_t)*p; }
template <typename T> static __device__ __forceinline__ T es_store_acc(int64_t v) { return (T)v; }
template <typename T> static __device__ __forceinline__ T es_store_acc(float v) { return ku_from_f32<T>(v); }

/* y[i] = sum over the ncombos contraction indices of the product of the operands. */
template <typename T>
__global__ void es_kernel(es_args p, T *__restrict__ y, int64_t total, int64_t ncombos) {
    typedef typename es_acc<T>::type A;
    const T *x[ES_MAX_IN];
    for (int k = 0; k < p.nin; k++) x[k] = (const T *)p.x[k];
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += (int64_t)gridDim.x * blockDim.x) {
        int64_t base[ES_MAX_IN] = {0}, rem = i;
        for (int d = p.nout - 1; d >= 0; d--) {
            int64_t c = rem % p.out_size[d];
            rem /= p.out_size[d];
            for (int k = 0; k < p.nin; k++) base[k] += c * p.out_stride[k][d];
        }
        A sum = 0;
        int64_t idx[ES_MAX_CON] = {0}, off[ES_MAX_IN];
        for (int k = 0; k < p.nin; k++) off[k] = base[k];
        for (int64_t r = 0; r < ncombos; r++) {
            A prod = 1;
            for (int k = 0; k < p.nin; k++) prod *= es_load(x[k] + off[k], A());
            sum += prod;
            for (int c = p.ncon - 1; c >= 0; c--) { /* odometer over the contraction labels */
                for (int k = 0; k < p.nin; k++) off[k] += p.con_stride[k][c];
                if (++idx[c] < p.con_size[c]) break;
                for (int k = 0; k < p.nin; k++) off[k] -= p.con_stride[k][c] * p.con_size[c];
                idx[c] = 0;
            }
        }
        y[i] = es_store_acc<T>(sum);
    }
}

template <typename T>
static kiln_status es_launch(kiln_cuda_ctx *ctx, const es_args &p, void *y, int64_t total, int64_t ncombos) {
    es_kernel<T><<<ku_blocks(total, KU_THREADS, ctx, 4), KU_THREADS, 0, ctx->stream>>>(p, (T *)y, total, ncombos);
    KILN_CUDA_LAUNCH_CHECK("es_kernel");
    return KILN_OK;
}

/* ---------------------------------------------------------------- the cuBLASLt path */

/* Labels of one kind in a sequence, and their size product. */
typedef struct es_group {
    int n, l[KILN_MAX_DIMS];
    int64_t size;
} es_group;

/* Whether seq[0..len) is the concatenation of groups g0, g1, g2. */
static bool es_is_concat(const int *seq, int len, const es_group *g0, const es_group *g1, const es_group *g2) {
    const es_group *gs[3] = {g0, g1, g2};
    int p = 0;
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < gs[i]->n; j++, p++)
            if (p >= len || seq[p] != gs[i]->l[j]) return false;
    return p == len;
}

static void es_add(es_group *g, int l, int64_t size) {
    g->l[g->n++] = l;
    g->size *= size;
}

/* Runs the equation as one cuBLASLt product when it has that form (see the top of the file); *done
 * says whether it did. */
static kiln_status es_try_gemm(const kiln_node *n, kiln_cuda_ctx *ctx, const kiln_einsum_eq *eq,
                               const kiln_cuda_tensor *in, const kiln_cuda_tensor *y, bool *done) {
    *done = false;
    if (eq->ninputs != 2 || !ku_is_float(y->dtype) || in[0].dtype != y->dtype || in[1].dtype != y->dtype) return KILN_OK;
    int where[KILN_EINSUM_MAX_LABELS] = {0}; /* bit 0: left, 1: right, 2: output */
    int64_t size[KILN_EINSUM_MAX_LABELS];
    for (int k = 0; k < 2; k++)
        for (int d = 0; d < eq->in_rank[k]; d++) {
            int l = eq->in_label[k][d];
            if (where[l] & (1 << k)) return KILN_OK; /* a diagonal */
            if (where[l] && size[l] != in[k].dims[d]) return KILN_OK; /* broadcasting */
            where[l] |= 1 << k;
            size[l] = in[k].dims[d];
            if (size[l] == 0) return KILN_OK;
        }
    es_group b = {0, {0}, 1}, m = {0, {0}, 1}, nn = {0, {0}, 1}, kk = {0, {0}, 1};
    for (int d = 0; d < eq->out_rank; d++) {
        int l = eq->out_label[d];
        where[l] |= 4;
        if (where[l] == 7) es_add(&b, l, size[l]);
        else if (where[l] == 5) es_add(&m, l, size[l]);
        else es_add(&nn, l, size[l]);
    }
    for (int d = 0; d < eq->in_rank[0]; d++) {
        int l = eq->in_label[0][d];
        if (where[l] == 3) es_add(&kk, l, size[l]);
        else if (where[l] == 1) return KILN_OK; /* summed out of one operand only */
    }
    for (int d = 0; d < eq->in_rank[1]; d++)
        if (where[eq->in_label[1][d]] == 2) return KILN_OK;
    const int *la = eq->in_label[0], *lb = eq->in_label[1];
    int ra = eq->in_rank[0], rb = eq->in_rank[1];
    bool ta = es_is_concat(la, ra, &b, &kk, &m), tb = es_is_concat(lb, rb, &b, &nn, &kk);
    if (!ta && !es_is_concat(la, ra, &b, &m, &kk)) return KILN_OK;
    if (!tb && !es_is_concat(lb, rb, &b, &kk, &nn)) return KILN_OK;
    bool direct = es_is_concat(eq->out_label, eq->out_rank, &b, &m, &nn);
    if (!direct && !es_is_concat(eq->out_label, eq->out_rank, &b, &nn, &m)) return KILN_OK;
    if (b.size > INT32_MAX || m.size > INT32_MAX || nn.size > INT32_MAX || kk.size > INT32_MAX) return KILN_OK;
    if (m.size == 1 && nn.size == 1) return KILN_OK; /* dot products: the generic kernel */
    *done = true;
    if (direct)
        return kiln_cuda_matmul_batched(n, ctx, y->dtype, b.size, m.size, nn.size, kk.size, in[0].data, ta, in[1].data,
                                        tb, y->data);
    /* Y^T = B^T A^T: the right operand becomes the left one, each transposed the other way */
    return kiln_cuda_matmul_batched(n, ctx, y->dtype, b.size, nn.size, m.size, kk.size, in[1].data, !tb, in[0].data,
                                    !ta, y->data);
}

/* ---------------------------------------------------------------- exec */

static kiln_status einsum_run(const kiln_node *n, const kiln_cuda_tensor *in, int nin, const kiln_cuda_tensor *out,
                              int nout, kiln_cuda_ctx *ctx) {
    const char *equation = kiln_attr_string(n, "equation", NULL);
    if (!equation) return kiln_error(KILN_ERR_INVALID_ARGUMENT, "%s: attribute 'equation' is required", n->op_type);
    int ranks[ES_MAX_IN];
    const int64_t *dims[ES_MAX_IN];
    for (int k = 0; k < nin; k++) {
        ranks[k] = in[k].ndim;
        dims[k] = in[k].dims;
    }
    kiln_einsum_eq eq;
    KILN_TRY(kiln_einsum_parse(equation, nin, ranks, &eq));
    kiln_einsum_plan plan;
    KILN_TRY(kiln_einsum_plan_build(n->op_type, &eq, dims, &plan));
    if (plan.ncon > ES_MAX_CON)
        return kiln_error(KILN_ERR_UNSUPPORTED, "%s (cuda): %d contraction labels (at most %d)", n->op_type, plan.ncon,
                          ES_MAX_CON);
    int64_t total = ku_numel(&out[0]), ncombos = 1;
    if (total == 0) return KILN_OK;
    bool done;
    KILN_TRY(es_try_gemm(n, ctx, &eq, in, &out[0], &done));
    if (done) return KILN_OK;
    es_args p;
    memset(&p, 0, sizeof p);
    p.nin = plan.nin;
    p.nout = plan.nout;
    p.ncon = plan.ncon;
    memcpy(p.out_size, plan.out_size, sizeof p.out_size);
    for (int c = 0; c < plan.ncon; c++) {
        p.con_size[c] = plan.con_size[c];
        ncombos *= plan.con_size[c];
    }
    for (int k = 0; k < nin; k++) {
        p.x[k] = in[k].data;
        memcpy(p.out_stride[k], plan.out_stride[k], sizeof p.out_stride[k]);
        for (int c = 0; c < plan.ncon; c++) p.con_stride[k][c] = plan.con_stride[k][c];
    }
    switch (out[0].dtype) {
    case KILN_F32: return es_launch<float>(ctx, p, out[0].data, total, ncombos);
    case KILN_F16: return es_launch<__half>(ctx, p, out[0].data, total, ncombos);
    case KILN_BF16: return es_launch<bf16>(ctx, p, out[0].data, total, ncombos);
    case KILN_I32: return es_launch<int32_t>(ctx, p, out[0].data, total, ncombos);
    default: return es_launch<int64_t>(ctx, p, out[0].data, total, ncombos);
    }
}

/* 1 to ES_MAX_IN operands of one dtype: float32/float16/bfloat16, int32 or int64. */
static kiln_status einsum_supports(const kiln_graph *g, const kiln_node *n) {
    if (n->ninputs < 1 || n->ninputs > ES_MAX_IN)
        return kiln_error(KILN_ERR_UNSUPPORTED, "%s (cuda): %d operands (1 to %d are supported)", n->op_type, n->ninputs,
                          ES_MAX_IN);
    const kiln_value *x0 = ku_in(g, n, 0);
    for (int k = 0; k < n->ninputs; k++) {
        const kiln_value *x = ku_in(g, n, k);
        if (!x) return kiln_error(KILN_ERR_INVALID_ARGUMENT, "%s: operand %d is missing", n->op_type, k);
        if (!ku_is_float(x->dtype) && x->dtype != KILN_I32 && x->dtype != KILN_I64) return ku_refuse_dtype(n, k, x->dtype);
        if (x->dtype != x0->dtype) return ku_refuse_dtype(n, k, x->dtype);
    }
    return KILN_OK;
}

extern "C" const kiln_cuda_kernel kiln_cuda_kernels_einsum[] = {
    {"Einsum", "", einsum_run, einsum_supports},
    {NULL, NULL, NULL, NULL},
};
