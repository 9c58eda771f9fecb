/* movement_util.cuh — what the data-movement kernel files (movement.cu, movement_pad_slice.cu,
 * movement_gather_scatter.cu) share: host helpers (optional inputs, element sizes, integer lists,
 * scalar bit patterns), the build-time dtype checks, and the strided-copy engine, fill and same-bytes
 * copy that movement.cu defines.
 *
 * Everything but Range and the scatter reductions is dtype-generic: elements move by their byte
 * size (1, 2, 4, 8 or 16). */
#ifndef KILN_CUDA_MOVEMENT_UTIL_CUH
#define KILN_CUDA_MOVEMENT_UTIL_CUH

#include "backends/cuda/kernel_util.cuh"

#include <math.h>

extern "C" {
#include "core/half.h"
#include "ir/shape_calc.h"
}

#define MV_MAX_DIMS (2 * KILN_MAX_DIMS) /* Tile doubles the rank */

/* ---------------------------------------------------------------------------------------------
 * Host helpers
 * ------------------------------------------------------------------------------------------- */

static inline bool mv_present(const kiln_cuda_tensor *t, int nt, int i) { return i < nt && t[i].ndim >= 0; }

/* Element size of a dtype the engine moves (1, 2, 4, 8, 16), or 0. */
static inline size_t mv_esize(kiln_dtype t) {
    size_t es = kiln_dtype_size(t);
    return es == 1 || es == 2 || es == 4 || es == 8 || es == 16 ? es : 0;
}

/* Reads an integer list given as the INTS attribute `name` before opset input_from and as input
 * `idx` from then on; *present is false when neither is given. */
static inline kiln_status mv_list(const kiln_node *n, const kiln_cuda_tensor *in, int nin, int idx, const char *name,
                                  int input_from, int64_t *vals, int cap, int *count, bool *present) {
    *count = 0;
    *present = false;
    if (n->opset < input_from) {
        const int64_t *a = kiln_attr_ints(n, name, count);
        if (!a) return KILN_OK;
        if (*count > cap)
            return kiln_error(KILN_ERR_INVALID_ARGUMENT, "%s: '%s' has %d entries (at most %d)", n->op_type, name, *count, cap);
        memcpy(vals, a, (size_t)*count * sizeof *vals);
        *present = true;
        return KILN_OK;
    }
    if (!mv_present(in, nin, idx)) return KILN_OK;
    *present = true;
    return ku_host_ints(n, &in[idx], name, vals, cap, count);
}

/* The bit pattern of value v stored as dtype t (floats rounded to nearest even, integers truncated
 * toward zero like a C cast, bool v != 0), in the low kiln_dtype_size(t) bytes of *bits. */
static inline kiln_status mv_scalar_bits(const kiln_node *n, kiln_dtype t, double v, int64_t vi, bool is_int, uint64_t *bits) {
    *bits = 0;
    switch (t) {
    case KILN_F32: { float f = is_int ? (float)vi : (float)v; memcpy(bits, &f, 4); break; }
    case KILN_F64: { double d = is_int ? (double)vi : v; memcpy(bits, &d, 8); break; }
    case KILN_F16: *bits = kiln_f32_to_f16(is_int ? (float)vi : (float)v); break;
    case KILN_BF16: *bits = kiln_f32_to_bf16(is_int ? (float)vi : (float)v); break;
    case KILN_BOOL: *bits = is_int ? vi != 0 : v != 0.0; break;
    case KILN_I8: case KILN_U8: case KILN_I16: case KILN_U16: case KILN_I32: case KILN_U32: case KILN_I64: case KILN_U64: {
        int64_t x = is_int ? vi : (isfinite(v) && fabs(v) < 9.2e18 ? (int64_t)v : 0);
        uint64_t u = (uint64_t)x;
        size_t es = kiln_dtype_size(t);
        *bits = es == 8 ? u : u & ((UINT64_C(1) << (8 * es)) - 1);
        break;
    }
    default:
        return kiln_error(KILN_ERR_UNSUPPORTED, "%s: cannot make a %s scalar on the CUDA backend", n->op_type,
                          kiln_dtype_name(t));
    }
    return KILN_OK;
}

static inline bool mv_is_int(kiln_dtype t) {
    return t == KILN_I8 || t == KILN_U8 || t == KILN_I16 || t == KILN_U16 || t == KILN_I32 || t == KILN_U32 ||
           t == KILN_I64 || t == KILN_U64 || t == KILN_BOOL;
}

/* The bit pattern, in dtype t, of element 0 of host tensor src (any numeric dtype). */
static inline kiln_status mv_tensor_bits(const kiln_node *n, kiln_dtype t, const kiln_tensor *src, uint64_t *bits) {
    if (src->dtype == t) {
        *bits = 0;
        memcpy(bits, src->data, kiln_dtype_size(t));
        return KILN_OK;
    }
    if (mv_is_int(src->dtype)) return mv_scalar_bits(n, t, 0.0, kiln_tensor_get_i64(src, 0), true, bits);
    return mv_scalar_bits(n, t, kiln_tensor_get_f64(src, 0), 0, false, bits);
}

/* ---------------------------------------------------------------------------------------------
 * Build-time checks
 * ------------------------------------------------------------------------------------------- */

/* Fails unless input i of n has a dtype the engine moves. */
static inline kiln_status mv_sup_dtype(const kiln_graph *g, const kiln_node *n, int i) {
    const kiln_value *v = kiln_node_input(g, n, i);
    if (v && !mv_esize(v->dtype))
        return kiln_error(KILN_ERR_UNSUPPORTED, "%s: %s data is not supported on the CUDA backend", n->op_type,
                          kiln_dtype_name(v->dtype));
    return KILN_OK;
}

/* Fails unless input i is an int32 or int64 index tensor. */
static inline kiln_status mv_sup_index(const kiln_graph *g, const kiln_node *n, int i) {
    const kiln_value *v = kiln_node_input(g, n, i);
    if (v && v->dtype != KILN_I32 && v->dtype != KILN_I64)
        return kiln_error(KILN_ERR_UNSUPPORTED, "%s: indices must be int32 or int64, got %s", n->op_type,
                          kiln_dtype_name(v->dtype));
    return KILN_OK;
}

static inline kiln_status sup_data(const kiln_graph *g, const kiln_node *n) { return mv_sup_dtype(g, n, 0); }

/* ---------------------------------------------------------------------------------------------
 * Defined in movement.cu
 * ------------------------------------------------------------------------------------------- */

/* Copies a box of es-byte elements (dims, strides in elements: ss in src, ds in dst) from src to
 * dst: unit dims dropped, contiguous dims merged, runs widened to 16/8/4-byte units, transposes of
 * the last two dims through a shared-memory tile. */
kiln_status mv_copy(kiln_cuda_ctx *ctx, size_t es, int r, const int64_t *dims, const void *src, const int64_t *ss,
                    void *dst, const int64_t *ds);
/* Copies dense src (dims) into dense dst permuted: dst dims are dims[perm[i]]. */
kiln_status mv_transpose(kiln_cuda_ctx *ctx, size_t es, int r, const int64_t *dims, const int *perm,
                         const void *src, void *dst);
/* Fills n elements of es bytes at dst with the low es bytes of bits. */
kiln_status mv_fill(kiln_cuda_ctx *ctx, void *dst, size_t es, int64_t n, uint64_t bits);
/* out[0] = in[0]'s bytes (the shapes have the same element count). */
kiln_status mv_copy_same(const kiln_node *n, const kiln_cuda_tensor *x, const kiln_cuda_tensor *y,
                         kiln_cuda_ctx *ctx);

#endif
