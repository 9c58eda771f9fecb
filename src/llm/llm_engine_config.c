/* llm_engine_config.c — the llm config section of an LLM engine (docs/engine-format.md): every field
 * of kiln_llm_config (the model family and its features included) and the generation eos ids,
 * little-endian and fixed-width, and its checked decoding. */
#include "llm/llm_engine_internal.h"

#include "core/status.h"
#include "engine/engine_layout.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

static void put_u32(kiln_strbuf *b, uint32_t v) {
    uint8_t t[4];
    kiln_put_le32(t, v);
    kiln_strbuf_append(b, t, 4);
}

static void put_f32(kiln_strbuf *b, float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    put_u32(b, u);
}

static void put_ids(kiln_strbuf *b, const int32_t *ids, int n) {
    put_u32(b, (uint32_t)n);
    for (int i = 0; i < n; i++) put_u32(b, (uint32_t)ids[i]);
}

kiln_status kiln_llm_config_encode(const kiln_llm_config *c, const int32_t *gen_eos, int n_gen_eos, kiln_strbuf *out) {
    const int ints[] = {c->n_layer, c->d_model, c->n_head, c->n_kv_head, c->head_dim, c->d_ff, c->vocab, c->max_pos};
    put_u32(out, (uint32_t)c->arch);
    put_u32(out, (uint32_t)c->family);
    put_u32(out, (uint32_t)c->gate_act);
    put_u32(out, c->qkv_bias);
    put_u32(out, c->scale_emb);
    put_u32(out, (uint32_t)c->rotary_dim);
    put_u32(out, (uint32_t)c->sliding_window);
    for (size_t i = 0; i < sizeof ints / sizeof *ints; i++) put_u32(out, (uint32_t)ints[i]);
    put_f32(out, c->norm_eps);
    put_f32(out, c->rope_theta);
    put_u32(out, (uint32_t)c->rope_scaling);
    put_f32(out, c->rope_factor);
    put_f32(out, c->rope_low_freq_factor);
    put_f32(out, c->rope_high_freq_factor);
    put_u32(out, (uint32_t)c->rope_original_max_pos);
    put_u32(out, c->tied_embeddings);
    put_u32(out, (uint32_t)c->bos_id);
    const int n_factors = c->rope_scaling == KILN_ROPE_LONGROPE ? kiln_llm_rope_dim(c) / 2 : 0;
    put_f32(out, n_factors ? c->rope_attn_factor : 0.0f);
    put_u32(out, (uint32_t)n_factors);
    for (int i = 0; i < n_factors; i++) put_f32(out, c->rope_short[i]);
    for (int i = 0; i < n_factors; i++) put_f32(out, c->rope_long[i]);
    put_ids(out, c->eos_ids, c->n_eos);
    put_ids(out, gen_eos, n_gen_eos);
    return kiln_strbuf_status(out);
}

/* ---- decoding ---- */

typedef struct rd {
    const uint8_t *p;
    size_t n, pos;
} rd;

static kiln_status corrupt(const char *what) {
    return kiln_error(KILN_ERR_PARSE, "engine file is corrupted: the llm config section %s", what);
}

static kiln_status get_u32(rd *r, uint32_t *v) {
    if (r->n - r->pos < 4) return corrupt("ends early");
    *v = kiln_le32(r->p + r->pos);
    r->pos += 4;
    return KILN_OK;
}

static kiln_status get_f32(rd *r, float *f) {
    uint32_t u = 0;
    KILN_TRY(get_u32(r, &u));
    memcpy(f, &u, 4);
    return KILN_OK;
}

/* A count (at most KILN_LLM_MAX_EOS) of non-negative token ids (config.json may name ids beyond the
 * vocabulary: generation ignores those). */
static kiln_status get_ids(rd *r, int32_t *ids, int *n) {
    uint32_t count = 0;
    KILN_TRY(get_u32(r, &count));
    if (count > KILN_LLM_MAX_EOS) return corrupt("lists too many eos ids");
    for (uint32_t i = 0; i < count; i++) {
        uint32_t id = 0;
        KILN_TRY(get_u32(r, &id));
        if (id > INT32_MAX) return corrupt("has a negative eos id");
        ids[i] = (int32_t)id;
    }
    *n = (int)count;
    return KILN_OK;
}

/* LongRoPE's attention factor and factor lists: one per rotated pair with LongRoPE (positive, finite;
 * original context >= 2), none otherwise (and the attention factor 0, as the parser leaves it). */
static kiln_status get_longrope(rd *r, kiln_llm_config *c) {
    uint32_t n = 0;
    KILN_TRY(get_f32(r, &c->rope_attn_factor));
    KILN_TRY(get_u32(r, &n));
    const bool longrope = c->rope_scaling == KILN_ROPE_LONGROPE;
    if (n != (uint32_t)(longrope ? kiln_llm_rope_dim(c) / 2 : 0) || n > KILN_LLM_MAX_ROPE_FACTORS ||
        (longrope ? !(c->rope_attn_factor > 0) || !isfinite(c->rope_attn_factor) || c->rope_original_max_pos < 2
                  : c->rope_attn_factor != 0.0f))
        return corrupt("has inconsistent LongRoPE factors");
    for (uint32_t i = 0; i < 2 * n; i++) {
        float *f = i < n ? &c->rope_short[i] : &c->rope_long[i - n];
        KILN_TRY(get_f32(r, f));
        if (!(*f > 0) || !isfinite(*f)) return corrupt("has a non-positive LongRoPE factor");
    }
    return KILN_OK;
}

