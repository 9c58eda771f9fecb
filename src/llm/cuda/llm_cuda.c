/* llm_cuda.c — creating and freeing a kiln_llm_cuda: checks that the kernels take the model's shape,
 * lays out the weights in one device allocation (uploaded from a kiln_llm_model through two pinned
 * chunks — a deferred model's mapped checkpoint bytes as they are when the dtype matches, else
 * converted on the host; an INT8 or FP8 matrix as its int8 values or E4M3 codes and fp32 row scales, an
 * INT4 one as packed values with group scales and zero points, a W8A8 one with its activation scale kept
 * beside the layer — or filled with
 * random values on the device) and the step buffers in
 * another, and opens its stream, cuBLASLt handle and workspace (cuda_device.h) and the pinned metadata
 * staging. Allocations and frees hold the setup lock (cuda_device.h); the weights' upload does not. */
#include "llm/cuda/llm_cuda_internal.h"

#include "core/status.h"
#include "llm/cuda/llm_cuda_w8a8.h"
#include "llm/llm_deferred.h"
#include "llm/llm_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

void kiln_llm_cuda_options_default(kiln_llm_cuda_options *o) {
    o->device = 0;
    o->max_tokens = 2048;
    o->max_seqs = 256;
    o->max_context = 4096;
    o->gemv_max_tokens = LLMC_GEMV_MAX;
    o->use_graphs = true;
    o->gemm_autotune = true;
    o->timing_cache = NULL;
    o->probe = NULL;
    o->random_int8 = false;
    o->random_w8a8 = false;
    o->random_int4 = false;
    o->random_fp8 = false;
}

kiln_status kiln_llm_cuda_device_check(int device, char *desc, size_t cap) {
    int count = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess || count == 0) {
        if (cap) snprintf(desc, cap, "no CUDA device (cudaGetDeviceCount: %s)", e != cudaSuccess ? cudaGetErrorString(e) : "0 devices");
        return kiln_error(KILN_ERR_BACKEND, "%s", cap ? desc : "no CUDA device");
    }
    if (device < 0 || device >= count) {
        if (cap) snprintf(desc, cap, "there is no CUDA device %d (this machine has %d)", device, count);
        return kiln_error(KILN_ERR_INVALID_ARGUMENT, "there is no CUDA device %d (this machine has %d)", device, count);
    }
    struct cudaDeviceProp p;
    KILN_CUDA_TRY(cudaGetDeviceProperties(&p, device));
    if (cap)
        snprintf(desc, cap, "%s (sm_%d%d, %d SMs, %zu GiB)", p.name, p.major, p.minor, p.multiProcessorCount,
                 p.totalGlobalMem >> 30);
    return KILN_OK;
}

/* ---------------------------------------------------------------- checks */

