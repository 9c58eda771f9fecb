/* llm_cuda_forward.c — kiln_llm_cuda_forward: checks the ragged batch (as the CPU forward does, plus
 * g's limits), packs its metadata (tokens, positions, token -> sequence, logits rows, seq_start,
 * ctx_len, block tables, RoPE frequencies) into pinned memory and copies it to the device in one
 * transfer, then enqueues the step: embedding; per layer norm1 (fused with the residual add of the
 * previous layer's MLP), the QKV product, RoPE + KV cache write, attention, the output product,
 * norm2 (fused with its residual add), the MLP; the final norm over the logits rows and lm_head. */
#include "llm/cuda/llm_cuda_internal.h"

#include "core/status.h"
#include "llm/llm_internal.h"

#include <string.h>

/* Checks the cache, seq_start, and each sequence's context, blocks, positions and tokens; fills the
 * sizes of *s. */
static kiln_status check_batch(const kiln_llm_cuda *g, const kiln_llm_cuda_kv *kv, const kiln_llm_batch *b,
                               llmc_step *s) {
    const kiln_llm_config *c = &g->cfg;
    if (kv->n_layer != c->n_layer || kv->n_kv_head != c->n_kv_head || kv->head_dim != c->head_dim || kv->dtype != g->dtype ||
        kv->device != g->opt.device)
        return kiln_error(KILN_ERR_INVALID_ARGUMENT, "cuda KV cache (n_layer %d, n_kv_head %d, head_dim %d, %s, device %d) "
                          "was not made for this model (%d, %d, %d, %s, device %d)", kv->n_layer, kv->n_kv_head,
                          kv->head_dim, kiln_dtype_name(kv->dtype), kv->device, c->n_layer, c->n_kv_head, c->head_dim,
                          kiln_dtype_name(g->dtype), g->opt.device);
    if (b->n_tokens < 1 || b->n_seqs < 1)
        return kiln_error(KILN_ERR_INVALID_ARGUMENT, "batch: %d tokens in %d sequences (at least one of each needed)",
                          b->n_tokens, b->n_seqs);
    if (b->n_tokens > g->opt.max_tokens || b->n_seqs > g->opt.max_seqs)
        return kiln_error(KILN_ERR_INVALID_ARGUMENT, "batch: %d tokens in %d sequences, beyond this model's limits "
                          "(max_tokens %d, max_seqs %d)", b->n_tokens, b->n_seqs, g->opt.max_tokens, g->opt.max_seqs);
    if (b->seq_start[0] != 0 || b->seq_start[b->n_seqs] != b->n_tokens)
        return kiln_error(KILN_ERR_INVALID_ARGUMENT, "batch: seq_start must run from 0 to n_tokens %d (got %d .. %d)",
                          b->n_tokens, b->seq_start[0], b->seq_start[b->n_seqs]);
    memset(s, 0, sizeof *s);
    s->n_tokens = b->n_tokens;
    s->n_seqs = b->n_seqs;
    s->n_out = b->all_logits ? b->n_tokens : b->n_seqs;
    s->decode = true;
    for (int i = 0; i < b->n_seqs; i++) {
        const int s0 = b->seq_start[i], n = b->seq_start[i + 1] - s0, ctx = b->ctx_len[i];
        if (n < 1)
            return kiln_error(KILN_ERR_INVALID_ARGUMENT, "batch: seq_start is not increasing at sequence %d (%d then %d)",
                              i, s0, b->seq_start[i + 1]);
        if (s0 + n > b->n_tokens)
            return kiln_error(KILN_ERR_INVALID_ARGUMENT, "batch: sequence %d runs past n_tokens %d", i, b->n_tokens);
        if (ctx < n)
            return kiln_error(KILN_ERR_INVALID_ARGUMENT, "batch: sequence %d has %d new tokens but ctx_len %d", i, n, ctx);
        if (c->arch == KILN_LLM_GPT2 && ctx > c->max_pos)
            return kiln_error(KILN_ERR_INVALID_ARGUMENT,
                              "batch: sequence %d reaches position %d, beyond the model's %d positions", i, ctx - 1,
                              c->max_pos);
        if (ctx > g->opt.max_context)
            return kiln_error(KILN_ERR_INVALID_ARGUMENT, "batch: sequence %d has a context of %d tokens, beyond this "
                              "model's max_context %d", i, ctx, g->opt.max_context);
        const int nb = (ctx + kv->block_size - 1) / kv->block_size;
        if (nb > b->max_blocks_per_seq)
            return kiln_error(KILN_ERR_INVALID_ARGUMENT,
                              "batch: sequence %d needs %d cache blocks for %d tokens but max_blocks_per_seq is %d", i, nb,
                              ctx, b->max_blocks_per_seq);
        for (int j = 0; j < nb; j++) {
            const int blk = b->block_table[(size_t)i * b->max_blocks_per_seq + j];
            if (!kiln_llm_cuda_kv_block_taken(kv, blk))
                return kiln_error(KILN_ERR_INVALID_ARGUMENT,
                                  "batch: sequence %d block table entry %d is %d, not a block allocated from the cache "
                                  "(%d blocks)", i, j, blk, kv->n_blocks);
        }
        for (int t = 0; t < n; t++) {
            const int tok = b->tokens[s0 + t], pos = b->positions[s0 + t];
            if (tok < 0 || tok >= c->vocab)
                return kiln_error(KILN_ERR_INVALID_ARGUMENT, "batch: token %d (id %d) is outside the vocabulary of %d",
                                  s0 + t, tok, c->vocab);
            if (pos != ctx - n + t)
                return kiln_error(KILN_ERR_INVALID_ARGUMENT,
                                  "batch: token %d of sequence %d has position %d; with ctx_len %d and %d new tokens it "
                                  "must be %d", s0 + t, i, pos, ctx, n, ctx - n + t);
        }
        if (n > s->max_new) s->max_new = n;
        if (ctx > s->max_ctx) s->max_ctx = ctx;
        if (nb > s->table_stride) s->table_stride = nb;
        s->decode = s->decode && n == 1;
    }
    return KILN_OK;
}

