/* engine_write.c — serializes a graph and its metadata into a .kiln engine file (layout:
 * docs/engine-format.md): the weights section, which holds the data of every constant and tensor
 * attribute, 64-byte aligned, written straight from the tensors (no copy) — begun as soon as the
 * weights are final, on a thread, while a build goes on (kiln_engine_out) — then the graph section
 * (string table, tensor table, values, graph inputs/outputs, nodes with their attributes,
 * optimization profiles, per-node precisions, tactics) and the header (engine_image_write.c).
 * Every field is encoded explicitly, little-endian; nothing is written as a C struct. */
#include "engine/engine_format.h"

#include "core/checksum.h"
#include "core/file.h"
#include "core/log.h"
#include "core/status.h"
#include "engine/engine_layout.h"

#include <stdlib.h>
#include <string.h>

/* ---- a growable byte buffer; an allocation failure is sticky and checked once at the end ---- */

typedef struct wbuf {
    uint8_t *p;
    size_t n, cap;
    bool oom;
} wbuf;

static void wb_put(wbuf *b, const void *src, size_t n) {
    if (b->oom || n == 0) return;
    if (b->cap - b->n < n) {
        size_t cap = b->cap ? b->cap : 4096;
        while (cap - b->n < n) cap *= 2;
        uint8_t *p = realloc(b->p, cap);
        if (!p) {
            b->oom = true;
            return;
        }
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->n, src, n);
    b->n += n;
}

static void wb_u32(wbuf *b, uint32_t v) {
    uint8_t t[4];
    kiln_put_le32(t, v);
    wb_put(b, t, 4);
}

static void wb_u64(wbuf *b, uint64_t v) {
    uint8_t t[8];
    kiln_put_le64(t, v);
    wb_put(b, t, 8);
}

static void wb_f32(wbuf *b, float f) {
    uint32_t bits;
    memcpy(&bits, &f, 4);
    wb_u32(b, bits);
}

/* ---- the string table: each distinct byte string is stored once and referred to by index ---- */

typedef struct strslot {
    const char *s; /* borrowed from the graph; NULL = empty slot */
    size_t len;
    uint32_t id;
} strslot;

typedef struct strtab {
    wbuf records; /* u32 length, bytes, NUL — one per string, in id order */
    uint32_t count;
    strslot *slots;
    size_t cap; /* power of two, kept at least twice count */
} strtab;

static uint64_t hash_bytes(const char *s, size_t len) {
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < len; i++) h = (h ^ (unsigned char)s[i]) * 1099511628211ull;
    return h;
}

static kiln_status strtab_grow(strtab *st) {
    size_t cap = st->cap ? st->cap * 2 : 256;
    strslot *slots = calloc(cap, sizeof *slots);
    if (!slots) return kiln_error(KILN_ERR_OUT_OF_MEMORY, "out of memory writing the engine");
    for (size_t i = 0; i < st->cap; i++) {
        if (!st->slots[i].s) continue;
        size_t h = hash_bytes(st->slots[i].s, st->slots[i].len) & (cap - 1);
        while (slots[h].s) h = (h + 1) & (cap - 1);
        slots[h] = st->slots[i];
    }
    free(st->slots);
    st->slots = slots;
    st->cap = cap;
    return KILN_OK;
}

/* The id of the byte string s[0..len) (NULL means ""), adding it to the table when new. */
static kiln_status strtab_id(strtab *st, const char *s, size_t len, uint32_t *id) {
    if (!s) {
        s = "";
        len = 0;
    }
    if (len > UINT32_MAX) return kiln_error(KILN_ERR_UNSUPPORTED, "a string of %zu bytes is too long for an engine file", len);
    if ((size_t)(st->count + 1) * 2 > st->cap) KILN_TRY(strtab_grow(st));
    size_t h = hash_bytes(s, len) & (st->cap - 1);
    for (; st->slots[h].s; h = (h + 1) & (st->cap - 1)) {
        if (st->slots[h].len == len && !memcmp(st->slots[h].s, s, len)) {
            *id = st->slots[h].id;
            return KILN_OK;
        }
    }
    st->slots[h] = (strslot){s, len, st->count};
    wb_u32(&st->records, (uint32_t)len);
    wb_put(&st->records, s, len);
    wb_put(&st->records, "", 1);
    *id = st->count++;
    return KILN_OK;
}

