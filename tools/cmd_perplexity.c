/* cmd_perplexity.c — `kiln perplexity MODEL --text FILE`: the perplexity of an LLM engine or Hugging
 * Face checkpoint on a text file by transformers' sliding-window method (src/llm/llm_perplexity.h),
 * on the CPU or CUDA; prints the perplexity, the mean NLL and the token counts. */
#include "cli.h"

#include "core/file.h"
#include "llm/llm_perplexity.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *USAGE =
    "usage: kiln perplexity MODEL --text FILE [options]\n"
    "\n"
    "The perplexity of MODEL (an LLM engine from `kiln build --hf`, or a Hugging Face checkpoint\n"
    "directory) on the text in FILE (UTF-8, encoded with the model's tokenizer as transformers'\n"
    "tokenizer(text) does), by transformers' method for fixed-length models: windows of --ctx tokens\n"
    "start every --stride tokens; only the tokens the previous window did not score are scored; each\n"
    "window's mean NLL is weighted by its scored tokens less one (as the guide counts them); the\n"
    "perplexity is exp of the weighted mean.\n"
    "\n"
    "options:\n"
    "  --text FILE            the text (required)\n"
    "  --ctx N                window length in tokens (default: the model's context)\n"
    "  --stride S             tokens between window starts (default: --ctx, windows that do not overlap)\n"
    "  --target cpu|cuda      where the forward runs (default cpu: fp32; cuda: bf16 or fp16)\n"
    "  --device N             the CUDA device (default 0)\n"
    "  --kv-cache auto|fp8    the KV cache: auto (fp32 on the CPU, 16-bit on cuda) or fp8 (E4M3,\n"
    "                         per-head scales)\n"
    "  --calib-text FILE      --kv-cache fp8: scales from the model's keys and values over FILE\n"
    "                         (without it: 1.0, with a warning)\n"
    "  -h, --help             this help\n";

typedef struct ppl_args {
    const char *model, *text;
    kiln_llm_perplexity_options o;
} ppl_args;

static int parse_int(const char *opt, const char *val, int lo, int *out) {
    char *end;
    errno = 0;
    long v = strtol(val, &end, 10);
    if (end == val || *end || errno || v < lo || v > 1 << 30)
        return cli_usage_error("perplexity ", "%s expects an integer >= %d, got '%s'", opt, lo, val);
    *out = (int)v;
    return -1;
}

/* Returns -1 to go on, else the exit code. */
static int parse_args(int argc, char **argv, ppl_args *a) {
    memset(a, 0, sizeof *a);
    a->o.target = "cpu";
    for (int i = 1; i < argc; i++) {
        const char *s = argv[i], *val = i + 1 < argc ? argv[i + 1] : NULL;
        if (cli_is_help(s)) {
            fputs(USAGE, stdout);
            return 0;
        }
        if (s[0] != '-') {
            if (a->model) return cli_usage_error("perplexity ", "unexpected argument '%s'", s);
            a->model = s;
            continue;
        }
        if (strcmp(s, "--text") && strcmp(s, "--ctx") && strcmp(s, "--stride") && strcmp(s, "--target") &&
            strcmp(s, "--device") && strcmp(s, "--kv-cache") && strcmp(s, "--calib-text"))
            return cli_usage_error("perplexity ", "unknown option '%s'", s);
        if (!val) return cli_usage_error("perplexity ", "%s needs a value", s);
        i++;
        int rc = -1;
        if (!strcmp(s, "--text")) a->text = val;
        else if (!strcmp(s, "--target")) a->o.target = val;
        else if (!strcmp(s, "--kv-cache")) a->o.kv_cache_dtype = val;
        else if (!strcmp(s, "--calib-text")) a->o.calib_text = val;
        else if (!strcmp(s, "--ctx")) rc = parse_int(s, val, 2, &a->o.ctx);
        else if (!strcmp(s, "--stride")) rc = parse_int(s, val, 1, &a->o.stride);
        else rc = parse_int(s, val, 0, &a->o.device);
        if (rc >= 0) return rc;
    }
    if (!a->model) return cli_usage_error("perplexity ", "no model given");
    if (!a->text) return cli_usage_error("perplexity ", "--text FILE is required");
    if (strcmp(a->o.target, "cpu") && strcmp(a->o.target, "cuda"))
        return cli_usage_error("perplexity ", "--target must be cpu or cuda, got '%s'", a->o.target);
    if (a->o.kv_cache_dtype && strcmp(a->o.kv_cache_dtype, "auto") && strcmp(a->o.kv_cache_dtype, "fp8"))
        return cli_usage_error("perplexity ", "--kv-cache must be auto or fp8, got '%s'", a->o.kv_cache_dtype);
    if (a->o.ctx && a->o.stride > a->o.ctx)
        return cli_usage_error("perplexity ", "--stride %d is longer than --ctx %d", a->o.stride, a->o.ctx);
    return -1;
}

int kiln_cmd_perplexity(int argc, char **argv) {
    ppl_args a;
    int rc = parse_args(argc, argv, &a);
    if (rc >= 0) return rc;
    kiln_file_map text;
    if (kiln_file_map_open(a.text, &text) != KILN_OK) return cli_fail();
    kiln_llm_perplexity_result r = {0};
    const double t0 = cli_now_ms();
    kiln_status st = kiln_llm_perplexity(a.model, (const char *)text.data, text.size, &a.o, &r);
    kiln_file_unmap(&text);
    if (st != KILN_OK) return cli_fail();
    printf("perplexity %.4f (mean NLL %.6f nats over %lld scored tokens; %lld tokens, %d windows of ctx %d, "
           "stride %d)\n", r.perplexity, r.nll, (long long)r.n_scored, (long long)r.n_tokens, r.n_windows, r.ctx,
           r.stride);
    fprintf(stderr, "%s, %.1f s\n", r.target, (cli_now_ms() - t0) / 1e3);
    return 0;
}
