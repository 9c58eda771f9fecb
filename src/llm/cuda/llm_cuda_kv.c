/* llm_cuda_kv.c — the paged KV cache in device memory: one allocation laid out like kv_cache.c,
 * [layer][keys | values][block][n_kv_head][block_size][head_dim] in the model dtype (or FP8 E4M3,
 * with its [layer][keys | values][n_kv_head] scales in a second allocation), sized from a
 * memory budget (a fraction of the device's free memory, capped), and the same host-side block
 * allocator (a stack of free ids, lowest first, and a flag per block that catches a double release).
 * The allocation and its free hold the setup lock (cuda_device.h). */
#include "llm/cuda/llm_cuda_internal.h"

#include "core/status.h"

#include <math.h>
#include <stdlib.h>

kiln_status kiln_llm_cuda_kv_create(kiln_llm_cuda *g, const kiln_llm_cuda_kv_options *o, kiln_llm_cuda_kv **out) {
    *out = NULL;
    const kiln_llm_config *c = &g->cfg;
    if (o->block_size < 1 || !(o->mem_fraction > 0 && o->mem_fraction <= 1))
        return kiln_error(KILN_ERR_INVALID_ARGUMENT, "cuda KV cache: block_size %d, mem_fraction %g (positive; 0 < f <= 1)",
                          o->block_size, o->mem_fraction);
    KILN_CUDA_TRY(cudaSetDevice(g->opt.device));
    size_t free_b = 0, total_b = 0;
    KILN_CUDA_TRY(cudaMemGetInfo(&free_b, &total_b));
    uint64_t budget = (uint64_t)((double)free_b * o->mem_fraction);
    if (o->max_bytes && budget > o->max_bytes) budget = o->max_bytes;
    const size_t block_elems = (size_t)c->n_kv_head * o->block_size * c->head_dim, elem = o->fp8 ? 1 : 2;
    const uint64_t per_block = (uint64_t)block_elems * elem * 2 * (uint64_t)c->n_layer; /* keys + values */
    const size_t n_scales = (size_t)c->n_layer * 2 * (size_t)c->n_kv_head;
    for (size_t i = 0; o->fp8 && o->fp8_scales && i < n_scales; i++)
        if (!(o->fp8_scales[i] > 0.0f && o->fp8_scales[i] < INFINITY))
            return kiln_error(KILN_ERR_INVALID_ARGUMENT, "cuda KV cache: FP8 scale %zu is %g (scales must be positive "
                              "and finite)", i, (double)o->fp8_scales[i]);
    const uint64_t n = budget / per_block;
    if (n < 1)
        return kiln_error(KILN_ERR_OUT_OF_MEMORY, "cuda KV cache: a budget of %llu bytes holds no block of %llu bytes "
                          "(%zu bytes free on the device)", (unsigned long long)budget, (unsigned long long)per_block, free_b);
    kiln_llm_cuda_kv *kv = calloc(1, sizeof *kv);
    if (!kv) return kiln_error(KILN_ERR_OUT_OF_MEMORY, "out of memory");
    kv->device = g->opt.device;
    kv->dtype = g->dtype;
    kv->n_layer = c->n_layer;
    kv->n_kv_head = c->n_kv_head;
    kv->head_dim = c->head_dim;
    kv->block_size = o->block_size;
    kv->n_blocks = n > INT32_MAX ? INT32_MAX : (int)n;
    kv->block_elems = block_elems;
    kv->elem_bytes = elem;
    kv->free_stack = malloc((size_t)kv->n_blocks * sizeof *kv->free_stack);
    kv->taken = calloc((size_t)kv->n_blocks, sizeof *kv->taken);
    kiln_cuda_setup_lock();
    cudaError_t e = kv->free_stack && kv->taken ? cudaMalloc(&kv->data, (size_t)per_block * (size_t)kv->n_blocks)
                                                : cudaErrorMemoryAllocation;
    if (e == cudaSuccess && o->fp8) e = cudaMalloc((void **)&kv->scales, n_scales * sizeof(float));
    kiln_cuda_setup_unlock();
    float *host = e == cudaSuccess && o->fp8 ? malloc(n_scales * sizeof *host) : NULL;
    if (e == cudaSuccess && o->fp8 && !host) e = cudaErrorMemoryAllocation;
    for (size_t i = 0; host && i < n_scales; i++) host[i] = o->fp8_scales ? o->fp8_scales[i] : 1.0f;
    if (host) e = cudaMemcpy(kv->scales, host, n_scales * sizeof(float), cudaMemcpyHostToDevice);
    free(host);
    if (e != cudaSuccess) {
        kiln_status s = kv->free_stack && kv->taken ? kiln_cuda_error(e, "cudaMalloc(KV cache)", __FILE__, __LINE__)
                                                    : kiln_error(KILN_ERR_OUT_OF_MEMORY, "out of memory");
        kiln_llm_cuda_kv_free(kv);
        return s;
    }
    for (int i = 0; i < kv->n_blocks; i++) kv->free_stack[i] = kv->n_blocks - 1 - i;
    kv->n_free = kv->n_blocks;
    *out = kv;
    return KILN_OK;
}

void kiln_llm_cuda_kv_free(kiln_llm_cuda_kv *kv) {
    if (!kv) return;
    if (kv->data) {
        kiln_cuda_setup_lock();
        cudaSetDevice(kv->device);
        cudaFree(kv->data);
        cudaFree(kv->scales);
        kiln_cuda_setup_unlock();
    }
    free(kv->free_stack);
    free(kv->taken);
    free(kv);
}

int kiln_llm_cuda_kv_blocks(const kiln_llm_cuda_kv *kv) { return kv->n_blocks; }
int kiln_llm_cuda_kv_block_size(const kiln_llm_cuda_kv *kv) { return kv->block_size; }

int kiln_llm_cuda_kv_alloc_block(kiln_llm_cuda_kv *kv) {
    if (!kv->n_free) return -1;
    int b = kv->free_stack[--kv->n_free];
    kv->taken[b] = true;
    return b;
}

void kiln_llm_cuda_kv_release_block(kiln_llm_cuda_kv *kv, int block) {
    KILN_ASSERT(block >= 0 && block < kv->n_blocks && kv->taken[block]);
    kv->taken[block] = false;
    kv->free_stack[kv->n_free++] = block;
}

int kiln_llm_cuda_kv_free_blocks(const kiln_llm_cuda_kv *kv) { return kv->n_free; }

bool kiln_llm_cuda_kv_block_taken(const kiln_llm_cuda_kv *kv, int block) {
    return block >= 0 && block < kv->n_blocks && kv->taken[block];
}

void llmc_kv_layer(const kiln_llm_cuda_kv *kv, int layer, void **k, void **v) {
    const size_t per = kv->block_elems * (size_t)kv->n_blocks * kv->elem_bytes; /* bytes of one layer's keys */
    char *base = (char *)kv->data + (size_t)layer * 2 * per;
    *k = base;
    *v = base + per;
}

const float *llmc_kv_layer_scales(const kiln_llm_cuda_kv *kv, int layer) {
    return kv->scales ? kv->scales + (size_t)layer * 2 * (size_t)kv->n_kv_head : NULL;
}
