/* gather.c — CPU kernels for the indexing ops: Gather, GatherElements, GatherND, ScatterND,
 * ScatterElements and the deprecated Scatter. Data movement is type-generic (Gather and GatherND
 * copy whole inner blocks with memcpy); the scatter reductions (add/mul/max/min) are typed per dtype.
 * Every index is checked against its dimension before it is used: an index out of range is an
 * error naming the op, never an out-of-bounds access. */
#include "backends/cpu/shape_util.h"

#include "core/half.h"

enum { RED_NONE, RED_ADD, RED_MUL, RED_MAX, RED_MIN };

/* Copies nbytes (a multiple of es) from src to dst. */
static inline void copy_block(char *dst, const char *src, size_t nbytes, size_t es) {
    if (nbytes == es) shp_copy_elem(dst, src, es);
    else memcpy(dst, src, nbytes);
}

/* dst[j] = src[idx[j]] for one row of nidx indices (checked already), elements of C type T. */
#define GATHER_ROW(T)                                                                                          \
    do {                                                                                                       \
        const T *s_ = (const T *)src;                                                                          \
        T *d_ = (T *)dst;                                                                                      \
        for (int64_t j = 0; j < nidx; j++) {                                                                   \
            int64_t i = shp_index_at(idx, j);                                                                  \
            d_[j] = s_[i < 0 ? i + adim : i];                                                                  \
        }                                                                                                      \
    } while (0)

kiln_status kiln_cpu_shape_gather(const kiln_node *n, kiln_tensor *const *in, int nin, kiln_tensor *const *out, int nout) {
    const kiln_tensor *x = in[0], *idx = in[1];
    KILN_TRY(kiln_cpu_shape_check_dtype(n, x));
    KILN_TRY(kiln_cpu_shape_check_index(n, idx, "indices"));
    if (x->ndim < 1) return kiln_error(KILN_ERR_SHAPE, "Gather: data must have rank >= 1");
    int axis, r = x->ndim, q = idx->ndim;
    KILN_TRY(kiln_axis_normalize(kiln_attr_int(n, "axis", 0), r, &axis));
    if (r - 1 + q > KILN_MAX_DIMS) return kiln_error(KILN_ERR_UNSUPPORTED, "Gather: output rank %d exceeds %d", r - 1 + q, KILN_MAX_DIMS);
    int64_t od[KILN_MAX_DIMS], nidx = kiln_tensor_numel(idx), adim = x->dims[axis], v;
    int o = 0;
    for (int i = 0; i < axis; i++) od[o++] = x->dims[i];
    for (int i = 0; i < q; i++) od[o++] = idx->dims[i];
    for (int i = axis + 1; i < r; i++) od[o++] = x->dims[i];
    for (int64_t j = 0; j < nidx; j++) KILN_TRY(shp_norm_index(n, shp_index_at(idx, j), adim, &v));
    KILN_TRY(kiln_tensor_alloc(out[0], x->dtype, o, od));
    if (!out[0]->nbytes) return KILN_OK;
    size_t es = kiln_dtype_size(x->dtype);
    int64_t outer = kiln_numel(axis, x->dims);
    size_t block = (size_t)kiln_numel(r - axis - 1, x->dims + axis + 1) * es;
    const char *src = x->data;
    char *dst = out[0]->data;
    if (block == es && (es == 1 || es == 2 || es == 4 || es == 8)) { /* single elements: a typed loop */
        for (int64_t b = 0; b < outer; b++, src += (size_t)adim * es, dst += (size_t)nidx * es)
            switch (es) {
            case 1: GATHER_ROW(uint8_t); break;
            case 2: GATHER_ROW(uint16_t); break;
            case 4: GATHER_ROW(uint32_t); break;
            default: GATHER_ROW(uint64_t); break;
            }
        return KILN_OK;
    }
    for (int64_t b = 0; b < outer; b++, src += (size_t)adim * block)
        for (int64_t j = 0; j < nidx; j++, dst += block) {
            int64_t i = shp_index_at(idx, j);
            copy_block(dst, src + (size_t)(i < 0 ? i + adim : i) * block, block, es);
        }
    return KILN_OK;
}

