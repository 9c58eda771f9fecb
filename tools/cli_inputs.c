/* cli_inputs.c — the input options `kiln run` and `kiln compare` share (--input NAME=FILE.npy,
 * --shapes NAME:AxB, --dim SYMBOL=N, --seed N) and the tensors they give: NumPy files, or reproducible
 * random values of each input's type (floats uniform in [-1, 1), integers in [0, 8), bools 0/1). */
#include "cli.h"

#include "core/npy.h"
#include "core/status.h"

#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

int cli_inputs_parse(cli_inputs *in, const char *cmd, int argc, char **argv, int *i) {
    const char *s = argv[*i];
    if (strcmp(s, "--input") && strcmp(s, "--shapes") && strcmp(s, "--dim") && strcmp(s, "--seed")) return 0;
    if (*i + 1 >= argc) return cli_usage_error(cmd, "%s needs a value", s);
    const char *val = argv[++*i];
    if (!strcmp(s, "--input")) {
        const char *eq = strchr(val, '=');
        if (!eq || eq == val || !eq[1]) return cli_usage_error(cmd, "--input expects NAME=FILE.npy, got '%s'", val);
        if (in->nfiles == CLI_MAX_ARGS) return cli_usage_error(cmd, "too many --input options");
        for (int k = 0; k < in->nfiles; k++)
            if (strlen(in->names[k]) == (size_t)(eq - val) && !strncmp(in->names[k], val, (size_t)(eq - val)))
                return cli_usage_error(cmd, "input '%s' is given twice", in->names[k]);
        in->names[in->nfiles] = strndup(val, (size_t)(eq - val));
        in->files[in->nfiles++] = eq + 1;
    } else if (!strcmp(s, "--shapes")) {
        if (in->nshapes == CLI_MAX_ARGS) return cli_usage_error(cmd, "too many --shapes options");
        in->shape_specs[in->nshapes++] = val;
    } else if (!strcmp(s, "--dim")) {
        const char *eq = strchr(val, '=');
        char *end = NULL;
        errno = 0;
        long long n = eq ? strtoll(eq + 1, &end, 10) : -1;
        if (!eq || eq == val || end == eq + 1 || *end) return cli_usage_error(cmd, "--dim expects SYMBOL=N, got '%s'", val);
        if (errno || n < 0 || n > KILN_MAX_TENSOR_ELEMENTS)
            return cli_usage_error(cmd, "--dim %.*s: the size must be from 0 to 2^40, got '%s'", (int)(eq - val), val, eq + 1);
        if (in->ndims == CLI_MAX_ARGS) return cli_usage_error(cmd, "too many --dim options");
        in->dim_names[in->ndims] = strndup(val, (size_t)(eq - val));
        in->dim_values[in->ndims++] = n;
    } else {
        char *end;
        errno = 0;
        long long n = strtoll(val, &end, 10);
        if (*end || end == val) return cli_usage_error(cmd, "--seed expects a non-negative integer, got '%s'", val);
        if (errno || n < 0) return cli_usage_error(cmd, "--seed expects an integer from 0 to %lld, got '%s'", LLONG_MAX, val);
        in->seed = (uint64_t)n;
    }
    return 1;
}

void cli_inputs_free(cli_inputs *in) {
    for (int k = 0; k < in->nfiles; k++) free((void *)in->names[k]);
    for (int k = 0; k < in->ndims; k++) free((void *)in->dim_names[k]);
    in->nfiles = in->ndims = 0;
}

/* xorshift64*: reproducible random inputs for a seed */
static uint64_t next_random(uint64_t *s) {
    *s ^= *s >> 12;
    *s ^= *s << 25;
    *s ^= *s >> 27;
    return *s * 2685821657736338717ull;
}

/* Shape for a random input: from --shapes NAME:AxB, else the declared dims with symbolic ones from
 * --dim (default 1). */
