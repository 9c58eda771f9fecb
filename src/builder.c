/* builder.c — the build pipeline behind `kiln build`: ONNX frontend -> op resolution -> ordering
 * -> shape inference -> passes -> verification -> plan -> engine. */
#include "backends/backend.h"
#include "core/log.h"
#include "core/status.h"
#include "frontends/onnx/onnx_import.h"
#include "passes/passes.h"
#include "runtime/engine_internal.h"

#include <string.h>
#include <time.h>

/* Runs the passes to a fixed point (bounded), re-inferring shapes after each round. */
static kiln_status optimize(kiln_graph *g) {
    for (int round = 0; round < 4; round++) {
        bool folded, removed;
        KILN_TRY(kiln_pass_fold_constants(g, &folded));
        KILN_TRY(kiln_pass_remove_dead(g, &removed));
        if (!folded && !removed) break;
        KILN_TRY(kiln_graph_infer_shapes(g));
    }
    return KILN_OK;
}

static kiln_status build_graph(kiln_graph *g, const kiln_build_options *opts) {
    KILN_TRY(kiln_graph_resolve_ops(g, NULL));
    KILN_TRY(kiln_graph_toposort(g));
    KILN_TRY(kiln_graph_infer_shapes(g));
    KILN_TRY(kiln_graph_verify(g));
    int before = g->nnodes;
    KILN_TRY(optimize(g));
    KILN_TRY(kiln_graph_verify(g));
    KILN_LOG(KILN_LOG_INFO, "optimized: %d nodes -> %d nodes", before, g->nnodes);
    (void)opts;
    return KILN_OK;
}

kiln_status kiln_build_onnx(const char *onnx_path, const kiln_build_options *opts, kiln_engine **out) {
    if (!onnx_path || !out) return kiln_error(KILN_ERR_INVALID_ARGUMENT, "kiln_build_onnx: path and out are required");
    *out = NULL;
    kiln_build_options dflt = {0};
    if (!opts) opts = &dflt;
    const char *target = opts->target ? opts->target : "cpu";
    const kiln_backend *b = kiln_backend_find(target);
    if (!b) return kiln_error(KILN_ERR_UNSUPPORTED, "unknown target '%s' (this kiln has: cpu)", target);
    kiln_log_level saved = kiln_log_level_current;
    if (opts->verbose) kiln_log_set_level(KILN_LOG_VERBOSE);
    kiln_graph *g;
    kiln_status s = kiln_onnx_import(onnx_path, &g);
    if (s == KILN_OK) {
        s = build_graph(g, opts);
        if (s != KILN_OK) {
            kiln_error_prefix(s, "%s", onnx_path);
            kiln_graph_free(g);
        }
    }
    kiln_log_set_level(saved);
    if (s != KILN_OK) return s;
    kiln_engine_meta meta;
    memset(&meta, 0, sizeof meta);
    snprintf(meta.kiln_version, sizeof meta.kiln_version, "%s", KILN_VERSION_STRING);
    snprintf(meta.target, sizeof meta.target, "%s", b->name);
    b->device_name(meta.device, sizeof meta.device);
    snprintf(meta.build_options, sizeof meta.build_options, "--target %s%s", b->name, opts->verbose ? " --verbose" : "");
    const char *base = strrchr(onnx_path, '/');
    snprintf(meta.source, sizeof meta.source, "%s", base ? base + 1 : onnx_path);
    meta.created_unix = (uint64_t)time(NULL);
    return kiln_engine_from_graph(g, &meta, out);
}
