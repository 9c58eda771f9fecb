/* test_llm_awq.c — the activation-aware INT4 scales (src/llm/llm_awq.c) on small random models (a
 * Llama with one KV head per query head, one with grouped KV heads, a GPT-2; widths with a short last
 * group): without clipping, the folded scales leave the fp32 model's logits as they were to float
 * rounding (each 1 / s lands in the op before its matrix: norms, v rows, up rows, the final norm for
 * the untied lm_head), while the weights did change; with clipping the logits stay close; too few
 * tokens are refused. */
#include "check.h"
#include "llm/llm_awq.h"
#include "llm/kv_cache.h"
#include "llm/llm_random.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define N_IDS 96
#define PROMPT 24

/* The last-token logits of m over ids [0, PROMPT) into out [vocab]. */
static void logits_of(const kiln_llm_model *m, const int32_t *ids, float *out) {
    const kiln_llm_config *c = &m->cfg;
    kiln_kv_cache_config kc = {.n_layer = c->n_layer, .n_kv_head = c->n_kv_head, .head_dim = c->head_dim,
                               .block_size = 8, .n_blocks = PROMPT / 8, .dtype = KILN_F32};
    kiln_kv_cache *kv;
    REQUIRE_OK(kiln_kv_cache_create(&kc, &kv));
    int32_t blocks[PROMPT / 8], pos[PROMPT], start[2] = {0, PROMPT}, ctx = PROMPT;
    for (int b = 0; b < PROMPT / 8; b++) blocks[b] = kiln_kv_cache_alloc_block(kv);
    for (int p = 0; p < PROMPT; p++) pos[p] = p;
    const kiln_llm_batch b = {.n_tokens = PROMPT, .tokens = ids, .positions = pos, .n_seqs = 1, .seq_start = start,
                              .ctx_len = &ctx, .block_table = blocks, .max_blocks_per_seq = PROMPT / 8};
    REQUIRE_OK(kiln_llm_forward(m, kv, &b, out));
    kiln_kv_cache_free(kv);
}

/* The largest |a - b| over n values, relative to the largest |b|. */
static double rel_diff(const float *a, const float *b, int n) {
    double d = 0, mx = 0;
    for (int i = 0; i < n; i++) d = fmax(d, fabs((double)a[i] - b[i])), mx = fmax(mx, fabs((double)b[i]));
    return d / mx;
}

static void check_model(const char *what, kiln_llm_arch arch, int n_head, int n_kv_head) {
    kiln_llm_config c;
    kiln_llm_config_init(&c, arch, 2, 160, n_head, n_kv_head, 200, 64, 64);
    kiln_llm_model *ref, *folded, *clipped;
    REQUIRE_OK(kiln_llm_model_random(&c, 5, &ref));
    REQUIRE_OK(kiln_llm_model_random(&c, 5, &folded));
    REQUIRE_OK(kiln_llm_model_random(&c, 5, &clipped));
    int32_t ids[N_IDS];
    for (int i = 0; i < N_IDS; i++) ids[i] = (i * 37 + 11) % c.vocab;
    REQUIRE_OK(kiln_llm_awq_apply_ids(folded, ids, N_IDS, false, true));
    REQUIRE_OK(kiln_llm_awq_apply_ids(clipped, ids, N_IDS, true, true));
    const size_t qkv = (size_t)(n_head + 2 * n_kv_head) * (size_t)c.head_dim * (size_t)c.d_model;
    bool changed = false;
    for (int l = 0; l < c.n_layer; l++)
        changed |= memcmp(folded->layers[l].qkv_w, ref->layers[l].qkv_w, qkv * sizeof(float)) != 0 ||
                   memcmp(folded->layers[l].norm1_w, ref->layers[l].norm1_w, (size_t)c.d_model * sizeof(float)) != 0;
    CHECK(changed);
    /* the o fold (into v rows) when every query head has its KV head, the down fold (into up rows) for Llama */
    const size_t o = (size_t)c.d_model * (size_t)(n_head * c.head_dim), down = (size_t)c.d_model * (size_t)c.d_ff;
    bool o_changed = false, down_changed = false;
    for (int l = 0; l < c.n_layer; l++) {
        o_changed |= memcmp(folded->layers[l].o_w, ref->layers[l].o_w, o * sizeof(float)) != 0;
        down_changed |= memcmp(folded->layers[l].down_w, ref->layers[l].down_w, down * sizeof(float)) != 0;
    }
    CHECK(o_changed == (n_kv_head == n_head));
    CHECK(down_changed == (arch == KILN_LLM_LLAMA));
    float *a = malloc((size_t)c.vocab * sizeof *a), *b = malloc((size_t)c.vocab * sizeof *b);
    double fold_err = 0, clip_err = 0;
    for (int p = 0; p < 3; p++) {
        logits_of(ref, ids + 20 * p, a);
        logits_of(folded, ids + 20 * p, b);
        fold_err = fmax(fold_err, rel_diff(b, a, c.vocab));
        logits_of(clipped, ids + 20 * p, b);
        clip_err = fmax(clip_err, rel_diff(b, a, c.vocab));
    }
    CHECK(fold_err < 1e-4);
    CHECK(clip_err < 0.2);
    printf("  %s: folded scales, logits vs fp32 %.2e; with clipping %.2e\n", what, fold_err, clip_err);
    CHECK(kiln_llm_awq_apply_ids(ref, ids, 1, false, true) == KILN_ERR_INVALID_ARGUMENT);
    free(a);
    free(b);
    kiln_llm_model_free(ref);
    kiln_llm_model_free(folded);
    kiln_llm_model_free(clipped);
}

int main(void) {
    check_model("llama, a KV head per query head", KILN_LLM_LLAMA, 4, 4);
    check_model("llama, grouped KV heads", KILN_LLM_LLAMA, 4, 2);
    check_model("gpt2", KILN_LLM_GPT2, 4, 4);
    return checks_report("test_llm_awq");
}
