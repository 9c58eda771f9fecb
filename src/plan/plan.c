/* plan.c — kernel selection and value lifetimes for the runtime. */
#include "plan/plan.h"

#include "core/status.h"

#include <stdlib.h>
#include <string.h>

kiln_status kiln_plan_create(const kiln_graph *g, const kiln_backend *backend, kiln_plan *out) {
    memset(out, 0, sizeof *out);
    out->backend = backend;
    out->kernels = calloc((size_t)g->nnodes + 1, sizeof *out->kernels);
    out->release_after = malloc(((size_t)g->nvalues + 1) * sizeof *out->release_after);
    if (!out->kernels || !out->release_after) {
        kiln_plan_free(out);
        return kiln_error(KILN_ERR_OUT_OF_MEMORY, "out of memory planning the engine");
    }
    for (int i = 0; i < g->nnodes; i++) {
        const kiln_node *n = &g->nodes[i];
        out->kernels[i] = backend->kernel_for(n);
        if (!out->kernels[i]) {
            kiln_plan_free(out);
            return kiln_error(KILN_ERR_UNSUPPORTED, "node '%s': the %s backend has no kernel for op %s", n->name,
                              backend->name, n->op_type);
        }
    }
    for (int v = 0; v < g->nvalues; v++) {
        const kiln_value *val = &g->values[v];
        out->release_after[v] = (val->constant || val->is_input || val->is_output) ? -1 : val->producer;
        if (val->constant) out->weight_bytes += val->constant->nbytes;
    }
    for (int i = 0; i < g->nnodes; i++)
        for (int k = 0; k < g->nodes[i].ninputs; k++) {
            int v = g->nodes[i].inputs[k];
            if (v >= 0 && out->release_after[v] >= 0 && out->release_after[v] < i) out->release_after[v] = i;
        }
    return KILN_OK;
}

void kiln_plan_free(kiln_plan *p) {
    free(p->kernels);
    free(p->release_after);
    memset(p, 0, sizeof *p);
}
