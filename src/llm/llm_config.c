/* llm_config.c — config.json of a Hugging Face checkpoint of a family kiln runs (GPT-2, Llama,
 * Mistral, Qwen2, Phi-3, Gemma) into kiln_llm_config, with transformers' defaults for optional keys
 * and errors naming missing, malformed or unsupported ones (an unknown model_type names the families
 * kiln runs). */
#include "llm/llm_internal.h"

#include "core/status.h"
#include "hf/checkpoint.h"

#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

typedef struct cfg_reader {
    const kiln_jdoc *doc;
    const kiln_jnode *obj; /* the object keys are read from */
    const char *what;      /* the file, for messages */
    const char *scope;     /* "" or "rope_scaling." */
} cfg_reader;

/* Member key, or NULL when missing or JSON null. */
static const kiln_jnode *member(const cfg_reader *r, const char *key) {
    const kiln_jnode *v = kiln_jdoc_get(r->doc, r->obj, key);
    return v && v->type != KILN_JNODE_NULL ? v : NULL;
}

/* An integer key in [lo, INT_MAX]; `dflt` when missing and not required. */
static kiln_status get_int(const cfg_reader *r, const char *key, bool required, int dflt, int lo, int *out) {
    const kiln_jnode *v = member(r, key);
    double d;
    if (!v) {
        if (required) return kiln_error(KILN_ERR_PARSE, "%s: missing required key \"%s%s\"", r->what, r->scope, key);
        *out = dflt;
        return KILN_OK;
    }
    if (!kiln_jdoc_num(v, &d) || d != floor(d) || d < lo || d > INT_MAX)
        return kiln_error(KILN_ERR_PARSE, "%s: \"%s%s\" must be an integer >= %d", r->what, r->scope, key, lo);
    *out = (int)d;
    return KILN_OK;
}

/* A positive number key; `dflt` when missing and not required. */
static kiln_status get_num(const cfg_reader *r, const char *key, bool required, double dflt, float *out) {
    const kiln_jnode *v = member(r, key);
    double d;
    if (!v) {
        if (required) return kiln_error(KILN_ERR_PARSE, "%s: missing required key \"%s%s\"", r->what, r->scope, key);
        *out = (float)dflt;
        return KILN_OK;
    }
    if (!kiln_jdoc_num(v, &d) || !(d > 0))
        return kiln_error(KILN_ERR_PARSE, "%s: \"%s%s\" must be a positive number", r->what, r->scope, key);
    *out = (float)d;
    return KILN_OK;
}

/* A boolean key; `dflt` when missing. */
static kiln_status get_bool(const cfg_reader *r, const char *key, bool dflt, bool *out) {
    const kiln_jnode *v = member(r, key);
    if (v && v->type != KILN_JNODE_TRUE && v->type != KILN_JNODE_FALSE)
        return kiln_error(KILN_ERR_PARSE, "%s: \"%s\" must be true or false", r->what, key);
    *out = v ? v->type == KILN_JNODE_TRUE : dflt;
    return KILN_OK;
}

/* bos_token_id and eos_token_id (an integer, a list of integers, or absent). */
static kiln_status get_special_ids(const cfg_reader *r, kiln_llm_config *c) {
    KILN_TRY(get_int(r, "bos_token_id", false, -1, 0, &c->bos_id));
    const kiln_jnode *eos = member(r, "eos_token_id");
    c->n_eos = 0;
    if (eos && eos->type == KILN_JNODE_ARRAY) {
        if (eos->count > KILN_LLM_MAX_EOS)
            return kiln_error(KILN_ERR_UNSUPPORTED, "%s: \"eos_token_id\" lists %d ids (at most %d supported)", r->what,
                              eos->count, KILN_LLM_MAX_EOS);
        for (const kiln_jnode *e = kiln_jdoc_first(r->doc, eos); e; e = kiln_jdoc_next(r->doc, e)) {
            double d;
            if (!kiln_jdoc_num(e, &d) || d != floor(d) || d < 0 || d > INT_MAX)
                return kiln_error(KILN_ERR_PARSE, "%s: \"eos_token_id\" entries must be non-negative integers", r->what);
            c->eos_ids[c->n_eos++] = (int)d;
        }
    } else if (eos) {
        KILN_TRY(get_int(r, "eos_token_id", true, -1, 0, &c->eos_ids[0]));
        c->n_eos = 1;
    }
    c->eos_id = c->n_eos ? c->eos_ids[0] : -1;
    return KILN_OK;
}

