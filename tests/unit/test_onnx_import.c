/* test_onnx_import.c — the ONNX frontend (src/frontends/onnx/): the small models of tests/data
 * imported and checked field by field (types, symbolic dims, constants from every storage form,
 * zero-copy views, external data, subgraphs), error messages for malformed models built here byte
 * by byte, TensorProto files, and robustness: every truncation point and a few thousand bit-flipped
 * copies of each model import to an error or a valid graph, never a crash.
 *
 * Usage: test_onnx_import <tests/data directory> */
#include "check.h"
#include "core/file.h"
#include "core/half.h"
#include "core/status.h"
#include "frontends/onnx/onnx_import.h"
#include "ir/graph.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *g_data;

static char *data_path(const char *name) {
    static char buf[4096];
    snprintf(buf, sizeof buf, "%s/%s", g_data, name);
    return buf;
}

static const kiln_value *value(const kiln_graph *g, const char *name) {
    int id = kiln_graph_find_value(g, name);
    return id >= 0 ? &g->values[id] : NULL;
}

static const kiln_node *node(const kiln_graph *g, const char *name) {
    for (int i = 0; i < g->nnodes; i++)
        if (!strcmp(g->nodes[i].name, name)) return &g->nodes[i];
    return NULL;
}

static bool dims_are(const kiln_tensor *t, int ndim, const int64_t *dims) {
    if (t->ndim != ndim) return false;
    for (int i = 0; i < ndim; i++)
        if (t->dims[i] != dims[i]) return false;
    return true;
}

static bool sym_is(const kiln_graph *g, kiln_dim d, const char *name) {
    return d.sym > 0 && d.sym <= g->nsymbols && !strcmp(g->symbols[d.sym - 1], name) && d.value == -1;
}

static bool dim_static(kiln_dim d, int64_t v) { return d.sym == 0 && d.value == v; }

/* ---------------------------------------------------------------- the small model */

