/* test_llm_engine.c — LLM engines (src/llm/llm_engine*.c): a tiny GPT-2 and a tiny Llama checkpoint
 * written here are built into fp32, fp16, bf16, weight-only INT8, W8A8, weight-only INT4 and FP8 engines
 * (SmoothQuant's smoothing leaves the fp32 model's logits unchanged; each W8A8 layer matrix carries a
 * positive activation scale, on the CPU and for a device; FP8 with dynamic activation scales, and with
 * static ones calibrated on a text through a tiny tokenizer); the fp32 engine gives logits
 * identical to the checkpoint's, the others within their rounding (INT8 and FP8 ones hold each matrix as
 * int8 or E4M3 + scales, INT4 ones packed u4 + group scales + zero points); the generation eos ids and the
 * absence of a
 * tokenizer survive; ONNX and LLM readers refuse each other's engines; the in-memory reader agrees with
 * the file reader; and every truncation and every single-byte change of an engine file (with and
 * without recomputed checksums) and a config claiming 2^24 layers fail cleanly. With an
 * argument (models/kjv-gpt2) the same identity is checked on the bundled model. */
#include "core/status.h"
#include "engine/engine_format.h"
#include "engine/engine_layout.h"
#include "llm/kv_cache.h"
#include "llm/llm_deferred.h"
#include "llm/llm_engine.h"
#include "llm/llm_gemv_q4.h"
#include "llm/llm_internal.h"
#include "llm/llm_smoothquant.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static int failures;
#define CHECK(c) \
    do { \
        if (!(c)) { \
            fprintf(stderr, "%s:%d: CHECK(%s) failed (last error: %s)\n", __FILE__, __LINE__, #c, kiln_last_error()); \
            failures++; \
        } \
    } while (0)

static char dir[64];

/* ---- a tiny checkpoint, written by hand ---- */

typedef struct tens {
    char name[96];
    int ndim;
    int64_t dims[2];
} tens;

static void write_file(const char *path, const void *p, size_t n) {
    FILE *f = fopen(path, "wb");
    CHECK(f && fwrite(p, 1, n, f) == n);
    if (f) fclose(f);
}

/* model.safetensors with F32 tensors of pseudo-random values. */
static void write_safetensors(const char *ck, const tens *t, int n) {
    char *hdr = malloc(1 << 16);
    size_t hl = (size_t)sprintf(hdr, "{"), off = 0;
    for (int i = 0; i < n; i++) {
        size_t numel = (size_t)t[i].dims[0] * (size_t)(t[i].ndim == 2 ? t[i].dims[1] : 1);
        hl += (size_t)sprintf(hdr + hl, "%s\"%s\":{\"dtype\":\"F32\",\"shape\":[%lld", i ? "," : "", t[i].name,
                              (long long)t[i].dims[0]);
        if (t[i].ndim == 2) hl += (size_t)sprintf(hdr + hl, ",%lld", (long long)t[i].dims[1]);
        hl += (size_t)sprintf(hdr + hl, "],\"data_offsets\":[%zu,%zu]}", off, off + 4 * numel);
        off += 4 * numel;
    }
    hl += (size_t)sprintf(hdr + hl, "}");
    while (hl % 8) hdr[hl++] = ' ';
    size_t total = 8 + hl + off;
    unsigned char *img = malloc(total);
    for (int i = 0; i < 8; i++) img[i] = (unsigned char)((uint64_t)hl >> (8 * i));
    memcpy(img + 8, hdr, hl);
    float *data = (float *)malloc(off);
    uint32_t x = 12345;
    for (size_t i = 0; i < off / 4; i++) {
        x = x * 1664525u + 1013904223u;
        data[i] = ((float)(x >> 8) / 16777216.0f - 0.5f) * 0.4f;
    }
    memcpy(img + 8 + hl, data, off);
    char path[256];
    snprintf(path, sizeof path, "%s/model.safetensors", ck);
    write_file(path, img, total);
    free(img);
    free(data);
    free(hdr);
}

static void add(tens *t, int *n, const char *name, int64_t a, int64_t b) {
    snprintf(t[*n].name, sizeof t[*n].name, "%s", name);
    t[*n].ndim = b ? 2 : 1;
    t[*n].dims[0] = a;
    t[*n].dims[1] = b;
    ++*n;
}

/* A 2-layer GPT-2 (vocab 16, d 8, 2 heads, 16 positions) with generation_config.json eos 3. */
static void make_gpt2(const char *ck) {
    tens t[64];
    int n = 0;
    const int d = 8;
    add(t, &n, "wte.weight", 16, d);
    add(t, &n, "wpe.weight", 16, d);
    for (int l = 0; l < 2; l++) {
        char nm[96];
#define L(s, a, b) (snprintf(nm, sizeof nm, "h.%d.%s", l, s), add(t, &n, nm, a, b))
        L("ln_1.weight", d, 0); L("ln_1.bias", d, 0); L("attn.c_attn.weight", d, 3 * d); L("attn.c_attn.bias", 3 * d, 0);
        L("attn.c_proj.weight", d, d); L("attn.c_proj.bias", d, 0); L("ln_2.weight", d, 0); L("ln_2.bias", d, 0);
        L("mlp.c_fc.weight", d, 4 * d); L("mlp.c_fc.bias", 4 * d, 0); L("mlp.c_proj.weight", 4 * d, d);
        L("mlp.c_proj.bias", d, 0);
#undef L
    }
    add(t, &n, "ln_f.weight", d, 0);
    add(t, &n, "ln_f.bias", d, 0);
    write_safetensors(ck, t, n);
    char path[256];
    const char *cfg = "{\"model_type\":\"gpt2\",\"vocab_size\":16,\"n_layer\":2,\"n_embd\":8,\"n_head\":2,"
                      "\"n_positions\":16,\"eos_token_id\":[1,2]}";
    snprintf(path, sizeof path, "%s/config.json", ck);
    write_file(path, cfg, strlen(cfg));
    snprintf(path, sizeof path, "%s/generation_config.json", ck);
    write_file(path, "{\"eos_token_id\": 3}", 19);
}

/* A 1-layer Llama (vocab 16, d 8, 2 heads of 4, 1 kv head, untied lm_head). */
static void make_llama(const char *ck) {
    tens t[16];
    int n = 0;
    add(t, &n, "model.embed_tokens.weight", 16, 8);
    add(t, &n, "model.layers.0.input_layernorm.weight", 8, 0);
    add(t, &n, "model.layers.0.self_attn.q_proj.weight", 8, 8);
    add(t, &n, "model.layers.0.self_attn.k_proj.weight", 4, 8);
    add(t, &n, "model.layers.0.self_attn.v_proj.weight", 4, 8);
    add(t, &n, "model.layers.0.self_attn.o_proj.weight", 8, 8);
    add(t, &n, "model.layers.0.post_attention_layernorm.weight", 8, 0);
    add(t, &n, "model.layers.0.mlp.gate_proj.weight", 12, 8);
    add(t, &n, "model.layers.0.mlp.up_proj.weight", 12, 8);
    add(t, &n, "model.layers.0.mlp.down_proj.weight", 8, 12);
    add(t, &n, "model.norm.weight", 8, 0);
    add(t, &n, "lm_head.weight", 16, 8);
    write_safetensors(ck, t, n);
    char path[256];
    const char *cfg = "{\"model_type\":\"llama\",\"vocab_size\":16,\"hidden_size\":8,\"intermediate_size\":12,"
                      "\"num_hidden_layers\":1,\"num_attention_heads\":2,\"num_key_value_heads\":1,"
                      "\"max_position_embeddings\":32,\"rope_scaling\":{\"rope_type\":\"llama3\",\"factor\":8,"
                      "\"low_freq_factor\":1,\"high_freq_factor\":4,\"original_max_position_embeddings\":8},"
                      "\"eos_token_id\":5}";
    snprintf(path, sizeof path, "%s/config.json", ck);
    write_file(path, cfg, strlen(cfg));
}

/* A tokenizer.json in ck whose 16 tokens are the letters a..p (ids 0..15), for calibration texts. */
static void add_letter_tokenizer(const char *ck) {
    char path[256], json[512];
    int len = snprintf(json, sizeof json, "{\"model\": {\"type\": \"BPE\", \"merges\": [], \"vocab\": {");
    for (int c = 0; c < 16; c++) len += snprintf(json + len, sizeof json - (size_t)len, "%s\"%c\": %d", c ? ", " : "", 'a' + c, c);
    len += snprintf(json + len, sizeof json - (size_t)len, "}}, \"pre_tokenizer\": {\"type\": \"ByteLevel\", "
                    "\"add_prefix_space\": false}, \"decoder\": {\"type\": \"ByteLevel\"}}");
    snprintf(path, sizeof path, "%s/tokenizer.json", ck);
    write_file(path, json, (size_t)len);
}

/* ---- logits ---- */

/* all_logits of tokens 0..n-1 (ids i*5 % vocab) through m, into a new array. */
static float *logits_of(const kiln_llm_model *m, int n) {
    const kiln_llm_config *c = kiln_llm_model_config(m);
    kiln_kv_cache_config kc = {.n_layer = c->n_layer, .n_kv_head = c->n_kv_head, .head_dim = c->head_dim,
                               .block_size = 4, .n_blocks = (n + 3) / 4, .dtype = KILN_F32};
    kiln_kv_cache *kv;
    CHECK(kiln_kv_cache_create(&kc, &kv) == KILN_OK);
    int32_t tokens[64], pos[64], blocks[16], start[2] = {0, n}, ctx = n;
    for (int i = 0; i < n; i++) tokens[i] = (int32_t)(i * 5 % c->vocab), pos[i] = i;
    for (int i = 0; i < kc.n_blocks; i++) blocks[i] = kiln_kv_cache_alloc_block(kv);
    kiln_llm_batch b = {.n_tokens = n, .tokens = tokens, .positions = pos, .n_seqs = 1, .seq_start = start,
                        .ctx_len = &ctx, .block_table = blocks, .max_blocks_per_seq = kc.n_blocks, .all_logits = true};
    float *out = malloc((size_t)n * (size_t)c->vocab * sizeof *out);
    CHECK(kiln_llm_forward(m, kv, &b, out) == KILN_OK);
    kiln_kv_cache_free(kv);
    return out;
}

/* Builds ck with o into engine and compares its logits with the checkpoint's: identical when tol is
 * 0, else within tol (relative to the largest logit). */
static void check_built_logits(const char *ck, const kiln_llm_build_options *o, const char *label, const char *engine,
                               double tol, int n) {
    kiln_llm_engine_info info;
    CHECK(kiln_llm_engine_build(ck, o, engine, &info) == KILN_OK);
    kiln_llm_engine_info_free(&info);
    kiln_llm_model *a = NULL, *b = NULL;
    CHECK(kiln_llm_model_load_hf(ck, &a) == KILN_OK);
    CHECK(kiln_llm_model_load_engine(engine, &b) == KILN_OK);
    if (!a || !b) return;
    CHECK(!memcmp(kiln_llm_model_config(a), kiln_llm_model_config(b), sizeof(kiln_llm_config)));
    int vocab = kiln_llm_model_config(a)->vocab;
    float *la = logits_of(a, n), *lb = logits_of(b, n);
    double maxabs = 0, maxref = 0;
    for (int i = 0; i < n * vocab; i++) {
        maxabs = fmax(maxabs, fabs((double)la[i] - lb[i]));
        maxref = fmax(maxref, fabs((double)la[i]));
    }
    if (tol == 0) CHECK(!memcmp(la, lb, (size_t)n * (size_t)vocab * sizeof *la));
    else CHECK(maxabs <= tol * maxref);
    printf("  %s (%s): max |logit difference| %.3g of max |logit| %.3g\n", engine, label, maxabs, maxref);
    free(la);
    free(lb);
    kiln_llm_model_free(a);
    kiln_llm_model_free(b);
}

/* check_built_logits at precision p (-1: default). */
static void check_engine_logits(const char *ck, int p, const char *engine, double tol, int n) {
    kiln_llm_build_options o = {.precision = p, .build_options = "test"};
    check_built_logits(ck, &o, p < 0 ? "default" : p == 0 ? "fp32" : p == 1 ? "fp16" : "bf16", engine, tol, n);
}

/* An INT8 engine opened for a device: its int8 matrices are views into the mapping with the same
 * values and scales as the CPU load's, the fp32 matrices deferred (no host array), vectors converted. */
static void check_int8_for_device(const char *engine, bool skip_embed) {
    kiln_llm_model *dev = NULL, *cpu = NULL;
    CHECK(kiln_llm_engine_load_for_device(engine, NULL, &dev, NULL) == KILN_OK);
    CHECK(kiln_llm_engine_load(engine, NULL, &cpu, NULL) == KILN_OK);
    if (!dev || !cpu) {
        kiln_llm_model_free(dev);
        kiln_llm_model_free(cpu);
        return;
    }
    const kiln_llm_config *c = &cpu->cfg;
    CHECK(dev->q8 != NULL && (dev->q8_tok_emb.q != NULL) == !skip_embed);
    const size_t d = (size_t)c->d_model, qkv = (size_t)(c->n_head + 2 * c->n_kv_head) * (size_t)c->head_dim;
    for (int l = 0; dev->q8 && l < c->n_layer; l++) {
        const kiln_llm_q8 *a = &dev->q8[l].qkv, *b = &cpu->q8[l].qkv;
        CHECK(a->q && a->scale && !memcmp(a->q, b->q, qkv * d) && !memcmp(a->scale, b->scale, qkv * sizeof(float)));
        CHECK(dev->layers[l].norm1_w && dev->layers[l].norm1_w[0] == cpu->layers[l].norm1_w[0]);
    }
    if (skip_embed) CHECK(llm_deferred_owns(dev->deferred, dev->tok_emb)); /* the fp32 embedding stays in the mapping */
    kiln_llm_model_free(dev);
    kiln_llm_model_free(cpu);
}

/* Weight-only INT8 engines of ck: every matrix int8 (or the embedding kept fp32), each matrix
 * followed by its scales in the table, the logits within tol of the checkpoint's; opened for a device
 * as check_int8_for_device says. */
static void check_int8_engine(const char *ck, bool skip_embed, const char *engine, double tol, int n) {
    kiln_llm_build_options o = {.precision = -1, .weights_int8 = true, .int8_skip_embed = skip_embed,
                                .build_options = "test"};
    check_built_logits(ck, &o, skip_embed ? "int8, embed fp32" : "int8", engine, tol, n);
    kiln_llm_engine_info info;
    CHECK(kiln_llm_engine_read_info(engine, &info) == KILN_OK);
    CHECK(info.meta.precision == KILN_PRECISION_INT8);
    int i8 = 0, scales = 0;
    for (int i = 0; i < info.n_tensors; i++) {
        const kiln_llm_engine_tensor *t = &info.tensors[i];
        if (t->dtype == KILN_I8) {
            i8++;
            CHECK(i + 1 < info.n_tensors && strstr(info.tensors[i + 1].name, ".scale") &&
                  info.tensors[i + 1].dtype == KILN_F32 && info.tensors[i + 1].dims[0] == t->dims[0]);
        }
        scales += strstr(t->name, ".scale") != NULL;
        if (!strcmp(t->name, "tok_emb")) CHECK((t->dtype == KILN_I8) == !skip_embed);
        if (t->ndim == 1 && !strstr(t->name, ".scale")) CHECK(t->dtype == KILN_F32);
    }
    CHECK(i8 > 0 && i8 == scales);
    kiln_llm_engine_info_free(&info);
    check_int8_for_device(engine, skip_embed);
}

/* Calibration tokens for the tiny models (vocab 16): logits_of's 12 first (with minmax, no activation the
 * checks see saturates), then others. */
static const int32_t CALIB_IDS[] = {0, 5, 10, 15, 4, 9, 14, 3, 8, 13, 2, 7, 1, 6, 11, 12, 3, 3, 9};
#define N_CALIB_IDS ((int64_t)(sizeof CALIB_IDS / sizeof *CALIB_IDS))

/* SmoothQuant's smoothing folded into ck's fp32 model (qkv and up; a gated MLP's down too) changes its
 * logits by float rounding only; every scale is positive; no calibration input is refused. */
static void check_smoothing(const char *ck, int n) {
    kiln_llm_model *a = NULL, *b = NULL;
    CHECK(kiln_llm_model_load_hf(ck, &a) == KILN_OK && kiln_llm_model_load_hf(ck, &b) == KILN_OK);
    if (!a || !b) return;
    const kiln_llm_config *c = kiln_llm_model_config(a);
    float *scales = malloc((size_t)c->n_layer * KILN_LLM_W8A8_MATS * sizeof *scales);
    kiln_llm_w8a8_options o = {.smooth_alpha = 0.5f, .calibrator = {KILN_CALIB_MINMAX, 0}};
    CHECK(kiln_llm_smoothquant(b, NULL, &o, scales) == KILN_ERR_INVALID_ARGUMENT &&
          strstr(kiln_last_error(), "needs a calibration text or tokens"));
    o.calib_ids = CALIB_IDS;
    o.n_calib_ids = N_CALIB_IDS;
    CHECK(kiln_llm_smoothquant(b, NULL, &o, scales) == KILN_OK);
    CHECK(a->layers[0].qkv_w[0] != b->layers[0].qkv_w[0] && a->layers[0].o_w[0] == b->layers[0].o_w[0]);
    CHECK((a->layers[0].down_w[0] != b->layers[0].down_w[0]) == (c->arch == KILN_LLM_LLAMA)); /* gated MLPs */
    for (int i = 0; i < c->n_layer * KILN_LLM_W8A8_MATS; i++) CHECK(scales[i] > 0 && isfinite(scales[i]));
    float *la = logits_of(a, n), *lb = logits_of(b, n);
    double maxabs = 0, maxref = 0;
    for (int i = 0; i < n * c->vocab; i++) {
        maxabs = fmax(maxabs, fabs((double)la[i] - lb[i]));
        maxref = fmax(maxref, fabs((double)la[i]));
    }
    CHECK(maxabs <= 1e-5 * maxref);
    printf("  %s smoothed: max |logit difference| %.3g of max |logit| %.3g\n", ck, maxabs, maxref);
    free(la);
    free(lb);
    free(scales);
    kiln_llm_model_free(a);
    kiln_llm_model_free(b);
}

/* A W8A8 engine of ck (calibrated on CALIB_IDS, minmax): its logits within tol of the checkpoint's; header
 * w8a8; every layer matrix int8, then NAME.scale and NAME.act_scale ([1]); the embedding and an
 * untied lm_head weight-only int8; the CPU load and the device load hold the same positive activation
 * scales. */
static void check_w8a8_engine(const char *ck, const char *engine, double tol, int n) {
    const kiln_llm_w8a8_options w = {.calib_ids = CALIB_IDS, .n_calib_ids = N_CALIB_IDS, .smooth_alpha = 0.5f,
                                     .calibrator = {KILN_CALIB_MINMAX, 0}}; /* 20 tokens: too few for entropy */
    kiln_llm_build_options o = {.precision = -1, .w8a8 = &w, .build_options = "test"};
    check_built_logits(ck, &o, "w8a8", engine, tol, n);
    kiln_llm_engine_info info;
    CHECK(kiln_llm_engine_read_info(engine, &info) == KILN_OK);
    CHECK(info.meta.precision == KILN_PRECISION_W8A8);
    int acts = 0;
    for (int i = 0; i < info.n_tensors; i++) {
        const kiln_llm_engine_tensor *t = &info.tensors[i];
        const bool layer_matrix = t->ndim == 2 && !strncmp(t->name, "layers.", 7);
        if (layer_matrix) {
            CHECK(t->dtype == KILN_I8 && i + 2 < info.n_tensors && strstr(info.tensors[i + 2].name, ".act_scale") &&
                  info.tensors[i + 2].dtype == KILN_F32 && info.tensors[i + 2].ndim == 1 && info.tensors[i + 2].dims[0] == 1);
        }
        if (!strcmp(t->name, "tok_emb") || !strcmp(t->name, "lm_head")) CHECK(t->dtype == KILN_I8);
        acts += strstr(t->name, ".act_scale") != NULL;
    }
    CHECK(acts == 4 * info.cfg.n_layer);
    kiln_llm_engine_info_free(&info);
    kiln_llm_model *dev = NULL, *cpu = NULL;
    CHECK(kiln_llm_engine_load_for_device(engine, NULL, &dev, NULL) == KILN_OK);
    CHECK(kiln_llm_engine_load(engine, NULL, &cpu, NULL) == KILN_OK);
    for (int l = 0; dev && cpu && l < cpu->cfg.n_layer; l++) {
        const kiln_llm_q8_layer *d = &dev->q8[l], *h = &cpu->q8[l];
        CHECK(h->qkv.act_scale > 0 && h->o.act_scale > 0 && h->up.act_scale > 0 && h->down.act_scale > 0);
        CHECK(d->qkv.act_scale == h->qkv.act_scale && d->down.act_scale == h->down.act_scale);
    }
    CHECK(cpu && cpu->q8_tok_emb.act_scale == 0);
    kiln_llm_model_free(dev);
    kiln_llm_model_free(cpu);
}

/* Weight-only INT4 engines of ck (rounded to nearest): every matrix packed u4 followed by its scales
 * and zero points, fp32 [rows, groups], the logits within tol of the checkpoint's; opened for a
 * device, the packed matrices and both group arrays are views with the CPU load's values. */
static void check_int4_engine(const char *ck, const char *engine, double tol, int n) {
    kiln_llm_build_options o = {.precision = -1, .weights_int4 = true, .build_options = "test"};
    check_built_logits(ck, &o, "int4", engine, tol, n);
    kiln_llm_engine_info info;
    CHECK(kiln_llm_engine_read_info(engine, &info) == KILN_OK);
    CHECK(info.meta.precision == KILN_PRECISION_INT4);
    int u4 = 0;
    for (int i = 0; i < info.n_tensors; i++) {
        const kiln_llm_engine_tensor *t = &info.tensors[i];
        if (t->dtype != KILN_U4) continue;
        u4++;
        const int64_t groups = kiln_q4_groups(t->dims[1]);
        CHECK(i + 2 < info.n_tensors && strstr(info.tensors[i + 1].name, ".scale") && strstr(info.tensors[i + 2].name, ".zero"));
        for (int j = 1; j <= 2 && i + j < info.n_tensors; j++)
            CHECK(info.tensors[i + j].dtype == KILN_F32 && info.tensors[i + j].ndim == 2 &&
                  info.tensors[i + j].dims[0] == t->dims[0] && info.tensors[i + j].dims[1] == groups);
    }
    CHECK(u4 > 0);
    kiln_llm_engine_info_free(&info);
    kiln_llm_model *dev = NULL, *cpu = NULL;
    CHECK(kiln_llm_engine_load_for_device(engine, NULL, &dev, NULL) == KILN_OK);
    CHECK(kiln_llm_engine_load(engine, NULL, &cpu, NULL) == KILN_OK);
    if (dev && cpu && dev->q8 && cpu->q8) {
        const kiln_llm_config *c = &cpu->cfg;
        const kiln_llm_q8 *a = &dev->q8[0].qkv, *b = &cpu->q8[0].qkv;
        const size_t rows = (size_t)(c->n_head + 2 * c->n_kv_head) * (size_t)c->head_dim;
        const size_t g = (size_t)kiln_q4_groups(c->d_model) * rows;
        CHECK(a->zero && b->zero && !memcmp(a->q, b->q, rows * (size_t)kiln_q4_row_bytes(c->d_model)) &&
              !memcmp(a->scale, b->scale, g * sizeof(float)) && !memcmp(a->zero, b->zero, g * sizeof(float)));
    } else {
        CHECK(false);
    }
    kiln_llm_model_free(dev);
    kiln_llm_model_free(cpu);
}

/* FP8 engines of ck (calib: a calibration text, else dynamic activation scales): every matrix E4M3
 * followed by its scales (and, calibrated, its positive activation scale but for an untied token
 * embedding, which no product reads), the logits within tol of
 * the checkpoint's; the CPU load and the device load view the same codes and scales. */
static void check_fp8_engine(const char *ck, const char *calib, const char *engine, double tol, int n) {
    kiln_llm_build_options o = {.precision = -1, .weights_fp8 = true, .fp8_calib_text = calib, .build_options = "test"};
    check_built_logits(ck, &o, calib ? "fp8, static activation scales" : "fp8, dynamic activation scales", engine, tol, n);
    kiln_llm_engine_info info;
    CHECK(kiln_llm_engine_read_info(engine, &info) == KILN_OK);
    CHECK(info.meta.precision == KILN_PRECISION_FP8);
    int f8 = 0, acts = 0;
    for (int i = 0; i < info.n_tensors; i++) {
        const kiln_llm_engine_tensor *t = &info.tensors[i];
        if (t->dtype != KILN_F8E4M3FN) continue;
        f8++;
        CHECK(i + 1 < info.n_tensors && strstr(info.tensors[i + 1].name, ".scale") &&
              info.tensors[i + 1].dtype == KILN_F32 && info.tensors[i + 1].dims[0] == t->dims[0]);
        const bool act = i + 2 < info.n_tensors && strstr(info.tensors[i + 2].name, ".act_scale");
        const bool read = strcmp(t->name, "tok_emb") || info.cfg.tied_embeddings; /* a product reads it */
        CHECK(act == (calib != NULL && read) && (!act || info.tensors[i + 2].dims[0] == 1));
        acts += act;
    }
    CHECK(f8 > 0 && acts == (calib ? f8 - !info.cfg.tied_embeddings : 0));
    kiln_llm_engine_info_free(&info);
    kiln_llm_model *dev = NULL, *cpu = NULL;
    CHECK(kiln_llm_engine_load_for_device(engine, NULL, &dev, NULL) == KILN_OK);
    CHECK(kiln_llm_engine_load(engine, NULL, &cpu, NULL) == KILN_OK);
    for (int l = 0; dev && cpu && dev->q8 && cpu->q8 && l < cpu->cfg.n_layer; l++) {
        const kiln_llm_q8 *a = &dev->q8[l].down, *b = &cpu->q8[l].down;
        CHECK(a->fp8 && b->fp8 && a->scale[0] == b->scale[0]);
        CHECK(a->act_scale == b->act_scale && (a->act_scale > 0) == (calib != NULL));
        CHECK(!memcmp(a->q, b->q, (size_t)cpu->cfg.d_model * (size_t)cpu->cfg.d_ff));
    }
    kiln_llm_model_free(dev);
    kiln_llm_model_free(cpu);
}

/* ---- bad files ---- */

static uint8_t *read_all(const char *path, size_t *size) {
    FILE *f = fopen(path, "rb");
    fseek(f, 0, SEEK_END);
    *size = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *p = malloc(*size);
    CHECK(fread(p, 1, *size, f) == *size);
    fclose(f);
    return p;
}

static kiln_status load_image(const uint8_t *p, size_t n, const char *tmp) {
    write_file(tmp, p, n);
    kiln_llm_model *m = NULL;
    kiln_status s = kiln_llm_model_load_engine(tmp, &m);
    CHECK((s == KILN_OK) == (m != NULL));
    kiln_llm_model_free(m);
    return s;
}

/* Every truncation and every flipped byte of the header, the first 256 bytes of weights and the
 * sections after the weights (plain and resealed) fail cleanly (resealed weight bytes are valid). */
static void test_corruption(const char *engine) {
    size_t n;
    uint8_t *img = read_all(engine, &n), *mut = malloc(n);
    char tmp[128];
    snprintf(tmp, sizeof tmp, "%s/mut.kiln", dir);
    int bad = 0, resealed_ok = 0;
    for (size_t len = 0; len < n; len++) {
        kiln_status s = load_image(img, len, tmp);
        if (s != KILN_ERR_PARSE || (!strstr(kiln_last_error(), "truncated") && !strstr(kiln_last_error(), "corrupted")))
            if (bad++ < 5) fprintf(stderr, "truncated to %zu: %s %s\n", len, kiln_status_name(s), kiln_last_error());
    }
    size_t weights_at = (size_t)kiln_le64(img + KILN_EH_SECTIONS + 3 * KILN_ES_SIZE + KILN_ES_OFFSET);
    size_t weights_end = weights_at + (size_t)kiln_le64(img + KILN_EH_SECTIONS + 3 * KILN_ES_SIZE + KILN_ES_BYTES);
    size_t skip_from = weights_at + 256 < weights_end ? weights_at + 256 : weights_end, nflips = 0;
    for (size_t off = 0; off < n; off = off + 1 == skip_from ? weights_end : off + 1, nflips++) {
        memcpy(mut, img, n);
        mut[off] ^= 0x5A;
        kiln_status s = load_image(mut, n, tmp);
        if (s != KILN_ERR_PARSE && s != KILN_ERR_ENGINE_MISMATCH && bad++ < 5)
            fprintf(stderr, "byte %zu flipped: %s %s\n", off, kiln_status_name(s), kiln_last_error());
        kiln_engine_reseal(mut, n);
        s = load_image(mut, n, tmp);
        resealed_ok += s == KILN_OK;
        if (s != KILN_OK && s != KILN_ERR_PARSE && s != KILN_ERR_ENGINE_MISMATCH && bad++ < 5)
            fprintf(stderr, "byte %zu flipped, resealed: %s %s\n", off, kiln_status_name(s), kiln_last_error());
    }
    CHECK(bad == 0);
    printf("  %zu truncations and %zu flips rejected; resealed flips: %d load (weight bytes), %zu rejected\n", n,
           nflips, resealed_ok, nflips - (size_t)resealed_ok);
    unlink(tmp);
    free(img);
    free(mut);
}

/* The in-memory reader agrees with the file reader; a config claiming 2^24 layers with a tensor count
 * to match (resealed) is refused from the size of the llm tensors section, before a 16 GB table is
 * allocated (found by fuzz/fuzz_llm_engine.c). */
static void test_buffer_and_huge_counts(const char *engine) {
    size_t n;
    uint8_t *img = read_all(engine, &n);
    kiln_llm_engine_info a, b;
    CHECK(kiln_llm_engine_read_info(engine, &a) == KILN_OK);
    CHECK(kiln_llm_engine_buffer_read(img, n, "image", &b, NULL) == KILN_OK);
    CHECK(a.n_tensors == b.n_tensors && a.weight_bytes == b.weight_bytes && !memcmp(&a.cfg, &b.cfg, sizeof a.cfg));
    kiln_llm_engine_info_free(&a);
    kiln_llm_engine_info_free(&b);
    const uint8_t *cfg_entry = img + KILN_EH_SECTIONS, *table_entry = img + KILN_EH_SECTIONS + 2 * KILN_ES_SIZE;
    CHECK(kiln_le32(cfg_entry + KILN_ES_ID) == KILN_SECTION_LLM_CONFIG &&
          kiln_le32(table_entry + KILN_ES_ID) == KILN_SECTION_LLM_TENSORS);
    uint8_t *cfg = img + kiln_le64(cfg_entry + KILN_ES_OFFSET), *table = img + kiln_le64(table_entry + KILN_ES_OFFSET);
    const size_t n_layer_at = 7 * 4; /* after u32 arch and the six family words (docs/engine-format.md) */
    uint32_t layers = kiln_le32(cfg + n_layer_at), count = kiln_le32(table), per_layer = (count - 4) / layers; /* GPT-2, tied */
    kiln_put_le32(cfg + n_layer_at, 1u << 24);
    kiln_put_le32(table, 4 + per_layer * (1u << 24));
    kiln_engine_reseal(img, n);
    kiln_status s = kiln_llm_engine_buffer_read(img, n, "image", &b, NULL);
    CHECK(s == KILN_ERR_PARSE && strstr(kiln_last_error(), "too short for the config's 16777216 layers"));
    char tmp[128];
    snprintf(tmp, sizeof tmp, "%s/huge.kiln", dir);
    CHECK(load_image(img, n, tmp) == KILN_ERR_PARSE && strstr(kiln_last_error(), "16777216 layers"));
    unlink(tmp);
    free(img);
}

/* Readers refuse the other kind; the no-tokenizer engine says so. */
static void test_kinds(const char *llm_engine) {
    kiln_graph *g = NULL;
    kiln_status s = kiln_engine_file_read(llm_engine, NULL, &g, NULL);
    CHECK(s == KILN_ERR_ENGINE_MISMATCH && strstr(kiln_last_error(), "an LLM engine") &&
          strstr(kiln_last_error(), "kiln generate"));
    kiln_engine_kind kind;
    CHECK(kiln_engine_file_kind(llm_engine, &kind) == KILN_OK && kind == KILN_ENGINE_KIND_LLM);
    char onnx[128];
    snprintf(onnx, sizeof onnx, "%s/graph.kiln", dir);
    kiln_graph *empty = kiln_graph_create();
    kiln_engine_meta meta = {0};
    snprintf(meta.target, sizeof meta.target, "cpu");
    CHECK(kiln_engine_file_write(empty, &meta, onnx) == KILN_OK);
    kiln_graph_free(empty);
    kiln_llm_engine_info info;
    s = kiln_llm_engine_read_info(onnx, &info);
    CHECK(s == KILN_ERR_ENGINE_MISMATCH && strstr(kiln_last_error(), "not an LLM engine"));
    CHECK(kiln_engine_file_kind(onnx, &kind) == KILN_OK && kind == KILN_ENGINE_KIND_GRAPH);
    unlink(onnx);

    CHECK(kiln_llm_engine_read_info(llm_engine, &info) == KILN_OK);
    CHECK(info.n_gen_eos == 1 && info.gen_eos[0] == 3 && info.cfg.n_eos == 2 && info.cfg.eos_ids[1] == 2);
    CHECK(info.tokenizer_bytes == 0 && info.n_tensors > 0 && info.meta.precision == KILN_PRECISION_FP32);
    kiln_llm_engine_info_free(&info);
    kiln_llm_model *m = NULL;
    kiln_tokenizer *tok = NULL;
    s = kiln_llm_engine_load(llm_engine, NULL, &m, &tok);
    CHECK(s == KILN_ERR_INVALID_ARGUMENT && strstr(kiln_last_error(), "holds no tokenizer") && !m && !tok);
    kiln_llm_bundle b;
    CHECK(kiln_llm_bundle_open(llm_engine, false, false, &b) == KILN_OK && b.from_engine && b.n_gen_eos == 1 && b.n_params > 0);
    kiln_llm_bundle_free(&b);
}

int main(int argc, char **argv) {
    snprintf(dir, sizeof dir, "/tmp/kiln-test-llm-engine-XXXXXX");
    CHECK(mkdtemp(dir) != NULL);
    char gpt2[128], llama[128], llamat[128], e32[128], e16[128], ebf[128], ell[128], e8[128], e8e[128], ell8[128],
        ew8[128], elw8[128], e4[128], ell4[128], ef8[128], ellf8[128], calib[128];
    snprintf(gpt2, sizeof gpt2, "%s/gpt2", dir);
    snprintf(llama, sizeof llama, "%s/llama", dir);
    snprintf(llamat, sizeof llamat, "%s/llama-tok", dir);
    CHECK(mkdir(gpt2, 0700) == 0 && mkdir(llama, 0700) == 0 && mkdir(llamat, 0700) == 0);
    make_gpt2(gpt2);
    make_llama(llama);
    make_llama(llamat);
    add_letter_tokenizer(llamat);
    snprintf(calib, sizeof calib, "%s/calib.txt", dir);
    write_file(calib, "abcdefghijklmnopponmlkjihgfedcbaaeimbfjncgkodhlp", 48);
    snprintf(e32, sizeof e32, "%s/gpt2-32.kiln", dir);
    snprintf(e16, sizeof e16, "%s/gpt2-16.kiln", dir);
    snprintf(ebf, sizeof ebf, "%s/gpt2-bf16.kiln", dir);
    snprintf(ell, sizeof ell, "%s/llama.kiln", dir);
    snprintf(e8, sizeof e8, "%s/gpt2-int8.kiln", dir);
    snprintf(e8e, sizeof e8e, "%s/gpt2-int8-embed.kiln", dir);
    snprintf(ell8, sizeof ell8, "%s/llama-int8.kiln", dir);
    snprintf(ew8, sizeof ew8, "%s/gpt2-w8a8.kiln", dir);
    snprintf(elw8, sizeof elw8, "%s/llama-w8a8.kiln", dir);
    snprintf(e4, sizeof e4, "%s/gpt2-int4.kiln", dir);
    snprintf(ell4, sizeof ell4, "%s/llama-int4.kiln", dir);
    snprintf(ef8, sizeof ef8, "%s/gpt2-fp8.kiln", dir);
    snprintf(ellf8, sizeof ellf8, "%s/llama-fp8.kiln", dir);
    printf("logits, engine vs checkpoint:\n");
    check_engine_logits(gpt2, -1, e32, 0, 6);
    check_engine_logits(gpt2, KILN_PRECISION_FP16, e16, 2e-3, 6);
    check_engine_logits(gpt2, KILN_PRECISION_BF16, ebf, 2e-2, 6);
    check_engine_logits(llama, KILN_PRECISION_FP32, ell, 0, 12);
    check_int8_engine(gpt2, false, e8, 3e-2, 6);
    check_int8_engine(gpt2, true, e8e, 3e-2, 6);
    check_int8_engine(llama, false, ell8, 3e-2, 12);
    check_smoothing(gpt2, 6);
    check_smoothing(llama, 12);
    check_w8a8_engine(gpt2, ew8, 1e-2, 6);
    check_w8a8_engine(llama, elw8, 1e-2, 12);
    check_int4_engine(gpt2, e4, 0.15, 6);
    check_int4_engine(llama, ell4, 0.15, 12);
    check_fp8_engine(gpt2, NULL, ef8, 0.1, 6);
    check_fp8_engine(llamat, calib, ellf8, 0.1, 12);
    if (argc > 1) {
        char kjv[128];
        snprintf(kjv, sizeof kjv, "%s/kjv.kiln", dir);
        check_engine_logits(argv[1], KILN_PRECISION_FP32, kjv, 0, 8);
        unlink(kjv);
    }
    printf("engine kinds:\n");
    test_kinds(e32);
    test_buffer_and_huge_counts(e32);
    printf("corruption (%s):\n", e32);
    test_corruption(e32);
    printf("corruption (%s):\n", ell);
    test_corruption(ell);
    printf("corruption (%s):\n", ell8);
    test_corruption(ell8);
    printf("corruption (%s):\n", elw8);
    test_corruption(elw8);
    printf("corruption (%s):\n", ell4);
    test_corruption(ell4);
    printf("corruption (%s):\n", ellf8);
    test_corruption(ellf8);
    const char *files[] = {e32, e16, ebf, ell, e8, e8e, ell8, ew8, elw8, e4, ell4, ef8, ellf8};
    for (int i = 0; i < 13; i++) unlink(files[i]);
    char cmd[256];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    CHECK(system(cmd) == 0);
    if (failures) fprintf(stderr, "%d check(s) failed\n", failures);
    else printf("test_llm_engine: all checks passed\n");
    return failures ? 1 : 0;
}
