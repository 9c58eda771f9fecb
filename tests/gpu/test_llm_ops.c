/* test_llm_ops.c — every LLM kernel launcher of src/llm/cuda/ alone against its CPU reference
 * (src/llm/llm_cpu_ops.c; the sampler against sampler.c), case by case from tables of shapes, in
 * fp16 and bf16. The GPU and the CPU see the same 16-bit values (the CPU in FP32); outputs start as a
 * NaN poison, so an output never written shows.
 *
 *  - prefill attention (llmc_prefill_attention, its CUDA-core and its tensor-core kernel) and decode
 *    attention (llmc_decode_attention, keys per split from the heuristic and forced to 48) vs
 *    kiln_llm_attention over a paged CPU cache: head dims 8..256 (the fast paths 64, 80, 96, 128, 256
 *    and generic ones), query heads per KV head 1, 2, 3, 4, 5, 8, 12 and 16 (more than 8: chunked in
 *    the decode kernel), contexts at and around the 16-token block edges up to 600, batches 1, 3 and
 *    8, chunked prefill (1..300 new tokens after a cached prefix), the same prefill steps through the
 *    decode kernel's token rows (row_seq, row_pos); the decode split counters must be back at zero.
 *    Error: max |gpu - cpu| / max |cpu| <= 5e-3 (fp16), 2e-2 (bf16).
 *  - RoPE + KV write (llmc_rope_kv_launch) vs kiln_llm_rope + kiln_llm_kv_write: head dims 8..256,
 *    GQA, with and without rotation, positions at block edges; every q value and every cache slot
 *    (written or not) compared: <= 2e-3 (fp16), 1.6e-2 (bf16) of the largest |value|; values exact.
 *  - residual add + LayerNorm / RMSNorm (llmc_add_norm_launch) vs kiln_llm_norm: widths 8..12288, with
 *    and without the residual, stored or not, gathered rows: h <= 4e-3 (fp16), 1.6e-2 (bf16) of the
 *    largest |h|; the FP32 residual exact.
 *  - the GEMV family (llmc_gemv_launch, every configuration) vs kiln_llm_linear: K 64..4096, N 5..2304,
 *    1, 3 and 8 rows, bias or not, 16-bit or FP32 out: <= 1.5e-3 (fp16), 1e-2 (bf16), 1e-4 (FP32 out).
 *  - the fused GEMV (llmc_gemv_fused_launch, every configuration, with and without PDL, grids that loop
 *    over row groups) vs kiln_llm_norm + kiln_llm_linear + GELU / kiln_llm_gated / the residual add:
 *    K 64..6144, 1..8 rows (up to 96 KB of normed rows), gathered residual rows, LayerNorm and RMSNorm
 *    with 1 + w, padded strides: <= 1.5e-3 (fp16), 1e-2 (bf16); gated 4e-3, 1.6e-2; FP32 out 5e-4,
 *    2e-3; nothing outside the product written.
 *  - sampling: the greedy argmax kernel (llmc_argmax_launch) vs a CPU argmax (ties to the lowest id,
 *    NaN never wins) and the GPU sampler (kiln_llm_cuda_sample) vs kiln_sample_next (greedy,
 *    temperature + top-k, top-p, min-p + penalties): the same token ids exactly.
 *
 * Prints one line per case; exits 1 on a failure, 77 without a GPU or without the cuda backend. */
#include "llm/llm_cuda.h"

#include <stdio.h>

#ifdef KILN_HAVE_CUDA
#include "llm_test_util.h"
#include "llm/cuda/llm_cuda_internal.h"
#include "llm/kv_cache.h"
#include "llm/llm_cpu_ops.h"
#include "llm/sampler.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define BS 16 /* tokens per cache block */

static int g_cases;
static uint32_t g_rng = 12345;

/* Records one case: prints its line, counts a failure. */
static void report(const char *kernel, const char *shape, kiln_dtype dt, double err, double tol, bool ok) {
    g_cases++;
    printf("%-10s %-44s %-5s %10.2e %8.1e %s\n", kernel, shape, lt_dtype_name(dt), err, tol, ok ? "ok" : "FAIL");
    LT_EXPECT(ok, "%s %s %s: max rel err %.3e (tol %.1e)", kernel, shape, lt_dtype_name(dt), err, tol);
}

/* ---------------------------------------------------------------- attention */

typedef struct attn_shape {
    int hd, n_head, n_kv;
} attn_shape;

/* head dims x (query heads, KV heads): each head dim with three of the GQA shapes */
static const int attn_hds[] = {8, 16, 24, 40, 64, 72, 80, 96, 104, 128, 136, 192, 248, 256};
static const int attn_gqa[][2] = {{1, 1}, {4, 2}, {6, 2}, {8, 1}, {12, 1}, {32, 2}};
/* (new tokens, context) of prefill sequences; decode contexts */
static const int prefill_seqs[][2] = {{1, 1}, {17, 17}, {16, 40}, {33, 33}, {5, 300}, {64, 100}, {3, 257}, {48, 48}};
/* chunks of 1..300 new tokens after cached prefixes ending at, before and past block edges (and
 * past the kernels' 32- and 64-key tiles), whole prompts among them */
static const int chunk_seqs[][2] = {{300, 300}, {1, 17}, {129, 160}, {64, 64}, {200, 555}, {7, 33}, {100, 600}, {255, 257}};
/* head dims and (query heads, KV heads) of the chunk cases: the tensor-core instantiations and head
 * dims padded to them; query heads per KV head 1, 4, 8 and 5 */
static const int chunk_hds[] = {64, 80, 96, 128, 256, 8, 40, 72, 88, 112, 136, 200};
static const int chunk_gqa[][2] = {{2, 2}, {8, 2}, {8, 1}, {10, 2}};
static const int decode_ctx[] = {1, 15, 16, 17, 32, 33, 255, 256, 257, 600};

#define ATT_MAX_SEQS 8
#define ATT_MAX_CTX 600
#define ATT_SPLIT_CAP 64

/* One attention case: batch sequences (prefill: new tokens and contexts from seqs, 8 of them, rotated
 * by rot; decode: one new token, contexts from decode_ctx) over a scrambled paged cache; the GPU kernel
 * (decode: with keys per split part, 0 for the heuristic; prefill: llmc_prefill_attn.kernel `kernel`,
 * or with token_rows the decode kernel, one row per new token) against kiln_llm_attention. */
