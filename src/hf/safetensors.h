/* safetensors.h — a strict, zero-copy reader of the safetensors format (Hugging Face weights): an
 * 8-byte little-endian header length, a JSON header mapping each tensor name to its dtype, shape and
 * data_offsets (relative to the byte buffer after the header), then the byte buffer. Every field is
 * validated before a tensor is handed out: offsets inside the file, byte count = product(shape) x
 * dtype size, no two tensors overlapping. The "__metadata__" entry is ignored. */
#ifndef KILN_HF_SAFETENSORS_H
#define KILN_HF_SAFETENSORS_H

#include "core/file.h"
#include "core/json_read.h"

#include <stddef.h>
#include <stdint.h>

/* Largest header accepted (the format's own limit: 100 MB). */
#define KILN_SAFETENSORS_MAX_HEADER 100000000u

typedef struct kiln_st_tensor {
    const char *name;    /* borrowed from the file's header document */
    kiln_dtype dtype;    /* F32, F16, BF16 for weights; integer / bool dtypes for other buffers */
    int ndim;
    int64_t dims[KILN_MAX_DIMS];
    const void *data;    /* into the mapped file; not aligned in general (read with memcpy) */
    size_t nbytes;       /* product(dims) x dtype size */
} kiln_st_tensor;

typedef struct kiln_safetensors {
    char *path;          /* owned copy, for messages */
    kiln_file_map map;   /* empty when parsed from a caller's buffer */
    kiln_jdoc header;
    kiln_st_tensor *tensors;
    int n_tensors;
} kiln_safetensors;

/* Maps and validates path. Errors (KILN_ERR_IO, KILN_ERR_PARSE, KILN_ERR_UNSUPPORTED for a dtype
 * kiln does not know) name the file and, where one is at fault, the tensor. On success the caller
 * releases *out with kiln_safetensors_close; on failure *out is left closed. */
kiln_status kiln_safetensors_open(const char *path, kiln_safetensors *out);
/* Validates the image data[0..size) without copying it: tensor data points into `data`, which must
 * outlive *out. `what` names the image in messages. */
kiln_status kiln_safetensors_parse(const void *data, size_t size, const char *what, kiln_safetensors *out);
/* Releases everything open/parse acquired; accepts a zeroed or already closed value. */
void kiln_safetensors_close(kiln_safetensors *st);

/* The tensor called name, or NULL. */
const kiln_st_tensor *kiln_safetensors_find(const kiln_safetensors *st, const char *name);

#endif
