/* profiles.h — optimization profiles (`kiln build --profile`): checked and recorded at build time,
 * chosen per run from the bound input shapes. */
#ifndef KILN_PROFILES_H
#define KILN_PROFILES_H

#include "core/tensor.h"
#include "engine/engine_format.h"

/* Turns the API's ranges into nprofiles × g->ninputs kiln_profile_range (profile-major, unnamed inputs
 * unconstrained; in g's memory). Fails with KILN_ERR_INVALID_ARGUMENT for an unknown input, a rank
 * that is not the input's, min > opt > max, a static dimension outside its range, an input named twice
 * in one profile, or profile numbers with gaps. n == 0: no profiles (*out = NULL). */
kiln_status kiln_profiles_build(kiln_graph *g, const kiln_input_range *ranges, int n, int *nprofiles,
                                kiln_profile_range **out);

/* The first profile of m whose ranges hold the shape of every input (inputs[k]: graph input k), or -1
 * when m has no profiles. Fails with KILN_ERR_SHAPE, giving the shapes and every profile's ranges,
 * when no profile holds them. */
kiln_status kiln_profiles_select(const kiln_graph *g, const kiln_engine_meta *m, const kiln_tensor *inputs,
                                 int *profile);

/* "[1,1]..[8,1024] (opt [1,256])" for r into buf (cap bytes); "any shape" for an unconstrained one. */
char *kiln_profile_range_str(const kiln_profile_range *r, char *buf, size_t cap);

#endif
