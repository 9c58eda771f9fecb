/* llm_cuda_internal.h — what the files of src/llm/cuda/ share: the model on the device (weights,
 * step buffers, staging of the batch metadata), the KV cache, one step's device view of its batch,
 * and the kernel launchers of the .cu files (C linkage; each enqueues on g->kc.stream only and checks
 * its launch). Included by C and CUDA C. */
#ifndef KILN_LLM_CUDA_INTERNAL_H
#define KILN_LLM_CUDA_INTERNAL_H

#include "backends/cuda/cuda_device.h"  /* kiln_cuda_ctx and its opening, the setup lock, graph capture */
#include "backends/cuda/cuda_kernels.h" /* KILN_CUDA_TRY, KILN_CUBLAS_TRY, KILN_CUDA_LAUNCH_CHECK */
#include "backends/cuda/cuda_launchers.h" /* kiln_cuda_norm_rows, KILN_CUDA_NORM_RESIDUAL_MAX_LEN */
#include "llm/llm_cuda.h"

#include <stdbool.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define LLMC_ALIGN 256                       /* every device array starts on this boundary */
#define LLMC_WORKSPACE_BYTES ((size_t)32 << 20) /* cuBLASLt workspace */
#define LLMC_MAX_GROUP 8                     /* query heads one attention warp (prefill) or block (decode) takes */
#define LLMC_MAX_HEAD_DIM 256                /* longest head dim of the attention kernels (a multiple of 8) */
#define LLMC_SPLIT_MIN 128                   /* fewest keys per split of the decode attention */
#define LLMC_GEMV_MAX 8                      /* most token rows of the GEMV kernel */
#define LLMC_MAX_D KILN_CUDA_NORM_RESIDUAL_MAX_LEN /* widest d_model of the norm kernel (its row in shared memory) */
#define LLMC_DEQUANT_BYTES ((size_t)64 << 20)  /* workspace of the INT8 weight tiles dequantized for prefill */
#define LLMC_DEQUANT_TILE_BYTES ((size_t)12 << 20) /* a dequantized tile's aim: it stays in L2 from its write to
                                                     * the product's read (the next tile overwrites it there) */

/* One decoder layer on the device: norm parameters in FP32, matrices ([out, in] row-major, as
 * llm_internal.h) and biases in the model dtype. Biases and norm shifts are NULL for the Llama-like
 * families, but qkv_b with cfg.qkv_bias (Qwen2). */
typedef struct llmc_layer {
    float *norm1_w, *norm1_b, *norm2_w, *norm2_b;
    void *qkv_w, *qkv_b, *o_w, *o_b, *up_w, *up_b, *down_w, *down_b;
    float *qkv_s, *o_s, *up_s, *down_s; /* an INT8 matrix's row scales (its values int8); NULL: in the dtype */
    float qkv_a, o_a, up_a, down_a;     /* a W8A8 matrix's activation scale (llm_cuda_w8a8.h); 0: none */
} llmc_layer;

typedef struct llmc_plan llmc_plan; /* a cached cuBLASLt product (llm_cuda_gemm.cu) */
typedef struct llmc_imma_plan llmc_imma_plan; /* a cached cuBLASLt IMMA product (llm_cuda_w8a8.cu) */

/* The GEMV kernel of llm_cuda_gemm.cu: configurations 0 .. LLMC_GEMV_CONFIGS - 1 of the templated
 * family (llmc_gemv_config_name says which geometry). */
#define LLMC_GEMV_CONFIGS 10
/* The INT8 GEMV of llm_cuda_gemv_q.cu: configurations 0 .. LLMC_GEMV_Q8_CONFIGS - 1 of its family
 * (llmc_gemv_q8_config_name), chosen per shape as the 16-bit ones are. */
#define LLMC_GEMV_Q8_CONFIGS 10
#define LLMC_GEMV_AUTO (-1)  /* g->gemv_force: the configuration timed per shape (the default) */
#define LLMC_GEMV_PICKS 64   /* shapes whose configuration g remembers (replaced round-robin) */

/* The configuration used for the GEMV products of one shape, and how it was chosen. */
typedef struct llmc_gemv_pick {
    int N, K, n;
    bool out_f32;
    int wbits;       /* 16: the 16-bit family; 8 or 4: the quantized family with INT8 or INT4 weights */
    int cfg;         /* 0 .. LLMC_GEMV_CONFIGS - 1 (LLMC_GEMV_Q8_CONFIGS - 1 when quantized) */
    bool timed;      /* chosen by timing every configuration (else by the shape rule, not timed) */
    float us;        /* its time per product (timed picks), weights from HBM */
} llmc_gemv_pick;

