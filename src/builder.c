/* builder.c — the build pipeline behind `kiln build`: ONNX frontend -> op resolution -> ordering
 * -> shape inference -> (every intermediate marked as an output, for per-layer comparisons) ->
 * passes (clean-ups, fusions, the channels-last layout where the target wants it) -> verification
 * -> per-layer precision -> optimization profiles -> plan -> engine -> auto-tuning (backends with
 * tactics: the fastest algorithm per layer, timed on the device). */
#include "backends/backend.h"
#include "core/log.h"
#include "core/status.h"
#include "frontends/onnx/onnx_import.h"
#include "layer_precision.h"
#include "passes/passes.h"
#include "quant/calibrate.h"
#include "quant/fp8.h"
#include "runtime/engine_internal.h"
#include "runtime/env_overrides.h"
#include "runtime/profiles.h"
#include "builder.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* Monotonic milliseconds, for the stage times of a verbose build. */
static double build_now_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e3 + (double)t.tv_nsec / 1e6;
}

/* Logs how long build stage `what` took, at verbose level when the build is verbose. */
static void log_stage(const kiln_build_options *opts, const char *what, double ms) {
    if (!opts || !opts->verbose) return;
    kiln_log_level saved = kiln_log_level_current;
    kiln_log_set_level(KILN_LOG_VERBOSE);
    KILN_LOG(KILN_LOG_VERBOSE, "build stage: %s %.1f ms", what, ms);
    kiln_log_set_level(saved);
}

/* One pass of the pipeline; kiln_ops: the kiln-domain fused ops (ir/fused_ops.h) it creates (NULL
 * for none), which only targets with kernels for all of them may receive. */
typedef struct pass_step {
    const char *name;
    kiln_status (*run)(kiln_graph *g, bool *changed);
    const char *const *kiln_ops;
} pass_step;

static const char *const g_attention_ops[] = {"Attention", NULL};
static const char *const g_epilogue_ops[] = {"FusedConv", "FusedGemm", "FusedMatMul", NULL};
static const char *const g_chain_ops[] = {"ElementwiseChain", NULL};

/* Folds explicitly quantized layers into integer ones, first: constant folding would turn the
 * weights' DequantizeLinear into float32 constants. */
static const char *const g_qdq_ops[] = {"QConv", "QMatMul", NULL};
static const pass_step g_qdq = {"fuse_qdq", kiln_pass_fuse_qdq, g_qdq_ops};

/* Clean-up passes, repeated until none changes anything. */
static const pass_step g_cleanup[] = {
    {"fold_constants", kiln_pass_fold_constants, NULL},
    {"eliminate_noops", kiln_pass_eliminate_noops, NULL},
    {"cse", kiln_pass_cse, NULL},
    {"remove_dead", kiln_pass_remove_dead, NULL},
};

/* Fusions, in this order: BatchNorm into its Conv before the Conv takes its epilogue; GELU before
 * the epilogue fusion, which takes Gelu as an activation, and before an integer layer takes a Gelu
 * and the QuantizeLinear after it (fuse_qdq_output); attention before the epilogue fusion, so
 * that the mask Add after the scores MatMul is not taken for a residual; elementwise chains last,
 * over whatever the pattern fusions left. */
static const pass_step g_fusions[] = {
    {"fuse_conv_bn", kiln_pass_fuse_conv_bn, NULL},
    {"fuse_gelu", kiln_pass_fuse_gelu, NULL},
    {"fuse_qdq_output", kiln_pass_fuse_qdq_output, g_qdq_ops},
    {"fuse_norm", kiln_pass_fuse_norm, NULL},
    {"fuse_attention", kiln_pass_fuse_attention, g_attention_ops},
    {"fuse_epilogue", kiln_pass_fuse_epilogue, g_epilogue_ops},
    {"fuse_elementwise", kiln_pass_fuse_elementwise, g_chain_ops},
};

/* Lays convolutions, and the pools next to them, out channels-last (after the fusions, which it
 * needs done). */
static const char *const g_layout_ops[] = {"FusedConv", "FusedPool", NULL};
static const pass_step g_layout = {"layout_channels_last", kiln_pass_layout_channels_last, g_layout_ops};
/* Pads constant MatMul operands to whole 16-byte rows (after the fusions: a MatMul that took an
 * epilogue keeps its shape). */
static const pass_step g_align = {"align_matmul", kiln_pass_align_matmul, NULL};