static void check_small(const kiln_graph *g) {
    CHECK(g->ir_version == 8);
    CHECK(!strcmp(g->producer, "kiln-tests 1"));
    CHECK(!strcmp(g->name, "small"));
    CHECK(g->nopsets == 2);
    CHECK(kiln_graph_opset(g, "") == 17 && kiln_graph_opset(g, "ai.onnx") == 17);
    CHECK(kiln_graph_opset(g, "com.example") == 2);

    /* inputs: x only; W is an initializer listed as an input and stays a constant */
    CHECK(g->ninputs == 1);
    const kiln_value *x = value(g, "x");
    CHECK(x && g->ninputs == 1 && g->inputs[0] == kiln_graph_find_value(g, "x"));
    CHECK(x && x->is_input && !x->constant && x->dtype == KILN_F32 && x->ndim == 4);
    CHECK(x && sym_is(g, x->dims[0], "N") && dim_static(x->dims[1], 3) && dim_static(x->dims[2], 8) &&
          dim_static(x->dims[3], 8));
    CHECK(x && x->producer == -1);

    CHECK(g->noutputs == 1);
    const kiln_value *y = value(g, "y");
    CHECK(y && g->outputs[0] == kiln_graph_find_value(g, "y") && y->is_output);
    CHECK(y && y->dtype == KILN_F32 && y->ndim == 4 && sym_is(g, y->dims[0], "N") && dim_static(y->dims[1], 4));

    /* value_info: [N, 4, ?, 8] */
    const kiln_value *conv_out = value(g, "conv_out");
    CHECK(conv_out && conv_out->dtype == KILN_F32 && conv_out->ndim == 4);
    CHECK(conv_out && conv_out->dims[0].sym == x->dims[0].sym && dim_static(conv_out->dims[1], 4) &&
          conv_out->dims[2].sym < 0 && dim_static(conv_out->dims[3], 8));
    CHECK(g->nsymbols == 1);

    /* nodes: the three Constants became values */
    CHECK(g->nnodes == 3);
    const kiln_node *conv = node(g, "conv1"), *add = node(g, "add1"), *relu = node(g, "Relu_5");
    CHECK(conv && add && relu);
    if (!conv || !add || !relu) return;
    CHECK(!strcmp(conv->op_type, "Conv") && !strcmp(conv->domain, "") && conv->opset == 17);
    CHECK(conv->ninputs == 3 && conv->noutputs == 1);
    CHECK(conv->inputs[0] == kiln_graph_find_value(g, "x") && conv->inputs[1] == kiln_graph_find_value(g, "W") &&
          conv->inputs[2] == kiln_graph_find_value(g, "B"));
    CHECK(conv->outputs[0] == kiln_graph_find_value(g, "conv_out"));
    CHECK(g->values[conv->outputs[0]].producer == (int)(conv - g->nodes));
    CHECK(!strcmp(add->op_type, "Add") && add->inputs[1] == kiln_graph_find_value(g, "addend"));
    CHECK(!strcmp(relu->op_type, "Relu") && relu->opset == 17 && relu->outputs[0] == kiln_graph_find_value(g, "y"));

    /* attributes of every kind the model uses */
    CHECK(conv->nattrs == 5);
    int n;
    const int64_t *ks = kiln_attr_ints(conv, "kernel_shape", &n);
    CHECK(ks && n == 2 && ks[0] == 3 && ks[1] == 3);
    const int64_t *pads = kiln_attr_ints(conv, "pads", &n);
    CHECK(pads && n == 4 && pads[0] == 1 && pads[3] == 1);
    CHECK(kiln_attr_int(conv, "group", -1) == 1);
    const kiln_attr *ap = kiln_node_attr(conv, "auto_pad");
    CHECK(ap && ap->type == KILN_ATTR_STRING && ap->s_len == 6 && !strcmp(ap->s, "NOTSET"));
    CHECK(kiln_node_attr(conv, "group")->type == KILN_ATTR_INT);
    CHECK(add->nattrs == 0);

    /* constants from each storage form */
    const kiln_value *W = value(g, "W");
    CHECK(W && W->constant && !W->is_input && W->producer == -1);
    if (W && W->constant) {
        const kiln_tensor *t = W->constant;
        CHECK(t->dtype == KILN_F32 && dims_are(t, 4, (int64_t[]){4, 3, 3, 3}) && t->nbytes == 108 * 4);
        bool ok = true;
        for (int i = 0; i < 108; i++) ok &= ((const float *)t->data)[i] == (float)i * 0.01f - 0.5f;
        CHECK(ok);
        CHECK(W->dtype == KILN_F32 && W->ndim == 4 && dim_static(W->dims[0], 4));
    }
    const kiln_value *B = value(g, "B");
    CHECK(B && B->constant && B->constant->dtype == KILN_F32 && dims_are(B->constant, 1, (int64_t[]){4}));
    if (B && B->constant) {
        const float *b = B->constant->data;
        CHECK(b[0] == 0.1f && b[1] == 0.2f && b[2] == 0.3f && b[3] == 0.4f);
    }
    const kiln_value *h = value(g, "half_init");
    CHECK(h && h->constant && h->constant->dtype == KILN_F16 && h->constant->nbytes == 4);
    if (h && h->constant) {
        const uint16_t *hb = h->constant->data;
        CHECK(kiln_f16_to_f32(hb[0]) == 1.5f && kiln_f16_to_f32(hb[1]) == -2.0f);
    }
    const kiln_value *i64 = value(g, "i64_init");
    CHECK(i64 && i64->constant && i64->constant->dtype == KILN_I64);
    if (i64 && i64->constant) {
        const int64_t *v = i64->constant->data;
        CHECK(v[0] == -1 && v[1] == 0 && v[2] == INT64_C(1) << 40);
    }
    const kiln_value *addend = value(g, "addend");
    CHECK(addend && addend->constant && dims_are(addend->constant, 3, (int64_t[]){4, 1, 1}));
    if (addend && addend->constant) CHECK(((const float *)addend->constant->data)[3] == 4.0f);
    CHECK(addend && addend->producer == -1);
    const kiln_value *scale = value(g, "scale");
    CHECK(scale && scale->constant && scale->constant->dtype == KILN_F32 && scale->constant->ndim == 0);
    if (scale && scale->constant) CHECK(*(const float *)scale->constant->data == 0.5f);
    const kiln_value *shape_c = value(g, "shape_c");
    CHECK(shape_c && shape_c->constant && shape_c->constant->dtype == KILN_I64 &&
          dims_are(shape_c->constant, 1, (int64_t[]){3}));
    if (shape_c && shape_c->constant) {
        const int64_t *v = shape_c->constant->data;
        CHECK(v[0] == 1 && v[1] == 2 && v[2] == 3);
    }
}

static void test_small_model(void) {
    kiln_graph *g = NULL;
    CHECK_OK(kiln_onnx_import(data_path("onnx_small.onnx"), &g));
    if (!g) return;
    check_small(g);
    /* the rest of the pipeline accepts what the importer made */
    CHECK_OK(kiln_graph_verify(g));
    CHECK_OK(kiln_graph_resolve_ops(g, NULL));
    CHECK_OK(kiln_graph_toposort(g));
    CHECK_OK(kiln_graph_infer_shapes(g));
    const kiln_value *y = value(g, "y");
    CHECK(y && y->ndim == 4 && y->dims[0].sym > 0 && dim_static(y->dims[1], 4) && dim_static(y->dims[2], 8));
    FILE *devnull = fopen("/dev/null", "w");
    if (devnull) {
        kiln_graph_print(g, devnull);
        fclose(devnull);
    }
    kiln_graph_free(g);
}