static kiln_status check_shape(const kiln_llm_config *c, kiln_dtype dtype, const kiln_llm_cuda_options *o) {
    if (dtype != KILN_F16 && dtype != KILN_BF16)
        return kiln_error(KILN_ERR_INVALID_ARGUMENT, "llm cuda: dtype %s (float16 or bfloat16 only)", kiln_dtype_name(dtype));
    if (c->arch != KILN_LLM_GPT2 && c->arch != KILN_LLM_LLAMA)
        return kiln_error(KILN_ERR_INVALID_ARGUMENT, "llm cuda: unknown architecture %d", (int)c->arch);
    if (c->n_layer < 1 || c->d_model < 1 || c->n_head < 1 || c->n_kv_head < 1 || c->d_ff < 1 || c->vocab < 1 ||
        c->n_head % c->n_kv_head)
        return kiln_error(KILN_ERR_INVALID_ARGUMENT, "llm cuda: invalid config (n_layer %d, d_model %d, n_head %d, "
                          "n_kv_head %d, d_ff %d, vocab %d)", c->n_layer, c->d_model, c->n_head, c->n_kv_head, c->d_ff,
                          c->vocab);
    if (c->head_dim < 8 || c->head_dim > LLMC_MAX_HEAD_DIM || c->head_dim % 8)
        return kiln_error(KILN_ERR_UNSUPPORTED, "llm cuda: head_dim %d (the attention kernels take multiples of 8 up "
                          "to %d)", c->head_dim, LLMC_MAX_HEAD_DIM);
    if (c->d_model > LLMC_MAX_D)
        return kiln_error(KILN_ERR_UNSUPPORTED, "llm cuda: d_model %d (at most %d)", c->d_model, LLMC_MAX_D);
    if (o->max_tokens < 1 || o->max_seqs < 1 || o->max_context < 1 || o->gemv_max_tokens < 0 ||
        o->gemv_max_tokens > LLMC_GEMV_MAX)
        return kiln_error(KILN_ERR_INVALID_ARGUMENT, "llm cuda: options max_tokens %d, max_seqs %d, max_context %d, "
                          "gemv_max_tokens %d (positive; gemv_max_tokens 0..%d)", o->max_tokens, o->max_seqs,
                          o->max_context, o->gemv_max_tokens, LLMC_GEMV_MAX);
    return KILN_OK;
}

/* ---------------------------------------------------------------- layout */

/* Hands out LLMC_ALIGN-aligned pieces of one allocation; with base NULL it only counts (first pass). */
typedef struct carver {
    char *base;
    size_t off;
} carver;

static void *carve(carver *c, size_t bytes) {
    void *p = c->base ? c->base + c->off : NULL;
    c->off += (bytes + LLMC_ALIGN - 1) / LLMC_ALIGN * LLMC_ALIGN;
    return p;
}

/* Whether g's weights (m's, or random ones when m is NULL) have quantized matrices (INT8, W8A8, INT4 or
 * FP8). */
static bool has_int8(const kiln_llm_cuda *g, const kiln_llm_model *m) {
    return m ? m->q8 || m->q8_tok_emb.q || m->q8_lm_head.q
             : g->opt.random_int8 || g->opt.random_w8a8 || g->opt.random_int4 || g->opt.random_fp8;
}

/* Whether those quantized matrices are FP8 (E4M3 codes, one byte each as INT8's values). */
static bool has_fp8(const kiln_llm_cuda *g, const kiln_llm_model *m) {
    if (!m) return g->opt.random_fp8;
    return (m->q8 && m->cfg.n_layer > 0 && m->q8[0].qkv.fp8) || m->q8_tok_emb.fp8 || m->q8_lm_head.fp8;
}

/* Whether matrix q of m (NULL: random weights) goes to the device quantized (one byte a value). */
static bool int8_mat(const kiln_llm_cuda *g, const kiln_llm_model *m, const kiln_llm_q8 *q) {
    return m ? q && q->q : g->opt.random_int8 || g->opt.random_w8a8 || g->opt.random_int4 || g->opt.random_fp8;
}

/* The W8A8 activation scale of layer matrix q of m (NULL: random weights); 0 when it is not W8A8 (an FP8
 * matrix's static scale is llm_cuda_fp8.cu's). */
static float act_scale(const kiln_llm_cuda *g, const kiln_llm_model *m, const kiln_llm_q8 *q) {
    return m ? (q && !q->fp8 ? q->act_scale : 0.0f) : g->opt.random_w8a8 ? LLMC_RANDOM_ACT_SCALE : 0.0f;
}

/* Bytes of a quantized [rows, cols] matrix's values and of its scales (INT4: scales and zero points). */
static size_t quant_bytes(const kiln_llm_cuda *g, size_t rows, size_t cols, size_t *scale_bytes) {
    const size_t groups = (cols + 127) / 128;
    *scale_bytes = g->int4 ? rows * groups * 8 : rows * 4;
    return g->int4 ? rows * groups * 64 : rows * cols;
}

