/* context.c — execution contexts: bind inputs (checked against the engine's types, with symbolic
 * dimensions bound consistently, and against its optimization profiles) and caller-owned output
 * buffers, run them on the engine's backend (enqueue, then wait), hand out the outputs. */
#include "runtime/engine_internal.h"
#include "runtime/env_overrides.h"
#include "runtime/profiles.h"

#include "core/status.h"

#include <stdlib.h>
#include <string.h>

struct kiln_context {
    kiln_engine *e;
    kiln_backend_context *bc; /* the backend's state */
    kiln_tensor *inputs;      /* [ninputs]: views of the bound host data */
    kiln_tensor *outputs;     /* [noutputs]: views of the backend's host outputs after a run */
    bool *bound;              /* [ninputs] */
    kiln_host_buffer *out_bufs; /* [noutputs]: caller-owned output buffers ({NULL, 0}: none) */
    bool ran;
    bool pending;             /* enqueued, not yet waited for */
    bool pending_done;        /* ...and already finished (a backend without context_enqueue) */
    int pending_profile;
    int profile;              /* the profile of the last successful run, or -1 */
};

kiln_status kiln_context_create(kiln_engine *e, kiln_context **out) {
    return kiln_context_create_with_options(e, NULL, out);
}

kiln_status kiln_context_create_with_options(kiln_engine *e, const kiln_context_options *given, kiln_context **out) {
    if (!e || !out) return kiln_error(KILN_ERR_INVALID_ARGUMENT, "kiln_context_create: engine and out are required");
    kiln_context_options opts = given ? *given : (kiln_context_options){0};
    kiln_context_options_apply_env(&opts);
    *out = NULL;
    kiln_context *c = calloc(1, sizeof *c);
    if (!c) return kiln_error(KILN_ERR_OUT_OF_MEMORY, "out of memory");
    c->e = e;
    c->profile = -1;
    c->inputs = calloc((size_t)e->g->ninputs + 1, sizeof *c->inputs);
    c->outputs = calloc((size_t)e->g->noutputs + 1, sizeof *c->outputs);
    c->bound = calloc((size_t)e->g->ninputs + 1, sizeof *c->bound);
    c->out_bufs = calloc((size_t)e->g->noutputs + 1, sizeof *c->out_bufs);
    if (!c->inputs || !c->outputs || !c->bound || !c->out_bufs) {
        kiln_context_free(c);
        return kiln_error(KILN_ERR_OUT_OF_MEMORY, "out of memory");
    }
    kiln_status s = e->backend->context_create(e->be, &opts, &c->bc);
    if (s != KILN_OK) {
        kiln_context_free(c);
        return s;
    }
    *out = c;
    return KILN_OK;
}

void kiln_context_free(kiln_context *c) {
    if (!c) return;
    if (c->bc) c->e->backend->context_free(c->bc);
    free(c->inputs);
    free(c->outputs);
    free(c->bound);
    free(c->out_bufs);
    free(c);
}

/* "float32[batch=?,3,224,224]" for the engine's declaration of value v. */
static char *declared_str(const kiln_graph *g, const kiln_value *v, char *buf, size_t cap) {
    return kiln_value_type_str(g, v, buf, cap);
}

kiln_status kiln_context_set_input(kiln_context *c, const char *name, kiln_dtype dtype, int ndim,
                                   const int64_t *dims, const void *data) {
    if (!c || !name) return kiln_error(KILN_ERR_INVALID_ARGUMENT, "kiln_context_set_input: context and name are required");
    const kiln_graph *g = c->e->g;
    int k = 0;
    while (k < g->ninputs && strcmp(g->values[g->inputs[k]].name, name)) k++;
    if (k == g->ninputs) {
        char list[1024] = "";
        size_t n = 0;
        for (int i = 0; i < g->ninputs && n < sizeof list; i++)
            n += (size_t)snprintf(list + n, sizeof list - n, "%s'%s'", i ? ", " : "", g->values[g->inputs[i]].name);
        return kiln_error(KILN_ERR_INVALID_ARGUMENT, "the engine has no input '%s' (its inputs: %s)", name,
                          g->ninputs ? list : "none");
    }
    const kiln_value *v = &g->values[g->inputs[k]];
    char want[256], got[256];
    declared_str(g, v, want, sizeof want);
    if (ndim < 0 || ndim > KILN_MAX_DIMS)
        return kiln_error(KILN_ERR_SHAPE, "input '%s': rank %d is not supported", name, ndim);
    snprintf(got, sizeof got, "%s", kiln_dtype_name(dtype));
    kiln_shape_str(got + strlen(got), sizeof got - strlen(got), ndim, dims);
    if (dtype != v->dtype)
        return kiln_error(KILN_ERR_INVALID_ARGUMENT, "input '%s' expects %s, got %s (wrong dtype)", name, want, got);
    if (ndim != v->ndim)
        return kiln_error(KILN_ERR_SHAPE, "input '%s' expects %s, got %s (wrong rank)", name, want, got);
    for (int d = 0; d < ndim; d++) {
        if (dims[d] < 0) return kiln_error(KILN_ERR_SHAPE, "input '%s': negative dimension in %s", name, got);
        if (v->dims[d].sym == 0 && v->dims[d].value != dims[d])
            return kiln_error(KILN_ERR_SHAPE, "input '%s' expects %s, got %s (dimension %d must be %lld)", name, want,
                              got, d, (long long)v->dims[d].value);
    }
    if (ndim > 0 && !data && kiln_numel(ndim, dims) > 0)
        return kiln_error(KILN_ERR_INVALID_ARGUMENT, "input '%s': data is NULL", name);
    kiln_tensor_view(&c->inputs[k], dtype, ndim, dims, (void *)data);
    c->bound[k] = true;
    return KILN_OK;
}

