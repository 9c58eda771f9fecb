/* llm_op_cases.c — the LLM kernel cases of test_backend_ops (llm_op_cases.h): parameters, errors and
 * the kernels other than attention (llm_op_attention.c).
 *
 *  - llm.RopeKvWrite (llmc_rope_kv_launch) vs kiln_llm_rope + kiln_llm_kv_write: hd, heads, kv,
 *    rotate (0: GPT-2's none), rot_dim (partial RoPE; default hd), tokens (the first 1..24 of three
 *    sequences' tokens at positions on block edges; default all 24: a decode step of at most 8
 *    tokens runs a head a block, larger steps four); every q value and every cache slot (written or not) compared: 2e-3 (fp16), 1.6e-2 (bf16)
 *    of the largest |value|; the values exact. fp8 (1, with rotate=0): into an FP8 (E4M3) cache with a
 *    key and a value scale per KV head: every code exactly kiln_kv_write's (kiln_f32_to_e4m3 of the
 *    16-bit k or v over the head's scale), every other slot kept.
 *  - llm.AddNorm (kiln_cuda_norm_rows in the residual form the LLM forward uses) vs kiln_llm_norm: d,
 *    rows, layer (LayerNorm, else RMSNorm), residual (a 16-bit delta added first), store (the sum
 *    written back to the FP32 residual), gather (output rows read residual rows 4, 0, 5, 2, 1):
 *    4e-3 (fp16), 1.6e-2 (bf16); the residual exact.
 *  - llm.Gemv (llmc_gemv_launch) vs kiln_llm_linear: K, N, n (token rows), bias, f32 (FP32 out), cfg
 *    (one configuration; default every one): 1.5e-3 (fp16), 1e-2 (bf16), 1e-4 (FP32 out).
 *  - llm.Activation (llmc_activation_launch) vs kiln_llm_gelu_tanh / kiln_llm_gated: ff, rows, gated
 *    (rows [gate | up]), act (1: GeGLU, else SwiGLU); ff a multiple of 8 and rows x ff >= 2048 (the
 *    launcher's threshold for one SM) take the 16-byte path, the others the scalar one:
 *    2e-3 (fp16), 1.6e-2 (bf16) of the largest |value|; a gated row's up half unchanged.
 *  - llm.Argmax (llmc_argmax_launch) vs a CPU argmax, vocab: rows random, a tied maximum, NaN and
 *    -inf around a maximum, all NaN; the ids exact (ties to the lowest id, NaN never wins).
 *  - llm.Sample (kiln_llm_cuda_sample) vs kiln_sample_next, vocab, temp, top_k, top_p, min_p, pen
 *    (1: repetition, frequency and presence penalties): four rows, seeds 1000..1003; the same tokens.
 *    mixed=1: rows 1..3 of the batch take top-k, top-p and min-p with penalties instead.
 *  - llm.GemvFused: llm_op_gemv_fused.c.
 *  - llm.GemvQ8, llm.GemmQ8, llm.DequantQ8: the weight-only INT8 kernels (llm_op_quant.c).
 *  - llm.QuantizeAct, llm.GemvW8A8, llm.ImmaW8A8: the W8A8 kernels (llm_op_w8a8.c).
 *  - llm.GemvQ4, llm.GemmQ4, llm.DequantQ4: the weight-only INT4 kernels (llm_op_quant4.c).
 *  - llm.QuantFp8, llm.LinearFp8: the FP8 kernels (llm_op_fp8.c). */
#include "llm_op_cases.h"
#include "llm_test_util.h"

#include "llm/cuda/llm_cuda_internal.h"
#include "llm/kv_cache.h"
#include "llm/llm_cpu_ops.h"
#include "llm/sampler.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BS 16 /* tokens per cache block */

static const char *const LLM_OPS[] = {"llm.PrefillAttention", "llm.DecodeAttention", "llm.RopeKvWrite", "llm.AddNorm",
                                      "llm.Gemv",             "llm.GemvFused",       "llm.Argmax",     "llm.Sample",
                                      "llm.GemvQ8",           "llm.DequantQ8",       "llm.QuantizeAct", "llm.GemvW8A8",
                                      "llm.ImmaW8A8",         "llm.GemvQ4",          "llm.DequantQ4",   "llm.QuantFp8",
                                      "llm.LinearFp8",        "llm.GemmQ8",          "llm.GemmQ4",      "llm.Activation"};

bool llm_case_op(const char *op) {
    for (size_t i = 0; i < sizeof LLM_OPS / sizeof *LLM_OPS; i++)
        if (!strcmp(op, LLM_OPS[i])) return true;
    return false;
}

bool llm_case_runs_in(const char *op, kiln_precision p) {
    const bool fp32_logits = !strcmp(op, "llm.Argmax") || !strcmp(op, "llm.Sample");
    return fp32_logits == (p == KILN_PRECISION_FP32);
}

/* ---------------------------------------------------------------- parameters and errors */

