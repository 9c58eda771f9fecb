/* op_schema.c — the registry of operator schemas (one table per op family) and the shared helpers
 * that infer functions use. */
#include "ir/op_schema.h"

#include "core/status.h"

#include <string.h>

extern const kiln_op_schema kiln_schemas_elementwise[];
extern const kiln_op_schema kiln_schemas_fused[];
extern const kiln_op_schema kiln_schemas_nn[];
extern const kiln_op_schema kiln_schemas_quant[];
extern const kiln_op_schema kiln_schemas_reduce[];
extern const kiln_op_schema kiln_schemas_shape[];

static const kiln_op_schema *const g_families[] = {
    kiln_schemas_elementwise, kiln_schemas_nn, kiln_schemas_reduce, kiln_schemas_shape, kiln_schemas_fused,
    kiln_schemas_quant,
};

static bool domain_is_default(const char *d) { return !d || !d[0] || !strcmp(d, "ai.onnx"); }

static bool same_domain(const char *a, const char *b) {
    if (domain_is_default(a) || domain_is_default(b)) return domain_is_default(a) && domain_is_default(b);
    return !strcmp(a, b);
}

bool kiln_op_is_view(const char *domain, const char *op_type) {
    static const char *const ops[] = {"Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity", "Dropout", NULL};
    if (!domain_is_default(domain) || !op_type) return false;
    for (int i = 0; ops[i]; i++)
        if (!strcmp(ops[i], op_type)) return true;
    return false;
}

const kiln_op_schema *kiln_op_schema_find(const char *domain, const char *op_type) {
    for (size_t f = 0; f < sizeof g_families / sizeof *g_families; f++)
        for (const kiln_op_schema *s = g_families[f]; s->op_type; s++)
            if (!strcmp(s->op_type, op_type) && same_domain(s->domain, domain)) return s;
    return NULL;
}

void kiln_op_schema_each(void (*fn)(const kiln_op_schema *s, void *user), void *user) {
    for (size_t f = 0; f < sizeof g_families / sizeof *g_families; f++)
        for (const kiln_op_schema *s = g_families[f]; s->op_type; s++) fn(s, user);
}

void kiln_infer_set(kiln_graph *g, const kiln_node *n, int i, kiln_dtype dtype, int ndim, const kiln_dim *dims) {
    kiln_value *v = kiln_node_output(g, n, i);
    if (!v) return;
    v->dtype = dtype;
    v->ndim = ndim;
    for (int d = 0; d < ndim && d < KILN_MAX_DIMS; d++) v->dims[d] = dims[d];
}

void kiln_infer_copy(kiln_graph *g, const kiln_node *n, int out_i, int in_j) {
    kiln_value *in = kiln_node_input(g, n, in_j);
    if (!in) return;
    kiln_infer_set(g, n, out_i, in->dtype, in->ndim, in->dims);
}

kiln_status kiln_infer_broadcast(kiln_graph *g, const kiln_node *n, int ninputs, const int *input_idx,
                                 int *ndim, kiln_dim *dims) {
    int rank = 0;
    for (int k = 0; k < ninputs; k++) {
        kiln_value *v = kiln_node_input(g, n, input_idx[k]);
        if (!v) continue;
        if (v->ndim < 0) {
            *ndim = -1;
            return KILN_OK;
        }
        if (v->ndim > rank) rank = v->ndim;
    }
    for (int d = 0; d < rank; d++) dims[d] = kiln_dim_static(1);
    for (int k = 0; k < ninputs; k++) {
        kiln_value *v = kiln_node_input(g, n, input_idx[k]);
        if (!v) continue;
        for (int d = 0; d < v->ndim; d++) {
            kiln_dim in = v->dims[d], *o = &dims[rank - v->ndim + d];
            if (in.sym == 0 && in.value == 1) continue;
            if (o->sym == 0 && o->value == 1) {
                *o = in;
            } else if (in.sym == 0 && o->sym == 0) {
                if (in.value != o->value)
                    return kiln_error(KILN_ERR_SHAPE, "inputs cannot be broadcast: dimension %lld vs %lld",
                                      (long long)o->value, (long long)in.value);
            } else if (in.sym > 0 && o->sym > 0 && in.sym == o->sym) {
                /* same symbol */
            } else if (in.sym == 0) {
                *o = in; /* a static size other than 1 decides (the symbol must equal it or be 1) */
            } else if (o->sym != 0) {
                *o = KILN_DIM_UNKNOWN;
            }
        }
    }
    *ndim = rank;
    return KILN_OK;
}

bool kiln_infer_const_input(const kiln_graph *g, const kiln_node *n, int i, const kiln_tensor **t) {
    kiln_value *v = kiln_node_input(g, n, i);
    if (!v || !v->constant) return false;
    *t = v->constant;
    return true;
}
