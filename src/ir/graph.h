/* graph.h — kiln's intermediate representation: a graph of nodes over typed values whose dimensions
 * are static, symbolic (a named run-time size such as "batch") or unknown.
 *
 * Values and nodes are identified by their index in g->values / g->nodes. A node refers to its
 * inputs and outputs by value id; -1 marks an absent optional input or output. Constant values
 * (ONNX initializers, Constant nodes after import, folded results) carry their data in
 * value->constant. Names, attribute arrays and constant tensors are owned by the graph and freed
 * with it. */
#ifndef KILN_IR_GRAPH_H
#define KILN_IR_GRAPH_H

#include "core/arena.h"
#include "core/tensor.h"
#include "kiln/kiln.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

/* One dimension. sym == 0: static, value >= 0. sym > 0: symbolic, named g->symbols[sym - 1].
 * sym < 0: unknown (not even a name). value is -1 whenever sym != 0. */
typedef struct kiln_dim {
    int64_t value;
    int32_t sym;
} kiln_dim;

#define KILN_DIM_UNKNOWN ((kiln_dim){-1, -1})
static inline kiln_dim kiln_dim_static(int64_t v) { return (kiln_dim){v, 0}; }
static inline bool kiln_dim_is_static(kiln_dim d) { return d.sym == 0; }

/* Attribute kinds, numbered as ONNX's AttributeProto.AttributeType. */
typedef enum kiln_attr_type {
    KILN_ATTR_UNDEFINED = 0,
    KILN_ATTR_FLOAT = 1,
    KILN_ATTR_INT = 2,
    KILN_ATTR_STRING = 3,
    KILN_ATTR_TENSOR = 4,
    KILN_ATTR_GRAPH = 5,
    KILN_ATTR_FLOATS = 6,
    KILN_ATTR_INTS = 7,
    KILN_ATTR_STRINGS = 8,
    KILN_ATTR_TENSORS = 9,
    KILN_ATTR_GRAPHS = 10,
    KILN_ATTR_SPARSE_TENSOR = 11,
    KILN_ATTR_SPARSE_TENSORS = 12,
    KILN_ATTR_TYPE_PROTO = 13,
    KILN_ATTR_TYPE_PROTOS = 14,
} kiln_attr_type;

struct kiln_graph;

typedef struct kiln_attr {
    const char *name;
    kiln_attr_type type;
    float f;                /* FLOAT */
    int64_t i;              /* INT */
    const char *s;          /* STRING (NUL-terminated; s_len bytes, may hold NULs) */
    size_t s_len;
    kiln_tensor *t;         /* TENSOR */
    struct kiln_graph *g;   /* GRAPH (kept for inspection; not executed) */
    int n;                  /* element count of the list kinds below */
    float *floats;          /* FLOATS */
    int64_t *ints;          /* INTS */
    const char **strings;   /* STRINGS */
    kiln_tensor *tensors;   /* TENSORS */
    struct kiln_graph **graphs; /* GRAPHS */
} kiln_attr;

struct kiln_op_schema;

typedef struct kiln_value {
    const char *name;
    kiln_dtype dtype;        /* KILN_UNDEFINED until known */
    int ndim;                /* -1: rank unknown */
    kiln_dim dims[KILN_MAX_DIMS];
    kiln_tensor *constant;   /* non-NULL: a constant (its data is the value) */
    int producer;            /* node id, or -1 (graph input, constant, or not produced yet) */
    bool is_input;           /* a graph input the caller binds at run time */
    bool is_output;          /* a graph output */
} kiln_value;

typedef struct kiln_node {
    const char *name;        /* never NULL; import names unnamed nodes "<op_type>_<index>" */
    const char *op_type;     /* "Conv" */
    const char *domain;      /* "" for the default ONNX domain */
    int opset;               /* the model's opset version for this node's domain */
    int ninputs, noutputs;
    int *inputs, *outputs;   /* value ids; -1 = absent optional */
    int nattrs;
    kiln_attr *attrs;
    const struct kiln_op_schema *schema; /* set by kiln_graph_resolve_ops */
} kiln_node;

typedef struct kiln_opset_import {
    const char *domain;
    int64_t version;
} kiln_opset_import;

typedef struct kiln_graph {
    kiln_arena *arena;
    kiln_value *values;
    int nvalues, cap_values;
    kiln_node *nodes;
    int nnodes, cap_nodes;
    int *inputs, ninputs, cap_inputs;    /* value ids bound at run time, in declaration order */
    int *outputs, noutputs, cap_outputs; /* value ids, in declaration order */
    const char **symbols;                /* symbolic dimension names, sym 1..nsymbols */
    int nsymbols, cap_symbols;
    kiln_opset_import *opsets;
    int nopsets;
    const char *name;
    const char *producer;                /* "pytorch 2.5" */
    int64_t ir_version;
    void *name_index;                    /* private: name -> value id hash */
    void *keepalive;                     /* private: mapped files the constants point into */
} kiln_graph;

/* Creation and destruction. kiln_graph_create returns NULL on out of memory; the caller owns it. */
kiln_graph *kiln_graph_create(void);
void kiln_graph_free(kiln_graph *g); /* accepts NULL; frees everything the graph owns */

