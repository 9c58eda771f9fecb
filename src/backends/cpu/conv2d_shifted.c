/* conv2d_shifted.c — kiln_conv2d_run_shifted (conv2d.h): 2-D Conv on packed weights with no
 * im2col, at any stride. The input is copied once into zero-padded planes, split by stride phase:
 * channel c's plane of phase (a, b) holds the padded input's rows a, a + sh, a + 2 sh, ... and
 * columns b, b + sw, ..., Wp = OW + ((KW - 1) dw) / sw of them (one plane of the padded input at
 * stride 1). The input under tap (kh, kw) of output (oh, ow) is then the plane of phase
 * (kh dh % sh, kw dw % sw) at row oh + kh dh / sh, column ow + kw dw / sw: each tap's im2col row is
 * a phase plane, shifted, whose output rows lie Wp apart. The matrix product (kiln_pg_gemm_runs)
 * packs row k = tap * Cg + c of its right side from that plane plus the tap's shift, OW columns at
 * a time (the packed weights are tap-major), for a block of whole output rows per task, and writes
 * Y in place; the epilogue (residual, activation; the bias is in the product) runs on each
 * finished block while it is in L1. */
#include "backends/cpu/conv2d.h"

#include "backends/cpu/cpu_scratch.h"
#include "backends/cpu/fused_kernels.h"
#include "backends/cpu/packed_gemm.h"
#include "core/status.h"
#include "core/threadpool.h"

#include <stdatomic.h>
#include <string.h>

/* Output positions (columns of the product) a task aims at. */
#define BLOCK_COLUMNS 768

typedef struct shifted_job {
    const kiln_conv2d *g;
    const kiln_conv2d_weights *packed;
    const float *x, *bias, *z;
    const kiln_act *act;
    float *y, *xp;                  /* xp: the padded phase planes [N * C][PA][PB][Hp][Wp] */
    int64_t Cg, Mg, K, Wp, Hp, plane; /* K = KH * KW * Cg; plane = Hp * Wp */
    int64_t PA, PB;                 /* row and column phases that some tap reads */
    int64_t rows_per, chunks, mblocks; /* output rows per task, row blocks per (image, group), channel blocks */
    atomic_bool oom;
} shifted_job;

/* Padded phase planes of channels [b, e) (image * C + channel): plane (a, bp) row r, column i
 * holds X at row r * sh + a - ph, column i * sw + bp - pw, zero outside X. */
static void pad_part(void *ctx, int64_t b, int64_t e) {
    shifted_job *j = ctx;
    const kiln_conv2d *g = j->g;
    for (int64_t t = b; t < e; t++) {
        const float *src = j->x + t * g->H * g->W;
        float *dst = j->xp + t * j->PA * j->PB * j->plane;
        for (int64_t a = 0; a < j->PA; a++)
            for (int64_t bp = 0; bp < j->PB; bp++) {
                int64_t first = bp - g->pw; /* X's column under padded column 0 */
                int64_t lo = first >= 0 ? 0 : (-first + g->sw - 1) / g->sw; /* padded columns [lo, hi) lie in X */
                int64_t hi = g->W - 1 - first >= 0 ? (g->W - 1 - first) / g->sw + 1 : 0;
                if (hi > j->Wp) hi = j->Wp;
                if (lo > hi) lo = hi;
                for (int64_t r = 0; r < j->Hp; r++, dst += j->Wp) {
                    int64_t ih = r * g->sh + a - g->ph;
                    if (ih < 0 || ih >= g->H || hi == lo) {
                        memset(dst, 0, (size_t)j->Wp * sizeof *dst);
                        continue;
                    }
                    memset(dst, 0, (size_t)lo * sizeof *dst);
                    kiln_conv2d_copy_strided(dst + lo, src + ih * g->W + lo * g->sw + first, hi - lo, g->sw);
                    memset(dst + hi, 0, (size_t)(j->Wp - hi) * sizeof *dst);
                }
            }
    }
}

/* The residual (z, at the same place as the product's Y; may be NULL) and activation (may be NULL)
 * of a task's block of Y. */
typedef struct block_out {
    const float *y, *z;
    const kiln_act *act;
} block_out;

/* kiln_pg_epilogue's fn: the residual and activation on a finished block of Y, in place, while it
 * is in L1. */
static void finish_block(void *ctx, float *c, int64_t ldc, int64_t r0, int64_t rows, int64_t c0, int64_t cols) {
    const block_out *o = ctx;
    (void)r0, (void)c0;
    for (int64_t r = 0; r < rows; r++) {
        float *y = c + r * ldc;
        if (o->z) {
            const float *z = o->z + (y - o->y);
            for (int64_t i = 0; i < cols; i++) y[i] += z[i];
        }
        if (o->act) kiln_cpu_activation_apply(y, cols, o->act);
    }
}

