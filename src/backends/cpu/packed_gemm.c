/* packed_gemm.c — kiln_pg_gemm (and _runs) and kiln_pg_gemm_packed_b (packed_gemm.h). Tiles are
 * 8 x 48: rows in multiples of 8 (channel counts mostly are) leave no panel part empty, and 24
 * accumulators fill the AVX-512 registers. kiln_pg_gemm packs B KC rows by NC columns at a time
 * into NR-column panels ([panel][k][NR], zero past N: contiguous, so the micro-kernel's reads stay
 * on few pages and prefetch well; columns gathered run by run for kiln_pg_gemm_runs); within a
 * block every MR-row panel of A (in L1) meets every panel of the block (in L2). With at most 32
 * rows of A, whole panels of B are read in place instead. The micro-kernels compute full MR x NR
 * tiles: C = bias + A B on the first block of K, C += A B on the others, and an epilogue's ReLU
 * taken on the last as the tile is stored (no pass over C after it); partial tiles at the
 * edges go through masked AVX-512 kernels of one, two or three vectors per row and 1, 2, 4 or 8
 * rows, or a local tile. One row of A against packed B (a batch-1 classifier) reads each panel
 * once over the whole depth on AVX-512. */
#include "backends/cpu/packed_gemm.h"

#include <pthread.h>
#include <string.h>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define PG_X86 1
#include <immintrin.h>
#endif

enum { MR = KILN_PG_MR, NR = KILN_PG_NR, KC = 512, NC = 6 * NR, MC = 15 * MR };

/* One full tile: c [MR rows, ldc] = (accumulate ? c : bias or 0) + sum_k a[r * ars + k * aks] b[k * ldb + j],
 * max(0, .) of it when relu (the block's last piece of K): A packed (ars 1, aks MR) or read in place
 * from a row-major matrix (ars its leading dimension, aks 1). */
typedef void (*tile_fn)(int64_t K, const float *a, int64_t ars, int64_t aks, const float *b, int64_t ldb, float *c,
                        int64_t ldc, bool accumulate, const float *bias, bool relu);

#define PG_ROWS(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7)

