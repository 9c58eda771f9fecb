/* builder.c — the build pipeline behind `kiln build`: ONNX frontend -> op resolution -> ordering
 * -> shape inference -> passes -> verification -> plan -> engine. */
#include "backends/backend.h"
#include "core/log.h"
#include "core/status.h"
#include "frontends/onnx/onnx_import.h"
#include "passes/passes.h"
#include "runtime/engine_internal.h"
#include "builder.h"

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

static const char *precision_name(kiln_precision p) {
    return p == KILN_PRECISION_FP16 ? "fp16" : p == KILN_PRECISION_BF16 ? "bf16" : "fp32";
}

kiln_status kiln_build_graph(kiln_graph *g, const char *source, const kiln_build_options *opts, kiln_engine **out) {
    *out = NULL;
    kiln_build_options dflt = {0};
    if (!opts) opts = &dflt;
    const char *target = opts->target ? opts->target : "cpu";
    const kiln_backend *b = kiln_backend_find(target);
    if (!b) {
        kiln_graph_free(g);
        return kiln_error(KILN_ERR_UNSUPPORTED, "unknown target '%s' (this kiln has: %s)", target, kiln_backend_names());
    }
    if (opts->precision != KILN_PRECISION_FP32 && !b->supports_precision(opts->precision)) {
        kiln_graph_free(g);
        return kiln_error(KILN_ERR_UNSUPPORTED, "target %s does not compute in %s (use --target cuda)", b->name,
                          precision_name(opts->precision));
    }
    kiln_log_level saved = kiln_log_level_current;
    if (opts->verbose) kiln_log_set_level(KILN_LOG_VERBOSE);
    kiln_status s = build_graph(g, opts);
    kiln_log_set_level(saved);
    if (s != KILN_OK) {
        kiln_error_prefix(s, "%s", source);
        kiln_graph_free(g);
        return s;
    }
    kiln_engine_meta meta;
    memset(&meta, 0, sizeof meta);
    snprintf(meta.kiln_version, sizeof meta.kiln_version, "%s", KILN_VERSION_STRING);
    snprintf(meta.target, sizeof meta.target, "%s", b->name);
    meta.precision = opts->precision;
    s = b->device_name(opts->device, meta.device, sizeof meta.device);
    if (s != KILN_OK) {
        kiln_graph_free(g);
        return s;
    }
    snprintf(meta.build_options, sizeof meta.build_options, "--target %s --%s%s", b->name, precision_name(opts->precision),
             opts->verbose ? " --verbose" : "");
    const char *base = strrchr(source, '/');
    snprintf(meta.source, sizeof meta.source, "%s", base ? base + 1 : source);
    meta.created_unix = (uint64_t)time(NULL);
    return kiln_engine_from_graph(g, &meta, out);
}

kiln_status kiln_build_onnx(const char *onnx_path, const kiln_build_options *opts, kiln_engine **out) {
    if (!onnx_path || !out) return kiln_error(KILN_ERR_INVALID_ARGUMENT, "kiln_build_onnx: path and out are required");
    *out = NULL;
    kiln_graph *g;
    KILN_TRY(kiln_onnx_import(onnx_path, &g));
    return kiln_build_graph(g, onnx_path, opts, out);
}
