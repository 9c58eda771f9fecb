/* packed_weights.c — weights packed at build time and used in place at load (packed_weights.h). */
#include "backends/cpu/packed_weights.h"

#include "backends/cpu/cpu_kernels.h"
#include "backends/cpu/packed_gemm.h"
#include "core/ckd.h"
#include "core/log.h"
#include "core/status.h"

#include <stdlib.h>
#include <string.h>

/* The widest panel a tag may name: wider ones are no layout any kiln writes. */
#define MAX_WIDTH 1024

int64_t kiln_packed_width(int64_t kind) {
    return kind == KILN_PACKED_CONV_ROWS || kind == KILN_PACKED_WINOGRAD_ROWS ? KILN_PG_MR : KILN_PG_NR;
}

/* Floats of `groups` blocks of an [L, P] matrix in panels of width columns, or false when they overflow. */
static bool packed_floats(const kiln_packed_tag *t, int64_t width, int64_t *floats) {
    int64_t panels = t->P / width + (t->P % width != 0), f;
    return kiln_mul_i64_ok(panels, width, &f) && kiln_mul_i64_ok(f, t->L, &f) && kiln_mul_i64_ok(f, t->groups, &f) &&
           f <= KILN_MAX_TENSOR_ELEMENTS && (*floats = f, true);
}

/* How many nodes read value v (each input slot counts). */
static int readers(const kiln_graph *g, int v) {
    int count = 0;
    for (int i = 0; i < g->nnodes; i++)
        for (int k = 0; k < g->nodes[i].ninputs; k++) count += g->nodes[i].inputs[k] == v;
    return count;
}

/* Whether node n's weight (input 1) may be replaced by its panels: a float32 constant that n alone
 * reads, neither a graph input nor output, and n's input 0 is float32 (a 16-bit input runs the
 * plain kernels). */
static bool may_pack(const kiln_graph *g, const kiln_node *n) {
    if (n->ninputs < 2 || n->inputs[0] < 0 || n->inputs[1] < 0) return false;
    const kiln_value *x = &g->values[n->inputs[0]], *w = &g->values[n->inputs[1]];
    return x->dtype == KILN_F32 && w->constant && w->constant->dtype == KILN_F32 && !w->is_input && !w->is_output &&
           readers(g, n->inputs[1]) == 1;
}

/* Replaces n's weight constant by the panels its prepared kernel k packed, and tags n. */
static kiln_status store_node(kiln_graph *g, kiln_node *n, const kiln_cpu_prepared_kernel *k, size_t *bytes) {
    void *state = NULL;
    KILN_TRY(k->prepare(g, n, &state));
    kiln_packed_tag tag;
    const float *panels;
    int64_t floats;
    if (!state || !k->panels(state, &tag, &panels)) {
        if (state) k->free_state(state);
        return KILN_OK;
    }
    packed_floats(&tag, tag.width, &floats); /* the kernel's own panels: their size fits */
    kiln_tensor packed = {0};
    kiln_status s = kiln_tensor_alloc_uninit(&packed, KILN_F32, 1, &floats);
    if (s == KILN_OK) memcpy(packed.data, panels, (size_t)floats * sizeof *panels);
    k->free_state(state);
    KILN_TRY(s);
    kiln_attr *a = kiln_node_add_attr(g, n, KILN_PACKED_ATTR, KILN_ATTR_INTS);
    int64_t *ints = a ? kiln_graph_alloc(g, 6 * sizeof *ints) : NULL;
    if (!ints) {
        kiln_tensor_release(&packed);
        return kiln_error(KILN_ERR_OUT_OF_MEMORY, "out of memory tagging the packed weights of '%s'", n->name);
    }
    memcpy(ints, (int64_t[6]){tag.kind, tag.isa, tag.width, tag.groups, tag.P, tag.L}, 6 * sizeof *ints);
    a->ints = ints;
    a->n = 6;
    kiln_tensor *t = g->values[n->inputs[1]].constant; /* the value keeps its declared shape */
    kiln_tensor_release(t);
    *t = packed;
    *bytes += packed.nbytes;
    return KILN_OK;
}

kiln_status kiln_cpu_store_weights(kiln_graph *g, const kiln_engine_meta *meta, const kiln_build_options *opts) {
    (void)meta;
    if (opts->cpu_packed_weights == KILN_SWITCH_OFF) return KILN_OK;
    size_t bytes = 0;
    int count = 0;
    for (int i = 0; i < g->nnodes; i++) {
        kiln_node *n = &g->nodes[i];
        const kiln_cpu_prepared_kernel *k = kiln_cpu_prepared_find(n->domain, n->op_type);
        if (!k || !may_pack(g, n) || kiln_node_attr(n, KILN_PACKED_ATTR)) continue;
        size_t before = bytes;
        KILN_TRY(store_node(g, n, k, &bytes));
        count += bytes != before;
    }
    if (count)
        KILN_LOG(KILN_LOG_VERBOSE, "cpu: %d weights stored packed for %s (%.2f MB)", count,
                 kiln_pg_isa_name(kiln_pg_isa_current()), bytes / 1e6);
    return KILN_OK;
}

/* The error for a tag that disagrees with itself or its constant (the engine's plan names the node). */
static kiln_status bad_tag(const char *what) {
    return kiln_error(KILN_ERR_PARSE, "attribute %s %s (a corrupt engine: rebuild it)", KILN_PACKED_ATTR, what);
}

