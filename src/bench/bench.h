/* bench.h — kiln bench, the library side (tools/cmd_bench.c is the command line): trtexec's
 * measurement loop over one engine (warm-up by duration, then a run by duration and a minimum number
 * of queries, on N concurrent contexts), per-query stage times from the backend's timing hooks, a
 * per-layer profile, the environment (CPU, GPU through NVML loaded at run time), the device's measured
 * ceilings, a FLOP / byte estimate of the model, the diagnosis of what bounds it, and the sweep over
 * precision x batch x streams. docs/bench.md describes the method and the JSON schema. */
#ifndef KILN_BENCH_H
#define KILN_BENCH_H

#include "kiln/kiln.h"
#include "ir/graph.h"
#include "stats/summary.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* ------------------------------------------------------------------ measurement (bench_run.c) */

typedef struct kiln_bench_config {
    double warmup_ms;     /* warm-up duration per stream (>= 0; at least one query runs) */
    double duration_s;    /* measured duration (>= 0) */
    int64_t iterations;   /* minimum number of measured queries over all streams (>= 1) */
    int streams;          /* concurrent contexts, one thread each (>= 1) */
    int graphs;           /* CUDA graphs: -1 the backend's default, 0 off, 1 on */
    bool no_transfers;    /* trtexec's --noDataTransfers (kiln_context_set_transfers) */
    bool profile;         /* also time every layer (separate runs after the measurement) */
    const char *shapes;   /* "name:1x3x224x224,name2:..." for dynamic inputs, or NULL */
    int64_t batch;        /* dim 0 of inputs whose dim 0 is symbolic; 0 = unset (1) */
    uint64_t seed;        /* random inputs */
} kiln_bench_config;

/* One measured query; times in ms, start/end from the start of the measurement; < 0: not measured. */
typedef struct kiln_bench_query {
    double start_ms, end_ms, latency_ms;
    double enqueue_ms, h2d_ms, compute_ms, d2h_ms;
    int stream;
} kiln_bench_query;

/* The statistics of one metric over the measured queries. */
typedef struct kiln_bench_stats {
    bool present;         /* false: the backend does not measure it */
    kiln_summary s;       /* min, max, mean, median, stddev (population), cv */
    double p90, p95, p99, p999;
} kiln_bench_stats;

/* One row of the per-layer profile. */
typedef struct kiln_bench_layer {
    const char *name, *op;  /* borrowed from the engine */
    char tactic[48];        /* what ran it: "cpu kernel", "cuda kernel", "host (shape arithmetic)" */
    char precision[16];     /* dtype of its first output as computed */
    double ms;              /* mean time per query; < 0: not timed */
    double share;           /* of the summed layer times */
    double flops, bytes;    /* estimate (bench_cost.c) */
} kiln_bench_layer;

typedef struct kiln_bench_memory {
    bool device;            /* the sizes below are device memory (cuda), else host memory */
    size_t weights, activations, workspace, staging; /* per context except weights */
    size_t total;           /* weights + streams x (activations + workspace + staging) */
} kiln_bench_memory;

typedef struct kiln_bench_result {
    kiln_bench_query *queries;
    size_t nqueries;
    int64_t warmup_queries;
    double walltime_s;      /* first measured start to last end */
    double qps, items_per_s;
    double gpu_time_s;      /* sum of compute times (trtexec: mean compute x N) */
    int64_t batch;          /* items per query: dim 0 of the first input (1 for a scalar) */
    char inputs[512];       /* "image:float32[8x3x32x32]" */
    char notes[512];        /* what was assumed ("symbolic dim 'seq' set to 1") */
    kiln_bench_stats latency, enqueue, h2d, compute, d2h;
    kiln_bench_layer *layers; /* [nlayers] with the shape run (always; times only with profile) */
    int nlayers, profile_runs;
    double flops, bytes;    /* estimate per query (sum over layers) */
    kiln_bench_memory mem;
    bool graphs_available;  /* the backend can switch CUDA graphs */
    int contexts_per_stream; /* 2 where queries overlap (cuda with transfers: bench_run.c), else 1 */
    kiln_tensor *outputs;   /* [noutputs]: the outputs of one query on the seeded inputs (owned) */
    int noutputs;
} kiln_bench_result;

