/* cli_build_opts.c — the build options `kiln build` and `kiln compare` share: --target, --fp16 /
 * --bf16 / --fp32 / --best, --device, --layer-precision PATTERN:PREC, --profile NAME:MIN,OPT,MAX,
 * --tuning-level 0..3 (default 2), the tuning bounds --tuning-budget-ms, --tuning-layer-budget-ms and
 * --tuning-workspace-mb (N or 'none'), --timing-cache FILE, and INT8 calibration: --int8, --calib DIR,
 * --calib-cache FILE, --calibrator NAME, --calib-batches N, --keep / --keep-sensitive N (the N most
 * sensitive layers, and the first and last, out of int8), --quantize-ends (the first and last in int8
 * too); FP8: --fp8 (target cuda); --io-format fp16|fp32 (the engine's float I/O). */
#include "cli.h"

#include <stdlib.h>
#include <string.h>

void cli_build_opts_init(cli_build_opts *b) {
    memset(b, 0, sizeof *b);
    b->o.target = "cpu";
    b->o.tuning_level = 2;
    b->o.layer_precisions = b->rules;
    b->o.ranges = b->ranges;
}

void cli_build_opts_free(cli_build_opts *b) {
    for (int i = 0; i < b->o.nlayer_precisions; i++) free((void *)b->rules[i].pattern);
    for (int i = 0; i < b->o.nranges; i++) free((void *)b->ranges[i].input);
    b->o.nlayer_precisions = b->o.nranges = 0;
}

/* A layer precision: an engine precision (cli_parse_precision), int8 or fp8. */
static bool parse_layer_precision(const char *s, kiln_precision *p) {
    if (!strcmp(s, "int8")) *p = KILN_PRECISION_INT8;
    else if (!strcmp(s, "fp8")) *p = KILN_PRECISION_FP8;
    else return cli_parse_precision(s, p);
    return true;
}

/* --layer-precision PATTERN:PREC (the last ':' separates, so "op:Softmax:fp32" works). */
static int parse_rule(cli_build_opts *b, const char *cmd, const char *val) {
    const char *colon = strrchr(val, ':');
    kiln_precision p;
    if (!colon || colon == val || !parse_layer_precision(colon + 1, &p))
        return cli_usage_error(cmd, "--layer-precision expects PATTERN:fp32|fp16|bf16|int8|fp8 (e.g. 'op:Softmax:fp32'), "
                               "got '%s'", val);
    if (b->o.nlayer_precisions == CLI_MAX_ARGS) return cli_usage_error(cmd, "too many --layer-precision options");
    b->rules[b->o.nlayer_precisions].pattern = strndup(val, (size_t)(colon - val));
    b->rules[b->o.nlayer_precisions++].precision = p;
    return 0;
}

/* --profile NAME:MIN,OPT,MAX (or NAME:SHAPE for a fixed shape). An input already in the current profile
 * starts the next profile. */
static int parse_profile(cli_build_opts *b, const char *cmd, const char *val) {
    const char *colon = strrchr(val, ':');
    if (!colon || colon == val)
        return cli_usage_error(cmd, "--profile expects NAME:MIN,OPT,MAX with shapes like 1x128, got '%s'", val);
    if (b->o.nranges == CLI_MAX_ARGS) return cli_usage_error(cmd, "too many --profile options");
    kiln_input_range *r = &b->ranges[b->o.nranges];
    memset(r, 0, sizeof *r);
    int64_t *parts[3] = {r->min, r->opt, r->max};
    const char *p = colon + 1;
    int nparts = 0;
    bool more = true;
    while (more && nparts < 3) {
        const char *end;
        int nd = cli_parse_dims(p, ",", parts[nparts], &end);
        if (nd < 0 || (nparts && nd != r->ndim))
            return cli_usage_error(cmd, "--profile '%s': shapes must be AxBxC (each dim from 0 to 2^40) of one rank, as MIN,OPT,MAX", val);
        r->ndim = nd;
        nparts++;
        more = *end == ',';
        p = end + 1;
    }
    if (more || nparts == 2)
        return cli_usage_error(cmd, "--profile '%s': give MIN,OPT,MAX (three shapes) or one fixed shape", val);
    if (nparts == 1) {
        memcpy(r->opt, r->min, sizeof r->opt);
        memcpy(r->max, r->min, sizeof r->max);
    }
    size_t nlen = (size_t)(colon - val);
    int profile = b->o.nranges ? b->ranges[b->o.nranges - 1].profile : 0;
    for (int i = 0; i < b->o.nranges; i++)
        if (b->ranges[i].profile == profile && strlen(b->ranges[i].input) == nlen && !strncmp(b->ranges[i].input, val, nlen)) {
            profile++;
            break;
        }
    r->profile = profile;
    r->input = strndup(val, nlen);
    b->o.nranges++;
    return 0;
}

