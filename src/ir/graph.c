/* graph.c — construction, lookup and lifetime of the IR graph (values, nodes, attributes,
 * symbols), plus the name index. Ordering, inference and verification live in graph_passes.c. */
#include "ir/graph.h"

#include "core/status.h"

#include <stdlib.h>
#include <string.h>

/* ---- name index: open addressing, name -> value id ---- */

typedef struct name_index {
    int *slots; /* value id + 1; 0 = empty */
    size_t cap; /* power of two */
} name_index;

typedef struct keepalive {
    struct keepalive *next;
    void *ptr;
    void (*release)(void *);
} keepalive;

static uint64_t hash_str(const char *s) {
    uint64_t h = 1469598103934665603ull;
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h;
}

static kiln_status index_grow(kiln_graph *g) {
    name_index *ix = g->name_index;
    size_t cap = ix->cap ? ix->cap * 2 : 256;
    while (cap < (size_t)g->nvalues * 2 + 2) cap *= 2;
    int *slots = calloc(cap, sizeof *slots);
    if (!slots) return kiln_error(KILN_ERR_OUT_OF_MEMORY, "out of memory growing the value index");
    for (int id = 0; id < g->nvalues; id++) {
        size_t h = hash_str(g->values[id].name) & (cap - 1);
        while (slots[h]) h = (h + 1) & (cap - 1);
        slots[h] = id + 1;
    }
    free(ix->slots);
    ix->slots = slots;
    ix->cap = cap;
    return KILN_OK;
}

kiln_status kiln_graph_reindex(kiln_graph *g) {
    name_index *ix = g->name_index;
    free(ix->slots);
    ix->slots = NULL;
    ix->cap = 0;
    return index_grow(g);
}

int kiln_graph_find_value(const kiln_graph *g, const char *name) {
    const name_index *ix = g->name_index;
    if (!ix->cap) return -1;
    for (size_t h = hash_str(name) & (ix->cap - 1);; h = (h + 1) & (ix->cap - 1)) {
        int slot = ix->slots[h];
        if (!slot) return -1;
        if (!strcmp(g->values[slot - 1].name, name)) return slot - 1;
    }
}

/* ---- creation ---- */

kiln_graph *kiln_graph_create(void) {
    kiln_graph *g = calloc(1, sizeof *g);
    if (!g) return NULL;
    g->arena = kiln_arena_create();
    g->name_index = calloc(1, sizeof(name_index));
    if (!g->arena || !g->name_index) {
        kiln_graph_free(g);
        return NULL;
    }
    g->name = "";
    g->producer = "";
    return g;
}

void kiln_node_release_attrs(kiln_node *n) {
    for (int i = 0; i < n->nattrs; i++) {
        kiln_attr *a = &n->attrs[i];
        if (a->t) kiln_tensor_release(a->t);
        for (int k = 0; a->tensors && k < a->n; k++) kiln_tensor_release(&a->tensors[k]);
        if (a->g) kiln_graph_free(a->g);
        for (int k = 0; a->graphs && k < a->n; k++) kiln_graph_free(a->graphs[k]);
    }
    n->nattrs = 0;
}

void kiln_graph_free(kiln_graph *g) {
    if (!g) return;
    for (int i = 0; i < g->nvalues; i++)
        if (g->values[i].constant) kiln_tensor_release(g->values[i].constant);
    for (int i = 0; i < g->nnodes; i++) kiln_node_release_attrs(&g->nodes[i]);
    for (keepalive *k = g->keepalive, *next; k; k = next) {
        next = k->next;
        k->release(k->ptr);
        free(k);
    }
    if (g->name_index) free(((name_index *)g->name_index)->slots);
    free(g->name_index);
    free(g->values);
    free(g->nodes);
    free(g->inputs);
    free(g->outputs);
    free(g->symbols);
    kiln_arena_free(g->arena);
    free(g);
}

