/* kiln_tokenizer.h — the public C API of kiln's standalone tokenizer: load a Hugging Face
 * tokenizer.json (byte-level BPE, as src/llm/tokenizer.h describes what is read) and encode text
 * into token ids, e.g. for an encoder model that takes input_ids. Errors follow kiln.h: a
 * kiln_status and a message for the calling thread in kiln_last_error(). A loaded tokenizer is
 * immutable: any number of threads may encode with it at once. */
#ifndef KILN_TOKENIZER_PUBLIC_H
#define KILN_TOKENIZER_PUBLIC_H

#include "kiln/kiln.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct kiln_tokenizer kiln_tokenizer;

/* Loads path_or_dir: a tokenizer.json file, or a directory holding one. tokenizer_config.json in the
 * same directory is read when present. Errors: KILN_ERR_IO (file missing or unreadable),
 * KILN_ERR_PARSE (bad JSON, a missing or mistyped field, a merge of unknown tokens),
 * KILN_ERR_UNSUPPORTED (a model, normalizer, pre-tokenizer, pattern, decoder or post-processor kiln
 * does not implement), KILN_ERR_OUT_OF_MEMORY; each message names the file and the field. On
 * success the caller owns *out (kiln_tokenizer_free). */
kiln_status kiln_tokenizer_load(const char *path_or_dir, kiln_tokenizer **out);
/* Frees a tokenizer; accepts NULL. */
void kiln_tokenizer_free(kiln_tokenizer *tok);

/* Encodes text[0..len) (UTF-8; invalid bytes are encoded as their own bytes) into *ids (malloc'ed,
 * the caller frees it; may be NULL when *n is 0). add_special applies the post-processor (e.g. the
 * bos token of Llama-3), as `tokenizers`' add_special_tokens=True. Errors: KILN_ERR_OUT_OF_MEMORY. */
kiln_status kiln_tokenizer_encode(const kiln_tokenizer *tok, const char *text, size_t len, bool add_special,
                                  int32_t **ids, size_t *n);

#ifdef __cplusplus
}
#endif
#endif
