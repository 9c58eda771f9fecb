/* engine_internal.h — what a kiln_engine is: the compiled graph, its metadata and its plan. */
#ifndef KILN_ENGINE_INTERNAL_H
#define KILN_ENGINE_INTERNAL_H

#include "engine/engine_format.h"
#include "kiln/kiln.h"
#include "plan/plan.h"

struct kiln_engine {
    kiln_graph *g;          /* owned; nodes in execution order */
    kiln_engine_meta meta;
    kiln_plan plan;
};

/* Wraps a finished graph (taking ownership of g, also on failure) into an engine: makes the plan. */
kiln_status kiln_engine_from_graph(kiln_graph *g, const kiln_engine_meta *meta, kiln_engine **out);

#endif