/* Every input bound, and each symbolic dimension has one size across all inputs. */
static kiln_status check_bindings(kiln_context *c) {
    const kiln_graph *g = c->e->g;
    int64_t sym_size[64];
    int sym_from[64];
    for (int s = 0; s < 64; s++) sym_size[s] = -1;
    for (int k = 0; k < g->ninputs; k++) {
        const kiln_value *v = &g->values[g->inputs[k]];
        if (!c->bound[k]) return kiln_error(KILN_ERR_INVALID_ARGUMENT, "input '%s' is not bound", v->name);
        const kiln_tensor *t = &c->inputs[k];
        for (int d = 0; d < v->ndim; d++) {
            int s = v->dims[d].sym;
            if (s <= 0 || s > 64) continue;
            if (sym_size[s - 1] < 0) {
                sym_size[s - 1] = t->dims[d];
                sym_from[s - 1] = k;
            } else if (sym_size[s - 1] != t->dims[d]) {
                return kiln_error(KILN_ERR_SHAPE, "dimension '%s' is %lld in input '%s' but %lld in input '%s'",
                                  g->symbols[s - 1], (long long)sym_size[s - 1], g->values[g->inputs[sym_from[s - 1]]].name,
                                  (long long)t->dims[d], v->name);
            }
        }
    }
    return KILN_OK;
}

kiln_status kiln_context_set_transfers(kiln_context *c, bool enabled) {
    if (!c) return kiln_error(KILN_ERR_INVALID_ARGUMENT, "kiln_context_set_transfers: context is NULL");
    if (c->e->backend->context_set_transfers) c->e->backend->context_set_transfers(c->bc, enabled);
    return KILN_OK;
}

kiln_backend_context *kiln_context_backend(kiln_context *c) { return c ? c->bc : NULL; }

kiln_status kiln_context_set_output_buffer(kiln_context *c, const char *name, void *data, size_t bytes) {
    if (!c || !name)
        return kiln_error(KILN_ERR_INVALID_ARGUMENT, "kiln_context_set_output_buffer: context and name are required");
    if (c->pending) return kiln_error(KILN_ERR_INVALID_ARGUMENT, "output '%s': a run is in flight (kiln_context_wait first)", name);
    const kiln_graph *g = c->e->g;
    int k = 0;
    while (k < g->noutputs && strcmp(g->values[g->outputs[k]].name, name)) k++;
    if (k == g->noutputs) {
        char list[1024] = "";
        size_t n = 0;
        for (int i = 0; i < g->noutputs && n < sizeof list; i++)
            n += (size_t)snprintf(list + n, sizeof list - n, "%s'%s'", i ? ", " : "", g->values[g->outputs[i]].name);
        return kiln_error(KILN_ERR_INVALID_ARGUMENT, "the engine has no output '%s' (its outputs: %s)", name, list);
    }
    const kiln_value *v = &g->values[g->outputs[k]];
    bool fixed = kiln_dtype_size(v->dtype) > 0;
    int64_t dims[KILN_MAX_DIMS];
    for (int d = 0; d < v->ndim; d++) {
        fixed = fixed && v->dims[d].sym == 0 && v->dims[d].value >= 0;
        dims[d] = v->dims[d].value;
    }
    if (data && fixed) {
        size_t need = (size_t)kiln_numel(v->ndim, dims) * kiln_dtype_size(v->dtype);
        if (bytes < need) {
            char want[256];
            return kiln_error(KILN_ERR_SHAPE, "output '%s' is %s (%zu bytes): a buffer of %zu bytes cannot hold it", name,
                              declared_str(g, v, want, sizeof want), need, bytes);
        }
    }
    c->out_bufs[k] = data ? (kiln_host_buffer){data, bytes} : (kiln_host_buffer){NULL, 0};
    c->ran = false; /* outputs of an earlier run may point at the buffer this replaced */
    return KILN_OK;
}

