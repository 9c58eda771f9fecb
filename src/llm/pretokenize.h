/* pretokenize.h — the pre-tokenizer split patterns of byte-level BPE tokenizers, as hand-written
 * matchers: kiln recognizes the exact regex strings of GPT-2, Llama-3 and Qwen2 in a tokenizer.json and
 * runs an equivalent matcher instead of a regex engine. All of them match at every position (the
 * last alternatives take any single character), so splitting a text with one of them ("Isolated":
 * every match is a piece) is: match at the start, cut, repeat. */
#ifndef KILN_LLM_PRETOKENIZE_H
#define KILN_LLM_PRETOKENIZE_H

#include <stddef.h>

typedef enum kiln_pretok_pattern {
    KILN_PRETOK_NONE = 0,
    /* 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+ */
    KILN_PRETOK_GPT2,
    /* (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|
     * \s*[\r\n]+|\s+(?!\S)|\s+ */
    KILN_PRETOK_LLAMA3,
    /* Llama-3's with \p{N} for \p{N}{1,3} (Qwen2, Qwen2.5): every digit alone */
    KILN_PRETOK_QWEN2,
} kiln_pretok_pattern;

/* The pattern whose regex string is exactly `regex`, or KILN_PRETOK_NONE. */
kiln_pretok_pattern kiln_pretok_pattern_of(const char *regex);

/* The byte length (>= 1) of the pattern's match at the start of s[0..n), n >= 1, as Oniguruma (which
 * Hugging Face tokenizers uses) finds it. Bytes that are not valid UTF-8 count as single characters
 * of class "other". */
size_t kiln_pretok_match(kiln_pretok_pattern p, const char *s, size_t n);

#endif
