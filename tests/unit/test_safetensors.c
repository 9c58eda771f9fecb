/* test_safetensors.c — the safetensors reader (src/hf/safetensors.c) on a valid image, on that image
 * cut at every byte and with every header byte flipped (errors, never crashes), on a table of
 * malformed headers (each error names the tensor or the problem), on a header of 200,000 tensors (with
 * and without a duplicate name), and through a real file; plus the FP32 conversion of F16 / BF16
 * tensors. Writes its files in the working directory. Exit 0 = pass. */
#include "check.h"
#include "core/half.h"
#include "hf/checkpoint.h"
#include "hf/safetensors.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A safetensors image: 8-byte length, header, data. Caller frees. */
static unsigned char *image(const char *header, const void *data, size_t data_len, size_t *len) {
    size_t h = strlen(header);
    *len = 8 + h + data_len;
    unsigned char *b = malloc(*len);
    for (int i = 0; i < 8; i++) b[i] = (unsigned char)((uint64_t)h >> (8 * i));
    memcpy(b + 8, header, h);
    if (data_len) memcpy(b + 8 + h, data, data_len);
    return b;
}

static const char *g_good =
    "{\"__metadata__\":{\"format\":\"pt\"},"
    "\"a\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,24]},"
    "\"b\":{\"dtype\":\"BF16\",\"shape\":[2],\"data_offsets\":[24,28]},"
    "\"c\":{\"dtype\":\"F16\",\"shape\":[2],\"data_offsets\":[28,32]},"
    "\"d\":{\"dtype\":\"I64\",\"shape\":[],\"data_offsets\":[32,40]},"
    "\"e\":{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[40,40]}}  ";

/* The 40 data bytes of g_good: a = 0..5, b = {1.5, -2}, c = {0.25, 3}, d = 7. */
static void good_data(unsigned char *d) {
    for (int i = 0; i < 6; i++) {
        float f = (float)i;
        memcpy(d + 4 * i, &f, 4);
    }
    uint16_t h[4] = {kiln_f32_to_bf16(1.5f), kiln_f32_to_bf16(-2.0f), kiln_f32_to_f16(0.25f), kiln_f32_to_f16(3.0f)};
    memcpy(d + 24, h, 8);
    int64_t seven = 7;
    memcpy(d + 32, &seven, 8);
}

static void test_good(void) {
    unsigned char data[40];
    good_data(data);
    size_t len;
    unsigned char *img = image(g_good, data, sizeof data, &len);
    kiln_safetensors st;
    CHECK(kiln_safetensors_parse(img, len, "good", &st) == KILN_OK);
    CHECK(st.n_tensors == 5 && !kiln_safetensors_find(&st, "__metadata__"));
    const kiln_st_tensor *a = kiln_safetensors_find(&st, "a"), *b = kiln_safetensors_find(&st, "b"),
                         *c = kiln_safetensors_find(&st, "c"), *d = kiln_safetensors_find(&st, "d"),
                         *e = kiln_safetensors_find(&st, "e");
    CHECK(a && a->dtype == KILN_F32 && a->ndim == 2 && a->dims[0] == 2 && a->dims[1] == 3 && a->nbytes == 24);
    CHECK(d && d->dtype == KILN_I64 && d->ndim == 0 && d->nbytes == 8);
    CHECK(e && e->nbytes == 0 && e->ndim == 1 && e->dims[0] == 0);
    float f[6];
    CHECK(a && kiln_hf_tensor_to_f32(a, f) == KILN_OK && f[5] == 5.0f);
    CHECK(b && kiln_hf_tensor_to_f32(b, f) == KILN_OK && f[0] == 1.5f && f[1] == -2.0f);
    CHECK(c && kiln_hf_tensor_to_f32(c, f) == KILN_OK && f[0] == 0.25f && f[1] == 3.0f);
    CHECK(d && kiln_hf_tensor_to_f32(d, f) == KILN_ERR_UNSUPPORTED);
    kiln_safetensors_close(&st);
    kiln_safetensors_close(&st); /* closing twice is harmless */

    /* every truncation fails (the last tensor ends at the last byte); so does an empty image */
    for (size_t n = 0; n < len; n++) {
        kiln_safetensors t;
        CHECK(kiln_safetensors_parse(img, n, "cut", &t) != KILN_OK);
        CHECK(t.n_tensors == 0 && t.tensors == NULL);
    }
    /* flipped bytes in the length and header: any status, never a crash; valid results stay in bounds */
    unsigned char *flip = malloc(len);
    for (size_t i = 0; i < 8 + strlen(g_good); i++)
        for (int bit = 0; bit < 8; bit += 3) {
            memcpy(flip, img, len);
            flip[i] ^= (unsigned char)(1u << bit);
            kiln_safetensors t;
            if (kiln_safetensors_parse(flip, len, "flip", &t) == KILN_OK) {
                for (int k = 0; k < t.n_tensors; k++)
                    CHECK((const unsigned char *)t.tensors[k].data + t.tensors[k].nbytes <= flip + len);
                kiln_safetensors_close(&t);
            }
        }
    free(flip);
    free(img);
}

