/* context.c — execution contexts: bind inputs (checked against the engine's types, with symbolic
 * dimensions bound consistently), run the plan node by node, hand out outputs. Intermediate tensors
 * are released after their last reader. */
#include "runtime/engine_internal.h"

#include "core/status.h"

#include <stdlib.h>
#include <string.h>

struct kiln_context {
    kiln_engine *e;
    kiln_tensor *vals;   /* [nvalues]: constants and bound inputs are views */
    bool *bound;         /* [ninputs] */
    kiln_tensor **in_ptrs, **out_ptrs; /* scratch for one node's argument lists */
    int max_args;
    bool ran;
};

kiln_status kiln_context_create(kiln_engine *e, kiln_context **out) {
    if (!e || !out) return kiln_error(KILN_ERR_INVALID_ARGUMENT, "kiln_context_create: engine and out are required");
    *out = NULL;
    kiln_context *c = calloc(1, sizeof *c);
    if (!c) return kiln_error(KILN_ERR_OUT_OF_MEMORY, "out of memory");
    c->e = e;
    const kiln_graph *g = e->g;
    for (int i = 0; i < g->nnodes; i++) {
        if (g->nodes[i].ninputs > c->max_args) c->max_args = g->nodes[i].ninputs;
        if (g->nodes[i].noutputs > c->max_args) c->max_args = g->nodes[i].noutputs;
    }
    c->vals = calloc((size_t)g->nvalues + 1, sizeof *c->vals);
    c->bound = calloc((size_t)g->ninputs + 1, sizeof *c->bound);
    c->in_ptrs = calloc((size_t)c->max_args + 1, sizeof *c->in_ptrs);
    c->out_ptrs = calloc((size_t)c->max_args + 1, sizeof *c->out_ptrs);
    if (!c->vals || !c->bound || !c->in_ptrs || !c->out_ptrs) {
        kiln_context_free(c);
        return kiln_error(KILN_ERR_OUT_OF_MEMORY, "out of memory");
    }
    for (int v = 0; v < g->nvalues; v++) {
        const kiln_tensor *t = g->values[v].constant;
        if (t) kiln_tensor_view(&c->vals[v], t->dtype, t->ndim, t->dims, t->data);
    }
    *out = c;
    return KILN_OK;
}

static void release_intermediates(kiln_context *c) {
    const kiln_graph *g = c->e->g;
    for (int v = 0; v < g->nvalues; v++)
        if (!g->values[v].constant && !g->values[v].is_input) kiln_tensor_release(&c->vals[v]);
}

void kiln_context_free(kiln_context *c) {
    if (!c) return;
    if (c->vals) release_intermediates(c);
    free(c->vals);
    free(c->bound);
    free(c->in_ptrs);
    free(c->out_ptrs);
    free(c);
}

/* "float32[batch=?,3,224,224]" for the engine's declaration of value v. */
static char *declared_str(const kiln_graph *g, const kiln_value *v, char *buf, size_t cap) {
    return kiln_value_type_str(g, v, buf, cap);
}

kiln_status kiln_context_set_input(kiln_context *c, const char *name, kiln_dtype dtype, int ndim,
                                   const int64_t *dims, const void *data) {
    if (!c || !name) return kiln_error(KILN_ERR_INVALID_ARGUMENT, "kiln_context_set_input: context and name are required");
    const kiln_graph *g = c->e->g;
    int k = 0;
    while (k < g->ninputs && strcmp(g->values[g->inputs[k]].name, name)) k++;
    if (k == g->ninputs) {
        char list[1024] = "";
        size_t n = 0;
        for (int i = 0; i < g->ninputs && n < sizeof list; i++)
            n += (size_t)snprintf(list + n, sizeof list - n, "%s'%s'", i ? ", " : "", g->values[g->inputs[i]].name);
        return kiln_error(KILN_ERR_INVALID_ARGUMENT, "the engine has no input '%s' (its inputs: %s)", name,
                          g->ninputs ? list : "none");
    }
    const kiln_value *v = &g->values[g->inputs[k]];
    char want[256], got[256];
    declared_str(g, v, want, sizeof want);
    if (ndim < 0 || ndim > KILN_MAX_DIMS)
        return kiln_error(KILN_ERR_SHAPE, "input '%s': rank %d is not supported", name, ndim);
    snprintf(got, sizeof got, "%s", kiln_dtype_name(dtype));
    kiln_shape_str(got + strlen(got), sizeof got - strlen(got), ndim, dims);
    if (dtype != v->dtype)
        return kiln_error(KILN_ERR_INVALID_ARGUMENT, "input '%s' expects %s, got %s (wrong dtype)", name, want, got);
    if (ndim != v->ndim)
        return kiln_error(KILN_ERR_SHAPE, "input '%s' expects %s, got %s (wrong rank)", name, want, got);
    for (int d = 0; d < ndim; d++) {
        if (dims[d] < 0) return kiln_error(KILN_ERR_SHAPE, "input '%s': negative dimension in %s", name, got);
        if (v->dims[d].sym == 0 && v->dims[d].value != dims[d])
            return kiln_error(KILN_ERR_SHAPE, "input '%s' expects %s, got %s (dimension %d must be %lld)", name, want,
                              got, d, (long long)v->dims[d].value);
    }
    if (ndim > 0 && !data && kiln_numel(ndim, dims) > 0)
        return kiln_error(KILN_ERR_INVALID_ARGUMENT, "input '%s': data is NULL", name);
    kiln_tensor_view(&c->vals[g->inputs[k]], dtype, ndim, dims, (void *)data);
    c->bound[k] = true;
    return KILN_OK;
}

