/* llm_op_quant4.c — the weight-only INT4 LLM kernel cases of test_backend_ops (llm_op_cases.h):
 *  - llm.GemvQ4 (llmc_gemv_q4_launch, every configuration of the quantized family, or cfg=i alone) vs
 *    the CPU INT4 product kiln_llm_gemm_q4 on the same packed weights, group scales and zero points and
 *    (16-bit, widened) activations: K (a multiple of 32; not of 128 gives a short last group), N, n
 *    (token rows), bias, f32 (FP32 out): 1.5e-3 (fp16), 1e-2 (bf16) of the largest |reference|; FP32
 *    out 1e-4 of the largest sum of |x w| over an output's products (the scale of its fp32 rounding: the
 *    kernel sums x (1 + q / 16) and subtracts the zero point's share afterwards, so an output that
 *    cancels to a small value keeps the rounding of the larger sums).
 *  - llm.GemmQ4 (llmc_gemm_q_launch, the tensor-core product, n up to LLMC_GEMM_Q_MAX) the same way, in
 *    one pass over K and split over K; its weights are rounded to the dtype before the product, so FP32
 *    out is held to the 16-bit bounds.
 *  - llm.DequantQ4 (llmc_dequant_q4_launch, the prefill tiles) vs kiln_llm_q4_row: rows, K (any):
 *    every value (q - zero) * scale rounded to the dtype, 1e-3 (fp16), 8e-3 (bf16).
 * The weights are kiln_llm_quantize_q4 of random fp32 values, one row all zeros (scales 0). On the
 * device the zero points lie right after the scales, as llm_cuda_gemv_q4.cu keeps them. */
#include "llm_op_cases.h"
#include "llm_test_util.h"

#include "llm/cuda/llm_cuda_internal.h"
#include "llm/llm_gemv_q4.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* A random INT4 matrix [rows, K]: q packed, sz = scales [rows, G] then zero points [rows, G]. */
typedef struct q4_mat {
    int rows, K;
    int64_t G, bytes;
    uint8_t *q;
    float *sz;
} q4_mat;

static bool q4_make(llm_run *run, int rows, int K, q4_mat *m) {
    *m = (q4_mat){.rows = rows, .K = K, .G = kiln_q4_groups(K), .bytes = rows * kiln_q4_row_bytes(K)};
    m->q = malloc((size_t)m->bytes);
    m->sz = malloc((size_t)(rows * m->G) * 2 * sizeof *m->sz);
    float *w = malloc((size_t)rows * K * sizeof *w);
    if (!m->q || !m->sz || !w) {
        free(w);
        return llm_fail(run, "out of memory");
    }
    for (size_t i = 0; i < (size_t)rows * K; i++) w[i] = lt_urand(&run->rng);
    if (rows > 1) memset(w + K, 0, (size_t)K * sizeof *w);
    kiln_llm_quantize_q4(w, rows, K, 1.0f, m->q, m->sz, m->sz + rows * m->G);
    free(w);
    return true;
}

static void q4_free(q4_mat *m) {
    free(m->q);
    free(m->sz);
}

/* m on the device: *d_q its packed values, *d_sz its scales then zero points. */
static bool q4_upload(llm_run *run, const q4_mat *m, void **d_q, void **d_sz) {
    const size_t szb = (size_t)(m->rows * m->G) * 2 * sizeof(float);
    LLM_CUDA(run, cudaMalloc(d_q, (size_t)m->bytes));
    LLM_CUDA(run, cudaMalloc(d_sz, szb));
    LLM_CUDA(run, cudaMemcpy(*d_q, m->q, (size_t)m->bytes, cudaMemcpyHostToDevice));
    LLM_CUDA(run, cudaMemcpy(*d_sz, m->sz, szb, cudaMemcpyHostToDevice));
    return true;
done:
    return false;
}

