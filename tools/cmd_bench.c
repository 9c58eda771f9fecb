/* cmd_bench.c — `kiln bench ENGINE|MODEL`: trtexec's measurements and more (src/bench/ does the
 * work): parses the options, opens or builds the engine, measures, diagnoses, prints, and writes the
 * JSON and HTML reports; `--sweep` runs the precision x batch x streams matrix; `--ceilings` measures
 * the device's limits once and stores them; `--llm` benchmarks an LLM instead (cmd_bench_llm.c). */
#include "cli.h"

#include "bench/bench.h"
#include "core/status.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static const char *USAGE =
    "usage: kiln bench ENGINE.kiln|MODEL.onnx [options]\n"
    "       kiln bench --ceilings [--target cpu|cuda] [--ceilings-file FILE]\n"
    "       kiln bench --llm ENGINE.kiln|DIR [--batch 1,8,64] [--input-len N] [--output-len N] ...\n"
    "                                      (an LLM, as trtllm-bench: kiln bench --llm X --help)\n"
    "\n"
    "Measures an engine the way trtexec does: a warm-up by duration, then queries back to back for a\n"
    "duration and at least a number of iterations, on one or more concurrent contexts (streams). Prints\n"
    "throughput, latency percentiles (nearest rank) with stddev, enqueue / H2D / compute / D2H times\n"
    "where the backend measures them, the environment, memory, achieved GB/s and TFLOP/s against the\n"
    "device's measured ceilings, and what bounds the engine. Inputs are random (seeded).\n"
    "\n"
    "options:\n"
    "  --warmup MS             warm-up duration (default 200)\n"
    "  --duration S            measured duration in seconds (default 3)\n"
    "  --iterations N          at least N measured queries (default 10)\n"
    "  --streams N             concurrent streams, one thread each (default 1); on the GPU with\n"
    "                          transfers each keeps two queries in flight on two contexts\n"
    "  --graph on|off          CUDA graphs (default on; ignored on the CPU)\n"
    "  --no-transfers          no host<->device copies after the first run (GPU)\n"
    "  --shapes NAME:AxB,...   input shapes for dynamic engines\n"
    "  --batch N               dim 0 of inputs whose dim 0 is symbolic (default 1)\n"
    "  --seed N                seed of the random inputs (default 0)\n"
    "  --target cpu|cuda       target when building an ONNX model (default cpu)\n"
    "  --device N              GPU ordinal (default 0)\n"
    "  --fp16, --bf16          build an ONNX model in half precision (target cuda)\n"
    "  --profile               per-layer times (separate runs after the measurement)\n"
    "  --export-json FILE      every measurement and every query's times (schema: docs/bench.md)\n"
    "  --report FILE.html      a self-contained HTML report with charts\n"
    "  --sweep KEY=V1,V2,...   precision=fp32,fp16,bf16,int8,fp8 | batch=1,8,64 | streams=1,2 (repeatable):\n"
    "                          one engine and run per configuration, one comparison table with the\n"
    "                          accuracy against fp32 (errors, cosine, top-1)\n"
    "  --calib DIR|FILE.npz    calibration batches of the int8 rows (as `kiln build --calib`); without\n"
    "                          it they calibrate on random inputs, with a warning\n"
    "  --ceilings              measure the device's bandwidth and GEMM throughput and store them\n"
    "  --ceilings-file FILE    where ceilings are kept (default ~/.cache/kiln/ceilings.json)\n"
    "  -h, --help              this help\n";

typedef struct bench_args {
    const char *model, *json, *html, *ceilings_file;
    const char *target;
    int device;
    kiln_precision precision;
    bool precision_given, measure_ceilings, sweeping;
    kiln_bench_config cfg;
    kiln_bench_sweep sweep;
} bench_args;

/* Parses a number for flag s; false when it is not one within [lo, hi]. */
static bool parse_number(const char *s, double lo, double hi, double *out) {
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (end == s || *end || errno || !isfinite(v) || v < lo || v > hi) return false;
    *out = v;
    return true;
}

