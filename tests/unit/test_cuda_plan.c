/* test_cuda_plan.c — the host side of the cuda backend, which needs no GPU: node placement (device or
 * host-evaluated shape arithmetic), shape resolution per input-shape set, and the activation memory
 * plan. For the sample models at several batch sizes it checks that
 *   - every device value has a place in the arena, inside the planned size;
 *   - no two device buffers that are live at the same step overlap in memory;
 *   - the resolved shapes of the graph outputs equal what the cpu engine produces for the same inputs;
 *   - the planned peak is at most the naive sum;
 *   - a view value (the output of a Reshape-like node sharing its input's memory) sits at its root's
 *     offset, and the root's lifetime covers the view's readers;
 * that first-fit placement is right on hand-made lifetimes, and, on hand-made graphs, which view
 * nodes share their input's memory and which keep their copy: a chain Reshape -> Flatten -> consumer,
 * a view read after its source's own last reader (the source must stay live), views of a graph input
 * and of a constant, a view that is a graph output (copies), a view across precisions (copies),
 * Dropout with a mask (shares, still runs), and views off; and shape inputs (graph inputs
 * whose values decide shapes stay on the host and key the plan).
 * usage: test_cuda_plan [REPO_DIR] (default: $KILN_SOURCE_DIR, else .) */
#include "backends/cuda/cuda_internal.h"
#include "check.h"
#include "runtime/engine_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define EXPECT(cond, ...)                                                                          \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);                                   \
            fprintf(stderr, __VA_ARGS__);                                                          \
            fprintf(stderr, " [%s]\n", kiln_last_error());                                         \
            failures++;                                                                            \
        }                                                                                          \
    } while (0)

/* Hand-made lifetimes: overlapping ones are disjoint, disjoint ones share the arena. */
static void check_first_fit(void) {
    kiln_cuda_interval iv[] = {
        {1000, 0, 2, 0}, /* a: steps 0..2 */
        {1000, 1, 3, 0}, /* b: overlaps a */
        {1000, 3, 5, 0}, /* c: after a: may take a's place */
        {3000, 6, 7, 0}, /* d: after everything: reuses from 0 */
        {256, 2, 2, 0},  /* e: overlaps a and b */
    };
    size_t peak, naive;
    EXPECT(kiln_cuda_place(iv, 5, &peak, &naive) == KILN_OK, "place");
    EXPECT(naive == 3072 + 3 * 1024 + 256, "naive sum %zu", naive);
    EXPECT(iv[3].offset == 0, "d at %zu, expected 0", iv[3].offset);
    EXPECT(iv[0].offset != iv[1].offset, "a and b overlap");
    EXPECT(iv[2].offset == iv[0].offset, "c at %zu should reuse a's place %zu", iv[2].offset, iv[0].offset);
    EXPECT(iv[4].offset >= 2048, "e at %zu overlaps a or b", iv[4].offset);
    EXPECT(peak == 3072, "peak %zu, expected 3072", peak);
}

/* Runs the cpu engine on zero inputs of the given shapes and returns its output shapes in out[]. */
static kiln_status cpu_output_shapes(kiln_engine *e, const kiln_tensor *in, kiln_tensor *out) {
    kiln_context *c;
    KILN_TRY(kiln_context_create(e, &c));
    void *bufs[16] = {0};
    kiln_status s = KILN_OK;
    for (int k = 0; k < e->g->ninputs && s == KILN_OK; k++) {
        bufs[k] = calloc(1, (size_t)kiln_numel(in[k].ndim, in[k].dims) * kiln_dtype_size(in[k].dtype) + 1);
        s = kiln_context_set_input(c, e->g->values[e->g->inputs[k]].name, in[k].dtype, in[k].ndim, in[k].dims, bufs[k]);
    }
    if (s == KILN_OK) s = kiln_context_run(c);
    for (int k = 0; s == KILN_OK && k < e->g->noutputs; k++) {
        kiln_tensor_desc d;
        const void *data;
        s = kiln_context_output(c, k, &d, &data);
        out[k].dtype = d.dtype;
        out[k].ndim = d.ndim;
        memcpy(out[k].dims, d.dims, sizeof out[k].dims);
    }
    for (int k = 0; k < 16; k++) free(bufs[k]);
    kiln_context_free(c);
    return s;
}

