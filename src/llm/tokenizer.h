/* tokenizer.h — BPE tokenizers as a Hugging Face tokenizer.json describes them, byte-level (GPT-2,
 * Llama-3, Qwen2 / Qwen2.5, and the ones `tokenizers` trains with ByteLevelBPETokenizer or models.BPE +
 * pre_tokenizers.ByteLevel) and SentencePiece style (Llama 2, Mistral, Phi-3, Gemma): encode text to
 * token ids and decode ids back, with the same ids as `tokenizers` gives.
 *
 * What is read: model BPE (vocab; merges as "a b" strings or [a, b] pairs; ignore_merges;
 * byte_fallback; unk_token, fuse_unk), added_tokens (matched in the text before pre-tokenization,
 * special or not, with lstrip / rstrip / single_word), normalizer null, NFC, Prepend, Replace of a
 * string (or a Sequence of them), pre_tokenizer ByteLevel (add_prefix_space, use_regex with GPT-2's
 * pattern) or a Sequence of Split (the GPT-2, Llama-3 or Qwen2 regex, behavior Isolated, invert false)
 * and ByteLevel stages, with decoder ByteLevel; or, without ByteLevel (the BPE then works on UTF-8
 * characters), pre_tokenizer null / Metaspace / Split (also on a string, with any behavior but invert)
 * and decoder Metaspace or a Sequence of Replace,
 * ByteFallback, Fuse and a final Strip of leading spaces; post_processor null / ByteLevel / TemplateProcessing (its single-sequence template) or a
 * Sequence of them. An optional tokenizer_config.json next to it gives bos_token, eos_token,
 * add_bos_token and add_eos_token. Anything else is refused with KILN_ERR_UNSUPPORTED naming it;
 * truncation and padding settings are ignored.
 *
 * A loaded tokenizer is immutable: any number of threads may encode and decode with it at once.
 * kiln_tokenizer_load, _free and _encode are public (include/kiln/kiln_tokenizer.h). */
#ifndef KILN_LLM_TOKENIZER_H
#define KILN_LLM_TOKENIZER_H

#include "kiln/kiln.h"
#include "kiln/kiln_tokenizer.h"
#include "core/strbuf.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The same from texts in memory: tokenizer.json (json[0..json_len)) and, unless config is NULL,
 * tokenizer_config.json; `what` names them in errors (e.g. the engine file they came from). */
kiln_status kiln_tokenizer_load_memory(const char *json, size_t json_len, const char *config, size_t config_len,
                                       const char *what, kiln_tokenizer **out);
/* Decodes ids[0..n) into *text (malloc'ed, NUL-terminated, the caller frees it) of *len bytes, as
 * `tokenizers`' decode: the ByteLevel decoder's bytes, with every invalid UTF-8 sequence replaced by
 * U+FFFD; or, SentencePiece style, the tokens' texts with the decoder's Replace, each run of
 * ByteFallback tokens as its bytes (one U+FFFD per token when they are not valid UTF-8), and the
 * Strip of leading spaces; with skip_special, special tokens are left out. Errors: KILN_ERR_INVALID_ARGUMENT for an
 * id that names no token; KILN_ERR_OUT_OF_MEMORY. */
kiln_status kiln_tokenizer_decode(const kiln_tokenizer *tok, const int32_t *ids, size_t n, bool skip_special,
                                  char **text, size_t *len);

/* The bytes one token decodes to (possibly part of a UTF-8 character: a ByteFallback "<0xXX>" token
 * gives its byte), *len of them, before any Strip of leading spaces; NULL (and *len 0) for an id that
 * names no token. Valid while tok lives. */
const char *kiln_tokenizer_token_text(const kiln_tokenizer *tok, int32_t id, size_t *len);

/* One past the largest token id (the model vocabulary and the added tokens). */
int32_t kiln_tokenizer_vocab_size(const kiln_tokenizer *tok);
/* The bos / eos ids: tokenizer_config.json's bos_token / eos_token; without them, bos is the first
 * special token of the post-processor's template, and both fall back to "<|endoftext|>" (GPT-2's
 * convention) when that token exists. -1 when unknown. */
int32_t kiln_tokenizer_bos_id(const kiln_tokenizer *tok);
int32_t kiln_tokenizer_eos_id(const kiln_tokenizer *tok);
/* The id of the token whose text is `token` (an added token, else a vocabulary entry as the
 * vocabulary spells it: byte-level "Ġthe", SentencePiece style "▁the"), or -1. */
int32_t kiln_tokenizer_find(const kiln_tokenizer *tok, const char *token);
/* True when id is a special added token (skipped by decode's skip_special). */
bool kiln_tokenizer_is_special(const kiln_tokenizer *tok, int32_t id);

/* Streaming decode for generation, one token at a time: each push appends to `out` the text that
 * is complete so far (UTF-8 characters split across tokens are held back until their last byte
 * arrives; with the ByteFallback decoder a run of "<0xXX>" tokens is held until it ends, as its
 * text depends on all of it). The concatenation of every push and the final flush equals
 * kiln_tokenizer_decode of the same ids, except when a run of more than KILN_TOK_STREAM_RUN byte
 * tokens, valid UTF-8 up to there (its whole characters are then let out), turns invalid later. Zero-initialise (or
 * kiln_tokenizer_stream_init) before the first push. */
#define KILN_TOK_STREAM_RUN 64
typedef struct kiln_tokenizer_stream {
    unsigned char pending[KILN_TOK_STREAM_RUN]; /* an incomplete UTF-8 character, or a ByteFallback run */
    int npending;
    bool byte_run;    /* pending is a ByteFallback run (invalid: U+FFFD per byte) */
    bool run_broken;  /* the current run is invalid already: each further byte token is one U+FFFD */
    bool past_start;  /* text other than stripped leading spaces has been let out */
    int strip_left;   /* leading spaces the decoder's Strip still removes, once set_strip is true */
    bool set_strip;
} kiln_tokenizer_stream;

void kiln_tokenizer_stream_init(kiln_tokenizer_stream *s);
/* Appends the newly completed text after token id (nothing for a special token with skip_special).
 * Errors: KILN_ERR_INVALID_ARGUMENT for an id that names no token (the stream is unchanged);
 * KILN_ERR_OUT_OF_MEMORY when out failed. */
kiln_status kiln_tokenizer_stream_push(const kiln_tokenizer *tok, kiln_tokenizer_stream *s, int32_t id,
                                       bool skip_special, kiln_strbuf *out);
/* Appends U+FFFD for a held-back incomplete character, if any, and resets the stream. */
void kiln_tokenizer_stream_flush(kiln_tokenizer_stream *s, kiln_strbuf *out);

#ifdef __cplusplus
}
#endif
#endif
