/* llm_cuda_forward.c — kiln_llm_cuda_forward: checks the ragged batch (as the CPU forward does, plus
 * g's limits), packs its metadata (tokens, positions, token -> sequence, logits rows, seq_start,
 * ctx_len, block tables, RoPE frequencies) into pinned memory and copies it to the device in one
 * transfer, then enqueues the step: embedding; per layer norm1 (fused with the residual add of the
 * previous layer's MLP), the QKV product, RoPE + KV cache write, attention, the output product,
 * norm2 (fused with its residual add), the MLP; the final norm over the logits rows and lm_head.
 * Steps of few tokens (the fused GEMV's, g->fuse on) run fused_layers instead: six kernels a layer.
 * With g->pdl the layers' kernels of a decode step (GEMVs, residual norms, RoPE + KV write, decode attention,
 * activations) are programmatic dependent launches (lc_launch, llm_cuda_util.cuh).
 * W8A8 layer matrices go through llmc_linear_wa (llm_cuda_w8a8.h), FP8 ones through llmc_linear_q
 * (llm_cuda_fp8.cu). */
#include "llm/cuda/llm_cuda_internal.h"

#include "core/status.h"
#include "llm/cuda/llm_cuda_w8a8.h"
#include "llm/llm_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define VERIFY_MAX_NEW 17 /* new tokens of a verify step: its last token + KILN_LLM_MAX_DRAFT_TOKENS drafts */

static bool cuda_block_taken(const void *kv, int block) { return kiln_llm_cuda_kv_block_taken(kv, block); }

/* Checks the cache, the batch (kiln_llm_batch_check) and g's limits; fills the sizes of *s. */
static kiln_status check_batch(const kiln_llm_cuda *g, const kiln_llm_cuda_kv *kv, const kiln_llm_batch *b,
                               llmc_step *s) {
    const kiln_llm_config *c = &g->cfg;
    if (kv->n_layer != c->n_layer || kv->n_kv_head != c->n_kv_head || kv->head_dim != c->head_dim || kv->dtype != g->dtype ||
        kv->device != g->opt.device)
        return kiln_error(KILN_ERR_INVALID_ARGUMENT, "cuda KV cache (n_layer %d, n_kv_head %d, head_dim %d, %s, device %d) "
                          "was not made for this model (%d, %d, %d, %s, device %d)", kv->n_layer, kv->n_kv_head,
                          kv->head_dim, kiln_dtype_name(kv->dtype), kv->device, c->n_layer, c->n_kv_head, c->head_dim,
                          kiln_dtype_name(g->dtype), g->opt.device);
    KILN_TRY(kiln_llm_batch_check(c, b, kv->block_size, kv->n_blocks, cuda_block_taken, kv));
    if (b->n_tokens > g->opt.max_tokens || b->n_seqs > g->opt.max_seqs)
        return kiln_error(KILN_ERR_INVALID_ARGUMENT, "batch: %d tokens in %d sequences, beyond this model's limits "
                          "(max_tokens %d, max_seqs %d)", b->n_tokens, b->n_seqs, g->opt.max_tokens, g->opt.max_seqs);
    memset(s, 0, sizeof *s);
    s->n_tokens = b->n_tokens;
    s->n_seqs = b->n_seqs;
    s->n_out = kiln_llm_batch_logit_rows(b, NULL);
    s->decode = true;
    bool uniform = true; /* every sequence has as many new tokens as the first */
    s->n_layers = b->exit_layers ? b->exit_layers : c->n_layer;
    for (int i = 0; i < b->n_seqs; i++) {
        const int n = b->seq_start[i + 1] - b->seq_start[i], ctx = b->ctx_len[i];
        if (ctx > g->opt.max_context)
            return kiln_error(KILN_ERR_INVALID_ARGUMENT, "batch: sequence %d has a context of %d tokens, beyond this "
                              "model's max_context %d", i, ctx, g->opt.max_context);
        const int nb = (ctx + kv->block_size - 1) / kv->block_size;
        if (n > s->max_new) s->max_new = n;
        if (ctx > s->max_ctx) s->max_ctx = ctx;
        if (nb > s->table_stride) s->table_stride = nb;
        s->decode = s->decode && n == 1;
        uniform = uniform && n == b->seq_start[1];
    }
    /* a verify step of speculative decoding: every sequence its last token and the same number of drafts
     * (at most KILN_LLM_MAX_DRAFT_TOKENS), the logits of each */
    s->graph = s->decode || (uniform && s->max_new <= VERIFY_MAX_NEW && s->n_out == s->n_tokens);
    if (s->graph) {
        /* Decode and verify shapes fixed per context bucket, so that one CUDA graph serves every step of
         * the bucket: the decode attention's splits come from the bucket (blocks past a sequence's
         * context exit at once) and the block table rows are as long as the bucket needs. Eager steps
         * use the same shapes, so graphs and eager steps compute the same values. */
        int cb = LLMC_SPLIT_MIN;
        while (cb < s->max_ctx) cb *= 2;
        if (cb > g->opt.max_context) cb = g->opt.max_context;
        if (cb < s->max_ctx) cb = s->max_ctx; /* not reached: max_ctx <= max_context was checked */
        s->max_ctx = cb;
        s->table_stride = (cb + kv->block_size - 1) / kv->block_size;
    }
    return KILN_OK;
}

