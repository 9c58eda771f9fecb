/* reduce.c — CPU kernels for the Reduce* ops (Sum, Mean, Prod, Max, Min, L1, L2, LogSum, LogSumExp,
 * SumSquare) and the reduce family's kernel table (the other kernels of the family live in
 * reduce_index.c, generate.c and einsum.c).
 *
 * A reduction is planned once per call: dims of size 1 are dropped and neighbouring dims that are
 * both reduced or both kept are merged, so the input is walked once, in memory order, as runs of its
 * innermost merged dim. Each run is converted to a small scratch of the accumulator type and folded
 * into the output accumulators: float inputs accumulate in double, integer inputs in int64 with
 * two's-complement wrap-around (as a C integer type of that width would), so large sums stay
 * accurate and exact. */
#include "backends/cpu/reduce_util.h"
#include "ir/reduce_axes.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef enum red_op {
    RED_SUM, RED_MEAN, RED_PROD, RED_MAX, RED_MIN, RED_L1, RED_L2, RED_LOGSUM, RED_LSE, RED_SUMSQ,
    RED_LSE_MAX, /* first pass of LogSumExp: the largest finite value (the shift) */
} red_op;

#define RED_CHUNK 256

/* The input walked as merged dims; out_stride is 0 on reduced dims. */
typedef struct red_plan {
    int nd;
    int64_t dims[KILN_MAX_DIMS], out_stride[KILN_MAX_DIMS];
    bool reduced[KILN_MAX_DIMS];
} red_plan;

/* Per-call state of one fold over the input. */
typedef struct red_ctx {
    const kiln_tensor *x;
    red_op op;
    bool is_unsigned;     /* integer path: compare as uint64 */
    double *facc;         /* float path accumulators (one per output element) */
    const double *shift;  /* LogSumExp second pass: the per-output shift */
    int64_t *iacc;        /* integer path accumulators */
} red_ctx;

/* Builds the merged walk of a tensor of shape dims[rank] reducing the axes flagged in reduce[]. */
static void plan_build(int rank, const int64_t *dims, const bool *reduce, red_plan *p) {
    int64_t kept_dims[KILN_MAX_DIMS];
    p->nd = 0;
    for (int d = 0; d < rank; d++) {
        if (dims[d] == 1) continue;
        if (p->nd > 0 && p->reduced[p->nd - 1] == reduce[d]) {
            p->dims[p->nd - 1] *= dims[d];
        } else {
            p->reduced[p->nd] = reduce[d];
            p->dims[p->nd++] = dims[d];
        }
    }
    int64_t s = 1;
    for (int d = p->nd - 1; d >= 0; d--) {
        kept_dims[d] = p->reduced[d] ? 1 : p->dims[d];
        p->out_stride[d] = p->reduced[d] ? 0 : s;
        s *= kept_dims[d];
    }
}

/* Folds a run of n float-path values into the accumulators. */
static void fold_f64(red_ctx *c, int64_t in_off, int64_t n, int64_t out_off, bool reduced) {
    double buf[RED_CHUNK];
    for (int64_t s = 0; s < n; s += RED_CHUNK) {
        int64_t m = n - s < RED_CHUNK ? n - s : RED_CHUNK;
        kiln_red_load_f64(c->x, in_off + s, m, buf);
        double *acc = c->facc + out_off + (reduced ? 0 : s);
        const double *sh = c->shift ? c->shift + out_off + (reduced ? 0 : s) : NULL;
        /* EXPR folds value x into accumulator a (h: the LogSumExp shift). A reduced run keeps four
         * partial accumulators (lanes 1..3 start at the identity IDENT, COMB merges a lane x into a)
         * so that the loop is not one long chain of dependent adds. */
#define FOLD(EXPR, IDENT, COMB)                                                                    \
    if (reduced) {                                                                                 \
        double l[4] = {acc[0], IDENT, IDENT, IDENT}, h = sh ? sh[0] : 0;                           \
        (void)h;                                                                                   \
        int64_t j = 0;                                                                             \
        for (; j + 4 <= m; j += 4)                                                                 \
            for (int q = 0; q < 4; q++) { double x = buf[j + q], a = l[q]; l[q] = (EXPR); }       \
        for (; j < m; j++) { double x = buf[j], a = l[0]; l[0] = (EXPR); }                         \
        for (int q = 1; q < 4; q++) { double a = l[0], x = l[q]; l[0] = (COMB); }                  \
        acc[0] = l[0];                                                                             \
    } else {                                                                                       \
        for (int64_t j = 0; j < m; j++) { double x = buf[j], a = acc[j], h = sh ? sh[j] : 0; (void)h; acc[j] = (EXPR); } \
    }                                                                                              \
    break;
        switch (c->op) {
        case RED_SUM: case RED_MEAN: case RED_LOGSUM: FOLD(a + x, 0.0, a + x)
        case RED_SUMSQ: case RED_L2: FOLD(a + x * x, 0.0, a + x)
        case RED_L1: FOLD(a + fabs(x), 0.0, a + x)
        case RED_PROD: FOLD(a * x, 1.0, a * x)
        case RED_MAX: FOLD((x > a || x != x) ? x : a, -INFINITY, (x > a || x != x) ? x : a)
        case RED_MIN: FOLD((x < a || x != x) ? x : a, INFINITY, (x < a || x != x) ? x : a)
        case RED_LSE_MAX: FOLD((isfinite(x) && x > a) ? x : a, -INFINITY, (isfinite(x) && x > a) ? x : a)
        case RED_LSE: FOLD(a + exp(x - h), 0.0, a + x)
        }
#undef FOLD
    }
}

