/* cpu_backend.c — the CPU backend: runs the graph node by node with the reference kernels
 * (cpu_dispatch.c), matrix products through OpenBLAS, threads from the process's pool
 * (core/threadpool.h). Intermediate tensors are released after their last reader. With timing on (kiln bench) a run measures its host wall time and, with
 * KILN_TIMING_NODES, every node's time, every value's concrete shape and the peak of live
 * intermediate bytes; with timing off the loop only tests one flag per node. */
#include "backends/backend.h"
#include "backends/cpu/cpu_gemm.h"
#include "backends/cpu/cpu_kernels.h"
#include "backends/cpu/cpu_plan.h"
#include "backends/cpu/packed_weights.h"
#include "ir/fused_ops.h"

#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/utsname.h>
#include <time.h>
#include <unistd.h>

struct kiln_backend_engine {
    const kiln_graph *g;
    kiln_cpu_plan plan;
};

struct kiln_backend_context {
    const kiln_backend_engine *be;
    kiln_tensor *vals;                 /* [nvalues]: constants and inputs are views */
    kiln_tensor **in_ptrs, **out_ptrs; /* scratch for one node's argument lists */
    unsigned timing;                   /* KILN_TIMING_* flags; 0 = off */
    double run_ms;                     /* host wall time of the last run (timing on) */
    double *node_ms;                   /* [nnodes] (KILN_TIMING_NODES) */
    kiln_value *shapes;                /* [nvalues] (KILN_TIMING_NODES): concrete dims of the last run */
    size_t live_bytes, peak_bytes;     /* owned intermediates alive now / at most (KILN_TIMING_NODES) */
};

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static kiln_status cpu_device_name(int device, char *buf, size_t cap) {
    struct utsname u;
    const char *machine = uname(&u) == 0 ? u.machine : "unknown";
    snprintf(buf, cap, "%s CPU, %ld cores, %s", machine, sysconf(_SC_NPROCESSORS_ONLN), openblas_get_config());
    (void)device;
    return KILN_OK;
}

static bool cpu_supports_precision(kiln_precision p) { return p == KILN_PRECISION_FP32; }

/* Every kiln-domain fused op with a kernel in the cpu tables (fused.c), at the one precision it builds. */
static bool cpu_runs_fused_op(const char *op_type, const kiln_build_options *opts) {
    return kiln_cpu_kernel_find(KILN_FUSED_DOMAIN, op_type) != NULL;
}

static void cpu_engine_free(kiln_backend_engine *be) {
    if (!be) return;
    kiln_cpu_plan_free(&be->plan);
    free(be);
}

static kiln_status cpu_engine_create(const kiln_graph *g, const kiln_engine_meta *meta, const kiln_build_options *opts,
                                     kiln_backend_engine **out) {
    (void)meta;
    kiln_backend_engine *be = calloc(1, sizeof *be);
    if (!be) return kiln_error(KILN_ERR_OUT_OF_MEMORY, "out of memory");
    be->g = g;
    kiln_cpu_gemm_init(); /* OpenBLAS single-threaded before any kernel runs: results never depend on order */
    kiln_status s = kiln_cpu_plan_create(g, &be->plan);
    if (s != KILN_OK) {
        cpu_engine_free(be);
        return s;
    }
    kiln_cpu_log_repacked(g);
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
    free(c->node_ms);
    free(c->shapes);
    free(c->in_ptrs);
    free(c->out_ptrs);
    free(c);
}