kiln_status kiln_cpu_stored_panels(const kiln_graph *g, const kiln_node *n, kiln_packed_kind want,
                                   kiln_packed_tag *tag, const float **panels, float **owned) {
    *panels = NULL;
    *owned = NULL;
    const kiln_attr *a = kiln_node_attr(n, KILN_PACKED_ATTR);
    if (!a) return KILN_OK;
    if (a->type != KILN_ATTR_INTS || a->n != 6) return bad_tag("is not 6 integers");
    *tag = (kiln_packed_tag){a->ints[0], a->ints[1], a->ints[2], a->ints[3], a->ints[4], a->ints[5]};
    bool conv = tag->kind >= KILN_PACKED_CONV_ROWS && tag->kind < KILN_PACKED_KINDS;
    bool kind_ok = want == KILN_PACKED_MATMUL ? tag->kind == KILN_PACKED_MATMUL : conv;
    if (!kind_ok) return bad_tag("names a layout this op does not use");
    if (tag->isa < 0 || tag->isa > 255 || tag->width < 1 || tag->width > MAX_WIDTH || tag->groups < 1 ||
        tag->P < 1 || tag->L < 1)
        return bad_tag("holds a value out of range");
    const kiln_tensor *w = n->ninputs > 1 && n->inputs[1] >= 0 ? g->values[n->inputs[1]].constant : NULL;
    int64_t have, need;
    if (!packed_floats(tag, tag->width, &need) || !w || w->dtype != KILN_F32 || w->ndim != 1 || w->dims[0] != need)
        return bad_tag("does not match the weight constant's size");
    int64_t width = kiln_packed_width(tag->kind);
    if (tag->width == width) {
        *panels = w->data;
        return KILN_OK;
    }
    if (!packed_floats(tag, width, &have)) return bad_tag("describes weights too large to repack");
    float *dst = aligned_alloc(64, ((size_t)have * sizeof *dst + 63) / 64 * 64);
    if (!dst) return kiln_error(KILN_ERR_OUT_OF_MEMORY, "out of memory repacking the weights of '%s'", n->name);
    const float *src = w->data;
    for (int64_t gr = 0; gr < tag->groups; gr++)
        kiln_pg_repack_panels(src + gr * (need / tag->groups), tag->L, tag->P, tag->width, width,
                              dst + gr * (have / tag->groups));
    *panels = dst;
    *owned = dst;
    return KILN_OK;
}

kiln_status kiln_cpu_stored_refused(bool fits) {
    return fits ? kiln_error(KILN_ERR_OUT_OF_MEMORY, "out of memory")
                : kiln_error(KILN_ERR_PARSE, "its packed weights (attribute %s) do not match its declared weights (a "
                                             "corrupt engine: rebuild it)", KILN_PACKED_ATTR);
}

/* What the tags of g say: how many weights are stored packed, their bytes, the ISA named last, the
 * width of each kind, and how many of them this kiln re-cuts at load. */
typedef struct packed_survey {
    int count, recut, winograd;
    size_t bytes;
    int64_t isa, widths[KILN_PACKED_KINDS];
} packed_survey;

static packed_survey survey(const kiln_graph *g) {
    packed_survey s = {.isa = -1};
    for (int i = 0; i < g->nnodes; i++) {
        const kiln_node *n = &g->nodes[i];
        const kiln_attr *a = kiln_node_attr(n, KILN_PACKED_ATTR);
        if (!a || a->type != KILN_ATTR_INTS || a->n != 6 || a->ints[0] < 0 || a->ints[0] >= KILN_PACKED_KINDS) continue;
        const kiln_tensor *w = n->ninputs > 1 && n->inputs[1] >= 0 ? g->values[n->inputs[1]].constant : NULL;
        s.count++;
        s.winograd += a->ints[0] >= KILN_PACKED_WINOGRAD_ROWS;
        s.bytes += w ? w->nbytes : 0;
        s.isa = a->ints[1];
        s.widths[a->ints[0]] = a->ints[2];
        s.recut += a->ints[2] != kiln_packed_width(a->ints[0]);
    }
    return s;
}

void kiln_cpu_log_repacked(const kiln_graph *g) {
    packed_survey s = survey(g);
    if (s.recut)
        KILN_LOG(KILN_LOG_WARN,
                 "cpu: %d of the engine's weights were packed on %s in panels of another width; repacked for this %s "
                 "CPU at load (rebuild the engine here to skip it)",
                 s.recut, kiln_pg_isa_name((kiln_pg_isa)s.isa), kiln_pg_isa_name(kiln_pg_isa_current()));
}

void kiln_cpu_describe_packed(const kiln_graph *g, FILE *out) {
    static const char *const kinds[KILN_PACKED_KINDS] = {"matmul", "conv rows", "conv columns", "winograd rows",
                                                         "winograd tiles"};
    packed_survey s = survey(g);
    if (!s.count) {
        fprintf(out, "packed weights: none stored (the CPU kernels pack theirs at load)\n");
        return;
    }
    fprintf(out, "packed weights: %d tensors", s.count);
    if (s.winograd) fprintf(out, " (%d of them Winograd transforms)", s.winograd);
    fprintf(out, ", %zu bytes (%.2f MB), packed on %s in panels of", s.bytes, (double)s.bytes / 1e6,
            kiln_pg_isa_name((kiln_pg_isa)s.isa));
    for (int k = 0, first = 1; k < KILN_PACKED_KINDS; k++)
        if (s.widths[k]) {
            fprintf(out, "%s %lld (%s)", first ? "" : ",", (long long)s.widths[k], kinds[k]);
            first = 0;
        }
    const char *here = kiln_pg_isa_name(kiln_pg_isa_current());
    if (s.recut) fprintf(out, "; %d repacked at load for this %s CPU\n", s.recut, here);
    else fprintf(out, "; used in place on this %s CPU\n", here);
}
