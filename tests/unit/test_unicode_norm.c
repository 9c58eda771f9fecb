/* test_unicode_norm.c — NFC (src/llm/unicode_norm.h) on cases that exercise each step: canonical
 * decomposition (singletons, recursive ones), reordering of combining marks, composition (blocked and
 * not), Hangul syllables, text that is already NFC, and bytes that are not UTF-8. */
#include "check.h"
#include "llm/unicode_norm.h"

#include <string.h>

/* NFC of `in` must be `want`. */
static void expect_nfc(const char *in, const char *want) {
    kiln_strbuf out = {0};
    CHECK(kiln_un_nfc(in, strlen(in), &out));
    CHECKF(out.len == strlen(want) && !memcmp(out.data, want, out.len), "NFC of \"%s\": got \"%.*s\", want \"%s\"",
           in, (int)out.len, out.data ? out.data : "", want);
    kiln_strbuf_free(&out);
}

int main(void) {
    expect_nfc("", "");
    expect_nfc("plain ASCII, Latin-1 \xc3\xa9 and \xc5\x93", "plain ASCII, Latin-1 \xc3\xa9 and \xc5\x93");
    expect_nfc("e\xcc\x81", "\xc3\xa9");                          /* e + U+0301 -> U+00E9 */
    expect_nfc("\xe2\x84\xab", "\xc3\x85");                        /* U+212B ANGSTROM SIGN -> U+00C5 */
    expect_nfc("\xe2\x84\xa6", "\xce\xa9");                        /* U+2126 OHM SIGN -> U+03A9 */
    expect_nfc("q\xcc\x87\xcc\xa3", "q\xcc\xa3\xcc\x87");          /* marks sorted: 0323 (220) before 0307 (230) */
    expect_nfc("\xe1\xb8\x8b\xcc\xa3", "\xe1\xb8\x8d\xcc\x87");    /* U+1E0B U+0323 -> U+1E0D U+0307 */
    expect_nfc("a\xcc\x81\xcc\x81", "\xc3\xa1\xcc\x81");           /* the second acute is blocked */
    expect_nfc("\xcc\x81" "e", "\xcc\x81" "e");                    /* a leading mark stays */
    expect_nfc("\xe0\xa5\x98", "\xe0\xa4\x95\xe0\xa4\xbc");        /* U+0958: excluded from composition */
    expect_nfc("\xe1\x84\x80\xe1\x85\xa1\xe1\x86\xa8", "\xea\xb0\x81"); /* Hangul L V T -> U+AC01 */
    expect_nfc("\xea\xb0\x80\xe1\x86\xa8", "\xea\xb0\x81");        /* LV + T -> LVT */
    expect_nfc("\xff" "e\xcc\x81\xfe", "\xff\xc3\xa9\xfe");        /* invalid bytes pass through */
    expect_nfc("e\xff\xcc\x81", "e\xff\xcc\x81");                  /* and block composition across them */
    return checks_report("test_unicode_norm");
}
