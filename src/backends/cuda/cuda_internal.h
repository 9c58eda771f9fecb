/* cuda_internal.h — the CUDA backend's own state, shared by its .c files (not by the kernels):
 * the per-engine preparation (which node runs where, the device dtype of every value, device copies
 * of the weights), the per-shape plans (concrete shapes, host-evaluated values, arena offsets, the
 * captured CUDA graph) and the per-context resources (stream, library handles, arena, staging).
 *
 * Execution steps: step 0 is the input boundary (upload, casts to the device dtype), node i is step
 * i + 1, step nnodes + 1 is the output boundary (casts back, download). Liveness is counted in steps.
 *
 * Views: the output of a data-preserving op (Reshape, Flatten, Squeeze, Unsqueeze, Identity, Dropout)
 * shares its input's device memory when it can (be->alias); the group's storage is one buffer, live
 * until the last reader of any member, and the node runs no kernel. No kernel writes into its inputs,
 * so sharing is safe. */
#ifndef KILN_CUDA_INTERNAL_H
#define KILN_CUDA_INTERNAL_H

#include "backends/backend.h"
#include "backends/cpu/cpu_kernels.h"
#include "backends/cuda/cuda_device.h"
#include "backends/cuda/cuda_kernels.h"

#include <pthread.h>
#include <stdint.h>

#define KILN_CUDA_ALIGN 256                      /* every device buffer starts on this boundary */
#define KILN_CUDA_MAX_PLANS 16                   /* shape plans cached per context (LRU) */
/* Workspace per context (and for the tuner) by default: cuDNN's fast convolution algorithms at batch
 * 256 need more than 64 MiB; kiln_build_options.cuda_workspace_mb overrides (be->workspace_bytes). */
#define KILN_CUDA_WORKSPACE_BYTES ((size_t)256 << 20)
#define KILN_CUDA_HOST_SMALL 4096                /* host-evaluated outputs up to this many elements */

/* Where a value lives. */
typedef enum kiln_cuda_kind {
    KILN_CUDA_DEVICE = 0, /* a graph input or a device node's output: in the context's arena */
    KILN_CUDA_CONST = 1,  /* a constant: host data in the graph, device copy in the engine */
    KILN_CUDA_HOST = 2,   /* computed on the host per shape plan, or a shape input (below); device copy
                           * in the plan */
} kiln_cuda_kind;

/* Shape inputs: a small graph input with a static shape whose values decide shapes or kernel
 * parameters (Reshape's shape, Slice's starts, TopK's k, Resize's scales, ... fed by the caller: see
 * cuda_engine.c) stays on the host, as TensorRT's shape tensors do. Its values join its dims in the
 * plan key: a run with new values makes (or finds) another plan. */

struct kiln_backend_engine {
    const kiln_graph *g;
    kiln_precision precision;
    kiln_dtype float_dtype;             /* F32, F16 or BF16: what float values are on the device */
    int device;                         /* CUDA device ordinal */
    int sm_count, cc_major, cc_minor;
    const kiln_cuda_kernel **kernels;   /* [nnodes]: the device kernel, NULL for host nodes */
    kiln_cpu_exec_fn *host_exec;        /* [nnodes]: the CPU kernel of host nodes, else NULL */
    uint8_t *kind;                      /* [nvalues]: kiln_cuda_kind */
    kiln_dtype *dev_dtype;              /* [nvalues]: dtype of the value in device memory */
    bool *needs_device;                 /* [nvalues]: a host/const value that a device node reads */
    int *last_step;                     /* [nvalues]: last step that reads a device value's data (for the
                                         * root of a view group: that any member's data is read) */
    int *alias;                         /* [nvalues]: a view value sharing storage: its root (a device
                                         * value with its own place, or a constant); else -1 */
    bool *view_node;                    /* [nnodes]: a view node (Reshape...) whose output aliases its
                                         * input: it runs nothing (cuda_engine.c find_views) */
    int n_view_nodes;
    bool share_views;                   /* kiln_build_options.cuda_views not OFF: find_views runs */
    size_t workspace_bytes;             /* of each context and of the tuner (cuda_workspace_mb) */
    void *const_mem;                    /* one device allocation holding every needed constant */
    void **const_dev;                   /* [nvalues]: device copy of a constant, or NULL */
    bool *const_typed;                  /* [nvalues]: a constant's dev_dtype came from a node precision */
    int max_args;                       /* most inputs or outputs of one node */
    int n_host_nodes, n_device_nodes;
    int n_shape_inputs;                 /* graph inputs of kind KILN_CUDA_HOST (shape inputs) */
    bool static_inputs;                 /* every input shape is static: static_* below are set */
    size_t static_peak, static_naive;   /* activation arena: planned vs one buffer per value */
    size_t static_alias;                /* of static_naive, the bytes of view values (no storage) */
    size_t const_bytes;                 /* the device allocation holding the constants */
    const kiln_tactic *tactics;         /* [profiles x nnodes] chosen at build time (meta->tactics), or NULL */
    int tactic_sets;                    /* the sets in tactics: kiln_engine_tactic_sets(meta) */
    unsigned char *tactic_warned;       /* [nnodes]: a rejected tactic was reported (cuda_tactics.c) */
    pthread_mutex_t mu;                 /* serializes shape resolution (it may allocate in the graph) */
};