/* ---- the writer ---- */

typedef struct writer {
    const kiln_graph *g;
    const kiln_engine_meta *meta;
    strtab st;
    wbuf body;                  /* the graph section after the string table */
    const kiln_tensor **tensors; /* every tensor whose data goes to the weights section, in id order */
    uint64_t *offsets;          /* each tensor's offset inside the weights section */
    uint32_t ntensors, cap_tensors;
    uint64_t weights_size;
} writer;

static kiln_status put_str(writer *w, const char *s) {
    uint32_t id;
    KILN_TRY(strtab_id(&w->st, s, s ? strlen(s) : 0, &id));
    wb_u32(&w->body, id);
    return KILN_OK;
}

/* Checks that t can be stored (a fixed-size dtype, a valid shape, nbytes consistent with it) and
 * appends it to the tensor table, giving it a 64-byte aligned place in the weights section. what
 * names the tensor for messages. */
static kiln_status add_tensor(writer *w, const kiln_tensor *t, const char *what, const char *name) {
    size_t esize = kiln_dtype_size(t->dtype);
    if (esize == 0)
        return kiln_error(KILN_ERR_UNSUPPORTED, "%s '%s' is a %s tensor, which engine files cannot hold", what,
                          name, kiln_dtype_name(t->dtype));
    if (t->ndim < 0 || t->ndim > KILN_MAX_DIMS)
        return kiln_error(KILN_ERR_INTERNAL, "%s '%s' has rank %d", what, name, t->ndim);
    uint64_t bytes = esize;
    for (int d = 0; d < t->ndim; d++) {
        if (t->dims[d] < 0) return kiln_error(KILN_ERR_INTERNAL, "%s '%s' has dimension %lld", what, name, (long long)t->dims[d]);
        if (t->dims[d] && bytes > UINT64_MAX / (uint64_t)t->dims[d])
            return kiln_error(KILN_ERR_INTERNAL, "%s '%s' is too large", what, name);
        bytes *= (uint64_t)t->dims[d];
    }
    if (bytes != t->nbytes || (bytes && !t->data))
        return kiln_error(KILN_ERR_INTERNAL, "%s '%s' holds %zu bytes of data, its shape needs %llu", what, name,
                          t->data ? t->nbytes : 0, (unsigned long long)bytes);
    if (w->ntensors == w->cap_tensors) {
        uint32_t cap = w->cap_tensors ? w->cap_tensors * 2 : 64;
        const kiln_tensor **tp = realloc(w->tensors, cap * sizeof *tp);
        if (tp) w->tensors = tp;
        uint64_t *op = realloc(w->offsets, cap * sizeof *op);
        if (op) w->offsets = op;
        if (!tp || !op) return kiln_error(KILN_ERR_OUT_OF_MEMORY, "out of memory writing the engine");
        w->cap_tensors = cap;
    }
    uint64_t off = (w->weights_size + KILN_ENGINE_TENSOR_ALIGN - 1) & ~(uint64_t)(KILN_ENGINE_TENSOR_ALIGN - 1);
    w->tensors[w->ntensors] = t;
    w->offsets[w->ntensors++] = off;
    w->weights_size = off + bytes;
    return KILN_OK;
}