static kiln_status parse_gpt2(const cfg_reader *r, kiln_llm_config *c) {
    c->arch = KILN_LLM_GPT2;
    c->family = KILN_FAMILY_GPT2;
    KILN_TRY(get_int(r, "vocab_size", true, 0, 1, &c->vocab));
    KILN_TRY(get_int(r, "n_layer", true, 0, 1, &c->n_layer));
    KILN_TRY(get_int(r, "n_embd", true, 0, 1, &c->d_model));
    KILN_TRY(get_int(r, "n_head", true, 0, 1, &c->n_head));
    KILN_TRY(get_int(r, "n_positions", true, 0, 1, &c->max_pos));
    if (c->d_model % c->n_head)
        return kiln_error(KILN_ERR_PARSE, "%s: n_embd %d is not a multiple of n_head %d", r->what, c->d_model, c->n_head);
    if (c->d_model > INT_MAX / 4) return kiln_error(KILN_ERR_PARSE, "%s: n_embd %d is too large", r->what, c->d_model);
    KILN_TRY(get_int(r, "n_inner", false, 4 * c->d_model, 1, &c->d_ff));
    KILN_TRY(get_num(r, "layer_norm_epsilon", false, 1e-5, &c->norm_eps));
    c->n_kv_head = c->n_head;
    c->head_dim = c->d_model / c->n_head;
    const kiln_jnode *act = member(r, "activation_function");
    const char *a = act ? kiln_jdoc_str(act) : "gelu_new";
    if (!a || (strcmp(a, "gelu_new") && strcmp(a, "gelu_pytorch_tanh") && strcmp(a, "gelu_fast")))
        return kiln_error(KILN_ERR_UNSUPPORTED,
                          "%s: activation_function '%s' is not supported (gelu_new, gelu_pytorch_tanh, gelu_fast)",
                          r->what, a ? a : "(not a string)");
    bool by_layer, upcast;
    KILN_TRY(get_bool(r, "scale_attn_by_inverse_layer_idx", false, &by_layer));
    KILN_TRY(get_bool(r, "reorder_and_upcast_attn", false, &upcast));
    if (by_layer) return kiln_error(KILN_ERR_UNSUPPORTED, "%s: scale_attn_by_inverse_layer_idx is not supported", r->what);
    bool scale;
    KILN_TRY(get_bool(r, "scale_attn_weights", true, &scale));
    if (!scale) return kiln_error(KILN_ERR_UNSUPPORTED, "%s: scale_attn_weights false is not supported", r->what);
    KILN_TRY(get_bool(r, "tie_word_embeddings", true, &c->tied_embeddings));
    return get_special_ids(r, c);
}

/* `key` of r: a list of exactly n positive numbers into out (LongRoPE's factors, one per rotated pair). */
static kiln_status get_factors(const cfg_reader *r, const char *key, int n, float *out) {
    const kiln_jnode *v = member(r, key);
    if (!v || v->type != KILN_JNODE_ARRAY || v->count != n)
        return kiln_error(KILN_ERR_PARSE, "%s: \"%s%s\" must be a list of %d numbers (one per rotated pair)", r->what,
                          r->scope, key, n);
    int i = 0;
    for (const kiln_jnode *e = kiln_jdoc_first(r->doc, v); e; e = kiln_jdoc_next(r->doc, e)) {
        double d;
        if (!kiln_jdoc_num(e, &d) || !(d > 0) || !isfinite(d))
            return kiln_error(KILN_ERR_PARSE, "%s: \"%s%s\" must hold positive numbers", r->what, r->scope, key);
        out[i++] = (float)d;
    }
    return KILN_OK;
}

/* LongRoPE's keys (r: the rope object; top: config.json's root, whose original_max_position_embeddings
 * Phi-3 keeps at the top level), with transformers' defaults: factor max_position_embeddings /
 * original_max_position_embeddings, attention_factor sqrt(1 + ln(factor) / ln(original)) (1 when the
 * factor is at most 1). The factor lists hold one entry per rotated pair. */
