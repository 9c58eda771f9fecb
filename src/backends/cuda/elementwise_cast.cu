/* elementwise_cast.cu — Cast and CastLike on the device, and kiln_cuda_cast, the runtime's
 * conversion of bound inputs and outputs between the model's dtypes and the engine's.
 *
 * Conversions follow the CPU kernels (src/backends/cpu/elementwise_cast.c): integer -> integer
 * keeps the low bits; float -> integer truncates toward zero (NaN and out-of-range values give the
 * low bits of INT64_MIN); anything -> bool is v != 0; every conversion to a float type rounds once,
 * to nearest even. Between the float types (float32, float16, bfloat16) a templated kernel moves
 * 16-byte vectors; every other pair goes through a generic kernel that widens each element to
 * double or int64 and narrows it to the destination. The same dtype is a device-to-device copy. */
#include "backends/cuda/elementwise.cuh"

#include "backends/cuda/cuda_launchers.h"

/* Every dtype the cast kernels convert: numeric types (float64 included, for the runtime's boundary
 * casts) and bool. */
static bool cast_dtype_ok(kiln_dtype t) { return ku_is_float(t) || t == KILN_F64 || ku_is_int(t) || t == KILN_BOOL; }

/* ---------------------------------------------------------------- float <-> float */

/* d[i] = s[i] rounded into D, for i < n (through float32, exact for the source). vec: both
 * pointers are 16-byte aligned. */
template <typename S, typename D>
__global__ void __launch_bounds__(KU_THREADS) cast_float_kernel(const S *s, D *d, int64_t n, bool vec) {
    int64_t stride = (int64_t)gridDim.x * blockDim.x, tid = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    int64_t done = 0;
    if (vec) { /* 16 bytes of the wider type per step: V elements of each */
        const int V = (ku_vec<S>::n < ku_vec<D>::n) ? ku_vec<S>::n : ku_vec<D>::n;
        int64_t nv = n / V;
        for (int64_t v = tid; v < nv; v += stride) {
            S a[V];
            D r[V];
            ku_load(a, s + v * V);
#pragma unroll
            for (int k = 0; k < V; k++) r[k] = ku_from_f32<D>(ku_f32(a[k]));
            ku_store(d + v * V, r);
        }
        done = nv * V;
    }
    for (int64_t i = done + tid; i < n; i += stride) d[i] = ku_from_f32<D>(ku_f32(s[i]));
}

template <typename S, typename D>
static kiln_status cast_float_go(const void *src, void *dst, int64_t n, cudaStream_t stream, int sms) {
    bool vec = ku_aligned16(src) && ku_aligned16(dst);
    kiln_cuda_ctx c = {};
    c.sm_count = sms;
    cast_float_kernel<S, D><<<ku_blocks(vec ? n / 4 + 1 : n, KU_THREADS, &c), KU_THREADS, 0, stream>>>(
        (const S *)src, (D *)dst, n, vec);
    KILN_CUDA_LAUNCH_CHECK("cast_float_kernel");
    return KILN_OK;
}

template <typename S>
static kiln_status cast_float_to(const void *src, void *dst, kiln_dtype ddt, int64_t n, cudaStream_t stream, int sms) {
    switch (ddt) {
    case KILN_F32: return cast_float_go<S, float>(src, dst, n, stream, sms);
    case KILN_F16: return cast_float_go<S, __half>(src, dst, n, stream, sms);
    default: return cast_float_go<S, bf16>(src, dst, n, stream, sms);
    }
}

/* ---------------------------------------------------------------- generic */

/* An element widened: a double (float sources) or the int64 bits (integer and bool sources;
 * uint64 keeps its bits, flagged unsigned). */
typedef struct wide {
    double f;
    long long i;
    bool is_float, is_unsigned;
} wide;

