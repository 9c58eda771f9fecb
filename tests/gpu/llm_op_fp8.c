/* llm_op_fp8.c — the FP8 LLM kernel cases of test_backend_ops (llm_op_cases.h), against the CPU FP8
 * product (src/llm/llm_gemv_fp8.c) on the same 16-bit activations (widened) and E4M3 weights:
 *  - llm.QuantFp8 (llmc_fp8_quantize_launch) vs kiln_llm_fp8_act_scale + kiln_llm_fp8_quantize_acts:
 *    K, n (token rows), static (1: a static scale small enough that values saturate, else the
 *    dynamic max |x| / 448 per row, one row all zeros): every code and every scale identical.
 *  - llm.LinearFp8 (llmc_linear_q on a minimal FP8 kiln_llm_cuda: the activations rounded once, then
 *    the GEMV for n <= 8, cuBLASLt's FP8 GEMM and the scaling epilogue above, the GEMV over groups of
 *    rows when K is not a multiple of 16) vs kiln_llm_gemm_fp8: K, N, n, bias, f32 (FP32 out):
 *    1.5e-3 (fp16), 1e-2 (bf16), 1e-4 (FP32 out; 5e-4 through cuBLASLt, whose FP8 tensor-core sums keep
 *    fewer bits) of the largest |reference| (the same codes; only the summation and the output rounding
 *    differ).
 * The weights are kiln_llm_quantize_rows_fp8 of random fp32 values, one row all zeros (scale 0). */
#include "llm_op_cases.h"
#include "llm_test_util.h"

#include "llm/cuda/llm_cuda_internal.h"
#include "llm/llm_gemv_fp8.h"

#include <stdlib.h>
#include <string.h>

/* q [rows, K] codes and scale [rows] from random values in [-1, 1), row 1 (when there is one) zeros. */
static void random_fp8(llm_run *run, int rows, int K, uint8_t *q, float *scale) {
    float *w = malloc((size_t)rows * K * sizeof *w);
    if (!w) return (void)llm_fail(run, "out of memory");
    for (size_t i = 0; i < (size_t)rows * K; i++) w[i] = lt_urand(&run->rng);
    if (rows > 1) memset(w + K, 0, (size_t)K * sizeof *w);
    kiln_llm_quantize_rows_fp8(w, rows, K, q, scale);
    free(w);
}