/* Folds a run of n integer-path values into the accumulators (sums and products wrap). */
static void fold_i64(red_ctx *c, int64_t in_off, int64_t n, int64_t out_off, bool reduced) {
    int64_t buf[RED_CHUNK];
    for (int64_t s = 0; s < n; s += RED_CHUNK) {
        int64_t m = n - s < RED_CHUNK ? n - s : RED_CHUNK;
        kiln_red_load_i64(c->x, in_off + s, m, buf);
        int64_t *acc = c->iacc + out_off + (reduced ? 0 : s);
#define FOLD(EXPR)                                                                                 \
    if (reduced) {                                                                                 \
        uint64_t a = (uint64_t)acc[0];                                                             \
        for (int64_t j = 0; j < m; j++) { uint64_t x = (uint64_t)buf[j]; a = (EXPR); }             \
        acc[0] = (int64_t)a;                                                                       \
    } else {                                                                                       \
        for (int64_t j = 0; j < m; j++) { uint64_t x = (uint64_t)buf[j], a = (uint64_t)acc[j]; acc[j] = (int64_t)(EXPR); } \
    }                                                                                              \
    break;
        if (c->is_unsigned) {
            switch (c->op) {
            case RED_MAX: FOLD(x > a ? x : a)
            case RED_MIN: FOLD(x < a ? x : a)
            case RED_L1: FOLD(a + x)
            default: break;
            }
        } else {
            switch (c->op) {
            case RED_MAX: FOLD((int64_t)x > (int64_t)a ? x : a)
            case RED_MIN: FOLD((int64_t)x < (int64_t)a ? x : a)
            case RED_L1: FOLD(a + ((int64_t)x < 0 ? (uint64_t)0 - x : x))
            default: break;
            }
        }
        switch (c->op) {
        case RED_SUM: case RED_MEAN: FOLD(a + x)
        case RED_SUMSQ: case RED_L2: FOLD(a + x * x)
        case RED_PROD: FOLD(a * x)
        default: break;
        }
#undef FOLD
    }
}

/* Walks the input in memory order and folds every innermost run (float or integer path). */
static void plan_walk(const red_plan *p, red_ctx *c, bool float_path) {
    if (p->nd == 0) { /* a single element */
        if (float_path) fold_f64(c, 0, 1, 0, true);
        else fold_i64(c, 0, 1, 0, true);
        return;
    }
    int last = p->nd - 1;
    int64_t idx[KILN_MAX_DIMS] = {0}, run = p->dims[last], in_off = 0, out_off = 0;
    int64_t nruns = 1;
    for (int d = 0; d < last; d++) nruns *= p->dims[d];
    for (int64_t r = 0; r < nruns; r++) {
        if (float_path) fold_f64(c, in_off, run, out_off, p->reduced[last]);
        else fold_i64(c, in_off, run, out_off, p->reduced[last]);
        in_off += run;
        for (int d = last - 1; d >= 0; d--) {
            out_off += p->out_stride[d];
            if (++idx[d] < p->dims[d]) break;
            out_off -= p->out_stride[d] * p->dims[d];
            idx[d] = 0;
        }
    }
}

