/* test_engine_format.c — tests of the .kiln engine file (src/engine/): a hand-built graph with every
 * kind of value, dimension and attribute the format holds is written, read back (from the file and
 * from a buffer) and compared field by field; constants must be 64-byte aligned views into the
 * read-only mapping; every truncation and every single-byte corruption of the file must fail cleanly
 * (and corruptions with resealed checksums must never crash); mismatch messages are checked. A float32
 * value whose constant is stored in 16 bits (a 16-bit engine's weights) keeps both dtypes. */
#include "check.h"
#include "core/checksum.h"
#include "core/status.h"
#include "engine/engine_format.h"
#include "engine/engine_layout.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Setup steps the rest depends on: stop the test when they fail. */

/* Checks that expr fails with status want and a message containing each of the given substrings. */
static void check_error(int line, kiln_status got, kiln_status want, const char *sub1, const char *sub2) {
    const char *msg = kiln_last_error();
    if (got != want || (sub1 && !strstr(msg, sub1)) || (sub2 && !strstr(msg, sub2))) {
        fprintf(stderr, "%s:%d: expected %s with \"%s\"%s%s%s, got %s: %s\n", __FILE__, line, kiln_status_name(want),
                sub1 ? sub1 : "", sub2 ? " and \"" : "", sub2 ? sub2 : "", sub2 ? "\"" : "", kiln_status_name(got), msg);
        failures++;
    }
}
#define CHECK_ERROR(expr, want, sub1, sub2) check_error(__LINE__, (expr), (want), (sub1), (sub2))

/* ---------------------------------------------------------------- building the graph */

static int value(kiln_graph *g, const char *name, kiln_dtype dt, int ndim, const kiln_dim *dims) {
    int id;
    REQUIRE_OK(kiln_graph_value(g, name, &id));
    kiln_value *v = &g->values[id];
    v->dtype = dt;
    v->ndim = ndim;
    for (int d = 0; d < ndim; d++) v->dims[d] = dims[d];
    return id;
}

/* A tensor of dtype and shape filled with a pattern that depends on seed. */
static void pattern_tensor(kiln_tensor *t, kiln_dtype dt, int ndim, const int64_t *dims, int seed) {
    memset(t, 0, sizeof *t);
    REQUIRE_OK(kiln_tensor_alloc(t, dt, ndim, dims));
    for (size_t i = 0; i < t->nbytes; i++) ((uint8_t *)t->data)[i] = (uint8_t)(i * 7 + (size_t)seed * 31 + 1);
}

static int constant(kiln_graph *g, const char *name, kiln_dtype dt, int ndim, const int64_t *dims, int seed) {
    int id;
    kiln_tensor t;
    REQUIRE_OK(kiln_graph_value(g, name, &id));
    pattern_tensor(&t, dt, ndim, dims, seed);
    REQUIRE_OK(kiln_graph_set_constant(g, id, &t));
    return id;
}

static kiln_attr *attr(kiln_graph *g, int node, const char *name, kiln_attr_type type) {
    kiln_attr *a = kiln_node_add_attr(g, &g->nodes[node], name, type);
    if (!a) exit(1);
    return a;
}

/* The graph every test uses: symbolic, unknown and static dims, unknown rank, constants of several
 * dtypes (scalar and empty ones too), absent optional inputs/outputs, two domains, and one node with
 * every attribute kind the format holds. */
static kiln_graph *make_graph(void) {
    kiln_graph *g = kiln_graph_create();
    if (!g) exit(1);
    g->name = kiln_graph_strdup(g, "test_graph");
    g->producer = kiln_graph_strdup(g, "kiln-test 1.0");
    g->ir_version = 9;
    g->opsets = kiln_graph_alloc(g, 2 * sizeof *g->opsets);
    g->opsets[0] = (kiln_opset_import){kiln_graph_strdup(g, ""), 17};
    g->opsets[1] = (kiln_opset_import){kiln_graph_strdup(g, "com.microsoft"), 1};
    g->nopsets = 2;
    int32_t batch, seq;
    REQUIRE_OK(kiln_graph_symbol(g, "batch", &batch));
    REQUIRE_OK(kiln_graph_symbol(g, "seq", &seq));

    int x = value(g, "x", KILN_F32, 3, (kiln_dim[]){{-1, batch}, kiln_dim_static(3), {-1, seq}});
    int mask = value(g, "mask", KILN_BOOL, 2, (kiln_dim[]){KILN_DIM_UNKNOWN, kiln_dim_static(7)});
    REQUIRE_OK(kiln_graph_add_input(g, x));
    REQUIRE_OK(kiln_graph_add_input(g, mask));
    int w = constant(g, "w", KILN_F32, 2, (int64_t[]){3, 4}, 1);
    int b = constant(g, "b", KILN_I64, 1, (int64_t[]){4}, 2);
    constant(g, "half_scalar", KILN_F16, 0, NULL, 3);
    constant(g, "empty", KILN_F32, 2, (int64_t[]){0, 5}, 4);
    constant(g, "bytes5", KILN_U8, 1, (int64_t[]){5}, 5);
    constant(g, "complex", KILN_C128, 1, (int64_t[]){2}, 6);
    int y = value(g, "y", KILN_UNDEFINED, -1, NULL);
    int z = value(g, "z", KILN_F32, 2, (kiln_dim[]){{-1, batch}, kiln_dim_static(4)});
    int zz = value(g, "zz", KILN_F32, 0, NULL);
    REQUIRE_OK(kiln_graph_add_output(g, z));
    REQUIRE_OK(kiln_graph_add_output(g, zz));

    int n0, n1, n2;
    REQUIRE_OK(kiln_graph_add_node(g, "MatMul", "", "matmul0", 2, (int[]){x, w}, 1, (int[]){y}, &n0));
    REQUIRE_OK(kiln_graph_add_node(g, "FusedThing", "com.microsoft", "custom", 4, (int[]){y, -1, b, mask}, 2,
                                   (int[]){z, -1}, &n1));
    REQUIRE_OK(kiln_graph_add_node(g, "ReduceSum", "", "", 1, (int[]){z}, 1, (int[]){zz}, &n2));
    g->nodes[n1].opset = 1;

    attr(g, n1, "alpha", KILN_ATTR_FLOAT)->f = 0.25f;
    attr(g, n1, "axis", KILN_ATTR_INT)->i = -3;
    kiln_attr *a = attr(g, n1, "mode", KILN_ATTR_STRING);
    a->s = kiln_graph_alloc(g, 4);
    memcpy((char *)a->s, "a\0b", 4); /* a string attribute may hold NUL bytes */
    a->s_len = 3;
    a = attr(g, n1, "value", KILN_ATTR_TENSOR);
    a->t = kiln_graph_alloc(g, sizeof *a->t);
    pattern_tensor(a->t, KILN_F32, 2, (int64_t[]){2, 2}, 7);
    a = attr(g, n1, "scales", KILN_ATTR_FLOATS);
    a->n = 3;
    a->floats = kiln_graph_alloc(g, 3 * sizeof(float));
    a->floats[0] = 1.5f, a->floats[1] = -2.0f, a->floats[2] = NAN;
    a = attr(g, n1, "pads", KILN_ATTR_INTS);
    a->n = 4;
    a->ints = kiln_graph_alloc(g, 4 * sizeof(int64_t));
    a->ints[0] = 0, a->ints[1] = 1, a->ints[2] = -1, a->ints[3] = INT64_MAX;
    a = attr(g, n1, "names", KILN_ATTR_STRINGS);
    a->n = 3;
    a->strings = kiln_graph_alloc(g, 3 * sizeof(char *));
    a->strings[0] = kiln_graph_strdup(g, "p"), a->strings[1] = kiln_graph_strdup(g, ""),
    a->strings[2] = kiln_graph_strdup(g, "alpha"); /* shares the string table with the name above */
    a = attr(g, n1, "tensors", KILN_ATTR_TENSORS);
    a->n = 2;
    a->tensors = kiln_graph_alloc(g, 2 * sizeof(kiln_tensor));
    pattern_tensor(&a->tensors[0], KILN_I32, 1, (int64_t[]){3}, 8);
    pattern_tensor(&a->tensors[1], KILN_F64, 2, (int64_t[]){1, 1}, 9);
    attr(g, n1, "no_ints", KILN_ATTR_INTS);
    attr(g, n2, "keepdims", KILN_ATTR_INT)->i = 0;
    return g;
}

