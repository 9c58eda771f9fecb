/* test_protobuf.c — the protobuf wire-format decoder (src/frontends/onnx/protobuf.c): varints at
 * their edges, overlong and truncated input, fixed-width values, tags, length-delimited fields,
 * groups (nested, unmatched, too deep), packed repeated fields, and every truncation point and
 * random bytes fed to the field reader (which must return an error, never read out of bounds). */
#include "check.h"
#include "frontends/onnx/protobuf.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A reader over a heap copy of exactly n bytes, so ASan flags any read past the end. */
static kiln_pb exact(const void *data, size_t n, uint8_t **owned) {
    *owned = malloc(n ? n : 1);
    if (n) memcpy(*owned, data, n);
    return kiln_pb_make(*owned, n);
}

static size_t put_varint(uint8_t *out, uint64_t v) {
    size_t n = 0;
    do {
        out[n++] = (uint8_t)((v & 0x7f) | (v > 0x7f ? 0x80 : 0));
        v >>= 7;
    } while (v);
    return n;
}

static void test_varint_edges(void) {
    static const struct { uint64_t v; size_t len; uint8_t bytes[10]; } cases[] = {
        {0, 1, {0x00}},
        {1, 1, {0x01}},
        {127, 1, {0x7f}},
        {128, 2, {0x80, 0x01}},
        {300, 2, {0xac, 0x02}},
        {16383, 2, {0xff, 0x7f}},
        {16384, 3, {0x80, 0x80, 0x01}},
        {UINT32_MAX, 5, {0xff, 0xff, 0xff, 0xff, 0x0f}},
        {UINT64_C(1) << 63, 10, {0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x01}},
        {UINT64_MAX, 10, {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01}},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        uint8_t *buf;
        kiln_pb r = exact(cases[i].bytes, cases[i].len, &buf);
        uint64_t v = 42;
        CHECK(kiln_pb_read_varint(&r, &v) == KILN_PB_OK);
        CHECK(v == cases[i].v);
        CHECK(kiln_pb_done(&r));
        /* every proper prefix is truncated and leaves the reader where it was */
        for (size_t n = 0; n < cases[i].len; n++) {
            kiln_pb t = kiln_pb_make(buf, n);
            CHECK(kiln_pb_read_varint(&t, &v) == KILN_PB_TRUNCATED_VARINT);
            CHECK(t.p == buf);
        }
        free(buf);
    }
    /* int64 -1 as protobuf writes it (sign-extended, 10 bytes) */
    uint8_t neg[10];
    CHECK(put_varint(neg, (uint64_t)(int64_t)-1) == 10);
    kiln_pb r = kiln_pb_make(neg, 10);
    uint64_t v;
    CHECK(kiln_pb_read_varint(&r, &v) == KILN_PB_OK && (int64_t)v == -1);
    /* non-canonical but valid: zero in two bytes */
    const uint8_t padded[] = {0x80, 0x00};
    r = kiln_pb_make(padded, 2);
    CHECK(kiln_pb_read_varint(&r, &v) == KILN_PB_OK && v == 0 && kiln_pb_done(&r));
}

static void test_varint_overlong(void) {
    /* 11 bytes: more than any 64-bit value needs */
    const uint8_t eleven[] = {0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x00};
    kiln_pb r = kiln_pb_make(eleven, sizeof eleven);
    uint64_t v;
    CHECK(kiln_pb_read_varint(&r, &v) == KILN_PB_OVERLONG_VARINT);
    CHECK(r.p == eleven);
    /* 10th byte with bits beyond bit 63 */
    const uint8_t big[] = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02};
    r = kiln_pb_make(big, sizeof big);
    CHECK(kiln_pb_read_varint(&r, &v) == KILN_PB_OVERLONG_VARINT);
    /* 10th byte still continuing */
    const uint8_t cont[] = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x81, 0x00};
    r = kiln_pb_make(cont, sizeof cont);
    CHECK(kiln_pb_read_varint(&r, &v) == KILN_PB_OVERLONG_VARINT);
}

static void test_varint_roundtrip(void) {
    uint64_t x = 0x9e3779b97f4a7c15ull;
    for (int i = 0; i < 20000; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        uint64_t want = x >> (x % 64); /* spread over all lengths */
        uint8_t buf[10];
        size_t n = put_varint(buf, want);
        kiln_pb r = kiln_pb_make(buf, n);
        uint64_t got;
        CHECK(kiln_pb_read_varint(&r, &got) == KILN_PB_OK && got == want && kiln_pb_done(&r));
    }
}

