/* calibrate.c — INT8 post-training calibration (calibrate.h): layer selection, the calibration runs
 * of the float32 model, and the insertion of Q/DQ nodes. */
#include "quant/calibrate.h"

#include "core/log.h"
#include "core/status.h"
#include "quant/calib_hist.h"
#include "quant/calib_io.h"
#include "quant/fp8.h"
#include "quant/sensitivity.h"
#include "layer_precision.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* The layers to quantize and the distinct activation values they read. */
typedef struct calib_plan {
    int nlayers, *layers;   /* node ids */
    int nacts, *acts;       /* value ids, distinct */
    const char **names;     /* acts' names */
    double *thresholds;     /* per act */
} calib_plan;

static void plan_free(calib_plan *p) {
    free(p->layers), free(p->acts), free(p->names), free(p->thresholds);
    memset(p, 0, sizeof *p);
}

static bool is_default_op(const kiln_node *n, const char *op) {
    return (!n->domain[0] || !strcmp(n->domain, "ai.onnx")) && !strcmp(n->op_type, op);
}

/* Whether node n is a layer the calibration quantizes: a Conv, MatMul or Gemm (transA 0, alpha and
 * beta 1) with a float32 activation input 0 that is not a constant and constant float32 weights
 * (Conv: rank >= 3; MatMul, Gemm: 2-D). */
static bool quantizable(const kiln_graph *g, const kiln_node *n) {
    bool conv = is_default_op(n, "Conv"), mm = is_default_op(n, "MatMul"), gemm = is_default_op(n, "Gemm");
    if ((!conv && !mm && !gemm) || n->ninputs < 2 || n->inputs[0] < 0 || n->inputs[1] < 0) return false;
    if (gemm && (kiln_attr_int(n, "transA", 0) || kiln_attr_float(n, "alpha", 1.0f) != 1.0f ||
                 kiln_attr_float(n, "beta", 1.0f) != 1.0f))
        return false;
    const kiln_value *x = &g->values[n->inputs[0]], *w = &g->values[n->inputs[1]];
    if (x->constant || x->dtype != KILN_F32 || !w->constant || w->constant->dtype != KILN_F32) return false;
    return conv ? w->constant->ndim >= 3 : w->constant->ndim == 2;
}

/* The output-channel axis of layer n's weights: Conv 0, MatMul 1, Gemm 1 (0 with transB). */
static int weight_axis(const kiln_node *n) {
    if (is_default_op(n, "Conv")) return 0;
    return is_default_op(n, "Gemm") && kiln_attr_int(n, "transB", 0) ? 0 : 1;
}

/* The quantized precision layer n takes (KILN_PRECISION_FP32: none): fp8 under --fp8 for a layer
 * that can take it (kiln_fp8_layer_ok), else int8 under --int8; then each rule naming n, in order: an
 * int8 rule (or an fp8 rule, where fp8 applies) sets that precision, any other rule clears it. */
static kiln_precision quant_precision(const kiln_graph *g, const kiln_node *n, const kiln_build_options *opts) {
    bool fp8_ok = kiln_fp8_layer_ok(g, n);
    kiln_precision q = opts->fp8 && fp8_ok ? KILN_PRECISION_FP8 : opts->int8 ? KILN_PRECISION_INT8 : KILN_PRECISION_FP32;
    for (int r = 0; r < opts->nlayer_precisions; r++) {
        kiln_precision p = opts->layer_precisions[r].precision;
        if (kiln_layer_rule_matches(&opts->layer_precisions[r], n))
            q = p == KILN_PRECISION_INT8 || (p == KILN_PRECISION_FP8 && fp8_ok) ? p : KILN_PRECISION_FP32;
    }
    return q;
}

/* Whether layer n is quantized to precision want (int8 or fp8) and can be. */
static bool selected(const kiln_graph *g, const kiln_node *n, const kiln_build_options *opts, kiln_precision want) {
    bool can = want == KILN_PRECISION_FP8 ? kiln_fp8_layer_ok(g, n) : quantizable(g, n);
    return can && quant_precision(g, n, opts) == want;
}