/* ---------------------------------------------------------------- comparing */

static bool same_str(const char *a, const char *b) { return !strcmp(a ? a : "", b ? b : ""); }

static bool same_tensor(const kiln_tensor *a, const kiln_tensor *b) {
    if (a->dtype != b->dtype || a->ndim != b->ndim || a->nbytes != b->nbytes) return false;
    for (int d = 0; d < a->ndim; d++)
        if (a->dims[d] != b->dims[d]) return false;
    return a->nbytes == 0 || !memcmp(a->data, b->data, a->nbytes);
}

static bool same_attr(const kiln_attr *a, const kiln_attr *b) {
    if (!same_str(a->name, b->name) || a->type != b->type) return false;
    switch (a->type) {
    case KILN_ATTR_FLOAT: return !memcmp(&a->f, &b->f, sizeof a->f);
    case KILN_ATTR_INT: return a->i == b->i;
    case KILN_ATTR_STRING: return a->s_len == b->s_len && !memcmp(a->s, b->s, a->s_len) && b->s[b->s_len] == 0;
    case KILN_ATTR_TENSOR: return same_tensor(a->t, b->t);
    case KILN_ATTR_FLOATS: return a->n == b->n && (!a->n || !memcmp(a->floats, b->floats, (size_t)a->n * sizeof(float)));
    case KILN_ATTR_INTS: return a->n == b->n && (!a->n || !memcmp(a->ints, b->ints, (size_t)a->n * sizeof(int64_t)));
    case KILN_ATTR_STRINGS:
        if (a->n != b->n) return false;
        for (int e = 0; e < a->n; e++)
            if (!same_str(a->strings[e], b->strings[e])) return false;
        return true;
    case KILN_ATTR_TENSORS:
        if (a->n != b->n) return false;
        for (int e = 0; e < a->n; e++)
            if (!same_tensor(&a->tensors[e], &b->tensors[e])) return false;
        return true;
    default: return false;
    }
}

static bool same_ids(int na, const int *a, int nb, const int *b) {
    return na == nb && (na == 0 || !memcmp(a, b, (size_t)na * sizeof *a));
}

static void compare_graphs(const kiln_graph *a, const kiln_graph *b) {
    CHECK(same_str(a->name, b->name));
    CHECK(same_str(a->producer, b->producer));
    CHECK(a->ir_version == b->ir_version);
    CHECK(a->nopsets == b->nopsets);
    for (int i = 0; i < a->nopsets && i < b->nopsets; i++) {
        CHECK(same_str(a->opsets[i].domain, b->opsets[i].domain));
        CHECK(a->opsets[i].version == b->opsets[i].version);
    }
    CHECK(a->nsymbols == b->nsymbols);
    for (int i = 0; i < a->nsymbols && i < b->nsymbols; i++) CHECK(same_str(a->symbols[i], b->symbols[i]));
    CHECK(a->nvalues == b->nvalues);
    for (int i = 0; i < a->nvalues && i < b->nvalues; i++) {
        const kiln_value *va = &a->values[i], *vb = &b->values[i];
        CHECK(same_str(va->name, vb->name));
        CHECK(va->dtype == vb->dtype);
        CHECK(va->ndim == vb->ndim);
        for (int d = 0; d < va->ndim && va->ndim == vb->ndim; d++)
            CHECK(va->dims[d].value == vb->dims[d].value && va->dims[d].sym == vb->dims[d].sym);
        CHECK(va->producer == vb->producer);
        CHECK(va->is_input == vb->is_input);
        CHECK(va->is_output == vb->is_output);
        CHECK(!va->constant == !vb->constant);
        if (va->constant && vb->constant) CHECK(same_tensor(va->constant, vb->constant));
    }
    CHECK(same_ids(a->ninputs, a->inputs, b->ninputs, b->inputs));
    CHECK(same_ids(a->noutputs, a->outputs, b->noutputs, b->outputs));
    CHECK(a->nnodes == b->nnodes);
    for (int i = 0; i < a->nnodes && i < b->nnodes; i++) {
        const kiln_node *na = &a->nodes[i], *nb = &b->nodes[i];
        CHECK(same_str(na->name, nb->name));
        CHECK(same_str(na->op_type, nb->op_type));
        CHECK(same_str(na->domain, nb->domain));
        CHECK(na->opset == nb->opset);
        CHECK(same_ids(na->ninputs, na->inputs, nb->ninputs, nb->inputs));
        CHECK(same_ids(na->noutputs, na->outputs, nb->noutputs, nb->outputs));
        CHECK(na->nattrs == nb->nattrs);
        for (int k = 0; k < na->nattrs && k < nb->nattrs; k++) {
            if (same_attr(&na->attrs[k], &nb->attrs[k])) continue;
            fprintf(stderr, "node '%s' attribute '%s' differs\n", na->name, na->attrs[k].name);
            failures++;
        }
    }
}