struct kiln_llm_cuda {
    kiln_llm_config cfg;
    kiln_dtype dtype; /* KILN_F16 or KILN_BF16 */
    kiln_llm_cuda_options opt;
    kiln_cuda_ctx kc; /* stream, cuBLASLt handle, LLMC_WORKSPACE_BYTES of workspace, SM count (cuda_device.h) */
    /* weights: one allocation */
    void *weights;
    uint64_t weight_bytes;
    void *tok_emb, *pos_emb, *lm_head; /* lm_head == tok_emb when tied; pos_emb NULL for Llama */
    float *tok_emb_s, *lm_head_s;      /* row scales of an INT8 tok_emb / lm_head; NULL: in the dtype */
    void *deq;                         /* LLMC_DEQUANT_BYTES for the INT8 prefill tiles; NULL without INT8 */
    bool int4; /* the quantized matrices (those with a scale pointer) are INT4 (llm_cuda_gemv_q4.cu): packed
                  values, then [rows, groups] scales and right after them the zero points */
    struct llmc_fp8 *f8;               /* FP8 matrices (their values E4M3): llm_cuda_fp8.cu's state; else NULL */
    float *norm_f_w, *norm_f_b;
    llmc_layer *layers;
    /* step buffers: one allocation */
    void *acts;
    float *x;      /* [max_tokens, d_model] residual stream, FP32 */
    void *h;       /* [max_tokens, d_model] normed rows */
    void *qkv;     /* [max_tokens, q_dim + 2 kv_dim] */
    void *att;     /* [max_tokens, q_dim] attention output */
    void *proj;    /* [max_tokens, d_model] output of the o and down products */
    void *mlp;     /* [max_tokens, d_ff (GPT-2) or 2 d_ff (Llama)] */
    float *logits; /* [max_tokens, vocab] */
    int32_t *ids;  /* [max_tokens] greedy tokens */
    float *part;   /* split-decode partials: max_seqs * n_head * split_cap * (head_dim + 2) floats */
    int split_cap; /* most splits of one sequence's context */
    unsigned *att_count; /* [max_seqs][llmc_decode_counters()] decode splits finished, 0 between launches */
    int last_rows; /* logits rows of the last step, 0 before any */
    /* batch metadata: packed on the host (pinned), copied in one transfer */
    void *meta_host, *meta_dev;
    size_t meta_bytes;
    cudaEvent_t meta_done; /* the last transfer out of meta_host has finished */
    /* cuBLASLt plans, keyed by shape */
    llmc_plan *plans;
    int n_plans, next_plan;
    llmc_imma_plan *imma; /* [LLMC_IMMA_PLANS] W8A8 products (llm_cuda_w8a8.cu), NULL before the first */
    int next_imma;
    /* GEMV configurations, keyed by shape (llm_cuda_gemm.cu) */
    int gemv_force; /* LLMC_GEMV_AUTO, else the configuration of every GEMV product (KILN_LLM_GEMV) */
    int gemv_q8_force; /* the same for the INT8 GEMV (KILN_LLM_GEMV_Q8) */
    llmc_gemv_pick gemv_picks[LLMC_GEMV_PICKS];
    int n_gemv_picks, next_gemv_pick;
    int gemv_gate; /* the host gate of the GEMV timing (set: release the stream) */
    int fuse;      /* LLMC_FUSE_OFF, _ON or _PDL (KILN_LLM_FUSE) */
    bool pdl;      /* the unfused decode's GEMVs and RoPE + KV write as programmatic dependent launches
                      (sm_90; KILN_LLM_PDL=off turns them off) */
    bool gemm_q;   /* INT8 / INT4 products of 9..LLMC_GEMM_Q_MAX rows on llm_cuda_gemm_q.cu's tensor-core
                      product (KILN_LLM_GEMM_Q=on|off), else the dequantized tiles */
    /* the timing cache of options.timing_cache (llm_cuda_tactics.c) */
    struct kiln_timing_cache *tcache; /* NULL: none */
    char *tcache_path;
    int tcache_saved;                 /* tcache->added when the file was last written */
    char env[512];                    /* kiln_cuda_env_key: the prefix of every key */
    /* CUDA graphs of decode steps (llm_cuda_forward.c) */
    struct llmc_graph *graphs; /* [LLMC_GRAPHS] */
    int n_graphs;
    /* profiling (probe->profile): an event after each op and the op's class */
    cudaEvent_t *prof_ev;
    unsigned char *prof_cls;
    int prof_cap, prof_n;
    bool prof_on;
    int *prof_gate; /* the host gate holding the stream until the step is enqueued */
};

#define LLMC_GRAPHS 64 /* most decode graphs kept per model */

/* Frees the graphs and the profiling events (llm_cuda_forward.c). */
void llmc_graphs_free(kiln_llm_cuda *g);

struct kiln_llm_cuda_kv {
    int device;
    kiln_dtype dtype;
    int n_layer, n_kv_head, head_dim, block_size, n_blocks;
    void *data;         /* [layer][keys | values][block][n_kv_head][block_size][head_dim] */
    size_t block_elems; /* elements of one block of keys (or values) of one layer */
    size_t elem_bytes;  /* 2 (dtype), or 1 (FP8 E4M3) */
    float *scales;      /* FP8: [layer][keys | values][n_kv_head] on the device; else NULL */
    int *free_stack;    /* [n_blocks]; the top is free_stack[n_free - 1] */
    int n_free;
    bool *taken;        /* [n_blocks] */
};

/* One step as the kernels see it: device pointers into g->meta_dev and the step's sizes. */
typedef struct llmc_step {
    int n_tokens, n_seqs, n_out; /* n_out: logits rows */
    int max_new, max_ctx;        /* most new tokens / longest context of one sequence */
    bool decode;                 /* every sequence has exactly one new token */
    bool graph;                  /* a decode step or a speculative verify step: its shape keys a CUDA graph */
    int n_layers;                /* layers run: the model's, or the batch's exit_layers */
    int table_stride;            /* block table row length on the device */
    int inv_freq_stride;         /* 0: one RoPE table for all sequences, else head_dim / 2 */
    const int32_t *tokens, *positions, *tok_seq, *out_rows, *seq_start, *ctx_len, *table;
    const double *inv_freq;      /* [n_seqs or 1][rotary dims / 2]; NULL for GPT-2 */
} llmc_step;

