/* backend.h — the interface every execution backend implements (ARCHITECTURE.md §7). The runtime
 * validates bindings and hands the backend host tensors; the backend owns everything about how the
 * graph runs (kernels, memory, streams). */
#ifndef KILN_BACKEND_H
#define KILN_BACKEND_H

#include "core/tensor.h"
#include "engine/engine_format.h"
#include "ir/graph.h"

typedef struct kiln_backend_engine kiln_backend_engine;   /* a backend's per-engine state */
typedef struct kiln_backend_context kiln_backend_context; /* a backend's per-context state */

typedef struct kiln_backend {
    const char *name; /* the engine target: "cpu", "cuda" */
    /* A description of device `device` ("x86_64 CPU, 2 cores, OpenBLAS 0.3.21") into buf; fails when
     * the device is absent. */
    kiln_status (*device_name)(int device, char *buf, size_t cap);
    /* Whether the backend computes floating-point tensors in precision p. */
    bool (*supports_precision)(kiln_precision p);
    /* Prepares g (finished, in execution order; it outlives the result) to run: kernel choice, device
     * copies of weights. Fails with KILN_ERR_UNSUPPORTED listing every node it cannot run. */
    kiln_status (*engine_create)(const kiln_graph *g, const kiln_engine_meta *meta, kiln_backend_engine **out);
    void (*engine_free)(kiln_backend_engine *be); /* accepts NULL */
    kiln_status (*context_create)(kiln_backend_engine *be, kiln_backend_context **out);
    void (*context_free)(kiln_backend_context *bc); /* accepts NULL */
    /* Runs on host inputs (g->ninputs tensors in g->inputs order, already checked against the
     * declared types). On success outputs[i] (g->noutputs) describe host data owned by the context,
     * valid until the next run or context_free. */
    kiln_status (*context_run)(kiln_backend_context *bc, const kiln_tensor *inputs, kiln_tensor *outputs);
    /* Optional (NULL: nothing to add): writes what `kiln inspect` should show about a prepared engine
     * beyond the graph (placement, planned memory), one line per fact. */
    void (*describe)(const kiln_backend_engine *be, FILE *out);
    /* Optional (NULL: transfers always happen, as on the CPU): with enabled == false, a run whose input
     * shapes equal the previous run's reuses that run's device inputs and leaves its host outputs as
     * they were, copying nothing between host and device (trtexec's --noDataTransfers). */
    void (*context_set_transfers)(kiln_backend_context *bc, bool enabled);
} kiln_backend;

/* The backend called name (NULL = "cpu"), or NULL. */
const kiln_backend *kiln_backend_find(const char *name);
/* "cpu" or "cpu, cuda": the targets this kiln was built with. */
const char *kiln_backend_names(void);

#endif
