/* llm_decode_bench.c — decode speed of the LLM forward on CUDA (llm_cuda.h) for random-weight models of
 * real shapes, made on the device without a checkpoint: GPT-2 124M and GPT-2 XL (1.5B) in fp16,
 * Llama-3-8B (GQA 32/8, d_ff 14336, vocab 128256) in bf16.
 *
 * Per model: batch 1 (a 128-token prompt prefilled in one step, then greedy decode: 10 warm-up steps
 * and 100 timed ones) and batch 64 or --batch B (that many prompts of 128 tokens, then 5 warm-up and 30
 * timed steps of all of them). A step is kiln_llm_cuda_forward returning greedy ids, timed on the host clock from the call to
 * the ids being back (so it includes launch overhead and the metadata upload). Prints the median
 * (and 10th-90th percentiles) ms per step, tokens/s, and the HBM floor of a step, weight bytes /
 * 4.8 TB/s (H200's peak; GPU.md measured 4.2 TB/s for copies), with the fraction of it achieved.
 *
 * With CUDA graphs (the default) batch 1 also gets a line for the same steps without graphs. After
 * each row, unless --no-breakdown, a profiled breakdown of 3 more steps: GPU ms of the layers' weight
 * products, attention, the small kernels (norms, RoPE + KV write, activation, embedding) and the
 * logits (final norm + lm_head), each timed between CUDA events with the launches queued before the
 * GPU starts; and the timed step minus their sum (metadata upload, launch overhead, gaps); then a
 * table by stage (each product, attention, norms, RoPE + KV write, activation, embedding, lm_head,
 * argmax): ms per step, share of the step, the bytes it moves at least and the TB/s that makes. After both
 * batches, a line per GEMV product shape: the configuration chosen and its time.
 *
 *   llm_decode_bench [--only gpt2,gpt2-xl,llama3-8b] [--gemv N] [--graphs 0|1] [--no-autotune]
 *                    [--breakdown | --no-breakdown] [--fuse off,on,pdl] [--int8 | --int4 | --fp8] [--batch B]
 *   (--int8, --int4, --fp8: every matrix weight-only INT8 or INT4, or FP8 with dynamic activation scales, as
 *   kiln bench --llm --dtype int8|int4|fp8 makes them; --batch: the second batch size, 2..512, default 64)
 *   (--fuse: each model once per listed KILN_LLM_FUSE mode, the decode path named above its rows, for an
 *   A/B of the fused GEMVs in one run; default: the environment's mode only)
 *   (N: gemv_max_tokens, default 8; KILN_LLM_GEMV=0..9 in the environment: one configuration of the
 *   GEMV family for every shape instead of the one chosen per shape; bench/llm_attn_bench.c times the
 *   decode attention kernel alone)
 * Exits 77 ("skipped: no GPU (...)") without a GPU, 1 on an error. */
#include "llm/llm_cuda.h"
#include "llm/llm_random.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define PROMPT 128
#define HBM_TBPS 4.8

typedef struct bench_model {
    const char *name;
    kiln_dtype dtype;
    kiln_llm_config cfg;
} bench_model;

/* The shapes from llm_random.h's table (kiln bench --llm --random uses the same), in their usual dtype. */
static void make_models(bench_model *bm) {
    static const char *const NAMES[3] = {"gpt2", "gpt2-xl", "llama3-8b"};
    for (int i = 0; i < 3; i++) {
        kiln_llm_shape sh;
        if (kiln_llm_shape_find(NAMES[i], &sh) != KILN_OK) abort(); /* the table names them */
        bm[i] = (bench_model){sh.name, sh.dtype, sh.cfg};
    }
}

/* Whether name is one of the comma-separated names in list. */
static int listed(const char *list, const char *name) {
    const size_t n = strlen(name);
    for (const char *p = list; *p; p = strchr(p, ',') ? strchr(p, ',') + 1 : p + strlen(p))
        if (!strncmp(p, name, n) && (p[n] == ',' || p[n] == 0)) return 1;
    return 0;
}

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* n sequences: their blocks, contexts and next tokens. */
typedef struct seqs {
    int n, max_blocks;
    int32_t *table, *ctx, *next;
} seqs;

/* Prefills n random prompts of PROMPT tokens (as many per step as max_tokens allows), leaving each
 * sequence's greedy next token in s->next. */
