/* onnx_import.c — ModelProto -> kiln_graph: the model header and opset imports, then each GraphProto
 * in passes (initializers, inputs, node outputs, nodes with their attributes, outputs, value_info),
 * so that references can be checked whatever order the file lists things in. Subgraph attributes are
 * imported recursively into their own graphs (kept for inspection, never executed); their nodes may
 * refer to values of the enclosing graphs. Tensor payloads are read by onnx_tensor.c. */
#include "frontends/onnx/onnx_import.h"
#include "frontends/onnx/onnx_internal.h"

#include "core/log.h"
#include "core/status.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>

/* Field numbers of onnx.proto. */
enum { M_IR_VERSION = 1, M_PRODUCER_NAME = 2, M_PRODUCER_VERSION = 3, M_GRAPH = 7, M_OPSET_IMPORT = 8 };
enum { G_NODE = 1, G_NAME = 2, G_INITIALIZER = 5, G_INPUT = 11, G_OUTPUT = 12, G_VALUE_INFO = 13,
       G_SPARSE_INITIALIZER = 15 };
enum { N_INPUT = 1, N_OUTPUT = 2, N_NAME = 3, N_OP_TYPE = 4, N_ATTRIBUTE = 5, N_DOMAIN = 7 };
enum { A_NAME = 1, A_F = 2, A_I = 3, A_S = 4, A_T = 5, A_G = 6, A_FLOATS = 7, A_INTS = 8, A_STRINGS = 9,
       A_TENSORS = 10, A_GRAPHS = 11, A_TP = 14, A_TYPE_PROTOS = 15, A_TYPE = 20, A_REF_ATTR_NAME = 21,
       A_SPARSE_TENSOR = 22, A_SPARSE_TENSORS = 23 };
enum { V_NAME = 1, V_TYPE = 2 };
enum { TENSOR_NAME = 8 };
enum { TP_TENSOR = 1, TP_SEQUENCE = 4, TP_MAP = 5, TP_OPAQUE = 7, TP_SPARSE = 8, TP_OPTIONAL = 9 };

/* The graphs enclosing the one being imported, innermost first (for outer-scope references). */
typedef struct scope {
    const kiln_graph *g;
    const struct scope *parent;
} scope;

/* A value's declared type (ValueInfoProto). */
typedef struct vtype {
    kiln_dtype dtype;
    int ndim; /* -1: no shape given */
    kiln_dim dims[KILN_MAX_DIMS];
} vtype;

static kiln_status import_graph(onnx_ctx *c, kiln_pb msg, kiln_graph *g, const scope *outer);

static onnx_str field_str(const kiln_pb_field *f) { return (onnx_str){(const char *)f->data.p, kiln_pb_left(&f->data)}; }

static bool str_is(onnx_str s, const char *lit) { return s.n == strlen(lit) && !memcmp(s.p, lit, s.n); }

/* A NUL-terminated copy of name in g's arena; a name holding a NUL byte is refused. */
static kiln_status name_dup(onnx_ctx *c, kiln_graph *g, onnx_str s, const char *what, const char **out) {
    if (s.n && memchr(s.p, 0, s.n)) return onnx_fail(c, KILN_ERR_PARSE, "%s contains a NUL byte", what);
    char *d = kiln_arena_strndup(g->arena, s.n ? s.p : "", s.n);
    if (!d) return onnx_fail(c, KILN_ERR_OUT_OF_MEMORY, "out of memory");
    *out = d;
    return KILN_OK;
}

/* ---------------------------------------------------------------- types */

static kiln_status read_shape(onnx_ctx *c, kiln_pb shape, kiln_graph *g, vtype *t) {
    kiln_pb r = shape;
    kiln_pb_field f;
    int n = 0;
    while (!kiln_pb_done(&r)) {
        KILN_TRY(onnx_next(c, &r, &f));
        if (f.number != 1) continue;
        KILN_TRY(onnx_want(c, &f, KILN_PB_LEN, "shape.dim"));
        if (n == KILN_MAX_DIMS)
            return onnx_fail(c, KILN_ERR_UNSUPPORTED, "rank exceeds kiln's maximum of %d", KILN_MAX_DIMS);
        kiln_dim d = KILN_DIM_UNKNOWN;
        kiln_pb dr = f.data;
        kiln_pb_field df;
        while (!kiln_pb_done(&dr)) {
            KILN_TRY(onnx_next(c, &dr, &df));
            if (df.number == 1) {
                KILN_TRY(onnx_want(c, &df, KILN_PB_VARINT, "dim_value"));
                /* a negative size is not a size: treat it as unknown */
                d = (int64_t)df.u >= 0 ? kiln_dim_static((int64_t)df.u) : KILN_DIM_UNKNOWN;
            } else if (df.number == 2) {
                KILN_TRY(onnx_want(c, &df, KILN_PB_LEN, "dim_param"));
                onnx_str p = field_str(&df);
                d = KILN_DIM_UNKNOWN;
                if (p.n) {
                    const char *sym_name;
                    KILN_TRY(name_dup(c, g, p, "dim_param", &sym_name));
                    kiln_status s = kiln_graph_symbol(g, sym_name, &d.sym);
                    if (s != KILN_OK) return onnx_prefix(c, s);
                }
            }
        }
        t->dims[n++] = d;
    }
    t->ndim = n;
    return KILN_OK;
}

