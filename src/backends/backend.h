/* backend.h — the interface every execution backend implements (docs/architecture.md, "Backends own
 * execution"). The runtime validates bindings and hands the backend host tensors; the backend owns
 * everything about how the graph runs (kernels, memory, streams). */
#ifndef KILN_BACKEND_H
#define KILN_BACKEND_H

#include "core/tensor.h"
#include "engine/engine_format.h"
#include "ir/graph.h"

typedef struct kiln_backend_engine kiln_backend_engine;   /* a backend's per-engine state */
typedef struct kiln_backend_context kiln_backend_context; /* a backend's per-context state */

/* What the optional timing hooks report about a context's last run (for kiln bench). */
#define KILN_TIMING_STAGES 1u /* enqueue / upload / compute / download of every run (cheap) */
#define KILN_TIMING_NODES 2u  /* every node's time and every value's concrete shape (costs more; on
                               * cuda it runs without CUDA graphs) */
typedef struct kiln_backend_timing {
    double enqueue_ms, h2d_ms, compute_ms, d2h_ms; /* last run; < 0: not measured on this backend */
    const double *node_ms;      /* [nnodes] with KILN_TIMING_NODES, else NULL; < 0: not timed there */
    const kiln_value *values;   /* [nvalues] with KILN_TIMING_NODES: dtypes as computed and concrete
                                 * dims of the last run (borrowed from the context), else NULL */
    size_t weight_bytes;        /* weights in the backend's memory (device memory on cuda) */
    size_t activation_bytes;    /* peak activation memory of the last run (cpu: with NODES only) */
    size_t workspace_bytes;     /* per-context scratch (cuda: the library workspace) */
    size_t staging_bytes;       /* pinned host staging buffers */
} kiln_backend_timing;

/* A caller-owned host buffer an output is written into (kiln_context_set_output_buffer). */
typedef struct kiln_host_buffer {
    void *data;
    size_t bytes;
} kiln_host_buffer;

