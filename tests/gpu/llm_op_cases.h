/* llm_op_cases.h — the LLM kernel cases of test_backend_ops's table (op_cases.c, ops named "llm.*"):
 * each kernel launcher of src/llm/cuda/ alone on plain device arrays against its CPU reference
 * (llm_cpu_ops.c, the sampler against sampler.c). The entries carry their shape in the inputs field
 * as name=number tokens (op_cases.h); llm_case_run runs one in one precision and says how it went.
 *
 * The GPU and the CPU see the same 16-bit values (the CPU in FP32); outputs start as a NaN poison, so
 * an element never written shows. Each case measures the normalised MSE the table reports for every
 * case (checked against the precision's bound) and the largest error relative to the largest
 * |reference| (checked against the kernel's own tighter bound, given in the case's line). */
#ifndef KILN_TEST_LLM_OP_CASES_H
#define KILN_TEST_LLM_OP_CASES_H

#include "kiln/kiln.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Whether op names an LLM kernel case ("llm." and a kernel). */
bool llm_case_op(const char *op);
/* Whether an LLM case of op runs in engine precision p: the kernels on 16-bit data in f16 and bf16,
 * argmax and the sampler (FP32 logits) in f32 alone. */
bool llm_case_runs_in(const char *op, kiln_precision p);

typedef enum { LLM_CASE_OK, LLM_CASE_FAIL, LLM_CASE_UNSUPPORTED } llm_case_status;

typedef struct llm_case_result {
    llm_case_status status;
    bool restart; /* a CUDA call failed: the process's context may be unusable */
    double nmse;  /* -1 when the outputs are compared exactly (token ids, refusals) */
    char msg[512];
} llm_case_result;

/* Runs LLM case (op, params) in precision p, seeded by seed: on GPU device `device` against the CPU
 * reference when on_gpu, else the CPU reference alone (checks the entry: it parses and its reference
 * runs). nmse_tol bounds the normalised MSE. r->msg says what failed, or for a passing case its error
 * against the kernel's bound. */
void llm_case_run(const char *op, const char *params, kiln_precision p, uint64_t seed, int device, bool on_gpu,
                  double nmse_tol, llm_case_result *r);

/* ---- shared by the files of the LLM cases (llm_op_cases.c, llm_op_attention.c) ---- */

#define LLM_MAX_PARAMS 12

/* The name=number tokens of a case, and which of them a kernel read (a name no kernel reads is a
 * mistake in the table). */
typedef struct llm_params {
    int n;
    char name[LLM_MAX_PARAMS][16];
    double value[LLM_MAX_PARAMS];
    bool used[LLM_MAX_PARAMS];
} llm_params;

/* The value of parameter name, dflt when the case gives none. */
double llm_param(llm_params *pr, const char *name, double dflt);

/* One case's run: its inputs' random stream, the device or none, the error so far. */
typedef struct llm_run {
    uint32_t rng;
    bool on_gpu;
    int device;    /* the GPU (current after llm_case_run's cudaSetDevice) */
    kiln_dtype dt; /* KILN_F16 or KILN_BF16 (the f32 cases: unused) */
    double max_want, max_diff, sq_diff, sq_want;
    int wrong;  /* elements that must match exactly and did not */
    double tol; /* the kernel's bound on max_diff / max_want */
    llm_case_result *r;
} llm_run;

/* Adds one (got, want) pair to the error (a NaN difference counts as infinite). */
void llm_err_add(llm_run *run, double got, double want);
/* One configuration's output of a case that runs several: waits for the device, copies count values of
 * d_y (FP32 when f32, else run->dt) into yh and adds them against ref; the run keeps its largest
 * difference over every configuration, and *worst / *worst_cfg say which configuration made it (cfg
 * when its difference is the largest so far). False (the case failed) on a CUDA error. */
bool llm_config_err(llm_run *run, const void *d_y, void *yh, size_t count, bool f32, const float *ref, int cfg,
                    double *worst, int *worst_cfg);
/* Fails the case with a message (printf-style); returns false. */
bool llm_fail(llm_run *run, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Fails the case for a CUDA error (asking for a fresh process); returns false. */
bool llm_cuda_fail(llm_run *run, const char *call, int err);

/* A CUDA runtime call inside a case function: a failure fails the case and jumps to label done. */
#define LLM_CUDA(run, call)                                                                        \
    do {                                                                                           \
        int e_ = (int)(call);                                                                      \
        if (e_ != 0) {                                                                             \
            llm_cuda_fail(run, #call, e_);                                                         \
            goto done;                                                                             \
        }                                                                                          \
    } while (0)

/* An E4M3 code from 16 random bits: any but the NaNs 0x7f and 0xff (those become +-448). */
uint8_t llm_random_e4m3(uint16_t bits);

/* The attention kernels (llm_op_attention.c): llm.PrefillAttention, llm.DecodeAttention. */
bool llm_attention_case(llm_run *run, const char *op, llm_params *pr);
/* The fused decode GEMV (llm_op_gemv_fused.c): llm.GemvFused. */
bool llm_gemv_fused_case(llm_run *run, llm_params *pr);
/* The weight-only quantized kernels (llm_op_quant.c): llm.GemvQ8, llm.GemmQ8, llm.DequantQ8. */
bool llm_quant_case(llm_run *run, const char *op, llm_params *pr);
/* llmc_gemm_q_launch of wbits weights on the default stream, split over K into ws when split (run 1 of a
 * case) and the shape allows it, in one pass otherwise (run 0); false on a refused launch. */
bool llm_gemm_q_launch_case(kiln_dtype dt, int wbits, int split, const void *x, int K, int n, const void *w,
                            const float *scale, const float *zero, const void *bias, int N, void *y, bool f32,
                            float *ws);
/* "one pass over K" or "split over K": run split of llm_gemm_q_launch_case. */
const char *llm_gemm_q_case_name(int split);
/* The W8A8 kernels (llm_op_w8a8.c): llm.QuantizeAct, llm.GemvW8A8, llm.ImmaW8A8. */
bool llm_w8a8_case(llm_run *run, const char *op, llm_params *pr);
/* The weight-only INT4 kernels (llm_op_quant4.c): llm.GemvQ4, llm.GemmQ4, llm.DequantQ4. */
bool llm_quant4_case(llm_run *run, const char *op, llm_params *pr);
/* The FP8 kernels (llm_op_fp8.c): llm.QuantFp8, llm.LinearFp8. */
bool llm_fp8_case(llm_run *run, const char *op, llm_params *pr);

#endif