kiln_status kiln_graph_keep_alive(kiln_graph *g, void *ptr, void (*release)(void *)) {
    keepalive *k = malloc(sizeof *k);
    if (!k) {
        release(ptr);
        return kiln_error(KILN_ERR_OUT_OF_MEMORY, "out of memory");
    }
    k->ptr = ptr;
    k->release = release;
    k->next = g->keepalive;
    g->keepalive = k;
    return KILN_OK;
}

char *kiln_graph_strdup(kiln_graph *g, const char *s) { return kiln_arena_strdup(g->arena, s ? s : ""); }

void *kiln_graph_alloc(kiln_graph *g, size_t size) { return kiln_arena_alloc(g->arena, size); }

/* Grows an array of elements of size esize so that it holds at least need elements. */
static kiln_status grow(void **arr, int *cap, int need, size_t esize) {
    if (need <= *cap) return KILN_OK;
    int ncap = *cap ? *cap : 16;
    while (ncap < need) ncap *= 2;
    void *p = realloc(*arr, (size_t)ncap * esize);
    if (!p) return kiln_error(KILN_ERR_OUT_OF_MEMORY, "out of memory growing the graph");
    memset((char *)p + (size_t)*cap * esize, 0, (size_t)(ncap - *cap) * esize);
    *arr = p;
    *cap = ncap;
    return KILN_OK;
}

static kiln_status add_value_named(kiln_graph *g, const char *name, int *id) {
    name_index *ix = g->name_index;
    KILN_TRY(grow((void **)&g->values, &g->cap_values, g->nvalues + 1, sizeof *g->values));
    if ((size_t)(g->nvalues + 1) * 2 > ix->cap) KILN_TRY(index_grow(g));
    kiln_value *v = &g->values[g->nvalues];
    memset(v, 0, sizeof *v);
    v->name = kiln_graph_strdup(g, name);
    if (!v->name) return kiln_error(KILN_ERR_OUT_OF_MEMORY, "out of memory");
    v->ndim = -1;
    v->producer = -1;
    size_t h = hash_str(v->name) & (ix->cap - 1);
    while (ix->slots[h]) h = (h + 1) & (ix->cap - 1);
    ix->slots[h] = g->nvalues + 1;
    *id = g->nvalues++;
    return KILN_OK;
}

kiln_status kiln_graph_new_value(kiln_graph *g, const char *hint, int *id) {
    char buf[512];
    const char *base = (hint && hint[0]) ? hint : "v";
    if (kiln_graph_find_value(g, base) < 0) return add_value_named(g, base, id);
    for (int k = 1;; k++) {
        snprintf(buf, sizeof buf, "%.480s_%d", base, k);
        if (kiln_graph_find_value(g, buf) < 0) return add_value_named(g, buf, id);
    }
}

kiln_status kiln_graph_value(kiln_graph *g, const char *name, int *id) {
    if (!name || !name[0]) return kiln_graph_new_value(g, "anon", id);
    int found = kiln_graph_find_value(g, name);
    if (found >= 0) {
        *id = found;
        return KILN_OK;
    }
    return add_value_named(g, name, id);
}

kiln_status kiln_graph_set_constant(kiln_graph *g, int id, kiln_tensor *t) {
    KILN_ASSERT(id >= 0 && id < g->nvalues);
    kiln_value *v = &g->values[id];
    if (!v->constant) {
        v->constant = kiln_graph_alloc(g, sizeof *v->constant);
        if (!v->constant) return kiln_error(KILN_ERR_OUT_OF_MEMORY, "out of memory");
    } else {
        kiln_tensor_release(v->constant);
    }
    *v->constant = *t;
    memset(t, 0, sizeof *t);
    v->dtype = v->constant->dtype;
    v->ndim = v->constant->ndim;
    for (int d = 0; d < v->ndim; d++) v->dims[d] = kiln_dim_static(v->constant->dims[d]);
    return KILN_OK;
}

