/* calibrate.h — INT8 (and FP8) post-training calibration of a float32 graph (`kiln build --int8`,
 * docs/quantization.md): choose the layers to quantize (Conv, MatMul and Gemm with constant
 * float32 weights), find each one's input activation threshold — from the calibration cache when it
 * holds this model's, else by running the float32 model on the CPU over the calibration batches (a
 * histogram per tensor, then the chosen calibrator, calib_hist.h) and writing the cache — and insert
 * QuantizeLinear / DequantizeLinear with symmetric int8 scales (activations per tensor, T / 127;
 * weights per output channel, max|w| / 127), which the fuse_qdq pass then folds into integer layers. */
#ifndef KILN_QUANT_CALIBRATE_H
#define KILN_QUANT_CALIBRATE_H

#include "ir/graph.h"
#include "kiln/kiln.h"

/* Calibrates graph g (imported from model_path, resolved, ordered and inferred) with opts' int8
 * options and inserts the Q/DQ nodes; g is resolved, ordered and inferred again on return. Errors
 * name the option, file or tensor at fault (a missing --calib, an unreadable batch, a foreign cache). */
kiln_status kiln_calibrate_int8(kiln_graph *g, const char *model_path, const kiln_build_options *opts);

/* The same calibration for `--fp8` (and fp8 --layer-precision rules): the MatMul and Gemm layers that
 * can take it (quant/fp8.h: kiln_fp8_layer_ok) become kiln.F8MatMul with their input's threshold / 448
 * as x_scale and per-tensor E4M3 weights; the cache is shared with --int8 (thresholds per tensor
 * name). g is resolved, ordered and inferred again on return. */
kiln_status kiln_calibrate_fp8(kiln_graph *g, const char *model_path, const kiln_build_options *opts);

#endif
