/* test_llm_deferred.c — deferred loading (src/llm/llm_deferred.c): tiny GPT-2 (F32 and F16, Conv1D
 * matrices transposed) and Llama (BF16, q/k/v and gate/up stacked) checkpoints written here, their
 * tensors in reverse name order so that stacked pieces are not adjacent in the file; for every weight
 * array, kiln_llm_model_read16 of the deferred model gives the same bits as of the FP32 model, whole
 * and in uneven pieces that cross tensor boundaries; a BF16 tensor read as BF16 is its file's bytes;
 * the stored dtype and kiln_llm_bundle_open's precision follow the checkpoint; engines of them in fp32,
 * fp16 and bf16 loaded for a device read as their FP32 models do; the threaded read equals
 * the plain one; the move of the weights into huge pages leaves a deferred model alone (and the FP32
 * model, moved, still reads the same); a missing or misshapen tensor fails as in the FP32 load,
 * without leaks. */
#include "core/half.h"
#include "core/status.h"
#include "llm/llm_deferred.h"
#include "llm/llm_engine_internal.h"

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

typedef struct tens {
    char name[96];
    int64_t dims[2]; /* dims[1] == 0: a vector */
} tens;

static void add(tens *t, int *n, const char *name, int64_t a, int64_t b) {
    snprintf(t[*n].name, sizeof t[*n].name, "%s", name);
    t[*n].dims[0] = a;
    t[*n].dims[1] = b;
    ++*n;
}

static void write_text(const char *dir, const char *name, const char *text) {
    char path[256];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    CHECK(f && fwrite(text, 1, strlen(text), f) == strlen(text));
    if (f) fclose(f);
}

/* dir/model.safetensors: t[0..n) in reverse order, every value pseudo-random in dtype ("F32", "F16",
 * "BF16"), or with `skip` left out. */
static void write_safetensors(const char *dir, const tens *t, int n, const char *dtype, const char *skip) {
    const size_t es = strcmp(dtype, "F32") ? 2 : 4;
    char *hdr = malloc(1 << 16);
    size_t hl = (size_t)sprintf(hdr, "{"), off = 0;
    for (int i = n - 1; i >= 0; i--) {
        if (skip && !strcmp(t[i].name, skip)) continue;
        size_t numel = (size_t)t[i].dims[0] * (size_t)(t[i].dims[1] ? t[i].dims[1] : 1);
        hl += (size_t)sprintf(hdr + hl, "%s\"%s\":{\"dtype\":\"%s\",\"shape\":[%lld", off ? "," : "", t[i].name, dtype,
                              (long long)t[i].dims[0]);
        if (t[i].dims[1]) hl += (size_t)sprintf(hdr + hl, ",%lld", (long long)t[i].dims[1]);
        hl += (size_t)sprintf(hdr + hl, "],\"data_offsets\":[%zu,%zu]}", off, off + es * numel);
        off += es * numel;
    }
    hl += (size_t)sprintf(hdr + hl, "}");
    while (hl % 8) hdr[hl++] = ' ';
    unsigned char *img = malloc(8 + hl + off);
    for (int i = 0; i < 8; i++) img[i] = (unsigned char)((uint64_t)hl >> (8 * i));
    memcpy(img + 8, hdr, hl);
    uint32_t x = 777;
    for (size_t i = 0; i < off / es; i++) {
        x = x * 1664525u + 1013904223u;
        float v = ((float)(x >> 8) / 16777216.0f - 0.5f) * 0.8f;
        uint16_t h = !strcmp(dtype, "F16") ? kiln_f32_to_f16(v) : kiln_f32_to_bf16(v);
        memcpy(img + 8 + hl + es * i, es == 4 ? (const void *)&v : (const void *)&h, es);
    }
    char path[256];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    FILE *f = fopen(path, "wb");
    CHECK(f && fwrite(img, 1, 8 + hl + off, f) == 8 + hl + off);
    if (f) fclose(f);
    free(img);
    free(hdr);
}

