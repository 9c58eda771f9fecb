/* cpu_scratch.h — per-thread scratch buffers for the CPU kernels: each thread (the pool's workers
 * and the callers) keeps a few growable float buffers for its life, so kernels that run every
 * inference allocate nothing in steady state. */
#ifndef KILN_CPU_SCRATCH_H
#define KILN_CPU_SCRATCH_H

#include <stddef.h>

typedef enum kiln_cpu_scratch_slot {
    KILN_SCRATCH_TASK,   /* a parallel-for task's own (im2col columns, packed blocks, product blocks) */
    KILN_SCRATCH_SHARED, /* what a kernel builds on its calling thread for all its tasks to read */
    KILN_SCRATCH_SLOTS
} kiln_cpu_scratch_slot;

/* The calling thread's buffer `slot` of at least count floats (its contents are not kept when it
 * grows); NULL on out of memory. Valid until this thread asks for the same slot again. */
float *kiln_cpu_scratch(kiln_cpu_scratch_slot slot, size_t count);

#endif