kiln_status kiln_graph_symbol(kiln_graph *g, const char *name, int32_t *sym) {
    for (int i = 0; i < g->nsymbols; i++)
        if (!strcmp(g->symbols[i], name)) {
            *sym = i + 1;
            return KILN_OK;
        }
    KILN_TRY(grow((void **)&g->symbols, &g->cap_symbols, g->nsymbols + 1, sizeof *g->symbols));
    g->symbols[g->nsymbols] = kiln_graph_strdup(g, name);
    if (!g->symbols[g->nsymbols]) return kiln_error(KILN_ERR_OUT_OF_MEMORY, "out of memory");
    *sym = ++g->nsymbols;
    return KILN_OK;
}

kiln_status kiln_graph_add_input(kiln_graph *g, int value_id) {
    KILN_ASSERT(value_id >= 0 && value_id < g->nvalues);
    KILN_TRY(grow((void **)&g->inputs, &g->cap_inputs, g->ninputs + 1, sizeof *g->inputs));
    g->inputs[g->ninputs++] = value_id;
    g->values[value_id].is_input = true;
    return KILN_OK;
}

kiln_status kiln_graph_add_output(kiln_graph *g, int value_id) {
    KILN_ASSERT(value_id >= 0 && value_id < g->nvalues);
    KILN_TRY(grow((void **)&g->outputs, &g->cap_outputs, g->noutputs + 1, sizeof *g->outputs));
    g->outputs[g->noutputs++] = value_id;
    g->values[value_id].is_output = true;
    return KILN_OK;
}

kiln_status kiln_graph_add_node(kiln_graph *g, const char *op_type, const char *domain, const char *name,
                                int ninputs, const int *inputs, int noutputs, const int *outputs,
                                int *node_id) {
    KILN_TRY(grow((void **)&g->nodes, &g->cap_nodes, g->nnodes + 1, sizeof *g->nodes));
    kiln_node *n = &g->nodes[g->nnodes];
    memset(n, 0, sizeof *n);
    char auto_name[256];
    if (!name || !name[0]) {
        snprintf(auto_name, sizeof auto_name, "%.200s_%d", op_type, g->nnodes);
        name = auto_name;
    }
    n->name = kiln_graph_strdup(g, name);
    n->op_type = kiln_graph_strdup(g, op_type);
    n->domain = kiln_graph_strdup(g, domain ? domain : "");
    n->opset = (int)kiln_graph_opset(g, n->domain);
    n->ninputs = ninputs;
    n->noutputs = noutputs;
    n->inputs = kiln_graph_alloc(g, sizeof(int) * (size_t)(ninputs + 1));
    n->outputs = kiln_graph_alloc(g, sizeof(int) * (size_t)(noutputs + 1));
    if (!n->name || !n->op_type || !n->domain || !n->inputs || !n->outputs)
        return kiln_error(KILN_ERR_OUT_OF_MEMORY, "out of memory");
    for (int i = 0; i < ninputs; i++) {
        KILN_ASSERT(inputs[i] >= -1 && inputs[i] < g->nvalues);
        n->inputs[i] = inputs[i];
    }
    for (int i = 0; i < noutputs; i++) {
        KILN_ASSERT(outputs[i] >= -1 && outputs[i] < g->nvalues);
        n->outputs[i] = outputs[i];
        if (outputs[i] >= 0) g->values[outputs[i]].producer = g->nnodes;
    }
    if (node_id) *node_id = g->nnodes;
    g->nnodes++;
    return KILN_OK;
}

kiln_status kiln_graph_import_opset(kiln_graph *g, const char *domain, int64_t version) {
    if (kiln_graph_opset(g, domain)) return KILN_OK;
    kiln_opset_import *ops = kiln_graph_alloc(g, sizeof *ops * (size_t)(g->nopsets + 1));
    if (!ops) return kiln_error(KILN_ERR_OUT_OF_MEMORY, "out of memory importing opset '%s'", domain);
    if (g->nopsets) memcpy(ops, g->opsets, sizeof *ops * (size_t)g->nopsets);
    ops[g->nopsets].domain = kiln_graph_strdup(g, domain);
    ops[g->nopsets].version = version;
    if (!ops[g->nopsets].domain) return kiln_error(KILN_ERR_OUT_OF_MEMORY, "out of memory importing opset '%s'", domain);
    g->opsets = ops;
    g->nopsets++;
    return KILN_OK;
}

