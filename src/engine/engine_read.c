/* engine_read.c — verifies a .kiln engine image and rebuilds its graph (layout:
 * docs/engine-format.md). The checks run from the outside in: magic, format version, header size and
 * checksum, the kiln version and target it was built for, section bounds and checksums, then every
 * count, index, string, dtype, shape and tensor range of the graph section as it is decoded, and the
 * optimization profiles, per-node precisions and tactics after the nodes. No
 * input can make it read outside the image. Constants and tensor attributes become views of the
 * weights section, so a mapped file is used in place. */
#include "engine/engine_format.h"

#include "core/checksum.h"
#include "core/file.h"
#include "core/status.h"
#include "engine/engine_layout.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Fails with KILN_ERR_PARSE and "engine file is corrupted: <message>". */
static kiln_status corrupt(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static kiln_status corrupt(const char *fmt, ...) {
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return kiln_error(KILN_ERR_PARSE, "engine file is corrupted: %s", msg);
}

/* ---- header ---- */

/* The command that rebuilds this engine (kind: its header's), with the model (or checkpoint) and
 * engine names when they are known. */
static const char *rebuild_hint(char *buf, size_t cap, uint32_t kind, const char *source, const char *path) {
    bool llm = kind == KILN_ENGINE_KIND_LLM;
    snprintf(buf, cap, "rebuild it with `kiln build %s%s -o %s`", llm ? "--hf " : "",
             source && source[0] ? source : llm ? "DIR" : "MODEL.onnx", path ? path : "ENGINE.kiln");
    return buf;
}

/* Copies header string field [off, off+cap) into dst (cap bytes), requiring a NUL inside it. */
static kiln_status get_header_str(const uint8_t *h, int off, char *dst, size_t cap, const char *field) {
    if (!memchr(h + off, 0, cap)) return corrupt("header field '%s' is not NUL-terminated", field);
    memcpy(dst, h + off, cap);
    return KILN_OK;
}

static bool all_zero(const uint8_t *p, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (p[i]) return false;
    return true;
}

const char *kiln_engine_section_name(uint32_t id) {
    switch (id) {
    case KILN_SECTION_GRAPH: return "graph";
    case KILN_SECTION_WEIGHTS: return "weights";
    case KILN_SECTION_LLM_CONFIG: return "llm config";
    case KILN_SECTION_TOKENIZER: return "tokenizer";
    case KILN_SECTION_LLM_TENSORS: return "llm tensors";
    default: return "unknown";
    }
}

/* The header up to the kiln version: magic, format version, header size and checksum. */
static kiln_status check_header_frame(const uint8_t *d, size_t size, const char *path) {
    char hint[600];
    if (size < 8 || memcmp(d, KILN_ENGINE_MAGIC, 8) != 0) {
        if (size < 8 && (size == 0 || memcmp(d, KILN_ENGINE_MAGIC, size) == 0))
            return kiln_error(KILN_ERR_PARSE, "engine file is truncated: %zu bytes", size);
        return kiln_error(KILN_ERR_PARSE, "not a kiln engine file (it does not start with \"%s\")", KILN_ENGINE_MAGIC);
    }
    if (size < 16) return kiln_error(KILN_ERR_PARSE, "engine file is truncated: %zu bytes", size);
    uint32_t version = kiln_le32(d + KILN_EH_FORMAT_VERSION);
    if (version != KILN_ENGINE_FORMAT_VERSION) {
        uint32_t kind = size >= KILN_EH_KIND + 4 ? kiln_le32(d + KILN_EH_KIND) : KILN_ENGINE_KIND_GRAPH;
        return kiln_error(KILN_ERR_ENGINE_MISMATCH, "engine format version %u, this kiln reads %d: %s", version,
                          KILN_ENGINE_FORMAT_VERSION, rebuild_hint(hint, sizeof hint, kind, NULL, path));
    }
    uint32_t header_size = kiln_le32(d + KILN_EH_HEADER_SIZE);
    if (header_size != KILN_ENGINE_HEADER_SIZE)
        return corrupt("header size %u, format version %d has %d", header_size, KILN_ENGINE_FORMAT_VERSION,
                       KILN_ENGINE_HEADER_SIZE);
    if (size < KILN_ENGINE_HEADER_SIZE)
        return kiln_error(KILN_ERR_PARSE, "engine file is truncated: %zu bytes, the header alone is %d", size,
                          KILN_ENGINE_HEADER_SIZE);
    if (kiln_crc32c(d, KILN_EH_HEADER_CRC) != kiln_le32(d + KILN_EH_HEADER_CRC))
        return corrupt("checksum of the header does not match");
    return KILN_OK;
}

/* An engine of kind `got` where `want` was asked for: which command reads it. */
static kiln_status kind_mismatch(uint32_t got) {
    if (got == KILN_ENGINE_KIND_LLM)
        return kiln_error(KILN_ERR_ENGINE_MISMATCH, "an LLM engine (built by `kiln build --hf`): use kiln generate or "
                          "kiln bench --llm");
    return kiln_error(KILN_ERR_ENGINE_MISMATCH, "an ONNX engine (built from an ONNX model), not an LLM engine: use "
                      "kiln run or kiln bench");
}

/* The section table: n entries with ids[0..n) in order, laid out as kiln_engine_check_image says. */
static kiln_status check_sections(const uint8_t *d, size_t size, const uint32_t *ids, int n, kiln_engine_section *sec) {
    uint32_t count = kiln_le32(d + KILN_EH_SECTION_COUNT);
    if (count != (uint32_t)n) return corrupt("%u sections, this kind of engine has %d", count, n);
    for (int i = 0; i < n; i++) {
        const uint8_t *e = d + KILN_EH_SECTIONS + i * KILN_ES_SIZE;
        uint32_t id = kiln_le32(e + KILN_ES_ID);
        if (id != ids[i]) return corrupt("section %d has id %u, not %u (%s)", i, id, ids[i], kiln_engine_section_name(ids[i]));
        sec[i] = (kiln_engine_section){id, kiln_le32(e + KILN_ES_CRC), kiln_le64(e + KILN_ES_OFFSET), kiln_le64(e + KILN_ES_BYTES)};
        if (sec[i].offset > size || sec[i].bytes > size - sec[i].offset)
            return corrupt("section %s [%llu, +%llu) lies outside the %zu-byte file", kiln_engine_section_name(id),
                           (unsigned long long)sec[i].offset, (unsigned long long)sec[i].bytes, size);
    }
    if (!all_zero(d + KILN_EH_SECTIONS + n * KILN_ES_SIZE, (size_t)(KILN_ENGINE_MAX_SECTIONS - n) * KILN_ES_SIZE))
        return corrupt("unused section table entries are not zero");
    /* the weights (the last entry) first, at 4096; the others after them in table order, ending the file */
    uint64_t end = KILN_ENGINE_WEIGHTS_ALIGN;
    for (int k = 0; k < n; k++) {
        const kiln_engine_section *s = &sec[k == 0 ? n - 1 : k - 1];
        if (s->offset != end)
            return corrupt("sections are not laid out as format version %d requires", KILN_ENGINE_FORMAT_VERSION);
        end += s->bytes;
    }
    if (end != size) return corrupt("sections are not laid out as format version %d requires", KILN_ENGINE_FORMAT_VERSION);
    if (!all_zero(d + KILN_ENGINE_HEADER_SIZE, KILN_ENGINE_WEIGHTS_ALIGN - KILN_ENGINE_HEADER_SIZE))
        return corrupt("the padding before the weights section is not zero");
    for (int i = 0; i < n; i++) /* gigabytes of weights are checked on several threads */
        if (kiln_crc32c_gather((const void *[]){d + sec[i].offset}, (const size_t[]){(size_t)sec[i].bytes}, 1) != sec[i].crc)
            return corrupt("checksum of section %s does not match", kiln_engine_section_name(sec[i].id));
    return KILN_OK;
}

kiln_status kiln_engine_check_image(const uint8_t *d, size_t size, uint32_t kind, const char *expected_target,
                                    const char *path, const uint32_t *ids, int n, kiln_engine_section *secs,
                                    kiln_engine_meta *meta) {
    KILN_ASSERT(n >= 1 && n <= KILN_ENGINE_MAX_SECTIONS);
    char hint[600];
    KILN_TRY(check_header_frame(d, size, path));
    uint64_t file_size = kiln_le64(d + KILN_EH_FILE_SIZE);
    if (file_size != size)
        return kiln_error(KILN_ERR_PARSE, "engine file is %s: the header says %llu bytes, there are %zu",
                          file_size > size ? "truncated" : "corrupted", (unsigned long long)file_size, size);
    if (!all_zero(d + KILN_EH_RESERVED0, KILN_EH_KILN_VERSION - KILN_EH_RESERVED0) ||
        !all_zero(d + KILN_EH_RESERVED1, KILN_EH_HEADER_CRC - KILN_EH_RESERVED1))
        return corrupt("reserved header bytes are not zero");

    KILN_TRY(get_header_str(d, KILN_EH_KILN_VERSION, meta->kiln_version, sizeof meta->kiln_version, "kiln_version"));
    KILN_TRY(get_header_str(d, KILN_EH_TARGET, meta->target, sizeof meta->target, "target"));
    KILN_TRY(get_header_str(d, KILN_EH_DEVICE, meta->device, sizeof meta->device, "device"));
    KILN_TRY(get_header_str(d, KILN_EH_BUILD_OPTIONS, meta->build_options, sizeof meta->build_options, "build_options"));
    KILN_TRY(get_header_str(d, KILN_EH_SOURCE, meta->source, sizeof meta->source, "source"));
    meta->created_unix = kiln_le64(d + KILN_EH_CREATED);
    uint32_t precision = kiln_le32(d + KILN_EH_PRECISION);
    uint32_t got_kind = kiln_le32(d + KILN_EH_KIND);
    if (got_kind > KILN_ENGINE_KIND_LLM) return corrupt("engine kind %u is unknown", got_kind);
    /* int8, w8a8, int4, fp8: an LLM engine's INT8 matrices (weight-only, or with INT8 activations),
     * weight-only INT4 matrices or FP8 matrices */
    const bool llm_quantized = precision == KILN_PRECISION_INT8 || precision == KILN_PRECISION_W8A8 ||
                               precision == KILN_PRECISION_INT4 || precision == KILN_PRECISION_FP8;
    if (precision > KILN_PRECISION_BF16 && !(llm_quantized && got_kind == KILN_ENGINE_KIND_LLM))
        return corrupt("precision %u is unknown", precision);
    meta->precision = (kiln_precision)precision;

    int major, minor;
    if (sscanf(meta->kiln_version, "%d.%d", &major, &minor) != 2)
        return corrupt("kiln version '%s' is not MAJOR.MINOR.PATCH", meta->kiln_version);
    if (major != KILN_VERSION_MAJOR || minor != KILN_VERSION_MINOR)
        return kiln_error(KILN_ERR_ENGINE_MISMATCH, "engine built by kiln %s, this is kiln %s (an engine is read only by the "
                          "kiln major.minor version that built it): %s", meta->kiln_version, KILN_VERSION_STRING,
                          rebuild_hint(hint, sizeof hint, got_kind, meta->source, path));
    if (got_kind != kind) return kind_mismatch(got_kind);
    if (expected_target && strcmp(expected_target, meta->target) != 0)
        return kiln_error(KILN_ERR_ENGINE_MISMATCH, "engine built for target '%s' (%s), this needs target '%s': %s",
                          meta->target, meta->device, expected_target, rebuild_hint(hint, sizeof hint, got_kind, meta->source, path));
    KILN_TRY(check_sections(d, size, ids, n, secs));
    meta->graph_bytes = n > 1 ? secs[0].bytes : 0;
    meta->weights_bytes = secs[n - 1].bytes;
    return KILN_OK;
}

kiln_status kiln_engine_file_kind(const char *path, kiln_engine_kind *kind) {
    kiln_file_map m;
    KILN_TRY(kiln_file_map_open(path, &m));
    kiln_status s = check_header_frame(m.data, m.size, path);
    if (s == KILN_OK) {
        uint32_t k = kiln_le32(m.data + KILN_EH_KIND);
        if (k > KILN_ENGINE_KIND_LLM) s = corrupt("engine kind %u is unknown", k);
        else *kind = (kiln_engine_kind)k;
    }
    kiln_file_unmap(&m);
    return s == KILN_OK ? s : kiln_error_prefix(s, "%s", path);
}

/* ---- graph section decoding ---- */

typedef struct rstr {
    const char *s; /* NUL-terminated inside the image */
    uint32_t len;
    bool is_name;  /* no NUL byte inside */
} rstr;

typedef struct reader {
    const uint8_t *p; /* the graph section */
    size_t size, pos;
    kiln_graph *g;
    kiln_engine_meta *meta; /* receives the profiles and node precisions */
    rstr *strs;
    uint32_t nstrs;
    kiln_tensor *tensors; /* views into the weights section */
    uint32_t ntensors;
    const uint8_t *weights;
    uint64_t weights_size;
    int *ids; /* scratch for node inputs and outputs */
    size_t cap_ids;
    uint8_t *flags; /* each value's flags, applied after the input/output lists */
    uint64_t copied, copy_budget; /* string bytes the graph copies, bounded so that a small file
                                     cannot make the loader allocate without limit */
} reader;

static kiln_status need(reader *r, size_t n, const char *what) {
    if (r->size - r->pos < n) return corrupt("the graph section ends inside %s", what);
    return KILN_OK;
}

static kiln_status rd_u32(reader *r, uint32_t *v, const char *what) {
    KILN_TRY(need(r, 4, what));
    *v = kiln_le32(r->p + r->pos);
    r->pos += 4;
    return KILN_OK;
}

static kiln_status rd_u64(reader *r, uint64_t *v, const char *what) {
    KILN_TRY(need(r, 8, what));
    *v = kiln_le64(r->p + r->pos);
    r->pos += 8;
    return KILN_OK;
}

static kiln_status rd_i64(reader *r, int64_t *v, const char *what) {
    uint64_t u;
    KILN_TRY(rd_u64(r, &u, what));
    *v = (int64_t)u;
    return KILN_OK;
}

/* A count of records each at least min_bytes long: it must fit in an int and in what is left of the
 * section (so nothing is allocated for records that cannot be there). */
static kiln_status rd_count(reader *r, uint32_t *n, size_t min_bytes, const char *what) {
    KILN_TRY(rd_u32(r, n, what));
    if (*n > INT32_MAX || *n > (r->size - r->pos) / min_bytes)
        return corrupt("%u %s do not fit in the %zu bytes left of the graph section", *n, what, r->size - r->pos);
    return KILN_OK;
}

/* A string table index; the string may hold NUL bytes. */
static kiln_status rd_bytes(reader *r, const rstr **s, const char *what) {
    uint32_t id;
    KILN_TRY(rd_u32(r, &id, what));
    if (id >= r->nstrs) return corrupt("%s refers to string %u of %u", what, id, r->nstrs);
    *s = &r->strs[id];
    r->copied += (uint64_t)(*s)->len + 1;
    if (r->copied > r->copy_budget)
        return corrupt("its strings are referenced more than a %zu-byte graph section can hold", r->size);
    return KILN_OK;
}

/* A string table index for a name (a C string: no NUL inside). */
static kiln_status rd_name(reader *r, const char **s, const char *what) {
    const rstr *rs = NULL;
    KILN_TRY(rd_bytes(r, &rs, what));
    if (!rs->is_name) return corrupt("%s \"%s\" holds a NUL byte", what, rs->s);
    *s = rs->s;
    return KILN_OK;
}

static kiln_status oom(void) { return kiln_error(KILN_ERR_OUT_OF_MEMORY, "out of memory loading the engine"); }

static kiln_status rd_strings(reader *r) {
    KILN_TRY(rd_count(r, &r->nstrs, 5, "strings"));
    r->strs = malloc(((size_t)r->nstrs + 1) * sizeof *r->strs);
    if (!r->strs) return oom();
    for (uint32_t i = 0; i < r->nstrs; i++) {
        uint32_t len;
        KILN_TRY(rd_u32(r, &len, "the string table"));
        KILN_TRY(need(r, (size_t)len + 1, "the string table"));
        if (r->p[r->pos + len] != 0) return corrupt("string %u is not NUL-terminated", i);
        const char *s = (const char *)r->p + r->pos;
        r->strs[i] = (rstr){s, len, !memchr(s, 0, len)};
        r->pos += (size_t)len + 1;
    }
    return KILN_OK;
}

static kiln_status rd_graph_info(reader *r) {
    kiln_graph *g = r->g;
    const char *name, *producer;
    KILN_TRY(rd_name(r, &name, "the graph name"));
    KILN_TRY(rd_name(r, &producer, "the graph producer"));
    KILN_TRY(rd_i64(r, &g->ir_version, "the IR version"));
    g->name = kiln_graph_strdup(g, name);
    g->producer = kiln_graph_strdup(g, producer);
    if (!g->name || !g->producer) return oom();

    uint32_t n;
    KILN_TRY(rd_count(r, &n, 12, "opset imports"));
    g->opsets = n ? kiln_graph_alloc(g, n * sizeof *g->opsets) : NULL;
    if (n && !g->opsets) return oom();
    for (uint32_t i = 0; i < n; i++) {
        const char *domain;
        KILN_TRY(rd_name(r, &domain, "an opset domain"));
        KILN_TRY(rd_i64(r, &g->opsets[i].version, "an opset version"));
        if (!(g->opsets[i].domain = kiln_graph_strdup(g, domain))) return oom();
        g->nopsets = (int)i + 1;
    }

    KILN_TRY(rd_count(r, &n, 4, "symbols"));
    for (uint32_t i = 0; i < n; i++) {
        const char *sym_name;
        int32_t sym;
        KILN_TRY(rd_name(r, &sym_name, "a symbol"));
        KILN_TRY(kiln_graph_symbol(g, sym_name, &sym));
        if (sym != (int32_t)i + 1) return corrupt("symbol '%s' appears twice", sym_name);
    }
    return KILN_OK;
}

/* The tensor table: each record must describe a fixed-size dtype, a valid shape whose byte size is
 * the recorded size, and a 64-byte aligned range inside the weights section. */
static kiln_status rd_tensors(reader *r) {
    KILN_TRY(rd_count(r, &r->ntensors, 24, "tensors"));
    r->tensors = calloc((size_t)r->ntensors + 1, sizeof *r->tensors);
    if (!r->tensors) return oom();
    for (uint32_t i = 0; i < r->ntensors; i++) {
        uint32_t dtype, ndim;
        int64_t dims[KILN_MAX_DIMS];
        uint64_t offset, nbytes;
        KILN_TRY(rd_u32(r, &dtype, "a tensor record"));
        KILN_TRY(rd_u32(r, &ndim, "a tensor record"));
        if (dtype >= KILN_DTYPE_COUNT || kiln_dtype_size((kiln_dtype)dtype) == 0)
            return corrupt("tensor %u has dtype %u", i, dtype);
        if (ndim > KILN_MAX_DIMS) return corrupt("tensor %u has rank %u (at most %d)", i, ndim, KILN_MAX_DIMS);
        uint64_t bytes = kiln_dtype_size((kiln_dtype)dtype);
        bool overflow = false;
        for (uint32_t d = 0; d < ndim; d++) {
            KILN_TRY(rd_i64(r, &dims[d], "a tensor record"));
            if (dims[d] < 0) return corrupt("tensor %u has dimension %lld", i, (long long)dims[d]);
            if (dims[d] && bytes > UINT64_MAX / (uint64_t)dims[d]) overflow = true;
            else bytes *= (uint64_t)dims[d];
        }
        KILN_TRY(rd_u64(r, &offset, "a tensor record"));
        KILN_TRY(rd_u64(r, &nbytes, "a tensor record"));
        if (overflow || bytes != nbytes)
            return corrupt("tensor %u holds %llu bytes, its shape needs %s%llu", i, (unsigned long long)nbytes,
                           overflow ? "more than " : "", (unsigned long long)bytes);
        if (offset % KILN_ENGINE_TENSOR_ALIGN != 0 || offset > r->weights_size || nbytes > r->weights_size - offset)
            return corrupt("tensor %u [%llu, +%llu) is misaligned or outside the %llu-byte weights section", i,
                           (unsigned long long)offset, (unsigned long long)nbytes, (unsigned long long)r->weights_size);
        kiln_tensor_view(&r->tensors[i], (kiln_dtype)dtype, (int)ndim, dims,
                         nbytes ? (void *)(r->weights + offset) : NULL);
    }
    return KILN_OK;
}

static kiln_status rd_tensor_id(reader *r, kiln_tensor *t, const char *what) {
    uint32_t id;
    KILN_TRY(rd_u32(r, &id, what));
    if (id >= r->ntensors) return corrupt("%s refers to tensor %u of %u", what, id, r->ntensors);
    *t = r->tensors[id];
    return KILN_OK;
}

/* ndim dimensions of value name: static (value >= 0, symbol 0), symbolic (-1, 1..nsymbols) or
 * unknown (-1, -1). */
static kiln_status rd_dims(reader *r, const char *name, int ndim, kiln_dim *dims) {
    for (int d = 0; d < ndim; d++) {
        int64_t value;
        uint32_t sym;
        KILN_TRY(rd_i64(r, &value, "a value's dimensions"));
        KILN_TRY(rd_u32(r, &sym, "a value's dimensions"));
        int32_t s = (int32_t)sym;
        bool ok = s == 0 ? value >= 0 : (s == -1 || (s > 0 && s <= r->g->nsymbols)) && value == -1;
        if (!ok) return corrupt("value '%s' dimension %d is {%lld, symbol %d}", name, d, (long long)value, s);
        dims[d] = (kiln_dim){value, s};
    }
    return KILN_OK;
}

static kiln_status rd_values(reader *r) {
    kiln_graph *g = r->g;
    uint32_t n;
    KILN_TRY(rd_count(r, &n, 16, "values"));
    r->flags = malloc((size_t)n + 1);
    if (!r->flags) return oom();
    for (uint32_t i = 0; i < n; i++) {
        const char *name;
        uint32_t dtype, ndim, flags;
        KILN_TRY(rd_name(r, &name, "a value name"));
        if (!name[0]) return corrupt("value %u has no name", i);
        KILN_TRY(rd_u32(r, &dtype, "a value record"));
        KILN_TRY(rd_u32(r, &ndim, "a value record"));
        KILN_TRY(rd_u32(r, &flags, "a value record"));
        if (dtype >= KILN_DTYPE_COUNT) return corrupt("value '%s' has dtype %u", name, dtype);
        if ((int32_t)ndim < -1 || (int32_t)ndim > KILN_MAX_DIMS)
            return corrupt("value '%s' has rank %d", name, (int32_t)ndim);
        if (flags & ~(uint32_t)(KILN_EV_INPUT | KILN_EV_OUTPUT | KILN_EV_CONSTANT))
            return corrupt("value '%s' has flags 0x%x", name, flags);
        kiln_dim dims[KILN_MAX_DIMS];
        KILN_TRY(rd_dims(r, name, (int32_t)ndim, dims));
        int id;
        KILN_TRY(kiln_graph_value(g, name, &id));
        if (id != (int)i) return corrupt("value name '%s' appears twice", name);
        if (flags & KILN_EV_CONSTANT) {
            kiln_tensor t;
            KILN_TRY(rd_tensor_id(r, &t, "a constant"));
            KILN_TRY(kiln_graph_set_constant(g, id, &t));
        }
        kiln_value *v = &g->values[id];
        v->dtype = (kiln_dtype)dtype;
        v->ndim = (int32_t)ndim;
        if (v->ndim > 0) memcpy(v->dims, dims, (size_t)v->ndim * sizeof *dims);
        r->flags[i] = (uint8_t)flags;
    }
    return KILN_OK;
}

/* The graph input and output lists; then each value's input/output flags as recorded. */
static kiln_status rd_io(reader *r) {
    kiln_graph *g = r->g;
    for (int list = 0; list < 2; list++) {
        const char *what = list ? "graph outputs" : "graph inputs";
        uint32_t n;
        KILN_TRY(rd_count(r, &n, 4, what));
        for (uint32_t i = 0; i < n; i++) {
            uint32_t id;
            KILN_TRY(rd_u32(r, &id, what));
            if (id >= (uint32_t)g->nvalues) return corrupt("%s refer to value %u of %d", what, id, g->nvalues);
            KILN_TRY(list ? kiln_graph_add_output(g, (int)id) : kiln_graph_add_input(g, (int)id));
        }
    }
    for (int i = 0; i < g->nvalues; i++) {
        g->values[i].is_input = r->flags[i] & KILN_EV_INPUT;
        g->values[i].is_output = r->flags[i] & KILN_EV_OUTPUT;
    }
    return KILN_OK;
}

/* n value ids (-1 = absent) into r->ids starting at index at (growing r->ids as needed). */
static kiln_status rd_value_ids(reader *r, uint32_t n, size_t at, const char *what) {
    if (at + n + 1 > r->cap_ids) {
        size_t cap = 2 * (at + n + 1);
        int *ids = realloc(r->ids, cap * sizeof *ids);
        if (!ids) return oom();
        r->ids = ids;
        r->cap_ids = cap;
    }
    for (uint32_t k = 0; k < n; k++) {
        uint32_t u;
        KILN_TRY(rd_u32(r, &u, what));
        int32_t id = (int32_t)u;
        if (id < -1 || id >= r->g->nvalues) return corrupt("%s refer to value %d of %d", what, id, r->g->nvalues);
        r->ids[at + k] = id;
    }
    return KILN_OK;
}

/* Allocates n elements of esize in the graph (NULL when n == 0). */
static kiln_status graph_array(kiln_graph *g, uint32_t n, size_t esize, void **out) {
    *out = n ? kiln_graph_alloc(g, n * esize) : NULL;
    return n && !*out ? oom() : KILN_OK;
}

/* Decodes one attribute into n->attrs[n->nattrs] (allocated by the caller) and counts it. */
static kiln_status rd_attr(reader *r, kiln_node *n) {
    kiln_graph *g = r->g;
    const char *name;
    uint32_t type, count;
    KILN_TRY(rd_name(r, &name, "an attribute name"));
    KILN_TRY(rd_u32(r, &type, "an attribute"));
    switch (type) {
    case KILN_ATTR_FLOAT: case KILN_ATTR_INT: case KILN_ATTR_STRING: case KILN_ATTR_TENSOR:
    case KILN_ATTR_FLOATS: case KILN_ATTR_INTS: case KILN_ATTR_STRINGS: case KILN_ATTR_TENSORS:
        break;
    default:
        return corrupt("node '%s' attribute '%s' has type %u, which engine files do not hold", n->name, name, type);
    }
    kiln_attr *a = &n->attrs[n->nattrs++];
    a->type = (kiln_attr_type)type;
    if (!(a->name = kiln_graph_strdup(g, name))) return oom();
    switch (type) {
    case KILN_ATTR_FLOAT: {
        uint32_t bits;
        KILN_TRY(rd_u32(r, &bits, "an attribute"));
        memcpy(&a->f, &bits, 4);
        return KILN_OK;
    }
    case KILN_ATTR_INT: return rd_i64(r, &a->i, "an attribute");
    case KILN_ATTR_STRING: {
        const rstr *s = NULL;
        KILN_TRY(rd_bytes(r, &s, "a string attribute"));
        char *copy = kiln_graph_alloc(g, (size_t)s->len + 1);
        if (!copy) return oom();
        memcpy(copy, s->s, s->len);
        a->s = copy;
        a->s_len = s->len;
        return KILN_OK;
    }
    case KILN_ATTR_TENSOR:
        if (!(a->t = kiln_graph_alloc(g, sizeof *a->t))) return oom();
        return rd_tensor_id(r, a->t, "a tensor attribute");
    case KILN_ATTR_FLOATS:
        KILN_TRY(rd_count(r, &count, 4, "attribute floats"));
        KILN_TRY(graph_array(g, count, sizeof *a->floats, (void **)&a->floats));
        a->n = (int)count;
        for (uint32_t e = 0; e < count; e++) {
            uint32_t bits;
            KILN_TRY(rd_u32(r, &bits, "attribute floats"));
            memcpy(&a->floats[e], &bits, 4);
        }
        return KILN_OK;
    case KILN_ATTR_INTS:
        KILN_TRY(rd_count(r, &count, 8, "attribute ints"));
        KILN_TRY(graph_array(g, count, sizeof *a->ints, (void **)&a->ints));
        a->n = (int)count;
        for (uint32_t e = 0; e < count; e++) KILN_TRY(rd_i64(r, &a->ints[e], "attribute ints"));
        return KILN_OK;
    case KILN_ATTR_STRINGS:
        KILN_TRY(rd_count(r, &count, 4, "attribute strings"));
        KILN_TRY(graph_array(g, count, sizeof *a->strings, (void **)&a->strings));
        a->n = (int)count;
        for (uint32_t e = 0; e < count; e++) {
            const char *s;
            KILN_TRY(rd_name(r, &s, "attribute strings"));
            if (!(a->strings[e] = kiln_graph_strdup(g, s))) return oom();
        }
        return KILN_OK;
    case KILN_ATTR_TENSORS:
        KILN_TRY(rd_count(r, &count, 4, "attribute tensors"));
        KILN_TRY(graph_array(g, count, sizeof *a->tensors, (void **)&a->tensors));
        a->n = (int)count;
        for (uint32_t e = 0; e < count; e++) KILN_TRY(rd_tensor_id(r, &a->tensors[e], "a tensor attribute"));
        return KILN_OK;
    default:
        return kiln_error(KILN_ERR_INTERNAL, "attribute type %u passed the check", type);
    }
}

static kiln_status rd_nodes(reader *r) {
    kiln_graph *g = r->g;
    uint32_t n;
    KILN_TRY(rd_count(r, &n, 28, "nodes"));
    for (uint32_t i = 0; i < n; i++) {
        const char *name, *op_type, *domain;
        uint32_t opset, nin, nout, nattrs;
        KILN_TRY(rd_name(r, &name, "a node name"));
        KILN_TRY(rd_name(r, &op_type, "a node op type"));
        KILN_TRY(rd_name(r, &domain, "a node domain"));
        KILN_TRY(rd_u32(r, &opset, "a node record"));
        KILN_TRY(rd_count(r, &nin, 4, "node inputs"));
        KILN_TRY(rd_value_ids(r, nin, 0, "node inputs"));
        KILN_TRY(rd_count(r, &nout, 4, "node outputs"));
        KILN_TRY(rd_value_ids(r, nout, nin, "node outputs"));
        int id;
        KILN_TRY(kiln_graph_add_node(g, op_type, domain, name, (int)nin, r->ids, (int)nout, r->ids + nin, &id));
        kiln_node *node = &g->nodes[id];
        node->opset = (int32_t)opset;
        KILN_TRY(rd_count(r, &nattrs, 12, "attributes"));
        KILN_TRY(graph_array(g, nattrs, sizeof *node->attrs, (void **)&node->attrs)); /* zeroed */
        for (uint32_t k = 0; k < nattrs; k++) KILN_TRY(rd_attr(r, node));
    }
    return KILN_OK;
}

/* One profile range of input `input` (rank -1 = unconstrained, else the input's rank when known),
 * with 0 <= min <= opt <= max in every dimension. */
static kiln_status rd_range(reader *r, int p, int input, kiln_profile_range *out) {
    const kiln_value *v = &r->g->values[r->g->inputs[input]];
    uint32_t ndim;
    KILN_TRY(rd_u32(r, &ndim, "a profile"));
    out->ndim = (int32_t)ndim;
    if (out->ndim < -1 || out->ndim > KILN_MAX_DIMS || (out->ndim >= 0 && v->ndim >= 0 && out->ndim != v->ndim))
        return corrupt("profile %d gives input '%s' rank %d, it has rank %d", p, v->name, out->ndim, v->ndim);
    for (int d = 0; d < out->ndim; d++) {
        KILN_TRY(rd_i64(r, &out->min[d], "a profile"));
        KILN_TRY(rd_i64(r, &out->opt[d], "a profile"));
        KILN_TRY(rd_i64(r, &out->max[d], "a profile"));
        if (out->min[d] < 0 || out->min[d] > out->opt[d] || out->opt[d] > out->max[d])
            return corrupt("profile %d, input '%s', dimension %d: min %lld, opt %lld, max %lld are not ordered", p,
                           v->name, d, (long long)out->min[d], (long long)out->opt[d], (long long)out->max[d]);
    }
    return KILN_OK;
}

/* The tables after the nodes: optimization profiles, then per-node precisions (none or one per node). */
static kiln_status rd_build_tables(reader *r) {
    kiln_graph *g = r->g;
    uint32_t n;
    KILN_TRY(rd_count(r, &n, 4 * (size_t)(g->ninputs ? g->ninputs : 1), "profiles"));
    if (n && !g->ninputs) return corrupt("%u profiles for a graph without inputs", n);
    if (n) {
        r->meta->profiles = kiln_graph_alloc(g, (size_t)n * (size_t)g->ninputs * sizeof *r->meta->profiles);
        if (!r->meta->profiles) return oom();
        for (uint32_t p = 0; p < n; p++)
            for (int k = 0; k < g->ninputs; k++)
                KILN_TRY(rd_range(r, (int)p, k, &r->meta->profiles[p * (uint32_t)g->ninputs + (uint32_t)k]));
    }
    r->meta->nprofiles = (int)n;
    KILN_TRY(rd_count(r, &n, 1, "node precisions"));
    if (n && n != (uint32_t)g->nnodes) return corrupt("%u node precisions for %d nodes", n, g->nnodes);
    if (!n) return KILN_OK;
    if (!(r->meta->node_precision = kiln_graph_alloc(g, n))) return oom();
    for (uint32_t i = 0; i < n; i++) {
        uint8_t prec = r->p[r->pos++];
        if (prec > KILN_PRECISION_BF16) return corrupt("node '%s' has precision %u", g->nodes[i].name, prec);
        r->meta->node_precision[i] = prec;
    }
    return KILN_OK;
}

/* The tactics table (after the profiles, which say how many sets it holds): records of (profile,
 * node) pairs in increasing order, each of a known kind. The blob is opaque here; the backend validates
 * it with its library when the engine is prepared. */
static kiln_status rd_tactics(reader *r) {
    kiln_graph *g = r->g;
    uint32_t n;
    int64_t sets = kiln_engine_tactic_sets(r->meta), total = sets * g->nnodes;
    KILN_TRY(rd_count(r, &n, KILN_TACTIC_RECORD_BYTES, "tactics"));
    if (n > total) return corrupt("%u tactics for %d nodes in %lld profile(s)", n, g->nnodes, (long long)sets);
    if (!n) return KILN_OK;
    kiln_tactic *t = kiln_graph_alloc(g, (size_t)total * sizeof *t);
    if (!t) return oom();
    memset(t, 0, (size_t)total * sizeof *t);
    int64_t prev = -1;
    for (uint32_t k = 0; k < n; k++) {
        uint32_t profile, node, f[6];
        KILN_TRY(rd_u32(r, &profile, "a tactic"));
        KILN_TRY(rd_u32(r, &node, "a tactic"));
        for (int j = 0; j < 6; j++) KILN_TRY(rd_u32(r, &f[j], "a tactic"));
        int64_t at = (int64_t)profile * g->nnodes + node;
        if (profile >= sets || node >= (uint32_t)g->nnodes || at <= prev)
            return corrupt("tactic %u is for profile %u, node %u (after entry %lld of %lld)", k, profile, node,
                           (long long)prev, (long long)total);
        if (f[0] != KILN_TACTIC_CUBLASLT && f[0] != KILN_TACTIC_CUDNN && f[0] != KILN_TACTIC_PATH)
            return corrupt("node '%s' has tactic kind %u", g->nodes[node].name, f[0]);
        prev = at;
        kiln_tactic *d = &t[at];
        d->kind = f[0];
        d->algo = (int32_t)f[1];
        d->math = (int32_t)f[2];
        d->heuristic_index = (int32_t)f[3];
        memcpy(&d->time_ms, &f[4], 4);
        memcpy(&d->heuristic_ms, &f[5], 4);
        KILN_TRY(need(r, sizeof d->blob, "a tactic"));
        memcpy(d->blob, r->p + r->pos, sizeof d->blob);
        r->pos += sizeof d->blob;
    }
    r->meta->tactics = t;
    return KILN_OK;
}

static kiln_status rd_graph(reader *r) {
    KILN_TRY(rd_strings(r));
    KILN_TRY(rd_graph_info(r));
    KILN_TRY(rd_tensors(r));
    KILN_TRY(rd_values(r));
    KILN_TRY(rd_io(r));
    KILN_TRY(rd_nodes(r));
    KILN_TRY(rd_build_tables(r));
    KILN_TRY(rd_tactics(r));
    if (r->pos != r->size) return corrupt("%zu unread bytes at the end of the graph section", r->size - r->pos);
    return KILN_OK;
}

/* Verifies data[0..size) and builds the graph. keep (released by release) is handed to the graph, or
 * released here on failure; path (or NULL) is used in messages only. */
static kiln_status read_image(const uint8_t *data, size_t size, const char *expected_target, const char *path,
                              void *keep, void (*release)(void *), kiln_graph **out, kiln_engine_meta *meta) {
    kiln_engine_meta local;
    if (!meta) meta = &local;
    memset(meta, 0, sizeof *meta);
    static const uint32_t ids[2] = {KILN_SECTION_GRAPH, KILN_SECTION_WEIGHTS};
    kiln_engine_section sec[2] = {{0}};
    kiln_status s = kiln_engine_check_image(data, size, KILN_ENGINE_KIND_GRAPH, expected_target, path, ids, 2, sec, meta);
    const kiln_engine_section gs = sec[0], ws = sec[1];
    kiln_graph *g = NULL;
    if (s == KILN_OK && !(g = kiln_graph_create())) s = oom();
    if (s != KILN_OK) {
        if (keep) release(keep);
        return s;
    }
    if (keep && (s = kiln_graph_keep_alive(g, keep, release)) != KILN_OK) { /* it released keep */
        kiln_graph_free(g);
        return s;
    }
    reader r = {.p = data + gs.offset, .size = gs.bytes, .g = g, .meta = meta, .weights = data + ws.offset,
                .weights_size = ws.bytes, .copy_budget = 64 * gs.bytes + (1u << 20)};
    s = rd_graph(&r);
    free(r.strs);
    free(r.tensors);
    free(r.ids);
    free(r.flags);
    if (s != KILN_OK) { /* the tables lived in the graph */
        meta->nprofiles = 0;
        meta->profiles = NULL;
        meta->node_precision = NULL;
        meta->tactics = NULL;
        kiln_graph_free(g);
        return s;
    }
    *out = g;
    return KILN_OK;
}

kiln_status kiln_engine_buffer_read(const void *data, size_t size, const char *expected_target, kiln_graph **g,
                                    kiln_engine_meta *meta) {
    KILN_ASSERT(g && (data || size == 0));
    *g = NULL;
    return read_image(data, size, expected_target, NULL, NULL, NULL, g, meta);
}

kiln_status kiln_engine_file_read(const char *path, const char *expected_target, kiln_graph **g,
                                  kiln_engine_meta *meta) {
    KILN_ASSERT(g && path);
    *g = NULL;
    kiln_file_map *m;
    KILN_TRY(kiln_file_map_new_populated(path, &m));
    kiln_status s = read_image(m->data, m->size, expected_target, path, m, kiln_file_map_free, g, meta);
    if (s != KILN_OK) return kiln_error_prefix(s, "%s", path);
    return KILN_OK;
}
