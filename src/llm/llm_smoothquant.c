/* llm_smoothquant.c — kiln_llm_smoothquant (llm_smoothquant.h): two passes of the CPU forward over
 * windows of the calibration text, each with an observer on the layer products' inputs: the first
 * keeps per-channel maxima, from which the smoothing factors are computed and folded into the norms
 * and matrices (a gated MLP's down factors into its up rows); the second fills one |x| histogram per
 * product input, over [0, the smoothed maximum], for the calibrator. */
#include "llm/llm_smoothquant.h"

#include "core/file.h"
#include "core/log.h"
#include "core/status.h"
#include "llm/kv_cache.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define CALIB_BLOCK 16
#define CALIB_CTX 512 /* positions per window */
#define S_MIN 1e-5f
#define S_MAX 1e5f

/* What the observer keeps: pass 1 the per-channel maxima amax[l][mat] ([in] each), pass 2 the
 * histograms hist[l][mat]. */
typedef struct calib {
    float **amax;            /* [n_layer * MATS] */
    kiln_calib_hist *hist;   /* [n_layer * MATS], NULL in pass 1 */
} calib;

static void see(void *ctx, int layer, kiln_llm_matrix mat, const float *x, int ldx, int n, int in) {
    calib *c = ctx;
    const size_t i = (size_t)layer * KILN_LLM_W8A8_MATS + mat;
    for (int t = 0; t < n; t++) {
        const float *row = x + (size_t)t * ldx;
        if (c->hist) {
            kiln_calib_hist_add(&c->hist[i], row, in);
            continue;
        }
        float *a = c->amax[i];
        for (int j = 0; j < in; j++) a[j] = fabsf(row[j]) > a[j] ? fabsf(row[j]) : a[j];
    }
}

/* The forward over ids[0..n) in windows of ctx positions, c observing. */
static kiln_status run_windows(kiln_llm_model *m, const int32_t *ids, int64_t n, int ctx, calib *c) {
    const kiln_llm_config *cfg = &m->cfg;
    const int n_blocks = (ctx + CALIB_BLOCK - 1) / CALIB_BLOCK;
    kiln_kv_cache_config kc = {.n_layer = cfg->n_layer, .n_kv_head = cfg->n_kv_head, .head_dim = cfg->head_dim,
                               .block_size = CALIB_BLOCK, .n_blocks = n_blocks, .dtype = KILN_F32};
    kiln_kv_cache *kv = NULL;
    KILN_TRY(kiln_kv_cache_create(&kc, &kv));
    int32_t *blocks = malloc((size_t)n_blocks * sizeof *blocks), *positions = malloc((size_t)ctx * sizeof *positions);
    float *logits = malloc((size_t)cfg->vocab * sizeof *logits);
    kiln_status st = blocks && positions && logits ? KILN_OK
                                                   : kiln_error(KILN_ERR_OUT_OF_MEMORY, "W8A8 calibration: out of memory");
    for (int b = 0; st == KILN_OK && b < n_blocks; b++) blocks[b] = kiln_kv_cache_alloc_block(kv);
    for (int p = 0; st == KILN_OK && p < ctx; p++) positions[p] = p;
    const kiln_llm_act_observer obs = {see, c};
    m->observer = &obs;
    for (int64_t w0 = 0; st == KILN_OK && w0 < n; w0 += ctx) {
        const int len = n - w0 < ctx ? (int)(n - w0) : ctx;
        const int32_t seq_start[2] = {0, len}, ctx_len = len;
        const kiln_llm_batch b = {.n_tokens = len, .tokens = ids + w0, .positions = positions, .n_seqs = 1,
                                  .seq_start = seq_start, .ctx_len = &ctx_len, .block_table = blocks,
                                  .max_blocks_per_seq = n_blocks};
        st = kiln_llm_forward(m, kv, &b, logits);
    }
    m->observer = NULL;
    free(blocks);
    free(positions);
    free(logits);
    kiln_kv_cache_free(kv);
    return st;
}

/* The input width of layer product mat. */
static int input_width(const kiln_llm_config *c, kiln_llm_matrix mat) {
    return mat == KILN_LLM_MAT_O ? c->n_head * c->head_dim : mat == KILN_LLM_MAT_DOWN ? c->d_ff : c->d_model;
}

