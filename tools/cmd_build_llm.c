/* cmd_build_llm.c — `kiln build --hf DIR -o ENGINE.kiln [--fp32|--fp16|--bf16|--weights int8|w8a8|int4|fp8]`:
 * an LLM engine from a Hugging Face checkpoint (src/llm/llm_engine.h). */
#include "cli.h"

#include "layer_precision.h"
#include "llm/llm_engine.h"
#include "llm/llm_smoothquant.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static const char *USAGE =
    "usage: kiln build --hf DIR -o ENGINE.kiln [--fp32|--fp16|--bf16|--weights int8|w8a8|int4|fp8 [--calib-text FILE]]\n"
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
    "  --weights w8a8        INT8 weights and activations (SmoothQuant): the layers' matrices smoothed,\n"
    "                        then int8 per output row, their inputs quantized to int8 with one static\n"
    "                        scale each from the calibration text; the token embedding and lm_head are\n"
    "                        weight-only int8 (needs --calib-text)\n"
    "  --weights int4        weight-only INT4: every matrix stored as unsigned 4-bit values in groups of 128\n"
    "                        along its input, with an fp32 scale and zero point per group (asymmetric), the\n"
    "                        rest fp32\n"
    "  --calib-text FILE     with --weights w8a8: the calibration text (its first 8,192 tokens); with\n"
    "                        --weights int4: activation-aware scales (AWQ-style) from the model's own\n"
    "                        activations over the first 4,096 tokens of FILE; without it every group is\n"
    "                        rounded to nearest (a warning says so); with --weights fp8: static\n"
    "                        activation scales, one per matrix, from the largest |x| entering each\n"
    "                        product while the model reads FILE (times 1.25, over 448)\n"
    "  --smooth-alpha A      with --weights w8a8: SmoothQuant's migration strength in [0, 1] (default 0.5)\n"
    "  --calibrator NAME     with --weights w8a8: percentile:P (default percentile:99.99), minmax or\n"
    "                        entropy (which clipped kjv-gpt2's GELU outputs too hard: docs/llm-quantization.md)\n"
    "  --weights-skip LIST   with --weights int8, w8a8, int4 or fp8: keep these fp32, comma-separated:\n"
    "                        embed (the token embedding), lm_head (a tied lm_head is the embedding:\n"
    "                        either keeps both)\n"
    "  -h, --help            this help\n";

/* The --weights value o already holds ("int8", "w8a8", "int4", "fp8"), or NULL. */
static const char *weights_chosen(const kiln_llm_build_options *o) {
    return o->w8a8 ? "w8a8" : o->weights_int8 ? "int8" : o->weights_int4 ? "int4" : o->weights_fp8 ? "fp8" : NULL;
}

/* --weights VALUE; -1 to go on, else the exit code. */
static int parse_weights(const char *v, kiln_llm_build_options *o, kiln_llm_w8a8_options *w8a8) {
    const char *before = weights_chosen(o);
    if (!strcmp(v, "int8")) o->weights_int8 = true;
    else if (!strcmp(v, "w8a8")) o->w8a8 = w8a8;
    else if (!strcmp(v, "int4")) o->weights_int4 = true;
    else if (!strcmp(v, "fp8")) o->weights_fp8 = true;
    else return cli_usage_error("build ", "--weights takes int8 (weight-only INT8), w8a8 (INT8 weights and "
                                "activations), int4 (weight-only INT4) or fp8 (FP8 E4M3), got '%s'", v);
    if (before && strcmp(before, v))
        return cli_usage_error("build ", "--weights %s and --weights %s exclude each other", before, v);
    return -1;
}

/* The W8A8 options (--calib-text, also INT4's and FP8's, --smooth-alpha, --calibrator) at argv[i], value argv[i + 1];
 * -1 to go on, else the exit code. given: whether a W8A8-only one (--smooth-alpha, --calibrator) came. */
static int parse_w8a8(const char *a, const char *v, kiln_llm_w8a8_options *w, bool *given) {
    if (!strcmp(a, "--calib-text")) {
        w->calib_text = v;
        return -1;
    }
    *given = true;
    if (!strcmp(a, "--smooth-alpha")) {
        char *end;
        double alpha = strtod(v, &end);
        if (end == v || *end || !(alpha >= 0 && alpha <= 1))
            return cli_usage_error("build ", "--smooth-alpha takes a number in [0, 1], got '%s'", v);
        w->smooth_alpha = (float)alpha;
    } else if (kiln_calib_method_parse(v, &w->calibrator) != KILN_OK) {
        return cli_fail();
    }
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
    kiln_llm_w8a8_options w8a8 = {.smooth_alpha = 0.5f, .calibrator = {KILN_CALIB_PERCENTILE, 99.99}};
    bool w8a8_given = false;
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
        } else if (!strcmp(a, "--weights") || !strcmp(a, "--weights-skip") || !strcmp(a, "--calib-text") ||
                   !strcmp(a, "--smooth-alpha") || !strcmp(a, "--calibrator")) {
            if (++i >= argc) return cli_usage_error("build ", "%s needs a value", a);
            int rc = !strcmp(a, "--weights-skip") ? parse_skip(argv[i], &o)
                     : !strcmp(a, "--weights")    ? parse_weights(argv[i], &o, &w8a8)
                                                  : parse_w8a8(a, argv[i], &w8a8, &w8a8_given);
            if (rc >= 0) return rc;
            size_t len = strlen(flags);
            snprintf(flags + len, sizeof flags - len, "%s%s %s", len ? " " : "--hf ", a, argv[i]);
        } else if (a[0] == '-') {
            return cli_usage_error("build ", "%s does not apply to --hf (options: -o, --fp32, --fp16, --bf16, --weights, "
                                   "--weights-skip, --calib-text, --smooth-alpha, --calibrator)", a);
        } else {
            return cli_usage_error("build ", "unexpected argument '%s' (--hf DIR takes the checkpoint)", a);
        }
    }
    if (!dir) return cli_usage_error("build ", "--hf needs a checkpoint directory");
    const char *chosen = weights_chosen(&o);
    if (chosen && o.precision >= 0)
        return cli_usage_error("build ", "--weights %s and --fp32/--fp16/--bf16 exclude each other", chosen);
    if (!chosen && (o.int8_skip_embed || o.int8_skip_lm_head))
        return cli_usage_error("build ", "--weights-skip applies only with --weights int8, w8a8, int4 or fp8");
    if (!o.w8a8 && w8a8_given)
        return cli_usage_error("build ", "--smooth-alpha and --calibrator apply only with --weights w8a8");
    if (!o.w8a8 && !o.weights_int4 && !o.weights_fp8 && w8a8.calib_text)
        return cli_usage_error("build ", "--calib-text applies to --hf only with --weights w8a8, int4 or fp8");
    if (o.w8a8 && !w8a8.calib_text)
        return cli_usage_error("build ", "--weights w8a8 needs --calib-text FILE: INT8 activations need a static scale "
                               "per product input, calibrated on text the model reads");
    if (o.weights_int4) o.calib_text = w8a8.calib_text;
    if (o.weights_fp8) o.fp8_calib_text = w8a8.calib_text;
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
