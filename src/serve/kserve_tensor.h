/* kserve_tensor.h — KServe v2 tensors on the wire: the inference request body (JSON, or JSON
 * followed by raw tensors with the binary-tensor extension) into serve_tensors, and the results
 * back into a response body. */
#ifndef KILN_SERVE_KSERVE_TENSOR_H
#define KILN_SERVE_KSERVE_TENSOR_H

#include "kiln/kiln.h"
#include "serve/batcher.h"

#include <stdbool.h>
#include <stddef.h>

/* "FP32", "INT64", ... for a dtype, NULL for one KServe cannot carry. */
const char *kserve_datatype(kiln_dtype t);

/* What the client asked back: by default every output, as JSON. */
typedef struct kserve_output_request {
    int n_named;               /* 0: every output */
    char (*names)[128];        /* [n_named] */
    bool *binary;              /* [n_named] */
    bool binary_all;           /* parameters.binary_data_output */
    char id[128];              /* the request's "id" ("" if none) */
} kserve_output_request;
void kserve_output_request_free(kserve_output_request *o);

/* Parses a request body: json[0..json_len) is its JSON, bin[0..bin_len) the binary tensors that
 * followed it in input order (bin_len 0 without the binary extension). Fills r->inputs (owned: the
 * caller frees each with serve_tensor_clear and the array with free; binary inputs point into bin,
 * which must outlive them) and *out. Returns 0, or 400 with a message naming the field. */
int kserve_parse_infer(const char *json, size_t json_len, const char *bin, size_t bin_len, serve_infer *r,
                       kserve_output_request *out, char *msg, size_t msg_size);

/* The response for a finished request: *body (malloc'ed) of *len bytes whose first *json_len bytes
 * are JSON; binary outputs follow. 0, or 400 when an asked output does not exist. */
int kserve_build_response(const char *model, const char *version, const serve_infer *r, const kserve_output_request *o,
                          char **body, size_t *len, size_t *json_len, char *msg, size_t msg_size);

#endif
