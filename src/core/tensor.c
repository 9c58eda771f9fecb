/* tensor.c — host tensor storage and the shape helpers shared by all ops. */
#include "core/tensor.h"

#include "core/half.h"
#include "core/status.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int64_t kiln_numel(int ndim, const int64_t *dims) {
    int64_t n = 1;
    for (int i = 0; i < ndim; i++) n *= dims[i];
    return n;
}

kiln_status kiln_tensor_alloc_uninit(kiln_tensor *t, kiln_dtype dtype, int ndim, const int64_t *dims) {
    kiln_tensor_release(t);
    if (ndim < 0 || ndim > KILN_MAX_DIMS)
        return kiln_error(KILN_ERR_SHAPE, "tensor rank %d is outside 0..%d", ndim, KILN_MAX_DIMS);
    size_t esize = kiln_dtype_size(dtype);
    if (esize == 0) return kiln_error(KILN_ERR_UNSUPPORTED, "tensors of %s are not supported", kiln_dtype_name(dtype));
    int64_t n = 1;
    for (int i = 0; i < ndim; i++) {
        if (dims[i] < 0) return kiln_error(KILN_ERR_SHAPE, "negative dimension %lld", (long long)dims[i]);
        if (dims[i] && n > KILN_MAX_TENSOR_ELEMENTS / dims[i]) {
            char shape[256];
            return kiln_error(KILN_ERR_OUT_OF_MEMORY, "a tensor of shape %s has more than 2^40 elements",
                              kiln_shape_str(shape, sizeof shape, ndim, dims));
        }
        n *= dims[i];
    }
    t->dtype = dtype;
    t->ndim = ndim;
    if (ndim) memcpy(t->dims, dims, (size_t)ndim * sizeof *dims);
    t->nbytes = (size_t)n * esize;
    size_t cap = (t->nbytes + 63) & ~(size_t)63;
    t->data = cap ? aligned_alloc(64, cap) : NULL;
    if (cap && !t->data)
        return kiln_error(KILN_ERR_OUT_OF_MEMORY, "out of memory allocating %zu bytes", t->nbytes);
    t->owned = cap != 0;
    return KILN_OK;
}

kiln_status kiln_tensor_alloc(kiln_tensor *t, kiln_dtype dtype, int ndim, const int64_t *dims) {
    KILN_TRY(kiln_tensor_alloc_uninit(t, dtype, ndim, dims));
    if (t->data) memset(t->data, 0, (t->nbytes + 63) & ~(size_t)63);
    return KILN_OK;
}

void kiln_tensor_view(kiln_tensor *t, kiln_dtype dtype, int ndim, const int64_t *dims, void *data) {
    KILN_ASSERT(ndim >= 0 && ndim <= KILN_MAX_DIMS);
    t->dtype = dtype;
    t->ndim = ndim;
    if (ndim) memcpy(t->dims, dims, (size_t)ndim * sizeof *dims);
    t->nbytes = (size_t)kiln_numel(ndim, dims) * kiln_dtype_size(dtype);
    t->data = data;
    t->owned = false;
}

void kiln_tensor_release(kiln_tensor *t) {
    if (t->owned) free(t->data);
    memset(t, 0, sizeof *t);
}

kiln_status kiln_tensor_copy(kiln_tensor *dst, const kiln_tensor *src) {
    KILN_TRY(kiln_tensor_alloc(dst, src->dtype, src->ndim, src->dims));
    if (src->nbytes) memcpy(dst->data, src->data, src->nbytes);
    return KILN_OK;
}

void kiln_strides(int ndim, const int64_t *dims, int64_t *strides) {
    int64_t s = 1;
    for (int i = ndim - 1; i >= 0; i--) {
        strides[i] = s;
        s *= dims[i];
    }
}

int64_t kiln_tensor_get_i64(const kiln_tensor *t, int64_t i) {
    const void *p = t->data;
    switch (t->dtype) {
    case KILN_I64: return ((const int64_t *)p)[i];
    case KILN_I32: return ((const int32_t *)p)[i];
    case KILN_I16: return ((const int16_t *)p)[i];
    case KILN_I8: return ((const int8_t *)p)[i];
    case KILN_U8: case KILN_BOOL: return ((const uint8_t *)p)[i];
    case KILN_U16: return ((const uint16_t *)p)[i];
    case KILN_U32: return ((const uint32_t *)p)[i];
    case KILN_U64: return (int64_t)((const uint64_t *)p)[i];
    default: return (int64_t)kiln_tensor_get_f64(t, i);
    }
}

