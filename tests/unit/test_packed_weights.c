/* test_packed_weights.c — CPU weights stored packed in the engine file (packed_weights.h): a cpu
 * build stores the weights of Conv (row and column panels), Gemm and MatMul packed, the plain ones
 * are gone from the graph, and the engine gives bit-identical outputs to one built with plain
 * weights (same kernels) in memory and after a save/load round trip; an engine whose panels were
 * cut to another width on another ISA (a faked tag) is re-cut at load and still gives them; a tag
 * that disagrees with its constant or its node, and a truncated file, are refused with clear errors.
 * The same for a model of 3x3 stride-1 Convs that run by Winograd F(4x4, 3x3): their transforms are
 * stored (by rows and by tiles), and an engine whose Winograd choice differs from this kiln's (the
 * transforms stored for a Conv of few channels, row panels for one that this kiln runs by Winograd)
 * still runs on what it stores.
 * usage: test_packed_weights WORKDIR; test_packed_weights --write-seed DIR writes the fuzzer's seed
 * engine with packed weights (DIR/packed.seed, for fuzz/corpus/fuzz_engine/). */
#include "check.h"
#include "graph_build.h"

#include "backends/cpu/conv2d.h"
#include "backends/cpu/packed_gemm.h"
#include "backends/cpu/packed_weights.h"
#include "builder.h"
#include "engine/engine_format.h"
#include "runtime/engine_internal.h"

#include <math.h>
#include <stdint.h>

enum { BATCH = 6, OUTPUTS = 70, SE_OUTPUTS = 12, WINO_BATCH = 2, WINO_OUTPUTS = WINO_BATCH * 16 * 15 * 15 };

/* X [6, 3, 9, 9] -> Conv 3x3 pad 1 (81 positions: row panels) -> Relu -> Conv 3x3 stride 2 (16
 * positions: column panels) -> Flatten -> Gemm [128, 50] + C -> MatMul [50, 70]; and, as a second
 * output, the stride-2 Conv's GlobalAveragePool through a 1x1 Conv [12, 8] (one position: column
 * panels, which weights packed at load skip for a matrix-vector product on the plain ones). */
static kiln_graph *build_model(void) {
    begin(17);
    int64_t xd[4] = {BATCH, 3, 9, 9}, w1d[4] = {16, 3, 3, 3}, b1d[1] = {16}, w2d[4] = {8, 16, 3, 3};
    int64_t w3d[2] = {128, 50}, cd[1] = {50}, w4d[2] = {50, OUTPUTS}, pads[4] = {1, 1, 1, 1}, strides[2] = {2, 2};
    int x = input("x", KILN_F32, 4, xd);
    int c1[3] = {x, constant(KILN_F32, 4, w1d, NULL, -0.5, 0.5), constant(KILN_F32, 1, b1d, NULL, -0.1, 0.1)};
    int y = node_n("Conv", 3, c1, 1);
    attr_ints("pads", 4, pads);
    y = op1("Relu", y);
    y = op2("Conv", y, constant(KILN_F32, 4, w2d, NULL, -0.5, 0.5));
    attr_ints("strides", 2, strides);
    int64_t w5d[4] = {SE_OUTPUTS, 8, 1, 1};
    int se = op2("Conv", op1("GlobalAveragePool", y), constant(KILN_F32, 4, w5d, NULL, -0.5, 0.5));
    y = op1("Flatten", y);
    int gm[3] = {y, constant(KILN_F32, 2, w3d, NULL, -0.2, 0.2), constant(KILN_F32, 1, cd, NULL, -0.1, 0.1)};
    y = node_n("Gemm", 3, gm, 1);
    y = op2("MatMul", y, constant(KILN_F32, 2, w4d, NULL, -0.2, 0.2));
    output(y);
    output(se);
    return finish();
}

/* X [2, 16, 17, 17] -> Conv 3x3 pad 1 [20, 16] + B (289 positions: Winograd transforms by rows)
 * -> Relu -> Conv 3x3 [16, 20] (225 positions: by tiles); M = 20 fills neither last panel. */