/* Placement invariants of plan p of be: every device value inside the arena, no two buffers live at
 * the same step overlapping, views at their root's place with the root live as long as they are read.
 * *nplaced / *nviews get the counts of placed buffers and views. */
static void check_layout(const char *name, const kiln_backend_engine *be, const kiln_cuda_plan *p, int *nplaced_out,
                         int *nviews_out) {
    const kiln_graph *g = be->g;
    /* every device value placed inside the arena; no two live at once overlap; views sit at their
     * root's place (or read a constant) and their root lives as long as they are read */
    int nplaced = 0, nviews = 0;
    EXPECT(p->arena_bytes <= p->naive_bytes, "%s: peak %zu > naive %zu", name, p->arena_bytes, p->naive_bytes);
    for (int v = 0; v < g->nvalues; v++) {
        size_t bytes = kiln_cuda_value_bytes(be, p, v);
        bool device = be->kind[v] == KILN_CUDA_DEVICE && bytes && (g->values[v].producer >= 0 || g->values[v].is_input);
        if (!device) continue;
        int root = be->alias[v];
        if (root >= 0) {
            nviews++;
            EXPECT(be->alias[root] < 0, "%s: view '%s' has a view as its root", name, g->values[v].name);
            EXPECT(!g->values[v].is_output, "%s: view '%s' is a graph output", name, g->values[v].name);
            EXPECT(be->dev_dtype[root] == be->dev_dtype[v], "%s: view '%s' changes the device dtype", name,
                   g->values[v].name);
            EXPECT(kiln_cuda_value_bytes(be, p, root) == bytes || be->kind[root] == KILN_CUDA_CONST,
                   "%s: view '%s' has %zu bytes, its root %zu", name, g->values[v].name, bytes,
                   kiln_cuda_value_bytes(be, p, root));
            if (be->kind[root] == KILN_CUDA_DEVICE) {
                EXPECT(p->off[v] == p->off[root], "%s: view '%s' at %lld, its root '%s' at %lld", name, g->values[v].name,
                       (long long)p->off[v], g->values[root].name, (long long)p->off[root]);
                EXPECT(be->last_step[root] >= be->last_step[v], "%s: root '%s' dies at step %d before its view '%s' (%d)",
                       name, g->values[root].name, be->last_step[root], g->values[v].name, be->last_step[v]);
            } else {
                EXPECT(be->kind[root] == KILN_CUDA_CONST && p->off[v] < 0, "%s: view '%s' of a non-device value",
                       name, g->values[v].name);
            }
            continue;
        }
        nplaced++;
        EXPECT(p->off[v] >= 0 && (size_t)p->off[v] + bytes <= p->arena_bytes, "%s: value '%s' at %lld+%zu outside %zu",
               name, g->values[v].name, (long long)p->off[v], bytes, p->arena_bytes);
        int sv = g->values[v].is_input ? 0 : g->values[v].producer + 1;
        for (int w = v + 1; w < g->nvalues; w++) {
            size_t wb = kiln_cuda_value_bytes(be, p, w);
            if (be->kind[w] != KILN_CUDA_DEVICE || !wb || (g->values[w].producer < 0 && !g->values[w].is_input) ||
                be->alias[w] >= 0)
                continue;
            int sw = g->values[w].is_input ? 0 : g->values[w].producer + 1;
            bool live = sv <= be->last_step[w] && sw <= be->last_step[v];
            bool overlap = p->off[v] < p->off[w] + (int64_t)wb && p->off[w] < p->off[v] + (int64_t)bytes;
            EXPECT(!(live && overlap), "%s: '%s' and '%s' are live together and overlap", name, g->values[v].name,
                   g->values[w].name);
        }
    }
    *nplaced_out = nplaced;
    *nviews_out = nviews;
}

/* ---------------------------------------------------------------- views on hand-made graphs */

static kiln_graph *G; /* the graph being built */

static void gb_begin(void) {
    G = kiln_graph_create();
    REQUIRE_OK(G ? KILN_OK : KILN_ERR_OUT_OF_MEMORY);
    G->opsets = kiln_graph_alloc(G, sizeof *G->opsets);
    G->opsets[0].domain = "";
    G->opsets[0].version = 17;
    G->nopsets = 1;
}

