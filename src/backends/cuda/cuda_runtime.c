/* cuda_runtime.c — the CUDA backend (target "cuda"): device description, execution contexts and runs.
 *
 * A context owns one non-blocking stream, a cuBLASLt and a cuDNN handle bound to it, a 256 MiB
 * workspace (kiln_build_options.cuda_workspace_mb), a small zeroed buffer (absent conv biases), the
 * per-node state of the exec functions (cuda_kernels.h: cached cuDNN descriptors and algorithms), the
 * activation arena and pinned staging buffers, and a small LRU of shape plans (one per distinct set
 * of input shapes; cuda_memory.c). A run is enqueued: find or make the plan (growing the arena and
 * staging only when a new plan needs more, so a seen shape allocates nothing), upload the inputs
 * (straight from page-locked caller memory, else through the pinned staging buffer), execute the plan
 * (cuda_graph.c: eagerly the first time, then as a CUDA graph), download the outputs (straight into a
 * page-locked caller buffer, else into pinned staging); then waited for (the stream's
 * synchronization). Contexts of one engine share its weights and run concurrently, each on its own
 * stream, so two contexts enqueued alternately overlap transfers with computation. The backend also
 * hands out page-locked host memory (kiln_host_alloc). */
#include "backends/cuda/cuda_internal.h"

#include "core/log.h"
#include "core/status.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

static kiln_status cuda_device_name(int device, char *buf, size_t cap) {
    int count = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess) return kiln_error(KILN_ERR_BACKEND, "no CUDA device (cudaGetDeviceCount: %s)", cudaGetErrorString(e));
    if (count == 0) return kiln_error(KILN_ERR_BACKEND, "no CUDA device (cudaGetDeviceCount: 0 devices)");
    if (device < 0 || device >= count)
        return kiln_error(KILN_ERR_INVALID_ARGUMENT, "there is no CUDA device %d (this machine has %d)", device, count);
    struct cudaDeviceProp prop;
    KILN_CUDA_TRY(cudaGetDeviceProperties(&prop, device));
    int driver = 0;
    KILN_CUDA_TRY(cudaDriverGetVersion(&driver));
    size_t lt = cublasLtGetVersion(), dnn = cudnnGetVersion();
    snprintf(buf, cap, "%s (sm_%d%d, %d SMs, %zu GiB), driver %d.%d, cuBLASLt %zu.%zu, cuDNN %zu.%zu", prop.name, prop.major,
             prop.minor, prop.multiProcessorCount, prop.totalGlobalMem >> 30, driver / 1000, driver % 1000 / 10, lt / 10000,
             lt % 10000 / 100, dnn / 10000, dnn % 10000 / 100);
    return KILN_OK;
}

static bool cuda_supports_precision(kiln_precision p) {
    return p == KILN_PRECISION_FP32 || p == KILN_PRECISION_FP16 || p == KILN_PRECISION_BF16;
}

/* ---------------------------------------------------------------- contexts */

/* Frees the context's device resources; the caller holds the setup lock. */
static void free_context_locked(kiln_backend_context *c) {
    cudaSetDevice(c->be->device);
    if (c->kc.stream) cudaStreamSynchronize(c->kc.stream);
    kiln_cuda_timing_free(c);
    if (c->node_state) {
        for (int i = 0; i < c->be->g->nnodes; i++)
            if (c->node_state[i]) c->node_state[i]->destroy(c->node_state[i]);
        free(c->node_state);
    }
    if (c->zero) cudaFree(c->zero);
    for (int i = 0; i < c->nplans; i++) kiln_cuda_plan_free(c->be, c->plans[i]);
    if (c->arena) cudaFree(c->arena);
    if (c->pin_in) cudaFreeHost(c->pin_in);
    if (c->pin_out) cudaFreeHost(c->pin_out);
    kiln_cuda_ctx_close(&c->kc);
    free(c->args);
    free(c->out_direct);
    free(c);
}

static void cuda_context_free(kiln_backend_context *c) {
    if (!c) return;
    kiln_cuda_setup_lock();
    free_context_locked(c);
    kiln_cuda_setup_unlock();
}