static __device__ __forceinline__ wide cast_load(const void *p, kiln_dtype t, int64_t i) {
    wide w = {0.0, 0, false, false};
    switch (t) {
    case KILN_F32: w.f = ((const float *)p)[i]; w.is_float = true; break;
    case KILN_F64: w.f = ((const double *)p)[i]; w.is_float = true; break;
    case KILN_F16: w.f = __half2float(((const __half *)p)[i]); w.is_float = true; break;
    case KILN_BF16: w.f = __bfloat162float(((const bf16 *)p)[i]); w.is_float = true; break;
    case KILN_I8: w.i = ((const int8_t *)p)[i]; break;
    case KILN_I16: w.i = ((const int16_t *)p)[i]; break;
    case KILN_I32: w.i = ((const int32_t *)p)[i]; break;
    case KILN_I64: w.i = ((const int64_t *)p)[i]; break;
    case KILN_U16: w.i = ((const uint16_t *)p)[i]; break;
    case KILN_U32: w.i = ((const uint32_t *)p)[i]; break;
    case KILN_U64: w.i = (long long)((const uint64_t *)p)[i]; w.is_unsigned = true; break;
    default: w.i = ((const uint8_t *)p)[i]; break; /* U8, BOOL */
    }
    return w;
}

/* double -> int64 bits: truncation toward zero on [-2^63, 2^63), [2^63, 2^64) as uint64 when the
 * destination is uint64, else INT64_MIN (NaN too). */
static __device__ __forceinline__ long long f64_to_bits(double v, bool to_u64) {
    if (v >= -9223372036854775808.0 && v < 9223372036854775808.0) return (long long)v;
    if (to_u64 && v >= 9223372036854775808.0 && v < 18446744073709551616.0)
        return (long long)((unsigned long long)(v - 9223372036854775808.0) + (1ull << 63));
    return (long long)INT64_MIN;
}

static __device__ __forceinline__ void cast_store(void *p, kiln_dtype t, int64_t i, wide w) {
    if (t == KILN_BOOL) {
        ((uint8_t *)p)[i] = w.is_float ? (uint8_t)(w.f != 0.0) : (uint8_t)(w.i != 0);
        return;
    }
    if (t == KILN_F32 || t == KILN_F64 || t == KILN_F16 || t == KILN_BF16) {
        if (w.is_float) {
            switch (t) {
            case KILN_F32: ((float *)p)[i] = __double2float_rn(w.f); break;
            case KILN_F64: ((double *)p)[i] = w.f; break;
            case KILN_F16: ((__half *)p)[i] = __double2half(w.f); break;
            default: ((bf16 *)p)[i] = __double2bfloat16(w.f); break;
            }
        } else if (w.is_unsigned) {
            unsigned long long u = (unsigned long long)w.i;
            switch (t) {
            case KILN_F32: ((float *)p)[i] = __ull2float_rn(u); break;
            case KILN_F64: ((double *)p)[i] = __ull2double_rn(u); break;
            case KILN_F16: ((__half *)p)[i] = __ull2half_rn(u); break;
            default: ((bf16 *)p)[i] = __ull2bfloat16_rn(u); break;
            }
        } else {
            switch (t) {
            case KILN_F32: ((float *)p)[i] = __ll2float_rn(w.i); break;
            case KILN_F64: ((double *)p)[i] = __ll2double_rn(w.i); break;
            case KILN_F16: ((__half *)p)[i] = __ll2half_rn(w.i); break;
            default: ((bf16 *)p)[i] = __ll2bfloat16_rn(w.i); break;
            }
        }
        return;
    }
    long long v = w.is_float ? f64_to_bits(w.f, t == KILN_U64) : w.i;
    switch (t) {
    case KILN_I8: case KILN_U8: ((uint8_t *)p)[i] = (uint8_t)v; break;
    case KILN_I16: case KILN_U16: ((uint16_t *)p)[i] = (uint16_t)v; break;
    case KILN_I32: case KILN_U32: ((uint32_t *)p)[i] = (uint32_t)v; break;
    default: ((uint64_t *)p)[i] = (uint64_t)v; break; /* I64, U64 */
    }
}