/* Whether the comma-separated list names op. */
static bool listed(const char *list, const char *op) {
    size_t n = strlen(op);
    for (const char *p = list; p && *p; p += strcspn(p, ",") + (p[strcspn(p, ",")] == ',')) {
        while (*p == ' ') p++;
        if (!strncmp(p, op, n) && (p[n] == ',' || p[n] == ' ' || !p[n])) return true;
    }
    return false;
}

/* Whether step p may run: the options allow every kiln-domain op it creates (fusion not OFF, none in
 * unfused_ops) and backend b has kernels for them, as its runs_fused_op capability says per op. */
static bool backend_runs_step(const kiln_backend *b, const pass_step *p, const kiln_build_options *opts) {
    if (!p->kiln_ops) return true;
    if (opts->fusion == KILN_SWITCH_OFF) return false;
    for (const char *const *op = p->kiln_ops; *op; op++)
        if (listed(opts->unfused_ops, *op) || !b->runs_fused_op || !b->runs_fused_op(*op, opts)) return false;
    return true;
}

/* Runs one step; when it changed the graph, re-infers shapes and verifies the result. */
static kiln_status run_step(kiln_graph *g, const pass_step *p, bool *changed) {
    int before = g->nnodes;
    kiln_status s = p->run(g, changed);
    if (s == KILN_OK && *changed) KILN_LOG(KILN_LOG_VERBOSE, "%s: %d nodes -> %d nodes", p->name, before, g->nnodes);
    if (s == KILN_OK && *changed) s = kiln_graph_infer_shapes(g);
    if (s == KILN_OK && *changed) s = kiln_graph_verify(g);
    return s == KILN_OK ? s : kiln_error_prefix(s, "pass %s", p->name);
}

/* Runs the clean-up passes until none changes anything (bounded). */
static kiln_status cleanup(kiln_graph *g) {
    for (int pass = 0; pass < 8; pass++) {
        bool any = false, changed;
        for (size_t i = 0; i < sizeof g_cleanup / sizeof *g_cleanup; i++) {
            KILN_TRY(run_step(g, &g_cleanup[i], &changed));
            any |= changed;
        }
        if (!any) break;
    }
    return KILN_OK;
}

/* Whether the build stores floats in 16 bits (fp16 or bf16). */
static bool is_16bit(const kiln_build_options *opts) {
    return opts->precision == KILN_PRECISION_FP16 || opts->precision == KILN_PRECISION_BF16;
}

/* Whether the build lays convolutions out channels-last: opts->channels_last ON forces it on for any
 * target, OFF off; AUTO turns it on when backend b says its convolutions run faster so
 * (conv_channels_last) and the build is 16-bit. Never for a build without FusedConv and FusedPool
 * (the target's kernels or the fusion options), nor with every intermediate marked as an output
 * (each value keeps the layout it is compared in). */
static bool want_channels_last(const kiln_build_options *opts, const kiln_backend *b) {
    bool forced = opts->channels_last == KILN_SWITCH_ON, off = opts->channels_last == KILN_SWITCH_OFF;
    if (off || !(forced || (b->conv_channels_last && is_16bit(opts)))) return false;
    const char *why = opts->mark_all_outputs                     ? "every intermediate value is an output"
                      : !backend_runs_step(b, &g_layout, opts) ? "the build creates no FusedConv or FusedPool"
                                                                 : NULL;
    if (why) KILN_LOG(KILN_LOG_VERBOSE, "%s skipped: %s", g_layout.name, why);
    return !why;
}

/* Folds Q/DQ patterns into integer layers (when the target runs them), runs the clean-up passes to a
 * fixed point, then the fusions, and repeats while the fusions change something (bounded); then, when the build wants them, the channels-last layout and the aligned
 * MatMul operands (16-bit builds for targets that ask), and the clean-up passes again (which cancel
 * the Transposes between convolutions). */