static kiln_status init_context(kiln_backend_context *c) {
    const kiln_backend_engine *be = c->be;
    KILN_TRY(kiln_cuda_ctx_open(be->device, be->workspace_bytes, KILN_CUDA_OPEN_BLAS | KILN_CUDA_OPEN_DNN, &c->kc));
    const size_t zb = kiln_cuda_zero_bytes(be);
    KILN_CUDA_TRY(cudaMalloc(&c->zero, zb));
    KILN_CUDA_TRY(cudaMemsetAsync(c->zero, 0, zb, c->kc.stream)); /* ordered before every run on the stream */
    c->kc.zero = c->zero;
    c->kc.zero_bytes = zb;
    return KILN_OK;
}

static kiln_status cuda_context_create(kiln_backend_engine *be, const kiln_context_options *opts,
                                       kiln_backend_context **out) {
    kiln_backend_context *c = calloc(1, sizeof *c);
    if (!c) return kiln_error(KILN_ERR_OUT_OF_MEMORY, "out of memory");
    c->be = be;
    c->use_graphs = opts->cuda_graphs != KILN_SWITCH_OFF;
    c->args = calloc(2 * (size_t)be->max_args + 1, sizeof *c->args);
    c->node_state = calloc((size_t)be->g->nnodes + 1, sizeof *c->node_state);
    c->out_direct = calloc((size_t)be->g->noutputs + 1, sizeof *c->out_direct);
    if (!c->args || !c->node_state || !c->out_direct) {
        free(c->args);
        free(c->node_state);
        free(c->out_direct);
        free(c);
        return kiln_error(KILN_ERR_OUT_OF_MEMORY, "out of memory");
    }
    kiln_cuda_setup_lock();
    kiln_status s = init_context(c);
    if (s != KILN_OK) free_context_locked(c);
    kiln_cuda_setup_unlock();
    if (s != KILN_OK) return s;
    *out = c;
    return KILN_OK;
}

/* ---------------------------------------------------------------- shape plans of a context */

/* The growth of ensure_capacity; the caller holds the setup lock. */
static kiln_status grow_locked(kiln_backend_context *c, const kiln_cuda_plan *p) {
    KILN_CUDA_TRY(cudaStreamSynchronize(c->kc.stream));
    if (p->arena_bytes > c->arena_bytes) {
        for (int i = 0; i < c->nplans; i++) kiln_cuda_plan_drop_graph(c->plans[i]);
        if (c->arena) cudaFree(c->arena);
        c->arena = NULL;
        c->arena_bytes = 0;
        KILN_CUDA_TRY(cudaMalloc(&c->arena, p->arena_bytes));
        c->arena_bytes = p->arena_bytes;
    }
    if (p->pin_in_bytes > c->pin_in_bytes) {
        if (c->pin_in) cudaFreeHost(c->pin_in);
        c->pin_in = NULL;
        c->pin_in_bytes = 0;
        KILN_CUDA_TRY(cudaMallocHost((void **)&c->pin_in, p->pin_in_bytes));
        c->pin_in_bytes = p->pin_in_bytes;
    }
    if (p->pin_out_bytes > c->pin_out_bytes) {
        if (c->pin_out) cudaFreeHost(c->pin_out);
        c->pin_out = NULL;
        c->pin_out_bytes = 0;
        KILN_CUDA_TRY(cudaMallocHost((void **)&c->pin_out, p->pin_out_bytes));
        c->pin_out_bytes = p->pin_out_bytes;
    }
    return KILN_OK;
}

/* Makes room for plan p: grows the arena and the pinned buffers if it needs more (after the stream is
 * idle; captured graphs of other plans then point at freed memory and are recaptured on their next
 * run). Called for every run, so that a growth that failed half way is retried, never run on. */
static kiln_status ensure_capacity(kiln_backend_context *c, const kiln_cuda_plan *p) {
    if (p->arena_bytes <= c->arena_bytes && p->pin_in_bytes <= c->pin_in_bytes && p->pin_out_bytes <= c->pin_out_bytes)
        return KILN_OK;
    kiln_cuda_setup_lock();
    kiln_status s = grow_locked(c, p);
    kiln_cuda_setup_unlock();
    return s;
}

