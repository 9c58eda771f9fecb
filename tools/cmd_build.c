/* cmd_build.c — `kiln build MODEL.onnx -o ENGINE.kiln`. */
#include "cli.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static const char *USAGE =
    "usage: kiln build MODEL.onnx -o ENGINE.kiln [options]\n"
    "\n"
    "Compiles an ONNX model into an engine file for one target.\n"
    "\n"
    "options:\n"
    "  -o, --output FILE   engine file to write (default: MODEL with .kiln instead of .onnx)\n"
    "  --target cpu|cuda   the backend to build for (default: cpu)\n"
    "  --fp16, --bf16      compute floating-point tensors in half precision (target cuda)\n"
    "  --device N          the GPU to build for (default 0)\n"
    "  --verbose           log every graph change the build makes\n"
    "  -h, --help          this help\n";

int kiln_cmd_build(int argc, char **argv) {
    const char *model = NULL, *output = NULL, *target = "cpu";
    kiln_precision precision = KILN_PRECISION_FP32;
    int device = 0;
    bool verbose = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (cli_is_help(a)) {
            fputs(USAGE, stdout);
            return 0;
        } else if (!strcmp(a, "-o") || !strcmp(a, "--output")) {
            if (++i >= argc) return cli_usage_error("build ", "%s needs a file name", a);
            output = argv[i];
        } else if (!strcmp(a, "--target")) {
            if (++i >= argc) return cli_usage_error("build ", "--target needs a value");
            target = argv[i];
        } else if (!strcmp(a, "--fp16") || !strcmp(a, "--bf16") || !strcmp(a, "--fp32")) {
            precision = !strcmp(a, "--fp16") ? KILN_PRECISION_FP16 : !strcmp(a, "--bf16") ? KILN_PRECISION_BF16 : KILN_PRECISION_FP32;
        } else if (!strcmp(a, "--device")) {
            char *end;
            if (++i >= argc || (device = (int)strtol(argv[i], &end, 10)) < 0 || *end)
                return cli_usage_error("build ", "--device needs a GPU number");
        } else if (!strcmp(a, "--verbose") || !strcmp(a, "-v")) {
            verbose = true;
        } else if (a[0] == '-') {
            return cli_usage_error("build ", "unknown option '%s'", a);
        } else if (!model) {
            model = a;
        } else {
            return cli_usage_error("build ", "unexpected argument '%s'", a);
        }
    }
    if (!model) return cli_usage_error("build ", "a model file is required");
    char dflt[4096];
    if (!output) {
        size_t n = strlen(model);
        if (cli_has_suffix(model, ".onnx")) n -= 5;
        snprintf(dflt, sizeof dflt, "%.*s.kiln", (int)n, model);
        output = dflt;
    }
    if (verbose) kiln_log_set_level(KILN_LOG_VERBOSE);
    double t0 = cli_now_ms();
    kiln_build_options opts = {.target = target, .precision = precision, .device = device, .verbose = verbose};
    kiln_engine *e;
    if (kiln_build_onnx(model, &opts, &e) != KILN_OK) return cli_fail();
    double t1 = cli_now_ms();
    if (kiln_engine_save(e, output) != KILN_OK) {
        kiln_engine_free(e);
        return cli_fail();
    }
    struct stat st;
    long long size = stat(output, &st) == 0 ? (long long)st.st_size : -1;
    printf("built %s -> %s (target %s) in %.1f ms, %.2f MB\n", model, output, target, t1 - t0, (double)size / 1e6);
    kiln_engine_free(e);
    return 0;
}