static kiln_status parse_longrope(const cfg_reader *top, const cfg_reader *r, kiln_llm_config *c) {
    int orig;
    KILN_TRY(get_int(top, "original_max_position_embeddings", false, c->max_pos, 2, &orig));
    KILN_TRY(get_int(r, "original_max_position_embeddings", false, orig, 2, &c->rope_original_max_pos));
    KILN_TRY(get_num(r, "factor", false, (double)c->max_pos / c->rope_original_max_pos, &c->rope_factor));
    const double f = c->rope_factor;
    KILN_TRY(get_num(r, "attention_factor", false, f <= 1.0 ? 1.0 : sqrt(1.0 + log(f) / log(c->rope_original_max_pos)),
                     &c->rope_attn_factor));
    const int n = kiln_llm_rope_dim(c) / 2;
    if (n > KILN_LLM_MAX_ROPE_FACTORS)
        return kiln_error(KILN_ERR_UNSUPPORTED, "%s: LongRoPE over %d rotated pairs (at most %d)", r->what, n,
                          KILN_LLM_MAX_ROPE_FACTORS);
    KILN_TRY(get_factors(r, "short_factor", n, c->rope_short));
    return get_factors(r, "long_factor", n, c->rope_long);
}

/* rope_scaling (or transformers 5's rope_parameters) of a Llama config. */
static kiln_status parse_rope(const cfg_reader *top, kiln_llm_config *c) {
    const kiln_jnode *rp = member(top, "rope_parameters");
    const kiln_jnode *rs = rp ? rp : member(top, "rope_scaling");
    KILN_TRY(get_num(top, "rope_theta", false, 10000.0, &c->rope_theta));
    c->rope_scaling = KILN_ROPE_NONE;
    if (!rs) return KILN_OK;
    if (rs->type != KILN_JNODE_OBJECT)
        return kiln_error(KILN_ERR_PARSE, "%s: \"%s\" must be an object or null", top->what,
                          rp ? "rope_parameters" : "rope_scaling");
    cfg_reader r = {top->doc, rs, top->what, rp ? "rope_parameters." : "rope_scaling."};
    KILN_TRY(get_num(&r, "rope_theta", false, c->rope_theta, &c->rope_theta));
    const kiln_jnode *tn = member(&r, "rope_type");
    if (!tn) tn = member(&r, "type");
    const char *type = tn ? kiln_jdoc_str(tn) : "default";
    if (!type) return kiln_error(KILN_ERR_PARSE, "%s: \"%srope_type\" must be a string", r.what, r.scope);
    if (!strcmp(type, "default")) return KILN_OK;
    if (!strcmp(type, "linear")) c->rope_scaling = KILN_ROPE_LINEAR;
    else if (!strcmp(type, "dynamic")) c->rope_scaling = KILN_ROPE_DYNAMIC;
    else if (!strcmp(type, "llama3")) c->rope_scaling = KILN_ROPE_LLAMA3;
    else if (!strcmp(type, "longrope") || !strcmp(type, "su")) c->rope_scaling = KILN_ROPE_LONGROPE;
    else
        return kiln_error(KILN_ERR_UNSUPPORTED,
                          "%s: RoPE scaling type '%s' is not supported (linear, dynamic, llama3, longrope)", r.what, type);
    if (c->rope_scaling == KILN_ROPE_LONGROPE) return parse_longrope(top, &r, c);
    KILN_TRY(get_num(&r, "factor", true, 1.0, &c->rope_factor));
    if (c->rope_scaling != KILN_ROPE_LLAMA3) return KILN_OK;
    KILN_TRY(get_num(&r, "low_freq_factor", true, 1.0, &c->rope_low_freq_factor));
    KILN_TRY(get_num(&r, "high_freq_factor", true, 1.0, &c->rope_high_freq_factor));
    KILN_TRY(get_int(&r, "original_max_position_embeddings", false, c->max_pos, 1, &c->rope_original_max_pos));
    if (!(c->rope_high_freq_factor > c->rope_low_freq_factor))
        return kiln_error(KILN_ERR_PARSE, "%s: %shigh_freq_factor must exceed low_freq_factor", r.what, r.scope);
    return KILN_OK;
}