static kiln_status cpu_context_create(kiln_backend_engine *be, const kiln_context_options *opts,
                                      kiln_backend_context **out) {
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

/* KILN_TIMING_NODES bookkeeping for value v, just set: its concrete shape and the live bytes. */
static void note_value(kiln_backend_context *c, int v) {
    const kiln_tensor *t = &c->vals[v];
    kiln_value *s = &c->shapes[v];
    s->dtype = t->dtype;
    s->ndim = t->ndim;
    for (int d = 0; d < t->ndim; d++) s->dims[d] = kiln_dim_static(t->dims[d]);
    if (t->owned) c->live_bytes += t->nbytes;
    if (c->live_bytes > c->peak_bytes) c->peak_bytes = c->live_bytes;
}

/* KILN_TIMING_NODES bookkeeping after node i ran (started at t0): its time and its outputs. */
static void note_node(kiln_backend_context *c, const kiln_node *n, int i, double t0) {
    c->node_ms[i] = now_ms() - t0;
    for (int k = 0; k < n->noutputs; k++)
        if (n->outputs[k] >= 0) note_value(c, n->outputs[k]);
}

/* Releases intermediate v after its last reader (counting its bytes out when nodes are timed). */
static void release_value(kiln_backend_context *c, int v) {
    if ((c->timing & KILN_TIMING_NODES) && c->vals[v].owned) c->live_bytes -= c->vals[v].nbytes;
    kiln_tensor_release(&c->vals[v]);
}

static kiln_status cpu_context_run(kiln_backend_context *c, const kiln_tensor *inputs, kiln_tensor *outputs) {
    const kiln_graph *g = c->be->g;
    const kiln_cpu_plan *p = &c->be->plan;
    bool nodes = c->timing & KILN_TIMING_NODES;
    double t_run = c->timing ? now_ms() : 0;
    release_intermediates(c);
    c->live_bytes = c->peak_bytes = 0;
    for (int k = 0; k < g->ninputs; k++) {
        kiln_tensor_view(&c->vals[g->inputs[k]], inputs[k].dtype, inputs[k].ndim, inputs[k].dims, inputs[k].data);
        if (nodes) note_value(c, g->inputs[k]);
    }
    for (int i = 0; i < g->nnodes; i++) {
        double t_node = nodes ? now_ms() : 0;
        const kiln_node *n = &g->nodes[i];
        for (int k = 0; k < n->ninputs; k++) c->in_ptrs[k] = n->inputs[k] >= 0 ? &c->vals[n->inputs[k]] : NULL;
        for (int k = 0; k < n->noutputs; k++) c->out_ptrs[k] = n->outputs[k] >= 0 ? &c->vals[n->outputs[k]] : NULL;
        kiln_status s = p->state[i] ? p->prepared[i]->exec(n, p->state[i], c->in_ptrs, n->ninputs, c->out_ptrs, n->noutputs)
                                    : p->kernels[i](n, c->in_ptrs, n->ninputs, c->out_ptrs, n->noutputs);
        for (int k = 0; s == KILN_OK && k < n->noutputs; k++)
            if (n->outputs[k] >= 0 && c->vals[n->outputs[k]].dtype == KILN_UNDEFINED)
                s = kiln_error(KILN_ERR_INTERNAL, "output %d was not produced", k);
        if (s != KILN_OK) {
            release_intermediates(c);
            return kiln_error_prefix(s, "node '%s' (%s)", n->name, n->op_type);
        }
        if (nodes) note_node(c, n, i, t_node);
        for (int k = 0; k < n->ninputs; k++) {
            int v = n->inputs[k];
            if (v >= 0 && p->release_after[v] == i) release_value(c, v);
        }
        for (int k = 0; k < n->noutputs; k++) {
            int v = n->outputs[k];
            if (v >= 0 && p->release_after[v] == i) release_value(c, v);
        }
    }
    if (c->timing) c->run_ms = now_ms() - t_run;
    for (int k = 0; k < g->noutputs; k++) {
        const kiln_tensor *t = &c->vals[g->outputs[k]];
        kiln_tensor_view(&outputs[k], t->dtype, t->ndim, t->dims, t->data);
    }
    return KILN_OK;
}

static kiln_status cpu_context_set_timing(kiln_backend_context *c, unsigned flags) {
    const kiln_graph *g = c->be->g;
    if ((flags & KILN_TIMING_NODES) && !c->node_ms) {
        c->node_ms = calloc((size_t)g->nnodes + 1, sizeof *c->node_ms);
        c->shapes = malloc(((size_t)g->nvalues + 1) * sizeof *c->shapes);
        if (!c->node_ms || !c->shapes) {
            free(c->node_ms);
            free(c->shapes);
            c->node_ms = NULL;
            c->shapes = NULL;
            return kiln_error(KILN_ERR_OUT_OF_MEMORY, "out of memory");
        }
        memcpy(c->shapes, g->values, (size_t)g->nvalues * sizeof *c->shapes);
    }
    c->timing = flags;
    return KILN_OK;
}

static void cpu_context_last_timing(kiln_backend_context *c, kiln_backend_timing *out) {
    const kiln_graph *g = c->be->g;
    bool nodes = c->timing & KILN_TIMING_NODES;
    memset(out, 0, sizeof *out);
    out->enqueue_ms = out->h2d_ms = out->d2h_ms = -1;
    out->compute_ms = c->timing ? c->run_ms : -1;
    out->node_ms = nodes ? c->node_ms : NULL;
    out->values = nodes ? c->shapes : NULL;
    for (int v = 0; v < g->nvalues; v++)
        if (g->values[v].constant) out->weight_bytes += g->values[v].constant->nbytes;
    out->activation_bytes = nodes ? c->peak_bytes : 0;
}

static void cpu_describe(const kiln_backend_engine *be, FILE *out) { kiln_cpu_describe_packed(be->g, out); }

const kiln_backend kiln_backend_cpu = {
    .name = "cpu",
    .device_name = cpu_device_name,
    .supports_precision = cpu_supports_precision,
    .engine_create = cpu_engine_create,
    .store_weights = kiln_cpu_store_weights,
    .describe = cpu_describe,
    .engine_free = cpu_engine_free,
    .context_create = cpu_context_create,
    .context_free = cpu_context_free,
    .context_run = cpu_context_run,
    .context_set_timing = cpu_context_set_timing,
    .context_last_timing = cpu_context_last_timing,
    .runs_fused_op = cpu_runs_fused_op,
    .conv_channels_last = false,
    .matmul_aligned_columns = false,
};
