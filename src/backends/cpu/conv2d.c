/* conv2d.c — kiln_conv2d_run (conv2d.h) and its packed weights. Work is cut into tasks that the
 * pool runs in contiguous ranges: a chunk of output positions of one image and group (and a block
 * of output channels) per task. A task's scratch (the im2col columns of its chunk for OpenBLAS, or
 * the packed block of the product's right side) lives in a per-thread buffer (cpu_scratch.h) that
 * grows and is kept for the thread's life, so steady-state runs allocate nothing. Matrix products
 * are single-threaded inside the tasks: kiln_pg_gemm on packed weights, else OpenBLAS (cpu_gemm.c
 * switches it to one thread). Convolutions on packed weights skip im2col at any stride
 * (conv2d_shifted.c), 3x3 stride-1 ones with enough channels run by Winograd's F(4x4, 3x3)
 * (conv2d_winograd.c); outputs of few positions run transposed (conv2d_small.c); depthwise
 * convolutions run a direct kernel (conv2d_depthwise.c). */
#include "backends/cpu/conv2d.h"

#include "backends/cpu/cpu_gemm.h"
#include "backends/cpu/cpu_scratch.h"
#include "backends/cpu/cpu_simd.h"
#include "backends/cpu/fused_kernels.h"
#include "backends/cpu/packed_gemm.h"
#include "core/status.h"
#include "core/threadpool.h"
#include "ir/nn_window.h"

#include <cblas.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

/* Floats of im2col columns one task builds (512 KiB: half of a core's L2), unless that leaves
 * fewer than 256 columns. */
#define COL_BUDGET (INT64_C(1) << 17)

kiln_status kiln_conv2d_geometry(const kiln_node *n, const kiln_tensor *x, const kiln_tensor *w, const kiln_tensor *b,
                                 kiln_conv2d *g) {
    if (x->ndim != 4 || w->ndim != 4)
        return kiln_error(KILN_ERR_SHAPE, "%s: a 2-D convolution needs 4-D X and W (got ranks %d and %d)", n->op_type,
                          x->ndim, w->ndim);
    memset(g, 0, sizeof *g);
    g->N = x->dims[0];
    g->C = x->dims[1];
    g->H = x->dims[2];
    g->W = x->dims[3];
    g->M = w->dims[0];
    g->KH = w->dims[2];
    g->KW = w->dims[3];
    g->group = kiln_attr_int(n, "group", 1);
    if (g->group < 1 || g->C % g->group || w->dims[1] * g->group != g->C || g->M % g->group)
        return kiln_error(KILN_ERR_SHAPE, "%s: weights [%lld, %lld, ...] do not fit %lld input channels in %lld groups",
                          n->op_type, (long long)w->dims[0], (long long)w->dims[1], (long long)g->C,
                          (long long)g->group);
    if (b && (b->ndim != 1 || b->dims[0] != g->M))
        return kiln_error(KILN_ERR_SHAPE, "%s: bias must be [%lld]", n->op_type, (long long)g->M);
    kiln_window win;
    KILN_TRY(kiln_window_parse(n, 2, w->dims + 2, &win));
    int64_t pe;
    KILN_TRY(kiln_window_out(&win, 0, g->H, &g->OH, &g->ph, &pe));
    KILN_TRY(kiln_window_out(&win, 1, g->W, &g->OW, &g->pw, &pe));
    g->sh = win.stride[0];
    g->sw = win.stride[1];
    g->dh = win.dilation[0];
    g->dw = win.dilation[1];
    int64_t lim = INT32_MAX, taps = g->KH * g->KW > 0 ? g->KH * g->KW : 1;
    if (g->H > lim / (g->W ? g->W : 1) || g->OH > lim / (g->OW ? g->OW : 1) || g->KH > lim / (g->KW ? g->KW : 1) ||
        g->C > lim / taps || g->M > lim / taps)
        return kiln_error(KILN_ERR_UNSUPPORTED, "%s: a spatial plane or kernel matrix above 2^31 elements", n->op_type);
    return KILN_OK;
}