#ifdef PG_X86
/* 8 rows x 48 columns in 24 zmm accumulators: per k, three loads of B and 8 broadcasts of A. */
__attribute__((target("avx512f"))) static void tile_avx512(int64_t K, const float *a, int64_t ars, int64_t aks,
                                                           const float *b, int64_t ldb, float *c, int64_t ldc,
                                                           bool accumulate, const float *bias, bool relu) {
#define DECL(r) __m512 p##r, q##r, s##r;
#define INIT(r)                                                                                    \
    if (accumulate) {                                                                              \
        p##r = _mm512_loadu_ps(c + r * ldc);                                                       \
        q##r = _mm512_loadu_ps(c + r * ldc + 16);                                                  \
        s##r = _mm512_loadu_ps(c + r * ldc + 32);                                                  \
    } else p##r = q##r = s##r = bias ? _mm512_set1_ps(bias[r]) : _mm512_setzero_ps();
#define STEP(r)                                                                                    \
    {                                                                                              \
        __m512 a_ = _mm512_set1_ps(a[r * ars]);                                                    \
        p##r = _mm512_fmadd_ps(a_, b0, p##r);                                                      \
        q##r = _mm512_fmadd_ps(a_, b1, q##r);                                                      \
        s##r = _mm512_fmadd_ps(a_, b2, s##r);                                                      \
    }
#define RELU(r)                                                                                    \
    p##r = _mm512_max_ps(p##r, zero);                                                              \
    q##r = _mm512_max_ps(q##r, zero);                                                              \
    s##r = _mm512_max_ps(s##r, zero);
#define STORE(r)                                                                                   \
    _mm512_storeu_ps(c + r * ldc, p##r);                                                           \
    _mm512_storeu_ps(c + r * ldc + 16, q##r);                                                      \
    _mm512_storeu_ps(c + r * ldc + 32, s##r);
    PG_ROWS(DECL)
    PG_ROWS(INIT)
    for (int64_t k = 0; k < K; k++, a += aks, b += ldb) {
        __m512 b0 = _mm512_loadu_ps(b), b1 = _mm512_loadu_ps(b + 16), b2 = _mm512_loadu_ps(b + 32);
        PG_ROWS(STEP)
    }
    if (relu) {
        const __m512 zero = _mm512_setzero_ps();
        PG_ROWS(RELU)
    }
    PG_ROWS(STORE)
#undef DECL
#undef INIT
#undef STEP
#undef RELU
#undef STORE
}

/* A partial tile on AVX-512: the first rows (<= nr <= MR) rows and cols (<= NR) columns of c,
 * through nr rows of nv = ceil(cols / 16) vectors (an 8 x 16 edge costs a third of a full tile, a
 * one-row edge an eighth) with masked loads and stores; a's panel is whole (zero past its rows). */
static inline __attribute__((always_inline, target("avx512f"))) void
edge_avx512(int nv, int nr, int64_t K, const float *a, int64_t ars, int64_t aks, const float *b, int64_t ldb, float *c,
            int64_t ldc, bool accumulate, const float *bias, bool relu, int64_t rows, int64_t cols) {
    __mmask16 m[3];
    for (int v = 0; v < 3; v++) {
        int64_t left = cols - 16 * v;
        m[v] = left >= 16 ? (__mmask16)0xffff : left > 0 ? (__mmask16)((1u << left) - 1) : (__mmask16)0;
    }
    __m512 acc[MR][3];
#pragma GCC unroll 8
    for (int r = 0; r < nr; r++)
#pragma GCC unroll 8
        for (int v = 0; v < nv; v++)
            acc[r][v] = accumulate && r < rows ? _mm512_maskz_loadu_ps(m[v], c + r * ldc + 16 * v)
                        : bias && !accumulate && r < rows ? _mm512_set1_ps(bias[r])
                                                          : _mm512_setzero_ps();
    for (int64_t k = 0; k < K; k++, a += aks, b += ldb) {
        __m512 bv[3];
#pragma GCC unroll 8
        for (int v = 0; v < nv; v++) bv[v] = _mm512_loadu_ps(b + 16 * v);
#pragma GCC unroll 8
        for (int r = 0; r < nr; r++) {
            __m512 a_ = _mm512_set1_ps(a[r * ars]);
#pragma GCC unroll 8
            for (int v = 0; v < nv; v++) acc[r][v] = _mm512_fmadd_ps(a_, bv[v], acc[r][v]);
        }
    }
#pragma GCC unroll 8
    for (int r = 0; r < nr; r++)
#pragma GCC unroll 8
        for (int v = 0; v < nv; v++)
            if (r < rows)
                _mm512_mask_storeu_ps(c + r * ldc + 16 * v, m[v],
                                      relu ? _mm512_max_ps(acc[r][v], _mm512_setzero_ps()) : acc[r][v]);
}

typedef void (*edge_fn)(int64_t K, const float *a, int64_t ars, int64_t aks, const float *b, int64_t ldb, float *c,
                        int64_t ldc, bool accumulate, const float *bias, bool relu, int64_t rows, int64_t cols);
#define EDGE(nv, nr)                                                                               \
    __attribute__((target("avx512f"))) static void edge_##nv##_##nr(                             \
        int64_t K, const float *a, int64_t ars, int64_t aks, const float *b, int64_t ldb, float *c,    \
        int64_t ldc, bool accumulate, const float *bias, bool relu, int64_t rows, int64_t cols) {       \
        edge_avx512(nv, nr, K, a, ars, aks, b, ldb, c, ldc, accumulate, bias, relu, rows, cols);   \
    }
#define EDGE_ROWS(nv) EDGE(nv, 1) EDGE(nv, 2) EDGE(nv, 4) EDGE(nv, 8)
EDGE_ROWS(1)
EDGE_ROWS(2)
EDGE_ROWS(3)
#undef EDGE_ROWS
#undef EDGE
/* [vectors - 1][log2 of the rows computed] */
static const edge_fn g_edges[3][4] = {{edge_1_1, edge_1_2, edge_1_4, edge_1_8},
                                      {edge_2_1, edge_2_2, edge_2_4, edge_2_8},
                                      {edge_3_1, edge_3_2, edge_3_4, edge_3_8}};

/* c [cols] = a [K] times one whole-K NR-column panel b ([K][NR]): one row of A, so the panel is
 * read once, front to back, with two k per step in six accumulators (the three sums of even and
 * of odd k, six FMA chains in flight); a product of one row is bound by reading B, and the K
 * blocks of the tiled loop would read each panel in KC-row pieces and add C's row into the next. */
__attribute__((target("avx512f"))) static void row_panel_avx512(int64_t K, const float *a, const float *b, float *c,
                                                                 int64_t cols) {
    __m512 e0 = _mm512_setzero_ps(), e1 = e0, e2 = e0, o0 = e0, o1 = e0, o2 = e0;
    int64_t k = 0;
    for (; k + 2 <= K; k += 2, b += 2 * NR) {
        __m512 ae = _mm512_set1_ps(a[k]), ao = _mm512_set1_ps(a[k + 1]);
        e0 = _mm512_fmadd_ps(ae, _mm512_loadu_ps(b), e0);
        e1 = _mm512_fmadd_ps(ae, _mm512_loadu_ps(b + 16), e1);
        e2 = _mm512_fmadd_ps(ae, _mm512_loadu_ps(b + 32), e2);
        o0 = _mm512_fmadd_ps(ao, _mm512_loadu_ps(b + NR), o0);
        o1 = _mm512_fmadd_ps(ao, _mm512_loadu_ps(b + NR + 16), o1);
        o2 = _mm512_fmadd_ps(ao, _mm512_loadu_ps(b + NR + 32), o2);
    }
    if (k < K) {
        __m512 ae = _mm512_set1_ps(a[k]);
        e0 = _mm512_fmadd_ps(ae, _mm512_loadu_ps(b), e0);
        e1 = _mm512_fmadd_ps(ae, _mm512_loadu_ps(b + 16), e1);
        e2 = _mm512_fmadd_ps(ae, _mm512_loadu_ps(b + 32), e2);
    }
    __m512 sum[3] = {_mm512_add_ps(e0, o0), _mm512_add_ps(e1, o1), _mm512_add_ps(e2, o2)};
    for (int v = 0; v < 3; v++) {
        int64_t left = cols - 16 * v;
        if (left > 0) _mm512_mask_storeu_ps(c + 16 * v, left >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << left) - 1), sum[v]);
    }
}

