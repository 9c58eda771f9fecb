/* cuda_engine.c — prepares a graph to run on a GPU: finds the device, decides for every node whether
 * it runs on the device (a CUDA kernel, checked by its `supports`) or on the host (cheap shape
 * arithmetic evaluated with the CPU kernels once per input-shape plan), finds the shape inputs (graph
 * inputs kept on the host: cuda_internal.h), gives every value its device dtype (floats in the engine
 * precision), and uploads the constants that device nodes read, once. */
#include "backends/cuda/cuda_internal.h"

#include "core/half.h"
#include "core/log.h"
#include "core/status.h"
#include "ir/op_schema.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Ops cheap enough to evaluate on the host when their inputs are known there (shape arithmetic). */
static const char *const g_host_ops[] = {
    "Shape", "Size", "Gather", "Concat", "Slice", "Unsqueeze", "Squeeze", "Reshape", "Flatten", "Identity",
    "Cast", "CastLike", "Add", "Sub", "Mul", "Div", "Mod", "Neg", "Abs", "Sign", "Floor", "Ceil", "Sqrt",
    "Reciprocal", "Pow", "Equal", "Less", "LessOrEqual", "Greater", "GreaterOrEqual", "Not", "And", "Or", "Xor",
    "Where", "Max", "Min", "Range", "ConstantOfShape", "Expand", "Tile", "Transpose", "Split", "GatherElements",
    "GatherND", "ReduceProd", "ReduceSum", "ReduceMax", "ReduceMin", "Trilu", "NonZero", "CumSum",
    NULL,
};

static bool domain_is_default(const char *d) { return !d || !d[0] || !strcmp(d, "ai.onnx"); }

static bool is_host_op(const kiln_node *n) {
    if (!domain_is_default(n->domain)) return false;
    for (int i = 0; g_host_ops[i]; i++)
        if (!strcmp(g_host_ops[i], n->op_type)) return true;
    return false;
}

/* Shape and Size read only the shape of their input, which the host always knows. */
static bool reads_only_shape(const kiln_node *n) {
    return domain_is_default(n->domain) && (!strcmp(n->op_type, "Shape") || !strcmp(n->op_type, "Size"));
}

/* Numel of value v when all its dims are static (saturating at INT64_MAX), else -1. */
static int64_t static_numel(const kiln_value *v) {
    if (v->ndim < 0) return -1;
    int64_t n = 1;
    for (int d = 0; d < v->ndim; d++)
        if (v->dims[d].sym != 0) return -1;
    for (int d = 0; d < v->ndim; d++) {
        int64_t x = v->dims[d].value;
        if (x == 0) return 0;
        n = x > 0 && n > INT64_MAX / x ? INT64_MAX : n * x;
    }
    return n;
}

/* ---------------------------------------------------------------- shape inputs */

/* The input slots whose values decide an op's output shape or its kernel's parameters (bit k: input
 * k). A graph input that reaches one of them, directly or through host ops, is a shape input. */
static const struct {
    const char *op;
    unsigned slots;
} g_shape_slots[] = {
    {"Reshape", 1u << 1}, {"Expand", 1u << 1}, {"Tile", 1u << 1}, {"Squeeze", 1u << 1}, {"Unsqueeze", 1u << 1},
    {"Slice", 0xfu << 1}, {"Pad", 1u << 1 | 1u << 3}, {"Split", 1u << 1}, {"TopK", 1u << 1}, {"Trilu", 1u << 1},
    {"Range", 0x7u}, {"ConstantOfShape", 1u}, {"OneHot", 1u << 1}, {"Resize", 0x7u << 1}, {"Upsample", 1u << 1},
    {"CenterCropPad", 1u << 1}, {"CumSum", 1u << 1}, {"NonZero", 1u},
};

static unsigned shape_slots(const kiln_node *n) {
    if (!domain_is_default(n->domain)) return 0;
    if (!strncmp(n->op_type, "Reduce", 6)) return 1u << 1; /* axes (opset 13 for ReduceSum, 18 for the rest) */
    for (size_t i = 0; i < sizeof g_shape_slots / sizeof *g_shape_slots; i++)
        if (!strcmp(n->op_type, g_shape_slots[i].op)) return g_shape_slots[i].slots;
    return 0;
}

/* Makes every small, static graph input that some shape slot reads, directly or through host ops
 * (not Shape/Size, which read only dims), a shape input: kind KILN_CUDA_HOST. */
