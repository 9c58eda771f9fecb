/* llm_gemv_q8.c — kiln_llm_gemm_q8 and the row quantizer (llm_gemv_q8.h). The pool's unit of work is
 * a chunk of ROWS output rows; within it, token rows go four at a time, each weight row of the chunk
 * (in L1 after the first pass) widened 16 int8 lanes at a time to fp32 and multiplied into one
 * 16-lane accumulator per token row; the sum is scaled by the row's scale, then bias, residual and
 * GELU are applied as kiln_llm_gemv does. */
#include "llm/llm_gemv_q8.h"

#include "core/threadpool.h"
#include "llm/llm_cpu_ops.h"

#include <math.h>
#include <string.h>

#if defined(__x86_64__) && defined(__linux__) && !defined(KILN_NO_SIMD_CLONES)
#define Q8_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define Q8_CLONES
#endif

#define ROWS 16       /* output rows per unit of pool work */
#define TOKENS 4      /* token rows per pass over a chunk */
#define PARALLEL_MACS (1 << 15)

typedef float v16f __attribute__((vector_size(64)));
typedef int8_t v16b __attribute__((vector_size(16)));

/* Statement expressions, not functions: a 64-byte vector argument or return value outside the
 * AVX-512 clone would change the ABI. */
#define WIDEN16(p)                                                                                 \
    ({                                                                                             \
        v16b b_;                                                                                   \
        memcpy(&b_, (p), sizeof b_);                                                               \
        __builtin_convertvector(b_, v16f);                                                         \
    })
#define LOAD16(p)                                                                                  \
    ({                                                                                             \
        v16f v_;                                                                                   \
        memcpy(&v_, (p), sizeof v_);                                                               \
        v_;                                                                                        \
    })
#define SUM16(v)                                                                                   \
    ({                                                                                             \
        float s_ = 0;                                                                              \
        for (int i_ = 0; i_ < 16; i_++) s_ += (v)[i_];                                             \
        s_;                                                                                        \
    })

static inline void store_out(const kiln_llm_q8_args *a, float *y, int o, float v) {
    if (a->bias) v += a->bias[o];
    y[o] = a->accumulate ? y[o] + v : v;
}

/* Output rows [o0, o1), all token rows. */
Q8_CLONES
static void q8_rows(const kiln_llm_q8_args *a, int o0, int o1) {
    const int K = a->in, K16 = K & ~15;
    for (int t0 = 0; t0 < a->n; t0 += TOKENS) {
        const int nt = a->n - t0 < TOKENS ? a->n - t0 : TOKENS;
        const float *x = a->x + (size_t)t0 * a->ldx;
        for (int o = o0; o < o1; o++) {
            const int8_t *w = a->w.q + (size_t)o * K;
            v16f acc[TOKENS] = {{0}};
            for (int k = 0; k < K16; k += 16) {
                const v16f wv = WIDEN16(w + k);
                for (int t = 0; t < nt; t++) acc[t] += wv * LOAD16(x + (size_t)t * a->ldx + k);
            }
            for (int t = 0; t < nt; t++) {
                float r = SUM16(acc[t]);
                for (int k = K16; k < K; k++) r += (float)w[k] * x[(size_t)t * a->ldx + k];
                store_out(a, a->y + (size_t)(t0 + t) * a->ldy, o, r * a->w.scale[o]);
            }
        }
    }
    if (a->gelu)
        for (int t = 0; t < a->n; t++) kiln_llm_gelu_tanh(a->y + (size_t)t * a->ldy + o0, (size_t)(o1 - o0));
}

static void q8_part(void *ctx, int64_t c0, int64_t c1) {
    const kiln_llm_q8_args *a = ctx;
    q8_rows(a, (int)c0 * ROWS, (int)c1 * ROWS < a->out ? (int)c1 * ROWS : a->out);
}

void kiln_llm_gemm_q8(const kiln_llm_q8_args *a) {
    const int64_t chunks = (a->out + ROWS - 1) / ROWS;
    const bool serial = (int64_t)a->n * a->out * a->in < PARALLEL_MACS;
    kiln_parallel_for(chunks, serial ? chunks : 1, q8_part, (void *)a);
}

void kiln_llm_quantize_rows(const float *w, int64_t rows, int64_t cols, int8_t *q, float *scale) {
    for (int64_t r = 0; r < rows; r++) {
        const float *row = w + r * cols;
        float mx = 0;
        for (int64_t k = 0; k < cols; k++) mx = fabsf(row[k]) > mx ? fabsf(row[k]) : mx;
        const float s = mx / 127.0f;
        scale[r] = s;
        for (int64_t k = 0; k < cols; k++) {
            float v = s > 0 ? roundf(row[k] / s) : 0.0f;
            q[r * cols + k] = (int8_t)(v > 127 ? 127 : v < -127 ? -127 : v);
        }
    }
}

void kiln_llm_q8_row(const kiln_llm_q8 *w, int64_t r, int cols, float *out) {
    const int8_t *q = w->q + r * cols;
    for (int k = 0; k < cols; k++) out[k] = (float)q[k] * w->scale[r];
}