typedef struct kiln_backend {
    const char *name; /* the engine target: "cpu", "cuda" */
    /* A description of device `device` ("x86_64 CPU, 2 cores, OpenBLAS 0.3.21") into buf; fails when
     * the device is absent. */
    kiln_status (*device_name)(int device, char *buf, size_t cap);
    /* Whether the backend computes floating-point tensors in precision p. */
    bool (*supports_precision)(kiln_precision p);
    /* Prepares g (finished, in execution order; it outlives the result) to run: kernel choice, device
     * copies of weights, as opts say (never NULL: the build's options, or the defaults for an engine
     * loaded from a file; environment overrides applied). Fails with KILN_ERR_UNSUPPORTED listing
     * every node it cannot run. */
    kiln_status (*engine_create)(const kiln_graph *g, const kiln_engine_meta *meta, const kiln_build_options *opts,
                                 kiln_backend_engine **out);
    /* Optional (NULL: weights stay as the graph has them): at build time, before engine_create, converts
     * g's float constants that the backend keeps in another dtype on its device (the weights of a
     * 16-bit engine) into that dtype in place, so that the engine holds and its file stores them so.
     * The values keep their declared dtypes; engine_create must accept such constants. opts: the
     * build's options, as engine_create gets them. */
    kiln_status (*store_weights)(kiln_graph *g, const kiln_engine_meta *meta, const kiln_build_options *opts);
    void (*engine_free)(kiln_backend_engine *be); /* accepts NULL */
    /* A context of be, run as opts say (never NULL; environment overrides applied). */
    kiln_status (*context_create)(kiln_backend_engine *be, const kiln_context_options *opts, kiln_backend_context **out);
    void (*context_free)(kiln_backend_context *bc); /* accepts NULL */
    /* Runs on host inputs (g->ninputs tensors in g->inputs order, already checked against the
     * declared types). On success outputs[i] (g->noutputs) describe host data owned by the context,
     * valid until the next run or context_free. */
    kiln_status (*context_run)(kiln_backend_context *bc, const kiln_tensor *inputs, kiln_tensor *outputs);
    /* Optional (NULL: the runtime calls context_run, which finishes before it returns): context_run in
     * two halves. context_enqueue queues the run on the context's stream(s) and returns; inputs' data
     * stays borrowed until context_wait returns. out_bufs[k] (g->noutputs entries) is the caller's
     * buffer for output k ({NULL, 0}: none), which the backend may write output k into directly when it
     * holds the output's bytes; it must never write past out_bufs[k].bytes. On failure nothing stays in
     * flight. context_wait (only after a successful context_enqueue) waits for the run and fills
     * outputs as context_run does (data may then be the caller's buffer). */
    kiln_status (*context_enqueue)(kiln_backend_context *bc, const kiln_tensor *inputs, const kiln_host_buffer *out_bufs);
    kiln_status (*context_wait)(kiln_backend_context *bc, kiln_tensor *outputs);
    /* Required with context_enqueue: whether the enqueued run has finished (also when it failed),
     * without blocking. */
    bool (*context_query)(kiln_backend_context *bc);
    /* Optional (NULL: the backend has no device memory to offer): page-locked host memory for inputs
     * and outputs (kiln_host_alloc). host_alloc fails (no device) without side effects; host_free
     * frees what host_alloc returned. */
    kiln_status (*host_alloc)(size_t bytes, void **out);
    void (*host_free)(void *p);
    /* Optional (NULL: nothing to add): writes what `kiln inspect` should show about a prepared engine
     * beyond the graph (placement, planned memory), one line per fact. */
    void (*describe)(const kiln_backend_engine *be, FILE *out);
    /* Optional (NULL: transfers always happen, as on the CPU): with enabled == false, a run whose input
     * shapes equal the previous run's reuses that run's device inputs and leaves its host outputs as
     * they were, copying nothing between host and device (trtexec's --noDataTransfers). */
    void (*context_set_transfers)(kiln_backend_context *bc, bool enabled);
    /* Optional (NULL: no CUDA graphs to switch): whether runs may replay a captured CUDA graph. */
    void (*context_set_graphs)(kiln_backend_context *bc, bool enabled);
    /* Optional (NULL: runs do not depend on it): the optimization profile the next run's input shapes
     * fall in (-1: the engine has none), told before each context_run; a backend with per-profile
     * tactics runs that profile's. */
    void (*context_set_profile)(kiln_backend_context *bc, int profile);
    /* Optional (NULL: nothing measured): turns timing on (KILN_TIMING_* flags) or off (0, the
     * default, which costs nothing); then context_last_timing describes the last successful run. */
    kiln_status (*context_set_timing)(kiln_backend_context *bc, unsigned flags);
    void (*context_last_timing)(kiln_backend_context *bc, kiln_backend_timing *out);
    /* Optional (NULL: the target has no tactics to choose): at build time, times the candidate
     * tactics of the prepared engine's layers on the device (opts: tuning_level 1..3, timing_cache,
     * verbose) and writes the winners into tactics[g->nnodes] (zeroed by the caller, living as long
     * as the engine), which the engine then runs with; stats receives the counts. A layer whose
     * timing fails keeps the heuristic's tactic, with a warning: that is not an error. */
    kiln_status (*tune)(kiln_backend_engine *be, const kiln_engine_meta *meta, const kiln_build_options *opts,
                        kiln_tactic *tactics, kiln_tuning_stats *stats);
    /* Optional (NULL: the backend runs none of them): whether the backend has a kernel for the
     * kiln-domain fused op op_type (ir/fused_ops.h: "FusedConv", "Attention", ...) worth using in a
     * build with these options (opts->precision; opts->fusion ON: every op it has a kernel for), i.e.
     * whether the fusion passes that create it may run for this target. A backend's kernel for it
     * must accept every node the pass creates (or its supports check must refuse it, failing the
     * build). */
    bool (*runs_fused_op)(const char *op_type, const kiln_build_options *opts);
    /* Convolutions run faster channels-last; the builder lays out FusedConv so for 16-bit builds
     * (fp16 / bf16 precision; pass layout_channels_last, KILN_CHANNELS_LAST in docs/cuda.md). Needs
     * a FusedConv kernel that takes channels_last = 1. */
    bool conv_channels_last;
    /* 16-bit GEMMs want rows of whole 16-byte units; the builder pads constant MatMul operands whose
     * column count is not a multiple of 8 for 16-bit builds (pass align_matmul). */
    bool matmul_aligned_columns;
} kiln_backend;

/* The backend called name (NULL = "cpu"), or NULL. */
const kiln_backend *kiln_backend_find(const char *name);
/* The backend offering page-locked host memory (host_alloc), or NULL (a build without cuda). */
const kiln_backend *kiln_backend_host_memory(void);
/* "cpu" or "cpu, cuda": the targets this kiln was built with. */
const char *kiln_backend_names(void);

#endif