/* Every input bound, and each symbolic dimension has one size across all inputs. */
static kiln_status check_bindings(kiln_context *c) {
    const kiln_graph *g = c->e->g;
    int64_t sym_size[64];
    int sym_from[64];
    for (int s = 0; s < 64; s++) sym_size[s] = -1;
    for (int k = 0; k < g->ninputs; k++) {
        const kiln_value *v = &g->values[g->inputs[k]];
        if (!c->bound[k]) return kiln_error(KILN_ERR_INVALID_ARGUMENT, "input '%s' is not bound", v->name);
        const kiln_tensor *t = &c->vals[g->inputs[k]];
        for (int d = 0; d < v->ndim; d++) {
            int s = v->dims[d].sym;
            if (s <= 0 || s > 64) continue;
            if (sym_size[s - 1] < 0) {
                sym_size[s - 1] = t->dims[d];
                sym_from[s - 1] = k;
            } else if (sym_size[s - 1] != t->dims[d]) {
                return kiln_error(KILN_ERR_SHAPE, "dimension '%s' is %lld in input '%s' but %lld in input '%s'",
                                  g->symbols[s - 1], (long long)sym_size[s - 1], g->values[g->inputs[sym_from[s - 1]]].name,
                                  (long long)t->dims[d], v->name);
            }
        }
    }
    return KILN_OK;
}

kiln_status kiln_context_run(kiln_context *c) {
    if (!c) return kiln_error(KILN_ERR_INVALID_ARGUMENT, "kiln_context_run: context is NULL");
    const kiln_graph *g = c->e->g;
    const kiln_plan *p = &c->e->plan;
    c->ran = false;
    release_intermediates(c);
    KILN_TRY(check_bindings(c));
    for (int i = 0; i < g->nnodes; i++) {
        const kiln_node *n = &g->nodes[i];
        for (int k = 0; k < n->ninputs; k++) c->in_ptrs[k] = n->inputs[k] >= 0 ? &c->vals[n->inputs[k]] : NULL;
        for (int k = 0; k < n->noutputs; k++) c->out_ptrs[k] = n->outputs[k] >= 0 ? &c->vals[n->outputs[k]] : NULL;
        kiln_status s = p->kernels[i](n, c->in_ptrs, n->ninputs, c->out_ptrs, n->noutputs);
        if (s != KILN_OK) {
            release_intermediates(c);
            return kiln_error_prefix(s, "node '%s' (%s)", n->name, n->op_type);
        }
        for (int k = 0; k < n->noutputs; k++) {
            int v = n->outputs[k];
            if (v >= 0 && c->vals[v].dtype == KILN_UNDEFINED) {
                release_intermediates(c);
                return kiln_error(KILN_ERR_INTERNAL, "node '%s' (%s) did not produce output %d", n->name, n->op_type, k);
            }
        }
        for (int k = 0; k < n->ninputs; k++) {
            int v = n->inputs[k];
            if (v >= 0 && p->release_after[v] == i) kiln_tensor_release(&c->vals[v]);
        }
        for (int k = 0; k < n->noutputs; k++) {
            int v = n->outputs[k];
            if (v >= 0 && p->release_after[v] == i) kiln_tensor_release(&c->vals[v]);
        }
    }
    c->ran = true;
    return KILN_OK;
}

kiln_status kiln_context_output(kiln_context *c, int i, kiln_tensor_desc *desc, const void **data) {
    if (!c || !desc || !data) return kiln_error(KILN_ERR_INVALID_ARGUMENT, "kiln_context_output: arguments are required");
    const kiln_graph *g = c->e->g;
    if (i < 0 || i >= g->noutputs)
        return kiln_error(KILN_ERR_INVALID_ARGUMENT, "output index %d is out of range (the engine has %d)", i, g->noutputs);
    if (!c->ran) return kiln_error(KILN_ERR_INVALID_ARGUMENT, "no outputs: the context has not run successfully");
    const kiln_value *v = &g->values[g->outputs[i]];
    const kiln_tensor *t = &c->vals[g->outputs[i]];
    memset(desc, 0, sizeof *desc);
    desc->name = v->name;
    desc->dtype = t->dtype;
    desc->ndim = t->ndim;
    for (int d = 0; d < t->ndim; d++) {
        desc->dims[d] = t->dims[d];
        desc->dim_names[d] = v->ndim > d && v->dims[d].sym > 0 ? g->symbols[v->dims[d].sym - 1] : NULL;
    }
    *data = t->data;
    return KILN_OK;
}
