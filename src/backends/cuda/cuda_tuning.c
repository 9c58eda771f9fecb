/* cuda_tuning.c — build-time auto-tuning (`kiln build --tuning-level 1..3`): for every MatMul, Gemm
 * and Conv on the device, the node's own exec function lists the library heuristic's candidate
 * algorithms for its first library call (ctx->candidates), then runs with each candidate forced
 * (ctx->tactic, strict) on scratch buffers of the layer's concrete shapes: warm-up runs, then timed
 * repetitions captured in a CUDA graph (so that host work between calls does not count) between
 * two CUDA events. The fastest becomes the node's tactic. Timing the exec function itself means the
 * tuned configuration (epilogue, batching, padding copies) is exactly the one that runs.
 *
 * Shapes: the engine's static input shapes, else the first optimization profile's opt shapes; with
 * neither, nothing is tuned (logged). A timing cache (engine/timing_cache.h) keyed by the GPU, the
 * driver and library versions and the layer's signature spares layers already timed.
 *
 * Nothing here fails a build that works without tuning: a layer whose candidates cannot be listed or
 * timed keeps the heuristic's choice, with a warning; only running out of host memory is an error. */
#include "backends/cuda/cuda_internal.h"

#include "core/log.h"
#include "core/status.h"
#include "engine/timing_cache.h"
#include "ir/fused_ops.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define TUNE_WARMUP 2 /* untimed runs of a candidate before its timed repetitions */

/* Candidates and timed repetitions per tuning level (index 1..3). */
static const struct {
    int candidates, reps;
} g_levels[4] = {{0, 0}, {3, 3}, {8, 10}, {KILN_CUDA_MAX_CANDIDATES, 20}};

static const char *const g_cudnn_algos[] = {"IMPLICIT_GEMM", "IMPLICIT_PRECOMP_GEMM", "GEMM", "DIRECT",
                                            "FFT", "FFT_TILING", "WINOGRAD", "WINOGRAD_NONFUSED"};

typedef struct tuner {
    kiln_backend_engine *be;
    int level;
    kiln_cuda_ctx kc;       /* the tuning's own stream, handles and workspace */
    cudaEvent_t ev[2];
    char env[512];          /* GPU and library versions: the prefix of every cache key */
    kiln_timing_cache cache;
    kiln_tuning_stats *stats;
    bool broken;            /* the device reported an error that may be sticky: stop timing */
} tuner;

kiln_status kiln_cuda_tactic_rejected(const kiln_node *n, kiln_cuda_ctx *ctx, const char *why) {
    if (ctx->tactic_strict) return kiln_error(KILN_ERR_UNSUPPORTED, "%s '%s': tactic rejected: %s", n->op_type, n->name, why);
    if (ctx->tactic_warned && !__atomic_exchange_n(ctx->tactic_warned, (unsigned char)1, __ATOMIC_RELAXED))
        KILN_LOG(KILN_LOG_WARN, "cuda: node '%s' (%s): its tuned tactic cannot run here (%s); the library's heuristic "
                 "chooses instead (rebuild the engine on this machine to tune it again)", n->name, n->op_type, why);
    return KILN_OK;
}

void kiln_cuda_tactic_str(const kiln_tactic *t, char *buf, size_t cap) {
    char gain[64] = "the heuristic's own choice";
    if (t->heuristic_index != 0 && t->heuristic_ms > 0 && t->time_ms > 0)
        snprintf(gain, sizeof gain, "%.2fx vs heuristic", (double)(t->heuristic_ms / t->time_ms));
    else if (t->heuristic_index != 0)
        snprintf(gain, sizeof gain, "heuristic's candidate %d", t->heuristic_index);
    if (t->kind == KILN_TACTIC_CUBLASLT) {
        snprintf(buf, cap, "cublasLt algo %d (tuned, %s)", t->algo, gain);
    } else if (t->kind == KILN_TACTIC_CUDNN) {
        const char *ops = t->math == CUDNN_TENSOR_OP_MATH || t->math == CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION ? ", tensor ops" : "";
        if (t->algo >= 0 && t->algo < (int)(sizeof g_cudnn_algos / sizeof *g_cudnn_algos))
            snprintf(buf, cap, "cudnn %s%s (tuned, %s)", g_cudnn_algos[t->algo], ops, gain);
        else
            snprintf(buf, cap, "cudnn algo %d%s (tuned, %s)", t->algo, ops, gain);
    } else {
        snprintf(buf, cap, "heuristic");
    }
}