/* A float32 graph input [n, 1024]; n < 0: a symbolic batch dim. */
static int gb_input(const char *name, int64_t n) {
    int id;
    REQUIRE_OK(kiln_graph_value(G, name, &id));
    kiln_value *v = &G->values[id];
    v->dtype = KILN_F32;
    v->ndim = 2;
    v->dims[0] = kiln_dim_static(n);
    if (n < 0) REQUIRE_OK(kiln_graph_symbol(G, "batch", &v->dims[0].sym));
    v->dims[1] = kiln_dim_static(1024);
    REQUIRE_OK(kiln_graph_add_input(G, id));
    return id;
}

/* A constant of dtype dt and the given dims, element i = i % 7. */
static int gb_const(kiln_dtype dt, int ndim, const int64_t *dims) {
    kiln_tensor t = {0};
    REQUIRE_OK(kiln_tensor_alloc(&t, dt, ndim, dims));
    for (int64_t i = 0; i < kiln_tensor_numel(&t); i++) kiln_tensor_set_f64(&t, i, (double)(i % 7));
    int id;
    REQUIRE_OK(kiln_graph_new_value(G, "const", &id));
    REQUIRE_OK(kiln_graph_set_constant(G, id, &t));
    return id;
}

/* Adds node `name` (op) reading ins[0..nin); its outputs (nout of them) go to out[]; returns out[0]. */
static int gb_node_n(const char *op, const char *name, int nin, const int *ins, int nout, int *out) {
    for (int k = 0; k < nout; k++) REQUIRE_OK(kiln_graph_new_value(G, name, &out[k]));
    REQUIRE_OK(kiln_graph_add_node(G, op, "", name, nin, ins, nout, out, NULL));
    return out[0];
}
static int gb_node(const char *op, const char *name, int nin, const int *ins) {
    int out;
    return gb_node_n(op, name, nin, ins, 1, &out);
}
static int gb_reshape(const char *name, int x, int64_t d0, int64_t d1) {
    int shape = gb_const(KILN_I64, 1, (int64_t[]){2});
    kiln_tensor *t = G->values[shape].constant;
    kiln_tensor_set_f64(t, 0, (double)d0);
    kiln_tensor_set_f64(t, 1, (double)d1);
    return gb_node("Reshape", name, 2, (int[]){x, shape});
}

static kiln_graph *gb_finish(void) {
    REQUIRE_OK(kiln_graph_resolve_ops(G, NULL));
    REQUIRE_OK(kiln_graph_toposort(G));
    REQUIRE_OK(kiln_graph_infer_shapes(G));
    REQUIRE_OK(kiln_graph_verify(G));
    kiln_graph *g = G;
    G = NULL;
    return g;
}

static int node_named(const kiln_graph *g, const char *name) {
    for (int i = 0; i < g->nnodes; i++)
        if (!strcmp(g->nodes[i].name, name)) return i;
    fprintf(stderr, "no node '%s'\n", name);
    exit(1);
}
static int out_of(const kiln_graph *g, const char *node) { return g->nodes[node_named(g, node)].outputs[0]; }
static int step_of(const kiln_graph *g, const char *node) { return node_named(g, node) + 1; }

/* A plan of be with every input at batch n (inputs are [n, 1024] or static); checks its layout. */
static kiln_cuda_plan *plan_at(const char *name, kiln_backend_engine *be, int64_t n) {
    const kiln_graph *g = be->g;
    kiln_tensor in[8] = {0};
    for (int k = 0; k < g->ninputs && k < 8; k++) {
        const kiln_value *v = &g->values[g->inputs[k]];
        in[k].dtype = v->dtype;
        in[k].ndim = v->ndim;
        for (int d = 0; d < v->ndim; d++) in[k].dims[d] = v->dims[d].sym ? n : v->dims[d].value;
    }
    kiln_cuda_plan *p;
    REQUIRE_OK(kiln_cuda_plan_create(be, in, &p));
    int nplaced, nviews;
    check_layout(name, be, p, &nplaced, &nviews);
    return p;
}

/* Do the arena ranges of values a and b (both placed) overlap under p? */
static bool overlaps(const kiln_backend_engine *be, const kiln_cuda_plan *p, int a, int b) {
    int64_t ea = p->off[a] + (int64_t)kiln_cuda_value_bytes(be, p, a), eb = p->off[b] + (int64_t)kiln_cuda_value_bytes(be, p, b);
    return p->off[a] < eb && p->off[b] < ea;
}