/* Adds layer node id to p (its input among the distinct activations). */
static void plan_add(const kiln_graph *g, calib_plan *p, int id) {
    const kiln_node *n = &g->nodes[id];
    p->layers[p->nlayers++] = id;
    int a = 0;
    while (a < p->nacts && p->acts[a] != n->inputs[0]) a++;
    if (a == p->nacts) {
        p->acts[p->nacts] = n->inputs[0];
        p->names[p->nacts++] = g->values[n->inputs[0]].name;
    }
}

/* The layers opts select for precision want (selected()); fails naming an int8 rule that matches no
 * quantizable layer. */
static kiln_status plan_make(const kiln_graph *g, const kiln_build_options *opts, kiln_precision want, calib_plan *p) {
    memset(p, 0, sizeof *p);
    for (int r = 0; r < opts->nlayer_precisions; r++) {
        const kiln_layer_precision *rule = &opts->layer_precisions[r];
        bool any = rule->precision != KILN_PRECISION_INT8;
        for (int i = 0; !any && i < g->nnodes; i++) any = quantizable(g, &g->nodes[i]) && kiln_layer_rule_matches(rule, &g->nodes[i]);
        if (!any)
            return kiln_error(KILN_ERR_INVALID_ARGUMENT, "--layer-precision '%s:int8' matches no layer int8 can quantize (a "
                              "Conv, MatMul or Gemm with constant float32 weights, by its model name)", rule->pattern);
    }
    p->layers = malloc(((size_t)g->nnodes + 1) * sizeof *p->layers);
    p->acts = malloc(((size_t)g->nnodes + 1) * sizeof *p->acts);
    p->names = malloc(((size_t)g->nnodes + 1) * sizeof *p->names);
    p->thresholds = calloc((size_t)g->nnodes + 1, sizeof *p->thresholds);
    if (!p->layers || !p->acts || !p->names || !p->thresholds) {
        plan_free(p);
        return kiln_error(KILN_ERR_OUT_OF_MEMORY, "out of memory planning the calibration");
    }
    for (int i = 0; i < g->nnodes; i++)
        if (selected(g, &g->nodes[i], opts, want)) plan_add(g, p, i);
    return KILN_OK;
}

/* Drops the layers with kept[l] from p, and the activations only they read (thresholds follow). */
static kiln_status plan_drop(const kiln_graph *g, calib_plan *p, const bool *kept) {
    int nlayers = p->nlayers, nacts = p->nacts;
    double *thresholds = malloc(((size_t)nacts + 1) * sizeof *thresholds);
    int *acts = malloc(((size_t)nacts + 1) * sizeof *acts);
    if (!thresholds || !acts) {
        free(thresholds), free(acts);
        return kiln_error(KILN_ERR_OUT_OF_MEMORY, "out of memory");
    }
    memcpy(thresholds, p->thresholds, (size_t)nacts * sizeof *thresholds);
    memcpy(acts, p->acts, (size_t)nacts * sizeof *acts);
    p->nlayers = p->nacts = 0;
    for (int l = 0; l < nlayers; l++)
        if (!kept[l]) plan_add(g, p, p->layers[l]); /* compacts in place: p->nlayers <= l */
    for (int a = 0; a < p->nacts; a++)
        for (int k = 0; k < nacts; k++)
            if (acts[k] == p->acts[a]) p->thresholds[a] = thresholds[k];
    free(thresholds), free(acts);
    return KILN_OK;
}

/* ------------------------------------------------------------------ calibration runs */

/* Where each activation is read in the float32 engine: output index, or -(input index + 1). */
static kiln_status locate(kiln_engine *e, const calib_plan *p, int *where) {
    for (int a = 0; a < p->nacts; a++) {
        where[a] = INT32_MIN;
        kiln_tensor_desc d;
        for (int i = 0; i < kiln_engine_num_outputs(e) && where[a] == INT32_MIN; i++)
            if (kiln_engine_output(e, i, &d) == KILN_OK && !strcmp(d.name, p->names[a])) where[a] = i;
        for (int i = 0; i < kiln_engine_num_inputs(e) && where[a] == INT32_MIN; i++)
            if (kiln_engine_input(e, i, &d) == KILN_OK && !strcmp(d.name, p->names[a])) where[a] = -(i + 1);
        if (where[a] == INT32_MIN)
            return kiln_error(KILN_ERR_INTERNAL, "calibration: tensor '%s' is not visible in the float32 model",
                              p->names[a]);
    }
    return KILN_OK;
}

