/* onnx_tensor.c — TensorProto -> kiln_tensor: dims and data_type, then the data from raw_data (a
 * zero-copy view when aligned), from the typed repeated fields (float_data, int32_data, ...), or from
 * an external-data file mapped next to the model; plus kiln_onnx_read_tensor_file for the test-data
 * .pb files. Every size is checked against dims x dtype before anything is allocated. */
#include "frontends/onnx/onnx_import.h"
#include "frontends/onnx/onnx_internal.h"

#include "core/status.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "the ONNX frontend reads raw_data in place and assumes a little-endian host"
#endif

/* TensorProto field numbers. */
enum {
    T_DIMS = 1, T_DATA_TYPE = 2, T_SEGMENT = 3, T_FLOAT_DATA = 4, T_INT32_DATA = 5, T_STRING_DATA = 6,
    T_INT64_DATA = 7, T_NAME = 8, T_RAW_DATA = 9, T_DOUBLE_DATA = 10, T_UINT64_DATA = 11,
    T_EXTERNAL_DATA = 13, T_DATA_LOCATION = 14,
};

/* Where the ONNX spec stores a dtype's elements when raw_data is not used. */
typedef struct typed_storage {
    uint32_t field;
    const char *field_name;
    kiln_pb_wire elem;
    int comps; /* values per element: 2 for complex types */
} typed_storage;

static typed_storage storage_of(kiln_dtype dt) {
    switch (dt) {
    case KILN_F32: return (typed_storage){T_FLOAT_DATA, "float_data", KILN_PB_I32, 1};
    case KILN_C64: return (typed_storage){T_FLOAT_DATA, "float_data", KILN_PB_I32, 2};
    case KILN_I64: return (typed_storage){T_INT64_DATA, "int64_data", KILN_PB_VARINT, 1};
    case KILN_F64: return (typed_storage){T_DOUBLE_DATA, "double_data", KILN_PB_I64, 1};
    case KILN_C128: return (typed_storage){T_DOUBLE_DATA, "double_data", KILN_PB_I64, 2};
    case KILN_U32: case KILN_U64: return (typed_storage){T_UINT64_DATA, "uint64_data", KILN_PB_VARINT, 1};
    default: return (typed_storage){T_INT32_DATA, "int32_data", KILN_PB_VARINT, 1};
    }
}

/* What one pass over a TensorProto found. */
typedef struct tensor_fields {
    onnx_str name;
    int64_t data_type;
    bool has_raw, external;
    kiln_pb raw;
    uint32_t present; /* bit k set: field k occurred */
} tensor_fields;

static kiln_status scan_tensor(onnx_ctx *c, kiln_pb msg, tensor_fields *tf) {
    memset(tf, 0, sizeof *tf);
    kiln_pb_field f;
    while (!kiln_pb_done(&msg)) {
        KILN_TRY(onnx_next(c, &msg, &f));
        if (f.number < 32) tf->present |= 1u << f.number;
        switch (f.number) {
        case T_DATA_TYPE:
            KILN_TRY(onnx_want(c, &f, KILN_PB_VARINT, "data_type"));
            tf->data_type = (int64_t)f.u;
            break;
        case T_NAME:
            KILN_TRY(onnx_want(c, &f, KILN_PB_LEN, "name"));
            tf->name = (onnx_str){(const char *)f.data.p, kiln_pb_left(&f.data)};
            break;
        case T_RAW_DATA:
            KILN_TRY(onnx_want(c, &f, KILN_PB_LEN, "raw_data"));
            tf->has_raw = true;
            tf->raw = f.data;
            break;
        case T_DATA_LOCATION:
            KILN_TRY(onnx_want(c, &f, KILN_PB_VARINT, "data_location"));
            if (f.u > 1) return onnx_fail(c, KILN_ERR_PARSE, "data_location %lld is neither DEFAULT nor EXTERNAL",
                                          (long long)(int64_t)f.u);
            tf->external = f.u == 1;
            break;
        case T_SEGMENT:
            return onnx_fail(c, KILN_ERR_UNSUPPORTED, "segmented tensors (TensorProto.segment) are not supported");
        case T_EXTERNAL_DATA:
            KILN_TRY(onnx_want(c, &f, KILN_PB_LEN, "external_data"));
            break;
        default: break;
        }
    }
    return KILN_OK;
}