static bool parse_params(const char *text, llm_params *pr, char *err, size_t cap) {
    memset(pr, 0, sizeof *pr);
    const char *p = text ? text : "";
    while (*p) {
        if (*p == ' ') {
            p++;
            continue;
        }
        const char *eq = strchr(p, '=');
        if (!eq || eq == p || eq - p >= (long)sizeof pr->name[0] || pr->n == LLM_MAX_PARAMS) {
            snprintf(err, cap, "bad case: '%s' is not name=number tokens (at most %d)", text, LLM_MAX_PARAMS);
            return false;
        }
        char *end;
        const double v = strtod(eq + 1, &end);
        if (end == eq + 1 || (*end && *end != ' ')) {
            snprintf(err, cap, "bad case: '%.*s' has no number", (int)(eq - p), p);
            return false;
        }
        memcpy(pr->name[pr->n], p, (size_t)(eq - p));
        pr->value[pr->n++] = v;
        p = end;
    }
    return true;
}

double llm_param(llm_params *pr, const char *name, double dflt) {
    for (int i = 0; i < pr->n; i++)
        if (!strcmp(pr->name[i], name)) {
            pr->used[i] = true;
            return pr->value[i];
        }
    return dflt;
}

void llm_err_add(llm_run *run, double got, double want) {
    run->max_want = fmax(run->max_want, fabs(want));
    const double d = fabs(got - want);
    run->max_diff = isnan(d) ? INFINITY : fmax(run->max_diff, d);
    run->sq_diff += isnan(d) ? INFINITY : d * d;
    run->sq_want += want * want;
}

bool llm_config_err(llm_run *run, const void *d_y, void *yh, size_t count, bool f32, const float *ref, int cfg,
                    double *worst, int *worst_cfg) {
    LLM_CUDA(run, cudaDeviceSynchronize());
    LLM_CUDA(run, cudaMemcpy(yh, d_y, count * (f32 ? 4 : 2), cudaMemcpyDeviceToHost));
    const double before = run->max_diff;
    run->max_diff = 0;
    for (size_t i = 0; i < count; i++)
        llm_err_add(run, f32 ? ((const float *)yh)[i] : lt_to_f32(((const uint16_t *)yh)[i], run->dt), ref[i]);
    if (run->max_diff > *worst) *worst = run->max_diff, *worst_cfg = cfg;
    run->max_diff = fmax(run->max_diff, before);
    return true;
done:
    return false;
}

bool llm_fail(llm_run *run, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(run->r->msg, sizeof run->r->msg, fmt, ap);
    va_end(ap);
    run->r->status = LLM_CASE_FAIL;
    return false;
}

bool llm_cuda_fail(llm_run *run, const char *call, int err) {
    run->r->restart = true;
    return llm_fail(run, "%s: %s", call, cudaGetErrorString((cudaError_t)err));
}

uint8_t llm_random_e4m3(uint16_t bits) {
    const uint8_t c = (uint8_t)(bits >> 3);
    return (c & 0x7f) == 0x7f ? (uint8_t)(c - 1) : c;
}

/* ---------------------------------------------------------------- RoPE + KV write */

#define ROPE_SEQS 3
#define ROPE_TABLE 8                                            /* blocks per sequence */
#define ROPE_MAX_KV 16                                          /* KV heads of an FP8 case (its scales) */
static const int rope_pos[] = {0, 15, 16, 17, 31, 32, 47, 100}; /* positions, block edges among them */

