/* quant_matmul.cu — kiln.QMatMul (ir/quant_ops.h) on the GPU, and the integer layers' kernel table.
 * Three ways to run one (quant_gemm.cu's header comment has the GEMM's contract):
 * - fused: symmetric layers (kiln_qg_fused_ok) requantize inside cuBLASLt's IMMA GEMM, y written
 *   directly (one unit from the CPU oracle at most);
 * - exact: the IMMA GEMM into int32 D, then kiln's epilogue kernel (the CPU oracle's arithmetic);
 * - float16: A dequantized to float16, the product by the dequantized weights [K, N] in cuBLASLt
 *   through matmul.cuh, then bias, activation and output conversion.
 * INT8 against FP16 (the build's tuning, cuda_tuning*.c): a QMatMul lists two candidates, tactics of
 * kind KILN_TACTIC_PATH — algo 0 the int8 path (fused where it applies, else exact), algo 1 the
 * float16 one — both always timed, and runs the one its recorded tactic names (none: int8). */
#include "backends/cuda/matmul.cuh"
#include "backends/cuda/quant_gemm.cuh"

#include <stdlib.h>

/* st->w16 from the weights' host copy, once. */
static kiln_status qg_prepare_f16(const kiln_node *n, const kiln_quant_layer *ql, const qg_host_weights *w, int64_t K,
                                  qg_state *st) {
    if (st->w16) return KILN_OK;
    int64_t N = w->M, w_shift = w->dtype == KILN_U8 ? 128 : 0;
    uint16_t *host = (uint16_t *)malloc((size_t)(K * N) * sizeof *host + 1);
    if (!host) return kiln_error(KILN_ERR_OUT_OF_MEMORY, "%s '%s': out of memory for its float16 weights", n->op_type, n->name);
    for (int64_t c = 0; c < N; c++) {
        int64_t zp = ql->nwzp == 0 ? 0 : ql->w_zero_point[ql->nwzp == 1 ? 0 : c];
        float scale = ql->w_scale[ql->nw == 1 ? 0 : c];
        for (int64_t k = 0; k < K; k++)
            host[k * N + c] = kiln_f32_to_f16((float)(kiln_qg_weight_at(w, K, c, k) - (zp - w_shift)) * scale);
    }
    cudaError_t e = cudaMalloc(&st->w16, (size_t)(K * N) * sizeof *host);
    if (e == cudaSuccess) e = cudaMemcpy(st->w16, host, (size_t)(K * N) * sizeof *host, cudaMemcpyHostToDevice);
    free(host);
    if (e != cudaSuccess) return kiln_cuda_error(e, "cudaMalloc/cudaMemcpy of the float16 weights", __FILE__, __LINE__);
    return KILN_OK;
}

/* QMatMul's float16 path, the tuner's alternative to its int8 one: A dequantized to float16, the
 * product by the dequantized weights in cuBLASLt (FP32 accumulation: matmul.cuh), then the bias,
 * activation and output conversion. Chunks of rows fit the workspace with cuBLASLt's share. */
