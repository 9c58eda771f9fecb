/* graph_passes.c — whole-graph operations on the IR: op resolution (with the all-at-once report of
 * unsupported nodes), topological ordering, shape inference, verification, compaction and printing. */
#include "ir/graph.h"

#include "core/ckd.h"
#include "core/log.h"
#include "core/status.h"
#include "ir/op_schema.h"

#include <stdlib.h>
#include <string.h>

kiln_status kiln_graph_resolve_ops(kiln_graph *g, FILE *report) {
    int bad = 0;
    char list[3072] = "";
    size_t used = 0;
    for (int i = 0; i < g->nnodes; i++) {
        kiln_node *n = &g->nodes[i];
        const kiln_op_schema *s = kiln_op_schema_find(n->domain, n->op_type);
        const char *dom = n->domain[0] ? n->domain : "ai.onnx";
        char why[512] = "";
        if (n->opset == 0) {
            snprintf(why, sizeof why, "op %s: the model imports no opset for domain '%s'", n->op_type, dom);
        } else if (!s) {
            snprintf(why, sizeof why, "op %s%s%s (domain %s, opset %d) is not implemented", n->domain[0] ? n->domain : "",
                     n->domain[0] ? "." : "", n->op_type, dom, n->opset);
        } else {
            int max = s->max_opset ? s->max_opset : KILN_ONNX_OPSET_MAX;
            if (n->opset < s->min_opset || n->opset > max)
                snprintf(why, sizeof why, "op %s at opset %d is not implemented (kiln implements opsets %d to %d)",
                         n->op_type, n->opset, s->min_opset, max);
        }
        n->schema = why[0] ? NULL : s;
        if (!why[0]) continue;
        if (report) fprintf(report, "  node '%s': %s\n", n->name, why);
        if (bad < 12 && used < sizeof list)
            used += (size_t)snprintf(list + used, sizeof list - used, "\n  node '%s': %s", n->name, why);
        bad++;
    }
    if (!bad) return KILN_OK;
    return kiln_error(KILN_ERR_UNSUPPORTED, "%d node%s cannot run:%s%s", bad, bad > 1 ? "s" : "", list,
                      bad > 12 ? "\n  ... (`kiln inspect MODEL` lists all)" : "");
}

/* The error for a graph Kahn's algorithm could not finish: pending[i] > 0 for the nodes left, each of
 * which reads an output of another node left. Walking from one of them to such a producer, again and
 * again, must come back to a node already met: those nodes form a cycle, named in the message in
 * execution order ("'/Add' (Add) -> '/Relu' (Relu) -> '/Add' (Add)"). step and walk ([nnodes]) are
 * scratch. */
static kiln_status cycle_error(const kiln_graph *g, const int *pending, int *step, int *walk) {
    int i = 0, n = 0;
    while (!pending[i]) i++;
    for (int k = 0; k < g->nnodes; k++) step[k] = -1;
    while (step[i] < 0) {
        step[i] = n;
        walk[n++] = i;
        const kiln_node *node = &g->nodes[i];
        for (int k = 0; k < node->ninputs; k++) {
            int v = node->inputs[k], p = v >= 0 ? g->values[v].producer : -1;
            if (p >= 0 && pending[p]) {
                i = p;
                break;
            }
        }
    }
    /* walk[s + 1] produces an input of walk[s]; the cycle is walk[first..n), and i = walk[first] produces
     * an input of walk[n - 1]: in execution order i, walk[n - 1], ..., walk[first + 1], i. */
    int first = step[i], len = n - first;
    char path[1536];
    size_t used = (size_t)snprintf(path, sizeof path, "'%s' (%s)", g->nodes[i].name, g->nodes[i].op_type);
    for (int s = n - 1; s >= first && used < sizeof path; s--) {
        const kiln_node *node = &g->nodes[s > first ? walk[s] : i];
        used += (size_t)snprintf(path + used, sizeof path - used, " -> '%s' (%s)", node->name, node->op_type);
    }
    return kiln_error(KILN_ERR_PARSE, "the graph has a cycle of %d node%s: %s", len, len == 1 ? "" : "s", path);
}