/* Uploads, once per plan, the host values that device nodes read (converted to their device dtype). */
static kiln_status upload_host_values(kiln_backend_context *c, kiln_cuda_plan *p) {
    const kiln_backend_engine *be = c->be;
    const kiln_graph *g = be->g;
    cudaStream_t st = c->kc.stream;
    if (!p->host_dev_bytes) return KILN_OK;
    KILN_CUDA_TRY(cudaMalloc(&p->host_dev, p->host_dev_bytes));
    for (int v = 0; v < g->nvalues; v++) {
        if (be->kind[v] != KILN_CUDA_HOST || p->off[v] < 0) continue;
        const kiln_tensor *t = &p->host[v];
        kiln_dtype dt = be->dev_dtype[v];
        if (t->dtype != dt && !(kiln_cuda_is_float(t->dtype) && kiln_cuda_is_float(dt)))
            return kiln_error(KILN_ERR_INTERNAL, "host value '%s' is %s, the device expects %s", g->values[v].name,
                              kiln_dtype_name(t->dtype), kiln_dtype_name(dt));
        size_t bytes = kiln_cuda_value_bytes(be, p, v);
        void *tmp = malloc(bytes);
        if (!tmp) return kiln_error(KILN_ERR_OUT_OF_MEMORY, "out of memory uploading '%s'", g->values[v].name);
        kiln_cuda_host_convert(t->data, t->dtype, tmp, dt, kiln_cuda_value_numel(p, v));
        cudaError_t e = cudaMemcpyAsync((char *)p->host_dev + p->off[v], tmp, bytes, cudaMemcpyHostToDevice, st);
        if (e == cudaSuccess) e = cudaStreamSynchronize(st);
        free(tmp);
        if (e != cudaSuccess) return kiln_cuda_error(e, "cudaMemcpyAsync(host value)", __FILE__, __LINE__);
    }
    return KILN_OK;
}

static bool plan_matches(const kiln_backend_engine *be, const kiln_cuda_plan *p, const kiln_tensor *inputs) {
    int j = 0, ninputs = be->g->ninputs;
    for (int k = 0; k < ninputs; k++) {
        if (j >= p->sig_len || p->sig[j++] != inputs[k].ndim) return false;
        for (int d = 0; d < inputs[k].ndim; d++)
            if (j >= p->sig_len || p->sig[j++] != inputs[k].dims[d]) return false;
    }
    if (j != p->sig_len) return false;
    size_t at = 0; /* the dims match, so each shape input's byte count does too */
    for (int k = 0; be->n_shape_inputs && k < ninputs; k++) {
        size_t bytes = kiln_cuda_shape_value_bytes(be, inputs, k);
        if (bytes && (at + bytes > p->shape_vals_len || memcmp(p->shape_vals + at, inputs[k].data, bytes)))
            return false;
        at += bytes;
    }
    return at == p->shape_vals_len;
}

/* The plan for these input shapes (and shape-input values): cached, or made now (evicting the least
 * recently used). */
static kiln_status get_plan(kiln_backend_context *c, const kiln_tensor *inputs, kiln_cuda_plan **out) {
    kiln_backend_engine *be = c->be;
    for (int i = 0; i < c->nplans; i++)
        if (plan_matches(be, c->plans[i], inputs)) {
            c->plans[i]->last_used = ++c->tick;
            *out = c->plans[i];
            return KILN_OK;
        }
    kiln_cuda_plan *p;
    KILN_TRY(kiln_cuda_plan_create(be, inputs, &p));
    p->profile = c->profile < be->tactic_sets ? c->profile : 0;
    kiln_cuda_setup_lock();
    kiln_status s = upload_host_values(c, p);
    if (s != KILN_OK) {
        kiln_cuda_plan_free(be, p);
        kiln_cuda_setup_unlock();
        return s;
    }
    if (c->nplans == KILN_CUDA_MAX_PLANS) {
        int lru = 0;
        for (int i = 1; i < c->nplans; i++)
            if (c->plans[i]->last_used < c->plans[lru]->last_used) lru = i;
        if (c->plans[lru] == c->last_plan) c->last_plan = NULL; /* its inputs leave the device */
        kiln_cuda_plan_free(be, c->plans[lru]);
        c->plans[lru] = c->plans[--c->nplans];
    }
    kiln_cuda_setup_unlock();
    p->last_used = ++c->tick;
    c->plans[c->nplans++] = p;
    KILN_LOG(KILN_LOG_VERBOSE, "cuda: new shape plan: activations %.2f MB planned vs %.2f MB naive, %.2f MB of host values",
             (double)p->arena_bytes / 1e6, (double)p->naive_bytes / 1e6, (double)p->host_dev_bytes / 1e6);
    *out = p;
    return KILN_OK;
}

/* ---------------------------------------------------------------- runs */