static void attn_case(const attn_shape *sh, kiln_dtype dt, bool decode, bool token_rows, const int (*seqs)[2], int batch,
                      int rot, int part, int kernel, int sm_count) {
    const int hd = sh->hd, ldq = (sh->n_head + 2 * sh->n_kv) * hd, ldo = sh->n_head * hd;
    int n_new[ATT_MAX_SEQS], ctx[ATT_MAX_SEQS], seq_start[ATT_MAX_SEQS + 1], max_new = 0, max_ctx = 0, n_tok = 0;
    int n_blocks = 0;
    for (int s = 0; s < batch; s++) {
        n_new[s] = decode ? 1 : seqs[(s + rot) % 8][0];
        ctx[s] = decode ? decode_ctx[(s * 3 + rot) % 10] : seqs[(s + rot) % 8][1];
        seq_start[s] = n_tok;
        n_tok += n_new[s];
        max_new = n_new[s] > max_new ? n_new[s] : max_new;
        max_ctx = ctx[s] > max_ctx ? ctx[s] : max_ctx;
        n_blocks += (ctx[s] + BS - 1) / BS;
    }
    seq_start[batch] = n_tok;
    const int table_stride = (ATT_MAX_CTX + BS - 1) / BS;
    kiln_kv_cache_config kc = {.n_layer = 1, .n_kv_head = sh->n_kv, .head_dim = hd, .block_size = BS,
                               .n_blocks = n_blocks, .dtype = dt};
    kiln_kv_cache *kv = NULL;
    const size_t block_elems = (size_t)sh->n_kv * BS * hd, cache_elems = (size_t)n_blocks * block_elems;
    uint16_t *q16 = malloc((size_t)n_tok * ldq * 2), *out16 = malloc((size_t)n_tok * ldo * 2);
    uint16_t *k16 = malloc(cache_elems * 2), *v16 = malloc(cache_elems * 2);
    float *qf = malloc((size_t)n_tok * ldo * 4), *ref = malloc((size_t)n_tok * ldo * 4);
    float *scratch = malloc(((size_t)2 * hd + max_new) * ATT_MAX_CTX * 4);
    int32_t *table = calloc((size_t)batch * table_stride, 4);
    int32_t *perm = malloc((size_t)n_blocks * 4);
    int32_t *rows = malloc((size_t)2 * n_tok * 4);
    void *d_q = NULL, *d_out = NULL, *d_k = NULL, *d_v = NULL;
    int32_t *d_meta = NULL;
    float *d_part = NULL;
    unsigned *d_count = NULL, *counts = NULL;
    const int n_counts = batch * llmc_decode_counters(sh->n_head, sh->n_kv);
    char shape[96];
    snprintf(shape, sizeof shape, "hd %d, %d/%d heads, batch %d%s%s, max new %d", hd, sh->n_head, sh->n_kv, batch,
             decode ? (part ? ", part 48" : ", auto split") : "", decode ? "" : token_rows ? ", token rows" : ", chunks",
             max_new);
    if (!q16 || !out16 || !k16 || !v16 || !qf || !ref || !scratch || !table || !perm || !rows) {
        LT_EXPECT(0, "out of memory");
        goto done;
    }
    if (kiln_kv_cache_create(&kc, &kv) != KILN_OK) {
        LT_EXPECT(0, "kv cache: %s", kiln_last_error());
        goto done;
    }
    /* the cache: random keys and values, blocks handed out in a scrambled order */
    lt_fill16(&g_rng, k16, NULL, cache_elems, 1.0f, dt);
    lt_fill16(&g_rng, v16, NULL, cache_elems, 1.0f, dt);
    for (int b = 0; b < n_blocks; b++) {
        memcpy(kiln_kv_cache_keys(kv, 0, b), k16 + (size_t)b * block_elems, block_elems * 2);
        memcpy(kiln_kv_cache_values(kv, 0, b), v16 + (size_t)b * block_elems, block_elems * 2);
        perm[b] = b;
    }
    for (int i = n_blocks - 1; i > 0; i--) {
        g_rng = g_rng * 1664525u + 1013904223u;
        const int j = (int)((g_rng >> 8) % (uint32_t)(i + 1)), t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
    }
    for (int s = 0, next = 0; s < batch; s++)
        for (int b = 0; b < (ctx[s] + BS - 1) / BS; b++) table[s * table_stride + b] = perm[next++];
    /* queries: the q part of qkv rows (k and v parts random too: never read as queries) */
    lt_fill16(&g_rng, q16, NULL, (size_t)n_tok * ldq, 2.0f, dt);
    for (int t = 0; t < n_tok; t++)
        for (int i = 0; i < ldo; i++) qf[(size_t)t * ldo + i] = lt_to_f32(q16[(size_t)t * ldq + i], dt);
    for (int s = 0; s < batch; s++) {
        const kiln_llm_seq_kv skv = {kv, 0, table + s * table_stride};
        kiln_llm_attention(&skv, n_new[s], ctx[s], 0, sh->n_head, qf + (size_t)seq_start[s] * ldo, ldo,
                           ref + (size_t)seq_start[s] * ldo, ldo, scratch);
    }
    LT_CUDA(cudaMalloc(&d_q, (size_t)n_tok * ldq * 2));
    LT_CUDA(cudaMalloc(&d_out, (size_t)n_tok * ldo * 2));
    LT_CUDA(cudaMalloc(&d_k, cache_elems * 2));
    LT_CUDA(cudaMalloc(&d_v, cache_elems * 2));
    LT_CUDA(cudaMalloc((void **)&d_meta, ((size_t)batch * table_stride + 2 * ATT_MAX_SEQS + 1 + 2 * (size_t)n_tok) * 4));
    LT_CUDA(cudaMemcpy(d_q, q16, (size_t)n_tok * ldq * 2, cudaMemcpyHostToDevice));
    LT_CUDA(cudaMemcpy(d_k, k16, cache_elems * 2, cudaMemcpyHostToDevice));
    LT_CUDA(cudaMemcpy(d_v, v16, cache_elems * 2, cudaMemcpyHostToDevice));
    int32_t *d_table = d_meta, *d_ctx = d_meta + (size_t)batch * table_stride, *d_start = d_ctx + ATT_MAX_SEQS;
    LT_CUDA(cudaMemcpy(d_table, table, (size_t)batch * table_stride * 4, cudaMemcpyHostToDevice));
    LT_CUDA(cudaMemcpy(d_ctx, ctx, (size_t)batch * 4, cudaMemcpyHostToDevice));
    LT_CUDA(cudaMemcpy(d_start, seq_start, (size_t)(batch + 1) * 4, cudaMemcpyHostToDevice));
    int32_t *d_row_seq = d_start + ATT_MAX_SEQS + 1; /* token rows: [n_tok] sequences, then [n_tok] positions */
    for (int s = 0; s < batch; s++)
        for (int j = 0; j < n_new[s]; j++) {
            rows[seq_start[s] + j] = s;
            rows[n_tok + seq_start[s] + j] = ctx[s] - n_new[s] + j;
        }
    LT_CUDA(cudaMemcpy(d_row_seq, rows, (size_t)2 * n_tok * 4, cudaMemcpyHostToDevice));
    LT_CUDA(cudaMemset(d_out, 0xff, (size_t)n_tok * ldo * 2)); /* NaN poison */
    kiln_status st;
    if (decode || token_rows) {
        LT_CUDA(cudaMalloc((void **)&d_part, (size_t)batch * sh->n_head * ATT_SPLIT_CAP * (hd + 2) * 4));
        LT_CUDA(cudaMalloc((void **)&d_count, (size_t)n_counts * sizeof(unsigned)));
        LT_CUDA(cudaMemset(d_count, 0, (size_t)n_counts * sizeof(unsigned)));
        llmc_decode_attn a;
        memset(&a, 0, sizeof a);
        a.dtype = dt;
        a.head_dim = hd;
        a.n_head = sh->n_head;
        a.n_kv_head = sh->n_kv;
        a.n_seqs = token_rows ? n_tok : batch;
        a.block_size = BS;
        a.max_ctx = ATT_MAX_CTX;
        a.q = d_q;
        a.ldq = ldq;
        a.out = d_out;
        a.ldo = ldo;
        a.ctx_len = d_ctx;
        a.table = d_table;
        a.table_stride = table_stride;
        a.kc = d_k;
        a.vc = d_v;
        a.part = d_part;
        a.split_cap = ATT_SPLIT_CAP;
        a.count = d_count;
        a.sm_count = sm_count;
        a.part_keys = token_rows ? -1 : part;
        if (token_rows) {
            a.row_seq = d_row_seq;
            a.row_pos = d_row_seq + n_tok;
        }
        st = llmc_decode_attention(&a, NULL);
    } else {
        llmc_prefill_attn a;
        memset(&a, 0, sizeof a);
        a.dtype = dt;
        a.head_dim = hd;
        a.n_head = sh->n_head;
        a.n_kv_head = sh->n_kv;
        a.n_seqs = batch;
        a.block_size = BS;
        a.max_new = max_new;
        a.q = d_q;
        a.ldq = ldq;
        a.out = d_out;
        a.ldo = ldo;
        a.seq_start = d_start;
        a.ctx_len = d_ctx;
        a.table = d_table;
        a.table_stride = table_stride;
        a.kc = d_k;
        a.vc = d_v;
        a.kernel = kernel;
        st = llmc_prefill_attention(&a, NULL);
    }
    LT_EXPECT(st == KILN_OK, "%s: %s", shape, kiln_last_error());
    LT_CUDA(cudaDeviceSynchronize());
    LT_CUDA(cudaMemcpy(out16, d_out, (size_t)n_tok * ldo * 2, cudaMemcpyDeviceToHost));
    lt_err er = {0, 0};
    for (size_t i = 0; i < (size_t)n_tok * ldo; i++) lt_err_add(&er, lt_to_f32(out16[i], dt), ref[i]);
    const double err = lt_err_rel(&er), tol = dt == KILN_F16 ? 5e-3 : 2e-2;
    bool counters_zero = true;
    if (decode || token_rows) {
        counts = malloc((size_t)n_counts * sizeof *counts);
        if (!counts) {
            LT_EXPECT(0, "out of memory");
            goto done;
        }
        LT_CUDA(cudaMemcpy(counts, d_count, (size_t)n_counts * sizeof *counts, cudaMemcpyDeviceToHost));
        for (int i = 0; i < n_counts; i++) counters_zero = counters_zero && counts[i] == 0;
        LT_EXPECT(counters_zero, "%s: a split counter was not left at zero", shape);
    }
    report(decode ? "decode" : token_rows ? "token rows" : kernel == LLMC_PREFILL_CUDA_CORES ? "prefill" : "prefill tc",
           shape, dt, err, tol,
           st == KILN_OK && err <= tol && counters_zero);
done:
    kiln_kv_cache_free(kv);
    cudaFree(d_q);
    cudaFree(d_out);
    cudaFree(d_k);
    cudaFree(d_v);
    cudaFree(d_meta);
    cudaFree(d_part);
    cudaFree(d_count);
    free(counts);
    free(q16);
    free(out16);
    free(k16);
    free(v16);
    free(qf);
    free(ref);
    free(scratch);
    free(table);
    free(perm);
    free(rows);
}