/* Reads a whole file into a malloc'd buffer. */
static uint8_t *read_file(const char *path, size_t *size) {
    kiln_file_map m;
    if (kiln_file_map_open(path, &m) != KILN_OK) {
        fprintf(stderr, "cannot read %s: %s\n", path, kiln_last_error());
        failures++;
        *size = 0;
        return NULL;
    }
    uint8_t *buf = malloc(m.size ? m.size : 1);
    memcpy(buf, m.data, m.size);
    *size = m.size;
    kiln_file_unmap(&m);
    return buf;
}

/* Raw data that is aligned for its dtype is viewed in place; otherwise it is copied. Shifting the
 * buffer by 0..7 bytes exercises both. */
static void test_zero_copy(void) {
    size_t size;
    uint8_t *file = read_file(data_path("onnx_small.onnx"), &size);
    if (!file) return;
    uint8_t *space = aligned_alloc(64, (size + 64 + 63) & ~(size_t)63);
    int views = 0, copies = 0;
    for (int shift = 0; shift < 8; shift++) {
        uint8_t *buf = space + shift;
        memcpy(buf, file, size);
        kiln_graph *g = NULL;
        CHECK_OK(kiln_onnx_import_buffer(buf, size, NULL, &g));
        if (!g) continue;
        check_small(g);
        const kiln_tensor *t = value(g, "W")->constant;
        if (t->owned) {
            copies++;
        } else {
            views++;
            CHECK((const uint8_t *)t->data >= buf && (const uint8_t *)t->data + t->nbytes <= buf + size);
            CHECK((uintptr_t)t->data % 4 == 0);
        }
        /* typed fields are always converted into owned storage */
        CHECK(value(g, "B")->constant->owned && value(g, "i64_init")->constant->owned);
        kiln_graph_free(g);
    }
    CHECK(views == 2 && copies == 6);
    free(space);
    free(file);
}

static void test_external(void) {
    kiln_graph *g = NULL;
    CHECK_OK(kiln_onnx_import(data_path("onnx_external.onnx"), &g));
    if (!g) return;
    const kiln_value *W = value(g, "W"), *B = value(g, "B");
    CHECK(W && W->constant && dims_are(W->constant, 2, (int64_t[]){3, 4}));
    CHECK(B && B->constant && dims_are(B->constant, 1, (int64_t[]){4}));
    if (W && W->constant && B && B->constant) {
        bool ok = true;
        for (int i = 0; i < 12; i++) ok &= ((const float *)W->constant->data)[i] == (float)i - 6.0f;
        CHECK(ok);
        CHECK(((const float *)B->constant->data)[0] == 10.0f && ((const float *)B->constant->data)[3] == 40.0f);
        /* offsets 0 and 48 of a page-aligned mapping: both viewed in place */
        CHECK(!W->constant->owned && !B->constant->owned);
    }
    CHECK(g->ninputs == 1 && g->noutputs == 1 && g->nnodes == 2);
    kiln_graph_free(g);

    /* from a buffer: the directory must be given */
    size_t size;
    uint8_t *buf = read_file(data_path("onnx_external.onnx"), &size);
    if (!buf) return;
    CHECK(kiln_onnx_import_buffer(buf, size, NULL, &g) == KILN_ERR_IO && !g);
    CHECK(strstr(kiln_last_error(), "initializer 'W'") && strstr(kiln_last_error(), "base directory"));
    CHECK_OK(kiln_onnx_import_buffer(buf, size, g_data, &g));
    CHECK(g && value(g, "W") && value(g, "W")->constant);
    kiln_graph_free(g);
    free(buf);
}

