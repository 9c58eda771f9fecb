/* builder.h — the build pipeline from an in-memory graph (what kiln_build_onnx and the network-
 * building frontends call, and what tests use to build single-op engines). */
#ifndef KILN_BUILDER_H
#define KILN_BUILDER_H

#include "ir/graph.h"
#include "kiln/kiln.h"

/* Resolves, orders, infers, optimizes and plans g into an engine for opts->target (opts may be NULL).
 * Takes ownership of g, also on failure. source names the model in messages and the engine header. */
kiln_status kiln_build_graph(kiln_graph *g, const char *source, const kiln_build_options *opts, kiln_engine **out);

#endif