/* Reads a TypeProto; only tensor types are accepted (an empty TypeProto leaves the type unknown). */
static kiln_status read_type(onnx_ctx *c, kiln_pb tp, kiln_graph *g, vtype *t) {
    t->dtype = KILN_UNDEFINED;
    t->ndim = -1;
    kiln_pb_field f;
    kiln_pb tensor = {NULL, NULL};
    bool has_tensor = false;
    while (!kiln_pb_done(&tp)) {
        KILN_TRY(onnx_next(c, &tp, &f));
        const char *kind = NULL;
        switch (f.number) {
        case TP_TENSOR:
            KILN_TRY(onnx_want(c, &f, KILN_PB_LEN, "tensor_type"));
            tensor = f.data;
            has_tensor = true;
            break;
        case TP_SEQUENCE: kind = "a sequence"; break;
        case TP_MAP: kind = "a map"; break;
        case TP_OPTIONAL: kind = "an optional"; break;
        case TP_SPARSE: kind = "a sparse tensor"; break;
        case TP_OPAQUE: kind = "an opaque"; break;
        default: break;
        }
        if (kind) return onnx_fail(c, KILN_ERR_UNSUPPORTED, "has %s type; kiln supports tensor values only", kind);
    }
    if (!has_tensor) return KILN_OK;
    while (!kiln_pb_done(&tensor)) {
        KILN_TRY(onnx_next(c, &tensor, &f));
        if (f.number == 1) {
            KILN_TRY(onnx_want(c, &f, KILN_PB_VARINT, "elem_type"));
            int64_t et = (int64_t)f.u;
            if (et < 0 || et >= KILN_DTYPE_COUNT)
                return onnx_fail(c, KILN_ERR_UNSUPPORTED, "elem_type %lld is not supported", (long long)et);
            t->dtype = (kiln_dtype)et;
        } else if (f.number == 2) {
            KILN_TRY(onnx_want(c, &f, KILN_PB_LEN, "shape"));
            KILN_TRY(read_shape(c, f.data, g, t));
        }
    }
    return KILN_OK;
}

/* Reads a ValueInfoProto's name and the bytes of its TypeProto (empty when it has none); the type is
 * decoded separately (read_type) by the callers that use it. */
static kiln_status read_value_info(onnx_ctx *c, kiln_pb msg, onnx_str *name, kiln_pb *type) {
    *name = (onnx_str){NULL, 0};
    *type = (kiln_pb){msg.end, msg.end};
    kiln_pb_field f;
    while (!kiln_pb_done(&msg)) {
        KILN_TRY(onnx_next(c, &msg, &f));
        if (f.number == V_NAME) {
            KILN_TRY(onnx_want(c, &f, KILN_PB_LEN, "name"));
            *name = field_str(&f);
        } else if (f.number == V_TYPE) {
            KILN_TRY(onnx_want(c, &f, KILN_PB_LEN, "type"));
            *type = f.data;
        }
    }
    return KILN_OK;
}

static void set_type(kiln_value *v, const vtype *t) {
    v->dtype = t->dtype;
    v->ndim = t->ndim;
    for (int d = 0; d < t->ndim; d++) v->dims[d] = t->dims[d];
}

/* ---------------------------------------------------------------- attributes */

static kiln_status import_subgraph(onnx_ctx *c, kiln_pb msg, kiln_graph *parent, const scope *outer,
                                   kiln_graph **out);

/* What one pass over an AttributeProto found. */
typedef struct attr_hdr {
    onnx_str name;
    int64_t type;
    uint32_t present; /* bit k: field k occurred */
} attr_hdr;

static kiln_status scan_attr(onnx_ctx *c, kiln_pb msg, attr_hdr *h) {
    memset(h, 0, sizeof *h);
    kiln_pb_field f;
    while (!kiln_pb_done(&msg)) {
        KILN_TRY(onnx_next(c, &msg, &f));
        if (f.number < 32) h->present |= 1u << f.number;
        if (f.number == A_NAME) {
            KILN_TRY(onnx_want(c, &f, KILN_PB_LEN, "name"));
            h->name = field_str(&f);
        } else if (f.number == A_TYPE) {
            KILN_TRY(onnx_want(c, &f, KILN_PB_VARINT, "type"));
            h->type = (int64_t)f.u;
        } else if (f.number == A_REF_ATTR_NAME) {
            return onnx_fail(c, KILN_ERR_UNSUPPORTED, "ref_attr_name (a reference to a function attribute) is not "
                             "supported outside functions");
        }
    }
    if (!h->name.n) return onnx_fail(c, KILN_ERR_PARSE, "attribute has no name");
    if (h->type < 0 || h->type > KILN_ATTR_TYPE_PROTOS)
        return onnx_fail(c, KILN_ERR_PARSE, "attribute type %lld is unknown", (long long)h->type);
    if (h->type == KILN_ATTR_UNDEFINED) {
        /* old producers left the type out: infer it from the one value field present */
        static const struct { uint32_t field; kiln_attr_type type; } kinds[] = {
            {A_F, KILN_ATTR_FLOAT}, {A_I, KILN_ATTR_INT}, {A_S, KILN_ATTR_STRING}, {A_T, KILN_ATTR_TENSOR},
            {A_G, KILN_ATTR_GRAPH}, {A_FLOATS, KILN_ATTR_FLOATS}, {A_INTS, KILN_ATTR_INTS},
            {A_STRINGS, KILN_ATTR_STRINGS}, {A_TENSORS, KILN_ATTR_TENSORS}, {A_GRAPHS, KILN_ATTR_GRAPHS},
            {A_SPARSE_TENSOR, KILN_ATTR_SPARSE_TENSOR}, {A_SPARSE_TENSORS, KILN_ATTR_SPARSE_TENSORS},
            {A_TP, KILN_ATTR_TYPE_PROTO}, {A_TYPE_PROTOS, KILN_ATTR_TYPE_PROTOS},
        };
        int found = 0;
        for (size_t k = 0; k < sizeof kinds / sizeof *kinds; k++)
            if (h->present & (1u << kinds[k].field)) {
                h->type = kinds[k].type;
                found++;
            }
        if (found != 1) return onnx_fail(c, KILN_ERR_PARSE, "attribute has no type and %s", found ? "several value "
                                         "fields" : "no value field");
    }
    return KILN_OK;
}

