/* llm_random.c — kiln_llm_model_random: a model of any GPT-2 or Llama shape with reproducible random
 * weights (xorshift64*), laid out as llm_internal.h says, so the CPU forward and the GPU upload take
 * it like a loaded checkpoint. */
#include "llm/llm_random.h"

#include "core/status.h"
#include "llm/llm_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void kiln_llm_config_init(kiln_llm_config *c, kiln_llm_arch arch, int n_layer, int d_model, int n_head, int n_kv_head,
                          int d_ff, int vocab, int max_pos) {
    memset(c, 0, sizeof *c);
    c->arch = arch;
    c->family = arch == KILN_LLM_GPT2 ? KILN_FAMILY_GPT2 : KILN_FAMILY_LLAMA;
    c->n_layer = n_layer;
    c->d_model = d_model;
    c->n_head = n_head;
    c->n_kv_head = n_kv_head;
    c->head_dim = n_head > 0 ? d_model / n_head : 0;
    c->d_ff = d_ff;
    c->vocab = vocab;
    c->max_pos = max_pos;
    c->norm_eps = 1e-5f;
    c->rope_theta = 10000.0f;
    c->rope_scaling = KILN_ROPE_NONE;
    c->rope_factor = 1.0f;
    c->bos_id = c->eos_id = -1;
}

/* Uniform in [-1, 1) from a xorshift64* state. */
static float next_uniform(uint64_t *s) {
    *s ^= *s >> 12;
    *s ^= *s << 25;
    *s ^= *s >> 27;
    uint64_t r = *s * 0x2545F4914F6CDD1DULL;
    return (float)((double)(r >> 40) / (double)(1ULL << 23) - 1.0);
}

/* A new array of n values center + scale * uniform[-1, 1). */
static kiln_status random_array(size_t n, float center, float scale, uint64_t *rng, float **out) {
    *out = malloc(n * sizeof(float));
    if (!*out) return kiln_error(KILN_ERR_OUT_OF_MEMORY, "out of memory (%zu floats of random weights)", n);
    for (size_t i = 0; i < n; i++) (*out)[i] = center + scale * next_uniform(rng);
    return KILN_OK;
}

/* [rows, cols] with standard deviation 1/sqrt(cols) (uniform: half-width sqrt(3 / cols)). */
static kiln_status random_matrix(size_t rows, size_t cols, uint64_t *rng, float **out) {
    return random_array(rows * cols, 0.0f, sqrtf(3.0f / (float)cols), rng, out);
}

static kiln_status random_layer(const kiln_llm_config *c, uint64_t *rng, kiln_llm_layer *y) {
    const size_t d = (size_t)c->d_model, ff = (size_t)c->d_ff, qd = (size_t)c->n_head * c->head_dim,
                 kvd = (size_t)c->n_kv_head * c->head_dim;
    const bool gpt2 = c->arch == KILN_LLM_GPT2;
    const size_t up_rows = gpt2 ? ff : 2 * ff;
    KILN_TRY(random_array(d, 1.0f, 0.1f, rng, &y->norm1_w));
    KILN_TRY(random_array(d, 1.0f, 0.1f, rng, &y->norm2_w));
    KILN_TRY(random_matrix(qd + 2 * kvd, d, rng, &y->qkv_w));
    KILN_TRY(random_matrix(d, qd, rng, &y->o_w));
    KILN_TRY(random_matrix(up_rows, d, rng, &y->up_w));
    KILN_TRY(random_matrix(d, ff, rng, &y->down_w));
    if (c->qkv_bias) KILN_TRY(random_array(qd + 2 * kvd, 0.0f, 0.1f, rng, &y->qkv_b));
    if (!gpt2) return KILN_OK;
    KILN_TRY(random_array(d, 0.0f, 0.1f, rng, &y->norm1_b));
    KILN_TRY(random_array(d, 0.0f, 0.1f, rng, &y->norm2_b));
    KILN_TRY(random_array(qd + 2 * kvd, 0.0f, 0.1f, rng, &y->qkv_b));
    KILN_TRY(random_array(d, 0.0f, 0.1f, rng, &y->o_b));
    KILN_TRY(random_array(ff, 0.0f, 0.1f, rng, &y->up_b));
    return random_array(d, 0.0f, 0.1f, rng, &y->down_b);
}

