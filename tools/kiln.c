/* kiln.c — the `kiln` command: build | run | inspect | compare | load | generate | bench | perplexity |
 * serve, and --version / --help. */
#include "cli.h"

#include "engine/engine_format.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static const char *USAGE =
    "usage: kiln <command> [options]\n"
    "\n"
    "commands:\n"
    "  build MODEL.onnx -o ENGINE.kiln   compile a model into an engine file\n"
    "  run ENGINE.kiln|MODEL.onnx        run an engine on .npy inputs (or random ones)\n"
    "  inspect ENGINE.kiln|MODEL.onnx    show inputs, outputs, layers; for ONNX, unsupported nodes\n"
    "  compare MODEL.onnx [ENGINE.kiln]  an engine's outputs against the CPU fp32 reference (--llm: two LLMs)\n"
    "  load URL                          load-test an inference server (OpenAI, KServe v2, HTTP)\n"
    "  generate DIR --prompt TEXT        generate text with an LLM (checkpoint or engine; cpu or cuda)\n"
    "  bench ENGINE.kiln|MODEL.onnx      benchmark an engine (trtexec-style), profile, sweep\n"
    "  perplexity MODEL --text FILE      perplexity of an LLM (engine or checkpoint) on a text\n"
#ifdef KILN_HAVE_SERVE
    "  serve --repo DIR                  serve a model repository (KServe v2, OpenAI) over HTTP\n"
#endif
    "\n"
    "  kiln --version                    print the version\n"
    "  kiln <command> --help             options of a command\n";

int cli_fail(void) {
    fprintf(stderr, "kiln: error: %s\n", kiln_last_error());
    return 1;
}

int cli_usage_error(const char *cmd, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "kiln: error: ");
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "\nsee `kiln %s--help`\n", cmd ? cmd : "");
    return 2;
}

bool cli_is_help(const char *arg) { return !strcmp(arg, "--help") || !strcmp(arg, "-h"); }

bool cli_has_suffix(const char *s, const char *suffix) {
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && !strcmp(s + n - m, suffix);
}

bool cli_is_engine_file(const char *path) {
    if (cli_has_suffix(path, ".kiln")) return true;
    char magic[8] = {0};
    FILE *f = fopen(path, "rb");
    if (!f) return !cli_has_suffix(path, ".onnx"); /* let the loader report the error */
    size_t n = fread(magic, 1, sizeof magic, f);
    fclose(f);
    return n == sizeof magic && !memcmp(magic, KILN_ENGINE_MAGIC, sizeof magic);
}

kiln_status cli_open_engine(const char *path, bool verbose, kiln_engine **out) {
    if (!cli_is_engine_file(path)) {
        kiln_build_options o = {.target = "cpu", .verbose = verbose};
        return kiln_build_onnx(path, &o, out);
    }
    return kiln_engine_load(path, out);
}

const char *cli_utc_time(uint64_t unix_seconds, char *buf, size_t cap) {
    time_t t = (time_t)unix_seconds;
    struct tm tm;
    if (unix_seconds > (uint64_t)INT64_MAX || !gmtime_r(&t, &tm) || !strftime(buf, cap, "%Y-%m-%d %H:%M:%S UTC", &tm))
        snprintf(buf, cap, "an invalid date (%llu seconds since 1970)", (unsigned long long)unix_seconds);
    return buf;
}

bool cli_parse_precision(const char *s, kiln_precision *p) {
    if (!strcmp(s, "fp32")) *p = KILN_PRECISION_FP32;
    else if (!strcmp(s, "fp16")) *p = KILN_PRECISION_FP16;
    else if (!strcmp(s, "bf16")) *p = KILN_PRECISION_BF16;
    else return false;
    return true;
}

int cli_parse_dims(const char *s, const char *stop, int64_t *dims, const char **end) {
    int n = 0;
    if (!strncmp(s, "scalar", 6)) s += 6;
    while (*s && !strchr(stop, *s)) {
        char *e;
        long long v = strtoll(s, &e, 10);
        if (e == s || v < 0 || v > KILN_MAX_TENSOR_ELEMENTS || n == KILN_MAX_DIMS || (*e && *e != 'x' && !strchr(stop, *e))) return -1;
        dims[n++] = v;
        s = *e == 'x' ? e + 1 : e;
        if (*e == 'x' && (!*s || strchr(stop, *s))) return -1;
    }
    if (end) *end = s;
    return n;
}

double cli_now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fputs(USAGE, stderr);
        return 2;
    }
    const char *cmd = argv[1];
    if (!strcmp(cmd, "build") || !strcmp(cmd, "run") || !strcmp(cmd, "compare")) cli_fix_blas_cpu_detection(argv);
    if (!strcmp(cmd, "--version") || !strcmp(cmd, "version")) {
        printf("kiln %s\n", kiln_version());
        return 0;
    }
    if (cli_is_help(cmd) || !strcmp(cmd, "help")) {
        fputs(USAGE, stdout);
        return 0;
    }
    if (!strcmp(cmd, "build")) return kiln_cmd_build(argc - 1, argv + 1);
    if (!strcmp(cmd, "run")) return kiln_cmd_run(argc - 1, argv + 1);
    if (!strcmp(cmd, "inspect")) return kiln_cmd_inspect(argc - 1, argv + 1);
    if (!strcmp(cmd, "load")) return kiln_cmd_load(argc - 1, argv + 1);
    if (!strcmp(cmd, "bench")) return cli_fix_blas_cpu_detection(argv), kiln_cmd_bench(argc - 1, argv + 1);
    if (!strcmp(cmd, "compare")) return kiln_cmd_compare(argc - 1, argv + 1);
    if (!strcmp(cmd, "tokenize")) return kiln_cmd_tokenize(argc - 1, argv + 1);
    if (!strcmp(cmd, "generate")) return cli_fix_blas_cpu_detection(argv), kiln_cmd_generate(argc - 1, argv + 1);
    if (!strcmp(cmd, "perplexity")) return cli_fix_blas_cpu_detection(argv), kiln_cmd_perplexity(argc - 1, argv + 1);
#ifdef KILN_HAVE_SERVE
    if (!strcmp(cmd, "serve")) return kiln_cmd_serve(argc - 1, argv + 1);
#else
    if (!strcmp(cmd, "serve")) {
        fprintf(stderr, "kiln: error: this kiln was built without `kiln serve`: libmicrohttpd and cJSON were not found "
                        "at configure time (apt-get install libmicrohttpd-dev libcjson-dev, then configure again)\n");
        return 2;
    }
#endif
    fprintf(stderr, "kiln: error: unknown command '%s'\n\n%s", cmd, USAGE);
    return 2;
}