static bool rope_case(llm_run *run, llm_params *pr) {
    const kiln_dtype dt = run->dt;
    const int hd = (int)llm_param(pr, "hd", 64), n_head = (int)llm_param(pr, "heads", 2);
    const int n_kv = (int)llm_param(pr, "kv", n_head), rot_dim = (int)llm_param(pr, "rot_dim", hd);
    const bool rotate = llm_param(pr, "rotate", 1) != 0, fp8 = llm_param(pr, "fp8", 0) != 0;
    const int n_pos = (int)(sizeof rope_pos / sizeof rope_pos[0]);
    const int n_tok = (int)llm_param(pr, "tokens", ROPE_SEQS * n_pos);
    const int ldq = (n_head + 2 * n_kv) * hd, half = rot_dim / 2, n_blocks = ROPE_SEQS * ROPE_TABLE;
    run->tol = dt == KILN_F16 ? 2e-3 : 1.6e-2;
    if (hd < 2 || hd % 2 || n_head < 1 || n_kv < 1 || rot_dim < 2 || rot_dim % 2 || rot_dim > hd ||
        (fp8 && (rotate || n_kv > ROPE_MAX_KV)) || n_tok < 1 || n_tok > ROPE_SEQS * n_pos)
        return llm_fail(run, "bad case: hd and rot_dim even, rot_dim <= hd, heads and kv >= 1; fp8 with rotate=0 "
                             "and kv <= %d; tokens 1..%d", ROPE_MAX_KV, ROPE_SEQS * n_pos);
    float scales[2 * ROPE_MAX_KV]; /* FP8: [2][n_kv] key then value scales */
    for (int i = 0; i < 2 * n_kv && fp8; i++) scales[i] = (0.25f + (float)i) / 448.0f * 3.0f;
    kiln_kv_cache_config kc = {.n_layer = 1, .n_kv_head = n_kv, .head_dim = hd, .block_size = BS, .n_blocks = n_blocks,
                               .dtype = fp8 ? KILN_F8E4M3FN : dt, .scales = fp8 ? scales : NULL};
    kiln_kv_cache *kv = NULL;
    const size_t block_elems = (size_t)n_kv * BS * hd, cache_elems = (size_t)n_blocks * block_elems;
    const size_t esz = fp8 ? 1 : 2, block_bytes = block_elems * esz; /* bytes of a cached element, of a block */
    uint16_t *qkv = malloc((size_t)n_tok * ldq * 2), *got = malloc((size_t)n_tok * ldq * 2);
    uint16_t *k16 = malloc(cache_elems * 2), *v16 = malloc(cache_elems * 2);
    float *row = malloc((size_t)ldq * 4), *cs = malloc((size_t)hd * 4);
    double *inv = malloc((size_t)ROPE_SEQS * half * sizeof *inv);
    int32_t pos[ROPE_SEQS * ROPE_TABLE], seq[ROPE_SEQS * ROPE_TABLE], table[ROPE_SEQS * ROPE_TABLE];
    void *d_qkv = NULL, *d_k = NULL, *d_v = NULL;
    int32_t *d_meta = NULL;
    double *d_inv = NULL;
    float *d_scales = NULL;
    bool ok = false;
    if (!qkv || !got || !k16 || !v16 || !row || !cs || !inv) {
        llm_fail(run, "out of memory");
        goto done;
    }
    if (kiln_kv_cache_create(&kc, &kv) != KILN_OK) {
        llm_fail(run, "kv cache: %s", kiln_last_error());
        goto done;
    }
    lt_fill16(&run->rng, k16, NULL, cache_elems, 1.0f, dt); /* the slots no token writes must keep these */
    lt_fill16(&run->rng, v16, NULL, cache_elems, 1.0f, dt);
    if (fp8) /* byte i: an E4M3 code from random bits (element i / 2 <= i is read before byte i is written) */
        for (size_t i = 0; i < cache_elems; i++) {
            ((uint8_t *)k16)[i] = llm_random_e4m3(k16[i]);
            ((uint8_t *)v16)[i] = llm_random_e4m3(v16[i]);
        }
    for (int b = 0; b < n_blocks; b++) {
        memcpy(kiln_kv_cache_keys(kv, 0, b), (char *)k16 + (size_t)b * block_bytes, block_bytes);
        memcpy(kiln_kv_cache_values(kv, 0, b), (char *)v16 + (size_t)b * block_bytes, block_bytes);
        table[b] = (b * 7 + 3) % n_blocks; /* sequence b / 8, block b % 8: scrambled */
    }
    for (int s = 0; s < ROPE_SEQS; s++)
        for (int i = 0; i < half; i++) inv[s * half + i] = pow(10000.0 * (s + 1), -2.0 * i / rot_dim);
    for (int t = 0; t < n_tok; t++) {
        seq[t] = t % ROPE_SEQS;
        pos[t] = rope_pos[t / ROPE_SEQS];
    }
    lt_fill16(&run->rng, qkv, NULL, (size_t)n_tok * ldq, 2.0f, dt);
    if (run->on_gpu) {
        LLM_CUDA(run, cudaMalloc(&d_qkv, (size_t)n_tok * ldq * 2));
        LLM_CUDA(run, cudaMalloc(&d_k, cache_elems * esz));
        LLM_CUDA(run, cudaMalloc(&d_v, cache_elems * esz));
        LLM_CUDA(run, cudaMalloc((void **)&d_scales, sizeof scales));
        LLM_CUDA(run, cudaMalloc((void **)&d_meta, sizeof pos + sizeof seq + sizeof table));
        LLM_CUDA(run, cudaMalloc((void **)&d_inv, (size_t)ROPE_SEQS * half * sizeof *inv));
        LLM_CUDA(run, cudaMemcpy(d_qkv, qkv, (size_t)n_tok * ldq * 2, cudaMemcpyHostToDevice));
        LLM_CUDA(run, cudaMemcpy(d_k, k16, cache_elems * esz, cudaMemcpyHostToDevice));
        LLM_CUDA(run, cudaMemcpy(d_v, v16, cache_elems * esz, cudaMemcpyHostToDevice));
        LLM_CUDA(run, cudaMemcpy(d_scales, scales, sizeof scales, cudaMemcpyHostToDevice));
        LLM_CUDA(run, cudaMemcpy(d_meta, pos, sizeof pos, cudaMemcpyHostToDevice));
        LLM_CUDA(run, cudaMemcpy(d_meta + ROPE_SEQS * ROPE_TABLE, seq, sizeof seq, cudaMemcpyHostToDevice));
        LLM_CUDA(run, cudaMemcpy(d_meta + 2 * ROPE_SEQS * ROPE_TABLE, table, sizeof table, cudaMemcpyHostToDevice));
        LLM_CUDA(run, cudaMemcpy(d_inv, inv, (size_t)ROPE_SEQS * half * sizeof *inv, cudaMemcpyHostToDevice));
        llmc_rope_kv a;
        memset(&a, 0, sizeof a);
        a.dtype = dt;
        a.n_tokens = n_tok;
        a.n_head = n_head;
        a.n_kv_head = n_kv;
        a.head_dim = hd;
        a.block_size = BS;
        a.rot_dim = rot_dim;
        a.qkv = d_qkv;
        a.ldq = ldq;
        a.positions = d_meta;
        a.tok_seq = d_meta + ROPE_SEQS * ROPE_TABLE;
        a.inv_freq = rotate ? d_inv : NULL;
        a.inv_freq_stride = half;
        a.table = d_meta + 2 * ROPE_SEQS * ROPE_TABLE;
        a.table_stride = ROPE_TABLE;
        a.kc = d_k;
        a.vc = d_v;
        a.kv_scales = fp8 ? d_scales : NULL;
        if (llmc_rope_kv_launch(&a, NULL) != KILN_OK) {
            llm_fail(run, "launch: %s", kiln_last_error());
            goto done;
        }
        LLM_CUDA(run, cudaDeviceSynchronize());
        LLM_CUDA(run, cudaMemcpy(got, d_qkv, (size_t)n_tok * ldq * 2, cudaMemcpyDeviceToHost));
    }
    /* the CPU: rotate q and k of each token (in FP32, angles in double as the kernel), write k and v */
    for (int t = 0; t < n_tok; t++) {
        for (int i = 0; i < ldq; i++) row[i] = lt_to_f32(qkv[(size_t)t * ldq + i], dt);
        if (rotate) {
            for (int i = 0; i < half; i++) {
                const double ang = (double)pos[t] * inv[seq[t] * half + i];
                cs[i] = (float)cos(ang);
                cs[half + i] = (float)sin(ang);
            }
            kiln_llm_rope(row, n_head + n_kv, hd, rot_dim, cs, cs + half);
        }
        const kiln_llm_seq_kv skv = {kv, 0, table + seq[t] * ROPE_TABLE};
        kiln_llm_kv_write(&skv, pos[t], row + (size_t)n_head * hd, row + (size_t)(n_head + n_kv) * hd);
        for (int i = 0; i < n_head * hd && run->on_gpu; i++) /* q in place (k and v parts of qkv: read only) */
            llm_err_add(run, lt_to_f32(got[(size_t)t * ldq + i], dt), lt_to_f32(lt_from_f32(row[i], dt), dt));
    }
    if (run->on_gpu) {
        LLM_CUDA(run, cudaMemcpy(k16, d_k, cache_elems * esz, cudaMemcpyDeviceToHost));
        LLM_CUDA(run, cudaMemcpy(v16, d_v, cache_elems * esz, cudaMemcpyDeviceToHost));
        for (int b = 0; b < n_blocks && fp8; b++) { /* FP8: every code exact */
            const uint8_t *kw = kiln_kv_cache_keys(kv, 0, b), *vw = kiln_kv_cache_values(kv, 0, b);
            const uint8_t *kg = (const uint8_t *)k16 + (size_t)b * block_bytes, *vg = (const uint8_t *)v16 + (size_t)b * block_bytes;
            for (size_t i = 0; i < block_elems; i++) run->wrong += (kg[i] != kw[i]) + (vg[i] != vw[i]);
        }
        for (int b = 0; b < n_blocks && !fp8; b++) {
            const uint16_t *kw = kiln_kv_cache_keys(kv, 0, b), *vw = kiln_kv_cache_values(kv, 0, b);
            for (size_t i = 0; i < block_elems; i++) {
                llm_err_add(run, lt_to_f32(k16[(size_t)b * block_elems + i], dt), lt_to_f32(kw[i], dt));
                run->wrong += vw[i] != v16[(size_t)b * block_elems + i];
            }
        }
        if (run->wrong) {
            llm_fail(run, "%d cached value(s) differ", run->wrong);
            goto done;
        }
    }
    ok = true;
done:
    kiln_kv_cache_free(kv);
    cudaFree(d_qkv);
    cudaFree(d_k);
    cudaFree(d_v);
    cudaFree(d_meta);
    cudaFree(d_inv);
    cudaFree(d_scales);
    free(qkv);
    free(got);
    free(k16);
    free(v16);
    free(row);
    free(cs);
    free(inv);
    return ok;
}

