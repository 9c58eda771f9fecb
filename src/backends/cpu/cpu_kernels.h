/* cpu_kernels.h — the CPU backend's kernel interface: one exec function per op, looked up by name.
 *
 * Each op family lives in src/backends/cpu/<family>.c and exports a table
 *     const kiln_cpu_kernel kiln_cpu_kernels_<family>[] = { {...}, ..., {0} };
 * listed once in cpu_dispatch.c.
 *
 * Contract of an exec function:
 *  - in[i] is input i of the node, or NULL when that optional input is absent (nin = node->ninputs);
 *  - out[i] is an empty tensor for output i (nout = node->noutputs; out[i] is NULL when that optional
 *    output is absent); the kernel computes the concrete output shape from its inputs and attributes,
 *    allocates it with kiln_tensor_alloc, and fills it;
 *  - it reads attributes with kiln_attr_* and selects semantics by node->opset;
 *  - it returns KILN_OK, or an error whose message names the problem (the runtime adds the node name);
 *  - it never keeps pointers to inputs, allocates nothing else that outlives the call, and is
 *    reentrant (several contexts run concurrently). */
#ifndef KILN_CPU_KERNELS_H
#define KILN_CPU_KERNELS_H

#include "backends/cpu/packed_weights.h"
#include "core/status.h"
#include "core/tensor.h"
#include "ir/graph.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef kiln_status (*kiln_cpu_exec_fn)(const kiln_node *n, kiln_tensor *const *in, int nin,
                                        kiln_tensor *const *out, int nout);

typedef struct kiln_cpu_kernel {
    const char *op_type;
    const char *domain; /* "" for the default ONNX domain */
    kiln_cpu_exec_fn exec;
} kiln_cpu_kernel;

const kiln_cpu_kernel *kiln_cpu_kernel_find(const char *domain, const char *op_type);

/* A kernel that prepares state for its node once per engine (weights packed from the graph's
 * constants, or taken as the engine file stores them packed) and then runs with it. prepare sets
 * *state to NULL when there is nothing to prepare for that node (the plain exec function runs it)
 * and fails only for a reason that must stop the engine (out of memory, stored panels that
 * disagree with the node); exec has the exec contract above, with the state read-only (contexts
 * run concurrently); free_state releases a non-NULL state. */
typedef struct kiln_cpu_prepared_kernel {
    const char *op_type;
    const char *domain;
    kiln_status (*prepare)(const kiln_graph *g, const kiln_node *n, void **state);
    kiln_status (*exec)(const kiln_node *n, const void *state, kiln_tensor *const *in, int nin,
                        kiln_tensor *const *out, int nout);
    void (*free_state)(void *state);
    /* The weights a state packed, for the engine file to store (packed_weights.h): fills *tag and
     * *panels and returns true, or false when the state's panels came from the engine file. */
    bool (*panels)(const void *state, kiln_packed_tag *tag, const float **panels);
} kiln_cpu_prepared_kernel;

/* The prepared kernel for an op, or NULL when the op has none. */
const kiln_cpu_prepared_kernel *kiln_cpu_prepared_find(const char *domain, const char *op_type);

#ifdef __cplusplus
}
#endif
#endif
