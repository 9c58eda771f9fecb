/* cmd_bench_llm.c — `kiln bench --llm ENGINE|DIR` or `kiln bench --llm --random SHAPE`: trtllm-bench's
 * measurements of an LLM (src/bench/bench_llm.h does the work, through the public LLM API): parses the
 * options, checks a random shape against the host, has the model opened (or made with random weights:
 * on the GPU for --target cuda) and measured for every batch size or the saturated run, prints and
 * writes the JSON report. */
#include "cli.h"

#include "bench/bench_llm.h"
#include "core/status.h"
#include "kiln/kiln_llm.h"
#include "llm/llm_random.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* Host fp32 random weights above this many parameters are refused on the CPU. */
#define CPU_MAX_PARAMS 2000000000LL
#define SATURATE_REQUESTS 512
#define SATURATE_CONCURRENCY 256
#define SATURATE_WARMUP 2
#define MAX_NUM_TOKENS 8192

static const char *USAGE =
    "usage: kiln bench --llm ENGINE.kiln|DIR [options]\n"
    "       kiln bench --llm --random SHAPE [--dtype fp16|bf16|int8|w8a8|int4|fp8] [options]\n"
    "\n"
    "Measures an LLM (an engine from `kiln build --hf`, a Hugging Face checkpoint directory, or random\n"
    "weights of a published shape) the way trtllm-bench does: for each batch size, that many requests\n"
    "of random prompts (seeded) submitted at once, each generating exactly --output-len tokens (eos\n"
    "ignored), greedy unless --temperature, through the LLM API. Reports prefill time, TTFT, TPOT (time\n"
    "per output token after the first), end-to-end latency (p50/p90/p95/p99), output and total\n"
    "tokens/s, the decode bandwidth and the environment. With --saturate / --requests /\n"
    "--concurrency: trtllm-bench's throughput run instead (N requests, at most C in flight, continuous\n"
    "batching).\n"
    "\n"
    "options:\n"
    "  --random SHAPE         no checkpoint: random weights of SHAPE (gpt2, gpt2-medium, gpt2-large,\n"
    "                         gpt2-xl, llama3-8b, tiny-gpt2, tiny-llama, qwen2.5-7b, gemma-7b,\n"
    "                         tiny-gemma); made on the GPU with --target\n"
    "                         cuda, host fp32 on the CPU (shapes up to 2B parameters)\n"
    "  --dtype fp16|bf16|int8|w8a8|int4|fp8\n"
    "                         with --random on cuda: the weights' precision (default: the shape's,\n"
    "                         fp16 for GPT-2, bf16 for Llama); int8 / int4: weight-only INT8 / INT4\n"
    "                         matrices (the layout of --weights int8 / int4 engines), computed in the\n"
    "                         shape's 16-bit type; w8a8: int8 with the layers' products int8 x int8\n"
    "                         (activation scale 8 / 127), as --weights w8a8 engines; fp8: E4M3\n"
    "                         matrices and activations (dynamic scales, --weights fp8's layout)\n"
    "  --batch N,N,...        batch sizes (default 1,8,64)\n"
    "  --input-len N          prompt tokens per request (default 128)\n"
    "  --output-len N         generated tokens per request (default 128)\n"
    "  --iterations N         measured iterations per batch size (default 3)\n"
    "  --warmup N             unmeasured iterations first (default 1)\n"
    "  --seed N               seed of the random prompts (and of --random's weights; default 0)\n"
    "  --prefix-len N         the first N of the --input-len tokens of every prompt are one shared system\n"
    "                         prompt (cached by the warm-up: TTFT then shows the cached prefill; default 0)\n"
    "  --no-prefix-cache      turn automatic prefix caching off (on by default)\n"
    "  --spec ngram|off       speculative decoding by prompt lookup (default off); acceptance rate and\n"
    "                         tokens per speculating step in the report\n"
    "  --draft MODEL          speculative decoding with a draft model of the same tokenizer (--spec draft):\n"
    "                         an engine or checkpoint directory; with --random, a shape name (random\n"
    "                         weights of --seed: the --random shape itself accepts every draft, another\n"
    "                         shape nearly none); layers:N, the model's own first N layers (early exit)\n"
    "  --draft-tokens K       draft tokens per step with --spec or --draft (1..16, default 4)\n"
    "  --temperature T        sample every request at temperature T (top-k, top-p, min-p off; request k\n"
    "                         seeded with --seed + k), to time the sampler in the step (default 0: greedy)\n"
    "  --saturate             the saturated throughput run: --requests 512 --concurrency 256 unless given\n"
    "  --requests N           saturated run: requests in all (default 512)\n"
    "  --concurrency C        saturated run: most requests in flight, the scheduler's max_num_seqs\n"
    "                         (default 256); the KV cache holds C whole requests where memory allows\n"
    "  --max-num-tokens N     saturated run: tokens per step (default 8192, at least C)\n"
    "                         (--warmup counts warm-up requests in a saturated run, default 2)\n"
    "  --target cpu|cuda      the forward step (default cpu; cuda needs a build with the cuda backend)\n"
    "  --device N             GPU ordinal (default 0)\n"
    "  --kv-cache auto|fp8    the KV cache (default auto; fp8: E4M3 with per-head scales)\n"
    "  --calib-text FILE      --kv-cache fp8: scales from the model's keys and values over FILE\n"
    "  --timing-cache FILE    cuda: reuse and extend the product tactics timed in FILE (kiln build's\n"
    "                         --timing-cache file), so that repeated runs time nothing twice\n"
    "  --export-json FILE     every statistic and the environment (schema: docs/llm.md)\n"
    "  --ceilings-file FILE   measured ceilings (default ~/.cache/kiln/ceilings.json)\n"
    "  -h, --help             this help\n";