/* Whether p is page-locked host memory (kiln_host_alloc, cudaHostAlloc, cudaHostRegister), which copies
 * can read and write by DMA without staging. */
static bool is_page_locked(const void *p) {
    struct cudaPointerAttributes a;
    if (!p || cudaPointerGetAttributes(&a, p) != cudaSuccess) {
        cudaGetLastError(); /* clears the (non-sticky) error of a pointer CUDA does not know */
        return false;
    }
    return a.type == cudaMemoryTypeHost;
}

static kiln_status upload_inputs(kiln_backend_context *c, const kiln_cuda_plan *p, const kiln_tensor *inputs) {
    const kiln_graph *g = c->be->g;
    for (int k = 0; k < g->ninputs; k++) {
        int v = g->inputs[k];
        size_t bytes = (size_t)kiln_cuda_value_numel(p, v) * kiln_dtype_size(g->values[v].dtype);
        if (c->be->kind[v] != KILN_CUDA_DEVICE || !bytes || p->off[v] < 0) continue; /* shape inputs: in the plan */
        const void *src = inputs[k].data;
        if (!is_page_locked(src)) {
            unsigned char *pin = c->pin_in + p->in_pin[k];
            memcpy(pin, src, bytes);
            src = pin;
        }
        char *dst = (char *)c->arena + (p->in_stage[k] >= 0 ? p->in_stage[k] : p->off[v]);
        KILN_CUDA_TRY(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, c->kc.stream));
    }
    return KILN_OK;
}

/* Downloads every device output: into the caller's buffer out_bufs[k] when it is page-locked and holds
 * the output (recorded in c->out_direct), else into pinned staging. */
static kiln_status download_outputs(kiln_backend_context *c, const kiln_cuda_plan *p, const kiln_host_buffer *out_bufs) {
    const kiln_backend_engine *be = c->be;
    const kiln_graph *g = be->g;
    for (int k = 0; k < g->noutputs; k++) {
        int v = g->outputs[k];
        size_t bytes = (size_t)kiln_cuda_value_numel(p, v) * kiln_dtype_size(g->values[v].dtype);
        c->out_direct[k] = NULL;
        if (be->kind[v] != KILN_CUDA_DEVICE || !bytes) continue;
        const kiln_host_buffer *b = out_bufs ? &out_bufs[k] : NULL;
        if (b && b->data && b->bytes >= bytes && is_page_locked(b->data)) c->out_direct[k] = b->data;
        void *dst = c->out_direct[k] ? c->out_direct[k] : c->pin_out + p->out_pin[k];
        const char *src = (const char *)c->arena + (p->out_stage[k] >= 0 ? p->out_stage[k] : p->off[v]);
        KILN_CUDA_TRY(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, c->kc.stream));
    }
    return KILN_OK;
}

/* outputs[k]: the downloaded copy of a device output (caller buffer or pinned staging), or the host copy
 * of a host-evaluated/constant one. */
static void bind_outputs(const kiln_backend_context *c, const kiln_cuda_plan *p, kiln_tensor *outputs) {
    const kiln_backend_engine *be = c->be;
    const kiln_graph *g = be->g;
    for (int k = 0; k < g->noutputs; k++) {
        int v = g->outputs[k];
        const kiln_value *val = &p->vals[v];
        int64_t dims[KILN_MAX_DIMS];
        for (int d = 0; d < val->ndim; d++) dims[d] = val->dims[d].value;
        if (be->kind[v] == KILN_CUDA_DEVICE) {
            void *data = c->out_direct[k] ? c->out_direct[k] : c->pin_out ? c->pin_out + p->out_pin[k] : NULL;
            kiln_tensor_view(&outputs[k], g->values[v].dtype, val->ndim, dims, data);
        } else {
            const kiln_tensor *t = be->kind[v] == KILN_CUDA_HOST ? &p->host[v] : g->values[v].constant;
            kiln_tensor_view(&outputs[k], t->dtype, t->ndim, t->dims, t->data);
        }
    }
}