/* Checks data_type and reads dims; *numel and *nbytes are exact (no overflow: sizes beyond 2^62 are
 * refused). */
static kiln_status tensor_shape(onnx_ctx *c, kiln_pb msg, const tensor_fields *tf, kiln_dtype *dt, int *ndim,
                                int64_t *dims, int64_t *numel, size_t *nbytes) {
    if (!(tf->present & (1u << T_DATA_TYPE)) || tf->data_type == 0)
        return onnx_fail(c, KILN_ERR_PARSE, "tensor has no data_type");
    if (tf->data_type < 0 || tf->data_type >= KILN_DTYPE_COUNT)
        return onnx_fail(c, KILN_ERR_UNSUPPORTED, "tensor data_type %lld is not supported", (long long)tf->data_type);
    *dt = (kiln_dtype)tf->data_type;
    if (*dt == KILN_STRING) return onnx_fail(c, KILN_ERR_UNSUPPORTED, "string tensors are not supported");
    size_t esize = kiln_dtype_size(*dt);
    if (!esize) return onnx_fail(c, KILN_ERR_UNSUPPORTED, "%s tensors are not supported", kiln_dtype_name(*dt));
    uint64_t *vals;
    size_t n;
    KILN_TRY(onnx_repeated(c, msg, T_DIMS, KILN_PB_VARINT, "dims", &vals, &n));
    if (n > KILN_MAX_DIMS) {
        free(vals);
        return onnx_fail(c, KILN_ERR_UNSUPPORTED, "tensor rank %zu exceeds kiln's maximum of %d", n, KILN_MAX_DIMS);
    }
    bool any_zero = false;
    for (size_t i = 0; i < n; i++) {
        dims[i] = (int64_t)vals[i];
        if (dims[i] == 0) any_zero = true;
    }
    free(vals);
    *ndim = (int)n;
    int64_t count = any_zero ? 0 : 1;
    for (size_t i = 0; i < n; i++) {
        if (dims[i] < 0)
            return onnx_fail(c, KILN_ERR_PARSE, "tensor dimension %zu is negative (%lld)", i, (long long)dims[i]);
        if (!any_zero && count > (INT64_C(1) << 62) / (int64_t)esize / dims[i])
            return onnx_fail(c, KILN_ERR_PARSE, "tensor has more elements than any file can hold");
        count *= dims[i];
    }
    *numel = count;
    *nbytes = (size_t)count * esize;
    return KILN_OK;
}

/* Makes *out a view of src when allowed and aligned for dt, else an owned copy. */
static kiln_status place(onnx_ctx *c, const uint8_t *src, kiln_dtype dt, int ndim, const int64_t *dims, size_t nbytes,
                         bool zero_copy, kiln_tensor *out) {
    size_t esize = kiln_dtype_size(dt), align = esize > 8 ? 8 : esize;
    if (nbytes == 0) {
        kiln_tensor_view(out, dt, ndim, dims, NULL);
        return KILN_OK;
    }
    if (zero_copy && (uintptr_t)src % align == 0) {
        kiln_tensor_view(out, dt, ndim, dims, (void *)src);
        return KILN_OK;
    }
    kiln_status s = kiln_tensor_alloc(out, dt, ndim, dims);
    if (s != KILN_OK) return onnx_prefix(c, s);
    memcpy(out->data, src, nbytes);
    return KILN_OK;
}