/* Checks GatherElements/ScatterElements operands: data, indices (and updates) of one rank, indices
 * no larger than data off the axis. */
static kiln_status elements_check(const kiln_node *n, const kiln_tensor *x, const kiln_tensor *idx, const kiln_tensor *up,
                                  int *axis) {
    KILN_TRY(kiln_cpu_shape_check_dtype(n, x));
    KILN_TRY(kiln_cpu_shape_check_index(n, idx, "indices"));
    if (idx->ndim != x->ndim || x->ndim < 1)
        return kiln_error(KILN_ERR_SHAPE, "%s: data (rank %d) and indices (rank %d) must have the same rank >= 1", n->op_type,
                          x->ndim, idx->ndim);
    KILN_TRY(kiln_axis_normalize(kiln_attr_int(n, "axis", 0), x->ndim, axis));
    for (int i = 0; i < x->ndim; i++) {
        if (i != *axis && idx->dims[i] > x->dims[i])
            return kiln_error(KILN_ERR_SHAPE, "%s: indices dimension %d (%lld) exceeds data's (%lld)", n->op_type, i,
                              (long long)idx->dims[i], (long long)x->dims[i]);
        if (up && (up->ndim != idx->ndim || up->dims[i] != idx->dims[i]))
            return kiln_error(KILN_ERR_SHAPE, "%s: updates and indices must have the same shape", n->op_type);
    }
    if (up && up->dtype != x->dtype)
        return kiln_error(KILN_ERR_INVALID_ARGUMENT, "%s: updates are %s but data is %s", n->op_type, kiln_dtype_name(up->dtype),
                          kiln_dtype_name(x->dtype));
    return KILN_OK;
}

/* Runs BODY for every element j (row-major) of an index tensor of dims `dims`, with `off` set to the
 * element's offset in data (strides xs) leaving out the axis coordinate. */
#define FOR_EACH_ELEMENT_OFFSET(r, dims, axis, xs, BODY)                                                       \
    do {                                                                                                       \
        int64_t cnt_[KILN_MAX_DIMS] = {0}, off = 0, total_ = kiln_numel(r, dims);                              \
        for (int64_t j = 0; j < total_; j++) {                                                                 \
            BODY;                                                                                              \
            for (int d_ = (r) - 1; d_ >= 0; d_--) {                                                            \
                if (d_ != (axis)) off += (xs)[d_];                                                             \
                if (++cnt_[d_] < (dims)[d_]) break;                                                            \
                if (d_ != (axis)) off -= (xs)[d_] * (dims)[d_];                                                \
                cnt_[d_] = 0;                                                                                  \
            }                                                                                                  \
        }                                                                                                      \
    } while (0)

kiln_status kiln_cpu_shape_gather_elements(const kiln_node *n, kiln_tensor *const *in, int nin, kiln_tensor *const *out,
                                           int nout) {
    const kiln_tensor *x = in[0], *idx = in[1];
    int axis;
    KILN_TRY(elements_check(n, x, idx, NULL, &axis));
    int64_t xs[KILN_MAX_DIMS], adim = x->dims[axis], total = kiln_tensor_numel(idx), v;
    for (int64_t j = 0; j < total; j++) KILN_TRY(shp_norm_index(n, shp_index_at(idx, j), adim, &v));
    KILN_TRY(kiln_tensor_alloc(out[0], x->dtype, idx->ndim, idx->dims));
    if (!out[0]->nbytes) return KILN_OK;
    kiln_strides(x->ndim, x->dims, xs);
    size_t es = kiln_dtype_size(x->dtype);
    const char *src = x->data;
    char *dst = out[0]->data;
    FOR_EACH_ELEMENT_OFFSET(x->ndim, idx->dims, axis, xs, {
        int64_t i = shp_index_at(idx, j);
        shp_copy_elem(dst + (size_t)j * es, src + (size_t)(off + (i < 0 ? i + adim : i) * xs[axis]) * es, es);
    });
    return KILN_OK;
}

