/* einsum.c — the CPU Einsum kernel: any equation the parser accepts (explicit or implicit output,
 * ellipsis broadcasting, repeated labels in one operand for diagonals, any number of operands).
 *
 * Every operand is converted to double once; then for each output element the kernel sums, over the
 * contraction labels (labels not in the output), the product of the operands, walking each operand
 * with per-label strides (a label repeated in one operand adds its strides: a diagonal; a size-1
 * dim against a larger label size gets stride 0: broadcasting). Accumulation is in double; the
 * result is converted to the operands' dtype.
 *
 * Two-operand equations whose labels are all batch / row / column / contraction labels (no
 * diagonal, no broadcasting, no label summed out of only one operand) -- "bij,bjk->bik",
 * "bhqd,bhkd->bhqk", "ij,jk" -- are instead permuted into [batch, M, K] x [batch, K, N] and handed to
 * cblas_dgemm per batch, then permuted into the output order. */
#include "backends/cpu/reduce_util.h"

#include "ir/einsum_eq.h"

#include <cblas.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

/* The sum over the contraction space of the product of the operands, starting at offsets base[]. */
static double es_contract(const kiln_einsum_plan *p, const double *const *x, const int64_t *base) {
    int64_t off[KILN_EINSUM_MAX_INPUTS], idx[KILN_EINSUM_MAX_LABELS] = {0};
    memcpy(off, base, (size_t)p->nin * sizeof *off);
    if (p->ncon == 0) {
        double prod = 1;
        for (int k = 0; k < p->nin; k++) prod *= x[k][off[k]];
        return prod;
    }
    int last = p->ncon - 1;
    int64_t n_last = p->con_size[last], nruns = 1;
    for (int c = 0; c < last; c++) nruns *= p->con_size[c];
    double sum = 0;
    for (int64_t r = 0; r < nruns; r++) {
        /* the innermost contraction label as a tight loop */
        if (p->nin == 1) {
            const double *a = x[0] + off[0];
            int64_t sa = p->con_stride[0][last];
            for (int64_t j = 0; j < n_last; j++) sum += a[j * sa];
        } else if (p->nin == 2) {
            const double *a = x[0] + off[0], *b = x[1] + off[1];
            int64_t sa = p->con_stride[0][last], sb = p->con_stride[1][last];
            for (int64_t j = 0; j < n_last; j++) sum += a[j * sa] * b[j * sb];
        } else {
            for (int64_t j = 0; j < n_last; j++) {
                double prod = 1;
                for (int k = 0; k < p->nin; k++) prod *= x[k][off[k] + j * p->con_stride[k][last]];
                sum += prod;
            }
        }
        for (int c = last - 1; c >= 0; c--) {
            for (int k = 0; k < p->nin; k++) off[k] += p->con_stride[k][c];
            if (++idx[c] < p->con_size[c]) break;
            for (int k = 0; k < p->nin; k++) off[k] -= p->con_stride[k][c] * p->con_size[c];
            idx[c] = 0;
        }
    }
    return sum;
}

/* dst (dense) = src viewed through nl loops of sizes[] and element strides[] (outermost first). */
static void es_gather(const double *src, int nl, const int64_t *sizes, const int64_t *strides, double *dst) {
    int64_t idx[KILN_EINSUM_MAX_LABELS] = {0}, off = 0, total = 1;
    for (int i = 0; i < nl; i++) total *= sizes[i];
    for (int64_t o = 0; o < total; o++) {
        dst[o] = src[off];
        for (int i = nl - 1; i >= 0; i--) {
            off += strides[i];
            if (++idx[i] < sizes[i]) break;
            off -= strides[i] * sizes[i];
            idx[i] = 0;
        }
    }
}

/* Label classes of the GEMM form. */
enum { ES_BATCH, ES_M, ES_N, ES_K, ES_NCLASS };

/* Computes res (the output, dense in output label order) as batched GEMM when the two-operand
 * equation has that form; returns false (having done nothing) when it does not, or on out of
 * memory, so that the caller falls back to the loops. */
