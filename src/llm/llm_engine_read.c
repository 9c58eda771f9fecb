/* llm_engine_read.c — loading an LLM engine (docs/engine-format.md, "LLM engines"): the header and
 * section checks shared with ONNX engines (kiln_engine_check_image), then the llm config, the
 * tokenizer section's two files and the tensor table, each tensor checked against the name and shape
 * the config implies. An fp32 engine's weights stay in the mapping, and so do an INT8 engine's (its
 * int8 matrices and their scales, and its fp32 vectors), an INT4 engine's (packed matrices, scales,
 * zero points) and an FP8 engine's (E4M3 codes, scales, any static activation scales); fp16 / bf16 ones
 * are converted; for a device, the matrices stay in the mapping (llm_deferred.h), an INT8 (INT4, FP8)
 * engine's quantized ones as kiln_llm_q8 views. A W8A8 engine is an INT8 one whose layer matrices are
 * int8, each with an activation scale record. */
#include "llm/llm_engine_internal.h"

#include "core/file.h"
#include "core/half.h"
#include "core/status.h"
#include "engine/engine_layout.h"
#include "llm/llm_deferred.h"
#include "llm/llm_gemv_q4.h"

#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static kiln_status corrupt(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static kiln_status corrupt(const char *fmt, ...) {
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return kiln_error(KILN_ERR_PARSE, "engine file is corrupted: %s", msg);
}

/* A verified engine image and where its parts are. */
typedef struct image {
    kiln_file_map *map;
    kiln_engine_section sec[4]; /* llm config, tokenizer, llm tensors, weights */
    const uint8_t *json, *json_cfg; /* tokenizer.json and tokenizer_config.json (lengths in info) */
    kiln_llm_model *m;          /* cfg and layers; the arrays only once loaded */
    kiln_llm_weight *w;         /* [n_weights]: the config's weights, in table order */
    int n_weights;
    uint64_t *offsets;          /* [n_weights] inside the weights section (a quantized matrix's values) */
    uint64_t *scale_offsets;    /* [n_weights] an INT8, INT4 or FP8 matrix's scales; NO_SCALES for the others */
    uint64_t *act_offsets;      /* [n_weights] a W8A8 or FP8 matrix's static activation scale; NO_SCALES when
                                   none */
    uint64_t *zero_offsets;     /* [n_weights] an INT4 matrix's zero points (with its scales) */
} image;

#define NO_SCALES UINT64_MAX

/* The tokenizer section: two files, each u64 length + bytes, and nothing after them. */
static kiln_status read_tokenizer_section(image *im, kiln_llm_engine_info *info) {
    const uint8_t *p = im->map->data + im->sec[1].offset;
    uint64_t n = im->sec[1].bytes, pos = 0;
    uint64_t *lens[2] = {&info->tokenizer_bytes, &info->tokenizer_config_bytes};
    const uint8_t **at[2] = {&im->json, &im->json_cfg};
    for (int i = 0; i < 2; i++) {
        if (n - pos < 8) return corrupt("the tokenizer section ends early");
        uint64_t len = kiln_le64(p + pos);
        pos += 8;
        if (len > n - pos) return corrupt("the tokenizer section's file %d runs past its end", i);
        *lens[i] = len;
        *at[i] = p + pos;
        pos += len;
    }
    if (pos != n) return corrupt("%llu unread bytes at the end of the tokenizer section", (unsigned long long)(n - pos));
    return KILN_OK;
}

/* Reads and checks tensor record i against the weight the config needs there (w): of dtype want, or
 * also alt unless it is KILN_UNDEFINED (an INT8 engine's KILN_I8 matrix, an FP8 one's KILN_F8E4M3FN, an
 * INT4 one's KILN_U4, whose bytes are its packed rows'). */