static kiln_status mark_shape_inputs(kiln_backend_engine *be) {
    const kiln_graph *g = be->g;
    bool *wanted = calloc((size_t)g->nvalues + 1, sizeof *wanted); /* a value whose data shapes something */
    if (!wanted) return kiln_error(KILN_ERR_OUT_OF_MEMORY, "out of memory");
    for (int i = g->nnodes - 1; i >= 0; i--) { /* nodes are in topological order: readers come later */
        const kiln_node *n = &g->nodes[i];
        unsigned slots = shape_slots(n);
        bool feeds = false;
        for (int k = 0; k < n->noutputs; k++) feeds |= n->outputs[k] >= 0 && wanted[n->outputs[k]];
        bool through = feeds && is_host_op(n) && !reads_only_shape(n);
        for (int k = 0; k < n->ninputs; k++)
            if (n->inputs[k] >= 0 && (through || (k < 32 && slots >> k & 1u))) wanted[n->inputs[k]] = true;
    }
    for (int k = 0; k < g->ninputs; k++) {
        int v = g->inputs[k];
        int64_t numel = static_numel(&g->values[v]);
        if (!wanted[v] || numel < 0 || numel > KILN_CUDA_HOST_SMALL) continue;
        be->kind[v] = KILN_CUDA_HOST;
        be->n_shape_inputs++;
        KILN_LOG(KILN_LOG_VERBOSE, "cuda: input '%s' is a shape input: its values stay on the host and join the "
                 "plan key", g->values[v].name);
    }
    free(wanted);
    return KILN_OK;
}

/* ---------------------------------------------------------------- host-known values for supports */

/* The graph whose `supports` checks are running on this thread, and where its values live. */
static _Thread_local const kiln_graph *tl_check_graph;
static _Thread_local const uint8_t *tl_check_kind;

bool kiln_cuda_value_on_host(const kiln_graph *g, int vid) {
    if (!g || vid < 0 || vid >= g->nvalues) return false;
    if (g == tl_check_graph && tl_check_kind) return tl_check_kind[vid] != KILN_CUDA_DEVICE;
    return g->values[vid].constant != NULL;
}

/* Runs kernel k's supports check on node n of cg (the graph with device dtypes). */
static kiln_status check_supports(const kiln_backend_engine *be, const kiln_graph *cg, const kiln_cuda_kernel *k,
                                  const kiln_node *n) {
    if (!k->supports) return KILN_OK;
    tl_check_graph = cg;
    tl_check_kind = be->kind;
    kiln_status s = k->supports(cg, n);
    tl_check_graph = NULL;
    tl_check_kind = NULL;
    return s;
}

/* ---------------------------------------------------------------- dtypes */

static float load_float(const void *p, kiln_dtype t, int64_t i) {
    switch (t) {
    case KILN_F16: return kiln_f16_to_f32(((const uint16_t *)p)[i]);
    case KILN_BF16: return kiln_bf16_to_f32(((const uint16_t *)p)[i]);
    case KILN_F64: return (float)((const double *)p)[i];
    default: return ((const float *)p)[i];
    }
}

/* Converts elements [i0, i1) (see kiln_cuda_host_convert); float32 -> 16-bit, the weights' case, in
 * a loop of its own. */
static void convert_range(const void *src, kiln_dtype st, void *dst, kiln_dtype dt, int64_t i0, int64_t i1) {
    if (st == KILN_F32 && (dt == KILN_F16 || dt == KILN_BF16)) {
        const float *s = src;
        uint16_t *d = dst;
        if (dt == KILN_F16)
            for (int64_t i = i0; i < i1; i++) d[i] = kiln_f32_to_f16(s[i]);
        else
            for (int64_t i = i0; i < i1; i++) d[i] = kiln_f32_to_bf16(s[i]);
        return;
    }
    for (int64_t i = i0; i < i1; i++) {
        float f = load_float(src, st, i);
        switch (dt) {
        case KILN_F16: ((uint16_t *)dst)[i] = kiln_f32_to_f16(f); break;
        case KILN_BF16: ((uint16_t *)dst)[i] = kiln_f32_to_bf16(f); break;
        case KILN_F64: ((double *)dst)[i] = st == KILN_F64 ? ((const double *)src)[i] : (double)f; break;
        default: ((float *)dst)[i] = f; break;
        }
    }
}

/* Elements [i0, i1) of the conversions' concatenation (one thread's share). */
typedef struct convert_job {
    const kiln_cuda_conversion *c;
    int count;
    int64_t i0, i1;
} convert_job;

static void *convert_worker(void *arg) {
    const convert_job *j = arg;
    int64_t at = 0;
    for (int i = 0; i < j->count && at < j->i1; at += j->c[i++].n) {
        const kiln_cuda_conversion *c = &j->c[i];
        int64_t lo = j->i0 > at ? j->i0 - at : 0, hi = j->i1 - at < c->n ? j->i1 - at : c->n;
        if (lo >= hi) continue;
        if (c->st == c->dt) {
            size_t es = kiln_dtype_size(c->st);
            memcpy((char *)c->dst + (size_t)lo * es, (const char *)c->src + (size_t)lo * es, (size_t)(hi - lo) * es);
        } else {
            convert_range(c->src, c->st, c->dst, c->dt, lo, hi);
        }
    }
    return NULL;
}

#define CONVERT_THREADS 16
#define CONVERT_MIN_PER_THREAD ((int64_t)1 << 21)

/* Large conversions (a model's weights: GPT-2 XL has 1.6 G of them) are split over up to
 * CONVERT_THREADS threads, which also read the (often mmap'd, not yet paged-in) source in parallel;
 * a thread that cannot start leaves its share to the caller's thread. */
