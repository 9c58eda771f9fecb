/* cpu_plan.h — what the CPU backend needs to execute a graph: the kernel of every node (in order),
 * the state prepared for the nodes whose kernels prepare one (packed weights), and when each
 * intermediate value can be released (its last reader). Derived when an engine is created or
 * loaded, not stored. */
#ifndef KILN_CPU_PLAN_H
#define KILN_CPU_PLAN_H

#include "backends/cpu/cpu_kernels.h"
#include "ir/graph.h"

typedef struct kiln_cpu_plan {
    int nnodes;
    kiln_cpu_exec_fn *kernels; /* [g->nnodes] */
    const kiln_cpu_prepared_kernel **prepared; /* [g->nnodes]: the kernel that runs node i with state[i] */
    void **state;                              /* [g->nnodes]: NULL where the plain kernel runs */
    int *release_after;        /* [g->nvalues]: node index after which the value is freed; -1 = never */
} kiln_cpu_plan;

/* Fails with KILN_ERR_UNSUPPORTED naming every node that has no CPU kernel, or with the error of a
 * node's preparation (out of memory). */
kiln_status kiln_cpu_plan_create(const kiln_graph *g, kiln_cpu_plan *out);
void kiln_cpu_plan_free(kiln_cpu_plan *p);

#endif
