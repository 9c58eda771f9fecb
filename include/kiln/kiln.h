/* kiln.h — the public C API of kiln: build an engine from a model, save and load it, run it.
 *
 * Conventions:
 *  - Every fallible call returns a kiln_status (KILN_OK == 0, errors are negative) and leaves a
 *    human-readable message for the calling thread in kiln_last_error().
 *  - Handles are opaque. Every *_create / *_load / kiln_build has a matching *_free that accepts NULL.
 *  - Ownership is stated per call: "borrowed" pointers stay owned by the callee/caller named.
 */
#ifndef KILN_H
#define KILN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define KILN_VERSION_MAJOR 0
#define KILN_VERSION_MINOR 1
#define KILN_VERSION_PATCH 0
#define KILN_VERSION_STRING "0.1.0"

#define KILN_MAX_DIMS 8

typedef enum kiln_status {
    KILN_OK = 0,
    KILN_ERR_INVALID_ARGUMENT = -1, /* a caller passed something wrong (name, shape, dtype, flag) */
    KILN_ERR_IO = -2,               /* a file could not be opened, read, mapped or written */
    KILN_ERR_PARSE = -3,            /* a model or engine file is malformed */
    KILN_ERR_UNSUPPORTED = -4,      /* valid input that kiln does not implement (op, opset, dtype) */
    KILN_ERR_SHAPE = -5,            /* shapes do not agree (at build or run time) */
    KILN_ERR_OUT_OF_MEMORY = -6,
    KILN_ERR_ENGINE_MISMATCH = -7,  /* an engine built for another version, target or device */
    KILN_ERR_BACKEND = -8,          /* a backend library call failed */
    KILN_ERR_INTERNAL = -9,         /* a bug in kiln: please report it */
    KILN_ERR_BUSY = -10,            /* a bounded queue is full or the instance is draining: retry later */
} kiln_status;

/* The message of the calling thread's last error ("" if none). Borrowed; valid until the next
 * failing kiln call on this thread. */
const char *kiln_last_error(void);
/* A short constant name for a status ("KILN_ERR_PARSE"). */
const char *kiln_status_name(kiln_status s);
/* "0.1.0" */
const char *kiln_version(void);

/* Element types. The values are those of ONNX's TensorProto.DataType. */
typedef enum kiln_dtype {
    KILN_UNDEFINED = 0,
    KILN_F32 = 1,
    KILN_U8 = 2,
    KILN_I8 = 3,
    KILN_U16 = 4,
    KILN_I16 = 5,
    KILN_I32 = 6,
    KILN_I64 = 7,
    KILN_STRING = 8,
    KILN_BOOL = 9,
    KILN_F16 = 10,
    KILN_F64 = 11,
    KILN_U32 = 12,
    KILN_U64 = 13,
    KILN_C64 = 14,
    KILN_C128 = 15,
    KILN_BF16 = 16,
    KILN_F8E4M3FN = 17,
    KILN_F8E4M3FNUZ = 18,
    KILN_F8E5M2 = 19,
    KILN_F8E5M2FNUZ = 20,
    KILN_U4 = 21,
    KILN_I4 = 22,
    KILN_DTYPE_COUNT
} kiln_dtype;

/* "float32", "int64", ... ; "?" for values outside the enum. */
const char *kiln_dtype_name(kiln_dtype t);
/* Bytes per element; 0 for STRING, sub-byte and unknown types. */
size_t kiln_dtype_size(kiln_dtype t);

/* Logging: one process-wide logger. Messages below the level are not formatted. */
typedef enum kiln_log_level {
    KILN_LOG_ERROR = 0,
    KILN_LOG_WARN = 1,
    KILN_LOG_INFO = 2,
    KILN_LOG_VERBOSE = 3,
} kiln_log_level;
typedef void (*kiln_log_fn)(kiln_log_level level, const char *msg, void *user);
void kiln_log_set_level(kiln_log_level level);
/* fn == NULL restores the default (stderr, "[kiln][W] msg"). */
void kiln_log_set_callback(kiln_log_fn fn, void *user);

/* ---------------------------------------------------------------- build */

typedef struct kiln_engine kiln_engine;
typedef struct kiln_context kiln_context;

/* The precision an engine computes floating-point tensors in. Inputs and outputs keep the model's
 * types; FP16/BF16 engines accumulate reductions, normalizations and softmax in FP32. INT8 and FP8
 * are layer precisions only (kiln_layer_precision rules; --int8, --fp8), never an engine's. */
