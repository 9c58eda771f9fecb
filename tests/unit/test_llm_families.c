/* test_llm_families.c — every model family kiln runs against Hugging Face transformers, on the tiny
 * random checkpoints of tests/data/llm_families/ (made once by scripts/make_llm_family_fixtures.py:
 * GPT-2; Llama 2 untied; Llama 3 tied with llama3 RoPE; Llama with linear and with dynamic RoPE;
 * Mistral with a sliding window shorter than the prompt; Qwen2 with q/k/v biases; Phi-3 with fused
 * projections and partial RoPE, and with LongRoPE (the prompt past its original context); Gemma with head dim 256, GeGLU, scaled embeddings and 1 + w norms).
 *
 * Each fixture holds transformers' logits for its prompt and for the steps of its greedy continuation,
 * and the greedy tokens. The test feeds the prompt and then the continuation token by token through
 * the paged KV cache (blocks of 4 tokens) and checks every logits row against transformers' and the
 * greedy token of every step.
 *
 *   test_llm_families DATA_DIR WORK_DIR            the CPU forward (fp32), of the checkpoint directory
 *                                                  and of the engine `kiln build --hf` makes of it
 *                                                  (same logits; family and features in its config);
 *                                                  the prompt also in chunks of 5 (but with dynamic
 *                                                  RoPE and LongRoPE, which follow each step's context,
 *                                                  not the whole prompt's as in transformers). Also: the config of
 *                                                  every fixture, and an unknown family refused.
 *   test_llm_families DATA_DIR WORK_DIR --cuda     the CUDA forward in fp16 and bf16; exits 77
 *                                                  without a GPU. A fixture the CUDA forward refuses
 *                                                  as unsupported (a sliding window shorter than the
 *                                                  context: Mistral's) is reported and skipped.
 *
 * Tolerances: max |kiln - transformers| / max |transformers| over a fixture's rows <= 1e-4 on the CPU,
 * 2e-2 (fp16) or 5e-2 (bf16) on CUDA. Greedy tokens: equal on the CPU; on CUDA a different token
 * only where transformers' top-two gap is within twice the tolerance (a near tie). */
#include "check.h"

#include "core/npy.h"
#include "llm/kv_cache.h"
#include "llm/llm.h"
#include "llm/llm_cuda.h"
#include "llm/llm_engine.h"
#include "llm/llm_runner.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define BLOCK 4

/* A fixture: its directory, the family config.json names and what its config must say. */
typedef struct fixture {
    const char *name;
    kiln_llm_family family;
    int head_dim, rotary_dim, sliding_window;
    bool qkv_bias, scale_emb, tied;
    kiln_llm_gate_act act;
    kiln_rope_scaling rope;
} fixture;

static const fixture FIXTURES[] = {
    {"gpt2", KILN_FAMILY_GPT2, 64, 0, 0, false, false, true, KILN_GATE_SILU, KILN_ROPE_NONE},
    {"llama2_untied", KILN_FAMILY_LLAMA, 64, 0, 0, false, false, false, KILN_GATE_SILU, KILN_ROPE_NONE},
    {"llama3_tied", KILN_FAMILY_LLAMA, 64, 0, 0, false, false, true, KILN_GATE_SILU, KILN_ROPE_LLAMA3},
    {"llama_linear", KILN_FAMILY_LLAMA, 64, 0, 0, false, false, false, KILN_GATE_SILU, KILN_ROPE_LINEAR},
    {"llama_dynamic", KILN_FAMILY_LLAMA, 64, 0, 0, false, false, false, KILN_GATE_SILU, KILN_ROPE_DYNAMIC},
    {"mistral_window", KILN_FAMILY_MISTRAL, 64, 0, 6, false, false, false, KILN_GATE_SILU, KILN_ROPE_NONE},
    {"qwen2", KILN_FAMILY_QWEN2, 64, 0, 0, true, false, true, KILN_GATE_SILU, KILN_ROPE_NONE},
    {"phi3_partial", KILN_FAMILY_PHI3, 64, 32, 0, false, false, false, KILN_GATE_SILU, KILN_ROPE_NONE},
    {"phi3_longrope", KILN_FAMILY_PHI3, 64, 0, 0, false, false, false, KILN_GATE_SILU, KILN_ROPE_LONGROPE},
    {"gemma", KILN_FAMILY_GEMMA, 256, 0, 0, false, true, true, KILN_GATE_GELU_TANH, KILN_ROPE_NONE},
};
#define N_FIXTURES (int)(sizeof FIXTURES / sizeof *FIXTURES)

/* transformers' outputs for one fixture. */
typedef struct reference {
    kiln_tensor prompt, greedy, logits; /* int32 [P], int32 [G], float32 [P + G - 1, vocab] */
    int n_prompt, n_greedy, n_rows, vocab;
} reference;

