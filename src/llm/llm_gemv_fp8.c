/* llm_gemv_fp8.c — kiln_llm_gemm_fp8 and the FP8 quantizers (llm_gemv_fp8.h). Each token row is first
 * rounded to E4M3 with its scale and kept as the codes' exact values (fp32, unscaled) in a scratch
 * buffer; then, for decode rows, each chunk of ROWS output rows forms its dot products with every token
 * row, each weight code decoded by a 256-entry table as it is read, summed in eight interleaved fp32
 * partial sums, scaled once by scale[o] * s_t. A prefill product (GEMM_TOKENS rows or more) decodes tiles
 * of TILE_ROWS weight rows (times their scales) and multiplies them with the scaled activations by the
 * fp32 forward's GEMM (kiln_llm_linear). */
#include "llm/llm_gemv_fp8.h"

#include "core/threadpool.h"
#include "llm/llm_cpu_ops.h"
#include "quant/fp8.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define ROWS 16   /* output rows per unit of pool work */
#define PARALLEL_MACS (1 << 15)
#define GEMM_TOKENS 16
#define TILE_ROWS 256

/* The 256 E4M3 code values (NaN codes as 0: the quantizers never write them). */
static const float *e4m3_table(void) {
    static float table[256];
    static int ready; /* a race only writes the same values */
    if (!__atomic_load_n(&ready, __ATOMIC_ACQUIRE)) {
        for (int c = 0; c < 256; c++) {
            float v = kiln_e4m3_to_f32((uint8_t)c);
            table[c] = isnan(v) ? 0.0f : v;
        }
        __atomic_store_n(&ready, 1, __ATOMIC_RELEASE);
    }
    return table;
}

float kiln_llm_fp8_act_scale(const float *x, int k, float act_scale) {
    if (act_scale > 0) return act_scale;
    float mx = 0;
    for (int i = 0; i < k; i++) mx = fabsf(x[i]) > mx ? fabsf(x[i]) : mx;
    return mx > 0 ? mx / KILN_E4M3_MAX : 1.0f;
}

void kiln_llm_fp8_quantize_acts(const float *x, int k, float s, uint8_t *codes) {
    for (int i = 0; i < k; i++) codes[i] = kiln_f32_to_e4m3(x[i] / s);
}

void kiln_llm_quantize_rows_fp8(const float *w, int64_t rows, int64_t cols, uint8_t *codes, float *scale) {
    for (int64_t r = 0; r < rows; r++) {
        const float *row = w + r * cols;
        float mx = 0;
        for (int64_t k = 0; k < cols; k++) mx = fabsf(row[k]) > mx ? fabsf(row[k]) : mx;
        scale[r] = mx / KILN_E4M3_MAX;
        for (int64_t k = 0; k < cols; k++) codes[r * cols + k] = mx > 0 ? kiln_f32_to_e4m3(row[k] / scale[r]) : 0;
    }
}

void kiln_llm_fp8_row(const kiln_llm_q8 *w, int64_t r, int cols, float *out) {
    const float *tab = e4m3_table();
    const uint8_t *q = (const uint8_t *)w->q + r * cols;
    for (int k = 0; k < cols; k++) out[k] = tab[q[k]] * w->scale[r];
}

typedef struct fp8_job {
    const kiln_llm_gemv_args *a;
    const float *xq;    /* [n, in] the activations' E4M3 values, unscaled; NULL: rounded as they are read */
    const float *xs;    /* [n] their scales */
    const float *tab;
} fp8_job;

/* The unscaled sum over k of e4m3(q[k]) e4m3(x[k] / s) without scratch (the path when none could be
 * had): the buffered path's codes, formed as they are read, summed in one chain. */
static float dot_direct(const float *tab, const uint8_t *q, const float *x, int K, float s) {
    float sum = 0;
    for (int k = 0; k < K; k++) sum += tab[q[k]] * tab[kiln_f32_to_e4m3(x[k] / s)];
    return sum;
}

static inline void store_out(const kiln_llm_gemv_args *a, float *y, int o, float v) {
    if (a->bias) v += a->bias[o];
    y[o] = a->accumulate ? y[o] + v : v;
}

/* The unscaled sum over k < K of tab[q[k]] * x[k], in LANES interleaved fp32 partial sums (independent
 * chains, so that the lookups and multiplies overlap), added pairwise at the end. */
