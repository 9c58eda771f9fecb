/* fold_constants.c — constant folding: nodes whose inputs are all known at build time (weights,
 * shape computations over static shapes) are evaluated once with the CPU reference kernels. */
#include "passes/passes.h"

#include "backends/cpu/cpu_kernels.h"
#include "core/log.h"
#include "core/status.h"

#include <stdlib.h>

#define FOLD_MIN_LIMIT (1u << 20)

/* Evaluates node n; on success its outputs become constants and the node becomes dead (its outputs
 * are detached, so kiln_pass_remove_dead drops it). Returns false (and changes nothing) if the node
 * cannot or should not be folded. */
static bool fold_node(kiln_graph *g, kiln_node *n) {
    const kiln_cpu_kernel *k = kiln_cpu_kernel_find(n->domain, n->op_type);
    if (!k || n->noutputs == 0 || n->noutputs > 16 || n->ninputs > 64) return false;
    size_t in_bytes = 0;
    kiln_tensor *in[64];
    for (int i = 0; i < n->ninputs; i++) {
        kiln_value *v = kiln_node_input(g, n, i);
        if (v && !v->constant) return false;
        in[i] = v ? v->constant : NULL;
        if (v) in_bytes += v->constant->nbytes;
    }
    kiln_tensor outs[16] = {0};
    kiln_tensor *out[16];
    for (int i = 0; i < n->noutputs; i++) out[i] = n->outputs[i] >= 0 ? &outs[i] : NULL;
    kiln_status s = k->exec(n, in, n->ninputs, out, n->noutputs);
    size_t limit = in_bytes > FOLD_MIN_LIMIT ? in_bytes : FOLD_MIN_LIMIT;
    bool ok = s == KILN_OK;
    for (int i = 0; ok && i < n->noutputs; i++) {
        if (!out[i]) continue;
        kiln_value *v = &g->values[n->outputs[i]];
        if (outs[i].nbytes > limit || v->is_output) ok = false;
    }
    if (!ok) {
        if (s != KILN_OK) KILN_LOG(KILN_LOG_VERBOSE, "fold_constants: node '%s' (%s) not folded: %s", n->name, n->op_type, kiln_last_error());
        for (int i = 0; i < n->noutputs; i++) kiln_tensor_release(&outs[i]);
        return false;
    }
    for (int i = 0; i < n->noutputs; i++) {
        if (!out[i]) continue;
        int vid = n->outputs[i];
        if (outs[i].data && !outs[i].owned) { /* a kernel returned a view: keep our own copy */
            kiln_tensor copy = {0};
            if (kiln_tensor_copy(&copy, &outs[i]) != KILN_OK) return false;
            outs[i] = copy;
        }
        kiln_graph_set_constant(g, vid, &outs[i]);
        g->values[vid].producer = -1;
        n->outputs[i] = -1;
    }
    KILN_LOG(KILN_LOG_VERBOSE, "fold_constants: node '%s' (%s) evaluated at build time", n->name, n->op_type);
    return true;
}

kiln_status kiln_pass_fold_constants(kiln_graph *g, bool *changed) {
    *changed = false;
    for (int i = 0; i < g->nnodes; i++)
        if (fold_node(g, &g->nodes[i])) *changed = true;
    return KILN_OK;
}