static bool es_try_gemm(const kiln_einsum_eq *eq, kiln_tensor *const *in, const double *const *x, double *res) {
    if (eq->ninputs != 2) return false;
    int64_t size[KILN_EINSUM_MAX_LABELS], lstride[2][KILN_EINSUM_MAX_LABELS] = {{0}};
    int where[KILN_EINSUM_MAX_LABELS] = {0}; /* bit 0: operand A, bit 1: operand B, bit 2: output */
    for (int k = 0; k < 2; k++) {
        int64_t st[KILN_MAX_DIMS];
        kiln_strides(in[k]->ndim, in[k]->dims, st);
        for (int d = 0; d < eq->in_rank[k]; d++) {
            int l = eq->in_label[k][d];
            if (where[l] & (1 << k)) return false; /* a diagonal */
            if (where[l] && size[l] != in[k]->dims[d]) return false; /* broadcasting */
            where[l] |= 1 << k;
            size[l] = in[k]->dims[d];
            lstride[k][l] = st[d];
        }
    }
    for (int d = 0; d < eq->out_rank; d++) where[eq->out_label[d]] |= 4;
    int lab[ES_NCLASS][KILN_EINSUM_MAX_LABELS], nlab[ES_NCLASS] = {0};
    int64_t dim[ES_NCLASS] = {1, 1, 1, 1};
    /* batch, M and N labels in output order; K labels in A's order */
    for (int d = 0; d < eq->out_rank; d++) {
        int l = eq->out_label[d], cls = where[l] == 7 ? ES_BATCH : where[l] == 5 ? ES_M : ES_N;
        lab[cls][nlab[cls]++] = l;
        dim[cls] *= size[l];
    }
    for (int d = 0; d < eq->in_rank[0]; d++) {
        int l = eq->in_label[0][d];
        if (where[l] == 3) {
            lab[ES_K][nlab[ES_K]++] = l;
            dim[ES_K] *= size[l];
        } else if (!(where[l] & 4)) {
            return false;
        }
    }
    for (int d = 0; d < eq->in_rank[1]; d++)
        if (!(where[eq->in_label[1][d]] & 4) && where[eq->in_label[1][d]] != 3) return false;
    for (int cls = 0; cls < ES_NCLASS; cls++)
        if (dim[cls] == 0 || dim[cls] > INT_MAX) return false; /* empty sizes: the loops handle them */

    int64_t na = dim[ES_BATCH] * dim[ES_M] * dim[ES_K], nb = dim[ES_BATCH] * dim[ES_K] * dim[ES_N];
    int64_t nc = dim[ES_BATCH] * dim[ES_M] * dim[ES_N];
    double *a = malloc((size_t)(na + nb + nc) * sizeof *a);
    if (!a) return false;
    double *b = a + na, *c = b + nb;
    /* A as [batch, M, K], B as [batch, K, N] */
    int order_a[3] = {ES_BATCH, ES_M, ES_K}, order_b[3] = {ES_BATCH, ES_K, ES_N};
    int64_t sizes[KILN_EINSUM_MAX_LABELS], strides[KILN_EINSUM_MAX_LABELS];
    for (int k = 0; k < 2; k++) {
        int nl = 0;
        for (int o = 0; o < 3; o++) {
            int cls = (k ? order_b : order_a)[o];
            for (int i = 0; i < nlab[cls]; i++) {
                sizes[nl] = size[lab[cls][i]];
                strides[nl++] = lstride[k][lab[cls][i]];
            }
        }
        es_gather(x[k], nl, sizes, strides, k ? b : a);
    }
    int m = (int)dim[ES_M], n = (int)dim[ES_N], kk = (int)dim[ES_K];
    for (int64_t bt = 0; bt < dim[ES_BATCH]; bt++)
        cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, m, n, kk, 1.0, a + bt * m * kk, kk, b + bt * kk * n, n,
                    0.0, c + bt * m * n, n);
    /* C is [batch labels, M labels, N labels]; read it in output label order */
    int64_t cstride[KILN_EINSUM_MAX_LABELS], s = 1;
    for (int cls = ES_N; cls >= ES_BATCH; cls--)
        for (int i = nlab[cls] - 1; i >= 0; i--) {
            cstride[lab[cls][i]] = s;
            s *= size[lab[cls][i]];
        }
    for (int d = 0; d < eq->out_rank; d++) {
        sizes[d] = size[eq->out_label[d]];
        strides[d] = cstride[eq->out_label[d]];
    }
    es_gather(c, eq->out_rank, sizes, strides, res);
    free(a);
    return true;
}