/* Packs the step's metadata into g->meta_host (after the previous step's transfer out of it has
 * finished), copies it to g->meta_dev, and points s at the device copy. */
static kiln_status stage_meta(kiln_llm_cuda *g, const kiln_llm_batch *b, llmc_step *s) {
    const kiln_llm_config *c = &g->cfg;
    const int n = b->n_tokens, ns = b->n_seqs, half = c->head_dim / 2;
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
    for (int r = 0; r < s->n_out; r++) hi[off + r] = b->all_logits ? r : b->seq_start[r + 1] - 1;
    PUT(out_rows, s->n_out);
    memcpy(hi + off, b->seq_start, (size_t)(ns + 1) * 4);
    PUT(seq_start, ns + 1);
    memcpy(hi + off, b->ctx_len, (size_t)ns * 4);
    PUT(ctx_len, ns);
    for (int i = 0; i < ns; i++)
        memcpy(hi + off + (size_t)i * s->table_stride, b->block_table + (size_t)i * b->max_blocks_per_seq,
               (size_t)s->table_stride * 4);
    PUT(table, (size_t)ns * s->table_stride);
#undef PUT
    size_t bytes = (off * 4 + 7) / 8 * 8;
    if (c->arch == KILN_LLM_LLAMA) {
        /* dynamic NTK scaling depends on each sequence's length; the others share one table */
        const bool per_seq = c->rope_scaling == KILN_ROPE_DYNAMIC;
        double *hd = (double *)((char *)g->meta_host + bytes);
        for (int i = 0; i < (per_seq ? ns : 1); i++) kiln_llm_rope_inv_freq(c, b->ctx_len[i], hd + (size_t)i * half);
        s->inv_freq = (const double *)((const char *)g->meta_dev + bytes);
        s->inv_freq_stride = per_seq ? half : 0;
        bytes += (size_t)(per_seq ? ns : 1) * half * 8;
    }
    if (bytes > g->meta_bytes)
        return kiln_error(KILN_ERR_INTERNAL, "llm cuda: step metadata of %zu bytes exceeds the %zu staged", bytes,
                          g->meta_bytes);
    KILN_CUDA_TRY(cudaMemcpyAsync(g->meta_dev, g->meta_host, bytes, cudaMemcpyHostToDevice, g->stream));
    KILN_CUDA_TRY(cudaEventRecord(g->meta_done, g->stream));
    return KILN_OK;
}

