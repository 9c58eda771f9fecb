/* llm_op_w8a8.c — the W8A8 LLM kernel cases of test_backend_ops (llm_op_cases.h), each against the CPU
 * W8A8 product on the same (16-bit, widened) activations, act_scale 1 / 127 of inputs in [-1.2, 1.2)
 * (some saturate):
 *  - llm.QuantizeAct (llmc_quantize_act_launch) vs kiln_llm_quantize_act: n, K; every code equal.
 *  - llm.GemvW8A8 (llmc_gemv_w8a8_launch, dp4a) vs kiln_llm_gemm_w8a8: K (a multiple of 16), N, n (token
 *    rows, up to 8), bias, f32 (FP32 out): the int32 sums are exact on both sides, so only the output's
 *    rounding differs: 1e-5 (FP32 out), 1.5e-3 (fp16), 1e-2 (bf16) of the largest |reference|.
 *  - llm.ImmaW8A8 (llmc_imma_w8a8_launch, cuBLASLt IMMA + the dequantizing epilogue): K and N multiples
 *    of 4, any n, bias; the same bounds.
 * The weights are kiln_llm_quantize_rows of random fp32 values. */
#include "llm_op_cases.h"
#include "llm_test_util.h"

#include "llm/cuda/llm_cuda_w8a8.h"
#include "llm/llm_gemm_w8a8.h"
#include "llm/llm_gemv_q8.h"

#include <stdlib.h>
#include <string.h>

#define ACT_SCALE (1.0f / 127.0f)
#define IMMA_WS ((size_t)32 << 20)

/* The arrays of one case on the host and the device. */
typedef struct w8a8_case {
    int n, K, N;
    bool bias, f32;
    int8_t *q, *xq;
    float *scale, *xf, *bf, *ref, *yh;
    uint16_t *x16, *b16;
    void *d_q, *d_s, *d_x, *d_xq, *d_b, *d_y, *d_D, *d_ws;
} w8a8_case;

static void case_free(w8a8_case *c) {
    void *dev[] = {c->d_q, c->d_s, c->d_x, c->d_xq, c->d_b, c->d_y, c->d_D, c->d_ws};
    for (size_t i = 0; i < sizeof dev / sizeof *dev; i++) cudaFree(dev[i]);
    void *host[] = {c->q, c->xq, c->scale, c->xf, c->bf, c->ref, c->yh, c->x16, c->b16};
    for (size_t i = 0; i < sizeof host / sizeof *host; i++) free(host[i]);
}

/* Random weights, activations and bias, and the CPU reference in c->ref. */
static bool case_make(llm_run *run, w8a8_case *c) {
    const size_t nK = (size_t)c->n * c->K, NK = (size_t)c->N * c->K, nN = (size_t)c->n * c->N;
    c->q = malloc(NK);
    c->xq = malloc(nK);
    c->scale = malloc((size_t)c->N * 4);
    c->xf = malloc(nK * 4);
    c->bf = malloc((size_t)c->N * 4);
    c->ref = malloc(nN * 4);
    c->yh = malloc(nN * 4);
    c->x16 = malloc(nK * 2);
    c->b16 = malloc((size_t)c->N * 2);
    float *w = malloc(NK * 4);
    int16_t *scratch = malloc(KILN_LLM_W8A8_SCRATCH(c->n, c->K) * sizeof *scratch);
    if (!c->q || !c->xq || !c->scale || !c->xf || !c->bf || !c->ref || !c->yh || !c->x16 || !c->b16 || !w || !scratch) {
        free(w);
        free(scratch);
        return llm_fail(run, "out of memory");
    }
    for (size_t i = 0; i < NK; i++) w[i] = lt_urand(&run->rng);
    kiln_llm_quantize_rows(w, c->N, c->K, c->q, c->scale);
    free(w);
    lt_fill16(&run->rng, c->x16, c->xf, nK, 1.2f, run->dt);
    lt_fill16(&run->rng, c->b16, c->bf, (size_t)c->N, 1.0f, run->dt);
    kiln_llm_quantize_act(c->xf, (int64_t)nK, ACT_SCALE, c->xq);
    const kiln_llm_gemv_args a = {.x = c->xf, .ldx = c->K, .n = c->n, .in = c->K, .w = c->q, .format = KILN_LLM_W_W8A8,
                                  .scale = c->scale, .act_scale = ACT_SCALE, .bias = c->bias ? c->bf : NULL,
                                  .out = c->N, .y = c->ref, .ldy = c->N};
    kiln_llm_gemm_w8a8(&a, scratch);
    free(scratch);
    return true;
}

/* The device copies of the weights, quantized activations and bias; y poisoned with NaNs. */
static bool case_upload(llm_run *run, w8a8_case *c) {
    const size_t nK = (size_t)c->n * c->K, NK = (size_t)c->N * c->K, nN = (size_t)c->n * c->N;
    LLM_CUDA(run, cudaMalloc(&c->d_q, NK));
    LLM_CUDA(run, cudaMalloc(&c->d_s, (size_t)c->N * 4));
    LLM_CUDA(run, cudaMalloc(&c->d_xq, nK));
    LLM_CUDA(run, cudaMalloc(&c->d_b, (size_t)c->N * 2));
    LLM_CUDA(run, cudaMalloc(&c->d_y, nN * 4));
    LLM_CUDA(run, cudaMemcpy(c->d_q, c->q, NK, cudaMemcpyHostToDevice));
    LLM_CUDA(run, cudaMemcpy(c->d_s, c->scale, (size_t)c->N * 4, cudaMemcpyHostToDevice));
    LLM_CUDA(run, cudaMemcpy(c->d_xq, c->xq, nK, cudaMemcpyHostToDevice));
    LLM_CUDA(run, cudaMemcpy(c->d_b, c->b16, (size_t)c->N * 2, cudaMemcpyHostToDevice));
    LLM_CUDA(run, cudaMemset(c->d_y, 0xff, nN * 4));
    return true;
done:
    return false;
}