/* ------------------------------------------------------------------ packed weights */
kiln_status kiln_conv2d_weights_pack(const float *w, int64_t M, int64_t Cg, int64_t KH, int64_t KW, int64_t group,
                                     int64_t out_positions, bool unit_stride, kiln_conv2d_weights **out) {
    *out = NULL;
    if (group < 1 || M % group || kiln_conv2d_depthwise_fits(M, Cg, KH, KW, group) || M * Cg * KH * KW == 0) return KILN_OK;
    bool by_columns = out_positions > 0 && out_positions <= KILN_CONV2D_SMALL_OUTPUT;
    bool winograd = !by_columns && unit_stride && KH == 3 && KW == 3 && group == 1 &&
                    Cg >= KILN_CONV2D_WINOGRAD_CHANNELS && M >= KILN_CONV2D_WINOGRAD_CHANNELS;
    bool by_tiles = winograd && out_positions > 0 && out_positions < KILN_CONV2D_WINOGRAD_POSITIONS;
    int64_t Mg = M / group, rows = Cg * KH * KW;
    int64_t per = by_columns ? kiln_pg_packed_b_floats(rows, Mg) : kiln_pg_packed_a_floats(Mg, rows);
    if (winograd) per = kiln_conv2d_winograd_floats(M, Cg, by_tiles) / KILN_CONV2D_WINOGRAD_XI;
    size_t bytes = ((size_t)(per * (winograd ? KILN_CONV2D_WINOGRAD_XI : group)) * sizeof(float) + 63) / 64 * 64;
    kiln_conv2d_weights *pw = calloc(1, sizeof *pw);
    float *data = aligned_alloc(64, bytes), *tap_major = malloc((size_t)(Mg * rows) * sizeof *tap_major);
    if (!pw || !data || !tap_major) {
        free(pw);
        free(data);
        free(tap_major);
        return kiln_error(KILN_ERR_OUT_OF_MEMORY, "Conv: out of memory packing %lld x %lld weights", (long long)M,
                          (long long)rows);
    }
    *pw = (kiln_conv2d_weights){M, Cg, KH, KW, group, per, by_columns, winograd, by_tiles, data, false, false};
    const int64_t taps = KH * KW;
    if (winograd) kiln_conv2d_winograd_pack(w, M, Cg, by_tiles, tap_major, data); /* 9 M Cg >= 36 Cg floats */
    for (int64_t gr = 0; gr < group && !winograd; gr++) {
        for (int64_t m = 0; m < Mg; m++)
            for (int64_t c = 0; c < Cg; c++)
                for (int64_t t = 0; t < taps; t++)
                    tap_major[m * rows + t * Cg + c] = w[((gr * Mg + m) * Cg + c) * taps + t];
        if (by_columns) kiln_pg_pack_b(tap_major, 1, rows, rows, Mg, data + gr * per); /* (k, m) at m * rows + k */
        else kiln_pg_pack_a(tap_major, rows, Mg, rows, data + gr * per);
    }
    free(tap_major);
    *out = pw;
    return KILN_OK;
}

void kiln_conv2d_weights_free(kiln_conv2d_weights *pw) {
    if (!pw) return;
    if (!pw->borrowed) free(pw->data);
    free(pw);
}

bool kiln_conv2d_weights_fit(const kiln_conv2d_weights *pw, const kiln_conv2d *g) {
    return pw && pw->M == g->M && pw->Cg * g->group == g->C && pw->KH == g->KH && pw->KW == g->KW &&
           pw->group == g->group && (!pw->by_columns || g->OH * g->OW <= KILN_CONV2D_SMALL_OUTPUT) &&
           (!pw->winograd || (g->sh == 1 && g->sw == 1 && g->dh == 1 && g->dw == 1));
}

static float *thread_scratch(size_t count) { return kiln_cpu_scratch(KILN_SCRATCH_TASK, count); }

/* ------------------------------------------------------------------ epilogue */
/* p[0, len) = act(p + bias + z) (z may be NULL), for one output channel. */
static void epilogue_row(float *p, int64_t len, float bias, const float *z, const kiln_act *act) {
    if (bias != 0.0f)
        for (int64_t i = 0; i < len; i++) p[i] += bias;
    if (z)
        for (int64_t i = 0; i < len; i++) p[i] += z[i];
    if (act && act->kind != KILN_ACT_NONE) kiln_cpu_activation_apply(p, len, act);
}

