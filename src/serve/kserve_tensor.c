/* kserve_tensor.c — KServe v2 inference bodies <-> serve_tensors (contract in kserve_tensor.h). JSON
 * data may be flat or nested row-major; binary tensors are raw little-endian, row-major, unpadded. */
#include "serve/kserve_tensor.h"

#include "core/half.h"

#include <cjson/cJSON.h>
#include <float.h>
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const struct { kiln_dtype t; const char *name; } TYPES[] = {
    {KILN_BOOL, "BOOL"},   {KILN_U8, "UINT8"},   {KILN_U16, "UINT16"}, {KILN_U32, "UINT32"}, {KILN_U64, "UINT64"},
    {KILN_I8, "INT8"},     {KILN_I16, "INT16"},  {KILN_I32, "INT32"},  {KILN_I64, "INT64"},  {KILN_F16, "FP16"},
    {KILN_F32, "FP32"},    {KILN_F64, "FP64"},   {KILN_BF16, "BF16"},
};
#define N_TYPES (int)(sizeof TYPES / sizeof TYPES[0])

const char *kserve_datatype(kiln_dtype t) {
    for (int i = 0; i < N_TYPES; i++)
        if (TYPES[i].t == t) return TYPES[i].name;
    return NULL;
}

static kiln_dtype dtype_of(const char *name) {
    for (int i = 0; i < N_TYPES; i++)
        if (!strcmp(TYPES[i].name, name)) return TYPES[i].t;
    return KILN_UNDEFINED;
}

void kserve_output_request_free(kserve_output_request *o) {
    free(o->names);
    free(o->binary);
    memset(o, 0, sizeof *o);
}

static int bad(char *msg, size_t size, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int bad(char *msg, size_t size, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, size, fmt, ap);
    va_end(ap);
    return 400;
}

static void store(kiln_dtype t, void *data, int64_t i, double v) {
    switch (t) {
    case KILN_BOOL: ((uint8_t *)data)[i] = v != 0; break;
    case KILN_U8: ((uint8_t *)data)[i] = (uint8_t)v; break;
    case KILN_U16: ((uint16_t *)data)[i] = (uint16_t)v; break;
    case KILN_U32: ((uint32_t *)data)[i] = (uint32_t)v; break;
    case KILN_U64: ((uint64_t *)data)[i] = (uint64_t)v; break;
    case KILN_I8: ((int8_t *)data)[i] = (int8_t)v; break;
    case KILN_I16: ((int16_t *)data)[i] = (int16_t)v; break;
    case KILN_I32: ((int32_t *)data)[i] = (int32_t)v; break;
    case KILN_I64: ((int64_t *)data)[i] = (int64_t)v; break;
    case KILN_F16: ((uint16_t *)data)[i] = kiln_f32_to_f16((float)v); break;
    case KILN_BF16: ((uint16_t *)data)[i] = kiln_f32_to_bf16((float)v); break;
    case KILN_F32: ((float *)data)[i] = (float)v; break;
    default: ((double *)data)[i] = v; break;
    }
}

/* Element i of data as a double. data may be a binary input read where it lies in the request body,
 * aligned to nothing: each element is copied out before it is read. */
static double load(kiln_dtype t, const void *data, int64_t i) {
    const char *p = (const char *)data + (size_t)i * kiln_dtype_size(t);
    switch (t) {
    case KILN_BOOL: case KILN_U8: { uint8_t v; memcpy(&v, p, sizeof v); return v; }
    case KILN_U16: { uint16_t v; memcpy(&v, p, sizeof v); return v; }
    case KILN_U32: { uint32_t v; memcpy(&v, p, sizeof v); return v; }
    case KILN_U64: { uint64_t v; memcpy(&v, p, sizeof v); return (double)v; }
    case KILN_I8: { int8_t v; memcpy(&v, p, sizeof v); return v; }
    case KILN_I16: { int16_t v; memcpy(&v, p, sizeof v); return v; }
    case KILN_I32: { int32_t v; memcpy(&v, p, sizeof v); return v; }
    case KILN_I64: { int64_t v; memcpy(&v, p, sizeof v); return (double)v; }
    case KILN_F16: { uint16_t v; memcpy(&v, p, sizeof v); return kiln_f16_to_f32(v); }
    case KILN_BF16: { uint16_t v; memcpy(&v, p, sizeof v); return kiln_bf16_to_f32(v); }
    case KILN_F32: { float v; memcpy(&v, p, sizeof v); return v; }
    default: { double v; memcpy(&v, p, sizeof v); return v; }
    }
}

