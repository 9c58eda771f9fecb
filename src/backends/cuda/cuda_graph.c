/* cuda_graph.c — executing a shape plan on a context's stream: the boundary casts, then every device
 * node's kernel. The first run of a plan goes node by node, synchronizing after each, so that an
 * error (also an asynchronous one) names its node; the second run captures the same sequence into a
 * CUDA graph, which that run and every later one replays with one launch.
 *
 * Capture rules this relies on (cuda_kernels.h states them for the kernels): between BeginCapture and
 * EndCapture nothing allocates, synchronizes, copies synchronously or registers host memory; cuBLASLt
 * gets its workspace explicitly, cuDNN had its stream set when the context was made. The capture is
 * relaxed (cuDNN queries the device while it plans a convolution, which stricter modes forbid). A
 * capture that fails (a kernel doing something capture forbids) is not fatal: the plan then runs
 * eagerly, with a warning.
 *
 * Relaxed also means that nothing stops another thread from breaking the capture: a cudaFree, a
 * cudaMallocHost or a library handle made or destroyed while it runs invalidates it (cuDNN then
 * reports "operation failed due to a previous error during capture"). So captures hold the
 * process-wide setup lock (kiln_cuda_setup_lock), and so does every such call in the backend: first
 * runs (which load library kernels lazily), contexts made and freed, arenas grown, host values
 * uploaded. Replays and eager runs of a known plan do not take it. */
#include "backends/cuda/cuda_internal.h"
#include "backends/cuda/cuda_launchers.h"

#include "core/log.h"
#include "core/status.h"

#include <string.h>

/* The kernel's view of value v (v < 0: absent). */
static void fill_tensor(const kiln_backend_context *c, const kiln_cuda_plan *p, int v, kiln_cuda_tensor *t) {
    const kiln_backend_engine *be = c->be;
    memset(t, 0, sizeof *t);
    if (v < 0) {
        t->ndim = -1;
        return;
    }
    const kiln_value *val = &p->vals[v];
    t->dtype = be->dev_dtype[v];
    t->ndim = val->ndim;
    for (int d = 0; d < val->ndim; d++) t->dims[d] = val->dims[d].value;
    bool has_data = kiln_cuda_value_bytes(be, p, v) > 0;
    switch ((kiln_cuda_kind)be->kind[v]) {
    case KILN_CUDA_DEVICE:
        if (be->alias[v] >= 0 && be->kind[be->alias[v]] == KILN_CUDA_CONST) /* a view of a constant */
            t->data = has_data ? be->const_dev[be->alias[v]] : NULL;
        else
            t->data = has_data && p->off[v] >= 0 ? (char *)c->arena + p->off[v] : NULL;
        break;
    case KILN_CUDA_CONST:
        t->data = be->const_dev[v];
        t->host = be->g->values[v].constant->data;
        t->host_dtype = be->g->values[v].constant->dtype;
        break;
    case KILN_CUDA_HOST:
        t->data = has_data && p->off[v] >= 0 ? (char *)p->host_dev + p->off[v] : NULL;
        t->host = p->host[v].data;
        t->host_dtype = p->host[v].dtype;
        break;
    }
}

static kiln_status run_node(kiln_backend_context *c, const kiln_cuda_plan *p, int i) {
    const kiln_backend_engine *be = c->be;
    const kiln_node *n = &be->g->nodes[i];
    kiln_cuda_tensor *in = c->args, *out = c->args + be->max_args;
    for (int k = 0; k < n->ninputs; k++) fill_tensor(c, p, n->inputs[k], &in[k]);
    for (int k = 0; k < n->noutputs; k++) fill_tensor(c, p, n->outputs[k], &out[k]);
    const kiln_tactic *t = be->tactics ? &be->tactics[(size_t)p->profile * (size_t)be->g->nnodes + (size_t)i] : NULL;
    c->kc.tactic = t && t->kind != KILN_TACTIC_HEURISTIC ? t : NULL;
    c->kc.tactic_warned = be->tactic_warned ? &be->tactic_warned[i] : NULL;
    c->kc.state = &c->node_state[i];
    kiln_status s = be->kernels[i]->exec(n, in, n->ninputs, out, n->noutputs, &c->kc);
    c->kc.tactic = NULL;
    c->kc.state = NULL;
    if (s != KILN_OK) return kiln_error_prefix(s, "node '%s' (%s)", n->name, n->op_type);
    return KILN_OK;
}

/* Waits for the stream and names `what` if something failed on it. */
static kiln_status sync_checked(kiln_backend_context *c, const char *what) {
    cudaError_t e = cudaStreamSynchronize(c->kc.stream);
    if (e != cudaSuccess) return kiln_error_prefix(kiln_cuda_error(e, "cudaStreamSynchronize", __FILE__, __LINE__), "%s", what);
    return KILN_OK;
}