static void test_zigzag(void) {
    CHECK(kiln_pb_zigzag64(0) == 0);
    CHECK(kiln_pb_zigzag64(1) == -1);
    CHECK(kiln_pb_zigzag64(2) == 1);
    CHECK(kiln_pb_zigzag64(3) == -2);
    CHECK(kiln_pb_zigzag64(UINT64_MAX - 1) == INT64_MAX);
    CHECK(kiln_pb_zigzag64(UINT64_MAX) == INT64_MIN);
    CHECK(kiln_pb_zigzag32(0) == 0);
    CHECK(kiln_pb_zigzag32(1) == -1);
    CHECK(kiln_pb_zigzag32(4294967294u) == INT32_MAX);
    CHECK(kiln_pb_zigzag32(4294967295u) == INT32_MIN);
}

static void test_fixed(void) {
    const uint8_t b[] = {0x78, 0x56, 0x34, 0x12, 0xef, 0xcd, 0xab, 0x90};
    uint8_t *buf;
    kiln_pb r = exact(b, sizeof b, &buf);
    uint32_t u32;
    uint64_t u64;
    CHECK(kiln_pb_read_fixed32(&r, &u32) == KILN_PB_OK && u32 == 0x12345678u);
    CHECK(kiln_pb_read_fixed32(&r, &u32) == KILN_PB_OK && u32 == 0x90abcdefu);
    CHECK(kiln_pb_read_fixed32(&r, &u32) == KILN_PB_TRUNCATED_FIXED);
    r = kiln_pb_make(buf, 8);
    CHECK(kiln_pb_read_fixed64(&r, &u64) == KILN_PB_OK && u64 == 0x90abcdef12345678ull);
    for (size_t n = 0; n < 8; n++) {
        kiln_pb t = kiln_pb_make(buf, n);
        CHECK(kiln_pb_read_fixed64(&t, &u64) == KILN_PB_TRUNCATED_FIXED && t.p == buf);
        if (n < 4) CHECK(kiln_pb_read_fixed32(&t, &u32) == KILN_PB_TRUNCATED_FIXED);
    }
    free(buf);
}

static void test_tags(void) {
    uint8_t buf[16];
    uint32_t field;
    kiln_pb_wire wire;
    kiln_pb r;
    size_t n;
    /* field 0 */
    buf[0] = 0x00 | KILN_PB_VARINT;
    r = kiln_pb_make(buf, 1);
    CHECK(kiln_pb_read_tag(&r, &field, &wire) == KILN_PB_BAD_FIELD_NUMBER && r.p == buf);
    /* wire types 6 and 7 */
    buf[0] = (1 << 3) | 6;
    r = kiln_pb_make(buf, 1);
    CHECK(kiln_pb_read_tag(&r, &field, &wire) == KILN_PB_BAD_WIRE_TYPE);
    buf[0] = (1 << 3) | 7;
    r = kiln_pb_make(buf, 1);
    CHECK(kiln_pb_read_tag(&r, &field, &wire) == KILN_PB_BAD_WIRE_TYPE);
    /* the largest field number */
    n = put_varint(buf, ((uint64_t)KILN_PB_MAX_FIELD << 3) | KILN_PB_I32);
    r = kiln_pb_make(buf, n);
    CHECK(kiln_pb_read_tag(&r, &field, &wire) == KILN_PB_OK && field == KILN_PB_MAX_FIELD && wire == KILN_PB_I32);
    /* one beyond it no longer fits a 32-bit tag */
    n = put_varint(buf, ((uint64_t)(KILN_PB_MAX_FIELD + 1) << 3));
    r = kiln_pb_make(buf, n);
    CHECK(kiln_pb_read_tag(&r, &field, &wire) == KILN_PB_BAD_TAG);
    /* a tag wider than 32 bits */
    n = put_varint(buf, UINT64_C(1) << 35);
    r = kiln_pb_make(buf, n);
    CHECK(kiln_pb_read_tag(&r, &field, &wire) == KILN_PB_BAD_TAG);
    /* truncated tag */
    buf[0] = 0x80;
    r = kiln_pb_make(buf, 1);
    CHECK(kiln_pb_read_tag(&r, &field, &wire) == KILN_PB_TRUNCATED_VARINT);
}