void kiln_cuda_host_convert_all(const kiln_cuda_conversion *c, int count) {
    int64_t n = 0;
    for (int i = 0; i < count; i++) n += c[i].n;
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    int64_t parts = n / CONVERT_MIN_PER_THREAD;
    if (parts > CONVERT_THREADS) parts = CONVERT_THREADS;
    if (parts > cpus) parts = cpus;
    if (parts < 1) parts = 1;
    convert_job jobs[CONVERT_THREADS];
    pthread_t th[CONVERT_THREADS];
    bool started[CONVERT_THREADS];
    for (int64_t k = 0; k < parts; k++) {
        jobs[k] = (convert_job){c, count, n * k / parts, n * (k + 1) / parts};
        started[k] = k > 0 && pthread_create(&th[k], NULL, convert_worker, &jobs[k]) == 0;
    }
    for (int64_t k = 0; k < parts; k++)
        if (!started[k]) convert_worker(&jobs[k]);
    for (int64_t k = 1; k < parts; k++)
        if (started[k]) pthread_join(th[k], NULL);
}

void kiln_cuda_host_convert(const void *src, kiln_dtype st, void *dst, kiln_dtype dt, int64_t n) {
    kiln_cuda_conversion c = {src, st, dst, dt, n};
    kiln_cuda_host_convert_all(&c, 1);
}

static kiln_dtype precision_dtype(kiln_precision p) {
    return p == KILN_PRECISION_FP16 ? KILN_F16 : p == KILN_PRECISION_BF16 ? KILN_BF16 : KILN_F32;
}

/* Why op keeps FP32 arithmetic when its tensors are 16-bit (the kernels' own choice: see norm.cu,
 * reduce.cu, matmul.cu, conv.cu, pool.cu), or NULL. */
static const char *fp32_accumulation(const kiln_node *n) {
    static const char *const ops[][2] = {
        {"Softmax", "softmax sums"}, {"LogSoftmax", "softmax sums"}, {"Attention", "softmax sums and products"},
        {"LayerNormalization", "normalization statistics"}, {"RMSNormalization", "normalization statistics"},
        {"BatchNormalization", "normalization statistics"}, {"InstanceNormalization", "normalization statistics"},
        {"GroupNormalization", "normalization statistics"}, {"CumSum", "running sums"}, {"MatMul", "dot products"},
        {"Gemm", "dot products"}, {"FusedMatMul", "dot products"}, {"FusedGemm", "dot products"},
        {"Conv", "dot products"}, {"FusedConv", "dot products"}, {"AveragePool", "window sums"},
        {"GlobalAveragePool", "window sums"}, {"LpPool", "window sums"}, {"GlobalLpPool", "window sums"},
    };
    if (!strncmp(n->op_type, "Reduce", 6)) return "large reductions";
    for (size_t i = 0; i < sizeof ops / sizeof *ops; i++)
        if (!strcmp(n->op_type, ops[i][0])) return ops[i][1];
    return NULL;
}

/* Per-node precision (--layer-precision): a float value is stored in the precision of the node that
 * produces it, a float constant in that of its first reader (the builder gave constants read in
 * several precisions one alias each, and put Casts where precisions meet). Logs, per 16-bit device
 * node, that its kernel keeps FP32 accumulation. */
static void apply_node_precisions(kiln_backend_engine *be, const uint8_t *node_precision) {
    const kiln_graph *g = be->g;
    for (int i = 0; i < g->nnodes; i++) {
        const kiln_node *n = &g->nodes[i];
        kiln_precision p = node_precision ? (kiln_precision)node_precision[i] : be->precision;
        kiln_dtype dt = precision_dtype(p);
        for (int k = 0; node_precision && k < n->noutputs; k++) {
            int v = n->outputs[k];
            if (v >= 0 && kiln_cuda_is_float(g->values[v].dtype)) be->dev_dtype[v] = dt;
        }
        for (int k = 0; node_precision && k < n->ninputs; k++) {
            int v = n->inputs[k];
            if (v < 0 || !g->values[v].constant || !kiln_cuda_is_float(g->values[v].dtype) || be->const_typed[v]) continue;
            be->dev_dtype[v] = dt;
            be->const_typed[v] = true;
        }
        const char *why = fp32_accumulation(n);
        if (p != KILN_PRECISION_FP32 && why)
            KILN_LOG(KILN_LOG_VERBOSE, "cuda: node '%s' (%s) stores %s and accumulates in fp32 (%s overflow %s)",
                     n->name, n->op_type, p == KILN_PRECISION_FP16 ? "fp16" : "bf16", why,
                     p == KILN_PRECISION_FP16 ? "fp16" : "lose bits in bf16");
    }
}

/* ---------------------------------------------------------------- the device */

/* The GPU ordinal the engine was built for: "--device N" in its build options, else 0. */
static int meta_device(const kiln_engine_meta *meta) {
    const char *p = strstr(meta->build_options, "--device ");
    return p ? atoi(p + 9) : 0;
}

/* "sm_90" as recorded in a device description "NVIDIA H200 (sm_90, ...)", or "" when absent. */
static void meta_sm(const char *device, char *buf, size_t cap) {
    const char *p = strstr(device, "(sm_");
    size_t n = 0;
    if (p) {
        p++;
        while (p[n] && p[n] != ',' && p[n] != ')') n++;
    }
    snprintf(buf, cap, "%.*s", (int)n, p ? p : "");
}