/* ---------------------------------------------------------------- set-up */

/* MatMul, Gemm and Conv, the fused GEMMs (fused_epilogue.cu runs matmul.cu's kernel first, with
 * the same tactic, then its epilogue) and kiln.FusedConv (conv.cu: the candidates are the algorithms
 * of the call the node makes, cudnnConvolutionBiasActivationForward for activation none or Relu; an
 * identity FusedConv fuses only with IMPLICIT_PRECOMP_GEMM, so its other candidates time the
 * convolution plus the bias/epilogue kernels, and the fastest whole wins). */
static bool tunable(const kiln_node *n) {
    if (n->domain && !strcmp(n->domain, KILN_FUSED_DOMAIN))
        return !strcmp(n->op_type, "FusedMatMul") || !strcmp(n->op_type, "FusedGemm") || !strcmp(n->op_type, "FusedConv");
    if (n->domain && n->domain[0] && strcmp(n->domain, "ai.onnx")) return false;
    return !strcmp(n->op_type, "MatMul") || !strcmp(n->op_type, "Gemm") || !strcmp(n->op_type, "Conv");
}

static kiln_status tuner_open(tuner *t) {
    KILN_CUDA_TRY(cudaSetDevice(t->be->device));
    struct cudaDeviceProp prop;
    KILN_CUDA_TRY(cudaGetDeviceProperties(&prop, t->be->device));
    int driver = 0, runtime = 0;
    KILN_CUDA_TRY(cudaDriverGetVersion(&driver));
    KILN_CUDA_TRY(cudaRuntimeGetVersion(&runtime));
    snprintf(t->env, sizeof t->env, "%s sm_%d%d, driver %d, runtime %d, cublasLt %zu, cudnn %zu", prop.name, prop.major,
             prop.minor, driver, runtime, cublasLtGetVersion(), cudnnGetVersion());
    KILN_CUDA_TRY(cudaStreamCreateWithFlags(&t->kc.stream, cudaStreamNonBlocking));
    KILN_CUBLAS_TRY(cublasLtCreate(&t->kc.lt));
    KILN_CUDNN_TRY(cudnnCreate(&t->kc.dnn));
    KILN_CUDNN_TRY(cudnnSetStream(t->kc.dnn, t->kc.stream));
    /* the runtime's sizes: a tactic timed here fits a context's workspace, and fuses where it would */
    size_t ws = t->be->workspace_bytes, zb = kiln_cuda_zero_bytes(t->be);
    KILN_CUDA_TRY(cudaMalloc(&t->kc.workspace, ws));
    t->kc.workspace_bytes = ws;
    void *zero = NULL;
    KILN_CUDA_TRY(cudaMalloc(&zero, zb));
    t->kc.zero = zero;
    t->kc.zero_bytes = zb;
    KILN_CUDA_TRY(cudaMemsetAsync(zero, 0, zb, t->kc.stream));
    t->kc.sm_count = t->be->sm_count;
    t->kc.cc_major = t->be->cc_major;
    t->kc.cc_minor = t->be->cc_minor;
    KILN_CUDA_TRY(cudaEventCreate(&t->ev[0]));
    KILN_CUDA_TRY(cudaEventCreate(&t->ev[1]));
    return KILN_OK;
}

