/* test_sha256.c — SHA-256 (src/core/sha256.c) against FIPS 180-4's examples and sha256sum's
 * digests at every padding boundary (55, 56, 63, 64, 65 bytes) and of a million 'a's. */
#include "core/sha256.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int failures;

static void check(const char *what, const void *data, size_t n, const char *want) {
    char got[65];
    kiln_sha256_hex(data, n, got);
    if (strcmp(got, want)) {
        fprintf(stderr, "FAIL %s: got %s want %s\n", what, got, want);
        failures++;
    }
}

int main(void) {
    check("empty", NULL, 0, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
    check("abc", "abc", 3, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    const char *two_blocks = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
    check("448 bits", two_blocks, strlen(two_blocks),
          "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
    static const struct { size_t n; const char *hex; } XS[] = {
        {55, "9f4390f8d30c2dd92ec9f095b65e2b9ae9b0a925a5258e241c9f1e910f734318"},
        {56, "b35439a4ac6f0948b6d6f9e3c6af0f5f590ce20f1bde7090ef7970686ec6738a"},
        {63, "7d3e74a05d7db15bce4ad9ec0658ea98e3f06eeecf16b4c6fff2da457ddc2f34"},
        {64, "ffe054fe7ae0cb6dc65c3af9b61d5209f439851db43d0ba5997337df154668eb"},
        {65, "635361c48bb9eab14198e76ea8ab7f1a41685d6ad62aa9146d301d4f17eb0ae0"},
    };
    char xs[65];
    memset(xs, 'a', sizeof xs);
    for (size_t i = 0; i < sizeof XS / sizeof XS[0]; i++) check("a^n", xs, XS[i].n, XS[i].hex);
    char *million = malloc(1000000);
    memset(million, 'a', 1000000);
    check("a^1000000", million, 1000000, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
    free(million);
    if (failures) return 1;
    printf("test_sha256: ok\n");
    return 0;
}
