/* cuda_memory.c — shape plans: for one set of input shapes, the resolved shapes (cuda_shapes.c) and
 * where every device buffer lives. Device values share one activation arena by liveness: a buffer is
 * live from the step that writes it to the last step that reads it, and buffers whose lifetimes
 * overlap get disjoint places (first fit, largest first, as ggml's graph allocator does). A view value
 * (be->alias: the output of a Reshape-like node) takes no place of its own: it sits at its root's
 * offset, and the root's lifetime already covers every member's readers (cuda_engine.c). Host values
 * that device nodes read get their own small device area per plan (they are the same on every run of
 * the plan, so they are uploaded once). Everything here is host-side arithmetic. */
#include "backends/cuda/cuda_internal.h"

#include "core/status.h"

#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------- first-fit placement */

typedef struct placed {
    size_t lo, hi; /* [lo, hi) in the arena */
} placed;

typedef struct sort_key {
    size_t bytes;
    int start, idx;
} sort_key;

static int by_size_desc(const void *a, const void *b) {
    const sort_key *x = a, *y = b;
    if (x->bytes != y->bytes) return x->bytes > y->bytes ? -1 : 1;
    if (x->start != y->start) return x->start < y->start ? -1 : 1;
    return x->idx - y->idx;
}

static int by_lo(const void *a, const void *b) {
    const placed *x = a, *y = b;
    return x->lo < y->lo ? -1 : x->lo > y->lo;
}

kiln_status kiln_cuda_place(kiln_cuda_interval *iv, int n, size_t *peak, size_t *naive) {
    *peak = 0;
    if (naive) *naive = 0;
    if (n <= 0) return KILN_OK;
    sort_key *order = malloc((size_t)n * sizeof *order);
    placed *busy = malloc((size_t)n * sizeof *busy);
    if (!order || !busy) {
        free(order);
        free(busy);
        return kiln_error(KILN_ERR_OUT_OF_MEMORY, "out of memory planning device memory");
    }
    for (int i = 0; i < n; i++) order[i] = (sort_key){iv[i].bytes, iv[i].start, i};
    qsort(order, (size_t)n, sizeof *order, by_size_desc);
    for (int j = 0; j < n; j++) {
        kiln_cuda_interval *x = &iv[order[j].idx];
        size_t size = kiln_cuda_align(x->bytes);
        if (naive) *naive += size;
        int nbusy = 0;
        for (int k = 0; k < j; k++) { /* the buffers placed so far that are live at the same time */
            const kiln_cuda_interval *y = &iv[order[k].idx];
            if (y->start <= x->end && x->start <= y->end)
                busy[nbusy++] = (placed){y->offset, y->offset + kiln_cuda_align(y->bytes)};
        }
        qsort(busy, (size_t)nbusy, sizeof *busy, by_lo);
        size_t at = 0;
        for (int k = 0; k < nbusy; k++) {
            if (at + size <= busy[k].lo) break;
            if (busy[k].hi > at) at = busy[k].hi;
        }
        x->offset = at;
        if (at + size > *peak) *peak = at + size;
    }
    free(order);
    free(busy);
    return KILN_OK;
}

/* ---------------------------------------------------------------- plans */

/* Elements of a resolved value, or -1 when the count does not fit in int64 / size_t arithmetic. */
static int64_t value_numel(const kiln_value *v) {
    if (v->ndim < 0) return 0;
    int64_t n = 1;
    for (int d = 0; d < v->ndim; d++) {
        int64_t x = v->dims[d].value;
        if (x == 0) return 0;
        if (x < 0 || n > (INT64_MAX >> 4) / x) return -1;
        n *= x;
    }
    return n;
}

int64_t kiln_cuda_value_numel(const kiln_cuda_plan *p, int v) {
    int64_t n = value_numel(&p->vals[v]);
    return n > 0 ? n : 0;
}

size_t kiln_cuda_value_bytes(const kiln_backend_engine *be, const kiln_cuda_plan *p, int v) {
    return (size_t)kiln_cuda_value_numel(p, v) * kiln_dtype_size(be->dev_dtype[v]);
}

/* Bytes of value v in its declared (host-side) dtype. */
static size_t declared_bytes(const kiln_graph *g, const kiln_cuda_plan *p, int v) {
    int64_t n = value_numel(&p->vals[v]);
    return n > 0 ? (size_t)n * kiln_dtype_size(g->values[v].dtype) : 0;
}

void kiln_cuda_plan_drop_graph(kiln_cuda_plan *p) {
    if (p->exec) cudaGraphExecDestroy(p->exec);
    p->exec = NULL;
    p->exec_arena = NULL;
}

void kiln_cuda_plan_free(const kiln_backend_engine *be, kiln_cuda_plan *p) {
    if (!p) return;
    kiln_cuda_plan_drop_graph(p);
    if (p->host_dev) cudaFree(p->host_dev);
    if (p->host)
        for (int v = 0; v < be->g->nvalues; v++) kiln_tensor_release(&p->host[v]);
    free(p->host);
    free(p->vals);
    free(p->off);
    free(p->sig);
    free(p->shape_vals);
    free(p->in_stage);
    free(p->out_stage);
    free(p->in_pin);
    free(p->out_pin);
    free(p);
}