static kiln_status qg_run_f16(const kiln_node *n, const kiln_quant_layer *ql, const qg_state *st,
                              const kiln_cuda_tensor *a, int64_t K, int64_t N, const kiln_cuda_tensor *y,
                              kiln_cuda_ctx *ctx) {
    int64_t rows = K > 0 ? ku_numel(a) / K : 0;
    size_t lt_bytes = kiln_qg_lt_bytes(ctx), per_row = (size_t)(K + N) * 2;
    size_t avail = ctx->workspace_bytes > lt_bytes + 2 * QG_ALIGN ? ctx->workspace_bytes - lt_bytes - 2 * QG_ALIGN : 0;
    int64_t chunk = (int64_t)(avail / per_row);
    if (rows > 0 && chunk < 1)
        return kiln_error(KILN_ERR_UNSUPPORTED, "%s '%s': %zu bytes of workspace do not hold one row of its float16 path",
                          n->op_type, n->name, ctx->workspace_bytes);
    for (int64_t r0 = 0; r0 < rows; r0 += chunk) {
        int64_t R = rows - r0 < chunk ? rows - r0 : chunk;
        unsigned char *ws = (unsigned char *)ctx->workspace;
        __half *a16 = (__half *)ws, *d16 = (__half *)(ws + qg_align((size_t)(R * K) * 2));
        size_t used = qg_align((size_t)(R * K) * 2) + qg_align((size_t)(R * N) * 2);
        const unsigned char *ab = (const unsigned char *)a->data + r0 * K;
        KILN_TRY(kiln_qg_dequant_f16(ab, a->dtype, R * K, ql->x_zero_point, ql->x_scale, a16, ctx));
        kiln_cuda_ctx sub = *ctx; /* cuBLASLt's workspace after the buffers; no tactic of its own */
        sub.workspace = ws + used;
        sub.workspace_bytes = ctx->workspace_bytes - used;
        sub.tactic = NULL;
        sub.tactic_strict = false;
        sub.candidates = NULL;
        sub.state = NULL;
        KILN_TRY(kiln_cuda_matmul_batched(n, &sub, KILN_F16, 1, R, N, K, a16, false, st->w16, false, d16));
        unsigned char *yb = (unsigned char *)y->data + (size_t)(r0 * N) * kiln_dtype_size(y->dtype);
        KILN_TRY(kiln_qg_epilogue_f16(n, d16, R, N, st->epi, y->dtype, yb, ctx));
    }
    return KILN_OK;
}

/* The int8 path over `rows` rows of A (K long) into y [rows, N]: per chunk of rows, A's rows copied
 * (shifted, padded) where IMMA cannot read them in place, then the fused GEMM where it applies, else
 * the int32 GEMM, row sums and kiln's epilogue. */
static kiln_status qg_run_int8(const kiln_node *n, const kiln_quant_layer *ql, qg_state *st, const kiln_cuda_tensor *a,
                               int64_t K, int64_t N, const kiln_cuda_tensor *y, kiln_cuda_ctx *ctx) {
    int64_t rows = K > 0 ? ku_numel(a) / K : 0;
    /* A used in place when it is int8 rows IMMA can read: K a multiple of 4, 4-byte aligned */
    bool copy_rows = a->dtype != KILN_I8 || K % 4 != 0 || ((uintptr_t)a->data & 3) != 0;
    bool fused = kiln_qg_fused_ok(st, ql, y->dtype);
    size_t lt_bytes = kiln_qg_lt_bytes(ctx), es = kiln_dtype_size(y->dtype);
    int64_t chunk = rows; /* the fused call keeps no D: A read in place goes in one call */
    kiln_status s = KILN_OK;
    if (rows > 0 && N > 0 && (!fused || copy_rows)) s = kiln_qg_chunk_units(n, st, rows, 1, copy_rows, lt_bytes, ctx, &chunk);
    for (int64_t r0 = 0; s == KILN_OK && r0 < rows;) {
        int64_t R = rows - r0 < chunk ? rows - r0 : chunk;
        unsigned char *ws = (unsigned char *)ctx->workspace;
        int8_t *x = copy_rows ? (int8_t *)ws : (int8_t *)a->data + r0 * K;
        size_t off = copy_rows ? qg_align((size_t)(R * st->Kp)) : 0;
        int32_t *D = (int32_t *)(ws + off);
        int32_t *rowsum = (int32_t *)(ws + off + qg_align((size_t)(R * st->Mp) * 4));
        size_t before_lt = copy_rows ? qg_align((size_t)(R * st->Kp)) : 0;
        if (!fused) before_lt = kiln_qg_chunk_bytes(st, R, copy_rows);
        void *lt_ws = ws + before_lt;
        size_t lt_avail = ctx->workspace_bytes > before_lt ? ctx->workspace_bytes - before_lt : 0;
        size_t lt_use = lt_avail < lt_bytes ? lt_avail : lt_bytes;
        unsigned char *yb = (unsigned char *)y->data + (size_t)(r0 * N) * es;
        if (copy_rows) s = kiln_qg_copy_rows((const unsigned char *)a->data + r0 * K, a->dtype, R, K, st->Kp, x, ctx);
        int64_t ldb = copy_rows ? st->Kp : K;
        if (s == KILN_OK && fused) {
            bool done = false;
            s = kiln_qg_gemm_fused(n, st, x, R, ldb, y->dtype, yb, N, lt_ws, lt_use, ctx, &done);
            if (s == KILN_OK && !done) { /* cuBLASLt refused it: these rows again, in the exact path's chunks */
                fused = false;
                s = kiln_qg_chunk_units(n, st, rows, 1, copy_rows, lt_bytes, ctx, &chunk);
                continue;
            }
        } else {
            if (s == KILN_OK) s = kiln_qg_rowsums(st, x, R, ldb, rowsum, ctx);
            if (s == KILN_OK) s = kiln_qg_gemm(n, st, 0, x, R, ldb, D, lt_ws, lt_use, ctx);
            qg_out_map m = {R, 0, 1, N};
            if (s == KILN_OK) s = kiln_qg_epilogue(n, st, 0, D, R, rowsum, m, false, y->dtype, yb, ctx);
        }
        r0 += R;
    }
    return s;
}

