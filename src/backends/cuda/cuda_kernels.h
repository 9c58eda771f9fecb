/* cuda_kernels.h — the CUDA backend's kernel interface: one exec function per op, looked up by name,
 * each enqueueing work on the caller's stream. C and CUDA C both include this header.
 *
 * Each op family lives in src/backends/cuda/<family>.cu (kernels and their launchers) and exports a
 * table
 *     const kiln_cuda_kernel kiln_cuda_kernels_<family>[] = { {...}, ..., {0} };
 * listed once in cuda_dispatch.c.
 *
 * Contract of an exec function (the runtime, src/backends/cuda/cuda_runtime.c, guarantees the inputs):
 *  - in[i] is input i of the node, or has data == NULL and ndim == -1 when that optional input is
 *    absent (nin = node->ninputs). out[i] likewise for outputs (nout = node->noutputs).
 *  - Shapes are resolved before the call: every in[i]/out[i] has its concrete dims, dtype and device
 *    memory (data; NULL only when the tensor has no elements). The kernel does not allocate, free,
 *    synchronize, or copy between host and device: it only enqueues kernels / library calls on
 *    ctx->stream, so that the whole plan can be captured in a CUDA graph.
 *  - dtypes: floating-point values arrive in the engine's precision (KILN_F32, KILN_F16 or KILN_BF16);
 *    integer and bool tensors in their declared type. The output dtype is out[i].dtype, which may
 *    differ from what the node's attributes say (a Cast "to float32" in an fp16 engine writes F16).
 *    Reductions, normalizations and softmax accumulate in FP32 whatever the storage type. FP32
 *    engines compute in true FP32: no TF32 (cuBLASLt CUBLAS_COMPUTE_32F, not _FAST_TF32; cuDNN
 *    CUDNN_FMA_MATH), since they must match the CPU oracle to 1e-4 relative.
 *  - Values known on the host (constants, and shape computations the runtime evaluated on the CPU)
 *    also have in[i].host != NULL pointing at a host copy in the value's *declared* dtype (int64 for
 *    shapes, float32 for float constants). Ops that need small parameter tensors (Slice starts/ends,
 *    Reshape shape, Pad pads, TopK k, Clip min/max, Resize scales...) read them from .host; when such
 *    an input has no host copy, the op's `supports` function must have refused it at build time.
 *  - Scratch memory: ctx->workspace (ctx->workspace_bytes, 256-byte aligned) is free for the duration
 *    of the call.
 *  - Errors: every CUDA / cuBLAS / cuDNN call is checked (KILN_CUDA_TRY etc. below) and a failure
 *    becomes a kiln_status naming the call; launches are checked with cudaGetLastError().
 *  - Reentrant: several contexts (each with its own stream and workspace) run concurrently.
 *  - Tactics (MatMul, Gemm, Conv: the ops with library algorithms to choose): ctx->tactic is the
 *    algorithm the engine chose at build time (NULL: ask the library's heuristic). A tactic the library
 *    rejects for this call (another GPU or library version, other alignments) is replaced by the
 *    heuristic's choice, with one warning per node (kiln_cuda_tactic_rejected); while tuning
 *    (ctx->tactic_strict) the call fails instead. With ctx->candidates set, the exec function enqueues
 *    no library call: it records the heuristic's candidates for its first library call and returns.
 *  - Per-node state: ctx->state points at this node's slot in the context (NULL while tuning, where
 *    nothing persists; kiln.QMatMul gets a slot for its layer's tuning runs: cuda_tuning_layer.c). An exec function may keep host-side state there across the context's runs
 *    (cuDNN descriptors, the chosen algorithm per shape: conv.cu), made on its first run and reused
 *    after, so that later eager runs and captures repeat no library query; the context destroys it
 *    (its destroy function) when it is freed. A context runs on one thread at a time, so the state
 *    needs no lock; state shared by the contexts of an engine must not live there.
 *  - ctx->zero holds ctx->zero_bytes zero bytes (an absent bias for library calls that need one).
 *  - Graph capture: the runtime runs each input-shape plan once eagerly (so lazy one-time set-up, such
 *    as module loading or cudaFuncSetAttribute, happens outside any capture), then captures the same
 *    calls into a CUDA graph and replays it. So an exec function must enqueue the same work for the
 *    same arguments, and be deterministic: replays are checked to be bit-identical to the first run.
 */
