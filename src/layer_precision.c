/* layer_precision.c — per-layer precision (`kiln build --layer-precision PATTERN:fp32`): matches the
 * rules against the optimized graph's nodes, records each node's precision, and makes every boundary
 * between precisions an explicit Cast node. Backends then give a float value the precision of the
 * node that produces it (graph inputs: the engine's; constants: their readers'), and no kernel ever
 * sees operands of two precisions. Runs after the passes, so patterns name the optimized graph's
 * nodes (what `kiln inspect ENGINE` lists). */
#include "layer_precision.h"

#include "core/log.h"
#include "core/status.h"
#include "ir/op_schema.h"

#include <stdlib.h>
#include <string.h>

const char *kiln_precision_name(kiln_precision p) {
    static const char *const names[] = {"fp32", "fp16", "bf16", "int8", "fp8", "w8a8", "int4"};
    return (unsigned)p < sizeof names / sizeof *names ? names[p] : "fp32";
}

bool kiln_glob_match(const char *pat, const char *s) {
    const char *star = NULL, *resume = NULL;
    while (*s) {
        if (*pat == '*') {
            star = pat++;
            resume = s;
        } else if (*pat == '?' || *pat == *s) {
            pat++;
            s++;
        } else if (star) {
            pat = star + 1;
            s = ++resume;
        } else {
            return false;
        }
    }
    while (*pat == '*') pat++;
    return !*pat;
}

bool kiln_layer_rule_matches(const kiln_layer_precision *r, const kiln_node *n) {
    if (!strncmp(r->pattern, "op:", 3)) return kiln_glob_match(r->pattern + 3, n->op_type);
    return kiln_glob_match(r->pattern, n->name);
}

static bool is_float(kiln_dtype t) { return t == KILN_F32 || t == KILN_F16 || t == KILN_BF16; }

/* The state of the rewrite: per node its precision and the node it must run before (casts), per
 * (value, precision) the value that holds it in that precision. */
typedef struct rewrite {
    kiln_graph *g;
    uint8_t *prec;   /* [cap] per node id */
    int *before;     /* [cap] per node id: the node a cast is placed before, or -1 */
    int cap;
    int *alias;      /* [3 * nvalues0]: value in precision p, or -1 */
    int nvalues0;    /* values before the rewrite (only they get aliases) */
    uint8_t *const_prec; /* [nvalues0]: precision of a constant's first reader, or 0xff */
} rewrite;

static kiln_status grow_nodes(rewrite *rw, int n) {
    if (n <= rw->cap) return KILN_OK;
    int cap = 2 * n;
    uint8_t *p = realloc(rw->prec, (size_t)cap);
    if (p) rw->prec = p;
    int *b = realloc(rw->before, (size_t)cap * sizeof *b);
    if (b) rw->before = b;
    if (!p || !b) return kiln_error(KILN_ERR_OUT_OF_MEMORY, "out of memory assigning layer precisions");
    rw->cap = cap;
    return KILN_OK;
}

/* A value holding value v in precision p for reader node `reader`: a constant alias (same data) or
 * the output of a new Cast node placed before the reader. */
