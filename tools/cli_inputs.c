/* cli_inputs.c — the input options `kiln run` and `kiln compare` share (--input NAME=FILE.npy,
 * --shapes NAME:AxB, --dim SYMBOL=N, --seed N) and the tensors they give: NumPy files, or reproducible
 * random values of each input's type (floats uniform in [-1, 1), integers in [0, 8), bools 0/1). */
#include "cli.h"

#include "core/npy.h"
#include "core/status.h"

#include <errno.h>
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
        char *end;
        long long n = eq ? strtoll(eq + 1, &end, 10) : -1;
        if (!eq || eq == val || n < 0 || *end) return cli_usage_error(cmd, "--dim expects SYMBOL=N, got '%s'", val);
        if (in->ndims == CLI_MAX_ARGS) return cli_usage_error(cmd, "too many --dim options");
        in->dim_names[in->ndims] = strndup(val, (size_t)(eq - val));
        in->dim_values[in->ndims++] = n;
    } else {
        char *end;
        errno = 0;
        long long n = strtoll(val, &end, 10);
        if (*end || errno || n < 0 || end == val)
            return cli_usage_error(cmd, "--seed expects a non-negative integer, got '%s'", val);
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
                    long long v = strtoll(q, &end, 10);
                    if (end == q || v < 0 || *ndim == KILN_MAX_DIMS)
                        return kiln_error(KILN_ERR_INVALID_ARGUMENT, "--shapes: malformed shape for '%s'", d->name);
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

kiln_status cli_inputs_make(const cli_inputs *in, const kiln_engine *e, kiln_tensor *tensors) {
    int nin = kiln_engine_num_inputs(e);
    for (int k = 0; k < in->nfiles; k++) {
        bool known = false;
        kiln_tensor_desc d;
        for (int i = 0; i < nin; i++) known |= kiln_engine_input(e, i, &d) == KILN_OK && !strcmp(d.name, in->names[k]);
        if (!known) {
            char list[1024] = "";
            size_t n = 0;
            for (int i = 0; i < nin && n < sizeof list; i++)
                if (kiln_engine_input(e, i, &d) == KILN_OK)
                    n += (size_t)snprintf(list + n, sizeof list - n, "%s'%s'", i ? ", " : "", d.name);
            return kiln_error(KILN_ERR_INVALID_ARGUMENT, "--input '%s': the engine has no input '%s' (its inputs: %s)",
                              in->names[k], in->names[k], nin ? list : "none");
        }
    }
    uint64_t rng = in->seed * 0x9E3779B97F4A7C15ull + 0x2545F4914F6CDD1Dull;
    for (int i = 0; i < nin; i++) {
        kiln_tensor_desc d;
        KILN_TRY(kiln_engine_input(e, i, &d));
        const char *file = NULL;
        for (int k = 0; k < in->nfiles; k++)
            if (!strcmp(in->names[k], d.name)) file = in->files[k];
        if (!file && in->nfiles > 0)
            return kiln_error(KILN_ERR_INVALID_ARGUMENT,
                              "missing input '%s': give every input with --input, or none for random inputs", d.name);
        KILN_TRY(file ? kiln_npy_read(file, &tensors[i]) : make_random(in, &d, &rng, &tensors[i]));
    }
    return KILN_OK;
}