/* Runs the benchmark on e. On success *out holds everything (kiln_bench_result_free). Errors: bad
 * shapes or batch (KILN_ERR_INVALID_ARGUMENT / KILN_ERR_SHAPE naming the input), a run that fails. */
kiln_status kiln_bench_run(kiln_engine *e, const kiln_bench_config *cfg, kiln_bench_result *out);
void kiln_bench_result_free(kiln_bench_result *r);
/* The statistics of samples[0..n) (n may be 0: then not present). */
kiln_status kiln_bench_stats_of(const double *samples, size_t n, kiln_bench_stats *out);

/* ------------------------------------------------------------------ FLOPs and bytes (bench_cost.c) */

/* An estimate of node n's floating-point operations (2 per multiply-add of MatMul, Gemm, Conv,
 * ConvTranspose, Attention and their fused forms; 0 for every other op) and of the bytes it touches
 * (every input and output once), given the concrete dims and dtypes of the values (vals indexed by
 * value id). Values with unknown dims count as 0. */
void kiln_bench_node_cost(const kiln_node *n, const kiln_value *vals, double *flops, double *bytes);

/* ------------------------------------------------------------------ environment (bench_env.c) */

typedef struct kiln_gpu_sample {
    bool valid;
    double sm_mhz, mem_mhz, power_w, temp_c, util_pct, mem_used_mb;
    unsigned long long throttle; /* NVML clocks-event (throttle) reason bits */
} kiln_gpu_sample;

typedef struct kiln_bench_env {
    char cpu_model[128];
    int cpu_threads;
    char host[64], os[128];
    bool gpu;                  /* the engine runs on a GPU */
    char gpu_name[128], gpu_pci[32], gpu_arch[32];
    char driver[32], cuda_driver[32], cuda_runtime[32], cublas[32], cudnn[32]; /* "" = absent */
    bool nvml;                 /* libnvidia-ml.so.1 was loaded and answered */
    void *nvml_device;         /* the NVML handle of the GPU (borrowed from NVML) */
    char nvml_error[128];
    kiln_gpu_sample before, after;
    double util_mean_pct, util_max_pct, mem_used_peak_mb; /* sampled during the run; < 0 absent */
} kiln_bench_env;

/* Fills what does not need a GPU, and the GPU's identity when target is "cuda" (device ordinal). */
void kiln_bench_env_init(kiln_bench_env *env, const char *target, int device);
/* Samples the GPU's clocks, power, temperature and throttle reasons into *s (s->valid false without
 * NVML or GPU). */
void kiln_bench_env_sample(const kiln_bench_env *env, kiln_gpu_sample *s);
/* A background sampler of GPU utilization and memory (every 50 ms) between start and stop; the means
 * and peaks go to env. Without NVML start does nothing and stop marks them absent. */
typedef struct kiln_bench_sampler kiln_bench_sampler;
kiln_bench_sampler *kiln_bench_sampler_start(const kiln_bench_env *env);
void kiln_bench_sampler_stop(kiln_bench_sampler *s, kiln_bench_env *env);
/* The names of the throttle-reason bits ("sw_power_cap, hw_slowdown", "none") into buf. */
void kiln_bench_throttle_text(unsigned long long bits, char *buf, size_t cap);

/* GPU facts through the CUDA runtime (bench_cuda.c; KILN_ERR_UNSUPPORTED without the cuda backend). */
kiln_status kiln_bench_cuda_info(int device, kiln_bench_env *env);

/* ------------------------------------------------------------------ ceilings (bench_ceilings.c) */

typedef struct kiln_bench_ceilings {
    bool known;
    char device[128];          /* the key: CPU model or GPU name */
    double mem_gbps;           /* copy bandwidth, read + write bytes per second / 1e9 */
    double tflops_fp32, tflops_fp16; /* GEMM; fp16 absent (0) on the CPU */
    char measured_at[32];      /* UTC, ISO 8601 */
    char method[256];
} kiln_bench_ceilings;

/* ~/.cache/kiln/ceilings.json (or $XDG_CACHE_HOME/kiln/ceilings.json) into buf. */
const char *kiln_bench_ceilings_default_path(char *buf, size_t cap);
/* Reads the entry for `device` from path; out->known is false when the file or the entry is missing.
 * Errors: KILN_ERR_PARSE for a malformed file. */
