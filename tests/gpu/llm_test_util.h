/* llm_test_util.h — what the LLM kernel tests share (test_backend_ops's LLM cases, test_llm_cuda.c): the failure
 * counter and its check macros, 16-bit <-> FP32 conversions, the test's random values and the
 * max-relative-error accumulator they compare with. Needs no CUDA (LT_CUDA's callers do). */
#ifndef KILN_LLM_TEST_UTIL_H
#define KILN_LLM_TEST_UTIL_H

#include "kiln/kiln.h" /* kiln_dtype */

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

extern int lt_failures; /* checks failed so far: main's exit status is 1 when any did */

/* Counts a failed check and prints where and why. */
#define LT_EXPECT(cond, ...)                                                                       \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);                                   \
            fprintf(stderr, __VA_ARGS__);                                                          \
            fprintf(stderr, "\n");                                                                 \
            lt_failures++;                                                                         \
        }                                                                                          \
    } while (0)

/* A CUDA runtime call inside a case function: a failure is counted and ends the case (label done). */
#define LT_CUDA(call)                                                                              \
    do {                                                                                           \
        cudaError_t e_ = (call);                                                                   \
        if (e_ != cudaSuccess) {                                                                   \
            LT_EXPECT(0, "%s: %s", #call, cudaGetErrorString(e_));                                 \
            goto done;                                                                             \
        }                                                                                          \
    } while (0)

/* A 16-bit value of dt (KILN_F16, else BF16) as FP32, and back (rounded to nearest even). */
float lt_to_f32(uint16_t v, kiln_dtype dt);
uint16_t lt_from_f32(float v, kiln_dtype dt);
/* "fp16" or "bf16". */
const char *lt_dtype_name(kiln_dtype dt);

/* The next value of the LCG *state, uniform in [-1, 1). */
float lt_urand(uint32_t *state);
/* n values scale * lt_urand(state) rounded to dt into h, and the rounded values as FP32 into f (may be
 * NULL). */
void lt_fill16(uint32_t *state, uint16_t *h, float *f, size_t n, float scale, kiln_dtype dt);

/* max |got - want| / max |want| over the pairs added (a NaN difference counts as infinite). */
typedef struct lt_err {
    double max_want, max_diff;
} lt_err;
void lt_err_add(lt_err *e, double got, double want);
/* The relative error so far (max_diff alone when every want was 0). */
double lt_err_rel(const lt_err *e);

#endif
