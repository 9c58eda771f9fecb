/* profiles.c — optimization profiles: the build checks every range against the graph's inputs
 * (ranks, static dims, ordering) and records them; each run picks the first profile that holds the
 * bound shapes, or fails listing every profile's ranges. */
#include "runtime/profiles.h"

#include "core/status.h"

#include <stdio.h>
#include <string.h>

char *kiln_profile_range_str(const kiln_profile_range *r, char *buf, size_t cap) {
    if (r->ndim < 0) {
        snprintf(buf, cap, "any shape");
        return buf;
    }
    size_t n = 0;
    const int64_t *parts[3] = {r->min, r->max, r->opt};
    const char *lead[3] = {"[", "..[", " (opt ["};
    for (int p = 0; p < 3 && n < cap; p++) {
        n += (size_t)snprintf(buf + n, cap - n, "%s", lead[p]);
        for (int d = 0; d < r->ndim && n < cap; d++)
            n += (size_t)snprintf(buf + n, cap - n, "%s%lld", d ? "," : "", (long long)parts[p][d]);
        if (n < cap) n += (size_t)snprintf(buf + n, cap - n, p == 2 ? "])" : "]");
    }
    return buf;
}

/* Checks one API range against graph input v. */
static kiln_status check_range(const kiln_graph *g, const kiln_value *v, const kiln_input_range *r) {
    char type[256];
    kiln_value_type_str(g, v, type, sizeof type);
    if (r->ndim != v->ndim)
        return kiln_error(KILN_ERR_INVALID_ARGUMENT, "profile %d: input '%s' is %s (rank %d), the range has rank %d",
                          r->profile, r->input, type, v->ndim, r->ndim);
    for (int d = 0; d < r->ndim; d++) {
        if (r->min[d] < 0 || r->min[d] > r->opt[d] || r->opt[d] > r->max[d])
            return kiln_error(KILN_ERR_INVALID_ARGUMENT, "profile %d: input '%s' dimension %d needs 0 <= min <= opt <= "
                              "max, got %lld, %lld, %lld", r->profile, r->input, d, (long long)r->min[d],
                              (long long)r->opt[d], (long long)r->max[d]);
        if (v->dims[d].sym == 0 && (r->min[d] != v->dims[d].value || r->max[d] != v->dims[d].value))
            return kiln_error(KILN_ERR_INVALID_ARGUMENT, "profile %d: input '%s' is %s: dimension %d is always %lld, "
                              "the range says %lld..%lld", r->profile, r->input, type, d, (long long)v->dims[d].value,
                              (long long)r->min[d], (long long)r->max[d]);
    }
    return KILN_OK;
}

kiln_status kiln_profiles_build(kiln_graph *g, const kiln_input_range *ranges, int n, int *nprofiles,
                                kiln_profile_range **out) {
    *nprofiles = 0;
    *out = NULL;
    if (n <= 0) return KILN_OK;
    if (!ranges) return kiln_error(KILN_ERR_INVALID_ARGUMENT, "build options: %d ranges and no array", n);
    int count = 0;
    for (int i = 0; i < n; i++) {
        if (ranges[i].profile < 0 || ranges[i].profile >= 64)
            return kiln_error(KILN_ERR_INVALID_ARGUMENT, "profile number %d is out of range (0..63)", ranges[i].profile);
        if (ranges[i].profile + 1 > count) count = ranges[i].profile + 1;
    }
    kiln_profile_range *pr = kiln_graph_alloc(g, (size_t)count * (size_t)g->ninputs * sizeof *pr + 1);
    if (!pr) return kiln_error(KILN_ERR_OUT_OF_MEMORY, "out of memory recording profiles");
    for (int i = 0; i < count * g->ninputs; i++) pr[i].ndim = -1;
    for (int i = 0; i < n; i++) {
        const kiln_input_range *r = &ranges[i];
        int k = 0;
        while (k < g->ninputs && strcmp(g->values[g->inputs[k]].name, r->input ? r->input : "")) k++;
        if (k == g->ninputs)
            return kiln_error(KILN_ERR_INVALID_ARGUMENT, "profile %d: the model has no input '%s'", r->profile,
                              r->input ? r->input : "(null)");
        KILN_TRY(check_range(g, &g->values[g->inputs[k]], r));
        kiln_profile_range *dst = &pr[r->profile * g->ninputs + k];
        if (dst->ndim >= 0)
            return kiln_error(KILN_ERR_INVALID_ARGUMENT, "profile %d names input '%s' twice", r->profile, r->input);
        dst->ndim = r->ndim;
        memcpy(dst->min, r->min, sizeof dst->min);
        memcpy(dst->opt, r->opt, sizeof dst->opt);
        memcpy(dst->max, r->max, sizeof dst->max);
    }
    for (int p = 0; p < count; p++) {
        bool any = false;
        for (int k = 0; k < g->ninputs; k++) any |= pr[p * g->ninputs + k].ndim >= 0;
        if (!any) return kiln_error(KILN_ERR_INVALID_ARGUMENT, "profile %d has no ranges (profiles are numbered from 0 "
                                    "without gaps)", p);
    }
    *nprofiles = count;
    *out = pr;
    return KILN_OK;
}

static bool holds(const kiln_profile_range *r, const kiln_tensor *t) {
    if (r->ndim < 0) return true;
    if (r->ndim != t->ndim) return false;
    for (int d = 0; d < r->ndim; d++)
        if (t->dims[d] < r->min[d] || t->dims[d] > r->max[d]) return false;
    return true;
}

kiln_status kiln_profiles_select(const kiln_graph *g, const kiln_engine_meta *m, const kiln_tensor *inputs,
                                 int *profile) {
    *profile = -1;
    if (m->nprofiles <= 0) return KILN_OK;
    for (int p = 0; p < m->nprofiles; p++) {
        bool ok = true;
        for (int k = 0; k < g->ninputs && ok; k++) ok = holds(&m->profiles[p * g->ninputs + k], &inputs[k]);
        if (ok) {
            *profile = p;
            return KILN_OK;
        }
    }
    char shapes[1024], ranges[2048];
    size_t n = 0;
    shapes[0] = ranges[0] = 0;
    for (int k = 0; k < g->ninputs && n < sizeof shapes; k++) {
        char shape[128];
        n += (size_t)snprintf(shapes + n, sizeof shapes - n, "%s%s%s", k ? ", " : "", g->values[g->inputs[k]].name,
                              kiln_shape_str(shape, sizeof shape, inputs[k].ndim, inputs[k].dims));
    }
    n = 0;
    for (int p = 0; p < m->nprofiles && n < sizeof ranges; p++) {
        n += (size_t)snprintf(ranges + n, sizeof ranges - n, "\n  profile %d:", p);
        for (int k = 0; k < g->ninputs && n < sizeof ranges; k++) {
            const kiln_profile_range *r = &m->profiles[p * g->ninputs + k];
            char range[512];
            if (r->ndim >= 0)
                n += (size_t)snprintf(ranges + n, sizeof ranges - n, " %s %s", g->values[g->inputs[k]].name,
                                      kiln_profile_range_str(r, range, sizeof range));
        }
    }
    return kiln_error(KILN_ERR_SHAPE, "input shapes %s are outside every optimization profile of the engine (rebuild "
                      "it with a --profile that holds them):%s", shapes, ranges);
}