static void test_subgraphs(void) {
    kiln_graph *g = NULL;
    CHECK_OK(kiln_onnx_import(data_path("onnx_if.onnx"), &g));
    if (!g) return;
    CHECK(g->nnodes == 1 && g->ninputs == 2 && g->noutputs == 1);
    const kiln_node *n = node(g, "if1");
    CHECK(n && !strcmp(n->op_type, "If") && n->nattrs == 2);
    const kiln_attr *then_a = n ? kiln_node_attr(n, "then_branch") : NULL;
    const kiln_attr *else_a = n ? kiln_node_attr(n, "else_branch") : NULL;
    CHECK(then_a && then_a->type == KILN_ATTR_GRAPH && then_a->g);
    CHECK(else_a && else_a->type == KILN_ATTR_GRAPH && else_a->g);
    if (then_a && then_a->g) {
        const kiln_graph *t = then_a->g;
        CHECK(!strcmp(t->name, "then_branch") && t->nnodes == 1 && t->noutputs == 1 && t->ninputs == 0);
        CHECK(kiln_graph_opset(t, "") == 17);
        const kiln_node *add = node(t, "then_add");
        CHECK(add && add->ninputs == 2 && add->opset == 17);
        /* x and one come from the enclosing graph: mirrored as untyped values with no producer */
        const kiln_value *ox = value(t, "x"), *one = value(t, "one");
        CHECK(ox && ox->producer == -1 && !ox->constant && !ox->is_input);
        CHECK(one && one->producer == -1);
        const kiln_value *out = value(t, "t_out");
        CHECK(out && out->is_output && out->dtype == KILN_F32 && out->ndim == 1);
    }
    if (else_a && else_a->g) CHECK(node(else_a->g, "else_id") != NULL);
    kiln_graph_free(g);
}

static void test_tensor_files(void) {
    kiln_tensor t = {0};
    char *name = NULL;
    CHECK_OK(kiln_onnx_read_tensor_file(data_path("onnx_tensor_raw.pb"), &t, &name));
    CHECK(name && !strcmp(name, "raw_t"));
    CHECK(t.dtype == KILN_F32 && dims_are(&t, 2, (int64_t[]){2, 3}) && t.owned);
    if (t.data) CHECK(((float *)t.data)[0] == 1.0f && ((float *)t.data)[5] == 6.0f);
    kiln_tensor_release(&t);
    free(name);
    CHECK_OK(kiln_onnx_read_tensor_file(data_path("onnx_tensor_typed.pb"), &t, NULL));
    CHECK(t.dtype == KILN_I32 && dims_are(&t, 1, (int64_t[]){4}) && t.owned);
    if (t.data) {
        const int32_t *v = t.data;
        CHECK(v[0] == -7 && v[1] == 0 && v[2] == 7 && v[3] == INT32_MAX);
    }
    kiln_tensor_release(&t);
    CHECK(kiln_onnx_read_tensor_file(data_path("no_such_tensor.pb"), &t, NULL) == KILN_ERR_IO);
    CHECK(strstr(kiln_last_error(), "no_such_tensor.pb") != NULL);
}

/* ---------------------------------------------------------------- models built byte by byte */

typedef struct pb {
    uint8_t *p;
    size_t n, cap;
} pb;

static void put_bytes(pb *b, const void *d, size_t n) {
    if (b->n + n > b->cap) {
        b->cap = (b->n + n) * 2 + 64;
        b->p = realloc(b->p, b->cap);
    }
    if (n) memcpy(b->p + b->n, d, n);
    b->n += n;
}
static void put_varint(pb *b, uint64_t v) {
    do {
        uint8_t c = (uint8_t)((v & 0x7f) | (v > 0x7f ? 0x80 : 0));
        put_bytes(b, &c, 1);
        v >>= 7;
    } while (v);
}
static void put_tag(pb *b, uint32_t field, int wire) { put_varint(b, (uint64_t)field << 3 | (unsigned)wire); }
static void put_int(pb *b, uint32_t field, int64_t v) {
    put_tag(b, field, 0);
    put_varint(b, (uint64_t)v);
}
static void put_data(pb *b, uint32_t field, const void *d, size_t n) {
    put_tag(b, field, 2);
    put_varint(b, n);
    put_bytes(b, d, n);
}
static void put_str(pb *b, uint32_t field, const char *s) { put_data(b, field, s, strlen(s)); }
/* Appends message m as field `field` and frees m. */
static void put_msg(pb *b, uint32_t field, pb *m) {
    put_data(b, field, m->p, m->n);
    free(m->p);
    memset(m, 0, sizeof *m);
}

/* ValueInfoProto: name, float tensor type with static dims (ndim < 0: no shape). */
static pb value_info(const char *name, int elem, int ndim, const int64_t *dims) {
    pb vi = {0}, type = {0}, tensor = {0}, shape = {0};
    put_str(&vi, 1, name);
    put_int(&tensor, 1, elem);
    for (int i = 0; i < ndim; i++) {
        pb dim = {0};
        put_int(&dim, 1, dims[i]);
        put_msg(&shape, 1, &dim);
    }
    if (ndim >= 0) put_msg(&tensor, 2, &shape);
    put_msg(&type, 1, &tensor);
    put_msg(&vi, 2, &type);
    return vi;
}

