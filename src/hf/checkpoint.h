/* checkpoint.h — a Hugging Face checkpoint directory: config.json plus the weights, either one
 * model.safetensors or the shards that model.safetensors.index.json maps tensor names to. Tensors are
 * found by name across shards, accepting the name variants found on the hub (with or without a
 * "transformer." or "model." prefix), and converted to FP32 on request. */
#ifndef KILN_HF_CHECKPOINT_H
#define KILN_HF_CHECKPOINT_H

#include "core/json_read.h"
#include "hf/safetensors.h"

typedef struct kiln_hf_checkpoint kiln_hf_checkpoint;

/* Opens dir: parses config.json and maps every weight file. Errors name the file at fault:
 * KILN_ERR_IO (missing config.json or weights; a directory with only pytorch_model.bin says so),
 * KILN_ERR_PARSE (bad JSON, a malformed index or safetensors file). Caller owns *out. */
kiln_status kiln_hf_checkpoint_open(const char *dir, kiln_hf_checkpoint **out);
void kiln_hf_checkpoint_free(kiln_hf_checkpoint *ck); /* accepts NULL */

/* Parses the JSON object in the file at path into doc (caller frees it, also on failure). Errors:
 * KILN_ERR_IO naming path and `role` (what the file is for) when it is missing, KILN_ERR_PARSE for
 * bad JSON or a value other than an object. */
kiln_status kiln_hf_read_json(const char *path, const char *role, kiln_jdoc *doc);

/* The parsed config.json (its root is an object); borrowed, valid while ck lives. */
const kiln_jdoc *kiln_hf_checkpoint_config(const kiln_hf_checkpoint *ck);
/* The checkpoint's directory, for messages. */
const char *kiln_hf_checkpoint_dir(const kiln_hf_checkpoint *ck);

/* The tensor called name, else the same name with its leading "transformer." / "model." removed,
 * else with one of those prefixes added; NULL when none exists. Borrowed, valid while ck lives. */
const kiln_st_tensor *kiln_hf_checkpoint_find(const kiln_hf_checkpoint *ck, const char *name);

/* The number of values (elements) of all the checkpoint's tensors together, and of tensors. */
void kiln_hf_checkpoint_extent(const kiln_hf_checkpoint *ck, int64_t *values, int *tensors);

/* Converts an F32, F16 or BF16 tensor to numel floats at dst; KILN_ERR_UNSUPPORTED naming the tensor
 * for other dtypes. */
kiln_status kiln_hf_tensor_to_f32(const kiln_st_tensor *t, float *dst);

#endif
