/* sensitivity.h — how much error quantizing each layer to int8 adds (`kiln build --keep-sensitive N`,
 * docs/quantization.md): the float32 model and, for every layer, the model with only that layer in
 * int8 run over the calibration batches; a layer's sensitivity is the relative squared error of the
 * outputs it causes, sum ||y_layer - y_fp32||^2 / sum ||y_fp32||^2 over every float32 output and
 * batch. Also the ranking and the keep rule built on it, as pure functions. */
#ifndef KILN_QUANT_SENSITIVITY_H
#define KILN_QUANT_SENSITIVITY_H

#include "core/tensor.h"
#include "kiln/kiln.h"

#include <stdbool.h>

/* The inputs the measurement runs: nbatches batches; load puts input i (the engine's order) of batch
 * b into *out, which the measurement releases after the run (a tensor that does not own its data
 * is left alone). */
typedef struct kiln_quant_feed {
    int nbatches;
    kiln_status (*load)(void *ctx, int batch, int input, kiln_tensor *out);
    void *ctx;
} kiln_quant_feed;

/* Measures error[i] for the layers named names[0..n) of the model at model_path (names of the graph
 * the calibration sees), each quantized alone with the thresholds of the calibration cache at
 * cache_path (which must hold every layer's input, made with calibrator `calibrator`, NULL: entropy),
 * over the batches of feed. Builds n + 1 CPU engines. Errors name the layer or batch at fault. */
kiln_status kiln_quant_sensitivity_measure(const char *model_path, const char *cache_path, const char *calibrator,
                                           const kiln_quant_feed *feed, int n, const char *const *names,
                                           double *error);

/* order[0..n): the indices of error[] from the largest error to the smallest; equal errors (and NaNs,
 * ranked first: an unknown error is the worst) keep their index order. */
void kiln_quant_rank(int n, const double *error, int *order);

/* kept[i] for layers 0..n (in execution order) kept out of int8: the `keep` most sensitive by
 * kiln_quant_rank (all of them when keep >= n), and with keep_ends also the first and the last
 * layer. Returns how many are kept. */
int kiln_quant_keep_select(int n, const double *error, int keep, bool keep_ends, bool *kept);

#endif
