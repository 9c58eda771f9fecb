/* fp8_matmul.c — kiln.F8MatMul (ir/quant_ops.h) on the CPU, the reference every FP8 engine is
 * checked against: each row of A (through its input_activation, when it has one: fused.c's formula)
 * is rounded to E4M3 (A / x_scale, quant/fp8.h) and decoded, the
 * weights' E4M3 codes decoded once per call, the products (exact in float32) summed in float32 in
 * order of k, then Y = sum * (x_scale * w_scale) + bias (+ R). */
#include "backends/cpu/quant_kernels.h"

#include "backends/cpu/fused_kernels.h"
#include "core/status.h"
#include "ir/quant_ops.h"
#include "quant/fp8.h"

#include <stdlib.h>
#include <string.h>

/* kiln.F8MatMul: A (float32 [..., K]), B (uint8 E4M3 codes [K, N]), bias (optional float32 [N]),
 * residual (optional float32 of Y's element count). */
NN_EXEC(kiln_cpu_kiln_f8matmul) {
    (void)nout;
    KILN_TRY(nn_require_inputs(n, in, nin, 2));
    const kiln_tensor *a = in[0], *b = in[1], *bias = nin > 2 ? in[2] : NULL, *res = nin > 3 ? in[3] : NULL;
    kiln_fp8_layer q;
    KILN_TRY(kiln_fp8_layer_read(n, &q));
    if (a->dtype != KILN_F32 || a->ndim < 1)
        return kiln_error(KILN_ERR_UNSUPPORTED, "F8MatMul: the CPU takes a float32 A of rank >= 1 (got %s, rank %d)",
                          kiln_dtype_name(a->dtype), a->ndim);
    if (b->dtype != KILN_U8 || b->ndim != 2)
        return kiln_error(KILN_ERR_SHAPE, "F8MatMul needs B as 2-D uint8 E4M3 codes (got %s, rank %d)",
                          kiln_dtype_name(b->dtype), b->ndim);
    int64_t K = b->dims[0], N = b->dims[1];
    if (a->dims[a->ndim - 1] != K)
        return kiln_error(KILN_ERR_SHAPE, "F8MatMul: A's last dim %lld differs from B's %lld rows",
                          (long long)a->dims[a->ndim - 1], (long long)K);
    if (bias && (bias->dtype != KILN_F32 || kiln_tensor_numel(bias) != N))
        return kiln_error(KILN_ERR_SHAPE, "F8MatMul: the bias must be float32 with %lld elements", (long long)N);
    int64_t rows = K > 0 ? kiln_tensor_numel(a) / K : 0;
    if (res && (res->dtype != KILN_F32 || kiln_tensor_numel(res) != rows * N))
        return kiln_error(KILN_ERR_SHAPE, "F8MatMul: the residual must be float32 with %lld elements (got %s, %lld)",
                          (long long)(rows * N), kiln_dtype_name(res->dtype), (long long)kiln_tensor_numel(res));
    int64_t dims[KILN_MAX_DIMS];
    memcpy(dims, a->dims, sizeof(int64_t) * (size_t)a->ndim);
    dims[a->ndim - 1] = N;
    KILN_TRY(kiln_tensor_alloc_uninit(out[0], KILN_F32, a->ndim, dims));
    float *w = malloc((size_t)(K * N + K + N) * sizeof *w + 1);
    if (!w) return kiln_error(KILN_ERR_OUT_OF_MEMORY, "F8MatMul: out of memory");
    float *xr = w + K * N, *acc = xr + K;
    const uint8_t *codes = b->data;
    for (int64_t i = 0; i < K * N; i++) w[i] = kiln_e4m3_to_f32(codes[i]);
    const float *x = a->data, *bv = bias ? bias->data : NULL;
    const float *rv = res ? res->data : NULL;
    float *y = out[0]->data, scale = q.x_scale * q.w_scale;
    for (int64_t r = 0; r < rows; r++) {
        memcpy(xr, x + r * K, (size_t)K * sizeof *xr);
        if (q.in_act != KILN_ACT_NONE) kiln_cpu_activation_apply(xr, K, &(kiln_act){.kind = q.in_act});
        for (int64_t k = 0; k < K; k++) xr[k] = kiln_e4m3_to_f32(kiln_f32_to_e4m3(xr[k] / q.x_scale));
        memset(acc, 0, (size_t)N * sizeof *acc);
        for (int64_t k = 0; k < K; k++)
            for (int64_t j = 0; j < N; j++) acc[j] += xr[k] * w[k * N + j];
        for (int64_t j = 0; j < N; j++) {
            float v = acc[j] * scale + (bv ? bv[j] : 0.0f);
            y[r * N + j] = rv ? v + rv[r * N + j] : v;
        }
    }
    free(w);
    return KILN_OK;
}