/* Keys and values of layer l. */
void llmc_kv_layer(const kiln_llm_cuda_kv *kv, int layer, void **k, void **v);
/* An FP8 cache's scales of layer l on the device: [2][n_kv_head] (keys', values'); NULL otherwise. */
const float *llmc_kv_layer_scales(const kiln_llm_cuda_kv *kv, int layer);

/* llm_cuda_tactics.c — the tactics of options.timing_cache. A key is kiln_cuda_env_key's text, " | ",
 * what ("llm.gemm": a cuBLASLt product, "llm.gemv": a GEMV product, "llm.gemv.int8": an INT8 GEMV
 * product), " | " and the product's shape. */
/* Reads the file options.timing_cache names (none: nothing; a missing or corrupt file: an empty
 * cache, as for kiln build). */
kiln_status llmc_tactics_open(kiln_llm_cuda *g);
void llmc_tactics_close(kiln_llm_cuda *g);
/* The tactic recorded under (what, shape), or NULL (none, or no cache). Borrowed until the next put. */
const kiln_tactic *llmc_tactic_find(const kiln_llm_cuda *g, const char *what, const char *shape);
/* Records t under (what, shape) when there is a cache (a failure is logged: the tactic is only not kept). */
void llmc_tactic_put(kiln_llm_cuda *g, const char *what, const char *shape, const kiln_tactic *t);
/* Writes the cache file when records were put since it was last written (a failure is logged). */
void llmc_tactics_save(kiln_llm_cuda *g);

/* llm_cuda_gemm.cu: y[n, N] (row stride ldy; FP32 when out_f32, else g->dtype) = x[n, K] (row stride
 * ldx) W^T (+ bias [N]), W [N, K] row-major in g->dtype. The GEMV kernel when n <= gemv_max_tokens
 * and the operands are 16-byte aligned, else cuBLASLt (a bias needs !out_f32). */
kiln_status llmc_linear(kiln_llm_cuda *g, const void *x, int ldx, int n, int K, const void *w, const void *bias,
                        int N, void *y, int ldy, bool out_f32);
void llmc_plans_free(kiln_llm_cuda *g);
/* The GEMV kernel in configuration cfg (0 .. LLMC_GEMV_CONFIGS - 1) on stream:
 * llmc_linear's product for 1 <= n <= LLMC_GEMV_MAX token rows, weights in dtype (KILN_F16 or
 * KILN_BF16); needs K % 8 == 0, ldx % 8 == 0 and x, w 16-byte aligned (refused otherwise). pdl: as a
 * programmatic dependent launch (its first weights are fetched while the kernel before finishes; as
 * g->pdl). For tests. */
kiln_status llmc_gemv_launch(kiln_dtype dtype, cudaStream_t stream, int cfg, const void *x, int ldx, int n, int K,
                             const void *w, const void *bias, int N, void *y, int ldy, bool out_f32, bool pdl);
/* "#0: 32 thr/row x 1 rows, 4 groups, 8 loads/row" and the like; "?" for others. */
const char *llmc_gemv_config_name(int cfg);
/* g->gemv_force from the environment: KILN_LLM_GEMV unset, "" or "auto": LLMC_GEMV_AUTO; a configuration
 * number 0..LLMC_GEMV_CONFIGS-1; anything else is refused. */
kiln_status llmc_gemv_mode_from_env(int *mode);
/* g->gemv_q8_force from KILN_LLM_GEMV_Q8 the same way (0..LLMC_GEMV_Q8_CONFIGS-1). */
kiln_status llmc_gemv_q8_mode_from_env(int *mode);

/* The configuration llmc_linear's GEMV would use for this product (KILN_LLM_GEMV's when forced, else
 * the shape's remembered, timed or ruled one, as llmc_linear chooses it: timing may overwrite y). */
kiln_status llmc_gemv_config(kiln_llm_cuda *g, const void *x, int ldx, int n, int K, const void *w, const void *bias,
                             int N, void *y, int ldy, bool out_f32, int *cfg);

/* llm_cuda_gemv_fused.cu: the GEMV of llmc_gemv_launch with the norm before it and the bias, the
 * activation or the residual add after it folded in (y[t, j] below is the product of input row t with
 * weight row j, bias added in FP32). */
enum {
    LLMC_PRO_INPUT, /* input rows: x [n, K] in dtype, row stride ldx (a multiple of 8, x 16-byte aligned) */
    LLMC_PRO_NORM,  /* input rows: norm(res[rows ? rows[t] : t]) (K = the norm's width), llmc_add_norm's
                     * LayerNorm (norm_b set) or RMSNorm with weight norm_w + norm_w_offset, eps, FP32
                     * statistics, the normed values rounded to dtype; never stored */
};
enum {
    LLMC_EPI_STORE,    /* y[t * ldy + j] = y[t, j] in dtype, or FP32 with out_f32 */
    LLMC_EPI_GELU,     /* y[t * ldy + j] = GELU(tanh)(y[t, j] rounded to dtype) */
    LLMC_EPI_SWIGLU,   /* w has 2 N rows [gate | up] (bias 2 N values): y[t * ldy + j] = SiLU(gate) * up */
    LLMC_EPI_GEGLU,    /* ... GELU(tanh)(gate) * up; gate and up rounded to dtype first */
    LLMC_EPI_RESIDUAL, /* res[t * ldres + j] += y[t, j] rounded to dtype (FP32 residual stream) */
};
typedef struct llmc_gemv_fused {
    kiln_dtype dtype; /* KILN_F16 or KILN_BF16: x, w, bias, y */
    int cfg;          /* the geometry, 0 .. LLMC_GEMV_CONFIGS - 1 (llmc_gemv_config_name) */
    int n, K, N;      /* token rows (llmc_gemv_fused_fits), inputs per row, output rows */
    int prologue, epilogue;
    const void *x;
    int ldx;
    float *res; /* [*, ldres] FP32: the norm's input, the residual epilogue's output (not both at once) */
    int ldres;
    const int32_t *rows; /* LLMC_PRO_NORM: token t's residual row (NULL: t) */
    const float *norm_w, *norm_b;
    float norm_w_offset, eps;
    const void *w, *bias; /* w [N (gated: 2 N), K] row-major, 16-byte aligned; bias NULL or [N (2 N)] */
    void *y;
    int ldy;
    bool out_f32;
    bool pdl;     /* launch with programmatic stream serialization (sm_90: overlaps the previous kernel's tail) */
    int sm_count; /* the grid is at most the blocks resident on this many SMs */
} llmc_gemv_fused;
/* Whether the fused kernel takes n token rows of K inputs (n <= LLMC_GEMV_MAX, K a multiple of 8; with
 * the norm prologue the normed rows, n * K * 2 bytes, within its 96 KB of shared memory). */
