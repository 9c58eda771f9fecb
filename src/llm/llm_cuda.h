/* llm_cuda.h — the LLM forward step (llm.h's contract) on an NVIDIA GPU in FP16 or BF16: the model's
 * weights uploaded once, a paged KV cache in device memory, and kiln_llm_cuda_forward, which runs the
 * same ragged batches as kiln_llm_forward (prefill chunks and decode tokens of several sequences, block
 * tables, all_logits) and returns logits to the host, keeps them on the device, or returns each row's
 * greedy (argmax) token; and sampler.h's sampler on the GPU (kiln_llm_cuda_sample), which gives
 * kiln_sample_next's tokens for rows of device (or host) logits.
 *
 * Numerics: weights, activations between kernels and the KV cache are in the chosen dtype; the
 * residual stream, norm statistics, softmax and every accumulation are FP32; logits are FP32.
 * Everything the step needs is allocated at create time for the limits of kiln_llm_cuda_options: a
 * step allocates nothing. A kiln_llm_cuda and its caches are used by one thread at a time.
 *
 * Built without the cuda backend, every create function fails with KILN_ERR_UNSUPPORTED ("built
 * without the cuda backend"). */
#ifndef KILN_LLM_LLM_CUDA_H
#define KILN_LLM_LLM_CUDA_H

#include "llm/llm.h"
#include "llm/sampler.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct kiln_llm_cuda kiln_llm_cuda;       /* a model on one GPU */
typedef struct kiln_llm_cuda_kv kiln_llm_cuda_kv; /* a paged KV cache for it, in device memory */

typedef struct kiln_llm_cuda_options {
    int device;          /* CUDA device ordinal */
    int max_tokens;      /* most new tokens in one step (activations are sized for it) */
    int max_seqs;        /* most sequences in one step */
    int max_context;     /* longest context (cached + new tokens) of one sequence */
    int gemv_max_tokens; /* steps of at most this many tokens multiply by the weights with kiln's
                          * bandwidth-bound GEMV kernel, larger ones with cuBLASLt (0..8; 0: cuBLASLt only) */
    bool use_graphs;     /* replay decode steps (every sequence one new token) from CUDA graphs, captured
                          * per (number of sequences, context bucket) on the second step of that shape */
    bool gemm_autotune;  /* cuBLASLt products of at most 256 token rows: time the heuristic's first 16
                          * algorithms on the first product of each shape and keep the fastest (else its first);
                          * GEMV products (16-bit or INT8 weights): time the 10 kernel configurations likewise
                          * (else a rule by shape; env KILN_LLM_GEMV=0..9, or KILN_LLM_GEMV_Q8=0..9 for INT8
                          * weights, forces one configuration for every shape) */
    const char *timing_cache; /* NULL, or a timing cache file (kiln build --timing-cache's): the tactics
                               * gemm_autotune would time (cuBLASLt algorithm, GEMV configuration per
                               * product shape) are taken from it when recorded there for this GPU and
                               * library versions, and the ones timed are added to it after their step */
    struct kiln_llm_cuda_probe *probe; /* NULL, or caller-owned switches and timings (benchmarks) */
    bool random_int8; /* kiln_llm_cuda_create_random: every matrix (the embedding and lm_head too)
                       * weight-only INT8, random int8 values with row scales, as --weights int8 lays them out */
    bool random_w8a8; /* the same, and the layers' matrices W8A8 (activation scale 8 / 127) */
    bool random_int4; /* the same, weight-only INT4 (random nibbles, group scales and zero points) */
    bool random_fp8;  /* the same, FP8: random E4M3 codes with row scales (--weights fp8, dynamic
                       * activation scales) */
} kiln_llm_cuda_options;

/* The stages of a profiled step (kiln_llm_cuda_probe.stage_ms): the four weight products of the
 * layers, attention, the norms (with their residual adds; the final one too), RoPE + KV write, the
 * MLP activation, the embedding, lm_head, and the greedy argmax (when the step returns ids). */
enum {
    KILN_LLM_STAGE_QKV,
    KILN_LLM_STAGE_O,
    KILN_LLM_STAGE_UP,
    KILN_LLM_STAGE_DOWN,
    KILN_LLM_STAGE_ATTN,
    KILN_LLM_STAGE_NORM,
    KILN_LLM_STAGE_ROPE,
    KILN_LLM_STAGE_ACT,
    KILN_LLM_STAGE_EMBED,
    KILN_LLM_STAGE_LM_HEAD,
    KILN_LLM_STAGE_ARGMAX,
    KILN_LLM_STAGES
};

