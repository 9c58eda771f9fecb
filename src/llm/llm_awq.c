/* llm_awq.c — activation-aware INT4 scales (llm_awq.h): the probe the forward records into, the
 * calibration run over windows of the text, and per matrix the search over alpha, the fold of the
 * chosen scales into the matrix's columns and the op before it, and the per-group clipping search. */
#include "llm/llm_awq.h"

#include "core/file.h"
#include "core/log.h"
#include "core/status.h"
#include "llm/kv_cache.h"
#include "llm/llm_cpu_ops.h"
#include "llm/llm_gemv_q4.h"
#include "llm/tokenizer.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define DEFAULT_TOKENS 4096
#define CALIB_CTX 512  /* tokens per window (fewer when the model has fewer positions) */
#define CALIB_BLOCK 16
#define ALPHA_STEPS 20 /* alpha = i / ALPHA_STEPS */
#define CLIP_ROWS 32   /* sampled rows the clipping search weighs a group's error with */
static const float CLIPS[] = {1.0f, 0.95f, 0.9f, 0.85f, 0.8f, 0.75f};

/* Records rows x [n, in] (stride ldx) into slot s. */
static void record(const struct kiln_llm_probe *p, kiln_llm_probe_slot *s, const float *x, int ldx, int n, int in) {
    if (s->in != in) return; /* not the shape the probe was made for */
    for (int t = 0; t < n; t++, s->rows++) {
        const float *row = x + (size_t)t * ldx;
        for (int k = 0; k < in; k++) s->sum_abs[k] += fabsf(row[k]);
        if (s->rows % p->every == 0 && s->n_sample < KILN_PROBE_SAMPLE)
            memcpy(s->sample + (size_t)s->n_sample++ * in, row, (size_t)in * sizeof *row);
    }
}

void kiln_llm_probe_record(struct kiln_llm_probe *p, int layer, kiln_llm_probe_site site, const float *x, int ldx,
                           int n, int in) {
    record(p, &p->slots[(size_t)layer * KILN_PROBE_SITES + site], x, ldx, n, in);
}

void kiln_llm_probe_record_head(struct kiln_llm_probe *p, const float *x, int ldx, int n, int in) {
    record(p, &p->head, x, ldx, n, in);
}

static void probe_free(struct kiln_llm_probe *p) {
    for (int i = 0; p->slots && i < p->n_layer * KILN_PROBE_SITES; i++) {
        free(p->slots[i].sum_abs);
        free(p->slots[i].sample);
    }
    free(p->slots);
    free(p->head.sum_abs);
    free(p->head.sample);
}

static kiln_status slot_init(kiln_llm_probe_slot *s, int in) {
    s->in = in;
    s->sum_abs = calloc((size_t)in, sizeof *s->sum_abs);
    s->sample = malloc((size_t)KILN_PROBE_SAMPLE * (size_t)in * sizeof *s->sample);
    return s->sum_abs && s->sample ? KILN_OK : kiln_error(KILN_ERR_OUT_OF_MEMORY, "INT4 calibration: out of memory");
}

/* The input width of each site of c's layers. */
static int site_in(const kiln_llm_config *c, kiln_llm_probe_site site) {
    return site == KILN_PROBE_O ? c->n_head * c->head_dim : site == KILN_PROBE_DOWN ? c->d_ff : c->d_model;
}

static kiln_status probe_init(struct kiln_llm_probe *p, const kiln_llm_config *c, int every) {
    p->n_layer = c->n_layer;
    p->every = every;
    if (!(p->slots = calloc((size_t)c->n_layer * KILN_PROBE_SITES, sizeof *p->slots)))
        return kiln_error(KILN_ERR_OUT_OF_MEMORY, "INT4 calibration: out of memory");
    for (int i = 0; i < c->n_layer * KILN_PROBE_SITES; i++)
        KILN_TRY(slot_init(&p->slots[i], site_in(c, (kiln_llm_probe_site)(i % KILN_PROBE_SITES))));
    return slot_init(&p->head, c->d_model);
}

/* Runs m over ids[0, n) in windows of ctx tokens (windows under two tokens skipped) with p recording;
 * every row's logits, so that the final norm (the lm_head's input) runs over all of them. */