/* x -> Relu a -> Reshape r1 -> Flatten r2 -> Relu y: r1 and r2 are views of a, a lives until y's node. */
static void check_view_chain(void) {
    gb_begin();
    int x = gb_input("x", 8);
    int a = gb_node("Relu", "a", 1, &x);
    int r1 = gb_reshape("r1", a, 1024, 8);
    int r2 = gb_node("Flatten", "r2", 1, &r1);
    int y = gb_node("Relu", "y", 1, &r2);
    REQUIRE_OK(kiln_graph_add_output(G, y));
    kiln_graph *g = gb_finish();
    kiln_backend_engine *be;
    REQUIRE_OK(kiln_cuda_engine_prepare(g, KILN_PRECISION_FP32, NULL, false, true, &be));
    a = out_of(g, "a"), r1 = out_of(g, "r1"), r2 = out_of(g, "r2"), y = out_of(g, "y");
    EXPECT(be->alias[r1] == a && be->alias[r2] == a, "chain: r1 -> %d, r2 -> %d, want %d", be->alias[r1], be->alias[r2], a);
    EXPECT(be->view_node[node_named(g, "r1")] && be->view_node[node_named(g, "r2")], "chain: the views run a kernel");
    EXPECT(be->n_view_nodes == 2, "chain: %d view nodes", be->n_view_nodes);
    EXPECT(be->alias[y] < 0 && be->alias[a] < 0, "chain: a or y is a view");
    EXPECT(be->last_step[a] == step_of(g, "y"), "chain: a lives until step %d, want %d", be->last_step[a], step_of(g, "y"));
    EXPECT(be->static_inputs && be->static_alias == 2 * kiln_cuda_align(8 * 1024 * 4), "chain: views save %zu B",
           be->static_alias);
    kiln_cuda_plan *p = plan_at("chain", be, 8);
    EXPECT(p->off[r1] == p->off[a] && p->off[r2] == p->off[a], "chain: views not at a's place");
    EXPECT(!overlaps(be, p, y, a), "chain: y overlaps a, which y's node reads");
    EXPECT(p->naive_bytes >= p->arena_bytes + p->alias_bytes, "chain: naive %zu < peak %zu + views %zu", p->naive_bytes,
           p->arena_bytes, p->alias_bytes);
    EXPECT(p->alias_bytes == 2 * kiln_cuda_align(8 * 1024 * 4), "chain: alias bytes %zu", p->alias_bytes);
    kiln_cuda_plan_free(be, p);
    kiln_cuda_engine_free(be);
    /* views off (kiln_build_options.cuda_views, KILN_CUDA_VIEWS=0): every view copies */
    REQUIRE_OK(kiln_cuda_engine_prepare(g, KILN_PRECISION_FP32, NULL, false, false, &be));
    EXPECT(be->n_view_nodes == 0 && be->alias[r1] < 0 && be->alias[r2] < 0, "views off: views remain");
    EXPECT(be->last_step[a] == step_of(g, "r1"), "views off: a lives until %d", be->last_step[a]);
    p = plan_at("chain, no views", be, 8);
    EXPECT(p->alias_bytes == 0, "views off: alias bytes %zu", p->alias_bytes);
    kiln_cuda_plan_free(be, p);
    kiln_cuda_engine_free(be);
    kiln_graph_free(g);
}

/* The source of a view dies (its own last reader is the view) before the view's last reader: the
 * source must stay live, so that the buffers made meanwhile (c, d) do not take its place. The batch
 * dim is symbolic: two plans, each laid out on its own. */