/* ---------------------------------------------------------------- residual add + norm */

#define NORM_XROWS 6

static bool norm_case(llm_run *run, llm_params *pr) {
    static const int32_t rows_idx[] = {4, 0, 5, 2, 1};
    const kiln_dtype dt = run->dt;
    const int d = (int)llm_param(pr, "d", 64), n_rows = (int)llm_param(pr, "rows", 1);
    const bool layer = llm_param(pr, "layer", 0) != 0, with_delta = llm_param(pr, "residual", 1) != 0;
    const bool store = llm_param(pr, "store", 0) != 0, gather = llm_param(pr, "gather", 0) != 0;
    const float eps = 1e-5f;
    run->tol = dt == KILN_F16 ? 4e-3 : 1.6e-2;
    if (d < 1 || d > KILN_CUDA_NORM_RESIDUAL_MAX_LEN || n_rows < 1 || n_rows > (gather ? 5 : NORM_XROWS))
        return llm_fail(run, "bad case: d 1..%d, rows 1..%d (gathered: 1..5)", KILN_CUDA_NORM_RESIDUAL_MAX_LEN,
                        NORM_XROWS);
    const size_t xn = (size_t)NORM_XROWS * d;
    float *x = malloc(xn * 4), *xg = malloc(xn * 4), *w = malloc((size_t)d * 4), *b = malloc((size_t)d * 4);
    float *v = malloc((size_t)d * 4), *y = malloc((size_t)d * 4);
    uint16_t *delta = malloc(xn * 2), *h = malloc((size_t)n_rows * d * 2);
    float *d_x = NULL, *d_w = NULL, *d_b = NULL;
    void *d_delta = NULL, *d_h = NULL;
    int32_t *d_rows = NULL;
    bool ok = false, touched[NORM_XROWS] = {false};
    if (!x || !xg || !w || !b || !v || !y || !delta || !h) {
        llm_fail(run, "out of memory");
        goto done;
    }
    for (size_t i = 0; i < xn; i++) x[i] = 3.0f * lt_urand(&run->rng) + 0.5f;
    lt_fill16(&run->rng, delta, NULL, xn, 2.0f, dt);
    for (int i = 0; i < d; i++) {
        w[i] = 1.0f + 0.5f * lt_urand(&run->rng);
        b[i] = 0.5f * lt_urand(&run->rng);
    }
    memcpy(xg, x, xn * 4);
    if (run->on_gpu) {
        LLM_CUDA(run, cudaMalloc((void **)&d_x, xn * 4));
        LLM_CUDA(run, cudaMalloc((void **)&d_w, (size_t)d * 4));
        LLM_CUDA(run, cudaMalloc((void **)&d_b, (size_t)d * 4));
        LLM_CUDA(run, cudaMalloc(&d_delta, xn * 2));
        LLM_CUDA(run, cudaMalloc(&d_h, (size_t)n_rows * d * 2));
        LLM_CUDA(run, cudaMalloc((void **)&d_rows, sizeof rows_idx));
        LLM_CUDA(run, cudaMemcpy(d_x, x, xn * 4, cudaMemcpyHostToDevice));
        LLM_CUDA(run, cudaMemcpy(d_w, w, (size_t)d * 4, cudaMemcpyHostToDevice));
        LLM_CUDA(run, cudaMemcpy(d_b, b, (size_t)d * 4, cudaMemcpyHostToDevice));
        LLM_CUDA(run, cudaMemcpy(d_delta, delta, xn * 2, cudaMemcpyHostToDevice));
        LLM_CUDA(run, cudaMemcpy(d_rows, rows_idx, sizeof rows_idx, cudaMemcpyHostToDevice));
        LLM_CUDA(run, cudaMemset(d_h, 0xff, (size_t)n_rows * d * 2)); /* NaN poison */
        kiln_cuda_norm a;
        memset(&a, 0, sizeof a);
        a.dtype = dt;
        a.residual = true;
        a.rms = !layer;
        a.rows = n_rows;
        a.len = d;
        a.x = d_x;
        a.delta = with_delta ? d_delta : NULL;
        a.gather = gather ? d_rows : NULL;
        a.store = store;
        a.scale = d_w;
        a.bias = layer ? d_b : NULL;
        a.eps = eps;
        a.y = d_h;
        if (kiln_cuda_norm_rows(&a, NULL) != KILN_OK) {
            llm_fail(run, "launch: %s", kiln_last_error());
            goto done;
        }
        LLM_CUDA(run, cudaDeviceSynchronize());
        LLM_CUDA(run, cudaMemcpy(h, d_h, (size_t)n_rows * d * 2, cudaMemcpyDeviceToHost));
        LLM_CUDA(run, cudaMemcpy(xg, d_x, xn * 4, cudaMemcpyDeviceToHost));
    }
    for (int r = 0; r < n_rows; r++) {
        const int t = gather ? rows_idx[r] : r;
        touched[t] = true;
        for (int i = 0; i < d; i++)
            v[i] = x[(size_t)t * d + i] + (with_delta ? lt_to_f32(delta[(size_t)t * d + i], dt) : 0.0f);
        kiln_llm_norm(v, 1, d, w, 0.0f, layer ? b : NULL, eps, y);
        for (int i = 0; i < d && run->on_gpu; i++) {
            llm_err_add(run, lt_to_f32(h[(size_t)r * d + i], dt), y[i]);
            run->wrong += xg[(size_t)t * d + i] != (store ? v[i] : x[(size_t)t * d + i]);
        }
    }
    for (int t = 0; t < NORM_XROWS; t++) /* rows no output reads stay as they were */
        for (int i = 0; i < d && !touched[t]; i++) run->wrong += xg[(size_t)t * d + i] != x[(size_t)t * d + i];
    ok = run->wrong == 0 || llm_fail(run, "%d FP32 residual value(s) wrong", run->wrong);
done:
    cudaFree(d_x);
    cudaFree(d_w);
    cudaFree(d_b);
    cudaFree(d_delta);
    cudaFree(d_h);
    cudaFree(d_rows);
    free(x);
    free(xg);
    free(w);
    free(b);
    free(v);
    free(y);
    free(delta);
    free(h);
    return ok;
}