/* Enqueues the step's kernels and products. */
static kiln_status run_layers(kiln_llm_cuda *g, kiln_llm_cuda_kv *kv, const llmc_step *s) {
    const kiln_llm_config *c = &g->cfg;
    const int n = s->n_tokens, d = c->d_model, ff = c->d_ff, qd = c->n_head * c->head_dim;
    const int ldq = qd + 2 * c->n_kv_head * c->head_dim, up = c->arch == KILN_LLM_GPT2 ? ff : 2 * ff;
    KILN_TRY(llmc_embed(g, s));
    for (int l = 0; l < c->n_layer; l++) {
        const llmc_layer *y = &g->layers[l];
        void *kc, *vc;
        llmc_kv_layer(kv, l, &kc, &vc);
        /* x += previous layer's MLP output (nothing before layer 0); h = norm1(x) */
        KILN_TRY(llmc_add_norm(g, n, NULL, l ? g->proj : NULL, l > 0, y->norm1_w, y->norm1_b));
        KILN_TRY(llmc_linear(g, g->h, d, n, d, y->qkv_w, y->qkv_b, ldq, g->qkv, ldq, false));
        KILN_TRY(llmc_rope_kv_write(g, s, kc, vc, kv->block_size));
        KILN_TRY(llmc_attention(g, s, kc, vc, kv->block_size));
        KILN_TRY(llmc_linear(g, g->att, qd, n, qd, y->o_w, y->o_b, d, g->proj, d, false));
        KILN_TRY(llmc_add_norm(g, n, NULL, g->proj, true, y->norm2_w, y->norm2_b)); /* x += attention; h = norm2(x) */
        KILN_TRY(llmc_linear(g, g->h, d, n, d, y->up_w, y->up_b, up, g->mlp, up, false));
        KILN_TRY(llmc_activation(g, n));
        KILN_TRY(llmc_linear(g, g->mlp, up, n, ff, y->down_w, y->down_b, d, g->proj, d, false));
    }
    /* the logits rows only: x + last MLP output, final norm, lm_head in FP32 */
    KILN_TRY(llmc_add_norm(g, s->n_out, s->out_rows, g->proj, false, g->norm_f_w, g->norm_f_b));
    return llmc_linear(g, g->h, d, s->n_out, d, g->lm_head, NULL, c->vocab, g->logits, c->vocab, true);
}

kiln_status kiln_llm_cuda_forward(kiln_llm_cuda *g, kiln_llm_cuda_kv *kv, const kiln_llm_batch *b, float *logits,
                                  int32_t *greedy) {
    llmc_step s;
    KILN_TRY(check_batch(g, kv, b, &s));
    KILN_CUDA_TRY(cudaSetDevice(g->opt.device));
    g->last_rows = 0;
    KILN_TRY(stage_meta(g, b, &s));
    KILN_TRY(run_layers(g, kv, &s));
    g->last_rows = s.n_out;
    const size_t rows = (size_t)s.n_out;
    if (greedy) {
        KILN_TRY(llmc_argmax(g, s.n_out));
        KILN_CUDA_TRY(cudaMemcpyAsync(greedy, g->ids, rows * 4, cudaMemcpyDeviceToHost, g->stream));
    }
    if (logits)
        KILN_CUDA_TRY(cudaMemcpyAsync(logits, g->logits, rows * (size_t)g->cfg.vocab * 4, cudaMemcpyDeviceToHost,
                                      g->stream));
    if (greedy || logits) KILN_CUDA_TRY(cudaStreamSynchronize(g->stream));
    return KILN_OK;
}
