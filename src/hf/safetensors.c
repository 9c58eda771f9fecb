/* safetensors.c — the safetensors reader of safetensors.h: header length, JSON header, per-tensor
 * dtype / shape / data_offsets checks, then duplicate-name and overlap checks over all tensors sorted
 * by name and by offset. */
#include "hf/safetensors.h"

#include "core/status.h"

#include <stdlib.h>
#include <string.h>

static const struct {
    const char *name;
    kiln_dtype dtype;
} g_dtypes[] = {
    {"F32", KILN_F32},   {"F16", KILN_F16},   {"BF16", KILN_BF16}, {"F64", KILN_F64},
    {"I64", KILN_I64},   {"I32", KILN_I32},   {"I16", KILN_I16},   {"I8", KILN_I8},
    {"U64", KILN_U64},   {"U32", KILN_U32},   {"U16", KILN_U16},   {"U8", KILN_U8},
    {"BOOL", KILN_BOOL}, {"F8_E4M3", KILN_F8E4M3FN}, {"F8_E5M2", KILN_F8E5M2},
};

/* A JSON number that is an integer in [0, 2^53] into *out. */
static bool json_uint(const kiln_jnode *v, uint64_t *out) {
    double d;
    if (!kiln_jdoc_num(v, &d) || d < 0 || d > 9007199254740992.0 || d != (double)(uint64_t)d) return false;
    *out = (uint64_t)d;
    return true;
}

/* Fills t from the header entry e (an object with dtype, shape, data_offsets) and checks it against
 * the byte buffer of buf_size bytes at buf. */
static kiln_status read_entry(const kiln_jdoc *doc, const kiln_jnode *e, const unsigned char *buf, uint64_t buf_size,
                              const char *what, kiln_st_tensor *t) {
    const char *name = e->key;
    t->name = name;
    if (e->type != KILN_JNODE_OBJECT)
        return kiln_error(KILN_ERR_PARSE, "%s: tensor '%s': header entry is not an object", what, name);
    const char *dt = kiln_jdoc_str(kiln_jdoc_get(doc, e, "dtype"));
    if (!dt) return kiln_error(KILN_ERR_PARSE, "%s: tensor '%s': missing or non-string \"dtype\"", what, name);
    t->dtype = KILN_UNDEFINED;
    for (size_t i = 0; i < sizeof g_dtypes / sizeof *g_dtypes; i++)
        if (!strcmp(dt, g_dtypes[i].name)) t->dtype = g_dtypes[i].dtype;
    if (t->dtype == KILN_UNDEFINED)
        return kiln_error(KILN_ERR_UNSUPPORTED, "%s: tensor '%s': dtype '%s' is not supported", what, name, dt);

    const kiln_jnode *shape = kiln_jdoc_get(doc, e, "shape");
    if (!shape || shape->type != KILN_JNODE_ARRAY)
        return kiln_error(KILN_ERR_PARSE, "%s: tensor '%s': missing or non-array \"shape\"", what, name);
    if (shape->count > KILN_MAX_DIMS)
        return kiln_error(KILN_ERR_UNSUPPORTED, "%s: tensor '%s': %d dimensions (at most %d supported)", what, name,
                          shape->count, KILN_MAX_DIMS);
    uint64_t bytes = kiln_dtype_size(t->dtype);
    t->ndim = 0;
    for (const kiln_jnode *d = kiln_jdoc_first(doc, shape); d; d = kiln_jdoc_next(doc, d)) {
        uint64_t n;
        if (!json_uint(d, &n))
            return kiln_error(KILN_ERR_PARSE, "%s: tensor '%s': shape entry %d is not a non-negative integer", what,
                              name, t->ndim);
        if (n != 0 && bytes > UINT64_MAX / n)
            return kiln_error(KILN_ERR_PARSE, "%s: tensor '%s': shape overflows the byte count", what, name);
        bytes *= n;
        t->dims[t->ndim++] = (int64_t)n;
    }

    const kiln_jnode *offs = kiln_jdoc_get(doc, e, "data_offsets");
    uint64_t begin, end;
    if (!offs || offs->type != KILN_JNODE_ARRAY || offs->count != 2 || !json_uint(kiln_jdoc_at(doc, offs, 0), &begin) ||
        !json_uint(kiln_jdoc_at(doc, offs, 1), &end))
        return kiln_error(KILN_ERR_PARSE, "%s: tensor '%s': \"data_offsets\" must be [begin, end] of non-negative integers",
                          what, name);
    if (begin > end || end > buf_size)
        return kiln_error(KILN_ERR_PARSE,
                          "%s: tensor '%s': data_offsets [%llu, %llu] outside the %llu-byte data buffer (truncated file?)",
                          what, name, (unsigned long long)begin, (unsigned long long)end, (unsigned long long)buf_size);
    if (end - begin != bytes)
        return kiln_error(KILN_ERR_PARSE, "%s: tensor '%s': data_offsets span %llu bytes but dtype %s and its shape need %llu",
                          what, name, (unsigned long long)(end - begin), dt, (unsigned long long)bytes);
    t->data = buf + begin;
    t->nbytes = (size_t)bytes;
    return KILN_OK;
}

