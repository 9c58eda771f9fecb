/* graph_build.h — graph-building and graph-running helpers shared by the pass tests (test_passes.c,
 * test_layout.c): build a small kiln_graph node by node with the IR API, finish it (resolve, order,
 * infer, verify), run it op by op on the CPU kernels, and compare two graphs' outputs on the same
 * random inputs.
 *
 * Contracts:
 * - Header only, all static: include it once, from the test's main .c, after check.h (it uses
 *   CHECKF and REQUIRE_OK; its failures count in the including test's `failures`).
 * - One graph at a time: begin(opset) creates G (opset `opset` of the default domain, nothing else)
 *   and resets the random stream; every builder below adds to G; finish() returns G, which the
 *   caller owns from then on (kiln_graph_free). Builders exit(1) (REQUIRE_OK) on any IR error.
 * - Random numbers come from one LCG (frand, uniform in [-1, 1)): begin seeds it with 12345,
 *   make_inputs with 777, so a graph built twice by the same code gets the same constants, and two
 *   graphs with the same input types get the same inputs.
 * - Node and value ids are G's (kiln_graph) ids; -1 as an input id is an absent optional input.
 *   Nodes are named "OP_<node index>", their outputs "OP" (made unique by the graph). attr_* add to
 *   the node added last. */
#ifndef KILN_TESTS_UNIT_GRAPH_BUILD_H
#define KILN_TESTS_UNIT_GRAPH_BUILD_H

#include "backends/cpu/cpu_kernels.h"
#include "check.h"
#include "core/status.h"
#include "ir/graph.h"

#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define GB_MAX_IO 8 /* the most inputs and outputs check_same_outputs handles */

static kiln_graph *G; /* the graph being built */
static unsigned g_seed;

static inline float frand(void) {
    g_seed = g_seed * 1664525u + 1013904223u;
    return (float)((g_seed >> 8) & 0xFFFFFF) / (float)0x1000000 * 2.0f - 1.0f;
}

static inline void begin(int opset) {
    G = kiln_graph_create();
    REQUIRE_OK(G ? KILN_OK : KILN_ERR_OUT_OF_MEMORY);
    G->opsets = kiln_graph_alloc(G, sizeof *G->opsets);
    G->opsets[0].domain = "";
    G->opsets[0].version = opset;
    G->nopsets = 1;
    g_seed = 12345;
}

static inline int input(const char *name, kiln_dtype dt, int ndim, const int64_t *dims) {
    int id;
    REQUIRE_OK(kiln_graph_value(G, name, &id));
    kiln_value *v = &G->values[id];
    v->dtype = dt;
    v->ndim = ndim;
    for (int d = 0; d < ndim; d++) v->dims[d] = kiln_dim_static(dims[d]);
    REQUIRE_OK(kiln_graph_add_input(G, id));
    return id;
}

/* A constant from data (NULL: uniform random in [lo, hi)). */
static inline int constant(kiln_dtype dt, int ndim, const int64_t *dims, const double *data, double lo, double hi) {
    kiln_tensor t = {0};
    REQUIRE_OK(kiln_tensor_alloc(&t, dt, ndim, dims));
    for (int64_t i = 0; i < kiln_tensor_numel(&t); i++)
        kiln_tensor_set_f64(&t, i, data ? data[i] : lo + (hi - lo) * (frand() + 1.0) / 2.0);
    int id;
    REQUIRE_OK(kiln_graph_new_value(G, "const", &id));
    REQUIRE_OK(kiln_graph_set_constant(G, id, &t));
    return id;
}

/* A float32 scalar constant; an int64 1-D constant of n (<= 8) values. */
static inline int scalar(double v) { return constant(KILN_F32, 0, NULL, &v, 0, 0); }

static inline int ints(int n, const int64_t *v) {
    double d[8];
    for (int i = 0; i < n; i++) d[i] = (double)v[i];
    int64_t dims[1] = {n};
    return constant(KILN_I64, 1, dims, d, 0, 0);
}

static inline kiln_node *last_node(void) { return &G->nodes[G->nnodes - 1]; }

/* Adds node op of domain ("" or "kiln") reading ins[0..nin) (-1 = absent) with nout (1..4) outputs,
 * named "OP_<node index>"; returns output 0's id. */
static inline int node_dn(const char *domain, const char *op, int nin, const int *ins, int nout) {
    int outs[4];
    for (int i = 0; i < nout; i++) REQUIRE_OK(kiln_graph_new_value(G, op, &outs[i]));
    char name[64];
    snprintf(name, sizeof name, "%s_%d", op, G->nnodes);
    REQUIRE_OK(kiln_graph_add_node(G, op, domain, name, nin, ins, nout, outs, NULL));
    return outs[0];
}

