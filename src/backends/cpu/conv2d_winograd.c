/* conv2d_winograd.c — 3x3 stride-1 2-D Conv by Winograd's minimal filtering F(4x4, 3x3): every 4x4
 * block of outputs (a "tile") comes from the 6x6 input patch under it as Y = A^T [(G g G^T) .
 * (B^T d B)] A, 36 products per output channel and input channel instead of 144. The weights'
 * transforms U = G g G^T are made once, when the engine packs them (and a cpu engine file stores
 * them, packed_weights.h): one [M, C] matrix per position xi of the 6x6 transform, in
 * kiln_pg_pack_a's layout (kiln_conv2d_weights_pack). Per run, the input is copied once into
 * zero-padded planes in a 4-phase layout (padded column q at (q % 4) * lp + q / 4), so the columns
 * of 16 neighbouring tiles under one tap are contiguous; tasks take a block of at most KILN_PG_NR
 * tiles (a multiple of 16 where that fills the product's vectors better), transform its patches
 * 16 tiles at a time (B^T d B on 16-lane vectors) straight into kiln_pg_pack_b's layout, then, for
 * a group of output channels at a time, run the 36 packed products M_xi = U_xi V_xi and turn them
 * into outputs (A^T M A, bias, residual, activation) while they are in cache. Few tiles (small
 * images) would fill few of the product's 48 columns: there the weights are packed by columns and
 * the products run transposed, tiles in the rows (M_xi^T = V_xi^T U_xi^T), transposed back before
 * the output transform. */
#include "backends/cpu/conv2d.h"

#include "backends/cpu/cpu_scratch.h"
#include "backends/cpu/cpu_simd.h"
#include "backends/cpu/fused_kernels.h"
#include "backends/cpu/packed_gemm.h"
#include "core/status.h"
#include "core/threadpool.h"

#include <stdatomic.h>
#include <string.h>

#if defined(__x86_64__) && defined(__linux__) && !defined(KILN_NO_SIMD_CLONES)
#define WINO_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define WINO_CLONES
#endif

enum { XI = KILN_CONV2D_WINOGRAD_XI, LANES = 16, GROUP = KILN_PG_NR };

typedef float wino_v16 __attribute__((vector_size(64)));

#define V16_LOAD(p)                                                                                \
    ({                                                                                             \
        wino_v16 v_;                                                                               \
        memcpy(&v_, (p), sizeof v_);                                                               \
        v_;                                                                                        \
    })

typedef struct wino_job {
    const kiln_conv2d *g;
    const kiln_conv2d_weights *packed;
    const float *bias, *z;
    const kiln_act *act;
    const float *x;
    float *y, *xp; /* xp: the padded input planes [N * C][PH][4 * lp] in phase layout */
    int64_t TH, TW, tiles;         /* tile rows and columns per image, tiles in all images */
    int64_t PH, lp, plane;         /* padded rows, phase length, floats per padded plane */
    int64_t nt, blocks, msplit;    /* tiles per block, tile blocks, blocks of output channels per tile block */
    int64_t unit;                  /* output channels a block of them holds a multiple of: MR, or NR by tiles */
    atomic_bool oom;
} wino_job;