/* Places a [rows, cols] matrix: quantized values and their scales into *scale when int8 (int8 values
 * and fp32 row scales; with g->int4 packed INT4 values and fp32 group scales and zero points), else
 * 16-bit values (*scale NULL). */
static void *carve_mat(const kiln_llm_cuda *g, carver *cv, size_t rows, size_t cols, bool int8, float **scale) {
    if (!int8) {
        *scale = NULL;
        return carve(cv, rows * cols * 2);
    }
    size_t scale_bytes;
    void *p = carve(cv, quant_bytes(g, rows, cols, &scale_bytes));
    *scale = carve(cv, scale_bytes);
    return p;
}

/* Places every weight (pointers NULL while counting); m's INT8 matrices stay int8. */
static void layout_weights(kiln_llm_cuda *g, const kiln_llm_model *m, carver *cv) {
    const kiln_llm_config *c = &g->cfg;
    const size_t es = 2, d = (size_t)c->d_model, ff = (size_t)c->d_ff, qd = (size_t)c->n_head * c->head_dim,
                 kvd = (size_t)c->n_kv_head * c->head_dim, qkv = qd + 2 * kvd;
    const bool gpt2 = c->arch == KILN_LLM_GPT2;
    const size_t up = gpt2 ? ff : 2 * ff;
    g->tok_emb = carve_mat(g, cv, (size_t)c->vocab, d, int8_mat(g, m, m ? &m->q8_tok_emb : NULL), &g->tok_emb_s);
    g->pos_emb = gpt2 ? carve(cv, (size_t)c->max_pos * d * es) : NULL;
    g->lm_head = g->tok_emb;
    g->lm_head_s = g->tok_emb_s;
    if (!c->tied_embeddings)
        g->lm_head = carve_mat(g, cv, (size_t)c->vocab, d, int8_mat(g, m, m ? &m->q8_lm_head : NULL), &g->lm_head_s);
    g->norm_f_w = carve(cv, d * 4);
    g->norm_f_b = gpt2 ? carve(cv, d * 4) : NULL;
    for (int l = 0; l < c->n_layer; l++) {
        llmc_layer *y = &g->layers[l];
        y->norm1_w = carve(cv, d * 4);
        y->norm2_w = carve(cv, d * 4);
        const kiln_llm_q8_layer *q = m && m->q8 ? &m->q8[l] : NULL;
        y->qkv_w = carve_mat(g, cv, qkv, d, int8_mat(g, m, q ? &q->qkv : NULL), &y->qkv_s);
        y->o_w = carve_mat(g, cv, d, qd, int8_mat(g, m, q ? &q->o : NULL), &y->o_s);
        y->up_w = carve_mat(g, cv, up, d, int8_mat(g, m, q ? &q->up : NULL), &y->up_s);
        y->down_w = carve_mat(g, cv, d, ff, int8_mat(g, m, q ? &q->down : NULL), &y->down_s);
        y->qkv_a = act_scale(g, m, q ? &q->qkv : NULL);
        y->o_a = act_scale(g, m, q ? &q->o : NULL);
        y->up_a = act_scale(g, m, q ? &q->up : NULL);
        y->down_a = act_scale(g, m, q ? &q->down : NULL);
        if (c->qkv_bias) y->qkv_b = carve(cv, qkv * es);
        if (!gpt2) continue;
        y->norm1_b = carve(cv, d * 4);
        y->norm2_b = carve(cv, d * 4);
        y->qkv_b = carve(cv, qkv * es);
        y->o_b = carve(cv, d * es);
        y->up_b = carve(cv, ff * es);
        y->down_b = carve(cv, d * es);
    }
}

