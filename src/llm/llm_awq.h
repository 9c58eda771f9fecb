/* llm_awq.h — activation-aware weight scaling for INT4 (AWQ-style), applied to a model before its
 * matrices are quantized: the fp32 CPU forward runs over a calibration text with a probe recording,
 * for each layer's four products (qkv, o, up, down), the per-input-channel mean |x| of their inputs
 * and a sample of input rows; then each matrix whose input channels can be rescaled by the op before
 * it gets column scales s = mean|x|^alpha (normalised by sqrt(max s * min s)), alpha in {0, 0.05, ...,
 * 1} chosen by the output error of its INT4 round-to-nearest quantization on the sampled rows; W's
 * columns are multiplied by s and 1/s is folded into that op: the norm before qkv (norm1) and before
 * up (norm2), the v rows of qkv for o (when every query head has its own KV head), the up rows of a
 * gated MLP for down, the final norm for an untied lm_head. GPT-2's down (after a GELU) and a tied
 * lm_head (the token embedding) keep s = 1. alpha = 0 is plain
 * rounding, so the sampled error never exceeds it. Then each group of those matrices (GPT-2's down
 * and a tied lm_head too) is clamped, in place, to the fraction of its range (1, 0.95, ..., 0.75) whose rounding has the
 * least error on the sampled inputs, so that the engine's round-to-nearest quantizer works on the
 * clipped range. */
#ifndef KILN_LLM_LLM_AWQ_H
#define KILN_LLM_LLM_AWQ_H

#include "llm/llm_internal.h"

/* The products a probe watches, per layer. */
typedef enum kiln_llm_probe_site { KILN_PROBE_QKV, KILN_PROBE_O, KILN_PROBE_UP, KILN_PROBE_DOWN, KILN_PROBE_SITES } kiln_llm_probe_site;

/* What the forward records at one (layer, site): the sum of |x| per input channel over every row, and
 * up to KILN_PROBE_SAMPLE rows, one in every `every` rows seen. */
#define KILN_PROBE_SAMPLE 128
typedef struct kiln_llm_probe_slot {
    int in;          /* input channels */
    double *sum_abs; /* [in] */
    int64_t rows;    /* rows seen */
    float *sample;   /* [KILN_PROBE_SAMPLE, in] */
    int n_sample;
} kiln_llm_probe_slot;

struct kiln_llm_probe {
    int n_layer;
    int every;                  /* one sampled row in every this many */
    kiln_llm_probe_slot *slots; /* [n_layer * KILN_PROBE_SITES] */
    kiln_llm_probe_slot head;   /* the lm_head's input (the final norm's output) */
};

/* The forward's hook: records rows x [n, in] (stride ldx) at (layer, site). */
void kiln_llm_probe_record(struct kiln_llm_probe *p, int layer, kiln_llm_probe_site site, const float *x, int ldx,
                           int n, int in);
/* The same for the lm_head's input. */
void kiln_llm_probe_record_head(struct kiln_llm_probe *p, const float *x, int ldx, int n, int in);

/* Runs m (fp32 matrices; the checkpoint in dir supplies the tokenizer) over the first max_tokens
 * tokens of the text file calib_path (0: 4,096) and rescales and clips m's matrices and the ops before
 * them as the file comment says, in place; the lm_head too when lm_head (it is quantized: for a tied
 * one, neither the embedding nor the lm_head kept fp32). Errors: no tokenizer, an empty or unreadable
 * text, out of memory. */
kiln_status kiln_llm_awq_apply(kiln_llm_model *m, const char *dir, const char *calib_path, int max_tokens,
                               bool lm_head);

/* The same over token ids [0, n) (n >= 2), their tokenizer's work done; clip false leaves out the
 * clipping, so that m computes what it did before, to float rounding (tests check the folds so). */
kiln_status kiln_llm_awq_apply_ids(kiln_llm_model *m, const int32_t *ids, int64_t n, bool clip, bool lm_head);

#endif