static void tuner_close(tuner *t) {
    if (t->kc.stream) cudaStreamSynchronize(t->kc.stream);
    if (t->ev[0]) cudaEventDestroy(t->ev[0]);
    if (t->ev[1]) cudaEventDestroy(t->ev[1]);
    if (t->kc.workspace) cudaFree(t->kc.workspace);
    if (t->kc.zero) cudaFree((void *)t->kc.zero);
    if (t->kc.dnn) cudnnDestroy(t->kc.dnn);
    if (t->kc.lt) cublasLtDestroy(t->kc.lt);
    if (t->kc.stream) cudaStreamDestroy(t->kc.stream);
    kiln_timing_cache_free(&t->cache);
}

/* The input shapes to tune at (in[k].dtype/ndim/dims): static dims as they are, dynamic ones from
 * the first profile's opt shape. False, with why, when some dim is fixed by neither or an input is a
 * shape input. */
static bool tuning_shapes(const kiln_backend_engine *be, const kiln_engine_meta *meta, kiln_tensor *in, char *why,
                          size_t cap) {
    const kiln_graph *g = be->g;
    for (int k = 0; k < g->ninputs; k++) {
        const kiln_value *v = &g->values[g->inputs[k]];
        const kiln_profile_range *r = meta->nprofiles > 0 ? &meta->profiles[k] : NULL;
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
static bool layer_key(const tuner *t, const kiln_cuda_plan *p, const kiln_node *n, char *buf, size_t cap) {
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

/* Scratch tensors for node n under plan p: constants are the engine's device copies, every other
 * value gets a buffer of its device size in *mem (one allocation, filled with a small finite bit
 * pattern), and host copies are attached as at run time. */
static kiln_status scratch_args(const tuner *t, const kiln_cuda_plan *p, const kiln_node *n, kiln_cuda_tensor *args,
                                void **mem) {
    const kiln_backend_engine *be = t->be;
    int nargs = n->ninputs + n->noutputs;
    size_t total = 0;
    for (int j = 0; j < nargs; j++) {
        int v = j < n->ninputs ? n->inputs[j] : n->outputs[j - n->ninputs];
        if (v >= 0 && be->kind[v] != KILN_CUDA_CONST) total += kiln_cuda_align(kiln_cuda_value_bytes(be, p, v));
    }
    *mem = NULL;
    if (total) {
        KILN_CUDA_TRY(cudaMalloc(mem, total));
        KILN_CUDA_TRY(cudaMemsetAsync(*mem, 0x3C, total, t->kc.stream)); /* 1.06 in fp16, 0.0115 in fp32/bf16 */
    }
    size_t off = 0;
    for (int j = 0; j < nargs; j++) {
        int v = j < n->ninputs ? n->inputs[j] : n->outputs[j - n->ninputs];
        kiln_cuda_tensor *a = &args[j];
        memset(a, 0, sizeof *a);
        a->ndim = -1;
        if (v < 0) continue;
        a->dtype = be->dev_dtype[v];
        a->ndim = p->vals[v].ndim;
        for (int d = 0; d < a->ndim; d++) a->dims[d] = p->vals[v].dims[d].value;
        if (be->kind[v] == KILN_CUDA_CONST) {
            a->data = be->const_dev[v];
            a->host = be->g->values[v].constant->data;
            a->host_dtype = be->g->values[v].constant->dtype;
            continue;
        }
        size_t bytes = kiln_cuda_value_bytes(be, p, v);
        a->data = bytes ? (char *)*mem + off : NULL;
        off += kiln_cuda_align(bytes);
        if (be->kind[v] == KILN_CUDA_HOST) {
            a->host = p->host[v].data;
            a->host_dtype = p->host[v].dtype;
        }
    }
    return KILN_OK;
}

static kiln_status run_exec(tuner *t, int i, const kiln_cuda_tensor *args) {
    const kiln_node *n = &t->be->g->nodes[i];
    return t->be->kernels[i]->exec(n, args, n->ninputs, args + n->ninputs, n->noutputs, &t->kc);
}

/* Waits for the tuning stream; an error there may be sticky, so it also stops the tuning. */
static kiln_status sync_stream(tuner *t) {
    cudaError_t e = cudaStreamSynchronize(t->kc.stream);
    if (e == cudaSuccess) return KILN_OK;
    t->broken = true;
    return kiln_cuda_error(e, "cudaStreamSynchronize", __FILE__, __LINE__);
}

/* reps runs of node i captured into *exec (NULL, with the capture error cleared, when the runs cannot
 * be captured: they are then timed as they are enqueued). */
static void capture_reps(tuner *t, int i, const kiln_cuda_tensor *args, int reps, cudaGraphExec_t *exec) {
    *exec = NULL;
    if (cudaStreamBeginCapture(t->kc.stream, cudaStreamCaptureModeRelaxed) != cudaSuccess) {
        (void)cudaGetLastError();
        return;
    }
    kiln_status s = KILN_OK;
    for (int r = 0; r < reps && s == KILN_OK; r++) s = run_exec(t, i, args);
    cudaGraph_t graph = NULL;
    cudaError_t e = cudaStreamEndCapture(t->kc.stream, &graph);
    if (s == KILN_OK && e == cudaSuccess && cudaGraphInstantiate(exec, graph, 0) != cudaSuccess) *exec = NULL;
    if (graph) cudaGraphDestroy(graph);
    (void)cudaGetLastError(); /* capture errors are not sticky */
}

/* Times candidate c of node i: warm-up, then the mean of reps runs in milliseconds. */
static kiln_status time_candidate(tuner *t, int i, const kiln_cuda_tensor *args, const kiln_tactic *c, float *ms) {
    int reps = g_levels[t->level].reps;
    t->kc.tactic = c;
    t->kc.tactic_strict = true;
    kiln_status s = KILN_OK;
    for (int w = 0; w < TUNE_WARMUP && s == KILN_OK; w++) s = run_exec(t, i, args);
    if (s == KILN_OK) s = sync_stream(t);
    cudaGraphExec_t exec = NULL;
    if (s == KILN_OK) capture_reps(t, i, args, reps, &exec);
    if (s == KILN_OK && exec) {
        cudaError_t e = cudaGraphLaunch(exec, t->kc.stream); /* the first launch uploads the graph */
        if (e != cudaSuccess) s = kiln_cuda_error(e, "cudaGraphLaunch", __FILE__, __LINE__);
    }
    if (s == KILN_OK) {
        cudaError_t e = cudaEventRecord(t->ev[0], t->kc.stream);
        if (e == cudaSuccess && exec) e = cudaGraphLaunch(exec, t->kc.stream);
        for (int r = 0; r < reps && !exec && e == cudaSuccess && s == KILN_OK; r++) s = run_exec(t, i, args);
        if (e == cudaSuccess) e = cudaEventRecord(t->ev[1], t->kc.stream);
        if (e != cudaSuccess && s == KILN_OK) s = kiln_cuda_error(e, "cudaEventRecord", __FILE__, __LINE__);
    }
    if (s == KILN_OK) s = sync_stream(t);
    if (s == KILN_OK) {
        cudaError_t e = cudaEventElapsedTime(ms, t->ev[0], t->ev[1]);
        if (e != cudaSuccess) s = kiln_cuda_error(e, "cudaEventElapsedTime", __FILE__, __LINE__);
        *ms /= (float)reps;
    }
    if (exec) cudaGraphExecDestroy(exec);
    if (s != KILN_OK) (void)cudaGetLastError(); /* a non-sticky error must not surface in a later launch check */
    t->kc.tactic = NULL;
    t->kc.tactic_strict = false;
    return s;
}

/* Lists node i's candidates and times each; *out gets the fastest (kind HEURISTIC when none could be
 * timed: the reason is logged). Fails only when host memory runs out. */
static kiln_status tune_layer(tuner *t, const kiln_cuda_plan *p, int i, kiln_tactic *out) {
    const kiln_node *n = &t->be->g->nodes[i];
    memset(out, 0, sizeof *out);
    kiln_cuda_tensor *args = calloc((size_t)(n->ninputs + n->noutputs) + 1, sizeof *args);
    kiln_cuda_candidates *cd = calloc(1, sizeof *cd);
    if (!args || !cd) {
        free(args);
        free(cd);
        return kiln_error(KILN_ERR_OUT_OF_MEMORY, "out of memory tuning node '%s'", n->name);
    }
    void *mem = NULL;
    kiln_status s = scratch_args(t, p, n, args, &mem);
    cd->max = g_levels[t->level].candidates;
    if (s == KILN_OK) {
        t->kc.candidates = cd;
        s = run_exec(t, i, args);
        t->kc.candidates = NULL;
    }
    if (s == KILN_OK) s = sync_stream(t);
    if (s != KILN_OK) {
        (void)cudaGetLastError();
        KILN_LOG(KILN_LOG_WARN, "cuda: tuning node '%s' (%s): listing its candidates failed (%s): the heuristic chooses",
                 n->name, n->op_type, kiln_last_error());
    } else if (!cd->count) {
        KILN_LOG(KILN_LOG_VERBOSE, "cuda: tuning node '%s' (%s): no library call at these shapes, nothing to time", n->name,
                 n->op_type);
    }
    char log[2048];
    size_t u = 0;
    float best = -1, first = 0;
    int best_c = -1;
    for (int c = 0; s == KILN_OK && c < cd->count && !t->broken; c++) {
        float ms = 0;
        kiln_status ts = time_candidate(t, i, args, &cd->list[c], &ms);
        t->stats->tactics_timed++;
        if (ts != KILN_OK) {
            KILN_LOG(KILN_LOG_VERBOSE, "cuda: tuning node '%s': candidate %d fails: %s", n->name, c, kiln_last_error());
            continue;
        }
        if (c == 0) first = ms;
        if (best_c < 0 || ms < best) {
            best = ms;
            best_c = c;
        }
        if (u < sizeof log)
            u += (size_t)snprintf(log + u, sizeof log - u, "%s %d:%.4f", c ? "," : "", cd->list[c].algo, (double)ms);
    }
    if (s == KILN_OK && cd->count && best_c < 0)
        KILN_LOG(KILN_LOG_WARN, "cuda: tuning node '%s' (%s): none of its %d candidates could be timed%s: the heuristic "
                 "chooses", n->name, n->op_type, cd->count, t->broken ? " (the device reported an error)" : "");
    if (best_c >= 0) {
        *out = cd->list[best_c];
        out->time_ms = best;
        out->heuristic_ms = first;
        char what[160];
        kiln_cuda_tactic_str(out, what, sizeof what);
        KILN_LOG(KILN_LOG_VERBOSE, "cuda: tuned node '%s' (%s): %d candidates (algo:ms)%s -> %s, %.4f ms vs %.4f ms", n->name,
                 n->op_type, cd->count, log, what, (double)best, (double)first);
    }
    if (mem) cudaFree(mem);
    free(args);
    free(cd);
    return KILN_OK;
}

/* ---------------------------------------------------------------- every layer */

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

/* Tunes every tunable device node of plan p into tactics[]. */
static kiln_status tune_layers(tuner *t, const kiln_cuda_plan *p, kiln_tactic *tactics) {
    const kiln_graph *g = t->be->g;
    kiln_tuning_stats *st = t->stats;
    char *key = malloc(KILN_TIMING_CACHE_MAX_KEY + 1);
    if (!key) return kiln_error(KILN_ERR_OUT_OF_MEMORY, "out of memory tuning");
    kiln_status s = KILN_OK;
    for (int i = 0; i < g->nnodes && s == KILN_OK; i++) {
        const kiln_node *n = &g->nodes[i];
        if (!t->be->kernels[i] || t->be->host_exec[i] || !tunable(n)) continue;
        st->layers++;
        bool keyed = layer_key(t, p, n, key, KILN_TIMING_CACHE_MAX_KEY + 1);
        const kiln_tactic *hit = keyed ? kiln_timing_cache_find(&t->cache, key) : NULL;
        if (hit) {
            tactics[i] = *hit;
            st->cache_hits++;
            st->tuned++;
            char what[160];
            kiln_cuda_tactic_str(hit, what, sizeof what);
            KILN_LOG(KILN_LOG_VERBOSE, "cuda: node '%s' (%s): timing cache hit: %s", n->name, n->op_type, what);
            continue;
        }
        if (t->broken) {
            st->skipped++;
            continue;
        }
        st->cache_misses++;
        s = tune_layer(t, p, i, &tactics[i]);
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

kiln_status kiln_cuda_tune(kiln_backend_engine *be, const kiln_engine_meta *meta, const kiln_build_options *opts,
                           kiln_tactic *tactics, kiln_tuning_stats *stats) {
    double t0 = now_ms();
    tuner t;
    memset(&t, 0, sizeof t);
    t.be = be;
    t.level = opts->tuning_level < 1 ? 1 : opts->tuning_level > 3 ? 3 : opts->tuning_level;
    t.stats = stats;
    const kiln_graph *g = be->g;
    kiln_tensor *in = calloc((size_t)g->ninputs + 1, sizeof *in);
    if (!in) return kiln_error(KILN_ERR_OUT_OF_MEMORY, "out of memory tuning");
    char why[512];
    kiln_cuda_plan *p = NULL;
    kiln_status s = KILN_OK;
    if (!tuning_shapes(be, meta, in, why, sizeof why)) {
        for (int i = 0; i < g->nnodes; i++) {
            if (!be->kernels[i] || be->host_exec[i] || !tunable(&g->nodes[i])) continue;
            stats->layers++;
            stats->skipped++;
        }
        if (stats->layers)
            KILN_LOG(KILN_LOG_WARN, "cuda: tuning skipped for %d layers: %s (they follow the heuristics)", stats->skipped, why);
    } else if ((s = kiln_cuda_plan_create(be, in, &p)) != KILN_OK) {
        KILN_LOG(KILN_LOG_WARN, "cuda: tuning skipped: the shapes to tune at cannot be planned: %s", kiln_last_error());
        s = KILN_OK;
    } else if ((s = tuner_open(&t)) != KILN_OK) {
        KILN_LOG(KILN_LOG_WARN, "cuda: tuning skipped: %s", kiln_last_error());
        s = KILN_OK;
    } else {
        if (opts->timing_cache) s = kiln_timing_cache_load(&t.cache, opts->timing_cache);
        if (s == KILN_OK) s = tune_layers(&t, p, tactics);
        if (s == KILN_OK && t.broken)
            KILN_LOG(KILN_LOG_WARN, "cuda: tuning stopped early after a device error; the untuned layers follow the heuristics");
        if (s == KILN_OK && opts->timing_cache && t.cache.added && kiln_timing_cache_save(&t.cache, opts->timing_cache) != KILN_OK)
            KILN_LOG(KILN_LOG_WARN, "%s (the engine is not affected)", kiln_last_error());
    }
    tuner_close(&t);
    kiln_cuda_plan_free(be, p);
    free(in);
    if (s != KILN_OK) return s;
    be->tactics = tactics;
    stats->ms = now_ms() - t0;
    KILN_LOG(KILN_LOG_INFO, "cuda: tuned %d of %d layers in %.0f ms: timing cache %d hits, %d misses, %d tactics timed",
             stats->tuned, stats->layers, stats->ms, stats->cache_hits, stats->cache_misses, stats->tactics_timed);
    return KILN_OK;
}
