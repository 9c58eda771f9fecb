/* bench_layers.c — kiln bench's per-layer pass, after the measurement: runs one context with the
 * backend's node timing (KILN_TIMING_NODES: cuda then runs without CUDA graphs), which also gives the
 * concrete shape of every value, hence the FLOP / byte estimate of every layer and of the query, and
 * the activation memory. Without --profile it runs once (shapes and memory only); with it, at least
 * 10 times and 0.5 s, and every layer's time is the mean over those runs. */
#include "bench/bench_internal.h"

#include "core/status.h"
#include "ir/op_schema.h"

#include <stdlib.h>
#include <string.h>

/* The tactic text of node i: where and by what it ran (a cuda node that was not timed ran no kernel:
 * a view of its input's memory, or shape arithmetic on the host). */
static void tactic(const kiln_engine *e, const kiln_backend_timing *t, int i, char *buf, size_t cap) {
    const kiln_node *n = &e->g->nodes[i];
    bool fused = n->domain && n->domain[0];
    if (!strcmp(e->backend->name, "cuda") && t->node_ms && t->node_ms[i] < 0)
        snprintf(buf, cap, "%s", kiln_op_is_view(n->domain, n->op_type) ? "view (no kernel)" : "host (shape arithmetic)");
    else snprintf(buf, cap, "%s %skernel", e->backend->name, fused ? "fused " : "");
}

kiln_status kiln_bench_layers(kiln_engine *e, kiln_context *c, const kiln_bench_config *cfg, kiln_bench_result *r) {
    const kiln_graph *g = e->g;
    kiln_backend_context *bc = kiln_context_backend(c);
    r->layers = calloc((size_t)g->nnodes + 1, sizeof *r->layers);
    if (!r->layers) return kiln_error(KILN_ERR_OUT_OF_MEMORY, "out of memory");
    r->nlayers = g->nnodes;
    KILN_TRY(e->backend->context_set_timing(bc, KILN_TIMING_STAGES | KILN_TIMING_NODES));
    kiln_backend_timing t;
    double t_end = kiln_bench_now_ms() + 500;
    int runs = 0;
    kiln_status s = KILN_OK;
    do {
        s = kiln_context_run(c);
        if (s != KILN_OK) break;
        e->backend->context_last_timing(bc, &t);
        for (int i = 0; i < g->nnodes; i++) r->layers[i].ms += t.node_ms[i];
        runs++;
    } while (cfg->profile && (runs < 10 || kiln_bench_now_ms() < t_end));
    if (s == KILN_OK) s = e->backend->context_set_timing(bc, KILN_TIMING_STAGES);
    if (s != KILN_OK) return s;
    double total_ms = 0;
    for (int i = 0; i < g->nnodes; i++) {
        kiln_bench_layer *l = &r->layers[i];
        const kiln_node *n = &g->nodes[i];
        l->name = n->name;
        l->op = n->op_type;
        l->ms = cfg->profile && t.node_ms[i] >= 0 ? l->ms / runs : -1;
        if (l->ms > 0) total_ms += l->ms;
        tactic(e, &t, i, l->tactic, sizeof l->tactic);
        const kiln_value *y = n->noutputs > 0 && n->outputs[0] >= 0 ? &t.values[n->outputs[0]] : NULL;
        snprintf(l->precision, sizeof l->precision, "%s", y ? kiln_dtype_name(y->dtype) : "");
        kiln_bench_node_cost(n, t.values, &l->flops, &l->bytes);
        if (!(t.node_ms[i] < 0 && !strcmp(e->backend->name, "cuda"))) { /* host nodes move no device bytes */
            r->flops += l->flops;
            r->bytes += l->bytes;
        }
    }
    for (int i = 0; i < g->nnodes; i++) r->layers[i].share = total_ms > 0 && r->layers[i].ms > 0 ? r->layers[i].ms / total_ms : 0;
    r->profile_runs = cfg->profile ? runs : 0;
    kiln_bench_memory *m = &r->mem;
    m->device = !strcmp(e->backend->name, "cuda");
    m->weights = t.weight_bytes;
    m->activations = t.activation_bytes;
    m->workspace = t.workspace_bytes;
    m->staging = t.staging_bytes;
    m->total = m->weights + (size_t)cfg->streams * (size_t)r->contexts_per_stream * (m->activations + m->workspace + m->staging);
    return KILN_OK;
}