static void check_view_outlives_source(void) {
    gb_begin();
    int x = gb_input("x", -1);
    int a = gb_node("Relu", "a", 1, &x);
    int v = gb_node("Identity", "v", 1, &a);
    int c = gb_node("Relu", "c", 1, &x);
    int d = gb_node("Relu", "d", 1, &c);
    int e = gb_node("Add", "e", 2, (int[]){d, v});
    int y = gb_node("Relu", "y", 1, &e);
    REQUIRE_OK(kiln_graph_add_output(G, y));
    kiln_graph *g = gb_finish();
    kiln_backend_engine *be;
    REQUIRE_OK(kiln_cuda_engine_prepare(g, KILN_PRECISION_FP16, NULL, false, true, &be));
    a = out_of(g, "a"), v = out_of(g, "v"), c = out_of(g, "c"), d = out_of(g, "d"), e = out_of(g, "e");
    EXPECT(be->alias[v] == a && be->view_node[node_named(g, "v")], "outlives: v is not a view of a");
    EXPECT(be->last_step[a] == step_of(g, "e"), "outlives: a lives until step %d, want %d (e reads v)", be->last_step[a],
           step_of(g, "e"));
    EXPECT(!be->static_inputs, "outlives: inputs should be dynamic");
    size_t last_arena = 0;
    for (int64_t n = 1; n <= 33; n += 32) {
        kiln_cuda_plan *p = plan_at("outlives", be, n);
        EXPECT(p->off[v] == p->off[a], "outlives batch %lld: v at %lld, a at %lld", (long long)n, (long long)p->off[v],
               (long long)p->off[a]);
        EXPECT(!overlaps(be, p, a, c) && !overlaps(be, p, a, d) && !overlaps(be, p, a, e),
               "outlives batch %lld: a buffer made while v is pending takes a's place", (long long)n);
        EXPECT(p->arena_bytes != last_arena, "outlives: the plans of batch 1 and 33 have the same arena");
        EXPECT(p->alias_bytes == kiln_cuda_align((size_t)n * 1024 * 2), "outlives batch %lld: alias bytes %zu",
               (long long)n, p->alias_bytes);
        last_arena = p->arena_bytes;
        kiln_cuda_plan_free(be, p);
    }
    kiln_cuda_engine_free(be);
    kiln_graph_free(g);
}

/* Views of a graph input and of a constant; views that are graph outputs keep their copy. */
static void check_view_boundaries(void) {
    gb_begin();
    int x = gb_input("x", 8), x2 = gb_input("x2", 8);
    int w = gb_const(KILN_F32, 1, (int64_t[]){8 * 1024});
    int vx = gb_reshape("vx", x, 1024, 8);
    int vw = gb_reshape("vw", w, 1024, 8);
    int c = gb_node("Relu", "c", 1, &vw);
    int d = gb_node("Relu", "d", 1, &c);
    int sum = gb_node("Add", "sum", 2, (int[]){vx, d});
    int o1 = gb_reshape("o1", sum, 8, 1024);
    int o2 = gb_node("Identity", "o2", 1, &x2);
    REQUIRE_OK(kiln_graph_add_output(G, o1));
    REQUIRE_OK(kiln_graph_add_output(G, o2));
    kiln_graph *g = gb_finish();
    kiln_backend_engine *be;
    REQUIRE_OK(kiln_cuda_engine_prepare(g, KILN_PRECISION_FP32, NULL, false, true, &be));
    x = g->inputs[0], x2 = g->inputs[1], w = g->nodes[node_named(g, "vw")].inputs[0];
    vx = out_of(g, "vx"), vw = out_of(g, "vw"), c = out_of(g, "c"), d = out_of(g, "d"), sum = out_of(g, "sum");
    o1 = out_of(g, "o1"), o2 = out_of(g, "o2");
    EXPECT(!be->host_exec[node_named(g, "vw")] && be->kind[w] == KILN_CUDA_CONST, "boundaries: vw is not a device view");
    EXPECT(be->alias[vx] == x && be->view_node[node_named(g, "vx")], "boundaries: vx is not a view of input x");
    EXPECT(be->last_step[x] == step_of(g, "sum"), "boundaries: input x lives until %d, want %d", be->last_step[x],
           step_of(g, "sum"));
    EXPECT(be->alias[vw] == w && be->view_node[node_named(g, "vw")], "boundaries: vw is not a view of constant w");
    EXPECT(be->needs_device[w], "boundaries: w has no device copy");
    EXPECT(be->alias[o1] < 0 && !be->view_node[node_named(g, "o1")], "boundaries: graph output o1 is a view");
    EXPECT(be->alias[o2] < 0 && !be->view_node[node_named(g, "o2")], "boundaries: graph output o2 is a view");
    EXPECT(be->n_view_nodes == 2, "boundaries: %d view nodes", be->n_view_nodes);
    kiln_cuda_plan *p = plan_at("boundaries", be, 8);
    EXPECT(p->off[vx] == p->off[x], "boundaries: vx not at x's place");
    EXPECT(p->off[vw] < 0, "boundaries: the view of a constant has an arena place %lld", (long long)p->off[vw]);
    EXPECT(!overlaps(be, p, x, c) && !overlaps(be, p, x, d), "boundaries: c or d takes input x's place");
    EXPECT(p->off[o1] >= 0 && !overlaps(be, p, o1, sum), "boundaries: o1 has no place of its own");
    EXPECT(p->off[o2] >= 0 && !overlaps(be, p, o2, x2), "boundaries: o2 has no place of its own");
    kiln_cuda_plan_free(be, p);
    kiln_cuda_engine_free(be);
    kiln_graph_free(g);
}