/* The kinds of attribute an engine can hold; the others fail naming the node and the attribute. */
static kiln_status check_attr(const kiln_node *n, const kiln_attr *a) {
    switch (a->type) {
    case KILN_ATTR_FLOAT: case KILN_ATTR_INT: case KILN_ATTR_STRING: case KILN_ATTR_TENSOR:
    case KILN_ATTR_FLOATS: case KILN_ATTR_INTS: case KILN_ATTR_STRINGS: case KILN_ATTR_TENSORS:
        break;
    case KILN_ATTR_GRAPH: case KILN_ATTR_GRAPHS:
        return kiln_error(KILN_ERR_UNSUPPORTED,
                          "node '%s' (%s): attribute '%s' is a subgraph, which engine files cannot hold", n->name,
                          n->op_type, a->name);
    case KILN_ATTR_SPARSE_TENSOR: case KILN_ATTR_SPARSE_TENSORS:
        return kiln_error(KILN_ERR_UNSUPPORTED,
                          "node '%s' (%s): attribute '%s' is a sparse tensor, which engine files cannot hold",
                          n->name, n->op_type, a->name);
    default:
        return kiln_error(KILN_ERR_UNSUPPORTED, "node '%s' (%s): attribute '%s' has type %d, which engine files cannot hold",
                          n->name, n->op_type, a->name, (int)a->type);
    }
    bool list = a->type == KILN_ATTR_FLOATS || a->type == KILN_ATTR_INTS || a->type == KILN_ATTR_STRINGS ||
                a->type == KILN_ATTR_TENSORS;
    if (list) {
        const void *arr = a->type == KILN_ATTR_FLOATS ? (const void *)a->floats
                          : a->type == KILN_ATTR_INTS  ? (const void *)a->ints
                          : a->type == KILN_ATTR_STRINGS ? (const void *)a->strings
                                                         : (const void *)a->tensors;
        if (a->n < 0 || (a->n > 0 && !arr))
            return kiln_error(KILN_ERR_INTERNAL, "node '%s': list attribute '%s' has %d elements and no array", n->name,
                              a->name, a->n);
    }
    if (a->type == KILN_ATTR_TENSOR && !a->t)
        return kiln_error(KILN_ERR_INTERNAL, "node '%s': tensor attribute '%s' has no tensor", n->name, a->name);
    return KILN_OK;
}

/* First pass: validates what the format cannot hold and collects the tensor table (constants in value
 * order, then tensor attributes in node and attribute order — the order the second pass refers to). */
static kiln_status collect_tensors(writer *w) {
    const kiln_graph *g = w->g;
    for (int i = 0; i < g->nvalues; i++)
        if (g->values[i].constant) KILN_TRY(add_tensor(w, g->values[i].constant, "constant", g->values[i].name));
    for (int i = 0; i < g->nnodes; i++) {
        const kiln_node *n = &g->nodes[i];
        for (int k = 0; k < n->nattrs; k++) {
            const kiln_attr *a = &n->attrs[k];
            KILN_TRY(check_attr(n, a));
            if (a->type == KILN_ATTR_TENSOR) KILN_TRY(add_tensor(w, a->t, "tensor attribute", a->name));
            for (int e = 0; a->type == KILN_ATTR_TENSORS && e < a->n; e++)
                KILN_TRY(add_tensor(w, &a->tensors[e], "tensor attribute", a->name));
        }
    }
    return KILN_OK;
}

static void put_tensor_table(writer *w) {
    wb_u32(&w->body, w->ntensors);
    for (uint32_t i = 0; i < w->ntensors; i++) {
        const kiln_tensor *t = w->tensors[i];
        wb_u32(&w->body, (uint32_t)t->dtype);
        wb_u32(&w->body, (uint32_t)t->ndim);
        for (int d = 0; d < t->ndim; d++) wb_u64(&w->body, (uint64_t)t->dims[d]);
        wb_u64(&w->body, w->offsets[i]);
        wb_u64(&w->body, t->nbytes);
    }
}

/* Values: name, dtype, rank, flags, dims, constant tensor id. *next_tensor counts constants. */
static kiln_status put_values(writer *w, uint32_t *next_tensor) {
    const kiln_graph *g = w->g;
    wb_u32(&w->body, (uint32_t)g->nvalues);
    for (int i = 0; i < g->nvalues; i++) {
        const kiln_value *v = &g->values[i];
        if ((unsigned)v->dtype >= KILN_DTYPE_COUNT || v->ndim < -1 || v->ndim > KILN_MAX_DIMS)
            return kiln_error(KILN_ERR_INTERNAL, "value '%s' has dtype %d and rank %d", v->name, (int)v->dtype, v->ndim);
        KILN_TRY(put_str(w, v->name));
        wb_u32(&w->body, (uint32_t)v->dtype);
        wb_u32(&w->body, (uint32_t)v->ndim);
        wb_u32(&w->body, (v->is_input ? KILN_EV_INPUT : 0) | (v->is_output ? KILN_EV_OUTPUT : 0) |
                             (v->constant ? KILN_EV_CONSTANT : 0));
        for (int d = 0; d < v->ndim; d++) {
            kiln_dim dim = v->dims[d];
            if (dim.sym > g->nsymbols || (dim.sym == 0 && dim.value < 0))
                return kiln_error(KILN_ERR_INTERNAL, "value '%s' dimension %d is {%lld, symbol %d}", v->name, d,
                                  (long long)dim.value, (int)dim.sym);
            wb_u64(&w->body, dim.sym == 0 ? (uint64_t)dim.value : UINT64_MAX);
            wb_u32(&w->body, dim.sym < 0 ? UINT32_MAX : (uint32_t)dim.sym);
        }
        if (v->constant) wb_u32(&w->body, (*next_tensor)++);
    }
    return KILN_OK;
}

