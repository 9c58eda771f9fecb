/* llm_batch.c — kiln_llm_batch_check: the rules of a ragged forward step (llm.h), checked the same way
 * for the CPU and the CUDA forward. */
#include "llm/llm.h"

#include "core/status.h"

#include <stddef.h>

kiln_status kiln_llm_batch_check(const kiln_llm_config *c, const kiln_llm_batch *b, int block_size, int n_blocks,
                                 bool (*block_taken)(const void *kv, int block), const void *kv) {
    if (b->n_tokens < 1 || b->n_seqs < 1)
        return kiln_error(KILN_ERR_INVALID_ARGUMENT, "batch: %d tokens in %d sequences (at least one of each needed)",
                          b->n_tokens, b->n_seqs);
    if (b->exit_layers < 0 || b->exit_layers > c->n_layer)
        return kiln_error(KILN_ERR_INVALID_ARGUMENT, "batch: exit_layers is %d, outside 0 .. the model's %d layers",
                          b->exit_layers, c->n_layer);
    if (b->seq_start[0] != 0 || b->seq_start[b->n_seqs] != b->n_tokens)
        return kiln_error(KILN_ERR_INVALID_ARGUMENT, "batch: seq_start must run from 0 to n_tokens %d (got %d .. %d)",
                          b->n_tokens, b->seq_start[0], b->seq_start[b->n_seqs]);
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
        const int nb = (ctx + block_size - 1) / block_size;
        if (nb > b->max_blocks_per_seq)
            return kiln_error(KILN_ERR_INVALID_ARGUMENT,
                              "batch: sequence %d needs %d cache blocks for %d tokens but max_blocks_per_seq is %d", i, nb,
                              ctx, b->max_blocks_per_seq);
        for (int j = 0; j < nb; j++) {
            const int blk = b->block_table[(size_t)i * b->max_blocks_per_seq + j];
            if (!block_taken(kv, blk))
                return kiln_error(KILN_ERR_INVALID_ARGUMENT,
                                  "batch: sequence %d block table entry %d is %d, not a block allocated from the cache "
                                  "(%d blocks)", i, j, blk, n_blocks);
        }
        if (b->n_logits && (b->all_logits || b->n_logits[i] < 1 || b->n_logits[i] > n))
            return kiln_error(KILN_ERR_INVALID_ARGUMENT,
                              "batch: sequence %d asks for the logits of %d of its %d new tokens (1 .. %d, and "
                              "not with all_logits)", i, b->n_logits[i], n, n);
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
    }
    return KILN_OK;
}

int kiln_llm_batch_logit_rows(const kiln_llm_batch *b, int32_t *rows) {
    int n = 0;
    for (int i = 0; i < b->n_seqs; i++) {
        const int end = b->seq_start[i + 1];
        const int want = b->all_logits ? end - b->seq_start[i] : b->n_logits ? b->n_logits[i] : 1;
        for (int t = end - want; t < end; t++, n++)
            if (rows) rows[n] = t;
    }
    return n;
}