static char *shape_text(char *buf, size_t cap, kiln_dtype dt, int ndim, const int64_t *dims) {
    size_t k = (size_t)snprintf(buf, cap, "%s", kiln_dtype_name(dt));
    if (k < cap) kiln_shape_str(buf + k, cap - k, ndim, dims);
    return buf;
}

/* Reads the typed repeated field that holds dt's elements into an owned tensor. */
static kiln_status load_typed(onnx_ctx *c, kiln_pb msg, kiln_dtype dt, int ndim, const int64_t *dims, int64_t numel,
                              kiln_tensor *out) {
    typed_storage st = storage_of(dt);
    uint64_t *vals;
    size_t n;
    KILN_TRY(onnx_repeated(c, msg, st.field, st.elem, st.field_name, &vals, &n));
    char sh[160];
    if ((uint64_t)n != (uint64_t)numel * (uint64_t)st.comps) {
        free(vals);
        return onnx_fail(c, KILN_ERR_PARSE, "%s holds %zu values, expected %lld for %s", st.field_name, n,
                         (long long)numel * st.comps, shape_text(sh, sizeof sh, dt, ndim, dims));
    }
    kiln_status s = kiln_tensor_alloc(out, dt, ndim, dims);
    if (s != KILN_OK) {
        free(vals);
        return onnx_prefix(c, s);
    }
    size_t width = kiln_dtype_size(dt) / (size_t)st.comps;
    uint8_t *d = out->data;
    for (size_t i = 0; i < n; i++) {
        uint64_t v = vals[i];
        switch (width) {
        case 1: d[i] = dt == KILN_BOOL ? (uint8_t)(v != 0) : (uint8_t)v; break;
        case 2: ((uint16_t *)d)[i] = (uint16_t)v; break;
        case 4: ((uint32_t *)d)[i] = (uint32_t)v; break;
        default: ((uint64_t *)d)[i] = v; break;
        }
    }
    free(vals);
    return KILN_OK;
}

/* Parses a non-negative decimal number with no sign, spaces or overflow. */
static bool parse_decimal(onnx_str s, uint64_t *out) {
    if (!s.n || s.n > 19) return false;
    uint64_t v = 0;
    for (size_t i = 0; i < s.n; i++) {
        if (s.p[i] < '0' || s.p[i] > '9') return false;
        v = v * 10 + (uint64_t)(s.p[i] - '0');
    }
    *out = v;
    return true;
}

static bool str_is(onnx_str s, const char *lit) { return s.n == strlen(lit) && !memcmp(s.p, lit, s.n); }

/* Refuses locations that could reach outside the model's directory. */
static bool location_is_safe(onnx_str loc) {
    if (!loc.n || loc.p[0] == '/' || memchr(loc.p, 0, loc.n)) return false;
    for (size_t i = 0; i < loc.n;) {
        size_t j = i;
        while (j < loc.n && loc.p[j] != '/' && loc.p[j] != '\\') j++;
        if (j - i == 2 && loc.p[i] == '.' && loc.p[i + 1] == '.') return false;
        i = j + 1;
    }
    return true;
}

