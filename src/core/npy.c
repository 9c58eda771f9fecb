/* npy.c — a strict reader and a writer for NumPy's .npy format. */
#include "core/npy.h"

#include "core/file.h"
#include "core/status.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const struct {
    const char *descr;
    kiln_dtype dtype;
} g_descrs[] = {
    {"<f4", KILN_F32}, {"<f8", KILN_F64}, {"<f2", KILN_F16}, {"<i8", KILN_I64}, {"<i4", KILN_I32},
    {"<i2", KILN_I16}, {"|i1", KILN_I8},  {"|u1", KILN_U8},  {"<u2", KILN_U16}, {"<u4", KILN_U32},
    {"<u8", KILN_U64}, {"|b1", KILN_BOOL},
};

/* Finds `'key':` in the header dict and returns a pointer just after the colon (spaces skipped). */
static const char *dict_find(const char *h, const char *key) {
    char pat[32];
    snprintf(pat, sizeof pat, "'%s'", key);
    const char *p = strstr(h, pat);
    if (!p) return NULL;
    p += strlen(pat);
    while (*p == ' ') p++;
    if (*p != ':') return NULL;
    p++;
    while (*p == ' ') p++;
    return p;
}

/* The bytes of an array of dtype and dims[0..ndim) (non-negative), or UINT64_MAX when the product
 * overflows (computed without overflow whatever the dims). */
static uint64_t array_bytes(kiln_dtype dtype, int ndim, const int64_t *dims) {
    for (int i = 0; i < ndim; i++)
        if (dims[i] == 0) return 0;
    uint64_t bytes = kiln_dtype_size(dtype);
    for (int i = 0; i < ndim; i++) {
        if (bytes > UINT64_MAX / (uint64_t)dims[i]) return UINT64_MAX;
        bytes *= (uint64_t)dims[i];
    }
    return bytes;
}

kiln_status kiln_npy_parse(const void *buf, size_t size, const char *what, kiln_tensor *out) {
    const unsigned char *b = buf;
    memset(out, 0, sizeof *out);
    if (size < 10 || memcmp(b, "\x93NUMPY", 6) != 0)
        return kiln_error(KILN_ERR_PARSE, "%s: not a NumPy .npy file (bad magic)", what);
    unsigned major = b[6];
    size_t hlen, hoff;
    if (major == 1) {
        hlen = (size_t)b[8] | (size_t)b[9] << 8;
        hoff = 10;
    } else if (major == 2 || major == 3) {
        if (size < 12) return kiln_error(KILN_ERR_PARSE, "%s: truncated .npy header", what);
        hlen = (size_t)b[8] | (size_t)b[9] << 8 | (size_t)b[10] << 16 | (size_t)b[11] << 24;
        hoff = 12;
    } else {
        return kiln_error(KILN_ERR_UNSUPPORTED, "%s: .npy format version %u is not supported", what, major);
    }
    if (hlen > size - hoff || hlen > 65536) return kiln_error(KILN_ERR_PARSE, "%s: truncated .npy header", what);
    char *h = malloc(hlen + 1);
    if (!h) return kiln_error(KILN_ERR_OUT_OF_MEMORY, "out of memory");
    memcpy(h, b + hoff, hlen);
    h[hlen] = 0;
    kiln_status st = KILN_OK;
    const char *d = dict_find(h, "descr"), *fo = dict_find(h, "fortran_order"), *sh = dict_find(h, "shape");
    if (!d || !fo || !sh) {
        st = kiln_error(KILN_ERR_PARSE, "%s: .npy header lacks descr, fortran_order or shape", what);
        goto out;
    }
    kiln_dtype dtype = KILN_UNDEFINED;
    for (size_t i = 0; i < sizeof g_descrs / sizeof *g_descrs; i++) {
        size_t n = strlen(g_descrs[i].descr);
        if (*d == '\'' && !strncmp(d + 1, g_descrs[i].descr, n) && d[1 + n] == '\'') dtype = g_descrs[i].dtype;
    }
    if (dtype == KILN_UNDEFINED) {
        char shown[16] = "";
        if (*d == '\'') sscanf(d + 1, "%15[^']", shown);
        st = kiln_error(KILN_ERR_UNSUPPORTED, "%s: .npy dtype '%s' is not supported (little-endian numeric or bool only)", what, shown);
        goto out;
    }
    if (strncmp(fo, "False", 5) != 0) {
        st = kiln_error(KILN_ERR_UNSUPPORTED, "%s: Fortran-ordered .npy arrays are not supported (save a C-ordered array)", what);
        goto out;
    }
    if (*sh != '(') {
        st = kiln_error(KILN_ERR_PARSE, "%s: malformed shape in .npy header", what);
        goto out;
    }
    int64_t dims[KILN_MAX_DIMS];
    int ndim = 0;
    const char *p = sh + 1;
    for (;;) {
        while (*p == ' ' || *p == ',') p++;
        if (*p == ')') break;
        char *end;
        long long v = strtoll(p, &end, 10);
        if (end == p || v < 0 || ndim == KILN_MAX_DIMS) {
            st = kiln_error(KILN_ERR_PARSE, "%s: malformed or too many dims in .npy shape (max %d)", what, KILN_MAX_DIMS);
            goto out;
        }
        dims[ndim++] = v;
        p = end;
        if (*p == 'L') p++;
    }
    size_t present = size - hoff - hlen;
    uint64_t expected = array_bytes(dtype, ndim, dims);
    if (expected > present) { /* checked before allocating: the shape is the file's word, its size a fact */
        if (expected == UINT64_MAX)
            st = kiln_error(KILN_ERR_PARSE, "%s: .npy data is truncated (over 2^64 bytes expected, %zu present)", what,
                            present);
        else
            st = kiln_error(KILN_ERR_PARSE, "%s: .npy data is truncated (%llu bytes expected, %zu present)", what,
                            (unsigned long long)expected, present);
        goto out;
    }
    st = kiln_tensor_alloc(out, dtype, ndim, dims);
    if (st != KILN_OK) goto out;
    if (out->nbytes) memcpy(out->data, b + hoff + hlen, out->nbytes);
out:
    free(h);
    return st;
}