/* Runs batch b through context c; inputs[] receives the batch (owned, released by the caller). */
static kiln_status run_batch(kiln_engine *e, kiln_context *c, const kiln_calib_batches *bs, int b, kiln_tensor *inputs) {
    for (int i = 0; i < bs->ninputs; i++) {
        kiln_tensor_desc d;
        KILN_TRY(kiln_engine_input(e, i, &d));
        const char *path = bs->paths[b * bs->ninputs + i];
        KILN_TRY(kiln_calib_batch_load(bs, b, i, &inputs[i]));
        kiln_status s = kiln_context_set_input(c, d.name, inputs[i].dtype, inputs[i].ndim, inputs[i].dims, inputs[i].data);
        if (s != KILN_OK) return kiln_error_prefix(s, "calibration batch '%s'", path);
    }
    return kiln_context_run(c);
}

/* The float32 data and element count of activation a after a run (where: locate's). */
static kiln_status act_data(kiln_context *c, const kiln_tensor *inputs, int where, const float **x, int64_t *n) {
    if (where < 0) {
        const kiln_tensor *t = &inputs[-where - 1];
        *x = t->data;
        *n = kiln_tensor_numel(t);
        return KILN_OK;
    }
    kiln_tensor_desc d;
    const void *data;
    KILN_TRY(kiln_context_output(c, where, &d, &data));
    *x = data;
    *n = kiln_numel(d.ndim, d.dims);
    return KILN_OK;
}

/* One pass over the batches: hists == NULL gathers each activation's max |x| into amax[], else adds
 * to hists[]. */
static kiln_status calib_pass(kiln_engine *e, kiln_context *c, const kiln_calib_batches *bs, const calib_plan *p,
                              const int *where, float *amax, kiln_calib_hist *hists) {
    kiln_status s = KILN_OK;
    kiln_tensor *inputs = calloc((size_t)bs->ninputs, sizeof *inputs);
    if (!inputs) return kiln_error(KILN_ERR_OUT_OF_MEMORY, "out of memory");
    for (int b = 0; s == KILN_OK && b < bs->nbatches; b++) {
        s = run_batch(e, c, bs, b, inputs);
        for (int a = 0; s == KILN_OK && a < p->nacts; a++) {
            const float *x;
            int64_t n;
            s = act_data(c, inputs, where[a], &x, &n);
            if (s != KILN_OK) break;
            if (hists) {
                kiln_calib_hist_add(&hists[a], x, n);
                continue;
            }
            for (int64_t i = 0; i < n; i++)
                if (fabsf(x[i]) > amax[a]) amax[a] = fabsf(x[i]);
        }
        for (int i = 0; i < bs->ninputs; i++) kiln_tensor_release(&inputs[i]);
    }
    free(inputs);
    return s;
}