typedef enum kiln_precision {
    KILN_PRECISION_FP32 = 0,
    KILN_PRECISION_FP16 = 1,
    KILN_PRECISION_BF16 = 2,
    KILN_PRECISION_INT8 = 3,
    KILN_PRECISION_FP8 = 4,
    KILN_PRECISION_W8A8 = 5, /* LLM engines: INT8 weights and activations (SmoothQuant) */
    KILN_PRECISION_INT4 = 6, /* an LLM engine's weight-only INT4 matrices only */
} kiln_precision;

/* A per-layer precision rule (`kiln build --layer-precision PATTERN:fp32`). pattern is a glob (`*`
 * any run of characters, `?` one) over the names of the optimized graph's nodes, or "op:GLOB" over
 * their op types ("op:Softmax"). Rules apply in order, a later one overriding an earlier one; a rule
 * that matches no node fails the build. INT8 rules match the layers int8 calibration can quantize
 * (Conv, MatMul, Gemm with constant weights, by their model names) and quantize them, also without
 * --int8 (calibration data needed then too); in an --int8 build a float rule matching such a layer
 * keeps it out of int8. FP8 rules need target cuda. */
typedef struct kiln_layer_precision {
    const char *pattern;
    kiln_precision precision;
} kiln_layer_precision;

/* The shapes one input accepts in one optimization profile (`kiln build --profile`): every
 * dimension d satisfies min[d] <= size <= max[d]; opt is the shape backends plan for. Static
 * dimensions must have min == opt == max == their size. */
typedef struct kiln_input_range {
    int profile;        /* 0-based profile index; profiles are numbered without gaps */
    const char *input;  /* a graph input */
    int ndim;           /* its rank */
    int64_t min[KILN_MAX_DIMS], opt[KILN_MAX_DIMS], max[KILN_MAX_DIMS];
} kiln_input_range;

/* A setting kiln chooses by itself (the zero value, so zero-initialised options get it) or that the
 * caller forces on or off. */
typedef enum kiln_switch {
    KILN_SWITCH_AUTO = 0,
    KILN_SWITCH_ON = 1,
    KILN_SWITCH_OFF = 2,
} kiln_switch;

/* What auto-tuning did during one build (kiln_build_options.tuning_stats). */
typedef struct kiln_tuning_stats {
    int layers;          /* layers with candidate tactics (cuda: MatMul, Gemm, Conv), once per profile */
    int tuned;           /* layers whose tactic was chosen (timed now or found in the timing cache) */
    int skipped;         /* layers left to the heuristic: no known shape, or timing failed */
    int cache_hits;      /* layers found in the timing cache */
    int cache_misses;    /* layers timed now */
    int tactics_timed;   /* candidate tactics timed */
    int same_as_earlier; /* layers of the same signature as one timed earlier in this build (among the hits) */
    int dropped;         /* candidates dropped: far slower than the best so far, over the workspace limit,
                          * far slower on earlier layers of the same kind, or out of budget */
    int out_of_budget;   /* layers left to the heuristic because the build's tuning budget was spent */
    double ms;           /* time spent tuning */
} kiln_tuning_stats;

