/* shape_calc.h — integer shape arithmetic of the shape op family (Slice, Split, Resize, Pad) shared by
 * shape inference (src/ir/infer_shape*.c) and the CPU kernels, so that both agree exactly. Pure
 * functions over static sizes; nothing here allocates. */
#ifndef KILN_IR_SHAPE_CALC_H
#define KILN_IR_SHAPE_CALC_H

#include "ir/graph.h"
#include "kiln/kiln.h"

#include <stdbool.h>
#include <stdint.h>

/* One axis of ONNX Slice: start/end are the raw (possibly negative, possibly huge) values, step != 0.
 * Writes the first index taken and the number of elements taken (>= 0), clamping as the spec says. */
void kiln_slice_axis(int64_t dim, int64_t start, int64_t end, int64_t step, int64_t *first, int64_t *count);

/* Split sizes when no explicit split is given: n equal parts of dim; when uneven_ok (Split-18
 * num_outputs) the last part may be smaller (parts of ceil(dim / n)). Fails with KILN_ERR_SHAPE when
 * dim cannot be split that way. */
kiln_status kiln_split_even(const char *op, int64_t dim, int n, bool uneven_ok, int64_t *sizes);

/* Resize / Upsample output size of one axis from a scale: floor(dim * scale). */
int64_t kiln_resize_dim(int64_t dim, double scale);

/* Applies Resize's keep_aspect_ratio_policy ("stretch", "not_larger", "not_smaller") to requested
 * sizes: for every axis i in axes (count naxes), out[i] and scale[i] are set; other axes keep their
 * dims with scale 1. sizes[j] is the requested size of axes[j]. All input dims must be > 0 for the
 * non-stretch policies (else KILN_ERR_SHAPE). */
kiln_status kiln_resize_sizes(int rank, const int64_t *dims, int naxes, const int *axes, const int64_t *sizes,
                              const char *policy, int64_t *out, double *scale);

/* Reads the axes of an op (values in [-rank, rank)), normalizes them and rejects duplicates; fails
 * with KILN_ERR_INVALID_ARGUMENT naming the op. */
kiln_status kiln_axes_normalize(const char *op, int naxes, const int64_t *axes, int rank, int *out);

/* The [start, end) range of dimensions the Shape op n returns for an input of the given rank
 * (start/end attributes from opset 15, negative values counted from the end, clamped to [0, rank]). */
void kiln_shape_op_range(const kiln_node *n, int64_t rank, int64_t *start, int64_t *end);

#endif