static kiln_status alias_of(rewrite *rw, int v, kiln_precision p, int reader, int *out) {
    kiln_graph *g = rw->g;
    int *slot = &rw->alias[3 * v + (int)p];
    if (*slot >= 0) {
        *out = *slot;
        return KILN_OK;
    }
    char name[512];
    snprintf(name, sizeof name, "%s:%s", g->values[v].name, kiln_precision_name(p));
    int id;
    KILN_TRY(kiln_graph_new_value(g, name, &id));
    const char *vname = g->values[v].name, *new_name = g->values[id].name;
    if (g->values[v].constant) {
        kiln_tensor view;
        const kiln_tensor *t = g->values[v].constant;
        kiln_tensor_view(&view, t->dtype, t->ndim, t->dims, t->data);
        KILN_TRY(kiln_graph_set_constant(g, id, &view));
        KILN_LOG(KILN_LOG_VERBOSE, "layer_precision: constant '%s' is also read in %s, as '%s'", vname,
                 kiln_precision_name(p), new_name);
    } else {
        int node;
        KILN_TRY(kiln_graph_add_node(g, "Cast", "", new_name, 1, &v, 1, &id, &node));
        kiln_node *n = &g->nodes[node];
        n->opset = (int)kiln_graph_opset(g, "");
        n->schema = kiln_op_schema_find("", "Cast");
        kiln_attr *to = kiln_node_add_attr(g, n, "to", KILN_ATTR_INT);
        if (!to || !n->schema) return kiln_error(KILN_ERR_OUT_OF_MEMORY, "out of memory inserting a Cast");
        to->i = g->values[v].dtype;
        KILN_TRY(grow_nodes(rw, g->nnodes));
        rw->prec[node] = (uint8_t)p;
        rw->before[node] = reader;
        int producer = g->values[v].producer;
        KILN_LOG(KILN_LOG_VERBOSE, "layer_precision: Cast '%s' inserted: '%s' %s -> %s for node '%s'", new_name, vname,
                 kiln_precision_name(producer >= 0 ? (kiln_precision)rw->prec[producer] : (kiln_precision)rw->prec[reader]),
                 kiln_precision_name(p), g->nodes[reader].name);
    }
    *out = rw->alias[3 * v + (int)p] = id;
    return KILN_OK;
}

/* The precision value v is stored in when node `reader` reads it. */
static kiln_precision stored_in(rewrite *rw, int v, kiln_precision engine, int reader) {
    const kiln_value *val = &rw->g->values[v];
    if (val->constant) {
        if (rw->const_prec[v] == 0xff) rw->const_prec[v] = rw->prec[reader];
        return (kiln_precision)rw->const_prec[v];
    }
    return val->producer >= 0 ? (kiln_precision)rw->prec[val->producer] : engine;
}

/* Routes every float input of a node whose precision differs from its storage through an alias. */
static kiln_status insert_casts(rewrite *rw, kiln_precision engine, int nnodes0) {
    kiln_graph *g = rw->g;
    for (int i = 0; i < nnodes0; i++) {
        for (int k = 0; k < g->nodes[i].ninputs; k++) {
            int v = g->nodes[i].inputs[k];
            if (v < 0 || v >= rw->nvalues0 || !is_float(g->values[v].dtype)) continue;
            kiln_precision want = (kiln_precision)rw->prec[i];
            if (stored_in(rw, v, engine, i) == want) continue;
            int id = -1;
            KILN_TRY(alias_of(rw, v, want, i, &id));
            g->nodes[i].inputs[k] = id;
        }
    }
    return KILN_OK;
}

/* Puts every cast right before the node it was made for (keeping the order otherwise) and the
 * precisions along; fixes the producers. */
static kiln_status reorder(rewrite *rw, int nnodes0, uint8_t *out) {
    kiln_graph *g = rw->g;
    int n = g->nnodes;
    kiln_node *nodes = malloc((size_t)n * sizeof *nodes);
    if (!nodes) return kiln_error(KILN_ERR_OUT_OF_MEMORY, "out of memory assigning layer precisions");
    int at = 0;
    for (int i = 0; i < nnodes0; i++) {
        for (int c = nnodes0; c < n; c++)
            if (rw->before[c] == i) {
                out[at] = rw->prec[c];
                nodes[at++] = g->nodes[c];
            }
        out[at] = rw->prec[i];
        nodes[at++] = g->nodes[i];
    }
    KILN_ASSERT(at == n);
    memcpy(g->nodes, nodes, (size_t)n * sizeof *nodes);
    free(nodes);
    for (int i = 0; i < n; i++)
        for (int k = 0; k < g->nodes[i].noutputs; k++)
            if (g->nodes[i].outputs[k] >= 0) g->values[g->nodes[i].outputs[k]].producer = i;
    return KILN_OK;
}