/* Whether v converts to an element of type t without leaving its range (the conversion is undefined
 * behaviour outside it): integers truncate toward zero, floats round; NaN only into floating types. */
static bool fits(kiln_dtype t, double v) {
    switch (t) {
    case KILN_BOOL: return true; /* stored as v != 0 */
    case KILN_U8: return v > -1.0 && v < 256.0;
    case KILN_U16: return v > -1.0 && v < 65536.0;
    case KILN_U32: return v > -1.0 && v < 4294967296.0;
    case KILN_U64: return v > -1.0 && v < 18446744073709551616.0;
    case KILN_I8: return v > -129.0 && v < 128.0;
    case KILN_I16: return v > -32769.0 && v < 32768.0;
    case KILN_I32: return v > -2147483649.0 && v < 2147483648.0;
    case KILN_I64: return v >= -9223372036854775808.0 && v < 9223372036854775808.0;
    case KILN_F16: case KILN_BF16: case KILN_F32: return isnan(v) || fabs(v) <= FLT_MAX;
    default: return true;
    }
}

/* Walks nested arrays of numbers (or booleans) into t->data; *at counts the elements seen. */
static int flatten(const cJSON *v, serve_tensor *t, int64_t n, int64_t *at, int depth, char *msg, size_t size) {
    if (depth > KILN_MAX_DIMS + 1) return bad(msg, size, "input '%s': 'data' is nested too deeply", t->name);
    if (cJSON_IsArray(v)) {
        const cJSON *e;
        cJSON_ArrayForEach(e, v) {
            int st = flatten(e, t, n, at, depth + 1, msg, size);
            if (st) return st;
        }
        return 0;
    }
    double x;
    if (cJSON_IsNumber(v)) x = v->valuedouble;
    else if (cJSON_IsBool(v) && t->dtype == KILN_BOOL) x = cJSON_IsTrue(v);
    else return bad(msg, size, "input '%s': element %lld of 'data' is not a number", t->name, (long long)*at);
    if (!fits(t->dtype, x))
        return bad(msg, size, "input '%s': element %lld of 'data' (%g) is outside the range of %s", t->name,
                   (long long)*at, x, kiln_dtype_name(t->dtype));
    if (*at < n) store(t->dtype, t->data, *at, x); /* more are counted for the message */
    (*at)++;
    return 0;
}