/* Runs the float32 model over the batches of opts->calib_dir and fills p->thresholds. */
static kiln_status collect(const char *model_path, const kiln_build_options *opts, const kiln_calib_method *m,
                           const char *tag, calib_plan *p) {
    kiln_build_options fo = {0};
    fo.target = "cpu";
    fo.mark_all_outputs = true;
    kiln_engine *e = NULL;
    kiln_context *c = NULL;
    kiln_calib_batches bs = {0};
    int *where = malloc((size_t)p->nacts * sizeof *where);
    float *amax = calloc((size_t)p->nacts, sizeof *amax);
    kiln_calib_hist *hists = NULL;
    const char **in_names = NULL;
    kiln_status s = where && amax ? KILN_OK : kiln_error(KILN_ERR_OUT_OF_MEMORY, "out of memory");
    kiln_log_level saved = kiln_log_level_current;
    kiln_log_set_level(KILN_LOG_WARN); /* the float32 build's own log is not the user's build */
    if (s == KILN_OK) s = kiln_build_onnx(model_path, &fo, &e);
    kiln_log_set_level(saved);
    if (s == KILN_OK) s = kiln_context_create(e, &c);
    if (s == KILN_OK) s = locate(e, p, where);
    int nin = e ? kiln_engine_num_inputs(e) : 0;
    if (s == KILN_OK && !(in_names = calloc((size_t)nin + 1, sizeof *in_names)))
        s = kiln_error(KILN_ERR_OUT_OF_MEMORY, "out of memory");
    for (int i = 0; s == KILN_OK && i < nin; i++) {
        kiln_tensor_desc d;
        s = kiln_engine_input(e, i, &d);
        in_names[i] = d.name;
    }
    if (s == KILN_OK) s = kiln_calib_batches_find(opts->calib_dir, nin, in_names, opts->calib_batches, &bs);
    if (s == KILN_OK) s = calib_pass(e, c, &bs, p, where, amax, NULL);
    if (s == KILN_OK && m->kind != KILN_CALIB_MINMAX) {
        if (!(hists = malloc((size_t)p->nacts * sizeof *hists))) s = kiln_error(KILN_ERR_OUT_OF_MEMORY, "out of memory");
        for (int a = 0; s == KILN_OK && a < p->nacts; a++) kiln_calib_hist_init(&hists[a], amax[a]);
        if (s == KILN_OK) s = calib_pass(e, c, &bs, p, where, NULL, hists);
    }
    for (int a = 0; s == KILN_OK && a < p->nacts; a++)
        if (!isfinite(amax[a]))
            s = kiln_error(KILN_ERR_INVALID_ARGUMENT, "calibration: tensor '%s' has infinite values on the calibration "
                           "data; it cannot be quantized", p->names[a]);
    for (int a = 0; s == KILN_OK && a < p->nacts; a++) {
        kiln_calib_hist h;
        if (!hists) {
            kiln_calib_hist_init(&h, amax[a]);
            h.amax = amax[a];
        }
        p->thresholds[a] = kiln_calib_threshold(hists ? &hists[a] : &h, m);
        KILN_LOG(KILN_LOG_VERBOSE, "%s: '%s' max |x| %g, threshold %g", tag, p->names[a], amax[a], p->thresholds[a]);
    }
    if (s == KILN_OK) KILN_LOG(KILN_LOG_INFO, "%s: calibrated %d tensors over %d batches", tag, p->nacts, bs.nbatches);
    kiln_calib_batches_free(&bs);
    free(in_names), free(where), free(amax), free(hists);
    kiln_context_free(c);
    kiln_engine_free(e);
    return s;
}

/* ------------------------------------------------------------------ Q/DQ insertion */

/* A new constant of t (taken), named from hint. */
static kiln_status add_const(kiln_graph *g, const char *hint, kiln_tensor *t, int *id) {
    KILN_TRY(kiln_graph_new_value(g, hint, id));
    return kiln_graph_set_constant(g, *id, t);
}

static kiln_status scalar_const(kiln_graph *g, const char *hint, kiln_dtype dt, double v, int *id) {
    kiln_tensor t = {0};
    KILN_TRY(kiln_tensor_alloc(&t, dt, 0, NULL));
    kiln_tensor_set_f64(&t, 0, v);
    kiln_status s = add_const(g, hint, &t, id);
    kiln_tensor_release(&t);
    return s;
}

/* Adds node op (default domain, opset >= 13) reading ins[0..nin) into a new value named from hint. */
static kiln_status add_node(kiln_graph *g, const char *op, const char *hint, int nin, const int *ins, int *out,
                            int *node) {
    KILN_TRY(kiln_graph_new_value(g, hint, out));
    KILN_TRY(kiln_graph_add_node(g, op, "", g->values[*out].name, nin, ins, 1, out, node));
    int64_t opset = kiln_graph_opset(g, "");
    g->nodes[*node].opset = opset > 13 ? (int)opset : 13;
    return KILN_OK;
}