/* node_dn in the default domain. */
static inline int node_n(const char *op, int nin, const int *ins, int nout) { return node_dn("", op, nin, ins, nout); }

/* node_dn with one output. */
static inline int node_in(const char *domain, const char *op, int nin, const int *ins) {
    return node_dn(domain, op, nin, ins, 1);
}

static inline int op1(const char *op, int a) { return node_n(op, 1, &a, 1); }
static inline int op2(const char *op, int a, int b) {
    int in[2] = {a, b};
    return node_n(op, 2, in, 1);
}

static inline void attr_int(const char *name, int64_t v) { kiln_node_add_attr(G, last_node(), name, KILN_ATTR_INT)->i = v; }
static inline void attr_float(const char *name, float v) { kiln_node_add_attr(G, last_node(), name, KILN_ATTR_FLOAT)->f = v; }
static inline void attr_ints(const char *name, int n, const int64_t *v) {
    kiln_attr *a = kiln_node_add_attr(G, last_node(), name, KILN_ATTR_INTS);
    a->ints = kiln_graph_alloc(G, sizeof *a->ints * (size_t)n);
    memcpy(a->ints, v, sizeof *a->ints * (size_t)n);
    a->n = n;
}
static inline void attr_string(const char *name, const char *s) {
    kiln_attr *a = kiln_node_add_attr(G, last_node(), name, KILN_ATTR_STRING);
    a->s = kiln_graph_strdup(G, s);
    a->s_len = strlen(s);
}
static inline void attr_tensor_f32(const char *name, float v) {
    kiln_attr *a = kiln_node_add_attr(G, last_node(), name, KILN_ATTR_TENSOR);
    a->t = kiln_graph_alloc(G, sizeof *a->t);
    memset(a->t, 0, sizeof *a->t);
    int64_t one = 1;
    REQUIRE_OK(kiln_tensor_alloc(a->t, KILN_F32, 1, &one));
    ((float *)a->t->data)[0] = v;
}

/* Transpose of x by perm[0..n); Reshape of x to the constant shape[0..n). */
static inline int transpose(int x, int n, const int64_t *perm) {
    int y = op1("Transpose", x);
    attr_ints("perm", n, perm);
    return y;
}

static inline int reshape(int x, int n, const int64_t *shape) { return op2("Reshape", x, ints(n, shape)); }

static inline void output(int v) { REQUIRE_OK(kiln_graph_add_output(G, v)); }

/* Resolves, orders and infers the graph being built; returns it. */
static inline kiln_graph *finish(void) {
    REQUIRE_OK(kiln_graph_resolve_ops(G, NULL));
    REQUIRE_OK(kiln_graph_toposort(G));
    REQUIRE_OK(kiln_graph_infer_shapes(G));
    REQUIRE_OK(kiln_graph_verify(G));
    return G;
}

/* ------------------------------------------------------------------------------ running */

/* Runs g on the CPU kernels node by node: outs[k] receives a copy of graph output k. */
static inline kiln_status run_graph(const kiln_graph *g, const kiln_tensor *inputs, kiln_tensor *outs) {
    kiln_tensor *vals = calloc((size_t)g->nvalues + 1, sizeof *vals);
    kiln_tensor **ptr = calloc((size_t)g->nvalues + 1, sizeof *ptr);
    kiln_status st = KILN_OK;
    for (int v = 0; v < g->nvalues; v++) ptr[v] = g->values[v].constant;
    for (int k = 0; k < g->ninputs; k++) ptr[g->inputs[k]] = (kiln_tensor *)&inputs[k];
    for (int i = 0; i < g->nnodes && st == KILN_OK; i++) {
        const kiln_node *n = &g->nodes[i];
        const kiln_cpu_kernel *kern = kiln_cpu_kernel_find(n->domain, n->op_type);
        if (!kern) {
            st = kiln_error(KILN_ERR_UNSUPPORTED, "no CPU kernel for %s", n->op_type);
            break;
        }
        kiln_tensor *in[16] = {0}, *out[8] = {0};
        for (int k = 0; k < n->ninputs; k++) in[k] = n->inputs[k] >= 0 ? ptr[n->inputs[k]] : NULL;
        for (int k = 0; k < n->noutputs; k++) out[k] = n->outputs[k] >= 0 ? &vals[n->outputs[k]] : NULL;
        st = kern->exec(n, in, n->ninputs, out, n->noutputs);
        if (st != KILN_OK) kiln_error_prefix(st, "node '%s' (%s)", n->name, n->op_type);
        for (int k = 0; k < n->noutputs; k++)
            if (n->outputs[k] >= 0) ptr[n->outputs[k]] = &vals[n->outputs[k]];
    }
    for (int k = 0; k < g->noutputs && st == KILN_OK; k++) st = kiln_tensor_copy(&outs[k], ptr[g->outputs[k]]);
    for (int v = 0; v < g->nvalues; v++) kiln_tensor_release(&vals[v]);
    free(vals);
    free(ptr);
    return st;
}