typedef struct kiln_build_options {
    const char *target;       /* "cpu" or "cuda" (NULL = "cpu") */
    kiln_precision precision; /* FP16/BF16 need a target that supports them (cuda) */
    int device;               /* GPU ordinal for target "cuda" */
    bool verbose;             /* log every graph change at KILN_LOG_VERBOSE */
    /* Per-layer precision rules (borrowed for the call); nodes they do not match compute in
     * `precision`. FP16/BF16 rules need a target that supports them. */
    const kiln_layer_precision *layer_precisions;
    int nlayer_precisions;
    /* Optimization profiles (borrowed for the call): at run time a context uses the first profile
     * whose ranges hold every input's shape and refuses shapes outside all of them. An input a
     * profile does not name is unconstrained in it. */
    const kiln_input_range *ranges;
    int nranges;
    /* Makes every intermediate value a graph output (named as in the model) before the passes run,
     * for per-layer comparisons. Fusions cannot remove a graph output, so such an engine runs the
     * unfused graph. */
    bool mark_all_outputs;
    /* Auto-tuning (target cuda; other targets ignore it): 0 = the libraries' heuristics choose every
     * algorithm, nothing is timed; 1, 2, 3 = the heuristic's first 3 / 8 / all (at most 32)
     * candidates of every MatMul, Gemm and Conv are timed on the device at the engine's shapes (each
     * profile's opt shapes when inputs are dynamic, a tactic set per profile, which a run of that
     * profile uses; without profiles, a dynamic first (batch) dimension is tuned at 1, as TensorRT's
     * default opt shape) with up to 3 / 10 / 20 runs each, and the fastest is recorded in the engine. Layers of the same signature are timed once. 0 unless
     * set; `kiln build` defaults to 2. */
    int tuning_level;
    /* Bounds on tuning (0 = the default, -1 = none), in wall-clock milliseconds: once
     * tuning_budget_ms (default 2500) is spent on the build, the layers left keep the heuristic's
     * choice; once tuning_layer_budget_ms (default 100) is spent on one layer, its remaining
     * candidates are dropped and the fastest so far wins (each candidate's timed runs shrink to fit its
     * share). Candidates are listed and timed within tuning_workspace_mb MiB of workspace (default
     * 128, at most the context's workspace; -1: all of it), so none needing more is timed. Independently of the bounds, a candidate whose
     * first timed run is over 4x the best so far is dropped, and one dropped so on two layers of a
     * kind (convolutions grouped or not) is not tried on later layers of that kind. */
    int tuning_budget_ms;
    int tuning_layer_budget_ms;
    int tuning_workspace_mb;
    /* A timing cache file (NULL: none), borrowed for the call: read before tuning, consulted before
     * timing a layer, rewritten atomically with the new results after it. A missing, corrupt or
     * foreign-version file is ignored with a warning. */
    const char *timing_cache;
    /* Optional (NULL: not reported): receives what tuning did; zeroed when nothing was tuned. */
    kiln_tuning_stats *tuning_stats;
    /* The fusion passes (docs/passes.md): AUTO creates the fused ops the target picks for the build's
     * precision (cuda: Attention only in fp16/bf16 builds), ON every fused op the target has a kernel
     * for, OFF none (nor the channels-last layout, which needs FusedConv and FusedPool). Tests
     * override it for target cuda with the environment variable KILN_CUDA_FUSION=all|1 or 0|off. */
    kiln_switch fusion;
    /* Comma-separated kiln-domain ops (ir/fused_ops.h) the build never creates, e.g.
     * "Attention,ElementwiseChain" (NULL: none); borrowed for the call. Tests override it for target
     * cuda with KILN_CUDA_FUSION=NAMES. */
    const char *unfused_ops;
    /* Channels-last convolutions and the pools next to them (pass layout_channels_last): AUTO when the
     * target's convolutions run faster so and the build is 16-bit (cuda fp16/bf16), ON for any target
     * and precision, OFF never. Tests override it with KILN_CHANNELS_LAST=1 or 0. */
    kiln_switch channels_last;
    /* Target cuda, for the engine this build returns (an engine loaded from a file gets the defaults):
     * view nodes (Reshape, Squeeze, Flatten, ...) share their input's device memory (AUTO, ON) or
     * copy it (OFF); tests override it with KILN_CUDA_VIEWS=0. */
    kiln_switch cuda_views;
    /* Target cpu: the weights of Conv, MatMul and Gemm stored in the engine packed for the CPU's
     * matrix products (AUTO, ON), used in place at load, or plain (OFF: packed at every load, a
     * second copy beside the plain one). Tests override it with KILN_CPU_PACKED_WEIGHTS=1 or 0. */
    kiln_switch cpu_packed_weights;
    /* Target cuda: the cuBLASLt / cuDNN workspace of each context and of the tuner, in MiB (1..65536;
     * 0: 256), for the engine this build returns (a loaded engine gets 256). Tests override it with
     * KILN_CUDA_WORKSPACE_MB=N. */
    int cuda_workspace_mb;
    /* INT8 post-training calibration (docs/quantization.md): the build runs the float32 model on the
     * CPU over the batches of calib_dir (a directory of .npy files or a .npz: `<input>.<k>.npy`,
     * or one batch per array for a model with one input; at most calib_batches of them when > 0),
     * or reads the thresholds from calib_cache when it exists and was made for this model, then
     * quantizes every Conv, MatMul and Gemm with constant weights (symmetric int8: activations per
     * tensor, weights per channel) into integer layers; calib_cache is written after a
     * calibration. calibrator: "entropy" (NULL),
     * "minmax", "percentile" or "percentile:P" (P in (0, 100], default 99.99). Strings borrowed. */
    bool int8;
    const char *calib_dir;
    const char *calib_cache;
    const char *calibrator;
    int calib_batches;
    /* With int8: keeps the keep_sensitive layers whose int8 adds the most output error (each layer
     * quantized alone over the calibration batches, docs/quantization.md) in float, and the first and
     * last quantizable layer too unless quantize_ends; 0: none kept. Needs calib_dir. */
    int keep_sensitive;
    bool quantize_ends;
    /* FP8 (E4M3) layers: target cuda only (another target fails the build). kiln has no FP8 kernels
     * yet, so a cuda build logs that its layers compute in the engine's float precision instead. */
    bool fp8;
    /* The engine's float32 inputs and outputs become float16, keeping their names (`kiln build
     * --io-format fp16`, trtexec's --inputIOFormats=fp16:chw): Casts at the graph's borders convert
     * to and from float32 inside, so callers bind and read float16 (half the bytes). */
    bool io_fp16;
    /* The file the caller will save the built engine to (NULL: not known; borrowed for the call): the
     * build begins writing it as soon as the weights are final, so that they go to the disk while the
     * engine is prepared and tuned, and kiln_engine_save to the same path finishes it. It is checked
     * as kiln_engine_save checks it (a bad path fails the build); until saved, the file at that path
     * stays as it was, and a failed build or an engine freed unsaved leaves nothing behind. */
    const char *output;
} kiln_build_options;

