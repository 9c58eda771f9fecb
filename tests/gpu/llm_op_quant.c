/* llm_op_quant.c — the weight-only quantized LLM kernel cases of test_backend_ops (llm_op_cases.h):
 *  - llm.GemvQ8 (llmc_gemv_q8_launch) vs the CPU INT8 product kiln_llm_gemm_q8 on the same int8
 *    weights, row scales and (16-bit, widened) activations, in every configuration of the INT8 GEMV
 *    family in turn (or only cfg): K (a multiple of 16), N, n (token rows), bias, f32 (FP32 out), cfg:
 *    1.5e-3 (fp16), 1e-2 (bf16), 1e-4 (FP32 out) of the largest |reference|.
 *  - llm.DequantQ8 (llmc_dequant_q8_launch, the prefill tiles) vs kiln_llm_q8_row: rows, K (any):
 *    every value q * scale rounded to the dtype, 1e-3 (fp16), 8e-3 (bf16).
 *  - llm.GemmQ8 (llmc_gemm_q_launch, the tensor-core product of 9..LLMC_GEMM_Q_MAX token rows) the same
 *    way, in one pass over K and split over K into a workspace (when the shape allows it), n up to
 *    LLMC_GEMM_Q_MAX.
 * The weights are kiln_llm_quantize_rows of random fp32 values, one row all zeros (scale 0). */
#include "llm_op_cases.h"
#include "llm_test_util.h"

#include "llm/cuda/llm_cuda_internal.h"
#include "llm/llm_gemv_q8.h"

#include <stdlib.h>
#include <string.h>

/* q [rows, K] and scale [rows] from random values in [-1, 1), row 1 (when there is one) all zeros. */
static void random_q8(llm_run *run, int rows, int K, int8_t *q, float *scale) {
    float *w = malloc((size_t)rows * K * sizeof *w);
    if (!w) return (void)llm_fail(run, "out of memory");
    for (size_t i = 0; i < (size_t)rows * K; i++) w[i] = lt_urand(&run->rng);
    if (rows > 1) memset(w + K, 0, (size_t)K * sizeof *w);
    kiln_llm_quantize_rows(w, rows, K, q, scale);
    free(w);
}

bool llm_gemm_q_launch_case(kiln_dtype dt, int wbits, int split, const void *x, int K, int n, const void *w,
                            const float *scale, const float *zero, const void *bias, int N, void *y, bool f32,
                            float *ws) {
    const llmc_gemm_q p = {dt, NULL, false, wbits, x, K, n, K, w, scale, zero, bias, N, y, N, f32,
                           split ? ws : NULL, split ? (size_t)n * N * 4 : 0, 132};
    return llmc_gemm_q_launch(&p) == KILN_OK;
}

const char *llm_gemm_q_case_name(int split) { return split ? "split over K" : "one pass over K"; }