static kiln_graph *build_winograd_model(void) {
    begin(17);
    int64_t xd[4] = {WINO_BATCH, 16, 17, 17}, w1d[4] = {20, 16, 3, 3}, b1d[1] = {20}, w2d[4] = {16, 20, 3, 3};
    int64_t pads[4] = {1, 1, 1, 1};
    int c1[3] = {input("x", KILN_F32, 4, xd), constant(KILN_F32, 4, w1d, NULL, -0.3, 0.3),
                 constant(KILN_F32, 1, b1d, NULL, -0.1, 0.1)};
    int y = node_n("Conv", 3, c1, 1);
    attr_ints("pads", 4, pads);
    output(op2("Conv", op1("Relu", y), constant(KILN_F32, 4, w2d, NULL, -0.3, 0.3)));
    return finish();
}

/* Builds model for the cpu, its weights stored packed or not. */
static kiln_engine *build_of(kiln_graph *model, bool packed) {
    kiln_build_options opts = {.target = "cpu", .cpu_packed_weights = packed ? KILN_SWITCH_ON : KILN_SWITCH_OFF};
    kiln_engine *e = NULL;
    REQUIRE_OK(kiln_build_graph(model, "test_packed_weights", &opts, &e));
    return e;
}

static kiln_engine *build_engine(bool packed) { return build_of(build_model(), packed); }

/* e's outputs on the fixed input, into y [BATCH * OUTPUTS] and se [BATCH * SE_OUTPUTS]; the status
 * of the run. */
static kiln_status run(kiln_engine *e, float *y, float *se) {
    static float x[BATCH * 3 * 9 * 9];
    for (size_t i = 0; i < sizeof x / sizeof *x; i++) x[i] = (float)((i * 7919) % 1000) / 500.0f - 1.0f;
    int64_t xd[4] = {BATCH, 3, 9, 9};
    kiln_context *c;
    KILN_TRY(kiln_context_create(e, &c));
    kiln_status s = kiln_context_set_input(c, "x", KILN_F32, 4, xd, x);
    if (s == KILN_OK) s = kiln_context_run(c);
    kiln_tensor_desc d;
    const void *data;
    if (s == KILN_OK) s = kiln_context_output(c, 0, &d, &data);
    if (s == KILN_OK && (d.ndim != 2 || d.dims[0] != BATCH || d.dims[1] != OUTPUTS))
        s = kiln_error(KILN_ERR_SHAPE, "unexpected output shape");
    if (s == KILN_OK) memcpy(y, data, sizeof(float) * BATCH * OUTPUTS);
    if (s == KILN_OK) s = kiln_context_output(c, 1, &d, &data);
    if (s == KILN_OK && kiln_numel(d.ndim, d.dims) != BATCH * SE_OUTPUTS)
        s = kiln_error(KILN_ERR_SHAPE, "unexpected second output shape");
    if (s == KILN_OK) memcpy(se, data, sizeof(float) * BATCH * SE_OUTPUTS);
    kiln_context_free(c);
    return s;
}

/* e's output on a fixed input, into y [WINO_OUTPUTS]; the status of the run. */
static kiln_status run_winograd(kiln_engine *e, float *y) {
    static float x[WINO_BATCH * 16 * 17 * 17];
    for (size_t i = 0; i < sizeof x / sizeof *x; i++) x[i] = (float)((i * 7919) % 1000) / 500.0f - 1.0f;
    int64_t xd[4] = {WINO_BATCH, 16, 17, 17};
    kiln_context *c;
    KILN_TRY(kiln_context_create(e, &c));
    kiln_status s = kiln_context_set_input(c, "x", KILN_F32, 4, xd, x);
    if (s == KILN_OK) s = kiln_context_run(c);
    kiln_tensor_desc d;
    const void *data;
    if (s == KILN_OK) s = kiln_context_output(c, 0, &d, &data);
    if (s == KILN_OK && kiln_numel(d.ndim, d.dims) != WINO_OUTPUTS)
        s = kiln_error(KILN_ERR_SHAPE, "unexpected Winograd model output shape");
    if (s == KILN_OK) memcpy(y, data, sizeof(float) * WINO_OUTPUTS);
    kiln_context_free(c);
    return s;
}