typedef struct llm_args {
    const char *model, *json, *ceilings_file, *shape, *dtype;
    bool saturate, warmup_set;
    kiln_bench_llm_config bc;
} llm_args;

/* An integer in [lo, hi] for flag s; else a usage error (returns 2), -1 on success. */
static int parse_int(const char *s, const char *val, double lo, double hi, int *out) {
    char *end;
    errno = 0;
    double v = strtod(val, &end);
    if (end == val || *end || errno || !(v >= lo && v <= hi) || v != floor(v))
        return cli_usage_error("bench ", "%s expects an integer in [%g, %g], got '%s'", s, lo, hi, val);
    *out = (int)v;
    return -1;
}

static int parse_batches(llm_args *a, const char *val) {
    a->bc.nbatches = 0;
    for (const char *p = val;;) {
        char item[32];
        const char *comma = strchr(p, ',');
        size_t n = comma ? (size_t)(comma - p) : strlen(p);
        if (a->bc.nbatches == KILN_BENCH_LLM_MAX_BATCHES)
            return cli_usage_error("bench ", "--batch takes at most %d sizes", KILN_BENCH_LLM_MAX_BATCHES);
        if (n == 0 || n >= sizeof item) return cli_usage_error("bench ", "--batch expects N,N,..., got '%s'", val);
        memcpy(item, p, n);
        item[n] = 0;
        int rc = parse_int("--batch", item, 1, 4096, &a->bc.batches[a->bc.nbatches++]);
        if (rc >= 0) return rc;
        if (!comma) return -1;
        p = comma + 1;
    }
}