#define LANES 8
static float dot_table(const float *tab, const uint8_t *q, const float *x, int K) {
    float acc[LANES] = {0};
    int k = 0;
    for (; k + LANES <= K; k += LANES)
        for (int j = 0; j < LANES; j++) acc[j] += tab[q[k + j]] * x[k + j];
    for (int j = 0; k < K; k++, j++) acc[j] += tab[q[k]] * x[k];
    for (int w = LANES / 2; w; w /= 2)
        for (int j = 0; j < w; j++) acc[j] += acc[j + w];
    return acc[0];
}

/* Output rows [o0, o1) of every token row, the weight codes decoded by table as they are read. */
static void fp8_rows(const fp8_job *j, int o0, int o1) {
    const kiln_llm_gemv_args *a = j->a;
    const int K = a->in;
    for (int o = o0; o < o1; o++) {
        const uint8_t *q = (const uint8_t *)a->w + (size_t)o * K;
        for (int t = 0; t < a->n; t++) {
            const float *xr = a->x + (size_t)t * a->ldx;
            const float xs = j->xq ? j->xs[t] : kiln_llm_fp8_act_scale(xr, K, a->act_scale);
            const float s = j->xq ? dot_table(j->tab, q, j->xq + (size_t)t * K, K) : dot_direct(j->tab, q, xr, K, xs);
            store_out(a, a->y + (size_t)t * a->ldy, o, s * (a->scale[o] * xs));
        }
    }
    if (a->gelu)
        for (int t = 0; t < a->n; t++) kiln_llm_gelu_tanh(a->y + (size_t)t * a->ldy + o0, (size_t)(o1 - o0));
}

static void fp8_part(void *ctx, int64_t c0, int64_t c1) {
    const fp8_job *j = ctx;
    fp8_rows(j, (int)c0 * ROWS, (int)c1 * ROWS < j->a->out ? (int)c1 * ROWS : j->a->out);
}

/* Prefill: decoded tiles of weight rows through kiln_llm_linear, the activations scaled back (xq * s_t). */
static void run_tiled(const kiln_llm_gemv_args *a, float *xq, const float *xs, float *tile) {
    const size_t K = (size_t)a->in;
    for (int t = 0; t < a->n; t++)
        for (size_t k = 0; k < K; k++) xq[t * K + k] *= xs[t];
    const kiln_llm_q8 w = {.q = a->w, .scale = a->scale, .fp8 = true};
    for (int o0 = 0; o0 < a->out; o0 += TILE_ROWS) {
        const int m = a->out - o0 < TILE_ROWS ? a->out - o0 : TILE_ROWS;
        for (int r = 0; r < m; r++) kiln_llm_fp8_row(&w, o0 + r, a->in, tile + (size_t)r * K);
        kiln_llm_linear(xq, a->in, a->n, a->in, tile, a->bias ? a->bias + o0 : NULL, m, a->y + o0, a->ldy,
                        a->accumulate);
        if (a->gelu)
            for (int t = 0; t < a->n; t++) kiln_llm_gelu_tanh(a->y + (size_t)t * a->ldy + o0, (size_t)m);
    }
}

void kiln_llm_gemm_fp8(const kiln_llm_gemv_args *a) {
    const size_t K = (size_t)a->in;
    float *xq = malloc((size_t)a->n * K * sizeof *xq + (size_t)a->n * sizeof(float));
    uint8_t *codes = malloc(K);
    float *tile = a->n >= GEMM_TOKENS ? malloc((size_t)TILE_ROWS * K * sizeof *tile) : NULL;
    const float *tab = e4m3_table();
    fp8_job j = {a, NULL, NULL, tab};
    const int64_t chunks = (a->out + ROWS - 1) / ROWS;
    const bool serial = (int64_t)a->n * a->out * a->in < PARALLEL_MACS;
    if (!xq || !codes) { /* the forward's products cannot fail: the same values without scratch */
        free(xq);
        free(codes);
        free(tile);
        kiln_parallel_for(chunks, serial ? chunks : 1, fp8_part, &j);
        return;
    }
    float *xs = xq + (size_t)a->n * K;
    for (int t = 0; t < a->n; t++) {
        const float *x = a->x + (size_t)t * a->ldx;
        xs[t] = kiln_llm_fp8_act_scale(x, a->in, a->act_scale);
        kiln_llm_fp8_quantize_acts(x, a->in, xs[t], codes);
        for (size_t k = 0; k < K; k++) xq[t * K + k] = tab[codes[k]];
    }
    if (tile) {
        run_tiled(a, xq, xs, tile);
    } else {
        j.xq = xq;
        j.xs = xs;
        kiln_parallel_for(chunks, serial ? chunks : 1, fp8_part, &j);
    }
    free(xq);
    free(codes);
    free(tile);
}
