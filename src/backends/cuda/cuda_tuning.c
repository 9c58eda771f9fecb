/* cuda_tuning.c — build-time auto-tuning (`kiln build --tuning-level 1..3`) of every MatMul, Gemm
 * and Conv on the device: the tactic sets (one per optimization profile), the shapes each is tuned
 * at, the timing cache, the bounds, and the loop over the layers; cuda_tuning_layer.c times one
 * layer's candidates (the node's own exec function, forced to each candidate, so the tuned
 * configuration — epilogue, batching, padding copies — is exactly the one that runs).
 *
 * Bounds (kiln.h: tuning_budget_ms and the fields after it): a wall-clock budget for the build (the
 * layers left when it is spent keep the heuristic's choice) and one for each layer, a workspace limit
 * (candidates are listed and timed with that much workspace, so the libraries offer none that needs
 * more), and the drop rule (cuda_tuning.h): a candidate whose probe is over TUNE_DROP_RATIO times the
 * fastest probe so far is not timed further, and a cuDNN algorithm dropped so on TUNE_DROPS_TO_SKIP
 * layers of a kind (grouped convolutions or not) and never kept is not tried on that kind again.
 * Some cuDNN algorithms (FFT, FFT_TILING, WINOGRAD_NONFUSED) take 0.2-1.3 ms a run on MobileNet's
 * depthwise convolutions, where the winner takes 5-10 us: timed in full, they made such a build take
 * minutes.
 *
 * Shapes: the engine's static input shapes, else each profile's opt shapes (one tactic set per
 * profile, which runs of that profile use); without profiles, a dynamic first dimension (the batch)
 * is tuned at TUNE_DEFAULT_BATCH. Other dynamic dimensions need a profile; without one nothing is
 * tuned (logged). A timing cache (engine/timing_cache.h) keyed by the GPU, the driver and library
 * versions and the layer's signature spares layers already timed, also layers of one build that
 * share a signature.
 *
 * Nothing here fails a build that works without tuning: a layer whose candidates cannot be listed or
 * timed keeps the heuristic's choice, with a warning; only running out of host memory is an error. */
#include "backends/cuda/cuda_tuning.h"

#include "core/log.h"
#include "core/status.h"
#include "ir/fused_ops.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#define TUNE_DEFAULT_BUDGET_MS 2500      /* kiln_build_options.tuning_budget_ms = 0 */
#define TUNE_DEFAULT_LAYER_BUDGET_MS 100 /* tuning_layer_budget_ms = 0 */
#define TUNE_DEFAULT_WORKSPACE_MB 128    /* tuning_workspace_mb = 0 */
#define TUNE_DEFAULT_BATCH 1             /* a dynamic first dimension without a profile */

/* Candidates and timed repetitions per tuning level (index 1..3). */
static const struct {
    int candidates, reps;
} g_levels[4] = {{0, 0}, {3, 3}, {8, 10}, {KILN_CUDA_MAX_CANDIDATES, 20}};

/* ---------------------------------------------------------------- set-up */

/* MatMul, Gemm and Conv, the fused GEMMs (fused_epilogue.cu runs matmul.cu's kernel first, with
 * the same tactic, then its epilogue), kiln.QMatMul, kiln.QConv and kiln.F8MatMul in float16 engines
 * (quant_matmul.cu, quant_conv_f16.cu, quant_fp8.cu: the int8 / fp8 path against the float16 one, the
 * faster kept; other engines compute no layer in float16) and
 * kiln.FusedConv (conv.cu: the candidates are the algorithms
 * of the call the node makes, cudnnConvolutionBiasActivationForward for activation none or Relu; an
 * identity FusedConv fuses only with IMPLICIT_PRECOMP_GEMM, so its other candidates time the
 * convolution plus the bias/epilogue kernels, and the fastest whole wins). */
static bool tunable(const kiln_backend_engine *be, const kiln_node *n) {
    if (n->domain && !strcmp(n->domain, KILN_FUSED_DOMAIN))
        return !strcmp(n->op_type, "FusedMatMul") || !strcmp(n->op_type, "FusedGemm") || !strcmp(n->op_type, "FusedConv") ||
               ((!strcmp(n->op_type, "QMatMul") || !strcmp(n->op_type, "QConv") || !strcmp(n->op_type, "F8MatMul")) &&
                be->float_dtype == KILN_F16);
    if (n->domain && n->domain[0] && strcmp(n->domain, "ai.onnx")) return false;
    return !strcmp(n->op_type, "MatMul") || !strcmp(n->op_type, "Gemm") || !strcmp(n->op_type, "Conv");
}