static kiln_status check_config(const kiln_llm_config *c) {
    if ((c->arch != KILN_LLM_GPT2 && c->arch != KILN_LLM_LLAMA) || c->n_layer < 1 || c->d_model < 1 || c->n_head < 1 ||
        c->n_kv_head < 1 || c->head_dim < 2 || c->head_dim % 2 || c->d_ff < 1 || c->vocab < 1 || c->max_pos < 1 ||
        c->n_head % c->n_kv_head || (c->arch == KILN_LLM_GPT2 && c->n_kv_head != c->n_head))
        return kiln_error(KILN_ERR_INVALID_ARGUMENT,
                          "random model: invalid config (arch %d, n_layer %d, d_model %d, n_head %d, n_kv_head %d, "
                          "head_dim %d, d_ff %d, vocab %d, max_pos %d)", (int)c->arch, c->n_layer, c->d_model,
                          c->n_head, c->n_kv_head, c->head_dim, c->d_ff, c->vocab, c->max_pos);
    return KILN_OK;
}

static kiln_status random_weights(kiln_llm_model *m, uint64_t seed) {
    const kiln_llm_config *c = &m->cfg;
    const size_t d = (size_t)c->d_model;
    uint64_t rng = seed * 0x9E3779B97F4A7C15ULL + 0x632BE59BD9B4E019ULL;
    if (!rng) rng = 1;
    m->layers = calloc((size_t)c->n_layer, sizeof *m->layers);
    if (!m->layers) return kiln_error(KILN_ERR_OUT_OF_MEMORY, "out of memory");
    KILN_TRY(random_array((size_t)c->vocab * d, 0.0f, sqrtf(3.0f), &rng, &m->tok_emb));
    if (c->arch == KILN_LLM_GPT2) {
        KILN_TRY(random_array((size_t)c->max_pos * d, 0.0f, sqrtf(3.0f), &rng, &m->pos_emb));
        KILN_TRY(random_array(d, 0.0f, 0.1f, &rng, &m->norm_f_b));
    }
    for (int i = 0; i < c->n_layer; i++) KILN_TRY(random_layer(c, &rng, &m->layers[i]));
    KILN_TRY(random_array(d, 1.0f, 0.1f, &rng, &m->norm_f_w));
    if (c->tied_embeddings) {
        m->lm_head = m->tok_emb;
        return KILN_OK;
    }
    return random_matrix((size_t)c->vocab, d, &rng, &m->lm_head);
}

kiln_status kiln_llm_model_random(const kiln_llm_config *c, uint64_t seed, kiln_llm_model **out) {
    *out = NULL;
    KILN_TRY(check_config(c));
    kiln_llm_model *m = calloc(1, sizeof *m);
    if (!m) return kiln_error(KILN_ERR_OUT_OF_MEMORY, "out of memory");
    m->cfg = *c;
    kiln_status s = random_weights(m, seed);
    if (s != KILN_OK) {
        kiln_llm_model_free(m);
        return s;
    }
    *out = m;
    return KILN_OK;
}

int64_t kiln_llm_config_params(const kiln_llm_config *c) {
    const int64_t d = c->d_model, ff = c->d_ff, qd = (int64_t)c->n_head * c->head_dim,
                  kvd = (int64_t)c->n_kv_head * c->head_dim;
    const bool gpt2 = c->arch == KILN_LLM_GPT2;
    int64_t layer = 2 * d + (qd + 2 * kvd) * d + d * qd + (gpt2 ? ff : 2 * ff) * d + d * ff;
    if (gpt2) layer += 2 * d + (qd + 2 * kvd) + d + ff + d;
    else if (c->qkv_bias) layer += qd + 2 * kvd;
    int64_t n = (int64_t)c->vocab * d + (int64_t)c->n_layer * layer + d;
    if (gpt2) n += (int64_t)c->max_pos * d + d;
    if (!c->tied_embeddings) n += (int64_t)c->vocab * d;
    return n;
}

/* name, dtype, arch, n_layer, d_model, n_head, n_kv_head, d_ff, vocab, max_pos, tied, rope_theta, and
 * for the other families: family (with its features: Qwen2's q/k/v biases, Gemma's GeGLU and scaled
 * embeddings), head_dim (0: d_model / n_head) */