static int prefill(kiln_llm_cuda *g, kiln_llm_cuda_kv *kv, seqs *s, int max_tokens) {
    const kiln_llm_config *c = kiln_llm_cuda_config(g);
    const int per_step = max_tokens / PROMPT;
    int32_t *tok = malloc((size_t)max_tokens * 4), *pos = malloc((size_t)max_tokens * 4);
    int32_t *start = malloc((size_t)(per_step + 1) * 4), *ids = malloc((size_t)per_step * 4);
    uint32_t r = 99;
    int rc = tok && pos && start && ids ? 0 : 1;
    for (int s0 = 0; rc == 0 && s0 < s->n; s0 += per_step) {
        const int ns = s->n - s0 < per_step ? s->n - s0 : per_step;
        for (int i = 0; i < ns; i++) {
            start[i] = i * PROMPT;
            for (int t = 0; t < PROMPT; t++) {
                r = r * 1664525u + 1013904223u;
                tok[i * PROMPT + t] = (int32_t)((r >> 8) % (uint32_t)c->vocab);
                pos[i * PROMPT + t] = t;
            }
            s->ctx[s0 + i] = PROMPT;
        }
        start[ns] = ns * PROMPT;
        kiln_llm_batch b = {ns * PROMPT, tok, pos, ns, start, s->ctx + s0, s->table + (size_t)s0 * s->max_blocks,
                            s->max_blocks, false, NULL};
        if (kiln_llm_cuda_forward(g, kv, &b, NULL, ids) != KILN_OK) rc = 1;
        for (int i = 0; rc == 0 && i < ns; i++) s->next[s0 + i] = ids[i];
    }
    free(tok);
    free(pos);
    free(start);
    free(ids);
    return rc;
}

/* Times `steps` greedy decode steps of all sequences after `warm` untimed ones; ms per step into ms[]. */
static int decode(kiln_llm_cuda *g, kiln_llm_cuda_kv *kv, seqs *s, int warm, int steps, double *ms) {
    const int n = s->n;
    int32_t *pos = malloc((size_t)n * 4), *start = malloc((size_t)(n + 1) * 4), *ids = malloc((size_t)n * 4);
    int rc = pos && start && ids ? 0 : 1;
    for (int k = 0; rc == 0 && k < warm + steps; k++) {
        for (int i = 0; i < n; i++) {
            pos[i] = s->ctx[i];
            s->ctx[i]++;
            start[i] = i;
        }
        start[n] = n;
        kiln_llm_batch b = {n, s->next, pos, n, start, s->ctx, s->table, s->max_blocks, false, NULL};
        double t0 = now_ms();
        if (kiln_llm_cuda_forward(g, kv, &b, NULL, ids) != KILN_OK) rc = 1;
        double t1 = now_ms();
        if (k >= warm) ms[k - warm] = t1 - t0;
        memcpy(s->next, ids, (size_t)n * 4);
    }
    free(pos);
    free(start);
    free(ids);
    return rc;
}

#define EAGER_WARM 3
#define EAGER_STEPS 20
#define PROFILE_STEPS 3

static bool g_breakdown = true;

static bool g_int8 = false; /* --int8: weight-only INT8 matrices (options.random_int8) */
static bool g_int4 = false; /* --int4: weight-only INT4 matrices (options.random_int4) */
static bool g_fp8 = false;  /* --fp8: FP8 matrices with dynamic activation scales (options.random_fp8) */

/* Bytes per weight of the bench's matrices (INT4: a nibble, and 8 bytes of scale and zero point per 128). */
static double weight_elem_bytes(void) { return g_int4 ? 0.5625 : g_int8 || g_fp8 ? 1.0 : 2.0; }

/* The name of the bench's weight format for model dtype dt. */
static const char *weight_name(kiln_dtype dt) {
    return g_int4 ? "int4" : g_int8 ? "int8" : g_fp8 ? "fp8" : dt == KILN_F16 ? "fp16" : "bf16";
}

/* Weight bytes of the layers' products (the GEMM/GEMV class) and of lm_head (the logits class). */
static void product_bytes(const kiln_llm_config *c, double *layers, double *head) {
    const double d = c->d_model, qd = (double)c->n_head * c->head_dim, kvd = (double)c->n_kv_head * c->head_dim;
    const double up = c->arch == KILN_LLM_GPT2 ? c->d_ff : 2.0 * c->d_ff, eb = weight_elem_bytes();
    *layers = c->n_layer * ((qd + 2 * kvd) * d + d * qd + up * d + d * c->d_ff) * eb;
    *head = (double)c->vocab * d * eb;
}

/* The bytes a stage of one decode step of the n sequences of s must move at least (weights, the KV
 * cache read by attention, the logits read by the argmax); 0 where it is not counted. */
