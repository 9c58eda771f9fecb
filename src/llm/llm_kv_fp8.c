/* llm_kv_fp8.c — FP8 KV-cache scales (llm_kv_fp8.h): windows of the calibration text through the CPU
 * forward over an FP32 cache of the window's blocks, then every written key and value row of the
 * cache scanned for its head's largest magnitude. */
#include "llm/llm_kv_fp8.h"

#include "core/file.h"
#include "core/log.h"
#include "core/status.h"
#include "llm/kv_cache.h"
#include "llm/llm_engine.h"
#include "quant/fp8.h"

#include <math.h>
#include <stdlib.h>

#define CALIB_BLOCK 16
#define CALIB_CTX 1024 /* tokens per window of a calibration text */

/* amax[l][0|1][g] = max(amax, |the first n positions' keys (values)|) of blocks[]. */
static void scan_cache(kiln_kv_cache *kv, const int32_t *blocks, int n, float *amax) {
    const kiln_kv_cache_config *c = kiln_kv_cache_get_config(kv);
    const int hd = c->head_dim, bs = c->block_size;
    for (int l = 0; l < c->n_layer; l++)
        for (int kvi = 0; kvi < 2; kvi++)
            for (int g = 0; g < c->n_kv_head; g++) {
                float *a = amax + ((size_t)l * 2 + kvi) * c->n_kv_head + g;
                for (int p = 0; p < n; p++) {
                    const int block = blocks[p / bs];
                    const float *base = kvi ? kiln_kv_cache_values(kv, l, block) : kiln_kv_cache_keys(kv, l, block);
                    const float *row = base + ((size_t)g * bs + p % bs) * hd;
                    for (int e = 0; e < hd; e++) *a = fabsf(row[e]) > *a ? fabsf(row[e]) : *a;
                }
            }
}

kiln_status kiln_llm_kv_calibrate(const kiln_llm_model *m, const int32_t *ids, int64_t n, int ctx, float *scales) {
    const kiln_llm_config *c = kiln_llm_model_config(m);
    if (n < 1 || ctx < 1 || ctx > c->max_pos)
        return kiln_error(KILN_ERR_INVALID_ARGUMENT, "KV calibration: %lld tokens in windows of %d (need at least one "
                          "token and a window within the model's %d positions)", (long long)n, ctx, c->max_pos);
    const int n_blocks = (ctx + CALIB_BLOCK - 1) / CALIB_BLOCK;
    const size_t n_scales = KILN_LLM_KV_SCALES(c);
    kiln_kv_cache_config kc = {.n_layer = c->n_layer, .n_kv_head = c->n_kv_head, .head_dim = c->head_dim,
                               .block_size = CALIB_BLOCK, .n_blocks = n_blocks, .dtype = KILN_F32};
    kiln_kv_cache *kv = NULL;
    KILN_TRY(kiln_kv_cache_create(&kc, &kv));
    int32_t *blocks = malloc((size_t)n_blocks * sizeof *blocks), *positions = malloc((size_t)ctx * sizeof *positions);
    float *logits = malloc((size_t)c->vocab * sizeof *logits), *amax = calloc(n_scales, sizeof *amax);
    kiln_status st = blocks && positions && logits && amax ? KILN_OK
                                                           : kiln_error(KILN_ERR_OUT_OF_MEMORY, "KV calibration: out of memory");
    for (int b = 0; st == KILN_OK && b < n_blocks; b++) blocks[b] = kiln_kv_cache_alloc_block(kv);
    for (int p = 0; p < ctx; p++) positions[p] = p;
    for (int64_t w0 = 0; st == KILN_OK && w0 < n; w0 += ctx) {
        const int len = n - w0 < ctx ? (int)(n - w0) : ctx;
        const int32_t seq_start[2] = {0, len}, ctx_len = len;
        const kiln_llm_batch b = {.n_tokens = len, .tokens = ids + w0, .positions = positions, .n_seqs = 1,
                                  .seq_start = seq_start, .ctx_len = &ctx_len, .block_table = blocks,
                                  .max_blocks_per_seq = n_blocks};
        st = kiln_llm_forward(m, kv, &b, logits);
        if (st == KILN_OK) scan_cache(kv, blocks, len, amax);
    }
    for (size_t i = 0; st == KILN_OK && i < n_scales; i++) scales[i] = amax[i] > 0 ? amax[i] / KILN_E4M3_MAX : 1.0f;
    free(blocks);
    free(positions);
    free(logits);
    free(amax);
    kiln_kv_cache_free(kv);
    return st;
}

kiln_status kiln_llm_kv_fp8_scales(const kiln_llm_model *m, const kiln_tokenizer *tok, const char *calib_path,
                                   float **scales) {
    *scales = NULL;
    if (!calib_path) {
        KILN_LOG(KILN_LOG_WARN, "FP8 KV cache without a calibration text: every key and value scale is 1.0 (values past "
                 "+-448 saturate); give one (--calib-text FILE) for scales from the model's own keys and values");
        return KILN_OK;
    }
    if (!tok) return kiln_error(KILN_ERR_INVALID_ARGUMENT, "KV calibration: the model has no tokenizer to read %s with",
                                calib_path);
    const kiln_llm_config *c = kiln_llm_model_config(m);
    kiln_file_map text;
    KILN_TRY(kiln_file_map_open(calib_path, &text));
    int32_t *ids = NULL;
    size_t n = 0;
    kiln_status st = kiln_tokenizer_encode(tok, (const char *)text.data, text.size, false, &ids, &n);
    kiln_file_unmap(&text);
    if (st == KILN_OK && n == 0) st = kiln_error(KILN_ERR_INVALID_ARGUMENT, "KV calibration: %s has no text", calib_path);
    float *s = st == KILN_OK ? malloc(KILN_LLM_KV_SCALES(c) * sizeof *s) : NULL;
    if (st == KILN_OK && !s) st = kiln_error(KILN_ERR_OUT_OF_MEMORY, "KV calibration: out of memory");
    if (st == KILN_OK) st = kiln_llm_kv_calibrate(m, ids, (int64_t)n, c->max_pos < CALIB_CTX ? c->max_pos : CALIB_CTX, s);
    free(ids);
    if (st != KILN_OK) {
        free(s);
        return st;
    }
    *scales = s;
    return KILN_OK;
}

kiln_status kiln_llm_kv_fp8_scales_at(const char *path, const char *calib_path, float **scales) {
    *scales = NULL;
    if (!calib_path) return kiln_llm_kv_fp8_scales(NULL, NULL, NULL, scales);
    kiln_llm_bundle b = {0};
    KILN_TRY(kiln_llm_bundle_open(path, true, false, &b));
    kiln_status st = kiln_llm_kv_fp8_scales(b.model, b.tok, calib_path, scales);
    kiln_llm_bundle_free(&b);
    return st;
}
