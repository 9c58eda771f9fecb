/* llm_kv_fp8.h — the scales of an FP8 (E4M3) KV cache, one per (layer, KV head) for the keys and one
 * for the values: calibrated by running the model (FP32 cache, CPU forward) over a text and taking
 * each head's largest |k| and |v| over 448, the largest E4M3 value (so no calibrated value
 * saturates), or, without a calibration text, all 1.0 (vLLM's default for an uncalibrated FP8 KV
 * cache), which the caller is warned of. The cache quantizes on write (kv_cache.h) and the attention
 * dequantizes on read (llm_cpu_ops.h). */
#ifndef KILN_LLM_KV_FP8_H
#define KILN_LLM_KV_FP8_H

#include "kiln/kiln.h"
#include "kiln/kiln_tokenizer.h"
#include "llm/llm.h"

#include <stddef.h>
#include <stdint.h>

/* Floats of a model's FP8 KV scales: [n_layer][2][n_kv_head], the keys' then the values'. */
#define KILN_LLM_KV_SCALES(c) ((size_t)(c)->n_layer * 2 * (size_t)(c)->n_kv_head)

/* scales (KILN_LLM_KV_SCALES floats) from the CPU forward of m over ids[0, n) in windows of at most
 * ctx tokens (each from position 0): a head's largest |key| (|value|) over every window / 448; a head
 * whose keys (values) were all zero gets 1.0. Errors: n < 1, ctx < 1 or past the model's context
 * (KILN_ERR_INVALID_ARGUMENT), the forward's. */
kiln_status kiln_llm_kv_calibrate(const kiln_llm_model *m, const int32_t *ids, int64_t n, int ctx, float *scales);

/* The scales of an FP8 KV cache for m: calibrated over the text file calib_path (tokenized with tok,
 * windows of at most 1024 tokens) into *scales (malloc'd, the caller frees) when calib_path is
 * given; else *scales = NULL (scales 1.0) and a warning is logged. Errors: an unreadable or empty
 * file, no tokenizer, the calibration's. */
kiln_status kiln_llm_kv_fp8_scales(const kiln_llm_model *m, const kiln_tokenizer *tok, const char *calib_path,
                                   float **scales);

/* kiln_llm_kv_fp8_scales for the model at path (an engine or checkpoint) when the model at hand cannot
 * run on the CPU (weights loaded for a GPU): path is opened once more for the CPU forward, only when
 * calib_path is given, and closed again. */
kiln_status kiln_llm_kv_fp8_scales_at(const char *path, const char *calib_path, float **scales);

#endif