kiln_status kiln_cpu_einsum(const kiln_node *n, kiln_tensor *const *in, int nin, kiln_tensor *const *out, int nout) {
    (void)nout;
    const char *equation = kiln_attr_string(n, "equation", NULL);
    if (!equation) return kiln_error(KILN_ERR_INVALID_ARGUMENT, "%s: attribute 'equation' is required", n->op_type);
    if (nin < 1 || nin > KILN_EINSUM_MAX_INPUTS)
        return kiln_error(KILN_ERR_UNSUPPORTED, "%s: %d operands (1 to %d are supported)", n->op_type, nin,
                          KILN_EINSUM_MAX_INPUTS);
    int ranks[KILN_EINSUM_MAX_INPUTS];
    for (int k = 0; k < nin; k++) {
        KILN_TRY(kiln_red_need(n, in, nin, k, "Inputs"));
        if (!kiln_red_is_numeric(in[k]->dtype) || in[k]->dtype == KILN_BOOL) return kiln_red_unsupported(n, in[k]->dtype);
        if (in[k]->dtype != in[0]->dtype)
            return kiln_error(KILN_ERR_INVALID_ARGUMENT, "%s: operands have different types (%s and %s)", n->op_type,
                              kiln_dtype_name(in[0]->dtype), kiln_dtype_name(in[k]->dtype));
        ranks[k] = in[k]->ndim;
    }
    kiln_einsum_eq eq;
    KILN_TRY(kiln_einsum_parse(equation, nin, ranks, &eq));
    const int64_t *dims[KILN_EINSUM_MAX_INPUTS];
    for (int k = 0; k < nin; k++) dims[k] = in[k]->dims;
    kiln_einsum_plan p;
    KILN_TRY(kiln_einsum_plan_build(n->op_type, &eq, dims, &p));
    KILN_TRY(kiln_tensor_alloc(out[0], in[0]->dtype, p.nout, p.out_size));
    int64_t onumel = kiln_tensor_numel(out[0]);
    if (onumel == 0) return KILN_OK;

    /* operands as double, then the result (also double) */
    size_t total = (size_t)onumel;
    for (int k = 0; k < nin; k++) total += (size_t)kiln_tensor_numel(in[k]);
    double *mem = malloc(total * sizeof *mem), *x[KILN_EINSUM_MAX_INPUTS];
    if (!mem) return kiln_error(KILN_ERR_OUT_OF_MEMORY, "%s: out of memory", n->op_type);
    double *res = mem, *q = mem + onumel;
    for (int k = 0; k < nin; k++) {
        x[k] = q;
        kiln_red_load_f64(in[k], 0, kiln_tensor_numel(in[k]), q);
        q += kiln_tensor_numel(in[k]);
    }
    if (es_try_gemm(&eq, in, (const double *const *)x, res)) {
        kiln_red_store_f64(out[0], 0, onumel, res);
        free(mem);
        return KILN_OK;
    }
    bool empty_con = false;
    for (int c = 0; c < p.ncon; c++) empty_con |= p.con_size[c] == 0;
    int64_t base[KILN_EINSUM_MAX_INPUTS] = {0}, idx[KILN_MAX_DIMS] = {0};
    for (int64_t o = 0; o < onumel; o++) {
        res[o] = empty_con ? 0 : es_contract(&p, (const double *const *)x, base);
        for (int d = p.nout - 1; d >= 0; d--) {
            for (int k = 0; k < nin; k++) base[k] += p.out_stride[k][d];
            if (++idx[d] < p.out_size[d]) break;
            for (int k = 0; k < nin; k++) base[k] -= p.out_stride[k][d] * p.out_size[d];
            idx[d] = 0;
        }
    }
    kiln_red_store_f64(out[0], 0, onumel, res);
    free(mem);
    return KILN_OK;
}