static void test_len(void) {
    const uint8_t b[] = {0x03, 'a', 'b', 'c', 0x05, 'x'};
    uint8_t *buf;
    kiln_pb r = exact(b, sizeof b, &buf), sub;
    CHECK(kiln_pb_read_len(&r, &sub) == KILN_PB_OK);
    CHECK(kiln_pb_left(&sub) == 3 && !memcmp(sub.p, "abc", 3));
    const uint8_t *before = r.p;
    CHECK(kiln_pb_read_len(&r, &sub) == KILN_PB_TRUNCATED_LEN && r.p == before);
    /* a length so large that adding it to a pointer would wrap */
    uint8_t huge[11];
    size_t n = put_varint(huge, UINT64_MAX);
    r = kiln_pb_make(huge, n);
    CHECK(kiln_pb_read_len(&r, &sub) == KILN_PB_TRUNCATED_LEN);
    /* empty payload */
    const uint8_t zero[] = {0x00};
    r = kiln_pb_make(zero, 1);
    CHECK(kiln_pb_read_len(&r, &sub) == KILN_PB_OK && kiln_pb_left(&sub) == 0 && kiln_pb_done(&r));
    free(buf);
}

/* field 1 varint 150, field 2 "hi", field 3 fixed32, field 4 fixed64, field 5 group { field 1
 * varint 1, field 6 group { } }, field 7 varint 1 */
static const uint8_t k_msg[] = {
    0x08, 0x96, 0x01,                                     /* 1: varint 150 */
    0x12, 0x02, 'h', 'i',                                 /* 2: "hi" */
    0x1d, 0x01, 0x02, 0x03, 0x04,                         /* 3: fixed32 */
    0x21, 1, 2, 3, 4, 5, 6, 7, 8,                         /* 4: fixed64 */
    0x2b, 0x08, 0x01, 0x33, 0x34, 0x2c,                   /* 5: group { 1: 1, 6: group {} } */
    0x38, 0x01,                                           /* 7: varint 1 */
};

static void test_next(void) {
    uint8_t *buf;
    kiln_pb r = exact(k_msg, sizeof k_msg, &buf);
    kiln_pb_field f;
    CHECK(kiln_pb_next(&r, &f) == KILN_PB_OK && f.number == 1 && f.wire == KILN_PB_VARINT && f.u == 150);
    CHECK(f.start == buf);
    CHECK(kiln_pb_next(&r, &f) == KILN_PB_OK && f.number == 2 && f.wire == KILN_PB_LEN);
    CHECK(kiln_pb_left(&f.data) == 2 && !memcmp(f.data.p, "hi", 2));
    CHECK(kiln_pb_next(&r, &f) == KILN_PB_OK && f.number == 3 && f.wire == KILN_PB_I32 && f.u == 0x04030201u);
    CHECK(kiln_pb_next(&r, &f) == KILN_PB_OK && f.number == 4 && f.wire == KILN_PB_I64 && f.u == 0x0807060504030201ull);
    CHECK(kiln_pb_next(&r, &f) == KILN_PB_OK && f.number == 5 && f.wire == KILN_PB_SGROUP);
    CHECK(kiln_pb_left(&f.data) == 4 && f.data.p == buf + 22);
    kiln_pb_field g;
    CHECK(kiln_pb_next(&f.data, &g) == KILN_PB_OK && g.number == 1 && g.u == 1);
    CHECK(kiln_pb_next(&f.data, &g) == KILN_PB_OK && g.number == 6 && g.wire == KILN_PB_SGROUP && kiln_pb_left(&g.data) == 0);
    CHECK(kiln_pb_done(&f.data));
    CHECK(kiln_pb_next(&r, &f) == KILN_PB_OK && f.number == 7 && f.u == 1);
    CHECK(kiln_pb_done(&r));

    /* skipping each field by its tag gets to the same end */
    r = kiln_pb_make(buf, sizeof k_msg);
    int count = 0;
    while (!kiln_pb_done(&r)) {
        uint32_t num;
        kiln_pb_wire w;
        CHECK(kiln_pb_read_tag(&r, &num, &w) == KILN_PB_OK);
        CHECK(kiln_pb_skip(&r, num, w) == KILN_PB_OK);
        count++;
    }
    CHECK(count == 6);

    /* every truncation point: the reader ends in an error or exactly at the cut, never beyond */
    for (size_t n = 0; n < sizeof k_msg; n++) {
        uint8_t *cut;
        kiln_pb t = exact(k_msg, n, &cut);
        kiln_pb_err e = KILN_PB_OK;
        while (!kiln_pb_done(&t) && (e = kiln_pb_next(&t, &f)) == KILN_PB_OK) {
            CHECK(t.p <= cut + n);
            if (f.wire == KILN_PB_LEN || f.wire == KILN_PB_SGROUP) CHECK(f.data.end <= cut + n);
        }
        CHECK(t.p >= cut && t.p <= cut + n);
        if (e == KILN_PB_OK) CHECK(t.p == cut + n);
        free(cut);
    }
    free(buf);
}