/* The mapping of external file `loc` (mapped on first use; the root graph or the ctx owns it). */
static kiln_status ext_map(onnx_ctx *c, onnx_str loc, const kiln_file_map **out) {
    for (int i = 0; i < c->n_ext; i++)
        if (str_is(loc, c->ext[i].location)) {
            *out = c->ext[i].map;
            return KILN_OK;
        }
    if (!c->base_dir)
        return onnx_fail(c, KILN_ERR_IO, "external data '%.*s' cannot be found: the model was read from a buffer "
                         "with no base directory", (int)(loc.n > 200 ? 200 : loc.n), loc.p);
    if (c->n_ext == c->cap_ext) {
        int cap = c->cap_ext ? c->cap_ext * 2 : 4;
        onnx_ext_file *e = realloc(c->ext, (size_t)cap * sizeof *e);
        if (!e) return onnx_fail(c, KILN_ERR_OUT_OF_MEMORY, "out of memory");
        c->ext = e;
        c->cap_ext = cap;
    }
    size_t dl = strlen(c->base_dir);
    char *location = malloc(loc.n + 1), *path = malloc(dl + loc.n + 2);
    if (!location || !path) {
        free(location);
        free(path);
        return onnx_fail(c, KILN_ERR_OUT_OF_MEMORY, "out of memory");
    }
    memcpy(location, loc.p, loc.n);
    location[loc.n] = 0;
    snprintf(path, dl + loc.n + 2, "%s/%s", c->base_dir, location);
    kiln_file_map *m = NULL;
    kiln_status s = kiln_file_map_new_populated(path, &m); /* the build reads every weight */
    free(path);
    if (s == KILN_OK && c->root) s = kiln_graph_keep_alive(c->root, m, kiln_file_map_free); /* releases m on failure */
    if (s != KILN_OK) {
        free(location);
        return onnx_prefix(c, s);
    }
    c->ext[c->n_ext++] = (onnx_ext_file){location, m};
    *out = m;
    return KILN_OK;
}

/* Resolves data_location = EXTERNAL: the external_data entries location / offset / length. */
static kiln_status load_external(onnx_ctx *c, kiln_pb msg, kiln_dtype dt, int ndim, const int64_t *dims,
                                 size_t nbytes, bool zero_copy, kiln_tensor *out) {
    onnx_str loc = {NULL, 0};
    uint64_t offset = 0, length = 0;
    bool has_length = false;
    kiln_pb_field f;
    while (!kiln_pb_done(&msg)) {
        KILN_TRY(onnx_next(c, &msg, &f));
        if (f.number != T_EXTERNAL_DATA) continue;
        onnx_str key = {NULL, 0}, val = {NULL, 0};
        kiln_pb e = f.data;
        kiln_pb_field kv;
        while (!kiln_pb_done(&e)) {
            KILN_TRY(onnx_next(c, &e, &kv));
            if (kv.number != 1 && kv.number != 2) continue;
            KILN_TRY(onnx_want(c, &kv, KILN_PB_LEN, kv.number == 1 ? "external_data.key" : "external_data.value"));
            onnx_str *dst = kv.number == 1 ? &key : &val;
            *dst = (onnx_str){(const char *)kv.data.p, kiln_pb_left(&kv.data)};
        }
        if (!key.p) continue;
        bool ok = true;
        if (str_is(key, "location")) loc = val.p ? val : (onnx_str){"", 0};
        else if (str_is(key, "offset")) ok = parse_decimal(val, &offset);
        else if (str_is(key, "length")) ok = has_length = parse_decimal(val, &length);
        if (!ok) return onnx_fail(c, KILN_ERR_PARSE, "external_data '%.*s' is not a decimal number: '%.*s'",
                                  (int)key.n, key.p, (int)(val.n > 40 ? 40 : val.n), val.p ? val.p : "");
    }
    if (!loc.p) return onnx_fail(c, KILN_ERR_PARSE, "data_location is EXTERNAL but external_data has no location");
    if (!location_is_safe(loc))
        return onnx_fail(c, KILN_ERR_PARSE, "external data location '%.*s' must be a relative path inside the "
                         "model's directory", (int)(loc.n > 200 ? 200 : loc.n), loc.p);
    char sh[160];
    if (has_length && length != nbytes)
        return onnx_fail(c, KILN_ERR_PARSE, "external data length %llu does not match %zu bytes for %s",
                         (unsigned long long)length, nbytes, shape_text(sh, sizeof sh, dt, ndim, dims));
    const kiln_file_map *m = NULL;
    KILN_TRY(ext_map(c, loc, &m));
    if (offset > m->size || nbytes > m->size - offset || (!has_length && nbytes != m->size - offset))
        return onnx_fail(c, KILN_ERR_PARSE, "external data '%.*s' (offset %llu, %zu bytes for %s) does not fit the "
                         "file's %zu bytes", (int)(loc.n > 200 ? 200 : loc.n), loc.p, (unsigned long long)offset,
                         nbytes, shape_text(sh, sizeof sh, dt, ndim, dims), m->size);
    return place(c, m->data + offset, dt, ndim, dims, nbytes, zero_copy, out);
}

