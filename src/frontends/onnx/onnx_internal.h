/* onnx_internal.h — state and helpers shared by the ONNX frontend's files (onnx_import.c reads
 * ModelProto/GraphProto/NodeProto, onnx_tensor.c reads TensorProto). Not part of any public API.
 *
 * Error messages are built from three parts: the file label ("model.onnx"), a path of what is being
 * read ("NodeProto 'conv1' attribute 'pads'", pushed and popped as the reader descends), and the
 * problem itself, with a byte offset into the file for wire-format errors. */
#ifndef KILN_ONNX_INTERNAL_H
#define KILN_ONNX_INTERNAL_H

#include "core/file.h"
#include "core/tensor.h"
#include "frontends/onnx/protobuf.h"
#include "ir/graph.h"

#include <stdbool.h>
#include <stddef.h>

/* A byte string inside the model buffer (not NUL-terminated). */
typedef struct onnx_str {
    const char *p;
    size_t n;
} onnx_str;

/* An external-data file mapped during an import. */
typedef struct onnx_ext_file {
    char *location;     /* as written in the model (malloc'd) */
    kiln_file_map *map; /* owned by the ctx when it has no root graph, else by the root graph */
} onnx_ext_file;

typedef struct onnx_ctx {
    const char *file;      /* label used in messages */
    const uint8_t *base;   /* first byte of the buffer being read (for offsets) */
    const char *base_dir;  /* directory for external data, or NULL */
    kiln_graph *root;      /* keeps external-data mappings alive; NULL: the ctx owns them */
    onnx_ext_file *ext;
    int n_ext, cap_ext;
    int depth;             /* subgraph nesting */
    char where[768];
    size_t wlen;
} onnx_ctx;

/* Subgraphs nested deeper than this are refused. */
#define ONNX_MAX_GRAPH_DEPTH 16

/* Unmaps the files the ctx owns and frees its bookkeeping. */
void onnx_ctx_release(onnx_ctx *c);

/* Appends " <what> '<name>'" (name sanitized and shortened) to the context path; returns the length
 * to restore with onnx_where_pop. name.p == NULL appends " <what>" only. */
size_t onnx_where_push(onnx_ctx *c, const char *what, onnx_str name);
static inline void onnx_where_pop(onnx_ctx *c, size_t saved) {
    c->wlen = saved;
    c->where[saved] = 0;
}

/* Sets the error "<file>: <where>: <message>" and returns s. */
kiln_status onnx_fail(onnx_ctx *c, kiln_status s, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* Fails (KILN_ERR_PARSE, naming the format) when d starts like a file that is not ONNX but is given
 * as one: a kiln engine, a NumPy array or a safetensors file; otherwise returns KILN_OK. */
kiln_status onnx_refuse_other_formats(onnx_ctx *c, const uint8_t *d, size_t size);
/* Prefixes the current error message (set by another module) with "<file>: <where>" and returns s. */
kiln_status onnx_prefix(onnx_ctx *c, kiln_status s);
/* A wire-format error at byte `at` of the buffer (KILN_ERR_PARSE). */
kiln_status onnx_pb_fail(onnx_ctx *c, kiln_pb_err e, const uint8_t *at);
/* Fails unless field f has wire type w; `field` names it ("op_type"). */
kiln_status onnx_want(onnx_ctx *c, const kiln_pb_field *f, kiln_pb_wire w, const char *field);

/* Reads the next field of r, turning a wire error into a status. */
kiln_status onnx_next(onnx_ctx *c, kiln_pb *r, kiln_pb_field *f);
/* The last LEN value of field `number` in msg, stopping quietly at the first malformed byte (used
 * only to label error messages before the message is read for real). */
onnx_str onnx_peek_string(kiln_pb msg, uint32_t number);

/* Collects every element of repeated scalar field `number` of msg (packed or not, elements encoded
 * with elem) into a malloc'd array of raw 64-bit values (*out is NULL when *n == 0). `field` names
 * the field in messages. The caller frees *out. */
kiln_status onnx_repeated(onnx_ctx *c, kiln_pb msg, uint32_t number, kiln_pb_wire elem, const char *field,
                          uint64_t **out, size_t *n);

/* The directory part of path ("." when there is none), malloc'd; NULL on out of memory. */
char *onnx_dirname(const char *path);

/* Reads a TensorProto into *out: a view into the buffer (or a mapped external-data file) when
 * zero_copy is allowed and the data is suitably aligned, otherwise an owned copy. *name (if not NULL)
 * receives the tensor's name, pointing into the buffer. On failure *out is left empty. */
kiln_status onnx_tensor_load(onnx_ctx *c, kiln_pb msg, bool zero_copy, kiln_tensor *out, onnx_str *name);

#endif