double kiln_tensor_get_f64(const kiln_tensor *t, int64_t i) {
    const void *p = t->data;
    switch (t->dtype) {
    case KILN_F32: return ((const float *)p)[i];
    case KILN_F64: return ((const double *)p)[i];
    case KILN_F16: return kiln_f16_to_f32(((const uint16_t *)p)[i]);
    case KILN_BF16: return kiln_bf16_to_f32(((const uint16_t *)p)[i]);
    case KILN_U64: return (double)((const uint64_t *)p)[i];
    default: return (double)kiln_tensor_get_i64(t, i);
    }
}

void kiln_tensor_set_f64(kiln_tensor *t, int64_t i, double v) {
    void *p = t->data;
    switch (t->dtype) {
    case KILN_F32: ((float *)p)[i] = (float)v; break;
    case KILN_F64: ((double *)p)[i] = v; break;
    case KILN_F16: ((uint16_t *)p)[i] = kiln_f32_to_f16((float)v); break;
    case KILN_BF16: ((uint16_t *)p)[i] = kiln_f32_to_bf16((float)v); break;
    case KILN_I64: ((int64_t *)p)[i] = (int64_t)v; break;
    case KILN_I32: ((int32_t *)p)[i] = (int32_t)v; break;
    case KILN_I16: ((int16_t *)p)[i] = (int16_t)v; break;
    case KILN_I8: ((int8_t *)p)[i] = (int8_t)v; break;
    case KILN_U8: ((uint8_t *)p)[i] = (uint8_t)v; break;
    case KILN_BOOL: ((uint8_t *)p)[i] = v != 0; break;
    case KILN_U16: ((uint16_t *)p)[i] = (uint16_t)v; break;
    case KILN_U32: ((uint32_t *)p)[i] = (uint32_t)v; break;
    case KILN_U64: ((uint64_t *)p)[i] = (uint64_t)v; break;
    default: KILN_ASSERT(!"kiln_tensor_set_f64: unsupported dtype");
    }
}

char *kiln_shape_str(char *buf, size_t cap, int ndim, const int64_t *dims) {
    size_t n = 0;
    n += (size_t)snprintf(buf + n, cap - n, "[");
    for (int i = 0; i < ndim && n < cap; i++)
        n += (dims[i] < 0) ? (size_t)snprintf(buf + n, cap - n, "%s?", i ? "," : "")
                           : (size_t)snprintf(buf + n, cap - n, "%s%lld", i ? "," : "", (long long)dims[i]);
    if (n < cap) snprintf(buf + n, cap - n, "]");
    return buf;
}

kiln_status kiln_axis_normalize(int64_t axis, int rank, int *out) {
    if (axis < -rank || axis >= rank || (rank == 0 && axis != 0))
        return kiln_error(KILN_ERR_INVALID_ARGUMENT, "axis %lld is out of range for rank %d", (long long)axis, rank);
    *out = (int)(axis < 0 ? axis + rank : axis);
    return KILN_OK;
}

kiln_status kiln_broadcast_shape(int na, const int64_t *a, int nb, const int64_t *b, int *nout,
                                 int64_t *out) {
    int n = na > nb ? na : nb;
    for (int i = 0; i < n; i++) {
        int64_t da = i < n - na ? 1 : a[i - (n - na)];
        int64_t db = i < n - nb ? 1 : b[i - (n - nb)];
        if (da == db || db == 1) out[i] = da;
        else if (da == 1) out[i] = db;
        else {
            char sa[128], sb[128];
            return kiln_error(KILN_ERR_SHAPE, "shapes %s and %s cannot be broadcast",
                              kiln_shape_str(sa, sizeof sa, na, a), kiln_shape_str(sb, sizeof sb, nb, b));
        }
    }
    *nout = n;
    return KILN_OK;
}

void kiln_broadcast_strides(int nin, const int64_t *in, int nout, const int64_t *out, int64_t *strides) {
    int64_t s = 1;
    for (int i = nout - 1; i >= 0; i--) {
        int j = i - (nout - nin);
        if (j < 0 || in[j] == 1) {
            strides[i] = 0;
            if (j >= 0) s *= in[j];
        } else {
            strides[i] = s;
            s *= in[j];
        }
        (void)out;
    }
}
