/* io_fp16.c — the engine's float32 inputs and outputs become float16 (`kiln build --io-format fp16`,
 * as trtexec's --inputIOFormats=fp16:chw): each such graph input keeps its name and takes float16,
 * and a Cast to float32 feeds what read it; each such graph output keeps its name and is a Cast to
 * float16 of what produced it. Clients then send and receive half the bytes; the values are those of
 * the float32 engine rounded to float16 at both ends. Other dtypes stay as they are. */
#include "passes/passes.h"

#include "core/log.h"
#include "core/status.h"
#include "passes/pass_util.h"

#include <stdio.h>

/* Adds `Cast(from) -> to` converting to dtype `to_type`, named after the graph value it serves. */
static kiln_status add_cast(pass_ctx *c, int from, int to, kiln_dtype to_type, const char *value_name) {
    char name[300];
    snprintf(name, sizeof name, "%.250s/io_cast", value_name);
    int id;
    KILN_TRY(pass_add_node(c, "", "Cast", pass_onnx_opset(c->g, 13), name, 1, &from, to, &id));
    return pass_attr_int(c->g, &c->g->nodes[id], "to", (int64_t)to_type);
}

/* Every node input that reads value `from` reads `to` instead (pass_replace_uses refuses a graph
 * output, which `from` may also be). */
static void redirect_readers(pass_ctx *c, int from, int to) {
    for (int i = 0; i < c->g->nnodes; i++)
        for (int k = 0; k < c->g->nodes[i].ninputs; k++)
            if (c->g->nodes[i].inputs[k] == from) pass_set_input(c, i, k, to);
}

/* Graph input v (float32) becomes float16; its readers read a Cast of it to float32 instead. */
static kiln_status convert_input(pass_ctx *c, int v) {
    kiln_graph *g = c->g;
    int wide;
    KILN_TRY(pass_new_value(c, g->values[v].name, &wide));
    redirect_readers(c, v, wide);
    g->values[v].dtype = KILN_F16;
    KILN_TRY(add_cast(c, v, wide, KILN_F32, g->values[v].name));
    KILN_LOG(KILN_LOG_VERBOSE, "%s: input '%s' is float16, cast to float32 inside", c->pass, g->values[v].name);
    return KILN_OK;
}

/* Graph output v (float32, made by a node) becomes a Cast to float16 of the value its producer now
 * writes, which every other reader of v reads instead. */
static kiln_status convert_output(pass_ctx *c, int v) {
    kiln_graph *g = c->g;
    int narrow_src;
    KILN_TRY(pass_new_value(c, g->values[v].name, &narrow_src));
    int p = g->values[v].producer;
    kiln_node *n = &g->nodes[p];
    for (int k = 0; k < n->noutputs; k++)
        if (n->outputs[k] == v) n->outputs[k] = narrow_src;
    g->values[narrow_src].producer = p;
    redirect_readers(c, v, narrow_src);
    g->values[v].dtype = KILN_F16;
    KILN_TRY(add_cast(c, narrow_src, v, KILN_F16, g->values[v].name));
    KILN_LOG(KILN_LOG_VERBOSE, "%s: output '%s' is float16, cast from float32 inside", c->pass, g->values[v].name);
    return KILN_OK;
}

kiln_status kiln_pass_io_fp16(kiln_graph *g, bool *changed) {
    pass_ctx c;
    KILN_TRY(pass_begin(&c, g, "io_fp16"));
    kiln_status st = KILN_OK;
    int nin = g->ninputs, nout = g->noutputs; /* the lists do not grow: values change dtype in place */
    for (int i = 0; i < nin && !st; i++)
        if (g->values[g->inputs[i]].dtype == KILN_F32) st = convert_input(&c, g->inputs[i]);
    for (int i = 0; i < nout && !st; i++) {
        int v = g->outputs[i];
        /* a float32 output made by a node: not a graph input (converted above) nor a constant */
        if (g->values[v].dtype == KILN_F32 && g->values[v].producer >= 0) st = convert_output(&c, v);
    }
    return pass_end(&c, st, changed);
}