/* One set of concrete input shapes, resolved and planned. */
typedef struct kiln_cuda_plan {
    int64_t *sig;                /* input ranks and dims, concatenated: the cache key, with... */
    int sig_len;
    unsigned char *shape_vals;   /* ...the shape inputs' bytes, concatenated */
    size_t shape_vals_len;
    kiln_value *vals;            /* [nvalues]: the resolved value table (host values are constants) */
    kiln_tensor *host;           /* [nvalues]: results of host nodes (owned) */
    int64_t *off;                /* [nvalues]: device values: arena offset (a view value: its root's);
                                  * host values: offset in host_dev; -1 when the value has no device
                                  * storage (also a view of a constant: see be->alias) */
    int64_t *in_stage;           /* [ninputs]: arena offset of the declared-dtype upload buffer, or -1 */
    int64_t *out_stage;          /* [noutputs]: arena offset of the declared-dtype download buffer, or -1 */
    size_t *in_pin, *out_pin;    /* [ninputs], [noutputs]: offsets in the pinned staging buffers */
    size_t arena_bytes, naive_bytes, host_dev_bytes, pin_in_bytes, pin_out_bytes;
    size_t alias_bytes;          /* view values' bytes: in naive_bytes, not in the arena */
    void *host_dev;              /* device copies of host values that device nodes read */
    cudaGraphExec_t exec;        /* the captured plan, or NULL */
    void *exec_arena;            /* the arena base the capture used */
    bool no_graph;               /* capture failed: run eagerly (after a second failure, always) */
    int capture_failures;        /* failed capture attempts (one retry: see cuda_graph.c) */
    bool has_device_work;        /* some node or boundary cast runs on the device */
    int profile;                 /* the tactic set its nodes run with: the profile its shapes fall in */
    uint64_t runs, last_used;
} kiln_cuda_plan;

struct kiln_backend_context {
    kiln_backend_engine *be;
    kiln_cuda_ctx kc;            /* what the kernels see: stream, handles, workspace */
    void *arena;
    size_t arena_bytes;
    unsigned char *pin_in, *pin_out;
    size_t pin_in_bytes, pin_out_bytes;
    kiln_cuda_plan *plans[KILN_CUDA_MAX_PLANS];
    int nplans;
    int profile;                 /* the next run's profile (context_set_profile; 0 without profiles) */
    uint64_t tick;
    bool use_graphs;             /* kiln_context_options.cuda_graphs not OFF */
    bool no_transfers;           /* kiln_context_set_transfers(false): see backend.h */
    kiln_cuda_plan *last_plan;   /* the plan of the previous successful run */
    kiln_cuda_plan *pending_plan; /* the plan of the run enqueued and not yet waited for, or NULL */
    double pending_enqueue_ms;   /* its host enqueue time (with timing on) */
    void **out_direct;           /* [noutputs]: the caller's page-locked buffer the last download of
                                  * output k went straight into, or NULL (then: pin_out) */
    kiln_cuda_tensor *args;      /* [2 * max_args]: one node's inputs then outputs */
    unsigned timing;             /* KILN_TIMING_* flags (kiln bench); 0 = off */
    struct kiln_cuda_timing *tm; /* events and results while timing is on (cuda_timing.c) */
    kiln_cuda_node_state **node_state; /* [nnodes]: what exec functions keep per node (kc.state) */
    void *zero;                  /* kc.zero: zeroed device memory, kc.zero_bytes long */
};

