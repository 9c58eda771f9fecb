/* engine_internal.h — what a kiln_engine is: the compiled graph, its metadata, and the backend's
 * state for running it. */
#ifndef KILN_ENGINE_INTERNAL_H
#define KILN_ENGINE_INTERNAL_H

#include "backends/backend.h"
#include "engine/engine_format.h"
#include "kiln/kiln.h"

struct kiln_engine {
    kiln_graph *g;                /* owned; nodes in execution order */
    kiln_engine_meta meta;
    const kiln_backend *backend;  /* the backend meta.target names */
    kiln_backend_engine *be;      /* owned */
    kiln_engine_out *file;        /* owned: the engine file a build began (kiln_build_options.output), or NULL */
};

/* Wraps a finished graph (taking ownership of g, also on failure) into an engine for meta->target,
 * prepared as opts say (the build's options with the environment applied; NULL: an engine loaded
 * from a file, which gets the defaults and the environment's overrides). */
kiln_status kiln_engine_from_graph(kiln_graph *g, const kiln_engine_meta *meta, const kiln_build_options *opts,
                                   kiln_engine **out);
/* kiln_engine_from_graph for a build that began writing g's engine file (file, taken also on failure,
 * and freed before g, whose weights it reads); kiln_engine_save to its path finishes it. */
kiln_status kiln_engine_from_graph_saving(kiln_graph *g, const kiln_engine_meta *meta, const kiln_build_options *opts,
                                          kiln_engine_out *file, kiln_engine **out);

/* The backend state of a context (for kiln bench's timing hooks, backend.h). Borrowed. */
kiln_backend_context *kiln_context_backend(kiln_context *c);

#endif