static kiln_status optimize(kiln_graph *g, const kiln_build_options *opts, const kiln_backend *b) {
    bool runs[sizeof g_fusions / sizeof *g_fusions];
    for (size_t i = 0; i < sizeof g_fusions / sizeof *g_fusions; i++) {
        runs[i] = backend_runs_step(b, &g_fusions[i], opts);
        if (!runs[i])
            KILN_LOG(KILN_LOG_VERBOSE, "%s skipped: the options or target %s rule out the kiln-domain ops it creates",
                     g_fusions[i].name, b->name);
    }
    bool folded_qdq;
    if (backend_runs_step(b, &g_qdq, opts)) KILN_TRY(run_step(g, &g_qdq, &folded_qdq));
    else KILN_LOG(KILN_LOG_VERBOSE, "%s skipped: the options or target %s rule out kiln.QConv / kiln.QMatMul", g_qdq.name,
                  b->name);
    for (int round = 0; round < 4; round++) {
        KILN_TRY(cleanup(g));
        bool fused = false, changed;
        for (size_t i = 0; i < sizeof g_fusions / sizeof *g_fusions; i++) {
            if (!runs[i]) continue;
            KILN_TRY(run_step(g, &g_fusions[i], &changed));
            fused |= changed;
        }
        if (!fused) break;
    }
    bool changed = false, aligned = false;
    if (want_channels_last(opts, b)) KILN_TRY(run_step(g, &g_layout, &changed));
    if (b->matmul_aligned_columns && is_16bit(opts) && !opts->mark_all_outputs) KILN_TRY(run_step(g, &g_align, &aligned));
    return changed || aligned ? cleanup(g) : KILN_OK;
}

/* Makes every node output a graph output (in node order), so that passes keep each value, under its
 * model name, and an engine returns it. */
static kiln_status mark_all_outputs(kiln_graph *g) {
    int added = 0;
    for (int i = 0; i < g->nnodes; i++)
        for (int k = 0; k < g->nodes[i].noutputs; k++) {
            int v = g->nodes[i].outputs[k];
            if (v < 0 || g->values[v].is_output) continue;
            KILN_TRY(kiln_graph_add_output(g, v));
            added++;
        }
    KILN_LOG(KILN_LOG_INFO, "every intermediate value is an output (%d added): fusions are blocked, the engine runs the "
             "unfused graph", added);
    return KILN_OK;
}

/* Whether a --layer-precision rule asks for precision p. */
static bool has_rule(const kiln_build_options *opts, kiln_precision p) {
    for (int i = 0; i < opts->nlayer_precisions; i++)
        if (opts->layer_precisions[i].precision == p) return true;
    return false;
}

/* Calibrates g (from the ONNX model at source) for an --int8 build, which needs a target with
 * integer layers. The weights quantized are those the engine holds: constants folded and
 * BatchNormalization folded into its Conv first. */
static kiln_status quantize_int8(kiln_graph *g, const char *source, const kiln_build_options *opts,
                                 const kiln_backend *b) {
    if (!backend_runs_step(b, &g_qdq, opts))
        return kiln_error(KILN_ERR_UNSUPPORTED, "--int8: target %s has no integer layers (kiln.QConv, kiln.QMatMul) yet; "
                          "use --target cpu", b->name);
    static const pass_step conv_bn = {"fuse_conv_bn", kiln_pass_fuse_conv_bn, NULL};
    bool changed;
    KILN_TRY(cleanup(g));
    KILN_TRY(run_step(g, &conv_bn, &changed));
    return kiln_calibrate_int8(g, source, opts);
}

/* Whether the fp8 layers run in FP8 on backend b: on the CPU (the reference kernels) and on a GPU of
 * compute capability 8.9 or newer; otherwise logs why they compute in precision prec instead. */
static bool fp8_runs(const kiln_backend *b, int device, const char *prec) {
    if (!strcmp(b->name, "cpu")) return true;
    char desc[256];
    int major, minor;
    if (b->device_name(device, desc, sizeof desc) != KILN_OK) {
        kiln_error_clear(); /* the build reports a missing GPU itself */
        snprintf(desc, sizeof desc, "GPU %d", device);
    }
    if (kiln_fp8_parse_sm(desc, &major, &minor) && kiln_fp8_capable(major, minor)) return true;
    if (kiln_fp8_parse_sm(desc, &major, &minor))
        KILN_LOG(KILN_LOG_WARN, "fp8: %s has no FP8 tensor cores (compute capability %d.%d; FP8 needs 8.9 or newer): the "
                 "fp8 layers compute in %s", desc, major, minor, prec);
    else
        KILN_LOG(KILN_LOG_WARN, "fp8: the compute capability of %s is unknown: the fp8 layers compute in %s", desc, prec);
    return false;
}

/* Calibrates g for the fp8 layers (--fp8, fp8 rules) where they run in FP8 (fp8_runs): constants
 * folded first, so that the weights quantized are those the engine holds. */
