/* unicode_class.h — what the tokenizer needs of Unicode: decoding one UTF-8 code point (invalid bytes
 * are tolerated, one at a time) and the class of a code point among letter, number, white space and
 * other, from the generated range table unicode_tables.c (scripts/gen_unicode_tables.py). */
#ifndef KILN_LLM_UNICODE_CLASS_H
#define KILN_LLM_UNICODE_CLASS_H

#include <stddef.h>
#include <stdint.h>

typedef enum kiln_uc_class {
    KILN_UC_OTHER = 0,
    KILN_UC_LETTER = 1, /* general category L*: regex \p{L} */
    KILN_UC_NUMBER = 2, /* general category N*: regex \p{N} */
    KILN_UC_SPACE = 3,  /* U+0009..U+000D, U+0085, Zs, Zl, Zp: regex \s (Oniguruma), White_Space */
} kiln_uc_class;

/* One range [lo, hi] of code points of class cls. */
typedef struct kiln_uc_range {
    uint32_t lo, hi;
    uint8_t cls;
} kiln_uc_range;

/* Sorted, non-overlapping; code points in no range are KILN_UC_OTHER (generated). */
extern const kiln_uc_range kiln_uc_ranges[];
extern const int kiln_uc_nranges;

/* The class of code point cp. */
kiln_uc_class kiln_uc_class_of(uint32_t cp);

/* Decodes the code point at s[0..n) (n >= 1) into *cp and returns its byte length (1..4). A byte
 * that does not start a valid, complete, shortest-form sequence of a scalar value is returned alone
 * as length 1 with *cp = 0xFFFFFFFF (a value of no class: "other"). */
int kiln_utf8_next(const unsigned char *s, size_t n, uint32_t *cp);

/* Writes the UTF-8 form of scalar value cp into out (room for 4); returns the byte count. */
int kiln_utf8_put(uint32_t cp, char *out);

#endif