/* ---------------------------------------------------------------- where the data lives */

/* Whether [p, p+n) lies in a read-only mapping of the file `path` (per /proc/self/maps). */
static bool in_readonly_mapping(const void *p, size_t n, const char *path) {
    char real[4096];
    if (!realpath(path, real)) return false;
    FILE *f = fopen("/proc/self/maps", "r");
    if (!f) return false;
    char line[8192];
    bool found = false;
    while (!found && fgets(line, sizeof line, f)) {
        unsigned long lo, hi;
        char perms[8], file[4096] = "";
        if (sscanf(line, "%lx-%lx %7s %*s %*s %*s %4095s", &lo, &hi, perms, file) < 3) continue;
        found = !strcmp(file, real) && perms[1] == '-' && (uintptr_t)p >= lo && (uintptr_t)p + n <= hi;
    }
    fclose(f);
    return found;
}

/* Calls check(t, ctx) on every tensor of g with data. */
static void for_each_tensor(const kiln_graph *g, void (*check)(const kiln_tensor *, const void *), const void *ctx) {
    for (int i = 0; i < g->nvalues; i++)
        if (g->values[i].constant) check(g->values[i].constant, ctx);
    for (int i = 0; i < g->nnodes; i++)
        for (int k = 0; k < g->nodes[i].nattrs; k++) {
            const kiln_attr *a = &g->nodes[i].attrs[k];
            if (a->type == KILN_ATTR_TENSOR) check(a->t, ctx);
            for (int e = 0; a->type == KILN_ATTR_TENSORS && e < a->n; e++) check(&a->tensors[e], ctx);
        }
}

static int tensors_checked;

static void check_mapped(const kiln_tensor *t, const void *path) {
    if (!t->nbytes) return;
    tensors_checked++;
    CHECK((uintptr_t)t->data % 64 == 0);
    CHECK(!t->owned);
    CHECK(in_readonly_mapping(t->data, t->nbytes, path));
}

typedef struct span {
    const uint8_t *p;
    size_t n;
} span;

static void check_in_buffer(const kiln_tensor *t, const void *ctx) {
    const span *s = ctx;
    if (!t->nbytes) return;
    tensors_checked++;
    CHECK((uintptr_t)t->data % 64 == 0);
    CHECK((const uint8_t *)t->data >= s->p && (const uint8_t *)t->data + t->nbytes <= s->p + s->n);
}

/* ---------------------------------------------------------------- helpers */

static uint8_t *read_all(const char *path, size_t *size) {
    FILE *f = fopen(path, "rb");
    if (!f) exit(1);
    fseek(f, 0, SEEK_END);
    *size = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *p = malloc(*size ? *size : 1);
    if (!p || fread(p, 1, *size, f) != *size) exit(1);
    fclose(f);
    return p;
}

static void write_all(const char *path, const uint8_t *p, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(p, 1, n, f) != n || fclose(f) != 0) exit(1);
}

static kiln_engine_meta test_meta(void) {
    kiln_engine_meta m;
    memset(&m, 0, sizeof m);
    snprintf(m.target, sizeof m.target, "cpu");
    snprintf(m.device, sizeof m.device, "test CPU");
    snprintf(m.build_options, sizeof m.build_options, "--target cpu --verbose");
    snprintf(m.source, sizeof m.source, "tiny.onnx");
    m.created_unix = 1700000000;
    return m;
}

/* Gives meta two profiles over g's two inputs (the second leaves input 1 unconstrained) and a
 * precision per node, in g's memory. */
static void add_build_tables(kiln_graph *g, kiln_engine_meta *m) {
    m->nprofiles = 2;
    m->profiles = kiln_graph_alloc(g, 4 * sizeof *m->profiles);
    m->node_precision = kiln_graph_alloc(g, (size_t)g->nnodes);
    if (!m->profiles || !m->node_precision) exit(1);
    memset(m->profiles, 0, 4 * sizeof *m->profiles);
    m->profiles[0] = (kiln_profile_range){3, {1, 3, 1}, {2, 3, 64}, {8, 3, 128}};
    m->profiles[1] = (kiln_profile_range){2, {0, 7}, {5, 7}, {9, 7}};
    m->profiles[2] = (kiln_profile_range){3, {9, 3, 1}, {9, 3, 1}, {16, 3, 512}};
    m->profiles[3].ndim = -1;
    for (int i = 0; i < g->nnodes; i++) m->node_precision[i] = (uint8_t)(i % 3);
}

static void compare_build_tables(const kiln_graph *g, const kiln_engine_meta *a, const kiln_engine_meta *b) {
    CHECK(a->nprofiles == b->nprofiles);
    for (int i = 0; i < a->nprofiles * g->ninputs && a->nprofiles == b->nprofiles; i++) {
        const kiln_profile_range *x = &a->profiles[i], *y = &b->profiles[i];
        CHECK(x->ndim == y->ndim);
        for (int d = 0; d < x->ndim && x->ndim == y->ndim; d++)
            CHECK(x->min[d] == y->min[d] && x->opt[d] == y->opt[d] && x->max[d] == y->max[d]);
    }
    CHECK((a->node_precision == NULL) == (b->node_precision == NULL));
    if (a->node_precision && b->node_precision) CHECK(!memcmp(a->node_precision, b->node_precision, (size_t)g->nnodes));
}

/* Reads an image copied into a heap block of exactly size bytes (so a sanitizer sees any overread). */
static kiln_status read_copy(const uint8_t *img, size_t size, const char *target, kiln_graph **g) {
    uint8_t *copy = malloc(size ? size : 1);
    if (!copy) exit(1);
    if (size) memcpy(copy, img, size);
    kiln_status s = kiln_engine_buffer_read(copy, size, target, g, NULL);
    kiln_graph_free(*g);
    *g = NULL;
    free(copy);
    return s;
}

static char dir[64], path_a[128], path_b[128], path_tmp[128];

/* ---------------------------------------------------------------- tests */