static kiln_status run_windows(kiln_llm_model *m, const int32_t *ids, int64_t n, int ctx, struct kiln_llm_probe *p) {
    const kiln_llm_config *c = &m->cfg;
    const int n_blocks = (ctx + CALIB_BLOCK - 1) / CALIB_BLOCK;
    kiln_kv_cache_config kc = {.n_layer = c->n_layer, .n_kv_head = c->n_kv_head, .head_dim = c->head_dim,
                               .block_size = CALIB_BLOCK, .n_blocks = n_blocks, .dtype = KILN_F32};
    kiln_kv_cache *kv = NULL;
    KILN_TRY(kiln_kv_cache_create(&kc, &kv));
    int32_t *blocks = malloc((size_t)n_blocks * sizeof *blocks), *positions = malloc((size_t)ctx * sizeof *positions);
    float *logits = malloc((size_t)ctx * (size_t)c->vocab * sizeof *logits); /* every row's */
    kiln_status st = blocks && positions && logits ? KILN_OK
                                                   : kiln_error(KILN_ERR_OUT_OF_MEMORY, "INT4 calibration: out of memory");
    for (int b = 0; st == KILN_OK && b < n_blocks; b++) blocks[b] = kiln_kv_cache_alloc_block(kv);
    for (int i = 0; st == KILN_OK && i < ctx; i++) positions[i] = i;
    m->probe = p;
    for (int64_t w0 = 0; st == KILN_OK && n - w0 >= 2; w0 += ctx) {
        const int len = n - w0 < ctx ? (int)(n - w0) : ctx;
        const int32_t seq_start[2] = {0, len}, ctx_len = len;
        const kiln_llm_batch b = {.n_tokens = len, .tokens = ids + w0, .positions = positions, .n_seqs = 1,
                                  .seq_start = seq_start, .ctx_len = &ctx_len, .block_table = blocks,
                                  .max_blocks_per_seq = n_blocks, .all_logits = true};
        st = kiln_llm_forward(m, kv, &b, logits);
    }
    m->probe = NULL;
    free(blocks);
    free(positions);
    free(logits);
    kiln_kv_cache_free(kv);
    return st;
}

/* The sampled output error sum ||X W^T - (X / s) Q(W s)^T||^2 of one candidate s; ws, deq, y scratch. */
static double candidate_error(const float *w, int out, int in, const kiln_llm_probe_slot *sl, const float *s,
                              const float *y_ref, float *ws, float *deq, float *xs, float *y, uint8_t *q, float *qs,
                              float *qz) {
    for (int o = 0; o < out; o++)
        for (int k = 0; k < in; k++) ws[(size_t)o * in + k] = w[(size_t)o * in + k] * s[k];
    kiln_llm_quantize_q4(ws, out, in, 1.0f, q, qs, qz);
    for (int o = 0; o < out; o++) kiln_llm_q4_row(q, qs, qz, o, in, deq + (size_t)o * in);
    for (int r = 0; r < sl->n_sample; r++)
        for (int k = 0; k < in; k++) xs[(size_t)r * in + k] = sl->sample[(size_t)r * in + k] / s[k];
    kiln_llm_linear(xs, in, sl->n_sample, in, deq, NULL, out, y, out, false);
    double e = 0;
    for (size_t i = 0; i < (size_t)sl->n_sample * out; i++) e += ((double)y[i] - y_ref[i]) * ((double)y[i] - y_ref[i]);
    return e;
}

/* The column scales s [in] of w [out, in] (its inputs recorded in sl) with the least sampled error
 * over alpha; *alpha_out the alpha chosen. */