/* ------------------------------------------------------------------ weights */
void kiln_conv2d_winograd_pack(const float *w, int64_t M, int64_t C, bool tiles_in_rows, float *u, float *dst) {
    static const double G[6][3] = {{1.0 / 4, 0, 0},
                                   {-1.0 / 6, -1.0 / 6, -1.0 / 6},
                                   {-1.0 / 6, 1.0 / 6, -1.0 / 6},
                                   {1.0 / 24, 1.0 / 12, 1.0 / 6},
                                   {1.0 / 24, -1.0 / 12, 1.0 / 6},
                                   {0, 0, 1}};
    const int64_t per = kiln_conv2d_winograd_floats(M, C, tiles_in_rows) / XI, MR = KILN_PG_MR, NR = KILN_PG_NR;
    memset(dst, 0, (size_t)(XI * per) * sizeof *dst); /* the last panel's rows or columns past M */
    for (int64_t m = 0; m < M; m++) {
        for (int64_t c = 0; c < C; c++) {
            const float *k = w + (m * C + c) * 9;
            double t[6][3];
            for (int i = 0; i < 6; i++)
                for (int j = 0; j < 3; j++) t[i][j] = G[i][0] * k[j] + G[i][1] * k[3 + j] + G[i][2] * k[6 + j];
            for (int i = 0; i < 6; i++)
                for (int j = 0; j < 6; j++)
                    u[(i * 6 + j) * C + c] = (float)(t[i][0] * G[j][0] + t[i][1] * G[j][1] + t[i][2] * G[j][2]);
        }
        /* U_xi (m, c): row m of [M, C] in MR-row panels, or column m of [C, M] in NR-column panels */
        int64_t at = tiles_in_rows ? m / NR * C * NR + m % NR : m / MR * C * MR + m % MR;
        int64_t step = tiles_in_rows ? NR : MR;
        for (int xi = 0; xi < XI; xi++)
            for (int64_t c = 0; c < C; c++) dst[xi * per + at + c * step] = u[xi * C + c];
    }
}

int64_t kiln_conv2d_winograd_floats(int64_t M, int64_t C, bool tiles_in_rows) {
    return XI * (tiles_in_rows ? kiln_pg_packed_b_floats(C, M) : kiln_pg_packed_a_floats(M, C));
}

/* ------------------------------------------------------------------ input */
/* Columns p, p + 4, ..., p + 60 of the 64 in a, b, c, d (16 each), for phase p. */
#define PHASE(a, b, c, d, p)                                                                       \
    __builtin_shufflevector(                                                                       \
        __builtin_shufflevector(a, b, p, p + 4, p + 8, p + 12, p + 16, p + 20, p + 24, p + 28),    \
        __builtin_shufflevector(c, d, p, p + 4, p + 8, p + 12, p + 16, p + 20, p + 24, p + 28), 0, \
        1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15)

/* The second pass of a 2-D transform: the 1-D transform ROWS (BT_ROWS or AT_ROWS) down column c of
 * the six rows of vectors a[0..5], into o (a macro: 16-lane vectors cannot be passed to a function
 * of the baseline clone). */
#define COLUMN_PASS(ROWS, a, c, o)                                                                 \
    do {                                                                                           \
        wino_v16 col_[6];                                                                          \
        _Pragma("GCC unroll 6") for (int r_ = 0; r_ < 6; r_++) col_[r_] = (a)[r_][c];              \
        ROWS(col_, o);                                                                             \
    } while (0)

/* One padded row from a row of the input (row NULL: a padding row): row's W columns from column
 * pw of the zero-padded row, split into the four phases (lp columns each, a multiple of 16) at
 * dst; tmp: 4 lp floats. */
WINO_CLONES
static void pad_row(const float *row, int64_t W, int64_t pw, int64_t lp, float *tmp, float *dst) {
    if (!row) {
        memset(dst, 0, (size_t)(4 * lp) * sizeof *dst);
        return;
    }
    memset(tmp, 0, (size_t)pw * sizeof *tmp);
    memcpy(tmp + pw, row, (size_t)W * sizeof *tmp);
    memset(tmp + pw + W, 0, (size_t)(4 * lp - pw - W) * sizeof *tmp);
    for (int64_t i = 0; i < lp; i += LANES) {
        wino_v16 a = V16_LOAD(tmp + 4 * i), b = V16_LOAD(tmp + 4 * i + 16), c = V16_LOAD(tmp + 4 * i + 32),
                 d = V16_LOAD(tmp + 4 * i + 48);
        wino_v16 p0 = PHASE(a, b, c, d, 0), p1 = PHASE(a, b, c, d, 1), p2 = PHASE(a, b, c, d, 2),
                 p3 = PHASE(a, b, c, d, 3);
        memcpy(dst + i, &p0, sizeof p0);
        memcpy(dst + lp + i, &p1, sizeof p1);
        memcpy(dst + 2 * lp + i, &p2, sizeof p2);
        memcpy(dst + 3 * lp + i, &p3, sizeof p3);
    }
}