static void test_checksum(void) {
    CHECK(kiln_crc32c("123456789", 9) == 0xE3069283u);
    CHECK(kiln_crc32c(NULL, 0) == 0);
    const char *s = "the quick brown fox jumps over the lazy dog, twice over";
    size_t n = strlen(s);
    for (size_t cut = 0; cut <= n; cut++)
        CHECK(kiln_crc32c_update(kiln_crc32c(s, cut), s + cut, n - cut) == kiln_crc32c(s, n));
    for (size_t cut = 0; cut <= n; cut++)
        CHECK(kiln_crc32c_combine(kiln_crc32c(s, cut), kiln_crc32c(s + cut, n - cut), n - cut) == kiln_crc32c(s, n));
    /* a gather list: empty and odd-sized chunks, and (above 128 MB) parts split across chunks on threads */
    size_t big = ((size_t)136 << 20) + 13;
    unsigned char *p = malloc(big);
    CHECK(p != NULL);
    if (!p) return;
    uint32_t x = 12345;
    for (size_t i = 0; i < big; i++) p[i] = (unsigned char)((x = x * 1103515245u + 12345u) >> 24);
    const void *chunks[5] = {s, NULL, p, s + 7, p + 5};
    size_t sizes[5] = {n, 0, big - 5, 3, 5};
    uint32_t want = kiln_crc32c_update(kiln_crc32c_update(kiln_crc32c(s, n), p, big - 5), s + 7, 3);
    CHECK(kiln_crc32c_gather(chunks, sizes, 5) == kiln_crc32c_update(want, p + 5, 5));
    CHECK(kiln_crc32c_gather(chunks, sizes, 2) == kiln_crc32c(s, n));
    CHECK(kiln_crc32c_gather(NULL, NULL, 0) == 0);
    free(p);
}

static void test_round_trip(void) {
    kiln_graph *g = make_graph();
    kiln_engine_meta meta = test_meta();
    add_build_tables(g, &meta);
    REQUIRE_OK(kiln_engine_file_write(g, &meta, path_a));
    REQUIRE_OK(kiln_engine_file_write(g, &meta, path_b));

    size_t na, nb;
    uint8_t *a = read_all(path_a, &na), *b = read_all(path_b, &nb);
    CHECK(na == nb && !memcmp(a, b, na)); /* the same graph and meta give the same bytes */
    /* the weights at 4096, the graph section after them, ending the file */
    uint64_t wbytes = kiln_le64(a + KILN_EH_SECTIONS + KILN_ES_SIZE + KILN_ES_BYTES);
    CHECK(kiln_le64(a + KILN_EH_SECTIONS + KILN_ES_SIZE + KILN_ES_OFFSET) == KILN_ENGINE_WEIGHTS_ALIGN);
    CHECK(kiln_le64(a + KILN_EH_SECTIONS + KILN_ES_OFFSET) == KILN_ENGINE_WEIGHTS_ALIGN + wbytes);
    CHECK(KILN_ENGINE_WEIGHTS_ALIGN + wbytes + kiln_le64(a + KILN_EH_SECTIONS + KILN_ES_BYTES) == na);
    free(b);

    kiln_graph *r;
    kiln_engine_meta got;
    REQUIRE_OK(kiln_engine_file_read(path_a, "cpu", &r, &got));
    compare_graphs(g, r);
    CHECK(!strcmp(got.kiln_version, KILN_VERSION_STRING));
    CHECK(!strcmp(got.target, "cpu") && !strcmp(got.device, "test CPU"));
    CHECK(!strcmp(got.build_options, meta.build_options) && !strcmp(got.source, "tiny.onnx"));
    CHECK(got.created_unix == 1700000000);
    CHECK(got.graph_bytes > 0 && got.weights_bytes > 0);
    compare_build_tables(g, &meta, &got);
    CHECK(KILN_ENGINE_HEADER_SIZE + got.graph_bytes <= na && got.weights_bytes < na);
    tensors_checked = 0;
    for_each_tensor(r, check_mapped, path_a);
    CHECK(tensors_checked == 8); /* 5 non-empty constants, 1 TENSOR, 2 TENSORS */
    kiln_graph_free(r);

    /* From a caller's buffer: views point into it. */
    uint8_t *buf = aligned_alloc(4096, (na + 4095) & ~(size_t)4095);
    memcpy(buf, a, na);
    REQUIRE_OK(kiln_engine_buffer_read(buf, na, NULL, &r, NULL));
    compare_graphs(g, r);
    tensors_checked = 0;
    for_each_tensor(r, check_in_buffer, &(span){buf, na});
    CHECK(tensors_checked == 8);
    kiln_graph_free(r);
    free(buf);
    free(a);
    kiln_graph_free(g);
}

/* Weights stored in a 16-bit engine's precision: float32 values whose constants hold fp16 and bf16
 * data come back with the value's dtype float32 and the constant's dtype and bytes as written, half
 * the weight bytes of the same graph in float32. */
static void test_16bit_weights(void) {
    size_t sizes[2];
    for (int half = 0; half < 2; half++) {
        kiln_graph *g = kiln_graph_create();
        int64_t dims[2] = {64, 32};
        int ids[2];
        for (int k = 0; k < 2; k++) {
            kiln_tensor t;
            pattern_tensor(&t, half ? (k ? KILN_BF16 : KILN_F16) : KILN_F32, 2, dims, k + 1);
            REQUIRE_OK(kiln_graph_value(g, k ? "w_bf16" : "w_fp16", &ids[k]));
            REQUIRE_OK(kiln_graph_set_constant(g, ids[k], &t));
            g->values[ids[k]].dtype = KILN_F32; /* the declared dtype stays */
        }
        kiln_engine_meta meta = test_meta();
        meta.precision = half ? KILN_PRECISION_FP16 : KILN_PRECISION_FP32;
        REQUIRE_OK(kiln_engine_file_write(g, &meta, path_tmp));
        free(read_all(path_tmp, &sizes[half]));
        kiln_graph *r;
        REQUIRE_OK(kiln_engine_file_read(path_tmp, NULL, &r, NULL));
        for (int k = 0; k < 2; k++) {
            const kiln_value *v = &r->values[ids[k]];
            CHECK(v->dtype == KILN_F32 && v->constant);
            if (v->constant) CHECK(same_tensor(v->constant, g->values[ids[k]].constant));
        }
        kiln_graph_free(r);
        kiln_graph_free(g);
    }
    /* 2 x 64 x 32 weights: 16 KiB in float32, 8 KiB in 16 bits */
    CHECK(sizes[0] - sizes[1] == 2 * 64 * 32 * 2);
}

