/* pass_util.c — the helpers of pass_util.h: use counts, closure checks, rewrites, constants, shapes,
 * attribute setters and the verbose change log. */
#include "passes/pass_util.h"

#include "core/log.h"
#include "core/status.h"
#include "ir/fused_ops.h"
#include "ir/op_schema.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static kiln_status oom(void) { return kiln_error(KILN_ERR_OUT_OF_MEMORY, "out of memory rewriting the graph"); }

/* Grows the use-count array to cover every value. */
static kiln_status ensure_uses(pass_ctx *c) {
    if (c->g->nvalues <= c->cap_uses) return KILN_OK;
    int cap = c->g->nvalues * 2 + 16;
    int *u = realloc(c->uses, (size_t)cap * sizeof *u);
    if (!u) return oom();
    memset(u + c->cap_uses, 0, (size_t)(cap - c->cap_uses) * sizeof *u);
    c->uses = u;
    c->cap_uses = cap;
    return KILN_OK;
}

kiln_status pass_begin(pass_ctx *c, kiln_graph *g, const char *pass) {
    memset(c, 0, sizeof *c);
    c->g = g;
    c->pass = pass;
    KILN_TRY(ensure_uses(c));
    for (int i = 0; i < g->nnodes; i++)
        for (int k = 0; k < g->nodes[i].ninputs; k++)
            if (g->nodes[i].inputs[k] >= 0) c->uses[g->nodes[i].inputs[k]]++;
    return KILN_OK;
}

kiln_status pass_end(pass_ctx *c, kiln_status st, bool *changed) {
    if (st == KILN_OK && c->appended) st = kiln_graph_toposort(c->g);
    if (st == KILN_OK && c->detached) st = kiln_graph_compact(c->g, NULL);
    *changed = st == KILN_OK && c->changes > 0;
    free(c->uses);
    c->uses = NULL;
    return st;
}

bool pass_is_op(const kiln_node *n, const char *op) {
    return pass_alive(n) && (!n->domain[0] || !strcmp(n->domain, "ai.onnx")) && !strcmp(n->op_type, op);
}

int pass_uses(const pass_ctx *c, int v) { return v >= 0 && v < c->cap_uses ? c->uses[v] : 0; }

int pass_producer(const pass_ctx *c, int v, const char *op) {
    if (v < 0) return -1;
    int p = c->g->values[v].producer;
    if (p < 0 || !pass_alive(&c->g->nodes[p])) return -1;
    if (op && !pass_is_op(&c->g->nodes[p], op)) return -1;
    return p;
}

int pass_consumers(const pass_ctx *c, int v, int *ids, int max) {
    int count = 0;
    if (v < 0 || pass_uses(c, v) == 0) return 0;
    for (int i = 0; i < c->g->nnodes; i++) {
        const kiln_node *n = &c->g->nodes[i];
        for (int k = 0; k < n->ninputs; k++)
            if (n->inputs[k] == v) {
                if (count < max) ids[count] = i;
                count++;
                break;
            }
    }
    return count;
}

int pass_sole_consumer(const pass_ctx *c, int v) {
    if (v < 0 || c->g->values[v].is_output || pass_uses(c, v) != 1) return -1;
    int id;
    return pass_consumers(c, v, &id, 1) == 1 ? id : -1;
}

int pass_other_input(const kiln_node *n, int v) {
    if (n->ninputs != 2) return -2;
    if (n->inputs[0] == v) return n->inputs[1];
    if (n->inputs[1] == v) return n->inputs[0];
    return -2;
}

bool pass_closed(const pass_ctx *c, const int *set, int n, int anchor) {
    const kiln_graph *g = c->g;
    for (int s = 0; s < n; s++) {
        for (int t = 0; t < s; t++)
            if (set[t] == set[s]) return false;
        const kiln_node *node = &g->nodes[set[s]];
        if (!pass_alive(node)) return false;
        for (int k = 0; k < node->noutputs; k++) {
            int v = node->outputs[k];
            if (v < 0) continue;
            if (set[s] == anchor) {
                if (k > 0 && (pass_uses(c, v) > 0 || g->values[v].is_output)) return false;
                continue;
            }
            if (g->values[v].is_output) return false;
            int inside = 0;
            for (int r = 0; r < n; r++) {
                const kiln_node *reader = &g->nodes[set[r]];
                for (int j = 0; j < reader->ninputs; j++) inside += reader->inputs[j] == v;
            }
            if (inside != pass_uses(c, v)) return false;
        }
    }
    return true;
}