static void test_groups(void) {
    kiln_pb_field f;
    kiln_pb r;
    /* a bare end-group */
    const uint8_t bare_end[] = {0x0c};
    r = kiln_pb_make(bare_end, 1);
    CHECK(kiln_pb_next(&r, &f) == KILN_PB_UNMATCHED_GROUP && r.p == bare_end);
    /* an end-group for another field */
    const uint8_t wrong_end[] = {0x0b, 0x08, 0x01, 0x14};
    r = kiln_pb_make(wrong_end, sizeof wrong_end);
    CHECK(kiln_pb_next(&r, &f) == KILN_PB_UNMATCHED_GROUP && r.p == wrong_end + 3);
    /* a group never closed */
    const uint8_t open_group[] = {0x0b, 0x08, 0x01};
    r = kiln_pb_make(open_group, sizeof open_group);
    CHECK(kiln_pb_next(&r, &f) == KILN_PB_UNMATCHED_GROUP);
    /* nesting: KILN_PB_MAX_DEPTH levels are fine, one more is refused */
    for (int depth = KILN_PB_MAX_DEPTH; depth <= KILN_PB_MAX_DEPTH + 1; depth++) {
        uint8_t *buf = malloc((size_t)depth * 2);
        for (int i = 0; i < depth; i++) {
            buf[i] = (uint8_t)((1 << 3) | KILN_PB_SGROUP);
            buf[2 * depth - 1 - i] = (uint8_t)((1 << 3) | KILN_PB_EGROUP);
        }
        r = kiln_pb_make(buf, (size_t)depth * 2);
        kiln_pb_err e = kiln_pb_next(&r, &f);
        if (depth == KILN_PB_MAX_DEPTH) CHECK(e == KILN_PB_OK && kiln_pb_done(&r) && kiln_pb_left(&f.data) == (size_t)depth * 2 - 2);
        else CHECK(e == KILN_PB_TOO_DEEP && r.p == buf + KILN_PB_MAX_DEPTH);
        free(buf);
    }
    /* a hostile depth far beyond the limit costs nothing */
    size_t deep = 1u << 20;
    uint8_t *buf = malloc(deep);
    memset(buf, (1 << 3) | KILN_PB_SGROUP, deep);
    r = kiln_pb_make(buf, deep);
    CHECK(kiln_pb_next(&r, &f) == KILN_PB_TOO_DEEP);
    free(buf);
}