/* A view across precisions (fp32 producer, fp16 Reshape) copies; Dropout with a mask shares its
 * data but still runs (the mask); Dropout without one is a view node. */
static void check_view_precision_dropout(void) {
    gb_begin();
    int x = gb_input("x", 8);
    int a = gb_node("Relu", "a", 1, &x);
    int r = gb_reshape("r", a, 1024, 8);
    int b = gb_node("Relu", "b", 1, &r);
    int dm[2];
    gb_node_n("Dropout", "dm", 1, &a, 2, dm);
    int dz = gb_node("Dropout", "dz", 1, &a);
    int y = gb_node("Add", "y", 2, (int[]){dm[0], dz});
    REQUIRE_OK(kiln_graph_add_output(G, b));
    REQUIRE_OK(kiln_graph_add_output(G, y));
    REQUIRE_OK(kiln_graph_add_output(G, dm[1]));
    kiln_graph *g = gb_finish();
    uint8_t *prec = calloc((size_t)g->nnodes, 1);
    for (int i = 0; i < g->nnodes; i++) prec[i] = KILN_PRECISION_FP32;
    prec[node_named(g, "r")] = KILN_PRECISION_FP16;
    prec[node_named(g, "b")] = KILN_PRECISION_FP16;
    kiln_backend_engine *be;
    REQUIRE_OK(kiln_cuda_engine_prepare(g, KILN_PRECISION_FP32, prec, false, true, &be));
    a = out_of(g, "a"), r = out_of(g, "r");
    int dmo = out_of(g, "dm"), dzo = out_of(g, "dz");
    EXPECT(be->dev_dtype[a] == KILN_F32 && be->dev_dtype[r] == KILN_F16, "precision: dtypes %s -> %s",
           kiln_dtype_name(be->dev_dtype[a]), kiln_dtype_name(be->dev_dtype[r]));
    EXPECT(be->alias[r] < 0 && !be->view_node[node_named(g, "r")], "precision: an fp32 -> fp16 Reshape is a view");
    EXPECT(be->alias[dmo] == a && !be->view_node[node_named(g, "dm")], "dropout: with a mask: alias %d, view node %d",
           be->alias[dmo], be->view_node[node_named(g, "dm")]);
    EXPECT(be->alias[dzo] == a && be->view_node[node_named(g, "dz")], "dropout: without a mask is not a view node");
    kiln_cuda_plan *p = plan_at("precision/dropout", be, 8);
    EXPECT(p->off[dmo] == p->off[a] && p->off[dzo] == p->off[a], "dropout: not at a's place");
    EXPECT(p->off[r] >= 0 && !overlaps(be, p, r, a), "precision: r shares a's place");
    kiln_cuda_plan_free(be, p);
    kiln_cuda_engine_free(be);
    free(prec);
    kiln_graph_free(g);
}

/* An int64 graph input [n]. */
static int gb_int_input(const char *name, int64_t n) {
    int id;
    REQUIRE_OK(kiln_graph_value(G, name, &id));
    kiln_value *v = &G->values[id];
    v->dtype = KILN_I64;
    v->ndim = 1;
    v->dims[0] = kiln_dim_static(n);
    REQUIRE_OK(kiln_graph_add_input(G, id));
    return id;
}

/* Shape inputs: 'shape' (Reshape's shape) and 'rows' (through a host Concat into a second Reshape)
 * stay on the host and key the plan with their values; 'idx' (Gather indices, data) stays on the
 * device; a plan without the shape inputs' values is refused. */
