/* llm_engine_open.c — one way in for kiln_llm_open: a checkpoint directory (config, safetensors,
 * tokenizer.json, tokenizer_config.json, generation_config.json) or an LLM engine built from one. */
#include "llm/llm_engine_internal.h"

#include "core/file.h"
#include "core/status.h"
#include "hf/checkpoint.h"
#include "llm/llm_deferred.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Adds v to ids when it is a non-negative integer (generation ignores the others, as before). */
static kiln_status add_id(const char *path, double v, int32_t *ids, int *n) {
    if (!(v >= 0 && v <= INT32_MAX && v == floor(v))) return KILN_OK;
    if (*n == KILN_LLM_MAX_EOS)
        return kiln_error(KILN_ERR_UNSUPPORTED, "%s: \"eos_token_id\" lists more than %d ids", path, KILN_LLM_MAX_EOS);
    ids[(*n)++] = (int32_t)v;
    return KILN_OK;
}

kiln_status kiln_llm_read_generation_eos(const char *dir, int32_t *ids, int *n) {
    *n = 0;
    char path[4096];
    if ((size_t)snprintf(path, sizeof path, "%s/generation_config.json", dir) >= sizeof path)
        return kiln_error(KILN_ERR_INVALID_ARGUMENT, "checkpoint directory path is too long");
    if (access(path, F_OK)) return KILN_OK;
    kiln_jdoc doc = {0};
    kiln_status s = kiln_hf_read_json(path, "generation config", &doc);
    if (s == KILN_OK) {
        const kiln_jnode *eos = kiln_jdoc_get(&doc, kiln_jdoc_root(&doc), "eos_token_id");
        double v;
        if (kiln_jdoc_num(eos, &v)) s = add_id(path, v, ids, n);
        for (const kiln_jnode *e = eos && eos->type == KILN_JNODE_ARRAY ? kiln_jdoc_first(&doc, eos) : NULL;
             e && s == KILN_OK; e = kiln_jdoc_next(&doc, e))
            if (kiln_jdoc_num(e, &v)) s = add_id(path, v, ids, n);
    }
    kiln_jdoc_free(&doc);
    return s;
}

/* dir/name's text (NUL-terminated) into *out; *out NULL when the file is absent. */
static kiln_status read_optional_text(const char *dir, const char *name, char **out) {
    *out = NULL;
    char path[4096];
    if ((size_t)snprintf(path, sizeof path, "%s/%s", dir, name) >= sizeof path)
        return kiln_error(KILN_ERR_INVALID_ARGUMENT, "checkpoint directory path is too long");
    if (access(path, F_OK)) return KILN_OK;
    kiln_file_map m = {0};
    KILN_TRY(kiln_file_map_open(path, &m));
    if ((*out = malloc(m.size + 1))) {
        if (m.size) memcpy(*out, m.data, m.size);
        (*out)[m.size] = 0;
    }
    kiln_file_unmap(&m);
    return *out ? KILN_OK : kiln_error(KILN_ERR_OUT_OF_MEMORY, "out of memory reading %s", path);
}

/* The precision a directory's weights are in as opened: a deferred model's checkpoint dtype, else fp32. */
static kiln_precision stored_precision(const kiln_llm_model *m) {
    kiln_dtype t = kiln_llm_model_stored_dtype(m);
    return t == KILN_BF16 ? KILN_PRECISION_BF16 : t == KILN_F16 ? KILN_PRECISION_FP16 : KILN_PRECISION_FP32;
}

static kiln_status open_dir(const char *dir, bool with_tokenizer, bool device_weights, kiln_llm_bundle *b) {
    KILN_TRY(device_weights ? kiln_llm_model_load_hf_deferred(dir, &b->model) : kiln_llm_model_load_hf(dir, &b->model));
    b->weights = stored_precision(b->model);
    char path[4096];
    snprintf(path, sizeof path, "%s/tokenizer.json", dir);
    if (with_tokenizer && !access(path, F_OK)) {
        KILN_TRY(kiln_tokenizer_load(dir, &b->tok));
        KILN_TRY(read_optional_text(dir, "tokenizer_config.json", &b->tokenizer_config));
    }
    return kiln_llm_read_generation_eos(dir, b->gen_eos, &b->n_gen_eos);
}

static kiln_status open_engine(const char *path, bool with_tokenizer, bool device_weights, kiln_llm_bundle *b) {
    kiln_llm_engine_info info;
    kiln_tokenizer **tok = with_tokenizer ? &b->tok : NULL;
    KILN_TRY(device_weights ? kiln_llm_engine_load_for_device(path, &info, &b->model, tok)
                            : kiln_llm_engine_load_any(path, &info, &b->model, tok));
    memcpy(b->gen_eos, info.gen_eos, sizeof b->gen_eos);
    b->n_gen_eos = info.n_gen_eos;
    b->from_engine = true;
    b->weights = info.meta.precision;
    if (b->tok) {
        b->tokenizer_config = info.tokenizer_config;
        info.tokenizer_config = NULL;
    }
    kiln_llm_engine_info_free(&info);
    return KILN_OK;
}

kiln_status kiln_llm_bundle_open(const char *path, bool with_tokenizer, bool device_weights, kiln_llm_bundle *b) {
    memset(b, 0, sizeof *b);
    struct stat st;
    bool dir = stat(path, &st) == 0 && S_ISDIR(st.st_mode);
    kiln_status s = dir ? open_dir(path, with_tokenizer, device_weights, b)
                        : open_engine(path, with_tokenizer, device_weights, b);
    if (s != KILN_OK) {
        kiln_llm_bundle_free(b);
        return s;
    }
    int n = kiln_llm_weights_list(b->model, NULL);
    kiln_llm_weight *w = calloc((size_t)n, sizeof *w);
    if (!w) {
        kiln_llm_bundle_free(b);
        return kiln_error(KILN_ERR_OUT_OF_MEMORY, "out of memory");
    }
    kiln_llm_weights_list(b->model, w);
    for (int i = 0; i < n; i++) b->n_params += w[i].dims[0] * (w[i].ndim == 2 ? w[i].dims[1] : 1);
    free(w);
    return KILN_OK;
}

void kiln_llm_bundle_free(kiln_llm_bundle *b) {
    kiln_llm_model_free(b->model);
    kiln_tokenizer_free(b->tok);
    free(b->tokenizer_config);
    memset(b, 0, sizeof *b);
}
