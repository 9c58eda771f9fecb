/* cmd_compare.c — `kiln compare MODEL.onnx [ENGINE.kiln|OTHER.onnx]`: runs an engine and the CPU FP32 reference
 * built from the model on the same inputs and reports, per output, the errors and whether they are
 * within tolerance; --per-layer finds the first layer that diverges (src/compare/ does the work). */
#include "cli.h"

#include "compare/compare.h"
#include "ir/quant_ops.h"
#include "layer_precision.h"
#include "runtime/engine_internal.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char *USAGE =
    "usage: kiln compare MODEL.onnx [ENGINE.kiln|OTHER.onnx] [options]\n"
    "       kiln compare --llm A B --prompts FILE [--max-tokens N]   (two LLMs' greedy agreement:\n"
    "                                      kiln compare --llm --help)\n"
    "\n"
    "Builds the reference from MODEL.onnx (target cpu, fp32), runs it and the engine under test on the\n"
    "same inputs and reports per output: max abs error, max relative error (|test - ref| / |ref| where\n"
    "|ref| > atol), mean abs error, cosine similarity, and whether every element satisfies\n"
    "|test - ref| <= atol + rtol * |ref|. The engine under test is ENGINE.kiln (any target), or OTHER.onnx\n"
    "(e.g. a modified copy of the model) or, without either, MODEL.onnx, built with the build options below. Exit status: 0 when every output is within\n"
    "tolerance, 1 when one is not (they are named), 2 for bad arguments.\n"
    "\n"
    "options:\n"
    "  --atol X, --rtol X        tolerances (defaults by the engine's precision: fp32 1e-4/1e-4,\n"
    "                            fp16 1e-2/1e-2, bf16 2e-2/2e-2)\n"
    "  --per-layer               compare every intermediate value, in execution order, and name the first\n"
    "                            layer whose output diverges. Both sides are built from MODEL.onnx with\n"
    "                            every intermediate marked as an output, which blocks fusions: this\n"
    "                            compares the unfused graph. It needs the build options instead of an\n"
    "                            engine file (an engine holds only its own outputs), e.g.\n"
    "                            `kiln compare model.onnx --target cuda --fp16 --per-layer`.\n"
    "                            With --int8: ranks the int8 layers instead, each quantized alone on\n"
    "                            these inputs, by the output error it adds (the --keep-sensitive order)\n"
    "  --input NAME=FILE.npy     bind input NAME to a NumPy file (repeatable; then give every input)\n"
    "  --shapes NAME:AxBxC,...   shapes of random inputs (for dynamic dims)\n"
    "  --dim SYMBOL=N            size of a symbolic dimension for random inputs (default 1)\n"
    "  --seed N                  seed of the random inputs (default 0)\n"
    "  --verbose                 log the builds\n"
    "  -h, --help                this help\n"
    "\n"
    "build options of the engine under test (not with ENGINE.kiln; see `kiln build --help`):\n"
    "  --target cpu|cuda, --fp16, --bf16, --best, --layer-precision PATTERN:PREC,\n"
    "  --profile NAME:MIN,OPT,MAX, --device N, --int8 --calib DIR [--calibrator ...] [--keep-sensitive N]\n"
    "\n"
    "For classifier-shaped outputs ([rows, classes]) the top-1 agreement with the reference is shown.\n"
    "INT8 engines are measured on the inputs given here, which must not be the calibration batches.\n";

typedef struct compare_args {
    const char *model, *engine;
    cli_build_opts b;
    cli_inputs in;
    double atol, rtol; /* < 0: the precision's default */
    bool per_layer;
} compare_args;