static void reference_free(reference *r) {
    kiln_tensor_release(&r->prompt);
    kiln_tensor_release(&r->greedy);
    kiln_tensor_release(&r->logits);
}

static kiln_status read_npy(const char *dir, const char *file, kiln_tensor *t) {
    char path[8192];
    snprintf(path, sizeof path, "%s/%s", dir, file);
    return kiln_npy_read(path, t);
}

static bool reference_read(const char *dir, reference *r) {
    memset(r, 0, sizeof *r);
    if (read_npy(dir, "prompt.npy", &r->prompt) != KILN_OK || read_npy(dir, "greedy.npy", &r->greedy) != KILN_OK ||
        read_npy(dir, "logits.npy", &r->logits) != KILN_OK) {
        fprintf(stderr, "%s: %s\n", dir, kiln_last_error());
        return false;
    }
    r->n_prompt = (int)r->prompt.dims[0];
    r->n_greedy = (int)r->greedy.dims[0];
    r->n_rows = (int)r->logits.dims[0];
    r->vocab = (int)r->logits.dims[1];
    return r->prompt.dtype == KILN_I32 && r->greedy.dtype == KILN_I32 && r->logits.dtype == KILN_F32 &&
           r->n_rows == r->n_prompt + r->n_greedy - 1;
}

/* The token fed at row t: the prompt, then the greedy continuation but its last token. */
static int32_t token_at(const reference *r, int t) {
    return t < r->n_prompt ? ((const int32_t *)r->prompt.data)[t] : ((const int32_t *)r->greedy.data)[t - r->n_prompt];
}

static int argmax(const float *row, int n) {
    int best = 0;
    for (int i = 1; i < n; i++)
        if (row[i] > row[best]) best = i;
    return best;
}

/* The top-two gap of row, relative to its largest magnitude. */
static double top2_gap(const float *row, int n) {
    float a = -INFINITY, b = -INFINITY, mx = 0;
    for (int i = 0; i < n; i++) {
        if (row[i] > a) {
            b = a;
            a = row[i];
        } else if (row[i] > b) {
            b = row[i];
        }
        if (fabsf(row[i]) > mx) mx = fabsf(row[i]);
    }
    return mx > 0 ? (a - b) / mx : 0;
}

/* Every row of r fed through the runner in steps (the prompt in chunks of `chunk`, then one token per
 * step), all logits kept, into out [n_rows, vocab]. */
static kiln_status run_schedule(llm_runner *rn, kiln_kv_cache *kv, const reference *r, int chunk, float *out) {
    const int n = r->n_rows, nb = (n + BLOCK - 1) / BLOCK;
    int32_t *table = malloc((size_t)nb * sizeof *table), *tokens = malloc((size_t)n * sizeof *tokens);
    int32_t *pos = malloc((size_t)n * sizeof *pos);
    kiln_status s = table && tokens && pos ? KILN_OK : kiln_error(KILN_ERR_OUT_OF_MEMORY, "out of memory");
    for (int j = 0; s == KILN_OK && j < nb; j++)
        if ((table[j] = kiln_kv_cache_alloc_block(kv)) < 0) s = kiln_error(KILN_ERR_OUT_OF_MEMORY, "cache too small");
    for (int t = 0; s == KILN_OK && t < n;) {
        const int take = t < r->n_prompt ? (r->n_prompt - t < chunk ? r->n_prompt - t : chunk) : 1;
        for (int i = 0; i < take; i++) {
            tokens[i] = token_at(r, t + i);
            pos[i] = t + i;
        }
        const int32_t seq_start[2] = {0, take}, ctx = t + take;
        kiln_llm_batch b = {take, tokens, pos, 1, seq_start, &ctx, table, nb, true, NULL};
        s = llm_runner_forward(rn, kv, &b, out + (size_t)t * r->vocab);
        t += take;
    }
    for (int j = 0; table && j < nb; j++)
        if (table[j] >= 0) kiln_kv_cache_release_block(kv, table[j]);
    free(table);
    free(tokens);
    free(pos);
    return s;
}

/* Compares got [n_rows, vocab] with r: the logits within tol, the greedy tokens (exact when tol is
 * the CPU's, else but at near ties). Returns the relative error. */