static kiln_status exec_qmatmul(const kiln_node *n, const kiln_cuda_tensor *in, int nin, const kiln_cuda_tensor *out,
                                int nout, kiln_cuda_ctx *ctx) {
    (void)nout;
    if (ctx->candidates) return kiln_qg_list_paths(ctx);
    bool f16;
    KILN_TRY(kiln_qg_wants_f16(n, ctx, &f16));
    const kiln_cuda_tensor *a = &in[0], *w = &in[1], *y = &out[0];
    kiln_quant_layer ql;
    KILN_TRY(kiln_quant_layer_read(n, &ql));
    if (!qg_is_8bit(a->dtype) || !qg_is_8bit(w->dtype) || w->ndim != 2 || !w->host || a->ndim < 1 ||
        !kiln_qg_out_ok(&ql, y->dtype))
        return kiln_error(KILN_ERR_UNSUPPORTED, "%s '%s': needs 8-bit A, a constant 2-D 8-bit B and a %s output",
                          n->op_type, n->name, kiln_dtype_name(ql.y_dtype));
    int64_t K = w->dims[0], N = w->dims[1];
    if (a->dims[a->ndim - 1] != K || K > QG_MAX_K || (ql.nw != 1 && ql.nw != N))
        return kiln_error(KILN_ERR_SHAPE, "%s '%s': A's last dim %lld, B [%lld, %lld], %d weight scales", n->op_type,
                          n->name, (long long)a->dims[a->ndim - 1], (long long)K, (long long)N, ql.nw);
    const kiln_cuda_tensor *bias;
    KILN_TRY(kiln_qg_host_bias(n, kiln_qg_input(in, nin, 2), N, &bias));
    qg_host_weights hw = {w->host, w->dtype, true, N};
    qg_state *st;
    bool temp;
    KILN_TRY(kiln_qg_state_get(n, &ql, &hw, bias, a->dtype, K, N, 1, ctx, &st, &temp));
    kiln_status s;
    if (f16) {
        s = qg_prepare_f16(n, &ql, &hw, K, st);
        if (s == KILN_OK) s = qg_run_f16(n, &ql, st, a, K, N, y, ctx);
    } else {
        s = qg_run_int8(n, &ql, st, a, K, N, y, ctx);
    }
    return kiln_qg_finish(st, temp, s, ctx);
}

static kiln_status sup_qmatmul(const kiln_graph *g, const kiln_node *n) { return kiln_qg_supports(g, n, 2, 2); }
static kiln_status sup_qconv(const kiln_graph *g, const kiln_node *n) { return kiln_qg_supports(g, n, 3, 4); }

extern "C" const kiln_cuda_kernel kiln_cuda_kernels_quant[] = {
    {"QMatMul", KILN_FUSED_DOMAIN, exec_qmatmul, sup_qmatmul},
    {"QConv", KILN_FUSED_DOMAIN, kiln_qg_exec_qconv, sup_qconv},
    {NULL, NULL, NULL, NULL},
};