/* The last occurrence of field `number` in msg (checked to be of wire type w); false if none. */
static kiln_status last_field(onnx_ctx *c, kiln_pb msg, uint32_t number, kiln_pb_wire w, const char *name,
                              kiln_pb_field *out, bool *found) {
    *found = false;
    kiln_pb_field f;
    while (!kiln_pb_done(&msg)) {
        KILN_TRY(onnx_next(c, &msg, &f));
        if (f.number != number) continue;
        KILN_TRY(onnx_want(c, &f, w, name));
        *out = f;
        *found = true;
    }
    return KILN_OK;
}

/* Counts the occurrences of LEN field `number` (wire types checked). */
static kiln_status count_len_fields(onnx_ctx *c, kiln_pb msg, uint32_t number, const char *name, size_t *n) {
    *n = 0;
    kiln_pb_field f;
    while (!kiln_pb_done(&msg)) {
        KILN_TRY(onnx_next(c, &msg, &f));
        if (f.number != number) continue;
        KILN_TRY(onnx_want(c, &f, KILN_PB_LEN, name));
        ++*n;
    }
    if (*n > INT_MAX / 64) return onnx_fail(c, KILN_ERR_PARSE, "too many '%s' entries", name);
    return KILN_OK;
}

/* Fills a->(list) from a LEN-per-element field: strings, tensors or graphs. a->n is set before the
 * elements are read, over zeroed storage, so a failure half way leaves something kiln_graph_free
 * (or attr_release) can free. */
static kiln_status read_attr_list(onnx_ctx *c, kiln_pb msg, kiln_graph *g, const scope *outer, kiln_attr *a,
                                  uint32_t number, const char *name) {
    size_t n;
    KILN_TRY(count_len_fields(c, msg, number, name, &n));
    size_t esize = a->type == KILN_ATTR_STRINGS ? sizeof(char *)
                   : a->type == KILN_ATTR_TENSORS ? sizeof(kiln_tensor) : sizeof(kiln_graph *);
    void *arr = kiln_graph_alloc(g, n ? n * esize : 1);
    if (!arr) return onnx_fail(c, KILN_ERR_OUT_OF_MEMORY, "out of memory");
    if (a->type == KILN_ATTR_STRINGS) a->strings = arr;
    else if (a->type == KILN_ATTR_TENSORS) a->tensors = arr;
    else a->graphs = arr;
    a->n = (int)n;
    size_t k = 0;
    kiln_pb_field f;
    while (!kiln_pb_done(&msg)) {
        KILN_TRY(onnx_next(c, &msg, &f));
        if (f.number != number) continue;
        if (a->type == KILN_ATTR_STRINGS) {
            onnx_str s = field_str(&f);
            a->strings[k] = kiln_arena_strndup(g->arena, s.n ? s.p : "", s.n);
            if (!a->strings[k]) return onnx_fail(c, KILN_ERR_OUT_OF_MEMORY, "out of memory");
        } else if (a->type == KILN_ATTR_TENSORS) {
            KILN_TRY(onnx_tensor_load(c, f.data, true, &a->tensors[k], NULL));
        } else {
            KILN_TRY(import_subgraph(c, f.data, g, outer, &a->graphs[k]));
        }
        k++;
    }
    return KILN_OK;
}

/* Reads the value of an attribute whose header (name, type) is already known into a; arrays live in
 * g's arena, tensors may view the buffer, subgraphs are new graphs owned by a. */
static kiln_status read_attr_value(onnx_ctx *c, kiln_pb msg, kiln_graph *g, const scope *outer, kiln_attr *a) {
    kiln_pb_field f;
    bool found;
    switch (a->type) {
    case KILN_ATTR_FLOAT:
        KILN_TRY(last_field(c, msg, A_F, KILN_PB_I32, "f", &f, &found));
        if (found) {
            uint32_t bits = (uint32_t)f.u;
            memcpy(&a->f, &bits, sizeof a->f);
        }
        return KILN_OK;
    case KILN_ATTR_INT:
        KILN_TRY(last_field(c, msg, A_I, KILN_PB_VARINT, "i", &f, &found));
        if (found) a->i = (int64_t)f.u;
        return KILN_OK;
    case KILN_ATTR_STRING: {
        KILN_TRY(last_field(c, msg, A_S, KILN_PB_LEN, "s", &f, &found));
        onnx_str s = found ? field_str(&f) : (onnx_str){"", 0};
        a->s = kiln_arena_strndup(g->arena, s.n ? s.p : "", s.n);
        a->s_len = s.n;
        return a->s ? KILN_OK : onnx_fail(c, KILN_ERR_OUT_OF_MEMORY, "out of memory");
    }
    case KILN_ATTR_TENSOR:
        KILN_TRY(last_field(c, msg, A_T, KILN_PB_LEN, "t", &f, &found));
        if (!found) return onnx_fail(c, KILN_ERR_PARSE, "tensor attribute has no tensor");
        a->t = kiln_graph_alloc(g, sizeof *a->t);
        if (!a->t) return onnx_fail(c, KILN_ERR_OUT_OF_MEMORY, "out of memory");
        return onnx_tensor_load(c, f.data, true, a->t, NULL);
    case KILN_ATTR_GRAPH:
        KILN_TRY(last_field(c, msg, A_G, KILN_PB_LEN, "g", &f, &found));
        if (!found) return onnx_fail(c, KILN_ERR_PARSE, "graph attribute has no graph");
        return import_subgraph(c, f.data, g, outer, &a->g);
    case KILN_ATTR_FLOATS:
    case KILN_ATTR_INTS: {
        bool fl = a->type == KILN_ATTR_FLOATS;
        uint64_t *vals;
        size_t n;
        KILN_TRY(onnx_repeated(c, msg, fl ? A_FLOATS : A_INTS, fl ? KILN_PB_I32 : KILN_PB_VARINT, fl ? "floats" : "ints",
                               &vals, &n));
        size_t esize = fl ? sizeof(float) : sizeof(int64_t);
        void *arr = n <= INT_MAX / 8 ? kiln_graph_alloc(g, n ? n * esize : 1) : NULL;
        if (!arr) {
            free(vals);
            return onnx_fail(c, KILN_ERR_OUT_OF_MEMORY, "out of memory for %zu values", n);
        }
        for (size_t k = 0; k < n; k++) {
            if (fl) {
                uint32_t bits = (uint32_t)vals[k];
                memcpy((float *)arr + k, &bits, sizeof(float));
            } else {
                ((int64_t *)arr)[k] = (int64_t)vals[k];
            }
        }
        free(vals);
        if (fl) a->floats = arr;
        else a->ints = arr;
        a->n = (int)n;
        return KILN_OK;
    }
    case KILN_ATTR_STRINGS: return read_attr_list(c, msg, g, outer, a, A_STRINGS, "strings");
    case KILN_ATTR_TENSORS: return read_attr_list(c, msg, g, outer, a, A_TENSORS, "tensors");
    case KILN_ATTR_GRAPHS: return read_attr_list(c, msg, g, outer, a, A_GRAPHS, "graphs");
    default:
        KILN_LOG(KILN_LOG_WARN, "%s: %s: sparse-tensor and type-proto attributes are not supported; kept as "
                 "undefined", c->file, c->where);
        a->type = KILN_ATTR_UNDEFINED;
        return KILN_OK;
    }
}