static double stage_bytes(const kiln_llm_config *c, const seqs *s, int stage) {
    const double d = c->d_model, qd = (double)c->n_head * c->head_dim, kvd = (double)c->n_kv_head * c->head_dim;
    const double up = c->arch == KILN_LLM_GPT2 ? c->d_ff : 2.0 * c->d_ff, eb = weight_elem_bytes(), L = c->n_layer;
    double ctx = 0;
    for (int i = 0; i < s->n; i++) ctx += s->ctx[i];
    switch (stage) {
    case KILN_LLM_STAGE_QKV: return L * (qd + 2 * kvd) * d * eb;
    case KILN_LLM_STAGE_O: return L * d * qd * eb;
    case KILN_LLM_STAGE_UP: return L * up * d * eb;
    case KILN_LLM_STAGE_DOWN: return L * d * c->d_ff * eb;
    case KILN_LLM_STAGE_ATTN: return L * ctx * 2 * kvd * 2; /* 16-bit keys and values */
    case KILN_LLM_STAGE_LM_HEAD: return (double)c->vocab * d * eb + (double)s->n * c->vocab * 4;
    case KILN_LLM_STAGE_ARGMAX: return (double)s->n * c->vocab * 4;
    default: return 0;
    }
}

/* One line per stage of the profiled steps in pr: GPU ms per step, its share of the step med, the
 * bytes it moves at least and the rate that makes. */
static void print_stages(const kiln_llm_config *c, const seqs *s, const kiln_llm_cuda_probe *pr, double med) {
    static const char *const NAMES[KILN_LLM_STAGES] = {"qkv", "o", "up", "down", "attention", "norms",
                                                       "rope+kv", "activation", "embedding", "lm_head", "argmax"};
    printf("    %-11s %9s %7s %10s %8s\n", "stage", "ms/step", "% step", "MB/step", "TB/s");
    for (int i = 0; i < KILN_LLM_STAGES; i++) {
        const double ms = pr->stage_ms[i] / pr->steps, b = stage_bytes(c, s, i);
        if (b > 0 && ms > 0)
            printf("    %-11s %9.4f %6.1f%% %10.2f %8.2f\n", NAMES[i], ms, 100 * ms / med, b * 1e-6, b / ms * 1e-9);
        else
            printf("    %-11s %9.4f %6.1f%% %10s %8s\n", NAMES[i], ms, 100 * ms / med, "-", "-");
    }
}

/* The per-phase GPU times of PROFILE_STEPS decode steps against the timed median step `med`. */
static int breakdown(kiln_llm_cuda *g, kiln_llm_cuda_kv *kv, seqs *s, kiln_llm_cuda_probe *pr, double med,
                     const char *name, int batch) {
    double ms[PROFILE_STEPS];
    const kiln_llm_cuda_probe keep = *pr;
    memset(pr, 0, sizeof *pr);
    pr->profile = true;
    int rc = decode(g, kv, s, 0, PROFILE_STEPS, ms);
    pr->profile = false;
    if (rc == 0 && pr->steps > 0) {
        const double k = 1.0 / pr->steps, gm = pr->gemm_ms * k, at = pr->attn_ms * k, ot = pr->other_ms * k,
                     lg = pr->logits_ms * k, sum = pr->gpu_ms * k, rest = med - sum;
        double lb, hb;
        product_bytes(kiln_llm_cuda_config(g), &lb, &hb);
        printf("  breakdown %s batch %d, GPU ms per step (eager, events between kernels) vs the %.3f ms step:\n", name,
               batch, med);
        printf("    layer products %.3f (%.0f%%, %.0f GB/s)  attention %.3f (%.0f%%)  norms+rope+act+other %.3f (%.0f%%)  "
               "logits %.3f (%.0f%%, %.0f GB/s)\n", gm, 100 * gm / med, lb / gm * 1e-6, at, 100 * at / med, ot,
               100 * ot / med, lg, 100 * lg / med, hb / lg * 1e-6);
        printf("    GPU sum %.3f; step - GPU sum (metadata upload, launch overhead, gaps) %.3f (%.0f%%); "
               "eager host enqueue %.3f ms\n", sum, rest, 100 * rest / med, pr->enqueue_ms * k);
        print_stages(kiln_llm_cuda_config(g), s, pr, med);
    }
    const int steps = pr->steps;
    *pr = keep;
    if (rc == 0 && steps == 0) printf("  breakdown %s batch %d: no profiled step\n", name, batch);
    return rc;
}