/* x -> QuantizeLinear -> DequantizeLinear with scale threshold / 127 and int8 zero point 0; *dq is
 * the dequantized value. */
static kiln_status insert_act_qdq(kiln_graph *g, int x, double threshold, int *dq) {
    char hint[300];
    int s, z, q, node;
    snprintf(hint, sizeof hint, "%.280s_scale", g->values[x].name);
    KILN_TRY(scalar_const(g, hint, KILN_F32, threshold / 127.0, &s));
    snprintf(hint, sizeof hint, "%.280s_zero_point", g->values[x].name);
    KILN_TRY(scalar_const(g, hint, KILN_I8, 0.0, &z));
    snprintf(hint, sizeof hint, "%.280s_quantized", g->values[x].name);
    KILN_TRY(add_node(g, "QuantizeLinear", hint, 3, (int[]){x, s, z}, &q, &node));
    snprintf(hint, sizeof hint, "%.280s_dequantized", g->values[x].name);
    return add_node(g, "DequantizeLinear", hint, 3, (int[]){q, s, z}, dq, &node);
}

/* Replaces layer's float32 weights (input 1) with DequantizeLinear of int8 weights quantized
 * symmetrically per output channel (weight_axis). */
static kiln_status insert_weight_dq(kiln_graph *g, int layer) {
    int axis = weight_axis(&g->nodes[layer]), wid = g->nodes[layer].inputs[1];
    bool channel_major = axis == 0; /* [C, rest...] rather than [K, C] */
    const kiln_tensor *w = g->values[wid].constant;
    int64_t C = w->dims[axis], numel = kiln_tensor_numel(w), inner = channel_major ? numel / (C ? C : 1) : 1;
    kiln_tensor wq = {0}, sc = {0};
    KILN_TRY(kiln_tensor_alloc(&wq, KILN_I8, w->ndim, w->dims));
    kiln_status st = kiln_tensor_alloc(&sc, KILN_F32, 1, &C);
    const float *wd = w->data;
    int8_t *q = wq.data;
    float *s = sc.data;
    for (int64_t c = 0; st == KILN_OK && c < C; c++) {
        float amax = 0.0f;
        for (int64_t i = 0; i < numel / (C ? C : 1); i++) {
            float v = fabsf(channel_major ? wd[c * inner + i] : wd[i * C + c]);
            if (!isfinite(v) && st == KILN_OK)
                st = kiln_error(KILN_ERR_INVALID_ARGUMENT, "--int8: the weights of layer '%s' hold a non-finite value",
                                g->nodes[layer].name);
            if (v > amax) amax = v;
        }
        s[c] = amax > 0.0f ? amax / 127.0f : 1.0f;
        for (int64_t i = 0; st == KILN_OK && i < numel / (C ? C : 1); i++) {
            int64_t at = channel_major ? c * inner + i : i * C + c;
            float r = rintf(wd[at] / s[c]);
            q[at] = (int8_t)(r > 127.0f ? 127 : r < -127.0f ? -127 : r);
        }
    }
    char hint[300];
    int qid = -1, sid = -1, dq, node;
    snprintf(hint, sizeof hint, "%.280s_int8", g->values[wid].name);
    if (st == KILN_OK) st = add_const(g, hint, &wq, &qid);
    snprintf(hint, sizeof hint, "%.280s_scale", g->values[wid].name);
    if (st == KILN_OK) st = add_const(g, hint, &sc, &sid);
    kiln_tensor_release(&wq);
    kiln_tensor_release(&sc);
    snprintf(hint, sizeof hint, "%.280s_dequantized", g->values[wid].name);
    if (st == KILN_OK) st = add_node(g, "DequantizeLinear", hint, 2, (int[]){qid, sid}, &dq, &node);
    if (st != KILN_OK) return st;
    kiln_attr *a = kiln_node_add_attr(g, &g->nodes[node], "axis", KILN_ATTR_INT);
    if (!a) return kiln_error(KILN_ERR_OUT_OF_MEMORY, "out of memory");
    a->i = axis;
    g->nodes[layer].inputs[1] = dq;
    return KILN_OK;
}

