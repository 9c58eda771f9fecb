/* llm_test_util.c — the shared helpers of the LLM kernel tests (llm_test_util.h). */
#include "llm_test_util.h"

#include "core/half.h"

#include <math.h>

int lt_failures;

float lt_to_f32(uint16_t v, kiln_dtype dt) { return dt == KILN_F16 ? kiln_f16_to_f32(v) : kiln_bf16_to_f32(v); }
uint16_t lt_from_f32(float v, kiln_dtype dt) { return dt == KILN_F16 ? kiln_f32_to_f16(v) : kiln_f32_to_bf16(v); }
const char *lt_dtype_name(kiln_dtype dt) { return dt == KILN_F16 ? "fp16" : "bf16"; }

float lt_urand(uint32_t *state) {
    *state = *state * 1664525u + 1013904223u;
    return (float)((*state >> 8) * (2.0 / 16777216.0) - 1.0);
}

void lt_fill16(uint32_t *state, uint16_t *h, float *f, size_t n, float scale, kiln_dtype dt) {
    for (size_t i = 0; i < n; i++) {
        h[i] = lt_from_f32(scale * lt_urand(state), dt);
        if (f) f[i] = lt_to_f32(h[i], dt);
    }
}

void lt_err_add(lt_err *e, double got, double want) {
    e->max_want = fmax(e->max_want, fabs(want));
    const double d = fabs(got - want);
    e->max_diff = isnan(d) ? INFINITY : fmax(e->max_diff, d);
}

double lt_err_rel(const lt_err *e) { return e->max_diff / (e->max_want > 0 ? e->max_want : 1); }