kiln_status kiln_cpu_shape_gather_nd(const kiln_node *n, kiln_tensor *const *in, int nin, kiln_tensor *const *out, int nout) {
    const kiln_tensor *x = in[0], *idx = in[1];
    KILN_TRY(kiln_cpu_shape_check_dtype(n, x));
    KILN_TRY(kiln_cpu_shape_check_index(n, idx, "indices"));
    int64_t b = n->opset >= 12 ? kiln_attr_int(n, "batch_dims", 0) : 0;
    int q = idx->ndim, r = x->ndim;
    if (q < 1 || r < 1 || b < 0 || b >= q || b >= r)
        return kiln_error(KILN_ERR_INVALID_ARGUMENT, "GatherND: invalid ranks %d (data), %d (indices) for batch_dims %lld", r, q,
                          (long long)b);
    int64_t last = idx->dims[q - 1];
    if (last < 1 || b + last > r)
        return kiln_error(KILN_ERR_SHAPE, "GatherND: index tuples of length %lld do not fit data of rank %d", (long long)last, r);
    for (int i = 0; i < b; i++)
        if (idx->dims[i] != x->dims[i])
            return kiln_error(KILN_ERR_SHAPE, "GatherND: batch dimension %d differs (%lld vs %lld)", i, (long long)idx->dims[i],
                              (long long)x->dims[i]);
    int64_t od[KILN_MAX_DIMS], xs[KILN_MAX_DIMS], v;
    int o = 0;
    for (int i = 0; i < q - 1; i++) od[o++] = idx->dims[i];
    for (int i = (int)(b + last); i < r; i++) od[o++] = x->dims[i];
    if (o > KILN_MAX_DIMS) return kiln_error(KILN_ERR_UNSUPPORTED, "GatherND: output rank %d exceeds %d", o, KILN_MAX_DIMS);
    int64_t B = kiln_numel((int)b, idx->dims), M = kiln_numel(q - 1 - (int)b, idx->dims + b);
    for (int64_t t = 0; t < B * M; t++)
        for (int k = 0; k < last; k++) KILN_TRY(shp_norm_index(n, shp_index_at(idx, t * last + k), x->dims[b + k], &v));
    KILN_TRY(kiln_tensor_alloc(out[0], x->dtype, o, od));
    if (!out[0]->nbytes) return KILN_OK;
    kiln_strides(r, x->dims, xs);
    size_t es = kiln_dtype_size(x->dtype), slice = (size_t)kiln_numel(r - (int)(b + last), x->dims + b + last) * es;
    int64_t batch_stride = b > 0 ? xs[b - 1] : 0;
    char *dst = out[0]->data;
    for (int64_t bi = 0; bi < B; bi++)
        for (int64_t m = 0; m < M; m++, dst += slice) {
            int64_t off = bi * batch_stride;
            for (int k = 0; k < last; k++) {
                int64_t i = shp_index_at(idx, (bi * M + m) * last + k);
                off += (i < 0 ? i + x->dims[b + k] : i) * xs[b + k];
            }
            copy_block(dst, (const char *)x->data + (size_t)off * es, slice, es);
        }
    return KILN_OK;
}

/* dst[i] = dst[i] (red) src[i] for count elements of C type T (U: the unsigned type used for
 * integer add/mul, so that wrap-around is defined). */
#define RED_LOOP(T, U)                                                                                         \
    do {                                                                                                       \
        T *d_ = (T *)dst;                                                                                      \
        const T *s_ = (const T *)src;                                                                          \
        for (int64_t i = 0; i < count; i++) {                                                                  \
            T a = d_[i], b = s_[i];                                                                            \
            d_[i] = red == RED_ADD ? (T)((U)a + (U)b) : red == RED_MUL ? (T)((U)a * (U)b) : red == RED_MAX ? (a > b ? a : b) \
                                                                                                        : (a < b ? a : b); \
        }                                                                                                      \
    } while (0)

