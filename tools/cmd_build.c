/* cmd_build.c — `kiln build MODEL.onnx -o ENGINE.kiln`; `kiln build --hf DIR` goes to cmd_build_llm.c. */
#include "cli.h"

#include "core/file.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static const char *USAGE =
    "usage: kiln build MODEL.onnx -o ENGINE.kiln [options]\n"
    "       kiln build --hf DIR -o ENGINE.kiln [--fp32|--fp16|--bf16]   (an LLM engine: kiln build --hf --help)\n"
    "\n"
    "Compiles an ONNX model into an engine file for one target.\n"
    "\n"
    "options:\n"
    "  -o, --output FILE   engine file to write (default: MODEL with .kiln instead of .onnx)\n"
    "  --target cpu|cuda   the backend to build for (default: cpu)\n"
    "  --fp16, --bf16      compute floating-point tensors in half precision (target cuda); normalization\n"
    "                      statistics, softmax sums, reductions and dot products still accumulate in\n"
    "                      fp32 (--verbose names each such layer)\n"
    "  --best              the fastest precision kiln picks by itself: today --fp16 with the fp32\n"
    "                      accumulation above (no per-layer timing of fp16 against bf16); combine with\n"
    "                      --layer-precision to keep more layers in fp32\n"
    "  --layer-precision PATTERN:fp32|fp16|bf16|int8|fp8\n"
    "                      compute the matching layers in that precision (repeatable, later rules win).\n"
    "                      PATTERN is a glob (* and ?) over the optimized graph's node names (as\n"
    "                      `kiln inspect` lists them), or op:GLOB over op types: 'op:Softmax:fp32'.\n"
    "                      Casts are inserted where precisions meet. int8 quantizes the matching Conv,\n"
    "                      MatMul and Gemm layers (by model name; with --calib, also without --int8);\n"
    "                      with --int8 a float rule keeps a layer out of int8. fp8: target cuda\n"
    "  --profile NAME:MIN,OPT,MAX\n"
    "                      an optimization profile range for input NAME, shapes as AxB (e.g.\n"
    "                      input_ids:1x1,1x256,8x1024; NAME:AxB alone fixes the shape). Repeat it for\n"
    "                      each input; an input named again starts the next profile. A run uses the\n"
    "                      first profile holding its shapes and refuses shapes outside all of them\n"
    "  --device N          the GPU to build for (default 0)\n"
    "  --tuning-level N    target cuda: time the library's candidate algorithms of every MatMul, Gemm and\n"
    "                      Conv on the GPU and keep the fastest: 0 heuristics only (no timing), 1 the\n"
    "                      top 3 candidates, 2 (default) the top 8, 3 all of them (up to 32). Without\n"
    "                      --profile, a dynamic batch dimension is tuned at batch 1\n"
    "  --tuning-budget-ms N|none\n"
    "                      stop timing once tuning took N ms of the build (default 2500); the layers\n"
    "                      left follow the heuristics\n"
    "  --tuning-layer-budget-ms N|none\n"
    "                      at most N ms of timing per layer (default 100): fewer runs per candidate,\n"
    "                      then fewer candidates\n"
    "  --tuning-workspace-mb N|none\n"
    "                      time only candidates that need at most N MiB of workspace (default 128)\n"
    "  --timing-cache FILE reuse and extend the timings in FILE (per GPU, driver and library versions):\n"
    "                      a second build of the same layers times nothing\n"
    "  --int8              quantize every Conv, MatMul and Gemm with constant weights to int8 (cpu; cuda\n"
    "                      also with --fp16): symmetric scales, activations per tensor from calibration,\n"
    "                      weights per channel (docs/quantization.md). Needs --calib or an existing\n"
    "                      --calib-cache\n"
    "  --calib DIR|FILE.npz\n"
    "                      calibration batches: DIR/<input>.<k>.npy, or (one input) any DIR/*.npy, one\n"
    "                      batch per file; or the same arrays in one .npz (np.savez). The float32 model\n"
    "                      runs over them on the CPU\n"
    "  --calibrator entropy|minmax|percentile[:P]\n"
    "                      how activation thresholds are chosen (default entropy: least KL divergence;\n"
    "                      percentile default P 99.99)\n"
    "  --calib-cache FILE  read the thresholds from FILE when it exists (no data needed; a cache made\n"
    "                      for another model is refused), else write them there after calibrating\n"
    "  --calib-batches N   use at most N calibration batches\n"
    "  --keep-sensitive N, --keep N\n"
    "                      with --int8: quantize each layer alone over the calibration batches, rank\n"
    "                      the layers by the output error each adds (--verbose logs the ranking) and\n"
    "                      keep the N worst, and the first and last layer, in float\n"
    "  --quantize-ends     with --keep-sensitive: the first and last layer may be int8 too\n"
    "  --fp8               MatMul and Gemm layers in FP8 (E4M3, per-tensor scales from the --int8\n"
    "                      calibration: --calib / --calib-cache); cpu (the reference) and cuda on a\n"
    "                      GPU of compute capability 8.9+ (older GPUs: logged, float precision)\n"
    "  --io-format fp16|fp32\n"
    "                      fp16: the engine's float32 inputs and outputs take and give float16 (half\n"
    "                      the bytes; values rounded to float16 at both ends), as trtexec's\n"
    "                      --inputIOFormats=fp16:chw; default fp32 (the model's)\n"
    "  --verbose           log every graph change the build makes\n"
    "  -h, --help          this help\n"
    "\n"
    "example, two profiles over two inputs:\n"
    "  kiln build bert.onnx --profile input_ids:1x1,1x128,8x128 --profile attention_mask:1x1,1x128,8x128 \\\n"
    "                       --profile input_ids:1x129,1x512,1x512 --profile attention_mask:1x129,1x512,1x512\n";