static void test_empty_graph(void) {
    kiln_graph *g = kiln_graph_create(), *r;
    kiln_engine_meta meta = test_meta();
    REQUIRE_OK(kiln_engine_file_write(g, &meta, path_tmp));
    size_t n;
    free(read_all(path_tmp, &n));
    CHECK(n > KILN_ENGINE_WEIGHTS_ALIGN); /* header, padding, no weights, the graph section */
    REQUIRE_OK(kiln_engine_file_read(path_tmp, NULL, &r, NULL));
    compare_graphs(g, r);
    kiln_graph_free(r);
    kiln_graph_free(g);
}

/* What reading a damaged file may return: it loads, or it is refused as malformed or mismatched. */
static bool clean_status(kiln_status s) {
    return s == KILN_OK || s == KILN_ERR_PARSE || s == KILN_ERR_ENGINE_MISMATCH;
}

/* Every truncation and every single-byte flip fails cleanly; flips whose checksums are recomputed
 * (so they reach the structural checks) fail cleanly or load. */
static void test_corruption(void) {
    size_t n;
    uint8_t *img = read_all(path_a, &n);
    kiln_graph *g = NULL;
    int bad = 0;
    for (size_t len = 0; len < n; len++) {
        kiln_status s = read_copy(img, len, NULL, &g);
        if (s != KILN_ERR_PARSE) {
            if (bad++ < 5) fprintf(stderr, "truncated to %zu bytes: %s %s\n", len, kiln_status_name(s), kiln_last_error());
        }
    }
    CHECK(bad == 0);
    printf("  %zu truncations: all rejected\n", n);

    uint8_t *mut = malloc(n);
    int mismatch = 0, resealed_ok = 0, resealed_err = 0;
    bad = 0;
    for (size_t off = 0; off < n; off++) {
        memcpy(mut, img, n);
        mut[off] ^= 0xFF;
        kiln_status s = read_copy(mut, n, NULL, &g);
        if (s == KILN_ERR_ENGINE_MISMATCH) mismatch++;
        else if (s != KILN_ERR_PARSE && bad++ < 5)
            fprintf(stderr, "byte %zu flipped: %s %s\n", off, kiln_status_name(s), kiln_last_error());
        kiln_engine_reseal(mut, n);
        s = read_copy(mut, n, NULL, &g);
        if (s == KILN_OK) resealed_ok++;
        else resealed_err++;
        if (!clean_status(s) && bad++ < 5)
            fprintf(stderr, "byte %zu flipped, resealed: %s %s\n", off, kiln_status_name(s), kiln_last_error());
    }
    CHECK(bad == 0);
    CHECK(mismatch == 4); /* the four bytes of the format version */
    printf("  %zu single-byte flips: all rejected (%d as a version mismatch); resealed: %d load, %d rejected\n", n,
           mismatch, resealed_ok, resealed_err);

    /* Resealed small edits across the graph section, where counts, ids and lengths live. */
    uint64_t gstart = kiln_le64(img + KILN_EH_SECTIONS + KILN_ES_OFFSET);
    uint64_t gend = gstart + kiln_le64(img + KILN_EH_SECTIONS + KILN_ES_BYTES);
    int edits = 0;
    for (size_t off = (size_t)gstart; off < gend; off++)
        for (int delta = 1; delta <= 3; delta++, edits++) {
            memcpy(mut, img, n);
            mut[off] = (uint8_t)(delta == 3 ? 0x80 : mut[off] + (delta == 1 ? 1 : -1));
            kiln_engine_reseal(mut, n);
            kiln_status s = read_copy(mut, n, NULL, &g);
            if (!clean_status(s) && bad++ < 5)
                fprintf(stderr, "byte %zu edited, resealed: %s %s\n", off, kiln_status_name(s), kiln_last_error());
        }
    CHECK(bad == 0);
    printf("  %d resealed graph-section edits: no crash\n", edits);
    free(mut);
    free(img);
}