static kiln_status read_tensor(const uint8_t *p, uint64_t n, uint64_t *pos, int i, const kiln_llm_weight *w,
                               kiln_dtype want, kiln_dtype alt, uint64_t weights_size, kiln_llm_engine_tensor *t,
                               uint64_t *offset) {
    if (n - *pos < 4) return corrupt("the llm tensors section ends in tensor %d", i);
    uint32_t len = kiln_le32(p + *pos);
    *pos += 4;
    if (len > n - *pos) return corrupt("the llm tensors section ends in tensor %d", i);
    if (len != strlen(w->name) || memcmp(p + *pos, w->name, len))
        return corrupt("tensor %d is '%.*s', the model's config needs '%s' there", i, (int)(len < 64 ? len : 64),
                       (const char *)p + *pos, w->name);
    *pos += len;
    if (n - *pos < 8) return corrupt("the llm tensors section ends in tensor '%s'", w->name);
    uint32_t dtype = kiln_le32(p + *pos), ndim = kiln_le32(p + *pos + 4);
    *pos += 8;
    const kiln_dtype given = want;
    if (alt != KILN_UNDEFINED && dtype == (uint32_t)alt) want = alt;
    if (dtype != (uint32_t)want)
        return corrupt("tensor '%s' has dtype %u, the header's precision needs %s%s%s", w->name, dtype,
                       kiln_dtype_name(given), alt != KILN_UNDEFINED ? " or " : "",
                       alt != KILN_UNDEFINED ? kiln_dtype_name(alt) : "");
    if (ndim != (uint32_t)w->ndim) return corrupt("tensor '%s' has rank %u, the config needs %d", w->name, ndim, w->ndim);
    if (n - *pos < 8 * (uint64_t)ndim + 16) return corrupt("the llm tensors section ends in tensor '%s'", w->name);
    for (int d = 0; d < w->ndim; d++)
        if ((int64_t)kiln_le64(p + *pos + 8 * d) != w->dims[d])
            return corrupt("tensor '%s' dimension %d is %lld, the config needs %lld", w->name, d,
                           (long long)kiln_le64(p + *pos + 8 * d), (long long)w->dims[d]);
    *pos += 8 * (uint64_t)ndim;
    uint64_t off = kiln_le64(p + *pos), nbytes = kiln_le64(p + *pos + 8);
    *pos += 16;
    uint64_t need = want == KILN_U4 ? (uint64_t)w->dims[0] * (uint64_t)kiln_q4_row_bytes(w->dims[1])
                    : (uint64_t)w->dims[0] * (uint64_t)(w->ndim == 2 ? w->dims[1] : 1) * kiln_dtype_size(want);
    if (nbytes != need) return corrupt("tensor '%s' holds %llu bytes, its shape needs %llu", w->name,
                                       (unsigned long long)nbytes, (unsigned long long)need);
    if (off % KILN_ENGINE_TENSOR_ALIGN || off > weights_size || nbytes > weights_size - off)
        return corrupt("tensor '%s' [%llu, +%llu) is misaligned or outside the %llu-byte weights section", w->name,
                       (unsigned long long)off, (unsigned long long)nbytes, (unsigned long long)weights_size);
    memcpy(t->name, w->name, sizeof t->name);
    t->dtype = want;
    t->ndim = w->ndim;
    memcpy(t->dims, w->dims, sizeof t->dims);
    *offset = off;
    return KILN_OK;
}

/* The fewest bytes of one llm tensors record: name length, dtype, rank, one dimension, offset, bytes. */
#define LLM_TENSOR_RECORD_MIN (4 + 4 + 4 + 8 + 8 + 8)

/* The llm tensors section can hold the records the config cfg implies: checked before anything is
 * allocated per layer or per tensor, so that a config's sizes (up to 2^24 layers) cannot make a small
 * file allocate gigabytes. Every layer has at least one tensor, which bounds the count's cost. */
static kiln_status check_tensor_count(const image *im, const kiln_llm_config *cfg) {
    uint64_t n = im->sec[2].bytes, room = n < 4 ? 0 : (n - 4) / LLM_TENSOR_RECORD_MIN;
    if ((uint64_t)cfg->n_layer > room)
        return corrupt("the llm tensors section (%llu bytes) is too short for the config's %d layers",
                       (unsigned long long)n, cfg->n_layer);
    kiln_llm_model probe = {.cfg = *cfg};
    int expected = kiln_llm_weights_list(&probe, NULL);
    if ((uint64_t)expected > room)
        return corrupt("the llm tensors section (%llu bytes) is too short for the %d tensors the config needs",
                       (unsigned long long)n, expected);
    return KILN_OK;
}