/* Benchmark switches, read at every step, and the timings of profiled steps (accumulated). */
typedef struct kiln_llm_cuda_probe {
    bool profile; /* in: run steps without graphs, timing each kernel (events between them; the launches
                   * are queued behind a host gate first, so the GPU times exclude host launch gaps) */
    bool eager;   /* in: no CUDA graphs for the next steps (as use_graphs false) */
    int steps;    /* out: profiled steps so far */
    double gemm_ms, attn_ms, other_ms, logits_ms; /* out: GPU ms: weight products of the layers,
                   * attention, norms (the final one too) + RoPE/KV write + activation + embedding, lm_head */
    double gpu_ms;     /* out: sum of the classes */
    double stage_ms[KILN_LLM_STAGES]; /* out: GPU ms by stage (KILN_LLM_STAGE_*; the fused path's products
                   * carry their norm prologues and epilogues); the argmax is in none of the classes above */
    double enqueue_ms; /* out: host ms to check, stage and enqueue the step (launch overhead, no graph) */
    int graphs_captured, graph_replays; /* out: decode graphs made, steps run from one (any step) */
    char graph_error[200];              /* out: why the last failed capture failed ("" if none did) */
    int tactics_timed, tactics_cached;  /* out: product shapes whose tactic was timed / found in the timing cache */
} kiln_llm_cuda_probe;

/* device 0, max_tokens 2048, max_seqs 256, max_context 4096, gemv_max_tokens 8, use_graphs true,
 * gemm_autotune true, timing_cache NULL, probe NULL. */
void kiln_llm_cuda_options_default(kiln_llm_cuda_options *o);

/* KILN_OK when the device exists, with a description of it in desc ("NVIDIA H200 (sm_90, 132 SMs,
 * 139 GiB)"); else KILN_ERR_BACKEND ("no CUDA device (...)") or KILN_ERR_UNSUPPORTED (built without
 * the cuda backend), the reason also in desc. */
kiln_status kiln_llm_cuda_device_check(int device, char *desc, size_t cap);

/* Uploads m's weights converted to dtype (KILN_F16 or KILN_BF16) and allocates the step buffers for o
 * (NULL: defaults). m may be deferred (llm_deferred.h): its matrices then stream from the mapped
 * checkpoint through pinned chunks, byte for byte when stored in dtype. m is not needed afterwards.
 * KILN_ERR_UNSUPPORTED names a shape the kernels do not take (head_dim not a multiple of 8 in
 * 8..256, d_model beyond 12288).
 * Caller owns *out (kiln_llm_cuda_free). */
kiln_status kiln_llm_cuda_create(const kiln_llm_model *m, kiln_dtype dtype, const kiln_llm_cuda_options *o,
                                 kiln_llm_cuda **out);
/* The same for a model of config c whose weights are random (made on the device from seed, with
 * llm_random.h's scales), for benchmarks of large shapes without host copies of their weights. */
kiln_status kiln_llm_cuda_create_random(const kiln_llm_config *c, kiln_dtype dtype, const kiln_llm_cuda_options *o,
                                        uint64_t seed, kiln_llm_cuda **out);
void kiln_llm_cuda_free(kiln_llm_cuda *g); /* accepts NULL; free its caches first */
/* Borrowed; valid while g lives. */
const kiln_llm_config *kiln_llm_cuda_config(const kiln_llm_cuda *g);
/* Bytes of weights on the device (what one decode step streams at least once). */
uint64_t kiln_llm_cuda_weight_bytes(const kiln_llm_cuda *g);
/* How steps of at most gemv_max_tokens tokens run, as a phrase: "decode: unfused" (a kernel per op;
 * the default), "decode: fused GEMVs" (the norm in the product's prologue, bias, activation and
 * residual add in its epilogue) or "decode: fused GEMVs + PDL" (the same, launches overlapping through
 * programmatic dependent launch on sm_90 and later); chosen at create time by the environment's
 * KILN_LLM_FUSE=off|on|pdl (unset: off). Static. */
const char *kiln_llm_cuda_decode_path(const kiln_llm_cuda *g);
/* The GEMV configurations chosen so far (benchmarks): returns how many product shapes (N, K, token
 * rows, output type) have one; for 0 <= i < that count also writes shape i's as one line into line
 * (its kernel geometry and, when timed, its time and GB/s). 0 when the GEMV configuration is forced
 * (KILN_LLM_GEMV) or none ran yet. */
int kiln_llm_cuda_gemv_picks(const kiln_llm_cuda *g, int i, char *line, size_t cap);

typedef struct kiln_llm_cuda_kv_options {
    int block_size;      /* tokens per block (16 unless told) */
    double mem_fraction; /* the cache takes this fraction of the device's free memory (0 < f <= 1) ... */
    uint64_t max_bytes;  /* ... but at most this many bytes (0: no cap) */
    bool fp8;            /* FP8 (E4M3) keys and values, one byte each, with fp8_scales */
    const float *fp8_scales; /* fp8: [n_layer][2][n_kv_head] key then value scales (> 0), copied; NULL: all 1.0 */
} kiln_llm_cuda_kv_options;