static void test_attention(int sm_count) {
    /* the tensor-core prefill kernel needs sm_80: before it, its cases run the CUDA-core kernel */
    int cc_major = 0;
    if (cudaDeviceGetAttribute(&cc_major, cudaDevAttrComputeCapabilityMajor, 0) != cudaSuccess) cc_major = 0;
    const int tc = cc_major >= 8 ? LLMC_PREFILL_TENSOR_CORES : LLMC_PREFILL_CUDA_CORES;
    if (tc != LLMC_PREFILL_TENSOR_CORES) printf("(sm_%d.x: no tensor-core prefill; its cases run on CUDA cores)\n", cc_major);
    const int n_hd = (int)(sizeof attn_hds / sizeof attn_hds[0]), n_gqa = (int)(sizeof attn_gqa / sizeof attn_gqa[0]);
    static const int batches[] = {1, 3, 8};
    for (int di = 0; di < 2; di++) {
        const kiln_dtype dt = di ? KILN_BF16 : KILN_F16;
        for (int hi = 0; hi < n_hd; hi++)
            for (int k = 0; k < 3; k++) {
                const int gi = (hi + 2 * k) % n_gqa; /* three GQA shapes per head dim, every shape over the table */
                const attn_shape sh = {attn_hds[hi], attn_gqa[gi][0], attn_gqa[gi][1]};
                const int batch = batches[(hi + k) % 3], rot = hi + k;
                attn_case(&sh, dt, false, false, prefill_seqs, batch, rot, 0, LLMC_PREFILL_CUDA_CORES, sm_count);
                attn_case(&sh, dt, false, false, prefill_seqs, batch, rot, 0, tc, sm_count);
                attn_case(&sh, dt, false, true, prefill_seqs, batch, rot, 0, 0, sm_count);
                attn_case(&sh, dt, true, false, NULL, batch, rot, 0, 0, sm_count);
                attn_case(&sh, dt, true, false, NULL, batch, rot, 48, 0, sm_count);
            }
        /* chunked prefill on the tensor cores: every chunk head dim with every GQA shape, batch 1 over
         * sequences 0, 2, 4 and 6 of the table, then batches 1 and 3 from starts rotating with the head dim */
        const int n_chd = (int)(sizeof chunk_hds / sizeof chunk_hds[0]);
        const int n_cgqa = (int)(sizeof chunk_gqa / sizeof chunk_gqa[0]);
        for (int hi = 0; hi < n_chd; hi++)
            for (int gi = 0; gi < n_cgqa; gi++) {
                const attn_shape sh = {chunk_hds[hi], chunk_gqa[gi][0], chunk_gqa[gi][1]};
                attn_case(&sh, dt, false, false, chunk_seqs, 1, 2 * gi, 0, tc, sm_count);
                attn_case(&sh, dt, false, false, chunk_seqs, gi % 2 ? 3 : 1, 2 * gi + 1 + hi, 0, tc, sm_count);
            }
        /* the CUDA-core kernel on the long chunks too, at a fast path and a generic head dim */
        for (int i = 0; i < 2; i++) {
            const attn_shape sh = {i ? 72 : 128, 8, 2};
            attn_case(&sh, dt, false, false, chunk_seqs, 3, 4 * i, 0, LLMC_PREFILL_CUDA_CORES, sm_count);
        }
    }
    /* what the kernels refuse: a head dim not a multiple of 8, one past 256, heads not a multiple */
    static const attn_shape bad[] = {{12, 2, 2}, {264, 2, 2}, {64, 6, 4}};
    for (int i = 0; i < 3; i++) {
        llmc_decode_attn a;
        memset(&a, 0, sizeof a);
        a.dtype = KILN_F16;
        a.head_dim = bad[i].hd;
        a.n_head = bad[i].n_head;
        a.n_kv_head = bad[i].n_kv;
        a.n_seqs = 1;
        a.block_size = BS;
        a.max_ctx = 16;
        a.split_cap = 1;
        LT_EXPECT(llmc_decode_attention(&a, NULL) == KILN_ERR_INVALID_ARGUMENT, "decode attention took hd %d, %d/%d heads",
               bad[i].hd, bad[i].n_head, bad[i].n_kv);
        llmc_prefill_attn p;
        memset(&p, 0, sizeof p);
        p.dtype = KILN_F16;
        p.head_dim = bad[i].hd;
        p.n_head = bad[i].n_head;
        p.n_kv_head = bad[i].n_kv;
        p.n_seqs = 1;
        p.block_size = BS;
        p.max_new = 1;
        LT_EXPECT(llmc_prefill_attention(&p, NULL) == KILN_ERR_INVALID_ARGUMENT, "prefill attention took hd %d, %d/%d heads",
               bad[i].hd, bad[i].n_head, bad[i].n_kv);
        p.head_dim = 64;
        p.n_head = p.n_kv_head = 2;
        p.kernel = LLMC_PREFILL_TENSOR_CORES + 1 + i;
        LT_EXPECT(llmc_prefill_attention(&p, NULL) == KILN_ERR_INVALID_ARGUMENT, "prefill attention took kernel %d", p.kernel);
    }
}