/* A record that follows quantized matrix w: "NAME" + suffix, fp32, [rows] after an INT8 matrix, [rows,
 * groups] after an INT4 one (int4). */
static kiln_status read_scales(const uint8_t *p, uint64_t n, uint64_t *pos, int rec, const kiln_llm_weight *w,
                               const char *suffix, bool int4, uint64_t weights_size, kiln_llm_engine_tensor *t,
                               uint64_t *offset) {
    kiln_llm_weight sw = {.ndim = int4 ? 2 : 1, .dims = {w->dims[0], int4 ? kiln_q4_groups(w->dims[1]) : 0}};
    if ((size_t)snprintf(sw.name, sizeof sw.name, "%s%s", w->name, suffix) >= sizeof sw.name)
        return corrupt("tensor '%s': its scales' name is too long", w->name);
    return read_tensor(p, n, pos, rec, &sw, KILN_F32, KILN_UNDEFINED, weights_size, t, offset);
}

/* Whether w is a layer's matrix (qkv, o, up, down): in a W8A8 engine it is int8, with an activation scale. */
static bool layer_matrix(const kiln_llm_weight *w) { return w->ndim == 2 && !strncmp(w->name, "layers.", 7); }

/* The activation scale record that follows W8A8 or FP8 matrix w's scales: "NAME.act_scale", fp32, [1]. */
static kiln_status read_act_scale(const uint8_t *p, uint64_t n, uint64_t *pos, int rec, const kiln_llm_weight *w,
                                  uint64_t weights_size, kiln_llm_engine_tensor *t, uint64_t *offset) {
    kiln_llm_weight aw = {.ndim = 1, .dims = {1, 0}};
    if ((size_t)snprintf(aw.name, sizeof aw.name, "%s%s", w->name, KILN_LLM_ACT_SCALE_SUFFIX) >= sizeof aw.name)
        return corrupt("tensor '%s': its activation scale's name is too long", w->name);
    return read_tensor(p, n, pos, rec, &aw, KILN_F32, KILN_UNDEFINED, weights_size, t, offset);
}

/* Whether the record at pos is named w's name + suffix (without reading past n). */
static bool next_named(const uint8_t *p, uint64_t n, uint64_t pos, const kiln_llm_weight *w, const char *suffix) {
    const size_t a = strlen(w->name), b = strlen(suffix);
    if (n - pos < 4 || kiln_le32(p + pos) != a + b || n - pos - 4 < a + b) return false;
    return !memcmp(p + pos + 4, w->name, a) && !memcmp(p + pos + 4 + a, suffix, b);
}

/* The tensor table: exactly the weights the config implies, in their order; in an INT8 engine each
 * matrix may be int8 followed by its scales record, in an INT4 one packed u4 followed by its scales
 * and zero points; in a W8A8 engine each layer matrix is int8, with its scales and then its activation
 * scale record; in an FP8 one E4M3 followed by its scales and perhaps its activation scale. */