static int parse_value(bench_args *a, const char *s, const char *val) {
    double v;
    if (!strcmp(s, "--warmup") || !strcmp(s, "--duration")) {
        if (!parse_number(val, 0, 1e7, &v)) return cli_usage_error("bench ", "%s expects a number from 0 to 10000000, got '%s'", s, val);
        if (s[2] == 'w') a->cfg.warmup_ms = v;
        else a->cfg.duration_s = v;
    } else if (!strcmp(s, "--iterations") || !strcmp(s, "--streams") || !strcmp(s, "--batch") || !strcmp(s, "--device") ||
               !strcmp(s, "--seed")) {
        bool zero_ok = !strcmp(s, "--device") || !strcmp(s, "--seed");
        double hi = !strcmp(s, "--streams") ? 256 : 1e15;
        if (!parse_number(val, zero_ok ? 0 : 1, hi, &v) || v != floor(v))
            return cli_usage_error("bench ", "%s expects an integer from %d to %.0f, got '%s'", s, zero_ok ? 0 : 1, hi, val);
        if (s[2] == 'i') a->cfg.iterations = (int64_t)v;
        else if (s[3] == 't') a->cfg.streams = (int)v;
        else if (s[2] == 'b') a->cfg.batch = (int64_t)v;
        else if (s[2] == 'd') a->device = (int)v;
        else a->cfg.seed = (uint64_t)v;
    } else if (!strcmp(s, "--graph")) {
        if (strcmp(val, "on") && strcmp(val, "off")) return cli_usage_error("bench ", "--graph expects on or off, got '%s'", val);
        a->cfg.graphs = !strcmp(val, "on");
    } else if (!strcmp(s, "--target")) {
        if (strcmp(val, "cpu") && strcmp(val, "cuda")) return cli_usage_error("bench ", "--target expects cpu or cuda, got '%s'", val);
        a->target = val;
    } else if (!strcmp(s, "--shapes")) {
        if (!strchr(val, ':')) return cli_usage_error("bench ", "--shapes expects NAME:AxBxC[,NAME:...], got '%s'", val);
        a->cfg.shapes = val;
    } else if (!strcmp(s, "--sweep")) {
        if (kiln_bench_sweep_parse(&a->sweep, val) != KILN_OK) return cli_usage_error("bench ", "%s", kiln_last_error());
        a->sweeping = true;
    } else if (!strcmp(s, "--calib")) {
        a->sweep.calib_dir = val;
    } else if (!strcmp(s, "--export-json")) {
        a->json = val;
    } else if (!strcmp(s, "--report")) {
        a->html = val;
    } else {
        a->ceilings_file = val;
    }
    return -1;
}