static kiln_status put_id_list(writer *w, int n, const int *ids, const char *what) {
    wb_u32(&w->body, (uint32_t)n);
    for (int i = 0; i < n; i++) {
        if (ids[i] < 0 || ids[i] >= w->g->nvalues)
            return kiln_error(KILN_ERR_INTERNAL, "graph %s %d is value id %d, out of range", what, i, ids[i]);
        wb_u32(&w->body, (uint32_t)ids[i]);
    }
    return KILN_OK;
}

static kiln_status put_attr(writer *w, const kiln_attr *a, uint32_t *next_tensor) {
    KILN_TRY(put_str(w, a->name));
    wb_u32(&w->body, (uint32_t)a->type);
    uint32_t id;
    switch (a->type) {
    case KILN_ATTR_FLOAT: wb_f32(&w->body, a->f); break;
    case KILN_ATTR_INT: wb_u64(&w->body, (uint64_t)a->i); break;
    case KILN_ATTR_STRING:
        KILN_TRY(strtab_id(&w->st, a->s, a->s ? a->s_len : 0, &id));
        wb_u32(&w->body, id);
        break;
    case KILN_ATTR_TENSOR: wb_u32(&w->body, (*next_tensor)++); break;
    case KILN_ATTR_FLOATS:
        wb_u32(&w->body, (uint32_t)a->n);
        for (int e = 0; e < a->n; e++) wb_f32(&w->body, a->floats[e]);
        break;
    case KILN_ATTR_INTS:
        wb_u32(&w->body, (uint32_t)a->n);
        for (int e = 0; e < a->n; e++) wb_u64(&w->body, (uint64_t)a->ints[e]);
        break;
    case KILN_ATTR_STRINGS:
        wb_u32(&w->body, (uint32_t)a->n);
        for (int e = 0; e < a->n; e++) KILN_TRY(put_str(w, a->strings[e]));
        break;
    case KILN_ATTR_TENSORS:
        wb_u32(&w->body, (uint32_t)a->n);
        for (int e = 0; e < a->n; e++) wb_u32(&w->body, (*next_tensor)++);
        break;
    default: return kiln_error(KILN_ERR_INTERNAL, "attribute '%s' of type %d passed the check", a->name, (int)a->type);
    }
    return KILN_OK;
}

static kiln_status put_nodes(writer *w, uint32_t *next_tensor) {
    const kiln_graph *g = w->g;
    wb_u32(&w->body, (uint32_t)g->nnodes);
    for (int i = 0; i < g->nnodes; i++) {
        const kiln_node *n = &g->nodes[i];
        KILN_TRY(put_str(w, n->name));
        KILN_TRY(put_str(w, n->op_type));
        KILN_TRY(put_str(w, n->domain));
        wb_u32(&w->body, (uint32_t)n->opset);
        if (n->ninputs < 0 || n->noutputs < 0 || n->nattrs < 0)
            return kiln_error(KILN_ERR_INTERNAL, "node '%s' has negative counts", n->name);
        wb_u32(&w->body, (uint32_t)n->ninputs);
        for (int k = 0; k < n->ninputs; k++) {
            if (n->inputs[k] < -1 || n->inputs[k] >= g->nvalues)
                return kiln_error(KILN_ERR_INTERNAL, "node '%s' input %d is value id %d, out of range", n->name, k, n->inputs[k]);
            wb_u32(&w->body, (uint32_t)n->inputs[k]);
        }
        wb_u32(&w->body, (uint32_t)n->noutputs);
        for (int k = 0; k < n->noutputs; k++) {
            if (n->outputs[k] < -1 || n->outputs[k] >= g->nvalues)
                return kiln_error(KILN_ERR_INTERNAL, "node '%s' output %d is value id %d, out of range", n->name, k,
                                  n->outputs[k]);
            wb_u32(&w->body, (uint32_t)n->outputs[k]);
        }
        wb_u32(&w->body, (uint32_t)n->nattrs);
        for (int k = 0; k < n->nattrs; k++) KILN_TRY(put_attr(w, &n->attrs[k], next_tensor));
    }
    return KILN_OK;
}