/* Finds the engine's GPU (meta says which, and for which architecture it was built) and records its
 * ordinal, SM count and compute capability in be. */
static kiln_status open_device(kiln_backend_engine *be, const kiln_engine_meta *meta) {
    int count = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    const char *paren = strstr(meta->device, " (");
    int name_len = paren ? (int)(paren - meta->device) : (int)strlen(meta->device);
    if (e != cudaSuccess || count == 0)
        return kiln_error(KILN_ERR_ENGINE_MISMATCH, "this engine targets cuda (%.*s) but no CUDA device is available: "
                          "cudaGetDeviceCount: %s", name_len, meta->device,
                          e != cudaSuccess ? cudaGetErrorString(e) : "0 devices");
    be->device = meta->run_device_set ? meta->run_device : meta_device(meta);
    if (meta->run_device_set && (be->device < 0 || be->device >= count))
        return kiln_error(KILN_ERR_ENGINE_MISMATCH, "CUDA device %d does not exist: this host has %d CUDA device%s "
                          "(0..%d)", be->device, count, count > 1 ? "s" : "", count - 1);
    if (be->device < 0 || be->device >= count)
        return kiln_error(KILN_ERR_ENGINE_MISMATCH, "this engine targets CUDA device %d (%s) but only %d device%s "
                          "available: rebuild it with --device", be->device, meta->device, count, count > 1 ? "s are" : " is");
    KILN_CUDA_TRY(cudaSetDevice(be->device));
    struct cudaDeviceProp prop;
    KILN_CUDA_TRY(cudaGetDeviceProperties(&prop, be->device));
    be->sm_count = prop.multiProcessorCount;
    be->cc_major = prop.major;
    be->cc_minor = prop.minor;
    char want[32], have[32];
    meta_sm(meta->device, want, sizeof want);
    snprintf(have, sizeof have, "sm_%d%d", prop.major, prop.minor);
    if (want[0] && strcmp(want, have))
        return kiln_error(KILN_ERR_ENGINE_MISMATCH, "this engine was built for %s (%s) but device %d is %s (%s): rebuild "
                          "it on this machine with `kiln build MODEL.onnx --target cuda`", want, meta->device,
                          be->device, have, prop.name);
    if (strncmp(meta->device, prop.name, strlen(prop.name)))
        KILN_LOG(KILN_LOG_WARN, "cuda: engine built on '%s', running on '%s'", meta->device, prop.name);
    return KILN_OK;
}

/* ---------------------------------------------------------------- node placement */

/* Whether node n is evaluated on the host: a shape-arithmetic op with a CPU kernel whose
 * inputs are all known on the host (Shape/Size: any input), and whose outputs are small, or integer
 * or bool, or have no device kernel that accepts them. */
static bool place_on_host(const kiln_backend_engine *be, const kiln_graph *cg, const kiln_node *n) {
    if (!is_host_op(n) || !kiln_cpu_kernel_find(n->domain, n->op_type)) return false;
    bool shape_only = reads_only_shape(n);
    for (int k = 0; k < n->ninputs; k++) {
        int v = n->inputs[k];
        if (v >= 0 && be->kind[v] == KILN_CUDA_DEVICE && !shape_only) return false;
    }
    if (shape_only) return true;
    bool small = true, any_float = false;
    for (int k = 0; k < n->noutputs; k++) {
        const kiln_value *v = kiln_node_output(be->g, n, k);
        if (!v) continue;
        int64_t numel = static_numel(v);
        if (numel < 0 || numel > KILN_CUDA_HOST_SMALL) small = false;
        if (kiln_cuda_is_float(v->dtype)) any_float = true;
    }
    if (small || !any_float) return true;
    const kiln_cuda_kernel *k = kiln_cuda_kernel_find(n->domain, n->op_type);
    return !k || check_supports(be, cg, k, n) != KILN_OK;
}

/* Places every node, and (require_kernels) reports every node the device cannot run in one message. */
static kiln_status place_nodes(kiln_backend_engine *be, const kiln_graph *cg, bool require_kernels) {
    const kiln_graph *g = be->g;
    int bad = 0;
    char list[3072] = "";
    size_t used = 0;
    for (int i = 0; i < g->nnodes; i++) {
        const kiln_node *n = &g->nodes[i];
        char why[512] = "";
        if (place_on_host(be, cg, n)) {
            be->host_exec[i] = kiln_cpu_kernel_find(n->domain, n->op_type)->exec;
            for (int k = 0; k < n->noutputs; k++)
                if (n->outputs[k] >= 0) be->kind[n->outputs[k]] = KILN_CUDA_HOST;
            be->n_host_nodes++;
            KILN_LOG(KILN_LOG_VERBOSE, "cuda: node '%s' (%s) is evaluated on the host (shape arithmetic)", n->name,
                     n->op_type);
            continue;
        }
        const kiln_cuda_kernel *k = kiln_cuda_kernel_find(n->domain, n->op_type);
        if (!k) {
            snprintf(why, sizeof why, "op %s%s%s has no CUDA kernel", n->domain[0] ? n->domain : "",
                     n->domain[0] ? "." : "", n->op_type);
        } else if (check_supports(be, cg, k, n) != KILN_OK) {
            snprintf(why, sizeof why, "%s", kiln_last_error());
        }
        be->kernels[i] = k;
        be->n_device_nodes++;
        if (!why[0] || !require_kernels) continue;
        if (bad < 12 && used < sizeof list)
            used += (size_t)snprintf(list + used, sizeof list - used, "\n  node '%s' (%s): %s", n->name, n->op_type, why);
        bad++;
    }
    if (!bad) return KILN_OK;
    return kiln_error(KILN_ERR_UNSUPPORTED, "the cuda backend cannot run %d node%s:%s%s", bad, bad > 1 ? "s" : "", list,
                      bad > 12 ? "\n  ..." : "");
}

