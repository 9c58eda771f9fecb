/* cli.h — shared pieces of the `kiln` command: subcommand entry points and error printing.
 * Exit codes: 0 success, 1 failure (message on stderr, "kiln: error: ..."), 2 usage error. */
#ifndef KILN_CLI_H
#define KILN_CLI_H

#include "core/tensor.h"
#include "kiln/kiln.h"

#include <stdbool.h>

int kiln_cmd_build(int argc, char **argv);
int kiln_cmd_build_llm(int argc, char **argv);    /* kiln build --hf */
int kiln_cmd_bench_llm(int argc, char **argv);    /* kiln bench --llm */
int kiln_cmd_run(int argc, char **argv);
int kiln_cmd_inspect(int argc, char **argv);
int cli_inspect_llm(const char *path, bool layers); /* kiln inspect of an LLM engine */
int kiln_cmd_load(int argc, char **argv);
int kiln_cmd_bench(int argc, char **argv);
int kiln_cmd_compare(int argc, char **argv);
int kiln_cmd_tokenize(int argc, char **argv); /* hidden: for the tokenizer tests */
int kiln_cmd_generate(int argc, char **argv);
int kiln_cmd_perplexity(int argc, char **argv);
int kiln_cmd_compare_llm(int argc, char **argv); /* kiln compare --llm */
int kiln_cmd_serve(int argc, char **argv);   /* only with KILN_HAVE_SERVE */

#define CLI_MAX_ARGS 64

/* cli_inputs.c — the input options of `kiln run` and `kiln compare`. */
typedef struct cli_inputs {
    const char *names[CLI_MAX_ARGS], *files[CLI_MAX_ARGS]; /* --input NAME=FILE.npy (names owned) */
    int nfiles;
    const char *shape_specs[CLI_MAX_ARGS];                 /* --shapes NAME:AxB,... */
    int nshapes;
    const char *dim_names[CLI_MAX_ARGS];                   /* --dim SYMBOL=N (names owned) */
    int64_t dim_values[CLI_MAX_ARGS];
    int ndims;
    uint64_t seed;                                         /* --seed N */
} cli_inputs;
/* When argv[*i] is --input, --shapes, --dim or --seed: records it, moves *i past its value and returns
 * 1 (or prints a usage error for `kiln CMD` and returns 2). Otherwise returns 0. */
int cli_inputs_parse(cli_inputs *in, const char *cmd, int argc, char **argv, int *i);
void cli_inputs_free(cli_inputs *in);
/* One tensor per input of e (tensors[kiln_engine_num_inputs(e)], zeroed; the caller releases each):
 * the --input files (then every input must be given), else random values of the declared type, in
 * the --shapes shape or the declared one with --dim sizes (default 1) for symbolic dims. */
kiln_status cli_inputs_make(const cli_inputs *in, const kiln_engine *e, kiln_tensor *tensors);
/* cli_build_opts.c — the build options of `kiln build` and `kiln compare`. */
typedef struct cli_build_opts {
    kiln_build_options o;                      /* its rule and range arrays point into this struct */
    kiln_layer_precision rules[CLI_MAX_ARGS];  /* patterns owned */
    kiln_input_range ranges[CLI_MAX_ARGS];     /* input names owned */
    bool best;                                 /* --best */
    bool given;                                /* an option other than --verbose was given */
} cli_build_opts;
/* Target cpu, fp32, no rules or profiles. */
void cli_build_opts_init(cli_build_opts *b);
void cli_build_opts_free(cli_build_opts *b);
/* When argv[*i] is a build option: records it (moving *i past its value) and returns 1, or prints a
 * usage error for `kiln CMD` and returns 2. Otherwise returns 0. */
int cli_build_opts_parse(cli_build_opts *b, const char *cmd, int argc, char **argv, int *i);
/* Parses "fp32" / "fp16" / "bf16". */
bool cli_parse_precision(const char *s, kiln_precision *p);
/* Parses "AxBxC" (at most KILN_MAX_DIMS dims, each in 0..2^40; "" or "scalar" is rank 0) up to the end of
 * s or the first character of stop; returns the rank or -1. *end (optional) gets where it stopped. */
int cli_parse_dims(const char *s, const char *stop, int64_t *dims, const char **end);

/* Prints "kiln: error: <kiln_last_error()>" and returns 1. */
int cli_fail(void);
/* Prints "kiln: error: <msg>", then "see `kiln <cmd> --help`", and returns 2. */
int cli_usage_error(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
bool cli_is_help(const char *arg);
bool cli_has_suffix(const char *s, const char *suffix);
/* True when path is named *.kiln or starts with the engine magic (or cannot be read and is not
 * named *.onnx). */
bool cli_is_engine_file(const char *path);
/* Loads an engine, or builds one in memory when path is not an engine file (an ONNX model). */
kiln_status cli_open_engine(const char *path, bool verbose, kiln_engine **out);
double cli_now_ms(void);
/* Writes "YYYY-MM-DD HH:MM:SS UTC" for a time read from a file (seconds since 1970), or, for one no
 * calendar date holds, "an invalid date (N seconds since 1970)"; returns buf. */
const char *cli_utc_time(uint64_t unix_seconds, char *buf, size_t cap);
/* Restarts the process with OPENBLAS_CORETYPE set when OpenBLAS fell back to its oldest kernels on a
 * CPU with AVX2/AVX-512 (see blas_env.c). Returns only when no restart is needed or possible. */
void cli_fix_blas_cpu_detection(char **argv);

/* compare_int8.c — `kiln compare` on INT8 builds. Whether build options o make int8 layers (--int8 or
 * an int8 --layer-precision rule). */
bool compare_int8_build(const kiln_build_options *o);
/* 0, or 2 after a usage error naming an --input file that is (in) o's calibration data. */
int compare_int8_check_inputs(const cli_inputs *in, const kiln_build_options *o);
/* *path: a fresh, absent temporary file name for a calibration cache (the caller unlinks and frees). */
kiln_status compare_int8_temp_cache(char **path);
/* Prints the int8 layers of test (built from model with options o, its thresholds in the calibration
 * cache at cache) ranked by the output error each adds when quantized alone, run on inputs (the
 * reference engine's input order). */
kiln_status compare_int8_rank(const char *model, const kiln_build_options *o, const char *cache, const kiln_engine *test,
                              const kiln_tensor *inputs);

#endif
