/* unicode_class.c — UTF-8 decoding and encoding of single code points, and the class lookup over the
 * generated range table (ASCII by direct tests, the rest by binary search). */
#include "llm/unicode_class.h"

/* The classes of ASCII (the common case, no search): \t..\r and ' ' are space, digits numbers,
 * A-Z a-z letters, the rest other. */
static kiln_uc_class ascii_class(uint32_t c) {
    if ((c >= 0x09 && c <= 0x0D) || c == 0x20) return KILN_UC_SPACE;
    if (c >= '0' && c <= '9') return KILN_UC_NUMBER;
    if ((c | 0x20) >= 'a' && (c | 0x20) <= 'z') return KILN_UC_LETTER;
    return KILN_UC_OTHER;
}

kiln_uc_class kiln_uc_class_of(uint32_t cp) {
    if (cp < 0x80) return ascii_class(cp);
    int lo = 0, hi = kiln_uc_nranges - 1;
    while (lo <= hi) {
        int mid = (lo + hi) / 2;
        if (cp < kiln_uc_ranges[mid].lo) hi = mid - 1;
        else if (cp > kiln_uc_ranges[mid].hi) lo = mid + 1;
        else return (kiln_uc_class)kiln_uc_ranges[mid].cls;
    }
    return KILN_UC_OTHER;
}

int kiln_utf8_next(const unsigned char *s, size_t n, uint32_t *cp) {
    unsigned char c = s[0];
    if (c < 0x80) { *cp = c; return 1; }
    int len;
    uint32_t v, min;
    if (c >= 0xC2 && c <= 0xDF) { len = 2; v = c & 0x1F; min = 0x80; }
    else if (c >= 0xE0 && c <= 0xEF) { len = 3; v = c & 0x0F; min = 0x800; }
    else if (c >= 0xF0 && c <= 0xF4) { len = 4; v = c & 0x07; min = 0x10000; }
    else { *cp = 0xFFFFFFFFu; return 1; }
    if (n < (size_t)len) { *cp = 0xFFFFFFFFu; return 1; }
    for (int i = 1; i < len; i++) {
        if ((s[i] & 0xC0) != 0x80) { *cp = 0xFFFFFFFFu; return 1; }
        v = (v << 6) | (s[i] & 0x3F);
    }
    if (v < min || v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF)) { *cp = 0xFFFFFFFFu; return 1; }
    *cp = v;
    return len;
}

int kiln_utf8_put(uint32_t cp, char *out) {
    if (cp < 0x80) { out[0] = (char)cp; return 1; }
    if (cp < 0x800) {
        out[0] = (char)(0xC0 | (cp >> 6));
        out[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        out[0] = (char)(0xE0 | (cp >> 12));
        out[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        out[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    out[0] = (char)(0xF0 | (cp >> 18));
    out[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    out[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
    out[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}