/* The initial accumulator of an integer-path reduction (the identity for an empty reduction). */
static int64_t int_identity(red_op op, kiln_dtype t) {
    int bits = (int)kiln_dtype_size(t) * 8;
    bool uns = kiln_red_is_unsigned_int(t) || t == KILN_BOOL;
    switch (op) {
    case RED_PROD: return 1;
    case RED_MAX:
        if (uns) return 0;
        return bits == 64 ? INT64_MIN : -(INT64_C(1) << (bits - 1));
    case RED_MIN:
        if (t == KILN_BOOL) return 1;
        if (uns) return bits == 64 ? (int64_t)UINT64_MAX : (INT64_C(1) << bits) - 1;
        return bits == 64 ? INT64_MAX : (INT64_C(1) << (bits - 1)) - 1;
    default: return 0;
    }
}

/* Reads the node's axes (input 1 from opset `since`, else the attribute) into reduce[]. Empty axes
 * mean all axes, or none when noop_with_empty_axes is set: every element is then reduced on its own
 * (so ReduceSumSquare still squares, as the ONNX reference and onnxruntime do). */
static kiln_status reduce_axes(const kiln_node *n, kiln_tensor *const *in, int nin, int rank, int since,
                               bool *reduce) {
    int64_t axes[KILN_MAX_DIMS + 1];
    int count = 0;
    if (n->opset >= since) {
        if (nin > 1 && in[1]) KILN_TRY(kiln_red_read_ints(n, in[1], "axes", axes, KILN_MAX_DIMS + 1, &count));
    } else {
        const int64_t *a = kiln_attr_ints(n, "axes", &count);
        if (count > KILN_MAX_DIMS)
            return kiln_error(KILN_ERR_INVALID_ARGUMENT, "%s: %d axes for a tensor of rank %d", n->op_type, count, rank);
        if (count) memcpy(axes, a, (size_t)count * sizeof *a);
    }
    return kiln_reduce_axes_mask(n, axes, count, rank, reduce);
}

/* The whole Reduce* kernel: op selects the math; since is the opset from which axes are an input. */
static kiln_status reduce_exec(const kiln_node *n, kiln_tensor *const *in, int nin, kiln_tensor *const *out,
                               red_op op, int since) {
    KILN_TRY(kiln_red_need(n, in, nin, 0, "data"));
    const kiln_tensor *x = in[0];
    kiln_dtype t = x->dtype;
    bool minmax = op == RED_MAX || op == RED_MIN;
    if (!kiln_red_is_numeric(t) || (t == KILN_BOOL && !minmax)) return kiln_red_unsupported(n, t);
    bool reduce[KILN_MAX_DIMS];
    KILN_TRY(reduce_axes(n, in, nin, x->ndim, since, reduce));

    bool keepdims = kiln_attr_int(n, "keepdims", 1) != 0;
    int ond = 0;
    int64_t odims[KILN_MAX_DIMS], count = 1;
    for (int d = 0; d < x->ndim; d++) {
        if (reduce[d]) count *= x->dims[d];
        if (!reduce[d]) odims[ond++] = x->dims[d];
        else if (keepdims) odims[ond++] = 1;
    }
    KILN_TRY(kiln_tensor_alloc(out[0], t, ond, odims));
    int64_t nout = kiln_tensor_numel(out[0]);
    if (nout == 0) return KILN_OK;

    red_plan p;
    plan_build(x->ndim, x->dims, reduce, &p);
    bool float_path = kiln_red_is_float(t) || op == RED_LOGSUM || op == RED_LSE;
    bool empty = kiln_tensor_numel(x) == 0;
    red_ctx c = {.x = x, .op = op, .is_unsigned = kiln_red_is_unsigned_int(t) || t == KILN_BOOL};
    void *acc = malloc((size_t)nout * 8 * (op == RED_LSE ? 2 : 1));
    if (!acc)
        return kiln_error(KILN_ERR_OUT_OF_MEMORY, "%s: out of memory for %lld accumulators", n->op_type,
                          (long long)nout);

    if (float_path) {
        double *a = acc, init = op == RED_PROD ? 1.0 : op == RED_MAX ? -INFINITY : op == RED_MIN ? INFINITY : 0.0;
        c.facc = a;
        if (op == RED_LSE) { /* pass 1: per-output shift = largest finite value (0 when none) */
            double *shift = a + nout;
            for (int64_t i = 0; i < nout; i++) shift[i] = -INFINITY;
            c.facc = shift;
            c.op = RED_LSE_MAX;
            if (!empty) plan_walk(&p, &c, true);
            for (int64_t i = 0; i < nout; i++)
                if (shift[i] == -INFINITY) shift[i] = 0;
            c.facc = a;
            c.shift = shift;
            c.op = RED_LSE;
        }
        for (int64_t i = 0; i < nout; i++) a[i] = init;
        if (!empty) plan_walk(&p, &c, true);
        for (int64_t i = 0; i < nout; i++) {
            switch (op) {
            case RED_MEAN: a[i] /= (double)count; break;
            case RED_L2: a[i] = sqrt(a[i]); break;
            case RED_LOGSUM: a[i] = log(a[i]); break;
            case RED_LSE: a[i] = log(a[i]) + c.shift[i]; break;
            default: break;
            }
        }
        kiln_red_store_f64(out[0], 0, nout, a);
    } else {
        int64_t *a = acc, init = int_identity(op, t);
        c.iacc = a;
        for (int64_t i = 0; i < nout; i++) a[i] = init;
        if (!empty) plan_walk(&p, &c, false);
        for (int64_t i = 0; i < nout && (op == RED_MEAN || op == RED_L2); i++) {
            if (op == RED_L2)
                a[i] = (int64_t)sqrt(c.is_unsigned ? (double)(uint64_t)a[i] : (double)a[i]);
            else if (count == 0)
                a[i] = 0;
            else
                a[i] = c.is_unsigned ? (int64_t)((uint64_t)a[i] / (uint64_t)count) : a[i] / count;
        }
        kiln_red_store_i64(out[0], 0, nout, a);
    }
    free(acc);
    return KILN_OK;
}