#ifndef KILN_CUDA_KERNELS_H
#define KILN_CUDA_KERNELS_H

#include "core/status.h"
#include "engine/engine_format.h"
#include "ir/graph.h"

#include <cublasLt.h>
#include <cuda_runtime.h>
#include <cudnn.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct kiln_cuda_tensor {
    kiln_dtype dtype;
    int ndim;                    /* -1: absent optional input/output */
    int64_t dims[KILN_MAX_DIMS];
    void *data;                  /* device memory */
    const void *host;            /* host copy (declared dtype) or NULL */
    kiln_dtype host_dtype;       /* dtype of *host */
} kiln_cuda_tensor;

#define KILN_CUDA_MAX_CANDIDATES 32

/* The candidate tactics of one node's first library call, in the heuristic's order (tuning). */
typedef struct kiln_cuda_candidates {
    int max;                                     /* how many to ask the heuristic for (<= 32) */
    int count;                                   /* filled: usable candidates in list */
    bool done;                                   /* the first library call was recorded */
    kiln_tactic list[KILN_CUDA_MAX_CANDIDATES];
} kiln_cuda_candidates;

/* State an exec function keeps for one node in one context (see the contract above): embed this as
 * the first member; owner tells the kernel its own state, destroy frees it and all it holds. */
typedef struct kiln_cuda_node_state kiln_cuda_node_state;
struct kiln_cuda_node_state {
    const char *owner;
    void (*destroy)(kiln_cuda_node_state *s);
};

typedef struct kiln_cuda_ctx {
    cudaStream_t stream;
    cublasLtHandle_t lt;
    cudnnHandle_t dnn;
    void *workspace;
    size_t workspace_bytes;
    int sm_count;
    int cc_major, cc_minor;      /* compute capability */
    const kiln_tactic *tactic;   /* the node's chosen tactic, or NULL (see the contract above) */
    unsigned char *tactic_warned; /* per node: a rejection was already reported (NULL: never report) */
    bool tactic_strict;          /* tuning: a rejected tactic fails the call */
    kiln_cuda_candidates *candidates; /* tuning: record candidates instead of running */
    kiln_cuda_node_state **state; /* the node's state slot in the context, or NULL (see the contract) */
    const void *zero;            /* zero_bytes of zeros (device memory), or NULL */
    size_t zero_bytes;
} kiln_cuda_ctx;

typedef kiln_status (*kiln_cuda_exec_fn)(const kiln_node *n, const kiln_cuda_tensor *in, int nin,
                                         const kiln_cuda_tensor *out, int nout, kiln_cuda_ctx *ctx);

/* Build-time check of one node with the value types it will see on the device (g's values already
 * carry the device dtypes): KILN_OK, or KILN_ERR_UNSUPPORTED naming why (dtype, attribute, an input
 * that must be known on the host but is not). NULL means "always supported". */
typedef kiln_status (*kiln_cuda_supports_fn)(const kiln_graph *g, const kiln_node *n);

/* For supports functions: whether value vid (of the graph being checked) will have a host copy at run
 * time, i.e. in[i].host != NULL: a constant, or a small shape computation the runtime evaluates on
 * the CPU (e.g. Concat(Gather(Shape(x)), ...) feeding a Reshape). Its data is only known at run time,
 * so check with this function, not with value->constant, whether a parameter input will be readable. */
bool kiln_cuda_value_on_host(const kiln_graph *g, int vid);

typedef struct kiln_cuda_kernel {
    const char *op_type;
    const char *domain; /* "" for the default ONNX domain */
    kiln_cuda_exec_fn exec;
    kiln_cuda_supports_fn supports;
} kiln_cuda_kernel;