/* Sets rw->prec from the rules; fails naming a rule that matches nothing. *mixed: some node differs. */
static kiln_status match_rules(rewrite *rw, kiln_precision engine, const kiln_layer_precision *rules, int nrules,
                               bool *mixed) {
    const kiln_graph *g = rw->g;
    *mixed = false;
    for (int i = 0; i < g->nnodes; i++) rw->prec[i] = (uint8_t)engine;
    for (int r = 0; r < nrules; r++) {
        int hits = 0;
        for (int i = 0; i < g->nnodes; i++) {
            if (!kiln_layer_rule_matches(&rules[r], &g->nodes[i])) continue;
            rw->prec[i] = (uint8_t)rules[r].precision;
            hits++;
        }
        if (!hits)
            return kiln_error(KILN_ERR_INVALID_ARGUMENT, "--layer-precision '%s' matches no layer (patterns match the "
                              "optimized graph's node names, or op types with 'op:'; `kiln inspect ENGINE` lists them)",
                              rules[r].pattern);
    }
    for (int i = 0; i < g->nnodes; i++) {
        if (rw->prec[i] != (uint8_t)engine) *mixed = true;
        if (rw->prec[i] != (uint8_t)engine)
            KILN_LOG(KILN_LOG_VERBOSE, "layer_precision: node '%s' (%s) computes in %s (the engine in %s)",
                     g->nodes[i].name, g->nodes[i].op_type, kiln_precision_name((kiln_precision)rw->prec[i]),
                     kiln_precision_name(engine));
    }
    return KILN_OK;
}

kiln_status kiln_layer_precision_apply(kiln_graph *g, kiln_precision engine, const kiln_layer_precision *rules,
                                       int nrules, uint8_t **out) {
    *out = NULL;
    rewrite rw = {.g = g, .nvalues0 = g->nvalues};
    int nnodes0 = g->nnodes;
    kiln_status s = grow_nodes(&rw, nnodes0 + 1);
    rw.alias = malloc(((size_t)3 * g->nvalues + 1) * sizeof *rw.alias);
    rw.const_prec = malloc((size_t)g->nvalues + 1);
    if (s == KILN_OK && (!rw.alias || !rw.const_prec))
        s = kiln_error(KILN_ERR_OUT_OF_MEMORY, "out of memory assigning layer precisions");
    bool mixed = false;
    if (s == KILN_OK) {
        for (int v = 0; v < 3 * g->nvalues; v++) rw.alias[v] = -1;
        memset(rw.const_prec, 0xff, (size_t)g->nvalues);
        for (int i = 0; i < rw.cap; i++) rw.before[i] = -1;
        s = match_rules(&rw, engine, rules, nrules, &mixed);
    }
    if (s == KILN_OK && mixed) s = insert_casts(&rw, engine, nnodes0);
    uint8_t *prec = s == KILN_OK ? kiln_graph_alloc(g, (size_t)g->nnodes + 1) : NULL;
    if (s == KILN_OK && !prec) s = kiln_error(KILN_ERR_OUT_OF_MEMORY, "out of memory assigning layer precisions");
    if (s == KILN_OK) s = reorder(&rw, nnodes0, prec);
    if (s == KILN_OK && g->nnodes > nnodes0) {
        KILN_LOG(KILN_LOG_INFO, "layer precision: %d Cast node%s inserted where precisions meet", g->nnodes - nnodes0,
                 g->nnodes - nnodes0 > 1 ? "s" : "");
        s = kiln_graph_infer_shapes(g);
        if (s == KILN_OK) s = kiln_graph_verify(g);
    }
    free(rw.prec);
    free(rw.before);
    free(rw.alias);
    free(rw.const_prec);
    if (s != KILN_OK) return s;
    *out = prec;
    return KILN_OK;
}