/* Whether node n is an Add of value v and the output of one of p's layers: a residual connection
 * (ResNet's shortcut v added to a block's last convolution). */
static bool residual_add(const kiln_graph *g, const calib_plan *p, const kiln_node *n, int v) {
    if (!is_default_op(n, "Add") || n->ninputs != 2) return false;
    int other = n->inputs[0] == v ? n->inputs[1] : n->inputs[1] == v ? n->inputs[0] : -1;
    if (other < 0 || other == v) return false;
    for (int l = 0; l < p->nlayers; l++)
        if (g->nodes[p->layers[l]].outputs[0] == other) return true;
    return false;
}

/* Each activation's Q/DQ pair feeds its layers and the residual Adds that read it (the shortcut
 * quantized, as TensorRT does), so that fuse_qdq folds such an Add, its activation and the next
 * QuantizeLinear into the block's last layer and the block's output stays 8-bit. */
static kiln_status insert_qdq(kiln_graph *g, const calib_plan *p) {
    for (int a = 0; a < p->nacts; a++) {
        int dq, v = p->acts[a];
        KILN_TRY(insert_act_qdq(g, v, p->thresholds[a], &dq));
        for (int l = 0; l < p->nlayers; l++)
            if (g->nodes[p->layers[l]].inputs[0] == v) g->nodes[p->layers[l]].inputs[0] = dq;
        for (int i = 0; i < g->nnodes; i++) {
            kiln_node *n = &g->nodes[i];
            if (!residual_add(g, p, n, v)) continue;
            for (int k = 0; k < 2; k++)
                if (n->inputs[k] == v) n->inputs[k] = dq;
        }
    }
    for (int l = 0; l < p->nlayers; l++) KILN_TRY(insert_weight_dq(g, p->layers[l]));
    KILN_TRY(kiln_graph_resolve_ops(g, NULL));
    KILN_TRY(kiln_graph_toposort(g));
    KILN_TRY(kiln_graph_infer_shapes(g));
    return kiln_graph_verify(g);
}

static kiln_status load_batch(void *ctx, int batch, int input, kiln_tensor *out) {
    const kiln_calib_batches *bs = ctx;
    kiln_status s = kiln_calib_batch_load(bs, batch, input, out);
    return s == KILN_OK ? s : kiln_error_prefix(s, "calibration batch '%s'", bs->paths[batch * bs->ninputs + input]);
}

/* --keep-sensitive: measures every planned layer's sensitivity with the thresholds in the cache at
 * cache_path, logs the ranking, and drops the most sensitive layers (and the ends) from p. */
static kiln_status keep_sensitive(const kiln_graph *g, const char *model_path, const kiln_build_options *opts,
                                  const char *cache_path, calib_plan *p) {
    const char **names = malloc(((size_t)p->nlayers + 1) * sizeof *names);
    double *error = malloc(((size_t)p->nlayers + 1) * sizeof *error);
    int *order = malloc(((size_t)p->nlayers + 1) * sizeof *order);
    bool *kept = malloc(((size_t)p->nlayers + 1) * sizeof *kept);
    kiln_status s = names && error && order && kept ? KILN_OK : kiln_error(KILN_ERR_OUT_OF_MEMORY, "out of memory");
    for (int l = 0; s == KILN_OK && l < p->nlayers; l++) names[l] = g->nodes[p->layers[l]].name;
    kiln_calib_batches bs = {0};
    const char **in_names = malloc(((size_t)g->ninputs + 1) * sizeof *in_names);
    if (s == KILN_OK && !in_names) s = kiln_error(KILN_ERR_OUT_OF_MEMORY, "out of memory");
    for (int i = 0; s == KILN_OK && i < g->ninputs; i++) in_names[i] = g->values[g->inputs[i]].name;
    if (s == KILN_OK && !opts->calib_dir)
        s = kiln_error(KILN_ERR_INVALID_ARGUMENT, "--keep-sensitive ranks the layers by their sensitivity on calibration "
                       "data: give --calib DIR");
    if (s == KILN_OK) s = kiln_calib_batches_find(opts->calib_dir, g->ninputs, in_names, opts->calib_batches, &bs);
    kiln_quant_feed feed = {bs.nbatches, load_batch, &bs};
    if (s == KILN_OK)
        s = kiln_quant_sensitivity_measure(model_path, cache_path, opts->calibrator, &feed, p->nlayers, names, error);
    kiln_calib_batches_free(&bs);
    free(in_names);
    if (s == KILN_OK) {
        int n = kiln_quant_keep_select(p->nlayers, error, opts->keep_sensitive, !opts->quantize_ends, kept);
        kiln_quant_rank(p->nlayers, error, order);
        KILN_LOG(KILN_LOG_INFO, "int8: layer sensitivity (relative squared output error when quantized alone), most "
                 "sensitive first:");
        for (int r = 0; r < p->nlayers; r++)
            KILN_LOG(KILN_LOG_INFO, "  %2d. %-40s %.3g%s", r + 1, names[order[r]], error[order[r]],
                     kept[order[r]] ? "  kept in float" : "");
        KILN_LOG(KILN_LOG_INFO, "int8: %d of %d layers kept in float (--keep-sensitive %d%s)", n, p->nlayers,
                 opts->keep_sensitive, opts->quantize_ends ? "" : ", and the first and last layer");
        s = plan_drop(g, p, kept);
    }
    free(names), free(error), free(order), free(kept);
    return s;
}