static void test_messages(void) {
    size_t n;
    uint8_t *img = read_all(path_a, &n), *mut = malloc(n + 1);
    kiln_graph *g = NULL;
    kiln_engine_meta meta;

    memcpy(mut, img, n);
    mut[0] = 'X';
    CHECK_ERROR(read_copy(mut, n, NULL, &g), KILN_ERR_PARSE, "not a kiln engine file", NULL);
    CHECK_ERROR(read_copy((const uint8_t *)"KILN", 4, NULL, &g), KILN_ERR_PARSE, "truncated", NULL);
    CHECK_ERROR(read_copy(img, 100, NULL, &g), KILN_ERR_PARSE, "truncated", NULL);

    memcpy(mut, img, n);
    kiln_put_le32(mut + KILN_EH_FORMAT_VERSION, 2); /* before the engine kind */
    CHECK_ERROR(read_copy(mut, n, NULL, &g), KILN_ERR_ENGINE_MISMATCH, "engine format version 2, this kiln reads 7",
                "rebuild it");
    kiln_put_le32(mut + KILN_EH_FORMAT_VERSION, 3); /* fp32 weights in 16-bit engines, one tactic set */
    CHECK_ERROR(read_copy(mut, n, NULL, &g), KILN_ERR_ENGINE_MISMATCH, "engine format version 3, this kiln reads 7",
                "rebuild it with `kiln build MODEL.onnx -o ENGINE.kiln`");
    kiln_put_le32(mut + KILN_EH_FORMAT_VERSION, 4); /* LLM engines without the model family */
    CHECK_ERROR(read_copy(mut, n, NULL, &g), KILN_ERR_ENGINE_MISMATCH, "engine format version 4, this kiln reads 7",
                "rebuild it with `kiln build MODEL.onnx -o ENGINE.kiln`");
    kiln_put_le32(mut + KILN_EH_FORMAT_VERSION, 5); /* neither packed cpu weights nor INT8 LLM engines */
    CHECK_ERROR(read_copy(mut, n, NULL, &g), KILN_ERR_ENGINE_MISMATCH, "engine format version 5, this kiln reads 7",
                "rebuild it with `kiln build MODEL.onnx -o ENGINE.kiln`");
    kiln_put_le32(mut + KILN_EH_FORMAT_VERSION, 6); /* the weights section after the graph section */
    CHECK_ERROR(read_copy(mut, n, NULL, &g), KILN_ERR_ENGINE_MISMATCH, "engine format version 6, this kiln reads 7",
                "rebuild it with `kiln build MODEL.onnx -o ENGINE.kiln`");
    kiln_put_le32(mut + KILN_EH_FORMAT_VERSION, 8);
    CHECK_ERROR(read_copy(mut, n, NULL, &g), KILN_ERR_ENGINE_MISMATCH, "engine format version 8, this kiln reads 7",
                "rebuild it with `kiln build MODEL.onnx -o ENGINE.kiln`");
    write_all(path_tmp, mut, n);
    CHECK_ERROR(kiln_engine_file_read(path_tmp, NULL, &g, NULL), KILN_ERR_ENGINE_MISMATCH, "engine format version 8",
                path_tmp);
    memcpy(mut, img, n); /* an engine that says it is an LLM one */
    kiln_put_le32(mut + KILN_EH_KIND, KILN_ENGINE_KIND_LLM);
    kiln_engine_reseal(mut, n);
    CHECK_ERROR(read_copy(mut, n, NULL, &g), KILN_ERR_ENGINE_MISMATCH, "an LLM engine", "use kiln generate");

    CHECK_ERROR(kiln_engine_file_read(path_a, "cuda", &g, &meta), KILN_ERR_ENGINE_MISMATCH,
                "built for target 'cpu'", "rebuild it with `kiln build tiny.onnx -o ");
    CHECK(!strcmp(meta.target, "cpu") && !strcmp(meta.source, "tiny.onnx"));

    memcpy(mut, img, n);
    mut[n - 1] ^= 1; /* the graph section ends the file */
    CHECK_ERROR(read_copy(mut, n, NULL, &g), KILN_ERR_PARSE, "engine file is corrupted: checksum of section graph does not match", NULL);
    memcpy(mut, img, n);
    mut[KILN_ENGINE_WEIGHTS_ALIGN + 10] ^= 1;
    CHECK_ERROR(read_copy(mut, n, NULL, &g), KILN_ERR_PARSE, "checksum of section weights does not match", NULL);
    memcpy(mut, img, n);
    mut[KILN_ENGINE_HEADER_SIZE + 10] ^= 1;
    CHECK_ERROR(read_copy(mut, n, NULL, &g), KILN_ERR_PARSE, "the padding before the weights section is not zero", NULL);
    memcpy(mut, img, n);
    mut[KILN_EH_DEVICE] ^= 1;
    CHECK_ERROR(read_copy(mut, n, NULL, &g), KILN_ERR_PARSE, "checksum of the header does not match", NULL);
    memcpy(mut, img, n);
    mut[n] = 0;
    CHECK_ERROR(read_copy(mut, n + 1, NULL, &g), KILN_ERR_PARSE, "the header says", NULL);

    kiln_graph *src = make_graph();
    kiln_engine_meta m = test_meta();
    unlink(path_tmp); /* written by hand above and read as an input: kiln would not replace it */
    const char *versions[] = {"0.2.0", "1.1.0", "0.0.9"};
    for (int i = 0; i < 3; i++) {
        snprintf(m.kiln_version, sizeof m.kiln_version, "%s", versions[i]);
        REQUIRE_OK(kiln_engine_file_write(src, &m, path_tmp));
        char want[64];
        snprintf(want, sizeof want, "engine built by kiln %s, this is kiln %s", versions[i], KILN_VERSION_STRING);
        CHECK_ERROR(kiln_engine_file_read(path_tmp, NULL, &g, &meta), KILN_ERR_ENGINE_MISMATCH, want, "kiln build tiny.onnx");
        CHECK(!strcmp(meta.kiln_version, versions[i]));
    }
    snprintf(m.kiln_version, sizeof m.kiln_version, "0.1.7"); /* another patch release reads it */
    REQUIRE_OK(kiln_engine_file_write(src, &m, path_tmp));
    REQUIRE_OK(kiln_engine_file_read(path_tmp, "cpu", &g, NULL));
    kiln_graph_free(g);
    kiln_graph_free(src);

    CHECK_ERROR(kiln_engine_file_read("/nonexistent/dir/x.kiln", NULL, &g, NULL), KILN_ERR_IO, "x.kiln", NULL);
    free(mut);
    free(img);
}

/* ---- engine images built by hand from docs/engine-format.md, independently of the writer ---- */

typedef struct bytes {
    uint8_t *p;
    size_t n;
} bytes;

static void put(bytes *b, const void *src, size_t n) {
    b->p = realloc(b->p, b->n + n);
    if (!b->p) exit(1);
    memcpy(b->p + b->n, src, n);
    b->n += n;
}
static void put32(bytes *b, uint32_t v) {
    uint8_t t[4];
    kiln_put_le32(t, v);
    put(b, t, 4);
}
static void put64(bytes *b, uint64_t v) {
    uint8_t t[8];
    kiln_put_le64(t, v);
    put(b, t, 8);
}

/* A whole file around a graph section and weights: header fields as the doc lists them, the
 * section table, zero padding to 4096, the weights, the graph section, checksums. */
static bytes image_around(const bytes *graph, const void *weights, size_t nweights) {
    bytes img = {0};
    uint8_t h[KILN_ENGINE_HEADER_SIZE] = {0};
    put(&img, h, sizeof h);
    size_t wat = 4096;
    while (img.n < wat) put(&img, "", 1);
    put(&img, weights, nweights);
    size_t gat = img.n;
    put(&img, graph->p, graph->n);
    memcpy(img.p, "KILNENG1", 8);
    kiln_put_le32(img.p + 8, KILN_ENGINE_FORMAT_VERSION);
    kiln_put_le32(img.p + 12, 1280);
    kiln_put_le64(img.p + 16, img.n);
    kiln_put_le64(img.p + 24, 1234);
    kiln_put_le32(img.p + 32, 2);
    memcpy(img.p + 64, KILN_VERSION_STRING, strlen(KILN_VERSION_STRING));
    memcpy(img.p + 96, "cpu", 3);
    kiln_put_le32(img.p + 1008, 1);
    kiln_put_le64(img.p + 1008 + 8, gat);
    kiln_put_le64(img.p + 1008 + 16, graph->n);
    kiln_put_le32(img.p + 1032, 2);
    kiln_put_le64(img.p + 1032 + 8, wat);
    kiln_put_le64(img.p + 1032 + 16, nweights);
    kiln_engine_reseal(img.p, img.n);
    return img;
}

/* y = Add(x, w) with x: float32[n] (symbol n), w: float32[1] = {1.5}. extra_opsets more opset
 * imports all naming the long string (string 8, long_len bytes). */