/* Places the step buffers (with int8, the dequantizing workspace too; FP8 has its own, llm_cuda_fp8.cu). */
static void layout_acts(kiln_llm_cuda *g, bool int8, carver *cv) {
    const kiln_llm_config *c = &g->cfg;
    const size_t es = 2, n = (size_t)g->opt.max_tokens, d = (size_t)c->d_model, qd = (size_t)c->n_head * c->head_dim,
                 qkv = qd + 2 * (size_t)c->n_kv_head * c->head_dim;
    const size_t mlp = (size_t)c->d_ff * (c->arch == KILN_LLM_LLAMA ? 2 : 1);
    g->x = carve(cv, n * d * 4);
    g->h = carve(cv, n * d * es);
    g->qkv = carve(cv, n * qkv * es);
    g->att = carve(cv, n * qd * es);
    g->proj = carve(cv, n * d * es);
    g->mlp = carve(cv, n * mlp * es);
    g->logits = carve(cv, n * (size_t)c->vocab * 4);
    g->ids = carve(cv, n * 4);
    g->part = carve(cv, (size_t)g->opt.max_seqs * c->n_head * g->split_cap * (c->head_dim + 2) * 4);
    g->att_count = carve(cv, (size_t)g->opt.max_seqs * llmc_decode_counters(c->n_head, c->n_kv_head) * sizeof(unsigned));
    g->deq = int8 ? carve(cv, LLMC_DEQUANT_BYTES) : NULL;
}

/* ---------------------------------------------------------------- weights */

#define STAGING_VALUES (32u << 20) /* 16-bit values per pinned chunk (64 MiB) */

/* Two pinned chunks the 16-bit weights pass through: one is filled from the model while the other's
 * copy to the device runs. */
typedef struct staging {
    const kiln_llm_model *m;
    int threads; /* that fill a chunk */
    uint16_t *chunk[2];
    cudaEvent_t copied[2]; /* chunk i's last copy has finished */
    int next;
} staging;

static kiln_status staging_create_locked(staging *st) {
    for (int i = 0; i < 2; i++) {
        KILN_CUDA_TRY(cudaMallocHost((void **)&st->chunk[i], STAGING_VALUES * sizeof(uint16_t)));
        KILN_CUDA_TRY(cudaEventCreateWithFlags(&st->copied[i], cudaEventDisableTiming));
    }
    return KILN_OK;
}

/* The chunks are pinned under the setup lock (the upload itself runs without it). */
static kiln_status staging_create(const kiln_llm_model *m, staging *st) {
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    *st = (staging){.m = m, .threads = cpus > 8 ? 8 : cpus > 1 ? (int)cpus : 1};
    kiln_cuda_setup_lock();
    const kiln_status s = staging_create_locked(st);
    kiln_cuda_setup_unlock();
    return s;
}

static void staging_free(staging *st) {
    kiln_cuda_setup_lock();
    for (int i = 0; i < 2; i++) {
        if (st->copied[i]) {
            cudaEventSynchronize(st->copied[i]);
            cudaEventDestroy(st->copied[i]);
        }
        if (st->chunk[i]) cudaFreeHost(st->chunk[i]);
    }
    kiln_cuda_setup_unlock();
}

/* n values of the model's array from src on, in g's dtype, to dst (kiln_llm_model_read16_threads fills
 * each chunk); the copies are queued on g's stream. */
static kiln_status upload16(kiln_llm_cuda *g, void *dst, const float *src, size_t n, staging *st) {
    for (size_t off = 0; off < n; off += STAGING_VALUES) {
        const size_t k = n - off < STAGING_VALUES ? n - off : STAGING_VALUES;
        const int i = st->next;
        st->next ^= 1;
        KILN_CUDA_TRY(cudaEventSynchronize(st->copied[i]));
        KILN_TRY(kiln_llm_model_read16_threads(st->m, src + off, k, g->dtype, st->chunk[i], st->threads));
        KILN_CUDA_TRY(cudaMemcpyAsync((uint16_t *)dst + off, st->chunk[i], k * 2, cudaMemcpyHostToDevice, g->kc.stream));
        KILN_CUDA_TRY(cudaEventRecord(st->copied[i], g->kc.stream));
    }
    return KILN_OK;
}

