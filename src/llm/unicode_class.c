/* unicode_class.c — the class lookup over the generated range table (ASCII by direct tests, the rest
 * by binary search). */
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

