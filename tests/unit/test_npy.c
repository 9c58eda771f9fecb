/* test_npy.c — the .npy reader and writer (src/core/npy.h): a written array reads back identical;
 * headers of numpy's format versions 1 and 2; and bad input: bad magic, unknown versions and dtypes,
 * Fortran order, malformed shapes, every truncation of a valid file, and shapes far larger than the
 * file (refused as truncated before anything is allocated, also when their byte count overflows 64
 * bits: found by fuzz/fuzz_npy.c). Exit 0 = pass. */
#include "check.h"
#include "core/npy.h"

#include <stdint.h>
#include <stdio.h>
#include <string.h>

/* A version-1 .npy image of header text h (padded with spaces and a newline, as numpy pads it) and
 * ndata bytes of data 0, 1, 2, ... into buf; returns its size. */
static size_t make_v1(unsigned char *buf, size_t cap, const char *h, size_t ndata) {
    size_t hl = strlen(h), total = 10 + hl + 1;
    size_t pad = (64 - total % 64) % 64, hlen = hl + pad + 1;
    if (10 + hlen + ndata > cap) return 0;
    memcpy(buf, "\x93NUMPY\x01\x00", 8);
    buf[8] = (unsigned char)(hlen & 0xff);
    buf[9] = (unsigned char)(hlen >> 8);
    memcpy(buf + 10, h, hl);
    memset(buf + 10 + hl, ' ', pad);
    buf[10 + hlen - 1] = '\n';
    for (size_t i = 0; i < ndata; i++) buf[10 + hlen + i] = (unsigned char)i;
    return 10 + hlen + ndata;
}

/* parse(image) fails with want and a message containing needle. */
static void check_bad(const unsigned char *img, size_t n, kiln_status want, const char *needle) {
    kiln_tensor t;
    kiln_status s = kiln_npy_parse(img, n, "bad.npy", &t);
    CHECKF(s == want && strstr(kiln_last_error(), needle) && t.data == NULL, "got %s: %s (want %s, '%s')",
           kiln_status_name(s), kiln_last_error(), kiln_status_name(want), needle);
}

static void test_roundtrip(void) {
    kiln_tensor t = {0}, back;
    REQUIRE_OK(kiln_tensor_alloc(&t, KILN_F32, 2, (const int64_t[]){2, 3}));
    for (int i = 0; i < 6; i++) ((float *)t.data)[i] = (float)i - 2.5f;
    REQUIRE_OK(kiln_npy_write("test_npy.npy", &t));
    CHECK_OK(kiln_npy_read("test_npy.npy", &back));
    CHECK(back.dtype == KILN_F32 && back.ndim == 2 && back.dims[0] == 2 && back.dims[1] == 3 &&
          back.nbytes == t.nbytes && !memcmp(back.data, t.data, t.nbytes));
    kiln_tensor_release(&back);
    kiln_tensor_release(&t);
    remove("test_npy.npy");
}

static void test_headers(void) {
    unsigned char img[512];
    kiln_tensor t;
    size_t n = make_v1(img, sizeof img, "{'descr': '<i8', 'fortran_order': False, 'shape': (3,), }", 24);
    CHECK_OK(kiln_npy_parse(img, n, "v1.npy", &t));
    CHECK(t.dtype == KILN_I64 && t.ndim == 1 && t.dims[0] == 3 && ((int64_t *)t.data)[0] == 0x0706050403020100);
    kiln_tensor_release(&t);
    n = make_v1(img, sizeof img, "{'descr': '|b1', 'fortran_order': False, 'shape': (), }", 1);
    CHECK_OK(kiln_npy_parse(img, n, "scalar.npy", &t));
    CHECK(t.dtype == KILN_BOOL && t.ndim == 0 && t.nbytes == 1);
    kiln_tensor_release(&t);
    n = make_v1(img, sizeof img, "{'descr': '<f4', 'fortran_order': False, 'shape': (0, 5), }", 0);
    CHECK_OK(kiln_npy_parse(img, n, "empty.npy", &t));
    CHECK(t.ndim == 2 && t.dims[0] == 0 && t.nbytes == 0);
    kiln_tensor_release(&t);
    /* version 2: a 4-byte header length */
    n = make_v1(img + 2, sizeof img - 2, "{'descr': '<u2', 'fortran_order': False, 'shape': (2,), }", 4);
    size_t hlen = (size_t)img[10] | (size_t)img[11] << 8;
    memcpy(img, "\x93NUMPY\x02\x00", 8);
    img[8] = (unsigned char)(hlen & 0xff), img[9] = (unsigned char)(hlen >> 8), img[10] = img[11] = 0;
    CHECK_OK(kiln_npy_parse(img, n + 2, "v2.npy", &t));
    CHECK(t.dtype == KILN_U16 && t.dims[0] == 2);
    kiln_tensor_release(&t);
}

static void test_bad(void) {
    unsigned char img[512];
    size_t n = make_v1(img, sizeof img, "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 2), }", 16);
    for (size_t cut = 0; cut < n; cut++) check_bad(img, cut, KILN_ERR_PARSE, "bad.npy");
    img[0] = 'x';
    check_bad(img, n, KILN_ERR_PARSE, "bad magic");
    img[0] = 0x93, img[6] = 4;
    check_bad(img, n, KILN_ERR_UNSUPPORTED, "version 4");
    n = make_v1(img, sizeof img, "{'descr': '>f4', 'fortran_order': False, 'shape': (1,), }", 4);
    check_bad(img, n, KILN_ERR_UNSUPPORTED, "'>f4'");
    n = make_v1(img, sizeof img, "{'descr': '<f4', 'fortran_order': True, 'shape': (1,), }", 4);
    check_bad(img, n, KILN_ERR_UNSUPPORTED, "Fortran");
    n = make_v1(img, sizeof img, "{'descr': '<f4', 'fortran_order': False, 'shape': (1, -2), }", 8);
    check_bad(img, n, KILN_ERR_PARSE, "shape");
    n = make_v1(img, sizeof img, "{'descr': '<f4', 'fortran_order': False, 'shape': (1,1,1,1,1,1,1,1,1), }", 4);
    check_bad(img, n, KILN_ERR_PARSE, "too many dims");
    n = make_v1(img, sizeof img, "{'descr': '<f4', 'shape': (1,), }", 4);
    check_bad(img, n, KILN_ERR_PARSE, "lacks");
}

/* A header may claim any shape: one far larger than the file is refused as truncated, never allocated
 * (13 GB here, which ASan's allocator would refuse), and a byte count past 2^64 does not wrap. */
static void test_huge_shapes(void) {
    unsigned char img[512];
    size_t n = make_v1(img, sizeof img, "{'descr': '<f8', 'fortran_order': False, 'shape': (1661434248,), }", 8);
    check_bad(img, n, KILN_ERR_PARSE, "13291473984 bytes expected, 8 present");
    n = make_v1(img, sizeof img,
                "{'descr': '<f4', 'fortran_order': False, 'shape': (1099511627776, 1099511627776, 4), }", 8);
    check_bad(img, n, KILN_ERR_PARSE, "over 2^64 bytes expected");
}

int main(void) {
    test_roundtrip();
    test_headers();
    test_bad();
    test_huge_shapes();
    return checks_report("test_npy");
}