static bytes hand_graph(uint32_t long_len, uint32_t extra_opsets) {
    const char *strs[] = {"g", "", "n", "x", "w", "y", "Add", "add0"};
    bytes b = {0};
    put32(&b, 9);
    for (int i = 0; i < 8; i++) {
        put32(&b, (uint32_t)strlen(strs[i]));
        put(&b, strs[i], strlen(strs[i]) + 1);
    }
    put32(&b, long_len);
    for (uint32_t i = 0; i <= long_len; i++) put(&b, i < long_len ? "L" : "", 1);
    put32(&b, 0), put32(&b, 1), put64(&b, 8);             /* graph name, producer, ir_version */
    put32(&b, 1 + extra_opsets), put32(&b, 1), put64(&b, 13); /* opsets */
    for (uint32_t i = 0; i < extra_opsets; i++) put32(&b, 8), put64(&b, 1);
    put32(&b, 1), put32(&b, 2);                           /* symbols: "n" */
    put32(&b, 1), put32(&b, KILN_F32), put32(&b, 1), put64(&b, 1), put64(&b, 0), put64(&b, 4); /* tensors */
    put32(&b, 3);                                          /* values */
    put32(&b, 3), put32(&b, KILN_F32), put32(&b, 1), put32(&b, KILN_EV_INPUT), put64(&b, UINT64_MAX), put32(&b, 1);
    put32(&b, 4), put32(&b, KILN_F32), put32(&b, 1), put32(&b, KILN_EV_CONSTANT), put64(&b, 1), put32(&b, 0);
    put32(&b, 0);                                          /* w's tensor id */
    put32(&b, 5), put32(&b, KILN_F32), put32(&b, 1), put32(&b, KILN_EV_OUTPUT), put64(&b, UINT64_MAX), put32(&b, 1);
    put32(&b, 1), put32(&b, 0);                            /* inputs */
    put32(&b, 1), put32(&b, 2);                            /* outputs */
    put32(&b, 1);                                          /* nodes */
    put32(&b, 7), put32(&b, 6), put32(&b, 1), put32(&b, 13);
    put32(&b, 2), put32(&b, 0), put32(&b, 1), put32(&b, 1), put32(&b, 2), put32(&b, 0);
    return b;
}

/* Appends the profile, precision and (empty) tactics tables to a hand_graph: variant 0 none, 1 one
 * profile (x: 1..8, opt 4) and one precision (fp16); 2.. one defect each. */
static void hand_tables(bytes *b, int variant) {
    if (variant == 0) {
        put32(b, 0), put32(b, 0), put32(b, 0);
        return;
    }
    int64_t lo = variant == 2 ? 5 : 1;
    put32(b, 1), put32(b, variant == 5 ? 2 : 1), put64(b, (uint64_t)lo), put64(b, 4), put64(b, 8);
    if (variant == 5) put64(b, 1), put64(b, 1), put64(b, 1);
    put32(b, variant == 3 ? 2 : 1), put(b, variant == 4 ? "\x07" : "\x01", 1);
    if (variant == 3) put(b, "\x00", 1);
    put32(b, 0);
}

static void test_hand_built(void) {
    float w = 1.5f;
    bytes graph = hand_graph(3, 0);
    hand_tables(&graph, 0);
    bytes img = image_around(&graph, &w, 4);
    kiln_graph *g = NULL;
    kiln_engine_meta meta;
    uint8_t *buf = aligned_alloc(4096, (img.n + 4095) / 4096 * 4096);
    memcpy(buf, img.p, img.n);
    REQUIRE_OK(kiln_engine_buffer_read(buf, img.n, "cpu", &g, &meta));
    CHECK(g->nvalues == 3 && g->nnodes == 1 && g->nsymbols == 1 && !strcmp(g->symbols[0], "n"));
    CHECK(!strcmp(g->values[0].name, "x") && g->values[0].is_input && g->values[0].dims[0].sym == 1);
    CHECK(g->values[1].constant && g->values[1].constant->data == buf + 4096);
    CHECK(*(const float *)g->values[1].constant->data == 1.5f);
    CHECK(g->values[2].is_output && g->values[2].producer == 0);
    CHECK(!strcmp(g->nodes[0].op_type, "Add") && !strcmp(g->nodes[0].name, "add0") && g->nodes[0].opset == 13);
    CHECK(g->nopsets == 1 && g->opsets[0].version == 13 && meta.created_unix == 1234);
    CHECK(meta.nprofiles == 0 && !meta.profiles && !meta.node_precision);
    kiln_graph_free(g);
    free(buf);
    free(img.p);
    free(graph.p);

    /* Profiles and precisions: one valid, then one defect each, refused naming it. */
    static const char *const defects[] = {NULL, NULL, "are not ordered", "2 node precisions for 1 nodes",
                                          "has precision 7", "gives input 'x' rank 2"};
    for (int v = 1; v <= 5; v++) {
        graph = hand_graph(3, 0);
        hand_tables(&graph, v);
        img = image_around(&graph, &w, 4);
        buf = aligned_alloc(4096, (img.n + 4095) / 4096 * 4096);
        memcpy(buf, img.p, img.n);
        kiln_status s = kiln_engine_buffer_read(buf, img.n, NULL, &g, &meta);
        if (v == 1) {
            CHECK(s == KILN_OK);
            if (s == KILN_OK) {
                CHECK(meta.nprofiles == 1 && meta.profiles[0].ndim == 1 && meta.profiles[0].min[0] == 1 &&
                      meta.profiles[0].opt[0] == 4 && meta.profiles[0].max[0] == 8);
                CHECK(meta.node_precision && meta.node_precision[0] == KILN_PRECISION_FP16);
            }
        } else {
            CHECK_ERROR(s, KILN_ERR_PARSE, "engine file is corrupted", defects[v]);
            CHECK(!meta.profiles && !meta.node_precision);
        }
        kiln_graph_free(g);
        g = NULL;
        free(buf);
        free(img.p);
        free(graph.p);
    }

    /* A long string named by many records would make the loader copy far more than the file holds. */
    graph = hand_graph(100000, 1000);
    img = image_around(&graph, &w, 4);
    CHECK_ERROR(read_copy(img.p, img.n, NULL, &g), KILN_ERR_PARSE, "strings are referenced more than", NULL);
    free(img.p);
    free(graph.p);
}

