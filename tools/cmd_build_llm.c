/* cmd_build_llm.c — `kiln build --hf DIR -o ENGINE.kiln [--fp32|--fp16|--bf16|--weights int8|fp8]`: an LLM
 * engine from a Hugging Face checkpoint (src/llm/llm_engine.h). */
#include "cli.h"

#include "layer_precision.h"
#include "llm/llm_engine.h"

#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

static const char *USAGE =
    "usage: kiln build --hf DIR -o ENGINE.kiln [--fp32|--fp16|--bf16|--weights int8|fp8 [--calib-text FILE]]\n"
    "\n"
    "Writes an LLM engine from the Hugging Face checkpoint in DIR (config.json, *.safetensors, and\n"
    "tokenizer.json, tokenizer_config.json and generation_config.json when present): the config, the\n"
    "tokenizer files verbatim, and the weights in the layout kiln's forward step uses, 64-byte aligned\n"
    "and mapped in place when loaded. `kiln generate ENGINE` and `kiln bench --llm ENGINE` read it.\n"
    "\n"
    "options:\n"
    "  --hf DIR              the checkpoint directory (required)\n"
    "  -o, --output FILE     engine file to write (default: DIR's name with .kiln)\n"
    "  --fp32, --fp16, --bf16\n"
    "                        the precision the weights are stored in (default: the checkpoint's when it is\n"
    "                        F16 or BF16, else fp32); the CPU forward computes in fp32 either way\n"
    "  --weights int8        weight-only INT8: every matrix stored as int8 with one fp32 scale per output\n"
    "                        row (symmetric, max |w| / 127), the rest fp32; the CPU forward widens the\n"
    "                        weights inside its products, the CUDA one keeps them int8 on the device\n"
    "                        (docs/llm-quantization.md)\n"
    "  --weights fp8         FP8 E4M3: every matrix stored as E4M3 with one fp32 scale per output row\n"
    "                        (max |w| / 448), the rest fp32; the products round their activations to E4M3\n"
    "                        too, with one scale per token row (max |x| / 448) unless --calib-text is given\n"
    "  --calib-text FILE     with --weights fp8: static activation scales, one per matrix, from the largest\n"
    "                        |x| entering each product while the model reads FILE (times 1.25, over 448)\n"
    "  --weights-skip LIST   with --weights int8 or fp8: keep these fp32, comma-separated: embed (the token\n"
    "                        embedding), lm_head (a tied lm_head is the embedding: either keeps both)\n"
    "  -h, --help            this help\n";

/* --weights VALUE; -1 to go on, else the exit code. */
static int parse_weights(const char *v, kiln_llm_build_options *o) {
    if (!strcmp(v, "int8")) o->weights_int8 = true;
    else if (!strcmp(v, "fp8")) o->weights_fp8 = true;
    else return cli_usage_error("build ", "--weights takes int8 (weight-only INT8) or fp8 (FP8 E4M3), got '%s'", v);
    if (o->weights_int8 && o->weights_fp8) return cli_usage_error("build ", "--weights int8 and fp8 exclude each other");
    return -1;
}

/* --weights-skip LIST; -1 to go on, else the exit code. */
static int parse_skip(const char *list, kiln_llm_build_options *o) {
    char buf[256];
    if (snprintf(buf, sizeof buf, "%s", list) >= (int)sizeof buf)
        return cli_usage_error("build ", "--weights-skip: the list is too long");
    for (char *save = NULL, *p = buf, *item; (item = strtok_r(p, ",", &save)); p = NULL) {
        if (!strcmp(item, "embed")) o->int8_skip_embed = true;
        else if (!strcmp(item, "lm_head")) o->int8_skip_lm_head = true;
        else return cli_usage_error("build ", "--weights-skip: unknown '%s' (embed, lm_head)", item);
    }
    return -1;
}