bool pass_const_scalar(const pass_ctx *c, int v, double *x) {
    if (v < 0) return false;
    const kiln_tensor *t = c->g->values[v].constant;
    if (!t || kiln_tensor_numel(t) != 1 || kiln_dtype_size(t->dtype) == 0 || t->dtype == KILN_C64 ||
        t->dtype == KILN_C128 || t->dtype >= KILN_F8E4M3FN)
        return false;
    *x = kiln_tensor_get_f64(t, 0);
    return true;
}

bool pass_const_is(const pass_ctx *c, int v, double want, double tol) {
    double x;
    return pass_const_scalar(c, v, &x) && fabs(x - want) <= tol * fabs(want);
}

bool pass_is_float(kiln_dtype t) { return t == KILN_F32 || t == KILN_F16 || t == KILN_BF16; }

bool pass_same_dim(kiln_dim a, kiln_dim b) {
    if (a.sym == 0 && b.sym == 0) return a.value == b.value;
    return a.sym > 0 && a.sym == b.sym;
}

bool pass_same_shape(const kiln_value *a, const kiln_value *b) {
    if (a->ndim < 0 || a->ndim != b->ndim) return false;
    for (int d = 0; d < a->ndim; d++)
        if (!pass_same_dim(a->dims[d], b->dims[d])) return false;
    return true;
}

int pass_onnx_opset(const kiln_graph *g, int min) {
    int64_t v = kiln_graph_opset(g, "");
    return v > min ? (int)v : min;
}

kiln_status pass_new_value(pass_ctx *c, const char *hint, int *id) {
    KILN_TRY(kiln_graph_new_value(c->g, hint, id));
    return ensure_uses(c);
}

kiln_status pass_new_constant(pass_ctx *c, const char *hint, kiln_tensor *t, int *id) {
    KILN_TRY(pass_new_value(c, hint, id));
    return kiln_graph_set_constant(c->g, *id, t);
}

kiln_status pass_new_ints(pass_ctx *c, const char *hint, const int64_t *v, int n, int *id) {
    kiln_tensor t = {0};
    int64_t len = n;
    KILN_TRY(kiln_tensor_alloc(&t, KILN_I64, 1, &len));
    if (n) memcpy(t.data, v, (size_t)n * sizeof *v);
    kiln_status st = pass_new_constant(c, hint, &t, id);
    kiln_tensor_release(&t); /* left only when the constant was not made */
    return st;
}

void pass_set_input(pass_ctx *c, int node, int k, int v) {
    kiln_node *n = &c->g->nodes[node];
    if (n->inputs[k] >= 0) c->uses[n->inputs[k]]--;
    n->inputs[k] = v;
    if (v >= 0) c->uses[v]++;
}

void pass_replace_uses(pass_ctx *c, int from, int to) {
    KILN_ASSERT(!c->g->values[from].is_output);
    for (int i = 0; i < c->g->nnodes; i++) {
        kiln_node *n = &c->g->nodes[i];
        for (int k = 0; k < n->ninputs; k++)
            if (n->inputs[k] == from) pass_set_input(c, i, k, to);
    }
}

void pass_detach(pass_ctx *c, int id) {
    kiln_node *n = &c->g->nodes[id];
    for (int k = 0; k < n->ninputs; k++)
        if (n->inputs[k] >= 0) c->uses[n->inputs[k]]--;
    for (int k = 0; k < n->noutputs; k++)
        if (n->outputs[k] >= 0 && c->g->values[n->outputs[k]].producer == id) c->g->values[n->outputs[k]].producer = -1;
    n->ninputs = 0;
    n->noutputs = 0;
    c->detached = true;
}

kiln_status pass_add_node(pass_ctx *c, const char *domain, const char *op, int opset, const char *name, int nin,
                          const int *ins, int out, int *id) {
    KILN_TRY(kiln_graph_add_node(c->g, op, domain, name, nin, ins, 1, &out, id));
    kiln_node *n = &c->g->nodes[*id];
    n->opset = opset;
    n->schema = kiln_op_schema_find(n->domain, n->op_type);
    for (int k = 0; k < nin; k++)
        if (ins[k] >= 0) c->uses[ins[k]]++;
    c->appended = true;
    c->changes++;
    return KILN_OK;
}