static kiln_status quantize_fp8(kiln_graph *g, const char *source, const kiln_build_options *opts,
                                const kiln_backend *b) {
    if (!fp8_runs(b, opts->device, kiln_precision_name(opts->precision))) return KILN_OK;
    if (!b->runs_fused_op || !b->runs_fused_op("F8MatMul", opts))
        return kiln_error(KILN_ERR_UNSUPPORTED, "--fp8: target %s has no kiln.F8MatMul kernel", b->name);
    KILN_TRY(cleanup(g));
    return kiln_calibrate_fp8(g, source, opts);
}

static kiln_status build_graph(kiln_graph *g, const char *source, const kiln_build_options *opts,
                               const kiln_backend *b) {
    KILN_TRY(kiln_graph_resolve_ops(g, NULL));
    KILN_TRY(kiln_graph_toposort(g));
    KILN_TRY(kiln_graph_infer_shapes(g));
    KILN_TRY(kiln_graph_verify(g));
    /* fp8 first: the int8 calibration wants a graph without Q/DQ nodes, and skips the F8MatMul layers */
    if (opts->fp8 || has_rule(opts, KILN_PRECISION_FP8)) KILN_TRY(quantize_fp8(g, source, opts, b));
    if (opts->int8 || has_rule(opts, KILN_PRECISION_INT8)) KILN_TRY(quantize_int8(g, source, opts, b));
    if (opts->io_fp16) { /* after calibration, which runs the model on float32 batches */
        static const pass_step io = {"io_fp16", kiln_pass_io_fp16, NULL};
        bool changed;
        KILN_TRY(run_step(g, &io, &changed));
    }
    if (opts->mark_all_outputs) KILN_TRY(mark_all_outputs(g));
    int before = g->nnodes;
    KILN_TRY(optimize(g, opts, b));
    KILN_TRY(kiln_graph_verify(g));
    KILN_LOG(KILN_LOG_INFO, "optimized: %d nodes -> %d nodes", before, g->nnodes);
    return KILN_OK;
}

/* Fails unless backend b computes in every precision the options ask for. INT8 layers are checked
 * when they are made (quantize_int8); FP8 needs target cuda, where it falls back (no FP8 kernels). */
static kiln_status check_precisions(const kiln_backend *b, const kiln_build_options *opts) {
    if (opts->precision > KILN_PRECISION_BF16)
        return kiln_error(KILN_ERR_INVALID_ARGUMENT, "engine precision %d is not fp32, fp16 or bf16 (int8 and fp8 are "
                          "layer precisions: --int8, --fp8, --layer-precision)", (int)opts->precision);
    const char *engine_prec = kiln_precision_name(opts->precision);
    bool fp8 = opts->fp8 || has_rule(opts, KILN_PRECISION_FP8);
    if (fp8 && strcmp(b->name, "cuda") && strcmp(b->name, "cpu"))
        return kiln_error(KILN_ERR_UNSUPPORTED, "--fp8: target %s has no FP8 (E4M3) kernels; FP8 runs on --target cuda "
                          "(a GPU of compute capability 8.9 or newer) and on --target cpu (the reference)", b->name);
    if (opts->precision != KILN_PRECISION_FP32 && !b->supports_precision(opts->precision)) {
        if (opts->int8)
            return kiln_error(KILN_ERR_UNSUPPORTED, "--int8 --%s: target %s has no %s kernels for the layers that stay out "
                              "of int8; build with --int8 alone (they compute in fp32)", engine_prec, b->name, engine_prec);
        return kiln_error(KILN_ERR_UNSUPPORTED, "target %s does not compute in %s (use --target cuda)", b->name, engine_prec);
    }
    if (opts->keep_sensitive < 0 || (opts->keep_sensitive > 0 && !opts->int8))
        return kiln_error(KILN_ERR_INVALID_ARGUMENT, "--keep-sensitive %d: give a count >= 1 with --int8",
                          opts->keep_sensitive);
    for (int i = 0; i < opts->nlayer_precisions; i++) {
        const kiln_layer_precision *r = &opts->layer_precisions[i];
        if (!r->pattern || !r->pattern[0] || (unsigned)r->precision > KILN_PRECISION_FP8)
            return kiln_error(KILN_ERR_INVALID_ARGUMENT, "layer precision rule %d has no pattern or an unknown precision", i);
        if (r->precision <= KILN_PRECISION_BF16 && r->precision != KILN_PRECISION_FP32 && !b->supports_precision(r->precision))
            return kiln_error(KILN_ERR_UNSUPPORTED, "--layer-precision '%s:%s': target %s does not compute in %s (use "
                              "--target cuda)", r->pattern, kiln_precision_name(r->precision), b->name,
                              kiln_precision_name(r->precision));
    }
    return KILN_OK;
}