/* NodeProto with inputs and outputs given as NULL-terminated lists. */
static pb make_node(const char *name, const char *op, const char *const *ins, const char *const *outs) {
    pb n = {0};
    for (; ins && *ins; ins++) put_str(&n, 1, *ins);
    for (; outs && *outs; outs++) put_str(&n, 2, *outs);
    if (name) put_str(&n, 3, name);
    put_str(&n, 4, op);
    return n;
}

/* ModelProto around graph g (ir 8, opset 17); frees g. */
static pb make_model(pb *g) {
    pb m = {0}, op = {0};
    put_int(&m, 1, 8);
    put_str(&op, 1, "");
    put_int(&op, 2, 17);
    put_msg(&m, 8, &op);
    put_msg(&m, 7, g);
    return m;
}

/* Imports b from memory (base_dir = the data directory), expects status want and, when want is an
 * error, a message containing each of the NULL-terminated fragments. Frees b. */
static void expect(pb *b, kiln_status want, const char *const *fragments, int line) {
    kiln_graph *g = NULL;
    kiln_status s = kiln_onnx_import_buffer(b->p, b->n, g_data, &g);
    if (s != want) {
        fprintf(stderr, "%s:%d: expected %s, got %s: %s\n", __FILE__, line, kiln_status_name(want), kiln_status_name(s),
                kiln_last_error());
        failures++;
    }
    for (; s != KILN_OK && fragments && *fragments; fragments++)
        if (!strstr(kiln_last_error(), *fragments)) {
            fprintf(stderr, "%s:%d: message lacks '%s': %s\n", __FILE__, line, *fragments, kiln_last_error());
            failures++;
        }
    CHECK((s == KILN_OK) == (g != NULL));
    kiln_graph_free(g);
    free(b->p);
    memset(b, 0, sizeof *b);
}

#define LIST(...) ((const char *const[]){__VA_ARGS__, NULL})