/* Reads one AttributeProto of node node_id. */
static kiln_status import_attr(onnx_ctx *c, kiln_pb msg, kiln_graph *g, int node_id, const scope *outer) {
    attr_hdr h;
    KILN_TRY(scan_attr(c, msg, &h));
    const char *name;
    KILN_TRY(name_dup(c, g, h.name, "attribute name", &name));
    if (kiln_node_attr(&g->nodes[node_id], name)) return onnx_fail(c, KILN_ERR_PARSE, "attribute is given twice");
    kiln_attr *a = kiln_node_add_attr(g, &g->nodes[node_id], name, (kiln_attr_type)h.type);
    if (!a) return onnx_fail(c, KILN_ERR_OUT_OF_MEMORY, "out of memory");
    return read_attr_value(c, msg, g, outer, a);
}

/* ---------------------------------------------------------------- nodes */

/* The fields of a NodeProto other than its attributes. in/out are malloc'd (node_hdr_free). */
typedef struct node_hdr {
    onnx_str name, op_type, domain;
    int nin, nout;
    onnx_str *in, *out;
} node_hdr;

static void node_hdr_free(node_hdr *h) {
    free(h->in);
    free(h->out);
    h->in = h->out = NULL;
}

static kiln_status scan_node(onnx_ctx *c, kiln_pb msg, node_hdr *h) {
    memset(h, 0, sizeof *h);
    kiln_pb r = msg;
    kiln_pb_field f;
    size_t nin = 0, nout = 0;
    while (!kiln_pb_done(&r)) {
        KILN_TRY(onnx_next(c, &r, &f));
        switch (f.number) {
        case N_INPUT: KILN_TRY(onnx_want(c, &f, KILN_PB_LEN, "input")); nin++; break;
        case N_OUTPUT: KILN_TRY(onnx_want(c, &f, KILN_PB_LEN, "output")); nout++; break;
        case N_NAME: KILN_TRY(onnx_want(c, &f, KILN_PB_LEN, "name")); h->name = field_str(&f); break;
        case N_OP_TYPE: KILN_TRY(onnx_want(c, &f, KILN_PB_LEN, "op_type")); h->op_type = field_str(&f); break;
        case N_DOMAIN: KILN_TRY(onnx_want(c, &f, KILN_PB_LEN, "domain")); h->domain = field_str(&f); break;
        case N_ATTRIBUTE: KILN_TRY(onnx_want(c, &f, KILN_PB_LEN, "attribute")); break;
        default: break;
        }
    }
    if (nin > INT_MAX / 64 || nout > INT_MAX / 64) return onnx_fail(c, KILN_ERR_PARSE, "too many inputs or outputs");
    h->in = malloc((nin + 1) * sizeof *h->in);
    h->out = malloc((nout + 1) * sizeof *h->out);
    if (!h->in || !h->out) {
        node_hdr_free(h);
        return onnx_fail(c, KILN_ERR_OUT_OF_MEMORY, "out of memory");
    }
    r = msg;
    while (!kiln_pb_done(&r)) {
        if (kiln_pb_next(&r, &f)) break; /* cannot happen: the first pass read the same bytes */
        if (f.number == N_INPUT) h->in[h->nin++] = field_str(&f);
        else if (f.number == N_OUTPUT) h->out[h->nout++] = field_str(&f);
    }
    return KILN_OK;
}

/* Adds " NodeProto '<name>'" to the error path, naming unnamed nodes as import will. */
static size_t push_node(onnx_ctx *c, kiln_pb msg, int index) {
    onnx_str nm = onnx_peek_string(msg, N_NAME);
    char buf[96];
    if (!nm.n) {
        onnx_str op = onnx_peek_string(msg, N_OP_TYPE);
        snprintf(buf, sizeof buf, "%.*s_%d", (int)(op.n > 64 ? 64 : op.n), op.p ? op.p : "", index);
        nm = (onnx_str){buf, strlen(buf)};
    }
    return onnx_where_push(c, "NodeProto", nm);
}

/* The id of the value `name` visible from g: g's own, or (for a subgraph) one of an enclosing graph,
 * which is then mirrored in g as an untyped value with no producer. -1 when nothing defines it. */
static kiln_status resolve(onnx_ctx *c, kiln_graph *g, const scope *outer, const char *name, int *id) {
    *id = kiln_graph_find_value(g, name);
    if (*id >= 0) return KILN_OK;
    for (const scope *s = outer; s; s = s->parent)
        if (kiln_graph_find_value(s->g, name) >= 0) {
            kiln_status st = kiln_graph_value(g, name, id);
            return st == KILN_OK ? KILN_OK : onnx_prefix(c, st);
        }
    return KILN_OK;
}

