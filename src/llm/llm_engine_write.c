/* llm_engine_write.c — kiln_llm_engine_build: reads a checkpoint as kiln_llm_model_load_hf does (FP32,
 * the forward's layout), converts every weight array to the engine's precision (or, with
 * weights_int8 / weights_fp8, quantizes the matrices to INT8 / E4M3 with per-row scales, FP8 ones with
 * activation scales calibrated on a text when one is given, or with weights_int4 to INT4 in groups,
 * after AWQ-style scaling when given a calibration text, and keeps the rest fp32; with w8a8, first
 * smooths and calibrates the model, llm_smoothquant.h, and adds each layer matrix's activation scale), and
 * writes the llm config, tokenizer, llm tensors and weights sections (docs/engine-format.md, "LLM
 * engines"). */
#include "llm/llm_engine_internal.h"

#include "core/file.h"
#include "core/half.h"
#include "core/status.h"
#include "engine/engine_layout.h"
#include "hf/checkpoint.h"
#include "core/log.h"
#include "llm/llm_awq.h"
#include "llm/llm_fp8_calib.h"
#include "llm/llm_gemv_fp8.h"
#include "llm/llm_gemv_q4.h"
#include "llm/llm_gemv_q8.h"
#include "llm/llm_smoothquant.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

/* The precision of the checkpoint's token embedding: fp16 / bf16 when stored so, else fp32. */
static kiln_status checkpoint_precision(const char *dir, kiln_precision *out) {
    kiln_hf_checkpoint *ck;
    KILN_TRY(kiln_hf_checkpoint_open(dir, &ck));
    const kiln_st_tensor *t = kiln_hf_checkpoint_find(ck, "transformer.wte.weight");
    if (!t) t = kiln_hf_checkpoint_find(ck, "model.embed_tokens.weight");
    *out = t && t->dtype == KILN_F16 ? KILN_PRECISION_FP16 : t && t->dtype == KILN_BF16 ? KILN_PRECISION_BF16 : KILN_PRECISION_FP32;
    kiln_hf_checkpoint_free(ck);
    return KILN_OK;
}

/* Appends the file dir/name to the tokenizer section as u64 length + bytes (length 0 when absent). */
static kiln_status put_file(kiln_strbuf *b, const char *dir, const char *name, uint64_t *len) {
    char path[4096];
    if ((size_t)snprintf(path, sizeof path, "%s/%s", dir, name) >= sizeof path)
        return kiln_error(KILN_ERR_INVALID_ARGUMENT, "checkpoint directory path is too long");
    struct stat st;
    kiln_file_map m = {0};
    if (stat(path, &st) == 0) KILN_TRY(kiln_file_map_open(path, &m));
    uint8_t t[8];
    kiln_put_le64(t, m.size);
    kiln_strbuf_append(b, t, 8);
    kiln_strbuf_append(b, m.data, m.size);
    *len = m.size;
    kiln_file_unmap(&m);
    return kiln_strbuf_status(b);
}

static void put_u32(kiln_strbuf *b, uint32_t v) {
    uint8_t t[4];
    kiln_put_le32(t, v);
    kiln_strbuf_append(b, t, 4);
}

static void put_u64(kiln_strbuf *b, uint64_t v) {
    uint8_t t[8];
    kiln_put_le64(t, v);
    kiln_strbuf_append(b, t, 8);
}

/* What the build assembles before writing: the records of the tensor table (an INT8 matrix is two:
 * its int8 values and its scales, a W8A8 one those and its activation scale; an INT4 one three: packed
 * values, scales, zero points; an FP8 one its codes, its scales and perhaps its activation scale) and
 * their data. */
typedef struct build {
    kiln_llm_model *m;
    kiln_llm_weight *w;
    int n;               /* the model's weight arrays */
    int n_rec;           /* the table's records (n, plus one or two per quantized matrix) */
    kiln_dtype dtype;
    const kiln_llm_build_options *o;
    const void **data;   /* [3n]: the model's arrays (fp32) or converted copies */
    void **owned;        /* [3n]: the converted copies, freed at the end */
    float *act_scales;   /* W8A8: [n_layer * KILN_LLM_W8A8_MATS] (llm_smoothquant.h); else NULL */
    size_t *bytes;
    uint64_t *offsets;
    uint64_t weights_size;
    float *act_amax;     /* --weights fp8 --calib-text: the calibrated maxima (llm_fp8_calib.h), else NULL */
    kiln_strbuf config, tokenizer, table;
} build;