/* Imports an ONNX model and compiles it into an engine for opts->target. opts may be NULL.
 * On success *out is owned by the caller (kiln_engine_free). */
kiln_status kiln_build_onnx(const char *onnx_path, const kiln_build_options *opts, kiln_engine **out);

/* Writes the engine to path (atomically: a temporary file next to it renamed over it; a symbolic link
 * at path is written through). KILN_ERR_INVALID_ARGUMENT when path is, or resolves to, a file this
 * process has read as an input (a model, its external data, a checkpoint, an engine it did not write
 * itself) or is not a regular file (a directory, device, FIFO or socket). */
kiln_status kiln_engine_save(const kiln_engine *e, const char *path);
/* Maps and verifies an engine file. On success *out is owned by the caller. */
kiln_status kiln_engine_load(const char *path, kiln_engine **out);

/* How kiln_engine_load_with loads an engine file; zero-initialized: as kiln_engine_load does. */
typedef struct kiln_engine_load_options {
    /* Target cuda: when set_device, run on GPU ordinal `device` instead of the one the engine was
     * built for (its "--device N"). That GPU must exist and be of the engine's architecture (the
     * sm_XY it was built for), else KILN_ERR_ENGINE_MISMATCH naming the device. Engines of other
     * targets ignore it. */
    bool set_device;
    int device;
} kiln_engine_load_options;

/* kiln_engine_load with options (NULL: none), e.g. one engine file loaded once per GPU of a host
 * with several GPUs of the same kind. On success *out is owned by the caller. */
kiln_status kiln_engine_load_with(const char *path, const kiln_engine_load_options *opts, kiln_engine **out);
void kiln_engine_free(kiln_engine *e);

/* A tensor as the API exchanges it: dims[i] < 0 means a dimension that is only known at run time. */
typedef struct kiln_tensor_desc {
    const char *name; /* borrowed from the engine */
    kiln_dtype dtype;
    int ndim;
    int64_t dims[KILN_MAX_DIMS];
    const char *dim_names[KILN_MAX_DIMS]; /* symbolic name or NULL; borrowed from the engine */
} kiln_tensor_desc;

int kiln_engine_num_inputs(const kiln_engine *e);
int kiln_engine_num_outputs(const kiln_engine *e);
/* Describes input/output i (0 <= i < count). */
kiln_status kiln_engine_input(const kiln_engine *e, int i, kiln_tensor_desc *out);
kiln_status kiln_engine_output(const kiln_engine *e, int i, kiln_tensor_desc *out);
/* The number of optimization profiles the engine was built with (0: any shape its dims allow). */
int kiln_engine_num_profiles(const kiln_engine *e);
/* The shapes input `input` (0 <= input < kiln_engine_num_inputs) accepts in profile `profile`
 * (0 <= profile < kiln_engine_num_profiles): out->profile, input (borrowed from the engine), ndim and
 * min / opt / max. An input the profile does not constrain gets ndim == -1. Fails with
 * KILN_ERR_INVALID_ARGUMENT naming the index out of range. */
kiln_status kiln_engine_profile_range(const kiln_engine *e, int profile, int input, kiln_input_range *out);

/* ---------------------------------------------------------------- host memory */

/* Allocates `bytes` (>= 1) of host memory for run inputs and outputs, 256-byte aligned. When a CUDA
 * device is present it is page-locked (cudaHostAlloc), so that inputs bound from it and outputs bound
 * into it (kiln_context_set_output_buffer) move between host and device by DMA at full PCIe speed,
 * without a staging copy; otherwise it is ordinary memory. *out is owned by the caller
 * (kiln_host_free). Page-locked memory is a scarce system resource: allocate it once and reuse it. */
kiln_status kiln_host_alloc(size_t bytes, void **out);
/* Frees memory from kiln_host_alloc (NULL: nothing). Any run reading or writing it must be over. */
void kiln_host_free(void *p);