typedef struct conv_job {
    const kiln_conv2d *g;
    const float *x, *w, *bias, *z;
    const kiln_conv2d_weights *packed; /* NULL: OpenBLAS on w */
    const kiln_act *act;
    float *y;
    int64_t Cg, Mg, HW, OHW, rows;  /* rows: Cg * KH * KW */
    int64_t chunk, chunks;           /* output positions per task, column chunks per (image, group) */
    int64_t mblocks;                 /* blocks of output channels per column chunk */
    bool pointwise;
    atomic_bool oom;
} conv_job;

/* kiln_conv2d_copy_strided's body, cloned per instruction set: static, because Clang's target_clones
 * gives an external function no symbol that other files' plain declarations can call. */
KILN_SIMD_CLONES
static void copy_strided(float *restrict d, const float *restrict s, int64_t n, int64_t stride) {
    if (stride == 1) {
        memcpy(d, s, (size_t)n * sizeof *d);
        return;
    }
    int64_t i = 0;
    if (stride == 2)
        for (; i + 8 <= n && 2 * i + 16 <= 2 * n - 1; i += 8) { /* the second vector stays inside s[0, 2n - 1) */
            kiln_v8f lo = kiln_v8_load(s + 2 * i), hi = kiln_v8_load(s + 2 * i + 8);
            kiln_v8_store(d + i, __builtin_shufflevector(lo, hi, 0, 2, 4, 6, 8, 10, 12, 14));
        }
    for (; i < n; i++) d[i] = s[i * stride];
}

void kiln_conv2d_copy_strided(float *restrict d, const float *restrict s, int64_t n, int64_t stride) {
    copy_strided(d, s, n, stride);
}

/* ------------------------------------------------------------------ im2col / pointwise */
/* col[r * width + (p - p0)] for output positions p in [p0, p0 + width) and rows r = (c, kh, kw)
 * (W's order) of the group's Cg channels starting at x: the input under that tap, 0 in the padding. */
static void im2col_chunk(const kiln_conv2d *g, const float *x, int64_t Cg, int64_t p0, int64_t width, float *col) {
    const int64_t OW = g->OW, HW = g->H * g->W;
    for (int64_t c = 0; c < Cg; c++)
        for (int64_t kh = 0; kh < g->KH; kh++)
            for (int64_t kw = 0; kw < g->KW; kw++) {
                float *dst = col + ((c * g->KH + kh) * g->KW + kw) * width;
                const float *xc = x + c * HW;
                for (int64_t p = p0; p < p0 + width;) {
                    int64_t oh = p / OW, ow0 = p % OW, ow1 = OW - ow0 < p0 + width - p ? OW : ow0 + (p0 + width - p);
                    int64_t ih = oh * g->sh - g->ph + kh * g->dh, n = ow1 - ow0;
                    float *d = dst + (p - p0);
                    int64_t lo = ow0, hi = ow1, first = kw * g->dw - g->pw; /* iw = ow * sw + first */
                    while (lo < hi && lo * g->sw + first < 0) lo++;
                    while (hi > lo && (hi - 1) * g->sw + first >= g->W) hi--;
                    if (ih < 0 || ih >= g->H) lo = hi = ow0;
                    memset(d, 0, (size_t)(lo - ow0) * sizeof *d);
                    const float *xr = xc + ih * g->W + first;
                    if (hi > lo) kiln_conv2d_copy_strided(d + (lo - ow0), xr + lo * g->sw, hi - lo, g->sw);
                    memset(d + (hi - ow0), 0, (size_t)(ow1 - hi) * sizeof *d);
                    p += n;
                }
            }
}

/* C [M, N] (ldc) = A [M, K] B [K, N] (ldb), single-threaded OpenBLAS. */
static void product(int64_t M, int64_t N, int64_t K, const float *A, const float *B, int64_t ldb, float *C,
                    int64_t ldc) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)M, (int)N, (int)K, 1.0f, A, (int)K, B, (int)ldb, 0.0f,
                C, (int)ldc);
}

/* The residual (z, rows ldz apart, may be NULL) and activation of a part's packed product. */
typedef struct block_epilogue {
    const float *z;
    int64_t ldz;
    const kiln_act *act;
} block_epilogue;

/* kiln_pg_epilogue's fn: rows are output channels from the part's first, columns output positions
 * from its first. */