static int parse_args(int argc, char **argv, llm_args *a) {
    memset(a, 0, sizeof *a);
    a->bc = (kiln_bench_llm_config){.batches = {1, 8, 64}, .nbatches = 3, .input_len = 128, .output_len = 128,
                                    .iterations = 3, .warmup = 1, .target = "cpu"};
    static const char *const TAKES[] = {"--llm", "--batch", "--input-len", "--output-len", "--iterations", "--warmup",
                                        "--seed", "--target", "--device", "--export-json", "--ceilings-file",
                                        "--random", "--dtype", "--requests", "--concurrency", "--max-num-tokens",
                                        "--prefix-len", "--timing-cache", "--spec", "--draft-tokens", "--draft",
                                        "--temperature", "--kv-cache", "--calib-text"};
    for (int i = 1; i < argc; i++) {
        const char *s = argv[i];
        if (cli_is_help(s)) {
            fputs(USAGE, stdout);
            return 0;
        }
        if (!strcmp(s, "--no-prefix-cache")) {
            a->bc.no_prefix_cache = true;
            continue;
        }
        if (!strcmp(s, "--saturate")) {
            a->saturate = true;
            continue;
        }
        if (!strcmp(s, "--llm") && (i + 1 >= argc || argv[i + 1][0] == '-')) continue; /* --llm --random SHAPE */
        bool takes = false;
        for (size_t k = 0; k < sizeof TAKES / sizeof *TAKES; k++) takes |= !strcmp(s, TAKES[k]);
        if (!takes) return cli_usage_error("bench ", "%s %s with --llm", s[0] == '-' ? "unknown option" : "unexpected argument", s);
        if (i + 1 >= argc) return cli_usage_error("bench ", "%s needs a value", s);
        const char *val = argv[++i];
        int rc = -1, seed;
        if (!strcmp(s, "--llm")) a->model = val;
        else if (!strcmp(s, "--batch")) rc = parse_batches(a, val);
        else if (!strcmp(s, "--input-len")) rc = parse_int(s, val, 1, 1 << 20, &a->bc.input_len);
        else if (!strcmp(s, "--output-len")) rc = parse_int(s, val, 1, 1 << 20, &a->bc.output_len);
        else if (!strcmp(s, "--iterations")) rc = parse_int(s, val, 1, 1e6, &a->bc.iterations);
        else if (!strcmp(s, "--warmup")) {
            rc = parse_int(s, val, 0, 1e6, &a->bc.warmup);
            a->warmup_set = true;
        } else if (!strcmp(s, "--requests")) rc = parse_int(s, val, 1, 1 << 24, &a->bc.requests);
        else if (!strcmp(s, "--concurrency")) rc = parse_int(s, val, 1, 1 << 16, &a->bc.concurrency);
        else if (!strcmp(s, "--max-num-tokens")) rc = parse_int(s, val, 1, 1 << 20, &a->bc.max_num_tokens);
        else if (!strcmp(s, "--prefix-len")) rc = parse_int(s, val, 0, 1 << 20, &a->bc.prefix_len);
        else if (!strcmp(s, "--random")) a->shape = val;
        else if (!strcmp(s, "--dtype")) {
            if (strcmp(val, "fp16") && strcmp(val, "bf16") && strcmp(val, "int8") && strcmp(val, "w8a8") &&
                strcmp(val, "int4") && strcmp(val, "fp8"))
                return cli_usage_error("bench ", "--dtype expects fp16, bf16, int8, w8a8, int4 or fp8, got '%s'", val);
            a->dtype = val;
        }
        else if (!strcmp(s, "--device")) rc = parse_int(s, val, 0, 1024, &a->bc.device);
        else if (!strcmp(s, "--seed")) {
            if ((rc = parse_int(s, val, 0, 2147483647, &seed)) < 0) a->bc.seed = (uint64_t)seed;
        } else if (!strcmp(s, "--target")) {
            if (strcmp(val, "cpu") && strcmp(val, "cuda")) return cli_usage_error("bench ", "--target expects cpu or cuda, got '%s'", val);
            a->bc.target = val;
        } else if (!strcmp(s, "--export-json")) a->json = val;
        else if (!strcmp(s, "--timing-cache")) a->bc.timing_cache = val;
        else if (!strcmp(s, "--calib-text")) a->bc.calib_text = val;
        else if (!strcmp(s, "--kv-cache")) {
            if (strcmp(val, "auto") && strcmp(val, "fp8")) return cli_usage_error("bench ", "--kv-cache expects auto or fp8, got '%s'", val);
            a->bc.kv_cache_dtype = val;
        } else if (!strcmp(s, "--spec")) {
            if (strcmp(val, "ngram") && strcmp(val, "draft") && strcmp(val, "off"))
                return cli_usage_error("bench ", "--spec expects ngram, draft or off, got '%s'", val);
            a->bc.spec = val;
        } else if (!strcmp(s, "--draft")) {
            a->bc.draft = val;
        } else if (!strcmp(s, "--draft-tokens")) rc = parse_int(s, val, 1, KILN_LLM_MAX_DRAFT_TOKENS, &a->bc.draft_tokens);
        else if (!strcmp(s, "--temperature")) {
            char *end;
            errno = 0;
            double t = strtod(val, &end);
            if (end == val || *end || errno || !(t >= 0 && t <= 100))
                return cli_usage_error("bench ", "--temperature expects a number in [0, 100], got '%s'", val);
            a->bc.temperature = (float)t;
        }
        else a->ceilings_file = val;
        if (rc >= 0) return rc;
    }
    if (!a->model && !a->shape)
        return cli_usage_error("bench ", "--llm needs an LLM engine or checkpoint directory, or --random SHAPE");
    if (a->model && a->shape) return cli_usage_error("bench ", "--llm takes a model or --random SHAPE, not both");
    if (a->bc.prefix_len >= a->bc.input_len)
        return cli_usage_error("bench ", "--prefix-len %d must be below --input-len %d (each prompt ends with its own "
                               "tokens)", a->bc.prefix_len, a->bc.input_len);
    if (a->bc.draft && !a->bc.spec) a->bc.spec = "draft";
    if ((a->bc.spec && !strcmp(a->bc.spec, "draft")) != (a->bc.draft != NULL))
        return cli_usage_error("bench ", a->bc.draft ? "--draft goes with --spec draft" : "--spec draft needs --draft");
    if (a->bc.draft_tokens && (!a->bc.spec || !strcmp(a->bc.spec, "off")))
        return cli_usage_error("bench ", "--draft-tokens goes with --spec ngram or --draft");
    if (a->dtype && !a->shape) return cli_usage_error("bench ", "--dtype goes with --random (an engine keeps its precision)");
    if (a->saturate || a->bc.requests || a->bc.concurrency || a->bc.max_num_tokens) {
        if (!a->bc.requests) a->bc.requests = SATURATE_REQUESTS;
        if (!a->bc.concurrency) a->bc.concurrency = a->bc.requests < SATURATE_CONCURRENCY ? a->bc.requests : SATURATE_CONCURRENCY;
        if (!a->bc.max_num_tokens) a->bc.max_num_tokens = MAX_NUM_TOKENS;
        if (!a->warmup_set) a->bc.warmup = SATURATE_WARMUP;
    }
    return -1;
}

