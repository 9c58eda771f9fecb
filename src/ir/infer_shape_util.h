/* infer_shape_util.h — small helpers shared by the shape family's infer functions
 * (infer_shape.c, infer_shape_index.c): dimension arithmetic that keeps symbolic dims where it can,
 * and input checks with clear messages. */
#ifndef KILN_IR_INFER_SHAPE_UTIL_H
#define KILN_IR_INFER_SHAPE_UTIL_H

#include "core/status.h"
#include "ir/op_schema.h"

#include <stdint.h>

static inline bool shp_dim_eq(kiln_dim a, kiln_dim b) {
    return (a.sym == 0 && b.sym == 0 && a.value == b.value) || (a.sym > 0 && a.sym == b.sym);
}

static inline bool shp_dim_is(kiln_dim d, int64_t v) { return d.sym == 0 && d.value == v; }

/* a * b: static when both are static (unknown if that overflows), the other operand when one is
 * static 1, else unknown. */
static inline kiln_dim shp_dim_mul(kiln_dim a, kiln_dim b) {
    if (a.sym == 0 && b.sym == 0)
        return a.value && b.value > INT64_MAX / a.value ? KILN_DIM_UNKNOWN : kiln_dim_static(a.value * b.value);
    if (shp_dim_is(a, 1)) return b;
    if (shp_dim_is(b, 1)) return a;
    if (shp_dim_is(a, 0) || shp_dim_is(b, 0)) return kiln_dim_static(0);
    return KILN_DIM_UNKNOWN;
}

/* Product of dims[lo..hi). */
static inline kiln_dim shp_dims_prod(const kiln_dim *dims, int lo, int hi) {
    kiln_dim p = kiln_dim_static(1);
    for (int i = lo; i < hi; i++) p = shp_dim_mul(p, dims[i]);
    return p;
}

/* The better-informed of two dims that must be equal: a static one wins, then a symbolic one. */
static inline kiln_dim shp_dim_merge(kiln_dim a, kiln_dim b) {
    if (a.sym == 0) return a;
    if (b.sym == 0) return b;
    return a.sym > 0 ? a : b;
}

/* Fails when input i has a known dtype that is not an integer type. */
static inline kiln_status shp_check_int_input(const kiln_graph *g, const kiln_node *n, int i, const char *what,
                                              bool int32_or_64_only) {
    kiln_value *v = kiln_node_input(g, n, i);
    if (!v || v->dtype == KILN_UNDEFINED) return KILN_OK;
    bool ok = int32_or_64_only ? (v->dtype == KILN_I32 || v->dtype == KILN_I64) : v->dtype == KILN_I64;
    if (!ok)
        return kiln_error(KILN_ERR_INVALID_ARGUMENT, "%s: input '%s' must be %s, got %s", n->op_type, what,
                          int32_or_64_only ? "int32 or int64" : "int64", kiln_dtype_name(v->dtype));
    return KILN_OK;
}

/* Fails when required input i is missing. */
static inline kiln_status shp_need_input(const kiln_graph *g, const kiln_node *n, int i, const char *what) {
    if (!kiln_node_input(g, n, i))
        return kiln_error(KILN_ERR_INVALID_ARGUMENT, "%s: required input '%s' (#%d) is missing", n->op_type, what, i);
    return KILN_OK;
}

/* Infer functions of infer_shape_index.c, registered in infer_shape.c's table. */
kiln_status kiln_infer_slice(kiln_graph *g, kiln_node *n);
kiln_status kiln_infer_gather(kiln_graph *g, kiln_node *n);
kiln_status kiln_infer_gather_elements(kiln_graph *g, kiln_node *n);
kiln_status kiln_infer_gather_nd(kiln_graph *g, kiln_node *n);
kiln_status kiln_infer_scatter(kiln_graph *g, kiln_node *n);
kiln_status kiln_infer_pad(kiln_graph *g, kiln_node *n);
kiln_status kiln_infer_resize(kiln_graph *g, kiln_node *n);

#endif