static kiln_status search_scales(const float *w, int out, int in, const kiln_llm_probe_slot *sl, float *s,
                                 float *alpha_out) {
    const size_t wn = (size_t)out * in, yn = (size_t)sl->n_sample * out, g = (size_t)(out * kiln_q4_groups(in));
    float *ws = malloc(wn * sizeof *ws), *deq = malloc(wn * sizeof *deq), *y_ref = malloc(yn * sizeof *y_ref);
    float *y = malloc(yn * sizeof *y), *xs = malloc((size_t)sl->n_sample * in * sizeof *xs), *cand = malloc((size_t)in * sizeof *cand);
    float *qs = malloc(g * sizeof *qs), *qz = malloc(g * sizeof *qz);
    uint8_t *q = malloc((size_t)(out * kiln_q4_row_bytes(in)));
    kiln_status st = KILN_OK;
    if (!ws || !deq || !y_ref || !y || !xs || !cand || !qs || !qz || !q) {
        st = kiln_error(KILN_ERR_OUT_OF_MEMORY, "INT4 calibration: out of memory searching a [%d, %d] matrix's scales", out, in);
        goto done;
    }
    kiln_llm_linear(sl->sample, in, sl->n_sample, in, w, NULL, out, y_ref, out, false);
    double best = INFINITY;
    for (int i = 0; i <= ALPHA_STEPS; i++) {
        const double alpha = (double)i / ALPHA_STEPS;
        double mx = 0, mn = INFINITY;
        for (int k = 0; k < in; k++) {
            const double mean = sl->rows ? sl->sum_abs[k] / (double)sl->rows : 0;
            cand[k] = (float)pow(mean > 1e-5 ? mean : 1e-5, alpha);
            mx = cand[k] > mx ? cand[k] : mx;
            mn = cand[k] < mn ? cand[k] : mn;
        }
        const float norm = (float)sqrt(mx * mn);
        for (int k = 0; k < in; k++) cand[k] /= norm;
        const double e = candidate_error(w, out, in, sl, cand, y_ref, ws, deq, xs, y, q, qs, qz);
        if (e < best) {
            best = e;
            *alpha_out = (float)alpha;
            memcpy(s, cand, (size_t)in * sizeof *s);
        }
    }
done:
    free(ws), free(deq), free(y_ref), free(y), free(xs), free(cand), free(qs), free(qz), free(q);
    return st;
}

/* Clamps every group of w [out, in] (already times s) to the clip of its [min, max] range (CLIPS) whose
 * INT4 rounding has the least error on the sampled inputs sl / s: sum over rows of (x . (w - Q(w)))^2.
 * A group whose range does not hold 0 keeps its range (clamping it would move the quantizer's ends). */
static kiln_status clip_groups(float *w, int out, int in, const kiln_llm_probe_slot *sl, const float *s) {
    const int rows = sl->n_sample < CLIP_ROWS ? sl->n_sample : CLIP_ROWS;
    float *xs = malloc((size_t)rows * KILN_Q4_GROUP * sizeof *xs), *deq = malloc(KILN_Q4_GROUP * sizeof *deq);
    if (!xs || !deq) {
        free(xs), free(deq);
        return kiln_error(KILN_ERR_OUT_OF_MEMORY, "INT4 calibration: out of memory");
    }
    for (int k0 = 0; k0 < in; k0 += KILN_Q4_GROUP) {
        const int len = in - k0 < KILN_Q4_GROUP ? in - k0 : KILN_Q4_GROUP;
        for (int r = 0; r < rows; r++)
            for (int k = 0; k < len; k++) xs[r * len + k] = sl->sample[(size_t)r * in + k0 + k] / s[k0 + k];
        for (int o = 0; o < out; o++) {
            float *g = w + (size_t)o * in + k0, lo = g[0], hi = g[0];
            for (int k = 1; k < len; k++) lo = g[k] < lo ? g[k] : lo, hi = g[k] > hi ? g[k] : hi;
            if (!(lo < 0 && hi > 0)) continue;
            double best = INFINITY;
            float best_clip = 1.0f;
            for (size_t c = 0; c < sizeof CLIPS / sizeof *CLIPS; c++) {
                uint8_t q[KILN_Q4_GROUP / 2];
                float qs, qz;
                kiln_llm_quantize_q4(g, 1, len, CLIPS[c], q, &qs, &qz);
                kiln_llm_q4_row(q, &qs, &qz, 0, len, deq);
                double e = 0;
                for (int r = 0; r < rows; r++) {
                    double d = 0;
                    for (int k = 0; k < len; k++) d += (double)xs[r * len + k] * (g[k] - deq[k]);
                    e += d * d;
                }
                if (e < best) best = e, best_clip = CLIPS[c];
            }
            for (int k = 0; k < len; k++) g[k] = fminf(fmaxf(g[k], best_clip * lo), best_clip * hi);
        }
    }
    free(xs), free(deq);
    return KILN_OK;
}

/* w [out, in]'s columns times s. */
static void scale_columns(float *w, int out, int in, const float *s) {
    for (int o = 0; o < out; o++)
        for (int k = 0; k < in; k++) w[(size_t)o * in + k] *= s[k];
}

/* A norm's output channel k divided by s[k]: its weight (with the family's offset) and shift. */
static void fold_norm(const kiln_llm_config *c, float *nw, float *nb, const float *s) {
    const float off = kiln_llm_norm_offset(c);
    for (int k = 0; k < c->d_model; k++) {
        nw[k] = (off + nw[k]) / s[k] - off;
        if (nb) nb[k] /= s[k];
    }
}