/* Whether weight w is stored quantized: with --weights int8, w8a8, int4 or fp8, every matrix but pos_emb
 * and those skipped (a tied lm_head is the embedding: skipping either keeps it fp32). */
static bool quantized(const build *b, const kiln_llm_weight *w) {
    if (!b->o || !(b->o->weights_int8 || b->o->w8a8 || b->o->weights_int4 || b->o->weights_fp8) || w->ndim != 2 ||
        !strcmp(w->name, "pos_emb"))
        return false;
    const bool tied = b->m->cfg.tied_embeddings;
    if (!strcmp(w->name, "tok_emb")) return !b->o->int8_skip_embed && !(tied && b->o->int8_skip_lm_head);
    if (!strcmp(w->name, "lm_head")) return !b->o->int8_skip_lm_head;
    return true;
}

/* Appends one record to the table and to info, and lays its data out in the weights section. */
static void add_record(build *b, kiln_llm_engine_info *info, const char *name, kiln_dtype dt, int ndim,
                       const int64_t *dims, const void *data, void *owned) {
    const int i = b->n_rec++;
    const size_t numel = (size_t)dims[0] * (size_t)(ndim == 2 ? dims[1] : 1);
    b->data[i] = data;
    b->owned[i] = owned;
    b->bytes[i] = dt == KILN_U4 ? (size_t)(dims[0] * kiln_q4_row_bytes(dims[1])) : numel * kiln_dtype_size(dt);
    b->offsets[i] = (b->weights_size + KILN_ENGINE_TENSOR_ALIGN - 1) & ~(uint64_t)(KILN_ENGINE_TENSOR_ALIGN - 1);
    b->weights_size = b->offsets[i] + b->bytes[i];
    size_t len = strlen(name);
    put_u32(&b->table, (uint32_t)len);
    kiln_strbuf_append(&b->table, name, len);
    put_u32(&b->table, (uint32_t)dt);
    put_u32(&b->table, (uint32_t)ndim);
    for (int d = 0; d < ndim; d++) put_u64(&b->table, (uint64_t)dims[d]);
    put_u64(&b->table, b->offsets[i]);
    put_u64(&b->table, b->bytes[i]);
    kiln_llm_engine_tensor *t = &info->tensors[i];
    snprintf(t->name, sizeof t->name, "%s", name);
    t->dtype = dt;
    t->ndim = ndim;
    t->dims[0] = dims[0];
    t->dims[1] = ndim == 2 ? dims[1] : 0;
    info->weight_bytes += b->bytes[i];
}

/* Where a W8A8 engine's activation scale of weight w is: the layers' matrices (layers.N.M.weight) have
 * one, the others none (NULL). */
static const float *act_scale_of(const build *b, const kiln_llm_weight *w) {
    static const char *const mats[KILN_LLM_W8A8_MATS] = {"qkv", "o", "up", "down"};
    int layer;
    char mat[8];
    if (!b->act_scales || w->ndim != 2 || sscanf(w->name, "layers.%d.%7[a-z].weight", &layer, mat) != 2) return NULL;
    for (int i = 0; i < KILN_LLM_W8A8_MATS; i++)
        if (!strcmp(mat, mats[i])) return &b->act_scales[(size_t)layer * KILN_LLM_W8A8_MATS + i];
    return NULL;
}

/* Whether weight w has an activation scale record: a W8A8 layer matrix (b->act_scales) or an FP8 matrix
 * calibrated on a text (b->act_amax). */
static bool has_act_scale(const build *b, const kiln_llm_weight *w) {
    float unused;
    return act_scale_of(b, w) ||
           (b->act_amax && kiln_llm_fp8_act_scale_of(&b->m->cfg, b->act_amax, w->name, &unused));
}

/* Weight w as its INT8 values (or FP8 codes) and scales (two records), then its activation scale when it
 * has one (has_act_scale). */