static int parse_args(int argc, char **argv, bench_args *a) {
    memset(a, 0, sizeof *a);
    a->target = NULL;
    a->cfg = (kiln_bench_config){.warmup_ms = 200, .duration_s = 3, .iterations = 10, .streams = 1, .graphs = -1};
    static const char *const TAKES[] = {"--warmup", "--duration", "--iterations", "--streams", "--graph", "--shapes", "--batch",
                                        "--seed", "--target", "--device", "--export-json", "--report", "--sweep", "--ceilings-file",
                                        "--calib"};
    for (int i = 1; i < argc; i++) {
        const char *s = argv[i];
        if (cli_is_help(s)) {
            fputs(USAGE, stdout);
            return 0;
        }
        bool takes = false;
        for (size_t k = 0; k < sizeof TAKES / sizeof *TAKES; k++) takes |= !strcmp(s, TAKES[k]);
        if (takes) {
            if (i + 1 >= argc) return cli_usage_error("bench ", "%s needs a value", s);
            int rc = parse_value(a, s, argv[++i]);
            if (rc >= 0) return rc;
        } else if (!strcmp(s, "--fp16") || !strcmp(s, "--bf16")) {
            kiln_precision p = s[3] == 'p' ? KILN_PRECISION_FP16 : KILN_PRECISION_BF16;
            if (a->precision_given && a->precision != p) return cli_usage_error("bench ", "--fp16 and --bf16 exclude each other");
            a->precision = p;
            a->precision_given = true;
        } else if (!strcmp(s, "--no-transfers")) {
            a->cfg.no_transfers = true;
        } else if (!strcmp(s, "--profile")) {
            a->cfg.profile = true;
        } else if (!strcmp(s, "--ceilings")) {
            a->measure_ceilings = true;
        } else if (s[0] == '-' && s[1]) {
            return cli_usage_error("bench ", "unknown option '%s'", s);
        } else if (!a->model) {
            a->model = s;
        } else {
            return cli_usage_error("bench ", "unexpected argument '%s'", s);
        }
    }
    if (!a->model && !a->measure_ceilings) return cli_usage_error("bench ", "an engine or model file is required");
    if (a->model && cli_is_engine_file(a->model) && (a->precision_given || a->target))
        return cli_usage_error("bench ", "%s applies to ONNX models; an engine keeps the target and precision it was built with",
                               a->precision_given ? (a->precision == KILN_PRECISION_FP16 ? "--fp16" : "--bf16") : "--target");
    bool int8_row = false;
    for (int i = 0; i < a->sweep.nprecisions; i++) int8_row |= a->sweep.precisions[i] == KILN_PRECISION_INT8;
    if (a->sweep.calib_dir && !int8_row)
        return cli_usage_error("bench ", "--calib goes with --sweep precision=...,int8 (it calibrates the int8 rows)");
    if (a->sweeping && a->sweep.nprecisions && a->precision_given)
        return cli_usage_error("bench ", "--sweep precision=... replaces --fp16/--bf16: give one of them");
    if (a->sweeping && a->sweep.nbatches && a->cfg.batch)
        return cli_usage_error("bench ", "--sweep batch=... replaces --batch: give one of them");
    return -1;
}

static void utc_now(char *buf, size_t cap) {
    time_t t = time(NULL);
    struct tm tm;
    gmtime_r(&t, &tm);
    strftime(buf, cap, "%Y-%m-%dT%H:%M:%SZ", &tm);
}

/* --ceilings: measures the target device and stores the result. */
static int measure_ceilings(const bench_args *a, const char *path) {
    kiln_bench_ceilings c;
    bool gpu = a->target && !strcmp(a->target, "cuda");
    printf("measuring the ceilings of the %s (a few seconds)...\n", gpu ? "GPU" : "CPU");
    kiln_status s = gpu ? kiln_bench_ceilings_measure_gpu(a->device, &c) : kiln_bench_ceilings_measure_cpu(&c);
    if (s != KILN_OK) return cli_fail();
    if (!gpu) {
        kiln_bench_env env;
        kiln_bench_env_init(&env, "cpu", 0);
        snprintf(c.device, sizeof c.device, "%s", env.cpu_model);
    }
    utc_now(c.measured_at, sizeof c.measured_at);
    if (kiln_bench_ceilings_save(path, &c) != KILN_OK) return cli_fail();
    printf("ceilings of %s: %.1f GB/s copy bandwidth, %.3f TFLOP/s fp32", c.device, c.mem_gbps, c.tflops_fp32);
    if (c.tflops_fp16 > 0) printf(", %.2f TFLOP/s fp16", c.tflops_fp16);
    printf("\n  method: %s\n  stored in %s\n", c.method, path);
    return 0;
}

/* Writes the requested report files. */
static int write_reports(const bench_args *a, const kiln_bench_doc *d) {
    if (a->json && kiln_bench_write_json(d, a->json) != KILN_OK) return cli_fail();
    if (a->html && kiln_bench_write_html(d, a->html) != KILN_OK) return cli_fail();
    if (a->json) printf("wrote %s\n", a->json);
    if (a->html) printf("wrote %s\n", a->html);
    return 0;
}

