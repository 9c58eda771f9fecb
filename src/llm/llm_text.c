/* llm_text.c — kiln_llm's tokenizer calls (kiln/kiln_llm.h): encode, decode, one token's bytes. The
 * tokenizer is immutable, so any thread may call these at any time. */
#include "llm/llm_api_internal.h"

#include "core/status.h"

static kiln_status need_tokenizer(const kiln_llm *llm, const char *fn) {
    if (!llm) return kiln_error(KILN_ERR_INVALID_ARGUMENT, "%s: llm is NULL", fn);
    if (!llm->bundle.tok) return kiln_error(KILN_ERR_INVALID_ARGUMENT, "%s: this model has no tokenizer", fn);
    return KILN_OK;
}

kiln_status kiln_llm_tokenize(const kiln_llm *llm, const char *text, size_t len, bool add_special, int32_t **ids,
                              size_t *n) {
    KILN_TRY(need_tokenizer(llm, "kiln_llm_tokenize"));
    return kiln_tokenizer_encode(llm->bundle.tok, text ? text : "", text ? len : 0, add_special, ids, n);
}

kiln_status kiln_llm_detokenize(const kiln_llm *llm, const int32_t *ids, size_t n, bool keep_special, char **text,
                                size_t *len) {
    KILN_TRY(need_tokenizer(llm, "kiln_llm_detokenize"));
    return kiln_tokenizer_decode(llm->bundle.tok, ids, n, !keep_special, text, len);
}

const char *kiln_llm_token_text(const kiln_llm *llm, int32_t id, size_t *len) {
    *len = 0;
    return llm && llm->bundle.tok ? kiln_tokenizer_token_text(llm->bundle.tok, id, len) : NULL;
}
