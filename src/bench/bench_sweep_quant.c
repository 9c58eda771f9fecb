/* bench_sweep_quant.c — the quantized rows of `kiln bench --sweep precision=...,int8,fp8`: their build
 * options, and random calibration batches when no --calib is given (written to a temporary
 * directory from the benchmark's input generator with other seeds, and removed after the sweep). */
#include "bench/bench_internal.h"

#include "core/log.h"
#include "core/npy.h"
#include "core/status.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define RANDOM_CALIB_BATCHES 4

kiln_build_options kiln_bench_sweep_options(kiln_precision p, const char *target, int device, const char *calib_dir) {
    kiln_build_options o = {.target = target, .precision = p, .device = device};
    if (p == KILN_PRECISION_INT8 || p == KILN_PRECISION_FP8) {
        /* the layers that stay out of int8 / fp8 in 16 bits where the target has 16-bit kernels */
        o.precision = target && !strcmp(target, "cuda") ? KILN_PRECISION_FP16 : KILN_PRECISION_FP32;
        o.int8 = p == KILN_PRECISION_INT8;
        o.fp8 = p == KILN_PRECISION_FP8;
        o.calib_dir = calib_dir;
    }
    return o;
}

/* Writes batch k of e's inputs (seed) as DIR/<input>.<k>.npy. */
static kiln_status write_batch(const kiln_engine *e, const kiln_bench_config *base, uint64_t seed, int k, const char *dir) {
    int nin = kiln_engine_num_inputs(e);
    kiln_tensor *in = calloc((size_t)nin + 1, sizeof *in);
    if (!in) return kiln_error(KILN_ERR_OUT_OF_MEMORY, "out of memory");
    kiln_bench_config cfg = *base;
    cfg.seed = seed;
    char desc[512], notes[512];
    int64_t batch;
    kiln_status s = kiln_bench_make_inputs(e, &cfg, in, desc, sizeof desc, notes, sizeof notes, &batch);
    for (int i = 0; s == KILN_OK && i < nin; i++) {
        kiln_tensor_desc d;
        char path[4096];
        s = kiln_engine_input(e, i, &d);
        if (s == KILN_OK && strchr(d.name, '/'))
            s = kiln_error(KILN_ERR_UNSUPPORTED, "input '%s' has a '/' in its name: give --calib DIR", d.name);
        if (s == KILN_OK) snprintf(path, sizeof path, "%s/%s.%d.npy", dir, d.name, k);
        if (s == KILN_OK) s = kiln_npy_write(path, &in[i]);
    }
    for (int i = 0; i < nin; i++) kiln_tensor_release(&in[i]);
    free(in);
    return s;
}

kiln_status kiln_bench_random_calib(const char *model, const kiln_bench_config *base, char **dir) {
    const char *tmp = getenv("TMPDIR");
    size_t n = strlen(tmp && *tmp ? tmp : "/tmp") + 32;
    *dir = malloc(n);
    if (!*dir) return kiln_error(KILN_ERR_OUT_OF_MEMORY, "out of memory");
    snprintf(*dir, n, "%s/kiln-calib-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(*dir)) {
        free(*dir);
        *dir = NULL;
        return kiln_error(KILN_ERR_IO, "cannot create a temporary directory for random calibration data");
    }
    kiln_build_options o = {.target = "cpu"};
    kiln_engine *e = NULL;
    kiln_status s = kiln_build_onnx(model, &o, &e);
    for (int k = 0; s == KILN_OK && k < RANDOM_CALIB_BATCHES; k++)
        s = write_batch(e, base, base->seed + 1000003u * (uint64_t)(k + 1), k, *dir);
    kiln_engine_free(e);
    if (s == KILN_OK)
        KILN_LOG(KILN_LOG_WARN, "int8 / fp8: no --calib given: calibrating on %d random batches; the int8 / fp8 accuracy "
                 "shown means little (give calibration data from the real input distribution)", RANDOM_CALIB_BATCHES);
    return s;
}

void kiln_bench_random_calib_remove(char *dir) {
    if (!dir) return;
    DIR *d = opendir(dir);
    struct dirent *ent;
    while (d && (ent = readdir(d))) {
        if (ent->d_name[0] == '.') continue;
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", dir, ent->d_name);
        unlink(path);
    }
    if (d) closedir(d);
    rmdir(dir);
    free(dir);
}
