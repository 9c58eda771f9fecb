/* llm_op_gemv_fused.c — the fused decode GEMV case of test_backend_ops's LLM kernels (llm_op_cases.h):
 * llmc_gemv_fused_launch in every configuration against the CPU ops it replaces, on values rounded to
 * the model dtype where the unfused kernels round them: the norm (kiln_llm_norm: LayerNorm with a
 * shift, or RMSNorm with Gemma's 1 + w) of gathered FP32 residual rows, kiln_llm_linear with a bias,
 * then GELU(tanh), kiln_llm_gated (SwiGLU, GeGLU) or the add into the residual.
 *
 * Parameters (llm.GemvFused): K (inputs, a multiple of 8; up to 6144: 96 KB of normed rows at 8
 * rows), N (outputs; gated: N of each half), n (token rows, 1..8), epi (0 store, 1 GELU, 2 SwiGLU,
 * 3 GeGLU, 4 the residual add, whose input rows are plain 16-bit rows instead of the norm), f32 (FP32
 * out; store only), layer (1 LayerNorm, 0 RMSNorm), pdl (1: the odd configurations launched under
 * programmatic dependent launch on sm_90; 0 none), cfg (one configuration; default every one). The
 * residual rows come in a padded stride and gathered (rows 7, 0, 4, 8, 2, 1, 6, 3), the output in a
 * padded stride; half the configurations run on a grid of two SMs (each block loops over row groups).
 * Bound: 1.5e-3 (fp16), 1e-2 (bf16); gated 4e-3, 1.6e-2; FP32 out 5e-4, 2e-3, of the largest
 * |output|; nothing outside the product may be written (residual values, output padding). */
#include "llm_op_cases.h"
#include "llm_test_util.h"

#include "llm/cuda/llm_cuda_internal.h"
#include "llm/llm_cpu_ops.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define FUSED_RES_ROWS 9 /* residual rows the norm prologue may gather from */

static const int32_t fused_rows[LLMC_GEMV_MAX] = {7, 0, 4, 8, 2, 1, 6, 3};

typedef struct fused_shape {
    int K, N, n, epi;
    bool f32, layer, gated, resid;
    int NW, ldx, ldres, ldy; /* weight rows; strides of x, the residual, y */
    size_t res_n;            /* residual floats */
    float eps, w_offset;
} fused_shape;

/* The host side: inputs and the expected outputs (want: the product after its epilogue, [n][NW]). */
typedef struct fused_host {
    uint16_t *w16, *b16, *x16;
    float *res, *nw, *nb, *want;
} fused_host;

static void fused_host_free(fused_host *h) {
    free(h->w16);
    free(h->b16);
    free(h->x16);
    free(h->res);
    free(h->nw);
    free(h->nb);
    free(h->want);
}

static bool fused_host_make(llm_run *run, const fused_shape *s, fused_host *h) {
    const kiln_dtype dt = run->dt;
    const int K = s->K, n = s->n, NW = s->NW;
    h->w16 = malloc((size_t)NW * K * 2);
    h->b16 = malloc((size_t)NW * 2);
    h->x16 = malloc((size_t)n * s->ldx * 2);
    h->res = malloc(s->res_n * 4);
    h->nw = malloc((size_t)K * 4);
    h->nb = malloc((size_t)K * 4);
    h->want = malloc((size_t)n * NW * 4);
    float *wf = malloc((size_t)NW * K * 4), *bf = malloc((size_t)NW * 4), *xf = malloc((size_t)n * K * 4);
    bool ok = false;
    if (!h->w16 || !h->b16 || !h->x16 || !h->res || !h->nw || !h->nb || !h->want || !wf || !bf || !xf) {
        llm_fail(run, "out of memory");
        goto done;
    }
    lt_fill16(&run->rng, h->w16, wf, (size_t)NW * K, 1.0f, dt);
    lt_fill16(&run->rng, h->b16, bf, (size_t)NW, 1.0f, dt);
    lt_fill16(&run->rng, h->x16, NULL, (size_t)n * s->ldx, 1.0f, dt);
    for (size_t i = 0; i < s->res_n; i++) h->res[i] = 3.0f * lt_urand(&run->rng) + 0.5f;
    for (int i = 0; i < K; i++) {
        h->nw[i] = 1.0f + 0.5f * lt_urand(&run->rng);
        h->nb[i] = 0.5f * lt_urand(&run->rng);
    }
    /* the product's input rows (the normed rows rounded to dtype, as the unfused norm stores them) */
    for (int t = 0; t < n; t++) {
        float *xr = xf + (size_t)t * K;
        if (s->resid) {
            for (int i = 0; i < K; i++) xr[i] = lt_to_f32(h->x16[(size_t)t * s->ldx + i], dt);
        } else {
            kiln_llm_norm(h->res + (size_t)fused_rows[t] * s->ldres, 1, K, h->nw, s->w_offset, s->layer ? h->nb : NULL,
                          s->eps, xr);
            for (int i = 0; i < K; i++) xr[i] = lt_to_f32(lt_from_f32(xr[i], dt), dt);
        }
    }
    kiln_llm_linear(xf, K, n, K, wf, bf, NW, h->want, NW, 0);
    if (!s->f32)
        for (size_t i = 0; i < (size_t)n * NW; i++) h->want[i] = lt_to_f32(lt_from_f32(h->want[i], dt), dt);
    if (s->epi == LLMC_EPI_GELU) kiln_llm_gelu_tanh(h->want, (size_t)n * NW);
    if (s->gated) kiln_llm_gated(h->want, n, s->N, s->epi == LLMC_EPI_GEGLU ? KILN_GATE_GELU_TANH : KILN_GATE_SILU);
    ok = true;
done:
    free(wf);
    free(bf);
    free(xf);
    return ok;
}

