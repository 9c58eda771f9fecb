/* llm_fp8_calib.h — the static activation scales of an FP8 LLM engine (`kiln build --weights fp8
 * --calib-text FILE`): the FP32 model runs over the text on the CPU (windows of up to 1,024 tokens)
 * while its forward records the largest |x| entering each matrix product; each product's scale is
 * that maximum times a margin over 448, the largest E4M3 value. */
#ifndef KILN_LLM_LLM_FP8_CALIB_H
#define KILN_LLM_LLM_FP8_CALIB_H

#include "llm/llm_internal.h"

#include <stdbool.h>

/* Activations up to this many times the calibrated maximum stay below E4M3's saturation: room for
 * inputs larger than the calibration text's (E4M3's precision is relative, so the margin only pushes
 * the smallest values a little further into the subnormals). */
#define KILN_LLM_FP8_ACT_MARGIN 1.25f

/* Runs m (FP32, CPU forward) over the text file calib_path, tokenized with the tokenizer of
 * checkpoint directory dir, into *amax (malloc'd, KILN_LLM_ACT_SLOTS(&m->cfg) entries, the caller
 * frees): the largest |x| entering each product. Errors: no tokenizer, an unreadable or empty file,
 * out of memory. */
kiln_status kiln_llm_fp8_calibrate(kiln_llm_model *m, const char *dir, const char *calib_path, float **amax);

/* The static activation scale of the engine weight named name (tok_emb, lm_head, layers.L.qkv.weight
 * ...) from amax: KILN_LLM_FP8_ACT_MARGIN * max / 448, 1.0 for a product the text never reached with
 * a non-zero value. False when no product reads the weight (an untied token embedding). */
bool kiln_llm_fp8_act_scale_of(const kiln_llm_config *c, const float *amax, const char *name, float *scale);

#endif