bool llmc_gemv_fused_fits(int n, int K, bool norm);
/* Enqueues the fused GEMV on stream; arguments it does not take are KILN_ERR_INVALID_ARGUMENT. */
kiln_status llmc_gemv_fused_launch(const llmc_gemv_fused *a, cudaStream_t stream);

/* g->fuse: how steps of at most gemv_max_tokens tokens run (llm_cuda_forward.c) */
enum {
    LLMC_FUSE_OFF, /* kernel by kernel: norm, product, RoPE + KV write, attention, product, norm, ... */
    LLMC_FUSE_ON,  /* the fused GEMV (norm prologue, bias / activation / residual epilogues) */
    LLMC_FUSE_PDL, /* the same, its launches with programmatic dependent launch (sm_90 and later) */
};
/* g->fuse from the environment: KILN_LLM_FUSE unset or "": off (measured slower than the unfused step
 * on the H200, bench/RESULTS.md); "off"/"0", "on"/"1", "pdl"/"2" (on before sm_90); anything else is
 * refused. */
kiln_status llmc_fuse_mode_from_env(int cc_major, int *mode);
/* g->pdl from KILN_LLM_PDL (on, the default from sm_90 on, or off; anything else is refused). */
kiln_status llmc_pdl_from_env(int cc_major, bool *pdl);
/* g->gemm_q from KILN_LLM_GEMM_Q (on or off; unset: LLMC_GEMM_Q_DEFAULT; anything else is refused). */
kiln_status llmc_gemm_q_from_env(bool *on);
/* A phrase naming the path of a mode: "decode: fused GEMVs + PDL", "decode: fused GEMVs" or
 * "decode: unfused". */
const char *llmc_fuse_mode_name(int mode);
/* llm_cuda_gemv_q.cu — weight-only INT8 matrices (int8 [N, K], one fp32 scale per row), and the GEMV
 * family it shares with INT4 matrices. */
/* llmc_linear for a matrix w that is INT8 when scale is not NULL (else llmc_linear itself): the INT8
 * GEMV when n <= gemv_max_tokens, K % 16 == 0 and the operands are 16-byte aligned, the tensor-core
 * product llmc_linear_gemm_q up to LLMC_GEMM_Q_MAX rows (g->gemm_q), else tiles of weight rows dequantized to
 * g->dtype in g->deq, each through llmc_linear's cuBLASLt product. */
kiln_status llmc_linear_w(kiln_llm_cuda *g, const void *x, int ldx, int n, int K, const void *w, const float *scale,
                          const void *bias, int N, void *y, int ldy, bool out_f32);
/* The INT8 GEMV in configuration cfg (0 .. LLMC_GEMV_Q8_CONFIGS - 1) on stream: y[n, N] (FP32 when
 * out_f32, else dtype) = x[n, K] (dtype, KILN_F16 or KILN_BF16) (q scale)^T (+ bias [N] in dtype), sums
 * in fp32; needs llmc_gemv_q8_fits and ldy >= N (refused otherwise); pdl as llmc_gemv_launch's. For
 * tests too. */
kiln_status llmc_gemv_q8_launch(kiln_dtype dtype, cudaStream_t stream, int cfg, const void *x, int ldx, int n, int K,
                                const int8_t *q, const float *scale, const void *bias, int N, void *y, int ldy,
                                bool out_f32, bool pdl);
/* Whether the INT8 GEMV takes these operands: 1 <= n <= LLMC_GEMV_MAX, K a multiple of 16, ldx a
 * multiple of 8 and >= K, x and q 16-byte aligned. */
bool llmc_gemv_q8_fits(int n, int K, int ldx, const void *x, const void *q);
/* "#0: 32 thr/row x 1 rows, 4 groups, 4 loads/row" and the like; "?" for others. */
const char *llmc_gemv_q8_config_name(int cfg);
/* The configuration of the INT8 GEMV for this product (llm_cuda_gemm.cu): KILN_LLM_GEMV_Q8's when
 * forced, else the shape's remembered, timed or ruled one, as llmc_gemv_config chooses (timing may
 * overwrite y). */
kiln_status llmc_gemv_q8_config(kiln_llm_cuda *g, const void *x, int ldx, int n, int K, const int8_t *q,
                                const float *scale, const void *bias, int N, void *y, int ldy, bool out_f32, int *cfg);