/* Padded planes [b, e): padded row r is input row r - ph, padded column q input column q - pw. */
static void pad_part(void *ctx, int64_t b, int64_t e) {
    wino_job *j = ctx;
    const kiln_conv2d *g = j->g;
    float *tmp = kiln_cpu_scratch(KILN_SCRATCH_TASK, (size_t)(4 * j->lp));
    if (!tmp) {
        atomic_store(&j->oom, true);
        return;
    }
    for (int64_t t = b; t < e; t++) {
        const float *src = j->x + t * g->H * g->W;
        for (int64_t r = 0; r < j->PH; r++) {
            int64_t ih = r - g->ph;
            pad_row(ih >= 0 && ih < g->H ? src + ih * g->W : NULL, g->W, g->pw, j->lp, tmp,
                    j->xp + t * j->plane + r * 4 * j->lp);
        }
    }
}

/* The six combinations of d[0..5] that B^T applies along one axis. */
#define BT_ROWS(d, o)                                                                              \
    do {                                                                                           \
        o[0] = 4.0f * d[0] - 5.0f * d[2] + d[4];                                                   \
        o[1] = d[3] + d[4] - 4.0f * (d[1] + d[2]);                                                 \
        o[2] = d[4] - d[3] + 4.0f * (d[1] - d[2]);                                                 \
        o[3] = d[4] - d[2] + 2.0f * (d[3] - d[1]);                                                 \
        o[4] = d[4] - d[2] + 2.0f * (d[1] - d[3]);                                                 \
        o[5] = 4.0f * d[1] - 5.0f * d[3] + d[5];                                                   \
    } while (0)

/* V_xi for n <= 16 tiles (tile row, columns tw..tw + n - 1) of one padded plane (rows from the
 * tile row's first): lane l of xi at v + xi * vstride + l. When full, all 16 lanes are stored
 * (those past n hold garbage for the caller to overwrite), else n. */
WINO_CLONES
static void input_tiles(const float *plane, int64_t ld, int64_t lp, int64_t tw, float *v, int64_t vstride, int64_t n,
                        bool full) {
    wino_v16 w[6][6];
    #pragma GCC unroll 6
    for (int r = 0; r < 6; r++) {
        const float *row = plane + r * ld + tw;
        wino_v16 d[6], o[6];
        #pragma GCC unroll 6
        for (int s = 0; s < 6; s++) d[s] = V16_LOAD(row + (s % 4) * lp + s / 4);
        BT_ROWS(d, o);
        #pragma GCC unroll 6
        for (int c = 0; c < 6; c++) w[r][c] = o[c];
    }
    #pragma GCC unroll 6
    for (int c = 0; c < 6; c++) {
        wino_v16 o[6];
        COLUMN_PASS(BT_ROWS, w, c, o);
        #pragma GCC unroll 6
        for (int i = 0; i < 6; i++) {
            if (full) memcpy(v + (i * 6 + c) * vstride, &o[i], sizeof o[i]);
            else memcpy(v + (i * 6 + c) * vstride, &o[i], (size_t)n * sizeof(float));
        }
    }
}

/* ------------------------------------------------------------------ output */
/* The four combinations of m[0..5] that A^T applies along one axis. */
#define AT_ROWS(m, o)                                                                              \
    do {                                                                                           \
        o[0] = m[0] + (m[1] + m[2]) + (m[3] + m[4]);                                               \
        o[1] = (m[1] - m[2]) + 2.0f * (m[3] - m[4]);                                               \
        o[2] = (m[1] + m[2]) + 4.0f * (m[3] + m[4]);                                               \
        o[3] = (m[1] - m[2]) + 8.0f * (m[3] - m[4]) + m[5];                                        \
    } while (0)

typedef int wino_v16i __attribute__((vector_size(64)));