/* qsort order: by start address, then by size. */
static int cmp_by_offset(const void *a, const void *b) {
    const kiln_st_tensor *x = *(const kiln_st_tensor *const *)a, *y = *(const kiln_st_tensor *const *)b;
    const unsigned char *px = x->data, *py = y->data;
    if (px != py) return px < py ? -1 : 1;
    return (x->nbytes > y->nbytes) - (x->nbytes < y->nbytes);
}

/* qsort order: by name. */
static int cmp_by_name(const void *a, const void *b) {
    return strcmp((*(const kiln_st_tensor *const *)a)->name, (*(const kiln_st_tensor *const *)b)->name);
}

/* Fails when a name appears twice or two tensors share bytes (empty tensors share nothing). Both
 * checks sort, so that a header of millions of entries is checked in n log n, not n^2, steps. */
static kiln_status check_names_and_overlap(kiln_safetensors *st, const char *what) {
    if (st->n_tensors < 2) return KILN_OK;
    kiln_st_tensor **order = malloc((size_t)st->n_tensors * sizeof *order);
    if (!order) return kiln_error(KILN_ERR_OUT_OF_MEMORY, "out of memory");
    for (int i = 0; i < st->n_tensors; i++) order[i] = &st->tensors[i];
    kiln_status s = KILN_OK;
    qsort(order, (size_t)st->n_tensors, sizeof *order, cmp_by_name);
    for (int i = 1; i < st->n_tensors && s == KILN_OK; i++)
        if (!strcmp(order[i - 1]->name, order[i]->name))
            s = kiln_error(KILN_ERR_PARSE, "%s: tensor '%s' appears twice in the header", what, order[i]->name);
    qsort(order, (size_t)st->n_tensors, sizeof *order, cmp_by_offset);
    const kiln_st_tensor *prev = NULL;
    for (int i = 0; i < st->n_tensors && s == KILN_OK; i++) {
        const kiln_st_tensor *t = order[i];
        if (t->nbytes == 0) continue;
        if (prev && (const unsigned char *)t->data < (const unsigned char *)prev->data + prev->nbytes)
            s = kiln_error(KILN_ERR_PARSE, "%s: tensors '%s' and '%s' overlap in the data buffer", what, prev->name, t->name);
        prev = t;
    }
    free(order);
    return s;
}

static kiln_status parse(kiln_safetensors *st, const unsigned char *b, size_t size, const char *what) {
    if (size < 8)
        return kiln_error(KILN_ERR_PARSE, "%s: %zu bytes is too short for a safetensors file (8-byte header length)", what,
                          size);
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--) hlen = hlen << 8 | b[i];
    if (hlen > KILN_SAFETENSORS_MAX_HEADER)
        return kiln_error(KILN_ERR_PARSE, "%s: header length %llu exceeds the 100 MB limit (not a safetensors file?)",
                          what, (unsigned long long)hlen);
    if (hlen > size - 8)
        return kiln_error(KILN_ERR_PARSE, "%s: header length %llu but only %zu bytes follow (truncated file?)", what,
                          (unsigned long long)hlen, size - 8);
    if (hlen < 2 || b[8] != '{')
        return kiln_error(KILN_ERR_PARSE, "%s: the header is not a JSON object", what);
    KILN_TRY(kiln_jdoc_parse((const char *)b + 8, (size_t)hlen, what, &st->header));
    const kiln_jnode *root = kiln_jdoc_root(&st->header);
    if (!root || root->type != KILN_JNODE_OBJECT)
        return kiln_error(KILN_ERR_PARSE, "%s: the header is not a JSON object", what);
    st->tensors = calloc((size_t)root->count + 1, sizeof *st->tensors);
    if (!st->tensors) return kiln_error(KILN_ERR_OUT_OF_MEMORY, "out of memory");
    const unsigned char *buf = b + 8 + hlen;
    uint64_t buf_size = size - 8 - hlen;
    for (const kiln_jnode *e = kiln_jdoc_first(&st->header, root); e; e = kiln_jdoc_next(&st->header, e)) {
        if (!strcmp(e->key, "__metadata__")) continue;
        KILN_TRY(read_entry(&st->header, e, buf, buf_size, what, &st->tensors[st->n_tensors]));
        st->n_tensors++;
    }
    return check_names_and_overlap(st, what);
}

kiln_status kiln_safetensors_parse(const void *data, size_t size, const char *what, kiln_safetensors *out) {
    memset(out, 0, sizeof *out);
    kiln_status s = parse(out, data, size, what);
    if (s != KILN_OK) kiln_safetensors_close(out);
    return s;
}

kiln_status kiln_safetensors_open(const char *path, kiln_safetensors *out) {
    memset(out, 0, sizeof *out);
    out->path = strdup(path);
    if (!out->path) return kiln_error(KILN_ERR_OUT_OF_MEMORY, "out of memory");
    kiln_status s = kiln_file_map_open(path, &out->map);
    if (s == KILN_OK) s = parse(out, out->map.data, out->map.size, path);
    if (s != KILN_OK) kiln_safetensors_close(out);
    return s;
}

void kiln_safetensors_close(kiln_safetensors *st) {
    kiln_file_unmap(&st->map);
    kiln_jdoc_free(&st->header);
    free(st->tensors);
    free(st->path);
    memset(st, 0, sizeof *st);
}

const kiln_st_tensor *kiln_safetensors_find(const kiln_safetensors *st, const char *name) {
    for (int i = 0; i < st->n_tensors; i++)
        if (!strcmp(st->tensors[i].name, name)) return &st->tensors[i];
    return NULL;
}
