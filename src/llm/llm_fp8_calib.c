/* llm_fp8_calib.c — the static activation scales of FP8 engines (llm_fp8_calib.h). The run over the
 * text is the FP8 KV cache's calibration pass (kiln_llm_kv_fp8_scales, whose cache scales are not
 * needed here) with the model's act_amax set, which the CPU forward fills. */
#include "llm/llm_fp8_calib.h"

#include "core/status.h"
#include "llm/llm_kv_fp8.h"
#include "llm/tokenizer.h"
#include "quant/fp8.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

kiln_status kiln_llm_fp8_calibrate(kiln_llm_model *m, const char *dir, const char *calib_path, float **amax) {
    *amax = NULL;
    float *a = calloc(KILN_LLM_ACT_SLOTS(&m->cfg), sizeof *a);
    if (!a) return kiln_error(KILN_ERR_OUT_OF_MEMORY, "FP8 calibration: out of memory");
    kiln_tokenizer *tok = NULL;
    kiln_status s = kiln_tokenizer_load(dir, &tok);
    float *kv_scales = NULL;
    m->act_amax = a;
    if (s == KILN_OK) s = kiln_llm_kv_fp8_scales(m, tok, calib_path, &kv_scales);
    m->act_amax = NULL;
    free(kv_scales);
    kiln_tokenizer_free(tok);
    if (s != KILN_OK) {
        free(a);
        return kiln_error_prefix(s, "FP8 activation calibration on %s", calib_path);
    }
    *amax = a;
    return KILN_OK;
}

bool kiln_llm_fp8_act_scale_of(const kiln_llm_config *c, const float *amax, const char *name, float *scale) {
    int slot = -1, l, end = 0;
    char part[8];
    if (!strcmp(name, "lm_head") || (!strcmp(name, "tok_emb") && c->tied_embeddings)) slot = KILN_LLM_ACT_LM_HEAD(c);
    else if (sscanf(name, "layers.%d.%7[a-z].weight%n", &l, part, &end) == 2 && !name[end] && l >= 0 && l < c->n_layer)
        slot = !strcmp(part, "qkv") ? KILN_LLM_ACT_QKV(l) : !strcmp(part, "o") ? KILN_LLM_ACT_O(l)
               : !strcmp(part, "up") ? KILN_LLM_ACT_UP(l) : !strcmp(part, "down") ? KILN_LLM_ACT_DOWN(l) : -1;
    if (slot < 0) return false;
    *scale = amax[slot] > 0 ? KILN_LLM_FP8_ACT_MARGIN * amax[slot] / KILN_E4M3_MAX : 1.0f;
    return true;
}
