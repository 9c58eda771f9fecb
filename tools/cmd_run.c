/* cmd_run.c — `kiln run ENGINE`: bind .npy (or random) inputs, run, print and save the outputs, time it. */
#include "cli.h"

#include "core/npy.h"
#include "core/status.h"

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

#define MAX_ARGS 64

typedef struct run_args {
    const char *engine, *output_dir;
    const char *input_names[MAX_ARGS], *input_files[MAX_ARGS];
    int ninputs;
    const char *shape_specs[MAX_ARGS];
    int nshapes;
    const char *dim_names[MAX_ARGS];
    int64_t dim_values[MAX_ARGS];
    int ndims;
    uint64_t seed;
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
        bool takes = !strcmp(s, "--input") || !strcmp(s, "--shapes") || !strcmp(s, "--dim") || !strcmp(s, "--seed") ||
                     !strcmp(s, "--output-dir") || !strcmp(s, "--iterations") || !strcmp(s, "--warmup");
        if (takes && !val) return cli_usage_error("run ", "%s needs a value", s);
        if (!strcmp(s, "--input")) {
            const char *eq = strchr(val, '=');
            if (!eq || eq == val || !eq[1]) return cli_usage_error("run ", "--input expects NAME=FILE.npy, got '%s'", val);
            if (a->ninputs == MAX_ARGS) return cli_usage_error("run ", "too many --input options");
            for (int k = 0; k < a->ninputs; k++)
                if (strlen(a->input_names[k]) == (size_t)(eq - val) && !strncmp(a->input_names[k], val, (size_t)(eq - val)))
                    return cli_usage_error("run ", "input '%s' is given twice", a->input_names[k]);
            a->input_names[a->ninputs] = strndup(val, (size_t)(eq - val));
            a->input_files[a->ninputs++] = eq + 1;
        } else if (!strcmp(s, "--shapes")) {
            if (a->nshapes == MAX_ARGS) return cli_usage_error("run ", "too many --shapes options");
            a->shape_specs[a->nshapes++] = val;
        } else if (!strcmp(s, "--dim")) {
            const char *eq = strchr(val, '=');
            char *end;
            long long n = eq ? strtoll(eq + 1, &end, 10) : -1;
            if (!eq || eq == val || n < 0 || *end) return cli_usage_error("run ", "--dim expects SYMBOL=N, got '%s'", val);
            if (a->ndims == MAX_ARGS) return cli_usage_error("run ", "too many --dim options");
            a->dim_names[a->ndims] = strndup(val, (size_t)(eq - val));
            a->dim_values[a->ndims++] = n;
        } else if (!strcmp(s, "--seed") || !strcmp(s, "--iterations") || !strcmp(s, "--warmup")) {
            char *end;
            errno = 0;
            long long n = strtoll(val, &end, 10);
            if (*end || errno || n < 0 || (strcmp(s, "--seed") && n > 100000000))
                return cli_usage_error("run ", "%s expects a non-negative integer, got '%s'", s, val);
            if (!strcmp(s, "--seed")) a->seed = (uint64_t)n;
            else if (!strcmp(s, "--iterations")) a->iterations = n ? (int)n : 1;
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

/* xorshift64*: reproducible random inputs for a seed */
static uint64_t next_random(uint64_t *s) {
    *s ^= *s >> 12;
    *s ^= *s << 25;
    *s ^= *s >> 27;
    return *s * 2685821657736338717ull;
}

/* Shape for a random input: from --shapes NAME:AxB, else the declared dims with symbolic ones from
 * --dim (default 1). */
static kiln_status random_shape(const run_args *a, const kiln_tensor_desc *d, int *ndim, int64_t *dims) {
    size_t nlen = strlen(d->name);
    for (int k = 0; k < a->nshapes; k++) {
        for (const char *p = a->shape_specs[k]; p && *p;) {
            const char *colon = strchr(p, ':');
            if (!colon) return kiln_error(KILN_ERR_INVALID_ARGUMENT, "--shapes expects NAME:AxBxC, got '%s'", p);
            const char *next = strchr(colon, ',');
            if ((size_t)(colon - p) == nlen && !strncmp(p, d->name, nlen)) {
                *ndim = 0;
                const char *q = colon + 1;
                while (q && *q && *q != ',') {
                    char *end;
                    long long v = strtoll(q, &end, 10);
                    if (end == q || v < 0 || *ndim == KILN_MAX_DIMS)
                        return kiln_error(KILN_ERR_INVALID_ARGUMENT, "--shapes: malformed shape for '%s'", d->name);
                    dims[(*ndim)++] = v;
                    q = (*end == 'x') ? end + 1 : end;
                }
                return KILN_OK;
            }
            p = next ? next + 1 : NULL;
        }
    }
    *ndim = d->ndim;
    for (int i = 0; i < d->ndim; i++) {
        dims[i] = d->dims[i] >= 0 ? d->dims[i] : 1;
        for (int k = 0; d->dims[i] < 0 && d->dim_names[i] && k < a->ndims; k++)
            if (!strcmp(a->dim_names[k], d->dim_names[i])) dims[i] = a->dim_values[k];
    }
    return KILN_OK;
}

static kiln_status make_random(const run_args *a, const kiln_tensor_desc *d, uint64_t *rng, kiln_tensor *t) {
    int ndim = 0;
    int64_t dims[KILN_MAX_DIMS];
    KILN_TRY(random_shape(a, d, &ndim, dims));
    KILN_TRY(kiln_tensor_alloc(t, d->dtype, ndim, dims));
    int64_t n = kiln_tensor_numel(t);
    bool is_float = d->dtype == KILN_F32 || d->dtype == KILN_F64 || d->dtype == KILN_F16 || d->dtype == KILN_BF16;
    for (int64_t i = 0; i < n; i++) {
        uint64_t r = next_random(rng);
        double v = is_float ? (double)(r >> 11) / 9007199254740992.0 * 2.0 - 1.0
                            : (double)(d->dtype == KILN_BOOL ? (r >> 33) & 1 : (r >> 33) % 8);
        kiln_tensor_set_f64(t, i, v);
    }
    return KILN_OK;
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
    for (int k = 0; k < a->ninputs; k++) {
        bool known = false;
        for (int i = 0; i < nin; i++) {
            kiln_tensor_desc d;
            kiln_engine_input(e, i, &d);
            known |= !strcmp(d.name, a->input_names[k]);
        }
        if (!known) {
            kiln_context_set_input(c, a->input_names[k], KILN_F32, 0, NULL, NULL); /* sets the "no input" message */
            goto fail;
        }
    }
    uint64_t rng = a->seed * 0x9E3779B97F4A7C15ull + 0x2545F4914F6CDD1Dull;
    for (int i = 0; i < nin; i++) {
        kiln_tensor_desc d;
        kiln_engine_input(e, i, &d);
        const char *file = NULL;
        for (int k = 0; k < a->ninputs; k++)
            if (!strcmp(a->input_names[k], d.name)) file = a->input_files[k];
        if (!file && a->ninputs > 0) {
            kiln_error(KILN_ERR_INVALID_ARGUMENT, "missing input '%s': give every input with --input, or none for random inputs",
                       d.name);
            goto fail;
        }
        kiln_status s = file ? kiln_npy_read(file, &inputs[i]) : make_random(a, &d, &rng, &inputs[i]);
        if (s != KILN_OK) goto fail;
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
    if (a->output_dir) mkdir(a->output_dir, 0777);
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
    for (int k = 0; k < a.ninputs; k++) free((void *)a.input_names[k]);
    for (int k = 0; k < a.ndims; k++) free((void *)a.dim_names[k]);
    return rc;
}