kiln_status onnx_tensor_load(onnx_ctx *c, kiln_pb msg, bool zero_copy, kiln_tensor *out, onnx_str *name) {
    memset(out, 0, sizeof *out);
    tensor_fields tf;
    KILN_TRY(scan_tensor(c, msg, &tf));
    if (name) *name = tf.name;
    kiln_dtype dt = KILN_UNDEFINED;
    int ndim = 0;
    int64_t dims[KILN_MAX_DIMS] = {0}, numel = 0;
    size_t nbytes = 0;
    KILN_TRY(tensor_shape(c, msg, &tf, &dt, &ndim, dims, &numel, &nbytes));
    if (tf.external) return load_external(c, msg, dt, ndim, dims, nbytes, zero_copy, out);
    char sh[160];
    if (tf.has_raw) {
        if (kiln_pb_left(&tf.raw) != nbytes)
            return onnx_fail(c, KILN_ERR_PARSE, "raw_data holds %zu bytes, expected %zu for %s", kiln_pb_left(&tf.raw),
                             nbytes, shape_text(sh, sizeof sh, dt, ndim, dims));
        return place(c, tf.raw.p, dt, ndim, dims, nbytes, zero_copy, out);
    }
    typed_storage st = storage_of(dt);
    if (tf.present & (1u << st.field)) return load_typed(c, msg, dt, ndim, dims, numel, out);
    if (numel == 0) {
        kiln_tensor_view(out, dt, ndim, dims, NULL);
        return KILN_OK;
    }
    return onnx_fail(c, KILN_ERR_PARSE, "%s tensor has no data (no raw_data, %s or external data)",
                     shape_text(sh, sizeof sh, dt, ndim, dims), st.field_name);
}

char *onnx_dirname(const char *path) {
    const char *slash = strrchr(path, '/');
    if (!slash) return strdup(".");
    size_t n = slash == path ? 1 : (size_t)(slash - path);
    char *d = malloc(n + 1);
    if (!d) return NULL;
    memcpy(d, path, n);
    d[n] = 0;
    return d;
}

kiln_status kiln_onnx_read_tensor_file(const char *path, kiln_tensor *out, char **name) {
    memset(out, 0, sizeof *out);
    if (name) *name = NULL;
    kiln_file_map m;
    KILN_TRY(kiln_file_map_open(path, &m));
    char *dir = onnx_dirname(path);
    if (!dir) {
        kiln_file_unmap(&m);
        return kiln_error(KILN_ERR_OUT_OF_MEMORY, "out of memory");
    }
    onnx_ctx c = {.file = path, .base = m.data, .base_dir = dir};
    kiln_pb msg = kiln_pb_make(m.data, m.size);
    onnx_str nm = onnx_peek_string(msg, T_NAME);
    onnx_where_push(&c, "TensorProto", nm.p ? nm : (onnx_str){"", 0});
    kiln_status s = onnx_tensor_load(&c, msg, false, out, &nm);
    if (s == KILN_OK && name) {
        *name = malloc(nm.n + 1);
        if (*name) {
            if (nm.n) memcpy(*name, nm.p, nm.n);
            (*name)[nm.n] = 0;
        } else {
            kiln_tensor_release(out);
            s = kiln_error(KILN_ERR_OUT_OF_MEMORY, "out of memory");
        }
    }
    onnx_ctx_release(&c);
    free(dir);
    kiln_file_unmap(&m);
    return s;
}
