/* cse.c — common-subexpression elimination: constants with identical contents (up to 64 KiB each)
 * become one value, then a node that repeats an earlier node (same op, domain, opset, inputs and
 * attributes, compared by value including tensor attributes) is dropped and its readers read the
 * earlier node's outputs. Ops that draw random numbers are never merged; nodes with subgraph
 * attributes never compare equal. */
#include "passes/passes.h"

#include "core/log.h"
#include "core/status.h"
#include "passes/pass_util.h"

#include <stdlib.h>
#include <string.h>

#define CSE_CONST_MAX_BYTES (64u * 1024u)

static uint64_t fnv(uint64_t h, const void *data, size_t len) {
    const unsigned char *p = data;
    for (size_t i = 0; i < len; i++) h = (h ^ p[i]) * 1099511628211ull;
    return h;
}

static bool tensor_equal(const kiln_tensor *a, const kiln_tensor *b) {
    if (a->dtype != b->dtype || a->ndim != b->ndim || a->nbytes != b->nbytes) return false;
    if (memcmp(a->dims, b->dims, (size_t)a->ndim * sizeof *a->dims)) return false;
    return a->nbytes == 0 || !memcmp(a->data, b->data, a->nbytes);
}

static bool attr_equal(const kiln_attr *a, const kiln_attr *b) {
    if (a->type != b->type || strcmp(a->name, b->name)) return false;
    switch (a->type) {
    case KILN_ATTR_FLOAT: return !memcmp(&a->f, &b->f, sizeof a->f); /* bitwise: NaN == NaN, 0 != -0 */
    case KILN_ATTR_INT: return a->i == b->i;
    case KILN_ATTR_STRING: return a->s_len == b->s_len && (!a->s_len || !memcmp(a->s, b->s, a->s_len));
    case KILN_ATTR_TENSOR: return a->t && b->t && tensor_equal(a->t, b->t);
    case KILN_ATTR_FLOATS: return a->n == b->n && (!a->n || !memcmp(a->floats, b->floats, sizeof *a->floats * (size_t)a->n));
    case KILN_ATTR_INTS: return a->n == b->n && (!a->n || !memcmp(a->ints, b->ints, sizeof *a->ints * (size_t)a->n));
    case KILN_ATTR_STRINGS:
        if (a->n != b->n) return false;
        for (int k = 0; k < a->n; k++)
            if (strcmp(a->strings[k], b->strings[k])) return false;
        return true;
    case KILN_ATTR_TENSORS:
        if (a->n != b->n) return false;
        for (int k = 0; k < a->n; k++)
            if (!tensor_equal(&a->tensors[k], &b->tensors[k])) return false;
        return true;
    default: return false; /* subgraphs and the rest: never provably equal */
    }
}

/* Same attribute set with equal values (names are unique per node). */
static bool attrs_equal(const kiln_node *a, const kiln_node *b) {
    if (a->nattrs != b->nattrs) return false;
    for (int i = 0; i < a->nattrs; i++) {
        const kiln_attr *m = kiln_node_attr(b, a->attrs[i].name);
        if (!m || !attr_equal(&a->attrs[i], m)) return false;
    }
    return true;
}

static bool is_random(const kiln_node *n) {
    static const char *const ops[] = {"RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike",
                                      "Multinomial", "Bernoulli"};
    for (size_t i = 0; i < sizeof ops / sizeof *ops; i++)
        if (!strcmp(n->op_type, ops[i])) return true;
    return false;
}

static uint64_t node_hash(const kiln_node *n) {
    uint64_t h = fnv(1469598103934665603ull, n->op_type, strlen(n->op_type));
    h = fnv(h, n->domain, strlen(n->domain));
    h = fnv(h, &n->ninputs, sizeof n->ninputs);
    return fnv(h, n->inputs, sizeof *n->inputs * (size_t)n->ninputs);
}

/* Whether node b computes exactly what node a computes (and a produces every output b has). */
static bool same_node(const kiln_node *a, const kiln_node *b) {
    if (strcmp(a->op_type, b->op_type) || strcmp(a->domain, b->domain) || a->opset != b->opset) return false;
    if (a->ninputs != b->ninputs || a->noutputs != b->noutputs) return false;
    if (memcmp(a->inputs, b->inputs, sizeof *a->inputs * (size_t)a->ninputs)) return false;
    for (int k = 0; k < b->noutputs; k++)
        if (b->outputs[k] >= 0 && a->outputs[k] < 0) return false;
    return attrs_equal(a, b);
}

