/* cpu_plan.c — kernel selection and value lifetimes for the CPU backend. */
#include "backends/cpu/cpu_plan.h"

#include <stdlib.h>
#include <string.h>

kiln_status kiln_cpu_plan_create(const kiln_graph *g, kiln_cpu_plan *out) {
    memset(out, 0, sizeof *out);
    out->nnodes = g->nnodes;
    out->kernels = calloc((size_t)g->nnodes + 1, sizeof *out->kernels);
    out->prepared = calloc((size_t)g->nnodes + 1, sizeof *out->prepared);
    out->state = calloc((size_t)g->nnodes + 1, sizeof *out->state);
    out->release_after = malloc(((size_t)g->nvalues + 1) * sizeof *out->release_after);
    if (!out->kernels || !out->prepared || !out->state || !out->release_after) {
        kiln_cpu_plan_free(out);
        return kiln_error(KILN_ERR_OUT_OF_MEMORY, "out of memory planning the engine");
    }
    int missing = 0;
    char first[256] = "";
    for (int i = 0; i < g->nnodes; i++) {
        const kiln_node *n = &g->nodes[i];
        const kiln_cpu_kernel *k = kiln_cpu_kernel_find(n->domain, n->op_type);
        out->kernels[i] = k ? k->exec : NULL;
        if (!k && !missing++) snprintf(first, sizeof first, "node '%s' (%s)", n->name, n->op_type);
    }
    if (missing) {
        kiln_cpu_plan_free(out);
        return kiln_error(KILN_ERR_UNSUPPORTED, "the cpu backend has no kernel for %d node%s, the first: %s", missing,
                          missing > 1 ? "s" : "", first);
    }
    for (int i = 0; i < g->nnodes; i++) {
        const kiln_node *n = &g->nodes[i];
        const kiln_cpu_prepared_kernel *k = kiln_cpu_prepared_find(n->domain, n->op_type);
        kiln_status s = k ? k->prepare(g, n, &out->state[i]) : KILN_OK;
        if (s != KILN_OK) {
            kiln_cpu_plan_free(out);
            return kiln_error_prefix(s, "node '%s' (%s)", n->name, n->op_type);
        }
        if (out->state[i]) out->prepared[i] = k;
    }
    for (int v = 0; v < g->nvalues; v++) {
        const kiln_value *val = &g->values[v];
        out->release_after[v] = (val->constant || val->is_input || val->is_output) ? -1 : val->producer;
    }
    for (int i = 0; i < g->nnodes; i++)
        for (int k = 0; k < g->nodes[i].ninputs; k++) {
            int v = g->nodes[i].inputs[k];
            if (v >= 0 && out->release_after[v] >= 0 && out->release_after[v] < i) out->release_after[v] = i;
        }
    return KILN_OK;
}

void kiln_cpu_plan_free(kiln_cpu_plan *p) {
    for (int i = 0; p->state && i < p->nnodes; i++)
        if (p->state[i]) p->prepared[i]->free_state(p->state[i]);
    free(p->prepared);
    free(p->state);
    free(p->kernels);
    free(p->release_after);
    memset(p, 0, sizeof *p);
}