static kiln_status add_quantized(build *b, kiln_llm_engine_info *info, const kiln_llm_weight *w) {
    const size_t numel = (size_t)w->dims[0] * (size_t)w->dims[1];
    const bool fp8 = b->o->weights_fp8;
    void *q = malloc(numel);
    float *scale = malloc((size_t)w->dims[0] * sizeof *scale);
    float act_scale = 0;
    const bool has_act = fp8 && b->act_amax && kiln_llm_fp8_act_scale_of(&b->m->cfg, b->act_amax, w->name, &act_scale);
    float *act = has_act ? malloc(sizeof *act) : NULL;
    if (!q || !scale || (has_act && !act)) {
        free(q);
        free(scale);
        free(act);
        return kiln_error(KILN_ERR_OUT_OF_MEMORY, "out of memory quantizing '%s'", w->name);
    }
    if (fp8) kiln_llm_quantize_rows_fp8(*w->slot, w->dims[0], w->dims[1], q, scale);
    else kiln_llm_quantize_rows(*w->slot, w->dims[0], w->dims[1], q, scale);
    add_record(b, info, w->name, fp8 ? KILN_F8E4M3FN : KILN_I8, 2, w->dims, q, q);
    char name[64];
    snprintf(name, sizeof name, "%s%s", w->name, KILN_LLM_SCALE_SUFFIX);
    add_record(b, info, name, KILN_F32, 1, w->dims, scale, scale);
    const float *w8a8_act = act_scale_of(b, w);
    if (act || w8a8_act) {
        if (act) *act = act_scale;
        snprintf(name, sizeof name, "%s%s", w->name, KILN_LLM_ACT_SCALE_SUFFIX);
        add_record(b, info, name, KILN_F32, 1, (const int64_t[1]){1}, act ? act : w8a8_act, act);
    }
    return KILN_OK;
}

/* Weight w as its packed INT4 values, scales and zero points (three records). */
static kiln_status add_q4(build *b, kiln_llm_engine_info *info, const kiln_llm_weight *w) {
    const int64_t rows = w->dims[0], groups = kiln_q4_groups(w->dims[1]);
    uint8_t *q = malloc((size_t)(rows * kiln_q4_row_bytes(w->dims[1])));
    float *scale = malloc((size_t)(rows * groups) * sizeof *scale), *zero = malloc((size_t)(rows * groups) * sizeof *zero);
    if (!q || !scale || !zero) {
        free(q);
        free(scale);
        free(zero);
        return kiln_error(KILN_ERR_OUT_OF_MEMORY, "out of memory quantizing '%s'", w->name);
    }
    kiln_llm_quantize_q4(*w->slot, rows, w->dims[1], 1.0f, q, scale, zero);
    add_record(b, info, w->name, KILN_U4, 2, w->dims, q, q);
    const int64_t gdims[2] = {rows, groups};
    char name[64];
    snprintf(name, sizeof name, "%s%s", w->name, KILN_LLM_SCALE_SUFFIX);
    add_record(b, info, name, KILN_F32, 2, gdims, scale, scale);
    snprintf(name, sizeof name, "%s%s", w->name, KILN_LLM_ZERO_SUFFIX);
    add_record(b, info, name, KILN_F32, 2, gdims, zero, zero);
    return KILN_OK;
}