/* ---------------------------------------------------------------- GEMV family */

static bool gemv_case(llm_run *run, llm_params *pr) {
    const kiln_dtype dt = run->dt;
    const int K = (int)llm_param(pr, "K", 64), N = (int)llm_param(pr, "N", 8), n = (int)llm_param(pr, "n", 1);
    const bool bias = llm_param(pr, "bias", 0) != 0, f32 = llm_param(pr, "f32", 0) != 0;
    const int only = (int)llm_param(pr, "cfg", -1);
    run->tol = f32 ? 1e-4 : dt == KILN_F16 ? 1.5e-3 : 1e-2;
    if (K < 8 || K % 8 || N < 1 || n < 1 || n > LLMC_GEMV_MAX || only < -1 || only >= LLMC_GEMV_CONFIGS || (bias && f32))
        return llm_fail(run, "bad case: K a multiple of 8, N >= 1, n 1..%d, cfg -1..%d, no bias with f32", LLMC_GEMV_MAX,
                        LLMC_GEMV_CONFIGS - 1);
    uint16_t *w16 = malloc((size_t)N * K * 2), *x16 = malloc((size_t)n * K * 2), *b16 = malloc((size_t)N * 2);
    float *wf = malloc((size_t)N * K * 4), *xf = malloc((size_t)n * K * 4), *bf = malloc((size_t)N * 4);
    float *ref = malloc((size_t)n * N * 4), *yh = malloc((size_t)n * N * 4);
    void *d_w = NULL, *d_x = NULL, *d_b = NULL, *d_y = NULL;
    bool ok = false;
    if (!w16 || !x16 || !b16 || !wf || !xf || !bf || !ref || !yh) {
        llm_fail(run, "out of memory");
        goto done;
    }
    lt_fill16(&run->rng, w16, wf, (size_t)N * K, 1.0f, dt);
    lt_fill16(&run->rng, x16, xf, (size_t)n * K, 1.0f, dt);
    lt_fill16(&run->rng, b16, bf, (size_t)N, 1.0f, dt);
    kiln_llm_linear(xf, K, n, K, wf, bias ? bf : NULL, N, ref, N, 0);
    if (run->on_gpu) {
        LLM_CUDA(run, cudaMalloc(&d_w, (size_t)N * K * 2));
        LLM_CUDA(run, cudaMalloc(&d_x, (size_t)n * K * 2));
        LLM_CUDA(run, cudaMalloc(&d_b, (size_t)N * 2));
        LLM_CUDA(run, cudaMalloc(&d_y, (size_t)n * N * 4));
        LLM_CUDA(run, cudaMemcpy(d_w, w16, (size_t)N * K * 2, cudaMemcpyHostToDevice));
        LLM_CUDA(run, cudaMemcpy(d_x, x16, (size_t)n * K * 2, cudaMemcpyHostToDevice));
        LLM_CUDA(run, cudaMemcpy(d_b, b16, (size_t)N * 2, cudaMemcpyHostToDevice));
    }
    double worst = -1;
    int worst_cfg = 0;
    for (int cfg = only < 0 ? 0 : only; run->on_gpu && cfg < (only < 0 ? LLMC_GEMV_CONFIGS : only + 1); cfg++) {
        LLM_CUDA(run, cudaMemset(d_y, 0xff, (size_t)n * N * 4)); /* NaN poison */
        if (llmc_gemv_launch(dt, NULL, cfg, d_x, K, n, K, d_w, bias ? d_b : NULL, N, d_y, N, f32, false) != KILN_OK) {
            llm_fail(run, "launch (%s): %s", llmc_gemv_config_name(cfg), kiln_last_error());
            goto done;
        }
        if (!llm_config_err(run, d_y, yh, (size_t)n * N, f32, ref, cfg, &worst, &worst_cfg)) goto done;
    }
    if (run->on_gpu && run->max_diff > run->tol * run->max_want)
        llm_fail(run, "configuration %s: max rel err %.3e above %.1e", llmc_gemv_config_name(worst_cfg),
                 worst / (run->max_want > 0 ? run->max_want : 1), run->tol);
    else ok = true;
done:
    cudaFree(d_w);
    cudaFree(d_x);
    cudaFree(d_b);
    cudaFree(d_y);
    free(w16);
    free(x16);
    free(b16);
    free(wf);
    free(xf);
    free(bf);
    free(ref);
    free(yh);
    return ok;
}

