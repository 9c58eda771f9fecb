/* pass_util.h — what the rewriting passes share: a use count per value kept current through every
 * edit, the closure check that proves a matched pattern can disappear, in-place rewrites that keep
 * the node order topological, constant and shape predicates, attribute setters, and the verbose log
 * line of each change ("fuse_conv_bn: Conv 'conv1' + BatchNormalization 'bn1' -> Conv 'conv1").
 *
 * Discipline: a pass calls pass_begin, edits the graph only through these helpers (or by adding
 * attributes to a node it just rewrote), and ends with pass_end, which sorts appended nodes into
 * place and drops the nodes it detached. Node pointers are invalidated by pass_add_node (the node
 * array may move): hold node ids across it. A detached node keeps its op_type but has no inputs or
 * outputs; pass_alive() tells them apart until pass_end removes them. */
#ifndef KILN_PASSES_PASS_UTIL_H
#define KILN_PASSES_PASS_UTIL_H

#include "ir/graph.h"

#include <stdbool.h>

typedef struct pass_ctx {
    kiln_graph *g;
    const char *pass; /* the pass name that prefixes each log line */
    int *uses;        /* per value id: how many node input slots read it */
    int cap_uses;
    bool appended; /* nodes were appended out of order: sort before returning */
    bool detached; /* nodes were detached: compact before returning */
    int changes;
} pass_ctx;

#define PASS_MAX_SET 32 /* the most nodes one matched pattern may hold */

kiln_status pass_begin(pass_ctx *c, kiln_graph *g, const char *pass);
/* Finishes the pass whose work returned st: on success sorts appended nodes, removes detached ones
 * and sets *changed; always frees the context. Returns st or the first error of the clean-up. */
kiln_status pass_end(pass_ctx *c, kiln_status st, bool *changed);

/* ---- looking at the graph ---- */

static inline bool pass_alive(const kiln_node *n) { return n->noutputs > 0; }
/* True when n is a live node of the default domain with this op_type. */
bool pass_is_op(const kiln_node *n, const char *op);
/* How many node input slots read value v (0 for v < 0). */
int pass_uses(const pass_ctx *c, int v);
/* The id of the node producing value v when it is a live `op` node (any op when op is NULL), or -1. */
int pass_producer(const pass_ctx *c, int v, const char *op);
/* The single node that reads v (once), when v is read exactly once and is not a graph output; or -1. */
int pass_sole_consumer(const pass_ctx *c, int v);
/* The distinct live nodes reading v, up to max of them, into ids; returns how many there are. */
int pass_consumers(const pass_ctx *c, int v, int *ids, int max);
/* The input of binary node n that is not value v (n must read v as input 0 or 1), or -2. */
int pass_other_input(const kiln_node *n, int v);

/* True when set[0..n) (distinct node ids, anchor among them) can be replaced by one node producing
 * anchor's output 0: every value the other nodes produce is read only by nodes of the set and is no
 * graph output, and anchor's other outputs are absent or unused. */
bool pass_closed(const pass_ctx *c, const int *set, int n, int anchor);

/* ---- constants and shapes ---- */

/* True when v is a constant of a numeric type with exactly one element; *x is its value. */
bool pass_const_scalar(const pass_ctx *c, int v, double *x);
/* True when v is a one-element constant equal to want within relative tolerance tol. */
bool pass_const_is(const pass_ctx *c, int v, double want, double tol);
/* Float types the fused CPU kernels compute (float32, and float16/bfloat16 through float32). */
bool pass_is_float(kiln_dtype t);
/* a and b are provably the same size: equal static sizes, or the same symbol. */
bool pass_same_dim(kiln_dim a, kiln_dim b);
/* a and b have known, equal ranks and provably equal dims. */
bool pass_same_shape(const kiln_value *a, const kiln_value *b);
/* The opset a new default-domain node gets: the model's, or min when that is newer. */
int pass_onnx_opset(const kiln_graph *g, int min);

/* ---- editing ---- */

/* A new constant value (named from hint) that takes t's storage. */
kiln_status pass_new_constant(pass_ctx *c, const char *hint, kiln_tensor *t, int *id);
/* A new 1-D int64 constant (named from hint) holding v[0..n): a shape, pads, Slice bounds. */
kiln_status pass_new_ints(pass_ctx *c, const char *hint, const int64_t *v, int n, int *id);
/* A new untyped value named from hint. */
kiln_status pass_new_value(pass_ctx *c, const char *hint, int *id);
/* Appends a node (out of order; pass_end sorts) with one output value out; *id is its node id. */
kiln_status pass_add_node(pass_ctx *c, const char *domain, const char *op, int opset, const char *name, int nin,
                          const int *ins, int out, int *id);
/* Node `node` reads value v as input k. */
void pass_set_input(pass_ctx *c, int node, int k, int v);
/* Every node input that reads value from reads value to instead (from must not be a graph output). */
void pass_replace_uses(pass_ctx *c, int from, int to);
/* Detaches node id: it reads and produces nothing and pass_end removes it. */
void pass_detach(pass_ctx *c, int id);
/* Replaces the closed pattern set[0..n) by one node: node `anchor` becomes op (domain, opset) named
 * name, reading ins[0..nin) (-1 = absent) and producing its own output 0; the other nodes are
 * detached. Its attributes become a deep copy of node attrs_from's (-1: none). The change is logged
 * as "<pass>: Op 'a' + Op 'b' ... -> op 'name'" plus detail (may be NULL). Returns the rewritten
 * node, to which the caller adds attributes. */
kiln_status pass_rewrite(pass_ctx *c, const int *set, int n, int anchor, const char *domain, const char *op, int opset,
                         const char *name, int nin, const int *ins, int attrs_from, const char *detail,
                         kiln_node **out);
/* Adds the "kiln" opset import to the graph when it is missing (before creating kiln-domain nodes). */
kiln_status pass_use_kiln_domain(pass_ctx *c);

/* Attribute setters (the value is copied into the graph). */
kiln_status pass_attr_int(kiln_graph *g, kiln_node *n, const char *name, int64_t v);
kiln_status pass_attr_float(kiln_graph *g, kiln_node *n, const char *name, float v);
kiln_status pass_attr_string(kiln_graph *g, kiln_node *n, const char *name, const char *v);
kiln_status pass_attr_ints(kiln_graph *g, kiln_node *n, const char *name, const int64_t *v, int count);
kiln_status pass_attr_floats(kiln_graph *g, kiln_node *n, const char *name, const float *v, int count);

#endif