kiln_status kiln_context_enqueue(kiln_context *c) {
    if (!c) return kiln_error(KILN_ERR_INVALID_ARGUMENT, "kiln_context_enqueue: context is NULL");
    if (c->pending)
        return kiln_error(KILN_ERR_INVALID_ARGUMENT, "kiln_context_enqueue: a run is already in flight (kiln_context_wait first)");
    c->ran = false;
    KILN_TRY(check_bindings(c));
    int profile;
    KILN_TRY(kiln_profiles_select(c->e->g, &c->e->meta, c->inputs, &profile));
    const kiln_backend *b = c->e->backend;
    if (b->context_set_profile) b->context_set_profile(c->bc, profile);
    if (b->context_enqueue) KILN_TRY(b->context_enqueue(c->bc, c->inputs, c->out_bufs));
    else KILN_TRY(b->context_run(c->bc, c->inputs, c->outputs));
    c->pending = true;
    c->pending_done = !b->context_enqueue;
    c->pending_profile = profile;
    return KILN_OK;
}

/* Puts every output that has a caller buffer into it (unless the backend wrote it there) and points
 * the output at it. */
static kiln_status deliver_outputs(kiln_context *c) {
    const kiln_graph *g = c->e->g;
    for (int k = 0; k < g->noutputs; k++) {
        const kiln_host_buffer *b = &c->out_bufs[k];
        kiln_tensor *t = &c->outputs[k];
        if (!b->data) continue;
        size_t need = (size_t)kiln_tensor_numel(t) * kiln_dtype_size(t->dtype);
        if (need > b->bytes) {
            char shape[160];
            return kiln_error(KILN_ERR_SHAPE, "output '%s' is %s%s (%zu bytes): its buffer holds only %zu bytes",
                              g->values[g->outputs[k]].name, kiln_dtype_name(t->dtype),
                              kiln_shape_str(shape, sizeof shape, t->ndim, t->dims), need, b->bytes);
        }
        if (t->data != b->data && need) memcpy(b->data, t->data, need);
        kiln_tensor_view(t, t->dtype, t->ndim, t->dims, b->data);
    }
    return KILN_OK;
}

kiln_status kiln_context_wait(kiln_context *c) {
    if (!c) return kiln_error(KILN_ERR_INVALID_ARGUMENT, "kiln_context_wait: context is NULL");
    if (!c->pending) return kiln_error(KILN_ERR_INVALID_ARGUMENT, "kiln_context_wait: no run is in flight (kiln_context_enqueue first)");
    c->pending = false;
    if (!c->pending_done) KILN_TRY(c->e->backend->context_wait(c->bc, c->outputs));
    KILN_TRY(deliver_outputs(c));
    c->ran = true;
    c->profile = c->pending_profile;
    return KILN_OK;
}

kiln_status kiln_context_query(kiln_context *c, bool *done) {
    if (!c || !done) return kiln_error(KILN_ERR_INVALID_ARGUMENT, "kiln_context_query: context and done are required");
    if (!c->pending) return kiln_error(KILN_ERR_INVALID_ARGUMENT, "kiln_context_query: no run is in flight (kiln_context_enqueue first)");
    const kiln_backend *b = c->e->backend;
    *done = c->pending_done || b->context_query(c->bc);
    return KILN_OK;
}

kiln_status kiln_context_run(kiln_context *c) {
    if (!c) return kiln_error(KILN_ERR_INVALID_ARGUMENT, "kiln_context_run: context is NULL");
    KILN_TRY(kiln_context_enqueue(c));
    return kiln_context_wait(c);
}

int kiln_context_profile(const kiln_context *c) { return c && c->ran ? c->profile : -1; }

kiln_status kiln_context_output(kiln_context *c, int i, kiln_tensor_desc *desc, const void **data) {
    if (!c || !desc || !data) return kiln_error(KILN_ERR_INVALID_ARGUMENT, "kiln_context_output: arguments are required");
    const kiln_graph *g = c->e->g;
    if (i < 0 || i >= g->noutputs)
        return kiln_error(KILN_ERR_INVALID_ARGUMENT, "output index %d is out of range (the engine has %d)", i, g->noutputs);
    if (c->pending) return kiln_error(KILN_ERR_INVALID_ARGUMENT, "no outputs: a run is in flight (kiln_context_wait first)");
    if (!c->ran) return kiln_error(KILN_ERR_INVALID_ARGUMENT, "no outputs: the context has not run successfully");
    const kiln_value *v = &g->values[g->outputs[i]];
    const kiln_tensor *t = &c->outputs[i];
    memset(desc, 0, sizeof *desc);
    desc->name = v->name;
    desc->dtype = t->dtype;
    desc->ndim = t->ndim;
    for (int d = 0; d < t->ndim; d++) {
        desc->dims[d] = t->dims[d];
        desc->dim_names[d] = v->ndim > d && v->dims[d].sym > 0 ? g->symbols[v->dims[d].sym - 1] : NULL;
    }
    *data = t->data;
    return KILN_OK;
}