/* ---------------------------------------------------------------- RoPE + KV write */

#define ROPE_SEQS 3
static const int rope_pos[] = {0, 15, 16, 17, 31, 32, 47, 100}; /* positions, block edges among them */

static void rope_case(int hd, int n_head, int n_kv, bool rotate, kiln_dtype dt) {
    const int n_pos = (int)(sizeof rope_pos / sizeof rope_pos[0]), n_tok = ROPE_SEQS * n_pos;
    const int ldq = (n_head + 2 * n_kv) * hd, half = hd / 2, table_stride = 8, n_blocks = ROPE_SEQS * table_stride;
    kiln_kv_cache_config kc = {.n_layer = 1, .n_kv_head = n_kv, .head_dim = hd, .block_size = BS, .n_blocks = n_blocks,
                               .dtype = dt};
    kiln_kv_cache *kv = NULL;
    const size_t block_elems = (size_t)n_kv * BS * hd, cache_elems = (size_t)n_blocks * block_elems;
    uint16_t *qkv = malloc((size_t)n_tok * ldq * 2), *got = malloc((size_t)n_tok * ldq * 2);
    uint16_t *k16 = malloc(cache_elems * 2), *v16 = malloc(cache_elems * 2);
    float *row = malloc((size_t)ldq * 4), *cs = malloc((size_t)hd * 4);
    double *inv = malloc((size_t)ROPE_SEQS * half * sizeof *inv);
    int32_t pos[ROPE_SEQS * 8], seq[ROPE_SEQS * 8], table[ROPE_SEQS * 8];
    void *d_qkv = NULL, *d_k = NULL, *d_v = NULL;
    int32_t *d_meta = NULL;
    double *d_inv = NULL;
    char shape[96];
    snprintf(shape, sizeof shape, "hd %d, %d/%d heads, %s", hd, n_head, n_kv, rotate ? "rotated" : "no rotation");
    if (!qkv || !got || !k16 || !v16 || !row || !cs || !inv) {
        LT_EXPECT(0, "out of memory");
        goto done;
    }
    if (kiln_kv_cache_create(&kc, &kv) != KILN_OK) {
        LT_EXPECT(0, "kv cache: %s", kiln_last_error());
        goto done;
    }
    lt_fill16(&g_rng, k16, NULL, cache_elems, 1.0f, dt); /* the slots no token writes must keep these */
    lt_fill16(&g_rng, v16, NULL, cache_elems, 1.0f, dt);
    for (int b = 0; b < n_blocks; b++) {
        memcpy(kiln_kv_cache_keys(kv, 0, b), k16 + (size_t)b * block_elems, block_elems * 2);
        memcpy(kiln_kv_cache_values(kv, 0, b), v16 + (size_t)b * block_elems, block_elems * 2);
        table[b] = (b * 7 + 3) % n_blocks; /* sequence b / 8, block b % 8: scrambled */
    }
    for (int s = 0; s < ROPE_SEQS; s++)
        for (int i = 0; i < half; i++) inv[s * half + i] = pow(10000.0 * (s + 1), -2.0 * i / hd);
    for (int t = 0; t < n_tok; t++) {
        seq[t] = t % ROPE_SEQS;
        pos[t] = rope_pos[t / ROPE_SEQS];
    }
    lt_fill16(&g_rng, qkv, NULL, (size_t)n_tok * ldq, 2.0f, dt);
    LT_CUDA(cudaMalloc(&d_qkv, (size_t)n_tok * ldq * 2));
    LT_CUDA(cudaMalloc(&d_k, cache_elems * 2));
    LT_CUDA(cudaMalloc(&d_v, cache_elems * 2));
    LT_CUDA(cudaMalloc((void **)&d_meta, (size_t)(3 * ROPE_SEQS * 8) * 4));
    LT_CUDA(cudaMalloc((void **)&d_inv, (size_t)ROPE_SEQS * half * sizeof *inv));
    LT_CUDA(cudaMemcpy(d_qkv, qkv, (size_t)n_tok * ldq * 2, cudaMemcpyHostToDevice));
    LT_CUDA(cudaMemcpy(d_k, k16, cache_elems * 2, cudaMemcpyHostToDevice));
    LT_CUDA(cudaMemcpy(d_v, v16, cache_elems * 2, cudaMemcpyHostToDevice));
    LT_CUDA(cudaMemcpy(d_meta, pos, sizeof pos, cudaMemcpyHostToDevice));
    LT_CUDA(cudaMemcpy(d_meta + ROPE_SEQS * 8, seq, sizeof seq, cudaMemcpyHostToDevice));
    LT_CUDA(cudaMemcpy(d_meta + 2 * ROPE_SEQS * 8, table, sizeof table, cudaMemcpyHostToDevice));
    LT_CUDA(cudaMemcpy(d_inv, inv, (size_t)ROPE_SEQS * half * sizeof *inv, cudaMemcpyHostToDevice));
    llmc_rope_kv a;
    memset(&a, 0, sizeof a);
    a.dtype = dt;
    a.n_tokens = n_tok;
    a.n_head = n_head;
    a.n_kv_head = n_kv;
    a.head_dim = hd;
    a.block_size = BS;
    a.qkv = d_qkv;
    a.ldq = ldq;
    a.positions = d_meta;
    a.tok_seq = d_meta + ROPE_SEQS * 8;
    a.inv_freq = rotate ? d_inv : NULL;
    a.inv_freq_stride = half;
    a.table = d_meta + 2 * ROPE_SEQS * 8;
    a.table_stride = table_stride;
    a.kc = d_k;
    a.vc = d_v;
    const kiln_status st = llmc_rope_kv_launch(&a, NULL);
    LT_EXPECT(st == KILN_OK, "rope %s: %s", shape, kiln_last_error());
    LT_CUDA(cudaDeviceSynchronize());
    /* the CPU: rotate q and k of each token (in FP32, angles in double as the kernel), write k and v */
    lt_err er = {0, 0};
    LT_CUDA(cudaMemcpy(got, d_qkv, (size_t)n_tok * ldq * 2, cudaMemcpyDeviceToHost));
    for (int t = 0; t < n_tok; t++) {
        for (int i = 0; i < ldq; i++) row[i] = lt_to_f32(qkv[(size_t)t * ldq + i], dt);
        if (rotate) {
            for (int i = 0; i < half; i++) {
                const double ang = (double)pos[t] * inv[seq[t] * half + i];
                cs[i] = (float)cos(ang);
                cs[half + i] = (float)sin(ang);
            }
            kiln_llm_rope(row, n_head + n_kv, hd, hd, cs, cs + half);
        }
        const kiln_llm_seq_kv skv = {kv, 0, table + seq[t] * table_stride};
        kiln_llm_kv_write(&skv, pos[t], row + (size_t)n_head * hd, row + (size_t)(n_head + n_kv) * hd);
        for (int i = 0; i < n_head * hd; i++) { /* q in place (k and v parts of qkv: read only) */
            const float want = lt_to_f32(lt_from_f32(row[i], dt), dt);
            lt_err_add(&er, lt_to_f32(got[(size_t)t * ldq + i], dt), want);
        }
    }
    LT_CUDA(cudaMemcpy(k16, d_k, cache_elems * 2, cudaMemcpyDeviceToHost));
    LT_CUDA(cudaMemcpy(v16, d_v, cache_elems * 2, cudaMemcpyDeviceToHost));
    int v_mismatch = 0;
    for (int b = 0; b < n_blocks; b++) {
        const uint16_t *kw = kiln_kv_cache_keys(kv, 0, b), *vw = kiln_kv_cache_values(kv, 0, b);
        for (size_t i = 0; i < block_elems; i++) {
            const float want = lt_to_f32(kw[i], dt);
            lt_err_add(&er, lt_to_f32(k16[(size_t)b * block_elems + i], dt), want);
            v_mismatch += vw[i] != v16[(size_t)b * block_elems + i];
        }
    }
    LT_EXPECT(v_mismatch == 0, "rope %s %s: %d cached values differ", shape, lt_dtype_name(dt), v_mismatch);
    const double err = lt_err_rel(&er), tol = dt == KILN_F16 ? 2e-3 : 1.6e-2;
    report("rope+kv", shape, dt, err, tol, st == KILN_OK && err <= tol && v_mismatch == 0);
done:
    kiln_kv_cache_free(kv);
    cudaFree(d_qkv);
    cudaFree(d_k);
    cudaFree(d_v);
    cudaFree(d_meta);
    cudaFree(d_inv);
    free(qkv);
    free(got);
    free(k16);
    free(v16);
    free(row);
    free(cs);
    free(inv);
}

