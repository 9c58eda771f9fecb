/* op_schema.h — what kiln knows about each operator independent of any backend: its name, the
 * opset versions it implements, and its shape/type inference.
 *
 * Each op family lives in its own file src/ir/infer_<family>.c and exports a table
 *     const kiln_op_schema kiln_schemas_<family>[] = { {...}, ..., {0} };
 * listed once in op_schema.c. An infer function reads the node's input values (dtype, dims, and
 * constant data when present) and sets its outputs' dtype and dims; a dimension it cannot know at
 * build time is KILN_DIM_UNKNOWN (or a symbolic dim carried from an input). It fails with
 * KILN_ERR_SHAPE / KILN_ERR_INVALID_ARGUMENT (message naming the problem) when the node is invalid
 * for the shapes it can see, and never fails merely because something is unknown. */
#ifndef KILN_IR_OP_SCHEMA_H
#define KILN_IR_OP_SCHEMA_H

#include "ir/graph.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The newest default-domain opset kiln knows. A model importing a newer one is refused per op. */
#define KILN_ONNX_OPSET_MAX 28

typedef kiln_status (*kiln_infer_fn)(kiln_graph *g, kiln_node *n);

typedef struct kiln_op_schema {
    const char *op_type;
    const char *domain;   /* "" for the default ONNX domain */
    int min_opset;        /* oldest opset of the domain whose semantics kiln implements */
    int max_opset;        /* newest; 0 means KILN_ONNX_OPSET_MAX */
    kiln_infer_fn infer;
} kiln_op_schema;

const kiln_op_schema *kiln_op_schema_find(const char *domain, const char *op_type);
/* Calls fn for every known schema (for coverage listings). */
void kiln_op_schema_each(void (*fn)(const kiln_op_schema *s, void *user), void *user);
/* Whether op (domain, op_type) is a view: its output 0 holds input 0's bytes unchanged, a new shape
 * at most (Reshape, Flatten, Squeeze, Unsqueeze, Identity, and Dropout in inference). */
bool kiln_op_is_view(const char *domain, const char *op_type);

/* ---- helpers for infer functions ---- */

/* Sets output i of n (if present) to dtype with rank ndim and the given dims (dims may be NULL when
 * ndim == -1, rank unknown). */
void kiln_infer_set(kiln_graph *g, const kiln_node *n, int i, kiln_dtype dtype, int ndim, const kiln_dim *dims);
/* Output i gets input j's dtype and shape. */
void kiln_infer_copy(kiln_graph *g, const kiln_node *n, int out_i, int in_j);
/* numpy broadcast of the given inputs' shapes (symbolic dims equal when their symbols are equal; a
 * dim of 1 yields the other); unknown when a rank is unknown. Fails on a static mismatch. */
kiln_status kiln_infer_broadcast(kiln_graph *g, const kiln_node *n, int ninputs, const int *input_idx,
                                 int *ndim, kiln_dim *dims);
/* True when input i is a constant; then *t points at its data. */
bool kiln_infer_const_input(const kiln_graph *g, const kiln_node *n, int i, const kiln_tensor **t);

#ifdef __cplusplus
}
#endif
#endif
