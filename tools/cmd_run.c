/* cmd_run.c — `kiln run ENGINE`: bind .npy (or random) inputs, run, print and save the outputs, time it. */
#include "cli.h"

#include "core/file.h"
#include "core/npy.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static const char *USAGE =
    "usage: kiln run ENGINE.kiln|MODEL.onnx [options]\n"
    "\n"
    "Runs an engine (or a model, built in memory first) once or several times.\n"
    "Without --input, every input is random (floats uniform in [-1, 1), integers in [0, 8)); with\n"
    "--input, every input must be given.\n"
    "\n"
    "options:\n"
    "  --input NAME=FILE.npy     bind input NAME to a NumPy file (repeatable)\n"
    "  --shapes NAME:AxBxC,...   shapes of random inputs (e.g. image:4x3x224x224)\n"
    "  --dim SYMBOL=N            size of a symbolic dimension for random inputs (default 1)\n"
    "  --seed N                  seed of the random inputs (default 0)\n"
    "  --output-dir DIR          write each output to DIR/<output name>.npy\n"
    "  --iterations N            run N times and print the latency (default 1)\n"
    "  --warmup N                untimed runs first (default 0; 1 when --iterations > 1)\n"
    "  --no-transfers            time the computation alone: after the first run, no host<->device\n"
    "                            copies (GPU engines; the printed outputs are the first run's)\n"
    "  --quiet                   do not print output values\n"
    "  -h, --help                this help\n";

typedef struct run_args {
    const char *engine, *output_dir;
    cli_inputs in;
    int iterations, warmup;
    bool quiet, no_transfers;
} run_args;

static int parse_args(int argc, char **argv, run_args *a) {
    memset(a, 0, sizeof *a);
    a->iterations = 1;
    a->warmup = -1;
    for (int i = 1; i < argc; i++) {
        const char *s = argv[i];
        const char *val = (i + 1 < argc) ? argv[i + 1] : NULL;
        if (cli_is_help(s)) {
            fputs(USAGE, stdout);
            return 0;
        }
        int taken = cli_inputs_parse(&a->in, "run ", argc, argv, &i);
        if (taken == 2) return 2;
        if (taken) continue;
        bool takes = !strcmp(s, "--output-dir") || !strcmp(s, "--iterations") || !strcmp(s, "--warmup");
        if (takes && !val) return cli_usage_error("run ", "%s needs a value", s);
        if (!strcmp(s, "--iterations") || !strcmp(s, "--warmup")) {
            char *end;
            errno = 0;
            long long n = strtoll(val, &end, 10);
            bool iterations = !strcmp(s, "--iterations");
            if (*end || end == val || errno || n < (iterations ? 1 : 0) || n > 100000000)
                return cli_usage_error("run ", "%s expects an integer from %d to 100000000, got '%s'", s, iterations ? 1 : 0, val);
            if (iterations) a->iterations = (int)n;
            else a->warmup = (int)n;
        } else if (!strcmp(s, "--output-dir")) {
            a->output_dir = val;
        } else if (!strcmp(s, "--no-transfers")) {
            a->no_transfers = true;
            continue;
        } else if (!strcmp(s, "--quiet") || !strcmp(s, "-q")) {
            a->quiet = true;
            continue;
        } else if (s[0] == '-') {
            return cli_usage_error("run ", "unknown option '%s'", s);
        } else if (!a->engine) {
            a->engine = s;
            continue;
        } else {
            return cli_usage_error("run ", "unexpected argument '%s'", s);
        }
        i++;
    }
    if (!a->engine) return cli_usage_error("run ", "an engine or model file is required");
    if (a->warmup < 0) a->warmup = a->iterations > 1 ? 1 : 0;
    return -1; /* continue */
}

static void print_output(const kiln_tensor_desc *d, const void *data) {
    kiln_tensor t;
    kiln_tensor_view(&t, d->dtype, d->ndim, d->dims, (void *)data);
    char shape[256];
    int64_t n = kiln_tensor_numel(&t);
    printf("output %s: %s%s\n", d->name, kiln_dtype_name(d->dtype), kiln_shape_str(shape, sizeof shape, d->ndim, d->dims));
    if (n == 0 || kiln_dtype_size(d->dtype) == 0) return;
    double mn = INFINITY, mx = -INFINITY, sum = 0;
    for (int64_t i = 0; i < n; i++) {
        double v = kiln_tensor_get_f64(&t, i);
        mn = v < mn ? v : mn;
        mx = v > mx ? v : mx;
        sum += v;
    }
    printf("  values:");
    for (int64_t i = 0; i < n && i < 8; i++) printf(" %.6g", kiln_tensor_get_f64(&t, i));
    printf("%s\n  min %.6g  max %.6g  mean %.6g\n", n > 8 ? " ..." : "", mn, mx, sum / (double)n);
}

