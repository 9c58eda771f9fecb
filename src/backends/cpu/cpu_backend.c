/* cpu_backend.c — the CPU backend: runs the graph node by node with the reference kernels
 * (cpu_dispatch.c), matrix products through OpenBLAS. Intermediate tensors are released after their
 * last reader. */
#include "backends/backend.h"
#include "backends/cpu/cpu_plan.h"

#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/utsname.h>
#include <unistd.h>

struct kiln_backend_engine {
    const kiln_graph *g;
    kiln_cpu_plan plan;
};

struct kiln_backend_context {
    const kiln_backend_engine *be;
    kiln_tensor *vals;                 /* [nvalues]: constants and inputs are views */
    kiln_tensor **in_ptrs, **out_ptrs; /* scratch for one node's argument lists */
};

static kiln_status cpu_device_name(int device, char *buf, size_t cap) {
    struct utsname u;
    const char *machine = uname(&u) == 0 ? u.machine : "unknown";
    snprintf(buf, cap, "%s CPU, %ld cores, %s", machine, sysconf(_SC_NPROCESSORS_ONLN), openblas_get_config());
    (void)device;
    return KILN_OK;
}

static bool cpu_supports_precision(kiln_precision p) { return p == KILN_PRECISION_FP32; }

static void cpu_engine_free(kiln_backend_engine *be) {
    if (!be) return;
    kiln_cpu_plan_free(&be->plan);
    free(be);
}

static kiln_status cpu_engine_create(const kiln_graph *g, const kiln_engine_meta *meta, kiln_backend_engine **out) {
    (void)meta;
    kiln_backend_engine *be = calloc(1, sizeof *be);
    if (!be) return kiln_error(KILN_ERR_OUT_OF_MEMORY, "out of memory");
    be->g = g;
    kiln_status s = kiln_cpu_plan_create(g, &be->plan);
    if (s != KILN_OK) {
        cpu_engine_free(be);
        return s;
    }
    *out = be;
    return KILN_OK;
}

static void release_intermediates(kiln_backend_context *c) {
    const kiln_graph *g = c->be->g;
    for (int v = 0; v < g->nvalues; v++)
        if (!g->values[v].constant && !g->values[v].is_input) kiln_tensor_release(&c->vals[v]);
}

static void cpu_context_free(kiln_backend_context *c) {
    if (!c) return;
    if (c->vals) release_intermediates(c);
    free(c->vals);
    free(c->in_ptrs);
    free(c->out_ptrs);
    free(c);
}

static kiln_status cpu_context_create(kiln_backend_engine *be, kiln_backend_context **out) {
    const kiln_graph *g = be->g;
    int max_args = 0;
    for (int i = 0; i < g->nnodes; i++) {
        if (g->nodes[i].ninputs > max_args) max_args = g->nodes[i].ninputs;
        if (g->nodes[i].noutputs > max_args) max_args = g->nodes[i].noutputs;
    }
    kiln_backend_context *c = calloc(1, sizeof *c);
    if (!c) return kiln_error(KILN_ERR_OUT_OF_MEMORY, "out of memory");
    c->be = be;
    c->vals = calloc((size_t)g->nvalues + 1, sizeof *c->vals);
    c->in_ptrs = calloc((size_t)max_args + 1, sizeof *c->in_ptrs);
    c->out_ptrs = calloc((size_t)max_args + 1, sizeof *c->out_ptrs);
    if (!c->vals || !c->in_ptrs || !c->out_ptrs) {
        cpu_context_free(c);
        return kiln_error(KILN_ERR_OUT_OF_MEMORY, "out of memory");
    }
    for (int v = 0; v < g->nvalues; v++) {
        const kiln_tensor *t = g->values[v].constant;
        if (t) kiln_tensor_view(&c->vals[v], t->dtype, t->ndim, t->dims, t->data);
    }
    *out = c;
    return KILN_OK;
}

static kiln_status cpu_context_run(kiln_backend_context *c, const kiln_tensor *inputs, kiln_tensor *outputs) {
    const kiln_graph *g = c->be->g;
    const kiln_cpu_plan *p = &c->be->plan;
    release_intermediates(c);
    for (int k = 0; k < g->ninputs; k++)
        kiln_tensor_view(&c->vals[g->inputs[k]], inputs[k].dtype, inputs[k].ndim, inputs[k].dims, inputs[k].data);
    for (int i = 0; i < g->nnodes; i++) {
        const kiln_node *n = &g->nodes[i];
        for (int k = 0; k < n->ninputs; k++) c->in_ptrs[k] = n->inputs[k] >= 0 ? &c->vals[n->inputs[k]] : NULL;
        for (int k = 0; k < n->noutputs; k++) c->out_ptrs[k] = n->outputs[k] >= 0 ? &c->vals[n->outputs[k]] : NULL;
        kiln_status s = p->kernels[i](n, c->in_ptrs, n->ninputs, c->out_ptrs, n->noutputs);
        for (int k = 0; s == KILN_OK && k < n->noutputs; k++)
            if (n->outputs[k] >= 0 && c->vals[n->outputs[k]].dtype == KILN_UNDEFINED)
                s = kiln_error(KILN_ERR_INTERNAL, "output %d was not produced", k);
        if (s != KILN_OK) {
            release_intermediates(c);
            return kiln_error_prefix(s, "node '%s' (%s)", n->name, n->op_type);
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
    for (int k = 0; k < g->noutputs; k++) {
        const kiln_tensor *t = &c->vals[g->outputs[k]];
        kiln_tensor_view(&outputs[k], t->dtype, t->ndim, t->dims, t->data);
    }
    return KILN_OK;
}

const kiln_backend kiln_backend_cpu = {
    .name = "cpu",
    .device_name = cpu_device_name,
    .supports_precision = cpu_supports_precision,
    .engine_create = cpu_engine_create,
    .engine_free = cpu_engine_free,
    .context_create = cpu_context_create,
    .context_free = cpu_context_free,
    .context_run = cpu_context_run,
};