kiln_status kiln_graph_toposort(kiln_graph *g) {
    int nn = g->nnodes;
    if (!nn) return KILN_OK;
    /* Kahn's algorithm, stable: among ready nodes, keep the original order. */
    int *pending = calloc((size_t)nn, sizeof *pending);
    int *order = malloc((size_t)nn * sizeof *order);
    int *newid = malloc((size_t)nn * sizeof *newid);
    /* consumers as CSR over values */
    int nv = g->nvalues;
    int *cstart = calloc((size_t)nv + 1, sizeof *cstart);
    kiln_node *sorted = malloc((size_t)nn * sizeof *sorted);
    kiln_status st = KILN_OK;
    if (!pending || !order || !newid || !cstart || !sorted) {
        st = kiln_error(KILN_ERR_OUT_OF_MEMORY, "out of memory sorting the graph");
        goto done;
    }
    int total = 0;
    for (int i = 0; i < nn; i++)
        for (int k = 0; k < g->nodes[i].ninputs; k++) {
            int v = g->nodes[i].inputs[k];
            if (v < 0) continue;
            kiln_value *val = &g->values[v];
            if (val->producer >= 0) {
                pending[i]++;
                cstart[v + 1]++;
                total++;
            } else if (!val->constant && !val->is_input) {
                st = kiln_error(KILN_ERR_PARSE, "node '%s' (%s) reads '%s', which no node, input or initializer defines",
                                g->nodes[i].name, g->nodes[i].op_type, val->name);
                goto done;
            }
        }
    for (int v = 0; v < nv; v++) cstart[v + 1] += cstart[v];
    int *cons = malloc(((size_t)total + 1) * sizeof *cons);
    int *fill = calloc((size_t)nv, sizeof *fill);
    if (!cons || !fill) {
        free(cons);
        free(fill);
        st = kiln_error(KILN_ERR_OUT_OF_MEMORY, "out of memory sorting the graph");
        goto done;
    }
    for (int i = 0; i < nn; i++)
        for (int k = 0; k < g->nodes[i].ninputs; k++) {
            int v = g->nodes[i].inputs[k];
            if (v >= 0 && g->values[v].producer >= 0) cons[cstart[v] + fill[v]++] = i;
        }
    /* A min-heap would keep strict original order; a simple ready-scan is O(n^2) in the worst case,
     * so use a queue seeded in order and processed FIFO (valid topological order, close to original). */
    int head = 0, tail = 0;
    for (int i = 0; i < nn; i++)
        if (!pending[i]) order[tail++] = i;
    while (head < tail) {
        int i = order[head++];
        for (int k = 0; k < g->nodes[i].noutputs; k++) {
            int v = g->nodes[i].outputs[k];
            if (v < 0) continue;
            for (int c = cstart[v]; c < cstart[v + 1]; c++)
                if (--pending[cons[c]] == 0) order[tail++] = cons[c];
        }
    }
    free(cons);
    free(fill);
    if (tail != nn) {
        st = cycle_error(g, pending, newid, order);
        goto done;
    }
    for (int k = 0; k < nn; k++) {
        sorted[k] = g->nodes[order[k]];
        newid[order[k]] = k;
    }
    memcpy(g->nodes, sorted, (size_t)nn * sizeof *sorted);
    for (int v = 0; v < nv; v++)
        if (g->values[v].producer >= 0) g->values[v].producer = newid[g->values[v].producer];
done:
    free(pending);
    free(order);
    free(newid);
    free(cstart);
    free(sorted);
    return st;
}

/* Fails when a fully static output of n has a negative dim or holds more than
 * KILN_MAX_TENSOR_ELEMENTS elements: no run could allocate it, so the build says so, naming it. */
static kiln_status check_output_sizes(const kiln_graph *g, const kiln_node *n) {
    for (int k = 0; k < n->noutputs; k++) {
        if (n->outputs[k] < 0) continue;
        const kiln_value *v = &g->values[n->outputs[k]];
        bool static_shape = v->ndim >= 0, empty = false, negative = false;
        for (int d = 0; d < v->ndim && static_shape; d++) {
            static_shape = kiln_dim_is_static(v->dims[d]);
            empty |= v->dims[d].value == 0;
            negative |= v->dims[d].value < 0;
        }
        int64_t count = 1;
        for (int d = 0; d < v->ndim && static_shape && !empty && !negative && count <= KILN_MAX_TENSOR_ELEMENTS; d++)
            if (!kiln_mul_i64_ok(count, v->dims[d].value, &count)) count = INT64_MAX;
        if (static_shape && (negative || (!empty && count > KILN_MAX_TENSOR_ELEMENTS))) {
            char type[512];
            return kiln_error(KILN_ERR_SHAPE, "output '%s' would be %s, %s", v->name, kiln_value_type_str(g, v, type, sizeof type),
                              negative ? "a negative size" : "more than 2^40 elements");
        }
    }
    return KILN_OK;
}