/* Runs every configuration (or the one of cfg) and adds its outputs to the case's error; returns false
 * on a failed launch or CUDA call. */
static bool fused_gpu(llm_run *run, const fused_shape *s, const fused_host *h, int only, bool pdl) {
    const kiln_dtype dt = run->dt;
    const int K = s->K, n = s->n, NW = s->NW;
    void *d_w = NULL, *d_b = NULL, *d_x = NULL, *d_y = NULL;
    float *d_res = NULL, *d_nw = NULL, *d_nb = NULL;
    int32_t *d_rows = NULL;
    cudaStream_t stream = NULL;
    float *yh = malloc((size_t)n * s->ldy * 4), *resg = malloc(s->res_n * 4);
    bool ok = false;
    if (!yh || !resg) {
        llm_fail(run, "out of memory");
        goto done;
    }
    LLM_CUDA(run, cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    LLM_CUDA(run, cudaMalloc(&d_w, (size_t)NW * K * 2));
    LLM_CUDA(run, cudaMalloc(&d_b, (size_t)NW * 2));
    LLM_CUDA(run, cudaMalloc(&d_x, (size_t)n * s->ldx * 2));
    LLM_CUDA(run, cudaMalloc(&d_y, (size_t)n * s->ldy * 4));
    LLM_CUDA(run, cudaMalloc((void **)&d_res, s->res_n * 4));
    LLM_CUDA(run, cudaMalloc((void **)&d_nw, (size_t)K * 4));
    LLM_CUDA(run, cudaMalloc((void **)&d_nb, (size_t)K * 4));
    LLM_CUDA(run, cudaMalloc((void **)&d_rows, sizeof fused_rows));
    LLM_CUDA(run, cudaMemcpy(d_w, h->w16, (size_t)NW * K * 2, cudaMemcpyHostToDevice));
    LLM_CUDA(run, cudaMemcpy(d_b, h->b16, (size_t)NW * 2, cudaMemcpyHostToDevice));
    LLM_CUDA(run, cudaMemcpy(d_x, h->x16, (size_t)n * s->ldx * 2, cudaMemcpyHostToDevice));
    LLM_CUDA(run, cudaMemcpy(d_nw, h->nw, (size_t)K * 4, cudaMemcpyHostToDevice));
    LLM_CUDA(run, cudaMemcpy(d_nb, h->nb, (size_t)K * 4, cudaMemcpyHostToDevice));
    LLM_CUDA(run, cudaMemcpy(d_rows, fused_rows, sizeof fused_rows, cudaMemcpyHostToDevice));
    for (int cfg = only < 0 ? 0 : only; cfg < (only < 0 ? LLMC_GEMV_CONFIGS : only + 1); cfg++) {
        LLM_CUDA(run, cudaMemcpy(d_res, h->res, s->res_n * 4, cudaMemcpyHostToDevice));
        LLM_CUDA(run, cudaMemset(d_y, 0xff, (size_t)n * s->ldy * 4)); /* NaN poison */
        llmc_gemv_fused p;
        memset(&p, 0, sizeof p);
        p.dtype = dt;
        p.cfg = cfg;
        p.n = n;
        p.K = K;
        p.N = s->N;
        p.prologue = s->resid ? LLMC_PRO_INPUT : LLMC_PRO_NORM;
        p.epilogue = s->epi;
        p.x = d_x;
        p.ldx = s->ldx;
        p.res = d_res;
        p.ldres = s->ldres;
        p.rows = d_rows;
        p.norm_w = d_nw;
        p.norm_b = s->layer ? d_nb : NULL;
        p.norm_w_offset = s->w_offset;
        p.eps = s->eps;
        p.w = d_w;
        p.bias = d_b;
        p.y = d_y;
        p.ldy = s->ldy;
        p.out_f32 = s->f32;
        p.pdl = pdl && cfg % 2 == 1;    /* the attribute is harmless with nothing before */
        p.sm_count = cfg < 4 ? 132 : 2; /* a grid of few blocks: each loops over row groups */
        if (llmc_gemv_fused_launch(&p, stream) != KILN_OK) {
            llm_fail(run, "launch (%s%s): %s", llmc_gemv_config_name(cfg), p.pdl ? ", pdl" : "", kiln_last_error());
            goto done;
        }
        LLM_CUDA(run, cudaStreamSynchronize(stream));
        LLM_CUDA(run, cudaMemcpy(yh, d_y, (size_t)n * s->ldy * (s->f32 ? 4 : 2), cudaMemcpyDeviceToHost));
        LLM_CUDA(run, cudaMemcpy(resg, d_res, s->res_n * 4, cudaMemcpyDeviceToHost));
        for (int t = 0; t < n; t++)
            for (int j = 0; j < s->N; j++) {
                const size_t o = (size_t)t * s->ldy + j;
                const double prod = h->want[(size_t)t * NW + j];
                if (s->resid)
                    llm_err_add(run, resg[(size_t)t * s->ldres + j], h->res[(size_t)t * s->ldres + j] + prod);
                else llm_err_add(run, s->f32 ? yh[o] : lt_to_f32(((const uint16_t *)yh)[o], dt), prod);
            }
        for (size_t i = 0; i < s->res_n; i++) /* residual values no product writes */
            run->wrong += !(s->resid && (int)(i % s->ldres) < s->N) && resg[i] != h->res[i];
        if (!s->resid) /* the poison stays past N in each output row */
            for (int t = 0; t < n; t++)
                for (int j = s->N; j < s->ldy && j < s->N + 4; j++)
                    run->wrong += s->f32 ? !isnan(yh[(size_t)t * s->ldy + j])
                                         : ((const uint16_t *)yh)[(size_t)t * s->ldy + j] != 0xffff;
        if (run->wrong) {
            llm_fail(run, "configuration %s%s: %d value(s) outside the product changed", llmc_gemv_config_name(cfg),
                     p.pdl ? " (pdl)" : "", run->wrong);
            goto done;
        }
    }
    ok = true;
done:
    cudaFree(d_w);
    cudaFree(d_b);
    cudaFree(d_x);
    cudaFree(d_y);
    cudaFree(d_res);
    cudaFree(d_nw);
    cudaFree(d_nb);
    cudaFree(d_rows);
    if (stream) cudaStreamDestroy(stream);
    free(yh);
    free(resg);
    return ok;
}

bool llm_gemv_fused_case(llm_run *run, llm_params *pr) {
    const kiln_dtype dt = run->dt;
    fused_shape s;
    memset(&s, 0, sizeof s);
    s.K = (int)llm_param(pr, "K", 64);
    s.N = (int)llm_param(pr, "N", 8);
    s.n = (int)llm_param(pr, "n", 1);
    s.epi = (int)llm_param(pr, "epi", LLMC_EPI_STORE);
    s.f32 = llm_param(pr, "f32", 0) != 0;
    s.layer = llm_param(pr, "layer", 0) != 0;
    const bool pdl = llm_param(pr, "pdl", 1) != 0;
    const int only = (int)llm_param(pr, "cfg", -1);
    if (s.K < 8 || s.K % 8 || s.N < 1 || s.n < 1 || s.n > LLMC_GEMV_MAX || s.epi < LLMC_EPI_STORE ||
        s.epi > LLMC_EPI_RESIDUAL || (s.f32 && s.epi != LLMC_EPI_STORE) || only < -1 || only >= LLMC_GEMV_CONFIGS)
        return llm_fail(run, "bad case: K a multiple of 8, N >= 1, n 1..%d, epi 0..%d (f32 with 0 alone), cfg -1..%d",
                        LLMC_GEMV_MAX, (int)LLMC_EPI_RESIDUAL, LLMC_GEMV_CONFIGS - 1);
    s.gated = s.epi == LLMC_EPI_SWIGLU || s.epi == LLMC_EPI_GEGLU;
    s.resid = s.epi == LLMC_EPI_RESIDUAL;
    s.NW = s.gated ? 2 * s.N : s.N;
    s.ldx = s.K + 8;
    s.ldres = s.resid ? s.N + 3 : s.K;
    s.ldy = s.NW + 5;
    s.res_n = (size_t)(s.resid ? s.n : FUSED_RES_ROWS) * s.ldres;
    s.eps = 1e-5f;
    s.w_offset = s.layer ? 0.0f : 1.0f;
    run->tol = s.f32 ? (dt == KILN_F16 ? 5e-4 : 2e-3)
               : s.gated ? (dt == KILN_F16 ? 4e-3 : 1.6e-2) : (dt == KILN_F16 ? 1.5e-3 : 1e-2);
    bool use_pdl = false;
    if (run->on_gpu && pdl) {
        int cc_major = 0;
        const cudaError_t e = cudaDeviceGetAttribute(&cc_major, cudaDevAttrComputeCapabilityMajor, run->device);
        if (e != cudaSuccess) return llm_cuda_fail(run, "cudaDeviceGetAttribute", (int)e);
        use_pdl = cc_major >= 9; /* programmatic dependent launch: sm_90 */
    }
    fused_host h;
    memset(&h, 0, sizeof h);
    const bool ok = fused_host_make(run, &s, &h) && (!run->on_gpu || fused_gpu(run, &s, &h, only, use_pdl));
    fused_host_free(&h);
    return ok;
}