/* Pass A: declares the values a node produces; each must be new. */
static kiln_status declare_outputs(onnx_ctx *c, kiln_pb msg, kiln_graph *g) {
    node_hdr h;
    KILN_TRY(scan_node(c, msg, &h));
    kiln_status s = KILN_OK;
    for (int k = 0; k < h.nout && s == KILN_OK; k++) {
        const char *name;
        int id;
        if (!h.out[k].n) continue;
        s = name_dup(c, g, h.out[k], "output name", &name);
        if (s != KILN_OK) break;
        if (kiln_graph_find_value(g, name) >= 0)
            s = onnx_fail(c, KILN_ERR_PARSE, "output '%s' is already defined by an initializer, a graph input or "
                          "another node", name);
        else if ((s = kiln_graph_value(g, name, &id)) != KILN_OK)
            s = onnx_prefix(c, s);
    }
    node_hdr_free(&h);
    return s;
}

/* A Constant node becomes a constant value: value, value_float(s) or value_int(s). */
static kiln_status import_constant(onnx_ctx *c, kiln_pb msg, const node_hdr *h, kiln_graph *g) {
    if (h->nin != 0) return onnx_fail(c, KILN_ERR_PARSE, "Constant takes no inputs, this one has %d", h->nin);
    if (h->nout != 1 || !h->out[0].n) return onnx_fail(c, KILN_ERR_PARSE, "Constant must have exactly one named output");
    static const struct { const char *name; kiln_attr_type type; } forms[] = {
        {"value", KILN_ATTR_TENSOR}, {"value_float", KILN_ATTR_FLOAT}, {"value_floats", KILN_ATTR_FLOATS},
        {"value_int", KILN_ATTR_INT}, {"value_ints", KILN_ATTR_INTS},
    };
    kiln_pb r = msg;
    kiln_pb_field f;
    kiln_tensor t = {0};
    int nvalues = 0;
    kiln_status s = KILN_OK;
    while (!kiln_pb_done(&r) && s == KILN_OK) {
        if ((s = onnx_next(c, &r, &f)) != KILN_OK || f.number != N_ATTRIBUTE) continue;
        size_t saved = onnx_where_push(c, "attribute", onnx_peek_string(f.data, A_NAME));
        attr_hdr ah;
        s = scan_attr(c, f.data, &ah);
        int form = -1;
        for (int k = 0; s == KILN_OK && k < (int)(sizeof forms / sizeof *forms); k++)
            if (str_is(ah.name, forms[k].name)) form = k;
        if (s != KILN_OK) {
            /* reported by scan_attr */
        } else if (str_is(ah.name, "value_string") || str_is(ah.name, "value_strings")) {
            s = onnx_fail(c, KILN_ERR_UNSUPPORTED, "string constants are not supported");
        } else if (str_is(ah.name, "sparse_value")) {
            s = onnx_fail(c, KILN_ERR_UNSUPPORTED, "sparse constants are not supported");
        } else if (form >= 0 && ah.type != forms[form].type) {
            s = onnx_fail(c, KILN_ERR_PARSE, "attribute has type %lld, expected %d", (long long)ah.type, forms[form].type);
        } else if (form >= 0 && ++nvalues == 1) {
            kiln_attr a = {.type = forms[form].type};
            s = read_attr_value(c, f.data, g, NULL, &a);
            if (s == KILN_OK) {
                if (a.type == KILN_ATTR_TENSOR) {
                    t = *a.t;
                    memset(a.t, 0, sizeof *a.t);
                } else {
                    bool fl = a.type == KILN_ATTR_FLOAT || a.type == KILN_ATTR_FLOATS;
                    bool list = a.type == KILN_ATTR_FLOATS || a.type == KILN_ATTR_INTS;
                    int64_t n = list ? a.n : 1;
                    s = kiln_tensor_alloc(&t, fl ? KILN_F32 : KILN_I64, list ? 1 : 0, &n);
                    if (s != KILN_OK) s = onnx_prefix(c, s);
                    else if (n) memcpy(t.data, fl ? (list ? (void *)a.floats : (void *)&a.f)
                                                   : (list ? (void *)a.ints : (void *)&a.i), t.nbytes);
                }
            } else if (a.t) {
                kiln_tensor_release(a.t);
            }
        }
        onnx_where_pop(c, saved);
    }
    if (s == KILN_OK && nvalues != 1)
        s = onnx_fail(c, KILN_ERR_PARSE, "Constant needs exactly one of value, value_float(s), value_int(s); it has %d",
                      nvalues);
    const char *out_name;
    if (s == KILN_OK) s = name_dup(c, g, h->out[0], "output name", &out_name);
    if (s == KILN_OK) {
        int id = kiln_graph_find_value(g, out_name);
        KILN_ASSERT(id >= 0); /* declared by declare_outputs */
        s = kiln_graph_set_constant(g, id, &t);
        if (s != KILN_OK) s = onnx_prefix(c, s);
    }
    kiln_tensor_release(&t);
    return s;
}