/* One benchmark of engine e. */
static int bench_one(bench_args *a, kiln_engine *e, kiln_bench_doc *d, kiln_bench_env *env, const char *ceil_path) {
    kiln_bench_ceilings ceil;
    const char *key = env->gpu ? env->gpu_name : env->cpu_model;
    if (kiln_bench_ceilings_load(ceil_path, key, &ceil) != KILN_OK) {
        fprintf(stderr, "kiln: warning: ignoring the ceilings file: %s\n", kiln_last_error());
        memset(&ceil, 0, sizeof ceil);
    }
    kiln_bench_result r;
    kiln_bench_env_sample(env, &env->before);
    kiln_bench_sampler *smp = kiln_bench_sampler_start(env);
    kiln_status s = kiln_bench_run(e, &a->cfg, &r);
    kiln_bench_sampler_stop(smp, env);
    kiln_bench_env_sample(env, &env->after);
    if (s != KILN_OK) return cli_fail();
    bool half = d->precision != KILN_PRECISION_FP32;
    kiln_bench_diag_input in = {
        .enqueue_ms = r.enqueue.present ? r.enqueue.s.median : -1, .h2d_ms = r.h2d.present ? r.h2d.s.median : -1,
        .compute_ms = r.compute.present ? r.compute.s.median : -1, .d2h_ms = r.d2h.present ? r.d2h.s.median : -1,
        .compute_cv = r.compute.present ? r.compute.s.cv : 0, .flops = r.flops, .bytes = r.bytes,
        .ceil_gbps = ceil.known ? ceil.mem_gbps : 0, .ceil_tflops = ceil.known ? (half && ceil.tflops_fp16 > 0 ? ceil.tflops_fp16 : ceil.tflops_fp32) : 0,
        .gpu = env->gpu, .graphs_available = r.graphs_available, .graphs_on = a->cfg.graphs != 0};
    kiln_bench_diagnosis diag;
    kiln_bench_diagnose(&in, &diag);
    d->res = &r;
    d->ceil = &ceil;
    d->diag = &diag;
    kiln_bench_print(d, stdout);
    int rc = write_reports(a, d);
    kiln_bench_result_free(&r);
    return rc;
}

static int run(bench_args *a) {
    char ceil_path[4096];
    if (a->ceilings_file) snprintf(ceil_path, sizeof ceil_path, "%s", a->ceilings_file);
    else kiln_bench_ceilings_default_path(ceil_path, sizeof ceil_path);
    if (a->measure_ceilings) {
        int rc = measure_ceilings(a, ceil_path);
        if (rc || !a->model) return rc;
    }
    bool is_engine = cli_is_engine_file(a->model);
    const char *target = a->target ? a->target : "cpu";
    kiln_bench_doc d = {.model_path = a->model, .cfg = &a->cfg, .precision = a->precision};
    utc_now(d.started_at, sizeof d.started_at);
    kiln_engine *e = NULL;
    kiln_bench_env env;
    int rc;
    d.build_s = d.engine_bytes = -1;
    d.target = target;
    if (a->sweeping && !is_engine) { /* the sweep builds its own engines */
        if (kiln_bench_device_desc(target, a->device, d.device, sizeof d.device) != KILN_OK) return cli_fail();
    } else {
        if (kiln_bench_open(a->model, is_engine, target, a->precision, a->device, &e, &d.build_s, &d.engine_bytes) != KILN_OK) return cli_fail();
        kiln_bench_engine_info(e, a->device, &d.target, &d.precision, d.device, sizeof d.device);
    }
    kiln_bench_env_init(&env, d.target, a->device);
    d.env = &env;
    if (!strcmp(d.target, "cpu") && a->cfg.graphs >= 0) fprintf(stderr, "kiln: note: --graph is ignored on the CPU (no CUDA graphs)\n");
    if (a->sweeping) {
        kiln_engine_free(e);
        e = NULL;
        if (kiln_bench_sweep_run(&a->sweep, a->model, is_engine, d.target, a->device, d.precision, &a->cfg, &env) != KILN_OK) return cli_fail();
        d.sweep = &a->sweep;
        kiln_bench_print(&d, stdout);
        rc = write_reports(a, &d);
    } else {
        rc = bench_one(a, e, &d, &env, ceil_path);
    }
    kiln_engine_free(e);
    return rc;
}

int kiln_cmd_bench(int argc, char **argv) {
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "--llm")) return kiln_cmd_bench_llm(argc, argv);
    bench_args *a = calloc(1, sizeof *a);
    if (!a) return cli_fail();
    int rc = parse_args(argc, argv, a);
    if (rc < 0) rc = run(a);
    free(a);
    return rc;
}