static kiln_status random_shape(const cli_inputs *in, const kiln_tensor_desc *d, int *ndim, int64_t *dims) {
    size_t nlen = strlen(d->name);
    for (int k = 0; k < in->nshapes; k++) {
        for (const char *p = in->shape_specs[k]; p && *p;) {
            const char *colon = strchr(p, ':');
            if (!colon) return kiln_error(KILN_ERR_INVALID_ARGUMENT, "--shapes expects NAME:AxBxC, got '%s'", p);
            const char *next = strchr(colon, ',');
            if ((size_t)(colon - p) == nlen && !strncmp(p, d->name, nlen)) {
                *ndim = 0;
                const char *q = colon + 1;
                while (q && *q && *q != ',') {
                    char *end;
                    errno = 0;
                    long long v = strtoll(q, &end, 10);
                    if (end == q || *ndim == KILN_MAX_DIMS || (*end && *end != 'x' && *end != ','))
                        return kiln_error(KILN_ERR_INVALID_ARGUMENT, "--shapes: malformed shape for '%s' (expected AxBxC)", d->name);
                    if (errno || v < 0 || v > KILN_MAX_TENSOR_ELEMENTS)
                        return kiln_error(KILN_ERR_INVALID_ARGUMENT, "--shapes: dimension %.*s of '%s' is outside 0..2^40",
                                          (int)(end - q), q, d->name);
                    dims[(*ndim)++] = v;
                    q = (*end == 'x') ? end + 1 : end;
                }
                return KILN_OK;
            }
            p = next ? next + 1 : NULL;
        }
    }
    *ndim = d->ndim;
    for (int i = 0; i < d->ndim; i++) {
        dims[i] = d->dims[i] >= 0 ? d->dims[i] : 1;
        for (int k = 0; d->dims[i] < 0 && d->dim_names[i] && k < in->ndims; k++)
            if (!strcmp(in->dim_names[k], d->dim_names[i])) dims[i] = in->dim_values[k];
    }
    return KILN_OK;
}

static kiln_status make_random(const cli_inputs *in, const kiln_tensor_desc *d, uint64_t *rng, kiln_tensor *t) {
    int ndim = 0;
    int64_t dims[KILN_MAX_DIMS];
    KILN_TRY(random_shape(in, d, &ndim, dims));
    KILN_TRY(kiln_tensor_alloc(t, d->dtype, ndim, dims));
    int64_t n = kiln_tensor_numel(t);
    bool is_float = d->dtype == KILN_F32 || d->dtype == KILN_F64 || d->dtype == KILN_F16 || d->dtype == KILN_BF16;
    for (int64_t i = 0; i < n; i++) {
        uint64_t r = next_random(rng);
        double v = is_float ? (double)(r >> 11) / 9007199254740992.0 * 2.0 - 1.0
                            : (double)(d->dtype == KILN_BOOL ? (r >> 33) & 1 : (r >> 33) % 8);
        kiln_tensor_set_f64(t, i, v);
    }
    return KILN_OK;
}

/* True when the engine has an input named name[0..len). */
static bool has_input(const kiln_engine *e, const char *name, size_t len) {
    kiln_tensor_desc d;
    for (int i = 0; i < kiln_engine_num_inputs(e); i++)
        if (kiln_engine_input(e, i, &d) == KILN_OK && strlen(d.name) == len && !strncmp(d.name, name, len)) return true;
    return false;
}

/* The name of symbolic dim k of an input description, or NULL. */
static const char *symbol_of(const kiln_tensor_desc *d, int k) { return d->dims[k] < 0 ? d->dim_names[k] : NULL; }

/* True when an input of the engine has a symbolic dim named sym. */
static bool has_symbol(const kiln_engine *e, const char *sym) {
    kiln_tensor_desc d;
    for (int i = 0; i < kiln_engine_num_inputs(e); i++)
        for (int k = 0; kiln_engine_input(e, i, &d) == KILN_OK && k < d.ndim; k++)
            if (symbol_of(&d, k) && !strcmp(symbol_of(&d, k), sym)) return true;
    return false;
}