static kiln_status upload32(void *dst, const float *src, size_t n) {
    KILN_CUDA_TRY(cudaMemcpy(dst, src, n * 4, cudaMemcpyHostToDevice));
    return KILN_OK;
}

/* A [rows, cols] matrix: q's int8 values and scales as they are when scale is set (INT8), else the
 * model's array src in g's dtype. */
static kiln_status upload_mat(kiln_llm_cuda *g, void *dst, float *scale, const float *src, const kiln_llm_q8 *q,
                              size_t rows, size_t cols, staging *st) {
    if (!scale) return upload16(g, dst, src, rows * cols, st);
    size_t scale_bytes;
    KILN_CUDA_TRY(cudaMemcpy(dst, q->q, quant_bytes(g, rows, cols, &scale_bytes), cudaMemcpyHostToDevice));
    if (!g->int4) return upload32(scale, q->scale, rows);
    KILN_TRY(upload32(scale, q->scale, scale_bytes / 8));
    return upload32((char *)scale + scale_bytes / 2, q->zero, scale_bytes / 8);
}

static kiln_status upload_weights(kiln_llm_cuda *g, const kiln_llm_model *m, staging *st) {
    const kiln_llm_config *c = &g->cfg;
    const size_t d = (size_t)c->d_model, ff = (size_t)c->d_ff, qd = (size_t)c->n_head * c->head_dim,
                 qkv = qd + 2 * (size_t)c->n_kv_head * c->head_dim, up = c->arch == KILN_LLM_GPT2 ? ff : 2 * ff;
    KILN_TRY(upload_mat(g, g->tok_emb, g->tok_emb_s, m->tok_emb, &m->q8_tok_emb, (size_t)c->vocab, d, st));
    if (g->pos_emb) KILN_TRY(upload16(g, g->pos_emb, m->pos_emb, (size_t)c->max_pos * d, st));
    if (g->lm_head != g->tok_emb)
        KILN_TRY(upload_mat(g, g->lm_head, g->lm_head_s, m->lm_head, &m->q8_lm_head, (size_t)c->vocab, d, st));
    KILN_TRY(upload32(g->norm_f_w, m->norm_f_w, d));
    if (g->norm_f_b) KILN_TRY(upload32(g->norm_f_b, m->norm_f_b, d));
    for (int l = 0; l < c->n_layer; l++) {
        const kiln_llm_layer *s = &m->layers[l];
        const llmc_layer *y = &g->layers[l];
        KILN_TRY(upload32(y->norm1_w, s->norm1_w, d));
        KILN_TRY(upload32(y->norm2_w, s->norm2_w, d));
        const kiln_llm_q8_layer *q = m->q8 ? &m->q8[l] : NULL;
        KILN_TRY(upload_mat(g, y->qkv_w, y->qkv_s, s->qkv_w, q ? &q->qkv : NULL, qkv, d, st));
        KILN_TRY(upload_mat(g, y->o_w, y->o_s, s->o_w, q ? &q->o : NULL, d, qd, st));
        KILN_TRY(upload_mat(g, y->up_w, y->up_s, s->up_w, q ? &q->up : NULL, up, d, st));
        KILN_TRY(upload_mat(g, y->down_w, y->down_s, s->down_w, q ? &q->down : NULL, d, ff, st));
        if (c->qkv_bias) KILN_TRY(upload16(g, y->qkv_b, s->qkv_b, qkv, st));
        if (c->arch != KILN_LLM_GPT2) continue;
        KILN_TRY(upload32(y->norm1_b, s->norm1_b, d));
        KILN_TRY(upload32(y->norm2_b, s->norm2_b, d));
        KILN_TRY(upload16(g, y->qkv_b, s->qkv_b, qkv, st));
        KILN_TRY(upload16(g, y->o_b, s->o_b, d, st));
        KILN_TRY(upload16(g, y->up_b, s->up_b, ff, st));
        KILN_TRY(upload16(g, y->down_b, s->down_b, d, st));
    }
    KILN_CUDA_TRY(cudaStreamSynchronize(g->kc.stream));
    return KILN_OK;
}