/* --random SHAPE: the shape's config into *sh and the weights' precision into d; 2 for an unknown shape
 * or one too large for the CPU, -1 on success. */
static int random_shape(const llm_args *a, kiln_llm_shape *sh, kiln_bench_llm_doc *d, char *path, size_t cap) {
    if (kiln_llm_shape_find(a->shape, sh) != KILN_OK)
        return cli_usage_error("bench ", "--random: unknown shape '%s' (shapes: %s)", a->shape, kiln_llm_shape_names());
    const int64_t n = kiln_llm_config_params(&sh->cfg);
    const bool cuda = !strcmp(a->bc.target, "cuda");
    if (!cuda && a->dtype &&
        (!strcmp(a->dtype, "int8") || !strcmp(a->dtype, "w8a8") || !strcmp(a->dtype, "int4") || !strcmp(a->dtype, "fp8")))
        return cli_usage_error("bench ", "--random with --dtype %s runs on --target cuda (on the CPU, bench an engine "
                               "built with --weights %s)", a->dtype, a->dtype);
    if (!cuda && n > CPU_MAX_PARAMS)
        return cli_usage_error("bench ", "--random %s has %.2f B parameters: too large for --target cpu (its fp32 host "
                               "weights would take %.1f GB; the CPU takes shapes up to %.0f B parameters); use --target "
                               "cuda, which makes the weights on the GPU", a->shape, (double)n / 1e9, (double)n * 4 / 1e9,
                               (double)CPU_MAX_PARAMS / 1e9);
    snprintf(path, cap, "random:%s", sh->name);
    d->shape = sh->name;
    d->n_params = n;
    d->weights = !cuda ? KILN_PRECISION_FP32
                 : a->dtype ? (!strcmp(a->dtype, "bf16")   ? KILN_PRECISION_BF16
                               : !strcmp(a->dtype, "int8") ? KILN_PRECISION_INT8
                               : !strcmp(a->dtype, "w8a8") ? KILN_PRECISION_W8A8
                               : !strcmp(a->dtype, "int4") ? KILN_PRECISION_INT4
                               : !strcmp(a->dtype, "fp8")  ? KILN_PRECISION_FP8 : KILN_PRECISION_FP16)
                 : sh->dtype == KILN_BF16 ? KILN_PRECISION_BF16 : KILN_PRECISION_FP16;
    return -1;
}

static int run(llm_args *a) {
    kiln_bench_llm_doc *d = calloc(1, sizeof *d);
    if (!d) return cli_fail();
    time_t now = time(NULL);
    strftime(d->started_at, sizeof d->started_at, "%Y-%m-%dT%H:%M:%SZ", gmtime(&now));
    kiln_llm_shape sh;
    char random_path[64];
    if (a->shape) {
        int rc = random_shape(a, &sh, d, random_path, sizeof random_path);
        if (rc >= 0) {
            free(d);
            return rc;
        }
    }
    kiln_bench_env env;
    kiln_bench_ceilings ceil;
    char ceil_path[4096];
    if (a->ceilings_file) snprintf(ceil_path, sizeof ceil_path, "%s", a->ceilings_file);
    else kiln_bench_ceilings_default_path(ceil_path, sizeof ceil_path);
    kiln_bench_env_init(&env, a->bc.target, a->bc.device);
    if (kiln_bench_ceilings_load(ceil_path, env.gpu ? env.gpu_name : env.cpu_model, &ceil) != KILN_OK) {
        fprintf(stderr, "kiln: warning: ignoring the ceilings file: %s\n", kiln_last_error());
        memset(&ceil, 0, sizeof ceil);
    }
    d->bc = &a->bc;
    d->env = &env;
    d->ceil = &ceil;
    d->model_path = a->shape ? random_path : a->model;
    int rc = kiln_bench_llm_run(d) == KILN_OK ? 0 : cli_fail();
    if (!rc) kiln_bench_llm_print(d, stdout);
    if (!rc && a->json) {
        if (kiln_bench_llm_write_json(d, a->json) != KILN_OK) rc = cli_fail();
        else printf("wrote %s\n", a->json);
    }
    free(d);
    return rc;
}

int kiln_cmd_bench_llm(int argc, char **argv) {
    llm_args a;
    int rc = parse_args(argc, argv, &a);
    return rc >= 0 ? rc : run(&a);
}