/* needs_device (host/const values that device nodes read), last_step (liveness of device values) and
 * max_args (the longest argument list of any node). */
static void compute_uses(kiln_backend_engine *be) {
    const kiln_graph *g = be->g;
    int end = g->nnodes + 1;
    for (int v = 0; v < g->nvalues; v++) {
        const kiln_value *val = &g->values[v];
        be->last_step[v] = val->is_input ? 0 : val->producer + 1;
        if (val->is_output && be->kind[v] == KILN_CUDA_DEVICE) be->last_step[v] = end;
    }
    for (int i = 0; i < g->nnodes; i++) {
        const kiln_node *n = &g->nodes[i];
        if (n->ninputs > be->max_args) be->max_args = n->ninputs;
        if (n->noutputs > be->max_args) be->max_args = n->noutputs;
        if (be->host_exec[i]) continue;
        for (int k = 0; k < n->ninputs; k++) {
            int v = n->inputs[k];
            if (v < 0) continue;
            if (be->kind[v] != KILN_CUDA_DEVICE) be->needs_device[v] = true;
            else if (be->last_step[v] < i + 1) be->last_step[v] = i + 1;
        }
    }
}

/* ---------------------------------------------------------------- views */

/* Why the output of view node n cannot share its input's device memory, or NULL when it can. */
static const char *view_refusal(const kiln_backend_engine *be, const kiln_node *n) {
    const kiln_graph *g = be->g;
    int x = n->inputs[0], y = n->outputs[0];
    if (g->values[y].is_output) return "its output is a graph output (it is written where the download reads)";
    if (be->kind[x] == KILN_CUDA_HOST) return "its input is computed on the host";
    if (be->kind[x] == KILN_CUDA_DEVICE && g->values[x].producer < 0 && !g->values[x].is_input)
        return "its input has no storage";
    if (be->dev_dtype[x] != be->dev_dtype[y]) return "its input and output have different device dtypes";
    return NULL;
}

/* Lets the output of every device view node share its input's storage (alias[], view_node[]) and
 * extends the liveness of each group's root to the last reader of any member. A chain of views
 * aliases the first input. Without be->share_views (cuda_views OFF) every view copies. */
static void find_views(kiln_backend_engine *be) {
    const kiln_graph *g = be->g;
    for (int v = 0; v < g->nvalues; v++) be->alias[v] = -1;
    if (!be->share_views) {
        KILN_LOG(KILN_LOG_VERBOSE, "cuda: views off: view nodes copy their input");
        return;
    }
    for (int i = 0; i < g->nnodes; i++) {
        const kiln_node *n = &g->nodes[i];
        if (!be->kernels[i] || be->host_exec[i] || !kiln_op_is_view(n->domain, n->op_type) || n->ninputs < 1 || n->noutputs < 1 ||
            n->inputs[0] < 0 || n->outputs[0] < 0)
            continue;
        const char *why = view_refusal(be, n);
        if (why) {
            KILN_LOG(KILN_LOG_VERBOSE, "cuda: node '%s' (%s) copies its input: %s", n->name, n->op_type, why);
            continue;
        }
        int x = n->inputs[0], y = n->outputs[0];
        int root = be->alias[x] >= 0 ? be->alias[x] : x;
        be->alias[y] = root;
        if (be->last_step[root] < be->last_step[y]) be->last_step[root] = be->last_step[y];
        bool more = false; /* Dropout's mask: the node still runs, to fill it (the copy is skipped) */
        for (int k = 1; k < n->noutputs; k++) more |= n->outputs[k] >= 0;
        be->view_node[i] = !more;
        be->n_view_nodes += !more;
    }
}

/* ---------------------------------------------------------------- constants */

/* The weights go to the device through two page-locked buffers of up to UPLOAD_STAGE_BYTES: a piece is
 * converted (or copied) into one while the other's copy runs, at the DMA speed of page-locked memory
 * instead of the driver's pageable path. Where page-locked memory cannot be had, plain buffers do
 * the same work, each copy then waiting for its source. */
#define UPLOAD_STAGE_BYTES ((size_t)32 << 20)

typedef struct upload_stage {
    void *buf[2];
    size_t bytes; /* of each buffer */
    bool pinned;
    cudaEvent_t copied[2]; /* buf[i] may be refilled once copied[i] completed */
    cudaStream_t stream;
    int next;
} upload_stage;