/* A 2-layer GPT-2: vocab 16, d 8, 2 heads, 16 positions. */
static void make_gpt2(const char *dir, const char *dtype, const char *skip) {
    tens t[64];
    int n = 0;
    add(t, &n, "wte.weight", 16, 8);
    add(t, &n, "wpe.weight", 16, 8);
    for (int l = 0; l < 2; l++) {
        char nm[96];
#define L(s, a, b) (snprintf(nm, sizeof nm, "h.%d.%s", l, s), add(t, &n, nm, a, b))
        L("ln_1.weight", 8, 0); L("ln_1.bias", 8, 0); L("attn.c_attn.weight", 8, 24); L("attn.c_attn.bias", 24, 0);
        L("attn.c_proj.weight", 8, 8); L("attn.c_proj.bias", 8, 0); L("ln_2.weight", 8, 0); L("ln_2.bias", 8, 0);
        L("mlp.c_fc.weight", 8, 32); L("mlp.c_fc.bias", 32, 0); L("mlp.c_proj.weight", 32, 8); L("mlp.c_proj.bias", 8, 0);
#undef L
    }
    add(t, &n, "ln_f.weight", 8, 0);
    add(t, &n, "ln_f.bias", 8, 0);
    write_safetensors(dir, t, n, dtype, skip);
    write_text(dir, "config.json", "{\"model_type\":\"gpt2\",\"vocab_size\":16,\"n_layer\":2,\"n_embd\":8,\"n_head\":2,"
                                   "\"n_positions\":16}");
}

/* A 2-layer Llama: vocab `vocab`, d 16, 2 heads of 8, 1 kv head, d_ff 20, untied lm_head. */
static void make_llama_vocab(const char *dir, const char *dtype, const char *skip, int vocab) {
    tens t[32];
    int n = 0;
    add(t, &n, "model.embed_tokens.weight", vocab, 16);
    for (int l = 0; l < 2; l++) {
        char nm[96];
#define L(s, a, b) (snprintf(nm, sizeof nm, "model.layers.%d.%s", l, s), add(t, &n, nm, a, b))
        L("input_layernorm.weight", 16, 0); L("self_attn.q_proj.weight", 16, 16); L("self_attn.k_proj.weight", 8, 16);
        L("self_attn.v_proj.weight", 8, 16); L("self_attn.o_proj.weight", 16, 16);
        L("post_attention_layernorm.weight", 16, 0); L("mlp.gate_proj.weight", 20, 16);
        L("mlp.up_proj.weight", 20, 16); L("mlp.down_proj.weight", 16, 20);
#undef L
    }
    add(t, &n, "model.norm.weight", 16, 0);
    add(t, &n, "lm_head.weight", vocab, 16);
    write_safetensors(dir, t, n, dtype, skip);
    char cfg[512];
    snprintf(cfg, sizeof cfg, "{\"model_type\":\"llama\",\"vocab_size\":%d,\"hidden_size\":16,\"intermediate_size\":20,"
             "\"num_hidden_layers\":2,\"num_attention_heads\":2,\"num_key_value_heads\":1,"
             "\"max_position_embeddings\":32}", vocab);
    write_text(dir, "config.json", cfg);
}

static void make_llama(const char *dir, const char *dtype, const char *skip) { make_llama_vocab(dir, dtype, skip, 24); }

/* kiln_llm_model_read16_threads over an embedding of 3 Mi values (3 threads' parts) gives
 * kiln_llm_model_read16's values, for the deferred and the FP32 model. */
static void check_threads(const char *dir) {
    make_llama_vocab(dir, "BF16", NULL, 3 << 16);
    kiln_llm_model *models[2] = {NULL, NULL};
    CHECK(kiln_llm_model_load_hf_deferred(dir, &models[0]) == KILN_OK);
    CHECK(kiln_llm_model_load_hf(dir, &models[1]) == KILN_OK);
    const size_t numel = (size_t)3 << 20;
    uint16_t *a = malloc(numel * 2), *b = malloc(numel * 2);
    for (int k = 0; k < 2 && models[0] && models[1]; k++) {
        kiln_llm_weight w[64];
        kiln_llm_weights_list(models[k], w);
        CHECK(!strcmp(w[0].name, "tok_emb") && (size_t)(w[0].dims[0] * w[0].dims[1]) == numel);
        CHECK(kiln_llm_model_read16(models[k], *w[0].slot, numel, KILN_BF16, a) == KILN_OK);
        memset(b, 0, numel * 2);
        CHECK(kiln_llm_model_read16_threads(models[k], *w[0].slot, numel, KILN_BF16, b, 4) == KILN_OK);
        CHECK(!memcmp(a, b, numel * 2));
    }
    free(a);
    free(b);
    kiln_llm_model_free(models[0]);
    kiln_llm_model_free(models[1]);
}