#define REDUCE_KERNEL(fn, op, since)                                                               \
    static kiln_status fn(const kiln_node *n, kiln_tensor *const *in, int nin, kiln_tensor *const *out, int nout) { \
        (void)nout;                                                                                \
        return reduce_exec(n, in, nin, out, op, since);                                            \
    }
REDUCE_KERNEL(reduce_sum, RED_SUM, 13)
REDUCE_KERNEL(reduce_mean, RED_MEAN, 18)
REDUCE_KERNEL(reduce_prod, RED_PROD, 18)
REDUCE_KERNEL(reduce_max, RED_MAX, 18)
REDUCE_KERNEL(reduce_min, RED_MIN, 18)
REDUCE_KERNEL(reduce_l1, RED_L1, 18)
REDUCE_KERNEL(reduce_l2, RED_L2, 18)
REDUCE_KERNEL(reduce_log_sum, RED_LOGSUM, 18)
REDUCE_KERNEL(reduce_log_sum_exp, RED_LSE, 18)
REDUCE_KERNEL(reduce_sum_square, RED_SUMSQ, 18)
#undef REDUCE_KERNEL

const kiln_cpu_kernel kiln_cpu_kernels_reduce[] = {
    {"ReduceSum", "", reduce_sum},
    {"ReduceMean", "", reduce_mean},
    {"ReduceProd", "", reduce_prod},
    {"ReduceMax", "", reduce_max},
    {"ReduceMin", "", reduce_min},
    {"ReduceL1", "", reduce_l1},
    {"ReduceL2", "", reduce_l2},
    {"ReduceLogSum", "", reduce_log_sum},
    {"ReduceLogSumExp", "", reduce_log_sum_exp},
    {"ReduceSumSquare", "", reduce_sum_square},
    {"ArgMax", "", kiln_cpu_argmax},
    {"ArgMin", "", kiln_cpu_argmin},
    {"TopK", "", kiln_cpu_topk},
    {"CumSum", "", kiln_cpu_cumsum},
    {"Trilu", "", kiln_cpu_trilu},
    {"Range", "", kiln_cpu_range},
    {"ConstantOfShape", "", kiln_cpu_constant_of_shape},
    {"OneHot", "", kiln_cpu_onehot},
    {"NonZero", "", kiln_cpu_nonzero},
    {"EyeLike", "", kiln_cpu_eyelike},
    {"Einsum", "", kiln_cpu_einsum},
    {0},
};