/* Enqueues the whole plan; with sync_each, waits after every step. */
static kiln_status enqueue_plan(kiln_backend_context *c, const kiln_cuda_plan *p, bool sync_each) {
    const kiln_backend_engine *be = c->be;
    const kiln_graph *g = be->g;
    char *arena = c->arena;
    for (int k = 0; k < g->ninputs; k++) {
        int v = g->inputs[k];
        if (p->in_stage[k] < 0) continue;
        kiln_status s = kiln_cuda_cast(arena + p->in_stage[k], g->values[v].dtype, arena + p->off[v], be->dev_dtype[v],
                                       kiln_cuda_value_numel(p, v), c->kc.stream);
        if (s != KILN_OK) return kiln_error_prefix(s, "casting input '%s' to %s", g->values[v].name, kiln_dtype_name(be->dev_dtype[v]));
    }
    if (sync_each) KILN_TRY(sync_checked(c, "uploading the inputs"));
    for (int i = 0; i < g->nnodes; i++) {
        if (!be->kernels[i] || be->host_exec[i] || be->view_node[i]) continue; /* views: their output is their input */
        kiln_cuda_timing_node(c, i, false);
        KILN_TRY(run_node(c, p, i));
        kiln_cuda_timing_node(c, i, true);
        if (sync_each) {
            const kiln_node *n = &g->nodes[i];
            char what[512];
            snprintf(what, sizeof what, "node '%s' (%s)", n->name, n->op_type);
            KILN_TRY(sync_checked(c, what));
        }
    }
    for (int k = 0; k < g->noutputs; k++) {
        int v = g->outputs[k];
        if (p->out_stage[k] < 0) continue;
        kiln_status s = kiln_cuda_cast(arena + p->off[v], be->dev_dtype[v], arena + p->out_stage[k], g->values[v].dtype,
                                       kiln_cuda_value_numel(p, v), c->kc.stream);
        if (s != KILN_OK) return kiln_error_prefix(s, "casting output '%s' to %s", g->values[v].name, kiln_dtype_name(g->values[v].dtype));
    }
    if (sync_each) KILN_TRY(sync_checked(c, "casting the outputs"));
    return KILN_OK;
}

/* The plan a capture enqueues (kiln_cuda_capture's argument). */
typedef struct plan_run {
    kiln_backend_context *c;
    kiln_cuda_plan *p;
} plan_run;

static kiln_status enqueue_plan_once(void *arg) {
    const plan_run *r = arg;
    return enqueue_plan(r->c, r->p, false);
}

/* Captures the plan into p->exec. KILN_OK also when capturing is impossible (p->no_graph is set then
 * and the plan was not enqueued); an error only for a failure outside the capture itself. */
static kiln_status capture(kiln_backend_context *c, kiln_cuda_plan *p) {
    char why[512];
    plan_run r = {c, p};
    KILN_TRY(kiln_cuda_capture(c->kc.stream, cudaStreamCaptureModeRelaxed, enqueue_plan_once, &r, &p->exec, why,
                               sizeof why));
    if (!why[0]) {
        p->exec_arena = c->arena;
        return KILN_OK;
    }
    /* A library kernel loaded lazily for the first time during the capture invalidates it; it is
     * loaded now, so one more attempt (on the next run) usually succeeds. */
    if (++p->capture_failures < 2) {
        KILN_LOG(KILN_LOG_VERBOSE, "cuda: CUDA graph capture failed, will retry once: %s", why);
    } else {
        KILN_LOG(KILN_LOG_WARN, "cuda: this shape plan cannot be captured as a CUDA graph, it runs without one: %s", why);
    }
    p->no_graph = true;
    return KILN_OK;
}

kiln_status kiln_cuda_plan_execute(kiln_backend_context *c, kiln_cuda_plan *p) {
    if (!p->has_device_work) return KILN_OK;
    if (p->runs == 0) {
        kiln_cuda_setup_lock();
        kiln_status s = enqueue_plan(c, p, true);
        kiln_cuda_setup_unlock();
        return s;
    }
    if (p->no_graph && p->capture_failures == 1 && p->runs >= 2) p->no_graph = false; /* the retry */
    if (!c->use_graphs || p->no_graph || (c->timing & KILN_TIMING_NODES)) return enqueue_plan(c, p, false);
    if (p->exec && p->exec_arena != c->arena) kiln_cuda_plan_drop_graph(p);
    if (!p->exec) {
        KILN_TRY(capture(c, p));
        if (p->no_graph) return enqueue_plan(c, p, false);
    }
    KILN_CUDA_TRY(cudaGraphLaunch(p->exec, c->kc.stream));
    return KILN_OK;
}
