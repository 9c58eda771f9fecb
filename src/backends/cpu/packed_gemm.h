/* packed_gemm.h — kiln's own float32 matrix product for a constant operand, packed once: constant
 * left operands (convolution weights) into panels of KILN_PG_MR rows, with the right side packed
 * per call into panels of KILN_PG_NR columns (kiln_pg_gemm, kiln_pg_gemm_runs; read in place for
 * at most 32 rows); constant right operands (MatMul and Gemm weights) into panels of NR columns,
 * with the left side read in place, MR rows at a time (kiln_pg_gemm_packed_b). Both run over
 * cache-sized blocks through one register-blocked micro-kernel for MR x NR tiles, picked once from
 * the processor: AVX-512, AVX2 + FMA, or portable C. Single-threaded: callers split the work. */
#ifndef KILN_CPU_PACKED_GEMM_H
#define KILN_CPU_PACKED_GEMM_H

#include <stdbool.h>
#include <stdint.h>

#define KILN_PG_MR 8
#define KILN_PG_NR 48

typedef enum kiln_pg_isa { KILN_PG_PORTABLE, KILN_PG_AVX2, KILN_PG_AVX512 } kiln_pg_isa;

/* The widest micro-kernel this processor runs. */
kiln_pg_isa kiln_pg_isa_best(void);

/* Makes every later product (and the other kernels that ask kiln_pg_isa_current) use the
 * instructions of isa (tests compare them); false, changing nothing, when the processor does not
 * run them. Not thread-safe against running kernels. */
bool kiln_pg_isa_set(kiln_pg_isa isa);

/* The instruction set the kernels use now: kiln_pg_isa_best() unless kiln_pg_isa_set chose another. */
kiln_pg_isa kiln_pg_isa_current(void);

/* "portable", "avx2" or "avx512" ("unknown" for another value). */
const char *kiln_pg_isa_name(kiln_pg_isa isa);

/* dst = the panels of src re-cut to another width: src holds an [L, P] matrix as panels of
 * from_width columns (src[(p * L + l) * from_width + j] is column p * from_width + j of row l, zero
 * past column P), dst gets the same matrix as panels of to_width columns, zero past P. With P the
 * rows of A and L its columns this converts kiln_pg_pack_a's layout between row-panel heights;
 * with P the columns of B and L its rows, kiln_pg_pack_b's between column-panel widths. */
void kiln_pg_repack_panels(const float *src, int64_t L, int64_t P, int64_t from_width, int64_t to_width, float *dst);

/* Floats that kiln_pg_pack_a writes for an M x K matrix (M rounded up to whole panels). */
int64_t kiln_pg_packed_a_floats(int64_t M, int64_t K);

/* Packs A [M, K] (row-major, leading dimension lda) into dst: panel p holds rows [p * MR, p * MR +
 * MR) as dst[(p * K + k) * MR + r], zero past row M. */
void kiln_pg_pack_a(const float *A, int64_t lda, int64_t M, int64_t K, float *dst);

/* Floats of scratch kiln_pg_gemm needs (one packed block of B, whatever the sizes). */
int64_t kiln_pg_scratch_floats(void);

/* What kiln_pg_gemm does to each finished block of C while it is in cache: with relu, max(0, x) of
 * every element as the micro-kernel stores it; then fn (may be NULL) on rows [r0, r0 + rows) and
 * columns [c0, c0 + cols) of C, the block starting at c (leading dimension ldc). */
typedef struct kiln_pg_epilogue {
    void (*fn)(void *ctx, float *c, int64_t ldc, int64_t r0, int64_t rows, int64_t c0, int64_t cols);
    void *ctx;
    bool relu;
} kiln_pg_epilogue;

/* C [M, N] (leading dimension ldc) = A B + bias, where A is rows [0, M) of a packed [*, K] matrix
 * starting at a panel (kiln_pg_pack_a's output at panel offset), B is [K, N] with row k at
 * B + k * ldb, or at B + row_off[k] when row_off is not NULL (rows may overlap), and bias (may be
 * NULL) holds one value per row of C; then epilogue (may be NULL) on every block of C, each
 * element once. scratch: kiln_pg_scratch_floats() floats, not aliasing anything else. */
void kiln_pg_gemm(const float *packed_a, int64_t M, int64_t K, const float *B, int64_t ldb, const int64_t *row_off,
                  int64_t N, const float *bias, float *C, int64_t ldc, const kiln_pg_epilogue *epilogue,
                  float *scratch);

/* kiln_pg_gemm on a right side whose columns lie in runs (an image's output rows read from padded
 * input rows): column n of row k at B + row_off[k] + (n / run) * step + n % run, 1 <= run <= step. */
void kiln_pg_gemm_runs(const float *packed_a, int64_t M, int64_t K, const float *B, const int64_t *row_off, int64_t N,
                       int64_t run, int64_t step, const float *bias, float *C, int64_t ldc,
                       const kiln_pg_epilogue *epilogue, float *scratch);

/* Floats that kiln_pg_pack_b writes for a K x N matrix (N rounded up to whole panels). */
int64_t kiln_pg_packed_b_floats(int64_t K, int64_t N);

/* Packs B (K x N, element (k, n) at B[k * rs + n * cs]: rs = N, cs = 1 for a row-major [K, N];
 * rs = 1, cs = K for the transpose of a row-major [N, K]) into dst: panel p holds columns
 * [p * NR, p * NR + NR) as dst[(p * K + k) * NR + j], zero past column N. */
void kiln_pg_pack_b(const float *B, int64_t rs, int64_t cs, int64_t K, int64_t N, float *dst);

/* Floats of scratch kiln_pg_gemm_packed_b needs (A's last rows short of a panel, packed). */
int64_t kiln_pg_scratch_b_floats(void);

/* C [M, N] (leading dimension ldc) = A B with both operands packed: A a whole kiln_pg_pack_a
 * output for M x K, B columns [0, N) of a packed [K, *] matrix starting at a panel. */
void kiln_pg_gemm_packed_ab(const float *packed_a, int64_t M, int64_t K, const float *packed_b, int64_t N, float *C,
                            int64_t ldc);

/* C [M, N] (leading dimension ldc) = A B, where A is [M, K] row-major with leading dimension lda
 * and B is columns [0, N) of a packed [K, *] matrix starting at a panel (kiln_pg_pack_b's output
 * at panel offset). scratch: kiln_pg_scratch_b_floats() floats, not aliasing anything else. */
void kiln_pg_gemm_packed_b(const float *A, int64_t lda, int64_t M, int64_t K, const float *packed_b, int64_t N,
                           float *C, int64_t ldc, float *scratch);

#endif