static void epilogue_block(void *ctx, float *c, int64_t ldc, int64_t r0, int64_t rows, int64_t c0, int64_t cols) {
    const block_epilogue *e = ctx;
    if (!e->z && ldc == cols) { /* whole rows, contiguous: the activation in one pass */
        epilogue_row(c, rows * cols, 0.0f, NULL, e->act);
        return;
    }
    for (int64_t r = 0; r < rows; r++)
        epilogue_row(c + r * ldc, cols, 0.0f, e->z ? e->z + (r0 + r) * e->ldz + c0 : NULL, e->act);
}

static void gemm_part(void *ctx, int64_t t0, int64_t t1) {
    conv_job *j = ctx;
    const kiln_conv2d *g = j->g;
    /* scratch: the im2col columns of a chunk (OpenBLAS), or kiln_pg_gemm's (packed, pointwise) */
    int64_t floats = j->packed ? kiln_pg_scratch_floats() : j->pointwise ? 0 : j->rows * j->chunk;
    float *scratch = thread_scratch((size_t)floats + 1);
    if (!scratch) {
        atomic_store(&j->oom, true);
        return;
    }
    for (int64_t t = t0; t < t1; t++) { /* t = ((image * group + gr) * chunks + chunk) * mblocks + mblock */
        int64_t mb = t % j->mblocks, ck = t / j->mblocks % j->chunks, ig = t / j->mblocks / j->chunks;
        int64_t gr = ig % g->group, img = ig / g->group;
        int64_t m0 = j->Mg * mb / j->mblocks, m1 = j->Mg * (mb + 1) / j->mblocks;
        if (j->packed) { /* whole panels of packed rows per block */
            int64_t panels = (j->Mg + KILN_PG_MR - 1) / KILN_PG_MR;
            m0 = panels * mb / j->mblocks * KILN_PG_MR;
            m1 = panels * (mb + 1) / j->mblocks * KILN_PG_MR;
            if (m1 > j->Mg) m1 = j->Mg;
        }
        int64_t p0 = ck * j->chunk, width = j->OHW - p0 < j->chunk ? j->OHW - p0 : j->chunk;
        const float *xg = j->x + (img * g->C + gr * j->Cg) * j->HW, *wg = j->w + (gr * j->Mg + m0) * j->rows;
        int64_t ybase = (img * g->M + gr * j->Mg + m0) * j->OHW + p0;
        float *yg = j->y + ybase;
        const float *bias = j->bias ? j->bias + gr * j->Mg + m0 : NULL;
        bool gemv = j->pointwise && j->OHW == 1 && !(j->packed && j->packed->stored); /* stored: no plain w */
        if (gemv) /* one position (squeeze-excitation): a matrix-vector product */
            kiln_cpu_sgemm(false, true, 1, m1 - m0, j->Cg, 1.0f, xg, j->Cg, wg, j->Cg, 0.0f, yg, m1 - m0);
        else if (j->packed) {
            const float *a = j->packed->data + gr * j->packed->group_floats + m0 * j->rows;
            block_epilogue be = {j->z ? j->z + ybase : NULL, j->OHW, j->act};
            kiln_pg_epilogue ep = {epilogue_block, &be, false};
            if (!j->z && j->act && j->act->kind == KILN_ACT_RELU) /* taken in the micro-kernel's store */
                ep = (kiln_pg_epilogue){NULL, NULL, true};
            const kiln_pg_epilogue *epp = j->z || (j->act && j->act->kind != KILN_ACT_NONE) ? &ep : NULL;
            kiln_pg_gemm(a, m1 - m0, j->rows, xg + p0, j->HW, NULL, width, bias, yg, j->OHW, epp, scratch);
            continue;
        } else if (j->pointwise) product(m1 - m0, width, j->Cg, wg, xg + p0, j->HW, yg, j->OHW);
        else {
            im2col_chunk(g, xg, j->Cg, p0, width, scratch);
            product(m1 - m0, width, j->rows, wg, scratch, width, yg, j->OHW);
        }
        for (int64_t m = m0; m < m1; m++)
            epilogue_row(yg + (m - m0) * j->OHW, width, bias ? bias[m - m0] : 0.0f,
                         j->z ? j->z + ybase + (m - m0) * j->OHW : NULL, j->act);
    }
}

