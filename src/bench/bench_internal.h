/* bench_internal.h — what the files of src/bench/ share and nobody else needs: the engine's internals
 * (its graph and backend, for the timing hooks and the per-layer table), input making, the per-layer
 * pass, and small formatting helpers. */
#ifndef KILN_BENCH_INTERNAL_H
#define KILN_BENCH_INTERNAL_H

#include "bench/bench.h"
#include "runtime/engine_internal.h"
#include "stats/report.h"

#include <stdio.h>

/* bench_inputs.c — allocates and fills inputs[0..num_inputs) (owned by the caller: release each) for
 * cfg's shapes, batch and seed; desc gets "name:dtype[dims], ...", notes what was assumed, *batch
 * dim 0 of the first input (1 for a scalar). Errors name the input or the --shapes text. */
kiln_status kiln_bench_make_inputs(const kiln_engine *e, const kiln_bench_config *cfg, kiln_tensor *inputs,
                                   char *desc, size_t desc_cap, char *notes, size_t notes_cap, int64_t *batch);

/* bench_sweep_quant.c — the build options of a sweep row in precision p (int8 / fp8: fp32 with --int8 /
 * --fp8 and calib_dir, fp16 on target cuda; others: that precision). */
kiln_build_options kiln_bench_sweep_options(kiln_precision p, const char *target, int device, const char *calib_dir);
/* Random calibration batches for the model at model (inputs as the benchmark makes them, at base's
 * shapes and batch, seeds apart from base->seed) in a new temporary directory *dir (owned; remove it
 * with kiln_bench_random_calib_remove, which also frees it). Logs a warning that int8 accuracy
 * measured so means little. */
kiln_status kiln_bench_random_calib(const char *model, const kiln_bench_config *base, char **dir);
void kiln_bench_random_calib_remove(char *dir);

/* bench_layers.c — runs context c (inputs bound) with node timing: once without cfg->profile (shapes,
 * FLOPs, bytes, activation memory), else repeatedly (at least 10 runs and 0.5 s) for the mean time of
 * every layer. Fills r->layers, nlayers, profile_runs, flops, bytes and r->mem (streams contexts). */
kiln_status kiln_bench_layers(kiln_engine *e, kiln_context *c, const kiln_bench_config *cfg, kiln_bench_result *r);

/* bench_run.c — milliseconds of a monotonic clock. */
double kiln_bench_now_ms(void);

/* bench_print.c — one trtexec-style statistics line ("label: min = ... ms, ..., percentile(99%) = ...");
 * "label: absent" when not present. */
void kiln_bench_print_stats(FILE *f, const char *label, const kiln_bench_stats *s);
/* The "=== Environment ===" block (CPU, host, OS; the GPU, its versions and NVML samples). */
void kiln_bench_print_env(const kiln_bench_env *env, const char *target, FILE *f);

/* bench_json.c — s as {"n", "min", ..., "p99_9", "stddev", "cv"} under key (null when absent), and
 * the "environment" object. */
void kiln_bench_json_stats(kiln_json *j, const char *key, const kiln_bench_stats *s);
void kiln_bench_json_environment(kiln_json *j, const kiln_bench_env *env);

/* "1.23 MB" style sizes (decimal units) into buf. */
const char *kiln_bench_bytes_text(double bytes, char *buf, size_t cap);

#endif