/* Returns -1 to go on, or the exit status (0 after --help, 2 after a usage error). */
static int parse_args(int argc, char **argv, compare_args *a) {
    a->atol = a->rtol = -1;
    for (int i = 1; i < argc; i++) {
        const char *s = argv[i];
        int taken = cli_inputs_parse(&a->in, "compare ", argc, argv, &i);
        if (!taken) taken = cli_build_opts_parse(&a->b, "compare ", argc, argv, &i);
        if (taken == 2) return 2;
        if (taken) continue;
        if (cli_is_help(s)) {
            fputs(USAGE, stdout);
            return 0;
        } else if (!strcmp(s, "--atol") || !strcmp(s, "--rtol")) {
            char *end;
            errno = 0;
            double x = i + 1 < argc ? strtod(argv[i + 1], &end) : -1;
            if (i + 1 >= argc || end == argv[i + 1] || *end || errno || !(x >= 0) || isinf(x))
                return cli_usage_error("compare ", "%s expects a finite non-negative number, got '%s'", s, i + 1 < argc ? argv[i + 1] : "");
            *(s[2] == 'a' ? &a->atol : &a->rtol) = x;
            i++;
        } else if (!strcmp(s, "--per-layer")) {
            a->per_layer = true;
        } else if (s[0] == '-') {
            return cli_usage_error("compare ", "unknown option '%s'", s);
        } else if (!a->model) {
            a->model = s;
        } else if (!a->engine) {
            a->engine = s;
        } else {
            return cli_usage_error("compare ", "unexpected argument '%s'", s);
        }
    }
    if (!a->model) return cli_usage_error("compare ", "the ONNX model (the reference) is required");
    if (cli_is_engine_file(a->model))
        return cli_usage_error("compare ", "'%s' is an engine: the first argument is the ONNX model the reference is "
                               "built from", a->model);
    bool engine_file = a->engine && cli_is_engine_file(a->engine);
    if (engine_file && a->per_layer)
        return cli_usage_error("compare ", "--per-layer needs the ONNX model and the build options instead of an "
                               "engine file (an engine holds only its own outputs): e.g. `kiln compare %s --target "
                               "cuda --fp16 --per-layer`", a->model);
    if (compare_int8_check_inputs(&a->in, &a->b.o)) return 2;
    if (engine_file && a->b.given)
        return cli_usage_error("compare ", "build options describe the engine under test when no engine file is "
                               "given; '%s' was built already", a->engine);
    return -1;
}

/* One row; w is the width of the name column. */
static void print_row(const kiln_compare_item *it, int w) {
    const kiln_compare_stats *st = &it->st;
    if (!st->shape_ok) {
        printf("  %-*s FAIL (shape %s)\n", w, it->name, it->shapes);
        return;
    }
    printf("  %-*s %10.3g %10.3g %10.3g %10.6f  %s", w, it->name, st->max_abs, st->max_rel, st->mean_abs, st->cosine,
           st->pass ? "PASS" : "FAIL");
    if (!st->pass) printf(" (%lld of %lld elements)", (long long)st->failing, (long long)st->count);
    printf("\n");
}

static const char *engine_text(const kiln_engine *e, char *buf, size_t cap) {
    int q = kiln_graph_int8_layers(e->g), f = kiln_graph_fp8_layers(e->g); /* --int8 / --fp8 builds, QDQ models */
    int n = snprintf(buf, cap, "target %s, %s%s", e->meta.target, kiln_precision_name(e->meta.precision),
                     e->meta.node_precision ? " with per-layer precisions" : "");
    if (q && n > 0 && (size_t)n < cap) n += snprintf(buf + n, cap - (size_t)n, ", %d int8 layer%s", q, q > 1 ? "s" : "");
    if (f && n > 0 && (size_t)n < cap) snprintf(buf + n, cap - (size_t)n, ", %d fp8 layer%s", f, f > 1 ? "s" : "");
    return buf;
}

/* Prints the header, the rows and the verdict; returns the exit status. */
static int report(const compare_args *a, const kiln_engine *test, const kiln_compare_result *r, double atol,
                  double rtol, bool default_tol) {
    char what[160];
    printf("reference: %s (target cpu, fp32)\n", a->model);
    printf("under test: %s (%s)\n", a->engine ? a->engine : a->model, engine_text(test, what, sizeof what));
    printf("tolerance: atol %g, rtol %g%s\n", atol, rtol,
           default_tol ? " (the defaults for the engine's precision: fp32 1e-4, fp16 1e-2, bf16 2e-2)" : "");
    printf("inputs: %s\n", a->in.nfiles ? "from --input files" : "random (see --seed)");
    if (a->per_layer)
        printf("per-layer: both sides have every intermediate value as an output, which blocks fusions: this compares "
               "the unfused graph (%d values in both graphs%s)\n", r->nitems,
               r->only_reference ? ", some reference values have no counterpart and are skipped" : "");
    else if (r->only_reference)
        printf("%d reference output%s not in the engine under test (skipped)\n", r->only_reference,
               r->only_reference > 1 ? "s are" : " is");
    int w = 24;
    for (int i = 0; i < r->nitems; i++) {
        int len = (int)strlen(r->items[i].name);
        w = len > w ? (len < 72 ? len : 72) : w;
    }
    printf("  %-*s %10s %10s %10s %10s  %s\n", w, a->per_layer ? "value (execution order)" : "output", "max abs",
           "max rel", "mean abs", "cosine", "result");
    int shown = a->per_layer && r->first_failed >= 0 ? r->first_failed + 1 : r->nitems;
    for (int i = 0; i < shown; i++) print_row(&r->items[i], w);
    if (shown < r->nitems) printf("  ... %d values after it not shown\n", r->nitems - shown);
    for (int i = 0; !a->per_layer && i < r->nitems; i++)
        if (r->items[i].st.rows > 0)
            printf("  top-1 agreement '%s': %lld of %lld rows\n", r->items[i].name, (long long)r->items[i].st.top1,
                   (long long)r->items[i].st.rows);
    if (!r->nfailed) {
        printf("PASS: %d %s within tolerance\n", r->nitems, a->per_layer ? "values" : r->nitems > 1 ? "outputs" : "output");
        return 0;
    }
    if (a->per_layer) {
        const kiln_compare_item *f = &r->items[r->first_failed];
        printf("first divergence: layer '%s' (%s), output '%s': max abs %.3g, max rel %.3g, mean abs %.3g, cosine "
               "%.6f\n", f->node[0] ? f->node : "(constant)", f->op[0] ? f->op : "-", f->name, f->st.max_abs,
               f->st.max_rel, f->st.mean_abs, f->st.cosine);
        fprintf(stderr, "kiln: error: %d of %d values exceed the tolerance (atol %g, rtol %g); the first diverging "
                "layer is '%s' (%s), output '%s'\n", r->nfailed, r->nitems, atol, rtol, f->node, f->op, f->name);
        return 1;
    }
    char names[1024] = "";
    size_t n = 0;
    for (int i = 0; i < r->nitems && n < sizeof names; i++)
        if (!r->items[i].st.pass)
            n += (size_t)snprintf(names + n, sizeof names - n, "%s'%s'", n ? ", " : "", r->items[i].name);
    printf("FAIL: %d of %d outputs exceed the tolerance: %s\n", r->nfailed, r->nitems, names);
    fprintf(stderr, "kiln: error: %d of %d outputs exceed the tolerance (atol %g, rtol %g): %s\n", r->nfailed,
            r->nitems, atol, rtol, names);
    return 1;
}