static const struct {
    const char *name;
    kiln_dtype dtype;
    kiln_llm_arch arch;
    int n_layer, d_model, n_head, n_kv_head, d_ff, vocab, max_pos;
    bool tied;
    float rope_theta;
    kiln_llm_family family;
    int head_dim;
} SHAPES[] = {
    {"gpt2", KILN_F16, KILN_LLM_GPT2, 12, 768, 12, 12, 3072, 50257, 1024, true, 10000.0f, 0, 0},
    {"gpt2-medium", KILN_F16, KILN_LLM_GPT2, 24, 1024, 16, 16, 4096, 50257, 1024, true, 10000.0f, 0, 0},
    {"gpt2-large", KILN_F16, KILN_LLM_GPT2, 36, 1280, 20, 20, 5120, 50257, 1024, true, 10000.0f, 0, 0},
    {"gpt2-xl", KILN_F16, KILN_LLM_GPT2, 48, 1600, 25, 25, 6400, 50257, 1024, true, 10000.0f, 0, 0},
    {"llama3-8b", KILN_BF16, KILN_LLM_LLAMA, 32, 4096, 32, 8, 14336, 128256, 8192, false, 500000.0f, 0, 0},
    {"tiny-gpt2", KILN_F16, KILN_LLM_GPT2, 2, 128, 2, 2, 512, 512, 1024, true, 10000.0f, 0, 0},
    {"tiny-llama", KILN_BF16, KILN_LLM_LLAMA, 2, 128, 2, 1, 384, 512, 1024, false, 10000.0f, 0, 0},
    {"qwen2.5-7b", KILN_BF16, KILN_LLM_LLAMA, 28, 3584, 28, 4, 18944, 152064, 32768, false, 1000000.0f,
     KILN_FAMILY_QWEN2, 0},
    {"gemma-7b", KILN_BF16, KILN_LLM_LLAMA, 28, 3072, 16, 16, 24576, 256000, 8192, true, 10000.0f, KILN_FAMILY_GEMMA,
     256},
    {"tiny-gemma", KILN_BF16, KILN_LLM_LLAMA, 2, 128, 2, 1, 384, 512, 1024, true, 10000.0f, KILN_FAMILY_GEMMA, 256},
};

const char *kiln_llm_shape_names(void) {
    return "gpt2, gpt2-medium, gpt2-large, gpt2-xl, llama3-8b, tiny-gpt2, tiny-llama, qwen2.5-7b, gemma-7b, tiny-gemma";
}

kiln_status kiln_llm_shape_find(const char *name, kiln_llm_shape *out) {
    for (size_t i = 0; i < sizeof SHAPES / sizeof *SHAPES; i++) {
        if (strcmp(name, SHAPES[i].name)) continue;
        out->name = SHAPES[i].name;
        out->dtype = SHAPES[i].dtype;
        kiln_llm_config_init(&out->cfg, SHAPES[i].arch, SHAPES[i].n_layer, SHAPES[i].d_model, SHAPES[i].n_head,
                             SHAPES[i].n_kv_head, SHAPES[i].d_ff, SHAPES[i].vocab, SHAPES[i].max_pos);
        out->cfg.tied_embeddings = SHAPES[i].tied;
        out->cfg.rope_theta = SHAPES[i].rope_theta;
        if (SHAPES[i].head_dim) out->cfg.head_dim = SHAPES[i].head_dim;
        if (!SHAPES[i].family) return KILN_OK;
        out->cfg.family = SHAPES[i].family;
        out->cfg.qkv_bias = SHAPES[i].family == KILN_FAMILY_QWEN2;
        out->cfg.scale_emb = SHAPES[i].family == KILN_FAMILY_GEMMA;
        out->cfg.gate_act = SHAPES[i].family == KILN_FAMILY_GEMMA ? KILN_GATE_GELU_TANH : KILN_GATE_SILU;
        return KILN_OK;
    }
    return kiln_error(KILN_ERR_INVALID_ARGUMENT, "unknown shape '%s' (shapes: %s)", name, kiln_llm_shape_names());
}