static void check_shape_inputs(void) {
    gb_begin();
    int x = gb_input("x", 8);
    int shape = gb_int_input("shape", 2), rows = gb_int_input("rows", 1), idx = gb_int_input("idx", 3);
    int r = gb_node("Reshape", "r", 2, (int[]){x, shape});
    int minus1 = gb_const(KILN_I64, 1, (int64_t[]){1});
    kiln_tensor_set_f64(G->values[minus1].constant, 0, -1);
    int cat = gb_node("Concat", "cat", 2, (int[]){rows, minus1});
    kiln_node_add_attr(G, &G->nodes[G->nnodes - 1], "axis", KILN_ATTR_INT)->i = 0;
    int r2 = gb_node("Reshape", "r2", 2, (int[]){x, cat});
    int gat = gb_node("Gather", "gat", 2, (int[]){x, idx});
    REQUIRE_OK(kiln_graph_add_output(G, gb_node("Relu", "y", 1, &r)));
    REQUIRE_OK(kiln_graph_add_output(G, gb_node("Relu", "y2", 1, &r2)));
    REQUIRE_OK(kiln_graph_add_output(G, gb_node("Relu", "y3", 1, &gat)));
    kiln_graph *g = gb_finish();
    kiln_backend_engine *be;
    REQUIRE_OK(kiln_cuda_engine_prepare(g, KILN_PRECISION_FP16, NULL, false, true, &be));
    shape = g->inputs[1], rows = g->inputs[2], idx = g->inputs[3];
    EXPECT(be->kind[shape] == KILN_CUDA_HOST && be->kind[rows] == KILN_CUDA_HOST, "shape inputs: kinds %d %d",
           be->kind[shape], be->kind[rows]);
    EXPECT(be->kind[idx] == KILN_CUDA_DEVICE, "shape inputs: Gather's indices left the device");
    EXPECT(be->n_shape_inputs == 2 && !be->static_inputs, "shape inputs: %d, static %d", be->n_shape_inputs,
           be->static_inputs);
    EXPECT(be->host_exec[node_named(g, "cat")] != NULL, "shape inputs: Concat of a shape input is not on the host");
    int64_t shape_v[2] = {256, 32}, rows_v[1] = {64}, idx_v[3] = {0, 1, 2};
    kiln_tensor in[4] = {0};
    float xdata[1];
    kiln_tensor_view(&in[0], KILN_F32, 2, (int64_t[]){8, 1024}, xdata);
    kiln_tensor_view(&in[1], KILN_I64, 1, (int64_t[]){2}, shape_v);
    kiln_tensor_view(&in[2], KILN_I64, 1, (int64_t[]){1}, rows_v);
    kiln_tensor_view(&in[3], KILN_I64, 1, (int64_t[]){3}, idx_v);
    kiln_cuda_plan *p;
    REQUIRE_OK(kiln_cuda_plan_create(be, in, &p));
    r = out_of(g, "r"), r2 = out_of(g, "r2");
    EXPECT(p->vals[r].dims[0].value == 256 && p->vals[r].dims[1].value == 32, "shape inputs: r is not [256, 32]");
    EXPECT(p->vals[r2].dims[0].value == 64 && p->vals[r2].dims[1].value == 128, "shape inputs: r2 is not [64, 128]");
    EXPECT(p->shape_vals_len == 3 * sizeof(int64_t), "shape inputs: %zu key bytes", p->shape_vals_len);
    EXPECT(p->in_pin[1] == p->in_pin[2] && p->in_pin[2] == p->in_pin[3], "shape inputs: staging room for them");
    int nplaced, nviews;
    check_layout("shape inputs", be, p, &nplaced, &nviews);
    kiln_cuda_plan_free(be, p);
    in[1].data = NULL;
    EXPECT(kiln_cuda_plan_create(be, in, &p) == KILN_ERR_INVALID_ARGUMENT &&
           strstr(kiln_last_error(), "'shape' is a shape input"), "shape inputs: a plan without values was made");
    kiln_cuda_engine_free(be);
    kiln_graph_free(g);
}