/* Deep copy of attribute src into a new attribute of node n. */
static kiln_status copy_attr(kiln_graph *g, kiln_node *n, const kiln_attr *src) {
    if (src->type == KILN_ATTR_GRAPH || src->type == KILN_ATTR_GRAPHS || src->type == KILN_ATTR_SPARSE_TENSOR ||
        src->type == KILN_ATTR_SPARSE_TENSORS || src->type == KILN_ATTR_TYPE_PROTO || src->type == KILN_ATTR_TYPE_PROTOS)
        return kiln_error(KILN_ERR_UNSUPPORTED, "attribute '%s' of node '%s' cannot be copied", src->name, n->name);
    kiln_attr *a = kiln_node_add_attr(g, n, src->name, src->type);
    if (!a) return oom();
    a->f = src->f;
    a->i = src->i;
    a->n = src->n;
    if (src->s) {
        char *s = kiln_graph_alloc(g, src->s_len + 1);
        if (!s) return oom();
        memcpy(s, src->s, src->s_len);
        s[src->s_len] = 0;
        a->s = s;
        a->s_len = src->s_len;
    }
    if (src->floats) {
        if (!(a->floats = kiln_graph_alloc(g, sizeof *a->floats * (size_t)(src->n + 1)))) return oom();
        memcpy(a->floats, src->floats, sizeof *a->floats * (size_t)src->n);
    }
    if (src->ints) {
        if (!(a->ints = kiln_graph_alloc(g, sizeof *a->ints * (size_t)(src->n + 1)))) return oom();
        memcpy(a->ints, src->ints, sizeof *a->ints * (size_t)src->n);
    }
    if (src->strings) {
        if (!(a->strings = kiln_graph_alloc(g, sizeof *a->strings * (size_t)(src->n + 1)))) return oom();
        for (int k = 0; k < src->n; k++)
            if (!(a->strings[k] = kiln_graph_strdup(g, src->strings[k]))) return oom();
    }
    if (src->t) {
        if (!(a->t = kiln_graph_alloc(g, sizeof *a->t))) return oom();
        memset(a->t, 0, sizeof *a->t);
        KILN_TRY(kiln_tensor_copy(a->t, src->t));
    }
    if (src->tensors) {
        if (!(a->tensors = kiln_graph_alloc(g, sizeof *a->tensors * (size_t)(src->n + 1)))) return oom();
        memset(a->tensors, 0, sizeof *a->tensors * (size_t)(src->n + 1));
        for (int k = 0; k < src->n; k++) KILN_TRY(kiln_tensor_copy(&a->tensors[k], &src->tensors[k]));
    }
    return KILN_OK;
}

/* Writes "Op 'name' + Op 'name' ... -> op 'name' (detail)" for the pattern into the verbose log. */
static void log_rewrite(const pass_ctx *c, const int *set, int n, const char *op, const char *name,
                        const char *detail) {
    if (KILN_LOG_VERBOSE > kiln_log_level_current) return;
    char line[4096];
    size_t used = 0;
    for (int s = 0; s < n && used < sizeof line; s++) {
        const kiln_node *node = &c->g->nodes[set[s]];
        used += (size_t)snprintf(line + used, sizeof line - used, "%s%s '%s'", s ? " + " : "", node->op_type, node->name);
    }
    if (used < sizeof line)
        used += (size_t)snprintf(line + used, sizeof line - used, " -> %s '%s'%s%s%s", op, name, detail ? " (" : "",
                                 detail ? detail : "", detail ? ")" : "");
    KILN_LOG(KILN_LOG_VERBOSE, "%s: %s", c->pass, line);
}