/* Converts (or points at) every weight and lays out the weights section and the tensor table. */
static kiln_status lay_out_weights(build *b, kiln_llm_engine_info *info) {
    b->n = kiln_llm_weights_list(b->m, NULL);
    const size_t cap = 3 * (size_t)b->n;
    b->w = calloc((size_t)b->n, sizeof *b->w);
    b->data = calloc(cap, sizeof *b->data);
    b->owned = calloc(cap, sizeof *b->owned);
    b->bytes = calloc(cap, sizeof *b->bytes);
    b->offsets = calloc(cap, sizeof *b->offsets);
    info->tensors = calloc(cap, sizeof *info->tensors);
    if (!b->w || !b->data || !b->owned || !b->bytes || !b->offsets || !info->tensors)
        return kiln_error(KILN_ERR_OUT_OF_MEMORY, "out of memory building the engine");
    kiln_llm_weights_list(b->m, b->w);
    int n_rec = 0;
    for (int i = 0; i < b->n; i++) {
        if (!quantized(b, &b->w[i])) n_rec++;
        else n_rec += b->o->weights_int4 ? 3 : 2 + has_act_scale(b, &b->w[i]);
    }
    put_u32(&b->table, (uint32_t)n_rec);
    for (int i = 0; i < b->n; i++) {
        const kiln_llm_weight *w = &b->w[i];
        size_t numel = (size_t)w->dims[0] * (size_t)(w->ndim == 2 ? w->dims[1] : 1);
        info->n_params += (int64_t)numel;
        if (quantized(b, w)) {
            KILN_TRY(b->o->weights_int4 ? add_q4(b, info, w) : add_quantized(b, info, w));
            continue;
        }
        const float *src = *w->slot;
        if (b->dtype == KILN_F32) {
            add_record(b, info, w->name, KILN_F32, w->ndim, w->dims, src, NULL);
            continue;
        }
        uint16_t *h = malloc(numel * sizeof *h);
        if (!h) return kiln_error(KILN_ERR_OUT_OF_MEMORY, "out of memory converting '%s'", w->name);
        for (size_t k = 0; k < numel; k++) h[k] = b->dtype == KILN_F16 ? kiln_f32_to_f16(src[k]) : kiln_f32_to_bf16(src[k]);
        add_record(b, info, w->name, b->dtype, w->ndim, w->dims, h, h);
    }
    info->n_tensors = b->n_rec;
    return kiln_strbuf_status(&b->table);
}

/* Before an INT4 build's matrices are quantized: AWQ-style scales folded into the model from the
 * calibration text, or, without one, a warning that the weights are rounded to nearest. */
static kiln_status prepare_int4(build *b, const char *dir) {
    if (!b->o->calib_text) {
        KILN_LOG(KILN_LOG_WARN, "--weights int4 without --calib-text: every group rounded to nearest (no "
                 "activation-aware scales; a calibration text usually lowers the perplexity cost)");
        return KILN_OK;
    }
    const bool tied = b->m->cfg.tied_embeddings, skip_head = b->o->int8_skip_lm_head;
    const bool head = tied ? !b->o->int8_skip_embed && !skip_head : !skip_head; /* the lm_head is quantized */
    return kiln_llm_awq_apply(b->m, dir, b->o->calib_text, 0, head);
}

/* The header fields of the engine built from dir. */
static void fill_meta(const char *dir, const kiln_llm_build_options *o, kiln_precision p, kiln_engine_meta *meta) {
    memset(meta, 0, sizeof *meta);
    size_t n = strlen(dir);
    while (n > 1 && dir[n - 1] == '/') n--;
    const char *base = dir + n;
    while (base > dir && base[-1] != '/') base--;
    snprintf(meta->source, sizeof meta->source, "%.*s", (int)(dir + n - base), base);
    snprintf(meta->target, sizeof meta->target, "any");
    snprintf(meta->device, sizeof meta->device, "any (weights only; the forward is chosen at run time)");
    snprintf(meta->build_options, sizeof meta->build_options, "%s", o && o->build_options ? o->build_options : "");
    meta->created_unix = (uint64_t)time(NULL);
    meta->precision = p;
}

/* W8A8: smooths b->m and calibrates its activation scales into b->act_scales. */
static kiln_status calibrate_w8a8(build *b, const kiln_tokenizer *tok) {
    const size_t n = (size_t)b->m->cfg.n_layer * KILN_LLM_W8A8_MATS;
    if (!(b->act_scales = malloc((n ? n : 1) * sizeof *b->act_scales)))
        return kiln_error(KILN_ERR_OUT_OF_MEMORY, "out of memory for %zu activation scales", n);
    return kiln_llm_smoothquant(b->m, tok, b->o->w8a8, b->act_scales);
}