/* Checks one plan of be: placement invariants and output shapes against the cpu engine. */
static void check_plan(const char *name, kiln_engine *cpu, kiln_backend_engine *be, int64_t batch, int64_t seq) {
    const kiln_graph *g = be->g;
    kiln_tensor in[16] = {0}, want[16] = {0};
    if (g->ninputs > 16 || g->noutputs > 16) return;
    for (int k = 0; k < g->ninputs; k++) {
        const kiln_value *v = &g->values[g->inputs[k]];
        in[k].dtype = v->dtype;
        in[k].ndim = v->ndim;
        for (int d = 0; d < v->ndim; d++) in[k].dims[d] = v->dims[d].sym == 0 ? v->dims[d].value : d == 0 ? batch : seq;
    }
    kiln_cuda_plan *p;
    kiln_status s = kiln_cuda_plan_create(be, in, &p);
    EXPECT(s == KILN_OK, "%s batch %lld: plan", name, (long long)batch);
    if (s != KILN_OK) return;
    int nplaced, nviews;
    check_layout(name, be, p, &nplaced, &nviews);
    /* output shapes equal the cpu engine's */
    s = cpu_output_shapes(cpu, in, want);
    EXPECT(s == KILN_OK, "%s batch %lld: cpu run", name, (long long)batch);
    for (int k = 0; s == KILN_OK && k < g->noutputs; k++) {
        const kiln_value *v = &p->vals[g->outputs[k]];
        bool same = v->ndim == want[k].ndim;
        for (int d = 0; same && d < v->ndim; d++) same = v->dims[d].value == want[k].dims[d];
        char a[128], b[128];
        int64_t got[KILN_MAX_DIMS];
        for (int d = 0; d < v->ndim && d < KILN_MAX_DIMS; d++) got[d] = v->dims[d].value;
        EXPECT(same, "%s batch %lld: output %d resolved to %s, the cpu engine gives %s", name, (long long)batch, k,
               kiln_shape_str(a, sizeof a, v->ndim, got), kiln_shape_str(b, sizeof b, want[k].ndim, want[k].dims));
    }
    printf("  %-34s batch %lld: %4d device buffers + %3d views, activations %8.3f MB planned vs %8.3f MB naive "
           "(views %6.3f MB), host values %zu B\n", name, (long long)batch, nplaced, nviews, (double)p->arena_bytes / 1e6,
           (double)p->naive_bytes / 1e6, (double)p->alias_bytes / 1e6, p->host_dev_bytes);
    kiln_cuda_plan_free(be, p);
}

int main(int argc, char **argv) {
    const char *root = argc > 1 ? argv[1] : getenv("KILN_SOURCE_DIR") ? getenv("KILN_SOURCE_DIR") : ".";
    static const char *const models[] = {
        "models/sample_cnn.onnx",
        "tests/data/torch/mobilenet_v2_torchscript.onnx",
        "tests/data/torch/mobilenet_v2_dynamo.onnx",
        "tests/data/torch/mobilenet_v3_torchscript.onnx",
        "tests/data/torch/mobilenet_v3_dynamo.onnx",
        "tests/data/torch/bert_torchscript.onnx",
        "tests/data/torch/bert_dynamo.onnx",
        "tests/data/torch/gpt2_dynamo.onnx",
        "tests/data/torch/llama_dynamo.onnx",
    };
    check_first_fit();
    check_view_chain();
    check_view_outlives_source();
    check_view_boundaries();
    check_view_precision_dropout();
    check_shape_inputs();
    if (failures) fprintf(stderr, "test_cuda_plan: view checks failed\n");
    for (size_t i = 0; i < sizeof models / sizeof *models; i++) {
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", root, models[i]);
        kiln_engine *cpu;
        if (kiln_build_onnx(path, NULL, &cpu) != KILN_OK) {
            EXPECT(0, "%s: build", models[i]);
            continue;
        }
        const char *name = strrchr(models[i], '/') + 1;
        for (int prec = KILN_PRECISION_FP32; prec <= KILN_PRECISION_FP16; prec++) {
            kiln_backend_engine *be;
            kiln_status s = kiln_cuda_engine_prepare(cpu->g, (kiln_precision)prec, NULL, false, true, &be);
            EXPECT(s == KILN_OK, "%s: prepare", models[i]);
            if (s != KILN_OK) continue;
            if (prec == KILN_PRECISION_FP32)
                printf("%s: %d device nodes (%d views), %d host-evaluated nodes\n", name, be->n_device_nodes,
                       be->n_view_nodes, be->n_host_nodes);
            for (int64_t batch = 1; batch <= 3; batch += 2) check_plan(name, cpu, be, batch, 7);
            kiln_cuda_engine_free(be);
        }
        kiln_engine_free(cpu);
    }
    if (failures) {
        fprintf(stderr, "test_cuda_plan: %d check(s) failed\n", failures);
        return 1;
    }
    printf("cuda plans: all checks passed\n");
    return 0;
}