/* The tactics table: the (profile, node) pairs whose tactic was chosen at build time, in profile then
 * node order (docs/engine-format.md). */
static void put_tactics(writer *w) {
    const kiln_tactic *t = w->meta->tactics;
    int nn = w->g->nnodes, total = kiln_engine_tactic_sets(w->meta) * nn;
    uint32_t count = 0;
    for (int i = 0; t && i < total; i++) count += t[i].kind != KILN_TACTIC_HEURISTIC;
    wb_u32(&w->body, count);
    for (int i = 0; count && i < total; i++) {
        if (t[i].kind == KILN_TACTIC_HEURISTIC) continue;
        uint32_t times[2];
        memcpy(&times[0], &t[i].time_ms, 4);
        memcpy(&times[1], &t[i].heuristic_ms, 4);
        wb_u32(&w->body, (uint32_t)(i / nn));
        wb_u32(&w->body, (uint32_t)(i % nn));
        wb_u32(&w->body, t[i].kind);
        wb_u32(&w->body, (uint32_t)t[i].algo);
        wb_u32(&w->body, (uint32_t)t[i].math);
        wb_u32(&w->body, (uint32_t)t[i].heuristic_index);
        wb_u32(&w->body, times[0]);
        wb_u32(&w->body, times[1]);
        wb_put(&w->body, t[i].blob, sizeof t[i].blob);
    }
}

/* The tables after the nodes: the optimization profiles (each: one range per graph input) and the
 * per-node precisions (none, or one byte per node). */
static kiln_status put_build_tables(writer *w) {
    const kiln_graph *g = w->g;
    const kiln_engine_meta *m = w->meta;
    if (m->nprofiles < 0 || (m->nprofiles > 0 && (!m->profiles || g->ninputs == 0)))
        return kiln_error(KILN_ERR_INTERNAL, "engine metadata has %d profiles for %d inputs", m->nprofiles, g->ninputs);
    wb_u32(&w->body, (uint32_t)m->nprofiles);
    for (int i = 0; i < m->nprofiles * g->ninputs; i++) {
        const kiln_profile_range *r = &m->profiles[i];
        if (r->ndim < -1 || r->ndim > KILN_MAX_DIMS)
            return kiln_error(KILN_ERR_INTERNAL, "profile range %d has rank %d", i, r->ndim);
        wb_u32(&w->body, (uint32_t)r->ndim);
        for (int d = 0; d < r->ndim; d++) {
            wb_u64(&w->body, (uint64_t)r->min[d]);
            wb_u64(&w->body, (uint64_t)r->opt[d]);
            wb_u64(&w->body, (uint64_t)r->max[d]);
        }
    }
    wb_u32(&w->body, m->node_precision ? (uint32_t)g->nnodes : 0);
    if (m->node_precision) wb_put(&w->body, m->node_precision, (size_t)g->nnodes);
    put_tactics(w);
    return KILN_OK;
}