/* Random inputs for g's declared (static) input types: floats in [-1, 1), ints in [0, 3). */
static inline void make_inputs(const kiln_graph *g, kiln_tensor *inputs) {
    g_seed = 777;
    for (int k = 0; k < g->ninputs; k++) {
        const kiln_value *v = &g->values[g->inputs[k]];
        int64_t dims[KILN_MAX_DIMS];
        for (int d = 0; d < v->ndim; d++) dims[d] = v->dims[d].value;
        memset(&inputs[k], 0, sizeof inputs[k]);
        REQUIRE_OK(kiln_tensor_alloc(&inputs[k], v->dtype, v->ndim, dims));
        for (int64_t i = 0; i < kiln_tensor_numel(&inputs[k]); i++)
            kiln_tensor_set_f64(&inputs[k], i, v->dtype == KILN_BOOL ? frand() > 0 : frand());
    }
}

/* max |a - b| / max |b| over float tensors of the same shape (inf when dtypes or shapes differ, or
 * one has a NaN where the other has none; NaNs in the same place are skipped). */
static inline double rel_error(const kiln_tensor *a, const kiln_tensor *b) {
    if (a->dtype != b->dtype || a->ndim != b->ndim || memcmp(a->dims, b->dims, sizeof *a->dims * (size_t)a->ndim))
        return INFINITY;
    double num = 0, den = 1e-30;
    for (int64_t i = 0; i < kiln_tensor_numel(a); i++) {
        double x = kiln_tensor_get_f64(a, i), y = kiln_tensor_get_f64(b, i);
        if (isnan(x) != isnan(y)) return INFINITY;
        if (isnan(x)) continue;
        num = fmax(num, fabs(x - y));
        den = fmax(den, fabs(y));
    }
    return num / den;
}

/* How many nodes of g have op type op. */
static inline int count_op(const kiln_graph *g, const char *op) {
    int c = 0;
    for (int i = 0; i < g->nnodes; i++) c += !strcmp(g->nodes[i].op_type, op);
    return c;
}

/* Runs ref and opt (graphs with the same inputs and outputs, at most GB_MAX_IO each) on the same
 * random inputs (make_inputs of ref) and checks that opt runs and that every output's rel_error
 * against ref's is <= tol; the messages name label, the two graphs as opt_name and ref_name (e.g.
 * "optimized graph", "unfused graph") and the tolerance. ref must run (REQUIRE_OK). */
static inline void check_same_outputs(const char *label, const kiln_graph *ref, const char *ref_name,
                                      const kiln_graph *opt, const char *opt_name, double tol) {
    kiln_tensor in[GB_MAX_IO], out_ref[GB_MAX_IO] = {{0}}, out_opt[GB_MAX_IO] = {{0}};
    REQUIRE_OK(ref->ninputs <= GB_MAX_IO && ref->noutputs <= GB_MAX_IO ? KILN_OK : KILN_ERR_INTERNAL);
    make_inputs(ref, in);
    REQUIRE_OK(run_graph(ref, in, out_ref));
    kiln_status st = run_graph(opt, in, out_opt);
    CHECKF(st == KILN_OK, "%s: the %s does not run: %s", label, opt_name, kiln_last_error());
    for (int k = 0; st == KILN_OK && k < ref->noutputs; k++) {
        double e = rel_error(&out_opt[k], &out_ref[k]);
        CHECKF(e <= tol, "%s: output %d differs from the %s by %.3g (tolerance %.1g)", label, k, ref_name, e, tol);
    }
    for (int k = 0; k < ref->ninputs; k++) kiln_tensor_release(&in[k]);
    for (int k = 0; k < ref->noutputs; k++) {
        kiln_tensor_release(&out_ref[k]);
        kiln_tensor_release(&out_opt[k]);
    }
}

#endif