static int parse_input(const cJSON *in, serve_tensor *t, size_t json_len, const char *bin, size_t bin_len, size_t *bin_at,
                       char *msg, size_t size) {
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(in, "name");
    const cJSON *dt = cJSON_GetObjectItemCaseSensitive(in, "datatype");
    const cJSON *shape = cJSON_GetObjectItemCaseSensitive(in, "shape");
    const cJSON *data = cJSON_GetObjectItemCaseSensitive(in, "data");
    const cJSON *params = cJSON_GetObjectItemCaseSensitive(in, "parameters");
    const cJSON *bsize = cJSON_GetObjectItemCaseSensitive(params, "binary_data_size");
    if (!cJSON_IsString(name) || strlen(name->valuestring) >= sizeof t->name)
        return bad(msg, size, "every input needs a 'name' string");
    snprintf(t->name, sizeof t->name, "%s", name->valuestring);
    if (!cJSON_IsString(dt)) return bad(msg, size, "input '%s' needs a 'datatype' string", t->name);
    t->dtype = dtype_of(dt->valuestring);
    if (t->dtype == KILN_UNDEFINED)
        return bad(msg, size, "input '%s': datatype '%.40s' is not one kiln serves (BOOL, UINT8..64, INT8..64, FP16, "
                   "BF16, FP32, FP64)", t->name, dt->valuestring);
    if (!cJSON_IsArray(shape) || cJSON_GetArraySize(shape) > KILN_MAX_DIMS)
        return bad(msg, size, "input '%s' needs a 'shape' list of at most %d dimensions", t->name, KILN_MAX_DIMS);
    int64_t n = 1;
    const cJSON *d;
    t->ndim = 0;
    cJSON_ArrayForEach(d, shape) {
        if (!cJSON_IsNumber(d) || d->valuedouble < 0 || d->valuedouble != floor(d->valuedouble) || d->valuedouble > 1e12)
            return bad(msg, size, "input '%s': every dimension of 'shape' must be a non-negative integer", t->name);
        int64_t dim = (int64_t)d->valuedouble;
        t->dims[t->ndim++] = dim;
        if (dim > 0 && n > (INT64_C(1) << 40) / dim) return bad(msg, size, "input '%s': the shape is too large", t->name);
        n *= dim;
    }
    size_t esize = kiln_dtype_size(t->dtype);
    t->bytes = (size_t)n * esize;
    if (bsize) {
        if (!cJSON_IsNumber(bsize) || bsize->valuedouble < 0 || (size_t)bsize->valuedouble != t->bytes)
            return bad(msg, size, "input '%s': binary_data_size must be %zu bytes (%lld %s elements)", t->name, t->bytes,
                       (long long)n, dt->valuestring);
        if (bin_len - *bin_at < t->bytes)
            return bad(msg, size, "input '%s': the body ends %zu bytes into its %zu bytes of binary data", t->name,
                       bin_len - *bin_at, t->bytes);
        t->data = (void *)(bin + *bin_at); /* read where it lies: the batcher copies it into its staging */
        t->borrowed = true;
        *bin_at += t->bytes;
        return 0;
    }
    if (!cJSON_IsArray(data)) return bad(msg, size, "input '%s' needs a 'data' list (or binary_data_size)", t->name);
    if (n > (int64_t)json_len) /* every element takes at least a byte of the JSON text */
        return bad(msg, size, "input '%s': its shape has %lld elements, more than the JSON data can hold", t->name, (long long)n);
    t->data = calloc((size_t)n + 1, esize);
    if (!t->data) return bad(msg, size, "out of memory for input '%s'", t->name);
    int64_t at = 0;
    int st = flatten(data, t, n, &at, 0, msg, size);
    if (!st && at != n)
        st = bad(msg, size, "input '%s': 'data' has %lld elements, its shape %lld", t->name, (long long)at, (long long)n);
    return st;
}