static int compare(compare_args *a) {
    kiln_engine *ref = NULL, *test = NULL;
    kiln_tensor *inputs = NULL;
    kiln_compare_result r = {0};
    int rc = 1, nin = 0;
    if (a->b.o.verbose) kiln_log_set_level(KILN_LOG_VERBOSE);
    char *cache = NULL; /* --per-layer --int8: the thresholds the sensitivity builds reuse */
    bool rank = a->per_layer && !a->engine && compare_int8_build(&a->b.o);
    if (rank) {
        a->per_layer = false;
        if (!a->b.o.calib_cache && compare_int8_temp_cache(&cache) != KILN_OK) return cli_fail();
        if (cache) a->b.o.calib_cache = cache;
    }
    kiln_build_options ro = {.target = "cpu", .verbose = a->b.o.verbose, .mark_all_outputs = a->per_layer};
    a->b.o.mark_all_outputs = a->per_layer;
    if (kiln_build_onnx(a->model, &ro, &ref) != KILN_OK) goto fail;
    const char *source = a->engine ? a->engine : a->model;
    if ((cli_is_engine_file(source) ? kiln_engine_load(source, &test) : kiln_build_onnx(source, &a->b.o, &test)) != KILN_OK)
        goto fail;
    nin = kiln_engine_num_inputs(ref);
    inputs = calloc((size_t)nin + 1, sizeof *inputs);
    if (!inputs) goto fail;
    if (cli_inputs_make(&a->in, ref, inputs) != KILN_OK) goto fail;
    double atol, rtol;
    kiln_compare_tolerance(test->meta.precision, &atol, &rtol);
    bool default_tol = a->atol < 0 && a->rtol < 0;
    if (a->atol >= 0) atol = a->atol;
    if (a->rtol >= 0) rtol = a->rtol;
    if (kiln_compare_run(ref, test, inputs, atol, rtol, &r) != KILN_OK) goto fail;
    if (r.nitems == 0) {
        fprintf(stderr, "kiln: error: the engine under test has none of the reference's outputs: is it built from "
                "'%s'?\n", a->model);
        goto done;
    }
    rc = report(a, test, &r, atol, rtol, default_tol);
    if (rank && compare_int8_rank(a->model, &a->b.o, a->b.o.calib_cache, test, inputs) != KILN_OK) goto fail;
    goto done;
fail:
    rc = cli_fail();
done:
    for (int i = 0; inputs && i < nin; i++) kiln_tensor_release(&inputs[i]);
    free(inputs);
    kiln_compare_result_free(&r);
    if (cache) unlink(cache);
    free(cache);
    kiln_engine_free(test);
    kiln_engine_free(ref);
    return rc;
}

int kiln_cmd_compare(int argc, char **argv) {
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "--llm")) return kiln_cmd_compare_llm(argc, argv);
    compare_args a;
    memset(&a, 0, sizeof a);
    cli_build_opts_init(&a.b);
    int rc = parse_args(argc, argv, &a);
    if (rc < 0) rc = compare(&a);
    cli_build_opts_free(&a.b);
    cli_inputs_free(&a.in);
    return rc;
}