/* An open-addressing table of ids keyed by a 64-bit hash. */
typedef struct cse_table {
    int *ids;
    uint64_t *keys;
    size_t cap;
} cse_table;

static kiln_status table_init(cse_table *t, int count) {
    t->cap = 64;
    while (t->cap < (size_t)count * 2 + 2) t->cap *= 2;
    t->ids = malloc(t->cap * sizeof *t->ids);
    t->keys = malloc(t->cap * sizeof *t->keys);
    if (!t->ids || !t->keys) {
        free(t->ids);
        free(t->keys);
        return kiln_error(KILN_ERR_OUT_OF_MEMORY, "cse: out of memory");
    }
    for (size_t i = 0; i < t->cap; i++) t->ids[i] = -1;
    return KILN_OK;
}

static void table_free(cse_table *t) {
    free(t->ids);
    free(t->keys);
}

/* Merges constants of equal contents into the first of them; returns how many were merged. */
static kiln_status merge_constants(pass_ctx *c, int *merged) {
    kiln_graph *g = c->g;
    cse_table t;
    *merged = 0;
    KILN_TRY(table_init(&t, g->nvalues));
    for (int v = 0; v < g->nvalues; v++) {
        const kiln_tensor *ct = g->values[v].constant;
        if (!ct || ct->nbytes > CSE_CONST_MAX_BYTES || g->values[v].is_output || pass_uses(c, v) == 0) continue;
        uint64_t h = fnv(fnv(fnv(1469598103934665603ull, &ct->dtype, sizeof ct->dtype), ct->dims,
                             sizeof *ct->dims * (size_t)ct->ndim), ct->data, ct->nbytes);
        size_t slot = h & (t.cap - 1);
        bool dup = false;
        for (; t.ids[slot] >= 0; slot = (slot + 1) & (t.cap - 1))
            if (t.keys[slot] == h && tensor_equal(g->values[t.ids[slot]].constant, ct)) {
                pass_replace_uses(c, v, t.ids[slot]);
                (*merged)++;
                dup = true;
                break;
            }
        if (!dup) {
            t.ids[slot] = v;
            t.keys[slot] = h;
        }
    }
    table_free(&t);
    return KILN_OK;
}

/* Drops nodes that repeat an earlier node. */
static kiln_status merge_nodes(pass_ctx *c) {
    kiln_graph *g = c->g;
    cse_table t;
    KILN_TRY(table_init(&t, g->nnodes));
    for (int i = 0; i < g->nnodes; i++) {
        kiln_node *n = &g->nodes[i];
        if (!pass_alive(n) || n->ninputs == 0 || is_random(n)) continue;
        uint64_t h = node_hash(n);
        size_t slot = h & (t.cap - 1);
        int found = -1;
        for (; t.ids[slot] >= 0; slot = (slot + 1) & (t.cap - 1))
            if (t.keys[slot] == h && same_node(&g->nodes[t.ids[slot]], n)) {
                found = t.ids[slot];
                break;
            }
        if (found < 0) {
            t.ids[slot] = i;
            t.keys[slot] = h;
            continue;
        }
        bool feeds_output = false;
        for (int k = 0; k < n->noutputs; k++) feeds_output |= n->outputs[k] >= 0 && g->values[n->outputs[k]].is_output;
        if (feeds_output) continue;
        const kiln_node *first = &g->nodes[found];
        KILN_LOG(KILN_LOG_VERBOSE, "cse: %s '%s' repeats %s '%s'; its readers use '%s'", n->op_type, n->name,
                 first->op_type, first->name, first->name);
        for (int k = 0; k < n->noutputs; k++)
            if (n->outputs[k] >= 0) pass_replace_uses(c, n->outputs[k], first->outputs[k]);
        pass_detach(c, i);
        c->changes++;
    }
    table_free(&t);
    return KILN_OK;
}

kiln_status kiln_pass_cse(kiln_graph *g, bool *changed) {
    pass_ctx c;
    KILN_TRY(pass_begin(&c, g, "cse"));
    int merged = 0;
    kiln_status st = merge_constants(&c, &merged);
    if (st == KILN_OK && merged) {
        KILN_LOG(KILN_LOG_VERBOSE, "cse: %d constant%s repeat%s an earlier one and %s merged", merged,
                 merged > 1 ? "s" : "", merged > 1 ? "" : "s", merged > 1 ? "were" : "was");
        c.changes++;
    }
    if (st == KILN_OK) st = merge_nodes(&c);
    return pass_end(&c, st, changed);
}
