/* llm_model.c — kiln_llm_model_load_hf: a checkpoint's weights, each checked for presence and shape,
 * converted to FP32 and laid out as llm_internal.h says: GPT-2's Conv1D matrices transposed to
 * [out, in]; the q/k/v and gate/up projections of the Llama-like families stacked for one product
 * each (Phi-3 stores them so already), with Qwen2's q/k/v biases stacked alike; kiln_llm_model_load_hf_deferred: the same layout
 * with the matrices left in the mapped checkpoint (llm_deferred.h). */
#include "llm/llm_internal.h"

#include "core/status.h"
#include "core/file.h"
#include "hf/checkpoint.h"
#include "llm/llm_deferred.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

typedef struct loader {
    const kiln_hf_checkpoint *ck;
    kiln_llm_model *m;
    llm_deferred *def; /* deferred loading: matrices are placed, not converted; NULL otherwise */
} loader;

/* "[a, b]" of a checkpoint tensor's shape into buf. */
static const char *shape_str(char *buf, size_t cap, int ndim, const int64_t *dims) {
    size_t n = (size_t)snprintf(buf, cap, "[");
    for (int i = 0; i < ndim && n < cap; i++) n += (size_t)snprintf(buf + n, cap - n, i ? ", %lld" : "%lld", (long long)dims[i]);
    if (n < cap) snprintf(buf + n, cap - n, "]");
    return buf;
}

/* Finds name (rows x cols, cols == 0 for a vector) and checks its shape. */
static kiln_status find(const loader *L, const char *name, int64_t rows, int64_t cols, const kiln_st_tensor **out) {
    const kiln_st_tensor *t = kiln_hf_checkpoint_find(L->ck, name);
    if (!t) return kiln_error(KILN_ERR_PARSE, "%s: tensor '%s' is missing", kiln_hf_checkpoint_dir(L->ck), name);
    int ndim = cols ? 2 : 1;
    int64_t want[2] = {rows, cols};
    if (t->ndim != ndim || t->dims[0] != rows || (cols && t->dims[1] != cols)) {
        char a[64], b[64];
        return kiln_error(KILN_ERR_SHAPE, "%s: tensor '%s': expected shape %s, found %s", kiln_hf_checkpoint_dir(L->ck),
                          t->name, shape_str(a, sizeof a, ndim, want), shape_str(b, sizeof b, t->ndim, t->dims));
    }
    *out = t;
    return KILN_OK;
}

/* t converted to FP32 at dst; a failure names the checkpoint. */
static kiln_status convert(const loader *L, const kiln_st_tensor *t, float *dst) {
    kiln_status s = kiln_hf_tensor_to_f32(t, dst);
    return s == KILN_OK ? s : kiln_error_prefix(s, "%s", kiln_hf_checkpoint_dir(L->ck));
}

/* Checks that matrix `name` is in the checkpoint with the shape config.json implies (load_mat_into's
 * layouts), before anything is allocated for it: the sizes come from config.json, and only a tensor
 * the file holds bounds them. */
static kiln_status check_mat(const loader *L, const char *name, int64_t rows, int64_t cols, bool conv1d) {
    const kiln_st_tensor *t;
    return find(L, name, conv1d ? cols : rows, conv1d ? rows : cols, &t);
}

/* malloc'd n floats into *out. */
static kiln_status alloc_f32(size_t n, float **out) {
    *out = malloc(n * sizeof(float));
    return *out ? KILN_OK : kiln_error(KILN_ERR_OUT_OF_MEMORY, "out of memory (%zu floats of weights)", n);
}

/* A matrix of n values into *out: FP32 memory, or slots of the reservation when deferred. */
static kiln_status alloc_mat(const loader *L, size_t n, float **out) {
    return L->def ? llm_deferred_reserve(L->def, n, out) : alloc_f32(n, out);
}

/* Loads vector `name` of n elements into a new array. */
static kiln_status load_vec(const loader *L, const char *name, int64_t n, float **out) {
    const kiln_st_tensor *t;
    KILN_TRY(find(L, name, n, 0, &t));
    KILN_TRY(alloc_f32((size_t)n, out));
    return convert(L, t, *out);
}