static kiln_status build_engine(build *b, const char *dir, const kiln_llm_build_options *o, const char *path,
                                kiln_llm_engine_info *info) {
    kiln_precision p;
    if (o && o->w8a8) p = KILN_PRECISION_W8A8; /* int8 matrices and activation scales, the rest fp32 */
    else if (o && o->weights_int8) p = KILN_PRECISION_INT8; /* int8 matrices, the rest fp32 */
    else if (o && o->weights_int4) p = KILN_PRECISION_INT4; /* int4 matrices, the rest fp32 */
    else if (o && o->weights_fp8) p = KILN_PRECISION_FP8; /* E4M3 matrices, the rest fp32 */
    else if (o && o->precision >= 0) p = (kiln_precision)o->precision;
    else KILN_TRY(checkpoint_precision(dir, &p));
    b->o = o;
    b->dtype = p == KILN_PRECISION_FP16 ? KILN_F16 : p == KILN_PRECISION_BF16 ? KILN_BF16 : KILN_F32;
    KILN_TRY(kiln_llm_model_load_hf(dir, &b->m));
    if (o && o->weights_fp8 && o->fp8_calib_text) KILN_TRY(kiln_llm_fp8_calibrate(b->m, dir, o->fp8_calib_text, &b->act_amax));
    info->cfg = b->m->cfg;
    KILN_TRY(kiln_llm_read_generation_eos(dir, info->gen_eos, &info->n_gen_eos));
    char tj[4096];
    snprintf(tj, sizeof tj, "%s/tokenizer.json", dir);
    struct stat st;
    kiln_tokenizer *tok = NULL;
    if (stat(tj, &st) == 0) KILN_TRY(kiln_tokenizer_load(dir, &tok)); /* refuse a tokenizer generate could not load */
    if (o && o->w8a8 && o->w8a8->calib_text && !tok) {
        return kiln_error(KILN_ERR_INVALID_ARGUMENT, "--weights w8a8 reads the calibration text with the checkpoint's "
                          "tokenizer, and %s has no tokenizer.json", dir);
    }
    kiln_status s = o && o->w8a8 ? calibrate_w8a8(b, tok) : KILN_OK;
    kiln_tokenizer_free(tok);
    KILN_TRY(s);
    KILN_TRY(put_file(&b->tokenizer, dir, "tokenizer.json", &info->tokenizer_bytes));
    KILN_TRY(put_file(&b->tokenizer, dir, "tokenizer_config.json", &info->tokenizer_config_bytes));
    KILN_TRY(kiln_llm_config_encode(&info->cfg, info->gen_eos, info->n_gen_eos, &b->config));
    if (o && o->weights_int4) KILN_TRY(prepare_int4(b, dir));
    KILN_TRY(lay_out_weights(b, info));
    fill_meta(dir, o, p, &info->meta);
    static const uint32_t ids[4] = {KILN_SECTION_LLM_CONFIG, KILN_SECTION_TOKENIZER, KILN_SECTION_LLM_TENSORS,
                                    KILN_SECTION_WEIGHTS};
    const void *data[4] = {b->config.data, b->tokenizer.data, b->table.data, NULL};
    size_t bytes[4] = {b->config.len, b->tokenizer.len, b->table.len, 0};
    KILN_TRY(kiln_engine_write_image(path, &info->meta, KILN_ENGINE_KIND_LLM, ids, data, bytes, 4, b->data, b->bytes,
                                     b->offsets, (uint32_t)b->n_rec, b->weights_size));
    info->meta.weights_bytes = b->weights_size;
    return KILN_OK;
}

kiln_status kiln_llm_engine_build(const char *dir, const kiln_llm_build_options *o, const char *path,
                                  kiln_llm_engine_info *info) {
    kiln_llm_engine_info local;
    if (!info) info = &local;
    memset(info, 0, sizeof *info);
    build b = {0};
    /* refuse an output inside the checkpoint (or any other bad output) before the work */
    kiln_status s = kiln_file_note_inputs_in_dir(dir);
    if (s == KILN_OK) s = kiln_file_check_output(path);
    if (s == KILN_OK) s = build_engine(&b, dir, o, path, info);
    for (int i = 0; b.owned && i < b.n_rec; i++) free(b.owned[i]);
    free(b.w);
    free(b.data);
    free(b.owned);
    free(b.bytes);
    free(b.offsets);
    free(b.act_scales);
    free(b.act_amax);
    kiln_strbuf_free(&b.config);
    kiln_strbuf_free(&b.tokenizer);
    kiln_strbuf_free(&b.table);
    kiln_llm_model_free(b.m);
    if (s != KILN_OK || info == &local) kiln_llm_engine_info_free(info);
    return s == KILN_OK ? s : kiln_error_prefix(s, "cannot build the LLM engine '%s'", path);
}