/* The same for a 16-bit float type, through float32. */
#define RED_LOOP_HALF(TO_F32, FROM_F32)                                                                        \
    do {                                                                                                       \
        uint16_t *d_ = (uint16_t *)dst;                                                                        \
        const uint16_t *s_ = (const uint16_t *)src;                                                            \
        for (int64_t i = 0; i < count; i++) {                                                                  \
            float a = TO_F32(d_[i]), b = TO_F32(s_[i]);                                                        \
            d_[i] = FROM_F32(red == RED_ADD ? a + b : red == RED_MUL ? a * b : red == RED_MAX ? (a > b ? a : b) : (a < b ? a : b)); \
        }                                                                                                      \
    } while (0)

/* Applies reduction red of count elements of src into dst (both of dtype dt). */
static kiln_status scatter_apply(const kiln_node *n, kiln_dtype dt, int red, char *dst, const char *src, int64_t count) {
    size_t es = kiln_dtype_size(dt);
    if (red == RED_NONE) {
        copy_block(dst, src, (size_t)count * es, es);
        return KILN_OK;
    }
    switch (dt) {
    case KILN_F32: RED_LOOP(float, float); break;
    case KILN_F64: RED_LOOP(double, double); break;
    case KILN_I8: RED_LOOP(int8_t, uint8_t); break;
    case KILN_I16: RED_LOOP(int16_t, uint16_t); break;
    case KILN_I32: RED_LOOP(int32_t, uint32_t); break;
    case KILN_I64: RED_LOOP(int64_t, uint64_t); break;
    case KILN_U8: RED_LOOP(uint8_t, uint32_t); break;
    case KILN_U16: RED_LOOP(uint16_t, uint32_t); break;
    case KILN_U32: RED_LOOP(uint32_t, uint32_t); break;
    case KILN_U64: RED_LOOP(uint64_t, uint64_t); break;
    case KILN_F16: RED_LOOP_HALF(kiln_f16_to_f32, kiln_f32_to_f16); break;
    case KILN_BF16: RED_LOOP_HALF(kiln_bf16_to_f32, kiln_f32_to_bf16); break;
    case KILN_BOOL: /* or for add/max, and for mul/min */
        red = red == RED_ADD ? RED_MAX : red == RED_MUL ? RED_MIN : red;
        RED_LOOP(uint8_t, uint32_t);
        break;
    default:
        return kiln_error(KILN_ERR_UNSUPPORTED, "%s: reduction on %s is not supported", n->op_type, kiln_dtype_name(dt));
    }
    return KILN_OK;
}

static kiln_status scatter_reduction(const kiln_node *n, int *red) {
    const char *s = n->opset >= 16 ? kiln_attr_string(n, "reduction", "none") : "none";
    *red = !strcmp(s, "none") ? RED_NONE : !strcmp(s, "add") ? RED_ADD : !strcmp(s, "mul") ? RED_MUL
           : !strcmp(s, "max") && n->opset >= 18                                              ? RED_MAX
           : !strcmp(s, "min") && n->opset >= 18                                              ? RED_MIN
                                                                                              : -1;
    if (*red < 0) return kiln_error(KILN_ERR_INVALID_ARGUMENT, "%s: unknown reduction '%s' for opset %d", n->op_type, s, n->opset);
    return KILN_OK;
}