static double compare(const char *what, const reference *r, const float *got, double tol) {
    const float *want = r->logits.data;
    const size_t count = (size_t)r->n_rows * r->vocab;
    double mx = 0, err = 0;
    for (size_t i = 0; i < count; i++) {
        if (fabs(want[i]) > mx) mx = fabs(want[i]);
        if (!(fabs((double)got[i] - want[i]) <= err)) err = fabs((double)got[i] - want[i]);
    }
    err /= mx;
    CHECKF(err <= tol, "%s: max relative logit error %.3g > %.3g", what, err, tol);
    int matched = 0;
    for (int i = 0; i < r->n_greedy; i++) {
        const int row = r->n_prompt - 1 + i, want_tok = ((const int32_t *)r->greedy.data)[i];
        const int got_tok = argmax(got + (size_t)row * r->vocab, r->vocab);
        const double gap = top2_gap(want + (size_t)row * r->vocab, r->vocab);
        matched += got_tok == want_tok;
        CHECKF(got_tok == want_tok || (tol > 1e-3 && gap <= 2 * tol),
               "%s: greedy token %d is %d, transformers' %d (top-two gap %.3g)", what, i, got_tok, want_tok, gap);
    }
    printf("  %-32s max rel err %.2e, greedy %d/%d\n", what, err, matched, r->n_greedy);
    return err;
}

/* The runner's logits for every row of r, for a chunked prompt; NULL on failure (reported). */
static float *runner_logits(llm_runner *rn, const reference *r, int chunk, const char *what) {
    const kiln_llm_config *c = llm_runner_config(rn);
    kiln_kv_cache *kv = NULL;
    float *out = malloc((size_t)r->n_rows * r->vocab * sizeof *out);
    const int blocks = (r->n_rows + BLOCK - 1) / BLOCK;
    kiln_status s = out ? KILN_OK : kiln_error(KILN_ERR_OUT_OF_MEMORY, "out of memory");
    if (s == KILN_OK && c->vocab != r->vocab) s = kiln_error(KILN_ERR_SHAPE, "vocab %d, fixture %d", c->vocab, r->vocab);
    if (s == KILN_OK) s = llm_runner_make_cache(rn, blocks, BLOCK, true, &kv);
    if (s == KILN_OK) s = run_schedule(rn, kv, r, chunk, out);
    kiln_kv_cache_free(kv);
    if (s != KILN_OK) {
        CHECKF(0, "%s: %s", what, kiln_last_error());
        free(out);
        return NULL;
    }
    return out;
}

/* The CPU forward of model m on r; the logits (caller frees) or NULL. */
static float *cpu_check(const kiln_llm_model *m, const reference *r, int chunk, const char *what) {
    llm_runner_options ro = {.target = "cpu"};
    llm_runner *rn = NULL;
    char desc[256];
    float *out = NULL;
    if (llm_runner_create(m, &ro, desc, sizeof desc, &rn) == KILN_OK) {
        out = runner_logits(rn, r, chunk, what);
        if (out) compare(what, r, out, 1e-4);
    } else {
        CHECKF(0, "%s: %s", what, kiln_last_error());
    }
    llm_runner_free(rn);
    return out;
}

static void check_config(const fixture *f, const kiln_llm_config *c, const char *what) {
    CHECKF(c->family == f->family && c->head_dim == f->head_dim && c->rotary_dim == f->rotary_dim &&
               c->sliding_window == f->sliding_window && c->qkv_bias == f->qkv_bias && c->scale_emb == f->scale_emb &&
               c->tied_embeddings == f->tied && c->gate_act == f->act && c->rope_scaling == f->rope,
           "%s: config family %s head_dim %d rotary_dim %d window %d qkv_bias %d scale_emb %d tied %d act %d rope %d",
           what, kiln_llm_family_name(c->family), c->head_dim, c->rotary_dim, c->sliding_window, c->qkv_bias,
           c->scale_emb, c->tied_embeddings, (int)c->gate_act, (int)c->rope_scaling);
}

/* The checkpoint directory on the CPU (one step and chunked prompt), then its engine: the same
 * logits, and the family in the engine's config. */