/* ---------------------------------------------------------------- run */

/* An execution context: per-run state for one engine (which must outlive it). *out is owned by the
 * caller (kiln_context_free). Several contexts of one engine may run concurrently. */
kiln_status kiln_context_create(kiln_engine *e, kiln_context **out);

/* How a context runs; zero-initialised: the defaults. */
typedef struct kiln_context_options {
    /* Target cuda: each run replays a CUDA graph captured once per input shape (AUTO, ON), or launches
     * every kernel (OFF). Tests override it with KILN_CUDA_GRAPHS=0. */
    kiln_switch cuda_graphs;
} kiln_context_options;

/* kiln_context_create with options (NULL: the defaults). */
kiln_status kiln_context_create_with_options(kiln_engine *e, const kiln_context_options *opts, kiln_context **out);
void kiln_context_free(kiln_context *c);

/* Binds input `name` to host data of the given dtype and shape. The data is borrowed until the
 * next kiln_context_run (or kiln_context_wait) returns; data in page-locked memory (kiln_host_alloc)
 * is uploaded from where it lies, other data through the context's page-locked staging buffer.
 * Fails with a message giving the expected dtype/shape. */
kiln_status kiln_context_set_input(kiln_context *c, const char *name, kiln_dtype dtype, int ndim,
                                   const int64_t *dims, const void *data);
/* Benchmarking switch (trtexec's --noDataTransfers): with enabled == false, a run whose input shapes
 * equal the previous run's reuses the inputs already on the device and copies no outputs back, so
 * it times the computation alone; its outputs are then those of the last run with transfers. No
 * effect on the CPU backend. Transfers are on by default. */
kiln_status kiln_context_set_transfers(kiln_context *c, bool enabled);
/* Binds output `name` to a caller-owned buffer of `bytes` bytes that every later run writes the output
 * into (the device copies straight into it when it is page-locked memory, kiln_host_alloc); then
 * kiln_context_output hands out this buffer. data == NULL unbinds (outputs in the context's memory
 * again). Fails with KILN_ERR_SHAPE when bytes is less than the output needs at its declared shape
 * (an output with run-time dimensions is checked at each run, which fails the same way, giving the
 * bytes needed, when the buffer is too small). The buffer is borrowed until unbound or
 * kiln_context_free. Binding or unbinding drops the outputs of the previous run (kiln_context_output
 * fails until the next run). */
kiln_status kiln_context_set_output_buffer(kiln_context *c, const char *name, void *data, size_t bytes);
/* Starts a run on the bound inputs (every input must be bound) and returns once its copies and
 * kernels are queued on the context's stream, possibly before they finish (cuda; the cpu backend runs
 * to completion here). Until kiln_context_wait returns, the bound input data and output buffers are
 * in use: the caller must not change or free them, and the context accepts no other enqueue. Two
 * contexts of one engine, enqueued alternately, overlap one batch's uploads with the other's
 * computation and downloads. Errors found before anything is queued (bindings, shapes, profiles) are
 * returned here; errors of the queued work, and an output buffer too small for a run-time shape, by
 * kiln_context_wait. */
kiln_status kiln_context_enqueue(kiln_context *c);
/* Waits for the run kiln_context_enqueue started and makes its outputs available
 * (kiln_context_output). Fails with KILN_ERR_INVALID_ARGUMENT when no run is in flight. */
kiln_status kiln_context_wait(kiln_context *c);
/* Whether the run kiln_context_enqueue started has finished (*done), without blocking: once it is
 * true, kiln_context_wait returns at once. Fails with KILN_ERR_INVALID_ARGUMENT when no run is in
 * flight; an error of the queued work is reported by kiln_context_wait, with *done true. */
kiln_status kiln_context_query(kiln_context *c, bool *done);
/* Runs the engine on the bound inputs: kiln_context_enqueue then kiln_context_wait. */
kiln_status kiln_context_run(kiln_context *c);
/* The optimization profile the last successful run used (the first whose ranges hold every bound
 * input's shape), or -1 (no run yet, or an engine without profiles). A run whose shapes lie outside
 * every profile fails with KILN_ERR_SHAPE and a message giving the ranges. */
int kiln_context_profile(const kiln_context *c);
/* After a successful run: output i's dtype, shape and data. The data is borrowed from the context (or
 * is the caller's buffer bound with kiln_context_set_output_buffer) and valid until the next run or
 * kiln_context_free. */
kiln_status kiln_context_output(kiln_context *c, int i, kiln_tensor_desc *desc, const void **data);

#ifdef __cplusplus
}
#endif
#endif
