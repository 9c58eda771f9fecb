/* fuzz_serve_request.c — libFuzzer target for the request paths of kiln serve that read untrusted
 * bytes: a KServe v2 inference body (JSON, or JSON followed by binary tensors, split at a length
 * taken from the input as the Inference-Header-Content-Length header would give it) and the
 * response written back for it; a model's config.json; the server's --config file. The first byte
 * picks the reader. Whatever the bytes, the readers must answer 0 or an error with a message, never
 * crash, read out of bounds or leak. */
#include "serve/kserve_tensor.h"
#include "serve/repo.h"
#include "serve/serve.h"

#include <stdlib.h>
#include <string.h>

static void kserve_body(const uint8_t *data, size_t size) {
    if (size < 2) return;
    size_t json_len = ((size_t)data[0] << 8 | data[1]) % (size - 1);
    if (data[0] == 0xff) json_len = size - 2; /* JSON only, as without the binary extension */
    const char *body = (const char *)data + 2;
    size_t len = size - 2;
    serve_infer r = {0};
    kserve_output_request want;
    char msg[512];
    if (!kserve_parse_infer(body, json_len, body + json_len, len - json_len, &r, &want, msg, sizeof msg)) {
        /* answer with the inputs as if they were the outputs: the response writer sees every dtype and shape */
        r.outputs = r.inputs;
        r.n_outputs = r.n_inputs;
        char *out;
        size_t out_len, out_json;
        if (!kserve_build_response("m", "1", &r, &want, &out, &out_len, &out_json, msg, sizeof msg)) free(out);
        r.outputs = NULL;
        r.n_outputs = 0;
    }
    for (int i = 0; i < r.n_inputs; i++) serve_tensor_clear(&r.inputs[i]);
    free(r.inputs);
    kserve_output_request_free(&want);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    const char *text = (const char *)data + 1;
    switch (data[0] % 3) {
    case 0:
        kserve_body(data + 1, size - 1);
        break;
    case 1: {
        serve_model_config c;
        serve_model_config_parse(text, size - 1, "config.json", &c);
        break;
    }
    default: {
        serve_settings s;
        serve_settings_parse(text, size - 1, "--config", &s);
        break;
    }
    }
    return 0;
}