/* An engine file begun before the graph's metadata is final (kiln_engine_out, as a build given its
 * output path does): finished, it holds the bytes a plain write gives, and the file at its path stays
 * as it was until then; freed unfinished, it leaves the file as it was and no temporary; a constant
 * whose data moved after the begin is written as it is at the finish. */
static void test_begun_file(void) {
    kiln_graph *g = make_graph();
    kiln_engine_meta meta = test_meta();
    add_build_tables(g, &meta);
    REQUIRE_OK(kiln_engine_file_write(g, &meta, path_b));
    size_t nb, n;
    uint8_t *b = read_all(path_b, &nb), *cur;
    write_all(path_tmp, (const uint8_t *)"old", 3);
    char tmp[600];
    snprintf(tmp, sizeof tmp, "%s.kiln.tmp%d", path_tmp, (int)getpid());

    kiln_engine_out *o = NULL;
    REQUIRE_OK(kiln_engine_out_begin(g, path_tmp, &o));
    CHECK(kiln_engine_out_pending(o, path_tmp) && !kiln_engine_out_pending(o, path_b));
    cur = read_all(path_tmp, &n);
    CHECK(n == 3 && !memcmp(cur, "old", 3) && access(tmp, F_OK) == 0);
    free(cur);
    REQUIRE_OK(kiln_engine_out_finish(o, g, &meta));
    CHECK(!kiln_engine_out_pending(o, path_tmp));
    kiln_engine_out_free(o);
    cur = read_all(path_tmp, &n);
    CHECK(n == nb && !memcmp(cur, b, n) && access(tmp, F_OK) != 0);
    free(cur);

    write_all(path_tmp, (const uint8_t *)"old", 3);
    REQUIRE_OK(kiln_engine_out_begin(g, path_tmp, &o));
    kiln_engine_out_free(o);
    kiln_engine_out_free(NULL);
    cur = read_all(path_tmp, &n);
    CHECK(n == 3 && !memcmp(cur, "old", 3) && access(tmp, F_OK) != 0);
    free(cur);

    kiln_tensor *w = NULL;
    for (int i = 0; i < g->nvalues; i++)
        if (!strcmp(g->values[i].name, "w")) w = g->values[i].constant;
    if (!w || w->nbytes != 12 * sizeof(float)) {
        CHECK(!"constant w of 3 x 4 floats");
        exit(1);
    }
    REQUIRE_OK(kiln_engine_out_begin(g, path_tmp, &o));
    float moved[12];
    for (int i = 0; i < 12; i++) moved[i] = (float)i + 0.5f;
    void *kept = w->data;
    w->data = moved;
    REQUIRE_OK(kiln_engine_out_finish(o, g, &meta));
    kiln_engine_out_free(o);
    kiln_graph *r;
    REQUIRE_OK(kiln_engine_file_read(path_tmp, NULL, &r, NULL));
    compare_graphs(g, r);
    w->data = kept;
    kiln_graph_free(r);
    kiln_graph_free(g);
    free(b);
}

/* What the format cannot hold is refused, naming node and attribute, and no file is left behind. */
static void test_unsupported(void) {
    const kiln_attr_type kinds[] = {KILN_ATTR_GRAPH, KILN_ATTR_GRAPHS, KILN_ATTR_SPARSE_TENSOR, KILN_ATTR_TYPE_PROTO};
    kiln_engine_meta meta = test_meta();
    for (int i = 0; i < 4; i++) {
        kiln_graph *g = make_graph();
        attr(g, 1, "then_branch", kinds[i]);
        unlink(path_tmp);
        CHECK_ERROR(kiln_engine_file_write(g, &meta, path_tmp), KILN_ERR_UNSUPPORTED, "node 'custom'", "'then_branch'");
        CHECK(access(path_tmp, F_OK) != 0);
        kiln_graph_free(g);
    }
    kiln_graph *g = make_graph();
    int id;
    REQUIRE_OK(kiln_graph_value(g, "labels", &id));
    kiln_tensor t;
    kiln_tensor_view(&t, KILN_STRING, 1, (int64_t[]){2}, NULL);
    REQUIRE_OK(kiln_graph_set_constant(g, id, &t));
    CHECK_ERROR(kiln_engine_file_write(g, &meta, path_tmp), KILN_ERR_UNSUPPORTED, "'labels'", "string");
    kiln_graph_free(g);

    g = make_graph();
    meta.target[0] = 0;
    CHECK_ERROR(kiln_engine_file_write(g, &meta, path_tmp), KILN_ERR_INVALID_ARGUMENT, "target", NULL);
    kiln_graph_free(g);
}

/* `test_engine_format --write-seeds DIR` writes the fuzzer's seed engines (fuzz/corpus/fuzz_engine/;
 * named .seed, not .kiln, which .gitignore leaves out). */
static int write_seeds(const char *seed_dir) {
    char path[4096];
    kiln_engine_meta meta = test_meta();
    kiln_graph *g = make_graph();
    add_build_tables(g, &meta);
    snprintf(path, sizeof path, "%s/full.seed", seed_dir);
    REQUIRE_OK(kiln_engine_file_write(g, &meta, path));
    kiln_graph_free(g);
    g = kiln_graph_create();
    meta = test_meta(); /* no profiles: the empty graph has no inputs */
    snprintf(path, sizeof path, "%s/empty.seed", seed_dir);
    REQUIRE_OK(kiln_engine_file_write(g, &meta, path));
    kiln_graph_free(g);
    return 0;
}

int main(int argc, char **argv) {
    kiln_log_set_level(KILN_LOG_ERROR);
    if (argc == 3 && !strcmp(argv[1], "--write-seeds")) return write_seeds(argv[2]);
    const char *tmp = getenv("TMPDIR");
    snprintf(dir, sizeof dir, "%.40s/kiln_engine_XXXXXX", tmp && tmp[0] && strlen(tmp) < 40 ? tmp : "/tmp");
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        return 1;
    }
    snprintf(path_a, sizeof path_a, "%s/a.kiln", dir);
    snprintf(path_b, sizeof path_b, "%s/b.kiln", dir);
    snprintf(path_tmp, sizeof path_tmp, "%s/tmp.kiln", dir);

    test_checksum();
    test_round_trip();
    test_16bit_weights();
    test_empty_graph();
    test_corruption();
    test_messages();
    test_hand_built();
    test_begun_file();
    test_unsupported();

    unlink(path_a);
    unlink(path_b);
    unlink(path_tmp);
    rmdir(dir);
    return checks_report("test_engine_format");
}