/* A tuning bound: a positive number up to max, or "none" (-1 in the options: no bound). */
static int parse_bound(const char *cmd, const char *flag, const char *val, long max, int *out) {
    if (!strcmp(val, "none")) {
        *out = -1;
        return 0;
    }
    char *end;
    long n = strtol(val, &end, 10);
    if (end == val || *end || n < 1 || n > max)
        return cli_usage_error(cmd, "%s expects a number from 1 to %ld, or 'none' for no bound, got '%s'", flag, max, val);
    *out = (int)n;
    return 0;
}

int cli_build_opts_parse(cli_build_opts *b, const char *cmd, int argc, char **argv, int *i) {
    const char *a = argv[*i];
    if (!strcmp(a, "--fp16") || !strcmp(a, "--bf16") || !strcmp(a, "--fp32") || !strcmp(a, "--best")) {
        cli_parse_precision(a[2] == 'b' && a[3] == 'e' ? "fp16" : a + 2, &b->o.precision);
        b->best = !strcmp(a, "--best");
        b->given = true;
        return 1;
    }
    if (!strcmp(a, "--verbose") || !strcmp(a, "-v")) {
        b->o.verbose = true;
        return 1;
    }
    if (!strcmp(a, "--int8") || !strcmp(a, "--fp8") || !strcmp(a, "--quantize-ends")) {
        *(a[2] == 'i' ? &b->o.int8 : a[2] == 'f' ? &b->o.fp8 : &b->o.quantize_ends) = true;
        b->given = true;
        return 1;
    }
    bool takes = !strcmp(a, "--target") || !strcmp(a, "--device") || !strcmp(a, "--layer-precision") ||
                 !strcmp(a, "--profile") || !strcmp(a, "--tuning-level") || !strcmp(a, "--timing-cache") ||
                 !strcmp(a, "--tuning-budget-ms") || !strcmp(a, "--tuning-layer-budget-ms") ||
                 !strcmp(a, "--tuning-workspace-mb") || !strcmp(a, "--calib") || !strcmp(a, "--calib-cache") ||
                 !strcmp(a, "--calibrator") || !strcmp(a, "--calib-batches") || !strcmp(a, "--keep") ||
                 !strcmp(a, "--keep-sensitive") || !strcmp(a, "--io-format");
    if (!takes) return 0;
    if (*i + 1 >= argc) return cli_usage_error(cmd, "%s needs a value", a);
    const char *val = argv[++*i];
    b->given = true;
    if (!strcmp(a, "--target")) {
        b->o.target = val;
    } else if (!strcmp(a, "--device")) {
        char *end;
        long n = strtol(val, &end, 10);
        if (n < 0 || n > 1024 || *end || end == val)
            return cli_usage_error(cmd, "--device expects a GPU number from 0 to 1024, got '%s'", val);
        b->o.device = (int)n;
    } else if (!strcmp(a, "--tuning-level")) {
        if (strlen(val) != 1 || val[0] < '0' || val[0] > '3')
            return cli_usage_error(cmd, "--tuning-level is 0 (heuristics only), 1, 2 or 3, got '%s'", val);
        b->o.tuning_level = val[0] - '0';
    } else if (!strcmp(a, "--tuning-budget-ms")) {
        if (parse_bound(cmd, a, val, 86400000, &b->o.tuning_budget_ms)) return 2;
    } else if (!strcmp(a, "--tuning-layer-budget-ms")) {
        if (parse_bound(cmd, a, val, 86400000, &b->o.tuning_layer_budget_ms)) return 2;
    } else if (!strcmp(a, "--tuning-workspace-mb")) {
        if (parse_bound(cmd, a, val, 65536, &b->o.tuning_workspace_mb)) return 2;
    } else if (!strcmp(a, "--timing-cache")) {
        b->o.timing_cache = val;
    } else if (!strcmp(a, "--calib")) {
        b->o.calib_dir = val;
    } else if (!strcmp(a, "--calib-cache")) {
        b->o.calib_cache = val;
    } else if (!strcmp(a, "--calibrator")) {
        b->o.calibrator = val;
    } else if (!strcmp(a, "--calib-batches")) {
        char *end;
        long n = strtol(val, &end, 10);
        if (end == val || *end || n < 1 || n > 1000000)
            return cli_usage_error(cmd, "--calib-batches expects a number from 1 to 1000000, got '%s'", val);
        b->o.calib_batches = (int)n;
    } else if (!strcmp(a, "--keep") || !strcmp(a, "--keep-sensitive")) {
        char *end;
        long n = strtol(val, &end, 10);
        if (end == val || *end || n < 0 || n > 1000000)
            return cli_usage_error(cmd, "%s expects a number of layers from 0 to 1000000, got '%s'", a, val);
        b->o.keep_sensitive = (int)n;
    } else if (!strcmp(a, "--layer-precision")) {
        if (parse_rule(b, cmd, val)) return 2;
    } else if (!strcmp(a, "--io-format")) {
        if (strcmp(val, "fp16") && strcmp(val, "fp32"))
            return cli_usage_error(cmd, "--io-format is fp32 (the model's) or fp16 (float inputs and outputs in float16), "
                                   "got '%s'", val);
        b->o.io_fp16 = !strcmp(val, "fp16");
    } else if (parse_profile(b, cmd, val)) {
        return 2;
    }
    return 1;
}