/* Rows [r0, r0 + n) of w [*, in] (and bias) divided by s[0, n). */
static void fold_rows(float *w, float *bias, int r0, int n, int in, const float *s) {
    for (int r = 0; r < n; r++) {
        for (int k = 0; k < in; k++) w[(size_t)(r0 + r) * in + k] /= s[r];
        if (bias) bias[r0 + r] /= s[r];
    }
}

/* Searches and folds the scales of every matrix of layer l that has an op to fold into. */
static kiln_status scale_layer(kiln_llm_model *m, int l, const struct kiln_llm_probe *p, float *s, bool clip) {
    const kiln_llm_config *c = &m->cfg;
    kiln_llm_layer *y = &m->layers[l];
    const kiln_llm_probe_slot *sl = &p->slots[(size_t)l * KILN_PROBE_SITES];
    const int d = c->d_model, qd = c->n_head * c->head_dim, kvd = c->n_kv_head * c->head_dim, ff = c->d_ff;
    const int qkv_rows = qd + 2 * kvd, up_rows = c->arch == KILN_LLM_GPT2 ? ff : 2 * ff;
    float a[KILN_PROBE_SITES] = {0, 0, 0, 0};
    if (c->n_kv_head == c->n_head && sl[KILN_PROBE_O].n_sample) { /* o: into qkv's v rows */
        KILN_TRY(search_scales(y->o_w, d, qd, &sl[KILN_PROBE_O], s, &a[KILN_PROBE_O]));
        scale_columns(y->o_w, d, qd, s);
        if (clip) KILN_TRY(clip_groups(y->o_w, d, qd, &sl[KILN_PROBE_O], s));
        fold_rows(y->qkv_w, y->qkv_b, qd + kvd, kvd, d, s);
    }
    if (c->arch != KILN_LLM_GPT2 && sl[KILN_PROBE_DOWN].n_sample) { /* down: into the up rows of gate | up */
        KILN_TRY(search_scales(y->down_w, d, ff, &sl[KILN_PROBE_DOWN], s, &a[KILN_PROBE_DOWN]));
        scale_columns(y->down_w, d, ff, s);
        if (clip) KILN_TRY(clip_groups(y->down_w, d, ff, &sl[KILN_PROBE_DOWN], s));
        fold_rows(y->up_w, y->up_b, ff, ff, d, s);
    } else if (clip && sl[KILN_PROBE_DOWN].n_sample) { /* GPT-2's down (after a GELU): clipped only */
        for (int k = 0; k < ff; k++) s[k] = 1.0f;
        KILN_TRY(clip_groups(y->down_w, d, ff, &sl[KILN_PROBE_DOWN], s));
    }
    if (sl[KILN_PROBE_QKV].n_sample) { /* qkv: into norm1 */
        KILN_TRY(search_scales(y->qkv_w, qkv_rows, d, &sl[KILN_PROBE_QKV], s, &a[KILN_PROBE_QKV]));
        scale_columns(y->qkv_w, qkv_rows, d, s);
        if (clip) KILN_TRY(clip_groups(y->qkv_w, qkv_rows, d, &sl[KILN_PROBE_QKV], s));
        fold_norm(c, y->norm1_w, y->norm1_b, s);
    }
    if (sl[KILN_PROBE_UP].n_sample) { /* up (gate | up): into norm2 */
        KILN_TRY(search_scales(y->up_w, up_rows, d, &sl[KILN_PROBE_UP], s, &a[KILN_PROBE_UP]));
        scale_columns(y->up_w, up_rows, d, s);
        if (clip) KILN_TRY(clip_groups(y->up_w, up_rows, d, &sl[KILN_PROBE_UP], s));
        fold_norm(c, y->norm2_w, y->norm2_b, s);
    }
    KILN_LOG(KILN_LOG_INFO, "INT4 scales, layer %d: alpha qkv %.2f, o %.2f, up %.2f, down %.2f", l, a[KILN_PROBE_QKV],
             a[KILN_PROBE_O], a[KILN_PROBE_UP], a[KILN_PROBE_DOWN]);
    return KILN_OK;
}

/* Searches and folds the lm_head's scales into the final norm when it is not the token embedding
 * (a tied one keeps s = 1: the embedding's lookups could not undo them), then clips it. */
