/* shape_util.h — helpers shared by the CPU kernels of the shape family (shape.c, transpose.c,
 * gather.c, slice.c, resize.c): reading small integer operands, checking indices, copying elements
 * by size, and the strided-copy engine that Transpose, Slice, Expand, Pad and DepthToSpace all run
 * through. Every kernel of this family is type-generic: it moves elements by their byte size. */
#ifndef KILN_CPU_SHAPE_UTIL_H
#define KILN_CPU_SHAPE_UTIL_H

#include "backends/cpu/cpu_kernels.h"
#include "core/status.h"

#include <stdint.h>
#include <string.h>

/* Copies one element of esize bytes (1, 2, 4, 8 or 16). */
static inline void shp_copy_elem(void *dst, const void *src, size_t esize) {
    switch (esize) {
    case 1: *(uint8_t *)dst = *(const uint8_t *)src; break;
    case 2: memcpy(dst, src, 2); break;
    case 4: memcpy(dst, src, 4); break;
    case 8: memcpy(dst, src, 8); break;
    default: memcpy(dst, src, esize); break;
    }
}

/* Reads element i of an int32 or int64 index tensor. */
static inline int64_t shp_index_at(const kiln_tensor *t, int64_t i) {
    return t->dtype == KILN_I64 ? ((const int64_t *)t->data)[i] : ((const int32_t *)t->data)[i];
}

/* Normalizes index v (negative counts from the end) against a dimension of size dim; fails with
 * KILN_ERR_INVALID_ARGUMENT naming the op when it is outside [-dim, dim). */
static inline kiln_status shp_norm_index(const kiln_node *n, int64_t v, int64_t dim, int64_t *out) {
    if (v < -dim || v >= dim)
        return kiln_error(KILN_ERR_INVALID_ARGUMENT, "%s: index %lld is out of range for a dimension of size %lld",
                          n->op_type, (long long)v, (long long)dim);
    *out = v < 0 ? v + dim : v;
    return KILN_OK;
}

/* Fails with KILN_ERR_UNSUPPORTED unless t has a fixed-size element type. */
kiln_status kiln_cpu_shape_check_dtype(const kiln_node *n, const kiln_tensor *t);
/* Fails unless t is an int32 or int64 tensor (what = the operand's name). */
kiln_status kiln_cpu_shape_check_index(const kiln_node *n, const kiln_tensor *t, const char *what);
/* Reads an integer tensor of rank 0 or 1 into vals (at most cap entries, else KILN_ERR_INVALID_ARGUMENT). */
kiln_status kiln_cpu_shape_read_ints(const kiln_node *n, const kiln_tensor *t, const char *what, int64_t *vals, int cap,
                                     int *count);
/* Reads Squeeze/Unsqueeze-style axes: the INTS attribute `name` when opset < input_from, else input t
 * (which may be NULL). *present is false when neither is given. */
kiln_status kiln_cpu_shape_read_list(const kiln_node *n, const kiln_tensor *t, const char *name, int input_from,
                                     int64_t *vals, int cap, int *count, bool *present);

/* Copies a rank-r box of elements: dst[i] = src[i] over every multi-index i < dims, where element i
 * lives at sum(i_k * sstride[k]) in src and sum(i_k * dstride[k]) in dst (strides in elements, src
 * strides may be 0 or negative). Contiguous runs are copied with memcpy, 0-stride runs filled,
 * and 2-D transposes are tiled. */
void kiln_cpu_copy_strided(size_t esize, int r, const int64_t *dims, const void *src, const int64_t *sstride, void *dst,
                           const int64_t *dstride);
/* dst (dense, output dims = dims[perm[i]]) = src (dense, dims) transposed by perm. */
void kiln_cpu_transpose(size_t esize, int r, const int64_t *dims, const int *perm, const void *src, void *dst);

/* Exec functions of the family's other files, listed in shape.c's kernel table. */
#define SHP_EXEC(name) \
    kiln_status name(const kiln_node *n, kiln_tensor *const *in, int nin, kiln_tensor *const *out, int nout)
SHP_EXEC(kiln_cpu_shape_transpose);
SHP_EXEC(kiln_cpu_shape_depth_space);
SHP_EXEC(kiln_cpu_shape_expand);
SHP_EXEC(kiln_cpu_shape_tile);
SHP_EXEC(kiln_cpu_shape_slice);
SHP_EXEC(kiln_cpu_shape_pad);
SHP_EXEC(kiln_cpu_shape_gather);
SHP_EXEC(kiln_cpu_shape_gather_elements);
SHP_EXEC(kiln_cpu_shape_gather_nd);
SHP_EXEC(kiln_cpu_shape_scatter_nd);
SHP_EXEC(kiln_cpu_shape_scatter_elements);
SHP_EXEC(kiln_cpu_shape_resize);

#endif