/* 4 rows x 24 columns in 12 ymm accumulators (a: strides ars, aks; b: stride ldb); four make a tile. */
__attribute__((target("avx2,fma"))) static void quarter_avx2(int64_t K, const float *a, int64_t ars, int64_t aks,
                                                             const float *b, int64_t ldb, float *c, int64_t ldc,
                                                             bool accumulate, const float *bias, bool relu) {
#define Q_ROWS(X) X(0) X(1) X(2) X(3)
#define DECL(r) __m256 p##r, q##r, s##r;
#define INIT(r)                                                                                    \
    if (accumulate) {                                                                              \
        p##r = _mm256_loadu_ps(c + r * ldc);                                                       \
        q##r = _mm256_loadu_ps(c + r * ldc + 8);                                                   \
        s##r = _mm256_loadu_ps(c + r * ldc + 16);                                                  \
    } else p##r = q##r = s##r = bias ? _mm256_set1_ps(bias[r]) : _mm256_setzero_ps();
#define STEP(r)                                                                                    \
    {                                                                                              \
        __m256 a_ = _mm256_broadcast_ss(a + r * ars);                                              \
        p##r = _mm256_fmadd_ps(a_, b0, p##r);                                                      \
        q##r = _mm256_fmadd_ps(a_, b1, q##r);                                                      \
        s##r = _mm256_fmadd_ps(a_, b2, s##r);                                                      \
    }
#define RELU(r)                                                                                    \
    p##r = _mm256_max_ps(p##r, zero);                                                              \
    q##r = _mm256_max_ps(q##r, zero);                                                              \
    s##r = _mm256_max_ps(s##r, zero);
#define STORE(r)                                                                                   \
    _mm256_storeu_ps(c + r * ldc, p##r);                                                           \
    _mm256_storeu_ps(c + r * ldc + 8, q##r);                                                       \
    _mm256_storeu_ps(c + r * ldc + 16, s##r);
    Q_ROWS(DECL)
    Q_ROWS(INIT)
    for (int64_t k = 0; k < K; k++, a += aks, b += ldb) {
        __m256 b0 = _mm256_loadu_ps(b), b1 = _mm256_loadu_ps(b + 8), b2 = _mm256_loadu_ps(b + 16);
        Q_ROWS(STEP)
    }
    if (relu) {
        const __m256 zero = _mm256_setzero_ps();
        Q_ROWS(RELU)
    }
    Q_ROWS(STORE)
#undef Q_ROWS
#undef DECL
#undef INIT
#undef STEP
#undef RELU
#undef STORE
}

static void tile_avx2(int64_t K, const float *a, int64_t ars, int64_t aks, const float *b, int64_t ldb, float *c,
                      int64_t ldc, bool accumulate, const float *bias, bool relu) {
    for (int r = 0; r < MR; r += 4)
        for (int j = 0; j < NR; j += 24)
            quarter_avx2(K, a + r * ars, ars, aks, b + j, ldb, c + r * ldc + j, ldc, accumulate, bias ? bias + r : NULL,
                         relu);
}
#endif

/* Any processor: one row of the tile at a time over the whole of K. */
static void tile_portable(int64_t K, const float *a, int64_t ars, int64_t aks, const float *b, int64_t ldb, float *c,
                          int64_t ldc, bool accumulate, const float *bias, bool relu) {
    for (int r = 0; r < MR; r++) {
        float acc[NR];
        for (int j = 0; j < NR; j++) acc[j] = accumulate ? c[r * ldc + j] : bias ? bias[r] : 0.0f;
        for (int64_t k = 0; k < K; k++) {
            float av = a[r * ars + k * aks];
            for (int j = 0; j < NR; j++) acc[j] += av * b[k * ldb + j];
        }
        for (int j = 0; relu && j < NR; j++) acc[j] = acc[j] > 0.0f ? acc[j] : 0.0f;
        memcpy(c + r * ldc, acc, sizeof acc);
    }
}

static tile_fn g_tile;
static kiln_pg_isa g_isa;
static pthread_once_t g_tile_once = PTHREAD_ONCE_INIT;

kiln_pg_isa kiln_pg_isa_best(void) {
#ifdef PG_X86
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f")) return KILN_PG_AVX512;
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return KILN_PG_AVX2;
#endif
    return KILN_PG_PORTABLE;
}

static tile_fn tile_for(kiln_pg_isa isa) {
#ifdef PG_X86
    if (isa == KILN_PG_AVX512) return tile_avx512;
    if (isa == KILN_PG_AVX2) return tile_avx2;
#endif
    (void)isa;
    return tile_portable;
}

static void tile_pick(void) {
    g_isa = kiln_pg_isa_best();
    g_tile = tile_for(g_isa);
}

bool kiln_pg_isa_set(kiln_pg_isa isa) {
    pthread_once(&g_tile_once, tile_pick);
    if (isa > kiln_pg_isa_best()) return false;
    g_isa = isa;
    g_tile = tile_for(isa);
    return true;
}

kiln_pg_isa kiln_pg_isa_current(void) {
    pthread_once(&g_tile_once, tile_pick);
    return g_isa;
}

const char *kiln_pg_isa_name(kiln_pg_isa isa) {
    return isa == KILN_PG_PORTABLE ? "portable" : isa == KILN_PG_AVX2 ? "avx2" : isa == KILN_PG_AVX512 ? "avx512" : "unknown";
}

void kiln_pg_repack_panels(const float *src, int64_t L, int64_t P, int64_t from_width, int64_t to_width, float *dst) {
    for (int64_t p0 = 0; p0 < P; p0 += to_width)
        for (int64_t l = 0; l < L; l++, dst += to_width)
            for (int64_t j = 0; j < to_width; j++) {
                int64_t col = p0 + j;
                dst[j] = col < P ? src[(col / from_width * L + l) * from_width + col % from_width] : 0.0f;
            }
}

int64_t kiln_pg_packed_a_floats(int64_t M, int64_t K) { return (M + MR - 1) / MR * MR * K; }

void kiln_pg_pack_a(const float *A, int64_t lda, int64_t M, int64_t K, float *dst) {
    for (int64_t m0 = 0; m0 < M; m0 += MR) {
        int64_t rows = M - m0 < MR ? M - m0 : MR;
        for (int64_t k = 0; k < K; k++, dst += MR)
            for (int64_t r = 0; r < MR; r++) dst[r] = r < rows ? A[(m0 + r) * lda + k] : 0.0f;
    }
}

int64_t kiln_pg_scratch_floats(void) { return (int64_t)KC * NC; }

/* The tile at c of rows x cols (at most MR x NR) through the micro-kernel; edges via a local tile.
 * A as tile_fn takes it, read in place (aks 1) only for whole tiles of MR rows. */
static void tile(int64_t K, const float *a, int64_t ars, int64_t aks, const float *b, int64_t ldb, float *c,
                 int64_t ldc, int64_t rows, int64_t cols, bool accumulate, const float *bias, bool relu) {
    if (rows == MR && cols == NR) {
        g_tile(K, a, ars, aks, b, ldb, c, ldc, accumulate, bias, relu);
        return;
    }
#ifdef PG_X86
    if (g_isa == KILN_PG_AVX512) { /* as many vectors as the columns need and rows as the rows, masked */
        int nr = rows <= 1 ? 0 : rows <= 2 ? 1 : rows <= 4 ? 2 : 3;
        g_edges[(cols - 1) / 16][nr](K, a, ars, aks, b, ldb, c, ldc, accumulate, bias, relu, rows, cols);
        return;
    }
#endif
    float t[MR * NR], tb[MR] = {0};
    if (bias && !accumulate) {
        memcpy(tb, bias, (size_t)rows * sizeof *tb);
        bias = tb;
    }
    for (int64_t r = 0; accumulate && r < rows; r++) memcpy(t + r * NR, c + r * ldc, (size_t)cols * sizeof *t);
    g_tile(K, a, ars, aks, b, ldb, t, NR, accumulate, bias, relu);
    for (int64_t r = 0; r < rows; r++) memcpy(c + r * ldc, t + r * NR, (size_t)cols * sizeof *t);
}

/* Where B's columns lie: column n of row k at row(k) + (n / run) * step + n % run (run <= step),
 * row(k) = B + k * ldb, or B + row_off[k] when row_off is not NULL. */
typedef struct b_layout {
    const float *B;
    int64_t ldb;
    const int64_t *row_off;
    int64_t run, step;
} b_layout;

/* dst [panel][k][NR] = rows [k0, k0 + kc) of B, columns [n0, n0 + nc), in NR-column panels, zero
 * past column nc. */
static void pack_b(const b_layout *l, int64_t k0, int64_t kc, int64_t n0, int64_t nc, float *dst) {
#define ROW(k) (l->B + (l->row_off ? l->row_off[k0 + (k)] : (k0 + (k)) * l->ldb))
    for (int64_t j0 = 0; j0 < nc; j0 += NR) {
        int64_t cols = nc - j0 < NR ? nc - j0 : NR, first = n0 + j0;
        int64_t at = first / l->run * l->step + first % l->run; /* the panel's first column */
        if (l->run == l->step || first % l->run + cols <= l->run) { /* contiguous: runs back to back, or one run */
            if (cols == NR)
                for (int64_t k = 0; k < kc; k++, dst += NR) memcpy(dst, ROW(k) + at, NR * sizeof *dst);
            else
                for (int64_t k = 0; k < kc; k++, dst += NR) {
                    memcpy(dst, ROW(k) + at, (size_t)cols * sizeof *dst);
                    memset(dst + cols, 0, (size_t)(NR - cols) * sizeof *dst);
                }
            continue;
        }
        for (int64_t k = 0; k < kc; k++, dst += NR) { /* run by run */
            const float *row = ROW(k);
            for (int64_t j = 0; j < cols;) {
                int64_t n = first + j, len = l->run - n % l->run < cols - j ? l->run - n % l->run : cols - j;
                memcpy(dst + j, row + n / l->run * l->step + n % l->run, (size_t)len * sizeof *dst);
                j += len;
            }
            if (cols < NR) memset(dst + cols, 0, (size_t)(NR - cols) * sizeof *dst);
        }
    }
#undef ROW
}

/* kiln_pg_gemm on B as l places it. */
static void gemm_packing_b(const float *packed_a, int64_t M, int64_t K, const b_layout *l, int64_t N, const float *bias,
                           float *C, int64_t ldc, const kiln_pg_epilogue *epilogue, float *scratch) {
    pthread_once(&g_tile_once, tile_pick);
    const bool relu = epilogue && epilogue->relu;
    if (K == 0) {
        for (int64_t m = 0; m < M; m++)
            for (int64_t j = 0; j < N; j++) {
                float v = bias ? bias[m] : 0.0f;
                C[m * ldc + j] = relu && v < 0.0f ? 0.0f : v;
            }
        if (epilogue && epilogue->fn && M * N > 0) epilogue->fn(epilogue->ctx, C, ldc, 0, M, 0, N);
        return;
    }
    /* at most 32 rows of A (a squeeze convolution's): whole panels of B are read where they lie,
     * by each panel of A in turn (packing them would cost nearly as much as the products) */
    const bool in_place = M <= 4 * MR && !l->row_off && l->run == l->step;
    for (int64_t n0 = 0; n0 < N; n0 += NC) {
        int64_t nc = N - n0 < NC ? N - n0 : NC;
        for (int64_t k0 = 0; k0 < K; k0 += KC) {
            int64_t kc = K - k0 < KC ? K - k0 : KC;
            if (in_place) {
                for (int64_t j0 = 0; j0 < nc; j0 += NR) {
                    int64_t cols = nc - j0 < NR ? nc - j0 : NR;
                    const float *b = l->B + k0 * l->ldb + n0 + j0;
                    int64_t ldb = l->ldb;
                    if (cols < NR) { /* a last partial panel: packed, zero past its columns */
                        pack_b(l, k0, kc, n0 + j0, cols, scratch);
                        b = scratch;
                        ldb = NR;
                    }
                    for (int64_t m0 = 0; m0 < M; m0 += MR)
                        tile(kc, packed_a + (m0 * K + k0 * MR), 1, MR, b, ldb, C + m0 * ldc + n0 + j0, ldc,
                             M - m0 < MR ? M - m0 : MR, cols, k0 > 0, bias && k0 == 0 ? bias + m0 : NULL,
                             relu && k0 + kc == K);
                }
                if (epilogue && epilogue->fn && k0 + kc == K) epilogue->fn(epilogue->ctx, C + n0, ldc, 0, M, n0, nc);
                continue;
            }
            pack_b(l, k0, kc, n0, nc, scratch);
            for (int64_t m0 = 0; m0 < M; m0 += MR) {
                const float *a = packed_a + (m0 * K + k0 * MR);
                const float *bm = bias && k0 == 0 ? bias + m0 : NULL;
                int64_t rows = M - m0 < MR ? M - m0 : MR;
                for (int64_t j0 = 0; j0 < nc; j0 += NR)
                    tile(kc, a, 1, MR, scratch + j0 * kc, NR, C + m0 * ldc + n0 + j0, ldc, rows, nc - j0 < NR ? nc - j0 : NR,
                         k0 > 0, bm, relu && k0 + kc == K);
                if (epilogue && epilogue->fn && k0 + kc == K) /* these rows of the block are final, and in L1 */
                    epilogue->fn(epilogue->ctx, C + m0 * ldc + n0, ldc, m0, rows, n0, nc);
            }
        }
    }
}

void kiln_pg_gemm(const float *packed_a, int64_t M, int64_t K, const float *B, int64_t ldb, const int64_t *row_off,
                  int64_t N, const float *bias, float *C, int64_t ldc, const kiln_pg_epilogue *epilogue,
                  float *scratch) {
    b_layout l = {B, ldb, row_off, N > 0 ? N : 1, N > 0 ? N : 1};
    gemm_packing_b(packed_a, M, K, &l, N, bias, C, ldc, epilogue, scratch);
}

void kiln_pg_gemm_runs(const float *packed_a, int64_t M, int64_t K, const float *B, const int64_t *row_off, int64_t N,
                       int64_t run, int64_t step, const float *bias, float *C, int64_t ldc,
                       const kiln_pg_epilogue *epilogue, float *scratch) {
    b_layout l = {B, 0, row_off, run, step};
    gemm_packing_b(packed_a, M, K, &l, N, bias, C, ldc, epilogue, scratch);
}

int64_t kiln_pg_packed_b_floats(int64_t K, int64_t N) { return (N + NR - 1) / NR * NR * K; }

void kiln_pg_pack_b(const float *B, int64_t rs, int64_t cs, int64_t K, int64_t N, float *dst) {
    for (int64_t j0 = 0; j0 < N; j0 += NR) {
        int64_t cols = N - j0 < NR ? N - j0 : NR;
        if (rs == 1 && cs != 1) { /* columns of B contiguous (attention's K^T): each read once, in order */
            for (int64_t j = 0; j < cols; j++)
                for (int64_t k = 0; k < K; k++) dst[k * NR + j] = B[(j0 + j) * cs + k];
            for (int64_t k = 0; cols < NR && k < K; k++) memset(dst + k * NR + cols, 0, (size_t)(NR - cols) * sizeof *dst);
            dst += K * NR;
            continue;
        }
        for (int64_t k = 0; k < K; k++, dst += NR) {
            if (cs == 1) /* rows of B contiguous (attention's V): copied */
                memcpy(dst, B + k * rs + j0, (size_t)cols * sizeof *dst);
            else
                for (int64_t j = 0; j < cols; j++) dst[j] = B[k * rs + (j0 + j) * cs];
            if (cols < NR) memset(dst + cols, 0, (size_t)(NR - cols) * sizeof *dst);
        }
    }
}

int64_t kiln_pg_scratch_b_floats(void) { return (int64_t)MR * KC; }

/* Every NR-column panel of B's block of KC rows (in L1) meets every MR-row panel of a block of MC
 * rows of A (in L2): whole panels read in place (the micro-kernel broadcasts straight from A's rows),
 * a last panel of fewer rows packed, zero past them. */
void kiln_pg_gemm_packed_b(const float *A, int64_t lda, int64_t M, int64_t K, const float *packed_b, int64_t N,
                           float *C, int64_t ldc, float *scratch) {
    pthread_once(&g_tile_once, tile_pick);
    if (K == 0) {
        for (int64_t m = 0; m < M; m++) memset(C + m * ldc, 0, (size_t)N * sizeof *C);
        return;
    }
#ifdef PG_X86
    if (M == 1 && g_isa == KILN_PG_AVX512) { /* one row: each panel streamed once, whole K */
        for (int64_t j0 = 0; j0 < N; j0 += NR) row_panel_avx512(K, A, packed_b + j0 * K, C + j0, N - j0 < NR ? N - j0 : NR);
        return;
    }
#endif
    for (int64_t m0 = 0; m0 < M; m0 += MC) {
        int64_t mc = M - m0 < MC ? M - m0 : MC;
        for (int64_t k0 = 0; k0 < K; k0 += KC) {
            int64_t kc = K - k0 < KC ? K - k0 : KC;
            int64_t whole = mc / MR * MR;
            if (whole < mc) kiln_pg_pack_a(A + (m0 + whole) * lda + k0, lda, mc - whole, kc, scratch);
            for (int64_t j0 = 0; j0 < N; j0 += NR) {
                const float *b = packed_b + (j0 / NR * K + k0) * NR;
                int64_t cols = N - j0 < NR ? N - j0 : NR;
                float *c = C + m0 * ldc + j0;
                for (int64_t i0 = 0; i0 < whole; i0 += MR)
                    tile(kc, A + (m0 + i0) * lda + k0, lda, 1, b, NR, c + i0 * ldc, ldc, MR, cols, k0 > 0, NULL, false);
                if (whole < mc) tile(kc, scratch, 1, MR, b, NR, c + whole * ldc, ldc, mc - whole, cols, k0 > 0, NULL, false);
            }
        }
    }
}

void kiln_pg_gemm_packed_ab(const float *packed_a, int64_t M, int64_t K, const float *packed_b, int64_t N, float *C,
                            int64_t ldc) {
    pthread_once(&g_tile_once, tile_pick);
    if (K == 0) {
        for (int64_t m = 0; m < M; m++) memset(C + m * ldc, 0, (size_t)N * sizeof *C);
        return;
    }
    for (int64_t k0 = 0; k0 < K; k0 += KC) {
        int64_t kc = K - k0 < KC ? K - k0 : KC;
        for (int64_t j0 = 0; j0 < N; j0 += NR)
            for (int64_t i0 = 0; i0 < M; i0 += MR)
                tile(kc, packed_a + (i0 * K + k0 * MR), 1, MR, packed_b + (j0 / NR * K + k0) * NR, NR, C + i0 * ldc + j0, ldc,
                     M - i0 < MR ? M - i0 : MR, N - j0 < NR ? N - j0 : NR, k0 > 0, NULL, false);
    }
}