static void stage_close(upload_stage *st) {
    for (int i = 0; i < 2; i++) {
        if (st->buf[i]) st->pinned ? (void)cudaFreeHost(st->buf[i]) : free(st->buf[i]);
        if (st->copied[i]) cudaEventDestroy(st->copied[i]);
    }
    if (st->stream) cudaStreamDestroy(st->stream);
    memset(st, 0, sizeof *st);
}

/* Opens the buffers, of min(UPLOAD_STAGE_BYTES, total) bytes each (a small model's weights are small). */
static kiln_status stage_open(upload_stage *st, size_t total) {
    memset(st, 0, sizeof *st);
    st->bytes = total < UPLOAD_STAGE_BYTES ? total : UPLOAD_STAGE_BYTES;
    void *pinned[2] = {NULL, NULL};
    for (int i = 0; i < 2; i++)
        if (cudaHostAlloc(&pinned[i], st->bytes, cudaHostAllocDefault) != cudaSuccess) pinned[i] = NULL;
    st->pinned = pinned[0] && pinned[1];
    if (st->pinned) {
        st->buf[0] = pinned[0], st->buf[1] = pinned[1];
    } else {
        for (int i = 0; i < 2; i++)
            if (pinned[i]) cudaFreeHost(pinned[i]);
        cudaGetLastError(); /* the failed allocation is not an error of the engine */
        st->buf[0] = malloc(st->bytes);
        st->buf[1] = malloc(st->bytes);
        if (!st->buf[0] || !st->buf[1]) return kiln_error(KILN_ERR_OUT_OF_MEMORY, "out of memory uploading the weights");
    }
    KILN_CUDA_TRY(cudaStreamCreateWithFlags(&st->stream, cudaStreamNonBlocking));
    for (int i = 0; i < 2; i++) KILN_CUDA_TRY(cudaEventCreateWithFlags(&st->copied[i], cudaEventDisableTiming));
    return KILN_OK;
}

/* Queues the copy of n elements of src (dtype sdt) to dev, converted to ddt. */
static kiln_status stage_put(upload_stage *st, void *dev, const void *src, kiln_dtype sdt, kiln_dtype ddt, int64_t n) {
    size_t ses = kiln_dtype_size(sdt), des = kiln_dtype_size(ddt);
    int64_t per = (int64_t)(st->bytes / des);
    for (int64_t i = 0; i < n; i += per) {
        int64_t m = n - i < per ? n - i : per;
        int b = st->next;
        st->next ^= 1;
        KILN_CUDA_TRY(cudaEventSynchronize(st->copied[b]));
        kiln_cuda_host_convert((const char *)src + (size_t)i * ses, sdt, st->buf[b], ddt, m);
        KILN_CUDA_TRY(cudaMemcpyAsync((char *)dev + (size_t)i * des, st->buf[b], (size_t)m * des,
                                      cudaMemcpyHostToDevice, st->stream));
        KILN_CUDA_TRY(cudaEventRecord(st->copied[b], st->stream));
    }
    return KILN_OK;
}

/* Uploads every constant a device node reads (converted to its device dtype) into one allocation. */
static kiln_status upload_constants(kiln_backend_engine *be) {
    const kiln_graph *g = be->g;
    size_t total = 0;
    for (int v = 0; v < g->nvalues; v++) {
        const kiln_tensor *t = g->values[v].constant;
        if (!t || !be->needs_device[v]) continue;
        total += kiln_cuda_align((size_t)kiln_tensor_numel(t) * kiln_dtype_size(be->dev_dtype[v]));
    }
    if (!total) return KILN_OK;
    double t0 = kiln_log_now_ms();
    KILN_CUDA_TRY(cudaMalloc(&be->const_mem, total));
    be->const_bytes = total;
    upload_stage st;
    kiln_status s = stage_open(&st, total);
    size_t off = 0;
    for (int v = 0; v < g->nvalues && s == KILN_OK; v++) {
        const kiln_tensor *t = g->values[v].constant;
        if (!t || !be->needs_device[v]) continue;
        int64_t n = kiln_tensor_numel(t);
        size_t bytes = (size_t)n * kiln_dtype_size(be->dev_dtype[v]);
        if (!bytes) continue;
        be->const_dev[v] = (char *)be->const_mem + off;
        off += kiln_cuda_align(bytes);
        s = stage_put(&st, be->const_dev[v], t->data, t->dtype, be->dev_dtype[v], n);
    }
    /* every copy done before any stream reads the weights (and before the buffers go) */
    cudaError_t e = st.stream ? cudaStreamSynchronize(st.stream) : cudaSuccess;
    if (s == KILN_OK && e != cudaSuccess) s = kiln_cuda_error(e, "cudaStreamSynchronize(weights upload)", __FILE__, __LINE__);
    bool pinned = st.pinned;
    stage_close(&st);
    if (s == KILN_OK)
        KILN_LOG(KILN_LOG_INFO, "cuda: %.2f MB of weights on device %d (uploaded in %.1f ms%s)", (double)total / 1e6,
                 be->device, kiln_log_now_ms() - t0, pinned ? "" : ", from pageable memory");
    return s;
}

/* ---------------------------------------------------------------- engine */

