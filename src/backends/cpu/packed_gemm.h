/* packed_gemm.h — kiln's own float32 matrix product for a constant left operand (convolution
 * weights): the left matrix is packed once into panels of KILN_PG_MR rows, the right one per call into
 * panels of KILN_PG_NR columns, a cache-sized block at a time; a register-blocked micro-kernel computes each MR x NR tile with the bias added in
 * registers, over cache-sized blocks. The micro-kernel is picked once from the processor: AVX-512,
 * AVX2 + FMA, or portable C. Single-threaded: callers split the work. */
#ifndef KILN_CPU_PACKED_GEMM_H
#define KILN_CPU_PACKED_GEMM_H

#include <stdbool.h>
#include <stdint.h>

#define KILN_PG_MR 12
#define KILN_PG_NR 32

typedef enum kiln_pg_isa { KILN_PG_PORTABLE, KILN_PG_AVX2, KILN_PG_AVX512 } kiln_pg_isa;

/* The widest micro-kernel this processor runs. */
kiln_pg_isa kiln_pg_isa_best(void);

/* Makes every later product use the micro-kernel of isa (tests compare them); false, changing
 * nothing, when the processor does not run it. Not thread-safe against running products. */
bool kiln_pg_isa_set(kiln_pg_isa isa);

/* Floats that kiln_pg_pack_a writes for an M x K matrix (M rounded up to whole panels). */
int64_t kiln_pg_packed_a_floats(int64_t M, int64_t K);

/* Packs A [M, K] (row-major, leading dimension lda) into dst: panel p holds rows [p * MR, p * MR +
 * MR) as dst[(p * K + k) * MR + r], zero past row M. */
void kiln_pg_pack_a(const float *A, int64_t lda, int64_t M, int64_t K, float *dst);

/* Floats of scratch kiln_pg_gemm needs (one packed block of B, whatever the sizes). */
int64_t kiln_pg_scratch_floats(void);

/* C [M, N] (leading dimension ldc) = A B + bias, where A is rows [0, M) of a packed [*, K] matrix
 * starting at a panel (kiln_pg_pack_a's output at panel offset), B is [K, N] with row k at
 * B + k * ldb, or at B + row_off[k] when row_off is not NULL (rows may overlap), and bias (may be
 * NULL) holds one value per row of C. scratch: kiln_pg_scratch_floats() floats, not aliasing
 * anything else. */
void kiln_pg_gemm(const float *packed_a, int64_t M, int64_t K, const float *B, int64_t ldb, const int64_t *row_off,
                  int64_t N, const float *bias, float *C, int64_t ldc, float *scratch);

#endif