static void cpu_fixture(const fixture *f, const char *dir, const char *work, const reference *r) {
    kiln_llm_model *m = NULL;
    char what[96];
    snprintf(what, sizeof what, "%s cpu", f->name);
    if (kiln_llm_model_load_hf(dir, &m) != KILN_OK) {
        CHECKF(0, "%s: %s", what, kiln_last_error());
        return;
    }
    check_config(f, kiln_llm_model_config(m), what);
    float *one = cpu_check(m, r, r->n_prompt, what);
    snprintf(what, sizeof what, "%s cpu, prompt in 5s", f->name);
    /* dynamic NTK RoPE and LongRoPE follow each step's context, transformers' the whole prompt's */
    if (f->rope != KILN_ROPE_DYNAMIC && f->rope != KILN_ROPE_LONGROPE) free(cpu_check(m, r, 5, what));
    kiln_llm_model_free(m);

    char path[4096];
    snprintf(path, sizeof path, "%s/test_llm_families_%s.kiln", work, f->name);
    kiln_llm_engine_info info;
    snprintf(what, sizeof what, "%s engine", f->name);
    if (kiln_llm_engine_build(dir, NULL, path, &info) != KILN_OK || kiln_llm_model_load_engine(path, &m) != KILN_OK) {
        CHECKF(0, "%s: %s", what, kiln_last_error());
    } else {
        check_config(f, &info.cfg, what);
        kiln_llm_engine_info_free(&info);
        float *eng = cpu_check(m, r, r->n_prompt, what);
        for (size_t i = 0; one && eng && i < (size_t)r->n_rows * r->vocab; i++)
            if (fabsf(eng[i] - one[i]) > 1e-5f * (1.0f + fabsf(one[i]))) {
                CHECKF(0, "%s: logit %zu is %g, the checkpoint's %g", what, i, eng[i], one[i]);
                break;
            }
        free(eng);
    }
    kiln_llm_model_free(m);
    unlink(path);
    free(one);
}

/* The CUDA forward in fp16 and bf16; a model it refuses as unsupported is reported, not failed. */
static void cuda_fixture(const fixture *f, const char *dir, const reference *r) {
    kiln_llm_model *m = NULL;
    if (kiln_llm_model_load_hf(dir, &m) != KILN_OK) {
        CHECKF(0, "%s: %s", f->name, kiln_last_error());
        return;
    }
    for (int bf16 = 0; bf16 < 2; bf16++) {
        llm_runner_options ro = {.target = "cuda", .max_seqs = 1, .max_tokens = r->n_rows,
                                 .max_context = r->n_rows, .bf16 = bf16};
        llm_runner *rn = NULL;
        char desc[256], what[96];
        snprintf(what, sizeof what, "%s cuda %s", f->name, bf16 ? "bf16" : "fp16");
        kiln_status s = llm_runner_create(m, &ro, desc, sizeof desc, &rn);
        if (s == KILN_ERR_UNSUPPORTED) {
            printf("  %-32s skipped: %s\n", what, kiln_last_error());
        } else if (s != KILN_OK) {
            CHECKF(0, "%s: %s", what, kiln_last_error());
        } else {
            float *out = runner_logits(rn, r, r->n_prompt, what);
            if (out) compare(what, r, out, bf16 ? 5e-2 : 2e-2);
            free(out);
        }
        llm_runner_free(rn);
    }
    kiln_llm_model_free(m);
}

/* A config.json of an unknown family is refused naming it and the families kiln runs. */
static void unknown_family(const char *work) {
    char dir[4096], path[4200];
    snprintf(dir, sizeof dir, "%s/test_llm_families_falcon", work);
    snprintf(path, sizeof path, "%s/config.json", dir);
    CHECK(mkdir(dir, 0755) == 0 || errno == EEXIST);
    FILE *fp = fopen(path, "w");
    CHECK(fp != NULL);
    if (!fp) return;
    fputs("{\"model_type\": \"falcon\", \"vocab_size\": 10}", fp);
    fclose(fp);
    kiln_llm_config c;
    CHECK(kiln_llm_config_load_hf(dir, &c) == KILN_ERR_UNSUPPORTED);
    CHECKF(strstr(kiln_last_error(), "'falcon'") && strstr(kiln_last_error(), KILN_LLM_FAMILY_LIST),
           "message: %s", kiln_last_error());
    unlink(path);
    rmdir(dir);
}

int main(int argc, char **argv) {
    if (argc < 3 || (argc == 4 && strcmp(argv[3], "--cuda")) || argc > 4) {
        fprintf(stderr, "usage: test_llm_families DATA_DIR WORK_DIR [--cuda]\n");
        return 2;
    }
    const bool cuda = argc == 4;
    if (cuda) {
        char desc[256];
        if (kiln_llm_cuda_device_check(0, desc, sizeof desc) != KILN_OK) {
            printf("skipped: no GPU (%s)\n", desc);
            return 77;
        }
        printf("%s\n", desc);
    }
    for (int i = 0; i < N_FIXTURES; i++) {
        char dir[4096];
        snprintf(dir, sizeof dir, "%s/%s", argv[1], FIXTURES[i].name);
        reference r;
        if (!reference_read(dir, &r)) {
            CHECKF(0, "%s: the fixture's .npy files are missing or malformed", dir);
        } else if (cuda) {
            cuda_fixture(&FIXTURES[i], dir, &r);
        } else {
            cpu_fixture(&FIXTURES[i], dir, argv[2], &r);
        }
        reference_free(&r);
    }
    if (!cuda) unknown_family(argv[2]);
    return checks_report(cuda ? "test_llm_families --cuda" : "test_llm_families");
}