/* ---------------------------------------------------------------- argmax and the sampler */

#define SAMPLE_ROWS 4

/* The lowest index of the largest value; NaN never wins; a row of NaNs gives 0. */
static int cpu_argmax(const float *row, int n) {
    int best = -1;
    for (int i = 0; i < n; i++)
        if (!isnan(row[i]) && (best < 0 || row[i] > row[best])) best = i;
    return best < 0 ? 0 : best;
}

static bool activation_case(llm_run *run, llm_params *pr) {
    const kiln_dtype dt = run->dt;
    const int ff = (int)llm_param(pr, "ff", 64), n = (int)llm_param(pr, "rows", 3);
    const bool gated = llm_param(pr, "gated", 0) != 0;
    const kiln_llm_gate_act act = llm_param(pr, "act", 0) != 0 ? KILN_GATE_GELU_TANH : KILN_GATE_SILU;
    run->tol = dt == KILN_F16 ? 2e-3 : 1.6e-2;
    if (ff < 1 || n < 1) return llm_fail(run, "bad case: ff and rows >= 1");
    const int w = gated ? 2 * ff : ff; /* values of a row */
    const size_t count = (size_t)n * w;
    uint16_t *x = malloc(count * 2), *got = malloc(count * 2);
    float *ref = malloc(count * 4);
    void *d_x = NULL;
    bool ok = false;
    if (!x || !got || !ref) {
        llm_fail(run, "out of memory");
        goto done;
    }
    lt_fill16(&run->rng, x, ref, count, 4.0f, dt); /* ref: the same values, widened */
    if (run->on_gpu) {
        LLM_CUDA(run, cudaMalloc(&d_x, count * 2));
        LLM_CUDA(run, cudaMemcpy(d_x, x, count * 2, cudaMemcpyHostToDevice));
        llmc_activation_args a;
        memset(&a, 0, sizeof a);
        a.dtype = dt;
        a.gated = gated;
        a.act = act;
        a.x = d_x;
        a.n = n;
        a.ff = ff;
        if (llmc_activation_launch(&a, NULL) != KILN_OK) {
            llm_fail(run, "launch: %s", kiln_last_error());
            goto done;
        }
        LLM_CUDA(run, cudaDeviceSynchronize());
        LLM_CUDA(run, cudaMemcpy(got, d_x, count * 2, cudaMemcpyDeviceToHost));
    }
    if (gated) kiln_llm_gated(ref, n, ff, act);
    else kiln_llm_gelu_tanh(ref, count);
    for (size_t i = 0; i < count && run->on_gpu; i++) {
        if (gated && (int)(i % (size_t)w) >= ff) run->wrong += got[i] != x[i]; /* the up half */
        else llm_err_add(run, lt_to_f32(got[i], dt), ref[i]);
    }
    ok = true;
done:
    cudaFree(d_x);
    free(x);
    free(got);
    free(ref);
    return ok;
}