const kiln_cuda_kernel *kiln_cuda_kernel_find(const char *domain, const char *op_type);

/* The backend's runs_fused_op capability (backend.h): whether there is a kernel for the kiln-domain
 * op op_type worth using with these build options. Default (opts->fusion AUTO): every fused op;
 * Attention in fp16/bf16 builds only (their tensor-core kernel); fusion ON fuses it in fp32 too. The
 * builder applies fusion OFF and unfused_ops itself. A kiln compiled with -DKILN_CUDA_NO_FUSION
 * (e.g. -DCMAKE_C_FLAGS=-DKILN_CUDA_NO_FUSION) fuses nothing unless fusion is ON. (cuda_dispatch.c) */
bool kiln_cuda_runs_fused_op(const char *op_type, const kiln_build_options *opts);

/* For exec functions: ctx->tactic cannot run this call (why says the library's reason). With
 * ctx->tactic_strict returns KILN_ERR_UNSUPPORTED naming the node; otherwise warns once per node
 * that the heuristic's choice runs instead and returns KILN_OK. (cuda_tactics.c) */
kiln_status kiln_cuda_tactic_rejected(const kiln_node *n, kiln_cuda_ctx *ctx, const char *why);

/* conv.cu — kiln.FusedConv whole (in: X, W, B, Z as the node has them; y: Y): act(Conv(X, W, B) + Z)
 * through cudnnConvolutionBiasActivationForward where it applies, else the convolution and then
 * kiln_cuda_fused_epilogue; channels_last per ir/fused_ops.h. */
kiln_status kiln_cuda_fused_conv(const kiln_node *n, const kiln_cuda_tensor *in, int nin, const kiln_cuda_tensor *y,
                                 kiln_cuda_ctx *ctx);
/* fused_epilogue.cu — y = act((y + bias[col]) + z) in place over y (bias: Y's last dim of values, z:
 * exactly y's elements; either NULL or absent), the activation from n's attributes; enqueues nothing
 * when nothing is left to apply. */
kiln_status kiln_cuda_fused_epilogue(const kiln_node *n, const kiln_cuda_tensor *y, const kiln_cuda_tensor *bias,
                                     const kiln_cuda_tensor *z, kiln_cuda_ctx *ctx);

/* Error helpers: turn a failed call into a kiln_status naming the call and where. */
kiln_status kiln_cuda_error(cudaError_t e, const char *call, const char *file, int line);
kiln_status kiln_cublas_error(cublasStatus_t e, const char *call, const char *file, int line);
kiln_status kiln_cudnn_error(cudnnStatus_t e, const char *call, const char *file, int line);

#define KILN_CUDA_TRY(call)                                                                        \
    do {                                                                                           \
        cudaError_t kiln_e_ = (call);                                                              \
        if (kiln_e_ != cudaSuccess) return kiln_cuda_error(kiln_e_, #call, __FILE__, __LINE__);    \
    } while (0)
#define KILN_CUBLAS_TRY(call)                                                                      \
    do {                                                                                           \
        cublasStatus_t kiln_e_ = (call);                                                           \
        if (kiln_e_ != CUBLAS_STATUS_SUCCESS) return kiln_cublas_error(kiln_e_, #call, __FILE__, __LINE__); \
    } while (0)
#define KILN_CUDNN_TRY(call)                                                                       \
    do {                                                                                           \
        cudnnStatus_t kiln_e_ = (call);                                                            \
        if (kiln_e_ != CUDNN_STATUS_SUCCESS) return kiln_cudnn_error(kiln_e_, #call, __FILE__, __LINE__); \
    } while (0)
/* After a kernel launch: checks cudaGetLastError(). */
#define KILN_CUDA_LAUNCH_CHECK(kernel_name)                                                        \
    do {                                                                                           \
        cudaError_t kiln_e_ = cudaGetLastError();                                                  \
        if (kiln_e_ != cudaSuccess) return kiln_cuda_error(kiln_e_, "launch " kernel_name, __FILE__, __LINE__); \
    } while (0)

#ifdef __cplusplus
}
#endif
#endif
