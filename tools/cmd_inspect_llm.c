/* cmd_inspect_llm.c — `kiln inspect ENGINE.kiln` for an LLM engine: the header, the model's family,
 * config and family features, the weights' precision, parameter count and bytes (by stored format),
 * the tokenizer, and
 * (unless --no-layers) every weight tensor with its dtype and shape. */
#include "cli.h"

#include "layer_precision.h"
#include "llm/llm_engine.h"
#include "llm/llm_gemv_q4.h"

#include <stdio.h>
#include <string.h>

static const char *const ROPE_NAMES[] = {"none", "linear", "dynamic", "llama3", "longrope"};

static void print_ids(const char *label, const int32_t *ids, int n) {
    printf("%s", label);
    for (int i = 0; i < n; i++) printf(i ? ", %d" : "%d", ids[i]);
    printf(n ? "\n" : "none\n");
}

static void print_config(const kiln_llm_config *c) {
    printf("model: %s, %d layers, d_model %d, %d heads (%d kv heads, head dim %d), d_ff %d, vocab %d, max positions %d\n",
           kiln_llm_family_name(c->family), c->n_layer, c->d_model, c->n_head, c->n_kv_head, c->head_dim,
           c->d_ff, c->vocab, c->max_pos);
    printf("norm eps %g", c->norm_eps);
    if (c->arch == KILN_LLM_LLAMA) {
        printf(", rope theta %g, rope scaling %s", c->rope_theta, ROPE_NAMES[c->rope_scaling]);
        if (c->rope_scaling == KILN_ROPE_LONGROPE)
            printf(" (factor %g, attention factor %g, original context %d)", c->rope_factor, c->rope_attn_factor,
                   c->rope_original_max_pos);
        else if (c->rope_scaling != KILN_ROPE_NONE)
            printf(" (factor %g)", c->rope_factor);
    }
    printf(", tied embeddings %s, bos %d\n", c->tied_embeddings ? "yes" : "no", c->bos_id);
    if (c->arch == KILN_LLM_LLAMA) {
        printf("mlp %s", c->gate_act == KILN_GATE_GELU_TANH ? "GeGLU (gelu tanh)" : "SwiGLU");
        if (c->qkv_bias) printf(", q/k/v biases");
        if (c->scale_emb) printf(", embeddings scaled by sqrt(d_model)");
        if (c->rotary_dim) printf(", RoPE on %d of %d head dims", c->rotary_dim, c->head_dim);
        if (c->sliding_window) printf(", sliding window %d", c->sliding_window);
        printf("\n");
    }
    print_ids("eos ids (config.json): ", c->eos_ids, c->n_eos);
}

/* The stored tokenizer: its size and vocabulary (loaded to count it). */
static void print_tokenizer(const char *path, const kiln_llm_engine_info *info) {
    if (!info->tokenizer_bytes) {
        printf("tokenizer: none (the checkpoint had no tokenizer.json; kiln generate refuses this engine)\n");
        return;
    }
    kiln_tokenizer *tok;
    if (kiln_llm_engine_load(path, NULL, NULL, &tok) != KILN_OK) {
        printf("tokenizer: tokenizer.json %llu bytes, does not load: %s\n", (unsigned long long)info->tokenizer_bytes,
               kiln_last_error());
        return;
    }
    printf("tokenizer: vocab size %d, bos %d, eos %d (tokenizer.json %llu bytes, tokenizer_config.json %s)\n",
           kiln_tokenizer_vocab_size(tok), kiln_tokenizer_bos_id(tok), kiln_tokenizer_eos_id(tok),
           (unsigned long long)info->tokenizer_bytes, info->tokenizer_config_bytes ? "stored" : "absent");
    kiln_tokenizer_free(tok);
}

/* The stored bytes and tensor count of each dtype (an INT8, W8A8, INT4 or FP8 engine mixes quantized matrices,
 * their fp32 scales and fp32 vectors). */
