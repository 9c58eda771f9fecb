/* cuda_timing.c — the cuda backend's timing hooks for kiln bench (backend.h): CUDA events around the
 * upload, the plan and the download of every run (KILN_TIMING_STAGES) and around every device node's
 * kernels (KILN_TIMING_NODES, which runs the plan without a CUDA graph), read after the run's
 * synchronization; plus the device memory the context and its engine hold. Nothing here runs while
 * timing is off: the marks return at once. */
#include "backends/cuda/cuda_internal.h"

#include "core/status.h"

#include <stdlib.h>
#include <string.h>

typedef struct kiln_cuda_timing {
    cudaEvent_t stage[4];  /* before the upload, after it, after the plan, after the download */
    cudaEvent_t *node_ev;  /* [2 * nnodes] with KILN_TIMING_NODES: start and end of each node */
    bool *node_rec;        /* [nnodes]: recorded in this run */
    double *node_ms;       /* [nnodes]: -1 for nodes that did not run on the device */
    kiln_value *values;    /* [nvalues]: concrete dims and device dtypes of the last run */
    double enqueue_ms, h2d_ms, compute_ms, d2h_ms;
} kiln_cuda_timing;

void kiln_cuda_timing_free(kiln_backend_context *c) {
    kiln_cuda_timing *t = c->tm;
    if (!t) return;
    for (int i = 0; i < 4; i++)
        if (t->stage[i]) cudaEventDestroy(t->stage[i]);
    int n = c->be->g->nnodes;
    for (int i = 0; t->node_ev && i < 2 * n; i++)
        if (t->node_ev[i]) cudaEventDestroy(t->node_ev[i]);
    free(t->node_ev);
    free(t->node_rec);
    free(t->node_ms);
    free(t->values);
    free(t);
    c->tm = NULL;
    c->timing = 0;
}

kiln_status kiln_cuda_timing_set(kiln_backend_context *c, unsigned flags) {
    if (!flags) {
        kiln_cuda_timing_free(c);
        return KILN_OK;
    }
    const kiln_graph *g = c->be->g;
    KILN_CUDA_TRY(cudaSetDevice(c->be->device));
    if (!c->tm) {
        c->tm = calloc(1, sizeof *c->tm);
        if (!c->tm) return kiln_error(KILN_ERR_OUT_OF_MEMORY, "out of memory");
        for (int i = 0; i < 4; i++) KILN_CUDA_TRY(cudaEventCreate(&c->tm->stage[i]));
    }
    kiln_cuda_timing *t = c->tm;
    if ((flags & KILN_TIMING_NODES) && !t->node_ev) {
        int n = g->nnodes;
        t->node_ev = calloc(2 * (size_t)n + 1, sizeof *t->node_ev);
        t->node_rec = calloc((size_t)n + 1, sizeof *t->node_rec);
        t->node_ms = calloc((size_t)n + 1, sizeof *t->node_ms);
        t->values = calloc((size_t)g->nvalues + 1, sizeof *t->values);
        if (!t->node_ev || !t->node_rec || !t->node_ms || !t->values) {
            kiln_cuda_timing_free(c);
            return kiln_error(KILN_ERR_OUT_OF_MEMORY, "out of memory");
        }
        for (int i = 0; i < 2 * n; i++) KILN_CUDA_TRY(cudaEventCreate(&t->node_ev[i]));
    }
    c->timing = flags;
    return KILN_OK;
}

void kiln_cuda_timing_stage(kiln_backend_context *c, int stage) {
    if (!c->timing) return;
    if (stage == 0 && (c->timing & KILN_TIMING_NODES)) memset(c->tm->node_rec, 0, (size_t)c->be->g->nnodes * sizeof *c->tm->node_rec);
    cudaEventRecord(c->tm->stage[stage], c->kc.stream);
}

void kiln_cuda_timing_node(kiln_backend_context *c, int node, bool end) {
    if (!(c->timing & KILN_TIMING_NODES)) return;
    cudaEventRecord(c->tm->node_ev[2 * node + end], c->kc.stream);
    if (end) c->tm->node_rec[node] = true;
}

/* Milliseconds between two recorded events. */
static kiln_status elapsed(cudaEvent_t a, cudaEvent_t b, double *out) {
    float ms = 0;
    KILN_CUDA_TRY(cudaEventElapsedTime(&ms, a, b));
    *out = ms;
    return KILN_OK;
}

kiln_status kiln_cuda_timing_finish(kiln_backend_context *c, const kiln_cuda_plan *p, double enqueue_ms) {
    kiln_cuda_timing *t = c->tm;
    const kiln_backend_engine *be = c->be;
    t->enqueue_ms = enqueue_ms;
    KILN_TRY(elapsed(t->stage[0], t->stage[1], &t->h2d_ms));
    KILN_TRY(elapsed(t->stage[1], t->stage[2], &t->compute_ms));
    KILN_TRY(elapsed(t->stage[2], t->stage[3], &t->d2h_ms));
    if (!(c->timing & KILN_TIMING_NODES)) return KILN_OK;
    for (int i = 0; i < be->g->nnodes; i++) {
        t->node_ms[i] = -1;
        if (t->node_rec[i]) KILN_TRY(elapsed(t->node_ev[2 * i], t->node_ev[2 * i + 1], &t->node_ms[i]));
    }
    for (int v = 0; v < be->g->nvalues; v++) {
        t->values[v] = p->vals[v];
        t->values[v].dtype = be->dev_dtype[v];
    }
    return KILN_OK;
}

void kiln_cuda_last_timing(kiln_backend_context *c, kiln_backend_timing *out) {
    kiln_cuda_timing *t = c->tm;
    bool nodes = c->timing & KILN_TIMING_NODES;
    memset(out, 0, sizeof *out);
    out->enqueue_ms = t ? t->enqueue_ms : -1;
    out->h2d_ms = t ? t->h2d_ms : -1;
    out->compute_ms = t ? t->compute_ms : -1;
    out->d2h_ms = t ? t->d2h_ms : -1;
    out->node_ms = nodes ? t->node_ms : NULL;
    out->values = nodes ? t->values : NULL;
    out->weight_bytes = c->be->const_bytes;
    out->activation_bytes = c->arena_bytes + (c->last_plan ? c->last_plan->host_dev_bytes : 0);
    out->workspace_bytes = c->kc.workspace_bytes;
    out->staging_bytes = c->pin_in_bytes + c->pin_out_bytes;
}