static inline bool kiln_cuda_is_float(kiln_dtype t) {
    return t == KILN_F32 || t == KILN_F16 || t == KILN_BF16 || t == KILN_F64;
}
static inline size_t kiln_cuda_align(size_t n) { return (n + KILN_CUDA_ALIGN - 1) & ~(size_t)(KILN_CUDA_ALIGN - 1); }

/* cuda_engine.c — the host side of engine_create, without touching a device: places every node
 * (device or host), gives values their device dtypes (node_precision: the precision of each node, or
 * NULL for `precision` everywhere), lets view nodes share their input's storage when share_views,
 * computes liveness and, for static input shapes, the static plan. With require_kernels, fails
 * listing every node the device cannot run; without, such nodes stay device nodes with
 * kernels[i] == NULL (for planning only: such an engine cannot run). On success *out is owned by the
 * caller (kiln_cuda_engine_free). */
kiln_status kiln_cuda_engine_prepare(const kiln_graph *g, kiln_precision precision, const uint8_t *node_precision,
                                     bool require_kernels, bool share_views, kiln_backend_engine **out);
/* cuda_engine.c — the backend's engine_create / engine_free / describe. */
kiln_status kiln_cuda_engine_create(const kiln_graph *g, const kiln_engine_meta *meta, const kiln_build_options *opts,
                                    kiln_backend_engine **out);
void kiln_cuda_engine_free(kiln_backend_engine *be);
void kiln_cuda_engine_describe(const kiln_backend_engine *be, FILE *f);
/* cuda_engine.c — host-side conversion of n elements between the float types F32/F64/F16/BF16 (same
 * type: a copy). Other pairs must be equal types. */
void kiln_cuda_host_convert(const void *src, kiln_dtype st, void *dst, kiln_dtype dt, int64_t n);
/* One conversion of kiln_cuda_host_convert_all: n elements of src (dtype st) into dst (dtype dt). */
typedef struct kiln_cuda_conversion {
    const void *src;
    kiln_dtype st;
    void *dst;
    kiln_dtype dt;
    int64_t n;
} kiln_cuda_conversion;
/* Makes every conversion (as kiln_cuda_host_convert does) in one pass: their elements, taken as one
 * sequence, are split evenly over up to 16 threads, so a model's hundreds of weights share the
 * threads instead of each starting its own. */
void kiln_cuda_host_convert_all(const kiln_cuda_conversion *c, int count);

/* cuda_memory.c — the bytes of zeros a context (or the tuner) keeps for be's nodes (kc.zero): a
 * bias of the most output channels of any kiln.FusedConv, in float32, at least 64 KiB. */
size_t kiln_cuda_zero_bytes(const kiln_backend_engine *be);

/* cuda_weights.c — the backend's store_weights hook (backend.h): the float constants that only the
 * device reads, of at least 1024 elements, converted in g to the dtype the device keeps them in. */
kiln_status kiln_cuda_store_weights(kiln_graph *g, const kiln_engine_meta *meta, const kiln_build_options *opts);

/* cuda_tuning.c — the backend's tune hook (backend.h): times the candidate tactics of every MatMul,
 * Gemm and Conv at the engine's shapes, records the winners in tactics[] and points be->tactics at
 * them. */
kiln_status kiln_cuda_tune(kiln_backend_engine *be, const kiln_engine_meta *meta, const kiln_build_options *opts,
                           kiln_tactic *tactics, kiln_tuning_stats *stats);
/* cuda_tactics.c — describes a tactic for inspect ("cublasLt algo 23 (tuned, 1.18x vs heuristic)")
 * into buf. */
void kiln_cuda_tactic_str(const kiln_tactic *t, char *buf, size_t cap);