/* The per-layer precisions and profiles of the finished graph, into meta. */
static kiln_status finish_graph(kiln_graph *g, const kiln_build_options *opts, kiln_engine_meta *meta) {
    /* the float rules; int8 rules were the calibration's, fp8 ones fall back to the engine precision */
    kiln_layer_precision *rules = malloc(((size_t)opts->nlayer_precisions + 1) * sizeof *rules);
    if (!rules) return kiln_error(KILN_ERR_OUT_OF_MEMORY, "out of memory");
    int n = 0;
    for (int i = 0; i < opts->nlayer_precisions; i++)
        if (opts->layer_precisions[i].precision <= KILN_PRECISION_BF16) rules[n++] = opts->layer_precisions[i];
    kiln_status s = n > 0 ? kiln_layer_precision_apply(g, opts->precision, rules, n, &meta->node_precision) : KILN_OK;
    free(rules);
    KILN_TRY(s);
    return kiln_profiles_build(g, opts->ranges, opts->nranges, &meta->nprofiles, &meta->profiles);
}

/* The build flags as text for the engine header (what inspect shows), truncated to cap; the tuning
 * level only for a target that tunes (b->tune). */
static void options_text(const kiln_build_options *opts, const kiln_backend *b, char *buf, size_t cap) {
    size_t n = (size_t)snprintf(buf, cap, "--target %s --%s", b->name, kiln_precision_name(opts->precision));
    if (opts->device && n < cap) n += (size_t)snprintf(buf + n, cap - n, " --device %d", opts->device); /* the backend reads it back */
    for (int i = 0; i < opts->nlayer_precisions && n < cap; i++)
        n += (size_t)snprintf(buf + n, cap - n, " --layer-precision %s:%s", opts->layer_precisions[i].pattern,
                              kiln_precision_name(opts->layer_precisions[i].precision));
    if (opts->nranges && n < cap) n += (size_t)snprintf(buf + n, cap - n, " --profile ... (%d ranges)", opts->nranges);
    if (opts->mark_all_outputs && n < cap) n += (size_t)snprintf(buf + n, cap - n, " --mark-all-outputs");
    if (opts->int8 && n < cap)
        n += (size_t)snprintf(buf + n, cap - n, " --int8 --calibrator %s", opts->calibrator ? opts->calibrator : "entropy");
    if (opts->int8 && opts->keep_sensitive && n < cap)
        n += (size_t)snprintf(buf + n, cap - n, " --keep-sensitive %d%s", opts->keep_sensitive,
                              opts->quantize_ends ? " --quantize-ends" : "");
    if (opts->fp8 && n < cap) n += (size_t)snprintf(buf + n, cap - n, " --fp8");
    if (opts->io_fp16 && n < cap) n += (size_t)snprintf(buf + n, cap - n, " --io-format fp16");
    if (b->tune && n < cap) n += (size_t)snprintf(buf + n, cap - n, " --tuning-level %d", opts->tuning_level);
    if (opts->verbose && n < cap) snprintf(buf + n, cap - n, " --verbose");
}

/* Auto-tunes engine e when its backend has tactics and opts ask for it: the winners go into a table in
 * the engine's graph memory, which its metadata (and so the saved file) then records. Fills
 * opts->tuning_stats when given. */
static kiln_status tune_engine(kiln_engine *e, const kiln_build_options *opts) {
    kiln_tuning_stats stats;
    memset(&stats, 0, sizeof stats);
    kiln_status s = KILN_OK;
    if (opts->tuning_level > 0 && e->backend->tune && e->g->nnodes > 0) {
        size_t bytes = (size_t)kiln_engine_tactic_sets(&e->meta) * (size_t)e->g->nnodes * sizeof(kiln_tactic);
        kiln_tactic *t = kiln_graph_alloc(e->g, bytes);
        if (!t) return kiln_error(KILN_ERR_OUT_OF_MEMORY, "out of memory for the tactics table");
        memset(t, 0, bytes);
        kiln_log_level saved = kiln_log_level_current;
        if (opts->verbose) kiln_log_set_level(KILN_LOG_VERBOSE);
        s = e->backend->tune(e->be, &e->meta, opts, t, &stats);
        kiln_log_set_level(saved);
        if (s == KILN_OK && stats.tuned > 0) e->meta.tactics = t;
    }
    if (opts->tuning_stats) *opts->tuning_stats = stats;
    return s;
}