/* Packs the step's metadata into g->meta_host (after the previous step's transfer out of it has
 * finished), copies it to g->meta_dev, and points s at the device copy. */
static kiln_status stage_meta(kiln_llm_cuda *g, const kiln_llm_batch *b, llmc_step *s) {
    const kiln_llm_config *c = &g->cfg;
    const int n = b->n_tokens, ns = b->n_seqs, half = kiln_llm_rope_dim(c) / 2;
    KILN_CUDA_TRY(cudaEventSynchronize(g->meta_done));
    int32_t *hi = (int32_t *)g->meta_host;
    const int32_t *di = (const int32_t *)g->meta_dev;
    size_t off = 0;
#define PUT(field, count)                                                                          \
    do {                                                                                           \
        s->field = di + off;                                                                       \
        off += (size_t)(count);                                                                    \
    } while (0)
    memcpy(hi + off, b->tokens, (size_t)n * 4);
    PUT(tokens, n);
    memcpy(hi + off, b->positions, (size_t)n * 4);
    PUT(positions, n);
    for (int i = 0; i < ns; i++)
        for (int t = b->seq_start[i]; t < b->seq_start[i + 1]; t++) hi[off + t] = i;
    PUT(tok_seq, n);
    kiln_llm_batch_logit_rows(b, hi + off);
    PUT(out_rows, s->n_out);
    memcpy(hi + off, b->seq_start, (size_t)(ns + 1) * 4);
    PUT(seq_start, ns + 1);
    memcpy(hi + off, b->ctx_len, (size_t)ns * 4);
    PUT(ctx_len, ns);
    const int ncopy = s->table_stride < b->max_blocks_per_seq ? s->table_stride : b->max_blocks_per_seq;
    for (int i = 0; i < ns; i++) {
        int32_t *row = hi + off + (size_t)i * s->table_stride;
        memcpy(row, b->block_table + (size_t)i * b->max_blocks_per_seq, (size_t)ncopy * 4);
        if (ncopy < s->table_stride) memset(row + ncopy, 0, (size_t)(s->table_stride - ncopy) * 4); /* unused */
    }
    PUT(table, (size_t)ns * s->table_stride);
#undef PUT
    size_t bytes = (off * 4 + 7) / 8 * 8;
    if (c->arch == KILN_LLM_LLAMA) {
        /* dynamic NTK scaling and LongRoPE depend on each sequence's length; the others share one table */
        const bool per_seq = c->rope_scaling == KILN_ROPE_DYNAMIC || c->rope_scaling == KILN_ROPE_LONGROPE;
        double *hd = (double *)((char *)g->meta_host + bytes);
        for (int i = 0; i < (per_seq ? ns : 1); i++) kiln_llm_rope_inv_freq(c, b->ctx_len[i], hd + (size_t)i * half);
        s->inv_freq = (const double *)((const char *)g->meta_dev + bytes);
        s->inv_freq_stride = per_seq ? half : 0;
        bytes += (size_t)(per_seq ? ns : 1) * half * 8;
    }
    if (bytes > g->meta_bytes)
        return kiln_error(KILN_ERR_INTERNAL, "llm cuda: step metadata of %zu bytes exceeds the %zu staged", bytes,
                          g->meta_bytes);
    KILN_CUDA_TRY(cudaMemcpyAsync(g->meta_dev, g->meta_host, bytes, cudaMemcpyHostToDevice, g->kc.stream));
    KILN_CUDA_TRY(cudaEventRecord(g->meta_done, g->kc.stream));
    return KILN_OK;
}