int kiln_cmd_build(int argc, char **argv) {
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "--hf")) return kiln_cmd_build_llm(argc, argv);
    const char *model = NULL, *output = NULL;
    cli_build_opts b;
    cli_build_opts_init(&b);
    int rc = 0;
    for (int i = 1; i < argc && !rc; i++) {
        const char *a = argv[i];
        int taken = cli_build_opts_parse(&b, "build ", argc, argv, &i);
        if (taken) {
            rc = taken == 2 ? 2 : 0;
        } else if (cli_is_help(a)) {
            fputs(USAGE, stdout);
            cli_build_opts_free(&b);
            return 0;
        } else if (!strcmp(a, "-o") || !strcmp(a, "--output")) {
            if (++i >= argc) rc = cli_usage_error("build ", "%s needs a file name", a);
            else output = argv[i];
        } else if (a[0] == '-') {
            rc = cli_usage_error("build ", "unknown option '%s'", a);
        } else if (!model) {
            model = a;
        } else {
            rc = cli_usage_error("build ", "unexpected argument '%s'", a);
        }
    }
    if (!rc && !model) rc = cli_usage_error("build ", "a model file is required");
    bool quant_rule = false; /* an int8 or fp8 rule: calibrated too */
    for (int i = 0; i < b.o.nlayer_precisions; i++)
        quant_rule |= b.o.layer_precisions[i].precision == KILN_PRECISION_INT8 ||
                      b.o.layer_precisions[i].precision == KILN_PRECISION_FP8;
    if (!rc && !b.o.int8 && !b.o.fp8 && !quant_rule &&
        (b.o.calib_dir || b.o.calib_cache || b.o.calibrator || b.o.calib_batches))
        rc = cli_usage_error("build ", "--calib, --calib-cache, --calibrator and --calib-batches go with --int8 or --fp8 "
                             "(or a --layer-precision PATTERN:int8|fp8 rule)");
    if (!rc && !b.o.int8 && (b.o.keep_sensitive || b.o.quantize_ends))
        rc = cli_usage_error("build ", "--keep-sensitive and --quantize-ends go with --int8");
    char hf_config[4096];
    struct stat config_st;
    snprintf(hf_config, sizeof hf_config, "%s/config.json", model ? model : "");
    if (!rc && stat(hf_config, &config_st) == 0) /* a Hugging Face checkpoint directory */
        rc = cli_usage_error("build ", "'%s' is a directory: a Hugging Face checkpoint is built with "
                             "kiln build --hf %s -o ENGINE.kiln", model, model);
    if (rc) {
        cli_build_opts_free(&b);
        return rc;
    }
    char dflt[4096];
    if (!output) {
        size_t n = strlen(model);
        if (cli_has_suffix(model, ".onnx")) n -= 5;
        snprintf(dflt, sizeof dflt, "%.*s.kiln", (int)n, model);
        output = dflt;
    }
    /* refuse a bad output now rather than after the build (the writer checks again, external data included) */
    kiln_status s = kiln_file_note_input(model);
    if (s == KILN_OK) s = kiln_file_check_output(output);
    if (s == KILN_OK && b.o.timing_cache) s = kiln_file_check_output(b.o.timing_cache);
    if (s == KILN_OK && b.o.calib_cache) s = kiln_file_check_output(b.o.calib_cache);
    if (s != KILN_OK) {
        cli_build_opts_free(&b);
        return cli_fail();
    }
    if (b.o.verbose) kiln_log_set_level(KILN_LOG_VERBOSE);
    if (b.best) fprintf(stderr, "kiln: --best: fp16, with fp32 accumulation in normalizations, softmax, reductions "
                                "and dot products\n");
    double t0 = cli_now_ms();
    kiln_engine *e = NULL;
    kiln_tuning_stats tuning = {0};
    b.o.tuning_stats = &tuning;
    b.o.output = output; /* the weights are written while the build goes on */
    s = kiln_build_onnx(model, &b.o, &e);
    double t1 = cli_now_ms();
    if (s == KILN_OK) s = kiln_engine_save(e, output);
    double t2 = cli_now_ms();
    if (s != KILN_OK) {
        kiln_engine_free(e);
        cli_build_opts_free(&b);
        return cli_fail();
    }
    struct stat st;
    long long size = stat(output, &st) == 0 ? (long long)st.st_size : -1;
    printf("built %s -> %s (target %s) in %.1f ms, saved in %.1f ms, %.2f MB\n", model, output, b.o.target, t1 - t0,
           t2 - t1, (double)size / 1e6);
    if (tuning.layers)
        printf("tuning: %d of %d layers tuned in %.1f ms; timing cache: %d hits (%d same as an earlier layer), %d misses, "
               "%d tactics timed, %d dropped%s\n", tuning.tuned, tuning.layers, tuning.ms, tuning.cache_hits,
               tuning.same_as_earlier, tuning.cache_misses, tuning.tactics_timed, tuning.dropped,
               tuning.out_of_budget ? " (the budget was spent: the layers left follow the heuristics)" : "");
    kiln_engine_free(e);
    cli_build_opts_free(&b);
    return 0;
}