/* The weight rows of a dequantized tile of a matrix of K inputs (llmc_linear_w, llmc_linear_q4): a
 * multiple of 64 (bias and output offsets stay aligned) near LLMC_DEQUANT_TILE_BYTES, within g->deq;
 * refused (naming what) when not even 64 rows fit. */
kiln_status llmc_dequant_tile_rows(const char *what, int K, int64_t *rows);
/* dst[r, k] = q[r, k] * scale[r] rounded to dtype (KILN_F16 or KILN_BF16), r < rows, k < K, on stream. */
kiln_status llmc_dequant_q8_launch(kiln_dtype dtype, cudaStream_t stream, const int8_t *q, const float *scale,
                                   int rows, int K, void *dst);
/* Random INT8 weights for benchmarks: q [rows, cols] uniform integers in [-127, 127] from seed, every
 * row scale amp / 127 (values uniform in [-amp, amp] as llmc_fill_random's). */
kiln_status llmc_fill_random_q8(kiln_llm_cuda *g, int8_t *q, float *scale, size_t rows, size_t cols, uint64_t seed,
                                float amp);
/* llmc_embed, from an INT8 token embedding when g->tok_emb_s is set (INT4 with g->int4). */
kiln_status llmc_embed_any(kiln_llm_cuda *g, const llmc_step *s);

/* llm_cuda_gemm_q.cu — the weight-only INT8 / INT4 products of 1 .. LLMC_GEMM_Q_MAX token rows on the
 * tensor cores (the weights dequantized in shared memory). */
#define LLMC_GEMM_Q_MAX 128
#define LLMC_GEMM_Q_DEFAULT true /* the H200 op cases pass; KILN_LLM_GEMM_Q=off for A/B runs */
typedef struct llmc_gemm_q {
    kiln_dtype dtype; /* of x, bias and y (KILN_F16 or KILN_BF16; y FP32 when out_f32) */
    cudaStream_t stream;
    bool pdl;  /* a programmatic dependent launch (as g->pdl) */
    int wbits; /* 8: int8 [N, K] with row scales; 4: packed INT4 with group scales and zero points */
    const void *x;
    int ldx, n, K;
    const void *w;
    const float *scale, *zero; /* zero: INT4's zero points (NULL for INT8) */
    const void *bias;          /* [N] in dtype, or NULL */
    int N;
    void *y;
    int ldy;
    bool out_f32;
    float *ws;       /* fp32 workspace of n * N sums for a K split (NULL, or too small: no split) */
    size_t ws_bytes;
    int sm_count;
} llmc_gemm_q;
/* Whether the product takes these operands: wbits 8 or 4, 1 <= n <= LLMC_GEMM_Q_MAX, K a multiple of 16
 * (32 for INT4), ldx a multiple of 8 and >= K, x and w 16-byte aligned. */
bool llmc_gemm_q_fits(int wbits, int n, int K, int ldx, const void *x, const void *w);
/* y[n, N] = x W^T (+ bias), sums in fp32 (INT8: the integer weights times x, the row scale applied to the
 * sum; INT4: weights (q - zero) * scale rounded to dtype); refused unless llmc_gemm_q_fits, N >= 1,
 * ldy >= N and the scales (and INT4's zero points) are given. For tests too. */
kiln_status llmc_gemm_q_launch(const llmc_gemm_q *p);
/* llmc_gemm_q_launch on g's stream, dtype, SMs and PDL choice, with g->deq as its split-K workspace. */
kiln_status llmc_linear_gemm_q(kiln_llm_cuda *g, int wbits, const void *x, int ldx, int n, int K, const void *w,
                               const float *scale, const float *zero, const void *bias, int N, void *y, int ldy,
                               bool out_f32);

/* llm_cuda_gemv_q4.cu — weight-only INT4 matrices (packed [N, K] in groups of 128, fp32 scales [N, G]
 * followed by fp32 zero points [N, G], G = ceil(K / 128); llm_gemv_q4.h's layout). */
/* llmc_linear_w for an INT4 matrix (scale: its scales, the zero points after them): the INT4 GEMV when
 * n <= gemv_max_tokens, K % 32 == 0 and the operands are 16-byte aligned, llmc_linear_gemm_q (g->gemm_q) up to
 * LLMC_GEMM_Q_MAX rows, else dequantized tiles of weight rows in g->deq through llmc_linear's cuBLASLt
 * product. */
kiln_status llmc_linear_q4(kiln_llm_cuda *g, const void *x, int ldx, int n, int K, const void *w, const float *scale,
                           const void *bias, int N, void *y, int ldy, bool out_f32);
/* The INT4 GEMV (llm_cuda_gemv_q.cu's family, configuration cfg: 0 .. LLMC_GEMV_Q8_CONFIGS - 1) on stream:
 * y[n, N] (FP32 when out_f32, else dtype) = x[n, K] (dtype, KILN_F16 or KILN_BF16) W^T (+ bias [N] in
 * dtype), W[o, k] = (q[o, k] - zero[o, g]) * scale[o, g], sums in fp32; needs llmc_gemv_q4_fits and
 * ldy >= N (refused otherwise); pdl as llmc_gemv_launch's. For tests too. */
kiln_status llmc_gemv_q4_launch(kiln_dtype dtype, cudaStream_t stream, int cfg, const void *x, int ldx, int n, int K,
                                const uint8_t *q, const float *scale, const float *zero, const void *bias, int N,
                                void *y, int ldy, bool out_f32, bool pdl);
