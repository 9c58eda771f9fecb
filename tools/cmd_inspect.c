/* cmd_inspect.c — `kiln inspect FILE`: for an engine, its header, I/O, layers and sizes (an LLM engine:
 * cmd_inspect_llm.c); for an ONNX model, the same plus every node kiln cannot run yet, all at once
 * (before a build would stop at the first). */
#include "cli.h"

#include "engine/engine_format.h"
#include "frontends/onnx/onnx_import.h"
#include "ir/op_schema.h"
#include "ir/quant_ops.h"
#include "layer_precision.h"
#include "runtime/engine_internal.h"
#include "runtime/profiles.h"

#include <stdio.h>
#include <string.h>

static const char *USAGE =
    "usage: kiln inspect ENGINE.kiln|MODEL.onnx [--no-layers]\n"
    "\n"
    "Shows the inputs, outputs, layers (with shapes) and parameter bytes of an engine or a model; for an\n"
    "engine also the precision of each layer and the optimization profiles. For an LLM engine (kiln build\n"
    "--hf): the model's config, the weights' precision, parameter count and bytes, the tokenizer, and\n"
    "every weight tensor.\n"
    "For an ONNX model, also lists every node kiln cannot run (op, opset, node name).\n"
    "\n"
    "options:\n"
    "  --no-layers   print the summary only\n"
    "  -h, --help    this help\n";

static size_t constant_bytes(const kiln_graph *g, int *count) {
    size_t bytes = 0;
    *count = 0;
    for (int v = 0; v < g->nvalues; v++)
        if (g->values[v].constant) {
            bytes += g->values[v].constant->nbytes;
            ++*count;
        }
    return bytes;
}

static void print_summary(const kiln_graph *g, bool layers) {
    int nconst;
    size_t bytes = constant_bytes(g, &nconst);
    printf("parameters: %d tensors, %zu bytes (%.2f MB)\n", nconst, bytes, (double)bytes / 1e6);
    if (layers) {
        kiln_graph_print(g, stdout);
    } else {
        char buf[256];
        printf("inputs:\n");
        for (int k = 0; k < g->ninputs; k++)
            printf("  %s: %s\n", g->values[g->inputs[k]].name, kiln_value_type_str(g, &g->values[g->inputs[k]], buf, sizeof buf));
        printf("outputs:\n");
        for (int k = 0; k < g->noutputs; k++)
            printf("  %s: %s\n", g->values[g->outputs[k]].name, kiln_value_type_str(g, &g->values[g->outputs[k]], buf, sizeof buf));
        printf("layers: %d\n", g->nnodes);
    }
}

static int inspect_onnx(const char *path, bool layers) {
    kiln_graph *g;
    if (kiln_onnx_import(path, &g) != KILN_OK) return cli_fail();
    printf("model: %s (ONNX IR version %lld, producer '%s')\n", path, (long long)g->ir_version, g->producer);
    printf("opsets:");
    for (int i = 0; i < g->nopsets; i++)
        printf(" %s%s%lld", g->opsets[i].domain[0] ? g->opsets[i].domain : "ai.onnx", "=", (long long)g->opsets[i].version);
    printf("\n");
    printf("unsupported nodes:\n");
    kiln_status s = kiln_graph_resolve_ops(g, stdout);
    int unsupported = 0;
    for (int i = 0; i < g->nnodes; i++) unsupported += g->nodes[i].schema == NULL;
    /* What a build checks next, where it would stop even with every op implemented: a cycle, a shape
     * inference error (unsupported nodes are skipped, their outputs unknown), a structural fault. */
    char why[1024] = "";
    if (kiln_graph_toposort(g) != KILN_OK) snprintf(why, sizeof why, "%s", kiln_last_error());
    else if (kiln_graph_infer_shapes(g) != KILN_OK) snprintf(why, sizeof why, "shape inference: %s", kiln_last_error());
    else if (kiln_graph_verify(g) != KILN_OK) snprintf(why, sizeof why, "%s", kiln_last_error());
    if (s == KILN_OK && !why[0]) printf("  none: kiln can run every node\n");
    else if (s == KILN_OK) printf("  none: kiln implements every op, but the graph cannot run\n");
    else printf("  %d of %d nodes cannot run\n", unsupported, g->nnodes);
    if (why[0]) printf("cannot run: %s\n", why);
    print_summary(g, layers);
    kiln_graph_free(g);
    if (why[0]) fprintf(stderr, "kiln: error: %s: %s\n", path, why);
    return unsupported || why[0] ? 1 : 0;
}