static void test_packed(void) {
    /* packed varints 1, 300, -1 (10 bytes) */
    uint8_t payload[32];
    size_t n = 0;
    n += put_varint(payload + n, 1);
    n += put_varint(payload + n, 300);
    n += put_varint(payload + n, (uint64_t)(int64_t)-1);
    uint8_t msg[40];
    size_t m = 0;
    msg[m++] = (4 << 3) | KILN_PB_LEN;
    msg[m++] = (uint8_t)n;
    memcpy(msg + m, payload, n);
    m += n;
    uint8_t *buf;
    kiln_pb r = exact(msg, m, &buf);
    kiln_pb_field f;
    CHECK(kiln_pb_next(&r, &f) == KILN_PB_OK);
    size_t count = 0;
    CHECK(kiln_pb_repeated_count(&f, KILN_PB_VARINT, &count, NULL) == KILN_PB_OK && count == 3);
    uint64_t vals[3];
    CHECK(kiln_pb_repeated_read(&f, KILN_PB_VARINT, vals) == 3);
    CHECK(vals[0] == 1 && vals[1] == 300 && (int64_t)vals[2] == -1);
    /* the same payload read as fixed32: 13 bytes is not a multiple of 4 */
    const uint8_t *at = NULL;
    CHECK(kiln_pb_repeated_count(&f, KILN_PB_I32, &count, &at) == KILN_PB_BAD_PACKED && at == f.data.p);
    /* a payload whose last varint is cut off */
    f.data.end--;
    CHECK(kiln_pb_repeated_count(&f, KILN_PB_VARINT, &count, &at) == KILN_PB_TRUNCATED_VARINT);
    CHECK(at == buf + 2 + 1 + 2);
    free(buf);

    /* packed floats and an unpacked element of the same field */
    const uint8_t floats[] = {0x3a, 0x08, 0x00, 0x00, 0x80, 0x3f, 0x00, 0x00, 0x00, 0x40, /* 7: [1.0, 2.0] */
                              0x3d, 0x00, 0x00, 0x40, 0x40};                               /* 7: 3.0 */
    r = exact(floats, sizeof floats, &buf);
    float want[] = {1.0f, 2.0f, 3.0f}, got;
    size_t k = 0;
    while (!kiln_pb_done(&r)) {
        CHECK(kiln_pb_next(&r, &f) == KILN_PB_OK);
        CHECK(kiln_pb_repeated_count(&f, KILN_PB_I32, &count, NULL) == KILN_PB_OK);
        uint64_t raw[2];
        CHECK(kiln_pb_repeated_read(&f, KILN_PB_I32, raw) == count);
        for (size_t i = 0; i < count; i++, k++) {
            uint32_t bits = (uint32_t)raw[i];
            memcpy(&got, &bits, 4);
            CHECK(k < 3 && got == want[k]);
        }
    }
    CHECK(k == 3);
    /* a field of the wrong wire type for a repeated float */
    const uint8_t wrong[] = {0x38, 0x01};
    r = kiln_pb_make(wrong, sizeof wrong);
    CHECK(kiln_pb_next(&r, &f) == KILN_PB_OK);
    CHECK(kiln_pb_repeated_count(&f, KILN_PB_I32, &count, &at) == KILN_PB_WRONG_WIRE_TYPE && at == wrong);
    free(buf);
}

/* Random bytes through the field reader (recursing into LEN payloads and groups as messages): every
 * result stays inside the buffer. */
static void walk(kiln_pb r, const uint8_t *lo, const uint8_t *hi, int depth) {
    kiln_pb_field f;
    while (!kiln_pb_done(&r)) {
        if (kiln_pb_next(&r, &f) != KILN_PB_OK) {
            CHECK(r.p >= lo && r.p <= hi);
            return;
        }
        CHECK(r.p >= lo && r.p <= hi);
        if ((f.wire == KILN_PB_LEN || f.wire == KILN_PB_SGROUP) && depth < 8) {
            CHECK(f.data.p >= lo && f.data.end <= hi && f.data.p <= f.data.end);
            walk(f.data, lo, hi, depth + 1);
            size_t cnt;
            if (kiln_pb_repeated_count(&f, KILN_PB_VARINT, &cnt, NULL) == KILN_PB_OK && cnt < 4096) {
                uint64_t *v = malloc((cnt + 1) * sizeof *v);
                CHECK(kiln_pb_repeated_read(&f, KILN_PB_VARINT, v) == cnt);
                free(v);
            }
        }
    }
}

static void test_random(void) {
    uint64_t x = 12345;
    for (int iter = 0; iter < 20000; iter++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        size_t n = (size_t)(x % 64);
        uint8_t *buf = malloc(n ? n : 1);
        for (size_t i = 0; i < n; i++) {
            x ^= x << 13, x ^= x >> 7, x ^= x << 17;
            /* bias towards small field numbers and plausible wire types */
            buf[i] = (uint8_t)((i % 3 == 0) ? ((x & 0x38) | (x % 6)) : x);
        }
        walk(kiln_pb_make(buf, n), buf, buf + n, 0);
        free(buf);
    }
}

int main(void) {
    test_varint_edges();
    test_varint_overlong();
    test_varint_roundtrip();
    test_zigzag();
    test_fixed();
    test_tags();
    test_len();
    test_next();
    test_groups();
    test_packed();
    test_random();
    return checks_report("test_protobuf");
}
