/* npy.h — NumPy .npy files (format versions 1-3, little-endian, C order) in and out. */
#ifndef KILN_CORE_NPY_H
#define KILN_CORE_NPY_H

#include "core/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Reads path into a freshly allocated, owned tensor. Errors (KILN_ERR_IO / KILN_ERR_PARSE /
 * KILN_ERR_UNSUPPORTED) name the file and the problem (bad magic, big-endian, Fortran order, dtype). */
kiln_status kiln_npy_read(const char *path, kiln_tensor *out);
/* Parses an in-memory .npy image (copying the data). */
kiln_status kiln_npy_parse(const void *buf, size_t size, const char *what, kiln_tensor *out);
/* Writes t to path (format version 1.0). */
kiln_status kiln_npy_write(const char *path, const kiln_tensor *t);

#ifdef __cplusplus
}
#endif
#endif