void kiln_cuda_engine_free(kiln_backend_engine *be) {
    if (!be) return;
    if (be->const_mem) {
        cudaSetDevice(be->device);
        cudaFree(be->const_mem);
    }
    free(be->kernels);
    free(be->host_exec);
    free(be->kind);
    free(be->dev_dtype);
    free(be->needs_device);
    free(be->last_step);
    free(be->alias);
    free(be->view_node);
    free(be->const_dev);
    free(be->const_typed);
    free(be->tactic_warned);
    pthread_mutex_destroy(&be->mu);
    free(be);
}

/* When every input shape is static and no input is a shape input: resolves and plans them now (so
 * that a model the device cannot shape fails at build time) and records the planned and naive
 * activation sizes for inspect. */
static kiln_status plan_static_shapes(kiln_backend_engine *be) {
    const kiln_graph *g = be->g;
    kiln_tensor *in = calloc((size_t)g->ninputs + 1, sizeof *in);
    if (!in) return kiln_error(KILN_ERR_OUT_OF_MEMORY, "out of memory");
    be->static_inputs = be->n_shape_inputs == 0; /* shape inputs: their values decide the plan */
    for (int k = 0; k < g->ninputs && be->static_inputs; k++) {
        const kiln_value *v = &g->values[g->inputs[k]];
        in[k].dtype = v->dtype;
        in[k].ndim = v->ndim;
        if (v->ndim < 0) be->static_inputs = false;
        for (int d = 0; d < v->ndim; d++) {
            if (v->dims[d].sym != 0) be->static_inputs = false;
            in[k].dims[d] = v->dims[d].value;
        }
    }
    kiln_status s = KILN_OK;
    if (be->static_inputs) {
        kiln_cuda_plan *p;
        s = kiln_cuda_plan_create(be, in, &p);
        if (s == KILN_OK) {
            be->static_peak = p->arena_bytes;
            be->static_naive = p->naive_bytes;
            be->static_alias = p->alias_bytes;
            kiln_cuda_plan_free(be, p);
        }
    }
    free(in);
    return s;
}

kiln_status kiln_cuda_engine_prepare(const kiln_graph *g, kiln_precision precision, const uint8_t *node_precision,
                                     bool require_kernels, bool share_views, kiln_backend_engine **out) {
    *out = NULL;
    kiln_backend_engine *be = calloc(1, sizeof *be);
    if (!be) return kiln_error(KILN_ERR_OUT_OF_MEMORY, "out of memory");
    pthread_mutex_init(&be->mu, NULL);
    be->g = g;
    be->precision = precision;
    be->float_dtype = precision_dtype(precision);
    be->share_views = share_views;
    size_t nv = (size_t)g->nvalues + 1, nn = (size_t)g->nnodes + 1;
    be->kernels = calloc(nn, sizeof *be->kernels);
    be->host_exec = calloc(nn, sizeof *be->host_exec);
    be->kind = calloc(nv, sizeof *be->kind);
    be->dev_dtype = calloc(nv, sizeof *be->dev_dtype);
    be->needs_device = calloc(nv, sizeof *be->needs_device);
    be->last_step = calloc(nv, sizeof *be->last_step);
    be->const_dev = calloc(nv, sizeof *be->const_dev);
    be->const_typed = calloc(nv, sizeof *be->const_typed);
    be->alias = malloc(nv * sizeof *be->alias);
    be->view_node = calloc(nn, sizeof *be->view_node);
    kiln_value *typed = malloc(nv * sizeof *typed);
    kiln_status s = KILN_OK;
    if (!be->kernels || !be->host_exec || !be->kind || !be->dev_dtype || !be->needs_device || !be->last_step ||
        !be->const_dev || !be->const_typed || !be->alias || !be->view_node || !typed)
        s = kiln_error(KILN_ERR_OUT_OF_MEMORY, "out of memory preparing the engine");
    if (s == KILN_OK) {
        /* the graph as the kernels' supports checks see it: values in their device dtypes */
        memcpy(typed, g->values, (size_t)g->nvalues * sizeof *typed);
        for (int v = 0; v < g->nvalues; v++) {
            be->kind[v] = g->values[v].constant ? KILN_CUDA_CONST : KILN_CUDA_DEVICE;
            be->dev_dtype[v] = kiln_cuda_is_float(g->values[v].dtype) ? be->float_dtype : g->values[v].dtype;
        }
        apply_node_precisions(be, node_precision);
        s = mark_shape_inputs(be);
    }
    if (s == KILN_OK) {
        for (int v = 0; v < g->nvalues; v++) typed[v].dtype = be->dev_dtype[v];
        kiln_graph cg = *g;
        cg.values = typed;
        s = place_nodes(be, &cg, require_kernels);
    }
    free(typed);
    if (s == KILN_OK) {
        compute_uses(be);
        find_views(be);
        s = plan_static_shapes(be);
    }
    if (s != KILN_OK) {
        kiln_cuda_engine_free(be);
        return s;
    }
    *out = be;
    return KILN_OK;
}