/* ---------------------------------------------------------------- profiling */

/* An op's stage (KILN_LLM_STAGE_*), or PROF_START: the mark before the first. */
#define PROF_START KILN_LLM_STAGES

/* With profiling on, records an event after an op of stage cls (PROF_START: before the first). */
static void prof_mark(kiln_llm_cuda *g, int cls) {
    if (!g->prof_on || g->prof_n >= g->prof_cap) return;
    if (cudaEventRecord(g->prof_ev[g->prof_n], g->kc.stream) != cudaSuccess) {
        g->prof_on = false; /* timings lost, the step itself is unaffected */
        return;
    }
    g->prof_cls[g->prof_n++] = (unsigned char)cls;
}

static double host_ms(void) {
    struct timespec ts;
    timespec_get(&ts, TIME_UTC);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

/* The host gate: holds the stream until the host has enqueued the step (or 200 ms passed, so that a
 * full launch queue cannot deadlock), so the events time the kernels, not the host's launch gaps. */
static void CUDART_CB prof_gate_fn(void *p) {
    int *flag = (int *)p;
    const double t0 = host_ms();
    while (!__atomic_load_n(flag, __ATOMIC_ACQUIRE) && host_ms() - t0 < 200.0) {
    }
}

/* Starts profiling a step: events (made on first use), the gate, the start event. */
static kiln_status prof_begin(kiln_llm_cuda *g) {
    if (!g->prof_ev) {
        const int cap = 12 * g->cfg.n_layer + 16;
        g->prof_ev = calloc((size_t)cap, sizeof *g->prof_ev);
        g->prof_cls = calloc((size_t)cap, 1);
        g->prof_gate = calloc(1, sizeof *g->prof_gate);
        if (!g->prof_ev || !g->prof_cls || !g->prof_gate) return kiln_error(KILN_ERR_OUT_OF_MEMORY, "out of memory");
        for (int i = 0; i < cap; i++) {
            KILN_CUDA_TRY(cudaEventCreate(&g->prof_ev[i]));
            g->prof_cap = i + 1;
        }
    }
    if (!g->prof_gate || g->prof_cap < 1) return kiln_error(KILN_ERR_OUT_OF_MEMORY, "llm cuda: profiling events unavailable");
    __atomic_store_n(g->prof_gate, 0, __ATOMIC_RELEASE);
    KILN_CUDA_TRY(cudaLaunchHostFunc(g->kc.stream, prof_gate_fn, g->prof_gate));
    g->prof_n = 0;
    g->prof_on = true;
    prof_mark(g, PROF_START);
    return KILN_OK;
}

/* Adds the finished step's event intervals to the probe by class. */
static kiln_status prof_collect(kiln_llm_cuda *g, kiln_llm_cuda_probe *pr) {
    KILN_CUDA_TRY(cudaStreamSynchronize(g->kc.stream));
    double st[KILN_LLM_STAGES] = {0};
    for (int i = 1; i < g->prof_n; i++) {
        float ms = 0.0f;
        KILN_CUDA_TRY(cudaEventElapsedTime(&ms, g->prof_ev[i - 1], g->prof_ev[i]));
        if (g->prof_cls[i] < KILN_LLM_STAGES) st[g->prof_cls[i]] += ms;
    }
    for (int i = 0; i < KILN_LLM_STAGES; i++) pr->stage_ms[i] += st[i];
    const double gemm = st[KILN_LLM_STAGE_QKV] + st[KILN_LLM_STAGE_O] + st[KILN_LLM_STAGE_UP] + st[KILN_LLM_STAGE_DOWN];
    const double other = st[KILN_LLM_STAGE_NORM] + st[KILN_LLM_STAGE_ROPE] + st[KILN_LLM_STAGE_ACT] +
                         st[KILN_LLM_STAGE_EMBED];
    pr->gemm_ms += gemm;
    pr->attn_ms += st[KILN_LLM_STAGE_ATTN];
    pr->other_ms += other;
    pr->logits_ms += st[KILN_LLM_STAGE_LM_HEAD];
    pr->gpu_ms += gemm + st[KILN_LLM_STAGE_ATTN] + other + st[KILN_LLM_STAGE_LM_HEAD];
    pr->steps++;
    return KILN_OK;
}

/* Runs one op and marks its end for the profile. */
#define OP(cls, call)                                                                              \
    do {                                                                                           \
        KILN_TRY(call);                                                                            \
        prof_mark(g, cls);                                                                         \
    } while (0)

/* ---------------------------------------------------------------- the fused layers */

/* Whether the step runs fused_layers: fusion on, every matrix in the dtype (the fused GEMV reads 16-bit
 * weights; INT8 and FP8 ones take llmc_linear_q) and every product of it (n token rows, logits rows included)
 * on the fused GEMV. */
static bool fused_step(const kiln_llm_cuda *g, const llmc_step *s) {
    const kiln_llm_config *c = &g->cfg;
    const int n = s->n_tokens, qd = c->n_head * c->head_dim;
    const bool int8 = g->lm_head_s || (c->n_layer > 0 && g->layers[0].qkv_s);
    return g->fuse != LLMC_FUSE_OFF && !int8 && n <= g->opt.gemv_max_tokens && s->n_out >= 1 &&
           llmc_gemv_fused_fits(n, c->d_model, true) && llmc_gemv_fused_fits(n, qd, false) &&
           llmc_gemv_fused_fits(n, c->d_ff, false);
}

/* A fused product of n rows: p's configuration is llmc_linear's for the same product (the unfused
 * operands x, ldx, y, ldy stand in while it is timed), then p is launched. */
static kiln_status fused_product(kiln_llm_cuda *g, llmc_gemv_fused *p, const void *x, int ldx, void *y, int ldy) {
    const int rows = p->epilogue == LLMC_EPI_SWIGLU || p->epilogue == LLMC_EPI_GEGLU ? 2 * p->N : p->N;
    KILN_TRY(llmc_gemv_config(g, x, ldx, p->n, p->K, p->w, p->bias, rows, y, ldy, p->out_f32, &p->cfg));
    return llmc_gemv_fused_launch(p, g->kc.stream);
}

/* The fused product's common fields: n rows of K inputs, N outputs, weights w and bias. */
static llmc_gemv_fused fused_of(const kiln_llm_cuda *g, int n, int K, int N, const void *w, const void *bias) {
    llmc_gemv_fused p;
    memset(&p, 0, sizeof p);
    p.dtype = g->dtype;
    p.n = n;
    p.K = K;
    p.N = N;
    p.w = w;
    p.bias = bias;
    p.res = g->x;
    p.ldres = g->cfg.d_model;
    p.pdl = g->fuse == LLMC_FUSE_PDL;
    p.sm_count = g->kc.sm_count;
    return p;
}

/* The norm prologue over the residual rows (rows: NULL, or the logits rows) with norm w, b. */
static void fused_norm(const kiln_llm_cuda *g, llmc_gemv_fused *p, const int32_t *rows, const float *w,
                       const float *b) {
    p->prologue = LLMC_PRO_NORM;
    p->rows = rows;
    p->norm_w = w;
    p->norm_b = b;
    p->norm_w_offset = kiln_llm_norm_offset(&g->cfg);
    p->eps = g->cfg.norm_eps;
}

/* The step as fused_step allows: per layer the QKV product with norm1 in its prologue, RoPE + KV write,
 * attention, the output product adding itself to the residual, the up product with norm2 before and
 * the activation after it, the down product adding itself to the residual; the final norm in the
 * lm_head's prologue. x is whole after every residual epilogue: nothing is pending between layers. */
static kiln_status fused_layers(kiln_llm_cuda *g, kiln_llm_cuda_kv *kv, const llmc_step *s) {
    const kiln_llm_config *c = &g->cfg;
    const int n = s->n_tokens, d = c->d_model, ff = c->d_ff, qd = c->n_head * c->head_dim;
    const int ldq = qd + 2 * c->n_kv_head * c->head_dim, gpt2 = c->arch == KILN_LLM_GPT2, up = gpt2 ? ff : 2 * ff;
    const int act = gpt2 ? LLMC_EPI_GELU : c->gate_act == KILN_GATE_GELU_TANH ? LLMC_EPI_GEGLU : LLMC_EPI_SWIGLU;
    OP(KILN_LLM_STAGE_EMBED, llmc_embed(g, s));
    for (int l = 0; l < s->n_layers; l++) {
        const llmc_layer *y = &g->layers[l];
        void *kc, *vc;
        llmc_kv_layer(kv, l, &kc, &vc);
        llmc_gemv_fused qkv = fused_of(g, n, d, ldq, y->qkv_w, y->qkv_b);
        fused_norm(g, &qkv, NULL, y->norm1_w, y->norm1_b);
        qkv.y = g->qkv;
        qkv.ldy = ldq;
        OP(KILN_LLM_STAGE_QKV, fused_product(g, &qkv, g->h, d, g->qkv, ldq));
        const float *kv_scales = llmc_kv_layer_scales(kv, l); /* NULL: a 16-bit cache */
        OP(KILN_LLM_STAGE_ROPE, llmc_rope_kv_write(g, s, kc, vc, kv_scales, kv->block_size));
        OP(KILN_LLM_STAGE_ATTN, llmc_attention(g, s, kc, vc, kv_scales, kv->block_size));
        llmc_gemv_fused o = fused_of(g, n, qd, d, y->o_w, y->o_b);
        o.x = g->att;
        o.ldx = qd;
        o.epilogue = LLMC_EPI_RESIDUAL;
        OP(KILN_LLM_STAGE_O, fused_product(g, &o, g->att, qd, g->proj, d));
        llmc_gemv_fused u = fused_of(g, n, d, ff, y->up_w, y->up_b);
        fused_norm(g, &u, NULL, y->norm2_w, y->norm2_b);
        u.epilogue = act;
        u.y = g->mlp;
        u.ldy = up;
        OP(KILN_LLM_STAGE_UP, fused_product(g, &u, g->h, d, g->mlp, up));
        llmc_gemv_fused dn = fused_of(g, n, ff, d, y->down_w, y->down_b);
        dn.x = g->mlp;
        dn.ldx = up;
        dn.epilogue = LLMC_EPI_RESIDUAL;
        OP(KILN_LLM_STAGE_DOWN, fused_product(g, &dn, g->mlp, up, g->proj, d));
    }
    llmc_gemv_fused head = fused_of(g, s->n_out, d, c->vocab, g->lm_head, NULL);
    fused_norm(g, &head, s->out_rows, g->norm_f_w, g->norm_f_b);
    head.y = g->logits;
    head.ldy = c->vocab;
    head.out_f32 = true;
    OP(KILN_LLM_STAGE_LM_HEAD, fused_product(g, &head, g->h, d, g->logits, c->vocab));
    return KILN_OK;
}

/* ---------------------------------------------------------------- the unfused layers */

/* A layer's product y[n, N] = x[n, K] W^T + bias (in the dtype): FP8 matrices (g->f8) through llmc_linear_q
 * with slot's static activation scale, the others through llmc_linear_wa (W8A8 when act > 0). */
static kiln_status layer_linear(kiln_llm_cuda *g, int slot, const void *x, int ldx, int n, int K, const void *w,
                                const float *scale, float act, const void *bias, int N, void *y, int ldy) {
    if (g->f8) return llmc_linear_q(g, slot, x, ldx, n, K, w, scale, bias, N, y, ldy, false);
    return llmc_linear_wa(g, x, ldx, n, K, w, scale, act, bias, N, y, ldy, false);
}

/* Enqueues the step's kernels and products: fused_layers when fused_step, else op by op. */
static kiln_status run_layers(kiln_llm_cuda *g, kiln_llm_cuda_kv *kv, const llmc_step *s) {
    if (fused_step(g, s)) return fused_layers(g, kv, s);
    const kiln_llm_config *c = &g->cfg;
    const int n = s->n_tokens, d = c->d_model, ff = c->d_ff, qd = c->n_head * c->head_dim;
    const int ldq = qd + 2 * c->n_kv_head * c->head_dim, up = c->arch == KILN_LLM_GPT2 ? ff : 2 * ff;
    OP(KILN_LLM_STAGE_EMBED, llmc_embed_q(g, s));
    for (int l = 0; l < s->n_layers; l++) {
        const llmc_layer *y = &g->layers[l];
        void *kc, *vc;
        llmc_kv_layer(kv, l, &kc, &vc);
        /* x += previous layer's MLP output (nothing before layer 0); h = norm1(x) */
        OP(KILN_LLM_STAGE_NORM, llmc_add_norm(g, n, NULL, l ? g->proj : NULL, l > 0, y->norm1_w, y->norm1_b));
        OP(KILN_LLM_STAGE_QKV, layer_linear(g, KILN_LLM_ACT_QKV(l), g->h, d, n, d, y->qkv_w, y->qkv_s, y->qkv_a,
                                            y->qkv_b, ldq, g->qkv, ldq));
        const float *kv_scales = llmc_kv_layer_scales(kv, l); /* NULL: a 16-bit cache */
        OP(KILN_LLM_STAGE_ROPE, llmc_rope_kv_write(g, s, kc, vc, kv_scales, kv->block_size));
        OP(KILN_LLM_STAGE_ATTN, llmc_attention(g, s, kc, vc, kv_scales, kv->block_size));
        OP(KILN_LLM_STAGE_O, layer_linear(g, KILN_LLM_ACT_O(l), g->att, qd, n, qd, y->o_w, y->o_s, y->o_a, y->o_b, d,
                                          g->proj, d));
        OP(KILN_LLM_STAGE_NORM, llmc_add_norm(g, n, NULL, g->proj, true, y->norm2_w, y->norm2_b)); /* x += attention; h = norm2(x) */
        OP(KILN_LLM_STAGE_UP, layer_linear(g, KILN_LLM_ACT_UP(l), g->h, d, n, d, y->up_w, y->up_s, y->up_a, y->up_b, up,
                                           g->mlp, up));
        OP(KILN_LLM_STAGE_ACT, llmc_activation(g, n));
        OP(KILN_LLM_STAGE_DOWN, layer_linear(g, KILN_LLM_ACT_DOWN(l), g->mlp, up, n, ff, y->down_w, y->down_s, y->down_a,
                                             y->down_b, d, g->proj, d));
    }
    /* the logits rows only: x + last MLP output, final norm, lm_head in FP32 */
    OP(KILN_LLM_STAGE_NORM, llmc_add_norm(g, s->n_out, s->out_rows, g->proj, false, g->norm_f_w, g->norm_f_b));
    OP(KILN_LLM_STAGE_LM_HEAD, llmc_linear_q(g, KILN_LLM_ACT_LM_HEAD(c), g->h, d, s->n_out, d, g->lm_head, g->lm_head_s,
                                             NULL, c->vocab, g->logits, c->vocab, true));
    return KILN_OK;
}
#undef OP

/* ---------------------------------------------------------------- CUDA graphs of decode and verify steps */

#define GRAPH_KEY 8

typedef struct llmc_graph {
    int64_t key[GRAPH_KEY]; /* n_seqs, context bucket, table stride, cache data, cache blocks, block size, layers,
                               tokens */
    int state;              /* GRAPH_SEEN, GRAPH_READY or GRAPH_FAILED */
    cudaGraphExec_t exec;
} llmc_graph;

enum { GRAPH_SEEN = 1, GRAPH_READY, GRAPH_FAILED };

void llmc_graphs_free(kiln_llm_cuda *g) {
    for (int i = 0; g->graphs && i < g->n_graphs; i++)
        if (g->graphs[i].exec) cudaGraphExecDestroy(g->graphs[i].exec);
    free(g->graphs);
    g->graphs = NULL;
    g->n_graphs = 0;
    for (int i = 0; g->prof_ev && i < g->prof_cap; i++) cudaEventDestroy(g->prof_ev[i]);
    free(g->prof_ev);
    free(g->prof_cls);
    free(g->prof_gate);
    g->prof_ev = NULL;
    g->prof_cls = NULL;
    g->prof_gate = NULL;
    g->prof_cap = 0;
}

/* Runs the step's layers eagerly under the setup lock: a shape not seen before may make cuBLASLt
 * plans, time GEMV configurations (which synchronizes) or load library kernels (cuda_device.h). */
static kiln_status run_eager(kiln_llm_cuda *g, kiln_llm_cuda_kv *kv, const llmc_step *s) {
    kiln_cuda_setup_lock();
    const kiln_status st = run_layers(g, kv, s);
    kiln_cuda_setup_unlock();
    return st;
}

/* The step a capture enqueues (kiln_cuda_capture's argument). */
typedef struct step_run {
    kiln_llm_cuda *g;
    kiln_llm_cuda_kv *kv;
    const llmc_step *s;
} step_run;

static kiln_status run_layers_once(void *arg) {
    const step_run *r = arg;
    return run_layers(r->g, r->kv, r->s);
}

/* Runs the step's layers: from the step shape's graph when there is one (decode and verify steps with
 * graphs on), else enqueued kernel by kernel. A shape is run eagerly the first time (which also makes its
 * cuBLASLt plans), captured and replayed from the second; a capture that fails leaves the shape
 * eager for good. The metadata transfer is already enqueued before (the graph reads its buffer). */
static kiln_status run_step(kiln_llm_cuda *g, kiln_llm_cuda_kv *kv, const llmc_step *s) {
    kiln_llm_cuda_probe *pr = g->opt.probe;
    if (!s->graph || !g->opt.use_graphs || (pr && (pr->eager || pr->profile))) return run_eager(g, kv, s);
    const int64_t key[GRAPH_KEY] = {s->n_seqs, s->max_ctx, s->table_stride, (int64_t)(uintptr_t)kv->data,
                                    kv->n_blocks, kv->block_size, s->n_layers, s->n_tokens};
    llmc_graph *e = NULL;
    for (int i = 0; i < g->n_graphs && !e; i++)
        if (!memcmp(g->graphs[i].key, key, sizeof key)) e = &g->graphs[i];
    if (!e) {
        if (!g->graphs) g->graphs = calloc(LLMC_GRAPHS, sizeof *g->graphs);
        if (!g->graphs || g->n_graphs >= LLMC_GRAPHS) return run_eager(g, kv, s); /* no room: eager */
        e = &g->graphs[g->n_graphs++];
        memcpy(e->key, key, sizeof key);
        e->state = GRAPH_SEEN;
        e->exec = NULL;
        return run_eager(g, kv, s);
    }
    if (e->state == GRAPH_READY) {
        KILN_CUDA_TRY(cudaGraphLaunch(e->exec, g->kc.stream));
        if (pr) pr->graph_replays++;
        return KILN_OK;
    }
    if (e->state == GRAPH_FAILED) return run_eager(g, kv, s);
    /* second sight: capture */
    e->state = GRAPH_FAILED; /* unless all goes well */
    char why[sizeof pr->graph_error]; /* sizeof: pr is not read */
    step_run r = {g, kv, s};
    cudaGraphExec_t exec = NULL;
    if (kiln_cuda_capture(g->kc.stream, cudaStreamCaptureModeThreadLocal, run_layers_once, &r, &exec, why, sizeof why) !=
        KILN_OK)
        snprintf(why, sizeof why, "%s", kiln_last_error());
    if (!exec) {
        if (pr) snprintf(pr->graph_error, sizeof pr->graph_error, "%.*s", (int)sizeof pr->graph_error - 1, why);
        return run_eager(g, kv, s);
    }
    e->exec = exec;
    e->state = GRAPH_READY;
    if (pr) pr->graphs_captured++;
    KILN_CUDA_TRY(cudaGraphLaunch(e->exec, g->kc.stream));
    if (pr) pr->graph_replays++;
    return KILN_OK;
}

kiln_status kiln_llm_cuda_forward(kiln_llm_cuda *g, kiln_llm_cuda_kv *kv, const kiln_llm_batch *b, float *logits,
                                  int32_t *greedy) {
    kiln_llm_cuda_probe *pr = g->opt.probe;
    const bool prof = pr && pr->profile;
    const double t0 = prof ? host_ms() : 0.0;
    llmc_step s;
    KILN_TRY(check_batch(g, kv, b, &s));
    KILN_CUDA_TRY(cudaSetDevice(g->opt.device));
    g->last_rows = 0;
    KILN_TRY(stage_meta(g, b, &s));
    bool argmax_done = false;
    if (prof) {
        KILN_TRY(prof_begin(g));
        kiln_status st = run_step(g, kv, &s);
        if (st == KILN_OK && greedy) { /* timed as a stage of its own (graphs leave it out too) */
            st = llmc_argmax(g, s.n_out);
            prof_mark(g, KILN_LLM_STAGE_ARGMAX);
            argmax_done = true;
        }
        const double t1 = host_ms();
        __atomic_store_n(g->prof_gate, 1, __ATOMIC_RELEASE);
        const bool timed = g->prof_on;
        g->prof_on = false;
        KILN_TRY(st);
        if (timed) {
            pr->enqueue_ms += t1 - t0;
            KILN_TRY(prof_collect(g, pr));
        }
    } else {
        KILN_TRY(run_step(g, kv, &s));
    }
    llmc_tactics_save(g); /* what the step timed */
    g->last_rows = s.n_out;
    const size_t rows = (size_t)s.n_out;
    if (greedy) {
        if (!argmax_done) KILN_TRY(llmc_argmax(g, s.n_out));
        KILN_CUDA_TRY(cudaMemcpyAsync(greedy, g->ids, rows * 4, cudaMemcpyDeviceToHost, g->kc.stream));
    }
    if (logits)
        KILN_CUDA_TRY(cudaMemcpyAsync(logits, g->logits, rows * (size_t)g->cfg.vocab * 4, cudaMemcpyDeviceToHost,
                                      g->kc.stream));
    if (greedy || logits) KILN_CUDA_TRY(cudaStreamSynchronize(g->kc.stream));
    return KILN_OK;
}