static kiln_status read_tensor_section(image *im, kiln_llm_engine_info *info) {
    const uint8_t *p = im->map->data + im->sec[2].offset;
    uint64_t n = im->sec[2].bytes, pos = 4;
    const bool w8a8 = info->meta.precision == KILN_PRECISION_W8A8;
    const bool int4 = info->meta.precision == KILN_PRECISION_INT4;
    const bool fp8 = info->meta.precision == KILN_PRECISION_FP8;
    const bool int8 = info->meta.precision == KILN_PRECISION_INT8 || w8a8 || int4 || fp8; /* quantized matrices */
    const uint32_t per = int4 || w8a8 || fp8 ? 3u : 2u; /* the most records of a quantized matrix */
    kiln_dtype want = info->meta.precision == KILN_PRECISION_FP16 ? KILN_F16
                      : info->meta.precision == KILN_PRECISION_BF16 ? KILN_BF16 : KILN_F32;
    const int expected = kiln_llm_weights_list(im->m, NULL);
    if (n < 4) return corrupt("the llm tensors section ends early");
    const uint32_t records = kiln_le32(p);
    if (int8 ? records < (uint32_t)expected || records > per * (uint32_t)expected : records != (uint32_t)expected)
        return corrupt("%u tensors, the model's config needs %s%d", records, int8 ? "between " : "", expected);
    if (int8) {
        const size_t layers = (size_t)im->m->cfg.n_layer ? (size_t)im->m->cfg.n_layer : 1;
        if (!(im->m->q8 = calloc(layers, sizeof *im->m->q8)))
            return kiln_error(KILN_ERR_OUT_OF_MEMORY, "out of memory for the quantized weights of %zu layers", layers);
    }
    im->w = calloc((size_t)expected, sizeof *im->w);
    im->offsets = calloc((size_t)expected, sizeof *im->offsets);
    im->scale_offsets = calloc((size_t)expected, sizeof *im->scale_offsets);
    im->act_offsets = calloc((size_t)expected, sizeof *im->act_offsets);
    im->zero_offsets = calloc((size_t)expected, sizeof *im->zero_offsets);
    info->tensors = calloc(records, sizeof *info->tensors);
    if (!im->w || !im->offsets || !im->scale_offsets || !im->act_offsets || !im->zero_offsets || !info->tensors)
        return kiln_error(KILN_ERR_OUT_OF_MEMORY, "out of memory for a table of %u tensors", records);
    kiln_llm_weights_list(im->m, im->w);
    im->n_weights = expected;
    int rec = 0;
    for (int i = 0; i < expected; i++) {
        const kiln_llm_weight *w = &im->w[i];
        if ((uint32_t)rec == records) return corrupt("%u tensors, the model's config needs more", records);
        const kiln_dtype alt = !int8 || !w->q8 ? KILN_UNDEFINED : int4 ? KILN_U4 : fp8 ? KILN_F8E4M3FN : KILN_I8;
        KILN_TRY(read_tensor(p, n, &pos, rec, w, want, alt, im->sec[3].bytes, &info->tensors[rec], &im->offsets[i]));
        const kiln_dtype got = info->tensors[rec].dtype;
        info->weight_bytes += got == KILN_U4 ? (uint64_t)(w->dims[0] * kiln_q4_row_bytes(w->dims[1]))
                              : (uint64_t)(w->dims[0] * (w->ndim == 2 ? w->dims[1] : 1)) * kiln_dtype_size(got);
        im->scale_offsets[i] = im->act_offsets[i] = NO_SCALES;
        if (w8a8 && layer_matrix(w) && got != KILN_I8)
            return corrupt("tensor '%s' has dtype %s, a w8a8 engine's layer matrices are i8", w->name, kiln_dtype_name(got));
        rec++;
        if (got == KILN_I8 || got == KILN_U4 || got == KILN_F8E4M3FN) {
            const uint64_t per_row = got == KILN_U4 ? (uint64_t)kiln_q4_groups(w->dims[1]) : 1;
            if ((uint32_t)rec + (got == KILN_U4) >= records)
                return corrupt("%u tensors: the scales%s of '%s' are missing", records, got == KILN_U4 ? " or zero points" : "",
                               w->name);
            KILN_TRY(read_scales(p, n, &pos, rec, w, KILN_LLM_SCALE_SUFFIX, got == KILN_U4, im->sec[3].bytes,
                                 &info->tensors[rec], &im->scale_offsets[i]));
            rec++;
            info->weight_bytes += (uint64_t)w->dims[0] * per_row * sizeof(float);
            if (got == KILN_U4) {
                KILN_TRY(read_scales(p, n, &pos, rec, w, KILN_LLM_ZERO_SUFFIX, true, im->sec[3].bytes,
                                     &info->tensors[rec], &im->zero_offsets[i]));
                rec++;
                info->weight_bytes += (uint64_t)w->dims[0] * per_row * sizeof(float);
            }
            if ((w8a8 && layer_matrix(w)) ||
                (fp8 && (uint32_t)rec < records && next_named(p, n, pos, w, KILN_LLM_ACT_SCALE_SUFFIX))) {
                if ((uint32_t)rec == records)
                    return corrupt("%u tensors: the activation scale of '%s' is missing", records, w->name);
                KILN_TRY(read_act_scale(p, n, &pos, rec, w, im->sec[3].bytes, &info->tensors[rec], &im->act_offsets[i]));
                info->weight_bytes += sizeof(float);
                rec++;
            }
        }
        info->n_params += w->dims[0] * (w->ndim == 2 ? w->dims[1] : 1);
        info->n_tensors = rec;
    }
    if ((uint32_t)rec != records) return corrupt("%u tensors, the model's config needs %d", records, rec);
    if (pos != n) return corrupt("%llu unread bytes at the end of the llm tensors section", (unsigned long long)(n - pos));
    return KILN_OK;
}

