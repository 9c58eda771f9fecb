/* remove_dead.c — dead-node removal: drops nodes and values no graph output depends on. */
#include "passes/passes.h"

#include "core/log.h"

kiln_status kiln_pass_remove_dead(kiln_graph *g, bool *changed) {
    int removed = 0;
    kiln_status s = kiln_graph_compact(g, &removed);
    if (s != KILN_OK) return s;
    *changed = removed > 0;
    if (removed) KILN_LOG(KILN_LOG_VERBOSE, "remove_dead: removed %d nodes", removed);
    return KILN_OK;
}
