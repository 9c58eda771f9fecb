/* fuzz_tokenizer.c — libFuzzer target for the tokenizer loader (llm/tokenizer_load.c and
 * tokenizer_parts.c: tokenizer.json's BPE model, added tokens, normalizer, pre-tokenizer, decoder and
 * post-processor; tokenizer_config.json's bos / eos settings), which reads the files of any downloaded
 * checkpoint and the copies an LLM engine carries. The input is tokenizer.json, then optionally a NUL
 * byte and tokenizer_config.json (kiln_tokenizer_load_memory, as an engine's are loaded). A tokenizer
 * that loads is used: a few fixed texts (ASCII, words after spaces and newlines, multi-byte and
 * invalid UTF-8, the GPT-2 end-of-text token) are encoded with and without special tokens and decoded
 * back with and without skipping them, and the same ids decoded one at a time by the streaming
 * decoder must give the same text as the whole decode. Seeds: fuzz/corpus/fuzz_tokenizer/ (small
 * byte-level BPE tokenizers: a slice of models/kjv-gpt2's, the one of tests/unit/test_tokenizer.c, a
 * Llama-3 style one with a Split pre-tokenizer and a template, a Qwen2 style one with NFC, and
 * SentencePiece-style ones in the Llama 2 and Metaspace forms). */
#include "fuzz_util.h"
#include "llm/tokenizer.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char *const g_texts[] = {
    "Hello, world! It's 2024.",
    "  In the beginning\n\nGod created\tthe heaven   and the earth.",
    "caf\xc3\xa9 \xe6\x97\xa5\xe6\x9c\xac \xf0\x9f\x8e\x89 I've we'll",
    "\xff\xfe broken \xc3 utf-8 \xe2\x82",
    "<|endoftext|>text<|endoftext|> <s></s>",
    " hello  ahello\n\xe6\x97\xa5 A <s>hello</s> z", /* SentencePiece style: merges, byte fallback, unk */
    "e\xcc\x81 \xe2\x84\xab q\xcc\x87\xcc\xa3 \xe1\x84\x80\xe1\x85\xa1 12345", /* to normalize (NFC) */
};

/* Decodes ids[0..n) whole and token by token; the two must agree. */
static void check_decode(const kiln_tokenizer *tok, const int32_t *ids, size_t n, bool skip) {
    char *text = NULL;
    size_t len = 0;
    if (kiln_tokenizer_decode(tok, ids, n, skip, &text, &len) != KILN_OK) abort(); /* ids from encode */
    kiln_strbuf streamed = {0};
    kiln_tokenizer_stream st;
    kiln_tokenizer_stream_init(&st);
    for (size_t i = 0; i < n; i++)
        if (kiln_tokenizer_stream_push(tok, &st, ids[i], skip, &streamed) != KILN_OK) abort();
    kiln_tokenizer_stream_flush(&st, &streamed);
    if (kiln_strbuf_status(&streamed) != KILN_OK || streamed.len != len || (len && memcmp(streamed.data, text, len)))
        abort();
    kiln_strbuf_free(&streamed);
    free(text);
}

/* Encodes and decodes the fixed texts, and looks up the ids the API hands out. */
static void use(const kiln_tokenizer *tok) {
    for (size_t t = 0; t < sizeof g_texts / sizeof *g_texts; t++) {
        for (int special = 0; special < 2; special++) {
            int32_t *ids = NULL;
            size_t n = 0;
            if (kiln_tokenizer_encode(tok, g_texts[t], strlen(g_texts[t]), special, &ids, &n) != KILN_OK) abort();
            for (size_t i = 0; i < n; i++)
                if (ids[i] < 0 || ids[i] >= kiln_tokenizer_vocab_size(tok)) abort();
            check_decode(tok, ids, n, false);
            check_decode(tok, ids, n, true);
            free(ids);
        }
    }
    int32_t probe[] = {0, 1, kiln_tokenizer_bos_id(tok), kiln_tokenizer_eos_id(tok), kiln_tokenizer_vocab_size(tok) - 1};
    for (size_t i = 0; i < sizeof probe / sizeof *probe; i++) {
        size_t len;
        const char *s = kiln_tokenizer_token_text(tok, probe[i], &len);
        if (s && len && fuzz_hash(FUZZ_HASH_SEED, s, len) == 0) abort();
        (void)kiln_tokenizer_is_special(tok, probe[i]);
    }
    int32_t bad = kiln_tokenizer_vocab_size(tok);
    char *text = NULL;
    size_t len = 0;
    if (kiln_tokenizer_decode(tok, &bad, 1, false, &text, &len) == KILN_OK) abort(); /* names no token */
    free(text);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fuzz_silence_log();
    const char *json = (const char *)data, *config = NULL;
    size_t json_len = size, config_len = 0;
    const uint8_t *nul = memchr(data, 0, size);
    if (nul) {
        json_len = (size_t)(nul - data);
        config = (const char *)nul + 1;
        config_len = size - json_len - 1;
    }
    kiln_tokenizer *tok = NULL;
    if (kiln_tokenizer_load_memory(json, json_len, config, config_len, "fuzz", &tok) != KILN_OK) return 0;
    use(tok);
    kiln_tokenizer_free(tok);
    return 0;
}