static void test_rope(void) {
    static const int shapes[][3] = {{8, 2, 2}, {16, 4, 1}, {24, 3, 3}, {64, 8, 2}, {80, 4, 4},
                                    {96, 6, 2}, {128, 8, 1}, {136, 2, 2}, {256, 4, 2}};
    for (int di = 0; di < 2; di++)
        for (int i = 0; i < 9; i++)
            for (int r = 0; r < 2; r++)
                rope_case(shapes[i][0], shapes[i][1], shapes[i][2], r == 0, di ? KILN_BF16 : KILN_F16);
}

/* ---------------------------------------------------------------- residual add + norm */

#define NORM_XROWS 6

static void norm_case(int d, int n_rows, bool layer, bool with_delta, bool store, bool gather, kiln_dtype dt) {
    static const int32_t rows_idx[] = {4, 0, 5, 2, 1};
    const float eps = 1e-5f;
    const size_t xn = (size_t)NORM_XROWS * d;
    float *x = malloc(xn * 4), *xg = malloc(xn * 4), *w = malloc((size_t)d * 4), *b = malloc((size_t)d * 4);
    float *v = malloc((size_t)d * 4), *y = malloc((size_t)d * 4);
    uint16_t *delta = malloc(xn * 2), *h = malloc((size_t)n_rows * d * 2);
    float *d_x = NULL, *d_w = NULL, *d_b = NULL;
    void *d_delta = NULL, *d_h = NULL;
    int32_t *d_rows = NULL;
    char shape[96];
    snprintf(shape, sizeof shape, "d %d, %d rows, %s%s%s%s", d, n_rows, layer ? "LayerNorm" : "RMSNorm",
             with_delta ? " + residual" : "", store ? ", stored" : "", gather ? ", gathered" : "");
    if (!x || !xg || !w || !b || !v || !y || !delta || !h) {
        LT_EXPECT(0, "out of memory");
        goto done;
    }
    for (size_t i = 0; i < xn; i++) x[i] = 3.0f * lt_urand(&g_rng) + 0.5f;
    lt_fill16(&g_rng, delta, NULL, xn, 2.0f, dt);
    for (int i = 0; i < d; i++) {
        w[i] = 1.0f + 0.5f * lt_urand(&g_rng);
        b[i] = 0.5f * lt_urand(&g_rng);
    }
    LT_CUDA(cudaMalloc((void **)&d_x, xn * 4));
    LT_CUDA(cudaMalloc((void **)&d_w, (size_t)d * 4));
    LT_CUDA(cudaMalloc((void **)&d_b, (size_t)d * 4));
    LT_CUDA(cudaMalloc(&d_delta, xn * 2));
    LT_CUDA(cudaMalloc(&d_h, (size_t)n_rows * d * 2));
    LT_CUDA(cudaMalloc((void **)&d_rows, sizeof rows_idx));
    LT_CUDA(cudaMemcpy(d_x, x, xn * 4, cudaMemcpyHostToDevice));
    LT_CUDA(cudaMemcpy(d_w, w, (size_t)d * 4, cudaMemcpyHostToDevice));
    LT_CUDA(cudaMemcpy(d_b, b, (size_t)d * 4, cudaMemcpyHostToDevice));
    LT_CUDA(cudaMemcpy(d_delta, delta, xn * 2, cudaMemcpyHostToDevice));
    LT_CUDA(cudaMemcpy(d_rows, rows_idx, sizeof rows_idx, cudaMemcpyHostToDevice));
    LT_CUDA(cudaMemset(d_h, 0xff, (size_t)n_rows * d * 2));
    const kiln_status st = llmc_add_norm_launch(dt, NULL, d_x, d, n_rows, gather ? d_rows : NULL,
                                                with_delta ? d_delta : NULL, store, d_w, 0.0f, layer ? d_b : NULL, eps,
                                                d_h);
    LT_EXPECT(st == KILN_OK, "norm %s: %s", shape, kiln_last_error());
    LT_CUDA(cudaDeviceSynchronize());
    LT_CUDA(cudaMemcpy(h, d_h, (size_t)n_rows * d * 2, cudaMemcpyDeviceToHost));
    LT_CUDA(cudaMemcpy(xg, d_x, xn * 4, cudaMemcpyDeviceToHost));
    lt_err er = {0, 0};
    int x_wrong = 0;
    bool touched[NORM_XROWS] = {false};
    for (int r = 0; r < n_rows; r++) {
        const int t = gather ? rows_idx[r] : r;
        touched[t] = true;
        for (int i = 0; i < d; i++) v[i] = x[(size_t)t * d + i] + (with_delta ? lt_to_f32(delta[(size_t)t * d + i], dt) : 0.0f);
        kiln_llm_norm(v, 1, d, w, 0.0f, layer ? b : NULL, eps, y);
        for (int i = 0; i < d; i++) {
            lt_err_add(&er, lt_to_f32(h[(size_t)r * d + i], dt), y[i]);
            x_wrong += xg[(size_t)t * d + i] != (store ? v[i] : x[(size_t)t * d + i]);
        }
    }
    for (int t = 0; t < NORM_XROWS; t++) /* rows no output reads stay as they were */
        for (int i = 0; i < d && !touched[t]; i++) x_wrong += xg[(size_t)t * d + i] != x[(size_t)t * d + i];
    LT_EXPECT(x_wrong == 0, "norm %s %s: %d residual values wrong", shape, lt_dtype_name(dt), x_wrong);
    const double err = lt_err_rel(&er), tol = dt == KILN_F16 ? 4e-3 : 1.6e-2;
    report("add+norm", shape, dt, err, tol, st == KILN_OK && err <= tol && x_wrong == 0);
done:
    cudaFree(d_x);
    cudaFree(d_w);
    cudaFree(d_b);
    cudaFree(d_delta);
    cudaFree(d_h);
    cudaFree(d_rows);
    free(x);
    free(xg);
    free(w);
    free(b);
    free(v);
    free(y);
    free(delta);
    free(h);
}

static void test_norm(void) {
    static const int ds[] = {8, 64, 80, 768, 2048, 5120, 8192, LLMC_MAX_D};
    for (int di = 0; di < 2; di++)
        for (int i = 0; i < 8; i++)
            for (int k = 0; k < 4; k++) /* (LayerNorm?, residual?, stored?, gathered?) over the table */
                norm_case(ds[i], k % 2 ? 5 : 1 + i % 4, (i + k) % 2 == 0, k != 3, k == 1 || k == 2, k >= 2,
                          di ? KILN_BF16 : KILN_F16);
}