/* Stores v + residual (z may be NULL), ReLU'd when relu, to the first n <= 16 floats of y (a
 * macro: 16-lane vectors cannot be passed to a function of the baseline clone). */
#define STORE_OUT(y, z, v, n, relu)                                                                \
    do {                                                                                           \
        wino_v16 o_ = (v);                                                                         \
        const float *z_ = (z);                                                                     \
        if (z_) {                                                                                  \
            wino_v16 r_ = {0};                                                                     \
            if ((n) == LANES) memcpy(&r_, z_, sizeof r_);                                          \
            else memcpy(&r_, z_, (size_t)(n) * sizeof(float));                                     \
            o_ += r_;                                                                              \
        }                                                                                          \
        if (relu) o_ = (wino_v16)((wino_v16i)o_ & (o_ > (wino_v16){0}));                           \
        if ((n) == LANES) memcpy((y), &o_, sizeof o_);                                             \
        else memcpy((y), &o_, (size_t)(n) * sizeof(float));                                       \
    } while (0)

/* The 4x4 outputs of 16 tiles of one tile row from their 36 products (m_xi at p + xi * pstride +
 * l) plus bias, plus the residual (z, laid out as y; may be NULL), ReLU'd when relu: the first
 * rows (<= 4) rows and width (<= 64) columns of the output block at y (rows ldy apart). */
WINO_CLONES
static void output_tiles(const float *p, int64_t pstride, float bias, float *y, const float *z, int64_t ldy,
                         int64_t rows, int64_t width, bool relu) {
    wino_v16 t[6][4];
    #pragma GCC unroll 6
    for (int r = 0; r < 6; r++) {
        wino_v16 m[6], o[4];
        #pragma GCC unroll 6
        for (int c = 0; c < 6; c++) m[c] = V16_LOAD(p + (r * 6 + c) * pstride);
        AT_ROWS(m, o);
        #pragma GCC unroll 6
        for (int c = 0; c < 4; c++) t[r][c] = o[c];
    }
    wino_v16 res[4][4]; /* res[i][c]: row i, column c of the tiles */
    #pragma GCC unroll 6
    for (int c = 0; c < 4; c++) {
        wino_v16 o[4];
        COLUMN_PASS(AT_ROWS, t, c, o);
        #pragma GCC unroll 6
        for (int i = 0; i < 4; i++) res[i][c] = o[i] + bias;
    }
    #pragma GCC unroll 6
    for (int i = 0; i < rows; i++) { /* interleave the four columns: position 4 l + c */
        wino_v16 lo02 = __builtin_shufflevector(res[i][0], res[i][2], 0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23);
        wino_v16 hi02 = __builtin_shufflevector(res[i][0], res[i][2], 8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30,
                                                15, 31);
        wino_v16 lo13 = __builtin_shufflevector(res[i][1], res[i][3], 0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23);
        wino_v16 hi13 = __builtin_shufflevector(res[i][1], res[i][3], 8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30,
                                                15, 31);
        wino_v16 q[4] = {
            __builtin_shufflevector(lo02, lo13, 0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23),
            __builtin_shufflevector(lo02, lo13, 8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31),
            __builtin_shufflevector(hi02, hi13, 0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23),
            __builtin_shufflevector(hi02, hi13, 8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31)};
        float *yr = y + i * ldy;
        const float *zr = z ? z + i * ldy : NULL;
        for (int k = 0; k < 4 && 16 * k < width; k++) {
            int64_t n = width - 16 * k < LANES ? width - 16 * k : LANES;
            STORE_OUT(yr + 16 * k, zr ? zr + 16 * k : NULL, q[k], n, relu);
        }
    }
}

/* ------------------------------------------------------------------ tasks */
/* Runs the statements that follow for the runs of at most 16 tiles of one tile row that make up
 * tiles [t0, t1), with img, th, tw (the run's first tile), n (its tiles) and l (its first tile's index
 * within the block) set (no `continue` in them). */