/* The sizes and enums of c are ones kiln_llm_config_parse could have produced. */
static kiln_status check(const kiln_llm_config *c) {
    const int ints[] = {c->n_layer, c->d_model, c->n_head, c->n_kv_head, c->head_dim, c->d_ff, c->vocab, c->max_pos};
    for (size_t i = 0; i < sizeof ints / sizeof *ints; i++)
        if (ints[i] < 1 || ints[i] > (1 << 24)) return corrupt("has a model size out of range");
    if (c->arch != KILN_LLM_GPT2 && c->arch != KILN_LLM_LLAMA) return corrupt("names an unknown architecture");
    if (c->family < KILN_FAMILY_GPT2 || c->family > KILN_LLM_FAMILY_LAST ||
        (c->family == KILN_FAMILY_GPT2) != (c->arch == KILN_LLM_GPT2))
        return corrupt("names an unknown model family");
    if (c->arch == KILN_LLM_GPT2 && (c->gate_act || c->qkv_bias || c->scale_emb || c->rotary_dim || c->sliding_window))
        return corrupt("gives GPT-2 a feature of another family");
    if (c->rotary_dim && (c->rotary_dim % 2 || c->rotary_dim >= c->head_dim))
        return corrupt("has a rotary dim out of range");
    if (c->n_head % c->n_kv_head || c->head_dim % 2) return corrupt("has inconsistent attention heads");
    if (c->arch == KILN_LLM_GPT2 && (c->n_kv_head != c->n_head || c->head_dim * c->n_head != c->d_model))
        return corrupt("has inconsistent attention heads");
    if ((unsigned)c->rope_scaling > KILN_ROPE_LONGROPE) return corrupt("names an unknown RoPE scaling");
    if (!(c->norm_eps > 0) || !isfinite(c->norm_eps)) return corrupt("has a non-positive norm epsilon");
    if (c->arch == KILN_LLM_LLAMA && (!(c->rope_theta > 0) || !isfinite(c->rope_theta)))
        return corrupt("has a non-positive RoPE theta");
    if (c->bos_id < -1) return corrupt("has a bos id below -1");
    return KILN_OK;
}

kiln_status kiln_llm_config_decode(const uint8_t *p, size_t n, kiln_llm_config *c, int32_t *gen_eos, int *n_gen_eos) {
    memset(c, 0, sizeof *c);
    rd r = {p, n, 0};
    uint32_t u[15] = {0};
    for (int i = 0; i < 15; i++) KILN_TRY(get_u32(&r, &u[i]));
    c->arch = (kiln_llm_arch)u[0];
    c->family = u[1] > KILN_LLM_FAMILY_LAST ? (kiln_llm_family)0 : (kiln_llm_family)u[1];
    if (u[2] > KILN_GATE_GELU_TANH || u[3] > 1 || u[4] > 1 || u[5] > (1u << 24) || u[6] > (1u << 24))
        return corrupt("has a model feature out of range");
    c->gate_act = (kiln_llm_gate_act)u[2];
    c->qkv_bias = u[3];
    c->scale_emb = u[4];
    c->rotary_dim = (int)u[5];
    c->sliding_window = (int)u[6];
    int *ints[] = {&c->n_layer, &c->d_model, &c->n_head, &c->n_kv_head, &c->head_dim, &c->d_ff, &c->vocab, &c->max_pos};
    for (int i = 0; i < 8; i++) *ints[i] = u[i + 7] > (1u << 24) ? -1 : (int)u[i + 7];
    KILN_TRY(get_f32(&r, &c->norm_eps));
    KILN_TRY(get_f32(&r, &c->rope_theta));
    KILN_TRY(get_u32(&r, &u[0]));
    c->rope_scaling = u[0] > KILN_ROPE_LONGROPE ? (kiln_rope_scaling)-1 : (kiln_rope_scaling)u[0];
    KILN_TRY(get_f32(&r, &c->rope_factor));
    KILN_TRY(get_f32(&r, &c->rope_low_freq_factor));
    KILN_TRY(get_f32(&r, &c->rope_high_freq_factor));
    KILN_TRY(get_u32(&r, &u[1]));
    KILN_TRY(get_u32(&r, &u[2]));
    KILN_TRY(get_u32(&r, &u[3]));
    if (u[1] > (1u << 24) || u[2] > 1) return corrupt("has a RoPE context or tied flag out of range");
    c->rope_original_max_pos = (int)u[1];
    c->tied_embeddings = u[2];
    c->bos_id = (int32_t)u[3];
    KILN_TRY(check(c));
    if (c->rope_scaling != KILN_ROPE_NONE && !(c->rope_factor > 0 && isfinite(c->rope_factor)))
        return corrupt("has a non-positive RoPE factor");
    if (c->rope_scaling == KILN_ROPE_LLAMA3 &&
        (!(c->rope_high_freq_factor > c->rope_low_freq_factor) || !(c->rope_low_freq_factor > 0) ||
         !isfinite(c->rope_high_freq_factor) || c->rope_original_max_pos < 1))
        return corrupt("has inconsistent llama3 RoPE factors");
    KILN_TRY(get_longrope(&r, c));
    KILN_TRY(get_ids(&r, c->eos_ids, &c->n_eos));
    c->eos_id = c->n_eos ? c->eos_ids[0] : -1;
    KILN_TRY(get_ids(&r, gen_eos, n_gen_eos));
    if (r.pos != r.n) return corrupt("has bytes after its last field");
    return KILN_OK;
}
