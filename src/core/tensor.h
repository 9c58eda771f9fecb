/* tensor.h — a concrete host tensor (dtype, shape, data) as kernels and the runtime see it, and the
 * small shape helpers every op uses. Data is dense, row-major. */
#ifndef KILN_CORE_TENSOR_H
#define KILN_CORE_TENSOR_H

#include "kiln/kiln.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct kiln_tensor {
    kiln_dtype dtype;
    int ndim;
    int64_t dims[KILN_MAX_DIMS];
    void *data;    /* dense row-major; may be NULL when numel == 0 */
    size_t nbytes; /* numel * dtype size */
    bool owned;    /* data was allocated by kiln_tensor_alloc and is freed by kiln_tensor_release */
} kiln_tensor;

/* The most elements one tensor may hold (2^40): a larger shape, static or met at run time, is refused
 * as too large before anything is allocated or multiplied past it. */
#define KILN_MAX_TENSOR_ELEMENTS (INT64_C(1) << 40)

/* Product of dims (1 for a scalar). */
int64_t kiln_numel(int ndim, const int64_t *dims);
static inline int64_t kiln_tensor_numel(const kiln_tensor *t) { return kiln_numel(t->ndim, t->dims); }

/* Sets t's dtype and shape and allocates zeroed, 64-byte aligned storage (owned by t). Fails with
 * KILN_ERR_OUT_OF_MEMORY (a shape above KILN_MAX_TENSOR_ELEMENTS: "a tensor of shape [...] has more
 * than 2^40 elements", which callers prefix with the tensor's name) or, for a negative dim or
 * ndim > KILN_MAX_DIMS, KILN_ERR_SHAPE. Any data t owned before is released first. */
kiln_status kiln_tensor_alloc(kiln_tensor *t, kiln_dtype dtype, int ndim, const int64_t *dims);
/* kiln_tensor_alloc without the zeroing, for kernels that write every element of the result. */
kiln_status kiln_tensor_alloc_uninit(kiln_tensor *t, kiln_dtype dtype, int ndim, const int64_t *dims);
/* Makes t a view of borrowed data (not owned; nothing is freed). */
void kiln_tensor_view(kiln_tensor *t, kiln_dtype dtype, int ndim, const int64_t *dims, void *data);
/* Frees owned data and resets t to an empty tensor. */
void kiln_tensor_release(kiln_tensor *t);
/* Deep copy of src into dst (dst is released first). */
kiln_status kiln_tensor_copy(kiln_tensor *dst, const kiln_tensor *src);

/* Row-major element strides of a shape. */
void kiln_strides(int ndim, const int64_t *dims, int64_t *strides);

/* Reads element i of an integer or bool tensor as int64 (fails for float types in debug asserts). */
int64_t kiln_tensor_get_i64(const kiln_tensor *t, int64_t i);
/* Reads element i of any numeric tensor as double. */
double kiln_tensor_get_f64(const kiln_tensor *t, int64_t i);
/* Writes v (converted) to element i of any numeric tensor. */
void kiln_tensor_set_f64(kiln_tensor *t, int64_t i, double v);

/* "float32[2,3,?]"-style text into buf (returns buf). */
char *kiln_shape_str(char *buf, size_t cap, int ndim, const int64_t *dims);

/* Normalizes a possibly negative axis for a rank; fails with KILN_ERR_INVALID_ARGUMENT when out of
 * [-rank, rank). */
kiln_status kiln_axis_normalize(int64_t axis, int rank, int *out);

/* Multidirectional (numpy) broadcast of two shapes; fails with KILN_ERR_SHAPE naming both shapes. */
kiln_status kiln_broadcast_shape(int na, const int64_t *a, int nb, const int64_t *b, int *nout,
                                 int64_t *out);
/* Strides of a shape broadcast to an output shape of rank nout (0 stride on broadcast dims). */
void kiln_broadcast_strides(int nin, const int64_t *in, int nout, const int64_t *out, int64_t *strides);

#ifdef __cplusplus
}
#endif
#endif