#define FOR_RUNS(j, t0, t1, ...)                                                                  \
    for (int64_t t_ = (t0); t_ < (t1);) {                                                          \
        int64_t per_ = (j)->TH * (j)->TW, img = t_ / per_, th = t_ % per_ / (j)->TW, tw = t_ % (j)->TW; \
        int64_t n = (j)->TW - tw < (t1) - t_ ? (j)->TW - tw : (t1) - t_, l = t_ - (t0);            \
        if (n > LANES) n = LANES;                                                                  \
        __VA_ARGS__;                                                                               \
        t_ += n;                                                                                   \
    }

/* The transformed input of tiles [t0, t1) (nt of them): V_xi [C, nt] as one NR-column panel
 * ((c, l) at v + xi * vstride + c * NR + l), or by tiles, V_xi^T [nt, C] in MR-row panels ((l, c)
 * at v + xi * vstride + (l / MR * C + c) * MR + l % MR), one channel at a time through lanes
 * (36 rows of NR floats, then copied a panel row at a time). What the products read past the nt
 * tiles is finite: zeros, or the transforms of other tiles. */
static void transform_block(const wino_job *j, int64_t t0, int64_t t1, float *v, int64_t vstride, float *lanes) {
    const int64_t C = j->g->C, NR = KILN_PG_NR, MR = KILN_PG_MR, nt = t1 - t0;
    const bool by_tiles = j->packed->winograd_by_tiles;
    if (by_tiles) memset(lanes, 0, (size_t)(XI * NR) * sizeof *lanes);
    for (int64_t c = 0; c < C; c++) {
        float *dst = by_tiles ? lanes : v + c * NR;
        int64_t dstride = by_tiles ? NR : vstride;
        FOR_RUNS(j, t0, t1, {
            const float *plane = j->xp + (img * C + c) * j->plane + 4 * th * 4 * j->lp;
            input_tiles(plane, 4 * j->lp, j->lp, tw, dst + l, dstride, n, l + LANES <= NR);
        })
        if (by_tiles)
            for (int xi = 0; xi < XI; xi++)
                for (int64_t p = 0; p * MR < nt; p++)
                    memcpy(v + xi * vstride + (p * C + c) * MR, lanes + xi * NR + p * MR, MR * sizeof *v);
    }
    if (!by_tiles && nt < NR) /* the panel's columns past nt */
        for (int xi = 0; xi < XI; xi++)
            for (int64_t c = 0; c < C; c++) memset(v + xi * vstride + c * NR + nt, 0, (size_t)(NR - nt) * sizeof *v);
}

/* dst [cols][ld] = the transpose of src [rows][ld] (rows, cols: multiples of 8, at most ld), in
 * 8 x 8 blocks of 8-lane shuffles. */
KILN_SIMD_CLONES
static void transpose8(const float *src, int64_t rows, int64_t cols, int64_t ld, float *dst) {
    for (int64_t r0 = 0; r0 < rows; r0 += 8)
        for (int64_t c0 = 0; c0 < cols; c0 += 8) {
            kiln_v8f r[8], t[8], u[8];
            for (int i = 0; i < 8; i++) r[i] = kiln_v8_load(src + (r0 + i) * ld + c0);
            for (int i = 0; i < 8; i += 2) {
                t[i] = __builtin_shufflevector(r[i], r[i + 1], 0, 8, 1, 9, 4, 12, 5, 13);
                t[i + 1] = __builtin_shufflevector(r[i], r[i + 1], 2, 10, 3, 11, 6, 14, 7, 15);
            }
            for (int i = 0; i < 8; i += 4) { /* u[i + k]: columns k and k + 4 of rows i..i + 3 */
                u[i] = __builtin_shufflevector(t[i], t[i + 2], 0, 1, 8, 9, 4, 5, 12, 13);
                u[i + 1] = __builtin_shufflevector(t[i], t[i + 2], 2, 3, 10, 11, 6, 7, 14, 15);
                u[i + 2] = __builtin_shufflevector(t[i + 1], t[i + 3], 0, 1, 8, 9, 4, 5, 12, 13);
                u[i + 3] = __builtin_shufflevector(t[i + 1], t[i + 3], 2, 3, 10, 11, 6, 7, 14, 15);
            }
            for (int k = 0; k < 4; k++) {
                kiln_v8_store(dst + (c0 + k) * ld + r0, __builtin_shufflevector(u[k], u[4 + k], 0, 1, 2, 3, 8, 9, 10, 11));
                kiln_v8_store(dst + (c0 + k + 4) * ld + r0,
                              __builtin_shufflevector(u[k], u[4 + k], 4, 5, 6, 7, 12, 13, 14, 15));
            }
        }
}

