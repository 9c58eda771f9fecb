/* llm_engine_write.c — kiln_llm_engine_build: reads a checkpoint as kiln_llm_model_load_hf does (FP32,
 * the forward's layout), converts every weight array to the engine's precision, and writes the llm
 * config, tokenizer, llm tensors and weights sections (docs/engine-format.md, "LLM engines"). */
#include "llm/llm_engine_internal.h"

#include "core/file.h"
#include "core/half.h"
#include "core/status.h"
#include "engine/engine_layout.h"
#include "hf/checkpoint.h"

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

/* What the build assembles before writing. */
typedef struct build {
    kiln_llm_model *m;
    kiln_llm_weight *w;
    int n;
    kiln_dtype dtype;
    const void **data;   /* [n]: the model's arrays (fp32) or converted copies */
    void **owned;        /* [n]: the converted copies, freed at the end */
    size_t *bytes;
    uint64_t *offsets;
    uint64_t weights_size;
    kiln_strbuf config, tokenizer, table;
} build;

/* Converts (or points at) every weight and lays out the weights section and the tensor table. */
static kiln_status lay_out_weights(build *b, kiln_llm_engine_info *info) {
    b->n = kiln_llm_weights_list(b->m, NULL);
    b->w = calloc((size_t)b->n, sizeof *b->w);
    b->data = calloc((size_t)b->n, sizeof *b->data);
    b->owned = calloc((size_t)b->n, sizeof *b->owned);
    b->bytes = calloc((size_t)b->n, sizeof *b->bytes);
    b->offsets = calloc((size_t)b->n, sizeof *b->offsets);
    info->tensors = calloc((size_t)b->n, sizeof *info->tensors);
    if (!b->w || !b->data || !b->owned || !b->bytes || !b->offsets || !info->tensors)
        return kiln_error(KILN_ERR_OUT_OF_MEMORY, "out of memory building the engine");
    kiln_llm_weights_list(b->m, b->w);
    put_u32(&b->table, (uint32_t)b->n);
    for (int i = 0; i < b->n; i++) {
        const kiln_llm_weight *w = &b->w[i];
        size_t numel = (size_t)w->dims[0] * (size_t)(w->ndim == 2 ? w->dims[1] : 1);
        const float *src = *w->slot;
        b->bytes[i] = numel * kiln_dtype_size(b->dtype);
        if (b->dtype == KILN_F32) {
            b->data[i] = src;
        } else {
            uint16_t *h = malloc(b->bytes[i]);
            if (!h) return kiln_error(KILN_ERR_OUT_OF_MEMORY, "out of memory converting '%s'", w->name);
            for (size_t k = 0; k < numel; k++) h[k] = b->dtype == KILN_F16 ? kiln_f32_to_f16(src[k]) : kiln_f32_to_bf16(src[k]);
            b->data[i] = b->owned[i] = h;
        }
        b->offsets[i] = (b->weights_size + KILN_ENGINE_TENSOR_ALIGN - 1) & ~(uint64_t)(KILN_ENGINE_TENSOR_ALIGN - 1);
        b->weights_size = b->offsets[i] + b->bytes[i];
        size_t len = strlen(w->name);
        put_u32(&b->table, (uint32_t)len);
        kiln_strbuf_append(&b->table, w->name, len);
        put_u32(&b->table, (uint32_t)b->dtype);
        put_u32(&b->table, (uint32_t)w->ndim);
        for (int d = 0; d < w->ndim; d++) put_u64(&b->table, (uint64_t)w->dims[d]);
        put_u64(&b->table, b->offsets[i]);
        put_u64(&b->table, b->bytes[i]);
        kiln_llm_engine_tensor *t = &info->tensors[i];
        memcpy(t->name, w->name, sizeof t->name);
        t->dtype = b->dtype;
        t->ndim = w->ndim;
        memcpy(t->dims, w->dims, sizeof t->dims);
        info->n_params += (int64_t)numel;
        info->weight_bytes += b->bytes[i];
    }
    info->n_tensors = b->n;
    return kiln_strbuf_status(&b->table);
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

static kiln_status build_engine(build *b, const char *dir, const kiln_llm_build_options *o, const char *path,
                                kiln_llm_engine_info *info) {
    kiln_precision p;
    if (o && o->precision >= 0) p = (kiln_precision)o->precision;
    else KILN_TRY(checkpoint_precision(dir, &p));
    b->dtype = p == KILN_PRECISION_FP16 ? KILN_F16 : p == KILN_PRECISION_BF16 ? KILN_BF16 : KILN_F32;
    KILN_TRY(kiln_llm_model_load_hf(dir, &b->m));
    info->cfg = b->m->cfg;
    KILN_TRY(kiln_llm_read_generation_eos(dir, info->gen_eos, &info->n_gen_eos));
    char tj[4096];
    snprintf(tj, sizeof tj, "%s/tokenizer.json", dir);
    struct stat st;
    if (stat(tj, &st) == 0) { /* refuse a tokenizer generate could not load */
        kiln_tokenizer *tok;
        KILN_TRY(kiln_tokenizer_load(dir, &tok));
        kiln_tokenizer_free(tok);
    }
    KILN_TRY(put_file(&b->tokenizer, dir, "tokenizer.json", &info->tokenizer_bytes));
    KILN_TRY(put_file(&b->tokenizer, dir, "tokenizer_config.json", &info->tokenizer_config_bytes));
    KILN_TRY(kiln_llm_config_encode(&info->cfg, info->gen_eos, info->n_gen_eos, &b->config));
    KILN_TRY(lay_out_weights(b, info));
    fill_meta(dir, o, p, &info->meta);
    static const uint32_t ids[4] = {KILN_SECTION_LLM_CONFIG, KILN_SECTION_TOKENIZER, KILN_SECTION_LLM_TENSORS,
                                    KILN_SECTION_WEIGHTS};
    const void *data[4] = {b->config.data, b->tokenizer.data, b->table.data, NULL};
    size_t bytes[4] = {b->config.len, b->tokenizer.len, b->table.len, 0};
    KILN_TRY(kiln_engine_write_image(path, &info->meta, KILN_ENGINE_KIND_LLM, ids, data, bytes, 4, b->data, b->bytes,
                                     b->offsets, (uint32_t)b->n, b->weights_size));
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
    for (int i = 0; b.owned && i < b.n; i++) free(b.owned[i]);
    free(b.w);
    free(b.data);
    free(b.owned);
    free(b.bytes);
    free(b.offsets);
    kiln_strbuf_free(&b.config);
    kiln_strbuf_free(&b.tokenizer);
    kiln_strbuf_free(&b.table);
    kiln_llm_model_free(b.m);
    if (s != KILN_OK || info == &local) kiln_llm_engine_info_free(info);
    return s == KILN_OK ? s : kiln_error_prefix(s, "cannot build the LLM engine '%s'", path);
}