kiln_status kiln_graph_infer_shapes(kiln_graph *g) {
    for (int i = 0; i < g->nnodes; i++) {
        kiln_node *n = &g->nodes[i];
        if (!n->schema) n->schema = kiln_op_schema_find(n->domain, n->op_type);
        if (!n->schema || !n->schema->infer) continue;
        kiln_status s = n->schema->infer(g, n);
        if (s == KILN_OK) s = check_output_sizes(g, n);
        if (s != KILN_OK) return kiln_error_prefix(s, "node '%s' (%s)", n->name, n->op_type);
    }
    return KILN_OK;
}

kiln_status kiln_graph_verify(const kiln_graph *g) {
    for (int i = 0; i < g->nnodes; i++) {
        const kiln_node *n = &g->nodes[i];
        for (int k = 0; k < n->ninputs; k++) {
            int v = n->inputs[k];
            if (v < -1 || v >= g->nvalues)
                return kiln_error(KILN_ERR_INTERNAL, "node '%s' input %d refers to value %d of %d", n->name, k, v, g->nvalues);
            if (v >= 0) {
                const kiln_value *val = &g->values[v];
                if (val->producer >= i)
                    return kiln_error(KILN_ERR_INTERNAL, "node '%s' reads '%s' before it is produced", n->name, val->name);
                if (val->producer < 0 && !val->constant && !val->is_input)
                    return kiln_error(KILN_ERR_INTERNAL, "node '%s' reads '%s', which nothing defines", n->name, val->name);
            }
        }
        for (int k = 0; k < n->noutputs; k++) {
            int v = n->outputs[k];
            if (v < -1 || v >= g->nvalues)
                return kiln_error(KILN_ERR_INTERNAL, "node '%s' output %d refers to value %d of %d", n->name, k, v, g->nvalues);
            if (v >= 0 && g->values[v].producer != i)
                return kiln_error(KILN_ERR_INTERNAL, "value '%s' has two producers (node '%s' and node %d)",
                                  g->values[v].name, n->name, g->values[v].producer);
            if (v >= 0 && g->values[v].constant)
                return kiln_error(KILN_ERR_INTERNAL, "node '%s' writes constant '%s'", n->name, g->values[v].name);
        }
    }
    for (int k = 0; k < g->noutputs; k++) {
        const kiln_value *v = &g->values[g->outputs[k]];
        if (v->producer < 0 && !v->constant && !v->is_input)
            return kiln_error(KILN_ERR_PARSE, "graph output '%s' is not produced by any node", v->name);
    }
    for (int k = 0; k < g->ninputs; k++) {
        const kiln_value *v = &g->values[g->inputs[k]];
        if (v->dtype == KILN_UNDEFINED || v->ndim < 0)
            return kiln_error(KILN_ERR_PARSE, "graph input '%s' has no tensor type or rank", v->name);
    }
    return KILN_OK;
}