/* gemm: llm.GemmQ8 (two runs: one pass, split), else llm.GemvQ8 (every configuration, or only cfg). */
static bool gemv_q8_case(llm_run *run, llm_params *pr, bool gemm) {
    const kiln_dtype dt = run->dt;
    const int K = (int)llm_param(pr, "K", 64), N = (int)llm_param(pr, "N", 8), n = (int)llm_param(pr, "n", 1);
    const bool bias = llm_param(pr, "bias", 0) != 0, f32 = llm_param(pr, "f32", 0) != 0;
    const int only = (int)llm_param(pr, "cfg", -1), n_max = gemm ? LLMC_GEMM_Q_MAX : LLMC_GEMV_MAX;
    const int n_cfg = gemm ? 2 : LLMC_GEMV_Q8_CONFIGS;
    run->tol = f32 ? 1e-4 : dt == KILN_F16 ? 1.5e-3 : 1e-2;
    if (K < 16 || K % 16 || N < 1 || n < 1 || n > n_max || only < -1 || only >= n_cfg)
        return llm_fail(run, "bad case: K a multiple of 16, N >= 1, n 1..%d, cfg -1..%d", n_max, n_cfg - 1);
    int8_t *q = malloc((size_t)N * K);
    float *scale = malloc((size_t)N * 4), *xf = malloc((size_t)n * K * 4), *bf = malloc((size_t)N * 4);
    uint16_t *x16 = malloc((size_t)n * K * 2), *b16 = malloc((size_t)N * 2);
    float *ref = malloc((size_t)n * N * 4), *yh = malloc((size_t)n * N * 4);
    void *d_q = NULL, *d_s = NULL, *d_x = NULL, *d_b = NULL, *d_y = NULL, *d_ws = NULL;
    bool ok = false;
    if (!q || !scale || !xf || !bf || !x16 || !b16 || !ref || !yh) {
        llm_fail(run, "out of memory");
        goto done;
    }
    random_q8(run, N, K, q, scale);
    lt_fill16(&run->rng, x16, xf, (size_t)n * K, 1.0f, dt);
    lt_fill16(&run->rng, b16, bf, (size_t)N, 1.0f, dt);
    const kiln_llm_gemv_args a = {.x = xf, .ldx = K, .n = n, .in = K, .w = q, .format = KILN_LLM_W_INT8,
                                  .scale = scale, .bias = bias ? bf : NULL, .out = N, .y = ref, .ldy = N};
    kiln_llm_gemm_q8(&a);
    if (!run->on_gpu) {
        ok = true;
        goto done;
    }
    LLM_CUDA(run, cudaMalloc(&d_q, (size_t)N * K));
    LLM_CUDA(run, cudaMalloc(&d_s, (size_t)N * 4));
    LLM_CUDA(run, cudaMalloc(&d_x, (size_t)n * K * 2));
    LLM_CUDA(run, cudaMalloc(&d_b, (size_t)N * 2));
    LLM_CUDA(run, cudaMalloc(&d_y, (size_t)n * N * 4));
    LLM_CUDA(run, cudaMalloc(&d_ws, (size_t)n * N * 4));
    LLM_CUDA(run, cudaMemcpy(d_q, q, (size_t)N * K, cudaMemcpyHostToDevice));
    LLM_CUDA(run, cudaMemcpy(d_s, scale, (size_t)N * 4, cudaMemcpyHostToDevice));
    LLM_CUDA(run, cudaMemcpy(d_x, x16, (size_t)n * K * 2, cudaMemcpyHostToDevice));
    LLM_CUDA(run, cudaMemcpy(d_b, b16, (size_t)N * 2, cudaMemcpyHostToDevice));
    double worst = -1;
    int worst_cfg = 0;
    for (int cfg = only < 0 ? 0 : only; cfg < (only < 0 ? n_cfg : only + 1); cfg++) {
        LLM_CUDA(run, cudaMemset(d_y, 0xff, (size_t)n * N * 4)); /* NaN poison */
        const bool launched =
            gemm ? llm_gemm_q_launch_case(dt, 8, cfg, d_x, K, n, d_q, d_s, NULL, bias ? d_b : NULL, N, d_y, f32, d_ws)
                 : llmc_gemv_q8_launch(dt, NULL, cfg, d_x, K, n, K, d_q, d_s, bias ? d_b : NULL, N, d_y, N, f32,
                                       false) == KILN_OK;
        if (!launched) {
            llm_fail(run, "launch (%s): %s", gemm ? llm_gemm_q_case_name(cfg) : llmc_gemv_q8_config_name(cfg),
                     kiln_last_error());
            goto done;
        }
        if (!llm_config_err(run, d_y, yh, (size_t)n * N, f32, ref, cfg, &worst, &worst_cfg)) goto done;
    }
    if (run->max_diff > run->tol * run->max_want) {
        llm_fail(run, "configuration %s: max rel err %.3e above %.1e",
                 gemm ? llm_gemm_q_case_name(worst_cfg) : llmc_gemv_q8_config_name(worst_cfg),
                 worst / (run->max_want > 0 ? run->max_want : 1), run->tol);
        goto done;
    }
    ok = true;
done:
    cudaFree(d_q);
    cudaFree(d_s);
    cudaFree(d_x);
    cudaFree(d_b);
    cudaFree(d_y);
    cudaFree(d_ws);
    free(q);
    free(scale);
    free(xf);
    free(bf);
    free(x16);
    free(b16);
    free(ref);
    free(yh);
    return ok;
}

static bool dequant_q8_case(llm_run *run, llm_params *pr) {
    const kiln_dtype dt = run->dt;
    const int rows = (int)llm_param(pr, "rows", 64), K = (int)llm_param(pr, "K", 64);
    run->tol = dt == KILN_F16 ? 1e-3 : 8e-3;
    if (rows < 1 || K < 1) return llm_fail(run, "bad case: rows >= 1, K >= 1");
    const size_t n = (size_t)rows * K;
    int8_t *q = malloc(n);
    float *scale = malloc((size_t)rows * 4), *ref = malloc(n * 4);
    uint16_t *got = malloc(n * 2);
    void *d_q = NULL, *d_s = NULL, *d_out = NULL;
    bool ok = false;
    if (!q || !scale || !ref || !got) {
        llm_fail(run, "out of memory");
        goto done;
    }
    random_q8(run, rows, K, q, scale);
    const kiln_llm_q8 w = {.q = q, .scale = scale};
    for (int r = 0; r < rows; r++) kiln_llm_q8_row(&w, r, K, ref + (size_t)r * K);
    if (!run->on_gpu) {
        ok = true;
        goto done;
    }
    LLM_CUDA(run, cudaMalloc(&d_q, n));
    LLM_CUDA(run, cudaMalloc(&d_s, (size_t)rows * 4));
    LLM_CUDA(run, cudaMalloc(&d_out, n * 2));
    LLM_CUDA(run, cudaMemcpy(d_q, q, n, cudaMemcpyHostToDevice));
    LLM_CUDA(run, cudaMemcpy(d_s, scale, (size_t)rows * 4, cudaMemcpyHostToDevice));
    LLM_CUDA(run, cudaMemset(d_out, 0xff, n * 2)); /* NaN poison */
    if (llmc_dequant_q8_launch(dt, NULL, d_q, d_s, rows, K, d_out) != KILN_OK) {
        llm_fail(run, "launch: %s", kiln_last_error());
        goto done;
    }
    LLM_CUDA(run, cudaDeviceSynchronize());
    LLM_CUDA(run, cudaMemcpy(got, d_out, n * 2, cudaMemcpyDeviceToHost));
    for (size_t i = 0; i < n; i++) llm_err_add(run, lt_to_f32(got[i], dt), ref[i]);
    ok = true;
done:
    cudaFree(d_q);
    cudaFree(d_s);
    cudaFree(d_out);
    free(q);
    free(scale);
    free(ref);
    free(got);
    return ok;
}

bool llm_quant_case(llm_run *run, const char *op, llm_params *pr) {
    if (!strcmp(op, "llm.GemvQ8") || !strcmp(op, "llm.GemmQ8")) return gemv_q8_case(run, pr, !strcmp(op, "llm.GemmQ8"));
    return dequant_q8_case(run, pr);
}