/* d[i] = s[i] converted from sdt to ddt, for i < n (any pair of cast_dtype_ok types). */
__global__ void __launch_bounds__(KU_THREADS)
cast_generic_kernel(const void *s, kiln_dtype sdt, void *d, kiln_dtype ddt, int64_t n) {
    int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
        cast_store(d, ddt, i, cast_load(s, sdt, i));
}

/* ---------------------------------------------------------------- entry points */

/* Converts n elements from src (sdt) to dst (ddt) on stream; sms sizes the grid. */
static kiln_status cast_run(const void *src, kiln_dtype sdt, void *dst, kiln_dtype ddt, int64_t n, cudaStream_t stream,
                            int sms) {
    if (!cast_dtype_ok(sdt) || !cast_dtype_ok(ddt))
        return kiln_error(KILN_ERR_UNSUPPORTED, "cast (cuda): %s to %s is not supported", kiln_dtype_name(sdt),
                          kiln_dtype_name(ddt));
    if (n <= 0) return KILN_OK;
    if (sdt == ddt) {
        if (src != dst)
            KILN_CUDA_TRY(cudaMemcpyAsync(dst, src, (size_t)n * kiln_dtype_size(sdt), cudaMemcpyDeviceToDevice, stream));
        return KILN_OK;
    }
    if (ku_is_float(sdt) && ku_is_float(ddt)) {
        switch (sdt) {
        case KILN_F32: return cast_float_to<float>(src, dst, ddt, n, stream, sms);
        case KILN_F16: return cast_float_to<__half>(src, dst, ddt, n, stream, sms);
        default: return cast_float_to<bf16>(src, dst, ddt, n, stream, sms);
        }
    }
    kiln_cuda_ctx c = {};
    c.sm_count = sms;
    cast_generic_kernel<<<ku_blocks(n, KU_THREADS, &c), KU_THREADS, 0, stream>>>(src, sdt, dst, ddt, n);
    KILN_CUDA_LAUNCH_CHECK("cast_generic_kernel");
    return KILN_OK;
}

extern "C" kiln_status kiln_cuda_cast(const void *src, kiln_dtype sdt, void *dst, kiln_dtype ddt, int64_t n,
                                      cudaStream_t s) {
    int dev, sms;
    KILN_CUDA_TRY(cudaGetDevice(&dev));
    KILN_CUDA_TRY(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
    return cast_run(src, sdt, dst, ddt, n, s, sms);
}

/* Cast to out[0].dtype (the engine's dtype for float targets; the `to` attribute is not read). */
kiln_status kiln_ewc_exec_Cast(EWC_EXEC_ARGS) {
    if (nin < 1 || ku_absent(&in[0])) return kiln_error(KILN_ERR_INVALID_ARGUMENT, "%s: input is missing", n->op_type);
    kiln_status s = cast_run(in[0].data, in[0].dtype, out[0].data, out[0].dtype, ku_numel(&out[0]), ctx->stream,
                             ctx->sm_count);
    return s == KILN_OK ? s : kiln_error_prefix(s, "%s", n->op_type);
}

kiln_status kiln_ewc_exec_CastLike(EWC_EXEC_ARGS) { return kiln_ewc_exec_Cast(n, in, nin, out, nout, ctx); }

kiln_status kiln_ewc_supports_Cast(EWC_SUPPORTS_ARGS) {
    const kiln_value *x = ku_in(g, n, 0), *y = ku_out(g, n, 0);
    if (!x || !y) return kiln_error(KILN_ERR_INVALID_ARGUMENT, "%s: input or output is missing", n->op_type);
    if (!cast_dtype_ok(x->dtype)) return ku_refuse_dtype(n, 0, x->dtype);
    if (!cast_dtype_ok(y->dtype))
        return kiln_error(KILN_ERR_UNSUPPORTED, "%s (cuda): output dtype %s is not supported", n->op_type,
                          kiln_dtype_name(y->dtype));
    return KILN_OK;
}

kiln_status kiln_ewc_supports_CastLike(EWC_SUPPORTS_ARGS) { return kiln_ewc_supports_Cast(g, n); }