kiln_status kiln_graph_compact(kiln_graph *g, int *removed_nodes) {
    int nn = g->nnodes, nv = g->nvalues;
    bool *live_node = calloc((size_t)nn + 1, 1), *live_val = calloc((size_t)nv + 1, 1);
    int *vmap = malloc(((size_t)nv + 1) * sizeof *vmap);
    if (!live_node || !live_val || !vmap) {
        free(live_node);
        free(live_val);
        free(vmap);
        return kiln_error(KILN_ERR_OUT_OF_MEMORY, "out of memory");
    }
    for (int k = 0; k < g->noutputs; k++) live_val[g->outputs[k]] = true;
    for (int k = 0; k < g->ninputs; k++) live_val[g->inputs[k]] = true;
    for (int i = nn - 1; i >= 0; i--) { /* nodes are in topological order */
        kiln_node *n = &g->nodes[i];
        for (int k = 0; k < n->noutputs && !live_node[i]; k++)
            if (n->outputs[k] >= 0 && live_val[n->outputs[k]]) live_node[i] = true;
        if (!live_node[i]) continue;
        for (int k = 0; k < n->ninputs; k++)
            if (n->inputs[k] >= 0) live_val[n->inputs[k]] = true;
        for (int k = 0; k < n->noutputs; k++)
            if (n->outputs[k] >= 0) live_val[n->outputs[k]] = true;
    }
    /* values: keep live ones, release dead constants */
    int nv2 = 0;
    for (int v = 0; v < nv; v++) {
        if (live_val[v]) {
            vmap[v] = nv2;
            g->values[nv2++] = g->values[v];
        } else {
            vmap[v] = -1;
            if (g->values[v].constant) kiln_tensor_release(g->values[v].constant);
        }
    }
    int nn2 = 0;
    for (int i = 0; i < nn; i++) {
        kiln_node *n = &g->nodes[i];
        if (!live_node[i]) {
            kiln_node_release_attrs(n);
            continue;
        }
        for (int k = 0; k < n->ninputs; k++)
            if (n->inputs[k] >= 0) n->inputs[k] = vmap[n->inputs[k]];
        for (int k = 0; k < n->noutputs; k++) {
            if (n->outputs[k] < 0) continue;
            n->outputs[k] = vmap[n->outputs[k]];
            if (n->outputs[k] >= 0) g->values[n->outputs[k]].producer = nn2;
        }
        g->nodes[nn2++] = *n;
    }
    for (int k = 0; k < g->ninputs; k++) g->inputs[k] = vmap[g->inputs[k]];
    for (int k = 0; k < g->noutputs; k++) g->outputs[k] = vmap[g->outputs[k]];
    if (removed_nodes) *removed_nodes = nn - nn2;
    g->nnodes = nn2;
    g->nvalues = nv2;
    free(live_node);
    free(live_val);
    free(vmap);
    return kiln_graph_reindex(g);
}

char *kiln_value_type_str(const kiln_graph *g, const kiln_value *v, char *buf, size_t cap) {
    size_t n = (size_t)snprintf(buf, cap, "%s", kiln_dtype_name(v->dtype));
    if (v->ndim < 0) {
        if (n < cap) snprintf(buf + n, cap - n, "[...]");
        return buf;
    }
    if (n < cap) n += (size_t)snprintf(buf + n, cap - n, "[");
    for (int d = 0; d < v->ndim && n < cap; d++) {
        kiln_dim dim = v->dims[d];
        const char *sep = d ? "," : "";
        if (dim.sym == 0) n += (size_t)snprintf(buf + n, cap - n, "%s%lld", sep, (long long)dim.value);
        else if (dim.sym > 0 && dim.sym <= g->nsymbols) n += (size_t)snprintf(buf + n, cap - n, "%s%s", sep, g->symbols[dim.sym - 1]);
        else n += (size_t)snprintf(buf + n, cap - n, "%s?", sep);
    }
    if (n < cap) snprintf(buf + n, cap - n, "]");
    return buf;
}

void kiln_graph_print(const kiln_graph *g, FILE *f) {
    char buf[256];
    fprintf(f, "inputs:\n");
    for (int k = 0; k < g->ninputs; k++) {
        const kiln_value *v = &g->values[g->inputs[k]];
        fprintf(f, "  %s: %s\n", v->name, kiln_value_type_str(g, v, buf, sizeof buf));
    }
    fprintf(f, "outputs:\n");
    for (int k = 0; k < g->noutputs; k++) {
        const kiln_value *v = &g->values[g->outputs[k]];
        fprintf(f, "  %s: %s\n", v->name, kiln_value_type_str(g, v, buf, sizeof buf));
    }
    fprintf(f, "layers (%d):\n", g->nnodes);
    for (int i = 0; i < g->nnodes; i++) {
        const kiln_node *n = &g->nodes[i];
        fprintf(f, "  %4d %-18s %s", i, n->op_type, n->name);
        fprintf(f, " (");
        for (int k = 0; k < n->ninputs; k++) {
            const kiln_value *v = kiln_node_input(g, n, k);
            fprintf(f, "%s%s", k ? ", " : "", v ? v->name : "-");
        }
        fprintf(f, ") ->");
        for (int k = 0; k < n->noutputs; k++) {
            const kiln_value *v = kiln_node_output(g, n, k);
            if (v) fprintf(f, " %s: %s", v->name, kiln_value_type_str(g, v, buf, sizeof buf));
        }
        fprintf(f, "\n");
    }
}