/* The GEMV configuration chosen for each product shape the model ran (one line per shape). */
static void print_gemv_picks(const kiln_llm_cuda *g, const char *name) {
    char line[320];
    const int n = kiln_llm_cuda_gemv_picks(g, -1, line, 0);
    if (n == 0) {
        printf("  GEMV %s: no configuration chosen (forced by KILN_LLM_GEMV, or no GEMV product)\n\n",
               name);
        return;
    }
    printf("  GEMV %s, configuration per shape (timed once, weights from HBM):\n", name);
    for (int i = 0; i < n; i++) {
        kiln_llm_cuda_gemv_picks(g, i, line, sizeof line);
        printf("    %s\n", line);
    }
    printf("\n");
}

/* One batch size on a fresh cache: prefill, decode, print a row. */
static int run_batch(const bench_model *bm, kiln_llm_cuda *g, kiln_llm_cuda_probe *pr, int batch, int warm, int steps,
                     int max_tokens) {
    /* room for the steps after the timed ones (the line without graphs at batch 1, the breakdown) */
    const int extra = (batch == 1 ? EAGER_WARM + EAGER_STEPS : 0) + PROFILE_STEPS;
    const int bs = 16, max_blocks = (PROMPT + warm + steps + extra + bs - 1) / bs + 1;
    kiln_llm_cuda_kv_options ko = {.block_size = bs, .mem_fraction = 0.5, .max_bytes = (uint64_t)24 << 30};
    kiln_llm_cuda_kv *kv = NULL;
    seqs s = {batch, max_blocks, malloc((size_t)batch * max_blocks * 4), malloc((size_t)batch * 4),
              malloc((size_t)batch * 4)};
    double *ms = malloc((size_t)steps * sizeof *ms);
    int rc = s.table && s.ctx && s.next && ms ? 0 : 1;
    if (rc == 0 && kiln_llm_cuda_kv_create(g, &ko, &kv) != KILN_OK) rc = 1;
    for (int i = 0; rc == 0 && i < batch * max_blocks; i++)
        if ((s.table[i] = kiln_llm_cuda_kv_alloc_block(kv)) < 0) {
            fprintf(stderr, "llm_decode_bench: the KV cache holds only %d blocks\n", kiln_llm_cuda_kv_blocks(kv));
            rc = 2;
        }
    if (rc == 0) rc = prefill(g, kv, &s, max_tokens);
    if (rc == 0) rc = decode(g, kv, &s, warm, steps, ms);
    if (rc == 0) {
        qsort(ms, (size_t)steps, sizeof *ms, cmp_double);
        const double med = ms[steps / 2], p10 = ms[steps / 10], p90 = ms[steps * 9 / 10];
        const double gb = (double)kiln_llm_cuda_weight_bytes(g) / 1e9, floor_ms = gb / (HBM_TBPS * 1e3) * 1e3;
        printf("%-10s %-5s %7.2f %5d %9.3f (%.3f-%.3f) %11.0f %9.3f %8.0f%% %8.0f\n", bm->name,
               weight_name(bm->dtype), gb, batch, med, p10, p90, batch * 1e3 / med, floor_ms,
               100.0 * floor_ms / med, gb / med * 1e3);
        if (!pr->eager)
            printf("  (CUDA graphs: %d captured, %d replays%s%s)\n", pr->graphs_captured, pr->graph_replays,
                   pr->graph_error[0] ? "; capture failed: " : "", pr->graph_error);
        if (batch == 1 && !pr->eager) { /* the same steps without graphs */
            double ems[EAGER_STEPS];
            pr->eager = true;
            rc = decode(g, kv, &s, EAGER_WARM, EAGER_STEPS, ems);
            pr->eager = false;
            if (rc == 0) {
                qsort(ems, EAGER_STEPS, sizeof *ems, cmp_double);
                const double em = ems[EAGER_STEPS / 2];
                printf("%-10s %-5s %7.2f %5d %9.3f (%.3f-%.3f) %11.0f %9.3f %8.0f%% %8.0f  <- without graphs\n",
                       bm->name, weight_name(bm->dtype), gb, batch, em, ems[EAGER_STEPS / 10],
                       ems[EAGER_STEPS * 9 / 10], batch * 1e3 / em, floor_ms, 100.0 * floor_ms / em, gb / em * 1e3);
            }
        }
        if (rc == 0 && g_breakdown) rc = breakdown(g, kv, &s, pr, med, bm->name, batch);
    }
    if (rc == 1) fprintf(stderr, "llm_decode_bench: %s batch %d: %s\n", bm->name, batch, kiln_last_error());
    kiln_llm_cuda_kv_free(kv);
    free(s.table);
    free(s.ctx);
    free(s.next);
    free(ms);
    return rc;
}

