/* unicode_class.h — what the tokenizer needs of Unicode beyond UTF-8 (core/utf8.h): the class of a
 * code point among letter, number, white space and other, from the generated range table
 * unicode_tables.c (scripts/gen_unicode_tables.py). */
#ifndef KILN_LLM_UNICODE_CLASS_H
#define KILN_LLM_UNICODE_CLASS_H

#include "core/utf8.h"

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

#endif