kiln_status kiln_cuda_engine_create(const kiln_graph *g, const kiln_engine_meta *meta, const kiln_build_options *opts,
                                    kiln_backend_engine **out) {
    *out = NULL;
    kiln_backend_engine probe = {.device = 0};
    KILN_TRY(open_device(&probe, meta));
    kiln_backend_engine *be;
    KILN_TRY(kiln_cuda_engine_prepare(g, meta->precision, meta->node_precision, true,
                                      opts->cuda_views != KILN_SWITCH_OFF, &be));
    be->workspace_bytes = opts->cuda_workspace_mb > 0 ? (size_t)opts->cuda_workspace_mb << 20 : KILN_CUDA_WORKSPACE_BYTES;
    be->device = probe.device;
    be->sm_count = probe.sm_count;
    be->cc_major = probe.cc_major;
    be->cc_minor = probe.cc_minor;
    be->tactics = meta->tactics;
    be->tactic_sets = kiln_engine_tactic_sets(meta);
    be->tactic_warned = calloc((size_t)g->nnodes + 1, 1);
    kiln_status s = be->tactic_warned ? upload_constants(be) : kiln_error(KILN_ERR_OUT_OF_MEMORY, "out of memory");
    if (s != KILN_OK) {
        kiln_cuda_engine_free(be);
        return s;
    }
    KILN_LOG(KILN_LOG_INFO, "cuda: %d nodes on the device (%d of them views sharing their input's memory, no kernel), "
             "%d shape-arithmetic nodes on the host", be->n_device_nodes, be->n_view_nodes, be->n_host_nodes);
    *out = be;
    return KILN_OK;
}

/* "512 B", "12.5 KB", "3.20 MB", "1.50 GB" */
static const char *human_bytes(size_t n, char *buf, size_t cap) {
    if (n < 1000) snprintf(buf, cap, "%zu B", n);
    else if (n < 1000000) snprintf(buf, cap, "%.1f KB", (double)n / 1e3);
    else if (n < 1000000000) snprintf(buf, cap, "%.2f MB", (double)n / 1e6);
    else snprintf(buf, cap, "%.2f GB", (double)n / 1e9);
    return buf;
}

/* The tactic of every layer that has one (under a line per profile when there are several), or a line
 * saying that the heuristics choose. */
static void describe_tactics(const kiln_backend_engine *be, FILE *f) {
    const kiln_graph *g = be->g;
    int total = be->tactics ? be->tactic_sets * g->nnodes : 0, n = 0;
    for (int i = 0; i < total; i++) n += be->tactics[i].kind != KILN_TACTIC_HEURISTIC;
    if (!n) {
        fprintf(f, "tactics: none recorded (cuBLASLt's and cuDNN's heuristics choose at run time)\n");
        return;
    }
    fprintf(f, "tactics: %d layer%s tuned at build time", n, n > 1 ? "s" : "");
    if (be->tactic_sets > 1) fprintf(f, " over %d profiles, each at its opt shapes", be->tactic_sets);
    fprintf(f, " (the other layers follow the heuristics)\n");
    for (int i = 0; i < total; i++) {
        const kiln_tactic *t = &be->tactics[i];
        if (be->tactic_sets > 1 && i % g->nnodes == 0) fprintf(f, "profile %d:\n", i / g->nnodes);
        if (t->kind == KILN_TACTIC_HEURISTIC) continue;
        char buf[160];
        kiln_cuda_tactic_str(t, buf, sizeof buf);
        fprintf(f, "  %s (%s): %s\n", g->nodes[i % g->nnodes].name, g->nodes[i % g->nnodes].op_type, buf);
    }
}

void kiln_cuda_engine_describe(const kiln_backend_engine *be, FILE *f) {
    static const char *names[] = {"fp32", "fp16", "bf16"};
    fprintf(f, "cuda: device %d (sm_%d%d, %d SMs), %s, %d device nodes, %d host-evaluated shape nodes\n", be->device,
            be->cc_major, be->cc_minor, be->sm_count, names[be->precision <= KILN_PRECISION_BF16 ? be->precision : 0],
            be->n_device_nodes, be->n_host_nodes);
    if (be->n_view_nodes)
        fprintf(f, "views: %d Reshape/Flatten/Squeeze/Unsqueeze/Identity/Dropout node%s share their input's memory "
                "(no kernel)\n", be->n_view_nodes, be->n_view_nodes > 1 ? "s" : "");
    if (be->static_inputs) {
        char a[32], b[32], c[32];
        fprintf(f, "activation memory: %s planned peak vs %s naive sum", human_bytes(be->static_peak, a, sizeof a),
                human_bytes(be->static_naive, b, sizeof b));
        if (be->static_peak) fprintf(f, " (%.1fx less)", (double)be->static_naive / (double)be->static_peak);
        if (be->static_alias) fprintf(f, "; views save %s of it", human_bytes(be->static_alias, c, sizeof c));
        fprintf(f, "\n");
    } else {
        fprintf(f, "activation memory: planned per input shape at run time (the inputs have %s)\n",
                be->n_shape_inputs ? "shape inputs" : "dynamic dims");
    }
    if (be->n_shape_inputs) {
        fprintf(f, "shape inputs (kept on the host; new values make a new plan):");
        for (int k = 0; k < be->g->ninputs; k++)
            if (be->kind[be->g->inputs[k]] == KILN_CUDA_HOST) fprintf(f, " '%s'", be->g->values[be->g->inputs[k]].name);
        fprintf(f, "\n");
    }
    describe_tactics(be, f);
}
