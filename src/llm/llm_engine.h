/* llm_engine.h — LLM engines: `kiln build --hf DIR` writes a Hugging Face checkpoint's config, its
 * tokenizer files (verbatim) and its weights, in the layout the forward step wants and in fp32, fp16
 * or bf16, into a .kiln file of kind llm (docs/engine-format.md). Loading one gives the same
 * kiln_llm_model as kiln_llm_model_load_hf (FP32 for the CPU forward: an fp32 engine's weights are
 * used in place from the mapping, half-precision ones converted; for a GPU the matrices stay in the
 * mapping as they are, llm_deferred.h). kiln_llm_bundle_open takes either a
 * checkpoint directory or an engine, for kiln_llm_open (kiln/kiln_llm.h). */
#ifndef KILN_LLM_LLM_ENGINE_H
#define KILN_LLM_LLM_ENGINE_H

#include "engine/engine_format.h"
#include "llm/llm.h"
#include "llm/tokenizer.h"

typedef struct kiln_llm_build_options {
    int precision;             /* a kiln_precision, or -1: the checkpoint's dtype when F16/BF16, else fp32 */
    /* Weight-only INT8 (header precision int8): every matrix stored as int8 with one fp32 scale per
     * output row (tensor NAME then NAME.scale), the vectors and pos_emb fp32; precision is ignored.
     * The skips keep the token embedding or the lm_head fp32 (a tied lm_head is the embedding). */
    bool weights_int8, int8_skip_embed, int8_skip_lm_head;
    /* W8A8 (header precision w8a8) when not NULL: the layers' matrices smoothed and calibrated
     * (llm_smoothquant.h), stored as INT8 matrices each followed by NAME.act_scale (F32, [1]); the
     * token embedding and lm_head as with weights_int8 (the skips apply). Needs a tokenizer.json. */
    const struct kiln_llm_w8a8_options *w8a8;
    /* Weight-only INT4 (header precision int4): every matrix (but those the skips above keep fp32)
     * stored packed in groups of 128 with fp32 scales and zero points (NAME, NAME.scale, NAME.zero;
     * llm_gemv_q4.h); with calib_text, AWQ-style activation-aware scales (llm_awq.h), else round to
     * nearest. */
    bool weights_int4;
    const char *calib_text; /* INT4's calibration text file, or NULL */
    /* FP8 (header precision fp8): every matrix stored as E4M3 codes with one fp32 scale per output row
     * (tensor NAME then NAME.scale), the skips as for INT8; the products round their activations to
     * E4M3, with one static scale per matrix calibrated on fp8_calib_text (a NAME.act_scale tensor
     * after NAME.scale) or, when it is NULL, a dynamic one per token row. */
    bool weights_fp8;
    const char *fp8_calib_text;
    const char *build_options; /* the flags as text, recorded in the header ("" when NULL) */
} kiln_llm_build_options;

/* The name suffix of an INT8 or FP8 matrix's scales tensor. */
#define KILN_LLM_SCALE_SUFFIX ".scale"
/* The name suffix of a W8A8 or calibrated FP8 matrix's static activation scale tensor ([1], fp32). */
#define KILN_LLM_ACT_SCALE_SUFFIX ".act_scale"
/* The name suffix of an INT4 matrix's zero points tensor. */
#define KILN_LLM_ZERO_SUFFIX ".zero"

/* One weight of an engine, as its tensor table records it. */
typedef struct kiln_llm_engine_tensor {
    char name[48];
    kiln_dtype dtype;
    int ndim;
    int64_t dims[2];
} kiln_llm_engine_tensor;

/* What an LLM engine (or a build) holds, without its weights converted. */
typedef struct kiln_llm_engine_info {
    kiln_engine_meta meta;     /* the header; meta.precision is the weights' precision */
    kiln_llm_config cfg;
    int32_t gen_eos[KILN_LLM_MAX_EOS]; /* generation_config.json's eos_token_id(s) */
    int n_gen_eos;
    kiln_llm_engine_tensor *tensors; /* [n_tensors], owned (kiln_llm_engine_info_free) */
    int n_tensors;
    int64_t n_params;
    uint64_t weight_bytes;     /* the tensors' bytes (without alignment padding) */
    uint64_t tokenizer_bytes, tokenizer_config_bytes; /* 0: the checkpoint had no such file */
    char *tokenizer_config;    /* a NUL-terminated copy of tokenizer_config.json, owned; NULL when none */
} kiln_llm_engine_info;
void kiln_llm_engine_info_free(kiln_llm_engine_info *info); /* accepts a zeroed one */