/* A header that must fail with status `want`, with `mention` in the message. */
static void expect_bad(const char *header, size_t data_len, kiln_status want, const char *mention) {
    unsigned char data[64] = {0};
    size_t len;
    unsigned char *img = image(header, data, data_len, &len);
    kiln_safetensors st;
    kiln_status s = kiln_safetensors_parse(img, len, "bad.safetensors", &st);
    const char *msg = kiln_last_error();
    if (s != want || !strstr(msg, mention) || !strstr(msg, "bad.safetensors")) {
        fprintf(stderr, "FAIL header %s: status %s, message '%s' (wanted %s mentioning '%s')\n", header,
                kiln_status_name(s), msg, kiln_status_name(want), mention);
        failures++;
    }
    if (s == KILN_OK) kiln_safetensors_close(&st);
    free(img);
}

static void test_bad_headers(void) {
    expect_bad("[]", 0, KILN_ERR_PARSE, "not a JSON object");
    expect_bad("{\"a\":1}", 0, KILN_ERR_PARSE, "'a'");
    expect_bad("{\"a\":{\"shape\":[1],\"data_offsets\":[0,4]}}", 4, KILN_ERR_PARSE, "dtype");
    expect_bad("{\"a\":{\"dtype\":\"Q4\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4, KILN_ERR_UNSUPPORTED, "Q4");
    expect_bad("{\"a\":{\"dtype\":\"F32\",\"data_offsets\":[0,4]}}", 4, KILN_ERR_PARSE, "shape");
    expect_bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[-1],\"data_offsets\":[0,4]}}", 4, KILN_ERR_PARSE, "'a'");
    expect_bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[1.5],\"data_offsets\":[0,4]}}", 4, KILN_ERR_PARSE, "'a'");
    expect_bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[1,1,1,1,1,1,1,1,1],\"data_offsets\":[0,4]}}", 4,
               KILN_ERR_UNSUPPORTED, "dimensions");
    expect_bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[1]}}", 4, KILN_ERR_PARSE, "data_offsets");
    expect_bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4,8]}}", 8, KILN_ERR_PARSE, "data_offsets");
    expect_bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,0]}}", 8, KILN_ERR_PARSE, "'a'");
    expect_bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]}}", 8, KILN_ERR_PARSE, "outside");
    expect_bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[2,2],\"data_offsets\":[0,12]}}", 16, KILN_ERR_PARSE, "need 16");
    expect_bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296],\"data_offsets\":[0,4]}}", 4,
               KILN_ERR_PARSE, "overflow");
    expect_bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]},"
               "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,16]}}",
               16, KILN_ERR_PARSE, "overlap");
    expect_bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
               "\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}",
               8, KILN_ERR_PARSE, "twice");
    expect_bad("{\"a\":{\"dtype\":\"F32\",", 0, KILN_ERR_PARSE, "invalid JSON");

    /* a header length beyond the file, and one beyond the 100 MB limit */
    unsigned char b[16] = {0x20, 0, 0, 0, 0, 0, 0, 0, '{', '}'};
    kiln_safetensors st;
    CHECK(kiln_safetensors_parse(b, 10, "short", &st) == KILN_ERR_PARSE && strstr(kiln_last_error(), "truncated"));
    b[0] = 0;
    b[4] = 1; /* 2^32 */
    CHECK(kiln_safetensors_parse(b, 16, "huge", &st) == KILN_ERR_PARSE && strstr(kiln_last_error(), "100 MB"));
    b[4] = 0;
    b[0] = 2; /* "{}": no tensors is valid */
    CHECK(kiln_safetensors_parse(b, 10, "empty", &st) == KILN_OK && st.n_tensors == 0);
    kiln_safetensors_close(&st);
}

