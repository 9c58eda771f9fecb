/* gemm_packed.c — the prepared MatMul and Gemm (nn_kernels.h): a float32 graph-constant right
 * operand is packed once per engine (kiln_pg_pack_b), or taken as the engine file stores it packed
 * (packed_weights.h), and the product runs kiln_pg_gemm_packed_b, split over the thread pool by
 * blocks of rows and of column panels. Whatever else reaches weights packed at load (float16
 * inputs, a 1-D left side, shapes that do not match the packed weights, products of at most
 * GEMV_ROWS rows, which cpu_gemm.c's matrix-vector path streams faster) runs the plain kernels of
 * gemm.c, which also report every error. Stored weights have no plain copy: every product of a
 * matching left side (1-D too, however few its rows) runs the packed kernel. Gemm is prepared only
 * without transA and with alpha 1; its C is added after the product. */
#include "backends/cpu/nn_kernels.h"

#include "backends/cpu/cpu_scratch.h"
#include "backends/cpu/packed_gemm.h"
#include "backends/cpu/packed_weights.h"
#include "core/status.h"
#include "core/threadpool.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

/* Rows at most that the plain kernels take (cpu_gemm.c's matrix-vector products). */
#define GEMV_ROWS 4
/* Rows of A a task multiplies at a time (kiln_pg_gemm_packed_b's block). */
#define ROW_BLOCK 120

typedef struct packed_weights {
    int64_t K, N;
    const float *panels; /* kiln_pg_pack_b's layout */
    float *owned;        /* what to free: panels, or NULL when they lie in the engine file */
    bool stored;         /* the engine file stores them packed: B has no plain copy */
} packed_weights;

static bool is_gemm(const kiln_node *n) { return !strcmp(n->op_type, "Gemm") || !strcmp(n->op_type, "FusedGemm"); }

/* The stored panels of n (packed_weights.h) into *state, checked against W's declared shape. */
static kiln_status prepare_stored(const kiln_graph *g, const kiln_node *n, void **state) {
    kiln_packed_tag tag;
    const float *panels;
    float *owned;
    KILN_TRY(kiln_cpu_stored_panels(g, n, KILN_PACKED_MATMUL, &tag, &panels, &owned));
    if (!panels) return KILN_OK;
    const kiln_value *w = &g->values[n->inputs[1]];
    bool tb = is_gemm(n) && kiln_attr_int(n, "transB", 0) != 0;
    bool fits = w->ndim == 2 && kiln_dim_is_static(w->dims[0]) && kiln_dim_is_static(w->dims[1]) && tag.groups == 1 &&
                w->dims[tb ? 1 : 0].value == tag.L && w->dims[tb ? 0 : 1].value == tag.P &&
                (!is_gemm(n) || (kiln_attr_int(n, "transA", 0) == 0 && kiln_attr_float(n, "alpha", 1.0f) == 1.0f));
    packed_weights *pw = fits ? calloc(1, sizeof *pw) : NULL;
    if (!pw) {
        free(owned);
        return kiln_cpu_stored_refused(fits);
    }
    *pw = (packed_weights){tag.L, tag.P, panels, owned, true};
    *state = pw;
    return KILN_OK;
}

kiln_status kiln_cpu_matmul_prepare(const kiln_graph *g, const kiln_node *n, void **state) {
    *state = NULL;
    if (n->ninputs < 2 || n->inputs[1] < 0) return KILN_OK;
    if (kiln_node_attr(n, KILN_PACKED_ATTR)) return prepare_stored(g, n, state);
    const kiln_tensor *w = g->values[n->inputs[1]].constant;
    if (!w || w->dtype != KILN_F32 || w->ndim != 2) return KILN_OK;
    bool gemm = is_gemm(n), tb = gemm && kiln_attr_int(n, "transB", 0) != 0;
    if (gemm && (kiln_attr_int(n, "transA", 0) != 0 || kiln_attr_float(n, "alpha", 1.0f) != 1.0f)) return KILN_OK;
    int64_t K = w->dims[tb ? 1 : 0], N = w->dims[tb ? 0 : 1];
    if (K * N == 0) return KILN_OK;
    size_t bytes = ((size_t)kiln_pg_packed_b_floats(K, N) * sizeof(float) + 63) / 64 * 64;
    packed_weights *pw = calloc(1, sizeof *pw);
    float *panels = aligned_alloc(64, bytes);
    if (!pw || !panels) {
        free(pw);
        free(panels);
        return kiln_error(KILN_ERR_OUT_OF_MEMORY, "%s: out of memory packing %lld x %lld weights", n->op_type,
                          (long long)K, (long long)N);
    }
    kiln_pg_pack_b(w->data, tb ? 1 : N, tb ? K : 1, K, N, panels);
    *pw = (packed_weights){K, N, panels, panels, false};
    *state = pw;
    return KILN_OK;
}

bool kiln_cpu_matmul_panels(const void *state, kiln_packed_tag *tag, const float **panels) {
    const packed_weights *pw = state;
    if (pw->stored) return false;
    *tag = (kiln_packed_tag){KILN_PACKED_MATMUL, kiln_pg_isa_current(), KILN_PG_NR, 1, pw->N, pw->K};
    *panels = pw->panels;
    return true;
}

void kiln_cpu_matmul_state_free(void *state) {
    packed_weights *pw = state;
    if (!pw) return;
    free(pw->owned);
    free(pw);
}

typedef struct product_job {
    const float *a;
    const packed_weights *pw;
    float *y;
    int64_t M, panels, pchunk, pchunks; /* panels: of B; pchunk: panels per task */
    atomic_bool oom;
} product_job;