/* Whether n is a quantized layer (kiln.QMatMul, kiln.QConv, kiln.F8MatMul) whose int8-or-fp16 (fp8-or-
 * fp16) choice is timed even after the build's budget is spent: two candidates, and a quantized path
 * kept untimed may run at half the fp16 speed. */
static bool integer_layer(const kiln_node *n) {
    return n->domain && !strcmp(n->domain, KILN_FUSED_DOMAIN) &&
           (!strcmp(n->op_type, "QMatMul") || !strcmp(n->op_type, "QConv") || !strcmp(n->op_type, "F8MatMul"));
}

static kiln_status tuner_open_locked(kiln_cuda_tuner *t) {
    KILN_CUDA_TRY(cudaSetDevice(t->be->device));
    KILN_TRY(kiln_cuda_env_key(t->be->device, t->env, sizeof t->env));
    /* the runtime's sizes: a tactic timed here fits a context's workspace, and fuses where it would */
    KILN_TRY(kiln_cuda_ctx_open(t->be->device, t->be->workspace_bytes, KILN_CUDA_OPEN_BLAS | KILN_CUDA_OPEN_DNN,
                                &t->kc));
    const size_t zb = kiln_cuda_zero_bytes(t->be);
    void *zero = NULL;
    KILN_CUDA_TRY(cudaMalloc(&zero, zb));
    t->kc.zero = zero;
    t->kc.zero_bytes = zb;
    KILN_CUDA_TRY(cudaMemsetAsync(zero, 0, zb, t->kc.stream));
    KILN_CUDA_TRY(cudaEventCreate(&t->ev[0]));
    KILN_CUDA_TRY(cudaEventCreate(&t->ev[1]));
    return KILN_OK;
}

/* Makes the tuner's stream, handles, workspace, zeros and events (under the setup lock, as contexts). */
static kiln_status tuner_open(kiln_cuda_tuner *t) {
    kiln_cuda_setup_lock();
    const kiln_status s = tuner_open_locked(t);
    kiln_cuda_setup_unlock();
    return s;
}

static void tuner_close(kiln_cuda_tuner *t) {
    kiln_cuda_setup_lock();
    if (t->kc.stream) cudaStreamSynchronize(t->kc.stream);
    if (t->ev[0]) cudaEventDestroy(t->ev[0]);
    if (t->ev[1]) cudaEventDestroy(t->ev[1]);
    if (t->kc.zero) cudaFree((void *)t->kc.zero);
    kiln_cuda_ctx_close(&t->kc);
    kiln_cuda_setup_unlock();
    kiln_timing_cache_free(&t->cache);
}

/* The input shapes to tune profile `profile` at (in[k].dtype/ndim/dims): static dims as they are,
 * dynamic ones from the profile's opt shape; without profiles, a dynamic first dimension is TUNE_DEFAULT_BATCH
 * (*default_batch is set then). False, with why, when some dim is fixed by none of these or an input
 * is a shape input. */
static bool tuning_shapes(const kiln_backend_engine *be, const kiln_engine_meta *meta, int profile, kiln_tensor *in,
                          bool *default_batch, char *why, size_t cap) {
    const kiln_graph *g = be->g;
    *default_batch = false;
    for (int k = 0; k < g->ninputs; k++) {
        const kiln_value *v = &g->values[g->inputs[k]];
        const kiln_profile_range *r = meta->nprofiles > 0 ? &meta->profiles[profile * g->ninputs + k] : NULL;
        if (be->kind[g->inputs[k]] == KILN_CUDA_HOST) {
            snprintf(why, cap, "input '%s' is a shape input, and its values are known only at run time", v->name);
            return false;
        }
        bool from_profile = r && r->ndim >= 0 && (v->ndim < 0 || r->ndim == v->ndim);
        in[k].dtype = v->dtype;
        in[k].ndim = from_profile ? r->ndim : v->ndim;
        if (in[k].ndim < 0) {
            snprintf(why, cap, "input '%s' has an unknown rank and no --profile gives its shape", v->name);
            return false;
        }
        for (int d = 0; d < in[k].ndim; d++) {
            if (from_profile) {
                in[k].dims[d] = r->opt[d];
            } else if (v->dims[d].sym == 0 && v->dims[d].value >= 0) {
                in[k].dims[d] = v->dims[d].value;
            } else if (d == 0 && meta->nprofiles == 0) {
                in[k].dims[d] = TUNE_DEFAULT_BATCH;
                *default_batch = true;
            } else {
                snprintf(why, cap, "input '%s' dimension %d is dynamic and no --profile gives its opt size", v->name, d);
                return false;
            }
        }
    }
    return true;
}

