/* cli.h — shared pieces of the `kiln` command: subcommand entry points and error printing.
 * Exit codes: 0 success, 1 failure (message on stderr, "kiln: error: ..."), 2 usage error. */
#ifndef KILN_CLI_H
#define KILN_CLI_H

#include "kiln/kiln.h"

#include <stdbool.h>

int kiln_cmd_build(int argc, char **argv);
int kiln_cmd_run(int argc, char **argv);
int kiln_cmd_inspect(int argc, char **argv);
int kiln_cmd_load(int argc, char **argv);

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
/* Restarts the process with OPENBLAS_CORETYPE set when OpenBLAS fell back to its oldest kernels on a
 * CPU with AVX2/AVX-512 (see blas_env.c). Returns only when no restart is needed or possible. */
void cli_fix_blas_cpu_detection(char **argv);

#endif
