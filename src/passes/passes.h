/* passes.h — graph optimization passes. Each pass is one file with one entry point; it returns
 * whether it changed the graph in *changed and logs each change at KILN_LOG_VERBOSE. */
#ifndef KILN_PASSES_H
#define KILN_PASSES_H

#include "ir/graph.h"

/* Evaluates nodes whose inputs are all constant (with the CPU reference kernels) and turns their
 * outputs into constants, when an output is no larger than max(its inputs, 1 MiB). */
kiln_status kiln_pass_fold_constants(kiln_graph *g, bool *changed);
/* Removes nodes and values that no graph output depends on. */
kiln_status kiln_pass_remove_dead(kiln_graph *g, bool *changed);

#endif