/* Loads vector `name` of n elements into dst. */
static kiln_status load_vec_into(const loader *L, const char *name, int64_t n, float *dst) {
    const kiln_st_tensor *t;
    KILN_TRY(find(L, name, n, 0, &t));
    return convert(L, t, dst);
}

/* Loads matrix `name` as [rows, cols] into dst: stored [rows, cols] (nn.Linear), or [cols, rows] and
 * transposed when conv1d (GPT-2's Conv1D). */
static kiln_status load_mat_into(const loader *L, const char *name, int64_t rows, int64_t cols, bool conv1d, float *dst) {
    const kiln_st_tensor *t;
    KILN_TRY(find(L, name, conv1d ? cols : rows, conv1d ? rows : cols, &t));
    if (llm_deferred_owns(L->def, dst)) return llm_deferred_place(L->def, dst, t, conv1d);
    if (!conv1d) return convert(L, t, dst);
    float *tmp;
    KILN_TRY(alloc_f32((size_t)(rows * cols), &tmp));
    kiln_status s = convert(L, t, tmp);
    for (int64_t i = 0; s == KILN_OK && i < cols; i++)
        for (int64_t j = 0; j < rows; j++) dst[j * cols + i] = tmp[i * rows + j];
    free(tmp);
    return s;
}

static kiln_status load_mat(const loader *L, const char *name, int64_t rows, int64_t cols, bool conv1d, float **out) {
    KILN_TRY(check_mat(L, name, rows, cols, conv1d));
    KILN_TRY(alloc_mat(L, (size_t)(rows * cols), out));
    return load_mat_into(L, name, rows, cols, conv1d, *out);
}

static kiln_status load_gpt2_layer(const loader *L, int i, kiln_llm_layer *y) {
    const kiln_llm_config *c = &L->m->cfg;
    const int64_t d = c->d_model, ff = c->d_ff;
    char n[128];
#define NAME(suffix) (snprintf(n, sizeof n, "transformer.h.%d.%s", i, suffix), n)
    KILN_TRY(load_vec(L, NAME("ln_1.weight"), d, &y->norm1_w));
    KILN_TRY(load_vec(L, NAME("ln_1.bias"), d, &y->norm1_b));
    KILN_TRY(load_mat(L, NAME("attn.c_attn.weight"), 3 * d, d, true, &y->qkv_w));
    KILN_TRY(load_vec(L, NAME("attn.c_attn.bias"), 3 * d, &y->qkv_b));
    KILN_TRY(load_mat(L, NAME("attn.c_proj.weight"), d, d, true, &y->o_w));
    KILN_TRY(load_vec(L, NAME("attn.c_proj.bias"), d, &y->o_b));
    KILN_TRY(load_vec(L, NAME("ln_2.weight"), d, &y->norm2_w));
    KILN_TRY(load_vec(L, NAME("ln_2.bias"), d, &y->norm2_b));
    KILN_TRY(load_mat(L, NAME("mlp.c_fc.weight"), ff, d, true, &y->up_w));
    KILN_TRY(load_vec(L, NAME("mlp.c_fc.bias"), ff, &y->up_b));
    KILN_TRY(load_mat(L, NAME("mlp.c_proj.weight"), d, ff, true, &y->down_w));
    return load_vec(L, NAME("mlp.c_proj.bias"), d, &y->down_b);
#undef NAME
}

/* The q/k/v projections (and Qwen2's biases) stacked into y->qkv_w (y->qkv_b): Phi-3's fused
 * qkv_proj as it is, the others' q_proj, k_proj and v_proj one after the other. */