/* Random weights on the device with llm_random.h's scales (each array its own seed); INT8 matrices
 * (options.random_int8) as int8 values of the same range, INT4 ones (random_int4) as nibbles, FP8 ones
 * (random_fp8) as E4M3 codes. */
static kiln_status random_weights(kiln_llm_cuda *g, uint64_t seed) {
    const kiln_llm_config *c = &g->cfg;
    const size_t d = (size_t)c->d_model, ff = (size_t)c->d_ff, qd = (size_t)c->n_head * c->head_dim,
                 qkv = qd + 2 * (size_t)c->n_kv_head * c->head_dim, up = c->arch == KILN_LLM_GPT2 ? ff : 2 * ff;
    const kiln_dtype t = g->dtype, f = KILN_F32;
    const float emb = sqrtf(3.0f);
    uint64_t k = seed * 1000003u;
#define MATS(p, s, rows, cols, amp)                                                                         \
    KILN_TRY((s) && g->f8 ? llmc_fill_random_fp8(g, p, s, rows, cols, ++k, amp)                                \
             : (s) ? (g->int4 ? llmc_fill_random_q4(g, p, s, rows, cols, ++k, amp)                               \
                              : llmc_fill_random_q8(g, p, s, rows, cols, ++k, amp))                              \
                 : llmc_fill_random(g, p, t, (size_t)(rows) * (cols), ++k, 0.0f, amp))
#define MAT(p, s, rows, cols) MATS(p, s, rows, cols, sqrtf(3.0f / (float)(cols)))
#define VEC(p, dt, n, center, scale) KILN_TRY(llmc_fill_random(g, p, dt, n, ++k, center, scale))
    MATS(g->tok_emb, g->tok_emb_s, c->vocab, d, emb);
    if (g->pos_emb) VEC(g->pos_emb, t, (size_t)c->max_pos * d, 0.0f, emb);
    if (g->lm_head != g->tok_emb) MAT(g->lm_head, g->lm_head_s, c->vocab, d);
    VEC(g->norm_f_w, f, d, 1.0f, 0.1f);
    if (g->norm_f_b) VEC(g->norm_f_b, f, d, 0.0f, 0.1f);
    for (int l = 0; l < c->n_layer; l++) {
        const llmc_layer *y = &g->layers[l];
        VEC(y->norm1_w, f, d, 1.0f, 0.1f);
        VEC(y->norm2_w, f, d, 1.0f, 0.1f);
        MAT(y->qkv_w, y->qkv_s, qkv, d);
        MAT(y->o_w, y->o_s, d, qd);
        MAT(y->up_w, y->up_s, up, d);
        MAT(y->down_w, y->down_s, d, ff);
        if (c->qkv_bias) VEC(y->qkv_b, t, qkv, 0.0f, 0.1f);
        if (c->arch != KILN_LLM_GPT2) continue;
        VEC(y->norm1_b, f, d, 0.0f, 0.1f);
        VEC(y->norm2_b, f, d, 0.0f, 0.1f);
        VEC(y->qkv_b, t, qkv, 0.0f, 0.1f);
        VEC(y->o_b, t, d, 0.0f, 0.1f);
        VEC(y->up_b, t, ff, 0.0f, 0.1f);
        VEC(y->down_b, t, d, 0.0f, 0.1f);
    }
#undef MATS
#undef MAT
#undef VEC
    KILN_CUDA_TRY(cudaStreamSynchronize(g->kc.stream));
    return KILN_OK;
}

/* ---------------------------------------------------------------- create / free */