static bool quant_case(llm_run *run, llm_params *pr) {
    const kiln_dtype dt = run->dt;
    const int K = (int)llm_param(pr, "K", 64), n = (int)llm_param(pr, "n", 1);
    const float act = llm_param(pr, "static", 0) != 0 ? 2.0f / 448 : 0.0f; /* values up to 4: past 448 s */
    if (K < 1 || n < 1) return llm_fail(run, "bad case: K >= 1, n >= 1");
    float *xf = malloc((size_t)n * K * 4), *xs = malloc((size_t)n * 4), *gs = malloc((size_t)n * 4);
    uint16_t *x16 = malloc((size_t)n * K * 2);
    uint8_t *codes = malloc((size_t)n * K), *got = malloc((size_t)n * K);
    void *d_x = NULL, *d_c = NULL, *d_s = NULL;
    bool ok = false;
    if (!xf || !xs || !gs || !x16 || !codes || !got) {
        llm_fail(run, "out of memory");
        goto done;
    }
    lt_fill16(&run->rng, x16, xf, (size_t)n * K, 4.0f, dt);
    if (n > 1) { /* a row of zeros: scale 1, codes 0 */
        memset(x16 + K, 0, (size_t)K * 2);
        memset(xf + K, 0, (size_t)K * 4);
    }
    for (int t = 0; t < n; t++) {
        xs[t] = kiln_llm_fp8_act_scale(xf + (size_t)t * K, K, act);
        kiln_llm_fp8_quantize_acts(xf + (size_t)t * K, K, xs[t], codes + (size_t)t * K);
    }
    if (!run->on_gpu) {
        ok = true;
        goto done;
    }
    LLM_CUDA(run, cudaMalloc(&d_x, (size_t)n * K * 2));
    LLM_CUDA(run, cudaMalloc(&d_c, (size_t)n * K));
    LLM_CUDA(run, cudaMalloc(&d_s, (size_t)n * 4));
    LLM_CUDA(run, cudaMemcpy(d_x, x16, (size_t)n * K * 2, cudaMemcpyHostToDevice));
    LLM_CUDA(run, cudaMemset(d_c, 0x7f, (size_t)n * K)); /* NaN codes: a code never written shows */
    if (llmc_fp8_quantize_launch(dt, NULL, d_x, K, n, K, act, d_c, d_s) != KILN_OK) {
        llm_fail(run, "launch: %s", kiln_last_error());
        goto done;
    }
    LLM_CUDA(run, cudaDeviceSynchronize());
    LLM_CUDA(run, cudaMemcpy(got, d_c, (size_t)n * K, cudaMemcpyDeviceToHost));
    LLM_CUDA(run, cudaMemcpy(gs, d_s, (size_t)n * 4, cudaMemcpyDeviceToHost));
    for (size_t i = 0; i < (size_t)n * K; i++) run->wrong += got[i] != codes[i];
    for (int t = 0; t < n; t++) run->wrong += gs[t] != xs[t];
    ok = run->wrong == 0 || llm_fail(run, "%d code(s) or scale(s) differ from the CPU's", run->wrong);
done:
    cudaFree(d_x);
    cudaFree(d_c);
    cudaFree(d_s);
    free(xf);
    free(xs);
    free(gs);
    free(x16);
    free(codes);
    free(got);
    return ok;
}

/* A kiln_llm_cuda with only what llmc_linear_q's FP8 path reads: a stream and cuBLASLt, the dtype, the
 * GEMV row limit and llm_cuda_fp8.cu's buffers for n rows of K inputs (dynamic activation scales). */
static kiln_status minimal_fp8(int device, kiln_dtype dt, int n, int K, kiln_llm_cuda **out) {
    kiln_llm_cuda *g = calloc(1, sizeof *g);
    if (!g) return kiln_error(KILN_ERR_OUT_OF_MEMORY, "out of memory");
    *out = g;
    g->dtype = dt;
    g->cfg.d_model = g->cfg.d_ff = g->cfg.head_dim = K;
    g->cfg.n_head = 1;
    g->opt.max_tokens = n;
    g->opt.gemv_max_tokens = LLMC_GEMV_MAX;
    KILN_TRY(kiln_cuda_ctx_open(device, LLMC_WORKSPACE_BYTES, KILN_CUDA_OPEN_BLAS, &g->kc));
    return llmc_fp8_create(g, NULL);
}

static void minimal_free(kiln_llm_cuda *g) {
    if (!g) return;
    if (g->kc.stream) cudaStreamSynchronize(g->kc.stream);
    llmc_fp8_free(g);
    kiln_cuda_ctx_close(&g->kc);
    free(g);
}