/* cuda_shapes.c — resolves the concrete shape of every value for the given input shapes (inputs[k]
 * holds dims for graph input k; data is read only for shape inputs, which must have it), evaluating
 * host nodes on the CPU. vals gets a copy of the value table with concrete dims (host values, shape
 * inputs among them, become constants pointing into host[]); host[] (nvalues, zeroed by the caller)
 * receives the host results and copies of the shape inputs, owned. Every device value must be static,
 * else KILN_ERR_UNSUPPORTED naming the node. Takes be->mu. */
kiln_status kiln_cuda_resolve_shapes(kiln_backend_engine *be, const kiln_tensor *inputs, kiln_value *vals,
                                     kiln_tensor *host);

/* cuda_memory.c — one buffer live from step start to step end (inclusive) that needs bytes. */
typedef struct kiln_cuda_interval {
    size_t bytes;
    int start, end;
    size_t offset; /* out: its place in the arena */
} kiln_cuda_interval;
/* First-fit placement, largest first: buffers whose lifetimes overlap never overlap in memory.
 * Returns the arena size needed; *naive (optional) gets the sum of the aligned sizes. Fails only on
 * out of memory. */
kiln_status kiln_cuda_place(kiln_cuda_interval *iv, int n, size_t *peak, size_t *naive);
/* Resolves the shapes for inputs (and the values of the shape inputs) and plans every device buffer
 * (host side only: no device memory is touched). On success *out is owned by the caller
 * (kiln_cuda_plan_free). */
kiln_status kiln_cuda_plan_create(kiln_backend_engine *be, const kiln_tensor *inputs, kiln_cuda_plan **out);
/* Bytes of input k's values in the plan key: its declared size when it is a shape input with data,
 * else 0. */
size_t kiln_cuda_shape_value_bytes(const kiln_backend_engine *be, const kiln_tensor *inputs, int k);
/* Frees the plan's host memory, its CUDA graph and its device copies of host values. Accepts NULL. */
void kiln_cuda_plan_free(const kiln_backend_engine *be, kiln_cuda_plan *p);
/* Destroys p's CUDA graph (after the arena moved, or when the plan is freed). */
void kiln_cuda_plan_drop_graph(kiln_cuda_plan *p);
/* Elements of value v under plan p (0 for none; plans only hold sizes that passed the overflow check). */
int64_t kiln_cuda_value_numel(const kiln_cuda_plan *p, int v);
/* Bytes of value v on the device under plan p (0 when it has no elements). */
size_t kiln_cuda_value_bytes(const kiln_backend_engine *be, const kiln_cuda_plan *p, int v);

/* The setup lock (kiln_cuda_setup_lock) and the opening of a context's stream and handles
 * (kiln_cuda_ctx_open) are cuda_device.h's, shared with the LLM runtime. */

/* cuda_graph.c — runs plan p on the context's stream: the boundary casts, every device node, the
 * output casts. The plan's first run goes node by node with a synchronization after each (errors
 * name the node); later runs replay a CUDA graph captured on the second run (unless disabled or the
 * capture failed, then eagerly without per-node synchronization). Uploads/downloads are the caller's. */
kiln_status kiln_cuda_plan_execute(kiln_backend_context *c, kiln_cuda_plan *p);

/* cuda_timing.c — kiln bench's timing hooks (backend.h). Stage marks (0 before the upload, 1 after it,
 * 2 after the plan, 3 after the download) and node marks record CUDA events on the context's stream
 * when timing is on and do nothing otherwise; with KILN_TIMING_NODES the plan runs without a CUDA
 * graph, so that the node events are real. kiln_cuda_timing_finish reads the events after the
 * run's synchronization. */
kiln_status kiln_cuda_timing_set(kiln_backend_context *c, unsigned flags);
void kiln_cuda_timing_free(kiln_backend_context *c);
void kiln_cuda_timing_stage(kiln_backend_context *c, int stage);
void kiln_cuda_timing_node(kiln_backend_context *c, int node, bool end);
kiln_status kiln_cuda_timing_finish(kiln_backend_context *c, const kiln_cuda_plan *p, double enqueue_ms);
void kiln_cuda_last_timing(kiln_backend_context *c, kiln_backend_timing *out);

#endif