kiln_status kiln_bench_ceilings_load(const char *path, const char *device, kiln_bench_ceilings *out);
/* Stores c (keyed by c->device) in path, keeping other devices' entries; creates the directory. */
kiln_status kiln_bench_ceilings_save(const char *path, const kiln_bench_ceilings *c);
/* Measures the CPU: a STREAM-like copy and an OpenBLAS sgemm. */
kiln_status kiln_bench_ceilings_measure_cpu(kiln_bench_ceilings *out);
/* Measures GPU `device`: device-to-device copy bandwidth and cuBLASLt fp16 / fp32 GEMMs
 * (bench_cuda.c; KILN_ERR_UNSUPPORTED without the cuda backend). */
kiln_status kiln_bench_ceilings_measure_gpu(int device, kiln_bench_ceilings *out);

/* ------------------------------------------------------------------ diagnosis (bench_diagnose.c) */

typedef enum kiln_bench_bound {
    KILN_BOUND_UNKNOWN = 0,
    KILN_BOUND_ENQUEUE,    /* host-side enqueue / kernel launches */
    KILN_BOUND_TRANSFERS,  /* host <-> device copies */
    KILN_BOUND_MEMORY,     /* memory bandwidth */
    KILN_BOUND_COMPUTE,    /* arithmetic throughput */
    KILN_BOUND_OVERHEAD,   /* neither reaches 10 % of its ceiling: latency, small kernels, host work */
} kiln_bench_bound;

typedef struct kiln_bench_diag_input {
    double enqueue_ms, h2d_ms, compute_ms, d2h_ms; /* medians; < 0 absent */
    double compute_cv;                             /* fraction */
    double flops, bytes;                           /* per query */
    double ceil_gbps, ceil_tflops;                 /* 0: unknown */
    bool gpu, graphs_available, graphs_on;
} kiln_bench_diag_input;

typedef struct kiln_bench_diagnosis {
    kiln_bench_bound bound;
    double achieved_gbps, achieved_tflops;         /* < 0: no compute time */
    double frac_mem, frac_compute;                 /* of the ceilings; < 0: unknown */
    char text[640];                                /* one line: the bound, the numbers, what to try */
    char warnings[4][320];
    int nwarnings;
} kiln_bench_diagnosis;

void kiln_bench_diagnose(const kiln_bench_diag_input *in, kiln_bench_diagnosis *out);
/* "enqueue", "transfers", "memory", "compute", "overhead", "unknown". */
const char *kiln_bench_bound_name(kiln_bench_bound b);

/* ------------------------------------------------------------------ the engine (bench_model.c) */

/* Loads an engine file (is_engine), or builds the ONNX model for target and precision in memory and
 * times the build (*build_s, else -1); *engine_bytes is the serialized size (the file's, or that of
 * the built engine saved to a temporary file), -1 when unknown. *out is owned by the caller. */
kiln_status kiln_bench_open(const char *path, bool is_engine, const char *target, kiln_precision precision, int device,
                            kiln_engine **out, double *build_s, int64_t *engine_bytes);
/* The same for an ONNX model built with options o (an INT8 or FP8 build of the sweep). */
kiln_status kiln_bench_open_options(const char *path, const kiln_build_options *o, kiln_engine **out, double *build_s,
                                    int64_t *engine_bytes);

/* The target ("cpu", "cuda") and precision an engine was built for, and its backend's description
 * of GPU `device` (or of the CPU) into device[0..cap). */
void kiln_bench_engine_info(const kiln_engine *e, int device, const char **target, kiln_precision *precision, char *desc,
                            size_t cap);

/* The description of device `device` of backend `target` into desc ("no CUDA device" etc. fail). */
kiln_status kiln_bench_device_desc(const char *target, int device, char *desc, size_t cap);

/* ------------------------------------------------------------------ sweep (bench_sweep.c) */

#define KILN_BENCH_SWEEP_MAX 64