/* SmoothQuant's factor of input channel j of W [rows, in]: max|x_j|^a / max_i |W[i, j]|^(1 - a), 1 where
 * either is 0, clamped to [S_MIN, S_MAX]. */
static float factor(const float *w, int64_t rows, int in, int j, float ax, float alpha) {
    float wmax = 0;
    for (int64_t i = 0; i < rows; i++) wmax = fabsf(w[i * in + j]) > wmax ? fabsf(w[i * in + j]) : wmax;
    const float s = ax > 0 && wmax > 0 ? powf(ax, alpha) / powf(wmax, 1.0f - alpha) : 1.0f;
    return s < S_MIN ? S_MIN : s > S_MAX ? S_MAX : s;
}

/* Smooths the product W [rows, in] behind the norm (scale g, shift b or NULL, offset off): s from the
 * input maxima ax; W[:, j] *= s_j, (g_j + off) /= s_j, b_j /= s_j; ax becomes the smoothed maxima. */
static void smooth(float *w, int64_t rows, int in, float *g, float *b, float off, float alpha, float *ax) {
    for (int j = 0; j < in; j++) {
        const float s = factor(w, rows, in, j, ax[j], alpha);
        for (int64_t i = 0; i < rows; i++) w[i * in + j] *= s;
        g[j] = (g[j] + off) / s - off;
        if (b) b[j] /= s;
        ax[j] /= s;
    }
}

/* Smooths the down product W [rows, ff] of a gated MLP: its input j is act(gate_j) * up_j, so
 * W[:, j] *= s_j and up's row j (up [ff, d], the second half of the stacked gate / up rows) /= s_j
 * leave the function unchanged; ax becomes the smoothed maxima. */
static void smooth_gated(float *w, int64_t rows, int ff, float *up, int d, float alpha, float *ax) {
    for (int j = 0; j < ff; j++) {
        const float s = factor(w, rows, ff, j, ax[j], alpha);
        for (int64_t i = 0; i < rows; i++) w[i * ff + j] *= s;
        for (int k = 0; k < d; k++) up[(size_t)j * d + k] /= s;
        ax[j] /= s;
    }
}

/* Step 2 of kiln_llm_smoothquant over every layer (and the gated MLPs' down products). */
static void fold(kiln_llm_model *m, float alpha, float **amax) {
    const kiln_llm_config *c = &m->cfg;
    const float off = kiln_llm_norm_offset(c);
    const int d = c->d_model, qkv_rows = (c->n_head + 2 * c->n_kv_head) * c->head_dim;
    const int up_rows = c->d_ff * (c->arch == KILN_LLM_LLAMA ? 2 : 1);
    for (int l = 0; l < c->n_layer; l++) {
        kiln_llm_layer *y = &m->layers[l];
        float **a = amax + (size_t)l * KILN_LLM_W8A8_MATS;
        smooth(y->qkv_w, qkv_rows, d, y->norm1_w, y->norm1_b, off, alpha, a[KILN_LLM_MAT_QKV]);
        smooth(y->up_w, up_rows, d, y->norm2_w, y->norm2_b, off, alpha, a[KILN_LLM_MAT_UP]);
        if (c->arch == KILN_LLM_LLAMA)
            smooth_gated(y->down_w, d, c->d_ff, y->up_w + (size_t)c->d_ff * d, d, alpha, a[KILN_LLM_MAT_DOWN]);
    }
}