kiln_status kiln_npy_read(const char *path, kiln_tensor *out) {
    kiln_file_map m;
    KILN_TRY(kiln_file_map_open(path, &m));
    kiln_status s = kiln_npy_parse(m.data, m.size, path, out);
    kiln_file_unmap(&m);
    return s;
}

kiln_status kiln_npy_write(const char *path, const kiln_tensor *t) {
    const char *descr = NULL;
    for (size_t i = 0; i < sizeof g_descrs / sizeof *g_descrs; i++)
        if (g_descrs[i].dtype == t->dtype) descr = g_descrs[i].descr;
    if (!descr) return kiln_error(KILN_ERR_UNSUPPORTED, "cannot write %s tensors to .npy", kiln_dtype_name(t->dtype));
    char header[512];
    int n = snprintf(header, sizeof header, "{'descr': '%s', 'fortran_order': False, 'shape': (", descr);
    for (int d = 0; d < t->ndim; d++) n += snprintf(header + n, sizeof header - (size_t)n, "%lld,%s", (long long)t->dims[d], d + 1 < t->ndim ? " " : "");
    if (t->ndim > 1) n--; /* numpy writes (2, 3) but (4,) */
    n += snprintf(header + n, sizeof header - (size_t)n, "), }");
    int total = 10 + n + 1;
    int pad = (64 - total % 64) % 64;
    unsigned char pre[10] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0, 0, 0};
    int hlen = n + pad + 1;
    pre[8] = (unsigned char)(hlen & 0xff);
    pre[9] = (unsigned char)(hlen >> 8);
    memset(header + n, ' ', (size_t)pad);
    header[n + pad] = '\n';
    const void *chunks[3] = {pre, header, t->data};
    size_t sizes[3] = {10, (size_t)hlen, t->nbytes};
    return kiln_file_write_atomic(path, chunks, sizes, 3);
}