kiln_status pass_rewrite(pass_ctx *c, const int *set, int n, int anchor, const char *domain, const char *op, int opset,
                         const char *name, int nin, const int *ins, int attrs_from, const char *detail,
                         kiln_node **out) {
    kiln_graph *g = c->g;
    /* sort the set by node order so the log reads like the graph */
    int order[PASS_MAX_SET];
    KILN_ASSERT(n <= PASS_MAX_SET);
    memcpy(order, set, (size_t)n * sizeof *order);
    for (int i = 1; i < n; i++)
        for (int j = i; j > 0 && order[j - 1] > order[j]; j--) {
            int t = order[j];
            order[j] = order[j - 1];
            order[j - 1] = t;
        }
    log_rewrite(c, order, n, op, name, detail);
    kiln_node *a = &g->nodes[anchor];
    char *op_s = kiln_graph_strdup(g, op), *dom_s = kiln_graph_strdup(g, domain), *name_s = kiln_graph_strdup(g, name);
    int *in_s = kiln_graph_alloc(g, sizeof(int) * (size_t)(nin + 1));
    if (!op_s || !dom_s || !name_s || !in_s) return oom();
    kiln_attr *old_attrs = a->attrs;
    int old_n = a->nattrs;
    a->attrs = NULL;
    a->nattrs = 0;
    kiln_status st = KILN_OK;
    if (attrs_from >= 0) {
        const kiln_node *src = &g->nodes[attrs_from];
        const kiln_attr *from = attrs_from == anchor ? old_attrs : src->attrs;
        int count = attrs_from == anchor ? old_n : src->nattrs;
        for (int k = 0; k < count && st == KILN_OK; k++) st = copy_attr(g, a, &from[k]);
    }
    /* release what the old attributes owned */
    kiln_node old = *a;
    old.attrs = old_attrs;
    old.nattrs = old_n;
    kiln_node_release_attrs(&old);
    if (st != KILN_OK) return st;
    for (int k = 0; k < a->ninputs; k++)
        if (a->inputs[k] >= 0) c->uses[a->inputs[k]]--;
    for (int k = 0; k < nin; k++) {
        in_s[k] = ins[k];
        if (ins[k] >= 0) c->uses[ins[k]]++;
    }
    for (int k = 1; k < a->noutputs; k++)
        if (a->outputs[k] >= 0) g->values[a->outputs[k]].producer = -1;
    a->op_type = op_s;
    a->domain = dom_s;
    a->name = name_s;
    a->opset = opset;
    a->inputs = in_s;
    a->ninputs = nin;
    a->noutputs = 1;
    a->schema = kiln_op_schema_find(dom_s, op_s);
    for (int s = 0; s < n; s++)
        if (set[s] != anchor) pass_detach(c, set[s]);
    c->changes++;
    *out = a;
    return KILN_OK;
}

kiln_status pass_use_kiln_domain(pass_ctx *c) { return kiln_graph_import_opset(c->g, KILN_FUSED_DOMAIN, KILN_FUSED_OPSET); }

kiln_status pass_attr_int(kiln_graph *g, kiln_node *n, const char *name, int64_t v) {
    kiln_attr *a = kiln_node_add_attr(g, n, name, KILN_ATTR_INT);
    if (!a) return oom();
    a->i = v;
    return KILN_OK;
}

kiln_status pass_attr_float(kiln_graph *g, kiln_node *n, const char *name, float v) {
    kiln_attr *a = kiln_node_add_attr(g, n, name, KILN_ATTR_FLOAT);
    if (!a) return oom();
    a->f = v;
    return KILN_OK;
}

kiln_status pass_attr_string(kiln_graph *g, kiln_node *n, const char *name, const char *v) {
    kiln_attr *a = kiln_node_add_attr(g, n, name, KILN_ATTR_STRING);
    if (!a || !(a->s = kiln_graph_strdup(g, v))) return oom();
    a->s_len = strlen(v);
    return KILN_OK;
}

kiln_status pass_attr_ints(kiln_graph *g, kiln_node *n, const char *name, const int64_t *v, int count) {
    kiln_attr *a = kiln_node_add_attr(g, n, name, KILN_ATTR_INTS);
    if (!a || !(a->ints = kiln_graph_alloc(g, sizeof *a->ints * (size_t)(count + 1)))) return oom();
    if (count) memcpy(a->ints, v, sizeof *a->ints * (size_t)count);
    a->n = count;
    return KILN_OK;
}

kiln_status pass_attr_floats(kiln_graph *g, kiln_node *n, const char *name, const float *v, int count) {
    kiln_attr *a = kiln_node_add_attr(g, n, name, KILN_ATTR_FLOATS);
    if (!a || !(a->floats = kiln_graph_alloc(g, sizeof *a->floats * (size_t)(count + 1)))) return oom();
    if (count) memcpy(a->floats, v, sizeof *a->floats * (size_t)count);
    a->n = count;
    return KILN_OK;
}