static void block_part(void *ctx, int64_t t0, int64_t t1) {
    shifted_job *j = ctx;
    const kiln_conv2d *g = j->g;
    const int64_t OW = g->OW, OHW = g->OH * g->OW;
    const int64_t panels = (j->Mg + KILN_PG_MR - 1) / KILN_PG_MR;
    /* scratch: the row offsets [K], kiln_pg_gemm_runs' */
    float *s = kiln_cpu_scratch(KILN_SCRATCH_TASK, (size_t)(2 * j->K + kiln_pg_scratch_floats()));
    if (!s) {
        atomic_store(&j->oom, true);
        return;
    }
    int64_t *row_off = (int64_t *)s;
    float *pg = s + 2 * j->K;
    const int64_t channel = j->PA * j->PB * j->plane; /* floats of one channel's phase planes */
    for (int64_t tap = 0; tap < g->KH * g->KW; tap++) {
        int64_t u = tap / g->KW * g->dh, v = tap % g->KW * g->dw; /* the tap's offset in the padded input */
        int64_t at = (u % g->sh * j->PB + v % g->sw) * j->plane + u / g->sh * j->Wp + v / g->sw;
        for (int64_t c = 0; c < j->Cg; c++) row_off[tap * j->Cg + c] = c * channel + at;
    }
    const kiln_act *act = j->act && j->act->kind != KILN_ACT_NONE ? j->act : NULL;
    for (int64_t t = t0; t < t1; t++) { /* t = ((image * group + gr) * chunks + chunk) * mblocks + mblock */
        int64_t mb = t % j->mblocks, ck = t / j->mblocks % j->chunks, ig = t / j->mblocks / j->chunks;
        int64_t gr = ig % g->group, img = ig / g->group;
        int64_t m0 = panels * mb / j->mblocks * KILN_PG_MR, m1 = panels * (mb + 1) / j->mblocks * KILN_PG_MR;
        if (m1 > j->Mg) m1 = j->Mg;
        if (m0 >= m1) continue;
        int64_t oh0 = ck * j->rows_per, nrows = g->OH - oh0 < j->rows_per ? g->OH - oh0 : j->rows_per;
        int64_t at = (img * g->M + gr * j->Mg + m0) * OHW + oh0 * OW;
        const float *a = j->packed->data + gr * j->packed->group_floats + m0 * j->K;
        const float *b = j->xp + (img * g->C + gr * j->Cg) * channel + oh0 * j->Wp;
        block_out o = {j->y + at, j->z ? j->z + at : NULL, act};
        kiln_pg_epilogue ep = {finish_block, &o, false};
        if (!o.z && act && act->kind == KILN_ACT_RELU) /* taken in the micro-kernel's store */
            ep = (kiln_pg_epilogue){NULL, NULL, true};
        const float *bias = j->bias ? j->bias + gr * j->Mg + m0 : NULL;
        kiln_pg_gemm_runs(a, m1 - m0, j->K, b, row_off, nrows * OW, OW, j->Wp, bias, j->y + at, OHW,
                          o.z || act ? &ep : NULL, pg);
    }
}

kiln_status kiln_conv2d_run_shifted(const kiln_conv2d *g, const float *x, const kiln_conv2d_weights *packed,
                                    const float *bias, const float *residual, const kiln_act *act, float *y) {
    shifted_job j = {.g = g, .packed = packed, .x = x, .bias = bias, .z = residual, .act = act, .y = y};
    j.Cg = g->C / g->group;
    j.Mg = g->M / g->group;
    j.K = g->KH * g->KW * j.Cg;
    j.Wp = g->OW + (g->KW - 1) * g->dw / g->sw;
    j.Hp = g->OH + (g->KH - 1) * g->dh / g->sh;
    j.plane = j.Hp * j.Wp;
    /* tap offsets u = kh dh < (KH - 1) dh + 1 fall in phases u % sh below both sh and that */
    j.PA = (g->KH - 1) * g->dh + 1 < g->sh ? (g->KH - 1) * g->dh + 1 : g->sh;
    j.PB = (g->KW - 1) * g->dw + 1 < g->sw ? (g->KW - 1) * g->dw + 1 : g->sw;
    atomic_init(&j.oom, false);
    j.xp = kiln_cpu_scratch(KILN_SCRATCH_SHARED, (size_t)(g->N * g->C * j.PA * j.PB * j.plane));
    if (!j.xp) return kiln_error(KILN_ERR_OUT_OF_MEMORY, "Conv: out of memory for the padded input");
    kiln_parallel_for(g->N * g->C, 16, pad_part, &j);
    int threads = kiln_threadpool_size();
    /* blocks of whole rows near BLOCK_COLUMNS columns, as many rows in each (the last one too) */
    int64_t blocks = (g->OH * g->OW + BLOCK_COLUMNS - 1) / BLOCK_COLUMNS, per_image = g->N * g->group;
    int64_t want = (threads + per_image - 1) / per_image; /* blocks an image needs to give every thread one */
    if (blocks < want && j.Mg < 4 * KILN_PG_MR * want) blocks = want; /* too few channels to split them */
    if (blocks > g->OH) blocks = g->OH;
    j.rows_per = (g->OH + blocks - 1) / blocks;
    j.chunks = (g->OH + j.rows_per - 1) / j.rows_per;
    j.mblocks = 1;
    if (per_image * j.chunks < threads) {
        j.mblocks = j.Mg / (2 * KILN_PG_MR) < threads ? j.Mg / (2 * KILN_PG_MR) : threads;
        if (j.mblocks < 1) j.mblocks = 1;
    }
    kiln_parallel_for(per_image * j.chunks * j.mblocks, 1, block_part, &j);
    if (atomic_load(&j.oom)) return kiln_error(KILN_ERR_OUT_OF_MEMORY, "Conv: out of memory for the per-thread scratch");
    return KILN_OK;
}