static bool argmax_case(llm_run *run, llm_params *pr) {
    const int V = (int)llm_param(pr, "vocab", 1000);
    if (V < 1) return llm_fail(run, "bad case: vocab >= 1");
    float *logits = malloc((size_t)SAMPLE_ROWS * V * 4), *d_logits = NULL;
    int32_t *d_ids = NULL, ids[SAMPLE_ROWS];
    bool ok = false;
    if (!logits) {
        llm_fail(run, "out of memory");
        goto done;
    }
    /* rows: random; a tie of the maximum at three ids; NaNs and -inf around a maximum; all NaN */
    for (size_t i = 0; i < (size_t)SAMPLE_ROWS * V; i++) logits[i] = 4.0f * lt_urand(&run->rng);
    for (int i = V / 3; i < V; i += V / 3 + 1) logits[(size_t)V + i] = 9.0f;
    for (int i = 0; i < V; i += 3) logits[(size_t)2 * V + i] = i % 2 ? NAN : -INFINITY;
    for (int i = 0; i < V; i++) logits[(size_t)3 * V + i] = NAN;
    if (run->on_gpu) {
        LLM_CUDA(run, cudaMalloc((void **)&d_logits, (size_t)SAMPLE_ROWS * V * 4));
        LLM_CUDA(run, cudaMalloc((void **)&d_ids, sizeof ids));
        LLM_CUDA(run, cudaMemcpy(d_logits, logits, (size_t)SAMPLE_ROWS * V * 4, cudaMemcpyHostToDevice));
        if (llmc_argmax_launch(NULL, d_logits, SAMPLE_ROWS, V, d_ids) != KILN_OK) {
            llm_fail(run, "launch: %s", kiln_last_error());
            goto done;
        }
        LLM_CUDA(run, cudaDeviceSynchronize());
        LLM_CUDA(run, cudaMemcpy(ids, d_ids, sizeof ids, cudaMemcpyDeviceToHost));
    }
    for (int r = 0; r < SAMPLE_ROWS && run->on_gpu; r++) {
        const int want = cpu_argmax(logits + (size_t)r * V, V);
        if (ids[r] != want) {
            llm_fail(run, "row %d: id %d, the CPU's %d", r, ids[r], want);
            goto done;
        }
    }
    ok = true;
done:
    cudaFree(d_logits);
    cudaFree(d_ids);
    free(logits);
    return ok;
}

static bool sample_case(llm_run *run, llm_params *pr) {
    static const int32_t prompt[] = {1, 2, 3, 5}, generated[] = {5, 6, 6};
    const int V = (int)llm_param(pr, "vocab", 1000);
    kiln_sampling_params p = kiln_sampling_defaults();
    p.temperature = (float)llm_param(pr, "temp", 0);
    p.top_k = (int)llm_param(pr, "top_k", p.top_k);
    p.top_p = (float)llm_param(pr, "top_p", p.top_p);
    p.min_p = (float)llm_param(pr, "min_p", p.min_p);
    if (llm_param(pr, "pen", 0)) {
        p.repetition_penalty = 1.3f;
        p.frequency_penalty = 0.5f;
        p.presence_penalty = 0.25f;
    }
    const bool mixed = llm_param(pr, "mixed", 0) != 0;
    if (V < 7) return llm_fail(run, "bad case: vocab >= 7 (the history holds ids up to 6)");
    float *logits = malloc((size_t)SAMPLE_ROWS * V * 4);
    kiln_sampler *cpu = NULL;
    kiln_llm_cuda_sampler *gpu = NULL;
    kiln_sampling_params rp[SAMPLE_ROWS];
    kiln_llm_cuda_sample_row rows[SAMPLE_ROWS];
    int32_t tokens[SAMPLE_ROWS];
    bool ok = false;
    if (!logits) {
        llm_fail(run, "out of memory");
        goto done;
    }
    for (size_t i = 0; i < (size_t)SAMPLE_ROWS * V; i++) logits[i] = 4.0f * lt_urand(&run->rng);
    for (int r = 0; r < SAMPLE_ROWS; r++) {
        rp[r] = p;
        rp[r].seed = 1000 + (uint64_t)r;
        rows[r] = (kiln_llm_cuda_sample_row){&rp[r], prompt, generated, 4, 3};
    }
    if (mixed) { /* one batch, four kinds of rows */
        rp[1].temperature = 0.8f;
        rp[1].top_k = 40;
        rp[2].temperature = 1.0f;
        rp[2].top_p = 0.9f;
        rp[3].temperature = 1.2f;
        rp[3].min_p = 0.05f;
        rp[3].repetition_penalty = 1.3f;
        rp[3].frequency_penalty = 0.5f;
        rp[3].presence_penalty = 0.25f;
    }
    if (kiln_sampler_create(V, &cpu) != KILN_OK) {
        llm_fail(run, "sampler: %s", kiln_last_error());
        goto done;
    }
    if (run->on_gpu && (kiln_llm_cuda_sampler_create(run->device, V, SAMPLE_ROWS, 64, &gpu) != KILN_OK ||
                        kiln_llm_cuda_sample(gpu, NULL, logits, SAMPLE_ROWS, rows, tokens) != KILN_OK)) {
        llm_fail(run, "cuda sampler: %s", kiln_last_error());
        goto done;
    }
    for (int r = 0; r < SAMPLE_ROWS; r++) {
        kiln_sample out;
        if (kiln_sample_next(cpu, &rp[r], logits + (size_t)r * V, prompt, 4, generated, 3, &out) != KILN_OK) {
            llm_fail(run, "kiln_sample_next: %s", kiln_last_error());
            goto done;
        }
        if (run->on_gpu && out.token != tokens[r]) {
            llm_fail(run, "row %d (seed %llu): token %d, kiln_sample_next's %d", r, (unsigned long long)rp[r].seed,
                     tokens[r], out.token);
            goto done;
        }
    }
    ok = true;
done:
    kiln_sampler_free(cpu);
    kiln_llm_cuda_sampler_free(gpu);
    free(logits);
    return ok;
}

