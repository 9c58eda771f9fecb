/* conv2d_shifted.c — kiln_conv2d_run_shifted (conv2d.h): stride-1 2-D Conv on packed weights with
 * no im2col. The input is copied once into zero-padded planes Wp = OW + (KW - 1) dw columns wide,
 * so the input under tap (kh, kw) of the "padded" output position q = oh * Wp + ow is the padded
 * plane at q + kh dh Wp + kw dw: each tap's im2col rows are the padded planes themselves, shifted.
 * The matrix product (kiln_pg_gemm) reads row k = tap * Cg + c of its right side at channel c's
 * padded plane plus the tap's shift (the packed weights are tap-major), for a block of whole padded
 * output rows per task; the Wp - OW columns past each row's end are computed and dropped when the
 * block is copied into Y, where the epilogue (residual, activation; the bias is in the product)
 * runs while it is in cache. */
#include "backends/cpu/conv2d.h"

#include "backends/cpu/cpu_scratch.h"
#include "backends/cpu/fused_kernels.h"
#include "backends/cpu/packed_gemm.h"
#include "core/status.h"
#include "core/threadpool.h"

#include <stdatomic.h>
#include <string.h>

/* Padded output positions (columns of the product) a task aims at. */
#define BLOCK_COLUMNS 768

typedef struct shifted_job {
    const kiln_conv2d *g;
    const kiln_conv2d_weights *packed;
    const float *x, *bias, *z;
    const kiln_act *act;
    float *y, *xp;                  /* xp: the padded planes [N * C][Hp][Wp] */
    int64_t Cg, Mg, K, Wp, Hp, plane; /* K = KH * KW * Cg; plane = Hp * Wp */
    int64_t rows_per, chunks, mblocks; /* output rows per task, row blocks per (image, group), channel blocks */
    atomic_bool oom;
} shifted_job;

/* Padded planes [b, e) (image * C + channel): rows ph.. and columns pw.. hold X, the rest zero. */
static void pad_part(void *ctx, int64_t b, int64_t e) {
    shifted_job *j = ctx;
    const kiln_conv2d *g = j->g;
    int64_t cols = g->W < j->Wp - g->pw ? g->W : j->Wp - g->pw; /* X's columns inside the padded width */
    for (int64_t t = b; t < e; t++) {
        float *dst = j->xp + t * j->plane;
        const float *src = j->x + t * g->H * g->W;
        for (int64_t r = 0; r < j->Hp; r++, dst += j->Wp) {
            int64_t ih = r - g->ph;
            if (ih < 0 || ih >= g->H || cols <= 0) {
                memset(dst, 0, (size_t)j->Wp * sizeof *dst);
                continue;
            }
            memset(dst, 0, (size_t)g->pw * sizeof *dst);
            memcpy(dst + g->pw, src + ih * g->W, (size_t)cols * sizeof *dst);
            memset(dst + g->pw + cols, 0, (size_t)(j->Wp - g->pw - cols) * sizeof *dst);
        }
    }
}

static void block_part(void *ctx, int64_t t0, int64_t t1) {
    shifted_job *j = ctx;
    const kiln_conv2d *g = j->g;
    const int64_t OW = g->OW, OHW = g->OH * g->OW, N = j->rows_per * j->Wp;
    const int64_t panels = (j->Mg + KILN_PG_MR - 1) / KILN_PG_MR;
    const int64_t max_rows = (panels + j->mblocks - 1) / j->mblocks * KILN_PG_MR;
    /* scratch: the row offsets [K], the product's block [max_rows][N], kiln_pg_gemm's scratch */
    float *s = kiln_cpu_scratch(KILN_SCRATCH_TASK, (size_t)(2 * j->K + max_rows * N + kiln_pg_scratch_floats()));
    if (!s) {
        atomic_store(&j->oom, true);
        return;
    }
    int64_t *row_off = (int64_t *)s;
    float *tmp = s + 2 * j->K, *pg = tmp + max_rows * N;
    for (int64_t tap = 0; tap < g->KH * g->KW; tap++) {
        int64_t shift = tap / g->KW * g->dh * j->Wp + tap % g->KW * g->dw;
        for (int64_t c = 0; c < j->Cg; c++) row_off[tap * j->Cg + c] = c * j->plane + shift;
    }
    for (int64_t t = t0; t < t1; t++) { /* t = ((image * group + gr) * chunks + chunk) * mblocks + mblock */
        int64_t mb = t % j->mblocks, ck = t / j->mblocks % j->chunks, ig = t / j->mblocks / j->chunks;
        int64_t gr = ig % g->group, img = ig / g->group;
        int64_t m0 = panels * mb / j->mblocks * KILN_PG_MR, m1 = panels * (mb + 1) / j->mblocks * KILN_PG_MR;
        if (m1 > j->Mg) m1 = j->Mg;
        if (m0 >= m1) continue;
        int64_t oh0 = ck * j->rows_per, nrows = g->OH - oh0 < j->rows_per ? g->OH - oh0 : j->rows_per;
        int64_t n = nrows * j->Wp;
        const float *a = j->packed->data + gr * j->packed->group_floats + m0 * j->K;
        const float *b = j->xp + (img * g->C + gr * j->Cg) * j->plane + oh0 * j->Wp;
        kiln_pg_gemm(a, m1 - m0, j->K, b, 0, row_off, n, j->bias ? j->bias + gr * j->Mg + m0 : NULL, tmp, n, NULL, pg);
        bool epilogue = j->z || (j->act && j->act->kind != KILN_ACT_NONE);
        for (int64_t m = m0; m < m1; m++) {
            int64_t at = (img * g->M + gr * j->Mg + m) * OHW + oh0 * OW;
            float *y = j->y + at;
            for (int64_t r = 0; r < nrows; r++) memcpy(y + r * OW, tmp + (m - m0) * n + r * j->Wp, (size_t)OW * sizeof *y);
            if (!epilogue) continue;
            if (j->z)
                for (int64_t i = 0; i < nrows * OW; i++) y[i] += j->z[at + i];
            if (j->act && j->act->kind != KILN_ACT_NONE) kiln_cpu_activation_apply(y, nrows * OW, j->act);
        }
    }
}

kiln_status kiln_conv2d_run_shifted(const kiln_conv2d *g, const float *x, const kiln_conv2d_weights *packed,
                                    const float *bias, const float *residual, const kiln_act *act, float *y) {
    shifted_job j = {.g = g, .packed = packed, .x = x, .bias = bias, .z = residual, .act = act, .y = y};
    j.Cg = g->C / g->group;
    j.Mg = g->M / g->group;
    j.K = g->KH * g->KW * j.Cg;
    j.Wp = g->OW + (g->KW - 1) * g->dw;
    j.Hp = g->OH + (g->KH - 1) * g->dh + 1; /* one more row: the last block's dropped columns read into it */
    j.plane = j.Hp * j.Wp;
    atomic_init(&j.oom, false);
    j.xp = kiln_cpu_scratch(KILN_SCRATCH_SHARED, (size_t)(g->N * g->C * j.plane));
    if (!j.xp) return kiln_error(KILN_ERR_OUT_OF_MEMORY, "Conv: out of memory for the padded input");
    kiln_parallel_for(g->N * g->C, 16, pad_part, &j);
    int threads = kiln_threadpool_size();
    /* blocks of whole rows near BLOCK_COLUMNS columns, as many rows in each (the last one too) */
    int64_t blocks = (g->OH * j.Wp + BLOCK_COLUMNS - 1) / BLOCK_COLUMNS, per_image = g->N * g->group;
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