static kiln_status load_llama_qkv(const loader *L, int i, kiln_llm_layer *y) {
    const kiln_llm_config *c = &L->m->cfg;
    const int64_t d = c->d_model, qd = (int64_t)c->n_head * c->head_dim, kvd = (int64_t)c->n_kv_head * c->head_dim;
    char n[128];
#define NAME(suffix) (snprintf(n, sizeof n, "model.layers.%d.self_attn.%s", i, suffix), n)
    if (c->family == KILN_FAMILY_PHI3) return load_mat(L, NAME("qkv_proj.weight"), qd + 2 * kvd, d, false, &y->qkv_w);
    KILN_TRY(check_mat(L, NAME("q_proj.weight"), qd, d, false));
    KILN_TRY(check_mat(L, NAME("k_proj.weight"), kvd, d, false));
    KILN_TRY(check_mat(L, NAME("v_proj.weight"), kvd, d, false));
    KILN_TRY(alloc_mat(L, (size_t)((qd + 2 * kvd) * d), &y->qkv_w));
    KILN_TRY(load_mat_into(L, NAME("q_proj.weight"), qd, d, false, y->qkv_w));
    KILN_TRY(load_mat_into(L, NAME("k_proj.weight"), kvd, d, false, y->qkv_w + qd * d));
    KILN_TRY(load_mat_into(L, NAME("v_proj.weight"), kvd, d, false, y->qkv_w + (qd + kvd) * d));
    if (!c->qkv_bias) return KILN_OK;
    KILN_TRY(alloc_f32((size_t)(qd + 2 * kvd), &y->qkv_b));
    KILN_TRY(load_vec_into(L, NAME("q_proj.bias"), qd, y->qkv_b));
    KILN_TRY(load_vec_into(L, NAME("k_proj.bias"), kvd, y->qkv_b + qd));
    return load_vec_into(L, NAME("v_proj.bias"), kvd, y->qkv_b + qd + kvd);
#undef NAME
}

/* The gate and up projections stacked into y->up_w: Phi-3's fused gate_up_proj (gate rows first) as
 * it is, the others' gate_proj then up_proj. */
static kiln_status load_llama_gate_up(const loader *L, int i, kiln_llm_layer *y) {
    const kiln_llm_config *c = &L->m->cfg;
    const int64_t d = c->d_model, ff = c->d_ff;
    char n[128];
#define NAME(suffix) (snprintf(n, sizeof n, "model.layers.%d.mlp.%s", i, suffix), n)
    if (c->family == KILN_FAMILY_PHI3) return load_mat(L, NAME("gate_up_proj.weight"), 2 * ff, d, false, &y->up_w);
    KILN_TRY(check_mat(L, NAME("gate_proj.weight"), ff, d, false));
    KILN_TRY(check_mat(L, NAME("up_proj.weight"), ff, d, false));
    KILN_TRY(alloc_mat(L, (size_t)(2 * ff * d), &y->up_w));
    KILN_TRY(load_mat_into(L, NAME("gate_proj.weight"), ff, d, false, y->up_w));
    return load_mat_into(L, NAME("up_proj.weight"), ff, d, false, y->up_w + ff * d);
#undef NAME
}

static kiln_status load_llama_layer(const loader *L, int i, kiln_llm_layer *y) {
    const kiln_llm_config *c = &L->m->cfg;
    const int64_t d = c->d_model, ff = c->d_ff, qd = (int64_t)c->n_head * c->head_dim;
    char n[128];
#define NAME(suffix) (snprintf(n, sizeof n, "model.layers.%d.%s", i, suffix), n)
    KILN_TRY(load_vec(L, NAME("input_layernorm.weight"), d, &y->norm1_w));
    KILN_TRY(load_llama_qkv(L, i, y));
    KILN_TRY(load_mat(L, NAME("self_attn.o_proj.weight"), d, qd, false, &y->o_w));
    KILN_TRY(load_vec(L, NAME("post_attention_layernorm.weight"), d, &y->norm2_w));
    KILN_TRY(load_llama_gate_up(L, i, y));
    return load_mat(L, NAME("mlp.down_proj.weight"), d, ff, false, &y->down_w);
#undef NAME
}