/* ---------------------------------------------------------------- one case */

void llm_case_run(const char *op, const char *params, kiln_precision p, uint64_t seed, int device, bool on_gpu,
                  double nmse_tol, llm_case_result *r) {
    memset(r, 0, sizeof *r);
    r->status = LLM_CASE_FAIL;
    r->nmse = -1;
    llm_params pr;
    if (!parse_params(params, &pr, r->msg, sizeof r->msg)) return;
    llm_run run = {.rng = (uint32_t)(seed ^ (seed >> 32)) | 1u, .on_gpu = on_gpu, .device = device,
                   .dt = p == KILN_PRECISION_BF16 ? KILN_BF16 : KILN_F16, .r = r};
    if (on_gpu) {
        const cudaError_t e = cudaSetDevice(device);
        if (e != cudaSuccess) {
            llm_cuda_fail(&run, "cudaSetDevice", (int)e);
            return;
        }
    }
    bool ok;
    if (!strcmp(op, "llm.PrefillAttention") || !strcmp(op, "llm.DecodeAttention")) ok = llm_attention_case(&run, op, &pr);
    else if (!strcmp(op, "llm.RopeKvWrite")) ok = rope_case(&run, &pr);
    else if (!strcmp(op, "llm.Activation")) ok = activation_case(&run, &pr);
    else if (!strcmp(op, "llm.AddNorm")) ok = norm_case(&run, &pr);
    else if (!strcmp(op, "llm.Gemv")) ok = gemv_case(&run, &pr);
    else if (!strcmp(op, "llm.GemvFused")) ok = llm_gemv_fused_case(&run, &pr);
    else if (!strcmp(op, "llm.Argmax")) ok = argmax_case(&run, &pr);
    else if (!strcmp(op, "llm.Sample")) ok = sample_case(&run, &pr);
    else if (!strcmp(op, "llm.GemvQ8") || !strcmp(op, "llm.GemmQ8") || !strcmp(op, "llm.DequantQ8"))
        ok = llm_quant_case(&run, op, &pr);
    else if (!strcmp(op, "llm.QuantizeAct") || !strcmp(op, "llm.GemvW8A8") || !strcmp(op, "llm.ImmaW8A8"))
        ok = llm_w8a8_case(&run, op, &pr);
    else if (!strcmp(op, "llm.GemvQ4") || !strcmp(op, "llm.GemmQ4") || !strcmp(op, "llm.DequantQ4"))
        ok = llm_quant4_case(&run, op, &pr);
    else if (!strcmp(op, "llm.QuantFp8") || !strcmp(op, "llm.LinearFp8")) ok = llm_fp8_case(&run, op, &pr);
    else ok = llm_fail(&run, "no LLM kernel case '%s'", op);
    for (int i = 0; i < pr.n && ok; i++)
        if (!pr.used[i]) ok = llm_fail(&run, "bad case: %s takes no parameter '%s'", op, pr.name[i]);
    if (run.tol > 0 && on_gpu && run.sq_want + run.sq_diff > 0)
        r->nmse = run.sq_want > 0 ? run.sq_diff / run.sq_want : run.sq_diff;
    if (!ok) return;
    const double rel = run.max_diff / (run.max_want > 0 ? run.max_want : 1);
    if (!on_gpu) snprintf(r->msg, sizeof r->msg, "the CPU reference alone");
    else if (run.tol > 0 && !(r->nmse <= nmse_tol))
        return (void)llm_fail(&run, "NMSE %.3g above %.0e (max rel err %.2e)", r->nmse, nmse_tol, rel);
    else if (run.tol > 0 && !(rel <= run.tol))
        return (void)llm_fail(&run, "max rel err %.3e above the kernel's bound %.1e", rel, run.tol);
    else if (run.tol > 0) snprintf(r->msg, sizeof r->msg, "max rel err %.2e (bound %.1e)", rel, run.tol);
    r->status = LLM_CASE_OK;
}