/* Pass B: one NodeProto -> a node (or a constant value for Constant). */
static kiln_status import_node(onnx_ctx *c, kiln_pb msg, int index, kiln_graph *g, const scope *outer) {
    node_hdr h;
    KILN_TRY(scan_node(c, msg, &h));
    kiln_status s = KILN_OK;
    const char *op_type = NULL, *domain = NULL, *name = NULL;
    int *ins = NULL, *outs = NULL, id = -1;
    if (!h.op_type.n) s = onnx_fail(c, KILN_ERR_PARSE, "node has no op_type");
    if (s == KILN_OK) s = name_dup(c, g, h.op_type, "op_type", &op_type);
    if (s == KILN_OK) s = name_dup(c, g, str_is(h.domain, "ai.onnx") ? (onnx_str){"", 0} : h.domain, "domain", &domain);
    if (s == KILN_OK && !domain[0] && !strcmp(op_type, "Constant")) {
        s = import_constant(c, msg, &h, g);
        node_hdr_free(&h);
        return s;
    }
    if (s == KILN_OK) {
        ins = malloc(((size_t)h.nin + 1) * sizeof *ins);
        outs = malloc(((size_t)h.nout + 1) * sizeof *outs);
        if (!ins || !outs) s = onnx_fail(c, KILN_ERR_OUT_OF_MEMORY, "out of memory");
    }
    for (int k = 0; s == KILN_OK && k < h.nin; k++) {
        const char *vn;
        ins[k] = -1;
        if (!h.in[k].n) continue;
        s = name_dup(c, g, h.in[k], "input name", &vn);
        if (s == KILN_OK) s = resolve(c, g, outer, vn, &ins[k]);
        if (s == KILN_OK && ins[k] < 0)
            s = onnx_fail(c, KILN_ERR_PARSE, "input '%s' is not defined by any initializer, graph input or node output",
                          vn);
    }
    for (int k = 0; s == KILN_OK && k < h.nout; k++) {
        const char *vn;
        outs[k] = -1;
        if (!h.out[k].n) continue;
        s = name_dup(c, g, h.out[k], "output name", &vn);
        if (s == KILN_OK) outs[k] = kiln_graph_find_value(g, vn);
        KILN_ASSERT(s != KILN_OK || outs[k] >= 0); /* declared by declare_outputs */
    }
    if (s == KILN_OK) {
        char auto_name[128];
        if (h.name.n) {
            s = name_dup(c, g, h.name, "node name", &name);
        } else {
            snprintf(auto_name, sizeof auto_name, "%.100s_%d", op_type, index);
            name = auto_name;
        }
        if (s == KILN_OK && (s = kiln_graph_add_node(g, op_type, domain, name, h.nin, ins, h.nout, outs, &id)) != KILN_OK)
            s = onnx_prefix(c, s);
    }
    free(ins);
    free(outs);
    node_hdr_free(&h);
    kiln_pb r = msg;
    kiln_pb_field f;
    while (s == KILN_OK && !kiln_pb_done(&r)) {
        s = onnx_next(c, &r, &f);
        if (s != KILN_OK || f.number != N_ATTRIBUTE) continue;
        size_t saved = onnx_where_push(c, "attribute", onnx_peek_string(f.data, A_NAME));
        s = import_attr(c, f.data, g, id, outer);
        onnx_where_pop(c, saved);
    }
    return s;
}

/* ---------------------------------------------------------------- graphs */

static kiln_status import_initializers(onnx_ctx *c, kiln_pb msg, kiln_graph *g) {
    kiln_pb_field f;
    while (!kiln_pb_done(&msg)) {
        KILN_TRY(onnx_next(c, &msg, &f));
        if (f.number != G_INITIALIZER) continue;
        size_t saved = onnx_where_push(c, "initializer", onnx_peek_string(f.data, TENSOR_NAME));
        kiln_tensor t;
        onnx_str nm;
        const char *name = NULL;
        int id;
        kiln_status s = onnx_tensor_load(c, f.data, true, &t, &nm);
        if (s == KILN_OK && !nm.n) s = onnx_fail(c, KILN_ERR_PARSE, "initializer has no name");
        if (s == KILN_OK) s = name_dup(c, g, nm, "initializer name", &name);
        if (s == KILN_OK && kiln_graph_find_value(g, name) >= 0)
            s = onnx_fail(c, KILN_ERR_PARSE, "initializer is defined twice");
        if (s == KILN_OK) {
            s = kiln_graph_value(g, name, &id);
            if (s == KILN_OK) s = kiln_graph_set_constant(g, id, &t);
            if (s != KILN_OK) s = onnx_prefix(c, s);
        }
        kiln_tensor_release(&t);
        if (s != KILN_OK) return s;
        onnx_where_pop(c, saved);
    }
    return KILN_OK;
}

static kiln_status import_inputs(onnx_ctx *c, kiln_pb msg, kiln_graph *g) {
    kiln_pb_field f;
    while (!kiln_pb_done(&msg)) {
        KILN_TRY(onnx_next(c, &msg, &f));
        if (f.number != G_INPUT) continue;
        size_t saved = onnx_where_push(c, "input", onnx_peek_string(f.data, V_NAME));
        onnx_str nm;
        kiln_pb type;
        vtype t;
        const char *name;
        int id;
        KILN_TRY(read_value_info(c, f.data, &nm, &type));
        if (!nm.n) return onnx_fail(c, KILN_ERR_PARSE, "graph input has no name");
        KILN_TRY(name_dup(c, g, nm, "input name", &name));
        id = kiln_graph_find_value(g, name);
        if (id >= 0 && !g->values[id].constant) return onnx_fail(c, KILN_ERR_PARSE, "graph input is declared twice");
        if (id < 0) { /* an input that is also an initializer stays a constant */
            KILN_TRY(read_type(c, type, g, &t));
            kiln_status s = kiln_graph_value(g, name, &id);
            if (s == KILN_OK) set_type(&g->values[id], &t);
            if (s == KILN_OK) s = kiln_graph_add_input(g, id);
            if (s != KILN_OK) return onnx_prefix(c, s);
        }
        onnx_where_pop(c, saved);
    }
    return KILN_OK;
}

/* Graph outputs (field G_OUTPUT, which must name defined values) and value_info (G_VALUE_INFO, whose
 * unknown names are ignored): both give types to values that have none yet. */
