/* conv2d_small.c — kiln_conv2d_run_small (conv2d.h): 2-D Conv with outputs of few positions (7x7
 * and below, late in a classifier) on weights packed by columns, computed transposed:
 * Y^T [OHW, Mg] = im2col^T [OHW, K] W^T per image and group, so that the positions fill the
 * micro-kernel's 8 rows and the output channels its 48 columns (the other way round, a 7x7
 * output fills 49 of 96 columns). im2col^T (rows = positions, columns = taps x channels, the
 * packed weights' order) is built once per image and group on the calling thread, straight into
 * kiln_pg_pack_a's layout; tasks take
 * blocks of column panels (output channels), multiply, and write their channels of Y transposed
 * back, with bias, residual and activation. */
#include "backends/cpu/conv2d.h"

#include "backends/cpu/cpu_scratch.h"
#include "backends/cpu/fused_kernels.h"
#include "backends/cpu/packed_gemm.h"
#include "core/status.h"
#include "core/threadpool.h"

#include <stdatomic.h>
#include <string.h>

typedef struct small_job {
    const kiln_conv2d *g;
    const kiln_conv2d_weights *packed;
    const float *bias, *z, *at; /* at: im2col^T of the current image and group */
    const kiln_act *act;
    float *y;
    int64_t Cg, Mg, K, OHW, img, gr;
    int64_t pchunk; /* column panels per task */
    atomic_bool oom;
} small_job;

/* at: im2col^T [OHW, K] packed as kiln_pg_pack_a would (rows of position p in panel p / MR at
 * lane p % MR): for tap t = (kh, kw) and channel c, column t * Cg + c holds the input under that
 * tap of output position p (0 in the padding, and in the rows past OHW); x is the group's first
 * channel. */
static void im2col_t_packed(const kiln_conv2d *g, const float *x, int64_t Cg, float *at) {
    enum { MR = KILN_PG_MR };
    const int64_t HW = g->H * g->W, K = g->KH * g->KW * Cg, OHW = g->OH * g->OW;
    memset(at, 0, (size_t)kiln_pg_packed_a_floats(OHW, K) * sizeof *at);
    for (int64_t p0 = 0; p0 < OHW; p0 += MR) {
        int64_t oh = p0 / g->OW, ow = p0 % g->OW;
        float *panel = at + p0 / MR * K * MR;
        /* a whole panel of one output row at stride 1: each tap's inputs under it are contiguous */
        bool one_row = g->sw == 1 && p0 + MR <= OHW && ow + MR <= g->OW;
        for (int64_t kh = 0; kh < g->KH; kh++)
            for (int64_t kw = 0; kw < g->KW; kw++) {
                int64_t ih = oh * g->sh - g->ph + kh * g->dh, iw = ow - g->pw + kw * g->dw;
                float *d = panel + (kh * g->KW + kw) * Cg * MR;
                if (one_row && ih >= 0 && ih < g->H && iw >= 0 && iw + MR <= g->W) {
                    const float *s = x + ih * g->W + iw;
                    for (int64_t c = 0; c < Cg; c++) memcpy(d + c * MR, s + c * HW, MR * sizeof *d);
                    continue;
                }
                for (int64_t p = p0; p < p0 + MR && p < OHW; p++) { /* position by position */
                    int64_t ihp = (p / g->OW) * g->sh - g->ph + kh * g->dh;
                    int64_t iwp = (p % g->OW) * g->sw - g->pw + kw * g->dw;
                    if (ihp < 0 || ihp >= g->H || iwp < 0 || iwp >= g->W) continue;
                    const float *s = x + ihp * g->W + iwp;
                    for (int64_t c = 0; c < Cg; c++) d[c * MR + p - p0] = s[c * HW];
                }
            }
    }
}

static void channels_part(void *ctx, int64_t b, int64_t e) {
    small_job *j = ctx;
    const kiln_conv2d *g = j->g;
    const int64_t width = j->pchunk * KILN_PG_NR;
    float *yt = kiln_cpu_scratch(KILN_SCRATCH_TASK, (size_t)(j->OHW * width));
    if (!yt) {
        atomic_store(&j->oom, true);
        return;
    }
    for (int64_t pc = b; pc < e; pc++) {
        int64_t m0 = pc * width, m1 = m0 + width < j->Mg ? m0 + width : j->Mg, n = m1 - m0;
        const float *w = j->packed->data + j->gr * j->packed->group_floats + m0 * j->K;
        kiln_pg_gemm_packed_ab(j->at, j->OHW, j->K, w, n, yt, n);
        for (int64_t m = m0; m < m1; m++) {
            int64_t at = (j->img * g->M + j->gr * j->Mg + m) * j->OHW;
            float *y = j->y + at, bias = j->bias ? j->bias[j->gr * j->Mg + m] : 0.0f;
            for (int64_t p = 0; p < j->OHW; p++) y[p] = yt[p * n + (m - m0)] + bias;
            if (j->z)
                for (int64_t p = 0; p < j->OHW; p++) y[p] += j->z[at + p];
        }
        if (j->act && j->act->kind != KILN_ACT_NONE) /* the block's planes are contiguous: one pass over them */
            kiln_cpu_activation_apply(j->y + (j->img * g->M + j->gr * j->Mg + m0) * j->OHW, n * j->OHW, j->act);
    }
}

kiln_status kiln_conv2d_run_small(const kiln_conv2d *g, const float *x, const kiln_conv2d_weights *packed,
                                  const float *bias, const float *residual, const kiln_act *act, float *y) {
    small_job j = {.g = g, .packed = packed, .bias = bias, .z = residual, .act = act, .y = y};
    j.Cg = g->C / g->group;
    j.Mg = g->M / g->group;
    j.K = g->KH * g->KW * j.Cg;
    j.OHW = g->OH * g->OW;
    atomic_init(&j.oom, false);
    float *at = kiln_cpu_scratch(KILN_SCRATCH_SHARED, (size_t)kiln_pg_packed_a_floats(j.OHW, j.K));
    if (!at) return kiln_error(KILN_ERR_OUT_OF_MEMORY, "Conv: out of memory for the transposed columns");
    j.at = at;
    int64_t panels = (j.Mg + KILN_PG_NR - 1) / KILN_PG_NR, want = 2 * kiln_threadpool_size();
    j.pchunk = (panels + want - 1) / want;
    int64_t chunks = (panels + j.pchunk - 1) / j.pchunk;
    bool small = j.OHW * j.Mg * j.K < (INT64_C(1) << 15);
    for (j.img = 0; j.img < g->N; j.img++)
        for (j.gr = 0; j.gr < g->group; j.gr++) {
            im2col_t_packed(g, x + (j.img * g->C + j.gr * j.Cg) * g->H * g->W, j.Cg, at);
            kiln_parallel_for(chunks, small ? chunks : 1, channels_part, &j);
        }
    if (atomic_load(&j.oom)) return kiln_error(KILN_ERR_OUT_OF_MEMORY, "Conv: out of memory for the per-thread scratch");
    return KILN_OK;
}