/* Verifies the image in im->map (named `what` in messages) into im and info (everything but the
 * weights' values). */
static kiln_status check_image(const char *what, image *im, kiln_llm_engine_info *info) {
    static const uint32_t ids[4] = {KILN_SECTION_LLM_CONFIG, KILN_SECTION_TOKENIZER, KILN_SECTION_LLM_TENSORS,
                                    KILN_SECTION_WEIGHTS};
    KILN_TRY(kiln_engine_check_image(im->map->data, im->map->size, KILN_ENGINE_KIND_LLM, NULL, what, ids, 4, im->sec,
                                     &info->meta));
    info->meta.graph_bytes = 0;
    KILN_TRY(kiln_llm_config_decode(im->map->data + im->sec[0].offset, im->sec[0].bytes, &info->cfg, info->gen_eos,
                                    &info->n_gen_eos));
    KILN_TRY(read_tokenizer_section(im, info));
    KILN_TRY(check_tensor_count(im, &info->cfg));
    if (!(im->m = calloc(1, sizeof *im->m)) || !(im->m->layers = calloc((size_t)info->cfg.n_layer, sizeof *im->m->layers)))
        return kiln_error(KILN_ERR_OUT_OF_MEMORY, "out of memory");
    im->m->cfg = info->cfg;
    return read_tensor_section(im, info);
}

/* The stored dtype of weight i (the engine's precision but for an INT8, INT4 or FP8 engine's matrices). */
static kiln_dtype dtype_of(const image *im, const kiln_llm_engine_info *info, int i) {
    if (im->scale_offsets[i] != NO_SCALES)
        return info->meta.precision == KILN_PRECISION_INT4  ? KILN_U4
               : info->meta.precision == KILN_PRECISION_FP8 ? KILN_F8E4M3FN
                                                            : KILN_I8;
    return info->meta.precision == KILN_PRECISION_FP16 ? KILN_F16
           : info->meta.precision == KILN_PRECISION_BF16 ? KILN_BF16 : KILN_F32;
}

/* For a device: a deferred model owning the mapping, each matrix placed where it lies in it. */
static kiln_status defer_matrices(image *im, const kiln_llm_engine_info *info) {
    const uint8_t *base = im->map->data + im->sec[3].offset;
    kiln_status s = llm_deferred_create_mapped(im->map, (size_t)info->n_params, info->n_tensors, &im->m->deferred);
    im->map = NULL; /* the deferred model's now (freed with it), or already freed */
    KILN_TRY(s);
    for (int i = 0; i < im->n_weights; i++) {
        const kiln_llm_weight *w = &im->w[i];
        if (w->ndim != 2 || im->scale_offsets[i] != NO_SCALES) continue; /* INT8 / INT4 / FP8: viewed in place */
        const kiln_dtype dt = dtype_of(im, info, i);
        const kiln_st_tensor t = {.name = w->name, .dtype = dt, .ndim = 2, .dims = {w->dims[0], w->dims[1]},
                                  .data = base + im->offsets[i],
                                  .nbytes = (size_t)(w->dims[0] * w->dims[1]) * kiln_dtype_size(dt)};
        KILN_TRY(llm_deferred_reserve(im->m->deferred, (size_t)(w->dims[0] * w->dims[1]), w->slot));
        KILN_TRY(llm_deferred_place(im->m->deferred, *w->slot, &t, false));
    }
    return KILN_OK;
}