/* gemm: llm.GemmQ4 (two runs: one pass, split), else llm.GemvQ4 (every configuration, or only cfg). */
static bool gemv_q4_case(llm_run *run, llm_params *pr, bool gemm) {
    const kiln_dtype dt = run->dt;
    const int K = (int)llm_param(pr, "K", 128), N = (int)llm_param(pr, "N", 8), n = (int)llm_param(pr, "n", 1);
    const bool bias = llm_param(pr, "bias", 0) != 0, f32 = llm_param(pr, "f32", 0) != 0;
    const int only = (int)llm_param(pr, "cfg", -1), n_max = gemm ? LLMC_GEMM_Q_MAX : LLMC_GEMV_MAX;
    const int n_cfg = gemm ? 2 : LLMC_GEMV_Q8_CONFIGS;
    run->tol = f32 && !gemm ? 1e-4 : dt == KILN_F16 ? 1.5e-3 : 1e-2;
    if (K < 32 || K % 32 || N < 1 || n < 1 || n > n_max || only < -1 || only >= n_cfg)
        return llm_fail(run, "bad case: K a multiple of 32, N >= 1, n 1..%d, cfg -1..%d", n_max, n_cfg - 1);
    q4_mat m;
    float *xf = malloc((size_t)n * K * 4), *bf = malloc((size_t)N * 4);
    uint16_t *x16 = malloc((size_t)n * K * 2), *b16 = malloc((size_t)N * 2);
    float *ref = malloc((size_t)n * N * 4), *yh = malloc((size_t)n * N * 4);
    void *d_q = NULL, *d_sz = NULL, *d_x = NULL, *d_b = NULL, *d_y = NULL, *d_ws = NULL;
    bool ok = q4_make(run, N, K, &m);
    if (!ok) goto done;
    ok = false;
    if (!xf || !bf || !x16 || !b16 || !ref || !yh) {
        llm_fail(run, "out of memory");
        goto done;
    }
    lt_fill16(&run->rng, x16, xf, (size_t)n * K, 1.0f, dt);
    lt_fill16(&run->rng, b16, bf, (size_t)N, 1.0f, dt);
    const kiln_llm_gemv_args a = {.x = xf, .ldx = K, .n = n, .in = K, .w = m.q, .format = KILN_LLM_W_INT4,
                                  .scale = m.sz, .zero = m.sz + N * m.G, .bias = bias ? bf : NULL, .out = N,
                                  .y = ref, .ldy = N};
    kiln_llm_gemm_q4(&a);
    if (!run->on_gpu) {
        ok = true;
        goto done;
    }
    if (!q4_upload(run, &m, &d_q, &d_sz)) goto done;
    LLM_CUDA(run, cudaMalloc(&d_x, (size_t)n * K * 2));
    LLM_CUDA(run, cudaMalloc(&d_b, (size_t)N * 2));
    LLM_CUDA(run, cudaMalloc(&d_y, (size_t)n * N * 4));
    LLM_CUDA(run, cudaMalloc(&d_ws, (size_t)n * N * 4));
    LLM_CUDA(run, cudaMemcpy(d_x, x16, (size_t)n * K * 2, cudaMemcpyHostToDevice));
    LLM_CUDA(run, cudaMemcpy(d_b, b16, (size_t)N * 2, cudaMemcpyHostToDevice));
    const float *d_s = d_sz, *d_z = (const float *)d_sz + N * m.G;
    double worst = -1;
    int worst_cfg = 0;
    for (int cfg = only < 0 ? 0 : only; cfg < (only < 0 ? n_cfg : only + 1); cfg++) {
        LLM_CUDA(run, cudaMemset(d_y, 0xff, (size_t)n * N * 4)); /* NaN poison */
        const bool launched =
            gemm ? llm_gemm_q_launch_case(dt, 4, cfg, d_x, K, n, d_q, d_s, d_z, bias ? d_b : NULL, N, d_y, f32, d_ws)
                 : llmc_gemv_q4_launch(dt, NULL, cfg, d_x, K, n, K, d_q, d_s, d_z, bias ? d_b : NULL, N, d_y, N, f32,
                                       false) == KILN_OK;
        if (!launched) {
            llm_fail(run, "launch (%s): %s", gemm ? llm_gemm_q_case_name(cfg) : llmc_gemv_q8_config_name(cfg),
                     kiln_last_error());
            goto done;
        }
        if (!llm_config_err(run, d_y, yh, (size_t)n * N, f32, ref, cfg, &worst, &worst_cfg)) goto done;
    }
    double scale = run->max_want; /* FP32 GEMV out: the largest sum of |x w| (see the top) */
    if (f32 && !gemm) {
        float *w = malloc((size_t)K * 4);
        if (!w) {
            llm_fail(run, "out of memory");
            goto done;
        }
        for (int o = 0; o < N; o++) {
            kiln_llm_q4_row(m.q, m.sz, m.sz + N * m.G, o, K, w);
            for (int t = 0; t < n; t++) {
                double sum = 0;
                for (int k = 0; k < K; k++) sum += fabs((double)xf[(size_t)t * K + k] * w[k]);
                if (sum > scale) scale = sum;
            }
        }
        free(w);
    }
    if (run->max_diff > run->tol * scale) {
        llm_fail(run, "configuration %s: max rel err %.3e above %.1e",
                 gemm ? llm_gemm_q_case_name(worst_cfg) : llmc_gemv_q8_config_name(worst_cfg),
                 worst / (scale > 0 ? scale : 1), run->tol);
        goto done;
    }
    ok = true;
done:
    cudaFree(d_q);
    cudaFree(d_sz);
    cudaFree(d_x);
    cudaFree(d_b);
    cudaFree(d_y);
    cudaFree(d_ws);
    q4_free(&m);
    free(xf);
    free(bf);
    free(x16);
    free(b16);
    free(ref);
    free(yh);
    return ok;
}