/* A cache for g's model in g's dtype (or FP8 with o->fp8): per layer, keys and values in blocks of
 * [n_kv_head][block_size][head_dim] (kv_cache.h's layout), as many blocks as the budget holds
 * (KILN_ERR_OUT_OF_MEMORY when not even one). All blocks start free. Caller owns *out. */
kiln_status kiln_llm_cuda_kv_create(kiln_llm_cuda *g, const kiln_llm_cuda_kv_options *o, kiln_llm_cuda_kv **out);
void kiln_llm_cuda_kv_free(kiln_llm_cuda_kv *kv); /* accepts NULL */
int kiln_llm_cuda_kv_blocks(const kiln_llm_cuda_kv *kv);     /* blocks in the cache */
int kiln_llm_cuda_kv_block_size(const kiln_llm_cuda_kv *kv); /* tokens per block */
/* The block allocator of kv_cache.h: take a free block (-1 when none), return one (returning a block
 * not taken aborts), count the free ones, ask whether a block id is taken. */
int kiln_llm_cuda_kv_alloc_block(kiln_llm_cuda_kv *kv);
void kiln_llm_cuda_kv_release_block(kiln_llm_cuda_kv *kv, int block);
int kiln_llm_cuda_kv_free_blocks(const kiln_llm_cuda_kv *kv);
bool kiln_llm_cuda_kv_block_taken(const kiln_llm_cuda_kv *kv, int block);

/* Runs one step of kiln_llm_forward's contract (same batch checks and errors, plus
 * KILN_ERR_INVALID_ARGUMENT when the batch exceeds g's options) with kv made for g. Logits rows
 * ([n_seqs, vocab], or [n_tokens, vocab] with all_logits) go to `logits` on the host when it is not
 * NULL, and the argmax of each row (lowest id on ties) to `greedy` when that is not NULL; either
 * waits for the step. With both NULL the step is only enqueued: its logits stay on the device
 * (kiln_llm_cuda_device_logits) and a failure of the GPU work shows in the next call that waits. */
kiln_status kiln_llm_cuda_forward(kiln_llm_cuda *g, kiln_llm_cuda_kv *kv, const kiln_llm_batch *b, float *logits,
                                  int32_t *greedy);
/* Device pointer to the last step's FP32 logits rows (valid until the next step), or NULL before any. */
const float *kiln_llm_cuda_device_logits(const kiln_llm_cuda *g);
/* Copies rows [row0, row0 + n_rows) of the last step's logits to host ([n_rows, vocab]) behind the
 * step (which may have been only enqueued) and waits. KILN_ERR_INVALID_ARGUMENT when the step has no
 * such rows; a failure of the step or the copy names the CUDA call. */
kiln_status kiln_llm_cuda_copy_logits(kiln_llm_cuda *g, int row0, int n_rows, float *host);

/* sampler.h's sampler on the GPU: scratch for up to max_rows rows of vocab logits at a time on one
 * device (about 16 bytes per row and token), and up to max_history distinct history tokens (prompt ∪
 * generated, over all rows of one call) for the penalties. Used by one thread at a time. */
typedef struct kiln_llm_cuda_sampler kiln_llm_cuda_sampler;

/* One row to sample: kiln_sample_next's arguments (params->logprobs must be false). */
typedef struct kiln_llm_cuda_sample_row {
    const kiln_sampling_params *params;
    const int32_t *prompt, *generated;
    int n_prompt, n_generated;
} kiln_llm_cuda_sample_row;

kiln_status kiln_llm_cuda_sampler_create(int device, int vocab, int max_rows, int max_history,
                                         kiln_llm_cuda_sampler **out); /* caller frees *out, also on failure */
void kiln_llm_cuda_sampler_free(kiln_llm_cuda_sampler *s);            /* accepts NULL */

/* tokens[r] = the token kiln_sample_next gives for rows[r] and logits row r, for r < n_rows: the same
 * processing in the same float / double arithmetic and order, the same draw (greedy rows too, with
 * their penalties). Logits come from host_logits ([n_rows, vocab], uploaded) when it is not NULL, else
 * from g's last step (kiln_llm_cuda_forward, which may have only enqueued it; vocab and device must
 * match and it must have at least n_rows rows), which are not modified. Waits for the result.
 * Log-probabilities are the CPU sampler's alone: a row asking for them is KILN_ERR_INVALID_ARGUMENT
 * (copy the logits to the host and use kiln_sample_next). Errors as kiln_sample_next (invalid params,
 * a token outside the vocabulary, a NaN or +inf logit, every logit -inf), naming the row; more than
 * max_rows rows or max_history history tokens is KILN_ERR_INVALID_ARGUMENT; GPU failures name the call. */
kiln_status kiln_llm_cuda_sample(kiln_llm_cuda_sampler *s, const kiln_llm_cuda *g, const float *host_logits,
                                 int n_rows, const kiln_llm_cuda_sample_row *rows, int32_t *tokens);

#ifdef __cplusplus
}
#endif
#endif