static void product_part(void *ctx, int64_t t0, int64_t t1) {
    product_job *j = ctx;
    const int64_t K = j->pw->K, N = j->pw->N;
    float *scratch = kiln_cpu_scratch(KILN_SCRATCH_TASK, (size_t)kiln_pg_scratch_b_floats());
    if (!scratch) {
        atomic_store(&j->oom, true);
        return;
    }
    for (int64_t t = t0; t < t1; t++) { /* t = row block * pchunks + panel chunk */
        int64_t m0 = t / j->pchunks * ROW_BLOCK, m1 = m0 + ROW_BLOCK < j->M ? m0 + ROW_BLOCK : j->M;
        int64_t j0 = t % j->pchunks * j->pchunk * KILN_PG_NR, j1 = j0 + j->pchunk * KILN_PG_NR < N ? j0 + j->pchunk * KILN_PG_NR : N;
        kiln_pg_gemm_packed_b(j->a + m0 * K, K, m1 - m0, K, j->pw->panels + j0 * K, j1 - j0, j->y + m0 * N + j0, N,
                              scratch);
    }
}

/* y [M, N] = a [M, K] (row-major) times the packed weights, over the thread pool. */
static kiln_status product(const kiln_node *n, const float *a, int64_t M, const packed_weights *pw, float *y) {
    product_job j = {.a = a, .pw = pw, .y = y, .M = M, .panels = (pw->N + KILN_PG_NR - 1) / KILN_PG_NR};
    atomic_init(&j.oom, false);
    int64_t threads = kiln_threadpool_size(), rblocks = (M + ROW_BLOCK - 1) / ROW_BLOCK;
    int64_t want = (2 * threads + rblocks - 1) / rblocks; /* panel chunks per row block: ~2 tasks a thread */
    if (want > j.panels) want = j.panels;
    j.pchunk = (j.panels + want - 1) / want;
    j.pchunks = (j.panels + j.pchunk - 1) / j.pchunk;
    int64_t tasks = rblocks * j.pchunks;
    bool small = M * pw->N * pw->K < (INT64_C(1) << 15);
    kiln_parallel_for(tasks, small ? tasks : 1, product_part, &j);
    if (atomic_load(&j.oom)) return kiln_error(KILN_ERR_OUT_OF_MEMORY, "%s: out of memory for the per-thread scratch", n->op_type);
    return KILN_OK;
}

kiln_status kiln_cpu_matmul_prepared(const kiln_node *n, const void *state, kiln_tensor *const *in, int nin,
                                     kiln_tensor *const *out, int nout) {
    const packed_weights *pw = state;
    const kiln_tensor *a = nin > 0 ? in[0] : NULL, *b = nin > 1 ? in[1] : NULL;
    if (!a || !b || nn_has_half_input(in, nin) || a->dtype != KILN_F32 || a->ndim < (pw->stored ? 1 : 2) ||
        a->dims[a->ndim - 1] != pw->K || (!pw->stored && (b->ndim != 2 || b->dims[0] != pw->K || b->dims[1] != pw->N ||
                         kiln_tensor_numel(a) / pw->K <= GEMV_ROWS)))
        return kiln_cpu_matmul(n, in, nin, out, nout);
    int64_t dims[KILN_MAX_DIMS];
    memcpy(dims, a->dims, sizeof *dims * (size_t)a->ndim);
    dims[a->ndim - 1] = pw->N;
    KILN_TRY(kiln_tensor_alloc_uninit(out[0], KILN_F32, a->ndim, dims)); /* the product writes every element */
    return product(n, a->data, kiln_tensor_numel(a) / pw->K, pw, out[0]->data);
}

kiln_status kiln_cpu_gemm_prepared(const kiln_node *n, const void *state, kiln_tensor *const *in, int nin,
                                   kiln_tensor *const *out, int nout) {
    const packed_weights *pw = state;
    const kiln_tensor *a = nin > 0 ? in[0] : NULL, *b = nin > 1 ? in[1] : NULL, *c = nin > 2 ? in[2] : NULL;
    bool tb = kiln_attr_int(n, "transB", 0) != 0;
    bool fits = a && b && !nn_has_half_input(in, nin) && a->dtype == KILN_F32 && a->ndim == 2 && a->dims[1] == pw->K &&
                (pw->stored || (a->dims[0] > GEMV_ROWS && b->ndim == 2 && b->dims[tb ? 1 : 0] == pw->K &&
                                b->dims[tb ? 0 : 1] == pw->N));
    int64_t M = fits ? a->dims[0] : 0, ydims[2] = {M, pw->N}, cstr[2] = {0, 0};
    if (fits && c) {
        fits = c->dtype == KILN_F32 && c->ndim <= 2;
        for (int i = 0; fits && i < c->ndim; i++)
            fits = c->dims[i] == 1 || c->dims[i] == ydims[2 - c->ndim + i];
        if (fits) kiln_broadcast_strides(c->ndim, c->dims, 2, ydims, cstr);
    }
    if (!fits) return kiln_cpu_gemm(n, in, nin, out, nout);
    KILN_TRY(kiln_tensor_alloc_uninit(out[0], KILN_F32, 2, ydims));
    float *y = out[0]->data;
    KILN_TRY(product(n, a->data, M, pw, y));
    float beta = kiln_attr_float(n, "beta", 1.0f);
    if (c && beta != 0.0f && kiln_tensor_numel(c) > 0) {
        const float *cp = c->data;
        for (int64_t i = 0; i < M; i++)
            for (int64_t k = 0; k < pw->N; k++) y[i * pw->N + k] += beta * cp[i * cstr[0] + k * cstr[1]];
    }
    return KILN_OK;
}