static void test_errors(void) {
    pb g, m, n, a, t, vi;
    const int64_t d2[] = {2};

    /* a node reading a value nothing defines */
    g = (pb){0};
    vi = value_info("x", 1, 1, d2);
    put_msg(&g, 11, &vi);
    n = make_node("bad", "Relu", LIST("nope"), LIST("y"));
    put_msg(&g, 1, &n);
    vi = value_info("y", 1, 1, d2);
    put_msg(&g, 12, &vi);
    m = make_model(&g);
    expect(&m, KILN_ERR_PARSE, LIST("<onnx buffer>: NodeProto 'bad'", "'nope'", "not defined"), __LINE__);

    /* the same node unnamed is named in the message as import would name it */
    g = (pb){0};
    n = make_node(NULL, "Relu", LIST("nope"), LIST("y"));
    put_msg(&g, 1, &n);
    m = make_model(&g);
    expect(&m, KILN_ERR_PARSE, LIST("NodeProto 'Relu_0'", "'nope'"), __LINE__);

    /* a truncated varint inside an attribute's packed ints */
    g = (pb){0};
    vi = value_info("x", 1, 1, d2);
    put_msg(&g, 11, &vi);
    n = make_node("conv1", "Conv", LIST("x"), LIST("y"));
    a = (pb){0};
    put_str(&a, 1, "pads");
    put_int(&a, 20, 7);
    put_data(&a, 8, "\x01\x01\x80", 3);
    put_msg(&n, 5, &a);
    put_msg(&g, 1, &n);
    m = make_model(&g);
    expect(&m, KILN_ERR_PARSE, LIST("NodeProto 'conv1' attribute 'pads': ", "truncated varint at byte "), __LINE__);

    /* an attribute field with the wrong wire type */
    g = (pb){0};
    n = make_node("k", "Identity", NULL, LIST("y"));
    a = (pb){0};
    put_str(&a, 1, "alpha");
    put_int(&a, 20, 1);
    put_int(&a, 2, 5); /* f must be fixed32 */
    put_msg(&n, 5, &a);
    put_msg(&g, 1, &n);
    m = make_model(&g);
    expect(&m, KILN_ERR_PARSE, LIST("attribute 'alpha'", "field 'f'", "expected 32-bit"), __LINE__);

    /* raw_data of the wrong size names the initializer */
    g = (pb){0};
    t = (pb){0};
    put_int(&t, 1, 2);
    put_int(&t, 1, 2);
    put_int(&t, 2, 1);
    put_str(&t, 8, "W");
    put_data(&t, 9, "0123456789ab", 12);
    put_msg(&g, 5, &t);
    m = make_model(&g);
    expect(&m, KILN_ERR_PARSE, LIST("initializer 'W'", "raw_data holds 12 bytes, expected 16", "float32[2,2]"),
           __LINE__);

    /* typed data of the wrong count */
    g = (pb){0};
    t = (pb){0};
    put_int(&t, 1, 3);
    put_int(&t, 2, 7);
    put_str(&t, 8, "I");
    put_int(&t, 7, 1);
    put_int(&t, 7, 2);
    put_msg(&g, 5, &t);
    m = make_model(&g);
    expect(&m, KILN_ERR_PARSE, LIST("initializer 'I'", "int64_data holds 2 values, expected 3"), __LINE__);

    /* a negative dimension, and a dimension product that overflows */
    g = (pb){0};
    t = (pb){0};
    put_int(&t, 1, -3);
    put_int(&t, 2, 1);
    put_str(&t, 8, "neg");
    put_msg(&g, 5, &t);
    m = make_model(&g);
    expect(&m, KILN_ERR_PARSE, LIST("initializer 'neg'", "negative"), __LINE__);
    g = (pb){0};
    t = (pb){0};
    for (int i = 0; i < 4; i++) put_int(&t, 1, INT64_C(1) << 40);
    put_int(&t, 2, 1);
    put_str(&t, 8, "huge");
    put_data(&t, 9, "abcd", 4);
    put_msg(&g, 5, &t);
    m = make_model(&g);
    expect(&m, KILN_ERR_PARSE, LIST("initializer 'huge'"), __LINE__);

    /* duplicate initializer; output defined twice */
    g = (pb){0};
    for (int i = 0; i < 2; i++) {
        t = (pb){0};
        put_int(&t, 2, 1);
        put_str(&t, 8, "c");
        put_data(&t, 9, "abcd", 4);
        put_msg(&g, 5, &t);
    }
    m = make_model(&g);
    expect(&m, KILN_ERR_PARSE, LIST("initializer 'c'", "defined twice"), __LINE__);
    g = (pb){0};
    vi = value_info("x", 1, 1, d2);
    put_msg(&g, 11, &vi);
    n = make_node("a", "Relu", LIST("x"), LIST("y"));
    put_msg(&g, 1, &n);
    n = make_node("b", "Relu", LIST("x"), LIST("y"));
    put_msg(&g, 1, &n);
    m = make_model(&g);
    expect(&m, KILN_ERR_PARSE, LIST("NodeProto 'b'", "output 'y' is already defined"), __LINE__);

    /* refused features say what they are */
    g = (pb){0};
    t = (pb){0};
    put_msg(&g, 15, &t);
    m = make_model(&g);
    expect(&m, KILN_ERR_UNSUPPORTED, LIST("sparse initializers"), __LINE__);

    g = (pb){0};
    vi = (pb){0};
    put_str(&vi, 1, "seq");
    pb type = {0}, seq = {0};
    put_msg(&type, 4, &seq);
    put_msg(&vi, 2, &type);
    put_msg(&g, 11, &vi);
    m = make_model(&g);
    expect(&m, KILN_ERR_UNSUPPORTED, LIST("input 'seq'", "sequence type"), __LINE__);

    g = (pb){0};
    n = make_node("cs", "Constant", NULL, LIST("s"));
    a = (pb){0};
    put_str(&a, 1, "value_string");
    put_int(&a, 20, 3);
    put_str(&a, 4, "hello");
    put_msg(&n, 5, &a);
    put_msg(&g, 1, &n);
    m = make_model(&g);
    expect(&m, KILN_ERR_UNSUPPORTED, LIST("NodeProto 'cs' attribute 'value_string'", "string constants"), __LINE__);

    g = (pb){0};
    t = (pb){0};
    put_int(&t, 1, 1);
    put_int(&t, 2, 8);
    put_str(&t, 8, "str");
    put_str(&t, 6, "abc");
    put_msg(&g, 5, &t);
    m = make_model(&g);
    expect(&m, KILN_ERR_UNSUPPORTED, LIST("initializer 'str'", "string tensors"), __LINE__);

    g = (pb){0};
    n = make_node("r", "Relu", NULL, LIST("y"));
    a = (pb){0};
    put_str(&a, 1, "alpha");
    put_str(&a, 21, "outer_alpha");
    put_msg(&n, 5, &a);
    put_msg(&g, 1, &n);
    m = make_model(&g);
    expect(&m, KILN_ERR_UNSUPPORTED, LIST("attribute 'alpha'", "ref_attr_name"), __LINE__);

    /* external data: a wrong length and a location outside the model's directory */
    static const struct { const char *loc, *off, *len, *frag; kiln_status want; } ext[] = {
        {"onnx_external.bin", "0", "40", "length 40 does not match 48 bytes", KILN_ERR_PARSE},
        {"../onnx_external.bin", "0", "48", "must be a relative path", KILN_ERR_PARSE},
        {"/etc/passwd", "0", "48", "must be a relative path", KILN_ERR_PARSE},
        {"onnx_external.bin", "32", NULL, "does not fit", KILN_ERR_PARSE},
        {"onnx_external.bin", "1x", "48", "not a decimal number", KILN_ERR_PARSE},
        {"missing.bin", "0", "48", "missing.bin", KILN_ERR_IO},
        {"onnx_external.bin", "16", "48", NULL, KILN_OK},
    };
    for (size_t i = 0; i < sizeof ext / sizeof *ext; i++) {
        g = (pb){0};
        t = (pb){0};
        put_int(&t, 1, 12);
        put_int(&t, 2, 1);
        put_str(&t, 8, "ext");
        const char *keys[] = {"location", "offset", "length"}, *vals[] = {ext[i].loc, ext[i].off, ext[i].len};
        for (int k = 0; k < 3; k++) {
            if (!vals[k]) continue;
            pb kv = {0};
            put_str(&kv, 1, keys[k]);
            put_str(&kv, 2, vals[k]);
            put_msg(&t, 13, &kv);
        }
        put_int(&t, 14, 1);
        put_msg(&g, 5, &t);
        m = make_model(&g);
        expect(&m, ext[i].want, ext[i].frag ? LIST("initializer 'ext'", ext[i].frag) : NULL, __LINE__);
    }

    /* a model with no graph, and not a model at all */
    m = (pb){0};
    put_int(&m, 1, 8);
    expect(&m, KILN_ERR_PARSE, LIST("ModelProto has no graph"), __LINE__);
    m = (pb){0};
    put_bytes(&m, "\x0f\x01", 2);
    expect(&m, KILN_ERR_PARSE, LIST("invalid wire type at byte 0"), __LINE__);

    /* a missing file names itself */
    kiln_graph *gr = NULL;
    CHECK(kiln_onnx_import(data_path("no_such_model.onnx"), &gr) == KILN_ERR_IO && !gr);
    CHECK(strstr(kiln_last_error(), "no_such_model.onnx") != NULL);
}