static void test_file(void) {
    unsigned char data[40];
    good_data(data);
    size_t len;
    unsigned char *img = image(g_good, data, sizeof data, &len);
    const char *path = "test_safetensors.safetensors";
    FILE *f = fopen(path, "wb");
    CHECK(f && fwrite(img, 1, len, f) == len);
    if (f) fclose(f);
    kiln_safetensors st;
    CHECK(kiln_safetensors_open(path, &st) == KILN_OK && st.n_tensors == 5);
    const kiln_st_tensor *a = kiln_safetensors_find(&st, "a");
    float v[6];
    CHECK(a && kiln_hf_tensor_to_f32(a, v) == KILN_OK && v[3] == 3.0f);
    kiln_safetensors_close(&st);
    /* the same file cut short names the file and the tensor that no longer fits */
    f = fopen(path, "wb");
    CHECK(f && fwrite(img, 1, len - 1, f) == len - 1);
    if (f) fclose(f);
    CHECK(kiln_safetensors_open(path, &st) == KILN_ERR_PARSE && strstr(kiln_last_error(), path) &&
          strstr(kiln_last_error(), "'d'"));
    CHECK(kiln_safetensors_open("no_such_dir/x.safetensors", &st) == KILN_ERR_IO &&
          strstr(kiln_last_error(), "no_such_dir/x.safetensors"));
    remove(path);
    free(img);
}

/* A header of 200,000 empty tensors loads, and the same with its last name repeated is refused
 * naming it: names are checked for duplicates by sorting (a check per entry against all earlier ones
 * took 2e10 comparisons here, and a 100 MB header could hold 1.8 million entries). */
static void test_many_tensors(void) {
    enum { N = 200000 };
    const char *entry = "\"t%06d\":{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[0,0]},";
    size_t cap = (size_t)N * 64 + 64, len;
    char *hdr = malloc(cap);
    size_t n = (size_t)snprintf(hdr, cap, "{"), last = 0;
    for (int i = 0; i < N; i++) {
        last = n;
        n += (size_t)snprintf(hdr + n, cap - n, entry, i);
    }
    snprintf(hdr + n - 1, cap - n + 1, "}");
    unsigned char *img = image(hdr, NULL, 0, &len);
    kiln_safetensors st;
    CHECK_OK(kiln_safetensors_parse(img, len, "many", &st));
    CHECK(st.n_tensors == N && kiln_safetensors_find(&st, "t199999") == &st.tensors[N - 1]);
    kiln_safetensors_close(&st);
    free(img);
    memcpy(hdr + last + 2, "000007", 6); /* the last entry's name becomes a second "t000007" */
    img = image(hdr, NULL, 0, &len);
    CHECK(kiln_safetensors_parse(img, len, "many", &st) == KILN_ERR_PARSE &&
          strstr(kiln_last_error(), "tensor 't000007' appears twice"));
    free(img);
    free(hdr);
}

int main(void) {
    test_good();
    test_bad_headers();
    test_many_tensors();
    test_file();
    return checks_report("test_safetensors");
}