/* llmc_gemv_q8_fits with K a multiple of 32 (the INT4 GEMV's operands). */
bool llmc_gemv_q4_fits(int n, int K, int ldx, const void *x, const void *q);
/* The configuration of the INT4 GEMV for this product, chosen as llmc_gemv_q8_config chooses (the same
 * KILN_LLM_GEMV_Q8 forces it; shapes timed and remembered apart from INT8's). */
kiln_status llmc_gemv_q4_config(kiln_llm_cuda *g, const void *x, int ldx, int n, int K, const uint8_t *q,
                                const float *scale, const float *zero, const void *bias, int N, void *y, int ldy,
                                bool out_f32, int *cfg);
/* dst[r, k] = (q[r, k] - zero[r, g]) * scale[r, g] rounded to dtype (KILN_F16 or KILN_BF16), r < rows, k < K. */
kiln_status llmc_dequant_q4_launch(kiln_dtype dtype, cudaStream_t stream, const uint8_t *q, const float *scale,
                                   const float *zero, int rows, int K, void *dst);
/* llmc_embed from g's INT4 token embedding. */
kiln_status llmc_embed_q4(kiln_llm_cuda *g, const llmc_step *s);
/* Random INT4 weights for benchmarks: [rows, cols] packed random nibbles, scales (at scale) amp / 7.5 and
 * zero points (after them) 7.5: values in [-amp, amp]. */
kiln_status llmc_fill_random_q4(kiln_llm_cuda *g, uint8_t *q, float *scale, size_t rows, size_t cols, uint64_t seed,
                                float amp);
/* llm_cuda_fp8.cu — FP8 matrices (E4M3 codes [N, K], one fp32 scale per row; activations rounded to
 * E4M3 per product). */
typedef struct llmc_fp8 llmc_fp8;
/* g->f8 for m's FP8 matrices (their static activation scales; m NULL: random FP8 weights, dynamic
 * scales): the activation codes' and the GEMM tiles' device buffers. */
kiln_status llmc_fp8_create(kiln_llm_cuda *g, const kiln_llm_model *m);
void llmc_fp8_free(kiln_llm_cuda *g);
/* llmc_linear_w for a product whose matrix is FP8 when scale is set and g->f8 exists (slot: its
 * kiln_llm_model.act_amax slot, KILN_LLM_ACT_QKV ..., for its static activation scale): x rounded to
 * E4M3 once, then the FP8 GEMV for up to gemv_max_tokens rows, else cuBLASLt's FP8 GEMM over tiles of
 * weight rows and a scaling epilogue (the GEMV over groups of rows where cuBLASLt cannot). */
kiln_status llmc_linear_q(kiln_llm_cuda *g, int slot, const void *x, int ldx, int n, int K, const void *w,
                          const float *scale, const void *bias, int N, void *y, int ldy, bool out_f32);
/* Rounds x [n, K] (dtype, row stride ldx) to E4M3 on stream: xs[t] = act_scale, or (0) max |x[t]| / 448
 * (1 for a row of zeros), codes[t, k] = e4m3(x[t, k] / xs[t]) (dense rows of K). For tests too. */
kiln_status llmc_fp8_quantize_launch(kiln_dtype dtype, cudaStream_t stream, const void *x, int ldx, int n, int K,
                                     float act_scale, uint8_t *codes, float *xs);
/* The FP8 GEMV on stream: y[r, o] = sum_k e4m3(w[o, k]) e4m3(codes[r, k]) * (scale[o] * xs[r]) + bias[o]
 * (bias and y in dtype, y FP32 when out_f32), 1 <= n <= LLMC_GEMV_MAX; with K % 16 == 0 codes and w
 * 16-byte aligned (refused otherwise). For tests too. */
kiln_status llmc_gemv_fp8_launch(kiln_dtype dtype, cudaStream_t stream, const uint8_t *codes, const float *xs, int n,
                                 int K, const uint8_t *w, const float *scale, const void *bias, int N, void *y, int ldy,
                                 bool out_f32);
/* llmc_embed_any, from an E4M3 token embedding when g->f8 and g->tok_emb_s are set. */
kiln_status llmc_embed_q(kiln_llm_cuda *g, const llmc_step *s);
/* Random FP8 weights for benchmarks: q [rows, cols] the codes of uniform values in [-448, 448) from seed,
 * every row scale amp / 448 (values uniform in [-amp, amp] as llmc_fill_random's, rounded to E4M3). */
kiln_status llmc_fill_random_fp8(kiln_llm_cuda *g, uint8_t *q, float *scale, size_t rows, size_t cols, uint64_t seed,
                                 float amp);

/* llm_cuda_ops.cu */
/* x[t] = tok_emb[tokens[t]] (+ pos_emb[positions[t]]) in FP32, times sqrt(d_model) with cfg.scale_emb. */
kiln_status llmc_embed(kiln_llm_cuda *g, const llmc_step *s);
/* For output row r of n_rows, t = rows ? rows[r] : r: v = x[t] (+ delta[t], a g->dtype [*, d_model]
 * array, when not NULL), stored back into x[t] when store; h[r] = norm(v) with w (+ 1 for Gemma) and b
 * (b NULL: RMSNorm), statistics in FP32: kiln_cuda_norm_rows's residual form. */
kiln_status llmc_add_norm(kiln_llm_cuda *g, int n_rows, const int32_t *rows, const void *delta, bool store,
                          const float *w, const float *b);
/* Per token: RoPE on the rotary dims of its q and k heads in g->qkv (not GPT-2), then its k and v
 * heads into the cache slot of its position (kv_scales: the layer's FP8 scales, llmc_rope_kv's). */
