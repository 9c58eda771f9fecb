/* llm_draft.c — the draft model of speculative decoding (kiln_llm_options.draft): opened next to the
 * target on the same target and device, refused unless it shares the target's vocabulary (the same
 * logits width and, when both carry tokenizers, the same token for every id) and covers its context,
 * with a KV cache of the target's block count and size for the scheduler (scheduler_draft.c); or,
 * "layers:N", the target's own first N layers with its final norm and lm_head (early-exit
 * self-speculation), on the target's runner and cache. */
#include "llm/llm_api_internal.h"
#include "llm/llm_internal.h"

#include "core/status.h"
#include "llm/llm_random.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define EARLY_EXIT "layers:"

/* The first id whose token differs between the two tokenizers, or -1 when they agree. */
static int32_t first_token_difference(const kiln_tokenizer *a, const kiln_tokenizer *b) {
    const int32_t n = kiln_tokenizer_vocab_size(a);
    if (n != kiln_tokenizer_vocab_size(b)) return 0;
    for (int32_t id = 0; id < n; id++) {
        size_t la = 0, lb = 0;
        const char *ta = kiln_tokenizer_token_text(a, id, &la), *tb = kiln_tokenizer_token_text(b, id, &lb);
        if (la != lb || (la && memcmp(ta, tb, la))) return id;
    }
    return -1;
}

static kiln_status check_draft(const kiln_llm *llm, const char *name, const kiln_llm_config *dc,
                               const kiln_tokenizer *dtok, int max_context) {
    if (dc->vocab != llm->cfg.vocab)
        return kiln_error(KILN_ERR_INVALID_ARGUMENT, "draft model %s has a vocabulary of %d tokens and the target %d: "
                          "a draft model must share the target's tokenizer", name, dc->vocab, llm->cfg.vocab);
    if (dtok && llm->bundle.tok) {
        int32_t id = first_token_difference(llm->bundle.tok, dtok);
        if (id >= 0)
            return kiln_error(KILN_ERR_INVALID_ARGUMENT, "draft model %s has another tokenizer than the target (token "
                              "%d differs): a draft model must share the target's tokenizer", name, id);
    }
    if (dc->max_pos < max_context)
        return kiln_error(KILN_ERR_INVALID_ARGUMENT, "draft model %s has a context of %d tokens, shorter than the "
                          "target's %d (set max_context to at most %d)", name, dc->max_pos, max_context, dc->max_pos);
    return KILN_OK;
}

/* The early-exit draft "layers:N" (spec: what follows the prefix) of the target llm->runner. */
static kiln_status open_early_exit(kiln_llm *llm, const char *spec) {
    char *end = NULL;
    const long n = strtol(spec, &end, 10);
    const int n_layer = llm->cfg.n_layer;
    if (end == spec || *end || n < 1 || n >= n_layer)
        return kiln_error(KILN_ERR_INVALID_ARGUMENT, "draft \"" EARLY_EXIT "%s\": an early-exit draft takes the "
                          "target's first N layers, 1 <= N < %d (the target's layers)", spec, n_layer);
    llm->exit_draft = (llm_runner_exit){.runner = llm->runner, .n_layers = (int)n};
    return KILN_OK;
}

kiln_status llm_draft_open(kiln_llm *llm, const char *draft, const llm_runner_options *ro, bool random_shape,
                           uint64_t seed) {
    if (!strncmp(draft, EARLY_EXIT, strlen(EARLY_EXIT))) return open_early_exit(llm, draft + strlen(EARLY_EXIT));
    const bool cuda = !strcmp(ro->target, "cuda");
    llm_runner_options dro = *ro;
    dro.max_tokens += dro.max_seqs; /* a draft step may also run the token each sequence missed */
    dro.draft_tokens = 0;           /* it verifies nothing */
    char desc[320];
    if (random_shape) {
        kiln_llm_shape sh;
        KILN_TRY(kiln_llm_shape_find(draft, &sh));
        KILN_TRY(check_draft(llm, draft, &sh.cfg, NULL, ro->max_context));
        return llm_runner_create_random(&sh.cfg, seed, &dro, desc, sizeof desc, &llm->draft_runner);
    }
    KILN_TRY(kiln_llm_bundle_open(draft, true, cuda, &llm->draft_bundle));
    KILN_TRY(check_draft(llm, draft, kiln_llm_model_config(llm->draft_bundle.model), llm->draft_bundle.tok,
                         ro->max_context));
    dro.bf16 = llm->draft_bundle.weights == KILN_PRECISION_BF16;
    if (!cuda) kiln_llm_model_weights_to_hugepages(llm->draft_bundle.model);
    KILN_TRY(llm_runner_create(llm->draft_bundle.model, &dro, desc, sizeof desc, &llm->draft_runner));
    if (cuda) { /* the weights are on the device */
        kiln_llm_model_free(llm->draft_bundle.model);
        llm->draft_bundle.model = NULL;
    }
    return KILN_OK;
}

kiln_status llm_draft_make_cache(kiln_llm *llm) {
    if (!llm->draft_runner) return KILN_OK;
    const kiln_kv_cache_config *kc = kiln_kv_cache_get_config(llm->kv);
    kiln_status st = llm_runner_make_cache(llm->draft_runner, kc->n_blocks, kc->block_size, true, &llm->draft_kv);
    return st == KILN_OK ? KILN_OK : kiln_error_prefix(st, "the draft model's KV cache");
}

void llm_draft_schedule(kiln_llm *llm, kiln_scheduler_config *sc) {
    if (llm->draft_runner) {
        sc->draft_forward = llm_runner_forward;
        sc->draft_model = llm->draft_runner;
        sc->draft_kv = llm->draft_kv;
        sc->draft_sample = llm_runner_sample_fn(llm->draft_runner);
    } else if (llm->exit_draft.n_layers) {
        sc->draft_forward = llm_runner_forward_exit;
        sc->draft_model = &llm->exit_draft;
        sc->draft_kv = llm->kv; /* the draft's keys and values are the target's */
        sc->draft_sample = llm_runner_sample_fn(llm->runner) ? llm_runner_sample_exit : NULL;
    }
}

void llm_draft_close(kiln_llm *llm) {
    kiln_kv_cache_free(llm->draft_kv);
    llm_runner_free(llm->draft_runner);
    kiln_llm_bundle_free(&llm->draft_bundle);
    llm->draft_kv = NULL;
    llm->draft_runner = NULL;
}