static int parse_outputs(const cJSON *root, kserve_output_request *o, char *msg, size_t size) {
    const cJSON *params = cJSON_GetObjectItemCaseSensitive(root, "parameters");
    const cJSON *all = cJSON_GetObjectItemCaseSensitive(params, "binary_data_output");
    if (all && !cJSON_IsBool(all)) return bad(msg, size, "parameters.binary_data_output must be true or false");
    o->binary_all = cJSON_IsTrue(all);
    const cJSON *id = cJSON_GetObjectItemCaseSensitive(root, "id");
    if (id && !cJSON_IsString(id)) return bad(msg, size, "'id' must be a string");
    if (id) snprintf(o->id, sizeof o->id, "%s", id->valuestring);
    const cJSON *outs = cJSON_GetObjectItemCaseSensitive(root, "outputs");
    if (!outs) return 0;
    if (!cJSON_IsArray(outs) || cJSON_GetArraySize(outs) > 1024) return bad(msg, size, "'outputs' must be a list");
    int n = cJSON_GetArraySize(outs);
    o->names = calloc((size_t)n + 1, sizeof *o->names);
    o->binary = calloc((size_t)n + 1, sizeof *o->binary);
    if (!o->names || !o->binary) return bad(msg, size, "out of memory");
    const cJSON *e;
    cJSON_ArrayForEach(e, outs) {
        const cJSON *name = cJSON_GetObjectItemCaseSensitive(e, "name");
        const cJSON *bin = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(e, "parameters"), "binary_data");
        if (!cJSON_IsString(name) || strlen(name->valuestring) >= 128) return bad(msg, size, "every output needs a 'name' string");
        if (bin && !cJSON_IsBool(bin)) return bad(msg, size, "output '%s': binary_data must be true or false", name->valuestring);
        snprintf(o->names[o->n_named], 128, "%s", name->valuestring);
        o->binary[o->n_named++] = cJSON_IsTrue(bin) || (!bin && o->binary_all);
    }
    return 0;
}

int kserve_parse_infer(const char *json, size_t json_len, const char *bin, size_t bin_len, serve_infer *r,
                       kserve_output_request *out, char *msg, size_t msg_size) {
    memset(out, 0, sizeof *out);
    r->inputs = NULL;
    r->n_inputs = 0;
    cJSON *root = cJSON_ParseWithLength(json, json_len);
    if (!root) return bad(msg, msg_size, "the request body is not valid JSON (near byte %zu)",
                          (size_t)(cJSON_GetErrorPtr() ? cJSON_GetErrorPtr() - json : 0));
    int st = 0;
    const cJSON *inputs = cJSON_GetObjectItemCaseSensitive(root, "inputs");
    if (!cJSON_IsObject(root) || !cJSON_IsArray(inputs) || cJSON_GetArraySize(inputs) < 1 || cJSON_GetArraySize(inputs) > 1024)
        st = bad(msg, msg_size, "the request needs an 'inputs' list of tensors");
    if (!st) {
        r->inputs = calloc((size_t)cJSON_GetArraySize(inputs), sizeof(serve_tensor));
        if (!r->inputs) st = bad(msg, msg_size, "out of memory");
    }
    size_t bin_at = 0;
    const cJSON *in;
    if (!st) cJSON_ArrayForEach(in, inputs) {
        st = parse_input(in, &r->inputs[r->n_inputs++], json_len, bin, bin_len, &bin_at, msg, msg_size);
        if (st) break;
    }
    if (!st && bin_at != bin_len)
        st = bad(msg, msg_size, "the body has %zu bytes of binary data after the JSON, the inputs take %zu", bin_len, bin_at);
    for (int i = 0; !st && i < r->n_inputs; i++)
        for (int k = 0; k < i; k++)
            if (!strcmp(r->inputs[i].name, r->inputs[k].name)) st = bad(msg, msg_size, "input '%s' appears twice", r->inputs[i].name);
    if (!st) st = parse_outputs(root, out, msg, msg_size);
    const cJSON *priority = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(root, "parameters"), "priority");
    if (!st && priority) {
        if (!cJSON_IsNumber(priority) || priority->valuedouble != floor(priority->valuedouble) || priority->valuedouble < 1 ||
            priority->valuedouble > 16)
            st = bad(msg, msg_size, "parameters.priority must be an integer level from 1 (first served)");
        else r->priority = (int)priority->valuedouble;
    }
    const cJSON *timeout = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(root, "parameters"), "timeout");
    if (!st && timeout) {
        if (!cJSON_IsNumber(timeout) || timeout->valuedouble < 0 || timeout->valuedouble > 3.6e9)
            st = bad(msg, msg_size, "parameters.timeout must be microseconds in [0, 3600000000]");
        else r->timeout_us = (int64_t)timeout->valuedouble;
    }
    cJSON_Delete(root);
    return st;
}