/* ---------------------------------------------------------------- one layer */

/* The layer's signature (what its timing depends on) after the environment: op, tuning level, device
 * dtype and concrete shape of every input and output (constants marked), and the attributes
 * (transposes, alpha and beta, the conv geometry). False when it does not fit in cap. */
static bool layer_key(const kiln_cuda_tuner *t, const kiln_cuda_plan *p, const kiln_node *n, char *buf, size_t cap) {
    const kiln_backend_engine *be = t->be;
    size_t u = (size_t)snprintf(buf, cap, "%s | %s level %d", t->env, n->op_type, t->level);
    for (int io = 0; io < 2; io++) {
        int count = io ? n->noutputs : n->ninputs;
        for (int k = 0; k < count && u < cap; k++) {
            int v = io ? n->outputs[k] : n->inputs[k];
            if (v < 0) {
                u += (size_t)snprintf(buf + u, cap - u, " -");
                continue;
            }
            u += (size_t)snprintf(buf + u, cap - u, " %s%s[", be->kind[v] == KILN_CUDA_CONST ? "const " : "",
                                  kiln_dtype_name(be->dev_dtype[v]));
            for (int d = 0; d < p->vals[v].ndim && u < cap; d++)
                u += (size_t)snprintf(buf + u, cap - u, "%s%lld", d ? "x" : "", (long long)p->vals[v].dims[d].value);
            if (u < cap) u += (size_t)snprintf(buf + u, cap - u, "]");
        }
    }
    for (int a = 0; a < n->nattrs && u < cap; a++) {
        const kiln_attr *at = &n->attrs[a];
        if (at->type == KILN_ATTR_INT) {
            u += (size_t)snprintf(buf + u, cap - u, " %s=%lld", at->name, (long long)at->i);
        } else if (at->type == KILN_ATTR_FLOAT) {
            u += (size_t)snprintf(buf + u, cap - u, " %s=%.9g", at->name, (double)at->f);
        } else if (at->type == KILN_ATTR_STRING) {
            u += (size_t)snprintf(buf + u, cap - u, " %s=%.*s", at->name, (int)at->s_len, at->s);
        } else if (at->type == KILN_ATTR_INTS) {
            u += (size_t)snprintf(buf + u, cap - u, " %s=", at->name);
            for (int e = 0; e < at->n && u < cap; e++)
                u += (size_t)snprintf(buf + u, cap - u, "%s%lld", e ? "," : "", (long long)at->ints[e]);
        }
    }
    return u < cap && u <= KILN_TIMING_CACHE_MAX_KEY;
}

/* ---------------------------------------------------------------- every layer */