/* Bytes of the packed metadata of the largest step (llm_cuda_forward.c packs it): tokens, positions,
 * token -> sequence, logits rows, seq_start, ctx_len, block tables of up to max_context blocks per
 * sequence, then the RoPE tables in double. */
static size_t meta_bytes(const kiln_llm_cuda *g) {
    const size_t n = (size_t)g->opt.max_tokens, s = (size_t)g->opt.max_seqs;
    const size_t ints = 4 * n + (s + 1) + s + s * (size_t)g->opt.max_context;
    return (ints * 4 + 7) / 8 * 8 + s * (size_t)(g->cfg.head_dim / 2) * 8;
}

/* Everything but the weights' values (laid out for m's formats; NULL: random 16-bit weights); the
 * caller holds the setup lock. */
static kiln_status create_common_locked(kiln_llm_cuda *g, const kiln_llm_model *m) {
    KILN_TRY(llmc_gemv_mode_from_env(&g->gemv_force));
    KILN_TRY(llmc_gemv_q8_mode_from_env(&g->gemv_q8_force));
    KILN_TRY(kiln_cuda_ctx_open(g->opt.device, LLMC_WORKSPACE_BYTES, KILN_CUDA_OPEN_BLAS, &g->kc));
    KILN_TRY(llmc_fuse_mode_from_env(g->kc.cc_major, &g->fuse));
    KILN_TRY(llmc_pdl_from_env(g->kc.cc_major, &g->pdl));
    KILN_TRY(llmc_gemm_q_from_env(&g->gemm_q));
    KILN_TRY(llmc_argmax_load());
    g->layers = calloc((size_t)g->cfg.n_layer, sizeof *g->layers);
    if (!g->layers) return kiln_error(KILN_ERR_OUT_OF_MEMORY, "out of memory");
    carver cw = {NULL, 0};
    layout_weights(g, m, &cw);
    g->weight_bytes = cw.off;
    KILN_CUDA_TRY(cudaMalloc(&g->weights, cw.off));
    cw = (carver){g->weights, 0};
    layout_weights(g, m, &cw);
    g->split_cap = (g->opt.max_context + LLMC_SPLIT_MIN - 1) / LLMC_SPLIT_MIN;
    carver ca = {NULL, 0};
    const bool int8 = has_int8(g, m) && !has_fp8(g, m);
    layout_acts(g, int8, &ca);
    KILN_CUDA_TRY(cudaMalloc(&g->acts, ca.off));
    ca = (carver){g->acts, 0};
    layout_acts(g, int8, &ca);
    if (has_fp8(g, m)) KILN_TRY(llmc_fp8_create(g, m));
    KILN_CUDA_TRY(cudaMemset(g->att_count, 0,
                             (size_t)g->opt.max_seqs * llmc_decode_counters(g->cfg.n_head, g->cfg.n_kv_head) *
                                 sizeof(unsigned)));
    g->meta_bytes = meta_bytes(g);
    KILN_CUDA_TRY(cudaMallocHost(&g->meta_host, g->meta_bytes));
    KILN_CUDA_TRY(cudaMalloc(&g->meta_dev, g->meta_bytes));
    KILN_CUDA_TRY(cudaEventCreateWithFlags(&g->meta_done, cudaEventDisableTiming));
    return KILN_OK;
}

