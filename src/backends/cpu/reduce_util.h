/* reduce_util.h — helpers shared by the reduce family's CPU kernels (reduce.c, reduce_index.c,
 * generate.c, einsum.c): dtype classes, converting contiguous runs of any numeric dtype to and from
 * double / int64 scratch (one dtype switch per run, not per element), order-preserving sort keys,
 * and reading small integer inputs (axes, k, axis). Also declares the exec functions that the
 * family table in reduce.c lists. */
#ifndef KILN_CPU_REDUCE_UTIL_H
#define KILN_CPU_REDUCE_UTIL_H

#include "backends/cpu/cpu_kernels.h"

#include <stdbool.h>
#include <stdint.h>

static inline bool kiln_red_is_float(kiln_dtype t) {
    return t == KILN_F32 || t == KILN_F64 || t == KILN_F16 || t == KILN_BF16;
}
static inline bool kiln_red_is_signed_int(kiln_dtype t) {
    return t == KILN_I8 || t == KILN_I16 || t == KILN_I32 || t == KILN_I64;
}
static inline bool kiln_red_is_unsigned_int(kiln_dtype t) {
    return t == KILN_U8 || t == KILN_U16 || t == KILN_U32 || t == KILN_U64;
}
/* Float, integer or bool: the dtypes the numeric helpers below accept. */
static inline bool kiln_red_is_numeric(kiln_dtype t) {
    return kiln_red_is_float(t) || kiln_red_is_signed_int(t) || kiln_red_is_unsigned_int(t) || t == KILN_BOOL;
}

/* dst[i] = element off+i of t as double, for i < n. t is any numeric dtype. */
void kiln_red_load_f64(const kiln_tensor *t, int64_t off, int64_t n, double *dst);
/* Element off+i of t = src[i] converted (float types round, integer types truncate toward zero,
 * bool is src != 0). */
void kiln_red_store_f64(kiln_tensor *t, int64_t off, int64_t n, const double *src);
/* dst[i] = element off+i of t as int64 (unsigned values are zero-extended, so uint64 keeps its bits;
 * float types truncate toward zero). */
void kiln_red_load_i64(const kiln_tensor *t, int64_t off, int64_t n, int64_t *dst);
/* Element off+i of t = src[i], truncated to the width of t's integer dtype (bool: src != 0). */
void kiln_red_store_i64(kiln_tensor *t, int64_t off, int64_t n, const int64_t *src);

/* keys[i] = an unsigned key of element off+i*stride of t whose unsigned order is the numeric order
 * of the values (exact for every integer width; floats via double). NaN sorts above +inf when
 * nan_high, below -inf otherwise. */
void kiln_red_order_keys(const kiln_tensor *t, int64_t off, int64_t stride, int64_t n, bool nan_high,
                         uint64_t *keys);

/* Reads an integer tensor of at most one dimension (what names it in errors) into out[0..*count)
 * (at most cap values). */
kiln_status kiln_red_read_ints(const kiln_node *n, const kiln_tensor *t, const char *what, int64_t *out,
                               int cap, int *count);
/* Reads a one-element tensor (scalar or [1]) of any numeric dtype as int64 (floats truncate). */
kiln_status kiln_red_read_scalar_i64(const kiln_node *n, const kiln_tensor *t, const char *what, int64_t *v);

/* Fails with KILN_ERR_INVALID_ARGUMENT when required input i is absent. */
kiln_status kiln_red_need(const kiln_node *n, kiln_tensor *const *in, int nin, int i, const char *what);
/* Fails with KILN_ERR_UNSUPPORTED naming the op and dtype. */
kiln_status kiln_red_unsupported(const kiln_node *n, kiln_dtype t);

/* Exec functions of the family (table in reduce.c). */
kiln_status kiln_cpu_argmax(const kiln_node *n, kiln_tensor *const *in, int nin, kiln_tensor *const *out, int nout);
kiln_status kiln_cpu_argmin(const kiln_node *n, kiln_tensor *const *in, int nin, kiln_tensor *const *out, int nout);
kiln_status kiln_cpu_topk(const kiln_node *n, kiln_tensor *const *in, int nin, kiln_tensor *const *out, int nout);
kiln_status kiln_cpu_cumsum(const kiln_node *n, kiln_tensor *const *in, int nin, kiln_tensor *const *out, int nout);
kiln_status kiln_cpu_trilu(const kiln_node *n, kiln_tensor *const *in, int nin, kiln_tensor *const *out, int nout);
kiln_status kiln_cpu_range(const kiln_node *n, kiln_tensor *const *in, int nin, kiln_tensor *const *out, int nout);
kiln_status kiln_cpu_constant_of_shape(const kiln_node *n, kiln_tensor *const *in, int nin,
                                       kiln_tensor *const *out, int nout);
kiln_status kiln_cpu_onehot(const kiln_node *n, kiln_tensor *const *in, int nin, kiln_tensor *const *out, int nout);
kiln_status kiln_cpu_nonzero(const kiln_node *n, kiln_tensor *const *in, int nin, kiln_tensor *const *out, int nout);
kiln_status kiln_cpu_eyelike(const kiln_node *n, kiln_tensor *const *in, int nin, kiln_tensor *const *out, int nout);
kiln_status kiln_cpu_einsum(const kiln_node *n, kiln_tensor *const *in, int nin, kiln_tensor *const *out, int nout);

#endif