static kiln_status import_value_infos(onnx_ctx *c, kiln_pb msg, kiln_graph *g, const scope *outer, uint32_t number) {
    bool is_output = number == G_OUTPUT;
    kiln_pb_field f;
    while (!kiln_pb_done(&msg)) {
        KILN_TRY(onnx_next(c, &msg, &f));
        if (f.number != number) continue;
        size_t saved = onnx_where_push(c, is_output ? "output" : "value_info", onnx_peek_string(f.data, V_NAME));
        onnx_str nm;
        kiln_pb type;
        vtype t;
        const char *name;
        int id;
        KILN_TRY(read_value_info(c, f.data, &nm, &type));
        if (!nm.n) return onnx_fail(c, KILN_ERR_PARSE, "%s has no name", is_output ? "graph output" : "value_info");
        KILN_TRY(name_dup(c, g, nm, "name", &name));
        if (is_output) KILN_TRY(resolve(c, g, outer, name, &id));
        else id = kiln_graph_find_value(g, name);
        if (id < 0 && is_output)
            return onnx_fail(c, KILN_ERR_PARSE, "graph output is not produced by any node, initializer or graph input");
        if (id >= 0) {
            kiln_value *v = &g->values[id];
            if (!v->constant && !v->is_input) {
                KILN_TRY(read_type(c, type, g, &t));
                set_type(v, &t);
            }
            if (is_output) {
                kiln_status s = kiln_graph_add_output(g, id);
                if (s != KILN_OK) return onnx_prefix(c, s);
            }
        }
        onnx_where_pop(c, saved);
    }
    return KILN_OK;
}

/* Runs pass A (declare: declare_outputs) or pass B (import_node) over every NodeProto of the graph,
 * with the node named in the error path. */
static kiln_status each_node(onnx_ctx *c, kiln_pb msg, kiln_graph *g, const scope *outer, bool declare) {
    kiln_pb_field f;
    int index = 0;
    while (!kiln_pb_done(&msg)) {
        KILN_TRY(onnx_next(c, &msg, &f));
        if (f.number != G_NODE) continue;
        size_t saved = push_node(c, f.data, index);
        KILN_TRY(declare ? declare_outputs(c, f.data, g) : import_node(c, f.data, index, g, outer));
        onnx_where_pop(c, saved);
        index++;
    }
    return KILN_OK;
}

static kiln_status import_graph(onnx_ctx *c, kiln_pb msg, kiln_graph *g, const scope *outer) {
    kiln_pb r = msg;
    kiln_pb_field f;
    while (!kiln_pb_done(&r)) {
        KILN_TRY(onnx_next(c, &r, &f));
        static const char *const names[] = {[G_NODE] = "node", [G_NAME] = "name", [G_INITIALIZER] = "initializer",
                                            [G_INPUT] = "input", [G_OUTPUT] = "output", [G_VALUE_INFO] = "value_info"};
        if (f.number < sizeof names / sizeof *names && names[f.number])
            KILN_TRY(onnx_want(c, &f, KILN_PB_LEN, names[f.number]));
        if (f.number == G_NAME) KILN_TRY(name_dup(c, g, field_str(&f), "graph name", &g->name));
        if (f.number == G_SPARSE_INITIALIZER)
            return onnx_fail(c, KILN_ERR_UNSUPPORTED, "sparse initializers are not supported");
    }
    KILN_TRY(import_initializers(c, msg, g));
    KILN_TRY(import_inputs(c, msg, g));
    KILN_TRY(each_node(c, msg, g, outer, true));
    KILN_TRY(each_node(c, msg, g, outer, false));
    KILN_TRY(import_value_infos(c, msg, g, outer, G_OUTPUT));
    return import_value_infos(c, msg, g, outer, G_VALUE_INFO);
}

static kiln_status import_subgraph(onnx_ctx *c, kiln_pb msg, kiln_graph *parent, const scope *outer,
                                   kiln_graph **out) {
    *out = NULL;
    if (c->depth >= ONNX_MAX_GRAPH_DEPTH)
        return onnx_fail(c, KILN_ERR_UNSUPPORTED, "subgraphs are nested more than %d deep", ONNX_MAX_GRAPH_DEPTH);
    kiln_graph *sub = kiln_graph_create();
    if (!sub) return onnx_fail(c, KILN_ERR_OUT_OF_MEMORY, "out of memory");
    kiln_status s = KILN_OK;
    sub->ir_version = parent->ir_version;
    sub->producer = kiln_graph_strdup(sub, parent->producer);
    sub->opsets = kiln_graph_alloc(sub, sizeof *sub->opsets * (size_t)(parent->nopsets + 1));
    if (!sub->producer || !sub->opsets) s = onnx_fail(c, KILN_ERR_OUT_OF_MEMORY, "out of memory");
    for (int i = 0; s == KILN_OK && i < parent->nopsets; i++) {
        sub->opsets[i].version = parent->opsets[i].version;
        sub->opsets[i].domain = kiln_graph_strdup(sub, parent->opsets[i].domain);
        if (!sub->opsets[i].domain) s = onnx_fail(c, KILN_ERR_OUT_OF_MEMORY, "out of memory");
        sub->nopsets = i + 1;
    }
    if (s == KILN_OK) {
        size_t saved = onnx_where_push(c, "GraphProto", onnx_peek_string(msg, G_NAME));
        scope inner = {parent, outer};
        c->depth++;
        s = import_graph(c, msg, sub, &inner);
        c->depth--;
        if (s == KILN_OK) onnx_where_pop(c, saved);
    }
    if (s != KILN_OK) {
        kiln_graph_free(sub);
        return s;
    }
    *out = sub;
    return KILN_OK;
}

/* ---------------------------------------------------------------- models */