/* ---------------------------------------------------------------- GEMV family */

static void gemv_case(int K, int N, int n, kiln_dtype dt) {
    uint16_t *w16 = malloc((size_t)N * K * 2), *x16 = malloc((size_t)n * K * 2), *b16 = malloc((size_t)N * 2);
    float *wf = malloc((size_t)N * K * 4), *xf = malloc((size_t)n * K * 4), *bf = malloc((size_t)N * 4);
    float *ref = malloc((size_t)n * N * 4), *refb = malloc((size_t)n * N * 4), *yh = malloc((size_t)n * N * 4);
    void *d_w = NULL, *d_x = NULL, *d_b = NULL, *d_y = NULL;
    char shape[96];
    if (!w16 || !x16 || !b16 || !wf || !xf || !bf || !ref || !refb || !yh) {
        LT_EXPECT(0, "out of memory");
        goto done;
    }
    lt_fill16(&g_rng, w16, wf, (size_t)N * K, 1.0f, dt);
    lt_fill16(&g_rng, x16, xf, (size_t)n * K, 1.0f, dt);
    lt_fill16(&g_rng, b16, bf, (size_t)N, 1.0f, dt);
    kiln_llm_linear(xf, K, n, K, wf, NULL, N, ref, N, 0);
    kiln_llm_linear(xf, K, n, K, wf, bf, N, refb, N, 0);
    LT_CUDA(cudaMalloc(&d_w, (size_t)N * K * 2));
    LT_CUDA(cudaMalloc(&d_x, (size_t)n * K * 2));
    LT_CUDA(cudaMalloc(&d_b, (size_t)N * 2));
    LT_CUDA(cudaMalloc(&d_y, (size_t)n * N * 4));
    LT_CUDA(cudaMemcpy(d_w, w16, (size_t)N * K * 2, cudaMemcpyHostToDevice));
    LT_CUDA(cudaMemcpy(d_x, x16, (size_t)n * K * 2, cudaMemcpyHostToDevice));
    LT_CUDA(cudaMemcpy(d_b, b16, (size_t)N * 2, cudaMemcpyHostToDevice));
    for (int cfg = 0; cfg < LLMC_GEMV_CONFIGS; cfg++)
        for (int v = 0; v < 3; v++) { /* bias + 16-bit out, 16-bit out, FP32 out */
            const bool bias = v == 0, f32 = v == 2;
            LT_CUDA(cudaMemset(d_y, 0xff, (size_t)n * N * 4));
            const kiln_status st = llmc_gemv_launch(dt, NULL, cfg, d_x, K, n, K, d_w, bias ? d_b : NULL, N, d_y, N, f32);
            LT_EXPECT(st == KILN_OK, "gemv: %s", kiln_last_error());
            LT_CUDA(cudaDeviceSynchronize());
            LT_CUDA(cudaMemcpy(yh, d_y, (size_t)n * N * (f32 ? 4 : 2), cudaMemcpyDeviceToHost));
            const float *want = bias ? refb : ref;
            lt_err er = {0, 0};
            for (size_t i = 0; i < (size_t)n * N; i++) {
                const double got = f32 ? yh[i] : lt_to_f32(((const uint16_t *)yh)[i], dt);
                lt_err_add(&er, got, want[i]);
            }
            const double err = lt_err_rel(&er), tol = f32 ? 1e-4 : dt == KILN_F16 ? 1.5e-3 : 1e-2;
            snprintf(shape, sizeof shape, "%s, K %d N %d n %d%s%s", llmc_gemv_config_name(cfg), K, N, n,
                     bias ? ", bias" : "", f32 ? ", fp32 out" : "");
            report("gemv", shape, dt, err, tol, st == KILN_OK && err <= tol);
        }
done:
    cudaFree(d_w);
    cudaFree(d_x);
    cudaFree(d_b);
    cudaFree(d_y);
    free(w16);
    free(x16);
    free(b16);
    free(wf);
    free(xf);
    free(bf);
    free(ref);
    free(refb);
    free(yh);
}

static void test_gemv(void) {
    static const int shapes[][3] = {{64, 5, 2}, {256, 7, 3}, {1000, 301, 8}, {4096, 2048, 1}, {768, 2304, 3}};
    for (int di = 0; di < 2; di++)
        for (int i = 0; i < 5; i++) gemv_case(shapes[i][0], shapes[i][1], shapes[i][2], di ? KILN_BF16 : KILN_F16);
}

/* ---------------------------------------------------------------- fused GEMV */

#define FUSED_RES_ROWS 9 /* residual rows the norm prologue may gather from */

static const char *const fused_epi_name[] = {"store", "gelu", "swiglu", "geglu", "residual"};

/* One fused GEMV (llmc_gemv_fused_launch) in every configuration against the CPU ops it replaces, on
 * values rounded to dt where the unfused kernels round them: the norm (kiln_llm_norm, LayerNorm with a
 * shift or RMSNorm with Gemma's 1 + w) of gathered FP32 residual rows, then kiln_llm_linear, then GELU,
 * kiln_llm_gated or the add into the residual. epi: LLMC_EPI_*; f32: FP32 output (plain store). */