/* Fails when a resolved size is too large to address. */
static kiln_status check_sizes(const kiln_backend_engine *be, const kiln_cuda_plan *p) {
    for (int v = 0; v < be->g->nvalues; v++)
        if (be->kind[v] != KILN_CUDA_CONST && value_numel(&p->vals[v]) < 0)
            return kiln_error(KILN_ERR_SHAPE, "value '%s' is too large for these input shapes", p->vals[v].name);
    return KILN_OK;
}

/* Arena placement of device values and boundary buffers; fills off[], in_stage[], out_stage[]. */
static kiln_status place_arena(const kiln_backend_engine *be, kiln_cuda_plan *p) {
    const kiln_graph *g = be->g;
    int cap = g->nvalues + g->ninputs + g->noutputs, n = 0, end = g->nnodes + 1;
    kiln_cuda_interval *iv = malloc(((size_t)cap + 1) * sizeof *iv);
    int *owner = malloc(((size_t)cap + 1) * sizeof *owner); /* value id, or nvalues + k (input k), or -1 - k (output k) */
    if (!iv || !owner) {
        free(iv);
        free(owner);
        return kiln_error(KILN_ERR_OUT_OF_MEMORY, "out of memory planning device memory");
    }
    for (int v = 0; v < g->nvalues; v++) {
        const kiln_value *val = &g->values[v];
        size_t bytes = kiln_cuda_value_bytes(be, p, v);
        if (be->kind[v] != KILN_CUDA_DEVICE || !bytes || (val->producer < 0 && !val->is_input)) continue;
        if (be->alias[v] >= 0) {
            p->alias_bytes += kiln_cuda_align(bytes);
            continue;
        }
        iv[n] = (kiln_cuda_interval){bytes, val->is_input ? 0 : val->producer + 1, be->last_step[v], 0};
        owner[n++] = v;
    }
    for (int k = 0; k < g->ninputs; k++) {
        int v = g->inputs[k];
        size_t bytes = declared_bytes(g, p, v);
        if (be->kind[v] != KILN_CUDA_DEVICE || !bytes || g->values[v].dtype == be->dev_dtype[v]) continue;
        iv[n] = (kiln_cuda_interval){bytes, 0, 0, 0};
        owner[n++] = g->nvalues + k;
    }
    for (int k = 0; k < g->noutputs; k++) {
        int v = g->outputs[k];
        size_t bytes = declared_bytes(g, p, v);
        if (be->kind[v] != KILN_CUDA_DEVICE || !bytes || g->values[v].dtype == be->dev_dtype[v]) continue;
        iv[n] = (kiln_cuda_interval){bytes, end, end, 0};
        owner[n++] = -1 - k;
    }
    kiln_status s = kiln_cuda_place(iv, n, &p->arena_bytes, &p->naive_bytes);
    for (int j = 0; s == KILN_OK && j < n; j++) {
        int o = owner[j];
        if (o < 0) p->out_stage[-1 - o] = (int64_t)iv[j].offset;
        else if (o >= g->nvalues) p->in_stage[o - g->nvalues] = (int64_t)iv[j].offset;
        else p->off[o] = (int64_t)iv[j].offset;
        p->has_device_work |= o < 0 || o >= g->nvalues;
    }
    /* views sit at their root's place (a view of a constant reads the constant: no arena offset) */
    for (int v = 0; s == KILN_OK && v < g->nvalues; v++) {
        int root = be->alias[v];
        if (root >= 0 && be->kind[root] == KILN_CUDA_DEVICE) p->off[v] = p->off[root];
    }
    p->naive_bytes += p->alias_bytes; /* naive: one buffer per value, views included */
    free(iv);
    free(owner);
    return s;
}

/* Offsets of host values' device copies, and of inputs/outputs in the pinned staging buffers. */
static void place_host_side(const kiln_backend_engine *be, kiln_cuda_plan *p) {
    const kiln_graph *g = be->g;
    for (int v = 0; v < g->nvalues; v++) {
        size_t bytes = kiln_cuda_value_bytes(be, p, v);
        if (be->kind[v] != KILN_CUDA_HOST || !be->needs_device[v] || !bytes) continue;
        p->off[v] = (int64_t)p->host_dev_bytes;
        p->host_dev_bytes += kiln_cuda_align(bytes);
    }
    for (int k = 0; k < g->ninputs; k++) {
        p->in_pin[k] = p->pin_in_bytes;
        if (be->kind[g->inputs[k]] == KILN_CUDA_DEVICE) /* shape inputs are not uploaded */
            p->pin_in_bytes += kiln_cuda_align(declared_bytes(g, p, g->inputs[k]));
    }
    for (int k = 0; k < g->noutputs; k++) {
        p->out_pin[k] = p->pin_out_bytes;
        if (be->kind[g->outputs[k]] == KILN_CUDA_DEVICE) p->pin_out_bytes += kiln_cuda_align(declared_bytes(g, p, g->outputs[k]));
    }
}

