/* env_overrides.h — the environment variables through which tests force build and context options
 * (KILN_CHANNELS_LAST, KILN_CUDA_FUSION, KILN_CUDA_VIEWS, KILN_CUDA_WORKSPACE_MB, KILN_CUDA_GRAPHS;
 * include/kiln/kiln.h documents each next to its option). The options are the interface: the
 * builder, the runtime and the backends read only them, after these functions applied the
 * variables. */
#ifndef KILN_RUNTIME_ENV_OVERRIDES_H
#define KILN_RUNTIME_ENV_OVERRIDES_H

#include "kiln/kiln.h"

/* Overrides the fields of o that a set variable names (KILN_CUDA_FUSION only for target "cuda");
 * a malformed KILN_CUDA_WORKSPACE_MB is ignored with a warning. o->unfused_ops may then point into
 * the environment. */
void kiln_build_options_apply_env(kiln_build_options *o);
/* Overrides the fields of o that a set variable names. */
void kiln_context_options_apply_env(kiln_context_options *o);

#endif