/* Typed storage of every dtype the int32_data field carries, plus uint64_data and double_data. */
static void test_typed_fields(void) {
    static const struct { int dtype, field; int64_t vals[3]; size_t esize; uint64_t want[3]; } cases[] = {
        {KILN_I8, 5, {-1, 127, -128}, 1, {0xff, 0x7f, 0x80}},
        {KILN_U8, 5, {0, 255, 7}, 1, {0, 255, 7}},
        {KILN_BOOL, 5, {0, 1, 1}, 1, {0, 1, 1}},
        {KILN_I16, 5, {-2, 300, 0}, 2, {0xfffe, 300, 0}},
        {KILN_U16, 5, {65535, 1, 2}, 2, {65535, 1, 2}},
        {KILN_BF16, 5, {0x3f80, 0xc000, 0}, 2, {0x3f80, 0xc000, 0}},
        {KILN_I32, 5, {-5, INT32_MAX, INT32_MIN}, 4, {0xfffffffb, 0x7fffffff, 0x80000000}},
        {KILN_U32, 11, {0, 4294967295, 9}, 4, {0, 0xffffffff, 9}},
        {KILN_U64, 11, {-1, 0, 5}, 8, {UINT64_MAX, 0, 5}},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        pb g = {0}, t = {0};
        put_int(&t, 1, 3);
        put_int(&t, 2, cases[i].dtype);
        put_str(&t, 8, "t");
        for (int k = 0; k < 3; k++) put_int(&t, (uint32_t)cases[i].field, cases[i].vals[k]);
        put_msg(&g, 5, &t);
        pb m = make_model(&g);
        kiln_graph *gr = NULL;
        CHECK_OK(kiln_onnx_import_buffer(m.p, m.n, NULL, &gr));
        const kiln_value *v = gr ? value(gr, "t") : NULL;
        CHECK(v && v->constant && (int)v->constant->dtype == cases[i].dtype && v->constant->nbytes == 3 * cases[i].esize);
        for (int k = 0; v && v->constant && k < 3; k++) {
            uint64_t got = 0;
            memcpy(&got, (const uint8_t *)v->constant->data + k * cases[i].esize, cases[i].esize);
            if (got != cases[i].want[k]) {
                fprintf(stderr, "dtype %d element %d: got %llx\n", cases[i].dtype, k, (unsigned long long)got);
                failures++;
            }
        }
        kiln_graph_free(gr);
        free(m.p);
    }
    /* double_data, packed */
    pb g = {0}, t = {0};
    put_int(&t, 1, 2);
    put_int(&t, 2, KILN_F64);
    put_str(&t, 8, "d");
    double dv[2] = {1.25, -3.5};
    put_data(&t, 10, dv, sizeof dv);
    put_msg(&g, 5, &t);
    pb m = make_model(&g);
    kiln_graph *gr = NULL;
    CHECK_OK(kiln_onnx_import_buffer(m.p, m.n, NULL, &gr));
    const kiln_value *v = gr ? value(gr, "d") : NULL;
    CHECK(v && v->constant && ((const double *)v->constant->data)[1] == -3.5);
    kiln_graph_free(gr);
    free(m.p);
}