/* The optimization profiles, one line per profile. */
static void print_profiles(const kiln_engine *e) {
    const kiln_graph *g = e->g;
    if (!e->meta.nprofiles) {
        printf("optimization profiles: none (any shape the input dims allow)\n");
        return;
    }
    printf("optimization profiles: %d (a run uses the first that holds its input shapes)\n", e->meta.nprofiles);
    for (int p = 0; p < e->meta.nprofiles; p++) {
        printf("  profile %d:", p);
        for (int k = 0; k < g->ninputs; k++) {
            char range[512];
            printf("%s %s %s", k ? ";" : "", g->values[g->inputs[k]].name,
                   kiln_profile_range_str(&e->meta.profiles[p * g->ninputs + k], range, sizeof range));
        }
        printf("\n");
    }
}

/* The precision of every layer: one line when they all share the engine's, else one per layer. */
static void print_precisions(const kiln_engine *e, bool layers) {
    const kiln_graph *g = e->g;
    const uint8_t *np = e->meta.node_precision;
    int count[3] = {0, 0, 0};
    for (int i = 0; i < g->nnodes; i++) count[np ? np[i] % 3 : e->meta.precision]++;
    int q = kiln_graph_int8_layers(g);
    if (q) printf("int8: %d integer layer%s (kiln.QConv, kiln.QMatMul; docs/quantization.md)\n", q, q > 1 ? "s" : "");
    if (count[e->meta.precision] == g->nnodes) {
        printf("precision: %s, every layer\n", kiln_precision_name(e->meta.precision));
        return;
    }
    printf("precision: %s engine; layers: %d fp32, %d fp16, %d bf16 (--layer-precision)\n",
           kiln_precision_name(e->meta.precision), count[0], count[1], count[2]);
    for (int i = 0; layers && i < g->nnodes; i++)
        printf("  %s  %s (%s)%s\n", kiln_precision_name((kiln_precision)np[i]), g->nodes[i].name, g->nodes[i].op_type,
               np[i] != e->meta.precision ? "  <- overridden" : "");
}

static int inspect_engine(const char *path, bool layers) {
    kiln_engine *e;
    if (kiln_engine_load(path, &e) != KILN_OK) return cli_fail();
    const kiln_engine_meta *m = &e->meta;
    char when[96];
    printf("engine: %s\n", path);
    printf("built by: kiln %s on %s from %s\n", m->kiln_version, cli_utc_time(m->created_unix, when, sizeof when), m->source);
    printf("target: %s (%s)\n", m->target, m->device);
    printf("build options: %s\n", m->build_options);
    if (e->backend->describe) e->backend->describe(e->be, stdout);
    print_precisions(e, layers);
    print_profiles(e);
    print_summary(e->g, layers);
    kiln_engine_free(e);
    return 0;
}

int kiln_cmd_inspect(int argc, char **argv) {
    const char *path = NULL;
    bool layers = true;
    for (int i = 1; i < argc; i++) {
        if (cli_is_help(argv[i])) {
            fputs(USAGE, stdout);
            return 0;
        } else if (!strcmp(argv[i], "--no-layers")) {
            layers = false;
        } else if (argv[i][0] == '-') {
            return cli_usage_error("inspect ", "unknown option '%s'", argv[i]);
        } else if (!path) {
            path = argv[i];
        } else {
            return cli_usage_error("inspect ", "unexpected argument '%s'", argv[i]);
        }
    }
    if (!path) return cli_usage_error("inspect ", "a file is required");
    if (!cli_is_engine_file(path)) return inspect_onnx(path, layers);
    kiln_engine_kind kind;
    if (kiln_engine_file_kind(path, &kind) == KILN_OK && kind == KILN_ENGINE_KIND_LLM) return cli_inspect_llm(path, layers);
    return inspect_engine(path, layers);
}