/* Second pass: everything of the graph section after the string table. */
static kiln_status put_graph(writer *w) {
    const kiln_graph *g = w->g;
    KILN_TRY(put_str(w, g->name));
    KILN_TRY(put_str(w, g->producer));
    wb_u64(&w->body, (uint64_t)g->ir_version);
    wb_u32(&w->body, (uint32_t)g->nopsets);
    for (int i = 0; i < g->nopsets; i++) {
        KILN_TRY(put_str(w, g->opsets[i].domain));
        wb_u64(&w->body, (uint64_t)g->opsets[i].version);
    }
    wb_u32(&w->body, (uint32_t)g->nsymbols);
    for (int i = 0; i < g->nsymbols; i++) KILN_TRY(put_str(w, g->symbols[i]));
    put_tensor_table(w);
    uint32_t next_tensor = 0;
    KILN_TRY(put_values(w, &next_tensor));
    KILN_TRY(put_id_list(w, g->ninputs, g->inputs, "input"));
    KILN_TRY(put_id_list(w, g->noutputs, g->outputs, "output"));
    KILN_TRY(put_nodes(w, &next_tensor));
    KILN_ASSERT(next_tensor == w->ntensors);
    KILN_TRY(put_build_tables(w));
    if (w->body.oom || w->st.records.oom) return kiln_error(KILN_ERR_OUT_OF_MEMORY, "out of memory writing the engine");
    return KILN_OK;
}

/* Collects g's tensor table into a fresh writer (freed with writer_free). */
static kiln_status writer_collect(writer *w, const kiln_graph *g, const kiln_engine_meta *meta) {
    *w = (writer){.g = g, .meta = meta};
    return collect_tensors(w);
}

static void writer_free(writer *w) {
    free(w->st.records.p);
    free(w->st.slots);
    free(w->body.p);
    free(w->tensors);
    free(w->offsets);
}

/* An engine file whose weights section is being written while the build goes on. */
struct kiln_engine_out {
    char *path;
    kiln_file_out *f;                /* NULL once finished */
    kiln_engine_weights_write *weights;
    const void **data;               /* each tensor's data, as the table was when begun */
    size_t *bytes;
    uint32_t ntensors;
    uint64_t weights_size;
};

kiln_status kiln_engine_out_begin(const kiln_graph *g, const char *path, kiln_engine_out **out) {
    KILN_ASSERT(g && path && out);
    *out = NULL;
    writer w;
    kiln_status s = writer_collect(&w, g, NULL);
    kiln_engine_out *o = s == KILN_OK ? calloc(1, sizeof *o) : NULL;
    if (o) {
        o->path = strdup(path);
        o->data = malloc(((size_t)w.ntensors + 1) * sizeof *o->data);
        o->bytes = malloc(((size_t)w.ntensors + 1) * sizeof *o->bytes);
    }
    if (s == KILN_OK && (!o || !o->path || !o->data || !o->bytes))
        s = kiln_error(KILN_ERR_OUT_OF_MEMORY, "out of memory writing the engine");
    for (uint32_t i = 0; s == KILN_OK && i < w.ntensors; i++) {
        o->data[i] = w.tensors[i]->data;
        o->bytes[i] = w.tensors[i]->nbytes;
    }
    if (s == KILN_OK) {
        o->ntensors = w.ntensors;
        o->weights_size = w.weights_size;
        s = kiln_file_out_open(path, &o->f);
    }
    if (s == KILN_OK)
        s = kiln_engine_weights_write_start(o->f, o->data, o->bytes, w.offsets, w.ntensors, w.weights_size, &o->weights);
    writer_free(&w);
    if (s != KILN_OK) {
        kiln_engine_out_free(o);
        return kiln_error_prefix(s, "cannot write engine '%s'", path);
    }
    *out = o;
    return KILN_OK;
}

bool kiln_engine_out_pending(const kiln_engine_out *o, const char *path) {
    return o && o->f && path && !strcmp(o->path, path);
}

/* Whether w's tensor table is the one o's weights were written from: the same data, sizes and so
 * offsets. */
static bool same_tensors(const kiln_engine_out *o, const writer *w) {
    if (w->ntensors != o->ntensors || w->weights_size != o->weights_size) return false;
    for (uint32_t i = 0; i < w->ntensors; i++)
        if (w->tensors[i]->data != o->data[i] || w->tensors[i]->nbytes != o->bytes[i]) return false;
    return true;
}

/* Starts o's file again with the weights of w's tensor table (the graph's weights changed after the
 * file was begun), written now; their checksum in *crc. */
