/* cuda_weights.c — a 16-bit engine's weights kept in 16 bits on the host too (the backend's
 * store_weights hook, backend.h): at build time, before the engine is created, every float constant
 * that the device alone reads and keeps in another dtype (fp32 weights of an fp16 or bf16 engine) is
 * converted once (into memory the graph owns), with the conversion the upload would make. The engine then
 * uploads it as it is, and its file stores half the bytes; the value keeps its declared dtype
 * (docs/engine-format.md). Small constants and those a host node or a kernel's host copy may read
 * stay as they are. The converted weights share one anonymous mapping, populated when it is made:
 * gigabytes faulted in page by page cost seconds under some hypervisors (gVisor); they are converted
 * in one pass whose threads share all the weights. */
#include "backends/cuda/cuda_internal.h"

#include "core/log.h"
#include "core/status.h"

#include <stdlib.h>
#include <sys/mman.h>

/* Constants of fewer elements stay in their declared dtype: scalars and small tables (Resize scales,
 * Pad and Clip values) that kernels read from their host copies. */
#define STORE_MIN_ELEMENTS 1024

/* [nvalues] flags: the value is an input of a node that runs on the host. NULL when out of memory. */
static bool *host_read(const kiln_backend_engine *be) {
    const kiln_graph *g = be->g;
    bool *r = calloc((size_t)g->nvalues + 1, sizeof *r);
    if (!r) return NULL;
    for (int i = 0; i < g->nnodes; i++) {
        if (be->kernels[i]) continue;
        for (int k = 0; k < g->nodes[i].ninputs; k++)
            if (g->nodes[i].inputs[k] >= 0) r[g->nodes[i].inputs[k]] = true;
    }
    return r;
}

/* Whether constant v is converted: read by the device alone, large enough, a float value the device
 * keeps in another dtype, not a graph output. */
static bool converts(const kiln_backend_engine *be, const bool *on_host, int v) {
    const kiln_value *val = &be->g->values[v];
    const kiln_tensor *t = val->constant;
    return t && be->needs_device[v] && !on_host[v] && !val->is_output && t->dtype == val->dtype &&
           kiln_cuda_is_float(t->dtype) && be->dev_dtype[v] != t->dtype && kiln_tensor_numel(t) >= STORE_MIN_ELEMENTS;
}

/* The mapping that holds the converted weights, released with the graph. */
typedef struct weight_block {
    void *p;
    size_t bytes;
} weight_block;

static void weight_block_release(void *ptr) {
    weight_block *b = ptr;
    munmap(b->p, b->bytes);
    free(b);
}

/* A populated anonymous mapping of bytes (> 0) that g keeps alive; NULL when out of memory. */
static void *weight_block_new(kiln_graph *g, size_t bytes) {
    weight_block *b = malloc(sizeof *b);
    if (!b) return NULL;
    b->bytes = bytes;
    b->p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
    if (b->p == MAP_FAILED) {
        free(b);
        return NULL;
    }
    if (kiln_graph_keep_alive(g, b, weight_block_release) != KILN_OK) {
        weight_block_release(b);
        return NULL;
    }
    return b->p;
}

kiln_status kiln_cuda_store_weights(kiln_graph *g, const kiln_engine_meta *meta, const kiln_build_options *opts) {
    if (meta->precision == KILN_PRECISION_FP32 && !meta->node_precision) return KILN_OK;
    kiln_backend_engine *be = NULL;
    KILN_TRY(kiln_cuda_engine_prepare(g, meta->precision, meta->node_precision, false,
                                      opts->cuda_views != KILN_SWITCH_OFF, &be));
    bool *on_host = host_read(be);
    kiln_cuda_conversion *conv = malloc(((size_t)g->nvalues + 1) * sizeof *conv);
    kiln_status s = on_host && conv ? KILN_OK : kiln_error(KILN_ERR_OUT_OF_MEMORY, "out of memory storing the weights");
    int nconv = 0;
    size_t before = 0, after = 0;
    for (int v = 0; s == KILN_OK && v < g->nvalues; v++)
        if (converts(be, on_host, v))
            after += kiln_cuda_align((size_t)kiln_tensor_numel(g->values[v].constant) * kiln_dtype_size(be->dev_dtype[v]));
    char *block = s == KILN_OK && after ? weight_block_new(g, after) : NULL;
    if (after && !block && s == KILN_OK)
        s = kiln_error(KILN_ERR_OUT_OF_MEMORY, "out of memory for %zu bytes of 16-bit weights", after);
    size_t off = 0;
    for (int v = 0; v < g->nvalues && block; v++) {
        if (!converts(be, on_host, v)) continue;
        const kiln_tensor *t = g->values[v].constant;
        conv[nconv++] = (kiln_cuda_conversion){t->data, t->dtype, block + off, be->dev_dtype[v], kiln_tensor_numel(t)};
        off += kiln_cuda_align((size_t)kiln_tensor_numel(t) * kiln_dtype_size(be->dev_dtype[v]));
    }
    if (nconv) kiln_cuda_host_convert_all(conv, nconv); /* every weight in one pass over the threads */
    for (int v = 0, i = 0; i < nconv; v++) {
        if (!converts(be, on_host, v)) continue;
        kiln_tensor *t = g->values[v].constant;
        before += t->nbytes;
        kiln_tensor converted;
        kiln_tensor_view(&converted, conv[i].dt, t->ndim, t->dims, conv[i].dst);
        kiln_tensor_release(t);
        *t = converted;
        i++;
    }
    free(conv);
    free(on_host);
    kiln_cuda_engine_free(be);
    if (s == KILN_OK && before)
        KILN_LOG(KILN_LOG_VERBOSE, "cuda: weights stored in the engine's precision: %.2f MB -> %.2f MB", before / 1e6,
                 after / 1e6);
    return s;
}