/* Points the model's arrays into the mapping (fp32), or converts each into a new FP32 array; with
 * device, the matrices are deferred first and only the vectors converted. */
static kiln_status fill_weights(image *im, const kiln_llm_engine_info *info, bool device) {
    const uint8_t *base = im->map->data + im->sec[3].offset;
    if (device) KILN_TRY(defer_matrices(im, info)); /* the model owns the mapping from here on */
    for (int i = 0; i < im->n_weights; i++) {
        const kiln_llm_weight *w = &im->w[i];
        size_t numel = (size_t)w->dims[0] * (size_t)(w->ndim == 2 ? w->dims[1] : 1);
        const uint8_t *src = base + im->offsets[i];
        if (im->scale_offsets[i] != NO_SCALES) { /* INT8 / INT4 / FP8, in place: 64-byte aligned */
            w->q8->q = (const int8_t *)src;
            w->q8->scale = (const float *)(const void *)(base + im->scale_offsets[i]);
            w->q8->zero = dtype_of(im, info, i) == KILN_U4 ? (const float *)(const void *)(base + im->zero_offsets[i]) : NULL;
            w->q8->fp8 = info->meta.precision == KILN_PRECISION_FP8;
            *w->slot = NULL;
            if (im->act_offsets[i] == NO_SCALES) continue;
            float act;
            memcpy(&act, base + im->act_offsets[i], sizeof act);
            if (!(act > 0 && isfinite(act))) return corrupt("tensor '%s': activation scale %g is not positive", w->name, (double)act);
            w->q8->act_scale = act;
            continue;
        }
        if (device && w->ndim == 2) continue;
        if (dtype_of(im, info, i) == KILN_F32 && !device) {
            *w->slot = (float *)(uintptr_t)src; /* read-only mapping: the forward never writes weights */
            continue;
        }
        float *dst = malloc(numel * sizeof *dst);
        if (!dst) return kiln_error(KILN_ERR_OUT_OF_MEMORY, "out of memory for weight '%s'", w->name);
        *w->slot = dst;
        const uint16_t *h = (const uint16_t *)src; /* 64-byte aligned */
        const kiln_dtype dt = dtype_of(im, info, i);
        if (dt == KILN_F32) memcpy(dst, src, numel * sizeof *dst);
        else
            for (size_t k = 0; k < numel; k++) dst[k] = dt == KILN_F16 ? kiln_f16_to_f32(h[k]) : kiln_bf16_to_f32(h[k]);
    }
    if (im->m->cfg.tied_embeddings) {
        im->m->lm_head = im->m->tok_emb;
        im->m->q8_lm_head = im->m->q8_tok_emb;
    }
    if (!device && (info->meta.precision == KILN_PRECISION_FP32 || info->meta.precision == KILN_PRECISION_INT8 ||
                    info->meta.precision == KILN_PRECISION_W8A8 || info->meta.precision == KILN_PRECISION_INT4 ||
                    info->meta.precision == KILN_PRECISION_FP8)) {
        im->m->mapping = im->map; /* the model keeps the mapping alive */
        im->map = NULL;
    }
    return KILN_OK;
}

/* The tokenizer from the engine's copies of tokenizer.json and tokenizer_config.json. */
static kiln_status load_tokenizer(const char *path, const image *im, const kiln_llm_engine_info *info,
                                  kiln_tokenizer **tok) {
    if (!info->tokenizer_bytes)
        return kiln_error(KILN_ERR_INVALID_ARGUMENT, "%s holds no tokenizer (its checkpoint had no tokenizer.json): "
                          "rebuild it from a checkpoint with one", path);
    return kiln_tokenizer_load_memory((const char *)im->json, info->tokenizer_bytes,
                                      info->tokenizer_config_bytes ? (const char *)im->json_cfg : NULL,
                                      info->tokenizer_config_bytes, path, tok);
}