static kiln_status create(const kiln_llm_config *c, kiln_dtype dtype, const kiln_llm_cuda_options *o,
                          const kiln_llm_model *m, uint64_t seed, kiln_llm_cuda **out) {
    *out = NULL;
    kiln_llm_cuda_options def;
    if (!o) {
        kiln_llm_cuda_options_default(&def);
        o = &def;
    }
    KILN_TRY(check_shape(c, dtype, o));
    char desc[256];
    KILN_TRY(kiln_llm_cuda_device_check(o->device, desc, sizeof desc));
    kiln_llm_cuda *g = calloc(1, sizeof *g);
    if (!g) return kiln_error(KILN_ERR_OUT_OF_MEMORY, "out of memory");
    g->cfg = *c;
    g->dtype = dtype;
    g->opt = *o;
    g->int4 = m ? (m->q8 && c->n_layer > 0 && m->q8[0].qkv.zero) || m->q8_tok_emb.zero : o->random_int4;
    kiln_status s = llmc_tactics_open(g);
    if (s != KILN_OK) {
        kiln_llm_cuda_free(g);
        return s;
    }
    kiln_cuda_setup_lock();
    s = create_common_locked(g, m);
    if (s == KILN_OK && !m) s = random_weights(g, seed); /* its kernels' first launches load them */
    kiln_cuda_setup_unlock();
    if (s == KILN_OK && m) {
        staging st;
        s = staging_create(m, &st);
        if (s == KILN_OK) s = upload_weights(g, m, &st);
        staging_free(&st);
    }
    if (s != KILN_OK) {
        kiln_llm_cuda_free(g);
        return s;
    }
    *out = g;
    return KILN_OK;
}

kiln_status kiln_llm_cuda_create(const kiln_llm_model *m, kiln_dtype dtype, const kiln_llm_cuda_options *o,
                                 kiln_llm_cuda **out) {
    return create(&m->cfg, dtype, o, m, 0, out);
}

kiln_status kiln_llm_cuda_create_random(const kiln_llm_config *c, kiln_dtype dtype, const kiln_llm_cuda_options *o,
                                        uint64_t seed, kiln_llm_cuda **out) {
    return create(c, dtype, o, NULL, seed, out);
}

void kiln_llm_cuda_free(kiln_llm_cuda *g) {
    if (!g) return;
    kiln_cuda_setup_lock();
    cudaSetDevice(g->opt.device);
    if (g->kc.stream) cudaStreamSynchronize(g->kc.stream);
    llmc_graphs_free(g);
    llmc_plans_free(g);
    llmc_imma_plans_free(g);
    llmc_fp8_free(g);
    if (g->meta_done) cudaEventDestroy(g->meta_done);
    if (g->meta_dev) cudaFree(g->meta_dev);
    if (g->meta_host) cudaFreeHost(g->meta_host);
    if (g->acts) cudaFree(g->acts);
    if (g->weights) cudaFree(g->weights);
    kiln_cuda_ctx_close(&g->kc);
    kiln_cuda_setup_unlock();
    llmc_tactics_close(g);
    free(g->layers);
    free(g);
}

const kiln_llm_config *kiln_llm_cuda_config(const kiln_llm_cuda *g) { return &g->cfg; }
uint64_t kiln_llm_cuda_weight_bytes(const kiln_llm_cuda *g) { return g->weight_bytes; }
const char *kiln_llm_cuda_decode_path(const kiln_llm_cuda *g) { return llmc_fuse_mode_name(g->fuse); }
const float *kiln_llm_cuda_device_logits(const kiln_llm_cuda *g) { return g->last_rows ? g->logits : NULL; }

kiln_status kiln_llm_cuda_copy_logits(kiln_llm_cuda *g, int row0, int n_rows, float *host) {
    if (row0 < 0 || n_rows < 1 || n_rows > g->last_rows - row0)
        return kiln_error(KILN_ERR_INVALID_ARGUMENT, "cuda logits: rows %d..%d asked of a step with %d rows", row0,
                          row0 + n_rows - 1, g->last_rows);
    const size_t vocab = (size_t)g->cfg.vocab;
    KILN_CUDA_TRY(cudaSetDevice(g->opt.device));
    KILN_CUDA_TRY(cudaMemcpyAsync(host, g->logits + (size_t)row0 * vocab, (size_t)n_rows * vocab * sizeof(float),
                                  cudaMemcpyDeviceToHost, g->kc.stream));
    KILN_CUDA_TRY(cudaStreamSynchronize(g->kc.stream));
    return KILN_OK;
}