static void fused_case(int K, int N, int n, int epi, bool f32, kiln_dtype dt, cudaStream_t stream, bool pdl) {
    static const int32_t rows_idx[LLMC_GEMV_MAX] = {7, 0, 4, 8, 2, 1, 6, 3};
    const bool gated = epi == LLMC_EPI_SWIGLU || epi == LLMC_EPI_GEGLU, resid = epi == LLMC_EPI_RESIDUAL;
    const bool layer = (K / 8 + n) % 2 == 0; /* LayerNorm or RMSNorm by shape */
    const int NW = gated ? 2 * N : N, ldx = K + 8, ldres = resid ? N + 3 : K, ldy = NW + 5;
    const float eps = 1e-5f, w_offset = layer ? 0.0f : 1.0f;
    const size_t res_n = (size_t)(resid ? n : FUSED_RES_ROWS) * ldres;
    uint16_t *w16 = malloc((size_t)NW * K * 2), *b16 = malloc((size_t)NW * 2), *x16 = malloc((size_t)n * ldx * 2);
    float *wf = malloc((size_t)NW * K * 4), *bf = malloc((size_t)NW * 4), *xf = malloc((size_t)n * K * 4);
    float *res = malloc(res_n * 4), *resg = malloc(res_n * 4), *nw = malloc((size_t)K * 4), *nb = malloc((size_t)K * 4);
    float *want = malloc((size_t)n * NW * 4), *yh = malloc((size_t)n * ldy * 4);
    void *d_w = NULL, *d_b = NULL, *d_x = NULL, *d_y = NULL;
    float *d_res = NULL, *d_nw = NULL, *d_nb = NULL;
    int32_t *d_rows = NULL;
    char shape[96];
    if (!w16 || !b16 || !x16 || !wf || !bf || !xf || !res || !resg || !nw || !nb || !want || !yh) {
        LT_EXPECT(0, "out of memory");
        goto done;
    }
    lt_fill16(&g_rng, w16, wf, (size_t)NW * K, 1.0f, dt);
    lt_fill16(&g_rng, b16, bf, (size_t)NW, 1.0f, dt);
    lt_fill16(&g_rng, x16, NULL, (size_t)n * ldx, 1.0f, dt);
    for (size_t i = 0; i < res_n; i++) res[i] = 3.0f * lt_urand(&g_rng) + 0.5f;
    for (int i = 0; i < K; i++) {
        nw[i] = 1.0f + 0.5f * lt_urand(&g_rng);
        nb[i] = 0.5f * lt_urand(&g_rng);
    }
    /* the CPU: the product's input rows, then the product and what follows it */
    for (int t = 0; t < n; t++) {
        float *xr = xf + (size_t)t * K;
        if (resid) {
            for (int i = 0; i < K; i++) xr[i] = lt_to_f32(x16[(size_t)t * ldx + i], dt);
        } else {
            kiln_llm_norm(res + (size_t)rows_idx[t] * ldres, 1, K, nw, w_offset, layer ? nb : NULL, eps, xr);
            for (int i = 0; i < K; i++) xr[i] = lt_to_f32(lt_from_f32(xr[i], dt), dt);
        }
    }
    kiln_llm_linear(xf, K, n, K, wf, bf, NW, want, NW, 0);
    if (!f32)
        for (size_t i = 0; i < (size_t)n * NW; i++) want[i] = lt_to_f32(lt_from_f32(want[i], dt), dt);
    if (epi == LLMC_EPI_GELU) kiln_llm_gelu_tanh(want, (size_t)n * NW);
    if (gated) kiln_llm_gated(want, n, N, epi == LLMC_EPI_GEGLU ? KILN_GATE_GELU_TANH : KILN_GATE_SILU);
    LT_CUDA(cudaMalloc(&d_w, (size_t)NW * K * 2));
    LT_CUDA(cudaMalloc(&d_b, (size_t)NW * 2));
    LT_CUDA(cudaMalloc(&d_x, (size_t)n * ldx * 2));
    LT_CUDA(cudaMalloc(&d_y, (size_t)n * ldy * 4));
    LT_CUDA(cudaMalloc((void **)&d_res, res_n * 4));
    LT_CUDA(cudaMalloc((void **)&d_nw, (size_t)K * 4));
    LT_CUDA(cudaMalloc((void **)&d_nb, (size_t)K * 4));
    LT_CUDA(cudaMalloc((void **)&d_rows, sizeof rows_idx));
    LT_CUDA(cudaMemcpy(d_w, w16, (size_t)NW * K * 2, cudaMemcpyHostToDevice));
    LT_CUDA(cudaMemcpy(d_b, b16, (size_t)NW * 2, cudaMemcpyHostToDevice));
    LT_CUDA(cudaMemcpy(d_x, x16, (size_t)n * ldx * 2, cudaMemcpyHostToDevice));
    LT_CUDA(cudaMemcpy(d_nw, nw, (size_t)K * 4, cudaMemcpyHostToDevice));
    LT_CUDA(cudaMemcpy(d_nb, nb, (size_t)K * 4, cudaMemcpyHostToDevice));
    LT_CUDA(cudaMemcpy(d_rows, rows_idx, sizeof rows_idx, cudaMemcpyHostToDevice));
    for (int cfg = 0; cfg < LLMC_GEMV_CONFIGS; cfg++) {
        LT_CUDA(cudaMemcpy(d_res, res, res_n * 4, cudaMemcpyHostToDevice));
        LT_CUDA(cudaMemset(d_y, 0xff, (size_t)n * ldy * 4));
        llmc_gemv_fused p;
        memset(&p, 0, sizeof p);
        p.dtype = dt;
        p.cfg = cfg;
        p.n = n;
        p.K = K;
        p.N = N;
        p.prologue = resid ? LLMC_PRO_INPUT : LLMC_PRO_NORM;
        p.epilogue = epi;
        p.x = d_x;
        p.ldx = ldx;
        p.res = d_res;
        p.ldres = ldres;
        p.rows = d_rows;
        p.norm_w = d_nw;
        p.norm_b = layer ? d_nb : NULL;
        p.norm_w_offset = w_offset;
        p.eps = eps;
        p.w = d_w;
        p.bias = d_b;
        p.y = d_y;
        p.ldy = ldy;
        p.out_f32 = f32;
        p.pdl = pdl && cfg % 2 == 1; /* the attribute is harmless with nothing before */
        p.sm_count = cfg < 4 ? 132 : 2; /* a grid of few blocks: each loops over row groups */
        const kiln_status st = llmc_gemv_fused_launch(&p, stream);
        LT_EXPECT(st == KILN_OK, "fused gemv: %s", kiln_last_error());
        LT_CUDA(cudaStreamSynchronize(stream));
        LT_CUDA(cudaMemcpy(yh, d_y, (size_t)n * ldy * (f32 ? 4 : 2), cudaMemcpyDeviceToHost));
        LT_CUDA(cudaMemcpy(resg, d_res, res_n * 4, cudaMemcpyDeviceToHost));
        lt_err er = {0, 0};
        int untouched_wrong = 0; /* residual values, and with ldy output padding, no product may write */
        for (int t = 0; t < n; t++)
            for (int j = 0; j < N; j++) {
                const size_t o = (size_t)t * ldy + j;
                const double got = resid ? resg[(size_t)t * ldres + j]
                                   : f32 ? yh[o] : lt_to_f32(((const uint16_t *)yh)[o], dt);
                const double prod = want[(size_t)t * NW + j];
                const double w = resid ? res[(size_t)t * ldres + j] + prod : prod;
                lt_err_add(&er, got, w);
            }
        for (size_t i = 0; i < res_n; i++) {
            const bool written = resid && (int)(i % ldres) < N;
            untouched_wrong += !written && resg[i] != res[i];
        }
        if (!resid) /* the poison stays past N in each output row */
            for (int t = 0; t < n; t++)
                for (int j = N; j < ldy && j < N + 4; j++)
                    untouched_wrong += f32 ? !isnan(yh[(size_t)t * ldy + j])
                                           : ((const uint16_t *)yh)[(size_t)t * ldy + j] != 0xffff;
        const double err = lt_err_rel(&er);
        const double tol = f32 ? (dt == KILN_F16 ? 5e-4 : 2e-3)
                           : gated ? (dt == KILN_F16 ? 4e-3 : 1.6e-2) : (dt == KILN_F16 ? 1.5e-3 : 1e-2);
        snprintf(shape, sizeof shape, "#%d, K %d N %d n %d, %s%s%s%s", cfg, K, N, n,
                 resid ? "" : layer ? "LN, " : "RMS, ", fused_epi_name[epi], f32 ? ", fp32 out" : "", p.pdl ? ", pdl" : "");
        report("gemv+fuse", shape, dt, err, tol, st == KILN_OK && err <= tol && untouched_wrong == 0);
        LT_EXPECT(untouched_wrong == 0, "fused gemv %s: %d values outside the product changed", shape, untouched_wrong);
    }
done:
    cudaFree(d_w);
    cudaFree(d_b);
    cudaFree(d_x);
    cudaFree(d_y);
    cudaFree(d_res);
    cudaFree(d_nw);
    cudaFree(d_nb);
    cudaFree(d_rows);
    free(w16);
    free(b16);
    free(x16);
    free(wf);
    free(bf);
    free(xf);
    free(res);
    free(resg);
    free(nw);
    free(nb);
    free(want);
    free(yh);
}