/* The nodes of g carrying the packed-weights tag, and of those the ones of each kind. */
static int tagged(const kiln_graph *g, int per_kind[KILN_PACKED_KINDS]) {
    int count = 0;
    memset(per_kind, 0, KILN_PACKED_KINDS * sizeof *per_kind);
    for (int i = 0; i < g->nnodes; i++) {
        const kiln_attr *a = kiln_node_attr(&g->nodes[i], KILN_PACKED_ATTR);
        if (!a || a->n != 6 || a->ints[0] < 0 || a->ints[0] >= KILN_PACKED_KINDS) continue;
        count++;
        per_kind[a->ints[0]]++;
        const kiln_value *w = &g->values[g->nodes[i].inputs[1]];
        CHECKF(w->constant->ndim == 1 && w->ndim >= 2, "node %s: a 1-D constant under its declared shape",
               g->nodes[i].name);
    }
    return count;
}

/* The tag of the first node of g with one of kind, or NULL. */
static kiln_attr *tag_of_kind(kiln_graph *g, int64_t kind, kiln_node **node) {
    for (int i = 0; i < g->nnodes; i++) {
        kiln_attr *a = (kiln_attr *)kiln_node_attr(&g->nodes[i], KILN_PACKED_ATTR);
        if (a && a->ints[0] == kind) {
            *node = &g->nodes[i];
            return a;
        }
    }
    return NULL;
}

/* Re-cuts every packed constant of g to panels of `width` and tags them as packed on `isa`. */
static void fake_foreign_packing(kiln_graph *g, int64_t width, int64_t isa) {
    for (int i = 0; i < g->nnodes; i++) {
        kiln_attr *a = (kiln_attr *)kiln_node_attr(&g->nodes[i], KILN_PACKED_ATTR);
        if (!a) continue;
        kiln_tensor *w = g->values[g->nodes[i].inputs[1]].constant;
        int64_t groups = a->ints[3], P = a->ints[4], L = a->ints[5], from = a->ints[2];
        int64_t per_from = (P + from - 1) / from * from * L, per_to = (P + width - 1) / width * width * L;
        int64_t floats = groups * per_to;
        kiln_tensor t = {0};
        REQUIRE_OK(kiln_tensor_alloc(&t, KILN_F32, 1, &floats));
        for (int64_t gr = 0; gr < groups; gr++)
            kiln_pg_repack_panels((const float *)w->data + gr * per_from, L, P, from, width,
                                  (float *)t.data + gr * per_to);
        kiln_tensor_release(w);
        *w = t;
        a->ints[1] = isa;
        a->ints[2] = width;
    }
}

/* Reads the engine at path, lets change() alter its graph, writes it to out. */
static void rewrite(const char *path, const char *out, void (*change)(kiln_graph *g, void *ctx), void *ctx) {
    kiln_graph *g;
    kiln_engine_meta meta;
    REQUIRE_OK(kiln_engine_file_read(path, NULL, &g, &meta));
    change(g, ctx);
    REQUIRE_OK(kiln_engine_file_write(g, &meta, out));
    kiln_graph_free(g);
}

static void to_width_16(kiln_graph *g, void *ctx) {
    (void)ctx;
    fake_foreign_packing(g, 16, kiln_pg_isa_best() == KILN_PG_AVX512 ? KILN_PG_AVX2 : KILN_PG_AVX512);
}

/* One corruption of the tag: the field to change, its new value, a word the error must name. */
typedef struct corruption {
    int64_t kind, field, value;
    const char *says;
} corruption;

static void corrupt_tag(kiln_graph *g, void *ctx) {
    const corruption *c = ctx;
    kiln_node *n;
    kiln_attr *a = tag_of_kind(g, c->kind, &n);
    REQUIRE_OK(a ? KILN_OK : KILN_ERR_INTERNAL);
    a->ints[c->field] = c->value;
}

