/* engine.c — the kiln_engine handle: creation from a compiled graph, save/load, I/O descriptions. */
#include "runtime/engine_internal.h"

#include "core/status.h"
#include "runtime/env_overrides.h"

#include <stdlib.h>
#include <string.h>

kiln_status kiln_engine_from_graph(kiln_graph *g, const kiln_engine_meta *meta, const kiln_build_options *opts,
                                   kiln_engine **out) {
    return kiln_engine_from_graph_saving(g, meta, opts, NULL, out);
}

kiln_status kiln_engine_from_graph_saving(kiln_graph *g, const kiln_engine_meta *meta, const kiln_build_options *opts,
                                          kiln_engine_out *file, kiln_engine **out) {
    *out = NULL;
    kiln_build_options loaded = {.target = meta->target};
    if (!opts) {
        kiln_build_options_apply_env(&loaded);
        opts = &loaded;
    }
    kiln_engine *e = calloc(1, sizeof *e);
    if (!e) {
        kiln_engine_out_free(file);
        kiln_graph_free(g);
        return kiln_error(KILN_ERR_OUT_OF_MEMORY, "out of memory");
    }
    e->g = g;
    e->file = file;
    e->meta = *meta;
    const kiln_backend *b = kiln_backend_find(meta->target);
    if (!b) {
        kiln_engine_free(e);
        return kiln_error(KILN_ERR_ENGINE_MISMATCH, "the engine was built for target '%s', which this kiln does not have "
                          "(it has: %s): rebuild it with `kiln build MODEL.onnx --target cpu`", meta->target,
                          kiln_backend_names());
    }
    e->backend = b;
    kiln_status s = b->engine_create(g, &e->meta, opts, &e->be);
    if (s != KILN_OK) {
        kiln_engine_free(e);
        return s;
    }
    *out = e;
    return KILN_OK;
}

void kiln_engine_free(kiln_engine *e) {
    if (!e) return;
    kiln_engine_out_free(e->file);
    if (e->backend) e->backend->engine_free(e->be);
    kiln_graph_free(e->g);
    free(e);
}

kiln_status kiln_engine_save(const kiln_engine *e, const char *path) {
    if (!e || !path) return kiln_error(KILN_ERR_INVALID_ARGUMENT, "kiln_engine_save: engine and path are required");
    if (kiln_engine_out_pending(e->file, path)) return kiln_engine_out_finish(e->file, e->g, &e->meta);
    return kiln_engine_file_write(e->g, &e->meta, path);
}

kiln_status kiln_engine_load(const char *path, kiln_engine **out) { return kiln_engine_load_with(path, NULL, out); }

kiln_status kiln_engine_load_with(const char *path, const kiln_engine_load_options *opts, kiln_engine **out) {
    if (!path || !out) return kiln_error(KILN_ERR_INVALID_ARGUMENT, "kiln_engine_load: path and out are required");
    *out = NULL;
    if (opts && opts->set_device && opts->device < 0)
        return kiln_error(KILN_ERR_INVALID_ARGUMENT, "kiln_engine_load_with: device %d is not a GPU ordinal", opts->device);
    kiln_graph *g;
    kiln_engine_meta meta;
    KILN_TRY(kiln_engine_file_read(path, NULL, &g, &meta));
    if (opts && opts->set_device) {
        meta.run_device_set = true;
        meta.run_device = opts->device;
    }
    kiln_status s = kiln_engine_from_graph(g, &meta, NULL, out);
    if (s != KILN_OK) return kiln_error_prefix(s, "%s", path);
    return KILN_OK;
}

int kiln_engine_num_inputs(const kiln_engine *e) { return e ? e->g->ninputs : 0; }
int kiln_engine_num_outputs(const kiln_engine *e) { return e ? e->g->noutputs : 0; }
int kiln_engine_num_profiles(const kiln_engine *e) { return e ? e->meta.nprofiles : 0; }

static void describe(const kiln_graph *g, int vid, kiln_tensor_desc *out) {
    const kiln_value *v = &g->values[vid];
    memset(out, 0, sizeof *out);
    out->name = v->name;
    out->dtype = v->dtype;
    out->ndim = v->ndim;
    for (int d = 0; d < v->ndim; d++) {
        out->dims[d] = v->dims[d].sym == 0 ? v->dims[d].value : -1;
        out->dim_names[d] = v->dims[d].sym > 0 ? g->symbols[v->dims[d].sym - 1] : NULL;
    }
}

kiln_status kiln_engine_input(const kiln_engine *e, int i, kiln_tensor_desc *out) {
    if (!e || i < 0 || i >= e->g->ninputs)
        return kiln_error(KILN_ERR_INVALID_ARGUMENT, "input index %d is out of range (the engine has %d)", i,
                          e ? e->g->ninputs : 0);
    describe(e->g, e->g->inputs[i], out);
    return KILN_OK;
}

kiln_status kiln_engine_output(const kiln_engine *e, int i, kiln_tensor_desc *out) {
    if (!e || i < 0 || i >= e->g->noutputs)
        return kiln_error(KILN_ERR_INVALID_ARGUMENT, "output index %d is out of range (the engine has %d)", i,
                          e ? e->g->noutputs : 0);
    describe(e->g, e->g->outputs[i], out);
    return KILN_OK;
}

kiln_status kiln_engine_profile_range(const kiln_engine *e, int profile, int input, kiln_input_range *out) {
    if (!e || !out) return kiln_error(KILN_ERR_INVALID_ARGUMENT, "kiln_engine_profile_range: engine and out are required");
    if (profile < 0 || profile >= e->meta.nprofiles)
        return kiln_error(KILN_ERR_INVALID_ARGUMENT, "profile %d is out of range (the engine has %d)", profile, e->meta.nprofiles);
    if (input < 0 || input >= e->g->ninputs)
        return kiln_error(KILN_ERR_INVALID_ARGUMENT, "input index %d is out of range (the engine has %d)", input, e->g->ninputs);
    const kiln_profile_range *r = &e->meta.profiles[(size_t)profile * (size_t)e->g->ninputs + (size_t)input];
    memset(out, 0, sizeof *out);
    out->profile = profile;
    out->input = e->g->values[e->g->inputs[input]].name;
    out->ndim = r->ndim;
    for (int d = 0; d < r->ndim && d < KILN_MAX_DIMS; d++) {
        out->min[d] = r->min[d];
        out->opt[d] = r->opt[d];
        out->max[d] = r->max[d];
    }
    return KILN_OK;
}