/* The 36 products for output channels [g0, g0 + rows) of a block of nt tiles: M_xi [rows, nt] at
 * prod + xi * pstride, rows NR apart; by tiles, through the transpose [nt, rows] in tmp (NR x NR). */
static void block_products(const wino_job *j, const float *v, int64_t vstride, int64_t nt, int64_t g0, int64_t rows,
                           float *prod, int64_t pstride, float *tmp) {
    const int64_t C = j->g->C, NR = KILN_PG_NR, per = j->packed->group_floats;
    for (int xi = 0; xi < XI; xi++) {
        const float *u = j->packed->data + xi * per + g0 * C; /* g0: a multiple of MR, or of NR by tiles */
        if (!j->packed->winograd_by_tiles) {
            kiln_pg_gemm_packed_ab(u, rows, C, v + xi * vstride, nt, prod + xi * pstride, NR);
            continue;
        }
        kiln_pg_gemm_packed_ab(v + xi * vstride, nt, C, u, rows, tmp, NR);
        transpose8(tmp, (nt + 7) / 8 * 8, (rows + 7) / 8 * 8, NR, prod + xi * pstride); /* the rest: unread */
    }
}

static void block_part(void *ctx, int64_t b, int64_t e) {
    wino_job *j = ctx;
    const kiln_conv2d *g = j->g;
    const int64_t C = g->C, M = g->M, OH = g->OH, OW = g->OW, NR = KILN_PG_NR;
    /* the 36 matrices of V and of the products, one cache line more than their size apart: at
     * multiples of 4 KiB, the transforms' 36 loads or stores would all fall into one L1 set */
    const int64_t vstride = C * NR + LANES, pstride = GROUP * NR + LANES;
    const int64_t vfloats = XI * vstride, mfloats = XI * pstride, lfloats = XI * NR + LANES + NR * NR;
    /* slack: output_tiles' loads past the last product */
    float *s = kiln_cpu_scratch(KILN_SCRATCH_TASK, (size_t)(vfloats + mfloats + LANES + lfloats));
    if (!s) {
        atomic_store(&j->oom, true);
        return;
    }
    float *v = s, *prod = v + vfloats, *lanes = prod + mfloats + LANES, *tmp = lanes + XI * NR + LANES;
    const bool relu = j->act && j->act->kind == KILN_ACT_RELU;
    const bool other_act = j->act && j->act->kind != KILN_ACT_NONE && !relu;
    int64_t have = -1; /* the tile block whose transformed input v holds */
    for (int64_t task = b; task < e; task++) {
        int64_t blk = task / j->msplit, part = task % j->msplit;
        int64_t t0 = blk * j->nt, t1 = t0 + j->nt < j->tiles ? t0 + j->nt : j->tiles, nt = t1 - t0;
        int64_t units = (M + j->unit - 1) / j->unit;
        int64_t m0 = units * part / j->msplit * j->unit, m1 = units * (part + 1) / j->msplit * j->unit;
        if (m1 > M) m1 = M;
        if (blk != have) transform_block(j, t0, t1, v, vstride, lanes);
        have = blk;
        for (int64_t g0 = m0; g0 < m1; g0 += GROUP) {
            int64_t rows = m1 - g0 < GROUP ? m1 - g0 : GROUP;
            block_products(j, v, vstride, nt, g0, rows, prod, pstride, tmp);
            for (int64_t r = 0; r < rows; r++) {
                int64_t m = g0 + r;
                float bias = j->bias ? j->bias[m] : 0.0f;
                FOR_RUNS(j, t0, t1, {
                    int64_t ow0 = 4 * tw, width = 4 * n < OW - ow0 ? 4 * n : OW - ow0;
                    int64_t rows_out = OH - 4 * th < 4 ? OH - 4 * th : 4, at = ((img * M + m) * OH + 4 * th) * OW + ow0;
                    output_tiles(prod + r * NR + l, pstride, bias, j->y + at, j->z ? j->z + at : NULL, OW,
                                 rows_out, width, relu);
                    if (other_act)
                        for (int64_t i = 0; i < rows_out; i++) kiln_cpu_activation_apply(j->y + at + i * OW, width, j->act);
                })
            }
        }
    }
}

