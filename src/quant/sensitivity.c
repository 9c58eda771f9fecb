/* sensitivity.c — per-layer int8 sensitivity by quantizing one layer at a time (sensitivity.h). */
#include "quant/sensitivity.h"

#include "core/log.h"
#include "core/status.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

void kiln_quant_rank(int n, const double *error, int *order) {
    for (int i = 0; i < n; i++) order[i] = i;
    for (int i = 1; i < n; i++) { /* insertion sort: stable, and layer counts are small */
        int v = order[i], j = i;
        while (j > 0) {
            double a = error[order[j - 1]], b = error[v];
            bool worse = isnan(b) ? !isnan(a) : !isnan(a) && b > a;
            if (!worse) break;
            order[j] = order[j - 1];
            j--;
        }
        order[j] = v;
    }
}

int kiln_quant_keep_select(int n, const double *error, int keep, bool keep_ends, bool *kept) {
    memset(kept, 0, (size_t)n * sizeof *kept);
    if (n <= 0) return 0;
    int *order = malloc((size_t)n * sizeof *order);
    int count = 0;
    if (order) {
        kiln_quant_rank(n, error, order);
        for (int i = 0; i < n && i < keep; i++) kept[order[i]] = true;
    } else {
        for (int i = 0; i < n; i++) kept[i] = true; /* no memory to rank: keep everything, the safe side */
    }
    free(order);
    if (keep_ends) kept[0] = kept[n - 1] = true;
    for (int i = 0; i < n; i++) count += kept[i];
    return count;
}

/* The reference outputs of every batch: per batch, per output, a copy of the float32 data (NULL for
 * an output of another type) and its element count. */
typedef struct reference {
    int nbatches, noutputs;
    float **data;
    int64_t *numel;
} reference;

static void reference_free(reference *r) {
    for (int i = 0; r->data && i < r->nbatches * r->noutputs; i++) free(r->data[i]);
    free(r->data), free(r->numel);
}

/* Loads batch b into context c (which borrows the data until the run ends) and runs it. */
static kiln_status run_batch(kiln_engine *e, kiln_context *c, const kiln_quant_feed *feed, int b) {
    int nin = kiln_engine_num_inputs(e);
    kiln_tensor *inputs = calloc((size_t)nin + 1, sizeof *inputs);
    kiln_status s = inputs ? KILN_OK : kiln_error(KILN_ERR_OUT_OF_MEMORY, "out of memory");
    for (int i = 0; s == KILN_OK && i < nin; i++) {
        kiln_tensor_desc d;
        s = kiln_engine_input(e, i, &d);
        if (s == KILN_OK) s = feed->load(feed->ctx, b, i, &inputs[i]);
        if (s == KILN_OK) s = kiln_context_set_input(c, d.name, inputs[i].dtype, inputs[i].ndim, inputs[i].dims, inputs[i].data);
    }
    if (s == KILN_OK) s = kiln_context_run(c);
    for (int i = 0; inputs && i < nin; i++) kiln_tensor_release(&inputs[i]);
    free(inputs);
    return s;
}

static kiln_status build_quiet(const char *model_path, const kiln_build_options *o, kiln_engine **e) {
    kiln_log_level saved = kiln_log_level_current;
    kiln_log_set_level(KILN_LOG_WARN); /* these builds are the measurement's, not the user's */
    kiln_status s = kiln_build_onnx(model_path, o, e);
    kiln_log_set_level(saved);
    return s;
}

static kiln_status reference_run(kiln_engine *e, const kiln_quant_feed *feed, reference *r) {
    kiln_context *c = NULL;
    r->nbatches = feed->nbatches;
    r->noutputs = kiln_engine_num_outputs(e);
    size_t n = (size_t)r->nbatches * (size_t)r->noutputs;
    r->data = calloc(n + 1, sizeof *r->data);
    r->numel = calloc(n + 1, sizeof *r->numel);
    kiln_status s = r->data && r->numel ? kiln_context_create(e, &c) : kiln_error(KILN_ERR_OUT_OF_MEMORY, "out of memory");
    for (int b = 0; s == KILN_OK && b < r->nbatches; b++) {
        s = run_batch(e, c, feed, b);
        for (int o = 0; s == KILN_OK && o < r->noutputs; o++) {
            kiln_tensor_desc d;
            const void *data;
            s = kiln_context_output(c, o, &d, &data);
            if (s != KILN_OK || d.dtype != KILN_F32) continue;
            size_t k = (size_t)b * (size_t)r->noutputs + (size_t)o;
            r->numel[k] = kiln_numel(d.ndim, d.dims);
            if (!(r->data[k] = malloc((size_t)r->numel[k] * sizeof(float) + 1)))
                s = kiln_error(KILN_ERR_OUT_OF_MEMORY, "out of memory");
            else
                memcpy(r->data[k], data, (size_t)r->numel[k] * sizeof(float));
        }
    }
    kiln_context_free(c);
    return s;
}

/* The relative squared error of engine e's outputs against the reference, over every batch. */
static kiln_status layer_error(kiln_engine *e, const kiln_quant_feed *feed, const reference *r, double *error) {
    kiln_context *c = NULL;
    double err2 = 0.0, ref2 = 0.0;
    kiln_status s = kiln_context_create(e, &c);
    for (int b = 0; s == KILN_OK && b < r->nbatches; b++) {
        s = run_batch(e, c, feed, b);
        for (int o = 0; s == KILN_OK && o < r->noutputs; o++) {
            size_t k = (size_t)b * (size_t)r->noutputs + (size_t)o;
            kiln_tensor_desc d;
            const void *data;
            if (!r->data[k]) continue;
            s = kiln_context_output(c, o, &d, &data);
            if (s == KILN_OK && (d.dtype != KILN_F32 || kiln_numel(d.ndim, d.dims) != r->numel[k]))
                s = kiln_error(KILN_ERR_INTERNAL, "sensitivity: output %d changed type or shape when quantized", o);
            for (int64_t i = 0; s == KILN_OK && i < r->numel[k]; i++) {
                double y = ((const float *)data)[i], ref = r->data[k][i];
                err2 += (y - ref) * (y - ref);
                ref2 += ref * ref;
            }
        }
    }
    kiln_context_free(c);
    *error = ref2 > 0.0 ? err2 / ref2 : err2;
    return s;
}

kiln_status kiln_quant_sensitivity_measure(const char *model_path, const char *cache_path, const char *calibrator,
                                           const kiln_quant_feed *feed, int n, const char *const *names,
                                           double *error) {
    kiln_build_options fo = {.target = "cpu"};
    kiln_engine *ref_engine = NULL;
    reference r = {0};
    kiln_status s = build_quiet(model_path, &fo, &ref_engine);
    if (s == KILN_OK) s = reference_run(ref_engine, feed, &r);
    for (int l = 0; s == KILN_OK && l < n; l++) {
        kiln_layer_precision only = {names[l], KILN_PRECISION_INT8};
        kiln_build_options qo = {.target = "cpu", .layer_precisions = &only, .nlayer_precisions = 1,
                                 .calib_cache = cache_path, .calibrator = calibrator};
        kiln_engine *e = NULL;
        s = build_quiet(model_path, &qo, &e);
        if (s == KILN_OK) s = layer_error(e, feed, &r, &error[l]);
        if (s != KILN_OK) kiln_error_prefix(s, "sensitivity of layer '%s'", names[l]);
        else KILN_LOG(KILN_LOG_VERBOSE, "int8: sensitivity of '%s': %.3g", names[l], error[l]);
        kiln_engine_free(e);
    }
    reference_free(&r);
    kiln_engine_free(ref_engine);
    return s;
}