/* A temporary calibration cache for the sensitivity builds (their thresholds), in TMPDIR; *path is
 * owned by the caller, who removes the file. */
static kiln_status temp_cache(const char *digest, const char *method, const calib_plan *p, char **path) {
    const char *dir = getenv("TMPDIR");
    size_t n = strlen(dir && *dir ? dir : "/tmp") + 32;
    *path = malloc(n);
    if (!*path) return kiln_error(KILN_ERR_OUT_OF_MEMORY, "out of memory");
    snprintf(*path, n, "%s/kiln-calib-XXXXXX", dir && *dir ? dir : "/tmp");
    int fd = mkstemp(*path);
    if (fd < 0) return kiln_error(KILN_ERR_IO, "cannot create a temporary file in '%s'", dir && *dir ? dir : "/tmp");
    close(fd);
    return kiln_calib_cache_write(*path, digest, method, p->nacts, p->names, p->thresholds);
}

/* Fails when g is already quantized (it holds a quantization op): its own scales apply, not ours. */
static kiln_status require_float_model(const kiln_graph *g, const char *tag) {
    static const char *const ops[] = {"QuantizeLinear", "DequantizeLinear", "DynamicQuantizeLinear", "QLinearConv",
                                      "QLinearMatMul", "ConvInteger", "MatMulInteger", NULL};
    for (int i = 0; i < g->nnodes; i++)
        for (int k = 0; ops[k]; k++)
            if (is_default_op(&g->nodes[i], ops[k]))
                return kiln_error(KILN_ERR_INVALID_ARGUMENT, "--%s: the model is already quantized (node '%s' is %s); "
                                  "build it without --%s and its own scales are used", tag, g->nodes[i].name, ops[k], tag);
    return KILN_OK;
}

/* The plan for precision want (tag "int8" or "fp8", for messages) and its activation thresholds:
 * from opts' calibration cache when it holds this model's (*cached), else by the calibration runs,
 * the cache then written. p->nlayers 0: nothing to quantize (p freed, logged). digest gets the
 * model's. */