static bool dequant_q4_case(llm_run *run, llm_params *pr) {
    const kiln_dtype dt = run->dt;
    const int rows = (int)llm_param(pr, "rows", 64), K = (int)llm_param(pr, "K", 128);
    run->tol = dt == KILN_F16 ? 1e-3 : 8e-3;
    if (rows < 1 || K < 1) return llm_fail(run, "bad case: rows >= 1, K >= 1");
    const size_t n = (size_t)rows * K;
    q4_mat m;
    float *ref = malloc(n * 4);
    uint16_t *got = malloc(n * 2);
    void *d_q = NULL, *d_sz = NULL, *d_out = NULL;
    bool ok = q4_make(run, rows, K, &m);
    if (!ok) goto done;
    ok = false;
    if (!ref || !got) {
        llm_fail(run, "out of memory");
        goto done;
    }
    for (int r = 0; r < rows; r++) kiln_llm_q4_row(m.q, m.sz, m.sz + rows * m.G, r, K, ref + (size_t)r * K);
    if (!run->on_gpu) {
        ok = true;
        goto done;
    }
    if (!q4_upload(run, &m, &d_q, &d_sz)) goto done;
    LLM_CUDA(run, cudaMalloc(&d_out, n * 2));
    LLM_CUDA(run, cudaMemset(d_out, 0xff, n * 2)); /* NaN poison */
    if (llmc_dequant_q4_launch(dt, NULL, d_q, d_sz, (const float *)d_sz + rows * m.G, rows, K, d_out) != KILN_OK) {
        llm_fail(run, "launch: %s", kiln_last_error());
        goto done;
    }
    LLM_CUDA(run, cudaDeviceSynchronize());
    LLM_CUDA(run, cudaMemcpy(got, d_out, n * 2, cudaMemcpyDeviceToHost));
    for (size_t i = 0; i < n; i++) llm_err_add(run, lt_to_f32(got[i], dt), ref[i]);
    ok = true;
done:
    cudaFree(d_q);
    cudaFree(d_sz);
    cudaFree(d_out);
    q4_free(&m);
    free(ref);
    free(got);
    return ok;
}

bool llm_quant4_case(llm_run *run, const char *op, llm_params *pr) {
    if (!strcmp(op, "llm.GemvQ4") || !strcmp(op, "llm.GemmQ4")) return gemv_q4_case(run, pr, !strcmp(op, "llm.GemmQ4"));
    return dequant_q4_case(run, pr);
}