int main(int argc, char **argv) {
    const char *only = NULL, *fuse = NULL;
    int gemv = 8, graphs = 1, autotune = 1, big = 64;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--only") && i + 1 < argc) {
            only = argv[++i];
        } else if (!strcmp(argv[i], "--gemv") && i + 1 < argc) {
            gemv = atoi(argv[++i]);
        } else if (!strcmp(argv[i], "--graphs") && i + 1 < argc) {
            graphs = atoi(argv[++i]);
        } else if (!strcmp(argv[i], "--fuse") && i + 1 < argc) {
            fuse = argv[++i];
        } else if (!strcmp(argv[i], "--no-autotune")) {
            autotune = 0;
        } else if (!strcmp(argv[i], "--breakdown")) {
            g_breakdown = true;
        } else if (!strcmp(argv[i], "--no-breakdown")) {
            g_breakdown = false;
        } else if (!strcmp(argv[i], "--int8")) {
            g_int8 = true;
        } else if (!strcmp(argv[i], "--int4")) {
            g_int4 = true;
        } else if (!strcmp(argv[i], "--fp8")) {
            g_fp8 = true;
        } else if (!strcmp(argv[i], "--batch") && i + 1 < argc) {
            big = atoi(argv[++i]);
            if (big < 2 || big > 512) {
                fprintf(stderr, "llm_decode_bench: --batch %s (2..512)\n", argv[i]);
                return 2;
            }
        } else {
            fprintf(stderr, "usage: llm_decode_bench [--only gpt2,gpt2-xl,llama3-8b] [--gemv N] [--graphs 0|1] "
                            "[--no-autotune] [--breakdown | --no-breakdown] [--fuse off,on,pdl] [--int8 | --int4 | --fp8] [--batch B]\n");
            return 2;
        }
    }
    char desc[256];
    if (kiln_llm_cuda_device_check(0, desc, sizeof desc) != KILN_OK) {
        printf("skipped: no GPU (%s)\n", desc);
        return 77;
    }
    const char *gemv_env = getenv("KILN_LLM_GEMV");
    const char *gemv_kind = gemv_env && *gemv_env ? gemv_env : "tuned";
    printf("llm_decode_bench on %s, random weights, context %d + decode, gemv_max_tokens %d, %s GEMV (KILN_LLM_GEMV), "
           "CUDA graphs %s, GEMV + cuBLASLt autotune %s\n", desc, PROMPT, gemv, gemv_kind, graphs ? "on" : "off",
           autotune ? "on" : "off");
    printf("floor = weight bytes / %.1f TB/s per step; GB/s = weight bytes / median step time\n\n", HBM_TBPS);
    printf("%-10s %-5s %7s %5s %9s %-13s %11s %9s %9s %8s\n", "model", "dtype", "GB", "batch", "ms/step", "(p10-p90)",
           "tokens/s", "floor ms", "of floor", "GB/s");
    bench_model bm[3];
    make_models(bm);
    int rc = 0;
    static const char *const modes[] = {"off", "on", "pdl"};
    for (int run = 0; run < 3 * 3; run++) {
        const int i = run / 3;
        if (only && !listed(only, bm[i].name)) continue;
        if (fuse ? !listed(fuse, modes[run % 3]) : run % 3 != 0) continue;
        if (fuse) setenv("KILN_LLM_FUSE", modes[run % 3], 1);
        kiln_llm_cuda_options o;
        kiln_llm_cuda_options_default(&o);
        o.max_tokens = 2048;
        o.max_seqs = big;
        o.max_context = 1024;
        o.gemv_max_tokens = gemv;
        o.use_graphs = graphs != 0;
        o.gemm_autotune = autotune != 0;
        o.random_int8 = g_int8;
        o.random_int4 = g_int4;
        o.random_fp8 = g_fp8;
        kiln_llm_cuda_probe probe;
        memset(&probe, 0, sizeof probe);
        o.probe = &probe;
        kiln_llm_cuda *g;
        if (kiln_llm_cuda_create_random(&bm[i].cfg, bm[i].dtype, &o, 7 + (uint64_t)i, &g) != KILN_OK) {
            fprintf(stderr, "llm_decode_bench: %s: %s\n", bm[i].name, kiln_last_error());
            rc = 1;
            continue;
        }
        printf("%s, %s:\n", bm[i].name, kiln_llm_cuda_decode_path(g));
        probe.eager = !graphs;
        if (run_batch(&bm[i], g, &probe, 1, 10, 100, o.max_tokens)) rc = 1;
        memset(&probe, 0, sizeof probe);
        probe.eager = !graphs;
        if (run_batch(&bm[i], g, &probe, big, 5, 30, o.max_tokens)) rc = 1;
        print_gemv_picks(g, bm[i].name);
        kiln_llm_cuda_free(g);
    }
    return rc;
}
