/* cuda_tuning_layer.c — auto-tuning of one layer (cuda_tuning.c has the build's side): its exec
 * function lists the library heuristic's candidates on scratch buffers of the layer's shapes, then
 * each candidate runs forced (ctx->tactic, strict): a warm-up run, one timed run (the probe), then
 * timed repetitions, all captured in CUDA graphs and timed with CUDA events. The budget of the layer
 * bounds them (a candidate's repetitions shrink to fit its share; once it is spent, the candidates
 * left are dropped, but the heuristic's own choice is always timed), and the drop rule (cuda_tuning.h)
 * stops far slower candidates after their probe. */
#include "backends/cuda/cuda_tuning.h"

#include "core/log.h"
#include "core/status.h"
#include "ir/fused_ops.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Node-state slots of a quantized layer's paths (KILN_TACTIC_PATH algos 0 .. TUNE_PATH_SLOTS - 1:
 * kiln.QConv has eight, quant_conv_im2col.cu). */
#define TUNE_PATH_SLOTS 8

/* Scratch tensors for node n under plan p: constants are the engine's device copies, every other
 * value gets a buffer of its device size in *mem (one allocation, filled with a small finite bit
 * pattern), and host copies are attached as at run time. */
static kiln_status scratch_args(const kiln_cuda_tuner *t, const kiln_cuda_plan *p, const kiln_node *n, kiln_cuda_tensor *args,
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

static kiln_status run_exec(kiln_cuda_tuner *t, int i, const kiln_cuda_tensor *args) {
    const kiln_node *n = &t->be->g->nodes[i];
    return t->be->kernels[i]->exec(n, args, n->ninputs, args + n->ninputs, n->noutputs, &t->kc);
}

/* Waits for the tuning stream; an error there may be sticky, so it also stops the tuning. */
static kiln_status sync_stream(kiln_cuda_tuner *t) {
    cudaError_t e = cudaStreamSynchronize(t->kc.stream);
    if (e == cudaSuccess) return KILN_OK;
    t->broken = true;
    return kiln_cuda_error(e, "cudaStreamSynchronize", __FILE__, __LINE__);
}

/* reps runs of node i captured into *exec (NULL, with the capture error cleared, when the runs cannot
 * be captured: they are then timed as they are enqueued). */
static void capture_reps(kiln_cuda_tuner *t, int i, const kiln_cuda_tensor *args, int reps, cudaGraphExec_t *exec) {
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

/* Enqueues reps runs of node i between the two events (as one captured graph when possible, so that
 * the host's work in the exec function does not count: some cuDNN algorithms set up for milliseconds
 * on the host, which a replayed engine never does) and waits for them; *ms gets the mean. */
static kiln_status timed_runs(kiln_cuda_tuner *t, int i, const kiln_cuda_tensor *args, int reps, float *ms) {
    kiln_status s = KILN_OK;
    cudaGraphExec_t exec = NULL;
    capture_reps(t, i, args, reps, &exec);
    cudaError_t e = exec ? cudaGraphUpload(exec, t->kc.stream) : cudaSuccess;
    if (e == cudaSuccess) e = cudaEventRecord(t->ev[0], t->kc.stream);
    if (e == cudaSuccess && exec) e = cudaGraphLaunch(exec, t->kc.stream);
    for (int r = 0; r < reps && !exec && e == cudaSuccess && s == KILN_OK; r++) s = run_exec(t, i, args);
    if (e == cudaSuccess) e = cudaEventRecord(t->ev[1], t->kc.stream);
    if (e != cudaSuccess && s == KILN_OK) s = kiln_cuda_error(e, "cudaEventRecord", __FILE__, __LINE__);
    if (s == KILN_OK) s = sync_stream(t);
    if (s == KILN_OK) {
        e = cudaEventElapsedTime(ms, t->ev[0], t->ev[1]);
        if (e != cudaSuccess) s = kiln_cuda_error(e, "cudaEventElapsedTime", __FILE__, __LINE__);
        *ms /= (float)reps;
    }
    if (exec) cudaGraphExecDestroy(exec);
    return s;
}

/* Times candidate c of node i: a warm-up run, the probe (one timed run), then up to the level's
 * repetitions, as many as fit before share_end at the probe's pace (wall clock, kiln_cuda_now_ms()); *ms gets
 * their mean, or the probe's time when no more fit; *probe the probe's. Instead, *ms = -1 and
 * dropped says why when the warm-up ends after layer_end, or the probe is over TUNE_DROP_RATIO times
 * best_probe, the fastest probe of the layer so far (< 0: none yet; *slow is set then). A candidate
 * that must be timed (always_timed) is never dropped and gets at least TUNE_MUST_REPS repetitions
 * (the level's, when fewer), budget or not. Probes are compared with probes: a lone graph launch
 * carries latency that the means of many runs spread. */
static kiln_status time_candidate(kiln_cuda_tuner *t, int i, const kiln_cuda_tensor *args, const kiln_tactic *c, bool must,
                                  float best_probe, double share_end, double layer_end, float *ms, float *probe, bool *slow,
                                  char *dropped, size_t cap) {
    *ms = -1;
    *probe = 0;
    *slow = false;
    dropped[0] = 0;
    t->kc.tactic = c;
    t->kc.tactic_strict = true;
    kiln_status s = run_exec(t, i, args);
    if (s == KILN_OK) s = sync_stream(t);
    if (s == KILN_OK && kiln_cuda_now_ms() > layer_end && !must)
        snprintf(dropped, cap, "its warm-up run spent the rest of the layer's budget");
    else if (s == KILN_OK)
        s = timed_runs(t, i, args, 1, probe);
    *slow = s == KILN_OK && !must && !dropped[0] && best_probe >= 0 && *probe > TUNE_DROP_RATIO * best_probe;
    if (*slow)
        snprintf(dropped, cap, "its first timed run took %.4f ms, over %.0fx the fastest so far (%.4f ms)", (double)*probe,
                 (double)TUNE_DROP_RATIO, (double)best_probe);
    if (s == KILN_OK && !dropped[0]) {
        double left = share_end - kiln_cuda_now_ms();
        int reps = t->reps;
        if (*probe > 0 && left < reps * (double)*probe) reps = left > 0 ? (int)(left / *probe) : 0;
        int floor = must ? (t->reps < TUNE_MUST_REPS ? t->reps : TUNE_MUST_REPS) : 0;
        if (reps < floor) reps = floor;
        *ms = *probe;
        if (reps > 1) s = timed_runs(t, i, args, reps, ms);
    }
    if (s != KILN_OK) (void)cudaGetLastError(); /* a non-sticky error must not surface in a later launch check */
    t->kc.tactic = NULL;
    t->kc.tactic_strict = false;
    return s;
}

/* The drop record of a cuDNN candidate of node n (NULL for other kinds): [grouped][algo][math]. */
static unsigned char *conv_drops(kiln_cuda_tuner *t, const kiln_node *n, const kiln_tactic *c, bool **kept) {
    if (c->kind != KILN_TACTIC_CUDNN || c->algo < 0 || c->algo >= CUDNN_CONVOLUTION_FWD_ALGO_COUNT || c->math < 0 ||
        c->math >= TUNE_MATH_TYPES)
        return NULL;
    int grouped = kiln_attr_int(n, "group", 1) > 1;
    *kept = &t->conv_kept[grouped][c->algo][c->math];
    return &t->conv_dropped[grouped][c->algo][c->math];
}

/* Whether candidate c of cd is timed whatever the budgets say: the heuristic's own choice (c = 0) and
 * an integer layer's int8 / fp16 paths (KILN_TACTIC_PATH), whose choice is the point of tuning it. */
static bool always_timed(const kiln_cuda_candidates *cd, int c) { return c == 0 || cd->list[c].kind == KILN_TACTIC_PATH; }

/* Why candidate c (of cd, node n) is not timed at all, or NULL: a cuDNN algorithm dropped on earlier
 * layers of this kind, or the layer's budget spent (never for an always_timed one). */
static const char *skip_reason(kiln_cuda_tuner *t, const kiln_node *n, const kiln_cuda_candidates *cd, int c,
                               double layer_end, char *buf, size_t cap) {
    if (always_timed(cd, c)) return NULL;
    if (kiln_cuda_now_ms() > layer_end) return "the layer's budget was spent";
    bool *kept = NULL;
    unsigned char *drops = conv_drops(t, n, &cd->list[c], &kept);
    if (drops && *drops >= TUNE_DROPS_TO_SKIP && !*kept) {
        snprintf(buf, cap, "it was over %.0fx the best on %d earlier %s convolutions", (double)TUNE_DROP_RATIO, *drops,
                 kiln_attr_int(n, "group", 1) > 1 ? "grouped" : "ungrouped");
        return buf;
    }
    return NULL;
}

/* Times node i's candidates (listed in cd) within the layer's budget, counted from start (after the
 * listing, whose first cuDNN queries of a build can take longer than the budget); the heuristic's own
 * choice (candidate 0) is timed whatever is left. A quantized layer's paths (KILN_TACTIC_PATH, algo
 * 0 .. TUNE_PATH_SLOTS - 1) keep their node states in path_slots[algo] when path_slots is not NULL
 * (their kernels' states differ: kiln.QConv's implicit-GEMM one and its float16 path's). The int8
 * time logged is the fastest of the paths other than float16's (algo 1). *best_c gets the fastest
 * (-1: none), *best its time and *first the time of candidate 0 (0 when not timed). */
static void time_candidates(kiln_cuda_tuner *t, int i, const kiln_cuda_tensor *args, const kiln_cuda_candidates *cd, double start,
                            kiln_cuda_node_state **path_slots, int *best_c, float *best, float *first) {
    const kiln_node *n = &t->be->g->nodes[i];
    double layer_end = fmin(start + t->layer_ms, t->build_end);
    char log[2048], why[256];
    size_t u = 0;
    *best_c = -1;
    *best = -1;
    *first = 0;
    float best_probe = -1, path_ms[2] = {-1, -1}; /* a quantized layer's int8 / fp8 and fp16 paths */
    for (int c = 0; c < cd->count && !t->broken; c++) {
        const kiln_tactic *cand = &cd->list[c];
        const char *skip = skip_reason(t, n, cd, c, layer_end, why, sizeof why);
        double now = kiln_cuda_now_ms();
        if (skip) {
            t->stats->dropped++;
            KILN_LOG(KILN_LOG_VERBOSE, "cuda: tuning node '%s': candidate %d (algo %d) dropped: %s", n->name, c, cand->algo,
                     skip);
            continue;
        }
        if (path_slots && cand->kind == KILN_TACTIC_PATH && cand->algo >= 0 && cand->algo < TUNE_PATH_SLOTS)
            t->kc.state = &path_slots[cand->algo];
        float ms = 0, probe = 0;
        double share_end = now + (layer_end - now) / (cd->count - c);
        bool slow = false;
        kiln_status ts = time_candidate(t, i, args, cand, always_timed(cd, c), best_probe, share_end, layer_end, &ms,
                                        &probe, &slow, why, sizeof why);
        t->stats->tactics_timed++;
        if (ts != KILN_OK) {
            KILN_LOG(KILN_LOG_VERBOSE, "cuda: tuning node '%s': candidate %d fails: %s", n->name, c, kiln_last_error());
            continue;
        }
        bool *kept = NULL;
        unsigned char *drops = conv_drops(t, n, cand, &kept);
        if (ms < 0) {
            t->stats->dropped++;
            if (drops && slow && *drops < 255) ++*drops;
            KILN_LOG(KILN_LOG_VERBOSE, "cuda: tuning node '%s': candidate %d (algo %d) dropped: %s", n->name, c, cand->algo,
                     why);
            continue;
        }
        if (drops) *kept = true;
        if (best_probe < 0 || probe < best_probe) best_probe = probe;
        if (c == 0) *first = ms;
        if (cand->kind == KILN_TACTIC_PATH && cand->algo >= 0) {
            int k = cand->algo == 1 ? 1 : 0;
            if (path_ms[k] < 0 || ms < path_ms[k]) path_ms[k] = ms;
        }
        if (*best_c < 0 || ms < *best) {
            *best = ms;
            *best_c = c;
        }
        if (u < sizeof log)
            u += (size_t)snprintf(log + u, sizeof log - u, "%s %d:%.4f", u ? "," : "", cand->algo, (double)ms);
    }
    if (*best_c >= 0)
        KILN_LOG(KILN_LOG_VERBOSE, "cuda: node '%s' (%s): %d candidates timed in %.1f ms (algo:ms)%s", n->name, n->op_type,
                 cd->count, kiln_cuda_now_ms() - start, log);
    bool f16_listed = false; /* a layer without a float16 path (a QConv with a float32 residual) times its int8 ones */
    for (int c = 0; c < cd->count; c++) f16_listed |= cd->list[c].kind == KILN_TACTIC_PATH && cd->list[c].algo == 1;
    if (*best_c >= 0 && cd->list[*best_c].kind == KILN_TACTIC_PATH && !f16_listed) {
        KILN_LOG(KILN_LOG_INFO, "cuda: layer '%s': int8 paths only: path %d, %.3f ms", n->name, cd->list[*best_c].algo,
                 (double)*best);
    } else if (*best_c >= 0 && cd->list[*best_c].kind == KILN_TACTIC_PATH) {
        char ms[2][32];
        for (int k = 0; k < 2; k++) {
            if (path_ms[k] >= 0) snprintf(ms[k], sizeof ms[k], "%.3f ms", (double)path_ms[k]);
            else snprintf(ms[k], sizeof ms[k], "not timed");
        }
        const char *q = !strcmp(n->op_type, "F8MatMul") ? "fp8" : "int8";
        int algo = cd->list[*best_c].algo;
        char won[32];
        if (algo == 1) snprintf(won, sizeof won, "fp16");
        else if (algo == 0) snprintf(won, sizeof won, "%s", q);
        else snprintf(won, sizeof won, "%s (path %d)", q, algo);
        KILN_LOG(KILN_LOG_INFO, "cuda: layer '%s': %s %s vs fp16 %s -> %s", n->name, q, ms[0], ms[1], won);
    }
}

kiln_status kiln_cuda_tune_layer(kiln_cuda_tuner *t, const kiln_cuda_plan *p, int i, kiln_tactic *out) {
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
    cd->max = t->candidates;
    /* kiln.QMatMul, kiln.QConv and kiln.F8MatMul prepare their weights in their node state on the
     * first run (quant_gemm.cu, quant_fp8.cu): a slot per path for this layer's runs keeps them, so
     * that no timed run repeats that work and neither path meets the other's state */
    kiln_cuda_node_state *slot[TUNE_PATH_SLOTS] = {NULL}; /* [0]: the listing's and the default path's, [1]: fp16's */
    if (n->domain && !strcmp(n->domain, KILN_FUSED_DOMAIN) &&
        (!strcmp(n->op_type, "QMatMul") || !strcmp(n->op_type, "QConv") || !strcmp(n->op_type, "F8MatMul")))
        t->kc.state = &slot[0];
    size_t ws = t->kc.workspace_bytes;
    t->kc.workspace_bytes = t->max_workspace; /* the libraries then offer, and run, only candidates within it */
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
    float best = -1, first = 0;
    int best_c = -1;
    if (s == KILN_OK) time_candidates(t, i, args, cd, kiln_cuda_now_ms(), t->kc.state ? slot : NULL, &best_c, &best, &first);
    t->kc.workspace_bytes = ws;
    if (s == KILN_OK && cd->count && best_c < 0)
        KILN_LOG(KILN_LOG_WARN, "cuda: tuning node '%s' (%s): none of its %d candidates could be timed%s: the heuristic "
                 "chooses", n->name, n->op_type, cd->count, t->broken ? " (the device reported an error)" : "");
    if (best_c >= 0) {
        *out = cd->list[best_c];
        out->time_ms = best;
        out->heuristic_ms = first;
        char what[160];
        kiln_cuda_tactic_str(out, what, sizeof what);
        KILN_LOG(KILN_LOG_VERBOSE, "cuda: tuned node '%s' (%s): %s, %.4f ms", n->name, n->op_type, what, (double)best);
    }
    t->kc.state = NULL;
    for (int k = 0; k < TUNE_PATH_SLOTS; k++)
        if (slot[k]) slot[k]->destroy(slot[k]);
    if (mem) cudaFree(mem);
    free(args);
    free(cd);
    return KILN_OK;
}