/* Gives the first Winograd-rows node of g dilations of 2 (its transforms need 1). */
static void dilate_winograd(kiln_graph *g, void *ctx) {
    (void)ctx;
    kiln_node *n;
    REQUIRE_OK(tag_of_kind(g, KILN_PACKED_WINOGRAD_ROWS, &n) ? KILN_OK : KILN_ERR_INTERNAL);
    kiln_attr *a = kiln_node_add_attr(g, n, "dilations", KILN_ATTR_INTS);
    int64_t *ints = a ? kiln_graph_alloc(g, 2 * sizeof *ints) : NULL;
    REQUIRE_OK(ints ? KILN_OK : KILN_ERR_OUT_OF_MEMORY);
    ints[0] = ints[1] = 2;
    a->ints = ints;
    a->n = 2;
}

/* Stores the plain weight [M, Cg, 3, 3] of the first Conv of g (one group, stride 1) as panels of
 * *kind (Winograd rows or conv rows), tagged, as a kiln with another Winograd channel threshold would. */
static void store_other_choice(kiln_graph *g, void *ctx) {
    const int64_t kind = *(const int64_t *)ctx;
    kiln_node *n = NULL;
    for (int i = 0; i < g->nnodes && !n; i++)
        if (strstr(g->nodes[i].op_type, "Conv")) n = &g->nodes[i];
    REQUIRE_OK(n && !kiln_node_attr(n, KILN_PACKED_ATTR) ? KILN_OK : KILN_ERR_INTERNAL);
    kiln_tensor *w = g->values[n->inputs[1]].constant, t = {0};
    int64_t M = w->dims[0], Cg = w->dims[1], floats;
    kiln_packed_tag tag = {kind, kiln_pg_isa_current(), kiln_packed_width(kind), KILN_CONV2D_WINOGRAD_XI, M, Cg};
    if (kind == KILN_PACKED_WINOGRAD_ROWS) {
        floats = kiln_conv2d_winograd_floats(M, Cg, false);
        float *u = malloc((size_t)(KILN_CONV2D_WINOGRAD_XI * Cg) * sizeof *u);
        REQUIRE_OK(u ? kiln_tensor_alloc(&t, KILN_F32, 1, &floats) : KILN_ERR_OUT_OF_MEMORY);
        kiln_conv2d_winograd_pack(w->data, M, Cg, false, u, t.data);
        free(u);
    } else { /* rows panels: what kiln_conv2d_weights_pack makes off the Winograd path */
        kiln_conv2d_weights *pw = NULL;
        REQUIRE_OK(kiln_conv2d_weights_pack(w->data, M, Cg, 3, 3, 1, 1000, false, &pw));
        REQUIRE_OK(pw && !pw->winograd && !pw->by_columns ? KILN_OK : KILN_ERR_INTERNAL);
        floats = pw->group_floats;
        REQUIRE_OK(kiln_tensor_alloc(&t, KILN_F32, 1, &floats));
        memcpy(t.data, pw->data, (size_t)floats * sizeof(float));
        kiln_conv2d_weights_free(pw);
        tag = (kiln_packed_tag){kind, kiln_pg_isa_current(), kiln_packed_width(kind), 1, M, 9 * Cg};
    }
    kiln_tensor_release(w);
    *w = t;
    kiln_attr *a = kiln_node_add_attr(g, n, KILN_PACKED_ATTR, KILN_ATTR_INTS);
    int64_t *ints = a ? kiln_graph_alloc(g, 6 * sizeof *ints) : NULL;
    REQUIRE_OK(ints ? KILN_OK : KILN_ERR_OUT_OF_MEMORY);
    memcpy(ints, (int64_t[6]){tag.kind, tag.isa, tag.width, tag.groups, tag.P, tag.L}, sizeof(int64_t[6]));
    a->ints = ints;
    a->n = 6;
}

/* Counts the log lines that say weights were repacked at load. */
static void count_repacks(kiln_log_level level, const char *msg, void *user) {
    (void)level;
    *(int *)user += strstr(msg, "repacked") != NULL;
}

static void check_refused(const char *path, kiln_status want, const char *says) {
    kiln_engine *e = NULL;
    kiln_status s = kiln_engine_load(path, &e);
    CHECKF(s == want && !e && strstr(kiln_last_error(), says), "%s: status %d, error '%s', expected one naming '%s'",
           path, s, kiln_last_error(), says);
    kiln_engine_free(e);
}

