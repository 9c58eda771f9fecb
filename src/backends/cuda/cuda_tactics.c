/* cuda_tactics.c — tactics as the kernels and inspect see them: what a kernel does when the node's
 * recorded tactic cannot run (fail while tuning, else warn once and follow the heuristic), and a
 * tactic described in words for `kiln inspect` and the tuning log. */
#include "backends/cuda/cuda_internal.h"

#include "core/log.h"
#include "core/status.h"

#include <stdio.h>

static const char *const g_cudnn_algos[] = {"IMPLICIT_GEMM", "IMPLICIT_PRECOMP_GEMM", "GEMM", "DIRECT",
                                            "FFT", "FFT_TILING", "WINOGRAD", "WINOGRAD_NONFUSED"};

kiln_status kiln_cuda_tactic_rejected(const kiln_node *n, kiln_cuda_ctx *ctx, const char *why) {
    if (ctx->tactic_strict) return kiln_error(KILN_ERR_UNSUPPORTED, "%s '%s': tactic rejected: %s", n->op_type, n->name, why);
    if (ctx->tactic_warned && !__atomic_exchange_n(ctx->tactic_warned, (unsigned char)1, __ATOMIC_RELAXED))
        KILN_LOG(KILN_LOG_WARN, "cuda: node '%s' (%s): its tuned tactic cannot run here (%s); the library's heuristic "
                 "chooses instead (rebuild the engine on this machine to tune it again)", n->name, n->op_type, why);
    return KILN_OK;
}

void kiln_cuda_tactic_str(const kiln_tactic *t, char *buf, size_t cap) {
    char gain[64] = "the heuristic's own choice";
    if (t->heuristic_index != 0 && t->heuristic_ms > 0 && t->time_ms > 0)
        snprintf(gain, sizeof gain, "%.2fx vs heuristic", (double)(t->heuristic_ms / t->time_ms));
    else if (t->heuristic_index != 0)
        snprintf(gain, sizeof gain, "heuristic's candidate %d", t->heuristic_index);
    if (t->kind == KILN_TACTIC_CUBLASLT) {
        snprintf(buf, cap, "cublasLt algo %d (tuned, %s)", t->algo, gain);
    } else if (t->kind == KILN_TACTIC_CUDNN) {
        const char *ops = t->math == CUDNN_TENSOR_OP_MATH || t->math == CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION ? ", tensor ops" : "";
        if (t->algo >= 0 && t->algo < (int)(sizeof g_cudnn_algos / sizeof *g_cudnn_algos))
            snprintf(buf, cap, "cudnn %s%s (tuned, %s)", g_cudnn_algos[t->algo], ops, gain);
        else
            snprintf(buf, cap, "cudnn algo %d%s (tuned, %s)", t->algo, ops, gain);
    } else if (t->kind == KILN_TACTIC_PATH && t->algo == 1) {
        snprintf(buf, cap, "fp16 GEMM (tuned: %.4f ms, int8 %.4f ms)", (double)t->time_ms, (double)t->heuristic_ms);
    } else if (t->kind == KILN_TACTIC_PATH) {
        if (t->algo == 0) snprintf(buf, cap, "int8 IMMA GEMM (tuned: %.4f ms)", (double)t->time_ms);
        else snprintf(buf, cap, "int8 path %d (tuned: %.4f ms; kiln.QConv: 2-5 implicit-GEMM tiles, 6 cuBLASLt GEMM, 7 split-K)",
                      t->algo, (double)t->time_ms);
    } else {
        snprintf(buf, cap, "heuristic");
    }
}