kiln_status kiln_cpu_shape_scatter_nd(const kiln_node *n, kiln_tensor *const *in, int nin, kiln_tensor *const *out, int nout) {
    const kiln_tensor *x = in[0], *idx = in[1], *up = in[2];
    int red;
    KILN_TRY(scatter_reduction(n, &red));
    KILN_TRY(kiln_cpu_shape_check_dtype(n, x));
    KILN_TRY(kiln_cpu_shape_check_index(n, idx, "indices"));
    if (up->dtype != x->dtype)
        return kiln_error(KILN_ERR_INVALID_ARGUMENT, "ScatterND: updates are %s but data is %s", kiln_dtype_name(up->dtype),
                          kiln_dtype_name(x->dtype));
    int q = idx->ndim, r = x->ndim;
    int64_t k = q >= 1 ? idx->dims[q - 1] : -1;
    bool ok = q >= 1 && k >= 0 && k <= r && up->ndim == q - 1 + r - k;
    for (int i = 0; ok && i < up->ndim; i++) ok = up->dims[i] == (i < q - 1 ? idx->dims[i] : x->dims[k + i - (q - 1)]);
    if (!ok) {
        char a[128], b[128], c[128];
        return kiln_error(KILN_ERR_SHAPE, "ScatterND: updates %s do not match data %s and indices %s",
                          kiln_shape_str(a, sizeof a, up->ndim, up->dims), kiln_shape_str(b, sizeof b, r, x->dims),
                          kiln_shape_str(c, sizeof c, q, idx->dims));
    }
    int64_t M = kiln_numel(q - 1, idx->dims), S = kiln_numel(r - (int)k, x->dims + k), xs[KILN_MAX_DIMS], v;
    for (int64_t m = 0; m < M; m++)
        for (int j = 0; j < k; j++) KILN_TRY(shp_norm_index(n, shp_index_at(idx, m * k + j), x->dims[j], &v));
    KILN_TRY(kiln_tensor_copy(out[0], x));
    if (!out[0]->nbytes) return KILN_OK;
    kiln_strides(r, x->dims, xs);
    size_t es = kiln_dtype_size(x->dtype);
    for (int64_t m = 0; m < M; m++) {
        int64_t off = 0;
        for (int j = 0; j < k; j++) {
            int64_t i = shp_index_at(idx, m * k + j);
            off += (i < 0 ? i + x->dims[j] : i) * xs[j];
        }
        KILN_TRY(scatter_apply(n, x->dtype, red, (char *)out[0]->data + (size_t)off * es,
                               (const char *)up->data + (size_t)(m * S) * es, S));
    }
    return KILN_OK;
}

/* ScatterElements (and Scatter, opset 9-10): out = data; out[idx position with axis coord = index] (red)= update. */
kiln_status kiln_cpu_shape_scatter_elements(const kiln_node *n, kiln_tensor *const *in, int nin, kiln_tensor *const *out,
                                            int nout) {
    const kiln_tensor *x = in[0], *idx = in[1], *up = in[2];
    int axis, red;
    KILN_TRY(scatter_reduction(n, &red));
    KILN_TRY(elements_check(n, x, idx, up, &axis));
    int64_t xs[KILN_MAX_DIMS], adim = x->dims[axis], total = kiln_tensor_numel(idx), v;
    for (int64_t j = 0; j < total; j++) KILN_TRY(shp_norm_index(n, shp_index_at(idx, j), adim, &v));
    KILN_TRY(kiln_tensor_copy(out[0], x));
    if (!out[0]->nbytes || !total) return KILN_OK;
    kiln_strides(x->ndim, x->dims, xs);
    size_t es = kiln_dtype_size(x->dtype);
    char *dst = out[0]->data;
    const char *src = up->data;
    kiln_status st = KILN_OK;
    FOR_EACH_ELEMENT_OFFSET(x->ndim, idx->dims, axis, xs, {
        int64_t i = shp_index_at(idx, j);
        char *d = dst + (size_t)(off + (i < 0 ? i + adim : i) * xs[axis]) * es;
        if (red == RED_NONE) shp_copy_elem(d, src + (size_t)j * es, es);
        else if (st == KILN_OK) st = scatter_apply(n, x->dtype, red, d, src + (size_t)j * es, 1);
    });
    return st;
}
