/* compare_run.c — runs a reference engine and an engine under test on the same inputs and compares
 * every output they share by name, listed in the reference's execution order, so that in per-layer
 * mode (both built with every intermediate marked as an output) the first failing item is the first
 * layer that diverges. */
#include "compare/compare.h"

#include "core/status.h"
#include "runtime/engine_internal.h"

#include <stdlib.h>
#include <string.h>

void kiln_compare_result_free(kiln_compare_result *r) {
    if (!r) return;
    free(r->items);
    memset(r, 0, sizeof *r);
}

/* Binds inputs (ref's order) on c of engine e by name and runs it; side names it in messages. */
static kiln_status run_side(kiln_engine *ref, kiln_engine *e, kiln_context *c, const kiln_tensor *inputs,
                            const char *side) {
    kiln_status s = KILN_OK;
    for (int i = 0; i < kiln_engine_num_inputs(ref) && s == KILN_OK; i++) {
        kiln_tensor_desc d;
        kiln_engine_input(ref, i, &d);
        s = kiln_context_set_input(c, d.name, inputs[i].dtype, inputs[i].ndim, inputs[i].dims, inputs[i].data);
    }
    if (s == KILN_OK && kiln_engine_num_inputs(e) != kiln_engine_num_inputs(ref))
        s = kiln_error(KILN_ERR_INVALID_ARGUMENT, "the engine under test has %d inputs, the reference %d: they are not "
                       "the same model", kiln_engine_num_inputs(e), kiln_engine_num_inputs(ref));
    if (s == KILN_OK) s = kiln_context_run(c);
    return s == KILN_OK ? s : kiln_error_prefix(s, "%s", side);
}

static int by_order(const void *a, const void *b) {
    const kiln_compare_item *x = a, *y = b;
    if (x->order != y->order) return x->order < y->order ? -1 : 1;
    return strcmp(x->name, y->name);
}

/* Fills item from the outputs named alike: refo of the reference context, testo of the test one. */
static void compare_one(const kiln_engine *ref, kiln_context *rc, int refo, kiln_context *tc, int testo, double atol,
                        double rtol, kiln_compare_item *item) {
    kiln_tensor_desc rd, td;
    const void *rdata, *tdata;
    kiln_context_output(rc, refo, &rd, &rdata);
    kiln_context_output(tc, testo, &td, &tdata);
    kiln_tensor rt, tt;
    kiln_tensor_view(&rt, rd.dtype, rd.ndim, rd.dims, (void *)rdata);
    kiln_tensor_view(&tt, td.dtype, td.ndim, td.dims, (void *)tdata);
    const kiln_graph *g = ref->g;
    int v = kiln_graph_find_value(g, rd.name);
    int producer = v >= 0 ? g->values[v].producer : -1;
    item->name = rd.name;
    item->node = producer >= 0 ? g->nodes[producer].name : "";
    item->op = producer >= 0 ? g->nodes[producer].op_type : "";
    item->order = producer;
    kiln_compare_tensors(&tt, &rt, atol, rtol, &item->st);
    if (!item->st.shape_ok) {
        char a[80], b[80];
        snprintf(item->shapes, sizeof item->shapes, "%s%s vs reference %s%s", kiln_dtype_name(td.dtype),
                 kiln_shape_str(a, sizeof a, td.ndim, td.dims), kiln_dtype_name(rd.dtype),
                 kiln_shape_str(b, sizeof b, rd.ndim, rd.dims));
    }
}

kiln_status kiln_compare_run(kiln_engine *ref, kiln_engine *test, const kiln_tensor *inputs, double atol,
                             double rtol, kiln_compare_result *out) {
    memset(out, 0, sizeof *out);
    out->first_failed = -1;
    kiln_context *rc = NULL, *tc = NULL;
    int nref = kiln_engine_num_outputs(ref), ntest = kiln_engine_num_outputs(test);
    out->items = calloc((size_t)nref + 1, sizeof *out->items);
    kiln_status s = out->items ? KILN_OK : kiln_error(KILN_ERR_OUT_OF_MEMORY, "out of memory comparing outputs");
    if (s == KILN_OK) s = kiln_context_create(ref, &rc);
    if (s == KILN_OK) s = kiln_context_create(test, &tc);
    if (s == KILN_OK) s = run_side(ref, ref, rc, inputs, "the reference");
    if (s == KILN_OK) s = run_side(ref, test, tc, inputs, "the engine under test");
    for (int i = 0; i < nref && s == KILN_OK; i++) {
        kiln_tensor_desc rd, td;
        kiln_engine_output(ref, i, &rd);
        int j = 0;
        while (j < ntest && (kiln_engine_output(test, j, &td) != KILN_OK || strcmp(td.name, rd.name))) j++;
        if (j == ntest) {
            out->only_reference++;
            continue;
        }
        compare_one(ref, rc, i, tc, j, atol, rtol, &out->items[out->nitems++]);
    }
    kiln_context_free(rc);
    kiln_context_free(tc);
    if (s != KILN_OK) {
        kiln_compare_result_free(out);
        return s;
    }
    qsort(out->items, (size_t)out->nitems, sizeof *out->items, by_order);
    for (int i = 0; i < out->nitems; i++) {
        if (out->items[i].st.pass) continue;
        if (out->first_failed < 0) out->first_failed = i;
        out->nfailed++;
    }
    return KILN_OK;
}