static cJSON *shape_json(const serve_tensor *t) {
    cJSON *s = cJSON_CreateArray();
    for (int d = 0; d < t->ndim; d++) cJSON_AddItemToArray(s, cJSON_CreateNumber((double)t->dims[d]));
    return s;
}

int kserve_build_response(const char *model, const char *version, const serve_infer *r, const kserve_output_request *o,
                          char **body, size_t *len, size_t *json_len, char *msg, size_t msg_size) {
    *body = NULL;
    int n = o->n_named ? o->n_named : r->n_outputs;
    const serve_tensor **pick = calloc((size_t)n + 1, sizeof *pick);
    bool *binary = calloc((size_t)n + 1, sizeof *binary);
    if (!pick || !binary) {
        free(pick), free(binary);
        return bad(msg, msg_size, "out of memory");
    }
    int st = 0;
    size_t bin_bytes = 0;
    for (int i = 0; i < n && !st; i++) {
        if (!o->n_named) {
            pick[i] = &r->outputs[i];
            binary[i] = o->binary_all;
        } else {
            for (int k = 0; k < r->n_outputs; k++)
                if (!strcmp(r->outputs[k].name, o->names[i])) pick[i] = &r->outputs[k];
            binary[i] = o->binary[i];
            if (!pick[i]) st = bad(msg, msg_size, "the model has no output '%s'", o->names[i]);
        }
        if (!st && !kserve_datatype(pick[i]->dtype))
            st = bad(msg, msg_size, "output '%s' is %s, which KServe cannot carry", pick[i]->name, kiln_dtype_name(pick[i]->dtype));
        if (!st && binary[i]) bin_bytes += pick[i]->bytes;
    }
    cJSON *root = st ? NULL : cJSON_CreateObject();
    if (root) {
        cJSON_AddStringToObject(root, "model_name", model);
        cJSON_AddStringToObject(root, "model_version", version);
        if (o->id[0]) cJSON_AddStringToObject(root, "id", o->id);
        cJSON *outs = cJSON_AddArrayToObject(root, "outputs");
        for (int i = 0; i < n; i++) {
            const serve_tensor *t = pick[i];
            cJSON *e = cJSON_CreateObject();
            cJSON_AddStringToObject(e, "name", t->name);
            cJSON_AddStringToObject(e, "datatype", kserve_datatype(t->dtype));
            cJSON_AddItemToObject(e, "shape", shape_json(t));
            if (binary[i]) {
                cJSON_AddNumberToObject(cJSON_AddObjectToObject(e, "parameters"), "binary_data_size", (double)t->bytes);
            } else {
                int64_t count = (int64_t)(t->bytes / kiln_dtype_size(t->dtype));
                cJSON *data = cJSON_AddArrayToObject(e, "data");
                for (int64_t k = 0; k < count; k++) {
                    double v = load(t->dtype, t->data, k);
                    cJSON_AddItemToArray(data, t->dtype == KILN_BOOL ? cJSON_CreateBool(v != 0) : cJSON_CreateNumber(v));
                }
            }
            cJSON_AddItemToArray(outs, e);
        }
    }
    char *text = root ? cJSON_PrintUnformatted(root) : NULL;
    cJSON_Delete(root);
    if (!st && !text) st = bad(msg, msg_size, "out of memory");
    if (!st) {
        *json_len = strlen(text);
        *len = *json_len + bin_bytes;
        *body = malloc(*len + 1);
        if (!*body) st = bad(msg, msg_size, "out of memory");
    }
    if (!st) {
        memcpy(*body, text, *json_len);
        size_t at = *json_len;
        for (int i = 0; i < n; i++)
            if (binary[i]) memcpy(*body + at, pick[i]->data, pick[i]->bytes), at += pick[i]->bytes;
    }
    cJSON_free(text);
    free(pick);
    free(binary);
    return st;
}