/* The gate activation of a Llama-like family: hidden_act (Gemma: hidden_activation first, and its
 * legacy "gelu" means the tanh approximation, as transformers reads it). */
static kiln_status parse_gate_act(const cfg_reader *r, kiln_llm_config *c) {
    const bool gemma = c->family == KILN_FAMILY_GEMMA;
    const kiln_jnode *act = gemma ? member(r, "hidden_activation") : NULL;
    if (!act) act = member(r, "hidden_act");
    const char *a = act ? kiln_jdoc_str(act) : gemma ? "gelu_pytorch_tanh" : "silu";
    if (a && !strcmp(a, "silu")) {
        c->gate_act = KILN_GATE_SILU;
    } else if (a && (!strcmp(a, "gelu_pytorch_tanh") || !strcmp(a, "gelu_new") || !strcmp(a, "gelu_fast") ||
                     (gemma && !strcmp(a, "gelu")))) {
        c->gate_act = KILN_GATE_GELU_TANH;
    } else {
        return kiln_error(KILN_ERR_UNSUPPORTED, "%s: hidden_act '%s' is not supported (silu, gelu_pytorch_tanh%s)",
                          r->what, a ? a : "(not a string)", gemma ? ", gelu" : "");
    }
    return KILN_OK;
}

/* The attention window: Mistral's and Phi-3's sliding_window (an integer or null); Qwen2's only when
 * use_sliding_window is true, which kiln refuses (transformers then windows only some layers). */
static kiln_status parse_window(const cfg_reader *r, kiln_llm_config *c) {
    if (c->family == KILN_FAMILY_QWEN2) {
        bool use;
        KILN_TRY(get_bool(r, "use_sliding_window", false, &use));
        if (use) return kiln_error(KILN_ERR_UNSUPPORTED, "%s: use_sliding_window true is not supported", r->what);
        return KILN_OK;
    }
    if (c->family != KILN_FAMILY_MISTRAL && c->family != KILN_FAMILY_PHI3) return KILN_OK;
    return get_int(r, "sliding_window", false, 0, 1, &c->sliding_window);
}

/* Phi-3's partial_rotary_factor (in rope_parameters or at the top level): RoPE on the first
 * int(head_dim * factor) dims of each head. */
static kiln_status parse_partial_rotary(const cfg_reader *r, kiln_llm_config *c) {
    const kiln_jnode *rp = member(r, "rope_parameters");
    const cfg_reader in = {r->doc, rp, r->what, "rope_parameters."};
    const cfg_reader *src = rp && rp->type == KILN_JNODE_OBJECT && member(&in, "partial_rotary_factor") ? &in : r;
    float f;
    KILN_TRY(get_num(src, "partial_rotary_factor", false, 1.0, &f));
    if (f > 1.0f) return kiln_error(KILN_ERR_PARSE, "%s: %spartial_rotary_factor %g is above 1", r->what, src->scope, f);
    const int dim = (int)((double)c->head_dim * f);
    if (dim < 2 || dim % 2)
        return kiln_error(KILN_ERR_UNSUPPORTED, "%s: partial_rotary_factor %g gives %d rotary dims (an even number >= 2 "
                          "is needed)", r->what, f, dim);
    c->rotary_dim = dim == c->head_dim ? 0 : dim;
    return KILN_OK;
}