/* Whether a is within a relative 1e-4 of b everywhere (Winograd and direct products round apart). */
static bool near_all(const float *a, const float *b, int count) {
    for (int i = 0; i < count; i++)
        if (!(fabsf(a[i] - b[i]) <= 1e-4f * (1.0f + fabsf(b[i])))) return false;
    return true;
}

/* The Winograd model: its transforms stored by rows and by tiles give the outputs of transforms
 * made at load bit for bit, in memory, after a round trip and re-cut from another width; tags that
 * disagree with the node are refused; row panels stored for its first Conv (a kiln that runs it
 * directly) still run. The files go to dir. */
static void check_winograd(const char *dir) {
    char path[1024], other[1024];
    snprintf(path, sizeof path, "%s/packed_winograd.kiln", dir);
    snprintf(other, sizeof other, "%s/packed_winograd_other.kiln", dir);
    static float want[WINO_OUTPUTS], got[WINO_OUTPUTS];
    kiln_engine *plain = build_of(build_winograd_model(), false), *packed = build_of(build_winograd_model(), true);
    int kinds[KILN_PACKED_KINDS];
    CHECKF(tagged(packed->g, kinds) == 2 && kinds[KILN_PACKED_WINOGRAD_ROWS] == 1 &&
               kinds[KILN_PACKED_WINOGRAD_TILES] == 1,
           "Winograd transforms stored: %d by rows, %d by tiles (want 1, 1)", kinds[3], kinds[4]);
    REQUIRE_OK(run_winograd(plain, want));
    CHECK_OK(run_winograd(packed, got));
    CHECKF(!memcmp(want, got, sizeof got), "stored Winograd transforms give the outputs of transforms made at load");
    CHECK_OK(kiln_engine_save(packed, path));
    kiln_engine *loaded = NULL;
    CHECK_OK(kiln_engine_load(path, &loaded));
    if (loaded) {
        memset(got, 0, sizeof got);
        CHECK_OK(run_winograd(loaded, got));
        CHECKF(!memcmp(want, got, sizeof got), "the loaded Winograd engine gives the same outputs");
        kiln_engine_free(loaded);
    }
    rewrite(path, other, to_width_16, NULL);
    loaded = NULL;
    CHECK_OK(kiln_engine_load(other, &loaded));
    if (loaded) {
        memset(got, 0, sizeof got);
        CHECK_OK(run_winograd(loaded, got));
        CHECKF(!memcmp(want, got, sizeof got), "Winograd transforms re-cut from another width give the same outputs");
        kiln_engine_free(loaded);
    }
    static const corruption bad_tags[] = {
        {KILN_PACKED_WINOGRAD_ROWS, 3, 35, "size"},                     /* 35 transforms, not 36 */
        {KILN_PACKED_WINOGRAD_ROWS, 4, 19, "declared"},                 /* M 19: the size, not W's M */
        {KILN_PACKED_WINOGRAD_TILES, 4, 17, "declared"},                /* M 17 in one panel of 48 */
        {KILN_PACKED_WINOGRAD_TILES, 0, KILN_PACKED_CONV_COLUMNS, "declared"}, /* 36 groups of a 1-group Conv */
        {KILN_PACKED_WINOGRAD_ROWS, 0, KILN_PACKED_MATMUL, "layout"},
    };
    for (size_t i = 0; i < sizeof bad_tags / sizeof *bad_tags; i++) {
        rewrite(path, other, corrupt_tag, (void *)&bad_tags[i]);
        check_refused(other, KILN_ERR_PARSE, bad_tags[i].says);
    }
    rewrite(path, other, dilate_winograd, NULL);
    check_refused(other, KILN_ERR_PARSE, "declared");

    CHECK_OK(kiln_engine_save(plain, path)); /* row panels for a Conv this kiln runs by Winograd */
    int64_t rows = KILN_PACKED_CONV_ROWS;
    rewrite(path, other, store_other_choice, &rows);
    loaded = NULL;
    CHECK_OK(kiln_engine_load(other, &loaded));
    if (loaded) {
        CHECKF(tagged(loaded->g, kinds) == 1 && kinds[KILN_PACKED_CONV_ROWS] == 1, "row panels on a Winograd Conv");
        CHECK_OK(run_winograd(loaded, got));
        CHECKF(near_all(got, want, WINO_OUTPUTS), "row panels stored for a Winograd Conv run it directly");
        kiln_engine_free(loaded);
    }
    kiln_engine_free(plain);
    kiln_engine_free(packed);
    remove(path);
    remove(other);
}