kiln_attr *kiln_node_add_attr(kiln_graph *g, kiln_node *n, const char *name, kiln_attr_type type) {
    kiln_attr *attrs = kiln_graph_alloc(g, sizeof *attrs * (size_t)(n->nattrs + 1));
    if (!attrs) return NULL;
    if (n->nattrs) memcpy(attrs, n->attrs, sizeof *attrs * (size_t)n->nattrs);
    n->attrs = attrs; /* the old array stays in the arena until the graph is freed */
    kiln_attr *a = &attrs[n->nattrs++];
    a->name = kiln_graph_strdup(g, name);
    a->type = type;
    return a->name ? a : NULL;
}

static bool domain_is_default(const char *d) { return !d || !d[0] || !strcmp(d, "ai.onnx"); }

int64_t kiln_graph_opset(const kiln_graph *g, const char *domain) {
    for (int i = 0; i < g->nopsets; i++) {
        const char *d = g->opsets[i].domain;
        if (domain_is_default(domain) ? domain_is_default(d) : (d && !strcmp(d, domain)))
            return g->opsets[i].version;
    }
    return 0;
}

/* ---- attributes ---- */

const kiln_attr *kiln_node_attr(const kiln_node *n, const char *name) {
    for (int i = 0; i < n->nattrs; i++)
        if (!strcmp(n->attrs[i].name, name)) return &n->attrs[i];
    return NULL;
}

int64_t kiln_attr_int(const kiln_node *n, const char *name, int64_t dflt) {
    const kiln_attr *a = kiln_node_attr(n, name);
    if (!a) return dflt;
    if (a->type == KILN_ATTR_INT) return a->i;
    /* a float where an int belongs: its value when int64 holds it, else (NaN, huge) the default */
    if (a->type == KILN_ATTR_FLOAT && a->f >= -9.2e18f && a->f <= 9.2e18f) return (int64_t)a->f;
    return dflt;
}

float kiln_attr_float(const kiln_node *n, const char *name, float dflt) {
    const kiln_attr *a = kiln_node_attr(n, name);
    if (!a) return dflt;
    if (a->type == KILN_ATTR_FLOAT) return a->f;
    if (a->type == KILN_ATTR_INT) return (float)a->i;
    return dflt;
}

const char *kiln_attr_string(const kiln_node *n, const char *name, const char *dflt) {
    const kiln_attr *a = kiln_node_attr(n, name);
    return (a && a->type == KILN_ATTR_STRING) ? a->s : dflt;
}

const int64_t *kiln_attr_ints(const kiln_node *n, const char *name, int *count) {
    const kiln_attr *a = kiln_node_attr(n, name);
    if (!a || a->type != KILN_ATTR_INTS) {
        *count = 0;
        return NULL;
    }
    *count = a->n;
    return a->ints;
}

const float *kiln_attr_floats(const kiln_node *n, const char *name, int *count) {
    const kiln_attr *a = kiln_node_attr(n, name);
    if (!a || a->type != KILN_ATTR_FLOATS) {
        *count = 0;
        return NULL;
    }
    *count = a->n;
    return a->floats;
}

kiln_value *kiln_node_input(const kiln_graph *g, const kiln_node *n, int i) {
    if (i < 0 || i >= n->ninputs || n->inputs[i] < 0) return NULL;
    return &g->values[n->inputs[i]];
}

kiln_value *kiln_node_output(const kiln_graph *g, const kiln_node *n, int i) {
    if (i < 0 || i >= n->noutputs || n->outputs[i] < 0) return NULL;
    return &g->values[n->outputs[i]];
}
