/* shape_value.h — build-time evaluation of small integer tensors that describe shapes (the values
 * flowing from Shape into Reshape, Expand, Tile, Slice, Resize, ConstantOfShape, ...), element by
 * element, keeping symbolic dimensions: Shape(x) of x: [batch, 3] is [batch, 3], and
 * Concat(Gather(Shape(x), 0), [-1]) is [batch, -1]. This lets infer functions produce static and
 * symbolic output dims where ONNX exporters compute shapes with ops instead of constants. */
#ifndef KILN_IR_SHAPE_VALUE_H
#define KILN_IR_SHAPE_VALUE_H

#include "ir/graph.h"

/* Most elements a shape value may have to be evaluated. */
#define KILN_SHAPE_VALUE_MAX 64

/* The elements of integer value `vid` (rank 0 or 1, at most cap of them) as dims: static when known
 * at build time, symbolic when the element is a symbolic dimension of some tensor (read through
 * Shape), unknown otherwise. Looks through constants, Shape, Size, Concat, Gather, Slice, Squeeze,
 * Unsqueeze, Reshape, Identity, Cast, ConstantOfShape, Where, and Add/Sub/Mul/Div/Max/Min/Equal of
 * known elements (an Equal or Where condition list holds 0/1).
 * Returns false when not even the number of elements is known. */
bool kiln_shape_value(const kiln_graph *g, int vid, kiln_dim *elems, int cap, int *count);

/* kiln_shape_value of input i of node n (false when absent). */
bool kiln_shape_value_input(const kiln_graph *g, const kiln_node *n, int i, kiln_dim *elems, int cap, int *count);

/* True when all count elements are static; then vals[k] = elems[k].value. */
bool kiln_shape_value_static(const kiln_dim *elems, int count, int64_t *vals);

#endif