/* y back from the device, compared with the reference. */
static bool case_check(llm_run *run, w8a8_case *c) {
    const size_t nN = (size_t)c->n * c->N;
    LLM_CUDA(run, cudaDeviceSynchronize());
    LLM_CUDA(run, cudaMemcpy(c->yh, c->d_y, nN * (c->f32 ? 4 : 2), cudaMemcpyDeviceToHost));
    for (size_t i = 0; i < nN; i++)
        llm_err_add(run, c->f32 ? c->yh[i] : lt_to_f32(((const uint16_t *)c->yh)[i], run->dt), c->ref[i]);
    return true;
done:
    return false;
}

/* The GPU's codes of c's activations (c->d_x, c->d_xq made here), compared with the CPU's one by one. */
static bool quantize_check(llm_run *run, w8a8_case *c) {
    const size_t nK = (size_t)c->n * c->K;
    bool ok = false;
    int8_t *got = malloc(nK);
    if (!got) return llm_fail(run, "out of memory");
    LLM_CUDA(run, cudaMalloc(&c->d_x, nK * 2));
    LLM_CUDA(run, cudaMalloc(&c->d_xq, nK));
    LLM_CUDA(run, cudaMemcpy(c->d_x, c->x16, nK * 2, cudaMemcpyHostToDevice));
    if (llmc_quantize_act_launch(run->dt, NULL, c->d_x, c->K, c->n, c->K, ACT_SCALE, c->d_xq) != KILN_OK) {
        llm_fail(run, "launch: %s", kiln_last_error());
        goto done;
    }
    LLM_CUDA(run, cudaDeviceSynchronize());
    LLM_CUDA(run, cudaMemcpy(got, c->d_xq, nK, cudaMemcpyDeviceToHost));
    for (size_t i = 0; i < nK; i++) {
        run->wrong += got[i] != c->xq[i];
        llm_err_add(run, got[i], c->xq[i]);
    }
    ok = run->wrong == 0 || llm_fail(run, "%d of %zu codes differ from the CPU's", run->wrong, nK);
done:
    free(got);
    return ok;
}

static bool quantize_case(llm_run *run, llm_params *pr) {
    w8a8_case c = {.n = (int)llm_param(pr, "n", 4), .K = (int)llm_param(pr, "K", 64), .N = 4};
    if (c.n < 1 || c.K < 4) return llm_fail(run, "bad case: n >= 1, K >= 4");
    bool ok = case_make(run, &c);
    if (ok && run->on_gpu) ok = quantize_check(run, &c);
    case_free(&c);
    return ok;
}

static bool gemv_case(llm_run *run, llm_params *pr, bool imma) {
    w8a8_case c = {.n = (int)llm_param(pr, "n", 1), .K = (int)llm_param(pr, "K", 64), .N = (int)llm_param(pr, "N", 8),
                   .bias = llm_param(pr, "bias", 0) != 0, .f32 = llm_param(pr, "f32", 0) != 0};
    run->tol = c.f32 ? 1e-5 : run->dt == KILN_F16 ? 1.5e-3 : 1e-2;
    if (imma ? c.K % 4 || c.N % 4 || c.n < 1 : c.K < 16 || c.K % 16 || c.N < 1 || c.n < 1 || c.n > LLMC_GEMV_MAX)
        return llm_fail(run, imma ? "bad case: K and N multiples of 4, n >= 1"
                                  : "bad case: K a multiple of 16, N >= 1, n 1..8");
    bool ok = case_make(run, &c);
    if (ok && run->on_gpu && (ok = case_upload(run, &c))) {
        const void *bias = c.bias ? c.d_b : NULL;
        kiln_status s;
        if (imma) {
            cublasLtHandle_t lt = NULL;
            ok = cublasLtCreate(&lt) == CUBLAS_STATUS_SUCCESS && cudaMalloc(&c.d_ws, IMMA_WS) == cudaSuccess &&
                 cudaMalloc(&c.d_D, (size_t)c.n * c.N * 4) == cudaSuccess;
            s = ok ? llmc_imma_w8a8_launch(run->dt, lt, NULL, c.d_ws, IMMA_WS, c.d_xq, c.n, c.K, c.d_q, c.d_s, ACT_SCALE,
                                           bias, c.N, c.d_D, c.d_y, c.N, c.f32)
                   : KILN_ERR_BACKEND;
            if (lt) cublasLtDestroy(lt);
        } else {
            s = llmc_gemv_w8a8_launch(run->dt, NULL, c.d_xq, c.n, c.K, c.d_q, c.d_s, ACT_SCALE, bias, c.N, c.d_y, c.N,
                                      c.f32);
        }
        if (s != KILN_OK) ok = llm_fail(run, "launch: %s", ok ? kiln_last_error() : "cuBLASLt handle or buffers");
        ok = ok && case_check(run, &c);
    }
    case_free(&c);
    return ok;
}

bool llm_w8a8_case(llm_run *run, const char *op, llm_params *pr) {
    if (!strcmp(op, "llm.QuantizeAct")) return quantize_case(run, pr);
    return gemv_case(run, pr, !strcmp(op, "llm.ImmaW8A8"));
}