int kiln_cmd_build_llm(int argc, char **argv) {
    const char *dir = NULL, *output = NULL;
    kiln_llm_build_options o = {.precision = -1};
    char flags[512] = "";
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (cli_is_help(a)) {
            fputs(USAGE, stdout);
            return 0;
        } else if (!strcmp(a, "--hf") || !strcmp(a, "-o") || !strcmp(a, "--output")) {
            if (++i >= argc) return cli_usage_error("build ", "%s needs a value", a);
            if (cli_is_help(argv[i])) { /* `kiln build --hf --help`, as `kiln build --help` advertises */
                fputs(USAGE, stdout);
                return 0;
            }
            if (a[1] == 'o' || a[2] == 'o') output = argv[i];
            else if (dir) return cli_usage_error("build ", "--hf given twice");
            else dir = argv[i];
        } else if (!strcmp(a, "--fp32") || !strcmp(a, "--fp16") || !strcmp(a, "--bf16")) {
            kiln_precision p;
            cli_parse_precision(a + 2, &p);
            if (o.precision >= 0 && o.precision != (int)p)
                return cli_usage_error("build ", "--fp32, --fp16 and --bf16 exclude each other");
            o.precision = (int)p;
            size_t len = strlen(flags);
            snprintf(flags + len, sizeof flags - len, "%s%s", len ? " " : "--hf ", a);
        } else if (!strcmp(a, "--calib-text")) {
            if (++i >= argc) return cli_usage_error("build ", "%s needs a value", a);
            o.fp8_calib_text = argv[i];
            size_t len = strlen(flags);
            snprintf(flags + len, sizeof flags - len, "%s%s %s", len ? " " : "--hf ", a, argv[i]);
        } else if (!strcmp(a, "--weights") || !strcmp(a, "--weights-skip")) {
            if (++i >= argc) return cli_usage_error("build ", "%s needs a value", a);
            int rc = a[9] ? parse_skip(argv[i], &o) : parse_weights(argv[i], &o);
            if (rc >= 0) return rc;
            size_t len = strlen(flags);
            snprintf(flags + len, sizeof flags - len, "%s%s %s", len ? " " : "--hf ", a, argv[i]);
        } else if (a[0] == '-') {
            return cli_usage_error("build ", "%s does not apply to --hf (options: -o, --fp32, --fp16, --bf16, --weights, "
                                   "--weights-skip, --calib-text)", a);
        } else {
            return cli_usage_error("build ", "unexpected argument '%s' (--hf DIR takes the checkpoint)", a);
        }
    }
    if (!dir) return cli_usage_error("build ", "--hf needs a checkpoint directory");
    const bool quant = o.weights_int8 || o.weights_fp8;
    if (quant && o.precision >= 0)
        return cli_usage_error("build ", "--weights %s and --fp32/--fp16/--bf16 exclude each other",
                               o.weights_fp8 ? "fp8" : "int8");
    if (!quant && (o.int8_skip_embed || o.int8_skip_lm_head))
        return cli_usage_error("build ", "--weights-skip applies only with --weights int8 or fp8");
    if (o.fp8_calib_text && !o.weights_fp8)
        return cli_usage_error("build ", "--calib-text applies only with --weights fp8 (for --hf)");
    char dflt[4096];
    if (!output) {
        size_t n = strlen(dir);
        while (n > 1 && dir[n - 1] == '/') n--;
        snprintf(dflt, sizeof dflt, "%.*s.kiln", (int)n, dir);
        output = dflt;
    }
    o.build_options = flags[0] ? flags : "--hf";
    double t0 = cli_now_ms();
    kiln_llm_engine_info info;
    if (kiln_llm_engine_build(dir, &o, output, &info) != KILN_OK) return cli_fail();
    double t1 = cli_now_ms();
    struct stat st;
    long long size = stat(output, &st) == 0 ? (long long)st.st_size : -1;
    printf("built %s -> %s (LLM engine, %s weights, %lld parameters) in %.1f ms, %.2f MB%s\n", dir, output,
           kiln_precision_name(info.meta.precision), (long long)info.n_params, t1 - t0, (double)size / 1e6,
           info.tokenizer_bytes ? "" : "; no tokenizer.json: kiln generate will refuse it");
    kiln_llm_engine_info_free(&info);
    return 0;
}
