/* utf8.h — one UTF-8 code point at a time: decoding (invalid bytes tolerated, one at a time) and
 * encoding. Shared by the JSON reader (core/json_read.c) and the tokenizer (src/llm/). */
#ifndef KILN_CORE_UTF8_H
#define KILN_CORE_UTF8_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Decodes the code point at s[0..n) (n >= 1) into *cp and returns its byte length (1..4). A byte
 * that does not start a valid, complete, shortest-form sequence of a scalar value is returned alone
 * as length 1 with *cp = 0xFFFFFFFF. */
int kiln_utf8_next(const unsigned char *s, size_t n, uint32_t *cp);

/* Writes the UTF-8 form of code point cp (< 0x110000) into out (room for 4); returns the byte count. */
int kiln_utf8_put(uint32_t cp, char *out);

#ifdef __cplusplus
}
#endif
#endif