static kiln_status scale_head(kiln_llm_model *m, const struct kiln_llm_probe *p, float *s, bool clip) {
    const kiln_llm_config *c = &m->cfg;
    const int d = c->d_model;
    float alpha = 0;
    if (m->lm_head != m->tok_emb) {
        KILN_TRY(search_scales(m->lm_head, c->vocab, d, &p->head, s, &alpha));
        scale_columns(m->lm_head, c->vocab, d, s);
        fold_norm(c, m->norm_f_w, m->norm_f_b, s);
    } else {
        for (int k = 0; k < d; k++) s[k] = 1.0f;
    }
    if (clip) KILN_TRY(clip_groups(m->lm_head, c->vocab, d, &p->head, s));
    KILN_LOG(KILN_LOG_INFO, "INT4 scales, lm_head: alpha %.2f%s", alpha, m->lm_head == m->tok_emb ? " (tied)" : "");
    return KILN_OK;
}

/* The token ids of the first max_tokens tokens of calib_path, by dir's tokenizer. */
static kiln_status read_ids(const char *dir, const char *calib_path, int max_tokens, int32_t **ids, int64_t *n) {
    kiln_tokenizer *tok;
    KILN_TRY(kiln_tokenizer_load(dir, &tok));
    kiln_file_map text;
    kiln_status st = kiln_file_map_open(calib_path, &text);
    size_t count = 0;
    if (st == KILN_OK) {
        st = kiln_tokenizer_encode(tok, (const char *)text.data, text.size, false, ids, &count);
        kiln_file_unmap(&text);
    }
    kiln_tokenizer_free(tok);
    KILN_TRY(st);
    if (count < 2) {
        free(*ids);
        *ids = NULL;
        return kiln_error(KILN_ERR_INVALID_ARGUMENT, "INT4 calibration: %s holds %zu token(s), at least 2 are needed",
                          calib_path, count);
    }
    *n = (int64_t)count < max_tokens ? (int64_t)count : max_tokens;
    return KILN_OK;
}

kiln_status kiln_llm_awq_apply_ids(kiln_llm_model *m, const int32_t *ids, int64_t n, bool clip, bool lm_head) {
    const kiln_llm_config *c = &m->cfg;
    if (n < 2) return kiln_error(KILN_ERR_INVALID_ARGUMENT, "INT4 calibration: %lld token(s), at least 2 are needed", (long long)n);
    struct kiln_llm_probe p = {0};
    const int every = n / KILN_PROBE_SAMPLE > 1 ? (int)(n / KILN_PROBE_SAMPLE) : 1;
    kiln_status st = probe_init(&p, c, every);
    const int ctx = c->max_pos < CALIB_CTX ? c->max_pos : CALIB_CTX;
    if (st == KILN_OK) st = run_windows(m, ids, n, ctx, &p);
    int wmax = c->d_model > c->d_ff ? c->d_model : c->d_ff;
    wmax = wmax > c->n_head * c->head_dim ? wmax : c->n_head * c->head_dim;
    float *s = st == KILN_OK ? malloc((size_t)wmax * sizeof *s) : NULL;
    if (st == KILN_OK && !s) st = kiln_error(KILN_ERR_OUT_OF_MEMORY, "INT4 calibration: out of memory");
    for (int l = 0; st == KILN_OK && l < c->n_layer; l++) st = scale_layer(m, l, &p, s, clip);
    if (st == KILN_OK && lm_head && p.head.n_sample) st = scale_head(m, &p, s, clip);
    free(s);
    probe_free(&p);
    return st;
}

kiln_status kiln_llm_awq_apply(kiln_llm_model *m, const char *dir, const char *calib_path, int max_tokens,
                               bool lm_head) {
    if (max_tokens <= 0) max_tokens = DEFAULT_TOKENS;
    int32_t *ids = NULL;
    int64_t n = 0;
    kiln_status st = read_ids(dir, calib_path, max_tokens, &ids, &n);
    if (st == KILN_OK) st = kiln_llm_awq_apply_ids(m, ids, n, true, lm_head);
    if (st == KILN_OK) KILN_LOG(KILN_LOG_INFO, "INT4 scales from %lld tokens of %s", (long long)n, calib_path);
    free(ids);
    return st == KILN_OK ? st : kiln_error_prefix(st, "INT4 calibration with %s", calib_path);
}