/* Every weight array of the deferred model reads, in both 16-bit dtypes, as the FP32 model's does. */
static void check_same_weights(kiln_llm_model *full, kiln_llm_model *def) {
    int n = kiln_llm_weights_list(full, NULL);
    kiln_llm_weight *wf = calloc((size_t)n, sizeof *wf), *wd = calloc((size_t)n, sizeof *wd);
    CHECK(kiln_llm_weights_list(def, NULL) == n);
    kiln_llm_weights_list(full, wf);
    kiln_llm_weights_list(def, wd);
    const kiln_dtype dts[] = {KILN_F16, KILN_BF16};
    for (int i = 0; i < n; i++) {
        size_t numel = (size_t)wf[i].dims[0] * (size_t)(wf[i].ndim == 2 ? wf[i].dims[1] : 1);
        uint16_t *a = malloc(numel * 2), *b = malloc(numel * 2);
        for (int k = 0; k < 2; k++) {
            CHECK(kiln_llm_model_read16(full, *wf[i].slot, numel, dts[k], a) == KILN_OK);
            memset(b, 0xff, numel * 2);
            size_t done = 0, step = 7; /* uneven pieces: they cross q/k/v and gate/up boundaries */
            while (done < numel) {
                size_t take = numel - done < step ? numel - done : step;
                CHECK(kiln_llm_model_read16(def, *wd[i].slot + done, take, dts[k], b + done) == KILN_OK);
                done += take;
                step = step * 3 % 101 + 1;
            }
            if (memcmp(a, b, numel * 2)) {
                fprintf(stderr, "weight %s differs when read as %s\n", wf[i].name, kiln_dtype_name(dts[k]));
                failures++;
            }
        }
        free(a);
        free(b);
    }
    free(wf);
    free(wd);
}

static void check_model(const char *dir, kiln_dtype stored) {
    kiln_llm_model *full = NULL, *def = NULL;
    CHECK(kiln_llm_model_load_hf(dir, &full) == KILN_OK);
    CHECK(kiln_llm_model_load_hf_deferred(dir, &def) == KILN_OK);
    if (full && def) {
        CHECK(kiln_llm_model_stored_dtype(def) == stored);
        CHECK(kiln_llm_model_stored_dtype(full) == KILN_F32);
        /* the CPU forward's move into huge pages: the FP32 model's arrays move, the deferred model's
         * reservation stays as it is */
        const float *def_qkv = def->layers[0].qkv_w;
        kiln_llm_model_weights_to_hugepages(full);
        kiln_llm_model_weights_to_hugepages(def);
        CHECK(def->arena == NULL && def->layers[0].qkv_w == def_qkv);
        check_same_weights(full, def);
    }
    kiln_llm_model_free(full);
    kiln_llm_model_free(def);
}

/* A BF16 tensor read as BF16 is the file's bytes: the embedding's first row against the mapping. */
static void check_raw_bytes(const char *dir) {
    kiln_hf_checkpoint *ck = NULL;
    kiln_llm_model *def = NULL;
    CHECK(kiln_hf_checkpoint_open(dir, &ck) == KILN_OK);
    CHECK(kiln_llm_model_load_hf_deferred(dir, &def) == KILN_OK);
    const kiln_st_tensor *t = ck ? kiln_hf_checkpoint_find(ck, "model.embed_tokens.weight") : NULL;
    CHECK(t && t->dtype == KILN_BF16);
    if (t && def) {
        const kiln_llm_weight *emb = NULL;
        kiln_llm_weight w[64];
        CHECK(kiln_llm_weights_list(def, NULL) <= 64);
        kiln_llm_weights_list(def, w);
        for (int i = 0; !emb && i < 64; i++)
            if (!strcmp(w[i].name, "tok_emb")) emb = &w[i];
        uint16_t got[16];
        CHECK(emb && kiln_llm_model_read16(def, *emb->slot, 16, KILN_BF16, got) == KILN_OK && !memcmp(got, t->data, 32));
    }
    kiln_hf_checkpoint_free(ck);
    kiln_llm_model_free(def);
}

/* Engines of checkpoint ck (stored in ck_dtype) in fp32, fp16 and bf16 (in dir): loaded for a device,
 * every weight reads as from the engine's FP32 model; the engine in ck_dtype's as from the checkpoint
 * itself, deferred too; and kiln_llm_bundle_open takes the bf16 one with its precision. */