/* A tiny packed engine for the fuzzer (small seeds fuzz fast): X [1, 1, 2, 2] -> Conv 1x1 [2, 1]
 * (column panels) -> GlobalAveragePool -> Flatten -> Gemm [2, 2] (matmul panels). */
static int write_seed(const char *dir) {
    begin(17);
    int64_t xd[4] = {1, 1, 2, 2}, wd[4] = {2, 1, 1, 1}, gd[2] = {2, 2};
    int y = op2("Conv", input("x", KILN_F32, 4, xd), constant(KILN_F32, 4, wd, NULL, -1, 1));
    y = op1("Flatten", op1("GlobalAveragePool", y));
    output(op2("Gemm", y, constant(KILN_F32, 2, gd, NULL, -1, 1)));
    kiln_build_options opts = {.target = "cpu"};
    kiln_engine *e = NULL;
    REQUIRE_OK(kiln_build_graph(finish(), "packed_seed", &opts, &e));
    char path[1024];
    snprintf(path, sizeof path, "%s/packed.seed", dir);
    REQUIRE_OK(kiln_engine_save(e, path));
    kiln_engine_free(e);
    return 0;
}

int main(int argc, char **argv) {
    if (argc == 3 && !strcmp(argv[1], "--write-seed")) return write_seed(argv[2]);
    REQUIRE_OK(argc == 2 ? KILN_OK : KILN_ERR_INVALID_ARGUMENT);
    char path[1024], foreign[1024], bad[1024];
    snprintf(path, sizeof path, "%s/packed_weights.kiln", argv[1]);
    snprintf(foreign, sizeof foreign, "%s/packed_weights_foreign.kiln", argv[1]);
    snprintf(bad, sizeof bad, "%s/packed_weights_bad.kiln", argv[1]);
    static float want[BATCH * OUTPUTS], got[BATCH * OUTPUTS], se_want[BATCH * SE_OUTPUTS], se_got[BATCH * SE_OUTPUTS];

    kiln_engine *plain = build_engine(false), *packed = build_engine(true);
    int kinds[KILN_PACKED_KINDS];
    CHECKF(tagged(plain->g, kinds) == 0, "an OFF build stores no packed weights");
    CHECKF(tagged(packed->g, kinds) == 5 && kinds[KILN_PACKED_MATMUL] == 2 && kinds[KILN_PACKED_CONV_ROWS] == 1 &&
               kinds[KILN_PACKED_CONV_COLUMNS] == 2,
           "packed: %d matmul, %d conv rows, %d conv columns (want 2, 1, 2)", kinds[0], kinds[1], kinds[2]);
    REQUIRE_OK(run(plain, want, se_want));
    CHECK_OK(run(packed, got, se_got));
    CHECKF(!memcmp(want, got, sizeof got), "stored packed weights give the outputs of weights packed at load");
    for (int i = 0; i < BATCH * SE_OUTPUTS; i++) CHECK_NEAR(se_got[i], se_want[i], 1e-5);

    CHECK_OK(kiln_engine_save(packed, path));
    kiln_engine *loaded = NULL;
    CHECK_OK(kiln_engine_load(path, &loaded));
    if (loaded) {
        CHECKF(tagged(loaded->g, kinds) == 5, "the tags survive the round trip");
        memset(got, 0, sizeof got);
        CHECK_OK(run(loaded, got, se_got));
        CHECKF(!memcmp(want, got, sizeof got), "the loaded engine gives the same outputs");
        kiln_engine_free(loaded);
    }

    rewrite(path, foreign, to_width_16, NULL);
    loaded = NULL;
    int repacks = 0;
    kiln_log_set_callback(count_repacks, &repacks);
    CHECK_OK(kiln_engine_load(foreign, &loaded));
    kiln_log_set_callback(NULL, NULL);
    CHECKF(repacks == 1, "%d log lines about repacked weights (want one for the engine)", repacks);
    if (loaded) {
        memset(got, 0, sizeof got);
        CHECK_OK(run(loaded, got, se_got));
        for (int i = 0; i < BATCH * SE_OUTPUTS; i++) CHECK_NEAR(se_got[i], se_want[i], 1e-5);
        CHECKF(!memcmp(want, got, sizeof got), "panels re-cut at load from another ISA's width give the same outputs");
        kiln_engine_free(loaded);
    }

    static const corruption bad_tags[] = {
        {KILN_PACKED_MATMUL, 2, 0, "out of range"},                 /* width 0 */
        {KILN_PACKED_MATMUL, 2, 4096, "out of range"},              /* wider than any layout */
        {KILN_PACKED_MATMUL, 0, KILN_PACKED_CONV_ROWS, "layout"},   /* a conv layout on a MatMul */
        {KILN_PACKED_CONV_ROWS, 0, KILN_PACKED_MATMUL, "layout"},   /* a matmul layout on a Conv */
        {KILN_PACKED_MATMUL, 4, 97, "size"},                        /* P disagrees with the constant */
        {KILN_PACKED_MATMUL, 5, INT64_MAX / 2, "size"},             /* L overflows the size */
        {KILN_PACKED_CONV_ROWS, 3, 2, "size"},                      /* groups */
        {KILN_PACKED_MATMUL, 1, -1, "out of range"},                /* isa */
        {KILN_PACKED_CONV_ROWS, 4, 15, "declared"},   /* M 15 in 2 panels of 8: the constant's size, not W's M */
        {KILN_PACKED_MATMUL, 4, 60, "declared"},      /* Gemm N 60 in 2 panels of 48: the size, not B's N */
    };
    for (size_t i = 0; i < sizeof bad_tags / sizeof *bad_tags; i++) {
        rewrite(path, bad, corrupt_tag, (void *)&bad_tags[i]);
        check_refused(bad, KILN_ERR_PARSE, bad_tags[i].says);
    }
    FILE *f = fopen(path, "rb"), *o = fopen(bad, "wb"); /* the end of the packed panels cut off */
    REQUIRE_OK(f && o && !fseek(f, 0, SEEK_END) ? KILN_OK : KILN_ERR_IO);
    long size = ftell(f);
    rewind(f);
    char *buf = malloc((size_t)size);
    REQUIRE_OK(buf && fread(buf, 1, (size_t)size, f) == (size_t)size ? KILN_OK : KILN_ERR_IO);
    fwrite(buf, 1, (size_t)size - 100, o);
    fclose(o);
    fclose(f);
    free(buf);
    check_refused(bad, KILN_ERR_PARSE, "truncated");

    CHECK_OK(kiln_engine_save(plain, path)); /* Winograd transforms for a Conv of 3 input channels */
    int64_t winograd = KILN_PACKED_WINOGRAD_ROWS;
    rewrite(path, foreign, store_other_choice, &winograd);
    loaded = NULL;
    CHECK_OK(kiln_engine_load(foreign, &loaded));
    if (loaded) {
        CHECKF(tagged(loaded->g, kinds) == 1 && kinds[KILN_PACKED_WINOGRAD_ROWS] == 1,
               "transforms of a 3-channel Conv");
        CHECK_OK(run(loaded, got, se_got));
        CHECKF(near_all(got, want, BATCH * OUTPUTS) && near_all(se_got, se_want, BATCH * SE_OUTPUTS),
               "Winograd transforms stored for a Conv of few channels run by Winograd");
        kiln_engine_free(loaded);
    }
    check_winograd(argv[1]);

    kiln_engine_free(plain);
    kiln_engine_free(packed);
    remove(path);
    remove(foreign);
    remove(bad);
    return checks_report("test_packed_weights");
}