static kiln_status rewrite_weights(kiln_engine_out *o, const writer *w, uint32_t *crc) {
    KILN_LOG(KILN_LOG_VERBOSE, "engine write: the weights changed after '%s' was begun: writing them again", o->path);
    kiln_file_out_abort(o->f);
    o->f = NULL;
    const void **data = realloc(o->data, ((size_t)w->ntensors + 1) * sizeof *data);
    if (data) o->data = data;
    size_t *bytes = realloc(o->bytes, ((size_t)w->ntensors + 1) * sizeof *bytes);
    if (bytes) o->bytes = bytes;
    if (!data || !bytes) return kiln_error(KILN_ERR_OUT_OF_MEMORY, "out of memory writing the engine");
    for (uint32_t i = 0; i < w->ntensors; i++) {
        o->data[i] = w->tensors[i]->data;
        o->bytes[i] = w->tensors[i]->nbytes;
    }
    o->ntensors = w->ntensors;
    o->weights_size = w->weights_size;
    KILN_TRY(kiln_file_out_open(o->path, &o->f));
    KILN_TRY(kiln_engine_weights_write_start(o->f, o->data, o->bytes, w->offsets, w->ntensors, w->weights_size,
                                             &o->weights));
    kiln_engine_weights_write *pending = o->weights;
    o->weights = NULL;
    return kiln_engine_weights_write_wait(pending, crc);
}

/* The graph section (the string table, then the body) of w, and the rest of the file after o's
 * weights section (crc: its checksum). */
static kiln_status write_graph_section(kiln_engine_out *o, writer *w, const kiln_engine_meta *meta, uint32_t crc) {
    wbuf graph = {0};
    wb_u32(&graph, w->st.count);
    wb_put(&graph, w->st.records.p, w->st.records.n);
    wb_put(&graph, w->body.p, w->body.n);
    static const uint32_t ids[2] = {KILN_SECTION_GRAPH, KILN_SECTION_WEIGHTS};
    const void *sec_data[2] = {graph.p, NULL};
    size_t sec_bytes[2] = {graph.n, 0};
    kiln_status s = graph.oom ? kiln_error(KILN_ERR_OUT_OF_MEMORY, "out of memory writing the engine")
                              : kiln_engine_write_rest(o->f, meta, KILN_ENGINE_KIND_GRAPH, ids, sec_data, sec_bytes, 2,
                                                       crc, o->weights_size);
    free(graph.p);
    return s;
}

kiln_status kiln_engine_out_finish(kiln_engine_out *o, const kiln_graph *g, const kiln_engine_meta *meta) {
    KILN_ASSERT(o && o->f && g && meta);
    double t0 = kiln_log_now_ms();
    uint32_t crc = 0;
    kiln_status s = kiln_engine_weights_write_wait(o->weights, &crc);
    o->weights = NULL;
    double waited = kiln_log_now_ms() - t0;
    writer w;
    if (s == KILN_OK) s = writer_collect(&w, g, meta);
    else w = (writer){0};
    if (s == KILN_OK && !same_tensors(o, &w)) s = rewrite_weights(o, &w, &crc);
    if (s == KILN_OK) s = put_graph(&w);
    if (s == KILN_OK) s = write_graph_section(o, &w, meta, crc);
    writer_free(&w);
    kiln_file_out *f = o->f;
    o->f = NULL;
    if (s != KILN_OK) kiln_file_out_abort(f);
    else s = kiln_file_out_commit(f);
    if (s != KILN_OK) return kiln_error_prefix(s, "cannot write engine '%s'", o->path);
    KILN_LOG(KILN_LOG_VERBOSE, "engine write: '%s' finished, %.1f ms waiting for the weights section, %.1f ms in all",
             o->path, waited, kiln_log_now_ms() - t0);
    return KILN_OK;
}

void kiln_engine_out_free(kiln_engine_out *o) {
    if (!o) return;
    kiln_engine_weights_write_wait(o->weights, NULL);
    kiln_file_out_abort(o->f);
    free(o->path);
    free(o->data);
    free(o->bytes);
    free(o);
}

kiln_status kiln_engine_file_write(const kiln_graph *g, const kiln_engine_meta *meta, const char *path) {
    KILN_ASSERT(g && meta && path);
    kiln_engine_out *o;
    KILN_TRY(kiln_engine_out_begin(g, path, &o));
    kiln_status s = kiln_engine_out_finish(o, g, meta);
    kiln_engine_out_free(o);
    return s;
}
