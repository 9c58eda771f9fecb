/* bench_inputs.c — the inputs kiln bench feeds an engine: each input's shape (from --shapes, else
 * the declared dims with a symbolic dim 0 set by --batch and other symbolic dims set to 1, which is
 * noted) and seeded random data (floats uniform in [-1, 1), integers in [0, 8), booleans 0/1), the
 * same for every stream and every configuration of a sweep. */
#include "bench/bench_internal.h"

#include "core/status.h"

#include <stdlib.h>
#include <string.h>

/* The dims `spec` gives input `name` ("name:1x3x224x224,other:..."): true and *ndim/dims filled,
 * false when the spec does not name it; errors for malformed text. */
static kiln_status shape_from_spec(const char *spec, const char *name, bool *found, int *ndim, int64_t *dims) {
    *found = false;
    size_t nlen = strlen(name);
    for (const char *p = spec; p && *p;) {
        const char *colon = strchr(p, ':');
        const char *comma = strchr(p, ',');
        if (!colon || (comma && comma < colon))
            return kiln_error(KILN_ERR_INVALID_ARGUMENT, "--shapes expects NAME:AxBxC[,NAME:...], got '%s'", spec);
        bool mine = (size_t)(colon - p) == nlen && !strncmp(p, name, nlen);
        int nd = 0;
        const char *q = colon + 1;
        while (*q && *q != ',') {
            char *end;
            long long v = strtoll(q, &end, 10);
            if (end == q || v < 0 || nd == KILN_MAX_DIMS || (*end && *end != 'x' && *end != ','))
                return kiln_error(KILN_ERR_INVALID_ARGUMENT, "--shapes: malformed shape '%.*s'", (int)(strcspn(p, ",")), p);
            if (mine) dims[nd] = v;
            nd++;
            q = *end == 'x' ? end + 1 : end;
        }
        if (mine) {
            *found = true;
            *ndim = nd;
        }
        p = *q == ',' ? q + 1 : q;
    }
    return KILN_OK;
}

/* Checks that every name in the spec is an input of e. */
static kiln_status check_spec_names(const kiln_engine *e, const char *spec) {
    for (const char *p = spec; p && *p;) {
        const char *colon = strchr(p, ':');
        if (!colon) break;
        bool known = false;
        for (int i = 0; i < kiln_engine_num_inputs(e) && !known; i++) {
            kiln_tensor_desc d;
            kiln_engine_input(e, i, &d);
            known = strlen(d.name) == (size_t)(colon - p) && !strncmp(d.name, p, (size_t)(colon - p));
        }
        if (!known) return kiln_error(KILN_ERR_INVALID_ARGUMENT, "--shapes names '%.*s', which is not an input of the engine", (int)(colon - p), p);
        const char *comma = strchr(colon, ',');
        p = comma ? comma + 1 : NULL;
    }
    return KILN_OK;
}

static void append_note(char *notes, size_t cap, const char *fmt, const char *a) {
    size_t n = strlen(notes);
    if (n && n + 2 < cap) {
        memcpy(notes + n, "; ", 3);
        n += 2;
    }
    snprintf(notes + n, cap - n, fmt, a);
}

/* xorshift64*: reproducible inputs for a seed */
static uint64_t next_random(uint64_t *s) {
    *s ^= *s >> 12;
    *s ^= *s << 25;
    *s ^= *s >> 27;
    return *s * 2685821657736338717ull;
}

kiln_status kiln_bench_make_inputs(const kiln_engine *e, const kiln_bench_config *cfg, kiln_tensor *inputs,
                                   char *desc, size_t desc_cap, char *notes, size_t notes_cap, int64_t *batch) {
    int nin = kiln_engine_num_inputs(e);
    uint64_t rng = cfg->seed * 0x9E3779B97F4A7C15ull + 0x2545F4914F6CDD1Dull;
    KILN_TRY(check_spec_names(e, cfg->shapes));
    desc[0] = notes[0] = '\0';
    *batch = 1;
    for (int i = 0; i < nin; i++) {
        kiln_tensor_desc d;
        KILN_TRY(kiln_engine_input(e, i, &d));
        int ndim = d.ndim;
        int64_t dims[KILN_MAX_DIMS];
        bool found;
        KILN_TRY(shape_from_spec(cfg->shapes, d.name, &found, &ndim, dims));
        for (int k = 0; !found && k < d.ndim; k++) {
            dims[k] = d.dims[k];
            if (d.dims[k] >= 0) continue;
            dims[k] = k == 0 && cfg->batch > 0 ? cfg->batch : 1;
            if (k > 0 || cfg->batch <= 0) append_note(notes, notes_cap, "symbolic dim '%s' set to 1 (give --shapes)", d.dim_names[k] ? d.dim_names[k] : "?");
        }
        if (!found && cfg->batch > 0 && d.ndim > 0 && d.dims[0] >= 0 && d.dims[0] != cfg->batch)
            return kiln_error(KILN_ERR_SHAPE, "--batch %lld: input '%s' has a static batch of %lld (build the engine from a model with a dynamic batch)",
                              (long long)cfg->batch, d.name, (long long)d.dims[0]);
        if (i == 0 && ndim > 0) *batch = dims[0];
        kiln_status s = kiln_tensor_alloc(&inputs[i], d.dtype, ndim, dims);
        if (s != KILN_OK) return kiln_error_prefix(s, "input '%s'", d.name);
        int64_t n = kiln_tensor_numel(&inputs[i]);
        bool is_float = d.dtype == KILN_F32 || d.dtype == KILN_F64 || d.dtype == KILN_F16 || d.dtype == KILN_BF16;
        for (int64_t j = 0; j < n; j++) {
            uint64_t r = next_random(&rng);
            double v = is_float ? (double)(r >> 11) / 9007199254740992.0 * 2.0 - 1.0
                                : (double)(d.dtype == KILN_BOOL ? (r >> 33) & 1 : (r >> 33) % 8);
            kiln_tensor_set_f64(&inputs[i], j, v);
        }
        size_t len = strlen(desc);
        char shape[160];
        snprintf(desc + len, desc_cap - len, "%s%s:%s%s", i ? ", " : "", d.name, kiln_dtype_name(d.dtype),
                 kiln_shape_str(shape, sizeof shape, ndim, dims));
    }
    return KILN_OK;
}
