/* unicode_norm.h — Unicode Normalization Form C (NFC), the normalizer of Qwen2's tokenizer.json: the
 * canonical decomposition, canonical ordering and canonical composition of UAX #15, from the
 * generated tables of unicode_norm_tables.c (scripts/gen_unicode_norm_tables.py). */
#ifndef KILN_LLM_UNICODE_NORM_H
#define KILN_LLM_UNICODE_NORM_H

#include "core/strbuf.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Code point cp decomposes to kiln_un_pool[off .. off + len) (fully, canonically). */
typedef struct kiln_un_decomp {
    uint32_t cp, off, len;
} kiln_un_decomp;

/* Code points [lo, hi] have canonical combining class ccc (> 0). */
typedef struct kiln_un_combining {
    uint32_t lo, hi, ccc;
} kiln_un_combining;

/* a followed by b composes to c (a primary composite). */
typedef struct kiln_un_pair {
    uint32_t a, b, c;
} kiln_un_pair;

/* Generated tables, each sorted (by cp, lo, then (a, b)). */
extern const uint32_t kiln_un_pool[];
extern const kiln_un_decomp kiln_un_decomps[];
extern const int kiln_un_ndecomps;
extern const kiln_un_combining kiln_un_combinings[];
extern const int kiln_un_ncombinings;
extern const kiln_un_pair kiln_un_pairs[];
extern const int kiln_un_npairs;

/* Appends the NFC form of the UTF-8 text s[0..n) to out. Bytes that are not valid UTF-8 are copied
 * as they are and act as boundaries nothing composes across. Returns false when out of memory (out
 * is then failed). */
bool kiln_un_nfc(const char *s, size_t n, kiln_strbuf *out);

#endif