static kiln_status load_weights(const loader *L) {
    kiln_llm_model *m = L->m;
    const kiln_llm_config *c = &m->cfg;
    const bool gpt2 = c->arch == KILN_LLM_GPT2;
    char last[128]; /* n_layer too is only config.json's word: its last layer must be in the file */
    snprintf(last, sizeof last, gpt2 ? "transformer.h.%d.ln_1.weight" : "model.layers.%d.input_layernorm.weight", c->n_layer - 1);
    const kiln_st_tensor *t;
    KILN_TRY(find(L, last, c->d_model, 0, &t));
    m->layers = calloc((size_t)c->n_layer, sizeof *m->layers);
    if (!m->layers) return kiln_error(KILN_ERR_OUT_OF_MEMORY, "out of memory");
    KILN_TRY(load_mat(L, gpt2 ? "transformer.wte.weight" : "model.embed_tokens.weight", c->vocab, c->d_model, false,
                      &m->tok_emb));
    if (gpt2) KILN_TRY(load_mat(L, "transformer.wpe.weight", c->max_pos, c->d_model, false, &m->pos_emb));
    for (int i = 0; i < c->n_layer; i++)
        KILN_TRY(gpt2 ? load_gpt2_layer(L, i, &m->layers[i]) : load_llama_layer(L, i, &m->layers[i]));
    KILN_TRY(load_vec(L, gpt2 ? "transformer.ln_f.weight" : "model.norm.weight", c->d_model, &m->norm_f_w));
    if (gpt2) KILN_TRY(load_vec(L, "transformer.ln_f.bias", c->d_model, &m->norm_f_b));
    if (c->tied_embeddings) {
        m->lm_head = m->tok_emb;
        return KILN_OK;
    }
    return load_mat(L, "lm_head.weight", c->vocab, c->d_model, false, &m->lm_head);
}

/* The model of checkpoint dir; deferred: its matrices stay in the mapping, which the model keeps. */
static kiln_status load_hf(const char *dir, bool deferred, kiln_llm_model **out) {
    *out = NULL;
    kiln_hf_checkpoint *ck;
    KILN_TRY(kiln_hf_checkpoint_open(dir, &ck));
    kiln_llm_model *m = calloc(1, sizeof *m);
    kiln_status s = m ? KILN_OK : kiln_error(KILN_ERR_OUT_OF_MEMORY, "out of memory");
    if (s == KILN_OK) {
        char what[4096];
        snprintf(what, sizeof what, "%s/config.json", dir);
        s = kiln_llm_config_parse(kiln_hf_checkpoint_config(ck), what, &m->cfg);
    }
    if (s == KILN_OK && deferred) {
        s = llm_deferred_create(ck, &m->deferred);
        ck = NULL;
    }
    if (s == KILN_OK) {
        loader L = {m->deferred ? llm_deferred_checkpoint(m->deferred) : ck, m, m->deferred};
        s = load_weights(&L);
    }
    kiln_hf_checkpoint_free(ck);
    if (s != KILN_OK) {
        kiln_llm_model_free(m);
        return s;
    }
    *out = m;
    return KILN_OK;
}

kiln_status kiln_llm_model_load_hf(const char *dir, kiln_llm_model **out) { return load_hf(dir, false, out); }

kiln_status kiln_llm_model_load_hf_deferred(const char *dir, kiln_llm_model **out) { return load_hf(dir, true, out); }

/* Frees one of m's arrays unless a deferred model's reservation holds it. */
static void free_array(const kiln_llm_model *m, float *p) {
    if (!llm_deferred_owns(m->deferred, p)) free(p);
}

void kiln_llm_model_free(kiln_llm_model *m) {
    if (!m) return;
    if (m->arena) munmap(m->arena, m->arena_bytes);
    free(m->q8); /* its matrices live in the mapping */
    if (m->mapping || m->arena) {
        if (m->mapping) kiln_file_map_free(m->mapping);
        free(m->layers);
        free(m);
        return;
    }
    for (int i = 0; m->layers && i < m->cfg.n_layer; i++) {
        kiln_llm_layer *y = &m->layers[i];
        float *all[] = {y->norm1_w, y->norm1_b, y->qkv_w, y->qkv_b, y->o_w,    y->o_b,
                        y->norm2_w, y->norm2_b, y->up_w,  y->up_b,  y->down_w, y->down_b};
        for (size_t j = 0; j < sizeof all / sizeof *all; j++) free_array(m, all[j]);
    }
    free(m->layers);
    if (m->lm_head != m->tok_emb) free_array(m, m->lm_head);
    free_array(m, m->tok_emb);
    free_array(m, m->pos_emb);
    free_array(m, m->norm_f_w);
    free_array(m, m->norm_f_b);
    llm_deferred_free(m->deferred);
    free(m);
}

const kiln_llm_config *kiln_llm_model_config(const kiln_llm_model *m) { return &m->cfg; }