/* The calibration tokens (at most KILN_LLM_W8A8_CALIB_TOKENS): o's ids, or its text's first ones. */
static kiln_status read_text(const kiln_tokenizer *tok, const kiln_llm_w8a8_options *o, int vocab, int32_t **ids,
                             size_t *n) {
    const char *path = o->calib_text;
    if (!path) {
        if (!o->calib_ids || o->n_calib_ids < 1)
            return kiln_error(KILN_ERR_INVALID_ARGUMENT, "W8A8 calibration needs a calibration text or tokens");
        *n = o->n_calib_ids < KILN_LLM_W8A8_CALIB_TOKENS ? (size_t)o->n_calib_ids : KILN_LLM_W8A8_CALIB_TOKENS;
        if (!(*ids = malloc(*n * sizeof **ids))) return kiln_error(KILN_ERR_OUT_OF_MEMORY, "W8A8 calibration: out of memory");
        for (size_t i = 0; i < *n; i++) {
            if (o->calib_ids[i] < 0 || o->calib_ids[i] >= vocab)
                return kiln_error(KILN_ERR_INVALID_ARGUMENT, "W8A8 calibration: token %zu is %d, outside the vocabulary "
                                  "of %d", i, (int)o->calib_ids[i], vocab);
            (*ids)[i] = o->calib_ids[i];
        }
        return KILN_OK;
    }
    if (!tok) return kiln_error(KILN_ERR_INVALID_ARGUMENT, "W8A8 calibration: the model has no tokenizer to read %s with",
                                path);
    kiln_file_map text;
    KILN_TRY(kiln_file_map_open(path, &text));
    kiln_status st = kiln_tokenizer_encode(tok, (const char *)text.data, text.size, false, ids, n);
    kiln_file_unmap(&text);
    if (st == KILN_OK && *n == 0) st = kiln_error(KILN_ERR_INVALID_ARGUMENT, "W8A8 calibration: %s has no text", path);
    if (*n > KILN_LLM_W8A8_CALIB_TOKENS) *n = KILN_LLM_W8A8_CALIB_TOKENS;
    return st;
}

kiln_status kiln_llm_smoothquant(kiln_llm_model *m, const kiln_tokenizer *tok, const kiln_llm_w8a8_options *o,
                                 float *act_scales) {
    const kiln_llm_config *c = &m->cfg;
    int32_t *ids = NULL;
    size_t n = 0;
    kiln_status st = read_text(tok, o, c->vocab, &ids, &n);
    const size_t mats = (size_t)c->n_layer * KILN_LLM_W8A8_MATS;
    calib cal = {.amax = calloc(mats, sizeof *cal.amax)};
    if (st == KILN_OK && !cal.amax) st = kiln_error(KILN_ERR_OUT_OF_MEMORY, "W8A8 calibration: out of memory");
    for (size_t i = 0; st == KILN_OK && i < mats; i++)
        if (!(cal.amax[i] = calloc((size_t)input_width(c, (kiln_llm_matrix)(i % KILN_LLM_W8A8_MATS)), sizeof(float))))
            st = kiln_error(KILN_ERR_OUT_OF_MEMORY, "W8A8 calibration: out of memory");
    const int ctx = c->max_pos < CALIB_CTX ? c->max_pos : CALIB_CTX;
    if (st == KILN_OK) st = run_windows(m, ids, (int64_t)n, ctx, &cal);
    if (st == KILN_OK) {
        fold(m, o->smooth_alpha, cal.amax);
        if (!(cal.hist = malloc(mats * sizeof *cal.hist)))
            st = kiln_error(KILN_ERR_OUT_OF_MEMORY, "W8A8 calibration: out of memory");
    }
    for (size_t i = 0; st == KILN_OK && i < mats; i++) { /* each histogram over [0, the smoothed maximum] */
        const int in = input_width(c, (kiln_llm_matrix)(i % KILN_LLM_W8A8_MATS));
        float range = 0;
        for (int j = 0; j < in; j++) range = cal.amax[i][j] > range ? cal.amax[i][j] : range;
        kiln_calib_hist_init(&cal.hist[i], range > 0 ? range : 1.0);
    }
    if (st == KILN_OK) st = run_windows(m, ids, (int64_t)n, ctx, &cal);
    for (size_t i = 0; st == KILN_OK && i < mats; i++)
        act_scales[i] = (float)(kiln_calib_threshold(&cal.hist[i], &o->calibrator) / 127.0);
    if (st == KILN_OK)
        KILN_LOG(KILN_LOG_VERBOSE, "W8A8 calibration: %zu tokens, smoothing alpha %.2f, layer 0 activation scales "
                 "qkv %g o %g up %g down %g", n, (double)o->smooth_alpha, (double)act_scales[0], (double)act_scales[1],
                 (double)act_scales[2], (double)act_scales[3]);
    for (size_t i = 0; cal.amax && i < mats; i++) free(cal.amax[i]);
    free(cal.amax);
    free(cal.hist);
    free(ids);
    return st;
}