/* An empty initializer whose other dims are huge imports as an empty tensor: its element count is 0
 * without the product of the others ever being formed (that overflowed int64: UBSan, found by
 * fuzz/fuzz_onnx.c). */
static void test_empty_tensor_huge_dims(void) {
    pb g = {0}, t = {0};
    put_int(&t, 1, 4177917);
    put_int(&t, 1, 0);
    put_int(&t, 1, 8796093022207);
    put_int(&t, 2, KILN_F32);
    put_str(&t, 8, "e");
    put_msg(&g, 5, &t);
    pb m = make_model(&g);
    kiln_graph *gr = NULL;
    CHECK_OK(kiln_onnx_import_buffer(m.p, m.n, NULL, &gr));
    const kiln_value *v = gr ? value(gr, "e") : NULL;
    CHECK(v && v->constant && v->constant->nbytes == 0 && kiln_tensor_numel(v->constant) == 0);
    kiln_graph_free(gr);
    free(m.p);
}

/* ---------------------------------------------------------------- robustness */

/* Imports a heap copy of exactly n bytes (so ASan sees any over-read); checks the outcome is an
 * error with a message or a graph, and on success prints it. Returns the status. */
static kiln_status import_exact(const uint8_t *data, size_t n, FILE *sink) {
    uint8_t *copy = malloc(n ? n : 1);
    memcpy(copy, data, n);
    kiln_graph *g = NULL;
    kiln_error_clear();
    kiln_status s = kiln_onnx_import_buffer(copy, n, g_data, &g);
    if (s == KILN_OK) {
        CHECK(g != NULL);
        if (g) kiln_graph_print(g, sink);
    } else {
        CHECK(s < 0 && !g && kiln_last_error()[0]);
    }
    kiln_graph_free(g);
    free(copy);
    return s;
}

static void test_robustness(const char *file, int flips) {
    size_t size;
    uint8_t *buf = read_file(data_path(file), &size);
    if (!buf) return;
    FILE *sink = fopen("/dev/null", "w");
    int ok = 0, failed = 0;
    for (size_t n = 0; n <= size; n++) {
        if (import_exact(buf, n, sink) == KILN_OK) ok++;
        else failed++;
    }
    CHECK(import_exact(buf, size, sink) == KILN_OK);
    int flip_ok = 0;
    uint64_t x = 0x853c49e6748fea9bull ^ size;
    uint8_t *mut = malloc(size);
    for (int i = 0; i < flips; i++) {
        memcpy(mut, buf, size);
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        int nflips = 1 + (int)(x % 4);
        for (int k = 0; k < nflips; k++) {
            x ^= x << 13, x ^= x >> 7, x ^= x << 17;
            mut[(x >> 8) % size] ^= (uint8_t)(1u << (x % 8));
        }
        if (import_exact(mut, size, sink) == KILN_OK) flip_ok++;
    }
    printf("  %s: %zu truncations (%d imported, %d refused), %d bit-flipped copies (%d imported)\n", file, size + 1,
           ok, failed, flips, flip_ok);
    free(mut);
    if (sink) fclose(sink);
    free(buf);
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: %s <tests/data directory>\n", argv[0]);
        return 2;
    }
    g_data = argv[1];
    kiln_log_set_level(KILN_LOG_ERROR);
    test_small_model();
    test_zero_copy();
    test_external();
    test_subgraphs();
    test_tensor_files();
    test_errors();
    test_typed_fields();
    test_empty_tensor_huge_dims();
    test_robustness("onnx_small.onnx", 3000);
    test_robustness("onnx_if.onnx", 1000);
    test_robustness("onnx_external.onnx", 1000);
    return checks_report("test_onnx_import");
}