/* Tunes every tunable device node of plan p into tactics[]. */
static kiln_status tune_layers(kiln_cuda_tuner *t, const kiln_cuda_plan *p, kiln_tactic *tactics) {
    const kiln_graph *g = t->be->g;
    kiln_tuning_stats *st = t->stats;
    char *key = malloc(KILN_TIMING_CACHE_MAX_KEY + 1);
    if (!key) return kiln_error(KILN_ERR_OUT_OF_MEMORY, "out of memory tuning");
    kiln_status s = KILN_OK;
    for (int i = 0; i < g->nnodes && s == KILN_OK; i++) {
        const kiln_node *n = &g->nodes[i];
        if (!t->be->kernels[i] || t->be->host_exec[i] || !tunable(t->be, n)) continue;
        st->layers++;
        bool keyed = layer_key(t, p, n, key, KILN_TIMING_CACHE_MAX_KEY + 1);
        const kiln_tactic *hit = keyed ? kiln_timing_cache_find(&t->cache, key) : NULL;
        if (hit) {
            tactics[i] = *hit;
            bool earlier = (int)(((const char *)hit - (const char *)t->cache.recs) / sizeof *t->cache.recs) >= t->loaded;
            st->cache_hits++;
            st->same_as_earlier += earlier;
            st->tuned++;
            char what[160];
            kiln_cuda_tactic_str(hit, what, sizeof what);
            KILN_LOG(KILN_LOG_VERBOSE, "cuda: node '%s' (%s): %s: %s", n->name, n->op_type,
                     earlier ? "same signature as a layer timed earlier in this build" : "timing cache hit", what);
            continue;
        }
        if (t->broken || (kiln_cuda_now_ms() > t->build_end && !integer_layer(n))) {
            st->skipped++;
            st->out_of_budget += !t->broken;
            continue;
        }
        st->cache_misses++;
        s = kiln_cuda_tune_layer(t, p, i, &tactics[i]);
        if (s != KILN_OK || tactics[i].kind == KILN_TACTIC_HEURISTIC) {
            st->skipped++;
            continue;
        }
        st->tuned++;
        if (keyed) s = kiln_timing_cache_put(&t->cache, key, &tactics[i]);
    }
    free(key);
    return s;
}

/* A bound from an option: v > 0 as it is, 0 the default, < 0 none (INFINITY). */
static double bound(int v, double dflt) { return v > 0 ? v : v == 0 ? dflt : INFINITY; }

/* Sets t's bounds from opts and says them in the verbose log. */
static void set_bounds(kiln_cuda_tuner *t, const kiln_build_options *opts, double start) {
    t->build_end = start + bound(opts->tuning_budget_ms, TUNE_DEFAULT_BUDGET_MS);
    t->layer_ms = bound(opts->tuning_layer_budget_ms, TUNE_DEFAULT_LAYER_BUDGET_MS);
    double ws_mb = bound(opts->tuning_workspace_mb, TUNE_DEFAULT_WORKSPACE_MB);
    t->max_workspace = ws_mb * 1048576.0 < (double)t->kc.workspace_bytes ? (size_t)(ws_mb * 1048576.0) : t->kc.workspace_bytes;
    char build[32] = "no limit", layer[32] = "no limit";
    if (isfinite(t->build_end)) snprintf(build, sizeof build, "%.0f ms", t->build_end - start);
    if (isfinite(t->layer_ms)) snprintf(layer, sizeof layer, "%.0f ms", t->layer_ms);
    KILN_LOG(KILN_LOG_VERBOSE, "cuda: tuning level %d: up to %d candidates a layer, up to %d timed runs each; budget %s "
             "for the build, %s a layer; candidates within %.0f MiB of workspace; a candidate over %.0fx the best so far "
             "on its first run is dropped", t->level, t->candidates, t->reps, build, layer,
             t->max_workspace / 1048576.0, (double)TUNE_DROP_RATIO);
}

/* Counts the tunable layers of a set that cannot be tuned (no shapes to tune at) as skipped. */
static int skip_set(const kiln_backend_engine *be, kiln_tuning_stats *stats) {
    const kiln_graph *g = be->g;
    int n = 0;
    for (int i = 0; i < g->nnodes; i++) n += be->kernels[i] && !be->host_exec[i] && tunable(be, &g->nodes[i]);
    stats->layers += n;
    stats->skipped += n;
    return n;
}