static void check_engines(const char *ck, kiln_dtype ck_dtype, const char *dir) {
    static const kiln_precision precs[] = {KILN_PRECISION_FP32, KILN_PRECISION_FP16, KILN_PRECISION_BF16};
    static const kiln_dtype stored[] = {KILN_F32, KILN_F16, KILN_BF16};
    char path[256];
    for (int i = 0; i < 3; i++) {
        snprintf(path, sizeof path, "%s/e%d.kiln", dir, i);
        kiln_llm_build_options o = {.precision = (int)precs[i]};
        CHECK(kiln_llm_engine_build(ck, &o, path, NULL) == KILN_OK);
        kiln_llm_model *full = NULL, *def = NULL, *ckdef = NULL;
        kiln_llm_engine_info info;
        CHECK(kiln_llm_model_load_engine(path, &full) == KILN_OK);
        CHECK(kiln_llm_engine_load_for_device(path, &info, &def, NULL) == KILN_OK);
        kiln_llm_engine_info_free(&info);
        if (full && def) {
            CHECK(kiln_llm_model_stored_dtype(def) == stored[i]);
            check_same_weights(full, def);
        }
        if (stored[i] == ck_dtype && def) {
            CHECK(kiln_llm_model_load_hf_deferred(ck, &ckdef) == KILN_OK);
            if (ckdef) check_same_weights(ckdef, def);
        }
        kiln_llm_model_free(full);
        kiln_llm_model_free(def);
        kiln_llm_model_free(ckdef);
    }
    kiln_llm_bundle b;
    CHECK(kiln_llm_bundle_open(path, false, true, &b) == KILN_OK && b.from_engine && b.weights == KILN_PRECISION_BF16);
    kiln_llm_bundle_free(&b);
}

/* The deferred load fails where the FP32 one does, with the same status, naming `what`. */
static void check_refused(const char *dir, const char *what) {
    kiln_llm_model *m = NULL;
    kiln_status a = kiln_llm_model_load_hf(dir, &m);
    CHECK(a != KILN_OK && !m);
    kiln_status b = kiln_llm_model_load_hf_deferred(dir, &m);
    CHECK(b == a && !m && strstr(kiln_last_error(), what));
}

int main(void) {
    char dir[64];
    snprintf(dir, sizeof dir, "/tmp/kiln_test_deferred_XXXXXX");
    if (!mkdtemp(dir)) return 1;
    char ck[128];
    const struct { void (*make)(const char *, const char *, const char *); const char *dtype; kiln_dtype stored; } cases[] = {
        {make_gpt2, "F32", KILN_F32}, {make_gpt2, "F16", KILN_F16}, {make_llama, "BF16", KILN_BF16}, {make_llama, "F16", KILN_F16}};
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        snprintf(ck, sizeof ck, "%s/c%zu", dir, i);
        mkdir(ck, 0700);
        cases[i].make(ck, cases[i].dtype, NULL);
        check_model(ck, cases[i].stored);
    }
    snprintf(ck, sizeof ck, "%s/c2", dir); /* the BF16 Llama */
    check_raw_bytes(ck);
    check_engines(ck, KILN_BF16, dir);
    snprintf(ck, sizeof ck, "%s/c1", dir); /* the F16 GPT-2 */
    check_engines(ck, KILN_F16, dir);
    snprintf(ck, sizeof ck, "%s/c2", dir);
    kiln_llm_bundle b;
    CHECK(kiln_llm_bundle_open(ck, false, true, &b) == KILN_OK && b.weights == KILN_PRECISION_BF16 && b.n_params > 0);
    int64_t params = b.n_params;
    kiln_llm_bundle_free(&b);
    CHECK(kiln_llm_bundle_open(ck, false, false, &b) == KILN_OK && b.weights == KILN_PRECISION_FP32 &&
          b.n_params == params);
    kiln_llm_bundle_free(&b);

    snprintf(ck, sizeof ck, "%s/wide", dir);
    mkdir(ck, 0700);
    check_threads(ck);

    snprintf(ck, sizeof ck, "%s/missing", dir);
    mkdir(ck, 0700);
    make_llama(ck, "BF16", "model.layers.1.self_attn.q_proj.weight");
    check_refused(ck, "model.layers.1.self_attn.q_proj.weight");
    snprintf(ck, sizeof ck, "%s/misshapen", dir);
    mkdir(ck, 0700);
    make_llama(ck, "BF16", NULL);
    write_text(ck, "config.json", "{\"model_type\":\"llama\",\"vocab_size\":24,\"hidden_size\":16,\"intermediate_size\":24,"
                                  "\"num_hidden_layers\":2,\"num_attention_heads\":2,\"num_key_value_heads\":1,"
                                  "\"max_position_embeddings\":32}"); /* the file's gate_proj is [20, 16] */
    check_refused(ck, "gate_proj");

    char cmd[160];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    CHECK(system(cmd) == 0);
    if (failures) fprintf(stderr, "test_llm_deferred: %d failure(s)\n", failures);
    else printf("test_llm_deferred: ok\n");
    return failures ? 1 : 0;
}
