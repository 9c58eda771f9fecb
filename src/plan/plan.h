/* plan.h — what the runtime needs to execute a graph: the kernel of every node (in order) and when
 * each intermediate value can be released (its last reader). Made at build time and again when an
 * engine is loaded (it is derived data, not stored). */
#ifndef KILN_PLAN_H
#define KILN_PLAN_H

#include "backends/backend.h"
#include "ir/graph.h"

typedef struct kiln_plan {
    const kiln_backend *backend;
    kiln_cpu_exec_fn *kernels; /* [g->nnodes] */
    int *release_after;        /* [g->nvalues]: node index after which the value is freed; -1 = never */
    size_t weight_bytes;       /* bytes of constant data */
} kiln_plan;

/* Fails with KILN_ERR_UNSUPPORTED naming the node when the backend has no kernel for it. */
kiln_status kiln_plan_create(const kiln_graph *g, const kiln_backend *backend, kiln_plan *out);
void kiln_plan_free(kiln_plan *p);

#endif