static bool linear_case(llm_run *run, llm_params *pr) {
    const kiln_dtype dt = run->dt;
    const int K = (int)llm_param(pr, "K", 64), N = (int)llm_param(pr, "N", 16), n = (int)llm_param(pr, "n", 1);
    const bool bias = llm_param(pr, "bias", 0) != 0, f32 = llm_param(pr, "f32", 0) != 0;
    /* FP32 out through cuBLASLt's FP8 GEMM (more than LLMC_GEMV_MAX rows): Hopper's FP8 tensor cores
     * keep fewer mantissa bits than FP32 in their partial sums (measured on the H200: up to 2.2e-4) */
    run->tol = f32 ? (n > LLMC_GEMV_MAX ? 5e-4 : 1e-4) : dt == KILN_F16 ? 1.5e-3 : 1e-2;
    if (K < 1 || N < 1 || n < 1) return llm_fail(run, "bad case: K, N, n >= 1");
    uint8_t *q = malloc((size_t)N * K);
    float *scale = malloc((size_t)N * 4), *xf = malloc((size_t)n * K * 4), *bf = malloc((size_t)N * 4);
    uint16_t *x16 = malloc((size_t)n * K * 2), *b16 = malloc((size_t)N * 2);
    float *ref = malloc((size_t)n * N * 4), *yh = malloc((size_t)n * N * 4);
    void *d_q = NULL, *d_s = NULL, *d_x = NULL, *d_b = NULL, *d_y = NULL;
    kiln_llm_cuda *g = NULL;
    bool ok = false;
    if (!q || !scale || !xf || !bf || !x16 || !b16 || !ref || !yh) {
        llm_fail(run, "out of memory");
        goto done;
    }
    random_fp8(run, N, K, q, scale);
    lt_fill16(&run->rng, x16, xf, (size_t)n * K, 1.0f, dt);
    lt_fill16(&run->rng, b16, bf, (size_t)N, 1.0f, dt);
    const kiln_llm_gemv_args a = {.x = xf, .ldx = K, .n = n, .in = K, .w = q, .format = KILN_LLM_W_FP8,
                                  .scale = scale, .bias = bias ? bf : NULL, .out = N, .y = ref, .ldy = N};
    kiln_llm_gemm_fp8(&a);
    if (!run->on_gpu) {
        ok = true;
        goto done;
    }
    if (minimal_fp8(run->device, dt, n, K, &g) != KILN_OK) {
        llm_fail(run, "setup: %s", kiln_last_error());
        goto done;
    }
    LLM_CUDA(run, cudaMalloc(&d_q, (size_t)N * K));
    LLM_CUDA(run, cudaMalloc(&d_s, (size_t)N * 4));
    LLM_CUDA(run, cudaMalloc(&d_x, (size_t)n * K * 2));
    LLM_CUDA(run, cudaMalloc(&d_b, (size_t)N * 2));
    LLM_CUDA(run, cudaMalloc(&d_y, (size_t)n * N * 4));
    LLM_CUDA(run, cudaMemcpy(d_q, q, (size_t)N * K, cudaMemcpyHostToDevice));
    LLM_CUDA(run, cudaMemcpy(d_s, scale, (size_t)N * 4, cudaMemcpyHostToDevice));
    LLM_CUDA(run, cudaMemcpy(d_x, x16, (size_t)n * K * 2, cudaMemcpyHostToDevice));
    LLM_CUDA(run, cudaMemcpy(d_b, b16, (size_t)N * 2, cudaMemcpyHostToDevice));
    LLM_CUDA(run, cudaMemset(d_y, 0xff, (size_t)n * N * 4)); /* NaN poison */
    if (llmc_linear_q(g, -1, d_x, K, n, K, d_q, d_s, bias ? d_b : NULL, N, d_y, N, f32) != KILN_OK) {
        llm_fail(run, "launch: %s", kiln_last_error());
        goto done;
    }
    LLM_CUDA(run, cudaStreamSynchronize(g->kc.stream));
    LLM_CUDA(run, cudaMemcpy(yh, d_y, (size_t)n * N * (f32 ? 4 : 2), cudaMemcpyDeviceToHost));
    for (size_t i = 0; i < (size_t)n * N; i++) llm_err_add(run, f32 ? yh[i] : lt_to_f32(((const uint16_t *)yh)[i], dt), ref[i]);
    ok = true;
done:
    minimal_free(g);
    cudaFree(d_q);
    cudaFree(d_s);
    cudaFree(d_x);
    cudaFree(d_b);
    cudaFree(d_y);
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

bool llm_fp8_case(llm_run *run, const char *op, llm_params *pr) {
    if (!strcmp(op, "llm.QuantFp8")) return quant_case(run, pr);
    return linear_case(run, pr);
}