/* Tunes tactic set `set` (profile set's opt shapes) into tactics, opening t on first use. */
static kiln_status tune_set(kiln_cuda_tuner *t, const kiln_engine_meta *meta, const kiln_build_options *opts, int set,
                            kiln_tensor *in, kiln_tactic *tactics, double start) {
    kiln_backend_engine *be = t->be;
    char why[512], where[32] = "";
    bool default_batch = false;
    if (meta->nprofiles > 1) snprintf(where, sizeof where, " (profile %d)", set);
    if (!tuning_shapes(be, meta, set, in, &default_batch, why, sizeof why)) {
        int n = skip_set(be, t->stats);
        if (n) KILN_LOG(KILN_LOG_WARN, "cuda: tuning skipped for %d layers%s: %s (they follow the heuristics)", n, where, why);
        return KILN_OK;
    }
    kiln_cuda_plan *p = NULL;
    if (kiln_cuda_plan_create(be, in, &p) != KILN_OK) {
        KILN_LOG(KILN_LOG_WARN, "cuda: tuning skipped%s: the shapes to tune at cannot be planned: %s", where,
                 kiln_last_error());
        skip_set(be, t->stats);
        return KILN_OK;
    }
    kiln_status s = KILN_OK;
    if (!t->kc.stream) {
        if (tuner_open(t) != KILN_OK) {
            KILN_LOG(KILN_LOG_WARN, "cuda: tuning skipped: %s", kiln_last_error());
            tuner_close(t);
            memset(&t->kc, 0, sizeof t->kc);
            memset(t->ev, 0, sizeof t->ev);
            t->broken = true; /* with no stream: the sets left are skipped */
            skip_set(be, t->stats);
            kiln_cuda_plan_free(be, p);
            return KILN_OK;
        }
        set_bounds(t, opts, start);
        if (opts->timing_cache) s = kiln_timing_cache_load(&t->cache, opts->timing_cache);
        t->loaded = t->cache.n;
    }
    if (default_batch)
        KILN_LOG(KILN_LOG_INFO, "cuda: tuning at batch %d, the dynamic batch's default opt size (give --profile to tune "
                 "at another)", TUNE_DEFAULT_BATCH);
    else if (meta->nprofiles > 1)
        KILN_LOG(KILN_LOG_VERBOSE, "cuda: tuning profile %d at its opt shapes", set);
    if (s == KILN_OK) s = tune_layers(t, p, tactics);
    kiln_cuda_plan_free(be, p);
    return s;
}

kiln_status kiln_cuda_tune(kiln_backend_engine *be, const kiln_engine_meta *meta, const kiln_build_options *opts,
                           kiln_tactic *tactics, kiln_tuning_stats *stats) {
    double t0 = kiln_cuda_now_ms();
    kiln_cuda_tuner t;
    memset(&t, 0, sizeof t);
    t.be = be;
    t.level = opts->tuning_level < 1 ? 1 : opts->tuning_level > 3 ? 3 : opts->tuning_level;
    t.candidates = g_levels[t.level].candidates;
    t.reps = g_levels[t.level].reps;
    t.stats = stats;
    t.build_end = INFINITY;
    const kiln_graph *g = be->g;
    kiln_tensor *in = calloc((size_t)g->ninputs + 1, sizeof *in);
    if (!in) return kiln_error(KILN_ERR_OUT_OF_MEMORY, "out of memory tuning");
    kiln_status s = KILN_OK;
    int sets = kiln_engine_tactic_sets(meta);
    for (int set = 0; set < sets && s == KILN_OK; set++) {
        if (t.broken && !t.kc.stream) { /* the tuner could not be opened: nothing can be timed */
            skip_set(be, stats);
            continue;
        }
        s = tune_set(&t, meta, opts, set, in, tactics + (size_t)set * (size_t)g->nnodes, t0);
    }
    if (s == KILN_OK && stats->out_of_budget)
        KILN_LOG(KILN_LOG_WARN, "cuda: the tuning budget (%.0f ms) was spent: %d layers follow the heuristics "
                 "(--tuning-budget-ms raises it)", t.build_end - t0, stats->out_of_budget);
    if (s == KILN_OK && t.broken && t.kc.stream)
        KILN_LOG(KILN_LOG_WARN, "cuda: tuning stopped early after a device error; the untuned layers follow the heuristics");
    if (s == KILN_OK && opts->timing_cache && t.cache.added && kiln_timing_cache_save(&t.cache, opts->timing_cache) != KILN_OK)
        KILN_LOG(KILN_LOG_WARN, "%s (the engine is not affected)", kiln_last_error());
    tuner_close(&t);
    free(in);
    if (s != KILN_OK) return s;
    be->tactics = tactics;
    be->tactic_sets = sets;
    stats->ms = kiln_cuda_now_ms() - t0;
    KILN_LOG(KILN_LOG_INFO, "cuda: tuned %d of %d layers in %.0f ms: timing cache %d hits (%d of them layers of this "
             "build), %d misses, %d tactics timed, %d dropped", stats->tuned, stats->layers, stats->ms, stats->cache_hits,
             stats->same_as_earlier, stats->cache_misses, stats->tactics_timed, stats->dropped);
    return KILN_OK;
}