/* Llama and the families that share its layout (kiln_llm_family says how each differs). */
static kiln_status parse_llama(const cfg_reader *r, kiln_llm_family family, kiln_llm_config *c) {
    c->arch = KILN_LLM_LLAMA;
    c->family = family;
    KILN_TRY(get_int(r, "vocab_size", true, 0, 1, &c->vocab));
    KILN_TRY(get_int(r, "hidden_size", true, 0, 1, &c->d_model));
    KILN_TRY(get_int(r, "intermediate_size", true, 0, 1, &c->d_ff));
    KILN_TRY(get_int(r, "num_hidden_layers", true, 0, 1, &c->n_layer));
    KILN_TRY(get_int(r, "num_attention_heads", true, 0, 1, &c->n_head));
    KILN_TRY(get_int(r, "num_key_value_heads", false, c->n_head, 1, &c->n_kv_head));
    KILN_TRY(get_int(r, "head_dim", false, c->d_model / c->n_head, 1, &c->head_dim));
    KILN_TRY(get_int(r, "max_position_embeddings", false, 2048, 1, &c->max_pos));
    KILN_TRY(get_num(r, "rms_norm_eps", false, 1e-6, &c->norm_eps));
    if (c->n_head % c->n_kv_head)
        return kiln_error(KILN_ERR_PARSE, "%s: num_attention_heads %d is not a multiple of num_key_value_heads %d",
                          r->what, c->n_head, c->n_kv_head);
    if (c->head_dim % 2) return kiln_error(KILN_ERR_PARSE, "%s: head_dim %d is odd (RoPE needs pairs)", r->what, c->head_dim);
    KILN_TRY(parse_gate_act(r, c));
    bool attn_bias, mlp_bias;
    KILN_TRY(get_bool(r, "attention_bias", false, &attn_bias));
    KILN_TRY(get_bool(r, "mlp_bias", false, &mlp_bias));
    /* transformers' Qwen2 reads neither key: its q/k/v have biases, its o and MLP none */
    if (family != KILN_FAMILY_QWEN2 && (attn_bias || mlp_bias))
        return kiln_error(KILN_ERR_UNSUPPORTED, "%s: %s true is not supported", r->what,
                          attn_bias ? "attention_bias" : "mlp_bias");
    c->qkv_bias = family == KILN_FAMILY_QWEN2; /* Qwen2's q/k/v projections always have biases */
    c->scale_emb = family == KILN_FAMILY_GEMMA;
    KILN_TRY(parse_window(r, c));
    if (family == KILN_FAMILY_PHI3) KILN_TRY(parse_partial_rotary(r, c)); /* before the RoPE: LongRoPE's lists */
    KILN_TRY(parse_rope(r, c));
    KILN_TRY(get_bool(r, "tie_word_embeddings", family == KILN_FAMILY_GEMMA, &c->tied_embeddings));
    return get_special_ids(r, c);
}

kiln_status kiln_llm_config_parse(const kiln_jdoc *doc, const char *what, kiln_llm_config *out) {
    memset(out, 0, sizeof *out);
    cfg_reader r = {doc, kiln_jdoc_root(doc), what, ""};
    const kiln_jnode *mt = member(&r, "model_type");
    if (!mt) return kiln_error(KILN_ERR_PARSE, "%s: missing required key \"model_type\"", what);
    const char *type = kiln_jdoc_str(mt);
    if (!type) return kiln_error(KILN_ERR_PARSE, "%s: \"model_type\" must be a string", what);
    if (!strcmp(type, "gpt2")) return parse_gpt2(&r, out);
    for (int f = KILN_FAMILY_LLAMA; f <= KILN_LLM_FAMILY_LAST; f++)
        if (!strcmp(type, kiln_llm_family_name((kiln_llm_family)f))) return parse_llama(&r, (kiln_llm_family)f, out);
    return kiln_error(KILN_ERR_UNSUPPORTED, "%s: model family (model_type) '%s' is not supported: kiln runs %s", what,
                      type, KILN_LLM_FAMILY_LIST);
}

const char *kiln_llm_family_name(kiln_llm_family f) {
    static const char *const names[] = {"unknown", "gpt2", "llama", "mistral", "qwen2", "phi3", "gemma"};
    return f >= KILN_FAMILY_GPT2 && f <= KILN_LLM_FAMILY_LAST ? names[f] : names[0];
}

kiln_status kiln_llm_config_load_hf(const char *dir, kiln_llm_config *out) {
    char path[4096];
    if ((size_t)snprintf(path, sizeof path, "%s/config.json", dir) >= sizeof path)
        return kiln_error(KILN_ERR_INVALID_ARGUMENT, "checkpoint directory path is too long");
    kiln_jdoc doc;
    kiln_status s = kiln_hf_read_json(path, "the model's config.json", &doc);
    if (s == KILN_OK) s = kiln_llm_config_parse(&doc, path, out);
    kiln_jdoc_free(&doc);
    return s;
}