static kiln_status plan_thresholds(kiln_graph *g, const char *model_path, const kiln_build_options *opts,
                                   kiln_precision want, const char *tag, const kiln_calib_method *m, calib_plan *p,
                                   char *digest, bool *cached) {
    KILN_TRY(require_float_model(g, tag));
    KILN_TRY(plan_make(g, opts, want, p));
    *cached = false;
    if (p->nlayers == 0) {
        KILN_LOG(KILN_LOG_INFO, "%s: no %s with constant float32 weights: nothing to quantize", tag,
                 want == KILN_PRECISION_FP8 ? "MatMul or Gemm" : "Conv, MatMul or Gemm");
        plan_free(p);
        return KILN_OK;
    }
    char method[32];
    kiln_calib_method_name(m, method, sizeof method);
    kiln_status s = kiln_calib_model_digest(model_path, digest);
    if (s == KILN_OK && opts->calib_cache)
        s = kiln_calib_cache_read(opts->calib_cache, digest, p->nacts, p->names, p->thresholds, cached);
    if (s == KILN_OK && *cached)
        KILN_LOG(KILN_LOG_INFO, "%s: %d activation thresholds from the calibration cache '%s'", tag, p->nacts,
                 opts->calib_cache);
    if (s == KILN_OK && !*cached && !opts->calib_dir)
        s = kiln_error(KILN_ERR_INVALID_ARGUMENT, "--%s needs calibration data (--calib DIR) or an existing --calib-cache",
                       tag);
    if (s == KILN_OK && !*cached) s = collect(model_path, opts, m, tag, p);
    if (s == KILN_OK && !*cached && opts->calib_cache)
        s = kiln_calib_cache_write(opts->calib_cache, digest, method, p->nacts, p->names, p->thresholds);
    if (s != KILN_OK) plan_free(p);
    return s;
}

kiln_status kiln_calibrate_int8(kiln_graph *g, const char *model_path, const kiln_build_options *opts) {
    kiln_calib_method m;
    KILN_TRY(kiln_calib_method_parse(opts->calibrator, &m));
    calib_plan p;
    char digest[65], method[32];
    bool cached;
    KILN_TRY(plan_thresholds(g, model_path, opts, KILN_PRECISION_INT8, "int8", &m, &p, digest, &cached));
    if (p.nlayers == 0) return KILN_OK;
    kiln_calib_method_name(&m, method, sizeof method);
    kiln_status s = KILN_OK;
    char *tmp_cache = NULL;
    if (opts->keep_sensitive > 0 && !opts->calib_cache) s = temp_cache(digest, method, &p, &tmp_cache);
    if (s == KILN_OK && opts->keep_sensitive > 0)
        s = keep_sensitive(g, model_path, opts, tmp_cache ? tmp_cache : opts->calib_cache, &p);
    if (tmp_cache) unlink(tmp_cache);
    free(tmp_cache);
    if (s == KILN_OK) s = insert_qdq(g, &p);
    if (s == KILN_OK)
        KILN_LOG(KILN_LOG_INFO, "int8: %d layers quantized (%s activations per tensor, weights per channel)", p.nlayers,
                 cached ? "cached" : method);
    plan_free(&p);
    return s;
}

kiln_status kiln_calibrate_fp8(kiln_graph *g, const char *model_path, const kiln_build_options *opts) {
    kiln_calib_method m;
    KILN_TRY(kiln_calib_method_parse(opts->calibrator, &m));
    calib_plan p;
    char digest[65], method[32];
    bool cached;
    KILN_TRY(plan_thresholds(g, model_path, opts, KILN_PRECISION_FP8, "fp8", &m, &p, digest, &cached));
    if (p.nlayers == 0) return KILN_OK;
    kiln_calib_method_name(&m, method, sizeof method);
    kiln_status s = KILN_OK;
    for (int l = 0; s == KILN_OK && l < p.nlayers; l++) {
        int a = 0, x = g->nodes[p.layers[l]].inputs[0];
        while (a < p.nacts && p.acts[a] != x) a++;
        s = kiln_fp8_rewrite_layer(g, p.layers[l], p.thresholds[a]);
    }
    if (s == KILN_OK) s = kiln_graph_resolve_ops(g, NULL);
    if (s == KILN_OK) s = kiln_graph_toposort(g);
    if (s == KILN_OK) s = kiln_graph_infer_shapes(g);
    if (s == KILN_OK) s = kiln_graph_verify(g);
    if (s == KILN_OK)
        KILN_LOG(KILN_LOG_INFO, "fp8: %d layers in E4M3 (%s activation scales per tensor, weights per tensor)", p.nlayers,
                 cached ? "cached" : method);
    plan_free(&p);
    return s;
}