typedef struct kiln_bench_sweep_row {
    kiln_precision precision;
    int64_t batch;
    int streams;
    char error[320];           /* "" = ran; else "unsupported: ..." or "failed: ..." */
    double build_s;            /* < 0: not built here */
    int64_t engine_bytes;      /* serialized size; < 0 unknown */
    double qps, items_per_s, p50_ms, p95_ms, p99_ms;
    double memory_mb;          /* kiln_bench_memory.total */
    double gpu_util_pct, gpu_mem_peak_mb; /* NVML, < 0 absent */
    double max_abs_err, max_rel_err; /* vs the fp32 row of the same batch; NaN absent */
    double cosine;             /* the least cosine similarity of a float output to fp32's; NaN absent */
    int64_t top1, top1_rows;   /* classifier-shaped outputs: rows whose top-1 class is fp32's, of rows */
} kiln_bench_sweep_row;

typedef struct kiln_bench_sweep {
    kiln_precision precisions[8];
    int nprecisions;
    int64_t batches[16];
    int nbatches;
    int streams[8];
    int nstreams;
    kiln_bench_sweep_row rows[KILN_BENCH_SWEEP_MAX];
    int nrows;
    /* int8 and fp8 rows: the calibration batches (`kiln bench --calib DIR`); NULL: random batches (seeds
     * apart from the benchmark's), which the run notes in random_calib, as their accuracy means little */
    const char *calib_dir;
    bool random_calib;
} kiln_bench_sweep;

/* Parses one --sweep KEY=V1,V2 (precision=fp32,fp16,bf16,int8,fp8 | batch=1,8 | streams=1,2) into s.
 * Errors: KILN_ERR_INVALID_ARGUMENT naming the key or value. */
kiln_status kiln_bench_sweep_parse(kiln_bench_sweep *s, const char *spec);
/* Runs every configuration (the product of the lists; missing lists take base's values and
 * base_precision). A model path (ONNX) is built once per precision; an engine file only accepts one
 * precision (its own). A configuration that fails is recorded in its row, the others go on; env
 * gets the GPU utilization of each row. */
kiln_status kiln_bench_sweep_run(kiln_bench_sweep *s, const char *model, bool is_engine, const char *target, int device,
                                 kiln_precision base_precision, const kiln_bench_config *base,
                                 kiln_bench_env *env);
/* Compares two output sets (same count, shapes): the largest |a - b| and the largest
 * |a - b| / max|b| over all float outputs. */
void kiln_bench_compare_outputs(const kiln_tensor *a, const kiln_tensor *ref, int n, double *max_abs, double *max_rel);
/* "fp32", "fp16", "bf16". */
const char *kiln_bench_precision_name(kiln_precision p);

/* ------------------------------------------------------------------ reports (bench_print.c, bench_json.c, bench_html.c) */

/* Everything a report shows. Pointers are borrowed; res / diag / sweep may be NULL. */
typedef struct kiln_bench_doc {
    const char *model_path;
    const char *target;        /* "cpu", "cuda" */
    kiln_precision precision;
    char device[256];          /* the backend's device description */
    double build_s;            /* < 0: the engine was loaded */
    int64_t engine_bytes;      /* serialized engine size; < 0 unknown */
    const kiln_bench_config *cfg;
    const kiln_bench_result *res;
    const kiln_bench_env *env;
    const kiln_bench_ceilings *ceil;
    const kiln_bench_diagnosis *diag;
    const kiln_bench_sweep *sweep;
    char started_at[32];
} kiln_bench_doc;

/* The profile's layer times summed per op type (bench_print.c): op borrowed from the layers. */
typedef struct kiln_bench_op_total {
    const char *op;
    int layers;   /* timed layers of this op */
    double ms;    /* their summed mean times per query */
    double share; /* of all timed layers' time */
} kiln_bench_op_total;

/* Sums r's timed layers (ms >= 0) by op into out (at most cap rows, the rest of the ops dropped from
 * the end), largest time first, ties in first-appearance order; returns the rows written. */
int kiln_bench_op_totals(const kiln_bench_result *r, kiln_bench_op_total *out, int cap);

void kiln_bench_print(const kiln_bench_doc *d, FILE *f);
kiln_status kiln_bench_write_json(const kiln_bench_doc *d, const char *path);
kiln_status kiln_bench_write_html(const kiln_bench_doc *d, const char *path);

#endif