/* The product's 16-lane vectors per row over all blocks when tiles are cut into blocks of nt. */
static int64_t block_vectors(int64_t tiles, int64_t nt) {
    return tiles / nt * ((nt + LANES - 1) / LANES) + (tiles % nt + LANES - 1) / LANES;
}

/* Tiles per block: at most KILN_PG_NR, as even as possible, unless a multiple of 16 takes fewer
 * of the product's vectors (196 tiles: 4 x 48 + 4 in 13 vectors rather than 5 x 40 in 15). By
 * tiles, the tiles are rows (8 a panel): as even as possible. */
static int64_t block_tiles(int64_t tiles, bool by_tiles) {
    int64_t blocks = (tiles + KILN_PG_NR - 1) / KILN_PG_NR, nt = (tiles + blocks - 1) / blocks;
    for (int64_t cut = KILN_PG_NR; !by_tiles && cut >= LANES; cut -= LANES)
        if (block_vectors(tiles, cut) < block_vectors(tiles, nt)) nt = cut;
    return nt;
}

kiln_status kiln_conv2d_run_winograd(const kiln_conv2d *g, const float *x, const kiln_conv2d_weights *packed,
                                     const float *bias, const float *residual, const kiln_act *act, float *y) {
    wino_job j = {.g = g, .packed = packed, .bias = bias, .z = residual, .act = act, .x = x, .y = y};
    j.TH = (g->OH + 3) / 4;
    j.TW = (g->OW + 3) / 4;
    j.tiles = g->N * j.TH * j.TW;
    j.PH = 4 * j.TH + 2;
    /* a 16-lane load from tile TW - 1, one further on, stays inside; the row's input fits */
    j.lp = (j.TW + LANES + 1 + LANES - 1) / LANES * LANES;
    if (4 * j.lp < g->pw + g->W) j.lp = (g->pw + g->W + 4 * LANES - 1) / (4 * LANES) * LANES;
    j.plane = j.PH * 4 * j.lp;
    atomic_init(&j.oom, false);
    j.xp = kiln_cpu_scratch(KILN_SCRATCH_SHARED, (size_t)(g->N * g->C * j.plane));
    if (!j.xp) return kiln_error(KILN_ERR_OUT_OF_MEMORY, "Conv: out of memory for the padded input");
    kiln_parallel_for(g->N * g->C, 16, pad_part, &j);
    /* blocks of at most NR tiles; output channels split when too few blocks */
    int threads = kiln_threadpool_size();
    j.nt = block_tiles(j.tiles, packed->winograd_by_tiles);
    j.blocks = (j.tiles + j.nt - 1) / j.nt;
    j.unit = packed->winograd_by_tiles ? KILN_PG_NR : KILN_PG_MR;
    j.msplit = 1;
    if (j.blocks < threads) {
        int64_t most = (g->M + j.unit - 1) / (packed->winograd_by_tiles ? j.unit : 2 * j.unit);
        j.msplit = threads < most ? threads : most;
        if (j.msplit < 1) j.msplit = 1;
    }
    kiln_parallel_for(j.blocks * j.msplit, 1, block_part, &j);
    if (atomic_load(&j.oom)) return kiln_error(KILN_ERR_OUT_OF_MEMORY, "Conv: out of memory for the per-thread scratch");
    return KILN_OK;
}
