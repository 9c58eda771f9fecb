/* align_matmul.c — pads the columns of a MatMul's constant right operand to a multiple of 8, for
 * 16-bit builds on targets whose GEMM library wants 16-byte aligned rows (tensor-core kernels read
 * whole 16-byte units; a row of an odd length makes every row but the first misaligned, and cuBLASLt
 * then falls back to kernels several times slower: GPT-2's LM head, [128, 1600] x [1600, 50257],
 * ran at 109 TFLOP/s). Each
 *     MatMul(A, W [K, N]), W a float constant, N not a multiple of 8 (and at least 64)
 * becomes
 *     MatMul(A, W' [K, N8]) -> Slice(axis -1, [0, N))
 * with W' = W and zero columns up to N8 = N rounded up to 8. The result keeps the old output value
 * (name, readers), so the graph's interface is unchanged; the Slice is one copy of the output, a
 * fraction of the product's time. */
#include "passes/passes.h"

#include "core/status.h"
#include "passes/pass_util.h"

#include <stdio.h>
#include <string.h>

#define ALIGN_MIN_COLUMNS 64 /* narrower products are latency-bound: padding them gains nothing */

/* out = w [K, N] with zero columns appended up to n8. */
static kiln_status pad_columns(const kiln_tensor *w, int64_t n8, kiln_tensor *out) {
    int64_t k = w->dims[0], n = w->dims[1], dims[2] = {k, n8};
    KILN_TRY(kiln_tensor_alloc(out, w->dtype, 2, dims));
    size_t es = kiln_dtype_size(w->dtype);
    char *d = out->data;
    const char *s = w->data;
    memset(d, 0, (size_t)(k * n8) * es);
    for (int64_t r = 0; r < k; r++) memcpy(d + (size_t)(r * n8) * es, s + (size_t)(r * n) * es, (size_t)n * es);
    return KILN_OK;
}

static kiln_status try_matmul(pass_ctx *c, int id) {
    kiln_graph *g = c->g;
    const kiln_node *n = &g->nodes[id];
    if (n->ninputs != 2 || n->noutputs != 1) return KILN_OK;
    const kiln_value *w = &g->values[n->inputs[1]], *y = &g->values[n->outputs[0]];
    const kiln_tensor *t = w->constant;
    if (!t || t->ndim != 2 || !pass_is_float(t->dtype) || y->ndim < 1) return KILN_OK;
    int64_t k = t->dims[0], cols = t->dims[1], n8 = (cols + 7) / 8 * 8;
    if (cols % 8 == 0 || cols < ALIGN_MIN_COLUMNS || k < 1) return KILN_OK;
    char hint[300];
    kiln_tensor padded;
    memset(&padded, 0, sizeof padded);
    KILN_TRY(pad_columns(t, n8, &padded));
    int wid, pid, start, end, axis, sid;
    snprintf(hint, sizeof hint, "%.280s_aligned", w->name);
    kiln_status st = pass_new_constant(c, hint, &padded, &wid);
    kiln_tensor_release(&padded); /* left only when the constant was not made */
    KILN_TRY(st);
    snprintf(hint, sizeof hint, "%.280s_padded", g->values[n->outputs[0]].name);
    KILN_TRY(pass_new_value(c, hint, &pid));
    const int64_t zero = 0, minus_one = -1;
    KILN_TRY(pass_new_ints(c, "align_start", &zero, 1, &start));
    KILN_TRY(pass_new_ints(c, "align_end", &cols, 1, &end));
    KILN_TRY(pass_new_ints(c, "align_axis", &minus_one, 1, &axis));
    const int a_id = n->inputs[0];
    char name[300];
    snprintf(name, sizeof name, "%.280s/aligned", n->name);
    int mins[2] = {a_id, wid};
    KILN_TRY(pass_add_node(c, "", "MatMul", g->nodes[id].opset, name, 2, mins, pid, &sid));
    /* the old MatMul becomes the Slice, so its output value (and every reader) stays */
    int sins[4] = {pid, start, end, axis}, set[1] = {id};
    char detail[96];
    snprintf(detail, sizeof detail, "N %lld -> %lld columns, then a Slice", (long long)cols, (long long)n8);
    kiln_node *out;
    snprintf(name, sizeof name, "%.280s/unpad", g->nodes[id].name);
    return pass_rewrite(c, set, 1, id, "", "Slice", pass_onnx_opset(g, 13), name, 4, sins, -1, detail, &out);
}

kiln_status kiln_pass_align_matmul(kiln_graph *g, bool *changed) {
    pass_ctx c;
    KILN_TRY(pass_begin(&c, g, "align_matmul"));
    kiln_status st = KILN_OK;
    int count = g->nnodes;
    for (int i = 0; i < count && st == KILN_OK; i++)
        if (pass_is_op(&g->nodes[i], "MatMul")) st = try_matmul(&c, i);
    return pass_end(&c, st, changed);
}
