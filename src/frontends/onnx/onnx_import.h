/* onnx_import.h — the ONNX frontend: ModelProto (mmap'd, zero-copy) -> kiln_graph. */
#ifndef KILN_ONNX_IMPORT_H
#define KILN_ONNX_IMPORT_H

#include "core/tensor.h"
#include "ir/graph.h"

/* Imports the model at path. Initializers become constant values pointing into the mapped file (or
 * into mapped external-data files, resolved relative to the model's directory); Constant nodes
 * become constant values; graph inputs that are also initializers stay constants (ONNX IR >= 4
 * semantics: an initializer listed as an input is an overridable default; kiln treats it as
 * constant). Dimension names (dim_param) become symbols; missing dims become unknown.
 * Does not check op support (see kiln_graph_resolve_ops). On success the caller owns *out.
 * Errors name the file and what is malformed (KILN_ERR_IO / KILN_ERR_PARSE). */
kiln_status kiln_onnx_import(const char *path, kiln_graph **out);
/* Same from a buffer that the caller keeps alive as long as the graph. base_dir (may be NULL)
 * resolves external data. */
kiln_status kiln_onnx_import_buffer(const void *data, size_t size, const char *base_dir, kiln_graph **out);
/* Reads a serialized TensorProto file (the ONNX test-data .pb format) into a freshly allocated,
 * owned tensor. *name, if name != NULL, receives a malloc'd copy of the tensor's name (caller frees). */
kiln_status kiln_onnx_read_tensor_file(const char *path, kiln_tensor *out, char **name);

#endif
