/* llm_deferred.h — a model opened for a device (kiln_llm_model_load_hf_deferred, or an LLM engine read
 * by kiln_llm_engine_load_for_device): its matrices are not converted to FP32 on the host but stay in
 * the memory-mapped checkpoint or engine, in their own dtype. The
 * loader (llm_model.c) lays the model out as for the CPU, but each matrix array is an address range
 * in a reservation of address space that no memory backs (PROT_NONE), and each checkpoint tensor
 * placed in it is recorded as a piece: where in the layout it goes, its bytes in the mapping, and
 * whether it is transposed (GPT-2's Conv1D). kiln_llm_model_read16 then yields any range of any array
 * in F16 or BF16 — the mapped bytes as they are when the dtypes match — so an upload streams the file
 * to the device through small staging buffers, and the host holds no copy of the weights.
 *
 * Vectors (norms, biases) stay ordinary FP32 arrays: they are small, and loaders may adjust them.
 * The CPU forward cannot run a deferred model (its matrices are not readable memory). */
#ifndef KILN_LLM_DEFERRED_H
#define KILN_LLM_DEFERRED_H

#include "hf/checkpoint.h"
#include "llm/llm.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct llm_deferred llm_deferred;

/* A reservation of address space for the matrices of a model read from ck (a slot for every value
 * the checkpoint holds, each tensor aligned), which owns ck from then on (also on failure). Caller
 * frees *out (llm_deferred_free). */
kiln_status llm_deferred_create(kiln_hf_checkpoint *ck, llm_deferred **out);
/* The same for the matrices of an engine mapped at map (a kiln_file_map_new one, which d owns from
 * then on, also on failure): `values` slots for its `tensors` tensors. */
kiln_status llm_deferred_create_mapped(void *map, size_t values, int tensors, llm_deferred **out);
/* The checkpoint d reads (borrowed; valid while d lives; NULL for an engine's). */
const kiln_hf_checkpoint *llm_deferred_checkpoint(const llm_deferred *d);
void llm_deferred_free(llm_deferred *d); /* accepts NULL; releases the reservation and the checkpoint or map */

/* The next n slots of the reservation (64-byte aligned) into *out; KILN_ERR_INTERNAL when the
 * reservation is exhausted (the loader sized it too small). */
kiln_status llm_deferred_reserve(llm_deferred *d, size_t n, float **out);
/* Records that tensor t (F32, F16 or BF16) fills the slots from dst on: as stored ([rows, cols]), or
 * transposed (t is [cols, rows], GPT-2's Conv1D). dst must be a slot of d's reservation. */
kiln_status llm_deferred_place(llm_deferred *d, float *dst, const kiln_st_tensor *t, bool transpose);
/* Whether p lies in d's reservation (NULL d: false). */
bool llm_deferred_owns(const llm_deferred *d, const float *p);

/* Opens a Hugging Face checkpoint as kiln_llm_model_load_hf does (the same checks and errors), but
 * deferred as above: the caller owns *out (kiln_llm_model_free), which keeps the checkpoint mapped. */
kiln_status kiln_llm_model_load_hf_deferred(const char *dir, kiln_llm_model **out);

/* The dtype the model's matrices are stored in: a deferred model's checkpoint dtype (that of its token
 * embedding), KILN_F32 for a model converted to FP32. */
kiln_dtype kiln_llm_model_stored_dtype(const kiln_llm_model *m);

/* Writes n values of one of m's weight arrays, from src on (src + n inside the array), converted to
 * dtype (KILN_F16 or KILN_BF16; round to nearest even) into dst. For the ranges of a deferred
 * model's matrices the values come from the mapped checkpoint (copied as they are when its dtype is
 * dtype); otherwise src is read as FP32. KILN_ERR_INTERNAL when part of a deferred range holds no
 * tensor. */
kiln_status kiln_llm_model_read16(const kiln_llm_model *m, const float *src, size_t n, kiln_dtype dtype, uint16_t *dst);
/* The same, split over up to `threads` threads (pieces of at least 1 Mi values; at most 16 threads):
 * copying out of the mapping, and faulting its pages in, scales with cores. */
kiln_status kiln_llm_model_read16_threads(const kiln_llm_model *m, const float *src, size_t n, kiln_dtype dtype,
                                          uint16_t *dst, int threads);

#endif
