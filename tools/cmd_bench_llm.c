/* cmd_bench_llm.c — `kiln bench --llm ENGINE|DIR`: trtllm-bench's measurements of an LLM (src/bench/
 * bench_llm.h does the work): parses the options, loads the model, measures every batch size, prints
 * and writes the JSON report. */
#include "cli.h"

#include "bench/bench_llm.h"
#include "core/status.h"
#include "llm/llm_engine.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static const char *USAGE =
    "usage: kiln bench --llm ENGINE.kiln|DIR [options]\n"
    "\n"
    "Measures an LLM (an engine from `kiln build --hf`, or a Hugging Face checkpoint directory) the way\n"
    "trtllm-bench does: for each batch size, that many requests of random prompts (seeded) submitted at\n"
    "once, each generating exactly --output-len tokens (eos ignored), greedy, through the scheduler.\n"
    "Reports prefill time, TTFT, TPOT (time per output token after the first), end-to-end latency\n"
    "(p50/p90/p95/p99), output and total tokens/s, the decode bandwidth and the environment.\n"
    "\n"
    "options:\n"
    "  --batch N,N,...        batch sizes (default 1,8,64)\n"
    "  --input-len N          prompt tokens per request (default 128)\n"
    "  --output-len N         generated tokens per request (default 128)\n"
    "  --iterations N         measured iterations per batch size (default 3)\n"
    "  --warmup N             unmeasured iterations first (default 1)\n"
    "  --seed N               seed of the random prompts (default 0)\n"
    "  --target cpu|cuda      the forward step (default cpu; cuda needs a build with the cuda backend)\n"
    "  --device N             GPU ordinal (default 0)\n"
    "  --export-json FILE     every statistic and the environment (schema: docs/llm.md)\n"
    "  --ceilings-file FILE   measured ceilings (default ~/.cache/kiln/ceilings.json)\n"
    "  -h, --help             this help\n";

typedef struct llm_args {
    const char *model, *json, *ceilings_file;
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
                                        "--seed", "--target", "--device", "--export-json", "--ceilings-file"};
    for (int i = 1; i < argc; i++) {
        const char *s = argv[i];
        if (cli_is_help(s)) {
            fputs(USAGE, stdout);
            return 0;
        }
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
        else if (!strcmp(s, "--warmup")) rc = parse_int(s, val, 0, 1e6, &a->bc.warmup);
        else if (!strcmp(s, "--device")) rc = parse_int(s, val, 0, 1024, &a->bc.device);
        else if (!strcmp(s, "--seed")) {
            if ((rc = parse_int(s, val, 0, 2147483647, &seed)) < 0) a->bc.seed = (uint64_t)seed;
        } else if (!strcmp(s, "--target")) {
            if (strcmp(val, "cpu") && strcmp(val, "cuda")) return cli_usage_error("bench ", "--target expects cpu or cuda, got '%s'", val);
            a->bc.target = val;
        } else if (!strcmp(s, "--export-json")) a->json = val;
        else a->ceilings_file = val;
        if (rc >= 0) return rc;
    }
    if (!a->model) return cli_usage_error("bench ", "--llm needs an LLM engine or checkpoint directory");
    return -1;
}

static int run(llm_args *a) {
    kiln_bench_llm_doc *d = calloc(1, sizeof *d);
    if (!d) return cli_fail();
    time_t now = time(NULL);
    strftime(d->started_at, sizeof d->started_at, "%Y-%m-%dT%H:%M:%SZ", gmtime(&now));
    double t0 = cli_now_ms();
    kiln_llm_bundle b;
    if (kiln_llm_open(a->model, false, &b) != KILN_OK) {
        free(d);
        return cli_fail();
    }
    d->load_s = (cli_now_ms() - t0) / 1e3;
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
    d->model_path = a->model;
    d->from_engine = b.from_engine;
    d->weights = b.weights;
    d->n_params = b.n_params;
    d->cfg = kiln_llm_model_config(b.model);
    d->bc = &a->bc;
    d->env = &env;
    d->ceil = &ceil;
    int rc = kiln_bench_llm_run(b.model, d) == KILN_OK ? 0 : cli_fail();
    if (!rc) kiln_bench_llm_print(d, stdout);
    if (!rc && a->json) {
        if (kiln_bench_llm_write_json(d, a->json) != KILN_OK) rc = cli_fail();
        else printf("wrote %s\n", a->json);
    }
    kiln_llm_bundle_free(&b);
    free(d);
    return rc;
}

int kiln_cmd_bench_llm(int argc, char **argv) {
    llm_args a;
    int rc = parse_args(argc, argv, &a);
    return rc >= 0 ? rc : run(&a);
}
