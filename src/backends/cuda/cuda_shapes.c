/* cuda_shapes.c — the concrete shape of every value for one set of input shapes. Reuses the IR's
 * shape inference: a shallow copy of the graph whose value table is a private copy, with the inputs'
 * dims made static, runs every device node's schema->infer in order; host nodes (shape arithmetic)
 * are evaluated with the CPU kernels and their results enter the copy as constants, so that the
 * inference of the nodes after them (Reshape, Expand, Slice, ...) sees concrete values. Shape inputs
 * (cuda_internal.h) enter the copy as constants too, holding the caller's values. */
#include "backends/cuda/cuda_internal.h"

#include "core/status.h"
#include "ir/op_schema.h"

#include <stdlib.h>
#include <string.h>

/* Fails unless value v of gc has a known dtype and static, non-negative dims. */
static kiln_status check_static(const kiln_graph *gc, const kiln_node *n, int v) {
    const kiln_value *val = &gc->values[v];
    bool ok = val->dtype != KILN_UNDEFINED && val->ndim >= 0;
    for (int d = 0; ok && d < val->ndim; d++) ok = val->dims[d].sym == 0 && val->dims[d].value >= 0;
    if (ok) return KILN_OK;
    char type[256];
    return kiln_error(KILN_ERR_UNSUPPORTED, "cannot resolve the output shape of node '%s' (%s) on cuda: '%s' is %s for "
                      "these input shapes (shapes that depend on values computed on the device are not supported)",
                      n->name, n->op_type, val->name, kiln_value_type_str(gc, val, type, sizeof type));
}

/* Evaluates host node n on the CPU; its outputs land in host[] and become constants of gc. */
static kiln_status eval_host_node(const kiln_backend_engine *be, kiln_graph *gc, const kiln_node *n, kiln_tensor *host,
                                  kiln_tensor *views, kiln_tensor **in, kiln_tensor **out) {
    const kiln_graph *g = be->g;
    for (int k = 0; k < n->ninputs; k++) {
        int v = n->inputs[k];
        in[k] = NULL;
        if (v < 0) continue;
        kiln_value *val = &gc->values[v];
        if (val->constant) {
            in[k] = val->constant;
            continue;
        }
        /* a device value read only for its shape (Shape, Size): a view without data; its producer's
         * output was checked static already, and inputs are static by construction */
        KILN_TRY(check_static(gc, n, v));
        int64_t dims[KILN_MAX_DIMS];
        for (int d = 0; d < val->ndim; d++) dims[d] = val->dims[d].value;
        kiln_tensor_view(&views[k], val->dtype, val->ndim, dims, NULL);
        in[k] = &views[k];
    }
    for (int k = 0; k < n->noutputs; k++) out[k] = n->outputs[k] >= 0 ? &host[n->outputs[k]] : NULL;
    kiln_status s = be->host_exec[n - g->nodes](n, in, n->ninputs, out, n->noutputs);
    if (s != KILN_OK) return kiln_error_prefix(s, "node '%s' (%s) (on the host)", n->name, n->op_type);
    for (int k = 0; k < n->noutputs; k++) {
        if (!out[k]) continue;
        kiln_tensor *t = out[k];
        if (t->dtype == KILN_UNDEFINED)
            return kiln_error(KILN_ERR_INTERNAL, "node '%s' (%s): output %d was not produced", n->name, n->op_type, k);
        if (t->data && !t->owned) { /* a view of an input: keep a copy that lives as long as the plan */
            kiln_tensor copy = {0};
            KILN_TRY(kiln_tensor_copy(&copy, t));
            *t = copy;
        }
        kiln_value *val = &gc->values[n->outputs[k]];
        val->dtype = t->dtype;
        val->ndim = t->ndim;
        for (int d = 0; d < t->ndim; d++) val->dims[d] = kiln_dim_static(t->dims[d]);
        val->constant = t;
    }
    return KILN_OK;
}

static kiln_status infer_device_node(kiln_graph *gc, kiln_node *n) {
    const kiln_op_schema *schema = n->schema ? n->schema : kiln_op_schema_find(n->domain, n->op_type);
    if (!schema || !schema->infer)
        return kiln_error(KILN_ERR_UNSUPPORTED, "node '%s' (%s): no shape inference for this op", n->name, n->op_type);
    kiln_status s = schema->infer(gc, n);
    if (s != KILN_OK) return kiln_error_prefix(s, "node '%s' (%s)", n->name, n->op_type);
    for (int k = 0; k < n->noutputs; k++)
        if (n->outputs[k] >= 0) KILN_TRY(check_static(gc, n, n->outputs[k]));
    return KILN_OK;
}

static kiln_status resolve_nodes(kiln_backend_engine *be, kiln_graph *gc, kiln_tensor *host) {
    const kiln_graph *g = be->g;
    size_t cap = (size_t)be->max_args + 1;
    kiln_tensor *views = calloc(cap, sizeof *views);
    kiln_tensor **in = calloc(cap, sizeof *in), **out = calloc(cap, sizeof *out);
    kiln_status s = KILN_OK;
    if (!views || !in || !out) s = kiln_error(KILN_ERR_OUT_OF_MEMORY, "out of memory resolving shapes");
    for (int i = 0; i < g->nnodes && s == KILN_OK; i++) {
        kiln_node *n = &g->nodes[i];
        s = be->host_exec[i] ? eval_host_node(be, gc, n, host, views, in, out) : infer_device_node(gc, n);
    }
    free(views);
    free(in);
    free(out);
    return s;
}

/* A shape input's values, copied into *copy, become the constant of its value v. */
static kiln_status bind_shape_input(const kiln_tensor *in, kiln_value *v, kiln_tensor *copy) {
    if (!in->data && kiln_tensor_numel(in) > 0)
        return kiln_error(KILN_ERR_INVALID_ARGUMENT, "input '%s' is a shape input (its values decide shapes on cuda): "
                          "planning it needs its values", v->name);
    KILN_TRY(kiln_tensor_alloc(copy, v->dtype, in->ndim, in->dims));
    size_t bytes = (size_t)kiln_tensor_numel(in) * kiln_dtype_size(v->dtype);
    if (bytes) memcpy(copy->data, in->data, bytes);
    v->constant = copy;
    return KILN_OK;
}

kiln_status kiln_cuda_resolve_shapes(kiln_backend_engine *be, const kiln_tensor *inputs, kiln_value *vals,
                                     kiln_tensor *host) {
    const kiln_graph *g = be->g;
    memcpy(vals, g->values, (size_t)g->nvalues * sizeof *vals);
    for (int k = 0; k < g->ninputs; k++) {
        kiln_value *v = &vals[g->inputs[k]];
        v->ndim = inputs[k].ndim;
        for (int d = 0; d < inputs[k].ndim; d++) v->dims[d] = kiln_dim_static(inputs[k].dims[d]);
        if (be->kind[g->inputs[k]] == KILN_CUDA_HOST) KILN_TRY(bind_shape_input(&inputs[k], v, &host[g->inputs[k]]));
    }
    kiln_graph gc = *g;
    gc.values = vals;
    pthread_mutex_lock(&be->mu);
    kiln_status s = resolve_nodes(be, &gc, host);
    pthread_mutex_unlock(&be->mu);
    return s;
}