kiln_status llmc_rope_kv_write(kiln_llm_cuda *g, const llmc_step *s, void *kc, void *vc, const float *kv_scales,
                               int block_size);

/* llmc_rope_kv_write on plain parameters: for token t < n_tokens (sequence tok_seq[t], position
 * positions[t]), its n_head q heads, n_kv_head k heads and n_kv_head v heads of head_dim (even, <=
 * LLMC_MAX_HEAD_DIM) at qkv + t * ldq; with inv_freq ([sequences or 1][rotated dims / 2], row stride
 * inv_freq_stride, 0: one row for all) the first rot_dim dims of q and k are rotated in place (HF's
 * rotate_half over them, angles position * inv_freq in double, cos and sin times rope_scale), then k
 * and v go to slot position % block_size of block table[seq * table_stride + position / block_size]
 * of kc / vc (kv_cache.h's layout, one layer): in dtype, or with kv_scales as E4M3 codes of x / scale
 * (nearest, saturating; src/quant/fp8.h's rule). */
typedef struct llmc_rope_kv {
    kiln_dtype dtype; /* KILN_F16 or KILN_BF16 */
    int n_tokens, n_head, n_kv_head, head_dim, block_size;
    int rot_dim;       /* even, <= head_dim; 0: head_dim (Phi-3's partial RoPE rotates fewer) */
    double rope_scale; /* cos and sin times it (LongRoPE's attention factor); 0: 1 */
    void *qkv;
    int ldq;
    const int32_t *positions, *tok_seq;
    const double *inv_freq; /* NULL: no rotation (GPT-2) */
    int inv_freq_stride;
    const int32_t *table;
    int table_stride;
    void *kc, *vc;
    const float *kv_scales; /* an FP8 cache: [2][n_kv_head] key then value scales (device); NULL: dtype */
    bool pdl; /* launch with programmatic stream serialization (sm_90: overlaps the previous kernel's tail) */
} llmc_rope_kv;
kiln_status llmc_rope_kv_launch(const llmc_rope_kv *a, cudaStream_t stream);
/* GPT-2: g->mlp[n, d_ff] = GELU(tanh) in place. The others: the gate half of g->mlp[n, 2 d_ff] becomes
 * SiLU(gate) * up, or GELU(tanh)(gate) * up (cfg.gate_act). */
kiln_status llmc_activation(kiln_llm_cuda *g, int n);
/* llmc_activation on plain parameters: not gated, x[n, ff] = GELU(tanh)(x) in place; gated, rows
 * [gate | up] of x[n, 2 ff] with gate = act(gate) * up (the up half left as is); values in dtype, the
 * activation in FP32 on them, as kiln_llm_gelu_tanh / kiln_llm_gated. */
typedef struct llmc_activation_args {
    kiln_dtype dtype; /* KILN_F16 or KILN_BF16 */
    bool gated;
    kiln_llm_gate_act act; /* gated: KILN_GATE_SILU or KILN_GATE_GELU_TANH */
    void *x;
    int n, ff;
    int sm_count; /* the grid is at most 8 blocks a SM */
    bool pdl;     /* launch with programmatic stream serialization (sm_90: overlaps the previous kernel's tail) */
} llmc_activation_args;
kiln_status llmc_activation_launch(const llmc_activation_args *a, cudaStream_t stream);
/* greedy[r] = argmax of g->logits row r (lowest index on ties), r < n_rows. */
kiln_status llmc_argmax(kiln_llm_cuda *g, int n_rows);
/* Loads the argmax kernel (a lazily loaded kernel's first launch would otherwise load it, outside the
 * setup lock: it runs after the step's layers); the caller holds the setup lock. */
kiln_status llmc_argmax_load(void);
/* ids[r] = argmax of logits row r of vocab FP32 values (lowest index on ties; NaN never wins, a row
 * of NaNs gives 0), r < n_rows, enqueued on stream. */
kiln_status llmc_argmax_launch(cudaStream_t stream, const float *logits, int n_rows, int vocab, int32_t *ids);
/* n elements of dtype at p (FP32 or g's dtype) = center + scale * uniform[-1, 1) from (seed, index). */
kiln_status llmc_fill_random(kiln_llm_cuda *g, void *p, kiln_dtype dtype, size_t n, uint64_t seed, float center,
                             float scale);

/* Arrival counters of the decode attention per sequence: one per (KV head, chunk of at most
 * LLMC_MAX_GROUP of its query heads). */
static inline int llmc_decode_counters(int n_head, int n_kv_head) {
    return n_kv_head * ((n_head / n_kv_head + LLMC_MAX_GROUP - 1) / LLMC_MAX_GROUP);
}

/* One decode attention launch (llm_cuda_decode.cu): every sequence's one new token (query heads at
 * q + seq * ldq, 16-byte aligned rows) attends to its context of ctx_len[seq] <= max_ctx keys in the
 * paged cache kc/vc (kv_cache.h's layout, one layer, 16-byte aligned), output at out + seq * ldo. The
 * grid (splits of the context, KV heads x chunks of query heads, sequences) is a function of
 * (n_seqs, max_ctx, shapes, sm_count) only, so a CUDA graph captured for a context bucket stays right
 * while the contexts grow inside it. ldq and ldo are multiples of 8. */
