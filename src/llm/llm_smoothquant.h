/* llm_smoothquant.h — W8A8 calibration of an FP32 model at build time (`kiln build --weights w8a8`):
 * SmoothQuant's per-channel smoothing folded into the weights, then one static INT8 scale per layer
 * product input from a histogram calibrator (src/quant/calib_hist.h) over the smoothed activations. */
#ifndef KILN_LLM_LLM_SMOOTHQUANT_H
#define KILN_LLM_LLM_SMOOTHQUANT_H

#include "kiln/kiln_tokenizer.h"
#include "llm/llm_internal.h"
#include "quant/calib_hist.h"

/* The most calibration tokens read (the text's first ones), in windows of up to 512 positions. */
#define KILN_LLM_W8A8_CALIB_TOKENS 8192

typedef struct kiln_llm_w8a8_options {
    const char *calib_text;       /* the calibration text file, or NULL: */
    const int32_t *calib_ids;     /* the calibration tokens instead (API callers, tests) */
    int64_t n_calib_ids;
    float smooth_alpha;           /* SmoothQuant's migration strength, in [0, 1] */
    kiln_calib_method calibrator; /* picks each activation threshold from its histogram */
} kiln_llm_w8a8_options;

/* The four products of a layer, KILN_LLM_MAT_QKV .. KILN_LLM_MAT_DOWN, one activation scale each. */
#define KILN_LLM_W8A8_MATS 4

/* Calibrates m (an FP32 host model with writable arrays, as kiln_llm_model_load_hf gives) for W8A8
 * on o->calib_text (tokenized with tok) or o->calib_ids (tok unused), at most KILN_LLM_W8A8_CALIB_TOKENS
 * tokens:
 *  1. the CPU forward over the text records each layer product's per-input-channel max |x_j|;
 *  2. for the qkv and up (gate + up) products, s_j = max|x_j|^a / max_i |W[i, j]|^(1 - a) (a =
 *     smooth_alpha; 1 where either maximum is 0, clamped to [1e-5, 1e5]) is folded into the model:
 *     W[:, j] *= s_j, and the preceding norm's scale (its 1 + w for Gemma) and shift divided by s_j,
 *     which leaves the fp32 model's function unchanged; in a gated MLP (every family but GPT-2) the
 *     down product too, its 1 / s_j folded into the up rows (its input is act(gate) * up); the o
 *     product and GPT-2's down keep s = 1;
 *  3. the forward runs again over the smoothed model, each product input's |x| into a histogram, and
 *     act_scales[l * KILN_LLM_W8A8_MATS + mat] = the calibrator's threshold / 127.
 * Errors: an unreadable or empty text, no tokenizer, no text or ids, ids outside the vocabulary
 * (KILN_ERR_INVALID_ARGUMENT), out of memory; m may
 * be partly smoothed after a failure. */
kiln_status kiln_llm_smoothquant(kiln_llm_model *m, const kiln_tokenizer *tok, const kiln_llm_w8a8_options *o,
                                 float *act_scales);

#endif