static kiln_status import_opsets(onnx_ctx *c, kiln_pb msg, kiln_graph *g, int n) {
    g->opsets = kiln_graph_alloc(g, sizeof *g->opsets * (size_t)(n + 1));
    if (!g->opsets) return onnx_fail(c, KILN_ERR_OUT_OF_MEMORY, "out of memory");
    size_t saved = onnx_where_push(c, "opset_import", (onnx_str){NULL, 0});
    kiln_pb_field f;
    while (!kiln_pb_done(&msg)) {
        KILN_TRY(onnx_next(c, &msg, &f));
        if (f.number != M_OPSET_IMPORT) continue;
        onnx_str domain = {"", 0};
        int64_t version = 0;
        kiln_pb r = f.data;
        kiln_pb_field e;
        while (!kiln_pb_done(&r)) {
            KILN_TRY(onnx_next(c, &r, &e));
            if (e.number == 1) {
                KILN_TRY(onnx_want(c, &e, KILN_PB_LEN, "domain"));
                domain = field_str(&e);
            } else if (e.number == 2) {
                KILN_TRY(onnx_want(c, &e, KILN_PB_VARINT, "version"));
                version = (int64_t)e.u;
            }
        }
        if (str_is(domain, "ai.onnx")) domain = (onnx_str){"", 0};
        const char *d;
        KILN_TRY(name_dup(c, g, domain, "domain", &d));
        if (version < 0 || version > INT_MAX)
            return onnx_fail(c, KILN_ERR_PARSE, "domain '%s' has version %lld", d, (long long)version);
        for (int i = 0; i < g->nopsets; i++)
            if (!strcmp(g->opsets[i].domain, d)) return onnx_fail(c, KILN_ERR_PARSE, "domain '%s' is listed twice", d);
        g->opsets[g->nopsets++] = (kiln_opset_import){d, version};
    }
    onnx_where_pop(c, saved);
    return KILN_OK;
}

static kiln_status import_model(onnx_ctx *c, kiln_pb msg, kiln_graph *g) {
    kiln_pb r = msg, graph = {NULL, NULL};
    kiln_pb_field f;
    onnx_str pname = {"", 0}, pversion = {"", 0};
    bool has_graph = false;
    int nopsets = 0;
    while (!kiln_pb_done(&r)) {
        KILN_TRY(onnx_next(c, &r, &f));
        switch (f.number) {
        case M_IR_VERSION:
            KILN_TRY(onnx_want(c, &f, KILN_PB_VARINT, "ir_version"));
            g->ir_version = (int64_t)f.u;
            break;
        case M_PRODUCER_NAME:
            KILN_TRY(onnx_want(c, &f, KILN_PB_LEN, "producer_name"));
            pname = field_str(&f);
            break;
        case M_PRODUCER_VERSION:
            KILN_TRY(onnx_want(c, &f, KILN_PB_LEN, "producer_version"));
            pversion = field_str(&f);
            break;
        case M_GRAPH:
            KILN_TRY(onnx_want(c, &f, KILN_PB_LEN, "graph"));
            if (has_graph) return onnx_fail(c, KILN_ERR_PARSE, "ModelProto holds more than one graph");
            graph = f.data;
            has_graph = true;
            break;
        case M_OPSET_IMPORT:
            KILN_TRY(onnx_want(c, &f, KILN_PB_LEN, "opset_import"));
            if (++nopsets > 4096) return onnx_fail(c, KILN_ERR_PARSE, "too many opset_import entries");
            break;
        default: break;
        }
    }
    if (!has_graph) return onnx_fail(c, KILN_ERR_PARSE, "ModelProto has no graph");
    size_t plen = pname.n + pversion.n + 2;
    char *producer = kiln_graph_alloc(g, plen);
    if (!producer) return onnx_fail(c, KILN_ERR_OUT_OF_MEMORY, "out of memory");
    snprintf(producer, plen, "%.*s%s%.*s", (int)pname.n, pname.p, pname.n && pversion.n ? " " : "", (int)pversion.n,
             pversion.p);
    g->producer = producer;
    KILN_TRY(import_opsets(c, msg, g, nopsets));
    return import_graph(c, graph, g, NULL);
}

/* Creates the graph (keeping own_map, if any, alive with it) and imports data into it. */
static kiln_status import_common(const char *label, const void *data, size_t size, const char *base_dir,
                                 kiln_file_map *own_map, kiln_graph **out) {
    *out = NULL;
    kiln_graph *g = kiln_graph_create();
    if (!g) {
        kiln_file_map_free(own_map);
        return kiln_error(KILN_ERR_OUT_OF_MEMORY, "%s: out of memory", label);
    }
    if (own_map) {
        kiln_status s = kiln_graph_keep_alive(g, own_map, kiln_file_map_free);
        if (s != KILN_OK) {
            kiln_graph_free(g);
            return s;
        }
    }
    onnx_ctx c = {.file = label, .base = data, .base_dir = base_dir, .root = g};
    kiln_status s = onnx_refuse_other_formats(&c, data, size);
    if (s == KILN_OK) s = import_model(&c, kiln_pb_make(data, size), g);
    onnx_ctx_release(&c);
    if (s != KILN_OK) {
        kiln_graph_free(g);
        return s;
    }
    KILN_LOG(KILN_LOG_VERBOSE, "%s: imported graph '%s' (%s, IR %lld): %d nodes, %d values, %d inputs, %d outputs",
             label, g->name, g->producer, (long long)g->ir_version, g->nnodes, g->nvalues, g->ninputs, g->noutputs);
    *out = g;
    return KILN_OK;
}

kiln_status kiln_onnx_import(const char *path, kiln_graph **out) {
    if (!path || !out) return kiln_error(KILN_ERR_INVALID_ARGUMENT, "kiln_onnx_import: path and out are required");
    *out = NULL;
    kiln_file_map *m;
    KILN_TRY(kiln_file_map_new(path, &m));
    char *dir = onnx_dirname(path);
    if (!dir) {
        kiln_file_map_free(m);
        return kiln_error(KILN_ERR_OUT_OF_MEMORY, "out of memory");
    }
    kiln_status s = import_common(path, m->data, m->size, dir, m, out);
    free(dir);
    return s;
}

kiln_status kiln_onnx_import_buffer(const void *data, size_t size, const char *base_dir, kiln_graph **out) {
    if (!out || (!data && size))
        return kiln_error(KILN_ERR_INVALID_ARGUMENT, "kiln_onnx_import_buffer: data and out are required");
    return import_common("<onnx buffer>", data, size, base_dir, NULL, out);
}