/* Frees what im holds but its mapping (the model only when not handed out), and on failure info
 * (unless NULL) and *tok; returns s, its message prefixed with `what` unless it already names it. */
static kiln_status finish(kiln_status s, const char *what, image *im, kiln_llm_engine_info *info, kiln_tokenizer **tok) {
    kiln_llm_model_free(im->m);
    free(im->w);
    free(im->offsets);
    free(im->scale_offsets);
    free(im->act_offsets);
    free(im->zero_offsets);
    if (s == KILN_OK) return s;
    if (info) kiln_llm_engine_info_free(info);
    if (tok) {
        kiln_tokenizer_free(*tok);
        *tok = NULL;
    }
    if (strstr(kiln_last_error(), what) == NULL) return kiln_error_prefix(s, "%s", what);
    return s;
}

/* kiln_llm_engine_load; an engine without tokenizer is an error only when tok_required; device: the
 * model deferred. */
static kiln_status load_engine(const char *path, kiln_llm_engine_info *info, kiln_llm_model **model,
                               kiln_tokenizer **tok, bool tok_required, bool device) {
    kiln_llm_engine_info local;
    if (!info) info = &local;
    memset(info, 0, sizeof *info);
    if (model) *model = NULL;
    if (tok) *tok = NULL;
    image im = {0};
    kiln_status s = kiln_file_map_new(path, &im.map);
    if (s == KILN_OK) s = check_image(path, &im, info);
    if (s == KILN_OK && model) s = fill_weights(&im, info, device);
    if (s == KILN_OK && tok && (tok_required || info->tokenizer_bytes)) s = load_tokenizer(path, &im, info, tok);
    if (s == KILN_OK && info->tokenizer_config_bytes) {
        if (!(info->tokenizer_config = malloc(info->tokenizer_config_bytes + 1)))
            s = kiln_error(KILN_ERR_OUT_OF_MEMORY, "out of memory");
        else {
            memcpy(info->tokenizer_config, im.json_cfg, info->tokenizer_config_bytes);
            info->tokenizer_config[info->tokenizer_config_bytes] = 0;
        }
    }
    if (s == KILN_OK && model) {
        *model = im.m;
        im.m = NULL;
    }
    kiln_file_map_free(im.map);
    if (info == &local) kiln_llm_engine_info_free(&local);
    return finish(s, path, &im, info == &local ? NULL : info, tok);
}

kiln_status kiln_llm_engine_buffer_read(const void *data, size_t size, const char *what, kiln_llm_engine_info *info,
                                        kiln_tokenizer **tok) {
    memset(info, 0, sizeof *info);
    if (tok) *tok = NULL;
    kiln_file_map view = {data, size};
    image im = {.map = &view};
    kiln_status s = check_image(what, &im, info);
    if (s == KILN_OK && tok) s = load_tokenizer(what, &im, info, tok);
    return finish(s, what, &im, info, tok);
}

kiln_status kiln_llm_engine_load(const char *path, kiln_llm_engine_info *info, kiln_llm_model **model,
                                 kiln_tokenizer **tok) {
    return load_engine(path, info, model, tok, true, false);
}

kiln_status kiln_llm_engine_load_any(const char *path, kiln_llm_engine_info *info, kiln_llm_model **model,
                                     kiln_tokenizer **tok) {
    return load_engine(path, info, model, tok, false, false);
}

kiln_status kiln_llm_engine_load_for_device(const char *path, kiln_llm_engine_info *info, kiln_llm_model **model,
                                            kiln_tokenizer **tok) {
    return load_engine(path, info, model, tok, false, true);
}

kiln_status kiln_llm_engine_read_info(const char *path, kiln_llm_engine_info *info) {
    return kiln_llm_engine_load(path, info, NULL, NULL);
}

kiln_status kiln_llm_model_load_engine(const char *path, kiln_llm_model **out) {
    return kiln_llm_engine_load(path, NULL, out, NULL);
}

void kiln_llm_engine_info_free(kiln_llm_engine_info *info) {
    free(info->tensors);
    free(info->tokenizer_config);
    info->tensors = NULL;
    info->tokenizer_config = NULL;
    info->n_tensors = 0;
}