/* "'batch', 'seq'" (or a note that there are none): the distinct symbolic dims, for messages. */
static const char *symbol_list(const kiln_engine *e, char *list, size_t cap) {
    size_t n = 0;
    kiln_tensor_desc d;
    list[0] = 0;
    for (int i = 0; i < kiln_engine_num_inputs(e); i++)
        for (int k = 0; kiln_engine_input(e, i, &d) == KILN_OK && k < d.ndim && n < cap; k++) {
            char quoted[160];
            snprintf(quoted, sizeof quoted, "'%s'", symbol_of(&d, k) ? symbol_of(&d, k) : "");
            if (symbol_of(&d, k) && !strstr(list, quoted)) n += (size_t)snprintf(list + n, cap - n, "%s%s", n ? ", " : "", quoted);
        }
    return n ? list : "none, every input shape is static";
}

/* "'x', 'mask'" (or "none"): the engine's input names, for messages. */
static const char *input_list(const kiln_engine *e, char *list, size_t cap) {
    size_t n = 0;
    kiln_tensor_desc d;
    list[0] = 0;
    for (int i = 0; i < kiln_engine_num_inputs(e) && n < cap; i++)
        if (kiln_engine_input(e, i, &d) == KILN_OK) n += (size_t)snprintf(list + n, cap - n, "%s'%s'", i ? ", " : "", d.name);
    return n ? list : "none";
}

/* Every name that --input, --shapes and --dim give must exist in the engine: a misspelt one would
 * otherwise be ignored without a word. */
static kiln_status check_names(const cli_inputs *in, const kiln_engine *e) {
    char list[1024];
    for (int k = 0; k < in->nfiles; k++)
        if (!has_input(e, in->names[k], strlen(in->names[k])))
            return kiln_error(KILN_ERR_INVALID_ARGUMENT, "--input '%s': the engine has no input '%s' (its inputs: %s)",
                              in->names[k], in->names[k], input_list(e, list, sizeof list));
    for (int k = 0; k < in->nshapes; k++)
        for (const char *p = in->shape_specs[k]; p && *p;) {
            const char *colon = strchr(p, ':'), *next = strchr(p, ',');
            if (!colon || (next && next < colon))
                return kiln_error(KILN_ERR_INVALID_ARGUMENT, "--shapes expects NAME:AxBxC[,NAME:...], got '%s'", in->shape_specs[k]);
            if (!has_input(e, p, (size_t)(colon - p)))
                return kiln_error(KILN_ERR_INVALID_ARGUMENT, "--shapes: the engine has no input '%.*s' (its inputs: %s)",
                                  (int)(colon - p), p, input_list(e, list, sizeof list));
            p = next ? next + 1 : NULL;
        }
    for (int k = 0; k < in->ndims; k++)
        if (!has_symbol(e, in->dim_names[k]))
            return kiln_error(KILN_ERR_INVALID_ARGUMENT, "--dim %s: no input has a dimension named '%s' (symbolic dims: %s)",
                              in->dim_names[k], in->dim_names[k], symbol_list(e, list, sizeof list));
    return KILN_OK;
}

kiln_status cli_inputs_make(const cli_inputs *in, const kiln_engine *e, kiln_tensor *tensors) {
    int nin = kiln_engine_num_inputs(e);
    KILN_TRY(check_names(in, e));
    uint64_t rng = in->seed * 0x9E3779B97F4A7C15ull + 0x2545F4914F6CDD1Dull;
    kiln_status s;
    for (int i = 0; i < nin; i++) {
        kiln_tensor_desc d;
        KILN_TRY(kiln_engine_input(e, i, &d));
        const char *file = NULL;
        for (int k = 0; k < in->nfiles; k++)
            if (!strcmp(in->names[k], d.name)) file = in->files[k];
        if (!file && in->nfiles > 0)
            return kiln_error(KILN_ERR_INVALID_ARGUMENT,
                              "missing input '%s': give every input with --input, or none for random inputs", d.name);
        if (file) KILN_TRY(kiln_npy_read(file, &tensors[i]));
        else if ((s = make_random(in, &d, &rng, &tensors[i])) != KILN_OK) return kiln_error_prefix(s, "input '%s'", d.name);
    }
    return KILN_OK;
}