static int cmp_double(const void *x, const void *y) {
    double a = *(const double *)x, b = *(const double *)y;
    return (a > b) - (a < b);
}

static int run(const run_args *a) {
    kiln_engine *e = NULL;
    kiln_context *c = NULL;
    int nin = 0, rc = 1;
    kiln_tensor *inputs = NULL;
    double *times = NULL;
    if (cli_open_engine(a->engine, false, &e) != KILN_OK) return cli_fail();
    nin = kiln_engine_num_inputs(e);
    inputs = calloc((size_t)nin + 1, sizeof *inputs);
    times = calloc((size_t)a->iterations, sizeof *times);
    if (!inputs || !times || kiln_context_create(e, &c) != KILN_OK) goto fail;
    if (cli_inputs_make(&a->in, e, inputs) != KILN_OK) goto fail;
    for (int i = 0; i < nin; i++) {
        kiln_tensor_desc d;
        kiln_engine_input(e, i, &d);
        if (kiln_context_set_input(c, d.name, inputs[i].dtype, inputs[i].ndim, inputs[i].dims, inputs[i].data) != KILN_OK)
            goto fail;
    }
    if (a->no_transfers) { /* one run with transfers puts the inputs on the device */
        if (kiln_context_run(c) != KILN_OK || kiln_context_set_transfers(c, false) != KILN_OK) goto fail;
    }
    for (int w = 0; w < a->warmup; w++)
        if (kiln_context_run(c) != KILN_OK) goto fail;
    for (int it = 0; it < a->iterations; it++) {
        double t0 = cli_now_ms();
        if (kiln_context_run(c) != KILN_OK) goto fail;
        times[it] = cli_now_ms() - t0;
    }
    if (a->output_dir && kiln_file_output_dir(a->output_dir) != KILN_OK) goto fail;
    for (int i = 0; i < kiln_engine_num_outputs(e); i++) {
        kiln_tensor_desc d;
        const void *data;
        if (kiln_context_output(c, i, &d, &data) != KILN_OK) goto fail;
        if (!a->quiet) print_output(&d, data);
        if (a->output_dir) {
            char path[4096];
            char safe[256];
            snprintf(safe, sizeof safe, "%s", d.name);
            for (char *p = safe; *p; p++)
                if (*p == '/' || *p == '\\') *p = '_';
            snprintf(path, sizeof path, "%s/%s.npy", a->output_dir, safe);
            kiln_tensor t;
            kiln_tensor_view(&t, d.dtype, d.ndim, d.dims, (void *)data);
            if (kiln_npy_write(path, &t) != KILN_OK) goto fail;
        }
    }
    if (kiln_engine_num_profiles(e) > 0) printf("optimization profile: %d\n", kiln_context_profile(c));
    qsort(times, (size_t)a->iterations, sizeof *times, cmp_double);
    double sum = 0;
    for (int it = 0; it < a->iterations; it++) sum += times[it];
    int n = a->iterations;
    double median = n % 2 ? times[n / 2] : (times[n / 2 - 1] + times[n / 2]) / 2;
    printf("latency over %d run%s: median %.3f ms, mean %.3f ms, min %.3f ms, max %.3f ms\n", n, n > 1 ? "s" : "",
           median, sum / n, times[0], times[n - 1]);
    rc = 0;
    goto done;
fail:
    rc = cli_fail();
done:
    for (int i = 0; i < nin; i++) kiln_tensor_release(&inputs[i]);
    free(inputs);
    free(times);
    kiln_context_free(c);
    kiln_engine_free(e);
    return rc;
}

int kiln_cmd_run(int argc, char **argv) {
    run_args a;
    int rc = parse_args(argc, argv, &a);
    if (rc < 0) rc = run(&a);
    cli_inputs_free(&a.in);
    return rc;
}