typedef struct llmc_decode_attn {
    kiln_dtype dtype; /* KILN_F16 or KILN_BF16: queries, cache and output */
    int head_dim;     /* a multiple of 8, 8..LLMC_MAX_HEAD_DIM */
    int n_head, n_kv_head, n_seqs, block_size;
    int max_ctx; /* no context exceeds it (the step's context bucket) */
    const void *q;
    int ldq;
    void *out;
    int ldo;
    const int32_t *ctx_len, *table; /* [n_seqs], [n_seqs][table_stride] block ids */
    int table_stride;
    const void *kc, *vc;
    float *part;     /* split partials: at least n_seqs * n_head * split_cap * (head_dim + 2) floats */
    int split_cap;   /* most splits of one context */
    unsigned *count; /* [n_seqs][llmc_decode_counters()] arrival counters: zero before the first launch, left zero */
    int sm_count;
    int part_keys; /* keys per split; 0: llmc_decode_part's choice; -1: one split of the whole context */
    /* Rows that are the new tokens of a ragged step (NULL: row z is sequence z, context ctx_len[z]):
     * row z is token z of sequence row_seq[z] (its block table row), at position row_pos[z], seeing
     * keys 0 .. row_pos[z]. Only with part_keys -1 (no partials, no counters: rows may outnumber them). */
    const int32_t *row_seq, *row_pos;
    int window; /* 0: none; else a row at position p sees keys max(0, p + 1 - window) .. p only (its own
                 * included: the sliding window of Mistral and the CPU attention) */
    const float *kv_scales; /* an FP8 (E4M3) cache: [2][n_kv_head] key then value scales (device), the
                             * codes dequantized in registers; NULL: a cache of dtype */
    bool pdl; /* a programmatic dependent launch (sm_90: resident while the kernel before it ends) */
} llmc_decode_attn;

/* Keys per split of the decode attention for these shapes: a multiple of 4 tiles (128 keys at head_dim
 * <= 64, 64 at <= 128, 32 at <= 256), at least 8 tiles, about two waves of resident blocks over the
 * SMs, at most max_splits splits of max_ctx. */
int llmc_decode_part(int head_dim, int n_seqs, int n_kv_head, int max_ctx, int sm_count, int max_splits);
/* Enqueues the decode attention on stream; shapes the kernel does not take are
 * KILN_ERR_INVALID_ARGUMENT, more splits than split_cap KILN_ERR_INTERNAL. */
kiln_status llmc_decode_attention(const llmc_decode_attn *a, cudaStream_t stream);

/* One prefill attention launch (llm_cuda_attn.cu): the new tokens of sequence s are tokens
 * seq_start[s] .. seq_start[s + 1] - 1 (at most max_new of them), at positions ctx_len[s] - n ..
 * ctx_len[s] - 1 of its context, whose keys and values (theirs included) are in the paged cache
 * kc/vc (kv_cache.h's layout, one layer, 16-byte aligned); token t's query heads are at q + t * ldq,
 * its output heads at out + t * ldo (ldq, ldo multiples of 8). Causal: token t sees keys up to its
 * own position (and, with a window, none before it by window or more). */
typedef struct llmc_prefill_attn {
    kiln_dtype dtype; /* KILN_F16 or KILN_BF16: queries, cache and output */
    int head_dim;     /* a multiple of 8, 8..LLMC_MAX_HEAD_DIM */
    int n_head, n_kv_head, n_seqs, block_size;
    int max_new; /* most new tokens of one sequence */
    const void *q;
    int ldq;
    void *out;
    int ldo;
    const int32_t *seq_start, *ctx_len, *table; /* [n_seqs + 1], [n_seqs], [n_seqs][table_stride] */
    int table_stride;
    const void *kc, *vc;
    int kernel; /* LLMC_PREFILL_AUTO (0), LLMC_PREFILL_CUDA_CORES or LLMC_PREFILL_TENSOR_CORES */
    int window; /* 0: none; else token t at position p sees keys max(0, p + 1 - window) .. p only */
    const float *kv_scales; /* an FP8 (E4M3) cache: [2][n_kv_head] key then value scales (device); NULL: dtype */
} llmc_prefill_attn;

/* llmc_prefill_attn.kernel: AUTO takes the tensor-core kernel (llm_cuda_prefill.cu) on sm_80+ with
 * q, kc, vc and out 16-byte aligned, else the CUDA-core kernel (llm_cuda_attn.cu); the others force one. */
enum { LLMC_PREFILL_AUTO = 0, LLMC_PREFILL_CUDA_CORES = 1, LLMC_PREFILL_TENSOR_CORES = 2 };

/* Enqueues the prefill attention on stream; shapes it does not take are KILN_ERR_INVALID_ARGUMENT, the
 * tensor-core kernel forced on a device before sm_80 or on unaligned arrays KILN_ERR_UNSUPPORTED. */
kiln_status llmc_prefill_attention(const llmc_prefill_attn *a, cudaStream_t stream);
/* The tensor-core kernel of llmc_prefill_attention (llm_cuda_prefill.cu), shapes already checked. */
kiln_status llmc_prefill_attention_tc(const llmc_prefill_attn *a, cudaStream_t stream);

/* llm_cuda_attn.cu: g->att = causal attention of every new token over its sequence's cache (which
 * already holds the step's keys and values) in layer kc/vc: llmc_decode_attention when s->decode; a
 * step of few new tokens per sequence over long contexts (a prompt after a cached prefix) through it
 * too, one row per token (llmc_decode_attn.row_seq); else llmc_prefill_attention. */
#define LLMC_TOKEN_ROWS_MAX_NEW 64 /* most new tokens of one sequence for the decode kernel's token rows */
kiln_status llmc_attention(kiln_llm_cuda *g, const llmc_step *s, const void *kc, const void *vc, const float *kv_scales,
                           int block_size);

#ifdef __cplusplus
}
#endif
#endif