static void test_fused_gemv(void) {
    /* the last: 96 KB of normed rows, past the 48 KB a kernel has without opting in */
    static const int shapes[][3] = {{64, 5, 1}, {256, 7, 3}, {1000, 301, 8}, {4096, 1024, 5}, {768, 2304, 2},
                                    {6144, 96, 8}};
    cudaStream_t stream = NULL;
    int cc_major = 0;
    if (cudaDeviceGetAttribute(&cc_major, cudaDevAttrComputeCapabilityMajor, 0) != cudaSuccess) cc_major = 0;
    if (cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking) != cudaSuccess) {
        LT_EXPECT(0, "fused gemv: no stream");
        return;
    }
    for (int di = 0; di < 2; di++)
        for (int i = 0; i < 6; i++)
            for (int e = 0; e <= LLMC_EPI_RESIDUAL + 1; e++) /* every epilogue, then the FP32 store */
                fused_case(shapes[i][0], shapes[i][1], shapes[i][2], e > LLMC_EPI_RESIDUAL ? LLMC_EPI_STORE : e,
                           e > LLMC_EPI_RESIDUAL, di ? KILN_BF16 : KILN_F16, stream, cc_major >= 9);
    cudaStreamDestroy(stream);
}

/* ---------------------------------------------------------------- sampling */

/* The lowest index of the largest value; NaN never wins; a row of NaNs gives 0. */
static int cpu_argmax(const float *row, int n) {
    int best = -1;
    for (int i = 0; i < n; i++)
        if (!isnan(row[i]) && (best < 0 || row[i] > row[best])) best = i;
    return best < 0 ? 0 : best;
}

static void test_sampling(void) {
    static const int vocabs[] = {1, 7, 1000, 50257, 128256};
    enum { ROWS = 4 };
    float *logits = malloc((size_t)ROWS * 128256 * 4);
    float *d_logits = NULL;
    int32_t *d_ids = NULL, ids[ROWS];
    kiln_sampler *cpu = NULL;
    kiln_llm_cuda_sampler *gpu = NULL;
    if (!logits) {
        LT_EXPECT(0, "out of memory");
        goto done;
    }
    LT_CUDA(cudaMalloc((void **)&d_logits, (size_t)ROWS * 128256 * 4));
    LT_CUDA(cudaMalloc((void **)&d_ids, sizeof ids));
    for (int vi = 0; vi < 5; vi++) {
        const int V = vocabs[vi];
        /* rows: random; a tie of the maximum at three ids; NaNs and -inf around a maximum; all NaN */
        for (int r = 0; r < ROWS; r++)
            for (int i = 0; i < V; i++) logits[(size_t)r * V + i] = 4.0f * lt_urand(&g_rng);
        for (int i = V / 3; i < V; i += V / 3 + 1) logits[(size_t)V + i] = 9.0f;
        for (int i = 0; i < V; i += 3) logits[(size_t)2 * V + i] = i % 2 ? NAN : -INFINITY;
        for (int i = 0; i < V; i++) logits[(size_t)3 * V + i] = NAN;
        LT_CUDA(cudaMemcpy(d_logits, logits, (size_t)ROWS * V * 4, cudaMemcpyHostToDevice));
        const kiln_status st = llmc_argmax_launch(NULL, d_logits, ROWS, V, d_ids);
        LT_EXPECT(st == KILN_OK, "argmax: %s", kiln_last_error());
        LT_CUDA(cudaDeviceSynchronize());
        LT_CUDA(cudaMemcpy(ids, d_ids, sizeof ids, cudaMemcpyDeviceToHost));
        int wrong = 0;
        for (int r = 0; r < ROWS; r++) wrong += ids[r] != cpu_argmax(logits + (size_t)r * V, V);
        char shape[96];
        snprintf(shape, sizeof shape, "vocab %d, %d rows (ties, NaN, -inf)", V, ROWS);
        g_cases++;
        printf("%-10s %-44s %-5s %10d %8d %s\n", "argmax", shape, "fp32", wrong, 0, wrong ? "FAIL" : "ok");
        LT_EXPECT(wrong == 0, "argmax vocab %d: %d rows differ from the CPU", V, wrong);
    }
    /* the sampler: rows of finite logits, four parameter sets, against kiln_sample_next */
    for (int vi = 1; vi < 4; vi++) {
        const int V = vocabs[vi];
        if (kiln_sampler_create(V, &cpu) != KILN_OK || kiln_llm_cuda_sampler_create(0, V, ROWS, 64, &gpu) != KILN_OK) {
            LT_EXPECT(0, "sampler: %s", kiln_last_error());
            goto done;
        }
        for (size_t i = 0; i < (size_t)ROWS * V; i++) logits[i] = 4.0f * lt_urand(&g_rng);
        static const int32_t prompt[] = {1, 2, 3, 5}, generated[] = {5, 6, 6};
        kiln_sampling_params p[ROWS];
        for (int r = 0; r < ROWS; r++) {
            p[r] = kiln_sampling_defaults();
            p[r].seed = 1000 + (uint64_t)r;
        }
        p[1].temperature = 0.8f;
        p[1].top_k = 40;
        p[2].temperature = 1.0f;
        p[2].top_p = 0.9f;
        p[3].temperature = 1.2f;
        p[3].min_p = 0.05f;
        p[3].repetition_penalty = 1.3f;
        p[3].frequency_penalty = 0.5f;
        p[3].presence_penalty = 0.25f;
        kiln_llm_cuda_sample_row rows[ROWS];
        for (int r = 0; r < ROWS; r++) {
            rows[r].params = &p[r];
            rows[r].prompt = prompt;
            rows[r].n_prompt = 4;
            rows[r].generated = generated;
            rows[r].n_generated = 3;
        }
        int32_t tokens[ROWS];
        const kiln_status st = kiln_llm_cuda_sample(gpu, NULL, logits, ROWS, rows, tokens);
        LT_EXPECT(st == KILN_OK, "cuda sample: %s", kiln_last_error());
        int wrong = 0;
        for (int r = 0; r < ROWS && st == KILN_OK; r++) {
            kiln_sample out;
            if (kiln_sample_next(cpu, &p[r], logits + (size_t)r * V, prompt, 4, generated, 3, &out) != KILN_OK) {
                LT_EXPECT(0, "kiln_sample_next: %s", kiln_last_error());
                wrong++;
                continue;
            }
            wrong += out.token != tokens[r];
        }
        char shape[96];
        snprintf(shape, sizeof shape, "vocab %d: greedy, top-k, top-p, min-p+penalties", V);
        g_cases++;
        printf("%-10s %-44s %-5s %10d %8d %s\n", "sample", shape, "fp32", wrong, 0, wrong || st ? "FAIL" : "ok");
        LT_EXPECT(wrong == 0 && st == KILN_OK, "sampler vocab %d: %d rows differ from kiln_sample_next", V, wrong);
        kiln_sampler_free(cpu);
        kiln_llm_cuda_sampler_free(gpu);
        cpu = NULL;
        gpu = NULL;
    }
done:
    kiln_sampler_free(cpu);
    kiln_llm_cuda_sampler_free(gpu);
    cudaFree(d_logits);
    cudaFree(d_ids);
    free(logits);
}
#endif

int main(void) {
    char desc[256];
    if (kiln_llm_cuda_device_check(0, desc, sizeof desc) != KILN_OK) {
        printf("skipped: no GPU (%s)\n", desc);
        return 77;
    }
#ifdef KILN_HAVE_CUDA
    int sm_count = 0;
    if (cudaDeviceGetAttribute(&sm_count, cudaDevAttrMultiProcessorCount, 0) != cudaSuccess) sm_count = 132;
    printf("test_llm_ops on %s\n\n%-10s %-44s %-5s %10s %8s %s\n", desc, "kernel", "case", "dtype", "max rel err", "tol",
           "result");
    test_attention(sm_count);
    test_rope();
    test_norm();
    test_gemv();
    test_fused_gemv();
    test_sampling();
    printf("\ntest_llm_ops: %d cases, %d failure(s)\n", g_cases, lt_failures);
    return lt_failures ? 1 : 0;
#else
    return 77;
#endif
}