static void print_formats(const kiln_llm_engine_info *info) {
    printf("weights by format:");
    for (int d = 0; d < KILN_DTYPE_COUNT; d++) {
        uint64_t bytes = 0;
        int count = 0;
        for (int i = 0; i < info->n_tensors; i++) {
            const kiln_llm_engine_tensor *t = &info->tensors[i];
            if ((int)t->dtype != d) continue;
            count++;
            bytes += t->dtype == KILN_U4 ? (uint64_t)(t->dims[0] * kiln_q4_row_bytes(t->dims[1]))
                                         : (uint64_t)t->dims[0] * (uint64_t)(t->ndim == 2 ? t->dims[1] : 1) * kiln_dtype_size(t->dtype);
        }
        if (count) printf(" %s %.2f MB (%d tensor%s)", kiln_dtype_name((kiln_dtype)d), (double)bytes / 1e6, count,
                          count == 1 ? "" : "s");
    }
    printf("\n");
}

/* How many of info's tensors have a name ending in suffix. */
static int count_named(const kiln_llm_engine_info *info, const char *suffix) {
    int n = 0;
    const size_t b = strlen(suffix);
    for (int i = 0; i < info->n_tensors; i++) {
        const size_t a = strlen(info->tensors[i].name);
        n += a >= b && !strcmp(info->tensors[i].name + a - b, suffix);
    }
    return n;
}

int cli_inspect_llm(const char *path, bool layers) {
    kiln_llm_engine_info info;
    if (kiln_llm_engine_read_info(path, &info) != KILN_OK) return cli_fail();
    const kiln_engine_meta *m = &info.meta;
    char when[96];
    printf("engine: %s (LLM)\n", path);
    printf("built by: kiln %s on %s from %s\n", m->kiln_version, cli_utc_time(m->created_unix, when, sizeof when), m->source);
    printf("build options: %s\n", m->build_options);
    print_config(&info.cfg);
    print_ids("eos ids (generation_config.json): ", info.gen_eos, info.n_gen_eos);
    if (m->precision == KILN_PRECISION_INT8)
        printf("precision: weight-only int8 (matrices int8 with an fp32 scale per output row, the rest fp32; the CPU "
               "forward computes in fp32, widening the weights inside its products; the CUDA forward keeps them int8 "
               "and computes in fp16 or bf16)\n");
    else if (m->precision == KILN_PRECISION_W8A8)
        printf("precision: w8a8 (SmoothQuant: the layers' matrices int8 with an fp32 scale per output row, their "
               "inputs quantized to int8 with one static scale each (NAME.act_scale), int32 sums; the token embedding "
               "and lm_head weight-only int8 or fp32, the rest fp32)\n");
    else if (m->precision == KILN_PRECISION_INT4)
        printf("precision: weight-only int4 (matrices as unsigned 4-bit values packed two a byte, in groups of 128 "
               "along the input with an fp32 scale and zero point per group, the rest fp32; the CPU forward computes "
               "in fp32, unpacking the weights inside its products)\n");
    else if (m->precision == KILN_PRECISION_FP8)
        printf("precision: fp8 (matrices E4M3 with an fp32 scale per output row, the rest fp32; activations rounded "
               "to E4M3 in every product with %s; docs/llm-quantization.md)\n",
               count_named(&info, KILN_LLM_ACT_SCALE_SUFFIX) ? "static scales calibrated at build time (.act_scale)"
                                                             : "a dynamic scale per token row");
    else printf("precision: %s weights (the CPU forward computes in fp32)\n", kiln_precision_name(m->precision));
    printf("parameters: %lld (%.2f M) in %d tensors, %llu bytes of weights (%.2f MB)\n", (long long)info.n_params,
           (double)info.n_params / 1e6, info.n_tensors, (unsigned long long)info.weight_bytes,
           (double)info.weight_bytes / 1e6);
    print_formats(&info);
    print_tokenizer(path, &info);
    for (int i = 0; layers && i < info.n_tensors; i++) {
        const kiln_llm_engine_tensor *w = &info.tensors[i];
        printf("  %-34s %-8s [%lld", w->name, kiln_dtype_name(w->dtype), (long long)w->dims[0]);
        if (w->ndim == 2) printf(", %lld", (long long)w->dims[1]);
        printf("]\n");
    }
    kiln_llm_engine_info_free(&info);
    return 0;
}