/* Builds the engine of checkpoint dir at path (atomically). The checkpoint is read as
 * kiln_llm_model_load_hf reads it (same errors); tokenizer.json, when present, must load
 * (kiln_tokenizer_load's errors); without one the engine holds no tokenizer (kiln generate then
 * refuses it). When info is not NULL it receives what was written (the caller frees it). */
kiln_status kiln_llm_engine_build(const char *dir, const kiln_llm_build_options *o, const char *path,
                                  kiln_llm_engine_info *info);

/* Maps and verifies the LLM engine at path (header, kind, section layout, checksums, the config and
 * tensor table, every tensor the config needs present with its shape, no other) and fills *info.
 * An ONNX engine is KILN_ERR_ENGINE_MISMATCH saying so; corruption KILN_ERR_PARSE "engine file is
 * corrupted: ..." or "... truncated ...", version mismatches as for ONNX engines. */
kiln_status kiln_llm_engine_read_info(const char *path, kiln_llm_engine_info *info);
/* Same, plus the model (*model, kiln_llm_model_free) and, when tok is not NULL, the tokenizer (*tok;
 * KILN_ERR_INVALID_ARGUMENT when the engine holds none). info may be NULL. */
kiln_status kiln_llm_engine_load(const char *path, kiln_llm_engine_info *info, kiln_llm_model **model,
                                 kiln_tokenizer **tok);
/* The same, but an engine without a tokenizer leaves *tok NULL instead of failing. */
kiln_status kiln_llm_engine_load_any(const char *path, kiln_llm_engine_info *info, kiln_llm_model **model,
                                     kiln_tokenizer **tok);
/* As kiln_llm_engine_load_any, but the model is for a GPU upload: deferred (llm_deferred.h), its
 * matrices left in the engine's mapping in the engine's precision (the CPU forward cannot run it). */
kiln_status kiln_llm_engine_load_for_device(const char *path, kiln_llm_engine_info *info, kiln_llm_model **model,
                                            kiln_tokenizer **tok);
/* Verifies the LLM engine image data[0..size) as kiln_llm_engine_read_info verifies a file (the same
 * errors, naming `what`) and fills *info; when tok is not NULL, also loads the tokenizer it holds
 * (*tok, as kiln_llm_engine_load). Nothing points into data afterwards. No weights are read. */
kiln_status kiln_llm_engine_buffer_read(const void *data, size_t size, const char *what, kiln_llm_engine_info *info,
                                        kiln_tokenizer **tok);
/* The model alone. */
kiln_status kiln_llm_model_load_engine(const char *path, kiln_llm_model **out);

/* A model from a checkpoint directory or an LLM engine file, with what generation needs. */
typedef struct kiln_llm_bundle {
    kiln_llm_model *model;
    kiln_tokenizer *tok;       /* NULL unless asked for and present */
    char *tokenizer_config;    /* tokenizer_config.json's text (NUL-terminated), NULL when absent or not asked for */
    int32_t gen_eos[KILN_LLM_MAX_EOS]; /* generation_config.json's eos_token_id(s) (directory or engine) */
    int n_gen_eos;
    bool from_engine;
    kiln_precision weights;    /* an engine's stored precision; a directory's as opened: its checkpoint's
                                * with device_weights, else fp32 */
    int64_t n_params;
} kiln_llm_bundle;
/* Opens path: a directory is read with kiln_llm_model_load_hf (+ generation_config.json), or with
 * kiln_llm_model_load_hf_deferred when device_weights (the model is for a GPU upload: no FP32 host
 * copy; the CPU forward cannot run it), anything else as an LLM engine (kiln_llm_engine_load_any,
 * or kiln_llm_engine_load_for_device when device_weights). with_tokenizer: also load
 * the tokenizer (tokenizer.json, or the engine's copy) and tokenizer_config.json's text, when the
 * model has them (a model without is no error: b->tok stays NULL). On failure *b is freed and zeroed. */
kiln_status kiln_llm_bundle_open(const char *path, bool with_tokenizer, bool device_weights, kiln_llm_bundle *b);
void kiln_llm_bundle_free(kiln_llm_bundle *b); /* zeroes it; accepts a zeroed one */

/* generation_config.json's eos_token_id (a number or a list) in dir, into ids[0..*n); *n = 0 when the
 * file is absent or names none. Errors: the file's JSON (KILN_ERR_PARSE naming it), more than
 * KILN_LLM_MAX_EOS ids (KILN_ERR_UNSUPPORTED). */
kiln_status kiln_llm_read_generation_eos(const char *dir, int32_t *ids, int *n);

#endif