static double host_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static kiln_status cuda_context_enqueue(kiln_backend_context *c, const kiln_tensor *inputs, const kiln_host_buffer *out_bufs) {
    double t0 = c->timing ? host_ms() : 0;
    KILN_CUDA_TRY(cudaSetDevice(c->be->device));
    kiln_cuda_plan *p;
    KILN_TRY(get_plan(c, inputs, &p));
    KILN_TRY(ensure_capacity(c, p));
    bool transfer = !c->no_transfers || p != c->last_plan;
    c->last_plan = NULL;
    kiln_cuda_timing_stage(c, 0);
    kiln_status s = transfer ? upload_inputs(c, p, inputs) : KILN_OK;
    kiln_cuda_timing_stage(c, 1);
    if (s == KILN_OK) s = kiln_cuda_plan_execute(c, p);
    kiln_cuda_timing_stage(c, 2);
    if (s == KILN_OK && transfer) s = download_outputs(c, p, out_bufs);
    kiln_cuda_timing_stage(c, 3);
    c->pending_enqueue_ms = c->timing ? host_ms() - t0 : 0;
    if (s != KILN_OK) {
        cudaStreamSynchronize(c->kc.stream); /* nothing may stay in flight */
        return s;
    }
    c->pending_plan = p;
    return KILN_OK;
}

static kiln_status cuda_context_wait(kiln_backend_context *c, kiln_tensor *outputs) {
    kiln_cuda_plan *p = c->pending_plan;
    c->pending_plan = NULL;
    if (!p) return kiln_error(KILN_ERR_INTERNAL, "cuda: wait without an enqueued run");
    cudaError_t e = cudaStreamSynchronize(c->kc.stream);
    if (e != cudaSuccess) return kiln_error_prefix(kiln_cuda_error(e, "cudaStreamSynchronize", __FILE__, __LINE__), "running on cuda");
    p->runs++;
    c->last_plan = p;
    bind_outputs(c, p, outputs);
    return c->timing ? kiln_cuda_timing_finish(c, p, c->pending_enqueue_ms) : KILN_OK;
}

static bool cuda_context_query(kiln_backend_context *c) { return cudaStreamQuery(c->kc.stream) != cudaErrorNotReady; }

static kiln_status cuda_context_run(kiln_backend_context *c, const kiln_tensor *inputs, kiln_tensor *outputs) {
    KILN_TRY(cuda_context_enqueue(c, inputs, NULL));
    return cuda_context_wait(c, outputs);
}

/* Page-locked host memory, portable across devices; the setup lock keeps it out of other threads'
 * graph captures. */
static kiln_status cuda_host_alloc(size_t bytes, void **out) {
    int count = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess || count == 0) {
        cudaGetLastError();
        return kiln_error(KILN_ERR_BACKEND, "no CUDA device, so no page-locked memory");
    }
    kiln_cuda_setup_lock();
    e = cudaHostAlloc(out, bytes, cudaHostAllocPortable);
    kiln_cuda_setup_unlock();
    if (e != cudaSuccess) {
        *out = NULL;
        return kiln_cuda_error(e, "cudaHostAlloc", __FILE__, __LINE__);
    }
    return KILN_OK;
}

static void cuda_host_free(void *p) {
    kiln_cuda_setup_lock();
    cudaFreeHost(p);
    kiln_cuda_setup_unlock();
}

static void cuda_context_set_transfers(kiln_backend_context *c, bool enabled) { c->no_transfers = !enabled; }

static void cuda_context_set_graphs(kiln_backend_context *c, bool enabled) { c->use_graphs = enabled; }

static void cuda_context_set_profile(kiln_backend_context *c, int profile) { c->profile = profile > 0 ? profile : 0; }

const kiln_backend kiln_backend_cuda = {
    .name = "cuda",
    .device_name = cuda_device_name,
    .supports_precision = cuda_supports_precision,
    .engine_create = kiln_cuda_engine_create,
    .store_weights = kiln_cuda_store_weights,
    .engine_free = kiln_cuda_engine_free,
    .context_create = cuda_context_create,
    .context_free = cuda_context_free,
    .context_run = cuda_context_run,
    .context_enqueue = cuda_context_enqueue,
    .context_wait = cuda_context_wait,
    .context_query = cuda_context_query,
    .host_alloc = cuda_host_alloc,
    .host_free = cuda_host_free,
    .describe = kiln_cuda_engine_describe,
    .context_set_transfers = cuda_context_set_transfers,
    .context_set_graphs = cuda_context_set_graphs,
    .context_set_profile = cuda_context_set_profile,
    .context_set_timing = kiln_cuda_timing_set,
    .context_last_timing = kiln_cuda_last_timing,
    .tune = kiln_cuda_tune,
    .runs_fused_op = kiln_cuda_runs_fused_op,
    .conv_channels_last = true,
    .matmul_aligned_columns = true,
};