size_t kiln_cuda_shape_value_bytes(const kiln_backend_engine *be, const kiln_tensor *inputs, int k) {
    int v = be->g->inputs[k];
    if (be->kind[v] != KILN_CUDA_HOST || !inputs[k].data) return 0;
    return (size_t)kiln_tensor_numel(&inputs[k]) * kiln_dtype_size(be->g->values[v].dtype);
}

/* The shape inputs' bytes, the second half of the plan key (resolve_shapes checks that they are there). */
static kiln_status record_shape_values(const kiln_backend_engine *be, const kiln_tensor *inputs, kiln_cuda_plan *p) {
    const kiln_graph *g = be->g;
    for (int k = 0; k < g->ninputs; k++) p->shape_vals_len += kiln_cuda_shape_value_bytes(be, inputs, k);
    p->shape_vals = malloc(p->shape_vals_len + 1);
    if (!p->shape_vals) return kiln_error(KILN_ERR_OUT_OF_MEMORY, "out of memory creating a shape plan");
    size_t at = 0;
    for (int k = 0; k < g->ninputs; k++) {
        size_t bytes = kiln_cuda_shape_value_bytes(be, inputs, k);
        if (bytes) memcpy(p->shape_vals + at, inputs[k].data, bytes);
        at += bytes;
    }
    return KILN_OK;
}

kiln_status kiln_cuda_plan_create(kiln_backend_engine *be, const kiln_tensor *inputs, kiln_cuda_plan **out) {
    const kiln_graph *g = be->g;
    *out = NULL;
    kiln_cuda_plan *p = calloc(1, sizeof *p);
    kiln_status s = KILN_OK;
    if (!p) return kiln_error(KILN_ERR_OUT_OF_MEMORY, "out of memory");
    size_t nv = (size_t)g->nvalues + 1, ni = (size_t)g->ninputs + 1, no = (size_t)g->noutputs + 1;
    for (int k = 0; k < g->ninputs; k++) p->sig_len += 1 + inputs[k].ndim;
    p->sig = malloc(((size_t)p->sig_len + 1) * sizeof *p->sig);
    p->vals = malloc(nv * sizeof *p->vals);
    p->host = calloc(nv, sizeof *p->host);
    p->off = malloc(nv * sizeof *p->off);
    p->in_stage = malloc(ni * sizeof *p->in_stage);
    p->out_stage = malloc(no * sizeof *p->out_stage);
    p->in_pin = calloc(ni, sizeof *p->in_pin);
    p->out_pin = calloc(no, sizeof *p->out_pin);
    if (!p->sig || !p->vals || !p->host || !p->off || !p->in_stage || !p->out_stage || !p->in_pin || !p->out_pin) {
        kiln_cuda_plan_free(be, p);
        return kiln_error(KILN_ERR_OUT_OF_MEMORY, "out of memory creating a shape plan");
    }
    int j = 0;
    for (int k = 0; k < g->ninputs; k++) {
        p->sig[j++] = inputs[k].ndim;
        for (int d = 0; d < inputs[k].ndim; d++) p->sig[j++] = inputs[k].dims[d];
    }
    if (be->n_shape_inputs && (s = record_shape_values(be, inputs, p)) != KILN_OK) {
        kiln_cuda_plan_free(be, p);
        return s;
    }
    for (int v = 0; v < g->nvalues; v++) p->off[v] = -1;
    for (int k = 0; k < g->ninputs; k++) p->in_stage[k] = -1;
    for (int k = 0; k < g->noutputs; k++) p->out_stage[k] = -1;
    p->has_device_work = be->n_device_nodes > be->n_view_nodes;
    s = kiln_cuda_resolve_shapes(be, inputs, p->vals, p->host);
    if (s == KILN_OK) s = check_sizes(be, p);
    if (s == KILN_OK) s = place_arena(be, p);
    if (s != KILN_OK) {
        kiln_cuda_plan_free(be, p);
        return s;
    }
    place_host_side(be, p);
    *out = p;
    return KILN_OK;
}

/* Contract in cuda_internal.h. */
size_t kiln_cuda_zero_bytes(const kiln_backend_engine *be) {
    const kiln_graph *g = be->g;
    int64_t most = 0;
    for (int i = 0; i < g->nnodes; i++) {
        const kiln_node *n = &g->nodes[i];
        if (!be->kernels || !be->kernels[i] || strcmp(n->op_type, "FusedConv") || n->ninputs < 2 || n->inputs[1] < 0) continue;
        const kiln_value *w = &g->values[n->inputs[1]];
        if (w->ndim >= 1 && w->dims[0].sym == 0 && w->dims[0].value > most) most = w->dims[0].value;
    }
    size_t bytes = kiln_cuda_align((size_t)most * sizeof(float));
    return bytes < ((size_t)64 << 10) ? (size_t)64 << 10 : bytes;
}