kiln_status kiln_build_graph(kiln_graph *g, const char *source, const kiln_build_options *given, kiln_engine **out) {
    *out = NULL;
    kiln_build_options resolved = given ? *given : (kiln_build_options){0};
    kiln_build_options_apply_env(&resolved);
    const kiln_build_options *opts = &resolved;
    const char *target = opts->target ? opts->target : "cpu";
    const kiln_backend *b = kiln_backend_find(target);
    if (!b) {
        kiln_graph_free(g);
        return kiln_error(KILN_ERR_UNSUPPORTED, "unknown target '%s' (this kiln has: %s)", target, kiln_backend_names());
    }
    kiln_status s = check_precisions(b, opts);
    if (s == KILN_OK && (opts->tuning_level < 0 || opts->tuning_level > 3))
        s = kiln_error(KILN_ERR_INVALID_ARGUMENT, "tuning level %d: use 0 (heuristics only) to 3", opts->tuning_level);
    if (s != KILN_OK) {
        kiln_graph_free(g);
        return s;
    }
    kiln_engine_meta meta;
    memset(&meta, 0, sizeof meta);
    kiln_log_level saved = kiln_log_level_current;
    if (opts->verbose) kiln_log_set_level(KILN_LOG_VERBOSE);
    double t0 = build_now_ms();
    s = build_graph(g, source, opts, b);
    if (s == KILN_OK) s = finish_graph(g, opts, &meta);
    double t1 = build_now_ms();
    kiln_log_set_level(saved);
    log_stage(opts, "graph passes, precisions and profiles", t1 - t0);
    if (s != KILN_OK) {
        kiln_error_prefix(s, "%s", source);
        kiln_graph_free(g);
        return s;
    }
    snprintf(meta.kiln_version, sizeof meta.kiln_version, "%s", KILN_VERSION_STRING);
    snprintf(meta.target, sizeof meta.target, "%s", b->name);
    meta.precision = opts->precision;
    s = b->device_name(opts->device, meta.device, sizeof meta.device);
    if (s != KILN_OK) {
        kiln_graph_free(g);
        return s;
    }
    options_text(opts, b, meta.build_options, sizeof meta.build_options);
    const char *base = strrchr(source, '/');
    snprintf(meta.source, sizeof meta.source, "%s", base ? base + 1 : source);
    meta.created_unix = (uint64_t)time(NULL);
    if (b->store_weights && (s = b->store_weights(g, &meta, opts)) != KILN_OK) {
        kiln_graph_free(g);
        return s;
    }
    kiln_engine_out *file = NULL; /* the weights go to the engine file from here on */
    if (opts->output && (s = kiln_engine_out_begin(g, opts->output, &file)) != KILN_OK) {
        kiln_graph_free(g);
        return s;
    }
    double t_stored = build_now_ms();
    log_stage(opts, "weights in the engine's layout and precision (host conversion)", t_stored - t1);
    s = kiln_engine_from_graph_saving(g, &meta, opts, file, out);
    double t2 = build_now_ms();
    if (s == KILN_OK) s = tune_engine(*out, opts);
    log_stage(opts, "engine (plans, weights to the device)", t2 - t_stored);
    log_stage(opts, "auto-tuning", build_now_ms() - t2);
    if (s != KILN_OK) {
        kiln_engine_free(*out);
        *out = NULL;
    }
    return s;
}

kiln_status kiln_build_onnx(const char *onnx_path, const kiln_build_options *opts, kiln_engine **out) {
    if (!onnx_path || !out) return kiln_error(KILN_ERR_INVALID_ARGUMENT, "kiln_build_onnx: path and out are required");
    *out = NULL;
    kiln_graph *g;
    double t0 = build_now_ms();
    KILN_TRY(kiln_onnx_import(onnx_path, &g));
    log_stage(opts, "ONNX import", build_now_ms() - t0);
    return kiln_build_graph(g, onnx_path, opts, out);
}
