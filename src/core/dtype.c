/* dtype.c — names and sizes of element types. */
#include "kiln/kiln.h"

const char *kiln_dtype_name(kiln_dtype t) {
    switch (t) {
    case KILN_UNDEFINED: return "undefined";
    case KILN_F32: return "float32";
    case KILN_U8: return "uint8";
    case KILN_I8: return "int8";
    case KILN_U16: return "uint16";
    case KILN_I16: return "int16";
    case KILN_I32: return "int32";
    case KILN_I64: return "int64";
    case KILN_STRING: return "string";
    case KILN_BOOL: return "bool";
    case KILN_F16: return "float16";
    case KILN_F64: return "float64";
    case KILN_U32: return "uint32";
    case KILN_U64: return "uint64";
    case KILN_C64: return "complex64";
    case KILN_C128: return "complex128";
    case KILN_BF16: return "bfloat16";
    case KILN_F8E4M3FN: return "float8e4m3fn";
    case KILN_F8E4M3FNUZ: return "float8e4m3fnuz";
    case KILN_F8E5M2: return "float8e5m2";
    case KILN_F8E5M2FNUZ: return "float8e5m2fnuz";
    case KILN_U4: return "uint4";
    case KILN_I4: return "int4";
    case KILN_DTYPE_COUNT: break;
    }
    return "?";
}

size_t kiln_dtype_size(kiln_dtype t) {
    switch (t) {
    case KILN_BOOL: case KILN_U8: case KILN_I8: case KILN_F8E4M3FN: case KILN_F8E4M3FNUZ:
    case KILN_F8E5M2: case KILN_F8E5M2FNUZ: return 1;
    case KILN_U16: case KILN_I16: case KILN_F16: case KILN_BF16: return 2;
    case KILN_F32: case KILN_I32: case KILN_U32: return 4;
    case KILN_F64: case KILN_I64: case KILN_U64: case KILN_C64: return 8;
    case KILN_C128: return 16;
    default: return 0;
    }
}