kiln_status kiln_conv2d_run(const kiln_conv2d *g, const float *x, const float *w, const kiln_conv2d_weights *packed,
                            const float *bias, const float *residual, const kiln_act *act, float *y) {
    bool stored_misfit = packed && packed->stored &&
                         (!kiln_conv2d_weights_fit(packed, g) ||
                          kiln_conv2d_depthwise_fits(g->M, g->C / g->group, g->KH, g->KW, g->group));
    if (stored_misfit) /* w is no plain copy: nothing else can run */
        return kiln_error(KILN_ERR_SHAPE,
                          "Conv: its weights, stored packed (by %s, for outputs of at most %d positions when by "
                          "columns), do not fit a convolution of %lld channels, groups %lld, output %lld x %lld",
                          packed->winograd ? "Winograd transforms" : packed->by_columns ? "columns" : "rows",
                          KILN_CONV2D_SMALL_OUTPUT, (long long)g->M,
                          (long long)g->group, (long long)g->OH, (long long)g->OW);
    if (!kiln_conv2d_weights_fit(packed, g)) packed = NULL;
    conv_job j = {.g = g, .x = x, .w = w, .packed = packed, .bias = bias, .z = residual, .act = act, .y = y};
    j.Cg = g->C / g->group;
    j.Mg = g->M / g->group;
    j.HW = g->H * g->W;
    j.OHW = g->OH * g->OW;
    j.rows = j.Cg * g->KH * g->KW;
    atomic_init(&j.oom, false);
    if (g->N * g->M * j.OHW == 0) return KILN_OK;
    kiln_cpu_gemm_init();
    int threads = kiln_threadpool_size();
    if (kiln_conv2d_depthwise_fits(g->M, j.Cg, g->KH, g->KW, g->group))
        return kiln_conv2d_run_depthwise(g, x, w, bias, residual, act, y);
    j.pointwise = g->KH == 1 && g->KW == 1 && g->sh == 1 && g->sw == 1 && g->ph == 0 && g->pw == 0 &&
                  g->OH == g->H && g->OW == g->W;
    if (packed && packed->by_columns) {
        if (!(j.pointwise && j.OHW == 1) || packed->stored)
            return kiln_conv2d_run_small(g, x, packed, bias, residual, act, y);
        j.packed = NULL; /* one position: the matrix-vector product on w (stored weights have none) */
    }
    if (packed && packed->winograd) return kiln_conv2d_run_winograd(g, x, packed, bias, residual, act, y);
    if (j.packed && !j.pointwise) /* packed by rows: any stride runs on shifted phase planes */
        return kiln_conv2d_run_shifted(g, x, packed, bias, residual, act, y);
    /* Wide outputs are cut into column chunks (within the im2col budget, never narrower than 256
     * columns, so the weights are not repacked for a handful of columns); narrow ones, late in a
     * network, give each thread a block of output channels instead. */
    int64_t per_image = g->N * g->group, want = (threads + per_image - 1) / per_image;
    int64_t narrow = 128 * (int64_t)threads, floor_w = j.OHW < 256 ? j.OHW : 256;
    int64_t chunk = j.OHW >= narrow ? (j.OHW + want - 1) / want : j.OHW;
    int64_t budget = COL_BUDGET / (j.rows > 0 ? j.rows : 1);
    if (!j.pointwise && chunk > budget) chunk = budget > floor_w ? budget : floor_w;
    j.chunk = chunk;
    j.chunks = (j.OHW + chunk - 1) / chunk;
    j.mblocks = 1;
    if (per_image * j.chunks < threads && j.OHW > 1) {
        int64_t unit = j.packed ? 2 * KILN_PG_MR : 16; /* output channels a block holds at least */
        j.mblocks = j.Mg / unit < threads ? j.Mg / unit : threads;
        if (j.mblocks < 1) j.mblocks = 1;
    }
    int64_t tasks = per_image * j.chunks * j.mblocks;
    bool small = g->N * g->M * j.OHW * (j.rows > 0 ? j.rows : 1) < 32768;
    kiln_parallel_for(tasks, small ? tasks : 1, gemm_part, &j);
    if (atomic_load(&j.oom))
        return kiln_error(KILN_ERR_OUT_OF_MEMORY, "Conv: out of memory for the per-thread scratch");
    return KILN_OK;
}