/* Keeps a resource alive as long as the graph (constants may point into it); release(ptr) is called
 * by kiln_graph_free. */
kiln_status kiln_graph_keep_alive(kiln_graph *g, void *ptr, void (*release)(void *));

/* Values. kiln_graph_value returns the id of the value called name, creating it (untyped) when new.
 * name may be "" for an anonymous value (which then gets a fresh unique name). */
kiln_status kiln_graph_value(kiln_graph *g, const char *name, int *id);
/* The id of an existing value, or -1. */
int kiln_graph_find_value(const kiln_graph *g, const char *name);
/* A new value with a unique name built from hint ("hint", "hint_1", ...). */
kiln_status kiln_graph_new_value(kiln_graph *g, const char *hint, int *id);
/* Makes value id a constant holding t: the graph takes ownership of *t's storage (t is left empty).
 * Sets dtype and static dims from t. */
kiln_status kiln_graph_set_constant(kiln_graph *g, int id, kiln_tensor *t);
/* The symbol id for a dimension name, adding it when new (1-based). */
kiln_status kiln_graph_symbol(kiln_graph *g, const char *name, int32_t *sym);
kiln_status kiln_graph_add_input(kiln_graph *g, int value_id);
kiln_status kiln_graph_add_output(kiln_graph *g, int value_id);

/* Nodes. Adds a node and returns its id; inputs/outputs are copied. Sets each output's producer. */
kiln_status kiln_graph_add_node(kiln_graph *g, const char *op_type, const char *domain, const char *name,
                                int ninputs, const int *inputs, int noutputs, const int *outputs,
                                int *node_id);
/* Frees what node n's attributes own (tensors, subgraphs) and leaves it without attributes. */
void kiln_node_release_attrs(kiln_node *n);
/* Appends a zeroed attribute to node n and returns it for filling (name is copied). */
kiln_attr *kiln_node_add_attr(kiln_graph *g, kiln_node *n, const char *name, kiln_attr_type type);
/* The opset version the graph imports for domain ("" and "ai.onnx" are the same), or 0. */
int64_t kiln_graph_opset(const kiln_graph *g, const char *domain);

/* Strings and arrays owned by the graph (NULL on out of memory). */
char *kiln_graph_strdup(kiln_graph *g, const char *s);
/* Adds an opset import of domain at version to g unless g already imports domain; fails only out of
 * memory. */
kiln_status kiln_graph_import_opset(kiln_graph *g, const char *domain, int64_t version);
void *kiln_graph_alloc(kiln_graph *g, size_t size);

/* Attribute lookup. */
const kiln_attr *kiln_node_attr(const kiln_node *n, const char *name);
int64_t kiln_attr_int(const kiln_node *n, const char *name, int64_t dflt);
float kiln_attr_float(const kiln_node *n, const char *name, float dflt);
/* The string attribute, or dflt when absent. */
const char *kiln_attr_string(const kiln_node *n, const char *name, const char *dflt);
/* The INTS attribute's array and count, or NULL and *count = 0 when absent. */
const int64_t *kiln_attr_ints(const kiln_node *n, const char *name, int *count);
const float *kiln_attr_floats(const kiln_node *n, const char *name, int *count);

/* The i-th input/output value of node n, or NULL when absent (i out of range or id -1). */
kiln_value *kiln_node_input(const kiln_graph *g, const kiln_node *n, int i);
kiln_value *kiln_node_output(const kiln_graph *g, const kiln_node *n, int i);

/* Looks up every node's op schema and checks its opset; reports *all* unsupported nodes in one
 * message (op, domain, opset, node name) and fails with KILN_ERR_UNSUPPORTED if any. When
 * report != NULL, each unsupported node is also written there, one per line. */
kiln_status kiln_graph_resolve_ops(kiln_graph *g, FILE *report);
/* Orders nodes so that every node comes after the producers of its inputs; fails on a cycle or an
 * input that nothing produces. Node ids change; value->producer is updated. */
kiln_status kiln_graph_toposort(kiln_graph *g);
/* Runs every node's shape inference in order (after resolve_ops and toposort). Fails naming the node when
 * one fails, or when a static output shape holds more than KILN_MAX_TENSOR_ELEMENTS elements. */
kiln_status kiln_graph_infer_shapes(kiln_graph *g);
/* Structural checks: ids in range, single producer per value, producers precede consumers,
 * outputs produced, inputs untyped nowhere. Fails with KILN_ERR_INTERNAL naming the problem. */
kiln_status kiln_graph_verify(const kiln_graph *g);
/* Rebuilds the name index after values were renumbered or renamed. */
kiln_status kiln_graph_reindex(kiln_graph *g);
/* Removes nodes whose outputs nobody needs and values nobody references; renumbers ids. */
kiln_status kiln_graph_compact(kiln_graph *g, int *removed_nodes);

/* Human-readable text: "float32[batch,3,224,224]". */
char *kiln_value_type_str(const kiln_graph *g, const kiln_value *v, char *buf, size_t cap);
/* Prints inputs, outputs and every node with its output types. */
void kiln_graph_print(const kiln_graph *g, FILE *f);

#ifdef __cplusplus
}
#endif
#endif
